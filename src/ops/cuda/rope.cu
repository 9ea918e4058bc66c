/* Rotary position embedding on interleaved pairs on the device (ops/cpu/rope.c's rope_forward and rope_backward):
 * in place on a strided view, one thread a pair, each pair read before its own thread writes it. */
#include "backend.h"

namespace {

constexpr int THREADS = 256;

/* Pair p of head k of row (b, t) at x + b batch_stride + t row_stride + k head_dim + 2p becomes
 * (x0 c - x1 s, x1 c + x0 s) with (c, s) = table[t][p], s negated for the inverse rotation (exact). Each product
 * rounded, then the sum, as rope.c (and torch in fp32) has it: __fmul_rn and __fadd_rn keep nvcc from fusing them
 * into FMAs. */
__global__ void rope_kernel(float *x, int64_t tokens, int64_t heads, int64_t pairs, int64_t row_stride,
                            int64_t batch_stride, const float *table, bool inverse, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t p = i % pairs, k = i / pairs % heads, r = i / (pairs * heads), b = r / tokens, t = r % tokens;
        float *v = x + b * batch_stride + t * row_stride + k * pairs * 2 + 2 * p;
        const float *cs = table + (t * pairs + p) * 2;
        const float c = cs[0], s = inverse ? -cs[1] : cs[1], x0 = v[0], x1 = v[1];
        v[0] = __fadd_rn(__fmul_rn(x0, c), __fmul_rn(-x1, s));
        v[1] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    }
}

/* The rotation, or its inverse; an odd or too small head_dim goes to the CPU code, which refuses it (st_panic). */
void rope(float *x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
          int64_t batch_stride, const float *table, bool inverse, const char *what)
{
    if (!cu_on_device(x, table) || head_dim < 2 || head_dim % 2 != 0)
        return (inverse ? cpu_rope_backward : cpu_rope_forward)(x, batch, tokens, heads, head_dim, row_stride,
                                                                batch_stride, table);
    const double t0 = cu_op_start();
    const int64_t pairs = head_dim / 2, n = batch * tokens * heads * pairs;
    if (batch > 0 && tokens > 0 && heads > 0)
        rope_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(x, tokens, heads, pairs, row_stride,
                                                                                batch_stride, table, inverse, n);
    cu_op_done(OP_POINTWISE, t0, 0, 8.0 * batch * tokens * heads * head_dim, what);
}

} // namespace

extern "C" void rope_forward(float *x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim,
                             int64_t row_stride, int64_t batch_stride, const float *table)
{
    rope(x, batch, tokens, heads, head_dim, row_stride, batch_stride, table, false, "rope_forward");
}

extern "C" void rope_backward(float *dx, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim,
                              int64_t row_stride, int64_t batch_stride, const float *table)
{
    rope(dx, batch, tokens, heads, head_dim, row_stride, batch_stride, table, true, "rope_backward");
}
