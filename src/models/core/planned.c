/* SimpleTuner's audio language models, which segtrain does not plan to build: refused by name (families.c). */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc heartmula_desc = {
    .topology = TOPO_AUDIO_LM,
    .st = {{.name = "heartmula", .title = "HeartMuLa", .diffusers = "HeartMuLaModel", .flavours = "3b"}},
};

const family_desc minimaxmusic_desc = {
    .topology = TOPO_AUDIO_LM,
    .st = {{.name = "minimaxmusic", .title = "MiniMax Music 3", .diffusers = "MiniMaxMusic3Transformer1DModel",
            .flavours = "music3"}},
};
