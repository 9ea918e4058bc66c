/* Flux.2's blocks (diffusers' Flux2TransformerBlock and Flux2SingleTransformerBlock). No bias anywhere; LN is a
 * LayerNorm without affine and the q/k norms RMSNorms per head with a weight, both at eps 1e-6; the modulations
 * are the model's shared ones (flux2.h), not the block's:
 *
 * double, per stream s (image, text), with (shift1, scale1, gate1, shift2, scale2, gate2) = mod_s:
 *   h_s = LN(x_s) (1 + scale1) + shift1;  q_s, k_s, v_s = to_q/k/v (text: add_q/k/v_proj) of h_s, q and k RMSNorm-ed
 *   joint attention over [text; image], rotary embedding on q and k by the 4-axis position ids
 *   x1_s = x_s + gate1 to_out (text: to_add_out) of the attention rows of s
 *   y_s = x1_s + gate2 ff(LN(x1_s) (1 + scale2) + shift2),  ff(n) = linear_out(swiglu(linear_in n))
 * single, on the joint sequence, with (shift, scale, gate) = the single modulation:
 *   h = LN(x) (1 + scale) + shift;  [q, k, v, f] = to_qkv_mlp_proj(h);  q, k RMSNorm-ed and rotated
 *   y = x + gate to_out([attention(q, k, v); swiglu(f)])
 * swiglu(f) = silu(f[:F]) * f[F:], the gate half first (Flux2SwiGLU).
 *
 * Kept (unless KEEP_NOTHING): the attention side (joint q, k, v after norm and rotation, the attention output and
 * its state, q and k before the norm), and the attention's output projections; with KEEP_ALL also the
 * feed-forward's linear outputs (double: linear_in's and linear_out's; single: the feed-forward columns of the
 * fused projection). torch-ffn (KEEP_ATTENTION) recomputes those: the single block's feed-forward input shares a
 * GEMM with q, k and v, so its recompute runs the whole fused projection again and keeps the columns it needs.
 * Recompute runs the same kernels on the same inputs, so its values are bitwise forward's. Attention offload moves
 * the side to the host.
 * (attn_side.c). */
#include "models/core/attn_side.h"
#include "models/dual/flux2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t ffn_width(int64_t D) { return F2_MLP_RATIO * D; }

/* ---- registration: diffusers' names, in its state_dict order ---- */

void f2_double_register(param_set *ps, f2_block *b, int i, const model_config *c)
{
    char p[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "transformer_blocks.%d", i);
    const int64_t D = c->hidden, hd = D / c->heads, F = ffn_width(D);
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    f2_stream *x = &b->s[0], *t = &b->s[1];
    x->q = block_linear(ps, p, "attn.to_q", D, D, false, ra, c);
    x->k = block_linear(ps, p, "attn.to_k", D, D, false, ra, c);
    x->v = block_linear(ps, p, "attn.to_v", D, D, false, ra, c);
    x->norm_q = block_norm(ps, p, "attn.norm_q", hd, c);
    x->norm_k = block_norm(ps, p, "attn.norm_k", hd, c);
    x->out = block_linear(ps, p, "attn.to_out.0", D, D, false, ra, c);
    t->norm_q = block_norm(ps, p, "attn.norm_added_q", hd, c);
    t->norm_k = block_norm(ps, p, "attn.norm_added_k", hd, c);
    t->q = block_linear(ps, p, "attn.add_q_proj", D, D, false, ra, c);
    t->k = block_linear(ps, p, "attn.add_k_proj", D, D, false, ra, c);
    t->v = block_linear(ps, p, "attn.add_v_proj", D, D, false, ra, c);
    t->out = block_linear(ps, p, "attn.to_add_out", D, D, false, ra, c);
    x->ff_in = block_linear(ps, p, "ff.linear_in", D, 2 * F, false, rm, c);
    x->ff_out = block_linear(ps, p, "ff.linear_out", F, D, false, rm, c);
    t->ff_in = block_linear(ps, p, "ff_context.linear_in", D, 2 * F, false, rm, c);
    t->ff_out = block_linear(ps, p, "ff_context.linear_out", F, D, false, rm, c);
}

/* The fused projections carry attention and feed-forward alike: either LoRA target adapts them. */
void f2_single_register(param_set *ps, f2_block *b, int i, const model_config *c)
{
    char p[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "single_transformer_blocks.%d", i);
    const int64_t D = c->hidden, hd = D / c->heads, F = ffn_width(D);
    const int64_t r = c->lora_attention || c->lora_mlp ? c->lora_rank : 0;
    f2_stream *x = &b->s[0];
    x->ff_in = block_linear(ps, p, "attn.to_qkv_mlp_proj", D, 3 * D + 2 * F, false, r, c);
    x->norm_q = block_norm(ps, p, "attn.norm_q", hd, c);
    x->norm_k = block_norm(ps, p, "attn.norm_k", hd, c);
    x->out = block_linear(ps, p, "attn.to_out", D + F, D, false, r, c);
}

/* ---- shared pieces ---- */

/* ln = LN(x) (statistics in *stats when asked), h = ln (1 + scale) + shift; the modulation's rows are `stride`
 * apart. h may be ln when ln is not wanted afterwards. */
static st_status ln_modulate(const struct model *m, float *h, float *ln, const float *x, const float *shift,
                             const float *scale, int64_t batch, int64_t tokens, int64_t stride, op_state *stats)
{
    const int64_t D = m->shape.hidden;
    st_status st = layernorm_forward(m->pool, ln, x, NULL, NULL, batch * tokens, D, F2_EPS, stats);
    if (!st) modulate_forward(h, ln, shift, scale, batch, tokens, D, stride);
    return st;
}

static attn_shape joint_attn(const block *b)
{
    const struct model *m = ((const f2_block *)b->self)->m;
    const mm_dims d = mm_dims_of(m);
    return mm_joint_attn(&d, m->shape.mechanism);
}

static size_t f2_offloaded_bytes(const block *b)
{
    return side_self_bytes(joint_attn(b), side_elem(((const f2_block *)b->self)->m));
}

static mm_qkv qkv_of(const f2_stream *s) { return (mm_qkv){&s->q, &s->k, &s->v, s->norm_q, s->norm_k}; }

/* Rotation, then attention from the side's q, k, v into o, keeping its state when backward or the host needs it (not
 * in a recompute after KEEP_ATTENTION_OUTPUT: o and the state are kept). */
static st_status attend(const struct model *m, const mm_dims *d, block_saved *sv, bool keep_state)
{
    attn_shape as = mm_joint_attn(d, m->shape.mechanism);
    mm_rope_joint(m, d, sv->side[SQ], false);
    mm_rope_joint(m, d, sv->side[SK], false);
    return side_attend(m->pool, &as, NULL, sv, SQ, keep_state);
}

/* ---- the double block ---- */

/* the output projections; with KEEP_ALL the feed-forward's linear_in and linear_out outputs */
static size_t double_kept_bytes(const block *b, keep_level keep)
{
    const mm_dims d = mm_dims_of(((const f2_block *)b->self)->m);
    return side_kept_bytes(joint_attn(b), keep, d.J * d.D, d.J * (2 * ffn_width(d.D) + d.D),
                           side_elem(((const f2_block *)b->self)->m));
}

static st_status double_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                                block_saved **saved_io)
{
    f2_block *fb = b->self;
    const struct model *m = fb->m;
    mm_dims d = mm_dims_of(m);
    const int64_t D = d.D, F = ffn_width(D), N = mm_rows_max(&d);
    frame f;
    block_saved *sv = frame_begin(&f, b, m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    side_take_self(&f, sv, joint_attn(b));
    float *y[2];
    for (int s = 0; s < 2; s++) {
        y[s] = scratch_take(&f.kept, d.rows[s] * D, MEM_ACTIVATIONS, "flux2.state");
        sv->o[s] = scratch_take(f.ks, d.rows[s] * D, f.kt, "flux2.out");
        sv->f1[s] = scratch_take(f.fs, d.rows[s] * 2 * F, f.ft, "flux2.ff_in");
        sv->f2[s] = scratch_take(f.fs, d.rows[s] * D, f.ft, "flux2.ff_out");
    }
    float *a = scratch_take(&f.tmp, N * D, MEM_WORKSPACE, "flux2.h");
    float *g = scratch_take(&f.tmp, N * F, MEM_WORKSPACE, "flux2.swiglu");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;

    if (!st && f.from_host) st = side_back(sv);
    for (int s = 0; s < 2 && !st && !f.from_host; s++) {
        const f2_stream *fs = &fb->s[s];
        const float *mod = fb->sh->mod[s];
        const int64_t at = s ? d.rows[0] * D : 0;
        st = ln_modulate(m, a, a, in->t[s], mod, mod + D, d.B, d.len[s], 6 * D, NULL);
        if (!st) st = mm_qkv_forward(m, &d, s, qkv_of(fs), sv, sv->side[SQR] + at, sv->side[SKR] + at, a, g);
    }
    if (!st && !f.from_host) st = attend(m, &d, sv, keep != KEEP_NOTHING || f.to_host);
    if (!st && f.to_host) st = side_send(sv);
    for (int s = 0; s < 2 && !st; s++) {
        mm_from_joint(&d, s, a, sv->side[SO]);
        st = fwd(m, &fb->s[s].out, sv->o[s], a, d.rows[s]);
        if (!st) gated_residual_forward(y[s], in->t[s], fb->sh->mod[s] + 2 * D, sv->o[s], d.B, d.len[s], D, 6 * D);
    }
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    for (int s = 0; s < 2 && !st; s++) {
        const f2_stream *fs = &fb->s[s];
        const float *mod = fb->sh->mod[s];
        const int64_t n = d.rows[s], t = d.len[s];
        st = ln_modulate(m, a, a, y[s], mod + 3 * D, mod + 4 * D, d.B, t, 6 * D, NULL);
        if (!st) st = fwd(m, &fs->ff_in, sv->f1[s], a, n);
        if (!st) glu_forward(g, sv->f1[s], sv->f1[s] + F, n, F, 2 * F, GLU_SILU);
        if (!st) st = fwd(m, &fs->ff_out, sv->f2[s], g, n);
        if (!st) gated_residual_forward(y[s], y[s], mod + 5 * D, sv->f2[s], d.B, t, D, 6 * D);
    }
    if (!st) *out = (block_state){.n = 2, .t = {y[0], y[1]}};
    return frame_end(&f, st, sv, saved_io, y, 2);
}

static st_status double_backward(block *b, const block_state *in, block_saved *sv, block_state *grad)
{
    f2_block *fb = b->self;
    const struct model *m = fb->m;
    mm_dims d = mm_dims_of(m);
    attn_shape as = mm_joint_attn(&d, m->shape.mechanism);
    const int64_t D = d.D, F = ffn_width(D), N = mm_rows_max(&d), JD = d.J * D;
    scratch k = side_scratch(m->pool, sv);
    float *x1 = scratch_take(&k, N * D, MEM_WORKSPACE, "flux2.x1");
    float *ln = scratch_take(&k, N * D, MEM_WORKSPACE, "flux2.ln");
    float *h = scratch_take(&k, N * D, MEM_WORKSPACE, "flux2.h");
    float *dh = scratch_take(&k, N * D, MEM_WORKSPACE, "flux2.dh");
    float *dr = scratch_take(&k, N * D, MEM_WORKSPACE, "flux2.dr");
    float *gs = scratch_take(&k, N * D, MEM_WORKSPACE, "flux2.gs");
    float *g = scratch_take(&k, N * F, MEM_WORKSPACE, "flux2.swiglu");
    float *dg = scratch_take(&k, N * F, MEM_WORKSPACE, "flux2.dswiglu");
    float *df = scratch_take(&k, N * 2 * F, MEM_WORKSPACE, "flux2.dff_in");
    float *dside[4]; /* joint dq, dk, dv, do */
    for (int i = 0; i < 4; i++) dside[i] = scratch_take_zero(&k, JD, MEM_WORKSPACE, "flux2.dside");
    const bool recompute = !sv->f1[0];
    float *rf1 = recompute ? scratch_take(&k, N * 2 * F, MEM_WORKSPACE, "flux2.ff_in (recomputed)") : NULL;
    float *rf2 = recompute ? scratch_take(&k, N * D, MEM_WORKSPACE, "flux2.ff_out (recomputed)") : NULL;
    op_state stats = {0};
    const size_t ND = (size_t)N * D * sizeof(float), NF = (size_t)N * F * sizeof(float);
    if (k.status) goto done;

    for (int s = 0; s < 2; s++) { /* the feed-forward halves, then the output projections */
        const f2_stream *fs = &fb->s[s];
        const int64_t n = d.rows[s], t = d.len[s], mw = 6 * D;
        const float *mod = fb->sh->mod[s], *f1 = sv->f1[s], *f2 = sv->f2[s];
        float *dmod = fb->sh->dmod[s], *gx = grad->t[s];
        gated_residual_forward(x1, in->t[s], mod + 2 * D, sv->o[s], d.B, t, D, mw);
        if ((k.status = ln_modulate(m, h, ln, x1, mod + 3 * D, mod + 4 * D, d.B, t, mw, &stats))) goto done;
        if (recompute && (k.status = fwd(m, &fs->ff_in, rf1, h, n))) goto done;
        if (recompute) f1 = rf1;
        glu_forward(g, f1, f1 + F, n, F, 2 * F, GLU_SILU);
        if (recompute && (k.status = fwd(m, &fs->ff_out, rf2, g, n))) goto done;
        if (recompute) f2 = rf2;
        zero_bytes(dh, ND);
        gated_residual_backward(gx, dmod + 5 * D, dh, gx, mod + 5 * D, f2, d.B, t, D, mw);
        zero_bytes(dg, NF);
        if ((k.status = bwd(m, &fs->ff_out, dg, dh, g, n))) goto done;
        zero_bytes(df, 2 * NF);
        glu_backward(df, df + F, dg, f1, f1 + F, n, F, 2 * F, GLU_SILU);
        zero_bytes(dh, ND);
        if ((k.status = bwd(m, &fs->ff_in, dh, df, h, n))) goto done;
        ln_modulate_backward(gx, dmod + 3 * D, dmod + 4 * D, dr, dh, ln, x1, mod + 4 * D, d.B, t, D, mw, &stats);
        zero_bytes(dh, ND);
        gated_residual_backward(gx, dmod + 2 * D, dh, gx, mod + 2 * D, sv->o[s], d.B, t, D, mw);
        mm_from_joint(&d, s, h, sv->side[SO]);
        zero_bytes(dr, ND);
        if ((k.status = bwd(m, &fs->out, dr, dh, h, n))) goto done;
        mm_to_joint(&d, s, dside[SO], dr);
    }
    if ((k.status = side_attend_backward(m->pool, &as, NULL, sv, SQ, dside[SQ], dside[SK], dside[SV], dside[SO], D)))
        goto done;
    mm_rope_joint(m, &d, dside[SQ], true);
    mm_rope_joint(m, &d, dside[SK], true);
    for (int s = 0; s < 2; s++) { /* back through q, k, v and the first modulation */
        const f2_stream *fs = &fb->s[s];
        const int64_t t = d.len[s], mw = 6 * D, at = s ? d.rows[0] * D : 0;
        const float *mod = fb->sh->mod[s], *x = in->t[s];
        float *dmod = fb->sh->dmod[s], *gx = grad->t[s];
        if ((k.status = ln_modulate(m, h, ln, x, mod, mod + D, d.B, t, mw, &stats))) goto done;
        zero_bytes(dh, ND);
        if ((k.status = mm_qkv_backward(m, &d, s, qkv_of(fs), dside, sv->side[SQR] + at, sv->side[SKR] + at, h, dh,
                                        dr, gs, x1)))
            goto done;
        ln_modulate_backward(gx, dmod, dmod + D, dr, dh, ln, x, mod + D, d.B, t, D, mw, &stats);
    }
done:
    op_state_release(&stats);
    return scratch_end(&k);
}

/* ---- the single block ---- */

/* to_out's output; with KEEP_ALL the fused projection's feed-forward columns */
static size_t single_kept_bytes(const block *b, keep_level keep)
{
    const mm_dims d = mm_dims_of(((const f2_block *)b->self)->m);
    return side_kept_bytes(joint_attn(b), keep, d.J * d.D, d.J * 2 * ffn_width(d.D),
                           side_elem(((const f2_block *)b->self)->m));
}

/* The fused projection p (J, 3D + 2F) of h; its feed-forward columns into f1 (J, 2F). */
static st_status fused_in(const struct model *m, const f2_stream *fs, const mm_dims *d, float *p, float *f1,
                          const float *h)
{
    const int64_t D = d->D, F = ffn_width(D), Wd = 3 * D + 2 * F;
    st_status st = fwd(m, &fs->ff_in, p, h, d->J);
    if (!st) copy_rows(f1, 2 * F, p + 3 * D, Wd, d->J, 2 * F);
    return st;
}

/* c = [o, swiglu(f1)] row by row: to_out's input (J, D + F). */
static void concat_in(const mm_dims *d, float *c, const float *o, const float *g)
{
    const int64_t D = d->D, F = ffn_width(D);
    copy_rows(c, D + F, o, D, d->J, D);
    copy_rows(c + D, D + F, g, F, d->J, F);
}

static st_status single_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                                block_saved **saved_io)
{
    f2_block *fb = b->self;
    const struct model *m = fb->m;
    const f2_stream *fs = &fb->s[0];
    mm_dims d = mm_dims_of(m);
    const int64_t D = d.D, F = ffn_width(D), J = d.J, Wd = 3 * D + 2 * F;
    const float *x = in->t[0], *mod = fb->sh->mod[F2_MOD_SINGLE];
    frame f;
    block_saved *sv = frame_begin(&f, b, m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    side_take_self(&f, sv, joint_attn(b));
    float *y = scratch_take(&f.kept, J * D, MEM_ACTIVATIONS, "flux2.state");
    sv->o[0] = scratch_take(f.ks, J * D, f.kt, "flux2.out");
    sv->f1[0] = scratch_take(f.fs, J * 2 * F, f.ft, "flux2.ff_in");
    float *h = scratch_take(&f.tmp, J * D, MEM_WORKSPACE, "flux2.h");
    float *p = scratch_take(&f.tmp, J * Wd, MEM_WORKSPACE, "flux2.qkv_mlp");
    float *g = scratch_take(&f.tmp, J * F, MEM_WORKSPACE, "flux2.swiglu");
    float *c = scratch_take(&f.tmp, J * (D + F), MEM_WORKSPACE, "flux2.concat");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;

    if (!st) st = ln_modulate(m, h, h, x, mod, mod + D, d.B, d.S, 3 * D, NULL);
    if (!st) st = fused_in(m, fs, &d, p, sv->f1[0], h);
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) {
        copy_rows(sv->side[SQR], D, p, Wd, J, D);
        copy_rows(sv->side[SKR], D, p + D, Wd, J, D);
        copy_rows(sv->side[SV], D, p + 2 * D, Wd, J, D);
        const mm_dims j = mm_joined(&d);
        st = mm_rms_to_joint(m, &j, 0, sv->side[SQ], sv->side[SQR], fs->norm_q);
        if (!st) st = mm_rms_to_joint(m, &j, 0, sv->side[SK], sv->side[SKR], fs->norm_k);
        if (!st) st = attend(m, &d, sv, keep != KEEP_NOTHING || f.to_host);
        if (!st && f.to_host) st = side_send(sv);
    }
    if (!st) {
        glu_forward(g, sv->f1[0], sv->f1[0] + F, J, F, 2 * F, GLU_SILU);
        concat_in(&d, c, sv->side[SO], g);
    }
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    if (!st) st = fwd(m, &fs->out, sv->o[0], c, J);
    if (!st) gated_residual_forward(y, x, mod + 2 * D, sv->o[0], d.B, d.S, D, 3 * D);
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

static st_status single_backward(block *b, const block_state *in, block_saved *sv, block_state *grad)
{
    f2_block *fb = b->self;
    const struct model *m = fb->m;
    const f2_stream *fs = &fb->s[0];
    mm_dims d = mm_dims_of(m);
    attn_shape as = mm_joint_attn(&d, m->shape.mechanism);
    const int64_t D = d.D, F = ffn_width(D), J = d.J, JD = J * D, Wd = 3 * D + 2 * F;
    const float *x = in->t[0], *mod = fb->sh->mod[F2_MOD_SINGLE];
    float *dmod = fb->sh->dmod[F2_MOD_SINGLE], *gx = grad->t[0];
    scratch k = side_scratch(m->pool, sv);
    float *ln = scratch_take(&k, JD, MEM_WORKSPACE, "flux2.ln");
    float *h = scratch_take(&k, JD, MEM_WORKSPACE, "flux2.h");
    float *dh = scratch_take_zero(&k, JD, MEM_WORKSPACE, "flux2.dh");
    float *dr = scratch_take(&k, JD, MEM_WORKSPACE, "flux2.dr");
    float *r = scratch_take(&k, JD, MEM_WORKSPACE, "flux2.r");
    float *g = scratch_take(&k, J * F, MEM_WORKSPACE, "flux2.swiglu");
    float *dg = scratch_take(&k, J * F, MEM_WORKSPACE, "flux2.dswiglu");
    float *c = scratch_take(&k, J * (D + F), MEM_WORKSPACE, "flux2.concat");
    float *dc = scratch_take_zero(&k, J * (D + F), MEM_WORKSPACE, "flux2.dconcat");
    float *dp = scratch_take(&k, J * Wd, MEM_WORKSPACE, "flux2.dqkv_mlp");
    float *df = scratch_take_zero(&k, J * 2 * F, MEM_WORKSPACE, "flux2.dff_in");
    float *dq = scratch_take_zero(&k, JD, MEM_WORKSPACE, "flux2.dq");
    float *dk = scratch_take_zero(&k, JD, MEM_WORKSPACE, "flux2.dk");
    float *dv = scratch_take_zero(&k, JD, MEM_WORKSPACE, "flux2.dv");
    const bool recompute = !sv->f1[0];
    float *p = recompute ? scratch_take(&k, J * Wd, MEM_WORKSPACE, "flux2.qkv_mlp (recomputed)") : NULL;
    float *f1 = recompute ? scratch_take(&k, J * 2 * F, MEM_WORKSPACE, "flux2.ff_in (recomputed)") : sv->f1[0];
    op_state stats = {0};
    if (k.status || (k.status = ln_modulate(m, h, ln, x, mod, mod + D, d.B, d.S, 3 * D, &stats))) goto done;
    if (recompute && (k.status = fused_in(m, fs, &d, p, f1, h))) goto done;
    glu_forward(g, f1, f1 + F, J, F, 2 * F, GLU_SILU);
    concat_in(&d, c, sv->side[SO], g);
    zero_bytes(dr, (size_t)JD * sizeof(float));
    gated_residual_backward(gx, dmod + 2 * D, dr, gx, mod + 2 * D, sv->o[0], d.B, d.S, D, 3 * D);
    if ((k.status = bwd(m, &fs->out, dc, dr, c, J))) goto done;
    copy_rows(dg, F, dc + D, D + F, J, F);
    glu_backward(df, df + F, dg, f1, f1 + F, J, F, 2 * F, GLU_SILU);
    copy_rows(dp + 3 * D, Wd, df, 2 * F, J, 2 * F);
    if ((k.status = side_attend_backward(m->pool, &as, NULL, sv, SQ, dq, dk, dv, dc, D + F))) goto done;
    mm_rope_joint(m, &d, dq, true);
    mm_rope_joint(m, &d, dk, true);
    const struct {
        float *g;
        int raw, w;
    } qk[2] = {{dq, SQR, fs->norm_q}, {dk, SKR, fs->norm_k}};
    for (int i = 0; i < 2; i++) {
        zero_bytes(dr, (size_t)JD * sizeof(float));
        if ((k.status = mm_rms_back(m, &d, J, dr, qk[i].g, sv->side[qk[i].raw], qk[i].w, r))) goto done;
        copy_rows(dp + i * D, Wd, dr, D, J, D);
    }
    copy_rows(dp + 2 * D, Wd, dv, D, J, D);
    if ((k.status = bwd(m, &fs->ff_in, dh, dp, h, J))) goto done;
    ln_modulate_backward(gx, dmod, dmod + D, dr, dh, ln, x, mod + D, d.B, d.S, D, 3 * D, &stats);
done:
    op_state_release(&stats);
    return scratch_end(&k);
}

const block_kind f2_double_kind = {
    SIDE_BLOCK_KIND("flux2 double", double_kept_bytes, f2_offloaded_bytes, double_forward, double_backward)};

const block_kind f2_single_kind = {
    SIDE_BLOCK_KIND("flux2 single", single_kept_bytes, f2_offloaded_bytes, single_forward, single_backward)};
