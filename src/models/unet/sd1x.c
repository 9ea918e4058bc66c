/* Stable Diffusion 1.x (UNet2DConditionModel): unet/unet.c's micro-blocks. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/unet/unet.h"

static const family_preset presets[] = {
    /* Stable Diffusion 1.x (stable-diffusion-v1-5's unet/config.json): levels of 320, 640, 1280, 1280 channels (the
     * last without attention), 2 ResnetBlock2Ds a down block, 8 heads, CLIP-L's 768 at 77 tokens, 512 px (64 x 64
     * latents); hidden_size is the time embedding's 1280. The rest in its preset hook below; the tiny one is the fixture's. */
    {"sd1x-tiny", 0, 32, 1, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"sd15", 0, 1280, 1, 1, 4, 64, 10, 0, 77, 768, 0, false, false, 0, 0},
};

const family_desc sd1x_desc = {
    .name = "sd1x", .topology = TOPO_UNET,
    .st = {{.name = "sd1x", .title = "Stable Diffusion 1.x", .diffusers = "UNet2DConditionModel",
            .flavours = "1.5|1.4|dreamshaper|realvis", .built = "1.5:sd15|1.4:sd15|dreamshaper:sd15",
            .fallback = "dreamshaper",
            .why = "realvis is RealVisXL (SG161222/RealVisXL_V5.0), an SDXL checkpoint: plan it with model_family sdxl",
            .example = "sd1x-dreamshaper.peft-lora.json", .tiny = "sd1x-tiny"}},
    UNET_TRAITS, FAMILY_PRESETS(presets), .preset = unet_preset, .readers = {{"UNet2DConditionModel", unet_from_json}},
};
