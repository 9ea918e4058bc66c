/* 2D rotary position embedding against an independent double-precision reference: forward on strided views
 * (k inside a packed qkv buffer, the image rows of a joint text+image sequence) with the bytes around the view
 * untouched, backward against central differences of sum(w * reference(x)), backward(forward(x)) == x, the
 * zero angles left bitwise unchanged, the row and column halves in their places, and bitwise repeatability
 * across calls and thread counts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

#define FWD_TOL 1e-6
#define GRAD_TOL 1e-4
#define FD_H 1e-6
#define THETA 10000.0

enum {
    B = 2, G = 3, T = G * G, H = 2, HD = 8, D = H * HD, /* one of q, k, v: (B, T, D) */
    RS = 3 * D,                                          /* row stride of the packed qkv buffer (B*T, 3D) */
    NQKV = B * T * RS, N = B * T * D,
    TXT = 2, JT = TXT + T, NJ = B * JT * D /* joint sequence: TXT text rows, then the T image rows */
};

static float *fbuf(int64_t n) { return calloc((size_t)n, sizeof(float)); }
static double *dbuf(int64_t n) { return calloc((size_t)n, sizeof(double)); }

/* Flux's rope written out: for each axis (row, then column) of size h = HD/2, omega_j = 1 / theta^(2j/h) and
 * pair j of that axis is multiplied by the 2x2 matrix [[cos, -sin], [sin, cos]] of pos * omega_j. Dense
 * (B, T, D) in and out. swap puts the column in the first half (a wrong layout the op must not match). */
static void rope_ref(double *y, const double *x, int swap)
{
    const int h = HD / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int k = 0; k < H; k++)
                for (int axis = 0; axis < 2; axis++) {
                    int pos = (axis == 0) != (swap != 0) ? t / G : t % G;
                    for (int j = 0; j < h / 2; j++) {
                        double omega = 1.0 / pow(THETA, (double)(2 * j) / (double)h);
                        double a = pos * omega, m[2][2] = {{cos(a), -sin(a)}, {sin(a), cos(a)}};
                        int i = (b * T + t) * D + k * HD + axis * h + 2 * j;
                        double x0 = x[i], x1 = x[i + 1];
                        y[i] = m[0][0] * x0 + m[0][1] * x1;
                        y[i + 1] = m[1][0] * x0 + m[1][1] * x1;
                    }
                }
}

/* Dense (B, T, D) <-> the view of rows `rs` apart, batches `bs` apart, starting at base. */
static void gather(float *dst, const float *base, int64_t rs, int64_t bs)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) memcpy(dst + (b * T + t) * D, base + b * bs + t * rs, D * sizeof(float));
}
static void scatter(float *base, const float *src, int64_t rs, int64_t bs)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) memcpy(base + b * bs + t * rs, src + (b * T + t) * D, D * sizeof(float));
}

/* Every float of buf outside the view equals the same float of orig. */
static int outside_untouched(const float *buf, const float *orig, int64_t n, int64_t off, int64_t rs, int64_t bs)
{
    char *in = calloc((size_t)n, 1);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) memset(in + off + b * bs + t * rs, 1, D);
    int same = 1;
    for (int64_t i = 0; i < n; i++)
        if (!in[i]) same &= memcmp(&buf[i], &orig[i], sizeof(float)) == 0;
    free(in);
    return same;
}

/* ---- (a) forward on strided views ---- */

static void test_forward_view(const char *name, int64_t n, int64_t off, int64_t rs, int64_t bs, uint64_t seed)
{
    float *buf = fbuf(n), *orig = fbuf(n), *got = fbuf(N);
    double *xd = dbuf(N), *yr = dbuf(N);
    tk_fill(buf, n, seed, -2.0f, 2.0f);
    memcpy(orig, buf, (size_t)n * sizeof(float));
    gather(got, orig + off, rs, bs);
    tk_to_double(xd, got, N);
    rope_ref(yr, xd, 0);

    rope_2d_forward(buf + off, B, T, G, H, HD, rs, bs, THETA);
    gather(got, buf + off, rs, bs);
    char what[80];
    snprintf(what, sizeof what, "forward, %s", name);
    tk_expect_close(what, got, yr, N, FWD_TOL);
    CHECKF(outside_untouched(buf, orig, n, off, rs, bs), "rope_2d_forward (%s) wrote outside its view", name);

    /* backward on the same view is the inverse rotation: back to x */
    rope_2d_backward(buf + off, B, T, G, H, HD, rs, bs, THETA);
    gather(got, buf + off, rs, bs);
    snprintf(what, sizeof what, "bwd(fwd(x)) == x, %s", name);
    tk_expect_close(what, got, xd, N, FWD_TOL);
    CHECKF(outside_untouched(buf, orig, n, off, rs, bs), "rope_2d_backward (%s) wrote outside its view", name);
    free(buf), free(orig), free(got), free(xd), free(yr);
}

/* ---- (b) backward against central differences of sum(w * rope_ref(x)) ---- */

typedef struct rope_ctx {
    double *x, *w;
} rope_ctx;

static double rope_loss(void *c)
{
    rope_ctx *r = c;
    double *y = dbuf(N), s = 0;
    rope_ref(y, r->x, 0);
    for (int i = 0; i < N; i++) s += r->w[i] * y[i];
    free(y);
    return s;
}

static void test_backward_fd(void)
{
    float *x = fbuf(N), *w = fbuf(N), *buf = fbuf(NQKV), *orig = fbuf(NQKV), *dx = fbuf(N);
    double *xd = dbuf(N), *wd = dbuf(N), *g = dbuf(N);
    tk_fill(x, N, 31, -2.0f, 2.0f);
    tk_fill(w, N, 32, -1.0f, 1.0f);
    tk_to_double(xd, x, N);
    tk_to_double(wd, w, N);
    rope_ctx c = {xd, wd};
    tk_numeric_grad(rope_loss, &c, xd, N, FD_H, g);

    /* dy = w sits in the k slot of a packed (B*T, 3D) gradient buffer, rotated where it lies */
    tk_fill(buf, NQKV, 33, -1.0f, 1.0f);
    scatter(buf + D, w, RS, T * RS);
    memcpy(orig, buf, NQKV * sizeof(float));
    rope_2d_backward(buf + D, B, T, G, H, HD, RS, T * RS, THETA);
    gather(dx, buf + D, RS, T * RS);
    tk_expect_close("backward vs finite differences (strided)", dx, g, N, GRAD_TOL);
    CHECKF(outside_untouched(buf, orig, NQKV, D, RS, T * RS), "rope_2d_backward wrote outside its view");

    /* and its sign: the forward's gradient (a wrong-direction rotation) is far from it */
    memcpy(dx, w, N * sizeof(float));
    rope_2d_forward(dx, B, T, G, H, HD, D, T * D, THETA);
    double rel = 0;
    CHECKF(!tk_close(dx, g, N, GRAD_TOL, &rel) && rel > 1e-2, "rotating dy forward also matched the FD (%.2g)",
           rel);
    free(x), free(w), free(buf), free(orig), free(dx), free(xd), free(wd), free(g);
}

/* ---- (c) zero angles and determinism; (d) the row in the first half, the column in the second ---- */

static void test_positions(void)
{
    const int h = HD / 2;
    float *x = fbuf(N), *y = fbuf(N), *y2 = fbuf(N);
    double *xd = dbuf(N), *yr = dbuf(N), *ys = dbuf(N);
    tk_fill(x, N, 41, -2.0f, 2.0f);
    tk_to_double(xd, x, N);
    memcpy(y, x, N * sizeof(float));
    rope_2d_forward(y, B, T, G, H, HD, D, T * D, THETA);
    memcpy(y2, x, N * sizeof(float));
    rope_2d_forward(y2, B, T, G, H, HD, D, T * D, THETA);
    tk_expect_bitwise("forward repeats bit for bit", y2, y, N);

    /* token 0 (row 0, column 0) of every batch item is untouched; so is the row half of every token in row 0
     * and the column half of every token in column 0 */
    int zero_tok = 1, zero_row = 1, zero_col = 1;
    for (int b = 0; b < B; b++) {
        zero_tok &= memcmp(y + b * T * D, x + b * T * D, D * sizeof(float)) == 0;
        for (int t = 0; t < T; t++)
            for (int k = 0; k < H; k++) {
                int i = (b * T + t) * D + k * HD;
                if (t / G == 0) zero_row &= memcmp(y + i, x + i, h * sizeof(float)) == 0;
                if (t % G == 0) zero_col &= memcmp(y + i + h, x + i + h, h * sizeof(float)) == 0;
            }
    }
    CHECKF(zero_tok, "token 0 (row 0, column 0) changed");
    CHECKF(zero_row, "the row half of a row-0 token changed");
    CHECKF(zero_col, "the column half of a column-0 token changed");

    /* token 5 is row 1, column 2: it matches the reference and not the reference with the halves swapped */
    rope_ref(yr, xd, 0);
    rope_ref(ys, xd, 1);
    const int t5 = 1 * G + 2, i5 = (1 * T + t5) * D;
    tk_expect_close("token at row 1, column 2 (batch 1)", y + i5, yr + i5, D, FWD_TOL);
    double rel = 0;
    CHECKF(!tk_close(y + i5, ys + i5, D, FWD_TOL, &rel) && rel > 1e-2,
           "the op also matches the swapped-halves reference (%.2g): the check cannot see a swap", rel);
    free(x), free(y), free(y2), free(xd), free(yr), free(ys);
}

/* ---- a size large enough to run in parallel: the same bits for every thread count ---- */

static void test_threads(void)
{
    const int64_t b = 2, grid = 16, t = grid * grid, heads = 4, hd = 64, rs = 3 * heads * hd, n = b * t * rs;
    const int threads[] = {1, 2, 7};
    int saved = ops_threads();
    float *x = fbuf(n), *out[3];
    tk_fill(x, n, 51, -2.0f, 2.0f);
    for (int k = 0; k < 3; k++) {
        ops_set_threads(threads[k]);
        out[k] = fbuf(n);
        memcpy(out[k], x, (size_t)n * sizeof(float));
        rope_2d_forward(out[k] + heads * hd, b, t, grid, heads, hd, rs, t * rs, THETA);
        rope_2d_backward(out[k], b, t, grid, heads, hd, rs, t * rs, THETA);
    }
    for (int k = 1; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "forward + backward, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, out[k], out[0], n);
    }
    /* and the large grid is right: one far token of batch 1 against a direct double computation */
    const int64_t tok = 13 * grid + 11, kh = 3, j = 5, i = (1 * t + tok) * rs + heads * hd + kh * hd + hd / 2 + 2 * j;
    double a = 11.0 * pow(THETA, -2.0 * j / (hd / 2)), x0 = x[i], x1 = x[i + 1];
    double want[2] = {x0 * cos(a) - x1 * sin(a), x0 * sin(a) + x1 * cos(a)};
    tk_expect_close("column pair of token (13, 11), grid 16", out[0] + i, want, 2, FWD_TOL);
    for (int k = 0; k < 3; k++) free(out[k]);
    free(x);
    ops_set_threads(saved);
}

int main(void)
{
    test_forward_view("k in packed qkv", NQKV, D, RS, T * RS, 11);
    test_forward_view("joint seq image rows", NJ, TXT * D, D, JT * D, 12);
    test_backward_fd();
    test_positions();
    test_threads();
    return tk_finish();
}
