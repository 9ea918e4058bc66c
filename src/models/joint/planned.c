/* SimpleTuner's joint families that segtrain does not build yet: refused by name (families.c). */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc z_image_omni_desc = {
    .topology = TOPO_JOINT,
    .st = {{.name = "z_image_omni", .title = "Z-Image Omni", .diffusers = "ZImageOmniTransformer2DModel",
            .flavours = "base|edit"}},
};

const family_desc zlab_i1_desc = {
    .topology = TOPO_JOINT,
    .st = {{.name = "zlab_i1", .title = "zlab i1", .diffusers = "ZlabI1Transformer2DModel", .flavours = "3b"}},
};
