/* The CUDA backend's ported ops against the CPU backend's definitions of the same ops (cpu_<name>, compiled into the
 * CUDA build: src/ops/cuda/backend.h). Every buffer comes from a device pool, so a CUDA op takes its GPU path; each
 * op runs three times from identical inputs and initial gradients: once as cpu_X (side 0), twice as X (sides 1 and
 * 2). Checked: side 1 against side 0 by relative L2 error (||a - b|| / max(||b||, tiny)) within a tolerance stated
 * per op, and side 2 equal to side 1 bit for bit (determinism). Backward ops read the same inputs on every side (the
 * CPU forward's output and kept state), and accumulate into the same nonzero initial gradients. The copy engine
 * (the copy stream and its events on a GPU) moves host tensors out and back, several in flight.
 *
 * Without a GPU the program exits 77 (skipped), unless SEGTRAIN_TEST_CPU_FALLBACK=1: then both sides run the CPU
 * code through the fallback, every comparison must be exact, and the largest attention shapes are left out. That
 * mode tests this harness itself. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/copy.h"
#include "segtrain/ops.h"
#include "segtrain/pool.h"
#include "testkit.h"

#include "cuda_ported.h"
#define DECL(name) extern __typeof__(name) cpu_##name;
SEGTRAIN_CUDA_PORTED(DECL)
#undef DECL

/* Side i of a call: 0 the CPU definition, 1 and 2 the CUDA op. */
#define EACH_SIDE(i) for (int i = 0; i < 3; i++)
#define OP(i, name) ((i) ? name : cpu_##name)

#define TOL 1e-5      /* fp32 ops against the CPU, unless a check states its own */
#define TOL_EXACT 1e-6 /* ops whose sums run in the CPU's order (mse): the same bits by construction */

static pool *P;
static bool gpu;       /* a GPU runs the CUDA ops; otherwise every comparison must be exact */
static uint64_t seed = 1;

/* ---- buffers: every one from the device pool, freed together at the end of each op family ---- */

#define LIVE_MAX 1024
static void *live[LIVE_MAX];
static int nlive;

static float *alloc_f(int64_t n)
{
    void *p = NULL;
    if (nlive == LIVE_MAX || pool_alloc(P, (size_t)(n > 0 ? n : 1) * sizeof(float), MEM_ACTIVATIONS, "test buffer",
                                        &p) != ST_OK) {
        fprintf(stderr, "test_cuda_ops: cannot allocate %lld floats: %s\n", (long long)n, st_error());
        exit(1);
    }
    return live[nlive++] = p;
}

static void release_all(void)
{
    while (nlive) pool_free(P, live[--nlive]);
}

/* n values uniform in [lo, hi), a new seed every call */
static float *rnd(int64_t n, float lo, float hi)
{
    float *x = alloc_f(n);
    tk_fill(x, n, seed++, lo, hi);
    return x;
}

/* three copies of init (random in [-1, 1) when NULL): one buffer a side */
static void three(float *t[3], const float *init, int64_t n)
{
    if (!init) init = rnd(n, -1, 1);
    EACH_SIDE(i) memcpy(t[i] = alloc_f(n), init, (size_t)n * sizeof(float));
}

/* ---- comparison ---- */

static double rel_l2(const float *got, const float *want, int64_t n)
{
    double e = 0, w = 0;
    for (int64_t j = 0; j < n; j++) {
        const double d = (double)got[j] - (double)want[j];
        e += d * d;
        w += (double)want[j] * want[j];
    }
    return sqrt(e) / fmax(sqrt(w), 1e-30);
}

/* Side 1 within tol of side 0 (exactly, without a GPU) and side 2 the same bits as side 1; one line printed. */
static void judge(const float *const x[3], int64_t n, double tol, const char *label)
{
    const double e = rel_l2(x[1], x[0], n);
    const bool same = !memcmp(x[1], x[2], (size_t)n * sizeof(float));
    if (!gpu) tol = 0;
    printf("%-64s rel %.1e%s\n", label, e, same ? "" : "  RUNS DIFFER");
    CHECKF(e <= tol, "%s: relative error %.3e above %.0e", label, e, tol);
    CHECKF(same, "%s: two runs from the same inputs differ", label);
}

/* n floats of t[i] */
static void __attribute__((format(printf, 4, 5))) agree(float *const t[3], int64_t n, double tol, const char *fmt,
                                                         ...)
{
    char label[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(label, sizeof label, fmt, ap);
    va_end(ap);
    judge((const float *const *)t, n, tol, label);
}

/* A strided view of t[i]: rows x cols floats from offset off, rows ld apart. */
static void __attribute__((format(printf, 7, 8))) agree_view(float *const t[3], int64_t off, int64_t rows,
                                                              int64_t cols, int64_t ld, double tol, const char *fmt,
                                                              ...)
{
    char label[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(label, sizeof label, fmt, ap);
    va_end(ap);
    float *g[3];
    EACH_SIDE(i) {
        g[i] = malloc((size_t)(rows * cols) * sizeof(float));
        for (int64_t r = 0; r < rows; r++) memcpy(g[i] + r * cols, t[i] + off + r * ld, (size_t)cols * sizeof(float));
    }
    judge((const float *const *)g, rows * cols, tol, label);
    EACH_SIDE(i) free(g[i]);
}

/* ---- linear algebra ---- */

static void test_gemm(int64_t m, int64_t n, int64_t k)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            const float *a = rnd(m * k, -1, 1), *b = rnd(k * n, -1, 1);
            float *c[3];
            three(c, NULL, m * n);
            EACH_SIDE(i) OP(i, gemm)(ta, tb, m, n, k, 0.7f, a, b, -0.3f, c[i]);
            agree(c, m * n, TOL, "gemm %c%c m=%lld n=%lld k=%lld alpha 0.7 beta -0.3", ta ? 'T' : 'N',
                  tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k);
        }
    release_all();
}

static void test_linear(int64_t n, int64_t in, int64_t out)
{
    const float *x = rnd(n * in, -1, 1), *w = rnd(out * in, -1, 1), *b = rnd(out, -1, 1), *dy = rnd(n * out, -1, 1);
    for (int bias = 0; bias < 2; bias++) {
        float *y[3];
        three(y, NULL, n * out);
        EACH_SIDE(i) OP(i, linear_forward)(y[i], x, w, bias ? b : NULL, n, in, out);
        agree(y, n * out, TOL, "linear_forward %s n=%lld in=%lld out=%lld", bias ? "bias   " : "no bias",
              (long long)n, (long long)in, (long long)out);
    }
    /* which gradients are asked for: all three, dx alone, dw and db */
    static const bool want[3][3] = {{1, 1, 1}, {1, 0, 0}, {0, 1, 1}};
    for (int v = 0; v < 3; v++) {
        float *dx[3], *dw[3], *db[3];
        three(dx, NULL, n * in), three(dw, NULL, out * in), three(db, NULL, out);
        EACH_SIDE(i) OP(i, linear_backward)(want[v][0] ? dx[i] : NULL, want[v][1] ? dw[i] : NULL,
                                            want[v][2] ? db[i] : NULL, dy, x, w, n, in, out);
        const char *tag = v == 0 ? "dx dw db" : v == 1 ? "dx only " : "dw db   ";
        const long long nl = n, il = in, ol = out;
        if (want[v][0]) agree(dx, n * in, TOL, "linear_backward [%s] dx n=%lld in=%lld out=%lld", tag, nl, il, ol);
        if (want[v][1]) agree(dw, out * in, TOL, "linear_backward [%s] dw n=%lld in=%lld out=%lld", tag, nl, il, ol);
        if (want[v][2]) agree(db, out, TOL, "linear_backward [%s] db n=%lld in=%lld out=%lld", tag, nl, il, ol);
    }
    release_all();
}

static void test_matmul(int64_t batch, int64_t m, int64_t n, int64_t k)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            const float *a = rnd(batch * m * k, -1, 1), *b = rnd(batch * k * n, -1, 1), *dc = rnd(batch * m * n, -1, 1);
            float *c[3], *da[3], *db[3];
            three(c, NULL, batch * m * n), three(da, NULL, batch * m * k), three(db, NULL, batch * k * n);
            EACH_SIDE(i) OP(i, matmul_forward)(c[i], a, b, batch, m, n, k, ta, tb);
            EACH_SIDE(i) OP(i, matmul_backward)(da[i], db[i], dc, a, b, batch, m, n, k, ta, tb);
            const char A = ta ? 'T' : 'N', B = tb ? 'T' : 'N';
            const long long bl = batch, ml = m, nl = n, kl = k;
            agree(c, batch * m * n, TOL, "matmul_forward  %c%c    B=%lld m=%lld n=%lld k=%lld", A, B, bl, ml, nl, kl);
            agree(da, batch * m * k, TOL, "matmul_backward %c%c da B=%lld m=%lld n=%lld k=%lld", A, B, bl, ml, nl, kl);
            agree(db, batch * k * n, TOL, "matmul_backward %c%c db B=%lld m=%lld n=%lld k=%lld", A, B, bl, ml, nl, kl);
        }
    release_all();
}

static void test_gated_linear(int64_t batch, int64_t tokens, int64_t in, int64_t out)
{
    const int64_t n = batch * tokens, gs = 6 * out; /* the gate: one chunk of a wider modulation vector */
    const float *x = rnd(n * in, -1, 1), *w = rnd(out * in, -1, 1), *b = rnd(out, -1, 1), *dy = rnd(n * out, -1, 1);
    const float *gate = rnd(batch * gs, -1, 1) + 2 * out;
    for (int bias = 0; bias < 2; bias++) {
        float *dx[3], *dw[3], *db[3], *dg[3];
        three(dx, NULL, n * in), three(dw, NULL, out * in), three(db, NULL, out), three(dg, NULL, batch * gs);
        EACH_SIDE(i) CHECK(OP(i, gated_linear_backward)(P, dx[i], dw[i], bias ? db[i] : NULL, dg[i] + 2 * out, dy, x,
                                                        w, bias ? b : NULL, gate, batch, tokens, in, out, gs) == ST_OK);
        const char *tag = bias ? "bias   " : "no bias";
        const long long bl = batch, tl = tokens, il = in, ol = out;
        agree(dx, n * in, TOL, "gated_linear_backward %s dx    B=%lld T=%lld in=%lld out=%lld", tag, bl, tl, il, ol);
        agree(dw, out * in, TOL, "gated_linear_backward %s dw    B=%lld T=%lld in=%lld out=%lld", tag, bl, tl, il, ol);
        agree(dg, batch * gs, TOL, "gated_linear_backward %s dgate B=%lld T=%lld in=%lld out=%lld", tag, bl, tl, il,
              ol);
        if (bias)
            agree(db, out, TOL, "gated_linear_backward %s db    B=%lld T=%lld in=%lld out=%lld", tag, bl, tl, il, ol);
    }
    release_all();
}

/* ---- normalisation ---- */

static void test_norm(bool rms, int64_t n, int64_t d, bool affine)
{
    const char *name = rms ? "rmsnorm" : "layernorm", *tag = affine ? "affine" : "plain ";
    const float *x = rnd(n * d, -1, 3), *w = affine ? rnd(d, 0.5f, 1.5f) : NULL;
    const float *b = affine && !rms ? rnd(d, -1, 1) : NULL, *dy = rnd(n * d, -1, 1);
    float *y[3], *dx[3], *dw[3], *db[3], *kept[3];
    op_state keep[3] = {{0}};
    three(y, NULL, n * d), three(dx, NULL, n * d), three(dw, NULL, d), three(db, NULL, d);
    EACH_SIDE(i) CHECK((rms ? OP(i, rmsnorm_forward)(P, y[i], x, w, n, d, 1e-5f, &keep[i])
                            : OP(i, layernorm_forward)(P, y[i], x, w, b, n, d, 1e-5f, &keep[i])) == ST_OK);
    agree(y, n * d, TOL, "%s_forward  %s y     T=%lld d=%lld", name, tag, (long long)n, (long long)d);
    EACH_SIDE(i) kept[i] = keep[i].data;
    agree(kept, (int64_t)(keep[0].bytes / sizeof(float)), TOL, "%s_forward  %s kept  T=%lld d=%lld", name, tag,
          (long long)n, (long long)d);
    /* every side's backward from the CPU forward's state */
    EACH_SIDE(i) {
        if (rms) OP(i, rmsnorm_backward)(dx[i], affine ? dw[i] : NULL, dy, x, w, n, d, &keep[0]);
        else OP(i, layernorm_backward)(dx[i], affine ? dw[i] : NULL, affine ? db[i] : NULL, dy, x, w, n, d, &keep[0]);
    }
    agree(dx, n * d, TOL, "%s_backward %s dx    T=%lld d=%lld", name, tag, (long long)n, (long long)d);
    if (affine) agree(dw, d, TOL, "%s_backward %s dw    T=%lld d=%lld", name, tag, (long long)n, (long long)d);
    if (affine && !rms) agree(db, d, TOL, "%s_backward %s db    T=%lld d=%lld", name, tag, (long long)n, (long long)d);
    EACH_SIDE(i) op_state_release(&keep[i]);
    release_all();
}

/* ---- pointwise ---- */

static void test_activations(int64_t n)
{
    float *x = rnd(n, -6, 6);
    x[0] = -30, x[1] = 30, x[2] = 0, x[3] = -12; /* the clamped exponent and the origin */
    const float *dy = rnd(n, -1, 1);
    for (int silu = 0; silu < 2; silu++) {
        const char *name = silu ? "silu" : "gelu";
        float *y[3], *dx[3], *inplace[3];
        three(y, NULL, n), three(dx, NULL, n), three(inplace, dy, n);
        EACH_SIDE(i) {
            if (silu) OP(i, silu_forward)(y[i], x, n), OP(i, silu_backward)(dx[i], dy, x, n);
            else OP(i, gelu_forward)(y[i], x, n), OP(i, gelu_backward)(dx[i], dy, x, n);
        }
        agree(y, n, TOL, "%s_forward  n=%lld", name, (long long)n);
        agree(dx, n, TOL, "%s_backward dx n=%lld", name, (long long)n);
        if (!silu) {
            EACH_SIDE(i) OP(i, gelu_backward)(inplace[i], inplace[i], x, n);
            agree(inplace, n, TOL, "gelu_backward in place (dx == dy) n=%lld", (long long)n);
        }
    }
    float *y[3], *s[3], *z[3];
    three(y, NULL, n), three(s, NULL, n), three(z, NULL, n);
    EACH_SIDE(i) OP(i, add_to)(y[i], dy, n), OP(i, scale_by)(s[i], n, -1.7f), OP(i, zero_floats)(z[i], n);
    agree(y, n, TOL, "add_to n=%lld", (long long)n);
    agree(s, n, TOL, "scale_by n=%lld", (long long)n);
    agree(z, n, 0, "zero_floats n=%lld", (long long)n);
    const int64_t cols = 37, rows = n / 64; /* a strided block of rows and a row broadcast */
    float *r[3], *cr[3], *cb[3];
    three(r, x, rows * cols), three(cr, dy, n), three(cb, NULL, n);
    EACH_SIDE(i) {
        OP(i, add_row)(r[i], dy, rows, cols);
        OP(i, copy_rows)(cr[i] + 3, 64, x, 50, rows, cols);
        OP(i, copy_bytes)(cb[i], dy, (size_t)n * sizeof(float));
    }
    agree(r, rows * cols, TOL, "add_row rows=%lld n=%lld", (long long)rows, (long long)cols);
    agree(cr, n, 0, "copy_rows rows=%lld cols=%lld lds 50 -> 64", (long long)rows, (long long)cols);
    agree(cb, n, 0, "copy_bytes n=%lld floats", (long long)n);
    uint16_t *h = (uint16_t *)alloc_f((n + 1) / 2); /* bf16 values: the high halves of random floats */
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        h[i] = (uint16_t)(bits >> 16);
    }
    float *wide[3];
    three(wide, NULL, n);
    EACH_SIDE(i) OP(i, bf16_to_float)(wide[i], h, n);
    agree(wide, n, 0, "bf16_to_float n=%lld", (long long)n); /* exact */
    float *round_trip[3];
    uint16_t *narrow[3];
    three(round_trip, NULL, n);
    EACH_SIDE(i) narrow[i] = (uint16_t *)alloc_f((n + 1) / 2);
    EACH_SIDE(i) OP(i, float_to_bf16)(narrow[i], x, n), OP(i, bf16_to_float)(round_trip[i], narrow[i], n);
    agree(round_trip, n, 0, "float_to_bf16 n=%lld", (long long)n); /* the same rounding */
    float *rounded[3];
    three(rounded, x, n);
    EACH_SIDE(i) OP(i, round_to_bf16)(rounded[i], n);
    agree(rounded, n, 0, "round_to_bf16 n=%lld", (long long)n);
    release_all();
}

/* modulate and gated_residual over (batch, tokens, d); their (batch, d) vectors are chunks of rows
 * stride = 3 d + 5 > d floats apart, as in a block's modulation vector */
static void test_modulation(int64_t batch, int64_t tokens, int64_t d)
{
    const int64_t n = batch * tokens * d, st = 3 * d + 5, nm = batch * st;
    const long long bl = batch, tl = tokens, dl = d;
    const float *x = rnd(n, -1, 1), *h = rnd(n, -1, 1), *dy = rnd(n, -1, 1), *mod = rnd(nm, -1, 1);
    const float *shift = mod, *scale = mod + d, *gate = mod + 2 * d;
    float *y[3], *dx[3], *dm[3], *ip[3], *dmi[3];
    three(y, NULL, n), three(dx, NULL, n), three(dm, NULL, nm), three(ip, dy, n), three(dmi, NULL, nm);
    EACH_SIDE(i) OP(i, modulate_forward)(y[i], x, shift, scale, batch, tokens, d, st);
    EACH_SIDE(i) OP(i, modulate_backward)(dx[i], dm[i], dm[i] + d, dy, x, scale, batch, tokens, d, st);
    EACH_SIDE(i) OP(i, modulate_backward)(ip[i], dmi[i], dmi[i] + d, ip[i], x, scale, batch, tokens, d, st);
    agree(y, n, TOL, "modulate_forward  y  B=%lld T=%lld d=%lld stride=%lld", bl, tl, dl, (long long)st);
    agree(dx, n, TOL, "modulate_backward dx B=%lld T=%lld d=%lld", bl, tl, dl);
    agree(dm, nm, TOL, "modulate_backward dshift/dscale B=%lld T=%lld d=%lld", bl, tl, dl);
    agree(ip, n, TOL, "modulate_backward in place dx B=%lld T=%lld d=%lld", bl, tl, dl);
    agree(dmi, nm, TOL, "modulate_backward in place dshift/dscale B=%lld T=%lld d=%lld", bl, tl, dl);

    float *dg[3], *dh[3], *dgi[3], *dhi[3];
    three(y, NULL, n), three(dx, NULL, n), three(ip, dy, n);
    three(dg, NULL, nm), three(dh, NULL, n), three(dgi, NULL, nm), three(dhi, NULL, n);
    EACH_SIDE(i) OP(i, gated_residual_forward)(y[i], x, gate, h, batch, tokens, d, st);
    EACH_SIDE(i) OP(i, gated_residual_backward)(dx[i], dg[i] + 2 * d, dh[i], dy, gate, h, batch, tokens, d, st);
    EACH_SIDE(i) OP(i, gated_residual_backward)(ip[i], dgi[i] + 2 * d, dhi[i], ip[i], gate, h, batch, tokens, d, st);
    agree(y, n, TOL, "gated_residual_forward  y     B=%lld T=%lld d=%lld", bl, tl, dl);
    agree(dx, n, TOL, "gated_residual_backward dx    B=%lld T=%lld d=%lld", bl, tl, dl);
    agree(dg, nm, TOL, "gated_residual_backward dgate B=%lld T=%lld d=%lld", bl, tl, dl);
    agree(dh, n, TOL, "gated_residual_backward dh    B=%lld T=%lld d=%lld", bl, tl, dl);
    agree(ip, n, 0, "gated_residual_backward dx == dy: dy untouched B=%lld T=%lld d=%lld", bl, tl, dl);
    agree(dgi, nm, TOL, "gated_residual_backward dx == dy: dgate B=%lld T=%lld d=%lld", bl, tl, dl);
    agree(dhi, n, TOL, "gated_residual_backward dx == dy: dh    B=%lld T=%lld d=%lld", bl, tl, dl);
    release_all();
}

/* ---- rope, patches ---- */

/* q and k rotated where they lie in a packed qkv buffer (rows 3 H hd apart, batch items pad floats more) */
static void test_rope(int64_t batch, int64_t tokens, int64_t heads, int64_t hd, int64_t pad)
{
    const int64_t ld = 3 * heads * hd, bs = tokens * ld + pad, n = batch * bs;
    float *table = alloc_f(tokens * hd);
    for (int64_t j = 0; j < tokens * hd / 2; j++) {
        const double a = 0.37 * (double)j + 0.11 * (double)(j % 7);
        table[2 * j] = (float)cos(a), table[2 * j + 1] = (float)sin(a);
    }
    float *f[3], *g[3];
    three(f, NULL, n), three(g, NULL, n);
    for (int part = 0; part < 2; part++) /* q, then k */
        EACH_SIDE(i) {
            OP(i, rope_forward)(f[i] + part * heads * hd, batch, tokens, heads, hd, ld, bs, table);
            OP(i, rope_backward)(g[i] + part * heads * hd, batch, tokens, heads, hd, ld, bs, table);
        }
    const long long bl = batch, tl = tokens, hl = heads, dl = hd, sl = bs;
    agree(f, n, TOL, "rope_forward  packed qkv B=%lld T=%lld H=%lld hd=%lld batch_stride=%lld", bl, tl, hl, dl, sl);
    agree(g, n, TOL, "rope_backward packed qkv B=%lld T=%lld H=%lld hd=%lld batch_stride=%lld", bl, tl, hl, dl, sl);
    release_all();
}

static void test_patches(patch_shape s)
{
    const int64_t gf = s.frames / s.patch_t, gh = s.height / s.patch, gw = s.width / s.patch;
    const int64_t nl = s.batch * s.channels * s.frames * s.height * s.width;
    const int64_t rows = s.tokens ? s.tokens : gf * gh * gw; /* padding rows: left as three() made them */
    const int64_t nt = s.batch * rows * s.channels * s.patch_t * s.patch * s.patch;
    char shape[112];
    snprintf(shape, sizeof shape, "B=%lld c=%lld f=%lld h=%lld w=%lld pt=%lld p=%lld rows=%lld", (long long)s.batch,
             (long long)s.channels, (long long)s.frames, (long long)s.height, (long long)s.width, (long long)s.patch_t,
             (long long)s.patch, (long long)rows);
    const float *lat = rnd(nl, -1, 1), *tok = rnd(nt, -1, 1);
    float *t[3], *l[3];
    three(t, NULL, nt), three(l, NULL, nl);
    EACH_SIDE(i) OP(i, patchify_forward)(t[i], lat, &s), OP(i, patchify_backward)(l[i], tok, &s);
    agree(t, nt, TOL, "patchify_forward  %s", shape);
    agree(l, nl, TOL, "patchify_backward %s", shape);
    for (int order = 0; order < 2; order++) {
        three(t, NULL, nt), three(l, NULL, nl);
        EACH_SIDE(i) {
            OP(i, unpatchify_forward)(l[i], tok, &s, (patch_order)order);
            OP(i, unpatchify_backward)(t[i], lat, &s, (patch_order)order);
        }
        agree(l, nl, TOL, "unpatchify_forward  %s %s", order ? "dit " : "conv", shape);
        agree(t, nt, TOL, "unpatchify_backward %s %s", order ? "dit " : "conv", shape);
    }
    release_all();
}

/* ---- loss, optimizers ---- */

static void test_mse(int64_t batch, int64_t per, bool weighted)
{
    const float *pred = rnd(batch * per, -1, 1), *target = rnd(batch * per, -1, 1);
    const float *w = weighted ? rnd(batch, 0.2f, 2.0f) : NULL;
    float v[3], *vp[3] = {&v[0], &v[1], &v[2]}, *dp[3];
    three(dp, NULL, batch * per);
    EACH_SIDE(i) v[i] = OP(i, mse_forward)(pred, target, w, batch, per);
    EACH_SIDE(i) OP(i, mse_backward)(dp[i], pred, target, w, batch, per, 0.37f);
    const char *tag = weighted ? "weighted  " : "unweighted";
    agree(vp, 1, TOL_EXACT, "mse_forward  %s B=%lld per=%lld", tag, (long long)batch, (long long)per);
    agree(dp, batch * per, TOL_EXACT, "mse_backward %s B=%lld per=%lld", tag, (long long)batch, (long long)per);
    if (!weighted) { /* the objective's inputs: exact, the products rounded apart as on the CPU */
        const float *t = rnd(batch, 0, 1);
        float *xt[3], *tg[3], *ts[3];
        three(xt, NULL, batch * per), three(tg, NULL, batch * per), three(ts, NULL, batch);
        EACH_SIDE(i) OP(i, flow_interpolate)(xt[i], tg[i], ts[i], pred, target, t, batch, per);
        agree(xt, batch * per, 0, "flow_interpolate xt B=%lld per=%lld", (long long)batch, (long long)per);
        agree(tg, batch * per, 0, "flow_interpolate target B=%lld per=%lld", (long long)batch, (long long)per);
        agree(ts, batch, 0, "flow_interpolate timesteps B=%lld", (long long)batch);
    }
    release_all();
}

static void test_optimizers(int64_t n, int steps)
{
    float *w[3], *m[3], *v[3], *lw[3], *lm[3];
    three(w, NULL, n), three(m, rnd(n, -0.01f, 0.01f), n), three(v, rnd(n, 0, 1e-4f), n);
    three(lw, NULL, n), three(lm, rnd(n, -0.01f, 0.01f), n);
    const float lr = 1e-3f, wd = 0.1f;
    for (int t = 1; t <= steps; t++) {
        const float *g = rnd(n, -0.1f, 0.1f);
        const optim_coefs adam = {1 - lr * wd, 0.9f, 0.1f, 0.999f, 0.001f, lr / (1 - powf(0.9f, (float)t)),
                                  1 / sqrtf(1 - powf(0.999f, (float)t)), 1e-8f};
        const optim_coefs lion = {1 - lr * wd, 0.9f, 0.1f, 0.99f, 0.01f, lr, 0, 0};
        EACH_SIDE(i) OP(i, adamw_update)(w[i], g, m[i], v[i], n, &adam), OP(i, lion_update)(lw[i], g, lm[i], n, &lion);
    }
    agree(w, n, TOL, "adamw_update w n=%lld steps=%d", (long long)n, steps);
    agree(m, n, TOL, "adamw_update m n=%lld steps=%d", (long long)n, steps);
    agree(v, n, TOL, "adamw_update v n=%lld steps=%d", (long long)n, steps);
    agree(lw, n, TOL, "lion_update  w n=%lld steps=%d", (long long)n, steps);
    agree(lm, n, TOL, "lion_update  m n=%lld steps=%d", (long long)n, steps);
    /* the gradient norm's sum (double, in each backend's own fixed order) and clip_grad_value_ */
    const float *g = rnd(n, -2, 2);
    float *c[3];
    three(c, g, n);
    double sum[3];
    EACH_SIDE(i) sum[i] = OP(i, sum_squares)(g, n), OP(i, clamp_abs)(c[i], n, 0.5f);
    const double e = fabs(sum[1] - sum[0]) / sum[0];
    printf("%-64s rel %.1e%s\n", "sum_squares", e, memcmp(&sum[1], &sum[2], sizeof sum[1]) ? "  RUNS DIFFER" : "");
    CHECKF(e <= (gpu ? 1e-12 : 0) && !memcmp(&sum[1], &sum[2], sizeof sum[1]), "sum_squares: %.17g, %.17g, %.17g",
           sum[0], sum[1], sum[2]);
    agree(c, n, 0, "clamp_abs n=%lld", (long long)n); /* exact */
    release_all();
}

/* ---- attention ---- */

/* Flash attention over (B, T, H, hd) with kv_tokens Tk and kv_heads KVH (Tk == T, KVH == H: self-attention, q, k
 * and v strided views of one packed (T, 3 H hd) buffer; otherwise q dense and k, v views of a packed (Tk, 2 KVH hd)
 * buffer, a case the CUDA op leaves to the CPU: tol 0). dq, dk and dv are views of buffers like the inputs'. */
static void test_attention(int64_t B, int64_t T, int64_t H, int64_t hd, int64_t Tk, int64_t KVH, double tol)
{
    const bool self = Tk == T && KVH == H;
    const int64_t D = H * hd, Dk = KVH * hd, ldq = self ? 3 * D : D, ldkv = self ? 3 * D : 2 * Dk;
    const int64_t ok = self ? D : 0, ov = self ? 2 * D : Dk, nq = B * T * ldq, nkv = B * Tk * ldkv;
    const attn_shape s = {B, T, H, hd, ATTN_FLASH, self ? 0 : Tk, self ? 0 : KVH, 0};
    float *qb = rnd(nq, -2, 2), *kvb = self ? qb : rnd(nkv, -2, 2);
    const attn_view q = {qb, ldq, T * ldq}, k = {kvb + ok, ldkv, Tk * ldkv}, v = {kvb + ov, ldkv, Tk * ldkv};
    float *out[3], *dq[3], *dkv[3], *lse[3];
    op_state keep[3] = {{0}};
    three(out, NULL, B * T * D), three(dq, NULL, nq);
    if (self) EACH_SIDE(i) dkv[i] = dq[i];
    else three(dkv, NULL, nkv);
    char shape[96];
    snprintf(shape, sizeof shape, "B=%lld T=%lld H=%lld hd=%lld%s", (long long)B, (long long)T, (long long)H,
             (long long)hd, self ? "" : " (cross/GQA: CPU)");
    if (!self) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " Tk=%lld KVH=%lld", (long long)Tk,
                        (long long)KVH);

    EACH_SIDE(i) CHECK(OP(i, attention_forward)(P, &s, (attn_view){out[i], D, T * D}, q, k, v, &keep[i]) == ST_OK);
    agree(out, B * T * D, tol, "attention_forward  out %s", shape);
    EACH_SIDE(i) lse[i] = keep[i].data;
    agree(lse, (int64_t)(keep[0].bytes / sizeof(float)), tol, "attention_forward  lse %s", shape);

    /* every side's backward from the CPU forward's output and kept state */
    const attn_view dout = {rnd(B * T * D, -1, 1), D, T * D}, o = {out[0], D, T * D};
    EACH_SIDE(i) {
        const attn_view gq = {dq[i], ldq, T * ldq}, gk = {dkv[i] + ok, ldkv, Tk * ldkv};
        const attn_view gv = {dkv[i] + ov, ldkv, Tk * ldkv};
        CHECK(OP(i, attention_backward)(P, &s, gq, gk, gv, dout, q, k, v, o, &keep[0]) == ST_OK);
    }
    agree_view(dq, 0, B * T, D, ldq, tol, "attention_backward dq %s", shape);
    agree_view(dkv, ok, B * Tk, Dk, ldkv, tol, "attention_backward dk %s", shape);
    agree_view(dkv, ov, B * Tk, Dk, ldkv, tol, "attention_backward dv %s", shape);
    EACH_SIDE(i) op_state_release(&keep[i]);

    /* the masked entry without a mask is the plain op, bit for bit, on each backend */
    float *plain[3], *masked[3];
    three(plain, NULL, B * T * D), three(masked, NULL, B * T * D);
    for (int i = 0; i < 2; i++) {
        op_state kp = {0}, km = {0};
        CHECK(OP(i, attention_forward)(P, &s, (attn_view){plain[i], D, T * D}, q, k, v, &kp) == ST_OK);
        CHECK(OP(i, attention_forward_masked)(P, &s, NULL, (attn_view){masked[i], D, T * D}, q, k, v, &km) == ST_OK);
        CHECKF(!memcmp(plain[i], masked[i], (size_t)(B * T * D) * sizeof(float)) && kp.bytes == km.bytes &&
                   !memcmp(kp.data, km.data, kp.bytes),
               "attention_forward_masked without a mask differs from attention_forward (%s, %s)",
               i ? "cuda" : "cpu", shape);
        op_state_release(&kp), op_state_release(&km);
    }
    release_all();
}

/* ---- the copy engine (a GPU's: its copy stream and events) ---- */

/* Offload and fetch through host tensors, several copies in flight at once, each waited for on its own event: the
 * bytes arrive whole, the host pool (pinned on a GPU) and the device pool account them, the statistics count them,
 * and an injected failure is the waiting caller's status. */
static void test_copies(int64_t n)
{
    pool *host;
    copy_engine *e;
    CHECK(ops_host_pool_create((size_t)64 << 20, &host) == ST_OK && copy_engine_create(&e) == ST_OK);
    offload o = {.engine = e, .device = P, .host = host};
    enum { IN_FLIGHT = 4 };
    host_tensor t[IN_FLIGHT];
    float *src[IN_FLIGHT];
    for (int i = 0; i < IN_FLIGHT; i++) {
        float *d;
        CHECK(pool_alloc(P, (size_t)n * sizeof(float), MEM_BOUNDARIES, "offloaded", (void **)&d) == ST_OK);
        src[i] = rnd(n, -1, 1);
        copy_rows(d, n, src[i], n, 1, n); /* on the device, as the op that produced it would */
        CHECK(host_tensor_offload(&o, &t[i], d, (size_t)n * sizeof(float), MEM_BOUNDARIES, "offloaded") == ST_OK);
    }
    for (int i = 0; i < IN_FLIGHT; i++) CHECK(host_tensor_drop_device(&o, &t[i]) == ST_OK);
    for (int i = 0; i < IN_FLIGHT; i++) CHECK(host_tensor_fetch(&o, &t[i]) == ST_OK);
    int whole = 0;
    for (int i = 0; i < IN_FLIGHT; i++) {
        CHECK(host_tensor_wait(&o, &t[i]) == ST_OK);
        whole += !memcmp(t[i].dev, src[i], (size_t)n * sizeof(float));
        host_tensor_release(&o, &t[i]);
    }
    copy_stats s;
    copy_engine_stats(e, &s);
    printf("%-64s %d of %d whole\n", "copies out and back, 4 in flight", whole, IN_FLIGHT);
    CHECKF(whole == IN_FLIGHT && s.copies[COPY_TO_HOST] == IN_FLIGHT && s.copies[COPY_TO_DEVICE] == IN_FLIGHT &&
               s.bytes[COPY_TO_HOST] == (size_t)(IN_FLIGHT * n) * sizeof(float),
           "%d whole; %zu and %zu copies", whole, s.copies[COPY_TO_HOST], s.copies[COPY_TO_DEVICE]);
    CHECK(pool_live(host) == 0);

    /* floats that are bf16 already (low halves zero) go as bf16, 2 bytes each on the host and the bus, and come back
     * whole (on a GPU: the pitched copies of copy_submit_bf16) */
    float *d;
    CHECK(pool_alloc(P, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "bf16", (void **)&d) == ST_OK);
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &src[0][i], sizeof bits);
        bits &= 0xffff0000u;
        memcpy(&src[0][i], &bits, sizeof bits);
    }
    copy_rows(d, n, src[0], n, 1, n);
    copy_engine_reset_stats(e);
    CHECK(host_tensor_offload_bf16(&o, &t[0], d, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "bf16") == ST_OK);
    const size_t held = pool_live(host);
    CHECK(host_tensor_drop_device(&o, &t[0]) == ST_OK && host_tensor_fetch(&o, &t[0]) == ST_OK &&
          host_tensor_wait(&o, &t[0]) == ST_OK);
    whole = !memcmp(t[0].dev, src[0], (size_t)n * sizeof(float));
    host_tensor_release(&o, &t[0]);
    copy_engine_stats(e, &s);
    printf("%-64s %s\n", "a bf16 copy out and back", whole ? "whole" : "differs");
    CHECKF(whole && held == (size_t)n * 2 && s.bytes[COPY_TO_HOST] == (size_t)n * 2 &&
               s.bytes[COPY_TO_DEVICE] == (size_t)n * 2 && pool_live(host) == 0,
           "bf16 copy: whole %d, host %zu bytes, %zu and %zu copied", whole, held, s.bytes[COPY_TO_HOST],
           s.bytes[COPY_TO_DEVICE]);

    CHECK(pool_alloc(P, 64, MEM_BOUNDARIES, "failing", (void **)&d) == ST_OK);
    copy_engine_fail_nth(e, 1);
    CHECK(host_tensor_offload(&o, &t[0], d, 64, MEM_BOUNDARIES, "failing") == ST_OK);
    CHECKF(host_tensor_drop_device(&o, &t[0]) == ST_ERR_IO, "an injected copy failure is the waiter's status");
    host_tensor_release(&o, &t[0]);
    copy_engine_destroy(e);
    CHECK(pool_destroy(host) == 0);
    release_all();
}

int main(void)
{
    const char *backend = ops_backend_name(), *fallback = getenv("SEGTRAIN_TEST_CPU_FALLBACK");
    gpu = !strncmp(backend, "cuda (", 6);
    if (!gpu && !(fallback && !strcmp(fallback, "1"))) {
        printf("test_cuda_ops: skipped: %s\n", backend);
        return 77;
    }
    printf("test_cuda_ops: %s%s\n", backend, gpu ? "" : " (CPU fallback mode: every comparison exact)");
    if (ops_device_pool_create((size_t)512 << 20, &P) != ST_OK) {
        fprintf(stderr, "test_cuda_ops: no device pool: %s\n", st_error());
        return 1;
    }

    test_gemm(37, 53, 29), test_gemm(64, 96, 128), test_gemm(130, 70, 257);
    test_linear(100, 96, 80), test_linear(37, 61, 130);
    test_matmul(3, 17, 40, 33), test_matmul(2, 64, 50, 96);
    test_gated_linear(2, 37, 48, 72), test_gated_linear(3, 100, 96, 130);
    for (int rms = 0; rms < 2; rms++)
        for (int affine = 0; affine < 2; affine++)
            test_norm(rms, 100, 96, affine), test_norm(rms, 37, 1000, affine), test_norm(rms, 7, 33, affine);
    test_activations(1000), test_activations(4099);
    test_modulation(2, 37, 72), test_modulation(3, 100, 130);
    test_rope(2, 37, 3, 64, 0), test_rope(3, 100, 2, 40, 17);
    test_patches((patch_shape){2, 4, 1, 10, 14, 1, 2, 0});
    test_patches((patch_shape){1, 3, 1, 9, 13, 1, 2, 0}); /* an edge that is no whole patch: left alone */
    test_patches((patch_shape){1, 3, 5, 8, 6, 2, 2, 0}); /* video, patch_t 2, a last frame left alone */
    test_patches((patch_shape){3, 4, 1, 6, 8, 1, 2, 16}); /* HiDream's: 12 patches a sample, then 4 padding rows */
    test_mse(3, 5000, true), test_mse(2, 9001, false);
    test_optimizers(4099, 3);
    test_copies(100000);

    /* flash self-attention: 1e-5, but 1e-4 at 4096 tokens, whose sums run over 4x the keys (GPU only: the CPU
     * fallback mode would spend most of its time there) */
    test_attention(2, 100, 3, 64, 100, 3, TOL);
    test_attention(1, 100, 2, 40, 100, 2, TOL);
    test_attention(2, 100, 4, 128, 100, 4, TOL);
    test_attention(1, 1024, 2, 128, 1024, 2, TOL);
    test_attention(2, 1024, 2, 40, 1024, 2, TOL);
    test_attention(1, 1024, 4, 64, 1024, 4, TOL);
    if (gpu) {
        test_attention(1, 4096, 2, 64, 4096, 2, 1e-4);
        test_attention(2, 4096, 2, 40, 4096, 2, 1e-4);
        test_attention(1, 4096, 4, 128, 4096, 4, 1e-4);
    }
    test_attention(2, 100, 4, 64, 77, 2, 0); /* cross-attention with grouped-query heads: the CPU code on both sides */

    CHECKF(pool_destroy(P) == 0, "the device pool leaked");
    return tk_finish();
}
