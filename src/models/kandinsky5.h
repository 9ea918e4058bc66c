/* Kandinsky 5 image (Kandinsky5Transformer3DModel, text-to-image), internal to src/models: the blocks
 * (kandinsky5_block.c) and the model (kandinsky5.c). */
#ifndef SEGTRAIN_MODELS_KANDINSKY5_H
#define SEGTRAIN_MODELS_KANDINSKY5_H

#include "internal.h"

#define K5_LN_EPS 1e-5f             /* nn.LayerNorm's default, every LayerNorm of the model */
#define K5_QK_EPS 1.1920928955078125e-07f /* nn.RMSNorm(eps=None) on float32 q and k: finfo(float32).eps */

/* A block's weights: a text block (Kandinsky5TransformerEncoderBlock: self-attention and feed-forward on the text,
 * 6 modulation rows) or a visual block (Kandinsky5TransformerDecoderBlock: self-attention, cross-attention to the
 * final text, feed-forward, 9 rows). The model provides m->ctx.cs = SiLU(time_embed) (B, time_dim) with m->ctx.dcs,
 * and for the visual blocks m->ctx.text (B L, D: the text blocks' output) with m->ctx.dtext; *rope is the block's
 * rotary table (tokens, head_dim / 2, (cos, sin)), interleaved pairs. */
typedef struct k5_block {
    struct model *m;
    bool visual;
    float *const *rope;
    lin_layer mod, q, k, v, out, cq, ck, cv, cout, ff0, ff2;
    int norm_q, norm_k, cnorm_q, cnorm_k; /* RMSNorm weights per head (head_dim) */
    int64_t ffn, tdim;
} k5_block;

void k5_block_register(param_set *s, k5_block *b, const char *prefix, const model_config *c);

extern const block_kind k5_text_block_kind, k5_visual_block_kind;

#endif
