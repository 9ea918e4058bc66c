/* A linear layer of a model: a weight (out, in) and bias by parameter index, and optionally a LoRA adapter,
 * y = x W^T + b + (alpha / r) (x A^T) B^T with A (r, in) and B (out, r). The adapter's intermediate x A^T is
 * recomputed in backward rather than kept, so an adapter adds no kept bytes, only a small workspace. */
#ifndef SEGTRAIN_LIN_H
#define SEGTRAIN_LIN_H

#include "segtrain/lycoris.h"
#include "segtrain/ops.h"
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

/* A frozen linear weight a model registers outside lin_register (its timestep and text embedders, its final layer's
 * modulation and projection): quantized under the set's quant_base as quanto quantizes that nn.Linear, unless one of
 * the family's exclude patterns names `module` (then it stays as registered). w < 0: nothing. */
void lin_quantize_frozen(param_set *s, int w, const char *module);
/* Parameter w as float for a GEMM: itself, or a bf16 or quantized one widened into workspace from p (*tmp, which the
 * caller frees with pool_free; NULL when not widened). */
st_status lin_weight_float(param_set *s, pool *p, int w, const float **out, float **tmp);

/* y (n, out) = the layer applied to x (n, in). The adapter's workspace comes from p (MEM_WORKSPACE). A layer that
 * ramtorch streams (params.h's layer_in) has its weight and bias brought onto the device around the GEMM, here and
 * in lin_backward's dx. */
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

/* A convolution of a model (a U-Net's Conv2d, groups 1, or a depthwise 3 x 3 one, groups = channels): weight
 * (out, in / groups, k, k) and bias by parameter index, and, under the set's lycoris spec, a LyCORIS adapter as the
 * package builds it on a Conv2d. LoCon on a groups-1 conv (locon_register): lora_down a conv of the layer's kernel,
 * stride and padding to r channels, lora_up a 1 x 1 conv back, y gains scale up(down(x)); like lin's LoRA, the
 * r-channel intermediate is workspace, made again in backward. LoKr, LoHa and full, and LoCon on a depthwise conv
 * (lyco_conv_register; the package forces a grouped conv's LoCon off bypass): the convolution runs with the weight
 * W + dW (and full's bias b + diff_b), built in workspace in forward and again in backward, whose weight gradient
 * gives the adapter's (lyco_delta_backward). None adds kept bytes. */
typedef struct conv_layer {
    int w, b;     /* b < 0: no bias */
    int down, up; /* LoCon's lora_down and lora_up on a groups-1 conv; < 0: none */
    int64_t rank;
    float scale;
    lyco_adapter lyco; /* a rebuilt adapter (LoKr's, LoHa's, full's, a depthwise conv's LoCon); LYCO_NONE: none */
    bool depthwise;    /* groups = channels, 3 x 3, stride and padding 1, channels last (depthwise3x3_forward) */
} conv_layer;

/* Registers "<name>.weight" (out, in, k, k) and "<name>.bias"; an adapter where the set's lycoris spec reaches the
 * layer (the base then frozen). A frozen weight is quantized under the set's quant_base (quanto's QConv2d), unless
 * an exclude pattern names it, and dequantized into workspace around each convolution reading it. */
conv_layer conv_register(param_set *s, const char *name, int64_t in, int64_t out, int64_t k, bool trainable);
/* A depthwise 3 x 3 convolution (Stable Cascade's SDCascadeResBlock.depthwise): weight (channels, 1, 3, 3), its
 * adapter the package's on a conv of in_channels / groups = 1 input channel. The package's LoKr bypass fails on a
 * grouped conv: LoKr there under bypass_mode is left to param_set_check, which refuses it. Its conv_shape: batch,
 * h, w and out (the channels); x and y (batch, h, w, channels). */
conv_layer conv_register_depthwise(param_set *s, const char *name, int64_t channels, bool trainable);
/* y = the convolution of x (c's shape, which must be the layer's) plus the adapter's. */
st_status conv_layer_forward(param_set *s, pool *p, const conv_layer *l, float *y, const float *x, const conv_shape *c);
/* dx (may be NULL) += dL/dx; accumulates the trainable parameters' gradients (conv2d_backward's, and the
 * adapter's). */
st_status conv_layer_backward(param_set *s, pool *p, const conv_layer *l, float *dx, const float *dy, const float *x,
                              const conv_shape *c);

#endif
