/* The optimizers' elementwise updates on the device: one thread an element, the CPU's formulas (ops/optim_element.h),
 * the coefficients passed by value from the caller's host struct. And the gradient norm's sum of squares, in an
 * order fixed by n alone: SQUARES_BLOCKS blocks each own a contiguous range, their threads take strided elements and
 * meet in a fixed tree, and one thread adds the blocks' sums in order. */
#include "backend.h"
#include "ops/optim_element.h"

namespace {

constexpr int THREADS = 256;
constexpr int SQUARES_BLOCKS = 264; /* two a multiprocessor of an H100/H200; any fixed number gives fixed bits */

/* the blocks' partial sums and the total: a few KiB of the module's own, read back once a call */
__device__ double squares_part[SQUARES_BLOCKS];
__device__ double squares_total;

__global__ void __launch_bounds__(THREADS) squares_kernel(const float *x, int64_t n)
{
    __shared__ double red[THREADS];
    const int64_t lo = n * blockIdx.x / SQUARES_BLOCKS, hi = n * (blockIdx.x + 1) / SQUARES_BLOCKS;
    double s = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) s += (double)x[i] * (double)x[i];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int o = THREADS / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) squares_part[blockIdx.x] = red[0];
}

__global__ void squares_total_kernel(void)
{
    double s = 0;
    for (int b = 0; b < SQUARES_BLOCKS; b++) s += squares_part[b];
    squares_total = s;
}

__global__ void clamp_kernel(float *x, int64_t n, float hi)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = fminf(fmaxf(x[i], -hi), hi);
}

__global__ void adamw_kernel(float *w, const float *g, float *m, float *v, int64_t n, optim_coefs k)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        adamw_element(&w[i], &m[i], &v[i], g[i], k);
}

__global__ void lion_kernel(float *w, const float *g, float *m, int64_t n, optim_coefs k)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        lion_element(&w[i], &m[i], g[i], k);
}

} // namespace

extern "C" void adamw_update(float *w, const float *g, float *m, float *v, int64_t n, const optim_coefs *k)
{
    if (!cu_on_device(w, g, m, v)) return cpu_adamw_update(w, g, m, v, n, k);
    if (n > 0)
        adamw_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(w, g, m, v, n, *k);
    cu_op_done_unprofiled("adamw_update");
}

extern "C" void lion_update(float *w, const float *g, float *m, int64_t n, const optim_coefs *k)
{
    if (!cu_on_device(w, g, m)) return cpu_lion_update(w, g, m, n, k);
    if (n > 0)
        lion_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(w, g, m, n, *k);
    cu_op_done_unprofiled("lion_update");
}

extern "C" double sum_squares(const float *x, int64_t n)
{
    if (!cu_on_device(x)) return cpu_sum_squares(x, n);
    if (n <= 0) return 0;
    squares_kernel<<<SQUARES_BLOCKS, THREADS, 0, cu_compute_stream()>>>(x, n);
    squares_total_kernel<<<1, 1, 0, cu_compute_stream()>>>();
    double total = 0;
    cu_check(cudaMemcpyFromSymbolAsync(&total, squares_total, sizeof total, 0, cudaMemcpyDeviceToHost,
                                       cu_compute_stream()),
             "sum_squares");
    cu_op_done_unprofiled("sum_squares");
    return total;
}

extern "C" void clamp_abs(float *x, int64_t n, float hi)
{
    if (!cu_on_device(x)) return cpu_clamp_abs(x, n, hi);
    if (n > 0) clamp_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(x, n, hi);
    cu_op_done_unprofiled("clamp_abs");
}
