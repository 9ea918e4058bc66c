/* diffusers_config.c's reader for the U-Net families: UNet2DConditionModel's config.json, its defaults first (SD 1.x's
 * shape, but cross_attention_dim 1280), then the file's values; what unet.c does not build is refused by name. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "models/core/diffusers_json.h"
#include "models/core/internal.h"
#include "models/unet/unet.h"

st_status unet_json_count(const cJSON *j, const char *file, int *L)
{
    const cJSON *boc = cJSON_GetObjectItemCaseSensitive(j, "block_out_channels");
    if (boc && !cJSON_IsNull(boc)) {
        *L = cJSON_IsArray(boc) ? cJSON_GetArraySize(boc) : 0;
        if (*L < 1 || *L > UNET_LEVELS_MAX)
            return st_fail(ST_ERR_UNSUPPORTED, "%s: block_out_channels is not a list of 1 to %d levels", file,
                           UNET_LEVELS_MAX);
    }
    return ST_OK;
}

/* An int, or a list of n ints (one per level), at key into v[0 .. n); absent or null keeps v. */
st_status unet_json_levels(const cJSON *j, const char *file, const char *key, int n, int64_t *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return ST_OK;
    if (cJSON_IsArray(x) && cJSON_GetArraySize(x) != n)
        return st_fail(ST_ERR_FORMAT, "%s: %s has %d entries; block_out_channels has %d levels", file, key,
                       cJSON_GetArraySize(x), n);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_IsArray(x) ? cJSON_GetArrayItem(x, i) : x;
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble > 1e6)
            return st_fail(ST_ERR_FORMAT, "%s: %s is not a whole number or a list of them", file, key);
        v[i] = (int64_t)e->valuedouble;
    }
    return ST_OK;
}

/* A key whose only built value is the class's default null (absent, or null) */
st_status unet_json_null(const cJSON *j, const char *file, const char *key, const char *why)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is set; segtrain builds UNet2DConditionModel without it (%s)", file,
                       key, why);
    return ST_OK;
}

/* The down and up block types: each level CrossAttnDownBlock2D (attention) or DownBlock2D, the up path the mirror */
static st_status block_types(const cJSON *j, const char *file, model_config *mc, bool *attn)
{
    const cJSON *down = cJSON_GetObjectItemCaseSensitive(j, "down_block_types");
    const cJSON *up = cJSON_GetObjectItemCaseSensitive(j, "up_block_types");
    const int L = (int)mc->unet_levels;
    for (int i = 0; i < L; i++) attn[i] = i < L - 1; /* the class's default: CrossAttnDownBlock2D x 3, DownBlock2D */
    if ((down && !cJSON_IsNull(down) && (!cJSON_IsArray(down) || cJSON_GetArraySize(down) != L)) ||
        (up && !cJSON_IsNull(up) && (!cJSON_IsArray(up) || cJSON_GetArraySize(up) != L)))
        return st_fail(ST_ERR_FORMAT, "%s: down_block_types and up_block_types are not lists of %d (the levels of "
                       "block_out_channels)", file, L);
    for (int i = 0; cJSON_IsArray(down) && i < L; i++) {
        const cJSON *t = cJSON_GetArrayItem(down, i);
        const char *s = cJSON_IsString(t) ? t->valuestring : "";
        if (strcmp(s, "CrossAttnDownBlock2D") && strcmp(s, "DownBlock2D"))
            return st_fail(ST_ERR_UNSUPPORTED, "%s: down_block_types[%d] is \"%s\"; segtrain builds "
                           "CrossAttnDownBlock2D and DownBlock2D", file, i, s);
        attn[i] = !strcmp(s, "CrossAttnDownBlock2D");
    }
    for (int i = 0; cJSON_IsArray(up) && i < L; i++) {
        const cJSON *t = cJSON_GetArrayItem(up, i);
        const char *s = cJSON_IsString(t) ? t->valuestring : "";
        const char *want = attn[L - 1 - i] ? "CrossAttnUpBlock2D" : "UpBlock2D";
        if (strcmp(s, want))
            return st_fail(ST_ERR_UNSUPPORTED, "%s: up_block_types[%d] is \"%s\"; segtrain builds the mirror of the "
                           "down blocks (%s there)", file, i, s, want);
    }
    return ST_OK;
}

/* sd1x reads it without added conditions; sdxl and kolors with SDXL's text_time ones (the pooled text and six size
 * ids), kolors with its text projection too */
st_status unet_from_json(const cJSON *j, const char *file, model_config *mc)
{
    const bool xl = unet_options_of(mc)->added;
    int64_t ch[UNET_LEVELS_MAX] = {320, 640, 1280, 1280}, heads[UNET_LEVELS_MAX] = {8, 8, 8, 8};
    int64_t layers[UNET_LEVELS_MAX] = {1, 1, 1, 1}, out = 4, cross = 1280, groups = 32, per = 2;
    int64_t time_dim = 0, proj_in = 0;
    mc->channels = 4;
    int L = 4;
    st_status st = unet_json_count(j, file, &L);
    if (st) return st;
    mc->unet_levels = L;
    st = unet_json_levels(j, file, "block_out_channels", L, ch);
    /* num_attention_heads, or (diffusers' legacy naming) attention_head_dim, is the heads of each level */
    const cJSON *nah = cJSON_GetObjectItemCaseSensitive(j, "num_attention_heads");
    const char *heads_key = nah && !cJSON_IsNull(nah) ? "num_attention_heads" : "attention_head_dim";
    if (!st) st = unet_json_levels(j, file, heads_key, L, heads);
    if (!st) st = unet_json_levels(j, file, "transformer_layers_per_block", L, layers);
    const json_key keys[] = {{"in_channels", &mc->channels}, {"out_channels", &out}, {"cross_attention_dim", &cross},
                             {"norm_num_groups", &groups}, {"layers_per_block", &per},
                             {"addition_time_embed_dim", &time_dim},
                             {"projection_class_embeddings_input_dim", &proj_in}};
    if (!st) st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    mc->norm_eps = 1e-5;
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    bool attn[UNET_LEVELS_MAX];
    if (!st) st = block_types(j, file, mc, attn);
    const char *U = "UNet2DConditionModel";
    if (!st) st = json_fixed_text(j, file, "act_fn", "silu", U);
    if (!st) st = json_fixed_text(j, file, "mid_block_type", "UNetMidBlock2DCrossAttn", U);
    if (!st) st = json_fixed_text(j, file, "resnet_time_scale_shift", "default", U);
    if (!st) st = json_fixed_text(j, file, "time_embedding_type", "positional", U);
    if (!st) st = json_fixed_text(j, file, "attention_type", "default", U);
    if (!st) st = json_fixed_bool(j, file, "center_input_sample", false, U);
    if (!st) st = json_fixed_bool(j, file, "flip_sin_to_cos", true, U);
    if (!st) st = json_fixed_bool(j, file, "dual_cross_attention", false, U);
    if (!st) st = json_fixed_bool(j, file, "only_cross_attention", false, U);
    if (!st) st = json_fixed_bool(j, file, "resnet_skip_time_act", false, U);
    if (!st) st = json_fixed_bool(j, file, "class_embeddings_concat", false, U);
    if (!st) st = json_fixed(j, file, "freq_shift", 0, U);
    if (!st) st = json_fixed(j, file, "downsample_padding", 1, U);
    if (!st) st = json_fixed(j, file, "mid_block_scale_factor", 1, U);
    if (!st) st = json_fixed(j, file, "resnet_out_scale_factor", 1, U);
    if (!st) st = json_fixed(j, file, "conv_in_kernel", 3, U);
    if (!st) st = json_fixed(j, file, "conv_out_kernel", 3, U);
    const bool kolors = unet_options_of(mc)->text_proj;
    int64_t hid = 0;
    if (!st) st = json_int(j, file, "encoder_hid_dim", &hid);
    const cJSON *hid_type = cJSON_GetObjectItemCaseSensitive(j, "encoder_hid_dim_type");
    const bool text_proj = hid && cJSON_IsString(hid_type) && !strcmp(hid_type->valuestring, "text_proj");
    if (!st && (kolors ? !text_proj : hid || (hid_type && !cJSON_IsNull(hid_type))))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: encoder_hid_dim %lld, encoder_hid_dim_type %s; the %s family builds %s",
                     file, (long long)hid, cJSON_IsString(hid_type) ? hid_type->valuestring : "null", mc->family,
                     kolors ? "Kolors' \"text_proj\" (a Linear from the text encoder's width)"
                            : "none (kolors reads Kolors' text projection)");
    static const char *const nulls[] = {"class_embed_type", "num_class_embeds", "time_cond_proj_dim",
                                        "time_embedding_dim", "time_embedding_act_fn", "timestep_post_act",
                                        "cross_attention_norm",
                                        "reverse_transformer_layers_per_block", "mid_block_only_cross_attention"};
    for (size_t i = 0; !st && i < sizeof nulls / sizeof *nulls; i++)
        st = unet_json_null(j, file, nulls[i], "class labels, LCM's condition and other variants are not built");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(j, "addition_embed_type");
    const bool text_time = cJSON_IsString(add) && !strcmp(add->valuestring, "text_time");
    if (!st && (xl ? !text_time : add && !cJSON_IsNull(add)))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: addition_embed_type is %s; the %s family builds %s", file,
                     cJSON_IsString(add) ? add->valuestring : "null", mc->family,
                     xl ? "SDXL's \"text_time\" (the pooled text and six size ids)"
                        : "none (null; sdxl and kolors read SDXL's)");
    if (!st && xl && (time_dim < 2 || time_dim % 2 || proj_in <= 6 * time_dim))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: addition_time_embed_dim %lld, projection_class_embeddings_input_dim "
                     "%lld; SDXL's added conditions take an even width and the pooled text's width plus six of them",
                     file, (long long)time_dim, (long long)proj_in);
    if (!st && xl && proj_in == cross + 5 * time_dim) /* the refiner: OpenCLIP's pooled 1280 and five ids */
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: projection_class_embeddings_input_dim %lld is the pooled text and five "
                     "size ids (SDXL's refiner, whose ids hold an aesthetic score); segtrain builds the base's six",
                     file, (long long)proj_in);
    const cJSON *lin = cJSON_GetObjectItemCaseSensitive(j, "use_linear_projection");
    if (!st && lin && !cJSON_IsNull(lin) && !cJSON_IsBool(lin))
        st = st_fail(ST_ERR_FORMAT, "%s: use_linear_projection is not a boolean", file);
    if (!st && out != mc->channels)
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, in_channels %lld; segtrain builds a U-Net whose "
                     "prediction is its input's shape", file, (long long)out, (long long)mc->channels);
    if (st) return st;
    /* unet_depth walks every block these counts make: they are checked before it, not only by model_config_check */
    if (per < 1 || per > 8)
        return st_fail(ST_ERR_INVALID, "%s: layers_per_block is %lld; segtrain builds 1 to 8 ResnetBlock2Ds a level",
                       file, (long long)per);
    for (int i = 0; i < L; i++)
        if (layers[i] > 64)
            return st_fail(ST_ERR_INVALID, "%s: transformer_layers_per_block is %lld at level %d; segtrain builds 0 "
                           "to 64 transformer blocks an attention", file, (long long)layers[i], i);
    for (int i = 0; i < UNET_LEVELS_MAX; i++) {
        mc->unet_channels[i] = i < L ? ch[i] : 0, mc->unet_heads[i] = i < L ? heads[i] : 0;
        mc->unet_attn[i] = i < L && attn[i] ? layers[i] : 0;
    }
    mc->unet_mid = layers[L - 1], mc->unet_layers = per, mc->norm_groups = groups, mc->unet_linear = cJSON_IsTrue(lin);
    mc->hidden = 4 * ch[0], mc->heads = 1, mc->patch = 1, mc->patch_t = 1, mc->out_channels = 0;
    mc->text_dim = kolors ? hid : cross, mc->unet_cross = kolors ? cross : 0;
    mc->time_channels = xl ? time_dim : 0, mc->pooled_dim = xl ? proj_in - 6 * time_dim : 0;
    mc->depth = unet_depth(mc);
    return ST_OK;
}
