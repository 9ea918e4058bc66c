/* HiDream's blocks (diffusers' HiDreamImageTransformerBlock and HiDreamImageSingleTransformerBlock). Per stream s
 * (double: image, then text; single: the joint [text; image] state), with LN a LayerNorm without affine at 1e-6,
 * from SiLU(c):
 *
 *   (shift1, scale1, gate1, shift2, scale2, gate2)_s = adaLN_modulation.1(SiLU(c)), chunks 6s .. 6s + 5
 *   x'_s = [x_s; this block's Llama tokens] (text stream of a double block, and the single block's only one)
 *   h_s = LN(x'_s) (1 + scale1) + shift1;  q, k = RMSNorm(to_q/k(h_s)) over the width;  v = to_v(h_s)
 *   the image rows of q and k rotated (ids (0, r, c)); attention over every stream's x' rows
 *   r_s = x_s + gate1 to_out(attention rows of x_s)       (the Llama rows' outputs are dropped, as diffusers slices)
 *   y_s = r_s + gate2 ffn_s(LN(r_s) (1 + scale2) + shift2)
 *
 * ffn_s is the mixture of experts on the image stream (and the single block's), ff_t's SwiGLU on a double block's
 * text. Kept (unless KEEP_NOTHING): the modulation, the attention side (joint q, k, v after their norms and
 * rotation, the output and its state, raw q and k) and the output projections; with KEEP_ALL also the
 * feed-forward's intermediates, the routing state among them. Backward recomputes the rest with the same kernels
 * on the same inputs (the routing is a function of the feed-forward's input alone), so its values are bitwise
 * forward's. Attention offload moves the side to the host. */
#include "models/core/attn_side.h"
#include "models/core/family.h"
#include "models/dual/hidream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t hd_ffn_width(int64_t hidden_dim) { return (2 * hidden_dim / 3 + 255) / 256 * 256; }

/* Sizes of a step. Per sample, stream s has own[s] rows (its state) and in[s] = own[s] plus the Llama tokens as
 * input, at joint row off[s] of S; the image rows of the joint sequence start at img, the first G of its T the
 * latent's patches, the rest a non-square latent's padding. */
typedef struct hd_dims {
    int n;
    bool moe[2];
    int64_t B, D, H, hd, F, Fs, E, K, T, G, Ll, S, J, MS, Nmax;
    int64_t own[2], in[2], off[2], rows[2], inrows[2];
    int64_t img;
} hd_dims;

static hd_dims dims_of(const hd_block *b)
{
    const model_shape *s = &b->m->shape;
    const model_config *c = &b->m->cfg;
    hd_dims d = {.n = b->n, .B = s->batch, .D = s->hidden, .H = s->heads, .T = s->tokens, .Ll = c->llama_len,
                 .E = c->experts, .K = c->experts_active, .G = grid_rows(c) * grid_cols(c)};
    const int64_t L0 = s->text; /* the initial text: T5's tokens, then the last block's Llama tokens */
    d.hd = d.D / d.H, d.F = hd_ffn_width(4 * d.D), d.Fs = hd_ffn_width(2 * d.D), d.MS = d.n * 6 * d.D;
    if (b->n == 2) {
        d.own[0] = d.in[0] = d.T, d.own[1] = L0, d.in[1] = L0 + d.Ll, d.off[1] = d.T, d.img = 0;
        d.moe[0] = true;
    } else {
        d.own[0] = L0 + d.T, d.in[0] = d.own[0] + d.Ll, d.img = L0;
        d.moe[0] = true;
    }
    for (int i = 0; i < d.n; i++) {
        d.S += d.in[i];
        d.rows[i] = d.B * d.own[i], d.inrows[i] = d.B * d.in[i];
        d.Nmax = d.inrows[i] > d.Nmax ? d.inrows[i] : d.Nmax;
    }
    d.J = d.B * d.S;
    return d;
}

/* n rows per sample of x (B, n, D) into / out of the joint rows at stream s's offset */
static void to_joint(const hd_dims *d, int s, float *joint, const float *x, int64_t n)
{
    copy_rows(joint + d->off[s] * d->D, d->S * d->D, x, n * d->D, d->B, n * d->D);
}

static void from_joint(const hd_dims *d, int s, float *x, const float *joint, int64_t n)
{
    copy_rows(x, n * d->D, joint + d->off[s] * d->D, d->S * d->D, d->B, n * d->D);
}

/* ---- registration: diffusers' names, in its state_dict order ---- */

/* A SwiGLU under prefix p. rank: its LoRA rank; the routed experts get none, since an adapter's workspace would
 * follow each expert's row count, which the routing decides. */
static void reg_ffn(param_set *ps, hd_ffn *f, const char *p, int64_t F, int64_t rank, const model_config *c)
{
    const int64_t D = c->hidden;
    f->w1 = block_linear(ps, p, "w1", D, F, false, rank, c);
    f->w2 = block_linear(ps, p, "w2", F, D, false, rank, c);
    f->w3 = block_linear(ps, p, "w3", D, F, false, rank, c);
}

static void reg_attn(param_set *ps, hd_block *b, const char *p, int s, const model_config *c)
{
    const int64_t D = c->hidden, ra = c->lora_attention ? c->lora_rank : 0;
    const char *t = s ? "_t" : "";
    char n[64];
#define ATTN(field, name)                                                                                              \
    snprintf(n, sizeof n, "attn1.%s%s", name, t), b->field[s] = block_linear(ps, p, n, D, D, true, ra, c)
    ATTN(q, "to_q");
    ATTN(k, "to_k");
    ATTN(v, "to_v");
    ATTN(out, "to_out");
#undef ATTN
    snprintf(n, sizeof n, "attn1.q_rms_norm%s", t);
    b->nq[s] = block_norm(ps, p, n, c->hidden, c);
    snprintf(n, sizeof n, "attn1.k_rms_norm%s", t);
    b->nk[s] = block_norm(ps, p, n, c->hidden, c);
}

/* ff_i: shared_experts, experts.{e}, gate */
static void reg_moe(param_set *ps, hd_block *b, const char *p, const model_config *c)
{
    const int64_t D = c->hidden, rm = c->lora_mlp ? c->lora_rank : 0;
    char n[PARAM_NAME_MAX];
    snprintf(n, sizeof n, "%.64s.ff_i.shared_experts", p);
    reg_ffn(ps, &b->shared, n, hd_ffn_width(2 * D), rm, c);
    for (int e = 0; e < c->experts; e++) {
        snprintf(n, sizeof n, "%.64s.ff_i.experts.%d", p, e);
        reg_ffn(ps, &b->expert[e], n, hd_ffn_width(4 * D), 0, c);
    }
    snprintf(n, sizeof n, "%.64s.ff_i.gate.weight", p);
    b->gate = param_add(ps, n, 2, (int64_t[]){c->experts, D}, !c->lora_rank);
}

static void reg_ada(param_set *ps, hd_block *b, const char *p, const model_config *c)
{
    b->ada = block_linear(ps, p, "adaLN_modulation.1", c->hidden, b->n * 6 * c->hidden, true, 0, c);
}

void hd_double_register(param_set *ps, hd_block *b, int i, const model_config *c)
{
    char p[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "double_stream_blocks.%d.block", i);
    b->n = 2, b->index = i;
    reg_ada(ps, b, p, c);
    reg_attn(ps, b, p, 0, c);
    reg_attn(ps, b, p, 1, c);
    reg_moe(ps, b, p, c);
    char n[PARAM_NAME_MAX];
    snprintf(n, sizeof n, "%.64s.ff_t", p);
    reg_ffn(ps, &b->ff_t, n, hd_ffn_width(4 * c->hidden), c->lora_mlp ? c->lora_rank : 0, c);
}

void hd_single_register(param_set *ps, hd_block *b, int i, const model_config *c)
{
    char p[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "single_stream_blocks.%d.block", i);
    b->n = 1, b->index = (int)c->depth + i;
    reg_ada(ps, b, p, c);
    reg_attn(ps, b, p, 0, c);
    reg_moe(ps, b, p, c);
}

/* ---- the feed-forwards ---- */

#define W(i) (param_at(m->params, (i))->w)
#define G(i) (param_at(m->params, (i))->g)

/* What a stream's feed-forward keeps, in floats, as sv->f1, f2, f3: for the mixture of experts the routing state,
 * then the routed rows' w1 and w3 outputs, the experts' outputs and the shared expert's w1 and w3 outputs, then
 * the feed-forward's output; for a SwiGLU its w1 and w3 outputs, then its output. */
static void ffn_parts(const hd_dims *d, int s, int64_t part[3])
{
    const int64_t n = d->rows[s], nk = n * d->K;
    if (d->moe[s]) {
        part[0] = (int64_t)((moe_route_bytes(n, d->E, d->K) + sizeof(float) - 1) / sizeof(float));
        part[1] = 2 * nk * d->F + nk * d->D + 2 * n * d->Fs;
    } else {
        part[0] = part[1] = n * d->F;
    }
    part[2] = n * d->D;
}

/* The feed-forward's transient floats: the SwiGLU's product, the routed rows' input and the shared expert's
 * output. */
static int64_t ffn_tmp(const hd_dims *d, int s)
{
    const int64_t n = d->rows[s], nk = n * d->K;
    if (!d->moe[s]) return n * d->F;
    const int64_t w = nk * d->F > n * d->Fs ? nk * d->F : n * d->Fs;
    return w + nk * d->D + n * d->D;
}

/* g = silu(f1) f3; under bf16 each of the two made bf16 (side_made), as PyTorch's bf16 F.silu(w1(x)) * w3(x) */
static void swiglu_act(const struct model *m, float *g, const float *f1, const float *f3, int64_t n, int64_t F)
{
    if (!m->cfg.bf16_activations) {
        glu_forward(g, f1, f3, n, F, F, GLU_SILU);
        return;
    }
    silu_forward(g, f1, n * F);
    side_made(m, g, n * F);
    mul_scaled(g, g, f3, 1.0f, n * F);
    side_made(m, g, n * F);
}

static st_status swiglu_forward(const struct model *m, const hd_ffn *f, float *y, float *f1, float *f3, float *g,
                                const float *x, int64_t n, int64_t F)
{
    st_status st = fwd(m, &f->w1, f1, x, n);
    if (!st) st = fwd(m, &f->w3, f3, x, n);
    if (st) return st;
    swiglu_act(m, g, f1, f3, n, F);
    return fwd(m, &f->w2, y, g, n);
}

/* dx += the SwiGLU's input gradient from dy; w1's and w3's outputs given. Workspace 3 n F. */
static st_status swiglu_backward(const struct model *m, const hd_ffn *f, float *dx, const float *dy, const float *x,
                                 const float *f1, const float *f3, int64_t n, int64_t F)
{
    scratch k = {.pool = m->pool};
    float *g = scratch_take(&k, n * F, MEM_WORKSPACE, "hidream.swiglu");
    float *dg = scratch_take_zero(&k, n * F, MEM_WORKSPACE, "hidream.dswiglu");
    float *df = scratch_take_zero(&k, n * F, MEM_WORKSPACE, "hidream.dw1");
    if (k.status) return scratch_end(&k);
    swiglu_act(m, g, f1, f3, n, F);
    if ((k.status = bwd(m, &f->w2, dg, dy, g, n))) return scratch_end(&k);
    zero_bytes(g, (size_t)(n * F) * sizeof(float)); /* g: dL/df3 now */
    glu_backward(df, g, dg, f1, f3, n, F, F, GLU_SILU);
    if (!(k.status = bwd(m, &f->w1, dx, df, x, n))) k.status = bwd(m, &f->w3, dx, g, x, n);
    return scratch_end(&k);
}

/* The mixture's pieces within the kept buffers: f1 holds the routing state, f2 the rest. */
typedef struct moe_parts {
    moe_route r;
    float *f1, *f3, *yr, *s1, *s3;
} moe_parts;

static moe_parts moe_parts_of(const struct model *m, const hd_dims *d, int s, float *route, float *rest)
{
    const int64_t n = d->rows[s], nk = n * d->K;
    moe_parts p;
    moe_route_view(&p.r, route, n, d->E, d->K);
    p.r.bf16 = m->cfg.bf16_activations;
    p.f1 = rest, p.f3 = p.f1 + nk * d->F, p.yr = p.f3 + nk * d->F, p.s1 = p.yr + nk * d->D, p.s3 = p.s1 + n * d->Fs;
    return p;
}

/* y = the stream's feed-forward of x (rows[s] rows), its parts into part[0 .. 2) (f1, f2), tmp ffn_tmp floats */
static st_status ffn_forward(const struct model *m, const hd_block *b, const hd_dims *d, int s, float *y,
                             float *f1, float *f2, float *tmp, const float *x)
{
    const int64_t n = d->rows[s], nk = n * d->K, D = d->D;
    if (!d->moe[s]) return swiglu_forward(m, &b->ff_t, y, f1, f2, tmp, x, n, d->F);
    moe_parts p = moe_parts_of(m, d, s, f1, f2);
    const int64_t w = nk * d->F > n * d->Fs ? nk * d->F : n * d->Fs;
    float *g = tmp, *xr = g + w, *ys = xr + nk * D;
    moe_route_forward(&p.r, x, W(b->gate), D);
    moe_dispatch_forward(xr, x, &p.r, D);
    st_status st = ST_OK;
    for (int e = 0; e < d->E && !st; e++) {
        const int64_t a = moe_expert_start(&p.r, e), r = moe_expert_start(&p.r, e + 1) - a;
        st = fwd(m, &b->expert[e].w1, p.f1 + a * d->F, xr + a * D, r);
        if (!st) st = fwd(m, &b->expert[e].w3, p.f3 + a * d->F, xr + a * D, r);
    }
    if (st) return st;
    swiglu_act(m, g, p.f1, p.f3, nk, d->F);
    for (int e = 0; e < d->E && !st; e++) {
        const int64_t a = moe_expert_start(&p.r, e), r = moe_expert_start(&p.r, e + 1) - a;
        st = fwd(m, &b->expert[e].w2, p.yr + a * D, g + a * d->F, r);
    }
    if (!st) moe_combine_forward(y, p.yr, &p.r, D);
    if (!st) st = swiglu_forward(m, &b->shared, ys, p.s1, p.s3, g, x, n, d->Fs);
    if (!st) add_to(y, ys, n * D), side_made(m, y, n * D);
    return st;
}

/* dx += the feed-forward's input gradient from dy (rows[s] rows of x), with forward's parts */
static st_status ffn_backward(const struct model *m, const hd_block *b, const hd_dims *d, int s, float *dx,
                              const float *dy, const float *x, float *f1, float *f2)
{
    const int64_t n = d->rows[s], nk = n * d->K, D = d->D, F = d->F;
    if (!d->moe[s]) return swiglu_backward(m, &b->ff_t, dx, dy, x, f1, f2, n, F);
    moe_parts p = moe_parts_of(m, d, s, f1, f2);
    scratch k = {.pool = m->pool};
    float *xr = scratch_take(&k, nk * D, MEM_WORKSPACE, "hidream.moe.rows");
    float *dxr = scratch_take_zero(&k, nk * D, MEM_WORKSPACE, "hidream.moe.drows");
    float *dyr = scratch_take_zero(&k, nk * D, MEM_WORKSPACE, "hidream.moe.dout");
    float *dw = scratch_take_zero(&k, nk, MEM_WORKSPACE, "hidream.moe.dweight");
    float *g = scratch_take(&k, nk * F, MEM_WORKSPACE, "hidream.moe.swiglu");
    float *dg = scratch_take_zero(&k, nk * F, MEM_WORKSPACE, "hidream.moe.dswiglu");
    float *df1 = scratch_take_zero(&k, nk * F, MEM_WORKSPACE, "hidream.moe.dw1");
    if (k.status) return scratch_end(&k);
    k.status = swiglu_backward(m, &b->shared, dx, dy, x, p.s1, p.s3, n, d->Fs);
    if (k.status) return scratch_end(&k);
    moe_combine_backward(dyr, dw, dy, p.yr, &p.r, D);
    moe_dispatch_forward(xr, x, &p.r, D);
    swiglu_act(m, g, p.f1, p.f3, nk, F);
    for (int e = 0; e < d->E && !k.status; e++) {
        const int64_t a = moe_expert_start(&p.r, e), r = moe_expert_start(&p.r, e + 1) - a;
        k.status = bwd(m, &b->expert[e].w2, dg + a * F, dyr + a * D, g + a * F, r);
    }
    if (k.status) return scratch_end(&k);
    zero_bytes(g, (size_t)(nk * F) * sizeof(float)); /* g: dL/df3 now */
    glu_backward(df1, g, dg, p.f1, p.f3, nk, F, F, GLU_SILU);
    for (int e = 0; e < d->E && !k.status; e++) {
        const int64_t a = moe_expert_start(&p.r, e), r = moe_expert_start(&p.r, e + 1) - a;
        k.status = bwd(m, &b->expert[e].w1, dxr + a * D, df1 + a * F, xr + a * D, r);
        if (!k.status) k.status = bwd(m, &b->expert[e].w3, dxr + a * D, g + a * F, xr + a * D, r);
    }
    if (k.status) return scratch_end(&k);
    moe_dispatch_backward(dx, dxr, &p.r, D);
    k.status = moe_route_backward(m->pool, dx, G(b->gate), dw, &p.r, x, W(b->gate), D);
    return scratch_end(&k);
}

/* ---- sizes for the plan ---- */

/* the attention over every stream's input rows */
static attn_shape joint_attn(const hd_block *b)
{
    const hd_dims d = dims_of(b);
    return (attn_shape){
        .batch = d.B, .tokens = d.S, .heads = d.H, .head_dim = d.hd, .mechanism = b->m->shape.mechanism};
}

static size_t hd_kept_bytes(const block *b, keep_level keep)
{
    const hd_dims d = dims_of(b->self);
    /* the modulation, the output projections; the feed-forwards' parts, but a routing state, which stays as it is
     * (block_saved's f1_raw: its indices among it) */
    int64_t floats = d.B * d.MS, ffn = 0, route = 0;
    for (int s = 0; s < d.n; s++) {
        int64_t part[3];
        ffn_parts(&d, s, part);
        floats += d.rows[s] * d.D, ffn += part[1] + part[2];
        *(d.moe[s] ? &route : &ffn) += part[0];
    }
    const size_t elem = side_elem(((const hd_block *)b->self)->m);
    const size_t bytes = side_kept_bytes(joint_attn(b->self), keep, floats, ffn, elem);
    return bytes + (keep == KEEP_ALL ? (size_t)route * sizeof(float) : 0);
}

static size_t hd_offloaded_bytes(const block *b)
{
    return side_self_bytes(joint_attn(b->self), side_elem(((const hd_block *)b->self)->m));
}

/* ---- forward ---- */

/* x' = [x; the block's Llama tokens] for stream s (the Llama tokens join the last stream) */
static void stream_input(const hd_block *b, const hd_dims *d, int s, float *xin, const float *x)
{
    const int64_t D = d->D, own = d->own[s], in = d->in[s];
    copy_rows(xin, in * D, x, own * D, d->B, own * D);
    if (in > own) copy_rows(xin + own * D, in * D, hd_llama(b->m, b->index, false), d->Ll * D, d->B, d->Ll * D);
}

static void rope_image(const struct model *m, const hd_dims *d, float *x, bool backward)
{
    (backward ? rope_backward : rope_forward)(x + d->img * d->D, d->B, d->T, d->H, d->hd, d->D, d->S * d->D,
                                              m->ctx.rope);
}

/* The padding rows' keys (or their gradient) zeroed, as hidden_states_masks multiplies the keys: each query still
 * gives them logit 0. */
static void zero_padding_keys(const hd_dims *d, float *k)
{
    for (int64_t b = 0; b < d->B && d->T > d->G; b++)
        zero_bytes(k + (b * d->S + d->img + d->G) * d->D, (size_t)((d->T - d->G) * d->D) * sizeof(float));
}

/* h = LN(x') (1 + scale) + shift of chunks (c, c + 1) over stream s's input rows; ln keeps LN(x') */
static st_status ln_modulate(const struct model *m, const hd_dims *d, int s, int64_t per, float *h, float *ln,
                             const float *x, const float *mod, int chunk, op_state *stats)
{
    st_status st = layernorm_forward(m->pool, ln, x, NULL, NULL, d->B * per, d->D, HD_LN_EPS, stats);
    const float *ms = mod + (6 * s + chunk) * d->D;
    if (!st) modulate_forward(h, ln, ms, ms + d->D, d->B, per, d->D, d->MS);
    return st;
}

/* q, k, v of every stream into the side's joint rows, rotation, then attention (keeping its state when asked). */
static st_status attention_side(const struct model *m, const hd_block *hb, const hd_dims *d, const block_state *in,
                                block_saved *sv, float *xin, float *ln, float *h, float *a, float *n2,
                                bool keep_state)
{
    st_status st = ST_OK;
    for (int s = 0; s < d->n && !st; s++) {
        const int64_t N = d->inrows[s];
        stream_input(hb, d, s, xin, in->t[s]);
        st = ln_modulate(m, d, s, d->in[s], h, ln, xin, sv->mod[0], 0, NULL);
        const struct {
            const lin_layer *l;
            int norm, raw, side;
        } qk[2] = {{&hb->q[s], hb->nq[s], SQR, SQ}, {&hb->k[s], hb->nk[s], SKR, SK}};
        for (int i = 0; i < 2 && !st; i++) {
            st = fwd(m, qk[i].l, a, h, N);
            if (!st) st = rmsnorm_forward(m->pool, n2, a, W(qk[i].norm), N, d->D, HD_RMS_EPS, NULL);
            if (st) break;
            to_joint(d, s, sv->side[qk[i].raw], a, d->in[s]);
            to_joint(d, s, sv->side[qk[i].side], n2, d->in[s]);
        }
        if (!st) st = fwd(m, &hb->v[s], a, h, N);
        if (!st) to_joint(d, s, sv->side[SV], a, d->in[s]);
    }
    if (st) return st;
    rope_image(m, d, sv->side[SQ], false);
    rope_image(m, d, sv->side[SK], false);
    zero_padding_keys(d, sv->side[SK]);
    const attn_shape as = joint_attn(hb);
    return side_attend(m->pool, &as, NULL, sv, SQ, keep_state);
}

static st_status hd_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                            block_saved **saved_io)
{
    hd_block *hb = b->self;
    const struct model *m = hb->m;
    hd_dims d = dims_of(hb);
    const int64_t D = d.D, N = d.Nmax;
    frame f;
    block_saved *sv = frame_begin(&f, b, m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y[2] = {0};
    for (int s = 0; s < d.n; s++) y[s] = scratch_take(&f.kept, d.rows[s] * D, MEM_ACTIVATIONS, "hidream.state");
    side_take_self(&f, sv, joint_attn(hb));
    sv->mod[0] = scratch_take(f.ks, d.B * d.MS, f.kt, "hidream.mod");
    int64_t tmpn = 0;
    for (int s = 0; s < d.n; s++) {
        int64_t part[3];
        ffn_parts(&d, s, part);
        sv->o[s] = scratch_take(f.ks, d.rows[s] * D, f.kt, "hidream.out");
        sv->f1[s] = scratch_take(f.fs, part[0], f.ft, d.moe[s] ? "hidream.moe.route" : "hidream.ff1");
        sv->f1_raw[s] = d.moe[s];
        sv->f2[s] = scratch_take(f.fs, part[1], f.ft, d.moe[s] ? "hidream.moe.ffn" : "hidream.ff3");
        sv->f3[s] = scratch_take(f.fs, part[2], f.ft, "hidream.ffn.out");
        tmpn = ffn_tmp(&d, s) > tmpn ? ffn_tmp(&d, s) : tmpn;
    }
    float *xin = scratch_take(&f.tmp, N * D, MEM_WORKSPACE, "hidream.x");
    float *ln = scratch_take(&f.tmp, N * D, MEM_WORKSPACE, "hidream.ln");
    float *h = scratch_take(&f.tmp, N * D, MEM_WORKSPACE, "hidream.h");
    float *a = scratch_take(&f.tmp, N * D, MEM_WORKSPACE, "hidream.a");
    float *n2 = scratch_take(&f.tmp, N * D, MEM_WORKSPACE, "hidream.n");
    float *tmp = scratch_take(&f.tmp, tmpn, MEM_WORKSPACE, "hidream.ffn");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;

    if (!st) st = fwd(m, &hb->ada, sv->mod[0], m->ctx.cs, d.B);
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host)
        st = attention_side(m, hb, &d, in, sv, xin, ln, h, a, n2, keep != KEEP_NOTHING || f.to_host);
    if (!st && f.to_host) st = side_send(sv);
    for (int s = 0; s < d.n && !st; s++) {
        from_joint(&d, s, h, sv->side[SO], d.own[s]);
        st = fwd(m, &hb->out[s], sv->o[s], h, d.rows[s]);
    }
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    for (int s = 0; s < d.n && !st; s++) {
        const float *mod = sv->mod[0] + 6 * s * D;
        gated_residual_forward(y[s], in->t[s], mod + 2 * D, sv->o[s], d.B, d.own[s], D, d.MS);
        st = ln_modulate(m, &d, s, d.own[s], h, ln, y[s], sv->mod[0], 3, NULL);
        if (!st) st = ffn_forward(m, hb, &d, s, sv->f3[s], sv->f1[s], sv->f2[s], tmp, h);
        if (!st) gated_residual_forward(y[s], y[s], mod + 5 * D, sv->f3[s], d.B, d.own[s], D, d.MS);
    }
    if (!st) *out = (block_state){.n = d.n, .t = {y[0], y[1]}};
    return frame_end(&f, st, sv, saved_io, y, d.n);
}

/* ---- backward ---- */

static st_status hd_backward(block *b, const block_state *in, block_saved *sv, block_state *grad)
{
    hd_block *hb = b->self;
    const struct model *m = hb->m;
    hd_dims d = dims_of(hb);
    const attn_shape as = joint_attn(hb);
    const int64_t D = d.D, N = d.Nmax;
    scratch k = side_scratch(m->pool, sv);
    float *dmod = scratch_take_zero(&k, d.B * d.MS, MEM_WORKSPACE, "hidream.dmod");
    float *r = scratch_take(&k, N * D, MEM_WORKSPACE, "hidream.r");
    float *ln = scratch_take(&k, N * D, MEM_WORKSPACE, "hidream.ln");
    float *h = scratch_take(&k, N * D, MEM_WORKSPACE, "hidream.h");
    float *dh = scratch_take(&k, N * D, MEM_WORKSPACE, "hidream.dh");
    float *dr = scratch_take(&k, N * D, MEM_WORKSPACE, "hidream.dr");
    float *t = scratch_take(&k, N * D, MEM_WORKSPACE, "hidream.t");
    float *dside[4];
    for (int i = 0; i < 4; i++) dside[i] = scratch_take_zero(&k, d.J * D, MEM_WORKSPACE, "hidream.dside");
    float *u = scratch_take(&k, N * D, MEM_WORKSPACE, "hidream.u");
    const bool ffn_recompute = !sv->f1[0];
    float *rf[2][3] = {{0}}, *tmp = NULL;
    int64_t tmpn = 0;
    for (int s = 0; ffn_recompute && s < d.n; s++) {
        int64_t part[3];
        ffn_parts(&d, s, part);
        for (int i = 0; i < 3; i++) rf[s][i] = scratch_take(&k, part[i], MEM_WORKSPACE, "hidream.ffn (recomputed)");
        tmpn = ffn_tmp(&d, s) > tmpn ? ffn_tmp(&d, s) : tmpn;
    }
    if (ffn_recompute) tmp = scratch_take(&k, tmpn, MEM_WORKSPACE, "hidream.ffn");
    op_state stats = {0};
    if (k.status) goto done;

    for (int s = 0; s < d.n; s++) { /* the feed-forward halves, then the output projections */
        const int64_t n = d.rows[s], ND = n * D;
        const float *mod = sv->mod[0] + 6 * s * D;
        float *f1 = sv->f1[s], *f2 = sv->f2[s], *f3 = sv->f3[s];
        float *gx = grad->t[s];
        gated_residual_forward(r, in->t[s], mod + 2 * D, sv->o[s], d.B, d.own[s], D, d.MS);
        if ((k.status = ln_modulate(m, &d, s, d.own[s], h, ln, r, sv->mod[0], 3, &stats))) goto done;
        if (ffn_recompute) {
            f1 = rf[s][0], f2 = rf[s][1], f3 = rf[s][2];
            if ((k.status = ffn_forward(m, hb, &d, s, f3, f1, f2, tmp, h))) goto done;
        }
        zero_bytes(t, (size_t)ND * sizeof(float));
        gated_residual_backward(gx, dmod + (6 * s + 5) * D, t, gx, mod + 5 * D, f3, d.B, d.own[s], D, d.MS);
        zero_bytes(dh, (size_t)ND * sizeof(float));
        if ((k.status = ffn_backward(m, hb, &d, s, dh, t, h, f1, f2))) goto done;
        ln_modulate_backward(gx, dmod + (6 * s + 3) * D, dmod + (6 * s + 4) * D, dr, dh, ln, r, mod + 4 * D, d.B,
                             d.own[s], D, d.MS, &stats); /* gx: dL/dr */
        zero_bytes(dh, (size_t)ND * sizeof(float));
        gated_residual_backward(gx, dmod + (6 * s + 2) * D, dh, gx, mod + 2 * D, sv->o[s], d.B, d.own[s], D, d.MS);
        from_joint(&d, s, h, sv->side[SO], d.own[s]);
        zero_bytes(dr, (size_t)ND * sizeof(float));
        if ((k.status = bwd(m, &hb->out[s], dr, dh, h, n))) goto done;
        to_joint(&d, s, dside[SO], dr, d.own[s]);
    }
    if ((k.status = side_attend_backward(m->pool, &as, NULL, sv, SQ, dside[SQ], dside[SK], dside[SV], dside[SO], D)))
        goto done;
    zero_padding_keys(&d, dside[SK]);
    rope_image(m, &d, dside[SQ], true);
    rope_image(m, &d, dside[SK], true);
    for (int s = 0; s < d.n; s++) { /* back through the q/k norms, q, k, v and the first modulation */
        const int64_t n = d.inrows[s], ND = n * D, own = d.own[s];
        const float *mod = sv->mod[0] + 6 * s * D;
        stream_input(hb, &d, s, r, in->t[s]);
        if ((k.status = ln_modulate(m, &d, s, d.in[s], h, ln, r, sv->mod[0], 0, &stats))) goto done;
        zero_bytes(dh, (size_t)ND * sizeof(float));
        const struct {
            int side, raw, norm;
            const lin_layer *l;
        } qk[2] = {{SQ, SQR, hb->nq[s], &hb->q[s]}, {SK, SKR, hb->nk[s], &hb->k[s]}};
        for (int i = 0; i < 2; i++) {
            op_state qs = {0};
            from_joint(&d, s, dr, sv->side[qk[i].raw], d.in[s]);
            from_joint(&d, s, t, dside[qk[i].side], d.in[s]);
            if ((k.status = rmsnorm_forward(m->pool, u, dr, W(qk[i].norm), n, D, HD_RMS_EPS, &qs))) goto done;
            zero_bytes(u, (size_t)ND * sizeof(float));
            rmsnorm_backward(u, G(qk[i].norm), t, dr, W(qk[i].norm), n, D, &qs);
            op_state_release(&qs);
            if ((k.status = bwd(m, qk[i].l, dh, u, h, n))) goto done;
        }
        from_joint(&d, s, t, dside[SV], d.in[s]);
        if ((k.status = bwd(m, &hb->v[s], dh, t, h, n))) goto done;
        zero_bytes(t, (size_t)ND * sizeof(float));
        ln_modulate_backward(t, dmod + 6 * s * D, dmod + (6 * s + 1) * D, dr, dh, ln, r, mod + D, d.B, d.in[s], D, d.MS,
                             &stats);
        copy_rows(dh, own * D, t, d.in[s] * D, d.B, own * D);
        add_to(grad->t[s], dh, d.rows[s] * D);
        float *dl = d.in[s] > own ? hd_llama(m, hb->index, true) : NULL;
        if (dl) {
            copy_rows(dh, d.Ll * D, t + own * D, d.in[s] * D, d.B, d.Ll * D);
            add_to(dl, dh, d.B * d.Ll * D);
        }
    }
    k.status = bwd(m, &hb->ada, m->ctx.dcs, dmod, m->ctx.cs, d.B);
done:
    op_state_release(&stats);
    return scratch_end(&k);
}

const block_kind hd_double_kind = {
    SIDE_BLOCK_KIND("hidream double", hd_kept_bytes, hd_offloaded_bytes, hd_forward, hd_backward)};

const block_kind hd_single_kind = {
    SIDE_BLOCK_KIND("hidream single", hd_kept_bytes, hd_offloaded_bytes, hd_forward, hd_backward)};
