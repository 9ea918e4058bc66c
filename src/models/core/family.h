/* A model family's descriptor: its names (segtrain's, SimpleTuner's), its topology, its traits and its hooks. Each
 * family defines its own in its topology folder; registry.c lists them, one line a family. Code outside a family's
 * own files asks the descriptor (model.h's traits), never the family's name. */
#ifndef SEGTRAIN_MODELS_FAMILY_H
#define SEGTRAIN_MODELS_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segtrain/model.h"

struct cJSON;
struct model_family;

/* plan's words for a family's blocks when they are its config's counts alone: each %lld of format stands for the next
 * of fields, each the offsetof(model_config, ...) of an int64_t */
typedef struct blocks_words {
    const char *format;
    size_t fields[4];
} blocks_words;

/* The block topology a family needs (SimpleTuner's families.c rows name the one each will need). */
typedef enum family_topology {
    TOPO_OWN,      /* segtrain's own: dit, skipdit */
    TOPO_DUAL,     /* dual-stream MMDiT */
    TOPO_XATTN,    /* cross-attention DiT */
    TOPO_JOINT,    /* single-stream joint DiT */
    TOPO_LINEAR,   /* linear-attention DiT */
    TOPO_UNET,     /* U-Net micro-blocks */
    TOPO_AUDIO_LM, /* an autoregressive audio language model (heartmula: Llama layers, joint/'s block) */
    TOPO_COUNT
} family_topology;

/* SimpleTuner's registration of a family (ModelRegistry.register and its flavour choices). */
typedef struct family_st {
    const char *name, *alias; /* SimpleTuner's registered name, and its example folder's where that differs */
    const char *title;
    const char *diffusers; /* the class whose weight names and layout the family loads */
    const char *flavours;  /* "a|b|c" */
    const char *built;     /* the flavours built, each with its preset: "flavour:preset|..."; NULL: none */
    const char *fallback;  /* the flavour SimpleTuner takes when none is given */
    const char *why;       /* why the other flavours are not built, where that is known (NULL: "not built yet") */
    const char *example;   /* its SimpleTuner example config (tests/fixtures/simpletuner), NULL: none at hand */
    const char *tiny;      /* the tiny preset the family sweep measures it on (NULL: found by name) */
    const char *shape;     /* the bucket its users train (bucket_shapes "832x480@81"), where its example's dataset
                              leaves it to the data; NULL: the example's resolution square */
} family_st;

/* A diffusers class whose config.json the family reads, and its reader (over mc: the family's defaults, then the
 * file's values, unchecked). */
typedef struct family_reader {
    const char *diffusers;
    st_status (*read)(const struct cJSON *j, const char *file, model_config *mc);
} family_reader;

/* How a text family's caption mask counts its tokens beyond the caption's words. */
typedef enum mask_keep {
    MASK_WORDS,      /* the words */
    MASK_PAD_ONE,    /* and one padding token (ChromaPipeline's) */
    MASK_EMPTY_ONE,  /* at least one token: the empty caption keeps one (a text attending within itself) */
} mask_keep;

/* A preset's published sizes (model_preset): the rest is the family's preset hook's. */
typedef struct family_preset {
    const char *name;
    int64_t depth, hidden, heads, patch, channels, edge, classes, single_depth, text_len; /* edge: the latent's, square */
    int64_t text_dim, pooled_dim;
    bool guidance_embeds;
    bool qk_norm; /* Flux's blocks always normalise q and k, SD3.5's too */
    int64_t dual_attention, pos_embed_max;
} family_preset;
#define FAMILY_PRESETS(table) .presets = table, .n_presets = (int)(sizeof table / sizeof *table)
/* The presets' latent grids are those of images through Stable Diffusion's or Flux's VAE (DiT's: 256 px -> 32). */
#define FAMILY_VAE_SCALE 8

/* A frame's patch grid: its rows and columns of patches. */
static inline int64_t grid_rows(const model_config *c) { return c->height / c->patch; }
static inline int64_t grid_cols(const model_config *c) { return c->width / c->patch; }

/* The optional model_config fields a family has (its descriptor's fields); the generic check refuses the others when
 * they are set, naming who has them. */
enum family_fields {
    F_FFN = 1 << 0,            /* ffn_dim */
    F_SINGLE = 1 << 1,         /* single-stream blocks (single_depth) */
    F_ADALN = 1 << 2,          /* adaln_lora */
    F_NORM_EPS = 1 << 3,       /* norm_eps */
    F_CROSS_HEADS = 1 << 4,    /* cross_heads */
    F_ACTION = 1 << 5,         /* action_dim, action_domains */
    F_HEAD_DIM = 1 << 6,       /* head_dim */
    F_TIME_HIDDEN = 1 << 7,    /* time_hidden */
    F_TEXT_FUSION = 1 << 8,    /* text_layers, text_heads, text_kv_heads, text_ffn (and its own refiner blocks) */
    F_ROPE_SCALED = 1 << 9,    /* rope_original, rope_max, text_pad */
    F_KV_HEADS = 1 << 10,      /* kv_heads */
    F_WINDOW = 1 << 11,        /* window */
    F_VACE = 1 << 12,          /* vace_count, vace_every, vace_channels, anyflow */
    F_AUDIO_STREAM = 1 << 13,  /* audio_hidden, audio_heads */
    F_AUDIO_CHANNELS = 1 << 14, /* audio_channels */
    F_TEXT_BLOCKS = 1 << 15,   /* text_blocks */
    F_TIME_DIM = 1 << 16,      /* time_dim */
    F_SOURCE = 1 << 17,        /* source_len, source_dim, text_min_len */
    F_ANIMATE = 1 << 18,       /* Wan Animate's encoders, with face_every > 0 */
    F_CASCADE = 1 << 19,       /* clip_seq, cascade_resample, cascade_dropout (and the U-Net levels) */
    F_UNET = 1 << 20,          /* unet_levels, unet_layers, unet_mid, norm_groups, unet_linear, unet_cross */
    F_TEXT2 = 1 << 21,         /* text2_len, text2_dim */
    F_IMAGE_DIM = 1 << 22,     /* image_dim */
    F_COND_CHANNELS = 1 << 23, /* cond_channels */
    F_REFINER = 1 << 24,       /* refiner_depth: 1 to MODEL_REFINER_MAX blocks */
    F_MAX_TOKENS = 1 << 25,    /* max_tokens */
    F_AUDIO_INJECT = 1 << 26,  /* audio_layers, audio_inject */
};

/* A group of fields whose refusal lists them, then says why (family_refuse): the family's constraint, or who has
 * them. */
typedef enum family_group {
    GROUP_SINGLE, GROUP_ADALN, GROUP_NORM, GROUP_CROSS_HEADS, GROUP_ACTION, GROUP_HEAD_DIM, GROUP_TEXT_FUSION,
    GROUP_ROPE_SCALED, GROUP_KV_HEADS, GROUP_VACE, GROUP_AUDIO, GROUP_TEXT_BLOCKS, GROUP_SOURCE, GROUP_TEXT2
} family_group;

/* What a family is (its descriptor's traits, flags). */
enum family_trait {
    TR_OWN = 1 << 0,              /* segtrain's own topology (dit, mmdit, skipdit): no flavours, always built */
    TR_TEXT = 1 << 1,             /* reads a text encoder's output (else a class label) */
    TR_TEXT_MASK = 1 << 2,        /* its conditioning holds the caption's mask (counting family_desc.mask's tokens) */
    TR_VIDEO = 1 << 3,            /* its input is video (B, C, F, H, W) */
    TR_AUDIO = 1 << 4,            /* its latents are an audio clip (B, C, F, 1, 1) */
    TR_AUDIO_VIDEO = 1 << 5,      /* audio latents follow the video's in a sample (LTX-2) */
    TR_EDM = 1 << 6,              /* trained on EDM's sigmas (objective.h) */
    TR_UPSTREAM_EPSILON = 1 << 7, /* upstream trains it to predict the noise, not the flow */
    TR_BATCH_PADDED = 1 << 8,     /* SimpleTuner pads each batch's captions to its longest (no fixed length) */
    TR_DRIFT = 1 << 9,            /* its LoRA trains with SimpleTuner's h3_drift distillation */
    TR_SINCOS = 1 << 10,          /* dual-stream, with positions from a sine-cosine table, not rotary axes (SD3) */
    TR_POOLED = 1 << 11,          /* reads a pooled text vector (pooled_projection_dim at least 1) */
    TR_UNPOOLED = 1 << 12,        /* conditions on the timestep alone: no pooled text, no guidance embedding */
    TR_DUAL_ATTENTION = 1 << 13,  /* its first blocks may add an image-only attention (SD3.5's dual_attention_layers) */
    TR_FRAMES_8K1 = 1 << 14,      /* SimpleTuner's class trims a clip to 8 k + 1 frames (adjust_video_frames) */
    TR_TOKENS = 1 << 15,          /* a language model over audio tokens, trained by the token objective (model.h) */
};

#define FAMILY_ST_MAX 2  /* SimpleTuner rows a family can carry (kandinsky5: its image and video registrations) */
#define FAMILY_READERS_MAX 4

typedef struct family_desc {
    const char *name;          /* model_config.family; NULL: a SimpleTuner family segtrain does not build */
    family_topology topology;
    family_st st[FAMILY_ST_MAX]; /* SimpleTuner's registrations (name NULL: none) */

    unsigned traits;      /* enum family_trait */
    mask_keep mask;       /* what a caption mask counts beside the words (TR_TEXT_MASK) */
    int vae_scale_t;      /* a video VAE's temporal compression (0: 4) */
    int packed;           /* in_channels as diffusers' config counts them: 0 the latent's, 4: 4 x (2 x 2 patches packed),
                             -1: x patch^2 */
    int register_tokens;  /* tokens a sample's sequence adds beside the image's and the text's (AuraFlow's 8) */
    int size_ids;         /* SDXL's size ids after the pooled text, where the config has a pooled text */
    unsigned fields;      /* the optional config fields it has (enum family_fields) */
    int axes;             /* its rotary axes are axes_dims_rope's, this many, filling each head (0: checked otherwise) */
    const char *lora_component; /* the component its LoRA files name adapters under ("unet."), NULL: the transformer */
    void (*checkpoint_name)(const char *tensor, char *name); /* params.h's: its checkpoint's own names, or NULL */
    const lyco_class *lycoris_classes; /* where its LyCORIS module classes are (lycoris.h); NULL: lycoris not mapped */
    /* the modules SimpleTuner's _quanto_model leaves unquantized for this model_family (its exclude patterns, matched
     * as quanto matches them: fnmatch on a module's name, so a pattern excludes that module and not its children),
     * NULL-terminated; NULL: none (docs/QUANTIZATION.md) */
    const char *const *quanto_exclude;
    /* musubi_blocks_to_swap (docs/WEIGHTS.md): the block sequences SimpleTuner's MusubiBlockSwapManager counts, in its
     * order (Flux's double-stream then single-stream blocks); block i of one has the weights named "<name>.<i>.", its
     * sequence's name. None: block swap not built for it. */
    const char *swap_blocks[2];
    /* the module name of block i of a depth-block sequence, where it is not "<sequence>.<i>" (NULL): U-ViT's
     * skips.h's in_blocks.i, mid_block, out_blocks.j */
    void (*block_module)(int i, int depth, char *name, size_t n);
    /* modules inside a block that the family runs outside that block's forward and backward (Wan's
     * vace_blocks.0.proj_in, applied before the VACE blocks run): group offload holds them with the step's weights */
    const char *const *outside_blocks;
    const char *uncached; /* what of its conditioning a cache does not hold, NULL: "what the family reads beside them" */
    const char *text_width; /* what a cache's prompt_embeds width holds, where it is not one encoder's (NULL) */

    /* hooks (NULL: the generic behaviour) */
    st_status (*check)(const model_config *mc);           /* its part of model_config_check */
    bool (*is_video)(const model_config *mc);             /* video for some configs only */
    int64_t (*pixel_frames)(const model_config *mc);      /* the pixel frames of its latent frames */
    st_status (*latent_frames)(model_config *mc, int64_t num_frames); /* num_frames to latent frames */
    const char *(*uncached_of)(const model_config *mc);   /* uncached, by config */
    int64_t (*cond_len)(const model_config *mc);          /* model_cond_len */
    void (*condition)(const model_config *mc, const char *caption, float *cond); /* model_condition of a caption */
    /* plan's description: its blocks ("N cross-attention blocks") as words (blocks_words) or by a hook, or the whole
     * line */
    const blocks_words *blocks_words;
    void (*describe_blocks)(const model_config *mc, char *buf, size_t n);
    const char *frames_note; /* a video's frames through the VAE, when not "/k in time" */
    void (*describe)(const model_config *mc, const char *grid, int64_t batch, char *buf, size_t n);
    family_reader readers[FAMILY_READERS_MAX]; /* the diffusers classes it reads (diffusers NULL: no more) */
    /* its presets, in model_preset_name's order, and what its presets set beyond family_preset's sizes (tiny: the
     * name says "tiny") */
    const family_preset *presets;
    int n_presets;
    void (*preset)(model_config *mc, const char *name, bool tiny);
    /* its split of a head into rotary axes (NULL: Flux's, (16, 56, 56) at 128) */
    void (*rope_axes)(model_config *mc);

    const struct model_family *ops; /* the implementation; NULL: not built */
    /* what its steps do differently from the other families of the same steps (ops): the options struct the steps'
     * header defines (xdit_options, mmdit_options, ...), set in the family's own file; NULL: the steps' defaults */
    const void *topology_options;
} family_desc;

/* A SimpleTuner family segtrain does not build: its topology and its registration, refused by name (families.c). */
#define PLANNED_FAMILY(topo, st_name, st_title, st_diffusers, st_flavours)                                            \
    {.topology = topo, .st = {{.name = st_name, .title = st_title, .diffusers = st_diffusers, .flavours = st_flavours}}}

/* The descriptor whose name is model_config.family name, NULL when none is. */
const family_desc *family_find(const char *name);
/* mc's descriptor; for a name no built family has, one with no traits and no implementation. */
const family_desc *family_of_config(const model_config *mc);
/* mc's family's topology_options (NULL: none). */
const void *family_options(const model_config *mc);
/* The i-th descriptor in the registry's order, NULL past the last. */
const family_desc *family_at(int i);

/* The refusal of a group of fields: the fields' values, then why (the family's constraint, or who has them). */
st_status family_refuse(const model_config *mc, family_group g, const char *why);
/* Flux.2's and Flux.3's check: no pooled text (Flux.3: nor guidance), and even timestep sinusoids. */
st_status family_check_four(const model_config *mc, bool flux3);

/* Rotary splits that several families share: four equal axes (Flux.2's (32, 32, 32, 32) at 128), and Z-Image's
 * (32, 48, 48) at 128. */
void family_rope_axes_four(model_config *mc);
void family_rope_axes_wide(model_config *mc);

/* What the conditioning of a text family holds before anything of its own (model.c): the sequence, the pooled
 * vector, the mask, ByT5's glyph tokens and mask, the guidance value and the size ids; its length, and the filling
 * of it from a caption, which returns where the family's own part starts. */
int64_t family_text_cond_len(const model_config *mc);
float *family_text_condition(const model_config *mc, const char *caption, float *cond, float **pooled);
/* A conditioning of token ids (text_dim 1): the words of parts[0 .. 3) (a template around the caption) as ids, then
 * their mask. */
void family_ids_condition(const model_config *mc, const char *const parts[3], float *cond);

/* SimpleTuner's _quanto_model exclude patterns for sd3, ltxvideo, wan, wan_s2v and infinitetalk (one list,
 * simpletuner/helpers/training/quantisation/__init__.py): norms, proj_out, embedders, Wan's FFNs, modulation tables */
extern const char *const quanto_exclude_video[];

#endif
