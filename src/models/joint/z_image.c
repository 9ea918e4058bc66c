/* Z-Image (ZImageTransformer2DModel): Lumina-Image 2.0's relative, joint/lumina2.c's steps. */
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/joint/lumina2.h"

const family_desc z_image_desc = {
    .name = "z_image",
    .topology = TOPO_JOINT,
    .st = {{.name = "z_image",
            .title = "Z-Image",
            .diffusers = "ZImageTransformer2DModel",
            .flavours = "base|turbo|turbo-ostris-v2|ostris-de-turbo",
            .built = "base:z-image",
            .fallback = "turbo-ostris-v2",
            .why = "the turbo flavours (turbo, turbo-ostris-v2, its default, and ostris-de-turbo) train LoRA through an "
                "assistant adapter (ostris's de-distillation LoRA) loaded beside it, which segtrain does not load; "
                "base, the same transformer shape, is built"}},
    .text = true,
    .text_mask = true,
    .describe_blocks = lumina2_blocks,
    .ops = &lumina2_family,
};
