/* segtrain's own dual-stream family: mmdit (Flux's layout at segtrain's sizes; its blocks are dual/'s). */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"

/* The presets' text side: a stand-in encoder's widths. */
static const family_preset presets[] = {
    {"mmdit-tiny", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 16, false, true, 0, 0},
    {"mmdit-s", 4, 384, 6, 2, 4, 32, 1000, 8, 16, 256, 128, false, true, 0, 0},
};

const family_desc mmdit_desc = {
    .name = "mmdit", .topology = TOPO_DUAL, .traits = TR_OWN | TR_TEXT | TR_POOLED,
    .packed = 4, .ops = &mmdit_family, FAMILY_PRESETS(presets), .readers = {{"FluxTransformer2DModel", flux_from_json}},
    .fields = F_SINGLE, .axes = 3,
};
