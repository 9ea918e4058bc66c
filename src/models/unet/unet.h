/* The U-Net's micro-blocks (unet_block.c), which unet.c sets up and runs as one sequence; internal to src/models. */
#ifndef SEGTRAIN_MODELS_UNET_H
#define SEGTRAIN_MODELS_UNET_H

#include "models/unet/micro_seq.h"

typedef enum unet_role { UNET_CONV_IN, UNET_RES, UNET_ATTN, UNET_DOWN, UNET_UP } unet_role;

/* A BasicTransformerBlock: LayerNorm, self-attention, LayerNorm, cross-attention to the text, LayerNorm, GEGLU */
typedef struct xformer_layer {
    int n1w, n1b, n2w, n2b, n3w, n3b;
    lin_layer q, k, v, o, q2, k2, v2, o2, ff1, ff2;
} xformer_layer;

typedef struct unet_block {
    struct model *m;
    unet_role role;
    int64_t cin, cout, h, w; /* the stream's channels in and out, and its edges at the input */
    int64_t cskip;           /* an up block's ResnetBlock2D: the newest skip's channels, read after the stream's */
    skip_io io;              /* its states: the skips it reads and passes on, and whether its output is a new one */
    /* ResnetBlock2D (conv1 also conv_in's, Downsample2D's and Upsample2D's conv); shortcut.w < 0: the identity */
    int norm1_w, norm1_b, norm2_w, norm2_b;
    conv_layer conv1, conv2, shortcut;
    lin_layer temb; /* time_emb_proj, of SiLU(emb) (the model's ctx.cs) */
    /* Transformer2DModel */
    int norm_w, norm_b;
    lin_layer proj_in, proj_out;
    int64_t heads, layers;
    xformer_layer *xl;
} unet_block;

extern const block_kind unet_block_kind;

/* unet_family's topology_options (family.h); NULL: Stable Diffusion 1.x's UNet2DConditionModel */
typedef struct unet_options {
    bool added;     /* SDXL's added conditions (text_time): the pooled text and the size ids, time_channels wide */
    bool text_proj; /* Kolors' encoder_hid_proj: a Linear from the text encoder's width (unet_cross) */
} unet_options;
/* mc's unet_options (the defaults where its family sets none) */
const unet_options *unet_options_of(const model_config *mc);

struct cJSON;
/* The U-Nets' config.json readers' shared keys (diffusers_unet.c): the levels block_out_channels lists into *L (1 to
 * UNET_LEVELS_MAX; absent or null keeps *L); an int, or a list of n ints (one per level), at key into v[0 .. n)
 * (absent or null keeps v); a key whose only built value is the class's default null. */
st_status unet_json_count(const struct cJSON *j, const char *file, int *L);
st_status unet_json_levels(const struct cJSON *j, const char *file, const char *key, int n, int64_t *v);
st_status unet_json_null(const struct cJSON *j, const char *file, const char *key, const char *why);

/* plan's line for a U-Net (sd1x, sdxl, kolors): its levels instead of one width (family.h's describe hook) */
void unet_describe(const model_config *mc, const char *grid, int64_t batch, char *buf, size_t n);
/* sd1x's, sdxl's and kolors' preset hook (family.h) */
void unet_preset(model_config *mc, const char *name, bool tiny);
/* ... and their check hook */
st_status unet_check(const model_config *mc);
/* What sd1x, sdxl and kolors share in their descriptors (family.h): UNet2DConditionModel's traits, hooks and steps.
 * Upstream trains them on the noise (epsilon); their LoRA files name adapters under "unet."; sdxl's and kolors'
 * conditioning ends with SDXL's six size ids. */
#define UNET_TRAITS                                                                                                   \
    .traits = TR_TEXT | TR_UPSTREAM_EPSILON, .lora_component = "unet", .size_ids = 6, .describe = unet_describe,     \
    .fields = F_NORM_EPS | F_UNET, .check = unet_check, .ops = &unet_family,                                          \
    .lycoris_classes = unet_lycoris_classes

/* UNet2DConditionModel's LyCORIS module classes, where diffusers has them: the BasicTransformerBlock's Attention and
 * FeedForward, Transformer2DModel, ResnetBlock2D, Downsample2D, Upsample2D (their convolutions LoCon's) */
extern const lyco_class unet_lycoris_classes[];

#endif
