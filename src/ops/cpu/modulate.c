/* adaLN modulation and the gated residual. Forward is pointwise over (batch, tokens, d), split by rows.
 * Backward also reduces over tokens (dshift, dscale, dgate): it is split into (batch, column block) items,
 * each owning its columns for all tokens, so every reduced element is summed by one thread, tokens in
 * order, whatever the thread count or block width. */
#include <omp.h>

#include "internal.h"

#define PAR_MIN ((int64_t)1 << 15)
#define BLK_MAX 64
#define BLK_MIN 16

/* Column block width for the backward items: wide for long vectorised rows, narrower when that leaves
 * threads idle. Only the split depends on it, never the order of any sum. */
static int64_t col_block(int64_t batch, int64_t d)
{
    int64_t want = 2 * (int64_t)omp_get_max_threads(), blk = BLK_MAX;
    while (blk > BLK_MIN && batch * ((d + blk - 1) / blk) < want) blk /= 2;
    return blk;
}

static void modulate_forward_run(float *y, const float *x, const float *shift, const float *scale, int64_t batch, int64_t tokens,
                      int64_t d, int64_t mod_stride)
{
    int64_t rows = batch * tokens;
    /* no restrict on y and x: they may be the same buffer (each element is read before it is written) */
#pragma omp parallel for schedule(static) if (rows * d >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict sh = shift + (r / tokens) * mod_stride;
        const float *restrict sc = scale + (r / tokens) * mod_stride;
        const float *xr = x + r * d;
        float *yr = y + r * d;
        for (int64_t j = 0; j < d; j++) yr[j] = xr[j] * (1.0f + sc[j]) + sh[j];
    }
}

static void modulate_backward_run(float *dx, float *dshift, float *dscale, const float *dy, const float *x, const float *scale,
                       int64_t batch, int64_t tokens, int64_t d, int64_t mod_stride)
{
    if (!dx && !dshift && !dscale) return;
    int64_t blk = col_block(batch, d), nblk = (d + blk - 1) / blk;
#pragma omp parallel for schedule(static) if (batch * tokens * d >= PAR_MIN)
    for (int64_t item = 0; item < batch * nblk; item++) {
        int64_t b = item / nblk, j0 = (item % nblk) * blk, m = d - j0 < blk ? d - j0 : blk;
        /* pointers are formed only for the gradients asked for: an unneeded input may be NULL */
        const float *restrict sc = dx ? scale + b * mod_stride + j0 : NULL;
        float as[BLK_MAX] = {0}, ac[BLK_MAX] = {0};
        for (int64_t t = 0; t < tokens; t++) {
            int64_t off = (b * tokens + t) * d + j0;
            if (dshift) {
                const float *restrict g = dy + off;
                for (int64_t j = 0; j < m; j++) as[j] += g[j];
            }
            if (dscale) {
                const float *restrict g = dy + off, *restrict xr = x + off;
                for (int64_t j = 0; j < m; j++) ac[j] += g[j] * xr[j];
            }
            if (dx == dy) { /* in place, after the sums have read dy */
                float *restrict dxr = dx + off;
                for (int64_t j = 0; j < m; j++) dxr[j] *= 1.0f + sc[j];
            } else if (dx) {
                float *restrict dxr = dx + off;
                const float *restrict g = dy + off;
                for (int64_t j = 0; j < m; j++) dxr[j] += g[j] * (1.0f + sc[j]);
            }
        }
        if (dshift) {
            float *restrict o = dshift + b * mod_stride + j0;
            for (int64_t j = 0; j < m; j++) o[j] += as[j];
        }
        if (dscale) {
            float *restrict o = dscale + b * mod_stride + j0;
            for (int64_t j = 0; j < m; j++) o[j] += ac[j];
        }
    }
}

static void gated_residual_forward_run(float *y, const float *x, const float *gate, const float *h, int64_t batch,
                            int64_t tokens, int64_t d, int64_t gate_stride)
{
    int64_t rows = batch * tokens;
    /* y may be x: no restrict on either */
#pragma omp parallel for schedule(static) if (rows * d >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict gr = gate + (r / tokens) * gate_stride;
        const float *restrict hr = h + r * d;
        const float *xr = x + r * d;
        float *yr = y + r * d;
        for (int64_t j = 0; j < d; j++) yr[j] = xr[j] + gr[j] * hr[j];
    }
}

static void gated_residual_backward_run(float *dx, float *dgate, float *dh, const float *dy, const float *gate, const float *h,
                             int64_t batch, int64_t tokens, int64_t d, int64_t gate_stride)
{
    if (dx == dy) dx = NULL; /* in-place residual stream: dy already is dx's gradient */
    if (!dx && !dgate && !dh) return;
    int64_t blk = col_block(batch, d), nblk = (d + blk - 1) / blk;
#pragma omp parallel for schedule(static) if (batch * tokens * d >= PAR_MIN)
    for (int64_t item = 0; item < batch * nblk; item++) {
        int64_t b = item / nblk, j0 = (item % nblk) * blk, m = d - j0 < blk ? d - j0 : blk;
        const float *restrict gr = dh ? gate + b * gate_stride + j0 : NULL;
        float ag[BLK_MAX] = {0};
        for (int64_t t = 0; t < tokens; t++) {
            int64_t off = (b * tokens + t) * d + j0;
            const float *restrict g = dy + off;
            if (dx) {
                float *restrict dxr = dx + off;
                for (int64_t j = 0; j < m; j++) dxr[j] += g[j];
            }
            if (dh) {
                float *restrict dhr = dh + off;
                for (int64_t j = 0; j < m; j++) dhr[j] += g[j] * gr[j];
            }
            if (dgate) {
                const float *restrict hr = h + off;
                for (int64_t j = 0; j < m; j++) ag[j] += g[j] * hr[j];
            }
        }
        if (dgate) {
            float *restrict o = dgate + b * gate_stride + j0;
            for (int64_t j = 0; j < m; j++) o[j] += ag[j];
        }
    }
}

void modulate_forward(float *y, const float *x, const float *shift, const float *scale, int64_t batch, int64_t tokens, int64_t d, int64_t mod_stride)
{
    OP_TIMED(y, modulate_forward_run(y, x, shift, scale, batch, tokens, d, mod_stride),
             OP_POINTWISE, 0, 8.0 * batch * tokens * d);
}

void modulate_backward(float *dx, float *dshift, float *dscale, const float *dy, const float *x, const float *scale, int64_t batch, int64_t tokens, int64_t d, int64_t mod_stride)
{
    OP_TIMED(dy, modulate_backward_run(dx, dshift, dscale, dy, x, scale, batch, tokens, d, mod_stride),
             OP_POINTWISE, 0, 16.0 * batch * tokens * d);
}

void gated_residual_forward(float *y, const float *x, const float *gate, const float *h, int64_t batch, int64_t tokens, int64_t d, int64_t gate_stride)
{
    OP_TIMED(y, gated_residual_forward_run(y, x, gate, h, batch, tokens, d, gate_stride),
             OP_POINTWISE, 0, 12.0 * batch * tokens * d);
}

void gated_residual_backward(float *dx, float *dgate, float *dh, const float *dy, const float *gate, const float *h, int64_t batch, int64_t tokens, int64_t d, int64_t gate_stride)
{
    OP_TIMED(dy, gated_residual_backward_run(dx, dgate, dh, dy, gate, h, batch, tokens, d, gate_stride),
             OP_POINTWISE, 0, 20.0 * batch * tokens * d);
}
