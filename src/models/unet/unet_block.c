/* The U-Net's micro-blocks (UNet2DConditionModel's, diffusers' names and layouts), the units that checkpointing keeps
 * or recomputes: conv_in, ResnetBlock2D, Transformer2DModel (its BasicTransformerBlocks inside), Downsample2D and
 * Upsample2D. Feature maps are channels first, (B, C, H, W), as diffusers has them.
 *
 * The down path's outputs are the skips that the up path's ResnetBlock2Ds read, newest first, concatenated after the
 * stream's channels. A skip rides in the state from the block that makes it to the block that reads it, as the same
 * tensor (block_kind.states says which), so the executor stores each once, however many boundaries hold it. A block
 * that makes a skip lists its output twice (the stream, and the newest skip); its backward adds the two gradients.
 * A block that reads one appends the skip's gradient to the gradient state, which travels back to its maker.
 *
 * What a kept forward keeps is arenas of floats (every intermediate its backward reads) and the ops' states: one for a
 * ResnetBlock2D, three regions for a Transformer2DModel (main, the attention side, the feed-forward's); a checkpointed
 * block's first forward takes them as workspace and keeps nothing. Downsample2D, Upsample2D and conv_in keep nothing
 * at all: their backward reads the input state (and makes the upsampled map again). The skips' bookkeeping is
 * micro_seq.c's. */
#include "models/unet/unet.h"

#include "models/core/attn_side.h"

#include <stdlib.h>
#include <string.h>

#define XF_EPS 1e-5f /* BasicTransformerBlock's LayerNorms */
#define XF_GN_EPS 1e-6f /* Transformer2DModel's GroupNorm */

static int64_t batch_of(const unet_block *u) { return u->m->shape.batch; }

#define W(i) (param_at(u->m->params, (i))->w)
#define G(i) (param_at(u->m->params, (i))->g)

/* mixed_precision bf16 (docs/PRECISION.md): what PyTorch's bf16 U-Net makes in bf16 (every convolution's, linear's and
 * attention's output, the norms' and activations' outputs, the sums within a block) is rounded where it is made, at
 * every keep level, so that what a block keeps packs to bf16 without loss and every schedule computes the same bits */
static void made(const unet_block *u, float *y, int64_t n) { side_made(u->m, y, n); }

/* A convolution (and its LoCon adapter) on the model's parameters and pool, its output made as PyTorch's bf16 one */
static st_status conv_fwd(const unet_block *u, const conv_layer *l, float *y, const float *x, const conv_shape *c)
{
    const st_status st = conv_layer_forward(u->m->params, u->m->pool, l, y, x, c);
    if (!st) made(u, y, c->batch * c->out * conv_out_h(c) * conv_out_w(c));
    return st;
}

/* y = SiLU(x), as PyTorch's bf16 nn.SiLU makes it */
static void silu_made(const unet_block *u, float *y, const float *x, int64_t n)
{
    silu_forward(y, x, n);
    made(u, y, n);
}

static st_status conv_bwd(const unet_block *u, const conv_layer *l, float *dx, const float *dy, const float *x,
                          const conv_shape *c)
{
    return conv_layer_backward(u->m->params, u->m->pool, l, dx, dy, x, c);
}

/* ---- ResnetBlock2D ---- */

/* Its input's channels: the stream's and the skip's it reads */
static int64_t res_in(const unet_block *u) { return u->cin + u->cskip; }

static conv_shape conv3(const unet_block *u, int64_t in, int64_t out, int64_t stride)
{
    return (conv_shape){.batch = batch_of(u), .in = in, .h = u->h, .w = u->w, .out = out, .kh = 3, .kw = 3,
                        .sh = stride, .sw = stride, .ph = 1, .pw = 1};
}

static conv_shape conv1(const unet_block *u, int64_t in, int64_t out)
{
    return (conv_shape){.batch = batch_of(u), .in = in, .h = u->h, .w = u->w, .out = out, .kh = 1, .kw = 1, .sh = 1,
                        .sw = 1};
}

/* arena: n1 (B, Ci, HW), h1 and n2 (B, Co, HW) */
static int64_t res_arena(const unet_block *u)
{
    const int64_t P = batch_of(u) * u->h * u->w;
    return P * (res_in(u) + 2 * u->cout);
}

/* The stream and the skip side by side on channels, per sample (the up path's torch.cat(dim=1)); NULL when the block
 * reads no skip (the stream itself is the input). */
static float *res_input(scratch *s, const unet_block *u, const block_state *in)
{
    if (!u->cskip) return in->t[0];
    const int64_t B = batch_of(u), HW = u->h * u->w, Ci = res_in(u);
    float *xc = scratch_take(s, B * Ci * HW, MEM_WORKSPACE, "unet.concat");
    if (s->status) return NULL;
    copy_rows(xc, Ci * HW, in->t[0], u->cin * HW, B, u->cin * HW);
    copy_rows(xc + u->cin * HW, Ci * HW, in->t[u->io.skips], u->cskip * HW, B, u->cskip * HW);
    return xc;
}

static st_status res_forward(const unet_block *u, const block_state *in, float *y, float *arena, op_state *st,
                             scratch *s)
{
    const int64_t B = batch_of(u), HW = u->h * u->w, Ci = res_in(u), Co = u->cout, g = u->m->cfg.norm_groups;
    const float eps = (float)u->m->cfg.norm_eps;
    float *n1 = arena, *h1 = n1 + B * Ci * HW, *n2 = h1 + B * Co * HW;
    const float *xc = res_input(s, u, in);
    float *a = scratch_take(s, B * (Ci > Co ? Ci : Co) * HW, MEM_WORKSPACE, "unet.silu");
    float *tp = scratch_take(s, B * Co, MEM_WORKSPACE, "unet.temb");
    if (s->status) return s->status;
    st_status r = groupnorm_forward(u->m->pool, n1, xc, W(u->norm1_w), W(u->norm1_b), B, Ci, HW, g, eps,
                                    st ? &st[0] : NULL);
    if (r) return r;
    made(u, n1, B * Ci * HW);
    silu_made(u, a, n1, B * Ci * HW);
    const conv_shape c1 = conv3(u, Ci, Co, 1), c2 = conv3(u, Co, Co, 1);
    if ((r = conv_fwd(u, &u->conv1, h1, a, &c1))) return r;
    if ((r = fwd(u->m, &u->temb, tp, u->m->ctx.cs, B))) return r;
    plane_add_forward(h1, tp, B * Co, HW);
    made(u, h1, B * Co * HW);
    if ((r = groupnorm_forward(u->m->pool, n2, h1, W(u->norm2_w), W(u->norm2_b), B, Co, HW, g, eps,
                               st ? &st[1] : NULL)))
        return r;
    made(u, n2, B * Co * HW);
    silu_made(u, a, n2, B * Co * HW);
    if ((r = conv_fwd(u, &u->conv2, y, a, &c2))) return r;
    if (u->shortcut.w < 0) {
        add_to(y, xc, B * Co * HW);
        return ST_OK;
    }
    const conv_shape cs = conv1(u, Ci, Co);
    float *sc = scratch_take(s, B * Co * HW, MEM_WORKSPACE, "unet.shortcut");
    if (!s->status && !(r = conv_fwd(u, &u->shortcut, sc, xc, &cs)))
        add_to(y, sc, B * Co * HW);
    return s->status ? s->status : r;
}

/* grad->t[0]: dL/dy on entry, dL/dx (a new tensor when the channels differ) on return; the skip's gradient is
 * appended for a block that reads one. */
static st_status res_backward(const unet_block *u, const block_state *in, float *arena, op_state *st,
                              block_state *grad, scratch *s)
{
    const int64_t B = batch_of(u), HW = u->h * u->w, Ci = res_in(u), Co = u->cout, g = u->m->cfg.norm_groups;
    float *n1 = arena, *h1 = n1 + B * Ci * HW, *n2 = h1 + B * Co * HW, *dy = grad->t[0];
    const float *xc = res_input(s, u, in);
    float *dxc = scratch_take_zero(s, B * Ci * HW, MEM_WORKSPACE, "unet.dinput");
    float *a = scratch_take(s, B * (Ci > Co ? Ci : Co) * HW, MEM_WORKSPACE, "unet.silu");
    float *da = scratch_take_zero(s, B * (Ci > Co ? Ci : Co) * HW, MEM_WORKSPACE, "unet.dsilu");
    float *dn = scratch_take_zero(s, B * (Ci > Co ? Ci : Co) * HW, MEM_WORKSPACE, "unet.dnorm");
    float *dh1 = scratch_take_zero(s, B * Co * HW, MEM_WORKSPACE, "unet.dconv1");
    float *dtp = scratch_take_zero(s, B * Co, MEM_WORKSPACE, "unet.dtemb");
    if (s->status) return s->status;
    pool *p = u->m->pool;
    const conv_shape c1 = conv3(u, Ci, Co, 1), c2 = conv3(u, Co, Co, 1), cs = conv1(u, Ci, Co);
    st_status r = u->shortcut.w < 0 ? ST_OK : conv_bwd(u, &u->shortcut, dxc, dy, xc, &cs);
    if (!r && u->shortcut.w < 0) add_to(dxc, dy, B * Co * HW);
    if (r) return r;
    silu_made(u, a, n2, B * Co * HW);
    if ((r = conv_bwd(u, &u->conv2, da, dy, a, &c2))) return r;
    silu_backward(dn, da, n2, B * Co * HW);
    if ((r = groupnorm_backward(p, dh1, G(u->norm2_w), G(u->norm2_b), dn, h1, W(u->norm2_w), B, Co, HW, g, &st[1])))
        return r;
    plane_add_backward(dtp, dh1, B * Co, HW);
    if ((r = bwd(u->m, &u->temb, u->m->ctx.dcs, dtp, u->m->ctx.cs, B))) return r;
    silu_made(u, a, n1, B * Ci * HW);
    zero_floats(da, B * Ci * HW);
    zero_floats(dn, B * Ci * HW);
    if ((r = conv_bwd(u, &u->conv1, da, dh1, a, &c1))) return r;
    silu_backward(dn, da, n1, B * Ci * HW);
    if ((r = groupnorm_backward(p, dxc, G(u->norm1_w), G(u->norm1_b), dn, xc, W(u->norm1_w), B, Ci, HW, g, &st[0])))
        return r;
    /* dxc is (dx, dskip) side by side: the stream's part goes in place of dy (the model's gradient buffer holds the
     * widest stream), the skip's joins the gradient state */
    float *dskip = u->cskip ? scratch_take(s, B * u->cskip * HW, MEM_ACTIVATIONS, "unet.dskip") : NULL;
    if (s->status) return s->status;
    copy_rows(dy, u->cin * HW, dxc, Ci * HW, B, u->cin * HW);
    if (dskip) {
        copy_rows(dskip, u->cskip * HW, dxc + u->cin * HW, Ci * HW, B, u->cskip * HW);
        grad->t[grad->n++] = dskip;
        scratch_forget(s, dskip);
    }
    return ST_OK;
}

/* ---- Transformer2DModel ---- */

/* A layer's tensors, in three regions: the main one (what backward reads that is neither of the others, kept on the
 * device), the attention side (what attention offload moves to the host), the feed-forward's (what torch-ffn makes
 * again in backward). Every one (N, I), but FG (N, 2 FF), GG (N, FF), K2 and V2 (B L, I). */
enum { LN1, H1, LN2, H2, H3, MAIN_TENSORS };
enum { Q, K, V, O, Q2, O2, K2, V2, SIDE_TENSORS };
enum { LN3, FG, GG, FFN_TENSORS };

typedef struct xf_dims {
    int64_t B, T, N, C, I, FF, L; /* tokens a sample, rows, channels, inner width, GEGLU width, text tokens */
} xf_dims;

static xf_dims xf_of(const unet_block *u)
{
    const int64_t B = batch_of(u), T = u->h * u->w;
    return (xf_dims){B, T, B * T, u->cin, u->cin, 4 * u->cin, u->m->cfg.text_len};
}

static int64_t side_size(const xf_dims *d, int k) { return k == K2 || k == V2 ? d->B * d->L * d->I : d->N * d->I; }
static int64_t ffn_size(const xf_dims *d, int k)
{
    return k == FG ? d->N * 2 * d->FF : k == GG ? d->N * d->FF : d->N * d->I;
}

static int64_t side_floats(const xf_dims *d) { return 6 * d->N * d->I + 2 * d->B * d->L * d->I; }
static int64_t ffn_floats(const xf_dims *d) { return d->N * (d->I + 3 * d->FF); }

/* main: the GroupNorm's output as tokens (N, C), proj_in's output (N, I), then each layer's */
static int64_t main_floats(const unet_block *u)
{
    const xf_dims d = xf_of(u);
    return d.N * (d.C + d.I) + u->layers * MAIN_TENSORS * d.N * d.I;
}

/* The regions of one forward or backward: layer l's tensors at main, side and ffn (ffn holds one layer's when it
 * is not kept: stride 0) */
typedef struct xf_regions {
    float *main, *side, *ffn;
    int64_t ffn_stride;
} xf_regions;

static void layer_ptrs(const xf_dims *d, const xf_regions *r, int64_t l, float **m, float **a, float **f)
{
    float *at = r->main + d->N * (d->C + d->I) + l * MAIN_TENSORS * d->N * d->I;
    for (int k = 0; k < MAIN_TENSORS; k++) m[k] = at, at += d->N * d->I;
    at = r->side + l * side_floats(d);
    for (int k = 0; k < SIDE_TENSORS; k++) a[k] = at, at += side_size(d, k);
    at = r->ffn + l * r->ffn_stride;
    for (int k = 0; k < FFN_TENSORS; k++) f[k] = at, at += ffn_size(d, k);
}

static attn_shape xf_shape(const unet_block *u, bool cross)
{
    const xf_dims d = xf_of(u);
    return (attn_shape){.batch = d.B, .tokens = d.T, .heads = u->heads, .head_dim = d.I / u->heads,
                        .mechanism = u->m->shape.mechanism, .kv_tokens = cross ? d.L : 0};
}

static attn_view view(float *x, int64_t tokens, int64_t width) { return (attn_view){x, width, tokens * width}; }

/* The attention output its backward is given: none under bf16, whose kept output is rounded (D from P, ops.h) */
static attn_view out_of(const unet_block *u, float *o, int64_t tokens, int64_t width)
{
    return u->m->cfg.bf16_activations ? (attn_view){0} : view(o, tokens, width);
}

/* The kept states of a Transformer2DModel: the GroupNorm's, then per layer LN1, LN2, LN3, attn1, attn2 */
enum { S_LN1, S_LN2, S_LN3, S_ATT1, S_ATT2, LAYER_STATES };
static op_state *layer_state(op_state *st, int64_t l, int k) { return st ? st + 1 + LAYER_STATES * l + k : NULL; }

/* GEGLU: proj's output fg is (hidden, gate), gg = hidden * gelu(gate); under bf16 as PyTorch's bf16 module makes it,
 * gelu(gate) rounded (into ws, N FF floats), then the product (glu_forward's one product otherwise) */
static void geglu_forward(const unet_block *u, float *gg, const float *fg, float *ws)
{
    const xf_dims d = xf_of(u);
    if (!u->m->cfg.bf16_activations) {
        glu_forward(gg, fg + d.FF, fg, d.N, d.FF, 2 * d.FF, GLU_GELU_ERF);
        return;
    }
    copy_rows(gg, d.FF, fg + d.FF, 2 * d.FF, d.N, d.FF);
    gelu_erf_forward(ws, gg, d.N * d.FF);
    made(u, ws, d.N * d.FF);
    copy_rows(gg, d.FF, fg, 2 * d.FF, d.N, d.FF);
    mul_scaled(gg, gg, ws, 1.0f, d.N * d.FF);
    made(u, gg, d.N * d.FF);
}

/* The feed-forward sub-layer from H2: LN3, GEGLU's input and output (f); ws: geglu_forward's under bf16 */
static st_status ffn_forward(const unet_block *u, const xformer_layer *xl, float *const *m, float *const *f,
                             op_state *ln3, float *ws)
{
    const xf_dims d = xf_of(u);
    st_status r = layernorm_forward(u->m->pool, f[LN3], m[H2], W(xl->n3w), W(xl->n3b), d.N, d.I, XF_EPS, ln3);
    if (!r) made(u, f[LN3], d.N * d.I), r = fwd(u->m, &xl->ff1, f[FG], f[LN3], d.N);
    if (!r) geglu_forward(u, f[GG], f[FG], ws);
    return r;
}

/* a LayerNorm of the stream over rows of I, its output made as PyTorch's bf16 one */
static st_status xf_norm(const unet_block *u, float *y, const float *x, int w, int b, op_state *keep)
{
    const xf_dims d = xf_of(u);
    const st_status r = layernorm_forward(u->m->pool, y, x, W(w), W(b), d.N, d.I, XF_EPS, keep);
    if (!r) made(u, y, d.N * d.I);
    return r;
}

/* y = the attention's output, as PyTorch's bf16 SDPA makes it */
static st_status xf_attend(const unet_block *u, const attn_shape *as, float *o, float *q, float *k, float *v,
                           op_state *keep)
{
    const int64_t Tk = as->kv_tokens ? as->kv_tokens : as->tokens, I = as->heads * as->head_dim;
    const st_status r = attention_forward(u->m->pool, as, view(o, as->tokens, I), view(q, as->tokens, I),
                                          view(k, Tk, I), view(v, Tk, I), keep);
    if (!r) made(u, o, as->batch * as->tokens * I);
    return r;
}

/* y += x, a residual sum, as PyTorch's bf16 add makes it */
static void xf_residual(const unet_block *u, float *y, const float *x)
{
    const xf_dims d = xf_of(u);
    add_to(y, x, d.N * d.I);
    made(u, y, d.N * d.I);
}

/* Which states are kept: the norms', the feed-forward's LayerNorm's, the attentions'. from_host: the attention side
 * (and the attentions' states) are back from the host already, as a forward that offloaded them left them:
 * attention is not run again. */
static st_status xf_forward(const unet_block *u, const float *x, float *y, const xf_regions *rg, op_state *st,
                            bool keep_norms, bool keep_ffn, bool keep_attn, bool from_host, scratch *s)
{
    const xf_dims d = xf_of(u);
    const model *m = u->m;
    const attn_shape self = xf_shape(u, false), cross = xf_shape(u, true);
    float *tin = rg->main, *h0 = tin + d.N * d.C;
    float *n = scratch_take(s, d.N * d.C, MEM_WORKSPACE, "unet.gn");
    float *out = scratch_take(s, d.N * d.C, MEM_WORKSPACE, "unet.proj_out");
    float *ws = m->cfg.bf16_activations ? scratch_take(s, d.N * d.FF, MEM_WORKSPACE, "unet.gelu") : NULL;
    if (s->status) return s->status;
    op_state *kst = keep_norms ? st : NULL, *ast = keep_attn ? st : NULL;
    st_status r = groupnorm_forward(m->pool, n, x, W(u->norm_w), W(u->norm_b), d.B, d.C, d.T, m->cfg.norm_groups,
                                    XF_GN_EPS, kst ? &kst[0] : NULL);
    if (r) return r;
    made(u, n, d.N * d.C);
    transpose_batched(tin, n, d.B, d.C, d.T);
    if ((r = fwd(m, &u->proj_in, h0, tin, d.N))) return r;
    const float *h = h0;
    for (int64_t l = 0; l < u->layers && !r; l++) {
        const xformer_layer *xl = &u->xl[l];
        float *t[MAIN_TENSORS], *a[SIDE_TENSORS], *f[FFN_TENSORS];
        layer_ptrs(&d, rg, l, t, a, f);
        r = xf_norm(u, t[LN1], h, xl->n1w, xl->n1b, layer_state(kst, l, S_LN1));
        if (!r && !from_host) r = fwd(m, &xl->q, a[Q], t[LN1], d.N);
        if (!r && !from_host) r = fwd(m, &xl->k, a[K], t[LN1], d.N);
        if (!r && !from_host) r = fwd(m, &xl->v, a[V], t[LN1], d.N);
        if (!r && !from_host) r = xf_attend(u, &self, a[O], a[Q], a[K], a[V], layer_state(ast, l, S_ATT1));
        if (!r) r = fwd(m, &xl->o, t[H1], a[O], d.N);
        if (!r) xf_residual(u, t[H1], h);
        if (!r) r = xf_norm(u, t[LN2], t[H1], xl->n2w, xl->n2b, layer_state(kst, l, S_LN2));
        if (!r && !from_host) r = fwd(m, &xl->q2, a[Q2], t[LN2], d.N);
        if (!r && !from_host) r = fwd(m, &xl->k2, a[K2], m->ctx.text, d.B * d.L);
        if (!r && !from_host) r = fwd(m, &xl->v2, a[V2], m->ctx.text, d.B * d.L);
        if (!r && !from_host) r = xf_attend(u, &cross, a[O2], a[Q2], a[K2], a[V2], layer_state(ast, l, S_ATT2));
        if (!r) r = fwd(m, &xl->o2, t[H2], a[O2], d.N);
        if (!r) xf_residual(u, t[H2], t[H1]);
        if (!r) r = ffn_forward(u, xl, t, f, keep_ffn ? layer_state(kst, l, S_LN3) : NULL, ws);
        if (!r) r = fwd(m, &xl->ff2, t[H3], f[GG], d.N);
        if (!r) xf_residual(u, t[H3], t[H2]);
        h = t[H3];
    }
    if (!r) r = fwd(m, &u->proj_out, out, h, d.N);
    if (r) return r;
    transpose_batched(y, out, d.B, d.T, d.C);
    add_to(y, x, d.N * d.C);
    return ST_OK;
}

/* dy: dL/dy on entry, dL/dx on return (the residual's gradient passes through in place). rg->ffn_stride 0: the
 * feed-forward's tensors were not kept, and each layer's are made again from H2 into rg->ffn. */
static st_status xf_backward(const unet_block *u, const float *x, const xf_regions *rg, op_state *st, float *dy,
                             scratch *s)
{
    const xf_dims d = xf_of(u);
    const model *m = u->m;
    pool *p = m->pool;
    const attn_shape self = xf_shape(u, false), cross = xf_shape(u, true);
    float *tin = rg->main, *h0 = tin + d.N * d.C;
    float *dout = scratch_take(s, d.N * d.C, MEM_WORKSPACE, "unet.dproj_out");
    float *dh = scratch_take_zero(s, d.N * d.I, MEM_WORKSPACE, "unet.dstream");
    float *dt = scratch_take_zero(s, d.N * 2 * d.FF, MEM_WORKSPACE, "unet.dff"); /* dFG, then dO, then dn */
    float *dg = scratch_take_zero(s, d.N * d.FF, MEM_WORKSPACE, "unet.dgeglu");  /* dGG, then dLN */
    float *dq = scratch_take_zero(s, d.N * d.I, MEM_WORKSPACE, "unet.dq");
    float *dk = scratch_take_zero(s, d.N * d.I, MEM_WORKSPACE, "unet.dk");
    float *dv = scratch_take_zero(s, d.N * d.I, MEM_WORKSPACE, "unet.dv");
    float *dk2 = scratch_take_zero(s, d.B * d.L * d.I, MEM_WORKSPACE, "unet.dk2");
    float *dv2 = scratch_take_zero(s, d.B * d.L * d.I, MEM_WORKSPACE, "unet.dv2");
    if (s->status) return s->status;
    transpose_batched(dout, dy, d.B, d.C, d.T);
    float *t[MAIN_TENSORS], *a[SIDE_TENSORS], *f[FFN_TENSORS];
    layer_ptrs(&d, rg, u->layers - 1, t, a, f);
    st_status r = bwd(m, &u->proj_out, dh, dout, u->layers ? t[H3] : h0, d.N);
    const int64_t NI = d.N * d.I;
    for (int64_t l = u->layers - 1; l >= 0 && !r; l--) {
        const xformer_layer *xl = &u->xl[l];
        layer_ptrs(&d, rg, l, t, a, f);
        float *hin = h0, *pt[MAIN_TENSORS], *pa[SIDE_TENSORS], *pf[FFN_TENSORS];
        if (l) layer_ptrs(&d, rg, l - 1, pt, pa, pf), hin = pt[H3];
        op_state *ln3 = layer_state(st, l, S_LN3), again = {0};
        if (!rg->ffn_stride) r = ffn_forward(u, xl, t, f, ln3 = &again, dg); /* torch-ffn: the feed-forward again */
        /* feed-forward: dh holds dL/dH3 */
        zero_floats(dg, d.N * d.FF), zero_floats(dt, d.N * 2 * d.FF);
        if (!r) r = bwd(m, &xl->ff2, dg, dh, f[GG], d.N);
        if (!r) glu_backward(dt + d.FF, dt, dg, f[FG] + d.FF, f[FG], d.N, d.FF, 2 * d.FF, GLU_GELU_ERF);
        if (!r) zero_floats(dq, NI), r = bwd(m, &xl->ff1, dq, dt, f[LN3], d.N);
        if (!r) layernorm_backward(dh, G(xl->n3w), G(xl->n3b), dq, t[H2], W(xl->n3w), d.N, d.I, ln3);
        op_state_release(&again);
        /* cross-attention: dh holds dL/dH2 */
        float *dO = dt, *dln = dg; /* N I floats each, free again */
        if (!r) zero_floats(dO, NI), r = bwd(m, &xl->o2, dO, dh, a[O2], d.N);
        if (!r) {
            zero_floats(dq, NI), zero_floats(dk2, d.B * d.L * d.I), zero_floats(dv2, d.B * d.L * d.I);
            r = attention_backward(p, &cross, view(dq, d.T, d.I), view(dk2, d.L, d.I), view(dv2, d.L, d.I),
                                   view(dO, d.T, d.I), view(a[Q2], d.T, d.I), view(a[K2], d.L, d.I),
                                   view(a[V2], d.L, d.I), out_of(u, a[O2], d.T, d.I), layer_state(st, l, S_ATT2));
        }
        if (!r) r = bwd(m, &xl->k2, m->ctx.dtext, dk2, m->ctx.text, d.B * d.L);
        if (!r) r = bwd(m, &xl->v2, m->ctx.dtext, dv2, m->ctx.text, d.B * d.L);
        if (!r) zero_floats(dln, NI), r = bwd(m, &xl->q2, dln, dq, t[LN2], d.N);
        if (!r) layernorm_backward(dh, G(xl->n2w), G(xl->n2b), dln, t[H1], W(xl->n2w), d.N, d.I,
                                   layer_state(st, l, S_LN2));
        /* self-attention: dh holds dL/dH1 */
        if (!r) zero_floats(dO, NI), r = bwd(m, &xl->o, dO, dh, a[O], d.N);
        if (!r) {
            zero_floats(dq, NI), zero_floats(dk, NI), zero_floats(dv, NI);
            r = attention_backward(p, &self, view(dq, d.T, d.I), view(dk, d.T, d.I), view(dv, d.T, d.I),
                                   view(dO, d.T, d.I), view(a[Q], d.T, d.I), view(a[K], d.T, d.I),
                                   view(a[V], d.T, d.I), out_of(u, a[O], d.T, d.I), layer_state(st, l, S_ATT1));
        }
        if (!r) zero_floats(dln, NI), r = bwd(m, &xl->q, dln, dq, t[LN1], d.N);
        if (!r) r = bwd(m, &xl->k, dln, dk, t[LN1], d.N);
        if (!r) r = bwd(m, &xl->v, dln, dv, t[LN1], d.N);
        if (!r) layernorm_backward(dh, G(xl->n1w), G(xl->n1b), dln, hin, W(xl->n1w), d.N, d.I,
                                   layer_state(st, l, S_LN1));
    }
    /* proj_in and the GroupNorm; the residual's gradient is dy itself, which becomes dL/dx in place */
    float *dtin = dq, *dn = dt; /* N C floats each (C = I) */
    if (!r) zero_floats(dtin, NI), r = bwd(m, &u->proj_in, dtin, dh, tin, d.N);
    if (r) return r;
    transpose_batched(dn, dtin, d.B, d.T, d.C);
    return groupnorm_backward(p, dy, G(u->norm_w), G(u->norm_b), dn, x, W(u->norm_w), d.B, d.C, d.T,
                              m->cfg.norm_groups, &st[0]);
}

/* ---- conv_in, Downsample2D, Upsample2D: one convolution each ---- */

static conv_shape conv_of(const unet_block *u)
{
    const int64_t f = u->role == UNET_UP ? 2 : 1;
    conv_shape c = conv3(u, u->cin, u->cout, u->role == UNET_DOWN ? 2 : 1);
    c.h *= f, c.w *= f;
    return c;
}

static st_status conv_forward(const unet_block *u, const float *x, float *y, scratch *s)
{
    const conv_shape c = conv_of(u);
    if (u->role != UNET_UP) return conv_fwd(u, &u->conv1, y, x, &c);
    float *xu = scratch_take(s, c.batch * c.in * c.h * c.w, MEM_WORKSPACE, "unet.upsampled");
    if (s->status) return s->status;
    upsample_nearest_forward(xu, x, c.batch * c.in, u->h, u->w, 2);
    return conv_fwd(u, &u->conv1, y, xu, &c);
}

static st_status conv_backward(const unet_block *u, const float *x, block_state *grad, scratch *s)
{
    const conv_shape c = conv_of(u);
    const int64_t B = c.batch, nx = B * u->cin * u->h * u->w;
    float *dx = scratch_take_zero(s, nx, MEM_WORKSPACE, "unet.dinput");
    float *xu = u->role == UNET_UP ? scratch_take(s, B * c.in * c.h * c.w, MEM_WORKSPACE, "unet.upsampled") : NULL;
    float *dxu = u->role == UNET_UP ? scratch_take_zero(s, B * c.in * c.h * c.w, MEM_WORKSPACE, "unet.dupsampled")
                                    : NULL;
    if (s->status) return s->status;
    if (xu) upsample_nearest_forward(xu, x, B * c.in, u->h, u->w, 2);
    st_status r = conv_bwd(u, &u->conv1, xu ? dxu : dx, grad->t[0], xu ? xu : x, &c);
    if (r) return r;
    if (xu) upsample_nearest_backward(dx, dxu, B * c.in, u->h, u->w, 2);
    copy_rows(grad->t[0], nx, dx, nx, 1, nx); /* in place of dy: the model's buffer holds the widest stream */
    return ST_OK;
}

/* ---- the block kind ---- */

/* What a forward kept. ResnetBlock2D: its arena (main) and its two GroupNorms' states. Transformer2DModel: the
 * three regions and its states; the attention side may be on the host between forward and backward. */
typedef struct unet_saved {
    host_side side; /* first: micro_prefetch's */
    float *main, *ffn;
    op_state *st;
    int n_st;
    bool packed; /* mixed_precision bf16: main, ffn and the side on the device are held in bf16 (unet_pack) */
} unet_saved;

static bool is_xf(const unet_block *u) { return u->role == UNET_ATTN; }

static int n_states(const unet_block *u)
{
    return u->role == UNET_RES ? 2 : is_xf(u) ? 1 + LAYER_STATES * (int)u->layers : 0;
}

static int64_t main_of(const unet_block *u)
{
    return u->role == UNET_RES ? res_arena(u) : is_xf(u) ? main_floats(u) : 0;
}

/* KEEP_ATTENTION (torch-ffn) keeps a Transformer2DModel's all but its feed-forward's tensors, and every other block
 * whole: only the former has a feed-forward half to make again. The tensors at side_elem (packed under bf16), the
 * ops' states float. */
static size_t unet_kept_bytes(const block *b, keep_level keep)
{
    const unet_block *u = b->self;
    if (keep == KEEP_NOTHING) return 0;
    const int64_t B = batch_of(u);
    const size_t elem = side_elem(u->m);
    if (!is_xf(u))
        return (size_t)main_of(u) * elem +
               (u->role == UNET_RES ? 2 * groupnorm_kept_bytes(B, u->m->cfg.norm_groups) : 0);
    const xf_dims d = xf_of(u);
    const attn_shape self = xf_shape(u, false), cross = xf_shape(u, true);
    const bool all = keep == KEEP_ALL;
    const int64_t floats = main_of(u) + u->layers * (side_floats(&d) + (all ? ffn_floats(&d) : 0));
    return (size_t)floats * elem + groupnorm_kept_bytes(B, u->m->cfg.norm_groups) +
           (size_t)u->layers * ((2 + all) * layernorm_kept_bytes(d.N) + attention_kept_bytes(&self) +
                                attention_kept_bytes(&cross));
}

/* Attention offload moves a Transformer2DModel's q, k, v and outputs (both attentions'), at side_elem both in host
 * memory (host_side_send copies them bf16 under bf16) and in what it frees of kept_bytes (packed there) */
static size_t unet_offloaded_bytes(const block *b)
{
    const unet_block *u = b->self;
    if (!is_xf(u)) return 0;
    const xf_dims d = xf_of(u);
    return (size_t)(u->layers * side_floats(&d)) * side_elem(u->m);
}

/* Under mixed_precision bf16, what sv keeps on the device (every value of it made bf16) to bf16 after a forward, or
 * back to float (widen) before backward reads it */
static st_status unet_pack(const unet_block *u, unet_saved *sv, bool widen)
{
    if (!u->m->cfg.bf16_activations || sv->packed != widen) return ST_OK;
    const xf_dims d = xf_of(u);
    const kept_tensor k[] = {{&sv->main, main_of(u)},
                             {&sv->ffn, is_xf(u) ? u->layers * ffn_floats(&d) : 0},
                             {&sv->side.dev, is_xf(u) ? u->layers * side_floats(&d) : 0}};
    sv->packed = !widen;
    return kept_convert(u->m->pool, k, 3, widen);
}

static void unet_release(block *b, block_saved *saved)
{
    unet_saved *sv = (unet_saved *)saved;
    if (!sv) return;
    pool *p = ((unet_block *)b->self)->m->pool;
    host_side_release(&sv->side, p);
    for (int k = 0; k < sv->n_st; k++) op_state_release(&sv->st[k]);
    pool_free(p, sv->main), pool_free(p, sv->ffn);
    free(sv->st);
    free(sv);
}

/* A Transformer2DModel's forward. Three cases beside the plain one: a first forward with off sends the attention
 * side to the host (with its states kept: attention is not run again); the recompute after it takes the side back
 * instead of running attention; torch-ffn's KEEP_ATTENTION leaves out the feed-forward's tensors. */
static st_status xf_block_forward(const unet_block *u, const float *x, float *y, keep_level keep, offload *off,
                                  unet_saved *sv, scratch *s)
{
    const xf_dims d = xf_of(u);
    const bool from_host = sv->side.on_host, to_host = off && !from_host;
    const bool kept = keep != KEEP_NOTHING, keep_ffn = keep == KEEP_ALL;
    scratch keep_s = {.pool = u->m->pool};
    scratch *ks = kept ? &keep_s : s, *ss = kept || to_host ? &keep_s : s;
    const mem_tag kt = kept ? MEM_ACTIVATIONS : MEM_WORKSPACE, st_ = kept || to_host ? MEM_ACTIVATIONS : MEM_WORKSPACE;
    xf_regions rg = {.main = scratch_take(ks, main_floats(u), kt, "unet.transformer"),
                     .ffn = keep_ffn ? scratch_take(&keep_s, u->layers * ffn_floats(&d), MEM_ACTIVATIONS, "unet.ffn")
                                     : scratch_take(s, ffn_floats(&d), MEM_WORKSPACE, "unet.ffn"),
                     .ffn_stride = keep_ffn ? ffn_floats(&d) : 0};
    st_status r = keep_s.status ? keep_s.status : s->status;
    if (!r && from_host) r = host_side_back(&sv->side);
    rg.side = from_host ? sv->side.dev : scratch_take(ss, u->layers * side_floats(&d), st_, "unet.attention side");
    if (!r) r = keep_s.status ? keep_s.status : s->status;
    if (!r) r = xf_forward(u, x, y, &rg, sv->st, kept, keep_ffn, kept || to_host, from_host, s);
    if (!r && to_host) {
        r = host_side_send(&sv->side, off, ss, rg.side, (size_t)(u->layers * side_floats(&d)) * sizeof(float),
                           u->m->cfg.bf16_activations, "unet.attention side (host)");
        rg.side = NULL;
    }
    if (r) {
        if (sv->side.off) host_tensor_release(sv->side.off, &sv->side.h);
        scratch_end(&keep_s);
        return r;
    }
    for (int k = 0; k < keep_s.n; k++) scratch_forget(&keep_s, keep_s.ptr[k]);
    sv->main = kept ? rg.main : NULL, sv->ffn = keep_ffn ? rg.ffn : NULL;
    if (!from_host) sv->side.dev = kept ? rg.side : NULL;
    return ST_OK;
}

static st_status unet_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                              block_saved **saved_io)
{
    unet_block *u = b->self;
    b->forward_runs++;
    if (!is_xf(u)) off = NULL; /* nothing of theirs moves */
    unet_saved *sv = saved_io && *saved_io ? (unet_saved *)*saved_io : calloc(1, sizeof *sv);
    if (sv && !sv->st && n_states(u)) sv->st = calloc((size_t)n_states(u), sizeof *sv->st), sv->n_st = n_states(u);
    if (!sv || (n_states(u) && !sv->st)) {
        if (sv && !(saved_io && *saved_io)) free(sv);
        return st_host_oom("a U-Net block's saved tensors");
    }
    scratch s = {.pool = u->m->pool};
    float *y = scratch_take(&s, batch_of(u) * u->io.out_numel, MEM_ACTIVATIONS, "unet.output");
    st_status r = s.status ? s.status : unet_pack(u, sv, true); /* a recompute after an offloading forward */
    if (!r && is_xf(u)) r = xf_block_forward(u, in->t[0], y, keep, off, sv, &s);
    else if (!r && u->role == UNET_RES) {
        const bool kept = keep != KEEP_NOTHING;
        float *arena = scratch_take(&s, res_arena(u), kept ? MEM_ACTIVATIONS : MEM_WORKSPACE,
                                    kept ? "unet.resnet" : "unet.resnet (transient)");
        r = s.status ? s.status : res_forward(u, in, y, arena, kept ? sv->st : NULL, &s);
        if (!r && kept) scratch_forget(&s, arena), sv->main = arena;
    } else if (!r)
        r = conv_forward(u, in->t[0], y, &s);
    if (!r) scratch_forget(&s, y);
    scratch_end(&s); /* the workspace; everything on failure */
    if (!r && (r = unet_pack(u, sv, false))) pool_free(u->m->pool, y);
    /* with KEEP_NOTHING and no side on the host, nothing was kept: no states were taken either */
    return micro_forward_end(b, r, (block_saved *)sv, keep == KEEP_NOTHING && !sv->side.on_host, saved_io, &u->io,
                             in, y, out);
}

static st_status unet_backward(block *b, const block_state *in, block_saved *saved, block_state *grad)
{
    unet_block *u = b->self;
    unet_saved *sv = (unet_saved *)saved;
    micro_skip_grad_join(&u->io, batch_of(u), u->m->pool, grad);
    if (main_of(u) && !sv) return st_fail(ST_ERR_INTERNAL, "U-Net block %d: backward without its forward's", b->index);
    scratch s = {.pool = u->m->pool};
    st_status r = sv ? unet_pack(u, sv, true) : ST_OK; /* before the side comes back from the host in float */
    if (r) return r;
    if (is_xf(u)) {
        const xf_dims d = xf_of(u);
        xf_regions rg = {.main = sv->main, .ffn = sv->ffn, .ffn_stride = sv->ffn ? ffn_floats(&d) : 0};
        if (!sv->ffn) rg.ffn = scratch_take(&s, ffn_floats(&d), MEM_WORKSPACE, "unet.ffn (again)");
        r = s.status ? s.status : host_side_back(&sv->side);
        rg.side = sv->side.dev;
        if (!r) r = xf_backward(u, in->t[0], &rg, sv->st, grad->t[0], &s);
    } else if (u->role == UNET_RES)
        r = res_backward(u, in, sv->main, sv->st, grad, &s);
    else
        r = conv_backward(u, in->t[0], grad, &s);
    const st_status e = scratch_end(&s);
    return r ? r : e;
}

static void unet_states(const block *b, state_map *out)
{
    const unet_block *u = b->self;
    micro_skip_states(&u->io, batch_of(u), out);
}

const block_kind unet_block_kind = {
    .name = "unet", .ffn_split = true, .softmax_attention = true, .kept_bytes = unet_kept_bytes,
    .offload_host_bytes = unet_offloaded_bytes, .offload_device_bytes = unet_offloaded_bytes, /* float both */
    .forward = unet_forward, .prefetch = micro_prefetch,
    .backward = unet_backward, .release = unet_release, .states = unet_states,
};
