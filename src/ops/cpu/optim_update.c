/* The optimizers' elementwise updates (ops.h), one call a parameter: static halves of a large one on each thread,
 * the same arithmetic for every element however it is split. */
#include "internal.h"

#define UPDATE_PAR_MIN 16384 /* below, a parallel region costs more than it saves */

void adamw_update(float *restrict w, const float *restrict g, float *restrict m, float *restrict v, int64_t n,
                  const optim_coefs *k)
{
    if (op_dry(w)) return;
    const float decay = k->decay, b1 = k->b1, omb1 = k->omb1, b2 = k->b2, omb2 = k->omb2;
    const float step = k->step, ibc2 = k->inv_bc2_sqrt, eps = k->eps;
#pragma omp parallel for simd schedule(static) if (n >= UPDATE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i];
        const float mi = b1 * m[i] + omb1 * gi;
        const float vi = b2 * v[i] + omb2 * (gi * gi);
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * decay - step * (mi / (sqrtf(vi) * ibc2 + eps));
    }
}

void lion_update(float *restrict w, const float *restrict g, float *restrict m, int64_t n, const optim_coefs *k)
{
    if (op_dry(w)) return;
    const float decay = k->decay, b1 = k->b1, omb1 = k->omb1, b2 = k->b2, omb2 = k->omb2, lr = k->step;
#pragma omp parallel for simd schedule(static) if (n >= UPDATE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i], mi = m[i];
        const float c = b1 * mi + omb1 * gi;
        const float sign = (float)(c > 0.0f) - (float)(c < 0.0f);
        w[i] = w[i] * decay - lr * sign;
        m[i] = b2 * mi + omb2 * gi;
    }
}
