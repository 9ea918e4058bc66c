/* Kwai Kolors (UNet2DConditionModel, SDXL's with a text projection): unet/unet.c's micro-blocks. */
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/unet/unet.h"

const family_desc kolors_desc = {
    .name = "kolors",
    .topology = TOPO_UNET,
    .st = {{.name = "kolors",
            .title = "Kwai Kolors",
            .diffusers = "UNet2DConditionModel",
            .flavours = "1.0",
            .built = "1.0:kolors",
            .fallback = "1.0"}},
    UNET_TRAITS,
};
