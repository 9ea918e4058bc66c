/* LTX-Video (LTXVideoTransformer3DModel): xattn/xdit.c's steps. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"

/* 0.9.0's transformer is 0.9.5's shape */
static const family_preset presets[] = {
    /* LTX-Video 0.9.5 (Lightricks/LTX-Video-0.9.5's transformer, the same shape as 0.9.0's): 28 blocks of 32 heads x
     * 64, T5-XXL's 4096 at SimpleTuner's 226 tokens, 128 latent channels in 1 x 1 x 1 patches from a VAE of 32x in
     * space (512 px: 16 x 16) and 8x in time; the tiny one is the fixture's. */
    {"ltxvideo-tiny", 2, 32, 2, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"ltxvideo-0.9.5", 28, 2048, 32, 1, 128, 16, 10, 0, 226, 4096, 0, false, false, 0, 0},
};

static void ltxvideo_preset(model_config *mc, const char *name, bool tiny)
{
    mc->frames = tiny ? 2 : 1, mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 32;
}

/* LTXVideoTransformer3DModel's config: its defaults (LTX-Video 0.9.x's), then the file's values; what the
 * published 0.9.x configs do not vary is refused by name. */
static st_status ltxvideo_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t hd = 64, heads = 32, out = 128, cross = 2048;
    mc->channels = 128, mc->depth = 28, mc->text_dim = 4096, mc->patch = 1, mc->patch_t = 1;
    const json_key keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd},
                             {"in_channels", &mc->channels}, {"out_channels", &out},
                             {"caption_channels", &mc->text_dim}, {"cross_attention_dim", &cross},
                             {"num_layers", &mc->depth}, {"patch_size", &mc->patch}, {"patch_size_t", &mc->patch_t}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
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

const family_desc ltxvideo_desc = {
    .name = "ltxvideo", .topology = TOPO_XATTN, .traits = TR_TEXT | TR_TEXT_MASK | TR_VIDEO | TR_FRAMES_8K1 | TR_UNPOOLED,
    .st = {{.name = "ltxvideo", .title = "LTXVideo", .diffusers = "LTXVideoTransformer3DModel",
            .flavours = "0.9.5|0.9.0", .built = "0.9.5:ltxvideo-0.9.5|0.9.0:ltxvideo-0.9.5", .fallback = "0.9.5",
            .example = "ltxvideo-0.9.5-t2v.peft-lora.json", .tiny = "ltxvideo-tiny",
            .shape = "768x512@49"}}, /* LTX-Video's 768x512, 49 frames (finetrainers' 49x512x768 bucket) */
    .vae_scale_t = 8, .ops = &xdit_family, .topology_options = &(const xdit_options){.ltx = true},
    FAMILY_PRESETS(presets), .preset = ltxvideo_preset, .readers = {{"LTXVideoTransformer3DModel", ltxvideo_from_json}},
    .fields = F_FFN, .quanto_exclude = quanto_exclude_video,
    .swap_blocks = {"transformer_blocks"},
};
