/* Convolution, the transposed 2 x 2 convolution, nearest upsampling, the FIR filter, the fused bias and leaky ReLU,
 * and the thin QR against double-precision references: forward values, backward by central differences of the
 * reference (accumulated into non-zero gradients), the workspace each op states as its pool peak, the same bits at 1
 * and 2 threads, and nothing computed on dry buffers.
 * The QR's Q is checked against Gram-Schmidt up to the columns' signs, and its signs against LAPACK's convention on
 * a matrix whose signs are known by hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

#define FWD_TOL 1e-5
#define GRAD_TOL 1e-4
#define FD_H 1e-6
#define PRE 0.25f /* what every gradient buffer holds before a backward, which must add to it */

static float *fbuf(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }
static double *dbuf(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(double)); }

static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void fill_pre(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = PRE;
}

static void minus_pre(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] -= PRE;
}

/* ---- conv2d ---- */

typedef struct {
    conv_shape s;
    double *x, *w, *b, *lw, *y;
} conv_ctx;

static void conv_ref(conv_ctx *c)
{
    const conv_shape *s = &c->s;
    const int64_t oh = conv_out_h(s), ow = conv_out_w(s);
    for (int64_t n = 0; n < s->batch; n++)
        for (int64_t o = 0; o < s->out; o++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    double acc = c->b ? c->b[o] : 0;
                    for (int64_t ci = 0; ci < s->in; ci++)
                        for (int64_t i = 0; i < s->kh; i++)
                            for (int64_t j = 0; j < s->kw; j++) {
                                const int64_t y = oy * s->sh - s->ph + i, x = ox * s->sw - s->pw + j;
                                if (y < 0 || y >= s->h || x < 0 || x >= s->w) continue;
                                acc += c->w[((o * s->in + ci) * s->kh + i) * s->kw + j] *
                                       c->x[((n * s->in + ci) * s->h + y) * s->w + x];
                            }
                    c->y[((n * s->out + o) * oh + oy) * ow + ox] = acc;
                }
}

static double conv_loss(void *ctx)
{
    conv_ctx *c = ctx;
    conv_ref(c);
    const conv_shape *s = &c->s;
    return dot(c->lw, c->y, s->batch * s->out * conv_out_h(s) * conv_out_w(s));
}

static void test_conv(const char *name, conv_shape s, bool bias, uint64_t seed)
{
    char what[128];
    const int64_t nx = s.batch * s.in * s.h * s.w, nw = s.out * s.in * s.kh * s.kw;
    const int64_t ny = s.batch * s.out * conv_out_h(&s) * conv_out_w(&s);
    float *x = fbuf(nx), *w = fbuf(nw), *b = bias ? fbuf(s.out) : NULL, *dy = fbuf(ny), *y = fbuf(ny);
    float *dx = fbuf(nx), *dw = fbuf(nw), *db = fbuf(s.out);
    tk_fill(x, nx, seed, -1, 1);
    tk_fill(w, nw, seed + 1, -1, 1);
    if (b) tk_fill(b, s.out, seed + 2, -1, 1);
    tk_fill(dy, ny, seed + 3, -1, 1);
    conv_ctx c = {.s = s, .x = dbuf(nx), .w = dbuf(nw), .b = b ? dbuf(s.out) : NULL, .lw = dbuf(ny), .y = dbuf(ny)};
    tk_to_double(c.x, x, nx);
    tk_to_double(c.w, w, nw);
    if (b) tk_to_double(c.b, b, s.out);
    tk_to_double(c.lw, dy, ny);

    pool *p = pool_create(POOL_DEVICE, 0);
    CHECK(conv2d_forward(p, y, x, w, b, &s) == ST_OK);
    CHECKF(pool_peak(p) == conv2d_workspace_bytes(&s), "%s: forward's peak %zu, stated %zu", name, pool_peak(p),
           conv2d_workspace_bytes(&s));
    conv_ref(&c);
    snprintf(what, sizeof what, "conv2d %s forward", name);
    tk_expect_close(what, y, c.y, ny, FWD_TOL);

    fill_pre(dx, nx), fill_pre(dw, nw), fill_pre(db, s.out);
    pool_reset_peak(p);
    CHECK(conv2d_backward(p, dx, dw, bias ? db : NULL, dy, x, w, &s) == ST_OK);
    CHECK(pool_peak(p) == conv2d_workspace_bytes(&s) && pool_live(p) == 0);
    minus_pre(dx, nx), minus_pre(dw, nw), minus_pre(db, s.out);
    double *g = dbuf(nx > nw ? nx : nw);
    tk_numeric_grad(conv_loss, &c, c.x, nx, FD_H, g);
    snprintf(what, sizeof what, "conv2d %s dx", name);
    tk_expect_close(what, dx, g, nx, GRAD_TOL);
    tk_numeric_grad(conv_loss, &c, c.w, nw, FD_H, g);
    snprintf(what, sizeof what, "conv2d %s dw", name);
    tk_expect_close(what, dw, g, nw, GRAD_TOL);
    if (b) {
        tk_numeric_grad(conv_loss, &c, c.b, s.out, FD_H, g);
        snprintf(what, sizeof what, "conv2d %s db", name);
        tk_expect_close(what, db, g, s.out, GRAD_TOL);
    }

    /* the same bits on one thread */
    float *y1 = fbuf(ny), *dx1 = fbuf(nx), *dw1 = fbuf(nw);
    const int threads = ops_threads();
    ops_set_threads(1);
    CHECK(conv2d_forward(p, y1, x, w, b, &s) == ST_OK);
    CHECK(conv2d_backward(p, dx1, dw1, NULL, dy, x, w, &s) == ST_OK);
    ops_set_threads(threads);
    snprintf(what, sizeof what, "conv2d %s forward at 1 thread", name);
    tk_expect_bitwise(what, y1, y, ny);
    float *dx2 = fbuf(nx), *dw2 = fbuf(nw);
    CHECK(conv2d_backward(p, dx2, dw2, NULL, dy, x, w, &s) == ST_OK);
    snprintf(what, sizeof what, "conv2d %s dx at 1 thread", name);
    tk_expect_bitwise(what, dx1, dx2, nx);
    snprintf(what, sizeof what, "conv2d %s dw at 1 thread", name);
    tk_expect_bitwise(what, dw1, dw2, nw);
    CHECK(pool_destroy(p) == 0);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(g), free(y1), free(dx1), free(dw1);
    free(dx2), free(dw2), free(c.x), free(c.w), free(c.b), free(c.lw), free(c.y);
}

/* An image whose columns take several bands (the workspace says so): forward against the reference, backward against
 * the double-precision transposed convolution and weight correlation (central differences over 262144 inputs would
 * take minutes; the small shapes above check the same code by them) */
static void test_conv_bands(void)
{
    const conv_shape s = {.batch = 1, .in = 64, .h = 64, .w = 64, .out = 2, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                          .ph = 1, .pw = 1};
    const int64_t nx = 64 * 64 * 64, nw = 2 * 64 * 9, ny = 2 * 64 * 64, K = 64 * 9;
    CHECKF(conv2d_workspace_bytes(&s) < (size_t)(K * 64 * 64) * sizeof(float), "one band: %zu bytes",
           conv2d_workspace_bytes(&s));
    float *x = fbuf(nx), *w = fbuf(nw), *dy = fbuf(ny), *y = fbuf(ny), *dx = fbuf(nx), *dw = fbuf(nw);
    tk_fill(x, nx, 171, -1, 1), tk_fill(w, nw, 172, -1, 1), tk_fill(dy, ny, 173, -1, 1);
    conv_ctx c = {.s = s, .x = dbuf(nx), .w = dbuf(nw), .y = dbuf(ny)};
    tk_to_double(c.x, x, nx), tk_to_double(c.w, w, nw);
    pool *p = pool_create(POOL_DEVICE, 0);
    CHECK(conv2d_forward(p, y, x, w, NULL, &s) == ST_OK);
    conv_ref(&c);
    tk_expect_close("conv2d in bands forward", y, c.y, ny, FWD_TOL);
    CHECK(conv2d_backward(p, dx, dw, NULL, dy, x, w, &s) == ST_OK && pool_peak(p) == conv2d_workspace_bytes(&s));
    double *gx = dbuf(nx), *gw = dbuf(nw);
    for (int64_t o = 0; o < 2; o++)
        for (int64_t ci = 0; ci < 64; ci++)
            for (int64_t i = 0; i < 3; i++)
                for (int64_t j = 0; j < 3; j++)
                    for (int64_t oy = 0; oy < 64; oy++)
                        for (int64_t ox = 0; ox < 64; ox++) {
                            const int64_t yy = oy - 1 + i, xx = ox - 1 + j;
                            if (yy < 0 || yy >= 64 || xx < 0 || xx >= 64) continue;
                            const double g = dy[(o * 64 + oy) * 64 + ox];
                            gw[((o * 64 + ci) * 3 + i) * 3 + j] += g * c.x[(ci * 64 + yy) * 64 + xx];
                            gx[(ci * 64 + yy) * 64 + xx] += g * c.w[((o * 64 + ci) * 3 + i) * 3 + j];
                        }
    tk_expect_close("conv2d in bands dx", dx, gx, nx, GRAD_TOL);
    tk_expect_close("conv2d in bands dw", dw, gw, nw, GRAD_TOL);
    CHECK(pool_destroy(p) == 0);
    free(x), free(w), free(dy), free(y), free(dx), free(dw), free(gx), free(gw), free(c.x), free(c.w), free(c.y);
}

/* On a dry pool: the columns are allocated (the peak a plan reads) and nothing is computed */
static void test_conv_dry(void)
{
    const conv_shape s = {.batch = 2, .in = 3, .h = 8, .w = 8, .out = 4, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1,
                          .pw = 1};
    pool *p = pool_create_dry(POOL_DEVICE, 0);
    float *x, *w, *y;
    CHECK(pool_alloc(p, 2 * 3 * 64 * 4, MEM_ACTIVATIONS, "x", (void **)&x) == ST_OK);
    CHECK(pool_alloc(p, 4 * 27 * 4, MEM_WEIGHTS, "w", (void **)&w) == ST_OK);
    CHECK(pool_alloc(p, 2 * 4 * 64 * 4, MEM_ACTIVATIONS, "y", (void **)&y) == ST_OK);
    const size_t live = pool_live(p);
    CHECK(conv2d_forward(p, y, x, w, NULL, &s) == ST_OK && conv2d_backward(p, x, w, NULL, y, x, w, &s) == ST_OK);
    CHECK(pool_peak(p) == live + conv2d_workspace_bytes(&s) && pool_live(p) == live);
    pool_free(p, x), pool_free(p, w), pool_free(p, y);
    CHECK(pool_destroy(p) == 0);
}

/* ---- the transposed 2 x 2 convolution of stride 2 ---- */

typedef struct ct_ctx {
    int64_t batch, in, out, h, w;
    double *x, *wt, *b, *lw, *y; /* b may be NULL */
} ct_ctx;

static void ct_ref(ct_ctx *c)
{
    const int64_t oh = 2 * c->h, ow = 2 * c->w;
    for (int64_t n = 0; n < c->batch; n++)
        for (int64_t o = 0; o < c->out; o++)
            for (int64_t yy = 0; yy < oh; yy++)
                for (int64_t xx = 0; xx < ow; xx++) {
                    const int64_t i = yy / 2, a = yy % 2, j = xx / 2, e = xx % 2;
                    double acc = c->b ? c->b[o] : 0;
                    for (int64_t ci = 0; ci < c->in; ci++)
                        acc += c->x[((n * c->in + ci) * c->h + i) * c->w + j] *
                               c->wt[((ci * c->out + o) * 2 + a) * 2 + e];
                    c->y[((n * c->out + o) * oh + yy) * ow + xx] = acc;
                }
}

static double ct_loss(void *ctx)
{
    ct_ctx *c = ctx;
    ct_ref(c);
    return dot(c->lw, c->y, c->batch * c->out * 4 * c->h * c->w);
}

/* against the double reference and central differences (gradients added onto what was there), the workspace as stated
 * as the pool's peak, the same bits at 1 and 2 threads, each gradient alone the full call's bits */
static void test_conv_transpose(int64_t batch, int64_t in, int64_t out, int64_t h, int64_t w, bool bias,
                                uint64_t seed)
{
    char what[128], tag[64];
    snprintf(tag, sizeof tag, "conv_transpose2x2 %lldx%lld->%lld %lldx%lld%s", (long long)batch, (long long)in,
             (long long)out, (long long)h, (long long)w, bias ? "" : " no bias");
    const int64_t nx = batch * in * h * w, nw = in * out * 4, ny = batch * out * 4 * h * w;
    const size_t ws = conv_transpose2x2_workspace_bytes(in, out, h, w);
    float *x = fbuf(nx), *wt = fbuf(nw), *b = bias ? fbuf(out) : NULL, *dy = fbuf(ny), *y = fbuf(ny);
    float *dx = fbuf(nx), *dw = fbuf(nw), *db = fbuf(out);
    tk_fill(x, nx, seed, -1, 1), tk_fill(wt, nw, seed + 1, -1, 1), tk_fill(dy, ny, seed + 3, -1, 1);
    if (b) tk_fill(b, out, seed + 2, -1, 1);
    ct_ctx c = {batch, in, out, h, w, dbuf(nx), dbuf(nw), b ? dbuf(out) : NULL, dbuf(ny), dbuf(ny)};
    tk_to_double(c.x, x, nx), tk_to_double(c.wt, wt, nw), tk_to_double(c.lw, dy, ny);
    if (b) tk_to_double(c.b, b, out);

    pool *p = pool_create(POOL_DEVICE, 0);
    CHECK(conv_transpose2x2_forward(p, y, x, wt, b, batch, in, out, h, w) == ST_OK);
    CHECKF(pool_peak(p) == ws && pool_live(p) == 0, "%s: forward's peak %zu, stated %zu", tag, pool_peak(p), ws);
    ct_ref(&c);
    snprintf(what, sizeof what, "%s forward", tag);
    tk_expect_close(what, y, c.y, ny, FWD_TOL);

    fill_pre(dx, nx), fill_pre(dw, nw), fill_pre(db, out);
    pool_reset_peak(p);
    CHECK(conv_transpose2x2_backward(p, dx, dw, bias ? db : NULL, dy, x, wt, batch, in, out, h, w) == ST_OK);
    CHECKF(pool_peak(p) == ws && pool_live(p) == 0, "%s: backward's peak %zu, stated %zu", tag, pool_peak(p), ws);
    minus_pre(dx, nx), minus_pre(dw, nw), minus_pre(db, out);
    double *g = dbuf(nx > nw ? nx : nw);
    tk_numeric_grad(ct_loss, &c, c.x, nx, FD_H, g);
    snprintf(what, sizeof what, "%s dx", tag);
    tk_expect_close(what, dx, g, nx, GRAD_TOL);
    tk_numeric_grad(ct_loss, &c, c.wt, nw, FD_H, g);
    snprintf(what, sizeof what, "%s dw", tag);
    tk_expect_close(what, dw, g, nw, GRAD_TOL);
    if (b) {
        tk_numeric_grad(ct_loss, &c, c.b, out, FD_H, g);
        snprintf(what, sizeof what, "%s db", tag);
        tk_expect_close(what, db, g, out, GRAD_TOL);
    }

    /* 1 and 2 threads: the same bits; each gradient alone (db alone takes no workspace): the full call's bits */
    float *y1 = fbuf(ny), *y2 = fbuf(ny), *d1[3] = {fbuf(nx), fbuf(nw), fbuf(out)};
    float *d2[3] = {fbuf(nx), fbuf(nw), fbuf(out)}, *alone[3] = {fbuf(nx), fbuf(nw), fbuf(out)};
    const int64_t sizes[3] = {nx, nw, out};
    const char *names[3] = {"dx", "dw", "db"};
    const int threads = ops_threads();
    ops_set_threads(1);
    CHECK(conv_transpose2x2_forward(p, y1, x, wt, b, batch, in, out, h, w) == ST_OK);
    CHECK(conv_transpose2x2_backward(p, d1[0], d1[1], d1[2], dy, x, wt, batch, in, out, h, w) == ST_OK);
    ops_set_threads(2);
    CHECK(conv_transpose2x2_forward(p, y2, x, wt, b, batch, in, out, h, w) == ST_OK);
    CHECK(conv_transpose2x2_backward(p, d2[0], d2[1], d2[2], dy, x, wt, batch, in, out, h, w) == ST_OK);
    CHECK(conv_transpose2x2_backward(p, alone[0], NULL, NULL, dy, x, wt, batch, in, out, h, w) == ST_OK);
    CHECK(conv_transpose2x2_backward(p, NULL, alone[1], NULL, dy, x, wt, batch, in, out, h, w) == ST_OK);
    pool_reset_peak(p);
    CHECK(conv_transpose2x2_backward(p, NULL, NULL, alone[2], dy, x, wt, batch, in, out, h, w) == ST_OK);
    CHECK(pool_peak(p) == 0);
    ops_set_threads(threads);
    snprintf(what, sizeof what, "%s forward at 1 and 2 threads", tag);
    tk_expect_bitwise(what, y1, y2, ny);
    tk_expect_grads_agree(tag, names, sizes, d1, d2, alone);
    CHECKF(conv_transpose2x2_forward(p, y, x, wt, b, batch, in, 0, h, w) == ST_ERR_INVALID &&
               strstr(st_error(), "conv_transpose2x2:"),
           "no output channels: %s", st_error());
    CHECK(pool_destroy(p) == 0);
    free(x), free(wt), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(g), free(y1), free(y2);
    free(c.x), free(c.wt), free(c.b), free(c.lw), free(c.y);
}

/* On a dry pool: the workspace is allocated as stated and nothing is computed */
static void test_conv_transpose_dry(void)
{
    const int64_t batch = 2, in = 3, out = 4, h = 5, w = 6;
    pool *p = pool_create_dry(POOL_DEVICE, 0);
    float *x, *wt, *y;
    CHECK(pool_alloc(p, (size_t)(batch * in * h * w) * 4, MEM_ACTIVATIONS, "x", (void **)&x) == ST_OK);
    CHECK(pool_alloc(p, (size_t)(in * out * 4) * 4, MEM_WEIGHTS, "w", (void **)&wt) == ST_OK);
    CHECK(pool_alloc(p, (size_t)(batch * out * 4 * h * w) * 4, MEM_ACTIVATIONS, "y", (void **)&y) == ST_OK);
    const size_t live = pool_live(p);
    CHECK(conv_transpose2x2_forward(p, y, x, wt, wt, batch, in, out, h, w) == ST_OK &&
          conv_transpose2x2_backward(p, x, wt, wt, y, x, wt, batch, in, out, h, w) == ST_OK);
    CHECK(pool_peak(p) == live + conv_transpose2x2_workspace_bytes(in, out, h, w) && pool_live(p) == live);
    pool_free(p, x), pool_free(p, wt), pool_free(p, y);
    CHECK(pool_destroy(p) == 0);
}

/* ---- nearest upsampling ---- */

typedef struct up_ctx {
    int64_t planes, h, w, f;
    double *x, *lw;
} up_ctx;

static double up_loss(void *ctx)
{
    up_ctx *c = ctx;
    const int64_t oh = c->h * c->f, ow = c->w * c->f;
    double l = 0;
    for (int64_t p = 0; p < c->planes; p++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++)
                l += c->lw[(p * oh + i) * ow + j] * c->x[(p * c->h + i / c->f) * c->w + j / c->f];
    return l;
}

static void test_upsample(int64_t planes, int64_t h, int64_t w, int64_t f, uint64_t seed)
{
    char what[96];
    const int64_t nx = planes * h * w, ny = nx * f * f, oh = h * f, ow = w * f;
    float *x = fbuf(nx), *y = fbuf(ny), *dy = fbuf(ny), *dx = fbuf(nx);
    tk_fill(x, nx, seed, -1, 1), tk_fill(dy, ny, seed + 1, -1, 1);
    up_ctx c = {planes, h, w, f, dbuf(nx), dbuf(ny)};
    tk_to_double(c.x, x, nx), tk_to_double(c.lw, dy, ny);
    upsample_nearest_forward(y, x, planes, h, w, f);
    double *want = dbuf(ny);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) want[(p * oh + i) * ow + j] = c.x[(p * h + i / f) * w + j / f];
    snprintf(what, sizeof what, "upsample x%lld %lldx%lld forward", (long long)f, (long long)h, (long long)w);
    tk_expect_close(what, y, want, ny, 0);
    fill_pre(dx, nx);
    upsample_nearest_backward(dx, dy, planes, h, w, f);
    minus_pre(dx, nx);
    double *g = dbuf(nx);
    tk_numeric_grad(up_loss, &c, c.x, nx, FD_H, g);
    snprintf(what, sizeof what, "upsample x%lld %lldx%lld dx", (long long)f, (long long)h, (long long)w);
    tk_expect_close(what, dx, g, nx, GRAD_TOL);
    free(x), free(y), free(dy), free(dx), free(want), free(g), free(c.x), free(c.lw);
}

/* ---- the FIR filter ---- */

typedef struct {
    int64_t k, planes, h, w, ph, pw;
    const double *kernel;
    double *x, *lw, *y;
} fir_ctx;

static int64_t fir_oh(const fir_ctx *c) { return c->h + 2 * c->ph - c->k + 1; }
static int64_t fir_ow(const fir_ctx *c) { return c->w + 2 * c->pw - c->k + 1; }

static double fir_loss(void *ctx)
{
    fir_ctx *c = ctx;
    const int64_t oh = fir_oh(c), ow = fir_ow(c);
    for (int64_t p = 0; p < c->planes; p++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                double acc = 0;
                for (int64_t i = 0; i < c->k; i++)
                    for (int64_t j = 0; j < c->k; j++) {
                        const int64_t y = oy - c->ph + i, x = ox - c->pw + j;
                        if (y >= 0 && y < c->h && x >= 0 && x < c->w)
                            acc += c->kernel[i * c->k + j] * c->x[(p * c->h + y) * c->w + x];
                    }
                c->y[(p * oh + oy) * ow + ox] = acc;
            }
    return dot(c->lw, c->y, c->planes * oh * ow);
}

static void test_fir(int64_t planes, int64_t h, int64_t w, int64_t ph, int64_t pw, uint64_t seed)
{
    /* StyleGAN's (1, 3, 3, 1) outer product over its sum, as diffusers' MotionConv2d makes it */
    const int64_t k = 4;
    float kernel[16];
    double kd[16];
    const float taps[4] = {1, 3, 3, 1};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) kernel[i * 4 + j] = taps[i] * taps[j] / 64.0f, kd[i * 4 + j] = kernel[i * 4 + j];
    fir_ctx c = {.k = k, .planes = planes, .h = h, .w = w, .ph = ph, .pw = pw, .kernel = kd};
    const int64_t nx = planes * h * w, ny = planes * fir_oh(&c) * fir_ow(&c);
    float *x = fbuf(nx), *dy = fbuf(ny), *y = fbuf(ny), *dx = fbuf(nx);
    tk_fill(x, nx, seed, -1, 1);
    tk_fill(dy, ny, seed + 1, -1, 1);
    c.x = dbuf(nx), c.lw = dbuf(ny), c.y = dbuf(ny);
    tk_to_double(c.x, x, nx);
    tk_to_double(c.lw, dy, ny);
    fir_forward(y, x, kernel, k, planes, h, w, ph, pw);
    fir_loss(&c);
    char what[96];
    snprintf(what, sizeof what, "fir %lldx%lld pad (%lld, %lld) forward", (long long)h, (long long)w, (long long)ph,
             (long long)pw);
    tk_expect_close(what, y, c.y, ny, FWD_TOL);
    fill_pre(dx, nx);
    fir_backward(dx, dy, kernel, k, planes, h, w, ph, pw);
    minus_pre(dx, nx);
    double *g = dbuf(nx);
    tk_numeric_grad(fir_loss, &c, c.x, nx, FD_H, g);
    snprintf(what, sizeof what, "fir %lldx%lld pad (%lld, %lld) dx", (long long)h, (long long)w, (long long)ph,
             (long long)pw);
    tk_expect_close(what, dx, g, nx, GRAD_TOL);
    free(x), free(dy), free(y), free(dx), free(g), free(c.x), free(c.lw), free(c.y);
}

/* ---- bias and leaky ReLU ---- */

typedef struct {
    int64_t n, c, inner;
    double *x, *b, *lw, *y;
} lrelu_ctx;

#define SLOPE 0.2f
#define SCALE 1.41421356f

static double lrelu_loss(void *ctx)
{
    lrelu_ctx *c = ctx;
    const int64_t total = c->n * c->c * c->inner;
    for (int64_t i = 0; i < total; i++) {
        const double v = c->x[i] + c->b[i / c->inner % c->c];
        c->y[i] = (v > 0 ? v : v * SLOPE) * SCALE;
    }
    return dot(c->lw, c->y, total);
}

static void test_bias_leaky_relu(uint64_t seed)
{
    const int64_t n = 3, ch = 4, inner = 5, total = n * ch * inner;
    float *x = fbuf(total), *b = fbuf(ch), *dy = fbuf(total), *y = fbuf(total), *dx = fbuf(total), *db = fbuf(ch);
    tk_fill(x, total, seed, -1, 1);
    tk_fill(b, ch, seed + 1, -0.5f, 0.5f);
    tk_fill(dy, total, seed + 2, -1, 1);
    for (int64_t i = 0; i < total; i++) /* no kink within the finite difference's reach */
        if (fabsf(x[i] + b[i / inner % ch]) < 1e-3f) x[i] += 0.01f;
    lrelu_ctx c = {.n = n, .c = ch, .inner = inner, .x = dbuf(total), .b = dbuf(ch), .lw = dbuf(total),
                   .y = dbuf(total)};
    tk_to_double(c.x, x, total);
    tk_to_double(c.b, b, ch);
    tk_to_double(c.lw, dy, total);
    bias_leaky_relu_forward(y, x, b, SLOPE, SCALE, n, ch, inner);
    lrelu_loss(&c);
    tk_expect_close("bias_leaky_relu forward", y, c.y, total, FWD_TOL);
    fill_pre(dx, total), fill_pre(db, ch);
    bias_leaky_relu_backward(dx, db, dy, x, b, SLOPE, SCALE, n, ch, inner);
    minus_pre(dx, total), minus_pre(db, ch);
    double *g = dbuf(total);
    tk_numeric_grad(lrelu_loss, &c, c.x, total, FD_H, g);
    tk_expect_close("bias_leaky_relu dx", dx, g, total, GRAD_TOL);
    tk_numeric_grad(lrelu_loss, &c, c.b, ch, FD_H, g);
    tk_expect_close("bias_leaky_relu db", db, g, ch, GRAD_TOL);
    free(x), free(b), free(dy), free(y), free(dx), free(db), free(g), free(c.x), free(c.b), free(c.lw), free(c.y);
}

/* ---- QR ---- */

typedef struct {
    int64_t m, n;
    double *a, *lw, *q, *sign; /* sign: each column's, Householder's against Gram-Schmidt's, fixed at the base */
} qr_ctx;

/* Q by modified Gram-Schmidt (R's diagonal positive), each column times sign */
static void gram_schmidt(qr_ctx *c)
{
    const int64_t m = c->m, n = c->n;
    for (int64_t i = 0; i < m * n; i++) c->q[i] = c->a[i];
    for (int64_t j = 0; j < n; j++) {
        for (int64_t k = 0; k < j; k++) {
            double r = 0;
            for (int64_t i = 0; i < m; i++) r += c->q[i * n + k] * c->q[i * n + j];
            for (int64_t i = 0; i < m; i++) c->q[i * n + j] -= r * c->q[i * n + k];
        }
        double norm = 0;
        for (int64_t i = 0; i < m; i++) norm += c->q[i * n + j] * c->q[i * n + j];
        norm = sqrt(norm);
        for (int64_t i = 0; i < m; i++) c->q[i * n + j] /= norm;
    }
    for (int64_t j = 0; c->sign && j < n; j++)
        for (int64_t i = 0; i < m; i++) c->q[i * n + j] *= c->sign[j];
}

static double qr_loss(void *ctx)
{
    qr_ctx *c = ctx;
    gram_schmidt(c);
    return dot(c->lw, c->q, c->m * c->n);
}

static void test_qr(int64_t m, int64_t n, uint64_t seed)
{
    float *a = fbuf(m * n), *q = fbuf(m * n), *dq = fbuf(m * n), *da = fbuf(m * n);
    tk_fill(a, m * n, seed, -1, 1);
    tk_fill(dq, m * n, seed + 1, -1, 1);
    qr_ctx c = {.m = m, .n = n, .a = dbuf(m * n), .lw = dbuf(m * n), .q = dbuf(m * n), .sign = NULL};
    tk_to_double(c.a, a, m * n);
    tk_to_double(c.lw, dq, m * n);
    pool *p = pool_create(POOL_DEVICE, 0);
    CHECK(qr_forward(p, q, a, m, n) == ST_OK && pool_peak(p) == qr_workspace_bytes(m, n));
    gram_schmidt(&c);
    c.sign = dbuf(n);
    for (int64_t j = 0; j < n; j++) {
        double d = 0;
        for (int64_t i = 0; i < m; i++) d += q[i * n + j] * c.q[i * n + j];
        c.sign[j] = d < 0 ? -1 : 1;
    }
    gram_schmidt(&c);
    char what[64];
    snprintf(what, sizeof what, "qr %lldx%lld Q", (long long)m, (long long)n);
    tk_expect_close(what, q, c.q, m * n, FWD_TOL);
    fill_pre(da, m * n);
    CHECK(qr_backward(p, da, dq, a, q, m, n) == ST_OK && pool_live(p) == 0);
    minus_pre(da, m * n);
    double *g = dbuf(m * n);
    tk_numeric_grad(qr_loss, &c, c.a, m * n, FD_H, g);
    snprintf(what, sizeof what, "qr %lldx%lld dA", (long long)m, (long long)n);
    tk_expect_close(what, da, g, m * n, GRAD_TOL);
    CHECK(pool_destroy(p) == 0);
    free(a), free(q), free(dq), free(da), free(g), free(c.a), free(c.lw), free(c.q), free(c.sign);
}

/* LAPACK's signs (torch.linalg.qr's): R's diagonal is -sign(alpha) |(alpha, x)|, alpha the column's diagonal element
 * when its turn comes, x what lies below it; a column with x = 0 is not reflected (R's diagonal is alpha). For
 * [[3, 1], [4, 2], [0, 1]]: R00 = -5 (alpha 3), so Q's first column is -(0.6, 0.8, 0); column 1 reflected is
 * (-2.2, 0.4, 1): alpha 0.4 gives R11 = -sqrt(1.16), and Q's second column (0.2971, -0.2228, -0.9285). Without the
 * third row, column 1 has nothing below alpha: Q's second column is (-0.8, 0.6). */
static void test_qr_signs(void)
{
    const float a3[6] = {3, 1, 4, 2, 0, 1}, a2[4] = {3, 1, 4, 2};
    const double want3[6] = {-0.6, 0.29711, -0.8, -0.22283, 0, -0.92848}, want2[4] = {-0.6, -0.8, -0.8, 0.6};
    float q[6];
    pool *p = pool_create(POOL_DEVICE, 0);
    CHECK(qr_forward(p, q, a3, 3, 2) == ST_OK);
    tk_expect_close("qr 3x2 LAPACK's signs", q, want3, 6, 1e-4);
    CHECK(qr_forward(p, q, a2, 2, 2) == ST_OK);
    tk_expect_close("qr 2x2 LAPACK's signs (no reflection for the last column)", q, want2, 4, 1e-6);
    CHECK(qr_forward(p, q, a2, 1, 2) == ST_ERR_INVALID);
    CHECK(pool_destroy(p) == 0);
}

/* ---- the depthwise 3 x 3 convolution, channels last ---- */

typedef struct dw_ctx {
    int64_t B, H, W, C;
    double *x, *w, *b, *lw, *y;
} dw_ctx;

static void dw_ref(dw_ctx *c)
{
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t i = 0; i < c->H; i++)
            for (int64_t j = 0; j < c->W; j++)
                for (int64_t ch = 0; ch < c->C; ch++) {
                    double acc = c->b[ch];
                    for (int a = 0; a < 3; a++)
                        for (int e = 0; e < 3; e++) {
                            const int64_t ii = i + a - 1, jj = j + e - 1;
                            if (ii >= 0 && ii < c->H && jj >= 0 && jj < c->W)
                                acc += c->w[ch * 9 + a * 3 + e] * c->x[((b * c->H + ii) * c->W + jj) * c->C + ch];
                        }
                    c->y[((b * c->H + i) * c->W + j) * c->C + ch] = acc;
                }
}

static double dw_loss(void *ctx)
{
    dw_ctx *c = ctx;
    dw_ref(c);
    double l = 0;
    for (int64_t k = 0; k < c->B * c->H * c->W * c->C; k++) l += c->lw[k] * c->y[k];
    return l;
}

/* against the double reference and central differences, every gradient accumulated onto what was there, the same
 * bits at 1 and 2 threads; channels past one 64-channel block */
static void test_depthwise(int64_t B, int64_t H, int64_t W, int64_t C, uint64_t seed)
{
    char what[128];
    const int64_t n = B * H * W * C;
    float *x = fbuf(n), *w = fbuf(9 * C), *b = fbuf(C), *dy = fbuf(n), *y = fbuf(n), *dx = fbuf(n), *dw = fbuf(9 * C);
    float *db = fbuf(C);
    tk_fill(x, n, seed, -1, 1), tk_fill(w, 9 * C, seed + 1, -1, 1), tk_fill(b, C, seed + 2, -1, 1);
    tk_fill(dy, n, seed + 3, -1, 1);
    dw_ctx c = {B, H, W, C, dbuf(n), dbuf(9 * C), dbuf(C), dbuf(n), dbuf(n)};
    tk_to_double(c.x, x, n), tk_to_double(c.w, w, 9 * C), tk_to_double(c.b, b, C), tk_to_double(c.lw, dy, n);
    pool *p = pool_create(POOL_DEVICE, 0);
    CHECK(depthwise3x3_forward(p, y, x, w, b, B, H, W, C) == ST_OK && pool_live(p) == 0);
    dw_ref(&c);
    snprintf(what, sizeof what, "depthwise 3x3 %lldx%lldx%lld forward", (long long)H, (long long)W, (long long)C);
    tk_expect_close(what, y, c.y, n, FWD_TOL);
    fill_pre(dx, n), fill_pre(dw, 9 * C), fill_pre(db, C);
    CHECK(depthwise3x3_backward(p, dx, dw, db, dy, x, w, B, H, W, C) == ST_OK && pool_live(p) == 0);
    minus_pre(dx, n), minus_pre(dw, 9 * C), minus_pre(db, C);
    double *g = dbuf(n > 9 * C ? n : 9 * C);
    double *const in[3] = {c.x, c.w, c.b};
    const float *got[3] = {dx, dw, db};
    const int64_t sizes[3] = {n, 9 * C, C};
    const char *names[3] = {"dx", "dw", "db"};
    for (int k = 0; k < 3; k++) {
        tk_numeric_grad(dw_loss, &c, in[k], sizes[k], FD_H, g);
        snprintf(what, sizeof what, "depthwise 3x3 %s", names[k]);
        tk_expect_close(what, got[k], g, sizes[k], GRAD_TOL);
    }
    float *dx1 = fbuf(n), *dw1 = fbuf(9 * C), *dx2 = fbuf(n), *dw2 = fbuf(9 * C);
    const int threads = ops_threads();
    ops_set_threads(1);
    CHECK(depthwise3x3_backward(p, dx1, dw1, NULL, dy, x, w, B, H, W, C) == ST_OK);
    ops_set_threads(2);
    CHECK(depthwise3x3_backward(p, dx2, dw2, NULL, dy, x, w, B, H, W, C) == ST_OK);
    ops_set_threads(threads);
    tk_expect_bitwise("depthwise 3x3 dx at 1 and 2 threads", dx1, dx2, n);
    tk_expect_bitwise("depthwise 3x3 dw at 1 and 2 threads", dw1, dw2, 9 * C);
    CHECK(pool_destroy(p) == 0);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(g), free(dx1), free(dw1);
    free(dx2), free(dw2), free(c.x), free(c.w), free(c.b), free(c.lw), free(c.y);
}

/* ---- the temporal convolution over frames, channels last ---- */

typedef struct tc_ctx {
    int64_t B, F, P, D;
    double *x, *w, *lw, *y;
} tc_ctx;

static void tc_ref(tc_ctx *c)
{
    const int64_t D = c->D;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t f = 0; f < c->F; f++)
            for (int64_t q = 0; q < c->P; q++)
                for (int64_t o = 0; o < D; o++) {
                    double acc = 0;
                    for (int64_t j = 0; j < 3; j++)
                        for (int64_t i = 0; f + j - 1 >= 0 && f + j - 1 < c->F && i < D; i++)
                            acc += c->w[(o * D + i) * 3 + j] * c->x[((b * c->F + f + j - 1) * c->P + q) * D + i];
                    c->y[((b * c->F + f) * c->P + q) * D + o] = acc;
                }
}

static double tc_loss(void *ctx)
{
    tc_ctx *c = ctx;
    tc_ref(c);
    double l = 0;
    for (int64_t k = 0; k < c->B * c->F * c->P * c->D; k++) l += c->lw[k] * c->y[k];
    return l;
}

/* against the double reference and central differences, the gradients accumulated onto what was there, the same bits
 * at 1 and 2 threads */
static void test_temporal(int64_t B, int64_t F, int64_t P, int64_t D, uint64_t seed)
{
    char what[128];
    const int64_t n = B * F * P * D, nw = 3 * D * D;
    float *x = fbuf(n), *w = fbuf(nw), *dy = fbuf(n), *y = fbuf(n), *dx = fbuf(n), *dw = fbuf(nw);
    tk_fill(x, n, seed, -1, 1), tk_fill(w, nw, seed + 1, -1, 1), tk_fill(dy, n, seed + 2, -1, 1);
    tc_ctx c = {B, F, P, D, dbuf(n), dbuf(nw), dbuf(n), dbuf(n)};
    tk_to_double(c.x, x, n), tk_to_double(c.w, w, nw), tk_to_double(c.lw, dy, n);
    pool *p = pool_create(POOL_DEVICE, 0);
    CHECK(temporal_conv3_forward(p, y, x, w, B, F, P, D) == ST_OK && pool_live(p) == 0);
    tc_ref(&c);
    snprintf(what, sizeof what, "temporal conv %lld frames x %lld x %lld forward", (long long)F, (long long)P,
             (long long)D);
    tk_expect_close(what, y, c.y, n, FWD_TOL);
    fill_pre(dx, n), fill_pre(dw, nw);
    CHECK(temporal_conv3_backward(p, dx, dw, dy, x, w, B, F, P, D) == ST_OK && pool_live(p) == 0);
    minus_pre(dx, n), minus_pre(dw, nw);
    double *g = dbuf(n > nw ? n : nw);
    double *const in[2] = {c.x, c.w};
    const float *got[2] = {dx, dw};
    const int64_t sizes[2] = {n, nw};
    const char *names[2] = {"dx", "dw"};
    for (int k = 0; k < 2; k++) {
        tk_numeric_grad(tc_loss, &c, in[k], sizes[k], FD_H, g);
        snprintf(what, sizeof what, "temporal conv %lld frames x %lld x %lld %s", (long long)F, (long long)P,
                 (long long)D, names[k]);
        tk_expect_close(what, got[k], g, sizes[k], GRAD_TOL);
    }
    float *dx1 = fbuf(n), *dw1 = fbuf(nw), *dx2 = fbuf(n), *dw2 = fbuf(nw);
    const int threads = ops_threads();
    ops_set_threads(1);
    CHECK(temporal_conv3_backward(p, dx1, dw1, dy, x, w, B, F, P, D) == ST_OK);
    ops_set_threads(2);
    CHECK(temporal_conv3_backward(p, dx2, dw2, dy, x, w, B, F, P, D) == ST_OK);
    ops_set_threads(threads);
    tk_expect_bitwise("temporal conv dx at 1 and 2 threads", dx1, dx2, n);
    tk_expect_bitwise("temporal conv dw at 1 and 2 threads", dw1, dw2, nw);
    CHECK(pool_destroy(p) == 0);
    free(x), free(w), free(dy), free(y), free(dx), free(dw), free(g), free(dx1), free(dw1), free(dx2), free(dw2);
    free(c.x), free(c.w), free(c.lw), free(c.y);
}

int main(void)
{
    const conv_shape base = {.batch = 2, .in = 3, .h = 5, .w = 6, .out = 4, .kh = 3, .kw = 3, .sh = 1, .sw = 1};
    conv_shape s = base;
    s.ph = s.pw = 1;
    test_conv("3x3 stride 1 pad 1", s, true, 11);
    s = base, s.h = s.w = 7, s.sh = s.sw = 2, s.batch = 1;
    test_conv("3x3 stride 2 pad 0", s, true, 21);
    s = base, s.kh = s.kw = 1, s.h = s.w = 4;
    test_conv("1x1 stride 1 (direct)", s, true, 31);
    s = base, s.kh = s.kw = 1, s.sh = s.sw = 2, s.h = s.w = 6;
    test_conv("1x1 stride 2", s, false, 41);
    s = base, s.h = 1, s.w = 9, s.kh = 1, s.sw = 2;
    test_conv("1x3 stride (1, 2) (a conv1d)", s, true, 51);
    s = base, s.h = s.w = 4, s.kh = s.kw = 4;
    test_conv("4x4 over 4x4", s, false, 61);
    s = base, s.h = 6, s.w = 5, s.ph = 2, s.pw = 1, s.sh = 2;
    test_conv("3x3 stride (2, 1) pad (2, 1)", s, true, 71);
    test_conv_bands();
    test_conv_dry();
    test_depthwise(2, 4, 5, 6, 101);
    test_depthwise(1, 3, 3, 70, 111);
    test_temporal(2, 3, 5, 4, 121);
    test_temporal(1, 3, 400, 2, 131); /* 1200 rows: two GEMM chunks, the second starting inside a frame */
    test_temporal(1, 1, 6, 3, 141);   /* one frame: only the middle tap */
    test_conv_transpose(1, 3, 4, 3, 3, true, 181);
    test_conv_transpose(2, 5, 3, 3, 4, false, 191); /* batch 2, non-square, no bias */
    test_conv_transpose(2, 4, 6, 2, 5, true, 201);
    test_conv_transpose(1, 2, 8, 16, 64, true, 211); /* the scatter and gather past PAR_MIN: threaded */
    test_conv_transpose_dry();
    test_upsample(3, 4, 5, 2, 151);
    test_upsample(2, 3, 2, 3, 161);
    test_fir(3, 6, 6, 2, 2, 81);
    test_fir(2, 5, 7, 1, 1, 91);
    test_fir(2, 4, 4, 2, 1, 101);
    test_bias_leaky_relu(111);
    test_qr(7, 3, 121);
    test_qr(12, 5, 131);
    test_qr_signs();
    return tk_finish();
}
