/* The optimizers' elementwise updates on the device (ops/cpu/optim_update.c): one thread an element, the formulas
 * of the CPU code in its order, the coefficients passed by value from the caller's host struct. */
#include "backend.h"

namespace {

constexpr int THREADS = 256;

__global__ void adamw_kernel(float *w, const float *g, float *m, float *v, int64_t n, float decay, float b1,
                             float omb1, float b2, float omb2, float step, float ibc2, float eps)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float gi = g[i];
        const float mi = b1 * m[i] + omb1 * gi;
        const float vi = b2 * v[i] + omb2 * (gi * gi);
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * decay - step * (mi / (sqrtf(vi) * ibc2 + eps));
    }
}

__global__ void lion_kernel(float *w, const float *g, float *m, int64_t n, float decay, float b1, float omb1, float b2,
                            float omb2, float lr)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float gi = g[i], mi = m[i];
        const float c = b1 * mi + omb1 * gi;
        const float sign = (float)(c > 0.0f) - (float)(c < 0.0f);
        w[i] = w[i] * decay - lr * sign;
        m[i] = b2 * mi + omb2 * gi;
    }
}

} // namespace

extern "C" void adamw_update(float *w, const float *g, float *m, float *v, int64_t n, const optim_coefs *k)
{
    if (!cu_on_device(w, g, m, v)) {
        cpu_adamw_update(w, g, m, v, n, k);
        return;
    }
    if (n > 0)
        adamw_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(
            w, g, m, v, n, k->decay, k->b1, k->omb1, k->b2, k->omb2, k->step, k->inv_bc2_sqrt, k->eps);
    cu_op_done_unprofiled("adamw_update");
}

extern "C" void lion_update(float *w, const float *g, float *m, int64_t n, const optim_coefs *k)
{
    if (!cu_on_device(w, g, m)) {
        cpu_lion_update(w, g, m, n, k);
        return;
    }
    if (n > 0)
        lion_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(w, g, m, n, k->decay, k->b1, k->omb1,
                                                                                k->b2, k->omb2, k->step);
    cu_op_done_unprofiled("lion_update");
}
