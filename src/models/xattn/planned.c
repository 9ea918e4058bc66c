/* SimpleTuner's cross-attention families that segtrain does not build yet: refused by name (families.c). */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc infinitetalk_desc = {
    .topology = TOPO_XATTN,
    .st = {{.name = "infinitetalk", .title = "InfiniteTalk", .diffusers = "InfiniteTalkTransformer3DModel",
            .flavours = "single-14b-480p"}},
};

const family_desc longcat_video_desc = {
    .topology = TOPO_XATTN,
    .st = {{.name = "longcat_video", .title = "LongCat-Video", .diffusers = "LongCatVideoTransformer3DModel",
            .flavours = "final"}},
};

const family_desc wan_s2v_desc = {
    .topology = TOPO_XATTN,
    .st = {{.name = "wan_s2v", .title = "WanS2V", .diffusers = "WanS2VTransformer3DModel", .flavours = "s2v-14b-2.2"}},
};
