/* 2D rotary position embedding (Flux's rope on image tokens), in place on a strided view. Pointwise over
 * (batch, tokens) rows, split by rows: each pair is read before it is written, nothing is reduced, so the
 * result is the same for every thread count. The cos/sin coefficients are a small table per call, indexed
 * by grid position and pair, computed serially before the parallel loop. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

#define PAR_MIN ((int64_t)1 << 15)

/* cos and sin of pos * theta^(-2j/h): the angle in double, each rounded once to float. The table and the
 * no-table fallback both come from here, so every call sees bit-identical coefficients. */
static void rope_coef(double theta, int64_t h, int64_t pos, int64_t j, float *c, float *s)
{
    double ang = (double)pos * pow(theta, -2.0 * (double)j / (double)h);
    *c = (float)cos(ang);
    *s = (float)sin(ang);
}

/* Rotates the q = h/2 interleaved pairs of v by position pos; inverse turns the other way (sin negated,
 * which is exact). cs is the table row of pos, or NULL to compute the coefficients here. */
static void rotate_half(float *v, const float *cs, double theta, int64_t h, int64_t pos, bool inverse)
{
    for (int64_t j = 0; j < h / 2; j++) {
        float c, s;
        if (cs) c = cs[2 * j], s = cs[2 * j + 1];
        else rope_coef(theta, h, pos, j, &c, &s);
        if (inverse) s = -s;
        float x0 = v[2 * j], x1 = v[2 * j + 1];
        v[2 * j] = x0 * c - x1 * s;
        v[2 * j + 1] = x0 * s + x1 * c;
    }
}

static void rope_2d_run(float *x, int64_t batch, int64_t tokens, int64_t grid, int64_t heads, int64_t head_dim,
                        int64_t row_stride, int64_t batch_stride, double theta, bool inverse)
{
    if (head_dim % 4 != 0 || grid < 1 || tokens > grid * grid)
        st_panic("rope_2d: head_dim %lld not a multiple of 4, or %lld tokens do not fit grid %lld",
                 (long long)head_dim, (long long)tokens, (long long)grid);
    int64_t rows = batch * tokens, h = head_dim / 2, q = h / 2;
    if (rows <= 0 || heads <= 0 || head_dim <= 0) return;
    /* table[(pos * q + j) * 2 + {0, 1}] = cos, sin; if malloc fails the same values are computed in the loop */
    float *table = malloc((size_t)(grid * q * 2) * sizeof(float));
    if (table)
        for (int64_t pos = 0; pos < grid; pos++)
            for (int64_t j = 0; j < q; j++) {
                float *e = table + (pos * q + j) * 2;
                rope_coef(theta, h, pos, j, &e[0], &e[1]);
            }
#pragma omp parallel for schedule(static) if (rows * heads * head_dim >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r / tokens, t = r % tokens, row = t / grid, col = t % grid;
        float *xr = x + b * batch_stride + t * row_stride;
        const float *cr = table ? table + row * q * 2 : NULL, *cc = table ? table + col * q * 2 : NULL;
        for (int64_t k = 0; k < heads; k++) {
            float *xh = xr + k * head_dim;
            rotate_half(xh, cr, theta, h, row, inverse);     /* first half: the row */
            rotate_half(xh + h, cc, theta, h, col, inverse); /* second half: the column */
        }
    }
    free(table);
}

void rope_2d_forward(float *x, int64_t batch, int64_t tokens, int64_t grid, int64_t heads, int64_t head_dim,
                     int64_t row_stride, int64_t batch_stride, double theta)
{
    const double t0 = prof_now();
    if (!op_dry(x)) rope_2d_run(x, batch, tokens, grid, heads, head_dim, row_stride, batch_stride, theta, false);
    prof_add(OP_POINTWISE, t0, 0, 8.0 * batch * tokens * heads * head_dim);
}

void rope_2d_backward(float *dx, int64_t batch, int64_t tokens, int64_t grid, int64_t heads, int64_t head_dim,
                      int64_t row_stride, int64_t batch_stride, double theta)
{
    const double t0 = prof_now();
    if (!op_dry(dx)) rope_2d_run(dx, batch, tokens, grid, heads, head_dim, row_stride, batch_stride, theta, true);
    prof_add(OP_POINTWISE, t0, 0, 8.0 * batch * tokens * heads * head_dim);
}
