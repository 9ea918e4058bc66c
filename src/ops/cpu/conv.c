/* 2-D convolution through im2col and one BLAS GEMM per image, forward and backward; and the depthwise FIR filter
 * (StyleGAN's blur), direct. Each image's columns are made, multiplied and dropped before the next, so the
 * workspace is one image's columns; weight gradients sum the images in order, so no result depends on the thread
 * count. */
#include <string.h>

#include "internal.h"

#define PAR_MIN ((int64_t)1 << 15)

int64_t conv_out_h(const conv_shape *s) { return (s->h + 2 * s->ph - s->kh) / s->sh + 1; }
int64_t conv_out_w(const conv_shape *s) { return (s->w + 2 * s->pw - s->kw) / s->sw + 1; }

/* A 1 x 1 convolution with stride 1 and no padding reads its input as the columns */
static bool direct(const conv_shape *s) { return s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && !s->ph && !s->pw; }

size_t conv2d_workspace_bytes(const conv_shape *s)
{
    return direct(s) ? 0 : (size_t)(s->in * s->kh * s->kw * conv_out_h(s) * conv_out_w(s)) * sizeof(float);
}

/* cols (in kh kw, oh ow): row (c, i, j) holds x[c][oy sh - ph + i][ox sw - pw + j], zero outside the image */
static void im2col(float *cols, const float *x, const conv_shape *s)
{
    const int64_t oh = conv_out_h(s), ow = conv_out_w(s), rows = s->in * s->kh * s->kw;
#pragma omp parallel for schedule(static) if (rows * oh * ow >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t c = r / (s->kh * s->kw), i = r / s->kw % s->kh, j = r % s->kw;
        float *o = cols + r * oh * ow;
        for (int64_t oy = 0; oy < oh; oy++) {
            const int64_t y = oy * s->sh - s->ph + i;
            for (int64_t ox = 0; ox < ow; ox++) {
                const int64_t xx = ox * s->sw - s->pw + j;
                o[oy * ow + ox] = y >= 0 && y < s->h && xx >= 0 && xx < s->w ? x[(c * s->h + y) * s->w + xx] : 0.0f;
            }
        }
    }
}

/* dx += the columns' gradient scattered back; each input channel's pixels are one thread's, its taps in order */
static void col2im(float *dx, const float *dcols, const conv_shape *s)
{
    const int64_t oh = conv_out_h(s), ow = conv_out_w(s);
#pragma omp parallel for schedule(static) if (s->in * s->kh * s->kw * oh * ow >= PAR_MIN)
    for (int64_t c = 0; c < s->in; c++)
        for (int64_t i = 0; i < s->kh; i++)
            for (int64_t j = 0; j < s->kw; j++) {
                const float *g = dcols + ((c * s->kh + i) * s->kw + j) * oh * ow;
                for (int64_t oy = 0; oy < oh; oy++) {
                    const int64_t y = oy * s->sh - s->ph + i;
                    if (y < 0 || y >= s->h) continue;
                    for (int64_t ox = 0; ox < ow; ox++) {
                        const int64_t xx = ox * s->sw - s->pw + j;
                        if (xx >= 0 && xx < s->w) dx[(c * s->h + y) * s->w + xx] += g[oy * ow + ox];
                    }
                }
            }
}

st_status conv2d_forward(pool *p, float *y, const float *x, const float *w, const float *b, const conv_shape *s)
{
    const double t0 = prof_now();
    const int64_t oh = conv_out_h(s), ow = conv_out_w(s), P = oh * ow, K = s->in * s->kh * s->kw;
    float *cols = NULL;
    const size_t ws = conv2d_workspace_bytes(s);
    st_status st = ws ? pool_alloc(p, ws, MEM_WORKSPACE, "conv2d.columns", (void **)&cols) : ST_OK;
    for (int64_t n = 0; !st && !op_dry(y) && n < s->batch; n++) {
        const float *xi = x + n * s->in * s->h * s->w;
        float *yi = y + n * s->out * P;
        if (cols) im2col(cols, xi, s);
        for (int64_t o = 0; b && o < s->out; o++)
            for (int64_t q = 0; q < P; q++) yi[o * P + q] = b[o];
        gemm(false, false, s->out, P, K, 1.0f, w, cols ? cols : xi, b ? 1.0f : 0.0f, yi);
    }
    pool_free(p, cols);
    prof_add(OP_GEMM, t0, 2.0 * (double)(s->batch * s->out * P * K), 0);
    return st;
}

st_status conv2d_backward(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                          const conv_shape *s)
{
    const double t0 = prof_now();
    const int64_t oh = conv_out_h(s), ow = conv_out_w(s), P = oh * ow, K = s->in * s->kh * s->kw;
    float *cols = NULL;
    const size_t ws = conv2d_workspace_bytes(s);
    st_status st = ws ? pool_alloc(p, ws, MEM_WORKSPACE, "conv2d.columns", (void **)&cols) : ST_OK;
    for (int64_t n = 0; !st && !op_dry(dy) && n < s->batch; n++) {
        const float *xi = x + n * s->in * s->h * s->w, *gi = dy + n * s->out * P;
        float *dxi = dx ? dx + n * s->in * s->h * s->w : NULL;
        for (int64_t o = 0; db && o < s->out; o++) {
            float acc = 0.0f;
            for (int64_t q = 0; q < P; q++) acc += gi[o * P + q];
            db[o] += acc;
        }
        if (dw) {
            if (cols) im2col(cols, xi, s);
            gemm(false, true, s->out, K, P, 1.0f, gi, cols ? cols : xi, 1.0f, dw);
        }
        if (!dxi) continue;
        if (!cols) { /* 1 x 1: the columns' gradient is the input's */
            gemm(true, false, K, P, s->out, 1.0f, w, gi, 1.0f, dxi);
            continue;
        }
        gemm(true, false, K, P, s->out, 1.0f, w, gi, 0.0f, cols);
        col2im(dxi, cols, s);
    }
    pool_free(p, cols);
    prof_add(OP_GEMM, t0, 2.0 * (double)(s->batch * s->out * P * K) * ((dx != NULL) + (dw != NULL)), 0);
    return st;
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
