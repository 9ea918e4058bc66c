/* Flux.1 (FluxTransformer2DModel): dual/mmdit.c's blocks. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/dual/mmdit.h"

/* Flux's text side: T5-XXL's 4096 and CLIP-L's pooled 768; its rotary axes are (16, 56, 56) of its 128-wide heads
 * (model_rope_axes). */
static const family_preset presets[] = {
    {"flux-tiny", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 16, true, true, 0, 0},
    {"flux-dev", 19, 3072, 24, 2, 16, 128, 10, 38, 512, 4096, 768, true, true, 0, 0},
    {"flux-schnell", 19, 3072, 24, 2, 16, 128, 10, 38, 256, 4096, 768, false, true, 0, 0},
};

st_status flux_from_json(const cJSON *j, const char *file, model_config *mc)
{
    return flux_keys(j, file, mc, 4096);
}

/* SimpleTuner's _quanto_model exclude patterns for flux (quantisation/__init__.py) */
static const char *const flux_quanto_exclude[] = {"*.norm",      "*.norm1",     "*.norm2", "*.norm2_context", "proj_out",
                                                  "x_embedder", "norm_out", "context_embedder", NULL};

const family_desc flux_desc = {
    .name = "flux", .topology = TOPO_DUAL, .traits = TR_TEXT | TR_POOLED,
    .st = {{.name = "flux", .title = "Flux.1", .diffusers = "FluxTransformer2DModel",
            .flavours = "dev|krea|schnell|kontext|fluxbooru|libreflux",
            .built = "dev:flux-dev|krea:flux-dev|schnell:flux-schnell|fluxbooru:flux-dev", .fallback = "krea",
            .example = "flux.peft-lora.json", .tiny = "flux-tiny"}},
    .packed = 4, .ops = &mmdit_family, FAMILY_PRESETS(presets), .readers = {{"FluxTransformer2DModel", flux_from_json}},
    .fields = F_SINGLE, .axes = 3, .quanto_exclude = flux_quanto_exclude,
    .swap_blocks = {"transformer_blocks", "single_transformer_blocks"},
};
