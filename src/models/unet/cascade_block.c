/* Stable Cascade's micro-blocks (StableCascadeUNet's, diffusers' names and layouts), channels first (B, C, H, W):
 * the embedding (a 1 x 1 convolution and a LayerNorm over the channels), SDCascadeResBlock (a depthwise 3 x 3
 * convolution, the norm, then per position Linear, GELU, GlobalResponseNorm, Linear, plus the input; an up level's
 * first one reads the down level's output after its norm's), SDCascadeTimestepBlock (x (1 + a) + b from the time
 * embeddings), SDCascadeAttnBlock (attention of the normed map over itself and the conditioning tokens, plus the
 * input), and the down and up scalers (the norm, then a 2 x 2 stride-2 convolution or its transpose).
 *
 * A level's output is a skip for the up path, riding in the state as unet_block.c's do. The ResBlock and AttnBlock
 * keep one arena each (or nothing when checkpointed); the others keep nothing: their backward makes again what it
 * reads from the input state. The stream's gradient stays in the model's one buffer, sized for the widest stream. */
#include "models/unet/cascade.h"

#include "models/core/attn_side.h"

#include <stdlib.h>

#define W(i) (param_at(u->m->params, (i))->w)
#define G(i) (param_at(u->m->params, (i))->g)

static int64_t batch_of(const cascade_block *u) { return u->m->shape.batch; }

/* mixed_precision bf16 (docs/PRECISION.md): what PyTorch's bf16 StableCascadeUNet makes in bf16 (every convolution's,
 * linear's and attention's output, the norms' and activations' outputs) is rounded where it is made, at every keep
 * level, so that what a block keeps packs to bf16 without loss and every schedule computes the same bits */
static void made(const cascade_block *u, float *y, int64_t n) { side_made(u->m, y, n); }

/* Dropout applies in a training forward (and its recompute, which draws the same masks), at the level's rate */
static bool dropping(const cascade_block *u) { return u->dropout > 0 && u->cx->train; }

/* SDCascadeLayerNorm: a LayerNorm over the channels of x (B, C, HW), no affine, into y (same layout) */
static st_status ln2d_forward(const cascade_block *u, float *y, const float *x, int64_t C, int64_t HW, op_state *keep,
                              scratch *s)
{
    const int64_t B = batch_of(u), N = B * HW;
    float *t = scratch_take(s, N * C, MEM_WORKSPACE, "cascade.ln2d");
    float *n = scratch_take(s, N * C, MEM_WORKSPACE, "cascade.ln2d output");
    if (s->status) return s->status;
    transpose_batched(t, x, B, C, HW);
    const st_status r = layernorm_forward(u->m->pool, n, t, NULL, NULL, N, C, CASCADE_EPS, keep);
    if (!r) made(u, n, N * C), transpose_batched(y, n, B, HW, C);
    scratch_drop(s, n), scratch_drop(s, t);
    return r;
}

/* dx (B, C, HW) += the norm's input gradient from dy (same layout); reads x and the forward's kept statistics */
static st_status ln2d_backward(const cascade_block *u, float *dx, const float *dy, const float *x, int64_t C,
                               int64_t HW, const op_state *keep, scratch *s)
{
    const int64_t B = batch_of(u), N = B * HW;
    float *t = scratch_take(s, N * C, MEM_WORKSPACE, "cascade.ln2d");
    float *g = scratch_take(s, N * C, MEM_WORKSPACE, "cascade.dln2d");
    float *d = scratch_take_zero(s, N * C, MEM_WORKSPACE, "cascade.dln2d input");
    if (s->status) return s->status;
    transpose_batched(t, x, B, C, HW);
    transpose_batched(g, dy, B, C, HW);
    layernorm_backward(d, NULL, NULL, g, t, NULL, N, C, keep);
    transpose_batched(g, d, B, HW, C);
    add_to(dx, g, N * C);
    scratch_drop(s, d), scratch_drop(s, g), scratch_drop(s, t);
    return ST_OK;
}

/* ---- SDCascadeResBlock ---- */

/* arena: the depthwise output d (N, C), the norm's output beside the skip (N, C + Cs), channelwise.0's output
 * (N, 4C) */
static int64_t res_arena(const cascade_block *u)
{
    const int64_t N = batch_of(u) * u->h * u->w;
    return N * (6 * u->cin + u->cskip);
}

static size_t res_states(const cascade_block *u)
{
    return layernorm_kept_bytes(batch_of(u) * u->h * u->w) + grn_kept_bytes(batch_of(u), 4 * u->cin);
}

/* g = GELU(h1), r = dropout(GRN(g)) into the caller's buffers (keep: GRN's statistics, or NULL) */
static st_status res_act(const cascade_block *u, float *g, float *r, const float *h1, op_state *keep)
{
    const int64_t B = batch_of(u), T = u->h * u->w, F = 4 * u->cin, n = B * T * F;
    gelu_erf_forward(g, h1, n);
    made(u, g, n);
    const st_status e = grn_forward(u->m->pool, r, g, W(u->gamma), W(u->beta), B, T, F, u->m->cfg.bf16_activations, keep);
    if (!e && dropping(u)) dropout_forward(r, r, n, u->dropout, u->cx->dropout_seed, u->stream);
    if (!e) made(u, r, n);
    return e;
}

static st_status res_forward(const cascade_block *u, const block_state *in, float *y, float *arena, op_state *st,
                             scratch *s)
{
    const int64_t B = batch_of(u), T = u->h * u->w, N = B * T, C = u->cin, Ci = C + u->cskip, F = 4 * C;
    float *d = arena, *cat = d + N * C, *h1 = cat + N * Ci;
    float *t = scratch_take(s, N * C, MEM_WORKSPACE, "cascade.tokens");
    float *n = u->cskip ? scratch_take(s, N * C, MEM_WORKSPACE, "cascade.norm") : cat;
    float *ts = u->cskip ? scratch_take(s, N * u->cskip, MEM_WORKSPACE, "cascade.skip tokens") : NULL;
    float *g = scratch_take(s, N * F, MEM_WORKSPACE, "cascade.gelu");
    float *r = scratch_take(s, N * F, MEM_WORKSPACE, "cascade.grn");
    if (s->status) return s->status;
    pool *p = u->m->pool;
    transpose_batched(t, in->t[0], B, C, T);
    st_status e = conv_layer_forward(u->m->params, p, &u->dw, d, t, &(conv_shape){.batch = B, .h = u->h, .w = u->w,
                                                                             .in = C, .out = C});
    if (!e) made(u, d, N * C), e = layernorm_forward(p, n, d, NULL, NULL, N, C, CASCADE_EPS, st ? &st[0] : NULL);
    if (!e) made(u, n, N * C);
    if (!e && u->cskip) { /* torch.cat([x, x_skip], dim=1) after the norm */
        copy_rows(cat, Ci, n, C, N, C);
        transpose_batched(ts, in->t[u->io.skips], B, u->cskip, T);
        copy_rows(cat + C, Ci, ts, u->cskip, N, u->cskip);
    }
    if (!e) e = fwd(u->m, &u->l1, h1, cat, N);
    if (!e) e = res_act(u, g, r, h1, st ? &st[1] : NULL);
    if (!e) e = fwd(u->m, &u->l2, t, r, N); /* t: channelwise's output (N, C) */
    if (e) return e;
    transpose_batched(y, t, B, T, C);
    add_to(y, in->t[0], N * C);
    return ST_OK;
}

/* grad->t[0]: dL/dy on entry, dL/dx on return, in place (the residual's gradient passes through); an up level's
 * first block appends the skip's gradient */
static st_status res_backward(const cascade_block *u, const block_state *in, float *arena, const op_state *st,
                              block_state *grad, scratch *s)
{
    const int64_t B = batch_of(u), T = u->h * u->w, N = B * T, C = u->cin, Ci = C + u->cskip, F = 4 * C;
    float *d = arena, *cat = d + N * C, *h1 = cat + N * Ci, *dy = grad->t[0];
    float *t = scratch_take(s, N * C, MEM_WORKSPACE, "cascade.tokens");
    float *g = scratch_take(s, N * F, MEM_WORKSPACE, "cascade.gelu");
    float *r = scratch_take(s, N * F, MEM_WORKSPACE, "cascade.grn");
    float *dr = scratch_take_zero(s, N * F, MEM_WORKSPACE, "cascade.dgrn");
    float *dcat = scratch_take_zero(s, N * Ci, MEM_WORKSPACE, "cascade.dcat");
    float *dd = scratch_take_zero(s, N * C, MEM_WORKSPACE, "cascade.ddepthwise");
    if (s->status) return s->status;
    pool *p = u->m->pool;
    transpose_batched(t, dy, B, C, T); /* t: dL/d(channelwise's output) */
    st_status e = res_act(u, g, r, h1, NULL);
    if (!e) e = bwd(u->m, &u->l2, dr, t, r, N);
    if (!e && dropping(u)) dropout_backward(dr, dr, N * F, u->dropout, u->cx->dropout_seed, u->stream);
    float *dg = r, *dh1 = g; /* r and g are dead once read: their buffers take the gradients */
    if (!e) {
        zero_floats(dg, N * F);
        e = grn_backward(p, dg, G(u->gamma), G(u->beta), dr, g, W(u->gamma), B, T, F, &st[1]);
    }
    if (!e) { /* GELU's backward reads h1 only: g's buffer is free */
        zero_floats(dh1, N * F);
        gelu_erf_backward(dh1, dg, h1, N * F);
        e = bwd(u->m, &u->l1, dcat, dh1, cat, N);
    }
    float *dn = dr; /* (N, C) of it */
    if (!e) {
        copy_rows(dn, C, dcat, Ci, N, C);
        layernorm_backward(dd, NULL, NULL, dn, d, NULL, N, C, &st[0]);
        transpose_batched(t, in->t[0], B, C, T);
        zero_floats(g, N * C);
        e = conv_layer_backward(u->m->params, p, &u->dw, g, dd, t,
                                &(conv_shape){.batch = B, .h = u->h, .w = u->w, .in = C, .out = C});
    }
    if (e) return e;
    transpose_batched(t, g, B, T, C);
    add_to(dy, t, N * C);
    if (!u->cskip) return ST_OK;
    float *ts = scratch_take(s, N * u->cskip, MEM_WORKSPACE, "cascade.dskip tokens");
    float *dskip = scratch_take(s, N * u->cskip, MEM_ACTIVATIONS, "cascade.dskip");
    if (s->status) return s->status;
    copy_rows(ts, u->cskip, dcat + C, Ci, N, u->cskip);
    transpose_batched(dskip, ts, B, T, u->cskip);
    scratch_forget(s, dskip);
    grad->t[grad->n++] = dskip;
    return ST_OK;
}

/* ---- SDCascadeTimestepBlock ---- */

/* a and b (B C each, plane by plane) from the three time embeddings' mappers, summed in order */
static st_status time_mod(const cascade_block *u, float *a, float *b, scratch *s)
{
    const int64_t B = batch_of(u), C = u->cin, D = u->m->cfg.time_channels;
    float *chunk = scratch_take(s, B * D, MEM_WORKSPACE, "cascade.time chunk");
    float *ab = scratch_take_zero(s, B * 2 * C, MEM_WORKSPACE, "cascade.time mapped");
    float *one = scratch_take(s, B * 2 * C, MEM_WORKSPACE, "cascade.time mapper");
    st_status e = s->status;
    for (int k = 0; !e && k < CASCADE_TIME_CONDS; k++) {
        copy_rows(chunk, D, u->cx->r_embed + k * D, CASCADE_TIME_CONDS * D, B, D);
        e = fwd(u->m, &u->map[k], one, chunk, B);
        if (!e) add_to(ab, one, B * 2 * C), made(u, ab, B * 2 * C);
    }
    if (!e) copy_rows(a, C, ab, 2 * C, B, C), copy_rows(b, C, ab + C, 2 * C, B, C);
    scratch_drop(s, one), scratch_drop(s, ab), scratch_drop(s, chunk);
    return e;
}

static st_status time_forward(const cascade_block *u, const float *x, float *y, scratch *s)
{
    const int64_t B = batch_of(u), C = u->cin;
    float *a = scratch_take(s, B * C, MEM_WORKSPACE, "cascade.time scale");
    float *b = scratch_take(s, B * C, MEM_WORKSPACE, "cascade.time shift");
    st_status e = s->status ? s->status : time_mod(u, a, b, s);
    if (!e) plane_scale_shift_forward(y, x, a, b, B * C, u->h * u->w, u->m->cfg.bf16_activations);
    return e;
}

static st_status time_backward(const cascade_block *u, const float *x, float *dy, scratch *s)
{
    const int64_t B = batch_of(u), C = u->cin, D = u->m->cfg.time_channels;
    float *a = scratch_take(s, B * C, MEM_WORKSPACE, "cascade.time scale");
    float *b = scratch_take(s, B * C, MEM_WORKSPACE, "cascade.time shift");
    float *dab = scratch_take_zero(s, B * 2 * C, MEM_WORKSPACE, "cascade.dtime mapped");
    float *dsc = scratch_take_zero(s, B * C, MEM_WORKSPACE, "cascade.dtime scale");
    float *dsh = scratch_take_zero(s, B * C, MEM_WORKSPACE, "cascade.dtime shift");
    float *chunk = scratch_take(s, B * D, MEM_WORKSPACE, "cascade.time chunk");
    st_status e = s->status ? s->status : time_mod(u, a, b, s);
    if (e) return e;
    plane_scale_shift_backward(dy, dsc, dsh, dy, x, a, B * C, u->h * u->w, u->m->cfg.bf16_activations);
    copy_rows(dab, 2 * C, dsc, C, B, C);
    copy_rows(dab + C, 2 * C, dsh, C, B, C);
    for (int k = 0; !e && k < CASCADE_TIME_CONDS; k++) { /* the time embeddings are not trained: no dx */
        copy_rows(chunk, D, u->cx->r_embed + k * D, CASCADE_TIME_CONDS * D, B, D);
        e = bwd(u->m, &u->map[k], NULL, dab, chunk, B);
    }
    return e;
}

/* ---- SDCascadeAttnBlock ---- */

typedef struct attn_dims {
    int64_t B, T, N, C, L, K; /* tokens a sample, rows, channels, conditioning tokens, keys a sample (T + L) */
} attn_dims;

static attn_dims attn_of(const cascade_block *u)
{
    const int64_t B = batch_of(u), T = u->h * u->w, L = u->cx->tokens;
    return (attn_dims){B, T, B * T, u->cin, L, T + L};
}

/* main: the norm's output nt (N, C) and the keys' and values' input kv (B K, C); side (what attention offload moves):
 * q (N, C), k and v (B K, C), o (N, C) */
static int64_t attn_arena(const cascade_block *u)
{
    const attn_dims d = attn_of(u);
    return d.N * d.C + d.B * d.K * d.C;
}

static int64_t attn_side(const cascade_block *u)
{
    const attn_dims d = attn_of(u);
    return 2 * d.N * d.C + 2 * d.B * d.K * d.C;
}

static attn_shape attn_shape_of(const cascade_block *u)
{
    const attn_dims d = attn_of(u);
    return (attn_shape){.batch = d.B, .tokens = d.T, .heads = u->heads, .head_dim = d.C / u->heads,
                        .mechanism = u->m->shape.mechanism, .kv_tokens = d.K};
}

static size_t attn_states(const cascade_block *u)
{
    const attn_shape as = attn_shape_of(u);
    return layernorm_kept_bytes(attn_of(u).N) + attention_kept_bytes(&as);
}

static attn_view view(float *x, int64_t tokens, int64_t width) { return (attn_view){x, width, tokens * width}; }

/* st: the norm's state (kept where not NULL); att: attention's. from_host: the side and attention's state are back
 * from the host, as a forward that offloaded them left them: attention is not run again. */
static st_status attn_forward(const cascade_block *u, const float *x, float *y, float *arena, float *side,
                              op_state *st, op_state *att, bool from_host, scratch *s)
{
    const attn_dims d = attn_of(u);
    float *nt = arena, *kv = nt + d.N * d.C, *q = side, *k = q + d.N * d.C;
    float *v = k + d.B * d.K * d.C, *o = v + d.B * d.K * d.C;
    float *t = scratch_take(s, d.N * d.C, MEM_WORKSPACE, "cascade.tokens");
    float *kvm = scratch_take(s, d.B * d.L * d.C, MEM_WORKSPACE, "cascade.kv_mapper");
    if (s->status) return s->status;
    pool *p = u->m->pool;
    const attn_shape as = attn_shape_of(u);
    transpose_batched(t, x, d.B, d.C, d.T);
    st_status e = layernorm_forward(p, nt, t, NULL, NULL, d.N, d.C, CASCADE_EPS, st);
    if (!e) made(u, nt, d.N * d.C), e = fwd(u->m, &u->kv, kvm, u->cx->clip_s, d.B * d.L);
    if (!e) { /* each sample's keys: its normed map, then its conditioning tokens */
        copy_rows(kv, d.K * d.C, nt, d.T * d.C, d.B, d.T * d.C);
        copy_rows(kv + d.T * d.C, d.K * d.C, kvm, d.L * d.C, d.B, d.L * d.C);
    }
    if (!e && !from_host) e = fwd(u->m, &u->q, q, nt, d.N);
    if (!e && !from_host) e = fwd(u->m, &u->k, k, kv, d.B * d.K);
    if (!e && !from_host) e = fwd(u->m, &u->v, v, kv, d.B * d.K);
    if (!e && !from_host)
        e = attention_forward(p, &as, view(o, d.T, d.C), view(q, d.T, d.C), view(k, d.K, d.C), view(v, d.K, d.C),
                              att);
    if (!e && !from_host) made(u, o, d.N * d.C);
    if (!e) e = fwd(u->m, &u->o, t, o, d.N);
    if (e) return e;
    if (dropping(u)) dropout_forward(t, t, d.N * d.C, u->dropout, u->cx->dropout_seed, u->stream);
    transpose_batched(y, t, d.B, d.T, d.C);
    add_to(y, x, d.N * d.C);
    return ST_OK;
}

static st_status attn_backward(const cascade_block *u, const float *x, float *arena, float *side, const op_state *st,
                               float *dy, scratch *s)
{
    const attn_dims d = attn_of(u);
    float *nt = arena, *kv = nt + d.N * d.C, *q = side, *k = q + d.N * d.C;
    float *v = k + d.B * d.K * d.C, *o = v + d.B * d.K * d.C;
    float *t = scratch_take(s, d.N * d.C, MEM_WORKSPACE, "cascade.tokens");
    float *dO = scratch_take_zero(s, d.N * d.C, MEM_WORKSPACE, "cascade.do");
    float *dq = scratch_take_zero(s, d.N * d.C, MEM_WORKSPACE, "cascade.dq");
    float *dk = scratch_take_zero(s, d.B * d.K * d.C, MEM_WORKSPACE, "cascade.dk");
    float *dv = scratch_take_zero(s, d.B * d.K * d.C, MEM_WORKSPACE, "cascade.dv");
    float *dkv = scratch_take_zero(s, d.B * d.K * d.C, MEM_WORKSPACE, "cascade.dkv");
    float *dnt = scratch_take_zero(s, d.N * d.C, MEM_WORKSPACE, "cascade.dnorm");
    if (s->status) return s->status;
    pool *p = u->m->pool;
    const attn_shape as = attn_shape_of(u);
    transpose_batched(t, dy, d.B, d.C, d.T);
    if (dropping(u)) dropout_backward(t, t, d.N * d.C, u->dropout, u->cx->dropout_seed, u->stream);
    st_status e = bwd(u->m, &u->o, dO, t, o, d.N);
    if (!e) e = attention_backward(p, &as, view(dq, d.T, d.C), view(dk, d.K, d.C), view(dv, d.K, d.C),
                                   view(dO, d.T, d.C), view(q, d.T, d.C), view(k, d.K, d.C), view(v, d.K, d.C),
                                   u->m->cfg.bf16_activations ? (attn_view){0} : view(o, d.T, d.C), &st[1]);
    if (!e) e = bwd(u->m, &u->q, dnt, dq, nt, d.N);
    lin_layer k_nobias = u->k; /* every query sees every key: the softmax cancels the key bias, whose gradient is 0 */
    k_nobias.b = -1;
    if (!e) e = bwd(u->m, &k_nobias, dkv, dk, kv, d.B * d.K);
    if (!e) e = bwd(u->m, &u->v, dkv, dv, kv, d.B * d.K);
    float *dkvm = dk; /* (B L, C) of it */
    if (!e) { /* the keys' input: the normed map's rows join its gradient, the tokens' go to the kv_mapper */
        copy_rows(t, d.T * d.C, dkv, d.K * d.C, d.B, d.T * d.C);
        add_to(dnt, t, d.N * d.C);
        copy_rows(dkvm, d.L * d.C, dkv + d.T * d.C, d.K * d.C, d.B, d.L * d.C);
        e = bwd(u->m, &u->kv, u->cx->dclip_s, dkvm, u->cx->clip_s, d.B * d.L);
    }
    if (e) return e;
    float *dt = dq;
    zero_floats(dt, d.N * d.C);
    transpose_batched(t, x, d.B, d.C, d.T);
    layernorm_backward(dt, NULL, NULL, dnt, t, NULL, d.N, d.C, &st[0]);
    transpose_batched(t, dt, d.B, d.T, d.C);
    add_to(dy, t, d.N * d.C);
    return ST_OK;
}

/* ---- the embedding and the scalers: a norm and a convolution (a 1 x 1 mapping, or with cascade_resample a 2 x 2
 * stride-2 one, transposed up), kept nothing ---- */

static conv_shape conv_of(const cascade_block *u)
{
    const int64_t k = u->role == SC_EMBED || !u->m->cfg.cascade_resample ? 1 : 2;
    return (conv_shape){.batch = batch_of(u), .in = u->cin, .h = u->h, .w = u->w, .out = u->cout, .kh = k, .kw = k,
                        .sh = k, .sw = k};
}

/* embedding: y = LN(conv(x)); scalers: y = conv(LN(x)) (the transpose for up) */
static st_status scale_forward(const cascade_block *u, const float *x, float *y, scratch *s)
{
    const int64_t B = batch_of(u), HW = u->h * u->w;
    const conv_shape c = conv_of(u);
    pool *p = u->m->pool;
    if (u->role == SC_EMBED) {
        float *e = scratch_take(s, B * u->cout * HW, MEM_WORKSPACE, "cascade.embedding");
        st_status r = s->status ? s->status : conv2d_forward(p, e, x, W(u->conv_w), W(u->conv_b), &c);
        if (!r) made(u, e, B * u->cout * HW);
        return r ? r : ln2d_forward(u, y, e, u->cout, HW, NULL, s);
    }
    float *n = scratch_take(s, B * u->cin * HW, MEM_WORKSPACE, "cascade.scaler norm");
    st_status r = s->status ? s->status : ln2d_forward(u, n, x, u->cin, HW, NULL, s);
    const bool transposed = u->role == SC_UP && u->m->cfg.cascade_resample;
    if (!r && !transposed) r = conv2d_forward(p, y, n, W(u->conv_w), W(u->conv_b), &c);
    if (!r && transposed)
        r = conv_transpose2x2_forward(p, y, n, W(u->conv_w), W(u->conv_b), B, u->cin, u->cout, u->h, u->w);
    return r;
}

/* The norm's statistics and the convolution's input are made again; dL/dx goes in place of dy */
static st_status scale_backward(const cascade_block *u, const float *x, float *dy, scratch *s)
{
    const int64_t B = batch_of(u), HW = u->h * u->w, nx = B * u->cin * HW;
    const conv_shape c = conv_of(u);
    pool *p = u->m->pool;
    const bool embed = u->role == SC_EMBED;
    const int64_t nn = B * (embed ? u->cout : u->cin) * HW; /* the norm's input and output */
    float *e = scratch_take(s, nn, MEM_WORKSPACE, "cascade.norm input");
    float *n = scratch_take(s, nn, MEM_WORKSPACE, "cascade.norm output");
    float *dn = scratch_take_zero(s, nn, MEM_WORKSPACE, "cascade.dnorm");
    float *dx = scratch_take_zero(s, nx, MEM_WORKSPACE, "cascade.dinput");
    op_state ln = {0};
    st_status r = s->status;
    if (!r && embed) r = conv2d_forward(p, e, x, W(u->conv_w), W(u->conv_b), &c);
    if (!r && embed) made(u, e, nn);
    if (!r) r = ln2d_forward(u, n, embed ? e : x, embed ? u->cout : u->cin, HW, &ln, s);
    if (!r && embed) { /* dy is the norm's output gradient */
        r = ln2d_backward(u, dn, dy, e, u->cout, HW, &ln, s);
        if (!r) r = conv2d_backward(p, dx, G(u->conv_w), G(u->conv_b), dn, x, W(u->conv_w), &c);
    } else if (!r) {
        r = u->role == SC_DOWN || !u->m->cfg.cascade_resample
                ? conv2d_backward(p, dn, G(u->conv_w), G(u->conv_b), dy, n, W(u->conv_w), &c)
                : conv_transpose2x2_backward(p, dn, G(u->conv_w), G(u->conv_b), dy, n, W(u->conv_w), B, u->cin,
                                             u->cout, u->h, u->w);
        if (!r) r = ln2d_backward(u, dx, dn, x, u->cin, HW, &ln, s);
    }
    op_state_release(&ln);
    if (!r) copy_rows(dy, nx, dx, nx, 1, nx);
    return r;
}

/* ---- the block kind ---- */

/* What a forward kept: the arena (ResBlock's; AttnBlock's main region), the AttnBlock's side (on the host between
 * forward and backward under attention offload), and the ops' states: ResBlock's norm and GRN, AttnBlock's norm and
 * attention. recompute: a ResBlock under torch-ffn kept nothing, and its backward runs its forward again first. */
typedef struct cascade_saved {
    host_side side; /* first: micro_prefetch's */
    float *arena;
    op_state st[2];
    bool recompute;
    bool packed; /* mixed_precision bf16: the arena and the side on the device are held in bf16 (cascade_pack) */
} cascade_saved;

static int64_t arena_of(const cascade_block *u)
{
    return u->role == SC_RES ? res_arena(u) : u->role == SC_ATTN ? attn_arena(u) : 0;
}

/* torch-ffn's KEEP_ATTENTION: a ResBlock (the feed-forward of this U-Net: a depthwise convolution and a per-position
 * MLP) keeps nothing; an AttnBlock everything. The tensors at side_elem (packed under bf16), the ops' states float. */
static size_t cascade_kept_bytes(const block *b, keep_level keep)
{
    const cascade_block *u = b->self;
    if (keep == KEEP_NOTHING || !arena_of(u) || (u->role == SC_RES && keep == KEEP_ATTENTION)) return 0;
    if (u->role == SC_RES) return (size_t)res_arena(u) * side_elem(u->m) + res_states(u);
    return (size_t)(attn_arena(u) + attn_side(u)) * side_elem(u->m) + attn_states(u);
}

/* An AttnBlock's side at side_elem both in host memory (host_side_send copies it bf16 under bf16) and in what it frees
 * of kept_bytes (packed there) */
static size_t cascade_offloaded_bytes(const block *b)
{
    const cascade_block *u = b->self;
    return u->role == SC_ATTN ? (size_t)attn_side(u) * side_elem(u->m) : 0;
}

/* Under mixed_precision bf16, what sv keeps on the device (every value of it made bf16) to bf16 after a forward, or
 * back to float (widen) before whatever reads it: a recompute after an offloading forward, or backward */
static st_status cascade_pack(const cascade_block *u, cascade_saved *sv, bool widen)
{
    if (!u->m->cfg.bf16_activations || sv->packed != widen) return ST_OK;
    const kept_tensor k[] = {{&sv->arena, arena_of(u)}, {&sv->side.dev, u->role == SC_ATTN ? attn_side(u) : 0}};
    sv->packed = !widen;
    return kept_convert(u->m->pool, k, 2, widen);
}

static void cascade_release(block *b, block_saved *saved)
{
    cascade_saved *sv = (cascade_saved *)saved;
    if (!sv) return;
    pool *p = ((cascade_block *)b->self)->m->pool;
    host_side_release(&sv->side, p);
    op_state_release(&sv->st[0]), op_state_release(&sv->st[1]);
    pool_free(p, sv->arena);
    free(sv);
}

/* An AttnBlock's forward: what is kept goes through keep_s, the rest through s; with off, the side goes to the host
 * (its attention state kept: attention is not run again), and the recompute after it takes the side back */
static st_status attn_block_forward(const cascade_block *u, const float *x, float *y, keep_level keep, offload *off,
                                    cascade_saved *sv, scratch *s)
{
    const bool from_host = sv->side.on_host, to_host = off && !from_host, kept = keep != KEEP_NOTHING;
    scratch keep_s = {.pool = u->m->pool};
    float *arena = scratch_take(kept ? &keep_s : s, attn_arena(u), kept ? MEM_ACTIVATIONS : MEM_WORKSPACE,
                                "cascade.attention");
    st_status r = keep_s.status ? keep_s.status : s->status;
    if (!r && from_host) r = host_side_back(&sv->side);
    float *side = from_host ? sv->side.dev
                            : scratch_take(kept || to_host ? &keep_s : s, attn_side(u),
                                           kept || to_host ? MEM_ACTIVATIONS : MEM_WORKSPACE, "cascade.attention side");
    if (!r) r = keep_s.status ? keep_s.status : s->status;
    if (!r)
        r = attn_forward(u, x, y, arena, side, kept ? &sv->st[0] : NULL, kept || to_host ? &sv->st[1] : NULL,
                         from_host, s);
    if (!r && to_host) {
        r = host_side_send(&sv->side, off, &keep_s, side, (size_t)attn_side(u) * sizeof(float),
                           u->m->cfg.bf16_activations, "cascade.attention side (host)");
        side = NULL;
    }
    if (r) {
        if (sv->side.off) host_tensor_release(sv->side.off, &sv->side.h);
        scratch_end(&keep_s);
        return r;
    }
    if (kept) scratch_forget(&keep_s, arena), sv->arena = arena;
    if (side && !from_host && kept) scratch_forget(&keep_s, side), sv->side.dev = side;
    return scratch_end(&keep_s);
}

static st_status cascade_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                                 block_saved **saved_io)
{
    cascade_block *u = b->self;
    b->forward_runs++;
    if (u->role != SC_ATTN) off = NULL; /* nothing of theirs moves */
    cascade_saved *sv = saved_io && *saved_io ? (cascade_saved *)*saved_io : calloc(1, sizeof *sv);
    if (!sv) return st_host_oom("a Stable Cascade block's saved tensors");
    scratch s = {.pool = u->m->pool};
    float *y = scratch_take(&s, batch_of(u) * u->io.out_numel, MEM_ACTIVATIONS, "cascade.output");
    st_status r = s.status ? s.status : cascade_pack(u, sv, true); /* a recompute after an offloading forward */
    if (!r && u->role == SC_RES) {
        const bool kept = keep == KEEP_ALL; /* torch-ffn's KEEP_ATTENTION: made again in backward */
        float *arena = scratch_take(&s, res_arena(u), kept ? MEM_ACTIVATIONS : MEM_WORKSPACE,
                                    kept ? "cascade.resblock" : "cascade.resblock (transient)");
        r = s.status ? s.status : res_forward(u, in, y, arena, kept ? sv->st : NULL, &s);
        if (!r && kept) scratch_forget(&s, arena), sv->arena = arena;
        sv->recompute = !r && keep == KEEP_ATTENTION;
    } else if (!r && u->role == SC_ATTN)
        r = attn_block_forward(u, in->t[0], y, keep, off, sv, &s);
    else if (!r && u->role == SC_TIME)
        r = time_forward(u, in->t[0], y, &s);
    else if (!r)
        r = scale_forward(u, in->t[0], y, &s);
    if (!r) scratch_forget(&s, y);
    scratch_end(&s);
    if (!r && (r = cascade_pack(u, sv, false))) pool_free(u->m->pool, y);
    const bool empty = !sv->arena && !sv->side.dev && !sv->side.on_host && !sv->recompute;
    return micro_forward_end(b, r, (block_saved *)sv, empty, saved_io, &u->io, in, y, out);
}

/* torch-ffn: a ResBlock's forward again, keeping its arena and states, then its backward */
static st_status res_again_backward(const cascade_block *u, const block_state *in, cascade_saved *sv,
                                    block_state *grad, scratch *s)
{
    const int64_t N = batch_of(u) * u->h * u->w;
    float *arena = scratch_take(s, res_arena(u), MEM_ACTIVATIONS, "cascade.resblock (made again)");
    float *y = scratch_take(s, N * u->cout, MEM_WORKSPACE, "cascade.resblock output (made again)");
    st_status r = s->status ? s->status : res_forward(u, in, y, arena, sv->st, s);
    scratch_drop(s, y);
    if (!r) r = res_backward(u, in, arena, sv->st, grad, s);
    op_state_release(&sv->st[0]), op_state_release(&sv->st[1]);
    return r;
}

static st_status cascade_backward(block *b, const block_state *in, block_saved *saved, block_state *grad)
{
    cascade_block *u = b->self;
    cascade_saved *sv = (cascade_saved *)saved;
    micro_skip_grad_join(&u->io, batch_of(u), u->m->pool, grad);
    if (arena_of(u) && !sv)
        return st_fail(ST_ERR_INTERNAL, "Stable Cascade block %d: backward without its forward's", b->index);
    scratch s = {.pool = u->m->pool};
    st_status r = sv ? cascade_pack(u, sv, true) : ST_OK; /* before the side comes back from the host in float */
    if (r) return r;
    if (u->role == SC_RES)
        r = sv->recompute ? res_again_backward(u, in, sv, grad, &s) : res_backward(u, in, sv->arena, sv->st, grad, &s);
    else if (u->role == SC_ATTN)
        r = (r = host_side_back(&sv->side)) ? r : attn_backward(u, in->t[0], sv->arena, sv->side.dev, sv->st,
                                                                grad->t[0], &s);
    else if (u->role == SC_TIME)
        r = time_backward(u, in->t[0], grad->t[0], &s);
    else
        r = scale_backward(u, in->t[0], grad->t[0], &s);
    const st_status e = scratch_end(&s);
    return r ? r : e;
}

static void cascade_states(const block *b, state_map *out)
{
    const cascade_block *u = b->self;
    micro_skip_states(&u->io, batch_of(u), out);
}

const block_kind cascade_block_kind = {
    .name = "stable cascade", .ffn_split = true, .softmax_attention = true, .kept_bytes = cascade_kept_bytes,
    .offload_host_bytes = cascade_offloaded_bytes, .offload_device_bytes = cascade_offloaded_bytes, /* float both */
    .prefetch = micro_prefetch, .forward = cascade_forward,
    .backward = cascade_backward, .release = cascade_release, .states = cascade_states,
};
