/* LTX-Video (LTXVideoTransformer3DModel): xattn/xdit.c's steps. */
#include "models/core/family.h"
#include "models/core/internal.h"

/* 0.9.0's transformer is 0.9.5's shape */
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
};
