/* Helpers private to the CPU ops. */
#ifndef SEGTRAIN_OPS_CPU_INTERNAL_H
#define SEGTRAIN_OPS_CPU_INTERNAL_H

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "segtrain/ops.h"
#include "segtrain/safetensors.h"

/* The profile (common.c): each public op is a thin wrapper that times its _run body when profiling is on. */
extern int ops_profiling;
double prof_clock(void);
void prof_record(op_kind kind, double t0, double flops, double bytes);
static inline double prof_now(void) { return ops_profiling ? prof_clock() : 0; }
/* flops: the arithmetic of GEMMs and attention; bytes: what a memory-bound op reads and writes */
static inline void prof_add(op_kind kind, double t0, double flops, double bytes)
{
    if (ops_profiling) prof_record(kind, t0, flops, bytes);
}

/* x rounded to bfloat16 and back (round_to_bf16's, one value): an op's step under mixed_precision bf16 */
static inline float bf16_of(float x) { return sft_bf16_to_f32(sft_f32_to_bf16(x)); }

/* A dry step's buffers (pool.h) hold nothing: an op on them makes its pool allocations, counts its FLOPs in the
 * profile and computes nothing. It is told by the pointer it writes (or, in backward, the gradient it reads). */
static inline bool op_dry(const void *p) { return pool_is_dry_ptr(p); }

/* The thin public wrapper of an op that allocates nothing: `run` (its _run body) unless `out`, the pointer it
 * writes or the gradient it reads, is a dry pool's; its time, flops and bytes in the profile either way. */
#define OP_TIMED(out, run, kind, flops, bytes)                                                                        \
    do {                                                                                                              \
        const double t0_ = prof_now();                                                                                \
        if (!op_dry(out)) run;                                                                                        \
        prof_add((kind), t0_, (flops), (bytes));                                                                      \
    } while (0)

/* Allocates the op's kept state of `bytes` (MEM_ACTIVATIONS) into keep; a NULL keep keeps nothing. */
static inline st_status op_state_alloc(op_state *keep, pool *p, size_t bytes, const char *what)
{
    if (!keep) return ST_OK;
    *keep = (op_state){.pool = p, .bytes = bytes};
    return pool_alloc(p, bytes, MEM_ACTIVATIONS, what, &keep->data);
}

/* a * b + c: fused where the CPU has FMA (one rounding, one instruction; the vectoriser keeps it fused), else as
 * written, since a fmaf without the instruction is a library call per element */
#ifdef __FMA__
#define EXP_MADD(a, b, c) fmaf((a), (b), (c))
#else
#define EXP_MADD(a, b, c) ((a) * (b) + (c))
#endif

/* e^x to about 1 ulp (Cephes expf: Cody-Waite reduction, degree-5 polynomial on |r| <= ln2/2). x is clamped
 * to [-87, 88] so that 2^n stays a normal float and nothing overflows to inf: the activations only use
 * 1 / (1 + e^x), where the clamp changes values below 1e-37. The clamp is an integer min on the magnitude
 * bits because, under the default -ftrapping-math, gcc will not vectorise a float compare-and-select.
 * A NaN is clamped too, but every caller multiplies by x, so NaN still propagates. */
static inline float exp_f(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t sign = b & 0x80000000u, mag = b & 0x7fffffffu;
    uint32_t lim = 0x42b00000u - (sign >> 31) * (0x42b00000u - 0x42ae0000u); /* 88.0f, or 87.0f below 0 */
    mag = mag < lim ? mag : lim;
    b = sign | mag;
    memcpy(&x, &b, sizeof x);
    /* round x / ln2 to nearest with the 1.5 * 2^23 trick: rintf would be a call per element */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = EXP_MADD(n, -0.693359375f, x);
    r = EXP_MADD(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = EXP_MADD(p, r, 1.3981999507e-3f);
    p = EXP_MADD(p, r, 8.3334519073e-3f);
    p = EXP_MADD(p, r, 4.1665795894e-2f);
    p = EXP_MADD(p, r, 1.6666665459e-1f);
    p = EXP_MADD(p, r, 5.0000001201e-1f);
    p = EXP_MADD(p, r * r, r) + 1.0f;
    uint32_t e = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

/* gemm (ops.h) without the profile's record, for ops that record their own (linear.c) */
void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, const float *b,
               float beta, float *c);

/* Linear attention (attention_linear.c), the ATTN_LINEAR mechanism of the attention ops: a sample's kept state is
 * its heads' hd x hd sums and hd normalisers. The workspace holds the token segments' sums and each thread's chunk
 * buffers. rope: the mask's linear_rope, or NULL. */
size_t linear_attention_kept_floats(const attn_shape *s);
size_t linear_attention_workspace_floats(const attn_shape *s, int threads, attn_pass pass);
void linear_attention_forward(const attn_shape *s, int threads, float *ws, float *kept, const float *rope,
                              attn_view out, attn_view q, attn_view k, attn_view v);
void linear_attention_backward(const attn_shape *s, int threads, float *ws, const float *kept, const float *rope,
                               attn_view dq, attn_view dk, attn_view dv, attn_view dout, attn_view q, attn_view k,
                               attn_view v);

#endif
