/* The dual-stream blocks: diffusers' FluxTransformerBlock and SD3's JointTransformerBlock (the double block, with
 * mm_block's options), and FluxSingleTransformerBlock:
 *
 * double, per stream s (image, text), from SiLU(c):
 *   (shift1, scale1, gate1, shift2, scale2, gate2) = norm1[_context].linear(SiLU(c))
 *   h_s = LN(x_s) * (1 + scale1) + shift1;  q_s, k_s, v_s = to_q/k/v(h_s);  q_s, k_s = RMSNorm per head (qk_norm)
 *   joint attention over [text; image] tokens, rotary embedding (Flux) on q and k by position ids
 *   x1_s = x_s + gate1 * to_out_s(attention rows of s)
 *   dual (image): x1 += gate3 * attn2.to_out(attention(q, k, v of attn2(LN(x) * (1 + scale3) + shift3)))
 *   y_s = x1_s + gate2 * ff2(gelu(ff1(LN(x1_s) * (1 + scale2) + shift2)))
 *   context_pre_only: the text stream's (scale1, shift1) only, its q, k, v into the joint attention, no y_text.
 * single, on the joint sequence:
 *   (shift, scale, gate) = norm.linear(SiLU(c));  h = LN(x) * (1 + scale) + shift
 *   y = x + gate * proj_out([attention(q/k/v(h)); gelu(proj_mlp(h))])
 *
 * The attention side (joint q, k, v after normalisation and rotation, the attention output and its kept state,
 * q and k before normalisation, and the same of attn2 on the image rows) is what attention offload moves to the
 * host. A block allocates its buffers in bulk at the start of forward and of backward. Recompute runs the same
 * kernels on the same inputs, so its values are bitwise forward's. Attention is permutation-equivariant, so
 * SD3's [image; text] order is the same function as the [text; image] used here. */
#include "models/core/attn_side.h"
#include "models/dual/mmdit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mm_dims mm_dims_of(const struct model *m)
{
    const model_shape *s = &m->shape;
    mm_dims d = {.B = s->batch, .T = s->tokens, .L = s->text, .D = s->hidden, .H = s->heads, .n = 2};
    d.S = d.L + d.T;
    d.hd = d.D / d.H;
    d.J = d.B * d.S;
    d.len[0] = d.T, d.len[1] = d.L;
    d.rows[0] = d.B * d.T, d.rows[1] = d.B * d.L;
    d.offset[0] = d.L, d.offset[1] = 0;
    return d;
}

mm_dims mm_joined(const mm_dims *d)
{
    mm_dims j = *d;
    j.n = 1, j.len[0] = d->S, j.rows[0] = d->J, j.offset[0] = 0;
    j.len[1] = j.rows[1] = j.offset[1] = 0;
    return j;
}

int64_t mm_rows_max(const mm_dims *d) { return d->rows[0] > d->rows[1] ? d->rows[0] : d->rows[1]; }

void mm_to_joint(const mm_dims *d, int s, float *joint, const float *x)
{
    const int64_t n = d->len[s] * d->D;
    copy_rows(joint + d->offset[s] * d->D, d->S * d->D, x, n, d->B, n);
}

void mm_from_joint(const mm_dims *d, int s, float *x, const float *joint)
{
    const int64_t n = d->len[s] * d->D;
    copy_rows(x, n, joint + d->offset[s] * d->D, d->S * d->D, d->B, n);
}

/* ---- a block's options ---- */

/* Streams with an output (and an output projection and MLP): the text stream's ends in a context_pre_only block. */
static int outputs(const mm_block *mb) { return mb->context_pre_only ? 1 : 2; }

/* A stream's modulation width in D: 6, the image's 9 with dual attention, the text's 2 in a context_pre_only block. */
static int64_t mod_width(const mm_block *mb, int s) { return s ? (mb->context_pre_only ? 2 : 6) : (mb->dual ? 9 : 6); }

/* Floats between two samples' modulation vectors: the block's own (B, width D) buffer, or (model_mod) the
 * model's (B, mod_rows, D) rows. */
static int64_t mod_stride(const mm_block *mb, int64_t width)
{
    return (mb->model_mod ? mb->m->ctx.mod_rows : width) * mb->m->shape.hidden;
}

static mm_qkv qkv_of(const mm_stream *s) { return (mm_qkv){&s->q, &s->k, &s->v, s->norm_q, s->norm_k}; }

static bool side_used(const mm_block *mb, int i)
{
    if (i > XKR || (i >= XQ && !mb->dual)) return false;
    return mb->qk_norm || (i != SQR && i != SKR && i != XQR && i != XKR);
}

static int64_t side_rows(const mm_dims *d, int i) { return i >= XQ ? d->rows[0] : d->J; }

/* ---- registration: diffusers' names ---- */

static const mm_names flux_names = {{
    {"norm1.linear", "attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "ff.net.0.proj", "ff.net.2", "attn.norm_q",
     "attn.norm_k"},
    {"norm1_context.linear", "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out",
     "ff_context.net.0.proj", "ff_context.net.2", "attn.norm_added_q", "attn.norm_added_k"},
    {NULL, "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0", NULL, NULL, "attn2.norm_q", "attn2.norm_k"}}};

const mm_names mm_qwen_names = {{
    {"img_mod.1", "attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "img_mlp.net.0.proj", "img_mlp.net.2",
     "attn.norm_q", "attn.norm_k"},
    {"txt_mod.1", "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out", "txt_mlp.net.0.proj",
     "txt_mlp.net.2", "attn.norm_added_q", "attn.norm_added_k"},
    {NULL}}};

void mm_double_register(param_set *ps, mm_block *b, int i, const model_config *c)
{
    char p[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "transformer_blocks.%d", i);
    const int64_t D = c->hidden, hd = D / c->heads;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    const mm_names *names = b->names ? b->names : &flux_names;
    for (int s = 0; s < 3; s++) {
        if (s == 2 && !b->dual) break;
        mm_stream *st = s < 2 ? &b->s[s] : &b->x;
        const char *const *n = names->stream[s];
        *st = (mm_stream){.norm_q = -1, .norm_k = -1};
        if (s < 2 && !b->model_mod) st->ada = block_linear(ps, p, n[0], D, mod_width(b, s) * D, true, 0, c);
        st->q = block_linear(ps, p, n[1], D, D, true, ra, c);
        st->k = block_linear(ps, p, n[2], D, D, true, ra, c);
        st->v = block_linear(ps, p, n[3], D, D, true, ra, c);
        if (s == 2 || s < outputs(b)) st->out = block_linear(ps, p, n[4], D, D, true, ra, c);
        if (s < outputs(b)) {
            st->mlp1 = block_linear(ps, p, n[5], D, 4 * D, true, rm, c);
            st->mlp2 = block_linear(ps, p, n[6], 4 * D, D, true, rm, c);
        }
        if (b->qk_norm) {
            st->norm_q = block_norm(ps, p, n[7], hd, c);
            st->norm_k = block_norm(ps, p, n[8], hd, c);
        }
    }
}

void mm_single_register(param_set *ps, mm_block *b, int i, const model_config *c)
{
    char p[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "single_transformer_blocks.%d", i);
    const int64_t D = c->hidden, hd = D / c->heads;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    mm_stream *st = &b->s[0];
    if (!b->model_mod) st->ada = block_linear(ps, p, "norm.linear", D, 3 * D, true, 0, c);
    st->q = block_linear(ps, p, "attn.to_q", D, D, true, ra, c);
    st->k = block_linear(ps, p, "attn.to_k", D, D, true, ra, c);
    st->v = block_linear(ps, p, "attn.to_v", D, D, true, ra, c);
    st->mlp1 = block_linear(ps, p, "proj_mlp", D, 4 * D, true, rm, c);
    st->out = block_linear(ps, p, "proj_out", 5 * D, D, true, rm, c);
    st->norm_q = block_norm(ps, p, "attn.norm_q", hd, c);
    st->norm_k = block_norm(ps, p, "attn.norm_k", hd, c);
}

/* ---- shared pieces ---- */

#define W(i) (param_at(m->params, (i))->w)
#define G(i) (param_at(m->params, (i))->g)

attn_shape mm_joint_attn(const mm_dims *d, attention_mechanism mech)
{
    return (attn_shape){.batch = d->B, .tokens = d->S, .heads = d->H, .head_dim = d->hd, .mechanism = mech};
}

/* attn2's: self-attention of each sample's image tokens */
static attn_shape image_attn(const mm_dims *d, attention_mechanism mech)
{
    return (attn_shape){.batch = d->B, .tokens = d->T, .heads = d->H, .head_dim = d->hd, .mechanism = mech};
}

/* Rotary embedding of joint q or k, every token by its position ids (Flux's text tokens, at zero, stay as they
 * are, bit for bit); none without a table (SD3). */
void mm_rope_joint(const struct model *m, const mm_dims *d, float *x, bool backward)
{
    if (!m->ctx.rope) return;
    void (*turn)(float *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const float *) =
        backward ? rope_backward : rope_forward;
    if (!m->ctx.rope_sample) {
        turn(x, d->B, d->S, d->H, d->hd, d->D, d->S * d->D, m->ctx.rope);
        return;
    }
    for (int64_t b = 0; b < d->B; b++) /* each sample's own table */
        turn(x + b * d->S * d->D, 1, d->S, d->H, d->hd, d->D, d->S * d->D, m->ctx.rope + b * m->ctx.rope_sample);
}

/* The joint row of q or k from a stream's raw rows: RMSNorm per head (without qk_norm a copy), written where the
 * rows sit in the joint sequence. No kept state: backward recomputes the statistics. */
st_status mm_rms_to_joint(const struct model *m, const mm_dims *d, int s, float *joint, const float *raw, int w)
{
    const int64_t n = d->len[s];
    if (w < 0) {
        mm_to_joint(d, s, joint, raw);
        return ST_OK;
    }
    st_status st = ST_OK;
    for (int64_t b = 0; b < d->B && !st; b++)
        st = rmsnorm_forward(m->pool, joint + (b * d->S + d->offset[s]) * d->D, raw + b * n * d->D, W(w), n * d->H,
                             d->hd, MMDIT_RMS_EPS, NULL);
    return st;
}

/* dL/draw += RMSNorm backward over rows (rows, D) of g, the gradient after the norm (without qk_norm g itself);
 * tmp is a (rows, D) buffer. */
st_status mm_rms_back(const struct model *m, const mm_dims *d, int64_t rows, float *draw, const float *g, const float *raw,
                      int w, float *tmp)
{
    if (w < 0) {
        add_to(draw, g, rows * d->D);
        return ST_OK;
    }
    op_state stats = {0};
    st_status st = rmsnorm_forward(m->pool, tmp, raw, W(w), rows * d->H, d->hd, MMDIT_RMS_EPS, &stats);
    if (st) return st;
    rmsnorm_backward(draw, G(w), g, raw, W(w), rows * d->H, d->hd, &stats);
    op_state_release(&stats);
    return ST_OK;
}

st_status mm_qkv_forward(const struct model *m, const mm_dims *d, int s, mm_qkv p, block_saved *sv, float *qr,
                         float *kr, const float *h, float *tmp)
{
    const int64_t n = d->rows[s];
    qr = qr ? qr : tmp, kr = kr ? kr : tmp;
    st_status st = fwd(m, p.q, qr, h, n);
    if (!st) st = mm_rms_to_joint(m, d, s, sv->side[SQ], qr, p.norm_q);
    if (!st) st = fwd(m, p.k, kr, h, n);
    if (!st) st = mm_rms_to_joint(m, d, s, sv->side[SK], kr, p.norm_k);
    if (!st) st = fwd(m, p.v, tmp, h, n);
    if (!st) mm_to_joint(d, s, sv->side[SV], tmp);
    return st;
}

st_status mm_qkv_backward(const struct model *m, const mm_dims *d, int s, mm_qkv p, float *const *dside,
                          const float *qr, const float *kr, const float *h, float *dh, float *dr, float *gs,
                          float *tmp)
{
    const int64_t n = d->rows[s];
    const struct {
        const lin_layer *l;
        const float *raw;
        int w, side;
    } qk[2] = {{p.q, qr, p.norm_q, SQ}, {p.k, kr, p.norm_k, SK}};
    st_status st = ST_OK;
    for (int i = 0; i < 2 && !st; i++) {
        mm_from_joint(d, s, gs, dside[qk[i].side]);
        zero_bytes(dr, (size_t)(n * d->D) * sizeof(float));
        st = mm_rms_back(m, d, n, dr, gs, qk[i].raw, qk[i].w, tmp);
        if (!st) st = bwd(m, qk[i].l, dh, dr, h, n);
    }
    if (!st) mm_from_joint(d, s, gs, dside[SV]);
    return st ? st : bwd(m, p.v, dh, gs, h, n);
}

/* h = LN(x) * (1 + scale) + shift (LayerNorm without affine, no kept statistics) */
static st_status ln_modulate(const struct model *m, float *h, const float *x, const float *shift, const float *scale,
                             int64_t batch, int64_t tokens, int64_t stride)
{
    const int64_t D = m->shape.hidden;
    st_status st = layernorm_forward(m->pool, h, x, NULL, NULL, batch * tokens, D, DIT_LN_EPS, NULL);
    if (!st) modulate_forward(h, h, shift, scale, batch, tokens, D, stride);
    return st;
}

static size_t side_bytes(const mm_block *mb, const mm_dims *d, size_t elem)
{
    const struct model *m = mb->m;
    attn_shape as = mm_joint_attn(d, m->shape.mechanism), xs = image_attn(d, m->shape.mechanism);
    size_t floats = 0;
    for (int i = 0; i < SIDE_MAX; i++)
        if (side_used(mb, i)) floats += (size_t)(side_rows(d, i) * d->D);
    return floats * elem + attention_kept_bytes(&as) + (mb->dual ? attention_kept_bytes(&xs) : 0);
}

/* The joint attention of a block: from the side's q, k, v (rotated in place) into o, keeping attention's state
 * when backward or the host needs it (not in a recompute after KEEP_ATTENTION_OUTPUT: o and the state are kept);
 * and attn2's on the image rows. */
static st_status joint_attention(const struct model *m, const mm_dims *d, block_saved *sv, bool keep_state)
{
    attn_shape as = mm_joint_attn(d, m->shape.mechanism);
    mm_rope_joint(m, d, sv->side[SQ], false);
    mm_rope_joint(m, d, sv->side[SK], false);
    return side_attend(m->pool, &as, m->ctx.mask, sv, SQ, keep_state);
}

/* The side's sizes and its attention states, for side_take. */
static void take_side(frame *f, const mm_block *mb, block_saved *sv, const mm_dims *d)
{
    int64_t n[SIDE_MAX] = {0};
    for (int i = 0; i < SIDE_MAX; i++)
        if (side_used(mb, i)) n[i] = side_rows(d, i) * d->D;
    f->keep_xo = mb->dual; /* attn2 is a self-attention of the image: KEEP_ATTENTION_OUTPUT keeps it */
    side_take(f, sv, n, 1 + mb->dual);
}

/* ---- the double block ---- */

static size_t double_kept_bytes(const block *b, keep_level keep)
{
    const mm_block *mb = b->self;
    mm_dims d = mm_dims_of(mb->m);
    const attn_shape as = mm_joint_attn(&d, mb->m->shape.mechanism), xs = image_attn(&d, mb->m->shape.mechanism);
    if (keep == KEEP_ATTENTION_OUTPUT && mb->dual) /* attn2 is a self-attention: its output is kept too */
        return side_output_bytes(&as, side_elem(mb->m)) + side_output_bytes(&xs, side_elem(mb->m));
    const int64_t out_rows = d.rows[0] + (outputs(mb) > 1 ? d.rows[1] : 0);
    const int64_t mods = mb->model_mod ? 0 : mod_width(mb, 0) + mod_width(mb, 1);
    int64_t floats = d.B * mods * d.D + out_rows * d.D; /* mods, projections */
    if (mb->dual) floats += d.rows[0] * d.D;            /* attn2's */
    return side_block_kept_bytes(side_bytes(mb, &d, side_elem(mb->m)), as, keep, floats, 5 * out_rows * d.D,
                                 side_elem(mb->m));
}

/* SD3's last block takes both streams and gives the image's alone. */
static void double_states(const block *b, state_map *out)
{
    const mm_block *mb = b->self;
    mm_dims d = mm_dims_of(mb->m);
    *out = (state_map){.n_in = 2, .n_out = outputs(mb)};
    for (int k = 0; k < 2; k++) out->in_numel[k] = d.rows[k] * d.D;
    for (int k = 0; k < out->n_out; k++) out->out_numel[k] = d.rows[k] * d.D, out->out_from[k] = -1 - k;
}

/* A stream's first modulation: its adaLN-Zero (shift, scale), or the text's (scale, shift) in a context_pre_only
 * block (AdaLayerNormContinuous). */
static const float *shift1(const mm_block *mb, int s, const float *mod, int64_t D)
{
    return s && mb->context_pre_only ? mod + D : mod;
}

static const float *scale1(const mm_block *mb, int s, const float *mod, int64_t D)
{
    return s && mb->context_pre_only ? mod : mod + D;
}

/* attn2 (dual attention) from LN(x) * (1 + scale3) + shift3 of the image stream x, a (B T, D) buffer */
static st_status attn2_forward(const mm_block *mb, const mm_dims *d, const float *x, block_saved *sv, float *a,
                               bool keep_state)
{
    const struct model *m = mb->m;
    const int64_t D = d->D, n = d->rows[0];
    const mm_stream *x2 = &mb->x;
    const bool norm = mb->qk_norm;
    attn_shape xs = image_attn(d, m->shape.mechanism);
    st_status st = ln_modulate(m, a, x, sv->mod[0] + 6 * D, sv->mod[0] + 7 * D, d->B, d->T, 9 * D);
    if (!st) st = fwd(m, &x2->q, sv->side[norm ? XQR : XQ], a, n);
    if (!st) st = fwd(m, &x2->k, sv->side[norm ? XKR : XK], a, n);
    if (!st) st = fwd(m, &x2->v, sv->side[XV], a, n);
    if (!st && norm)
        st = rmsnorm_forward(m->pool, sv->side[XQ], sv->side[XQR], W(x2->norm_q), n * d->H, d->hd, MMDIT_RMS_EPS, NULL);
    if (!st && norm)
        st = rmsnorm_forward(m->pool, sv->side[XK], sv->side[XKR], W(x2->norm_k), n * d->H, d->hd, MMDIT_RMS_EPS, NULL);
    return st ? st : side_attend(m->pool, &xs, NULL, sv, XQ, keep_state);
}

static st_status double_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                                block_saved **saved_io)
{
    mm_block *mb = b->self;
    const struct model *m = mb->m;
    mm_dims d = mm_dims_of(m);
    const int64_t D = d.D, Nmax = mm_rows_max(&d);
    const int ns = outputs(mb);
    frame f;
    block_saved *sv = frame_begin(&f, b, m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y[2] = {NULL, NULL};
    for (int s = 0; s < ns; s++) y[s] = scratch_take(&f.kept, d.rows[s] * D, MEM_ACTIVATIONS, "mmdit.state");
    take_side(&f, mb, sv, &d);
    for (int s = 0; s < 2; s++) {
        sv->mod[s] = mb->model_mod ? m->ctx.mod + mb->mod_row[s] * D
                                   : scratch_take(f.ks, d.B * mod_width(mb, s) * D, f.kt, "mmdit.mod");
        if (s >= ns) continue;
        sv->o[s] = scratch_take(f.ks, d.rows[s] * D, f.kt, "mmdit.out");
        sv->f1[s] = scratch_take(f.fs, d.rows[s] * 4 * D, f.ft, "mmdit.ff1");
        sv->f2[s] = scratch_take(f.fs, d.rows[s] * D, f.ft, "mmdit.ff2");
    }
    if (mb->dual) sv->o2 = scratch_take(f.ks, d.rows[0] * D, f.kt, "mmdit.out2");
    float *a = scratch_take(&f.tmp, Nmax * D, MEM_WORKSPACE, "mmdit.h");
    float *g = scratch_take(&f.tmp, Nmax * 4 * D, MEM_WORKSPACE, "mmdit.gelu");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;

    sv->mod_borrowed = mb->model_mod;
    for (int s = 0; s < 2 && !st && !mb->model_mod; s++) st = fwd(m, &mb->s[s].ada, sv->mod[s], m->ctx.cs, d.B);
    if (!st && f.from_host) st = side_back(sv);
    for (int s = 0; s < 2 && !st && !f.from_host; s++) {
        const mm_stream *ms = &mb->s[s];
        const int64_t mw = mod_stride(mb, mod_width(mb, s));
        /* q and k before RMSNorm: the raw side, or (no qk_norm) NULL, the transient g */
        float *qr = mb->qk_norm ? sv->side[SQR] + (s ? d.rows[0] * D : 0) : NULL;
        float *kr = mb->qk_norm ? sv->side[SKR] + (s ? d.rows[0] * D : 0) : NULL;
        st = ln_modulate(m, a, in->t[s], shift1(mb, s, sv->mod[s], D), scale1(mb, s, sv->mod[s], D), d.B,
                         d.len[s], mw);
        if (!st) st = mm_qkv_forward(m, &d, s, qkv_of(ms), sv, qr, kr, a, g);
    }
    const bool keep_state = keep != KEEP_NOTHING || f.to_host;
    if (!st && !f.from_host) st = joint_attention(m, &d, sv, keep_state);
    if (!st && !f.from_host && mb->dual) st = attn2_forward(mb, &d, in->t[0], sv, a, keep_state);
    if (!st && f.to_host) st = side_send(sv);
    for (int s = 0; s < ns && !st; s++) {
        const int64_t mw = mod_stride(mb, mod_width(mb, s));
        mm_from_joint(&d, s, a, sv->side[SO]);
        st = fwd(m, &mb->s[s].out, sv->o[s], a, d.rows[s]);
        if (!st) gated_residual_forward(y[s], in->t[s], sv->mod[s] + 2 * D, sv->o[s], d.B, d.len[s], D, mw);
        if (!st && s == 0 && mb->dual) st = fwd(m, &mb->x.out, sv->o2, sv->side[XO], d.rows[0]);
        if (!st && s == 0 && mb->dual) gated_residual_forward(y[0], y[0], sv->mod[0] + 8 * D, sv->o2, d.B, d.T, D, mw);
    }
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    for (int s = 0; s < ns && !st; s++) {
        const mm_stream *ms = &mb->s[s];
        const int64_t n = d.rows[s], mw = mod_stride(mb, mod_width(mb, s));
        st = ln_modulate(m, a, y[s], sv->mod[s] + 3 * D, sv->mod[s] + 4 * D, d.B, d.len[s], mw);
        if (!st) st = fwd(m, &ms->mlp1, sv->f1[s], a, n);
        if (!st) gelu_forward(g, sv->f1[s], n * 4 * D);
        if (!st) st = fwd(m, &ms->mlp2, sv->f2[s], g, n);
        if (!st) gated_residual_forward(y[s], y[s], sv->mod[s] + 5 * D, sv->f2[s], d.B, d.len[s], D, mw);
    }
    if (!st) *out = (block_state){.n = ns, .t = {y[0], y[1]}};
    return frame_end(&f, st, sv, saved_io, y, ns);
}

/* double_backward's buffers, taken in one go: the modulation gradients, (N, D) and (N, 4D) workspaces, the joint
 * gradients of q, k, v and o and attn2's, and the MLP recomputed when forward kept none. */
typedef struct double_ws {
    float *dmod[2], *x1, *a, *a2, *da, *g, *dg, *df;
    float *dside[4], *dx2[4]; /* joint dq, dk, dv, do; attn2's */
    float *rf1, *rf2;         /* the MLP's outputs recomputed, or NULL where forward kept them */
    op_state stats;
    size_t ND, N4D; /* the bytes of an (N, D) and an (N, 4D) workspace */
} double_ws;

static void double_ws_take(scratch *k, const mm_block *mb, const mm_dims *d, const block_saved *sv, double_ws *w)
{
    const struct model *m = mb->m;
    const int64_t D = d->D, N = mm_rows_max(d), JD = d->J * D, XD = d->rows[0] * D;
    *w = (double_ws){.ND = (size_t)N * D * sizeof(float)};
    w->N4D = 4 * w->ND;
    for (int s = 0; s < 2; s++) /* Chroma's accumulate into the model's rows, for its approximator */
        w->dmod[s] = mb->model_mod ? m->ctx.dmod + mb->mod_row[s] * D
                                   : scratch_take_zero(k, d->B * mod_width(mb, s) * D, MEM_WORKSPACE, "mmdit.dmod");
    w->x1 = scratch_take(k, N * D, MEM_WORKSPACE, "mmdit.x1");
    w->a = scratch_take(k, N * D, MEM_WORKSPACE, "mmdit.a");
    w->a2 = scratch_take(k, N * D, MEM_WORKSPACE, "mmdit.a2");
    w->da = scratch_take(k, N * D, MEM_WORKSPACE, "mmdit.da");
    w->g = scratch_take(k, N * 4 * D, MEM_WORKSPACE, "mmdit.g");
    w->dg = scratch_take(k, N * 4 * D, MEM_WORKSPACE, "mmdit.dg");
    w->df = scratch_take(k, N * 4 * D, MEM_WORKSPACE, "mmdit.df");
    for (int i = 0; i < 4; i++) w->dside[i] = scratch_take_zero(k, JD, MEM_WORKSPACE, "mmdit.dside");
    for (int i = 0; mb->dual && i < 4; i++) w->dx2[i] = scratch_take_zero(k, XD, MEM_WORKSPACE, "mmdit.dside2");
    if (!sv->f1[0]) {
        w->rf1 = scratch_take(k, N * 4 * D, MEM_WORKSPACE, "mmdit.ff1 (recomputed)");
        w->rf2 = scratch_take(k, N * D, MEM_WORKSPACE, "mmdit.ff2 (recomputed)");
    }
}

/* Stream s from its output back: the MLP half (recomputed when forward kept none), attn2's gated output and
 * projection (the image stream of a dual block), then the output projection into dside[SO]; gx is the stream's
 * gradient, in and out. */
static st_status double_back_out(const mm_block *mb, const mm_dims *d, const block_state *in, block_saved *sv,
                                 float *gx, int s, double_ws *w)
{
    const struct model *m = mb->m;
    const mm_stream *ms = &mb->s[s];
    const int64_t D = d->D, n = d->rows[s], t = d->len[s], mw = mod_stride(mb, mod_width(mb, s));
    const float *mod = sv->mod[s], *f1 = sv->f1[s], *f2 = sv->f2[s];
    float *x1 = w->x1, *a = w->a, *a2 = w->a2, *da = w->da, *g = w->g, *dg = w->dg, *df = w->df, *dmod = w->dmod[s];
    st_status st;
    gated_residual_forward(x1, in->t[s], mod + 2 * D, sv->o[s], d->B, t, D, mw);
    if (s == 0 && mb->dual) gated_residual_forward(x1, x1, mod + 8 * D, sv->o2, d->B, t, D, mw);
    if (w->rf1) {
        if ((st = ln_modulate(m, a, x1, mod + 3 * D, mod + 4 * D, d->B, t, mw)) ||
            (st = fwd(m, &ms->mlp1, w->rf1, a, n)))
            return st;
        gelu_forward(g, w->rf1, n * 4 * D);
        if ((st = fwd(m, &ms->mlp2, w->rf2, g, n))) return st;
        f1 = w->rf1, f2 = w->rf2;
    }
    zero_bytes(da, w->ND);
    gated_residual_backward(gx, dmod + 5 * D, da, gx, mod + 5 * D, f2, d->B, t, D, mw);
    gelu_forward(g, f1, n * 4 * D);
    zero_bytes(dg, w->N4D);
    if ((st = bwd(m, &ms->mlp2, dg, da, g, n))) return st;
    zero_bytes(df, w->N4D);
    gelu_backward(df, dg, f1, n * 4 * D);
    if ((st = layernorm_forward(m->pool, a, x1, NULL, NULL, n, D, DIT_LN_EPS, &w->stats))) return st;
    modulate_forward(a2, a, mod + 3 * D, mod + 4 * D, d->B, t, D, mw);
    zero_bytes(da, w->ND);
    if ((st = bwd(m, &ms->mlp1, da, df, a2, n))) return st;
    ln_modulate_backward(gx, dmod + 3 * D, dmod + 4 * D, a2, da, a, x1, mod + 4 * D, d->B, t, D, mw, &w->stats);
    if (s == 0 && mb->dual) { /* attn2's gated output, then its projection */
        zero_bytes(da, w->ND);
        gated_residual_backward(gx, dmod + 8 * D, da, gx, mod + 8 * D, sv->o2, d->B, t, D, mw);
        if ((st = bwd(m, &mb->x.out, w->dx2[SO], da, sv->side[XO], n))) return st;
    }
    zero_bytes(da, w->ND);
    gated_residual_backward(gx, dmod + 2 * D, da, gx, mod + 2 * D, sv->o[s], d->B, t, D, mw);
    mm_from_joint(d, s, a, sv->side[SO]);
    zero_bytes(a2, w->ND);
    if ((st = bwd(m, &ms->out, a2, da, a, n))) return st;
    mm_to_joint(d, s, w->dside[SO], a2);
    return ST_OK;
}

/* The joint attention's backward into dside (a context_pre_only block drops the text rows' attention output:
 * their gradient stays zero), attn2's into dx2, then the rotation's on dq and dk. */
static st_status double_back_attention(const mm_block *mb, const mm_dims *d, block_saved *sv, double_ws *w)
{
    const struct model *m = mb->m;
    const attn_shape as = mm_joint_attn(d, m->shape.mechanism), xs = image_attn(d, m->shape.mechanism);
    float *const *ds = w->dside, *const *dx2 = w->dx2;
    st_status st = side_attend_backward(m->pool, &as, m->ctx.mask, sv, SQ, ds[SQ], ds[SK], ds[SV], ds[SO], d->D);
    if (!st && mb->dual)
        st = side_attend_backward(m->pool, &xs, NULL, sv, XQ, dx2[SQ], dx2[SK], dx2[SV], dx2[SO], d->D);
    if (st) return st;
    mm_rope_joint(m, d, ds[SQ], true);
    mm_rope_joint(m, d, ds[SK], true);
    return ST_OK;
}

/* attn2's input is LN(x) (in a) modulated by (shift3, scale3): back through its q, k, v into dh, then into dr
 * and the modulation's gradient. h, dh and gs are (N, D) workspaces. */
static st_status attn2_backward(const mm_block *mb, const mm_dims *d, block_saved *sv, double_ws *w, float *h,
                                float *dh, float *dr, float *gs)
{
    const struct model *m = mb->m;
    const mm_stream *x2 = &mb->x;
    const int64_t D = d->D, n = d->rows[0], t = d->T, mw = mod_stride(mb, mod_width(mb, 0));
    const float *mod = sv->mod[0];
    st_status st;
    modulate_forward(h, w->a, mod + 6 * D, mod + 7 * D, d->B, t, D, mw);
    zero_bytes(dh, w->ND);
    const struct {
        int i, raw, w;
        const lin_layer *l;
    } qk[2] = {{SQ, XQR, x2->norm_q, &x2->q}, {SK, XKR, x2->norm_k, &x2->k}};
    for (int j = 0; j < 2; j++) {
        zero_bytes(gs, w->ND);
        if ((st = mm_rms_back(m, d, n, gs, w->dx2[qk[j].i], sv->side[qk[j].raw], qk[j].w, w->da)) ||
            (st = bwd(m, qk[j].l, dh, gs, h, n)))
            return st;
    }
    if ((st = bwd(m, &x2->v, dh, w->dx2[SV], h, n))) return st;
    modulate_backward(dr, w->dmod[0] + 6 * D, w->dmod[0] + 7 * D, dh, w->a, mod + 7 * D, d->B, t, D, mw);
    return ST_OK;
}

/* Stream s from the joint q, k, v gradients back: through its q, k, v (and attn2's), the first modulation, the
 * LayerNorm into gx, and its adaLN-Zero linear. */
static st_status double_back_input(const mm_block *mb, const mm_dims *d, const block_state *in, block_saved *sv,
                                   float *gx, int s, double_ws *w)
{
    const struct model *m = mb->m;
    const mm_stream *ms = &mb->s[s];
    const int64_t D = d->D, n = d->rows[s], t = d->len[s], mw = mod_stride(mb, mod_width(mb, s));
    const float *mod = sv->mod[s], *x = in->t[s];
    const int64_t at = s ? d->rows[0] * D : 0;
    const float *qr = mb->qk_norm ? sv->side[SQR] + at : NULL, *kr = mb->qk_norm ? sv->side[SKR] + at : NULL;
    float *a = w->a, *da = w->da, *h = w->x1, *dh = w->a2, *dr = w->dg, *gs = w->df;
    st_status st;
    if ((st = layernorm_forward(m->pool, a, x, NULL, NULL, n, D, DIT_LN_EPS, &w->stats))) return st;
    modulate_forward(h, a, shift1(mb, s, mod, D), scale1(mb, s, mod, D), d->B, t, D, mw);
    zero_bytes(dh, w->ND);
    if ((st = mm_qkv_backward(m, d, s, qkv_of(ms), w->dside, qr, kr, h, dh, dr, gs, da))) return st;
    zero_bytes(dr, w->ND);
    float *dshift = (float *)shift1(mb, s, w->dmod[s], D), *dscale = (float *)scale1(mb, s, w->dmod[s], D);
    modulate_backward(dr, dshift, dscale, dh, a, scale1(mb, s, mod, D), d->B, t, D, mw);
    if (s == 0 && mb->dual && (st = attn2_backward(mb, d, sv, w, h, dh, dr, gs))) return st;
    layernorm_backward(gx, NULL, NULL, dr, x, NULL, n, D, &w->stats);
    op_state_release(&w->stats);
    if (!mb->model_mod && (st = bwd(m, &ms->ada, m->ctx.dcs, w->dmod[s], m->ctx.cs, d->B))) return st;
    return ST_OK;
}

static st_status double_backward(block *b, const block_state *in, block_saved *sv, block_state *grad)
{
    mm_block *mb = b->self;
    const struct model *m = mb->m;
    mm_dims d = mm_dims_of(m);
    const int ns = outputs(mb);
    scratch k = side_scratch(m->pool, sv);
    if (!k.status && ns == 1) { /* the text stream's gradient starts here, from its q, k and v alone */
        float *gt = NULL;
        st_status st = pool_alloc_zero(m->pool, (size_t)(d.rows[1] * d.D) * sizeof(float), MEM_ACTIVATIONS,
                                       "mmdit.dtext", (void **)&gt);
        if (st) return st;
        grad->t[grad->n++] = gt;
    }
    double_ws w;
    double_ws_take(&k, mb, &d, sv, &w);
    if (k.status) goto done;
    for (int s = 0; s < ns; s++) /* the MLP halves, then the output projections */
        if ((k.status = double_back_out(mb, &d, in, sv, grad->t[s], s, &w))) goto done;
    if ((k.status = double_back_attention(mb, &d, sv, &w))) goto done;
    for (int s = 0; s < 2; s++) /* back through q, k, v (and attn2's) and the first modulations */
        if ((k.status = double_back_input(mb, &d, in, sv, grad->t[s], s, &w))) goto done;
done:
    op_state_release(&w.stats);
    return scratch_end(&k);
}

/* ---- the single block ---- */

static size_t single_kept_bytes(const block *b, keep_level keep)
{
    const mm_block *mb = b->self;
    mm_dims d = mm_dims_of(mb->m);
    const int64_t floats = d.B * (mb->model_mod ? 0 : 3) * d.D + d.J * d.D; /* mod, output projection */
    return side_block_kept_bytes(side_bytes(mb, &d, side_elem(mb->m)), mm_joint_attn(&d, mb->m->shape.mechanism),
                                 keep, floats, 4 * d.J * d.D, side_elem(mb->m));
}

/* c = [o, gelu(m1)] row by row: proj_out's input (serial: gelu_forward is an op with its own threads) */
static void concat_rows(const mm_dims *d, float *c, const float *o, const float *m1)
{
    const int64_t D = d->D;
    copy_rows(c, 5 * D, o, D, d->J, D);
    for (int64_t r = 0; r < d->J; r++) gelu_forward(c + r * 5 * D + D, m1 + r * 4 * D, 4 * D);
}

static st_status single_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                                block_saved **saved_io)
{
    mm_block *mb = b->self;
    const struct model *m = mb->m;
    const mm_stream *ms = &mb->s[0];
    mm_dims d = mm_dims_of(m);
    const int64_t D = d.D, J = d.J;
    const float *x = in->t[0];
    frame f;
    block_saved *sv = frame_begin(&f, b, m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y = scratch_take(&f.kept, J * D, MEM_ACTIVATIONS, "mmdit.state");
    take_side(&f, mb, sv, &d);
    const int64_t ms3 = mod_stride(mb, 3);
    sv->mod[0] = mb->model_mod ? m->ctx.mod + mb->mod_row[0] * D : scratch_take(f.ks, d.B * 3 * D, f.kt, "mmdit.mod");
    sv->mod_borrowed = mb->model_mod;
    sv->o[0] = scratch_take(f.ks, J * D, f.kt, "mmdit.out");
    sv->f1[0] = scratch_take(f.fs, J * 4 * D, f.ft, "mmdit.proj_mlp");
    float *h = scratch_take(&f.tmp, J * D, MEM_WORKSPACE, "mmdit.h");
    float *c = scratch_take(&f.tmp, J * 5 * D, MEM_WORKSPACE, "mmdit.concat");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;

    if (!st && !mb->model_mod) st = fwd(m, &ms->ada, sv->mod[0], m->ctx.cs, d.B);
    if (!st) st = ln_modulate(m, h, x, sv->mod[0], sv->mod[0] + D, d.B, d.S, ms3);
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) {
        st = fwd(m, &ms->q, sv->side[SQR], h, J);
        if (!st) st = fwd(m, &ms->k, sv->side[SKR], h, J);
        if (!st) st = fwd(m, &ms->v, sv->side[SV], h, J);
        if (!st) st = rmsnorm_forward(m->pool, sv->side[SQ], sv->side[SQR], W(ms->norm_q), J * d.H, d.hd, MMDIT_RMS_EPS, NULL);
        if (!st) st = rmsnorm_forward(m->pool, sv->side[SK], sv->side[SKR], W(ms->norm_k), J * d.H, d.hd, MMDIT_RMS_EPS, NULL);
        if (!st) st = joint_attention(m, &d, sv, keep != KEEP_NOTHING || f.to_host);
        if (!st && f.to_host) st = side_send(sv);
    }
    if (!st) st = fwd(m, &ms->mlp1, sv->f1[0], h, J);
    if (!st) concat_rows(&d, c, sv->side[SO], sv->f1[0]);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    if (!st) st = fwd(m, &ms->out, sv->o[0], c, J);
    if (!st) gated_residual_forward(y, x, sv->mod[0] + 2 * D, sv->o[0], d.B, d.S, D, ms3);
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

static st_status single_backward(block *b, const block_state *in, block_saved *sv, block_state *grad)
{
    mm_block *mb = b->self;
    const struct model *m = mb->m;
    const mm_stream *ms = &mb->s[0];
    mm_dims d = mm_dims_of(m);
    attn_shape as = mm_joint_attn(&d, m->shape.mechanism);
    const int64_t D = d.D, J = d.J, JD = J * D;
    const float *x = in->t[0];
    float *gx = grad->t[0];
    scratch k = side_scratch(m->pool, sv);
    const float *mod = sv->mod[0]; /* as side_scratch has widened it */
    const int64_t ms3 = mod_stride(mb, 3);
    float *dmod = mb->model_mod ? m->ctx.dmod + mb->mod_row[0] * D
                                : scratch_take_zero(&k, d.B * 3 * D, MEM_WORKSPACE, "mmdit.dmod");
    float *ln = scratch_take(&k, JD, MEM_WORKSPACE, "mmdit.ln");
    float *h = scratch_take(&k, JD, MEM_WORKSPACE, "mmdit.h");
    float *dh = scratch_take_zero(&k, JD, MEM_WORKSPACE, "mmdit.dh");
    float *c = scratch_take(&k, 5 * JD, MEM_WORKSPACE, "mmdit.concat");
    float *dc = scratch_take_zero(&k, 5 * JD, MEM_WORKSPACE, "mmdit.dconcat");
    float *dm = scratch_take(&k, 4 * JD, MEM_WORKSPACE, "mmdit.dgelu");
    float *dm1 = scratch_take_zero(&k, 4 * JD, MEM_WORKSPACE, "mmdit.dproj_mlp");
    float *dq = scratch_take_zero(&k, JD, MEM_WORKSPACE, "mmdit.dq");
    float *dk = scratch_take_zero(&k, JD, MEM_WORKSPACE, "mmdit.dk");
    float *dv = scratch_take_zero(&k, JD, MEM_WORKSPACE, "mmdit.dv");
    float *r = scratch_take(&k, JD, MEM_WORKSPACE, "mmdit.r");
    float *dr = scratch_take(&k, JD, MEM_WORKSPACE, "mmdit.dr");
    float *m1 = sv->f1[0] ? sv->f1[0] : scratch_take(&k, 4 * JD, MEM_WORKSPACE, "mmdit.proj_mlp (recomputed)");
    op_state stats = {0}, rstats = {0};
    if (k.status || (k.status = layernorm_forward(m->pool, ln, x, NULL, NULL, J, D, DIT_LN_EPS, &stats))) goto done;
    modulate_forward(h, ln, mod, mod + D, d.B, d.S, D, ms3);
    if (!sv->f1[0] && (k.status = fwd(m, &ms->mlp1, m1, h, J))) goto done;
    concat_rows(&d, c, sv->side[SO], m1);
    zero_bytes(dr, (size_t)JD * sizeof(float));
    gated_residual_backward(gx, dmod + 2 * D, dr, gx, mod + 2 * D, sv->o[0], d.B, d.S, D, ms3);
    if ((k.status = bwd(m, &ms->out, dc, dr, c, J))) goto done;
    copy_rows(dm, 4 * D, dc + D, 5 * D, J, 4 * D);
    gelu_backward(dm1, dm, m1, 4 * JD);
    if ((k.status = bwd(m, &ms->mlp1, dh, dm1, h, J))) goto done;
    if ((k.status = side_attend_backward(m->pool, &as, m->ctx.mask, sv, SQ, dq, dk, dv, dc, 5 * D))) goto done;
    mm_rope_joint(m, &d, dq, true);
    mm_rope_joint(m, &d, dk, true);
    const struct {
        float *g;
        const float *raw;
        int w;
        const lin_layer *l;
    } qk[2] = {{dq, sv->side[SQR], ms->norm_q, &ms->q}, {dk, sv->side[SKR], ms->norm_k, &ms->k}};
    for (int i = 0; i < 2; i++) {
        if ((k.status = rmsnorm_forward(m->pool, r, qk[i].raw, W(qk[i].w), J * d.H, d.hd, MMDIT_RMS_EPS, &rstats)))
            goto done;
        zero_bytes(dr, (size_t)JD * sizeof(float));
        rmsnorm_backward(dr, G(qk[i].w), qk[i].g, qk[i].raw, W(qk[i].w), J * d.H, d.hd, &rstats);
        op_state_release(&rstats);
        if ((k.status = bwd(m, qk[i].l, dh, dr, h, J))) goto done;
    }
    if ((k.status = bwd(m, &ms->v, dh, dv, h, J))) goto done;
    ln_modulate_backward(gx, dmod, dmod + D, dr, dh, ln, x, mod + D, d.B, d.S, D, ms3, &stats);
    if (!mb->model_mod) k.status = bwd(m, &ms->ada, m->ctx.dcs, dmod, m->ctx.cs, d.B);
done:
    op_state_release(&rstats);
    op_state_release(&stats);
    return scratch_end(&k);
}

static size_t mm_side_offloaded(const block *b)
{
    const mm_block *mb = b->self;
    mm_dims d = mm_dims_of(mb->m);
    return side_bytes(mb, &d, side_elem(mb->m));
}

const block_kind mm_double_kind = {
    SIDE_BLOCK_KIND("mmdit double", double_kept_bytes, mm_side_offloaded, double_forward, double_backward),
    .states = double_states};

const block_kind mm_single_kind = {
    SIDE_BLOCK_KIND("mmdit single", single_kept_bytes, mm_side_offloaded, single_forward, single_backward)};
