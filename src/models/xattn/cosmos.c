/* Cosmos 2 text-to-image (docs/FAMILIES.md): diffusers' CosmosTransformer3DModel as Cosmos-Predict2's configs set it
 * (no learnable positions, no image context, no controlnet, no cross-attention projection), called as SimpleTuner's
 * cosmos2image calls it.
 *
 * - Input: the latent with the pipeline's padding-mask channel (zero) after its channels, in (1, p, p) patches whose
 *   features are (c, pt, ph, pw): patchify's order, the mask channel's features last and zero, through
 *   patch_embed.proj (no bias).
 * - Timestep: the model's input is segtrain's 1000 t, which Cosmos reads as t (its EDM's sigma / (sigma + 1): the
 *   trainer's objective_edm; anima's flow matching reads t too). Its sinusoid is as wide as the model (cosines
 *   first), temb = linear_2(SiLU(linear_1(.))) (3 D), e = RMSNorm(.) (eps 1e-6); the blocks and the final layer
 *   read SiLU(e) and temb.
 * - Rotary table per head: axes (t, h, w) of widths (hd - 2 (hd / 6 * 2), hd / 6 * 2, hd / 6 * 2), NTK-scaled thetas
 *   10000 s^(d / (d - 2)) by rope_scale, positions from 0, frequencies and angles in float32 as diffusers computes
 *   them; rotate-half.
 * - norm_out: (shift, scale) = linear_2(linear_1(SiLU(e))) + temb[:2 D], LayerNorm, modulate, proj_out (no bias),
 *   tokens out in (ph, pw, pt, c) order: PATCH_DIT's with pt = 1, the only temporal patch built. */
#include "models/xattn/cosmos.h"

#include "models/core/attn_side.h"
#include "models/core/family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COSMOS_ROPE_THETA 10000.0
#define COSMOS_TIME_PERIOD 10000.0

/* A block's (gated_block.c) modulations: module i's (shift, scale, gate) = linear_2_i(linear_1_i(SiLU(e))) + temb
 * (AdaLN-LoRA, no activation between the two linears), from m->ctx.cs = SiLU(e) (B, D) and m->ctx.mod's rows 0-2
 * (temb); back into their weights, m->ctx.dcs and m->ctx.dmod's rows 0-2. */
static st_status cosmos_modulate(const gated_block *b, float *mod)
{
    const model *m = b->m;
    const int64_t B = m->shape.batch, D = m->shape.hidden, M = 9 * D;
    scratch s = {.pool = m->pool};
    float *h = scratch_take(&s, B * b->lora, MEM_WORKSPACE, "cosmos.adaln_lora");
    float *o = scratch_take(&s, B * 3 * D, MEM_WORKSPACE, "cosmos.adaln");
    for (int i = 0; i < 3 && !s.status; i++) {
        if ((s.status = fwd(m, &b->ada1[i], h, m->ctx.cs, B)) || (s.status = fwd(m, &b->ada2[i], o, h, B))) break;
        for (int64_t r = 0; r < B; r++) add_to(o + r * 3 * D, m->ctx.mod + r * m->ctx.mod_rows * D, 3 * D);
        copy_rows(mod + i * 3 * D, M, o, 3 * D, B, 3 * D);
    }
    return scratch_end(&s);
}

static st_status cosmos_modulate_back(const gated_block *b, const float *dmod)
{
    const model *m = b->m;
    const int64_t B = m->shape.batch, D = m->shape.hidden, M = 9 * D;
    scratch s = {.pool = m->pool};
    float *h = scratch_take(&s, B * b->lora, MEM_WORKSPACE, "cosmos.adaln_lora");
    float *dh = scratch_take(&s, B * b->lora, MEM_WORKSPACE, "cosmos.dadaln_lora");
    float *dy = scratch_take(&s, B * 3 * D, MEM_WORKSPACE, "cosmos.dadaln");
    for (int i = 0; i < 3 && !s.status; i++) {
        copy_rows(dy, 3 * D, dmod + i * 3 * D, M, B, 3 * D);
        for (int64_t r = 0; r < B; r++) add_to(m->ctx.dmod + r * m->ctx.mod_rows * D, dy + r * 3 * D, 3 * D);
        zero_bytes(dh, (size_t)(B * b->lora) * sizeof(float));
        if ((s.status = fwd(m, &b->ada1[i], h, m->ctx.cs, B))) break;
        if ((s.status = bwd(m, &b->ada2[i], dh, dy, h, B))) break;
        s.status = bwd(m, &b->ada1[i], m->ctx.dcs, dh, m->ctx.cs, B);
    }
    return scratch_end(&s);
}

/* A block's weights in the state_dict's order: norm1, attn1, norm2, attn2, norm3, ff; no biases anywhere, the
 * cross-attention's keys and values from the raw text (text_dim wide) */
static void cosmos_block_register(param_set *s, gated_block *b, const char *prefix, const model_config *c)
{
    const int64_t D = c->hidden, hd = D / c->heads;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    char n[32];
    for (int i = 0; i < 3; i++) {
#define NAME(...) (snprintf(n, sizeof n, __VA_ARGS__), n)
        b->ada1[i] = block_linear(s, prefix, NAME("norm%d.linear_1", i + 1), D, b->lora, false, 0, c);
        b->ada2[i] = block_linear(s, prefix, NAME("norm%d.linear_2", i + 1), b->lora, 3 * D, false, 0, c);
        if (i == 2) break;
        attn_weights *w = i ? &b->ca : &b->sa;
        const int64_t kv = i ? c->text_dim : D;
        w->norm_q = block_norm(s, prefix, NAME("attn%d.norm_q", i + 1), hd, c);
        w->norm_k = block_norm(s, prefix, NAME("attn%d.norm_k", i + 1), hd, c);
        w->q = block_linear(s, prefix, NAME("attn%d.to_q", i + 1), D, D, false, ra, c);
        w->k = block_linear(s, prefix, NAME("attn%d.to_k", i + 1), kv, D, false, ra, c);
        w->v = block_linear(s, prefix, NAME("attn%d.to_v", i + 1), kv, D, false, ra, c);
        w->out = block_linear(s, prefix, NAME("attn%d.to_out.0", i + 1), D, D, false, ra, c);
#undef NAME
    }
    b->ff0 = block_linear(s, prefix, "ff.net.0.proj", D, b->ffn, false, rm, c);
    b->ff2 = block_linear(s, prefix, "ff.net.2", b->ffn, D, false, rm, c);
}

typedef struct cos_model {
    gated_block *blocks;
    int p_x, p_t1, p_t2, p_norm, p_out;
    lin_layer t1, t2, f1, f2; /* time_embed.t_embedder, norm_out's linears */
    final_layer final;
    anima_adapter ad; /* anima's text conditioner */
    /* a step */
    float *patches, *ts, *proj, *th, *ths, *temb, *e, *fh, *fo;
} cos_model;

static cos_model *co_of(model *m) { return m->impl; }

static bool is_anima(const model_config *mc)
{
    const cosmos_options *o = family_options(mc);
    return o && o->text_adapter;
}

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

/* a patch's features with the padding-mask channel */
static int64_t wide_dim(const model_config *c) { return (c->channels + 1) * c->patch_t * c->patch * c->patch; }

static st_status co_create(model *m)
{
    const model_config *c = &m->cfg;
    cos_model *d = m->impl;
    const int n = (int)c->depth;
    d->blocks = model_seq_blocks(m, 0, "transformer_blocks", n, &gated_block_kind, sizeof *d->blocks);
    if (!d->blocks) return st_host_oom("the Cosmos model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, r = c->adaln_lora, Pout = model_patch_dim(c);
    d->p_x = param_add(s, "patch_embed.proj.weight", 2, (int64_t[]){D, wide_dim(c)}, full);
    d->t1 = lin_register(s, "time_embed.t_embedder.linear_1", D, D, false, 0, 0, full);
    d->t2 = lin_register(s, "time_embed.t_embedder.linear_2", D, 3 * D, false, 0, 0, full);
    d->p_norm = param_add(s, "time_embed.norm.weight", 1, (int64_t[]){D}, full);
    char prefix[64];
    for (int i = 0; i < n; i++) {
        gated_block *b = &d->blocks[i];
        *b = (gated_block){.m = m, .cross = true, .rotate_half = true, .ln_eps = COSMOS_LN_EPS,
                           .qk_eps = COSMOS_QK_EPS, .rope = &m->ctx.rope, .ffn = c->ffn_dim ? c->ffn_dim : 4 * D,
                           .modulate = cosmos_modulate, .modulate_back = cosmos_modulate_back, .lora = r};
        snprintf(prefix, sizeof prefix, "transformer_blocks.%d", i);
        cosmos_block_register(s, b, prefix, c);
    }
    d->f1 = lin_register(s, "norm_out.linear_1", D, r, false, 0, 0, full);
    d->f2 = lin_register(s, "norm_out.linear_2", r, 2 * D, false, 0, 0, full);
    d->p_out = param_add(s, "proj_out.weight", 2, (int64_t[]){Pout, D}, full);
    d->final = (final_layer){.ada_w = -1, .ada_b = -1, .out_w = d->p_out, .out_b = -1, .mod_row = 3,
                             .order = PATCH_DIT}; /* shift, then scale */
    if (is_anima(c)) { /* its conditioner's weights last, as text_conditioner/ beside transformer/ */
        anima_register(s, &d->ad, c);
        m->shape.text = c->text_len > c->text_min_len ? c->text_len : c->text_min_len;
    }
    m->ctx.mod_rows = COSMOS_MOD_ROWS;
    return ST_OK;
}

static void co_release(model *m)
{
    cos_model *d = co_of(m);
    final_release(m, &d->final);
    anima_release(m, &d->ad);
}

/* CosmosRotaryPosEmbed's table for an F x G x G grid, (T, hd / 2, (cos, sin)): pair p of axis a (widths t, h, w in
 * pairs) turns by pos_a / theta_a^(2 j / d_a), the frequency and angle rounded to float as torch's float32 arange,
 * pow, reciprocal and outer product round them. */
static st_status cosmos_rope_table(model *m, const float *cond, float *work) /* a model_host_loop's */
{
    const model_config *c = &m->cfg;
    const int64_t F = c->frames / c->patch_t, gh = grid_rows(c), gw = grid_cols(c);
    float *table = m->ctx.rope;
    const int64_t hd = c->hidden / c->heads, dh = hd / 6 * 2, dt = hd - 2 * dh, dims[3] = {dt, dh, dh};
    const double scale[3] = {1.0, 4.0, 4.0};
    float freq[3][64];
    for (int a = 0; a < 3; a++) {
        const double ntk = pow(scale[a], (double)dims[a] / (double)(dims[a] - 2));
        const float theta = (float)(COSMOS_ROPE_THETA * ntk);
        for (int64_t j = 0; j < dims[a] / 2; j++) {
            const float e = (float)(2 * j) / (float)dims[a];
            freq[a][j] = 1.0f / powf(theta, e);
        }
    }
    const int64_t pairs = hd / 2;
    for (int64_t t = 0; t < F * gh * gw; t++) {
        const int64_t pos[3] = {t / (gh * gw), t / gw % gh, t % gw};
        float *e = table + t * pairs * 2;
        for (int a = 0; a < 3; a++)
            for (int64_t j = 0; j < dims[a] / 2; j++, e += 2) {
                const float ang = (float)pos[a] * freq[a][j];
                e[0] = (float)cos((double)ang);
                e[1] = (float)sin((double)ang);
            }
    }
    return ST_OK;
}

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                               float **x0)
{
    cos_model *d = co_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, E = c->text_dim;
    const int64_t N = B * T, P = model_patch_dim(c), PW_ = wide_dim(c), K = model_cond_len(c), R = COSMOS_MOD_ROWS;
    const int64_t r = c->adaln_lora;
    st_status st = ST_OK;
    model_hold(m, &st, &d->patches, N * PW_, "cosmos.patches", true);
    *x0 = model_take(m, &st, N * D, "cosmos.state", false);
    model_hold(m, &st, &d->ts, B, "cosmos.timestep", false);
    model_hold(m, &st, &d->proj, B * D, "cosmos.time_proj", false);
    model_hold(m, &st, &d->th, B * D, "cosmos.t_embedder", false);
    model_hold(m, &st, &d->ths, B * D, "cosmos.t_embedder_silu", false);
    model_hold(m, &st, &d->temb, B * 3 * D, "cosmos.temb", false);
    model_hold(m, &st, &d->e, B * D, "cosmos.embedded_timestep", false);
    model_hold(m, &st, &d->fh, B * r, "cosmos.norm_out_lora", false);
    model_hold(m, &st, &d->fo, B * 2 * D, "cosmos.norm_out", false);
    model_hold(m, &st, &m->ctx.cs, B * D, "cosmos.silu_e", false);
    model_hold(m, &st, &m->ctx.mod, B * R * D, "cosmos.modulation", false);
    model_hold(m, &st, &m->ctx.text, B * L * E, "cosmos.text", false);
    model_hold(m, &st, &m->ctx.rope, T * (D / c->heads), "cosmos.rope", false);
    const bool adapter = is_anima(c), adapter_trains = adapter && !c->lora_rank;
    if (train) {
        if (adapter_trains) model_hold(m, &st, &m->ctx.dtext, B * L * E, "anima.dtext", true);
        model_hold(m, &st, &m->ctx.dcs, B * D, "cosmos.dsilu_e", true);
        model_hold(m, &st, &m->ctx.dmod, B * R * D, "cosmos.dmodulation", true);
    }
    if (st) return st;
    /* image tokens: patches, then the mask channel's features (zero) */
    float *p = NULL;
    if ((st = pool_alloc(m->pool, (size_t)(N * P) * sizeof(float), MEM_WORKSPACE, "cosmos.patchify", (void **)&p)))
        return st;
    const patch_shape ps = model_patches(m);
    patchify_forward(p, x, &ps);
    copy_rows(d->patches, PW_, p, P, N, P);
    pool_free(m->pool, p);
    linear_forward(*x0, d->patches, PW(d->p_x), NULL, N, PW_, D);
    if ((st = model_host_loop(m, m->ctx.rope, cosmos_rope_table, NULL, 0, NULL))) return st;
    if (adapter) {
        if ((st = anima_forward(m, &d->ad, cond, m->ctx.text))) return st;
    } else
        copy_rows(m->ctx.text, L * E, cond, K, B, L * E);
    copy_rows(d->ts, B, timesteps, B, 1, B), div_by(d->ts, B, 1000.0f); /* t / 1000, correctly rounded */
    timestep_embedding(d->proj, d->ts, B, D, COSMOS_TIME_PERIOD);
    if ((st = lin_forward(m->params, m->pool, &d->t1, d->th, d->proj, B))) return st;
    silu_forward(d->ths, d->th, B * D);
    if ((st = lin_forward(m->params, m->pool, &d->t2, d->temb, d->ths, B))) return st;
    if ((st = rmsnorm_forward(m->pool, d->e, d->proj, PW(d->p_norm), B, D, COSMOS_LN_EPS, NULL))) return st;
    silu_forward(m->ctx.cs, d->e, B * D);
    if ((st = lin_forward(m->params, m->pool, &d->f1, d->fh, m->ctx.cs, B))) return st;
    if ((st = lin_forward(m->params, m->pool, &d->f2, d->fo, d->fh, B))) return st;
    for (int64_t b = 0; b < B; b++) add_to(d->fo + b * 2 * D, d->temb + b * 3 * D, 2 * D);
    copy_rows(m->ctx.mod, R * D, d->temb, 3 * D, B, 3 * D);
    copy_rows(m->ctx.mod + 3 * D, R * D, d->fo, 2 * D, B, 2 * D);
    return ST_OK;
}

static final_layer *co_final(model *m) { return &co_of(m)->final; }

/* From dL/dx0: the image tokens' weight, the text adapter's, and the time path's */
static st_status co_embed_backward(model *m, scratch *k, block_state *grad)
{
    const float *dx0 = grad->t[0];
    cos_model *d = co_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, R = COSMOS_MOD_ROWS, r = c->adaln_lora;
    st_status st = ST_OK;
    float *dtemb = scratch_take(k, B * 3 * D, MEM_WORKSPACE, "cosmos.dtemb");
    float *dfo = scratch_take(k, B * 2 * D, MEM_WORKSPACE, "cosmos.dnorm_out");
    float *dfh = scratch_take_zero(k, B * r, MEM_WORKSPACE, "cosmos.dnorm_out_lora");
    float *de = scratch_take_zero(k, B * D, MEM_WORKSPACE, "cosmos.de");
    float *dths = scratch_take_zero(k, B * D, MEM_WORKSPACE, "cosmos.dt_embedder_silu");
    float *dth = scratch_take_zero(k, B * D, MEM_WORKSPACE, "cosmos.dt_embedder");
    op_state stats = {0};
    if (!st) st = k->status;
    if (!st && m->ctx.dtext) st = anima_backward(m, &d->ad, m->ctx.dtext); /* the text's gradient, from the blocks */
    if (!st) { /* the image tokens' weight */
        linear_backward(NULL, PG(d->p_x), NULL, dx0, d->patches, PW(d->p_x), B * T, wide_dim(c), D);
        /* temb's gradient: the blocks' rows, and the final layer's (shift, scale) on its first 2 D */
        copy_rows(dtemb, 3 * D, m->ctx.dmod, R * D, B, 3 * D);
        copy_rows(dfo, 2 * D, m->ctx.dmod + 3 * D, R * D, B, 2 * D);
        for (int64_t b = 0; b < B; b++) add_to(dtemb + b * 3 * D, dfo + b * 2 * D, 2 * D);
        st = lin_backward(m->params, m->pool, &d->f2, dfh, dfo, d->fh, B);
    }
    if (!st) st = lin_backward(m->params, m->pool, &d->f1, m->ctx.dcs, dfh, m->ctx.cs, B);
    if (!st) { /* SiLU(e) back to e, then the RMSNorm's weight (the sinusoid trains nothing) */
        silu_backward(de, m->ctx.dcs, d->e, B * D);
        st = rmsnorm_forward(m->pool, dfo, d->proj, PW(d->p_norm), B, D, COSMOS_LN_EPS, &stats); /* dfo: spent */
    }
    float *dproj = scratch_take_zero(k, B * D, MEM_WORKSPACE, "cosmos.dproj");
    if (!st) st = k->status;
    if (!st) {
        rmsnorm_backward(dproj, PG(d->p_norm), de, d->proj, PW(d->p_norm), B, D, &stats);
        st = lin_backward(m->params, m->pool, &d->t2, dths, dtemb, d->ths, B);
    }
    if (!st) {
        silu_backward(dth, dths, d->th, B * D);
        st = lin_backward(m->params, m->pool, &d->t1, NULL, dth, d->proj, B);
    }
    op_state_release(&stats);
    return st;
}

static const model_chain co_chain = {.embed = embed_forward, .embed_backward = co_embed_backward, .final = co_final,
                                     .dx_name = "cosmos.dstate"};

/* segtrain's own init in DiT's spirit: the blocks start as identities (their AdaLN-LoRA's linear_2 and the output
 * projection zero), norms at 1, xavier elsewhere */
static const init_rule co_inits[] = {
    /* anima's text conditioner: RMSNorms at 1, the embedding N(0, 1), biases 0 */
    {INIT_ONE, "^text_conditioner.&norm"}, {INIT_NORMAL, "^text_conditioner.&.embed."},
    {INIT_ZERO, "^text_conditioner.&.bias"}, {INIT_XAVIER, "^text_conditioner."},
    {INIT_ZERO, "norm&linear_2|^proj_out.weight$"}, {INIT_ONE, "norm_q|norm_k|^time_embed.norm.weight$"},
    {INIT_NORMAL, "t_embedder"}, {0}};

const model_family cosmos_family = {
    .create = co_create, .impl_size = sizeof(cos_model), .release = co_release, .chain = &co_chain, .inits = co_inits,
};
