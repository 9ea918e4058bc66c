/* Activations, gated linear units, adaLN modulation and the gated residual against independent double-precision
 * references: forward values, backward against central differences of sum(w * reference(inputs)), accumulation into
 * pre-filled gradients, NULL gradients, the in-place forms, and thread-count independence of the
 * reductions over tokens. */
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
enum { B = 2, T = 5, D = 7, N = B * T * D, MS = 3 * D };

static float *fbuf(int64_t n) { return calloc((size_t)n, sizeof(float)); }
static double *dbuf(int64_t n) { return calloc((size_t)n, sizeof(double)); }

/* want[i] = base[i] + g[i]: the expected value of an accumulated gradient */
static void plus(double *want, const float *base, const double *g, int64_t n)
{
    for (int64_t i = 0; i < n; i++) want[i] = base[i] + g[i];
}

/* ---- activations ---- */

static double gelu_ref(double x)
{
    const double k = 0.79788456080286535588; /* sqrt(2/pi) */
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}
static double silu_ref(double x) { return x / (1.0 + exp(-x)); }
static double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }

typedef struct act_ctx {
    double (*f)(double);
    double *x, *w;
    int64_t n;
} act_ctx;

static double act_loss(void *c)
{
    act_ctx *a = c;
    double s = 0;
    for (int64_t i = 0; i < a->n; i++) s += a->w[i] * a->f(a->x[i]);
    return s;
}

static void test_activation(const char *name, double (*ref)(double), void (*fwd)(float *, const float *, int64_t),
                            void (*bwd)(float *, const float *, const float *, int64_t))
{
    const int64_t n = 301;
    float *x = fbuf(n), *y = fbuf(n), *w = fbuf(n), *dx = fbuf(n), *dx0 = fbuf(n);
    double *xd = dbuf(n), *wd = dbuf(n), *yr = dbuf(n), *g = dbuf(n), *want = dbuf(n);
    tk_fill(x, n, 11, -6.0f, 6.0f);
    x[0] = -6.0f, x[1] = 6.0f, x[2] = 0.0f; /* the ends of the range and the origin */
    tk_fill(w, n, 12, -1.0f, 1.0f);
    tk_fill(dx0, n, 13, -0.5f, 0.5f);
    tk_to_double(xd, x, n);
    tk_to_double(wd, w, n);

    char what[64];
    fwd(y, x, n);
    for (int64_t i = 0; i < n; i++) yr[i] = ref(xd[i]);
    snprintf(what, sizeof what, "%s forward", name);
    tk_expect_close(what, y, yr, n, FWD_TOL);

    act_ctx c = {ref, xd, wd, n};
    tk_numeric_grad(act_loss, &c, xd, n, FD_H, g);
    memcpy(dx, dx0, (size_t)n * sizeof(float));
    bwd(dx, w, x, n);
    plus(want, dx0, g, n);
    snprintf(what, sizeof what, "%s backward (accumulated)", name);
    tk_expect_close(what, dx, want, n, GRAD_TOL);
    for (int64_t i = 0; i < n; i++) want[i] = g[i];
    memset(dx, 0, (size_t)n * sizeof(float));
    bwd(dx, w, x, n);
    snprintf(what, sizeof what, "%s backward (from zero)", name);
    tk_expect_close(what, dx, want, n, GRAD_TOL);
    bwd(NULL, w, x, n); /* a NULL gradient is allowed */
    tk_pass();

    free(x), free(y), free(w), free(dx), free(dx0), free(xd), free(wd), free(yr), free(g), free(want);
}

/* Every element over a wide range, each to its own relative accuracy (the check above is relative to the
 * largest value, so it would not see the tails), and no inf or NaN far outside [-6, 6]. The bound grows
 * with |x| (silu) or |2u| (gelu): rounding x or u moves e^(-2u) by that relative amount, in any fp32 code.
 * The reference takes 0.5 (1 + tanh u) as the identical 1 / (1 + e^(-2u)): in double, 1 + tanh u is 0 below
 * x = -7. Below 1e-28 in magnitude the absolute error counts (e^x is clamped near 1e-38). */
static void test_activation_range(void)
{
    const int64_t n = 40001 + 8;
    float *x = fbuf(n), *y = fbuf(n), *dx = fbuf(n), *one = fbuf(n);
    for (int64_t i = 0; i < 40001; i++) x[i] = -20.0f + 0.001f * (float)i;
    const float far[8] = {-200.0f, -90.0f, -87.5f, -44.0f, 44.0f, 87.5f, 90.0f, 200.0f};
    memcpy(x + 40001, far, sizeof far);
    for (int64_t i = 0; i < n; i++) one[i] = 1.0f;
    for (int k = 0; k < 2; k++) {
        double worst = 0;
        int64_t at = 0;
        int finite = 1;
        (k ? silu_forward : gelu_forward)(y, x, n);
        memset(dx, 0, (size_t)n * sizeof(float));
        (k ? silu_backward : gelu_backward)(dx, one, x, n);
        for (int64_t i = 0; i < n; i++) {
            double v = x[i], u = 0.79788456080286535588 * (v + 0.044715 * v * v * v);
            double ref = k ? silu_ref(v) : v / (1.0 + exp(-2.0 * u));
            double cond = 1.0 + (k ? fabs(v) : fabs(2.0 * u));
            double e = fabs(y[i] - ref) / (fabs(ref) * cond + 1e-28);
            if (e > worst) worst = e, at = i;
            finite &= isfinite(y[i]) && isfinite(dx[i]);
        }
        CHECKF(worst <= 5e-7, "%s per-element rel err %.3g at x = %g", k ? "silu" : "gelu", worst, x[at]);
        CHECKF(finite, "%s: inf or NaN over [-200, 200]", k ? "silu" : "gelu");
        if (worst <= 5e-7 && finite) tk_pass();
        printf("%s forward per-element worst rel err / (1 + |arg|): %.3g at x = %g\n", k ? "silu" : "gelu", worst,
               x[at]);
    }
    /* the limits: derivative 1 far right, 0 far left */
    gelu_forward(y, x, n);
    CHECK(y[n - 1] == 200.0f && y[n - 4] == 44.0f && fabsf(y[40001]) < 1e-30f);
    memset(dx, 0, (size_t)n * sizeof(float));
    gelu_backward(dx, one, x, n);
    CHECK(dx[n - 1] == 1.0f && fabsf(dx[40001]) < 1e-30f);
    /* in place, dy becomes dx: the same values as accumulating into zeros, bit for bit */
    float *ip = fbuf(n), *dy = fbuf(n);
    tk_fill(dy, n, 7, -2, 2);
    memcpy(ip, dy, (size_t)n * sizeof(float));
    memset(dx, 0, (size_t)n * sizeof(float));
    gelu_backward(dx, dy, x, n);
    gelu_backward(ip, ip, x, n);
    tk_expect_bitwise("gelu backward in place (dx == dy)", ip, dx, n);
    free(ip), free(dy);
    memset(dx, 0, (size_t)n * sizeof(float));
    silu_backward(dx, one, x, n);
    CHECK(dx[n - 1] == 1.0f && fabsf(dx[40001]) < 1e-30f);
    free(x), free(y), free(dx), free(one);
}

/* ---- modulate: shift and scale are chunks 0 and 1 of a (B, 3D) buffer ---- */

typedef struct mod_ctx {
    double *x, *mod, *w; /* x (B,T,D), mod (B,3D), w (B,T,D) */
} mod_ctx;

static void modulate_ref(double *y, const double *x, const double *mod)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int j = 0; j < D; j++) {
                int i = (b * T + t) * D + j;
                y[i] = x[i] * (1.0 + mod[b * MS + D + j]) + mod[b * MS + j];
            }
}

static double mod_loss(void *c)
{
    mod_ctx *m = c;
    double y[N], s = 0;
    modulate_ref(y, m->x, m->mod);
    for (int i = 0; i < N; i++) s += m->w[i] * y[i];
    return s;
}

static void test_modulate(void)
{
    float x[N], mod[B * MS], w[N], y[N], dx[N], dx0[N], dmod[B * MS], dmod0[B * MS];
    double xd[N], modd[B * MS], wd[N], yr[N], gx[N], gmod[B * MS], want[N + B * MS];
    tk_fill(x, N, 21, -2.0f, 2.0f);
    tk_fill(mod, B * MS, 22, -1.0f, 1.0f);
    tk_fill(w, N, 23, -1.0f, 1.0f);
    tk_fill(dx0, N, 24, -0.5f, 0.5f);
    tk_fill(dmod0, B * MS, 25, -0.5f, 0.5f);
    tk_to_double(xd, x, N);
    tk_to_double(modd, mod, B * MS);
    tk_to_double(wd, w, N);

    modulate_forward(y, x, mod, mod + D, B, T, D, MS);
    modulate_ref(yr, xd, modd);
    tk_expect_close("modulate forward", y, yr, N, FWD_TOL);

    float yi[N]; /* y aliasing x */
    memcpy(yi, x, sizeof x);
    modulate_forward(yi, yi, mod, mod + D, B, T, D, MS);
    tk_expect_bitwise("modulate forward in place (y == x)", yi, y, N);

    mod_ctx c = {xd, modd, wd};
    tk_numeric_grad(mod_loss, &c, xd, N, FD_H, gx);
    tk_numeric_grad(mod_loss, &c, modd, B * MS, FD_H, gmod); /* chunk 2 gets zero: it must stay untouched */
    memcpy(dx, dx0, sizeof dx);
    memcpy(dmod, dmod0, sizeof dmod);
    modulate_backward(dx, dmod, dmod + D, w, x, mod + D, B, T, D, MS);
    plus(want, dx0, gx, N);
    tk_expect_close("modulate dx (accumulated)", dx, want, N, GRAD_TOL);
    plus(want, dmod0, gmod, B * MS);
    tk_expect_close("modulate dshift, dscale (strided, accumulated)", dmod, want, B * MS, GRAD_TOL);
    int untouched = 1;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < D; j++) untouched &= dmod[b * MS + 2 * D + j] == dmod0[b * MS + 2 * D + j];
    CHECKF(untouched, "modulate_backward wrote outside its chunks");

    /* each gradient alone (the others NULL, and x NULL when dscale is not wanted) equals its part of the full call */
    float dx1[N] = {0}, dmod1[B * MS] = {0}, full_dx[N] = {0}, full_dmod[B * MS] = {0};
    modulate_backward(full_dx, full_dmod, full_dmod + D, w, x, mod + D, B, T, D, MS);
    modulate_backward(dx1, NULL, NULL, w, NULL, mod + D, B, T, D, MS);
    modulate_backward(NULL, dmod1, NULL, w, NULL, NULL, B, T, D, MS);
    modulate_backward(NULL, NULL, dmod1 + D, w, x, NULL, B, T, D, MS);
    modulate_backward(NULL, NULL, NULL, w, x, mod + D, B, T, D, MS);
    tk_expect_bitwise("modulate dx alone", dx1, full_dx, N);
    tk_expect_bitwise("modulate dshift, dscale alone", dmod1, full_dmod, B * MS);

    /* in place: dy becomes dx (not added to), and the sums read dy before it is overwritten */
    float ip[N], ip_dmod[B * MS] = {0};
    memcpy(ip, w, sizeof ip);
    modulate_backward(ip, ip_dmod, ip_dmod + D, ip, x, mod + D, B, T, D, MS);
    tk_expect_bitwise("modulate backward in place (dx == dy)", ip, full_dx, N);
    tk_expect_bitwise("modulate dshift, dscale in place", ip_dmod, full_dmod, B * MS);
}

/* ---- gated residual: gate is chunk 2 of a (B, 3D) buffer ---- */

typedef struct gr_ctx {
    double *x, *mod, *h, *w;
} gr_ctx;

static void gated_ref(double *y, const double *x, const double *mod, const double *h)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int j = 0; j < D; j++) {
                int i = (b * T + t) * D + j;
                y[i] = x[i] + mod[b * MS + 2 * D + j] * h[i];
            }
}

static double gr_loss(void *c)
{
    gr_ctx *g = c;
    double y[N], s = 0;
    gated_ref(y, g->x, g->mod, g->h);
    for (int i = 0; i < N; i++) s += g->w[i] * y[i];
    return s;
}

static void test_gated_residual(void)
{
    float x[N], mod[B * MS], h[N], w[N], y[N], dx[N], dx0[N], dmod[B * MS], dmod0[B * MS], dh[N], dh0[N];
    double xd[N], modd[B * MS], hd[N], wd[N], yr[N], gx[N], gmod[B * MS], gh[N], want[N + B * MS];
    tk_fill(x, N, 31, -2.0f, 2.0f);
    tk_fill(mod, B * MS, 32, -1.0f, 1.0f);
    tk_fill(h, N, 33, -2.0f, 2.0f);
    tk_fill(w, N, 34, -1.0f, 1.0f);
    tk_fill(dx0, N, 35, -0.5f, 0.5f);
    tk_fill(dmod0, B * MS, 36, -0.5f, 0.5f);
    tk_fill(dh0, N, 37, -0.5f, 0.5f);
    tk_to_double(xd, x, N);
    tk_to_double(modd, mod, B * MS);
    tk_to_double(hd, h, N);
    tk_to_double(wd, w, N);
    const float *gate = mod + 2 * D;

    gated_residual_forward(y, x, gate, h, B, T, D, MS);
    gated_ref(yr, xd, modd, hd);
    tk_expect_close("gated_residual forward", y, yr, N, FWD_TOL);
    float yi[N];
    memcpy(yi, x, sizeof x);
    gated_residual_forward(yi, yi, gate, h, B, T, D, MS);
    tk_expect_bitwise("gated_residual forward in place (y == x)", yi, y, N);

    gr_ctx c = {xd, modd, hd, wd};
    tk_numeric_grad(gr_loss, &c, xd, N, FD_H, gx);
    tk_numeric_grad(gr_loss, &c, modd, B * MS, FD_H, gmod);
    tk_numeric_grad(gr_loss, &c, hd, N, FD_H, gh);
    memcpy(dx, dx0, sizeof dx);
    memcpy(dmod, dmod0, sizeof dmod);
    memcpy(dh, dh0, sizeof dh);
    gated_residual_backward(dx, dmod + 2 * D, dh, w, gate, h, B, T, D, MS);
    plus(want, dx0, gx, N);
    tk_expect_close("gated_residual dx (accumulated)", dx, want, N, GRAD_TOL);
    plus(want, dmod0, gmod, B * MS);
    tk_expect_close("gated_residual dgate (strided, accumulated)", dmod, want, B * MS, GRAD_TOL);
    plus(want, dh0, gh, N);
    tk_expect_close("gated_residual dh (accumulated)", dh, want, N, GRAD_TOL);

    /* in-place residual stream: dx == dy is left alone (it already is dx's gradient); the rest as before */
    float g[N], dmod2[B * MS], dh2[N];
    memcpy(g, w, sizeof w);
    memcpy(dmod2, dmod0, sizeof dmod2);
    memcpy(dh2, dh0, sizeof dh2);
    gated_residual_backward(g, dmod2 + 2 * D, dh2, g, gate, h, B, T, D, MS);
    tk_expect_bitwise("gated_residual dx == dy untouched", g, w, N);
    tk_expect_bitwise("gated_residual dgate with dx == dy", dmod2, dmod, B * MS);
    tk_expect_bitwise("gated_residual dh with dx == dy", dh2, dh, N);

    /* NULL gradients; inputs a wanted gradient does not read may be NULL too */
    float dxa[N] = {0}, dga[B * MS] = {0}, dha[N] = {0}, dxf[N] = {0}, dgf[B * MS] = {0}, dhf[N] = {0};
    gated_residual_backward(dxf, dgf + 2 * D, dhf, w, gate, h, B, T, D, MS);
    gated_residual_backward(dxa, NULL, NULL, w, NULL, NULL, B, T, D, MS);
    gated_residual_backward(NULL, dga + 2 * D, NULL, w, NULL, h, B, T, D, MS);
    gated_residual_backward(NULL, NULL, dha, w, gate, NULL, B, T, D, MS);
    tk_expect_bitwise("gated_residual dx alone", dxa, dxf, N);
    tk_expect_bitwise("gated_residual dgate alone", dga, dgf, B * MS);
    tk_expect_bitwise("gated_residual dh alone", dha, dhf, N);
}

/* ---- the token reductions give the same bits for every thread count ---- */

static void test_thread_independence(void)
{
    const int64_t b = 3, t = 300, d = 200, ms = 3 * d, n = b * t * d, nm = b * ms;
    const int threads[] = {1, 2, 7}; /* 7 also changes the column split */
    int saved = ops_threads();
    float *x = fbuf(n), *h = fbuf(n), *dy = fbuf(n), *mod = fbuf(nm);
    tk_fill(x, n, 41, -2.0f, 2.0f);
    tk_fill(h, n, 42, -2.0f, 2.0f);
    tk_fill(dy, n, 43, -1.0f, 1.0f);
    tk_fill(mod, nm, 44, -1.0f, 1.0f);
    float *out[3][4];
    for (int k = 0; k < 3; k++) {
        ops_set_threads(threads[k]);
        float *dx = fbuf(n), *dm = fbuf(nm), *dh = fbuf(n), *y = fbuf(n);
        modulate_backward(dx, dm, dm + d, dy, x, mod + d, b, t, d, ms);
        gated_residual_backward(dx, dm + 2 * d, dh, dy, mod + 2 * d, h, b, t, d, ms);
        modulate_forward(y, x, mod, mod + d, b, t, d, ms);
        gated_residual_forward(y, y, mod + 2 * d, h, b, t, d, ms);
        out[k][0] = dx, out[k][1] = dm, out[k][2] = dh, out[k][3] = y;
    }
    for (int k = 1; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "dshift/dscale/dgate, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, out[k][1], out[0][1], nm);
        snprintf(what, sizeof what, "dx, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, out[k][0], out[0][0], n);
        snprintf(what, sizeof what, "dh, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, out[k][2], out[0][2], n);
        snprintf(what, sizeof what, "modulate+gated forward, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, out[k][3], out[0][3], n);
    }
    /* and the large size is right, not just repeatable: dshift of batch 1 column 5 by a direct double sum */
    double s = 0;
    for (int64_t i = 0; i < t; i++) s += dy[(1 * t + i) * d + 5];
    CHECKF(fabs(out[0][1][1 * ms + 5] - s) <= 1e-4 * fabs(s) + 1e-5, "dshift %g vs %g", out[0][1][1 * ms + 5], s);
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 4; j++) free(out[k][j]);
    free(x), free(h), free(dy), free(mod);
    ops_set_threads(saved);
}

/* ---- gated linear units ---- */

typedef struct {
    double (*act)(double);
    double *f, *w, *y; /* f: rows of 2F (a then b, the fused layout) */
    int64_t rows, F;
} glu_ctx;

static double glu_loss(void *c)
{
    glu_ctx *g = c;
    double s = 0;
    for (int64_t r = 0; r < g->rows; r++)
        for (int64_t j = 0; j < g->F; j++)
            s += g->w[r * g->F + j] * g->act(g->f[r * 2 * g->F + j]) * g->f[r * 2 * g->F + g->F + j];
    return s;
}

/* Each kind on the fused layout (ld 2F) against act(a) b in double and central differences, gradients accumulated;
 * on two separate projections (ld F) the same bits; and the bits of the separate ops it is made of (act's forward,
 * then the product; backward (dy b) act'(a) and dy act(a), as the blocks composed them). */
static void test_glu(const char *name, glu_kind k, double (*ref)(double),
                     void (*act_fwd)(float *, const float *, int64_t),
                     void (*act_bwd)(float *, const float *, const float *, int64_t))
{
    enum { R = 6, F = 9 };
    float f[R * 2 * F], y[R * F], w[R * F], df[R * 2 * F], base[R * 2 * F], a[R * F], b[R * F], y2[R * F];
    float da[R * F] = {0}, db[R * F] = {0}, act[R * F], dsa[R * F], da_parts[R * F] = {0};
    tk_fill(f, R * 2 * F, 301 + k, -3, 3);
    tk_fill(w, R * F, 311 + k, -1, 1);
    tk_fill(base, R * 2 * F, 321 + k, -1, 1);
    memcpy(df, base, sizeof df);
    glu_ctx c = {.act = ref, .f = dbuf(R * 2 * F), .w = dbuf(R * F), .y = NULL, .rows = R, .F = F};
    tk_to_double(c.f, f, R * 2 * F);
    tk_to_double(c.w, w, R * F);
    double *want = dbuf(R * F), *g = dbuf(R * 2 * F), *wg = dbuf(R * 2 * F);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < F; j++) want[r * F + j] = ref(c.f[r * 2 * F + j]) * c.f[r * 2 * F + F + j];
    glu_forward(y, f, f + F, R, F, 2 * F, k);
    char what[80];
    snprintf(what, sizeof what, "glu %s forward", name);
    tk_expect_close(what, y, want, R * F, FWD_TOL);
    glu_backward(df, df + F, w, f, f + F, R, F, 2 * F, k);
    tk_numeric_grad(glu_loss, &c, c.f, R * 2 * F, FD_H, g);
    plus(wg, base, g, R * 2 * F);
    snprintf(what, sizeof what, "glu %s backward (accumulated)", name);
    tk_expect_close(what, df, wg, R * 2 * F, GRAD_TOL);
    /* separate projections, and the parts */
    for (int64_t r = 0; r < R; r++)
        memcpy(a + r * F, f + r * 2 * F, F * sizeof(float)), memcpy(b + r * F, f + r * 2 * F + F, F * sizeof(float));
    glu_forward(y2, a, b, R, F, F, k);
    snprintf(what, sizeof what, "glu %s, two projections", name);
    tk_expect_bitwise(what, y2, y, R * F);
    if (!act_fwd) { /* an activation with no op of its own (the sigmoid gate) */
        free(c.f), free(c.w), free(want), free(g), free(wg);
        return;
    }
    act_fwd(act, a, R * F);
    for (int64_t i = 0; i < R * F; i++) y2[i] = act[i] * b[i];
    snprintf(what, sizeof what, "glu %s = its parts, forward", name);
    tk_expect_bitwise(what, y, y2, R * F);
    glu_backward(da, db, w, a, b, R, F, F, k);
    for (int64_t i = 0; i < R * F; i++) dsa[i] = w[i] * b[i], y2[i] = w[i] * act[i];
    act_bwd(da_parts, dsa, a, R * F);
    snprintf(what, sizeof what, "glu %s = its parts, da", name);
    tk_expect_bitwise(what, da, da_parts, R * F);
    snprintf(what, sizeof what, "glu %s = its parts, db", name);
    tk_expect_bitwise(what, db, y2, R * F);
    glu_backward(NULL, NULL, w, a, b, R, F, F, k); /* nothing wanted: nothing written */
    free(c.f), free(c.w), free(want), free(g), free(wg);
}

/* ---- per-plane glue of the U-Nets: y = x (1 + scale[p]) + shift[p], and y += v[p] (planes P = B D of T each) ---- */

typedef struct plane_ctx {
    double *x, *scale, *shift, *w;
} plane_ctx;

static double plane_loss(void *c)
{
    plane_ctx *g = c;
    double s = 0;
    for (int p = 0; p < B * D; p++)
        for (int t = 0; t < T; t++) s += g->w[p * T + t] * (g->x[p * T + t] * (1 + g->scale[p]) + g->shift[p]);
    return s;
}

static void test_plane_ops(void)
{
    enum { P = B * D };
    float x[N], sc[P], sh[P], w[N], y[N], dx[N], dsc[P], dsh[P];
    double xd[N], scd[P], shd[P], wd[N], gx[N], gsc[P], gsh[P], yr[N];
    tk_fill(x, N, 31, -2.0f, 2.0f), tk_fill(sc, P, 32, -0.5f, 0.5f), tk_fill(sh, P, 33, -1.0f, 1.0f);
    tk_fill(w, N, 34, -1.0f, 1.0f);
    tk_to_double(xd, x, N), tk_to_double(scd, sc, P), tk_to_double(shd, sh, P), tk_to_double(wd, w, N);
    plane_scale_shift_forward(y, x, sc, sh, P, T, false);
    for (int i = 0; i < N; i++) yr[i] = xd[i] * (1 + scd[i / T]) + shd[i / T];
    tk_expect_close("plane_scale_shift forward", y, yr, N, FWD_TOL);
    plane_ctx c = {xd, scd, shd, wd};
    tk_numeric_grad(plane_loss, &c, xd, N, FD_H, gx);
    tk_numeric_grad(plane_loss, &c, scd, P, FD_H, gsc);
    tk_numeric_grad(plane_loss, &c, shd, P, FD_H, gsh);
    memset(dx, 0, sizeof dx), memset(dsc, 0, sizeof dsc), memset(dsh, 0, sizeof dsh);
    plane_scale_shift_backward(dx, dsc, dsh, w, x, sc, P, T, false);
    tk_expect_close("plane_scale_shift dx", dx, gx, N, GRAD_TOL);
    tk_expect_close("plane_scale_shift dscale", dsc, gsc, P, GRAD_TOL);
    tk_expect_close("plane_scale_shift dshift", dsh, gsh, P, GRAD_TOL);
    float ip[N], ipsc[P] = {0}, ipsh[P] = {0}; /* in place: dy becomes dx, the sums read dy first */
    memcpy(ip, w, sizeof ip);
    plane_scale_shift_backward(ip, ipsc, ipsh, ip, x, sc, P, T, false);
    tk_expect_bitwise("plane_scale_shift backward in place (dx == dy)", ip, dx, N);
    tk_expect_bitwise("plane_scale_shift dscale in place", ipsc, dsc, P);
    /* bf16: 1 + scale, the product and the sum each rounded (PyTorch's bf16 x * (1 + a) + b) */
    float yb[N], ab[P];
    for (int i = 0; i < P; i++) ab[i] = 1.0f + sc[i];
    round_to_bf16(ab, P);
    plane_scale_shift_forward(yb, x, sc, sh, P, T, true);
    for (int i = 0; i < N; i++) {
        float v = x[i] * ab[i / T];
        round_to_bf16(&v, 1);
        v += sh[i / T];
        round_to_bf16(&v, 1);
        y[i] = v;
    }
    tk_expect_bitwise("plane_scale_shift bf16 forward", yb, y, N);
    float dv[P] = {0}, yv[N];
    memcpy(yv, x, sizeof yv);
    plane_add_forward(yv, sh, P, T);
    for (int i = 0; i < N; i++) yr[i] = xd[i] + shd[i / T];
    tk_expect_close("plane_add forward", yv, yr, N, FWD_TOL);
    plane_add_backward(dv, w, P, T); /* y += v: dv is dshift's part of the same loss */
    tk_expect_close("plane_add dv", dv, gsh, P, GRAD_TOL);
    float tr[N], back[N]; /* (B, D, T) to (B, T, D) and back */
    transpose_batched(tr, x, B, D, T);
    transpose_batched(back, tr, B, T, D);
    CHECK(tr[(1 * T + 2) * D + 3] == x[(1 * D + 3) * T + 2]);
    tk_expect_bitwise("transpose_batched there and back", back, x, N);
}

/* ---- dropout: a counter-based mask, the same in backward, at any thread count ---- */

typedef struct drop_ctx {
    double *x, *w;
    const float *mask; /* the mask times 1 / (1 - p), as the op draws it */
} drop_ctx;

static double drop_loss(void *c)
{
    drop_ctx *g = c;
    double s = 0;
    for (int i = 0; i < N; i++) s += g->w[i] * g->x[i] * g->mask[i];
    return s;
}

static void test_dropout(void)
{
    const float p = 0.25f;
    const uint64_t seed = 7, stream = 11;
    float x[N], w[N], ones[N], mask[N], y[N], dx[N];
    double xd[N], wd[N], gx[N];
    tk_fill(x, N, 41, -2.0f, 2.0f), tk_fill(w, N, 42, -1.0f, 1.0f);
    tk_to_double(xd, x, N), tk_to_double(wd, w, N);
    for (int i = 0; i < N; i++) ones[i] = 1.0f;
    dropout_forward(mask, ones, N, p, seed, stream);
    int kept = 0, scaled = 1;
    for (int i = 0; i < N; i++) kept += mask[i] != 0, scaled &= mask[i] == 0 || mask[i] == 1.0f / (1.0f - p);
    CHECKF(scaled && kept > N / 2 && kept < N, "dropout p=0.25: %d of %d kept, each scaled by 1 / (1 - p)", kept, N);
    dropout_forward(y, x, N, p, seed, stream);
    double yr[N];
    for (int i = 0; i < N; i++) yr[i] = xd[i] * mask[i];
    tk_expect_close("dropout forward", y, yr, N, FWD_TOL);
    drop_ctx c = {xd, wd, mask};
    tk_numeric_grad(drop_loss, &c, xd, N, FD_H, gx);
    memset(dx, 0, sizeof dx);
    dropout_backward(dx, w, N, p, seed, stream);
    tk_expect_close("dropout dx", dx, gx, N, GRAD_TOL);
    float ip[N];
    memcpy(ip, w, sizeof ip);
    dropout_backward(ip, ip, N, p, seed, stream);
    tk_expect_bitwise("dropout backward in place (dx == dy)", ip, dx, N);
    float other[N];
    dropout_forward(other, ones, N, p, seed, stream + 1);
    CHECKF(memcmp(other, mask, sizeof mask) != 0, "another stream draws another mask");
    float none[N];
    dropout_forward(none, x, N, 0.0f, seed, stream);
    tk_expect_bitwise("dropout p=0 is the identity", none, x, N);
}

int main(void)
{
    test_activation("gelu", gelu_ref, gelu_forward, gelu_backward);
    test_activation("silu", silu_ref, silu_forward, silu_backward);
    test_activation("gelu (erf)", gelu_erf_ref, gelu_erf_forward, gelu_erf_backward);
    test_activation_range();
    test_modulate();
    test_gated_residual();
    test_thread_independence();
    test_plane_ops();
    test_dropout();
    test_glu("silu", GLU_SILU, silu_ref, silu_forward, silu_backward);
    test_glu("gelu (erf)", GLU_GELU_ERF, gelu_erf_ref, gelu_erf_forward, gelu_erf_backward);
    test_glu("gelu (tanh)", GLU_GELU_TANH, gelu_ref, gelu_forward, gelu_backward);
    test_glu("sigmoid", GLU_SIGMOID, sigmoid_ref, NULL, NULL);
    return tk_finish();
}
