/* Sana-Video (SanaVideoTransformer3DModel): Sana over video tokens, Wan's rotary table in the linear attention and a
 * temporal convolution after GLUMBConv; its steps are xattn/xdit.c's. */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc sanavideo_desc = {
    .name = "sanavideo",
    .topology = TOPO_LINEAR,
    .st = {{.name = "sanavideo",
            .title = "SanaVideo",
            .diffusers = "SanaVideoTransformer3DModel",
            .flavours = "2b-480p",
            .built = "2b-480p:sanavideo-2b-480p",
            .fallback = "2b-480p"}},
    .text = true,
    .text_mask = true,
    .video = true,
    .ops = &xdit_family,
};
