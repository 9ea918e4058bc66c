/* A diffusers transformer's own config.json, read into a model configuration: for each family the class whose
 * config it reads (diffusers_classes), its defaults, then the file's values; what segtrain does not build is refused
 * by name. model_config.c calls it when a run's weights are a diffusers folder. The value readers and the
 * dual-stream families' readers are here, the cross-attention families' in diffusers_xattn.c, the single-stream
 * joint families' in diffusers_joint.c (diffusers_json.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "models/core/diffusers_json.h"
#include "models/core/internal.h"
#include "segtrain/config.h"
#include "segtrain/fileio.h"
#include "segtrain/model.h"

/* config.json of a diffusers model folder, or of a pipeline folder's transformer/, or the file itself. */
st_status json_read_config(const char *path, char *resolved, size_t n, cJSON **out)
{
    struct stat sb;
    snprintf(resolved, n, "%s", path);
    if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) {
        snprintf(resolved, n, "%s/config.json", path);
        if (access(resolved, R_OK)) snprintf(resolved, n, "%s/transformer/config.json", path);
    }
    FILE *f;
    if (file_fopen_regular(resolved, &f)) {
        char why[512]; /* st_fail writes where st_error() reads */
        snprintf(why, sizeof why, "%s", st_error());
        return st_fail(ST_ERR_IO, "%s: cannot read a diffusers config.json there (%s)", path, why);
    }
    char buf[1 << 16];
    const size_t len = fread(buf, 1, sizeof buf - 1, f);
    const bool whole = feof(f);
    fclose(f);
    buf[len] = 0;
    *out = whole ? cJSON_Parse(buf) : NULL;
    if (!*out) return st_fail(ST_ERR_FORMAT, "%s: not a diffusers config.json (%s)", resolved, whole ? "not JSON" : "over 64 KiB");
    return ST_OK;
}

/* The range of the sizes that every family's model divides by or builds one of per unit, by the classes' own key
 * names: checked as each is read, so that no zero divides and no huge count is walked before model_config_check
 * (other keys: 0 to 10^9, and that check). */
static const struct {
    const char *key;
    int64_t min, max;
} json_ranges[] = {
    {"num_attention_heads", 1, 4096}, {"n_heads", 1, 4096}, {"num_key_value_heads", 1, 4096},
    {"num_kv_heads", 1, 4096}, {"text_num_attention_heads", 1, 4096}, {"text_num_key_value_heads", 1, 4096},
    {"num_cross_attention_heads", 1, 4096}, {"face_encoder_num_heads", 1, 4096},
    {"audio_num_attention_heads", 1, 4096}, {"attention_head_dim", 1, 4096}, {"head_dim", 1, 4096},
    {"cross_attention_head_dim", 1, 4096}, {"audio_attention_head_dim", 1, 4096},
    {"num_layers", 1, 1024}, {"n_layers", 1, 1024}, {"num_hidden_layers", 1, 1024}, {"num_single_layers", 0, 1024},
    {"num_mmdit_layers", 0, 1024}, {"num_single_dit_layers", 0, 1024}, {"num_refiner_layers", 0, 1024},
    {"n_refiner_layers", 0, 1024}, {"num_text_layers", 0, 1024}, {"num_text_blocks", 0, 1024},
    {"num_visual_blocks", 0, 1024}, {"inject_face_latents_blocks", 1, 1024},
    {"in_channels", 1, 65536}, {"out_channels", 0, 65536}, {"patch_size", 1, 64}, {"patch_size_t", 1, 64},
    {"hidden_size", 1, 65536}, {"dim", 1, 65536}, {"model_dim", 1, 65536},
};

/* A whole number at key, or ST_ERR_FORMAT naming it and its range; absent keys keep *v (diffusers' default is the
 * caller's). */
st_status json_int(const cJSON *j, const char *file, const char *key, int64_t *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return ST_OK;
    int64_t min = 0, max = 1000000000;
    for (size_t i = 0; i < sizeof json_ranges / sizeof *json_ranges; i++)
        if (!strcmp(key, json_ranges[i].key)) min = json_ranges[i].min, max = json_ranges[i].max;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < (double)min ||
        x->valuedouble > (double)max) {
        char got[64];
        if (cJSON_IsNumber(x)) snprintf(got, sizeof got, "%.17g", x->valuedouble);
        else snprintf(got, sizeof got, "not a number");
        return st_fail(ST_ERR_FORMAT, "%s: %s is %s; it takes a whole number from %lld to %lld", file, key, got,
                       (long long)min, (long long)max);
    }
    *v = (int64_t)x->valuedouble;
    return ST_OK;
}

/* The rotary axes at key (axes_dims_rope; HunyuanVideo's rope_axes_dim), when the file has them: a list of n whole
 * widths; absent, *axes keeps the class's defaults. */
st_status json_axes(const cJSON *j, const char *file, const char *key, int n, int64_t *axes)
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
st_status json_fixed(const cJSON *j, const char *file, const char *key, double want, const char *what)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && (!cJSON_IsNumber(x) || x->valuedouble != want))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is not %g, the only value segtrain builds %s with", file, key, want,
                       what);
    return ST_OK;
}

/* A string at key other than the only value segtrain builds (absent or null: the class's default, that value). */
st_status json_fixed_text(const cJSON *j, const char *file, const char *key, const char *want, const char *what)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && !(cJSON_IsString(x) && !strcmp(x->valuestring, want)))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is not \"%s\", the only value segtrain builds %s with", file, key,
                       want, what);
    return ST_OK;
}

/* A boolean at key other than the only value segtrain builds, refused by name (absent or null: the class's default,
 * which is that value). */
st_status json_fixed_bool(const cJSON *j, const char *file, const char *key, bool want, const char *what)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && (!cJSON_IsBool(x) || cJSON_IsTrue(x) != want))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is not %s, the only value segtrain builds %s with", file, key,
                       want ? "true" : "false", what);
    return ST_OK;
}

/* A boolean at key into *v, or ST_ERR_FORMAT naming it; absent or null keeps *v (the class's default). */
static st_status json_bool(const cJSON *j, const char *file, const char *key, bool *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return ST_OK;
    if (!cJSON_IsBool(x)) return st_fail(ST_ERR_FORMAT, "%s: %s is not true or false", file, key);
    *v = cJSON_IsTrue(x);
    return ST_OK;
}

/* An epsilon at key, when the file gives it: a number in (0, 1) */
st_status json_eps(const cJSON *j, const char *file, const char *key, double *eps)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!e || cJSON_IsNull(e)) return ST_OK;
    if (!cJSON_IsNumber(e) || !(e->valuedouble > 0 && e->valuedouble < 1))
        return st_fail(ST_ERR_FORMAT, "%s: %s is not a number in (0, 1)", file, key);
    *eps = e->valuedouble;
    return ST_OK;
}

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
    mc->guidance_embeds = true; /* the class's default */
    if ((st = json_bool(j, file, "guidance_embeds", &mc->guidance_embeds))) return st;
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
    {"sana", "SanaTransformer2DModel", sana_from_json},
    {"sanavideo", "SanaVideoTransformer3DModel", sanavideo_from_json},
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
    {"minimaxh3", "MiniMaxH3Transformer3DModel", minimax_from_json},
    {"cosmos3", "Cosmos3OmniTransformer", cosmos3_from_json},
    {"ltxvideo", "LTXVideoTransformer3DModel", ltxvideo_from_json},
    {"ltxvideo2", "LTX2VideoTransformer3DModel", ltx2_from_json},
    {"hidream", "HiDreamImageTransformer2DModel", hidream_from_json},
    {"cosmos2image", "CosmosTransformer3DModel", cosmos_from_json},
    {"kandinsky5", "Kandinsky5Transformer3DModel", kandinsky5_from_json},
    {"ace_step", "AceStepTransformer1DModel", ace_step_from_json},
    {"anima", "CosmosTransformer3DModel", anima_from_json},
    {"sd1x", "UNet2DConditionModel", unet_from_json},
    {"sdxl", "UNet2DConditionModel", unet_from_json},
    {"kolors", "UNet2DConditionModel", unet_from_json},
    {"stable_cascade", "StableCascadeUNet", cascade_from_json},
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
    st_status st = json_read_config(path, file, sizeof file, &j);
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
