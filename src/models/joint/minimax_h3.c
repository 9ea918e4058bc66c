/* MiniMax-H3 (docs/FAMILIES.md): diffusers' MiniMaxH3Transformer3DModel, trained as SimpleTuner's minimaxh3 trains
 * it in its default target mode, video: one packed sequence a sample, [the text's L rows; the target video's T rows]
 * (packing.py's layout without keyframe or audio rows), the loss on the video rows' prediction.
 *
 * - context_embedder (text_dim -> D), then token_refiner: its refiner_blocks (sequence 0: flux3_block.c's `plain`
 *   MiniMax blocks over the L text rows, no modulation and no rotation) and final_norm.
 * - proj_in: the video latents' 1 x 2 x 2 patches, features channel-major (PATCH_CONV), -> D.
 * - transformer_blocks (sequence 1, `tagged` MiniMax blocks over the L + T rows): each block's adaln_proj.linear of
 *   SiLU(temb) gives a set of (shift, scale, gate) twice per modality; the text rows read the text's, the video rows
 *   the video's, both at the sample's one timestep.
 * - The time is t = 1 - sigma, unscaled (SimpleTuner's timesteps, 1 - sigmas): sinusoids (time_proj, cosines first),
 *   then time_embedder (linear_1, SiLU, linear_2). Every modulation reads SiLU(temb).
 * - Rotary: rotate-half pairs on each head's first 6 f channels (f = rope_freq_dim), angles of the axes (t, h, w), f
 *   frequencies each at theta^(-j / f). Text row j sits at (j, 0, 0); video frame u's rows at time len + tau_u (tau
 *   the sum of 5/3 (1, 4, 4, 4, 4)[k % 5] over k < u, len the sample's caption length, as SimpleTuner shifts a
 *   padded sample's media clock) and at height and width 32 (left + i r / n) on the rows' and columns' n patches
 *   (packing.py's aspect-normalised grid: r the axis's side over sqrt(H W), left (1 - r) / 2; a square's 32 i / n).
 * - norm_out: RMSNorm of the video rows, (1 + scale) + shift from norm_out.linear(SiLU(temb)) = (shift, scale), then
 *   proj_out. SimpleTuner's target is x0 - noise (flow_matching_target_direction -1): the output is negated into
 *   segtrain's noise - x0.
 * - The text's padding keys are hidden from every attention, the refiner's and the blocks': SimpleTuner's
 *   packed_valid_mask keeps them out of the live rows' attention too (padding rows never reach the loss).
 * - audio_proj_in and audio_proj_out are loaded and saved as they are: the video mode has no audio rows. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/flux3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MH_THETA 10000.0
#define MH_FRAME_RESCALE (5.0 / 3.0)
#define MH_SPATIAL_SCALE 32.0

enum { REF, MAIN, NSEQ };

typedef struct mh_model {
    f3_block *blocks[NSEQ];
    temb te;
    lin_layer proj_in, audio_in, ctx, audio_out;
    int ref_norm; /* token_refiner.final_norm */
    joint_final fin; /* norm_out, proj_out */
    float *rope, *kb, *kbt; /* the joint rows' rotary tables (B, S, rot / 2, 2) and key bias (B, S); the text's (B, L) */
    attn_mask mask[NSEQ];
    const attn_mask *maskp[NSEQ];
    /* a step */
    float *t1, *patches, *text_in, *text_n;
    op_state ref_stats;
    block_state refined;
} mh_model;

static mh_model *mh_of(const model *m) { return m->impl; }

static int64_t rows_of(const model *m, int q) { return m->shape.text + (q == MAIN ? m->shape.tokens : 0); }
static int64_t rot_of(const model_config *c) { return c->rope_axes[0] + c->rope_axes[1] + c->rope_axes[2]; }
static float *pw(const model *m, int i) { return param_at(m->params, i)->w; }
static float *pg(const model *m, int i) { return param_at(m->params, i)->g; }

static st_status mh_create(model *m)
{
    const model_config *c = &m->cfg;
    mh_model *d = m->impl;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = model_patch_dim(c);
    /* in the order of MiniMaxH3Transformer3DModel's state_dict */
    d->proj_in = lin_register(s, "proj_in", P, D, true, 0, 0, full);
    d->audio_in = lin_register(s, "audio_proj_in", c->audio_channels, D, true, 0, 0, false);
    d->ctx = lin_register(s, "context_embedder", c->text_dim, D, true, 0, 0, full);
    temb_register_mid(s, &d->te, "time_embedder.linear_1", "time_embedder.linear_2", c->time_channels, c->time_hidden,
                      c->time_dim, full);
    static const char *const names[NSEQ] = {"token_refiner.refiner_blocks", "transformer_blocks"};
    char name[96];
    for (int q = 0; q < NSEQ; q++) {
        const int n = (int)(q == REF ? c->refiner_depth : c->depth);
        if (!(d->blocks[q] = model_seq_blocks(m, q, names[q], n, &f3_block_kind, sizeof *d->blocks[q])))
            return st_host_oom("the MiniMax-H3 model");
        m->seq_sample[q] = rows_of(m, q) * m->shape.hidden;
        for (int i = 0; i < n; i++) {
            f3_block *b = &d->blocks[q][i];
            *b = (f3_block){.m = m, .rows = rows_of(m, q), .split = q == MAIN ? m->shape.text : 0, .ffn = c->ffn_dim,
                            .eps = (float)c->norm_eps, .sequential = true, .minimax = true, .plain = q == REF,
                            .tagged = q == MAIN, .inner = c->heads * c->head_dim, .rot = q == MAIN ? rot_of(c) : 0,
                            .rope = q == MAIN ? &d->rope : NULL, .mask = &d->maskp[q]};
            snprintf(name, sizeof name, "%s.%d", names[q], i);
            f3_block_register(s, b, name, c, true);
        }
        if (q == REF) d->ref_norm = param_add(s, "token_refiner.final_norm.weight", 1, (int64_t[]){D}, full);
    }
    d->fin = (joint_final){.rms = true, .n_mod = 2, .shift_first = true, .eps = (float)c->norm_eps, .negate = true,
                           .negate_late = true, .order = PATCH_CONV, .rows = rows_of(m, MAIN), .at = m->shape.text};
    d->fin.norm = param_add(s, "norm_out.norm.weight", 1, (int64_t[]){D}, full);
    d->fin.mod = lin_register(s, "norm_out.linear", c->time_dim, 2 * D, true, 0, 0, full);
    d->fin.out = lin_register(s, "proj_out", D, P, true, 0, 0, full);
    d->audio_out = lin_register(s, "audio_proj_out", D, c->audio_channels, true, 0, 0, false);
    return ST_OK;
}

static void mh_release(model *m)
{
    mh_model *d = mh_of(m);
    state_free(m->pool, &d->refined);
    op_state_release(&d->ref_stats), joint_final_release(&d->fin);
    d->maskp[REF] = d->maskp[MAIN] = NULL;
}

/* Coordinate k of a spatial axis of dim latent pixels (n patches) on a canvas of area sqrt_area^2: the pipeline's
 * numpy linspace(left, left + ratio, n, endpoint=False) times 32, the axis its share of the area's side (ratio)
 * centred on the unit interval; numpy's steps ((stop - start) / n, k step + start), so a square gives k / n. */
static double spatial_coord(int64_t k, int64_t dim, int64_t n, double sqrt_area)
{
    const double ratio = (double)dim / sqrt_area, left = (1.0 - ratio) / 2.0;
    const double step = ((left + ratio) - left) / (double)n;
    return ((double)k * step + left) * MH_SPATIAL_SCALE;
}

/* Each sample's caption length, positions (ids: (S, 3)), rotary table and key biases (a host loop's) */
static st_status caption_positions(model *m, const float *cond, float *ids)
{
    mh_model *d = mh_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = rows_of(m, MAIN), rot = rot_of(c);
    const int64_t nh = grid_rows(c), nw = grid_cols(c), grid = nh * nw;
    const double side = sqrt((double)(c->height * c->width));
    st_status st = ST_OK;
    for (int64_t b = 0; !st && b < B; b++) {
        float len = 0.0f;
        if ((st = model_caption_length(m, cond, b, &len))) break;
        double tau = 0.0; /* frame u's time after the text: packing.py's cumulative (1, 4, 4, 4, 4) 5/3 spans */
        for (int64_t r = 0; r < S; r++) {
            const int64_t v = r - L, u = v / grid, i = v % grid;
            if (r >= L && i == 0 && u > 0) tau += MH_FRAME_RESCALE * (u % 5 == 1 ? 1.0 : 4.0);
            ids[r * 3] = (float)(r < L ? (double)r : ((double)L + tau) + (double)((int64_t)len - L));
            ids[r * 3 + 1] = (float)(r < L ? 0.0 : spatial_coord(i / nw, c->height, nh, side));
            ids[r * 3 + 2] = (float)(r < L ? 0.0 : spatial_coord(i % nw, c->width, nw, side));
            d->kb[b * S + r] = r < L && r >= (int64_t)len ? -INFINITY : 0.0f;
            if (r < L) d->kbt[b * L + r] = len > 0.0f ? d->kb[b * S + r] : 0.0f;
        }
        rope_table(d->rope + b * S * rot, ids, S, 3, c->rope_axes, MH_THETA);
    }
    return st;
}

/* Each sample's rotary table and key biases: its caption's padding keys hidden, but for the refiner's an empty
 * caption's (its rows are all padding, whose values reach no live row) */
static st_status positions(model *m, const float *cond)
{
    mh_model *d = mh_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = rows_of(m, MAIN), rot = rot_of(c);
    st_status st = ST_OK;
    model_hold(m, &st, &d->rope, B * S * rot, "minimax.rope", false);
    model_hold(m, &st, &d->kb, B * S, "minimax.key_mask", false);
    model_hold(m, &st, &d->kbt, B * L, "minimax.text_key_mask", false);
    if (st) return st;
    st = model_host_loop(m, d->rope, caption_positions, cond, S * 3, "minimax.position_ids");
    d->mask[REF] = (attn_mask){.key_bias = d->kbt, .batch_stride = L};
    d->mask[MAIN] = (attn_mask){.key_bias = d->kb, .batch_stride = S};
    d->maskp[REF] = &d->mask[REF], d->maskp[MAIN] = &d->mask[MAIN];
    return st;
}

static st_status mh_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    mh_model *d = mh_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, D = c->hidden, S = L + T;
    const int64_t P = model_patch_dim(c), K = model_cond_len(c), Dc = c->text_dim, BL = B * L, Dt = c->time_dim;
    const float eps = (float)c->norm_eps;
    st_status st = ST_OK;
    model_hold(m, &st, &d->t1, B, "minimax.t", false);
    model_hold(m, &st, &d->patches, B * T * P, "minimax.patches", false);
    model_hold(m, &st, &d->text_in, BL * Dc, "minimax.text", false);
    model_hold(m, &st, &d->text_n, BL * D, "minimax.refined", false);
    temb_take_path(m, &d->te, &st);
    model_hold(m, &st, &m->ctx.cs, B * Dt, "silu_temb", false);
    if (train) model_hold(m, &st, &m->ctx.dcs, B * Dt, "dsilu_temb", true);
    if (!st) st = positions(m, cond);
    if (!st) { /* SimpleTuner's timesteps: 1 - sigma */
        time_one_minus_sigma(d->t1, timesteps, B);
        timestep_embedding(d->te.freq, d->t1, B, c->time_channels, 10000.0);
        st = temb_mlp_forward(m, &d->te);
        if (!st) silu_forward(m->ctx.cs, d->te.c, B * Dt);
    }
    float *x0 = model_take(m, &st, BL * D, "minimax.caption", false);
    if (!st) {
        copy_rows(d->text_in, L * Dc, cond, K, B, L * Dc);
        st = lin_forward(m->params, m->pool, &d->ctx, x0, d->text_in, BL);
    }
    if (!st) st = model_seq_forward1(m, REF, &x0, train, &d->refined);
    pool_free(m->pool, x0);
    if (!st) st = rmsnorm_forward(m->pool, d->text_n, d->refined.t[0], pw(m, d->ref_norm), BL, D, eps,
                                  train ? &d->ref_stats : NULL);
    if (!st && !train) state_free(m->pool, &d->refined);
    float *vid = model_take(m, &st, B * T * D, "minimax.video", false);
    float *joint = model_take(m, &st, B * S * D, "minimax.joint", false);
    const patch_shape ps = model_patches(m);
    if (!st) patchify_forward(d->patches, x, &ps);
    if (!st) st = lin_forward(m->params, m->pool, &d->proj_in, vid, d->patches, B * T);
    if (!st) model_rows_scatter(m, joint, d->text_n, S, 0, L), model_rows_scatter(m, joint, vid, S, L, T);
    pool_free(m->pool, vid);
    if (!st) st = joint_last_forward(m, &d->fin, MAIN, &joint, m->ctx.cs, train, pred);
    pool_free(m->pool, joint);
    return st;
}

static st_status mh_backward(model *m, const float *dpred)
{
    mh_model *d = mh_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = L + T, D = c->hidden, N = B * T;
    const int64_t BL = B * L, Dt = c->time_dim;
    st_status st = ST_OK;
    scratch k = {.pool = m->pool};
    block_state grad = {.n = 1};
    if ((st = joint_final_head_backward(m, &d->fin, &k, dpred, m->ctx.cs, m->ctx.dcs, "minimax.djoint", &grad.t[0])))
        goto done;
    st = model_seq_backward(m, MAIN, &grad); /* releases the run whatever it returns */
    float *part = st ? NULL : scratch_take(&k, B * (L > T ? L : T) * D, MEM_WORKSPACE, "minimax.drows");
    block_state gref = {.n = 1, .t = {model_take(m, &st, BL * D, "minimax.dcaption", true)}};
    if (!st) st = k.status;
    if (!st) model_rows_gather(m, part, grad.t[0], S, L, T);
    if (!st) st = lin_backward(m->params, m->pool, &d->proj_in, NULL, part, d->patches, N);
    if (!st) model_rows_gather(m, part, grad.t[0], S, 0, L);
    state_free(m->pool, &grad);
    if (!st) rmsnorm_backward(gref.t[0], pg(m, d->ref_norm), part, d->refined.t[0], pw(m, d->ref_norm), BL, D,
                              &d->ref_stats);
    state_free(m->pool, &d->refined);
    if (!st) st = model_seq_backward(m, REF, &gref); /* else model_release's */
    if (!st) st = lin_backward(m->params, m->pool, &d->ctx, NULL, gref.t[0], d->text_in, BL);
    state_free(m->pool, &gref);
    if (!st) {
        float *dc = scratch_take_zero(&k, B * Dt, MEM_WORKSPACE, "minimax.dtemb");
        if (!(st = k.status)) st = temb_silu_backward(m, &d->te, dc, m->ctx.dcs);
    }
done:;
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

/* segtrain's own initialisation, for training from scratch: the norms at 1, the modulations and the output at zero
 * (the blocks start as identities), the time embedder N(0, 0.02), xavier linears elsewhere */
static const init_rule mh_inits[] = {
    {INIT_ZERO, "adaln_proj|norm_out.linear|proj_out"}, {INIT_ONE, "norm&.weight$"}, {INIT_NORMAL, "time_embedder"},
    {0}};

/* ---- the family's descriptor (family.h) ---- */

/* its VAE: chunks of 17 frames to 5 latent ones, 17 k + 5 frames to 5 k + 2 */
static int64_t minimax_pixel_frames(const model_config *mc) { return mc->frames > 1 ? (mc->frames - 2) / 5 * 17 + 5 : 1; }

/* its VAE: chunks of 17 frames to 5 latent ones, 17 k + 5 frames to 5 k + 2 */
static st_status minimax_latent_frames(model_config *mc, int64_t frames)
{
    if (frames > 1 && frames % 17 != 5)
        return st_fail(ST_ERR_INVALID, "num_frames: %lld; MiniMax-H3 takes 1 or 17 k + 5 frames (its VAE encodes 17 "
                       "frames a chunk into 5 latent ones, 17 k + 5 into 5 k + 2)", (long long)frames);
    mc->frames = frames > 1 ? (frames - 5) / 17 * 5 + 2 : 1;
    return ST_OK;
}

static const family_preset presets[] = {
    /* MiniMaxH3Transformer3DModel's defaults (MiniMaxAI/MiniMax-H3): 50 blocks of 56 heads x 128 over a 5376-wide
     * stream, Qwen3-VL's 5120-wide states (SimpleTuner's 512 tokens), 24 latent channels through a 16x VAE; the
     * release's 768 px short edge, and 12 latent frames (SimpleTuner's example: 39 frames at 24 fps) */
    {"minimaxh3-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"minimaxh3", 50, 5376, 56, 2, 24, 48, 10, 0, 512, 5120, 0, false, false, 0, 0},
};

static void minimax_preset(model_config *mc, const char *name, bool tiny)
{
    /* the tiny one is the fixture's: heads x head_dim wider than the stream, the rotary pairs on a half of each head */
    mc->head_dim = tiny ? 24 : 128, mc->refiner_depth = tiny ? 1 : 2, mc->ffn_dim = tiny ? 64 : 14336;
    mc->time_channels = tiny ? 32 : 256, mc->time_hidden = tiny ? 48 : 5376, mc->time_dim = tiny ? 16 : 2688;
    mc->norm_eps = 1e-5, mc->audio_channels = tiny ? 8 : 32, mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
    mc->frames = tiny ? 2 : 12;
    const int64_t axes[4] = {tiny ? 4 : 32, tiny ? 4 : 32, tiny ? 4 : 32, 0}; /* 2 rope_freq_dim each */
    memcpy(mc->rope_axes, axes, sizeof axes);
}

static st_status minimax_check(const model_config *mc)
{
    const int64_t rot = mc->rope_axes[0] + mc->rope_axes[1] + mc->rope_axes[2];
    if (mc->head_dim < 2 || mc->head_dim > 1024 || mc->head_dim % 2 || rot < 6 || rot > mc->head_dim ||
        mc->rope_axes[0] % 2 || mc->rope_axes[1] != mc->rope_axes[0] || mc->rope_axes[2] != mc->rope_axes[0] ||
        mc->rope_axes[3] || mc->time_channels < 2 || mc->time_channels % 2 || mc->time_channels > 65536 ||
        mc->time_hidden < 1 || mc->time_hidden > (1 << 20) || mc->time_dim < 1 || mc->time_dim > (1 << 20) ||
        mc->ffn_dim < 1 || mc->audio_channels < 1 || mc->audio_channels > (1 << 16) ||
        !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->patch_t != 1 || mc->out_channels || mc->pooled_dim ||
        mc->guidance_embeds)
        return family_refuse(mc, GROUP_HEAD_DIM, "minimaxh3 takes an even head width of 2 to 1024 holding its three "
                             "equal even rotary axes (2 rope_freq_dim each), even sinusoids of 2 to 65536, widths of 1 "
                             "to 2^20, 1 to 65536 audio channels, an eps in (0, 1) and 1 (no pooled vector, no "
                             "guidance, out_channels 0)");
    return ST_OK;
}

/* MiniMaxH3Transformer3DModel's config: the class defaults (MiniMaxAI/MiniMax-H3's), then the file's values. A patch
 * other than (1, 2, 2), another rope_theta, and q/k or final norm epsilons apart from norm_eps are refused by name. */
static st_status minimax_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t freq = 16, patch[3] = {1, 2, 2};
    double eps = 1e-5, qk_eps = 1e-5, final_eps = 1e-5;
    mc->heads = 56, mc->head_dim = 128, mc->hidden = 5376, mc->depth = 50, mc->refiner_depth = 2, mc->ffn_dim = 14336;
    mc->channels = 24, mc->audio_channels = 32, mc->text_dim = 5120, mc->time_channels = 256, mc->time_hidden = 5376;
    mc->time_dim = 2688;
    const json_key keys[] = {{"num_attention_heads", &mc->heads}, {"attention_head_dim", &mc->head_dim},
                             {"hidden_size", &mc->hidden}, {"num_layers", &mc->depth},
                             {"num_refiner_layers", &mc->refiner_depth}, {"ffn_dim", &mc->ffn_dim},
                             {"in_channels", &mc->channels}, {"audio_in_channels", &mc->audio_channels},
                             {"text_dim", &mc->text_dim}, {"freq_dim", &mc->time_channels},
                             {"time_embed_hidden_dim", &mc->time_hidden}, {"time_embed_dim", &mc->time_dim},
                             {"rope_freq_dim", &freq}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "patch_size", 3, patch);
    if (!st) st = json_fixed(j, file, "rope_theta", 10000.0, "MiniMax-H3 (the class default)");
    if (!st) st = json_eps(j, file, "norm_eps", &eps);
    if (!st) st = json_eps(j, file, "qk_norm_eps", &qk_eps);
    if (!st) st = json_eps(j, file, "final_norm_eps", &final_eps);
    if (st) return st;
    if (patch[0] != 1 || patch[1] != 2 || patch[2] != 2 || qk_eps != eps || final_eps != eps || freq < 1 ||
        freq > 4096)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size (%lld, %lld, %lld), norm_eps %g, qk_norm_eps %g, "
                       "final_norm_eps %g, rope_freq_dim %lld; segtrain reads MiniMax-H3's (1, 2, 2) patches, one "
                       "epsilon for all its norms, and 1 to 4096 rotary frequencies", file, (long long)patch[0],
                       (long long)patch[1], (long long)patch[2], eps, qk_eps, final_eps, (long long)freq);
    mc->patch = 2, mc->patch_t = 1, mc->norm_eps = eps, mc->pooled_dim = 0, mc->guidance_embeds = false;
    mc->single_depth = 0;
    set_rope_axes(mc, (const int64_t[]){2 * freq, 2 * freq, 2 * freq}, 3);
    return ST_OK;
}

const family_desc minimaxh3_desc = {
    .name = "minimaxh3", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK | TR_VIDEO | TR_DRIFT,
    .st = {{.name = "minimaxh3", .title = "MiniMax H3", .diffusers = "MiniMaxH3Transformer3DModel",
            .flavours = "fl2va|ref2va|convrot-int8|convrot-int4|nvfp4|fp8-e4m3fn",
            .built = "fl2va:minimaxh3|convrot-int8:minimaxh3|convrot-int4:minimaxh3|nvfp4:minimaxh3|fp8-e4m3fn:minimaxh3",
            .fallback = "fl2va",
            .why = "ref2va is the reference-to-video-and-audio transformer (SimpleTuner's transformer_ref, with "
                   "reference rows in its sequence); segtrain's conditioning carries no reference",
            .example = "minimaxh3-fl2va-convrot-int8-48g.peft-lora.json", .tiny = "minimaxh3-tiny"}},
    .pixel_frames = minimax_pixel_frames, .latent_frames = minimax_latent_frames,
    .blocks_words = &(const blocks_words){"%lld text refiner + %lld joint blocks, heads %lld wide",
                                          {offsetof(model_config, refiner_depth), offsetof(model_config, depth),
                                           offsetof(model_config, head_dim)}},
    .frames_note = "17 k + 5 frames to 5 k + 2", FAMILY_PRESETS(presets), .preset = minimax_preset,
    .readers = {{"MiniMaxH3Transformer3DModel", minimax_from_json}},
    .fields = F_FFN | F_NORM_EPS | F_HEAD_DIM | F_TIME_HIDDEN | F_TIME_DIM | F_AUDIO_CHANNELS | F_REFINER,
    .check = minimax_check,
    .ops = &(const model_family){.create = mh_create, .impl_size = sizeof(mh_model), .forward = mh_forward,
                                 .backward = mh_backward, .release = mh_release, .inits = mh_inits},
    .swap_blocks = {"transformer_blocks"},
};
