/* Cosmos 2's block (cosmos.h): diffusers' CosmosTransformerBlock without image context or controlnet.
 *
 *   (shift_i, scale_i, gate_i) = linear_2_i(linear_1_i(SiLU(e))) + temb    (i = 1, 2, 3: AdaLN-LoRA, no activation
 *                                                                            between the two linears)
 *   x1 = x  + gate1 * out(self_attention(LN(x) (1 + scale1) + shift1))
 *   x2 = x1 + gate2 * out'(cross_attention(q' of LN(x1) (1 + scale2) + shift2; k', v' of the raw text))
 *   x3 = x2 + gate3 * ff2(gelu_erf(ff0(LN(x2) (1 + scale3) + shift3)))
 *
 * with q and k RMSNorm-ed per head (eps 1e-5) in both attentions, the self-attention's rotated rotate-half, no
 * biases anywhere, and no key mask (SimpleTuner's text padding is zero rows, attended).
 *
 * Forward keeps the three modulations, the attentions' inputs (q, k and v after their norms and rotation, and the raw
 * q and k), their outputs and states, the output projections, and with KEEP_ALL the feed-forward's two GEMM outputs;
 * everything pointwise is recomputed from those and the block's input with the same kernels, so bitwise as forward
 * made it. The text's keys and values are kept with the rest, as xdit_block.c keeps them. */
#include "cosmos.h"

#include "attn_side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* block_saved is attn_side.h's: the self-attention's side in SQ .. SKR with state 0 and output projection o[0],
 * the cross-attention's in XQ .. XKR with state 1 and o2, the modulations (B, 9 D) in mod[0], the feed-forward's
 * GEMM outputs in f1[0] and f2[0]. */
enum { SELF = 0, CROSS = XQ };

typedef struct dims {
    int64_t B, T, L, D, N, NL, F, E, M; /* NL: the text's rows, B L; E its width; M = 9 D, a sample's modulations */
} dims;

static dims dims_of(const cosmos_block *b)
{
    const model_shape *s = &b->m->shape;
    return (dims){s->batch, s->tokens, s->text, s->hidden, s->batch * s->tokens, s->batch * s->text, b->ffn,
                  b->m->cfg.text_dim, 9 * s->hidden};
}

#define W(i) (param_at(b->m->params, (i))->w)
#define G(i) (param_at(b->m->params, (i))->g)

static attn_shape self_shape(const cosmos_block *b)
{
    const model_shape *s = &b->m->shape;
    return (attn_shape){.batch = s->batch, .tokens = s->tokens, .heads = s->heads, .head_dim = s->hidden / s->heads,
                        .mechanism = s->mechanism};
}

static attn_shape cross_shape(const cosmos_block *b)
{
    attn_shape a = self_shape(b);
    a.kv_tokens = b->m->shape.text;
    return a;
}

void cosmos_block_register(param_set *s, cosmos_block *b, const char *prefix, const model_config *c)
{
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, E = c->text_dim, hd = D / c->heads;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    const float alpha = (float)c->lora_alpha;
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", prefix, suffix), n)
    for (int i = 0; i < 3; i++) { /* in the state_dict's order: norm1, attn1, norm2, attn2, norm3, ff */
        char l1[32], l2[32];
        snprintf(l1, sizeof l1, "norm%d.linear_1", i + 1), snprintf(l2, sizeof l2, "norm%d.linear_2", i + 1);
        b->ada1[i] = lin_register(s, NAME(l1), D, b->lora, false, 0, 0, full);
        b->ada2[i] = lin_register(s, NAME(l2), b->lora, 3 * D, false, 0, 0, full);
        if (i == 0) {
            b->norm_q = block_norm(s, prefix, "attn1.norm_q", hd, c);
            b->norm_k = block_norm(s, prefix, "attn1.norm_k", hd, c);
            b->q = lin_register(s, NAME("attn1.to_q"), D, D, false, ra, alpha, full);
            b->k = lin_register(s, NAME("attn1.to_k"), D, D, false, ra, alpha, full);
            b->v = lin_register(s, NAME("attn1.to_v"), D, D, false, ra, alpha, full);
            b->out = lin_register(s, NAME("attn1.to_out.0"), D, D, false, ra, alpha, full);
        } else if (i == 1) {
            b->cnorm_q = block_norm(s, prefix, "attn2.norm_q", hd, c);
            b->cnorm_k = block_norm(s, prefix, "attn2.norm_k", hd, c);
            b->cq = lin_register(s, NAME("attn2.to_q"), D, D, false, ra, alpha, full);
            b->ck = lin_register(s, NAME("attn2.to_k"), E, D, false, ra, alpha, full);
            b->cv = lin_register(s, NAME("attn2.to_v"), E, D, false, ra, alpha, full);
            b->cout = lin_register(s, NAME("attn2.to_out.0"), D, D, false, ra, alpha, full);
        }
    }
    b->ff0 = lin_register(s, NAME("ff.net.0.proj"), D, b->ffn, false, rm, alpha, full);
    b->ff2 = lin_register(s, NAME("ff.net.2"), b->ffn, D, false, rm, alpha, full);
#undef NAME
}

/* ---- sizes ---- */

static size_t cosmos_kept_bytes(const block *blk, keep_level keep)
{
    const cosmos_block *b = blk->self;
    dims d = dims_of(b);
    if (keep == KEEP_NOTHING) return 0;
    const attn_shape ss = self_shape(b), cs = cross_shape(b);
    if (keep == KEEP_ATTENTION_OUTPUT) return side_output_bytes(&ss); /* the cross-attention runs again */
    /* modulations; self: q, raw q, k, raw k, v, o, out; cross: q, raw q, o, out over the image rows, k, raw k, v
       over the text's */
    size_t floats = (size_t)(d.B * d.M + 7 * d.N * d.D + 4 * d.N * d.D + 3 * d.NL * d.D);
    if (keep == KEEP_ALL) floats += (size_t)(d.N * d.F + d.N * d.D);
    return floats * sizeof(float) + attention_kept_bytes(&ss) + attention_kept_bytes(&cs);
}

static size_t cosmos_offloaded_bytes(const block *blk)
{
    const cosmos_block *b = blk->self;
    dims d = dims_of(b);
    const attn_shape ss = self_shape(b), cs = cross_shape(b);
    return (size_t)(6 * d.N * d.D + 3 * d.N * d.D + 3 * d.NL * d.D) * sizeof(float) + attention_kept_bytes(&ss) +
           attention_kept_bytes(&cs);
}

/* ---- pieces run in forward and again in backward ---- */

/* mod (B, 9 D) = the three AdaLN-LoRA outputs + temb, module i's (shift, scale, gate) at i 3 D */
static st_status modulations(const cosmos_block *b, float *mod)
{
    dims d = dims_of(b);
    const model *m = b->m;
    scratch s = {.pool = m->pool};
    float *h = scratch_take(&s, d.B * b->lora, MEM_WORKSPACE, "cosmos.adaln_lora");
    float *o = scratch_take(&s, d.B * 3 * d.D, MEM_WORKSPACE, "cosmos.adaln");
    for (int i = 0; i < 3 && !s.status; i++) {
        if ((s.status = fwd(m, &b->ada1[i], h, m->ctx.cs, d.B)) || (s.status = fwd(m, &b->ada2[i], o, h, d.B))) break;
        for (int64_t r = 0; r < d.B; r++) add_to(o + r * 3 * d.D, m->ctx.mod + r * m->ctx.mod_rows * d.D, 3 * d.D);
        copy_rows(mod + i * 3 * d.D, d.M, o, 3 * d.D, d.B, 3 * d.D);
    }
    return scratch_end(&s);
}

/* h = LN(x) (1 + scale_i) + shift_i (stats kept when asked; ln, if not NULL, gets LN(x)) */
static st_status ln_modulate(const cosmos_block *b, float *h, float *ln, const float *x, const float *mod, int i,
                             op_state *stats)
{
    dims d = dims_of(b);
    float *y = ln ? ln : h;
    st_status st = layernorm_forward(b->m->pool, y, x, NULL, NULL, d.N, d.D, COSMOS_LN_EPS, stats);
    if (!st) modulate_forward(h, y, mod + i * 3 * d.D, mod + i * 3 * d.D + d.D, d.B, d.T, d.D, d.M);
    return st;
}

static void rotate(const cosmos_block *b, float *x, bool back)
{
    dims d = dims_of(b);
    const int64_t heads = b->m->shape.heads, hd = d.D / heads;
    if (back) rope_half_backward(x, d.B, d.T, heads, hd, d.D, d.T * d.D, b->m->ctx.rope);
    else rope_half_forward(x, d.B, d.T, heads, hd, d.D, d.T * d.D, b->m->ctx.rope);
}

static void rotate_side(const void *self, float *x, bool keys, bool back)
{
    (void)keys;
    rotate(self, x, back);
}

/* The block's self-attention (at SELF) or cross-attention (at CROSS), for attn_side's forward and backward */
static side_attention attention_of(const cosmos_block *b, int at)
{
    const bool cross = at == CROSS;
    return (side_attention){.m = b->m, .q = cross ? &b->cq : &b->q, .k = cross ? &b->ck : &b->k,
                            .v = cross ? &b->cv : &b->v, .out = cross ? &b->cout : &b->out,
                            .norm_q = cross ? b->cnorm_q : b->norm_q, .norm_k = cross ? b->cnorm_k : b->norm_k,
                            .norm_width = b->m->shape.hidden / b->m->shape.heads, .eps = COSMOS_QK_EPS,
                            .shape = cross ? cross_shape(b) : self_shape(b),
                            .rotate = cross ? NULL : rotate_side, .block = b};
}

static st_status attention_forward_into(const cosmos_block *b, block_saved *sv, int at, const float *xq,
                                        const float *xkv, bool keep)
{
    const side_attention a = attention_of(b, at);
    return side_attention_forward(&a, sv, at, xq, xkv, keep);
}

/* f1 = ff0(LN(x2) (1 + scale3) + shift3), f2 = ff2(gelu_erf(f1)) */
static st_status ffn_compute(const cosmos_block *b, const float *x2, const float *mod, float *f1, float *f2)
{
    dims d = dims_of(b);
    scratch s = {.pool = b->m->pool};
    float *h = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "cosmos.ffn.h");
    if (!s.status) s.status = ln_modulate(b, h, NULL, x2, mod, 2, NULL);
    if (!s.status) s.status = fwd(b->m, &b->ff0, f1, h, d.N);
    scratch_drop(&s, h);
    float *g = scratch_take(&s, d.N * d.F, MEM_WORKSPACE, "cosmos.ffn.gelu");
    if (!s.status) {
        gelu_erf_forward(g, f1, d.N * d.F);
        s.status = fwd(b->m, &b->ff2, f2, g, d.N);
    }
    return scratch_end(&s);
}

/* x1 = x + gate1 * out, x2 = x1 + gate2 * out' from the kept tensors */
static void residuals(const cosmos_block *b, const float *x, const block_saved *sv, float *x1, float *x2)
{
    dims d = dims_of(b);
    gated_residual_forward(x1, x, sv->mod[0] + 2 * d.D, sv->o[0], d.B, d.T, d.D, d.M);
    gated_residual_forward(x2, x1, sv->mod[0] + 5 * d.D, sv->o2, d.B, d.T, d.D, d.M);
}

/* ---- the block ---- */

/* attn_side.h's three cases, as xdit_block.c's forward: a plain forward at a keep level; a first forward with off,
 * which sends both attentions' sides to the host; a recompute after it, which takes them back. */
static st_status cosmos_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                                block_saved **saved_io)
{
    cosmos_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t ND = d.N * d.D, NLD = d.NL * d.D;
    const float *x = in->t[0];
    blk->forward_runs++;
    block_saved *sv = saved_io && *saved_io ? *saved_io : calloc(1, sizeof *sv);
    if (!sv) return st_host_oom("a block's saved tensors");
    frame f;
    frame_init(&f, b->m, keep, off, sv);
    float *y = scratch_take(&f.kept, ND, MEM_ACTIVATIONS, "cosmos.state");
    sv->mod[0] = scratch_take(f.ks, d.B * d.M, f.kt, "cosmos.mod");
    side_take(&f, sv, (int64_t[SIDE_MAX]){ND, ND, ND, ND, ND, ND, ND, NLD, NLD, ND, ND, NLD}, 2);
    sv->o[0] = scratch_take(f.ks, ND, f.kt, "cosmos.attention_out");
    sv->o2 = scratch_take(f.ks, ND, f.kt, "cosmos.cross_attention_out");
    sv->f1[0] = scratch_take(f.fs, d.N * d.F, f.ft, "cosmos.ff0");
    sv->f2[0] = scratch_take(f.fs, ND, f.ft, "cosmos.ff2");
    float *h = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "cosmos.h");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    const bool states = keep != KEEP_NOTHING || f.to_host;
    if (!st) st = modulations(b, sv->mod[0]);
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) {
        st = ln_modulate(b, h, NULL, x, sv->mod[0], 0, NULL);
        if (!st) st = attention_forward_into(b, sv, SELF, h, h, states);
    }
    if (!st) st = fwd(b->m, &b->out, sv->o[0], sv->side[SQ + SO], d.N);
    if (!st) { /* y holds x1; the cross-attention on LN(x1) modulated */
        gated_residual_forward(y, x, sv->mod[0] + 2 * d.D, sv->o[0], d.B, d.T, d.D, d.M);
        if (!f.from_host && !(st = ln_modulate(b, h, NULL, y, sv->mod[0], 1, NULL)))
            st = attention_forward_into(b, sv, CROSS, h, b->m->ctx.text, states && keep != KEEP_ATTENTION_OUTPUT);
    }
    if (!st && f.to_host) st = side_send(sv);
    if (!st) st = fwd(b->m, &b->cout, sv->o2, sv->side[XO], d.N);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    if (!st) {
        gated_residual_forward(y, y, sv->mod[0] + 5 * d.D, sv->o2, d.B, d.T, d.D, d.M); /* x2 */
        st = ffn_compute(b, y, sv->mod[0], sv->f1[0], sv->f2[0]);
    }
    if (!st) gated_residual_forward(y, y, sv->mod[0] + 8 * d.D, sv->f2[0], d.B, d.T, d.D, d.M);
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

/* One attention backward from dout, dL/d(its output projection's output); dxq accumulates the query input's
 * gradient, dxkv the key and value input's. */
static st_status attention_backward_from(const cosmos_block *b, block_saved *sv, int at, const float *dout,
                                         const float *xq, const float *xkv, float *dxq, float *dxkv)
{
    const side_attention a = attention_of(b, at);
    return side_attention_backward(&a, sv, at, dout, xq, xkv, dxq, dxkv);
}

/* The modulations' backward: dmod (B, 9 D) to temb's gradient (m->ctx.dmod's rows 0-2), the AdaLN-LoRA weights'
 * and SiLU(e)'s (m->ctx.dcs). */
static st_status modulations_backward(const cosmos_block *b, const float *dmod)
{
    dims d = dims_of(b);
    model *m = b->m;
    scratch s = {.pool = m->pool};
    float *h = scratch_take(&s, d.B * b->lora, MEM_WORKSPACE, "cosmos.adaln_lora");
    float *dh = scratch_take(&s, d.B * b->lora, MEM_WORKSPACE, "cosmos.dadaln_lora");
    float *dy = scratch_take(&s, d.B * 3 * d.D, MEM_WORKSPACE, "cosmos.dadaln");
    for (int i = 0; i < 3 && !s.status; i++) {
        copy_rows(dy, 3 * d.D, dmod + i * 3 * d.D, d.M, d.B, 3 * d.D);
        for (int64_t r = 0; r < d.B; r++) add_to(m->ctx.dmod + r * m->ctx.mod_rows * d.D, dy + r * 3 * d.D, 3 * d.D);
        zero_bytes(dh, (size_t)(d.B * b->lora) * sizeof(float));
        if ((s.status = fwd(m, &b->ada1[i], h, m->ctx.cs, d.B))) break;
        if ((s.status = bwd(m, &b->ada2[i], dh, dy, h, d.B))) break;
        s.status = bwd(m, &b->ada1[i], m->ctx.dcs, dh, m->ctx.cs, d.B);
    }
    return scratch_end(&s);
}

/* dL/dh of a modulated LayerNorm back to gx (+=), the modulation's shift and scale into dmod */
static void ln_modulate_back(const cosmos_block *b, float *gx, float *dmod, float *dh, const float *ln, const float *x,
                             const float *mod, int i, op_state *stats)
{
    dims d = dims_of(b);
    const int64_t o = i * 3 * d.D;
    modulate_backward(dh, dmod + o, dmod + o + d.D, dh, ln, mod + o + d.D, d.B, d.T, d.D, d.M);
    layernorm_backward(gx, NULL, NULL, dh, x, NULL, d.N, d.D, stats);
}

/* grad->t[0] holds dL/dx3 on entry; the residual stream's gradient is accumulated in place, becoming dL/dx2,
 * dL/dx1 and dL/dx. */
static st_status cosmos_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    cosmos_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t N = d.N, D = d.D, B = d.B, T = d.T, ND = N * D, M = d.M;
    const float *x = in->t[0], *mod = sv->mod[0];
    float *gx = grad->t[0];
    if (sv->on_host) {
        st_status st = side_back(sv);
        if (st) return st;
    }
    op_state stats = {0};
    bool recomputed = false;
    scratch s = {.pool = b->m->pool};
    float *dmod = scratch_take_zero(&s, B * M, MEM_WORKSPACE, "cosmos.dmod");
    float *x1 = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos.x1");
    float *x2 = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos.x2");
    if (s.status) goto done;
    residuals(b, x, sv, x1, x2);
    if (!sv->f1[0]) { /* KEEP_ATTENTION: recompute the feed-forward's GEMM outputs from x2 */
        sv->f1[0] = scratch_take(&s, N * d.F, MEM_ACTIVATIONS, "cosmos.ff0 (recomputed)");
        sv->f2[0] = scratch_take(&s, ND, MEM_ACTIVATIONS, "cosmos.ff2 (recomputed)");
        recomputed = true;
        if (s.status || (s.status = ffn_compute(b, x2, mod, sv->f1[0], sv->f2[0]))) goto done;
    }
    /* feed-forward: x3 = x2 + gate3 * ff2(gelu_erf(ff0(h3))) */
    float *df2 = scratch_take_zero(&s, ND, MEM_WORKSPACE, "cosmos.dff2");
    float *g = scratch_take(&s, N * d.F, MEM_WORKSPACE, "cosmos.gelu");
    float *dg = scratch_take_zero(&s, N * d.F, MEM_WORKSPACE, "cosmos.dgelu");
    if (s.status) goto done;
    gelu_erf_forward(g, sv->f1[0], N * d.F);
    gated_residual_backward(gx, dmod + 8 * D, df2, gx, mod + 8 * D, sv->f2[0], B, T, D, M);
    if ((s.status = bwd(b->m, &b->ff2, dg, df2, g, N))) goto done;
    scratch_drop(&s, g);
    scratch_drop(&s, df2);
    float *df1 = scratch_take_zero(&s, N * d.F, MEM_WORKSPACE, "cosmos.dff0"); /* gelu_erf_backward accumulates */
    if (s.status) goto done;
    gelu_erf_backward(df1, dg, sv->f1[0], N * d.F);
    scratch_drop(&s, dg);
    float *ln = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos.ln");
    float *h = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos.h");
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "cosmos.dh");
    float *dout = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos.dout");
    if (s.status || (s.status = ln_modulate(b, h, ln, x2, mod, 2, &stats))) goto done;
    if ((s.status = bwd(b->m, &b->ff0, dh, df1, h, N))) goto done;
    scratch_drop(&s, df1);
    ln_modulate_back(b, gx, dmod, dh, ln, x2, mod, 2, &stats);
    op_state_release(&stats);
    if (recomputed) {
        scratch_drop(&s, sv->f1[0]);
        scratch_drop(&s, sv->f2[0]);
        sv->f1[0] = sv->f2[0] = NULL;
        recomputed = false;
    }
    /* cross-attention: x2 = x1 + gate2 * out'(...) */
    zero_bytes(dout, (size_t)ND * sizeof(float));
    gated_residual_backward(gx, dmod + 5 * D, dout, gx, mod + 5 * D, sv->o2, B, T, D, M);
    if ((s.status = ln_modulate(b, h, ln, x1, mod, 1, &stats))) goto done;
    zero_bytes(dh, (size_t)ND * sizeof(float));
    if ((s.status = attention_backward_from(b, sv, CROSS, dout, h, b->m->ctx.text, dh, b->m->ctx.dtext))) goto done;
    ln_modulate_back(b, gx, dmod, dh, ln, x1, mod, 1, &stats);
    op_state_release(&stats);
    /* self-attention: x1 = x + gate1 * out(...) */
    zero_bytes(dout, (size_t)ND * sizeof(float));
    gated_residual_backward(gx, dmod + 2 * D, dout, gx, mod + 2 * D, sv->o[0], B, T, D, M);
    if ((s.status = ln_modulate(b, h, ln, x, mod, 0, &stats))) goto done;
    zero_bytes(dh, (size_t)ND * sizeof(float));
    if ((s.status = attention_backward_from(b, sv, SELF, dout, h, h, dh, dh))) goto done;
    ln_modulate_back(b, gx, dmod, dh, ln, x, mod, 0, &stats);
    s.status = modulations_backward(b, dmod);
done:
    op_state_release(&stats);
    if (recomputed) sv->f1[0] = sv->f2[0] = NULL;
    return scratch_end(&s);
}

const block_kind cosmos_block_kind = {
    .name = "cosmos",
    .ffn_split = true,
    .softmax_attention = true,
    .keeps_attention_output = true,
    .kept_bytes = cosmos_kept_bytes,
    .offloaded_bytes = cosmos_offloaded_bytes,
    .forward = cosmos_forward,
    .prefetch = side_prefetch,
    .backward = cosmos_backward,
    .release = saved_release,
};
