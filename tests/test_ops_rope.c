/* Rotary position embeddings with position ids against an independent double-precision reference: the table,
 * and forward on a Flux-like joint sequence (3 axes, text ids 0, image ids (0, r, c), q inside a packed qkv
 * buffer) and an odd-sized 4-axis case with fractional and negative ids (k at an odd column, the view only the
 * later rows of each batch item), with the bytes around each view untouched; zero ids leave x bitwise
 * unchanged; backward against central differences and backward(forward(x)) == x; torch's fp32 bits; the same
 * bits at every thread count, and a far token of the parallel size right; nothing computed on dry buffers; the
 * rotate-half variant (Cosmos's) against its own reference and by central differences. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

#define FWD_TOL 1e-6
#define GRAD_TOL 1e-4
#define FD_H 1e-6

static float *fbuf(int64_t n) { return calloc((size_t)n, sizeof(float)); }
static double *dbuf(int64_t n) { return calloc((size_t)n, sizeof(double)); }

/* One case: x (batch, tokens, heads * hd) viewed inside a buffer of rows `rs` floats: each batch item is `lead`
 * rows outside the view (a joint sequence's text rows) then the view's tokens, at column off; ids (tokens,
 * n_axes). */
typedef struct id_case {
    const char *name;
    int64_t batch, tokens, heads, hd, rs, off, lead;
    int n_axes;
    const int64_t *axes;
    const float *ids;
    double theta;
} id_case;

static int64_t id_n(const id_case *c) { return c->batch * c->tokens * c->heads * c->hd; }
static int64_t id_bs(const id_case *c) { return (c->lead + c->tokens) * c->rs; } /* the view's batch stride */
static int64_t id_nbuf(const id_case *c) { return c->batch * id_bs(c); }
static int64_t id_base(const id_case *c) { return c->lead * c->rs + c->off; } /* the view's first float */

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
            float *v = buf + id_base(c) + b * id_bs(c) + t * c->rs, *e = dense + (b * c->tokens + t) * d;
            if (to) memcpy(v, e, (size_t)d * sizeof(float));
            else memcpy(e, v, (size_t)d * sizeof(float));
        }
}

/* Every float of buf outside the case's view equals orig's. */
static int id_outside_untouched(const id_case *c, const float *buf, const float *orig)
{
    const int64_t d = c->heads * c->hd;
    int same = 1;
    for (int64_t i = 0; i < id_nbuf(c); i++) {
        const int64_t row = i % id_bs(c) / c->rs, col = i % c->rs - c->off;
        if (row < c->lead || col < 0 || col >= d) same &= memcmp(&buf[i], &orig[i], sizeof(float)) == 0;
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
    const int64_t n = id_n(c), nbuf = id_nbuf(c), nt = c->tokens * c->hd;
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
    rope_forward(buf + id_base(c), c->batch, c->tokens, c->heads, c->hd, c->rs, id_bs(c), table);
    id_copy(c, buf, got, 0);
    snprintf(what, sizeof what, "rope_forward, %s", c->name);
    tk_expect_close(what, got, yr, n, FWD_TOL);
    CHECKF(id_outside_untouched(c, buf, orig), "rope_forward (%s) wrote outside its view", c->name);

    rope_backward(buf + id_base(c), c->batch, c->tokens, c->heads, c->hd, c->rs, id_bs(c), table);
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
    const int64_t n = id_n(c), nbuf = id_nbuf(c);
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
    rope_backward(buf + id_base(c), c->batch, c->tokens, c->heads, c->hd, c->rs, id_bs(c), table);
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
    return (id_case){"flux-like, q in packed qkv", 2, FTOK, FH, FHD, 3 * FH * FHD, 0, 0, 3, flux_axes, flux_ids, 10000.0};
}

/* Flux.2-like: 4 axes of uneven widths (22 = 2 + 10 + 4 + 6), theta 2000, 3 heads, 7 tokens with fractional,
 * negative and large ids, 3 batch items, k at an odd column of rows wider than the heads, and 2 rows before the
 * view in each batch item (so the batch stride is not tokens rows). */
static const int64_t odd_axes[] = {2, 10, 4, 6};
static const float odd_ids[7 * 4] = {0,    1,  2,     3,   /* */ 0.5f, -1, 4,   7,    /* */ 3,  0,   -2.25f, 40,
                                     1000, 5,  0.125f, -9, /* */ 2,    2,  2,   2,    /* */ -7, 100, 0,      1,
                                     0,    0,  0,     0};

static id_case odd_case(void)
{
    return (id_case){"4 odd axes, k at column 5 after 2 rows", 3, 7, 3, 22, 3 * 22 + 9, 5, 2, 4, odd_axes, odd_ids, 2000.0};
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
 * backward give the same bits for 1, 2 and 7 threads, and a far token's pair is right. */
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
    /* k (rotated forward) of batch 1, last token (ids (0, 14, 19)), head 2, the column axis's pair 5 */
    const int64_t t = tokens - 1, j = 5, p = 8 + 28 + j, i = (tokens + t) * rs + heads * hd + 2 * hd + 2 * p;
    const double a = 19.0 * pow(10000.0, -2.0 * j / 56.0), x0 = x[i], x1 = x[i + 1];
    const double want[2] = {x0 * cos(a) - x1 * sin(a), x0 * sin(a) + x1 * cos(a)};
    tk_expect_close("column pair of token (14, 19), 300 tokens", out[0] + i, want, 2, FWD_TOL);
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

/* Rotate-half (Cosmos's layout): pair p of a head is (x[p], x[p + hd/2]) turned by the table's angle p; split
 * (LTX-2's): the same pairs, head k by its own angles (t, k, p). A double reference from the table's own (cos, sin)
 * on a strided view (rows 3 floats wider than the heads, one batch apart by more): forward against it, backward
 * against central differences of sum(w * reference(x)), and the interleaved rotation is not it. */
enum { HB = 2, HT = 5, HH = 2, HHD = 12, HRS = HH * HHD + 3, HBS = HT * HRS + 7 };

/* the rotate-half family: shared angles (rope_half), each head's own (rope_split), ERNIE's repeated angles */
typedef enum half_mode { HALF_SHARED, HALF_SPLIT, HALF_REPEATED } half_mode;

typedef struct half_ctx {
    const float *table;
    double *x, *w;
    half_mode mode;
} half_ctx;

static void rope_half_ref(const float *table, half_mode mode, double *y, const double *x)
{
    const int64_t pairs = HHD / 2;
    for (int64_t b = 0; b < HB; b++)
        for (int64_t t = 0; t < HT; t++)
            for (int64_t k = 0; k < HH; k++)
                for (int64_t p = 0; p < pairs; p++) {
                    const int64_t i = (b * HT + t) * HH * HHD + k * HHD + p;
                    int64_t e0 = mode == HALF_SPLIT ? (t * HH + k) * pairs + p : t * pairs + p, e1 = e0;
                    if (mode == HALF_REPEATED) e0 = t * pairs + p / 2, e1 = t * pairs + (p + pairs) / 2;
                    y[i] = x[i] * table[e0 * 2] - x[i + pairs] * table[e0 * 2 + 1];
                    y[i + pairs] = x[i + pairs] * table[e1 * 2] + x[i] * table[e1 * 2 + 1];
                }
}

static double half_loss(void *p)
{
    half_ctx *r = p;
    const int64_t n = HB * HT * HH * HHD;
    double *y = dbuf(n), s = 0;
    rope_half_ref(r->table, r->mode, y, r->x);
    for (int64_t i = 0; i < n; i++) s += r->w[i] * y[i];
    free(y);
    return s;
}

/* dense (b, t, heads * hd) <-> the strided view */
static void half_copy(float *view, float *dense, int to_view)
{
    for (int64_t b = 0; b < HB; b++)
        for (int64_t t = 0; t < HT; t++)
            for (int64_t i = 0; i < HH * HHD; i++) {
                float *v = view + b * HBS + t * HRS + i, *d = dense + (b * HT + t) * HH * HHD + i;
                if (to_view) *v = *d;
                else *d = *v;
            }
}

typedef void (*rope_fn)(float *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const float *);

static void test_half(half_mode mode)
{
    static const char *const names[] = {"rope_half", "rope_split", "rope_repeated"};
    static const rope_fn fwd[] = {rope_half_forward, rope_split_forward, rope_repeated_forward};
    static const rope_fn bwd[] = {rope_half_backward, rope_split_backward, rope_repeated_backward};
    const bool split = mode == HALF_SPLIT;
    const int64_t n = HB * HT * HH * HHD, nbuf = HB * HBS, angles = (split ? HH : 1) * HT * HHD / 2;
    const char *what = names[mode];
    float *table = fbuf(2 * angles), *x = fbuf(n), *w = fbuf(n), *buf = fbuf(nbuf), *orig = fbuf(nbuf), *got = fbuf(n);
    double *xd = dbuf(n), *wd = dbuf(n), *want = dbuf(n), *g = dbuf(n);
    for (int64_t i = 0; i < angles; i++) { /* angles of every size, some past pi */
        const double a = 0.37 * (double)i - 1.9;
        table[2 * i] = (float)cos(a), table[2 * i + 1] = (float)sin(a);
    }
    tk_fill(x, n, 71, -2.0f, 2.0f);
    tk_fill(w, n, 72, -1.0f, 1.0f);
    tk_fill(buf, nbuf, 73, -1.0f, 1.0f);
    tk_to_double(xd, x, n);
    tk_to_double(wd, w, n);
    rope_half_ref(table, mode, want, xd);
    half_copy(buf, x, 1);
    memcpy(orig, buf, (size_t)nbuf * sizeof(float));
    fwd[mode](buf, HB, HT, HH, HHD, HRS, HBS, table);
    half_copy(buf, got, 0);
    char label[96];
    snprintf(label, sizeof label, "%s_forward vs the double reference", what);
    tk_expect_close(label, got, want, n, FWD_TOL);
    half_copy(orig, got, 0); /* orig's view is x again: everything outside must match orig */
    half_copy(orig, got, 1);
    int outside = 1;
    for (int64_t b = 0; b < HB; b++)
        for (int64_t t = 0; t < HT; t++)
            for (int64_t i = HH * HHD; i < HRS; i++) outside &= buf[b * HBS + t * HRS + i] == orig[b * HBS + t * HRS + i];
    CHECKF(outside, "%s_forward wrote outside its view", what);

    half_ctx ctx = {table, xd, wd, mode};
    tk_numeric_grad(half_loss, &ctx, xd, n, FD_H, g);
    half_copy(buf, w, 1);
    bwd[mode](buf, HB, HT, HH, HHD, HRS, HBS, table);
    half_copy(buf, got, 0);
    snprintf(label, sizeof label, "%s_backward vs finite differences", what);
    tk_expect_close(label, got, g, n, GRAD_TOL);
    if (mode != HALF_SHARED) { /* the angles' layout matters: the shared rotate-half (one angle a pair) is not it */
        memcpy(got, x, (size_t)n * sizeof(float));
        rope_half_forward(got, HB, HT, HH, HHD, HH * HHD, HT * HH * HHD, table);
        double rel = 0;
        CHECKF(!tk_close(got, want, n, FWD_TOL, &rel) && rel > 1e-2, "rope_half matched %s (%.2g)", what, rel);
    }

    memcpy(got, x, (size_t)n * sizeof(float)); /* the interleaved rotation is another function */
    rope_forward(got, HB, HT, HH, HHD, HH * HHD, HT * HH * HHD, table);
    double rel = 0;
    CHECKF(!tk_close(got, want, n, FWD_TOL, &rel) && rel > 1e-2, "interleaved rope matched %s (%.2g)", what, rel);
    free(table), free(x), free(w), free(buf), free(orig), free(got), free(xd), free(wd), free(want), free(g);
}

/* MRoPE's table against a double reference written from Ideogram 4's definition (each frequency's axis chosen by its
 * interleaved section), at positions past 65536 as Ideogram's image tokens sit; and the sections matter. */
static void test_mrope_table(void)
{
    enum { TOK = 5, HD = 16, PAIRS = HD / 2 };
    const int64_t sections[3] = {2, 2, 2};
    const float ids[TOK * 3] = {0, 0, 0, 3, 3, 3, 65536, 65536, 65539, 65536, 65538, 65536, 65536, 65541, 65543};
    float got[TOK * PAIRS * 2], flat[TOK * PAIRS * 2];
    double want[TOK * PAIRS * 2];
    for (int t = 0; t < TOK; t++)
        for (int p = 0; p < PAIRS; p++) {
            int axis = 0; /* diffusers: freqs_t[..., arange(1, 3 s1, 3)] from axis 1, arange(2, 3 s2, 3) from axis 2 */
            for (int k = 1; k < 3 * sections[1]; k += 3) axis = k == p ? 1 : axis;
            for (int k = 2; k < 3 * sections[2]; k += 3) axis = k == p ? 2 : axis;
            const double a = (double)ids[t * 3 + axis] / pow(5e6, 2.0 * p / HD);
            want[(t * PAIRS + p) * 2] = cos(a), want[(t * PAIRS + p) * 2 + 1] = sin(a);
        }
    rope_table_mrope(got, ids, TOK, HD, sections, 5e6);
    tk_expect_close("rope_table_mrope vs the double reference", got, want, TOK * PAIRS * 2, FWD_TOL);
    rope_table_mrope(flat, ids, TOK, HD, (const int64_t[3]){PAIRS, 0, 0}, 5e6); /* every frequency on axis 0 */
    double rel = 0;
    CHECKF(!tk_close(flat, want, TOK * PAIRS * 2, FWD_TOL, &rel) && rel > 1e-3, "the sections changed nothing (%.2g)",
           rel);
}

int main(void)
{
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
    test_half(HALF_SHARED);
    test_half(HALF_SPLIT);
    test_half(HALF_REPEATED);
    test_mrope_table();
    return tk_finish();
}
