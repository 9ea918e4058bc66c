/* A diffusers transformer's own config.json, read into a model configuration: for each family the class whose
 * config it reads (diffusers_classes), its defaults, then the file's values; what segtrain does not build is refused
 * by name. model_config.c calls it when a run's weights are a diffusers folder. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "internal.h"
#include "segtrain/config.h"
#include "segtrain/model.h"

#define DIT_FREQ_DIM_CONFIG 256 /* the timestep sinusoid's width every family here uses (models' DIT_FREQ_DIM) */

/* config.json of a diffusers model folder, or of a pipeline folder's transformer/, or the file itself. */
static st_status read_json(const char *path, char *resolved, size_t n, cJSON **out)
{
    struct stat sb;
    snprintf(resolved, n, "%s", path);
    if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) {
        snprintf(resolved, n, "%s/config.json", path);
        if (access(resolved, R_OK)) snprintf(resolved, n, "%s/transformer/config.json", path);
    }
    FILE *f = fopen(resolved, "rb");
    if (!f) return st_fail(ST_ERR_IO, "%s: cannot read a diffusers config.json there (%s)", path, strerror(errno));
    char buf[1 << 16];
    const size_t len = fread(buf, 1, sizeof buf - 1, f);
    const bool whole = feof(f);
    fclose(f);
    buf[len] = 0;
    *out = whole ? cJSON_Parse(buf) : NULL;
    if (!*out) return st_fail(ST_ERR_FORMAT, "%s: not a diffusers config.json (%s)", resolved, whole ? "not JSON" : "over 64 KiB");
    return ST_OK;
}

/* A whole number at key, or ST_ERR_FORMAT naming it; absent keys keep *v (diffusers' default is the caller's). */
static st_status json_int(const cJSON *j, const char *file, const char *key, int64_t *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return ST_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 || x->valuedouble > 1e9)
        return st_fail(ST_ERR_FORMAT, "%s: %s is not a whole number of at most 10^9", file, key);
    *v = (int64_t)x->valuedouble;
    return ST_OK;
}

/* The rotary axes at key (axes_dims_rope; HunyuanVideo's rope_axes_dim), when the file has them: a list of n whole
 * widths; absent, *axes keeps the class's defaults. */
static st_status json_axes(const cJSON *j, const char *file, const char *key, int n, int64_t *axes)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    if (a && (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n))
        return st_fail(ST_ERR_FORMAT, "%s: %s is not a list of %d widths", file, key, n);
    for (int i = 0; a && i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 || x->valuedouble > 1e6)
            return st_fail(ST_ERR_FORMAT, "%s: %s[%d] is not a whole number", file, key, i);
        axes[i] = (int64_t)x->valuedouble;
    }
    return ST_OK;
}

/* A number at key other than the only value segtrain builds, refused by name (absent or null: the class's default,
 * which is that value). */
static st_status json_fixed(const cJSON *j, const char *file, const char *key, double want, const char *what)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && (!cJSON_IsNumber(x) || x->valuedouble != want))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is not %g, the only value segtrain builds %s with", file, key, want,
                       what);
    return ST_OK;
}

/* FluxTransformer2DModel's config: its defaults (text_dim: joint_attention_dim's), then the file's values. */
static st_status flux_keys(const cJSON *j, const char *file, model_config *mc, int64_t text_dim)
{
    st_status st = ST_OK;
    int64_t in = 64, out = 0, patch = 1, hd = 128, heads = 24, axes[3] = {16, 56, 56};
    mc->depth = 19, mc->single_depth = 38, mc->text_dim = text_dim, mc->pooled_dim = 768;
    int64_t guidance = 0;
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {{"in_channels", &in},          {"out_channels", &out},          {"patch_size", &patch},
                {"num_layers", &mc->depth},    {"num_single_layers", &mc->single_depth},
                {"attention_head_dim", &hd},   {"num_attention_heads", &heads}, {"joint_attention_dim", &mc->text_dim},
                {"pooled_projection_dim", &mc->pooled_dim}};
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "guidance_embeds");
    if (cJSON_IsBool(g)) guidance = cJSON_IsTrue(g);
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

static st_status flux_from_json(const cJSON *j, const char *file, model_config *mc)
{
    return flux_keys(j, file, mc, 4096);
}

/* LongCatImageTransformer2DModel's: Flux's keys (no out_channels or guidance_embeds in the class), Qwen2.5-VL's
 * 3584-wide text by default; its pooled_projection_dim is only stored, the model has no pooled input. */
static st_status longcat_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = flux_keys(j, file, mc, 3584);
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    return st;
}

/* Flux2Transformer2DModel's config: its defaults (FLUX.2-dev's), then the file's values. mlp_ratio, rope_theta
 * and eps other than every published config's (3.0, 2000, 1e-6) are refused by name. */
static st_status flux2_from_json(const cJSON *j, const char *file, model_config *mc)
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
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "guidance_embeds");
    mc->guidance_embeds = !g || !cJSON_IsBool(g) || cJSON_IsTrue(g); /* the class's default: true */
    mc->channels = in / 4, mc->patch = 2, mc->heads = heads, mc->hidden = hd * heads, mc->pooled_dim = 0;
    for (int i = 0; i < 4; i++) mc->rope_axes[i] = axes[i];
    return ST_OK;
}

/* QwenImageTransformer2DModel's config: its defaults, then the file's values. in_channels is the pipeline's packing
 * of 2x2 latent patches, out_channels the latent's channels. guidance_embeds and the edit and layered models'
 * options (zero_cond_t, use_additional_t_cond, use_layer3d_rope) are refused by name. */
static st_status qwen_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status sd3_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status auraflow_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status chroma_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status hunyuanvideo_from_json(const cJSON *j, const char *file, model_config *mc)
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
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "guidance_embeds");
    mc->guidance_embeds = !g || !cJSON_IsBool(g) || cJSON_IsTrue(g); /* the class's default: true */
    mc->heads = heads, mc->hidden = hd * heads;
    for (int i = 0; i < 3; i++) mc->rope_axes[i] = axes[i];
    return ST_OK;
}

/* HunyuanVideo15Transformer3DModel's: its defaults (the 480p and 720p models'), then the file's values; in_channels
 * is the latent's and the image-to-video condition's (latents and mask), out_channels the latent's. use_meanflow
 * (the super-resolution models' second timestep) and sizes other than every published config's are refused by name.
 * task_type is not read: the model is the same, and segtrain trains it text-to-video. */
static st_status hunyuanvideo15_from_json(const cJSON *j, const char *file, model_config *mc)
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

/* A string at key other than the only value segtrain builds (absent or null: the class's default, that value). */
static st_status json_fixed_text(const cJSON *j, const char *file, const char *key, const char *want, const char *what)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && !(cJSON_IsString(x) && !strcmp(x->valuestring, want)))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is not \"%s\", the only value segtrain builds %s with", file, key,
                       want, what);
    return ST_OK;
}

/* A boolean at key other than the only value segtrain builds, refused by name (absent or null: the class's default,
 * which is that value). */
static st_status json_fixed_bool(const cJSON *j, const char *file, const char *key, bool want, const char *what)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && (!cJSON_IsBool(x) || cJSON_IsTrue(x) != want))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is not %s, the only value segtrain builds %s with", file, key,
                       want ? "true" : "false", what);
    return ST_OK;
}

/* PixArtTransformer2DModel's config: its defaults (PixArt-Sigma-XL-2-1024-MS's), then the file's values; the
 * micro-conditions (use_additional_conditions) and other block kinds are refused by name. */
static st_status pixart_from_json(const cJSON *j, const char *file, model_config *mc)
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
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "patch_size");
    if (p && (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 3))
        return st_fail(ST_ERR_FORMAT, "%s: patch_size is not a list of 3 (frames, height, width)", file);
    for (int i = 0; p && i < 3; i++) {
        const cJSON *x = cJSON_GetArrayItem(p, i);
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 64 || x->valuedouble != floor(x->valuedouble))
            return st_fail(ST_ERR_FORMAT, "%s: patch_size[%d] is not a whole number 1 to 64", file, i);
    }
    if (p) {
        mc->patch_t = (int64_t)cJSON_GetArrayItem(p, 0)->valuedouble, mc->patch = (int64_t)cJSON_GetArrayItem(p, 1)->valuedouble;
        if (cJSON_GetArrayItem(p, 2)->valuedouble != (double)mc->patch)
            return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size's height and width differ; segtrain's patches are square",
                           file);
    }
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
    if ((cn && !cJSON_IsTrue(cn)) || freq != DIT_FREQ_DIM_CONFIG || out != mc->channels)
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

static st_status wan_from_json(const cJSON *j, const char *file, model_config *mc) { return wan_read(j, file, mc, false); }

/* WanAnimateTransformer3DModel's config: Wan's, its image-to-video inputs (image_dim; added_kv_proj_dim must be the
 * hidden width, as the published config's is: without it the class would read the image tokens as text), its
 * motion encoder's (motion_encoder_channel_sizes by edge as text, "4" to "1024"), its face encoder's and
 * inject_face_latents_blocks; the image tokens are CLIP's 257 unless mc says. */
static st_status wan_animate_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status anyflow_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status wan_vace_from_json(const cJSON *j, const char *file, model_config *mc)
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

/* Lumina2Transformer2DModel's config: its class defaults (cap_feat_dim 1024: the published Lumina-Image 2.0's is 2304,
 * which the file says), then the file's; the feed-forward's width as LuminaFeedForward rounds it (4 hidden_size,
 * times ffn_dim_multiplier, up to a multiple of multiple_of). */
/* An epsilon at key, when the file gives it: a number in (0, 1) */
static st_status json_eps(const cJSON *j, const char *file, const char *key, double *eps)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!e || cJSON_IsNull(e)) return ST_OK;
    if (!cJSON_IsNumber(e) || !(e->valuedouble > 0 && e->valuedouble < 1))
        return st_fail(ST_ERR_FORMAT, "%s: %s is not a number in (0, 1)", file, key);
    *eps = e->valuedouble;
    return ST_OK;
}

static st_status lumina2_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status zimage_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status ernie_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status omnigen_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status krea2_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status flux3_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status qwen21_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status ideogram_from_json(const cJSON *j, const char *file, model_config *mc)
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

/* LTXVideoTransformer3DModel's config: its defaults (LTX-Video 0.9.x's), then the file's values; what the
 * published 0.9.x configs do not vary is refused by name. */
static st_status ltxvideo_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status ltx2_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status cosmos_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status ace_step_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status kandinsky5_from_json(const cJSON *j, const char *file, model_config *mc)
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
static st_status anima_from_json(const cJSON *j, const char *file, model_config *mc)
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
    if ((st = read_json(sub, resolved, sizeof resolved, &c))) return st;
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

/* Each family's diffusers class and the reader of its config.json. */
/* HiDreamImageTransformer2DModel's: its text is caption_channels [T5's, Llama's] wide (one width here), one Llama
 * layer per block (llama_layers: which ones is the cache's choice, so only their count is checked). */
static st_status hidream_from_json(const cJSON *j, const char *file, model_config *mc)
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

static const struct {
    const char *family, *diffusers;
    st_status (*from_json)(const cJSON *j, const char *file, model_config *mc);
} diffusers_classes[] = {
    {"flux", "FluxTransformer2DModel", flux_from_json},
    {"mmdit", "FluxTransformer2DModel", flux_from_json},
    {"sd3", "SD3Transformer2DModel", sd3_from_json},
    {"auraflow", "AuraFlowTransformer2DModel", auraflow_from_json},
    {"qwen_image", "QwenImageTransformer2DModel", qwen_from_json},
    {"flux2", "Flux2Transformer2DModel", flux2_from_json},
    {"longcat_image", "LongCatImageTransformer2DModel", longcat_from_json},
    {"chroma", "ChromaTransformer2DModel", chroma_from_json},
    {"hunyuanvideo", "HunyuanVideoTransformer3DModel", hunyuanvideo_from_json},
    {"hunyuanvideo15", "HunyuanVideo15Transformer3DModel", hunyuanvideo15_from_json},
    {"pixart_sigma", "PixArtTransformer2DModel", pixart_from_json},
    {"wan", "WanTransformer3DModel", wan_from_json},
    {"wan", "WanVACETransformer3DModel", wan_vace_from_json},
    {"wan", "AnyFlowTransformer3DModel", anyflow_from_json},
    {"wan", "WanAnimateTransformer3DModel", wan_animate_from_json},
    {"lumina2", "Lumina2Transformer2DModel", lumina2_from_json},
    {"z_image", "ZImageTransformer2DModel", zimage_from_json},
    {"ernie", "ErnieImageTransformer2DModel", ernie_from_json},
    {"ideogram", "Ideogram4Transformer2DModel", ideogram_from_json},
    {"omnigen", "OmniGenTransformer2DModel", omnigen_from_json},
    {"krea2", "Krea2Transformer2DModel", krea2_from_json},
    {"flux3_image", "Flux3Transformer2DModel", flux3_from_json},
    {"qwen_image21", "QwenImage21Transformer2DModel", qwen21_from_json},
    {"ltxvideo", "LTXVideoTransformer3DModel", ltxvideo_from_json},
    {"ltxvideo2", "LTX2VideoTransformer3DModel", ltx2_from_json},
    {"hidream", "HiDreamImageTransformer2DModel", hidream_from_json},
    {"cosmos2image", "CosmosTransformer3DModel", cosmos_from_json},
    {"kandinsky5", "Kandinsky5Transformer3DModel", kandinsky5_from_json},
    {"ace_step", "AceStepTransformer1DModel", ace_step_from_json},
    {"anima", "CosmosTransformer3DModel", anima_from_json},
};

bool model_reads_diffusers(const model_config *mc)
{
    for (size_t i = 0; i < sizeof diffusers_classes / sizeof *diffusers_classes; i++)
        if (!strcmp(mc->family, diffusers_classes[i].family)) return true;
    return false;
}

/* The file's architecture over mc, unchecked: model_config_from checks once the resolution and every key are in. */
st_status model_read_diffusers(const char *path, model_config *mc)
{
    char file[4096];
    cJSON *j;
    st_status st = read_json(path, file, sizeof file, &j);
    if (st) return st;
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(j, "_class_name");
    const char *name = cJSON_IsString(cls) ? cls->valuestring : "(none)";
    st = st_fail(ST_ERR_UNSUPPORTED, "%s: _class_name %s is not a class the %s family reads", file, name, mc->family);
    char classes[256] = ""; /* the family's, for the refusal */
    for (size_t i = 0; i < sizeof diffusers_classes / sizeof *diffusers_classes; i++) {
        if (strcmp(mc->family, diffusers_classes[i].family)) continue;
        if (!strcmp(name, diffusers_classes[i].diffusers)) {
            st = diffusers_classes[i].from_json(j, file, mc);
            classes[0] = 0;
            break;
        }
        snprintf(classes + strlen(classes), sizeof classes - strlen(classes), "%s%s's", classes[0] ? " or " : "",
                 diffusers_classes[i].diffusers);
    }
    if (classes[0])
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: _class_name %s; the %s family reads %s", file, name, mc->family, classes);
    cJSON_Delete(j);
    return st;
}

st_status model_config_from_diffusers(const char *path, model_config *mc)
{
    st_status st = model_read_diffusers(path, mc);
    return st ? st : model_config_check(mc);
}
