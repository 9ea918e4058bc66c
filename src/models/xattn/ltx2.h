/* LTX-2 (ltxvideo2), internal to src/models: the audio-video block (ltx2_block.c) and the model (ltx2.c), diffusers'
 * LTX2VideoTransformer3DModel as LTX-2.0 configures it. */
#ifndef SEGTRAIN_MODELS_LTX2_H
#define SEGTRAIN_MODELS_LTX2_H

#include "models/core/internal.h"

#define LTX2_EPS 1e-6f /* norm_eps: the blocks' RMSNorms and q and k's */
#define LTX2_MOD_ROWS 11 /* a stream's modulation rows in a block: six adaLN, four cross-modal, the cross-modal gate */

/* What the model makes once per step and every block reads, with the gradients the blocks accumulate. Per
 * stream s (0 video, 1 audio): mod[s] (B, 6 w) the adaLN rows, ca[s] (B, 5 w) the cross-modal rows (a2v scale,
 * shift, v2a scale, shift, then the gate), text[s] (B L, w) the prompt as the stream's cross-attention reads it,
 * w the stream's width. The rotary tables (tokens, width / 2, (cos, sin)): self[s] the stream's self-attention's,
 * cross[s] the cross-modal attentions' (the audio width, split by the stream's own heads). */
typedef struct ltx2_ctx {
    float *mod[2], *dmod[2], *ca[2], *dca[2], *text[2], *dtext[2];
    float *self[2], *cross[2];
    const attn_mask *mask; /* the prompt's padding, for both streams' cross-attention */
    int64_t tokens[2];     /* video tokens, audio tokens per sample */
} ltx2_ctx;

enum { LTX2_SELF_V, LTX2_SELF_A, LTX2_TEXT_V, LTX2_TEXT_A, LTX2_A2V, LTX2_V2A, LTX2_ATTNS };

typedef struct ltx2_block {
    struct model *m;
    const ltx2_ctx *ctx;
    attn_weights att[LTX2_ATTNS]; /* q and k's RMSNorm weights over each attention's whole width */
    lin_layer ff0[2], ff2[2];   /* ff, audio_ff */
    int table[2], ca_table[2]; /* scale_shift_table (6, w) and the cross-modal one (5, w), per stream */
} ltx2_block;

/* Registers transformer_blocks.<index>'s weights in diffusers' names. */
void ltx2_block_register(param_set *s, ltx2_block *b, int index, const model_config *c);

extern const block_kind ltx2_block_kind;

#endif
