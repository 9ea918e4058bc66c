/* Pool allocations are malloc'd blocks with a 64-byte header in front of the data. The header links the
 * block into the pool's list of live allocations, which is what makes leak reports and exact per-tag
 * accounting possible without a side table.
 *
 * A dry pool's allocation is its header alone, and its address a slot of a reserved, inaccessible address
 * range: unique and non-NULL, and any access to it faults at once instead of corrupting real memory. A table
 * from slot to header stands in for "the header in front", so that every other function treats both alike. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "segtrain/pool.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGNMENT 64
#define HEADER_MAGIC 0x5e67a11c0ffee123ull

typedef struct header {
    uint64_t magic;
    size_t bytes;
    const char *what;
    struct pool *owner;
    struct header *prev, *next;
    void *dry_at; /* a dry allocation's address (its slot); NULL for real ones */
    mem_tag tag;
} header;
_Static_assert(sizeof(header) <= ALIGNMENT, "pool header must fit in one alignment unit");

struct pool {
    pthread_mutex_t lock;
    pool_kind kind;
    bool dry;
    size_t capacity;
    pool_stats stats;
    header *live_list;
    /* pool_record_peak_parts: the live list at the last peak */
    bool record, snap_failed;
    pool_part *snap;
    size_t n_snap, cap_snap;
};

/* ---- dry addresses ---- */

/* Slots are 16 MiB apart in a 16 TiB range, and the lowest free slot is taken first: a step's few thousand live
 * allocations sit at the range's start, so that a view far into one (a 48 GB weight block) stays in the range. */
#define DRY_STRIDE ((uintptr_t)1 << 24)
#define DRY_SLOTS ((uintptr_t)1 << 20) /* live dry allocations at once, over all dry pools */

static struct {
    pthread_mutex_t lock;
    char *_Atomic base; /* DRY_SLOTS * DRY_STRIDE bytes reserved with no access, no memory behind them; set once */
    header **slot;
    uint32_t *free_list; /* slots not in use */
    size_t n_free;
} dry = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool in_dry_range(const void *ptr)
{
    const char *base = atomic_load_explicit(&dry.base, memory_order_acquire); /* read without the lock */
    return base && (const char *)ptr >= base && (uintptr_t)((const char *)ptr - base) < DRY_SLOTS * DRY_STRIDE;
}

bool pool_is_dry_ptr(const void *ptr) { return ptr && in_dry_range(ptr); }

static header *header_of(const void *ptr)
{
    if (in_dry_range(ptr)) return dry.slot[(uintptr_t)((const char *)ptr - dry.base) / DRY_STRIDE];
    return (header *)((char *)ptr - ALIGNMENT);
}

/* A slot for h; NULL when none is left or the range cannot be reserved. */
static void *dry_take(header *h)
{
    pthread_mutex_lock(&dry.lock);
    if (!dry.base) {
        void *base = mmap(NULL, DRY_SLOTS * DRY_STRIDE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        dry.slot = calloc(DRY_SLOTS, sizeof *dry.slot);
        dry.free_list = malloc(DRY_SLOTS * sizeof *dry.free_list);
        if (base == MAP_FAILED || !dry.slot || !dry.free_list) {
            if (base != MAP_FAILED) munmap(base, DRY_SLOTS * DRY_STRIDE);
            free(dry.slot), free(dry.free_list);
            dry.slot = NULL, dry.free_list = NULL;
            pthread_mutex_unlock(&dry.lock);
            return NULL;
        }
        for (size_t i = 0; i < DRY_SLOTS; i++) dry.free_list[i] = (uint32_t)(DRY_SLOTS - 1 - i);
        dry.n_free = DRY_SLOTS;
        atomic_store_explicit(&dry.base, base, memory_order_release); /* last: the tables are ready */
    }
    void *ptr = NULL;
    if (dry.n_free) {
        const uint32_t i = dry.free_list[--dry.n_free];
        dry.slot[i] = h;
        ptr = dry.base + i * DRY_STRIDE;
    }
    pthread_mutex_unlock(&dry.lock);
    return ptr;
}

static void dry_give_back(const void *ptr)
{
    pthread_mutex_lock(&dry.lock);
    const uint32_t i = (uint32_t)((uintptr_t)((const char *)ptr - dry.base) / DRY_STRIDE);
    dry.slot[i] = NULL;
    dry.free_list[dry.n_free++] = i;
    pthread_mutex_unlock(&dry.lock);
}

/* Frees an allocation's header and, for a dry one, its slot. */
static void free_header(header *h)
{
    if (h->dry_at) dry_give_back(h->dry_at);
    h->magic = 0;
    free(h);
}


const char *mem_tag_name(mem_tag tag)
{
    static const char *names[MEM_TAG_COUNT] = {"weights",     "gradients",  "optimizer",
                                               "activations", "boundaries", "workspace"};
    return (unsigned)tag < MEM_TAG_COUNT ? names[tag] : "?";
}

/* A training step allocates and frees the same large buffers every step. glibc would return each to the kernel
 * (mmap above 128 KiB-32 MiB, trimming the heap top) and take it back as fresh zeroed pages next step: page faults
 * that cost more than the work they feed. Keeping freed memory in the heap is what a GPU framework's caching
 * allocator does; it changes no accounting (the pools count requested bytes). */
static void keep_freed_memory(void)
{
    mallopt(M_MMAP_THRESHOLD, 32 << 20); /* glibc's maximum: larger blocks are mmap'd regardless */
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

pool *pool_create_dry(pool_kind kind, size_t capacity)
{
    pool *p = pool_create(kind, capacity);
    if (p) p->dry = true;
    return p;
}

bool pool_is_dry(const pool *p) { return p->dry; }

pool *pool_create(pool_kind kind, size_t capacity)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, keep_freed_memory);
    pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->kind = kind;
    p->capacity = capacity;
    return p;
}

/* The live list into p->snap (the lock held). */
static void snapshot(pool *p)
{
    if (!p->record) return;
    if (p->stats.allocations > p->cap_snap) {
        const size_t cap = 2 * p->stats.allocations;
        pool_part *snap = realloc(p->snap, cap * sizeof *snap);
        if (!snap) {
            p->snap_failed = true;
            return;
        }
        p->snap = snap, p->cap_snap = cap;
    }
    p->n_snap = 0;
    for (const header *h = p->live_list; h; h = h->next)
        p->snap[p->n_snap++] = (pool_part){.what = h->what ? h->what : "?", .tag = h->tag, .bytes = h->bytes, .count = 1};
    p->snap_failed = false;
}

void pool_record_peak_parts(pool *p, bool on)
{
    pthread_mutex_lock(&p->lock);
    p->record = on;
    snapshot(p);
    pthread_mutex_unlock(&p->lock);
}

static int by_name(const void *a, const void *b)
{
    const pool_part *x = a, *y = b;
    const int c = strcmp(x->what, y->what);
    return c ? c : (int)x->tag - (int)y->tag;
}

static int by_bytes(const void *a, const void *b)
{
    const pool_part *x = a, *y = b;
    return x->bytes != y->bytes ? (x->bytes < y->bytes ? 1 : -1) : by_name(a, b);
}

size_t pool_peak_parts(pool *p, pool_part *out, size_t max)
{
    pthread_mutex_lock(&p->lock);
    size_t n = 0;
    if (p->record && !p->snap_failed && p->n_snap) {
        qsort(p->snap, p->n_snap, sizeof *p->snap, by_name);
        for (size_t i = 0; i < p->n_snap; i++) /* merged in place: n parts stay at the front */
            if (n && !by_name(&p->snap[n - 1], &p->snap[i])) {
                p->snap[n - 1].bytes += p->snap[i].bytes;
                p->snap[n - 1].count += p->snap[i].count;
            } else p->snap[n++] = p->snap[i];
        p->n_snap = n;
        qsort(p->snap, n, sizeof *p->snap, by_bytes);
        memcpy(out, p->snap, (n < max ? n : max) * sizeof *out);
    }
    pthread_mutex_unlock(&p->lock);
    return n;
}

size_t pool_destroy(pool *p)
{
    if (!p) return 0;
    free(p->snap);
    size_t leaks = 0;
    for (header *h = p->live_list; h;) {
        header *next = h->next;
        fprintf(stderr, "segtrain: %s pool leak: %zu bytes (%s) for '%s'\n",
                p->kind == POOL_DEVICE ? "device" : "host", h->bytes, mem_tag_name(h->tag),
                h->what ? h->what : "?");
        free_header(h);
        h = next;
        leaks++;
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
    return leaks;
}

st_status pool_alloc(pool *p, size_t bytes, mem_tag tag, const char *what, void **out)
{
    *out = NULL;
    if ((unsigned)tag >= MEM_TAG_COUNT) return st_fail(ST_ERR_INVALID, "pool_alloc: bad tag %d", (int)tag);
    const int device = p->kind == POOL_DEVICE;
    const st_status oom = device ? ST_ERR_OOM : ST_ERR_HOST_OOM;
    what = what ? what : "?";

    /* One critical section for check, allocation and accounting: allocations are few per step, and
     * this keeps the capacity check exact when a copy-engine thread allocates concurrently. */
    pthread_mutex_lock(&p->lock);
    pool_stats *s = &p->stats;
    if (p->capacity && (bytes > p->capacity || s->live > p->capacity - bytes)) {
        size_t live = s->live;
        pthread_mutex_unlock(&p->lock);
        char b[3][24];
        return st_fail(oom, "out of %s memory: %s for '%s' (%s) with %s live of %s capacity",
                       device ? "device" : "host", st_bytes(b[0], bytes), what, mem_tag_name(tag), st_bytes(b[1], live),
                       st_bytes(b[2], p->capacity));
    }
    size_t rounded = (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    header *h = p->dry ? malloc(sizeof *h) : aligned_alloc(ALIGNMENT, ALIGNMENT + rounded);
    void *dry_at = h && p->dry ? dry_take(h) : NULL;
    if (!h || (p->dry && !dry_at)) {
        pthread_mutex_unlock(&p->lock);
        free(h);
        char b[24];
        return st_fail(oom, "the system refused %s for '%s' (%s)%s", st_bytes(b, bytes), what, mem_tag_name(tag),
                       p->dry ? " in a dry pool: no address left" : "");
    }
    *h = (header){.magic = HEADER_MAGIC, .bytes = bytes, .what = what, .owner = p, .dry_at = dry_at, .tag = tag};
    h->next = p->live_list;
    if (p->live_list) p->live_list->prev = h;
    p->live_list = h;
    s->live += bytes;
    s->live_by_tag[tag] += bytes;
    s->allocations++;
    if (s->live_by_tag[tag] > s->peak_by_tag[tag]) s->peak_by_tag[tag] = s->live_by_tag[tag];
    if (s->live > s->peak) {
        s->peak = s->live;
        memcpy(s->at_peak_by_tag, s->live_by_tag, sizeof s->at_peak_by_tag);
        snapshot(p);
    }
    pthread_mutex_unlock(&p->lock);
    *out = dry_at ? dry_at : (char *)h + ALIGNMENT;
    return ST_OK;
}

void zero_bytes(void *ptr, size_t bytes)
{
    if (pool_is_dry_ptr(ptr)) return;
    enum { CHUNK = 1 << 18 }; /* below one chunk, a parallel region costs more than it saves */
    const int64_t chunks = (int64_t)((bytes + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        const size_t at = (size_t)c * CHUNK, n = bytes - at < CHUNK ? bytes - at : CHUNK;
        memset((char *)ptr + at, 0, n);
    }
}

st_status pool_alloc_zero(pool *p, size_t bytes, mem_tag tag, const char *what, void **out)
{
    st_status s = pool_alloc(p, bytes, tag, what, out);
    if (s == ST_OK) zero_bytes(*out, bytes);
    return s;
}

void pool_free(pool *p, void *ptr)
{
    if (!ptr) return;
    header *h = header_of(ptr);
    if (h->magic != HEADER_MAGIC || h->owner != p) /* going on would corrupt the accounting */
        st_panic("pool_free of a pointer this %s pool did not allocate", p->kind == POOL_DEVICE ? "device" : "host");
    pthread_mutex_lock(&p->lock);
    if (h->prev) h->prev->next = h->next;
    else p->live_list = h->next;
    if (h->next) h->next->prev = h->prev;
    p->stats.live -= h->bytes;
    p->stats.live_by_tag[h->tag] -= h->bytes;
    p->stats.allocations--;
    pthread_mutex_unlock(&p->lock);
    free_header(h);
}

void pool_retag(pool *p, void *ptr, mem_tag tag)
{
    header *h = header_of(ptr);
    pthread_mutex_lock(&p->lock);
    p->stats.live_by_tag[h->tag] -= h->bytes;
    p->stats.live_by_tag[tag] += h->bytes;
    if (p->stats.live_by_tag[tag] > p->stats.peak_by_tag[tag]) p->stats.peak_by_tag[tag] = p->stats.live_by_tag[tag];
    h->tag = tag;
    pthread_mutex_unlock(&p->lock);
}

size_t pool_size_of(const void *ptr) { return ptr ? header_of(ptr)->bytes : 0; }

void pool_get_stats(pool *p, pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    pthread_mutex_unlock(&p->lock);
}

size_t pool_live(pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t v = p->stats.live;
    pthread_mutex_unlock(&p->lock);
    return v;
}

size_t pool_peak(pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t v = p->stats.peak;
    pthread_mutex_unlock(&p->lock);
    return v;
}

void pool_reset_peak(pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stats.peak = p->stats.live;
    memcpy(p->stats.peak_by_tag, p->stats.live_by_tag, sizeof p->stats.peak_by_tag);
    memcpy(p->stats.at_peak_by_tag, p->stats.live_by_tag, sizeof p->stats.at_peak_by_tag);
    snapshot(p);
    pthread_mutex_unlock(&p->lock);
}

size_t pool_capacity(const pool *p) { return p->capacity; }

void pool_set_capacity(pool *p, size_t capacity)
{
    pthread_mutex_lock(&p->lock);
    p->capacity = capacity;
    pthread_mutex_unlock(&p->lock);
}

pool_kind pool_get_kind(const pool *p) { return p->kind; }


size_t pool_system_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (size_t)kib * 1024;
}
