/* Z-Image (ZImageTransformer2DModel): Lumina-Image 2.0's relative, joint/lumina2.c's steps. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/joint/lumina2.h"

static const family_preset presets[] = {
    /* Z-Image (Tongyi-MAI/Z-Image-Turbo's transformer, Z-Image's the same shape): 30 joint blocks after 2 + 2
     * refiners, 30 heads x 128, Qwen3 4B's 2560-wide text at SimpleTuner's 512 tokens; the rest in its preset hook below. */
    {"z-image-tiny", 2, 48, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"z-image", 30, 3840, 30, 2, 16, 128, 10, 0, 512, 2560, 0, false, false, 0, 0},
};

static void z_image_preset(model_config *mc, const char *name, bool tiny)
{
    /* its FeedForward's int(D / 3 * 8); its n_kv_heads is not used */
    mc->refiner_depth = tiny ? 1 : 2, mc->kv_heads = mc->heads, mc->norm_eps = 1e-5,
    mc->ffn_dim = (int64_t)((double)mc->hidden / 3.0 * 8.0);
}

static st_status z_image_check(const model_config *mc) { return joint_check(mc, true); }

/* ZImageTransformer2DModel's config: its defaults (Z-Image's), then the file's values; Omni's SigLIP inputs, other
 * patch sizes, rotary bases and time scales are refused by name. n_kv_heads is read by nothing in the class (its
 * attention has n_heads keys and values), so it is not read here either. */
static st_status zimage_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t heads = 30, patch[1] = {2}, patch_t[1] = {1}, axes[3] = {32, 48, 48};
    mc->channels = 16, mc->depth = 30, mc->refiner_depth = 2, mc->hidden = 3840, mc->text_dim = 2560;
    mc->norm_eps = 1e-5;
    const json_key keys[] = {{"n_heads", &heads}, {"in_channels", &mc->channels}, {"dim", &mc->hidden},
                             {"n_layers", &mc->depth}, {"n_refiner_layers", &mc->refiner_depth},
                             {"cap_feat_dim", &mc->text_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_fixed(j, file, "rope_theta", 256.0, "Z-Image (every published config's)");
    if (!st) st = json_fixed(j, file, "t_scale", 1000.0, "Z-Image (every published config's)");
    if (!st) st = json_fixed_bool(j, file, "qk_norm", true, "Z-Image");
    if (!st) st = json_axes(j, file, "axes_dims", 3, axes);
    if (!st) st = json_axes(j, file, "all_patch_size", 1, patch);
    if (!st) st = json_axes(j, file, "all_f_patch_size", 1, patch_t);
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    if (st) return st;
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(j, "siglip_feat_dim");
    if (sig && !cJSON_IsNull(sig))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: siglip_feat_dim is set: Z-Image Omni's SigLIP image inputs "
                       "(model_family z_image_omni), which segtrain does not build", file);
    if (heads < 1 || patch_t[0] != 1)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: n_heads %lld, all_f_patch_size [%lld]; segtrain builds Z-Image with at "
                       "least 1 and [1]", file, (long long)heads, (long long)patch_t[0]);
    mc->patch = patch[0], mc->patch_t = 1, mc->heads = heads, mc->kv_heads = heads;
    mc->ffn_dim = (int64_t)((double)mc->hidden / 3.0 * 8.0); /* the class's int(dim / 3 * 8) */
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    set_rope_axes(mc, axes, 3);
    return ST_OK;
}

const family_desc z_image_desc = {
    .name = "z_image", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK,
    .st = {{.name = "z_image", .title = "Z-Image", .diffusers = "ZImageTransformer2DModel",
            .flavours = "base|turbo|turbo-ostris-v2|ostris-de-turbo", .built = "base:z-image",
            .fallback = "turbo-ostris-v2",
            .why = "the turbo flavours (turbo, turbo-ostris-v2, its default, and ostris-de-turbo) train LoRA through an "
                   "assistant adapter (ostris's de-distillation LoRA) loaded beside it, which segtrain does not load; "
                   "base, the same transformer shape, is built",
            .example = "z-image.peft-lora.json", .tiny = "z-image-tiny"}},
    .blocks_words = &lumina2_blocks, .ops = &lumina2_family,
    .topology_options = &(const lumina2_options){.zimage = true}, FAMILY_PRESETS(presets), .preset = z_image_preset,
    .rope_axes = family_rope_axes_wide, .readers = {{"ZImageTransformer2DModel", zimage_from_json}},
    .fields = F_FFN | F_NORM_EPS | F_KV_HEADS | F_REFINER, .check = z_image_check,
    .swap_blocks = {"layers"},
};
