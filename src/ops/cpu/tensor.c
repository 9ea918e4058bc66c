/* Moving and adding tensors: the glue between ops. */
#include "internal.h"
#include "segtrain/safetensors.h"

#define PAR_ROWS 64 /* below this many rows a parallel region costs more than it saves */

void copy_rows(float *dst, int64_t dst_ld, const float *src, int64_t src_ld, int64_t rows, int64_t cols)
{
    const double t0 = prof_now();
    if (!op_dry(dst) && rows > 0 && cols > 0) {
#pragma omp parallel for schedule(static) if (rows >= PAR_ROWS)
        for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dst_ld, src + r * src_ld, (size_t)cols * sizeof(float));
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * rows * cols);
}

void add_to(float *restrict y, const float *restrict x, int64_t n)
{
    const double t0 = prof_now();
    if (!op_dry(y))
        for (int64_t i = 0; i < n; i++) y[i] += x[i];
    prof_add(OP_POINTWISE, t0, 0, 12.0 * n);
}

void add_row(float *restrict y, const float *restrict row, int64_t rows, int64_t n)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for schedule(static) if (rows >= PAR_ROWS)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i++) y[r * n + i] += row[i];
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * rows * n);
}

void copy_bytes(void *dst, const void *src, size_t n)
{
    if (!op_dry(dst) && n) memcpy(dst, src, n);
}

void scale_by(float *x, int64_t n, float s)
{
    if (op_dry(x)) return;
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void transpose_batched(float *restrict y, const float *restrict x, int64_t batch, int64_t rows, int64_t cols)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
        enum { TILE = 32 }; /* a tile of each side stays in cache */
#pragma omp parallel for collapse(2) schedule(static) if (batch * rows * cols >= PAR_ROWS * 1024)
        for (int64_t b = 0; b < batch; b++)
            for (int64_t r0 = 0; r0 < rows; r0 += TILE) {
                const float *xb = x + b * rows * cols;
                float *yb = y + b * rows * cols;
                const int64_t r1 = r0 + TILE < rows ? r0 + TILE : rows;
                for (int64_t c0 = 0; c0 < cols; c0 += TILE) {
                    const int64_t c1 = c0 + TILE < cols ? c0 + TILE : cols;
                    for (int64_t r = r0; r < r1; r++)
                        for (int64_t c = c0; c < c1; c++) yb[c * rows + r] = xb[r * cols + c];
                }
            }
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * batch * rows * cols);
}

void plane_add_forward(float *restrict y, const float *restrict v, int64_t planes, int64_t inner)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for schedule(static) if (planes >= PAR_ROWS)
        for (int64_t p = 0; p < planes; p++)
            for (int64_t i = 0; i < inner; i++) y[p * inner + i] += v[p];
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * planes * inner);
}

void plane_add_backward(float *restrict dv, const float *restrict dy, int64_t planes, int64_t inner)
{
    const double t0 = prof_now();
    if (!op_dry(dv)) {
#pragma omp parallel for schedule(static) if (planes >= PAR_ROWS)
        for (int64_t p = 0; p < planes; p++) {
            double s = 0; /* in order, in double: the same sum whatever the threads */
            for (int64_t i = 0; i < inner; i++) s += dy[p * inner + i];
            dv[p] += (float)s;
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 4.0 * planes * inner);
}

void zero_floats(float *x, int64_t n)
{
    if (!op_dry(x) && n > 0) memset(x, 0, (size_t)n * sizeof(float));
}

void bf16_to_float(float *restrict y, const uint16_t *restrict x, int64_t n)
{
    if (op_dry(y)) return;
    const double t0 = prof_now();
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) {
        const uint32_t bits = (uint32_t)x[i] << 16;
        memcpy(&y[i], &bits, sizeof bits);
    }
    prof_add(OP_POINTWISE, t0, 0, 6.0 * (double)n);
}

void float_to_bf16(uint16_t *restrict y, const float *restrict x, int64_t n)
{
    if (op_dry(x)) return;
    const double t0 = prof_now();
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) y[i] = sft_f32_to_bf16(x[i]);
    prof_add(OP_POINTWISE, t0, 0, 6.0 * (double)n);
}

void round_to_bf16(float *x, int64_t n)
{
    if (op_dry(x)) return;
    const double t0 = prof_now();
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) x[i] = sft_bf16_to_f32(sft_f32_to_bf16(x[i]));
    prof_add(OP_POINTWISE, t0, 0, 8.0 * (double)n);
}

void plane_scale_shift_forward(float *restrict y, const float *restrict x, const float *restrict scale,
                               const float *restrict shift, int64_t planes, int64_t inner, bool bf16)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for schedule(static) if (planes >= PAR_ROWS)
        for (int64_t p = 0; p < planes; p++) {
            const float a = bf16 ? bf16_of(1.0f + scale[p]) : 1.0f + scale[p], b = shift[p];
            if (bf16)
                for (int64_t i = 0; i < inner; i++) y[p * inner + i] = bf16_of(bf16_of(x[p * inner + i] * a) + b);
            else
                for (int64_t i = 0; i < inner; i++) y[p * inner + i] = x[p * inner + i] * a + b;
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * planes * inner);
}

void plane_scale_shift_backward(float *dx, float *restrict dscale, float *restrict dshift,
                                const float *dy, const float *restrict x, const float *restrict scale, int64_t planes,
                                int64_t inner, bool bf16)
{
    const double t0 = prof_now();
    if (!op_dry(x)) {
#pragma omp parallel for schedule(static) if (planes >= PAR_ROWS)
        for (int64_t p = 0; p < planes; p++) {
            const float *g = dy + p * inner, *v = x + p * inner;
            double sa = 0, sb = 0; /* in order, in double: the same sums whatever the threads */
            for (int64_t i = 0; i < inner; i++) sa += (double)g[i] * v[i], sb += g[i];
            if (dscale) dscale[p] += (float)sa;
            if (dshift) dshift[p] += (float)sb;
            const float a = bf16 ? bf16_of(1.0f + scale[p]) : 1.0f + scale[p];
            if (dx == dy) /* in place: dy becomes dx */
                for (int64_t i = 0; i < inner; i++) dx[p * inner + i] *= a;
            else if (dx)
                for (int64_t i = 0; i < inner; i++) dx[p * inner + i] += g[i] * a;
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * planes * inner);
}

void transpose_batched_backward(float *restrict dx, const float *restrict dy, int64_t batch, int64_t rows, int64_t cols)
{
    const double t0 = prof_now();
    if (!op_dry(dx)) {
#pragma omp parallel for schedule(static) if (batch * rows >= PAR_ROWS)
        for (int64_t br = 0; br < batch * rows; br++) {
            const int64_t b = br / rows, r = br % rows;
            const float *g = dy + b * rows * cols + r;
            float *o = dx + br * cols;
            for (int64_t c = 0; c < cols; c++) o[c] += g[c * rows];
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * batch * rows * cols);
}

void add_scaled(float *restrict y, const float *restrict x, float s, int64_t n)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
        for (int64_t i = 0; i < n; i++) y[i] += x[i] * s;
    }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * n);
}

void mul_scaled(float *y, const float *a, const float *b, float s, int64_t n)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
        for (int64_t i = 0; i < n; i++) y[i] = s * (a[i] * b[i]);
    }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * n);
}

void kron_add(float *y, const float *w1, const float *w2, float s, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for schedule(static) if (a * b * c * d >= (1 << 16))
        for (int64_t r = 0; r < a * b; r++) {
            const int64_t i = r / b, j = r % b;
            float *yr = y + r * c * d;
            for (int64_t p = 0; p < c; p++) {
                const float u = s * w1[i * c + p];
                for (int64_t q = 0; q < d; q++) yr[p * d + q] += u * w2[j * d + q];
            }
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * (double)(a * b * c * d));
}

void kron_backward(float *dw1, float *dw2, const float *G, const float *w1, const float *w2, float s, int64_t a,
                   int64_t b, int64_t c, int64_t d)
{
    const double t0 = prof_now();
    const int64_t cd = c * d, n1 = dw1 && !op_dry(G) ? a * c : 0, n2 = dw2 && !op_dry(G) ? b * d : 0;
#pragma omp parallel for schedule(static) if (a * b * cd >= (1 << 16))
    for (int64_t e = 0; e < n1; e++) { /* dw1[i, p]: one thread's, summed over (j, q) in order */
        const int64_t i = e / c, p = e % c;
        double acc = 0;
        for (int64_t j = 0; j < b; j++)
            for (int64_t q = 0; q < d; q++) acc += (double)G[(i * b + j) * cd + p * d + q] * w2[j * d + q];
        dw1[e] += (float)((double)s * acc);
    }
#pragma omp parallel for schedule(static) if (a * b * cd >= (1 << 16))
    for (int64_t e = 0; e < n2; e++) { /* dw2[j, q], over (i, p) in order */
        const int64_t j = e / d, q = e % d;
        double acc = 0;
        for (int64_t i = 0; i < a; i++)
            for (int64_t p = 0; p < c; p++) acc += (double)G[(i * b + j) * cd + p * d + q] * w1[i * c + p];
        dw2[e] += (float)((double)s * acc);
    }
    prof_add(OP_POINTWISE, t0, 0, 4.0 * (double)(a * b * c * d));
}

void div_by(float *x, int64_t n, float d)
{
    const double t0 = prof_now();
    if (!op_dry(x)) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
        for (int64_t i = 0; i < n; i++) x[i] /= d;
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * n);
}

void add_scalar(float *x, int64_t n, float c)
{
    const double t0 = prof_now();
    if (!op_dry(x)) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
        for (int64_t i = 0; i < n; i++) x[i] += c;
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * n);
}

void row_scale_forward(float *restrict y, const float *restrict x, const float *restrict s, int64_t rows, int64_t cols)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for schedule(static) if (rows >= PAR_ROWS)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) y[r * cols + c] = x[r * cols + c] * s[r];
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * rows * cols);
}

void row_scale_backward(float *restrict dx, float *restrict ds, const float *restrict dy, const float *restrict x,
                        const float *restrict s, int64_t rows, int64_t cols)
{
    const double t0 = prof_now();
    if (!op_dry(dy)) {
#pragma omp parallel for schedule(static) if (rows >= PAR_ROWS)
        for (int64_t r = 0; r < rows; r++) {
            const float *g = dy + r * cols;
            double sum = 0; /* in order, in double: the same sum whatever the threads */
            for (int64_t c = 0; c < cols; c++) {
                if (dx) dx[r * cols + c] += g[c] * s[r];
                if (ds) sum += (double)g[c] * x[r * cols + c];
            }
            if (ds) ds[r] += (float)sum;
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * rows * cols);
}

void pad_replicate_forward(float *restrict y, const float *restrict x, int64_t rows, int64_t n, int64_t pad)
{
    const double t0 = prof_now();
    if (!op_dry(y) && n > 0) {
#pragma omp parallel for schedule(static) if (rows >= PAR_ROWS)
        for (int64_t r = 0; r < rows; r++) {
            float *o = y + r * (pad + n);
            for (int64_t k = 0; k < pad; k++) o[k] = x[r * n];
            memcpy(o + pad, x + r * n, (size_t)n * sizeof(float));
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * rows * (pad + n));
}

void pad_replicate_backward(float *restrict dx, const float *restrict dy, int64_t rows, int64_t n, int64_t pad)
{
    const double t0 = prof_now();
    if (!op_dry(dx) && n > 0) {
#pragma omp parallel for schedule(static) if (rows >= PAR_ROWS)
        for (int64_t r = 0; r < rows; r++) {
            const float *g = dy + r * (pad + n);
            float *o = dx + r * n;
            for (int64_t k = 0; k < pad; k++) o[0] += g[k]; /* the copies' gradients first, in order */
            for (int64_t i = 0; i < n; i++) o[i] += g[pad + i];
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * rows * (pad + n));
}

st_status host_loop(const void *out, host_loop_fn fn, void *arg)
{
    const double t0 = prof_now();
    const st_status st = op_dry(out) ? ST_OK : fn(arg);
    prof_add(OP_POINTWISE, t0, 0, 0);
    return st;
}

void channel_add_forward(float *restrict y, const float *restrict b, int64_t outer, int64_t channels, int64_t inner)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for schedule(static) if (outer >= PAR_ROWS)
        for (int64_t o = 0; o < outer; o++)
            for (int64_t c = 0; c < channels; c++)
                for (int64_t i = 0; i < inner; i++) y[(o * channels + c) * inner + i] += b[c];
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * outer * channels * inner);
}

void channel_add_backward(float *restrict db, const float *restrict dy, int64_t outer, int64_t channels, int64_t inner)
{
    const double t0 = prof_now();
    if (!op_dry(dy) && db) {
#pragma omp parallel for schedule(static) if (channels >= PAR_ROWS)
        for (int64_t c = 0; c < channels; c++)
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++) db[c] += dy[(o * channels + c) * inner + i];
    }
    prof_add(OP_POINTWISE, t0, 0, 4.0 * outer * channels * inner);
}

void mask_bias(float *restrict bias, const float *restrict mask, int64_t batch, int64_t n, int64_t mask_stride,
               float scale)
{
    const double t0 = prof_now();
    if (!op_dry(bias))
        for (int64_t b = 0; b < batch; b++)
            for (int64_t j = 0; j < n; j++) bias[b * n + j] = (1.0f - mask[b * mask_stride + j]) * scale;
    prof_add(OP_POINTWISE, t0, 0, 8.0 * batch * n);
}

void weighted_sum_forward(float *restrict y, const float *restrict x, const float *restrict w, int64_t rows, int64_t k,
                          int64_t d)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for schedule(static) if (rows >= PAR_ROWS)
        for (int64_t r = 0; r < rows; r++) {
            const float *h = x + r * k * d;
            float *o = y + r * d;
            for (int64_t j = 0; j < d; j++) o[j] = 0.0f;
            for (int64_t i = 0; i < k; i++)
                for (int64_t j = 0; j < d; j++) o[j] += h[i * d + j] * w[i];
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 4.0 * rows * (k + 1) * d);
}

void weighted_sum_backward(float *restrict dx, float *restrict dw, const float *restrict dy, const float *restrict x,
                           const float *restrict w, int64_t rows, int64_t k, int64_t d)
{
    const double t0 = prof_now();
    if (!op_dry(dy))
        for (int64_t r = 0; r < rows; r++) { /* dw sums over the rows in order: one thread */
            const float *g = dy + r * d, *h = x + r * k * d;
            for (int64_t i = 0; i < k; i++) {
                double acc = 0;
                for (int64_t j = 0; j < d; j++) {
                    if (dx) dx[(r * k + i) * d + j] += g[j] * w[i];
                    acc += (double)g[j] * h[i * d + j];
                }
                if (dw) dw[i] += (float)acc;
            }
        }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * rows * k * d);
}

void masked_mean_forward(float *restrict y, const float *restrict x, const float *restrict mask, int64_t batch,
                         int64_t rows, int64_t d, int64_t mask_stride)
{
    const double t0 = prof_now();
    if (!op_dry(y))
        for (int64_t b = 0; b < batch; b++) {
            const float *mk = mask + b * mask_stride;
            float total = 0.0f;
            for (int64_t j = 0; j < rows; j++) total += mk[j];
            for (int64_t e = 0; e < d; e++) {
                float s = 0.0f;
                for (int64_t j = 0; j < rows; j++) s += x[(b * rows + j) * d + e] * mk[j];
                y[b * d + e] = total != 0.0f ? s / total : 0.0f;
            }
        }
    prof_add(OP_POINTWISE, t0, 0, 4.0 * batch * rows * d);
}

void masked_mean_backward(float *restrict dx, const float *restrict dy, const float *restrict mask, int64_t batch,
                          int64_t rows, int64_t d, int64_t mask_stride)
{
    const double t0 = prof_now();
    if (!op_dry(dy) && dx)
        for (int64_t b = 0; b < batch; b++) {
            const float *mk = mask + b * mask_stride;
            float total = 0.0f;
            for (int64_t j = 0; j < rows; j++) total += mk[j];
            for (int64_t j = 0; total != 0.0f && j < rows; j++)
                for (int64_t e = 0; e < d; e++) dx[(b * rows + j) * d + e] += dy[b * d + e] * mk[j] / total;
        }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * batch * rows * d);
}
