/* The optimizers' elementwise updates (ops.h), one call a parameter: static halves of a large one on each thread,
 * the same arithmetic for every element however it is split; and the gradient norm's sum and clipping. */
#include "internal.h"
#include "ops/optim_element.h"

#define UPDATE_PAR_MIN 16384 /* below, a parallel region costs more than it saves */

void adamw_update(float *restrict w, const float *restrict g, float *restrict m, float *restrict v, int64_t n,
                  const optim_coefs *k)
{
    if (op_dry(w)) return;
    const optim_coefs c = *k;
#pragma omp parallel for simd schedule(static) if (n >= UPDATE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) adamw_element(&w[i], &m[i], &v[i], g[i], c);
}

void lion_update(float *restrict w, const float *restrict g, float *restrict m, int64_t n, const optim_coefs *k)
{
    if (op_dry(w)) return;
    const optim_coefs c = *k;
#pragma omp parallel for simd schedule(static) if (n >= UPDATE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) lion_element(&w[i], &m[i], g[i], c);
}

/* simd reduction: the lane order is fixed by the compiled code, never by the thread count */
static double chunk_squares(const float *restrict x, int64_t n)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

#define SQUARES_CHUNK 8192 /* values a partial sum covers */
#define SQUARES_GROUP 256  /* partial sums a parallel pass makes, then adds in order to the running sum */

/* The chunks' partial sums added in chunk order, one group of chunks at a time: the same additions, in the same
 * order, as summing every partial at the end, without a buffer for all of them. */
double sum_squares(const float *x, int64_t n)
{
    if (op_dry(x)) return 0;
    const int64_t chunks = (n + SQUARES_CHUNK - 1) / SQUARES_CHUNK;
    double sum = 0, part[SQUARES_GROUP];
    for (int64_t c0 = 0; c0 < chunks; c0 += SQUARES_GROUP) {
        const int64_t m = chunks - c0 < SQUARES_GROUP ? chunks - c0 : SQUARES_GROUP;
#pragma omp parallel for schedule(static) if (n >= UPDATE_PAR_MIN)
        for (int64_t c = 0; c < m; c++) {
            const int64_t lo = (c0 + c) * SQUARES_CHUNK;
            part[c] = chunk_squares(x + lo, n - lo < SQUARES_CHUNK ? n - lo : SQUARES_CHUNK);
        }
        for (int64_t c = 0; c < m; c++) sum += part[c];
    }
    return sum;
}

void clamp_abs(float *x, int64_t n, float hi)
{
    if (op_dry(x)) return;
#pragma omp parallel for simd schedule(static) if (n >= UPDATE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] = fminf(fmaxf(x[i], -hi), hi);
}
