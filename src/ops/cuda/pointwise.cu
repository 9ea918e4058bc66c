/* Pointwise ops on the device: GELU (tanh) and SiLU (ops/cpu/activation.c), adaLN modulation and the gated residual
 * (ops/cpu/modulate.c), and tensor.c's add_to, scale_by and zero_floats.
 *
 * Elementwise kernels are grid-stride loops: each element is read and written by one thread, so in-place calls
 * (y == x, dx == dy) are safe and nothing depends on the launch shape. The reductions over tokens (dshift, dscale,
 * dgate) give each (batch item, column) to one thread column of a block: SUM_LANES lanes take the tokens in a
 * stride, each in order, and are folded in order (fold_lanes). No atomics. */
#include "backend.h"

namespace {

constexpr int THREADS = 256;

#define FOR_EACH(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* sqrt(2/pi), as activation.c has it */
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

/* activation.c's exp_f clamps its argument to [-87, 88] so that 1 / (1 + e^x) never meets inf: without the clamp,
 * GELU's gradient below x ~ -10 would take inf * 0 = NaN. The same clamp here, over the device's accurate expf. A
 * NaN argument becomes -87, as exp_f makes it finite too; every caller multiplies by x, so the NaN still shows. */
__device__ inline float exp_clamped(float x) { return expf(fminf(fmaxf(x, -87.0f), 88.0f)); }

/* GELU's derivative at v, activation.c's gelu_grad */
__device__ inline float gelu_grad(float v)
{
    const float u = GELU_K * (v + GELU_C * v * v * v);
    const float e = exp_clamped(-2.0f * u);
    const float s = 1.0f / (1.0f + e); /* 0.5 (1 + tanh u) */
    const float s1 = e * s;            /* 1 - s without cancellation */
    return s + 2.0f * v * (s * s1) * (GELU_K * (1.0f + 3.0f * GELU_C * v * v));
}

__global__ void gelu_forward_kernel(float *y, const float *x, int64_t n)
{
    FOR_EACH(i, n)
    {
        const float v = x[i];
        const float u = GELU_K * (v + GELU_C * v * v * v);
        y[i] = v / (1.0f + exp_clamped(-2.0f * u)); /* x (0.5 (1 + tanh u)) as a sigmoid, as the CPU takes it */
    }
}

/* in place: dx is dy, which becomes dy * gelu'(x); else dx += dy * gelu'(x) */
__global__ void gelu_backward_kernel(float *dx, const float *dy, const float *x, int64_t n, bool in_place)
{
    FOR_EACH(i, n)
    {
        const float g = dy[i] * gelu_grad(x[i]);
        dx[i] = in_place ? g : dx[i] + g;
    }
}

__global__ void silu_forward_kernel(float *y, const float *x, int64_t n)
{
    FOR_EACH(i, n)
    {
        const float v = x[i];
        y[i] = v / (1.0f + exp_clamped(-v));
    }
}

__global__ void silu_backward_kernel(float *dx, const float *dy, const float *x, int64_t n)
{
    FOR_EACH(i, n)
    {
        const float v = x[i];
        const float e = exp_clamped(-v);
        const float s = 1.0f / (1.0f + e);
        dx[i] += dy[i] * (s * (1.0f + v * (e * s))); /* s (1 + x (1 - s)) */
    }
}

/* y = x (1 + scale) + shift over (batch, tokens, d); y may be x */
__global__ void modulate_forward_kernel(float *y, const float *x, const float *shift, const float *scale,
                                        int64_t tokens, int64_t d, int64_t mod_stride, int64_t n)
{
    FOR_EACH(i, n)
    {
        const int64_t r = i / d, j = i % d, m = (r / tokens) * mod_stride + j;
        y[i] = x[i] * (1.0f + scale[m]) + shift[m];
    }
}

/* Block (SUM_COLS, SUM_LANES) over columns blockIdx.x and batch items blockIdx.y (strided): dshift += sum_t dy,
 * dscale += sum_t dy x, and dx += dy (1 + scale), or with dx == dy, dy becomes dy (1 + scale): the thread that
 * owns an element reads dy before it writes it. Pointers of gradients not asked for (and the inputs only they
 * read) may be NULL. */
__global__ void modulate_backward_kernel(float *dx, float *dshift, float *dscale, const float *dy, const float *x,
                                         const float *scale, int64_t batch, int64_t tokens, int64_t d,
                                         int64_t mod_stride)
{
    const int64_t j = (int64_t)blockIdx.x * SUM_COLS + threadIdx.x;
    for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        float a[2] = {0.0f, 0.0f}; /* dshift's and dscale's */
        if (j < d) {
            const float s1 = dx ? 1.0f + scale[b * mod_stride + j] : 0.0f;
            for (int64_t t = threadIdx.y; t < tokens; t += SUM_LANES) {
                const int64_t off = (b * tokens + t) * d + j;
                const float g = dy[off];
                a[0] += g;
                if (dscale) a[1] += g * x[off];
                if (dx) dx[off] = dx == dy ? g * s1 : dx[off] + g * s1;
            }
        }
        fold_lanes(a);
        if (threadIdx.y == 0 && j < d) {
            if (dshift) dshift[b * mod_stride + j] += a[0];
            if (dscale) dscale[b * mod_stride + j] += a[1];
        }
    }
}

/* y = x + gate h over (batch, tokens, d); y may be x */
__global__ void gated_residual_forward_kernel(float *y, const float *x, const float *gate, const float *h,
                                              int64_t tokens, int64_t d, int64_t gate_stride, int64_t n)
{
    FOR_EACH(i, n)
    {
        const int64_t r = i / d, j = i % d;
        y[i] = x[i] + gate[(r / tokens) * gate_stride + j] * h[i];
    }
}

/* As modulate_backward_kernel: dgate += sum_t dy h, dx += dy (dx NULL when it is dy), dh += dy gate. */
__global__ void gated_residual_backward_kernel(float *dx, float *dgate, float *dh, const float *dy, const float *gate,
                                               const float *h, int64_t batch, int64_t tokens, int64_t d,
                                               int64_t gate_stride)
{
    const int64_t j = (int64_t)blockIdx.x * SUM_COLS + threadIdx.x;
    for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        float ag[1] = {0.0f};
        if (j < d) {
            const float gt = dh ? gate[b * gate_stride + j] : 0.0f;
            for (int64_t t = threadIdx.y; t < tokens; t += SUM_LANES) {
                const int64_t off = (b * tokens + t) * d + j;
                const float g = dy[off];
                if (dx) dx[off] += g;
                if (dh) dh[off] += g * gt;
                if (dgate) ag[0] += g * h[off];
            }
        }
        fold_lanes(ag);
        if (threadIdx.y == 0 && j < d && dgate) dgate[b * gate_stride + j] += ag[0];
    }
}

__global__ void add_to_kernel(float *y, const float *x, int64_t n)
{
    FOR_EACH(i, n) y[i] += x[i];
}

/* y (rows, n) += row on every row */
__global__ void add_row_kernel(float *y, const float *row, int64_t rows, int64_t n)
{
    FOR_EACH(i, rows * n) y[i] += row[i % n];
}

__global__ void scale_by_kernel(float *x, int64_t n, float s)
{
    FOR_EACH(i, n) x[i] *= s;
}

/* An op's device path: the kernel on the compute stream, unless `run` is false, then cu_op_done's record */
template <typename... P, typename... A>
void launch(const char *what, double bytes, bool run, dim3 grid, dim3 block, void (*kernel)(P...), A... args)
{
    const double t0 = cu_op_start();
    if (run) kernel<<<grid, block, 0, cu_compute_stream()>>>(args...);
    cu_op_done(OP_POINTWISE, t0, 0, bytes, what);
}

/* an elementwise kernel over n items, a thread each */
template <typename... P, typename... A>
void elementwise(const char *what, double bytes, int64_t n, void (*kernel)(P...), A... args)
{
    launch(what, bytes, n > 0, cu_blocks(n, THREADS), THREADS, kernel, args...);
}

/* a token-sum kernel: a block (SUM_COLS, SUM_LANES) a column group, over the batch items */
template <typename... P, typename... A>
void token_sums(const char *what, double bytes, bool run, int64_t batch, int64_t tokens, int64_t d,
                void (*kernel)(P...), A... args)
{
    const dim3 grid((unsigned)((d + SUM_COLS - 1) / SUM_COLS), (unsigned)(batch < 65535 ? batch : 65535));
    launch(what, bytes, run && batch > 0 && tokens > 0 && d > 0, grid, dim3(SUM_COLS, SUM_LANES), kernel, args...);
}

} // namespace

extern "C" void gelu_forward(float *y, const float *x, int64_t n)
{
    if (!cu_on_device(y, x)) return cpu_gelu_forward(y, x, n);
    elementwise("gelu_forward", 8.0 * n, n, gelu_forward_kernel, y, x, n);
}

extern "C" void gelu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    if (!cu_on_device(dx, dy, x)) return cpu_gelu_backward(dx, dy, x, n);
    launch("gelu_backward", 12.0 * n, dx && n > 0, cu_blocks(n, THREADS), THREADS, gelu_backward_kernel, dx, dy, x, n,
           dx == dy);
}

extern "C" void silu_forward(float *y, const float *x, int64_t n)
{
    if (!cu_on_device(y, x)) return cpu_silu_forward(y, x, n);
    elementwise("silu_forward", 8.0 * n, n, silu_forward_kernel, y, x, n);
}

extern "C" void silu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    if (!cu_on_device(dx, dy, x)) return cpu_silu_backward(dx, dy, x, n);
    launch("silu_backward", 12.0 * n, dx && n > 0, cu_blocks(n, THREADS), THREADS, silu_backward_kernel, dx, dy, x, n);
}

extern "C" void modulate_forward(float *y, const float *x, const float *shift, const float *scale, int64_t batch,
                                 int64_t tokens, int64_t d, int64_t mod_stride)
{
    if (!cu_on_device(y, x, shift, scale))
        return cpu_modulate_forward(y, x, shift, scale, batch, tokens, d, mod_stride);
    const int64_t n = batch * tokens * d;
    elementwise("modulate_forward", 8.0 * batch * tokens * d, n, modulate_forward_kernel, y, x, shift, scale, tokens,
                d, mod_stride, n);
}

extern "C" void modulate_backward(float *dx, float *dshift, float *dscale, const float *dy, const float *x,
                                  const float *scale, int64_t batch, int64_t tokens, int64_t d, int64_t mod_stride)
{
    if (!cu_on_device(dx, dshift, dscale, dy, x, scale))
        return cpu_modulate_backward(dx, dshift, dscale, dy, x, scale, batch, tokens, d, mod_stride);
    token_sums("modulate_backward", 16.0 * batch * tokens * d, dx || dshift || dscale, batch, tokens, d,
               modulate_backward_kernel, dx, dshift, dscale, dy, x, scale, batch, tokens, d, mod_stride);
}

extern "C" void gated_residual_forward(float *y, const float *x, const float *gate, const float *h, int64_t batch,
                                       int64_t tokens, int64_t d, int64_t gate_stride)
{
    if (!cu_on_device(y, x, gate, h)) return cpu_gated_residual_forward(y, x, gate, h, batch, tokens, d, gate_stride);
    const int64_t n = batch * tokens * d;
    elementwise("gated_residual_forward", 12.0 * batch * tokens * d, n, gated_residual_forward_kernel, y, x, gate, h,
                tokens, d, gate_stride, n);
}

extern "C" void gated_residual_backward(float *dx, float *dgate, float *dh, const float *dy, const float *gate,
                                        const float *h, int64_t batch, int64_t tokens, int64_t d, int64_t gate_stride)
{
    if (!cu_on_device(dx, dgate, dh, dy, gate, h))
        return cpu_gated_residual_backward(dx, dgate, dh, dy, gate, h, batch, tokens, d, gate_stride);
    float *dxa = dx == dy ? nullptr : dx; /* an in-place residual stream: dy already is dx's gradient */
    token_sums("gated_residual_backward", 20.0 * batch * tokens * d, dxa || dgate || dh, batch, tokens, d,
               gated_residual_backward_kernel, dxa, dgate, dh, dy, gate, h, batch, tokens, d, gate_stride);
}

extern "C" void add_to(float *y, const float *x, int64_t n)
{
    if (!cu_on_device(y, x)) return cpu_add_to(y, x, n);
    elementwise("add_to", 12.0 * n, n, add_to_kernel, y, x, n);
}

extern "C" void add_row(float *y, const float *row, int64_t rows, int64_t n)
{
    if (!cu_on_device(y, row)) return cpu_add_row(y, row, rows, n);
    launch("add_row", 8.0 * rows * n, rows > 0 && n > 0, cu_blocks(rows * n, THREADS), THREADS, add_row_kernel, y, row,
           rows, n);
}

/* copies as the copy engine of the device does them, on the compute stream between the ops that read and write */
extern "C" void copy_rows(float *dst, int64_t dst_ld, const float *src, int64_t src_ld, int64_t rows, int64_t cols)
{
    if (!cu_on_device(dst, src)) return cpu_copy_rows(dst, dst_ld, src, src_ld, rows, cols);
    const double t0 = cu_op_start();
    if (rows > 0 && cols > 0)
        cu_check(cudaMemcpy2DAsync(dst, (size_t)dst_ld * sizeof(float), src, (size_t)src_ld * sizeof(float),
                                   (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice,
                                   cu_compute_stream()),
                 "copy_rows");
    cu_op_done(OP_POINTWISE, t0, 0, 8.0 * rows * cols, "copy_rows");
}

extern "C" void copy_bytes(void *dst, const void *src, size_t n)
{
    if (!cu_on_device(dst, src)) return cpu_copy_bytes(dst, src, n);
    if (n) cu_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cu_compute_stream()), "copy_bytes");
    cu_op_done_unprofiled("copy_bytes");
}

extern "C" void scale_by(float *x, int64_t n, float s)
{
    if (!cu_on_device(x)) return cpu_scale_by(x, n, s);
    if (n > 0) scale_by_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(x, n, s);
    cu_op_done_unprofiled("scale_by");
}

__global__ void bf16_to_float_kernel(float *y, const uint16_t *x, int64_t n)
{
    FOR_EACH(i, n) y[i] = __uint_as_float((uint32_t)x[i] << 16);
}

extern "C" void bf16_to_float(float *y, const uint16_t *x, int64_t n)
{
    if (!cu_on_device(y, x)) return cpu_bf16_to_float(y, x, n);
    elementwise("bf16_to_float", 6.0 * n, n, bf16_to_float_kernel, y, x, n);
}

/* sft_f32_to_bf16's rounding: to nearest even, a NaN kept a NaN */
__device__ uint16_t bf16_bits(float x)
{
    const uint32_t u = __float_as_uint(x);
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40)
                                            : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

__global__ void float_to_bf16_kernel(uint16_t *y, const float *x, int64_t n)
{
    FOR_EACH(i, n) y[i] = bf16_bits(x[i]);
}

extern "C" void float_to_bf16(uint16_t *y, const float *x, int64_t n)
{
    if (!cu_on_device(y, x)) return cpu_float_to_bf16(y, x, n);
    elementwise("float_to_bf16", 6.0 * n, n, float_to_bf16_kernel, y, x, n);
}

__global__ void round_to_bf16_kernel(float *x, int64_t n)
{
    FOR_EACH(i, n) x[i] = __uint_as_float((uint32_t)bf16_bits(x[i]) << 16);
}

extern "C" void round_to_bf16(float *x, int64_t n)
{
    if (!cu_on_device(x)) return cpu_round_to_bf16(x, n);
    elementwise("round_to_bf16", 8.0 * n, n, round_to_bf16_kernel, x, n);
}

extern "C" void zero_floats(float *x, int64_t n)
{
    if (!cu_on_device(x)) return cpu_zero_floats(x, n);
    if (n > 0) cu_check(cudaMemsetAsync(x, 0, (size_t)n * sizeof(float), cu_compute_stream()), "zero_floats");
    cu_op_done_unprofiled("zero_floats");
}
