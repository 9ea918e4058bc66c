/* Stable Diffusion 1.x (UNet2DConditionModel): unet/unet.c's micro-blocks. */
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/unet/unet.h"

const family_desc sd1x_desc = {
    .name = "sd1x",
    .topology = TOPO_UNET,
    .st = {{.name = "sd1x",
            .title = "Stable Diffusion 1.x",
            .diffusers = "UNet2DConditionModel",
            .flavours = "1.5|1.4|dreamshaper|realvis",
            .built = "1.5:sd15|1.4:sd15|dreamshaper:sd15",
            .fallback = "dreamshaper",
            .why = "realvis is RealVisXL (SG161222/RealVisXL_V5.0), an SDXL checkpoint: plan it with model_family sdxl"}},
    UNET_TRAITS,
};
