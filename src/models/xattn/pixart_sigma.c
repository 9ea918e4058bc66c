/* PixArt Sigma (PixArtTransformer2DModel): xattn/xdit.c's steps. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"

static const family_preset presets[] = {
    /* PixArt-Sigma-XL-2 (PixArt-alpha/PixArt-Sigma-XL-2-{512,1024,2K}-MS): 28 blocks of 16 heads x 72, T5-XXL's 4096
     * (caption_channels) at its 300 tokens, 8 output channels; SimpleTuner's 900M flavours (terminusresearch's
     * fine-tunes) are 42 such blocks (their 0.9 B parameters; the config is not public here). Wan 2.1 T2V 1.3B and
     * 14B (Wan-AI/Wan2.1-T2V-*-Diffusers): 30 blocks of 12 heads and 40 of 40 (x 128), feed-forwards 8960 and
     * 13824, UMT5's 4096 at 512 tokens, 16 latent channels in (1, 2, 2) patches. The rest in its preset hook below. */
    {"pixart-sigma-tiny", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, false, 0, 0},
    {"pixart-sigma-512", 28, 1152, 16, 2, 4, 64, 10, 0, 300, 4096, 0, false, false, 0, 0},
    {"pixart-sigma-1024", 28, 1152, 16, 2, 4, 128, 10, 0, 300, 4096, 0, false, false, 0, 0},
    {"pixart-sigma-2048", 28, 1152, 16, 2, 4, 256, 10, 0, 300, 4096, 0, false, false, 0, 0},
    {"pixart-900m-1024", 42, 1152, 16, 2, 4, 128, 10, 0, 300, 4096, 0, false, false, 0, 0},
};

static void pixart_sigma_preset(model_config *mc, const char *name, bool tiny)
{
    /* learned variance; the table's base grid and interpolation */
    mc->out_channels = 2 * mc->channels, mc->sample_size = mc->height,
    mc->interpolation = tiny ? 1.0 : (double)(mc->height / 64 > 1 ? mc->height / 64 : 1);
}

/* PixArtTransformer2DModel's config: its defaults (PixArt-Sigma-XL-2-1024-MS's), then the file's values; the
 * micro-conditions (use_additional_conditions) and other block kinds are refused by name. */
static st_status pixart_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t hd = 72, heads = 16, cross = 1152, interp = 0;
    mc->channels = 4, mc->out_channels = 8, mc->depth = 28, mc->text_dim = 4096, mc->sample_size = 128, mc->patch = 2;
    const json_key keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd},
                             {"in_channels", &mc->channels}, {"out_channels", &mc->out_channels},
                             {"num_layers", &mc->depth}, {"cross_attention_dim", &cross},
                             {"caption_channels", &mc->text_dim}, {"sample_size", &mc->sample_size},
                             {"patch_size", &mc->patch}, {"interpolation_scale", &interp}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
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

const family_desc pixart_sigma_desc = {
    .name = "pixart_sigma", .topology = TOPO_XATTN,
    .traits = TR_TEXT | TR_TEXT_MASK | TR_UPSTREAM_EPSILON | TR_UNPOOLED,
    .st = {{.name = "pixart_sigma", .alias = "pixart", .title = "PixArt Sigma",
            .diffusers = "PixArtTransformer2DModel",
            .flavours = "900M-1024-v0.6|900M-1024-v0.7-stage1|900M-1024-v0.7-stage2|600M-512|600M-1024|600M-2048",
            .built = "900M-1024-v0.6:pixart-900m-1024|900M-1024-v0.7-stage1:pixart-900m-1024|900M-1024-v0.7-stage2:pixart-900m-1024|"
                     "600M-512:pixart-sigma-512|600M-1024:pixart-sigma-1024|600M-2048:pixart-sigma-2048",
            .fallback = "900M-1024-v0.6", .example = "pixart.lycoris-lokr.json", .tiny = "pixart-sigma-tiny"}},
    .ops = &xdit_family, FAMILY_PRESETS(presets), .preset = pixart_sigma_preset,
    .lycoris_classes = lyco_basic_block_classes,
    .readers = {{"PixArtTransformer2DModel", pixart_from_json}}, .fields = F_FFN,
    .swap_blocks = {"transformer_blocks"},
};
