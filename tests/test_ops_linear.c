/* linear and batched matmul against naive double-precision references: forward values, backward by central
 * differences of the reference, accumulation into non-zero gradients, NULL gradients, determinism. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

static float *fbuf(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }
static double *dbuf(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(double)); }

static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- linear ---- */

typedef struct {
    double *x, *w, *b, *lw, *y; /* b may be NULL; lw: loss weights; y: scratch */
    int64_t n, in, out;
} lin_ctx;

static void lin_ref(lin_ctx *c)
{
    for (int64_t i = 0; i < c->n; i++)
        for (int64_t o = 0; o < c->out; o++) {
            double s = c->b ? c->b[o] : 0;
            for (int64_t j = 0; j < c->in; j++) s += c->x[i * c->in + j] * c->w[o * c->in + j];
            c->y[i * c->out + o] = s;
        }
}

static double lin_loss(void *ctx)
{
    lin_ctx *c = ctx;
    lin_ref(c);
    return dot(c->lw, c->y, c->n * c->out);
}

static void test_linear(int64_t n, int64_t in, int64_t out, bool bias, uint64_t seed)
{
    char what[96];
    const char *tag = bias ? "bias" : "nobias";
    float *x = fbuf(n * in), *w = fbuf(out * in), *b = bias ? fbuf(out) : NULL, *dy = fbuf(n * out);
    float *y = fbuf(n * out), *y2 = fbuf(n * out);
    tk_fill(x, n * in, seed, -1, 1);
    tk_fill(w, out * in, seed + 1, -1, 1);
    if (b) tk_fill(b, out, seed + 2, -1, 1);
    tk_fill(dy, n * out, seed + 3, -1, 1); /* loss = sum(dy * y), so dL/dy = dy exactly */

    lin_ctx c = {.x = dbuf(n * in), .w = dbuf(out * in), .b = b ? dbuf(out) : NULL, .lw = dbuf(n * out),
                 .y = dbuf(n * out), .n = n, .in = in, .out = out};
    tk_to_double(c.x, x, n * in);
    tk_to_double(c.w, w, out * in);
    if (b) tk_to_double(c.b, b, out);
    tk_to_double(c.lw, dy, n * out);

    /* forward */
    memset(y, 0x7f, (size_t)(n * out) * sizeof(float)); /* garbage: forward must overwrite */
    linear_forward(y, x, w, b, n, in, out);
    lin_ref(&c);
    snprintf(what, sizeof what, "linear %s fwd %lldx%lld->%lld", tag, (long long)n, (long long)in, (long long)out);
    tk_expect_close(what, y, c.y, n * out, 1e-5);
    linear_forward(y2, x, w, b, n, in, out);
    snprintf(what, sizeof what, "linear %s fwd deterministic", tag);
    tk_expect_bitwise(what, y2, y, n * out);

    /* backward vs finite differences */
    float *dx = fbuf(n * in), *dw = fbuf(out * in), *db = fbuf(out);
    linear_backward(dx, dw, b ? db : NULL, dy, x, w, n, in, out);
    double *gx = dbuf(n * in), *gw = dbuf(out * in), *gb = dbuf(out);
    tk_numeric_grad(lin_loss, &c, c.x, n * in, 1e-6, gx);
    tk_numeric_grad(lin_loss, &c, c.w, out * in, 1e-6, gw);
    snprintf(what, sizeof what, "linear %s dx vs FD", tag);
    tk_expect_close(what, dx, gx, n * in, 1e-4);
    snprintf(what, sizeof what, "linear %s dW vs FD", tag);
    tk_expect_close(what, dw, gw, out * in, 1e-4);
    if (b) {
        tk_numeric_grad(lin_loss, &c, c.b, out, 1e-6, gb);
        tk_expect_close("linear bias db vs FD", db, gb, out, 1e-4);
    }

    /* accumulation: backward into non-zero buffers adds */
    float *ax = fbuf(n * in), *aw = fbuf(out * in), *ab = fbuf(out);
    double *ex = dbuf(n * in), *ew = dbuf(out * in), *eb = dbuf(out);
    tk_fill(ax, n * in, seed + 4, -1, 1);
    tk_fill(aw, out * in, seed + 5, -1, 1);
    tk_fill(ab, out, seed + 6, -1, 1);
    for (int64_t i = 0; i < n * in; i++) ex[i] = ax[i] + gx[i];
    for (int64_t i = 0; i < out * in; i++) ew[i] = aw[i] + gw[i];
    for (int64_t i = 0; i < out; i++) eb[i] = ab[i] + gb[i];
    linear_backward(ax, aw, b ? ab : NULL, dy, x, w, n, in, out);
    snprintf(what, sizeof what, "linear %s dx accumulates", tag);
    tk_expect_close(what, ax, ex, n * in, 1e-4);
    snprintf(what, sizeof what, "linear %s dW accumulates", tag);
    tk_expect_close(what, aw, ew, out * in, 1e-4);
    if (b) tk_expect_close("linear bias db accumulates", ab, eb, out, 1e-4);

    /* NULL gradients: each one alone gives what the full call gave; determinism of backward */
    float *ox = fbuf(n * in), *ow = fbuf(out * in), *ob = fbuf(out);
    linear_backward(ox, NULL, NULL, dy, x, w, n, in, out);
    linear_backward(NULL, ow, NULL, dy, x, w, n, in, out);
    if (b) linear_backward(NULL, NULL, ob, dy, x, w, n, in, out);
    linear_backward(NULL, NULL, NULL, dy, x, w, n, in, out);
    snprintf(what, sizeof what, "linear %s dx alone == full, deterministic", tag);
    tk_expect_bitwise(what, ox, dx, n * in);
    snprintf(what, sizeof what, "linear %s dW alone == full, deterministic", tag);
    tk_expect_bitwise(what, ow, dw, out * in);
    if (b) tk_expect_bitwise("linear bias db alone == full, deterministic", ob, db, out);

    free(x), free(w), free(b), free(dy), free(y), free(y2), free(dx), free(dw), free(db);
    free(c.x), free(c.w), free(c.b), free(c.lw), free(c.y), free(gx), free(gw), free(gb);
    free(ax), free(aw), free(ab), free(ex), free(ew), free(eb), free(ox), free(ow), free(ob);
}

/* db is a column sum with rows in order: the same bits at any thread count */
static void test_linear_bias_threads(void)
{
    const int64_t n = 301, in = 24, out = 83;
    float *x = fbuf(n * in), *w = fbuf(out * in), *dy = fbuf(n * out), *db1 = fbuf(out), *db2 = fbuf(out);
    tk_fill(x, n * in, 71, -1, 1);
    tk_fill(w, out * in, 72, -1, 1);
    tk_fill(dy, n * out, 73, -1, 1);
    const int saved = ops_threads();
    ops_set_threads(1);
    linear_backward(NULL, NULL, db1, dy, x, w, n, in, out);
    ops_set_threads(3);
    linear_backward(NULL, NULL, db2, dy, x, w, n, in, out);
    ops_set_threads(saved);
    tk_expect_bitwise("linear db 1 thread == 3 threads", db2, db1, out);
    free(x), free(w), free(dy), free(db1), free(db2);
}

/* ---- gated linear: y = gate * (x W^T + b), gate per (batch item, column) ---- */

typedef struct {
    double *x, *w, *b, *gate, *lw, *y;
    int64_t batch, tokens, in, out, gs;
} gl_ctx;

static double gl_loss(void *ctx)
{
    gl_ctx *c = ctx;
    double l = 0;
    for (int64_t r = 0; r < c->batch * c->tokens; r++)
        for (int64_t o = 0; o < c->out; o++) {
            double s = c->b[o];
            for (int64_t j = 0; j < c->in; j++) s += c->x[r * c->in + j] * c->w[o * c->in + j];
            l += c->lw[r * c->out + o] * c->gate[(r / c->tokens) * c->gs + o] * s;
        }
    return l;
}

/* Against central differences; accumulation; each gradient alone; 1 and 3 threads bit for bit; close to
 * linear_backward + gated_residual_backward, which compute the same gradients from the linear's output. */
static void test_gated_linear(int64_t batch, int64_t tokens, int64_t in, int64_t out, uint64_t seed)
{
    const int64_t n = batch * tokens, gs = out + 3; /* gate rows inside a wider modulation vector */
    float *x = fbuf(n * in), *w = fbuf(out * in), *b = fbuf(out), *gate = fbuf(batch * gs), *dy = fbuf(n * out);
    tk_fill(x, n * in, seed, -1, 1);
    tk_fill(w, out * in, seed + 1, -1, 1);
    tk_fill(b, out, seed + 2, -1, 1);
    tk_fill(gate, batch * gs, seed + 3, -1, 1);
    tk_fill(dy, n * out, seed + 4, -1, 1);
    gl_ctx c = {.x = dbuf(n * in), .w = dbuf(out * in), .b = dbuf(out), .gate = dbuf(batch * gs), .lw = dbuf(n * out),
                .batch = batch, .tokens = tokens, .in = in, .out = out, .gs = gs};
    tk_to_double(c.x, x, n * in);
    tk_to_double(c.w, w, out * in);
    tk_to_double(c.b, b, out);
    tk_to_double(c.gate, gate, batch * gs);
    tk_to_double(c.lw, dy, n * out);
    double *gx = dbuf(n * in), *gw = dbuf(out * in), *gb = dbuf(out), *gg = dbuf(batch * gs);
    tk_numeric_grad(gl_loss, &c, c.x, n * in, 1e-6, gx);
    tk_numeric_grad(gl_loss, &c, c.w, out * in, 1e-6, gw);
    tk_numeric_grad(gl_loss, &c, c.b, out, 1e-6, gb);
    tk_numeric_grad(gl_loss, &c, c.gate, batch * gs, 1e-6, gg);

    pool *p = pool_create(POOL_DEVICE, 0);
    const int saved = ops_threads();
    float *dx = fbuf(n * in), *dw = fbuf(out * in), *db = fbuf(out), *dg = fbuf(batch * gs);
    ops_set_threads(1);
    CHECK(gated_linear_backward(p, dx, dw, db, dg, dy, x, w, b, gate, batch, tokens, in, out, gs) == ST_OK);
    CHECK(pool_live(p) == 0 && pool_peak(p) == gated_linear_workspace_bytes(batch, tokens, in, out));
    tk_expect_close("gated linear dx vs FD", dx, gx, n * in, 1e-4);
    tk_expect_close("gated linear dW vs FD", dw, gw, out * in, 1e-4);
    tk_expect_close("gated linear db vs FD", db, gb, out, 1e-4);
    tk_expect_close("gated linear dgate vs FD (padding columns untouched)", dg, gg, batch * gs, 1e-4);

    /* 3 threads, each gradient alone: the same bits */
    ops_set_threads(3);
    float *ox = fbuf(n * in), *ow = fbuf(out * in), *ob = fbuf(out), *og = fbuf(batch * gs);
    CHECK(gated_linear_backward(p, ox, NULL, NULL, NULL, dy, x, w, b, gate, batch, tokens, in, out, gs) == ST_OK);
    CHECK(gated_linear_backward(p, NULL, ow, NULL, NULL, dy, x, w, b, gate, batch, tokens, in, out, gs) == ST_OK);
    CHECK(gated_linear_backward(p, NULL, NULL, ob, NULL, dy, x, w, b, gate, batch, tokens, in, out, gs) == ST_OK);
    CHECK(gated_linear_backward(p, NULL, NULL, NULL, og, dy, x, w, b, gate, batch, tokens, in, out, gs) == ST_OK);
    tk_expect_bitwise("gated linear dx alone, 3 threads == 1", ox, dx, n * in);
    tk_expect_bitwise("gated linear dW alone, 3 threads == 1", ow, dw, out * in);
    tk_expect_bitwise("gated linear db alone, 3 threads == 1", ob, db, out);
    tk_expect_bitwise("gated linear dgate alone, 3 threads == 1", og, dg, batch * gs);
    ops_set_threads(saved);

    /* accumulation: a second call adds the same again */
    double *e = dbuf(out * in);
    for (int64_t i = 0; i < out * in; i++) e[i] = 2 * gw[i];
    CHECK(gated_linear_backward(p, NULL, dw, NULL, NULL, dy, x, w, b, gate, batch, tokens, in, out, gs) == ST_OK);
    tk_expect_close("gated linear dW accumulates", dw, e, out * in, 1e-4);

    /* the same gradients the linear's output gives, through linear_backward and the gated residual */
    float *y = fbuf(n * out), *dh = fbuf(n * out), *rg = fbuf(batch * gs), *rx = fbuf(n * in);
    linear_forward(y, x, w, b, n, in, out);
    gated_residual_backward(NULL, rg, dh, dy, gate, y, batch, tokens, out, gs);
    linear_backward(rx, NULL, NULL, dh, x, w, n, in, out);
    double *want = dbuf(n * in > batch * gs ? n * in : batch * gs);
    tk_to_double(want, rg, batch * gs);
    tk_expect_close("gated linear dgate == gated residual's from the output", dg, want, batch * gs, 1e-5);
    tk_to_double(want, rx, n * in);
    tk_expect_close("gated linear dx == linear_backward's of gate * dy", dx, want, n * in, 1e-5);

    pool_destroy(p);
    free(x), free(w), free(b), free(gate), free(dy), free(c.x), free(c.w), free(c.b), free(c.gate), free(c.lw);
    free(gx), free(gw), free(gb), free(gg), free(dx), free(dw), free(db), free(dg), free(ox), free(ow), free(ob);
    free(og), free(e), free(y), free(dh), free(rg), free(rx), free(want);
}

/* ---- matmul ---- */

typedef struct {
    double *a, *b, *lw, *c;
    int64_t batch, m, n, k;
    bool ta, tb;
} mm_ctx;

static void mm_ref(mm_ctx *s)
{
    const int64_t m = s->m, n = s->n, k = s->k;
    for (int64_t z = 0; z < s->batch; z++) {
        const double *a = s->a + z * m * k, *b = s->b + z * k * n;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0;
                for (int64_t p = 0; p < k; p++) {
                    const double av = s->ta ? a[p * m + i] : a[i * k + p];
                    const double bv = s->tb ? b[j * k + p] : b[p * n + j];
                    acc += av * bv;
                }
                s->c[z * m * n + i * n + j] = acc;
            }
    }
}

static double mm_loss(void *ctx)
{
    mm_ctx *s = ctx;
    mm_ref(s);
    return dot(s->lw, s->c, s->batch * s->m * s->n);
}

static void test_matmul(int64_t batch, int64_t m, int64_t n, int64_t k, bool ta, bool tb, uint64_t seed)
{
    char what[96], tag[32];
    snprintf(tag, sizeof tag, "%c%c", ta ? 'T' : 'N', tb ? 'T' : 'N');
    const int64_t na = batch * m * k, nb = batch * k * n, nc = batch * m * n;
    float *a = fbuf(na), *b = fbuf(nb), *dc = fbuf(nc), *c = fbuf(nc), *c2 = fbuf(nc);
    tk_fill(a, na, seed, -1, 1);
    tk_fill(b, nb, seed + 1, -1, 1);
    tk_fill(dc, nc, seed + 2, -1, 1);
    mm_ctx s = {.a = dbuf(na), .b = dbuf(nb), .lw = dbuf(nc), .c = dbuf(nc), .batch = batch, .m = m, .n = n, .k = k,
                .ta = ta, .tb = tb};
    tk_to_double(s.a, a, na);
    tk_to_double(s.b, b, nb);
    tk_to_double(s.lw, dc, nc);

    memset(c, 0x7f, (size_t)nc * sizeof(float));
    matmul_forward(c, a, b, batch, m, n, k, ta, tb);
    mm_ref(&s);
    snprintf(what, sizeof what, "matmul %s fwd b%lld %lldx%lldx%lld", tag, (long long)batch, (long long)m,
             (long long)n, (long long)k);
    tk_expect_close(what, c, s.c, nc, 1e-5);
    matmul_forward(c2, a, b, batch, m, n, k, ta, tb);
    snprintf(what, sizeof what, "matmul %s fwd deterministic", tag);
    tk_expect_bitwise(what, c2, c, nc);

    float *da = fbuf(na), *db = fbuf(nb);
    matmul_backward(da, db, dc, a, b, batch, m, n, k, ta, tb);
    double *ga = dbuf(na), *gb = dbuf(nb);
    tk_numeric_grad(mm_loss, &s, s.a, na, 1e-6, ga);
    tk_numeric_grad(mm_loss, &s, s.b, nb, 1e-6, gb);
    snprintf(what, sizeof what, "matmul %s dA vs FD", tag);
    tk_expect_close(what, da, ga, na, 1e-4);
    snprintf(what, sizeof what, "matmul %s dB vs FD", tag);
    tk_expect_close(what, db, gb, nb, 1e-4);

    /* accumulation */
    float *aa = fbuf(na), *ab = fbuf(nb);
    double *ea = dbuf(na), *eb = dbuf(nb);
    tk_fill(aa, na, seed + 3, -1, 1);
    tk_fill(ab, nb, seed + 4, -1, 1);
    for (int64_t i = 0; i < na; i++) ea[i] = aa[i] + ga[i];
    for (int64_t i = 0; i < nb; i++) eb[i] = ab[i] + gb[i];
    matmul_backward(aa, ab, dc, a, b, batch, m, n, k, ta, tb);
    snprintf(what, sizeof what, "matmul %s dA accumulates", tag);
    tk_expect_close(what, aa, ea, na, 1e-4);
    snprintf(what, sizeof what, "matmul %s dB accumulates", tag);
    tk_expect_close(what, ab, eb, nb, 1e-4);

    /* NULL gradients and determinism */
    float *oa = fbuf(na), *ob = fbuf(nb);
    matmul_backward(oa, NULL, dc, a, b, batch, m, n, k, ta, tb);
    matmul_backward(NULL, ob, dc, a, b, batch, m, n, k, ta, tb);
    matmul_backward(NULL, NULL, dc, a, b, batch, m, n, k, ta, tb);
    snprintf(what, sizeof what, "matmul %s dA alone == full, deterministic", tag);
    tk_expect_bitwise(what, oa, da, na);
    snprintf(what, sizeof what, "matmul %s dB alone == full, deterministic", tag);
    tk_expect_bitwise(what, ob, db, nb);

    free(a), free(b), free(dc), free(c), free(c2), free(da), free(db), free(ga), free(gb);
    free(s.a), free(s.b), free(s.lw), free(s.c), free(aa), free(ab), free(ea), free(eb), free(oa), free(ob);
}

/* gemm: C = alpha op(A) op(B) + beta C against a double-precision reference, every transpose combination. */
static void test_gemm(bool ta, bool tb)
{
    const int64_t m = 5, n = 7, k = 3;
    float a[15], b[21], c[35];
    double want[35];
    tk_fill(a, m * k, 1 + ta, -1, 1);
    tk_fill(b, k * n, 3 + tb, -1, 1);
    tk_fill(c, m * n, 5, -1, 1);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++) acc += (double)(ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            want[i * n + j] = 0.5 * acc + 2.0 * c[i * n + j];
        }
    gemm(ta, tb, m, n, k, 0.5f, a, b, 2.0f, c);
    char what[64];
    snprintf(what, sizeof what, "gemm trans_a=%d trans_b=%d", ta, tb);
    tk_expect_close(what, c, want, m * n, 1e-6);
}

int main(void)
{
    printf("%s\n", ops_blas_info());
    for (int t = 0; t < 4; t++) test_gemm(t & 1, t & 2);
    test_linear(5, 7, 3, true, 11);
    test_linear(5, 7, 3, false, 21);
    test_linear(33, 19, 41, true, 31); /* more than one column block, rows split across threads */
    test_linear_bias_threads();
    test_gated_linear(3, 5, 37, 19, 41); /* a row_dot tail (37 = 2*16 + 5) */
    test_gated_linear(2, 70, 16, 83, 51); /* columns in more than one block */
    for (int t = 0; t < 4; t++) {
        test_matmul(3, 4, 5, 6, t & 1, t & 2, 100 + 10 * (uint64_t)t);
        /* 8 small matrices: run side by side when threads divide the batch */
        test_matmul(8, 9, 7, 5, t & 1, t & 2, 200 + 10 * (uint64_t)t);
    }
    return tk_finish();
}
