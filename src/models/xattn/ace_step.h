/* ACE-Step 1.5 (AceStepTransformer1DModel), internal to src/models: the block (ace_step_block.c) and the model
 * (ace_step.c). */
#ifndef SEGTRAIN_MODELS_ACE_STEP_H
#define SEGTRAIN_MODELS_ACE_STEP_H

#include "models/core/internal.h"

#define ACE_EPS 1e-6f /* rms_norm_eps: every RMSNorm (blocks, q/k per head, norm_out) */
#define ACE_MOD_ROWS 6 /* m->ctx.mod: the summed timestep projections (shift, scale, gate, c_shift, c_scale, c_gate) */

/* A block's weights. The model provides m->ctx.mod (B, 6 D) with m->ctx.dmod, m->ctx.text (B L, D: the condition
 * after condition_embedder) with m->ctx.dtext, and m->ctx.rope (T, head_dim / 2, 2) for the rotate-half rotation. */
typedef struct ace_block {
    struct model *m;
    int table;                          /* scale_shift_table (1, 6, D) */
    int norm1, norm2, norm3;            /* self_attn_norm, cross_attn_norm, mlp_norm (D) */
    attn_weights sa, ca;                /* self_attn, cross_attn; their norm_q and norm_k per head (head_dim) */
    lin_layer gate, up, down;
    int64_t ffn, kv_heads, window;        /* window 0: full attention */
} ace_block;

void ace_block_register(param_set *s, ace_block *b, const char *prefix, const model_config *c);

extern const block_kind ace_block_kind;

#endif
