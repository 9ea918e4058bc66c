/* SimpleTuner's joint families that segtrain does not build yet: refused by name (families.c). */
#include "models/core/family.h"

const family_desc z_image_omni_desc =
    PLANNED_FAMILY(TOPO_JOINT, "z_image_omni", "Z-Image Omni", "ZImageOmniTransformer2DModel", "base|edit");
