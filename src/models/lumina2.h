/* Lumina-Image 2.0 (Lumina2Transformer2DModel) and Z-Image (ZImageTransformer2DModel), internal to src/models: the
 * block (lumina2_block.c) and the model (lumina2.c). */
#ifndef SEGTRAIN_MODELS_LUMINA2_H
#define SEGTRAIN_MODELS_LUMINA2_H

#include "internal.h"

#define LUMINA_QK_EPS 1e-5f /* the attention's per-head RMSNorms */
/* a modulated block's modulation rows: a zero shift, scale_msa, tanh(gate_msa), scale_mlp, tanh(gate_mlp) */
#define LUMINA_MOD 5

/* A block's weight names below its prefix: Lumina2TransformerBlock's or ZImageTransformerBlock's */
typedef struct lumina_names {
    const char *q, *k, *v, *out, *norm_q, *norm_k, *w1, *w2, *w3, *ada, *norm1_modulated, *norm1, *norm2, *ffn_norm1,
        *ffn_norm2;
} lumina_names;
extern const lumina_names lumina2_names, zimage_names;

/* A block's weights and options. The model provides m->ctx.cs (B, min(D, 1024): SiLU of the timestep embedding)
 * with m->ctx.dcs, and per sequence *rope, the per-sample rotary tables (B, rows, head_dim / 2, 2), and *mask (the
 * sequence's key mask, or NULL). */
typedef struct lumina_block {
    struct model *m;
    bool modulated;     /* noise_refiner and layers: norm1 is LuminaRMSNormZero (scale and tanh gates from temb) */
    int64_t rows;       /* per sample: the sequence's (the caption's L, the image's T, the joint L + T) */
    int64_t kv_heads, ffn;
    float eps;          /* norm_eps: the block's four RMSNorms */
    int64_t ada_in;     /* norm1.linear's input: m->ctx.cs's width (Lumina: SiLU(temb), Z-Image: temb) */
    const lumina_names *names;
    lin_layer ada;      /* norm1.linear (modulated) */
    int norm1, norm2, ffn_norm1, ffn_norm2; /* RMSNorm weights (D) */
    lin_layer q, k, v, out, w1, w2, w3;
    int norm_q, norm_k; /* per head */
    float *const *rope;
    const attn_mask *const *mask;
} lumina_block;

void lumina_block_register(param_set *s, lumina_block *b, const char *prefix, const model_config *c);

extern const block_kind lumina_block_kind;

#endif
