/* 2-D convolution through im2col and BLAS GEMMs, forward and backward; the transposed 2 x 2 convolution of stride 2,
 * a GEMM per image; nearest upsampling; and the depthwise FIR filter (StyleGAN's blur), direct. An image's columns are
 * made a band of output rows at a time, multiplied and dropped before the next band, so the workspace is one band's
 * columns; weight gradients sum the images and bands in order, so no result depends on the thread count. */
#include <limits.h>
#include <string.h>

#include "internal.h"
#include "ops/fallback.h"

/* No convolution has a device kernel: on the device's memory every call is a fallback (ops/fallback.h). */
#define CONV_FALLBACK(op, data)                                                   \
    do {                                                                          \
        const st_status refused = fallback_enter(op, "no device kernel", data);   \
        if (refused) return refused;                                              \
    } while (0)

#define PAR_MIN ((int64_t)1 << 15)

int64_t conv_out_h(const conv_shape *s) { return (s->h + 2 * s->ph - s->kh) / s->sh + 1; }
int64_t conv_out_w(const conv_shape *s) { return (s->w + 2 * s->pw - s->kw) / s->sw + 1; }

/* A 1 x 1 convolution with stride 1 and no padding reads its input as the columns */
static bool direct(const conv_shape *s)
{
    return s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && !s->ph && !s->pw;
}

/* Output rows a band of columns covers: about COLS floats of them, so that they stay in cache between being made
 * and being multiplied, and the workspace stays small whatever the image. */
#define COLS ((int64_t)1 << 21)

static int64_t band_rows(const conv_shape *s)
{
    const int64_t per_row = s->in * s->kh * s->kw * conv_out_w(s), rows = COLS / (per_row ? per_row : 1);
    return rows < 1 ? 1 : rows > conv_out_h(s) ? conv_out_h(s) : rows;
}

size_t conv2d_workspace_bytes(const conv_shape *s)
{
    return direct(s) ? 0 : (size_t)(s->in * s->kh * s->kw * band_rows(s) * conv_out_w(s)) * sizeof(float);
}

/* One band's columns from the pool; NULL (and nothing taken) where the input is its own columns (a 1 x 1) */
static st_status take_columns(pool *p, const conv_shape *s, float **cols)
{
    const size_t ws = conv2d_workspace_bytes(s);
    *cols = NULL;
    return ws ? pool_alloc(p, ws, MEM_WORKSPACE, "conv2d.columns", (void **)cols) : ST_OK;
}

/* cols (in kh kw, rows ow) for output rows oy0 .. oy0 + rows: row (c, i, j) holds x[c][oy sh - ph + i][ox sw - pw + j],
 * zero outside the image */
static void im2col(float *cols, const float *x, const conv_shape *s, int64_t oy0, int64_t rows)
{
    const int64_t ow = conv_out_w(s), K = s->in * s->kh * s->kw, n = rows * ow;
#pragma omp parallel for schedule(static) if (K * n >= PAR_MIN)
    for (int64_t r = 0; r < K; r++) {
        const int64_t c = r / (s->kh * s->kw), i = r / s->kw % s->kh, j = r % s->kw;
        float *o = cols + r * n;
        for (int64_t oy = oy0; oy < oy0 + rows; oy++) {
            const int64_t y = oy * s->sh - s->ph + i;
            for (int64_t ox = 0; ox < ow; ox++) {
                const int64_t xx = ox * s->sw - s->pw + j;
                o[(oy - oy0) * ow + ox] =
                    y >= 0 && y < s->h && xx >= 0 && xx < s->w ? x[(c * s->h + y) * s->w + xx] : 0.0f;
            }
        }
    }
}

/* dx += the band's columns' gradient scattered back; each input channel's pixels are one thread's, its taps in order */
static void col2im(float *dx, const float *dcols, const conv_shape *s, int64_t oy0, int64_t rows)
{
    const int64_t ow = conv_out_w(s), n = rows * ow;
#pragma omp parallel for schedule(static) if (s->in * s->kh * s->kw * n >= PAR_MIN)
    for (int64_t c = 0; c < s->in; c++)
        for (int64_t i = 0; i < s->kh; i++)
            for (int64_t j = 0; j < s->kw; j++) {
                const float *g = dcols + ((c * s->kh + i) * s->kw + j) * n;
                for (int64_t oy = oy0; oy < oy0 + rows; oy++) {
                    const int64_t y = oy * s->sh - s->ph + i;
                    if (y < 0 || y >= s->h) continue;
                    for (int64_t ox = 0; ox < ow; ox++) {
                        const int64_t xx = ox * s->sw - s->pw + j;
                        if (xx >= 0 && xx < s->w) dx[(c * s->h + y) * s->w + xx] += g[(oy - oy0) * ow + ox];
                    }
                }
            }
}

st_status conv2d_forward(pool *p, float *y, const float *x, const float *w, const float *b, const conv_shape *s)
{
    CONV_FALLBACK("conv2d_forward", y);
    const double t0 = prof_now();
    const int64_t oh = conv_out_h(s), ow = conv_out_w(s), P = oh * ow, K = s->in * s->kh * s->kw;
    const int64_t band = band_rows(s);
    float *cols;
    st_status st = take_columns(p, s, &cols);
    for (int64_t n = 0; !st && !op_dry(y) && n < s->batch; n++) {
        const float *xi = x + n * s->in * s->h * s->w;
        float *yi = y + n * s->out * P;
        for (int64_t o = 0; b && o < s->out; o++)
            for (int64_t q = 0; q < P; q++) yi[o * P + q] = b[o];
        if (!cols) {
            blas_gemm(false, false, s->out, P, K, 1.0f, w, xi, b ? 1.0f : 0.0f, yi);
            continue;
        }
        for (int64_t oy = 0; oy < oh; oy += band) {
            const int64_t rows = oh - oy < band ? oh - oy : band;
            im2col(cols, xi, s, oy, rows);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s->out, (int)(rows * ow), (int)K, 1.0f, w,
                        (int)K, cols, (int)(rows * ow), b ? 1.0f : 0.0f, yi + oy * ow, (int)P);
        }
    }
    pool_free(p, cols);
    prof_add(OP_GEMM, t0, 2.0 * (double)(s->batch * s->out * P * K), 0);
    return st;
}

st_status conv2d_backward(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                          const conv_shape *s)
{
    CONV_FALLBACK("conv2d_backward", dy);
    const double t0 = prof_now();
    const int64_t oh = conv_out_h(s), ow = conv_out_w(s), P = oh * ow, K = s->in * s->kh * s->kw;
    const int64_t band = band_rows(s);
    float *cols;
    st_status st = take_columns(p, s, &cols);
    for (int64_t n = 0; !st && !op_dry(dy) && n < s->batch; n++) {
        const float *xi = x + n * s->in * s->h * s->w, *gi = dy + n * s->out * P;
        float *dxi = dx ? dx + n * s->in * s->h * s->w : NULL;
        for (int64_t o = 0; db && o < s->out; o++) {
            float acc = 0.0f;
            for (int64_t q = 0; q < P; q++) acc += gi[o * P + q];
            db[o] += acc;
        }
        if (!cols) { /* 1 x 1: the input is the columns, its gradient theirs */
            if (dw) blas_gemm(false, true, s->out, K, P, 1.0f, gi, xi, 1.0f, dw);
            if (dxi) blas_gemm(true, false, K, P, s->out, 1.0f, w, gi, 1.0f, dxi);
            continue;
        }
        for (int64_t oy = 0; oy < oh && (dw || dxi); oy += band) {
            const int64_t rows = oh - oy < band ? oh - oy : band, m = rows * ow;
            if (dw) {
                im2col(cols, xi, s, oy, rows);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->out, (int)K, (int)m, 1.0f, gi + oy * ow,
                            (int)P, cols, (int)m, 1.0f, dw, (int)K);
            }
            if (!dxi) continue;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)m, (int)s->out, 1.0f, w, (int)K,
                        gi + oy * ow, (int)P, 0.0f, cols, (int)m);
            col2im(dxi, cols, s, oy, rows);
        }
    }
    pool_free(p, cols);
    prof_add(OP_GEMM, t0, 2.0 * (double)(s->batch * s->out * P * K) * ((dx != NULL) + (dw != NULL)), 0);
    return st;
}

/* ---- the transposed 2 x 2 convolution of stride 2: each input pixel owns its own 2 x 2 output block ---- */

/* One image's GEMM product (4 out, h w): row (o, a, e) holds the taps (a, e) of output plane o, read like x's planes */
size_t conv_transpose2x2_workspace_bytes(int64_t in, int64_t out, int64_t h, int64_t w)
{
    return (size_t)(4 * out * h * w) * sizeof(float);
}

static st_status convt_check(int64_t batch, int64_t in, int64_t out, int64_t h, int64_t wd)
{
    if (batch < 0 || in < 1 || out < 1 || h < 1 || wd < 1 || in > INT_MAX || out > INT_MAX / 4 || h > INT_MAX / wd)
        return st_fail(ST_ERR_INVALID, "conv_transpose2x2: batch=%lld in=%lld out=%lld h=%lld w=%lld; valid: "
                       "batch >= 0, the rest at least 1, in, 4 out and h w within int", (long long)batch,
                       (long long)in, (long long)out, (long long)h, (long long)wd);
    return ST_OK;
}

/* y (out, 2h, 2w) of an image from its product cols (4 out, h w), plus the bias (or not); an output row a task */
static void convt_scatter(float *y, const float *cols, const float *bias, int64_t out, int64_t h, int64_t wd)
{
    const int64_t hw = h * wd, ow = 2 * wd;
#pragma omp parallel for schedule(static) if (4 * out * hw >= PAR_MIN)
    for (int64_t r = 0; r < out * 2 * h; r++) { /* plane o, row 2i + a */
        const int64_t o = r / (2 * h), i = r % (2 * h) / 2, a = r % 2;
        const float *c0 = cols + (o * 4 + a * 2) * hw + i * wd, *c1 = c0 + hw;
        const float bo = bias ? bias[o] : 0.0f;
        float *yr = y + r * ow;
        for (int64_t j = 0; j < wd; j++) yr[2 * j] = c0[j] + bo, yr[2 * j + 1] = c1[j] + bo;
    }
}

/* cols (4 out, h w) from an image's dy (out, 2h, 2w): convt_scatter's inverse, without the bias */
static void convt_gather(float *cols, const float *dy, int64_t out, int64_t h, int64_t wd)
{
    const int64_t hw = h * wd, ow = 2 * wd;
#pragma omp parallel for schedule(static) if (4 * out * hw >= PAR_MIN)
    for (int64_t r = 0; r < out * 2 * h; r++) {
        const int64_t o = r / (2 * h), i = r % (2 * h) / 2, a = r % 2;
        float *c0 = cols + (o * 4 + a * 2) * hw + i * wd, *c1 = c0 + hw;
        const float *g = dy + r * ow;
        for (int64_t j = 0; j < wd; j++) c0[j] = g[2 * j], c1[j] = g[2 * j + 1];
    }
}

st_status conv_transpose2x2_forward(pool *p, float *y, const float *x, const float *w, const float *b, int64_t batch,
                                    int64_t in, int64_t out, int64_t h, int64_t wd)
{
    CONV_FALLBACK("conv_transpose2x2_forward", y);
    const double t0 = prof_now();
    const int64_t hw = h * wd;
    float *cols = NULL;
    st_status st = convt_check(batch, in, out, h, wd);
    if (!st)
        st = pool_alloc(p, conv_transpose2x2_workspace_bytes(in, out, h, wd), MEM_WORKSPACE,
                        "conv_transpose2x2.product", (void **)&cols);
    for (int64_t n = 0; !st && !op_dry(y) && n < batch; n++) {
        blas_gemm(true, false, 4 * out, hw, in, 1.0f, w, x + n * in * hw, 0.0f, cols);
        convt_scatter(y + n * 4 * out * hw, cols, b, out, h, wd);
    }
    pool_free(p, cols);
    prof_add(OP_GEMM, t0, 2.0 * (double)(batch * 4 * out * hw * in), 0);
    return st;
}

st_status conv_transpose2x2_backward(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x,
                                     const float *w, int64_t batch, int64_t in, int64_t out, int64_t h, int64_t wd)
{
    CONV_FALLBACK("conv_transpose2x2_backward", dy);
    const double t0 = prof_now();
    const int64_t hw = h * wd;
    float *cols = NULL;
    st_status st = convt_check(batch, in, out, h, wd);
    if (!st && (dx || dw))
        st = pool_alloc(p, conv_transpose2x2_workspace_bytes(in, out, h, wd), MEM_WORKSPACE,
                        "conv_transpose2x2.product", (void **)&cols);
    for (int64_t n = 0; !st && !op_dry(dy) && n < batch; n++) {
        const float *gi = dy + n * 4 * out * hw, *xi = x + n * in * hw;
        if (db)
#pragma omp parallel for schedule(static) if (4 * out * hw >= PAR_MIN)
            for (int64_t o = 0; o < out; o++) {
                double acc = 0;
                for (int64_t q = 0; q < 4 * hw; q++) acc += gi[o * 4 * hw + q];
                db[o] += (float)acc;
            }
        if (!cols) continue;
        convt_gather(cols, gi, out, h, wd);
        if (dx) blas_gemm(false, false, in, hw, 4 * out, 1.0f, w, cols, 1.0f, dx + n * in * hw);
        if (dw) blas_gemm(false, true, in, 4 * out, hw, 1.0f, xi, cols, 1.0f, dw);
    }
    pool_free(p, cols);
    prof_add(OP_GEMM, t0, 2.0 * (double)(batch * 4 * out * hw * in) * ((dx != NULL) + (dw != NULL)), 0);
    return st;
}

/* ---- nearest upsampling ---- */

void upsample_nearest_forward(float *y, const float *x, int64_t planes, int64_t h, int64_t w, int64_t f)
{
    const double t0 = prof_now();
    const int64_t ow = w * f;
#pragma omp parallel for schedule(static) if (planes * h * w * f * f >= PAR_MIN)
    for (int64_t p = 0; p < (op_dry(y) ? 0 : planes); p++)
        for (int64_t i = 0; i < h; i++) {
            const float *xr = x + (p * h + i) * w;
            float *yr = y + (p * h + i) * f * ow;
            for (int64_t j = 0; j < ow; j++) yr[j] = xr[j / f];
            for (int64_t a = 1; a < f; a++) memcpy(yr + a * ow, yr, (size_t)ow * sizeof(float));
        }
    prof_add(OP_POINTWISE, t0, 0, 4.0 * (double)(planes * h * w) * (double)(1 + f * f));
}

void upsample_nearest_backward(float *dx, const float *dy, int64_t planes, int64_t h, int64_t w, int64_t f)
{
    const double t0 = prof_now();
    const int64_t ow = w * f;
#pragma omp parallel for schedule(static) if (planes * h * w * f * f >= PAR_MIN)
    for (int64_t p = 0; p < (op_dry(dx) ? 0 : planes); p++)
        for (int64_t i = 0; i < h; i++) {
            const float *g = dy + (p * h + i) * f * ow;
            float *d = dx + (p * h + i) * w;
            for (int64_t j = 0; j < w; j++) {
                float acc = 0.0f;
                for (int64_t a = 0; a < f; a++)
                    for (int64_t e = 0; e < f; e++) acc += g[a * ow + j * f + e];
                d[j] += acc;
            }
        }
    prof_add(OP_POINTWISE, t0, 0, 4.0 * (double)(planes * h * w) * (double)(2 + f * f));
}

/* ---- the depthwise FIR filter ---- */

static int64_t fir_out(int64_t n, int64_t k, int64_t pad) { return n + 2 * pad - k + 1; }

void fir_forward(float *y, const float *x, const float *kernel, int64_t k, int64_t planes, int64_t h, int64_t w,
                 int64_t ph, int64_t pw)
{
    const double t0 = prof_now();
    const int64_t oh = fir_out(h, k, ph), ow = fir_out(w, k, pw);
    if (!op_dry(y))
#pragma omp parallel for schedule(static) if (planes * oh * ow * k * k >= PAR_MIN)
        for (int64_t c = 0; c < planes; c++) {
            const float *xc = x + c * h * w;
            float *yc = y + c * oh * ow;
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    float acc = 0.0f;
                    for (int64_t i = 0; i < k; i++) {
                        const int64_t yy = oy - ph + i;
                        if (yy < 0 || yy >= h) continue;
                        for (int64_t j = 0; j < k; j++) {
                            const int64_t xx = ox - pw + j;
                            if (xx >= 0 && xx < w) acc += kernel[i * k + j] * xc[yy * w + xx];
                        }
                    }
                    yc[oy * ow + ox] = acc;
                }
        }
    prof_add(OP_POINTWISE, t0, 0, 4.0 * (double)(planes * (h * w + oh * ow)));
}

void fir_backward(float *dx, const float *dy, const float *kernel, int64_t k, int64_t planes, int64_t h, int64_t w,
                  int64_t ph, int64_t pw)
{
    const double t0 = prof_now();
    const int64_t oh = fir_out(h, k, ph), ow = fir_out(w, k, pw);
    if (dx && !op_dry(dy))
#pragma omp parallel for schedule(static) if (planes * oh * ow * k * k >= PAR_MIN)
        for (int64_t c = 0; c < planes; c++) { /* pixel (y, x) gathers dy[y + ph - i][x + pw - j] k[i][j] */
            const float *gc = dy + c * oh * ow;
            float *dc = dx + c * h * w;
            for (int64_t yy = 0; yy < h; yy++)
                for (int64_t xx = 0; xx < w; xx++) {
                    float acc = 0.0f;
                    for (int64_t i = 0; i < k; i++) {
                        const int64_t oy = yy + ph - i;
                        if (oy < 0 || oy >= oh) continue;
                        for (int64_t j = 0; j < k; j++) {
                            const int64_t ox = xx + pw - j;
                            if (ox >= 0 && ox < ow) acc += kernel[i * k + j] * gc[oy * ow + ox];
                        }
                    }
                    dc[yy * w + xx] += acc;
                }
        }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * (double)(planes * (h * w + oh * ow)));
}

/* ---- the depthwise 3 x 3 convolution, channels last ---- */

/* taps (9, c): the weight (c, 1, 3, 3) tap-major, so that the channel loops read it contiguously; flipped (tap 8 - t):
 * the transposed convolution's, which takes dx from dy */
static st_status taps_of(pool *p, const float *weight, int64_t c, bool flip, float **taps)
{
    st_status st = pool_alloc(p, (size_t)(9 * c) * sizeof(float), MEM_WORKSPACE, "depthwise taps", (void **)taps);
    for (int64_t ch = 0; !st && !op_dry(*taps) && !op_dry(weight) && ch < c; ch++)
        for (int t = 0; t < 9; t++) (*taps)[(flip ? 8 - t : t) * c + ch] = weight[ch * 9 + t];
    return st;
}

/* Position (i + a - 1, j + e - 1) of image b's (h, w, c) grid, the tap (a, e) of position (i, j); NULL outside */
static const float *tap_at(const float *x, int64_t b, int64_t i, int64_t j, int a, int e, int64_t h, int64_t w,
                           int64_t c)
{
    const int64_t ii = i + a - 1, jj = j + e - 1;
    return ii < 0 || ii >= h || jj < 0 || jj >= w ? NULL : x + ((b * h + ii) * w + jj) * c;
}

/* y[i, j] += sum over the taps (a, e) of taps[a, e] x[i + a - 1, j + e - 1], zero outside the grid */
static void depthwise_add(float *y, const float *x, const float *taps, int64_t batch, int64_t h, int64_t w, int64_t c)
{
#pragma omp parallel for schedule(static) if (batch * h * w * c * 9 >= PAR_MIN)
    for (int64_t r = 0; r < batch * h; r++) {
        const int64_t b = r / h, i = r % h;
        for (int64_t j = 0; j < w; j++) {
            float *yo = y + ((b * h + i) * w + j) * c;
            for (int t = 0; t < 9; t++) {
                const float *xi = tap_at(x, b, i, j, t / 3, t % 3, h, w, c), *tp = taps + t * c;
                for (int64_t ch = 0; xi && ch < c; ch++) yo[ch] += tp[ch] * xi[ch];
            }
        }
    }
}

st_status depthwise3x3_forward(pool *p, float *y, const float *x, const float *weight, const float *bias,
                               int64_t batch, int64_t h, int64_t w, int64_t c)
{
    CONV_FALLBACK("depthwise3x3_forward", y);
    const double t0 = prof_now();
    float *taps = NULL;
    st_status st = taps_of(p, weight, c, false, &taps);
    if (!st && !op_dry(y)) {
        for (int64_t r = 0; r < batch * h * w; r++)
            for (int64_t ch = 0; ch < c; ch++) y[r * c + ch] = bias ? bias[ch] : 0.0f;
        depthwise_add(y, x, taps, batch, h, w, c);
    }
    pool_free(p, taps);
    prof_add(OP_POINTWISE, t0, 0, 8.0 * (double)(batch * h * w * c));
    return st;
}

st_status depthwise3x3_backward(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x,
                                const float *weight, int64_t batch, int64_t h, int64_t w, int64_t c)
{
    CONV_FALLBACK("depthwise3x3_backward", dy);
    const double t0 = prof_now();
    float *taps = NULL;
    st_status st = dx ? taps_of(p, weight, c, true, &taps) : ST_OK;
    if (!st && dx && !op_dry(dy)) depthwise_add(dx, dy, taps, batch, h, w, c);
    pool_free(p, taps);
    enum { CB = 64 }; /* channels a task: its sums stay in registers and L1, its reads contiguous */
    if (!st && (dw || db) && !op_dry(dy)) /* over every position, channels in blocks: a thread owns its block's sums */
#pragma omp parallel for schedule(static) if (batch * h * w * c * 9 >= PAR_MIN)
        for (int64_t c0 = 0; c0 < c; c0 += CB) {
            const int64_t n = c - c0 < CB ? c - c0 : CB;
            float acc[9][CB] = {{0}}, bacc[CB] = {0};
            for (int64_t b = 0; b < batch; b++)
                for (int64_t i = 0; i < h; i++)
                    for (int64_t j = 0; j < w; j++) {
                        const float *g = dy + ((b * h + i) * w + j) * c + c0;
                        for (int64_t k = 0; k < n; k++) bacc[k] += g[k];
                        for (int t = 0; t < 9; t++) {
                            const float *xi = tap_at(x, b, i, j, t / 3, t % 3, h, w, c);
                            for (int64_t k = 0; xi && k < n; k++) acc[t][k] += g[k] * xi[c0 + k];
                        }
                    }
            for (int64_t k = 0; k < n; k++) {
                for (int t = 0; dw && t < 9; t++) dw[(c0 + k) * 9 + t] += acc[t][k];
                if (db) db[c0 + k] += bacc[k];
            }
        }
    prof_add(OP_POINTWISE, t0, 0, 16.0 * (double)(batch * h * w * c));
    return st;
}

/* ---- the temporal convolution over frames, channels last ---- */

#define TCONV_ROWS 1024 /* token rows a GEMM: the columns' workspace stays TCONV_ROWS x 3 d */

/* cols (n, 3 d) for rows r0 .. r0 + n of x (batch, frames, plane, d): cols[r][i 3 + j] = x[row + (j - 1) plane][i],
 * zero where that frame is outside its sample (the weight's (d, d, 3, 1) layout, so one GEMM takes every tap) */
static void frame_cols(float *cols, const float *x, int64_t r0, int64_t n, int64_t frames, int64_t plane, int64_t d)
{
#pragma omp parallel for schedule(static) if (n * d * 3 >= PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        const int64_t row = r0 + r, f = row / plane % frames;
        float *o = cols + r * 3 * d;
        for (int64_t j = 0; j < 3; j++) {
            const bool in = f + j - 1 >= 0 && f + j - 1 < frames;
            const float *xi = x + (row + (j - 1) * plane) * d;
            for (int64_t i = 0; i < d; i++) o[i * 3 + j] = in ? xi[i] : 0.0f;
        }
    }
}

st_status temporal_conv3_forward(pool *p, float *y, const float *x, const float *w, int64_t batch, int64_t frames,
                                 int64_t plane, int64_t d)
{
    CONV_FALLBACK("temporal_conv3_forward", y);
    const double t0 = prof_now();
    const int64_t rows = batch * frames * plane, R = rows < TCONV_ROWS ? rows : TCONV_ROWS;
    float *cols = NULL;
    st_status st = pool_alloc(p, (size_t)(R * 3 * d) * sizeof(float), MEM_WORKSPACE, "temporal conv columns",
                              (void **)&cols);
    for (int64_t r0 = 0; !st && !op_dry(y) && r0 < rows; r0 += R) {
        const int64_t n = rows - r0 < R ? rows - r0 : R;
        frame_cols(cols, x, r0, n, frames, plane, d);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)d, (int)(3 * d), 1.0f, cols, (int)(3 * d), w,
                    (int)(3 * d), 0.0f, y + r0 * d, (int)d);
    }
    pool_free(p, cols);
    prof_add(OP_GEMM, t0, 6.0 * (double)(rows * d * d), 0);
    return st;
}

st_status temporal_conv3_backward(pool *p, float *dx, float *dw, const float *dy, const float *x, const float *w,
                                  int64_t batch, int64_t frames, int64_t plane, int64_t d)
{
    CONV_FALLBACK("temporal_conv3_backward", dy);
    const double t0 = prof_now();
    const int64_t rows = batch * frames * plane, R = rows < TCONV_ROWS ? rows : TCONV_ROWS;
    float *cols = NULL;
    st_status st = pool_alloc(p, (size_t)(R * 3 * d) * sizeof(float), MEM_WORKSPACE, "temporal conv columns",
                              (void **)&cols);
    for (int64_t r0 = 0; !st && !op_dry(dy) && r0 < rows; r0 += R) {
        const int64_t n = rows - r0 < R ? rows - r0 : R;
        const float *g = dy + r0 * d;
        if (dw) { /* dw (d, 3 d) += dy^T cols, the chunks in order */
            frame_cols(cols, x, r0, n, frames, plane, d);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d, (int)(3 * d), (int)n, 1.0f, g, (int)d, cols,
                        (int)(3 * d), 1.0f, dw, (int)(3 * d));
        }
        if (!dx) continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)(3 * d), (int)d, 1.0f, g, (int)d, w,
                    (int)(3 * d), 0.0f, cols, (int)(3 * d));
        for (int64_t j = 0; j < 3; j++) /* a tap at a time, so that no two rows of a pass write the same row of dx */
#pragma omp parallel for schedule(static) if (n * d >= PAR_MIN)
            for (int64_t r = 0; r < n; r++) {
                const int64_t row = r0 + r, f = row / plane % frames;
                if (f + j - 1 < 0 || f + j - 1 >= frames) continue;
                float *o = dx + (row + (j - 1) * plane) * d;
                const float *c = cols + r * 3 * d + j;
                for (int64_t i = 0; i < d; i++) o[i] += c[i * 3];
            }
    }
    pool_free(p, cols);
    prof_add(OP_GEMM, t0, 6.0 * (double)(rows * d * d) * ((dx != NULL) + (dw != NULL)), 0);
    return st;
}
