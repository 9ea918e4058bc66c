/* SimpleTuner's audio language models, which segtrain does not plan to build: refused by name (families.c). */
#include "models/core/family.h"

const family_desc minimaxmusic_desc =
    PLANNED_FAMILY(TOPO_AUDIO_LM, "minimaxmusic", "MiniMax Music 3", "MiniMaxMusic3Transformer1DModel", "music3");
