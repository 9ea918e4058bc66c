/* Mean squared error on the device (ops/cpu/loss.c's mse_forward and mse_backward).
 *
 * mse_forward takes the same sums as loss.c in the same order, so its value is the CPU's to the bit: each sample
 * (the whole tensor when there are no weights) in chunks of CHUNK values from its start, each chunk in LANES double
 * accumulators (value i of a chunk in lane i % LANES, in order), the lanes folded in order, the chunk sums added in
 * chunk order, then the samples' w_b s_b in sample order. __dadd_rn and __dmul_rn keep nvcc from fusing a product
 * into an FMA, which the CPU build (ISO C, no contraction) does not do. One block does it all: the loss runs once a
 * step, and the order of its final sums is sequential anyway. */
#include "backend.h"

namespace {

constexpr int64_t CHUNK = 4096; /* loss.c's CHUNK */
constexpr int LANES = 8;        /* loss.c's LANES */
constexpr int MSE_THREADS = 1024;
constexpr int SLOTS = MSE_THREADS / LANES; /* chunks the block sums at a time */
constexpr int THREADS = 256;

/* x_t = (1 - t) x0 + t e and target = e - x0 with sample i's t (one thread an element), timesteps = 1000 t; the
 * products rounded apart as loss.c's (__fmul_rn), so that the inputs of the step are the CPU's to the bit. */
__global__ void flow_interpolate_kernel(float *xt, float *target, float *timesteps, const float *x0, const float *noise,
                                        const float *t, int64_t batch, int64_t per)
{
    const int64_t n = batch * per;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        const float ti = t[j / per];
        xt[j] = __fadd_rn(__fmul_rn(1.0f - ti, x0[j]), __fmul_rn(ti, noise[j]));
        target[j] = noise[j] - x0[j];
        if (j % per == 0) timesteps[j / per] = 1000.0f * ti;
    }
}

/* The sum of w_b (pred - target)^2, copied back by mse_forward (one loss at a time: the trainer's single thread). */
__device__ double mse_total;

/* samples of `per` values; weight NULL: 1 */
__global__ void mse_forward_kernel(const float *pred, const float *target, const float *weight, int64_t samples,
                                   int64_t per)
{
    __shared__ double lane_sum[MSE_THREADS], chunk_sum[SLOTS];
    const int lane = threadIdx.x % LANES, slot = threadIdx.x / LANES;
    const int64_t chunks = (per + CHUNK - 1) / CHUNK;
    double total = 0.0; /* thread 0's */
    for (int64_t sb = 0; sb < samples; sb++) {
        const float *ps = pred + sb * per, *ts = target + sb * per;
        double sample = 0.0; /* thread 0's: the chunk sums in chunk order */
        for (int64_t c0 = 0; c0 < chunks; c0 += SLOTS) {
            const int64_t c = c0 + slot;
            double acc = 0.0;
            if (c < chunks) {
                const int64_t lo = c * CHUNK, len = per - lo < CHUNK ? per - lo : CHUNK;
                for (int64_t i = lane; i < len; i += LANES) {
                    const double e = (double)ps[lo + i] - (double)ts[lo + i];
                    acc = __dadd_rn(acc, __dmul_rn(e, e));
                }
            }
            lane_sum[threadIdx.x] = acc;
            __syncthreads();
            if (lane == 0) { /* loss.c's chunk_sq_sum: s = 0, then the lanes in order */
                double s = 0.0;
                for (int l = 0; l < LANES; l++) s = __dadd_rn(s, lane_sum[slot * LANES + l]);
                chunk_sum[slot] = s;
            }
            __syncthreads();
            if (threadIdx.x == 0)
                for (int k = 0; k < SLOTS && c0 + k < chunks; k++) sample = __dadd_rn(sample, chunk_sum[k]);
            __syncthreads(); /* lane_sum and chunk_sum are rewritten next round */
        }
        /* unweighted: one sample, and 0 + 1 s is s exactly, loss.c's sum itself */
        if (threadIdx.x == 0) total = __dadd_rn(total, __dmul_rn(weight ? (double)weight[sb] : 1.0, sample));
    }
    if (threadIdx.x == 0) mse_total = total;
}

/* dpred += s_b (pred - target), s_b = 2 dloss w_b / n rounded to float as loss.c makes it; the product rounded
 * before the sum, as the CPU has it */
__global__ void mse_backward_kernel(float *dpred, const float *pred, const float *target, const float *weight,
                                   int64_t per, int64_t n, float dloss)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float s = (float)(2.0 * (double)dloss * (weight ? (double)weight[i / per] : 1.0) / (double)n);
        dpred[i] = __fadd_rn(dpred[i], __fmul_rn(s, pred[i] - target[i]));
    }
}

} // namespace

extern "C" float mse_forward(const float *pred, const float *target, const float *weight, int64_t batch, int64_t per)
{
    if (!cu_on_device(pred, target, weight)) return cpu_mse_forward(pred, target, weight, batch, per);
    const double t0 = cu_op_start();
    const int64_t n = batch * per;
    double total = 0.0;
    if (n > 0) {
        mse_forward_kernel<<<1, MSE_THREADS, 0, cu_compute_stream()>>>(pred, target, weight, weight ? batch : 1,
                                                                       weight ? per : n);
        cu_check(cudaMemcpyFromSymbolAsync(&total, mse_total, sizeof total, 0, cudaMemcpyDeviceToHost,
                                           cu_compute_stream()),
                 "mse_forward: the loss back");
    }
    cu_op_done(OP_POINTWISE, t0, 0, 8.0 * (double)(batch * per), "mse_forward"); /* waits for the copy too */
    return n > 0 ? (float)(total / (double)n) : 0.0f;
}

extern "C" void mse_backward(float *dpred, const float *pred, const float *target, const float *weight, int64_t batch,
                             int64_t per, float dloss)
{
    if (!cu_on_device(dpred, pred, target, weight)) {
        cpu_mse_backward(dpred, pred, target, weight, batch, per, dloss);
        return;
    }
    const double t0 = cu_op_start();
    const int64_t n = batch * per;
    if (dpred && n > 0)
        mse_backward_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(dpred, pred, target, weight,
                                                                                        per, n, dloss);
    cu_op_done(OP_POINTWISE, t0, 0, 16.0 * (double)(batch * per), "mse_backward");
}

extern "C" void flow_interpolate(float *xt, float *target, float *timesteps, const float *x0, const float *noise,
                                 const float *t, int64_t batch, int64_t per)
{
    if (!cu_on_device(xt, target, timesteps, x0, noise, t)) {
        cpu_flow_interpolate(xt, target, timesteps, x0, noise, t, batch, per);
        return;
    }
    const double t0 = cu_op_start();
    if (batch > 0 && per > 0)
        flow_interpolate_kernel<<<cu_blocks(batch * per, THREADS), THREADS, 0, cu_compute_stream()>>>(
            xt, target, timesteps, x0, noise, t, batch, per);
    cu_op_done(OP_POINTWISE, t0, 0, 20.0 * batch * per, "flow_interpolate");
}
