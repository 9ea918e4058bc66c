/* Stable Cascade's stage C (stable_cascade): diffusers' StableCascadeUNet as one sequence of micro-blocks
 * (cascade_block.c): the embedding; each down level's scaler (from the second on) and its [ResBlock, TimestepBlock,
 * AttnBlock] layers, a level's output a skip for the up path; each up level's layers, its first ResBlock reading the
 * skip of its level, then its scaler. Around the sequence: the time embeddings (the timestep ratio's sinusoids, then
 * sca's and crp's, which SimpleTuner leaves at zero), the conditioning tokens (CLIP-G's sequence, its pooled vector
 * and a zero CLIP image embedding, each through its mapper, then a LayerNorm), whose SiLU every AttnBlock's
 * kv_mapper reads, and the head (a LayerNorm over the channels, a 1 x 1 convolution). Interval and stride count
 * micro-blocks, as SimpleTuner's Stable Cascade applies them to its Res / Timestep / Attention blocks. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/unet/cascade.h"
#include "models/unet/unet.h"
#include "segtrain/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cascade_step {
    float *r_embed, *text, *pooled, *zero_img; /* the inputs as the mappers read them */
    float *raw, *clip, *clip_s, *dclip_s;      /* the tokens before and after clip_norm, SiLU of them, its gradient */
    op_state clip_ln;
    float *n, *pred; /* the head's norm output and the prediction */
    op_state head_ln;
} cascade_step;

typedef struct cascade_model {
    cascade_block *blocks;
    cascade_ctx cx;
    lin_layer txt, pooled, img; /* clip_txt_mapper, clip_txt_pooled_mapper, clip_img_mapper */
    int clf_w, clf_b;
    cascade_step step;
} cascade_model;

static cascade_model *cascade_of(model *m) { return m->impl; }

typedef struct builder {
    const model_config *cfg;
    cascade_model *d; /* NULL: only count */
    model *m;
    param_set *s;
    micro_walk w;
} builder;

static cascade_block *push(builder *b, cascade_role role, int64_t cout, bool reads_skip, bool emit)
{
    const int i = b->w.n;
    const int64_t cin = b->w.c, h = b->w.h, w = b->w.w, resample = b->cfg->cascade_resample;
    const int64_t ho = !resample ? h : role == SC_DOWN ? h / 2 : role == SC_UP ? 2 * h : h;
    const int64_t wo = !resample ? w : role == SC_DOWN ? w / 2 : role == SC_UP ? 2 * w : w;
    skip_io io;
    const int64_t cskip = micro_walk_next(&b->w, &io, cout, ho, wo, reads_skip, emit);
    if (!b->d) return NULL;
    cascade_block *u = &b->d->blocks[i];
    *u = (cascade_block){.m = b->m, .cx = &b->d->cx, .role = role, .cin = cin, .cout = cout, .h = h, .w = w,
                         .cskip = cskip, .io = io};
    return u;
}

static void reg_conv(builder *b, cascade_block *u, const char *prefix, int64_t in, int64_t out, int64_t k, bool t)
{
    char name[2 * PARAM_NAME_MAX];
    const bool full = !b->cfg->lora_rank;
    /* Conv2d (out, in, k, k); ConvTranspose2d (in, out, k, k) */
    const int64_t shape[4] = {t ? in : out, t ? out : in, k, k};
    u->conv_w = param_add(b->s, micro_name(name, sizeof name, prefix, "weight"), 4, shape, full);
    if (t && b->s->lyco_conv == u->conv_w + 1) b->s->lyco_conv = 0; /* the package adapts no ConvTranspose2d */
    u->conv_b = param_add(b->s, micro_name(name, sizeof name, prefix, "bias"), 1, (int64_t[]){out}, full);
}

/* level i's [ResBlock, TimestepBlock, AttnBlock] layers, blocks `<prefix>.<k>`; reads: the first ResBlock reads a
 * skip; emit: the last block's output is one */
static void layers(builder *b, const char *prefix, int i, bool reads, bool emit)
{
    const model_config *c = b->cfg;
    const int64_t C = c->unet_channels[i], n = c->unet_attn[i], r = c->lora_rank;
    const bool full = !r;
    const float alpha = (float)c->lora_alpha;
    const int64_t ra = c->lora_attention ? r : 0, rm = c->lora_mlp ? r : 0;
    char p[96], name[2 * PARAM_NAME_MAX];
    for (int64_t j = 0; j < n; j++)
        for (int t = 0; t < 3; t++) {
            const bool last = j == n - 1 && t == 2;
            snprintf(p, sizeof p, "%s.%lld", prefix, (long long)(3 * j + t));
            cascade_block *u = push(b, t == 0 ? SC_RES : t == 1 ? SC_TIME : SC_ATTN, C, reads && j == 0 && t == 0,
                                    emit && last);
            if (!u) continue;
            u->dropout = c->cascade_dropout[i];
            u->stream = rng_stream("cascade.dropout") + (uint64_t)(b->w.n - 1);
            param_set *s = b->s;
            if (t == 0) {
                u->dw = conv_register_depthwise(s, micro_name(name, sizeof name, p, "depthwise"), C, full);
                u->l1 = lin_register(s, micro_name(name, sizeof name, p, "channelwise.0"), C + u->cskip, 4 * C, true,
                                     rm, alpha, full);
                u->gamma = param_add(s, micro_name(name, sizeof name, p, "channelwise.2.gamma"), 4,
                                     (int64_t[]){1, 1, 1, 4 * C}, full);
                u->beta = param_add(s, micro_name(name, sizeof name, p, "channelwise.2.beta"), 4,
                                    (int64_t[]){1, 1, 1, 4 * C}, full);
                u->l2 = lin_register(s, micro_name(name, sizeof name, p, "channelwise.4"), 4 * C, C, true, rm, alpha,
                                     full);
            } else if (t == 1) {
                static const char *const mappers[CASCADE_TIME_CONDS] = {"mapper", "mapper_sca", "mapper_crp"};
                for (int k = 0; k < CASCADE_TIME_CONDS; k++)
                    u->map[k] = lin_register(s, micro_name(name, sizeof name, p, mappers[k]), c->time_channels, 2 * C,
                                             true, 0, 0.0f, full);
            } else {
                u->heads = c->unet_heads[i];
                u->kv = lin_register(s, micro_name(name, sizeof name, p, "kv_mapper.1"), c->unet_cross, C, true, 0,
                                     0.0f, full);
                u->q = lin_register(s, micro_name(name, sizeof name, p, "attention.to_q"), C, C, true, ra, alpha, full);
                u->k = lin_register(s, micro_name(name, sizeof name, p, "attention.to_k"), C, C, true, ra, alpha, full);
                u->v = lin_register(s, micro_name(name, sizeof name, p, "attention.to_v"), C, C, true, ra, alpha, full);
                u->o = lin_register(s, micro_name(name, sizeof name, p, "attention.to_out.0"), C, C, true, ra, alpha,
                                    full);
            }
        }
}

/* a scaler: LayerNorm then the convolution (its names: switch_level's UpDownBlock2d mapping, or a plain conv) */
static void scaler(builder *b, cascade_role role, int index, int64_t cout)
{
    const bool resample = b->cfg->cascade_resample, up = role == SC_UP;
    char p[96];
    if (resample) snprintf(p, sizeof p, "%s.%d.1", up ? "up_upscalers" : "down_downscalers", index);
    else snprintf(p, sizeof p, "%s.%d.1.blocks.%d", up ? "up_upscalers" : "down_downscalers", index, up);
    const int64_t cin = b->w.c;
    cascade_block *u = push(b, role, cout, false, false);
    if (u) reg_conv(b, u, p, cin, cout, resample ? 2 : 1, resample && up);
}

static void build(builder *b)
{
    const model_config *c = b->cfg;
    const int L = (int)c->unet_levels;
    char p[64];
    b->w.c = c->channels, b->w.h = c->height, b->w.w = c->width;
    cascade_block *e = push(b, SC_EMBED, c->unet_channels[0], false, false);
    if (e) reg_conv(b, e, "embedding.1", c->channels, c->unet_channels[0], 1, false);
    for (int i = 0; i < L; i++) {
        if (i > 0) scaler(b, SC_DOWN, i, c->unet_channels[i]);
        snprintf(p, sizeof p, "down_blocks.%d", i), layers(b, p, i, false, i < L - 1);
    }
    for (int u = 0; u < L; u++) {
        const int r = L - 1 - u;
        snprintf(p, sizeof p, "up_blocks.%d", u), layers(b, p, r, r < L - 1, false);
        if (r > 0) scaler(b, SC_UP, u, c->unet_channels[r - 1]);
    }
}

int64_t cascade_depth(const model_config *c)
{
    builder b = {.cfg = c};
    build(&b);
    return b.w.n;
}

static st_status cascade_create(model *m)
{
    const model_config *c = &m->cfg;
    cascade_model *d = m->impl;
    const int n = (int)cascade_depth(c);
    d->blocks = micro_seq_blocks(m, n, &cascade_block_kind, sizeof *d->blocks, "the latents (the embedding's input)");
    if (!d->blocks) return st_host_oom("%d Stable Cascade blocks", n);
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t Cc = c->unet_cross, S = c->clip_seq;
    d->pooled = lin_register(s, "clip_txt_pooled_mapper", c->pooled_dim, Cc * S, true, 0, 0.0f, full);
    d->txt = lin_register(s, "clip_txt_mapper", c->text_dim, Cc, true, 0, 0.0f, full);
    d->img = lin_register(s, "clip_img_mapper", c->image_dim, Cc * S, true, 0, 0.0f, full);
    build(&(builder){.cfg = c, .d = d, .m = m, .s = s});
    d->clf_w = param_add(s, "clf.1.weight", 4, (int64_t[]){c->channels, c->unet_channels[0], 1, 1}, full);
    d->clf_b = param_add(s, "clf.1.bias", 1, (int64_t[]){c->channels}, full);
    d->cx.tokens = c->text_len + 2 * S;
    return ST_OK;
}

/* StableCascadeUNet._init_weights: xavier-uniform linears and convolutions, zero biases; GRN's gamma and beta zero */
static const init_rule cascade_inits[] = {{INIT_ZERO, ".gamma|.beta"}, {0}};

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static void cascade_release(model *m)
{
    cascade_model *d = cascade_of(m);
    cascade_step *s = &d->step;
    op_state_release(&s->clip_ln), op_state_release(&s->head_ln);
    *s = (cascade_step){0};
    d->cx = (cascade_ctx){.tokens = d->cx.tokens};
}

/* get_timestep_ratio_embedding: r = ratio x 10000, half = D / 2, frequencies exp(-k log(10000) / (half - 1)),
 * [sin(r f), cos(r f)]; the ratio's, then sca's and crp's (0: sines 0, cosines 1). In double, as the fixtures'
 * reference computes it. */
static st_status ratio_embedding(void *arg) /* a host_loop's: the work (B, CASCADE_TIME_CONDS, time_channels) */
{
    model *m = ((model_loop *)arg)->m;
    const float *timesteps = ((model_loop *)arg)->timesteps;
    float *e = ((model_loop *)arg)->work;
    const int64_t B = m->shape.batch, D = m->cfg.time_channels;
    const int64_t half = D / 2;
    for (int64_t b = 0; b < B; b++)
        for (int k = 0; k < CASCADE_TIME_CONDS; k++) {
            const double r = k ? 0.0 : (double)timesteps[b] / 1000.0 * 10000.0; /* segtrain's timesteps are 1000 t */
            float *row = e + (b * CASCADE_TIME_CONDS + k) * D;
            for (int64_t j = 0; j < half; j++) {
                const double f = exp(-(double)j * log(10000.0) / (double)(half - 1));
                row[j] = (float)sin(r * f), row[half + j] = (float)cos(r * f);
            }
            if (D % 2) row[D - 1] = 0.0f;
        }
    return ST_OK;
}

/* the conditioning tokens (B, L + 2 S, Cc): [clip_txt_mapper(text); clip_txt_pooled_mapper(pooled) as S tokens;
 * clip_img_mapper(0) as S tokens], clip_norm, SiLU */
static st_status clip_forward(model *m, const float *cond, bool train)
{
    cascade_model *d = cascade_of(m);
    cascade_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = c->text_len, E = c->text_dim, P = c->pooled_dim, K = model_cond_len(c);
    const int64_t Cc = c->unet_cross, S = c->clip_seq, T = d->cx.tokens;
    st_status st = ST_OK;
    model_hold(m, &st, &s->text, B * L * E, "cascade.clip text", false);
    model_hold(m, &st, &s->pooled, B * P, "cascade.clip pooled", false);
    model_hold(m, &st, &s->zero_img, B * c->image_dim, "cascade.clip image (zero)", true);
    model_hold(m, &st, &s->raw, B * T * Cc, "cascade.clip tokens", false);
    model_hold(m, &st, &s->clip, B * T * Cc, "cascade.clip normed", false);
    model_hold(m, &st, &s->clip_s, B * T * Cc, "cascade.clip silu", false);
    if (train) model_hold(m, &st, &s->dclip_s, B * T * Cc, "cascade.dclip silu", true);
    scratch k = {.pool = m->pool};
    float *txt = scratch_take(&k, B * L * Cc, MEM_WORKSPACE, "cascade.clip text mapped");
    float *pool_map = scratch_take(&k, B * S * Cc, MEM_WORKSPACE, "cascade.clip pooled mapped");
    if (!st) st = k.status;
    if (!st) {
        copy_rows(s->text, L * E, cond, K, B, L * E);
        copy_rows(s->pooled, P, cond + L * E, K, B, P);
        st = lin_forward(m->params, m->pool, &d->txt, txt, s->text, B * L);
    }
    if (!st) copy_rows(s->raw, T * Cc, txt, L * Cc, B, L * Cc);
    if (!st) st = lin_forward(m->params, m->pool, &d->pooled, pool_map, s->pooled, B);
    if (!st) copy_rows(s->raw + L * Cc, T * Cc, pool_map, S * Cc, B, S * Cc);
    if (!st) st = lin_forward(m->params, m->pool, &d->img, pool_map, s->zero_img, B);
    if (!st) copy_rows(s->raw + (L + S) * Cc, T * Cc, pool_map, S * Cc, B, S * Cc);
    if (!st) st = layernorm_forward(m->pool, s->clip, s->raw, NULL, NULL, B * T, Cc, CASCADE_EPS, &s->clip_ln);
    if (!st) silu_forward(s->clip_s, s->clip, B * T * Cc);
    const st_status e = scratch_end(&k);
    d->cx.clip_s = s->clip_s, d->cx.dclip_s = s->dclip_s;
    return st ? st : e;
}

static st_status clip_backward(model *m)
{
    cascade_model *d = cascade_of(m);
    cascade_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = c->text_len, Cc = c->unet_cross, S = c->clip_seq, T = d->cx.tokens;
    scratch k = {.pool = m->pool};
    float *dclip = scratch_take_zero(&k, B * T * Cc, MEM_WORKSPACE, "cascade.dclip");
    float *draw = scratch_take_zero(&k, B * T * Cc, MEM_WORKSPACE, "cascade.dclip tokens");
    float *part = scratch_take(&k, B * (L > S ? L : S) * Cc, MEM_WORKSPACE, "cascade.dclip part");
    if (k.status) return scratch_end(&k);
    silu_backward(dclip, s->dclip_s, s->clip, B * T * Cc);
    layernorm_backward(draw, NULL, NULL, dclip, s->raw, NULL, B * T, Cc, &s->clip_ln);
    copy_rows(part, L * Cc, draw, T * Cc, B, L * Cc);
    k.status = lin_backward(m->params, m->pool, &d->txt, NULL, part, s->text, B * L);
    copy_rows(part, S * Cc, draw + L * Cc, T * Cc, B, S * Cc);
    if (!k.status) k.status = lin_backward(m->params, m->pool, &d->pooled, NULL, part, s->pooled, B);
    copy_rows(part, S * Cc, draw + (L + S) * Cc, T * Cc, B, S * Cc);
    if (!k.status) k.status = lin_backward(m->params, m->pool, &d->img, NULL, part, s->zero_img, B);
    return scratch_end(&k);
}

static conv_shape head_conv(const model *m)
{
    const model_config *c = &m->cfg;
    return (conv_shape){.batch = m->shape.batch, .in = c->unet_channels[0], .h = c->height, .w = c->width,
                        .out = c->channels, .kh = 1, .kw = 1, .sh = 1, .sw = 1};
}

/* clf: the norm over the channels (kept: its output, which the convolution's backward reads, and statistics) */
static st_status head_forward(model *m, const float *h)
{
    cascade_model *d = cascade_of(m);
    cascade_step *s = &d->step;
    const conv_shape cs = head_conv(m);
    const int64_t B = cs.batch, C = cs.in, HW = cs.h * cs.w, N = B * HW;
    st_status st = ST_OK;
    model_hold(m, &st, &s->n, N * C, "cascade.clf norm", false);
    model_hold(m, &st, &s->pred, B * cs.out * HW, "cascade.pred", false);
    scratch k = {.pool = m->pool};
    float *t = scratch_take(&k, N * C, MEM_WORKSPACE, "cascade.clf tokens");
    float *n = scratch_take(&k, N * C, MEM_WORKSPACE, "cascade.clf normed tokens");
    if (!st) st = k.status;
    if (!st) transpose_batched(t, h, B, C, HW);
    if (!st) st = layernorm_forward(m->pool, n, t, NULL, NULL, N, C, CASCADE_EPS, &s->head_ln);
    if (!st) transpose_batched(s->n, n, B, HW, C);
    if (!st) st = conv2d_forward(m->pool, s->pred, s->n, PW(d->clf_w), PW(d->clf_b), &cs);
    const st_status e = scratch_end(&k);
    return st ? st : e;
}

static st_status head_backward(model *m, const float *h, const float *dpred, float *dh)
{
    cascade_model *d = cascade_of(m);
    cascade_step *s = &d->step;
    const conv_shape cs = head_conv(m);
    const int64_t B = cs.batch, C = cs.in, HW = cs.h * cs.w, N = B * HW;
    scratch k = {.pool = m->pool};
    float *dn = scratch_take_zero(&k, N * C, MEM_WORKSPACE, "cascade.dclf norm");
    float *t = scratch_take(&k, N * C, MEM_WORKSPACE, "cascade.clf tokens");
    float *g = scratch_take(&k, N * C, MEM_WORKSPACE, "cascade.dclf tokens");
    float *dt = scratch_take_zero(&k, N * C, MEM_WORKSPACE, "cascade.dclf input");
    if (k.status) return scratch_end(&k);
    k.status = conv2d_backward(m->pool, dn, PG(d->clf_w), PG(d->clf_b), dpred, s->n, PW(d->clf_w), &cs);
    if (!k.status) {
        transpose_batched(t, h, B, C, HW);
        transpose_batched(g, dn, B, C, HW);
        layernorm_backward(dt, NULL, NULL, g, t, NULL, N, C, &s->head_ln);
        transpose_batched(dh, dt, B, HW, C);
    }
    return scratch_end(&k);
}

static st_status cascade_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                                 const float **pred)
{
    cascade_model *d = cascade_of(m);
    cascade_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch;
    st_status st = ST_OK;
    model_hold(m, &st, &s->r_embed, B * CASCADE_TIME_CONDS * c->time_channels, "cascade.time embeddings", false);
    model_loop loop = {.m = m, .timesteps = timesteps, .work = s->r_embed};
    if (!st) st = host_loop(s->r_embed, ratio_embedding, &loop);
    if (!st) {
        d->cx.r_embed = s->r_embed, d->cx.train = train, d->cx.dropout_seed = m->dropout_seed;
        st = clip_forward(m, cond, train);
    }
    if (!st) st = micro_seq_forward(m, x, train, head_forward);
    if (!st) *pred = s->pred;
    return st;
}

static st_status cascade_backward(model *m, const float *dpred)
{
    float *dh;
    st_status st = micro_seq_backward(m, dpred, head_backward, &dh);
    if (!st) st = clip_backward(m);
    pool_free(m->pool, dh);
    return st;
}

/* ---- the family's descriptor (family.h) ---- */

/* plan's line: its levels' widths and layers */
static void cascade_describe(const model_config *mc, const char *grid, int64_t batch, char *buf, size_t n)
{
    char levels[160] = "";
    for (int64_t l = 0, at = 0; l < mc->unet_levels; l++)
        at += snprintf(levels + at, sizeof levels - (size_t)at, "%s%lld x %lld", l ? ", " : "",
                       (long long)mc->unet_attn[l], (long long)mc->unet_channels[l]);
    snprintf(buf, n, "model %s (%s): %lld micro-blocks, levels of [ResBlock, TimestepBlock, AttnBlock] layers %s wide; "
             "%lld + %lld conditioning tokens, %s, %s attention; batch %lld", mc->preset, mc->family,
             (long long)mc->depth, levels, (long long)mc->text_len, (long long)(2 * mc->clip_seq), grid,
             mc->mechanism == ATTN_MATH ? "math" : "flash", (long long)batch);
}

static const family_preset presets[] = {
    /* Stable Cascade's stage C (stabilityai/stable-cascade-prior's prior/config.json, and prior_lite/ for lite): two
     * levels of 2048 channels (1536), 8 and 24 [ResBlock, TimestepBlock, AttnBlock] layers (4 and 12) of 32 heads (24),
     * one resolution (switch_level [false]), conditioning 2048 wide from CLIP-G's 1280 at 77 tokens, its pooled 1280
     * and a zero CLIP image embedding 768, 4 tokens each; 16 latent channels, 24 x 24 at 1024 px (42.67 px a latent
     * pixel: vae_scale 42). The rest in its preset hook below; the tiny one is the fixture's. */
    {"stable-cascade-tiny", 0, 16, 1, 1, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"stable-cascade-c", 0, 2048, 1, 1, 16, 24, 10, 0, 77, 1280, 1280, false, false, 0, 0},
    {"stable-cascade-c-lite", 0, 1536, 1, 1, 16, 24, 10, 0, 77, 1280, 1280, false, false, 0, 0},
};

static void cascade_preset(model_config *mc, const char *name, bool tiny)
{
    const bool lite = strstr(name, "lite") != NULL;
    const int64_t C = mc->hidden;
    mc->unet_levels = 2, mc->unet_cross = tiny ? 16 : 2048, mc->clip_seq = tiny ? 2 : 4;
    mc->time_channels = tiny ? 8 : 64, mc->image_dim = tiny ? 8 : 768, mc->vae_scale = tiny ? 8 : 42;
    const int64_t ch[2] = {C, tiny ? 24 : C}, n[2] = {tiny ? 1 : lite ? 4 : 8, tiny ? 2 : lite ? 12 : 24};
    for (int l = 0; l < 2; l++) /* the published dropout; the fixture's 0 */
        mc->unet_channels[l] = ch[l], mc->unet_attn[l] = n[l], mc->unet_heads[l] = tiny ? 2 : C / 64,
        mc->cascade_dropout[l] = tiny ? 0.0f : 0.1f;
    mc->depth = cascade_depth(mc);
}

/* Stable Cascade's sizes: what cascade.c builds */
static st_status cascade_check(const model_config *mc)
{
    const int64_t L = mc->unet_levels;
    bool ok = L >= 1 && L <= UNET_LEVELS_MAX && mc->clip_seq >= 1 && mc->clip_seq <= 64 && mc->unet_cross >= 1 &&
              mc->unet_cross <= (1 << 20) && mc->time_channels >= 2 && mc->time_channels <= 65536 &&
              mc->time_channels % 2 == 0 && mc->pooled_dim >= 1 && mc->image_dim >= 1 && mc->patch == 1 &&
              mc->frames == 1 && !mc->out_channels && mc->hidden == mc->unet_channels[0] &&
              (!mc->cascade_resample || (mc->height % ((int64_t)1 << (L - 1)) == 0 && mc->width % ((int64_t)1 << (L - 1)) == 0));
    for (int64_t i = 0; ok && i < L; i++)
        ok = mc->cascade_dropout[i] >= 0 && mc->cascade_dropout[i] < 1 && mc->unet_channels[i] >= 1 &&
             mc->unet_channels[i] <= (1 << 16) && mc->unet_heads[i] >= 1 &&
             mc->unet_channels[i] % mc->unet_heads[i] == 0 && mc->unet_attn[i] >= 1 && mc->unet_attn[i] <= 64;
    if (ok) return ST_OK;
    return st_fail(ST_ERR_INVALID, "block_out_channels: %lld levels (%lld, %lld, %lld, %lld) with heads (%lld, %lld, "
                   "%lld, %lld), conditioning_dim %lld, clip_seq %lld, timestep_ratio_embedding_dim %lld, latent "
                   "%lld x %lld; stable_cascade takes 1 to %d levels of 1 to 65536 channels that each level's heads divide, 1 "
                   "to 64 layers a level, dropout in [0, 1), conditioning of 1 to 2^20, 1 to 64 clip tokens, even time "
                   "sinusoids of 2 to "
                   "65536, pooled and image widths of at least 1, hidden_size block_out_channels[0], 1 x 1 patches, "
                   "1 frame, and with resampling scalers latent edges that halve evenly", (long long)L,
                   (long long)mc->unet_channels[0], (long long)mc->unet_channels[1], (long long)mc->unet_channels[2],
                   (long long)mc->unet_channels[3], (long long)mc->unet_heads[0], (long long)mc->unet_heads[1],
                   (long long)mc->unet_heads[2], (long long)mc->unet_heads[3], (long long)mc->unet_cross,
                   (long long)mc->clip_seq, (long long)mc->time_channels, (long long)mc->height,
                   (long long)mc->width, UNET_LEVELS_MAX);
}

/* A list of n whole numbers at key, all equal to want (absent or null: the class's default, which is that) */
static st_status all_equal(const cJSON *j, const char *file, const char *key, int n, int64_t want, const char *what)
{
    int64_t v[UNET_LEVELS_MAX];
    for (int i = 0; i < n; i++) v[i] = want;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && !cJSON_IsArray(x))
        return st_fail(ST_ERR_FORMAT, "%s: %s is not a list of %d", file, key, n);
    st_status st = unet_json_levels(j, file, key, n, v);
    for (int i = 0; !st && i < n; i++)
        if (v[i] != want)
            st = st_fail(ST_ERR_UNSUPPORTED, "%s: %s[%d] is %lld; segtrain builds %s with %lld", file, key, i,
                         (long long)v[i], what, (long long)want);
    return st;
}

/* StableCascadeUNet's config.json: the class defaults (stage C's), then the file's values; stage B's inputs, other
 * block layouts and bilinear resampling are refused by name */
static st_status cascade_from_json(const cJSON *j, const char *file, model_config *mc)
{
    const char *U = "StableCascadeUNet";
    int64_t ch[UNET_LEVELS_MAX] = {2048, 2048}, heads[UNET_LEVELS_MAX] = {32, 32}, down[UNET_LEVELS_MAX] = {8, 24};
    int64_t up[UNET_LEVELS_MAX] = {24, 8}, out = 16, patch = 1, kernel = 3, pooled = 1280, text = 0, image = 0;
    int64_t cond = 2048, seq = 4, ratio = 64;
    mc->channels = 16;
    int L = 2;
    st_status st = unet_json_count(j, file, &L);
    if (!st) st = unet_json_levels(j, file, "block_out_channels", L, ch);
    if (!st) st = unet_json_levels(j, file, "num_attention_heads", L, heads);
    if (!st) st = unet_json_levels(j, file, "down_num_layers_per_block", L, down);
    if (!st) st = unet_json_levels(j, file, "up_num_layers_per_block", L, up);
    const json_key keys[] = {{"in_channels", &mc->channels}, {"out_channels", &out}, {"patch_size", &patch},
                             {"kernel_size", &kernel}, {"clip_text_pooled_in_channels", &pooled},
                             {"clip_text_in_channels", &text}, {"clip_image_in_channels", &image},
                             {"conditioning_dim", &cond}, {"clip_seq", &seq}, {"timestep_ratio_embedding_dim", &ratio}};
    if (!st) st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    for (int i = 0; !st && i < L; i++)
        if (down[i] < 1 || down[i] > 64) /* cascade_depth walks them: checked before it */
            st = st_fail(ST_ERR_INVALID, "%s: down_num_layers_per_block is %lld at level %d; segtrain builds 1 to 64 "
                         "layers a level", file, (long long)down[i], i);
    for (int i = 0; !st && i < L; i++)
        if (up[i] != down[L - 1 - i])
            st = st_fail(ST_ERR_UNSUPPORTED, "%s: up_num_layers_per_block[%d] is %lld; segtrain builds the mirror of "
                         "down_num_layers_per_block (%lld)", file, i, (long long)up[i], (long long)down[L - 1 - i]);
    if (!st) st = all_equal(j, file, "down_blocks_repeat_mappers", L, 1, U);
    if (!st) st = all_equal(j, file, "up_blocks_repeat_mappers", L, 1, U);
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(j, "block_types_per_layer");
    for (int i = 0; !st && cJSON_IsArray(types) && i < cJSON_GetArraySize(types); i++) {
        const cJSON *t = cJSON_GetArrayItem(types, i);
        static const char *const want[3] = {"SDCascadeResBlock", "SDCascadeTimestepBlock", "SDCascadeAttnBlock"};
        bool same = cJSON_IsArray(t) && cJSON_GetArraySize(t) == 3;
        for (int k = 0; same && k < 3; k++)
            same = cJSON_IsString(cJSON_GetArrayItem(t, k)) && !strcmp(cJSON_GetArrayItem(t, k)->valuestring, want[k]);
        if (!same)
            st = st_fail(ST_ERR_UNSUPPORTED, "%s: block_types_per_layer[%d] is not [SDCascadeResBlock, "
                         "SDCascadeTimestepBlock, SDCascadeAttnBlock], the only layer segtrain builds", file, i);
    }
    if (!st && types && !cJSON_IsNull(types) && (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != L))
        st = st_fail(ST_ERR_FORMAT, "%s: block_types_per_layer is not a list of %d layers", file, L);
    /* dropout: a number for every level, or one each; the class's default (0.1, 0.1) */
    double dropout[UNET_LEVELS_MAX] = {0.1, 0.1, 0.1, 0.1};
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(j, "dropout");
    if (!st && drop && !cJSON_IsNull(drop) && cJSON_IsArray(drop) && cJSON_GetArraySize(drop) != L)
        st = st_fail(ST_ERR_FORMAT, "%s: dropout has %d entries; block_out_channels has %d levels", file,
                     cJSON_GetArraySize(drop), L);
    for (int i = 0; !st && drop && !cJSON_IsNull(drop) && i < L; i++) {
        const cJSON *x = cJSON_IsArray(drop) ? cJSON_GetArrayItem(drop, i) : drop;
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < 1))
            st = st_fail(ST_ERR_FORMAT, "%s: dropout is not a number in [0, 1) or a list of them", file);
        else dropout[i] = x->valuedouble;
    }
    if (!st) st = json_fixed_bool(j, file, "self_attn", true, U);
    if (!st) st = json_fixed(j, file, "patch_size", 1, U);
    if (!st) st = json_fixed(j, file, "kernel_size", 3, U);
    static const char *const nulls[] = {"effnet_in_channels", "pixel_mapper_in_channels"};
    for (size_t i = 0; !st && i < sizeof nulls / sizeof *nulls; i++)
        st = unet_json_null(j, file, nulls[i], "stage B's EfficientNet and pixel inputs are not built");
    const cJSON *tct = cJSON_GetObjectItemCaseSensitive(j, "timestep_conditioning_type");
    if (!st && tct && !cJSON_IsNull(tct) &&
        !(cJSON_IsArray(tct) && cJSON_GetArraySize(tct) == 2 && cJSON_IsString(cJSON_GetArrayItem(tct, 0)) &&
          !strcmp(cJSON_GetArrayItem(tct, 0)->valuestring, "sca") && cJSON_IsString(cJSON_GetArrayItem(tct, 1)) &&
          !strcmp(cJSON_GetArrayItem(tct, 1)->valuestring, "crp")))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: timestep_conditioning_type is not [\"sca\", \"crp\"], the only one "
                     "segtrain builds", file);
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(j, "switch_level");
    bool resample = !sw || cJSON_IsNull(sw);
    for (int i = 0; !st && !resample && i < (cJSON_IsArray(sw) ? cJSON_GetArraySize(sw) : 1); i++)
        if (!cJSON_IsArray(sw) || !cJSON_IsFalse(cJSON_GetArrayItem(sw, i)))
            st = st_fail(ST_ERR_UNSUPPORTED, "%s: switch_level holds true (bilinear resampling); segtrain builds "
                         "null (2 x 2 stride-2 scalers) or false (1 x 1 mappings)", file);
    if (!st && (!text || !image))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: clip_text_in_channels %lld, clip_image_in_channels %lld; segtrain "
                     "builds stage C's text and image mappers (both set)", file, (long long)text, (long long)image);
    if (!st && out != mc->channels)
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, in_channels %lld; segtrain builds a prediction of "
                     "the input's shape", file, (long long)out, (long long)mc->channels);
    if (st) return st;
    mc->unet_levels = L;
    for (int i = 0; i < UNET_LEVELS_MAX; i++)
        mc->unet_channels[i] = i < L ? ch[i] : 0, mc->unet_heads[i] = i < L ? heads[i] : 0,
        mc->unet_attn[i] = i < L ? down[i] : 0;
    mc->hidden = ch[0], mc->heads = 1, mc->patch = 1, mc->patch_t = 1, mc->out_channels = 0, mc->text_dim = text;
    mc->pooled_dim = pooled, mc->image_dim = image, mc->unet_cross = cond, mc->clip_seq = seq;
    mc->time_channels = ratio, mc->cascade_resample = resample;
    for (int i = 0; i < UNET_LEVELS_MAX; i++) mc->cascade_dropout[i] = i < L ? (float)dropout[i] : 0.0f;
    mc->depth = cascade_depth(mc);
    return ST_OK;
}

/* SDCascadeAttnBlock's attention is diffusers' Attention; stage C has no FeedForward (its ResBlocks' channelwise
 * MLP is a Sequential) */
static const lyco_class cascade_lycoris_classes[] = {{"Attention", "attention"}, {"FeedForward", ""}, {NULL, NULL}};

const family_desc stable_cascade_desc = {
    .name = "stable_cascade", .topology = TOPO_UNET,
    .traits = TR_TEXT | TR_UPSTREAM_EPSILON,
    .st = {{.name = "stable_cascade", .title = "Stable Cascade (Stage C)", .diffusers = "StableCascadeUNet",
            .flavours = "stage-c|stage-c-lite",
            .built = "stage-c:stable-cascade-c|stage-c-lite:stable-cascade-c-lite", .fallback = "stage-c",
            .example = "cascade-stage-c.lycoris-lokr.json", .tiny = "stable-cascade-tiny"}},
    .lora_component = "unet", .describe = cascade_describe, FAMILY_PRESETS(presets), .preset = cascade_preset,
    .readers = {{"StableCascadeUNet", cascade_from_json}}, .fields = F_CASCADE | F_IMAGE_DIM, .check = cascade_check,
    .ops = &(const model_family){.create = cascade_create, .impl_size = sizeof(cascade_model),
                                 .forward = cascade_forward, .backward = cascade_backward, .release = cascade_release,
                                 .inits = cascade_inits},
    .lycoris_classes = cascade_lycoris_classes,
};
