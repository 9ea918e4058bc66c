/* The model configuration's check: what every family's config must satisfy, and which optional fields a family may
 * set (family.h's fields), refused by name otherwise; each family's own constraints are its descriptor's check hook,
 * which refuses in the same words (family_refuse). */
#include <stdio.h>
#include <string.h>

#include "models/core/family.h"
#include "models/core/internal.h"
#include "segtrain/model.h"

#define LL(x) ((long long)(x))

/* The refusal of a group of fields, ending in why: the family's constraint, or who has them. */
st_status family_refuse(const model_config *mc, family_group g, const char *why)
{
    const int64_t hd = mc->hidden / mc->heads;
    switch (g) {
    case GROUP_ADALN:
        return st_fail(ST_ERR_INVALID, "adaln_lora_dim %lld, patch_size_t %lld, head width %lld, out_channels %lld; %s",
                       LL(mc->adaln_lora), LL(mc->patch_t), LL(hd), LL(mc->out_channels), why);
    case GROUP_NORM:
        return st_fail(ST_ERR_INVALID, "num_kv_heads %lld of %lld heads, feed-forward %lld wide, norm_eps %g, "
                       "cap_feat_dim %lld, rotary axes (%lld, %lld, %lld); %s", LL(mc->kv_heads), LL(mc->heads),
                       LL(mc->ffn_dim), mc->norm_eps, LL(mc->text_dim), LL(mc->rope_axes[0]), LL(mc->rope_axes[1]),
                       LL(mc->rope_axes[2]), why);
    case GROUP_CROSS_HEADS:
        return st_fail(ST_ERR_INVALID, "num_cross_attention_heads %lld of hidden_size %lld, GLUMBConv %lld wide, %lld "
                       "frames, out_channels %lld; %s", LL(mc->cross_heads), LL(mc->hidden), LL(mc->ffn_dim),
                       LL(mc->frames), LL(mc->out_channels), why);
    case GROUP_ACTION:
        return st_fail(ST_ERR_INVALID, "num_key_value_heads %lld of %lld heads, head_dim %lld, intermediate_size %lld, "
                       "rms_norm_eps %g, text_dim %lld, vocab_size %lld, rope_axes_dim (%lld, %lld, %lld), sound_dim "
                       "%lld, action_dim %lld over %lld domains; %s", LL(mc->kv_heads), LL(mc->heads),
                       LL(mc->head_dim), LL(mc->ffn_dim), mc->norm_eps, LL(mc->text_dim), LL(mc->text_vocab),
                       LL(mc->rope_axes[0]), LL(mc->rope_axes[1]), LL(mc->rope_axes[2]), LL(mc->audio_channels),
                       LL(mc->action_dim), LL(mc->action_domains), why);
    case GROUP_HEAD_DIM:
        return st_fail(ST_ERR_INVALID, "attention_head_dim %lld, rotary pairs (%lld, %lld, %lld), freq_dim %lld, "
                       "time_embed_hidden_dim %lld, time_embed_dim %lld, ffn_dim %lld, audio_in_channels %lld, "
                       "norm_eps %g, patch_size_t %lld; %s", LL(mc->head_dim), LL(mc->rope_axes[0]),
                       LL(mc->rope_axes[1]), LL(mc->rope_axes[2]), LL(mc->time_channels), LL(mc->time_hidden),
                       LL(mc->time_dim), LL(mc->ffn_dim), LL(mc->audio_channels), mc->norm_eps, LL(mc->patch_t), why);
    case GROUP_TEXT_FUSION:
        return st_fail(ST_ERR_INVALID, "num_text_layers %lld (text_dim %lld), text_num_attention_heads %lld, "
                       "text_num_key_value_heads %lld, text_intermediate_size %lld, %lld layerwise and %lld refiner "
                       "text blocks; %s", LL(mc->text_layers), LL(mc->text_dim), LL(mc->text_heads),
                       LL(mc->text_kv_heads), LL(mc->text_ffn), LL(mc->text_blocks), LL(mc->refiner_depth), why);
    case GROUP_ROPE_SCALED:
        return st_fail(ST_ERR_INVALID, "text_dim %lld, head width %lld, original_max_position_embeddings %lld, "
                       "max_position_embeddings %lld, pad_token_id %lld, vocab_size %lld, pos_embed_max_size %lld; %s",
                       LL(mc->text_dim), LL(hd), LL(mc->rope_original), LL(mc->rope_max), LL(mc->text_pad),
                       LL(mc->text_vocab), LL(mc->pos_embed_max), why);
    case GROUP_KV_HEADS:
        return st_fail(ST_ERR_INVALID, "num_key_value_heads %lld, sliding_window %lld, context channels %lld, patch_size "
                       "%lld, latent %lld x %lld, out_channels %lld; %s", LL(mc->kv_heads), LL(mc->window),
                       LL(mc->cond_channels), LL(mc->patch), LL(mc->height), LL(mc->width), LL(mc->out_channels), why);
    case GROUP_VACE:
        return st_fail(ST_ERR_INVALID, "vace_layers: %lld blocks every %lld, %lld control channels; %s",
                       LL(mc->vace_count), LL(mc->vace_every), LL(mc->vace_channels), why);
    case GROUP_AUDIO:
        return st_fail(ST_ERR_INVALID, "audio width %lld, audio heads %lld, audio channels %lld, audio layers %lld, "
                       "audio injectors 0x%llx, caption width %lld, patch %lld x %lld; %s", LL(mc->audio_hidden),
                       LL(mc->audio_heads), LL(mc->audio_channels), LL(mc->audio_layers),
                       (unsigned long long)mc->audio_inject, LL(mc->text_dim), LL(mc->patch), LL(mc->patch_t), why);
    case GROUP_TEXT_BLOCKS:
        return st_fail(ST_ERR_INVALID, "num_text_blocks %lld, time_dim %lld, in_text_dim2 %lld, patch_size_t %lld, head "
                       "width %lld, out_visual_dim %lld, visual_cond channels %lld; %s", LL(mc->text_blocks),
                       LL(mc->time_dim), LL(mc->pooled_dim), LL(mc->patch_t), LL(hd), LL(mc->out_channels),
                       LL(mc->cond_channels), why);
    case GROUP_SOURCE:
        return st_fail(ST_ERR_INVALID, "the text conditioner's Qwen tokens %lld, source_dim %lld, min_sequence_length "
                       "%lld, blocks %lld, width %lld over %lld heads; %s", LL(mc->source_len), LL(mc->source_dim),
                       LL(mc->text_min_len), LL(mc->refiner_depth), LL(mc->text_dim), LL(mc->heads), why);
    case GROUP_TEXT2:
        return st_fail(ST_ERR_INVALID, "text_embed_2_dim %lld, ByT5 tokens %lld, image_embed_dim %lld, condition "
                       "channels %lld; %s", LL(mc->text2_dim), LL(mc->text2_len), LL(mc->image_dim),
                       LL(mc->cond_channels), why);
    case GROUP_SINGLE:
        break;
    }
    return st_fail(ST_ERR_INVALID, "num_single_layers: %lld (%s)", LL(mc->single_depth), why);
}

/* The built families whose descriptors have any of fields, as "a, b and c", written into who; their count into
 * *count (NULL: not wanted). */
static const char *owners(unsigned fields, char *who, size_t n, int *count)
{
    const family_desc *d;
    int seen = 0, total = 0;
    for (int i = 0; (d = family_at(i)); i++) total += d->ops && (d->fields & fields);
    who[0] = 0;
    for (int i = 0; (d = family_at(i)); i++) {
        if (!d->ops || !(d->fields & fields)) continue;
        const size_t at = strlen(who);
        snprintf(who + at, n - at, "%s%s", seen ? (seen == total - 1 ? " and " : ", ") : "", d->name);
        seen++;
    }
    if (count) *count = seen;
    return who;
}

/* A field of fields set where the family has none: refused through g, naming the families that have what. */
static st_status refuse_owned(const model_config *mc, family_group g, unsigned fields, const char *what)
{
    char who[512], why[640];
    int count;
    owners(fields, who, sizeof who, &count);
    if (g == GROUP_SINGLE) snprintf(why, sizeof why, "%s in %s", what, who);
    else snprintf(why, sizeof why, "only %s %s %s (0)", who, count > 1 ? "have" : "has", what);
    return family_refuse(mc, g, why);
}

#define HAS(f) ((d->fields & (f)) != 0)

/* The optional fields mc's family does not have (family.h's fields), refused when set, naming who has them. */
static st_status check_owned(const model_config *mc, const family_desc *d)
{
    char who[512];
    if (mc->ffn_dim < 0 || mc->ffn_dim > (1 << 20) || (mc->ffn_dim && !HAS(F_FFN)))
        return st_fail(ST_ERR_INVALID, "ffn_dim: %lld; the feed-forward of %s is 1 to 2^20 wide (0: the family's "
                       "default), the other families' 0", LL(mc->ffn_dim), owners(F_FFN, who, sizeof who, NULL));
    if (mc->single_depth < 0 || (!HAS(F_SINGLE) && mc->single_depth))
        return refuse_owned(mc, GROUP_SINGLE, F_SINGLE, "single-stream blocks exist");
    if (!HAS(F_ADALN) && mc->adaln_lora) return refuse_owned(mc, GROUP_ADALN, F_ADALN, "AdaLN-LoRA");
    if (!HAS(F_NORM_EPS) && mc->norm_eps != 0) return refuse_owned(mc, GROUP_NORM, F_NORM_EPS, "norm_eps");
    if (!HAS(F_CROSS_HEADS) && mc->cross_heads) return refuse_owned(mc, GROUP_CROSS_HEADS, F_CROSS_HEADS, "them");
    if (!HAS(F_ACTION) && (mc->action_dim || mc->action_domains))
        return refuse_owned(mc, GROUP_ACTION, F_ACTION, "action heads");
    if ((!HAS(F_HEAD_DIM) && mc->head_dim) || (!HAS(F_TIME_HIDDEN) && mc->time_hidden))
        return refuse_owned(mc, GROUP_HEAD_DIM, F_HEAD_DIM | F_TIME_HIDDEN, "them");
    if (!HAS(F_TEXT_FUSION) && (mc->text_layers || mc->text_heads || mc->text_kv_heads || mc->text_ffn))
        return refuse_owned(mc, GROUP_TEXT_FUSION, F_TEXT_FUSION, "a text fusion");
    if (!HAS(F_ROPE_SCALED) && (mc->rope_original || mc->rope_max || mc->text_pad))
        return refuse_owned(mc, GROUP_ROPE_SCALED, F_ROPE_SCALED, "them");
    if (!HAS(F_KV_HEADS) && mc->kv_heads) return refuse_owned(mc, GROUP_KV_HEADS, F_KV_HEADS, "key-value heads");
    if (!HAS(F_WINDOW) && mc->window) return refuse_owned(mc, GROUP_KV_HEADS, F_WINDOW, "a sliding window");
    if (!HAS(F_VACE) && (mc->vace_count || mc->vace_every || mc->vace_channels || mc->anyflow))
        return refuse_owned(mc, GROUP_VACE, F_VACE, "VACE's control branch and AnyFlow's transformer");
    if (!HAS(F_AUDIO_STREAM) && (mc->audio_heads || mc->audio_hidden))
        return refuse_owned(mc, GROUP_AUDIO, F_AUDIO_STREAM, "an audio stream");
    if (!HAS(F_AUDIO_CHANNELS) && mc->audio_channels)
        return refuse_owned(mc, GROUP_AUDIO, F_AUDIO_CHANNELS, "audio latents");
    if (!HAS(F_AUDIO_INJECT) && (mc->audio_layers || mc->audio_inject))
        return refuse_owned(mc, GROUP_AUDIO, F_AUDIO_INJECT, "audio injectors");
    if ((!HAS(F_TEXT_BLOCKS) && mc->text_blocks) || (!HAS(F_TIME_DIM) && mc->time_dim))
        return refuse_owned(mc, GROUP_TEXT_BLOCKS, F_TEXT_BLOCKS | F_TIME_DIM, "them");
    if (!HAS(F_SOURCE) && (mc->source_len || mc->source_dim || mc->text_min_len))
        return refuse_owned(mc, GROUP_SOURCE, F_SOURCE, "one");
    return ST_OK;
}

/* Wan Animate's, the U-Nets' and HunyuanVideo 1.5's fields, refused where the family has none. */
static st_status check_owned_more(const model_config *mc, const family_desc *d)
{
    bool none = !mc->face_every && !mc->image_tokens && !mc->face_size && !mc->motion_style && !mc->motion_dim &&
                !mc->motion_out && !mc->face_hidden && !mc->face_heads;
    for (int k = 0; k < 9; k++) none = none && !mc->motion_channels[k];
    char who[512];
    if ((!HAS(F_ANIMATE) || mc->face_every <= 0) && !none)
        return st_fail(ST_ERR_INVALID, "the reference image's tokens, the motion and face encoders: only %s as "
                       "WanAnimateTransformer3DModel has them (0)", owners(F_ANIMATE, who, sizeof who, NULL));
    bool dropout = false;
    for (int i = 0; i < UNET_LEVELS_MAX; i++) dropout |= mc->cascade_dropout[i] != 0;
    if (!HAS(F_CASCADE) && (mc->clip_seq || mc->cascade_resample || dropout))
        return st_fail(ST_ERR_INVALID, "clip_seq: %lld; only %s has conditioning tokens of pooled vectors (0)",
                       LL(mc->clip_seq), owners(F_CASCADE, who, sizeof who, NULL));
    if (!HAS(F_CASCADE) && !HAS(F_UNET) &&
        (mc->unet_levels || mc->unet_layers || mc->unet_mid || mc->norm_groups || mc->unet_linear || mc->unet_cross))
        return st_fail(ST_ERR_INVALID, "block_out_channels: %lld levels; only %s are U-Nets (0)", LL(mc->unet_levels),
                       owners(F_UNET | F_CASCADE, who, sizeof who, NULL));
    if ((!HAS(F_TEXT2) && (mc->text2_len || mc->text2_dim)) || (!HAS(F_IMAGE_DIM) && mc->image_dim))
        return refuse_owned(mc, GROUP_TEXT2, F_TEXT2 | F_IMAGE_DIM, "them");
    if (!HAS(F_COND_CHANNELS) && mc->cond_channels)
        return refuse_owned(mc, GROUP_TEXT2, F_COND_CHANNELS, "condition channels");
    if (!HAS(F_MAX_TOKENS) && mc->max_tokens)
        return st_fail(ST_ERR_INVALID, "max_resolution: %lld tokens; only %s pads a non-square latent's tokens (0)",
                       LL(mc->max_tokens), owners(F_MAX_TOKENS, who, sizeof who, NULL));
    return ST_OK;
}

/* The refiner blocks and the frames, checked last. */
static st_status check_last(const model_config *mc, const family_desc *d)
{
    const bool refines = HAS(F_REFINER); /* a token refiner, a text conditioner or refiners, of blocks */
    char who[512];
    if (!HAS(F_TEXT_FUSION) && /* a text fusion's refiner blocks are checked with it */
        (mc->refiner_depth < (refines ? 1 : 0) || mc->refiner_depth > (refines ? MODEL_REFINER_MAX : 0)))
        return st_fail(ST_ERR_INVALID, "num_refiner_layers: %lld; the refiners (or text conditioner) of %s have %s %d",
                       LL(mc->refiner_depth), owners(F_REFINER, who, sizeof who, NULL),
                       refines ? "from 1 block to" : "blocks, the other families' at most",
                       refines ? MODEL_REFINER_MAX : 0);
    const bool video = model_video(mc), audio = model_audio(mc) || model_tokens(mc); /* a token model: its rows */
    if (mc->frames < 1 || mc->patch_t < 1 || mc->frames % mc->patch_t || (!video && !audio && mc->frames > 1))
        return st_fail(ST_ERR_INVALID, "num_frames: %lld latent frames, patch_size_t %lld; %s", LL(mc->frames),
                       LL(mc->patch_t), video || audio ? "the patch's frames must divide the latent's"
                                                       : "an image family takes 1 frame");
    return ST_OK;
}

/* axes_dims_rope's n widths fill each head */
static st_status check_axes(const model_config *mc, int n)
{
    const int64_t hd = mc->hidden / mc->heads, *a = mc->rope_axes;
    int64_t sum = 0;
    bool even = true;
    for (int i = 0; i < n; i++) sum += a[i], even &= a[i] >= 0 && a[i] % 2 == 0;
    if (!even || sum != hd)
        return st_fail(ST_ERR_INVALID, "axes_dims_rope: (%lld, %lld, %lld%s%.0lld) must be even widths that add up "
                       "to the head width %lld (hidden_size / num_heads)", LL(a[0]), LL(a[1]), LL(a[2]),
                       n == 4 ? ", " : "", n == 4 ? LL(a[3]) : 0LL, LL(hd));
    return ST_OK;
}

/* What every family's sizes satisfy. */
static st_status check_common(const model_config *mc, const family_desc *d)
{
    const bool text = d->traits & TR_TEXT;
    const struct {
        const char *key;
        int64_t v;
    } positive[] = {{"depth", mc->depth},           {"hidden_size", mc->hidden}, {"num_heads", mc->heads},
                    {"patch_size", mc->patch},      {"in_channels", mc->channels}, {"resolution", mc->height < mc->width ? mc->height : mc->width},
                    {"num_classes", mc->classes},   {"tokenizer_max_length", text ? mc->text_len : 1},
                    {"joint_attention_dim", text ? mc->text_dim : 1},
                    {"pooled_projection_dim", (d->traits & TR_POOLED) ? mc->pooled_dim : 1},
                    {"vae_scale_factor", mc->vae_scale}};
    for (size_t i = 0; i < sizeof positive / sizeof *positive; i++)
        if (positive[i].v < 1) return st_fail(ST_ERR_INVALID, "%s: %lld must be at least 1", positive[i].key,
                                              LL(positive[i].v));
    if (text && mc->text_vocab < 2)
        return st_fail(ST_ERR_INVALID, "text_vocab_size: %lld must be at least 2 (padding and one word)",
                       LL(mc->text_vocab));
    if (mc->hidden % mc->heads)
        return st_fail(ST_ERR_INVALID, "num_heads: %lld does not divide hidden_size %lld", LL(mc->heads),
                       LL(mc->hidden));
    if (mc->hidden % 4)
        return st_fail(ST_ERR_INVALID, "hidden_size: %lld must be a multiple of 4 (the 2D sine-cosine table)",
                       LL(mc->hidden));
    st_status st = d->axes ? check_axes(mc, d->axes) : ST_OK;
    if (st) return st;
    if (mc->classes >= (1 << 24))
        return st_fail(ST_ERR_INVALID, "num_classes: %lld; at most %d (labels travel as floats)", LL(mc->classes),
                       (1 << 24) - 1);
    if ((d->traits & TR_UNPOOLED) && (mc->pooled_dim || mc->guidance_embeds))
        return st_fail(ST_ERR_INVALID, "pooled_projection_dim: %lld, guidance_embeds %d; %s conditions on the timestep "
                       "alone (0 and false)", LL(mc->pooled_dim), (int)mc->guidance_embeds, mc->family);
    const int64_t dual_max = d->traits & TR_DUAL_ATTENTION ? mc->depth : 0;
    if (mc->dual_attention < 0 || mc->dual_attention > dual_max)
        return st_fail(ST_ERR_INVALID, "dual_attention_layers: the first %lld blocks; sd3 has %lld (other families "
                       "none)", LL(mc->dual_attention), LL(dual_max));
    const bool xattn = d->topology == TOPO_XATTN || d->topology == TOPO_LINEAR;
    if (mc->out_channels && (mc->out_channels < mc->channels || !xattn))
        return st_fail(ST_ERR_INVALID, "out_channels: %lld; %s", LL(mc->out_channels),
                       xattn ? "at least in_channels (the prediction is the first in_channels)"
                             : "only pixart_sigma's output differs from its input (0)");
    if (mc->height % mc->patch || mc->width % mc->patch)
        return st_fail(ST_ERR_INVALID, "patch_size: %lld does not divide the latent's %lld x %lld", LL(mc->patch),
                       LL(mc->height), LL(mc->width));
    return ST_OK;
}

st_status model_config_check(const model_config *mc)
{
    const family_desc *d = family_of_config(mc);
    if (!d->ops)
        return st_fail(ST_ERR_INVALID, "model_family: '%s' is not one of dit, mmdit, skipdit, flux, sd3, auraflow, "
                       "qwen_image", mc->family);
    st_status st = check_common(mc, d);
    if (!st) st = check_owned(mc, d);
    if (!st) st = check_owned_more(mc, d);
    if (!st && d->check) st = d->check(mc);
    return st ? st : check_last(mc, d);
}

/* Flux.2's and Flux.3's: no pooled text (Flux.3: nor guidance), and even timestep sinusoids */
st_status family_check_four(const model_config *mc, bool flux3)
{
    if (mc->pooled_dim || (mc->guidance_embeds && flux3))
        return st_fail(ST_ERR_INVALID, "pooled_projection_dim: %lld, guidance_embeds %d; %s has no pooled text vector "
                       "(0)%s", LL(mc->pooled_dim), (int)mc->guidance_embeds, mc->family,
                       flux3 ? " and no guidance embedding (false)" : "");
    if (mc->time_channels < 2 || mc->time_channels % 2 || mc->time_channels > 65536)
        return st_fail(ST_ERR_INVALID, "timestep_guidance_channels (Flux.3: timestep_channels): %lld must be even, 2 "
                       "to 65536", LL(mc->time_channels));
    return ST_OK;
}
