/* Chroma 1 (ChromaTransformer2DModel): Flux's blocks (dual/mmdit.c) without their adaLN linears. */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc chroma_desc = {
    .name = "chroma",
    .topology = TOPO_DUAL,
    .st = {{.name = "chroma",
            .title = "Chroma 1",
            .diffusers = "ChromaTransformer2DModel",
            .flavours = "base|hd|flash",
            .built = "base:chroma|hd:chroma|flash:chroma",
            .fallback = "base"}},
    .text = true,
    .text_mask = true,
    .mask = MASK_PAD_ONE,
    .packed = 4,
    .ops = &mmdit_family,
};
