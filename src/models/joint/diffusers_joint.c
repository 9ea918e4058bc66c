/* diffusers_config.c's readers for the single-stream joint families (Lumina 2, Z-Image, ERNIE-Image, OmniGen,
 * Krea 2, Flux.3, Qwen-Image 2.1, Ideogram 4): each class's defaults, then the file's values. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "models/core/diffusers_json.h"
#include "models/core/internal.h"

/* Lumina2Transformer2DModel's config: its class defaults (cap_feat_dim 1024: the published Lumina-Image 2.0's is 2304,
 * which the file says), then the file's; the feed-forward's width as LuminaFeedForward rounds it (4 hidden_size,
 * times ffn_dim_multiplier, up to a multiple of multiple_of). */
st_status lumina2_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t heads = 24, out = 0, multiple = 256, axes[3] = {32, 32, 32};
    mc->channels = 16, mc->depth = 26, mc->refiner_depth = 2, mc->hidden = 2304, mc->kv_heads = 8, mc->patch = 2;
    mc->text_dim = 1024, mc->patch_t = 1, mc->norm_eps = 1e-5;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"num_attention_heads", &heads}, {"num_kv_heads", &mc->kv_heads}, {"in_channels", &mc->channels},
                {"out_channels", &out}, {"hidden_size", &mc->hidden}, {"num_layers", &mc->depth},
                {"num_refiner_layers", &mc->refiner_depth}, {"patch_size", &mc->patch}, {"multiple_of", &multiple},
                {"cap_feat_dim", &mc->text_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_fixed(j, file, "scaling_factor", 1.0, "Lumina 2 (every published config's)");
    if (!st) st = json_axes(j, file, "axes_dim_rope", 3, axes);
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    if (st) return st;
    int64_t inner = 4 * mc->hidden;
    const cJSON *mult = cJSON_GetObjectItemCaseSensitive(j, "ffn_dim_multiplier");
    if (mult && !cJSON_IsNull(mult)) {
        if (!cJSON_IsNumber(mult) || !(mult->valuedouble > 0 && mult->valuedouble <= 2))
            return st_fail(ST_ERR_UNSUPPORTED, "%s: ffn_dim_multiplier is not a number in (0, 2]", file);
        inner = (int64_t)(mult->valuedouble * (double)inner);
    }
    if (multiple < 1 || heads < 1 || (out && out != mc->channels))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: multiple_of %lld, num_attention_heads %lld, out_channels %lld; "
                       "segtrain builds Lumina 2 with at least 1, at least 1 and out_channels null or in_channels "
                       "(%lld)", file, (long long)multiple, (long long)heads, (long long)out, (long long)mc->channels);
    mc->ffn_dim = multiple * ((inner + multiple - 1) / multiple);
    mc->heads = heads, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    for (int a = 0; a < 3; a++) mc->rope_axes[a] = axes[a];
    mc->rope_axes[3] = 0;
    return ST_OK;
}

/* ZImageTransformer2DModel's config: its defaults (Z-Image's), then the file's values; Omni's SigLIP inputs, other
 * patch sizes, rotary bases and time scales are refused by name. n_kv_heads is read by nothing in the class (its
 * attention has n_heads keys and values), so it is not read here either. */
st_status zimage_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t heads = 30, patch[1] = {2}, patch_t[1] = {1}, axes[3] = {32, 48, 48};
    mc->channels = 16, mc->depth = 30, mc->refiner_depth = 2, mc->hidden = 3840, mc->text_dim = 2560;
    mc->norm_eps = 1e-5;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"n_heads", &heads}, {"in_channels", &mc->channels}, {"dim", &mc->hidden}, {"n_layers", &mc->depth},
                {"n_refiner_layers", &mc->refiner_depth}, {"cap_feat_dim", &mc->text_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_fixed(j, file, "rope_theta", 256.0, "Z-Image (every published config's)");
    if (!st) st = json_fixed(j, file, "t_scale", 1000.0, "Z-Image (every published config's)");
    if (!st) st = json_fixed_bool(j, file, "qk_norm", true, "Z-Image");
    if (!st) st = json_axes(j, file, "axes_dims", 3, axes);
    if (!st) st = json_axes(j, file, "all_patch_size", 1, patch);
    if (!st) st = json_axes(j, file, "all_f_patch_size", 1, patch_t);
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    if (st) return st;
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(j, "siglip_feat_dim");
    if (sig && !cJSON_IsNull(sig))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: siglip_feat_dim is set: Z-Image Omni's SigLIP image inputs "
                       "(model_family z_image_omni), which segtrain does not build", file);
    if (heads < 1 || patch_t[0] != 1)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: n_heads %lld, all_f_patch_size [%lld]; segtrain builds Z-Image with at "
                       "least 1 and [1]", file, (long long)heads, (long long)patch_t[0]);
    mc->patch = patch[0], mc->patch_t = 1, mc->heads = heads, mc->kv_heads = heads;
    mc->ffn_dim = (int64_t)((double)mc->hidden / 3.0 * 8.0); /* the class's int(dim / 3 * 8) */
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    for (int a = 0; a < 3; a++) mc->rope_axes[a] = axes[a];
    mc->rope_axes[3] = 0;
    return ST_OK;
}

/* ErnieImageTransformer2DModel's config: the class defaults, then the file's values (baidu/ERNIE-Image's: 36 layers
 * of 4096); other rotary bases, out_channels and qk_layernorm false are refused by name. */
st_status ernie_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t heads = 24, out = 128, axes[3] = {32, 48, 48};
    mc->hidden = 3072, mc->depth = 24, mc->ffn_dim = 8192, mc->channels = 128, mc->patch = 1, mc->text_dim = 2560;
    mc->norm_eps = 1e-6;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"hidden_size", &mc->hidden}, {"num_attention_heads", &heads}, {"num_layers", &mc->depth},
                {"ffn_hidden_size", &mc->ffn_dim}, {"in_channels", &mc->channels}, {"out_channels", &out},
                {"patch_size", &mc->patch}, {"text_in_dim", &mc->text_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_fixed(j, file, "rope_theta", 256.0, "ERNIE-Image (every published config's)");
    if (!st) st = json_fixed_bool(j, file, "qk_layernorm", true, "ERNIE-Image");
    if (!st) st = json_axes(j, file, "rope_axes_dim", 3, axes);
    if (!st) st = json_eps(j, file, "eps", &mc->norm_eps);
    if (st) return st;
    if (heads < 1 || out != mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: num_attention_heads %lld, out_channels %lld; segtrain builds "
                       "ERNIE-Image with at least 1 and out_channels in_channels (%lld)", file, (long long)heads,
                       (long long)out, (long long)mc->channels);
    mc->heads = heads, mc->kv_heads = heads, mc->patch_t = 1;
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false, mc->refiner_depth = 0;
    for (int a = 0; a < 3; a++) mc->rope_axes[a] = axes[a];
    mc->rope_axes[3] = 0;
    return ST_OK;
}

/* rope_scaling's factor list `key` into f: n positive numbers, as the su-scaled rotary embedding divides its n
 * frequencies by them */
static st_status json_factors(const cJSON *scaling, const char *file, const char *key, int64_t n, float *f)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(scaling, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return st_fail(ST_ERR_FORMAT, "%s: rope_scaling.%s is not a list of %lld factors (head width / 2)", file, key,
                       (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, (int)i);
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0 && x->valuedouble < 1e6))
            return st_fail(ST_ERR_FORMAT, "%s: rope_scaling.%s[%lld] is not a number in (0, 10^6)", file, key,
                           (long long)i);
        f[i] = (float)x->valuedouble; /* a float32 tensor where the class uses them */
    }
    return ST_OK;
}

/* OmniGenTransformer2DModel's config: the class defaults (Shitao/OmniGen-v1-diffusers's), then the file's values;
 * rope_scaling (which the class cannot be built without) gives the rotary factors. The timestep path's fixed options
 * and another rope_base are refused by name. */
st_status omnigen_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    mc->channels = 4, mc->patch = 2, mc->hidden = 3072, mc->norm_eps = 1e-5, mc->heads = 32, mc->kv_heads = 32;
    mc->ffn_dim = 8192, mc->depth = 32, mc->text_pad = 32000, mc->text_vocab = 32064, mc->rope_max = 131072;
    mc->rope_original = 4096, mc->pos_embed_max = 192;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &mc->channels}, {"patch_size", &mc->patch}, {"hidden_size", &mc->hidden},
                {"num_attention_heads", &mc->heads}, {"num_key_value_heads", &mc->kv_heads},
                {"intermediate_size", &mc->ffn_dim}, {"num_layers", &mc->depth}, {"pad_token_id", &mc->text_pad},
                {"vocab_size", &mc->text_vocab}, {"max_position_embeddings", &mc->rope_max},
                {"original_max_position_embeddings", &mc->rope_original}, {"pos_embed_max_size", &mc->pos_embed_max}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_eps(j, file, "rms_norm_eps", &mc->norm_eps);
    if (!st) st = json_fixed(j, file, "rope_base", 10000, "OmniGen (its published config's)");
    if (!st) st = json_fixed(j, file, "time_step_dim", 256, "OmniGen");
    if (!st) st = json_fixed_bool(j, file, "flip_sin_to_cos", true, "OmniGen");
    if (!st) st = json_fixed(j, file, "downscale_freq_shift", 0, "OmniGen");
    if (!st) st = json_fixed_text(j, file, "timestep_activation_fn", "silu", "OmniGen");
    if (st) return st;
    if (mc->heads < 1 || mc->hidden % mc->heads || (mc->hidden / mc->heads) % 2 ||
        mc->hidden / mc->heads > 2 * MODEL_ROPE_FACTORS)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: hidden_size %lld over num_attention_heads %lld; segtrain builds "
                       "OmniGen with an even head width of at most %d", file, (long long)mc->hidden,
                       (long long)mc->heads, 2 * MODEL_ROPE_FACTORS);
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!cJSON_IsObject(scaling))
        return st_fail(ST_ERR_FORMAT, "%s: rope_scaling is not an object with short_factor and long_factor (the class "
                       "is not built without them)", file);
    const int64_t n = mc->hidden / mc->heads / 2;
    if (!st) st = json_factors(scaling, file, "short_factor", n, mc->rope_short);
    if (!st) st = json_factors(scaling, file, "long_factor", n, mc->rope_long);
    mc->text_dim = 1, mc->sample_size = 64 * mc->patch; /* OmniGenPatchEmbed's base_size 64, in latent pixels */
    mc->patch_t = 1, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false, mc->refiner_depth = 0;
    return st;
}

/* Krea2Transformer2DModel's config: the class defaults (krea/Krea-2-Raw's), then the file's values. in_channels is the
 * pipeline's packing of 2 x 2 latent patches; another timestep width or rope_theta is refused by name. */
st_status krea2_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t in = 64, hd = 128, heads = 48, text_hidden = 2560, axes[3] = {32, 48, 48};
    mc->depth = 28, mc->kv_heads = 12, mc->ffn_dim = 16384, mc->text_layers = 12, mc->text_heads = 20;
    mc->text_kv_heads = 20, mc->text_ffn = 6912, mc->text_blocks = 2, mc->refiner_depth = 2, mc->norm_eps = 1e-5;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &in}, {"num_layers", &mc->depth}, {"attention_head_dim", &hd},
                {"num_attention_heads", &heads}, {"num_key_value_heads", &mc->kv_heads},
                {"intermediate_size", &mc->ffn_dim}, {"text_hidden_dim", &text_hidden},
                {"num_text_layers", &mc->text_layers}, {"text_num_attention_heads", &mc->text_heads},
                {"text_num_key_value_heads", &mc->text_kv_heads}, {"text_intermediate_size", &mc->text_ffn},
                {"num_layerwise_text_blocks", &mc->text_blocks}, {"num_refiner_text_blocks", &mc->refiner_depth}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, axes);
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    if (!st) st = json_fixed(j, file, "rope_theta", 1000.0, "Krea 2 (its published config's)");
    if (!st) st = json_fixed(j, file, "timestep_embed_dim", 256, "Krea 2");
    if (st) return st;
    if (in % 4 || heads < 1 || mc->text_layers < 1)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: in_channels %lld, num_attention_heads %lld, num_text_layers %lld; "
                       "segtrain reads Krea 2's packing (in_channels 4 C) with at least 1 head and 1 text layer",
                       file, (long long)in, (long long)heads, (long long)mc->text_layers);
    mc->channels = in / 4, mc->patch = 2, mc->patch_t = 1, mc->heads = heads, mc->hidden = hd * heads;
    mc->text_dim = mc->text_layers * text_hidden, mc->pooled_dim = 0, mc->guidance_embeds = false;
    mc->single_depth = 0, mc->rope_axes[0] = axes[0], mc->rope_axes[1] = axes[1], mc->rope_axes[2] = axes[2];
    mc->rope_axes[3] = 0;
    return ST_OK;
}

/* Flux3Transformer2DModel's config: the class defaults, then the file's values. in_channels is the pipeline's 2 x 2
 * packing; a reference mode of other channels, the flow-map (step-distilled) models, and another mlp_ratio,
 * rope_theta or eps are refused by name. */
st_status flux3_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t in = 128, cond = 128, hd = 128, heads = 24, axes[4] = {32, 32, 32, 32};
    mc->depth = 5, mc->single_depth = 28, mc->text_dim = 20480, mc->time_channels = 256;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &in}, {"cond_in_channels", &cond}, {"num_layers", &mc->depth},
                {"num_single_layers", &mc->single_depth}, {"attention_head_dim", &hd},
                {"num_attention_heads", &heads}, {"joint_attention_dim", &mc->text_dim},
                {"timestep_channels", &mc->time_channels}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 4, axes);
    if (!st) st = json_fixed(j, file, "mlp_ratio", 3.0, "Flux.3 (the class default)");
    if (!st) st = json_fixed(j, file, "rope_theta", 10000, "Flux.3 (the class default)");
    if (!st) st = json_fixed(j, file, "eps", 1e-6, "Flux.3 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "flow_map", false, "Flux.3 (a flow map's target timestep is not built)");
    if (st) return st;
    if (in % 4 || cond != in || heads < 1)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: in_channels %lld, cond_in_channels %lld, num_attention_heads %lld; "
                       "segtrain reads Flux.3's packing (in_channels 4 C, the reference mode's the same) with at least "
                       "1 head", file, (long long)in, (long long)cond, (long long)heads);
    mc->channels = in / 4, mc->patch = 2, mc->patch_t = 1, mc->heads = heads, mc->hidden = hd * heads;
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    for (int i = 0; i < 4; i++) mc->rope_axes[i] = axes[i];
    return ST_OK;
}

/* QwenImage21Transformer2DModel's config: the class defaults, then the file's values. in_channels is the pipeline's 2 x
 * 2 packing (patch_size 1); another mlp_ratio or eps, and causal_condition false, are refused by name. */
st_status qwen21_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t patch = 1, in = 64, out = 64, hd = 128, heads = 32, axes[3] = {16, 56, 56};
    mc->depth = 32, mc->text_dim = 4096;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"patch_size", &patch}, {"in_channels", &in}, {"out_channels", &out}, {"num_layers", &mc->depth},
                {"attention_head_dim", &hd}, {"num_attention_heads", &heads}, {"context_in_dim", &mc->text_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, axes);
    if (!st) st = json_fixed(j, file, "mlp_ratio", 3, "Qwen-Image 2.1 (the class default)");
    if (!st) st = json_fixed(j, file, "eps", 1e-6, "Qwen-Image 2.1 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "causal_condition", true, "Qwen-Image 2.1 (the class default)");
    if (st) return st;
    if (patch != 1 || in % 4 || (out && out != in) || heads < 1)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size %lld, in_channels %lld, out_channels %lld, "
                       "num_attention_heads %lld; segtrain reads Qwen-Image 2.1's packing (patch_size 1, in_channels "
                       "4 C, out_channels as in_channels) with at least 1 head", file, (long long)patch, (long long)in,
                       (long long)out, (long long)heads);
    mc->channels = in / 4, mc->patch = 2, mc->patch_t = 1, mc->heads = heads, mc->hidden = hd * heads;
    mc->pooled_dim = 0, mc->guidance_embeds = false, mc->single_depth = 0;
    for (int i = 0; i < 3; i++) mc->rope_axes[i] = axes[i];
    mc->rope_axes[3] = 0;
    return ST_OK;
}

/* Ideogram4Transformer2DModel's config: the class defaults (the published checkpoints'), then the file's values;
 * another rope_theta is refused by name. */
st_status ideogram_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t hd = 256, heads = 18, sections[3] = {24, 20, 20};
    mc->channels = 128, mc->depth = 34, mc->ffn_dim = 12288, mc->time_dim = 512, mc->text_dim = 53248, mc->patch = 1;
    mc->norm_eps = 1e-5;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &mc->channels}, {"num_layers", &mc->depth}, {"attention_head_dim", &hd},
                {"num_attention_heads", &heads}, {"intermediate_size", &mc->ffn_dim}, {"adaln_dim", &mc->time_dim},
                {"llm_features_dim", &mc->text_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_fixed(j, file, "rope_theta", 5000000.0, "Ideogram 4 (every published config's)");
    if (!st) st = json_axes(j, file, "mrope_section", 3, sections);
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    if (st) return st;
    if (heads < 1 || hd < 2 || hd % 2 || heads * hd > (1 << 20))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: num_attention_heads %lld of attention_head_dim %lld; segtrain builds "
                       "Ideogram 4 with at least 1 head of an even width", file, (long long)heads, (long long)hd);
    mc->heads = heads, mc->hidden = heads * hd, mc->kv_heads = heads, mc->patch_t = 1;
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false, mc->refiner_depth = 0;
    for (int a = 0; a < 3; a++) mc->rope_axes[a] = sections[a];
    mc->rope_axes[3] = 0;
    return ST_OK;
}

/* MiniMaxH3Transformer3DModel's config: the class defaults (MiniMaxAI/MiniMax-H3's), then the file's values. A patch
 * other than (1, 2, 2), another rope_theta, and q/k or final norm epsilons apart from norm_eps are refused by name. */
st_status minimax_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t freq = 16, patch[3] = {1, 2, 2};
    double eps = 1e-5, qk_eps = 1e-5, final_eps = 1e-5;
    mc->heads = 56, mc->head_dim = 128, mc->hidden = 5376, mc->depth = 50, mc->refiner_depth = 2, mc->ffn_dim = 14336;
    mc->channels = 24, mc->audio_channels = 32, mc->text_dim = 5120, mc->time_channels = 256, mc->time_hidden = 5376;
    mc->time_dim = 2688;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"num_attention_heads", &mc->heads}, {"attention_head_dim", &mc->head_dim},
                {"hidden_size", &mc->hidden}, {"num_layers", &mc->depth}, {"num_refiner_layers", &mc->refiner_depth},
                {"ffn_dim", &mc->ffn_dim}, {"in_channels", &mc->channels}, {"audio_in_channels", &mc->audio_channels},
                {"text_dim", &mc->text_dim}, {"freq_dim", &mc->time_channels},
                {"time_embed_hidden_dim", &mc->time_hidden}, {"time_embed_dim", &mc->time_dim},
                {"rope_freq_dim", &freq}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "patch_size", 3, patch);
    if (!st) st = json_fixed(j, file, "rope_theta", 10000.0, "MiniMax-H3 (the class default)");
    if (!st) st = json_eps(j, file, "norm_eps", &eps);
    if (!st) st = json_eps(j, file, "qk_norm_eps", &qk_eps);
    if (!st) st = json_eps(j, file, "final_norm_eps", &final_eps);
    if (st) return st;
    if (patch[0] != 1 || patch[1] != 2 || patch[2] != 2 || qk_eps != eps || final_eps != eps || freq < 1 ||
        freq > 4096)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size (%lld, %lld, %lld), norm_eps %g, qk_norm_eps %g, "
                       "final_norm_eps %g, rope_freq_dim %lld; segtrain reads MiniMax-H3's (1, 2, 2) patches, one "
                       "epsilon for all its norms, and 1 to 4096 rotary frequencies", file, (long long)patch[0],
                       (long long)patch[1], (long long)patch[2], eps, qk_eps, final_eps, (long long)freq);
    mc->patch = 2, mc->patch_t = 1, mc->norm_eps = eps, mc->pooled_dim = 0, mc->guidance_embeds = false;
    mc->single_depth = 0;
    for (int i = 0; i < 3; i++) mc->rope_axes[i] = 2 * freq;
    mc->rope_axes[3] = 0;
    return ST_OK;
}

/* Cosmos3OmniTransformer's config: the class defaults (Cosmos3-Nano's), then the file's values; rope_axes_dim, or
 * rope_scaling's mrope_section without it. What segtrain does not build is refused by name: attention biases, the
 * relu2 (Nemotron) stacks, other q/k norm arrangements, another rope_theta, margin or timestep_scale, spatial ids not
 * reset, a patch_latent_dim other than the patch's. The sound and action heads are read to be loaded untrained. */
st_status cosmos3_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t patch_dim = -1, sections[3] = {24, 20, 20};
    bool sound = false, action = false;
    mc->head_dim = 128, mc->hidden = 4096, mc->ffn_dim = 12288, mc->channels = 48, mc->patch = 2, mc->heads = 32;
    mc->depth = 36, mc->kv_heads = 8, mc->text_vocab = 151936, mc->norm_eps = 1e-6, mc->audio_channels = 0;
    mc->action_dim = 0, mc->action_domains = 32;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"head_dim", &mc->head_dim}, {"hidden_size", &mc->hidden}, {"intermediate_size", &mc->ffn_dim},
                {"latent_channel", &mc->channels}, {"latent_patch_size", &mc->patch},
                {"num_attention_heads", &mc->heads}, {"num_hidden_layers", &mc->depth},
                {"num_key_value_heads", &mc->kv_heads}, {"patch_latent_dim", &patch_dim},
                {"vocab_size", &mc->text_vocab}, {"sound_dim", &mc->audio_channels},
                {"action_dim", &mc->action_dim}, {"num_embodiment_domains", &mc->action_domains}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, keys[i].key);
        if (!cJSON_IsNull(x)) st = json_int(j, file, keys[i].key, keys[i].v); /* sound_dim, action_dim: null */
    }
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!st && cJSON_IsObject(scaling)) st = json_axes(scaling, file, "mrope_section", 3, sections);
    if (!st) st = json_axes(j, file, "rope_axes_dim", 3, sections);
    if (!st) st = json_eps(j, file, "rms_norm_eps", &mc->norm_eps);
    if (!st) st = json_fixed(j, file, "rope_theta", 5000000.0, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed(j, file, "unified_3d_mrope_temporal_modality_margin", 15000, "Cosmos 3 (the default)");
    if (!st) st = json_fixed(j, file, "timestep_scale", 0.001, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed(j, file, "attention_dropout", 0, "training");
    if (!st) st = json_fixed_bool(j, file, "attention_bias", false, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "qk_norm_for_text", true, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "use_und_k_norm_for_gen", false, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "unified_3d_mrope_reset_spatial_ids", true, "Cosmos 3 (the default)");
    if (!st) st = json_fixed_text(j, file, "hidden_act", "silu", "Cosmos 3 (its Qwen3 stacks; relu2's Nemotron "
                                  "stacks are not built)");
    sound = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "sound_gen"));
    action = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "action_gen"));
    if (st) return st;
    if (mc->patch < 1 || (patch_dim != -1 && patch_dim != mc->patch * mc->patch * mc->channels) ||
        (sound && mc->audio_channels < 1) || (action && mc->action_dim < 1))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: latent_patch_size %lld, patch_latent_dim %lld for %lld latent "
                       "channels, sound_gen %d with sound_dim %lld, action_gen %d with action_dim %lld; segtrain reads "
                       "a patch of at least 1 whose features are patch^2 latent channels, and each head's width when "
                       "it is on", file, (long long)mc->patch, (long long)patch_dim, (long long)mc->channels,
                       (int)sound, (long long)mc->audio_channels, (int)action, (long long)mc->action_dim);
    if (!sound) mc->audio_channels = 0;
    if (!action) mc->action_dim = 0, mc->action_domains = 0;
    mc->text_dim = 1, mc->patch_t = 1, mc->pooled_dim = 0, mc->guidance_embeds = false, mc->single_depth = 0;
    for (int i = 0; i < 3; i++) mc->rope_axes[i] = sections[i];
    mc->rope_axes[3] = 0;
    return ST_OK;
}
