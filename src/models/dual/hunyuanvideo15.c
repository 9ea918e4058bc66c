/* HunyuanVideo 1.5 (HunyuanVideo15Transformer3DModel), SimpleTuner's hunyuanvideo: dual/hunyuan_video.c's steps. */
#include "models/core/family.h"
#include "models/core/internal.h"

/* SimpleTuner's hunyuanvideo is HunyuanVideo 1.5; "1.0" is segtrain's name for the first model (hunyuanvideo) */
const family_desc hunyuanvideo15_desc = {
    .name = "hunyuanvideo15",
    .topology = TOPO_DUAL,
    .st = {{.name = "hunyuanvideo",
            .title = "HunyuanVideo",
            .diffusers = "HunyuanVideo15Transformer3DModel",
            .flavours = "t2v-480p|t2v-720p|t2v-480p-distilled|i2v-480p|i2v-720p|i2v-480p-distilled|i2v-720p-distilled|1.0",
            .built = "t2v-480p:hunyuanvideo15-480p|t2v-720p:hunyuanvideo15-720p|t2v-480p-distilled:hunyuanvideo15-480p|"
               "1.0:hunyuanvideo-1.0",
            .fallback = "t2v-480p",
            .why = "the i2v flavours also take the first frame's latents (the condition channels) and its SigLIP "
                     "image tokens; segtrain's conditioning carries no reference image"}},
    .text = true,
    .text_mask = true,
    .video = true,
    .uncached = "ByT5's glyph tokens and their mask",
    .ops = &hunyuan_video_family,
};
