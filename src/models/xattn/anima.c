/* Anima's text conditioner (cosmos.h): diffusers' AnimaTextConditioner as SimpleTuner's AnimaTransformerModel calls
 * it, run in the Cosmos model's embedding as hunyuan_video.c runs its token refiner (everything kept: its tokens are
 * the T5 ids' few hundred, its blocks six).
 *
 *   h = embed[T5 ids]                                  (in_proj: the identity, model_dim = target_dim)
 *   per block:  h += o(attn(rope(qn(q(n1 h))), rope(kn(k(n1 h))), v(n1 h)))       n1 = RMSNorm
 *               h += o'(attn(rope(qn'(q'(n2 h))), rope'(kn'(k'(qwen))), v'(qwen)))  n2 = RMSNorm
 *               h += mlp.2(gelu_erf(mlp.0(n3 h)))                                   n3 = RMSNorm, mlp with biases
 *   text = RMSNorm(out_proj(h)) * t5 weight, zero rows after the T5 tokens up to min_sequence_length
 *
 * RMSNorms eps 1e-6 (q and k per head); the projections have no bias; RoPE rotate-half at theta 10000 over the whole
 * head, queries and the self-attention's keys at their T5 position, the cross-attention's keys at their Qwen position;
 * no masks (SimpleTuner passes none): the T5 padding ids are queries and keys like any other. */
#include "models/core/diffusers_json.h"
#include "models/core/attn_side.h"
#include "models/core/family.h"
#include "models/xattn/cosmos.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANIMA_EPS 1e-6f
#define ANIMA_THETA 10000.0f

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

/* attention `name` of a block: q_proj, q_norm, k_proj, k_norm, v_proj (keys and values from kv-wide rows), o_proj */
static void anima_attention(param_set *s, const char *prefix, const char *name, int64_t kv, const model_config *c,
                            attn_weights *w)
{
    const int64_t D = c->text_dim, hd = D / c->heads;
    char n[32];
#define NAME(leaf) (snprintf(n, sizeof n, "%s.%s", name, leaf), n)
    w->q = block_linear(s, prefix, NAME("q_proj"), D, D, false, 0, c);
    w->norm_q = block_norm(s, prefix, NAME("q_norm"), hd, c);
    w->k = block_linear(s, prefix, NAME("k_proj"), kv, D, false, 0, c);
    w->norm_k = block_norm(s, prefix, NAME("k_norm"), hd, c);
    w->v = block_linear(s, prefix, NAME("v_proj"), kv, D, false, 0, c);
    w->out = block_linear(s, prefix, NAME("o_proj"), D, D, false, 0, c);
#undef NAME
}

void anima_register(param_set *s, anima_adapter *a, const model_config *c)
{
    const bool full = !c->lora_rank;
    const int64_t D = c->text_dim, F = 4 * D;
    a->n = (int)c->refiner_depth;
    a->embed = param_add(s, "text_conditioner.embed.weight", 2, (int64_t[]){c->text_vocab, D}, full);
    for (int i = 0; i < a->n; i++) {
        anima_block *k = &a->blocks[i];
        char p[48];
        snprintf(p, sizeof p, "text_conditioner.blocks.%d", i);
        k->n1 = block_norm(s, p, "norm_self_attn", D, c);
        anima_attention(s, p, "self_attn", D, c, &k->sa);
        k->n2 = block_norm(s, p, "norm_cross_attn", D, c);
        anima_attention(s, p, "cross_attn", c->source_dim, c, &k->ca);
        k->n3 = block_norm(s, p, "norm_mlp", D, c);
        k->f0 = block_linear(s, p, "mlp.0", D, F, true, 0, c);
        k->f2 = block_linear(s, p, "mlp.2", F, D, true, 0, c);
    }
    a->out = lin_register(s, "text_conditioner.out_proj", D, D, true, 0, 0, full);
    a->norm = param_add(s, "text_conditioner.norm.weight", 1, (int64_t[]){D}, full);
}

void anima_release(model *m, anima_adapter *a)
{
    for (int i = 0; i < a->n; i++) {
        anima_block *k = &a->blocks[i];
        for (int j = 0; j < AB_COUNT; j++) pool_free(m->pool, k->t[j]), k->t[j] = NULL;
        for (int j = 0; j < AS_COUNT; j++) op_state_release(&k->st[j]);
    }
    op_state_release(&a->zst);
}

/* AnimaRotaryEmbedding's table (rows, hd / 2, (cos, sin)) for positions 0 .. rows - 1, inv_freq and the angles in
 * float32 as torch makes them (a host_loop's) */
static st_status rope_table_of(void *arg)
{
    float *t = ((table_fill *)arg)->t;
    const int64_t rows = ((table_fill *)arg)->rows, hd = ((table_fill *)arg)->cols;
    for (int64_t j = 0; j < hd / 2; j++) {
        const float inv = 1.0f / powf(ANIMA_THETA, (float)(2 * j) / (float)hd);
        for (int64_t p = 0; p < rows; p++) {
            const float ang = (float)p * inv;
            t[(p * (hd / 2) + j) * 2] = (float)cos((double)ang);
            t[(p * (hd / 2) + j) * 2 + 1] = (float)sin((double)ang);
        }
    }
    return ST_OK;
}

static attn_view rows_of(float *x, int64_t T, int64_t D) { return (attn_view){x, D, T * D}; }

/* q or k: raw = lin(x), normed = rope(RMSNorm per head(raw)) */
static st_status qk_forward(model *m, const lin_layer *l, int w, op_state *st, float *raw, float *normed,
                            const float *x, int64_t B, int64_t T, const float *rope)
{
    const int64_t D = m->cfg.text_dim, H = m->cfg.heads, hd = D / H;
    st_status s = lin_forward(m->params, m->pool, l, raw, x, B * T);
    if (!s) s = rmsnorm_forward(m->pool, normed, raw, PW(w), B * T * H, hd, ANIMA_EPS, st);
    if (!s) rope_half_forward(normed, B, T, H, hd, D, T * D, rope);
    return s;
}

/* dx += the gradient of x through qk_forward from dnormed (rotated back in place) */
static st_status qk_backward(model *m, const lin_layer *l, int w, const op_state *st, const float *raw, float *dn,
                             const float *x, float *dx, int64_t B, int64_t T, const float *rope, float *draw)
{
    const int64_t D = m->cfg.text_dim, H = m->cfg.heads, hd = D / H;
    rope_half_backward(dn, B, T, H, hd, D, T * D, rope);
    zero_bytes(draw, (size_t)(B * T * D) * sizeof(float));
    rmsnorm_backward(draw, PG(w), dn, raw, PW(w), B * T * H, hd, st);
    return lin_backward(m->params, m->pool, l, dx, draw, x, B * T);
}

/* Where one of a block's attentions keeps its tensors (k->t) and states (k->st): the norm's output (its queries'
 * input), q and k raw and normed, v, the attention's output, the projection's, the residual's sum; the norm's, q's,
 * k's and the attention's states */
typedef struct anima_slots {
    int n, qr, q, kr, k, v, a, o, x;
    int sn, sq, sk, sa;
} anima_slots;
static const anima_slots self_slots = {AB_N1, AB_QR, AB_Q, AB_KR, AB_K, AB_V, AB_A, AB_O, AB_X1,
                                       AS_N1, AS_Q, AS_K, AS_A};
static const anima_slots cross_slots = {AB_N2, AB_CQR, AB_CQ, AB_CKR, AB_CK, AB_CV, AB_CA, AB_CO, AB_X2,
                                        AS_N2, AS_CQ, AS_CK, AS_CA};

/* An attention's shape: the T5 tokens' queries over Lkv keys a sample (kv: to another sequence's) */
static attn_shape shape_of(const model *m, int64_t Lkv, bool kv)
{
    const model_config *c = &m->cfg;
    return (attn_shape){.batch = m->shape.batch, .tokens = c->text_len, .heads = c->heads,
                        .head_dim = c->text_dim / c->heads, .mechanism = c->mechanism, .kv_tokens = kv ? Lkv : 0};
}

/* t[x] = x + o(attention(q of norm(x), k and v of kv: Lkv rows a sample, NULL: norm(x) itself)) */
static st_status attention_module(model *m, const anima_adapter *a, anima_block *k, const anima_slots *at, int norm,
                                  const attn_weights *w, const float *x, const float *kv, int64_t Lkv)
{
    const int64_t B = m->shape.batch, L = m->cfg.text_len, D = m->cfg.text_dim, n = B * L;
    const attn_shape as = shape_of(m, Lkv, kv != NULL);
    float **t = k->t;
    if (!kv) kv = t[at->n];
    st_status st;
    if ((st = rmsnorm_forward(m->pool, t[at->n], x, PW(norm), n, D, ANIMA_EPS, &k->st[at->sn])) ||
        (st = qk_forward(m, &w->q, w->norm_q, &k->st[at->sq], t[at->qr], t[at->q], t[at->n], B, L, a->rope)) ||
        (st = qk_forward(m, &w->k, w->norm_k, &k->st[at->sk], t[at->kr], t[at->k], kv, B, Lkv, a->rope)) ||
        (st = lin_forward(m->params, m->pool, &w->v, t[at->v], kv, B * Lkv)) ||
        (st = attention_forward_masked(m->pool, &as, NULL, rows_of(t[at->a], L, D), rows_of(t[at->q], L, D),
                                       rows_of(t[at->k], Lkv, D), rows_of(t[at->v], Lkv, D), &k->st[at->sa])) ||
        (st = lin_forward(m->params, m->pool, &w->out, t[at->o], t[at->a], n)))
        return st;
    copy_rows(t[at->x], D, x, D, n, D);
    add_to(t[at->x], t[at->o], n * D);
    return ST_OK;
}

/* Backward's workspace: dh, dL/d(the residual stream), and the rest (dk, dv and draw as wide as the longer of the
 * T5 tokens and the Qwen states) */
typedef struct anima_grads {
    float *dh, *dn, *da, *dq, *dk, *dv, *draw;
} anima_grads;

/* Back through attention_module: g->dh holds dL/d t[x] and gains dL/dx (kv NULL: norm(x) took the keys' too) */
static st_status attention_module_backward(model *m, const anima_adapter *a, anima_block *k, const anima_slots *at,
                                           int norm, const attn_weights *w, const float *x, const float *kv,
                                           int64_t Lkv, const anima_grads *g)
{
    const int64_t B = m->shape.batch, L = m->cfg.text_len, D = m->cfg.text_dim, n = B * L;
    const size_t ND = (size_t)(n * D) * sizeof(float), KD = (size_t)(B * Lkv * D) * sizeof(float);
    const attn_shape as = shape_of(m, Lkv, kv != NULL);
    float **t = k->t, *dkv = kv ? NULL : g->dn; /* the Qwen states train nothing */
    if (!kv) kv = t[at->n];
    zero_bytes(g->da, ND), zero_bytes(g->dq, ND), zero_bytes(g->dk, KD), zero_bytes(g->dv, KD);
    st_status st;
    if ((st = lin_backward(m->params, m->pool, &w->out, g->da, g->dh, t[at->a], n)) ||
        (st = attention_backward_masked(m->pool, &as, NULL, rows_of(g->dq, L, D), rows_of(g->dk, Lkv, D),
                                        rows_of(g->dv, Lkv, D), rows_of(g->da, L, D), rows_of(t[at->q], L, D),
                                        rows_of(t[at->k], Lkv, D), rows_of(t[at->v], Lkv, D), rows_of(t[at->a], L, D),
                                        &k->st[at->sa])))
        return st;
    zero_bytes(g->dn, ND);
    if ((st = qk_backward(m, &w->q, w->norm_q, &k->st[at->sq], t[at->qr], g->dq, t[at->n], g->dn, B, L, a->rope,
                          g->draw)) ||
        (st = qk_backward(m, &w->k, w->norm_k, &k->st[at->sk], t[at->kr], g->dk, kv, dkv, B, Lkv, a->rope, g->draw)) ||
        (st = lin_backward(m->params, m->pool, &w->v, dkv, g->dv, kv, B * Lkv)))
        return st;
    rmsnorm_backward(g->dh, PG(norm), g->dn, x, PW(norm), n, D, &k->st[at->sn]);
    return ST_OK;
}

/* text (B, Lt, D): the conditioner's output for the samples' conditioning (model.h's anima layout) */
st_status anima_forward(model *m, anima_adapter *a, const float *cond, float *text)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = c->text_len, Lq = c->source_len, Lt = m->shape.text, D = c->text_dim;
    const int64_t S = c->source_dim, K = model_cond_len(c), n = B * L, ns = B * Lq, F = 4 * D, H = c->heads;
    st_status st = ST_OK;
    model_hold(m, &st, &a->h0, n * D, "anima.embed", false);
    model_hold(m, &st, &a->src, ns * S, "anima.qwen", false);
    model_hold(m, &st, &a->ids, n, "anima.t5_ids", false);
    model_hold(m, &st, &a->wts, n, "anima.t5_weights", false);
    model_hold(m, &st, &a->y, n * D, "anima.out_proj", false);
    model_hold(m, &st, &a->z, n * D, "anima.norm", false);
    const int64_t R = L > Lq ? L : Lq;
    model_hold(m, &st, &a->rope, R * (D / H), "anima.rope", false);
    for (int i = 0; i < a->n; i++) {
        anima_block *k = &a->blocks[i];
        for (int j = 0; j < AB_COUNT; j++)
            k->t[j] = model_take(m, &st, j == AB_F1 ? n * F : j >= AB_CK ? ns * D : n * D, "anima.block", false);
    }
    if (st) return st;
    copy_rows(a->src, Lq * S, cond, K, B, Lq * S);
    copy_rows(a->ids, L, cond + Lq * S, K, B, L);
    copy_rows(a->wts, L, cond + Lq * S + L, K, B, L);
    if ((st = host_loop(a->rope, rope_table_of, &(table_fill){a->rope, R, D / H}))) return st;
    if ((st = embedding_forward(a->h0, PW(a->embed), a->ids, n, c->text_vocab, D))) return st;
    const float *x = a->h0;
    for (int i = 0; i < a->n && !st; i++) {
        anima_block *k = &a->blocks[i];
        float **t = k->t;
        k->x = x;
        if ((st = attention_module(m, a, k, &self_slots, k->n1, &k->sa, x, NULL, L)) ||
            (st = attention_module(m, a, k, &cross_slots, k->n2, &k->ca, t[AB_X1], a->src, Lq)))
            break;
        if ((st = rmsnorm_forward(m->pool, t[AB_N3], t[AB_X2], PW(k->n3), n, D, ANIMA_EPS, &k->st[AS_N3])) ||
            (st = lin_forward(m->params, m->pool, &k->f0, t[AB_F1], t[AB_N3], n)))
            break;
        float *g = NULL;
        if ((st = pool_alloc(m->pool, (size_t)(n * F) * sizeof(float), MEM_WORKSPACE, "anima.gelu", (void **)&g)))
            break;
        gelu_erf_forward(g, t[AB_F1], n * F);
        st = lin_forward(m->params, m->pool, &k->f2, t[AB_F2], g, n);
        pool_free(m->pool, g);
        copy_rows(t[AB_X3], D, t[AB_X2], D, n, D);
        add_to(t[AB_X3], t[AB_F2], n * D);
        x = t[AB_X3];
    }
    if (!st) st = lin_forward(m->params, m->pool, &a->out, a->y, x, n);
    if (!st) st = rmsnorm_forward(m->pool, a->z, a->y, PW(a->norm), n, D, ANIMA_EPS, &a->zst);
    if (st) return st;
    zero_floats(text, B * Lt * D);
    for (int64_t b = 0; b < B; b++) row_scale_forward(text + b * Lt * D, a->z + b * L * D, a->wts + b * L, L, D);
    return ST_OK;
}

/* dtext (B, Lt, D) back through the conditioner: every trainable weight's gradient (the Qwen states train nothing) */
st_status anima_backward(model *m, anima_adapter *a, const float *dtext)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = c->text_len, Lq = c->source_len, Lt = m->shape.text, D = c->text_dim;
    const int64_t n = B * L, ns = B * Lq, F = 4 * D;
    scratch s = {.pool = m->pool};
    anima_grads g = {.dh = scratch_take_zero(&s, n * D, MEM_WORKSPACE, "anima.dh")};
    float *dy = scratch_take_zero(&s, n * D, MEM_WORKSPACE, "anima.dy");
    g.dn = scratch_take(&s, n * D, MEM_WORKSPACE, "anima.dnorm");
    g.da = scratch_take(&s, n * D, MEM_WORKSPACE, "anima.dattn");
    g.dq = scratch_take(&s, n * D, MEM_WORKSPACE, "anima.dq");
    g.dk = scratch_take(&s, (n > ns ? n : ns) * D, MEM_WORKSPACE, "anima.dk");
    g.dv = scratch_take(&s, (n > ns ? n : ns) * D, MEM_WORKSPACE, "anima.dv");
    g.draw = scratch_take(&s, (n > ns ? n : ns) * D, MEM_WORKSPACE, "anima.draw");
    float *df = scratch_take(&s, n * F, MEM_WORKSPACE, "anima.dff");
    float *gl = scratch_take(&s, n * F, MEM_WORKSPACE, "anima.gelu");
    if (s.status) return scratch_end(&s);
    for (int64_t b = 0; b < B; b++) /* dz = dtext * weight: the same product */
        row_scale_forward(g.dn + b * L * D, dtext + b * Lt * D, a->wts + b * L, L, D);
    rmsnorm_backward(dy, PG(a->norm), g.dn, a->y, PW(a->norm), n, D, &a->zst);
    const float *xl = a->n ? a->blocks[a->n - 1].t[AB_X3] : a->h0;
    if ((s.status = lin_backward(m->params, m->pool, &a->out, g.dh, dy, xl, n))) return scratch_end(&s);
    for (int i = a->n - 1; i >= 0 && !s.status; i--) {
        anima_block *k = &a->blocks[i];
        float **t = k->t;
        /* x3 = x2 + mlp(n3 x2): dh stays dL/dx3, becoming dL/dx2 */
        gelu_erf_forward(gl, t[AB_F1], n * F);
        zero_bytes(df, (size_t)(n * F) * sizeof(float));
        if ((s.status = lin_backward(m->params, m->pool, &k->f2, df, g.dh, gl, n))) break;
        zero_bytes(gl, (size_t)(n * F) * sizeof(float));
        gelu_erf_backward(gl, df, t[AB_F1], n * F); /* gl: d f1 */
        zero_bytes(g.dn, (size_t)(n * D) * sizeof(float));
        if ((s.status = lin_backward(m->params, m->pool, &k->f0, g.dn, gl, t[AB_N3], n))) break;
        rmsnorm_backward(g.dh, PG(k->n3), g.dn, t[AB_X2], PW(k->n3), n, D, &k->st[AS_N3]);
        /* x2 = x1 + o'(cross-attention(n2 x1, qwen)), x1 = x + o(self-attention(n1 x)) */
        if ((s.status = attention_module_backward(m, a, k, &cross_slots, k->n2, &k->ca, t[AB_X1], a->src, Lq, &g)) ||
            (s.status = attention_module_backward(m, a, k, &self_slots, k->n1, &k->sa, k->x, NULL, L, &g)))
            break;
    }
    if (!s.status) embedding_backward(PG(a->embed), g.dh, a->ids, n, D);
    return scratch_end(&s);
}

/* ---- the family's descriptor (family.h) ---- */

/* Qwen's states, the T5 ids, their weights */
static int64_t anima_cond_len(const model_config *mc) { return mc->source_len * mc->source_dim + 2 * mc->text_len; }

/* Qwen's states from the caption's words; as many T5 ids (1, 2, ...), weight 1 */
static void anima_condition(const model_config *mc, const char *caption, float *cond)
{
    const int64_t words = encode_caption(caption ? caption : "", mc->text_vocab, mc->source_len, mc->source_dim, 0,
                                         cond, NULL);
    float *ids = cond + mc->source_len * mc->source_dim, *w = ids + mc->text_len;
    for (int64_t l = 0; l < mc->text_len; l++)
        ids[l] = l < words ? (float)(1 + l % (mc->text_vocab - 1)) : 0.0f, w[l] = l < words ? 1.0f : 0.0f;
}

static const family_preset presets[] = {
    /* Anima (circlestone-labs/Anima-Base-v1.0-Diffusers and its previews): Cosmos-Predict2-2B's transformer with
     * AnimaTextConditioner's defaults (6 blocks, 1024 wide, 16 heads, T5's 32128 ids, Qwen3-0.6B's 1024-wide states,
     * min_sequence_length 512), as SimpleTuner's AnimaTransformerModel sets them; 512 T5 ids and Qwen tokens (its
     * tokenizer_max_length). The tiny one is the fixture's; both set in its preset hook below. */
    {"anima-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"anima", 28, 2048, 16, 2, 16, 128, 10, 0, 512, 1024, 0, false, false, 0, 0},
};

static void anima_preset(model_config *mc, const char *name, bool tiny)
{
    mc->adaln_lora = tiny ? 16 : 256;
    mc->source_len = tiny ? 5 : 512, mc->source_dim = tiny ? 24 : 1024, mc->text_min_len = tiny ? 8 : 512,
    mc->refiner_depth = tiny ? 2 : 6, mc->text_vocab = tiny ? 32 : 32128;
}

static st_status anima_check(const model_config *mc)
{
    st_status st = cosmos_check(mc);
    if (st) return st;
    if (mc->source_len < 1 || mc->source_dim < 1 || mc->text_min_len < 0 || mc->refiner_depth < 1 ||
        mc->refiner_depth > MODEL_REFINER_MAX || mc->text_dim % mc->heads || mc->text_dim / mc->heads % 2)
        return family_refuse(mc, GROUP_SOURCE, "anima takes at least 1, 1, 0, 1 to 8 blocks, and an even head width");
    return ST_OK;
}

/* Anima's: Cosmos's transformer, then its AnimaTextConditioner's config.json in text_conditioner/ beside the
 * transformer's (the pipeline's layout, or a fixture's: in the transformer's folder). What the conditioner's reader
 * does not build is refused by name: another width than the transformer's text (in_proj), other heads, a LayerNorm,
 * no self-attention, another mlp_ratio. */
static st_status anima_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = cosmos_from_json(j, file, mc);
    if (st) return st;
    char dir[4096], sub[4200], resolved[4300];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    const size_t n = strlen(dir);
    if (n >= 11 && !strcmp(dir + n - 11, "transformer") && (n == 11 || dir[n - 12] == '/'))
        dir[n - 11] = 0, snprintf(sub, sizeof sub, "%stext_conditioner", n == 11 ? "./" : dir);
    else snprintf(sub, sizeof sub, "%s/text_conditioner", dir);
    cJSON *c;
    if ((st = json_read_config(sub, resolved, sizeof resolved, &c))) return st;
    int64_t source = 1024, target = 1024, width = 1024, layers = 6, heads = 16, vocab = 32128, min_len = 512;
    const json_key keys[] = {{"source_dim", &source}, {"target_dim", &target}, {"model_dim", &width},
                             {"num_layers", &layers}, {"num_attention_heads", &heads}, {"target_vocab_size", &vocab},
                             {"min_sequence_length", &min_len}};
    st = json_ints(c, resolved, keys, sizeof keys / sizeof *keys);
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(c, "_class_name");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "mlp_ratio");
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(c, "use_self_attention");
    const cJSON *ln = cJSON_GetObjectItemCaseSensitive(c, "use_layer_norm");
    if (!st && (!cJSON_IsString(cls) || strcmp(cls->valuestring, "AnimaTextConditioner")))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: _class_name %s; anima's text conditioner is an AnimaTextConditioner",
                     resolved, cJSON_IsString(cls) ? cls->valuestring : "(none)");
    if (!st && (width != target || target != mc->text_dim || heads != mc->heads || layers < 1 ||
                layers > MODEL_REFINER_MAX || (r && (!cJSON_IsNumber(r) || r->valuedouble != 4.0)) ||
                (sa && !cJSON_IsTrue(sa)) || cJSON_IsTrue(ln)))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: model_dim %lld, target_dim %lld, num_attention_heads %lld, num_layers "
                     "%lld, mlp_ratio, use_self_attention or use_layer_norm; segtrain builds the conditioner as wide as "
                     "the transformer's text_embed_dim (%lld, no in_proj), with its heads (%lld), 1 to %d blocks, "
                     "mlp_ratio 4, self-attention and RMSNorms", resolved, (long long)width, (long long)target,
                     (long long)heads, (long long)layers, (long long)mc->text_dim, (long long)mc->heads,
                     MODEL_REFINER_MAX);
    cJSON_Delete(c);
    if (st) return st;
    mc->source_dim = source, mc->refiner_depth = layers, mc->text_vocab = vocab, mc->text_min_len = min_len;
    return ST_OK;
}

const family_desc anima_desc = {
    .name = "anima", .topology = TOPO_XATTN, .traits = TR_TEXT | TR_UNPOOLED,
    .st = {{.name = "anima", .title = "Anima", .diffusers = "CosmosTransformer3DModel",
            .flavours = "release|base-v1.0|preview-3|preview-2|preview|gazingstars123-2.9b",
            .built = "release:anima|base-v1.0:anima|preview-3:anima|preview-2:anima|preview:anima",
            .fallback = "preview-3",
            .why = "gazingstars123-2.9b is a single-file 2.9B checkpoint whose transformer sizes are not published as a "
                   "diffusers config (SimpleTuner infers them from its tensors); give its converted folder as "
                   "pretrained_model_name_or_path with a built flavour",
            .example = "anima.peft-lora.json", .tiny = "anima-tiny"}},
    .uncached = "the T5 ids and weights beside the Qwen3 states", .cond_len = anima_cond_len,
    .condition = anima_condition, .ops = &cosmos_family,
    .topology_options = &(const cosmos_options){.text_adapter = true}, FAMILY_PRESETS(presets), .preset = anima_preset,
    .readers = {{"CosmosTransformer3DModel", anima_from_json}}, .fields = F_FFN | F_ADALN | F_SOURCE | F_REFINER,
    .check = anima_check,
};
