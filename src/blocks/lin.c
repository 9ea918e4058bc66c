#include "segtrain/lin.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "segtrain/ops.h"

/* A frozen base weight under base_model_precision: quantized as quanto's quantize(model, exclude=...) leaves it,
 * unless one of the family's exclude patterns matches the module's name (fnmatch, as quanto matches them); returns
 * whether one does. */
static bool quantize_frozen(param_set *s, int w, const char *name)
{
    bool excluded = false;
    for (const char *const *e = s->quant_base ? s->quant_exclude : NULL; e && *e && !excluded; e++)
        excluded = !fnmatch(*e, name, 0);
    param_at(s, w)->quant = excluded ? QUANT_NONE : s->quant_base;
    return excluded;
}

lin_layer lin_register(param_set *s, const char *name, int64_t in, int64_t out, bool bias, int64_t rank, float alpha,
                       bool trainable)
{
    char n[PARAM_NAME_MAX];
    const lyco_settings *ly = s->lycoris ? lycoris_settings_for(s, name) : NULL;
    const bool adapted = s->lycoris ? ly != NULL : rank > 0;
    lin_layer l = {.b = -1, .lora_a = -1, .lora_b = -1, .in = in, .out = out};
    snprintf(n, sizeof n, "%s.weight", name);
    l.w = param_add(s, n, 2, (int64_t[]){out, in}, trainable && !adapted);
    if (l.w >= 0) param_at(s, l.w)->linear = true;
    if (l.w >= 0 && !(trainable && !adapted)) { /* frozen: quantized, else in bf16 under mixed_precision bf16 */
        const bool excluded = quantize_frozen(s, l.w, name); /* in bf16, as SimpleTuner's bf16 model keeps it */
        param_at(s, l.w)->bf16 = excluded || (!s->quant_base && s->bf16_base);
    }
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", name);
        l.b = param_add(s, n, 1, (int64_t[]){out}, trainable && !adapted);
    }
    if (ly && ly->algo == LYCO_LOCON) {
        l.rank = locon_register(s, name, in, out, 0, ly, &l.lora_a, &l.lora_b, &l.scale);
    } else if (ly) {
        l.lyco = lyco_register(s, name, in, out, bias, ly);
    } else if (adapted) {
        l.rank = rank;
        l.scale = alpha / (float)rank;
        snprintf(n, sizeof n, "%s.lora_A.weight", name);
        l.lora_a = param_add(s, n, 2, (int64_t[]){rank, in}, true);
        snprintf(n, sizeof n, "%s.lora_B.weight", name);
        l.lora_b = param_add(s, n, 2, (int64_t[]){out, rank}, true);
    }
    return l;
}

static float *w_of(param_set *s, int i) { return i < 0 ? NULL : param_at(s, i)->w; }
static float *g_of(param_set *s, int i) { return i < 0 ? NULL : param_at(s, i)->g; }

/* A bf16 or quantized weight widened to float into y (a quantized one as the library's dequantize gives it: rows its
 * first dimension, a conv's kernel among the columns). */
static void widen(const param *q, float *y)
{
    if (q->quant) quant_unpack(q->quant, q->shape[0], q->numel / q->shape[0], q->wq, q->wq_stats, y);
    else bf16_to_float(y, q->w16, q->numel);
}

void lin_quantize_frozen(param_set *s, int w, const char *module)
{
    if (w >= 0 && s->quant_base) quantize_frozen(s, w, module);
}

st_status lin_weight_float(param_set *s, pool *p, int w, const float **out, float **tmp)
{
    const param *q = param_at(s, w);
    *tmp = NULL;
    *out = q->w;
    if (!q->bf16 && !q->quant) return ST_OK;
    st_status st = pool_alloc(p, (size_t)q->numel * sizeof(float), MEM_WORKSPACE,
                              q->quant ? "quantized weight as float" : "bf16 weight as float", (void **)tmp);
    if (!st) widen(q, *tmp);
    *out = *tmp;
    return st;
}

/* ramtorch (params.h): a streamed layer's weight and bias are on the device only around the GEMM that reads them. */
static int streamed_group(const param_set *s, const lin_layer *l)
{
    return s->layer_in ? s->items[l->w].swap_group : 0;
}

static st_status layer_in(param_set *s, const lin_layer *l)
{
    const int g = streamed_group(s, l);
    return g ? s->layer_in(s->layer_ctx, g) : ST_OK;
}

static void layer_out(param_set *s, const lin_layer *l)
{
    const int g = streamed_group(s, l);
    if (g) s->layer_out(s->layer_ctx, g);
}

st_status lin_forward(param_set *s, pool *p, const lin_layer *l, float *y, const float *x, int64_t n)
{
    const float *w;
    float *widened = NULL;
    st_status st = layer_in(s, l);
    if (!st) st = lin_weight_float(s, p, l->w, &w, &widened);
    if (!st) linear_forward(y, x, w, w_of(s, l->b), n, l->in, l->out);
    pool_free(p, widened);
    layer_out(s, l);
    if (st) return st;
    if (l->lyco.algo && !s->adapters_off) return lyco_forward(s, p, &l->lyco, y, x, n);
    if (l->lora_a < 0 || s->adapters_off) return ST_OK;
    float *t;
    st = pool_alloc(p, (size_t)(n * l->rank) * sizeof(float), MEM_WORKSPACE, "lora.xA", (void **)&t);
    if (st) return st;
    linear_forward(t, x, w_of(s, l->lora_a), NULL, n, l->in, l->rank);
    gemm(false, true, n, l->out, l->rank, l->scale, t, w_of(s, l->lora_b), 1.0f, y); /* y += scale t B^T */
    pool_free(p, t);
    return ST_OK;
}

st_status lin_backward(param_set *s, pool *p, const lin_layer *l, float *dx, const float *dy, const float *x,
                       int64_t n)
{
    const float *w = w_of(s, l->w);
    float *widened = NULL;
    st_status st = dx ? layer_in(s, l) : ST_OK; /* only dx reads a frozen base */
    if (!st && dx) st = lin_weight_float(s, p, l->w, &w, &widened);
    if (!st) linear_backward(dx, g_of(s, l->w), g_of(s, l->b), dy, x, w, n, l->in, l->out);
    pool_free(p, widened);
    if (dx) layer_out(s, l);
    if (st) return st;
    if (l->lyco.algo) return lyco_backward(s, p, &l->lyco, dx, dy, x, n);
    if (l->lora_a < 0) return ST_OK;
    const int64_t r = l->rank;
    float *t, *u;
    st = pool_alloc(p, (size_t)(n * r) * sizeof(float), MEM_WORKSPACE, "lora.xA", (void **)&t);
    if (st) return st;
    st = pool_alloc(p, (size_t)(n * r) * sizeof(float), MEM_WORKSPACE, "lora.dyB", (void **)&u);
    if (st) {
        pool_free(p, t);
        return st;
    }
    const float *A = w_of(s, l->lora_a), *B = w_of(s, l->lora_b);
    linear_forward(t, x, A, NULL, n, l->in, r); /* recomputed: the same GEMM as forward's */
    /* dB (out, r) += scale dy^T t;  u = scale dy B;  dA (r, in) += u^T x;  dx += u A */
    gemm(true, false, l->out, r, n, l->scale, dy, t, 1.0f, g_of(s, l->lora_b));
    gemm(false, false, n, r, l->out, l->scale, dy, B, 0.0f, u);
    linear_backward(dx, g_of(s, l->lora_a), NULL, u, x, A, n, l->in, r);
    pool_free(p, u);
    pool_free(p, t);
    return ST_OK;
}

bool lin_trains_weight(const param_set *s, const lin_layer *l)
{
    return l->lora_a < 0 && !l->lyco.algo && s->items[l->w].trainable;
}

st_status lin_backward_gated(param_set *s, pool *p, const lin_layer *l, float *dx, float *dgate, const float *dy,
                             const float *x, const float *gate, int64_t batch, int64_t tokens, int64_t gate_stride)
{
    if (!lin_trains_weight(s, l))
        return st_fail(ST_ERR_INTERNAL, "lin_backward_gated: the layer's weight does not train");
    return gated_linear_backward(p, dx, g_of(s, l->w), g_of(s, l->b), dgate, dy, x, w_of(s, l->w), w_of(s, l->b), gate,
                                 batch, tokens, l->in, l->out, gate_stride);
}


conv_layer conv_register(param_set *s, const char *name, int64_t in, int64_t out, int64_t k, bool trainable)
{
    char n[PARAM_NAME_MAX];
    const lyco_settings *ly = s->lycoris ? lycoris_settings_for(s, name) : NULL;
    const bool adapted = ly != NULL;
    conv_layer l = {.down = -1, .up = -1};
    snprintf(n, sizeof n, "%s.weight", name);
    l.w = param_add(s, n, 4, (int64_t[]){out, in, k, k}, trainable && !ly);
    if (adapted && l.w >= 0 && s->lyco_conv == l.w + 1) s->lyco_conv = 0; /* adapted here: nothing to refuse */
    if (l.w >= 0 && !(trainable && !ly) && s->quant_base) quantize_frozen(s, l.w, name); /* quanto's QConv2d */
    snprintf(n, sizeof n, "%s.bias", name);
    l.b = param_add(s, n, 1, (int64_t[]){out}, trainable && !ly);
    if (adapted && ly->algo == LYCO_LOCON) l.rank = locon_register(s, name, in, out, k, ly, &l.down, &l.up, &l.scale);
    else if (adapted) l.lyco = lyco_conv_register(s, name, in, out, k, ly);
    return l;
}

conv_layer conv_register_depthwise(param_set *s, const char *name, int64_t channels, bool trainable)
{
    conv_layer l = conv_register(s, name, 1, channels, 3, trainable);
    l.depthwise = true;
    if (l.down >= 0) { /* LoCon rebuilt, as the package turns bypass off for a grouped conv */
        l.lyco = (lyco_adapter){.algo = LYCO_LOCON, .w1 = -1, .w1_a = l.up, .w1_b = l.down, .w2 = -1, .w2_a = -1,
                                .w2_b = -1, .diff = -1, .diff_b = -1, .a = channels, .c = 9, .rank = l.rank,
                                .scale = l.scale};
        l.down = l.up = -1;
    }
    /* the package's LoKr bypass runs a grouped conv only where w1 is (1, 1) and w2 whole: else refused */
    const bool bypass_fails = l.lyco.algo == LYCO_LOKR && s->lycoris->bypass && (l.lyco.a > 1 || l.lyco.w2 < 0);
    if (bypass_fails && !s->lyco_conv) s->lyco_conv = l.w + 1;
    return l;
}

/* The layer's convolution with weight w and bias b: conv2d's, or a depthwise one's (channels last) */
static st_status conv_op_forward(pool *p, const conv_layer *l, float *y, const float *x, const float *w,
                                 const float *b, const conv_shape *c)
{
    if (l->depthwise) return depthwise3x3_forward(p, y, x, w, b, c->batch, c->h, c->w, c->out);
    return conv2d_forward(p, y, x, w, b, c);
}

static st_status conv_op_backward(pool *p, const conv_layer *l, float *dx, float *dw, float *db, const float *dy,
                                  const float *x, const float *w, const conv_shape *c)
{
    if (l->depthwise) return depthwise3x3_backward(p, dx, dw, db, dy, x, w, c->batch, c->h, c->w, c->out);
    return conv2d_backward(p, dx, dw, db, dy, x, w, c);
}

/* The adapter's: the weight W + dW into *w and, for full, the bias b + diff_b into *b (else the layer's own),
 * workspace to give back with pool_free. */
static st_status merged(param_set *s, pool *p, const conv_layer *l, float **w, float **b)
{
    const param *q = param_at(s, l->w);
    const int64_t out = q->shape[0];
    *b = NULL;
    st_status st = pool_alloc(p, (size_t)q->numel * sizeof(float), MEM_WORKSPACE, "lycoris.W + dW", (void **)w);
    if (!st && l->lyco.diff_b >= 0)
        st = pool_alloc(p, (size_t)out * sizeof(float), MEM_WORKSPACE, "lycoris.b + diff_b", (void **)b);
    if (st) return st;
    if (q->quant || q->bf16) widen(q, *w);
    else copy_rows(*w, q->numel, q->w, q->numel, 1, q->numel);
    if (*b) copy_rows(*b, out, w_of(s, l->b), out, 1, out), add_to(*b, w_of(s, l->lyco.diff_b), out);
    return lyco_delta_add(s, p, &l->lyco, *w);
}

static st_status merged_forward(param_set *s, pool *p, const conv_layer *l, float *y, const float *x,
                                const conv_shape *c)
{
    float *w = NULL, *b = NULL;
    st_status st = merged(s, p, l, &w, &b);
    if (!st) st = conv_op_forward(p, l, y, x, w, b ? b : w_of(s, l->b), c);
    pool_free(p, b);
    pool_free(p, w);
    return st;
}

/* dx through W + dW; its weight's gradient G (and full's bias's) to the adapter */
static st_status merged_backward(param_set *s, pool *p, const conv_layer *l, float *dx, const float *dy,
                                 const float *x, const conv_shape *c)
{
    const int64_t numel = param_at(s, l->w)->numel;
    float *w = NULL, *b = NULL, *G = NULL;
    st_status st = merged(s, p, l, &w, &b);
    if (!st) st = pool_alloc(p, (size_t)numel * sizeof(float), MEM_WORKSPACE, "lycoris.dW", (void **)&G);
    if (!st) zero_floats(G, numel);
    if (!st) st = conv_op_backward(p, l, dx, G, g_of(s, l->lyco.diff_b), dy, x, w, c);
    if (!st) st = lyco_delta_backward(s, p, &l->lyco, G);
    pool_free(p, G);
    pool_free(p, b);
    pool_free(p, w);
    return st;
}

/* the adapter's down convolution: the layer's, to r channels */
static conv_shape down_shape(const conv_layer *l, const conv_shape *c)
{
    conv_shape d = *c;
    d.out = l->rank;
    return d;
}

st_status conv_layer_forward(param_set *s, pool *p, const conv_layer *l, float *y, const float *x, const conv_shape *c)
{
    if (l->lyco.algo && !s->adapters_off) return merged_forward(s, p, l, y, x, c);
    const float *w;
    float *widened = NULL;
    st_status st = lin_weight_float(s, p, l->w, &w, &widened);
    if (!st) st = conv_op_forward(p, l, y, x, w, w_of(s, l->b), c);
    pool_free(p, widened);
    if (st || l->down < 0 || s->adapters_off) return st;
    const int64_t P = conv_out_h(c) * conv_out_w(c), r = l->rank;
    const conv_shape dc = down_shape(l, c);
    float *t = NULL;
    st = pool_alloc(p, (size_t)(c->batch * r * P) * sizeof(float), MEM_WORKSPACE, "locon.down", (void **)&t);
    if (st) return st;
    st = conv2d_forward(p, t, x, w_of(s, l->down), NULL, &dc);
    for (int64_t b = 0; !st && b < c->batch; b++) /* y_b (out, P) += scale up (out, r) t_b (r, P) */
        gemm(false, false, c->out, P, r, l->scale, w_of(s, l->up), t + b * r * P, 1.0f, y + b * c->out * P);
    pool_free(p, t);
    return st;
}

st_status conv_layer_backward(param_set *s, pool *p, const conv_layer *l, float *dx, const float *dy, const float *x,
                              const conv_shape *c)
{
    if (l->lyco.algo) return merged_backward(s, p, l, dx, dy, x, c);
    const float *w = w_of(s, l->w);
    float *widened = NULL;
    st_status st = dx ? lin_weight_float(s, p, l->w, &w, &widened) : ST_OK; /* only dx reads a frozen base */
    if (!st) st = conv_op_backward(p, l, dx, g_of(s, l->w), g_of(s, l->b), dy, x, w, c);
    pool_free(p, widened);
    if (st || l->down < 0) return st;
    const int64_t P = conv_out_h(c) * conv_out_w(c), r = l->rank, n = c->batch * r * P;
    const conv_shape dc = down_shape(l, c);
    float *t = NULL, *u = NULL;
    st = pool_alloc(p, (size_t)n * sizeof(float), MEM_WORKSPACE, "locon.down", (void **)&t);
    if (!st) st = pool_alloc(p, (size_t)n * sizeof(float), MEM_WORKSPACE, "locon.dup", (void **)&u);
    if (!st) st = conv2d_forward(p, t, x, w_of(s, l->down), NULL, &dc); /* recomputed: forward's */
    const float *up = w_of(s, l->up);
    for (int64_t b = 0; !st && b < c->batch; b++) {
        const float *dyb = dy + b * c->out * P;
        gemm(false, true, c->out, r, P, l->scale, dyb, t + b * r * P, 1.0f, g_of(s, l->up)); /* dup += s dy_b t_b^T */
        gemm(true, false, r, P, c->out, l->scale, up, dyb, 0.0f, u + b * r * P);            /* u_b = s up^T dy_b */
    }
    if (!st) st = conv2d_backward(p, dx, g_of(s, l->down), NULL, u, x, w_of(s, l->down), &dc);
    pool_free(p, u);
    pool_free(p, t);
    return st;
}
