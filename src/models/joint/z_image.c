/* Z-Image (ZImageTransformer2DModel): Lumina-Image 2.0's relative, joint/lumina2.c's steps. */
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

const family_desc z_image_desc = {
    .name = "z_image",
    .topology = TOPO_JOINT,
    .st = {{.name = "z_image",
            .title = "Z-Image",
            .diffusers = "ZImageTransformer2DModel",
            .flavours = "base|turbo|turbo-ostris-v2|ostris-de-turbo",
            .built = "base:z-image",
            .fallback = "turbo-ostris-v2",
            .why = "the turbo flavours (turbo, turbo-ostris-v2, its default, and ostris-de-turbo) train LoRA through an "
                "assistant adapter (ostris's de-distillation LoRA) loaded beside it, which segtrain does not load; "
                "base, the same transformer shape, is built"}},
    .text = true,
    .text_mask = true,
    .describe_blocks = lumina2_blocks,
    .ops = &lumina2_family,
    .topology_options = &(const lumina2_options){.zimage = true},
    FAMILY_PRESETS(presets),
    .preset = z_image_preset,
    .rope_axes = family_rope_axes_wide,
    .readers = {{"ZImageTransformer2DModel", zimage_from_json}},
    .fields = F_FFN | F_NORM_EPS | F_KV_HEADS | F_REFINER,
    .check = z_image_check,
};
