/* Ideogram 4 (docs/FAMILIES.md): diffusers' Ideogram4Transformer2DModel, called as SimpleTuner's ideogram calls it:
 * the model's time is 1 - t (1 is clean data) and the prediction is minus its output.
 *
 * - One block sequence, `layers`, on the joint rows per sample [the caption's L, the image's T]: the caption's rows
 *   llm_cond_proj(llm_cond_norm(text)), the image's input_proj of its packed latents (patch 1), each plus its role's
 *   row of embed_image_indicator (0: text, 1: image). The caption's padding keys are masked (SimpleTuner's segment
 *   ids: 1 for a real token and the image, 0 for padding); its blocks are lumina2_block.c's in ideogram_style.
 * - time: t_embedding (sin then cos of 10^4 t at frequencies 10^(-4 j / (D/2 - 1)), mlp_in, SiLU, mlp_out), then
 *   adaln_input = SiLU(adaln_proj(.)), time_dim wide: what every block's adaln_modulation reads (m->ctx.cs).
 * - MRoPE: a caption token j at (j, j, j), an image token at (O, O + row, O + column), O = 65536; frequency p of the
 *   head (theta^(-2p / head_dim)) turns by the position on axis 1 when p % 3 == 1 and p < 3 sections[1], on axis 2
 *   when p % 3 == 2 and p < 3 sections[2], else on axis 0; rotate-half pairs.
 * - final_layer: LayerNorm (no affine) of the image rows times 1 + adaln_modulation(SiLU(adaln_input)), then linear. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/lumina2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDEO_THETA 5000000.0    /* every published config's rope_theta */
#define IDEO_IMAGE_OFFSET 65536 /* SimpleTuner's IMAGE_POSITION_OFFSET */
#define IDEO_TEXT_EPS 1e-6f     /* llm_cond_norm's */
#define IDEO_OUT_EPS 1e-6f

typedef struct id_model {
    lumina_joint j;
    temb t;
    lin_layer text, ada;
    joint_final fin;
    int text_norm, x_w, x_b, role;
    /* a step */
    float *tin, *patches, *text_in, *text_n, *ada_raw, *fin_c;
    float *dfin; /* backward's dL/d(the final layer's SiLU input) */
    op_state text_stats;
} id_model;

static id_model *id_of(const model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static int64_t rows_of(const model *m) { return m->shape.text + m->shape.tokens; }

static st_status id_create(model *m)
{
    const model_config *c = &m->cfg;
    id_model *d = m->impl;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, A = c->time_dim, P = model_patch_dim(c);
    d->x_w = param_add(s, "input_proj.weight", 2, (int64_t[]){D, P}, full);
    d->x_b = param_add(s, "input_proj.bias", 1, (int64_t[]){D}, full);
    d->text_norm = param_add(s, "llm_cond_norm.weight", 1, (int64_t[]){c->text_dim}, full);
    d->text = lin_register(s, "llm_cond_proj", c->text_dim, D, true, 0, 0, full);
    temb_register(s, &d->t, "t_embedding.mlp_in", "t_embedding.mlp_out", D, D, full);
    d->ada = lin_register(s, "adaln_proj", D, A, true, 0, 0, full);
    d->role = param_add(s, "embed_image_indicator.weight", 2, (int64_t[]){2, D}, full);
    st_status st = lumina_joint_create(m, &d->j, &ideogram_style, rows_of(m), A);
    if (st) return st;
    d->fin = (joint_final){.out = joint_out_register(s, "final_layer.linear", D, P, full), .n_mod = 1,
                           .negate = true, .eps = IDEO_OUT_EPS, .order = PATCH_DIT, .rows = rows_of(m),
                           .at = m->shape.text}; /* SimpleTuner's ideogram negates the output */
    d->fin.mod = lin_register(s, "final_layer.adaln_modulation", A, D, true, 0, 0, full);
    return ST_OK;
}

static void id_release(model *m)
{
    id_model *d = id_of(m);
    op_state_release(&d->text_stats);
    joint_final_release(&d->fin);
}

/* Per sample: its caption's length, its rotary table (ids: (S, 3)) and key mask (a host loop's) */
static st_status caption_positions(model *m, const float *cond, float *ids)
{
    id_model *d = id_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = rows_of(m), hd = c->hidden / c->heads;
    const int64_t g = grid_cols(c);
    st_status st = ST_OK;
    for (int64_t r = 0; r < S; r++) { /* (j, j, j), then (0, row, col) + the offset */
        const int64_t i = r - L, o = IDEO_IMAGE_OFFSET;
        ids[r * 3] = (float)(r < L ? r : o), ids[r * 3 + 1] = (float)(r < L ? r : o + i / g);
        ids[r * 3 + 2] = (float)(r < L ? r : o + i % g);
    }
    for (int64_t b = 0; !st && b < B; b++) {
        float n = 0;
        if ((st = model_caption_length(m, cond, b, &n))) break;
        d->j.len[b] = n;
        if (!b) rope_table_mrope(d->j.rope, ids, S, hd, c->rope_axes, IDEO_THETA); /* no sample's positions differ */
        else copy_rows(d->j.rope + b * S * hd, S * hd, d->j.rope, S * hd, 1, S * hd);
        for (int64_t r = 0; r < S; r++) d->j.kb[b * S + r] = r < (int64_t)n || r >= L ? 0.0f : -INFINITY;
    }
    return st;
}

/* t_embedding's sinusoid of 10^4 t: sines then cosines, frequencies 10^(-4 j / (half - 1)) */
static st_status time_sinusoid(void *arg) /* a host_loop's */
{
    model *m = ((model_loop *)arg)->m;
    const float *t = ((model_loop *)arg)->timesteps;
    float *freq = id_of(m)->t.freq;
    const int64_t B = m->shape.batch, dim = m->cfg.hidden;
    const int64_t half = dim / 2;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < half; j++) {
            const double a = 1e4 * (double)t[b] * exp(-(double)j * log(1e4) / (double)(half - 1));
            freq[b * dim + j] = (float)sin(a), freq[b * dim + half + j] = (float)cos(a);
        }
    return ST_OK;
}

/* The joint rows: the caption's, then the image's, each plus its role's embedding */
static st_status embed(model *m, const float *x, const float *timesteps, const float *cond, bool train, float **x0)
{
    id_model *d = id_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = T + L, D = c->hidden;
    const int64_t Dc = c->text_dim, P = model_patch_dim(c), K = model_cond_len(c), A = c->time_dim;
    st_status st = ST_OK;
    model_hold(m, &st, &d->tin, B, "ideogram.time", false);
    model_hold(m, &st, &d->patches, B * T * P, "ideogram.patches", false);
    model_hold(m, &st, &d->text_in, B * L * Dc, "ideogram.caption_in", false);
    model_hold(m, &st, &d->text_n, B * L * Dc, "ideogram.caption_norm", false);
    *x0 = model_take(m, &st, B * S * D, "ideogram.rows", false);
    temb_take_wide(m, &d->t, &st, train, A > D ? A : D); /* adaln_input in ctx.cs: adaln_dim may pass the width */
    model_hold(m, &st, &d->ada_raw, B * A, "ideogram.adaln_proj", false);
    model_hold(m, &st, &d->fin_c, B * A, "ideogram.silu_adaln_input", false);
    if (!st) st = lumina_joint_positions(m, &d->j, caption_positions, cond, S * 3, NULL);
    if (st) return st;
    const patch_shape ps = model_patches(m);
    patchify_forward(d->patches, x, &ps);
    copy_rows(d->text_in, L * Dc, cond, K, B, L * Dc);
    st = rmsnorm_forward(m->pool, d->text_n, d->text_in, PW(d->text_norm), B * L, Dc, IDEO_TEXT_EPS,
                         train ? &d->text_stats : NULL);
    for (int64_t b = 0; !st && b < B; b++) {
        float *rows = *x0 + b * S * D;
        st = lin_forward(m->params, m->pool, &d->text, rows, d->text_n + b * L * Dc, L);
        linear_forward(rows + L * D, d->patches + b * T * P, PW(d->x_w), PW(d->x_b), T, P, D);
        add_row(rows, PW(d->role), L, D);              /* text: row 0 */
        add_row(rows + L * D, PW(d->role) + D, T, D); /* image: row 1 */
    }
    if (st) return st;
    time_one_minus_sigma(d->tin, timesteps, B);
    if ((st = host_loop(d->t.freq, time_sinusoid, &(model_loop){.m = m, .timesteps = d->tin}))) return st;
    if ((st = temb_mlp_forward(m, &d->t))) return st;
    if ((st = lin_forward(m->params, m->pool, &d->ada, d->ada_raw, d->t.c, B))) return st;
    silu_forward(m->ctx.cs, d->ada_raw, B * A); /* adaln_input */
    silu_forward(d->fin_c, m->ctx.cs, B * A);   /* the final layer's SiLU of it */
    return ST_OK;
}

static st_status final_out(model *m, bool train, const float **pred)
{
    id_model *d = id_of(m);
    const st_status st = joint_final_forward(m, &d->fin, d->fin_c, train);
    if (!st) *pred = d->fin.pred;
    return st;
}

/* The final layer back to dL/d(joint rows), *dx */
static st_status head_backward(model *m, const float *dpred, scratch *k, float **dx)
{
    id_model *d = id_of(m);
    d->dfin = scratch_take_zero(k, m->shape.batch * m->cfg.time_dim, MEM_WORKSPACE, "ideogram.dsilu_adaln_input");
    return joint_final_head_backward(m, &d->fin, k, dpred, d->fin_c, d->dfin, "ideogram.drows", dx);
}

static st_status embed_backward(model *m, scratch *k, block_state *grad)
{
    id_model *d = id_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = T + L, D = c->hidden;
    const int64_t P = model_patch_dim(c), Dc = c->text_dim, A = c->time_dim;
    const float *dfin = d->dfin;
    st_status st = ST_OK;
    float *dtext = scratch_take_zero(k, B * L * Dc, MEM_WORKSPACE, "ideogram.dcaption_norm");
    float *role = scratch_take(k, S, MEM_WORKSPACE, "ideogram.role"); /* each row's indicator row */
    if (!st) st = k->status;
    if (!st) zero_floats(role, S), add_scalar(role + L, S - L, 1.0f); /* 0 for the caption, 1 for the image */
    for (int64_t b = 0; !st && b < B; b++) {
        const float *g = grad->t[0] + b * S * D;
        linear_backward(NULL, PG(d->x_w), PG(d->x_b), g + L * D, d->patches + b * T * P, PW(d->x_w), T, P, D);
        embedding_backward(PG(d->role), g, role, S, D);
        st = lin_backward(m->params, m->pool, &d->text, dtext + b * L * Dc, g, d->text_n + b * L * Dc, L);
    }
    state_free(m->pool, grad);
    if (!st) rmsnorm_backward(NULL, PG(d->text_norm), dtext, d->text_in, PW(d->text_norm), B * L, Dc, &d->text_stats);
    if (!st) { /* back through adaln_input's two SiLUs (the blocks' and the final layer's), adaln_proj, t_embedding */
        float *dcs = scratch_take(k, B * A, MEM_WORKSPACE, "ideogram.dadaln_input");
        float *draw = scratch_take_zero(k, B * A, MEM_WORKSPACE, "ideogram.dadaln_proj");
        float *dc = scratch_take_zero(k, B * D, MEM_WORKSPACE, "ideogram.dtemb");
        if (!(st = k->status)) {
            copy_rows(dcs, B * A, m->ctx.dcs, B * A, 1, B * A);
            silu_backward(dcs, dfin, m->ctx.cs, B * A);
            silu_backward(draw, dcs, d->ada_raw, B * A);
            st = lin_backward(m->params, m->pool, &d->ada, dc, draw, d->t.c, B);
            if (!st) st = temb_backward(m, &d->t, dc);
        }
    }
    return st;
}

static const model_chain id_chain = {.embed = embed, .embed_backward = embed_backward, .head = final_out,
                                     .head_backward = head_backward};

/* segtrain's own initialisation, for training from scratch: the norms at 1, the modulations and the output at zero
 * (the blocks start as identities), the time embedding N(0, 0.02), xavier linears elsewhere */
static const init_rule id_inits[] = {
    {INIT_ZERO, "adaln_modulation|final_layer.linear"}, {INIT_ONE, "norm&.weight$"}, /* the RMSNorms' */
    {INIT_NORMAL, "t_embedding|embed_image_indicator"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

/* fp8 and nf4: the same transformer, quantised: it plans, and trains from a float copy of the weights */
static const family_preset presets[] = {
    /* Ideogram 4 (Ideogram4Transformer2DModel's defaults, the published checkpoints' shape): 34 blocks of 18 heads x
     * 256, 13 Qwen3-VL layers' states side by side (53248 wide) per caption token, packed 128-channel latents at 16x
     * (patch 1); 256 caption tokens is segtrain's choice (SimpleTuner pads a batch to its longest). The rest in
     * its preset hook below. */
    {"ideogram-tiny", 2, 32, 2, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"ideogram-4", 34, 4608, 18, 1, 128, 64, 10, 0, 256, 53248, 0, false, false, 0, 0},
};

static void ideogram_preset(model_config *mc, const char *name, bool tiny)
{
    /* adaln_dim, mrope_section (24, 20, 20) of 128 frequencies */
    mc->kv_heads = mc->heads, mc->norm_eps = 1e-5, mc->ffn_dim = tiny ? 64 : 12288;
    mc->time_dim = tiny ? 16 : 512, mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
    const int64_t sections[4] = {tiny ? 2 : 24, tiny ? 2 : 20, tiny ? 2 : 20, 0};
    memcpy(mc->rope_axes, sections, sizeof sections);
}

static st_status ideogram_check(const model_config *mc)
{
    const int64_t hd = mc->hidden / mc->heads;
    if (mc->time_dim < 1 || mc->time_dim > (1 << 16) || hd % 2 || mc->rope_axes[0] < 0 || mc->rope_axes[1] < 0 ||
        mc->rope_axes[2] < 0 || 3 * mc->rope_axes[1] > hd / 2 + 1 || 3 * mc->rope_axes[2] > hd / 2 || mc->rope_axes[3])
        return st_fail(ST_ERR_INVALID, "adaln_dim %lld, mrope_section (%lld, %lld, %lld), head width %lld; ideogram "
                       "takes 1 to 65536 and sections whose interleaved frequencies lie within the (even) head's "
                       "(3 sections[1] <= head/2 + 1, 3 sections[2] <= head/2)", (long long)mc->time_dim,
                       (long long)mc->rope_axes[0], (long long)mc->rope_axes[1], (long long)mc->rope_axes[2],
                       (long long)hd);
    return joint_check(mc, false);
}

/* Ideogram4Transformer2DModel's config: the class defaults (the published checkpoints'), then the file's values;
 * another rope_theta is refused by name. */
static st_status ideogram_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t hd = 256, heads = 18, sections[3] = {24, 20, 20};
    mc->channels = 128, mc->depth = 34, mc->ffn_dim = 12288, mc->time_dim = 512, mc->text_dim = 53248, mc->patch = 1;
    mc->norm_eps = 1e-5;
    const json_key keys[] = {{"in_channels", &mc->channels}, {"num_layers", &mc->depth}, {"attention_head_dim", &hd},
                             {"num_attention_heads", &heads}, {"intermediate_size", &mc->ffn_dim},
                             {"adaln_dim", &mc->time_dim}, {"llm_features_dim", &mc->text_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_fixed(j, file, "rope_theta", 5000000.0, "Ideogram 4 (every published config's)");
    if (!st) st = json_axes(j, file, "mrope_section", 3, sections);
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    if (st) return st;
    if (heads < 1 || hd < 2 || hd % 2 || heads * hd > (1 << 20))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: num_attention_heads %lld of attention_head_dim %lld; segtrain builds "
                       "Ideogram 4 with at least 1 head of an even width", file, (long long)heads, (long long)hd);
    mc->heads = heads, mc->hidden = heads * hd, mc->kv_heads = heads, mc->patch_t = 1;
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false, mc->refiner_depth = 0;
    set_rope_axes(mc, sections, 3);
    return ST_OK;
}

const family_desc ideogram_desc = {
    .name = "ideogram", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK | TR_BATCH_PADDED,
    .st = {{.name = "ideogram", .title = "Ideogram 4", .diffusers = "Ideogram4Transformer2DModel",
            .flavours = "fp8|nf4", .built = "fp8:ideogram-4|nf4:ideogram-4", .fallback = "fp8",
            .example = "ideogram-fp8.peft-lora.json", .tiny = "ideogram-tiny"}},
    FAMILY_PRESETS(presets), .preset = ideogram_preset,
    .readers = {{"Ideogram4Transformer2DModel", ideogram_from_json}},
    .fields = F_FFN | F_NORM_EPS | F_KV_HEADS | F_TIME_DIM, .check = ideogram_check,
    .ops = &(const model_family){.create = id_create, .impl_size = sizeof(id_model), .release = id_release,
                                 .chain = &id_chain, .inits = id_inits},
};
