/* LTX-2 (ltxvideo2, docs/FAMILIES.md): diffusers' LTX2VideoTransformer3DModel as LTX-2.0 configures it, in its
 * names and layouts. Two streams run through every block (ltx2_block.c): the video's latents in 1 x 1 x 1 patches
 * through proj_in, the audio's latents (channels last, one token a latent frame) through audio_proj_in. Each stream
 * has its own prompt (the Gemma connectors' states through caption_projection or audio_caption_projection: linear,
 * GELU tanh, linear), its own adaLN-single (time_embed, audio_time_embed: the timestep's embedding c, and six rows
 * linear(SiLU(c))), cross-modal rows (av_cross_attn_*_scale_shift: four, av_cross_attn_*_gate: one, each its own
 * embedding of the same timestep) and final layer (LayerNorm without affine, modulated by scale_shift_table + c,
 * then proj_out). The prompt's padding is an additive -10000 key bias in both streams' cross-attention.
 *
 * Rotary positions as LTX2AudioVideoRotaryPosEmbed makes them with rope_type "split": a token's coordinates are the
 * midpoints of its patch's pixel bounds (video: frames shifted for the causal first frame and divided by the frame
 * rate, 25 as SimpleTuner's default; audio: seconds of its mel frames), over the base grid (20 for time, 2048 in
 * space), and angle k of axis a is (2 g_a - 1) theta^(k / (n - 1)) pi / 2. The sample is the video's latents then
 * the audio's (model.h); the prediction has the same layout. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/xattn/ltx2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LTX2_MASK_BIAS -10000.0f
#define LTX2_ROPE_THETA 10000.0
#define LTX2_FPS 25.0f           /* SimpleTuner's default framerate, as it passes fps */
#define LTX2_BASE_FRAMES 20.0f   /* pos_embed_max_pos, audio_pos_embed_max_pos */
#define LTX2_BASE_EDGE 2048.0f   /* base_height, base_width */
#define LTX2_VAE_T 8.0f          /* vae_scale_factors (8, 32, 32) */
#define LTX2_VAE_S 32.0f
#define LTX2_AUDIO_SCALE 4.0f    /* audio_scale_factor */
#define LTX2_AUDIO_HOP 160.0f    /* audio_hop_length */
#define LTX2_AUDIO_RATE 16000.0f /* audio_sampling_rate */

/* A stream's timestep paths: c = its embedding, mod = linear(SiLU(c)) into ltx2_ctx's rows */
enum { PATH_TIME, PATH_CA, PATH_GATE, PATHS };

typedef struct ltx2_model {
    ltx2_block *blocks;
    ltx2_ctx ctx;
    int in_w[2], in_b[2];       /* proj_in, audio_proj_in */
    lin_layer cap1[2], cap2[2]; /* caption_projection, audio_caption_projection */
    temb t[2][PATHS];           /* time_embed, av_cross_attn_*_scale_shift, av_cross_attn_*_gate: their embeddings */
    lin_layer lin[2][PATHS];    /* ... and their linears */
    int table[2];               /* scale_shift_table, audio_scale_shift_table (2, w) */
    int out_w[2], out_b[2];     /* proj_out, audio_proj_out */
    /* a step */
    float *in[2], *x0[2], *text_in[2], *cap_h[2], *cap_g[2], *cs[2][PATHS], *rows[2][PATHS], *key_bias;
    float *fin_mod[2], *fin_ln[2], *fin_h[2], *pred;
    op_state fin_stats[2];
    attn_mask mask;
} ltx2_model;

static ltx2_model *lx_of(model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static int64_t width(const model *m, int s) { return s ? m->cfg.audio_hidden : m->cfg.hidden; }
static int64_t tokens(const model *m, int s) { return s ? model_audio_tokens(&m->cfg) : m->shape.tokens; }
static int64_t channels(const model *m, int s) { return s ? m->cfg.audio_channels : m->cfg.channels; }
static int64_t path_rows(int p) { return p == PATH_TIME ? 6 : p == PATH_CA ? 4 : 1; }

static st_status lx_create(model *m)
{
    const model_config *c = &m->cfg;
    ltx2_model *d = m->impl;
    const int n = (int)c->depth;
    d->blocks = model_seq_blocks(m, 0, "transformer_blocks", n, &ltx2_block_kind, sizeof *d->blocks);
    if (!d->blocks) return st_host_oom("the LTX-2 model");
    m->seq[0].state_n = 2; /* the video's tokens and the audio's */
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t Ct = c->text_dim / 2;
    static const char *const stream[2] = {"", "audio_"};
    static const char *const path[2][PATHS] = {
        {"time_embed", "av_cross_attn_video_scale_shift", "av_cross_attn_video_a2v_gate"},
        {"audio_time_embed", "av_cross_attn_audio_scale_shift", "av_cross_attn_audio_v2a_gate"}};
    char n1[96], n2[96];
    /* in the order of the class's state_dict */
    for (int st = 0; st < 2; st++) {
        const int64_t w = width(m, st);
        snprintf(n1, sizeof n1, "%sproj_in.weight", stream[st]);
        snprintf(n2, sizeof n2, "%sproj_in.bias", stream[st]);
        d->in_w[st] = param_add(s, n1, 2, (int64_t[]){w, channels(m, st)}, full);
        d->in_b[st] = param_add(s, n2, 1, (int64_t[]){w}, full);
    }
    for (int st = 0; st < 2; st++) {
        const int64_t w = width(m, st);
        snprintf(n1, sizeof n1, "%scaption_projection.linear_1", stream[st]);
        snprintf(n2, sizeof n2, "%scaption_projection.linear_2", stream[st]);
        d->cap1[st] = lin_register(s, n1, Ct, w, true, 0, 0, full);
        d->cap2[st] = lin_register(s, n2, w, w, true, 0, 0, full);
    }
    for (int p = 0; p < PATHS; p++)
        for (int st = 0; st < 2; st++) {
            const int64_t w = width(m, st);
            snprintf(n1, sizeof n1, "%s.emb.timestep_embedder", path[st][p]);
            temb_register_at(s, &d->t[st][p], n1, DIT_FREQ_DIM, w, true, full);
            snprintf(n1, sizeof n1, "%s.linear", path[st][p]);
            d->lin[st][p] = lin_register(s, n1, w, path_rows(p) * w, true, 0, 0, full);
        }
    for (int st = 0; st < 2; st++) {
        snprintf(n1, sizeof n1, "%sscale_shift_table", stream[st]);
        d->table[st] = param_add(s, n1, 2, (int64_t[]){2, width(m, st)}, full);
    }
    for (int i = 0; i < n; i++) {
        ltx2_block *b = &d->blocks[i];
        *b = (ltx2_block){.m = m, .ctx = &d->ctx};
        ltx2_block_register(s, b, i, c);
    }
    for (int st = 0; st < 2; st++) {
        snprintf(n1, sizeof n1, "%sproj_out.weight", stream[st]);
        snprintf(n2, sizeof n2, "%sproj_out.bias", stream[st]);
        d->out_w[st] = param_add(s, n1, 2, (int64_t[]){channels(m, st), width(m, st)}, full);
        d->out_b[st] = param_add(s, n2, 1, (int64_t[]){channels(m, st)}, full);
    }
    d->ctx.tokens[0] = m->shape.tokens, d->ctx.tokens[1] = model_audio_tokens(c);
    return ST_OK;
}

static void lx_set_batch(model *m, int64_t batch)
{
    m->shape.batch = batch;
    for (int s = 0; s < 2; s++) m->seq[0].state_numel[s] = batch * tokens(m, s) * width(m, s);
}

static void lx_release(model *m)
{
    ltx2_model *d = lx_of(m);
    ltx2_ctx *x = &d->ctx;
    for (int s = 0; s < 2; s++) op_state_release(&d->fin_stats[s]);
    x->cross[1] = NULL; /* self[1], which the step held */
    x->mask = NULL;
}

/* ---- rotary tables ---- */

/* Table (tokens, w / 2, (cos, sin)) from each token's n_axes grid values g (as fractions of the base grid): the
 * (w / 2 - n_axes k) leading pairs pass through (cos 1, sin 0), then pair pass + n_axes j + a turns by
 * (2 g_a - 1) f_j, f_j = theta^(j / (k - 1)) pi / 2 for j < k = w / (2 n_axes): f in double, rounded once, the rest
 * in float as torch computes it (its angles reach theta pi / 2, where float64 angles would differ by far more). */
static void rope_fill(float *table, const float *g, int64_t T, int n_axes, int64_t w)
{
    const int64_t k = w / (2 * n_axes), pairs = w / 2, pass = pairs - n_axes * k;
    const double step = k > 1 ? 1.0 / (double)(k - 1) : 0.0, half_pi = 3.14159265358979323846 / 2.0;
    for (int64_t t = 0; t < T; t++) {
        float *e = table + t * pairs * 2;
        for (int64_t p = 0; p < pass; p++) e[2 * p] = 1.0f, e[2 * p + 1] = 0.0f;
        for (int64_t j = 0; j < k; j++) { /* torch.linspace's j-th point: from the nearer end */
            const double lin = j < k / 2 ? (double)j * step : 1.0 - (double)(k - 1 - j) * step;
            const float f = (float)(pow(LTX2_ROPE_THETA, lin) * half_pi);
            for (int a = 0; a < n_axes; a++) {
                const float ang = (g[t * n_axes + a] * 2.0f - 1.0f) * f;
                float *q = e + 2 * (pass + j * n_axes + a);
                q[0] = (float)cos((double)ang);
                q[1] = (float)sin((double)ang);
            }
        }
    }
}

/* A video token's (frame, row, column) grid values: its patch's pixel bounds, the frame's shifted for the causal
 * first frame (+ 1 - 8, at least 0) and in seconds, their midpoints over (20, 2048, 2048). */
static void video_grid(float *g, int64_t F, int64_t rows, int64_t cols)
{
    for (int64_t t = 0; t < F * rows * cols; t++) {
        const int64_t pos[3] = {t / (rows * cols), t / cols % rows, t % cols};
        float lo = (float)pos[0] * LTX2_VAE_T + 1.0f - LTX2_VAE_T;
        float hi = (float)(pos[0] + 1) * LTX2_VAE_T + 1.0f - LTX2_VAE_T;
        lo = (lo > 0.0f ? lo : 0.0f) / LTX2_FPS, hi = (hi > 0.0f ? hi : 0.0f) / LTX2_FPS;
        g[3 * t] = (lo + hi) / 2.0f / LTX2_BASE_FRAMES;
        for (int a = 1; a < 3; a++)
            g[3 * t + a] = ((float)pos[a] * LTX2_VAE_S + (float)(pos[a] + 1) * LTX2_VAE_S) / 2.0f / LTX2_BASE_EDGE;
    }
}

/* An audio token's time: its mel frames' bounds (4 a latent, shifted as the video's), in seconds, over 20. */
static void audio_grid(float *g, int64_t T)
{
    for (int64_t t = 0; t < T; t++) {
        float lo = (float)t * LTX2_AUDIO_SCALE + 1.0f - LTX2_AUDIO_SCALE;
        float hi = (float)(t + 1) * LTX2_AUDIO_SCALE + 1.0f - LTX2_AUDIO_SCALE;
        lo = (lo > 0.0f ? lo : 0.0f) * LTX2_AUDIO_HOP / LTX2_AUDIO_RATE;
        hi = (hi > 0.0f ? hi : 0.0f) * LTX2_AUDIO_HOP / LTX2_AUDIO_RATE;
        g[t] = (lo + hi) / 2.0f / LTX2_BASE_FRAMES;
    }
}

/* The rotary tables from their position grids, in work (3 Tv + Tv + Ta floats: the video's (t, h, w) grid, its times
 * alone, the audio's) */
static st_status rope_tables(model *m, const float *cond, float *work) /* a model_host_loop's */
{
    ltx2_ctx *x = &lx_of(m)->ctx;
    const model_config *c = &m->cfg;
    const int64_t Tv = x->tokens[0], Ta = x->tokens[1];
    float *gv = work, *gt = gv + 3 * Tv, *ga = gt + Tv;
    video_grid(gv, c->frames, grid_rows(c), grid_cols(c));
    for (int64_t t = 0; t < Tv; t++) gt[t] = gv[3 * t]; /* the cross-modal tables read time alone */
    audio_grid(ga, Ta);
    rope_fill(x->self[0], gv, Tv, 3, c->hidden);
    rope_fill(x->self[1], ga, Ta, 1, c->audio_hidden);
    rope_fill(x->cross[0], gt, Tv, 1, c->audio_hidden);
    return ST_OK;
}

/* ---- forward ---- */

/* The prompts, the key mask, the timestep paths' rows, the rotary tables, and the tokens of both streams. */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    ltx2_model *d = lx_of(m);
    ltx2_ctx *ctx = &d->ctx;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, Ct = c->text_dim / 2, K = model_cond_len(c);
    const int64_t per = model_sample_numel(c), Nvid = model_loss_numel(c);
    st_status st = ST_OK;
    for (int s = 0; s < 2; s++) {
        const int64_t w = width(m, s), N = B * tokens(m, s);
        model_hold(m, &st, &d->in[s], N * channels(m, s), "ltx2.tokens_in", false);
        model_hold(m, &st, &d->x0[s], N * w, "ltx2.state", false);
        model_hold(m, &st, &d->text_in[s], B * L * Ct, "ltx2.text_in", false);
        model_hold(m, &st, &d->cap_h[s], B * L * w, "ltx2.text_projection", false);
        model_hold(m, &st, &d->cap_g[s], B * L * w, "ltx2.text_projection", false);
        model_hold(m, &st, &ctx->text[s], B * L * w, "ltx2.text", false);
        model_hold(m, &st, &ctx->mod[s], B * 6 * w, "ltx2.modulation", false);
        model_hold(m, &st, &ctx->ca[s], B * 5 * w, "ltx2.cross_modulation", false);
        model_hold(m, &st, &d->fin_mod[s], B * 2 * w, "ltx2.final_modulation", false);
        if (train) {
            model_hold(m, &st, &ctx->dtext[s], B * L * w, "ltx2.dtext", true);
            model_hold(m, &st, &ctx->dmod[s], B * 6 * w, "ltx2.dmodulation", true);
            model_hold(m, &st, &ctx->dca[s], B * 5 * w, "ltx2.dcross_modulation", true);
        }
        for (int p = 0; p < PATHS; p++) {
            temb_take_path(m, &d->t[s][p], &st);
            model_hold(m, &st, &d->cs[s][p], B * w, "ltx2.silu_c", false);
            model_hold(m, &st, &d->rows[s][p], B * path_rows(p) * w, "ltx2.rows", false);
        }
        model_hold(m, &st, &ctx->self[s], tokens(m, s) * width(m, s), "ltx2.rope", false);
    }
    /* the cross-modal tables: the video's time over the audio width; the audio's is its self-attention's (the same
     * width, base grid and heads) */
    model_hold(m, &st, &ctx->cross[0], tokens(m, 0) * c->audio_hidden, "ltx2.rope", false);
    ctx->cross[1] = ctx->self[1];
    model_hold(m, &st, &d->key_bias, B * L, "ltx2.key_bias", false);
    if (st) return st;
    if ((st = model_host_loop(m, ctx->self[0], rope_tables, NULL, 4 * tokens(m, 0) + tokens(m, 1), "ltx2.grid")))
        return st;
    /* the video's tokens from each sample's first Nvid floats; the audio's are its latents as they lie */
    float *video = NULL;
    if ((st = pool_alloc(m->pool, (size_t)(B * Nvid) * sizeof(float), MEM_WORKSPACE, "ltx2.video", (void **)&video)))
        return st;
    copy_rows(video, Nvid, x, per, B, Nvid);
    const patch_shape ps = model_patches(m);
    patchify_forward(d->in[0], video, &ps);
    pool_free(m->pool, video);
    const int64_t Na = tokens(m, 1) * c->audio_channels;
    copy_rows(d->in[1], Na, x + Nvid, per, B, Na);
    for (int s = 0; s < 2; s++)
        linear_forward(d->x0[s], d->in[s], PW(d->in_w[s]), PW(d->in_b[s]), B * tokens(m, s), channels(m, s),
                       width(m, s));
    /* the prompts: linear_2(gelu_tanh(linear_1(states))), the video's states then the audio's in a token's row */
    for (int s = 0; s < 2 && !st; s++) {
        const int64_t w = width(m, s);
        for (int64_t b = 0; b < B; b++) copy_rows(d->text_in[s] + b * L * Ct, Ct, cond + b * K + s * Ct, 2 * Ct, L, Ct);
        if ((st = lin_forward(m->params, m->pool, &d->cap1[s], d->cap_h[s], d->text_in[s], B * L))) break;
        gelu_forward(d->cap_g[s], d->cap_h[s], B * L * w);
        st = lin_forward(m->params, m->pool, &d->cap2[s], ctx->text[s], d->cap_g[s], B * L);
    }
    if (st) return st;
    /* (1 - mask) * -10000, as the class makes a 2-D mask a bias */
    mask_bias(d->key_bias, cond + L * c->text_dim, B, L, K, LTX2_MASK_BIAS);
    d->mask = (attn_mask){.key_bias = d->key_bias, .batch_stride = L};
    ctx->mask = &d->mask;
    /* every path: c from the timestep, rows = linear(SiLU(c)); the final layer's table + time_embed's c */
    for (int s = 0; s < 2 && !st; s++) {
        const int64_t w = width(m, s);
        for (int p = 0; p < PATHS && !st; p++) {
            if ((st = temb_forward(m, &d->t[s][p], timesteps))) break;
            silu_forward(d->cs[s][p], d->t[s][p].c, B * w);
            st = lin_forward(m->params, m->pool, &d->lin[s][p], d->rows[s][p], d->cs[s][p], B);
        }
        if (st) break;
        copy_rows(ctx->mod[s], 6 * w, d->rows[s][PATH_TIME], 6 * w, B, 6 * w);
        copy_rows(ctx->ca[s], 5 * w, d->rows[s][PATH_CA], 4 * w, B, 4 * w);
        copy_rows(ctx->ca[s] + 4 * w, 5 * w, d->rows[s][PATH_GATE], w, B, w);
        for (int64_t b = 0; b < B; b++) {
            float *rows = d->fin_mod[s] + b * 2 * w;
            copy_rows(rows, w, d->t[s][PATH_TIME].c + b * w, 0, 2, w);
            add_to(rows, PW(d->table[s]), 2 * w);
        }
    }
    return st;
}

/* Both streams' final layers into the prediction: proj_out(LN(x) (1 + scale) + shift), the video's unpacked. */
static st_status final_forward_both(model *m, const block_state *last)
{
    ltx2_model *d = lx_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, per = model_sample_numel(c), Nvid = model_loss_numel(c);
    st_status st = ST_OK;
    model_hold(m, &st, &d->pred, B * per, "pred", false);
    for (int s = 0; s < 2; s++) {
        const int64_t w = width(m, s), N = B * tokens(m, s);
        model_hold(m, &st, &d->fin_ln[s], N * w, "ltx2.final.ln", false);
        model_hold(m, &st, &d->fin_h[s], N * w, "ltx2.final.h", false);
    }
    if (st) return st;
    scratch k = {.pool = m->pool};
    for (int s = 0; s < 2 && !k.status; s++) {
        const int64_t w = width(m, s), T = tokens(m, s), N = B * T, C = channels(m, s);
        if ((k.status = layernorm_forward(m->pool, d->fin_ln[s], last->t[s], NULL, NULL, N, w, DIT_LN_EPS,
                                          &d->fin_stats[s])))
            break;
        modulate_forward(d->fin_h[s], d->fin_ln[s], d->fin_mod[s], d->fin_mod[s] + w, B, T, w, 2 * w);
        float *out = scratch_take(&k, N * C, MEM_WORKSPACE, "ltx2.final.out");
        if (k.status) break;
        linear_forward(out, d->fin_h[s], PW(d->out_w[s]), PW(d->out_b[s]), N, w, C);
        if (s) copy_rows(d->pred + Nvid, per, out, T * C, B, T * C);
        else {
            float *video = scratch_take(&k, B * Nvid, MEM_WORKSPACE, "ltx2.final.video");
            if (k.status) break;
            const patch_shape ps = model_patches(m);
            unpatchify_forward(video, out, &ps, PATCH_CONV);
            copy_rows(d->pred, per, video, Nvid, B, Nvid);
            scratch_drop(&k, video);
        }
        scratch_drop(&k, out);
    }
    return scratch_end(&k);
}

static st_status lx_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    ltx2_model *d = lx_of(m);
    st_status st = embed_forward(m, x, timesteps, cond, train);
    if (!st) {
        block_state first = {.n = 2, .t = {d->x0[0], d->x0[1]}};
        d->x0[0] = d->x0[1] = NULL; /* the executor owns them now */
        st = model_seq_forward(m, 0, &first, train, NULL);
    }
    if (!st) st = final_forward_both(m, &m->step.last);
    if (st) return st;
    *pred = d->pred;
    return ST_OK;
}

/* ---- backward ---- */

/* dL/d(each stream's last state) from dpred through the final layers; their weights' and tables' gradients, and
 * dc[s] (B, w) for time_embed's c. */
static st_status final_backward_both(model *m, const float *dpred, const block_state *last, float *dx[2], float *dc[2])
{
    ltx2_model *d = lx_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, per = model_sample_numel(c), Nvid = model_loss_numel(c);
    scratch k = {.pool = m->pool};
    for (int s = 0; s < 2 && !k.status; s++) {
        const int64_t w = width(m, s), T = tokens(m, s), N = B * T, C = channels(m, s);
        float *dout = scratch_take_zero(&k, N * C, MEM_WORKSPACE, "ltx2.final.dout"); /* unpatchify_backward adds */
        float *dh = scratch_take_zero(&k, N * w, MEM_WORKSPACE, "ltx2.final.dh");
        float *dmod = scratch_take_zero(&k, B * 2 * w, MEM_WORKSPACE, "ltx2.final.dmod");
        if (k.status) break;
        if (s) copy_rows(dout, T * C, dpred + Nvid, per, B, T * C);
        else {
            float *video = scratch_take(&k, B * Nvid, MEM_WORKSPACE, "ltx2.final.dvideo");
            if (k.status) break;
            copy_rows(video, Nvid, dpred, per, B, Nvid);
            const patch_shape ps = model_patches(m);
            unpatchify_backward(dout, video, &ps, PATCH_CONV);
            scratch_drop(&k, video);
        }
        linear_backward(dh, PG(d->out_w[s]), PG(d->out_b[s]), dout, d->fin_h[s], PW(d->out_w[s]), N, w, C);
        modulate_backward(dh, dmod, dmod + w, dh, d->fin_ln[s], d->fin_mod[s] + w, B, T, w, 2 * w);
        layernorm_backward(dx[s], NULL, NULL, dh, last->t[s], NULL, N, w, &d->fin_stats[s]);
        for (int64_t b = 0; b < B; b++) {
            add_to(dc[s] + b * w, dmod + b * 2 * w, w);
            add_to(dc[s] + b * w, dmod + b * 2 * w + w, w);
            if (PG(d->table[s])) add_to(PG(d->table[s]), dmod + b * 2 * w, 2 * w);
        }
        scratch_drop(&k, dmod), scratch_drop(&k, dh), scratch_drop(&k, dout);
    }
    return scratch_end(&k);
}

/* The embeddings' gradients: input projections, prompt projections, every timestep path. */
static st_status embed_backward(model *m, const block_state *grad, float *dc_final[2])
{
    ltx2_model *d = lx_of(m);
    ltx2_ctx *ctx = &d->ctx;
    const int64_t B = m->shape.batch, L = m->shape.text;
    scratch k = {.pool = m->pool};
    for (int s = 0; s < 2 && !k.status; s++) {
        const int64_t w = width(m, s);
        linear_backward(NULL, PG(d->in_w[s]), PG(d->in_b[s]), grad->t[s], d->in[s], PW(d->in_w[s]), B * tokens(m, s),
                        channels(m, s), w);
        float *dg = scratch_take_zero(&k, B * L * w, MEM_WORKSPACE, "ltx2.dtext_projection");
        if (k.status) break;
        if ((k.status = lin_backward(m->params, m->pool, &d->cap2[s], dg, ctx->dtext[s], d->cap_g[s], B * L))) break;
        gelu_backward(dg, dg, d->cap_h[s], B * L * w);
        if ((k.status = lin_backward(m->params, m->pool, &d->cap1[s], NULL, dg, d->text_in[s], B * L))) break;
        scratch_drop(&k, dg);
        for (int p = 0; p < PATHS && !k.status; p++) {
            const int64_t r = path_rows(p);
            float *drows = scratch_take(&k, B * r * w, MEM_WORKSPACE, "ltx2.drows");
            float *dcs = scratch_take_zero(&k, B * w, MEM_WORKSPACE, "ltx2.dsilu_c");
            float *dc = scratch_take_zero(&k, B * w, MEM_WORKSPACE, "ltx2.dc");
            if (k.status) break;
            if (p == PATH_TIME) copy_rows(drows, 6 * w, ctx->dmod[s], 6 * w, B, 6 * w);
            else copy_rows(drows, r * w, ctx->dca[s] + (p == PATH_CA ? 0 : 4 * w), 5 * w, B, r * w);
            if ((k.status = lin_backward(m->params, m->pool, &d->lin[s][p], dcs, drows, d->cs[s][p], B))) break;
            silu_backward(dc, dcs, d->t[s][p].c, B * w);
            if (p == PATH_TIME) add_to(dc, dc_final[s], B * w);
            k.status = temb_backward(m, &d->t[s][p], dc);
            scratch_drop(&k, dc), scratch_drop(&k, dcs), scratch_drop(&k, drows);
        }
    }
    return scratch_end(&k);
}

static st_status lx_backward(model *m, const float *dpred)
{
    ltx2_model *d = lx_of(m);
    const int64_t B = m->shape.batch;
    st_status st = ST_OK;
    float *dx[2], *dc[2];
    for (int s = 0; s < 2; s++) {
        dx[s] = model_take(m, &st, B * tokens(m, s) * width(m, s), "ltx2.dstate", true);
        dc[s] = model_take(m, &st, B * width(m, s), "ltx2.dc_final", true);
    }
    if (!st) st = final_backward_both(m, dpred, &m->step.last, dx, dc);
    for (int s = 0; s < 2; s++) {
        op_state_release(&d->fin_stats[s]);
        pool_free(m->pool, d->fin_ln[s]), pool_free(m->pool, d->fin_h[s]);
        d->fin_ln[s] = d->fin_h[s] = NULL;
    }
    state_free(m->pool, &m->step.last);
    block_state grad = {.n = 2, .t = {dx[0], dx[1]}};
    if (!st) st = model_seq_backward(m, 0, &grad); /* grad becomes dL/dx0 */
    if (!st) st = embed_backward(m, &grad, dc);
    pool_free(m->pool, dc[1]), pool_free(m->pool, dc[0]);
    state_free(m->pool, &grad);
    return st;
}

/* segtrain's own initialisation, for training from scratch (a checkpoint replaces it): the blocks start as
 * identities (the adaLN linears, the tables and the output projections zero), the timestep embeddings N(0, 0.02),
 * the q and k norms at 1, xavier linears elsewhere */
static const init_rule lx_inits[] = {
    {INIT_ZERO, "scale_shift_table|proj_out.weight|.linear.weight$|.linear.bias$"}, {INIT_ONE, "norm_q|norm_k"},
    {INIT_NORMAL, "timestep_embedder"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

/* fp4 and fp8: dev's, quantised */
static const family_preset presets[] = {
    /* LTX-2 19B (Lightricks/LTX-2's transformer, diffusers' 2.0 conversion): 48 blocks of a video stream (32 heads x
     * 128) and an audio stream (32 x 64, set in its preset hook below), both 128 latent channels; the Gemma 3 connectors'
     * 3840-wide states for each stream side by side at 1024 tokens; a VAE of 32x in space, 8x in time. */
    {"ltxvideo2-tiny", 2, 32, 2, 1, 4, 8, 10, 0, 6, 48, 0, false, false, 0, 0},
    {"ltxvideo2-19b", 48, 4096, 32, 1, 128, 16, 10, 0, 1024, 7680, 0, false, false, 0, 0},
};

static void ltxvideo2_preset(model_config *mc, const char *name, bool tiny)
{
    mc->frames = tiny ? 2 : 1, mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 32;
    mc->audio_hidden = tiny ? 16 : 2048, mc->audio_heads = tiny ? 2 : 32, mc->audio_channels = tiny ? 4 : 128;
}

static st_status ltx2_check(const model_config *mc)
{
    if (mc->audio_heads < 1 || mc->audio_hidden < 1 || mc->audio_hidden > mc->hidden ||
        mc->audio_hidden % (2 * mc->audio_heads) || mc->audio_hidden % (2 * mc->heads) || mc->audio_channels < 1 ||
        mc->audio_channels > (1 << 16) || mc->text_dim % 2 || mc->patch != 1 || mc->patch_t != 1 ||
        (mc->hidden / mc->heads) % 2 || mc->out_channels || mc->ffn_dim)
        return family_refuse(mc, GROUP_AUDIO, "ltxvideo2 takes an audio width of at most hidden_size that 2 x each "
                             "stream's heads divide (its cross-modal rotations split it by both), 1 to 65536 audio "
                             "channels, two connector states per token (an even width), 1 x 1 patches and even head "
                             "widths");
    return ST_OK;
}

/* LTX2VideoTransformer3DModel's config as diffusers converts LTX-2.0 (scripts/convert_ltx2_to_diffusers.py, version
 * 2.0): the class's defaults, then the file's values. What LTX-2.0 does not vary is refused by name, the 2.3 and 2.5
 * additions (gated attention, cross_attn_mod, no caption projection, perturbed attention) among it. rope_type must
 * be given as "split" (the class's default is "interleaved", which no published LTX-2 uses). */
static st_status ltx2_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t hd = 128, heads = 32, out = 128, cross = 4096, caption = 3840;
    int64_t ahd = 64, aheads = 32, aout = 128, across = 2048, apatch = 1, apatch_t = 1;
    int64_t scale[3] = {8, 32, 32};
    mc->channels = 128, mc->depth = 48, mc->patch = 1, mc->patch_t = 1, mc->audio_channels = 128;
    const json_key keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd},
                             {"in_channels", &mc->channels}, {"out_channels", &out}, {"caption_channels", &caption},
                             {"cross_attention_dim", &cross}, {"num_layers", &mc->depth}, {"patch_size", &mc->patch},
                             {"patch_size_t", &mc->patch_t}, {"audio_num_attention_heads", &aheads},
                             {"audio_attention_head_dim", &ahd}, {"audio_in_channels", &mc->audio_channels},
                             {"audio_out_channels", &aout}, {"audio_cross_attention_dim", &across},
                             {"audio_patch_size", &apatch}, {"audio_patch_size_t", &apatch_t}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "vae_scale_factors", 3, scale);
    const struct {
        const char *key;
        double want;
    } fixed[] = {{"pos_embed_max_pos", 20},          {"base_height", 2048},        {"base_width", 2048},
                 {"audio_scale_factor", 4},          {"audio_pos_embed_max_pos", 20}, {"audio_sampling_rate", 16000},
                 {"audio_hop_length", 160},          {"norm_eps", 1e-6},           {"rope_theta", 10000},
                 {"causal_offset", 1},               {"timestep_scale_multiplier", 1000},
                 {"cross_attn_timestep_scale_multiplier", 1000}};
    for (size_t i = 0; !st && i < sizeof fixed / sizeof *fixed; i++)
        st = json_fixed(j, file, fixed[i].key, fixed[i].want, "LTX-2.0");
    if (!st) st = json_fixed_text(j, file, "qk_norm", "rms_norm_across_heads", "LTX-2.0");
    if (!st) st = json_fixed_text(j, file, "activation_fn", "gelu-approximate", "LTX-2.0");
    if (st) return st;
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(j, "rope_type");
    if (!cJSON_IsString(rt) || strcmp(rt->valuestring, "split"))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: rope_type is %s; segtrain builds LTX-2's \"split\" rotation (the "
                       "class's default, \"interleaved\", is no published LTX-2's)", file,
                       cJSON_IsString(rt) ? rt->valuestring : "not given");
    static const char *const later = "LTX-2.0 (LTX-2.3 and 2.5 set it; their flavours are not built)";
    const struct {
        const char *key;
        bool want;
        const char *what;
    } flags[] = {{"gated_attn", false, later},           {"cross_attn_mod", false, later},
                 {"audio_gated_attn", false, later},     {"audio_cross_attn_mod", false, later},
                 {"use_prompt_embeddings", true, later}, {"perturbed_attn", false, later},
                 {"norm_elementwise_affine", false, "LTX-2.0"}, {"attention_bias", true, "LTX-2.0"},
                 {"attention_out_bias", true, "LTX-2.0"}, {"rope_double_precision", true, "LTX-2.0"},
                 {"ff_bias", true, "LTX-2.0"},           {"audio_ff_bias", true, "LTX-2.0"},
                 {"use_keyframes_abs_pos_embedding", false, "LTX-2.0"}};
    for (size_t i = 0; !st && i < sizeof flags / sizeof *flags; i++)
        st = json_fixed_bool(j, file, flags[i].key, flags[i].want, flags[i].what);
    if (st) return st;
    if (out != mc->channels || cross != hd * heads || aout != mc->audio_channels || across != ahd * aheads ||
        apatch != 1 || apatch_t != 1 || scale[0] != 8 || scale[1] != 32 || scale[2] != 32)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, cross_attention_dim %lld, audio_out_channels %lld, "
                       "audio_cross_attention_dim %lld, audio patches %lld x %lld, vae_scale_factors (%lld, %lld, "
                       "%lld); segtrain builds LTX-2.0's: outputs as wide as inputs (%lld, %lld), cross-attention as "
                       "wide as each stream (%lld, %lld), 1 x 1 audio patches and (8, 32, 32)", file, (long long)out,
                       (long long)cross, (long long)aout, (long long)across, (long long)apatch, (long long)apatch_t,
                       (long long)scale[0], (long long)scale[1], (long long)scale[2], (long long)mc->channels,
                       (long long)mc->audio_channels, (long long)(hd * heads), (long long)(ahd * aheads));
    mc->heads = heads, mc->hidden = hd * heads, mc->audio_heads = aheads, mc->audio_hidden = ahd * aheads;
    mc->text_dim = 2 * caption, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    return ST_OK;
}

/* SimpleTuner's _quanto_model exclude patterns for ltxvideo2 (quantisation/__init__.py) */
static const char *const ltx2_quanto_exclude[] = {
    "patchify_proj", "audio_patchify_proj", "proj_out", "audio_proj_out", "*adaln*", "time_proj", "timestep_embedder*",
    "caption_projection*", "audio_caption_projection*", "*norm*", NULL};

const family_desc ltxvideo2_desc = {
    .name = "ltxvideo2", .topology = TOPO_XATTN,
    .traits = TR_TEXT | TR_TEXT_MASK | TR_VIDEO | TR_FRAMES_8K1 | TR_AUDIO_VIDEO | TR_UNPOOLED,
    .st = {{.name = "ltxvideo2", .title = "LTXVideo2", .diffusers = "LTX2VideoTransformer3DModel",
            .flavours = "dev|dev-fp4|dev-fp8|2.3-dev|2.3-distilled|2.5-dev|2.5-distilled",
            .built = "dev:ltxvideo2-19b|dev-fp4:ltxvideo2-19b|dev-fp8:ltxvideo2-19b", .fallback = "dev",
            .why = "the 2.3 and 2.5 flavours add gated attention, timestep-modulated prompt cross-attention "
                   "(cross_attn_mod, prompt_adaln) and per-modality connector projections; LTX-2.0's dev flavours are "
                   "built",
            .example = "ltxvideo2-19b-t2v.peft-lora.json", .tiny = "ltxvideo2-tiny",
            .shape = "768x512@121"}}, /* LTX-2's 768x512 at 121 frames */
    .vae_scale_t = 8, .text_width = "LTX-2: a token's video and audio connectors' states side by side",
    FAMILY_PRESETS(presets), .preset = ltxvideo2_preset, .readers = {{"LTX2VideoTransformer3DModel", ltx2_from_json}},
    .fields = F_FFN | F_AUDIO_STREAM | F_AUDIO_CHANNELS, .check = ltx2_check, .quanto_exclude = ltx2_quanto_exclude,
    .swap_blocks = {"transformer_blocks"},
    .ops = &(const model_family){.create = lx_create, .impl_size = sizeof(ltx2_model), .set_batch = lx_set_batch,
                                 .forward = lx_forward, .backward = lx_backward, .release = lx_release,
                                 .inits = lx_inits},
};
