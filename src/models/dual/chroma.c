/* Chroma 1 (ChromaTransformer2DModel): Flux's blocks (dual/mmdit.c) without their adaLN linears. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "models/dual/mmdit.h"

static const family_preset presets[] = {
    /* lodestones/Chroma1-HD's: Flux's blocks without their adaLN linears, T5-XXL's text padded to 512, no pooled
     * vector; its approximator (64 -> 5120, 5 layers) is set in its preset hook below */
    {"chroma-tiny", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 0, false, true, 0, 0},
    {"chroma", 19, 3072, 24, 2, 16, 128, 10, 38, 512, 4096, 0, false, true, 0, 0},
};

static void chroma_preset(model_config *mc, const char *name, bool tiny)
{
    /* the tiny one's approximator is the fixture's shape, with 2 layers */
    mc->approx_channels = tiny ? 32 : 64, mc->approx_hidden = tiny ? 32 : 5120, mc->approx_layers = tiny ? 2 : 5;
}

#define CHROMA_APPROX_LAYERS_MAX 16 /* residual layers of its distilled guidance (approximator_layers) */

static st_status chroma_check(const model_config *mc)
{
    if (mc->approx_channels < 8 || mc->approx_channels % 8 || mc->approx_channels > (1 << 16) ||
        mc->approx_hidden < 1 || mc->approx_hidden > (1 << 20) || mc->approx_layers < 0 ||
        mc->approx_layers > CHROMA_APPROX_LAYERS_MAX)
        return st_fail(ST_ERR_INVALID, "approximator_num_channels %lld, approximator_hidden_dim %lld, "
                       "approximator_layers %lld: chroma's take a multiple of 8 up to 65536, 1 to 2^20 and 0 to %d",
                       (long long)mc->approx_channels, (long long)mc->approx_hidden, (long long)mc->approx_layers,
                       CHROMA_APPROX_LAYERS_MAX);
    return ST_OK;
}

/* ChromaTransformer2DModel's: Flux's keys without the pooled vector and guidance (its modulation comes from the
 * distilled_guidance_layer), and the approximator's. */
static st_status chroma_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = flux_keys(j, file, mc, 4096);
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    mc->approx_channels = 64, mc->approx_hidden = 5120, mc->approx_layers = 5;
    if (!st) st = json_int(j, file, "approximator_num_channels", &mc->approx_channels);
    if (!st) st = json_int(j, file, "approximator_hidden_dim", &mc->approx_hidden);
    if (!st) st = json_int(j, file, "approximator_layers", &mc->approx_layers);
    return st;
}

const family_desc chroma_desc = {
    .name = "chroma", .topology = TOPO_DUAL, .traits = TR_TEXT | TR_TEXT_MASK | TR_UNPOOLED,
    .st = {{.name = "chroma", .title = "Chroma 1", .diffusers = "ChromaTransformer2DModel",
            .flavours = "base|hd|flash", .built = "base:chroma|hd:chroma|flash:chroma", .fallback = "base",
            .tiny = "chroma-tiny"}},
    .mask = MASK_PAD_ONE, .packed = 4, .ops = &mmdit_family,
    .topology_options = &(const mmdit_options){.approximator = true}, FAMILY_PRESETS(presets), .preset = chroma_preset,
    .readers = {{"ChromaTransformer2DModel", chroma_from_json}}, .fields = F_SINGLE, .axes = 3, .check = chroma_check,
    .swap_blocks = {"transformer_blocks", "single_transformer_blocks"},
};
