/* Qwen-Image 2.1 (docs/FAMILIES.md): diffusers' QwenImage21Transformer2DModel, text to image. Its text and the
 * target image's tokens share one sequence of single-stream blocks under a block-causal mask. diffusers 0.42.1 has
 * the transformer but no 2.1 pipeline, and SimpleTuner's snapshot no 2.1 flavour: segtrain calls the class as
 * SimpleTuner calls Qwen-Image (its time t = sigma, the latents in Flux's 2 x 2 packing, the prediction the image
 * rows' output), with the class's own t2i layout: img_shapes [(1, H/2, W/2)], img_mask the target's slots (a 2 x 2
 * group of latent tokens each) after the text, causal_condition as the class defaults.
 *
 * - One block sequence, transformer_blocks, of flux3_block.c's block (sequential) on the rows per sample [the text's
 *   L; the image's T]. The mask: each text row sees the text rows up to it (causal), the image rows every row of the
 *   text and the image; the text's padding keys hidden.
 * - The modulation: modulation.1(SiLU(temb)) = (scale1, gate1, scale2, gate2), from the image's time for the image
 *   rows and from t = 0 for the text's (causal_condition); the gates through tanh, no shifts.
 * - time_text_embed: sinusoids of 1000 t, cosines first; its timestep_embedder (linear_1, SiLU, linear_2, no biases).
 * - txt_in: a zero-centred RMSNorm, in_layer, GELU (tanh), out_layer; img_in a linear; no biases anywhere.
 * - Rotary pairs (complex, interleaved) on three axes (16, 56, 56) at theta 10000: text token j at (j, j, j), an
 *   image token at (L, row, column) with rows and columns centred on zero (-(H - H/2) .. H/2 - 1).
 * - norm_out: LayerNorm (no affine) of the image rows times 1 + norm_out.linear(SiLU(temb)); proj_out. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/flux3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define Q21_EPS 1e-6f
#define Q21_THETA 10000.0
#define Q21_MLP_RATIO 3

typedef struct q21_model {
    f3_block *blocks;
    time_pair tp; /* timestep_embedder of 1000 t and of 0 */
    lin_layer mod, img;
    txt_in txt;
    joint_final fin;
    float *mod_rows, *dmod_rows, *rope, *kb, *seg; /* the blocks' modulation (B, 2, 6D) and its gradient; the mask */
    attn_mask mask;
    const attn_mask *maskp;
    /* a step */
    float *raw, *patches, *text_in;
} q21_model;

static q21_model *q21_of(const model *m) { return m->impl; }

static int64_t rows_of(const model *m) { return m->shape.text + m->shape.tokens; }

static st_status q21_create(model *m)
{
    const model_config *c = &m->cfg;
    q21_model *d = m->impl;
    d->blocks = model_seq_blocks(m, 0, "transformer_blocks", (int)c->depth, &f3_block_kind, sizeof *d->blocks);
    if (!d->blocks) return st_host_oom("the Qwen-Image 2.1 model");
    m->seq_sample[0] = rows_of(m) * m->shape.hidden;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = model_patch_dim(c);
    /* in the order of QwenImage21Transformer2DModel's state_dict */
    time_pair_register(s, &d->tp, "time_text_embed.timestep_embedder.linear_1",
                       "time_text_embed.timestep_embedder.linear_2", DIT_FREQ_DIM, D, full);
    d->txt.norm = param_add(s, "txt_in.text_norm.weight", 1, (int64_t[]){c->text_dim}, full);
    d->txt.l1 = lin_register(s, "txt_in.in_layer", c->text_dim, D, false, 0, 0, full);
    d->txt.l2 = lin_register(s, "txt_in.out_layer", D, D, false, 0, 0, full);
    d->txt.eps = Q21_EPS;
    d->img = lin_register(s, "img_in", P, D, false, 0, 0, full);
    d->mod = lin_register(s, "modulation.1", D, 4 * D, false, 0, 0, full);
    char name[96];
    for (int i = 0; i < c->depth; i++) {
        f3_block *b = &d->blocks[i];
        *b = (f3_block){.m = m, .rows = rows_of(m), .split = m->shape.text, .ffn = Q21_MLP_RATIO * D, .eps = Q21_EPS,
                        .sequential = true, .mod = &d->mod_rows, .dmod = &d->dmod_rows, .rope = &d->rope,
                        .mask = &d->maskp};
        snprintf(name, sizeof name, "transformer_blocks.%d", i);
        f3_block_register(s, b, name, c, true);
    }
    d->fin = (joint_final){.mod = lin_register(s, "norm_out.linear", D, D, false, 0, 0, full), .n_mod = 1,
                           .eps = Q21_EPS, .order = PATCH_CONV, .rows = rows_of(m), .at = m->shape.text};
    d->fin.out = lin_register(s, "proj_out", D, P, false, 0, 0, full);
    return ST_OK;
}

static void q21_release(model *m)
{
    q21_model *d = q21_of(m);
    op_state_release(&d->txt.stats), joint_final_release(&d->fin);
    d->maskp = NULL;
}

/* The same from the samples' text masks, ids (S, 3) (a host loop's) */
static st_status mask_positions(model *m, const float *cond, float *ids)
{
    q21_model *d = q21_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = rows_of(m), hd = c->hidden / c->heads;
    const int64_t gh = grid_rows(c), gw = grid_cols(c), K = model_cond_len(c);
    for (int64_t r = 0; r < S; r++) {
        const int64_t i = r - L;
        ids[r * 3] = (float)(r < L ? r : L);
        ids[r * 3 + 1] = (float)(r < L ? r : i / gw - (gh - gh / 2));
        ids[r * 3 + 2] = (float)(r < L ? r : i % gw - (gw - gw / 2));
    }
    rope_table(d->rope, ids, S, 3, c->rope_axes, Q21_THETA);
    for (int64_t b = 1; b < B; b++) memcpy(d->rope + b * S * hd, d->rope, (size_t)(S * hd) * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        const float *mask = cond + b * K + L * c->text_dim;
        for (int64_t r = 0; r < S; r++) {
            if (r < L && mask[r] != 0.0f && mask[r] != 1.0f)
                return st_fail(ST_ERR_INVALID, "the batch's sample %lld: its text mask is %g at token %lld; "
                               "Qwen-Image 2.1 takes 1 for a token and 0 for padding", (long long)b, mask[r],
                               (long long)r);
            d->kb[b * S + r] = r < L && mask[r] == 0.0f ? -INFINITY : 0.0f;
            d->seg[b * S + r] = r < L ? -1.0f - (float)r : 1.0f; /* each text row alone; the image one block */
        }
    }
    return ST_OK;
}

/* The rotary table (the same for every sample) and the block-causal mask with the text's padding keys hidden */
static st_status positions(model *m, const float *cond)
{
    q21_model *d = q21_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, S = rows_of(m), hd = c->hidden / c->heads;
    st_status st = ST_OK;
    model_hold(m, &st, &d->rope, B * S * hd, "qwen21.rope", false);
    model_hold(m, &st, &d->kb, B * S, "qwen21.key_mask", false);
    model_hold(m, &st, &d->seg, B * S, "qwen21.segments", false);
    if (!st) st = model_host_loop(m, d->rope, mask_positions, cond, S * 3, "qwen21.position_ids");
    if (st) return st;
    d->mask = (attn_mask){.key_bias = d->kb, .segment = d->seg, .causal = true, .batch_stride = S};
    d->maskp = &d->mask;
    return ST_OK;
}

/* The blocks' modulation (B, 2 sets, 6D): set 0 (the text's) from t = 0, set 1 (the image's) from t, each
 * (0, scale1, tanh gate1, 0, scale2, tanh gate2) of modulation.1's (scale1, gate1, scale2, gate2); raw keeps those
 * (2, B, 4D), zero's then the image's */
static st_status modulations(model *m, bool train)
{
    q21_model *d = q21_of(m);
    const int64_t B = m->shape.batch, D = m->shape.hidden;
    st_status st = ST_OK;
    model_hold(m, &st, &d->raw, 2 * B * 4 * D, "qwen21.modulation_raw", false);
    model_hold(m, &st, &d->mod_rows, B * 2 * 6 * D, "qwen21.modulation", true);
    if (train) model_hold(m, &st, &d->dmod_rows, B * 2 * 6 * D, "qwen21.dmodulation", true);
    if (!st) st = lin_forward(m->params, m->pool, &d->mod, d->raw, d->tp.zs, B);
    if (!st) st = lin_forward(m->params, m->pool, &d->mod, d->raw + B * 4 * D, m->ctx.cs, B);
    for (int k = 0; !st && k < 2; k++) { /* sample i's set k: rows 12 D apart, raw's 4 D */
        const float *r = d->raw + k * B * 4 * D;
        float *o = d->mod_rows + k * 6 * D;
        copy_rows(o + D, 12 * D, r, 4 * D, B, D), copy_rows(o + 4 * D, 12 * D, r + 2 * D, 4 * D, B, D);
        for (int64_t i = 0; i < B; i++)
            tanh_forward(o + i * 12 * D + 2 * D, r + i * 4 * D + D, D),
                tanh_forward(o + i * 12 * D + 5 * D, r + i * 4 * D + 3 * D, D);
    }
    return st;
}

/* From the blocks' modulation gradient back through modulation.1 to dL/d SiLU(temb), the image's (m->ctx.dcs) and
 * t = 0's (d->tp.dzs) */
static st_status modulations_backward(model *m)
{
    q21_model *d = q21_of(m);
    const int64_t B = m->shape.batch, D = m->shape.hidden;
    float *draw = NULL;
    st_status st = pool_alloc(m->pool, (size_t)(2 * B * 4 * D) * sizeof(float), MEM_WORKSPACE, "qwen21.dmod_raw",
                              (void **)&draw);
    if (st) return st;
    for (int k = 0; k < 2; k++) { /* the scales' gradients as they are, the gates' through tanh */
        const float *g = d->dmod_rows + k * 6 * D, *o = d->mod_rows + k * 6 * D;
        float *r = draw + k * B * 4 * D;
        for (int q = 0; q < 4; q++) copy_rows(r + q * D, 4 * D, g + (q + 1 + q / 2) * D, 12 * D, B, D);
        for (int64_t i = 0; i < B; i++)
            tanh_backward(r + i * 4 * D + D, r + i * 4 * D + D, o + i * 12 * D + 2 * D, D),
                tanh_backward(r + i * 4 * D + 3 * D, r + i * 4 * D + 3 * D, o + i * 12 * D + 5 * D, D);
    }
    st = lin_backward(m->params, m->pool, &d->mod, d->tp.dzs, draw, d->tp.zs, B);
    if (!st) st = lin_backward(m->params, m->pool, &d->mod, m->ctx.dcs, draw + B * 4 * D, m->ctx.cs, B);
    pool_free(m->pool, draw);
    return st;
}

static st_status final_out(model *m, bool train, const float **pred)
{
    q21_model *d = q21_of(m);
    const st_status st = joint_final_forward(m, &d->fin, m->ctx.cs, train);
    if (!st) *pred = d->fin.pred;
    return st;
}

/* The joint rows [text; image] (*x0), the time pair and the modulations */
static st_status embed(model *m, const float *x, const float *timesteps, const float *cond, bool train, float **x0)
{
    q21_model *d = q21_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, D = c->hidden, S = L + T;
    const int64_t P = model_patch_dim(c), K = model_cond_len(c), Dc = c->text_dim, BL = B * L;
    st_status st = ST_OK;
    model_hold(m, &st, &d->patches, B * T * P, "qwen21.patches", false);
    model_hold(m, &st, &d->text_in, BL * Dc, "qwen21.text", false);
    float *part = model_take(m, &st, B * (L > T ? L : T) * D, "qwen21.rows", false);
    float *joint = *x0 = model_take(m, &st, B * S * D, "qwen21.joint", false);
    if (!st) st = positions(m, cond);
    if (!st) st = time_pair_forward(m, &d->tp, timesteps, train);
    if (!st) st = modulations(m, train);
    if (!st) copy_rows(d->text_in, L * Dc, cond, K, B, L * Dc);
    if (!st) st = txt_in_joint_rows(m, &d->txt, &d->img, joint, part, d->text_in, d->patches, x, train);
    pool_free(m->pool, part);
    return st;
}

/* The final layer back to dL/d(the joint rows), *dx */
static st_status head_backward(model *m, const float *dpred, scratch *k, float **dx)
{
    return joint_final_head_backward(m, &q21_of(m)->fin, k, dpred, m->ctx.cs, m->ctx.dcs, "qwen21.djoint", dx);
}

static st_status embed_backward(model *m, scratch *k, block_state *grad)
{
    q21_model *d = q21_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = L + T, D = c->hidden, N = B * T;
    float *part = scratch_take(k, B * (L > T ? L : T) * D, MEM_WORKSPACE, "qwen21.drows");
    st_status st = k->status;
    if (!st) model_rows_gather(m, part, grad->t[0], S, L, T);
    if (!st) st = lin_backward(m->params, m->pool, &d->img, NULL, part, d->patches, N);
    if (!st) model_rows_gather(m, part, grad->t[0], S, 0, L);
    state_free(m->pool, grad);
    if (!st) st = txt_in_backward(m, &d->txt, k, NULL, part, d->text_in, B * L);
    if (!st) st = modulations_backward(m);
    if (!st) st = time_pair_backward(m, &d->tp, k);
    return st;
}

static const model_chain q21_chain = {.embed = embed, .embed_backward = embed_backward, .head = final_out,
                                      .head_backward = head_backward};

/* segtrain's own initialisation, for training from scratch: the modulation and the output at zero (the blocks start
 * as identities), the zero-centred text norm at zero (a scale of 1), the q/k norms at 1, the time path N(0, 0.02),
 * xavier linears elsewhere */
static const init_rule q21_inits[] = {
    {INIT_ZERO, "modulation|norm_out|proj_out|text_norm"}, {INIT_ONE, "norm_q|norm_k"},
    {INIT_NORMAL, "timestep_embedder"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

static const family_preset presets[] = {
    /* Qwen-Image 2.1 (QwenImage21Transformer2DModel's defaults; no published config was at hand): 32 single-stream
     * blocks of 32 heads x 128 on 16 latent channels in 2 x 2 patches, its encoder's 4096-wide states at Qwen-Image's
     * 1024 tokens. The tiny one is the fixture's. */
    {"qwen-image-2.1-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"qwen-image-2.1", 32, 4096, 32, 2, 16, 128, 10, 0, 1024, 4096, 0, false, false, 0, 0},
};

static st_status qwen_image21_check(const model_config *mc)
{
    const int64_t tokens = grid_rows(mc) * grid_cols(mc);
    if (tokens % 4)
        return st_fail(ST_ERR_INVALID, "latent %lld x %lld, patch_size %lld: Qwen-Image 2.1's image takes its encoder's "
                       "slots of 2 x 2 latent tokens each, so its %lld tokens must be a multiple of 4",
                       (long long)mc->height, (long long)mc->width, (long long)mc->patch, (long long)tokens);
    return ST_OK;
}

/* QwenImage21Transformer2DModel's config: the class defaults, then the file's values. in_channels is the pipeline's 2 x
 * 2 packing (patch_size 1); another mlp_ratio or eps, and causal_condition false, are refused by name. */
static st_status qwen21_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t patch = 1, in = 64, out = 64, hd = 128, heads = 32, axes[3] = {16, 56, 56};
    mc->depth = 32, mc->text_dim = 4096;
    const json_key keys[] = {{"patch_size", &patch}, {"in_channels", &in}, {"out_channels", &out},
                             {"num_layers", &mc->depth}, {"attention_head_dim", &hd}, {"num_attention_heads", &heads},
                             {"context_in_dim", &mc->text_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, axes);
    if (!st) st = json_fixed(j, file, "mlp_ratio", 3, "Qwen-Image 2.1 (the class default)");
    if (!st) st = json_fixed(j, file, "eps", 1e-6, "Qwen-Image 2.1 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "causal_condition", true, "Qwen-Image 2.1 (the class default)");
    if (st) return st;
    if (patch != 1 || in % 4 || (out && out != in) || heads < 1)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size %lld, in_channels %lld, out_channels %lld, "
                       "num_attention_heads %lld; segtrain reads Qwen-Image 2.1's packing (patch_size 1, in_channels "
                       "4 C, out_channels as in_channels) with at least 1 head", file, (long long)patch, (long long)in,
                       (long long)out, (long long)heads);
    mc->channels = in / 4, mc->patch = 2, mc->patch_t = 1, mc->heads = heads, mc->hidden = hd * heads;
    mc->pooled_dim = 0, mc->guidance_embeds = false, mc->single_depth = 0;
    set_rope_axes(mc, axes, 3);
    return ST_OK;
}

const family_desc qwen_image21_desc = {
    .name = "qwen_image21", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK | TR_UNPOOLED,
    .mask = MASK_EMPTY_ONE, FAMILY_PRESETS(presets), .readers = {{"QwenImage21Transformer2DModel", qwen21_from_json}},
    .axes = 3, .check = qwen_image21_check,
    .ops = &(const model_family){.create = q21_create, .impl_size = sizeof(q21_model), .release = q21_release,
                                 .chain = &q21_chain, .inits = q21_inits},
};
