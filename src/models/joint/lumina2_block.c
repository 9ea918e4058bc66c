/* Lumina-Image 2.0's block (lumina2.h): diffusers' Lumina2TransformerBlock, modulated (noise_refiner, layers) or
 * not (context_refiner):
 *
 *   (scale1, gate1, scale2, gate2) = norm1.linear(SiLU(temb))                          (modulated)
 *   x1 = x  + tanh(gate1) RMSNorm_2(out(attention(RMSNorm_1(x) (1 + scale1))))
 *   x2 = x1 + tanh(gate2) RMSNorm_4(w2(silu(w1 h) * w3 h)),  h = RMSNorm_3(x1) (1 + scale2)
 *
 * (without modulation: no scales, gates of 1). The four norms are affine RMSNorms (norm_eps), two of them around the
 * attention's and the feed-forward's outputs (sandwich norms); the attention has grouped queries (kv_heads), q and k
 * RMSNorm-ed per head (1e-5), rotated by interleaved pairs per sample (Lumina's positions depend on each caption's
 * length), the sequence's key mask, and no biases.
 *
 * Its styles (lumina_style): ZImageTransformerBlock is the same computation under other names, its modulation from
 * temb itself; ErnieImageSharedAdaLNBlock has no sandwich norms, shifts beside the scales, plain gates, all from one
 * modulation the model makes for every block, GEGLU (gelu(w1 h) w3 h), and its own rotary layout. OmniGen's Phi-3
 * layer has no modulation, no q/k norms, and w1 and w3 fused in one projection; Krea 2's has zero-centred norms (a
 * scale of 1 + weight), an output gate sigmoid(to_gate(h)) on the attention before out, its own table added to the
 * model's modulation, and (in its text fusion) a width, heads and attention groups of rows of its own.
 *
 * Forward keeps the modulations (with the tanh of the gates), the attention's side (q, k and v after their norms and
 * rotation, the raw q and k where norms need them), its output, state and output projection (and the output gate's
 * pre-activation), and with KEEP_ALL the feed-forward's GEMM outputs; everything pointwise is recomputed from those
 * and the block's input with the same kernels, so bitwise as forward made it. */
#include "models/joint/lumina2.h"

#include "models/core/attn_side.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* block_saved is attn_side.h's: the attention's side in SQ .. SKR with state 0 and output projection o[0], the
 * modulations (B, LUMINA_MOD D) in mod[0], the feed-forward's GEMM outputs in f1[0] (w1), f3[0] (w3), f2[0] (w2). */
enum { SELF = 0 };

typedef struct dims {
    int64_t B, R, D, K, N, F, M, H, hd; /* R: rows per sample; K: k and v's width; M: a sample's modulations */
} dims;

static dims dims_of(const lumina_block *b)
{
    const model_shape *s = &b->m->shape;
    const int64_t D = b->width ? b->width : s->hidden, H = b->heads ? b->heads : s->heads, hd = D / H;
    return (dims){s->batch, b->rows, D, hd * b->kv_heads, s->batch * b->rows, b->ffn, b->style->mod_rows * D, H, hd};
}

/* Whether the block makes its own modulation rows (from temb, or the model's plus its table), kept with its state */
static bool own_mod(const lumina_block *b) { return b->modulated && (!b->style->shared_mod || b->style->mod_table); }

#define W(i) (param_at(b->m->params, (i))->w)
#define G(i) (param_at(b->m->params, (i))->g)

static attn_shape self_shape(const lumina_block *b)
{
    dims d = dims_of(b);
    const int64_t group = b->attn_rows ? b->attn_rows : d.R; /* each group of rows attends within itself */
    return (attn_shape){.batch = d.B * (d.R / group), .tokens = group, .heads = d.H, .head_dim = d.hd,
                        .mechanism = b->m->shape.mechanism, .kv_heads = b->kv_heads};
}

/* Lumina's, Z-Image's and Ideogram 4's: sandwich norms and modulation rows of a zero shift for both, scale1,
 * tanh(gate1), scale2, tanh(gate2); Ideogram 4's is Z-Image's computation under its names, with rotate-half pairs (its
 * MRoPE) */
#define LUMINA_MOD .sandwich = true, .glu = GLU_SILU, .qk_eps = 1e-5f, .mod_rows = 5, .at = {0, 1, 2, 0, 3, 4}
#define ZIMAGE_NAMES(ada)                                                                                             \
    {"attention.to_q", "attention.to_k", "attention.to_v", "attention.to_out.0", "attention.norm_q",                  \
     "attention.norm_k", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3", ada, "attention_norm1.weight",      \
     "attention_norm1.weight", "attention_norm2.weight", "ffn_norm1.weight", "ffn_norm2.weight", NULL, NULL}
const lumina_style lumina2_style = {
    {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.norm_q", "attn.norm_k", "feed_forward.linear_1",
     "feed_forward.linear_2", "feed_forward.linear_3", "norm1.linear", "norm1.norm.weight", "norm1.weight",
     "norm2.weight", "ffn_norm1.weight", "ffn_norm2.weight", NULL, NULL},
    LUMINA_MOD, .rope = ROPE_INTERLEAVED};
const lumina_style zimage_style = {ZIMAGE_NAMES("adaLN_modulation.0"), LUMINA_MOD, .rope = ROPE_INTERLEAVED};
const lumina_style ideogram_style = {ZIMAGE_NAMES("adaln_modulation"), LUMINA_MOD, .rope = ROPE_HALF};
/* ERNIE's: its adaLN_modulation's six chunks as they are */
const lumina_style ernie_style = {
    {"self_attention.to_q", "self_attention.to_k", "self_attention.to_v", "self_attention.to_out.0",
     "self_attention.norm_q", "self_attention.norm_k", "mlp.gate_proj", "mlp.linear_fc2", "mlp.up_proj", NULL,
     "adaLN_sa_ln.weight", "adaLN_sa_ln.weight", NULL, "adaLN_mlp_ln.weight", NULL, NULL, NULL},
    false, true, ROPE_REPEATED, GLU_GELU_ERF, 0, 6, {0, 1, 2, 3, 4, 5}, false, false};
/* OmniGen's Phi-3 block: no modulation, no q/k norms, rotate-half pairs, gate and up fused in one projection */
const lumina_style omnigen_style = {
    {"self_attn.to_q", "self_attn.to_k", "self_attn.to_v", "self_attn.to_out.0", NULL, NULL, "mlp.gate_up_proj",
     "mlp.down_proj", NULL, NULL, NULL, "input_layernorm.weight", NULL, "post_attention_layernorm.weight", NULL, NULL,
     NULL},
    false, false, ROPE_HALF, GLU_SILU, 0, 0, {0}, false, false};
/* Krea 2's: zero-centred RMSNorms, an output gate on the attention, and a table per block over the model's
 * modulation (prescale, preshift, pregate, postscale, postshift, postgate) */
const lumina_style krea2_style = {
    {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.norm_q", "attn.norm_k", "ff.gate", "ff.down",
     "ff.up", NULL, "norm1.weight", "norm1.weight", NULL, "norm2.weight", NULL, "attn.to_gate", "scale_shift_table"},
    false, true, ROPE_INTERLEAVED, GLU_SILU, 0, 6, {1, 0, 2, 4, 3, 5}, true, true};

void lumina_block_register(param_set *s, lumina_block *b, const char *prefix, const model_config *c)
{
    const bool full = !c->lora_rank;
    const int64_t D = b->width ? b->width : c->hidden, hd = D / (b->heads ? b->heads : c->heads), K = hd * b->kv_heads;
    const lumina_names *nm = &b->style->names;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    b->att.q = block_linear(s, prefix, nm->q, D, D, false, ra, c);
    b->att.k = block_linear(s, prefix, nm->k, D, K, false, ra, c);
    b->att.v = block_linear(s, prefix, nm->v, D, K, false, ra, c);
    b->att.out = block_linear(s, prefix, nm->out, D, D, false, ra, c);
    b->att.norm_q = nm->norm_q ? block_norm(s, prefix, nm->norm_q, hd, c) : -1;
    b->att.norm_k = nm->norm_k ? block_norm(s, prefix, nm->norm_k, hd, c) : -1;
    b->w1 = block_linear(s, prefix, nm->w1, D, nm->w3 ? b->ffn : 2 * b->ffn, false, rm, c);
    b->w2 = block_linear(s, prefix, nm->w2, b->ffn, D, false, rm, c);
    b->w3 = nm->w3 ? block_linear(s, prefix, nm->w3, D, b->ffn, false, rm, c) : (lin_layer){.w = -1};
    if (b->modulated && !b->style->shared_mod) b->ada = block_linear(s, prefix, nm->ada, b->ada_in, 4 * D, true, 0, c);
    b->gate = nm->gate ? block_linear(s, prefix, nm->gate, D, D, false, 0, c) : (lin_layer){.w = -1};
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", prefix, suffix), n)
    b->table = b->modulated && b->style->mod_table
                   ? param_add(s, NAME(nm->table), 2, (int64_t[]){b->style->mod_rows, D}, full) : -1;
    b->norm1 = param_add(s, NAME(b->modulated ? nm->norm1_modulated : nm->norm1), 1, (int64_t[]){D}, full);
    if (b->style->sandwich) b->norm2 = param_add(s, NAME(nm->norm2), 1, (int64_t[]){D}, full);
    b->ffn_norm1 = param_add(s, NAME(nm->ffn_norm1), 1, (int64_t[]){D}, full);
    if (b->style->sandwich) b->ffn_norm2 = param_add(s, NAME(nm->ffn_norm2), 1, (int64_t[]){D}, full);
#undef NAME
}

/* ---- sizes ---- */

/* the side: q, raw q (with q's norm) and o (D wide); k, raw k (with k's norm) and v; beside it the modulations and
 * the output projection (and the output gate's input) */
static size_t lb_side_bytes(const block *blk)
{
    const lumina_block *b = blk->self;
    const size_t elem = side_elem(b->m);
    dims d = dims_of(b);
    const attn_shape ss = self_shape(b);
    const int64_t raw = b->att.norm_q >= 0;
    return (size_t)((2 + raw) * d.N * d.D + (2 + raw) * d.N * d.K) * elem + attention_kept_bytes(&ss);
}

static size_t lb_kept_bytes(const block *blk, keep_level keep)
{
    const lumina_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t gate = b->gate.w >= 0; /* the output gate's pre-activation (N, D) */
    const size_t elem = side_elem(b->m);
    return side_block_kept_bytes(lb_side_bytes(blk), self_shape(b), keep,
                                 (own_mod(b) ? d.B * d.M : 0) + (1 + gate) * d.N * d.D, 2 * d.N * d.F + d.N * d.D, elem);
}

/* ---- pieces run in forward and again in backward ---- */

/* mod (B, M): a zero shift, scale1, tanh(gate1), scale2, tanh(gate2) from norm1.linear(SiLU(temb)); with a table,
 * the model's modulation plus the block's table */
static st_status modulations(const lumina_block *b, float *mod)
{
    dims d = dims_of(b);
    if (b->style->mod_table) {
        copy_rows(mod, d.M, b->m->ctx.mod, d.M, d.B, d.M), add_row(mod, W(b->table), d.B, d.M);
        return ST_OK;
    }
    scratch s = {.pool = b->m->pool};
    float *raw = scratch_take(&s, d.B * 4 * d.D, MEM_WORKSPACE, "lumina.ada");
    if (!s.status) s.status = fwd(b->m, &b->ada, raw, b->m->ctx.cs, d.B);
    if (!s.status) /* the scales as they are */
        copy_rows(mod + d.D, d.M, raw, 4 * d.D, d.B, d.D),
            copy_rows(mod + 3 * d.D, d.M, raw + 2 * d.D, 4 * d.D, d.B, d.D);
    for (int64_t i = 0; !s.status && i < d.B; i++) { /* the shift zero, the gates through tanh */
        float *row = mod + i * d.M;
        const float *r = raw + i * 4 * d.D;
        zero_floats(row, d.D), tanh_forward(row + 2 * d.D, r + d.D, d.D), tanh_forward(row + 4 * d.D, r + 3 * d.D, d.D);
    }
    return scratch_end(&s);
}

/* A modulation row of branch `which` (0: the attention's, 1: the feed-forward's; k: 0 shift, 1 scale, 2 gate) */
static int64_t row_of(const lumina_block *b, int which, int k)
{
    return b->style->at[3 * which + k] * b->m->shape.hidden;
}

/* h = RMSNorm_w(x) (1 + scale) + shift of branch `which`, or the norm alone without mod; ln, if not NULL, gets the
 * norm's output; its stats kept when asked */
static st_status norm_mod(const lumina_block *b, float *h, float *ln, const float *x, int w, const float *mod,
                          int which, op_state *stats)
{
    dims d = dims_of(b);
    float *y = ln ? ln : h;
    st_status st = (b->style->zero_centred ? rmsnorm_zc_forward : rmsnorm_forward)(b->m->pool, y, x, W(w), d.N, d.D,
                                                                                  b->eps, stats);
    if (!st && mod)
        modulate_forward(h, y, mod + row_of(b, which, 0), mod + row_of(b, which, 1), d.B, d.R, d.D, d.M);
    else if (!st && ln) copy_rows(h, d.D, ln, d.D, d.N, d.D);
    return st;
}

/* dx += through h = RMSNorm_w(x) (1 + scale) + shift: dh (overwritten), the scale's and shift's gradients into dmod
 * (Lumina's shift row is a constant zero: what lands there is not used) */
static st_status norm_mod_back(const lumina_block *b, float *dx, float *dmod, float *dh, const float *ln,
                               const float *x, int w, const float *mod, int which, const op_state *stats)
{
    dims d = dims_of(b);
    if (mod)
        modulate_backward(dh, dmod + row_of(b, which, 0), dmod + row_of(b, which, 1), dh, ln,
                          mod + row_of(b, which, 1), d.B, d.R, d.D, d.M);
    if (b->style->zero_centred) return rmsnorm_zc_backward(b->m->pool, dx, G(w), dh, x, W(w), d.N, d.D, stats);
    rmsnorm_backward(dx, G(w), dh, x, W(w), d.N, d.D, stats);
    return ST_OK;
}

/* The per-sample rotation of q (the query heads) or k (the kv heads) */
static void rotate_side(const void *self, float *x, bool keys, bool back)
{
    const lumina_block *b = self;
    dims d = dims_of(b);
    const int64_t heads = keys ? b->kv_heads : d.H, w = heads * d.hd;
    for (int64_t i = 0; i < d.B; i++) {
        float *xb = x + i * d.R * w;
        const float *tab = *b->rope + i * d.R * d.hd;
        static void (*const turn[3][2])(float *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                         const float *) = {{rope_forward, rope_backward},
                                                           {rope_half_forward, rope_half_backward},
                                                           {rope_repeated_forward, rope_repeated_backward}};
        turn[b->style->rope][back](xb, 1, d.R, heads, d.hd, w, d.R * w, tab);
    }
}

static side_attention attention_of(const lumina_block *b)
{
    const side_attention a = {.m = b->m, .norm_width = dims_of(b).hd,
                              .eps = b->style->qk_eps ? b->style->qk_eps : b->eps,
                              .zero_centred = b->style->zero_centred, .shape = self_shape(b), .mask = *b->mask,
                              .rotate = *b->rope ? rotate_side : NULL, .block = b};
    return side_attention_of(a, &b->att);
}

/* f1 = w1 h, f3 = w3 h, f2 = w2(act(f1) f3), h = RMSNorm_3(x1) (1 + scale2) + shift2 */
static st_status ffn_compute(const lumina_block *b, const float *x1, const float *mod, float *f1, float *f3, float *f2)
{
    dims d = dims_of(b);
    scratch s = {.pool = b->m->pool};
    float *h = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "lumina.ffn.h");
    if (!s.status) s.status = norm_mod(b, h, NULL, x1, b->ffn_norm1, mod, 1, NULL);
    glu_ffn_forward(&s, b->m, &b->w1, b->w3.w < 0 ? NULL : &b->w3, &b->w2, h, d.N, d.F, b->style->glu, f1, f3, f2,
                    "lumina.ffn.swiglu");
    return scratch_end(&s);
}

/* y = x + gate r (branch `which`'s gate: tanh-ed by modulations for Lumina's), or x + r without mod */
static void residual(const lumina_block *b, float *y, const float *x, const float *r, const float *mod, int which)
{
    dims d = dims_of(b);
    if (mod) {
        gated_residual_forward(y, x, mod + row_of(b, which, 2), r, d.B, d.R, d.D, d.M);
        return;
    }
    if (y != x) copy_rows(y, d.D, x, d.D, d.N, d.D);
    add_to(y, r, d.N * d.D);
}

/* The modulation a block reads: its own (saved), the model's shared one, or none */
static const float *mod_of(const lumina_block *b, const block_saved *sv)
{
    return !b->modulated ? NULL : own_mod(b) ? sv->mod[0] : b->m->ctx.mod;
}

/* A branch's output from o (the attention's output projection, or w2's): RMSNorm_w(o) into r with sandwich norms,
 * else o itself; *out points at it */
static st_status branch(const lumina_block *b, float *r, const float *o, int w, op_state *stats, const float **out)
{
    dims d = dims_of(b);
    *out = b->style->sandwich ? r : o;
    return b->style->sandwich ? rmsnorm_forward(b->m->pool, r, o, W(w), d.N, d.D, b->eps, stats) : ST_OK;
}

/* do += dL/do from g = dL/d(branch's output) */
static void branch_back(const lumina_block *b, float *dout, const float *g, const float *o, int w,
                        const op_state *stats)
{
    dims d = dims_of(b);
    if (b->style->sandwich) rmsnorm_backward(dout, G(w), g, o, W(w), d.N, d.D, stats);
    else add_to(dout, g, d.N * d.D);
}

/* ---- the block ---- */

/* attn_side.h's three cases: a plain forward at a keep level; a first forward with off, which sends the attention's
 * side to the host; a recompute after it, which takes it back. */
static st_status lb_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                            block_saved **saved_io)
{
    lumina_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t ND = d.N * d.D, NK = d.N * d.K;
    const float *x = in->t[0];
    frame f;
    block_saved *sv = frame_begin(&f, blk, b->m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y = scratch_take(&f.kept, ND, MEM_ACTIVATIONS, "lumina.state");
    if (own_mod(b)) sv->mod[0] = scratch_take(f.ks, d.B * d.M, f.kt, "lumina.mod");
    const bool raw = b->att.norm_q >= 0, fused = b->w3.w < 0;
    side_take(&f, sv, (int64_t[SIDE_MAX]){ND, NK, NK, ND, raw ? ND : 0, raw ? NK : 0}, 1);
    sv->o[0] = scratch_take(f.ks, ND, f.kt, "lumina.attention_out");
    sv->f1[0] = scratch_take(f.fs, (1 + fused) * d.N * d.F, f.ft, "lumina.linear_1");
    sv->f3[0] = fused ? NULL : scratch_take(f.fs, d.N * d.F, f.ft, "lumina.linear_3");
    sv->f2[0] = scratch_take(f.fs, ND, f.ft, "lumina.linear_2");
    const bool gated = b->gate.w >= 0;
    if (gated) sv->o2 = scratch_take(f.ks, ND, f.kt, "lumina.to_gate");
    float *h = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "lumina.h");
    float *ga = gated ? scratch_take(&f.tmp, ND, MEM_WORKSPACE, "lumina.gated") : NULL;
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    const bool states = keep != KEEP_NOTHING || f.to_host;
    const float *mod = mod_of(b, sv);
    if (!st && own_mod(b)) st = modulations(b, sv->mod[0]);
    if (!st && own_mod(b)) side_made(b->m, sv->mod[0], d.B * d.M); /* as PyTorch's bf16 modulation */
    if (!st && f.from_host) st = side_back(sv);
    if (!st && (!f.from_host || gated)) st = norm_mod(b, h, NULL, x, b->norm1, mod, 0, NULL); /* the gate reads it */
    if (!st && !f.from_host) {
        const side_attention a = attention_of(b);
        st = side_attention_forward(&a, sv, SELF, h, h, states);
    }
    if (!st && f.to_host) st = side_send(sv);
    const float *att = sv->side[SQ + SO];
    if (!st && gated) { /* Krea 2: the attention's output times sigmoid(to_gate(h)) */
        st = fwd(b->m, &b->gate, sv->o2, h, d.N);
        glu_forward(ga, sv->o2, att, d.N, d.D, d.D, GLU_SIGMOID);
        att = ga;
    }
    if (!st) st = fwd(b->m, &b->att.out, sv->o[0], att, d.N);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    const float *r = NULL;
    if (!st) st = branch(b, h, sv->o[0], b->norm2, NULL, &r);
    if (!st) {
        residual(b, y, x, r, mod, 0); /* x1 */
        st = ffn_compute(b, y, mod, sv->f1[0], sv->f3[0], sv->f2[0]);
    }
    if (!st) st = branch(b, h, sv->f2[0], b->ffn_norm2, NULL, &r);
    if (!st) residual(b, y, y, r, mod, 1);
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

/* A residual's branch back: dr (zero on entry) = dL/dr from gx = dL/dy, and the gate's gradient into dmod; without
 * mod, dr is gx itself (returned) */
static const float *residual_back(const lumina_block *b, float *gx, float *dmod, float *dr, const float *r,
                                  const float *mod, int which)
{
    dims d = dims_of(b);
    if (!mod) return gx;
    gated_residual_backward(gx, dmod + row_of(b, which, 2), dr, gx, mod + row_of(b, which, 2), r, d.B, d.R, d.D, d.M);
    return dr;
}

/* grad->t[0] holds dL/dx2 on entry; the residual stream's gradient is accumulated in place, becoming dL/dx1 and
 * dL/dx. */
static st_status lb_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    lumina_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t N = d.N, D = d.D, ND = N * D, NF = N * d.F;
    const float *x = in->t[0];
    float *gx = grad->t[0];
    op_state stats = {0}, rstats = {0};
    bool recomputed = false;
    scratch s = side_scratch(b->m->pool, sv);
    const float *mod = mod_of(b, sv); /* as side_scratch has widened it */
    float *dmod = b->modulated ? scratch_take_zero(&s, d.B * d.M, MEM_WORKSPACE, "lumina.dmod") : NULL;
    float *x1 = scratch_take(&s, ND, MEM_WORKSPACE, "lumina.x1");
    float *r = scratch_take(&s, ND, MEM_WORKSPACE, "lumina.r");
    float *dr = scratch_take_zero(&s, ND, MEM_WORKSPACE, "lumina.dr");
    float *dy = scratch_take_zero(&s, ND, MEM_WORKSPACE, "lumina.dy");
    if (s.status) goto done;
    const float *br = NULL;
    if ((s.status = branch(b, r, sv->o[0], b->norm2, NULL, &br))) goto done;
    residual(b, x1, x, br, mod, 0);
    /* the feed-forward's gate and up inputs: w1's and w3's outputs, or the halves of a fused w1's rows */
    const bool fused = b->w3.w < 0;
    const int64_t ld = fused ? 2 * d.F : d.F;
    if (!sv->f1[0]) { /* KEEP_ATTENTION: recompute the feed-forward's GEMM outputs from x1 */
        sv->f1[0] = scratch_take(&s, (1 + fused) * NF, MEM_ACTIVATIONS, "lumina.linear_1 (recomputed)");
        if (!fused) sv->f3[0] = scratch_take(&s, NF, MEM_ACTIVATIONS, "lumina.linear_3 (recomputed)");
        sv->f2[0] = scratch_take(&s, ND, MEM_ACTIVATIONS, "lumina.linear_2 (recomputed)");
        recomputed = true;
        if (s.status || (s.status = ffn_compute(b, x1, mod, sv->f1[0], sv->f3[0], sv->f2[0]))) goto done;
    }
    /* feed-forward: x2 = x1 + tanh(gate2) RMSNorm_4(f2) */
    if ((s.status = branch(b, r, sv->f2[0], b->ffn_norm2, &rstats, &br))) goto done;
    branch_back(b, dy, residual_back(b, gx, dmod, dr, br, mod, 1), sv->f2[0], b->ffn_norm2, &rstats); /* dL/df2 */
    op_state_release(&rstats);
    const float *gate = sv->f1[0], *up = fused ? sv->f1[0] + d.F : sv->f3[0];
    float *a = scratch_take(&s, NF, MEM_WORKSPACE, "lumina.swiglu");
    float *da = scratch_take_zero(&s, NF, MEM_WORKSPACE, "lumina.dswiglu");
    if (s.status) goto done;
    glu_forward(a, gate, up, N, d.F, ld, b->style->glu);
    if ((s.status = bwd(b->m, &b->w2, da, dy, a, N))) goto done;
    if (fused) scratch_drop(&s, a), a = NULL;
    else zero_bytes(a, (size_t)NF * sizeof(float)); /* a becomes dL/df3 */
    float *df1 = scratch_take_zero(&s, (1 + fused) * NF, MEM_WORKSPACE, "lumina.dlinear_1"); /* fused: both halves */
    if (s.status) goto done;
    glu_backward(df1, fused ? df1 + d.F : a, da, gate, up, N, d.F, ld, b->style->glu);
    scratch_drop(&s, da);
    float *ln = scratch_take(&s, ND, MEM_WORKSPACE, "lumina.ln");
    float *h = scratch_take(&s, ND, MEM_WORKSPACE, "lumina.h");
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "lumina.dh");
    if (s.status || (s.status = norm_mod(b, h, ln, x1, b->ffn_norm1, mod, 1, &stats))) goto done;
    if ((s.status = bwd(b->m, &b->w1, dh, df1, h, N)) || (!fused && (s.status = bwd(b->m, &b->w3, dh, a, h, N))))
        goto done;
    if (a) scratch_drop(&s, a);
    scratch_drop(&s, df1);
    if ((s.status = norm_mod_back(b, gx, dmod, dh, ln, x1, b->ffn_norm1, mod, 1, &stats))) goto done;
    op_state_release(&stats);
    side_ffn_drop(sv, &s, &recomputed);
    /* attention: x1 = x + tanh(gate1) RMSNorm_2(o) */
    if ((s.status = branch(b, r, sv->o[0], b->norm2, &rstats, &br))) goto done;
    zero_bytes(dr, (size_t)ND * sizeof(float));
    zero_bytes(dy, (size_t)ND * sizeof(float));
    branch_back(b, dy, residual_back(b, gx, dmod, dr, br, mod, 0), sv->o[0], b->norm2, &rstats); /* dy: dL/do */
    op_state_release(&rstats);
    if ((s.status = norm_mod(b, h, ln, x, b->norm1, mod, 0, &stats))) goto done;
    zero_bytes(dh, (size_t)ND * sizeof(float));
    side_attention at = attention_of(b);
    if (b->gate.w >= 0) { /* back through to_out, then the gate: dy becomes dL/d(the attention's output) */
        float *ga = scratch_take(&s, ND, MEM_WORKSPACE, "lumina.gated");
        float *dga = scratch_take_zero(&s, ND, MEM_WORKSPACE, "lumina.dgated");
        float *dg = scratch_take_zero(&s, ND, MEM_WORKSPACE, "lumina.dto_gate");
        if (s.status) goto done;
        glu_forward(ga, sv->o2, sv->side[SO], N, D, D, GLU_SIGMOID);
        if ((s.status = bwd(b->m, &b->att.out, dga, dy, ga, N))) goto done;
        zero_bytes(dy, (size_t)ND * sizeof(float));
        glu_backward(dg, dy, dga, sv->o2, sv->side[SO], N, D, D, GLU_SIGMOID);
        if ((s.status = bwd(b->m, &b->gate, dh, dg, h, N))) goto done;
        scratch_drop(&s, dg), scratch_drop(&s, dga), scratch_drop(&s, ga);
        at.out = NULL;
    }
    if ((s.status = side_attention_backward(&at, sv, SELF, dy, h, h, dh, dh))) goto done;
    if ((s.status = norm_mod_back(b, gx, dmod, dh, ln, x, b->norm1, mod, 0, &stats))) goto done;
    if (b->modulated && b->style->shared_mod) { /* the model's to take back; a table's, summed over the batch */
        add_to(b->m->ctx.dmod, dmod, d.B * d.M);
        float *dt = b->table >= 0 ? G(b->table) : NULL;
        for (int64_t i = 0; dt && i < d.B; i++) add_to(dt, dmod + i * d.M, d.M);
    }
    else if (b->modulated) { /* back to norm1.linear's output: the scales as they are, the gates through tanh */
        float *draw = scratch_take(&s, d.B * 4 * D, MEM_WORKSPACE, "lumina.dada");
        if (s.status) goto done;
        for (int q = 0; q < 4; q++) copy_rows(draw + q * D, 4 * D, dmod + (q + 1) * D, d.M, d.B, D);
        for (int64_t i = 0; i < d.B; i++) {
            float *o = draw + i * 4 * D;
            tanh_backward(o + D, o + D, mod + i * d.M + 2 * D, D);
            tanh_backward(o + 3 * D, o + 3 * D, mod + i * d.M + 4 * D, D);
        }
        s.status = bwd(b->m, &b->ada, b->m->ctx.dcs, draw, b->m->ctx.cs, d.B);
    }
done:
    op_state_release(&stats);
    op_state_release(&rstats);
    side_ffn_forget(sv, &recomputed);
    return scratch_end(&s);
}

const block_kind lumina_block_kind = {
    SIDE_BLOCK_KIND("lumina2", lb_kept_bytes, lb_side_bytes, lb_forward, lb_backward)};
