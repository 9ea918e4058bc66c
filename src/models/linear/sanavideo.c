/* Sana-Video (SanaVideoTransformer3DModel): Sana over video tokens, Wan's rotary table in the linear attention and a
 * temporal convolution after GLUMBConv; its steps are xattn/xdit.c's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/linear/sana.h"

static const family_preset presets[] = {
    /* Sana-Video 2B (Efficient-Large-Model/SANA-Video_2B_480p_diffusers, as diffusers' conversion script makes it):
     * 20 blocks of 20 heads x 112, the cross-attention the same, Gemma 2's 2304 at 300 tokens, mlp_ratio 3, q/k
     * RMSNorms; Wan's VAE (16 channels, 8x, 4 frames a latent one), (1, 2, 2) patches */
    {"sanavideo-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, true, 0, 0},
    {"sanavideo-2b-480p", 20, 2240, 20, 2, 16, 60, 10, 0, 300, 2304, 0, false, true, 0, 0},
};

static void sanavideo_preset(model_config *mc, const char *name, bool tiny)
{
    /* GLUMBTempConv's int(3 D); the tiny one's 3 frames take every tap */
    mc->cross_heads = mc->heads, mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 8, mc->frames = tiny ? 3 : 1,
    mc->ffn_dim = 3 * mc->hidden;
}

static st_status sanavideo_check(const model_config *mc)
{
    if (mc->cross_heads < 1 || mc->hidden % mc->cross_heads || mc->ffn_dim < 1 || mc->out_channels ||
        mc->pooled_dim)
        return family_refuse(mc, GROUP_CROSS_HEADS, "sana and sanavideo take cross-attention heads dividing "
                             "hidden_size, a feed-forward of at least 1, out_channels 0 (= in_channels), and sana "
                             "images (1 frame)");
    return ST_OK;
}

static st_status sanavideo_from_json(const cJSON *j, const char *file, model_config *mc)
{
    return sana_read(j, file, mc, true);
}

const family_desc sanavideo_desc = {
    .name = "sanavideo", .topology = TOPO_LINEAR, .traits = TR_TEXT | TR_TEXT_MASK | TR_VIDEO | TR_FRAMES_8K1 | TR_UNPOOLED,
    .st = {{.name = "sanavideo", .title = "SanaVideo", .diffusers = "SanaVideoTransformer3DModel",
            .flavours = "2b-480p", .built = "2b-480p:sanavideo-2b-480p", .fallback = "2b-480p",
            .example = "sanavideo-2b-480p.peft-lora.json", .tiny = "sanavideo-tiny",
            .shape = "832x480@81"}}, /* its quickstart: 81 frames at 480p, through Wan's VAE */
    .ops = &xdit_family, .topology_options = &(const xdit_options){.sana = true, .sana_video = true},
    FAMILY_PRESETS(presets), .preset = sanavideo_preset,
    .readers = {{"SanaVideoTransformer3DModel", sanavideo_from_json}}, .fields = F_FFN | F_CROSS_HEADS,
    .check = sanavideo_check,
    .swap_blocks = {"transformer_blocks"},
};
