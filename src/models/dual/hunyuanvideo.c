/* HunyuanVideo 1.0 (HunyuanVideoTransformer3DModel), SimpleTuner's hunyuanvideo at flavour 1.0 (its row is
 * hunyuanvideo15's): dual/hunyuan_video.c's steps. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"

static const family_preset presets[] = {
    {"hunyuanvideo-tiny", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 16, true, true, 0, 0},
    {"hunyuanvideo-1.0", 20, 3072, 24, 2, 16, 60, 10, 40, 256, 4096, 768, true, true, 0, 0},
};

static void hunyuanvideo_preset(model_config *mc, const char *name, bool tiny)
{
    mc->refiner_depth = 2, mc->frames = tiny ? 2 : 1; /* the tiny one's latents have 2 frames, a video's smallest */
}

const family_desc hunyuanvideo_desc = {
    .name = "hunyuanvideo",
    .topology = TOPO_DUAL,
    .text = true,
    .text_mask = true,
    .video = true,
    .ops = &hunyuan_video_family,
    FAMILY_PRESETS(presets),
    .preset = hunyuanvideo_preset,
    .readers = {{"HunyuanVideoTransformer3DModel", hunyuanvideo_from_json}},
    .fields = F_SINGLE | F_REFINER,
    .pooled = true,
    .axes = 3,
};
