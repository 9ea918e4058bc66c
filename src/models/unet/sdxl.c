/* Stable Diffusion XL (UNet2DConditionModel, added conditions): unet/unet.c's micro-blocks. */
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/unet/unet.h"

const family_desc sdxl_desc = {
    .name = "sdxl",
    .topology = TOPO_UNET,
    .st = {{.name = "sdxl",
            .title = "Stable Diffusion XL",
            .diffusers = "UNet2DConditionModel",
            .flavours = "base-1.0|refiner-1.0|base-0.9|refiner-0.9",
            .built = "base-1.0:sdxl|base-0.9:sdxl",
            .fallback = "base-1.0",
            .why = "the refiners read OpenCLIP-G's text alone and five size ids, one of them an aesthetic score; the base "
             "flavours are built"}},
    UNET_TRAITS,
};
