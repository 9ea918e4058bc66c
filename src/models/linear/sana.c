/* Sana (SanaTransformer2DModel): PixArt's cross-attention DiT with linear self-attention and GLUMBConv; its steps
 * are xattn/xdit.c's. */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc sana_desc = {
    .name = "sana",
    .topology = TOPO_LINEAR,
    .st = {{.name = "sana",
            .title = "Sana",
            .diffusers = "SanaTransformer2DModel",
            .flavours = "sana1.5-4.8b-1024|sana1.5-1.6b-1024|sana1.0-1.6b-2048|sana1.0-1.6b-1024|sana1.0-600m-1024|sana1.0-600m-512",
            .built = "sana1.5-4.8b-1024:sana-1.5-4.8b-1024|sana1.5-1.6b-1024:sana-1.5-1.6b-1024|sana1.0-1.6b-2048:sana-1.6b-2048|"
               "sana1.0-1.6b-1024:sana-1.6b-1024|sana1.0-600m-1024:sana-600m-1024|sana1.0-600m-512:sana-600m-512",
            .fallback = "sana1.5-4.8b-1024"}},
    .text = true,
    .text_mask = true,
    .ops = &xdit_family,
};
