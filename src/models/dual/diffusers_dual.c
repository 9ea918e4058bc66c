/* What the dual-stream families' diffusers config.json readers share: FluxTransformer2DModel's keys, which Flux's,
 * Chroma's and LongCat-Image's readers (each in its family's file) read, and what both HunyuanVideos' fix. */
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/internal.h"
#include "models/dual/mmdit.h"

/* FluxTransformer2DModel's config: its defaults (text_dim: joint_attention_dim's), then the file's values. */
st_status flux_keys(const cJSON *j, const char *file, model_config *mc, int64_t text_dim)
{
    int64_t in = 64, out = 0, patch = 1, hd = 128, heads = 24, axes[3] = {16, 56, 56};
    mc->depth = 19, mc->single_depth = 38, mc->text_dim = text_dim, mc->pooled_dim = 768;
    bool guidance = false;
    const json_key keys[] = {{"in_channels", &in}, {"out_channels", &out}, {"patch_size", &patch},
                             {"num_layers", &mc->depth}, {"num_single_layers", &mc->single_depth},
                             {"attention_head_dim", &hd}, {"num_attention_heads", &heads},
                             {"joint_attention_dim", &mc->text_dim}, {"pooled_projection_dim", &mc->pooled_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_bool(j, file, "guidance_embeds", &guidance);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, axes);
    if (st) return st;
    /* the pipeline packs 2x2 latent patches into in_channels: segtrain patchifies the latent itself */
    if (patch != 1 || in % 4 || (out && out != in))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size %lld, in_channels %lld, out_channels %lld; segtrain reads "
                       "Flux's packing (patch_size 1, in_channels 4 C, out_channels as in_channels)", file,
                       (long long)patch, (long long)in, (long long)out);
    mc->channels = in / 4, mc->patch = 2;
    mc->heads = heads, mc->hidden = hd * heads;
    mc->guidance_embeds = guidance;
    set_rope_axes(mc, axes, 3);
    return ST_OK;
}

st_status hunyuan_keys(const cJSON *j, const char *file, model_config *mc, int64_t heads, const char *what)
{
    int64_t hd = 128, axes[3] = {16, 56, 56};
    mc->refiner_depth = 2, mc->patch_t = 1;
    const json_key keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd}, {"num_layers", &mc->depth},
                             {"num_refiner_layers", &mc->refiner_depth}, {"patch_size", &mc->patch},
                             {"patch_size_t", &mc->patch_t}, {"text_embed_dim", &mc->text_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "rope_axes_dim", 3, axes);
    if (!st) st = json_fixed(j, file, "mlp_ratio", 4.0, what);
    if (!st) st = json_fixed(j, file, "rope_theta", 256.0, what);
    if (st) return st;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "qk_norm");
    if (q && !(cJSON_IsString(q) && !strcmp(q->valuestring, "rms_norm")))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: qk_norm is not \"rms_norm\" (%s's)", file, what);
    mc->heads = heads, mc->hidden = hd * heads;
    set_rope_axes(mc, axes, 3);
    return ST_OK;
}
