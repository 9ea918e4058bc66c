/* AuraFlow's blocks (diffusers' AuraFlowJointTransformerBlock and AuraFlowSingleTransformerBlock). Per stream s
 * (joint: image and text; single: the whole [text; image] sequence), from SiLU(c), with LN a LayerNorm without
 * affine at eps 1e-5 and no bias anywhere:
 *
 *   (shift1, scale1, gate1, shift2, scale2, gate2) = norm1[_context].linear(SiLU(c))
 *   h_s = LN(x_s) (1 + scale1) + shift1;  q_s, k_s, v_s = to_q/k/v(h_s);  q_s, k_s = LN per head
 *   attention over the joint sequence [text; image] (no rotary embedding)
 *   r_s = x_s + gate1 to_out_s(attention rows of s)
 *   y_s = x_s + gate2 ff_s(LN(r_s) (1 + scale2) + shift2),  ff(n) = out_projection(silu(linear_1 n) * linear_2 n)
 *
 * y adds the feed-forward to the block's input x, not to r: AuraFlow's attention reaches y only through the
 * feed-forward's LayerNorm. The single block is the same computation with one stream, so one code serves both.
 *
 * Kept (unless KEEP_NOTHING): the modulations, the attention side (joint q, k, v after their norms, the
 * attention output and its state, raw q and k for the norms' backward) and the output projections; with
 * KEEP_ALL also the feed-forward's three linear outputs. Backward recomputes the rest with the same kernels on
 * the same inputs, so its values are bitwise forward's. Attention offload moves the side to the host. */
#include "models/core/attn_side.h"
#include "models/dual/auraflow.h"
#include "models/dual/mmdit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t af_ffn_width(int64_t D)
{
    const int64_t f = 2 * (4 * D) / 3;
    return (f + 255) / 256 * 256;
}

/* The joint layout of a step (the text is the register tokens and the caption's): a joint block's image and text
 * streams, or a single block's joint sequence as one. Raw q and k hold the streams one after another. */
static mm_dims dims_of(const af_block *b)
{
    const mm_dims d = mm_dims_of(b->m);
    return b->n == 2 ? d : mm_joined(&d);
}

/* ---- registration: diffusers' names, in its state_dict order ---- */

/* AuraFlowFeedForward `ff` of a block: linear_1, linear_2, out_projection. */
static void reg_ff(param_set *ps, af_stream *st, const char *p, const char *ff, const model_config *c)
{
    const int64_t D = c->hidden, F = af_ffn_width(D), rm = c->lora_mlp ? c->lora_rank : 0;
    char n[PARAM_NAME_MAX];
    snprintf(n, sizeof n, "%s.linear_1", ff);
    st->ff1 = block_linear(ps, p, n, D, F, false, rm, c);
    snprintf(n, sizeof n, "%s.linear_2", ff);
    st->ff2 = block_linear(ps, p, n, D, F, false, rm, c);
    snprintf(n, sizeof n, "%s.out_projection", ff);
    st->ff3 = block_linear(ps, p, n, F, D, false, rm, c);
}

void af_joint_register(param_set *ps, af_block *b, int i, const model_config *c)
{
    char p[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "joint_transformer_blocks.%d", i);
    const int64_t D = c->hidden, ra = c->lora_attention ? c->lora_rank : 0;
    b->n = 2;
    af_stream *x = &b->s[0], *t = &b->s[1];
    x->ada = block_linear(ps, p, "norm1.linear", D, 6 * D, false, 0, c);
    t->ada = block_linear(ps, p, "norm1_context.linear", D, 6 * D, false, 0, c);
    x->q = block_linear(ps, p, "attn.to_q", D, D, false, ra, c);
    x->k = block_linear(ps, p, "attn.to_k", D, D, false, ra, c);
    x->v = block_linear(ps, p, "attn.to_v", D, D, false, ra, c);
    t->k = block_linear(ps, p, "attn.add_k_proj", D, D, false, ra, c);
    t->v = block_linear(ps, p, "attn.add_v_proj", D, D, false, ra, c);
    t->q = block_linear(ps, p, "attn.add_q_proj", D, D, false, ra, c);
    x->out = block_linear(ps, p, "attn.to_out.0", D, D, false, ra, c);
    t->out = block_linear(ps, p, "attn.to_add_out", D, D, false, ra, c);
    reg_ff(ps, x, p, "ff", c);
    reg_ff(ps, t, p, "ff_context", c);
}

void af_single_register(param_set *ps, af_block *b, int i, const model_config *c)
{
    char p[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "single_transformer_blocks.%d", i);
    const int64_t D = c->hidden, ra = c->lora_attention ? c->lora_rank : 0;
    b->n = 1;
    af_stream *x = &b->s[0];
    x->ada = block_linear(ps, p, "norm1.linear", D, 6 * D, false, 0, c);
    x->q = block_linear(ps, p, "attn.to_q", D, D, false, ra, c);
    x->k = block_linear(ps, p, "attn.to_k", D, D, false, ra, c);
    x->v = block_linear(ps, p, "attn.to_v", D, D, false, ra, c);
    x->out = block_linear(ps, p, "attn.to_out.0", D, D, false, ra, c);
    reg_ff(ps, x, p, "ff", c);
}

/* ---- shared pieces ---- */

static attn_shape joint_attn(const af_block *b)
{
    const mm_dims d = dims_of(b);
    return mm_joint_attn(&d, b->m->shape.mechanism);
}

/* y = LN(x) (1 + scale) + shift over a stream's rows; ln receives LN(x), with its statistics in *stats when asked. */
static st_status ln_modulate(const struct model *m, const mm_dims *d, int s, float *y, float *ln, const float *x,
                             const float *mod, int chunk, op_state *stats)
{
    st_status st = layernorm_forward(m->pool, ln, x, NULL, NULL, d->rows[s], d->D, AF_LN_EPS, stats);
    if (!st) modulate_forward(y, ln, mod + chunk * d->D, mod + (chunk + 1) * d->D, d->B, d->len[s], d->D, 6 * d->D);
    return st;
}

/* modulations and output projections; with KEEP_ALL the feed-forward's three outputs */
static size_t af_kept_bytes(const block *b, keep_level keep)
{
    const mm_dims d = dims_of(b->self);
    const int64_t F = af_ffn_width(d.D);
    return side_kept_bytes(joint_attn(b->self), keep, d.n * d.B * 6 * d.D + d.J * d.D, d.J * (2 * F + d.D),
                           side_elem(((const af_block *)b->self)->m));
}

static size_t af_offloaded_bytes(const block *b)
{
    return side_self_bytes(joint_attn(b->self), side_elem(((const af_block *)b->self)->m));
}

/* ---- forward ---- */

/* q, k, v of every stream into the side's joint rows, then attention (keeping its state when asked). */
static st_status attention_side(const struct model *m, const af_block *ab, const mm_dims *d, const block_state *in,
                                block_saved *sv, float *h, float *ln, float *v, bool keep_state)
{
    st_status st = ST_OK;
    for (int s = 0; s < d->n && !st; s++) {
        const af_stream *as = &ab->s[s];
        const int64_t at = s ? d->rows[0] * d->D : 0;
        float *qr = sv->side[SQR] + at, *kr = sv->side[SKR] + at;
        st = ln_modulate(m, d, s, h, ln, in->t[s], sv->mod[s], 0, NULL);
        if (!st) st = fwd(m, &as->q, qr, h, d->rows[s]);
        if (!st) st = fwd(m, &as->k, kr, h, d->rows[s]);
        if (!st) st = fwd(m, &as->v, v, h, d->rows[s]);
        if (st) break;
        mm_to_joint(d, s, sv->side[SV], v);
        const int64_t n = d->len[s] * d->D;
        for (int64_t b = 0; b < d->B && !st; b++) { /* q, k normalised per head where they sit in the joint rows */
            const int64_t j = (b * d->S + d->offset[s]) * d->D;
            st = layernorm_forward(m->pool, sv->side[SQ] + j, qr + b * n, NULL, NULL, d->len[s] * d->H, d->hd,
                                   AF_LN_EPS, NULL);
            if (!st) st = layernorm_forward(m->pool, sv->side[SK] + j, kr + b * n, NULL, NULL, d->len[s] * d->H, d->hd,
                                            AF_LN_EPS, NULL);
        }
    }
    const attn_shape as = joint_attn(ab);
    return st ? st : side_attend(m->pool, &as, NULL, sv, SQ, keep_state);
}

static st_status af_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                            block_saved **saved_io)
{
    af_block *ab = b->self;
    const struct model *m = ab->m;
    mm_dims d = dims_of(ab);
    const int64_t D = d.D, F = af_ffn_width(D), N = mm_rows_max(&d);
    frame f;
    block_saved *sv = frame_begin(&f, b, m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y[2] = {0};
    for (int s = 0; s < d.n; s++) y[s] = scratch_take(&f.kept, d.rows[s] * D, MEM_ACTIVATIONS, "auraflow.state");
    side_take_self(&f, sv, joint_attn(ab));
    for (int s = 0; s < d.n; s++) {
        sv->mod[s] = scratch_take(f.ks, d.B * 6 * D, f.kt, "auraflow.mod");
        sv->o[s] = scratch_take(f.ks, d.rows[s] * D, f.kt, "auraflow.out");
        sv->f1[s] = scratch_take(f.fs, d.rows[s] * F, f.ft, "auraflow.ff1");
        sv->f2[s] = scratch_take(f.fs, d.rows[s] * F, f.ft, "auraflow.ff2");
        sv->f3[s] = scratch_take(f.fs, d.rows[s] * D, f.ft, "auraflow.ff3");
    }
    float *h = scratch_take(&f.tmp, N * D, MEM_WORKSPACE, "auraflow.h");
    float *ln = scratch_take(&f.tmp, N * D, MEM_WORKSPACE, "auraflow.ln");
    float *g = scratch_take(&f.tmp, N * F, MEM_WORKSPACE, "auraflow.swiglu");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;

    for (int s = 0; s < d.n && !st; s++) st = fwd(m, &ab->s[s].ada, sv->mod[s], m->ctx.cs, d.B);
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) st = attention_side(m, ab, &d, in, sv, h, ln, g, keep != KEEP_NOTHING || f.to_host);
    if (!st && f.to_host) st = side_send(sv);
    for (int s = 0; s < d.n && !st; s++) {
        mm_from_joint(&d, s, h, sv->side[SO]);
        st = fwd(m, &ab->s[s].out, sv->o[s], h, d.rows[s]);
    }
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    for (int s = 0; s < d.n && !st; s++) {
        const af_stream *as = &ab->s[s];
        const float *mod = sv->mod[s];
        gated_residual_forward(y[s], in->t[s], mod + 2 * D, sv->o[s], d.B, d.len[s], D, 6 * D); /* r, for now */
        st = ln_modulate(m, &d, s, h, ln, y[s], mod, 3, NULL);
        if (!st) st = fwd(m, &as->ff1, sv->f1[s], h, d.rows[s]);
        if (!st) st = fwd(m, &as->ff2, sv->f2[s], h, d.rows[s]);
        if (st) break;
        glu_forward(g, sv->f1[s], sv->f2[s], d.rows[s], F, F, GLU_SILU);
        st = fwd(m, &as->ff3, sv->f3[s], g, d.rows[s]);
        if (!st) gated_residual_forward(y[s], in->t[s], mod + 5 * D, sv->f3[s], d.B, d.len[s], D, 6 * D);
    }
    if (!st) *out = (block_state){.n = d.n, .t = {y[0], y[1]}};

    return frame_end(&f, st, sv, saved_io, y, d.n);
}

/* ---- backward ---- */

static st_status af_backward(block *b, const block_state *in, block_saved *sv, block_state *grad)
{
    af_block *ab = b->self;
    const struct model *m = ab->m;
    mm_dims d = dims_of(ab);
    const attn_shape as = joint_attn(ab);
    const int64_t D = d.D, F = af_ffn_width(D), N = mm_rows_max(&d);
    scratch k = side_scratch(m->pool, sv);
    float *dmod[2] = {0};
    for (int s = 0; s < d.n; s++) dmod[s] = scratch_take_zero(&k, d.B * 6 * D, MEM_WORKSPACE, "auraflow.dmod");
    float *r = scratch_take(&k, N * D, MEM_WORKSPACE, "auraflow.r");
    float *ln = scratch_take(&k, N * D, MEM_WORKSPACE, "auraflow.ln");
    float *h = scratch_take(&k, N * D, MEM_WORKSPACE, "auraflow.h");
    float *dh = scratch_take(&k, N * D, MEM_WORKSPACE, "auraflow.dh");
    float *dr = scratch_take(&k, N * D, MEM_WORKSPACE, "auraflow.dr");
    float *t = scratch_take(&k, N * D, MEM_WORKSPACE, "auraflow.t");
    float *g = scratch_take(&k, N * F, MEM_WORKSPACE, "auraflow.swiglu");
    float *dg = scratch_take(&k, N * F, MEM_WORKSPACE, "auraflow.dswiglu");
    float *df1 = scratch_take(&k, N * F, MEM_WORKSPACE, "auraflow.dff1");
    float *df2 = scratch_take(&k, N * F, MEM_WORKSPACE, "auraflow.dff2");
    float *dside[4];
    for (int i = 0; i < 4; i++) dside[i] = scratch_take_zero(&k, d.J * D, MEM_WORKSPACE, "auraflow.dside");
    const bool ffn_recompute = !sv->f1[0];
    float *rf1 = ffn_recompute ? scratch_take(&k, N * F, MEM_WORKSPACE, "auraflow.ff1 (recomputed)") : NULL;
    float *rf2 = ffn_recompute ? scratch_take(&k, N * F, MEM_WORKSPACE, "auraflow.ff2 (recomputed)") : NULL;
    float *rf3 = ffn_recompute ? scratch_take(&k, N * D, MEM_WORKSPACE, "auraflow.ff3 (recomputed)") : NULL;
    op_state stats = {0};
    if (k.status) goto done;

    for (int s = 0; s < d.n; s++) { /* the feed-forward halves, then the output projections */
        const af_stream *ms = &ab->s[s];
        const int64_t n = d.rows[s], ND = n * D, NF = n * F;
        const float *mod = sv->mod[s], *x = in->t[s];
        const float *f1 = sv->f1[s], *f2 = sv->f2[s], *f3 = sv->f3[s];
        float *gx = grad->t[s];
        gated_residual_forward(r, x, mod + 2 * D, sv->o[s], d.B, d.len[s], D, 6 * D);
        if ((k.status = ln_modulate(m, &d, s, h, ln, r, mod, 3, &stats))) goto done;
        if (ffn_recompute) {
            if ((k.status = fwd(m, &ms->ff1, rf1, h, n)) || (k.status = fwd(m, &ms->ff2, rf2, h, n))) goto done;
            f1 = rf1, f2 = rf2;
        }
        glu_forward(g, f1, f2, d.rows[s], F, F, GLU_SILU);
        if (ffn_recompute) {
            if ((k.status = fwd(m, &ms->ff3, rf3, g, n))) goto done;
            f3 = rf3;
        }
        zero_bytes(t, (size_t)ND * sizeof(float));
        gated_residual_backward(gx, dmod[s] + 5 * D, t, gx, mod + 5 * D, f3, d.B, d.len[s], D, 6 * D);
        zero_bytes(dg, (size_t)NF * sizeof(float));
        if ((k.status = bwd(m, &ms->ff3, dg, t, g, n))) goto done;
        zero_bytes(df1, (size_t)NF * sizeof(float));
        zero_bytes(df2, (size_t)NF * sizeof(float));
        glu_backward(df1, df2, dg, f1, f2, n, F, F, GLU_SILU);
        zero_bytes(dh, (size_t)ND * sizeof(float));
        if ((k.status = bwd(m, &ms->ff1, dh, df1, h, n)) || (k.status = bwd(m, &ms->ff2, dh, df2, h, n))) goto done;
        zero_bytes(t, (size_t)ND * sizeof(float)); /* t: dL/dr */
        ln_modulate_backward(t, dmod[s] + 3 * D, dmod[s] + 4 * D, dr, dh, ln, r, mod + 4 * D, d.B, d.len[s], D, 6 * D,
                             &stats);
        zero_bytes(dh, (size_t)ND * sizeof(float));
        gated_residual_backward(gx, dmod[s] + 2 * D, dh, t, mod + 2 * D, sv->o[s], d.B, d.len[s], D, 6 * D);
        mm_from_joint(&d, s, h, sv->side[SO]);
        zero_bytes(dr, (size_t)ND * sizeof(float));
        if ((k.status = bwd(m, &ms->out, dr, dh, h, n))) goto done;
        mm_to_joint(&d, s, dside[SO], dr);
    }
    if ((k.status = side_attend_backward(m->pool, &as, NULL, sv, SQ, dside[SQ], dside[SK], dside[SV], dside[SO], D)))
        goto done;
    for (int s = 0; s < d.n; s++) { /* back through the q/k norms, q, k, v and the first modulation */
        const af_stream *ms = &ab->s[s];
        const int64_t n = d.rows[s], ND = n * D;
        const float *mod = sv->mod[s], *x = in->t[s];
        float *gx = grad->t[s];
        if ((k.status = ln_modulate(m, &d, s, h, ln, x, mod, 0, &stats))) goto done;
        zero_bytes(dh, (size_t)ND * sizeof(float));
        const struct {
            int side, raw;
            const lin_layer *l;
        } qkv[2] = {{SQ, SQR, &ms->q}, {SK, SKR, &ms->k}};
        for (int i = 0; i < 2; i++) {
            const float *raw = sv->side[qkv[i].raw] + (s ? d.rows[0] * D : 0);
            op_state qs = {0};
            mm_from_joint(&d, s, r, dside[qkv[i].side]);
            if ((k.status = layernorm_forward(m->pool, dr, raw, NULL, NULL, n * d.H, d.hd, AF_LN_EPS, &qs))) goto done;
            zero_bytes(t, (size_t)ND * sizeof(float));
            layernorm_backward(t, NULL, NULL, r, raw, NULL, n * d.H, d.hd, &qs);
            op_state_release(&qs);
            if ((k.status = bwd(m, qkv[i].l, dh, t, h, n))) goto done;
        }
        mm_from_joint(&d, s, r, dside[SV]);
        if ((k.status = bwd(m, &ms->v, dh, r, h, n))) goto done;
        ln_modulate_backward(gx, dmod[s], dmod[s] + D, dr, dh, ln, x, mod + D, d.B, d.len[s], D, 6 * D, &stats);
        if ((k.status = bwd(m, &ms->ada, m->ctx.dcs, dmod[s], m->ctx.cs, d.B))) goto done;
    }
done:
    op_state_release(&stats);
    return scratch_end(&k);
}

const block_kind af_joint_kind = {
    SIDE_BLOCK_KIND("auraflow joint", af_kept_bytes, af_offloaded_bytes, af_forward, af_backward)};

const block_kind af_single_kind = {
    SIDE_BLOCK_KIND("auraflow single", af_kept_bytes, af_offloaded_bytes, af_forward, af_backward)};
