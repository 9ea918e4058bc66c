/* Moving and adding tensors: the glue between ops. */
#include "internal.h"

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

void plane_scale_shift_forward(float *restrict y, const float *restrict x, const float *restrict scale,
                               const float *restrict shift, int64_t planes, int64_t inner)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for schedule(static) if (planes >= PAR_ROWS)
        for (int64_t p = 0; p < planes; p++) {
            const float a = 1.0f + scale[p], b = shift[p];
            for (int64_t i = 0; i < inner; i++) y[p * inner + i] = x[p * inner + i] * a + b;
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * planes * inner);
}

void plane_scale_shift_backward(float *dx, float *restrict dscale, float *restrict dshift,
                                const float *dy, const float *restrict x, const float *restrict scale, int64_t planes,
                                int64_t inner)
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
            const float a = 1.0f + scale[p];
            if (dx == dy) /* in place: dy becomes dx */
                for (int64_t i = 0; i < inner; i++) dx[p * inner + i] *= a;
            else if (dx)
                for (int64_t i = 0; i < inner; i++) dx[p * inner + i] += g[i] * a;
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * planes * inner);
}
