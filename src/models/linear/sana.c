/* Sana (SanaTransformer2DModel): PixArt's cross-attention DiT with linear self-attention and GLUMBConv; its steps
 * are xattn/xdit.c's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/linear/sana.h"

static const family_preset presets[] = {
    /* Sana 1.0's: SanaTransformer2DModel's defaults are Sana_1600M_1024px's (20 blocks of 70 heads x 32, the
     * cross-attention 20 x 112, Gemma 2's 2304-wide states at SimpleTuner's 300 tokens, mlp_ratio 2.5), 600M's 28 of
     * 36 x 32 and 16 x 72; 32 latent channels through DC-AE's 32x, 1 x 1 patches */
    {"sana-tiny", 2, 32, 4, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"sana-1.6b-1024", 20, 2240, 70, 1, 32, 32, 10, 0, 300, 2304, 0, false, false, 0, 0},
    {"sana-1.6b-2048", 20, 2240, 70, 1, 32, 64, 10, 0, 300, 2304, 0, false, false, 0, 0},
    {"sana-600m-1024", 28, 1152, 36, 1, 32, 32, 10, 0, 300, 2304, 0, false, false, 0, 0},
    {"sana-600m-512", 28, 1152, 36, 1, 32, 16, 10, 0, 300, 2304, 0, false, false, 0, 0},
    /* Sana 1.5's: q and k RMSNorm-ed across the heads; 4.8B is 60 blocks of 1.6B's width (the paper's depth growth) */
    {"sana-1.5-tiny", 2, 32, 4, 1, 4, 8, 10, 0, 6, 24, 0, false, true, 0, 0},
    {"sana-1.5-4.8b-1024", 60, 2240, 70, 1, 32, 32, 10, 0, 300, 2304, 0, false, true, 0, 0},
    {"sana-1.5-1.6b-1024", 20, 2240, 70, 1, 32, 32, 10, 0, 300, 2304, 0, false, true, 0, 0},
};

static void sana_preset(model_config *mc, const char *name, bool tiny)
{
    /* GLUMBConv's int(2.5 D) */
    mc->cross_heads = tiny ? 2 : mc->hidden == 2240 ? 20 : 16, mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 32,
    mc->ffn_dim = (int64_t)(2.5 * (double)mc->hidden);
}

static st_status sana_check(const model_config *mc)
{
    if (mc->cross_heads < 1 || mc->hidden % mc->cross_heads || mc->ffn_dim < 1 || mc->frames != 1 || mc->out_channels ||
        mc->pooled_dim)
        return family_refuse(mc, GROUP_CROSS_HEADS, "sana and sanavideo take cross-attention heads dividing "
                             "hidden_size, a feed-forward of at least 1, out_channels 0 (= in_channels), and sana "
                             "images (1 frame)");
    return ST_OK;
}

/* SanaTransformer2DModel's config (video false) or SanaVideoTransformer3DModel's (true): the class defaults
 * (Sana_1600M_1024px's; SANA-Video 2B's but mlp_ratio 2.5), then the file's values. What segtrain does not build is
 * refused by name: q/k norms other than rms_norm_across_heads, guidance embeds (Sana Sprint's, Sana-Video's
 * guidance_embeds), Sana's position table (interpolation_scale), a cross-attention narrower or wider than the
 * stream, affine or other norms, a timestep_scale other than 1, attention biases. */
st_status sana_read(const cJSON *j, const char *file, model_config *mc, bool video)
{
    int64_t hd = video ? 112 : 32, heads = video ? 20 : 70, cross_hd = 112, cross = 2240, out = video ? 16 : 32;
    double ratio = 2.5;
    mc->channels = out, mc->depth = 20, mc->cross_heads = 20, mc->text_dim = 2304, mc->patch = video ? 2 : 1;
    mc->patch_t = 1, mc->sample_size = video ? 30 : 32;
    const json_key keys[] = {{"in_channels", &mc->channels}, {"out_channels", &out}, {"num_attention_heads", &heads},
                             {"attention_head_dim", &hd}, {"num_layers", &mc->depth},
                             {"num_cross_attention_heads", &mc->cross_heads}, {"cross_attention_head_dim", &cross_hd},
                             {"cross_attention_dim", &cross}, {"caption_channels", &mc->text_dim},
                             {"sample_size", &mc->sample_size}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = video ? json_patch_3d(j, file, mc) : json_int(j, file, "patch_size", &mc->patch);
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

static st_status sana_from_json(const cJSON *j, const char *file, model_config *mc) { return sana_read(j, file, mc, false); }

const family_desc sana_desc = {
    .name = "sana", .topology = TOPO_LINEAR, .traits = TR_TEXT | TR_TEXT_MASK | TR_UNPOOLED,
    .st = {{.name = "sana", .title = "Sana", .diffusers = "SanaTransformer2DModel",
            .flavours = "sana1.5-4.8b-1024|sana1.5-1.6b-1024|sana1.0-1.6b-2048|sana1.0-1.6b-1024|sana1.0-600m-1024|sana1.0-600m-512",
            .built = "sana1.5-4.8b-1024:sana-1.5-4.8b-1024|sana1.5-1.6b-1024:sana-1.5-1.6b-1024|sana1.0-1.6b-2048:sana-1.6b-2048|"
                     "sana1.0-1.6b-1024:sana-1.6b-1024|sana1.0-600m-1024:sana-600m-1024|sana1.0-600m-512:sana-600m-512",
            .fallback = "sana1.5-4.8b-1024", .example = "sana.lycoris-lokr.json", .tiny = "sana-1.5-tiny"}},
    .ops = &xdit_family, .topology_options = &(const xdit_options){.sana = true}, FAMILY_PRESETS(presets),
    .preset = sana_preset, .readers = {{"SanaTransformer2DModel", sana_from_json}}, .fields = F_FFN | F_CROSS_HEADS,
    .check = sana_check, .lycoris_classes = lyco_sana_classes,
    .swap_blocks = {"transformer_blocks"},
};
