/* Cosmos 3's mixture-of-transformers block (cosmos3.h): per sample, rows [0, split) are the understanding stream and
 * the rest the generation stream, each with its own weights:
 *
 *   x1 = x + out_s(attention(norm1_s(x)));   y = x1 + down_s(silu(gate_s h) up_s h),  h = norm2_s(x1)
 *
 * with s the row's stream. The attention is one over both streams (side_attention's `gen` split), grouped-query.
 *
 * Kept (unless KEEP_NOTHING): the attention side (q, k, v after norm and rotation, raw q and k, the attention's
 * output and state) and the output projections' result; with KEEP_ALL also the SwiGLU's gate and up projections and
 * its output, which torch-ffn recomputes. The norms are recomputed in backward, run by run, from the kept inputs. */
#include "models/joint/cosmos3.h"

#include "models/core/attn_side.h"

#include <stdio.h>

enum { SELF = 0 };

#define W(i) (param_at(b->m->params, (i))->w)
#define G(i) (param_at(b->m->params, (i))->g)

typedef struct dims {
    int64_t B, R, D, N, F, H, KV, hd, I, K; /* I: q's width (H hd), K: k's and v's (KV hd) */
} dims;

static dims dims_of(const mot_block *b)
{
    const model_shape *s = &b->m->shape;
    const int64_t H = s->heads, KV = b->kv_heads, hd = b->head_dim;
    return (dims){s->batch, b->rows, s->hidden, s->batch * b->rows, b->ffn, H, KV, hd, H * hd, KV * hd};
}

/* A run of rows under one stream's weights: run i is sample i / 2's understanding rows (even i) or generation rows */
typedef struct run {
    const mot_set *w;
    int64_t r0, n;
} run;

static int64_t runs_of(const mot_block *b) { return 2 * dims_of(b).B; }

static run run_at(const mot_block *b, int64_t i)
{
    const int64_t R = b->rows, at = (i / 2) * R;
    return i % 2 ? (run){&b->s[1], at + b->split, R - b->split} : (run){&b->s[0], at, b->split};
}

void mot_block_register(param_set *s, mot_block *b, const char *prefix, const model_config *c)
{
    const int64_t D = c->hidden, I = c->heads * b->head_dim, K = b->kv_heads * b->head_dim, F = b->ffn;
    const bool full = !c->lora_rank;
    static const char *const attn[2][6] = {
        {"self_attn.to_q", "self_attn.to_k", "self_attn.to_v", "self_attn.to_out", "self_attn.norm_q",
         "self_attn.norm_k"},
        {"self_attn.add_q_proj", "self_attn.add_k_proj", "self_attn.add_v_proj", "self_attn.to_add_out",
         "self_attn.norm_added_q", "self_attn.norm_added_k"}};
    for (int g = 0; g < 2; g++) { /* in Cosmos3VLTextMoTDecoderLayer's state_dict order */
        const int64_t ra = g && c->lora_attention ? c->lora_rank : 0;
        mot_set *w = &b->s[g];
        w->att.q = block_linear(s, prefix, attn[g][0], D, I, false, ra, c);
        w->att.k = block_linear(s, prefix, attn[g][1], D, K, false, ra, c);
        w->att.v = block_linear(s, prefix, attn[g][2], D, K, false, ra, c);
        w->att.out = block_linear(s, prefix, attn[g][3], I, D, false, ra, c);
        w->att.norm_q = block_norm(s, prefix, attn[g][4], b->head_dim, c);
        w->att.norm_k = block_norm(s, prefix, attn[g][5], b->head_dim, c);
    }
    static const char *const mlp[2][3] = {{"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"},
                                          {"mlp_moe_gen.gate_proj", "mlp_moe_gen.up_proj", "mlp_moe_gen.down_proj"}};
    for (int g = 0; g < 2; g++) {
        const int64_t rm = g && c->lora_mlp ? c->lora_rank : 0;
        b->s[g].gate = block_linear(s, prefix, mlp[g][0], D, F, false, rm, c);
        b->s[g].up = block_linear(s, prefix, mlp[g][1], D, F, false, rm, c);
        b->s[g].down = block_linear(s, prefix, mlp[g][2], F, D, false, rm, c);
    }
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", prefix, suffix), n)
    b->s[0].norm1 = param_add(s, NAME("input_layernorm.weight"), 1, (int64_t[]){D}, full);
    b->s[1].norm1 = param_add(s, NAME("input_layernorm_moe_gen.weight"), 1, (int64_t[]){D}, full);
    b->s[0].norm2 = param_add(s, NAME("post_attention_layernorm.weight"), 1, (int64_t[]){D}, full);
    b->s[1].norm2 = param_add(s, NAME("post_attention_layernorm_moe_gen.weight"), 1, (int64_t[]){D}, full);
#undef NAME
}

/* ---- sizes ---- */

static attn_shape self_shape(const mot_block *b)
{
    const dims d = dims_of(b);
    return (attn_shape){.batch = d.B, .tokens = d.R, .heads = d.H, .head_dim = d.hd, .kv_heads = d.KV,
                        .mechanism = b->m->shape.mechanism};
}

static size_t side_floats(const dims *d) { return (size_t)(3 * d->N * d->I + 3 * d->N * d->K); }

static size_t mb_side_bytes(const block *blk)
{
    const mot_block *b = blk->self;
    const size_t elem = side_elem(b->m);
    const dims d = dims_of(b);
    const attn_shape ss = self_shape(b);
    return side_floats(&d) * elem + attention_kept_bytes(&ss);
}

/* the side and the output projections' result; with KEEP_ALL the SwiGLU's gate, up and output */
static size_t mb_kept_bytes(const block *blk, keep_level keep)
{
    const dims d = dims_of(blk->self);
    const size_t elem = side_elem(((const mot_block *)blk->self)->m);
    return side_block_kept_bytes(mb_side_bytes(blk), self_shape(blk->self), keep, d.N * d.D,
                                 2 * d.N * d.F + d.N * d.D, elem);
}

/* ---- the streams' norms and feed-forwards, run by run ---- */

static int norm_of(const mot_set *w, int which) { return which ? w->norm2 : w->norm1; }

/* y = RMSNorm(x) w_s, branch `which` (0: before the attention, 1: before the feed-forward) */
static st_status norm_runs(const mot_block *b, float *y, const float *x, int which)
{
    const int64_t D = dims_of(b).D;
    st_status st = ST_OK;
    for (int64_t i = 0; !st && i < runs_of(b); i++) {
        const run r = run_at(b, i);
        st = rmsnorm_forward(b->m->pool, y + r.r0 * D, x + r.r0 * D, W(norm_of(r.w, which)), r.n, D, b->eps, NULL);
    }
    return st;
}

/* dx += through y = RMSNorm(x) w_s from dy, the statistics recomputed run by run; tmp: (N, D) */
static st_status norm_runs_back(const mot_block *b, float *dx, const float *dy, const float *x, int which, float *tmp)
{
    const int64_t D = dims_of(b).D;
    st_status st = ST_OK;
    for (int64_t i = 0; !st && i < runs_of(b); i++) {
        const run r = run_at(b, i);
        const int w = norm_of(r.w, which);
        op_state stats = {0};
        st = rmsnorm_forward(b->m->pool, tmp + r.r0 * D, x + r.r0 * D, W(w), r.n, D, b->eps, &stats);
        if (!st) rmsnorm_backward(dx + r.r0 * D, G(w), dy + r.r0 * D, x + r.r0 * D, W(w), r.n, D, &stats);
        op_state_release(&stats);
    }
    return st;
}

/* f1 = gate_s h, f3 = up_s h, f2 = down_s(silu(f1) f3) */
static st_status ffn_forward(const mot_block *b, scratch *s, const float *h, float *f1, float *f3, float *f2)
{
    const dims d = dims_of(b);
    float *a = scratch_take(s, d.N * d.F, MEM_WORKSPACE, "cosmos3.swiglu");
    st_status st = s->status;
    for (int64_t i = 0; !st && i < runs_of(b); i++) {
        const run r = run_at(b, i);
        st = fwd(b->m, &r.w->gate, f1 + r.r0 * d.F, h + r.r0 * d.D, r.n);
        if (!st) st = fwd(b->m, &r.w->up, f3 + r.r0 * d.F, h + r.r0 * d.D, r.n);
    }
    if (!st) glu_forward(a, f1, f3, d.N, d.F, d.F, GLU_SILU);
    for (int64_t i = 0; !st && i < runs_of(b); i++) {
        const run r = run_at(b, i);
        st = fwd(b->m, &r.w->down, f2 + r.r0 * d.D, a + r.r0 * d.F, r.n);
    }
    scratch_drop(s, a);
    return st;
}

/* dh += dL/dh from dr = dL/d(the feed-forward's output) */
static st_status ffn_backward(const mot_block *b, scratch *s, const float *dr, const float *f1, const float *f3,
                              const float *h, float *dh)
{
    const dims d = dims_of(b);
    const int64_t NF = d.N * d.F;
    float *a = scratch_take(s, NF, MEM_WORKSPACE, "cosmos3.swiglu");
    float *da = scratch_take_zero(s, NF, MEM_WORKSPACE, "cosmos3.dswiglu");
    float *dg = scratch_take_zero(s, 2 * NF, MEM_WORKSPACE, "cosmos3.dgate_up"); /* d gate, then d up */
    st_status st = s->status;
    if (!st) glu_forward(a, f1, f3, d.N, d.F, d.F, GLU_SILU);
    for (int64_t i = 0; !st && i < runs_of(b); i++) {
        const run r = run_at(b, i);
        st = bwd(b->m, &r.w->down, da + r.r0 * d.F, dr + r.r0 * d.D, a + r.r0 * d.F, r.n);
    }
    if (!st) glu_backward(dg, dg + NF, da, f1, f3, d.N, d.F, d.F, GLU_SILU);
    for (int64_t i = 0; !st && i < runs_of(b); i++) {
        const run r = run_at(b, i);
        st = bwd(b->m, &r.w->gate, dh + r.r0 * d.D, dg + r.r0 * d.F, h + r.r0 * d.D, r.n);
        if (!st) st = bwd(b->m, &r.w->up, dh + r.r0 * d.D, dg + NF + r.r0 * d.F, h + r.r0 * d.D, r.n);
    }
    scratch_drop(s, dg), scratch_drop(s, da), scratch_drop(s, a);
    return st;
}

/* ---- the attention ---- */

static void rotate_side(const void *self, float *x, bool keys, bool back)
{
    const mot_block *b = self;
    const dims d = dims_of(b);
    const int64_t heads = keys ? d.KV : d.H, width = heads * d.hd;
    for (int64_t i = 0; i < d.B; i++)
        (back ? rope_half_backward : rope_half_forward)(x + i * d.R * width, 1, d.R, heads, d.hd, width, d.R * width,
                                                        *b->rope + i * d.R * d.hd);
}

/* The understanding stream's attention weights, with the generation stream's in *gen past the split */
static side_attention attention_of(const mot_block *b, side_attention *gen)
{
    side_attention a = {.m = b->m, .norm_width = b->head_dim, .eps = b->eps, .shape = self_shape(b),
                        .mask = *b->mask, .rotate = rotate_side, .block = b, .split = b->split};
    *gen = side_attention_of(a, &b->s[1].att);
    a.gen = gen;
    return side_attention_of(a, &b->s[0].att);
}

/* ---- the block ---- */

static st_status mb_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                            block_saved **saved_io)
{
    mot_block *b = blk->self;
    const dims d = dims_of(b);
    const int64_t ND = d.N * d.D, NI = d.N * d.I, NK = d.N * d.K, NF = d.N * d.F;
    const float *x = in->t[0];
    frame f;
    block_saved *sv = frame_begin(&f, blk, b->m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y = scratch_take(&f.kept, ND, MEM_ACTIVATIONS, "cosmos3.state");
    side_take(&f, sv, (int64_t[SIDE_MAX]){NI, NK, NK, NI, NI, NK}, 1);
    sv->o[0] = scratch_take(f.ks, ND, f.kt, "cosmos3.attention_out");
    sv->f1[0] = scratch_take(f.fs, NF, f.ft, "cosmos3.gate");
    sv->f3[0] = scratch_take(f.fs, NF, f.ft, "cosmos3.up");
    sv->f2[0] = scratch_take(f.fs, ND, f.ft, "cosmos3.ff_out");
    float *h = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "cosmos3.h");
    side_attention gen;
    const side_attention a = attention_of(b, &gen);
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    if (!st) st = norm_runs(b, h, x, 0);
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) st = side_attention_forward(&a, sv, SELF, h, h, keep != KEEP_NOTHING || f.to_host);
    if (!st && f.to_host) st = side_send(sv);
    if (!st) st = side_out_forward(&a, sv->o[0], sv->side[SO]);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    if (!st) {
        copy_rows(y, d.D, x, d.D, d.N, d.D);
        add_to(y, sv->o[0], ND);
        st = norm_runs(b, h, y, 1);
    }
    if (!st) st = ffn_forward(b, &f.tmp, h, sv->f1[0], sv->f3[0], sv->f2[0]);
    if (!st) add_to(y, sv->f2[0], ND);
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

/* grad->t[0] holds dL/dy on entry and becomes dL/dx (the residuals pass through in place). */
static st_status mb_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    mot_block *b = blk->self;
    const dims d = dims_of(b);
    const int64_t ND = d.N * d.D, NF = d.N * d.F;
    const float *x = in->t[0];
    float *gx = grad->t[0];
    scratch s = side_scratch(b->m->pool, sv);
    float *h1 = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos3.h");
    float *x1 = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos3.x1");
    float *h2 = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos3.h2");
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "cosmos3.dh");
    float *tmp = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos3.norm");
    if (s.status || (s.status = norm_runs(b, h1, x, 0))) goto done;
    copy_rows(x1, d.D, x, d.D, d.N, d.D);
    add_to(x1, sv->o[0], ND);
    if ((s.status = norm_runs(b, h2, x1, 1))) goto done;
    /* the feed-forward's gate and up projections: kept (KEEP_ALL), or computed again from its input */
    const bool recompute = !sv->f1[0];
    float *f1 = recompute ? scratch_take(&s, NF, MEM_ACTIVATIONS, "cosmos3.gate (recomputed)") : sv->f1[0];
    float *f3 = recompute ? scratch_take(&s, NF, MEM_ACTIVATIONS, "cosmos3.up (recomputed)") : sv->f3[0];
    if (s.status) goto done;
    if (recompute) {
        float *f2 = scratch_take(&s, ND, MEM_WORKSPACE, "cosmos3.ff_out (recomputed)");
        if (s.status || (s.status = ffn_forward(b, &s, h2, f1, f3, f2))) goto done;
        scratch_drop(&s, f2);
    }
    /* y = x1 + ff(norm2(x1)): gx becomes dL/dx1; x1 = x + o: dL/do is dL/dx1 */
    if ((s.status = ffn_backward(b, &s, gx, f1, f3, h2, dh))) goto done;
    if ((s.status = norm_runs_back(b, gx, dh, x1, 1, tmp))) goto done;
    if (recompute) scratch_drop(&s, f3), scratch_drop(&s, f1);
    zero_bytes(dh, (size_t)ND * sizeof(float));
    side_attention gen;
    const side_attention a = attention_of(b, &gen);
    if ((s.status = side_attention_backward(&a, sv, SELF, gx, h1, h1, dh, dh))) goto done;
    s.status = norm_runs_back(b, gx, dh, x, 0, tmp);
done:
    return scratch_end(&s);
}

const block_kind mot_block_kind = {
    SIDE_BLOCK_KIND("cosmos3", mb_kept_bytes, mb_side_bytes, mb_forward, mb_backward)};
