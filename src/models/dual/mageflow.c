/* Mage-Flow (SimpleTuner's mageflow, its own MageFlowTransformer2DModel; no diffusers class): Qwen-Image's model
 * (qwen_image.c, its blocks mmdit_block.c's under Qwen's names, which are Mage-Flow's) on the latent's own channels,
 * its text unrotated and each sample's image at its own rotary frame (qwen_image.c says how). */
#include <stdio.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/dual/mmdit.h"

/* Mage-Flow's are SimpleTuner's MageFlowTransformer2DModel defaults: 12 blocks (its max_swappable_blocks of 11 and
 * block swap presets' "of 12") of 24 heads x 128 (axes 16, 56, 56), 4.1B (its description's "4B"), on MageVAE's
 * 128 latent channels at 16x, patch 1 (1024 px: 64 x 64), and Qwen3-VL 4B's 2560-wide states at the 2048 tokens of
 * SimpleTuner's tokenizer_max_length for it (each batch padded to its longest caption). The tiny one is the
 * fixture's. */
static const family_preset presets[] = {
    {"mageflow-tiny", 2, 32, 2, 1, 4, 8, 10, 0, 6, 24, 0, false, true, 0, 0},
    {"mageflow", 12, 3072, 24, 1, 128, 64, 10, 0, 2048, 2560, 0, false, true, 0, 0},
};

static void mageflow_preset(model_config *mc, const char *name, bool tiny)
{
    (void)name;
    mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
}

/* MageFlowTransformer2DModel's config: its defaults, then the file's values. The keys its __init__ drops (mlp_ratio,
 * qkv_bias, depth_single_blocks, ...) and SimpleTuner's loading options (attn_type, musubi_*,
 * enable_time_sign_embed, which from_pretrained sets from its own arguments) are not read. */
static st_status mageflow_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t out = 128, heads = 24, axes[3] = {16, 56, 56};
    mc->channels = 128, mc->patch = 1, mc->depth = 12, mc->hidden = 3072, mc->text_dim = 2560;
    const json_key keys[] = {{"in_channels", &mc->channels}, {"out_channels", &out}, {"patch_size", &mc->patch},
                             {"context_in_dim", &mc->text_dim}, {"hidden_size", &mc->hidden}, {"num_heads", &heads},
                             {"depth", &mc->depth}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "axes_dim", 3, axes);
    if (st) return st;
    if (mc->patch != 1 || out != mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: in_channels %lld, out_channels %lld, patch_size %lld; SimpleTuner "
                       "gives Mage-Flow the latent's channels as they are (patch_size 1, in_channels = out_channels)",
                       file, (long long)mc->channels, (long long)out, (long long)mc->patch);
    mc->heads = heads, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    set_rope_axes(mc, axes, 3);
    return ST_OK;
}

/* SimpleTuner's _quanto_model exclude patterns for mageflow (quantisation/__init__.py) */
static const char *const mageflow_quanto_exclude[] = {"*norm*",          "*pos_embed*", "img_in",     "txt_in",
                                                      "time_text_embed*", "time_sign_embed*", "*img_mod*", "*txt_mod*",
                                                      "norm_out*",       "proj_out",    NULL};

const family_desc mageflow_desc = {
    .name = "mageflow", .topology = TOPO_DUAL, .traits = TR_TEXT | TR_TEXT_MASK | TR_UNPOOLED | TR_BATCH_PADDED,
    .st = {{.name = "mageflow", .title = "Mage-Flow", .diffusers = "MageFlowTransformer2DModel",
            .flavours = "base|default|turbo|edit-base|edit|edit-turbo",
            .built = "base:mageflow|default:mageflow|turbo:mageflow", .fallback = "base",
            .why = "the edit flavours also take reference images' latents as image tokens packed after the target's "
                   "(at the next rotary frames); segtrain's conditioning carries no reference image",
            .example = "mageflow-image-24g.peft-lora.json", .tiny = "mageflow-tiny"}},
    .ops = &qwen_image_family, .topology_options = &(const qwen_image_options){.mageflow = true},
    FAMILY_PRESETS(presets), .preset = mageflow_preset,
    .readers = {{"MageFlowTransformer2DModel", mageflow_from_json}}, .axes = 3,
    .quanto_exclude = mageflow_quanto_exclude, .swap_blocks = {"transformer_blocks"},
};
