/* The op layer: every differentiable computation of a training step, forward and backward side by side.
 *
 * This header is the whole interface between models/executor and kernels. The CPU backend (src/ops/cpu)
 * implements it with OpenMP and BLAS; the CUDA backend (src/ops/cuda, docs/CUDA.md) implements the same
 * functions on device pointers, each falling back to the CPU's for what its kernels do not serve, so models
 * and the checkpoint executor never change.
 *
 * Conventions
 * - fp32, row-major, dense unless a view says otherwise. Sizes are int64_t element counts.
 * - Forward writes its output. Backward ACCUMULATES (+=) into every gradient it produces, input and weight
 *   gradients alike, so that a tensor read by several ops collects all its gradients; callers zero
 *   gradient buffers once. Any gradient pointer may be NULL when that gradient is not wanted.
 * - Deterministic for a fixed thread count: static partitions, no atomics, reductions in a fixed order.
 *   Most ops are independent of the thread count altogether.
 * - What backward needs: most ops read only tensors the caller already holds (their inputs, listed per
 *   op). An op whose forward must keep something of its own (normalisation statistics, attention
 *   probabilities or log-sum-exp) takes an `op_state *keep`: NULL means "keep nothing" (the forward of a
 *   checkpointed block), otherwise the op allocates exactly <op>_kept_bytes() from the pool as
 *   MEM_ACTIVATIONS and backward reads it. Transient buffers come from the pool as MEM_WORKSPACE and are
 *   freed before the op returns; <op>_workspace_bytes() states them. These statements are what the
 *   checkpoint planner adds up, and tests check them against the pool. */
#ifndef SEGTRAIN_OPS_H
#define SEGTRAIN_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segtrain/pool.h"

/* What an op's forward kept for its backward. */
typedef struct op_state {
    pool *pool;
    void *data;
    size_t bytes;
} op_state;

/* Frees what was kept (if anything) and clears the state. */
void op_state_release(op_state *s);

/* ---- threads: one OpenMP pool shared with OpenBLAS (its OpenMP build), never two fighting ---- */

void ops_set_threads(int n);
int ops_threads(void);
/* The BLAS library's own description ("OpenBLAS 0.3.21 ... Haswell MAX_THREADS=..."). */
const char *ops_blas_info(void);
/* The name of OpenBLAS kernels that suit this CPU better than the ones it loaded, or NULL: "SkylakeX" where OpenBLAS
 * runs kernels without AVX-512 (Haswell, Zen, Prescott, ...) on a CPU with AVX-512, "Haswell" where it runs kernels
 * older than AVX2 on a CPU with AVX2, because OPENBLAS_CORETYPE says so or because OpenBLAS is older than the CPU.
 * `segtrain selfcheck` says so: OpenBLAS reads OPENBLAS_CORETYPE only when it loads. */
const char *ops_blas_better_core(void);

/* ---- the backend's memory (ops/cpu/common.c; the CUDA backend's ops/cuda/runtime.cu) ---- */

/* The pools a training step runs in: device memory of `capacity` bytes (0: all the backend has), and the host
 * memory that offload copies go to (0: unlimited). The CPU backend's are heap pools. The CUDA backend's sub-allocate
 * one arena each (pool_create_arena): managed device memory, which host code may touch between ops, and pinned host
 * memory, which copies overlap with compute from. A status when the memory cannot be had. */
st_status ops_device_pool_create(size_t capacity, pool **out);
st_status ops_host_pool_create(size_t capacity, pool **out);
/* The device's memory in use by every process, as the GPU reports it (cudaMemGetInfo); 0 on the CPU backend. */
size_t ops_device_bytes_in_use(void);
/* "cpu", or the GPU a CUDA build runs on, or why it runs on the CPU ("cuda: no GPU (...), ops on the CPU"). */
const char *ops_backend_name(void);

/* ---- fallbacks: what a device backend ran on the CPU (ops/cpu/fallback.c, both builds; docs/CUDA.md) ----
 *
 * An op given the device's memory in a case no device kernel serves (attention with a mask, cross-, grouped-query,
 * windowed, linear or math attention; any convolution) runs the CPU code over managed memory, slowly. Each such
 * call is counted by op and case; with SEGTRAIN_STRICT_OPS=1 in the environment it is refused instead
 * (ST_ERR_UNSUPPORTED, naming the op and the case). The CPU backend has no device memory: nothing falls back. */
typedef struct op_fallback {
    const char *op, *why; /* "attention_forward", "mask" */
    int64_t calls;
} op_fallback;
/* The cases that fell back since the start (or ops_fallback_reset), in the order first seen; *n of them. */
const op_fallback *ops_fallbacks(int *n);
void ops_fallback_reset(void);
/* Which memory is the device's: the CUDA backend says so once its GPU is ready; a test may say so of any memory,
 * for the CPU build to take the path the CUDA build takes. NULL: none. */
void ops_fallback_device(bool (*holds)(const void *p));

/* ---- profile: time and FLOPs per kind of op, off unless started (`segtrain profile`) ---- */

typedef enum op_kind { OP_GEMM, OP_ATTENTION, OP_NORM, OP_POINTWISE, OP_KIND_COUNT } op_kind;

typedef struct op_profile {
    long calls[OP_KIND_COUNT];
    double seconds[OP_KIND_COUNT];
    double flops[OP_KIND_COUNT]; /* GEMMs and attention's matrix products; 0 for memory-bound kinds */
    double bytes[OP_KIND_COUNT]; /* what memory-bound kinds read and write; 0 for GEMMs and attention */
} op_profile;

/* Starts counting from zero; ops_profile_stop copies the counts out and stops. On a dry step (pool.h) the ops
 * count their calls, FLOPs and bytes as a real step's would, in no time: the work a schedule costs. */
void ops_profile_start(void);
void ops_profile_stop(op_profile *out);
const char *op_kind_name(op_kind k);

/* ---- linear and matmul (ops/cpu/linear.c) ---- */

/* y (n,out) = x (n,in) W^T + b, W stored (out,in) as in a PyTorch state_dict; b (out) may be NULL.
 * Backward reads x and W. */
void linear_forward(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t in, int64_t out);
void linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t n,
                     int64_t in, int64_t out);

/* The gated branch of an adaLN-Zero block, y = r + gate * (x W^T + b) with gate (batch, out) broadcast over each
 * of the batch's `tokens` rows (gate rows gate_stride apart): backward without the linear's output, which forward
 * then need not keep nor a recompute make. With M_s = dy_s^T x_s per batch item s (the products dW is made of):
 * dW += sum_s gate_s * M_s, dgate_s += rowdot(W, M_s) + b * colsum(dy_s), db += sum_s gate_s * colsum(dy_s),
 * dx += (gate * dy) W; the residual's gradient (dy itself) stays the caller's. The GEMM FLOPs of
 * linear_backward; sums in a fixed order at any thread count. Workspace: gated_linear_workspace_bytes. */
size_t gated_linear_workspace_bytes(int64_t batch, int64_t tokens, int64_t in, int64_t out);
st_status gated_linear_backward(pool *p, float *dx, float *dw, float *db, float *dgate, const float *dy, const float *x,
                                const float *w, const float *b, const float *gate, int64_t batch, int64_t tokens,
                                int64_t in, int64_t out, int64_t gate_stride);

/* The plain GEMM, for layers composed of products (a LoRA adapter): C (m,n) = alpha op(A) op(B) + beta C, dense
 * row-major, op(A) (m,k), op(B) (k,n); with trans_a A is stored (k,m), with trans_b B is stored (n,k). */
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, const float *b,
          float beta, float *c);

/* Batched matmul over `batch` contiguous matrices: C (m,n) = op(A) op(B), op(A) (m,k), op(B) (k,n);
 * with trans_a A is stored (k,m), with trans_b B is stored (n,k). Backward reads A and B. */
void matmul_forward(float *c, const float *a, const float *b, int64_t batch, int64_t m, int64_t n, int64_t k,
                    bool trans_a, bool trans_b);
void matmul_backward(float *da, float *db, const float *dc, const float *a, const float *b, int64_t batch, int64_t m,
                     int64_t n, int64_t k, bool trans_a, bool trans_b);

/* ---- normalisation over the last dimension (ops/cpu/norm.c) ---- */

/* y = (x - mean) / sqrt(var + eps) * w + b over rows of d; w and b NULL for LayerNorm without affine.
 * Keeps mean and 1/std per row. Backward reads x and w. */
size_t layernorm_kept_bytes(int64_t n);
st_status layernorm_forward(pool *p, float *y, const float *x, const float *w, const float *b, int64_t n, int64_t d,
                            float eps, op_state *keep);
void layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t n,
                        int64_t d, const op_state *keep);

/* y = x / sqrt(mean(x^2) + eps) * w; w may be NULL. Keeps 1/rms per row. Backward reads x and w. */
size_t rmsnorm_kept_bytes(int64_t n);
st_status rmsnorm_forward(pool *p, float *y, const float *x, const float *w, int64_t n, int64_t d, float eps,
                          op_state *keep);
void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t n, int64_t d,
                      const op_state *keep);

/* Zero-centred RMSNorm (Krea 2's): y = x / sqrt(mean(x^2) + eps) * (1 + w), 1 + w rounded to float first as
 * F.rms_norm(x, weight=w + 1) has it. Kept state as rmsnorm's; d floats of workspace. */
st_status rmsnorm_zc_forward(pool *p, float *y, const float *x, const float *w, int64_t n, int64_t d, float eps,
                             op_state *keep);
st_status rmsnorm_zc_backward(pool *p, float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t n,
                              int64_t d, const op_state *keep);

/* GroupNorm (torch.nn.GroupNorm) over x (n, c, inner), channels first: each sample's c channels in `groups` groups
 * of c / groups, each group normalised over its channels and inner positions (biased variance), then
 * y = xhat w[ch] + b[ch] (w and b may be NULL). Keeps mean and 1/std per (sample, group). Backward accumulates dx,
 * dw and db (each may be NULL) and reads x and w; its workspace holds two sums a (sample, channel); every sum runs in
 * a fixed order, whatever the threads. */
size_t groupnorm_kept_bytes(int64_t n, int64_t groups);
size_t groupnorm_workspace_bytes(int64_t n, int64_t c);
st_status groupnorm_forward(pool *p, float *y, const float *x, const float *w, const float *b, int64_t n, int64_t c,
                            int64_t inner, int64_t groups, float eps, op_state *keep);
st_status groupnorm_backward(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                             int64_t n, int64_t c, int64_t inner, int64_t groups, const op_state *keep);

/* GlobalResponseNorm (ConvNeXt-V2's, diffusers' GlobalResponseNorm in Stable Cascade's ResBlock) over x (batch, tokens,
 * c), channels last: a[b, ch] = sqrt(sum over tokens of x[b, t, ch]^2), s[b, ch] = a[b, ch] / (mean over ch of
 * a[b, :] + 1e-6), y = gamma[ch] x s[b, ch] + beta[ch] + x. The sums run in double, each in a fixed order whatever the
 * threads. Keeps a and the per-sample means (grn_kept_bytes); with keep NULL they live in as much workspace instead.
 * Backward accumulates dx, dgamma and dbeta (each may be NULL) and reads x, gamma (only for dx) and the kept state;
 * its workspace (grn_workspace_bytes) holds each (sample, channel)'s sums over the tokens. With bf16 (mixed_precision
 * bf16) each step's output is rounded to bf16 as PyTorch's bf16 GlobalResponseNorm makes it (a, the mean, the mean
 * + 1e-6, s, x s, gamma x s, + beta, + x), and the kept a and means are those rounded values. */
size_t grn_kept_bytes(int64_t batch, int64_t c);
size_t grn_workspace_bytes(int64_t batch, int64_t c);
st_status grn_forward(pool *p, float *y, const float *x, const float *gamma, const float *beta, int64_t batch,
                      int64_t tokens, int64_t c, bool bf16, op_state *keep);
st_status grn_backward(pool *p, float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                       const float *gamma, int64_t batch, int64_t tokens, int64_t c, const op_state *keep);

/* ---- pointwise activations (ops/cpu/activation.c); backward reads x ---- */

/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). gelu_backward may run in place
 * (dx == dy: dy becomes dx, nothing accumulated), which saves a zeroed buffer. */
void gelu_forward(float *y, const float *x, int64_t n);
void gelu_backward(float *dx, const float *dy, const float *x, int64_t n);
/* GELU, exact: 0.5 x (1 + erf(x / sqrt 2)), torch's nn.GELU() (HunyuanVideo 1.5's ByT5 projection). */
void gelu_erf_forward(float *y, const float *x, int64_t n);
void gelu_erf_backward(float *dx, const float *dy, const float *x, int64_t n);
/* tanh (tanhf's). Backward reads the output y: dx += dy (1 - y^2), or with dx == dy, dy becomes dx in place (a gate
 * squashed by tanh, as Lumina's and Qwen-Image 2.1's modulations have it). */
void tanh_forward(float *y, const float *x, int64_t n);
void tanh_backward(float *dx, const float *dy, const float *y, int64_t n);
/* SiLU: x * sigmoid(x). */
void silu_forward(float *y, const float *x, int64_t n);
void silu_backward(float *dx, const float *dy, const float *x, int64_t n);

/* Dropout with a counter-based mask: element i is kept, times 1 / (1 - p), where rng_uniform(seed, stream, i) >= p,
 * else zeroed, so that a recompute, any thread count and a dry run draw the same mask; p in [0, 1). y may be x.
 * Backward: dx += dy times the same mask, or with dx == dy, dy becomes dx in place. */
void dropout_forward(float *y, const float *x, int64_t n, float p, uint64_t seed, uint64_t stream);
void dropout_backward(float *dx, const float *dy, int64_t n, float p, uint64_t seed, uint64_t stream);

/* Gated linear units over rows: y (rows, F) = act(a) b elementwise, a and b read from rows ld floats apart (the two
 * halves of a fused projection (rows, 2F): ld 2F and b = a + F; two projections: ld F). GLU_SILU is SwiGLU,
 * GLU_GELU_ERF and GLU_GELU_TANH GEGLU with the exact or the tanh GELU, each computed as the activation ops above
 * compute it; GLU_SIGMOID is an output gate, sigmoid(a) b (Krea 2's attention). Backward accumulates da and db (rows
 * ld apart; either may be NULL) and reads a and b. */
typedef enum glu_kind { GLU_SILU, GLU_GELU_ERF, GLU_GELU_TANH, GLU_SIGMOID } glu_kind;
void glu_forward(float *y, const float *a, const float *b, int64_t rows, int64_t F, int64_t ld, glu_kind k);
void glu_backward(float *da, float *db, const float *dy, const float *a, const float *b, int64_t rows, int64_t F,
                  int64_t ld, glu_kind k);

/* StyleGAN's fused bias and leaky ReLU over (n, c, inner): y = leaky_relu(x + b[c], slope) * scale; b may be NULL.
 * Backward reads x and b. */
void bias_leaky_relu_forward(float *y, const float *x, const float *b, float slope, float scale, int64_t n, int64_t c,
                             int64_t inner);
void bias_leaky_relu_backward(float *dx, float *db, const float *dy, const float *x, const float *b, float slope,
                              float scale, int64_t n, int64_t c, int64_t inner);

/* ---- convolution (ops/cpu/conv.c) ---- */

/* x (batch, in, h, w) with weight (out, in, kh, kw), strides (sh, sw) and zero padding (ph, pw) on each side:
 * y (batch, out, conv_out_h, conv_out_w). */
typedef struct conv_shape {
    int64_t batch, in, h, w, out, kh, kw, sh, sw, ph, pw;
} conv_shape;
int64_t conv_out_h(const conv_shape *s);
int64_t conv_out_w(const conv_shape *s);
/* A band of one image's im2col columns, at most 8 MiB unless one output row's take more (0 for a 1 x 1 convolution
 * with stride 1 and no padding, which reads x itself). */
size_t conv2d_workspace_bytes(const conv_shape *s);
/* y = conv(x, w) + b (b may be NULL), one GEMM per band of output rows of an image. Backward reads x and w. */
st_status conv2d_forward(pool *p, float *y, const float *x, const float *w, const float *b, const conv_shape *s);
st_status conv2d_backward(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                          const conv_shape *s);
/* torch.nn.ConvTranspose2d(in, out, kernel_size=2, stride=2) (a U-Net's learned upsampling): x (batch, in, h, w) to
 * y (batch, out, 2h, 2w), y[b, o, 2i + a, 2j + e] = bias[o] + sum_c x[b, c, i, j] w[c, o, a, e], weight (in, out, 2, 2)
 * as the checkpoint stores it, bias (out) or NULL. One GEMM per image, W^T (4 out, in) X_b (in, h w), into a
 * workspace of conv_transpose2x2_workspace_bytes, scattered into y. Backward gathers dy into the same layout:
 * dx_b += W dY_b, dw += X_b dY_b^T with the images in order, db[o] += the sum of dy's plane o in double, in order;
 * each may be NULL (the workspace is taken only for dx or dw). Backward reads x and w. */
size_t conv_transpose2x2_workspace_bytes(int64_t in, int64_t out, int64_t h, int64_t w);
st_status conv_transpose2x2_forward(pool *p, float *y, const float *x, const float *w, const float *b, int64_t batch,
                                    int64_t in, int64_t out, int64_t h, int64_t wd);
st_status conv_transpose2x2_backward(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x,
                                     const float *w, int64_t batch, int64_t in, int64_t out, int64_t h, int64_t wd);
/* A fixed k x k filter (not trained) over each of `planes` h x w planes, zero-padded by (ph, pw): the depthwise
 * convolution of StyleGAN's blur, y (planes, h + 2ph - k + 1, w + 2pw - k + 1). */
void fir_forward(float *y, const float *x, const float *kernel, int64_t k, int64_t planes, int64_t h, int64_t w,
                 int64_t ph, int64_t pw);
void fir_backward(float *dx, const float *dy, const float *kernel, int64_t k, int64_t planes, int64_t h, int64_t w,
                  int64_t ph, int64_t pw);

/* Nearest-neighbour upsampling by a whole factor f (diffusers' Upsample2D, F.interpolate(scale_factor=2,
 * mode="nearest")): x (planes, h, w) to y (planes, h f, w f), y[p, i, j] = x[p, i / f, j / f]. Backward adds each
 * pixel's f x f copies of dy to dx, in a fixed order. */
void upsample_nearest_forward(float *y, const float *x, int64_t planes, int64_t h, int64_t w, int64_t f);
void upsample_nearest_backward(float *dx, const float *dy, int64_t planes, int64_t h, int64_t w, int64_t f);

/* A depthwise 3 x 3 convolution with weights, stride 1, zero padding 1, over tokens laid out channels last (Sana's
 * GLUMBConv conv_depth, a Conv2d with groups = channels): x and y (batch, h, w, c), weight (c, 1, 3, 3), bias (c) or
 * NULL; y[b, i, j, ch] = bias[ch] + sum_{a, e} weight[ch, a, e] x[b, i + a - 1, j + e - 1, ch]. Backward accumulates
 * dx, dw and db (each may be NULL); every sum runs in a fixed order, whatever the threads. Workspace: 9 c floats. */
st_status depthwise3x3_forward(pool *p, float *y, const float *x, const float *weight, const float *bias,
                               int64_t batch, int64_t h, int64_t w, int64_t c);
st_status depthwise3x3_backward(pool *p, float *dx, float *dw, float *db, const float *dy, const float *x,
                                const float *weight, int64_t batch, int64_t h, int64_t w, int64_t c);

/* Sana-Video's temporal mixing (GLUMBTempConv's conv_temp: a Conv2d of kernel (3, 1), padding (1, 0), no bias, over
 * each sample's (d, frames, plane) view), over tokens laid out channels last: x and y (batch, frames, plane, d), w
 * (d, d, 3, 1) as the checkpoint stores it; y[b, f, p, :] = sum_j w[:, :, j] x[b, f + j - 1, p, :] over j = 0, 1, 2,
 * zero beyond a sample's first and last frame. One BLAS GEMM per chunk of token rows over their frame columns
 * (workspace: 3 d floats a row of the chunk). Backward accumulates dx and dw (either may be NULL); every sum runs in
 * a fixed order, whatever the threads. */
st_status temporal_conv3_forward(pool *p, float *y, const float *x, const float *w, int64_t batch, int64_t frames,
                                 int64_t plane, int64_t d);
st_status temporal_conv3_backward(pool *p, float *dx, float *dw, const float *dy, const float *x, const float *w,
                                  int64_t batch, int64_t frames, int64_t plane, int64_t d);

/* ---- QR (ops/cpu/linalg.c) ---- */

/* Q (m, n) of the thin QR of a (m, n), m >= n, by Householder reflections as LAPACK's geqrf and orgqr make it (R's
 * diagonal -sign(alpha) |column|, so Q's signs are torch.linalg.qr's), in double. Backward (with dR = 0) reads a
 * and q. Workspace: qr_workspace_bytes. */
size_t qr_workspace_bytes(int64_t m, int64_t n);
st_status qr_forward(pool *p, float *q, const float *a, int64_t m, int64_t n);
st_status qr_backward(pool *p, float *da, const float *dq, const float *a, const float *q, int64_t m, int64_t n);

/* ---- attention over heads (ops/cpu/attention.c) ---- */

/* math:  S = q k^T / sqrt(hd), P = softmax(S) kept for backward, O = P v.
 * flash: tiled with an online softmax; keeps only the log-sum-exp per row, recomputes P tile by tile in
 *        backward. Same results to fp32 rounding. Non-causal, over all keys unless a window or a mask (below) says.
 * linear: another attention, Sana's: with a = relu(q), c = relu(k), O_t = a_t (c^T v) / (a_t . sum_s c_s + 1e-15)
 *        per head (diffusers' SanaLinearAttnProcessor2_0), no softmax and no scale; keeps c^T v and sum_s c_s
 *        (hd (hd + 1) floats a head). Self-attention only: no kv_tokens, kv_heads or window, and of a mask only its
 *        rotary table (attn_mask.linear_rope, Sana-Video's). */
typedef enum attention_mechanism { ATTN_MATH, ATTN_FLASH, ATTN_LINEAR } attention_mechanism;

/* tokens and heads are the queries'. The fields after mechanism are 0 for plain self-attention:
 * - kv_tokens: keys and values per sample when they are not the queries' tokens (cross-attention: image queries,
 *   text keys and values); k, v, dk and dv then have kv_tokens tokens a sample, and the mask's key_bias kv_tokens
 *   per sample (query_gate keeps the queries' tokens);
 * - kv_heads: grouped-query attention, heads of k and v, dividing heads: query head h reads kv head
 *   h / (heads / kv_heads) (torch's repeat_interleave, SDPA's enable_gqa); k, v, dk and dv are kv_heads * head_dim
 *   wide, and dk, dv collect the gradients of every query head of their group;
 * - window: sliding-window attention, symmetric and inclusive: query i sees key j only where |i - j| <= window,
 *   so 2 window + 1 keys away from the ends (ACE-Step's sliding layers, diffusers' _create_4d_mask with
 *   is_causal=False, and flash-attn's window_size (window, window)). Self-attention only; a window of at least
 *   tokens - 1 is plain attention. With a mask, each query needs a kept key inside its window.
 * Refused (ST_ERR_INVALID, one line): a negative field, kv_heads not dividing heads, a window with kv_tokens.
 * Profile FLOPs count the products run: 4 tokens kv_tokens head_dim a head forward (8 math backward, 10 flash
 * backward, which recomputes the scores); with a window, flash counts the tiles it visits (each 256-row tile's
 * keys within the window of any of its rows, so about 256 + 2 window a row), math the whole square; linear 4 tokens
 * head_dim^2 forward, 8 backward. */
typedef struct attn_shape {
    int64_t batch, tokens, heads, head_dim;
    attention_mechanism mechanism;
    int64_t kv_tokens, kv_heads, window;
} attn_shape;

/* A (batch, tokens, heads*head_dim) operand that may be a slice of a wider buffer, such as the q, k or v
 * third of a packed qkv projection: element (b, t, h, j) is at
 * data[b*batch_stride + t*token_stride + h*head_dim + j]. */
typedef struct attn_view {
    float *data;
    int64_t token_stride, batch_stride;
} attn_view;

/* The three passes whose transient workspace differs: the math forward with keep writes P straight into the
 * kept buffer and needs none. */
typedef enum attn_pass { ATTN_FORWARD, ATTN_FORWARD_KEEP, ATTN_BACKWARD } attn_pass;

size_t attention_kept_bytes(const attn_shape *s);
size_t attention_workspace_bytes(const attn_shape *s, int threads, attn_pass pass);
/* Backward reads q, k, v and (flash) out, the forward's output, for D = rowsum(dO * O); out.data NULL (where dq or dk
 * is asked for) takes D = rowsum(dP * P) from the recomputed P instead (flash: two more products a tile, the
 * profile's 10 becoming 14; a device kernel leaves it to the CPU code): the same quantity, for a caller whose
 * kept output is no longer the forward's float result (rounded to bf16 under mixed_precision bf16), as D from a
 * rounded O would not match the P that backward recomputes. Math keeps P and never reads out. */
st_status attention_forward(pool *p, const attn_shape *s, attn_view out, attn_view q, attn_view k, attn_view v,
                            op_state *keep);
st_status attention_backward(pool *p, const attn_shape *s, attn_view dq, attn_view dk, attn_view dv, attn_view dout,
                             attn_view q, attn_view k, attn_view v, attn_view out, const op_state *keep);

/* A mask on the logits, per sample: logit(i, j) += query_gate[i] * key_bias[j] before the softmax, and a structure
 * (below) that hides keys from queries.
 * - key_bias (batch, kv tokens): finite, or -inf to exclude key j from every query's row, whatever the gate (an
 *   excluded key gets probability exactly 0, so nothing of its k or v reaches the output).
 * - query_gate (batch, tokens), or NULL for 1: finite; it scales the finite biases of query i's row.
 * - Rows of both are batch_stride floats apart (0: one row shared by the whole batch).
 * SDPA's boolean key mask attn_mask[:, None, None, :] (Qwen Image, HunyuanVideo) is key_bias 0 / -inf with no gate;
 * Chroma's additive float mask m_i * m_j is key_bias = query_gate = m.
 * A sample with every key excluded is refused (ST_ERR_INVALID): SDPA gives such a row zeros, but no model here has
 * one, and the refusal keeps -inf out of the kept log-sum-exp. So are NaN or +inf biases and non-finite gates.
 * The mask is an input, not trained: no gradient. It adds no kept state and no workspace: the _masked ops take the
 * sizes of the plain ones above, and the flash backward reads the mask again from the caller's buffers, which must
 * hold the forward's values. A NULL mask is the plain op, bit for bit. */
typedef struct attn_mask {
    const float *key_bias, *query_gate;
    int64_t batch_stride;
    /* Structure, for self-attention without a window (NULL and false: none). segment (batch, tokens): query i sees
     * key j only where segment[j] == segment[i] (Ideogram's block-diagonal packing); causal: only where j <= i; both:
     * where j <= i or the segments match (Qwen-Image 2.1's block-causal sequence: causal text, each image block
     * bidirectional). A hidden key is excluded from the query's row as a -inf key_bias would be; key_bias (may then
     * be NULL) still applies. Every query must see at least one kept key (checked, ST_ERR_INVALID otherwise, as are
     * non-finite segments). Neither is materialised: the flash tiles apply it as they go, visiting every tile (no
     * skipping yet: the cost, and the profile's count, of the unmasked op). */
    const float *segment;
    bool causal;
    /* Linear attention's only entry (the others refuse it): a rotary table (tokens, head_dim/2, 2) as rope_forward's,
     * turning relu(q) and relu(k) in the numerator only (diffusers' SanaLinearAttnProcessor3_0): with a = relu(q),
     * c = relu(k), O_t = rot(a_t) (rot(c)^T v) / (a_t . sum_s c_s + 1e-15). */
    const float *linear_rope;
} attn_mask;

st_status attention_forward_masked(pool *p, const attn_shape *s, const attn_mask *mask, attn_view out, attn_view q,
                                   attn_view k, attn_view v, op_state *keep);
st_status attention_backward_masked(pool *p, const attn_shape *s, const attn_mask *mask, attn_view dq, attn_view dk,
                                    attn_view dv, attn_view dout, attn_view q, attn_view k, attn_view v, attn_view out,
                                    const op_state *keep);

/* ---- block-sparse attention (ops/cpu/attention_bsa.c): LongCat-Video's flash_attn_bsa_3d ---- */

/* Self-attention over a video's tokens (frames, height, width in grid, tokens in that order), whose queries and keys
 * are grouped into 3D blocks (chunk_q, chunk_k: LongCat's chunk_3d_shape_q and _k, each dividing grid per axis).
 * Each query block attends only to the key blocks selected for it, per (sample, head), from the blocks' mean q and
 * mean k (LongCat's mean_pooling_compression) and their score s_ij = mean_q_i . mean_k_j:
 * - sparsity (top-k; < 0: none): the n = int((1 - sparsity) nk) highest scores (ties: the lower block);
 * - cdf_threshold (< 0: none): the fewest top blocks of softmax(s_i / sqrt(head_dim)), in descending order, whose
 *   running sum stays <= the threshold (LongCat's searchsorted(right=True): possibly none);
 * - both: the larger of the two counts (LongCat's cdf_topk).
 * Within the selected blocks it is exact softmax attention with scale 1/sqrt(head_dim); a query block that selects
 * nothing outputs zeros, as LongCat's kernel does. The selection is not differentiated (a block index has no
 * gradient): backward runs through the selected blocks only.
 * Kept: the log-sum-exp per row and the selection, batch heads (4 tokens + nq nk) bytes (nq, nk: the blocks), so
 * backward reads forward's selection; a forward without keep (a checkpointed block) selects again when recomputed,
 * from q and k that the recompute reproduces bit for bit, by fixed-order float arithmetic: the same selection.
 * Flash-style: one (sample, head) a thread, query block by key block tiles, skipping every unselected tile; the
 * workspace is per thread and small (the pooled q and k, the block scores, a few tiles), stated exactly by
 * bsa_attention_workspace_bytes. Profile FLOPs count the tiles run (4 cq ck head_dim a tile forward, 10 backward);
 * where the selection is not kept (a dry step, a forward without keep) the top-k tiles (all, where only cdf_threshold
 * is given). No CUDA kernel: on a device's memory it is the CPU code, a counted fallback (ops_fallbacks).
 * Refused (ST_ERR_INVALID, one line): a grid or chunk not dividing, a product of grid other than tokens, neither
 * rule, a sparsity outside [0, 1) or keeping no block, a threshold outside (0, 1]. Backward needs the forward's
 * float output (out) where dq or dk is asked for. */
typedef struct bsa_shape {
    int64_t batch, heads, head_dim;
    int64_t grid[3], chunk_q[3], chunk_k[3];
    double sparsity, cdf_threshold;
} bsa_shape;

size_t bsa_attention_kept_bytes(const bsa_shape *s);
size_t bsa_attention_workspace_bytes(const bsa_shape *s, int threads, attn_pass pass);
st_status bsa_attention_forward(pool *p, const bsa_shape *s, attn_view out, attn_view q, attn_view k, attn_view v,
                                op_state *keep);
st_status bsa_attention_backward(pool *p, const bsa_shape *s, attn_view dq, attn_view dk, attn_view dv,
                                 attn_view dout, attn_view q, attn_view k, attn_view v, attn_view out,
                                 const op_state *keep);
/* The selection of a kept state: (batch, heads, nq, nk) bytes, 1 where query block i attends to key block j */
const unsigned char *bsa_attention_selection(const bsa_shape *s, const op_state *keep);

/* ---- adaLN modulation and gated residual (ops/cpu/modulate.c) ---- */

/* y = x * (1 + scale) + shift over (batch, tokens, d); shift and scale are (batch, d) with rows
 * `mod_stride` apart (chunks of a wider modulation vector); their gradients use the same stride.
 * y may alias x. Backward reads x and scale (so not in place when backward follows); backward itself may run in
 * place (dx == dy: dy becomes dx, nothing accumulated). */
void modulate_forward(float *y, const float *x, const float *shift, const float *scale, int64_t batch, int64_t tokens,
                      int64_t d, int64_t mod_stride);
void modulate_backward(float *dx, float *dshift, float *dscale, const float *dy, const float *x, const float *scale,
                       int64_t batch, int64_t tokens, int64_t d, int64_t mod_stride);

/* y = x + gate * h over (batch, tokens, d); gate (batch, d) with rows `gate_stride` apart. y may alias x.
 * Backward reads gate and h; dx += dy is skipped when dx == dy (an in-place residual stream). */
void gated_residual_forward(float *y, const float *x, const float *gate, const float *h, int64_t batch,
                            int64_t tokens, int64_t d, int64_t gate_stride);
void gated_residual_backward(float *dx, float *dgate, float *dh, const float *dy, const float *gate, const float *h,
                             int64_t batch, int64_t tokens, int64_t d, int64_t gate_stride);

/* ---- rotary position embedding (ops/cpu/rope.c) ---- */

/* Rotary position embedding with position ids, as diffusers' FluxPosEmbed (get_1d_rotary_pos_embed with
 * use_real, interleaved, float64 frequencies) and apply_rotary_emb(use_real_unbind_dim=-1): Flux.1's axes
 * (16, 56, 56) at theta 10000, Flux.2's four at theta 2000, Qwen Image's and HunyuanVideo's three.
 *
 * rope_table fills table (tokens, head_dim/2, 2) with (cos, sin) per pair from ids (tokens, n_axes): axis a of
 * even width axes_dim[a] owns the next axes_dim[a]/2 pairs (axes concatenated in order, sum(axes_dim) ==
 * head_dim), and its pair j turns by angle ids[t][a] / theta^(2j/axes_dim[a]), taken in double and rounded
 * once to float. Flux's text tokens have ids 0 (no rotation), its image token at row r, column c (0, r, c). */
void rope_table(float *table, const float *ids, int64_t tokens, int n_axes, const int64_t *axes_dim, double theta);
/* Multi-axis RoPE with interleaved sections (Ideogram 4's, Qwen2-VL's MRoPE): the same table from ids (tokens, 3),
 * every pair p of the head at its own frequency 1 / theta^(2p / head_dim), turned by the position on axis 1 when
 * p % 3 == 1 and p < 3 sections[1], on axis 2 when p % 3 == 2 and p < 3 sections[2], else on axis 0 (sections[0]
 * is the rest). Angles in double, cos and sin rounded once to float. */
void rope_table_mrope(float *table, const float *ids, int64_t tokens, int64_t head_dim, const int64_t *sections,
                      double theta);
/* Rotates every head of every token in place: pair p = (x[2p], x[2p+1]) of a head of token t becomes
 * (x0 c - x1 s, x1 c + x0 s) with (c, s) = table[t][p], in float as torch does in fp32. x is viewed with a row
 * stride and a batch stride (floats; heads * head_dim contiguous from a row's start), so q or k are rotated
 * where they lie in a packed or joint buffer; the table's tokens are the view's rows, the same for
 * every batch item. head_dim even. Independent of the thread count. */
void rope_forward(float *x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
                  int64_t batch_stride, const float *table);
/* The gradient through it, in place: the inverse rotation of dy. Unlike the other backward ops it overwrites
 * rather than accumulates: dx is dy's own buffer, as q and k's gradients are rotated where they lie. */
void rope_backward(float *dx, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
                   int64_t batch_stride, const float *table);
/* rope_forward and rope_backward on rotate-half pairs (Cosmos's apply_rotary_emb with use_real_unbind_dim=-2): pair p
 * of a head is (x[p], x[p + head_dim/2]), same table. */
void rope_half_forward(float *x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
                       int64_t batch_stride, const float *table);
void rope_half_backward(float *dx, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
                        int64_t batch_stride, const float *table);
/* The same rotate-half pairs with each head's own angles (LTX-2's apply_split_rotary_emb): table (tokens, heads,
 * head_dim/2, 2). */
void rope_split_forward(float *x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
                        int64_t batch_stride, const float *table);
void rope_split_backward(float *dx, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
                         int64_t batch_stride, const float *table);
/* ERNIE-Image's rotary embedding: rotate-half pairs (x[p], x[p + head_dim/2]) whose two elements take the table's
 * angles of their own index halved (p / 2 and (p + head_dim/2) / 2: its frequencies repeated pairwise over the head).
 * That is no rotation, so rope_repeated_backward applies the transpose (dx is dy's buffer, overwritten). Same table
 * as rope_forward's. */
void rope_repeated_forward(float *x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
                           int64_t batch_stride, const float *table);
void rope_repeated_backward(float *dx, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim,
                            int64_t row_stride, int64_t batch_stride, const float *table);

/* ---- embeddings, patches and fixed tables (ops/cpu/embed.c) ---- */

/* out (n,d) = rows idx[i] of table (rows,d). The indices are floats, as a sample's conditioning holds them (exact
 * below 2^24); one that is not a whole number in [0, rows) is ST_ERR_INVALID and nothing is written. */
st_status embedding_forward(float *out, const float *table, const float *idx, int64_t n, int64_t rows, int64_t d);
void embedding_backward(float *dtable, const float *dout, const float *idx, int64_t n, int64_t d);
/* embedding_backward with no gradient to the row padding_idx (torch's nn.Embedding(padding_idx=...); < 0: none). */
void embedding_backward_padded(float *dtable, const float *dout, const float *idx, int64_t n, int64_t d,
                               int64_t padding_idx);

/* A latent and its patches: images are video of one frame (frames = patch_t = 1). */
typedef struct patch_shape {
    int64_t batch, channels, frames, height, width;
    int64_t patch_t, patch; /* the patch's frames and its edge */
    int64_t tokens;         /* a sample's token rows: 0, the grid's; more, rows after the grid's that pad it (HiDream's
                               non-square latents), which no op here reads or writes */
} patch_shape;
/* Latent (batch, c, f, h, w) to patch tokens (batch, (f/pt)*(h/p)*(w/p), c*pt*p*p). Token (u*(h/p) + r)*(w/p) + q
 * is the patch at frame u, grid row r, column q; its feature ((ch*pt + z)*p + a)*p + b is pixel
 * (ch, u*pt + z, r*p + a, q*p + b): the flattening of a Conv3d weight (D, c, pt, p, p) (Conv2d's for images), so
 * the patch embedding is a linear layer. With s->tokens, sample b's tokens start at row b * s->tokens. */
void patchify_forward(float *tokens, const float *latent, const patch_shape *s);
void patchify_backward(float *dlatent, const float *dtokens, const patch_shape *s);
/* The order of a patch token's features: PATCH_CONV is patchify's (ch, z, a, b), that of a Conv weight and of
 * Flux's 2x2 latent packing, which Flux's and HunyuanVideo's proj_out also write; PATCH_DIT is (z, a, b, ch),
 * DiT's and SD3's. */
typedef enum patch_order { PATCH_CONV, PATCH_DIT } patch_order;
/* Tokens to the latent, patchify's layout, in either feature order. */
void unpatchify_forward(float *latent, const float *tokens, const patch_shape *s, patch_order order);
void unpatchify_backward(float *dtokens, const float *dlatent, const patch_shape *s, patch_order order);

/* The fixed 2D sine-cosine position table (rows*cols, d) of the DiT spec, row-major over the patch grid (diffusers'
 * get_2d_sincos_pos_embed at grid size (rows, cols)); d divisible by 4. */
void pos_embed_2d(float *table, int64_t rows, int64_t cols, int64_t d);
/* Timestep frequency embedding (n, dim) of the DiT spec: [cos(t f_j), sin(t f_j)], cosines first,
 * f_j = exp(-ln(max_period) j / (dim/2)); dim even. No gradient: timesteps are not trained. */
void timestep_embedding(float *emb, const float *t, int64_t n, int64_t dim, double max_period);

/* Flux.2's position ids (tokens, 4) on its axes (t, h, w, l), as Flux2Pipeline makes them: `text` tokens at
 * (0, 0, 0, k), then the image's rows x cols grid row-major, token (r, q) at (0, r, q, 0). */
void position_ids_flux2(float *ids, int64_t text, int64_t rows, int64_t cols);
/* Flux's position ids (tokens, 3) of a joint sequence: `text` tokens at (0, 0, 0), then the image's frames x rows x
 * cols patch grid in that order, token (u, r, q) at (u, r, q): Flux's images at (0, r, q), HunyuanVideo's video. */
void position_ids_grid(float *ids, int64_t text, int64_t frames, int64_t rows, int64_t cols);
/* LongCat-Image's (LongCatImagePipeline.prepare_pos_ids): text token k at (0, k, k), then the grid's token (r, q)
 * at (1, offset + r, offset + q), offset being the pipeline's text length (tokenizer_max_length), not `text`. */
void position_ids_longcat(float *ids, int64_t text, int64_t rows, int64_t cols, int64_t offset);
/* Qwen Image's centred ids (QwenEmbedRope with scale_rope), same layout: image token (r, q) at
 * (0, r - ceil(rows / 2), q - ceil(cols / 2)) (an even edge spans -rows/2 .. rows/2 - 1), and text token k after
 * the grid's largest half-edge, at m + k on every axis, m = max(floor(rows / 2), floor(cols / 2)). */
void position_ids_centred(float *ids, int64_t text, int64_t rows, int64_t cols);

/* ---- moving and adding tensors (ops/cpu/tensor.c): the glue between ops, so that it too is skipped on dry
 * buffers and runs with the op layer's threads ---- */

/* rows x cols floats from src (rows src_ld apart) to dst (rows dst_ld apart). */
void copy_rows(float *dst, int64_t dst_ld, const float *src, int64_t src_ld, int64_t rows, int64_t cols);
/* y += x over n floats. */
void add_to(float *y, const float *x, int64_t n);
/* y (rows, n) += row (n) on every row. */
void add_row(float *y, const float *row, int64_t rows, int64_t n);
/* n bytes from src to dst (ids and other non-float data). */
void copy_bytes(void *dst, const void *src, size_t n);
/* x *= s over n floats. */
void scale_by(float *x, int64_t n, float s);
/* x = 0 over n floats (a buffer reused within a kernel). */
void zero_floats(float *x, int64_t n);
/* y = x widened from bfloat16 (the high half of a float's bits) to float: exact, so a bf16 weight widened before its
 * GEMM gives the bits of the same rounded weight held in float. */
void bf16_to_float(float *y, const uint16_t *x, int64_t n);
/* y = x rounded to bfloat16, to nearest even (a NaN stays NaN), as torch's .to(torch.bfloat16): a tensor held in
 * bf16 under mixed_precision bf16 (docs/PRECISION.md). */
void float_to_bf16(uint16_t *y, const float *x, int64_t n);
/* x rounded to bfloat16 in place (float_to_bf16's rounding, widened back): under mixed_precision bf16 a tensor that
 * PyTorch makes in bf16 is made so where it is made, so that holding it in bf16 later loses nothing. */
void round_to_bf16(float *x, int64_t n);
/* y[b] (cols, rows) = x[b] (rows, cols) transposed, for each of `batch` matrices: a U-Net's channels-first planes
 * (C, H W) to tokens (H W, C) and back. */
void transpose_batched(float *y, const float *x, int64_t batch, int64_t rows, int64_t cols);
/* y (planes, inner) += v[p] on plane p (a per-channel vector broadcast over a feature map: ResnetBlock2D's time
 * embedding). Backward: dv[p] += the sum of dy's plane p, in order, in double. */
void plane_add_forward(float *y, const float *v, int64_t planes, int64_t inner);
void plane_add_backward(float *dv, const float *dy, int64_t planes, int64_t inner);
/* y (planes, inner) = x (1 + scale[p]) + shift[p] on plane p (Stable Cascade's TimestepBlock); with bf16 (mixed_precision
 * bf16) 1 + scale[p], the product and the sum each rounded to bf16, as PyTorch's bf16 x * (1 + a) + b makes them.
 * Backward: dscale[p] and dshift[p] += the plane's sums of dy x and dy (in order, in double; either may be NULL),
 * dx += dy (1 + scale[p]) (rounded as forward's), or with dx == dy, dy becomes dx in place. */
void plane_scale_shift_forward(float *y, const float *x, const float *scale, const float *shift, int64_t planes,
                               int64_t inner, bool bf16);
void plane_scale_shift_backward(float *dx, float *dscale, float *dshift, const float *dy, const float *x,
                                const float *scale, int64_t planes, int64_t inner, bool bf16);
/* transpose_batched's backward: dx[b] (rows, cols) += dy[b] (cols, rows) transposed. */
void transpose_batched_backward(float *dx, const float *dy, int64_t batch, int64_t rows, int64_t cols);
/* y += x s over n floats (a gradient through a scaled weight: x s rounded, then added). */
void add_scaled(float *y, const float *x, float s, int64_t n);
/* y = s a b elementwise over n floats (a Hadamard product; y may be a or b). */
void mul_scaled(float *y, const float *a, const float *b, float s, int64_t n);
/* y (a b, c d) += s kron(w1 (a, c), w2 (b, d)): LoKr's delta weight, y[i b + j, p d + q] += s w1[i, p] w2[j, q].
 * Backward from G, y's gradient: dw1[i, p] += s sum G[i b + j, p d + q] w2[j, q] and dw2[j, q] += s sum
 * G[i b + j, p d + q] w1[i, p] (each sum in double, in order; either may be NULL). */
void kron_add(float *y, const float *w1, const float *w2, float s, int64_t a, int64_t b, int64_t c, int64_t d);
void kron_backward(float *dw1, float *dw2, const float *G, const float *w1, const float *w2, float s, int64_t a,
                   int64_t b, int64_t c, int64_t d);
/* x /= d over n floats (a division by d, which is not a product with 1 / d's rounding). */
void div_by(float *x, int64_t n, float d);
/* x += c over n floats. */
void add_scalar(float *x, int64_t n, float c);
/* y (rows, cols) = x with row r times s[r] (a weight per token). Backward: dx += dy s[r] (a gradient of x alone is
 * forward's product: row_scale_forward(dx, dy, s, ...) writes it), ds[r] += the row's dy . x in order, in double;
 * dx or ds may be NULL. */
void row_scale_forward(float *y, const float *x, const float *s, int64_t rows, int64_t cols);
void row_scale_backward(float *dx, float *ds, const float *dy, const float *x, const float *s, int64_t rows,
                        int64_t cols);
/* y (rows, pad + n) = each row of x (rows, n) after pad copies of its first value (F.pad's "replicate" at the start).
 * Backward: dx += dy's row without the pad, and the row's first value += the pad's gradients, those first, in order. */
void pad_replicate_forward(float *y, const float *x, int64_t rows, int64_t n, int64_t pad);
void pad_replicate_backward(float *dx, const float *dy, int64_t rows, int64_t n, int64_t pad);
/* y (outer, channels, inner) += b[c] on channel c (a transposed convolution's bias over its patches' positions).
 * Backward: db[c] += every dy of channel c, in float, in order (outer, then inner), as the bias's gradient is summed
 * when written out (db may be NULL). */
void channel_add_forward(float *y, const float *b, int64_t outer, int64_t channels, int64_t inner);
void channel_add_backward(float *db, const float *dy, int64_t outer, int64_t channels, int64_t inner);
/* y (rows, d) = sum over i of w[i] x[r, i] for x (rows, k, d): a learned mix of k stacked inputs (a text encoder's
 * layers), summed in float in order of i from zero. Backward: dx[r, i] += dy[r] w[i]; dw[i] += dy[r] . x[r, i] over
 * each row in double, rounded, then added row after row (dx or dw may be NULL). */
void weighted_sum_forward(float *y, const float *x, const float *w, int64_t rows, int64_t k, int64_t d);
void weighted_sum_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t rows,
                           int64_t k, int64_t d);
/* y (batch, d) = each sample's rows of x (batch, rows, d) weighted by its mask (rows floats, mask_stride apart) over
 * the mask's sum, 0 where that sum is 0: a caption's mean over its tokens. The sums in float, in order of the rows.
 * Backward: dx[b, j] += dy[b] mask[j] / sum (nothing where the sum is 0); the mask takes no gradient. */
void masked_mean_forward(float *y, const float *x, const float *mask, int64_t batch, int64_t rows, int64_t d,
                         int64_t mask_stride);
void masked_mean_backward(float *dx, const float *dy, const float *mask, int64_t batch, int64_t rows, int64_t d,
                          int64_t mask_stride);
/* An attention key bias (batch, n) from each sample's mask of n keys (mask_stride floats apart): (1 - mask) scale in
 * float, as PixArt and LTX make a 0/1 encoder mask an additive bias (scale -10000). No backward: masks are not
 * trained. */
void mask_bias(float *bias, const float *mask, int64_t batch, int64_t n, int64_t mask_stride, float scale);

/* ---- a family's own loop (ops/cpu/tensor.c) ---- */

/* Runs fn(arg) on the host and returns its status, unless `out`, a buffer fn writes, is dry (pool.h): then it does
 * nothing and returns ST_OK. For what no op computes and depends on nothing an op could be told: a fixed table (a
 * position or rotary table, filled once at load or per step from the configuration), a sample's position ids or key
 * bias read from its text mask (with the mask's checks), a family's own layout of its conditioning. fn reads and
 * writes the step's buffers as a CPU fallback does (in the CUDA build: managed memory, between ops); a pool
 * allocation of its own is one a dry step does not make, so it holds only scratch it frees before it returns, if any.
 * Counted in the profile as a pointwise call. */
typedef st_status (*host_loop_fn)(void *arg);
st_status host_loop(const void *out, host_loop_fn fn, void *arg);

/* ---- mixture-of-experts routing (ops/cpu/moe.c) ---- */

/* HiDream's MoEGate and MOEFeedForwardSwiGLU's training path (DeepSeek-V3's routing): each of n tokens' gate
 * scores softmax(x Wg^T) over E experts (Wg (E, d), no bias), its k largest as torch.topk picks them (largest
 * first, a tie to the lower expert), their scores the weights, not renormalised (norm_topk_prob False). The n k
 * routed rows (token t's j-th choice, f = t k + j) are grouped by expert, in token order within each, so that
 * expert e's GEMMs run over rows start[e] .. start[e+1): always n k rows whatever the routing, so no allocation
 * depends on the data. The state lives in one caller's buffer of moe_route_bytes (int64-aligned), which backward
 * reads (the scores for softmax's backward); it is a function of x and Wg alone, so a recompute makes it bitwise
 * again. With bf16 set (mixed_precision bf16; moe_route_view clears it) the logits, the scores and each weighted
 * expert row are rounded to bf16, and the combined sum once, as PyTorch's bf16 MoEGate and combine make them. */
typedef struct moe_route {
    int64_t n, E, k;
    bool bf16;
    int64_t *start;  /* (E + 1) */
    float *scores;   /* (n, E): the softmax */
    float *weight;   /* (n, k): the chosen scores */
    int32_t *expert; /* (n, k): the chosen experts */
    int32_t *row;    /* (n, k): the routed row of choice f */
    int32_t *src;    /* (n k): the token of routed row i */
} moe_route;
size_t moe_route_bytes(int64_t n, int64_t E, int64_t k);
void moe_route_view(moe_route *r, void *buf, int64_t n, int64_t E, int64_t k);
void moe_route_forward(moe_route *r, const float *x, const float *wg, int64_t d);
/* Expert e's first routed row, start[e] (e = E: n k); on a dry step's state, which holds nothing, an even split,
 * so that the experts' GEMMs still count n k rows in all. */
int64_t moe_expert_start(const moe_route *r, int64_t e);
/* From dL/dweight (n, k): dx and dWg through the chosen scores' softmax. Workspace (n, E) floats. */
st_status moe_route_backward(pool *p, float *dx, float *dwg, const float *dweight, const moe_route *r, const float *x,
                             const float *wg, int64_t d);
/* xr (n k, d): routed row i is token src[i]'s x. Backward: dx[t] += the gradients of t's k rows. */
void moe_dispatch_forward(float *xr, const float *x, const moe_route *r, int64_t d);
void moe_dispatch_backward(float *dx, const float *dxr, const moe_route *r, int64_t d);
/* y (n, d) = sum over j of weight[t k + j] yr[row[t k + j]], j in order (writes y). Backward reads yr and the
 * weights: dyr += weight dy, dweight += dy . yr. */
void moe_combine_forward(float *y, const float *yr, const moe_route *r, int64_t d);
void moe_combine_backward(float *dyr, float *dweight, const float *dy, const float *yr, const moe_route *r, int64_t d);

/* ---- loss (ops/cpu/loss.c) ---- */

/* The rectified flow's input and target for `batch` samples of `per` values: x_t = (1 - t) x0 + t e and
 * target = e - x0 with sample i's t[i], and timesteps[i] = 1000 t[i]. No backward: nothing here is trained. */
void flow_interpolate(float *xt, float *target, float *timesteps, const float *x0, const float *noise, const float *t,
                      int64_t batch, int64_t per);

/* mean(w_b (pred - target)^2) over `batch` samples of `per` values, sample b weighted by weight[b] (NULL: all 1),
 * accumulated in double over fixed-size chunks so that the value does not depend on the thread count. Backward:
 * dpred += dloss * 2 w_b (pred - target) / n. */
float mse_forward(const float *pred, const float *target, const float *weight, int64_t batch, int64_t per);
void mse_backward(float *dpred, const float *pred, const float *target, const float *weight, int64_t batch, int64_t per,
                  float dloss);

/* Token cross-entropy (torch's cross_entropy per row, then weighted and summed): rows of `vocab` logits, row r at
 * logits + r vocab with its class targets[r] (a whole float in [0, vocab), exact below 2^24) and weight w_r (NULL:
 * 1); *loss = sum_r w_r (logsumexp(z_r) - z_r[target_r]), each row's log-sum-exp in double and the rows' terms
 * added in row order, so the value does not depend on the thread count. A mean is the caller's weights (HeartMuLa:
 * a frame mask over its count). A target that is not a class is ST_ERR_INVALID naming its row, *loss untouched.
 * Backward: dlogits += dloss w_r (softmax(z_r) - onehot(target_r)), the softmax from the row's log-sum-exp again
 * (nothing kept); targets as forward checked them. */
st_status cross_entropy_forward(const float *logits, const float *targets, const float *weight, int64_t rows,
                                int64_t vocab, float *loss);
void cross_entropy_backward(float *dlogits, const float *logits, const float *targets, const float *weight,
                            int64_t rows, int64_t vocab, float dloss);

/* ---- optimizer updates (ops/cpu/optim_update.c): elementwise, so the same bits at any split of the elements ---- */

typedef struct optim_coefs {
    float decay, b1, omb1, b2, omb2; /* decay = 1 - lr * weight_decay; omb = 1 - beta */
    float step, inv_bc2_sqrt, eps;   /* AdamW: lr / (1 - b1^t), 1 / sqrt(1 - b2^t); Lion: step = lr */
} optim_coefs;
/* torch.optim.AdamW (single-tensor): w *= decay; m, v updated; w += -step * (m / (sqrt(v) / sqrt(bc2) + eps)). */
void adamw_update(float *w, const float *g, float *m, float *v, int64_t n, const optim_coefs *k);
/* Lion (lion-pytorch): w *= decay; w += -lr * sign(b1 m + (1 - b1) g); then m = b2 m + (1 - b2) g. */
void lion_update(float *w, const float *g, float *m, int64_t n, const optim_coefs *k);
/* The sum of x's squares in double (the gradient norm's), the same bits whatever the threads: each backend sums in
 * an order of its own that nothing but n decides. */
double sum_squares(const float *x, int64_t n);
/* x = min(max(x, -hi), hi) elementwise: torch's clip_grad_value_. */
void clamp_abs(float *x, int64_t n, float hi);

#endif
