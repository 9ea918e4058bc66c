/* SimpleTuner's U-Net families that segtrain does not build yet: refused by name (families.c). */
#include "models/core/family.h"

const family_desc deepfloyd_desc =
    PLANNED_FAMILY(TOPO_UNET, "deepfloyd", "DeepFloyd IF", "UNet2DConditionModel",
                   "i-medium-400m|i-large-900m|i-xlarge-4.3b|ii-medium-450m|ii-large-1.2b");

const family_desc sd2x_desc =
    PLANNED_FAMILY(TOPO_UNET, "sd2x", "Stable Diffusion 2.x", "UNet2DConditionModel", "");
