/* Cosmos 2 (CosmosTransformer3DModel, text-to-image), internal to src/models: the block (cosmos_block.c) and the
 * model (cosmos.c). */
#ifndef SEGTRAIN_MODELS_COSMOS_H
#define SEGTRAIN_MODELS_COSMOS_H

#include "internal.h"

#define COSMOS_LN_EPS 1e-6f
#define COSMOS_QK_EPS 1e-5f /* diffusers Attention's RMSNorm of q and k per head */
#define COSMOS_MOD_ROWS 5   /* m->ctx.mod: temb's three rows (shift, scale, gate), then the final layer's two */

/* A block's weights. The model provides m->ctx.cs = SiLU(embedded_timestep) (B, D) with m->ctx.dcs, m->ctx.mod's
 * rows 0-2 (temb) with m->ctx.dmod, m->ctx.text (B L, text_dim: the raw text, which nothing trains) and m->ctx.rope
 * (T, head_dim / 2, 2) for the rotate-half rotation. */
typedef struct cosmos_block {
    struct model *m;
    lin_layer ada1[3], ada2[3]; /* norm1..3's AdaLN-LoRA: linear_1 (D -> r), linear_2 (r -> 3 D) */
    lin_layer q, k, v, out, cq, ck, cv, cout, ff0, ff2;
    int norm_q, norm_k, cnorm_q, cnorm_k; /* RMSNorm weights per head (head_dim) */
    int64_t ffn, lora;
} cosmos_block;

void cosmos_block_register(param_set *s, cosmos_block *b, const char *prefix, const model_config *c);

extern const block_kind cosmos_block_kind;

#endif
