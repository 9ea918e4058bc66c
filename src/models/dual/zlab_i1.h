/* ZLab I1 (SimpleTuner's ZlabI1Transformer2DModel), internal to src/models: its block (zlab_i1_block.c) and the
 * model (zlab_i1.c). */
#ifndef SEGTRAIN_MODELS_ZLAB_I1_H
#define SEGTRAIN_MODELS_ZLAB_I1_H

#include "models/dual/mmdit.h"

#define ZL_EPS 1e-6f /* every RMSNorm's, q's and k's too (MMDIT_RMS_EPS) */

/* One stream's weights: the fused q, k, v projection (3 D: q, then k, then v), the attention's output projection,
 * and the SwiGLU feed-forward (w12: the gate half, then the up half; w3). */
typedef struct zl_stream {
    lin_layer qkv, proj, w12, w3;
} zl_stream;

/* i1DiTBlock (two streams: the image's rows, then the text's, in one state tensor) or a layer of the text adapter
 * (one stream: the text's), per stream s:
 *   q_s, k_s, v_s = qkv_s(RMSNorm_1(x_s));  q and k RMSNorm-ed per head (one weight for both streams), rotated
 *   joint attention over [image; text], the text's padding keys masked; the padding's outputs zeroed
 *   x1_s = x_s + RMSNorm_3(proj_s(o_s))                     (adapter: no RMSNorm_3)
 *   y_s = x1_s + RMSNorm_4(w3_s(silu(a) * b)),  [a, b] = w12_s(RMSNorm_2(x1_s))   (adapter: no RMSNorm_4)
 *   and the text's padding rows of y zeroed.
 * The four norms (norm1 .. norm4) are each one weight over both streams; no modulation (the class ignores its
 * timestep). */
typedef struct zl_block {
    struct model *m;
    int streams;   /* 2: the image's rows then the text's; 1: the text's alone */
    bool sandwich; /* RMSNorms around the attention's and the feed-forward's outputs (norm3, norm4) */
    int norm1, norm2, norm3, norm4, norm_q, norm_k;
    zl_stream s[2];
    int64_t ffn;
    /* a step's, the model's: the joint rows' per-sample rotary table (B, S, head_dim / 2, 2), the key mask, and the
     * text rows' keep mask (B L: 1 a token, 0 padding); a NULL pointer: none */
    float *const *rope;
    const attn_mask *const *mask;
    float *const *keep;
} zl_block;

/* The weight names of a block below its prefix: norm1 .. norm4, q and k norms, then per stream qkv, proj, w12, w3 */
typedef struct zl_names {
    const char *norm[4], *norm_q, *norm_k, *stream[2][4];
} zl_names;
extern const zl_names zl_block_names, zl_adapter_names[2];
void zl_block_register(param_set *s, zl_block *b, const char *prefix, const zl_names *n, const model_config *c);

extern const block_kind zl_block_kind;

#endif
