/* Wan Animate's inputs besides the noisy latents and the text (WanAnimateTransformer3DModel; xdit.c runs the
 * rest), in diffusers' names:
 *
 * - condition_embedder.image_embedder: the reference image's CLIP tokens through LayerNorm, a GELU feed-forward and
 *   LayerNorm (Wan's image-to-video path); every block's attn2 attends to them through its added keys and values.
 * - pose_patch_embedding: the pose latents (the frames after the reference one) in Wan's patches, added to those
 *   frames' tokens.
 * - motion_encoder: each face frame (3 x size x size pixels) through StyleGAN's convolutions (weights scaled by
 *   1 / sqrt(fan-in), FIR blur before the strided ones, fused bias and leaky ReLU), a 4 x 4 convolution to a style
 *   vector and five linears to motion_dim coefficients of an orthonormal basis: Q of the QR of
 *   motion_synthesis_weight.
 * - face_encoder: the frames' motion vectors through three causal convolutions over time (the first frame repeated
 *   as padding; the last two halve the frames), each followed by LayerNorm and SiLU, out_proj, and its learned
 *   padding token; a zero frame first. The face adapters (xdit_block.c) read this after their shared,
 *   weightless pre_norm_kv.
 *
 * Memory: the motion encoder holds one face frame's activations at a time. Backward runs it again frame by frame
 * (its gradient needs the face encoder's, which needs every frame's motion vector), as a checkpointed segment of
 * its own: the same kernels on the same inputs, so the same bits. What forward keeps is small: the motion vectors,
 * the style vectors and the linears' inputs, the face encoder's output. */
#include "models/xattn/xdit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE_LN_EPS 1e-5f /* FP32LayerNorm's default, image_embedder's norms */
#define MOTION_SLOPE 0.2f
#define MOTION_LINEARS 5 /* WanAnimateMotionEncoder's motion_blocks */
#define MOTION_LAYERS (2 + 3 * 9) /* conv_in, three convolutions per resolution halved (at most 9), conv_out */
#define FACE_STAGES 3
#define FACE_PAD 2       /* the causal convolutions' replicated frames: kernel 3 - 1 */
#define BLUR_TAPS 4      /* StyleGAN's (1, 3, 3, 1) */
#define SQRT2 1.41421356237309505f /* 2 ** 0.5 and math.sqrt(2), as torch rounds them to float */

/* One of MotionConv2d's layers: an optional blur, the convolution by weight * scale (no bias of its own: the
 * activation's, or none), an optional fused bias and leaky ReLU */
typedef struct mconv {
    int w, b;                      /* weight; the activation's bias (< 0: no activation) */
    int64_t cin, cout, k, stride, pad, edge; /* edge: the input's */
    int64_t blur_h, blur_w;        /* the blur's padding, < 0: no blur */
    float scale;
} mconv;

/* A layer's activations for one frame: the blurred input, the convolution's output, the activation's */
typedef struct mconv_acts {
    float *xb, *c, *y;
} mconv_acts;

struct wan_animate {
    int64_t B;
    int pose_w, pose_b;
    int n1w, n1b, n2w, n2b;
    lin_layer ff0, ff2; /* image_embedder */
    mconv conv[MOTION_LAYERS];
    int n_conv, n_res;
    int lw[MOTION_LINEARS], lb[MOTION_LINEARS];
    int synth;
    int cw[FACE_STAGES], cb[FACE_STAGES];
    lin_layer fproj;
    int pad_tokens;
    float blur[BLUR_TAPS * BLUR_TAPS];
    /* a step's */
    float *pose_patches, *img_in, *img_ln, *img_h, *img_g, *img_f;
    op_state img_s1, img_s2;
    float *lin_in[MOTION_LINEARS + 1]; /* the motion network's inputs (B S rows): the style vectors first, then
                                          its output, the coefficients */
    float *q, *motion, *face_raw;     /* Q (motion_out, motion_dim), the motion vectors (B S, motion_out), the face
                                         encoder's output with its zero frame (B, F, heads + 1, D) */
    op_state face_stats;
};

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static int64_t face_frames(const model_config *c) { return 4 * c->frames - 7; }

/* conv_in, then per resolution halved conv1, conv2 and conv_skip, then conv_out */
static void register_motion(param_set *s, wan_animate *a, const model_config *c, bool full)
{
    char n[PARAM_NAME_MAX], nb[PARAM_NAME_MAX];
    int64_t edge = c->face_size, log = 0;
    while ((int64_t)1 << (log + 1) <= edge) log++;
    const int64_t *ch = c->motion_channels; /* by log2 edge - 2 */
    int64_t cin = ch[log - 2];
    a->n_conv = 0;
    a->conv[a->n_conv++] = (mconv){.w = param_add(s, "motion_encoder.conv_in.weight", 4, (int64_t[]){cin, 3, 1, 1}, full),
                                   .b = param_add(s, "motion_encoder.conv_in.act_fn.bias", 1, (int64_t[]){cin}, full),
                                   .cin = 3, .cout = cin, .k = 1, .stride = 1, .edge = edge, .blur_h = -1, .blur_w = -1};
    a->n_res = 0;
    for (int64_t l = log; l > 2; l--, a->n_res++, edge /= 2) {
        const int64_t cout = ch[l - 3];
        const char *names[3] = {"conv1", "conv2", "conv_skip"};
        const int64_t outs[3] = {cin, cout, cout}, ks[3] = {3, 3, 1}, strides[3] = {1, 2, 2};
        for (int j = 0; j < 3; j++) {
            snprintf(n, sizeof n, "motion_encoder.res_blocks.%d.%s.weight", a->n_res, names[j]);
            snprintf(nb, sizeof nb, "motion_encoder.res_blocks.%d.%s.act_fn.bias", a->n_res, names[j]);
            const int64_t p = j ? (BLUR_TAPS - 2) + (ks[j] - 1) : 0; /* MotionConv2d's blur padding */
            a->conv[a->n_conv++] =
                (mconv){.w = param_add(s, n, 4, (int64_t[]){outs[j], cin, ks[j], ks[j]}, full),
                        .b = j < 2 ? param_add(s, nb, 1, (int64_t[]){outs[j]}, full) : -1, .cin = cin,
                        .cout = outs[j], .k = ks[j], .stride = strides[j], .pad = j ? 0 : 1, .edge = edge,
                        .blur_h = j ? (p + 1) / 2 : -1, .blur_w = j ? p / 2 : -1}; /* conv1 keeps the edge */
        }
        cin = cout;
    }
    a->conv[a->n_conv++] = (mconv){.w = param_add(s, "motion_encoder.conv_out.weight", 4,
                                                  (int64_t[]){c->motion_style, cin, 4, 4}, full),
                                   .b = -1, .cin = cin, .cout = c->motion_style, .k = 4, .stride = 1, .edge = edge,
                                   .blur_h = -1, .blur_w = -1};
    for (int i = 0; i < a->n_conv; i++) a->conv[i].scale = (float)(1.0 / sqrt((double)(a->conv[i].cin * a->conv[i].k *
                                                                                          a->conv[i].k)));
    for (int k = 0; k < MOTION_LINEARS; k++) {
        const int64_t out = k + 1 < MOTION_LINEARS ? c->motion_style : c->motion_dim;
        snprintf(n, sizeof n, "motion_encoder.motion_network.%d.weight", k);
        snprintf(nb, sizeof nb, "motion_encoder.motion_network.%d.bias", k);
        a->lw[k] = param_add(s, n, 2, (int64_t[]){out, c->motion_style}, full);
        a->lb[k] = param_add(s, nb, 1, (int64_t[]){out}, full);
    }
    a->synth = param_add(s, "motion_encoder.motion_synthesis_weight", 2, (int64_t[]){c->motion_out, c->motion_dim},
                         full);
}

st_status wan_animate_create(param_set *s, const model_config *c, wan_animate **out)
{
    wan_animate *a = calloc(1, sizeof *a);
    *out = a;
    if (!a) return st_host_oom("Wan Animate's encoders");
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, H = c->face_heads, hid = c->face_hidden;
    a->pose_w = param_add(s, "pose_patch_embedding.weight", 5, (int64_t[]){D, c->channels, c->patch_t, c->patch, c->patch},
                          full);
    a->pose_b = param_add(s, "pose_patch_embedding.bias", 1, (int64_t[]){D}, full);
    const char *ie = "condition_embedder.image_embedder";
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", ie, suffix), n)
    a->n1w = param_add(s, NAME("norm1.weight"), 1, (int64_t[]){c->image_dim}, full);
    a->n1b = param_add(s, NAME("norm1.bias"), 1, (int64_t[]){c->image_dim}, full);
    a->ff0 = lin_register(s, NAME("ff.net.0.proj"), c->image_dim, c->image_dim, true, 0, 0, full);
    a->ff2 = lin_register(s, NAME("ff.net.2"), c->image_dim, D, true, 0, 0, full);
    a->n2w = param_add(s, NAME("norm2.weight"), 1, (int64_t[]){D}, full);
    a->n2b = param_add(s, NAME("norm2.bias"), 1, (int64_t[]){D}, full);
#undef NAME
    register_motion(s, a, c, full);
    const char *cn[FACE_STAGES] = {"conv1_local", "conv2", "conv3"};
    for (int k = 0; k < FACE_STAGES; k++) {
        snprintf(n, sizeof n, "face_encoder.%s.weight", cn[k]);
        a->cw[k] = param_add(s, n, 3, (int64_t[]){k ? hid : hid * H, k ? hid : c->motion_out, 3}, full);
        snprintf(n, sizeof n, "face_encoder.%s.bias", cn[k]);
        a->cb[k] = param_add(s, n, 1, (int64_t[]){k ? hid : hid * H}, full);
    }
    a->fproj = lin_register(s, "face_encoder.out_proj", hid, D, true, 0, 0, full);
    a->pad_tokens = param_add(s, "face_encoder.padding_tokens", 4, (int64_t[]){1, 1, 1, D}, full);
    const float taps[BLUR_TAPS] = {1, 3, 3, 1}; /* the outer product over its sum: exact in float */
    for (int i = 0; i < BLUR_TAPS; i++)
        for (int j = 0; j < BLUR_TAPS; j++) a->blur[i * BLUR_TAPS + j] = taps[i] * taps[j] / 64.0f;
    return ST_OK;
}

void wan_animate_destroy(wan_animate *a) { free(a); }

/* ---- the motion encoder ---- */

static int64_t blurred_edge(const mconv *l) { return l->blur_h < 0 ? l->edge : l->edge + l->blur_h * 2 - BLUR_TAPS + 1; }

static conv_shape mconv_shape(const mconv *l)
{
    const int64_t e = blurred_edge(l), ew = l->blur_w < 0 ? l->edge : l->edge + l->blur_w * 2 - BLUR_TAPS + 1;
    return (conv_shape){.batch = 1, .in = l->cin, .h = e, .w = ew, .out = l->cout, .kh = l->k, .kw = l->k,
                        .sh = l->stride, .sw = l->stride, .ph = l->pad, .pw = l->pad};
}

static int64_t mconv_out_numel(const mconv *l)
{
    const conv_shape s = mconv_shape(l);
    return l->cout * conv_out_h(&s) * conv_out_w(&s);
}

/* weight * scale, as torch rounds it, into a workspace buffer */
static float *scaled_weight(model *m, scratch *s, const mconv *l)
{
    const int64_t n = l->cout * l->cin * l->k * l->k;
    float *w = scratch_take(s, n, MEM_WORKSPACE, "motion_encoder.scaled_weight");
    if (w) copy_rows(w, n, PW(l->w), n, 1, n), scale_by(w, n, l->scale);
    return w;
}

static st_status mconv_forward(model *m, wan_animate *a, const mconv *l, const float *x, mconv_acts *t, scratch *s)
{
    const conv_shape cs = mconv_shape(l);
    if (l->blur_h >= 0) {
        t->xb = scratch_take(s, l->cin * cs.h * cs.w, MEM_WORKSPACE, "motion_encoder.blurred");
        if (t->xb) fir_forward(t->xb, x, a->blur, BLUR_TAPS, l->cin, l->edge, l->edge, l->blur_h, l->blur_w);
    }
    t->c = scratch_take(s, mconv_out_numel(l), MEM_WORKSPACE, "motion_encoder.conv");
    t->y = l->b >= 0 ? scratch_take(s, mconv_out_numel(l), MEM_WORKSPACE, "motion_encoder.activation") : t->c;
    scratch w = {.pool = m->pool};
    float *ws = scaled_weight(m, &w, l);
    st_status st = s->status ? s->status : w.status;
    if (!st) st = conv2d_forward(m->pool, t->c, l->blur_h >= 0 ? t->xb : x, ws, NULL, &cs);
    scratch_end(&w);
    if (!st && l->b >= 0)
        bias_leaky_relu_forward(t->y, t->c, PW(l->b), MOTION_SLOPE, SQRT2, 1, l->cout, mconv_out_numel(l) / l->cout);
    return st;
}

/* dx += the layer's input gradient from dy (which it overwrites), weight * scale's gradient times scale into the
 * weight's */
static st_status mconv_backward(model *m, wan_animate *a, const mconv *l, const float *x, const mconv_acts *t,
                                float *dy, float *dx)
{
    const conv_shape cs = mconv_shape(l);
    const int64_t nw = l->cout * l->cin * l->k * l->k, no = mconv_out_numel(l);
    scratch s = {.pool = m->pool};
    float *dc = dy;
    if (l->b >= 0) {
        dc = scratch_take_zero(&s, no, MEM_WORKSPACE, "motion_encoder.dconv");
        if (dc) bias_leaky_relu_backward(dc, PG(l->b), dy, t->c, PW(l->b), MOTION_SLOPE, SQRT2, 1, l->cout,
                                         no / l->cout);
    }
    float *ws = scaled_weight(m, &s, l), *dw = scratch_take_zero(&s, nw, MEM_WORKSPACE, "motion_encoder.dweight");
    float *dxb = l->blur_h >= 0 ? scratch_take_zero(&s, l->cin * cs.h * cs.w, MEM_WORKSPACE, "motion_encoder.dblurred")
                                : dx;
    if (s.status) return scratch_end(&s);
    s.status = conv2d_backward(m->pool, dxb, dw, NULL, dc, l->blur_h >= 0 ? t->xb : x, ws, &cs);
    if (!s.status && l->blur_h >= 0) fir_backward(dx, dxb, a->blur, BLUR_TAPS, l->cin, l->edge, l->edge, l->blur_h,
                                                  l->blur_w);
    if (!s.status) add_scaled(PG(l->w), dw, l->scale, nw);
    return scratch_end(&s);
}

/* One face frame's planes (3, size, size) of the sample's pixels (3, S, size, size) */
static void gather_frame(float *dst, const float *pixels, int64_t S, int64_t frame, int64_t plane)
{
    copy_rows(dst, plane, pixels + frame * plane, S * plane, 3, plane);
}

/* out = (a + b) / sqrt 2, the residual blocks' sum, as torch divides */
static void res_sum(float *out, const float *a, const float *b, int64_t n)
{
    copy_rows(out, n, a, n, 1, n), add_to(out, b, n), div_by(out, n, SQRT2);
}

/* One frame's convolutions to its style vector, its activations in acts (workspace of s). Layer i's input: the
 * frame (i = 0), the previous block's sum, or conv1's activation (conv2) */
static st_status motion_convs(model *m, wan_animate *a, const float *frame, mconv_acts *acts, float **sums, scratch *s,
                              float *style)
{
    const float *in = frame;
    st_status st = mconv_forward(m, a, &a->conv[0], in, &acts[0], s);
    in = acts[0].y;
    for (int r = 0; !st && r < a->n_res; r++) {
        const mconv *l = &a->conv[1 + 3 * r];
        mconv_acts *t = &acts[1 + 3 * r];
        st = mconv_forward(m, a, &l[0], in, &t[0], s);
        if (!st) st = mconv_forward(m, a, &l[1], t[0].y, &t[1], s);
        if (!st) st = mconv_forward(m, a, &l[2], in, &t[2], s);
        if (st) break;
        sums[r] = scratch_take(s, mconv_out_numel(&l[1]), MEM_WORKSPACE, "motion_encoder.block_out");
        if ((st = s->status)) break;
        res_sum(sums[r], t[1].y, t[2].y, mconv_out_numel(&l[1]));
        in = sums[r];
    }
    const mconv *last = &a->conv[a->n_conv - 1];
    if (!st) st = mconv_forward(m, a, last, in, &acts[a->n_conv - 1], s);
    if (!st && style) copy_rows(style, last->cout, acts[a->n_conv - 1].y, last->cout, 1, last->cout);
    return st;
}

/* A frame's convolutions back from dstyle (recomputed first): the weights' gradients */
static st_status motion_convs_backward(model *m, wan_animate *a, const float *frame, const float *dstyle)
{
    scratch s = {.pool = m->pool};
    mconv_acts acts[MOTION_LAYERS] = {0};
    float *sums[MOTION_LAYERS] = {0};
    const mconv *last = &a->conv[a->n_conv - 1];
    st_status st = motion_convs(m, a, frame, acts, sums, &s, NULL);
    float *g = st ? NULL : scratch_take(&s, last->cout, MEM_WORKSPACE, "motion_encoder.dstyle");
    if (!st && !(st = s.status)) copy_rows(g, last->cout, dstyle, last->cout, 1, last->cout);
    /* g: the gradient of the current layer's output; din: of its input */
    const float *in_last = a->n_res ? sums[a->n_res - 1] : acts[0].y;
    float *din = st ? NULL : scratch_take_zero(&s, last->cin * last->edge * last->edge, MEM_WORKSPACE, "motion.din");
    if (!st && !(st = s.status)) st = mconv_backward(m, a, last, in_last, &acts[a->n_conv - 1], g, din);
    for (int r = a->n_res - 1; !st && r >= 0; r--) {
        const mconv *l = &a->conv[1 + 3 * r];
        const mconv_acts *t = &acts[1 + 3 * r];
        const float *in = r ? sums[r - 1] : acts[0].y;
        const int64_t no = mconv_out_numel(&l[1]);
        float *dsum = din; /* the block's output gradient, divided by sqrt 2 for both branches */
        div_by(dsum, no, SQRT2);
        float *dskip = scratch_take(&s, no, MEM_WORKSPACE, "motion_encoder.dskip");
        float *da1 = scratch_take_zero(&s, l[0].cout * l[0].edge * l[0].edge, MEM_WORKSPACE, "motion.da1");
        float *dx = scratch_take_zero(&s, l[0].cin * l[0].edge * l[0].edge, MEM_WORKSPACE, "motion.din");
        if ((st = s.status)) break;
        copy_rows(dskip, no, dsum, no, 1, no);
        st = mconv_backward(m, a, &l[1], t[0].y, &t[1], dsum, da1);
        if (!st) st = mconv_backward(m, a, &l[0], in, &t[0], da1, dx);
        if (!st) st = mconv_backward(m, a, &l[2], in, &t[2], dskip, dx);
        scratch_drop(&s, dskip), scratch_drop(&s, da1), scratch_drop(&s, din);
        din = dx;
    }
    if (!st) st = mconv_backward(m, a, &a->conv[0], frame, &acts[0], din, NULL); /* the pixels' gradient: unread */
    const st_status end = scratch_end(&s);
    return st ? st : end;
}

/* ---- the face encoder ---- */

/* A stage's padded input (batch, in, t + 2), convolution output read as (B heads, hidden, t'), LayerNorm input
 * (B heads, t', hidden) and output, and SiLU's output */
typedef struct face_acts {
    float *p[FACE_STAGES], *tr[FACE_STAGES], *ln[FACE_STAGES], *act[FACE_STAGES], *out;
    op_state stats[FACE_STAGES];
    int64_t t[FACE_STAGES + 1];
} face_acts;

static conv_shape face_conv(const model_config *c, int k, int64_t B, int64_t t)
{
    const int64_t hid = c->face_hidden, H = c->face_heads;
    return (conv_shape){.batch = k ? B * H : B, .in = k ? hid : c->motion_out, .h = 1, .w = t + FACE_PAD,
                        .out = k ? hid : hid * H, .kh = 1, .kw = 3, .sh = 1, .sw = k ? 2 : 1};
}

/* motion (B, S, motion_out) to out (B heads S3, D), the activations into f (workspace of s) */
static st_status face_encode(model *m, wan_animate *a, const float *motion, face_acts *f, scratch *s)
{
    const model_config *c = &m->cfg;
    const int64_t B = a->B, H = c->face_heads, hid = c->face_hidden, D = c->hidden;
    f->t[0] = face_frames(c);
    float *x = scratch_take(s, B * c->motion_out * f->t[0], MEM_WORKSPACE, "face_encoder.input");
    if (s->status) return s->status;
    transpose_batched(x, motion, B, f->t[0], c->motion_out);
    st_status st = ST_OK;
    for (int k = 0; k < FACE_STAGES && !st; k++) {
        const conv_shape cs = face_conv(c, k, B, f->t[k]);
        const int64_t rows = cs.batch * cs.in;
        f->t[k + 1] = conv_out_w(&cs);
        const int64_t n = B * H * f->t[k + 1] * hid;
        f->p[k] = scratch_take(s, rows * (f->t[k] + FACE_PAD), MEM_WORKSPACE, "face_encoder.padded");
        float *conv = scratch_take(s, n, MEM_WORKSPACE, "face_encoder.conv");
        f->tr[k] = scratch_take(s, n, MEM_WORKSPACE, "face_encoder.ln_in");
        f->ln[k] = scratch_take(s, n, MEM_WORKSPACE, "face_encoder.ln");
        f->act[k] = scratch_take(s, n, MEM_WORKSPACE, "face_encoder.silu");
        if ((st = s->status)) break;
        pad_replicate_forward(f->p[k], x, rows, f->t[k], FACE_PAD);
        scratch_drop(s, x);
        if ((st = conv2d_forward(m->pool, conv, f->p[k], PW(a->cw[k]), PW(a->cb[k]), &cs))) break;
        transpose_batched(f->tr[k], conv, B * H, hid, f->t[k + 1]);
        scratch_drop(s, conv);
        st = layernorm_forward(m->pool, f->ln[k], f->tr[k], NULL, NULL, B * H * f->t[k + 1], hid, XDIT_LN_EPS,
                               &f->stats[k]);
        if (st) break;
        silu_forward(f->act[k], f->ln[k], n);
        if (k + 1 < FACE_STAGES) {
            x = scratch_take(s, n, MEM_WORKSPACE, "face_encoder.input");
            if ((st = s->status)) break;
            transpose_batched(x, f->act[k], B * H, f->t[k + 1], hid);
        }
    }
    if (!st) f->out = scratch_take(s, B * H * f->t[FACE_STAGES] * D, MEM_WORKSPACE, "face_encoder.out");
    if (!st && !(st = s->status)) st = lin_forward(m->params, m->pool, &a->fproj, f->out, f->act[FACE_STAGES - 1],
                                                   B * H * f->t[FACE_STAGES]);
    return st;
}

static void face_acts_release(face_acts *f)
{
    for (int k = 0; k < FACE_STAGES; k++) op_state_release(&f->stats[k]);
}

/* dmotion (B S, motion_out) += from dout (B heads S3, D) */
static st_status face_encode_backward(model *m, wan_animate *a, face_acts *f, const float *dout, float *dmotion)
{
    const model_config *c = &m->cfg;
    const int64_t B = a->B, H = c->face_heads, hid = c->face_hidden;
    scratch s = {.pool = m->pool};
    float *g = scratch_take_zero(&s, B * H * f->t[FACE_STAGES] * hid, MEM_WORKSPACE, "face_encoder.dact");
    if (s.status || (s.status = lin_backward(m->params, m->pool, &a->fproj, g, dout, f->act[FACE_STAGES - 1],
                                             B * H * f->t[FACE_STAGES])))
        return scratch_end(&s);
    for (int k = FACE_STAGES - 1; k >= 0 && !s.status; k--) { /* g: dL/d(stage k's SiLU output) */
        const conv_shape cs = face_conv(c, k, B, f->t[k]);
        const int64_t n = B * H * f->t[k + 1] * hid, rows = cs.batch * cs.in;
        float *dln = scratch_take_zero(&s, n, MEM_WORKSPACE, "face_encoder.dln");
        float *dtr = scratch_take_zero(&s, n, MEM_WORKSPACE, "face_encoder.dln_in");
        float *dconv = scratch_take(&s, n, MEM_WORKSPACE, "face_encoder.dconv");
        float *dp = scratch_take_zero(&s, rows * (f->t[k] + FACE_PAD), MEM_WORKSPACE, "face_encoder.dpadded");
        float *dx = scratch_take_zero(&s, rows * f->t[k], MEM_WORKSPACE, "face_encoder.dinput");
        if (s.status) break;
        silu_backward(dln, g, f->ln[k], n);
        layernorm_backward(dtr, NULL, NULL, dln, f->tr[k], NULL, B * H * f->t[k + 1], hid, &f->stats[k]);
        transpose_batched(dconv, dtr, B * H, f->t[k + 1], hid);
        if ((s.status = conv2d_backward(m->pool, dp, PG(a->cw[k]), PG(a->cb[k]), dconv, f->p[k], PW(a->cw[k]), &cs)))
            break;
        pad_replicate_backward(dx, dp, rows, f->t[k], FACE_PAD);
        scratch_drop(&s, g), scratch_drop(&s, dln), scratch_drop(&s, dtr), scratch_drop(&s, dconv);
        scratch_drop(&s, dp);
        if (k) { /* the previous stage's SiLU output was this one's input, transposed */
            g = scratch_take(&s, n / f->t[k + 1] * f->t[k], MEM_WORKSPACE, "face_encoder.dact");
            if (!s.status) transpose_batched(g, dx, B * H, hid, f->t[k]);
        } else transpose_batched_backward(dmotion, dx, B, f->t[0], c->motion_out);
        scratch_drop(&s, dx);
    }
    return scratch_end(&s);
}

/* ---- the step ---- */

/* The inputs after a sample's text in its conditioning (model_cond_len): the image tokens, the condition latents,
 * the pose latents, the face pixels */
static int64_t image_at(const model_config *c) { return c->text_len * c->text_dim; }
static int64_t pose_at(const model_config *c)
{
    return image_at(c) + c->image_tokens * c->image_dim + c->cond_channels * c->frames * c->height * c->width;
}
static int64_t face_at(const model_config *c)
{
    return pose_at(c) + c->channels * (c->frames - 1) * c->height * c->width;
}

static st_status image_forward(model *m, wan_animate *a, const float *cond, bool train, xdit_inputs *in)
{
    const model_config *c = &m->cfg;
    const int64_t n = a->B * c->image_tokens, Di = c->image_dim, D = c->hidden, K = model_cond_len(c);
    st_status st = ST_OK;
    a->img_in = model_take(m, &st, n * Di, "wan_animate.image_in", false);
    a->img_ln = model_take(m, &st, n * Di, "wan_animate.image_ln", false);
    a->img_h = model_take(m, &st, n * Di, "wan_animate.image_ff", false);
    a->img_g = model_take(m, &st, n * Di, "wan_animate.image_gelu", false);
    a->img_f = model_take(m, &st, n * D, "wan_animate.image_ff_out", false);
    in->image = model_take(m, &st, n * D, "wan_animate.image", false);
    if (train) in->dimage = model_take(m, &st, n * D, "wan_animate.dimage", true);
    if (st) return st;
    copy_rows(a->img_in, c->image_tokens * Di, cond + image_at(c), K, a->B, c->image_tokens * Di);
    st = layernorm_forward(m->pool, a->img_ln, a->img_in, PW(a->n1w), PW(a->n1b), n, Di, IMAGE_LN_EPS, &a->img_s1);
    if (!st) st = lin_forward(m->params, m->pool, &a->ff0, a->img_h, a->img_ln, n);
    if (!st) {
        gelu_erf_forward(a->img_g, a->img_h, n * Di);
        st = lin_forward(m->params, m->pool, &a->ff2, a->img_f, a->img_g, n);
    }
    if (!st) st = layernorm_forward(m->pool, in->image, a->img_f, PW(a->n2w), PW(a->n2b), n, D, IMAGE_LN_EPS, &a->img_s2);
    return st;
}

static st_status image_backward(model *m, wan_animate *a, const xdit_inputs *in)
{
    const model_config *c = &m->cfg;
    const int64_t n = a->B * c->image_tokens, Di = c->image_dim, D = c->hidden;
    scratch s = {.pool = m->pool};
    float *df = scratch_take_zero(&s, n * D, MEM_WORKSPACE, "wan_animate.dimage_ff_out");
    float *dg = scratch_take_zero(&s, n * Di, MEM_WORKSPACE, "wan_animate.dimage_gelu");
    float *dh = scratch_take_zero(&s, n * Di, MEM_WORKSPACE, "wan_animate.dimage_ff");
    float *dln = scratch_take_zero(&s, n * Di, MEM_WORKSPACE, "wan_animate.dimage_ln");
    if (s.status) return scratch_end(&s);
    layernorm_backward(df, PG(a->n2w), PG(a->n2b), in->dimage, a->img_f, PW(a->n2w), n, D, &a->img_s2);
    if (!(s.status = lin_backward(m->params, m->pool, &a->ff2, dg, df, a->img_g, n))) {
        gelu_erf_backward(dh, dg, a->img_h, n * Di);
        s.status = lin_backward(m->params, m->pool, &a->ff0, dln, dh, a->img_ln, n);
    }
    if (!s.status) layernorm_backward(NULL, PG(a->n1w), PG(a->n1b), dln, a->img_in, PW(a->n1w), n, Di, &a->img_s1);
    return scratch_end(&s);
}

/* x0's tokens of frames 1.. += pose_patch_embedding(the pose latents) */
static st_status pose_forward(model *m, wan_animate *a, const float *cond, float *x0)
{
    const model_config *c = &m->cfg;
    const int64_t B = a->B, T = m->shape.tokens, D = c->hidden, K = model_cond_len(c);
    const int64_t Fp = c->frames - 1, plane = c->height * c->width, P = model_patch_dim(c);
    const int64_t per = T / (c->frames / c->patch_t), Tp = T - per; /* tokens per latent frame; the pose's */
    const patch_shape ps = {B, c->channels, Fp, c->height, c->width, c->patch_t, c->patch, 0};
    st_status st = ST_OK;
    a->pose_patches = model_take(m, &st, B * Tp * P, "wan_animate.pose_patches", false);
    float *pose = NULL, *emb = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(B * c->channels * Fp * plane) * sizeof(float), MEM_WORKSPACE,
                             "wan_animate.pose", (void **)&pose);
    if (!st) copy_rows(pose, c->channels * Fp * plane, cond + pose_at(c), K, B, c->channels * Fp * plane);
    if (!st) patchify_forward(a->pose_patches, pose, &ps);
    pool_free(m->pool, pose);
    if (!st) st = pool_alloc(m->pool, (size_t)(B * Tp * D) * sizeof(float), MEM_WORKSPACE, "wan_animate.pose_embedding",
                             (void **)&emb);
    if (!st) {
        linear_forward(emb, a->pose_patches, PW(a->pose_w), PW(a->pose_b), B * Tp, P, D);
        for (int64_t b = 0; b < B; b++) add_to(x0 + (b * T + per) * D, emb + b * Tp * D, Tp * D);
    }
    pool_free(m->pool, emb);
    return st;
}

/* The motion vectors (kept) of every face frame, and the face encoder's output with its padding tokens and zero
 * frame (kept) */
static st_status face_forward(model *m, wan_animate *a, const float *cond, bool train, xdit_inputs *in)
{
    const model_config *c = &m->cfg;
    const int64_t B = a->B, S = face_frames(c), BS = B * S, D = c->hidden, H = c->face_heads;
    const int64_t plane = c->face_size * c->face_size, K = model_cond_len(c), F = c->frames;
    st_status st = ST_OK;
    for (int k = 0; k <= MOTION_LINEARS; k++)
        a->lin_in[k] = model_take(m, &st, BS * (k ? (k < MOTION_LINEARS ? c->motion_style : c->motion_dim)
                                                  : c->motion_style), "wan_animate.motion_network", false);
    a->q = model_take(m, &st, c->motion_out * c->motion_dim, "wan_animate.motion_basis", false);
    a->motion = model_take(m, &st, BS * c->motion_out, "wan_animate.motion", false);
    a->face_raw = model_take(m, &st, B * F * (H + 1) * D, "wan_animate.face_encoder_out", true);
    in->face = model_take(m, &st, B * F * (H + 1) * D, "wan_animate.face", false);
    if (train) in->dface = model_take(m, &st, B * F * (H + 1) * D, "wan_animate.dface", true);
    in->face_frames = F, in->face_tokens = H + 1;
    float *frame = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(3 * plane) * sizeof(float), MEM_WORKSPACE, "wan_animate.face_frame",
                             (void **)&frame);
    for (int64_t i = 0; !st && i < BS; i++) { /* one frame's activations at a time */
        scratch s = {.pool = m->pool};
        mconv_acts acts[MOTION_LAYERS] = {0};
        float *sums[MOTION_LAYERS] = {0};
        gather_frame(frame, cond + (i / S) * K + face_at(c), S, i % S, plane);
        st = motion_convs(m, a, frame, acts, sums, &s, a->lin_in[0] + i * c->motion_style);
        const st_status end = scratch_end(&s);
        st = st ? st : end;
    }
    pool_free(m->pool, frame);
    for (int k = 0; !st && k < MOTION_LINEARS; k++) { /* weight * scale, as torch rounds it */
        const int64_t out = k + 1 < MOTION_LINEARS ? c->motion_style : c->motion_dim, in_w = c->motion_style;
        float *w = NULL;
        if ((st = pool_alloc(m->pool, (size_t)(out * in_w) * sizeof(float), MEM_WORKSPACE, "wan_animate.scaled_linear",
                             (void **)&w)))
            break;
        const float scale = (float)(1.0 / sqrt((double)in_w));
        copy_rows(w, out * in_w, PW(a->lw[k]), out * in_w, 1, out * in_w), scale_by(w, out * in_w, scale);
        linear_forward(a->lin_in[k + 1], a->lin_in[k], w, PW(a->lb[k]), BS, in_w, out);
        pool_free(m->pool, w);
    }
    float *basis = NULL; /* motion_synthesis_weight + 1e-8 */
    const int64_t nq = c->motion_out * c->motion_dim;
    if (!st) st = pool_alloc(m->pool, (size_t)nq * sizeof(float), MEM_WORKSPACE, "wan_animate.basis", (void **)&basis);
    if (!st) copy_rows(basis, nq, PW(a->synth), nq, 1, nq), add_scalar(basis, nq, 1e-8f);
    if (!st) st = qr_forward(m->pool, a->q, basis, c->motion_out, c->motion_dim);
    pool_free(m->pool, basis);
    if (!st) linear_forward(a->motion, a->lin_in[MOTION_LINEARS], a->q, NULL, BS, c->motion_dim, c->motion_out);
    scratch s = {.pool = m->pool};
    face_acts f = {0};
    if (!st) st = face_encode(m, a, a->motion, &f, &s);
    const int64_t S3 = f.t[FACE_STAGES];
    if (!st && S3 + 1 != F)
        st = st_fail(ST_ERR_INTERNAL, "wan_animate: %lld face frames encode to %lld, not frames - 1 = %lld",
                     (long long)S, (long long)S3, (long long)(F - 1));
    for (int64_t b = 0; !st && b < B; b++) /* frame 0 stays zero */
        for (int64_t t = 0; t < S3; t++) {
            float *row = a->face_raw + ((b * F + t + 1) * (H + 1)) * D;
            copy_rows(row, D, f.out + (b * H * S3 + t) * D, S3 * D, H, D);
            copy_rows(row + H * D, D, PW(a->pad_tokens), D, 1, D);
        }
    face_acts_release(&f);
    const st_status end = scratch_end(&s);
    if (!st) st = end;
    if (!st) st = layernorm_forward(m->pool, in->face, a->face_raw, NULL, NULL, B * F * (H + 1), D, XDIT_LN_EPS,
                                    &a->face_stats);
    return st;
}

/* From in->dface: the face encoder's, the motion network's, the basis' and (frame by frame) the convolutions'
 * weight gradients */
static st_status face_backward(model *m, wan_animate *a, const float *cond, const xdit_inputs *in)
{
    const model_config *c = &m->cfg;
    const int64_t B = a->B, S = face_frames(c), BS = B * S, D = c->hidden, H = c->face_heads, F = c->frames;
    const int64_t plane = c->face_size * c->face_size, K = model_cond_len(c), md = c->motion_dim, mo = c->motion_out;
    scratch s = {.pool = m->pool};
    float *draw = scratch_take_zero(&s, B * F * (H + 1) * D, MEM_WORKSPACE, "wan_animate.dface_encoder_out");
    float *dmotion = scratch_take_zero(&s, BS * mo, MEM_WORKSPACE, "wan_animate.dmotion");
    if (s.status) return scratch_end(&s);
    layernorm_backward(draw, NULL, NULL, in->dface, a->face_raw, NULL, B * F * (H + 1), D, &a->face_stats);
    face_acts f = {0};
    scratch fs = {.pool = m->pool};
    st_status st = face_encode(m, a, a->motion, &f, &fs);
    const int64_t S3 = f.t[FACE_STAGES];
    float *dout = st ? NULL : scratch_take(&fs, B * H * S3 * D, MEM_WORKSPACE, "face_encoder.dout");
    if (!st) st = fs.status;
    for (int64_t b = 0; !st && b < B; b++)
        for (int64_t t = 0; t < S3; t++) {
            const float *row = draw + ((b * F + t + 1) * (H + 1)) * D;
            copy_rows(dout + (b * H * S3 + t) * D, S3 * D, row, D, H, D);
            add_to(PG(a->pad_tokens), row + H * D, D);
        }
    if (!st) st = face_encode_backward(m, a, &f, dout, dmotion);
    face_acts_release(&f);
    const st_status fend = scratch_end(&fs);
    st = st ? st : fend;
    /* motion = coefficients Q^T: the coefficients' and Q's gradients, then the basis' */
    float *dq = st ? NULL : scratch_take_zero(&s, mo * md, MEM_WORKSPACE, "wan_animate.dbasis");
    float *basis = st ? NULL : scratch_take(&s, mo * md, MEM_WORKSPACE, "wan_animate.basis");
    float *dnext = st ? NULL : scratch_take_zero(&s, BS * md, MEM_WORKSPACE, "wan_animate.dcoefficients");
    if (!st) st = s.status;
    if (!st) {
        linear_backward(dnext, dq, NULL, dmotion, a->lin_in[MOTION_LINEARS], a->q, BS, md, mo);
        copy_rows(basis, mo * md, PW(a->synth), mo * md, 1, mo * md), add_scalar(basis, mo * md, 1e-8f);
        st = qr_backward(m->pool, PG(a->synth), dq, basis, a->q, mo, md);
    }
    for (int k = MOTION_LINEARS - 1; !st && k >= 0; k--) { /* dnext: dL/d(linear k's output) */
        const int64_t out = k + 1 < MOTION_LINEARS ? c->motion_style : md, in_w = c->motion_style;
        const float scale = (float)(1.0 / sqrt((double)in_w));
        float *w = scratch_take(&s, out * in_w, MEM_WORKSPACE, "wan_animate.scaled_linear");
        float *dw = scratch_take_zero(&s, out * in_w, MEM_WORKSPACE, "wan_animate.dscaled_linear");
        float *dx = scratch_take_zero(&s, BS * in_w, MEM_WORKSPACE, "wan_animate.dmotion_network");
        if ((st = s.status)) break;
        copy_rows(w, out * in_w, PW(a->lw[k]), out * in_w, 1, out * in_w), scale_by(w, out * in_w, scale);
        linear_backward(dx, dw, PG(a->lb[k]), dnext, a->lin_in[k], w, BS, in_w, out);
        add_scaled(PG(a->lw[k]), dw, scale, out * in_w);
        scratch_drop(&s, w), scratch_drop(&s, dw), scratch_drop(&s, dnext);
        dnext = dx;
    }
    float *frame = st ? NULL : scratch_take(&s, 3 * plane, MEM_WORKSPACE, "wan_animate.face_frame");
    if (!st) st = s.status;
    for (int64_t i = 0; !st && i < BS; i++) {
        gather_frame(frame, cond + (i / S) * K + face_at(c), S, i % S, plane);
        st = motion_convs_backward(m, a, frame, dnext + i * c->motion_style);
    }
    const st_status end = scratch_end(&s);
    return st ? st : end;
}

st_status wan_animate_forward(model *m, wan_animate *a, const float *cond, float *x0, bool train, xdit_inputs *in)
{
    a->B = m->shape.batch;
    in->image_tokens = m->cfg.image_tokens;
    st_status st = image_forward(m, a, cond, train, in);
    if (!st) st = pose_forward(m, a, cond, x0);
    if (!st) st = face_forward(m, a, cond, train, in);
    return st;
}

st_status wan_animate_backward(model *m, wan_animate *a, const float *cond, const float *dx0, xdit_inputs *in)
{
    const model_config *c = &m->cfg;
    const int64_t B = a->B, T = m->shape.tokens, D = c->hidden, per = T / (c->frames / c->patch_t), Tp = T - per;
    if (!PG(a->pose_w)) return ST_OK; /* LoRA: none of these weights trains */
    st_status st = ST_OK;
    for (int64_t b = 0; b < B; b++) /* the pose tokens' gradients are those of frames 1.. */
        linear_backward(NULL, PG(a->pose_w), PG(a->pose_b), dx0 + (b * T + per) * D, a->pose_patches + b * Tp *
                        model_patch_dim(c), PW(a->pose_w), Tp, model_patch_dim(c), D);
    st = image_backward(m, a, in);
    if (!st) st = face_backward(m, a, cond, in);
    return st;
}

void wan_animate_release(model *m, wan_animate *a, xdit_inputs *in)
{
    float **bufs[] = {&a->pose_patches, &a->img_in, &a->img_ln, &a->img_h, &a->img_g, &a->img_f, &a->q, &a->motion,
                      &a->face_raw, &in->image, &in->dimage, &in->face, &in->dface};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) pool_free(m->pool, *bufs[i]), *bufs[i] = NULL;
    for (int k = 0; k <= MOTION_LINEARS; k++) pool_free(m->pool, a->lin_in[k]), a->lin_in[k] = NULL;
    op_state_release(&a->img_s1), op_state_release(&a->img_s2), op_state_release(&a->face_stats);
}
