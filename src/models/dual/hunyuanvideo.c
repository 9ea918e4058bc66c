/* HunyuanVideo 1.0 (HunyuanVideoTransformer3DModel), SimpleTuner's hunyuanvideo at flavour 1.0 (its row is
 * hunyuanvideo15's): dual/hunyuan_video.c's steps. */
#include "models/core/family.h"
#include "models/core/internal.h"

const family_desc hunyuanvideo_desc = {
    .name = "hunyuanvideo",
    .topology = TOPO_DUAL,
    .text = true,
    .text_mask = true,
    .video = true,
    .ops = &hunyuan_video_family,
};
