/* ACE-Step 1.5 (docs/FAMILIES.md): diffusers' AceStepTransformer1DModel, called as SimpleTuner's v1.5 path calls
 * the decoder (timestep = timestep_r = t, so time_embed_r sees 0).
 *
 * - Audio as segtrain's latents: (B, C, F, 1, 1), F the clip's latent frames; a token is patch_t = 2 frames.
 * - Input: cat([context_latents, latents], channels), the context (F, cond_channels) channels last in the
 *   conditioning after the condition sequence (model.h's layout); proj_in_conv, a Conv1d of kernel = stride = 2,
 *   is a linear layer on features (channel, frame of the patch), its weight (D, C_in, 2) flattened.
 * - Timestep: time_embed(t) and time_embed_r(t - r = 0), each Timesteps(256, cosines first) of 1000 t (segtrain's
 *   model input), linear_1, SiLU, linear_2 = temb, time_proj(SiLU(temb)) (6 D); the two paths summed.
 * - condition_embedder: Linear(encoder_hidden_size, D) of the condition, the blocks' keys and values.
 * - Rotary table per head: rotate-half, frequencies theta^(-2 k / hd) (theta 1e6), positions the token index,
 *   computed in float32 as get_1d_rotary_pos_embed computes them.
 * - Out: (shift, scale) = scale_shift_table + temb, RMSNorm (affine), modulate, proj_out_conv, a ConvTranspose1d of
 *   kernel = stride = 2: token i gives frames 2 i, 2 i + 1, out[2 i + j, c] = sum_h y[i, h] w[h, c, j] + b[c]. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/xattn/ace_step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACE_ROPE_THETA 1000000.0f
#define ACE_FREQ 256 /* AceStepTimestepEmbedding's in_channels */

typedef struct time_path {
    lin_layer l1, l2, proj;
    float *sin, *h1, *s1, *temb, *s2; /* a step's */
} time_path;

typedef struct ace_model {
    ace_block *blocks;
    int p_table, p_in_w, p_in_b, p_norm, p_out_w, p_out_b;
    time_path tp[2]; /* time_embed, time_embed_r */
    lin_layer cond;  /* condition_embedder */
    /* a step */
    float *feat, *ts, *raw, *temb, *fmod, *ln, *h, *tokens, *pred;
    float *dtemb; /* backward's, from the output to the time paths */
} ace_model;

static ace_model *ac_of(model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

/* a patch's features: the context's channels, then the latent's, two frames each */
static int64_t in_dim(const model_config *c) { return (c->cond_channels + c->channels) * c->patch_t; }

static st_status ac_create(model *m)
{
    const model_config *c = &m->cfg;
    ace_model *d = m->impl;
    const int n = (int)c->depth;
    d->blocks = model_seq_blocks(m, 0, "layers", n, &ace_block_kind, sizeof *d->blocks);
    if (!d->blocks) return st_host_oom("the ACE-Step model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, C = c->channels, pt = c->patch_t;
    d->p_table = param_add(s, "scale_shift_table", 3, (int64_t[]){1, 2, D}, full);
    char prefix[64];
    for (int i = 0; i < n; i++) {
        ace_block *b = &d->blocks[i];
        /* layer_types' default: sliding_attention on even layers, full_attention on odd ones */
        *b = (ace_block){.m = m, .ffn = c->ffn_dim ? c->ffn_dim : 4 * D, .kv_heads = c->kv_heads,
                         .window = i % 2 ? 0 : c->window};
        snprintf(prefix, sizeof prefix, "layers.%d", i);
        ace_block_register(s, b, prefix, c);
    }
    d->p_in_w = param_add(s, "proj_in_conv.weight", 3, (int64_t[]){D, c->cond_channels + C, pt}, full);
    d->p_in_b = param_add(s, "proj_in_conv.bias", 1, (int64_t[]){D}, full);
    static const char *const names[2] = {"time_embed", "time_embed_r"};
    for (int p = 0; p < 2; p++) {
        char n1[64], n2[64], n3[64];
        snprintf(n1, sizeof n1, "%s.linear_1", names[p]), snprintf(n2, sizeof n2, "%s.linear_2", names[p]);
        snprintf(n3, sizeof n3, "%s.time_proj", names[p]);
        d->tp[p].l1 = lin_register(s, n1, ACE_FREQ, D, true, 0, 0, full);
        d->tp[p].l2 = lin_register(s, n2, D, D, true, 0, 0, full);
        d->tp[p].proj = lin_register(s, n3, D, 6 * D, true, 0, 0, full);
    }
    d->cond = lin_register(s, "condition_embedder", c->text_dim, D, true, 0, 0, full);
    d->p_norm = param_add(s, "norm_out.weight", 1, (int64_t[]){D}, full);
    d->p_out_w = param_add(s, "proj_out_conv.weight", 3, (int64_t[]){D, C, pt}, full);
    d->p_out_b = param_add(s, "proj_out_conv.bias", 1, (int64_t[]){C}, full);
    m->ctx.mod_rows = ACE_MOD_ROWS;
    return ST_OK;
}

/* get_1d_rotary_pos_embed's table for T positions, (T, hd / 2, (cos, sin)): pair k turns by pos theta^(-2 k / hd),
 * the frequency and angle rounded to float as torch's float32 arange, pow and outer product round them. */
static st_status ace_rope_table(void *arg)
{
    float *table = ((table_fill *)arg)->t;
    const int64_t T = ((table_fill *)arg)->rows, hd = ((table_fill *)arg)->cols;
    for (int64_t k = 0; k < hd / 2; k++) {
        const float e = (float)(2 * k) / (float)hd, freq = 1.0f / powf(ACE_ROPE_THETA, e);
        for (int64_t t = 0; t < T; t++) {
            const float ang = (float)t * freq;
            table[(t * (hd / 2) + k) * 2] = (float)cos((double)ang);
            table[(t * (hd / 2) + k) * 2 + 1] = (float)sin((double)ang);
        }
    }
    return ST_OK;
}

/* The patch features (B T, in_dim): feature c pt + j of token i is channel c of frame pt i + j of
 * cat([context, latent]); the context (frames, cond_channels) per sample at offset at of its conditioning row. */
static void features(float *feat, const float *x, const float *cond, int64_t K, int64_t at, const model_config *c,
                     int64_t B)
{
    const int64_t F = c->frames, pt = c->patch_t, Cc = c->cond_channels, C = c->channels, T = F / pt, P = in_dim(c);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < T; i++) /* the context's pt frames (pt, Cc) of token i, transposed */
            transpose_batched(feat + (b * T + i) * P, cond + b * K + at + i * pt * Cc, 1, pt, Cc);
        for (int64_t ch = 0; ch < C; ch++) /* the latent's channel ch, pt frames a token */
            copy_rows(feat + b * T * P + (Cc + ch) * pt, P, x + (b * C + ch) * F, pt, T, pt);
    }
}

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                               float **x0)
{
    ace_model *d = ac_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, E = c->text_dim;
    const int64_t N = B * T, K = model_cond_len(c), M = ACE_MOD_ROWS * D, hd = D / c->heads;
    st_status st = ST_OK;
    model_hold(m, &st, &d->feat, N * in_dim(c), "ace.patches", false);
    *x0 = model_take(m, &st, N * D, "ace.state", false);
    model_hold(m, &st, &d->ts, 2 * B, "ace.timestep", true);
    model_hold(m, &st, &d->raw, B * L * E, "ace.condition", false);
    model_hold(m, &st, &d->temb, B * D, "ace.temb", false);
    for (int p = 0; p < 2; p++) {
        time_path *t = &d->tp[p];
        model_hold(m, &st, &t->sin, B * ACE_FREQ, "ace.time_sinusoid", false);
        model_hold(m, &st, &t->h1, B * D, "ace.time_linear_1", false);
        model_hold(m, &st, &t->s1, B * D, "ace.time_silu", false);
        model_hold(m, &st, &t->temb, B * D, "ace.time_temb", false);
        model_hold(m, &st, &t->s2, B * D, "ace.time_temb_silu", false);
    }
    model_hold(m, &st, &m->ctx.mod, B * M, "ace.timestep_proj", true);
    model_hold(m, &st, &m->ctx.text, B * L * D, "ace.condition_embedded", false);
    model_hold(m, &st, &m->ctx.rope, T * hd, "ace.rope", false);
    if (train) {
        model_hold(m, &st, &m->ctx.dmod, B * M, "ace.dtimestep_proj", true);
        model_hold(m, &st, &m->ctx.dtext, B * L * D, "ace.dcondition", true);
    }
    if (st) return st;
    features(d->feat, x, cond, K, L * E, c, B);
    linear_forward(*x0, d->feat, PW(d->p_in_w), PW(d->p_in_b), N, in_dim(c), D);
    copy_rows(d->raw, L * E, cond, K, B, L * E);
    if ((st = lin_forward(m->params, m->pool, &d->cond, m->ctx.text, d->raw, B * L))) return st;
    if ((st = host_loop(m->ctx.rope, ace_rope_table, &(table_fill){m->ctx.rope, T, hd}))) return st;
    /* time_embed reads 1000 t (segtrain's input), time_embed_r 1000 (t - r) = 0 (ts[B ..] stays zero) */
    copy_rows(d->ts, B, timesteps, B, 1, B);
    zero_bytes(d->temb, (size_t)(B * D) * sizeof(float));
    for (int p = 0; p < 2; p++) {
        time_path *t = &d->tp[p];
        float *proj = NULL;
        timestep_embedding(t->sin, d->ts + p * B, B, ACE_FREQ, 10000.0);
        if ((st = lin_forward(m->params, m->pool, &t->l1, t->h1, t->sin, B))) return st;
        silu_forward(t->s1, t->h1, B * D);
        if ((st = lin_forward(m->params, m->pool, &t->l2, t->temb, t->s1, B))) return st;
        silu_forward(t->s2, t->temb, B * D);
        add_to(d->temb, t->temb, B * D);
        if ((st = pool_alloc(m->pool, (size_t)(B * M) * sizeof(float), MEM_WORKSPACE, "ace.proj", (void **)&proj)))
            return st;
        if (!(st = lin_forward(m->params, m->pool, &t->proj, proj, t->s2, B))) add_to(m->ctx.mod, proj, B * M);
        pool_free(m->pool, proj);
        if (st) return st;
    }
    return ST_OK;
}

/* the output's patch shape: C channels in (patch_t, 1, 1) patches */
static patch_shape out_shape(const model *m)
{
    const model_config *c = &m->cfg;
    return (patch_shape){m->shape.batch, c->channels, c->frames, 1, 1, c->patch_t, 1, 0};
}

static st_status head_forward(model *m, bool train, const float **pred)
{
    (void)train;
    ace_model *d = ac_of(m);
    const float *xT = m->step.last.t[0];
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T, P = c->channels * c->patch_t;
    st_status st = ST_OK;
    model_hold(m, &st, &d->fmod, B * 2 * D, "ace.norm_out_mod", false);
    model_hold(m, &st, &d->ln, N * D, "ace.norm_out", false);
    model_hold(m, &st, &d->h, N * D, "ace.norm_out_modulated", false);
    model_hold(m, &st, &d->tokens, N * P, "ace.out_tokens", false);
    model_hold(m, &st, &d->pred, B * model_sample_numel(c), "pred", false);
    if (st) return st;
    for (int64_t b = 0; b < B; b++) /* shift first, then scale: the table plus temb */
        copy_rows(d->fmod + b * 2 * D, D, d->temb + b * D, D, 1, D), copy_rows(d->fmod + b * 2 * D + D, D, d->temb + b * D, D, 1, D);
    add_row(d->fmod, PW(d->p_table), B, 2 * D);
    if ((st = rmsnorm_forward(m->pool, d->ln, xT, PW(d->p_norm), N, D, ACE_EPS, NULL))) return st;
    modulate_forward(d->h, d->ln, d->fmod, d->fmod + D, B, T, D, 2 * D);
    gemm(false, false, N, P, D, 1.0f, d->h, PW(d->p_out_w), 0.0f, d->tokens);
    channel_add_forward(d->tokens, PW(d->p_out_b), N, c->channels, c->patch_t);
    const patch_shape ps = out_shape(m);
    unpatchify_forward(d->pred, d->tokens, &ps, PATCH_CONV);
    *pred = d->pred;
    return ST_OK;
}

/* The output back to dL/d(last) (*dx); dL/dtemb stays in k's dtemb for embed_backward */
static st_status head_backward(model *m, const float *dpred, scratch *k, float **dxp)
{
    ace_model *d = ac_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t P = c->channels * c->patch_t;
    st_status st = ST_OK;
    float *dx = *dxp = model_take(m, &st, N * D, "ace.dstate", true);
    float *dtok = scratch_take_zero(k, N * P, MEM_WORKSPACE, "ace.dout_tokens");
    float *dh = scratch_take_zero(k, N * D, MEM_WORKSPACE, "ace.dnorm_out");
    float *dfmod = scratch_take_zero(k, B * 2 * D, MEM_WORKSPACE, "ace.dnorm_out_mod");
    float *dtemb = d->dtemb = scratch_take_zero(k, B * D, MEM_WORKSPACE, "ace.dtemb");
    float *tmp = scratch_take(k, N * D, MEM_WORKSPACE, "ace.norm_out_again");
    op_state stats = {0};
    if (!st) st = k->status;
    if (!st) { /* the output: ConvTranspose1d, modulation, RMSNorm */
        const patch_shape ps = out_shape(m);
        const float *xT = m->step.last.t[0];
        unpatchify_backward(dtok, dpred, &ps, PATCH_CONV);
        channel_add_backward(PG(d->p_out_b), dtok, N, c->channels, c->patch_t);
        if (PG(d->p_out_w)) gemm(true, false, D, P, N, 1.0f, d->h, dtok, 1.0f, PG(d->p_out_w));
        gemm(false, true, N, D, P, 1.0f, dtok, PW(d->p_out_w), 0.0f, dh);
        modulate_backward(dh, dfmod, dfmod + D, dh, d->ln, d->fmod + D, B, T, D, 2 * D);
        st = rmsnorm_forward(m->pool, tmp, xT, PW(d->p_norm), N, D, ACE_EPS, &stats);
        if (!st) rmsnorm_backward(dx, PG(d->p_norm), dh, xT, PW(d->p_norm), N, D, &stats);
        op_state_release(&stats);
        for (int64_t b = 0; b < B; b++) {
            add_to(dtemb + b * D, dfmod + b * 2 * D, D), add_to(dtemb + b * D, dfmod + b * 2 * D + D, D);
            if (PG(d->p_table)) add_to(PG(d->p_table), dfmod + b * 2 * D, 2 * D);
        }
    }
    return st;
}

static st_status embed_backward(model *m, scratch *k, block_state *grad)
{
    const float *dx0 = grad->t[0];
    ace_model *d = ac_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, N = B * T;
    const float *dtemb = d->dtemb;
    /* proj_in_conv, condition_embedder */
    linear_backward(NULL, PG(d->p_in_w), PG(d->p_in_b), dx0, d->feat, PW(d->p_in_w), N, in_dim(c), D);
    st_status st = lin_backward(m->params, m->pool, &d->cond, NULL, m->ctx.dtext, d->raw, B * L);
    float *ds2 = scratch_take(k, B * D, MEM_WORKSPACE, "ace.dtime_silu2");
    float *dt = scratch_take(k, B * D, MEM_WORKSPACE, "ace.dtime_temb");
    float *ds1 = scratch_take(k, B * D, MEM_WORKSPACE, "ace.dtime_silu1");
    float *dh1 = scratch_take(k, B * D, MEM_WORKSPACE, "ace.dtime_linear_1");
    if (!st) st = k->status;
    for (int p = 0; p < 2 && !st; p++) { /* both paths: the blocks' projection gradient and the final layer's temb */
        time_path *t = &d->tp[p];
        zero_bytes(ds2, (size_t)(B * D) * sizeof(float));
        if ((st = lin_backward(m->params, m->pool, &t->proj, ds2, m->ctx.dmod, t->s2, B))) break;
        copy_rows(dt, D, dtemb, D, B, D);
        silu_backward(dt, ds2, t->temb, B * D);
        zero_bytes(ds1, (size_t)(B * D) * sizeof(float));
        if ((st = lin_backward(m->params, m->pool, &t->l2, ds1, dt, t->s1, B))) break;
        zero_bytes(dh1, (size_t)(B * D) * sizeof(float));
        silu_backward(dh1, ds1, t->h1, B * D);
        st = lin_backward(m->params, m->pool, &t->l1, NULL, dh1, t->sin, B);
    }
    return st;
}

static const model_chain ac_chain = {.embed = embed_forward, .embed_backward = embed_backward, .head = head_forward,
                                     .head_backward = head_backward};

/* segtrain's own init in DiT's spirit: the output projection zero, norms at 1, tables small normal, xavier elsewhere
 * (biases zero) */
static const init_rule ac_inits[] = {
    {INIT_ZERO, "^proj_out_conv.weight$"}, {INIT_ONE, "norm"}, {INIT_NORMAL, "scale_shift_table|time_embed"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

/* the condition encoder's output, then the context latents */
static int64_t ace_step_cond_len(const model_config *mc)
{
    return mc->text_len * mc->text_dim + mc->frames * mc->cond_channels;
}

static void ace_step_condition(const model_config *mc, const char *caption, float *cond)
{
    float *rest = family_text_condition(mc, caption, cond, NULL);
    for (int64_t f = 0; f < mc->frames; f++) /* the context: zero source latents (the stand-in's silence), the chunk
                                                mask all ones */
        for (int64_t ch = 0; ch < mc->cond_channels; ch++) *rest++ = ch < mc->channels ? 0.0f : 1.0f;
}

static const family_preset presets[] = {
    /* ACE-Step 1.5's (ACE-Step/Ace-Step1.5's acestep-v15-* transformers, AceStepTransformer1DModel's defaults): 24
     * layers of 16 heads x 128, 8 key-value heads, SwiGLU 6144, 64 latent channels with 128 of context, patches of
     * 2 frames, window 128; the condition 2048 wide, 589 tokens (SimpleTuner's v1.5 caption 77 and lyrics 512); 750
     * latent frames (30 s at the VAE's 25 a second). Audio is (C, F, 1, 1): resolution and patch 1. The tiny one is
     * the fixture's. */
    {"ace-step-tiny", 2, 32, 4, 1, 4, 1, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"ace-step-1.5", 24, 2048, 16, 1, 64, 1, 10, 0, 589, 2048, 0, false, false, 0, 0},
};

static void ace_step_preset(model_config *mc, const char *name, bool tiny)
{
    mc->kv_heads = tiny ? 2 : 8, mc->window = tiny ? 3 : 128, mc->ffn_dim = tiny ? 64 : 6144,
    mc->cond_channels = 2 * mc->channels, mc->patch_t = 2, mc->frames = tiny ? 32 : 750;
}

static st_status ace_step_check(const model_config *mc)
{
    if (mc->kv_heads < 1 || mc->heads % mc->kv_heads || mc->window < 0 || mc->cond_channels < 0 ||
        mc->cond_channels > (1 << 16) || mc->patch != 1 || mc->height != 1 || mc->width != 1 || mc->out_channels)
        return family_refuse(mc, GROUP_KV_HEADS, "ace_step takes a divisor of num_heads, a window of at least 0, 0 to "
                             "65536 context channels, and audio's 1, 1 and 0 (= in_channels)");
    return ST_OK;
}

/* AceStepTransformer1DModel's config (ACE-Step 1.5): its defaults, then the file's values; attention biases,
 * dropout and layer types other than its default alternation (sliding on even layers) are refused by name. */
static st_status ace_step_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t hd = 128, in = 192, patch = 2, window = 128;
    mc->hidden = 2048, mc->ffn_dim = 6144, mc->depth = 24, mc->heads = 16, mc->kv_heads = 8, mc->channels = 64;
    mc->text_dim = 0;
    const json_key keys[] = {{"hidden_size", &mc->hidden}, {"intermediate_size", &mc->ffn_dim},
                             {"num_hidden_layers", &mc->depth}, {"num_attention_heads", &mc->heads},
                             {"num_key_value_heads", &mc->kv_heads}, {"head_dim", &hd}, {"in_channels", &in},
                             {"audio_acoustic_hidden_dim", &mc->channels}, {"patch_size", &patch},
                             {"sliding_window", &window}, {"encoder_hidden_size", &mc->text_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (st) return st;
    if (!mc->text_dim) mc->text_dim = mc->hidden; /* encoder_hidden_size null: the model's width */
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(j, "attention_bias");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(j, "attention_dropout");
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(j, "rope_theta");
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "rms_norm_eps");
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    bool alternating = !types || cJSON_IsNull(types);
    if (cJSON_IsArray(types) && cJSON_GetArraySize(types) == mc->depth) {
        alternating = true;
        for (int i = 0; i < (int)mc->depth; i++) {
            const cJSON *t = cJSON_GetArrayItem(types, i);
            alternating &= cJSON_IsString(t) && !strcmp(t->valuestring, i % 2 ? "full_attention" : "sliding_attention");
        }
    }
    if (cJSON_IsTrue(bias) || (drop && (!cJSON_IsNumber(drop) || drop->valuedouble != 0)) ||
        (theta && (!cJSON_IsNumber(theta) || theta->valuedouble != 1e6)) ||
        (eps && (!cJSON_IsNumber(eps) || eps->valuedouble != 1e-6)) || !alternating)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: attention_bias, attention_dropout, rope_theta, rms_norm_eps or "
                       "layer_types; segtrain builds ACE-Step 1.5's (false, 0, 1e6, 1e-6, sliding and full attention "
                       "alternating from layer 0)", file);
    if (patch != 2 || hd * mc->heads != mc->hidden || in <= mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size %lld, head_dim %lld x %lld heads, in_channels %lld; segtrain "
                       "builds patches of 2 frames, heads as wide as hidden_size (%lld) and in_channels above "
                       "audio_acoustic_hidden_dim (%lld: the context latents come first)", file, (long long)patch,
                       (long long)hd, (long long)mc->heads, (long long)in, (long long)mc->hidden,
                       (long long)mc->channels);
    mc->patch_t = patch, mc->patch = 1, mc->height = mc->width = 1, mc->window = window, mc->cond_channels = in - mc->channels;
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    return ST_OK;
}

const family_desc ace_step_desc = {
    .name = "ace_step", .topology = TOPO_XATTN, .traits = TR_TEXT | TR_AUDIO | TR_UNPOOLED,
    .st = {{.name = "ace_step", .title = "ACE-Step", .diffusers = "AceStepTransformer1DModel",
            .flavours = "base|v15-turbo|v15-base|v15-sft",
            .built = "v15-turbo:ace-step-1.5|v15-base:ace-step-1.5|v15-sft:ace-step-1.5", .fallback = "base",
            .why = "base is ACE-Step 1.0, another transformer than 1.5's AceStepTransformer1DModel; the 1.5 flavours "
                   "(v15-turbo, v15-base, v15-sft) are built",
            .tiny = "ace-step-tiny"}},
    .uncached = "the context latents and their chunk mask", .cond_len = ace_step_cond_len,
    .condition = ace_step_condition, FAMILY_PRESETS(presets), .preset = ace_step_preset,
    .readers = {{"AceStepTransformer1DModel", ace_step_from_json}},
    .fields = F_FFN | F_KV_HEADS | F_WINDOW | F_COND_CHANNELS, .check = ace_step_check,
    .ops = &(const model_family){.create = ac_create, .impl_size = sizeof(ace_model), .chain = &ac_chain,
                                 .inits = ac_inits},
};
