/* Mean squared error, plain and with per-sample weights, and token cross-entropy: values against double references,
 * backward against central differences, dloss scaling, accumulation, and the same bits for every thread count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

static float *fbuf(int64_t n) { return calloc((size_t)n, sizeof(float)); }
static double *dbuf(int64_t n) { return calloc((size_t)n, sizeof(double)); }

typedef struct mse_ctx {
    double *pred, *target, dloss;
    int64_t n;
    const float *weight; /* per sample of per values; NULL: none */
    int64_t per;
} mse_ctx;

static double mse_ref(void *c)
{
    mse_ctx *m = c;
    double s = 0;
    for (int64_t i = 0; i < m->n; i++)
        s += (m->weight ? m->weight[i / m->per] : 1.0) * (m->pred[i] - m->target[i]) * (m->pred[i] - m->target[i]);
    return m->dloss * s / (double)m->n;
}

static void test_small(void)
{
    const int64_t n = 1001;
    float *p = fbuf(n), *t = fbuf(n), *dp = fbuf(n), *dp0 = fbuf(n);
    double *pd = dbuf(n), *td = dbuf(n), *g = dbuf(n), *want = dbuf(n);
    tk_fill(p, n, 71, -2.0f, 2.0f);
    tk_fill(t, n, 72, -2.0f, 2.0f);
    tk_fill(dp0, n, 73, -0.01f, 0.01f);
    tk_to_double(pd, p, n);
    tk_to_double(td, t, n);
    mse_ctx c = {pd, td, 1.0, n, NULL, n};

    float v = mse_forward(p, t, NULL, 1, n);
    double r = mse_ref(&c);
    CHECKF(fabs(v - r) <= 1e-6 * r, "mse %.9g vs %.9g", v, r);
    if (fabs(v - r) <= 1e-6 * r) tk_pass();
    printf("mse small: %.9g (reference %.9g)\n", v, r);

    c.dloss = 0.75;
    tk_numeric_grad(mse_ref, &c, pd, n, 1e-6, g);
    memcpy(dp, dp0, (size_t)n * sizeof(float));
    mse_backward(dp, p, t, NULL, 1, n, 0.75f);
    for (int64_t i = 0; i < n; i++) want[i] = dp0[i] + g[i];
    tk_expect_close("mse backward dloss 0.75 (accumulated, vs FD)", dp, want, n, 1e-4);

    /* dloss scales linearly */
    float *d1 = fbuf(n), *d3 = fbuf(n);
    mse_backward(d1, p, t, NULL, 1, n, 1.0f);
    mse_backward(d3, p, t, NULL, 1, n, 3.0f);
    for (int64_t i = 0; i < n; i++) want[i] = 3.0 * d1[i];
    tk_expect_close("mse backward dloss 3 = 3 x dloss 1", d3, want, n, 1e-6);
    mse_backward(NULL, p, t, NULL, 1, n, 1.0f);
    CHECK(mse_forward(p, p, NULL, 1, n) == 0.0f);
    free(p), free(t), free(dp), free(dp0), free(pd), free(td), free(g), free(want), free(d1), free(d3);
}

/* Per-sample weights: value and backward against the weighted reference, and weights of 1 equal to none. */
static void test_weighted(void)
{
    const int64_t batch = 3, per = 337, n = batch * per;
    const float w[3] = {0.3f, 1.0f, 2.5f}, ones[3] = {1.0f, 1.0f, 1.0f};
    float *p = fbuf(n), *t = fbuf(n), *dp = fbuf(n), *d1 = fbuf(n), *dn = fbuf(n);
    double *pd = dbuf(n), *td = dbuf(n), *g = dbuf(n);
    tk_fill(p, n, 91, -2.0f, 2.0f);
    tk_fill(t, n, 92, -2.0f, 2.0f);
    tk_to_double(pd, p, n);
    tk_to_double(td, t, n);
    mse_ctx c = {pd, td, 1.0, n, w, per};
    const float v = mse_forward(p, t, w, batch, per);
    const double r = mse_ref(&c);
    CHECKF(fabs(v - r) <= 1e-6 * r, "weighted mse %.9g vs %.9g", v, r);
    if (fabs(v - r) <= 1e-6 * r) tk_pass();
    c.dloss = 0.5;
    tk_numeric_grad(mse_ref, &c, pd, n, 1e-6, g);
    mse_backward(dp, p, t, w, batch, per, 0.5f);
    tk_expect_close("weighted mse backward dloss 0.5 (vs FD)", dp, g, n, 1e-4);
    const float v1 = mse_forward(p, t, ones, batch, per), vn = mse_forward(p, t, NULL, batch, per);
    CHECKF(fabs(v1 - vn) <= 1e-7 * vn, "weights of 1: %.9g, none: %.9g", v1, vn);
    if (fabs(v1 - vn) <= 1e-7 * vn) tk_pass();
    mse_backward(d1, p, t, ones, batch, per, 1.0f);
    mse_backward(dn, p, t, NULL, batch, per, 1.0f);
    tk_expect_bitwise("weighted mse backward, weights of 1 vs none", d1, dn, n);
    free(p), free(t), free(dp), free(d1), free(dn), free(pd), free(td), free(g);
}

static void test_threads(void)
{
    const int64_t n = 7 * 14287; /* 7 weighted samples, not a multiple of the chunk */
    const float w[7] = {0.5f, 1.0f, 2.0f, 0.25f, 1.5f, 3.0f, 0.75f};
    int saved = ops_threads();
    float *p = fbuf(n), *t = fbuf(n);
    double *pd = dbuf(n), *td = dbuf(n);
    tk_fill(p, n, 81, -3.0f, 3.0f);
    tk_fill(t, n, 82, -1.0f, 1.0f);
    tk_to_double(pd, p, n);
    tk_to_double(td, t, n);
    const int threads[] = {1, 2, 7};
    float v[3], *dp[3];
    for (int k = 0; k < 3; k++) {
        ops_set_threads(threads[k]);
        v[k] = mse_forward(p, t, w, 7, n / 7);
        dp[k] = fbuf(n);
        mse_backward(dp[k], p, t, w, 7, n / 7, 1.5f);
    }
    for (int k = 1; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "mse value, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, &v[k], &v[0], 1);
        snprintf(what, sizeof what, "mse backward, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, dp[k], dp[0], n);
    }
    mse_ctx c = {pd, td, 1.0, n, w, n / 7};
    double r = mse_ref(&c);
    CHECKF(fabs(v[0] - r) <= 1e-6 * r, "mse large %.9g vs %.9g", v[0], r);
    if (fabs(v[0] - r) <= 1e-6 * r) tk_pass();
    printf("mse n=%lld: %.9g (reference %.9g)\n", (long long)n, v[0], r);
    for (int k = 0; k < 3; k++) free(dp[k]);
    free(p), free(t), free(pd), free(td);
    ops_set_threads(saved);
}

/* ---- token cross-entropy ---- */

typedef struct ce_ctx {
    double *z;
    const float *t, *w;
    int64_t rows, vocab;
    double dloss;
} ce_ctx;

/* sum_r w_r (logsumexp(z_r) - z_r[t_r]) in double, written from the definition */
static double ce_ref(void *c)
{
    ce_ctx *e = c;
    double s = 0;
    for (int64_t r = 0; r < e->rows; r++) {
        const double *z = e->z + r * e->vocab;
        double hi = z[0], sum = 0;
        for (int64_t j = 1; j < e->vocab; j++) hi = fmax(hi, z[j]);
        for (int64_t j = 0; j < e->vocab; j++) sum += exp(z[j] - hi);
        s += (e->w ? e->w[r] : 1.0) * (hi + log(sum) - z[(int64_t)e->t[r]]);
    }
    return e->dloss * s;
}

/* Value against the reference, backward (accumulating onto noise) against central differences of it, weights of 1
 * equal to none, zero weight rows adding nothing, and a target that is not a class refused */
static void test_cross_entropy(void)
{
    const int64_t rows = 13, vocab = 37, n = rows * vocab;
    float *z = fbuf(n), *dz = fbuf(n), *d0 = fbuf(n), *d1 = fbuf(n), *dn = fbuf(n), t[13], w[13], ones[13];
    double *zd = dbuf(n), *g = dbuf(n), *want = dbuf(n);
    tk_fill(z, n, 101, -4.0f, 4.0f);
    tk_fill(d0, n, 102, -0.01f, 0.01f);
    tk_fill(w, rows, 103, 0.0f, 2.0f);
    w[3] = 0.0f; /* a masked row */
    for (int64_t r = 0; r < rows; r++) t[r] = (float)((r * 7 + 3) % vocab), ones[r] = 1.0f;
    t[5] = (float)(vocab - 1);
    tk_to_double(zd, z, n);
    ce_ctx c = {zd, t, w, rows, vocab, 1.0};
    float v = -1.0f;
    CHECK(cross_entropy_forward(z, t, w, rows, vocab, &v) == ST_OK);
    const double r = ce_ref(&c);
    CHECKF(fabs(v - r) <= 1e-6 * fabs(r), "cross entropy %.9g vs %.9g", v, r);
    if (fabs(v - r) <= 1e-6 * fabs(r)) tk_pass();
    printf("cross entropy: %.9g (reference %.9g)\n", v, r);

    c.dloss = 0.625;
    tk_numeric_grad(ce_ref, &c, zd, n, 1e-6, g);
    memcpy(dz, d0, (size_t)n * sizeof(float));
    cross_entropy_backward(dz, z, t, w, rows, vocab, 0.625f);
    for (int64_t i = 0; i < n; i++) want[i] = d0[i] + g[i];
    tk_expect_close("cross entropy backward dloss 0.625 (accumulated, vs FD)", dz, want, n, 1e-4);
    bool untouched = true;
    for (int64_t j = 0; j < vocab; j++) untouched &= dz[3 * vocab + j] == d0[3 * vocab + j];
    CHECK(untouched);
    if (untouched) tk_pass();

    float v1 = 0, vn = 0;
    CHECK(cross_entropy_forward(z, t, ones, rows, vocab, &v1) == ST_OK);
    CHECK(cross_entropy_forward(z, t, NULL, rows, vocab, &vn) == ST_OK);
    tk_expect_bitwise("cross entropy, weights of 1 vs none", &v1, &vn, 1);
    cross_entropy_backward(d1, z, t, ones, rows, vocab, 1.0f);
    cross_entropy_backward(dn, z, t, NULL, rows, vocab, 1.0f);
    tk_expect_bitwise("cross entropy backward, weights of 1 vs none", d1, dn, n);

    const float bad[3] = {(float)vocab, -1.0f, 2.5f};
    for (int k = 0; k < 3; k++) {
        float tb[13];
        memcpy(tb, t, sizeof tb);
        tb[7] = bad[k];
        float keep = 42.0f;
        CHECK(cross_entropy_forward(z, tb, w, rows, vocab, &keep) == ST_ERR_INVALID && keep == 42.0f);
        CHECK(strstr(st_error(), "row 7") != NULL);
    }
    free(z), free(dz), free(d0), free(d1), free(dn), free(zd), free(g), free(want);
}

/* HeartMuLa's vocabulary (8197) over rows that a thread split cuts: the same bits at 1, 2 and 7 threads, and the value
 * within 1e-6 of the reference */
static void test_cross_entropy_threads(void)
{
    const int64_t rows = 301, vocab = 8197, n = rows * vocab;
    int saved = ops_threads();
    float *z = fbuf(n), *t = fbuf(rows), *w = fbuf(rows);
    double *zd = dbuf(n);
    tk_fill(z, n, 111, -6.0f, 6.0f);
    tk_fill(w, rows, 112, 0.0f, 1.0f);
    for (int64_t r = 0; r < rows; r++) t[r] = (float)((r * 4099 + 11) % vocab);
    tk_to_double(zd, z, n);
    const int threads[] = {1, 2, 7};
    float v[3], *dz[3];
    for (int k = 0; k < 3; k++) {
        ops_set_threads(threads[k]);
        CHECK(cross_entropy_forward(z, t, w, rows, vocab, &v[k]) == ST_OK);
        dz[k] = fbuf(n);
        cross_entropy_backward(dz[k], z, t, w, rows, vocab, 0.5f);
    }
    for (int k = 1; k < 3; k++) {
        char what[80];
        snprintf(what, sizeof what, "cross entropy value, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, &v[k], &v[0], 1);
        snprintf(what, sizeof what, "cross entropy backward, %d threads vs 1", threads[k]);
        tk_expect_bitwise(what, dz[k], dz[0], n);
    }
    ce_ctx c = {zd, t, w, rows, vocab, 1.0};
    const double r = ce_ref(&c);
    CHECKF(fabs(v[0] - r) <= 1e-6 * fabs(r), "cross entropy at vocab 8197: %.9g vs %.9g", v[0], r);
    if (fabs(v[0] - r) <= 1e-6 * fabs(r)) tk_pass();
    for (int k = 0; k < 3; k++) free(dz[k]);
    free(z), free(t), free(w), free(zd);
    ops_set_threads(saved);
}

int main(void)
{
    test_small();
    test_weighted();
    test_threads();
    test_cross_entropy();
    test_cross_entropy_threads();
    return tk_finish();
}
