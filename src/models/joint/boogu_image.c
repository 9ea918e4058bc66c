/* Boogu Image (SimpleTuner's boogu_image: BooguImageTransformer2DModel in helpers/models/boogu_image/transformer.py,
 * no diffusers class): Lumina-Image 2.0's refiners, joint blocks and embeddings (joint/lumina2.c runs them, under
 * lumina2_options.boogu), with its double-stream layers between the refiners and the joint (single-stream) layers.
 * This file holds that layer and the family's descriptor.
 *
 * The double-stream layer (BooguImageDoubleStreamTransformerBlock), per stream (the instruction's rows, then the
 * image's), its modulations norm_k.linear(SiLU(temb)) in four chunks each (scale_k, gate_k, ...):
 *
 *   a1 = RMSNorm_n1(x) (1 + scale1),  a2 = RMSNorm_n2(x) (1 + scale2)
 *   J  = to_out(out_s(attention(q_s a1, k_s a1, v_s a1)))   one attention over both streams' rows, each stream's
 *                                                            own projections, the caption's padding keys masked
 *   x1 = x + tanh(gate1) RMSNorm_attn(J)  [+ tanh(gate3) RMSNorm_self(img_self_attn(RMSNorm_n3(x) (1 + scale3)))]
 *   y  = x1 + tanh(mlp_gate) RMSNorm_ffn2(w2(silu(w1 h) w3 h)),  h = RMSNorm_ffn1(a2 (1 + mlp_scale) + gate2)
 *
 * where norm1's chunks are (scale1, gate1, mlp_scale, mlp_gate), norm2's second chunk is the feed-forward's shift
 * (gate2, as it is), norm3's (the image's) second its self-attention's gate; the chunks left are read by nothing.
 * The image's self-attention has its own projections and q and k norms, over the image's rows alone. q and k are
 * RMSNorm-ed per head (1e-5, each attention's pair shared by its streams) and turned by interleaved pairs.
 *
 * The state is each sample's rows [the instruction's L rows; the image's T]: the caption's padding rows ride along
 * (their keys masked, their rows read by nothing after). Kept: both attentions' sides, the joint attention's and
 * the self-attention's outputs after their projections, and with KEEP_ALL the feed-forwards' GEMM outputs; the
 * modulations and norms are made again in backward from the block's input. */
#include "models/core/attn_side.h"
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/lumina2.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define BOOGU_QK_EPS 1e-5f
enum { INSTR, IMAGE };
/* A stream's modulation rows, BOOGU_MOD of D a sample (the instruction's leaves the last two zero) */
enum { M_ZERO, M_SCALE1, M_GATE1, M_SCALE_MLP, M_GATE_MLP, M_SCALE2, M_SHIFT, M_SCALE3, M_GATE3, BOOGU_MOD };

#define W(i) (param_at(b->m->params, (i))->w)
#define G(i) (param_at(b->m->params, (i))->g)

typedef struct dims {
    int64_t B, L, T, R, D, K, F, H, hd, M;
} dims;

static dims dims_of(const boogu_double *b)
{
    const model_shape *s = &b->m->shape;
    const int64_t hd = s->hidden / s->heads;
    return (dims){s->batch, b->text, b->image, b->text + b->image, s->hidden, hd * b->kv_heads, b->ffn, s->heads,
                  hd, BOOGU_MOD * s->hidden};
}

static int64_t rows_of(const dims *d, int s) { return s ? d->T : d->L; }
static int64_t first_of(const dims *d, int s) { return s ? d->L : 0; }

/* ---- weights ---- */

static void register_stream(param_set *ps, boogu_double *b, int s, const char *prefix, const model_config *c)
{
    static const char *const name[2] = {"instruct", "img"};
    const int64_t D = c->hidden, F = b->ffn, rm = c->lora_mlp ? c->lora_rank : 0;
    const bool full = !c->lora_rank;
    boogu_set *w = &b->s[s];
    char n[PARAM_NAME_MAX], at[PARAM_NAME_MAX];
#define NAME(...) (snprintf(n, sizeof n, __VA_ARGS__), n)
    /* the processor's own projections: SimpleTuner's LoRA targets (to_q, to_k, to_v, to_out.0) match none */
    const int64_t K = D / c->heads * b->kv_heads;
    w->att.q = block_linear(ps, prefix, NAME("img_instruct_attn.processor.%s_to_q", name[s]), D, D, false, 0, c);
    w->att.k = block_linear(ps, prefix, NAME("img_instruct_attn.processor.%s_to_k", name[s]), D, K, false, 0, c);
    w->att.v = block_linear(ps, prefix, NAME("img_instruct_attn.processor.%s_to_v", name[s]), D, K, false, 0, c);
    w->att.out = block_linear(ps, prefix, NAME("img_instruct_attn.processor.%s_out", name[s]), D, D, false, 0, c);
    for (int k = 0; k < (s ? 3 : 2); k++) {
        w->ada[k] = block_linear(ps, prefix, NAME("%s_norm%d.linear", name[s], k + 1), b->ada_in, 4 * D, true, 0, c);
        snprintf(at, sizeof at, "%s.%s_norm%d.norm.weight", prefix, name[s], k + 1);
        w->norm[k] = param_add(ps, at, 1, (int64_t[]){D}, full);
    }
    w->w1 = block_linear(ps, prefix, NAME("%s_feed_forward.linear_1", name[s]), D, F, false, rm, c);
    w->w2 = block_linear(ps, prefix, NAME("%s_feed_forward.linear_2", name[s]), F, D, false, rm, c);
    w->w3 = block_linear(ps, prefix, NAME("%s_feed_forward.linear_3", name[s]), D, F, false, rm, c);
    const char *norms[4] = {"ffn_norm1", "attn_norm", "self_attn_norm", "ffn_norm2"};
    int *slot[4] = {&w->ffn_norm1, &w->attn_norm, &w->self_norm, &w->ffn_norm2};
    for (int k = 0; k < 4; k++) {
        *slot[k] = -1;
        if (k == 2 && !s) continue; /* the instruction has no self-attention */
        snprintf(at, sizeof at, "%s.%s_%s.weight", prefix, name[s], norms[k]);
        *slot[k] = param_add(ps, at, 1, (int64_t[]){D}, full);
    }
#undef NAME
}

void boogu_double_register(param_set *ps, boogu_double *b, const char *prefix, const model_config *c)
{
    const int64_t D = c->hidden, hd = D / c->heads, K = hd * b->kv_heads;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0;
    const int nq = block_norm(ps, prefix, "img_instruct_attn.norm_q", hd, c);
    const int nk = block_norm(ps, prefix, "img_instruct_attn.norm_k", hd, c);
    b->to_out = block_linear(ps, prefix, "img_instruct_attn.to_out.0", D, D, false, ra, c);
    register_stream(ps, b, INSTR, prefix, c);
    register_stream(ps, b, IMAGE, prefix, c);
    for (int s = 0; s < 2; s++) b->s[s].att.norm_q = nq, b->s[s].att.norm_k = nk;
    b->self.q = block_linear(ps, prefix, "img_self_attn.to_q", D, D, false, ra, c);
    b->self.k = block_linear(ps, prefix, "img_self_attn.to_k", D, K, false, ra, c);
    b->self.v = block_linear(ps, prefix, "img_self_attn.to_v", D, K, false, ra, c);
    b->self.out = block_linear(ps, prefix, "img_self_attn.to_out.0", D, D, false, ra, c);
    b->self.norm_q = block_norm(ps, prefix, "img_self_attn.norm_q", hd, c);
    b->self.norm_k = block_norm(ps, prefix, "img_self_attn.norm_k", hd, c);
}

/* ---- the attentions ---- */

static attn_shape shape_of(const boogu_double *b, int64_t rows)
{
    const dims d = dims_of(b);
    return (attn_shape){.batch = d.B, .tokens = rows, .heads = d.H, .head_dim = d.hd, .kv_heads = b->kv_heads,
                        .mechanism = b->m->shape.mechanism};
}

/* q (the query heads) or k (the kv heads) of `rows` rows a sample turned by the per-sample table tab */
static void turn(const boogu_double *b, float *x, bool keys, bool back, const float *tab, int64_t rows)
{
    const dims d = dims_of(b);
    const int64_t heads = keys ? b->kv_heads : d.H, w = heads * d.hd;
    for (int64_t i = 0; i < d.B; i++)
        (back ? rope_backward : rope_forward)(x + i * rows * w, 1, rows, heads, d.hd, w, rows * w,
                                              tab + i * rows * d.hd);
}

static void rotate_joint(const void *self, float *x, bool keys, bool back)
{
    const boogu_double *b = self;
    turn(b, x, keys, back, *b->rope, dims_of(b).R);
}

static void rotate_image(const void *self, float *x, bool keys, bool back)
{
    const boogu_double *b = self;
    turn(b, x, keys, back, *b->image_rope, b->image);
}

/* The joint attention: the instruction's projections, the image's in *gen past the split */
static side_attention joint_of(const boogu_double *b, side_attention *gen)
{
    const dims d = dims_of(b);
    side_attention a = {.m = b->m, .norm_width = d.hd, .eps = BOOGU_QK_EPS, .shape = shape_of(b, d.R),
                        .mask = *b->mask, .rotate = rotate_joint, .block = b, .split = d.L};
    *gen = side_attention_of(a, &b->s[IMAGE].att);
    a.gen = gen;
    return side_attention_of(a, &b->s[INSTR].att);
}

static side_attention self_of(const boogu_double *b)
{
    const side_attention a = {.m = b->m, .norm_width = dims_of(b).hd, .eps = BOOGU_QK_EPS,
                              .shape = shape_of(b, b->image), .rotate = rotate_image, .block = b};
    return side_attention_of(a, &b->self);
}

/* ---- sizes ---- */

/* the side of each attention: q, o and raw q (D wide), k, v and raw k (K wide), of elem bytes, and its state */
static size_t bd_side_bytes(const block *blk)
{
    const boogu_double *b = blk->self;
    const size_t elem = side_elem(b->m);
    const dims d = dims_of(b);
    const attn_shape js = shape_of(b, d.R), is = shape_of(b, d.T);
    const int64_t rows = d.B * (d.R + d.T);
    return (size_t)(3 * rows * (d.D + d.K)) * elem + attention_kept_bytes(&js) + attention_kept_bytes(&is);
}

/* the side and both attentions' projected outputs; with KEEP_ALL the feed-forwards' GEMM outputs */
static size_t bd_kept_bytes(const block *blk, keep_level keep)
{
    const boogu_double *b = blk->self;
    const dims d = dims_of(b);
    const int64_t N = d.B * d.R;
    const size_t elem = side_elem(b->m);
    return side_block_kept_bytes(bd_side_bytes(blk), shape_of(b, d.R), keep, (N + d.B * d.T) * d.D,
                                 2 * N * d.F + N * d.D, elem);
}

/* ---- the modulations ---- */

/* mod (B, M) of stream s: its norms' linears of SiLU(temb), each chunk at its row, the gates through tanh */
static const int chunk_rows[3][2] = {{M_SCALE1, M_GATE1}, {M_SCALE2, M_SHIFT}, {M_SCALE3, M_GATE3}};

static st_status modulations(const boogu_double *b, int s, float *mod)
{
    const dims d = dims_of(b);
    const int64_t D = d.D, R = 4 * D;
    scratch k = {.pool = b->m->pool};
    float *raw = scratch_take(&k, d.B * R, MEM_WORKSPACE, "boogu.ada");
    if (!k.status) zero_floats(mod, d.B * d.M);
    for (int a = 0; !k.status && a < (s ? 3 : 2); a++) {
        if ((k.status = fwd(b->m, &b->s[s].ada[a], raw, b->m->ctx.cs, d.B))) break;
        copy_rows(mod + chunk_rows[a][0] * D, d.M, raw, R, d.B, D);
        if (a == 1) copy_rows(mod + M_SHIFT * D, d.M, raw + D, R, d.B, D);
        if (!a) copy_rows(mod + M_SCALE_MLP * D, d.M, raw + 2 * D, R, d.B, D);
        for (int64_t i = 0; i < d.B; i++) {
            if (a != 1) tanh_forward(mod + i * d.M + chunk_rows[a][1] * D, raw + i * R + D, D);
            if (!a) tanh_forward(mod + i * d.M + M_GATE_MLP * D, raw + i * R + 3 * D, D);
        }
    }
    if (!k.status) side_made(b->m, mod, d.B * d.M); /* as PyTorch's bf16 modulation */
    return scratch_end(&k);
}

/* dcs += through the modulations of stream s from dmod */
static st_status modulations_back(const boogu_double *b, int s, const float *mod, const float *dmod)
{
    const dims d = dims_of(b);
    const int64_t D = d.D, R = 4 * D;
    scratch k = {.pool = b->m->pool};
    float *draw = scratch_take(&k, d.B * R, MEM_WORKSPACE, "boogu.dada");
    for (int a = 0; !k.status && a < (s ? 3 : 2); a++) {
        zero_floats(draw, d.B * R); /* norm2's and norm3's last two chunks are read by nothing */
        copy_rows(draw, R, dmod + chunk_rows[a][0] * D, d.M, d.B, D);
        if (a == 1) copy_rows(draw + D, R, dmod + M_SHIFT * D, d.M, d.B, D);
        if (!a) copy_rows(draw + 2 * D, R, dmod + M_SCALE_MLP * D, d.M, d.B, D);
        for (int64_t i = 0; i < d.B; i++) {
            const float *dm = dmod + i * d.M, *m = mod + i * d.M;
            if (a != 1) tanh_backward(draw + i * R + D, dm + chunk_rows[a][1] * D, m + chunk_rows[a][1] * D, D);
            if (!a) tanh_backward(draw + i * R + 3 * D, dm + M_GATE_MLP * D, m + M_GATE_MLP * D, D);
        }
        k.status = bwd(b->m, &b->s[s].ada[a], b->m->ctx.dcs, draw, b->m->ctx.cs, d.B);
    }
    return scratch_end(&k);
}

/* ---- a stream's pieces ---- */

/* h = RMSNorm_w(x) (1 + mod[scale]) over stream s's rows; ln (if not NULL) gets the norm, stats its statistics */
static st_status norm_scale(const boogu_double *b, int s, float *h, float *ln, const float *x, int w, const float *mod,
                            int scale, op_state *stats)
{
    const dims d = dims_of(b);
    const int64_t n = rows_of(&d, s);
    float *y = ln ? ln : h;
    const st_status st = rmsnorm_forward(b->m->pool, y, x, W(w), d.B * n, d.D, b->eps, stats);
    if (!st) modulate_forward(h, y, mod + M_ZERO * d.D, mod + scale * d.D, d.B, n, d.D, d.M);
    return st;
}

/* dx += through h = RMSNorm_w(x) (1 + mod[scale]) from dh (overwritten), the scale's gradient into dmod */
static void norm_scale_back(const boogu_double *b, int s, float *dx, float *dmod, float *dh, const float *ln,
                            const float *x, int w, const float *mod, int scale, const op_state *stats)
{
    const dims d = dims_of(b);
    const int64_t n = rows_of(&d, s);
    modulate_backward(dh, dmod + M_ZERO * d.D, dmod + scale * d.D, dh, ln, mod + scale * d.D, d.B, n, d.D, d.M);
    rmsnorm_backward(dx, G(w), dh, x, W(w), d.B * n, d.D, stats);
}

/* The feed-forward's input h = RMSNorm_ffn1(a2 (1 + mlp_scale) + shift), a2 = RMSNorm_n2(x) (1 + scale2); ln2, a2
 * and their statistics kept where asked (backward's) */
static st_status ffn_input(const boogu_double *b, int s, float *h, float *ln2, float *a2, const float *x,
                           const float *mod, op_state *st2, op_state *st_h)
{
    const dims d = dims_of(b);
    const int64_t n = rows_of(&d, s);
    st_status st = norm_scale(b, s, a2, ln2, x, b->s[s].norm[1], mod, M_SCALE2, st2);
    if (st) return st;
    modulate_forward(a2, a2, mod + M_SHIFT * d.D, mod + M_SCALE_MLP * d.D, d.B, n, d.D, d.M);
    return rmsnorm_forward(b->m->pool, h, a2, W(b->s[s].ffn_norm1), d.B * n, d.D, b->eps, st_h);
}

/* f1 = w1 h, f3 = w3 h, f2 = w2(silu(f1) f3) over n rows */
static st_status ffn_forward(const boogu_double *b, int s, scratch *k, const float *h, int64_t n, float *f1, float *f3,
                             float *f2)
{
    const boogu_set *w = &b->s[s];
    float *a = scratch_take(k, n * b->ffn, MEM_WORKSPACE, "boogu.swiglu");
    st_status st = k->status;
    if (!st) st = fwd(b->m, &w->w1, f1, h, n);
    if (!st) st = fwd(b->m, &w->w3, f3, h, n);
    if (!st) glu_forward(a, f1, f3, n, b->ffn, b->ffn, GLU_SILU), st = fwd(b->m, &w->w2, f2, a, n);
    scratch_drop(k, a);
    return st;
}

/* y's rows of stream s from x's: the attentions' gated residuals, then the feed-forward's (its outputs into
 * f1, f3, f2) */
static st_status stream_forward(const boogu_double *b, int s, float *y, const float *x, const float *mod,
                                const block_saved *sv, float *f1, float *f3, float *f2)
{
    const dims d = dims_of(b);
    const int64_t n = rows_of(&d, s), nn = d.B * n, at = first_of(&d, s);
    const boogu_set *w = &b->s[s];
    scratch k = {.pool = b->m->pool};
    float *xs = scratch_take(&k, nn * d.D, MEM_WORKSPACE, "boogu.stream");
    float *ys = scratch_take(&k, nn * d.D, MEM_WORKSPACE, "boogu.stream_out");
    float *r = scratch_take(&k, nn * d.D, MEM_WORKSPACE, "boogu.branch");
    float *a2 = scratch_take(&k, nn * d.D, MEM_WORKSPACE, "boogu.ffn_in");
    if (k.status) return scratch_end(&k);
    model_rows_gather(b->m, xs, x, d.R, at, n);
    model_rows_gather(b->m, a2, sv->o[0], d.R, at, n);
    st_status st = rmsnorm_forward(b->m->pool, r, a2, W(w->attn_norm), nn, d.D, b->eps, NULL);
    if (!st) gated_residual_forward(ys, xs, mod + M_GATE1 * d.D, r, d.B, n, d.D, d.M);
    if (!st && s == IMAGE) st = rmsnorm_forward(b->m->pool, r, sv->o[1], W(w->self_norm), nn, d.D, b->eps, NULL);
    if (!st && s == IMAGE) gated_residual_forward(ys, ys, mod + M_GATE3 * d.D, r, d.B, n, d.D, d.M);
    if (!st) st = ffn_input(b, s, r, NULL, a2, xs, mod, NULL, NULL);
    if (!st) st = ffn_forward(b, s, &k, r, nn, f1, f3, f2);
    if (!st) st = rmsnorm_forward(b->m->pool, r, f2, W(w->ffn_norm2), nn, d.D, b->eps, NULL);
    if (!st) {
        gated_residual_forward(ys, ys, mod + M_GATE_MLP * d.D, r, d.B, n, d.D, d.M);
        model_rows_scatter(b->m, y, ys, d.R, at, n);
    }
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

/* The joint attention's input (each stream's a1 at its rows), and the image's self-attention's (a3) */
static st_status attention_inputs(const boogu_double *b, float *h, float *a3, const float *x, float *const mod[2])
{
    const dims d = dims_of(b);
    scratch k = {.pool = b->m->pool};
    float *xs = scratch_take(&k, d.B * d.R * d.D, MEM_WORKSPACE, "boogu.stream");
    float *hs = scratch_take(&k, d.B * d.R * d.D, MEM_WORKSPACE, "boogu.stream_in");
    st_status st = k.status;
    for (int s = 0; !st && s < 2; s++) {
        const int64_t n = rows_of(&d, s), at = first_of(&d, s);
        model_rows_gather(b->m, xs, x, d.R, at, n);
        st = norm_scale(b, s, hs, NULL, xs, b->s[s].norm[0], mod[s], M_SCALE1, NULL);
        if (!st) model_rows_scatter(b->m, h, hs, d.R, at, n);
        if (!st && s == IMAGE) st = norm_scale(b, s, a3, NULL, xs, b->s[s].norm[2], mod[s], M_SCALE3, NULL);
    }
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

/* ---- the block ---- */

static st_status bd_forward(block *blk, const block_state *in, block_state *out, keep_level keep, offload *off,
                            block_saved **saved_io)
{
    boogu_double *b = blk->self;
    const dims d = dims_of(b);
    const int64_t N = d.B * d.R, NT = d.B * d.T, ND = N * d.D, NK = N * d.K;
    const float *x = in->t[0];
    frame f;
    block_saved *sv = frame_begin(&f, blk, b->m, keep, off, saved_io);
    if (!sv) return st_host_oom("a block's saved tensors");
    float *y = scratch_take(&f.kept, ND, MEM_ACTIVATIONS, "boogu.state");
    side_take(&f, sv,
              (int64_t[SIDE_MAX]){ND, NK, NK, ND, ND, NK, NT * d.D, NT * d.K, NT * d.K, NT * d.D, NT * d.D, NT * d.K},
              2);
    sv->o[0] = scratch_take(f.ks, ND, f.kt, "boogu.joint_out");
    sv->o[1] = scratch_take(f.ks, NT * d.D, f.kt, "boogu.self_out");
    for (int s = 0; s < 2; s++) {
        const int64_t nn = d.B * rows_of(&d, s);
        sv->f1[s] = scratch_take(f.fs, nn * d.F, f.ft, "boogu.linear_1");
        sv->f3[s] = scratch_take(f.fs, nn * d.F, f.ft, "boogu.linear_3");
        sv->f2[s] = scratch_take(f.fs, nn * d.D, f.ft, "boogu.linear_2");
    }
    float *mod[2] = {scratch_take(&f.tmp, d.B * d.M, MEM_WORKSPACE, "boogu.mod"),
                     scratch_take(&f.tmp, d.B * d.M, MEM_WORKSPACE, "boogu.mod")};
    float *h = scratch_take(&f.tmp, ND, MEM_WORKSPACE, "boogu.attention_in");
    float *a3 = scratch_take(&f.tmp, NT * d.D, MEM_WORKSPACE, "boogu.self_in");
    st_status st = f.kept.status ? f.kept.status : f.tmp.status;
    const bool states = keep != KEEP_NOTHING || f.to_host;
    side_attention gen;
    const side_attention ja = joint_of(b, &gen), sa = self_of(b);
    for (int s = 0; !st && s < 2; s++) st = modulations(b, s, mod[s]);
    if (!st && f.from_host) st = side_back(sv);
    if (!st && !f.from_host) {
        st = attention_inputs(b, h, a3, x, mod);
        if (!st) st = side_attention_forward(&ja, sv, SQ, h, h, states);
        if (!st) st = side_attention_forward(&sa, sv, XQ, a3, a3, states && keep != KEEP_ATTENTION_OUTPUT);
    }
    if (!st && f.to_host) st = side_send(sv);
    if (!st) st = side_out_forward(&ja, h, sv->side[SO]); /* h: the streams' projections, then to_out over both */
    if (!st) st = fwd(b->m, &b->to_out, sv->o[0], h, N);
    if (!st) st = fwd(b->m, &b->self.out, sv->o[1], sv->side[XO], NT);
    if (!st && f.to_host) st = side_drop(sv, f.ks);
    for (int s = 0; !st && s < 2; s++) st = stream_forward(b, s, y, x, mod[s], sv, sv->f1[s], sv->f3[s], sv->f2[s]);
    if (!st) *out = (block_state){.n = 1, .t = {y}};
    return frame_end(&f, st, sv, saved_io, &y, 1);
}

/* What a stream's backward works in */
typedef struct stream_back {
    const block_saved *sv;
    const float *mod;
    float *dmod, *gx;  /* dL/d(the stream's rows): dL/dy on entry, dL/dx once the norms have added theirs */
    float *dj, *ds;    /* the joint attention's output's gradient (its rows: N, D) and the self-attention's */
} stream_back;

/* A gated residual y += tanh(gate) RMSNorm_w(o) back: the gate's gradient, and do += (o: rows n of o_all from row
 * `at` of each sample's `stride`, do scattered there) */
static st_status residual_back(const boogu_double *b, int s, const stream_back *a, int gate, int w, const float *o_all,
                               float *do_all, int64_t stride, scratch *k)
{
    const dims d = dims_of(b);
    const int64_t n = rows_of(&d, s), nn = d.B * n, at = stride == d.R ? first_of(&d, s) : 0;
    float *o = scratch_take(k, nn * d.D, MEM_WORKSPACE, "boogu.branch_in");
    float *r = scratch_take(k, nn * d.D, MEM_WORKSPACE, "boogu.branch");
    float *dr = scratch_take_zero(k, nn * d.D, MEM_WORKSPACE, "boogu.dbranch");
    float *dout = scratch_take_zero(k, nn * d.D, MEM_WORKSPACE, "boogu.dbranch_in");
    op_state stats = {0};
    st_status st = k->status;
    if (!st) model_rows_gather(b->m, o, o_all, stride, at, n);
    if (!st) st = rmsnorm_forward(b->m->pool, r, o, W(w), nn, d.D, b->eps, &stats);
    if (!st) {
        gated_residual_backward(a->gx, a->dmod + gate * d.D, dr, a->gx, a->mod + gate * d.D, r, d.B, n, d.D, d.M);
        rmsnorm_backward(dout, G(w), dr, o, W(w), nn, d.D, &stats);
        model_rows_scatter(b->m, do_all, dout, stride, at, n);
    }
    op_state_release(&stats);
    scratch_drop(k, dout), scratch_drop(k, dr), scratch_drop(k, r), scratch_drop(k, o);
    return st;
}

/* The feed-forward back from its gated residual to the stream's rows: gx += through norm2's path */
static st_status ffn_back(const boogu_double *b, int s, const stream_back *a, const float *xs, scratch *k)
{
    const dims d = dims_of(b);
    const int64_t n = rows_of(&d, s), nn = d.B * n, NF = nn * d.F;
    const boogu_set *w = &b->s[s];
    op_state st2 = {0}, sth = {0}, st_r = {0};
    float *ln2 = scratch_take(k, nn * d.D, MEM_WORKSPACE, "boogu.ln2");
    float *a2 = scratch_take(k, nn * d.D, MEM_WORKSPACE, "boogu.ffn_in");
    float *h = scratch_take(k, nn * d.D, MEM_WORKSPACE, "boogu.ffn_h");
    float *f1 = a->sv->f1[s] ? NULL : scratch_take(k, NF, MEM_WORKSPACE, "boogu.linear_1 (recomputed)");
    float *f3 = a->sv->f1[s] ? NULL : scratch_take(k, NF, MEM_WORKSPACE, "boogu.linear_3 (recomputed)");
    float *f2 = a->sv->f1[s] ? NULL : scratch_take(k, nn * d.D, MEM_WORKSPACE, "boogu.linear_2 (recomputed)");
    float *r = scratch_take(k, nn * d.D, MEM_WORKSPACE, "boogu.branch");
    float *dr = scratch_take_zero(k, nn * d.D, MEM_WORKSPACE, "boogu.dbranch");
    float *df2 = scratch_take_zero(k, nn * d.D, MEM_WORKSPACE, "boogu.dlinear_2");
    float *act = scratch_take(k, NF, MEM_WORKSPACE, "boogu.swiglu");
    float *da = scratch_take_zero(k, NF, MEM_WORKSPACE, "boogu.dswiglu");
    float *df1 = scratch_take_zero(k, NF, MEM_WORKSPACE, "boogu.dlinear_1");
    float *df3 = scratch_take_zero(k, NF, MEM_WORKSPACE, "boogu.dlinear_3");
    float *dh = scratch_take_zero(k, nn * d.D, MEM_WORKSPACE, "boogu.dffn_h");
    st_status st = k->status;
    if (!st) st = ffn_input(b, s, h, ln2, a2, xs, a->mod, &st2, &sth);
    if (!st && !a->sv->f1[s]) st = ffn_forward(b, s, k, h, nn, f1, f3, f2);
    if (a->sv->f1[s]) f1 = a->sv->f1[s], f3 = a->sv->f3[s], f2 = a->sv->f2[s];
    if (!st) st = rmsnorm_forward(b->m->pool, r, f2, W(w->ffn_norm2), nn, d.D, b->eps, &st_r);
    if (!st) {
        gated_residual_backward(a->gx, a->dmod + M_GATE_MLP * d.D, dr, a->gx, a->mod + M_GATE_MLP * d.D, r, d.B, n,
                                d.D, d.M);
        rmsnorm_backward(df2, G(w->ffn_norm2), dr, f2, W(w->ffn_norm2), nn, d.D, &st_r);
        glu_forward(act, f1, f3, nn, d.F, d.F, GLU_SILU);
        st = bwd(b->m, &w->w2, da, df2, act, nn);
    }
    if (!st) {
        glu_backward(df1, df3, da, f1, f3, nn, d.F, d.F, GLU_SILU);
        st = bwd(b->m, &w->w1, dh, df1, h, nn);
    }
    if (!st) st = bwd(b->m, &w->w3, dh, df3, h, nn);
    if (!st) { /* h = RMSNorm_ffn1(m), m = a2 (1 + mlp_scale) + shift; dr becomes dL/dm, then dL/da2, dL/dln2 */
        zero_floats(dr, nn * d.D);
        rmsnorm_backward(dr, G(w->ffn_norm1), dh, a2, W(w->ffn_norm1), nn, d.D, &sth);
        norm_scale(b, s, a2, NULL, xs, w->norm[1], a->mod, M_SCALE2, NULL); /* a2 before its shift and scale */
        modulate_backward(dr, a->dmod + M_SHIFT * d.D, a->dmod + M_SCALE_MLP * d.D, dr, a2,
                          a->mod + M_SCALE_MLP * d.D, d.B, n, d.D, d.M);
        norm_scale_back(b, s, a->gx, a->dmod, dr, ln2, xs, w->norm[1], a->mod, M_SCALE2, &st2);
    }
    op_state_release(&st2), op_state_release(&sth), op_state_release(&st_r);
    return st;
}

/* Stream s back through its gated residuals and feed-forward: a->gx gets the norms' gradients, a->dj and a->ds the
 * attentions' outputs' */
static st_status stream_backward(const boogu_double *b, int s, const stream_back *a, const float *x)
{
    const dims d = dims_of(b);
    const int64_t n = rows_of(&d, s), nn = d.B * n;
    const boogu_set *w = &b->s[s];
    scratch k = {.pool = b->m->pool};
    float *xs = scratch_take(&k, nn * d.D, MEM_WORKSPACE, "boogu.stream");
    st_status st = k.status;
    if (!st) model_rows_gather(b->m, xs, x, d.R, first_of(&d, s), n);
    /* every branch reads dL/dy as it came: the gates first, the norms' paths (which add to gx) after */
    if (!st) st = residual_back(b, s, a, M_GATE1, w->attn_norm, a->sv->o[0], a->dj, d.R, &k);
    if (!st && s == IMAGE) st = residual_back(b, s, a, M_GATE3, w->self_norm, a->sv->o[1], a->ds, d.T, &k);
    if (!st) st = ffn_back(b, s, a, xs, &k);
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

/* gx += through the attentions' inputs from dh (the joint attention's, N rows) and da3 (the self-attention's) */
static st_status inputs_back(const boogu_double *b, int s, const stream_back *a, const float *x, const float *dh,
                             float *da3)
{
    const dims d = dims_of(b);
    const int64_t n = rows_of(&d, s), nn = d.B * n, at = first_of(&d, s);
    scratch k = {.pool = b->m->pool};
    float *xs = scratch_take(&k, nn * d.D, MEM_WORKSPACE, "boogu.stream");
    float *ln = scratch_take(&k, nn * d.D, MEM_WORKSPACE, "boogu.ln");
    float *hs = scratch_take(&k, nn * d.D, MEM_WORKSPACE, "boogu.stream_in");
    float *dhs = scratch_take(&k, nn * d.D, MEM_WORKSPACE, "boogu.dstream_in");
    op_state stats = {0};
    st_status st = k.status;
    if (!st) {
        model_rows_gather(b->m, xs, x, d.R, at, n);
        model_rows_gather(b->m, dhs, dh, d.R, at, n);
        st = norm_scale(b, s, hs, ln, xs, b->s[s].norm[0], a->mod, M_SCALE1, &stats);
    }
    if (!st) norm_scale_back(b, s, a->gx, a->dmod, dhs, ln, xs, b->s[s].norm[0], a->mod, M_SCALE1, &stats);
    op_state_release(&stats);
    if (!st && s == IMAGE) st = norm_scale(b, s, hs, ln, xs, b->s[s].norm[2], a->mod, M_SCALE3, &stats);
    if (!st && s == IMAGE)
        norm_scale_back(b, s, a->gx, a->dmod, da3, ln, xs, b->s[s].norm[2], a->mod, M_SCALE3, &stats);
    op_state_release(&stats);
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

/* The attentions back from their outputs' gradients dj (after to_out) and ds: dh and da3, their inputs' */
static st_status attentions_back(const boogu_double *b, block_saved *sv, const float *x, float *const mod[2],
                                 const float *dj, const float *ds, float *dh, float *da3)
{
    const dims d = dims_of(b);
    const int64_t N = d.B * d.R, NT = d.B * d.T;
    scratch k = {.pool = b->m->pool};
    float *p = scratch_take(&k, N * d.D, MEM_WORKSPACE, "boogu.projected");
    float *dp = scratch_take_zero(&k, N * d.D, MEM_WORKSPACE, "boogu.dprojected");
    float *h = scratch_take(&k, N * d.D, MEM_WORKSPACE, "boogu.attention_in");
    float *a3 = scratch_take(&k, NT * d.D, MEM_WORKSPACE, "boogu.self_in");
    side_attention gen;
    const side_attention ja = joint_of(b, &gen), sa = self_of(b);
    st_status st = k.status;
    if (!st) st = side_out_forward(&ja, p, sv->side[SO]);
    if (!st) st = bwd(b->m, &b->to_out, dp, dj, p, N);
    if (!st) st = attention_inputs(b, h, a3, x, mod);
    if (!st) st = side_attention_backward(&ja, sv, SQ, dp, h, h, dh, dh);
    if (!st) st = side_attention_backward(&sa, sv, XQ, ds, a3, a3, da3, da3);
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

/* grad->t[0] holds dL/dy on entry and becomes dL/dx. */
static st_status bd_backward(block *blk, const block_state *in, block_saved *sv, block_state *grad)
{
    boogu_double *b = blk->self;
    const dims d = dims_of(b);
    const int64_t N = d.B * d.R, NT = d.B * d.T;
    const float *x = in->t[0];
    scratch s = side_scratch(b->m->pool, sv);
    float *mod[2], *dmod[2], *gx[2];
    for (int q = 0; q < 2; q++) {
        mod[q] = scratch_take(&s, d.B * d.M, MEM_WORKSPACE, "boogu.mod");
        dmod[q] = scratch_take_zero(&s, d.B * d.M, MEM_WORKSPACE, "boogu.dmod");
        gx[q] = scratch_take(&s, d.B * rows_of(&d, q) * d.D, MEM_WORKSPACE, "boogu.dstream");
    }
    float *dj = scratch_take_zero(&s, N * d.D, MEM_WORKSPACE, "boogu.djoint_out");
    float *ds = scratch_take_zero(&s, NT * d.D, MEM_WORKSPACE, "boogu.dself_out");
    float *dh = scratch_take_zero(&s, N * d.D, MEM_WORKSPACE, "boogu.dattention_in");
    float *da3 = scratch_take_zero(&s, NT * d.D, MEM_WORKSPACE, "boogu.dself_in");
    for (int q = 0; !s.status && q < 2; q++) {
        model_rows_gather(b->m, gx[q], grad->t[0], d.R, first_of(&d, q), rows_of(&d, q));
        s.status = modulations(b, q, mod[q]);
    }
    for (int q = 0; !s.status && q < 2; q++)
        s.status = stream_backward(b, q, &(stream_back){sv, mod[q], dmod[q], gx[q], dj, ds}, x);
    if (!s.status) s.status = attentions_back(b, sv, x, mod, dj, ds, dh, da3);
    for (int q = 0; !s.status && q < 2; q++) {
        s.status = inputs_back(b, q, &(stream_back){sv, mod[q], dmod[q], gx[q], dj, ds}, x, dh, da3);
        if (!s.status) model_rows_scatter(b->m, grad->t[0], gx[q], d.R, first_of(&d, q), rows_of(&d, q));
        if (!s.status) s.status = modulations_back(b, q, mod[q], dmod[q]);
    }
    return scratch_end(&s);
}

const block_kind boogu_double_kind = {
    SIDE_BLOCK_KIND("boogu_double", bd_kept_bytes, bd_side_bytes, bd_forward, bd_backward)};

/* ---- the family's descriptor (family.h) ---- */

static const family_preset presets[] = {
    /* The fixture's: 2 double-stream and 1 single-stream layer, 2 heads x 16 with 1 kv head. */
    {"boogu-image-tiny", 2, 32, 2, 2, 4, 8, 10, 1, 6, 24, 0, false, false, 0, 0},
    /* Boogu-Image 0.1: 8 double-stream and 40 single-stream layers after 2 + 2 refiners (SimpleTuner's
     * max_swappable_blocks counts them), a "10B transformer" (its RamTorch preset's words): its widths are not in
     * SimpleTuner's code, so 24 heads x 128 with 8 kv heads (3072, the feed-forward 12288) are the ones that give 10B
     * with that count, and the text is Qwen3-VL 8B's 4096-wide last state at SimpleTuner's tokenizer_max_length of
     * 1024; 16 latent channels in 2 x 2 patches (1024 px: 128 x 128). The rest in the preset hook. */
    {"boogu-image", 8, 3072, 24, 2, 16, 128, 10, 40, 1024, 4096, 0, false, false, 0, 0},
};

static void boogu_preset(model_config *mc, const char *name, bool tiny)
{
    (void)name;
    mc->refiner_depth = tiny ? 1 : 2, mc->kv_heads = tiny ? 1 : 8, mc->norm_eps = 1e-5;
    mc->ffn_dim = tiny ? 4 * mc->hidden : 12288; /* LuminaFeedForward's 4 D up to a multiple of 256 */
}

static st_status boogu_check(const model_config *mc)
{
    st_status st = joint_check(mc, true);
    if (!st && (mc->depth < 1 || mc->single_depth < 1))
        return family_refuse(mc, GROUP_SINGLE, "boogu_image takes at least one double-stream and one single-stream "
                             "layer (num_double_stream_layers, num_layers beyond them)");
    return st;
}

/* instruction_feature_configs: the width the class's caption_embedder reads (its reduce_type "cat" concatenates
 * num_instruction_feat_layers layers, "mean" averages them; the dict's own defaults 4096 and "concat") */
static st_status instruction_width(const cJSON *j, const char *file, model_config *mc)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "instruction_feature_configs");
    if (!o || cJSON_IsNull(o)) return ST_OK; /* the class's default: 1024, "mean" */
    int64_t width = 4096, layers = 1;
    const json_key keys[] = {{"instruction_feat_dim", &width}, {"num_instruction_feat_layers", &layers}};
    st_status st = cJSON_IsObject(o) ? json_ints(o, file, keys, 2)
                                     : st_fail(ST_ERR_UNSUPPORTED, "%s: instruction_feature_configs is not an object",
                                               file);
    if (st) return st;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "reduce_type");
    const char *reduce = cJSON_IsString(r) ? r->valuestring : r ? "" : "concat";
    if (layers < 1) layers = 1;
    if (strstr(reduce, "cat")) mc->text_dim = layers * width;
    else if (strstr(reduce, "mean")) mc->text_dim = width;
    else return st_fail(ST_ERR_UNSUPPORTED, "%s: instruction_feature_configs.reduce_type is neither a concatenation "
                        "nor a mean", file);
    return ST_OK;
}

/* BooguImageTransformer2DModel's config: the class's defaults, then the file's; prompt tuning (its PromptEmbedding,
 * which forward never reads) and a timestep_scale but 1 are refused by name. */
static st_status boogu_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t heads = 24, out = 0, multiple = 256, layers = 26, axes[3] = {40, 40, 40};
    mc->channels = 16, mc->depth = 2, mc->refiner_depth = 2, mc->hidden = 2304, mc->kv_heads = 8, mc->patch = 2;
    mc->text_dim = 1024, mc->patch_t = 1, mc->norm_eps = 1e-5;
    const json_key keys[] = {{"num_attention_heads", &heads}, {"num_kv_heads", &mc->kv_heads},
                             {"in_channels", &mc->channels}, {"out_channels", &out}, {"hidden_size", &mc->hidden},
                             {"num_layers", &layers}, {"num_double_stream_layers", &mc->depth},
                             {"num_refiner_layers", &mc->refiner_depth}, {"patch_size", &mc->patch},
                             {"multiple_of", &multiple}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_fixed(j, file, "timestep_scale", 1.0, "Boogu-Image (the class's default)");
    if (!st) st = json_axes(j, file, "axes_dim_rope", 3, axes);
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    if (!st) st = instruction_width(j, file, mc);
    if (st) return st;
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(j, "prompt_tuning_configs");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pt, "use_prompt_tuning")))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: prompt_tuning_configs.use_prompt_tuning is true: its PromptEmbedding "
                       "tokens, which segtrain does not build", file);
    if (heads < 1 || layers < mc->depth || (out && out != mc->channels))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: num_attention_heads %lld, num_layers %lld, num_double_stream_layers "
                       "%lld, out_channels %lld; segtrain builds Boogu-Image with at least 1, at least the "
                       "double-stream layers, and out_channels null or in_channels (%lld)", file, (long long)heads,
                       (long long)layers, (long long)mc->depth, (long long)out, (long long)mc->channels);
    mc->heads = heads, mc->single_depth = layers - mc->depth, mc->pooled_dim = 0, mc->guidance_embeds = false;
    set_rope_axes(mc, axes, 3);
    return lumina_ffn_width(j, file, multiple, mc);
}

/* its fp8 flavours hold the same transformers in FP8; the edit flavours add reference images */
#define BOOGU_WHY "the fp8 flavours are the transformers in FP8, which segtrain does not load; the edit flavours " \
                  "train on reference images (ref_image_hidden_states), which segtrain does not build"

const family_desc boogu_image_desc = {
    .name = "boogu_image", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK,
    .st = {{.name = "boogu_image", .title = "Boogu-Image", .diffusers = "BooguImageTransformer2DModel",
            .flavours = "v0.1-base|v0.1-base-fp8|v0.1-turbo|v0.1-turbo-fp8|v0.1-edit|v0.1-edit-fp8", .why = BOOGU_WHY,
            .built = "v0.1-base:boogu-image|v0.1-turbo:boogu-image", .fallback = "v0.1-turbo",
            .example = "boogu-image-v0.1.peft-lora.json", .tiny = "boogu-image-tiny"}},
    .blocks_words = &(const blocks_words){"%lld + %lld refiner blocks, %lld double-stream and %lld single-stream layers",
                                          {offsetof(model_config, refiner_depth), offsetof(model_config, refiner_depth),
                                           offsetof(model_config, depth), offsetof(model_config, single_depth)}},
    .ops = &lumina2_family, .check = boogu_check,
    .topology_options = &(const lumina2_options){.boogu = true}, FAMILY_PRESETS(presets), .preset = boogu_preset,
    .rope_axes = family_rope_axes_wide, /* (4, 6, 6) at 16, (32, 48, 48) at 128 */
    .readers = {{"BooguImageTransformer2DModel", boogu_from_json}},
    .fields = F_FFN | F_NORM_EPS | F_KV_HEADS | F_REFINER | F_SINGLE,
};
