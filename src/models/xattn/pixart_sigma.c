/* PixArt Sigma (PixArtTransformer2DModel): xattn/xdit.c's steps. */
#include "models/core/family.h"
#include "models/core/internal.h"

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
};
