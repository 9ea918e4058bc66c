/* The pools are the ground truth for every reported peak: their arithmetic must be exact. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "segtrain/pool.h"
#include "testkit.h"

static void test_live_and_peak_arithmetic(void)
{
    pool *p = pool_create(POOL_DEVICE, 0);
    void *a, *b, *c, *d;
    CHECK(pool_alloc(p, 1000, MEM_WEIGHTS, "a", &a) == ST_OK);
    CHECK(pool_alloc(p, 24, MEM_ACTIVATIONS, "b", &b) == ST_OK);
    CHECK(pool_live(p) == 1024 && pool_peak(p) == 1024);
    pool_free(p, b);
    CHECK(pool_live(p) == 1000 && pool_peak(p) == 1024);
    CHECK(pool_alloc(p, 3, MEM_WORKSPACE, "c", &c) == ST_OK); /* sizes are exact, not rounded */
    CHECK(pool_live(p) == 1003 && pool_peak(p) == 1024);
    CHECK(pool_alloc(p, 500, MEM_BOUNDARIES, "d", &d) == ST_OK);
    CHECK(pool_live(p) == 1503 && pool_peak(p) == 1503);
    CHECK(pool_size_of(d) == 500 && pool_size_of(c) == 3);
    CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)c % 64) == 0 && ((uintptr_t)d % 64) == 0);

    pool_stats s;
    pool_get_stats(p, &s);
    CHECK(s.live_by_tag[MEM_WEIGHTS] == 1000 && s.live_by_tag[MEM_WORKSPACE] == 3);
    CHECK(s.live_by_tag[MEM_BOUNDARIES] == 500 && s.live_by_tag[MEM_ACTIVATIONS] == 0);
    CHECK(s.peak_by_tag[MEM_ACTIVATIONS] == 24); /* each tag's own high-water mark */
    CHECK(s.at_peak_by_tag[MEM_ACTIVATIONS] == 0 && s.at_peak_by_tag[MEM_BOUNDARIES] == 500);
    CHECK(s.allocations == 3);

    pool_free(p, d);
    pool_reset_peak(p); /* a new window starts at what is live now */
    CHECK(pool_peak(p) == 1003);
    pool_get_stats(p, &s);
    CHECK(s.peak_by_tag[MEM_BOUNDARIES] == 0 && s.peak_by_tag[MEM_WEIGHTS] == 1000);
    pool_free(p, c);
    pool_free(p, a);
    pool_free(p, NULL);
    CHECK(pool_live(p) == 0 && pool_peak(p) == 1003);
    CHECK(pool_destroy(p) == 0);
}

static void test_out_of_memory_is_a_status(void)
{
    pool *p = pool_create(POOL_DEVICE, 4096);
    void *a, *b, *big;
    CHECK(pool_alloc(p, 3000, MEM_ACTIVATIONS, "first", &a) == ST_OK);
    CHECK(pool_alloc(p, 2000, MEM_ACTIVATIONS, "attn.probs", &b) == ST_ERR_OOM);
    CHECK(b == NULL);
    CHECKF(strstr(st_error(), "attn.probs") && strstr(st_error(), "device"), "message: %s", st_error());
    CHECK(pool_live(p) == 3000 && pool_peak(p) == 3000); /* the refusal changed nothing */
    CHECK(pool_alloc(p, (size_t)-1, MEM_ACTIVATIONS, "huge", &big) == ST_ERR_OOM); /* no overflow */
    CHECK(pool_alloc(p, 1096, MEM_ACTIVATIONS, "exact fit", &b) == ST_OK); /* recoverable, to the byte */
    CHECK(pool_live(p) == 4096);
    pool_free(p, a);
    pool_free(p, b);
    pool_set_capacity(p, 0);
    CHECK(pool_alloc(p, 1 << 20, MEM_WEIGHTS, "unlimited now", &a) == ST_OK);
    pool_free(p, a);
    CHECK(pool_destroy(p) == 0);

    pool *h = pool_create(POOL_HOST, 100);
    CHECK(pool_alloc(h, 101, MEM_BOUNDARIES, "boundary", &a) == ST_ERR_HOST_OOM);
    CHECKF(strstr(st_error(), "host"), "message: %s", st_error());
    CHECK(pool_get_kind(h) == POOL_HOST && pool_capacity(h) == 100);
    CHECK(pool_destroy(h) == 0);
}

static void test_leaks_are_reported(void)
{
    pool *p = pool_create(POOL_HOST, 0);
    void *a, *b, *z;
    CHECK(pool_alloc(p, 10, MEM_OPTIMIZER, "adam.m (deliberate leak)", &a) == ST_OK);
    CHECK(pool_alloc(p, 20, MEM_GRADIENTS, "grad (deliberate leak)", &b) == ST_OK);
    CHECK(pool_alloc_zero(p, 100, MEM_WORKSPACE, "zeroed", &z) == ST_OK);
    int zero = 1;
    for (int i = 0; i < 100; i++) zero &= ((unsigned char *)z)[i] == 0;
    CHECK(zero);
    pool_free(p, z);
    CHECK(pool_destroy(p) == 2);
}

enum { THREAD_ROUNDS = 20000 };

static void *churn(void *arg)
{
    pool *p = arg;
    for (int i = 0; i < THREAD_ROUNDS; i++) {
        void *x;
        if (pool_alloc(p, 64 + (size_t)(i % 7), MEM_WORKSPACE, "churn", &x) == ST_OK) pool_free(p, x);
    }
    return NULL;
}

static void test_concurrent_use(void)
{
    /* a capacity that lets only one thread's allocation in at a time: accounting must stay exact */
    pool *p = pool_create(POOL_DEVICE, 100);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, p);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    pool_stats s;
    pool_get_stats(p, &s);
    CHECK(s.live == 0 && s.allocations == 0);
    CHECKF(s.peak >= 64 && s.peak <= 100, "peak %zu", s.peak);
    CHECK(pool_destroy(p) == 0);
}

/* Sizes read as a person reads them at every scale: a 1 KiB budget is not "0.00 MiB". */
static void test_sizes_read_well(void)
{
    char b[24];
    const struct {
        size_t bytes;
        const char *want;
    } cases[] = {{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {5589934, "5.33 MiB"},
                 {(size_t)3 << 29, "1.50 GiB"}, {(size_t)1 << 40, "1.00 TiB"}, {(size_t)1 << 62, "4.00 EiB"},
                 {SIZE_MAX, "16.00 EiB"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECKF(!strcmp(st_bytes(b, cases[i].bytes), cases[i].want), "%zu bytes read \"%s\", want \"%s\"",
               cases[i].bytes, b, cases[i].want);
    pool *p = pool_create(POOL_DEVICE, 1024);
    void *x;
    CHECK(pool_alloc(p, 2048, MEM_WEIGHTS, "w", &x) == ST_ERR_OOM);
    CHECKF(strstr(st_error(), "2.0 KiB for 'w'") && strstr(st_error(), "of 1.0 KiB capacity"), "%s", st_error());
    pool_destroy(p);
}

/* The same sequence of allocations, frees and retags on a real and a dry pool: the same stats, every field. */
static void replay(pool *p, void **keep)
{
    void *a, *b, *c;
    CHECK(pool_alloc(p, 1000, MEM_WEIGHTS, "w", &a) == ST_OK);
    CHECK(pool_alloc_zero(p, 3u << 20, MEM_ACTIVATIONS, "act", &b) == ST_OK);
    CHECK(pool_alloc(p, 77, MEM_WORKSPACE, "ws", &c) == ST_OK);
    pool_free(p, c);
    pool_retag(p, b, MEM_BOUNDARIES);
    CHECK(pool_alloc(p, 5000, MEM_GRADIENTS, "g", &c) == ST_OK);
    CHECK(pool_size_of(b) == 3u << 20 && pool_size_of(c) == 5000);
    pool_free(p, b);
    pool_free(p, c);
    *keep = a;
}

static void test_dry_pools(void)
{
    pool *real = pool_create(POOL_DEVICE, 0), *dry = pool_create_dry(POOL_DEVICE, 0);
    CHECK(!pool_is_dry(real) && pool_is_dry(dry));
    void *ra, *da;
    replay(real, &ra);
    replay(dry, &da);
    pool_stats rs, ds;
    pool_get_stats(real, &rs), pool_get_stats(dry, &ds);
    CHECKF(memcmp(&rs, &ds, sizeof rs) == 0, "dry stats differ: peak %zu vs %zu, live %zu vs %zu", ds.peak, rs.peak,
           ds.live, rs.live);
    CHECK(!pool_is_dry_ptr(ra) && pool_is_dry_ptr(da) && !pool_is_dry_ptr(NULL));
    CHECK(pool_is_dry_ptr((char *)da + (1u << 20))); /* a view into a dry buffer is dry too */
    /* unique addresses, never NULL, and reused only once freed */
    void *x[64];
    int distinct = 1;
    for (int i = 0; i < 64; i++) CHECK(pool_alloc(dry, 1, MEM_WORKSPACE, "x", &x[i]) == ST_OK && x[i]);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < i; j++) distinct &= x[i] != x[j] && x[i] != da;
    CHECK(distinct);
    for (int i = 0; i < 64; i++) pool_free(dry, x[i]);
    /* terabytes are accounted without being there; the capacity is a status as on a real pool */
    void *huge;
    CHECK(pool_alloc(dry, (size_t)3 << 40, MEM_WEIGHTS, "3 TiB", &huge) == ST_OK && pool_peak(dry) >= (size_t)3 << 40);
    pool_free(dry, huge);
    pool_set_capacity(dry, 1 << 20);
    CHECK(pool_alloc(dry, 2 << 20, MEM_ACTIVATIONS, "too big", &huge) == ST_ERR_OOM && huge == NULL);
    zero_bytes(da, 1000); /* nothing: a dry buffer has no bytes to zero */
    pool_free(real, ra);
    pool_free(dry, da);
    CHECK(pool_destroy(real) == 0 && pool_destroy(dry) == 0);
    /* a leak in a dry pool is reported like any other */
    pool *leaky = pool_create_dry(POOL_HOST, 0);
    void *l;
    CHECK(pool_alloc(leaky, 9, MEM_OPTIMIZER, "dry (deliberate leak)", &l) == ST_OK);
    CHECK(pool_destroy(leaky) == 1);
}

/* An arena stands in for a GPU's memory: mapped with no access, so that the pool touching it (a header, a memset)
 * faults at once. */
typedef struct arena_log {
    int released;
    size_t zeroed;
} arena_log;
static void arena_release(void *base, void *ctx) { ((arena_log *)ctx)->released++; }
static void arena_zero(void *ptr, size_t bytes, void *ctx) { ((arena_log *)ctx)->zeroed += bytes; }

static void test_arena_pools(void)
{
    enum { UNIT = 256, UNITS = 16 << 10 }; /* 4 MiB */
    char *base = mmap(NULL, (size_t)UNIT * UNITS, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(base != MAP_FAILED);
    arena_log log = {0};
    const pool_arena_ops ops = {.release = arena_release, .zero = arena_zero, .ctx = &log};
    CHECK(!pool_create_arena(POOL_DEVICE, base + 64, (size_t)UNIT * 8, UNIT, &ops)); /* base not aligned */
    CHECK(!pool_create_arena(POOL_DEVICE, base, (size_t)UNIT * 8, 3 * UNIT, &ops));  /* not a power of two */
    pool *arena = pool_create_arena(POOL_DEVICE, base, (size_t)UNIT * UNITS, UNIT, &ops);
    pool *heap = pool_create(POOL_DEVICE, (size_t)UNIT * UNITS);
    CHECK(arena && pool_capacity(arena) == (size_t)UNIT * UNITS && !pool_is_dry(arena));
    CHECK(pool_arena_of(base + 12345) == arena && !pool_arena_of(base + (size_t)UNIT * UNITS) && !pool_arena_of(heap));

    /* the accounting is the heap pool's, byte for byte */
    void *ha, *aa;
    replay(heap, &ha);
    replay(arena, &aa);
    pool_stats hs, as;
    pool_get_stats(heap, &hs), pool_get_stats(arena, &as);
    CHECKF(memcmp(&hs, &as, sizeof hs) == 0, "arena stats differ: peak %zu vs %zu", as.peak, hs.peak);
    CHECK(log.zeroed == 3u << 20); /* replay's pool_alloc_zero went to the arena's zero, not memset */
    zero_bytes((char *)aa + UNIT, 100);
    CHECK(log.zeroed == (3u << 20) + 100);
    pool_free(heap, ha);
    pool_free(arena, aa);
    CHECK(pool_live(arena) == 0);

    /* aligned ranges inside the arena, found by address; a freed range is reused by the smallest fit */
    void *a, *b, *c, *d, *e;
    CHECK(pool_alloc(arena, 3 * UNIT, MEM_WEIGHTS, "a", &a) == ST_OK);
    CHECK(pool_alloc(arena, 1, MEM_ACTIVATIONS, "b", &b) == ST_OK);
    CHECK(pool_alloc(arena, 2 * UNIT + 1, MEM_ACTIVATIONS, "c", &c) == ST_OK);
    CHECK(pool_alloc(arena, UNIT, MEM_ACTIVATIONS, "d", &d) == ST_OK);
    CHECK(a == base && b == base + 3 * UNIT && c == base + 4 * UNIT && d == base + 7 * UNIT);
    CHECK(pool_size_of(c) == 2 * UNIT + 1 && pool_size_of(b) == 1);
    CHECK(pool_arena_high(arena) >= 8 * UNIT && pool_arena_high(heap) == 0);
    pool_free(arena, a); /* a hole of 3 units at the start, and one of 3 after c */
    pool_free(arena, b);
    pool_free(arena, d);
    CHECK(pool_alloc(arena, 2 * UNIT, MEM_WORKSPACE, "e", &e) == ST_OK && e == base); /* the 4-unit hole before c */
    pool_free(arena, e);
    pool_free(arena, c);

    /* fragmentation refuses what the capacity allows, says so, and leaves the pool as it was */
    CHECK(!pool_create_arena(POOL_HOST, base + UNIT, 4 * UNIT, UNIT, NULL)); /* inside the live arena */
    char *other = mmap(NULL, 4 * UNIT, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pool *small = pool_create_arena(POOL_HOST, other, 4 * UNIT, UNIT, NULL);
    void *u[4], *big;
    for (int i = 0; i < 4; i++) CHECK(pool_alloc(small, UNIT, MEM_BOUNDARIES, "u", &u[i]) == ST_OK);
    pool_free(small, u[0]);
    pool_free(small, u[2]);
    CHECK(pool_alloc(small, 2 * UNIT, MEM_BOUNDARIES, "two units", &big) == ST_ERR_HOST_OOM && !big);
    CHECKF(strstr(st_error(), "fragmented") && strstr(st_error(), "two units"), "%s", st_error());
    CHECK(pool_live(small) == 2 * UNIT && pool_alloc(small, UNIT, MEM_BOUNDARIES, "u", &u[0]) == ST_OK);
    CHECK(u[0] == other);
    pool_free(small, u[0]), pool_free(small, u[1]), pool_free(small, u[3]);
    CHECK(pool_destroy(small) == 0);
    munmap(other, 4 * UNIT);

    /* a leak is reported as in any pool; the arena goes back to its owner once */
    CHECK(pool_alloc(arena, 10, MEM_OPTIMIZER, "m (deliberate leak)", &a) == ST_OK);
    CHECK(pool_destroy(arena) == 1 && log.released == 1);
    CHECK(!pool_arena_of(base + 12345)); /* gone with its pool */
    CHECK(pool_destroy(heap) == 0);
    munmap(base, (size_t)UNIT * UNITS);
}

/* What was live at the peak, by name: recorded only when asked, merged by name and tag, largest first, and the
 * later, lower live sets leave it as it was at the peak. */
static void test_peak_parts(void)
{
    pool *p = pool_create_dry(POOL_DEVICE, 0);
    pool_part parts[4];
    void *a, *b, *c, *d;
    CHECK(pool_alloc(p, 100, MEM_ACTIVATIONS, "x", &a) == ST_OK);
    CHECK(pool_peak_parts(p, parts, 4) == 0); /* not recording */
    pool_record_peak_parts(p, true);
    CHECK(pool_alloc(p, 50, MEM_ACTIVATIONS, "x", &b) == ST_OK && pool_alloc(p, 300, MEM_WORKSPACE, "w", &c) == ST_OK);
    CHECK(pool_alloc(p, 60, MEM_BOUNDARIES, "x", &d) == ST_OK);
    pool_free(p, c); /* below the peak: the parts stay the peak's */
    CHECK(pool_alloc(p, 10, MEM_WORKSPACE, "later", &c) == ST_OK);
    const size_t n = pool_peak_parts(p, parts, 2);
    CHECKF(n == 3 && !strcmp(parts[0].what, "w") && parts[0].bytes == 300 && parts[0].count == 1 &&
               !strcmp(parts[1].what, "x") && parts[1].tag == MEM_ACTIVATIONS && parts[1].bytes == 150 &&
               parts[1].count == 2, "%zu parts: %s %zu x%zu, %s %zu x%zu", n, parts[0].what, parts[0].bytes,
           parts[0].count, parts[1].what, parts[1].bytes, parts[1].count);
    CHECK(pool_peak_parts(p, parts, 4) == 3 && !strcmp(parts[2].what, "x") && parts[2].tag == MEM_BOUNDARIES &&
          parts[2].bytes == 60);
    pool_free(p, a), pool_free(p, b), pool_free(p, c), pool_free(p, d);
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    test_dry_pools();
    test_live_and_peak_arithmetic();
    test_out_of_memory_is_a_status();
    test_leaks_are_reported();
    test_concurrent_use();
    test_sizes_read_well();
    test_peak_parts();
    test_arena_pools();
    return tk_finish();
}
