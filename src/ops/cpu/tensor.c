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
    if (!op_dry(x))
        for (int64_t i = 0; i < n; i++) x[i] *= s;
}
