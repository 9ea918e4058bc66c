/* The U-Net families (sd1x, sdxl, kolors): diffusers' UNet2DConditionModel as one sequence of micro-blocks
 * (unet_block.c), conv_in first, then each down block's ResnetBlock2Ds and Transformer2DModels and its
 * Downsample2D, the mid block's, then each up block's (one ResnetBlock2D more, each reading a skip) and its
 * Upsample2D. Around the sequence: the time embedding (Timesteps with cosines first, TimestepEmbedding; SDXL's and
 * Kolors' added conditions added to it), whose SiLU every ResnetBlock2D's time_emb_proj reads, Kolors' text
 * projection, and the head (conv_norm_out, SiLU, conv_out). Checkpointing's interval and stride count micro-blocks,
 * as SimpleTuner's Stable Cascade counts its Res / Timestep / Attention blocks. */
#include "models/core/family.h"
#include "models/unet/unet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct unet_step {
    float *n, *pred;    /* the head's GroupNorm output (kept) and the prediction */
    op_state gn;        /* the head's GroupNorm statistics */
} unet_step;

typedef struct unet_model {
    unet_block *blocks;
    xformer_layer *layers;
    temb t;
    temb add;          /* sdxl, kolors: add_embedding, of the pooled text and the size ids' sinusoids */
    lin_layer text_proj; /* kolors: encoder_hid_proj */
    float *raw_text;     /* kolors: the text as given, text_proj's input */
    int out_norm_w, out_norm_b;
    conv_layer conv_out;
    unet_step step;
} unet_model;

static unet_model *unet_of(model *m) { return m->impl; }

const lyco_class unet_lycoris_classes[] = {
    {"Attention", "attn1 attn2"},        {"FeedForward", "ff"},           {"Transformer2DModel", "attentions"},
    {"ResnetBlock2D", "resnets"},        {"Downsample2D", "downsamplers"}, {"Upsample2D", "upsamplers"},
    {NULL, NULL}};

/* sdxl's size ids a sample: original size, crop top-left, target size (each height, width), in pixels */
#define UNET_TIME_IDS 6

const unet_options *unet_options_of(const model_config *mc)
{
    static const unet_options sd1x = {0};
    const unet_options *o = family_options(mc);
    return o ? o : &sd1x;
}

static bool added_conditions(const model_config *c) { return unet_options_of(c)->added; }

static int add(param_set *s, const char *prefix, const char *name, int ndim, const int64_t *shape, bool trainable)
{
    char full[2 * PARAM_NAME_MAX];
    return param_add(s, micro_name(full, sizeof full, prefix, name), ndim, shape, trainable);
}

static void reg_norm(param_set *s, const char *prefix, int64_t c, bool trainable, int *w, int *b)
{
    *w = add(s, prefix, "weight", 1, (int64_t[]){c}, trainable);
    *b = add(s, prefix, "bias", 1, (int64_t[]){c}, trainable);
}

/* proj_in / proj_out: a Linear, or a 1 x 1 Conv2d (the same matrix; its LoCon adapter lin's LoRA product on the
 * tokens, its LoHa or full lin's own) without use_linear_projection */
static lin_layer reg_proj(param_set *s, const char *prefix, int64_t c, bool linear, bool trainable)
{
    if (linear) return lin_register(s, prefix, c, c, true, 0, 0.0f, trainable);
    const conv_layer k = conv_register(s, prefix, c, c, 1, trainable);
    return (lin_layer){.w = k.w, .b = k.b, .lora_a = k.down, .lora_b = k.up, .in = c, .out = c, .rank = k.rank,
                       .scale = k.scale, .lyco = k.lyco};
}

static void reg_res(param_set *s, unet_block *u, const char *prefix, const model_config *c, bool full)
{
    char name[2 * PARAM_NAME_MAX];
    const int64_t ci = u->cin + u->cskip, co = u->cout;
    reg_norm(s, micro_name(name, sizeof name, prefix, "norm1"), ci, full, &u->norm1_w, &u->norm1_b);
    u->conv1 = conv_register(s, micro_name(name, sizeof name, prefix, "conv1"), ci, co, 3, full);
    u->temb =
        lin_register(s, micro_name(name, sizeof name, prefix, "time_emb_proj"), c->hidden, co, true, 0, 0.0f, full);
    reg_norm(s, micro_name(name, sizeof name, prefix, "norm2"), co, full, &u->norm2_w, &u->norm2_b);
    u->conv2 = conv_register(s, micro_name(name, sizeof name, prefix, "conv2"), co, co, 3, full);
    u->shortcut = (conv_layer){.w = -1, .b = -1, .down = -1, .up = -1};
    if (ci != co) u->shortcut = conv_register(s, micro_name(name, sizeof name, prefix, "conv_shortcut"), ci, co, 1, full);
}

static void reg_attn(param_set *s, unet_block *u, const char *prefix, const model_config *c, bool full)
{
    char name[2 * PARAM_NAME_MAX];
    const int64_t C = u->cin, r = c->lora_rank;
    const float alpha = (float)c->lora_alpha;
    const int64_t ra = c->lora_attention ? r : 0, rm = c->lora_mlp ? r : 0;
    reg_norm(s, micro_name(name, sizeof name, prefix, "norm"), C, full, &u->norm_w, &u->norm_b);
    u->proj_in = reg_proj(s, micro_name(name, sizeof name, prefix, "proj_in"), C, c->unet_linear, full);
    for (int64_t l = 0; l < u->layers; l++) {
        xformer_layer *x = &u->xl[l];
        char p[PARAM_NAME_MAX + 32];
#define LIN(field, sub, in, out, bias, rank)                                                                           \
    (x->field = lin_register(s, micro_name(name, sizeof name, p, sub), in, out, bias, rank, alpha, !r))
        if (snprintf(p, sizeof p, "%s.transformer_blocks.%lld", prefix, (long long)l) >= (int)sizeof p) p[0] = '\0';
        reg_norm(s, micro_name(name, sizeof name, p, "norm1"), C, full, &x->n1w, &x->n1b);
        LIN(q, "attn1.to_q", C, C, false, ra), LIN(k, "attn1.to_k", C, C, false, ra);
        LIN(v, "attn1.to_v", C, C, false, ra), LIN(o, "attn1.to_out.0", C, C, true, ra);
        reg_norm(s, micro_name(name, sizeof name, p, "norm2"), C, full, &x->n2w, &x->n2b);
        const int64_t X = c->unet_cross ? c->unet_cross : c->text_dim; /* what the cross-attention reads */
        LIN(q2, "attn2.to_q", C, C, false, ra), LIN(k2, "attn2.to_k", X, C, false, ra);
        LIN(v2, "attn2.to_v", X, C, false, ra), LIN(o2, "attn2.to_out.0", C, C, true, ra);
        reg_norm(s, micro_name(name, sizeof name, p, "norm3"), C, full, &x->n3w, &x->n3b);
        LIN(ff1, "ff.net.0.proj", C, 8 * C, true, rm), LIN(ff2, "ff.net.2", 4 * C, C, true, rm);
#undef LIN
    }
    u->proj_out = reg_proj(s, micro_name(name, sizeof name, prefix, "proj_out"), C, c->unet_linear, full);
}

/* The micro-blocks in order, sizes and skips included; with s, their parameters too (state_dict order does not
 * matter: files load by name). Returns the count. */
typedef struct builder {
    const model_config *cfg;
    unet_model *d; /* NULL: only count */
    model *m;
    param_set *s;
    micro_walk w;
    int64_t layers_used;
} builder;

static unet_block *push(builder *b, unet_role role, int64_t cout, bool reads_skip, bool emit)
{
    const int i = b->w.n;
    const int64_t cin = b->w.c, h = b->w.h, w = b->w.w;
    const int64_t ho = role == UNET_DOWN ? (h + 1) / 2 : role == UNET_UP ? 2 * h : h; /* a stride-2 3 x 3 conv's */
    const int64_t wo = role == UNET_DOWN ? (w + 1) / 2 : role == UNET_UP ? 2 * w : w;
    skip_io io;
    const int64_t cskip = micro_walk_next(&b->w, &io, cout, ho, wo, reads_skip, emit);
    if (!b->d) return NULL;
    unet_block *u = &b->d->blocks[i];
    *u = (unet_block){.m = b->m, .role = role, .cin = cin, .cout = cout, .h = h, .w = w, .cskip = cskip, .io = io};
    return u;
}

static void res(builder *b, const char *prefix, int64_t cout, bool reads_skip, bool emit)
{
    unet_block *u = push(b, UNET_RES, cout, reads_skip, emit);
    if (u) reg_res(b->s, u, prefix, &b->m->cfg, !b->m->cfg.lora_rank);
}

static void attn(builder *b, const char *prefix, int64_t heads, int64_t layers, bool emit)
{
    unet_block *u = push(b, UNET_ATTN, b->w.c, false, emit);
    if (u) {
        u->heads = heads, u->layers = layers, u->xl = b->d->layers + b->layers_used;
        reg_attn(b->s, u, prefix, &b->m->cfg, !b->m->cfg.lora_rank);
    }
    b->layers_used += layers;
}

static void conv(builder *b, unet_role role, const char *prefix, int64_t cout, bool emit)
{
    unet_block *u = push(b, role, cout, false, emit);
    if (u) u->conv1 = conv_register(b->s, prefix, u->cin, cout, 3, !b->m->cfg.lora_rank);
}

static void build(builder *b)
{
    const model_config *c = b->cfg;
    const int L = (int)c->unet_levels, n = (int)c->unet_layers;
    const int64_t *ch = c->unet_channels, *heads = c->unet_heads, *at = c->unet_attn;
    char p[64];
    b->w.c = c->channels, b->w.h = c->height, b->w.w = c->width;
    conv(b, UNET_CONV_IN, "conv_in", ch[0], true);
    for (int i = 0; i < L; i++) {
        for (int j = 0; j < n; j++) {
            snprintf(p, sizeof p, "down_blocks.%d.resnets.%d", i, j), res(b, p, ch[i], false, !at[i]);
            if (at[i]) snprintf(p, sizeof p, "down_blocks.%d.attentions.%d", i, j), attn(b, p, heads[i], at[i], true);
        }
        if (i < L - 1)
            snprintf(p, sizeof p, "down_blocks.%d.downsamplers.0.conv", i), conv(b, UNET_DOWN, p, ch[i], true);
    }
    res(b, "mid_block.resnets.0", ch[L - 1], false, false);
    if (c->unet_mid) attn(b, "mid_block.attentions.0", heads[L - 1], c->unet_mid, false);
    res(b, "mid_block.resnets.1", ch[L - 1], false, false);
    for (int i = 0; i < L; i++) {
        const int r = L - 1 - i;
        for (int j = 0; j <= n; j++) {
            snprintf(p, sizeof p, "up_blocks.%d.resnets.%d", i, j), res(b, p, ch[r], true, false);
            if (at[r]) snprintf(p, sizeof p, "up_blocks.%d.attentions.%d", i, j), attn(b, p, heads[r], at[r], false);
        }
        if (i < L - 1) snprintf(p, sizeof p, "up_blocks.%d.upsamplers.0.conv", i), conv(b, UNET_UP, p, ch[r], false);
    }
}

int64_t unet_depth(const model_config *c)
{
    builder b = {.cfg = c};
    build(&b);
    return b.w.n;
}

static st_status unet_create(model *m)
{
    const model_config *c = &m->cfg;
    unet_model *d = m->impl;
    builder count = {.cfg = c};
    build(&count);
    if (count.w.overflow || count.w.skips)
        return st_fail(ST_ERR_UNSUPPORTED, "block_out_channels, layers_per_block: %lld levels of %lld ResnetBlock2Ds "
                       "hold more than %d skips at once (or leave some unread)", (long long)c->unet_levels,
                       (long long)c->unet_layers, STATE_MAX - 1);
    const int n = count.w.n;
    d->blocks = micro_seq_blocks(m, n, &unet_block_kind, sizeof *d->blocks, "the latents (conv_in's input)");
    d->layers = model_alloc(m, (size_t)(count.layers_used ? count.layers_used : 1), sizeof *d->layers);
    if (!d->blocks || !d->layers) return st_host_oom("%d U-Net blocks", n);
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    temb_register_at(s, &d->t, "time_embedding", c->unet_channels[0], c->hidden, true, full);
    if (added_conditions(c))
        temb_register_at(s, &d->add, "add_embedding", c->pooled_dim + UNET_TIME_IDS * c->time_channels, c->hidden,
                         true, full);
    if (c->unet_cross)
        d->text_proj = lin_register(s, "encoder_hid_proj", c->text_dim, c->unet_cross, true, 0, 0.0f, full);
    build(&(builder){.cfg = c, .d = d, .m = m, .s = s});
    reg_norm(s, "conv_norm_out", c->unet_channels[0], full, &d->out_norm_w, &d->out_norm_b);
    d->conv_out = conv_register(s, "conv_out", c->unet_channels[0], c->channels, 3, full);
    return ST_OK;
}

static const init_rule unet_inits[] = {{INIT_ONE, "norm&.weight$"}, {0}};

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static void unet_release(model *m)
{
    unet_model *d = unet_of(m);
    unet_step *s = &d->step;
    op_state_release(&s->gn);
    *s = (unet_step){0};
}

static conv_shape head_conv(const model *m)
{
    const model_config *c = &m->cfg;
    return (conv_shape){.batch = m->shape.batch, .in = c->unet_channels[0], .h = c->height, .w = c->width,
                        .out = c->channels, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1};
}

/* pred = conv_out(SiLU(conv_norm_out(h))); keeps the norm's output and statistics */
static st_status head_forward(model *m, const float *h)
{
    unet_model *d = unet_of(m);
    const model_config *c = &m->cfg;
    const conv_shape cs = head_conv(m);
    const int64_t HW = c->height * c->width, n = cs.batch * cs.in * HW;
    st_status st = ST_OK;
    model_hold(m, &st, &d->step.n, n, "unet.out_norm", false);
    model_hold(m, &st, &d->step.pred, cs.batch * cs.out * HW, "unet.pred", false);
    scratch k = {.pool = m->pool};
    float *a = scratch_take(&k, n, MEM_WORKSPACE, "unet.out_silu");
    if (!st) st = k.status;
    if (!st) st = groupnorm_forward(m->pool, d->step.n, h, PW(d->out_norm_w), PW(d->out_norm_b), cs.batch, cs.in, HW,
                                    c->norm_groups, (float)c->norm_eps, &d->step.gn);
    if (!st) silu_forward(a, d->step.n, n);
    if (!st) st = conv_layer_forward(m->params, m->pool, &d->conv_out, d->step.pred, a, &cs);
    const st_status e = scratch_end(&k);
    return st ? st : e;
}

static st_status head_backward(model *m, const float *h, const float *dpred, float *dh)
{
    unet_model *d = unet_of(m);
    const model_config *c = &m->cfg;
    const conv_shape cs = head_conv(m);
    const int64_t HW = c->height * c->width, n = cs.batch * cs.in * HW;
    scratch k = {.pool = m->pool};
    float *a = scratch_take(&k, n, MEM_WORKSPACE, "unet.out_silu");
    float *da = scratch_take_zero(&k, n, MEM_WORKSPACE, "unet.dout_silu");
    float *dn = scratch_take_zero(&k, n, MEM_WORKSPACE, "unet.dout_norm");
    if (k.status) return scratch_end(&k);
    silu_forward(a, d->step.n, n);
    st_status st = conv_layer_backward(m->params, m->pool, &d->conv_out, da, dpred, a, &cs);
    if (!st) silu_backward(dn, da, d->step.n, n);
    if (!st) st = groupnorm_backward(m->pool, dh, PG(d->out_norm_w), PG(d->out_norm_b), dn, h, PW(d->out_norm_w),
                                     cs.batch, cs.in, HW, c->norm_groups, &d->step.gn);
    const st_status e = scratch_end(&k);
    return st ? st : e;
}

/* SDXL's aug_emb, added to the time embedding: add_embedding([text_embeds, add_time_proj(time_ids)]), the pooled
 * text and the size ids after the text in each sample's conditioning */
static st_status added_forward(model *m, const float *cond)
{
    unet_model *d = unet_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, P = c->pooled_dim, F = c->time_channels, K = model_cond_len(c);
    const int64_t at = c->text_len * c->text_dim, in = P + UNET_TIME_IDS * F;
    scratch k = {.pool = m->pool};
    float *ids = scratch_take(&k, B * UNET_TIME_IDS, MEM_WORKSPACE, "unet.time_ids");
    float *sin = scratch_take(&k, B * UNET_TIME_IDS * F, MEM_WORKSPACE, "unet.time_ids sinusoids");
    if (k.status) return scratch_end(&k);
    copy_rows(ids, UNET_TIME_IDS, cond + at + P, K, B, UNET_TIME_IDS);
    timestep_embedding(sin, ids, B * UNET_TIME_IDS, F, 10000.0);
    copy_rows(d->add.freq, in, cond + at, K, B, P);
    copy_rows(d->add.freq + P, in, sin, UNET_TIME_IDS * F, B, UNET_TIME_IDS * F);
    k.status = temb_mlp_forward(m, &d->add);
    if (!k.status) add_to(d->t.c, d->add.c, B * c->hidden);
    return scratch_end(&k);
}

static st_status unet_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                              const float **pred)
{
    unet_model *d = unet_of(m);
    unet_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = c->text_len, E = c->text_dim, K = model_cond_len(c);
    const int64_t X = c->unet_cross ? c->unet_cross : E;
    st_status st = ST_OK;
    model_hold(m, &st, &m->ctx.text, B * L * X, "unet.text", false);
    if (c->unet_cross) { /* Kolors' projected text; its gradient only where the projection trains */
        model_hold(m, &st, &d->raw_text, B * L * E, "unet.text (encoder's)", false);
        if (train && lin_trains_weight(m->params, &d->text_proj))
            model_hold(m, &st, &m->ctx.dtext, B * L * X, "unet.dtext", true);
    }
    temb_take(m, &d->t, &st, train);
    if (added_conditions(c)) temb_take_path(m, &d->add, &st);
    if (!st) {
        copy_rows(d->raw_text ? d->raw_text : m->ctx.text, L * E, cond, K, B, L * E);
        if (d->raw_text) st = lin_forward(m->params, m->pool, &d->text_proj, m->ctx.text, d->raw_text, B * L);
        if (!st) temb_forward(m, &d->t, timesteps);
        if (!st && added_conditions(c)) st = added_forward(m, cond);
    }
    if (!st) silu_forward(m->ctx.cs, d->t.c, B * c->hidden);
    if (!st) st = micro_seq_forward(m, x, train, head_forward);
    if (!st) *pred = s->pred;
    return st;
}

static st_status unet_backward(model *m, const float *dpred)
{
    unet_model *d = unet_of(m);
    const int64_t B = m->shape.batch;
    float *dh;
    st_status st = micro_seq_backward(m, dpred, head_backward, &dh);
    if (!st) { /* dL/dc through SiLU, into the time embedding */
        scratch k = {.pool = m->pool};
        float *dc = scratch_take_zero(&k, B * m->cfg.hidden, MEM_WORKSPACE, "unet.dc");
        if (!k.status) k.status = temb_silu_backward(m, &d->t, dc, m->ctx.dcs);
        if (!k.status && added_conditions(&m->cfg)) k.status = temb_backward(m, &d->add, dc);
        if (!k.status && m->ctx.dtext) /* Kolors' projection, from every cross-attention's keys and values */
            k.status = lin_backward(m->params, m->pool, &d->text_proj, NULL, m->ctx.dtext, d->raw_text,
                                    B * m->cfg.text_len);
        st = scratch_end(&k);
    }
    pool_free(m->pool, dh);
    return st;
}

const model_family unet_family = {
    .create = unet_create, .impl_size = sizeof(unet_model), .forward = unet_forward, .backward = unet_backward,
    .release = unet_release, .inits = unet_inits,
};

void unet_describe(const model_config *mc, const char *grid, int64_t batch, char *buf, size_t n)
{
    char levels[160] = "";
    for (int64_t l = 0, at = 0; l < mc->unet_levels; l++)
        at += snprintf(levels + at, sizeof levels - (size_t)at, "%s%lld%s", l ? ", " : "",
                       (long long)mc->unet_channels[l], mc->unet_attn[l] ? "" : " (no attention)");
    snprintf(buf, n, "model %s (%s): U-Net of %lld micro-blocks, levels of %s channels, %lld ResnetBlock2Ds a down "
             "block; %lld text tokens of %lld, %s, %s attention; batch %lld", mc->preset, mc->family,
             (long long)mc->depth, levels, (long long)mc->unet_layers, (long long)mc->text_len,
             (long long)mc->text_dim, grid, mc->mechanism == ATTN_MATH ? "math" : "flash", (long long)batch);
}

/* sd1x's, sdxl's and kolors' presets beyond their sizes; the tiny ones are the fixtures' */
void unet_preset(model_config *mc, const char *name, bool tiny)
{
    const bool xl = unet_options_of(mc)->added;
    static const int64_t ch[4][UNET_LEVELS_MAX] = {{320, 640, 1280, 1280}, {8, 16, 24}, {320, 640, 1280},
                                                   {8, 16, 24}};
    static const int64_t at[4][UNET_LEVELS_MAX] = {{1, 1, 1, 0}, {1, 1, 0}, {0, 2, 10}, {0, 1, 2}};
    static const int64_t heads[4][UNET_LEVELS_MAX] = {{8, 8, 8, 8}, {2, 2, 2}, {5, 10, 20}, {2, 2, 2}};
    const int k = 2 * xl + tiny;
    mc->unet_levels = xl || tiny ? 3 : 4, mc->unet_layers = tiny ? 1 : 2, mc->unet_mid = at[k][2] + !xl;
    mc->norm_groups = tiny ? 4 : 32, mc->norm_eps = 1e-5, mc->unet_linear = xl;
    mc->time_channels = xl ? (tiny ? 8 : 256) : 0;
    mc->unet_cross = !unet_options_of(mc)->text_proj ? 0 : tiny ? 16 : 2048;
    for (int l = 0; l < UNET_LEVELS_MAX; l++)
        mc->unet_channels[l] = ch[k][l], mc->unet_attn[l] = at[k][l], mc->unet_heads[l] = heads[k][l];
    mc->depth = unet_depth(mc);
}

/* The U-Net's sizes: what unet.c builds (sd1x, sdxl and kolors' check hook) */
st_status unet_check(const model_config *mc)
{
    const int64_t L = mc->unet_levels, g = mc->norm_groups;
    bool ok = L >= 1 && L <= UNET_LEVELS_MAX && mc->unet_layers >= 1 && mc->unet_layers <= 8 && mc->unet_mid >= 0 &&
              mc->unet_mid <= 64 && g >= 1 && mc->norm_eps > 0 && mc->norm_eps < 1 && mc->patch == 1 &&
              mc->frames == 1 && !mc->out_channels && mc->hidden == 4 * mc->unet_channels[0] &&
              mc->height % ((int64_t)1 << (L - 1)) == 0 && mc->width % ((int64_t)1 << (L - 1)) == 0 &&
              (!unet_options_of(mc)->added ? !mc->pooled_dim && !mc->time_channels
                                           : mc->pooled_dim >= 1 && mc->time_channels >= 2 &&
                                                 mc->time_channels % 2 == 0 && mc->time_channels <= 65536) &&
              (!unet_options_of(mc)->text_proj ? !mc->unet_cross : mc->unet_cross >= 1 && mc->unet_cross <= (1 << 20));
    for (int64_t i = 0; ok && i < L; i++)
        ok = mc->unet_channels[i] >= 1 && mc->unet_channels[i] <= (1 << 16) && mc->unet_channels[i] % g == 0 &&
             mc->unet_heads[i] >= 1 && mc->unet_channels[i] % mc->unet_heads[i] == 0 && mc->unet_attn[i] >= 0 &&
             mc->unet_attn[i] <= 64;
    if (ok) return ST_OK;
    return st_fail(ST_ERR_INVALID, "block_out_channels: %lld levels (%lld, %lld, %lld, %lld) with heads (%lld, %lld, "
                   "%lld, %lld), layers_per_block %lld, norm_num_groups %lld, norm_eps %g, latent %lld x %lld; %s takes 1 "
                   "to %d levels of 1 to 65536 channels that the groups and each level's heads divide, 1 to 8 layers "
                   "a block, 0 to 64 transformer blocks an attention, an eps in (0, 1), latent edges that halve "
                   "evenly at every level, time_embed_dim 4 x block_out_channels[0], 1 x 1 patches, 1 frame (sdxl, "
                   "kolors: a pooled text of at least 1 and even size-id sinusoids of 2 to 65536, sd1x neither; "
                   "kolors: a text projection to 1 to 2^20)",
                   (long long)L, (long long)mc->unet_channels[0], (long long)mc->unet_channels[1],
                   (long long)mc->unet_channels[2], (long long)mc->unet_channels[3], (long long)mc->unet_heads[0],
                   (long long)mc->unet_heads[1], (long long)mc->unet_heads[2], (long long)mc->unet_heads[3],
                   (long long)mc->unet_layers, (long long)g, mc->norm_eps, (long long)mc->height, (long long)mc->width, mc->family,
                   UNET_LEVELS_MAX);
}
