/* Flux.1 (FluxTransformer2DModel): dual/mmdit.c's blocks. */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc flux_desc = {
    .name = "flux",
    .topology = TOPO_DUAL,
    .st = {{.name = "flux",
            .title = "Flux.1",
            .diffusers = "FluxTransformer2DModel",
            .flavours = "dev|krea|schnell|kontext|fluxbooru|libreflux",
            .built = "dev:flux-dev|krea:flux-dev|schnell:flux-schnell|fluxbooru:flux-dev",
            .fallback = "krea"}},
    .text = true,
    .packed = 4,
    .ops = &mmdit_family,
};
