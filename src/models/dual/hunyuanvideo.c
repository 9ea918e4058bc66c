/* HunyuanVideo 1.0 (HunyuanVideoTransformer3DModel), SimpleTuner's hunyuanvideo at flavour 1.0 (its row is
 * hunyuanvideo15's): dual/hunyuan_video.c's steps. */
#include <math.h>
#include <stdio.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/dual/mmdit.h"

static const family_preset presets[] = {
    {"hunyuanvideo-tiny", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 16, true, true, 0, 0},
    {"hunyuanvideo-1.0", 20, 3072, 24, 2, 16, 60, 10, 40, 256, 4096, 768, true, true, 0, 0},
};

static void hunyuanvideo_preset(model_config *mc, const char *name, bool tiny)
{
    mc->refiner_depth = 2, mc->frames = tiny ? 2 : 1; /* the tiny one's latents have 2 frames, a video's smallest */
}

/* HunyuanVideoTransformer3DModel's config: its defaults (HunyuanVideo 1.0's), then the file's values; mlp_ratio,
 * rope_theta, qk_norm and image_condition_type other than the text-to-video model's are refused by name. */
static st_status hunyuanvideo_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t out = 16;
    mc->channels = 16, mc->depth = 20, mc->single_depth = 40, mc->patch = 2, mc->text_dim = 4096, mc->pooled_dim = 768;
    const json_key keys[] = {{"in_channels", &mc->channels}, {"out_channels", &out},
                             {"num_single_layers", &mc->single_depth}, {"pooled_projection_dim", &mc->pooled_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = hunyuan_keys(j, file, mc, 24, "HunyuanVideo");
    if (st) return st;
    const cJSON *ic = cJSON_GetObjectItemCaseSensitive(j, "image_condition_type");
    if (ic && !cJSON_IsNull(ic))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: image_condition_type is set (an image-to-video model's: latent_concat or "
                       "token_replace); segtrain builds the text-to-video model, where it is null", file);
    if (out && out != mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld; segtrain reads HunyuanVideo's with out_channels = "
                       "in_channels (%lld)", file, (long long)out, (long long)mc->channels);
    mc->guidance_embeds = true; /* the class's default */
    return json_bool(j, file, "guidance_embeds", &mc->guidance_embeds);
}

const family_desc hunyuanvideo_desc = {
    .name = "hunyuanvideo", .topology = TOPO_DUAL,
    .traits = TR_TEXT | TR_TEXT_MASK | TR_VIDEO | TR_POOLED,
    .ops = &hunyuan_video_family, FAMILY_PRESETS(presets), .preset = hunyuanvideo_preset,
    .readers = {{"HunyuanVideoTransformer3DModel", hunyuanvideo_from_json}}, .fields = F_SINGLE | F_REFINER, .axes = 3,
};
