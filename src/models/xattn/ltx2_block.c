/* LTX-2's audio-video block (ltx2.h): diffusers' LTX2VideoTransformerBlock as LTX-2.0 configures it (no gated
 * attention, no prompt modulation). Per stream, video x (width D) and audio a (width Da), with the block's rows
 * r = its tables + the model's (ltx2.h):
 *
 *   x1 = x  + gate_msa * self_attention(RMSNorm(x) (1 + scale_msa) + shift_msa)
 *   x2 = x1 + text_attention(RMSNorm(x1), the prompt)
 *   x3 = x2 + a2v_gate * attention(q: n_x (1 + a2v_scale_x) + a2v_shift_x, k, v: n_a (1 + a2v_scale_a) + a2v_shift_a)
 *   a3 = a2 + v2a_gate * attention(q: n_a (1 + v2a_scale_a) + v2a_shift_a, k, v: n_x (1 + v2a_scale_x) + v2a_shift_x)
 *   x4 = x3 + gate_mlp * ff(RMSNorm(x3) (1 + scale_mlp) + shift_mlp)
 *
 * and the same for a, with n_x = RMSNorm(x2) and n_a = RMSNorm(a2) taken before either cross-modal residual. The
 * RMSNorms have no weights. Every attention RMSNorms q and k over its whole width (weights); the self-attentions
 * rotate them by their stream's table, the cross-modal ones q by its stream's cross table and k by the other's.
 *
 * Forward keeps the modulations, the six attentions' sides (q, k, v after their norms and rotation, q and k before,
 * the output) and states, their output projections, and with KEEP_ALL the feed-forwards' GEMM outputs; the
 * pointwise rest is recomputed from those and the block's inputs with the same kernels, so bitwise as forward made
 * it. KEEP_ATTENTION_OUTPUT keeps the two self-attentions' outputs and states alone (the text and cross-modal ones
 * attend to few keys, or to the smaller audio stream, and run again). */
#include "models/xattn/ltx2.h"

#include "models/core/attn_side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An attention's queries come from stream q_stream[a]; its keys and values from the same stream (self), the prompt
 * (text) or the other stream (cross-modal). The output projection maps back to the queries' stream. */
static const int q_stream[LTX2_ATTNS] = {0, 1, 0, 1, 0, 1};
static const char *const attn_names[LTX2_ATTNS] = {"attn1", "audio_attn1", "attn2", "audio_attn2",
                                                   "audio_to_video_attn", "video_to_audio_attn"};
static bool is_text(int a) { return a == LTX2_TEXT_V || a == LTX2_TEXT_A; }
static bool is_self(int a) { return a == LTX2_SELF_V || a == LTX2_SELF_A; }

typedef struct dims {
    int64_t B, L, NL, T[2], W[2], N[2], F[2]; /* per stream: tokens, width, rows, feed-forward width */
} dims;

static dims dims_of(const ltx2_block *b)
{
    const model_config *c = &b->m->cfg;
    dims d = {.B = b->m->shape.batch, .L = b->m->shape.text, .W = {c->hidden, c->audio_hidden}};
    d.NL = d.B * d.L;
    for (int s = 0; s < 2; s++) d.T[s] = b->ctx->tokens[s], d.N[s] = d.B * d.T[s], d.F[s] = 4 * d.W[s];
    return d;
}

#define W(i) (param_at(b->m->params, (i))->w)
#define G(i) (param_at(b->m->params, (i))->g)

/* The attention's width: the video stream's (D) for attn1 and attn2, the audio width for the rest. */
static int64_t inner(const dims *d, int a) { return a == LTX2_SELF_V || a == LTX2_TEXT_V ? d->W[0] : d->W[1]; }

/* Its keys' rows and their input width. */
static int64_t kv_rows(const dims *d, int a)
{
    return is_self(a) ? d->N[q_stream[a]] : is_text(a) ? d->NL : d->N[1 - q_stream[a]];
}

static int64_t kv_width(const dims *d, int a)
{
    return is_self(a) || is_text(a) ? d->W[q_stream[a]] : d->W[1 - q_stream[a]];
}

static attn_shape shape_of(const ltx2_block *b, const dims *d, int a)
{
    const model_config *c = &b->m->cfg;
    const bool video = a == LTX2_SELF_V || a == LTX2_TEXT_V;
    const int64_t heads = video ? c->heads : c->audio_heads, qs = q_stream[a];
    return (attn_shape){.batch = d->B, .tokens = d->T[qs], .heads = heads, .head_dim = inner(d, a) / heads,
                        .kv_tokens = is_self(a) ? 0 : is_text(a) ? d->L : d->T[1 - qs],
                        .mechanism = b->m->shape.mechanism};
}

void ltx2_block_register(param_set *s, ltx2_block *b, int index, const model_config *c)
{
    const bool full = !c->lora_rank;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    const dims d = {.W = {c->hidden, c->audio_hidden}, .N = {1, 1}, .T = {1, 1}};
    char p[32], n[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "transformer_blocks.%d", index);
#define NAME(...) (snprintf(n, sizeof n, __VA_ARGS__), n)
    for (int a = 0; a < LTX2_ATTNS; a++) {
        attn_weights *t = &b->att[a];
        const char *an = attn_names[a];
        const int64_t w = inner(&d, a), in_q = d.W[q_stream[a]], in_kv = kv_width(&d, a);
        t->norm_q = block_norm(s, p, NAME("%s.norm_q", an), w, c);
        t->norm_k = block_norm(s, p, NAME("%s.norm_k", an), w, c);
        t->q = block_linear(s, p, NAME("%s.to_q", an), in_q, w, true, ra, c);
        t->k = block_linear(s, p, NAME("%s.to_k", an), in_kv, w, true, ra, c);
        t->v = block_linear(s, p, NAME("%s.to_v", an), in_kv, w, true, ra, c);
        t->out = block_linear(s, p, NAME("%s.to_out.0", an), w, in_q, true, ra, c);
    }
    for (int st = 0; st < 2; st++) {
        const char *ff = st ? "audio_ff" : "ff";
        const int64_t w = d.W[st];
        b->ff0[st] = block_linear(s, p, NAME("%s.net.0.proj", ff), w, 4 * w, true, rm, c);
        b->ff2[st] = block_linear(s, p, NAME("%s.net.2", ff), 4 * w, w, true, rm, c);
    }
    b->table[0] = param_add(s, NAME("%s.scale_shift_table", p), 2, (int64_t[]){6, d.W[0]}, full);
    b->table[1] = param_add(s, NAME("%s.audio_scale_shift_table", p), 2, (int64_t[]){6, d.W[1]}, full);
    b->ca_table[0] = param_add(s, NAME("%s.video_a2v_cross_attn_scale_shift_table", p), 2, (int64_t[]){5, d.W[0]}, full);
    b->ca_table[1] = param_add(s, NAME("%s.audio_a2v_cross_attn_scale_shift_table", p), 2, (int64_t[]){5, d.W[1]}, full);
#undef NAME
}

/* ---- sizes ---- */

/* Each attention's side (q, k, v, o, raw q, raw k) at a * SIDE_PER. */
static void side_sizes(const dims *d, int64_t *n)
{
    memset(n, 0, SIDE_MAX * sizeof *n);
    for (int a = 0; a < LTX2_ATTNS; a++) {
        const int64_t w = inner(d, a), nq = d->N[q_stream[a]] * w, nkv = kv_rows(d, a) * w;
        const int64_t sizes[SIDE_PER] = {nq, nkv, nkv, nq, nq, nkv};
        memcpy(n + a * SIDE_PER, sizes, sizeof sizes);
    }
}

/* the sides and the attention states */
static size_t ltx2_side_bytes(const block *blk)
{
    const ltx2_block *b = blk->self;
    const size_t elem = side_elem(b->m);
    const dims d = dims_of(b);
    int64_t n[SIDE_MAX];
    side_sizes(&d, n);
    size_t bytes = 0;
    for (int i = 0; i < SIDE_MAX; i++) bytes += (size_t)n[i] * elem;
    for (int a = 0; a < LTX2_ATTNS; a++) {
        const attn_shape s = shape_of(b, &d, a);
        bytes += attention_kept_bytes(&s);
    }
    return bytes;
}

static size_t ltx2_kept_bytes(const block *blk, keep_level keep)
{
    const ltx2_block *b = blk->self;
    const dims d = dims_of(b);
    const size_t elem = side_elem(b->m);
    if (keep == KEEP_NOTHING) return 0;
    if (keep == KEEP_ATTENTION_OUTPUT) { /* the self-attentions' outputs and states: the rest runs again */
        const attn_shape v = shape_of(b, &d, LTX2_SELF_V), a = shape_of(b, &d, LTX2_SELF_A);
        return side_output_bytes(&v, elem) + side_output_bytes(&a, elem);
    }
    size_t floats = 0;
    for (int s = 0; s < 2; s++) floats += (size_t)(d.B * LTX2_MOD_ROWS * d.W[s]);
    for (int a = 0; a < LTX2_ATTNS; a++) floats += (size_t)(d.N[q_stream[a]] * d.W[q_stream[a]]); /* projections */
    for (int s = 0; keep == KEEP_ALL && s < 2; s++) floats += (size_t)(d.N[s] * (d.F[s] + d.W[s]));
    return floats * elem + ltx2_side_bytes(blk);
}

/* ---- pieces run in forward and again in backward ---- */

static st_status norm(const ltx2_block *b, int s, float *y, const float *x, op_state *stats)
{
    const dims d = dims_of(b);
    return rmsnorm_forward(b->m->pool, y, x, NULL, d.N[s], d.W[s], LTX2_EPS, stats);
}

/* dx += the norm's input gradient from dy */
static void norm_back(const ltx2_block *b, int s, float *dx, const float *dy, const float *x, const op_state *stats)
{
    const dims d = dims_of(b);
    rmsnorm_backward(dx, NULL, dy, x, NULL, d.N[s], d.W[s], stats);
}

/* y = x (1 + mod[row]) + mod[shift_row] on stream s's rows; mod is the block's (B, 11 w) */
static void modulate_rows(const ltx2_block *b, int s, float *y, const float *x, const float *mod, int scale_row,
                          int shift_row)
{
    const dims d = dims_of(b);
    const int64_t w = d.W[s];
    modulate_forward(y, x, mod + shift_row * w, mod + scale_row * w, d.B, d.T[s], w, LTX2_MOD_ROWS * w);
}

static void modulate_rows_back(const ltx2_block *b, int s, float *dx, float *dmod, const float *dy, const float *x,
                               const float *mod, int scale_row, int shift_row)
{
    const dims d = dims_of(b);
    const int64_t w = d.W[s];
    modulate_backward(dx, dmod + shift_row * w, dmod + scale_row * w, dy, x, mod + scale_row * w, d.B, d.T[s], w,
                      LTX2_MOD_ROWS * w);
}

/* h = RMSNorm(x) (1 + row chunk + 1) + row chunk */
static st_status norm_modulate(const ltx2_block *b, int s, float *h, const float *x, const float *mod, int chunk)
{
    st_status st = norm(b, s, h, x, NULL);
    if (!st) modulate_rows(b, s, h, h, mod, chunk + 1, chunk);
    return st;
}

/* In place: x's rows of stream s (width `width`, split in `heads` chunks) rotated by table (back: its gradient). */
static void rotate_stream(const ltx2_block *b, int s, float *x, const float *table, int64_t heads, int64_t width,
                          bool back)
{
    const dims d = dims_of(b);
    (back ? rope_split_backward : rope_split_forward)(x, d.B, d.T[s], heads, width / heads, width, d.T[s] * width,
                                                      table);
}

static void rotate_self_v(const void *self, float *x, bool keys, bool back)
{
    const ltx2_block *b = self;
    (void)keys;
    rotate_stream(b, 0, x, b->ctx->self[0], b->m->cfg.heads, b->m->cfg.hidden, back);
}

static void rotate_self_a(const void *self, float *x, bool keys, bool back)
{
    const ltx2_block *b = self;
    (void)keys;
    rotate_stream(b, 1, x, b->ctx->self[1], b->m->cfg.audio_heads, b->m->cfg.audio_hidden, back);
}

/* the cross-modal tables split the audio width by the stream's own heads (diffusers' cross_attn_rope and
 * cross_attn_audio_rope reshape by num_attention_heads and audio_num_attention_heads) */
static void rotate_cross(const ltx2_block *b, int s, float *x, bool back)
{
    const model_config *c = &b->m->cfg;
    rotate_stream(b, s, x, b->ctx->cross[s], s ? c->audio_heads : c->heads, c->audio_hidden, back);
}

static void rotate_a2v(const void *self, float *x, bool keys, bool back) { rotate_cross(self, keys ? 1 : 0, x, back); }
static void rotate_v2a(const void *self, float *x, bool keys, bool back) { rotate_cross(self, keys ? 0 : 1, x, back); }

static side_attention attention_of(const ltx2_block *b, int a)
{
    static void (*const rotations[LTX2_ATTNS])(const void *, float *, bool, bool) = {
        rotate_self_v, rotate_self_a, NULL, NULL, rotate_a2v, rotate_v2a};
    const dims d = dims_of(b);
    const side_attention s = {.m = b->m, .norm_width = inner(&d, a), .eps = LTX2_EPS, .shape = shape_of(b, &d, a),
                              .mask = is_text(a) ? b->ctx->mask : NULL, .rotate = rotations[a], .block = b};
    return side_attention_of(s, &b->att[a]);
}

static st_status attention_forward_into(const ltx2_block *b, block_saved *sv, int a, const float *xq,
                                        const float *xkv, bool keep)
{
    const side_attention s = attention_of(b, a);
    return side_attention_forward(&s, sv, a * SIDE_PER, xq, xkv, keep);
}

static st_status attention_backward_from(const ltx2_block *b, block_saved *sv, int a, const float *dout,
                                         const float *xq, const float *xkv, float *dxq, float *dxkv)
{
    const side_attention s = attention_of(b, a);
    return side_attention_backward(&s, sv, a * SIDE_PER, dout, xq, xkv, dxq, dxkv);
}

/* attention a's output projection (its stream's rows and width) */
static float **projection(block_saved *sv, int a)
{
    return a < 2 ? &sv->o[a] : &sv->o3[a - 2];
}

/* The feed-forward's GEMM outputs from x3: f1 = ff0(RMSNorm(x3) (1 + scale_mlp) + shift_mlp), f2 = ff2(gelu(f1)) */
static st_status ffn_compute(const ltx2_block *b, int s, const float *x3, const float *mod, float *f1, float *f2)
{
    const dims d = dims_of(b);
    scratch k = {.pool = b->m->pool};
    float *h = scratch_take(&k, d.N[s] * d.W[s], MEM_WORKSPACE, "ltx2.ffn.h");
    if (!k.status) k.status = norm_modulate(b, s, h, x3, mod, 3);
    if (!k.status) k.status = fwd(b->m, &b->ff0[s], f1, h, d.N[s]);
    scratch_drop(&k, h);
    float *g = scratch_take(&k, d.N[s] * d.F[s], MEM_WORKSPACE, "ltx2.ffn.gelu");
    if (!k.status) {
        gelu_forward(g, f1, d.N[s] * d.F[s]);
        k.status = fwd(b->m, &b->ff2[s], f2, g, d.N[s]);
    }
    return scratch_end(&k);
}

/* The cross-modal attentions' four inputs from n_x and n_a: q and k, v of a2v, then of v2a. */
static void cross_inputs(const ltx2_block *b, const block_saved *sv, const float *const n[2], float *in[4])
{
    modulate_rows(b, 0, in[0], n[0], sv->mod[0], 6, 7); /* a2v: video queries */
    modulate_rows(b, 1, in[1], n[1], sv->mod[1], 6, 7); /* a2v: audio keys and values */
    modulate_rows(b, 1, in[2], n[1], sv->mod[1], 8, 9); /* v2a: audio queries */
    modulate_rows(b, 0, in[3], n[0], sv->mod[0], 8, 9); /* v2a: video keys and values */
}

/* x1, x2 and x3 of stream s from its input and the kept projections */
static void residuals(const ltx2_block *b, int s, const float *x, block_saved *sv, float *x1, float *x2, float *x3)
{
    const dims d = dims_of(b);
    const int64_t w = d.W[s], n = d.N[s] * w, stride = LTX2_MOD_ROWS * w;
    gated_residual_forward(x1, x, sv->mod[s] + 2 * w, *projection(sv, s ? LTX2_SELF_A : LTX2_SELF_V), d.B, d.T[s], w,
                           stride);
    copy_rows(x2, w, x1, w, d.N[s], w);
    add_to(x2, *projection(sv, s ? LTX2_TEXT_A : LTX2_TEXT_V), n);
    gated_residual_forward(x3, x2, sv->mod[s] + 10 * w, *projection(sv, s ? LTX2_V2A : LTX2_A2V), d.B, d.T[s], w,
                           stride);
}

/* ---- the block ---- */

/* The frame's three cases (attn_side.h): a plain forward at a keep level; a first forward with off, which sends the
 * sides to the host; a recompute after it, which takes them back instead of computing the attentions again. */
static st_status ltx2_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                              block_saved **saved_io)
{
    ltx2_block *b = blk->self;
    const dims d = dims_of(b);
    const ltx2_ctx *ctx = b->ctx;
    frame f;
    block_saved *sv = frame_begin(&f, blk, b->m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y[2], *h[2], *nrm[2], *xin[4];
    int64_t n[SIDE_MAX];
    side_sizes(&d, n);
    for (int s = 0; s < 2; s++) {
        y[s] = scratch_take(&f.kept, d.N[s] * d.W[s], MEM_ACTIVATIONS, "ltx2.state");
        sv->mod[s] = scratch_take(f.ks, d.B * LTX2_MOD_ROWS * d.W[s], f.kt, "ltx2.mod");
    }
    f.keep_xo = true; /* KEEP_ATTENTION_OUTPUT keeps both self-attentions' outputs: SELF_A's is XO */
    side_take(&f, sv, n, LTX2_ATTNS);
    for (int a = 0; a < LTX2_ATTNS; a++)
        *projection(sv, a) = scratch_take(f.ks, d.N[q_stream[a]] * d.W[q_stream[a]], f.kt, "ltx2.attention_out");
    for (int s = 0; s < 2; s++) {
        sv->f1[s] = scratch_take(f.fs, d.N[s] * d.F[s], f.ft, "ltx2.ff0");
        sv->f2[s] = scratch_take(f.fs, d.N[s] * d.W[s], f.ft, "ltx2.ff2");
        h[s] = scratch_take(&f.tmp, d.N[s] * d.W[s], MEM_WORKSPACE, "ltx2.h");
        nrm[s] = scratch_take(&f.tmp, d.N[s] * d.W[s], MEM_WORKSPACE, "ltx2.cross_norm");
    }
    for (int i = 0; i < 4; i++) xin[i] = scratch_take(&f.tmp, d.N[i == 1 || i == 2] * d.W[i == 1 || i == 2],
                                                      MEM_WORKSPACE, "ltx2.cross_input");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    const bool states = keep != KEEP_NOTHING || f.to_host;
    for (int s = 0; !st && s < 2; s++) { /* the block's rows: its tables + the model's */
        const int64_t w = d.W[s], stride = LTX2_MOD_ROWS * w;
        copy_rows(sv->mod[s], stride, ctx->mod[s], 6 * w, d.B, 6 * w);
        copy_rows(sv->mod[s] + 6 * w, stride, ctx->ca[s], 5 * w, d.B, 5 * w);
        for (int64_t i = 0; i < d.B; i++) {
            add_to(sv->mod[s] + i * stride, W(b->table[s]), 6 * w);
            add_to(sv->mod[s] + i * stride + 6 * w, W(b->ca_table[s]), 5 * w);
        }
        side_made(b->m, sv->mod[s], d.B * stride); /* as PyTorch's bf16 sums */
    }
    if (!st && f.from_host) st = side_back(sv);
    for (int s = 0; !st && s < 2; s++) { /* x1: the self-attention */
        const int a = s ? LTX2_SELF_A : LTX2_SELF_V;
        if (!f.from_host && !(st = norm_modulate(b, s, h[s], in->t[s], sv->mod[s], 0)))
            st = attention_forward_into(b, sv, a, h[s], h[s], states);
        if (!st) st = fwd(b->m, &b->att[a].out, *projection(sv, a), sv->side[a * SIDE_PER + SO], d.N[s]);
        if (!st)
            gated_residual_forward(y[s], in->t[s], sv->mod[s] + 2 * d.W[s], *projection(sv, a), d.B, d.T[s], d.W[s],
                                   LTX2_MOD_ROWS * d.W[s]);
    }
    for (int s = 0; !st && s < 2; s++) { /* x2: the prompt */
        const int a = s ? LTX2_TEXT_A : LTX2_TEXT_V;
        if (!f.from_host && !(st = norm(b, s, h[s], y[s], NULL)))
            st = attention_forward_into(b, sv, a, h[s], ctx->text[s], states && keep != KEEP_ATTENTION_OUTPUT);
        if (!st) st = fwd(b->m, &b->att[a].out, *projection(sv, a), sv->side[a * SIDE_PER + SO], d.N[s]);
        if (!st) add_to(y[s], *projection(sv, a), d.N[s] * d.W[s]);
    }
    if (!st && !f.from_host) { /* the cross-modal attentions, both from x2 and a2 */
        st = norm(b, 0, nrm[0], y[0], NULL);
        if (!st) st = norm(b, 1, nrm[1], y[1], NULL);
        if (!st) cross_inputs(b, sv, (const float *const *)nrm, xin);
        const bool kept = states && keep != KEEP_ATTENTION_OUTPUT; /* the self-attentions' alone are kept then */
        if (!st) st = attention_forward_into(b, sv, LTX2_A2V, xin[0], xin[1], kept);
        if (!st) st = attention_forward_into(b, sv, LTX2_V2A, xin[2], xin[3], kept);
    }
    if (!st && f.to_host) st = side_send(sv);
    for (int a = LTX2_A2V; !st && a <= LTX2_V2A; a++)
        st = fwd(b->m, &b->att[a].out, *projection(sv, a), sv->side[a * SIDE_PER + SO], d.N[q_stream[a]]);
    if (!st && f.to_host) st = side_drop(sv, f.ks); /* the sides' last reader is done */
    for (int s = 0; !st && s < 2; s++) { /* x3, then x4 */
        const int64_t w = d.W[s], stride = LTX2_MOD_ROWS * w;
        gated_residual_forward(y[s], y[s], sv->mod[s] + 10 * w, *projection(sv, s ? LTX2_V2A : LTX2_A2V), d.B, d.T[s],
                               w, stride);
        st = ffn_compute(b, s, y[s], sv->mod[s], sv->f1[s], sv->f2[s]);
        if (!st) gated_residual_forward(y[s], y[s], sv->mod[s] + 5 * w, sv->f2[s], d.B, d.T[s], w, stride);
    }
    if (!st) *out = (block_state){.n = 2, .t = {y[0], y[1]}};
    return frame_end(&f, st, sv, saved_io, y, 2);
}

/* The feed-forward's backward on stream s: g holds dL/dx4 on entry, dL/dx3 on return. */
static st_status ffn_backward(const ltx2_block *b, int s, block_saved *sv, const float *x3, float *dmod, float *g)
{
    const dims d = dims_of(b);
    const int64_t w = d.W[s], N = d.N[s], F = d.F[s], stride = LTX2_MOD_ROWS * w;
    const float *mod = sv->mod[s];
    op_state stats = {0};
    scratch k = {.pool = b->m->pool};
    float *df2 = scratch_take_zero(&k, N * w, MEM_WORKSPACE, "ltx2.dff2");
    float *gl = scratch_take(&k, N * F, MEM_WORKSPACE, "ltx2.gelu");
    float *dg = scratch_take_zero(&k, N * F, MEM_WORKSPACE, "ltx2.dgelu");
    if (k.status) return scratch_end(&k);
    gelu_forward(gl, sv->f1[s], N * F);
    gated_residual_backward(g, dmod + 5 * w, df2, g, mod + 5 * w, sv->f2[s], d.B, d.T[s], w, stride);
    if ((k.status = bwd(b->m, &b->ff2[s], dg, df2, gl, N))) return scratch_end(&k);
    scratch_drop(&k, gl);
    scratch_drop(&k, df2);
    gelu_backward(dg, dg, sv->f1[s], N * F); /* in place: d ff0's output */
    float *ln = scratch_take(&k, N * w, MEM_WORKSPACE, "ltx2.ln");
    float *h = scratch_take(&k, N * w, MEM_WORKSPACE, "ltx2.h");
    float *dh = scratch_take_zero(&k, N * w, MEM_WORKSPACE, "ltx2.dh");
    if (k.status || (k.status = norm(b, s, ln, x3, &stats))) goto done;
    modulate_rows(b, s, h, ln, mod, 4, 3);
    if ((k.status = bwd(b->m, &b->ff0[s], dh, dg, h, N))) goto done;
    modulate_rows_back(b, s, dh, dmod, dh, ln, mod, 4, 3);
    norm_back(b, s, g, dh, x3, &stats);
done:
    op_state_release(&stats);
    return scratch_end(&k);
}

/* The cross-modal attentions' backward: g[s] holds dL/dx3 (dL/da3) on entry, dL/dx2 on return. */
static st_status cross_backward(const ltx2_block *b, block_saved *sv, float *const x2[2], float *dmod[2], float *g[2])
{
    const dims d = dims_of(b);
    op_state stats[2] = {{0}, {0}};
    scratch k = {.pool = b->m->pool};
    float *dout[2], *nrm[2], *dn[2], *xin[4], *dxin[4];
    for (int s = 0; s < 2; s++) { /* the gates: dL/d(each projection) */
        const int64_t w = d.W[s];
        dout[s] = scratch_take_zero(&k, d.N[s] * w, MEM_WORKSPACE, "ltx2.dcross_out");
        if (k.status) return scratch_end(&k);
        gated_residual_backward(g[s], dmod[s] + 10 * w, dout[s], g[s], sv->mod[s] + 10 * w,
                                *projection(sv, s ? LTX2_V2A : LTX2_A2V), d.B, d.T[s], w, LTX2_MOD_ROWS * w);
    }
    for (int s = 0; s < 2; s++) {
        nrm[s] = scratch_take(&k, d.N[s] * d.W[s], MEM_WORKSPACE, "ltx2.cross_norm");
        dn[s] = scratch_take_zero(&k, d.N[s] * d.W[s], MEM_WORKSPACE, "ltx2.dcross_norm");
        if (!k.status) k.status = norm(b, s, nrm[s], x2[s], &stats[s]);
    }
    for (int i = 0; i < 4; i++) {
        const int s = i == 1 || i == 2; /* the stream of a2v's q, k, v and v2a's q, k, v in cross_inputs' order */
        xin[i] = scratch_take(&k, d.N[s] * d.W[s], MEM_WORKSPACE, "ltx2.cross_input");
        dxin[i] = scratch_take_zero(&k, d.N[s] * d.W[s], MEM_WORKSPACE, "ltx2.dcross_input");
    }
    if (k.status) goto done;
    cross_inputs(b, sv, (const float *const *)nrm, xin);
    if ((k.status = attention_backward_from(b, sv, LTX2_A2V, dout[0], xin[0], xin[1], dxin[0], dxin[1]))) goto done;
    if ((k.status = attention_backward_from(b, sv, LTX2_V2A, dout[1], xin[2], xin[3], dxin[2], dxin[3]))) goto done;
    modulate_rows_back(b, 0, dn[0], dmod[0], dxin[0], nrm[0], sv->mod[0], 6, 7);
    modulate_rows_back(b, 1, dn[1], dmod[1], dxin[1], nrm[1], sv->mod[1], 6, 7);
    modulate_rows_back(b, 1, dn[1], dmod[1], dxin[2], nrm[1], sv->mod[1], 8, 9);
    modulate_rows_back(b, 0, dn[0], dmod[0], dxin[3], nrm[0], sv->mod[0], 8, 9);
    for (int s = 0; s < 2; s++) norm_back(b, s, g[s], dn[s], x2[s], &stats[s]);
done:
    op_state_release(&stats[0]);
    op_state_release(&stats[1]);
    return scratch_end(&k);
}

/* The prompt's and the self-attention's backward on stream s: g holds dL/dx2 on entry, dL/dx on return. */
static st_status attention_backward_stream(const ltx2_block *b, int s, block_saved *sv, const float *x,
                                           const float *x1, float *dmod, float *g)
{
    const dims d = dims_of(b);
    const int64_t w = d.W[s], N = d.N[s];
    const int text = s ? LTX2_TEXT_A : LTX2_TEXT_V, self = s ? LTX2_SELF_A : LTX2_SELF_V;
    op_state stats = {0};
    scratch k = {.pool = b->m->pool};
    float *ln = scratch_take(&k, N * w, MEM_WORKSPACE, "ltx2.ln");
    float *h = scratch_take(&k, N * w, MEM_WORKSPACE, "ltx2.h");
    float *dh = scratch_take_zero(&k, N * w, MEM_WORKSPACE, "ltx2.dh");
    float *dout = scratch_take_zero(&k, N * w, MEM_WORKSPACE, "ltx2.dout");
    if (k.status) return scratch_end(&k);
    /* x2 = x1 + text_attention(RMSNorm(x1)): g is dL/d(its output) and stays the residual's */
    if ((k.status = norm(b, s, h, x1, &stats))) goto done;
    if ((k.status = attention_backward_from(b, sv, text, g, h, b->ctx->text[s], dh, b->ctx->dtext[s]))) goto done;
    norm_back(b, s, g, dh, x1, &stats);
    op_state_release(&stats);
    /* x1 = x + gate_msa * self_attention(RMSNorm(x) (1 + scale_msa) + shift_msa) */
    gated_residual_backward(g, dmod + 2 * w, dout, g, sv->mod[s] + 2 * w, *projection(sv, self), d.B, d.T[s], w,
                            LTX2_MOD_ROWS * w);
    if ((k.status = norm(b, s, ln, x, &stats))) goto done;
    modulate_rows(b, s, h, ln, sv->mod[s], 1, 0);
    zero_bytes(dh, (size_t)(N * w) * sizeof(float));
    if ((k.status = attention_backward_from(b, sv, self, dout, h, h, dh, dh))) goto done;
    modulate_rows_back(b, s, dh, dmod, dh, ln, sv->mod[s], 1, 0);
    norm_back(b, s, g, dh, x, &stats);
done:
    op_state_release(&stats);
    return scratch_end(&k);
}

/* grad->t holds dL/dx4 and dL/da4 on entry; each stream's gradient is accumulated in place, back to dL/dx, dL/da. */
static st_status ltx2_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    ltx2_block *b = blk->self;
    const dims d = dims_of(b);
    bool recomputed = false;
    scratch k = side_scratch(b->m->pool, sv);
    float *dmod[2], *x1[2], *x2[2], *x3[2], *g[2] = {grad->t[0], grad->t[1]};
    for (int s = 0; s < 2; s++) {
        const int64_t n = d.N[s] * d.W[s];
        dmod[s] = scratch_take_zero(&k, d.B * LTX2_MOD_ROWS * d.W[s], MEM_WORKSPACE, "ltx2.dmod");
        x1[s] = scratch_take(&k, n, MEM_WORKSPACE, "ltx2.x1");
        x2[s] = scratch_take(&k, n, MEM_WORKSPACE, "ltx2.x2");
        x3[s] = scratch_take(&k, n, MEM_WORKSPACE, "ltx2.x3");
        if (!k.status) residuals(b, s, in->t[s], sv, x1[s], x2[s], x3[s]);
    }
    if (k.status) goto done;
    if (!sv->f1[0]) { /* KEEP_ATTENTION: recompute the feed-forwards' GEMM outputs */
        recomputed = true;
        for (int s = 0; s < 2 && !k.status; s++) {
            sv->f1[s] = scratch_take(&k, d.N[s] * d.F[s], MEM_ACTIVATIONS, "ltx2.ff0 (recomputed)");
            sv->f2[s] = scratch_take(&k, d.N[s] * d.W[s], MEM_ACTIVATIONS, "ltx2.ff2 (recomputed)");
            if (!k.status) k.status = ffn_compute(b, s, x3[s], sv->mod[s], sv->f1[s], sv->f2[s]);
        }
    }
    for (int s = 0; s < 2 && !k.status; s++) k.status = ffn_backward(b, s, sv, x3[s], dmod[s], g[s]);
    side_ffn_drop(sv, &k, &recomputed);
    if (!k.status) k.status = cross_backward(b, sv, x2, dmod, g);
    for (int s = 0; s < 2 && !k.status; s++)
        k.status = attention_backward_stream(b, s, sv, in->t[s], x1[s], dmod[s], g[s]);
    for (int s = 0; s < 2 && !k.status; s++) { /* the tables' gradients sum over the batch; the model's rows go back */
        const int64_t w = d.W[s], stride = LTX2_MOD_ROWS * w;
        for (int64_t i = 0; i < d.B; i++) {
            const float *r = dmod[s] + i * stride;
            add_to(b->ctx->dmod[s] + i * 6 * w, r, 6 * w);
            add_to(b->ctx->dca[s] + i * 5 * w, r + 6 * w, 5 * w);
            if (G(b->table[s])) add_to(G(b->table[s]), r, 6 * w);
            if (G(b->ca_table[s])) add_to(G(b->ca_table[s]), r + 6 * w, 5 * w);
        }
    }
done:
    side_ffn_forget(sv, &recomputed);
    return scratch_end(&k);
}

const block_kind ltx2_block_kind = {
    SIDE_BLOCK_KIND("ltx2", ltx2_kept_bytes, ltx2_side_bytes, ltx2_forward, ltx2_backward)};
