/* The gated-modules block (gated_block.h): diffusers' CosmosTransformerBlock (without image context or controlnet),
 * and Kandinsky5TransformerEncoderBlock (a text block: no cross-attention) and Kandinsky5TransformerDecoderBlock (a
 * visual block), without sparse attention; and SimpleTuner's LongCatSingleStreamBlock (LongCat-Video) by options:
 *
 *   mod = the family's hook          (module i's (shift_i, scale_i, gate_i) at i 3 D)
 *   x1 = x  + gate1 * out(self_attention(LN(x) (1 + scale1) + shift1))
 *   x2 = x1 + gate2 * out'(cross_attention(q' of LN(x1) (1 + scale2) + shift2; k', v' of the text))   (cross)
 *   x3 = x2 + gate3 * ff2(gelu_erf(ff0(LN(x2) (1 + scale3) + shift3)))
 *
 * LayerNorm without affine; q and k RMSNorm-ed per head in both attentions, the self-attention's rotated (Cosmos's
 * pairs rotate-half, Kandinsky 5's interleaved), the cross-attention's not; no key mask (Cosmos's text padding is
 * zero rows, attended; Kandinsky 5's text is unmasked); whether the linears have biases is their registration's.
 * LongCat-Video's (gated_block.h): q, k, v fused; x2 = x1 + out'(cross_attention(affine LN(x1))), two modules' rows
 * (6 D); x3 = x2 + gate * ff2(silu(ff0 h) * ff1 h) with h = LN(x2) (1 + scale) + shift.
 *
 * Forward keeps the modulations, the attentions' inputs (q, k and v after their norms and rotation, and the raw q and
 * k), outputs and states, the output projections, and with KEEP_ALL the feed-forward's two GEMM outputs; everything
 * pointwise is recomputed from those and the block's input with the same kernels, so bitwise as forward made it. The
 * text's keys and values are kept with the rest, as xdit_block.c keeps them. */
#include "models/xattn/gated_block.h"

#include "models/core/attn_side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* block_saved is attn_side.h's: the self-attention's side in SQ .. SKR with state 0 and output projection o[0], the
 * cross-attention's in XQ .. XKR with state 1 and o2, the modulations (B, M) in mod[0], the feed-forward's GEMM
 * outputs in f1[0] and f2[0]. */
enum { SELF = 0, CROSS = XQ };

typedef struct dims {
    int64_t B, T, L, D, N, NL, F, M; /* T: the block's own rows per sample; NL: the text's rows, B L; M: a sample's
                                        modulations */
    int ff;                          /* the feed-forward's module: 2 after a cross-attention, else 1 */
} dims;

/* the block's rows per sample */
static int64_t gated_block_rows(const gated_block *b) { return b->text_rows ? b->m->shape.text : b->m->shape.tokens; }

static dims dims_of(const gated_block *b)
{
    const model_shape *s = &b->m->shape;
    const int64_t T = gated_block_rows(b);
    const bool modulated_cross = b->cross && !b->plain_cross;
    return (dims){s->batch, T, s->text, s->hidden, s->batch * T, s->batch * s->text, b->ffn,
                  (modulated_cross ? 9 : 6) * s->hidden, modulated_cross ? 2 : 1};
}

static attn_shape self_shape(const gated_block *b)
{
    const model_shape *s = &b->m->shape;
    return (attn_shape){.batch = s->batch, .tokens = gated_block_rows(b), .heads = s->heads,
                        .head_dim = s->hidden / s->heads, .mechanism = s->mechanism};
}

static attn_shape cross_shape(const gated_block *b)
{
    attn_shape a = self_shape(b);
    a.kv_tokens = b->m->shape.text;
    return a;
}

/* ---- sizes ---- */

static size_t gated_side_bytes(const block *blk)
{
    const gated_block *b = blk->self;
    const size_t elem = side_elem(b->m);
    dims d = dims_of(b);
    const attn_shape ss = self_shape(b), cs = cross_shape(b);
    size_t n = (size_t)(6 * d.N * d.D) * elem + attention_kept_bytes(&ss);
    if (b->cross) n += (size_t)(3 * d.N * d.D + 3 * d.NL * d.D) * elem + attention_kept_bytes(&cs);
    return n;
}

/* beside the sides: the modulations and the output projections; with KEEP_ALL the feed-forward's two GEMM outputs */
static size_t gated_kept_bytes(const block *blk, keep_level keep)
{
    const gated_block *b = blk->self;
    dims d = dims_of(b);
    const size_t elem = side_elem(b->m);
    const int64_t ffn_kept = (b->swiglu ? 2 : 1) * d.N * d.F + d.N * d.D; /* f1 (and f3), f2 */
    return side_block_kept_bytes(gated_side_bytes(blk), self_shape(b), keep,
                                 d.B * d.M + (b->cross ? 2 : 1) * d.N * d.D, ffn_kept, elem);
}

/* ---- pieces run in forward and again in backward ---- */

/* h = LN(x) (1 + scale_i) + shift_i (stats kept when asked; ln, if not NULL, gets LN(x)) */
static st_status ln_modulate(const gated_block *b, float *h, float *ln, const float *x, const float *mod, int i,
                             op_state *stats)
{
    dims d = dims_of(b);
    float *y = ln ? ln : h;
    st_status st = layernorm_forward(b->m->pool, y, x, NULL, NULL, d.N, d.D, b->ln_eps, stats);
    if (!st) modulate_forward(h, y, mod + i * 3 * d.D, mod + i * 3 * d.D + d.D, d.B, d.T, d.D, d.M);
    return st;
}

/* dL/dh of a modulated LayerNorm back to gx (+=), the modulation's shift and scale into dmod */
static void ln_modulate_back(const gated_block *b, float *gx, float *dmod, float *dh, const float *ln, const float *x,
                             const float *mod, int i, op_state *stats)
{
    dims d = dims_of(b);
    const int64_t o = i * 3 * d.D;
    modulate_backward(dh, dmod + o, dmod + o + d.D, dh, ln, mod + o + d.D, d.B, d.T, d.D, d.M);
    layernorm_backward(gx, NULL, NULL, dh, x, NULL, d.N, d.D, stats);
}

/* the cross-attention's input h from x1: modulated by rows 1, or plain_cross's affine LayerNorm; back: gx += */
static st_status cross_input(const gated_block *b, float *h, float *ln, const float *x1, const float *mod,
                             op_state *stats)
{
    dims d = dims_of(b);
    param_set *ps = b->m->params;
    if (!b->plain_cross) return ln_modulate(b, h, ln, x1, mod, 1, stats);
    return layernorm_forward(b->m->pool, h, x1, param_at(ps, b->cross_norm_w)->w, param_at(ps, b->cross_norm_b)->w,
                             d.N, d.D, b->ln_eps, stats);
}

static void cross_input_back(const gated_block *b, float *gx, float *dmod, float *dh, const float *ln, const float *x1,
                             const float *mod, op_state *stats)
{
    dims d = dims_of(b);
    param_set *ps = b->m->params;
    if (!b->plain_cross) {
        ln_modulate_back(b, gx, dmod, dh, ln, x1, mod, 1, stats);
        return;
    }
    param *w = param_at(ps, b->cross_norm_w), *bias = param_at(ps, b->cross_norm_b);
    layernorm_backward(gx, w->g, bias->g, dh, x1, w->w, d.N, d.D, stats);
}

static void rotate_side(const void *self, float *x, bool keys, bool back)
{
    const gated_block *b = self;
    dims d = dims_of(b);
    const int64_t heads = b->m->shape.heads, hd = d.D / heads;
    (void)keys;
    if (b->rotate_half)
        (back ? rope_half_backward : rope_half_forward)(x, d.B, d.T, heads, hd, d.D, d.T * d.D, *b->rope);
    else (back ? rope_backward : rope_forward)(x, d.B, d.T, heads, hd, d.D, d.T * d.D, *b->rope);
}

/* The block's self-attention (at SELF) or cross-attention (at CROSS), for attn_side's forward and backward */
static side_attention attention_of(const gated_block *b, int at)
{
    const bool cross = at == CROSS;
    const side_attention a = {.m = b->m, .norm_width = b->m->shape.hidden / b->m->shape.heads, .eps = b->qk_eps,
                              .shape = cross ? cross_shape(b) : self_shape(b), .rotate = cross ? NULL : rotate_side,
                              .block = b};
    side_attention s = side_attention_of(a, cross ? &b->ca : &b->sa);
    if (b->fused) s.fused = cross ? SIDE_FUSED_KV : SIDE_FUSED_QKV;
    return s;
}

/* f1 = ff0(h), h = LN(x) (1 + scale) + shift with the feed-forward module's modulation, f2 = ff2(gelu_erf(f1)); with
 * swiglu f3 = ff1(h) and f2 = ff2(silu(f1) f3) */
static st_status ffn_compute(const gated_block *b, const float *x, const float *mod, float *f1, float *f3, float *f2)
{
    dims d = dims_of(b);
    scratch s = {.pool = b->m->pool};
    float *h = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "gated.ffn.h");
    if (!s.status) s.status = ln_modulate(b, h, NULL, x, mod, d.ff, NULL);
    if (b->swiglu) {
        glu_ffn_forward(&s, b->m, &b->ff0, &b->ff1, &b->ff2, h, d.N, d.F, GLU_SILU, f1, f3, f2, "gated.swiglu");
        return scratch_end(&s);
    }
    if (!s.status) s.status = fwd(b->m, &b->ff0, f1, h, d.N);
    scratch_drop(&s, h);
    float *g = scratch_take(&s, d.N * d.F, MEM_WORKSPACE, "gated.ffn.gelu");
    if (!s.status) {
        gelu_erf_forward(g, f1, d.N * d.F);
        s.status = fwd(b->m, &b->ff2, f2, g, d.N);
    }
    return scratch_end(&s);
}

/* ---- the block ---- */

/* attn_side.h's three cases, as xdit_block.c's forward: a plain forward at a keep level; a first forward with off,
 * which sends the attentions' sides to the host; a recompute after it, which takes them back. */
static st_status gated_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                               block_saved **saved_io)
{
    gated_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t ND = d.N * d.D, NLD = b->cross ? d.NL * d.D : 0, NX = b->cross ? ND : 0;
    const float *x = in->t[0];
    frame f;
    block_saved *sv = frame_begin(&f, blk, b->m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y = scratch_take(&f.kept, ND, MEM_ACTIVATIONS, "gated.state");
    sv->mod[0] = scratch_take(f.ks, d.B * d.M, f.kt, "gated.mod");
    side_take(&f, sv, (int64_t[SIDE_MAX]){ND, ND, ND, ND, ND, ND, NX, NLD, NLD, NX, NX, NLD}, b->cross ? 2 : 1);
    sv->o[0] = scratch_take(f.ks, ND, f.kt, "gated.attention_out");
    if (b->cross) sv->o2 = scratch_take(f.ks, ND, f.kt, "gated.cross_attention_out");
    sv->f1[0] = scratch_take(f.fs, d.N * d.F, f.ft, "gated.ff0");
    if (b->swiglu) sv->f3[0] = scratch_take(f.fs, d.N * d.F, f.ft, "gated.ff1");
    sv->f2[0] = scratch_take(f.fs, ND, f.ft, "gated.ff2");
    float *h = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "gated.h");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    const bool states = keep != KEEP_NOTHING || f.to_host;
    if (!st) st = b->modulate(b, sv->mod[0]);
    if (!st) side_made(b->m, sv->mod[0], d.B * d.M); /* as PyTorch's bf16 modulation */
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) {
        const side_attention a = attention_of(b, SELF);
        st = ln_modulate(b, h, NULL, x, sv->mod[0], 0, NULL);
        if (!st) st = side_attention_forward(&a, sv, SELF, h, h, states);
    }
    if (!st) st = fwd(b->m, &b->sa.out, sv->o[0], sv->side[SQ + SO], d.N);
    if (!st) gated_residual_forward(y, x, sv->mod[0] + 2 * d.D, sv->o[0], d.B, d.T, d.D, d.M); /* x1 */
    if (!st && b->cross && !f.from_host && !(st = cross_input(b, h, NULL, y, sv->mod[0], NULL))) {
        const side_attention a = attention_of(b, CROSS);
        st = side_attention_forward(&a, sv, CROSS, h, b->m->ctx.text, states && keep != KEEP_ATTENTION_OUTPUT);
    }
    if (!st && f.to_host) st = side_send(sv);
    if (!st && b->cross) st = fwd(b->m, &b->ca.out, sv->o2, sv->side[XO], d.N);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    if (!st && b->cross && b->plain_cross) add_to(y, sv->o2, ND); /* x2 */
    else if (!st && b->cross) gated_residual_forward(y, y, sv->mod[0] + 5 * d.D, sv->o2, d.B, d.T, d.D, d.M);
    if (!st) st = ffn_compute(b, y, sv->mod[0], sv->f1[0], sv->f3[0], sv->f2[0]);
    if (!st) gated_residual_forward(y, y, sv->mod[0] + (3 * d.ff + 2) * d.D, sv->f2[0], d.B, d.T, d.D, d.M);
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

/* grad->t[0] holds dL/dx3 on entry; the residual stream's gradient is accumulated in place, becoming dL/dx2,
 * dL/dx1 and dL/dx. */
static st_status gated_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    gated_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t N = d.N, D = d.D, B = d.B, T = d.T, ND = N * D, M = d.M, ff = d.ff, gate = (3 * ff + 2) * D;
    const float *x = in->t[0];
    float *gx = grad->t[0];
    const side_attention self_att = attention_of(b, SELF), cross_att = attention_of(b, CROSS);
    op_state stats = {0};
    bool recomputed = false;
    scratch s = side_scratch(b->m->pool, sv);
    const float *mod = sv->mod[0]; /* as side_scratch has widened it */
    float *dmod = scratch_take_zero(&s, B * M, MEM_WORKSPACE, "gated.dmod");
    float *x1 = scratch_take(&s, ND, MEM_WORKSPACE, "gated.x1");
    float *x2 = b->cross ? scratch_take(&s, ND, MEM_WORKSPACE, "gated.x2") : x1; /* the feed-forward's input */
    if (s.status) goto done;
    gated_residual_forward(x1, x, mod + 2 * D, sv->o[0], B, T, D, M);
    if (b->cross && b->plain_cross) copy_rows(x2, ND, x1, ND, 1, ND), add_to(x2, sv->o2, ND);
    else if (b->cross) gated_residual_forward(x2, x1, mod + 5 * D, sv->o2, B, T, D, M);
    if (!sv->f1[0]) { /* KEEP_ATTENTION: recompute the feed-forward's GEMM outputs from its input */
        sv->f1[0] = scratch_take(&s, N * d.F, MEM_ACTIVATIONS, "gated.ff0 (recomputed)");
        if (b->swiglu) sv->f3[0] = scratch_take(&s, N * d.F, MEM_ACTIVATIONS, "gated.ff1 (recomputed)");
        sv->f2[0] = scratch_take(&s, ND, MEM_ACTIVATIONS, "gated.ff2 (recomputed)");
        recomputed = true;
        if (s.status || (s.status = ffn_compute(b, x2, mod, sv->f1[0], sv->f3[0], sv->f2[0]))) goto done;
    }
    /* feed-forward: x3 = x2 + gate * ff2(gelu_erf(ff0(h))), or swiglu's ff2(silu(ff0 h) ff1 h) */
    float *df2 = scratch_take_zero(&s, ND, MEM_WORKSPACE, "gated.dff2");
    float *g = scratch_take(&s, N * d.F, MEM_WORKSPACE, "gated.gelu");
    float *dg = scratch_take_zero(&s, N * d.F, MEM_WORKSPACE, "gated.dgelu");
    if (s.status) goto done;
    if (b->swiglu) glu_forward(g, sv->f1[0], sv->f3[0], N, d.F, d.F, GLU_SILU);
    else gelu_erf_forward(g, sv->f1[0], N * d.F);
    gated_residual_backward(gx, dmod + gate, df2, gx, mod + gate, sv->f2[0], B, T, D, M);
    if ((s.status = bwd(b->m, &b->ff2, dg, df2, g, N))) goto done;
    scratch_drop(&s, g);
    scratch_drop(&s, df2);
    float *df1 = scratch_take_zero(&s, N * d.F, MEM_WORKSPACE, "gated.dff0"); /* the activations' backward add */
    float *df3 = b->swiglu ? scratch_take_zero(&s, N * d.F, MEM_WORKSPACE, "gated.dff1") : NULL;
    if (s.status) goto done;
    if (b->swiglu) glu_backward(df1, df3, dg, sv->f1[0], sv->f3[0], N, d.F, d.F, GLU_SILU);
    else gelu_erf_backward(df1, dg, sv->f1[0], N * d.F);
    scratch_drop(&s, dg);
    float *ln = scratch_take(&s, ND, MEM_WORKSPACE, "gated.ln");
    float *h = scratch_take(&s, ND, MEM_WORKSPACE, "gated.h");
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "gated.dh");
    float *dout = scratch_take(&s, ND, MEM_WORKSPACE, "gated.dout");
    if (s.status || (s.status = ln_modulate(b, h, ln, x2, mod, (int)ff, &stats))) goto done;
    if ((s.status = bwd(b->m, &b->ff0, dh, df1, h, N))) goto done;
    if (df3 && (s.status = bwd(b->m, &b->ff1, dh, df3, h, N))) goto done;
    if (df3) scratch_drop(&s, df3);
    scratch_drop(&s, df1);
    ln_modulate_back(b, gx, dmod, dh, ln, x2, mod, (int)ff, &stats);
    op_state_release(&stats);
    side_ffn_drop(sv, &s, &recomputed);
    if (b->cross) { /* cross-attention: x2 = x1 + gate2 * out'(...) (plain_cross: ungated), its keys and values from
                       the text */
        if (b->plain_cross) copy_rows(dout, ND, gx, ND, 1, ND);
        else {
            zero_bytes(dout, (size_t)ND * sizeof(float));
            gated_residual_backward(gx, dmod + 5 * D, dout, gx, mod + 5 * D, sv->o2, B, T, D, M);
        }
        if ((s.status = cross_input(b, h, ln, x1, mod, &stats))) goto done;
        zero_bytes(dh, (size_t)ND * sizeof(float));
        if ((s.status = side_attention_backward(&cross_att, sv, CROSS, dout, h, b->m->ctx.text, dh, b->m->ctx.dtext)))
            goto done;
        cross_input_back(b, gx, dmod, dh, ln, x1, mod, &stats);
        op_state_release(&stats);
    }
    /* self-attention: x1 = x + gate1 * out(...) */
    zero_bytes(dout, (size_t)ND * sizeof(float));
    gated_residual_backward(gx, dmod + 2 * D, dout, gx, mod + 2 * D, sv->o[0], B, T, D, M);
    if ((s.status = ln_modulate(b, h, ln, x, mod, 0, &stats))) goto done;
    zero_bytes(dh, (size_t)ND * sizeof(float));
    if ((s.status = side_attention_backward(&self_att, sv, SELF, dout, h, h, dh, dh))) goto done;
    ln_modulate_back(b, gx, dmod, dh, ln, x, mod, 0, &stats);
    s.status = b->modulate_back(b, dmod);
done:
    op_state_release(&stats);
    side_ffn_forget(sv, &recomputed);
    return scratch_end(&s);
}

st_status gated_modulate_linear(const gated_block *b, float *mod)
{
    return fwd(b->m, &b->mod, mod, b->m->ctx.cs, b->m->shape.batch);
}

st_status gated_modulate_linear_back(const gated_block *b, const float *dmod)
{
    return bwd(b->m, &b->mod, b->m->ctx.dcs, dmod, b->m->ctx.cs, b->m->shape.batch);
}

const block_kind gated_block_kind = {
    SIDE_BLOCK_KIND("gated", gated_kept_bytes, gated_side_bytes, gated_forward, gated_backward)};
