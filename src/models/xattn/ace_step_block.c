/* ACE-Step 1.5's block (ace_step.h): diffusers' AceStepTransformerBlock.
 *
 *   (shift, scale, gate, c_shift, c_scale, c_gate) = scale_shift_table + timestep_proj
 *   x1 = x  + gate * out(self_attention(RMSNorm1(x) (1 + scale) + shift))
 *   x2 = x1 + out'(cross_attention(q' of RMSNorm2(x1); k', v' of the embedded condition))
 *   x3 = x2 + c_gate * down(silu(gate_proj(h3)) * up_proj(h3)),  h3 = RMSNorm3(x2) (1 + c_scale) + c_shift
 *
 * The block norms are affine RMSNorms (eps 1e-6), q and k RMSNorm-ed per head, grouped-query attention (kv_heads
 * heads of k and v), the self-attention rotated rotate-half and, on the sliding layers, windowed (|i - j| <=
 * window); the cross-attention has no modulation, no gate, no rotation and no mask. No biases.
 *
 * Forward keeps the modulations, the attentions' sides (q, k and v after their norms and rotation, and the raw q
 * and k), outputs and states, the output projections, and with KEEP_ALL the feed-forward's three GEMM outputs;
 * everything pointwise is recomputed from those and the block's input with the same kernels, so bitwise as forward
 * made it. The condition's keys and values are kept with the rest, as xdit_block.c keeps the text's. */
#include "models/xattn/ace_step.h"

#include "models/core/attn_side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* block_saved is attn_side.h's: the self-attention's side in SQ .. SKR with state 0 and output projection o[0],
 * the cross-attention's in XQ .. XKR with state 1 and o2, the modulations (B, 6 D) in mod[0], the feed-forward's
 * GEMM outputs in f1[0] (gate_proj), f3[0] (up_proj) and f2[0] (down_proj). */
enum { SELF = 0, CROSS = XQ };

typedef struct dims {
    int64_t B, T, L, D, K, N, NL, F, M; /* K: k and v's width (kv_heads x head_dim); NL: the condition's rows, B L;
                                           M = 6 D, a sample's modulations */
} dims;

static dims dims_of(const ace_block *b)
{
    const model_shape *s = &b->m->shape;
    return (dims){s->batch, s->tokens, s->text, s->hidden, s->hidden / s->heads * b->kv_heads, s->batch * s->tokens,
                  s->batch * s->text, b->ffn, 6 * s->hidden};
}

#define W(i) (param_at(b->m->params, (i))->w)
#define G(i) (param_at(b->m->params, (i))->g)

static attn_shape self_shape(const ace_block *b)
{
    const model_shape *s = &b->m->shape;
    return (attn_shape){.batch = s->batch, .tokens = s->tokens, .heads = s->heads, .head_dim = s->hidden / s->heads,
                        .mechanism = s->mechanism, .kv_heads = b->kv_heads, .window = b->window};
}

static attn_shape cross_shape(const ace_block *b)
{
    attn_shape a = self_shape(b);
    a.kv_tokens = b->m->shape.text, a.window = 0;
    return a;
}

/* One attention's to_q, to_k and to_v (k and v K wide: grouped queries), to_out.0 and per-head norm_q and norm_k,
 * named prefix.name.*, in the state_dict's order */
static void register_attention(param_set *s, const char *prefix, const char *name, const model_config *c, int64_t K,
                               attn_weights *w)
{
    const int64_t D = c->hidden, hd = D / c->heads, ra = c->lora_attention ? c->lora_rank : 0;
    char n[PARAM_NAME_MAX];
#define NAME(leaf) (snprintf(n, sizeof n, "%s.%s", name, leaf), n)
    w->q = block_linear(s, prefix, NAME("to_q"), D, D, false, ra, c);
    w->k = block_linear(s, prefix, NAME("to_k"), D, K, false, ra, c);
    w->v = block_linear(s, prefix, NAME("to_v"), D, K, false, ra, c);
    w->out = block_linear(s, prefix, NAME("to_out.0"), D, D, false, ra, c);
    w->norm_q = block_norm(s, prefix, NAME("norm_q"), hd, c);
    w->norm_k = block_norm(s, prefix, NAME("norm_k"), hd, c);
#undef NAME
}

void ace_block_register(param_set *s, ace_block *b, const char *prefix, const model_config *c)
{
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, K = D / c->heads * b->kv_heads, rm = c->lora_mlp ? c->lora_rank : 0;
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", prefix, suffix), n)
    /* in the state_dict's order: the block's own table, then its modules */
    b->table = param_add(s, NAME("scale_shift_table"), 3, (int64_t[]){1, 6, D}, full);
    b->norm1 = param_add(s, NAME("self_attn_norm.weight"), 1, (int64_t[]){D}, full);
    register_attention(s, prefix, "self_attn", c, K, &b->sa);
    b->norm2 = param_add(s, NAME("cross_attn_norm.weight"), 1, (int64_t[]){D}, full);
    register_attention(s, prefix, "cross_attn", c, K, &b->ca);
    b->norm3 = param_add(s, NAME("mlp_norm.weight"), 1, (int64_t[]){D}, full);
#undef NAME
    b->gate = block_linear(s, prefix, "mlp.gate_proj", D, b->ffn, false, rm, c);
    b->up = block_linear(s, prefix, "mlp.up_proj", D, b->ffn, false, rm, c);
    b->down = block_linear(s, prefix, "mlp.down_proj", b->ffn, D, false, rm, c);
}

/* ---- sizes ---- */

static size_t ace_side_bytes(const block *blk)
{
    const ace_block *b = blk->self;
    const size_t elem = side_elem(b->m);
    dims d = dims_of(b);
    const attn_shape ss = self_shape(b), cs = cross_shape(b);
    return (size_t)(3 * d.N * d.D + 3 * d.N * d.K + 3 * d.N * d.D + 3 * d.NL * d.K) * elem +
           attention_kept_bytes(&ss) + attention_kept_bytes(&cs);
}

/* beside the sides: the modulations and both output projections; with KEEP_ALL the feed-forward's three GEMM
 * outputs */
static size_t ace_kept_bytes(const block *blk, keep_level keep)
{
    const ace_block *b = blk->self;
    dims d = dims_of(b);
    const size_t elem = side_elem(b->m);
    return side_block_kept_bytes(ace_side_bytes(blk), self_shape(b), keep, d.B * d.M + 2 * d.N * d.D,
                                 2 * d.N * d.F + d.N * d.D, elem);
}

/* ---- pieces run in forward and again in backward ---- */

/* mod (B, 6 D) = scale_shift_table + the model's timestep projection */
static void modulations(const ace_block *b, float *mod)
{
    dims d = dims_of(b);
    copy_rows(mod, d.M, b->m->ctx.mod, d.M, d.B, d.M);
    add_row(mod, W(b->table), d.B, d.M);
}

/* h = RMSNorm_w(x) (1 + scale_i) + shift_i, modulation i = 0 (self-attention) or 1 (feed-forward); without mod, the
 * norm alone (the cross-attention's). ln, if not NULL, gets the norm's output; stats kept when asked. */
static st_status norm_modulate(const ace_block *b, float *h, float *ln, const float *x, int w, const float *mod,
                               int i, op_state *stats)
{
    dims d = dims_of(b);
    float *y = ln ? ln : h;
    st_status st = rmsnorm_forward(b->m->pool, y, x, W(w), d.N, d.D, ACE_EPS, stats);
    if (!st && mod) modulate_forward(h, y, mod + i * 3 * d.D, mod + i * 3 * d.D + d.D, d.B, d.T, d.D, d.M);
    else if (!st && ln) copy_rows(h, d.D, ln, d.D, d.N, d.D);
    return st;
}

static void rotate(const ace_block *b, float *x, int64_t heads, int64_t w, bool back)
{
    dims d = dims_of(b);
    const int64_t hd = d.D / b->m->shape.heads;
    if (back) rope_half_backward(x, d.B, d.T, heads, hd, w, d.T * w, b->m->ctx.rope);
    else rope_half_forward(x, d.B, d.T, heads, hd, w, d.T * w, b->m->ctx.rope);
}

/* the self-attention's rotation: the query heads', or the key and value heads' */
static void rotate_side(const void *self, float *x, bool keys, bool back)
{
    const ace_block *b = self;
    const int64_t heads = keys ? b->kv_heads : b->m->shape.heads;
    rotate(b, x, heads, heads * (b->m->shape.hidden / b->m->shape.heads), back);
}

/* The block's self-attention (at SELF) or cross-attention (at CROSS), for attn_side's forward and backward */
static side_attention attention_of(const ace_block *b, int at)
{
    const bool cross = at == CROSS;
    const side_attention a = {.m = b->m, .norm_width = b->m->shape.hidden / b->m->shape.heads, .eps = ACE_EPS,
                              .shape = cross ? cross_shape(b) : self_shape(b), .rotate = cross ? NULL : rotate_side,
                              .block = b};
    return side_attention_of(a, cross ? &b->ca : &b->sa);
}

/* g = gate_proj(h3), u = up_proj(h3), f = down_proj(silu(g) u) */
static st_status ffn_compute(const ace_block *b, const float *x2, const float *mod, float *g, float *u, float *f)
{
    dims d = dims_of(b);
    scratch s = {.pool = b->m->pool};
    float *h = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "ace.ffn.h");
    if (!s.status) s.status = norm_modulate(b, h, NULL, x2, b->norm3, mod, 1, NULL);
    glu_ffn_forward(&s, b->m, &b->gate, &b->up, &b->down, h, d.N, d.F, GLU_SILU, g, u, f, "ace.ffn.swiglu");
    return scratch_end(&s);
}

/* ---- the block ---- */

/* attn_side.h's three cases, as gated_block.c's forward: a plain forward at a keep level; a first forward with
 * off, which sends both attentions' sides to the host; a recompute after it, which takes them back. */
static st_status ace_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                             block_saved **saved_io)
{
    ace_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t ND = d.N * d.D, NK = d.N * d.K, NLK = d.NL * d.K;
    const float *x = in->t[0];
    frame f;
    block_saved *sv = frame_begin(&f, blk, b->m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y = scratch_take(&f.kept, ND, MEM_ACTIVATIONS, "ace.state");
    sv->mod[0] = scratch_take(f.ks, d.B * d.M, f.kt, "ace.mod");
    side_take(&f, sv, (int64_t[SIDE_MAX]){ND, NK, NK, ND, ND, NK, ND, NLK, NLK, ND, ND, NLK}, 2);
    sv->o[0] = scratch_take(f.ks, ND, f.kt, "ace.attention_out");
    sv->o2 = scratch_take(f.ks, ND, f.kt, "ace.cross_attention_out");
    sv->f1[0] = scratch_take(f.fs, d.N * d.F, f.ft, "ace.gate_proj");
    sv->f3[0] = scratch_take(f.fs, d.N * d.F, f.ft, "ace.up_proj");
    sv->f2[0] = scratch_take(f.fs, ND, f.ft, "ace.down_proj");
    float *h = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "ace.h");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    const bool states = keep != KEEP_NOTHING || f.to_host;
    const side_attention self_att = attention_of(b, SELF), cross_att = attention_of(b, CROSS);
    if (!st) modulations(b, sv->mod[0]), side_made(b->m, sv->mod[0], d.B * d.M); /* as PyTorch's bf16 sum */
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) {
        st = norm_modulate(b, h, NULL, x, b->norm1, sv->mod[0], 0, NULL);
        if (!st) st = side_attention_forward(&self_att, sv, SELF, h, h, states);
    }
    if (!st) st = fwd(b->m, &b->sa.out, sv->o[0], sv->side[SQ + SO], d.N);
    if (!st) { /* y holds x1; the cross-attention on RMSNorm2(x1) */
        gated_residual_forward(y, x, sv->mod[0] + 2 * d.D, sv->o[0], d.B, d.T, d.D, d.M);
        if (!f.from_host && !(st = norm_modulate(b, h, NULL, y, b->norm2, NULL, 0, NULL)))
            st = side_attention_forward(&cross_att, sv, CROSS, h, b->m->ctx.text,
                                        states && keep != KEEP_ATTENTION_OUTPUT);
    }
    if (!st && f.to_host) st = side_send(sv);
    if (!st) st = fwd(b->m, &b->ca.out, sv->o2, sv->side[XO], d.N);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    if (!st) {
        add_to(y, sv->o2, ND); /* x2 */
        st = ffn_compute(b, y, sv->mod[0], sv->f1[0], sv->f3[0], sv->f2[0]);
    }
    if (!st) gated_residual_forward(y, y, sv->mod[0] + 5 * d.D, sv->f2[0], d.B, d.T, d.D, d.M);
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

/* dL/dh of a modulated RMSNorm back to gx (+=) and the norm's weight, the modulation's shift and scale into dmod
 * (mod NULL: the cross-attention's plain norm) */
static void norm_modulate_back(const ace_block *b, float *gx, float *dmod, float *dh, const float *ln, const float *x,
                               int w, const float *mod, int i, op_state *stats)
{
    dims d = dims_of(b);
    const int64_t o = i * 3 * d.D;
    if (mod) modulate_backward(dh, dmod + o, dmod + o + d.D, dh, ln, mod + o + d.D, d.B, d.T, d.D, d.M);
    rmsnorm_backward(gx, G(w), dh, x, W(w), d.N, d.D, stats);
}

/* grad->t[0] holds dL/dx3 on entry; the residual stream's gradient is accumulated in place, becoming dL/dx2,
 * dL/dx1 and dL/dx. */
static st_status ace_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    ace_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t N = d.N, D = d.D, B = d.B, T = d.T, ND = N * D, M = d.M, NF = N * d.F;
    const float *x = in->t[0];
    float *gx = grad->t[0];
    const side_attention self_att = attention_of(b, SELF), cross_att = attention_of(b, CROSS);
    op_state stats = {0};
    bool recomputed = false;
    scratch s = side_scratch(b->m->pool, sv);
    const float *mod = sv->mod[0]; /* as side_scratch has widened it */
    float *dmod = scratch_take_zero(&s, B * M, MEM_WORKSPACE, "ace.dmod");
    float *x1 = scratch_take(&s, ND, MEM_WORKSPACE, "ace.x1");
    float *x2 = scratch_take(&s, ND, MEM_WORKSPACE, "ace.x2");
    if (s.status) goto done;
    side_residuals(sv, x, x1, x2, B, T, D);
    if (!sv->f1[0]) { /* KEEP_ATTENTION: recompute the feed-forward's GEMM outputs from x2 */
        sv->f1[0] = scratch_take(&s, NF, MEM_ACTIVATIONS, "ace.gate_proj (recomputed)");
        sv->f3[0] = scratch_take(&s, NF, MEM_ACTIVATIONS, "ace.up_proj (recomputed)");
        sv->f2[0] = scratch_take(&s, ND, MEM_ACTIVATIONS, "ace.down_proj (recomputed)");
        recomputed = true;
        if (s.status || (s.status = ffn_compute(b, x2, mod, sv->f1[0], sv->f3[0], sv->f2[0]))) goto done;
    }
    /* feed-forward: x3 = x2 + c_gate * down(silu(g) u) */
    float *df = scratch_take_zero(&s, ND, MEM_WORKSPACE, "ace.ddown");
    float *a = scratch_take(&s, NF, MEM_WORKSPACE, "ace.swiglu");
    float *da = scratch_take_zero(&s, NF, MEM_WORKSPACE, "ace.dswiglu");
    if (s.status) goto done;
    glu_forward(a, sv->f1[0], sv->f3[0], N, d.F, d.F, GLU_SILU);
    gated_residual_backward(gx, dmod + 5 * D, df, gx, mod + 5 * D, sv->f2[0], B, T, D, M);
    if ((s.status = bwd(b->m, &b->down, da, df, a, N))) goto done;
    scratch_drop(&s, df);
    float *dg = scratch_take_zero(&s, NF, MEM_WORKSPACE, "ace.dgate");
    if (s.status) goto done;
    zero_bytes(a, (size_t)NF * sizeof(float)); /* a becomes dL/du */
    glu_backward(dg, a, da, sv->f1[0], sv->f3[0], N, d.F, d.F, GLU_SILU);
    float *ln = scratch_take(&s, ND, MEM_WORKSPACE, "ace.ln");
    float *h = scratch_take(&s, ND, MEM_WORKSPACE, "ace.h");
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "ace.dh");
    float *dout = scratch_take(&s, ND, MEM_WORKSPACE, "ace.dout");
    if (s.status || (s.status = norm_modulate(b, h, ln, x2, b->norm3, mod, 1, &stats))) goto done;
    if ((s.status = bwd(b->m, &b->gate, dh, dg, h, N)) || (s.status = bwd(b->m, &b->up, dh, a, h, N))) goto done;
    norm_modulate_back(b, gx, dmod, dh, ln, x2, b->norm3, mod, 1, &stats);
    op_state_release(&stats);
    /* cross-attention: x2 = x1 + out'(...) */
    if ((s.status = norm_modulate(b, h, ln, x1, b->norm2, NULL, 0, &stats))) goto done;
    zero_bytes(dh, (size_t)ND * sizeof(float));
    if ((s.status = side_attention_backward(&cross_att, sv, CROSS, gx, h, b->m->ctx.text, dh, b->m->ctx.dtext)))
        goto done;
    norm_modulate_back(b, gx, dmod, dh, ln, x1, b->norm2, NULL, 0, &stats);
    op_state_release(&stats);
    /* self-attention: x1 = x + gate * out(...) */
    zero_bytes(dout, (size_t)ND * sizeof(float));
    gated_residual_backward(gx, dmod + 2 * D, dout, gx, mod + 2 * D, sv->o[0], B, T, D, M);
    if ((s.status = norm_modulate(b, h, ln, x, b->norm1, mod, 0, &stats))) goto done;
    zero_bytes(dh, (size_t)ND * sizeof(float));
    if ((s.status = side_attention_backward(&self_att, sv, SELF, dout, h, h, dh, dh))) goto done;
    norm_modulate_back(b, gx, dmod, dh, ln, x, b->norm1, mod, 0, &stats);
    /* the modulations: the table's gradient and the model's projection's */
    add_to(b->m->ctx.dmod, dmod, B * M);
    for (int64_t r = 0; r < B && G(b->table); r++) add_to(G(b->table), dmod + r * M, M);
done:
    op_state_release(&stats);
    side_ffn_forget(sv, &recomputed);
    return scratch_end(&s);
}

const block_kind ace_block_kind = {
    SIDE_BLOCK_KIND("ace_step", ace_kept_bytes, ace_side_bytes, ace_forward, ace_backward)};
