/* Sampling (include/segtrain/sample.h): determinism and independence from the batch, the Euler loop against one
 * written here over model_forward, guidance against two separate forwards, the pool after sampling and after a
 * refused allocation, and the PNG grid's layout. */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "segtrain/model.h"
#include "segtrain/rng.h"
#include "segtrain/sample.h"
#include "testkit.h"

#define RES 8
#define CH 3

static model *make(pool *p, int64_t channels)
{
    model_config mc;
    model *m = NULL;
    CHECK(model_preset("dit-tiny", &mc) == ST_OK);
    mc.channels = channels;
    mc.height = mc.width = RES;
    CHECKF(model_create(&mc, p, &m) == ST_OK, "%s", st_error());
    /* every weight non-zero: DiT's own init zeroes the final layer, which would make v = 0 and images = noise */
    if (m) model_init(m, 11, true);
    return m;
}

static const int64_t PER = CH * RES * RES;

static float *images(int64_t n) { return malloc((size_t)(n * PER) * sizeof(float)); }

static void expect_bitwise_image(const char *what, const float *a, int64_t ia, const float *b, int64_t ib)
{
    tk_expect_bitwise(what, a + ia * PER, b + ib * PER, PER);
}

/* (a) the same seed gives the same bits; image i depends only on (seed, i, its label) */
static void test_determinism(model *m)
{
    printf("-- determinism and independence from the batch\n");
    const sample_settings s = {.steps = 5, .guidance = 4.0f, .seed = 7};
    const float labels[4] = {3, 7, 10, 0}; /* 10 is the null label */
    float *a = images(4), *b = images(4), *c = images(6), *d = images(4), *e = images(1);
    CHECKF(sample_images(m, &s, labels, 4, a) == ST_OK, "%s", st_error());
    CHECKF(sample_images(m, &s, labels, 4, b) == ST_OK, "%s", st_error());
    tk_expect_bitwise("the same seed twice", a, b, 4 * PER);

    /* Another batch of the same size: the same GEMM shapes, so the same bits. */
    const float longer[6] = {3, 7, 10, 0, 1, 2}, other[4] = {3, 1, 5, 0};
    CHECKF(sample_images(m, &s, other, 4, d) == ST_OK, "%s", st_error());
    expect_bitwise_image("image 0 among other labels", d, 0, a, 0);
    expect_bitwise_image("image 3 among other labels", d, 3, a, 3);
    /* Another batch size: the noise is the same, but OpenBLAS picks its kernel by the GEMM's shape (its small-matrix
     * path for small M), which changes the summation order of long rows (fc2, K = 4D = 256) in the last bits, so
     * images agree to rounding only. */
    double *want = malloc((size_t)(4 * PER) * sizeof(double));
    for (int64_t j = 0; j < 4 * PER; j++) want[j] = a[j];
    CHECKF(sample_images(m, &s, longer, 6, c) == ST_OK, "%s", st_error());
    tk_expect_close("images 0-3 of a batch of 6", c, want, 4 * PER, 1e-5);
    CHECKF(sample_images(m, &s, labels, 1, e) == ST_OK, "%s", st_error());
    tk_expect_close("image 0 sampled alone", e, want, PER, 1e-5);
    free(want);

    const sample_settings s2 = {.steps = 5, .guidance = 4.0f, .seed = 8};
    CHECKF(sample_images(m, &s2, labels, 4, b) == ST_OK, "%s", st_error());
    CHECK(memcmp(a, b, (size_t)(4 * PER) * sizeof(float)) != 0);
    int finite = 1, moved = 0;
    for (int64_t j = 0; j < 4 * PER; j++) {
        finite &= isfinite(a[j]) != 0;
        moved |= a[j] != (float)rng_normal(7, rng_stream("sample.noise"), (uint64_t)j);
    }
    CHECKF(finite && moved, "images finite (%d) and not the starting noise (%d)", finite, moved);
    free(a), free(b), free(c), free(d), free(e);
}

static void noise(float *x, int64_t n, uint64_t seed)
{
    for (int64_t j = 0; j < n * PER; j++) x[j] = (float)rng_normal(seed, rng_stream("sample.noise"), (uint64_t)j);
}

/* (b) guidance 1: the Euler loop written out over model_forward */
static void test_unguided_loop(model *m)
{
    printf("-- guidance 1 against a hand-written Euler loop\n");
    const int64_t n = 3;
    const float labels[3] = {2, 9, 10};
    const sample_settings s = {.steps = 4, .guidance = 1.0f, .seed = 3};
    float *got = images(n), *x = images(n), ts[3];
    CHECKF(sample_images(m, &s, labels, n, got) == ST_OK, "%s", st_error());
    noise(x, n, s.seed);
    for (int k = 0; k < s.steps; k++) {
        const float t = (float)(s.steps - k) / (float)s.steps, t_next = (float)(s.steps - k - 1) / (float)s.steps;
        for (int i = 0; i < n; i++) ts[i] = 1000.0f * t;
        const float *v;
        CHECKF(model_forward(m, x, ts, labels, n, false, &v) == ST_OK, "%s", st_error());
        for (int64_t j = 0; v && j < n * PER; j++) x[j] = x[j] + (t_next - t) * v[j];
        model_release(m);
    }
    tk_expect_bitwise("sample_images vs the loop", got, x, n * PER);
    free(got), free(x);
}

/* (c) guidance g: one step against x + dt (v_u + g (v_c - v_u)) from two separate forwards. The sampler runs one
 * forward of 2n, so GEMM blocking may differ from two forwards of n in the last bits: a tolerance. */
static void test_guided_step(model *m)
{
    printf("-- guidance against two separate forwards\n");
    const int64_t n = 3;
    const float labels[3] = {1, 4, 8}, nulls[3] = {10, 10, 10};
    const float g = 3.5f;
    const sample_settings s = {.steps = 1, .guidance = g, .seed = 21};
    float *got = images(n), *x = images(n), *vc = images(n), ts[3] = {1000.0f, 1000.0f, 1000.0f};
    double *want = malloc((size_t)(n * PER) * sizeof(double));
    CHECKF(sample_images(m, &s, labels, n, got) == ST_OK, "%s", st_error());
    noise(x, n, s.seed);
    const float *v;
    CHECKF(model_forward(m, x, ts, labels, n, false, &v) == ST_OK, "%s", st_error());
    if (v) memcpy(vc, v, (size_t)(n * PER) * sizeof(float));
    model_release(m);
    CHECKF(model_forward(m, x, ts, nulls, n, false, &v) == ST_OK, "%s", st_error());
    for (int64_t j = 0; v && j < n * PER; j++) want[j] = x[j] + (0.0 - 1.0) * (v[j] + g * ((double)vc[j] - v[j]));
    model_release(m);
    tk_expect_close("one guided step", got, want, n * PER, 1e-5);

    /* guidance 0 is the unconditional model: the same as guidance 1 on the null label */
    const sample_settings s0 = {.steps = 3, .guidance = 0.0f, .seed = 21}, s1 = {.steps = 3, .guidance = 1.0f, .seed = 21};
    float *u = images(n);
    CHECKF(sample_images(m, &s0, labels, n, got) == ST_OK, "%s", st_error());
    CHECKF(sample_images(m, &s1, nulls, n, u) == ST_OK, "%s", st_error());
    for (int64_t j = 0; j < n * PER; j++) want[j] = u[j];
    tk_expect_close("guidance 0 = unconditional", got, want, n * PER, 1e-5);
    free(got), free(x), free(vc), free(want), free(u);
}

/* (d) nothing stays in the pool, after success and after a refused allocation (the sampler's own or the model's) */
static void test_pool(pool *p, model *m)
{
    printf("-- the pool after sampling\n");
    const size_t resident = pool_live(p);
    pool_stats before, after;
    pool_get_stats(p, &before);
    const int64_t n = 4;
    const float labels[4] = {0, 1, 2, 3};
    const sample_settings s = {.steps = 2, .guidance = 2.0f, .seed = 1};
    float *a = images(n), *b = images(n);
    pool_reset_peak(p);
    CHECKF(sample_images(m, &s, labels, n, a) == ST_OK, "%s", st_error());
    pool_get_stats(p, &after);
    CHECKF(after.live == resident && after.allocations == before.allocations,
           "live %zu in %zu allocations after sampling; %zu in %zu before", after.live, after.allocations, resident,
           before.allocations);
    CHECKF(after.live_by_tag[MEM_ACTIVATIONS] == 0 && after.live_by_tag[MEM_WORKSPACE] == 0,
           "activations %zu, workspace %zu live", after.live_by_tag[MEM_ACTIVATIONS], after.live_by_tag[MEM_WORKSPACE]);
    CHECKF(after.peak > resident && after.peak_by_tag[MEM_WEIGHTS] + after.peak_by_tag[MEM_GRADIENTS] == resident,
           "sampling took activations (peak %zu over resident %zu)", after.peak, resident);

    /* the sampler's own buffers: x, timesteps, the stacked input and labels */
    const size_t own = (size_t)(n * PER) * 4 + (size_t)(2 * n) * 4 + (size_t)(2 * n * PER) * 4 + (size_t)(2 * n) * 8;
    const size_t caps[2] = {resident + 64, resident + own + 4096};
    for (int i = 0; i < 2; i++) {
        pool_set_capacity(p, caps[i]);
        st_status st = sample_images(m, &s, labels, n, b);
        CHECKF(st == ST_ERR_OOM, "capacity resident + %zu: status %d (%s)", caps[i] - resident, (int)st, st_error());
        CHECKF(pool_live(p) == resident, "live %zu after a refused allocation, %zu resident", pool_live(p), resident);
    }
    printf("   refused at resident + %zu: %s\n", caps[1] - resident, st_error());
    pool_set_capacity(p, 0);
    CHECKF(sample_images(m, &s, labels, n, b) == ST_OK, "%s", st_error());
    tk_expect_bitwise("sampling after a refusal", b, a, n * PER);

    const sample_settings bad_steps = {.steps = 0, .guidance = 1.0f}, bad_g = {.steps = 1, .guidance = NAN};
    const float bad_label[1] = {11};
    CHECK(sample_images(m, &bad_steps, labels, 1, b) == ST_ERR_INVALID);
    CHECK(sample_images(m, &bad_g, labels, 1, b) == ST_ERR_INVALID);
    CHECK(sample_images(m, &s, bad_label, 1, b) == ST_ERR_INVALID && strstr(st_error(), "null label"));
    CHECK(pool_live(p) == resident);
    free(a), free(b);
}

/* (e) the grid: one row per class, per_class columns, 2-pixel gaps; cell (c, k) is image c * per_class + k */
static void test_grid(pool *p, model *m)
{
    printf("-- the PNG grid\n");
    char path[64];
    snprintf(path, sizeof path, "/tmp/segtrain_test_sample_%d.png", (int)getpid());
    const int classes = 3, per_class = 4;
    const sample_settings s = {.steps = 4, .guidance = 2.0f, .seed = 5};
    const size_t resident = pool_live(p);
    CHECKF(sample_grid(m, &s, NULL, classes, per_class, path) == ST_OK, "%s", st_error());
    CHECK(pool_live(p) == resident);

    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    const int read = png_image_begin_read_from_file(&img, path);
    CHECKF(read, "%s: %s", path, img.message);
    const unsigned W = per_class * RES + (per_class - 1) * 2, H = classes * RES + (classes - 1) * 2;
    CHECKF(img.width == W && img.height == H, "grid %ux%u, want %ux%u", img.width, img.height, W, H);
    CHECK((img.format & PNG_FORMAT_FLAG_COLOR) != 0);
    unsigned char *buf = NULL;
    if (read) {
        img.format = PNG_FORMAT_RGB;
        buf = malloc(PNG_IMAGE_SIZE(img));
        CHECKF(png_image_finish_read(&img, NULL, buf, 0, NULL), "%s", img.message);
    }
    /* cell (row 2, column 1) against sample_images' image 2 * per_class + 1 with label 2 */
    const float labels[12] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2};
    float *x = images(classes * per_class);
    CHECKF(sample_images(m, &s, labels, classes * per_class, x) == ST_OK, "%s", st_error());
    int mismatched = 0, gaps_white = 1;
    const int r = 2, col = 1;
    const float *im = x + (int64_t)(r * per_class + col) * PER;
    for (int y = 0; buf && y < RES; y++)
        for (int xx = 0; xx < RES; xx++)
            for (int ch = 0; ch < CH; ch++) {
                float v = (im[(ch * RES + y) * RES + xx] + 1.0f) * 127.5f;
                v = v >= 0.0f ? (v <= 255.0f ? v : 255.0f) : 0.0f;
                const int oy = r * (RES + 2) + y, ox = col * (RES + 2) + xx;
                mismatched += buf[((size_t)oy * W + ox) * 3 + ch] != (unsigned char)lrintf(v);
            }
    for (unsigned y = 0; buf && y < H; y++) /* the gap column after the first cell */
        for (int ch = 0; ch < 3; ch++) gaps_white &= buf[((size_t)y * W + RES) * 3 + ch] == 255;
    CHECKF(buf && mismatched == 0 && gaps_white, "cell (2, 1): %d bytes differ; gap white %d", mismatched, gaps_white);
    free(buf), free(x);
    remove(path);

    CHECK(sample_grid(m, &s, NULL, 11, 1, path) == ST_ERR_INVALID); /* the model has 10 classes */
    CHECK(sample_grid(m, &s, NULL, 1, 0, path) == ST_ERR_INVALID);
    CHECK(access(path, F_OK) != 0);
}

static void test_latent_channels(void)
{
    printf("-- a 4-channel model has no PNG grid\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make(p, 4);
    st_status st = sample_grid(m, &(sample_settings){.steps = 1, .guidance = 1.0f}, NULL, 2, 2, "/tmp/never.png");
    CHECKF(st == ST_ERR_INVALID && strstr(st_error(), "4 input channels"), "%s", st_error());
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make(p, CH);
    if (m) {
        test_determinism(m);
        test_unguided_loop(m);
        test_guided_step(m);
        test_pool(p, m);
        test_grid(p, m);
    }
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
    test_latent_channels();
    return tk_finish();
}
