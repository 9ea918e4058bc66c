/* Cosmos-Predict2 text-to-image (CosmosTransformer3DModel): xattn/cosmos.c's steps, trained on EDM's sigmas. */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc cosmos2image_desc = {
    .name = "cosmos2image",
    .topology = TOPO_XATTN,
    .st = {{.name = "cosmos2image",
            .alias = "cosmos",
            .title = "Cosmos 2 (T2I)",
            .diffusers = "CosmosTransformer3DModel",
            .flavours = "2b|14b",
            .built = "2b:cosmos2-2b|14b:cosmos2-14b",
            .fallback = "2b"}},
    .text = true,
    .edm = true,
    .ops = &cosmos_family,
};
