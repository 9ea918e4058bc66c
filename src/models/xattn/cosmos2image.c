/* Cosmos-Predict2 text-to-image (CosmosTransformer3DModel): xattn/cosmos.c's steps, trained on EDM's sigmas. */
#include <math.h>
#include <stdio.h>
#include <string.h>

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

/* CosmosTransformer3DModel's config as Cosmos-Predict2's text-to-image models set it: its defaults, then the file's
 * values; what segtrain does not build (learnable positions, image context, controlnet, the cross-attention
 * projection, no padding-mask channel, other rope_scale, a temporal patch) is refused by name. */
st_status cosmos_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t hd = 128, heads = 32, out = 16, patch[3] = {1, 2, 2}, scale[3] = {0};
    double ratio = 4.0;
    mc->channels = 16, mc->depth = 28, mc->text_dim = 1024, mc->adaln_lora = 256;
    const json_key keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd},
                             {"in_channels", &mc->channels}, {"out_channels", &out}, {"num_layers", &mc->depth},
                             {"text_embed_dim", &mc->text_dim}, {"adaln_lora_dim", &mc->adaln_lora}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "patch_size", 3, patch);
    if (st) return st;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "mlp_ratio");
    if (r && cJSON_IsNumber(r)) ratio = r->valuedouble;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scale");
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_IsArray(rs) ? cJSON_GetArrayItem(rs, i) : NULL;
        scale[i] = x && cJSON_IsNumber(x) ? (int64_t)(x->valuedouble * 4.0) : -1;
    }
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(j, "concat_padding_mask");
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(j, "extra_pos_embed_type");
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(j, "use_crossattn_projection");
    const cJSON *ic = cJSON_GetObjectItemCaseSensitive(j, "img_context_dim_in");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(j, "controlnet_block_every_n");
    if ((pm && !cJSON_IsTrue(pm)) || !ep || !cJSON_IsNull(ep) || cJSON_IsTrue(cp) || (ic && !cJSON_IsNull(ic)) ||
        (cn && !cJSON_IsNull(cn)))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: concat_padding_mask, extra_pos_embed_type, use_crossattn_projection, "
                       "img_context_dim_in or controlnet_block_every_n; segtrain builds Cosmos-Predict2's text-to-image "
                       "transformer (true, null, false, null, null)", file);
    if (patch[0] != 1 || patch[1] != patch[2] || scale[0] != 4 || scale[1] != 16 || scale[2] != 16 ||
        out != mc->channels || ratio * (double)(hd * heads) != floor(ratio * (double)(hd * heads)))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size, rope_scale, out_channels or mlp_ratio; segtrain builds "
                       "Cosmos 2's patch (1, p, p), rope_scale (1, 4, 4), out_channels = in_channels (%lld) and a whole "
                       "feed-forward width", file, (long long)mc->channels);
    mc->patch = patch[1], mc->patch_t = 1, mc->heads = heads, mc->hidden = hd * heads, mc->single_depth = 0;
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    mc->ffn_dim = (int64_t)(ratio * (double)mc->hidden) == 4 * mc->hidden ? 0 : (int64_t)(ratio * (double)mc->hidden);
    return ST_OK;
}

const family_desc cosmos2image_desc = {
    .name = "cosmos2image", .topology = TOPO_XATTN, .traits = TR_TEXT | TR_EDM | TR_UNPOOLED,
    .st = {{.name = "cosmos2image", .alias = "cosmos", .title = "Cosmos 2 (T2I)",
            .diffusers = "CosmosTransformer3DModel", .flavours = "2b|14b", .built = "2b:cosmos2-2b|14b:cosmos2-14b",
            .fallback = "2b", .example = "cosmos2image.lycoris-lokr.json", .tiny = "cosmos2-tiny"}},
    .ops = &cosmos_family, FAMILY_PRESETS(presets), .preset = cosmos2image_preset,
    .readers = {{"CosmosTransformer3DModel", cosmos_from_json}}, .fields = F_FFN | F_ADALN, .check = cosmos_check,
    .swap_blocks = {"transformer_blocks"},
    .lycoris_classes = lyco_basic_block_classes,
};
