/* Pointwise ops on the device: GELU (tanh) and SiLU (ops/cpu/activation.c), adaLN modulation and the gated residual
 * (ops/cpu/modulate.c), and tensor.c's add_to, scale_by and zero_floats.
 *
 * Elementwise kernels are grid-stride loops: each element is read and written by one thread, so in-place calls
 * (y == x, dx == dy) are safe and nothing depends on the launch shape. The reductions over tokens (dshift, dscale,
 * dgate) give each (batch item, column) to one thread column of a block: ROW_LANES lanes take the tokens in a
 * stride, each in order, and are folded in order through shared memory. No atomics. */
#include "backend.h"

namespace {

constexpr int THREADS = 256;
constexpr int COLS = 32;      /* columns a block of the token-sum kernels */
constexpr int ROW_LANES = 16; /* token lanes a column of the token-sum kernels */

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

/* Block (COLS, ROW_LANES) over columns blockIdx.x and batch items blockIdx.y (strided): dshift += sum_t dy,
 * dscale += sum_t dy x, and dx += dy (1 + scale), or with dx == dy, dy becomes dy (1 + scale): the thread that
 * owns an element reads dy before it writes it. Pointers of gradients not asked for (and the inputs only they
 * read) may be NULL. */
__global__ void modulate_backward_kernel(float *dx, float *dshift, float *dscale, const float *dy, const float *x,
                                         const float *scale, int64_t batch, int64_t tokens, int64_t d,
                                         int64_t mod_stride)
{
    __shared__ float ps[ROW_LANES][COLS + 1], pc[ROW_LANES][COLS + 1];
    const int64_t j = (int64_t)blockIdx.x * COLS + threadIdx.x;
    for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        float as = 0.0f, ac = 0.0f;
        if (j < d) {
            const float s1 = dx ? 1.0f + scale[b * mod_stride + j] : 0.0f;
            for (int64_t t = threadIdx.y; t < tokens; t += ROW_LANES) {
                const int64_t off = (b * tokens + t) * d + j;
                const float g = dy[off];
                as += g;
                if (dscale) ac += g * x[off];
                if (dx) dx[off] = dx == dy ? g * s1 : dx[off] + g * s1;
            }
        }
        ps[threadIdx.y][threadIdx.x] = as;
        pc[threadIdx.y][threadIdx.x] = ac;
        __syncthreads();
        if (threadIdx.y == 0 && j < d) {
            float ts = 0.0f, tc = 0.0f;
            for (int k = 0; k < ROW_LANES; k++) {
                ts += ps[k][threadIdx.x];
                tc += pc[k][threadIdx.x];
            }
            if (dshift) dshift[b * mod_stride + j] += ts;
            if (dscale) dscale[b * mod_stride + j] += tc;
        }
        __syncthreads(); /* the partials are rewritten for the next batch item */
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
    __shared__ float pg[ROW_LANES][COLS + 1];
    const int64_t j = (int64_t)blockIdx.x * COLS + threadIdx.x;
    for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        float ag = 0.0f;
        if (j < d) {
            const float gt = dh ? gate[b * gate_stride + j] : 0.0f;
            for (int64_t t = threadIdx.y; t < tokens; t += ROW_LANES) {
                const int64_t off = (b * tokens + t) * d + j;
                const float g = dy[off];
                if (dx) dx[off] += g;
                if (dh) dh[off] += g * gt;
                if (dgate) ag += g * h[off];
            }
        }
        pg[threadIdx.y][threadIdx.x] = ag;
        __syncthreads();
        if (threadIdx.y == 0 && j < d && dgate) {
            float tg = 0.0f;
            for (int k = 0; k < ROW_LANES; k++) tg += pg[k][threadIdx.x];
            dgate[b * gate_stride + j] += tg;
        }
        __syncthreads(); /* the partials are rewritten for the next batch item */
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

dim3 token_sum_grid(int64_t batch, int64_t d)
{
    return dim3((unsigned)((d + COLS - 1) / COLS), (unsigned)(batch < 65535 ? batch : 65535));
}


} // namespace

extern "C" void gelu_forward(float *y, const float *x, int64_t n)
{
    if (!cu_on_device(y, x)) {
        cpu_gelu_forward(y, x, n);
        return;
    }
    const double t0 = cu_op_start();
    if (n > 0) gelu_forward_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(y, x, n);
    cu_op_done(OP_POINTWISE, t0, 0, 8.0 * n, "gelu_forward");
}

extern "C" void gelu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    if (!cu_on_device(dx, dy, x)) {
        cpu_gelu_backward(dx, dy, x, n);
        return;
    }
    const double t0 = cu_op_start();
    if (dx && n > 0)
        gelu_backward_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(dx, dy, x, n, dx == dy);
    cu_op_done(OP_POINTWISE, t0, 0, 12.0 * n, "gelu_backward");
}

extern "C" void silu_forward(float *y, const float *x, int64_t n)
{
    if (!cu_on_device(y, x)) {
        cpu_silu_forward(y, x, n);
        return;
    }
    const double t0 = cu_op_start();
    if (n > 0) silu_forward_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(y, x, n);
    cu_op_done(OP_POINTWISE, t0, 0, 8.0 * n, "silu_forward");
}

extern "C" void silu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    if (!cu_on_device(dx, dy, x)) {
        cpu_silu_backward(dx, dy, x, n);
        return;
    }
    const double t0 = cu_op_start();
    if (dx && n > 0) silu_backward_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(dx, dy, x, n);
    cu_op_done(OP_POINTWISE, t0, 0, 12.0 * n, "silu_backward");
}

extern "C" void modulate_forward(float *y, const float *x, const float *shift, const float *scale, int64_t batch,
                                 int64_t tokens, int64_t d, int64_t mod_stride)
{
    if (!cu_on_device(y, x, shift, scale)) {
        cpu_modulate_forward(y, x, shift, scale, batch, tokens, d, mod_stride);
        return;
    }
    const double t0 = cu_op_start();
    const int64_t n = batch * tokens * d;
    if (n > 0)
        modulate_forward_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(y, x, shift, scale,
                                                                                             tokens, d, mod_stride, n);
    cu_op_done(OP_POINTWISE, t0, 0, 8.0 * batch * tokens * d, "modulate_forward");
}

extern "C" void modulate_backward(float *dx, float *dshift, float *dscale, const float *dy, const float *x,
                                  const float *scale, int64_t batch, int64_t tokens, int64_t d, int64_t mod_stride)
{
    if (!cu_on_device(dx, dshift, dscale, dy, x, scale)) {
        cpu_modulate_backward(dx, dshift, dscale, dy, x, scale, batch, tokens, d, mod_stride);
        return;
    }
    const double t0 = cu_op_start();
    if ((dx || dshift || dscale) && batch > 0 && tokens > 0 && d > 0)
        modulate_backward_kernel<<<token_sum_grid(batch, d), dim3(COLS, ROW_LANES), 0, cu_compute_stream()>>>(
            dx, dshift, dscale, dy, x, scale, batch, tokens, d, mod_stride);
    cu_op_done(OP_POINTWISE, t0, 0, 16.0 * batch * tokens * d, "modulate_backward");
}

extern "C" void gated_residual_forward(float *y, const float *x, const float *gate, const float *h, int64_t batch,
                                       int64_t tokens, int64_t d, int64_t gate_stride)
{
    if (!cu_on_device(y, x, gate, h)) {
        cpu_gated_residual_forward(y, x, gate, h, batch, tokens, d, gate_stride);
        return;
    }
    const double t0 = cu_op_start();
    const int64_t n = batch * tokens * d;
    if (n > 0)
        gated_residual_forward_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(
            y, x, gate, h, tokens, d, gate_stride, n);
    cu_op_done(OP_POINTWISE, t0, 0, 12.0 * batch * tokens * d, "gated_residual_forward");
}

extern "C" void gated_residual_backward(float *dx, float *dgate, float *dh, const float *dy, const float *gate,
                                        const float *h, int64_t batch, int64_t tokens, int64_t d, int64_t gate_stride)
{
    if (!cu_on_device(dx, dgate, dh, dy, gate, h)) {
        cpu_gated_residual_backward(dx, dgate, dh, dy, gate, h, batch, tokens, d, gate_stride);
        return;
    }
    const double t0 = cu_op_start();
    float *dxa = dx == dy ? nullptr : dx; /* an in-place residual stream: dy already is dx's gradient */
    if ((dxa || dgate || dh) && batch > 0 && tokens > 0 && d > 0)
        gated_residual_backward_kernel<<<token_sum_grid(batch, d), dim3(COLS, ROW_LANES), 0, cu_compute_stream()>>>(
            dxa, dgate, dh, dy, gate, h, batch, tokens, d, gate_stride);
    cu_op_done(OP_POINTWISE, t0, 0, 20.0 * batch * tokens * d, "gated_residual_backward");
}

extern "C" void add_to(float *y, const float *x, int64_t n)
{
    if (!cu_on_device(y, x)) {
        cpu_add_to(y, x, n);
        return;
    }
    const double t0 = cu_op_start();
    if (n > 0) add_to_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(y, x, n);
    cu_op_done(OP_POINTWISE, t0, 0, 12.0 * n, "add_to");
}

extern "C" void add_row(float *y, const float *row, int64_t rows, int64_t n)
{
    if (!cu_on_device(y, row)) {
        cpu_add_row(y, row, rows, n);
        return;
    }
    const double t0 = cu_op_start();
    if (rows > 0 && n > 0)
        add_row_kernel<<<cu_blocks(rows * n, THREADS), THREADS, 0, cu_compute_stream()>>>(y, row, rows, n);
    cu_op_done(OP_POINTWISE, t0, 0, 8.0 * rows * n, "add_row");
}

/* copies as the copy engine of the device does them, on the compute stream between the ops that read and write */
extern "C" void copy_rows(float *dst, int64_t dst_ld, const float *src, int64_t src_ld, int64_t rows, int64_t cols)
{
    if (!cu_on_device(dst, src)) {
        cpu_copy_rows(dst, dst_ld, src, src_ld, rows, cols);
        return;
    }
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
    if (!cu_on_device(dst, src)) {
        cpu_copy_bytes(dst, src, n);
        return;
    }
    if (n) cu_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cu_compute_stream()), "copy_bytes");
    cu_op_done_unprofiled("copy_bytes");
}

extern "C" void scale_by(float *x, int64_t n, float s)
{
    if (!cu_on_device(x)) {
        cpu_scale_by(x, n, s);
        return;
    }
    if (n > 0) scale_by_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(x, n, s);
    cu_op_done_unprofiled("scale_by");
}

__global__ void bf16_to_float_kernel(float *y, const uint16_t *x, int64_t n)
{
    FOR_EACH(i, n) y[i] = __uint_as_float((uint32_t)x[i] << 16);
}

extern "C" void bf16_to_float(float *y, const uint16_t *x, int64_t n)
{
    if (!cu_on_device(y, x)) {
        cpu_bf16_to_float(y, x, n);
        return;
    }
    const double t0 = cu_op_start();
    if (n > 0) bf16_to_float_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(y, x, n);
    cu_op_done(OP_POINTWISE, t0, 0, 6.0 * n, "bf16_to_float");
}

extern "C" void zero_floats(float *x, int64_t n)
{
    if (!cu_on_device(x)) {
        cpu_zero_floats(x, n);
        return;
    }
    if (n > 0) cu_check(cudaMemsetAsync(x, 0, (size_t)n * sizeof(float), cu_compute_stream()), "zero_floats");
    cu_op_done_unprofiled("zero_floats");
}
