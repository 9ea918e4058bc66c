/* PixArt Sigma (PixArtTransformer2DModel): xattn/xdit.c's steps. */
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
    mc->out_channels = 2 * mc->channels, mc->sample_size = mc->resolution,
    mc->interpolation = tiny ? 1.0 : (double)(mc->resolution / 64 > 1 ? mc->resolution / 64 : 1);
}

const family_desc pixart_sigma_desc = {
    .name = "pixart_sigma",
    .topology = TOPO_XATTN,
    .st = {{.name = "pixart_sigma",
            .alias = "pixart",
            .title = "PixArt Sigma",
            .diffusers = "PixArtTransformer2DModel",
            .flavours = "900M-1024-v0.6|900M-1024-v0.7-stage1|900M-1024-v0.7-stage2|600M-512|600M-1024|600M-2048",
            .built = "900M-1024-v0.6:pixart-900m-1024|900M-1024-v0.7-stage1:pixart-900m-1024|900M-1024-v0.7-stage2:pixart-900m-1024|"
               "600M-512:pixart-sigma-512|600M-1024:pixart-sigma-1024|600M-2048:pixart-sigma-2048",
            .fallback = "900M-1024-v0.6"}},
    .text = true,
    .text_mask = true,
    .upstream_epsilon = true,
    .ops = &xdit_family,
    FAMILY_PRESETS(presets),
    .preset = pixart_sigma_preset,
    .readers = {{"PixArtTransformer2DModel", pixart_from_json}},
    .fields = F_FFN,
    .unpooled = true,
};
