/* Sana (SanaTransformer2DModel): PixArt's cross-attention DiT with linear self-attention and GLUMBConv; its steps
 * are xattn/xdit.c's. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"

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

const family_desc sana_desc = {
    .name = "sana",
    .topology = TOPO_LINEAR,
    .st = {{.name = "sana",
            .title = "Sana",
            .diffusers = "SanaTransformer2DModel",
            .flavours = "sana1.5-4.8b-1024|sana1.5-1.6b-1024|sana1.0-1.6b-2048|sana1.0-1.6b-1024|sana1.0-600m-1024|sana1.0-600m-512",
            .built = "sana1.5-4.8b-1024:sana-1.5-4.8b-1024|sana1.5-1.6b-1024:sana-1.5-1.6b-1024|sana1.0-1.6b-2048:sana-1.6b-2048|"
               "sana1.0-1.6b-1024:sana-1.6b-1024|sana1.0-600m-1024:sana-600m-1024|sana1.0-600m-512:sana-600m-512",
            .fallback = "sana1.5-4.8b-1024"}},
    .text = true,
    .text_mask = true,
    .ops = &xdit_family,
    .topology_options = &(const xdit_options){.sana = true},
    FAMILY_PRESETS(presets),
    .preset = sana_preset,
    .readers = {{"SanaTransformer2DModel", sana_from_json}},
    .fields = F_FFN | F_CROSS_HEADS,
    .unpooled = true,
    .check = sana_check,
};
