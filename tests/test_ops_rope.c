/* Rotary position embeddings against independent double-precision references.
 * rope_2d: forward on strided views (k inside a packed qkv buffer, the image rows of a joint text+image
 * sequence) with the bytes around the view untouched, backward against central differences of
 * sum(w * reference(x)), backward(forward(x)) == x, the zero angles left bitwise unchanged, the row and column
 * halves in their places, and bitwise repeatability across calls and thread counts.
 * rope with position ids: the table, and forward on a Flux-like joint sequence (3 axes, text ids 0, image ids
 * (0, r, c)) and an odd-sized 4-axis case with fractional and negative ids, each on a strided view; zero ids
 * leave x bitwise unchanged; backward against central differences and backward(forward(x)) == x; the same bits
 * at every thread count; nothing computed on dry buffers. */
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

/* ---- rope with position ids ---- */

/* One case: x (batch, tokens, heads * hd) viewed inside a buffer of rows `rs` floats (the view at column off),
 * batches tokens * rs apart; ids (tokens, n_axes). */
typedef struct id_case {
    const char *name;
    int64_t batch, tokens, heads, hd, rs, off;
    int n_axes;
    const int64_t *axes;
    const float *ids;
    double theta;
} id_case;

static int64_t id_n(const id_case *c) { return c->batch * c->tokens * c->heads * c->hd; }

/* The reference in double, written from diffusers' FluxPosEmbed as a rotation: axis a's pair j of a head, at
 * head offset 2 * (sum of the earlier axes' pairs + j), is multiplied by [[cos, -sin], [sin, cos]] of
 * pos_a * exp(-ln(theta) 2j / axes[a]). Dense (batch, tokens, heads * hd) in and out; inverse turns the other
 * way. cs (tokens, hd/2, 2), if not NULL, gets the angles' cos and sin. */
static void rope_ids_ref(const id_case *c, double *y, const double *x, double *cs, int inverse)
{
    const int64_t d = c->heads * c->hd;
    for (int64_t t = 0; t < c->tokens; t++) {
        int64_t p = 0;
        for (int a = 0; a < c->n_axes; a++)
            for (int64_t j = 0; j < c->axes[a] / 2; j++, p++) {
                double ang = c->ids[t * c->n_axes + a] * exp(-log(c->theta) * (double)(2 * j) / (double)c->axes[a]);
                double co = cos(ang), si = inverse ? -sin(ang) : sin(ang);
                if (cs) cs[(t * (c->hd / 2) + p) * 2] = co, cs[(t * (c->hd / 2) + p) * 2 + 1] = si;
                for (int64_t b = 0; b < c->batch; b++)
                    for (int64_t k = 0; k < c->heads; k++) {
                        int64_t i = (b * c->tokens + t) * d + k * c->hd + 2 * p;
                        double x0 = x[i], x1 = x[i + 1];
                        y[i] = co * x0 - si * x1;
                        y[i + 1] = si * x0 + co * x1;
                    }
            }
    }
}

/* Dense <-> the case's view inside buf (to = 1: dense into the view). */
static void id_copy(const id_case *c, float *buf, float *dense, int to)
{
    const int64_t d = c->heads * c->hd;
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t t = 0; t < c->tokens; t++) {
            float *v = buf + c->off + (b * c->tokens + t) * c->rs, *e = dense + (b * c->tokens + t) * d;
            if (to) memcpy(v, e, (size_t)d * sizeof(float));
            else memcpy(e, v, (size_t)d * sizeof(float));
        }
}

/* Every float of buf outside the case's view equals orig's. */
static int id_outside_untouched(const id_case *c, const float *buf, const float *orig)
{
    const int64_t n = c->batch * c->tokens * c->rs, d = c->heads * c->hd;
    int same = 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t col = i % c->rs - c->off;
        if (col < 0 || col >= d) same &= memcmp(&buf[i], &orig[i], sizeof(float)) == 0;
    }
    return same;
}

/* Whether every float is its double rounded once: the nearer float, or the farther of the two only where the
 * double is a rounding midpoint to within the reference's own error (the ids here keep angles below 1e4, whose
 * double cos and sin are good to about 1e-12). A cos or sin in float, or a second rounding, is caught. */
static int rounded_once(const float *got, const double *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float f = (float)want[i];
        if (got[i] != f && fabs(fabs((double)got[i] - want[i]) - fabs((double)f - want[i])) > 1e-12) return 0;
    }
    return 1;
}

/* The table against the reference's cos and sin, forward on the view against the reference, the bytes around
 * the view untouched, then backward on the view back to x. */
static void test_ids_forward(const id_case *c, uint64_t seed)
{
    const int64_t n = id_n(c), nbuf = c->batch * c->tokens * c->rs, nt = c->tokens * c->hd;
    float *buf = fbuf(nbuf), *orig = fbuf(nbuf), *got = fbuf(n), *table = fbuf(nt);
    double *xd = dbuf(n), *yr = dbuf(n), *cs = dbuf(nt);
    tk_fill(buf, nbuf, seed, -2.0f, 2.0f);
    memcpy(orig, buf, (size_t)nbuf * sizeof(float));
    id_copy(c, orig, got, 0);
    tk_to_double(xd, got, n);
    rope_ids_ref(c, yr, xd, cs, 0);

    rope_table(table, c->ids, c->tokens, c->n_axes, c->axes, c->theta);
    char what[96];
    snprintf(what, sizeof what, "rope_table, %s", c->name);
    tk_expect_close(what, table, cs, nt, FWD_TOL);
    CHECKF(rounded_once(table, cs, nt), "rope_table (%s): a coefficient is not its double rounded once", c->name);
    rope_forward(buf + c->off, c->batch, c->tokens, c->heads, c->hd, c->rs, c->tokens * c->rs, table);
    id_copy(c, buf, got, 0);
    snprintf(what, sizeof what, "rope_forward, %s", c->name);
    tk_expect_close(what, got, yr, n, FWD_TOL);
    CHECKF(id_outside_untouched(c, buf, orig), "rope_forward (%s) wrote outside its view", c->name);

    rope_backward(buf + c->off, c->batch, c->tokens, c->heads, c->hd, c->rs, c->tokens * c->rs, table);
    id_copy(c, buf, got, 0);
    snprintf(what, sizeof what, "rope_backward(rope_forward(x)) == x, %s", c->name);
    tk_expect_close(what, got, xd, n, FWD_TOL);
    CHECKF(id_outside_untouched(c, buf, orig), "rope_backward (%s) wrote outside its view", c->name);
    free(buf), free(orig), free(got), free(table), free(xd), free(yr), free(cs);
}

/* torch's fp32 arithmetic, x * cos + rotated * sin with rotated = (-x1, x0): each product rounded to float, then
 * the sum. The products go through volatile so that the compiler cannot fuse them into FMAs here either. */
static void torch_fp32(const id_case *c, float *y, const float *x, const float *table, int inverse)
{
    const int64_t d = c->heads * c->hd;
    for (int64_t i = 0; i < id_n(c); i += 2) {
        const int64_t t = i / d % c->tokens, p = i % c->hd / 2;
        const float *cs = table + (t * (c->hd / 2) + p) * 2, co = cs[0], si = inverse ? -cs[1] : cs[1];
        volatile float a = x[i] * co, b = -x[i + 1] * si, e = x[i + 1] * co, f = x[i] * si;
        y[i] = a + b, y[i + 1] = e + f;
    }
}

/* With the op's own table, forward and backward give torch's bits (a fused multiply-add does not). */
static void test_ids_torch_bits(const id_case *c, uint64_t seed)
{
    const int64_t n = id_n(c), d = c->heads * c->hd;
    float *x = fbuf(n), *y = fbuf(n), *want = fbuf(n), *table = fbuf(c->tokens * c->hd);
    tk_fill(x, n, seed, -2.0f, 2.0f);
    rope_table(table, c->ids, c->tokens, c->n_axes, c->axes, c->theta);
    for (int inverse = 0; inverse < 2; inverse++) {
        memcpy(y, x, (size_t)n * sizeof(float));
        (inverse ? rope_backward : rope_forward)(y, c->batch, c->tokens, c->heads, c->hd, d, c->tokens * d, table);
        torch_fp32(c, want, x, table, inverse);
        char what[96];
        snprintf(what, sizeof what, "%s: torch's fp32 bits, %s", inverse ? "backward" : "forward", c->name);
        tk_expect_bitwise(what, y, want, n);
    }
    free(x), free(y), free(want), free(table);
}

typedef struct ids_ctx {
    const id_case *c;
    double *x, *w;
} ids_ctx;

static double ids_loss(void *p)
{
    ids_ctx *r = p;
    const int64_t n = id_n(r->c);
    double *y = dbuf(n), s = 0;
    rope_ids_ref(r->c, y, r->x, NULL, 0);
    for (int64_t i = 0; i < n; i++) s += r->w[i] * y[i];
    free(y);
    return s;
}

/* dy = w rotated back in place on the case's view against central differences of sum(w * reference(x)); and
 * rotating dy forward instead (the wrong direction) does not match them. */
static void test_ids_backward_fd(const id_case *c, uint64_t seed)
{
    const int64_t n = id_n(c), nbuf = c->batch * c->tokens * c->rs;
    float *x = fbuf(n), *w = fbuf(n), *buf = fbuf(nbuf), *orig = fbuf(nbuf), *dx = fbuf(n);
    float *table = fbuf(c->tokens * c->hd);
    double *xd = dbuf(n), *wd = dbuf(n), *g = dbuf(n);
    tk_fill(x, n, seed, -2.0f, 2.0f);
    tk_fill(w, n, seed + 1, -1.0f, 1.0f);
    tk_to_double(xd, x, n);
    tk_to_double(wd, w, n);
    ids_ctx ctx = {c, xd, wd};
    tk_numeric_grad(ids_loss, &ctx, xd, n, FD_H, g);

    rope_table(table, c->ids, c->tokens, c->n_axes, c->axes, c->theta);
    tk_fill(buf, nbuf, seed + 2, -1.0f, 1.0f);
    id_copy(c, buf, w, 1);
    memcpy(orig, buf, (size_t)nbuf * sizeof(float));
    rope_backward(buf + c->off, c->batch, c->tokens, c->heads, c->hd, c->rs, c->tokens * c->rs, table);
    id_copy(c, buf, dx, 0);
    char what[96];
    snprintf(what, sizeof what, "rope_backward vs finite differences, %s", c->name);
    tk_expect_close(what, dx, g, n, GRAD_TOL);
    CHECKF(id_outside_untouched(c, buf, orig), "rope_backward (%s) wrote outside its view", c->name);

    memcpy(dx, w, (size_t)n * sizeof(float));
    rope_forward(dx, c->batch, c->tokens, c->heads, c->hd, c->heads * c->hd, c->tokens * c->heads * c->hd, table);
    double rel = 0;
    CHECKF(!tk_close(dx, g, n, GRAD_TOL, &rel) && rel > 1e-2, "%s: rotating dy forward also matched the FD (%.2g)",
           c->name, rel);
    free(x), free(w), free(buf), free(orig), free(dx), free(table), free(xd), free(wd), free(g);
}

/* Flux.1's layout at a small size: axes (4, 6, 6) of a 16-wide head, 3 text tokens at ids 0 then a 3 x 4 image
 * grid at (0, r, c); q in a packed (rows, 3D) qkv buffer, rotated where it lies. */
enum { FT = 3, FR = 3, FC = 4, FTOK = FT + FR * FC, FH = 2, FHD = 16 };
static const int64_t flux_axes[] = {4, 6, 6};
static float flux_ids[FTOK * 3];

static id_case flux_case(void)
{
    for (int t = 0; t < FTOK; t++) {
        int i = t - FT;
        flux_ids[t * 3] = 0;
        flux_ids[t * 3 + 1] = i < 0 ? 0.0f : (float)(i / FC);
        flux_ids[t * 3 + 2] = i < 0 ? 0.0f : (float)(i % FC);
    }
    return (id_case){"flux-like, q in packed qkv", 2, FTOK, FH, FHD, 3 * FH * FHD, 0, 3, flux_axes, flux_ids, 10000.0};
}

/* Flux.2-like: 4 axes of uneven widths (22 = 2 + 10 + 4 + 6), theta 2000, 3 heads, 7 tokens with fractional,
 * negative and large ids, 3 batch items, k at an odd column of rows wider than the heads. */
static const int64_t odd_axes[] = {2, 10, 4, 6};
static const float odd_ids[7 * 4] = {0,    1,  2,     3,   /* */ 0.5f, -1, 4,   7,    /* */ 3,  0,   -2.25f, 40,
                                     1000, 5,  0.125f, -9, /* */ 2,    2,  2,   2,    /* */ -7, 100, 0,      1,
                                     0,    0,  0,     0};

static id_case odd_case(void)
{
    return (id_case){"4 odd axes, k at column 5", 3, 7, 3, 22, 3 * 22 + 9, 5, 4, odd_axes, odd_ids, 2000.0};
}

/* Zero ids give cos 1, sin 0: every float comes back bitwise (text tokens of the Flux case and an all-zero
 * table); and the Flux case's axis 0 (ids 0 everywhere) is bitwise untouched in every token. */
static void test_ids_zero(void)
{
    id_case c = flux_case();
    const int64_t n = id_n(&c), d = c.heads * c.hd;
    float *x = fbuf(n), *y = fbuf(n), *table = fbuf(c.tokens * c.hd);
    tk_fill(x, n, 71, -2.0f, 2.0f);
    memcpy(y, x, (size_t)n * sizeof(float));
    rope_table(table, c.ids, c.tokens, c.n_axes, c.axes, c.theta);
    rope_forward(y, c.batch, c.tokens, c.heads, c.hd, d, c.tokens * d, table);
    int text = 1, axis0 = 1, image = 1;
    for (int64_t b = 0; b < c.batch; b++)
        for (int64_t t = 0; t < c.tokens; t++) {
            const int64_t i = (b * c.tokens + t) * d;
            if (t < FT) text &= memcmp(y + i, x + i, (size_t)d * sizeof(float)) == 0;
            else if (t > FT) image &= memcmp(y + i, x + i, (size_t)d * sizeof(float)) != 0;
            for (int64_t k = 0; k < c.heads; k++)
                axis0 &= memcmp(y + i + k * c.hd, x + i + k * c.hd, (size_t)flux_axes[0] * sizeof(float)) == 0;
        }
    CHECKF(text, "a text token (ids 0) changed");
    CHECKF(axis0, "axis 0 (ids 0 everywhere) changed");
    CHECKF(image, "an image token away from (0, 0, 0) was left unchanged");

    float zeros[FTOK * 3] = {0};
    rope_table(table, zeros, c.tokens, c.n_axes, c.axes, c.theta);
    memcpy(y, x, (size_t)n * sizeof(float));
    rope_forward(y, c.batch, c.tokens, c.heads, c.hd, d, c.tokens * d, table);
    tk_expect_bitwise("all ids 0: forward leaves x bitwise", y, x, n);
    rope_backward(y, c.batch, c.tokens, c.heads, c.hd, d, c.tokens * d, table);
    tk_expect_bitwise("all ids 0: backward leaves dy bitwise", y, x, n);
    free(x), free(y), free(table);
}

/* Flux.1's real widths at a size that runs in parallel: the table (300 tokens x 64 pairs) and forward +
 * backward give the same bits for 1, 2 and 7 threads. */
static void test_ids_threads(void)
{
    const int64_t b = 2, tokens = 300, heads = 3, hd = 128, rs = 3 * heads * hd, n = b * tokens * rs;
    const int64_t axes[] = {16, 56, 56};
    const int threads[] = {1, 2, 7};
    int saved = ops_threads();
    float *ids = fbuf(tokens * 3), *x = fbuf(n), *table[3], *out[3];
    for (int64_t t = 0; t < tokens; t++) ids[t * 3 + 1] = (float)(t / 20), ids[t * 3 + 2] = (float)(t % 20);
    tk_fill(x, n, 81, -2.0f, 2.0f);
    for (int k = 0; k < 3; k++) {
        ops_set_threads(threads[k]);
        table[k] = fbuf(tokens * hd), out[k] = fbuf(n);
        rope_table(table[k], ids, tokens, 3, axes, 10000.0);
        memcpy(out[k], x, (size_t)n * sizeof(float));
        rope_forward(out[k] + heads * hd, b, tokens, heads, hd, rs, tokens * rs, table[k]);
        rope_backward(out[k], b, tokens, heads, hd, rs, tokens * rs, table[k]);
    }
    for (int k = 1; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "table, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, table[k], table[0], tokens * hd);
        snprintf(what, sizeof what, "rope forward + backward, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, out[k], out[0], n);
    }
    for (int k = 0; k < 3; k++) free(table[k]), free(out[k]);
    free(ids), free(x);
    ops_set_threads(saved);
}

/* On dry buffers the ops compute nothing (touching a dry address would fault) and are still profiled. */
static void test_ids_dry(void)
{
    pool *dry = pool_create_dry(POOL_DEVICE, 0);
    void *x = NULL, *table = NULL;
    const int64_t axes[] = {16, 56, 56};
    float ids[4 * 3] = {0};
    CHECK(pool_alloc(dry, 2 * 4 * 2 * 128 * sizeof(float), MEM_ACTIVATIONS, "x", &x) == ST_OK);
    CHECK(pool_alloc(dry, 4 * 128 * sizeof(float), MEM_WORKSPACE, "table", &table) == ST_OK);
    ops_profile_start();
    rope_table(table, ids, 4, 3, axes, 10000.0);
    rope_forward(x, 2, 4, 2, 128, 256, 4 * 256, table);
    rope_backward(x, 2, 4, 2, 128, 256, 4 * 256, table);
    op_profile prof;
    ops_profile_stop(&prof);
    CHECKF(prof.calls[OP_POINTWISE] == 3 && prof.bytes[OP_POINTWISE] > 0, "dry rope: %ld pointwise calls, %g bytes",
           prof.calls[OP_POINTWISE], prof.bytes[OP_POINTWISE]);
    pool_free(dry, x), pool_free(dry, table);
    CHECK(pool_destroy(dry) == 0);
}

int main(void)
{
    test_forward_view("k in packed qkv", NQKV, D, RS, T * RS, 11);
    test_forward_view("joint seq image rows", NJ, TXT * D, D, JT * D, 12);
    test_backward_fd();
    test_positions();
    test_threads();
    const id_case flux = flux_case(), odd = odd_case();
    test_ids_forward(&flux, 61);
    test_ids_forward(&odd, 62);
    test_ids_backward_fd(&flux, 63);
    test_ids_backward_fd(&odd, 64);
    test_ids_torch_bits(&flux, 65);
    test_ids_torch_bits(&odd, 66);
    test_ids_zero();
    test_ids_threads();
    test_ids_dry();
    return tk_finish();
}
