/* Model families, given by their block topology. A model owns its parameters, embeds the inputs into the
 * first state of its block sequences, runs them through an executor, and turns the last state into the
 * prediction. Forward keeps what backward needs; backward accumulates every trainable gradient. */
#ifndef SEGTRAIN_MODEL_H
#define SEGTRAIN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/block.h"
#include "segtrain/config.h"
#include "segtrain/lycoris.h"
#include "segtrain/ops.h"
#include "segtrain/params.h"
#include "segtrain/plan.h"

#define MODEL_REFINER_MAX 8 /* hunyuanvideo's token refiner blocks, at most */
#define MODEL_ROPE_FACTORS 64 /* omnigen: rotary frequencies a head, at most (head_dim 128) */
#define UNET_LEVELS_MAX 4 /* sd1x's block_out_channels (320, 640, 1280, 1280) */

#define RAMTORCH_TARGETS_MAX 2048
#define GROUP_OFFLOAD_PATH_MAX 1024 /* group_offload_to_disk_path's text */ /* ramtorch_target_modules' text (SimpleTuner's examples list blocks one by one) */

typedef struct model_config {
    char family[16]; /* "dit", "skipdit", or a dual-stream family: "mmdit", "flux" (FluxTransformer2DModel's layout),
                        "sd3" (SD3Transformer2DModel's), "auraflow", "qwen_image" (QwenImageTransformer2DModel's),
                        "hunyuanvideo" and "hunyuanvideo15" (HunyuanVideoTransformer3DModel's and
                        HunyuanVideo15Transformer3DModel's), ... */
    char preset[24]; /* longcat-image-tiny */
    int64_t depth, hidden, heads, patch, channels, classes;
    int64_t height, width; /* the latent's rows and columns (latent pixels; 1 and 1 for audio) */
    int64_t frames, patch_t; /* video: the input's latent frames and the patch's (1 and 1 for images) */
    int64_t vae_scale;  /* image pixels per latent pixel along an edge: the image is height x width times it */
    int64_t single_depth;          /* mmdit: single-stream blocks after the `depth` double-stream ones */
    int64_t text_len, text_vocab;  /* mmdit, flux: text tokens per caption, and the built-in word table's rows */
    int64_t text_dim, pooled_dim;  /* mmdit, flux: the text encoder's width (joint_attention_dim) and its pooled
                                      vector's (pooled_projection_dim) */
    bool guidance_embeds;          /* flux dev: a guidance embedding joins the timestep's */
    int64_t refiner_depth;         /* hunyuanvideo: the token refiner's blocks (num_refiner_layers); lumina2: each of
                                      its two refiners' (num_refiner_layers) */
    int64_t out_channels;          /* the output's channels when not in_channels (0): PixArt's 8, whose first 4 are the
                                      prediction */
    int64_t ffn_dim;               /* the feed-forward's width when not 4 hidden (0): Wan's */
    int64_t text_blocks, time_dim; /* kandinsky5: the text blocks before the visual ones (num_text_blocks; depth:
                                      num_visual_blocks) and the time embedding's width (time_dim); ideogram: its
                                      adaLN input's (adaln_dim); 0 elsewhere */
    int64_t kv_heads, window;      /* ace_step: k and v's heads (num_key_value_heads) and the sliding layers' window
                                      (|i - j| <= window); 0 elsewhere */
    int64_t adaln_lora;            /* cosmos2image, anima: the blocks' AdaLN-LoRA width (adaln_lora_dim); 0 elsewhere */
    int64_t source_len, source_dim; /* anima: the Qwen3 states per caption its text conditioner reads, and their width
                                      (source_dim); text_len is then the T5 ids', text_vocab the conditioner's
                                      vocabulary, refiner_depth its blocks (heads: the transformer's) */
    int64_t text_min_len;          /* anima: the conditioner's output is zero padded to this many tokens
                                      (min_sequence_length) */
    double interpolation;          /* pixart_sigma: the position table's interpolation_scale */
    int64_t text2_len, text2_dim;  /* hunyuanvideo15: ByT5's glyph tokens per caption and their width (text_embed_2_dim) */
    int64_t cond_channels;         /* hunyuanvideo15: the image-to-video condition's input channels (latents and mask,
                                      in_channels - out_channels), zero under text-to-video; ace_step: the context
                                      latents' channels (source latents and chunk mask, in_channels -
                                      audio_acoustic_hidden_dim) */
    int64_t image_dim;             /* hunyuanvideo15: the SigLIP image tokens' width (image_embed_dim) */
    int64_t vace_count, vace_every, vace_channels; /* wan's VACE flavours: the control branch's blocks
                                      (len(vace_layers)), a hint every vace_every main blocks from block 0 (vace_layers
                                      0, k, 2k, ...), and the control latents' channels (vace_in_channels); else 0 */
    double anyflow_gate;           /* wan as AnyFlowTransformer3DModel: the delta embedder's share of the time embedding
                                      (gate_value; 0 with anyflow false) */
    bool anyflow, anyflow_interval; /* ... and whether its delta is t - r (deltatime_type "t-r") rather than r */
    int64_t image_tokens;          /* wan as WanAnimateTransformer3DModel: the reference image's CLIP tokens (257, each
                                      image_dim wide) that every attn2 also attends to; cond_channels is then its
                                      condition latents' (in_channels - out_channels: 4 mask + the latents') */
    int64_t face_every;            /* ... a face adapter after blocks 0, k, 2k, ... (inject_face_latents_blocks); 0:
                                      not Animate */
    int64_t face_size, motion_style, motion_dim, motion_out; /* its motion encoder: the face frames' edge
                                      (motion_encoder_size), the style vector's width, the motion coefficients' and the
                                      motion vector's (motion_encoder_dim) */
    int64_t motion_channels[9];    /* ... its convolutions' channels at edges 4, 8, ..., 1024
                                      (motion_encoder_channel_sizes) */
    int64_t face_hidden, face_heads; /* its face encoder's width and heads (face_encoder_hidden_dim, _num_heads) */
    double norm_eps;               /* lumina2: its RMSNorms' epsilon (norm_eps); 0 elsewhere */
    int64_t text_pad;              /* omnigen: the token whose embedding row gets no gradient (pad_token_id) */
    int64_t text_layers, text_heads, text_kv_heads, text_ffn; /* krea2: its text fusion's tapped encoder layers a token
                                      (num_text_layers; text_dim is all of them side by side, num_text_layers x
                                      text_hidden_dim), and its blocks' heads, key-value heads and feed-forward width
                                      (text_num_attention_heads, ...); text_blocks is its layerwise blocks' count,
                                      refiner_depth its refiner blocks'; 0 elsewhere */
    int64_t rope_original, rope_max; /* omnigen: Phi-3's su-scaled rotary positions: the trained context
                                      (original_max_position_embeddings) and the extended one
                                      (max_position_embeddings); 0 elsewhere */
    float rope_short[MODEL_ROPE_FACTORS], rope_long[MODEL_ROPE_FACTORS]; /* ... each frequency's divisor up to
                                      rope_original positions and past them (rope_scaling's short_factor and
                                      long_factor; head_dim / 2 of them) */
    int64_t audio_hidden, audio_heads, audio_channels; /* ltxvideo2: the audio stream's width (audio_num_attention_heads
                                      x audio_attention_head_dim), its heads, and its latents' channels
                                      (audio_in_channels); 0 elsewhere. Its text_dim is twice caption_channels: a
                                      token's video and audio connector states side by side */
    int64_t audio_layers;          /* wan_s2v: the audio encoder's hidden states a frame its weighted average mixes
                                      (num_weighted_avg_layers; Wav2Vec2's 25), each audio_channels wide (audio_dim);
                                      0 elsewhere */
    uint64_t audio_inject;         /* ... bit i: an audio injector after block i (audio_inject_layers); 0 elsewhere */
    int64_t head_dim, time_hidden; /* minimaxh3: attention_head_dim, its heads x it wider than hidden_size, and its
                                      time MLP's hidden width (time_embed_hidden_dim; time_dim its output's,
                                      time_channels its sinusoids'); cosmos3: head_dim; 0 elsewhere */
    /* sd1x, sdxl (UNet2DConditionModel): the levels (len(block_out_channels), at most UNET_LEVELS_MAX), each level's
     * channels (block_out_channels), its attentions' heads (num_attention_heads, or attention_head_dim as diffusers
     * reads it) and transformer blocks (transformer_layers_per_block; 0: DownBlock2D / UpBlock2D, no attention), the
     * ResnetBlock2Ds of a down block (layers_per_block; an up block has one more), the mid block's transformer blocks,
     * GroupNorm's groups (norm_num_groups), and use_linear_projection (proj_in / proj_out as Linear, not 1 x 1 Conv2d).
     * hidden_size is the time embedding's width (4 x block_out_channels[0]), text_dim cross_attention_dim, norm_eps
     * the ResnetBlock2Ds' GroupNorm epsilon; sdxl's added conditions: pooled_dim the pooled text's width and
     * time_channels each size id's sinusoids (addition_time_embed_dim); 0 elsewhere. */
    int64_t unet_levels, unet_channels[UNET_LEVELS_MAX], unet_heads[UNET_LEVELS_MAX], unet_attn[UNET_LEVELS_MAX];
    int64_t unet_layers, unet_mid, norm_groups;
    bool unet_linear;
    int64_t unet_cross; /* kolors: cross_attention_dim, the text being projected to it from text_dim (encoder_hid_dim,
                           its encoder_hid_proj); stable_cascade: conditioning_dim; 0 elsewhere (the text is
                           cross-attended as it is) */
    int64_t clip_seq;   /* stable_cascade: the tokens each pooled vector maps to (clip_seq); unet_attn[] is then each
                           level's [ResBlock, TimestepBlock, AttnBlock] layers (down_num_layers_per_block, the up
                           path's mirrored), time_channels timestep_ratio_embedding_dim, image_dim
                           clip_image_in_channels; 0 elsewhere */
    float cascade_dropout[UNET_LEVELS_MAX]; /* stable_cascade: each level's dropout (after the ResBlocks' GRN and the
                               AttnBlocks' output projection, in training; masks per step: model_set_dropout_seed) */
    bool cascade_resample;  /* stable_cascade: switch_level null, the scalers 2 x 2 stride-2 convolutions (Conv2d down,
                               ConvTranspose2d up); false: switch_level [false], 1 x 1 mappings at one resolution */
    int64_t cross_heads;           /* sana, sanavideo: the cross-attention's heads (num_cross_attention_heads), its
                                      head width hidden_size / them; 0 elsewhere */
    int64_t action_dim, action_domains; /* cosmos3's action heads, loaded and saved untrained (action_dim,
                                      num_embodiment_domains; 0: action_gen false); audio_channels its sound_dim */
    int64_t experts, experts_active, llama_len; /* hidream: num_routed_experts, num_activated_experts, and the Llama
                                      tokens per caption (each block reads its own Llama layer's) */
    int64_t max_tokens;            /* hidream: the image tokens a non-square latent's patches are padded to
                                      (max_resolution's product / patch^2, HiDream-I1's 4096); 0 elsewhere */
    int64_t approx_channels, approx_hidden, approx_layers; /* chroma: distilled_guidance_layer's input width
                                      (approximator_num_channels), width and residual layers */
    double guidance;               /* the value model_condition gives it (SimpleTuner's flux_guidance_value) */
    int64_t rope_axes[4];          /* mmdit, flux: head pairs per position axis (axes_dims_rope): Flux's (16, 56, 56);
                                      flux2: four, (32, 32, 32, 32); ideogram: its mrope_section, frequencies per
                                      axis, interleaved (24, 20, 20) */
    int64_t time_channels;         /* flux2: the timestep and guidance sinusoids' width (timestep_guidance_channels) */
    bool qk_norm;                  /* sd3: RMSNorm of q and k per head (qk_norm "rms_norm", SD3.5; Flux always has it) */
    int64_t dual_attention;        /* sd3: blocks 0 .. n-1 add an image-only attention (SD3.5 medium's 13) */
    int64_t pos_embed_max;         /* sd3: the sin-cos table's edge (pos_embed_max_size), cropped to the grid's centre;
                                      auraflow: its learned table's (sqrt of pos_embed_max_size) */
    int64_t sample_size;           /* sd3: the latent edge the table's positions are scaled to (sample_size);
                                      zlab_i1: its checkpoint's latent edge (input_size), its pos_embed's grid */
    int64_t text_tokens;           /* zlab_i1: the caption tokens its checkpoint's null caption and rotary table hold
                                      (text_num_tokens); 0 elsewhere */
    attention_mechanism mechanism;
    int64_t lora_rank;                /* 0: full training; else LoRA of this rank, the base frozen */
    double lora_alpha;                /* the adapters' scale is alpha / rank */
    bool bf16_base;                   /* mixed_precision bf16 under LoRA: frozen linear layers' weights in bf16 */
    quant_format quant_base;          /* base_model_precision under LoRA: frozen linear layers' weights quantized */
    bool bf16_activations;            /* mixed_precision bf16: activations held in bf16 (docs/PRECISION.md) */
    int64_t blocks_to_swap;           /* musubi_blocks_to_swap: the last blocks' frozen weights in host memory, each
                                         brought onto the device around its use (docs/WEIGHTS.md); 0: none */
    bool ramtorch;                    /* ramtorch: the selected frozen linear layers' weights in host memory, each
                                         brought onto the device around each GEMM that reads it (docs/WEIGHTS.md) */
    double ramtorch_percent;          /* ramtorch_transformer_percent: of the layers the patterns select, the first
                                         ceil(n x percent / 100) in registration order (100: all, 0: none) */
    char ramtorch_targets[RAMTORCH_TARGETS_MAX]; /* ramtorch_target_modules: comma-separated fnmatch patterns over
                                         module names; "": every linear layer */
    /* enable_group_offload (docs/WEIGHTS.md): every frozen weight in host memory in diffusers' groups, each group
     * brought onto the device around its blocks' use (block_level: group_offload_blocks_per_group consecutive blocks
     * of a block list; leaf_level: one linear layer), the rest for each step */
    bool group_offload;
    bool group_offload_leaf;          /* group_offload_type leaf_level (else block_level) */
    int64_t group_offload_blocks;     /* group_offload_blocks_per_group (1 with use_stream, as diffusers forces) */
    bool group_offload_stream;        /* group_offload_use_stream: the next group's copy started as a group comes in
                                         (forward only; off under gradient_checkpointing, as SimpleTuner turns it) */
    char group_offload_dir[GROUP_OFFLOAD_PATH_MAX]; /* group_offload_to_disk_path: a file per group ("": host memory) */
    bool lora_attention, lora_mlp;    /* which linears get adapters */
    lycoris_spec lycoris;             /* lora_type lycoris: the adapters (lora_rank then 1, a marker of the frozen
                                         base; the spec decides which linears are adapted, and how) */
} model_config;

/* SimpleTuner's lycoris_config file at path into *ly, as SimpleTuner hands it to the lycoris-lora package
 * (src/models/core/lycoris_config.c); every refusal names the file and the key. */
st_status lycoris_spec_read(const char *path, lycoris_spec *ly);

/* A named preset's family and sizes (model_preset_name lists them: "dit-tiny", "dit-s2", ..., "flux-dev"); an
 * unknown name is refused with the nearest presets and all of them (config_choice_error). */
st_status model_preset(const char *name, model_config *out);
/* The model keys of a run configuration: model_preset's sizes (the family's tiny preset when only model_family
 * is given), overridden by any size given explicitly, and model_type / lora_rank / lora_alpha / lora_target.
 * `resolution` is in image pixels as in SimpleTuner (read by resolution_type); the input edge is it over the
 * VAE scale factor, rounded to the nearest multiple of the patch (at least one patch). */
st_status model_config_from(const config *cfg, model_config *out);
/* A shape a run trains at, in image pixels (frames 0: the config's num_frames). */
typedef struct bucket_shape {
    int64_t width, height, frames;
} bucket_shape;
#define MODEL_SHAPES_MAX 64
/* The config's bucket_shapes, in order, into out (at most MODEL_SHAPES_MAX); *n = 0 when none is given. */
st_status model_bucket_shapes(const config *cfg, bucket_shape *out, int *n);
/* The same of another key of shapes (validation_resolution): "WxH", "WxH@F" or an edge alone, comma-separated. */
st_status model_shapes_of(const config *cfg, const char *key, bucket_shape *out, int *n);
/* cfg's bucket_shapes set to s alone. */
st_status model_set_bucket(config *cfg, const bucket_shape *s);
/* The model of the config at shape s (as model_config_from builds it when s is the first of bucket_shapes). */
st_status model_config_at(const config *cfg, const bucket_shape *s, model_config *mc);
/* "832x480", or "832x480@81" with frames. */
void bucket_shape_name(const bucket_shape *s, char *buf, size_t n);
/* The architecture of a diffusers transformer from its own config.json (path: the file, a model folder, or a
 * pipeline folder with transformer/), over mc's family, resolution, text length and training keys: for the
 * dual-stream families FluxTransformer2DModel's (in_channels as the pipeline packs 2x2 patches, layers, heads,
 * joint_attention_dim, pooled_projection_dim, guidance_embeds, axes_dims_rope); for sd3 SD3Transformer2DModel's
 * (also qk_norm, dual_attention_layers, pos_embed_max_size, sample_size); for auraflow
 * AuraFlowTransformer2DModel's. A class the family does not read, or a value segtrain does not build, is
 * ST_ERR_UNSUPPORTED naming it. */
st_status model_config_from_diffusers(const char *path, model_config *mc);
/* The family's traits, from its descriptor (src/models/core/family.h); no caller outside a family's own files asks
 * for a family by name. */
/* Whether the family reads a text encoder's output (every family but dit and skipdit), not labels. */
bool model_reads_text(const model_config *mc);
/* Whether the family reads a text mask in its conditioning (qwen_image: padding keys are excluded from attention;
 * chroma: the padding's additive attention mask). */
bool model_text_mask(const model_config *mc);
/* Whether the family's input is video (B, C, F, H, W). */
bool model_video(const model_config *mc);
/* Whether the family is audio (ace_step): latents (B, C, F, 1, 1), F the clip's latent frames. */
bool model_audio(const model_config *mc);
/* The audio latents a sample carries after its video latents (LTX-2's: one per video frame, (F - 1) 8 + 1, at
 * SimpleTuner's 25 fps the audio VAE's 16000 / 160 / 4 = 25 latents a second); 0 for the other families. A sample is
 * then its video latents (C, F, H, W) and its audio latents (model_audio_tokens, audio_channels), channels last. */
int64_t model_audio_tokens(const model_config *mc);
/* Wan Animate's face video frames per sample: 4 frames - 7, which its face encoder's two halvings bring to
 * frames - 1 (77 for 21 latent frames, as diffusers' pipeline segments them); 0 for other models. */
int64_t model_face_frames(const model_config *mc);
/* The size ids a sample's conditioning ends with: SDXL's six (sdxl, kolors), else 0. */
int64_t model_size_ids(const model_config *mc);
/* A video family's VAE's temporal compression: num_frames = 1 + this x (latent frames - 1); LTX-Video's 8, else 4. */
int64_t model_vae_scale_t(const model_config *mc);
/* The pixel frames of a video family's latent frames (MiniMax-H3's VAE: 5 k + 2 latent frames from 17 k + 5). */
int64_t model_pixel_frames(const model_config *mc);
/* in_channels as the family's diffusers config.json counts them: Flux's, Flux.2's, Chroma's, LongCat's and
 * Qwen-Image's pipelines pack 2 x 2 latent patches into the channels (4 in_channels); in_channels elsewhere. */
int64_t model_packed_channels(const model_config *mc);
/* Whether the family trains on EDM's sigmas (cosmos2image; objective.h). */
bool model_edm(const model_config *mc);
/* Whether upstream trains the family to predict the noise (epsilon), where segtrain trains the flow. */
bool model_upstream_epsilon(const model_config *mc);
/* Whether SimpleTuner pads each batch's captions to its longest for the family (no fixed caption length). */
bool model_batch_padded(const model_config *mc);
/* Whether the family's LoRA training takes SimpleTuner's h3_drift distillation. */
bool model_drift(const model_config *mc);
/* Whether the family's SimpleTuner class trims a clip to 8 k + 1 frames (adjust_video_frames: Wan, LTX, Sana Video). */
bool model_frames_8k1(const model_config *mc);
/* Whether the family is a language model over audio codec tokens (heartmula), trained by the token objective
 * (objective.h's token_loss) instead of the flow: a sample (model_sample_numel: in_channels x frames) is its rows of
 * tokens, (frames, in_channels) = each row's K = in_channels - 1 codebooks then a text token, as floats; its
 * conditioning (model_cond_len) the tokens' mask (frames, in_channels) then the audio frame mask (frames), 1 or 0;
 * timesteps are not read. model_forward's prediction is then logits, model_token_logits floats a sample, codebook-major:
 * (K, batch, frames - 1, num_classes), row (k, b, t) scoring codebook k of sample b's row t + 1; model_backward takes
 * their gradient. */
bool model_tokens(const model_config *mc);
int64_t model_token_logits(const model_config *mc);
/* What of the family's conditioning a cache of text embeddings does not hold, as a phrase ("ByT5's glyph tokens
 * and their mask"); "what the family reads beside them" where the family names nothing. */
const char *model_uncached(const model_config *mc);
/* What a cache's prompt_embeds width holds where it is not one encoder's states (LTX-2's), NULL elsewhere. */
const char *model_text_width(const model_config *mc);
/* plan's line for the model ("model <preset> (<family>): <blocks>, width ..., <tokens> of <grid>, ... attention;
 * batch N"), without the newline. */
void model_describe(const model_config *mc, int64_t batch, char *buf, size_t n);
/* An image's size in pixels as SimpleTuner writes it: "1024" for a square, "1216x832" (width x height) otherwise. */
void model_pixels(const model_config *mc, char *buf, size_t n);
/* Whether model_family (a segtrain topology or a SimpleTuner family by SimpleTuner's name, or its example
 * folder's) and model_flavour can be built: ST_OK for dit, mmdit and skipdit (whatever the flavour: they have
 * none, and a SimpleTuner file planned on them keeps its own); else one line naming the family,
 * the topology it needs and that it is planned (ST_ERR_UNSUPPORTED), or what is wrong with the names. */
st_status model_family_check(const char *family, const char *flavour);
/* The preset of a built SimpleTuner family's flavour (its default flavour's when flavour is ""), written into
 * preset; NULL when the family or flavour is not built (model_family_check says why). */
const char *model_family_preset(const char *family, const char *flavour, char *preset, size_t n);
/* The i-th built flavour of SimpleTuner's family (in its table's order; "" for a family without flavours), written
 * into flavour; NULL past the last, or when the family is not one of SimpleTuner's or has none built. */
const char *model_family_built_flavour(const char *family, int i, char *flavour, size_t n);
/* What the registry says of SimpleTuner's family, each NULL where it has none (an unknown family, or segtrain's own:
 * all): its title ("Flux.1"); its example config's file name (tests/fixtures/simpletuner); the tiny preset the
 * family sweep measures it on; the bucket its users train at (bucket_shapes, "832x480@81"), where its example's
 * resolution square does not stand for it. */
typedef struct {
    const char *title, *example, *tiny, *shape;
} model_family_about;
model_family_about model_family_about_of(const char *family);
/* Whether a built flavour of SimpleTuner's family `family` runs on segtrain's family `topology` (SimpleTuner's
 * hunyuanvideo is HunyuanVideo 1.5's hunyuanvideo15, and its 1.0 flavour hunyuanvideo). */
bool model_family_builds(const char *family, const char *topology);
/* The i-th preset name, NULL past the last. */
const char *model_preset_name(int i);
/* The i-th family name that model_family takes (segtrain's three, then SimpleTuner's), NULL past the last. */
const char *model_family_name(int i);
/* Checks sizes that must fit together (heads divide the width, the patch divides height and width, ...). */
st_status model_config_check(const model_config *mc);

typedef struct model model;

/* With device NULL the parameters are registered but not allocated: enough to plan and to count. */
st_status model_create(const model_config *mc, pool *device, model **out);
/* A model at another shape (mc: base's config but for height, width and frames) whose parameters are base's: every
 * weight, bf16 weight and gradient is base's same-named one (param_set_share), so that training either trains both;
 * only its grid tables (DiT's and PixArt's position tables) are its own, in base's pool. A parameter that the shape
 * changes otherwise is ST_ERR_INVALID naming it. Destroy it before base. */
st_status model_create_sharing(const model_config *mc, model *base, model **out);
void model_destroy(model *m);

const model_config *model_get_config(const model *m);
param_set *model_params(model *m);
/* The model's block sequences (dit and skipdit have one; mmdit two: double-stream, then single-stream). */
int model_sequences(model *m, block_seq **seqs);
/* musubi_blocks_to_swap (docs/WEIGHTS.md): the blocks SimpleTuner's MusubiBlockSwapManager counts for this model
 * (Flux: double-stream and single-stream), of which at most all but one swap; 0: block swap not built for it. */
int model_swappable_blocks(const model *m);
/* musubi_blocks_to_swap: how many of sequence's blocks, its last ones, keep their frozen weights in
 * host memory (0: none, or no such sequence). */
int model_swapped_blocks(const model *m, int sequence);

/* Plans every block sequence under the checkpoint settings (all blocks kept until this is called). capture lists
 * blocks whose outputs the caller wants after each training forward (capture_hidden_states); they may make
 * segments fall back to single blocks. Refusals name the family and what it supports. */
st_status model_set_checkpointing(model *m, const ckpt_settings *cs, const int64_t *capture, size_t n_capture);
const seq_plan *model_plan(const model *m, int sequence);
/* Every sequence's plan as a gradient_checkpointing_plan value ("name: runs / name: runs"), which plans the same. */
void model_plan_text(const model *m, char *buf, size_t size);

/* The captured output of the k-th capture_hidden_states block after a training forward, and a zeroed buffer
 * for its gradient that the caller fills before model_backward (an auxiliary loss). */
st_status model_hidden(model *m, int k, const float **h, float **dh);

/* Where tensors go that the plan moves to host memory (unsloth backends, attention offload): the host pool,
 * and a copy engine the model starts for it. Needed before a training forward whose plan offloads. */
st_status model_set_host_pool(model *m, pool *host);
/* group_offload_to_disk_path (docs/WEIGHTS.md): writes each offloaded group's weights to its file and frees their host
 * memory, once the weights are loaded (on dry pools: at once, nothing written); a no-op without the path. */
st_status model_spill_weights(model *m);
/* The copy engine (NULL until a host pool is set): its statistics say what moved and what was hidden. */
copy_engine *model_copy_engine(model *m);

/* Sizes the model's states for a batch of this many samples (model_forward does it too): what the plan's
 * descriptions of boundaries (seq_plan_boundary) read. */
void model_set_batch(model *m, int64_t batch);

/* The family's own initialisation (DiT: xavier linears, zero adaLN), or, with random_all, seeded non-zero
 * values in every tensor, so that every gradient is non-zero (for gradient checks). A bf16 weight is the float
 * model's, rounded (drawn in a host buffer of its size: ST_ERR_HOST_OOM without one). */
st_status model_init(model *m, uint64_t seed, bool random_all);

/* Conditioning: model_cond_len floats per sample. dit and skipdit read the class label (`classes` is the null
 * label; labels stay below 2^24, exact in a float). The dual-stream families read a text encoder's output as a
 * cache holds it: the sequence (text_len, text_dim), then the pooled vector (pooled_dim), then where the family
 * reads one (model_text_mask) the mask (text_len: 1 a token, 0 padding, as the cache's attention_mask), then with
 * guidance_embeds the guidance value (model_condition's is the config's, SimpleTuner's constant mode). hidream's
 * sequence is T5's, and after the pooled vector come each block's Llama states (depth + single_depth, llama_len,
 * text_dim): block i's are Llama's hidden state llama_layers[i] (the cache picks them). ace_step's sequence is its
 * condition encoder's output, then the context latents (frames, cond_channels), channels last as
 * AceStepTransformer1DModel takes them. */
int64_t model_cond_len(const model_config *mc);
/* One sample's conditioning from its label and caption (either may be unused by the family; caption may be NULL),
 * and that of "no conditioning" (the null label, the empty caption) for guidance and dropout. A text family's is
 * made by the built-in stand-in for a text encoder (tokenizer.c): the caption's words hashed into text_vocab rows,
 * each row a fixed pseudo-random vector, padding zero; the pooled vector is the mean of the words' own; the mask
 * 1 for the words' tokens (chroma: and the first padding token, as ChromaPipeline keeps it), 0 for padding. */
void model_condition(const model_config *mc, int64_t label, const char *caption, float *cond);
void model_null_condition(const model_config *mc, float *cond);

/* ST_ERR_INVALID naming train_batch_size when a step on `batch` samples would not fit the size arithmetic
 * (model_create has checked the sizes of one sample). model_forward checks it; so must a caller that sizes
 * buffers by the batch before that. */
st_status model_check_batch(const model *m, int64_t batch);

/* The floats of one sample's latent: channels x frames x height x width (LTX-2: and its audio latents). */
int64_t model_sample_numel(const model_config *mc);
/* The floats of a sample that a dataset gives and the loss reads: its first model_loss_numel; the rest (LTX-2's
 * audio, when the data has none) is zero in x0, noised as the rest, and masked out of the loss, as SimpleTuner
 * does for a batch without audio latents. */
int64_t model_loss_numel(const model_config *mc);
/* The image's (or video's) tokens: frames x rows x columns of patches, or max_tokens where the family pads a
 * non-square latent's to them (HiDream). */
int64_t model_image_tokens(const model_config *mc);

/* Predicts from x (batch, channels, frames, res, res) ((batch, channels, res, res) for images), timesteps (batch) and cond (batch x model_cond_len floats).
 * *pred (same shape as x) stays valid until model_backward or model_release. With train, forward keeps what
 * backward needs, and cond must stay as it is until model_backward (Wan Animate's reads its face video again). */
st_status model_forward(model *m, const float *x, const float *timesteps, const float *cond, int64_t batch,
                        bool train, const float **pred);
/* AnyFlow's second endpoint per sample, 1000 r as timesteps are 1000 t, for the forwards that follow (the caller keeps
 * it until then); NULL (the default): r = t. Models without a delta embedder ignore it. */
void model_set_r_timesteps(model *m, const float *r);
/* The seed of a training step's dropout masks (stable_cascade's, where its config has dropout): the trainer sets one
 * a micro-step; a recompute draws the same masks. 0 after model_create. */
void model_set_dropout_seed(model *m, uint64_t seed);
/* Accumulates into the trainable gradients from dpred, then releases forward's state. */
st_status model_backward(model *m, const float *dpred);
/* Releases forward's state without a backward. */
void model_release(model *m);

#endif
