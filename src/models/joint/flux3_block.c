/* Flux.3's and Qwen-Image 2.1's blocks (flux3.h): LayerNorm-modulated attention and SwiGLU over a sequence's rows,
 * with the modulation the model gives each set of rows. Flux.3's (Flux3ModeTransformerBlock and
 * Flux3SingleTransformerBlock) run attention and feed-forward in parallel from the same modulated input:
 *
 *   h = LN(x) (1 + scale) + shift;   y = x + gate (to_out(attention(h)) + ff(h))
 *
 * Qwen-Image 2.1's (QwenImage21TransformerBlock, `sequential`) one after the other, each on its own LayerNorm:
 *
 *   x1 = x + gate1 to_out(attention(LN(x) (1 + scale1) + shift1));   y = x1 + gate2 ff(LN(x1) (1 + scale2) + shift2)
 *
 * LN is a LayerNorm without affine (eps); q and k are RMSNorm-ed per head (with weights) and turned by the
 * sequence's interleaved rotary table; the attention takes the sequence's mask, if any; ff is a SwiGLU (Flux.3's
 * linear_in fused, its gate half first; Qwen-Image 2.1's gate_layer and proj apart); nothing has a bias. A set's
 * modulation rows are (shift, scale, gate), twice when sequential; the model makes them (Qwen-Image 2.1's shifts are
 * zero and its gates already tanh-ed). A block's rows all read one set, or with `split` its first rows (the text)
 * set 0 and the rest set 1.
 *
 * MiniMax-H3's (`minimax`: MiniMaxH3TransformerBlock, sequential) put RMSNorms with weights for the LayerNorms,
 * widen q, k and v to heads x head width (more than D), turn the first `rot` channels of each head by rotate-half
 * pairs, fuse the SwiGLU's projection value half first, and make their own modulation (adaln_proj.linear, a set for
 * each modality); its token refiner's (`plain`) have no modulation at all.
 *
 * Kept (unless KEEP_NOTHING): the attention side (q, k, v after norm and rotation, the raw q and k, the attention's
 * output and state) and to_out's output; with KEEP_ALL also the feed-forward's GEMM outputs, which torch-ffn
 * recomputes. Recompute runs the same kernels on the same inputs, so it is bitwise forward's. */
#include "models/joint/flux3.h"

#include "models/core/attn_side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SELF = 0 };

typedef struct dims {
    int64_t B, R, D, N, F, H, hd, W, I; /* W: a set's modulation width; I: the attention's (heads x hd) */
} dims;

static dims dims_of(const f3_block *b)
{
    const model_shape *s = &b->m->shape;
    const int64_t I = b->inner ? b->inner : s->hidden;
    return (dims){s->batch, b->rows, s->hidden, s->batch * b->rows, b->ffn, s->heads, I / s->heads,
                  (b->sequential ? 6 : 3) * s->hidden, I};
}

static bool fused(const f3_block *b) { return b->ff_up.w < 0; }

#define W(i) (param_at(b->m->params, (i))->w)
#define G(i) (param_at(b->m->params, (i))->g)

void f3_block_register(param_set *s, f3_block *b, const char *prefix, const model_config *c, bool used)
{
    const int64_t D = c->hidden, I = b->inner ? b->inner : D, hd = I / c->heads, F = b->ffn;
    const int64_t ra = used && c->lora_attention ? c->lora_rank : 0, rm = used && c->lora_mlp ? c->lora_rank : 0;
    const float alpha = (float)c->lora_alpha;
    const bool trainable = used && !c->lora_rank; /* the base weights; LoRA's adapters (ra, rm) train otherwise */
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", prefix, suffix), n)
    /* in the state_dict's order: MiniMaxH3TransformerBlock's norms before the attention and the feed-forward */
    if (b->minimax) b->norm1 = param_add(s, NAME("norm1.weight"), 1, (int64_t[]){D}, trainable);
    b->att.q = lin_register(s, NAME("attn.to_q"), D, I, false, ra, alpha, trainable);
    b->att.k = lin_register(s, NAME("attn.to_k"), D, I, false, ra, alpha, trainable);
    b->att.v = lin_register(s, NAME("attn.to_v"), D, I, false, ra, alpha, trainable);
    b->att.norm_q = param_add(s, NAME("attn.norm_q.weight"), 1, (int64_t[]){hd}, trainable);
    b->att.norm_k = param_add(s, NAME("attn.norm_k.weight"), 1, (int64_t[]){hd}, trainable);
    b->att.out = lin_register(s, NAME("attn.to_out.0"), I, D, false, ra, alpha, trainable);
    b->ff_up = (lin_layer){.w = -1};
    if (b->minimax) {
        b->norm2 = param_add(s, NAME("norm2.weight"), 1, (int64_t[]){D}, trainable);
        b->ff_in = lin_register(s, NAME("ff.net.0.proj"), D, 2 * F, false, rm, alpha, trainable);
        b->ff_out = lin_register(s, NAME("ff.net.2"), F, D, false, rm, alpha, trainable);
        if (b->tagged)
            b->ada = lin_register(s, NAME("adaln_proj.linear"), c->time_dim, 3 * 6 * D, true, 0, 0, trainable);
    } else if (b->sequential) { /* QwenImage21SwiGLUFeedForward: out(silu(gate_layer h) proj h) */
        b->ff_up = lin_register(s, NAME("img_mlp.proj"), D, F, false, rm, alpha, trainable);
        b->ff_out = lin_register(s, NAME("img_mlp.out"), F, D, false, rm, alpha, trainable);
        b->ff_in = lin_register(s, NAME("img_mlp.gate_layer"), D, F, false, rm, alpha, trainable);
    } else {
        b->ff_in = lin_register(s, NAME("ff.linear_in"), D, 2 * F, false, rm, alpha, trainable);
        b->ff_out = lin_register(s, NAME("ff.linear_out"), F, D, false, rm, alpha, trainable);
    }
#undef NAME
}

/* ---- sizes ---- */

static attn_shape self_shape(const f3_block *b)
{
    const dims d = dims_of(b);
    return (attn_shape){.batch = d.B, .tokens = d.R, .heads = d.H, .head_dim = d.hd,
                        .mechanism = b->m->shape.mechanism};
}

/* the side (q, k, v, o, raw q, raw k) and to_out's output; with KEEP_ALL the feed-forward's GEMM outputs */
static size_t fb_kept_bytes(const block *blk, keep_level keep)
{
    const dims d = dims_of(blk->self);
    return side_kept_bytes(self_shape(blk->self), keep, d.N * d.D, 2 * d.N * d.F + d.N * d.D,
                           side_elem(((const f3_block *)blk->self)->m));
}

static size_t fb_offloaded_bytes(const block *blk)
{
    return side_self_bytes(self_shape(blk->self), side_elem(((const f3_block *)blk->self)->m));
}

/* ---- the modulation, set by set ---- */

/* A set's rows of sample i, [r0, r1), and where its rows start in the (B, sets, W) modulation */
typedef struct group {
    int64_t r0, r1, at;
} group;

static int sets_of(const f3_block *b) { return b->tagged ? 3 : b->split ? 2 : 1; }

static int groups_of(const f3_block *b, int64_t i, group g[2])
{
    const dims d = dims_of(b);
    const int sets = sets_of(b), text = b->tagged ? 1 : 0, rest = b->tagged ? 0 : 1;
    if (!b->split) {
        g[0] = (group){0, d.R, i * sets * d.W};
        return 1;
    }
    g[0] = (group){0, b->split, (i * sets + text) * d.W};
    g[1] = (group){b->split, d.R, (i * sets + rest) * d.W};
    return 2;
}

/* The block's modulation (B, sets, W): its own adaln_proj's (tagged), the model's, or none (plain) */
static st_status mod_of(const f3_block *b, scratch *s, const float **mod)
{
    const dims d = dims_of(b);
    *mod = b->plain || b->tagged ? NULL : *b->mod;
    if (!b->tagged) return ST_OK;
    float *own = scratch_take(s, d.B * sets_of(b) * d.W, MEM_WORKSPACE, "flux3.modulation");
    if (s->status) return s->status;
    *mod = own;
    return fwd(b->m, &b->ada, own, b->m->ctx.cs, d.B);
}

/* ln = LN(x), or RMSNorm(x) w (minimax; branch 0's weight norm1, 1's norm2), its statistics kept when asked */
static st_status norm_of(const f3_block *b, float *ln, const float *x, int which, op_state *stats)
{
    const dims d = dims_of(b);
    if (b->minimax) return rmsnorm_forward(b->m->pool, ln, x, W(which ? b->norm2 : b->norm1), d.N, d.D, b->eps, stats);
    return layernorm_forward(b->m->pool, ln, x, NULL, NULL, d.N, d.D, b->eps, stats);
}

/* h = ln (1 + scale) + shift of branch `which` (0: the attention's, 1: the feed-forward's), ln = norm(x) */
static st_status norm_mod(const f3_block *b, const float *mod, float *h, float *ln, const float *x, int which,
                          op_state *stats)
{
    const dims d = dims_of(b);
    st_status st = norm_of(b, ln, x, which, stats);
    if (!st && !mod) copy_rows(h, d.D, ln, d.D, d.N, d.D);
    for (int64_t i = 0; !st && mod && i < d.B; i++) {
        group g[2];
        for (int k = 0, n = groups_of(b, i, g); k < n; k++) {
            const int64_t at = (i * d.R + g[k].r0) * d.D;
            const float *m = mod + g[k].at + which * 3 * d.D;
            modulate_forward(h + at, ln + at, m, m + d.D, 1, g[k].r1 - g[k].r0, d.D, 3 * d.D);
        }
    }
    return st;
}

/* dx += through h = norm(x) (1 + scale) + shift of branch `which`: dh (overwritten), the shifts' and scales'
 * gradients into dmod */
static void norm_mod_back(const f3_block *b, const float *mod, float *dx, float *dmod, float *dh, const float *ln,
                          const float *x, int which, const op_state *stats)
{
    const dims d = dims_of(b);
    for (int64_t i = 0; mod && i < d.B; i++) {
        group g[2];
        for (int k = 0, n = groups_of(b, i, g); k < n; k++) {
            const int64_t at = (i * d.R + g[k].r0) * d.D, m = g[k].at + which * 3 * d.D;
            modulate_backward(dh + at, dmod + m, dmod + m + d.D, dh + at, ln + at, mod + m + d.D, 1,
                              g[k].r1 - g[k].r0, d.D, 3 * d.D);
        }
    }
    if (b->minimax) {
        const int w = which ? b->norm2 : b->norm1;
        rmsnorm_backward(dx, G(w), dh, x, W(w), d.N, d.D, stats);
    } else {
        layernorm_backward(dx, NULL, NULL, dh, x, NULL, d.N, d.D, stats);
    }
}

/* y = x + gate r of branch `which`, set by set (plain: y = x + r); back: dr += gate dy, the gates' gradients into
 * dmod (dy passes) */
static void residual(const f3_block *b, const float *mod, float *y, const float *x, const float *r, int which)
{
    const dims d = dims_of(b);
    if (!mod) {
        if (y != x) copy_rows(y, d.D, x, d.D, d.N, d.D);
        add_to(y, r, d.N * d.D);
    }
    for (int64_t i = 0; mod && i < d.B; i++) {
        group g[2];
        for (int k = 0, n = groups_of(b, i, g); k < n; k++) {
            const int64_t at = (i * d.R + g[k].r0) * d.D;
            gated_residual_forward(y + at, x + at, mod + g[k].at + which * 3 * d.D + 2 * d.D, r + at, 1,
                                   g[k].r1 - g[k].r0, d.D, 3 * d.D);
        }
    }
}

static void residual_back(const f3_block *b, const float *mod, float *dy, float *dmod, float *dr, const float *r,
                          int which)
{
    const dims d = dims_of(b);
    if (!mod) add_to(dr, dy, d.N * d.D);
    for (int64_t i = 0; mod && i < d.B; i++) {
        group g[2];
        for (int k = 0, n = groups_of(b, i, g); k < n; k++) {
            const int64_t at = (i * d.R + g[k].r0) * d.D, gate = g[k].at + which * 3 * d.D + 2 * d.D;
            gated_residual_backward(dy + at, dmod + gate, dr + at, dy + at, mod + gate, r + at, 1,
                                    g[k].r1 - g[k].r0, d.D, 3 * d.D);
        }
    }
}

static void rotate_side(const void *self, float *x, bool keys, bool back)
{
    (void)keys;
    const f3_block *b = self;
    const dims d = dims_of(b);
    for (int64_t i = 0; i < d.B; i++) {
        float *xi = x + i * d.R * d.I;
        if (!b->rot) {
            (back ? rope_backward : rope_forward)(xi, 1, d.R, d.H, d.hd, d.I, d.R * d.I, *b->rope + i * d.R * d.hd);
            continue;
        }
        for (int64_t h = 0; h < d.H; h++) /* the head's first rot channels; the rest pass */
            (back ? rope_half_backward : rope_half_forward)(xi + h * d.hd, 1, d.R, 1, b->rot, d.I, d.R * d.I,
                                                            *b->rope + i * d.R * b->rot);
    }
}

static side_attention attention_of(const f3_block *b)
{
    const side_attention a = {.m = b->m, .norm_width = dims_of(b).hd, .eps = b->qk_eps ? b->qk_eps : b->eps,
                              .shape = self_shape(b), .mask = b->mask ? *b->mask : NULL,
                              .rotate = b->rope ? rotate_side : NULL, .block = b};
    return side_attention_of(a, &b->att);
}

/* The SwiGLU's halves: fused, f1 holds both (the gate's first, MiniMax-H3's value first); else f1 the gate, f3 the
 * up (value) projection */
static int64_t gate_at(const f3_block *b) { return fused(b) && b->minimax ? b->ffn : 0; }
static int64_t up_at(const f3_block *b) { return fused(b) && !b->minimax ? b->ffn : 0; }

/* f1 = ff_in h, f3 = ff_up h (apart), f2 = ff_out(swiglu); h is s's and is dropped */
static void ffn_forward(const f3_block *b, scratch *s, float *h, float *f1, float *f3, float *f2)
{
    const dims d = dims_of(b);
    if (!s->status) s->status = fwd(b->m, &b->ff_in, f1, h, d.N);
    if (!s->status && !fused(b)) s->status = fwd(b->m, &b->ff_up, f3, h, d.N);
    scratch_drop(s, h);
    float *a = scratch_take(s, d.N * d.F, MEM_WORKSPACE, "flux3.swiglu");
    if (s->status) return;
    glu_forward(a, f1 + gate_at(b), (fused(b) ? f1 : f3) + up_at(b), d.N, d.F, fused(b) ? 2 * d.F : d.F, GLU_SILU);
    s->status = fwd(b->m, &b->ff_out, f2, a, d.N);
}

/* dh += dL/dh from dr = dL/d(the feed-forward's output) */
static st_status ffn_backward(const f3_block *b, scratch *s, const float *dr, const float *f1, const float *f3,
                              const float *h, float *dh)
{
    const dims d = dims_of(b);
    const int64_t NF = d.N * d.F, ld = fused(b) ? 2 * d.F : d.F;
    const float *gate = f1 + gate_at(b), *up = (fused(b) ? f1 : f3) + up_at(b);
    float *a = scratch_take(s, NF, MEM_WORKSPACE, "flux3.swiglu");
    float *da = scratch_take_zero(s, NF, MEM_WORKSPACE, "flux3.dswiglu");
    float *df = scratch_take_zero(s, 2 * NF, MEM_WORKSPACE, "flux3.dff_in"); /* as f1 (fused), or d gate then d up */
    if (s->status) return s->status;
    glu_forward(a, gate, up, d.N, d.F, ld, GLU_SILU);
    st_status st = bwd(b->m, &b->ff_out, da, dr, a, d.N);
    if (!st) glu_backward(df + gate_at(b), (fused(b) ? df : df + NF) + up_at(b), da, gate, up, d.N, d.F, ld, GLU_SILU);
    if (!st) st = bwd(b->m, &b->ff_in, dh, df, h, d.N);
    if (!st && !fused(b)) st = bwd(b->m, &b->ff_up, dh, df + NF, h, d.N);
    scratch_drop(s, df), scratch_drop(s, da), scratch_drop(s, a);
    return st;
}

/* ---- the block ---- */

static st_status fb_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                            block_saved **saved_io)
{
    f3_block *b = blk->self;
    const dims d = dims_of(b);
    const int64_t ND = d.N * d.D;
    const float *x = in->t[0];
    frame f;
    block_saved *sv = frame_begin(&f, blk, b->m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y = scratch_take(&f.kept, ND, MEM_ACTIVATIONS, "flux3.state");
    side_take_self(&f, sv, self_shape(b));
    sv->o[0] = scratch_take(f.ks, ND, f.kt, "flux3.attention_out");
    sv->f1[0] = scratch_take(f.fs, (fused(b) ? 2 : 1) * d.N * d.F, f.ft, "flux3.ff_in");
    sv->f3[0] = fused(b) ? NULL : scratch_take(f.fs, d.N * d.F, f.ft, "flux3.ff_up");
    sv->f2[0] = scratch_take(f.fs, ND, f.ft, "flux3.ff_out");
    float *ln = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "flux3.ln");
    float *h = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "flux3.h");
    const float *mod = NULL;
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    if (!st) st = mod_of(b, &f.tmp, &mod);
    if (!st) st = norm_mod(b, mod, h, ln, x, 0, NULL);
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) {
        const side_attention a = attention_of(b);
        st = side_attention_forward(&a, sv, SELF, h, h, keep != KEEP_NOTHING || f.to_host);
    }
    if (!st && f.to_host) st = side_send(sv);
    if (!st) st = fwd(b->m, &b->att.out, sv->o[0], sv->side[SO], d.N);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    if (!st && b->sequential) { /* x1 = x + gate1 o, then the feed-forward on its own norm */
        residual(b, mod, y, x, sv->o[0], 0);
        st = norm_mod(b, mod, h, ln, y, 1, NULL);
    }
    if (!st) ffn_forward(b, &f.tmp, h, sv->f1[0], sv->f3[0], sv->f2[0]); /* drops h */
    if (!st) st = f.tmp.status;
    if (!st && b->sequential) residual(b, mod, y, y, sv->f2[0], 1);
    if (!st && !b->sequential) {
        add_to(sv->f2[0], sv->o[0], ND); /* attention + feed-forward: what the gate scales */
        side_made(b->m, sv->f2[0], ND);   /* as PyTorch's bf16 sum */
        residual(b, mod, y, x, sv->f2[0], 0);
    }
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

/* grad->t[0] holds dL/dy on entry and becomes dL/dx (the residual's part passes through in place). */
static st_status fb_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    f3_block *b = blk->self;
    const dims d = dims_of(b);
    const int64_t N = d.N, D = d.D, ND = N * D, NF = N * d.F;
    const float *x = in->t[0];
    float *gx = grad->t[0];
    op_state stats = {0}, stats2 = {0};
    scratch s = side_scratch(b->m->pool, sv);
    float *ln = scratch_take(&s, ND, MEM_WORKSPACE, "flux3.ln");
    float *h = scratch_take(&s, ND, MEM_WORKSPACE, "flux3.h");
    float *r = scratch_take(&s, ND, MEM_WORKSPACE, "flux3.branch");
    float *dr = scratch_take_zero(&s, ND, MEM_WORKSPACE, "flux3.dbranch");
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "flux3.dh");
    float *dmod = scratch_take_zero(&s, d.B * sets_of(b) * d.W, MEM_WORKSPACE, "flux3.dmod");
    float *x1 = b->sequential ? scratch_take(&s, ND, MEM_WORKSPACE, "flux3.x1") : NULL;
    float *ln2 = b->sequential ? scratch_take(&s, ND, MEM_WORKSPACE, "flux3.ln2") : NULL;
    float *h2 = b->sequential ? scratch_take(&s, ND, MEM_WORKSPACE, "flux3.h2") : NULL;
    const float *mod = NULL;
    if (s.status || (s.status = mod_of(b, &s, &mod)) || (s.status = norm_mod(b, mod, h, ln, x, 0, &stats))) goto done;
    if (b->sequential) {
        residual(b, mod, x1, x, sv->o[0], 0);
        if ((s.status = norm_mod(b, mod, h2, ln2, x1, 1, &stats2))) goto done;
    }
    const float *hf = b->sequential ? h2 : h; /* the feed-forward's input */
    /* the feed-forward's outputs: kept (KEEP_ALL), or computed again from its input */
    const bool recompute = !sv->f1[0];
    float *f1 = recompute ? scratch_take(&s, (fused(b) ? 2 : 1) * NF, MEM_ACTIVATIONS, "flux3.ff_in (recomputed)")
                          : sv->f1[0];
    float *f3 = fused(b) ? NULL : recompute ? scratch_take(&s, NF, MEM_ACTIVATIONS, "flux3.ff_up (recomputed)")
                                            : sv->f3[0];
    float *f2 = recompute ? r : sv->f2[0];
    if (s.status) goto done;
    if (recompute) {
        float *hc = scratch_take(&s, ND, MEM_WORKSPACE, "flux3.h (copy)");
        if (s.status) goto done;
        copy_rows(hc, D, hf, D, N, D);
        ffn_forward(b, &s, hc, f1, f3, f2);
        if (s.status) goto done;
        if (!b->sequential) add_to(r, sv->o[0], ND), side_made(b->m, r, ND);
    } else {
        copy_rows(r, D, f2, D, N, D); /* parallel: forward left attention + feed-forward in f2 */
    }
    if (b->sequential) {
        /* y = x1 + gate2 ff: the feed-forward back to x1 (gx becomes dL/dx1), then x1 = x + gate1 o */
        residual_back(b, mod, gx, dmod, dr, r, 1);
        if ((s.status = ffn_backward(b, &s, dr, f1, f3, h2, dh))) goto done;
        norm_mod_back(b, mod, gx, dmod, dh, ln2, x1, 1, &stats2);
        zero_bytes(dr, (size_t)ND * sizeof(float)), zero_bytes(dh, (size_t)ND * sizeof(float));
        residual_back(b, mod, gx, dmod, dr, sv->o[0], 0);
    } else {
        /* y = x + gate (o + ff): both branches from dr */
        residual_back(b, mod, gx, dmod, dr, r, 0);
        if ((s.status = ffn_backward(b, &s, dr, f1, f3, h, dh))) goto done;
    }
    if (recompute) {
        scratch_drop(&s, f1);
        if (f3) scratch_drop(&s, f3);
    }
    const side_attention attn = attention_of(b);
    if ((s.status = side_attention_backward(&attn, sv, SELF, dr, h, h, dh, dh))) goto done;
    norm_mod_back(b, mod, gx, dmod, dh, ln, x, 0, &stats);
    if (b->tagged) s.status = bwd(b->m, &b->ada, b->m->ctx.dcs, dmod, b->m->ctx.cs, d.B);
    else if (!b->plain) add_to(*b->dmod, dmod, d.B * sets_of(b) * d.W); /* the model's to take back */
done:
    op_state_release(&stats), op_state_release(&stats2);
    return scratch_end(&s);
}

const block_kind f3_block_kind = {SIDE_BLOCK_KIND("flux3", fb_kept_bytes, fb_offloaded_bytes, fb_forward, fb_backward)};
