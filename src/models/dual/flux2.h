/* Flux.2 (diffusers' Flux2Transformer2DModel), internal to src/models: its blocks (flux2_block.c) and what the
 * model (flux2.c) shares with them. The joint sequence's sizes and layout are the dual-stream families' (mmdit.h's
 * mm_dims: text first, then image). */
#ifndef SEGTRAIN_MODELS_FLUX2_H
#define SEGTRAIN_MODELS_FLUX2_H

#include "models/dual/mmdit.h"

#define F2_EPS 1e-6f          /* every LayerNorm (without affine) and the q/k RMSNorms */
#define F2_ROPE_THETA 2000.0  /* Flux2PosEmbed's */
#define F2_MLP_RATIO 3        /* the feed-forward's width F = 3 D (mlp_ratio 3.0, every published config) */

/* The modulations every block shares: the model makes them once per step from SiLU(c)
 * (double_stream_modulation_img / _txt: (B, 6D) each, shift, scale, gate of attention then of the feed-forward;
 * single_stream_modulation: (B, 3D)); blocks read them and accumulate their gradients into dmod. */
enum { F2_MOD_IMG, F2_MOD_TXT, F2_MOD_SINGLE, F2_MOD_N };
typedef struct f2_shared {
    float *mod[F2_MOD_N], *dmod[F2_MOD_N];
} f2_shared;

/* One stream's weights, none with a bias. A double block has an image stream [0] and a text stream [1]: q, k, v,
 * out and the SwiGLU feed-forward ff_in (D -> 2F: gate half, then the linear half) and ff_out (F -> D). A single
 * block has one: ff_in is the fused to_qkv_mlp_proj (D -> 3D + 2F: q, k, v, then the feed-forward's input) and out
 * the fused to_out ([attention; SwiGLU] D + F -> D); q, k, v unused. */
typedef struct f2_stream {
    lin_layer q, k, v, out, ff_in, ff_out;
    int norm_q, norm_k; /* RMSNorm weights (head_dim) */
} f2_stream;

typedef struct f2_block {
    struct model *m;
    const f2_shared *sh;
    f2_stream s[2];
} f2_block;

void f2_double_register(param_set *ps, f2_block *b, int i, const model_config *c);
void f2_single_register(param_set *ps, f2_block *b, int i, const model_config *c);

extern const block_kind f2_double_kind, f2_single_kind;

#endif
