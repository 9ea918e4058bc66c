/* Flux.3 (diffusers' Flux3Transformer2DModel), internal to src/models: its block (flux3_block.c) and the model
 * (flux3.c). */
#ifndef SEGTRAIN_MODELS_FLUX3_H
#define SEGTRAIN_MODELS_FLUX3_H

#include "internal.h"

/* A mode block (one modulation set for every row) or a single block (its first `split` rows, the text, read set 0,
 * the rest set 1). The model provides each sequence's modulation *mod (B, sets, 3D: shift, scale, gate), gathers its
 * gradient in *dmod, and the per-sample rotary tables *rope (B, rows, head_dim / 2, 2). */
typedef struct f3_block {
    struct model *m;
    int64_t rows, split, ffn; /* per sample; the text rows of a single block (0: one set); the feed-forward's width */
    float eps;                /* the LayerNorm's and the q/k RMSNorms' */
    float *const *mod, *const *dmod, *const *rope;
    lin_layer q, k, v, out, ff_in, ff_out; /* ff_in: D -> 2F, the SwiGLU's gate half first */
    int norm_q, norm_k;
} f3_block;

/* Registers prefix's weights, trained as the config says (LoRA's adapters or the weights themselves); used false:
 * loaded and saved as they are, never trained or run (the reference-image mode's) */
void f3_block_register(param_set *s, f3_block *b, const char *prefix, const model_config *c, bool used);

extern const block_kind f3_block_kind;

#endif
