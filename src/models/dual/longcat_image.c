/* LongCat-Image (LongCatImageTransformer2DModel): Flux's blocks (dual/mmdit.c). */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc longcat_image_desc = {
    .name = "longcat_image",
    .topology = TOPO_DUAL,
    .st = {{.name = "longcat_image",
            .title = "LongCat-Image",
            .diffusers = "LongCatImageTransformer2DModel",
            .flavours = "final|dev|edit",
            .built = "final:longcat-image|dev:longcat-image",
            .fallback = "final"}},
    .text = true,
    .packed = 4,
    .ops = &mmdit_family,
};
