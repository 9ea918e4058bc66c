/* Lumina-Image 2.0 (Lumina2Transformer2DModel) and Z-Image (ZImageTransformer2DModel), internal to src/models: the
 * block (lumina2_block.c, also ERNIE-Image's, Ideogram 4's, OmniGen's and Krea 2's, in their styles), the model
 * (lumina2.c), and the one-sequence skeleton the others share (lumina_joint.c). */
#ifndef SEGTRAIN_MODELS_LUMINA2_H
#define SEGTRAIN_MODELS_LUMINA2_H

#include "models/joint/joint.h"

/* A block's weight names below its prefix: Lumina2TransformerBlock's or ZImageTransformerBlock's */
typedef struct lumina_names {
    const char *q, *k, *v, *out, *norm_q, *norm_k, *w1, *w2, *w3, *ada, *norm1_modulated, *norm1, *norm2, *ffn_norm1,
        *ffn_norm2;
    const char *gate, *table; /* Krea 2's attention output gate and modulation table; NULL: none */
} lumina_names;

/* How a block's q and k turn: rope_forward's interleaved pairs, rope_half_forward's halves (Ideogram 4's MRoPE),
 * rope_repeated_forward's (ERNIE-Image's) */
typedef enum lumina_rope { ROPE_INTERLEAVED, ROPE_HALF, ROPE_REPEATED } lumina_rope;

/* What sets the families' blocks apart */
typedef struct lumina_style {
    lumina_names names;
    bool sandwich;      /* RMSNorms around the attention's and the feed-forward's outputs (Lumina 2, Z-Image) */
    bool shared_mod;    /* every block reads the model's modulation (m->ctx.mod, gates as they are): ERNIE-Image's;
                           else each has its own norm1.linear, gates through tanh */
    lumina_rope rope;
    glu_kind glu;       /* the feed-forward's activation of w1 (silu(w1 h) w3 h, or gelu) */
    float qk_eps;       /* the per-head q and k RMSNorms' (0: the block's eps) */
    int64_t mod_rows;   /* a sample's modulation rows of D */
    int at[6];          /* the rows of shift1, scale1, gate1, shift2, scale2, gate2 */
    bool zero_centred;  /* every RMSNorm scales by 1 + weight (Krea 2's) */
    bool mod_table;     /* with shared_mod: each block adds its own table (mod_rows, D) to the model's modulation */
} lumina_style;
extern const lumina_style lumina2_style, zimage_style, ernie_style, ideogram_style, omnigen_style, krea2_style;

/* A block's weights and options. The model provides what its modulation reads: m->ctx.cs (B, ada_in) with
 * m->ctx.dcs, or for a shared_mod style m->ctx.mod (B, mod_rows D) with m->ctx.dmod; and per sequence *rope, the
 * per-sample rotary tables (B, rows, head_dim / 2, 2; NULL: no rotation), and *mask (the sequence's key mask, or
 * NULL). */
typedef struct lumina_block {
    struct model *m;
    bool modulated;     /* noise_refiner and layers: norm1 is LuminaRMSNormZero (scale and tanh gates from temb) */
    int64_t rows;       /* per sample: the sequence's (the caption's L, the image's T, the joint L + T) */
    int64_t width, heads; /* the rows' width and the attention's heads; 0: the model's hidden_size and num_heads */
    int64_t attn_rows;  /* the rows each attention runs over, in turn (Krea 2's text layers of a token); 0: all */
    int64_t kv_heads, ffn;
    float eps;          /* norm_eps: the block's four RMSNorms */
    int64_t ada_in;     /* norm1.linear's input: m->ctx.cs's width (Lumina: SiLU(temb), Z-Image: temb) */
    const lumina_style *style;
    lin_layer ada;      /* norm1.linear (modulated) */
    int norm1, norm2, ffn_norm1, ffn_norm2; /* RMSNorm weights (D); norm2 and ffn_norm2 with sandwich norms */
    attn_weights att;   /* norm_q and norm_k per head */
    lin_layer w1, w2, w3, gate; /* gate.w < 0: no output gate */
    int table;          /* the modulation table (mod_table); < 0: none */
    float *const *rope;
    const attn_mask *const *mask;
} lumina_block;

void lumina_block_register(param_set *s, lumina_block *b, const char *prefix, const model_config *c);

extern const block_kind lumina_block_kind;

/* lumina2_family's topology_options (family.h); NULL: Lumina2Transformer2DModel's */
typedef struct lumina2_options {
    bool zimage; /* ZImageTransformer2DModel's: its names, rows padded to 32, caption first, its final layer's c */
    bool boogu;  /* SimpleTuner's BooguImageTransformer2DModel: its names, its caption positions, and cfg.depth
                    double-stream layers (boogu_image.c) between the refiners and the single_depth joint ones */
} lumina2_options;

/* One stream's weights in Boogu's double-stream layer: the instruction's (instruct_*) or the image's (img_*) */
typedef struct boogu_set {
    lin_layer ada[3];   /* norm1, norm2 (and the image's norm3) .linear: 4 D from SiLU(temb) */
    int norm[3];        /* their RMSNorms' weights */
    int attn_norm, self_norm, ffn_norm1, ffn_norm2; /* self_norm: the image's (its self-attention's output) */
    lin_layer w1, w2, w3;
    attn_weights att;   /* its q, k, v and out of the joint attention (img_instruct_attn.processor's), the norms
                           shared */
} boogu_set;

/* BooguImageDoubleStreamTransformerBlock over each sample's rows [the instruction's `text`; the image's `image`]
 * (boogu_image.c): the per-sample rotary tables of those rows (*rope) and of the image's (*image_rope), and the
 * instruction's key mask over them (*mask). */
typedef struct boogu_double {
    struct model *m;
    int64_t text, image, kv_heads, ffn, ada_in;
    float eps;
    boogu_set s[2];     /* 0: the instruction's, 1: the image's */
    lin_layer to_out;   /* img_instruct_attn.to_out.0, over both streams */
    attn_weights self;  /* img_self_attn: the image's own attention */
    float *const *rope, *const *image_rope;
    const attn_mask *const *mask;
} boogu_double;

void boogu_double_register(param_set *s, boogu_double *b, const char *prefix, const model_config *c);
extern const block_kind boogu_double_kind;

/* ERNIE-Image's, Ideogram 4's and OmniGen's skeleton (lumina_joint.c): sequence 0, `layers`, of cfg.depth blocks in
 * one style over `rows` joint rows a sample, reading the model's rotary tables and key mask */
typedef struct lumina_joint {
    lumina_block *blocks;
    float *len;             /* a step's caption (prompt) length per sample */
    float *rope, *kb;       /* a step's per-sample rotary tables (B, rows, head_dim / 2, 2) and key bias (B, rows) */
    attn_mask mask;
    const attn_mask *maskp; /* what the blocks read: &mask once the step's is made */
} lumina_joint;

/* ada_in: the modulation's input width (m->ctx.cs's); 0: the blocks are not modulated (OmniGen's) */
st_status lumina_joint_create(model *m, lumina_joint *j, const lumina_style *style, int64_t rows, int64_t ada_in);
/* A step's len, rope and kb, filled by fn (model_host_loop's, with a workspace of `work` floats), then the mask the
 * blocks read: the key bias, and with seg (B, rows; NULL: none) its segments under a causal mask */
st_status lumina_joint_positions(model *m, lumina_joint *j, model_loop_fn fn, const float *cond, int64_t work,
                                 const float *seg);

struct cJSON;
/* LuminaFeedForward's width from a config: 4 hidden_size, times ffn_dim_multiplier (null: 1), up to a multiple of
 * `multiple` (multiple_of) */
st_status lumina_ffn_width(const struct cJSON *j, const char *file, int64_t multiple, model_config *mc);
/* plan's blocks of lumina2 and z_image (family.h's blocks_words) */
extern const struct blocks_words lumina2_blocks;
/* The sizes lumina2, z_image, ernie, ideogram, omnigen and krea2 share (their check hooks): key-value heads dividing
 * the heads, the feed-forward, the eps, the caption width, no pooled vector, one frame, and with axes three even
 * rotary axes filling the head */
st_status joint_check(const model_config *mc, bool axes);

#endif
