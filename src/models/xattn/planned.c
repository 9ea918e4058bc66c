/* SimpleTuner's cross-attention families that segtrain does not build yet: refused by name (families.c). */
#include "models/core/family.h"

const family_desc infinitetalk_desc =
    PLANNED_FAMILY(TOPO_XATTN, "infinitetalk", "InfiniteTalk", "InfiniteTalkTransformer3DModel", "single-14b-480p");

