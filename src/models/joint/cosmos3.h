/* Cosmos 3 (diffusers' Cosmos3OmniTransformer), internal to src/models: its mixture-of-transformers block
 * (mot_block.c) and model (cosmos3.c). */
#ifndef SEGTRAIN_MODELS_COSMOS3_H
#define SEGTRAIN_MODELS_COSMOS3_H

#include "models/joint/joint.h"

/* One stream's weights in a block: the understanding stream's (self_attn.to_q, ..., mlp, input_layernorm, ...) or the
 * generation stream's (add_q_proj, ..., mlp_moe_gen, input_layernorm_moe_gen, ...) */
typedef struct mot_set {
    int norm1, norm2;         /* input_layernorm, post_attention_layernorm (RMSNorm weights, hidden_size) */
    attn_weights att;         /* D -> heads x hd (k, v: kv_heads x hd) and back; norm_q and norm_k per head */
    lin_layer gate, up, down; /* the SwiGLU: down(silu(gate h) up h) */
} mot_set;

/* Cosmos3VLTextMoTDecoderLayer over a sample's rows [the prompt's `split` rows; the generated rows]: each stream
 * through its own RMSNorms, projections and SwiGLU, one attention over both (the model's mask: the prompt causal,
 * the generated rows seeing everything), q and k RMSNorm-ed per head and turned by the model's per-sample rotary
 * tables (rotate-half pairs over the whole head). No modulation: the time enters with the generated rows. */
typedef struct mot_block {
    struct model *m;
    int64_t rows, split, ffn, kv_heads, head_dim;
    float eps;
    mot_set s[2];
    float *const *rope; /* (B, rows, head_dim / 2, 2) */
    const attn_mask *const *mask;
} mot_block;

/* Registers block `prefix`'s weights; under LoRA the understanding stream stays frozen without adapters (SimpleTuner
 * trains Cosmos 3's generation layers) and the generation stream's linears take them as the config says. */
void mot_block_register(param_set *s, mot_block *b, const char *prefix, const model_config *c);

extern const block_kind mot_block_kind;

#endif
