/* A linear layer of a model: a weight (out, in) and bias by parameter index, and optionally a LoRA adapter,
 * y = x W^T + b + (alpha / r) (x A^T) B^T with A (r, in) and B (out, r). The adapter's intermediate x A^T is
 * recomputed in backward rather than kept, so an adapter adds no kept bytes, only a small workspace. */
#ifndef SEGTRAIN_LIN_H
#define SEGTRAIN_LIN_H

#include "segtrain/lycoris.h"
#include "segtrain/params.h"

typedef struct lin_layer {
    int w, b;           /* parameter indices; b < 0: no bias */
    int lora_a, lora_b; /* < 0: no adapter */
    int64_t in, out, rank;
    float scale; /* alpha / rank */
    lyco_adapter lyco; /* lora_type lycoris (params.h): LoKr's, LoHa's or full's adapter; zero: none (LoCon is the
                        * LoRA above, under the package's names) */
} lin_layer;

/* Registers "<name>.weight", "<name>.bias" and, with rank > 0, "<name>.lora_A.weight" (r, in) and
 * "<name>.lora_B.weight" (out, r): the adapters name the weight they adapt. Under the set's lycoris spec
 * (params.h) the spec alone decides, and the adapter is its algorithm's (lycoris.h), rank and alpha unused. With an
 * adapter, the base weight and bias are frozen. A frozen weight is held in bf16 under the set's bf16_base (params.h): lin_forward and
 * lin_backward widen it into workspace (as many floats as the weight) around each GEMM, so that only the layer's
 * own code reads it. */
lin_layer lin_register(param_set *s, const char *name, int64_t in, int64_t out, bool bias, int64_t rank, float alpha,
                       bool trainable);

/* y (n, out) = the layer applied to x (n, in). The adapter's workspace comes from p (MEM_WORKSPACE). */
st_status lin_forward(param_set *s, pool *p, const lin_layer *l, float *y, const float *x, int64_t n);
/* dx (may be NULL) += dL/dx; accumulates the gradients of the trainable parameters. */
st_status lin_backward(param_set *s, pool *p, const lin_layer *l, float *dx, const float *dy, const float *x,
                       int64_t n);
/* Whether the base weight itself trains (no adapter, not frozen): what lin_backward_gated needs. */
bool lin_trains_weight(const param_set *s, const lin_layer *l);
/* lin_backward of a layer whose output y (batch * tokens rows) feeds r + gate * y, also accumulating gate's
 * gradient, without y (gated_linear_backward): forward need not keep y. Only when lin_trains_weight. */
st_status lin_backward_gated(param_set *s, pool *p, const lin_layer *l, float *dx, float *dgate, const float *dy,
                             const float *x, const float *gate, int64_t batch, int64_t tokens, int64_t gate_stride);

#endif
