/* SimpleTuner's U-Net families that segtrain does not build yet: refused by name (families.c). */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc deepfloyd_desc = {
    .topology = TOPO_UNET,
    .st = {{.name = "deepfloyd", .title = "DeepFloyd IF", .diffusers = "UNet2DConditionModel",
            .flavours = "i-medium-400m|i-large-900m|i-xlarge-4.3b|ii-medium-450m|ii-large-1.2b"}},
};

const family_desc sd2x_desc = {
    .topology = TOPO_UNET,
    .st = {{.name = "sd2x", .title = "Stable Diffusion 2.x", .diffusers = "UNet2DConditionModel", .flavours = ""}},
};
