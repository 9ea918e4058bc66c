/* The glue ops between ops (tensor.c) that the families call instead of loops of their own: each forward against a
 * double-precision reference, each backward against central differences of sum(w * reference(inputs)), accumulation
 * into pre-filled gradients, and nothing read or written on a dry step's buffers (which fault on any access), so that
 * a family calls them whatever its pools are. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

#define FWD_TOL 1e-6
#define GRAD_TOL 1e-4
#define FD_H 1e-6

/* Odd sizes so that no vector width or block divides them. */
enum { B = 2, R = 5, C = 7, N = B * R * C, PAD = 3 };

/* want[i] = base[i] + g[i]: the expected value of an accumulated gradient */
static void plus(double *want, const float *base, const double *g, int64_t n)
{
    for (int64_t i = 0; i < n; i++) want[i] = base[i] + g[i];
}

/* ---- transpose_batched and its backward: y[b] (C, R) = x[b] (R, C)^T ---- */

typedef struct lin_ctx {
    double *x, *w;
} lin_ctx;

static double transpose_loss(void *c)
{
    lin_ctx *g = c;
    double s = 0;
    for (int b = 0; b < B; b++)
        for (int r = 0; r < R; r++)
            for (int k = 0; k < C; k++) s += g->w[(b * C + k) * R + r] * g->x[(b * R + r) * C + k];
    return s;
}

static void test_transpose(void)
{
    float x[N], w[N], dx[N];
    double xd[N], wd[N], gx[N], want[N];
    tk_fill(x, N, 1, -2.0f, 2.0f), tk_fill(w, N, 2, -1.0f, 1.0f), tk_fill(dx, N, 3, -1.0f, 1.0f);
    tk_to_double(xd, x, N), tk_to_double(wd, w, N);
    lin_ctx c = {xd, wd};
    tk_numeric_grad(transpose_loss, &c, xd, N, FD_H, gx);
    plus(want, dx, gx, N);
    transpose_batched_backward(dx, w, B, R, C);
    tk_expect_close("transpose_batched_backward dx (accumulated)", dx, want, N, GRAD_TOL);
    float y[N], back[N] = {0}; /* the backward of the forward's output, into zeros: the input, bit for bit */
    transpose_batched(y, x, B, R, C);
    transpose_batched_backward(back, y, B, R, C);
    tk_expect_bitwise("transpose_batched_backward of transpose_batched", back, x, N);
}

/* ---- row_scale: y (rows, cols) = x s[r] ---- */

typedef struct scale_ctx {
    double *x, *s, *w;
} scale_ctx;

static double row_scale_loss(void *c)
{
    scale_ctx *g = c;
    double t = 0;
    for (int i = 0; i < N; i++) t += g->w[i] * g->x[i] * g->s[i / C];
    return t;
}

static void test_row_scale(void)
{
    enum { ROWS = B * R };
    float x[N], s[ROWS], w[N], y[N], dx[N], ds[ROWS];
    double xd[N], sd[ROWS], wd[N], yr[N], gx[N], gs[ROWS], want[N], wants[ROWS];
    tk_fill(x, N, 11, -2.0f, 2.0f), tk_fill(s, ROWS, 12, -1.5f, 1.5f), tk_fill(w, N, 13, -1.0f, 1.0f);
    tk_fill(dx, N, 14, -1.0f, 1.0f), tk_fill(ds, ROWS, 15, -1.0f, 1.0f);
    tk_to_double(xd, x, N), tk_to_double(sd, s, ROWS), tk_to_double(wd, w, N);
    row_scale_forward(y, x, s, ROWS, C);
    for (int i = 0; i < N; i++) yr[i] = xd[i] * sd[i / C];
    tk_expect_close("row_scale forward", y, yr, N, FWD_TOL);
    scale_ctx c = {xd, sd, wd};
    tk_numeric_grad(row_scale_loss, &c, xd, N, FD_H, gx);
    tk_numeric_grad(row_scale_loss, &c, sd, ROWS, FD_H, gs);
    plus(want, dx, gx, N), plus(wants, ds, gs, ROWS);
    row_scale_backward(dx, ds, w, x, s, ROWS, C);
    tk_expect_close("row_scale dx (accumulated)", dx, want, N, GRAD_TOL);
    tk_expect_close("row_scale ds (accumulated)", ds, wants, ROWS, GRAD_TOL);
    float dx0[N] = {0}, fwd[N];
    row_scale_backward(dx0, NULL, w, x, s, ROWS, C); /* dx alone, into zeros: forward's product of dy */
    row_scale_forward(fwd, w, s, ROWS, C);
    tk_expect_bitwise("row_scale dx alone = row_scale_forward of dy", dx0, fwd, N);
}

/* ---- pad_replicate: y (rows, PAD + cols) = PAD copies of x's row's first value, then the row ---- */

static double pad_loss(void *c)
{
    lin_ctx *g = c;
    enum { W = PAD + C };
    double s = 0;
    for (int r = 0; r < B * R; r++)
        for (int k = 0; k < W; k++) s += g->w[r * W + k] * g->x[r * C + (k < PAD ? 0 : k - PAD)];
    return s;
}

static void test_pad_replicate(void)
{
    enum { ROWS = B * R, W = PAD + C, NP = ROWS * W };
    float x[N], w[NP], y[NP], dx[N];
    double xd[N], wd[NP], yr[NP], gx[N], want[N];
    tk_fill(x, N, 21, -2.0f, 2.0f), tk_fill(w, NP, 22, -1.0f, 1.0f), tk_fill(dx, N, 23, -1.0f, 1.0f);
    tk_to_double(xd, x, N), tk_to_double(wd, w, NP);
    pad_replicate_forward(y, x, ROWS, C, PAD);
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < W; k++) yr[r * W + k] = xd[r * C + (k < PAD ? 0 : k - PAD)];
    tk_expect_close("pad_replicate forward", y, yr, NP, FWD_TOL);
    lin_ctx c = {xd, wd};
    tk_numeric_grad(pad_loss, &c, xd, N, FD_H, gx);
    plus(want, dx, gx, N);
    pad_replicate_backward(dx, w, ROWS, C, PAD);
    tk_expect_close("pad_replicate dx (accumulated)", dx, want, N, GRAD_TOL);
}

/* ---- add_scaled, div_by, add_scalar: elementwise, each the bits of its one expression ---- */

typedef struct axpy_ctx {
    double *y, *x, *w;
    double s;
} axpy_ctx;

static double add_scaled_loss(void *c)
{
    axpy_ctx *g = c;
    double t = 0;
    for (int i = 0; i < N; i++) t += g->w[i] * (g->y[i] + g->x[i] * g->s);
    return t;
}

static void test_elementwise(void)
{
    const float s = -0.375f, d = 1.41421356f, k = 1e-8f;
    float x[N], y[N], w[N], got[N], want[N];
    double xd[N], yd[N], wd[N], gx[N], gy[N], ref[N];
    tk_fill(x, N, 31, -2.0f, 2.0f), tk_fill(y, N, 32, -2.0f, 2.0f), tk_fill(w, N, 33, -1.0f, 1.0f);
    tk_to_double(xd, x, N), tk_to_double(yd, y, N), tk_to_double(wd, w, N);
    memcpy(got, y, sizeof got);
    add_scaled(got, x, s, N);
    for (int i = 0; i < N; i++) ref[i] = yd[i] + xd[i] * s, want[i] = y[i] + x[i] * s;
    tk_expect_close("add_scaled", got, ref, N, FWD_TOL);
    tk_expect_bitwise("add_scaled is y + x s in float", got, want, N);
    axpy_ctx c = {yd, xd, wd, s}; /* linear: its gradients are the op itself, dx += dy s and dy passed on */
    tk_numeric_grad(add_scaled_loss, &c, xd, N, FD_H, gx);
    tk_numeric_grad(add_scaled_loss, &c, yd, N, FD_H, gy);
    float dx[N] = {0};
    add_scaled(dx, w, s, N);
    tk_expect_close("add_scaled's gradient of x (add_scaled of dy)", dx, gx, N, GRAD_TOL);
    tk_expect_close("add_scaled's gradient of y (dy)", w, gy, N, GRAD_TOL);
    memcpy(got, x, sizeof got);
    div_by(got, N, d);
    for (int i = 0; i < N; i++) ref[i] = xd[i] / d, want[i] = x[i] / d;
    tk_expect_close("div_by", got, ref, N, FWD_TOL);
    tk_expect_bitwise("div_by divides (x / d, not x * (1 / d))", got, want, N);
    memcpy(got, x, sizeof got);
    add_scalar(got, N, k);
    for (int i = 0; i < N; i++) ref[i] = xd[i] + k, want[i] = x[i] + k;
    tk_expect_close("add_scalar", got, ref, N, FWD_TOL);
    tk_expect_bitwise("add_scalar is x + c in float", got, want, N);
}

/* ---- tanh, backward from its output ---- */

static double tanh_loss(void *c)
{
    lin_ctx *g = c;
    double s = 0;
    for (int i = 0; i < N; i++) s += g->w[i] * tanh(g->x[i]);
    return s;
}

static void test_tanh(void)
{
    float x[N], w[N], y[N], dx[N], ip[N];
    double xd[N], wd[N], yr[N], gx[N], want[N];
    tk_fill(x, N, 41, -3.0f, 3.0f), tk_fill(w, N, 42, -1.0f, 1.0f), tk_fill(dx, N, 43, -1.0f, 1.0f);
    tk_to_double(xd, x, N), tk_to_double(wd, w, N);
    tanh_forward(y, x, N);
    for (int i = 0; i < N; i++) yr[i] = tanh(xd[i]);
    tk_expect_close("tanh forward", y, yr, N, FWD_TOL);
    lin_ctx c = {xd, wd};
    tk_numeric_grad(tanh_loss, &c, xd, N, FD_H, gx);
    plus(want, dx, gx, N);
    tanh_backward(dx, w, y, N);
    tk_expect_close("tanh dx (accumulated)", dx, want, N, GRAD_TOL);
    memcpy(ip, w, sizeof ip); /* in place: dy becomes dx */
    tanh_backward(ip, ip, y, N);
    tk_expect_close("tanh backward in place (dx == dy)", ip, gx, N, GRAD_TOL);
}

/* ---- channel_add: y (outer, C, inner) += b[c] ---- */

static double channel_loss(void *c)
{
    lin_ctx *g = c; /* x: the bias (R), w: (B, R, C) */
    double s = 0;
    for (int i = 0; i < N; i++) s += g->w[i] * g->x[i / C % R];
    return s;
}

static void test_channel_add(void)
{
    float y[N], x[N], b[R], db[R];
    double bd[R], wd[N], yr[N], gb[R], want[R];
    tk_fill(x, N, 51, -2.0f, 2.0f), tk_fill(b, R, 52, -1.0f, 1.0f), tk_fill(db, R, 53, -1.0f, 1.0f);
    tk_to_double(bd, b, R), tk_to_double(wd, x, N);
    memcpy(y, x, sizeof y);
    channel_add_forward(y, b, B, R, C);
    for (int i = 0; i < N; i++) yr[i] = wd[i] + bd[i / C % R];
    tk_expect_close("channel_add forward", y, yr, N, FWD_TOL);
    lin_ctx c = {bd, wd}; /* dy = x's values */
    tk_numeric_grad(channel_loss, &c, bd, R, FD_H, gb);
    plus(want, db, gb, R);
    channel_add_backward(db, x, B, R, C);
    tk_expect_close("channel_add db (accumulated)", db, want, R, GRAD_TOL);
    float seq[R]; /* in float, in order (outer, then inner): the plain loop's bits */
    tk_fill(seq, R, 53, -1.0f, 1.0f);
    for (int o = 0; o < B; o++)
        for (int r = 0; r < R; r++)
            for (int k = 0; k < C; k++) seq[r] += x[(o * R + r) * C + k];
    tk_expect_bitwise("channel_add db is the ordered float sum", db, seq, R);
}

/* ---- weighted_sum: y (B, C) = sum over r of w[r] x (B, R, C)[:, r] ---- */

typedef struct mix_ctx {
    double *x, *w, *g; /* g: the loss's weights on y (B, C) */
} mix_ctx;

static double mix_loss(void *c)
{
    mix_ctx *m = c;
    double s = 0;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < C; k++) {
            double v = 0;
            for (int r = 0; r < R; r++) v += m->w[r] * m->x[(b * R + r) * C + k];
            s += m->g[b * C + k] * v;
        }
    return s;
}

static void test_weighted_sum(void)
{
    enum { NY = B * C };
    float x[N], w[R], g[NY], y[NY], dx[N], dw[R];
    double xd[N], wd[R], gd[NY], yr[NY], gx[N], gw[R], want[N], wantw[R];
    tk_fill(x, N, 61, -2.0f, 2.0f), tk_fill(w, R, 62, -1.0f, 1.0f), tk_fill(g, NY, 63, -1.0f, 1.0f);
    tk_fill(dx, N, 64, -1.0f, 1.0f), tk_fill(dw, R, 65, -1.0f, 1.0f);
    tk_to_double(xd, x, N), tk_to_double(wd, w, R), tk_to_double(gd, g, NY);
    weighted_sum_forward(y, x, w, B, R, C);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < C; k++) {
            yr[b * C + k] = 0;
            for (int r = 0; r < R; r++) yr[b * C + k] += wd[r] * xd[(b * R + r) * C + k];
        }
    tk_expect_close("weighted_sum forward", y, yr, NY, FWD_TOL);
    mix_ctx c = {xd, wd, gd};
    tk_numeric_grad(mix_loss, &c, xd, N, FD_H, gx);
    tk_numeric_grad(mix_loss, &c, wd, R, FD_H, gw);
    plus(want, dx, gx, N), plus(wantw, dw, gw, R);
    weighted_sum_backward(dx, dw, g, x, w, B, R, C);
    tk_expect_close("weighted_sum dx (accumulated)", dx, want, N, GRAD_TOL);
    tk_expect_close("weighted_sum dw (accumulated)", dw, wantw, R, GRAD_TOL);
}

/* ---- masked_mean: y (B, C) = sum over rows of mask x / sum of mask, per sample ---- */

typedef struct mean_ctx {
    double *x, *w;
    const float *mask; /* (B, MS): R floats of each */
} mean_ctx;

enum { MS = R + 2 };

static double mean_loss(void *c)
{
    mean_ctx *g = c;
    double s = 0;
    for (int b = 0; b < B; b++) {
        double total = 0;
        for (int r = 0; r < R; r++) total += g->mask[b * MS + r];
        for (int k = 0; k < C && total != 0; k++) {
            double v = 0;
            for (int r = 0; r < R; r++) v += g->x[(b * R + r) * C + k] * g->mask[b * MS + r];
            s += g->w[b * C + k] * v / total;
        }
    }
    return s;
}

static void test_masked_mean(void)
{
    enum { NY = B * C };
    float x[N], w[NY], y[NY], dx[N], mask[B * MS];
    double xd[N], wd[NY], yr[NY], gx[N], want[N];
    tk_fill(x, N, 81, -2.0f, 2.0f), tk_fill(w, NY, 82, -1.0f, 1.0f), tk_fill(dx, N, 83, -1.0f, 1.0f);
    for (int i = 0; i < B * MS; i++) mask[i] = (float)(i % MS < 3); /* sample b: its first 3 tokens */
    mask[MS + 1] = 0.0f; /* a hole */
    tk_to_double(xd, x, N), tk_to_double(wd, w, NY);
    masked_mean_forward(y, x, mask, B, R, C, MS);
    mean_ctx c = {xd, wd, mask};
    for (int i = 0; i < NY; i++) { /* the loss with a one-hot weight is the mean itself */
        double one[NY] = {0};
        one[i] = 1;
        mean_ctx e = {xd, one, mask};
        yr[i] = mean_loss(&e);
    }
    tk_expect_close("masked_mean forward", y, yr, NY, FWD_TOL);
    tk_numeric_grad(mean_loss, &c, xd, N, FD_H, gx);
    plus(want, dx, gx, N);
    masked_mean_backward(dx, w, mask, B, R, C, MS);
    tk_expect_close("masked_mean dx (accumulated)", dx, want, N, GRAD_TOL);
    float none[B * MS] = {0}, z[NY], zeros[NY] = {0}; /* no tokens: zero, as a 0 / 0 is not taken */
    tk_fill(z, NY, 84, -1.0f, 1.0f);
    masked_mean_forward(z, x, none, B, R, C, MS);
    tk_expect_bitwise("masked_mean of no tokens is zero", z, zeros, NY);
}

/* ---- mask_bias and embedding_backward_padded: no gradient to compare, values to ---- */

static void test_mask_and_padding(void)
{
    enum { K = 9 }; /* each sample's mask R floats of a row of K */
    float mask[B * K], bias[B * R];
    double want[B * R];
    for (int i = 0; i < B * K; i++) mask[i] = (float)((i * 7) % 3 == 0);
    mask[K + 1] = 0.5f;
    mask_bias(bias, mask + 2, B, R, K, -10000.0f);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < R; j++) want[b * R + j] = (1.0 - mask[b * K + 2 + j]) * -10000.0;
    tk_expect_close("mask_bias", bias, want, B * R, FWD_TOL);
    enum { ROWS = 4, PADROW = 2 };
    const float idx[R] = {1, 2, 0, 2, 3};
    float table[ROWS * C] = {0}, dout[R * C];
    double tw[ROWS * C] = {0};
    tk_fill(dout, R * C, 71, -1.0f, 1.0f);
    for (int i = 0; i < R; i++)
        for (int k = 0; k < C && (int)idx[i] != PADROW; k++) tw[(int)idx[i] * C + k] += dout[i * C + k];
    embedding_backward_padded(table, dout, idx, R, C, PADROW);
    tk_expect_close("embedding_backward_padded (row 2 none)", table, tw, ROWS * C, FWD_TOL);
    float all[ROWS * C] = {0}, plain[ROWS * C] = {0};
    embedding_backward_padded(all, dout, idx, R, C, -1);
    embedding_backward(plain, dout, idx, R, C);
    tk_expect_bitwise("embedding_backward_padded with none is embedding_backward", all, plain, ROWS * C);
}

/* ---- host_loop: runs the family's loop on real buffers, not on dry ones ---- */

static st_status count_call(void *arg)
{
    ++*(int *)arg;
    return ST_ERR_INVALID; /* a loop's own status comes back */
}

static void test_host_loop(void)
{
    int calls = 0;
    float real[1];
    CHECK(host_loop(real, count_call, &calls) == ST_ERR_INVALID && calls == 1);
    pool *p = pool_create_dry(POOL_DEVICE, 0);
    float *dry = NULL;
    CHECK(p && !pool_alloc(p, 64, MEM_WORKSPACE, "dry", (void **)&dry));
    CHECK(host_loop(dry, count_call, &calls) == ST_OK && calls == 1);
    pool_free(p, dry);
    CHECK(pool_destroy(p) == 0);
}

/* ---- on a dry step's buffers each op does nothing: no access, which would fault ---- */

static void test_dry(void)
{
    pool *p = pool_create_dry(POOL_DEVICE, 0);
    float *a = NULL, *b = NULL, *s = NULL;
    CHECK(p && !pool_alloc(p, N * 4 * sizeof(float), MEM_WORKSPACE, "a", (void **)&a));
    CHECK(!pool_alloc(p, N * 4 * sizeof(float), MEM_WORKSPACE, "b", (void **)&b));
    CHECK(!pool_alloc(p, N * sizeof(float), MEM_WORKSPACE, "s", (void **)&s));
    transpose_batched_backward(a, b, B, R, C);
    add_scaled(a, b, 2.0f, N), div_by(a, N, 3.0f), add_scalar(a, N, 1.0f);
    row_scale_forward(a, b, s, B * R, C), row_scale_backward(a, s, b, a, s, B * R, C);
    pad_replicate_forward(a, b, B * R, C, PAD), pad_replicate_backward(a, b, B * R, C, PAD);
    tanh_forward(a, b, N), tanh_backward(a, b, s, N), tanh_backward(a, a, s, N);
    channel_add_forward(a, s, B, R, C), channel_add_backward(s, a, B, R, C);
    weighted_sum_forward(a, b, s, B, R, C), weighted_sum_backward(a, s, a, b, s, B, R, C);
    mask_bias(a, b, B, R, C, -1.0f), embedding_backward_padded(a, b, s, R, C, 0);
    masked_mean_forward(a, b, s, B, R, C, R), masked_mean_backward(a, b, s, B, R, C, R);
    CHECK(1); /* reached: nothing faulted */
    pool_free(p, s), pool_free(p, b), pool_free(p, a);
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    test_transpose();
    test_row_scale();
    test_pad_replicate();
    test_elementwise();
    test_tanh();
    test_channel_add();
    test_weighted_sum();
    test_masked_mean();
    test_mask_and_padding();
    test_host_loop();
    test_dry();
    return tk_finish();
}
