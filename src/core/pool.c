/* Pool allocations are malloc'd blocks with a 64-byte header in front of the data. The header links the
 * block into the pool's list of live allocations, which is what makes leak reports and exact per-tag
 * accounting possible without a side table.
 *
 * A dry pool's allocation is its header alone, and its address a slot of a reserved, inaccessible address
 * range: unique and non-NULL, and any access to it faults at once instead of corrupting real memory. A table
 * from slot to header stands in for "the header in front", so that every other function treats both alike.
 *
 * An arena pool's allocations are ranges of one block of memory it was given (a GPU's, which the host may not be
 * able to write a header into): headers live on the host, in a table sorted by address that also tells the free
 * ranges between allocations. */
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
    void *at;     /* a dry allocation's slot or an arena allocation's address; NULL for heap ones */
    mem_tag tag;
} header;
_Static_assert(sizeof(header) <= ALIGNMENT, "pool header must fit in one alignment unit");

typedef struct arena {
    char *base;
    size_t bytes, align, high; /* high: the end of the highest range ever taken, from base */
    header **by_addr;          /* live allocations in address order */
    size_t n, cap;
    pool_arena_ops ops;
} arena;

struct pool {
    pthread_mutex_t lock;
    pool_kind kind;
    bool dry;
    arena *arena; /* NULL: allocations come from the heap */
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

/* ---- arenas ---- */

/* Every arena pool, so that a pointer finds its header without its pool (pool_size_of); few exist at once. `live`
 * counts them, so that with none (the CPU backend) a lookup takes no lock. */
#define ARENAS_MAX 16
static struct {
    pthread_mutex_t lock;
    pool *pools[ARENAS_MAX];
    atomic_int live;
} arenas = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The bytes an allocation takes in an arena: its size rounded up to the alignment (a zero-byte one has an address
 * too, so it takes one unit). */
static size_t arena_span(const arena *a, size_t bytes)
{
    return bytes ? (bytes + a->align - 1) / a->align * a->align : a->align;
}

/* The index of the first live allocation at or above ptr (the lock held). */
static size_t arena_find(const arena *a, const char *ptr)
{
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if ((char *)a->by_addr[mid]->at < ptr) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

pool *pool_arena_of(const void *ptr)
{
    if (!atomic_load_explicit(&arenas.live, memory_order_acquire)) return NULL;
    pool *p = NULL;
    pthread_mutex_lock(&arenas.lock);
    for (int i = 0; i < ARENAS_MAX && !p; i++) {
        pool *q = arenas.pools[i];
        if (q && (const char *)ptr >= q->arena->base && (const char *)ptr < q->arena->base + q->arena->bytes) p = q;
    }
    pthread_mutex_unlock(&arenas.lock);
    return p;
}

/* The arena pool holding ptr and, read under its lock, the header of the allocation that starts there (NULL if none
 * does). */
static pool *arena_pool_of(const void *ptr, header **h)
{
    pool *p = pool_arena_of(ptr);
    if (!p) return NULL;
    pthread_mutex_lock(&p->lock);
    const size_t i = arena_find(p->arena, ptr);
    *h = i < p->arena->n && p->arena->by_addr[i]->at == ptr ? p->arena->by_addr[i] : NULL;
    pthread_mutex_unlock(&p->lock);
    return p;
}

/* Takes the smallest free range that fits h, so that the large buffers of a step do not split the ranges
 * they will need again, and records h in address order (the lock held). ST_ERR_OOM when no free range is large
 * enough (*largest: the largest there is), ST_ERR_HOST_OOM when the table cannot grow. */
static st_status arena_take(arena *a, header *h, size_t *largest)
{
    if (a->n == a->cap) {
        const size_t cap = a->cap ? 2 * a->cap : 256;
        header **grown = realloc(a->by_addr, cap * sizeof *grown);
        if (!grown) return ST_ERR_HOST_OOM;
        a->by_addr = grown, a->cap = cap;
    }
    const size_t span = arena_span(a, h->bytes);
    size_t best = SIZE_MAX, best_at = 0, best_i = 0, from = 0;
    *largest = 0;
    for (size_t i = 0; i <= a->n; i++) { /* the gaps between allocations, and after the last */
        const size_t to = i < a->n ? (size_t)((char *)a->by_addr[i]->at - a->base) : a->bytes;
        if (to - from >= span && to - from < best) best = to - from, best_at = from, best_i = i;
        if (to - from > *largest) *largest = to - from;
        if (i < a->n) from = to + arena_span(a, a->by_addr[i]->bytes);
    }
    if (best == SIZE_MAX) return ST_ERR_OOM;
    memmove(a->by_addr + best_i + 1, a->by_addr + best_i, (a->n - best_i) * sizeof *a->by_addr);
    a->by_addr[best_i] = h;
    a->n++;
    h->at = a->base + best_at;
    if (best_at + span > a->high) a->high = best_at + span;
    return ST_OK;
}

static void arena_give_back(arena *a, header *h)
{
    const size_t i = arena_find(a, h->at);
    memmove(a->by_addr + i, a->by_addr + i + 1, (a->n - i - 1) * sizeof *a->by_addr);
    a->n--;
}

static header *header_of(const void *ptr)
{
    if (in_dry_range(ptr)) return dry.slot[(uintptr_t)((const char *)ptr - dry.base) / DRY_STRIDE];
    header *h = NULL;
    if (arena_pool_of(ptr, &h)) {
        if (!h) st_panic("a pointer inside a pool's arena that no allocation starts at");
        return h;
    }
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

/* Frees an allocation's header and its place: a dry slot, a range of an arena (the pool's lock held), or the heap
 * block it heads. */
static void free_header(pool *p, header *h)
{
    h->magic = 0;
    if (p->dry) dry_give_back(h->at);
    else if (p->arena) arena_give_back(p->arena, h);
    free(h); /* a heap allocation's header heads its data's block: one free for both */
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

pool *pool_create_arena(pool_kind kind, void *base, size_t bytes, size_t align, const pool_arena_ops *ops)
{
    if (!base || !align || (align & (align - 1)) || (uintptr_t)base % align) return NULL;
    pool *p = pool_create(kind, bytes);
    arena *a = p ? calloc(1, sizeof *a) : NULL;
    if (!a) {
        free(p);
        return NULL;
    }
    *a = (arena){.base = base, .bytes = bytes, .align = align, .ops = ops ? *ops : (pool_arena_ops){0}};
    p->arena = a;
    pthread_mutex_lock(&arenas.lock);
    int i = 0, free_at = ARENAS_MAX;
    for (; i < ARENAS_MAX; i++) { /* a pointer must tell its arena: no two overlap */
        const arena *b = arenas.pools[i] ? arenas.pools[i]->arena : NULL;
        if (!b && free_at == ARENAS_MAX) free_at = i;
        if (b && a->base < b->base + b->bytes && b->base < a->base + a->bytes) break;
    }
    const bool ok = i == ARENAS_MAX && free_at < ARENAS_MAX;
    if (ok) arenas.pools[free_at] = p, atomic_fetch_add(&arenas.live, 1);
    pthread_mutex_unlock(&arenas.lock);
    if (!ok) { /* the caller keeps its memory: release is not called */
        free(a);
        free(p);
        return NULL;
    }
    return p;
}

size_t pool_arena_high(pool *p)
{
    pthread_mutex_lock(&p->lock);
    const size_t high = p->arena ? p->arena->high : 0;
    pthread_mutex_unlock(&p->lock);
    return high;
}

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
        free_header(p, h);
        h = next;
        leaks++;
    }
    if (p->arena) {
        pthread_mutex_lock(&arenas.lock);
        for (int i = 0; i < ARENAS_MAX; i++)
            if (arenas.pools[i] == p) arenas.pools[i] = NULL, atomic_fetch_sub(&arenas.live, 1);
        pthread_mutex_unlock(&arenas.lock);
        if (p->arena->ops.release) p->arena->ops.release(p->arena->base, p->arena->ops.ctx);
        free(p->arena->by_addr);
        free(p->arena);
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
    header *h = p->dry || p->arena ? malloc(sizeof *h) : aligned_alloc(ALIGNMENT, ALIGNMENT + rounded);
    if (h) *h = (header){.magic = HEADER_MAGIC, .bytes = bytes, .what = what, .owner = p, .tag = tag};
    size_t largest = 0;
    const st_status taken = h && p->arena ? arena_take(p->arena, h, &largest) : ST_OK;
    if (taken) {
        const size_t live = s->live;
        pthread_mutex_unlock(&p->lock);
        free(h);
        if (taken == ST_ERR_HOST_OOM) return st_host_oom("the allocation table of a pool's arena");
        char b[4][24];
        return st_fail(oom,
                       "out of %s memory: %s for '%s' (%s): %s live of the arena's %s, but no free range that large "
                       "(the largest is %s): the arena is fragmented",
                       device ? "device" : "host", st_bytes(b[0], bytes), what, mem_tag_name(tag),
                       st_bytes(b[1], live), st_bytes(b[2], p->arena->bytes), st_bytes(b[3], largest));
    }
    if (h && p->dry) h->at = dry_take(h);
    if (!h || (p->dry && !h->at)) {
        pthread_mutex_unlock(&p->lock);
        free(h);
        char b[24];
        return st_fail(oom, "the system refused %s for '%s' (%s)%s", st_bytes(b, bytes), what, mem_tag_name(tag),
                       p->dry ? " in a dry pool: no address left" : "");
    }
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
    *out = h->at ? h->at : (char *)h + ALIGNMENT;
    return ST_OK;
}

void zero_bytes(void *ptr, size_t bytes)
{
    if (pool_is_dry_ptr(ptr)) return;
    const pool *in = pool_arena_of(ptr);
    if (in) {
        if (in->arena->ops.zero) in->arena->ops.zero(ptr, bytes, in->arena->ops.ctx);
        else memset(ptr, 0, bytes);
        return;
    }
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
    free_header(p, h);
    pthread_mutex_unlock(&p->lock);
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
