/* The dual-stream families' diffusers config.json readers (diffusers_json.h): FluxTransformer2DModel's and its
 * relatives', SD3's, AuraFlow's, Qwen-Image's, HunyuanVideo's and HiDream's, each family's defaults then the file's
 * values. */
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/internal.h"

/* FluxTransformer2DModel's config: its defaults (text_dim: joint_attention_dim's), then the file's values. */
static st_status flux_keys(const cJSON *j, const char *file, model_config *mc, int64_t text_dim)
{
    st_status st = ST_OK;
    int64_t in = 64, out = 0, patch = 1, hd = 128, heads = 24, axes[3] = {16, 56, 56};
    mc->depth = 19, mc->single_depth = 38, mc->text_dim = text_dim, mc->pooled_dim = 768;
    bool guidance = false;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &in},          {"out_channels", &out},          {"patch_size", &patch},
                {"num_layers", &mc->depth},    {"num_single_layers", &mc->single_depth},
                {"attention_head_dim", &hd},   {"num_attention_heads", &heads}, {"joint_attention_dim", &mc->text_dim},
                {"pooled_projection_dim", &mc->pooled_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_bool(j, file, "guidance_embeds", &guidance);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, axes);
    if (st) return st;
    /* the pipeline packs 2x2 latent patches into in_channels: segtrain patchifies the latent itself */
    if (patch != 1 || in % 4 || (out && out != in))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size %lld, in_channels %lld, out_channels %lld; segtrain reads "
                       "Flux's packing (patch_size 1, in_channels 4 C, out_channels as in_channels)", file,
                       (long long)patch, (long long)in, (long long)out);
    mc->channels = in / 4, mc->patch = 2;
    mc->heads = heads, mc->hidden = hd * heads;
    mc->guidance_embeds = guidance;
    for (int i = 0; i < 3; i++) mc->rope_axes[i] = axes[i];
    return ST_OK;
}

st_status flux_from_json(const cJSON *j, const char *file, model_config *mc)
{
    return flux_keys(j, file, mc, 4096);
}

/* LongCatImageTransformer2DModel's: Flux's keys (no out_channels or guidance_embeds in the class), Qwen2.5-VL's
 * 3584-wide text by default; its pooled_projection_dim is only stored, the model has no pooled input. */
st_status longcat_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = flux_keys(j, file, mc, 3584);
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    return st;
}

/* Flux2Transformer2DModel's config: its defaults (FLUX.2-dev's), then the file's values. mlp_ratio, rope_theta
 * and eps other than every published config's (3.0, 2000, 1e-6) are refused by name. */
st_status flux2_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t in = 128, out = 0, patch = 1, hd = 128, heads = 48, axes[4] = {32, 32, 32, 32};
    mc->depth = 8, mc->single_depth = 48, mc->text_dim = 15360, mc->time_channels = 256;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &in},          {"out_channels", &out},          {"patch_size", &patch},
                {"num_layers", &mc->depth},    {"num_single_layers", &mc->single_depth},
                {"attention_head_dim", &hd},   {"num_attention_heads", &heads}, {"joint_attention_dim", &mc->text_dim},
                {"timestep_guidance_channels", &mc->time_channels}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 4, axes);
    if (st) return st;
    if ((st = json_fixed(j, file, "mlp_ratio", 3.0, "Flux.2 (every published config's)")) ||
        (st = json_fixed(j, file, "rope_theta", 2000.0, "Flux.2 (every published config's)")) ||
        (st = json_fixed(j, file, "eps", 1e-6, "Flux.2 (every published config's)")))
        return st;
    /* the pipeline packs 2x2 latent patches into in_channels: segtrain patchifies the latent itself */
    if (patch != 1 || in % 4 || (out && out != in))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size %lld, in_channels %lld, out_channels %lld; segtrain reads "
                       "Flux.2's packing (patch_size 1, in_channels 4 C, out_channels as in_channels)", file,
                       (long long)patch, (long long)in, (long long)out);
    mc->guidance_embeds = true; /* the class's default */
    if ((st = json_bool(j, file, "guidance_embeds", &mc->guidance_embeds))) return st;
    mc->channels = in / 4, mc->patch = 2, mc->heads = heads, mc->hidden = hd * heads, mc->pooled_dim = 0;
    for (int i = 0; i < 4; i++) mc->rope_axes[i] = axes[i];
    return ST_OK;
}

/* QwenImageTransformer2DModel's config: its defaults, then the file's values. in_channels is the pipeline's packing
 * of 2x2 latent patches, out_channels the latent's channels. guidance_embeds and the edit and layered models'
 * options (zero_cond_t, use_additional_t_cond, use_layer3d_rope) are refused by name. */
st_status qwen_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t in = 64, out = 16, hd = 128, heads = 24, axes[3] = {16, 56, 56};
    mc->patch = 2, mc->depth = 60, mc->text_dim = 3584;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"patch_size", &mc->patch},   {"in_channels", &in},        {"out_channels", &out},
                {"num_layers", &mc->depth},   {"attention_head_dim", &hd}, {"num_attention_heads", &heads},
                {"joint_attention_dim", &mc->text_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, axes);
    if (st) return st;
    static const char *const options[] = {"guidance_embeds", "zero_cond_t", "use_additional_t_cond", "use_layer3d_rope"};
    for (size_t i = 0; i < sizeof options / sizeof *options; i++)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, options[i])))
            return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is true; segtrain builds Qwen-Image's transformer, where it is "
                           "false (an edit or layered model's option)", file, options[i]);
    if (!out || in != out * mc->patch * mc->patch)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: in_channels %lld, out_channels %lld, patch_size %lld; segtrain reads "
                       "Qwen Image's packing (in_channels = out_channels x patch_size^2)", file, (long long)in,
                       (long long)out, (long long)mc->patch);
    mc->channels = out, mc->heads = heads, mc->hidden = hd * heads;
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    for (int i = 0; i < 3; i++) mc->rope_axes[i] = axes[i];
    return ST_OK;
}

/* SD3Transformer2DModel's config: its defaults, then the file's values. */
st_status sd3_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t in = 16, out = -1, hd = 64, heads = 18, caption = 1152; /* out_channels null: in_channels */
    mc->sample_size = 128, mc->patch = 2, mc->depth = 18, mc->text_dim = 4096, mc->pooled_dim = 2048;
    mc->pos_embed_max = 96, mc->single_depth = 0, mc->dual_attention = 0, mc->guidance_embeds = false;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"sample_size", &mc->sample_size},   {"patch_size", &mc->patch},         {"in_channels", &in},
                {"out_channels", &out},              {"num_layers", &mc->depth},         {"attention_head_dim", &hd},
                {"num_attention_heads", &heads},     {"joint_attention_dim", &mc->text_dim},
                {"caption_projection_dim", &caption}, {"pooled_projection_dim", &mc->pooled_dim},
                {"pos_embed_max_size", &mc->pos_embed_max}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (st) return st;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "qk_norm");
    if (q && !cJSON_IsNull(q) && !(cJSON_IsString(q) && !strcmp(q->valuestring, "rms_norm")))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: qk_norm is neither null nor \"rms_norm\" (the two SD3 uses)", file);
    mc->qk_norm = q && cJSON_IsString(q);
    /* every published SD3.5 lists its dual-attention blocks from 0 on: segtrain takes them as a count */
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "dual_attention_layers");
    if (a && !cJSON_IsArray(a)) return st_fail(ST_ERR_FORMAT, "%s: dual_attention_layers is not a list", file);
    for (int i = 0; a && i < cJSON_GetArraySize(a); i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(x) || x->valuedouble != i)
            return st_fail(ST_ERR_UNSUPPORTED, "%s: dual_attention_layers[%d] is not %d; segtrain builds dual attention "
                           "in the first blocks, listed in order from 0", file, i, i);
        mc->dual_attention = i + 1;
    }
    if ((out != -1 && out != in) || caption != hd * heads)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, caption_projection_dim %lld; segtrain reads SD3's "
                       "with out_channels = in_channels (%lld) and caption_projection_dim = the width (%lld heads x %lld)",
                       file, (long long)out, (long long)caption, (long long)in, (long long)heads, (long long)hd);
    mc->channels = in, mc->heads = heads, mc->hidden = hd * heads;
    return ST_OK;
}

/* AuraFlowTransformer2DModel's config: its defaults, then the file's values. */
st_status auraflow_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t in = 4, out = 4, hd = 256, heads = 12, caption = 3072, table = 1024;
    mc->patch = 2, mc->depth = 4, mc->single_depth = 32, mc->text_dim = 2048;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"patch_size", &mc->patch},          {"in_channels", &in},
                {"out_channels", &out},              {"num_mmdit_layers", &mc->depth},
                {"num_single_dit_layers", &mc->single_depth}, {"attention_head_dim", &hd},
                {"num_attention_heads", &heads},     {"joint_attention_dim", &mc->text_dim},
                {"caption_projection_dim", &caption}, {"pos_embed_max_size", &table}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (st) return st;
    int64_t edge = 0; /* AuraFlowPatchEmbed reads the table as a square grid of int(sqrt(pos_embed_max_size)) */
    while ((edge + 1) * (edge + 1) <= table) edge++;
    if (out != in || caption != hd * heads || edge * edge != table)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, caption_projection_dim %lld, pos_embed_max_size "
                       "%lld; segtrain reads AuraFlow's with out_channels = in_channels (%lld), caption_projection_dim "
                       "= the width (%lld heads x %lld) and a square position table", file, (long long)out,
                       (long long)caption, (long long)table, (long long)in, (long long)heads, (long long)hd);
    mc->channels = in, mc->heads = heads, mc->hidden = hd * heads, mc->pos_embed_max = edge;
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    return ST_OK;
}

/* ChromaTransformer2DModel's: Flux's keys without the pooled vector and guidance (its modulation comes from the
 * distilled_guidance_layer), and the approximator's. */
st_status chroma_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = flux_keys(j, file, mc, 4096);
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    mc->approx_channels = 64, mc->approx_hidden = 5120, mc->approx_layers = 5;
    if (!st) st = json_int(j, file, "approximator_num_channels", &mc->approx_channels);
    if (!st) st = json_int(j, file, "approximator_hidden_dim", &mc->approx_hidden);
    if (!st) st = json_int(j, file, "approximator_layers", &mc->approx_layers);
    return st;
}

/* HunyuanVideoTransformer3DModel's config: its defaults (HunyuanVideo 1.0's), then the file's values; mlp_ratio,
 * rope_theta, qk_norm and image_condition_type other than the text-to-video model's are refused by name. */
st_status hunyuanvideo_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t out = 16, hd = 128, heads = 24, axes[3] = {16, 56, 56};
    mc->channels = 16, mc->depth = 20, mc->single_depth = 40, mc->refiner_depth = 2, mc->patch = 2, mc->patch_t = 1;
    mc->text_dim = 4096, mc->pooled_dim = 768;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &mc->channels},     {"out_channels", &out},
                {"num_attention_heads", &heads},    {"attention_head_dim", &hd},
                {"num_layers", &mc->depth},         {"num_single_layers", &mc->single_depth},
                {"num_refiner_layers", &mc->refiner_depth}, {"patch_size", &mc->patch},
                {"patch_size_t", &mc->patch_t},     {"text_embed_dim", &mc->text_dim},
                {"pooled_projection_dim", &mc->pooled_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "rope_axes_dim", 3, axes);
    if (!st) st = json_fixed(j, file, "mlp_ratio", 4.0, "HunyuanVideo");
    if (!st) st = json_fixed(j, file, "rope_theta", 256.0, "HunyuanVideo");
    if (st) return st;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "qk_norm"), *ic = cJSON_GetObjectItemCaseSensitive(j, "image_condition_type");
    if (q && !(cJSON_IsString(q) && !strcmp(q->valuestring, "rms_norm")))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: qk_norm is not \"rms_norm\" (HunyuanVideo's)", file);
    if (ic && !cJSON_IsNull(ic))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: image_condition_type is set (an image-to-video model's: latent_concat or "
                       "token_replace); segtrain builds the text-to-video model, where it is null", file);
    if (out && out != mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld; segtrain reads HunyuanVideo's with out_channels = "
                       "in_channels (%lld)", file, (long long)out, (long long)mc->channels);
    mc->guidance_embeds = true; /* the class's default */
    if ((st = json_bool(j, file, "guidance_embeds", &mc->guidance_embeds))) return st;
    mc->heads = heads, mc->hidden = hd * heads;
    for (int i = 0; i < 3; i++) mc->rope_axes[i] = axes[i];
    return ST_OK;
}

/* HunyuanVideo15Transformer3DModel's: its defaults (the 480p and 720p models'), then the file's values; in_channels
 * is the latent's and the image-to-video condition's (latents and mask), out_channels the latent's. use_meanflow
 * (the super-resolution models' second timestep) and sizes other than every published config's are refused by name.
 * task_type is not read: the model is the same, and segtrain trains it text-to-video. */
st_status hunyuanvideo15_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t in = 65, hd = 128, heads = 16, axes[3] = {16, 56, 56};
    mc->channels = 32, mc->depth = 54, mc->single_depth = 0, mc->refiner_depth = 2, mc->patch = 1, mc->patch_t = 1;
    mc->text_dim = 3584, mc->text2_dim = 1472, mc->image_dim = 1152, mc->pooled_dim = 0, mc->guidance_embeds = false;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &in},               {"out_channels", &mc->channels},
                {"num_attention_heads", &heads},    {"attention_head_dim", &hd},
                {"num_layers", &mc->depth},         {"num_refiner_layers", &mc->refiner_depth},
                {"patch_size", &mc->patch},         {"patch_size_t", &mc->patch_t},
                {"text_embed_dim", &mc->text_dim},  {"text_embed_2_dim", &mc->text2_dim},
                {"image_embed_dim", &mc->image_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "rope_axes_dim", 3, axes);
    if (!st) st = json_fixed(j, file, "mlp_ratio", 4.0, "HunyuanVideo 1.5");
    if (!st) st = json_fixed(j, file, "rope_theta", 256.0, "HunyuanVideo 1.5");
    if (st) return st;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "qk_norm");
    if (q && !(cJSON_IsString(q) && !strcmp(q->valuestring, "rms_norm")))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: qk_norm is not \"rms_norm\" (HunyuanVideo 1.5's)", file);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_meanflow")))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: use_meanflow is true (a super-resolution model's second timestep); "
                       "segtrain builds the text-to-video model, where it is false", file);
    if (in < mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: in_channels %lld below out_channels %lld; segtrain reads HunyuanVideo "
                       "1.5's (the latent's channels, then the condition's)", file, (long long)in,
                       (long long)mc->channels);
    mc->cond_channels = in - mc->channels;
    mc->heads = heads, mc->hidden = hd * heads;
    for (int i = 0; i < 3; i++) mc->rope_axes[i] = axes[i];
    return ST_OK;
}

/* Each family's diffusers class and the reader of its config.json. */
/* HiDreamImageTransformer2DModel's: its text is caption_channels [T5's, Llama's] wide (one width here), one Llama
 * layer per block (llama_layers: which ones is the cache's choice, so only their count is checked). */
st_status hidream_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = ST_OK;
    int64_t in = 64, out = 0, hd = 128, heads = 20, caption[2] = {4096, 4096};
    mc->patch = 2, mc->depth = 16, mc->single_depth = 32, mc->pooled_dim = 2048, mc->experts = 4;
    mc->experts_active = 2;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"patch_size", &mc->patch}, {"in_channels", &in}, {"out_channels", &out},
                {"num_layers", &mc->depth}, {"num_single_layers", &mc->single_depth}, {"attention_head_dim", &hd},
                {"num_attention_heads", &heads}, {"text_emb_dim", &mc->pooled_dim},
                {"num_routed_experts", &mc->experts}, {"num_activated_experts", &mc->experts_active}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    if (!st) st = json_axes(j, file, "caption_channels", 2, caption);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, mc->rope_axes);
    if (st) return st;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(j, "llama_layers");
    const cJSON *inference = cJSON_GetObjectItemCaseSensitive(j, "force_inference_output");
    if ((out && out != in) || caption[0] != caption[1] || cJSON_IsTrue(inference) ||
        (layers && (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) != mc->depth + mc->single_depth)))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, caption_channels (%lld, %lld), "
                       "force_inference_output, llama_layers: segtrain reads HiDream's with out_channels = in_channels "
                       "(%lld), one caption width, the training path, and one Llama layer per block (%lld)", file,
                       (long long)out, (long long)caption[0], (long long)caption[1], (long long)in,
                       (long long)(mc->depth + mc->single_depth));
    mc->channels = in, mc->heads = heads, mc->hidden = hd * heads, mc->text_dim = caption[0];
    mc->guidance_embeds = false;
    return ST_OK;
}

