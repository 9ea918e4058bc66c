/* diffusers_config.c's readers for the cross-attention families (PixArt, Wan and its relatives, LTX-Video 0.9 and
 * 2.0, Cosmos 2 and Anima, Kandinsky 5, ACE-Step): each class's defaults, then the file's values. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "models/core/diffusers_json.h"
#include "models/core/internal.h"

/* PixArtTransformer2DModel's config: its defaults (PixArt-Sigma-XL-2-1024-MS's), then the file's values; the
 * micro-conditions (use_additional_conditions) and other block kinds are refused by name. */
st_status pixart_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t hd = 72, heads = 16, cross = 1152, interp = 0;
    mc->channels = 4, mc->out_channels = 8, mc->depth = 28, mc->text_dim = 4096, mc->sample_size = 128, mc->patch = 2;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd}, {"in_channels", &mc->channels},
                {"out_channels", &mc->out_channels}, {"num_layers", &mc->depth}, {"cross_attention_dim", &cross},
                {"caption_channels", &mc->text_dim}, {"sample_size", &mc->sample_size}, {"patch_size", &mc->patch},
                {"interpolation_scale", &interp}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_fixed_text(j, file, "norm_type", "ada_norm_single", "PixArt");
    if (!st) st = json_fixed_text(j, file, "activation_fn", "gelu-approximate", "PixArt");
    if (!st) st = json_fixed(j, file, "norm_eps", 1e-6, "PixArt");
    if (st) return st;
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(j, "use_additional_conditions");
    const bool micro = cJSON_IsTrue(extra) || ((!extra || cJSON_IsNull(extra)) && mc->sample_size == 128);
    if (micro || cross != hd * heads)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: use_additional_conditions %s, cross_attention_dim %lld; segtrain builds "
                       "PixArt Sigma's (no resolution and aspect-ratio micro-conditions, cross_attention_dim = the "
                       "width %lld)", file, micro ? "true" : "false", (long long)cross, (long long)(hd * heads));
    mc->heads = heads, mc->hidden = hd * heads, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    mc->interpolation = interp ? (double)interp : (double)(mc->sample_size / 64 > 1 ? mc->sample_size / 64 : 1);
    if (mc->out_channels == mc->channels) mc->out_channels = 0;
    return ST_OK;
}

/* patch_size as a list (frames, height, width), when given, into patch_t and patch */
static st_status patch_3d(const cJSON *j, const char *file, model_config *mc)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "patch_size");
    if (p && (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 3))
        return st_fail(ST_ERR_FORMAT, "%s: patch_size is not a list of 3 (frames, height, width)", file);
    for (int i = 0; p && i < 3; i++) {
        const cJSON *x = cJSON_GetArrayItem(p, i);
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 64 || x->valuedouble != floor(x->valuedouble))
            return st_fail(ST_ERR_FORMAT, "%s: patch_size[%d] is not a whole number 1 to 64", file, i);
    }
    if (!p) return ST_OK;
    mc->patch_t = (int64_t)cJSON_GetArrayItem(p, 0)->valuedouble;
    mc->patch = (int64_t)cJSON_GetArrayItem(p, 1)->valuedouble;
    if (cJSON_GetArrayItem(p, 2)->valuedouble != (double)mc->patch)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size's height and width differ; segtrain's patches are square",
                       file);
    return ST_OK;
}

/* WanTransformer3DModel's config: its defaults (Wan 2.1 T2V 14B's), then the file's values; the image-to-video
 * branches (image_dim, added_kv_proj_dim) and what the published text-to-video configs do not vary are refused. */
/* Wan's keys; with animate, WanAnimateTransformer3DModel's defaults and in_channels = 2 latent_channels + 4 */
static st_status wan_read(const cJSON *j, const char *file, model_config *mc, bool animate)
{
    st_status st = ST_OK;
    int64_t hd = 128, heads = 40, out = 16, freq = 256, rope_len = 1024, latent = 16;
    mc->channels = animate ? 36 : 16, mc->depth = 40, mc->text_dim = 4096, mc->ffn_dim = 13824, mc->patch = 2;
    mc->patch_t = 1;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd}, {"in_channels", &mc->channels},
                {"out_channels", &out}, {"text_dim", &mc->text_dim}, {"freq_dim", &freq}, {"ffn_dim", &mc->ffn_dim},
                {"num_layers", &mc->depth}, {"rope_max_seq_len", &rope_len}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_fixed(j, file, "eps", 1e-6, "Wan");
    if (!st) st = json_fixed_text(j, file, "qk_norm", "rms_norm_across_heads", "Wan");
    if (st) return st;
    if ((st = patch_3d(j, file, mc))) return st;
    static const char *const branches[] = {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"};
    for (size_t i = animate ? 2 : 0; i < sizeof branches / sizeof *branches; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, branches[i]);
        if (x && !cJSON_IsNull(x))
            return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is set (an image-to-video model's image branch); segtrain builds "
                           "Wan's text-to-video transformer, where it is null", file, branches[i]);
    }
    if (animate && (st = json_int(j, file, "latent_channels", &latent))) return st;
    if (animate && mc->channels != 2 * latent + 4)
        return st_fail(ST_ERR_FORMAT, "%s: in_channels %lld is not 2 latent_channels (%lld) + 4", file,
                       (long long)mc->channels, (long long)latent);
    if (animate) mc->cond_channels = mc->channels - latent, mc->channels = latent;
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(j, "cross_attn_norm");
    if ((cn && !cJSON_IsTrue(cn)) || freq != DIT_FREQ_DIM || out != mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: cross_attn_norm %s, freq_dim %lld, out_channels %lld; segtrain builds "
                       "Wan's with cross_attn_norm true, freq_dim 256 and out_channels = in_channels (%lld)", file,
                       cn && !cJSON_IsTrue(cn) ? "false" : "true", (long long)freq, (long long)out,
                       (long long)mc->channels);
    mc->heads = heads, mc->hidden = hd * heads, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    if (mc->ffn_dim == 4 * mc->hidden) mc->ffn_dim = 0;
    mc->vace_count = mc->vace_every = mc->vace_channels = 0;
    mc->anyflow = mc->anyflow_interval = false, mc->anyflow_gate = 0;
    if (!animate) {
        mc->cond_channels = mc->image_tokens = mc->image_dim = mc->face_every = mc->face_size = 0;
        mc->motion_style = mc->motion_dim = mc->motion_out = mc->face_hidden = mc->face_heads = 0;
        memset(mc->motion_channels, 0, sizeof mc->motion_channels);
    }
    return ST_OK;
}

st_status wan_from_json(const cJSON *j, const char *file, model_config *mc) { return wan_read(j, file, mc, false); }

/* WanAnimateTransformer3DModel's config: Wan's, its image-to-video inputs (image_dim; added_kv_proj_dim must be the
 * hidden width, as the published config's is: without it the class would read the image tokens as text), its
 * motion encoder's (motion_encoder_channel_sizes by edge as text, "4" to "1024"), its face encoder's and
 * inject_face_latents_blocks; the image tokens are CLIP's 257 unless mc says. */
st_status wan_animate_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = wan_read(j, file, mc, true);
    int64_t added = -1, image_dim = 1280, size = 512, style = 512, motion = 20, out = 512, hid = 1024, heads = 4,
            every = 5;
    static const int64_t real[9] = {512, 512, 512, 512, 256, 128, 64, 32, 16}; /* the class's default table */
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"image_dim", &image_dim}, {"added_kv_proj_dim", &added}, {"motion_encoder_size", &size},
                {"motion_style_dim", &style}, {"motion_dim", &motion}, {"motion_encoder_dim", &out},
                {"face_encoder_hidden_dim", &hid}, {"face_encoder_num_heads", &heads},
                {"inject_face_latents_blocks", &every}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (st) return st;
    const cJSON *idim = cJSON_GetObjectItemCaseSensitive(j, "image_dim");
    if (added != mc->hidden || (idim && cJSON_IsNull(idim))) {
        char a[24] = "null";
        if (added >= 0) snprintf(a, sizeof a, "%lld", (long long)added);
        return st_fail(ST_ERR_UNSUPPORTED, "%s: added_kv_proj_dim %s, image_dim %s; segtrain builds Wan Animate with "
                       "the image tokens' added keys and values of the hidden width %lld, as its published config has "
                       "them", file, a, idim && cJSON_IsNull(idim) ? "null" : "set", (long long)mc->hidden);
    }
    memcpy(mc->motion_channels, real, sizeof real);
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "motion_encoder_channel_sizes");
    if (ch && !cJSON_IsNull(ch)) {
        if (!cJSON_IsObject(ch))
            return st_fail(ST_ERR_FORMAT, "%s: motion_encoder_channel_sizes is not an object of edge: channels", file);
        memset(mc->motion_channels, 0, sizeof mc->motion_channels);
        for (int k = 0; k < 9; k++) {
            char edge[8];
            snprintf(edge, sizeof edge, "%d", 4 << k);
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(ch, edge);
            if (v && (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (1 << 16) ||
                      v->valuedouble != floor(v->valuedouble)))
                return st_fail(ST_ERR_FORMAT, "%s: motion_encoder_channel_sizes[\"%s\"] is not a whole number 1 to "
                               "65536", file, edge);
            if (v) mc->motion_channels[k] = (int64_t)v->valuedouble;
        }
    }
    if (!mc->image_tokens) mc->image_tokens = 257;
    mc->image_dim = image_dim, mc->face_size = size, mc->motion_style = style, mc->motion_dim = motion;
    mc->motion_out = out, mc->face_hidden = hid, mc->face_heads = heads, mc->face_every = every;
    return ST_OK;
}

/* AnyFlowTransformer3DModel's config (NVIDIA's bidirectional AnyFlow-Wan2.1-T2V): Wan's, then gate_value (0.25) and
 * deltatime_type ("r" or "t-r"). */
st_status anyflow_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = wan_from_json(j, file, mc);
    if (st) return st;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "gate_value");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "deltatime_type");
    mc->anyflow = true, mc->anyflow_gate = 0.25, mc->anyflow_interval = false;
    if (g && !cJSON_IsNull(g)) {
        if (!cJSON_IsNumber(g) || !(g->valuedouble >= 0 && g->valuedouble <= 1))
            return st_fail(ST_ERR_FORMAT, "%s: gate_value is not a number from 0 to 1", file);
        mc->anyflow_gate = g->valuedouble;
    }
    if (dt && !cJSON_IsNull(dt)) {
        if (!cJSON_IsString(dt) || (strcmp(dt->valuestring, "r") && strcmp(dt->valuestring, "t-r")))
            return st_fail(ST_ERR_FORMAT, "%s: deltatime_type is not \"r\" or \"t-r\"", file);
        mc->anyflow_interval = !strcmp(dt->valuestring, "t-r");
    }
    return ST_OK;
}

/* WanVACETransformer3DModel's config: Wan's, then its control branch: vace_layers (its default, 0, 5, ..., 35, is
 * the 14B's) must be 0, k, 2k, ... (every published VACE's is), vace_in_channels (96). */
st_status wan_vace_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = wan_from_json(j, file, mc);
    int64_t layers[64] = {0, 5, 10, 15, 20, 25, 30, 35}, n = 8, channels = 96;
    if (!st) st = json_int(j, file, "vace_in_channels", &channels);
    if (st) return st;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "vace_layers");
    if (v && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1 || cJSON_GetArraySize(v) > 64))
        return st_fail(ST_ERR_FORMAT, "%s: vace_layers is not a list of 1 to 64 block indices", file);
    if (v) {
        n = cJSON_GetArraySize(v);
        if ((st = json_axes(j, file, "vace_layers", (int)n, layers))) return st;
    }
    const int64_t every = n > 1 ? layers[1] : 1;
    for (int64_t i = 0; i < n; i++)
        if (layers[i] != i * every || every < 1)
            return st_fail(ST_ERR_UNSUPPORTED, "%s: vace_layers [%lld, %lld, ...] are not 0, k, 2k, ...; segtrain "
                           "builds VACE's hints every k blocks from block 0, as every published VACE has them", file,
                           (long long)layers[0], (long long)(n > 1 ? layers[1] : 0));
    mc->vace_count = n, mc->vace_every = every, mc->vace_channels = channels;
    return ST_OK;
}

/* LTXVideoTransformer3DModel's config: its defaults (LTX-Video 0.9.x's), then the file's values; what the
 * published 0.9.x configs do not vary is refused by name. */
st_status ltxvideo_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t hd = 64, heads = 32, out = 128, cross = 2048;
    mc->channels = 128, mc->depth = 28, mc->text_dim = 4096, mc->patch = 1, mc->patch_t = 1;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd}, {"in_channels", &mc->channels},
                {"out_channels", &out}, {"caption_channels", &mc->text_dim}, {"cross_attention_dim", &cross},
                {"num_layers", &mc->depth}, {"patch_size", &mc->patch}, {"patch_size_t", &mc->patch_t}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_fixed(j, file, "norm_eps", 1e-6, "LTX-Video");
    if (!st) st = json_fixed_text(j, file, "qk_norm", "rms_norm_across_heads", "LTX-Video");
    if (!st) st = json_fixed_text(j, file, "activation_fn", "gelu-approximate", "LTX-Video");
    if (!st) st = json_fixed_bool(j, file, "norm_elementwise_affine", false, "LTX-Video");
    if (!st) st = json_fixed_bool(j, file, "attention_bias", true, "LTX-Video");
    if (!st) st = json_fixed_bool(j, file, "attention_out_bias", true, "LTX-Video");
    if (st) return st;
    if (out != mc->channels || cross != hd * heads)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, cross_attention_dim %lld; segtrain builds LTX-Video's "
                       "with out_channels = in_channels (%lld) and cross_attention_dim = the width (%lld)", file,
                       (long long)out, (long long)cross, (long long)mc->channels, (long long)(hd * heads));
    mc->heads = heads, mc->hidden = hd * heads, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    return ST_OK;
}

/* LTX2VideoTransformer3DModel's config as diffusers converts LTX-2.0 (scripts/convert_ltx2_to_diffusers.py, version
 * 2.0): the class's defaults, then the file's values. What LTX-2.0 does not vary is refused by name, the 2.3 and 2.5
 * additions (gated attention, cross_attn_mod, no caption projection, perturbed attention) among it. rope_type must
 * be given as "split" (the class's default is "interleaved", which no published LTX-2 uses). */
st_status ltx2_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t hd = 128, heads = 32, out = 128, cross = 4096, caption = 3840;
    int64_t ahd = 64, aheads = 32, aout = 128, across = 2048, apatch = 1, apatch_t = 1;
    int64_t scale[3] = {8, 32, 32};
    mc->channels = 128, mc->depth = 48, mc->patch = 1, mc->patch_t = 1, mc->audio_channels = 128;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd}, {"in_channels", &mc->channels},
                {"out_channels", &out}, {"caption_channels", &caption}, {"cross_attention_dim", &cross},
                {"num_layers", &mc->depth}, {"patch_size", &mc->patch}, {"patch_size_t", &mc->patch_t},
                {"audio_num_attention_heads", &aheads}, {"audio_attention_head_dim", &ahd},
                {"audio_in_channels", &mc->audio_channels}, {"audio_out_channels", &aout},
                {"audio_cross_attention_dim", &across}, {"audio_patch_size", &apatch},
                {"audio_patch_size_t", &apatch_t}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "vae_scale_factors", 3, scale);
    const struct {
        const char *key;
        double want;
    } fixed[] = {{"pos_embed_max_pos", 20},          {"base_height", 2048},        {"base_width", 2048},
                 {"audio_scale_factor", 4},          {"audio_pos_embed_max_pos", 20}, {"audio_sampling_rate", 16000},
                 {"audio_hop_length", 160},          {"norm_eps", 1e-6},           {"rope_theta", 10000},
                 {"causal_offset", 1},               {"timestep_scale_multiplier", 1000},
                 {"cross_attn_timestep_scale_multiplier", 1000}};
    for (size_t i = 0; !st && i < sizeof fixed / sizeof *fixed; i++)
        st = json_fixed(j, file, fixed[i].key, fixed[i].want, "LTX-2.0");
    if (!st) st = json_fixed_text(j, file, "qk_norm", "rms_norm_across_heads", "LTX-2.0");
    if (!st) st = json_fixed_text(j, file, "activation_fn", "gelu-approximate", "LTX-2.0");
    if (st) return st;
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(j, "rope_type");
    if (!cJSON_IsString(rt) || strcmp(rt->valuestring, "split"))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: rope_type is %s; segtrain builds LTX-2's \"split\" rotation (the "
                       "class's default, \"interleaved\", is no published LTX-2's)", file,
                       cJSON_IsString(rt) ? rt->valuestring : "not given");
    static const char *const later = "LTX-2.0 (LTX-2.3 and 2.5 set it; their flavours are not built)";
    const struct {
        const char *key;
        bool want;
        const char *what;
    } flags[] = {{"gated_attn", false, later},           {"cross_attn_mod", false, later},
                 {"audio_gated_attn", false, later},     {"audio_cross_attn_mod", false, later},
                 {"use_prompt_embeddings", true, later}, {"perturbed_attn", false, later},
                 {"norm_elementwise_affine", false, "LTX-2.0"}, {"attention_bias", true, "LTX-2.0"},
                 {"attention_out_bias", true, "LTX-2.0"}, {"rope_double_precision", true, "LTX-2.0"},
                 {"ff_bias", true, "LTX-2.0"},           {"audio_ff_bias", true, "LTX-2.0"},
                 {"use_keyframes_abs_pos_embedding", false, "LTX-2.0"}};
    for (size_t i = 0; !st && i < sizeof flags / sizeof *flags; i++)
        st = json_fixed_bool(j, file, flags[i].key, flags[i].want, flags[i].what);
    if (st) return st;
    if (out != mc->channels || cross != hd * heads || aout != mc->audio_channels || across != ahd * aheads ||
        apatch != 1 || apatch_t != 1 || scale[0] != 8 || scale[1] != 32 || scale[2] != 32)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, cross_attention_dim %lld, audio_out_channels %lld, "
                       "audio_cross_attention_dim %lld, audio patches %lld x %lld, vae_scale_factors (%lld, %lld, "
                       "%lld); segtrain builds LTX-2.0's: outputs as wide as inputs (%lld, %lld), cross-attention as "
                       "wide as each stream (%lld, %lld), 1 x 1 audio patches and (8, 32, 32)", file, (long long)out,
                       (long long)cross, (long long)aout, (long long)across, (long long)apatch, (long long)apatch_t,
                       (long long)scale[0], (long long)scale[1], (long long)scale[2], (long long)mc->channels,
                       (long long)mc->audio_channels, (long long)(hd * heads), (long long)(ahd * aheads));
    mc->heads = heads, mc->hidden = hd * heads, mc->audio_heads = aheads, mc->audio_hidden = ahd * aheads;
    mc->text_dim = 2 * caption, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    return ST_OK;
}

/* CosmosTransformer3DModel's config as Cosmos-Predict2's text-to-image models set it: its defaults, then the file's
 * values; what segtrain does not build (learnable positions, image context, controlnet, the cross-attention
 * projection, no padding-mask channel, other rope_scale, a temporal patch) is refused by name. */
st_status cosmos_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t hd = 128, heads = 32, out = 16, patch[3] = {1, 2, 2}, scale[3] = {0};
    double ratio = 4.0;
    mc->channels = 16, mc->depth = 28, mc->text_dim = 1024, mc->adaln_lora = 256;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd}, {"in_channels", &mc->channels},
                {"out_channels", &out}, {"num_layers", &mc->depth}, {"text_embed_dim", &mc->text_dim},
                {"adaln_lora_dim", &mc->adaln_lora}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "patch_size", 3, patch);
    if (st) return st;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "mlp_ratio");
    if (r && cJSON_IsNumber(r)) ratio = r->valuedouble;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scale");
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_IsArray(rs) ? cJSON_GetArrayItem(rs, i) : NULL;
        scale[i] = x && cJSON_IsNumber(x) ? (int64_t)(x->valuedouble * 4.0) : -1;
    }
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(j, "concat_padding_mask");
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(j, "extra_pos_embed_type");
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(j, "use_crossattn_projection");
    const cJSON *ic = cJSON_GetObjectItemCaseSensitive(j, "img_context_dim_in");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(j, "controlnet_block_every_n");
    if ((pm && !cJSON_IsTrue(pm)) || !ep || !cJSON_IsNull(ep) || cJSON_IsTrue(cp) || (ic && !cJSON_IsNull(ic)) ||
        (cn && !cJSON_IsNull(cn)))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: concat_padding_mask, extra_pos_embed_type, use_crossattn_projection, "
                       "img_context_dim_in or controlnet_block_every_n; segtrain builds Cosmos-Predict2's text-to-image "
                       "transformer (true, null, false, null, null)", file);
    if (patch[0] != 1 || patch[1] != patch[2] || scale[0] != 4 || scale[1] != 16 || scale[2] != 16 ||
        out != mc->channels || ratio * (double)(hd * heads) != floor(ratio * (double)(hd * heads)))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size, rope_scale, out_channels or mlp_ratio; segtrain builds "
                       "Cosmos 2's patch (1, p, p), rope_scale (1, 4, 4), out_channels = in_channels (%lld) and a whole "
                       "feed-forward width", file, (long long)mc->channels);
    mc->patch = patch[1], mc->patch_t = 1, mc->heads = heads, mc->hidden = hd * heads, mc->single_depth = 0;
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    mc->ffn_dim = (int64_t)(ratio * (double)mc->hidden) == 4 * mc->hidden ? 0 : (int64_t)(ratio * (double)mc->hidden);
    return ST_OK;
}

/* AceStepTransformer1DModel's config (ACE-Step 1.5): its defaults, then the file's values; attention biases,
 * dropout and layer types other than its default alternation (sliding on even layers) are refused by name. */
st_status ace_step_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t hd = 128, in = 192, patch = 2, window = 128;
    mc->hidden = 2048, mc->ffn_dim = 6144, mc->depth = 24, mc->heads = 16, mc->kv_heads = 8, mc->channels = 64;
    mc->text_dim = 0;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"hidden_size", &mc->hidden}, {"intermediate_size", &mc->ffn_dim}, {"num_hidden_layers", &mc->depth},
                {"num_attention_heads", &mc->heads}, {"num_key_value_heads", &mc->kv_heads}, {"head_dim", &hd},
                {"in_channels", &in}, {"audio_acoustic_hidden_dim", &mc->channels}, {"patch_size", &patch},
                {"sliding_window", &window}, {"encoder_hidden_size", &mc->text_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (st) return st;
    if (!mc->text_dim) mc->text_dim = mc->hidden; /* encoder_hidden_size null: the model's width */
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(j, "attention_bias");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(j, "attention_dropout");
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(j, "rope_theta");
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "rms_norm_eps");
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    bool alternating = !types || cJSON_IsNull(types);
    if (cJSON_IsArray(types) && cJSON_GetArraySize(types) == mc->depth) {
        alternating = true;
        for (int i = 0; i < (int)mc->depth; i++) {
            const cJSON *t = cJSON_GetArrayItem(types, i);
            alternating &= cJSON_IsString(t) && !strcmp(t->valuestring, i % 2 ? "full_attention" : "sliding_attention");
        }
    }
    if (cJSON_IsTrue(bias) || (drop && (!cJSON_IsNumber(drop) || drop->valuedouble != 0)) ||
        (theta && (!cJSON_IsNumber(theta) || theta->valuedouble != 1e6)) ||
        (eps && (!cJSON_IsNumber(eps) || eps->valuedouble != 1e-6)) || !alternating)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: attention_bias, attention_dropout, rope_theta, rms_norm_eps or "
                       "layer_types; segtrain builds ACE-Step 1.5's (false, 0, 1e6, 1e-6, sliding and full attention "
                       "alternating from layer 0)", file);
    if (patch != 2 || hd * mc->heads != mc->hidden || in <= mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size %lld, head_dim %lld x %lld heads, in_channels %lld; segtrain "
                       "builds patches of 2 frames, heads as wide as hidden_size (%lld) and in_channels above "
                       "audio_acoustic_hidden_dim (%lld: the context latents come first)", file, (long long)patch,
                       (long long)hd, (long long)mc->heads, (long long)in, (long long)mc->hidden,
                       (long long)mc->channels);
    mc->patch_t = patch, mc->patch = 1, mc->resolution = 1, mc->window = window, mc->cond_channels = in - mc->channels;
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    return ST_OK;
}

/* Kandinsky5Transformer3DModel's config: its defaults, then the file's values (visual_cond: the video models' reference
 * channels, cond_channels); what segtrain does not build (other axes or patches, another output width, another
 * attention) is refused by name. */
st_status kandinsky5_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t out = 4, patch[3] = {1, 2, 2}, axes[3] = {16, 24, 24};
    mc->channels = 4, mc->text_dim = 3584, mc->pooled_dim = 768, mc->time_dim = 512, mc->hidden = 2048;
    mc->ffn_dim = 5120, mc->text_blocks = 2, mc->depth = 32;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_visual_dim", &mc->channels}, {"in_text_dim", &mc->text_dim}, {"in_text_dim2", &mc->pooled_dim},
                {"time_dim", &mc->time_dim},      {"out_visual_dim", &out},         {"model_dim", &mc->hidden},
                {"ff_dim", &mc->ffn_dim},          {"num_text_blocks", &mc->text_blocks},
                {"num_visual_blocks", &mc->depth}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "patch_size", 3, patch);
    if (!st) st = json_axes(j, file, "axes_dims", 3, axes);
    if (st) return st;
    /* attention_type "nabla" (the 10 s video models) takes effect only when the caller passes sparse_params, which
     * SimpleTuner never does: they train with dense attention there, and here */
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "attention_type");
    if (at && !cJSON_IsNull(at) && !(cJSON_IsString(at) && (!strcmp(at->valuestring, "regular") ||
                                                            !strcmp(at->valuestring, "nabla"))))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: attention_type; segtrain builds Kandinsky 5's \"regular\" attention "
                       "(and \"nabla\" models densely, as SimpleTuner calls them: without sparse_params)", file);
    mc->cond_channels = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "visual_cond")) ? mc->channels + 1 : 0;
    const int64_t hd = axes[0] + axes[1] + axes[2];
    if (patch[0] != 1 || patch[1] != patch[2] || out != mc->channels || hd < 16 || hd % 16 || axes[0] != hd / 4 ||
        axes[1] != 3 * hd / 8 || axes[2] != axes[1] || mc->hidden % hd)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size, out_visual_dim, axes_dims or model_dim; segtrain builds "
                       "Kandinsky 5's patch (1, p, p), out_visual_dim = in_visual_dim (%lld) and axes (hd / 4, 3 hd / 8, "
                       "3 hd / 8) of a head width hd that divides model_dim", file, (long long)mc->channels);
    mc->patch = patch[1], mc->patch_t = 1, mc->heads = mc->hidden / hd, mc->single_depth = 0;
    mc->guidance_embeds = false;
    if (mc->ffn_dim == 4 * mc->hidden) mc->ffn_dim = 0;
    return ST_OK;
}

/* Anima's: Cosmos's transformer, then its AnimaTextConditioner's config.json in text_conditioner/ beside the
 * transformer's (the pipeline's layout, or a fixture's: in the transformer's folder). What the conditioner's reader
 * does not build is refused by name: another width than the transformer's text (in_proj), other heads, a LayerNorm,
 * no self-attention, another mlp_ratio. */
st_status anima_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = cosmos_from_json(j, file, mc);
    if (st) return st;
    char dir[4096], sub[4200], resolved[4300];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    const size_t n = strlen(dir);
    if (n >= 11 && !strcmp(dir + n - 11, "transformer") && (n == 11 || dir[n - 12] == '/'))
        dir[n - 11] = 0, snprintf(sub, sizeof sub, "%stext_conditioner", n == 11 ? "./" : dir);
    else snprintf(sub, sizeof sub, "%s/text_conditioner", dir);
    cJSON *c;
    if ((st = json_read_config(sub, resolved, sizeof resolved, &c))) return st;
    int64_t source = 1024, target = 1024, width = 1024, layers = 6, heads = 16, vocab = 32128, min_len = 512;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"source_dim", &source}, {"target_dim", &target}, {"model_dim", &width}, {"num_layers", &layers},
                {"num_attention_heads", &heads}, {"target_vocab_size", &vocab}, {"min_sequence_length", &min_len}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(c, resolved, keys[i].key, keys[i].v);
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(c, "_class_name");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "mlp_ratio");
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(c, "use_self_attention");
    const cJSON *ln = cJSON_GetObjectItemCaseSensitive(c, "use_layer_norm");
    if (!st && (!cJSON_IsString(cls) || strcmp(cls->valuestring, "AnimaTextConditioner")))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: _class_name %s; anima's text conditioner is an AnimaTextConditioner",
                     resolved, cJSON_IsString(cls) ? cls->valuestring : "(none)");
    if (!st && (width != target || target != mc->text_dim || heads != mc->heads || layers < 1 ||
                layers > MODEL_REFINER_MAX || (r && (!cJSON_IsNumber(r) || r->valuedouble != 4.0)) ||
                (sa && !cJSON_IsTrue(sa)) || cJSON_IsTrue(ln)))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: model_dim %lld, target_dim %lld, num_attention_heads %lld, num_layers "
                     "%lld, mlp_ratio, use_self_attention or use_layer_norm; segtrain builds the conditioner as wide as "
                     "the transformer's text_embed_dim (%lld, no in_proj), with its heads (%lld), 1 to %d blocks, "
                     "mlp_ratio 4, self-attention and RMSNorms", resolved, (long long)width, (long long)target,
                     (long long)heads, (long long)layers, (long long)mc->text_dim, (long long)mc->heads,
                     MODEL_REFINER_MAX);
    cJSON_Delete(c);
    if (st) return st;
    mc->source_dim = source, mc->refiner_depth = layers, mc->text_vocab = vocab, mc->text_min_len = min_len;
    return ST_OK;
}

/* SanaTransformer2DModel's config (video false) or SanaVideoTransformer3DModel's (true): the class defaults
 * (Sana_1600M_1024px's; SANA-Video 2B's but mlp_ratio 2.5), then the file's values. What segtrain does not build is
 * refused by name: q/k norms other than rms_norm_across_heads, guidance embeds (Sana Sprint's, Sana-Video's
 * guidance_embeds), Sana's position table (interpolation_scale), a cross-attention narrower or wider than the
 * stream, affine or other norms, a timestep_scale other than 1, attention biases. */
static st_status sana_read(const cJSON *j, const char *file, model_config *mc, bool video)
{
    st_status st = ST_OK;
    int64_t hd = video ? 112 : 32, heads = video ? 20 : 70, cross_hd = 112, cross = 2240, out = video ? 16 : 32;
    double ratio = 2.5;
    mc->channels = out, mc->depth = 20, mc->cross_heads = 20, mc->text_dim = 2304, mc->patch = video ? 2 : 1;
    mc->patch_t = 1, mc->sample_size = video ? 30 : 32;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &mc->channels}, {"out_channels", &out}, {"num_attention_heads", &heads},
                {"attention_head_dim", &hd}, {"num_layers", &mc->depth},
                {"num_cross_attention_heads", &mc->cross_heads},
                {"cross_attention_head_dim", &cross_hd}, {"cross_attention_dim", &cross},
                {"caption_channels", &mc->text_dim}, {"sample_size", &mc->sample_size}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, keys[i].key);
        if (!cJSON_IsNull(x)) st = json_int(j, file, keys[i].key, keys[i].v); /* out_channels: null */
    }
    if (!st) st = video ? patch_3d(j, file, mc) : json_int(j, file, "patch_size", &mc->patch);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "mlp_ratio");
    if (!st && r && !cJSON_IsNull(r)) {
        if (!cJSON_IsNumber(r) || !(r->valuedouble > 0 && r->valuedouble <= 64))
            return st_fail(ST_ERR_FORMAT, "%s: mlp_ratio is not a number in (0, 64]", file);
        ratio = r->valuedouble;
    }
    const cJSON *qk = cJSON_GetObjectItemCaseSensitive(j, "qk_norm");
    if (!st && qk && !cJSON_IsNull(qk) && !(cJSON_IsString(qk) && !strcmp(qk->valuestring, "rms_norm_across_heads")))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: qk_norm is not null or \"rms_norm_across_heads\" (Sana 1.5's and "
                     "Sana-Video's), the norms segtrain builds Sana with", file);
    mc->qk_norm = cJSON_IsString(qk) || (video && !qk); /* Sana-Video's default has them */
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "interpolation_scale"); /* Sana-Video's class ignores it */
    if (!st && !video && x && !cJSON_IsNull(x))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: interpolation_scale is set: a sin-cos position table, which segtrain "
                     "does not build (Sana 1.0's is null)", file);
    if (!st)
        st = json_fixed_bool(j, file, "guidance_embeds", false,
                             video ? "Sana-Video (its guidance embedding is not built)"
                                   : "Sana 1.0 (Sprint's guidance is not built)");
    if (!st) st = json_fixed_bool(j, file, "attention_bias", false, "Sana (the class default)");
    if (!st) st = json_fixed_bool(j, file, "norm_elementwise_affine", false, "Sana (the class default)");
    if (!st) st = json_fixed(j, file, "norm_eps", 1e-6, "Sana (the class default)");
    if (!st && !video) st = json_fixed(j, file, "timestep_scale", 1.0, "Sana (the class default)");
    if (!st) st = json_fixed(j, file, "dropout", 0, "training");
    if (st) return st;
    if (cross != hd * heads || cross_hd * mc->cross_heads != cross || out != mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: cross_attention_dim %lld, %lld cross heads x %lld, out_channels %lld; "
                       "segtrain builds Sana's cross-attention as wide as the stream (%lld) and an output of "
                       "in_channels", file, (long long)cross, (long long)mc->cross_heads, (long long)cross_hd,
                       (long long)out, (long long)(hd * heads));
    mc->heads = heads, mc->hidden = hd * heads, mc->ffn_dim = (int64_t)(ratio * (double)mc->hidden);
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false, mc->out_channels = 0;
    return ST_OK;
}

st_status sana_from_json(const cJSON *j, const char *file, model_config *mc) { return sana_read(j, file, mc, false); }

st_status sanavideo_from_json(const cJSON *j, const char *file, model_config *mc)
{
    return sana_read(j, file, mc, true);
}
