/* Flux.3's blocks (flux3.h): diffusers' Flux3ModeTransformerBlock and Flux3SingleTransformerBlock, one computation
 * over a sequence's rows, attention and feed-forward in parallel from the same modulated input:
 *
 *   h = LN(x) (1 + scale) + shift;   y = x + gate (to_out(attention(h)) + linear_out(swiglu(linear_in h)))
 *
 * LN is a LayerNorm without affine (eps); q and k are RMSNorm-ed per head (with weights) and turned by the
 * sequence's interleaved 4-axis rotary table; swiglu(f) = silu(f[:F]) f[F:]; nothing has a bias. (shift, scale,
 * gate) come from the model (per sample, the rows of a modulation set): a mode block's rows all read one set, a single
 * block's text rows (the first `split`) its text set and the rest its content set.
 *
 * Kept (unless KEEP_NOTHING): the attention side (q, k, v after norm and rotation, the raw q and k, the attention's
 * output and state) and to_out's output; with KEEP_ALL also linear_in's and linear_out's outputs, which torch-ffn
 * recomputes from h. Recompute runs the same kernels on the same inputs, so it is bitwise forward's. */
#include "flux3.h"

#include "attn_side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SELF = 0 };

typedef struct dims {
    int64_t B, R, D, N, F, H, hd;
} dims;

static dims dims_of(const f3_block *b)
{
    const model_shape *s = &b->m->shape;
    return (dims){s->batch, b->rows, s->hidden, s->batch * b->rows, b->ffn, s->heads, s->hidden / s->heads};
}

#define W(i) (param_at(b->m->params, (i))->w)

void f3_block_register(param_set *s, f3_block *b, const char *prefix, const model_config *c, bool used)
{
    const int64_t D = c->hidden, hd = D / c->heads, F = b->ffn;
    const int64_t ra = used && c->lora_attention ? c->lora_rank : 0, rm = used && c->lora_mlp ? c->lora_rank : 0;
    const float alpha = (float)c->lora_alpha;
    const bool trainable = used && !c->lora_rank; /* the base weights; LoRA's adapters (ra, rm) train otherwise */
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", prefix, suffix), n)
    b->q = lin_register(s, NAME("attn.to_q"), D, D, false, ra, alpha, trainable);
    b->k = lin_register(s, NAME("attn.to_k"), D, D, false, ra, alpha, trainable);
    b->v = lin_register(s, NAME("attn.to_v"), D, D, false, ra, alpha, trainable);
    b->norm_q = param_add(s, NAME("attn.norm_q.weight"), 1, (int64_t[]){hd}, trainable);
    b->norm_k = param_add(s, NAME("attn.norm_k.weight"), 1, (int64_t[]){hd}, trainable);
    b->out = lin_register(s, NAME("attn.to_out.0"), D, D, false, ra, alpha, trainable);
    b->ff_in = lin_register(s, NAME("ff.linear_in"), D, 2 * F, false, rm, alpha, trainable);
    b->ff_out = lin_register(s, NAME("ff.linear_out"), F, D, false, rm, alpha, trainable);
#undef NAME
}

/* ---- sizes ---- */

static attn_shape self_shape(const f3_block *b)
{
    const dims d = dims_of(b);
    return (attn_shape){.batch = d.B, .tokens = d.R, .heads = d.H, .head_dim = d.hd,
                        .mechanism = b->m->shape.mechanism};
}

static size_t fb_kept_bytes(const block *blk, keep_level keep)
{
    const f3_block *b = blk->self;
    const dims d = dims_of(b);
    const attn_shape ss = self_shape(b);
    if (keep == KEEP_NOTHING) return 0;
    if (keep == KEEP_ATTENTION_OUTPUT) return side_output_bytes(&ss);
    size_t floats = (size_t)(7 * d.N * d.D); /* q, k, v, o, raw q, raw k; to_out's output */
    if (keep == KEEP_ALL) floats += (size_t)(2 * d.N * d.F + d.N * d.D);
    return floats * sizeof(float) + attention_kept_bytes(&ss);
}

static size_t fb_offloaded_bytes(const block *blk)
{
    const f3_block *b = blk->self;
    const dims d = dims_of(b);
    const attn_shape ss = self_shape(b);
    return (size_t)(6 * d.N * d.D) * sizeof(float) + attention_kept_bytes(&ss);
}

/* ---- the modulation, set by set ---- */

/* A set's rows of sample i, [r0, r1), and where its (shift, scale, gate) start in the (B, sets, 3D) modulation */
typedef struct group {
    int64_t r0, r1, at;
} group;

static int sets_of(const f3_block *b) { return b->split ? 2 : 1; }

static int groups_of(const f3_block *b, int64_t i, group g[2])
{
    const dims d = dims_of(b);
    const int sets = sets_of(b);
    g[0] = (group){0, b->split ? b->split : d.R, i * sets * 3 * d.D};
    if (sets == 2) g[1] = (group){b->split, d.R, (i * sets + 1) * 3 * d.D};
    return sets;
}

/* h = LN(x) (1 + scale) + shift, ln = LN(x) (its statistics kept when asked) */
static st_status norm_mod(const f3_block *b, float *h, float *ln, const float *x, op_state *stats)
{
    const dims d = dims_of(b);
    st_status st = layernorm_forward(b->m->pool, ln, x, NULL, NULL, d.N, d.D, b->eps, stats);
    for (int64_t i = 0; !st && i < d.B; i++) {
        group g[2];
        for (int k = 0, n = groups_of(b, i, g); k < n; k++) {
            const int64_t at = (i * d.R + g[k].r0) * d.D;
            const float *m = *b->mod + g[k].at;
            modulate_forward(h + at, ln + at, m, m + d.D, 1, g[k].r1 - g[k].r0, d.D, 3 * d.D);
        }
    }
    return st;
}

/* y = x + gate r, set by set */
static void residual(const f3_block *b, float *y, const float *x, const float *r)
{
    const dims d = dims_of(b);
    for (int64_t i = 0; i < d.B; i++) {
        group g[2];
        for (int k = 0, n = groups_of(b, i, g); k < n; k++) {
            const int64_t at = (i * d.R + g[k].r0) * d.D;
            gated_residual_forward(y + at, x + at, *b->mod + g[k].at + 2 * d.D, r + at, 1, g[k].r1 - g[k].r0, d.D,
                                   3 * d.D);
        }
    }
}

static void rotate_side(const void *self, float *x, bool keys, bool back)
{
    (void)keys;
    const f3_block *b = self;
    const dims d = dims_of(b);
    for (int64_t i = 0; i < d.B; i++)
        (back ? rope_backward : rope_forward)(x + i * d.R * d.D, 1, d.R, d.H, d.hd, d.D, d.R * d.D,
                                              *b->rope + i * d.R * d.hd);
}

static side_attention attention_of(const f3_block *b)
{
    return (side_attention){.m = b->m, .q = &b->q, .k = &b->k, .v = &b->v, .out = &b->out, .norm_q = b->norm_q,
                            .norm_k = b->norm_k, .norm_width = dims_of(b).hd, .eps = b->eps, .shape = self_shape(b),
                            .rotate = rotate_side, .block = b};
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
    side_take(&f, sv, (int64_t[SIDE_MAX]){ND, ND, ND, ND, ND, ND}, 1);
    sv->o[0] = scratch_take(f.ks, ND, f.kt, "flux3.attention_out");
    sv->f1[0] = scratch_take(f.fs, 2 * d.N * d.F, f.ft, "flux3.linear_in");
    sv->f2[0] = scratch_take(f.fs, ND, f.ft, "flux3.linear_out");
    float *ln = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "flux3.ln");
    float *h = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "flux3.h");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    if (!st) st = norm_mod(b, h, ln, x, NULL);
    if (!st) scratch_drop(&f.tmp, ln);
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) {
        const side_attention a = attention_of(b);
        st = side_attention_forward(&a, sv, SELF, h, h, keep != KEEP_NOTHING || f.to_host);
    }
    if (!st && f.to_host) st = side_send(sv);
    if (!st) st = fwd(b->m, &b->out, sv->o[0], sv->side[SO], d.N);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    if (!st) glu_ffn_forward(&f.tmp, b->m, &b->ff_in, NULL, &b->ff_out, h, d.N, d.F, GLU_SILU, sv->f1[0], NULL,
                             sv->f2[0], "flux3.swiglu"); /* drops h */
    if (!st) st = f.tmp.status;
    if (!st) {
        add_to(sv->f2[0], sv->o[0], ND); /* attention + feed-forward: what the gate scales */
        residual(b, y, x, sv->f2[0]);
        *out = (block_state){.n = 1, .t = {y}};
    }
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
    if (sv->on_host) {
        st_status st = side_back(sv);
        if (st) return st;
    }
    op_state stats = {0};
    scratch s = {.pool = b->m->pool};
    float *ln = scratch_take(&s, ND, MEM_WORKSPACE, "flux3.ln");
    float *h = scratch_take(&s, ND, MEM_WORKSPACE, "flux3.h");
    float *r = scratch_take(&s, ND, MEM_WORKSPACE, "flux3.branches");
    float *dr = scratch_take_zero(&s, ND, MEM_WORKSPACE, "flux3.dbranches");
    float *dmod = scratch_take_zero(&s, d.B * sets_of(b) * 3 * D, MEM_WORKSPACE, "flux3.dmod");
    if (s.status || (s.status = norm_mod(b, h, ln, x, &stats))) goto done;
    /* the feed-forward's outputs: kept (KEEP_ALL), or computed again from h; r = attention + feed-forward */
    const bool recompute = !sv->f1[0];
    float *f1 = recompute ? scratch_take(&s, 2 * NF, MEM_ACTIVATIONS, "flux3.linear_in (recomputed)") : sv->f1[0];
    float *f2 = recompute ? r : sv->f2[0];
    if (s.status) goto done;
    if (recompute) {
        float *hc = scratch_take(&s, ND, MEM_WORKSPACE, "flux3.h (copy)");
        if (s.status) goto done;
        copy_rows(hc, D, h, D, N, D);
        glu_ffn_forward(&s, b->m, &b->ff_in, NULL, &b->ff_out, hc, N, d.F, GLU_SILU, f1, NULL, f2, "flux3.swiglu");
        if (s.status) goto done;
        add_to(r, sv->o[0], ND);
    } else {
        copy_rows(r, D, f2, D, N, D); /* forward left attention + feed-forward in f2 */
    }
    /* y = x + gate r: dr and the gates' gradients; gx passes through */
    const float *mod = *b->mod;
    for (int64_t i = 0; i < d.B; i++) {
        group g[2];
        for (int k = 0, n = groups_of(b, i, g); k < n; k++) {
            const int64_t at = (i * d.R + g[k].r0) * D, gate = g[k].at + 2 * D;
            gated_residual_backward(gx + at, dmod + gate, dr + at, gx + at, mod + gate, r + at, 1, g[k].r1 - g[k].r0,
                                    D, 3 * D);
        }
    }
    /* the feed-forward, then the attention, both into dh */
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "flux3.dh");
    float *a = scratch_take(&s, NF, MEM_WORKSPACE, "flux3.swiglu");
    float *da = scratch_take_zero(&s, NF, MEM_WORKSPACE, "flux3.dswiglu");
    if (s.status) goto done;
    glu_forward(a, f1, f1 + d.F, N, d.F, 2 * d.F, GLU_SILU);
    if ((s.status = bwd(b->m, &b->ff_out, da, dr, a, N))) goto done;
    scratch_drop(&s, a);
    float *df1 = scratch_take_zero(&s, 2 * NF, MEM_WORKSPACE, "flux3.dlinear_in");
    if (s.status) goto done;
    glu_backward(df1, df1 + d.F, da, f1, f1 + d.F, N, d.F, 2 * d.F, GLU_SILU);
    scratch_drop(&s, da);
    if ((s.status = bwd(b->m, &b->ff_in, dh, df1, h, N))) goto done;
    scratch_drop(&s, df1);
    if (recompute) scratch_drop(&s, f1);
    const side_attention attn = attention_of(b);
    if ((s.status = side_attention_backward(&attn, sv, SELF, dr, h, h, dh, dh))) goto done;
    /* h = LN(x) (1 + scale) + shift, set by set, then the LayerNorm */
    for (int64_t i = 0; i < d.B; i++) {
        group g[2];
        for (int k = 0, n = groups_of(b, i, g); k < n; k++) {
            const int64_t at = (i * d.R + g[k].r0) * D;
            modulate_backward(dh + at, dmod + g[k].at, dmod + g[k].at + D, dh + at, ln + at, mod + g[k].at + D, 1,
                              g[k].r1 - g[k].r0, D, 3 * D);
        }
    }
    layernorm_backward(gx, NULL, NULL, dh, x, NULL, N, D, &stats);
    add_to(*b->dmod, dmod, d.B * sets_of(b) * 3 * D); /* the model's to take back */
done:
    op_state_release(&stats);
    return scratch_end(&s);
}

const block_kind f3_block_kind = {
    .name = "flux3",
    .ffn_split = true,
    .softmax_attention = true,
    .keeps_attention_output = true,
    .kept_bytes = fb_kept_bytes,
    .offloaded_bytes = fb_offloaded_bytes,
    .forward = fb_forward,
    .prefetch = side_prefetch,
    .backward = fb_backward,
    .release = saved_release,
};
