/* Cosmos-Predict2 text-to-image (CosmosTransformer3DModel): xattn/cosmos.c's steps, trained on EDM's sigmas. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/xattn/cosmos.h"

/* Cosmos's AdaLN-LoRA transformer (cosmos2image's and anima's) */
st_status cosmos_check(const model_config *mc)
{
    if (mc->adaln_lora < 1 || mc->adaln_lora > (1 << 16) || mc->patch_t != 1 || mc->hidden / mc->heads < 8 ||
        mc->hidden / mc->heads > 128 || mc->out_channels)
        return family_refuse(mc, GROUP_ADALN, "cosmos2image takes 1 to 65536, 1, 8 to 128 and 0 (= in_channels)");
    return ST_OK;
}

static const family_preset presets[] = {
    /* Cosmos-Predict2-2B- and -14B-Text2Image's (nvidia/Cosmos-Predict2-*-Text2Image): 28 blocks of 16 heads and 36
     * of 40 (x 128), AdaLN-LoRA 256 wide, T5-11B's 1024 at 512 tokens, 16 latent channels in (1, 2, 2) patches; the
     * tiny one is the fixture's shape. */
    {"cosmos2-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"cosmos2-2b", 28, 2048, 16, 2, 16, 128, 10, 0, 512, 1024, 0, false, false, 0, 0},
    {"cosmos2-14b", 36, 5120, 40, 2, 16, 128, 10, 0, 512, 1024, 0, false, false, 0, 0},
};

static void cosmos2image_preset(model_config *mc, const char *name, bool tiny)
{
    mc->adaln_lora = tiny ? 16 : 256;
}

const family_desc cosmos2image_desc = {
    .name = "cosmos2image",
    .topology = TOPO_XATTN,
    .st = {{.name = "cosmos2image",
            .alias = "cosmos",
            .title = "Cosmos 2 (T2I)",
            .diffusers = "CosmosTransformer3DModel",
            .flavours = "2b|14b",
            .built = "2b:cosmos2-2b|14b:cosmos2-14b",
            .fallback = "2b"}},
    .text = true,
    .edm = true,
    .ops = &cosmos_family,
    FAMILY_PRESETS(presets),
    .preset = cosmos2image_preset,
    .readers = {{"CosmosTransformer3DModel", cosmos_from_json}},
    .fields = F_FFN | F_ADALN,
    .unpooled = true,
    .check = cosmos_check,
};
