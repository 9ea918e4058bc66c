/* Flux.3 (diffusers' Flux3Transformer2DModel) and Qwen-Image 2.1 (QwenImage21Transformer2DModel), internal to
 * src/models: their block (flux3_block.c) and models (flux3.c, qwen_image21.c). */
#ifndef SEGTRAIN_MODELS_FLUX3_H
#define SEGTRAIN_MODELS_FLUX3_H

#include "models/joint/joint.h"

/* A block whose rows all read one modulation set, or whose first `split` rows (the text) read set 0 and the rest set
 * 1. The model provides each sequence's modulation *mod (B, sets, W: shift, scale, gate, W = 3D; twice, W = 6D, when
 * sequential), gathers its gradient in *dmod, and gives the per-sample rotary tables *rope (B, rows, head_dim / 2, 2)
 * and the attention's mask *mask (mask NULL: none). */
typedef struct f3_block {
    struct model *m;
    int64_t rows, split, ffn; /* per sample; the text rows (0: one set); the feed-forward's width */
    float eps;                /* the LayerNorms' and the q/k RMSNorms' */
    bool sequential;          /* Qwen-Image 2.1's: attention, then the feed-forward on its own norm */
    float *const *mod, *const *dmod, *const *rope;
    const attn_mask *const *mask;
    attn_weights att;
    lin_layer ff_in, ff_up, ff_out; /* ff_up.w < 0: ff_in is fused, D -> 2F, its gate half first */
    /* MiniMax-H3's blocks (sequential; every field below zero for Flux.3 and Qwen-Image 2.1): */
    bool minimax;      /* RMSNorms with weights (norm1, norm2) for the LayerNorms; ff_in (ff.net.0.proj) fused, its
                          value half first; q, k, v D -> inner and to_out back */
    bool plain;        /* ... no modulation: h = norm(x), y = x + r (its token refiner's blocks) */
    bool tagged;       /* ... its own adaln_proj.linear from m->ctx.cs (B rows) gives 3 sets a sample, one a modality
                          (video, text, audio): the text rows read set 1, the rest set 0 */
    int64_t inner;     /* heads x head width (0: hidden_size) */
    int64_t rot;       /* rotate-half pairs on each head's first rot channels, per-sample tables (rows, rot / 2, 2);
                          0: interleaved pairs over the whole head */
    float qk_eps;      /* the q/k norms' (0: eps) */
    int norm1, norm2;
    lin_layer ada;
} f3_block;

/* The timestep embedding run for t and for 0 through the same weights (Flux.3's text mode, Qwen-Image 2.1's
 * causal_condition): SiLU of the first in m->ctx.cs (its gradient m->ctx.dcs), of the second in zs (dzs). */
typedef struct time_pair {
    temb t, z;
    float *zero, *zs, *dzs;
} time_pair;
void time_pair_register(param_set *s, time_pair *p, const char *linear_1, const char *linear_2, int64_t in, int64_t D,
                        bool trainable);
/* Takes the step's buffers and runs both (timesteps: the classes' 1000 t, segtrain's own) */
st_status time_pair_forward(model *m, time_pair *p, const float *timesteps, bool train);
/* From m->ctx.dcs and dzs back to the shared weights; its workspace from k */
st_status time_pair_backward(model *m, time_pair *p, scratch *k);

/* Registers prefix's weights, trained as the config says (LoRA's adapters or the weights themselves); used false:
 * loaded and saved as they are, never trained or run (the reference-image mode's) */
void f3_block_register(param_set *s, f3_block *b, const char *prefix, const model_config *c, bool used);

extern const block_kind f3_block_kind;

#endif
