/* Kwai Kolors (UNet2DConditionModel, SDXL's with a text projection): unet/unet.c's micro-blocks. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/unet/unet.h"

static const family_preset presets[] = {
    /* Kolors (Kwai-Kolors/Kolors-diffusers' unet/config.json): SDXL's U-Net reading ChatGLM3's 4096-wide states at
     * SimpleTuner's 77 tokens through encoder_hid_proj (to 2048), its pooled 4096 and the six size ids. */
    {"kolors-tiny", 0, 32, 1, 1, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"kolors", 0, 1280, 1, 1, 4, 128, 10, 0, 77, 4096, 4096, false, false, 0, 0},
};

const family_desc kolors_desc = {
    .name = "kolors", .topology = TOPO_UNET,
    .st = {{.name = "kolors", .title = "Kwai Kolors", .diffusers = "UNet2DConditionModel", .flavours = "1.0",
            .built = "1.0:kolors", .fallback = "1.0", .example = "kolors.peft-lora.json", .tiny = "kolors-tiny"}},
    UNET_TRAITS, .topology_options = &(const unet_options){.added = true, .text_proj = true}, FAMILY_PRESETS(presets),
    .preset = unet_preset, .readers = {{"UNet2DConditionModel", unet_from_json}},
};
