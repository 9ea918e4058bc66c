/* segtrain's own dual-stream family: mmdit (Flux's layout at segtrain's sizes; its blocks are dual/'s). */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc mmdit_desc = {
    .name = "mmdit",
    .topology = TOPO_DUAL,
    .own = true,
    .text = true,
    .packed = 4,
    .ops = &mmdit_family,
};
