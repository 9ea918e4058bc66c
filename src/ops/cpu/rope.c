/* Rotary position embeddings with position ids, in place on a strided view (diffusers' FluxPosEmbed +
 * apply_rotary_emb with interleaved pairs). rope_table computes the (cos, sin) of every token's pairs once; the
 * rotation is pointwise over (batch, tokens) rows, split by rows: each pair is read before it is written, nothing
 * is reduced, so the result is the same for every thread count. */
#include <math.h>

#include "internal.h"

#define PAR_MIN ((int64_t)1 << 15)

static void rope_table_run(float *table, const float *ids, int64_t tokens, int n_axes, const int64_t *axes_dim,
                           double theta)
{
    if (n_axes < 1 || !(theta > 0))
        st_panic("rope_table: %d axes, theta %g (need at least 1 axis and theta > 0)", n_axes, theta);
    int64_t pairs = 0;
    for (int a = 0; a < n_axes; a++) {
        if (axes_dim[a] < 2 || axes_dim[a] % 2 != 0)
            st_panic("rope_table: axes_dim[%d] = %lld (need an even width >= 2)", a, (long long)axes_dim[a]);
        pairs += axes_dim[a] / 2;
    }
    if (tokens <= 0) return;
    /* diffusers' get_1d_rotary_pos_embed with freqs_dtype float64: freq = 1 / theta^(2j/dim) and the angle
     * pos * freq in double, cos and sin in double, each rounded once to float. pow, cos and sin dominate, so
     * the split is by tokens from a smaller size than the pointwise ops'. */
#pragma omp parallel for schedule(static) if (tokens * pairs >= ((int64_t)1 << 12))
    for (int64_t t = 0; t < tokens; t++) {
        float *e = table + t * pairs * 2;
        for (int a = 0; a < n_axes; a++) {
            const double pos = ids[t * n_axes + a], dim = (double)axes_dim[a];
            for (int64_t j = 0; j < axes_dim[a] / 2; j++, e += 2) {
                double ang = pos * (1.0 / pow(theta, (double)(2 * j) / dim));
                e[0] = (float)cos(ang);
                e[1] = (float)sin(ang);
            }
        }
    }
}

void rope_table_mrope(float *table, const float *ids, int64_t tokens, int64_t head_dim, const int64_t *sections,
                      double theta)
{
    const double t0 = prof_now();
    const int64_t pairs = head_dim / 2;
    if (head_dim < 2 || head_dim % 2 || !(theta > 0) || sections[0] < 0 || sections[1] < 0 || sections[2] < 0 ||
        3 * sections[1] > pairs + 1 || 3 * sections[2] > pairs) /* their last frequencies within the head */
        st_panic("rope_table_mrope: head_dim %lld, sections (%lld, %lld, %lld), theta %g", (long long)head_dim,
                 (long long)sections[0], (long long)sections[1], (long long)sections[2], theta);
    if (!op_dry(table))
#pragma omp parallel for schedule(static) if (tokens * pairs >= ((int64_t)1 << 12))
        for (int64_t t = 0; t < tokens; t++)
            for (int64_t p = 0; p < pairs; p++) { /* frequency p on axis 1 or 2 where its section interleaves it */
                const int axis = p % 3 == 1 && p < 3 * sections[1] ? 1 : p % 3 == 2 && p < 3 * sections[2] ? 2 : 0;
                const double ang = ids[t * 3 + axis] * (1.0 / pow(theta, (double)(2 * p) / (double)head_dim));
                table[(t * pairs + p) * 2] = (float)cos(ang);
                table[(t * pairs + p) * 2 + 1] = (float)sin(ang);
            }
    prof_add(OP_POINTWISE, t0, 0, 30.0 * tokens * pairs);
}

void rope_table(float *table, const float *ids, int64_t tokens, int n_axes, const int64_t *axes_dim, double theta)
{
    const double t0 = prof_now();
    int64_t pairs = 0;
    for (int a = 0; a < n_axes; a++) pairs += axes_dim[a] / 2;
    if (!op_dry(table)) rope_table_run(table, ids, tokens, n_axes, axes_dim, theta);
    prof_add(OP_POINTWISE, t0, 0, 4.0 * tokens * (n_axes + 2 * pairs));
}

/* Pair p = (x[2p], x[2p+1]) of each of the row's heads with (c, s) = cs[p]: y = (x0 c - x1 s, x1 c + x0 s),
 * bit for bit torch's x * cos + rotated * sin in fp32: each product rounded, then the sum (a + (-b) is a - b
 * exactly). Both lanes are sums on purpose: gcc 12's vectorizer fuses an alternating subtract and add of
 * products into vfmaddsub even under ISO C's -ffp-contract=off, one rounding fewer than torch. sign -1 negates
 * s, which is exact: the inverse rotation, also the gradient torch's autograd forms. */
static void rotate_row(float *xr, const float *cs, int64_t heads, int64_t pairs, float sign)
{
    for (int64_t k = 0; k < heads; k++) {
        float *v = xr + k * pairs * 2;
        for (int64_t p = 0; p < pairs; p++) {
            const float c = cs[2 * p], s = sign * cs[2 * p + 1], x0 = v[2 * p], x1 = v[2 * p + 1];
            const float x0c = x0 * c, nx1s = -x1 * s, x1c = x1 * c, x0s = x0 * s;
            v[2 * p] = x0c + nx1s;
            v[2 * p + 1] = x1c + x0s;
        }
    }
}

/* The same rotation on rotate-half pairs: pair p of a head is (x[p], x[p + pairs]), diffusers' apply_rotary_emb with
 * use_real_unbind_dim=-2 (x cos + cat(-x2, x1) sin, the table's angles repeated for both halves: Cosmos's). Head k
 * reads the table from cs + k * head_step: 0 when the heads share it, a head's pairs when each has its own (LTX-2). */
static void rotate_row_half(float *xr, const float *cs, int64_t heads, int64_t pairs, float sign, int64_t head_step)
{
    for (int64_t k = 0; k < heads; k++) {
        float *v = xr + k * pairs * 2, *w = v + pairs;
        const float *e = cs + k * head_step;
        for (int64_t p = 0; p < pairs; p++) {
            const float c = e[2 * p], s = sign * e[2 * p + 1], x0 = v[p], x1 = w[p];
            const float x0c = x0 * c, nx1s = -x1 * s, x1c = x1 * c, x0s = x0 * s;
            v[p] = x0c + nx1s;
            w[p] = x1c + x0s;
        }
    }
}

/* ERNIE-Image's: rotate-half pairs (x[p], x[p + pairs]) whose two elements turn by the table's angles of their own
 * index halved (its frequencies repeated pairwise over the head, then applied by halves): y[p] = x[p] c_a - x[p+h] s_a,
 * y[p+h] = x[p+h] c_b + x[p] s_b, a = p / 2, b = (p + h) / 2. Not a rotation (a != b), so the gradient is the
 * transpose: dx[p] = dy[p] c_a + dy[p+h] s_b, dx[p+h] = dy[p+h] c_b - dy[p] s_a. Each product rounded, then the sum. */
static void rotate_row_repeated(float *xr, const float *cs, int64_t heads, int64_t pairs, bool transpose)
{
    for (int64_t k = 0; k < heads; k++) {
        float *v = xr + k * pairs * 2, *w = v + pairs;
        for (int64_t p = 0; p < pairs; p++) {
            const float *a = cs + 2 * (p / 2), *b = cs + 2 * ((p + pairs) / 2), x0 = v[p], x1 = w[p];
            const float x0c = x0 * a[0], x1c = x1 * b[0];
            const float m1 = transpose ? x1 * b[1] : -x1 * a[1], m0 = transpose ? -x0 * a[1] : x0 * b[1];
            v[p] = x0c + m1;
            w[p] = x1c + m0;
        }
    }
}

/* the pairs: rope_forward's, rope_half_forward's, rope_split_forward's, rope_repeated_forward's */
typedef enum pairing { INTERLEAVED, HALF, SPLIT, REPEATED } pairing;

static void rope_run(float *x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
                     int64_t batch_stride, const float *table, bool inverse, pairing how)
{
    if (head_dim < 2 || head_dim % 2 != 0)
        st_panic("rope: head_dim %lld (need an even size >= 2)", (long long)head_dim);
    const int64_t rows = batch * tokens, pairs = head_dim / 2;
    if (rows <= 0 || heads <= 0) return;
#pragma omp parallel for schedule(static) if (rows * heads * head_dim >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / tokens, t = r % tokens;
        float *xr = x + b * batch_stride + t * row_stride;
        const float sign = inverse ? -1.0f : 1.0f;
        if (how == INTERLEAVED) rotate_row(xr, table + t * pairs * 2, heads, pairs, sign);
        else if (how == HALF) rotate_row_half(xr, table + t * pairs * 2, heads, pairs, sign, 0);
        else if (how == REPEATED) rotate_row_repeated(xr, table + t * pairs * 2, heads, pairs, inverse);
        else rotate_row_half(xr, table + t * heads * pairs * 2, heads, pairs, sign, pairs * 2);
    }
}

/* rope_run with the profiler's count: 8 flops a pair element */
static void rope_timed(float *x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
                       int64_t batch_stride, const float *table, bool inverse, pairing how)
{
    OP_TIMED(x, rope_run(x, batch, tokens, heads, head_dim, row_stride, batch_stride, table, inverse, how),
             OP_POINTWISE, 0, 8.0 * batch * tokens * heads * head_dim);
}

/* The public pair of each pairing (ops.h declares them): forward rotates, backward rotates back. */
#define ROPE_PAIR(forward, backward, how)                                                                             \
    void forward(float *x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,      \
                 int64_t batch_stride, const float *table)                                                            \
    {                                                                                                                 \
        rope_timed(x, batch, tokens, heads, head_dim, row_stride, batch_stride, table, false, how);                   \
    }                                                                                                                 \
    void backward(float *dx, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,    \
                  int64_t batch_stride, const float *table)                                                           \
    {                                                                                                                 \
        rope_timed(dx, batch, tokens, heads, head_dim, row_stride, batch_stride, table, true, how);                   \
    }

ROPE_PAIR(rope_forward, rope_backward, INTERLEAVED)
ROPE_PAIR(rope_half_forward, rope_half_backward, HALF)
ROPE_PAIR(rope_split_forward, rope_split_backward, SPLIT)
ROPE_PAIR(rope_repeated_forward, rope_repeated_backward, REPEATED)
