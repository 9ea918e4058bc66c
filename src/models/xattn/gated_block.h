/* The gated-modules block that Cosmos 2 (cosmos.c) and Kandinsky 5 (kandinsky5.c) share, internal to src/models
 * (gated_block.c). Each module (self-attention, an optional cross-attention, the feed-forward) is LayerNorm-ed,
 * modulated and gated by its own (shift, scale, gate) rows; the families differ in where the rows come from (their
 * hooks), in their rotary pairs, and in their names. */
#ifndef SEGTRAIN_MODELS_GATED_BLOCK_H
#define SEGTRAIN_MODELS_GATED_BLOCK_H

#include "models/core/internal.h"

typedef struct gated_block gated_block;

/* A block's weights and options (the family registers the weights under its own names). The model provides
 * m->ctx.text (B L, its width: what the cross-attention's keys and values read) with m->ctx.dtext, and *rope, the
 * self-attention's rotary table (the block's tokens, head_dim / 2, (cos, sin)). */
struct gated_block {
    struct model *m;
    bool cross;         /* a cross-attention to m->ctx.text between the two (Kandinsky 5's text blocks have none) */
    bool text_rows;     /* the block's rows are the text's (m->shape.text), not the image's */
    bool rotate_half;   /* the rotary pairs: rotate-half (Cosmos) or interleaved (Kandinsky 5) */
    float ln_eps, qk_eps;
    float *const *rope;
    int64_t ffn;        /* the feed-forward's width */
    attn_weights sa, ca; /* the self-attention's and the cross-attention's, their q and k norms per head */
    lin_layer ff0, ff2;
    /* mod (B, 3 modules x 3 D; 2 without the cross-attention) from the model's context, module i's (shift, scale,
     * gate) at i 3 D; back: dmod into the weights' and the context's gradients */
    st_status (*modulate)(const gated_block *b, float *mod);
    st_status (*modulate_back)(const gated_block *b, const float *dmod);
    /* the hooks' weights: Kandinsky 5's one linear; Cosmos's three AdaLN-LoRA pairs of width lora */
    lin_layer mod, ada1[3], ada2[3];
    int64_t lora;
    /* LongCat-Video's (longcat_video.c): */
    bool fused;         /* the self-attention's q, k, v one GEMM (sa.q: attn.qkv), the cross-attention's k, v one
                           (ca.k) */
    bool plain_cross;   /* the cross-attention reads an affine LayerNorm (cross_norm_w, _b) of the stream and adds
                           ungated: no modulation rows of its own */
    bool swiglu;        /* the feed-forward ff2(silu(ff0 h) * ff1 h), not ff2(gelu_erf(ff0 h)) */
    lin_layer ff1;
    int cross_norm_w, cross_norm_b;
};
/* The modulation hook of a block whose rows are mod(m->ctx.cs) (B, its modulations), cs the model's SiLU(time
 * embedding) a sample, and back into m->ctx.dcs (Kandinsky 5's, LongCat-Video's) */
st_status gated_modulate_linear(const gated_block *b, float *mod);
st_status gated_modulate_linear_back(const gated_block *b, const float *dmod);

extern const block_kind gated_block_kind;

#endif
