/* SimpleTuner's dual-stream families that segtrain does not build yet: refused by name (families.c). */
#include "models/core/family.h"

const family_desc boogu_image_desc =
    PLANNED_FAMILY(TOPO_DUAL, "boogu_image", "Boogu-Image", "BooguImageTransformer2DModel",
                   "v0.1-base|v0.1-base-fp8|v0.1-turbo|v0.1-turbo-fp8|v0.1-edit|v0.1-edit-fp8");

const family_desc mageflow_desc =
    PLANNED_FAMILY(TOPO_DUAL, "mageflow", "Mage-Flow", "MageFlowTransformer2DModel",
                   "base|default|turbo|edit-base|edit|edit-turbo");
