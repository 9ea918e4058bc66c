/* The cross-attention DiT block (xdit.h): diffusers' PixArt BasicTransformerBlock with adaLN-single,
 * WanTransformerBlock and LTXVideoTransformerBlock, one kind with their differences as options.
 *
 *   (shift1, scale1, gate1, shift2, scale2, gate2) = scale_shift_table + t6   (t6: the model's, shared by the blocks)
 *   x1 = x  + gate1 * out(self_attention(q, k, v of LN(x) (1 + scale1) + shift1))
 *   x2 = x1 + out'(cross_attention(q' of c, k' and v' of the text)),  c = x1, or Wan's LayerNorm of it with weights
 *   x3 = x2 + gate2 * ff2(gelu(ff0(LN(x2) (1 + scale2) + shift2)))
 *
 * Sana's: linear self-attention, the cross-attention over its own heads, and GLUMBConv for ff0 .. ff2 (xdit.h);
 * with Wan's and LTX's RMSNorm of q and k over the whole width (before the heads split) in both attentions and their
 * rotary embedding of the self-attention's q and k (LTX's over the whole width too), LTX's RMSNorms in place of the
 * LNs; the cross-attention's key mask is the model's (PixArt's and LTX's padding bias). Wan Animate's blocks add, in
 * the cross-attention, an attention of the same q' to the reference image's tokens (added keys and values, k
 * RMSNorm-ed), summed with the text's before out'; and after blocks 0, k, 2k, ... a face adapter,
 *   y = x3 + fout(attention(RMSNorm per head of fq(LN(x3)), of fk and fv of the latent frame's face tokens)).
 *
 * Forward keeps the modulation, the attentions' inputs (q, k and v after their norms and rotation; the raw q and k
 * where a norm follows them), their outputs and states, the output projections, and with KEEP_ALL the
 * feed-forward's two GEMM outputs; everything pointwise (the LayerNorms, the modulated inputs, x1, c, x2, the GELU)
 * is recomputed from those and the block's input with the same kernels, so bitwise as forward made it. The text's
 * keys and values are kept with the rest: a recompute makes them again from the kept text, which costs two GEMMs
 * of the text's few hundred rows per block. */
#include "models/xattn/xdit.h"

#include "models/core/attn_side.h"
#include "models/core/family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* block_saved is attn_side.h's: the self-attention's side in SQ .. SKR with state 0 and output projection o[0],
 * the cross-attention's in XQ .. XKR with state 1 and o2, the modulation in mod[0], the feed-forward's GEMM outputs
 * in f1[0] and f2[0]. Raw q and k (SQR, SKR, XQR, XKR) only where a norm follows them. The image attention of
 * Wan's image-to-video cross-attention (added_kv) has the third side and state, the face adapter's the fourth; Wan
 * S2V's audio injector (its blocks have no image attention) the third. */
enum { SELF = 0, CROSS = XQ, IMAGE = 2 * SIDE_PER, FACE = 3 * SIDE_PER, AUDIO = IMAGE }; /* an attention's first side */

typedef struct dims {
    int64_t B, T, L, D, N, NL, F; /* NL: the text's rows, B L */
    int64_t NI, NF;               /* the image tokens' rows (added_kv) and the face tokens' (face), else 0 */
} dims;

/* The tokens of a sample: its latent's, then Wan S2V's reference image's */
static int64_t tokens_of(const xdit_block *b) { return b->m->shape.tokens + (b->in ? b->in->ref_tokens : 0); }

static dims dims_of(const xdit_block *b)
{
    const model_shape *s = &b->m->shape;
    const int64_t B = s->batch, T = tokens_of(b), NI = b->added_kv ? B * b->in->image_tokens : 0;
    const int64_t NF = b->face >= 0   ? B * b->in->face_frames * b->in->face_tokens
                       : b->audio >= 0 ? B * b->in->audio_chunks * b->in->audio_tokens
                                       : 0;
    return (dims){B, T, s->text, s->hidden, B * T, B * s->text, b->ffn, NI, NF};
}

/* The modulation's rows a sample (scale_shift_table + t6): 6, or Wan S2V's 12, the reference tokens' 6 after */
static int64_t mod_rows(const xdit_block *b) { return b->in && b->in->ref_tokens ? 12 : 6; }

#define W(i) (param_at(b->m->params, (i))->w)
#define G(i) (param_at(b->m->params, (i))->g)

static attn_shape self_shape(const xdit_block *b)
{
    const model_shape *s = &b->m->shape;
    return (attn_shape){.batch = s->batch, .tokens = tokens_of(b), .heads = s->heads, .head_dim = s->hidden / s->heads,
                        .mechanism = b->sana ? ATTN_LINEAR : s->mechanism};
}

static attn_shape cross_shape(const xdit_block *b)
{
    attn_shape a = self_shape(b);
    a.kv_tokens = b->m->shape.text, a.mechanism = b->m->shape.mechanism;
    if (b->sana) a.heads = b->cross_heads, a.head_dim = b->m->shape.hidden / b->cross_heads;
    return a;
}

static attn_shape image_shape(const xdit_block *b)
{
    attn_shape a = self_shape(b);
    a.kv_tokens = b->in->image_tokens;
    return a;
}

/* Each latent frame's tokens attend to that frame's face tokens: a batch of B x frames; Wan S2V's audio injector:
 * each chunk of a sample's video tokens to the chunk's audio tokens */
static attn_shape face_shape(const xdit_block *b)
{
    attn_shape a = self_shape(b);
    if (b->audio >= 0) {
        const int64_t n = b->in->audio_chunks;
        a.batch *= n, a.tokens = b->m->shape.tokens / n, a.kv_tokens = b->in->audio_tokens;
        return a;
    }
    a.batch *= b->in->face_frames, a.tokens /= b->in->face_frames, a.kv_tokens = b->in->face_tokens;
    return a;
}

/* The modulation's ops over the block's tokens, from rows row (and row + 1) of mod (grad: of dmod): one call, or
 * with Wan S2V's reference tokens one a sample and segment, the reference's rows 6 after the video's. */
enum mod_op { MOD_FWD, MOD_BWD, GATE_FWD, GATE_BWD };
static float *at_or_null(float *p, int64_t k) { return p ? p + k : NULL; }
static void mod_apply(const xdit_block *b, enum mod_op op, int row, float *out, float *dmod, float *dh, const float *in,
                      const float *in2, const float *mod)
{
    dims d = dims_of(b);
    const int64_t R = mod_rows(b) * d.D, V = b->m->shape.tokens;
    const bool two = R != 6 * d.D;
    for (int64_t i = 0; i < (two ? d.B : 1); i++)
        for (int g = 0; g < (two ? 2 : 1); g++) {
            const int64_t at = (i * d.T + (g ? V : 0)) * d.D, n = two ? (g ? d.T - V : V) : d.T, nb = two ? 1 : d.B;
            const int64_t r = i * R + (6 * g + row) * d.D;
            if (op == MOD_FWD) modulate_forward(out + at, in + at, mod + r, mod + r + d.D, nb, n, d.D, R);
            else if (op == MOD_BWD)
                modulate_backward(out + at, dmod + r, dmod + r + d.D, in + at, in2 + at, mod + r + d.D, nb, n, d.D, R);
            else if (op == GATE_FWD) gated_residual_forward(out + at, in + at, mod + r, in2 + at, nb, n, d.D, R);
            else
                gated_residual_backward(out + at, dmod + r, at_or_null(dh, at), in + at, mod + r, in2 + at, nb, n, d.D,
                                        R);
        }
}

void xdit_block_register(param_set *s, xdit_block *b, const char *prefix, const char *ff, int table_dims,
                         const model_config *c)
{
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    char n[PARAM_NAME_MAX], a[32];
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", prefix, suffix), n)
#define ATTN(i, leaf) (snprintf(a, sizeof a, "attn%d.%s", i + 1, leaf), a)
    for (int i = 0; i < 2; i++) { /* Sana's attn1 has no q, k, v biases; Wan's and LTX's norm q and k */
        attn_weights *w = i ? &b->ca : &b->sa;
        const bool bias = (i || !b->sana) && !b->no_qkv_bias;
        w->q = block_linear(s, prefix, ATTN(i, "to_q"), D, D, bias, ra, c);
        w->k = block_linear(s, prefix, ATTN(i, "to_k"), D, D, bias, ra, c);
        w->v = block_linear(s, prefix, ATTN(i, "to_v"), D, D, bias, ra, c);
        w->out = block_linear(s, prefix, ATTN(i, "to_out.0"), D, D, true, ra, c);
        w->norm_q = b->qk_norm ? block_norm(s, prefix, ATTN(i, "norm_q"), D, c) : -1;
        w->norm_k = b->qk_norm ? block_norm(s, prefix, ATTN(i, "norm_k"), D, c) : -1;
    }
#undef ATTN
    if (b->cross_norm) {
        b->cross_w = param_add(s, NAME("norm2.weight"), 1, (int64_t[]){D}, full);
        b->cross_b = param_add(s, NAME("norm2.bias"), 1, (int64_t[]){D}, full);
    }
    if (b->sana) { /* GLUMBConv's 1 x 1 convolutions are linears over the tokens, their weights kept 4-D */
        const int64_t F = b->ffn;
        b->ff0 = (lin_layer){.w = param_add(s, NAME("ff.conv_inverted.weight"), 4, (int64_t[]){2 * F, D, 1, 1}, full),
                             .b = param_add(s, NAME("ff.conv_inverted.bias"), 1, (int64_t[]){2 * F}, full),
                             .lora_a = -1, .lora_b = -1, .in = D, .out = 2 * F};
        b->conv_w = param_add(s, NAME("ff.conv_depth.weight"), 4, (int64_t[]){2 * F, 1, 3, 3}, full);
        b->conv_b = param_add(s, NAME("ff.conv_depth.bias"), 1, (int64_t[]){2 * F}, full);
        b->ff2 = (lin_layer){.w = param_add(s, NAME("ff.conv_point.weight"), 4, (int64_t[]){D, F, 1, 1}, full),
                             .b = -1, .lora_a = -1, .lora_b = -1, .in = F, .out = D};
        if (b->self_mask) b->conv_temp = param_add(s, NAME("ff.conv_temp.weight"), 4, (int64_t[]){D, D, 3, 1}, full);
    } else {
        char f0[64], f2[64];
        snprintf(f0, sizeof f0, "%s.net.0.proj", ff);
        snprintf(f2, sizeof f2, "%s.net.2", ff);
        b->ff0 = block_linear(s, prefix, f0, D, b->ffn, true, rm, c);
        b->ff2 = block_linear(s, prefix, f2, b->ffn, D, true, rm, c);
    }
    b->table = param_add(s, NAME("scale_shift_table"), table_dims, table_dims == 3 ? (int64_t[]){1, 6, D} : (int64_t[]){6, D},
                         full);
#undef NAME
    if (b->hint_out >= 0) b->proj_out = block_linear(s, prefix, "proj_out", D, D, true, 0, c);
    if (b->added_kv) {
        b->ak = block_linear(s, prefix, "attn2.add_k_proj", D, D, true, 0, c);
        b->av = block_linear(s, prefix, "attn2.add_v_proj", D, D, true, 0, c);
        b->norm_added_k = block_norm(s, prefix, "attn2.norm_added_k", D, c);
    }
    if (b->audio >= 0) { /* diffusers' Attention: no q, k, v biases, no norms */
        char ap[64];
        snprintf(ap, sizeof ap, "audio_injector.injector.%d", b->audio);
        b->fa.q = block_linear(s, ap, "to_q", D, D, false, ra, c);
        b->fa.k = block_linear(s, ap, "to_k", D, D, false, ra, c);
        b->fa.v = block_linear(s, ap, "to_v", D, D, false, ra, c);
        b->fa.out = block_linear(s, ap, "to_out.0", D, D, true, ra, c);
        b->fa.norm_q = b->fa.norm_k = -1;
        snprintf(ap, sizeof ap, "audio_injector.injector_adain_layers.%d", b->audio);
        b->adain = block_linear(s, ap, "linear", D, 2 * D, true, 0, c);
    }
    if (b->face >= 0) { /* PEFT's to_q, to_k, to_v match its projections; its output is to_out, not to_out.0 */
        char fp[64];
        snprintf(fp, sizeof fp, "face_adapter.%d", b->face);
        b->fa.q = block_linear(s, fp, "to_q", D, D, true, ra, c);
        b->fa.k = block_linear(s, fp, "to_k", D, D, true, ra, c);
        b->fa.v = block_linear(s, fp, "to_v", D, D, true, ra, c);
        b->fa.out = block_linear(s, fp, "to_out", D, D, true, 0, c);
        b->fa.norm_q = block_norm(s, fp, "norm_q", D / c->heads, c);
        b->fa.norm_k = block_norm(s, fp, "norm_k", D / c->heads, c);
    }
}

/* ---- sizes ---- */

/* The image attention's (added_kv) and the face adapter's sides and states: q, q raw and the output of the tokens; k,
 * k raw and v of the image's or face's (the image's output goes through the cross-attention's to_out, the face's
 * through its own, whose input is the output side: neither keeps an output projection of its own) */
static size_t added_sides_bytes(const xdit_block *b, dims d, size_t elem)
{
    size_t bytes = 0;
    if (b->added_kv) {
        const attn_shape is = image_shape(b);
        bytes += (size_t)(3 * (d.N + d.NI) * d.D) * elem + attention_kept_bytes(&is);
    }
    if (b->face >= 0) {
        const attn_shape fs = face_shape(b);
        bytes += (size_t)(3 * (d.N + d.NF) * d.D) * elem + attention_kept_bytes(&fs);
    }
    if (b->audio >= 0) { /* q and the output of the video tokens, k and v of the audio's */
        const attn_shape as = face_shape(b);
        bytes += (size_t)(2 * (d.B * b->m->shape.tokens + d.NF) * d.D) * elem + attention_kept_bytes(&as);
    }
    return bytes;
}

/* the sides (q, k, v, attention output; raw q and k where a norm follows) and both attention states */
static size_t xdit_side_bytes(const block *blk)
{
    const xdit_block *b = blk->self;
    const size_t elem = side_elem(b->m);
    dims d = dims_of(b);
    const attn_shape ss = self_shape(b), cs = cross_shape(b);
    const int64_t qn = b->sa.norm_q >= 0, self = (4 + 2 * qn) * d.N * d.D, cross = (2 + qn) * (d.N + d.NL) * d.D;
    size_t bytes = (size_t)(self + cross) * elem + attention_kept_bytes(&ss) + attention_kept_bytes(&cs);
    return bytes + added_sides_bytes(b, d, elem);
}

/* beside the sides: the modulation and both output projections (the image's and the face's attentions keep none of
 * their own); with KEEP_ALL the feed-forward's two GEMM outputs */
static size_t xdit_kept_bytes(const block *blk, keep_level keep)
{
    const xdit_block *b = blk->self;
    dims d = dims_of(b);
    const size_t elem = side_elem(b->m);
    return side_block_kept_bytes(xdit_side_bytes(blk), self_shape(b), keep,
                                 d.B * mod_rows(b) * d.D + 2 * d.N * d.D, (b->sana ? 2 : 1) * d.N * d.F + d.N * d.D,
                                 elem);
}

/* ---- pieces run in forward and again in backward ---- */

/* The block's norm1 and norm2 without weights: LayerNorm, or LTX's RMSNorm (stats kept when asked) */
static st_status xd_norm(const xdit_block *b, float *y, const float *x, op_state *stats)
{
    dims d = dims_of(b);
    return b->rms_norms ? rmsnorm_forward(b->m->pool, y, x, NULL, d.N, d.D, XDIT_LN_EPS, stats)
                        : layernorm_forward(b->m->pool, y, x, NULL, NULL, d.N, d.D, XDIT_LN_EPS, stats);
}

/* dx += the norm's input gradient from dy */
static void xd_norm_back(const xdit_block *b, float *dx, const float *dy, const float *x, const op_state *stats)
{
    dims d = dims_of(b);
    if (b->rms_norms) rmsnorm_backward(dx, NULL, dy, x, NULL, d.N, d.D, stats);
    else layernorm_backward(dx, NULL, NULL, dy, x, NULL, d.N, d.D, stats);
}

/* The self-attention's q or k rotated in place (back: by the inverse rotation, its gradient) */
static void rotate(const xdit_block *b, float *x, bool back)
{
    dims d = dims_of(b);
    const int64_t heads = b->rope_width ? 1 : b->m->shape.heads, hd = d.D / heads;
    if (back) rope_backward(x, d.B, d.T, heads, hd, d.D, d.T * d.D, b->m->ctx.rope);
    else rope_forward(x, d.B, d.T, heads, hd, d.D, d.T * d.D, b->m->ctx.rope);
}

/* h = norm(x) * (1 + scale) + shift, chunk the shift's index in mod */
static st_status ln_modulate(const xdit_block *b, float *h, const float *x, const float *mod, int chunk)
{
    st_status st = xd_norm(b, h, x, NULL);
    if (!st) mod_apply(b, MOD_FWD, chunk, h, NULL, NULL, h, NULL, mod);
    return st;
}

/* The cross-attention's input c from x1: x1 itself, or Wan's LayerNorm of it with weights (stats kept when asked) */
static st_status cross_input(const xdit_block *b, float *c, const float *x1, op_state *stats)
{
    dims d = dims_of(b);
    if (!b->cross_norm) {
        copy_rows(c, d.D, x1, d.D, d.N, d.D);
        return ST_OK;
    }
    return layernorm_forward(b->m->pool, c, x1, W(b->cross_w), W(b->cross_b), d.N, d.D, XDIT_LN_EPS, stats);
}

static void rotate_side(const void *self, float *x, bool keys, bool back)
{
    (void)keys;
    rotate(self, x, back);
}

/* The block's self-attention (at SELF) or cross-attention (at CROSS), for attn_side's forward and backward. Without
 * a norm after it, k's bias adds q . b to every logit of a query alike, which the softmax cancels: its gradient, the
 * sum of dk over the keys, is zero (diffusers' to rounding) and is left exactly zero. */
static side_attention attention_of(const xdit_block *b, int at)
{
    const int64_t D = b->m->shape.hidden;
    if (at == FACE || (at == AUDIO && b->audio >= 0))
        return side_attention_of((side_attention){.m = b->m, .norm_width = D / b->m->shape.heads, .eps = b->eps,
                                                  .shape = face_shape(b), .block = b},
                                 &b->fa);
    if (at == IMAGE) /* the text attention's queries again; to_out is applied to the sum of both outputs */
        return (side_attention){.m = b->m, .q = &b->ca.q, .k = &b->ak, .v = &b->av, .norm_q = b->ca.norm_q,
                                .norm_k = b->norm_added_k, .norm_width = D, .eps = b->eps, .shape = image_shape(b),
                                .block = b};
    const bool cross = at == CROSS;
    const attn_weights *w = cross ? &b->ca : &b->sa;
    const side_attention a = {.m = b->m, .norm_width = D, .eps = b->eps, .shape = cross ? cross_shape(b) : self_shape(b),
                              .mask = cross ? b->m->ctx.mask : b->self_mask,
                              .rotate = !cross && b->rope ? rotate_side : NULL, .block = b,
                              .k_bias_zero = w->norm_k < 0 && (cross || !b->sana)};
    return side_attention_of(a, w);
}

/* The token grid: frames of rows x cols tokens (an image's: 1 frame) */
typedef struct token_grid {
    int64_t frames, rows, cols;
} token_grid;

static token_grid grid_of(const xdit_block *b)
{
    const model_config *c = &b->m->cfg;
    return (token_grid){c->frames / c->patch_t, grid_rows(c), grid_cols(c)};
}

/* GLUMBConv between ff0's output f1 (N, 2F) and ff2's input a (N, F): s1 = SiLU(f1), c = conv_depth(s1) (bias
 * added, each frame's grid on its own), a = c[:, :F] SiLU(c[:, F:]); s1 and c are left for backward when given */
static st_status glumb_forward(const xdit_block *b, float *a, const float *f1, float *s1, float *c)
{
    dims d = dims_of(b);
    const token_grid g = grid_of(b);
    silu_forward(s1, f1, d.N * 2 * d.F);
    st_status st = depthwise3x3_forward(b->m->pool, c, s1, W(b->conv_w), W(b->conv_b), d.B * g.frames, g.rows,
                                        g.cols, 2 * d.F);
    if (!st) glu_forward(a, c + d.F, c, d.N, d.F, 2 * d.F, GLU_SILU);
    return st;
}

/* GLUMBConv's backward: *dg holds d a (N, F) in an (N, 2F) buffer and becomes d f1, a new buffer (the old one freed).
 * s1 and c are remade (a SiLU and a depthwise pass, cheap beside the GEMMs) and every (N, 2F) tensor is freed once
 * read for the last time, so at most three are live (at 81 frames of 480 px each is 1.7 GiB). */
static st_status glumb_backward(const xdit_block *b, scratch *s, const float *f1, float **dg)
{
    dims d = dims_of(b);
    const token_grid g = grid_of(b);
    const int64_t n = 2 * d.N * d.F;
    float *s1 = scratch_take(s, n, MEM_WORKSPACE, "sana.ffn.silu");
    float *c = scratch_take(s, n, MEM_WORKSPACE, "sana.ffn.conv_depth");
    if (s->status) return s->status;
    silu_forward(s1, f1, n);
    st_status st = depthwise3x3_forward(b->m->pool, c, s1, W(b->conv_w), W(b->conv_b), d.B * g.frames, g.rows,
                                        g.cols, 2 * d.F);
    scratch_drop(s, s1);
    float *dc = st ? NULL : scratch_take_zero(s, n, MEM_WORKSPACE, "sana.ffn.dconv_depth");
    if (st || s->status) return st ? st : s->status;
    glu_backward(dc + d.F, dc, *dg, c + d.F, c, d.N, d.F, 2 * d.F, GLU_SILU);
    scratch_drop(s, c);
    float *ds = *dg; /* d a is spent: the SiLU's output gradient goes there */
    zero_bytes(ds, (size_t)n * sizeof(float));
    s1 = scratch_take(s, n, MEM_WORKSPACE, "sana.ffn.silu");
    if (s->status) return s->status;
    silu_forward(s1, f1, n);
    if ((st = depthwise3x3_backward(b->m->pool, ds, G(b->conv_w), G(b->conv_b), dc, s1, W(b->conv_w),
                                    d.B * g.frames, g.rows, g.cols, 2 * d.F)))
        return st;
    scratch_drop(s, dc), scratch_drop(s, s1);
    *dg = scratch_take_zero(s, n, MEM_WORKSPACE, "sana.ffn.dff0");
    if (s->status) return s->status;
    silu_backward(*dg, ds, f1, n);
    scratch_drop(s, ds);
    return ST_OK;
}

/* The feed-forward's GEMM outputs from x2: f1 = ff0(LN(x2) (1 + scale2) + shift2), f2 = ff2(act(f1)) with GELU or
 * GLUMBConv's act */
static st_status ffn_compute(const xdit_block *b, const float *x2, const float *mod, float *f1, float *f2)
{
    dims d = dims_of(b);
    scratch s = {.pool = b->m->pool};
    float *h = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "xdit.ffn.h");
    if (!s.status) s.status = ln_modulate(b, h, x2, mod, 3);
    if (!s.status) s.status = fwd(b->m, &b->ff0, f1, h, d.N);
    scratch_drop(&s, h);
    float *g = scratch_take(&s, d.N * d.F, MEM_WORKSPACE, "xdit.ffn.gelu");
    if (!s.status && b->sana) {
        float *s1 = scratch_take(&s, 2 * d.N * d.F, MEM_WORKSPACE, "sana.ffn.silu");
        float *c = scratch_take(&s, 2 * d.N * d.F, MEM_WORKSPACE, "sana.ffn.conv_depth");
        if (!s.status) s.status = glumb_forward(b, g, f1, s1, c);
        scratch_drop(&s, c), scratch_drop(&s, s1);
    } else if (!s.status) {
        gelu_forward(g, f1, d.N * d.F);
    }
    if (!s.status) s.status = fwd(b->m, &b->ff2, f2, g, d.N);
    if (!s.status && b->conv_temp >= 0) { /* Sana-Video: f2 += conv_temp(f2) */
        const token_grid tg = grid_of(b);
        scratch_drop(&s, g);
        float *t = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "sanavideo.ffn.conv_temp");
        if (!s.status)
            s.status = temporal_conv3_forward(b->m->pool, t, f2, W(b->conv_temp), d.B, tg.frames, tg.rows * tg.cols,
                                              d.D);
        if (!s.status) add_to(f2, t, d.N * d.D), side_made(b->m, f2, d.N * d.D); /* as PyTorch's bf16 sum */
    }
    return scratch_end(&s);
}

/* to_out's input: the text attention's output, plus the image attention's with added_kv (summed into tmp) */
static const float *cross_out(const xdit_block *b, const block_saved *sv, float *tmp)
{
    if (!b->added_kv) return sv->side[XO];
    dims d = dims_of(b);
    copy_rows(tmp, d.D, sv->side[XO], d.D, d.N, d.D);
    add_to(tmp, sv->side[IMAGE + SO], d.N * d.D);
    return tmp;
}

/* The block's output before a face adapter: y = x2 + gate2 f2, and a VACE hint */
static void block_output(const xdit_block *b, const block_saved *sv, const float *x2, float *y)
{
    dims d = dims_of(b);
    mod_apply(b, GATE_FWD, 5, y, NULL, NULL, x2, sv->f2[0], sv->mod[0]);
    if (b->hint_in >= 0) add_to(y, b->hints[b->hint_in], d.N * d.D);
}

/* Animate's face adapter on the block's output: y += to_out(attention(q of LN(y), k and v of the face tokens)),
 * h a row buffer. An offloaded block sends its sides after this, the last attention. */
static st_status face_forward(const xdit_block *b, frame *f, block_saved *sv, float *y, float *h, bool keep)
{
    dims d = dims_of(b);
    st_status st = ST_OK;
    if (!f->from_host) {
        const side_attention a = attention_of(b, FACE);
        st = layernorm_forward(b->m->pool, h, y, NULL, NULL, d.N, d.D, XDIT_LN_EPS, NULL);
        if (!st) st = side_attention_forward(&a, sv, FACE, h, b->in->face, keep);
    }
    if (!st && f->to_host) st = side_send(sv);
    if (!st) st = fwd(b->m, &b->fa.out, h, sv->side[FACE + SO], d.N);
    if (!st && f->to_host) st = side_drop(sv, f->ks);
    if (!st) add_to(y, h, d.N * d.D);
    return st;
}

#define ADAIN_EPS 1e-5f /* AdaLayerNorm's LayerNorm, the audio injector's */

/* The audio injector's query input h (B V, D) from the block's output y: each sample's video rows (g, gathered) to
 * LayerNorm (stats kept when asked) modulated per chunk by mod = adain(in->audio_cs) (shift, scale) */
static st_status audio_input(const xdit_block *b, const float *y, float *g, float *ln, float *h, float *mod,
                             op_state *stats)
{
    dims d = dims_of(b);
    const int64_t V = b->m->shape.tokens, A = b->in->audio_chunks;
    copy_rows(g, V * d.D, y, d.T * d.D, d.B, V * d.D);
    st_status st = fwd(b->m, &b->adain, mod, b->in->audio_cs, d.B * A);
    if (!st) st = layernorm_forward(b->m->pool, ln, g, NULL, NULL, d.B * V, d.D, ADAIN_EPS, stats);
    if (!st) modulate_forward(h, ln, mod, mod + d.D, d.B * A, V / A, d.D, 2 * d.D);
    return st;
}

/* Wan S2V's audio injector on the block's output y: y[video] += to_out(attention(q of audio_input, k and v of the
 * chunk's audio tokens)). An offloaded block sends its sides after this, the last attention. */
static st_status audio_forward(const xdit_block *b, frame *f, block_saved *sv, float *y, bool keep)
{
    dims d = dims_of(b);
    const int64_t V = b->m->shape.tokens, NV = d.B * V;
    scratch s = {.pool = b->m->pool};
    float *g = scratch_take(&s, NV * d.D, MEM_WORKSPACE, "s2v.audio_rows");
    float *ln = scratch_take(&s, NV * d.D, MEM_WORKSPACE, "s2v.audio_ln");
    float *h = scratch_take(&s, NV * d.D, MEM_WORKSPACE, "s2v.audio_h");
    float *mod = scratch_take(&s, d.B * b->in->audio_chunks * 2 * d.D, MEM_WORKSPACE, "s2v.audio_adain");
    if (s.status) return scratch_end(&s);
    if (!f->from_host) {
        const side_attention a = attention_of(b, AUDIO);
        s.status = audio_input(b, y, g, ln, h, mod, NULL);
        if (!s.status) s.status = side_attention_forward(&a, sv, AUDIO, h, b->in->audio, keep);
    }
    if (!s.status && f->to_host) s.status = side_send(sv);
    if (!s.status) s.status = fwd(b->m, &b->fa.out, h, sv->side[AUDIO + SO], NV);
    if (!s.status && f->to_host) s.status = side_drop(sv, f->ks);
    for (int64_t i = 0; !s.status && i < d.B; i++) add_to(y + i * d.T * d.D, h + i * V * d.D, V * d.D);
    return scratch_end(&s);
}

/* gx holds dL/d(the block's output); it gains the audio injector's input gradient (y from x2 again), and
 * in->daudio_cs adain's input's */
static st_status audio_backward(const xdit_block *b, block_saved *sv, const float *x2, float *gx)
{
    dims d = dims_of(b);
    const int64_t V = b->m->shape.tokens, NV = d.B * V, NM = d.B * b->in->audio_chunks * 2 * d.D;
    scratch s = {.pool = b->m->pool};
    float *y = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "s2v.audio_input");
    float *g = scratch_take(&s, NV * d.D, MEM_WORKSPACE, "s2v.audio_rows");
    float *ln = scratch_take(&s, NV * d.D, MEM_WORKSPACE, "s2v.audio_ln");
    float *h = scratch_take(&s, NV * d.D, MEM_WORKSPACE, "s2v.audio_h");
    float *mod = scratch_take(&s, NM, MEM_WORKSPACE, "s2v.audio_adain");
    float *dmod = scratch_take_zero(&s, NM, MEM_WORKSPACE, "s2v.daudio_adain");
    float *dy = scratch_take(&s, NV * d.D, MEM_WORKSPACE, "s2v.daudio_out");
    float *dh = scratch_take_zero(&s, NV * d.D, MEM_WORKSPACE, "s2v.daudio_h");
    float *dg = scratch_take_zero(&s, NV * d.D, MEM_WORKSPACE, "s2v.daudio_rows");
    op_state stats = {0};
    const side_attention a = attention_of(b, AUDIO);
    if (s.status) return scratch_end(&s);
    block_output(b, sv, x2, y);
    copy_rows(dy, V * d.D, gx, d.T * d.D, d.B, V * d.D);
    if (!(s.status = audio_input(b, y, g, ln, h, mod, &stats)))
        s.status = side_attention_backward(&a, sv, AUDIO, dy, h, b->in->audio, dh, b->in->daudio);
    if (!s.status) {
        const int64_t A = b->in->audio_chunks;
        modulate_backward(dh, dmod, dmod + d.D, dh, ln, mod + d.D, d.B * A, V / A, d.D, 2 * d.D);
        layernorm_backward(dg, NULL, NULL, dh, g, NULL, NV, d.D, &stats);
        for (int64_t i = 0; i < d.B; i++) add_to(gx + i * d.T * d.D, dg + i * V * d.D, V * d.D);
        s.status = bwd(b->m, &b->adain, b->in->daudio_cs, dmod, b->in->audio_cs, d.B * A);
    }
    op_state_release(&stats);
    return scratch_end(&s);
}

/* ---- the block ---- */

/* Three cases (attn_side.h's frame): a plain forward at a keep level; a first forward with off, which sends both
 * attentions' sides to the host (even with KEEP_NOTHING: they are not recomputed later); and a recompute after such
 * a forward, which takes the sides back instead of computing the attentions again. */
static st_status xdit_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                              block_saved **saved_io)
{
    xdit_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t ND = d.N * d.D, NLD = d.NL * d.D;
    const float *x = in->t[0];
    frame f;
    block_saved *sv = frame_begin(&f, blk, b->m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y = scratch_take(&f.kept, ND, MEM_ACTIVATIONS, "xdit.state");
    const int64_t R = mod_rows(b);
    sv->mod[0] = scratch_take(f.ks, d.B * R * d.D, f.kt, "xdit.mod");
    /* late: the sides go to the host after the face adapter or the audio injector */
    const bool qn = b->sa.norm_q >= 0, late = b->face >= 0 || b->audio >= 0;
    int64_t numel[SIDE_MAX] = {ND, ND, ND, ND, qn ? ND : 0, qn ? ND : 0, ND, NLD, NLD, ND, qn ? ND : 0, qn ? NLD : 0};
    if (b->added_kv) memcpy(numel + IMAGE, (int64_t[SIDE_PER]){ND, d.NI * d.D, d.NI * d.D, ND, ND, d.NI * d.D},
                            sizeof(int64_t[SIDE_PER]));
    if (b->face >= 0) memcpy(numel + FACE, (int64_t[SIDE_PER]){ND, d.NF * d.D, d.NF * d.D, ND, ND, d.NF * d.D},
                             sizeof(int64_t[SIDE_PER]));
    const int64_t NVD = d.B * b->m->shape.tokens * d.D; /* the audio injector's queries: the video tokens */
    if (b->audio >= 0) memcpy(numel + AUDIO, (int64_t[SIDE_PER]){NVD, d.NF * d.D, d.NF * d.D, NVD, 0, 0},
                              sizeof(int64_t[SIDE_PER]));
    side_take(&f, sv, numel, b->face >= 0 ? 4 : b->added_kv || b->audio >= 0 ? 3 : 2);
    sv->o[0] = scratch_take(f.ks, ND, f.kt, "xdit.attention_out");
    sv->o2 = scratch_take(f.ks, ND, f.kt, "xdit.cross_attention_out");
    sv->f1[0] = scratch_take(f.fs, (b->sana ? 2 : 1) * d.N * d.F, f.ft, "xdit.ff0");
    sv->f2[0] = scratch_take(f.fs, ND, f.ft, "xdit.ff2");
    float *h = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "xdit.h");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    const bool states = keep != KEEP_NOTHING || f.to_host;
    if (!st) {
        const int64_t ld = b->m->ctx.mod_rows * d.D;
        copy_rows(sv->mod[0], R * d.D, b->m->ctx.mod, ld, d.B, 6 * d.D);
        if (R == 12) copy_rows(sv->mod[0] + 6 * d.D, R * d.D, b->m->ctx.mod + 8 * d.D, ld, d.B, 6 * d.D); /* t = 0 */
        add_row(sv->mod[0], W(b->table), d.B * R / 6, 6 * d.D);
        side_made(b->m, sv->mod[0], d.B * R * d.D); /* as PyTorch's bf16 sum */
    }
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) { /* the self-attention on LN(x) modulated */
        const side_attention a = attention_of(b, SELF);
        st = ln_modulate(b, h, x, sv->mod[0], 0);
        if (!st) st = side_attention_forward(&a, sv, SELF, h, h, states);
    }
    if (!st) st = fwd(b->m, &b->sa.out, sv->o[0], sv->side[SQ + SO], d.N);
    if (!st) { /* y holds x1; the cross-attention on c (into h) */
        mod_apply(b, GATE_FWD, 2, y, NULL, NULL, x, sv->o[0], sv->mod[0]);
        const bool kx = states && keep != KEEP_ATTENTION_OUTPUT;
        const side_attention text = attention_of(b, CROSS);
        if (!f.from_host && !(st = cross_input(b, h, y, NULL)))
            st = side_attention_forward(&text, sv, CROSS, h, b->m->ctx.text, kx);
        if (!st && !f.from_host && b->added_kv) {
            const side_attention image = attention_of(b, IMAGE);
            st = side_attention_forward(&image, sv, IMAGE, h, b->in->image, kx);
        }
    }
    if (!st && f.to_host && !late) st = side_send(sv);
    if (!st) st = fwd(b->m, &b->ca.out, sv->o2, cross_out(b, sv, h), d.N);
    if (!st && f.to_host && !late) st = side_drop(sv, f.ks); /* the sides' last reader is done */
    if (!st) {
        add_to(y, sv->o2, ND); /* x2 */
        st = ffn_compute(b, y, sv->mod[0], sv->f1[0], sv->f2[0]);
    }
    if (!st) mod_apply(b, GATE_FWD, 5, y, NULL, NULL, y, sv->f2[0], sv->mod[0]);
    if (!st && b->hint_in >= 0) add_to(y, b->hints[b->hint_in], ND); /* WanVACE: the control branch's hint */
    if (!st && b->hint_out >= 0) st = fwd(b->m, &b->proj_out, b->hints[b->hint_out], y, d.N);
    if (!st && b->face >= 0) st = face_forward(b, &f, sv, y, h, states && keep != KEEP_ATTENTION_OUTPUT);
    if (!st && b->audio >= 0) st = audio_forward(b, &f, sv, y, states && keep != KEEP_ATTENTION_OUTPUT);
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

/* gx holds dL/d(the block's output); it gains the face adapter's input gradient (y from x2 again) */
static st_status face_backward(const xdit_block *b, block_saved *sv, const float *x2, float *gx)
{
    dims d = dims_of(b);
    scratch s = {.pool = b->m->pool};
    float *y = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "xdit.face_input");
    float *h = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "xdit.face_ln");
    float *dh = scratch_take_zero(&s, d.N * d.D, MEM_WORKSPACE, "xdit.dface_ln");
    op_state stats = {0};
    const side_attention a = attention_of(b, FACE);
    if (s.status) return scratch_end(&s);
    block_output(b, sv, x2, y);
    if (!(s.status = layernorm_forward(b->m->pool, h, y, NULL, NULL, d.N, d.D, XDIT_LN_EPS, &stats)))
        s.status = side_attention_backward(&a, sv, FACE, gx, h, b->in->face, dh, b->in->dface);
    if (!s.status) layernorm_backward(gx, NULL, NULL, dh, y, NULL, d.N, d.D, &stats);
    op_state_release(&stats);
    return scratch_end(&s);
}

/* The cross-attention from gx = dL/d(to_out's output), c its queries' input: dc and the text's gradient; with
 * added_kv, to_out's input is the sum of the text's and the image's attention outputs, each of which gets its
 * gradient. */
static st_status cross_backward(const xdit_block *b, block_saved *sv, const float *gx, const float *c, float *dc)
{
    side_attention text = attention_of(b, CROSS);
    if (!b->added_kv) return side_attention_backward(&text, sv, CROSS, gx, c, b->m->ctx.text, dc, b->m->ctx.dtext);
    dims d = dims_of(b);
    scratch s = {.pool = b->m->pool};
    float *sum = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "xdit.cross_out");
    float *datt = scratch_take_zero(&s, d.N * d.D, MEM_WORKSPACE, "xdit.dcross_out");
    if (s.status || (s.status = bwd(b->m, &b->ca.out, datt, gx, cross_out(b, sv, sum), d.N))) return scratch_end(&s);
    const side_attention image = attention_of(b, IMAGE);
    text.out = NULL;
    s.status = side_attention_backward(&text, sv, CROSS, datt, c, b->m->ctx.text, dc, b->m->ctx.dtext);
    if (!s.status) s.status = side_attention_backward(&image, sv, IMAGE, datt, c, b->in->image, dc, b->in->dimage);
    return scratch_end(&s);
}

/* grad->t[0] holds dL/dx3 on entry; the residual stream's gradient is accumulated in place, becoming dL/dx2,
 * dL/dx1 and dL/dx. */
static st_status xdit_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    xdit_block *b = blk->self;
    dims d = dims_of(b);
    const int64_t N = d.N, D = d.D, B = d.B, ND = N * D;
    const float *x = in->t[0];
    float *gx = grad->t[0];
    const side_attention self_att = attention_of(b, SELF);
    op_state stats = {0};
    bool recomputed = false;
    scratch s = side_scratch(b->m->pool, sv);
    const float *mod = sv->mod[0]; /* as side_scratch has widened it */
    const int64_t R = mod_rows(b);
    float *dmod = scratch_take_zero(&s, B * R * D, MEM_WORKSPACE, "xdit.dmod");
    float *x1 = scratch_take(&s, ND, MEM_WORKSPACE, "xdit.x1");
    float *x2 = scratch_take(&s, ND, MEM_WORKSPACE, "xdit.x2");
    if (s.status) goto done;
    mod_apply(b, GATE_FWD, 2, x1, NULL, NULL, x, sv->o[0], mod); /* x1, then x2 = x1 + o2 */
    copy_rows(x2, D, x1, D, N, D);
    add_to(x2, sv->o2, ND);
    if (!sv->f1[0]) { /* KEEP_ATTENTION: recompute the feed-forward's GEMM outputs from x2 */
        sv->f1[0] = scratch_take(&s, (b->sana ? 2 : 1) * N * d.F, MEM_ACTIVATIONS, "xdit.ff0 (recomputed)");
        sv->f2[0] = scratch_take(&s, ND, MEM_ACTIVATIONS, "xdit.ff2 (recomputed)");
        recomputed = true;
        if (s.status || (s.status = ffn_compute(b, x2, mod, sv->f1[0], sv->f2[0]))) goto done;
    }
    if (b->face >= 0 && (s.status = face_backward(b, sv, x2, gx))) goto done;
    if (b->audio >= 0 && (s.status = audio_backward(b, sv, x2, gx))) goto done;
    /* WanVACE: an added hint takes the output's gradient as it is; a written one adds proj_out's to it */
    if (b->hint_in >= 0) add_to(b->dhints[b->hint_in], gx, ND);
    if (b->hint_out >= 0) {
        float *y = scratch_take(&s, ND, MEM_WORKSPACE, "xdit.output");
        if (s.status) goto done;
        block_output(b, sv, x2, y);
        if ((s.status = bwd(b->m, &b->proj_out, gx, b->dhints[b->hint_out], y, N))) goto done;
        scratch_drop(&s, y);
    }
    /* feed-forward: x3 = x2 + gate2 * ff2(act(ff0(h3))) */
    const int64_t F1 = (b->sana ? 2 : 1) * N * d.F; /* ff0's output */
    float *df2 = scratch_take_zero(&s, ND, MEM_WORKSPACE, "xdit.dff2");
    float *g = scratch_take(&s, N * d.F, MEM_WORKSPACE, "xdit.gelu");
    if (s.status) goto done;
    if (b->sana) { /* GLUMBConv's inner tensors are remade when its backward needs them, not held till then */
        float *s1 = scratch_take(&s, F1, MEM_WORKSPACE, "sana.ffn.silu");
        float *cd = scratch_take(&s, F1, MEM_WORKSPACE, "sana.ffn.conv_depth");
        if (!s.status) s.status = glumb_forward(b, g, sv->f1[0], s1, cd);
        scratch_drop(&s, cd), scratch_drop(&s, s1);
    } else {
        gelu_forward(g, sv->f1[0], N * d.F);
    }
    mod_apply(b, GATE_BWD, 5, gx, dmod, df2, gx, sv->f2[0], mod);
    if (!s.status && b->conv_temp >= 0) { /* Sana-Video: df2 (of f2 + conv_temp(f2)) becomes conv_point's output's */
        const token_grid tg = grid_of(b);
        float *pre = scratch_take(&s, ND, MEM_WORKSPACE, "sanavideo.ffn.conv_point");
        float *dpre = scratch_take(&s, ND, MEM_WORKSPACE, "sanavideo.ffn.dconv_point");
        if (!s.status) s.status = fwd(b->m, &b->ff2, pre, g, N); /* conv_point's output again, from the same g */
        if (!s.status) {
            copy_rows(dpre, D, df2, D, N, D);
            s.status = temporal_conv3_backward(b->m->pool, dpre, G(b->conv_temp), df2, pre, W(b->conv_temp), B,
                                               tg.frames, tg.rows * tg.cols, D);
        }
        if (!s.status) copy_rows(df2, D, dpre, D, N, D);
        scratch_drop(&s, dpre), scratch_drop(&s, pre);
    }
    float *dg = scratch_take_zero(&s, F1, MEM_WORKSPACE, "xdit.dgelu");
    if (s.status || (s.status = bwd(b->m, &b->ff2, dg, df2, g, N))) goto done;
    scratch_drop(&s, g);
    scratch_drop(&s, df2);
    if (b->sana) {
        if ((s.status = glumb_backward(b, &s, sv->f1[0], &dg))) goto done;
    } else {
        gelu_backward(dg, dg, sv->f1[0], N * d.F); /* in place: dg becomes d ff0's output */
    }
    float *ln = scratch_take(&s, ND, MEM_WORKSPACE, "xdit.ln");
    float *h = scratch_take(&s, ND, MEM_WORKSPACE, "xdit.h");
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "xdit.dh");
    if (s.status || (s.status = xd_norm(b, ln, x2, &stats))) goto done;
    mod_apply(b, MOD_FWD, 3, h, NULL, NULL, ln, NULL, mod);
    if ((s.status = bwd(b->m, &b->ff0, dh, dg, h, N))) goto done;
    scratch_drop(&s, dg);
    mod_apply(b, MOD_BWD, 3, dh, dmod, NULL, dh, ln, mod);
    xd_norm_back(b, gx, dh, x2, &stats);
    op_state_release(&stats);
    side_ffn_drop(sv, &s, &recomputed);
    /* cross-attention: x2 = x1 + out'(...); gx is dL/dx2 = dL/d out' and stays the residual's */
    float *c = ln, *dc = dh; /* reused */
    zero_bytes(dc, (size_t)ND * sizeof(float));
    if ((s.status = cross_input(b, c, x1, b->cross_norm ? &stats : NULL))) goto done;
    if ((s.status = cross_backward(b, sv, gx, c, dc))) goto done;
    if (b->cross_norm) layernorm_backward(gx, G(b->cross_w), G(b->cross_b), dc, x1, W(b->cross_w), N, D, &stats);
    else add_to(gx, dc, ND);
    op_state_release(&stats);
    /* self-attention: x1 = x + gate1 * out(...) */
    float *dout = x2; /* reused */
    zero_bytes(dout, (size_t)ND * sizeof(float));
    mod_apply(b, GATE_BWD, 2, gx, dmod, dout, gx, sv->o[0], mod);
    if ((s.status = xd_norm(b, ln, x, &stats))) goto done;
    mod_apply(b, MOD_FWD, 0, h, NULL, NULL, ln, NULL, mod);
    zero_bytes(dh, (size_t)ND * sizeof(float));
    if ((s.status = side_attention_backward(&self_att, sv, SELF, dout, h, h, dh, dh))) goto done;
    mod_apply(b, MOD_BWD, 0, dh, dmod, NULL, dh, ln, mod);
    xd_norm_back(b, gx, dh, x, &stats);
    /* the modulation: the table's gradient sums over the batch, t6's goes to the model */
    for (int64_t i = 0; i < B * R / 6; i++) { /* Wan S2V's rows of t = 0 are the model's 8 to 13 */
        add_to(b->m->ctx.dmod + (i / (R / 6) * b->m->ctx.mod_rows + i % (R / 6) * 8) * D, dmod + i * 6 * D, 6 * D);
        if (G(b->table)) add_to(G(b->table), dmod + i * 6 * D, 6 * D);
    }
done:
    op_state_release(&stats);
    side_ffn_forget(sv, &recomputed);
    return scratch_end(&s);
}

const block_kind xdit_block_kind = {
    SIDE_BLOCK_KIND("xdit", xdit_kept_bytes, xdit_side_bytes, xdit_forward, xdit_backward)};
