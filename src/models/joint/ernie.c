/* ERNIE-Image (docs/FAMILIES.md): diffusers' ErnieImageTransformer2DModel, called as SimpleTuner's ernie calls it
 * (timesteps 1000 t as they are, the prediction the output itself).
 *
 * - One block sequence, `layers`, on the joint rows per sample [the image's T, the caption's L] (its caption's
 *   padding keys masked: len, the sample's mask's ones); its blocks are lumina2_block.c's in ernie_style.
 * - x_embedder: a Conv2d of p x p patches (features (channel, row, column)); text_proj: a linear without bias when
 *   the text is not already D wide.
 * - time: Timesteps(D) of t, sines first, then time_embedding (linear_1, SiLU, linear_2): c. One modulation for every
 *   block, adaLN_modulation(SiLU(c)) = (shift, scale, gate) x 2, into m->ctx.mod.
 * - Rotary positions on three axes: the image token at (len, row, column), caption token j at (j, 0, 0), every
 *   head's frequencies repeated pairwise and applied by halves (rope_repeated_forward).
 * - final_norm: LayerNorm (no affine) of the image rows times 1 + scale, plus shift, (scale, shift) =
 *   final_norm.linear(c); then final_linear. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/lumina2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERNIE_MOD 6        /* shift, scale, gate of the attention, then of the feed-forward */
#define ERNIE_THETA 256.0 /* every published config's rope_theta */

typedef struct er_model {
    lumina_joint j;
    temb t;
    lin_layer text, ada; /* text.w < 0: no text_proj */
    joint_final fin;
    int x_w, x_b;
    /* a step */
    float *patches, *text_in;
    float *dc; /* backward's dL/dtemb, from the final layer */
} er_model;

static er_model *er_of(const model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static int64_t rows_of(const model *m) { return m->shape.tokens + m->shape.text; }

static st_status er_create(model *m)
{
    const model_config *c = &m->cfg;
    er_model *d = m->impl;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, C = c->channels, p = c->patch, P = model_patch_dim(c);
    d->x_w = param_add(s, "x_embedder.proj.weight", 4, (int64_t[]){D, C, p, p}, full);
    d->x_b = param_add(s, "x_embedder.proj.bias", 1, (int64_t[]){D}, full);
    d->text = c->text_dim != D ? lin_register(s, "text_proj", c->text_dim, D, false, 0, 0, full) : (lin_layer){.w = -1};
    temb_register(s, &d->t, "time_embedding.linear_1", "time_embedding.linear_2", D, D, full);
    d->ada = lin_register(s, "adaLN_modulation.1", D, ERNIE_MOD * D, true, 0, 0, full);
    st_status st = lumina_joint_create(m, &d->j, &ernie_style, rows_of(m), D);
    if (st) return st;
    d->fin = (joint_final){.mod = lin_register(s, "final_norm.linear", D, 2 * D, true, 0, 0, full), .n_mod = 2,
                           .eps = (float)c->norm_eps, .order = PATCH_DIT, .rows = rows_of(m)}; /* (scale, shift) of c */
    d->fin.out = joint_out_register(s, "final_linear", D, P, full);
    return ST_OK;
}

static void er_release(model *m)
{
    er_model *d = er_of(m);
    joint_final_release(&d->fin);
}

/* Per sample: its caption's length, positions (ids: (S, 3)), rotary table and key mask (a host loop's) */
static st_status caption_positions(model *m, const float *cond, float *ids)
{
    er_model *d = er_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = T + L, hd = c->hidden / c->heads;
    const int64_t g = grid_cols(c);
    st_status st = ST_OK;
    for (int64_t b = 0; !st && b < B; b++) {
        float n = 0;
        if ((st = model_caption_length(m, cond, b, &n))) break;
        d->j.len[b] = n;
        for (int64_t r = 0; r < S; r++) {
            float *id = ids + r * 3;
            if (r < T) id[0] = n, id[1] = (float)(r / g), id[2] = (float)(r % g);
            else id[0] = (float)(r - T), id[1] = id[2] = 0;
            d->j.kb[b * S + r] = r < T + (int64_t)n ? 0.0f : -INFINITY;
        }
        rope_table(d->j.rope + b * S * hd, ids, S, 3, c->rope_axes, ERNIE_THETA);
    }
    return st;
}

/* Each row's halves swapped: Timesteps(flip_sin_to_cos False)'s sines first (a host_loop's) */
static st_status swap_halves(void *arg)
{
    const table_fill *t = arg;
    const int64_t half = t->cols / 2;
    for (int64_t b = 0; b < t->rows; b++)
        for (int64_t j = 0; j < half; j++) {
            float *f = t->t + b * t->cols;
            const float cs = f[j];
            f[j] = f[half + j], f[half + j] = cs;
        }
    return ST_OK;
}

/* The joint rows: x_embedder's image rows, then text_proj's caption rows, per sample */
static st_status embed(model *m, const float *x, const float *timesteps, const float *cond, bool train, float **x0)
{
    er_model *d = er_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = T + L, D = c->hidden;
    const int64_t Dc = c->text_dim, P = model_patch_dim(c), K = model_cond_len(c);
    st_status st = ST_OK;
    model_hold(m, &st, &d->patches, B * T * P, "ernie.patches", false);
    model_hold(m, &st, &d->text_in, B * L * Dc, "ernie.caption_in", false);
    *x0 = model_take(m, &st, B * S * D, "ernie.rows", false);
    temb_take(m, &d->t, &st, train);
    model_hold(m, &st, &m->ctx.mod, B * ERNIE_MOD * D, "ernie.modulation", false);
    if (train) model_hold(m, &st, &m->ctx.dmod, B * ERNIE_MOD * D, "ernie.dmodulation", true);
    if (!st) st = lumina_joint_positions(m, &d->j, caption_positions, cond, S * 3, NULL);
    if (st) return st;
    const patch_shape ps = model_patches(m);
    patchify_forward(d->patches, x, &ps); /* a Conv weight's feature order */
    copy_rows(d->text_in, L * Dc, cond, K, B, L * Dc);
    for (int64_t b = 0; !st && b < B; b++) {
        float *rows = *x0 + b * S * D;
        linear_forward(rows, d->patches + b * T * P, PW(d->x_w), PW(d->x_b), T, P, D);
        if (d->text.w >= 0) st = lin_forward(m->params, m->pool, &d->text, rows + T * D, d->text_in + b * L * Dc, L);
        else copy_rows(rows + T * D, D, d->text_in + b * L * Dc, D, L, D);
    }
    if (st) return st;
    timestep_embedding(d->t.freq, timesteps, B, D, 10000.0); /* cosines first: Timesteps(flip_sin_to_cos False) */
    host_loop(d->t.freq, swap_halves, &(table_fill){d->t.freq, B, D}); /* wants sines first */
    if ((st = temb_mlp_forward(m, &d->t))) return st;
    silu_forward(m->ctx.cs, d->t.c, B * D);
    return lin_forward(m->params, m->pool, &d->ada, m->ctx.mod, m->ctx.cs, B);
}

static st_status final_out(model *m, bool train, const float **pred)
{
    er_model *d = er_of(m);
    const st_status st = joint_final_forward(m, &d->fin, d->t.c, train);
    if (!st) *pred = d->fin.pred;
    return st;
}

/* The final layer back to dL/d(joint rows), *dx */
static st_status head_backward(model *m, const float *dpred, scratch *k, float **dx)
{
    er_model *d = er_of(m);
    d->dc = scratch_take_zero(k, m->shape.batch * m->cfg.hidden, MEM_WORKSPACE, "ernie.dtemb");
    return joint_final_head_backward(m, &d->fin, k, dpred, d->t.c, d->dc, "ernie.drows", dx);
}

static st_status embed_backward(model *m, scratch *k, block_state *grad)
{
    (void)k;
    er_model *d = er_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = T + L, D = c->hidden;
    const int64_t P = model_patch_dim(c), Dc = c->text_dim;
    st_status st = ST_OK;
    for (int64_t b = 0; !st && b < B; b++) {
        const float *g = grad->t[0] + b * S * D;
        linear_backward(NULL, PG(d->x_w), PG(d->x_b), g, d->patches + b * T * P, PW(d->x_w), T, P, D);
        if (d->text.w >= 0)
            st = lin_backward(m->params, m->pool, &d->text, NULL, g + T * D, d->text_in + b * L * Dc, L);
    }
    state_free(m->pool, grad);
    /* the blocks' shared modulation back through adaLN_modulation, SiLU, then the time path (sines first) */
    if (!st) st = lin_backward(m->params, m->pool, &d->ada, m->ctx.dcs, m->ctx.dmod, m->ctx.cs, B);
    if (!st) st = temb_silu_backward(m, &d->t, d->dc, m->ctx.dcs);
    return st;
}

static const model_chain er_chain = {.embed = embed, .embed_backward = embed_backward, .head = final_out,
                                     .head_backward = head_backward};

/* segtrain's own initialisation, for training from scratch: the norms at 1, the modulation and the output at zero
 * (as the class initialises them), the timestep embedding N(0, 0.02), xavier linears elsewhere */
static const init_rule er_inits[] = {
    {INIT_ZERO, "adaLN_modulation|final_linear"}, {INIT_ONE, "_ln.&.weight$|norm_&.weight$"}, /* the RMSNorms' */
    {INIT_NORMAL, "time_embedding"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

static const family_preset presets[] = {
    /* ERNIE-Image (baidu/ERNIE-Image's transformer, Turbo's the same shape): 36 blocks of 32 heads x 128, its text
     * encoder's 3072-wide states, Flux.2's VAE's 128 packed channels at 16x (1024 px: 64 x 64, patch 1); 256 caption
     * tokens is segtrain's choice (SimpleTuner pads a batch to its longest caption). The rest in its preset hook below. */
    {"ernie-tiny", 2, 32, 2, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"ernie-image", 36, 4096, 32, 1, 128, 64, 10, 0, 256, 3072, 0, false, false, 0, 0},
};

static void ernie_preset(model_config *mc, const char *name, bool tiny)
{
    /* full multi-head attention; eps 1e-6; SimpleTuner's packed latents at 16x */
    mc->kv_heads = mc->heads, mc->norm_eps = 1e-6, mc->ffn_dim = tiny ? 2 * mc->hidden : 12288,
    mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
}

static st_status ernie_check(const model_config *mc) { return joint_check(mc, true); }

/* ErnieImageTransformer2DModel's config: the class defaults, then the file's values (baidu/ERNIE-Image's: 36 layers
 * of 4096); other rotary bases, out_channels and qk_layernorm false are refused by name. */
static st_status ernie_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t heads = 24, out = 128, axes[3] = {32, 48, 48};
    mc->hidden = 3072, mc->depth = 24, mc->ffn_dim = 8192, mc->channels = 128, mc->patch = 1, mc->text_dim = 2560;
    mc->norm_eps = 1e-6;
    const json_key keys[] = {{"hidden_size", &mc->hidden}, {"num_attention_heads", &heads}, {"num_layers", &mc->depth},
                             {"ffn_hidden_size", &mc->ffn_dim}, {"in_channels", &mc->channels}, {"out_channels", &out},
                             {"patch_size", &mc->patch}, {"text_in_dim", &mc->text_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_fixed(j, file, "rope_theta", 256.0, "ERNIE-Image (every published config's)");
    if (!st) st = json_fixed_bool(j, file, "qk_layernorm", true, "ERNIE-Image");
    if (!st) st = json_axes(j, file, "rope_axes_dim", 3, axes);
    if (!st) st = json_eps(j, file, "eps", &mc->norm_eps);
    if (st) return st;
    if (heads < 1 || out != mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: num_attention_heads %lld, out_channels %lld; segtrain builds "
                       "ERNIE-Image with at least 1 and out_channels in_channels (%lld)", file, (long long)heads,
                       (long long)out, (long long)mc->channels);
    mc->heads = heads, mc->kv_heads = heads, mc->patch_t = 1;
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false, mc->refiner_depth = 0;
    set_rope_axes(mc, axes, 3);
    return ST_OK;
}

const family_desc ernie_desc = {
    .name = "ernie", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK | TR_BATCH_PADDED,
    .st = {{.name = "ernie", .title = "ERNIE-Image", .diffusers = "ErnieImageTransformer2DModel",
            .flavours = "base|turbo", .built = "base:ernie-image", .fallback = "base",
            .why = "turbo trains LoRA through an assistant adapter loaded beside it, which segtrain does not load; base, "
                   "the same transformer shape, is built",
            .example = "ernie.peft-lora.json", .tiny = "ernie-tiny"}},
    FAMILY_PRESETS(presets), .preset = ernie_preset, .rope_axes = family_rope_axes_wide,
    .readers = {{"ErnieImageTransformer2DModel", ernie_from_json}}, .fields = F_FFN | F_NORM_EPS | F_KV_HEADS,
    .check = ernie_check,
    .ops = &(const model_family){.create = er_create, .impl_size = sizeof(er_model), .release = er_release,
                                 .chain = &er_chain, .inits = er_inits},
    .swap_blocks = {"layers"},
};
