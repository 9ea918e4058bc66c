/* The cross-attention DiT families (docs/FAMILIES.md), in diffusers' names and layouts:
 *
 * - pixart_sigma: PixArtTransformer2DModel. 2x2 patches through pos_embed.proj plus the fixed 2D sin-cos table
 *   (PixArt's base size and interpolation scale; not in the checkpoint, made here), c = adaln_single's timestep
 *   embedding, t6 = adaln_single.linear(SiLU(c)), the T5 tokens through caption_projection (linear, GELU tanh,
 *   linear) with their padding as an additive -10000 key bias, `depth` blocks, and the final layer modulated by
 *   scale_shift_table + c. The output has out_channels (8: PixArt's learned variance); the prediction is its first
 *   in_channels, as SimpleTuner takes it.
 * - wan: WanTransformer3DModel (2.1 text-to-video). Video latents in (1, 2, 2) patches through patch_embedding,
 *   3D rotary positions, c = condition_embedder.time_embedder of the timestep, t6 = time_proj(SiLU(c)), the UMT5
 *   tokens through text_embedder (unmasked: the pipeline's zero padding is attended), blocks with RMSNorm-ed q and
 *   k and a LayerNorm before the cross-attention, and the final layer as PixArt's.
 * - ltxvideo: LTXVideoTransformer3DModel (0.9.x). Video latents in 1 x 1 x 1 patches through proj_in (a linear),
 *   time_embed and caption_projection as PixArt's adaln_single and caption_projection, the T5 padding as PixArt's
 *   bias, blocks with RMSNorms for norm1 and norm2, RMSNorm-ed q and k (eps 1e-5) and LTX's rotary embedding over
 *   the whole width (ltx_rope_table), and the final layer as PixArt's.

 * - sana: SanaTransformer2DModel (1.0, and 1.5 with q/k norms). PixArt's, with 1 x 1 patches through patch_embed.proj
 *   (no position table), time_embed as LTX's, caption_norm (an RMSNorm with weights) after caption_projection, and
 *   blocks with linear self-attention, the cross-attention over its own heads and GLUMBConv (xdit_block.c).
 *
 * - sanavideo: SanaVideoTransformer3DModel. Sana's, over video latents in (1, 2, 2) patches through patch_embedding (a
 *   Conv3d, as Wan's), Wan's rotary table turning the linear self-attention's features in its numerator
 *   (SanaLinearAttnProcessor3_0), and GLUMBTempConv (GLUMBConv per frame, then a (3, 1) convolution over the frames
 *   added to its output).
 *
 * - wan with VACE (WanVACETransformer3DModel): Wan's, with a control branch run first as its own block sequence
 *   (vace_blocks, Wan's blocks on the control stream c): c0 = vace_blocks.0.proj_in(vace_patch_embedding(the
 *   control latents)) + x0, and VACE block k writes hint k = its proj_out(c); main block k vace_every adds hint k
 *   to its output. The hints are the model's activations from the branch's forward to the main blocks' backward.
 *
 * - wan as AnyFlowTransformer3DModel (NVIDIA's bidirectional AnyFlow-Wan2.1-T2V): Wan's, with c = (1 - g)
 *   time_embedder(t) + g delta_embedder(r) (gate_value g; deltatime_type "t-r": of t - r), r per sample from
 *   model_set_r_timesteps (AnyFlow's objective), else r = t; every frame at the sample's times, as the class takes
 *   them per frame.
 *
 * - wan as WanAnimateTransformer3DModel (Wan 2.2 Animate): Wan's image-to-video backbone (the condition latents
 *   concatenated to the noisy latents' channels, the reference image's CLIP tokens attended through every attn2's
 *   added keys and values), the pose latents' embedding added to the frames after the reference one, and a face
 *   adapter after blocks 0, k, 2k, ...: a cross-attention of each latent frame's tokens to that frame's face tokens,
 *   which the motion and face encoders make from the face video (wan_animate.c).
 *
 * One block sequence (xdit_block.c), or VACE's two; the text projection, t6 and the final modulation are made once
 * per step and shared by the blocks, their gradients gathered from them. */
#include "models/core/family.h"
#include "models/xattn/xdit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XDIT_MOD_ROWS 8 /* m->ctx.mod: t6's six rows, then the final layer's shift and scale */
#define PIXART_MASK_BIAS -10000.0f
#define SANA_CAPTION_EPS 1e-5f
#define WAN_ROPE_THETA 10000.0
#define LTX_ROPE_THETA 10000.0
#define LTX_QK_EPS 1e-5f /* torch.nn.RMSNorm's in LTXAttention, and Sana 1.5's Attention's */
/* SimpleTuner's rope_interpolation_scale (1 / (framerate / 8), 32, 32): its default framerate 25 and the VAE's 32x
 * spatial compression; over LTXVideoRotaryPosEmbed's base grid (20, 2048, 2048) */
#define LTX_FRAMERATE 25.0
#define LTX_VAE_SPATIAL 32.0f

#define VACE_MAX 64 /* hints: VACE's control blocks, at most */
#define S2V_MOD_ROWS 14 /* Wan S2V's m->ctx.mod: t6, the final layer's two rows, then t6 at t = 0 */
#define S2V_REF_FRAME 30.0f /* WanS2VRotaryPosEmbed's frame of the reference image's tokens */

typedef struct xd_model {
    xdit_block *blocks;
    xdit_block *vblocks; /* VACE's control branch (vace_count of them) */
    int main;            /* the main blocks' sequence: 1 behind VACE's branch, else 0 */
    int p_cx_w, p_cx_b;  /* vace_patch_embedding */
    lin_layer vace_in;   /* vace_blocks.0.proj_in */
    float *hints[VACE_MAX], *dhints[VACE_MAX];
    float *cpatches, *cemb, *c0;
    block_state vlast;
    wan_animate *anim;   /* Animate's encoders, NULL elsewhere */
    xdit_inputs in;      /* what its blocks read besides the text */
    const float *cond;   /* the forward's conditioning, which Animate's backward reads again */
    /* Wan S2V: the audio encoder; t0, the time embedding at t = 0 on t's weights (the reference tokens' modulation);
     * trainable_condition_mask (rows: video, reference, motion); the pose embedding (its input always zero: its
     * bias alone); a step's zero times, SiLU(t0's c), t6 of it, and the final layer's input (the video rows) */
    wan_s2v_audio *audio;
    temb t0;
    int p_mask, p_pose_w, p_pose_b;
    float *tzero, *cs0, *t6zero, *video;
    bool wan, ltx, sana, svid, s2v; /* sana: Sana or Sana-Video; svid: Sana-Video */
    attn_mask self_mask;       /* Sana-Video's linear attention's: the rotary table */
    int p_x_w, p_x_b, p_pos; /* the patch embedding; PixArt's sin-cos table (fixed, made here) */
    temb t;                  /* c = the timestep's embedding */
    temb delta;              /* AnyFlow's delta embedder; then c is the blend rt, in rt */
    float *rt, *delta_in;
    lin_layer t6;            /* t6 = linear(SiLU(c)) */
    lin_layer cap1, cap2;    /* the text projection */
    int p_cap_norm;          /* Sana's caption_norm after it (RMSNorm with weights); < 0: none */
    int p_table;             /* the final layer's scale_shift_table */
    final_layer final;
    /* a step */
    float *patches, *x0, *text_in, *cap_h, *cap_g, *cap_o, *key_bias, *t6buf;
    op_state cap_stats;
    attn_mask mask;
} xd_model;

static xd_model *xd_of(model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static const xdit_options *xd_options(const model_config *c)
{
    static const xdit_options pixart = {0};
    const xdit_options *o = family_options(c);
    return o ? o : &pixart;
}

/* c's TimestepEmbedding `time`, t6 = linear `t6` of SiLU(c), and the text projection `text` (linear_1, GELU,
 * linear_2), in the class's names; Wan's AnyFlow embeds its delta time between c's and t6 */
static void embedders(param_set *s, xd_model *d, const model_config *c, const char *time, const char *t6,
                      const char *text)
{
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden;
    char n1[96], n2[96];
    snprintf(n1, sizeof n1, "%s.linear_1", text), snprintf(n2, sizeof n2, "%s.linear_2", text);
    temb_register_at(s, &d->t, time, DIT_FREQ_DIM, D, true, full);
    if (c->anyflow) temb_register_at(s, &d->delta, "condition_embedder.delta_embedder", DIT_FREQ_DIM, D, true, full);
    d->t6 = lin_register(s, t6, D, 6 * D, true, 0, 0, full);
    d->cap1 = lin_register(s, n1, c->text_dim, D, true, 0, 0, full);
    d->cap2 = lin_register(s, n2, D, D, true, 0, 0, full);
}

/* ---- Wan S2V (WanS2VTransformer3DModel) ---- */

/* frame_packer's convolutions (the motion frames', which training drops: loaded and saved, untrained) and
 * trainable_condition_mask, in the class's order */
static void s2v_register_inputs(param_set *s, xd_model *d, const model_config *c)
{
    const int64_t D = c->hidden, C = c->channels;
    static const char *const names[3] = {"frame_packer.proj", "frame_packer.proj_2x", "frame_packer.proj_4x"};
    char n[64];
    for (int k = 0; k < 3; k++) {
        const int64_t e = (int64_t)1 << k; /* kernels (1, 2, 2), (2, 4, 4), (4, 8, 8) */
        snprintf(n, sizeof n, "%s.weight", names[k]);
        param_add(s, n, 5, (int64_t[]){D, C, e, 2 * e, 2 * e}, false);
        snprintf(n, sizeof n, "%s.bias", names[k]);
        param_add(s, n, 1, (int64_t[]){D}, false);
    }
    d->p_mask = param_add(s, "trainable_condition_mask.weight", 2, (int64_t[]){3, D}, !c->lora_rank);
}

/* the audio encoder and pose_embedder (its weight untrained: SimpleTuner's pose latents are zeros, so only its bias
 * reaches the tokens), t0 on t's weights, and the reference image's tokens after each sample's video tokens */
static st_status s2v_register_audio(model *m, param_set *s, xd_model *d)
{
    const model_config *c = &m->cfg;
    const int64_t D = c->hidden;
    const st_status st = wan_s2v_audio_create(s, c, &d->audio);
    if (st) return st;
    d->p_pose_w = param_add(s, "condition_embedder.pose_embedder.weight", 5,
                            (int64_t[]){D, S2V_POSE_DIM, c->patch_t, c->patch, c->patch}, false);
    d->p_pose_b = param_add(s, "condition_embedder.pose_embedder.bias", 1, (int64_t[]){D}, !c->lora_rank);
    d->t0 = d->t;
    d->in.ref_tokens = grid_rows(c) * grid_cols(c);
    d->in.audio_chunks = wan_s2v_audio_chunks(c), d->in.audio_tokens = S2V_AUDIO_TOKENS;
    m->seq_sample[0] = (m->shape.tokens + d->in.ref_tokens) * D;
    return ST_OK;
}

/* The patches: each sample's video tokens, then its reference image's (one frame, from its conditioning) */
static st_status s2v_patches(model *m, patch_shape ps, const float *x, const float *cond)
{
    xd_model *d = xd_of(m);
    const model_config *c = &m->cfg;
    const int64_t n = c->channels * c->height * c->width, P = model_patch_dim(c);
    float *ref = NULL;
    st_status st = pool_alloc(m->pool, (size_t)(ps.batch * n) * sizeof(float), MEM_WORKSPACE, "s2v.reference",
                              (void **)&ref);
    if (st) return st;
    ps.tokens = m->shape.tokens + d->in.ref_tokens;
    patchify_forward(d->patches, x, &ps);
    copy_rows(ref, n, cond + wan_s2v_reference_at(c), model_cond_len(c), ps.batch, n);
    ps.frames = 1;
    patchify_forward(d->patches + m->shape.tokens * P, ref, &ps);
    pool_free(m->pool, ref);
    return ST_OK;
}

/* x0's additions: pose_embedder's bias on the video tokens, trainable_condition_mask's row 0 on them and row 1 on
 * the reference's; the rotary table of the video's (frame, row, column) and the reference's (30, row, column) */
static st_status s2v_embed(model *m)
{
    xd_model *d = xd_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, R = d->in.ref_tokens, D = c->hidden, hd = D / c->heads;
    for (int64_t b = 0; b < B; b++) {
        float *row = d->x0 + b * (T + R) * D;
        add_row(row, PW(d->p_pose_b), T, D);
        add_row(row, PW(d->p_mask), T, D);
        add_row(row + T * D, PW(d->p_mask) + D, R, D);
    }
    const int64_t frames = c->frames / c->patch_t, nf = frames > 31 ? frames : 31;
    float *ids = NULL;
    st_status st = pool_alloc(m->pool, (size_t)((nf + 1) * R * 3) * sizeof(float), MEM_WORKSPACE,
                              "s2v.position_ids", (void **)&ids);
    if (st) return st;
    const int64_t hw = 2 * (hd / 6), axes[3] = {hd - 2 * hw, hw, hw};
    position_ids_grid(ids, 0, nf, grid_rows(c), grid_cols(c)); /* frames 0 .. nf - 1, then frame 30's again */
    copy_rows(ids + nf * R * 3, R * 3, ids + (int64_t)S2V_REF_FRAME * R * 3, R * 3, 1, R * 3);
    rope_table(m->ctx.rope, ids, T, 3, axes, WAN_ROPE_THETA);
    rope_table(m->ctx.rope + T * hd, ids + nf * R * 3, R, 3, axes, WAN_ROPE_THETA);
    pool_free(m->pool, ids);
    return ST_OK;
}

/* The reference tokens' modulation, t6 of the time embedding at t = 0 (zero_timestep), into m->ctx.mod's rows 8 to
 * 13; then the audio encoder */
static st_status s2v_time_zero(model *m, const float *cond, bool train)
{
    xd_model *d = xd_of(m);
    const int64_t B = m->shape.batch, D = m->cfg.hidden;
    st_status st = ST_OK;
    model_hold(m, &st, &d->tzero, B, "s2v.zero_time", true);
    model_hold(m, &st, &d->cs0, B * D, "s2v.silu_c0", false);
    model_hold(m, &st, &d->t6zero, B * 6 * D, "s2v.t6_zero", false);
    if (st) return st;
    if ((st = temb_forward(m, &d->t0, d->tzero))) return st;
    silu_forward(d->cs0, d->t0.c, B * D);
    if ((st = lin_forward(m->params, m->pool, &d->t6, d->t6zero, d->cs0, B))) return st;
    copy_rows(m->ctx.mod + 8 * D, S2V_MOD_ROWS * D, d->t6zero, 6 * D, B, 6 * D);
    return wan_s2v_audio_forward(m, d->audio, cond, train, &d->in);
}

/* The final layer on the video rows of the last state x (copied to d->video) */
static st_status s2v_final(model *m, const float *x)
{
    xd_model *d = xd_of(m);
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = m->cfg.hidden, Ts = T + d->in.ref_tokens;
    st_status st = ST_OK;
    model_hold(m, &st, &d->video, B * T * D, "s2v.video_rows", false);
    if (st) return st;
    copy_rows(d->video, T * D, x, Ts * D, B, T * D);
    return final_forward(m, &d->final, d->video);
}

/* dx (B Ts, D, zero) from dpred through the final layer: the video rows' */
static st_status s2v_final_backward(model *m, const float *dpred, float *dx)
{
    xd_model *d = xd_of(m);
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = m->cfg.hidden, Ts = T + d->in.ref_tokens;
    st_status st = ST_OK;
    float *dv = model_take(m, &st, B * T * D, "s2v.dvideo_rows", true);
    if (!st) st = final_backward(m, &d->final, d->video, dpred, dv);
    if (!st) copy_rows(dx, Ts * D, dv, T * D, B, T * D);
    pool_free(m->pool, dv);
    return st;
}

/* From dL/dx0: the pose bias's and the mask rows' gradients, the audio encoder's, and t0's path from the rows of
 * t = 0 in m->ctx.dmod */
static st_status s2v_backward(model *m, const float *dx0)
{
    xd_model *d = xd_of(m);
    const int64_t B = m->shape.batch, T = m->shape.tokens, R = d->in.ref_tokens, D = m->cfg.hidden;
    for (int64_t b = 0; b < B; b++) {
        const float *row = dx0 + b * (T + R) * D;
        if (PG(d->p_pose_b)) channel_add_backward(PG(d->p_pose_b), row, T, D, 1);
        if (PG(d->p_mask)) {
            channel_add_backward(PG(d->p_mask), row, T, D, 1);
            channel_add_backward(PG(d->p_mask) + D, row + T * D, R, D, 1);
        }
    }
    st_status st = wan_s2v_audio_backward(m, d->audio, &d->in);
    scratch k = {.pool = m->pool};
    float *dt6 = scratch_take(&k, B * 6 * D, MEM_WORKSPACE, "s2v.dt6_zero");
    float *dcs = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "s2v.dsilu_c0");
    float *dc = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "s2v.dc0");
    if (!st) st = k.status;
    if (!st) {
        copy_rows(dt6, 6 * D, m->ctx.dmod + 8 * D, S2V_MOD_ROWS * D, B, 6 * D);
        st = lin_backward(m->params, m->pool, &d->t6, dcs, dt6, d->cs0, B);
    }
    if (!st) {
        silu_backward(dc, dcs, d->t0.c, B * D);
        st = temb_backward(m, &d->t0, dc);
    }
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

static st_status xd_create(model *m)
{
    const model_config *c = &m->cfg;
    xd_model *d = m->impl;
    const int n = (int)c->depth, nv = (int)c->vace_count;
    if (nv > VACE_MAX) return st_fail(ST_ERR_UNSUPPORTED, "vace_layers: %d VACE blocks; at most %d", nv, VACE_MAX);
    const xdit_options *o = xd_options(c);
    d->wan = o->wan, d->ltx = o->ltx, d->svid = o->sana_video, d->sana = o->sana || o->sana_video, d->s2v = o->s2v;
    d->main = nv ? 1 : 0;
    d->blocks = model_seq_blocks(m, d->main, d->wan ? "blocks" : "transformer_blocks", n, &xdit_block_kind,
                                 sizeof *d->blocks);
    if (nv) d->vblocks = model_seq_blocks(m, 0, "vace_blocks", nv, &xdit_block_kind, sizeof *d->vblocks);
    if (!d->blocks || (nv && !d->vblocks)) return st_host_oom("the cross-attention model");
    d->p_cap_norm = -1;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = model_patch_dim(c), Pout = P / c->channels * model_out_channels(c);
    const int64_t T = m->shape.tokens, Cin = c->channels + (d->wan ? c->cond_channels : 0); /* Animate's 16 + 20 */
    /* in the order of the classes' state_dicts */
    const char *x_name = d->wan || d->svid ? "patch_embedding"
                         : d->ltx          ? "proj_in"
                         : d->sana         ? "patch_embed.proj"
                                           : "pos_embed.proj";
    char nw[64], nb[64];
    snprintf(nw, sizeof nw, "%s.weight", x_name), snprintf(nb, sizeof nb, "%s.bias", x_name);
    d->p_x_w = d->wan || d->svid ? param_add(s, nw, 5, (int64_t[]){D, Cin, c->patch_t, c->patch, c->patch}, full)
               : d->ltx ? param_add(s, nw, 2, (int64_t[]){D, P}, full)
                        : param_add(s, nw, 4, (int64_t[]){D, c->channels, c->patch, c->patch}, full);
    d->p_x_b = param_add(s, nb, 1, (int64_t[]){D}, full);
    if (nv) {
        const int64_t shape[5] = {D, c->vace_channels, c->patch_t, c->patch, c->patch};
        d->p_cx_w = param_add(s, "vace_patch_embedding.weight", 5, shape, full);
        d->p_cx_b = param_add(s, "vace_patch_embedding.bias", 1, (int64_t[]){D}, full);
    }
    d->p_pos = d->wan || d->ltx || d->sana ? -1 : param_add_grid_table(s, "pos_embed.pos_embed", 3, (int64_t[]){1, T, D});
    if (d->ltx) d->p_table = param_add(s, "scale_shift_table", 2, (int64_t[]){2, D}, full); /* LTX's: first */
    if (d->ltx || d->sana)
        embedders(s, d, c, "time_embed.emb.timestep_embedder", "time_embed.linear", "caption_projection");
    if (d->sana) d->p_cap_norm = param_add(s, "caption_norm.weight", 1, (int64_t[]){D}, full);
    if (d->s2v) s2v_register_inputs(s, d, c);
    if (d->wan)
        embedders(s, d, c, "condition_embedder.time_embedder", "condition_embedder.time_proj",
                  "condition_embedder.text_embedder");
    if (d->s2v) {
        const st_status st = s2v_register_audio(m, s, d);
        if (st) return st;
    }
    char prefix[64];
    const xdit_block kind = {.m = m, .qk_norm = (d->wan && !d->s2v) || d->ltx || (d->sana && c->qk_norm),
                             .rope = d->wan || d->ltx, .no_qkv_bias = d->s2v, .audio = -1,
                             .rope_width = d->ltx, .sana = d->sana, .cross_heads = c->cross_heads,
                             .rms_norms = d->ltx, .cross_norm = d->wan,
                             .eps = d->ltx || d->sana ? LTX_QK_EPS : XDIT_LN_EPS, /* torch's RMSNorm 1e-5 */
                             .ffn = c->ffn_dim ? c->ffn_dim : 4 * D, .cross_w = -1, .cross_b = -1, .hint_in = -1,
                             .hint_out = -1, .hints = d->hints, .dhints = d->dhints, .added_kv = c->image_tokens > 0,
                             .face = -1, .in = &d->in, .self_mask = d->svid ? &d->self_mask : NULL,
                             .conv_temp = -1};
    for (int i = 0; i < n; i++) {
        xdit_block *b = &d->blocks[i];
        *b = kind;
        if (nv && i % c->vace_every == 0 && i / c->vace_every < nv) b->hint_in = (int)(i / c->vace_every);
        if (c->face_every && i % c->face_every == 0) b->face = (int)(i / c->face_every);
        if (c->audio_inject >> i & 1) b->audio = __builtin_popcountll(c->audio_inject & ((1ull << i) - 1));
        snprintf(prefix, sizeof prefix, "%s.%d", d->wan ? "blocks" : "transformer_blocks", i);
        xdit_block_register(s, b, prefix, d->wan ? "ffn" : "ff", d->wan ? 3 : 2, c);
    }
    for (int k = 0; k < nv; k++) {
        xdit_block *b = &d->vblocks[k];
        *b = kind;
        b->hint_out = k;
        snprintf(prefix, sizeof prefix, "vace_blocks.%d", k);
        xdit_block_register(s, b, prefix, "ffn", 3, c);
    }
    if (nv) d->vace_in = lin_register(s, "vace_blocks.0.proj_in", D, D, true, 0, 0, full);
    if (c->face_every) {
        const st_status st = wan_animate_create(s, c, &d->anim);
        if (st) return st;
    }
    /* the final layer's table: Sana's and PixArt's before proj_out, Wan's after it (LTX's came first) */
    if (!d->wan && !d->ltx) d->p_table = param_add(s, "scale_shift_table", 2, (int64_t[]){2, D}, full);
    d->final.out_w = param_add(s, "proj_out.weight", 2, (int64_t[]){Pout, D}, full);
    d->final.out_b = param_add(s, "proj_out.bias", 1, (int64_t[]){Pout}, full);
    if (d->wan) d->p_table = param_add(s, "scale_shift_table", 3, (int64_t[]){1, 2, D}, full);
    if (!d->wan && !d->ltx && !d->sana) /* PixArt's embedders last */
        embedders(s, d, c, "adaln_single.emb.timestep_embedder", "adaln_single.linear", "caption_projection");
    d->final.ada_w = d->final.ada_b = -1, d->final.mod_row = 6, d->final.order = PATCH_DIT; /* shift, then scale */
    m->ctx.mod_rows = d->s2v ? S2V_MOD_ROWS : XDIT_MOD_ROWS;
    return ST_OK;
}

/* diffusers' get_2d_sincos_pos_embed for PixArt's grid: position k of an edge is k / (grid / base) / interpolation
 * in float32 as torch divides (base = sample_size / patch), the column's sin-cos in the first half of a row, the
 * row's in the second, each half sines then cosines of frequencies 10000^(-j / (D/4)). */
static void xd_fill_fixed(model *m)
{
    xd_model *d = xd_of(m);
    const model_config *c = &m->cfg;
    if (d->p_pos < 0) return; /* no position table (Wan, LTX, Sana) */
    const int64_t gh = grid_rows(c), gw = grid_cols(c), base = c->sample_size / c->patch, D = c->hidden, q = D / 4;
    const float step[2] = {(float)((double)gw / (double)base), (float)((double)gh / (double)base)};
    const float interp = (float)c->interpolation;
    float *t = PW(d->p_pos);
    for (int64_t k = 0; k < gh * gw; k++)
        for (int half = 0; half < 2; half++) {
            const double pos = (double)((float)(half ? k / gw : k % gw) / step[half] / interp);
            float *row = t + k * D + half * 2 * q;
            for (int64_t j = 0; j < q; j++) {
                const double arg = pos / pow(10000.0, (double)j / (double)q);
                row[j] = (float)sin(arg);
                row[q + j] = (float)cos(arg);
            }
        }
}

static void xd_destroy(model *m)
{
    xd_model *d = xd_of(m);
    if (d) wan_animate_destroy(d->anim), wan_s2v_audio_destroy(d->audio);
}

static void xd_release(model *m)
{
    xd_model *d = xd_of(m);
    state_free(m->pool, &d->vlast);
    for (int k = 0; k < VACE_MAX; k++) pool_free(m->pool, d->hints[k]), pool_free(m->pool, d->dhints[k]);
    memset(d->hints, 0, sizeof d->hints), memset(d->dhints, 0, sizeof d->dhints);
    pool_free(m->pool, d->cpatches), pool_free(m->pool, d->cemb), pool_free(m->pool, d->c0);
    d->cpatches = d->cemb = d->c0 = NULL;
    if (d->anim) wan_animate_release(m, d->anim, &d->in);
    if (d->audio) wan_s2v_audio_release(m, d->audio, &d->in);
    final_release(m, &d->final);
    pool_free(m->pool, d->rt), pool_free(m->pool, d->delta_in);
    d->rt = d->delta_in = NULL;
    op_state_release(&d->cap_stats);
    m->ctx.mask = NULL;
    d->self_mask.linear_rope = NULL;
}

/* LTXVideoRotaryPosEmbed's table for an F x G x G latent, as diffusers computes it in float32: token (f, r, q) has
 * coordinates g = (f, r, q) * (1 / (framerate / 8), 32, 32) * (patch_t, patch, patch) / (20, 2048, 2048), frequencies
 * w_k = theta^(k / (n - 1)) pi / 2 for k < n = D / 6 (theta ** linspace(0, 1, n)), angles w_k (2 g - 1); the table's
 * (D % 6) / 2 leading pairs pass through (cos 1, sin 0), then pair pass + 3 k + a is frequency k on axis a. The
 * angles reach theta pi / 2, so each step is rounded to float as torch rounds it: float64 angles would differ from
 * diffusers' by far more than its rounding. */
static st_status ltx_rope_table(model *m, const float *cond, float *work)
{
    const model_config *c = &m->cfg;
    const int64_t F = c->frames / c->patch_t, gh = grid_rows(c), gw = grid_cols(c);
    float *table = m->ctx.rope;
    const int64_t D = c->hidden, n = D / 6, pass = (D % 6) / 2, pairs = D / 2;
    const float scale[3] = {(float)(1.0 / (LTX_FRAMERATE / 8.0)), LTX_VAE_SPATIAL, LTX_VAE_SPATIAL};
    const float patch[3] = {(float)c->patch_t, (float)c->patch, (float)c->patch}, base[3] = {20.0f, 2048.0f, 2048.0f};
    const float half_pi = (float)(3.14159265358979323846 / 2.0), step = n > 1 ? 1.0f / (float)(n - 1) : 0.0f;
    for (int64_t t = 0; t < F * gh * gw; t++) {
        const int64_t pos[3] = {t / (gh * gw), t / gw % gh, t % gw};
        float *e = table + t * pairs * 2;
        for (int64_t p = 0; p < pass; p++) e[2 * p] = 1.0f, e[2 * p + 1] = 0.0f;
        for (int a = 0; a < 3; a++) {
            float g = (float)pos[a] * scale[a];
            g = g * patch[a];
            g = g / base[a];
            const float u = g * 2.0f - 1.0f;
            for (int64_t k = 0; k < n; k++) { /* torch.linspace's k-th point: from the nearer end */
                const float lin = k < n / 2 ? (float)k * step : 1.0f - (float)(n - 1 - k) * step;
                const float w = (float)pow(LTX_ROPE_THETA, (double)lin) * half_pi, ang = w * u;
                float *q = e + 2 * (pass + 3 * k + a);
                q[0] = (float)cos((double)ang);
                q[1] = (float)sin((double)ang);
            }
        }
    }
    return ST_OK;
}

/* VACE: c0 = vace_blocks.0.proj_in(vace_patch_embedding(the sample's control latents, after its text)) + x0, and
 * the hints' buffers (with their gradients' when training). */
static st_status vace_embed(model *m, patch_shape ps, const float *cond, bool train)
{
    xd_model *d = xd_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, N = B * m->shape.tokens, D = c->hidden, K = model_cond_len(c);
    const int64_t Nc = c->vace_channels * c->frames * c->height * c->width;
    ps.channels = c->vace_channels;
    const int64_t Pc = c->vace_channels * c->patch_t * c->patch * c->patch;
    st_status st = ST_OK;
    d->cpatches = model_take(m, &st, N * Pc, "xdit.vace_patches", false);
    d->cemb = model_take(m, &st, N * D, "xdit.vace_embedding", false);
    d->c0 = model_take(m, &st, N * D, "xdit.vace_state", false);
    for (int64_t k = 0; k < c->vace_count; k++) {
        d->hints[k] = model_take(m, &st, N * D, "xdit.vace_hint", false);
        if (train) d->dhints[k] = model_take(m, &st, N * D, "xdit.dvace_hint", true);
    }
    float *control = NULL;
    if (!st)
        st = pool_alloc(m->pool, (size_t)(B * Nc) * sizeof(float), MEM_WORKSPACE, "xdit.control", (void **)&control);
    if (st) return st;
    copy_rows(control, Nc, cond + K - Nc, K, B, Nc);
    patchify_forward(d->cpatches, control, &ps);
    pool_free(m->pool, control);
    linear_forward(d->cemb, d->cpatches, PW(d->p_cx_w), PW(d->p_cx_b), N, Pc, D);
    if ((st = lin_forward(m->params, m->pool, &d->vace_in, d->c0, d->cemb, N))) return st;
    add_to(d->c0, d->x0, N * D);
    return ST_OK;
}

/* d->patches: the latents' patches, or (Animate) those of the latents with the condition latents after their
 * channels, which follow the text and the image tokens in a sample's conditioning */
static st_status patch_input(model *m, patch_shape ps, const float *x, const float *cond)
{
    xd_model *d = xd_of(m);
    const model_config *c = &m->cfg;
    if (d->s2v) return s2v_patches(m, ps, x, cond);
    if (!c->cond_channels) {
        patchify_forward(d->patches, x, &ps);
        return ST_OK;
    }
    const int64_t vol = c->frames * c->height * c->width, n = c->channels * vol, nc = c->cond_channels * vol;
    float *in = NULL;
    st_status st = pool_alloc(m->pool, (size_t)(ps.batch * (n + nc)) * sizeof(float), MEM_WORKSPACE, "xdit.latents_in",
                              (void **)&in);
    if (st) return st;
    copy_rows(in, n + nc, x, n, ps.batch, n);
    copy_rows(in + n, n + nc, cond + c->text_len * c->text_dim + c->image_tokens * c->image_dim, model_cond_len(c),
              ps.batch, nc);
    ps.channels += c->cond_channels;
    patchify_forward(d->patches, in, &ps);
    pool_free(m->pool, in);
    return ST_OK;
}

/* The text tokens as the blocks read them, the key mask (PixArt), the rotary table (Wan), c, t6 and the final
 * modulation, and the image tokens into d->x0 (and VACE's control stream into d->c0). */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    xd_model *d = xd_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, Dt = c->text_dim;
    const int64_t Ts = T + d->in.ref_tokens, N = B * Ts, K = model_cond_len(c), R = m->ctx.mod_rows;
    const int64_t P = model_patch_dim(c) / c->channels * (c->channels + c->cond_channels);
    st_status st = ST_OK;
    model_hold(m, &st, &d->patches, N * P, "xdit.patches", false);
    model_hold(m, &st, &d->x0, N * D, "xdit.state", false);
    model_hold(m, &st, &d->text_in, B * L * Dt, "xdit.text_in", false);
    model_hold(m, &st, &d->cap_h, B * L * D, "xdit.text_projection", false);
    model_hold(m, &st, &d->cap_g, B * L * D, "xdit.text_projection", false);
    if (d->p_cap_norm >= 0) model_hold(m, &st, &d->cap_o, B * L * D, "sana.text_projection", false);
    model_hold(m, &st, &d->t6buf, B * 6 * D, "xdit.t6", false);
    model_hold(m, &st, &m->ctx.text, B * L * D, "xdit.text", false);
    model_hold(m, &st, &m->ctx.mod, B * R * D, "xdit.modulation", false);
    if (train) {
        model_hold(m, &st, &m->ctx.dtext, B * L * D, "xdit.dtext", true);
        model_hold(m, &st, &m->ctx.dmod, B * R * D, "xdit.dmodulation", true);
    }
    temb_take(m, &d->t, &st, train);
    if (d->s2v) temb_take_path(m, &d->t0, &st);
    if (c->anyflow) {
        temb_take_path(m, &d->delta, &st);
        d->rt = model_take(m, &st, B * D, "xdit.anyflow_rt", false);
        d->delta_in = model_take(m, &st, B, "xdit.anyflow_delta_time", false);
    }
    if (!d->wan && model_text_mask(c)) model_hold(m, &st, &d->key_bias, B * L, "xdit.key_bias", false);
    if (d->wan || d->ltx || d->svid)
        model_hold(m, &st, &m->ctx.rope, Ts * (d->ltx ? D : D / c->heads), "xdit.rope", false);
    d->self_mask.linear_rope = m->ctx.rope;
    if (st) return st;
    /* image tokens */
    const patch_shape ps = model_patches(m);
    if ((st = patch_input(m, ps, x, cond))) return st;
    linear_forward(d->x0, d->patches, PW(d->p_x_w), PW(d->p_x_b), N, P, D);
    d->cond = cond;
    if (d->anim && (st = wan_animate_forward(m, d->anim, cond, d->x0, train, &d->in))) return st;
    for (int64_t b = 0; d->p_pos >= 0 && b < B; b++) add_to(d->x0 + b * T * D, PW(d->p_pos), T * D);
    if (d->vblocks && (st = vace_embed(m, ps, cond, train))) return st;
    if (d->s2v && (st = s2v_embed(m))) return st;
    if ((d->wan && !d->s2v) || d->svid) { /* frame, row and column ids on axes of widths hd - 4 (hd / 6), 2 (hd / 6),
                                               2 (hd / 6) */
        float *ids = NULL;
        if ((st = pool_alloc(m->pool, (size_t)(T * 3) * sizeof(float), MEM_WORKSPACE, "xdit.position_ids",
                             (void **)&ids)))
            return st;
        const int64_t hd = D / c->heads, hw = 2 * (hd / 6), axes[3] = {hd - 2 * hw, hw, hw};
        position_ids_grid(ids, 0, c->frames / c->patch_t, grid_rows(c), grid_cols(c));
        rope_table(m->ctx.rope, ids, T, 3, axes, WAN_ROPE_THETA);
        pool_free(m->pool, ids);
    }
    if (d->ltx && (st = model_host_loop(m, m->ctx.rope, ltx_rope_table, NULL, 0, NULL))) return st;
    /* the text: linear_2(gelu_tanh(linear_1(text))) */
    copy_rows(d->text_in, L * Dt, cond, K, B, L * Dt);
    if ((st = lin_forward(m->params, m->pool, &d->cap1, d->cap_h, d->text_in, B * L))) return st;
    gelu_forward(d->cap_g, d->cap_h, B * L * D);
    if ((st = lin_forward(m->params, m->pool, &d->cap2, d->cap_o ? d->cap_o : m->ctx.text, d->cap_g, B * L))) return st;
    if (d->cap_o && (st = rmsnorm_forward(m->pool, m->ctx.text, d->cap_o, PW(d->p_cap_norm), B * L, D, SANA_CAPTION_EPS,
                                          train ? &d->cap_stats : NULL)))
        return st;
    if (d->key_bias) {
        /* (1 - mask) * -10000, as PixArt makes the encoder mask a bias */
        mask_bias(d->key_bias, cond + L * Dt + c->pooled_dim, B, L, K, PIXART_MASK_BIAS);
        d->mask = (attn_mask){.key_bias = d->key_bias, .batch_stride = L};
        m->ctx.mask = &d->mask;
    }
    /* c, t6 = linear(SiLU(c)), the final layer's rows: its table + c */
    if ((st = temb_forward(m, &d->t, timesteps))) return st;
    const float *cv = d->t.c; /* c: the timestep's embedding, or AnyFlow's blend */
    if (c->anyflow) { /* the delta is r, or t - r; r = t unless the caller gave r */
        const float g = (float)c->anyflow_gate;
        const float *r = m->r_time ? m->r_time : timesteps;
        copy_rows(d->delta_in, B, c->anyflow_interval ? timesteps : r, B, 1, B);
        if (c->anyflow_interval) add_scaled(d->delta_in, r, -1.0f, B); /* t - r */
        if ((st = temb_forward(m, &d->delta, d->delta_in))) return st;
        copy_rows(d->rt, B * D, d->t.c, B * D, 1, B * D), scale_by(d->rt, B * D, 1.0f - g);
        add_scaled(d->rt, d->delta.c, g, B * D);
        cv = d->rt;
    }
    silu_forward(m->ctx.cs, cv, B * D);
    if ((st = lin_forward(m->params, m->pool, &d->t6, d->t6buf, m->ctx.cs, B))) return st;
    copy_rows(m->ctx.mod, R * D, d->t6buf, 6 * D, B, 6 * D);
    for (int64_t b = 0; b < B; b++) {
        float *rows = m->ctx.mod + (b * R + 6) * D;
        copy_rows(rows, D, cv + b * D, 0, 2, D);
        add_to(rows, PW(d->p_table), 2 * D);
    }
    if (d->s2v && (st = s2v_time_zero(m, cond, train))) return st;
    if (!train) { /* nothing reads them again */
        float **bufs[] = {&d->patches, &d->text_in, &d->cap_h, &d->cap_g, &d->cap_o, &d->t6buf};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) pool_free(m->pool, *bufs[i]), *bufs[i] = NULL;
    }
    return ST_OK;
}

static st_status xd_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    xd_model *d = xd_of(m);
    st_status st = embed_forward(m, x, timesteps, cond, train);
    /* VACE's control branch first: its blocks write the hints the main blocks add */
    if (!st && d->vblocks) st = model_seq_forward1(m, 0, &d->c0, train, &d->vlast);
    if (!st) st = model_seq_forward1(m, d->main, &d->x0, train, NULL);
    if (!st) st = d->s2v ? s2v_final(m, m->step.last.t[0]) : final_forward(m, &d->final, m->step.last.t[0]);
    if (st) return st;
    *pred = d->final.pred;
    return ST_OK;
}

/* AnyFlow: dL/drt to both embeddings, (1 - g) and g of it */
static st_status anyflow_backward(model *m, const float *drt)
{
    xd_model *d = xd_of(m);
    const int64_t n = m->shape.batch * m->cfg.hidden;
    const float g = (float)m->cfg.anyflow_gate;
    float *dc = NULL;
    st_status st = pool_alloc(m->pool, (size_t)n * sizeof(float), MEM_WORKSPACE, "xdit.anyflow_dc", (void **)&dc);
    for (int k = 0; !st && k < 2; k++) {
        copy_rows(dc, n, drt, n, 1, n), scale_by(dc, n, k ? g : 1.0f - g);
        st = temb_backward(m, k ? &d->delta : &d->t, dc);
    }
    pool_free(m->pool, dc);
    return st;
}

/* VACE's control branch back from the hints' gradients (its last state reaches nothing: a zero gradient) to c0:
 * proj_in's and vace_patch_embedding's weights, and dx0 += dL/dc0. */
static st_status vace_backward(model *m, float *dx0)
{
    xd_model *d = xd_of(m);
    const model_config *c = &m->cfg;
    const int64_t N = m->shape.batch * m->shape.tokens, D = c->hidden;
    const int64_t Pc = c->vace_channels * c->patch_t * c->patch * c->patch;
    st_status st = ST_OK;
    state_free(m->pool, &d->vlast);
    block_state grad = {.n = 1, .t = {model_take(m, &st, N * D, "xdit.dvace_state", true)}};
    if (!st) st = model_seq_backward(m, 0, &grad);
    float *dcemb = NULL;
    if (!st) st = pool_alloc_zero(m->pool, (size_t)(N * D) * sizeof(float), MEM_WORKSPACE, "xdit.dvace_embedding",
                                  (void **)&dcemb);
    if (!st) st = lin_backward(m->params, m->pool, &d->vace_in, dcemb, grad.t[0], d->cemb, N);
    if (!st) {
        linear_backward(NULL, PG(d->p_cx_w), PG(d->p_cx_b), dcemb, d->cpatches, PW(d->p_cx_w), N, Pc, D);
        add_to(dx0, grad.t[0], N * D);
    }
    pool_free(m->pool, dcemb);
    state_free(m->pool, &grad);
    return st;
}

static st_status xd_backward(model *m, const float *dpred)
{
    xd_model *d = xd_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, R = m->ctx.mod_rows;
    st_status st = ST_OK;
    const int64_t Ts = T + d->in.ref_tokens;
    float *dx = model_take(m, &st, B * Ts * D, "xdit.dstate", true);
    if (!st)
        st = d->s2v ? s2v_final_backward(m, dpred, dx) : final_backward(m, &d->final, m->step.last.t[0], dpred, dx);
    final_backward_done(m, &d->final);
    state_free(m->pool, &m->step.last);
    block_state grad = {.n = 1, .t = {dx}};
    if (!st) st = model_seq_backward(m, d->main, &grad); /* grad becomes dL/dx0 */
    if (!st && d->vblocks) st = vace_backward(m, grad.t[0]);
    scratch k = {.pool = m->pool};
    float *dt6 = scratch_take(&k, B * 6 * D, MEM_WORKSPACE, "xdit.dt6");
    float *dc = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "xdit.dc");
    float *dg = scratch_take_zero(&k, B * L * D, MEM_WORKSPACE, "xdit.dtext_projection");
    if (!st) st = k.status;
    if (!st) { /* the image tokens' weights */
        linear_backward(NULL, PG(d->p_x_w), PG(d->p_x_b), grad.t[0], d->patches, PW(d->p_x_w), B * Ts,
                        model_patch_dim(c) / c->channels * (c->channels + c->cond_channels), D);
        if (d->anim) st = wan_animate_backward(m, d->anim, d->cond, grad.t[0], &d->in);
        if (d->s2v && !st) st = s2v_backward(m, grad.t[0]);
    }
    float *dnorm = d->cap_o && !st ? scratch_take_zero(&k, B * L * D, MEM_WORKSPACE, "sana.dtext_projection") : NULL;
    if (!st && d->cap_o && !(st = k.status)) /* Sana's caption_norm */
        rmsnorm_backward(dnorm, PG(d->p_cap_norm), m->ctx.dtext, d->cap_o, PW(d->p_cap_norm), B * L, D, &d->cap_stats);
    if (!st) st = lin_backward(m->params, m->pool, &d->cap2, dg, dnorm ? dnorm : m->ctx.dtext, d->cap_g, B * L);
    if (!st) {
        gelu_backward(dg, dg, d->cap_h, B * L * D);
        st = lin_backward(m->params, m->pool, &d->cap1, NULL, dg, d->text_in, B * L);
    }
    if (!st) { /* t6 and the final rows back to c, and the final table */
        copy_rows(dt6, 6 * D, m->ctx.dmod, R * D, B, 6 * D);
        st = lin_backward(m->params, m->pool, &d->t6, m->ctx.dcs, dt6, m->ctx.cs, B);
    }
    if (!st) {
        silu_backward(dc, m->ctx.dcs, c->anyflow ? d->rt : d->t.c, B * D);
        for (int64_t b = 0; b < B; b++)
            for (int r = 6; r < 8; r++) {
                const float *row = m->ctx.dmod + (b * R + r) * D;
                add_to(dc + b * D, row, D);
                if (PG(d->p_table)) add_to(PG(d->p_table) + (r - 6) * D, row, D);
            }
        st = c->anyflow ? anyflow_backward(m, dc) : temb_backward(m, &d->t, dc);
    }
    const st_status end = scratch_end(&k);
    state_free(m->pool, &grad);
    return st ? st : end;
}

/* segtrain's own initialisation, for training from scratch (a checkpoint replaces it): as DiT's, the blocks start
 * as identities (t6's linear, the tables and the output projection zero), the timestep embedding N(0, 0.02), norms
 * at (1, 0), xavier linears elsewhere */
static const init_rule xd_inits[] = {
    {INIT_ZERO, "^vace_blocks.&.proj_out.|" /* hints start at zero */
                "scale_shift_table|^proj_out.weight$|adaln_single.linear|time_embed.linear|time_proj"},
    {INIT_ONE, "norm_q|norm_k|norm2.weight|norm_added_k|^condition_embedder.image_embedder.norm1.weight$"},
    {INIT_ZERO, "padding_tokens|norm2.bias"}, {INIT_NORMAL, "timestep_embedder|time_embedder"}, {0}};

const model_family xdit_family = {
    .create = xd_create, .impl_size = sizeof(xd_model), .fill_fixed = xd_fill_fixed, .destroy = xd_destroy,
    .forward = xd_forward, .backward = xd_backward, .release = xd_release, .inits = xd_inits,
};
