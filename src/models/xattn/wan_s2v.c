/* Wan 2.2 S2V, speech to video (SimpleTuner's wan_s2v, its own WanS2VTransformer3DModel; no diffusers class): Wan's
 * cross-attention blocks (xattn/xdit.c, xdit_block.c) as WanS2VTransformerBlock has them, and its audio encoder here.
 *
 * As SimpleTuner's WanS2V.model_predict trains it: the noisy latents' tokens, then each sample's reference image's
 * (conditioning_latents, one frame, through the same patch_embedding, at rotary frame 30), the pose embedding's bias
 * on the video tokens (its pose latents are zeros), trainable_condition_mask's rows 0 and 1 on the two; the blocks
 * modulate the video tokens by t and the reference's by t = 0 (zero_timestep), with no q, k, v biases and no q/k
 * norms; the motion frames are dropped (frame_packer's weights loaded and saved, untrained); an audio injector after
 * the blocks audio_inject_layers names; the final layer on the video tokens.
 *
 * The audio (condition_embedder.causal_audio_encoder): the Wav2Vec2 hidden states of the latent frames (layers,
 * audio_dim, F), frame 0 repeated 17 times before them (motion_frames[0]), mixed over the layers by the weights
 * SiLU(w) / sum SiLU(w), then causal convolutions over time (the first frame replicated as padding): conv1_local to
 * 4 heads of D/4 and conv1_global to D/4, each LayerNorm and SiLU, then conv2 (stride 2, to D/2) and conv3 (stride 2,
 * to D) with LayerNorm and SiLU on all five streams alike; the heads' outputs and padding_tokens make each frame's 5
 * tokens, the global one final_linear's vector; the frames after the first 5 (motion_frames[1]) are the chunks. The
 * video tokens split into that many equal runs, each attending to its chunk's tokens through the injector, its
 * LayerNorm modulated by adain(SiLU(the chunk's global vector)).
 *
 * Forward keeps the encoder's outputs alone; backward runs it again (the same kernels on the same inputs, so the
 * same bits) and back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/xattn/xdit.h"

#define MOTION_FRAMES 17 /* motion_frames[0]: frame 0's copies before the audio */
#define DROPPED_FRAMES 5 /* motion_frames[1]: the encoder's first frames, dropped */
#define AUDIO_HEADS 4    /* num_audio_token */
#define CAUSAL_PAD 2     /* kernel 3 - 1 */
#define STAGES 3
#define AUDIO_LN_EPS 1e-6f
#define MAX_LAYERS 64

struct wan_s2v_audio {
    int mix;                      /* weighted_avg.weights (1, layers, 1, 1) */
    int cw[STAGES + 1], cb[STAGES + 1]; /* conv1_local, conv2, conv3, conv1_global */
    lin_layer fin;                /* final_linear */
    int pad;                      /* padding_tokens (1, 1, 1, D) */
    const float *cond;            /* the step's conditioning, read again by backward */
};

static int64_t audio_frames(const model_config *c) { return c->frames + MOTION_FRAMES; }

/* The frames into stage k (k = STAGES: out of the last): stage 0 keeps them, stages 1 and 2 (stride 2, causal
 * padding 2) take ceil(t / 2) */
static int64_t stage_frames(const model_config *c, int k)
{
    int64_t t = audio_frames(c);
    for (int i = 1; i < k; i++) t = (t + 1) / 2;
    return t;
}

int64_t wan_s2v_audio_chunks(const model_config *c) { return stage_frames(c, STAGES) - DROPPED_FRAMES; }

static int64_t audio_at(const model_config *c) { return family_text_cond_len(c); }
static int64_t audio_floats(const model_config *c) { return c->audio_layers * c->audio_channels * c->frames; }
int64_t wan_s2v_reference_at(const model_config *c) { return audio_at(c) + audio_floats(c); }

st_status wan_s2v_audio_create(param_set *s, const model_config *c, wan_s2v_audio **out)
{
    wan_s2v_audio *a = calloc(1, sizeof *a);
    if (!a) return st_host_oom("Wan S2V's audio encoder");
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, q = D / 4;
    const char *pre = "condition_embedder.causal_audio_encoder";
    char n[128];
    snprintf(n, sizeof n, "%s.weighted_avg.weights", pre);
    a->mix = param_add(s, n, 4, (int64_t[]){1, c->audio_layers, 1, 1}, full);
    static const char *const names[STAGES + 1] = {"conv1_local.conv", "conv1_global.conv", "conv2.conv.conv",
                                                  "conv3.conv.conv"};
    const int64_t cin[STAGES + 1] = {c->audio_channels, c->audio_channels, q, 2 * q};
    const int64_t cout[STAGES + 1] = {D, q, 2 * q, D};
    for (int k = 0; k < STAGES + 1; k++) { /* in the class's order; the stages' indices: local, conv2, conv3, global */
        const int at = k == 0 ? 0 : k == 1 ? STAGES : k - 1;
        snprintf(n, sizeof n, "%s.encoder.%s.weight", pre, names[k]);
        a->cw[at] = param_add(s, n, 3, (int64_t[]){cout[k], cin[k], 3}, full);
        snprintf(n, sizeof n, "%s.encoder.%s.bias", pre, names[k]);
        a->cb[at] = param_add(s, n, 1, (int64_t[]){cout[k]}, full);
    }
    snprintf(n, sizeof n, "%s.encoder.final_linear", pre);
    a->fin = lin_register(s, n, D, D, true, 0, 0, full);
    snprintf(n, sizeof n, "%s.encoder.padding_tokens", pre);
    a->pad = param_add(s, n, 4, (int64_t[]){1, 1, 1, D}, full);
    *out = a;
    return ST_OK;
}

void wan_s2v_audio_destroy(wan_s2v_audio *a) { free(a); }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

/* ---- the layers' mix: SiLU(w) / its sum, and its gradient (a few floats, on the host) ---- */

typedef struct mix_arg {
    const float *w, *dmix;
    float *mix, *dw;
    int64_t n;
} mix_arg;

static double silu_d(double x) { return x / (1 + exp(-x)); }

static st_status mix_forward(void *p)
{
    mix_arg *a = p;
    double sum = 0;
    for (int64_t i = 0; i < a->n; i++) sum += silu_d(a->w[i]);
    for (int64_t i = 0; i < a->n; i++) a->mix[i] = (float)(silu_d(a->w[i]) / sum);
    return ST_OK;
}

static st_status mix_backward(void *p)
{
    mix_arg *a = p;
    double sum = 0, dot = 0;
    for (int64_t i = 0; i < a->n; i++) sum += silu_d(a->w[i]), dot += a->dmix[i] * silu_d(a->w[i]);
    for (int64_t i = 0; i < a->n; i++) {
        const double x = a->w[i], sg = 1 / (1 + exp(-x)), ds = (a->dmix[i] - dot / sum) / sum;
        a->dw[i] += (float)(ds * sg * (1 + x * (1 - sg)));
    }
    return ST_OK;
}

/* ---- the encoder ---- */

/* Its activations, workspace of one scratch: the layers (B, layers, audio_dim, F) with frame 0's copies first, their
 * mix (B, audio_dim, F); per stage its padded input (streams, in, t + 2), the convolution's output read as (streams,
 * out, t'), LayerNorm's input (streams, t', out) and output, and SiLU's; the global vector before SiLU (B chunks, D) */
typedef struct audio_acts {
    float *layers, *mix, *feat, *p[STAGES], *gp, *z[STAGES], *tr[STAGES], *ln[STAGES], *act[STAGES], *glob, *gsel;
    op_state stats[STAGES];
} audio_acts;

/* Stage k's convolution: stage 0 the local one on the mix (B streams; its global twin writes the B streams after the
 * 4 B local ones), stages 1 and 2 on all 5 B streams */
static conv_shape stage_conv(const model_config *c, int k, int64_t B, bool global)
{
    const int64_t D = c->hidden, q = D / 4, t = stage_frames(c, k);
    const int64_t in = k ? q << (k - 1) : c->audio_channels, out = k ? q << k : global ? q : D;
    return (conv_shape){.batch = k ? (AUDIO_HEADS + 1) * B : B, .in = in, .h = 1, .w = t + CAUSAL_PAD, .out = out,
                        .kh = 1, .kw = 3, .sh = 1, .sw = k ? 2 : 1};
}

static void acts_release(audio_acts *f)
{
    for (int k = 0; k < STAGES; k++) op_state_release(&f->stats[k]);
}

/* The encoder from cond into in->audio and in->audio_cs, its activations into f (workspace of s) */
static st_status audio_encode(model *m, wan_s2v_audio *a, const float *cond, audio_acts *f, scratch *s,
                              xdit_inputs *in)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, D = c->hidden, q = D / 4, NL = c->audio_layers, Da = c->audio_channels;
    const int64_t F = audio_frames(c), S = (AUDIO_HEADS + 1) * B, A = in->audio_chunks, T3 = stage_frames(c, STAGES);
    float *raw = scratch_take(s, B * audio_floats(c), MEM_WORKSPACE, "s2v.audio_features");
    f->layers = scratch_take(s, B * NL * Da * F, MEM_WORKSPACE, "s2v.audio_layers");
    f->mix = scratch_take(s, NL, MEM_WORKSPACE, "s2v.audio_mix");
    f->feat = scratch_take(s, B * Da * F, MEM_WORKSPACE, "s2v.audio_mixed");
    if (s->status) return s->status;
    copy_rows(raw, audio_floats(c), cond + audio_at(c), model_cond_len(c), B, audio_floats(c));
    pad_replicate_forward(f->layers, raw, B * NL * Da, c->frames, MOTION_FRAMES);
    scratch_drop(s, raw);
    mix_arg ma = {.w = PW(a->mix), .mix = f->mix, .n = NL};
    st_status st = host_loop(f->mix, mix_forward, &ma);
    if (st) return st;
    weighted_sum_forward(f->feat, f->layers, f->mix, B, NL, Da * F);
    for (int k = 0; k < STAGES && !st; k++) {
        const conv_shape cs = stage_conv(c, k, B, false);
        const int64_t t = stage_frames(c, k), t2 = stage_frames(c, k + 1), w = k ? q << k : q; /* a stream's width */
        const int64_t n = S * t2 * w;
        f->p[k] = scratch_take(s, cs.batch * cs.in * (t + CAUSAL_PAD), MEM_WORKSPACE, "s2v.audio_padded");
        f->z[k] = scratch_take(s, n, MEM_WORKSPACE, "s2v.audio_conv");
        f->tr[k] = scratch_take(s, n, MEM_WORKSPACE, "s2v.audio_ln_in");
        f->ln[k] = scratch_take(s, n, MEM_WORKSPACE, "s2v.audio_ln");
        f->act[k] = scratch_take(s, n, MEM_WORKSPACE, "s2v.audio_silu");
        if ((st = s->status)) break;
        if (k) { /* the previous stage's SiLU output, channels first */
            float *x = scratch_take(s, S * w / 2 * t, MEM_WORKSPACE, "s2v.audio_input");
            if ((st = s->status)) break;
            transpose_batched(x, f->act[k - 1], S, t, w / 2);
            pad_replicate_forward(f->p[k], x, S * w / 2, t, CAUSAL_PAD);
            scratch_drop(s, x);
            st = conv2d_forward(m->pool, f->z[k], f->p[k], PW(a->cw[k]), PW(a->cb[k]), &cs);
        } else { /* the local heads (4 B streams of D/4), then the global stream */
            pad_replicate_forward(f->p[0], f->feat, B * Da, F, CAUSAL_PAD);
            const conv_shape gs = stage_conv(c, 0, B, true);
            st = conv2d_forward(m->pool, f->z[0], f->p[0], PW(a->cw[0]), PW(a->cb[0]), &cs);
            if (!st) st = conv2d_forward(m->pool, f->z[0] + B * D * t2, f->p[0], PW(a->cw[STAGES]),
                                         PW(a->cb[STAGES]), &gs);
        }
        if (st) break;
        transpose_batched(f->tr[k], f->z[k], S, w, t2);
        if ((st = layernorm_forward(m->pool, f->ln[k], f->tr[k], NULL, NULL, S * t2, w, AUDIO_LN_EPS, &f->stats[k])))
            break;
        silu_forward(f->act[k], f->ln[k], n);
    }
    if (st) return st;
    /* the chunks' tokens: the 4 heads' frames after the first 5, then padding_tokens */
    const float *local = f->act[STAGES - 1], *global = local + AUDIO_HEADS * B * T3 * D;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < AUDIO_HEADS; h++)
            copy_rows(in->audio + (b * A * S2V_AUDIO_TOKENS + h) * D, S2V_AUDIO_TOKENS * D,
                      local + ((b * AUDIO_HEADS + h) * T3 + DROPPED_FRAMES) * D, D, A, D);
        copy_rows(in->audio + (b * A * S2V_AUDIO_TOKENS + AUDIO_HEADS) * D, S2V_AUDIO_TOKENS * D, PW(a->pad), 0, A, D);
    }
    /* the global vector: final_linear of the global stream, its frames after the first 5, SiLU */
    f->glob = scratch_take(s, B * T3 * D, MEM_WORKSPACE, "s2v.audio_global");
    f->gsel = scratch_take(s, B * A * D, MEM_WORKSPACE, "s2v.audio_global_chunks");
    if ((st = s->status) || (st = lin_forward(m->params, m->pool, &a->fin, f->glob, global, B * T3))) return st;
    copy_rows(f->gsel, A * D, f->glob + DROPPED_FRAMES * D, T3 * D, B, A * D);
    silu_forward(in->audio_cs, f->gsel, B * A * D);
    return ST_OK;
}

st_status wan_s2v_audio_forward(model *m, wan_s2v_audio *a, const float *cond, bool train, xdit_inputs *in)
{
    const int64_t B = m->shape.batch, D = m->cfg.hidden, A = in->audio_chunks;
    st_status st = ST_OK;
    model_hold(m, &st, &in->audio, B * A * S2V_AUDIO_TOKENS * D, "s2v.audio_tokens", false);
    model_hold(m, &st, &in->audio_cs, B * A * D, "s2v.audio_adain_input", false);
    if (train) {
        model_hold(m, &st, &in->daudio, B * A * S2V_AUDIO_TOKENS * D, "s2v.daudio_tokens", true);
        model_hold(m, &st, &in->daudio_cs, B * A * D, "s2v.daudio_adain_input", true);
    }
    if (st) return st;
    a->cond = cond;
    scratch s = {.pool = m->pool};
    audio_acts f = {0};
    st = audio_encode(m, a, cond, &f, &s, in);
    acts_release(&f);
    const st_status end = scratch_end(&s);
    return st ? st : end;
}

/* The global vector's and padding_tokens' gradients, and dL/d(the last stage's SiLU output) into g */
static st_status outputs_backward(model *m, wan_s2v_audio *a, const audio_acts *f, const xdit_inputs *in, float *g)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, D = c->hidden, A = in->audio_chunks, T3 = stage_frames(c, STAGES);
    scratch s = {.pool = m->pool};
    float *dsel = scratch_take_zero(&s, B * A * D, MEM_WORKSPACE, "s2v.daudio_global_chunks");
    float *dglob = scratch_take_zero(&s, B * T3 * D, MEM_WORKSPACE, "s2v.daudio_global");
    float *dpad = scratch_take_zero(&s, S2V_AUDIO_TOKENS * D, MEM_WORKSPACE, "s2v.dpadding_tokens");
    if (s.status) return scratch_end(&s);
    silu_backward(dsel, in->daudio_cs, f->gsel, B * A * D);
    copy_rows(dglob + DROPPED_FRAMES * D, T3 * D, dsel, A * D, B, A * D);
    const float *global = f->act[STAGES - 1] + AUDIO_HEADS * B * T3 * D;
    s.status = lin_backward(m->params, m->pool, &a->fin, g + AUDIO_HEADS * B * T3 * D, dglob, global, B * T3);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < AUDIO_HEADS; h++)
            copy_rows(g + ((b * AUDIO_HEADS + h) * T3 + DROPPED_FRAMES) * D, D,
                      in->daudio + (b * A * S2V_AUDIO_TOKENS + h) * D, S2V_AUDIO_TOKENS * D, A, D);
        channel_add_backward(dpad, in->daudio + b * A * S2V_AUDIO_TOKENS * D, A, S2V_AUDIO_TOKENS * D, 1);
    }
    if (PG(a->pad)) add_to(PG(a->pad), dpad + AUDIO_HEADS * D, D);
    return scratch_end(&s);
}

/* Back through the stages from g, dL/d(the last SiLU output), to the layers' mix */
static st_status stages_backward(model *m, wan_s2v_audio *a, audio_acts *f, float *g, scratch *s)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, D = c->hidden, q = D / 4, Da = c->audio_channels, S = (AUDIO_HEADS + 1) * B;
    st_status st = ST_OK;
    for (int k = STAGES - 1; k >= 0 && !st; k--) {
        const conv_shape cs = stage_conv(c, k, B, false);
        const int64_t t = stage_frames(c, k), t2 = stage_frames(c, k + 1), w = k ? q << k : q, n = S * t2 * w;
        float *dln = scratch_take_zero(s, n, MEM_WORKSPACE, "s2v.daudio_ln");
        float *dtr = scratch_take_zero(s, n, MEM_WORKSPACE, "s2v.daudio_ln_in");
        float *dz = scratch_take(s, n, MEM_WORKSPACE, "s2v.daudio_conv");
        float *dp = scratch_take_zero(s, cs.batch * cs.in * (t + CAUSAL_PAD), MEM_WORKSPACE, "s2v.daudio_padded");
        float *dx = scratch_take_zero(s, cs.batch * cs.in * t, MEM_WORKSPACE, "s2v.daudio_input");
        if ((st = s->status)) break;
        silu_backward(dln, g, f->ln[k], n);
        layernorm_backward(dtr, NULL, NULL, dln, f->tr[k], NULL, S * t2, w, &f->stats[k]);
        zero_floats(dz, n);
        transpose_batched_backward(dz, dtr, S, w, t2);
        st = conv2d_backward(m->pool, dp, PG(a->cw[k]), PG(a->cb[k]), dz, f->p[k], PW(a->cw[k]), &cs);
        if (!st && !k) {
            const conv_shape gs = stage_conv(c, 0, B, true);
            st = conv2d_backward(m->pool, dp, PG(a->cw[STAGES]), PG(a->cb[STAGES]), dz + B * D * t2, f->p[0],
                                 PW(a->cw[STAGES]), &gs);
        }
        if (st) break;
        pad_replicate_backward(dx, dp, cs.batch * cs.in, t, CAUSAL_PAD);
        scratch_drop(s, g), scratch_drop(s, dln), scratch_drop(s, dtr), scratch_drop(s, dz), scratch_drop(s, dp);
        if (k) { /* the previous stage's SiLU output was this one's input, channels first */
            g = scratch_take_zero(s, S * t * w / 2, MEM_WORKSPACE, "s2v.daudio_act");
            if (!(st = s->status)) transpose_batched_backward(g, dx, S, t, w / 2);
        } else { /* dL/d(the mix), then the mix's weights */
            float *dmix = scratch_take_zero(s, c->audio_layers, MEM_WORKSPACE, "s2v.daudio_mix");
            if ((st = s->status)) break;
            weighted_sum_backward(NULL, dmix, dx, f->layers, f->mix, B, c->audio_layers, Da * audio_frames(c));
            mix_arg ma = {.w = PW(a->mix), .dmix = dmix, .dw = PG(a->mix), .n = c->audio_layers};
            if (PG(a->mix)) st = host_loop(dmix, mix_backward, &ma);
        }
        scratch_drop(s, dx);
    }
    return st;
}

st_status wan_s2v_audio_backward(model *m, wan_s2v_audio *a, xdit_inputs *in)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, D = c->hidden, S = (AUDIO_HEADS + 1) * B, T3 = stage_frames(c, STAGES);
    scratch s = {.pool = m->pool};
    audio_acts f = {0};
    xdit_inputs again = *in; /* the outputs again, into scratch: the same bits */
    again.audio = scratch_take(&s, B * in->audio_chunks * S2V_AUDIO_TOKENS * D, MEM_WORKSPACE, "s2v.audio_tokens");
    again.audio_cs = scratch_take(&s, B * in->audio_chunks * D, MEM_WORKSPACE, "s2v.audio_adain_input");
    st_status st = s.status ? s.status : audio_encode(m, a, a->cond, &f, &s, &again);
    float *g = st ? NULL : scratch_take_zero(&s, S * T3 * D, MEM_WORKSPACE, "s2v.daudio_act");
    if (!st && !(st = s.status)) st = outputs_backward(m, a, &f, in, g);
    if (!st) st = stages_backward(m, a, &f, g, &s);
    acts_release(&f);
    const st_status end = scratch_end(&s);
    return st ? st : end;
}

void wan_s2v_audio_release(model *m, wan_s2v_audio *a, xdit_inputs *in)
{
    (void)m, (void)in;
    a->cond = NULL;
}

/* ---- the family ---- */

/* a sample's conditioning: the text, the audio features (layers, audio_dim, latent frames), the reference latent */
static int64_t s2v_cond_len(const model_config *mc)
{
    return wan_s2v_reference_at(mc) + mc->channels * mc->height * mc->width;
}

static void s2v_condition(const model_config *mc, const char *caption, float *cond)
{
    float *rest = family_text_condition(mc, caption, cond, NULL);
    /* no audio, no reference image: the stand-in has neither (SimpleTuner's missing audio is zeros too) */
    memset(rest, 0, (size_t)(model_cond_len(mc) - (rest - cond)) * sizeof *rest);
}

static const char *s2v_uncached(const model_config *mc)
{
    (void)mc;
    return "the Wav2Vec2 hidden states of each latent frame (SimpleTuner's s2v_audio_embeds, from "
           "facebook/wav2vec2-large-xlsr-53) and the reference image's latents (conditioning_latents)";
}

static void s2v_blocks(const model_config *mc, char *buf, size_t n)
{
    snprintf(buf, n, "%lld cross-attention blocks (+ %lld reference tokens), %d audio injectors",
             (long long)mc->depth, (long long)(grid_rows(mc) * grid_cols(mc)), __builtin_popcountll(mc->audio_inject));
}

static const family_preset presets[] = {
    {"wan-s2v-tiny", 3, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    /* Wan2.2-S2V-14B: WanS2VTransformer3DModel's defaults, which are its published config's */
    {"wan-s2v-14b", 40, 5120, 40, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
};

static const uint64_t INJECT_14B = 1ull << 0 | 1ull << 4 | 1ull << 8 | 1ull << 12 | 1ull << 16 | 1ull << 20 |
                                   1ull << 24 | 1ull << 27 | 1ull << 30 | 1ull << 33 | 1ull << 36 | 1ull << 39;

/* 21 latent frames: SimpleTuner's 81 (5 audio chunks); the tiny one's 8 make 2 */
static void s2v_preset(model_config *mc, const char *name, bool tiny)
{
    (void)name;
    mc->ffn_dim = tiny ? 64 : 13824, mc->frames = tiny ? 8 : 21, mc->patch_t = 1;
    mc->audio_layers = tiny ? 3 : 25, mc->audio_channels = tiny ? 8 : 1024;
    mc->audio_inject = tiny ? (1ull << 0 | 1ull << 2) : INJECT_14B;
}

/* num_frames (or a bucket's frames) through Wan's VAE, which keeps the first and every 4th after it; 1, the default,
 * keeps the preset's clip (one frame makes no audio chunk) */
static st_status s2v_latent_frames(model_config *mc, int64_t frames)
{
    if (frames <= 1) return ST_OK;
    if ((frames - 1) % 4)
        return st_fail(ST_ERR_INVALID, "num_frames: %lld; wan_s2v takes 4 k + 1 frames (its VAE keeps the first and "
                       "every 4th after it)", (long long)frames);
    mc->frames = 1 + (frames - 1) / 4;
    return ST_OK;
}

static st_status s2v_check(const model_config *mc)
{
    const int64_t A = mc->frames > 0 ? wan_s2v_audio_chunks(mc) : 0, T = mc->frames * grid_rows(mc) * grid_cols(mc);
    if (mc->audio_layers < 1 || mc->audio_layers > MAX_LAYERS || mc->audio_channels < 1 ||
        mc->audio_channels > (1 << 16) || !mc->audio_inject || mc->depth > 64 ||
        (mc->depth < 64 && mc->audio_inject >> mc->depth) || mc->hidden % (2 * AUDIO_HEADS))
        return family_refuse(mc, GROUP_AUDIO, "wan_s2v takes 1 to 64 Wav2Vec2 layers 1 to 65536 wide, audio injectors "
                             "after blocks of its depth (at most 64), and a width that is a multiple of 8");
    if (A < 1 || T % A || mc->patch_t != 1)
        return st_fail(ST_ERR_INVALID, "wan_s2v: %lld latent frames of %lld x %lld tokens make %lld audio chunks "
                       "((frames + 17) halved twice, less 5), which must split the video tokens evenly, at "
                       "patch_size_t %lld; it takes at least 4 frames, a chunk count dividing the tokens, and "
                       "patch_size_t 1",
                       (long long)mc->frames, (long long)grid_rows(mc), (long long)grid_cols(mc), (long long)A,
                       (long long)mc->patch_t);
    return ST_OK;
}

/* WanS2VTransformer3DModel's config: its defaults (the 14B's), then the file's; what SimpleTuner's training never
 * varies (adain, zero_timestep, the frame packer, pose_dim 16) is refused otherwise, by name. */
static st_status s2v_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t hd = 128, heads = 40, out = 16, freq = 256, pose = S2V_POSE_DIM, layers[64], n = 12;
    static const int64_t inject[12] = {0, 4, 8, 12, 16, 20, 24, 27, 30, 33, 36, 39};
    memcpy(layers, inject, sizeof inject);
    mc->channels = 16, mc->depth = 40, mc->text_dim = 4096, mc->ffn_dim = 13824, mc->patch = 2, mc->patch_t = 1;
    mc->audio_channels = 1024, mc->audio_layers = 25;
    const json_key keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd},
                             {"in_channels", &mc->channels}, {"out_channels", &out}, {"text_dim", &mc->text_dim},
                             {"freq_dim", &freq}, {"ffn_dim", &mc->ffn_dim}, {"num_layers", &mc->depth},
                             {"audio_dim", &mc->audio_channels}, {"num_weighted_avg_layers", &mc->audio_layers},
                             {"pose_dim", &pose}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_fixed(j, file, "eps", 1e-6, "Wan S2V");
    if (!st) st = json_fixed_bool(j, file, "enable_adain", true, "Wan S2V (its audio injectors' AdaLN)");
    if (!st) st = json_fixed_text(j, file, "adain_mode", "attn_norm", "Wan S2V");
    if (!st) st = json_fixed_bool(j, file, "zero_timestep", true, "Wan S2V (the reference tokens at t = 0)");
    if (!st) st = json_fixed_bool(j, file, "enable_framepack", true, "Wan S2V (frame_packer's weights)");
    if (!st) st = json_fixed_bool(j, file, "cross_attn_norm", true, "Wan S2V");
    if (!st) st = json_patch_3d(j, file, mc);
    if (st) return st;
    const cJSON *il = cJSON_GetObjectItemCaseSensitive(j, "audio_inject_layers");
    if (il && (!cJSON_IsArray(il) || cJSON_GetArraySize(il) < 1 || cJSON_GetArraySize(il) > 64))
        return st_fail(ST_ERR_FORMAT, "%s: audio_inject_layers is not a list of 1 to 64 block indices", file);
    if (il && (st = json_axes(j, file, "audio_inject_layers", (int)(n = cJSON_GetArraySize(il)), layers))) return st;
    static const char *const unbuilt[] = {"added_kv_proj_dim", "deltatime_type"};
    for (size_t i = 0; i < sizeof unbuilt / sizeof *unbuilt; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, unbuilt[i]);
        if (x && !cJSON_IsNull(x))
            return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is set; segtrain builds Wan S2V's transformer without an image "
                           "branch or FlowMap's delta embedder, where it is null", file, unbuilt[i]);
    }
    if (freq != DIT_FREQ_DIM || out != mc->channels || pose != S2V_POSE_DIM)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: freq_dim %lld, out_channels %lld, pose_dim %lld; segtrain builds Wan "
                       "S2V's with freq_dim 256, out_channels = in_channels (%lld) and pose_dim 16 (SimpleTuner's zero "
                       "pose latents)",
                       file, (long long)freq, (long long)out, (long long)pose, (long long)mc->channels);
    mc->audio_inject = 0;
    for (int64_t i = 0; i < n; i++) {
        if (layers[i] < 0 || layers[i] >= 64)
            return st_fail(ST_ERR_FORMAT, "%s: audio_inject_layers[%lld] = %lld is not a block index 0 to 63", file,
                           (long long)i, (long long)layers[i]);
        mc->audio_inject |= 1ull << layers[i];
    }
    mc->heads = heads, mc->hidden = hd * heads, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    return ST_OK;
}

const family_desc wan_s2v_desc = {
    .name = "wan_s2v", .topology = TOPO_XATTN, .traits = TR_TEXT | TR_VIDEO | TR_UNPOOLED,
    .st = {{.name = "wan_s2v", .title = "WanS2V", .diffusers = "WanS2VTransformer3DModel", .flavours = "s2v-14b-2.2",
            .built = "s2v-14b-2.2:wan-s2v-14b", .fallback = "s2v-14b-2.2",
            .example = "wan-s2v-14b-480p.peft-lora+ramtorch.json", .tiny = "wan-s2v-tiny", .shape = "832x480@81"}},
    .latent_frames = s2v_latent_frames, .uncached_of = s2v_uncached, .cond_len = s2v_cond_len,
    .condition = s2v_condition, .describe_blocks = s2v_blocks,
    .ops = &xdit_family, .topology_options = &(const xdit_options){.wan = true, .s2v = true}, FAMILY_PRESETS(presets),
    .quanto_exclude = quanto_exclude_video, .swap_blocks = {"blocks"}, .preset = s2v_preset,
    .readers = {{"WanS2VTransformer3DModel", s2v_from_json}},
    .fields = F_FFN | F_AUDIO_CHANNELS | F_AUDIO_INJECT, .check = s2v_check,
};
