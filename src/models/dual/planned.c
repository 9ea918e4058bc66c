/* SimpleTuner's dual-stream families that segtrain does not build yet: refused by name (families.c). */
#include "models/core/family.h"

const family_desc mageflow_desc =
    PLANNED_FAMILY(TOPO_DUAL, "mageflow", "Mage-Flow", "MageFlowTransformer2DModel",
                   "base|default|turbo|edit-base|edit|edit-turbo");
