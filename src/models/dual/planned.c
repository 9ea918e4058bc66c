/* SimpleTuner's dual-stream families that segtrain does not build yet: refused by name (families.c). */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc boogu_image_desc = {
    .topology = TOPO_DUAL,
    .st = {{.name = "boogu_image", .title = "Boogu-Image", .diffusers = "BooguImageTransformer2DModel",
            .flavours = "v0.1-base|v0.1-base-fp8|v0.1-turbo|v0.1-turbo-fp8|v0.1-edit|v0.1-edit-fp8"}},
};

const family_desc mageflow_desc = {
    .topology = TOPO_DUAL,
    .st = {{.name = "mageflow", .title = "Mage-Flow", .diffusers = "MageFlowTransformer2DModel",
            .flavours = "base|default|turbo|edit-base|edit|edit-turbo"}},
};
