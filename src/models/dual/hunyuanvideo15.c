/* HunyuanVideo 1.5 (HunyuanVideo15Transformer3DModel), SimpleTuner's hunyuanvideo: dual/hunyuan_video.c's steps. */
#include <math.h>
#include <stdio.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/dual/mmdit.h"

/* SimpleTuner's hunyuanvideo is HunyuanVideo 1.5; "1.0" is segtrain's name for the first model (hunyuanvideo) */
static const family_preset presets[] = {
    {"hunyuanvideo15-tiny", 2, 64, 4, 1, 4, 8, 10, 0, 8, 32, 0, false, true, 0, 0},
    {"hunyuanvideo15-480p", 54, 2048, 16, 1, 32, 30, 10, 0, 1000, 3584, 0, false, true, 0, 0},
    {"hunyuanvideo15-720p", 54, 2048, 16, 1, 32, 45, 10, 0, 1000, 3584, 0, false, true, 0, 0},
};

static void hunyuanvideo15_preset(model_config *mc, const char *name, bool tiny)
{
    mc->refiner_depth = 2, mc->frames = tiny ? 2 : 1; /* the tiny one's latents have 2 frames, a video's smallest */
    /* ByT5's 1472-wide glyph tokens (256 of them), SigLIP's 1152, the i2v condition's 32 + 1 channels; a 16x VAE */
    mc->text2_len = tiny ? 4 : 256, mc->text2_dim = tiny ? 12 : 1472, mc->image_dim = tiny ? 8 : 1152;
    mc->cond_channels = mc->channels + 1, mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
}

static st_status hunyuanvideo15_check(const model_config *mc)
{
    if (mc->text2_len < 1 || mc->text2_dim < 1 || mc->image_dim < 1 || mc->cond_channels < 0)
        return family_refuse(mc, GROUP_TEXT2, "hunyuanvideo15 takes at least 1 of the first three");
    return ST_OK;
}

/* HunyuanVideo15Transformer3DModel's: its defaults (the 480p and 720p models'), then the file's values; in_channels
 * is the latent's and the image-to-video condition's (latents and mask), out_channels the latent's. use_meanflow
 * (the super-resolution models' second timestep) and sizes other than every published config's are refused by name.
 * task_type is not read: the model is the same, and segtrain trains it text-to-video. */
static st_status hunyuanvideo15_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t in = 65;
    mc->channels = 32, mc->depth = 54, mc->single_depth = 0, mc->patch = 1, mc->text_dim = 3584, mc->text2_dim = 1472;
    mc->image_dim = 1152, mc->pooled_dim = 0, mc->guidance_embeds = false;
    const json_key keys[] = {{"in_channels", &in}, {"out_channels", &mc->channels}, {"text_embed_2_dim", &mc->text2_dim},
                             {"image_embed_dim", &mc->image_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = hunyuan_keys(j, file, mc, 16, "HunyuanVideo 1.5");
    if (st) return st;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_meanflow")))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: use_meanflow is true (a super-resolution model's second timestep); "
                       "segtrain builds the text-to-video model, where it is false", file);
    if (in < mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: in_channels %lld below out_channels %lld; segtrain reads HunyuanVideo "
                       "1.5's (the latent's channels, then the condition's)", file, (long long)in,
                       (long long)mc->channels);
    mc->cond_channels = in - mc->channels;
    return ST_OK;
}

const family_desc hunyuanvideo15_desc = {
    .name = "hunyuanvideo15", .topology = TOPO_DUAL,
    .traits = TR_TEXT | TR_TEXT_MASK | TR_VIDEO | TR_UNPOOLED,
    .st = {{.name = "hunyuanvideo", .title = "HunyuanVideo", .diffusers = "HunyuanVideo15Transformer3DModel",
            .flavours = "t2v-480p|t2v-720p|t2v-480p-distilled|i2v-480p|i2v-720p|i2v-480p-distilled|i2v-720p-distilled|1.0",
            .built = "t2v-480p:hunyuanvideo15-480p|t2v-720p:hunyuanvideo15-720p|t2v-480p-distilled:hunyuanvideo15-480p|"
                     "1.0:hunyuanvideo-1.0",
            .fallback = "t2v-480p",
            .why = "the i2v flavours also take the first frame's latents (the condition channels) and its SigLIP "
                   "image tokens; segtrain's conditioning carries no reference image",
            .example = "hunyuanvideo-1.5-t2v.peft-lora.json", .tiny = "hunyuanvideo15-tiny"}},
    .uncached = "ByT5's glyph tokens and their mask", .ops = &hunyuan_video_family,
    .topology_options = &(const hunyuan_video_options){.v15 = true}, FAMILY_PRESETS(presets),
    .preset = hunyuanvideo15_preset, .readers = {{"HunyuanVideo15Transformer3DModel", hunyuanvideo15_from_json}},
    .fields = F_REFINER | F_TEXT2 | F_IMAGE_DIM | F_COND_CHANNELS, .axes = 3, .check = hunyuanvideo15_check,
    .swap_blocks = {"transformer_blocks"},
};
