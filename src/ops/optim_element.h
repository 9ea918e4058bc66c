/* One element of each optimizer's update (ops.h: adamw_update, lion_update), the one formula both backends run: the
 * CPU's loops (ops/cpu/optim_update.c) and the CUDA kernels (ops/cuda/optim.cu). nvcc may contract a multiply and
 * an add into one rounding where gcc in C11 mode does not, so the text is one and the bits may still differ. */
#ifndef SEGTRAIN_OPS_OPTIM_ELEMENT_H
#define SEGTRAIN_OPS_OPTIM_ELEMENT_H

#include <math.h>

#include "segtrain/ops.h"

#ifdef __CUDACC__
#define OPTIM_ELEMENT __host__ __device__ static inline
#else
#define OPTIM_ELEMENT static inline
#endif

/* torch.optim.AdamW: w *= decay; m, v updated; w += -step * (m / (sqrt(v) / sqrt(bc2) + eps)) */
OPTIM_ELEMENT void adamw_element(float *w, float *m, float *v, float g, optim_coefs k)
{
    const float mi = k.b1 * *m + k.omb1 * g;
    const float vi = k.b2 * *v + k.omb2 * (g * g);
    *m = mi;
    *v = vi;
    *w = *w * k.decay - k.step * (mi / (sqrtf(vi) * k.inv_bc2_sqrt + k.eps));
}

/* Lion: w *= decay; w += -lr * sign(b1 m + (1 - b1) g); then m = b2 m + (1 - b2) g (step is lr) */
OPTIM_ELEMENT void lion_element(float *w, float *m, float g, optim_coefs k)
{
    const float mi = *m;
    const float c = k.b1 * mi + k.omb1 * g;
    const float sign = (float)(c > 0.0f) - (float)(c < 0.0f);
    *w = *w * k.decay - k.step * sign;
    *m = k.b2 * mi + k.omb2 * g;
}

#endif
