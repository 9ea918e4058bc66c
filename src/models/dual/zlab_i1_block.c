/* ZLab I1's block (zlab_i1.h): i1DiTBlock, and with one stream and no sandwich norms a layer of its text adapter.
 *
 * The state is one tensor: the image's B T rows, then the text's B L rows (the adapter: the text's). Every norm has
 * one weight for both streams, so the norms run over all the rows at once; the projections run stream by stream;
 * attention runs on the joint rows of each sample, [image; text], from the side's q, k and v (attn_side.h), the q and
 * k before their norms held stream after stream.
 *
 * Kept (unless KEEP_NOTHING): the attention side and the output projections; with KEEP_ALL also the feed-forward's
 * linear outputs (w12's and w3's), which torch-ffn (KEEP_ATTENTION) recomputes. Recompute runs the same kernels on
 * the same inputs, so its values are bitwise forward's. Attention offload moves the side to the host. Under
 * mixed_precision bf16 what it keeps is made bf16 where it is made and held packed (attn_side.h). */
#include "models/core/attn_side.h"
#include "models/dual/zlab_i1.h"

#include <stdio.h>

#define W(i) (param_at(b->m->params, (i))->w)
#define G(i) (param_at(b->m->params, (i))->g)

const zl_names zl_block_names = {
    {"norm1.scale", "norm2.scale", "norm3.scale", "norm4.scale"}, "attn.q_norm.scale", "attn.k_norm.scale",
    {{"attn.qkv_image", "attn.proj_image", "mlp_image.w12", "mlp_image.w3"},
     {"attn.qkv_text", "attn.proj_text", "mlp_text.w12", "mlp_text.w3"}}};
/* TextEncoderAdapterTransformer's two layers, each its own names */
const zl_names zl_adapter_names[2] = {
    {{"connector_norm1.scale", "connector_norm2.scale", NULL, NULL}, "connector_attn.q_norm.scale",
     "connector_attn.k_norm.scale",
     {{"connector_attn.qkv", "connector_attn.proj", "connector_mlp.w12", "connector_mlp.w3"}}},
    {{"connector_norm3.scale", "connector_norm4.scale", NULL, NULL}, "connector_attn2.q_norm.scale",
     "connector_attn2.k_norm.scale",
     {{"connector_attn2.qkv", "connector_attn2.proj", "connector_mlp2.w12", "connector_mlp2.w3"}}}};

/* in the class's state_dict order: norms, attention (qkv, norms, proj per stream), the feed-forwards */
void zl_block_register(param_set *s, zl_block *b, const char *prefix, const zl_names *n, const model_config *c)
{
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, hd = D / c->heads, F = b->ffn;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    char name[PARAM_NAME_MAX];
#define NORM(suffix, width)                                                                                           \
    (snprintf(name, sizeof name, "%s.%s", prefix, suffix), param_add(s, name, 1, (int64_t[]){width}, full))
    int *norms[4] = {&b->norm1, &b->norm2, &b->norm3, &b->norm4};
    for (int k = 0; k < 4; k++) *norms[k] = n->norm[k] ? NORM(n->norm[k], D) : -1;
    const bool dual = b->streams == 2;
    for (int i = 0; i < b->streams; i++) b->s[i].qkv = block_linear(s, prefix, n->stream[i][0], D, 3 * D, true, ra, c);
    b->norm_q = NORM(n->norm_q, hd);
    b->norm_k = NORM(n->norm_k, hd);
    for (int i = 0; i < b->streams; i++) b->s[i].proj = block_linear(s, prefix, n->stream[i][1], D, D, true, ra, c);
    for (int i = 0; i < b->streams; i++) {
        b->s[i].w12 = block_linear(s, prefix, n->stream[i][2], D, 2 * F, true, rm, c);
        b->s[i].w3 = block_linear(s, prefix, n->stream[i][3], F, D, true, rm, c);
        if (!dual) break;
    }
#undef NORM
}

/* ---- sizes ---- */

/* The step's sizes: the streams' tokens a sample, the image's first in the joint rows */
static mm_dims dims_of(const zl_block *b)
{
    const model_shape *s = &b->m->shape;
    mm_dims d = {.B = s->batch, .D = s->hidden, .H = s->heads, .n = b->streams};
    d.T = b->streams == 2 ? s->tokens : 0, d.L = s->text, d.S = d.T + d.L, d.hd = d.D / d.H, d.J = d.B * d.S;
    d.len[0] = b->streams == 2 ? d.T : d.L, d.len[1] = b->streams == 2 ? d.L : 0;
    d.offset[0] = 0, d.offset[1] = d.T;
    for (int k = 0; k < 2; k++) d.rows[k] = d.B * d.len[k];
    return d;
}

/* where stream s's rows start in the state (floats) */
static int64_t at_of(const mm_dims *d, int s) { return s ? d->rows[0] * d->D : 0; }

static attn_shape joint_attn(const zl_block *b)
{
    const mm_dims d = dims_of(b);
    return mm_joint_attn(&d, b->m->shape.mechanism);
}

static size_t zl_offloaded_bytes(const block *blk)
{
    return side_self_bytes(joint_attn(blk->self), side_elem(((const zl_block *)blk->self)->m));
}

/* the output projections; with KEEP_ALL the feed-forward's w12 and w3 outputs */
static size_t zl_kept_bytes(const block *blk, keep_level keep)
{
    const zl_block *b = blk->self;
    const mm_dims d = dims_of(b);
    return side_kept_bytes(joint_attn(b), keep, d.J * d.D, d.J * (2 * b->ffn + d.D), side_elem(b->m));
}

/* ---- pieces run in forward and again in backward ---- */

/* The text stream's rows that are padding zeroed (x: its rows), where the model gives a keep mask */
static void mask_text(const zl_block *b, const mm_dims *d, int s, float *x)
{
    if (s == d->n - 1 && b->keep && *b->keep && b->streams == 2) row_scale_forward(x, x, *b->keep, d->rows[s], d->D);
}

/* Each sample's rotation of the joint q or k (or back, their gradients') */
static void rotate(const zl_block *b, const mm_dims *d, float *x, bool back)
{
    if (!b->rope || !*b->rope) return;
    for (int64_t i = 0; i < d->B; i++)
        (back ? rope_backward : rope_forward)(x + i * d->S * d->D, 1, d->S, d->H, d->hd, d->D, d->S * d->D,
                                              *b->rope + i * d->S * d->hd);
}

static const attn_mask *mask_of(const zl_block *b) { return b->mask ? *b->mask : NULL; }

/* The side from x: q, k, v of RMSNorm_1(x) stream by stream (q and k raw in SQR, SKR, stream after stream), their
 * norms and rotation into the joint rows, then attention. h: (J, D) and p: (rows max, 4 D) workspaces. */
static st_status zl_attention_forward(const zl_block *b, const mm_dims *d, block_saved *sv, const float *x, float *h,
                                   float *p, bool keep_state)
{
    const struct model *m = b->m;
    const int64_t D = d->D;
    st_status st = rmsnorm_forward(m->pool, h, x, W(b->norm1), d->J, D, ZL_EPS, NULL);
    for (int s = 0; s < d->n && !st; s++) {
        const int64_t n = d->rows[s], at = at_of(d, s);
        st = fwd(m, &b->s[s].qkv, p, h + at, n);
        if (st) break;
        copy_rows(sv->side[SQR] + at, D, p, 3 * D, n, D);
        copy_rows(sv->side[SKR] + at, D, p + D, 3 * D, n, D);
        float *v = p + mm_rows_max(d) * 3 * D; /* v packed, past the projection's rows */
        copy_rows(v, D, p + 2 * D, 3 * D, n, D);
        mm_to_joint(d, s, sv->side[SV], v);
        st = mm_rms_to_joint(m, d, s, sv->side[SQ], sv->side[SQR] + at, b->norm_q);
        if (!st) st = mm_rms_to_joint(m, d, s, sv->side[SK], sv->side[SKR] + at, b->norm_k);
    }
    if (st) return st;
    rotate(b, d, sv->side[SQ], false);
    rotate(b, d, sv->side[SK], false);
    const attn_shape as = mm_joint_attn(d, m->shape.mechanism);
    return side_attend(m->pool, &as, mask_of(b), sv, SQ, keep_state);
}

/* o (J, D): each stream's attention rows (the text's padding zeroed) through its output projection; a: a (rows max,
 * D) workspace */
static st_status zl_projections(const zl_block *b, const mm_dims *d, const block_saved *sv, float *o, float *a)
{
    st_status st = ST_OK;
    for (int s = 0; s < d->n && !st; s++) {
        mm_from_joint(d, s, a, sv->side[SO]);
        mask_text(b, d, s, a);
        st = fwd(b->m, &b->s[s].proj, o + at_of(d, s), a, d->rows[s]);
    }
    return st;
}

/* y = x + RMSNorm_w(o) (sandwich), or x + o; r: a (J, D) workspace; the norm's statistics kept when asked */
static st_status residual(const zl_block *b, const mm_dims *d, float *y, const float *x, const float *o, int w,
                          float *r, op_state *stats)
{
    const int64_t n = d->J * d->D;
    st_status st = b->sandwich ? rmsnorm_forward(b->m->pool, r, o, W(w), d->J, d->D, ZL_EPS, stats) : ST_OK;
    if (st) return st;
    if (y != x) copy_rows(y, n, x, n, 1, n);
    add_to(y, b->sandwich ? r : o, n);
    return ST_OK;
}

/* The feed-forward from x1 (J, D): h = RMSNorm_2(x1) (statistics kept when asked), f1 = w12 h and f2 = w3 g stream
 * by stream, g (rows max, F) = silu(gate) up */
static st_status ffn_forward(const zl_block *b, const mm_dims *d, const float *x1, float *h, float *f1, float *g,
                             float *f2, op_state *stats)
{
    const struct model *m = b->m;
    const int64_t D = d->D, F = b->ffn;
    st_status st = rmsnorm_forward(m->pool, h, x1, W(b->norm2), d->J, D, ZL_EPS, stats);
    for (int s = 0; s < d->n && !st; s++) {
        const int64_t n = d->rows[s], at = at_of(d, s), at2 = s ? d->rows[0] * 2 * F : 0;
        st = fwd(m, &b->s[s].w12, f1 + at2, h + at, n);
        if (st) break;
        glu_forward(g, f1 + at2, f1 + at2 + F, n, F, 2 * F, GLU_SILU);
        st = fwd(m, &b->s[s].w3, f2 + at, g, n);
    }
    return st;
}

/* ---- the block ---- */

static st_status zl_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                            block_saved **saved_io)
{
    zl_block *b = blk->self;
    const struct model *m = b->m;
    const mm_dims d = dims_of(b);
    const int64_t D = d.D, F = b->ffn, J = d.J, N = mm_rows_max(&d);
    const float *x = in->t[0];
    frame f;
    block_saved *sv = frame_begin(&f, blk, m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y = scratch_take(&f.kept, J * D, MEM_ACTIVATIONS, "zlab.state");
    side_take_self(&f, sv, joint_attn(b));
    sv->o[0] = scratch_take(f.ks, J * D, f.kt, "zlab.proj");
    sv->f1[0] = scratch_take(f.fs, J * 2 * F, f.ft, "zlab.w12");
    sv->f2[0] = scratch_take(f.fs, J * D, f.ft, "zlab.w3");
    /* h (J, D), then p (rows max, 4 D: the fused projection's rows and v packed), then g (rows max, F) */
    float *h = scratch_take(&f.tmp, J * D + N * (4 * D + F), MEM_WORKSPACE, "zlab.h, qkv, swiglu");
    float *p = h ? h + J * D : NULL, *g = h ? p + N * 4 * D : NULL;
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;

    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) st = zl_attention_forward(b, &d, sv, x, h, p, keep != KEEP_NOTHING || f.to_host);
    if (!st && f.to_host) st = side_send(sv);
    if (!st) st = zl_projections(b, &d, sv, sv->o[0], p);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    if (!st) st = residual(b, &d, y, x, sv->o[0], b->norm3, h, NULL);
    if (!st) st = ffn_forward(b, &d, y, h, sv->f1[0], g, sv->f2[0], NULL);
    if (!st) st = residual(b, &d, y, y, sv->f2[0], b->norm4, h, NULL);
    if (!st) mask_text(b, &d, 1, y + at_of(&d, 1));
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

/* A backward's workspaces */
typedef struct zl_ws {
    float *x1, *h, *dh, *r, *g, *dg, *df, *dp, *gs, *dr, *dside[4], *rf1, *rf2;
    op_state stats, rstats;
} zl_ws;

static void ws_take(scratch *k, const zl_block *b, const mm_dims *d, const block_saved *sv, zl_ws *w)
{
    const int64_t D = d->D, F = b->ffn, J = d->J, N = mm_rows_max(d);
    *w = (zl_ws){0};
    const struct {
        float **slot;
        int64_t n;
        const char *what;
    } take[] = {{&w->x1, J * D, "zlab.x1"},       {&w->h, J * D, "zlab.h"},          {&w->dh, J * D, "zlab.dh"},
                {&w->r, J * D, "zlab.r"},         {&w->g, N * F, "zlab.swiglu"},     {&w->dg, N * F, "zlab.dswiglu"},
                {&w->df, N * 2 * F, "zlab.dw12"}, {&w->dp, N * 3 * D, "zlab.dqkv"},  {&w->gs, N * D, "zlab.gs"},
                {&w->dr, N * D, "zlab.dr"}};
    for (size_t i = 0; i < sizeof take / sizeof *take; i++)
        *take[i].slot = scratch_take(k, take[i].n, MEM_WORKSPACE, take[i].what);
    for (int i = 0; i < 4; i++) w->dside[i] = scratch_take_zero(k, J * D, MEM_WORKSPACE, "zlab.dside");
    if (!sv->f1[0]) {
        w->rf1 = scratch_take(k, J * 2 * F, MEM_WORKSPACE, "zlab.w12 (recomputed)");
        w->rf2 = scratch_take(k, J * D, MEM_WORKSPACE, "zlab.w3 (recomputed)");
    }
}

/* dx += the gradient through y = x + RMSNorm_w(o) (or x + o) into do (zeroed here) from gy = dL/dy */
static st_status residual_back(const zl_block *b, const mm_dims *d, float *dout, const float *gy, const float *o,
                               int w, zl_ws *ws)
{
    const int64_t n = d->J * d->D;
    zero_floats(dout, n);
    if (!b->sandwich) {
        add_to(dout, gy, n);
        return ST_OK;
    }
    st_status st = rmsnorm_forward(b->m->pool, ws->r, o, W(w), d->J, d->D, ZL_EPS, &ws->rstats);
    if (!st) rmsnorm_backward(dout, G(w), gy, o, W(w), d->J, d->D, &ws->rstats);
    op_state_release(&ws->rstats);
    return st;
}

/* The feed-forward half back: gx (dL/dy in, dL/dx1 out; the text's padding rows masked first), from x1 */
static st_status ffn_backward(const zl_block *b, const mm_dims *d, block_saved *sv, float *gx, zl_ws *w)
{
    const struct model *m = b->m;
    const int64_t D = d->D, F = b->ffn, J = d->J;
    float *f1 = sv->f1[0], *f2 = sv->f2[0];
    st_status st = ST_OK;
    mask_text(b, d, 1, gx + at_of(d, 1));
    if (w->rf1) {
        if ((st = ffn_forward(b, d, w->x1, w->h, w->rf1, w->g, w->rf2, NULL))) return st;
        f1 = w->rf1, f2 = w->rf2;
    }
    float *df2 = w->dh; /* dL/df2, then (zeroed) dL/dh */
    if ((st = residual_back(b, d, df2, gx, f2, b->norm4, w))) return st;
    float *dh = w->r;
    zero_floats(dh, J * D);
    if ((st = rmsnorm_forward(m->pool, w->h, w->x1, W(b->norm2), J, D, ZL_EPS, &w->stats))) return st;
    for (int s = 0; s < d->n && !st; s++) {
        const int64_t n = d->rows[s], at = at_of(d, s), at2 = s ? d->rows[0] * 2 * F : 0;
        glu_forward(w->g, f1 + at2, f1 + at2 + F, n, F, 2 * F, GLU_SILU);
        zero_floats(w->dg, n * F);
        if ((st = bwd(m, &b->s[s].w3, w->dg, df2 + at, w->g, n))) break;
        zero_floats(w->df, n * 2 * F);
        glu_backward(w->df, w->df + F, w->dg, f1 + at2, f1 + at2 + F, n, F, 2 * F, GLU_SILU);
        st = bwd(m, &b->s[s].w12, dh + at, w->df, w->h + at, n);
    }
    if (!st) rmsnorm_backward(gx, G(b->norm2), dh, w->x1, W(b->norm2), J, D, &w->stats);
    op_state_release(&w->stats);
    return st;
}

/* The attention half back to the joint q, k, v gradients (rotated back): gx is dL/dx1 */
static st_status attention_back(const zl_block *b, const mm_dims *d, block_saved *sv, const float *gx, zl_ws *w)
{
    const struct model *m = b->m;
    float *dout = w->dh;
    st_status st = residual_back(b, d, dout, gx, sv->o[0], b->norm3, w);
    for (int s = 0; s < d->n && !st; s++) {
        const int64_t n = d->rows[s];
        mm_from_joint(d, s, w->gs, sv->side[SO]);
        mask_text(b, d, s, w->gs);
        zero_floats(w->dr, n * d->D);
        if ((st = bwd(m, &b->s[s].proj, w->dr, dout + at_of(d, s), w->gs, n))) break;
        mask_text(b, d, s, w->dr);
        mm_to_joint(d, s, w->dside[SO], w->dr);
    }
    const attn_shape as = mm_joint_attn(d, m->shape.mechanism);
    float *const *ds = w->dside;
    if (!st) st = side_attend_backward(m->pool, &as, mask_of(b), sv, SQ, ds[SQ], ds[SK], ds[SV], ds[SO], d->D);
    if (st) return st;
    rotate(b, d, ds[SQ], true);
    rotate(b, d, ds[SK], true);
    return ST_OK;
}

/* From the joint q, k, v gradients back through the norms, the fused projections and RMSNorm_1 into gx */
static st_status input_back(const zl_block *b, const mm_dims *d, const block_saved *sv, const float *x, float *gx,
                            zl_ws *w)
{
    const struct model *m = b->m;
    const int64_t D = d->D, J = d->J;
    st_status st = rmsnorm_forward(m->pool, w->h, x, W(b->norm1), J, D, ZL_EPS, &w->stats);
    zero_floats(w->dh, J * D);
    for (int s = 0; s < d->n && !st; s++) {
        const int64_t n = d->rows[s], at = at_of(d, s);
        const struct {
            int side, raw, norm;
        } qk[2] = {{SQ, SQR, b->norm_q}, {SK, SKR, b->norm_k}};
        for (int i = 0; i < 2 && !st; i++) {
            mm_from_joint(d, s, w->gs, w->dside[qk[i].side]);
            zero_floats(w->dr, n * D);
            st = mm_rms_back(m, d, n, w->dr, w->gs, sv->side[qk[i].raw] + at, qk[i].norm, w->r);
            copy_rows(w->dp + i * D, 3 * D, w->dr, D, n, D);
        }
        mm_from_joint(d, s, w->gs, w->dside[SV]);
        copy_rows(w->dp + 2 * D, 3 * D, w->gs, D, n, D);
        if (!st) st = bwd(m, &b->s[s].qkv, w->dh + at, w->dp, w->h + at, n);
    }
    if (!st) rmsnorm_backward(gx, G(b->norm1), w->dh, x, W(b->norm1), J, D, &w->stats);
    op_state_release(&w->stats);
    return st;
}

/* grad->t[0] holds dL/dy on entry and dL/dx on return (in place). */
static st_status zl_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    zl_block *b = blk->self;
    const mm_dims d = dims_of(b);
    const float *x = in->t[0];
    float *gx = grad->t[0];
    scratch k = side_scratch(b->m->pool, sv);
    zl_ws w;
    ws_take(&k, b, &d, sv, &w);
    if (k.status) goto done;
    if ((k.status = residual(b, &d, w.x1, x, sv->o[0], b->norm3, w.r, NULL))) goto done;
    if ((k.status = ffn_backward(b, &d, sv, gx, &w))) goto done;
    if ((k.status = attention_back(b, &d, sv, gx, &w))) goto done;
    k.status = input_back(b, &d, sv, x, gx, &w);
done:
    op_state_release(&w.stats);
    op_state_release(&w.rstats);
    return scratch_end(&k);
}

const block_kind zl_block_kind = {
    SIDE_BLOCK_KIND("zlab_i1", zl_kept_bytes, zl_offloaded_bytes, zl_forward, zl_backward)};
