/* Kandinsky 5 image (docs/FAMILIES.md): diffusers' Kandinsky5Transformer3DModel as Kandinsky 5.0 T2I Lite sets it (no
 * visual_cond, regular attention), called as SimpleTuner's Kandinsky5Image calls it.
 *
 * - Input: the latent's (1, p, p) patches with features in (pt, ph, pw, c) order, c fastest (the model reads the
 *   latent channels last), through visual_embeddings.in_layer (with a bias); tokens (frame, row, column).
 * - Text: text_embeddings = LayerNorm(in_layer(text)) (affine, eps 1e-5), then the text blocks, their own block
 *   sequence (sequence 0) with the 1-D rotary table; their output is what every visual block (sequence 1)
 *   cross-attends to, so its gradient gathers from every visual block before the text blocks' backward.
 * - Time: the model's input t is 1000 sigma (segtrain's), which Kandinsky reads unscaled: a sinusoid as wide as the
 *   model (cosines first, period 10000), in_layer, SiLU, out_layer (time_dim), plus LayerNorm(in_layer(pooled))
 *   (affine, eps 1e-5) of the pooled CLIP vector; the blocks and the output read SiLU of that sum.
 * - Rotary tables, interleaved pairs: the text's position k turns pair j by k 10000^(-j / (hd / 2)); the image's head
 *   splits into axes (frame, row, column) of widths (hd / 4, 3 hd / 8, 3 hd / 8), each turning pair j by
 *   pos 10000^(-j / (d / 2)) / scale with scale_factor (1, 2, 2). Frequencies and products in float as the model's
 *   float32 buffers hold them, the division and cos / sin in double.
 * - Out: (shift, scale) = modulation.out_layer(SiLU(time_embed)), LayerNorm (no affine, eps 1e-5), modulate,
 *   out_layer (with a bias), a token's outputs in (c, pt, ph, pw) order (PATCH_CONV). */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/xattn/gated_block.h"

#include "models/core/attn_side.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K5_PERIOD 10000.0

#define K5_LN_EPS 1e-5f                       /* nn.LayerNorm's default, every LayerNorm of the model */
#define K5_QK_EPS 1.1920928955078125e-07f     /* nn.RMSNorm(eps=None) on float32 q and k: finfo(float32).eps */

/* an attention's to_query, to_key, to_value, query_norm, key_norm and out_layer, in the state_dict's order */
static void attention_register(param_set *s, const char *prefix, const char *name, attn_weights *w,
                               const model_config *c)
{
    const int64_t D = c->hidden, ra = c->lora_attention ? c->lora_rank : 0;
    char n[64];
#define NAME(leaf) (snprintf(n, sizeof n, "%s.%s", name, leaf), n)
    w->q = block_linear(s, prefix, NAME("to_query"), D, D, true, ra, c);
    w->k = block_linear(s, prefix, NAME("to_key"), D, D, true, ra, c);
    w->v = block_linear(s, prefix, NAME("to_value"), D, D, true, ra, c);
    w->norm_q = block_norm(s, prefix, NAME("query_norm"), c->hidden / c->heads, c);
    w->norm_k = block_norm(s, prefix, NAME("key_norm"), c->hidden / c->heads, c);
    w->out = block_linear(s, prefix, NAME("out_layer"), D, D, true, ra, c);
#undef NAME
}

/* A text block (Kandinsky5TransformerEncoderBlock) or a visual one (Kandinsky5TransformerDecoderBlock): modulation,
 * self-attention, (cross-attention,) feed-forward without biases, in the state_dict's order */
static void k5_block_register(param_set *s, gated_block *b, const char *prefix, const model_config *c)
{
    const int64_t D = c->hidden, rm = c->lora_mlp ? c->lora_rank : 0;
    b->mod = block_linear(s, prefix, b->cross ? "visual_modulation.out_layer" : "text_modulation.out_layer",
                          c->time_dim, (b->cross ? 9 : 6) * D, true, 0, c);
    attention_register(s, prefix, "self_attention", &b->sa, c);
    if (b->cross) attention_register(s, prefix, "cross_attention", &b->ca, c);
    b->ff0 = block_linear(s, prefix, "feed_forward.in_layer", D, b->ffn, false, rm, c);
    b->ff2 = block_linear(s, prefix, "feed_forward.out_layer", b->ffn, D, false, rm, c);
}

typedef struct k5_model {
    gated_block *blocks[2]; /* the text blocks (sequence 0), the visual blocks (sequence 1) */
    lin_layer t_in, t_out, txt, pool_in, vis, out_mod, out;
    int txt_w, txt_b, pool_w, pool_b;
    /* a step */
    float *trope, *vrope; /* the text's and the image's rotary tables, which the blocks point at */
    float *text_in, *te, *sin, *th, *ths, *tt, *pooled, *ph, *temb, *patches, *fmod, *fln, *fh, *pred;
    float *t0, *x0; /* the sequences' first states, until they take them */
    op_state fstats;
    block_state tlast;
} k5_model;

static k5_model *k5_of(model *m) { return m->impl; }

/* A patch's input features: the latent's channels, then visual_cond's (cond_channels: a reference's latents and
 * mask, zero in text-to-video) at every one of its positions */
static int64_t in_dim(const model_config *c)
{
    return model_patch_dim(c) / c->channels * (c->channels + c->cond_channels);
}

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static st_status k5_create(model *m)
{
    const model_config *c = &m->cfg;
    k5_model *d = m->impl;
    static const char *const seqs[2] = {"text_transformer_blocks", "visual_transformer_blocks"};
    const int n[2] = {(int)c->text_blocks, (int)c->depth};
    for (int q = 0; q < 2; q++)
        d->blocks[q] = model_seq_blocks(m, q, seqs[q], n[q], &gated_block_kind, sizeof *d->blocks[q]);
    if (!d->blocks[0] || !d->blocks[1]) return st_host_oom("the Kandinsky 5 model");
    m->seq_sample[0] = m->shape.text * m->shape.hidden; /* the text's sequence; the visual one's is the default */
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, Td = c->time_dim, P = model_patch_dim(c);
    d->t_in = lin_register(s, "time_embeddings.in_layer", D, Td, true, 0, 0, full);
    d->t_out = lin_register(s, "time_embeddings.out_layer", Td, Td, true, 0, 0, full);
    d->txt = lin_register(s, "text_embeddings.in_layer", c->text_dim, D, true, 0, 0, full);
    d->txt_w = param_add(s, "text_embeddings.norm.weight", 1, (int64_t[]){D}, full);
    d->txt_b = param_add(s, "text_embeddings.norm.bias", 1, (int64_t[]){D}, full);
    d->pool_in = lin_register(s, "pooled_text_embeddings.in_layer", c->pooled_dim, Td, true, 0, 0, full);
    d->pool_w = param_add(s, "pooled_text_embeddings.norm.weight", 1, (int64_t[]){Td}, full);
    d->pool_b = param_add(s, "pooled_text_embeddings.norm.bias", 1, (int64_t[]){Td}, full);
    d->vis = lin_register(s, "visual_embeddings.in_layer", in_dim(c), D, true, 0, 0, full);
    char prefix[64];
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < n[q]; i++) {
            gated_block *b = &d->blocks[q][i];
            const bool visual = q == 1;
            *b = (gated_block){.m = m, .cross = visual, .text_rows = !visual, .ln_eps = K5_LN_EPS,
                               .qk_eps = K5_QK_EPS, .rope = visual ? &d->vrope : &d->trope,
                               .ffn = c->ffn_dim ? c->ffn_dim : 4 * D, .modulate = gated_modulate_linear,
                               .modulate_back = gated_modulate_linear_back};
            snprintf(prefix, sizeof prefix, "%s.%d", seqs[q], i);
            k5_block_register(s, b, prefix, c);
        }
    d->out_mod = lin_register(s, "out_layer.modulation.out_layer", Td, 2 * D, true, 0, 0, full);
    d->out = lin_register(s, "out_layer.out_layer", D, P, true, 0, 0, full);
    return ST_OK;
}

static void k5_release(model *m)
{
    k5_model *d = k5_of(m);
    state_free(m->pool, &d->tlast);
    op_state_release(&d->fstats);
    m->ctx.text = NULL; /* the text blocks' output, tlast's */
}

/* A frequency of get_freqs(dim) as torch makes it in float32: exp(-ln(10000) * (j / dim)). */
static float k5_freq(int64_t j, int64_t dim)
{
    const float a = (float)j / (float)dim;
    return expf((float)-log(K5_PERIOD) * a);
}

/* The text's table (L, hd / 2, (cos, sin)) and the image's (F G G, hd / 2, (cos, sin)), as Kandinsky5RoPE1D and
 * Kandinsky5RoPE3D make them */
static st_status k5_rope_tables(model *m, const float *cond, float *work) /* a model_host_loop's */
{
    const model_config *c = &m->cfg;
    const int64_t L = m->shape.text, F = c->frames / c->patch_t, gh = grid_rows(c), gw = grid_cols(c);
    float *text = k5_of(m)->trope, *image = k5_of(m)->vrope;
    const int64_t hd = c->hidden / c->heads, pairs = hd / 2, dims[3] = {hd / 4, 3 * hd / 8, 3 * hd / 8};
    const double scale[3] = {1.0, 2.0, 2.0};
    for (int64_t t = 0; t < L; t++)
        for (int64_t j = 0; j < pairs; j++) {
            const float ang = (float)t * k5_freq(j, pairs);
            text[(t * pairs + j) * 2] = (float)cos((double)ang);
            text[(t * pairs + j) * 2 + 1] = (float)sin((double)ang);
        }
    for (int64_t t = 0; t < F * gh * gw; t++) {
        const int64_t pos[3] = {t / (gh * gw), t / gw % gh, t % gw};
        float *e = image + t * pairs * 2;
        for (int a = 0; a < 3; a++)
            for (int64_t j = 0; j < dims[a] / 2; j++, e += 2) {
                const double ang = (double)((float)pos[a] * k5_freq(j, dims[a] / 2)) / scale[a];
                e[0] = (float)cos(ang);
                e[1] = (float)sin(ang);
            }
    }
    return ST_OK;
}

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    k5_model *d = k5_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, E = c->text_dim;
    const int64_t N = B * T, P = model_patch_dim(c), K = model_cond_len(c), Td = c->time_dim, E2 = c->pooled_dim;
    const int64_t hd = D / c->heads;
    st_status st = ST_OK;
    model_hold(m, &st, &d->trope, L * hd, "k5.text_rope", false);
    model_hold(m, &st, &d->vrope, T * hd, "k5.rope", false);
    model_hold(m, &st, &d->text_in, B * L * E, "k5.text", false);
    model_hold(m, &st, &d->te, B * L * D, "k5.text_in_layer", false);
    model_hold(m, &st, &d->t0, B * L * D, "k5.text_state", false);
    model_hold(m, &st, &d->sin, B * D, "k5.time_sinusoid", false);
    model_hold(m, &st, &d->th, B * Td, "k5.time_in_layer", false);
    model_hold(m, &st, &d->ths, B * Td, "k5.time_silu", false);
    model_hold(m, &st, &d->tt, B * Td, "k5.time_out_layer", false);
    model_hold(m, &st, &d->pooled, B * E2, "k5.pooled", false);
    model_hold(m, &st, &d->ph, B * Td, "k5.pooled_in_layer", false);
    model_hold(m, &st, &d->temb, B * Td, "k5.time_embed", false);
    model_hold(m, &st, &d->patches, N * in_dim(c), "k5.patches", true);
    model_hold(m, &st, &d->x0, N * D, "k5.state", false);
    model_hold(m, &st, &m->ctx.cs, B * Td, "k5.silu_time_embed", false);
    if (train) model_hold(m, &st, &m->ctx.dcs, B * Td, "k5.dsilu_time_embed", true);
    if (st) return st;
    if ((st = model_host_loop(m, d->trope, k5_rope_tables, NULL, 0, NULL))) return st;
    copy_rows(d->text_in, L * E, cond, K, B, L * E);
    copy_rows(d->pooled, E2, cond + L * E, K, B, E2);
    if ((st = lin_forward(m->params, m->pool, &d->txt, d->te, d->text_in, B * L))) return st;
    if ((st = layernorm_forward(m->pool, d->t0, d->te, PW(d->txt_w), PW(d->txt_b), B * L, D, K5_LN_EPS, NULL))) return st;
    timestep_embedding(d->sin, timesteps, B, D, K5_PERIOD);
    if ((st = lin_forward(m->params, m->pool, &d->t_in, d->th, d->sin, B))) return st;
    silu_forward(d->ths, d->th, B * Td);
    if ((st = lin_forward(m->params, m->pool, &d->t_out, d->tt, d->ths, B))) return st;
    if ((st = lin_forward(m->params, m->pool, &d->pool_in, d->ph, d->pooled, B))) return st;
    if ((st = layernorm_forward(m->pool, d->temb, d->ph, PW(d->pool_w), PW(d->pool_b), B, Td, K5_LN_EPS, NULL)))
        return st;
    add_to(d->temb, d->tt, B * Td);
    silu_forward(m->ctx.cs, d->temb, B * Td);
    const patch_shape ps = model_patches(m);
    float *latent = d->patches;
    if (c->cond_channels && (st = pool_alloc_zero(m->pool, (size_t)(N * P) * sizeof(float), MEM_WORKSPACE,
                                                  "k5.latent_patches", (void **)&latent)))
        return st;
    unpatchify_backward(latent, x, &ps, PATCH_DIT); /* (pt, ph, pw, c) features: the channels-last view */
    if (latent != d->patches) { /* each position's C latent channels, then its zero condition channels */
        copy_rows(d->patches, c->channels + c->cond_channels, latent, c->channels, N * P / c->channels, c->channels);
        pool_free(m->pool, latent);
    }
    return lin_forward(m->params, m->pool, &d->vis, d->x0, d->patches, N);
}

/* the output layer: pred = unpatchify(out_layer(LN(x) (1 + scale) + shift)), (shift, scale) from SiLU(time_embed) */
static st_status out_forward(model *m, const float *x)
{
    k5_model *d = k5_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T, P = model_patch_dim(c);
    st_status st = ST_OK;
    model_hold(m, &st, &d->fmod, B * 2 * D, "k5.out_modulation", false);
    model_hold(m, &st, &d->fln, N * D, "k5.out_ln", false);
    model_hold(m, &st, &d->fh, N * D, "k5.out_h", false);
    model_hold(m, &st, &d->pred, N * P, "pred", false);
    float *out = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(N * P) * sizeof(float), MEM_WORKSPACE, "k5.out", (void **)&out);
    if (!st) st = lin_forward(m->params, m->pool, &d->out_mod, d->fmod, m->ctx.cs, B);
    if (!st) st = layernorm_forward(m->pool, d->fln, x, NULL, NULL, N, D, K5_LN_EPS, &d->fstats);
    if (!st) {
        modulate_forward(d->fh, d->fln, d->fmod, d->fmod + D, B, T, D, 2 * D);
        st = lin_forward(m->params, m->pool, &d->out, out, d->fh, N);
    }
    if (!st) {
        const patch_shape ps = model_patches(m);
        unpatchify_forward(d->pred, out, &ps, PATCH_CONV);
    }
    pool_free(m->pool, out);
    return st;
}

static st_status k5_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    k5_model *d = k5_of(m);
    st_status st = embed_forward(m, x, timesteps, cond, train);
    /* the text blocks, then the visual blocks on their output */
    if (!st) st = model_seq_forward1(m, 0, &d->t0, train, &d->tlast);
    if (!st) {
        m->ctx.text = d->tlast.t[0];
        if (train) model_hold(m, &st, &m->ctx.dtext, m->seq[0].state_numel[0], "k5.dtext", true);
    }
    if (!st) st = model_seq_forward1(m, 1, &d->x0, train, NULL);
    if (!st) st = out_forward(m, m->step.last.t[0]);
    if (!st) *pred = d->pred;
    return st;
}

static st_status out_backward(model *m, const float *dpred, float *dx)
{
    k5_model *d = k5_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T, P = model_patch_dim(c);
    scratch k = {.pool = m->pool};
    float *dout = scratch_take_zero(&k, N * P, MEM_WORKSPACE, "k5.dout"); /* unpatchify_backward adds */
    float *dh = scratch_take_zero(&k, N * D, MEM_WORKSPACE, "k5.dout_h");
    float *dmod = scratch_take_zero(&k, B * 2 * D, MEM_WORKSPACE, "k5.dout_modulation");
    if (!k.status) {
        const patch_shape ps = model_patches(m);
        unpatchify_backward(dout, dpred, &ps, PATCH_CONV);
        k.status = lin_backward(m->params, m->pool, &d->out, dh, dout, d->fh, N);
    }
    if (!k.status) {
        modulate_backward(dh, dmod, dmod + D, dh, d->fln, d->fmod + D, B, T, D, 2 * D);
        layernorm_backward(dx, NULL, NULL, dh, m->step.last.t[0], NULL, N, D, &d->fstats);
        k.status = lin_backward(m->params, m->pool, &d->out_mod, m->ctx.dcs, dmod, m->ctx.cs, B);
    }
    return scratch_end(&k);
}

/* The embeddings' backward: the text's (dt0: dL/d(text_embeddings' output)), the image's (dx0) and the time's
 * (m->ctx.dcs); only weights train here. */
static st_status embed_backward(model *m, const float *dt0, const float *dx0)
{
    k5_model *d = k5_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, Td = c->time_dim;
    scratch k = {.pool = m->pool};
    float *dte = scratch_take_zero(&k, B * L * D, MEM_WORKSPACE, "k5.dtext_in_layer");
    float *tmp = scratch_take(&k, B * L * D, MEM_WORKSPACE, "k5.text_norm");
    float *dtemb = scratch_take_zero(&k, B * Td, MEM_WORKSPACE, "k5.dtime_embed");
    float *dths = scratch_take_zero(&k, B * Td, MEM_WORKSPACE, "k5.dtime_silu");
    float *dth = scratch_take_zero(&k, B * Td, MEM_WORKSPACE, "k5.dtime_in_layer");
    float *dph = scratch_take_zero(&k, B * Td, MEM_WORKSPACE, "k5.dpooled_in_layer");
    op_state stats = {0};
    if (!k.status) k.status = lin_backward(m->params, m->pool, &d->vis, NULL, dx0, d->patches, B * T);
    if (!k.status)
        k.status = layernorm_forward(m->pool, tmp, d->te, PW(d->txt_w), PW(d->txt_b), B * L, D, K5_LN_EPS, &stats);
    if (!k.status) {
        layernorm_backward(dte, PG(d->txt_w), PG(d->txt_b), dt0, d->te, PW(d->txt_w), B * L, D, &stats);
        k.status = lin_backward(m->params, m->pool, &d->txt, NULL, dte, d->text_in, B * L);
    }
    op_state_release(&stats);
    if (!k.status) { /* SiLU(time_embed) back to time_embed = out_layer(...) + LayerNorm(pooled_in(...)) */
        silu_backward(dtemb, m->ctx.dcs, d->temb, B * Td);
        k.status = layernorm_forward(m->pool, tmp, d->ph, PW(d->pool_w), PW(d->pool_b), B, Td, K5_LN_EPS, &stats);
    }
    if (!k.status) {
        layernorm_backward(dph, PG(d->pool_w), PG(d->pool_b), dtemb, d->ph, PW(d->pool_w), B, Td, &stats);
        k.status = lin_backward(m->params, m->pool, &d->pool_in, NULL, dph, d->pooled, B);
    }
    op_state_release(&stats);
    if (!k.status) k.status = lin_backward(m->params, m->pool, &d->t_out, dths, dtemb, d->ths, B);
    if (!k.status) {
        silu_backward(dth, dths, d->th, B * Td);
        k.status = lin_backward(m->params, m->pool, &d->t_in, NULL, dth, d->sin, B);
    }
    return scratch_end(&k);
}

static st_status k5_backward(model *m, const float *dpred)
{
    k5_model *d = k5_of(m);
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = m->cfg.hidden;
    st_status st = ST_OK;
    float *dx = model_take(m, &st, B * T * D, "k5.dstate", true);
    if (!st) st = out_backward(m, dpred, dx);
    op_state_release(&d->fstats);
    state_free(m->pool, &m->step.last);
    block_state grad = {.n = 1, .t = {dx}}, tgrad = {0};
    if (!st) st = model_seq_backward(m, 1, &grad); /* grad becomes dL/dx0, m->ctx.dtext gathers */
    state_free(m->pool, &d->tlast); /* the text blocks' output: the visual blocks were its last readers */
    m->ctx.text = NULL;
    if (!st) {
        tgrad = (block_state){.n = 1, .t = {m->ctx.dtext}};
        m->ctx.dtext = NULL; /* the executor's now */
        st = model_seq_backward(m, 0, &tgrad);
    }
    if (!st) st = embed_backward(m, tgrad.t[0], grad.t[0]);
    state_free(m->pool, &tgrad);
    state_free(m->pool, &grad);
    return st;
}

/* segtrain's own init in DiT's spirit: the modulations zero (as diffusers' Kandinsky5Modulation starts them) and the
 * output's projection zero, norms at 1 with zero biases, xavier elsewhere */
static const init_rule k5_inits[] = {
    {INIT_ZERO, "modulation|^out_layer.out_layer|norm.bias"}, {INIT_ONE, "_norm|norm.weight"},
    {INIT_NORMAL, "time_embeddings"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

/* Kandinsky 5's video models are its visual_cond ones */
static bool kandinsky5_video(const model_config *mc) { return mc->cond_channels != 0; }

static const family_preset presets[] = {
    /* Kandinsky 5.0 T2I Lite's (kandinskylab/Kandinsky-5.0-T2I-Lite-*-Diffusers): 2 text blocks, then 50 visual
     * blocks of 20 heads x 128 (axes 32, 48, 48), time_dim 512, ff 10240 (4 D), Qwen2.5-VL's 3584 at SimpleTuner's
     * 256 tokens and CLIP-L's pooled 768, 16 latent channels (Flux's VAE, 1024 px); the tiny one is the fixture's. */
    {"kandinsky5-image-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"kandinsky5-t2i-lite", 50, 2560, 20, 2, 16, 128, 10, 0, 256, 3584, 768, false, false, 0, 0},
    /* Kandinsky 5.0 Video's (kandinskylab/Kandinsky-5.0-T2V-*-Diffusers): visual_cond (the input's reference latents
     * and mask: 33 channels a position, zero in text-to-video), the HunyuanVideo VAE (16 channels, 8x, 4 frames a
     * latent frame). Lite: 2 + 32 blocks of 28 heads x 64 (axes 16, 24, 24), time_dim 512, ff 7168 (4 D); Pro: 4 + 60
     * of 32 x 128 (axes 32, 48, 48), time_dim 1024, ff 16384; their grids 512 px and 1024 px (a config's resolution
     * and num_frames set the real ones); the tiny one is the fixture's. */
    {"kandinsky5-video-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"kandinsky5-t2v-lite", 32, 1792, 28, 2, 16, 64, 10, 0, 256, 3584, 768, false, false, 0, 0},
    {"kandinsky5-t2v-pro", 60, 4096, 32, 2, 16, 128, 10, 0, 256, 3584, 768, false, false, 0, 0},
};

static void kandinsky5_preset(model_config *mc, const char *name, bool tiny)
{
    const bool pro = strstr(name, "-pro") != NULL;
    mc->text_blocks = pro ? 4 : 2, mc->time_dim = tiny ? 32 : pro ? 1024 : 512, mc->ffn_dim = tiny ? 64 : 0;
    if (strstr(name, "t2v") || strstr(name, "video")) /* visual_cond: a reference's latents and mask */
        mc->cond_channels = mc->channels + 1, mc->frames = tiny ? 2 : 1;
}

static st_status kandinsky5_check(const model_config *mc)
{
    const int64_t hd = mc->hidden / mc->heads;
    if (mc->text_blocks < 1 || mc->text_blocks > 4096 || mc->time_dim < 1 || mc->time_dim > (1 << 16) ||
        mc->pooled_dim < 1 || mc->patch_t != 1 || hd % 16 || hd > 256 || mc->out_channels ||
        (mc->cond_channels && mc->cond_channels != mc->channels + 1))
        return family_refuse(mc, GROUP_TEXT_BLOCKS, "kandinsky5 takes 1 to 4096, 1 to 65536, at least 1, 1, a multiple "
                             "of 16 up to 256 (axes hd / 4, 3 hd / 8, 3 hd / 8), 0 (= in_visual_dim) and 0 or "
                             "in_visual_dim + 1");
    return ST_OK;
}

/* Kandinsky5Transformer3DModel's config: its defaults, then the file's values (visual_cond: the video models' reference
 * channels, cond_channels); what segtrain does not build (other axes or patches, another output width, another
 * attention) is refused by name. */
static st_status kandinsky5_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t out = 4, patch[3] = {1, 2, 2}, axes[3] = {16, 24, 24};
    mc->channels = 4, mc->text_dim = 3584, mc->pooled_dim = 768, mc->time_dim = 512, mc->hidden = 2048;
    mc->ffn_dim = 5120, mc->text_blocks = 2, mc->depth = 32;
    const json_key keys[] = {{"in_visual_dim", &mc->channels}, {"in_text_dim", &mc->text_dim},
                             {"in_text_dim2", &mc->pooled_dim}, {"time_dim", &mc->time_dim}, {"out_visual_dim", &out},
                             {"model_dim", &mc->hidden}, {"ff_dim", &mc->ffn_dim},
                             {"num_text_blocks", &mc->text_blocks}, {"num_visual_blocks", &mc->depth}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "patch_size", 3, patch);
    if (!st) st = json_axes(j, file, "axes_dims", 3, axes);
    if (st) return st;
    /* attention_type "nabla" (the 10 s video models) takes effect only when the caller passes sparse_params, which
     * SimpleTuner never does: they train with dense attention there, and here */
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "attention_type");
    if (at && !cJSON_IsNull(at) && !(cJSON_IsString(at) && (!strcmp(at->valuestring, "regular") ||
                                                            !strcmp(at->valuestring, "nabla"))))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: attention_type; segtrain builds Kandinsky 5's \"regular\" attention "
                       "(and \"nabla\" models densely, as SimpleTuner calls them: without sparse_params)", file);
    mc->cond_channels = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "visual_cond")) ? mc->channels + 1 : 0;
    const int64_t hd = axes[0] + axes[1] + axes[2];
    if (patch[0] != 1 || patch[1] != patch[2] || out != mc->channels || hd < 16 || hd % 16 || axes[0] != hd / 4 ||
        axes[1] != 3 * hd / 8 || axes[2] != axes[1] || mc->hidden % hd)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size, out_visual_dim, axes_dims or model_dim; segtrain builds "
                       "Kandinsky 5's patch (1, p, p), out_visual_dim = in_visual_dim (%lld) and axes (hd / 4, 3 hd / 8, "
                       "3 hd / 8) of a head width hd that divides model_dim", file, (long long)mc->channels);
    mc->patch = patch[1], mc->patch_t = 1, mc->heads = mc->hidden / hd, mc->single_depth = 0;
    mc->guidance_embeds = false;
    if (mc->ffn_dim == 4 * mc->hidden) mc->ffn_dim = 0;
    return ST_OK;
}

/* The encoder and decoder blocks' Kandinsky5Attention (self_attention; the decoder's cross_attention) and
 * Kandinsky5FeedForward */
static const lyco_class kandinsky5_lycoris_classes[] = {
    {"Kandinsky5Attention", "self_attention cross_attention"}, {"Kandinsky5FeedForward", "feed_forward"}, {NULL, NULL}};

const family_desc kandinsky5_desc = {
    .name = "kandinsky5", .topology = TOPO_XATTN, .traits = TR_TEXT,
    .st = {{.name = "kandinsky5-image", .alias = "kandinsky5_image", .title = "Kandinsky5-Image",
            .diffusers = "Kandinsky5Transformer3DModel",
            .flavours = "t2i-lite-sft|t2i-lite-pretrain|i2i-lite-sft|i2i-lite-pretrain",
            .built = "t2i-lite-sft:kandinsky5-t2i-lite|t2i-lite-pretrain:kandinsky5-t2i-lite",
            .fallback = "t2i-lite-sft",
            .why = "the i2i flavours also take a reference image's latents and mask as input channels "
                   "(visual_cond); segtrain's conditioning carries no reference image",
            .example = "kandinsky5-image-6b-t2i.lycoris-lokr.json", .tiny = "kandinsky5-image-tiny"},
           {.name = "kandinsky5-video", .alias = "kandinsky5_video", .title = "Kandinsky5-Video",
            .diffusers = "Kandinsky5Transformer3DModel",
            .flavours = "t2v-lite-sft-5s|t2v-lite-pretrain-5s|t2v-lite-sft-10s|t2v-lite-pretrain-10s|t2v-pro-sft-5s-hd|"
                        "t2v-pro-sft-10s-hd|t2v-pro-pretrain-5s-hd|t2v-pro-pretrain-10s-hd|i2v-lite-5s|i2v-pro-sft-5s",
            .built = "t2v-lite-sft-5s:kandinsky5-t2v-lite|t2v-lite-pretrain-5s:kandinsky5-t2v-lite|"
                     "t2v-lite-sft-10s:kandinsky5-t2v-lite|t2v-lite-pretrain-10s:kandinsky5-t2v-lite|"
                     "t2v-pro-sft-5s-hd:kandinsky5-t2v-pro|t2v-pro-sft-10s-hd:kandinsky5-t2v-pro|"
                     "t2v-pro-pretrain-5s-hd:kandinsky5-t2v-pro|t2v-pro-pretrain-10s-hd:kandinsky5-t2v-pro",
            .fallback = "t2v-lite-sft-5s",
            .why = "the i2v flavours also take the first frame's latents and its mask in the visual_cond "
                   "channels, which are zero in text-to-video; segtrain's conditioning carries no reference "
                   "image",
            .example = "kandinsky5-video-2b-t2v.peft-lora.json", .tiny = "kandinsky5-video-tiny"}},
    .is_video = kandinsky5_video, FAMILY_PRESETS(presets), .preset = kandinsky5_preset,
    .readers = {{"Kandinsky5Transformer3DModel", kandinsky5_from_json}},
    .fields = F_FFN | F_TEXT_BLOCKS | F_TIME_DIM | F_COND_CHANNELS, .check = kandinsky5_check,
    .ops = &(const model_family){.create = k5_create, .impl_size = sizeof(k5_model), .forward = k5_forward,
                                 .backward = k5_backward, .release = k5_release, .inits = k5_inits},
    .swap_blocks = {"text_transformer_blocks", "visual_transformer_blocks"},
    .lycoris_classes = kandinsky5_lycoris_classes,
};
