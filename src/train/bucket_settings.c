/* The run's aspect-bucket settings from its config and model (train.h: train_bucket_settings). */
#include <string.h>

#include "segtrain/train.h"

st_status train_bucket_settings(const config *cfg, const model_config *mc, bucket_config *out)
{
    bucket_config_default(out);
    const int64_t multiple = mc->vae_scale * mc->patch, alignment = config_int(cfg, "aspect_bucket_alignment");
    if (alignment % multiple)
        return st_fail(ST_ERR_INVALID, "aspect_bucket_alignment %lld is not a multiple of %lld (vae_scale_factor %lld "
                       "times the patch %lld): a bucket of it would not be a latent the model takes", (long long)alignment,
                       (long long)multiple, (long long)mc->vae_scale, (long long)mc->patch);
    static const char *const types[] = {"pixel", "area", "pixel_area"}; /* bucket_resolution_type's order */
    out->resolution = config_float(cfg, "resolution");
    out->resolution_type = BUCKET_PIXEL;
    for (int t = 0; out->resolution > 0 && t < 3; t++)
        if (!strcmp(config_string(cfg, "resolution_type"), types[t])) out->resolution_type = (bucket_resolution_type)t;
    if (!(out->resolution > 0)) out->resolution = (double)(mc->height * mc->vae_scale); /* the preset's edge */
    out->alignment = (int)alignment;
    out->rounding = (int)config_int(cfg, "aspect_bucket_rounding");
    /* HiDream's MAXIMUM_CANVAS_SIZE: the image its max_tokens patches cover */
    out->max_canvas = mc->max_tokens * mc->patch * mc->patch * mc->vae_scale * mc->vae_scale;
    out->frames_8k1 = model_frames_8k1(mc);
    return ST_OK;
}
