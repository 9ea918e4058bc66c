/* LTX-Video (LTXVideoTransformer3DModel): xattn/xdit.c's steps. */
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

const family_desc ltxvideo_desc = {
    .name = "ltxvideo",
    .topology = TOPO_XATTN,
    .st = {{.name = "ltxvideo",
            .title = "LTXVideo",
            .diffusers = "LTXVideoTransformer3DModel",
            .flavours = "0.9.5|0.9.0",
            .built = "0.9.5:ltxvideo-0.9.5|0.9.0:ltxvideo-0.9.5",
            .fallback = "0.9.5"}},
    .text = true,
    .text_mask = true,
    .video = true,
    .vae_scale_t = 8,
    .ops = &xdit_family,
    .topology_options = &(const xdit_options){.ltx = true},
    FAMILY_PRESETS(presets),
    .preset = ltxvideo_preset,
    .readers = {{"LTXVideoTransformer3DModel", ltxvideo_from_json}},
    .fields = F_FFN,
    .unpooled = true,
};
