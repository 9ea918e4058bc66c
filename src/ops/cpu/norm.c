/* LayerNorm and RMSNorm over the last dimension, GroupNorm over channel groups, and GlobalResponseNorm over tokens.
 *
 * Rows are independent, so forward and the input gradient run parallel over rows and do not depend on the
 * thread count. Row reductions use LANES float accumulators folded in a fixed order: vectorisable without
 * -ffast-math and the same on every ISA. Weight and bias gradients are column sums over rows; they run
 * parallel over column blocks with rows added in order, so they too are independent of the thread count
 * (backward has no pool, so no per-thread partials). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

#define LANES 16
/* Weight-gradient column blocks: whole cache lines, at most COL_MAX floats. Each column's rows are summed in
 * order whatever the partition, so the width may follow the thread count without changing a bit; wide
 * blocks let each thread stream contiguous row segments instead of one line per row. */
#define COL_ALIGN 16
#define COL_MAX 512

/* Backward cannot recompute the statistics (it has no eps): a missing state is a caller bug, not bad input. */
static void require_kept(const op_state *keep, size_t bytes, const char *op)
{
    if (!keep || !keep->data || keep->bytes != bytes)
        st_panic("%s_backward needs the state its forward kept (%zu bytes)", op, bytes);
}

static st_status check_shape(int64_t n, int64_t d, const char *op)
{
    if (n < 0 || d < 1) return st_fail(ST_ERR_INVALID, "%s: bad shape n=%lld d=%lld", op, (long long)n, (long long)d);
    return ST_OK;
}

/* A row norm's shape checked and its kept statistics (bytes of them, named what) taken; *keep zeroed when they
 * could not be */
static st_status norm_begin(pool *p, int64_t n, int64_t d, const char *op, size_t bytes, const char *what,
                            op_state *keep)
{
    st_status s = check_shape(n, d, op);
    if (s != ST_OK) return s;
    s = op_state_alloc(keep, p, bytes, what);
    if (s != ST_OK) *keep = (op_state){0};
    return s;
}

static inline float fold(const float *restrict acc, float tail)
{
    float s = tail;
    for (int l = 0; l < LANES; l++) s += acc[l];
    return s;
}

/* sum x */
static inline float row_sum(const float *restrict x, int64_t d)
{
    float acc[LANES] = {0}, tail = 0;
    int64_t j = 0;
    for (; j + LANES <= d; j += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[j + l];
    for (; j < d; j++) tail += x[j];
    return fold(acc, tail);
}

/* sum (x - c)^2: centred, so the variance does not lose digits to a large mean */
static inline float row_sq_dev(const float *restrict x, float c, int64_t d)
{
    float acc[LANES] = {0}, tail = 0;
    int64_t j = 0;
    for (; j + LANES <= d; j += LANES)
        for (int l = 0; l < LANES; l++) {
            const float t = x[j + l] - c;
            acc[l] += t * t;
        }
    for (; j < d; j++) {
        const float t = x[j] - c;
        tail += t * t;
    }
    return fold(acc, tail);
}

/* s1 = sum g, s2 = sum g xhat with g = dy w (dy without affine), xhat = (x - m) r. Called with a literal
 * `affine` so that each inlined copy has a branch-free loop. */
static inline void grad_row_sums(const float *restrict dy, const float *restrict x, const float *restrict w, float m,
                                 float r, int64_t d, bool affine, float *s1, float *s2)
{
    float a1[LANES] = {0}, a2[LANES] = {0}, t1 = 0, t2 = 0;
    int64_t j = 0;
    for (; j + LANES <= d; j += LANES)
        for (int l = 0; l < LANES; l++) {
            const float g = affine ? dy[j + l] * w[j + l] : dy[j + l];
            a1[l] += g;
            a2[l] += g * ((x[j + l] - m) * r);
        }
    for (; j < d; j++) {
        const float g = affine ? dy[j] * w[j] : dy[j];
        t1 += g;
        t2 += g * ((x[j] - m) * r);
    }
    *s1 = fold(a1, t1);
    *s2 = fold(a2, t2);
}

/* dx += r (g - a - xhat b) */
static inline void grad_row_apply(float *restrict dx, const float *restrict dy, const float *restrict x,
                                  const float *restrict w, float m, float r, float a, float b, int64_t d, bool affine)
{
    for (int64_t j = 0; j < d; j++) {
        const float g = affine ? dy[j] * w[j] : dy[j];
        dx[j] += r * (g - a - ((x[j] - m) * r) * b);
    }
}

/* dw[c0..c0+w) += sum_i dy xhat and db[...] += sum_i dy, rows in order; mean NULL means 0 (RMSNorm). */
static void param_grads(float *restrict dw, float *restrict db, const float *restrict dy, const float *restrict x,
                        const float *restrict mean, const float *restrict rstd, int64_t n, int64_t d, int64_t c0,
                        int64_t w)
{
    float aw[COL_MAX] = {0}, ab[COL_MAX] = {0};
    for (int64_t i = 0; i < n; i++) {
        const float *restrict dyr = dy + i * d + c0, *restrict xr = x + i * d + c0;
        const float m = mean ? mean[i] : 0.0f, r = rstd[i];
        for (int64_t j = 0; j < w; j++) {
            aw[j] += dyr[j] * ((xr[j] - m) * r);
            ab[j] += dyr[j];
        }
    }
    if (dw)
        for (int64_t j = 0; j < w; j++) dw[c0 + j] += aw[j];
    if (db)
        for (int64_t j = 0; j < w; j++) db[c0 + j] += ab[j];
}

/* Work-shares the column blocks of the enclosing parallel region. */
static void param_grads_all(float *dw, float *db, const float *dy, const float *x, const float *mean,
                            const float *rstd, int64_t n, int64_t d)
{
    const int64_t threads = omp_get_num_threads();
    int64_t width = (d + threads - 1) / threads;
    width = (width + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN;
    if (width > COL_MAX) width = COL_MAX;
    const int64_t blocks = (d + width - 1) / width;
#pragma omp for schedule(static)
    for (int64_t cb = 0; cb < blocks; cb++) {
        const int64_t c0 = cb * width;
        param_grads(dw, db, dy, x, mean, rstd, n, d, c0, d - c0 < width ? d - c0 : width);
    }
}

/* ---- LayerNorm ---- */

size_t layernorm_kept_bytes(int64_t n) { return 2 * (size_t)n * sizeof(float); }

static st_status layernorm_forward_run(pool *p, float *y, const float *x, const float *w, const float *b, int64_t n, int64_t d,
                            float eps, op_state *keep)
{
    st_status s = norm_begin(p, n, d, "layernorm", layernorm_kept_bytes(n), "layernorm mean/rstd", keep);
    if (s != ST_OK || op_dry(y)) return s;
    float *mean_out = keep ? keep->data : NULL;
    float *rstd_out = keep ? (float *)keep->data + n : NULL;
    const float inv_d = 1.0f / (float)d;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *restrict xr = x + i * d;
        float *restrict yr = y + i * d;
        const float m = row_sum(xr, d) * inv_d;
        const float r = 1.0f / sqrtf(row_sq_dev(xr, m, d) * inv_d + eps);
        if (mean_out) mean_out[i] = m, rstd_out[i] = r;
        if (w && b)
            for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - m) * r * w[j] + b[j];
        else if (w)
            for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - m) * r * w[j];
        else if (b)
            for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - m) * r + b[j];
        else
            for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - m) * r;
    }
    return ST_OK;
}

/* dx, dw and db of a row norm from its kept statistics: LayerNorm's mean and rstd, or (mean NULL) RMSNorm's rstd
 * alone, whose xhat has no mean and which has no db. With xhat = (x - mean) r and g = dy w:
 * dx = r (g - mean(g) - xhat mean(g xhat)), RMSNorm's without the mean(g) term; dw = sum dy xhat, db = sum dy. */
static void norm_backward_rows(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                               const float *mean, const float *rstd, int64_t n, int64_t d)
{
    const float inv_d = 1.0f / (float)d;
#pragma omp parallel
    {
        if (dx) {
#pragma omp for schedule(static) nowait
            for (int64_t i = 0; i < n; i++) {
                const float *dyr = dy + i * d, *xr = x + i * d;
                const float m = mean ? mean[i] : 0.0f, r = rstd[i];
                float s1, s2;
                if (w) {
                    grad_row_sums(dyr, xr, w, m, r, d, true, &s1, &s2);
                    grad_row_apply(dx + i * d, dyr, xr, w, m, r, mean ? s1 * inv_d : 0.0f, s2 * inv_d, d, true);
                } else {
                    grad_row_sums(dyr, xr, NULL, m, r, d, false, &s1, &s2);
                    grad_row_apply(dx + i * d, dyr, xr, NULL, m, r, mean ? s1 * inv_d : 0.0f, s2 * inv_d, d, false);
                }
            }
        }
        if (dw || db) param_grads_all(dw, db, dy, x, mean, rstd, n, d);
    }
}

static void layernorm_backward_run(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t n,
                        int64_t d, const op_state *keep)
{
    if (n <= 0 || d <= 0 || (!dx && !dw && !db)) return;
    require_kept(keep, layernorm_kept_bytes(n), "layernorm");
    norm_backward_rows(dx, dw, db, dy, x, w, keep->data, (const float *)keep->data + n, n, d);
}

/* ---- RMSNorm ---- */

size_t rmsnorm_kept_bytes(int64_t n) { return (size_t)n * sizeof(float); }

static st_status rmsnorm_forward_run(pool *p, float *y, const float *x, const float *w, int64_t n, int64_t d, float eps,
                          op_state *keep)
{
    st_status s = norm_begin(p, n, d, "rmsnorm", rmsnorm_kept_bytes(n), "rmsnorm rstd", keep);
    if (s != ST_OK || op_dry(y)) return s;
    float *rstd_out = keep ? keep->data : NULL;
    const float inv_d = 1.0f / (float)d;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *restrict xr = x + i * d;
        float *restrict yr = y + i * d;
        const float r = 1.0f / sqrtf(row_sq_dev(xr, 0.0f, d) * inv_d + eps);
        if (rstd_out) rstd_out[i] = r;
        if (w)
            for (int64_t j = 0; j < d; j++) yr[j] = xr[j] * r * w[j];
        else
            for (int64_t j = 0; j < d; j++) yr[j] = xr[j] * r;
    }
    return ST_OK;
}

static void rmsnorm_backward_run(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t n, int64_t d,
                      const op_state *keep)
{
    if (n <= 0 || d <= 0 || (!dx && !dw)) return;
    require_kept(keep, rmsnorm_kept_bytes(n), "rmsnorm");
    norm_backward_rows(dx, dw, NULL, dy, x, w, NULL, keep->data, n, d);
}

st_status layernorm_forward(pool *p, float *y, const float *x, const float *w, const float *b, int64_t n, int64_t d, float eps, op_state *keep)
{
    const double t0 = prof_now();
    const st_status r = layernorm_forward_run(p, y, x, w, b, n, d, eps, keep);
    prof_add(OP_NORM, t0, 0, 8.0 * n * d);
    return r;
}

void layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t n, int64_t d, const op_state *keep)
{
    OP_TIMED(dy, layernorm_backward_run(dx, dw, db, dy, x, w, n, d, keep), OP_NORM, 0, 16.0 * n * d);
}

st_status rmsnorm_forward(pool *p, float *y, const float *x, const float *w, int64_t n, int64_t d, float eps, op_state *keep)
{
    const double t0 = prof_now();
    const st_status r = rmsnorm_forward_run(p, y, x, w, n, d, eps, keep);
    prof_add(OP_NORM, t0, 0, 8.0 * n * d);
    return r;
}

void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t n, int64_t d, const op_state *keep)
{
    OP_TIMED(dy, rmsnorm_backward_run(dx, dw, dy, x, w, n, d, keep), OP_NORM, 0, 16.0 * n * d);
}

/* Zero-centred RMSNorm: the weight is 1 + w, rounded to float before it scales, as F.rms_norm(x, weight=w + 1)
 * takes it; d floats of workspace hold it. Its gradient is w's: d(1 + w)/dw = 1. */
static st_status one_plus(pool *p, const float *w, int64_t d, float **w1)
{
    st_status st = pool_alloc(p, (size_t)d * sizeof(float), MEM_WORKSPACE, "rmsnorm 1 + w", (void **)w1);
    for (int64_t j = 0; !st && !op_dry(*w1) && !op_dry(w) && j < d; j++) (*w1)[j] = w[j] + 1.0f;
    return st;
}

st_status rmsnorm_zc_forward(pool *p, float *y, const float *x, const float *w, int64_t n, int64_t d, float eps,
                             op_state *keep)
{
    float *w1 = NULL;
    st_status st = one_plus(p, w, d, &w1);
    if (!st) st = rmsnorm_forward(p, y, x, w1, n, d, eps, keep);
    pool_free(p, w1);
    return st;
}

st_status rmsnorm_zc_backward(pool *p, float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t n,
                              int64_t d, const op_state *keep)
{
    float *w1 = NULL;
    st_status st = one_plus(p, w, d, &w1);
    if (!st) rmsnorm_backward(dx, dw, dy, x, w1, n, d, keep);
    pool_free(p, w1);
    return st;
}

/* ---- GroupNorm: a (sample, group) is a contiguous run of m = c / groups * inner floats, normalised as a row ---- */

size_t groupnorm_kept_bytes(int64_t n, int64_t groups) { return 2 * (size_t)(n * groups) * sizeof(float); }

static st_status groupnorm_check(int64_t n, int64_t c, int64_t inner, int64_t groups)
{
    if (n < 0 || c < 1 || inner < 1 || groups < 1 || c % groups)
        return st_fail(ST_ERR_INVALID, "groupnorm: n=%lld c=%lld inner=%lld groups=%lld; valid: groups dividing c, "
                                       "each at least 1", (long long)n, (long long)c, (long long)inner,
                       (long long)groups);
    return ST_OK;
}

static st_status groupnorm_forward_run(pool *p, float *y, const float *x, const float *w, const float *b, int64_t n,
                                       int64_t c, int64_t inner, int64_t groups, float eps, op_state *keep)
{
    st_status s = groupnorm_check(n, c, inner, groups);
    if (s == ST_OK) s = op_state_alloc(keep, p, groupnorm_kept_bytes(n, groups), "groupnorm mean/rstd");
    if (s != ST_OK || op_dry(y)) return s;
    const int64_t cg = c / groups, m = cg * inner;
    float *mean_out = keep ? keep->data : NULL, *rstd_out = keep ? (float *)keep->data + n * groups : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t ig = 0; ig < n * groups; ig++) {
        const float *xr = x + ig * m;
        const float mu = row_sum(xr, m) / (float)m, r = 1.0f / sqrtf(row_sq_dev(xr, mu, m) / (float)m + eps);
        if (mean_out) mean_out[ig] = mu, rstd_out[ig] = r;
        for (int64_t k = 0; k < cg; k++) {
            const int64_t ch = ig % groups * cg + k;
            const float sc = w ? w[ch] * r : r, bc = b ? b[ch] : 0.0f;
            const float *xc = xr + k * inner;
            float *yc = y + ig * m + k * inner;
            for (int64_t j = 0; j < inner; j++) yc[j] = (xc[j] - mu) * sc + bc;
        }
    }
    return ST_OK;
}

/* As LayerNorm's with g = dy w[ch]. Each (sample, channel)'s sums of dy and of dy xhat are taken once, into the
 * workspace: weighted by w[ch] and added over a group's channels they give dx, added over the samples in order they
 * are db and dw. */
static st_status groupnorm_backward_run(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x,
                                        const float *w, int64_t n, int64_t c, int64_t inner, int64_t groups,
                                        const op_state *keep)
{
    if (n <= 0 || (!dx && !dw && !db)) return ST_OK;
    require_kept(keep, groupnorm_kept_bytes(n, groups), "groupnorm");
    float *sums = NULL; /* (sample, channel): sum dy, sum dy xhat */
    st_status st = pool_alloc(p, groupnorm_workspace_bytes(n, c), MEM_WORKSPACE, "groupnorm sums", (void **)&sums);
    if (st != ST_OK || op_dry(dy)) return pool_free(p, sums), st;
    const int64_t cg = c / groups, m = cg * inner;
    const float *mean = keep->data, *rstd = (const float *)keep->data + n * groups;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t ic = 0; ic < n * c; ic++) {
            const int64_t ig = ic / c * groups + ic % c / cg;
            grad_row_sums(dy + ic * inner, x + ic * inner, NULL, mean[ig], rstd[ig], inner, false, &sums[2 * ic],
                          &sums[2 * ic + 1]);
        }
        if (dx) {
#pragma omp for schedule(static) nowait
            for (int64_t ig = 0; ig < n * groups; ig++) {
                const float mu = mean[ig], r = rstd[ig];
                float s1 = 0.0f, s2 = 0.0f;
                for (int64_t k = 0; k < cg; k++) {
                    const float wc = w ? w[ig % groups * cg + k] : 1.0f;
                    s1 += wc * sums[2 * (ig * cg + k)], s2 += wc * sums[2 * (ig * cg + k) + 1];
                }
                s1 /= (float)m, s2 /= (float)m;
                for (int64_t k = 0; k < cg; k++) {
                    const float wc = w ? w[ig % groups * cg + k] : 1.0f;
                    const float *dyc = dy + ig * m + k * inner, *xc = x + ig * m + k * inner;
                    float *dxc = dx + ig * m + k * inner;
                    for (int64_t j = 0; j < inner; j++) dxc[j] += r * (wc * dyc[j] - s1 - (xc[j] - mu) * r * s2);
                }
            }
        }
        if (dw || db) {
#pragma omp for schedule(static)
            for (int64_t ch = 0; ch < c; ch++) {
                float aw = 0.0f, ab = 0.0f;
                for (int64_t i = 0; i < n; i++) /* samples in order */
                    ab += sums[2 * (i * c + ch)], aw += sums[2 * (i * c + ch) + 1];
                if (dw) dw[ch] += aw;
                if (db) db[ch] += ab;
            }
        }
    }
    pool_free(p, sums);
    return ST_OK;
}

size_t groupnorm_workspace_bytes(int64_t n, int64_t c) { return 2 * (size_t)(n * c) * sizeof(float); }

st_status groupnorm_forward(pool *p, float *y, const float *x, const float *w, const float *b, int64_t n, int64_t c,
                            int64_t inner, int64_t groups, float eps, op_state *keep)
{
    const double t0 = prof_now();
    const st_status r = groupnorm_forward_run(p, y, x, w, b, n, c, inner, groups, eps, keep);
    prof_add(OP_NORM, t0, 0, 8.0 * n * c * inner);
    return r;
}

st_status groupnorm_backward(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                             int64_t n, int64_t c, int64_t inner, int64_t groups, const op_state *keep)
{
    const double t0 = prof_now();
    const st_status st = groupnorm_backward_run(p, dx, dw, db, dy, x, w, n, c, inner, groups, keep);
    prof_add(OP_NORM, t0, 0, 16.0 * n * c * inner);
    return st;
}

/* ---- GlobalResponseNorm, channels last: each (sample, channel)'s sums over the tokens are one task's, in token order,
 * whatever the partition; rows are independent given them ---- */

size_t grn_kept_bytes(int64_t batch, int64_t c) { return (size_t)(batch * c + batch) * sizeof(float); }

/* (sample, channel): sum dy x and sum dy (doubles), then each sample's dm (doubles), then (sample, channel): the
 * coefficients of dy and of x in dx (floats) */
size_t grn_workspace_bytes(int64_t batch, int64_t c)
{
    return (size_t)(2 * batch * c + batch) * sizeof(double) + (size_t)(2 * batch * c) * sizeof(float);
}

static st_status grn_check(int64_t batch, int64_t tokens, int64_t c)
{
    if (batch < 0 || tokens < 1 || c < 1)
        return st_fail(ST_ERR_INVALID, "grn: batch=%lld tokens=%lld c=%lld; valid: batch >= 0, tokens and c at least 1",
                       (long long)batch, (long long)tokens, (long long)c);
    return ST_OK;
}

/* Channels a (sample, block) task of the enclosing team sums: enough blocks for every thread, whole cache lines, at
 * most COL_MAX. */
static int64_t grn_width(int64_t batch, int64_t c)
{
    const int64_t threads = omp_get_num_threads(), per = batch > 0 ? (threads + batch - 1) / batch : 1;
    int64_t width = (c + per - 1) / per;
    width = (width + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN;
    return width > COL_MAX ? COL_MAX : width;
}

/* y of row r, from its x and its sample's s = a / den: each step rounded to bf16 */
static void grn_row_bf16(float *restrict y, const float *restrict x, const float *restrict gamma,
                         const float *restrict beta, const float *restrict a, float den, int64_t c)
{
    for (int64_t ch = 0; ch < c; ch++) {
        const float s = bf16_of(a[ch] / den);
        y[ch] = bf16_of(bf16_of(bf16_of(gamma[ch] * bf16_of(x[ch] * s)) + beta[ch]) + x[ch]);
    }
}

/* a (batch, c) and mean (batch) of x, then y; s rounded as torch's float division has it (bf16: grn_forward's) */
static void grn_apply(float *y, const float *x, const float *gamma, const float *beta, float *a, float *mean,
                      int64_t batch, int64_t tokens, int64_t c, bool bf16)
{
#pragma omp parallel
    {
        const int64_t width = grn_width(batch, c), blocks = (c + width - 1) / width;
#pragma omp for schedule(static)
        for (int64_t task = 0; task < batch * blocks; task++) {
            const int64_t b = task / blocks, c0 = task % blocks * width, n = c - c0 < width ? c - c0 : width;
            double acc[COL_MAX] = {0};
            for (int64_t t = 0; t < tokens; t++) {
                const float *restrict xr = x + (b * tokens + t) * c + c0;
                for (int64_t j = 0; j < n; j++) acc[j] += (double)xr[j] * xr[j];
            }
            for (int64_t j = 0; j < n; j++) {
                const float norm = (float)sqrt(acc[j]);
                a[b * c + c0 + j] = bf16 ? bf16_of(norm) : norm;
            }
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < batch; b++) {
            double m = 0;
            for (int64_t ch = 0; ch < c; ch++) m += a[b * c + ch];
            mean[b] = bf16 ? bf16_of((float)(m / (double)c)) : (float)(m / (double)c);
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < batch * tokens; r++) {
            const float *restrict xr = x + r * c, *restrict ab = a + r / tokens * c;
            const float den = bf16 ? bf16_of(mean[r / tokens] + 1e-6f) : mean[r / tokens] + 1e-6f;
            float *restrict yr = y + r * c;
            if (bf16) {
                grn_row_bf16(yr, xr, gamma, beta, ab, den, c);
                continue;
            }
            for (int64_t ch = 0; ch < c; ch++) yr[ch] = gamma[ch] * (xr[ch] * (ab[ch] / den)) + beta[ch] + xr[ch];
        }
    }
}

static st_status grn_forward_run(pool *p, float *y, const float *x, const float *gamma, const float *beta,
                                 int64_t batch, int64_t tokens, int64_t c, bool bf16, op_state *keep)
{
    st_status s = grn_check(batch, tokens, c);
    if (s == ST_OK) s = op_state_alloc(keep, p, grn_kept_bytes(batch, c), "grn norms/means");
    if (s != ST_OK) {
        if (keep) *keep = (op_state){0};
        return s;
    }
    float *stats = keep ? keep->data : NULL; /* a (batch, c), then the means (batch) */
    if (!keep) s = pool_alloc(p, grn_kept_bytes(batch, c), MEM_WORKSPACE, "grn norms/means", (void **)&stats);
    if (s == ST_OK && !op_dry(y)) grn_apply(y, x, gamma, beta, stats, stats + batch * c, batch, tokens, c, bf16);
    if (!keep) pool_free(p, stats);
    return s;
}

/* With P = sum_t dy x and r = 1 / (m + 1e-6) per (sample, channel): dbeta = sum dy, dgamma = sum P s, and with
 * G = gamma P: da = G r + dm / c, dm = -sum_c G a r^2; dx = dy (1 + gamma s) + x da / a (no last term where a = 0). */
static st_status grn_backward_run(pool *p, float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                  const float *gamma, int64_t batch, int64_t tokens, int64_t c, const op_state *keep)
{
    st_status st = grn_check(batch, tokens, c);
    if (st != ST_OK || batch == 0 || (!dx && !dgamma && !dbeta)) return st;
    require_kept(keep, grn_kept_bytes(batch, c), "grn");
    double *ws = NULL;
    st = pool_alloc(p, grn_workspace_bytes(batch, c), MEM_WORKSPACE, "grn sums", (void **)&ws);
    if (st != ST_OK || op_dry(dy)) return pool_free(p, ws), st;
    const int64_t bc = batch * c;
    double *sxy = ws, *sdy = ws + bc, *dm = ws + 2 * bc;
    float *k_dy = (float *)(dm + batch), *k_x = k_dy + bc;
    const float *a = keep->data, *mean = (const float *)keep->data + bc;
#pragma omp parallel
    {
        const int64_t width = grn_width(batch, c), blocks = (c + width - 1) / width;
#pragma omp for schedule(static)
        for (int64_t task = 0; task < batch * blocks; task++) {
            const int64_t b = task / blocks, c0 = task % blocks * width, n = c - c0 < width ? c - c0 : width;
            double axy[COL_MAX] = {0}, ady[COL_MAX] = {0};
            for (int64_t t = 0; t < tokens; t++) {
                const int64_t at = (b * tokens + t) * c + c0;
                const float *restrict dyr = dy + at, *restrict xr = x + at;
                for (int64_t j = 0; j < n; j++) axy[j] += (double)dyr[j] * xr[j], ady[j] += dyr[j];
            }
            for (int64_t j = 0; j < n; j++) sxy[b * c + c0 + j] = axy[j], sdy[b * c + c0 + j] = ady[j];
        }
        if (dgamma || dbeta) {
#pragma omp for schedule(static) nowait
            for (int64_t ch = 0; ch < c; ch++) {
                double ag = 0, ab = 0;
                for (int64_t b = 0; b < batch; b++) { /* samples in order */
                    ag += (double)(a[b * c + ch] / (mean[b] + 1e-6f)) * sxy[b * c + ch];
                    ab += sdy[b * c + ch];
                }
                if (dgamma) dgamma[ch] += (float)ag;
                if (dbeta) dbeta[ch] += (float)ab;
            }
        }
        if (dx) {
#pragma omp for schedule(static)
            for (int64_t b = 0; b < batch; b++) {
                const double r = 1.0 / (double)(mean[b] + 1e-6f);
                double acc = 0;
                for (int64_t ch = 0; ch < c; ch++) acc += gamma[ch] * sxy[b * c + ch] * a[b * c + ch];
                dm[b] = -acc * r * r;
            }
#pragma omp for schedule(static)
            for (int64_t k = 0; k < bc; k++) {
                const int64_t b = k / c, ch = k % c;
                const double r = 1.0 / (double)(mean[b] + 1e-6f), da = gamma[ch] * sxy[k] * r + dm[b] / (double)c;
                k_dy[k] = 1.0f + gamma[ch] * (a[k] / (mean[b] + 1e-6f));
                k_x[k] = a[k] > 0.0f ? (float)(da / a[k]) : 0.0f;
            }
#pragma omp for schedule(static)
            for (int64_t row = 0; row < batch * tokens; row++) {
                const float *restrict dyr = dy + row * c, *restrict xr = x + row * c;
                const float *restrict kd = k_dy + row / tokens * c, *restrict kx = k_x + row / tokens * c;
                float *restrict dxr = dx + row * c;
                for (int64_t ch = 0; ch < c; ch++) dxr[ch] += dyr[ch] * kd[ch] + xr[ch] * kx[ch];
            }
        }
    }
    pool_free(p, ws);
    return ST_OK;
}

st_status grn_forward(pool *p, float *y, const float *x, const float *gamma, const float *beta, int64_t batch,
                      int64_t tokens, int64_t c, bool bf16, op_state *keep)
{
    const double t0 = prof_now();
    const st_status r = grn_forward_run(p, y, x, gamma, beta, batch, tokens, c, bf16, keep);
    prof_add(OP_NORM, t0, 0, 8.0 * batch * tokens * c);
    return r;
}

st_status grn_backward(pool *p, float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                       const float *gamma, int64_t batch, int64_t tokens, int64_t c, const op_state *keep)
{
    const double t0 = prof_now();
    const st_status st = grn_backward_run(p, dx, dgamma, dbeta, dy, x, gamma, batch, tokens, c, keep);
    prof_add(OP_NORM, t0, 0, 16.0 * batch * tokens * c);
    return st;
}
