/* LongCat-Video (SimpleTuner's longcat_video, its own LongCatVideoTransformer3DModel; no diffusers class), as
 * SimpleTuner's LongCatVideo._model_predict_single calls it for text to video (docs/FAMILIES.md):
 *
 * - Input: the latent's (1, p, p) patches, features (c, pt, ph, pw) as x_embedder.proj (a Conv3d) reads them; tokens
 *   (frame, row, column).
 * - Time: segtrain's 1000 sigma, a sinusoid of time_channels (frequency_embedding_size; cosines first, period
 *   10000), t_embedder.mlp.0, SiLU, mlp.2 (time_dim = adaln_tembed_dim wide): t; the blocks and the final layer read
 *   SiLU(t). The class expands a sample's timestep over its latent frames, so every frame's rows are the sample's.
 * - Text: y_embedder's Linear, GELU (tanh), Linear on the caption states, then (text_tokens_zero_pad) each padding
 *   token's row times its mask, zero, and every row attended: the class makes the mask all ones after zeroing.
 * - Blocks (gated_block.c with LongCat's options): x1 = x + gate1 attn(LN(x) (1 + scale1) + shift1) with q, k, v one
 *   GEMM (attn.qkv), q and k RMSNorm-ed per head (eps 1e-6) and turned by the 3-D rotary table, interleaved pairs;
 *   x2 = x1 + cross_attn(affine LN(x1)) (pre_crs_attn_norm, neither modulated nor gated; kv_linear one GEMM, q and k
 *   RMSNorm-ed); h = LN(x2) (1 + scale2) + shift2; x3 = x2 + gate2 ffn.w2(silu(w1 h) w3 h), as LongCat-Video's own
 *   block has it (SimpleTuner's starts that residual from h: the fixture patches it, docs/FAMILIES.md).
 * - Rotary table per head: axes (frame, row, column) of widths (hd - 4 (hd / 6), 2 (hd / 6), 2 (hd / 6)), pair j of
 *   an axis of width d turning by pos 10000^(-2 j / d), in double.
 * - Out: final_layer's (shift, scale) = adaLN_modulation.1(SiLU(t)), LayerNorm (eps 1e-6, no affine), modulate,
 *   final_layer.linear; a token's outputs (pt, ph, pw, c) as unpatchify reads them. The prediction is the output
 *   negated: the model outputs latents - noise, which LongCat-Video's pipelines negate before the scheduler steps;
 *   SimpleTuner trains it as is against noise - latents (the fixture patches that: docs/FAMILIES.md).
 *
 * The attention is over the tokens: SimpleTuner's class as shipped hands (B, heads, tokens, head_dim) to diffusers'
 * dispatch_attention_fn, which takes (B, tokens, heads, head_dim), so it attends over the heads; the fixture patches
 * that call (its simpletuner_patches) and segtrain builds the attention LongCat-Video's own code runs. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/xattn/gated_block.h"

#include "models/core/attn_side.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LCV_EPS 1e-6f /* every LayerNorm and RMSNorm of the class */
#define LCV_PERIOD 10000.0

/* a block's weights in the state_dict's order: adaLN_modulation, pre_crs_attn_norm, attn, cross_attn, ffn */
static void lcv_block_register(param_set *s, gated_block *b, const char *prefix, const model_config *c)
{
    const int64_t D = c->hidden, hd = D / c->heads;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    b->mod = block_linear(s, prefix, "adaLN_modulation.1", c->time_dim, 6 * D, true, 0, c);
    b->cross_norm_w = block_norm(s, prefix, "pre_crs_attn_norm", D, c);
    char n[PARAM_NAME_MAX];
    snprintf(n, sizeof n, "%s.pre_crs_attn_norm.bias", prefix);
    b->cross_norm_b = param_add(s, n, 1, (int64_t[]){D}, !c->lora_rank);
    b->sa.q = block_linear(s, prefix, "attn.qkv", D, 3 * D, true, ra, c);
    b->sa.norm_q = block_norm(s, prefix, "attn.q_norm", hd, c);
    b->sa.norm_k = block_norm(s, prefix, "attn.k_norm", hd, c);
    b->sa.out = block_linear(s, prefix, "attn.proj", D, D, true, ra, c);
    b->ca.q = block_linear(s, prefix, "cross_attn.q_linear", D, D, true, ra, c);
    b->ca.k = block_linear(s, prefix, "cross_attn.kv_linear", D, 2 * D, true, ra, c);
    b->ca.out = block_linear(s, prefix, "cross_attn.proj", D, D, true, ra, c);
    b->ca.norm_q = block_norm(s, prefix, "cross_attn.q_norm", hd, c);
    b->ca.norm_k = block_norm(s, prefix, "cross_attn.k_norm", hd, c);
    b->ff0 = block_linear(s, prefix, "ffn.w1", D, b->ffn, false, rm, c);
    b->ff2 = block_linear(s, prefix, "ffn.w2", b->ffn, D, false, rm, c);
    b->ff1 = block_linear(s, prefix, "ffn.w3", D, b->ffn, false, rm, c);
}

typedef struct lcv_model {
    gated_block *blocks;
    int p_x, p_xb;
    temb t;                  /* t_embedder.mlp */
    lin_layer cap0, cap2, fmod; /* y_embedder.y_proj.0 and .2, final_layer.adaLN_modulation.1 */
    final_layer final;
    /* a step */
    float *patches, *text_in, *ch, *cg, *mask;
} lcv_model;

static lcv_model *lcv_of(model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

/* FeedForwardSwiGLU's width for mlp_ratio r: int(2 int(D r) / 3) rounded up to a multiple of 256 */
static int64_t swiglu_width(int64_t D, int64_t r) { return (2 * D * r / 3 + 255) / 256 * 256; }

static st_status lcv_create(model *m)
{
    const model_config *c = &m->cfg;
    const int64_t D = c->hidden, Td = c->time_dim;
    const bool full = !c->lora_rank;
    lcv_model *d = m->impl;
    param_set *s = &m->own_params;
    d->p_x = param_add(s, "x_embedder.proj.weight", 5, (int64_t[]){D, c->channels, c->patch_t, c->patch, c->patch},
                       full);
    d->p_xb = param_add(s, "x_embedder.proj.bias", 1, (int64_t[]){D}, full);
    temb_register(s, &d->t, "t_embedder.mlp.0", "t_embedder.mlp.2", c->time_channels, Td, full);
    d->cap0 = lin_register(s, "y_embedder.y_proj.0", c->text_dim, D, true, 0, 0, full);
    d->cap2 = lin_register(s, "y_embedder.y_proj.2", D, D, true, 0, 0, full);
    const int n = (int)c->depth;
    if (!(d->blocks = model_seq_blocks(m, 0, "blocks", n, &gated_block_kind, sizeof *d->blocks)))
        return st_host_oom("the LongCat-Video model");
    char prefix[64];
    for (int i = 0; i < n; i++) {
        gated_block *b = &d->blocks[i];
        *b = (gated_block){.m = m, .cross = true, .ln_eps = LCV_EPS, .qk_eps = LCV_EPS, .rope = &m->ctx.rope,
                           .ffn = c->ffn_dim, .modulate = gated_modulate_linear,
                           .modulate_back = gated_modulate_linear_back, .fused = true, .plain_cross = true,
                           .swiglu = true};
        snprintf(prefix, sizeof prefix, "blocks.%d", i);
        lcv_block_register(s, b, prefix, c);
    }
    d->final = (final_layer){.ada_w = -1, .ada_b = -1, .mod_row = 0, .order = PATCH_DIT,
                              .negate = true}; /* shift, then scale */
    final_register(s, &d->final, c, NULL, "final_layer.linear", true);
    d->fmod = lin_register(s, "final_layer.adaLN_modulation.1", Td, 2 * D, true, 0, 0, full);
    m->ctx.mod_rows = 2;
    return ST_OK;
}

static void lcv_release(model *m) { final_release(m, &lcv_of(m)->final); }

/* RotaryPositionalEmbedding's table for an F x G x G' grid, (T, hd / 2, (cos, sin)) */
static st_status lcv_rope_table(model *m, const float *cond, float *work) /* a model_host_loop's */
{
    const model_config *c = &m->cfg;
    const int64_t F = c->frames / c->patch_t, gh = grid_rows(c), gw = grid_cols(c);
    const int64_t hd = c->hidden / c->heads, dh = 2 * (hd / 6), dims[3] = {hd - 2 * dh, dh, dh}, pairs = hd / 2;
    float *table = m->ctx.rope;
    for (int64_t t = 0; t < F * gh * gw; t++) {
        const int64_t pos[3] = {t / (gh * gw), t / gw % gh, t % gw};
        float *e = table + t * pairs * 2;
        for (int a = 0; a < 3; a++)
            for (int64_t j = 0; j < dims[a] / 2; j++, e += 2) {
                const double ang = (double)pos[a] / pow(LCV_PERIOD, (double)(2 * j) / (double)dims[a]);
                e[0] = (float)cos(ang);
                e[1] = (float)sin(ang);
            }
    }
    return ST_OK;
}

/* y_embedder on the caption states, then each row times its token's mask (text_tokens_zero_pad) */
static st_status caption_forward(model *m, const float *cond)
{
    lcv_model *d = lcv_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, D = c->hidden, E = c->text_dim, K = model_cond_len(c);
    copy_rows(d->text_in, L * E, cond, K, B, L * E);
    copy_rows(d->mask, L, cond + L * E, K, B, L);
    st_status st = lin_forward(m->params, m->pool, &d->cap0, d->ch, d->text_in, B * L);
    if (st) return st;
    gelu_forward(d->cg, d->ch, B * L * D);
    if ((st = lin_forward(m->params, m->pool, &d->cap2, m->ctx.text, d->cg, B * L))) return st;
    row_scale_forward(m->ctx.text, m->ctx.text, d->mask, B * L, D);
    return ST_OK;
}

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                               float **x0)
{
    const model_config *c = &m->cfg;
    lcv_model *d = lcv_of(m);
    const int64_t B = m->shape.batch, N = B * m->shape.tokens, P = model_patch_dim(c), D = c->hidden;
    const int64_t L = m->shape.text, Td = c->time_dim;
    st_status st = ST_OK;
    model_hold(m, &st, &d->patches, N * P, "longcat.patches", true);
    *x0 = model_take(m, &st, N * D, "longcat.state", false);
    temb_take_wide(m, &d->t, &st, train, Td);
    model_hold(m, &st, &d->text_in, B * L * c->text_dim, "longcat.caption", false);
    model_hold(m, &st, &d->mask, B * L, "longcat.caption_mask", false);
    model_hold(m, &st, &d->ch, B * L * D, "longcat.y_proj0", false);
    model_hold(m, &st, &d->cg, B * L * D, "longcat.y_proj_gelu", false);
    model_hold(m, &st, &m->ctx.text, B * L * D, "longcat.text", false);
    model_hold(m, &st, &m->ctx.mod, B * 2 * D, "longcat.final_modulation", false);
    model_hold(m, &st, &m->ctx.rope, m->shape.tokens * (D / c->heads), "longcat.rope", false);
    if (train) {
        model_hold(m, &st, &m->ctx.dtext, B * L * D, "longcat.dtext", true);
        model_hold(m, &st, &m->ctx.dmod, B * 2 * D, "longcat.dfinal_modulation", true);
    }
    if (st) return st;
    const patch_shape ps = model_patches(m);
    patchify_forward(d->patches, x, &ps);
    linear_forward(*x0, d->patches, PW(d->p_x), PW(d->p_xb), N, P, D);
    if ((st = model_host_loop(m, m->ctx.rope, lcv_rope_table, NULL, 0, NULL))) return st;
    if ((st = temb_forward(m, &d->t, timesteps))) return st;
    silu_forward(m->ctx.cs, d->t.c, B * Td);
    if ((st = caption_forward(m, cond))) return st;
    return lin_forward(m->params, m->pool, &d->fmod, m->ctx.mod, m->ctx.cs, B);
}

static final_layer *lcv_final(model *m) { return &lcv_of(m)->final; }

/* From dL/dx0: the patch embedding's weights, the caption path's (from m->ctx.dtext), the final modulation's and the
 * time path's (m->ctx.dcs) */
static st_status lcv_embed_backward(model *m, scratch *k, block_state *grad)
{
    lcv_model *d = lcv_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, Td = c->time_dim;
    float *dcg = scratch_take_zero(k, B * L * D, MEM_WORKSPACE, "longcat.dy_proj_gelu");
    float *dch = scratch_take_zero(k, B * L * D, MEM_WORKSPACE, "longcat.dy_proj0");
    float *dt = scratch_take_zero(k, B * Td, MEM_WORKSPACE, "longcat.dt");
    st_status st = k->status;
    if (!st) {
        linear_backward(NULL, PG(d->p_x), PG(d->p_xb), grad->t[0], d->patches, PW(d->p_x), B * T,
                        model_patch_dim(c), D);
        row_scale_forward(m->ctx.dtext, m->ctx.dtext, d->mask, B * L, D);
        st = lin_backward(m->params, m->pool, &d->cap2, dcg, m->ctx.dtext, d->cg, B * L);
    }
    if (!st) {
        gelu_backward(dch, dcg, d->ch, B * L * D);
        st = lin_backward(m->params, m->pool, &d->cap0, NULL, dch, d->text_in, B * L);
    }
    if (!st) st = lin_backward(m->params, m->pool, &d->fmod, m->ctx.dcs, m->ctx.dmod, m->ctx.cs, B);
    if (!st) st = temb_silu_backward(m, &d->t, dt, m->ctx.dcs);
    return st;
}

static const model_chain lcv_chain = {.embed = embed_forward, .embed_backward = lcv_embed_backward,
                                      .final = lcv_final, .dx_name = "longcat.dstate"};

/* segtrain's own init in DiT's spirit: the modulations and the output projection zero, norms at 1 with zero biases,
 * xavier elsewhere */
static const init_rule lcv_inits[] = {
    {INIT_ZERO, "adaLN_modulation|^final_layer.linear|norm.bias"}, {INIT_ONE, "_norm"}, {INIT_NORMAL, "t_embedder"},
    {0}};

static const model_family lcv_family = {
    .create = lcv_create, .impl_size = sizeof(lcv_model), .release = lcv_release, .chain = &lcv_chain,
    .inits = lcv_inits,
};

/* ---- the family's descriptor (family.h) ---- */

/* LongCat-Video's (meituan-longcat/LongCat-Video, the class defaults): 48 blocks of 32 heads x 128, adaLN 512,
 * sinusoid 256, SwiGLU 11008, caption 4096 at SimpleTuner's 512 tokens, the Wan VAE's 16 channels at 480 px (60 x
 * 60 latents); the tiny one is the fixture's. */
static const family_preset presets[] = {
    {"longcat-video-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"longcat-video", 48, 4096, 32, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
};

static void longcat_video_preset(model_config *mc, const char *name, bool tiny)
{
    (void)name;
    mc->time_dim = tiny ? 16 : 512, mc->time_channels = tiny ? 32 : 256, mc->frames = tiny ? 2 : 1;
    mc->ffn_dim = swiglu_width(mc->hidden, 4);
}

static st_status longcat_video_check(const model_config *mc)
{
    const int64_t hd = mc->hidden / mc->heads;
    if (mc->time_dim < 1 || mc->time_dim > (1 << 16) || mc->time_channels < 2 || mc->time_channels % 2 ||
        mc->time_channels > 65536 || mc->patch_t != 1 || hd % 8 || hd > 256 || mc->ffn_dim < 1 || mc->out_channels)
        return st_fail(ST_ERR_INVALID, "adaln_tembed_dim %lld, frequency_embedding_size %lld, patch_size_t %lld, head "
                       "width %lld, SwiGLU width %lld, out_channels %lld; longcat_video takes 1 to 65536, an even 2 to "
                       "65536, 1, a multiple of 8 up to 256 (3-D rotary axes), at least 1 and 0 (= in_channels)",
                       (long long)mc->time_dim, (long long)mc->time_channels, (long long)mc->patch_t, (long long)hd,
                       (long long)mc->ffn_dim, (long long)mc->out_channels);
    return ST_OK;
}

/* What the class would do otherwise than segtrain's build, refused by name: the block-sparse attention, the unpadded
 * (packed, masked) caption, context parallelism, TwinFlow's and FlowMap's time conditioning */
static st_status longcat_video_refusals(const cJSON *j, const char *file)
{
    bool zero_pad = false;
    st_status st = json_bool(j, file, "text_tokens_zero_pad", &zero_pad);
    if (!st && !zero_pad)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: text_tokens_zero_pad false; segtrain builds LongCat-Video's published "
                       "text_tokens_zero_pad true (padding rows zeroed and attended), not its packed captions", file);
    if (!st) st = json_fixed_bool(j, file, "enable_bsa", false, "LongCat-Video's dense attention (its published "
                                  "enable_bsa false); the block-sparse attention is not built into the family");
    if (!st) st = json_fixed_bool(j, file, "enable_time_sign_embed", false, "no TwinFlow time sign");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "deltatime_type");
    if (!st && dt && !cJSON_IsNull(dt))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: deltatime_type; segtrain builds LongCat-Video without FlowMap's delta "
                       "time (null)", file);
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(j, "cp_split_hw");
    if (!st && cp && !cJSON_IsNull(cp) &&
        !(cJSON_GetArraySize(cp) == 2 && cJSON_GetArrayItem(cp, 0)->valuedouble == 1 &&
          cJSON_GetArrayItem(cp, 1)->valuedouble == 1))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: cp_split_hw; segtrain builds LongCat-Video without context "
                       "parallelism (null or [1, 1])", file);
    return st;
}

/* LongCatVideoTransformer3DModel's config: its defaults, then the file's values */
static st_status longcat_video_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t out = 16, heads = 32, ratio = 4, patch[3] = {1, 2, 2};
    mc->channels = 16, mc->hidden = 4096, mc->depth = 48, mc->text_dim = 4096, mc->time_dim = 512;
    mc->time_channels = 256;
    const json_key keys[] = {{"in_channels", &mc->channels}, {"out_channels", &out}, {"hidden_size", &mc->hidden},
                             {"depth", &mc->depth}, {"num_heads", &heads}, {"caption_channels", &mc->text_dim},
                             {"mlp_ratio", &ratio}, {"adaln_tembed_dim", &mc->time_dim},
                             {"frequency_embedding_size", &mc->time_channels}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "patch_size", 3, patch);
    if (!st) st = longcat_video_refusals(j, file);
    if (st) return st;
    if (patch[0] != 1 || patch[1] != patch[2] || out != mc->channels || heads < 1 || ratio < 1 || ratio > 64)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size, out_channels, num_heads or mlp_ratio; segtrain builds "
                       "LongCat-Video's patch (1, p, p), out_channels = in_channels (%lld), at least 1 head and an "
                       "mlp_ratio of 1 to 64", file, (long long)mc->channels);
    mc->patch = patch[1], mc->patch_t = 1, mc->heads = heads, mc->single_depth = 0, mc->pooled_dim = 0;
    mc->guidance_embeds = false, mc->ffn_dim = swiglu_width(mc->hidden, ratio);
    return ST_OK;
}

const family_desc longcat_video_desc = {
    .name = "longcat_video", .topology = TOPO_XATTN,
    .traits = TR_TEXT | TR_TEXT_MASK | TR_VIDEO | TR_FRAMES_8K1 | TR_UNPOOLED,
    .st = {{.name = "longcat_video", .title = "LongCat-Video", .diffusers = "LongCatVideoTransformer3DModel",
            .flavours = "final", .built = "final:longcat-video", .fallback = "final",
            .example = "longcat-video.peft-lora+ramtorch.json", .tiny = "longcat-video-tiny", .shape = "832x480@81"}},
    .ops = &lcv_family, FAMILY_PRESETS(presets), .preset = longcat_video_preset,
    .readers = {{"LongCatVideoTransformer3DModel", longcat_video_from_json}},
    .fields = F_FFN | F_TIME_DIM, .check = longcat_video_check, .quanto_exclude = quanto_exclude_video,
    .swap_blocks = {"blocks"},
};
