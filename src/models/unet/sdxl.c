/* Stable Diffusion XL (UNet2DConditionModel, added conditions): unet/unet.c's micro-blocks. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/unet/unet.h"

static const family_preset presets[] = {
    /* Stable Diffusion XL base 1.0 (stabilityai/stable-diffusion-xl-base-1.0's unet/config.json): levels of 320, 640,
     * 1280 channels (the first without attention) with 2 and 10 transformer blocks, heads of 64, the two CLIPs'
     * 2048 at 77 tokens, the pooled 1280 and six size ids (addition_time_embed_dim 256), 1024 px (128 x 128). */
    {"sdxl-tiny", 0, 32, 1, 1, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"sdxl", 0, 1280, 1, 1, 4, 128, 10, 0, 77, 2048, 1280, false, false, 0, 0},
};

const family_desc sdxl_desc = {
    .name = "sdxl", .topology = TOPO_UNET,
    .st = {{.name = "sdxl", .title = "Stable Diffusion XL", .diffusers = "UNet2DConditionModel",
            .flavours = "base-1.0|refiner-1.0|base-0.9|refiner-0.9", .built = "base-1.0:sdxl|base-0.9:sdxl",
            .fallback = "base-1.0",
            .why = "the refiners read OpenCLIP-G's text alone and five size ids, one of them an aesthetic score; the base "
                   "flavours are built",
            .example = "sdxl.lycoris-lokr.json", .tiny = "sdxl-tiny"}},
    UNET_TRAITS, .topology_options = &(const unet_options){.added = true}, FAMILY_PRESETS(presets),
    .preset = unet_preset, .readers = {{"UNet2DConditionModel", unet_from_json}},
};
