/* LongCat-Image (LongCatImageTransformer2DModel): Flux's blocks (dual/mmdit.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/dual/mmdit.h"

/* LongCat-Image's are meituan-longcat/LongCat-Image's transformer config (10 double + 20 single blocks of Flux's
 * width, Qwen2.5-VL's 3584-wide text, no pooled vector) with its pipeline's 512 tokens. */
static const family_preset presets[] = {
    {"longcat-image-tiny", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 0, false, true, 0, 0},
    {"longcat-image", 10, 3072, 24, 2, 16, 128, 10, 20, 512, 3584, 0, false, true, 0, 0},
};

/* LongCatImageTransformer2DModel's: Flux's keys (no out_channels or guidance_embeds in the class), Qwen2.5-VL's
 * 3584-wide text by default; its pooled_projection_dim is only stored, the model has no pooled input. */
static st_status longcat_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = flux_keys(j, file, mc, 3584);
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    return st;
}

const family_desc longcat_image_desc = {
    .name = "longcat_image", .topology = TOPO_DUAL, .traits = TR_TEXT | TR_UNPOOLED,
    .st = {{.name = "longcat_image", .title = "LongCat-Image", .diffusers = "LongCatImageTransformer2DModel",
            .flavours = "final|dev|edit", .built = "final:longcat-image|dev:longcat-image", .fallback = "final",
            .tiny = "longcat-image-tiny"}},
    .packed = 4, .ops = &mmdit_family, .topology_options = &(const mmdit_options){.longcat = true},
    FAMILY_PRESETS(presets), .readers = {{"LongCatImageTransformer2DModel", longcat_from_json}}, .fields = F_SINGLE,
    .axes = 3,
    .swap_blocks = {"transformer_blocks", "single_transformer_blocks"},
};
