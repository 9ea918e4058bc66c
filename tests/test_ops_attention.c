/* Attention (ops/cpu/attention.c): both mechanisms against an independent double-precision reference and
 * central finite differences, in contiguous and packed-qkv layouts, without and with each kind of mask, for
 * self-, cross-, grouped-query and sliding-window attention; math vs flash; the kept and workspace byte
 * statements against the pool; OOM; determinism across runs and thread counts; += gradients; excluded keys
 * contributing nothing; grouped-query attention as plain attention over repeated kv heads; a window covering
 * every key as no window; the profile's FLOPs; bad masks and shapes refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

static pool *P; /* the pool every op call of this test uses */

/* ---- double reference, contiguous (B, T, H*hd) ---- */

/* q, w and o are (B, T, H hd), k and v (B, Tk, KVH hd). */
typedef struct ref_ctx {
    int64_t B, T, H, hd;
    double *q, *k, *v, *w, *o; /* o: scratch output */
    double *row;               /* scratch, Tk */
    const double *kb, *qg;     /* the mask, (B, Tk) and (B, T), NULL: none / a gate of 1 */
    int64_t Tk, KVH, W;        /* keys, kv heads, window (0: none) */
} ref_ctx;

/* What the mask adds to logit (i, j) of sample b, by its definition in ops.h: an excluded key whatever the gate. */
static double ref_bias(const ref_ctx *c, int64_t b, int64_t i, int64_t j)
{
    if (!c->kb) return 0;
    const double kb = c->kb[b * c->Tk + j];
    if (kb == -INFINITY) return kb;
    return (c->qg ? c->qg[b * c->T + i] : 1.0) * kb;
}

/* By the definitions in ops.h, written out directly: query head h reads kv head h / (H / KVH), and query i sees
 * key j where |i - j| <= W (the others left out of the sum altogether). */
static void ref_forward(ref_ctx *c)
{
    const int64_t D = c->H * c->hd, Dk = c->KVH * c->hd, G = c->H / c->KVH;
    const double scale = 1.0 / sqrt((double)c->hd);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->T; i++) {
                const double *qi = c->q + (b * c->T + i) * D + h * c->hd;
                const int64_t kvo = (h / G) * c->hd;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < c->Tk; j++) {
                    const double *kj = c->k + (b * c->Tk + j) * Dk + kvo;
                    double dot = 0;
                    for (int64_t e = 0; e < c->hd; e++) dot += qi[e] * kj[e];
                    c->row[j] = c->W && llabs(i - j) > c->W ? -INFINITY : dot * scale + ref_bias(c, b, i, j);
                    if (c->row[j] > m) m = c->row[j];
                }
                for (int64_t j = 0; j < c->Tk; j++) sum += (c->row[j] = exp(c->row[j] - m));
                double *oi = c->o + (b * c->T + i) * D + h * c->hd;
                for (int64_t e = 0; e < c->hd; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < c->Tk; j++) acc += c->row[j] * c->v[(b * c->Tk + j) * Dk + kvo + e];
                    oi[e] = acc / sum;
                }
            }
}

static double ref_loss(void *ctx)
{
    ref_ctx *c = ctx;
    ref_forward(c);
    const int64_t n = c->B * c->T * c->H * c->hd;
    double l = 0;
    for (int64_t i = 0; i < n; i++) l += c->w[i] * c->o[i];
    return l;
}

/* ---- masks ---- */

static float *alloc_fill(size_t n, float value)
{
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = value;
    return x;
}

/* MASK_BOOL: SDPA's boolean key mask (key_bias 0 / -inf, no gate); MASK_CHROMA: m_i * m_j added, m in {0, 1}
 * (key_bias = query_gate = m); MASK_FLOAT: any float bias and gate, zero and negative gates included, with -inf
 * keys. Sample 0 keeps every key (every m 1); later samples exclude (or zero) a middle block of keys, like
 * padding text before the image in a joint sequence, and past one 256-key tile the whole first tile, so that
 * the flash forward meets rows whose every key so far is excluded. */
enum { MASK_NONE, MASK_BOOL, MASK_CHROMA, MASK_FLOAT, MASK_KINDS };
static const char *mask_name(int kind)
{
    static const char *names[] = {"no mask", "bool mask", "chroma mask", "float mask"};
    return names[kind];
}

/* sparse: instead, every fifth key of later samples, for windows, whose every query needs a kept key nearby. */
static bool masked_out(int64_t b, int64_t j, int64_t T, bool sparse)
{
    if (sparse) return b > 0 && j % 5 == 1;
    return b > 0 && ((j >= T / 3 && j < 2 * T / 3) || (T > 256 && j < 260));
}

typedef struct mask_data {
    float *kb, *qg; /* rows `stride` apart; the padding between them is NaN */
    attn_mask m;
    double *kb_d, *qg_d; /* the same, dense (B, Tk) and (B, T), for the reference */
} mask_data;

/* The mask of `kind` for B samples of T queries and Tk keys, rows `stride` >= max(T, Tk) apart, or 0: one row for
 * the batch (sample 0's). m.key_bias is NULL for MASK_NONE. The gate of query i is set where i < T, the bias of
 * key j where j < Tk, so with Tk != T each array is read to its own length (the rest NaN). */
static mask_data make_mask_kv(int kind, int64_t B, int64_t T, int64_t Tk, int64_t stride, bool sparse, uint64_t seed)
{
    mask_data d = {0};
    if (kind == MASK_NONE) return d;
    const int64_t N = T > Tk ? T : Tk;
    const int64_t rows = stride ? B : 1, n = stride ? (B - 1) * stride + N : N;
    d.kb = alloc_fill((size_t)n, NAN);
    d.qg = kind == MASK_BOOL ? NULL : alloc_fill((size_t)n, NAN);
    float *r1 = malloc((size_t)N * sizeof(float)), *r2 = malloc((size_t)N * sizeof(float));
    for (int64_t b = 0; b < rows; b++) {
        tk_fill(r1, N, seed + (uint64_t)b, -2.0f, 2.0f), tk_fill(r2, N, seed + 100 + (uint64_t)b, -1.5f, 1.5f);
        for (int64_t j = 0; j < N; j++) {
            const bool out = masked_out(b, j, Tk, sparse);
            float *kb = j < Tk ? d.kb + b * stride + j : NULL, *qg = d.qg && j < T ? d.qg + b * stride + j : NULL;
            float kv = 0.0f, gv = 0.0f;
            if (kind == MASK_BOOL) kv = out ? -INFINITY : 0.0f;
            if (kind == MASK_CHROMA) kv = out ? 0.0f : 1.0f, gv = masked_out(b, j, T, sparse) ? 0.0f : 1.0f;
            if (kind == MASK_FLOAT) kv = out ? -INFINITY : r1[j], gv = j % 5 == 2 ? 0.0f : r2[j];
            if (kb) *kb = kv;
            if (qg) *qg = gv;
        }
    }
    free(r1), free(r2);
    d.m = (attn_mask){.key_bias = d.kb, .query_gate = d.qg, .batch_stride = stride};
    d.kb_d = malloc((size_t)(B * Tk) * sizeof(double));
    d.qg_d = d.qg ? malloc((size_t)(B * T) * sizeof(double)) : NULL;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t j = 0; j < Tk; j++) d.kb_d[b * Tk + j] = d.kb[b * stride + j];
        for (int64_t i = 0; d.qg && i < T; i++) d.qg_d[b * T + i] = d.qg[b * stride + i];
    }
    return d;
}

static mask_data make_mask(int kind, int64_t B, int64_t T, int64_t stride, uint64_t seed)
{
    return make_mask_kv(kind, B, T, T, stride, false, seed);
}

static const attn_mask *mask_of(const mask_data *d) { return d->kb ? &d->m : NULL; }
static void free_mask(mask_data *d) { free(d->kb), free(d->qg), free(d->kb_d), free(d->qg_d); }

/* ---- strided views over malloc'd buffers ---- */

enum { LAYOUT_CONTIG, LAYOUT_PACKED };
static const float PAD = 12345.0f; /* what padding of output buffers holds, and must still hold after */

typedef struct buffers {
    int64_t B, T, D, Tk, Dk;
    int layout;
    float *in, *kin, *vin;    /* q (or packed qkv), k, v */
    float *out, *dout;        /* out, dout */
    float *din, *dkin, *dvin; /* dq (or packed dqkv), dk, dv */
    size_t n_in, n_kv, n_out, n_dout;
    attn_view q, k, v, o, dO, dq, dk, dv;
} buffers;

static attn_view mk_view(float *base, int64_t ts, int64_t bs) { return (attn_view){base, ts, bs}; }

/* q, out (B, T, D) and k, v (B, Tk, Dk). Contiguous: every operand on its own. Packed: q/k/v side by side in rows
 * of D + 2 Dk (with Tk != T, rows enough for the longer, the other's rest unused) with a gap between batches,
 * dq/dk/dv likewise, out and dout with their own padded strides. Input padding is NaN, so reading it would poison
 * results; output padding is PAD, checked after. */
static buffers make_buffers_kv(int64_t B, int64_t T, int64_t D, int64_t Tk, int64_t Dk, int layout)
{
    buffers z = {.B = B, .T = T, .D = D, .Tk = Tk, .Dk = Dk, .layout = layout};
    if (layout == LAYOUT_CONTIG) {
        const int64_t bs = T * D, bk = Tk * Dk;
        z.n_in = z.n_out = z.n_dout = (size_t)(B * bs), z.n_kv = (size_t)(B * bk);
        z.in = alloc_fill(z.n_in, NAN), z.kin = alloc_fill(z.n_kv, NAN), z.vin = alloc_fill(z.n_kv, NAN);
        z.out = alloc_fill(z.n_out, PAD), z.dout = alloc_fill(z.n_dout, NAN);
        z.din = alloc_fill(z.n_in, PAD), z.dkin = alloc_fill(z.n_kv, PAD), z.dvin = alloc_fill(z.n_kv, PAD);
        z.q = mk_view(z.in, D, bs), z.k = mk_view(z.kin, Dk, bk), z.v = mk_view(z.vin, Dk, bk);
        z.o = mk_view(z.out, D, bs), z.dO = mk_view(z.dout, D, bs);
        z.dq = mk_view(z.din, D, bs), z.dk = mk_view(z.dkin, Dk, bk), z.dv = mk_view(z.dvin, Dk, bk);
    } else {
        const int64_t w = D + 2 * Dk, rows = T > Tk ? T : Tk;
        const int64_t bs = rows * w + 7, obs = T * (D + 3) + 5, dbs = T * (D + 1) + 2;
        z.n_in = (size_t)(B * bs), z.n_out = (size_t)(B * obs), z.n_dout = (size_t)(B * dbs);
        z.in = alloc_fill(z.n_in, NAN), z.out = alloc_fill(z.n_out, PAD), z.dout = alloc_fill(z.n_dout, NAN);
        z.din = alloc_fill(z.n_in, PAD);
        z.q = mk_view(z.in, w, bs), z.k = mk_view(z.in + D, w, bs), z.v = mk_view(z.in + D + Dk, w, bs);
        z.o = mk_view(z.out, D + 3, obs), z.dO = mk_view(z.dout, D + 1, dbs);
        z.dq = mk_view(z.din, w, bs), z.dk = mk_view(z.din + D, w, bs), z.dv = mk_view(z.din + D + Dk, w, bs);
    }
    return z;
}

static buffers make_buffers(int64_t B, int64_t T, int64_t D, int layout)
{
    return make_buffers_kv(B, T, D, T, D, layout);
}

static void free_buffers(buffers *z)
{
    free(z->in), free(z->kin), free(z->vin), free(z->out), free(z->dout), free(z->din), free(z->dkin), free(z->dvin);
}

static void scatter(attn_view a, const float *src, int64_t B, int64_t T, int64_t D)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            memcpy(a.data + b * a.batch_stride + t * a.token_stride, src + (b * T + t) * D, (size_t)D * sizeof(float));
}

static void gather(float *dst, attn_view a, int64_t B, int64_t T, int64_t D)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            memcpy(dst + (b * T + t) * D, a.data + b * a.batch_stride + t * a.token_stride, (size_t)D * sizeof(float));
}

/* Marks the elements of buf inside the view `a` (D columns of each of T tokens) in covered. */
static void cover(char *covered, const float *buf, attn_view a, int64_t B, int64_t T, int64_t D)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) memset(covered + (a.data - buf) + b * a.batch_stride + t * a.token_stride, 1, (size_t)D);
}

/* Counts elements of buf outside what covered marks that no longer hold PAD; frees covered. */
static int64_t damage(const float *buf, size_t n, char *covered)
{
    int64_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !covered[i] && buf[i] != PAD;
    free(covered);
    return bad;
}

static int64_t pad_damage(const float *buf, size_t n, attn_view a, int64_t B, int64_t T, int64_t D)
{
    char *covered = calloc(n, 1);
    cover(covered, buf, a, B, T, D);
    return damage(buf, n, covered);
}

/* ---- one forward + backward through the op ---- */

typedef struct result {
    float *o, *dq, *dk, *dv; /* contiguous: o, dq (B, T, D); dk, dv (B, Tk, Dk) */
} result;

static result alloc_result(int64_t n)
{
    return (result){malloc((size_t)n * sizeof(float)), malloc((size_t)n * sizeof(float)),
                    malloc((size_t)n * sizeof(float)), malloc((size_t)n * sizeof(float))};
}

static void free_result(result *r) { free(r->o), free(r->dq), free(r->dk), free(r->dv); }

static int64_t s_kv_tokens(const attn_shape *s) { return s->kv_tokens ? s->kv_tokens : s->tokens; }
static int64_t s_kv_heads(const attn_shape *s) { return s->kv_heads ? s->kv_heads : s->heads; }

/* run_op's backward gets no output (out.data NULL): flash's D from P (ops.h) */
static bool d_from_p;

/* Forward with keep, backward with dout into gradients that start at g0 (NULL: zero; dk and dv start at g0's
 * first elements); results gathered contiguous. Also checks that padding around outputs and gradients is
 * untouched. A NULL mask calls the plain ops. */
static void run_op(const attn_shape *s, const attn_mask *mask, int layout, const float *q, const float *k,
                   const float *v, const float *dout, const float *g0, result *r)
{
    const int64_t B = s->batch, T = s->tokens, D = s->heads * s->head_dim, n = B * T * D;
    const int64_t Tk = s_kv_tokens(s), Dk = s_kv_heads(s) * s->head_dim, nk = B * Tk * Dk;
    buffers z = make_buffers_kv(B, T, D, Tk, Dk, layout);
    scatter(z.q, q, B, T, D), scatter(z.k, k, B, Tk, Dk), scatter(z.v, v, B, Tk, Dk), scatter(z.dO, dout, B, T, D);
    float *zero = calloc((size_t)(n > nk ? n : nk), sizeof(float));
    const float *init = g0 ? g0 : zero;
    scatter(z.dq, init, B, T, D), scatter(z.dk, init, B, Tk, Dk), scatter(z.dv, init, B, Tk, Dk);
    op_state keep = {0};
    const attn_view out = d_from_p ? (attn_view){0} : z.o;
    if (mask) {
        CHECK(attention_forward_masked(P, s, mask, z.o, z.q, z.k, z.v, &keep) == ST_OK);
        CHECK(attention_backward_masked(P, s, mask, z.dq, z.dk, z.dv, z.dO, z.q, z.k, z.v, out, &keep) == ST_OK);
    } else {
        CHECK(attention_forward(P, s, z.o, z.q, z.k, z.v, &keep) == ST_OK);
        CHECK(attention_backward(P, s, z.dq, z.dk, z.dv, z.dO, z.q, z.k, z.v, out, &keep) == ST_OK);
    }
    op_state_release(&keep);
    gather(r->o, z.o, B, T, D), gather(r->dq, z.dq, B, T, D), gather(r->dk, z.dk, B, Tk, Dk);
    gather(r->dv, z.dv, B, Tk, Dk);
    int64_t bad = pad_damage(z.out, z.n_out, z.o, B, T, D);
    if (layout == LAYOUT_PACKED) {
        /* dq, dk, dv together cover their columns of each token row; the rest is padding */
        char *covered = calloc(z.n_in, 1);
        cover(covered, z.din, z.dq, B, T, D), cover(covered, z.din, z.dk, B, Tk, Dk);
        cover(covered, z.din, z.dv, B, Tk, Dk);
        bad += damage(z.din, z.n_in, covered);
    } else {
        bad += pad_damage(z.dkin, z.n_kv, z.dk, B, Tk, Dk) + pad_damage(z.dvin, z.n_kv, z.dv, B, Tk, Dk);
    }
    CHECKF(bad == 0, "%lld padding elements written outside the views", (long long)bad);
    free(zero);
    free_buffers(&z);
}

/* ---- data ---- */

/* q and w (the loss weights, dout) have n elements, k and v nk. */
typedef struct data {
    int64_t n, nk;
    float *q, *k, *v, *w;
} data;

static data make_data(const attn_shape *s, uint64_t seed)
{
    data d = {.n = s->batch * s->tokens * s->heads * s->head_dim,
              .nk = s->batch * s_kv_tokens(s) * s_kv_heads(s) * s->head_dim};
    d.q = malloc((size_t)d.n * sizeof(float)), d.k = malloc((size_t)d.nk * sizeof(float));
    d.v = malloc((size_t)d.nk * sizeof(float)), d.w = malloc((size_t)d.n * sizeof(float));
    /* wide enough that the softmax is far from uniform */
    tk_fill(d.q, d.n, seed, -1.5f, 1.5f), tk_fill(d.k, d.nk, seed + 1, -1.5f, 1.5f);
    tk_fill(d.v, d.nk, seed + 2, -1.0f, 1.0f), tk_fill(d.w, d.n, seed + 3, -1.0f, 1.0f);
    return d;
}

static void free_data(data *d) { free(d->q), free(d->k), free(d->v), free(d->w); }

static const char *mech_name(attention_mechanism m) { return m == ATTN_MATH ? "math" : "flash"; }
static const char *layout_name(int l) { return l == LAYOUT_CONTIG ? "contig" : "packed"; }

/* 1 + 2: forward against the double reference, gradients against central differences, for both
 * mechanisms and layouts. `check` elements of each gradient are checked by FD (all when check >= n), evenly
 * spaced from the first to the last element, so every query/key tile including the partial last one is hit.
 *
 * Tolerances. Forward: fp32 dot products and softmax over T <= 130 terms carry relative errors of a few
 * 1e-7, so 1e-5 of max|O| has margin of ~10x and more. Gradients: the FD of the double reference with h =
 * 1e-6 has truncation error ~h^2 |L'''| ~ 1e-12 and rounding error ~1e-16 |L| / h ~ 1e-9, so it is exact to
 * ~1e-8 relative; the fp32 gradients are good to ~1e-6 relative. 1e-4 leaves that margin, while any wrong
 * term (a missing scale 1/sqrt(hd) = 0.5..0.58, a dropped rowsum(dP*P), a transposed product) is an O(1)
 * relative error. */
static void check_reference(const attn_shape *shape, int64_t check, uint64_t seed, int mask_kind, bool sparse)
{
    attn_shape s = *shape;
    const int64_t B = s.batch, T = s.tokens, H = s.heads, hd = s.head_dim, Tk = s_kv_tokens(&s);
    data d = make_data(&s, seed);
    const int64_t n = d.n, nk = d.nk, N = n > nk ? n : nk;
    mask_data md = make_mask_kv(mask_kind, B, T, Tk, (T > Tk ? T : Tk) + 3, sparse, seed + 7);
    ref_ctx c = {B, T, H, hd, malloc(n * sizeof(double)), malloc(nk * sizeof(double)), malloc(nk * sizeof(double)),
                 malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(Tk * sizeof(double)), md.kb_d,
                 md.qg_d, Tk, s_kv_heads(&s), s.window};
    tk_to_double(c.q, d.q, n), tk_to_double(c.k, d.k, nk), tk_to_double(c.v, d.v, nk), tk_to_double(c.w, d.w, n);
    ref_forward(&c);
    double *o_ref = malloc(n * sizeof(double));
    memcpy(o_ref, c.o, n * sizeof(double));

    /* the FD'd elements of each gradient: its `check` evenly spaced ones (all of them when check >= its size) */
    const int64_t sizes[3] = {n, nk, nk};
    int64_t m[3], *idx[3];
    double *fd[3];
    double *xs[3] = {c.q, c.k, c.v};
    for (int g = 0; g < 3; g++) {
        m[g] = check < sizes[g] ? check : sizes[g];
        idx[g] = malloc(m[g] * sizeof(int64_t));
        fd[g] = malloc(m[g] * sizeof(double));
        for (int64_t i = 0; i < m[g]; i++) idx[g][i] = m[g] == sizes[g] ? i : i * (sizes[g] - 1) / (m[g] - 1);
        for (int64_t i = 0; i < m[g]; i++) tk_numeric_grad(ref_loss, &c, xs[g] + idx[g][i], 1, 1e-6, &fd[g][i]);
    }

    result r = alloc_result(N);
    float *sub = malloc(N * sizeof(float));
    char what[160], kind[96];
    snprintf(kind, sizeof kind, "%s T=%lld Tk=%lld H=%lld/%lld W=%lld", mask_name(mask_kind), (long long)T,
             (long long)Tk, (long long)H, (long long)c.KVH, (long long)s.window);
    for (int mech = ATTN_MATH; mech <= ATTN_FLASH; mech++)
        for (int layout = LAYOUT_CONTIG; layout <= LAYOUT_PACKED; layout++) {
            s.mechanism = (attention_mechanism)mech;
            run_op(&s, mask_of(&md), layout, d.q, d.k, d.v, d.w, NULL, &r);
            snprintf(what, sizeof what, "%s %s %s forward", mech_name(s.mechanism), layout_name(layout), kind);
            tk_expect_close(what, r.o, o_ref, n, 1e-5);
            const float *got[3] = {r.dq, r.dk, r.dv};
            const char *gn[3] = {"dq", "dk", "dv"};
            for (int g = 0; g < 3; g++) {
                for (int64_t i = 0; i < m[g]; i++) sub[i] = got[g][idx[g][i]];
                snprintf(what, sizeof what, "%s %s %s %s vs FD (%lld el)", mech_name(s.mechanism),
                         layout_name(layout), kind, gn[g], (long long)m[g]);
                tk_expect_close(what, sub, fd[g], m[g], 1e-4);
            }
        }
    free(sub), free_result(&r), free(o_ref);
    for (int g = 0; g < 3; g++) free(fd[g]), free(idx[g]);
    free(c.q), free(c.k), free(c.v), free(c.w), free(c.o), free(c.row);
    free_data(&d), free_mask(&md);
}

static void check_against_reference(int64_t B, int64_t T, int64_t H, int64_t hd, int64_t check, uint64_t seed,
                                    int mask_kind)
{
    const attn_shape s = {B, T, H, hd, ATTN_MATH, 0, 0, 0};
    check_reference(&s, check, seed, mask_kind, false);
}

static double *to_double(const float *x, int64_t n)
{
    double *y = malloc((size_t)n * sizeof(double));
    tk_to_double(y, x, n);
    return y;
}

static void expect_close_f(const char *what, const float *got, const float *want, int64_t n, double tol)
{
    double *w = to_double(want, n);
    tk_expect_close(what, got, w, n, tol);
    free(w);
}

/* 3: math and flash agree (T=200 and 530: several tiles and partial ones; T=64: exactly one query tile). */
/* lift > 0: every query's first feature is 6 and the keys from 512 on (the third key tile) have `lift` there, so that
 * the scores jump by about 6 lift / sqrt(hd) in that tile: past the flash forward's LAG_MAX (its scores retaken
 * against the new max) or within it (exps against a running max that lags). */
static void check_math_vs_flash_s(const attn_shape *shape, int mask_kind, bool sparse, float lift)
{
    attn_shape sm = *shape, sf = sm;
    sm.mechanism = ATTN_MATH, sf.mechanism = ATTN_FLASH;
    const int64_t T = sm.tokens, Tk = s_kv_tokens(&sm), hd = sm.head_dim;
    data d = make_data(&sm, 77 + (uint64_t)T);
    for (int64_t b = 0; lift > 0 && b < sm.batch; b++) {
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < sm.heads; h++) d.q[((b * T + t) * sm.heads + h) * hd] = 6.0f;
        for (int64_t j = 512; j < Tk; j++)
            for (int64_t h = 0; h < s_kv_heads(&sm); h++) d.k[((b * Tk + j) * s_kv_heads(&sm) + h) * hd] = lift;
    }
    mask_data md = make_mask_kv(mask_kind, sm.batch, T, Tk, T > Tk ? T : Tk, sparse, 3);
    const int64_t N = d.n > d.nk ? d.n : d.nk;
    result rm = alloc_result(N), rf = alloc_result(N), rp = alloc_result(N);
    run_op(&sm, mask_of(&md), LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &rm);
    run_op(&sf, mask_of(&md), LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &rf);
    d_from_p = true; /* and flash's backward with D from P, no output given */
    run_op(&sf, mask_of(&md), LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &rp);
    d_from_p = false;
    char what[128];
    const float *a[7] = {rf.o, rf.dq, rf.dk, rf.dv, rp.dq, rp.dk, rp.dv};
    const float *b[7] = {rm.o, rm.dq, rm.dk, rm.dv, rm.dq, rm.dk, rm.dv};
    const char *nm[7] = {"out", "dq", "dk", "dv", "dq (D from P)", "dk (D from P)", "dv (D from P)"};
    const int64_t len[7] = {d.n, d.n, d.nk, d.nk, d.n, d.nk, d.nk};
    for (int i = 0; i < 7; i++) {
        snprintf(what, sizeof what, "flash vs math %s T=%lld Tk=%lld H=%lld/%lld W=%lld lift %g %s",
                 mask_name(mask_kind), (long long)T, (long long)Tk, (long long)sm.heads, (long long)s_kv_heads(&sm),
                 (long long)sm.window, lift, nm[i]);
        expect_close_f(what, a[i], b[i], len[i], i < 4 ? 1e-5 : 2e-5); /* D from P: summed by key tile */
    }
    free_result(&rm), free_result(&rf), free_result(&rp), free_data(&d), free_mask(&md);
}

static void check_math_vs_flash(int64_t B, int64_t T, int64_t H, int64_t hd, int mask_kind)
{
    const attn_shape s = {B, T, H, hd, ATTN_MATH, 0, 0, 0};
    check_math_vs_flash_s(&s, mask_kind, false, 0.0f);
}

/* 4: kept and workspace bytes against the pool, and OOM; with a mask too, which adds nothing to either
 * statement. A NULL mask is the plain op (checked bitwise in check_plain_unchanged). */
static void check_memory_s(const attn_shape *shape, int threads, int mask_kind)
{
    ops_set_threads(threads);
    const attn_shape s = *shape;
    const attention_mechanism mech = s.mechanism;
    const int64_t B = s.batch, T = s.tokens, H = s.heads, D = H * s.head_dim;
    const int64_t Tk = s_kv_tokens(&s), Dk = s_kv_heads(&s) * s.head_dim;
    data d = make_data(&s, 5);
    mask_data md = make_mask_kv(mask_kind, B, T, Tk, 0, s.window != 0, 13);
    const attn_mask *mask = mask_of(&md);
    buffers z = make_buffers_kv(B, T, D, Tk, Dk, LAYOUT_PACKED);
    scatter(z.q, d.q, B, T, D), scatter(z.k, d.k, B, Tk, Dk), scatter(z.v, d.v, B, Tk, Dk);
    scatter(z.dO, d.w, B, T, D);
    memset(z.din, 0, z.n_in * sizeof(float));

    /* something unrelated is live, so that the baseline is not zero */
    void *other = NULL;
    CHECK(pool_alloc(P, 1000, MEM_ACTIVATIONS, "unrelated", &other) == ST_OK);
    const size_t base = pool_live(P);
    const size_t kept = attention_kept_bytes(&s);
    const size_t ws_f = attention_workspace_bytes(&s, threads, ATTN_FORWARD);
    const size_t ws_keep = attention_workspace_bytes(&s, threads, ATTN_FORWARD_KEEP);
    const size_t ws_b = attention_workspace_bytes(&s, threads, ATTN_BACKWARD);
    const size_t want_kept = (size_t)(B * H * T) * (mech == ATTN_MATH ? (size_t)Tk : 1) * sizeof(float);
    CHECKF(kept == want_kept, "%s kept %zu, want %zu", mech_name(mech), kept, want_kept);
    CHECK(ws_f > 0 && ws_b > 0);
    pool_stats st;

    /* forward without keep: the whole statement is workspace, and nothing stays live */
    pool_reset_peak(P);
    CHECK(attention_forward_masked(P, &s, mask, z.o, z.q, z.k, z.v, NULL) == ST_OK);
    CHECKF(pool_peak(P) - base == ws_f, "%s t=%d fwd(no keep) peak delta %zu, statement %zu", mech_name(mech), threads,
           pool_peak(P) - base, ws_f);
    CHECK(pool_live(P) == base);

    /* forward with keep: kept bytes stay live; the workspace is its own statement (0 for math, whose P goes
     * straight into the kept buffer) */
    op_state keep = {0};
    pool_reset_peak(P);
    pool_get_stats(P, &st);
    const size_t ws_live0 = st.live_by_tag[MEM_WORKSPACE];
    CHECK(attention_forward_masked(P, &s, mask, z.o, z.q, z.k, z.v, &keep) == ST_OK);
    pool_get_stats(P, &st);
    CHECK(ws_keep == (mech == ATTN_MATH ? 0 : ws_f));
    CHECKF(st.live - base == kept, "%s live delta after fwd %zu, kept %zu", mech_name(mech), st.live - base, kept);
    CHECK(keep.bytes == kept && keep.data != NULL && keep.pool == P);
    CHECKF(st.peak_by_tag[MEM_WORKSPACE] - ws_live0 == ws_keep, "%s t=%d fwd(keep) workspace peak %zu, want %zu",
           mech_name(mech), threads, st.peak_by_tag[MEM_WORKSPACE] - ws_live0, ws_keep);
    CHECKF(st.peak - base == kept + ws_keep, "%s fwd(keep) peak delta %zu, want %zu", mech_name(mech),
           st.peak - base, kept + ws_keep);

    /* backward: exactly the statement on top of what is live */
    const size_t live_kept = pool_live(P);
    pool_reset_peak(P);
    CHECK(attention_backward_masked(P, &s, mask, z.dq, z.dk, z.dv, z.dO, z.q, z.k, z.v, z.o, &keep) == ST_OK);
    CHECKF(pool_peak(P) - live_kept == ws_b, "%s t=%d bwd peak delta %zu, statement %zu", mech_name(mech), threads,
           pool_peak(P) - live_kept, ws_b);
    CHECK(pool_live(P) == live_kept);
    op_state_release(&keep);
    CHECK(pool_live(P) == base && keep.data == NULL);

    /* OOM: a capacity one byte short of what forward needs; the status propagates, nothing stays live */
    const size_t need_keep = kept + ws_keep;
    pool_set_capacity(P, base + need_keep - 1);
    CHECK(attention_forward_masked(P, &s, mask, z.o, z.q, z.k, z.v, &keep) == ST_ERR_OOM);
    CHECK(pool_live(P) == base && keep.data == NULL);
    pool_set_capacity(P, base + ws_f - 1);
    CHECK(attention_forward_masked(P, &s, mask, z.o, z.q, z.k, z.v, NULL) == ST_ERR_OOM);
    CHECK(pool_live(P) == base);
    if (mech == ATTN_FLASH) {
        /* the keep fits, the workspace does not: the keep must be given back */
        pool_set_capacity(P, base + kept + ws_f / 2);
        CHECK(attention_forward_masked(P, &s, mask, z.o, z.q, z.k, z.v, &keep) == ST_ERR_OOM);
        CHECK(pool_live(P) == base && keep.data == NULL);
    }
    /* backward whose workspace does not fit */
    pool_set_capacity(P, 0);
    CHECK(attention_forward_masked(P, &s, mask, z.o, z.q, z.k, z.v, &keep) == ST_OK);
    pool_set_capacity(P, pool_live(P) + ws_b - 1);
    CHECK(attention_backward_masked(P, &s, mask, z.dq, z.dk, z.dv, z.dO, z.q, z.k, z.v, z.o, &keep) == ST_ERR_OOM);
    pool_set_capacity(P, 0);
    op_state_release(&keep);
    CHECK(pool_live(P) == base);

    pool_free(P, other);
    free_buffers(&z), free_data(&d), free_mask(&md);
}

static void check_memory(attention_mechanism mech, int threads, int mask_kind)
{
    const attn_shape s = {2, 70, 3, 8, mech, 0, 0, 0};
    check_memory_s(&s, threads, mask_kind);
}

/* 5: determinism. Each (batch, head) pair is computed entirely by one thread with single-threaded BLAS in
 * a fixed order, so neither a rerun nor the thread count can change a single bit. */
static void check_determinism_s(const attn_shape *shape, int mask_kind)
{
    const attn_shape s = *shape;
    const attention_mechanism mech = s.mechanism;
    const int64_t T = s.tokens, Tk = s_kv_tokens(&s);
    data d = make_data(&s, 99);
    mask_data md = make_mask_kv(mask_kind, s.batch, T, Tk, T > Tk ? T : Tk, s.window != 0, 41);
    const attn_mask *mask = mask_of(&md);
    const int64_t N = d.n > d.nk ? d.n : d.nk;
    result r1 = alloc_result(N), r2 = alloc_result(N), r3 = alloc_result(N);
    ops_set_threads(2);
    CHECK(ops_threads() == 2);
    run_op(&s, mask, LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &r1);
    run_op(&s, mask, LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &r2);
    ops_set_threads(1);
    CHECK(ops_threads() == 1);
    run_op(&s, mask, LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &r3);
    ops_set_threads(2);
    char what[128], kind[80];
    snprintf(kind, sizeof kind, "%s %s Tk=%lld H=%lld/%lld W=%lld", mech_name(mech), mask_name(mask_kind),
             (long long)Tk, (long long)s.heads, (long long)s_kv_heads(&s), (long long)s.window);
    const float *a[4] = {r1.o, r1.dq, r1.dk, r1.dv}, *b[4] = {r2.o, r2.dq, r2.dk, r2.dv},
                *c[4] = {r3.o, r3.dq, r3.dk, r3.dv};
    const char *nm[4] = {"out", "dq", "dk", "dv"};
    const int64_t len[4] = {d.n, d.n, d.nk, d.nk};
    for (int i = 0; i < 4; i++) {
        snprintf(what, sizeof what, "%s rerun bitwise %s", kind, nm[i]);
        tk_expect_bitwise(what, b[i], a[i], len[i]);
        snprintf(what, sizeof what, "%s 1 vs 2 threads bitwise %s", kind, nm[i]);
        tk_expect_bitwise(what, c[i], a[i], len[i]);
    }

    /* 6: backward accumulates: starting from g0 gives g0 + g (fp32 rounding of the sum apart) */
    float *g0 = malloc((size_t)N * sizeof(float));
    tk_fill(g0, N, 1234, -0.05f, 0.05f);
    run_op(&s, mask, LAYOUT_CONTIG, d.q, d.k, d.v, d.w, g0, &r2);
    double *want = malloc((size_t)N * sizeof(double));
    const float *got[3] = {r2.dq, r2.dk, r2.dv}, *g[3] = {r1.dq, r1.dk, r1.dv};
    for (int i = 0; i < 3; i++) {
        for (int64_t e = 0; e < len[i + 1]; e++) want[e] = (double)g0[e] + g[i][e];
        snprintf(what, sizeof what, "%s accumulates into %s", kind, nm[i + 1]);
        tk_expect_close(what, got[i], want, len[i + 1], 1e-5);
    }
    free(want), free(g0);
    free_result(&r1), free_result(&r2), free_result(&r3), free_data(&d), free_mask(&md);
}

static void check_determinism(attention_mechanism mech, int mask_kind)
{
    const attn_shape s = {2, 130, 3, 16, mech, 0, 0, 0};
    check_determinism_s(&s, mask_kind);
}

/* NULL gradients are skipped, and the ones asked for are the same bits as in a full backward. */
static void check_null_grads(attention_mechanism mech)
{
    const int64_t B = 1, T = 70, H = 2, hd = 8, D = H * hd;
    attn_shape s = {B, T, H, hd, mech, 0, 0, 0};
    data d = make_data(&s, 31);
    result full = alloc_result(d.n);
    run_op(&s, NULL, LAYOUT_CONTIG, d.q, d.k, d.v, d.w, NULL, &full);
    const float *want[3] = {full.dq, full.dk, full.dv};
    const char *nm[3] = {"dq", "dk", "dv"};
    for (int only = 0; only < 3; only++) {
        buffers z = make_buffers(B, T, D, LAYOUT_CONTIG);
        scatter(z.q, d.q, B, T, D), scatter(z.k, d.k, B, T, D), scatter(z.v, d.v, B, T, D);
        scatter(z.dO, d.w, B, T, D);
        attn_view g[3] = {z.dq, z.dk, z.dv}, none = {NULL, D, T * D};
        memset(g[only].data, 0, (size_t)d.n * sizeof(float));
        op_state keep = {0};
        CHECK(attention_forward(P, &s, z.o, z.q, z.k, z.v, &keep) == ST_OK);
        CHECK(attention_backward(P, &s, only == 0 ? g[0] : none, only == 1 ? g[1] : none, only == 2 ? g[2] : none,
                                 z.dO, z.q, z.k, z.v, z.o, &keep) == ST_OK);
        op_state_release(&keep);
        char what[64];
        snprintf(what, sizeof what, "%s only %s requested", mech_name(mech), nm[only]);
        tk_expect_bitwise(what, g[only].data, want[only], d.n);
        free_buffers(&z);
    }
    free_result(&full), free_data(&d);
}

/* An excluded key never contributes: its probability is exactly 0, so giving it huge (finite) k and v changes no
 * bit of the output or of any gradient, and its own dk and dv are exactly 0. Over two key tiles, the first
 * entirely excluded in sample 1; with the float mask's gates (zero and negative) on excluded keys too. */
static void check_excluded_keys(attention_mechanism mech, int mask_kind)
{
    const int64_t B = 2, T = 300, H = 2, hd = 4, D = H * hd;
    attn_shape s = {B, T, H, hd, mech, 0, 0, 0};
    data d = make_data(&s, 61);
    mask_data md = make_mask(mask_kind, B, T, T, 17);
    result base = alloc_result(d.n), huge = alloc_result(d.n);
    run_op(&s, mask_of(&md), LAYOUT_CONTIG, d.q, d.k, d.v, d.w, NULL, &base);
    int64_t excluded = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < T; j++)
            if (md.kb[b * T + j] == -INFINITY) {
                for (int64_t e = 0; e < D; e++) {
                    d.v[(b * T + j) * D + e] = (e % 2 ? -1e30f : 1e30f);
                    d.k[(b * T + j) * D + e] = (e % 3 ? -1e4f : 1e4f);
                }
                excluded++;
            }
    CHECKF(excluded > 256, "%s: only %lld keys excluded, not a whole key tile", mask_name(mask_kind),
           (long long)excluded);
    run_op(&s, mask_of(&md), LAYOUT_CONTIG, d.q, d.k, d.v, d.w, NULL, &huge);
    char what[96];
    const float *a[4] = {huge.o, huge.dq, huge.dk, huge.dv}, *b[4] = {base.o, base.dq, base.dk, base.dv};
    const char *nm[4] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++) {
        snprintf(what, sizeof what, "%s %s: huge excluded k, v change no bit of %s", mech_name(mech),
                 mask_name(mask_kind), nm[i]);
        tk_expect_bitwise(what, a[i], b[i], d.n);
    }
    int64_t nonzero = 0;
    for (int64_t b0 = 0; b0 < B; b0++)
        for (int64_t j = 0; j < T; j++)
            if (md.kb[b0 * T + j] == -INFINITY)
                for (int64_t e = 0; e < D; e++)
                    nonzero += huge.dk[(b0 * T + j) * D + e] != 0.0f || huge.dv[(b0 * T + j) * D + e] != 0.0f;
    CHECKF(nonzero == 0, "%s %s: %lld dk/dv elements of excluded keys are not 0", mech_name(mech),
           mask_name(mask_kind), (long long)nonzero);
    free_result(&base), free_result(&huge), free_data(&d), free_mask(&md);
}

/* No mask is the op as it was: the _masked ops with a NULL mask, and with a bias of exactly 0 everywhere (x + 0 is
 * x), give the plain ops' bits. */
static void check_plain_unchanged(attention_mechanism mech)
{
    const int64_t B = 2, T = 270, H = 2, hd = 8;
    attn_shape s = {B, T, H, hd, mech, 0, 0, 0};
    data d = make_data(&s, 71);
    float *zero = calloc((size_t)(B * T), sizeof(float));
    const attn_mask zero_mask = {.key_bias = zero, .batch_stride = T};
    result plain = alloc_result(d.n), got = alloc_result(d.n);
    run_op(&s, NULL, LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &plain);
    const char *nm[4] = {"out", "dq", "dk", "dv"};
    char what[96];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0) {
            /* run_op calls the plain ops for a NULL mask: call the masked ones with NULL here */
            buffers z = make_buffers(B, T, H * hd, LAYOUT_CONTIG);
            scatter(z.q, d.q, B, T, H * hd), scatter(z.k, d.k, B, T, H * hd), scatter(z.v, d.v, B, T, H * hd);
            scatter(z.dO, d.w, B, T, H * hd);
            memset(z.din, 0, z.n_in * sizeof(float)), memset(z.dkin, 0, z.n_in * sizeof(float));
            memset(z.dvin, 0, z.n_in * sizeof(float));
            op_state keep = {0};
            CHECK(attention_forward_masked(P, &s, NULL, z.o, z.q, z.k, z.v, &keep) == ST_OK);
            CHECK(attention_backward_masked(P, &s, NULL, z.dq, z.dk, z.dv, z.dO, z.q, z.k, z.v, z.o, &keep) ==
                  ST_OK);
            op_state_release(&keep);
            gather(got.o, z.o, B, T, H * hd), gather(got.dq, z.dq, B, T, H * hd);
            gather(got.dk, z.dk, B, T, H * hd), gather(got.dv, z.dv, B, T, H * hd);
            free_buffers(&z);
        } else {
            run_op(&s, &zero_mask, LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &got);
        }
        const float *a[4] = {got.o, got.dq, got.dk, got.dv}, *b[4] = {plain.o, plain.dq, plain.dk, plain.dv};
        for (int i = 0; i < 4; i++) {
            snprintf(what, sizeof what, "%s %s mask vs plain bitwise %s", mech_name(mech),
                     pass ? "zero-bias" : "NULL", nm[i]);
            tk_expect_bitwise(what, a[i], b[i], d.n);
        }
    }
    free(zero), free_result(&plain), free_result(&got), free_data(&d);
}

/* Bad masks: one error, nothing left live in the pool (the kept state given back). */
static void check_refusals(attention_mechanism mech)
{
    const int64_t B = 2, T = 6, H = 1, hd = 2, D = H * hd;
    attn_shape s = {B, T, H, hd, mech, 0, 0, 0};
    data d = make_data(&s, 81);
    buffers z = make_buffers(B, T, D, LAYOUT_CONTIG);
    scatter(z.q, d.q, B, T, D), scatter(z.k, d.k, B, T, D), scatter(z.v, d.v, B, T, D);
    float kb[2 * 6], qg[2 * 6];
    enum { KB_NAN, KB_PLUS_INF, QG_INF, QG_NAN, ALL_EXCLUDED, NO_BIAS, NEG_STRIDE, OK_LAST, CASES };
    for (int c = 0; c < CASES; c++) {
        for (int i = 0; i < 12; i++) kb[i] = i % 2 ? -INFINITY : 0.5f, qg[i] = 1.0f;
        attn_mask m = {.key_bias = kb, .batch_stride = T};
        if (c == KB_NAN) kb[7] = NAN;
        if (c == KB_PLUS_INF) kb[3] = INFINITY;
        if (c == QG_INF) m.query_gate = qg, qg[10] = -INFINITY;
        if (c == QG_NAN) m.query_gate = qg, qg[0] = NAN;
        if (c == ALL_EXCLUDED)
            for (int i = 6; i < 12; i++) kb[i] = -INFINITY;
        if (c == NO_BIAS) m.key_bias = NULL, m.query_gate = qg;
        if (c == NEG_STRIDE) m.batch_stride = -1;
        if (c == OK_LAST) m.query_gate = qg, qg[4] = 0.0f; /* the same arrays, valid: accepted */
        op_state keep = {0};
        const st_status want = c == OK_LAST ? ST_OK : ST_ERR_INVALID;
        const st_status got = attention_forward_masked(P, &s, &m, z.o, z.q, z.k, z.v, &keep);
        CHECKF(got == want, "%s refusal case %d: status %d, want %d", mech_name(mech), c, (int)got, (int)want);
        /* the line names the entry and its value */
        static const char *names[CASES] = {"key_bias[1][1] is nan", "key_bias[0][3] is inf", "query_gate[1][4] is -inf",
                                           "query_gate[0][0] is nan", "sample 1 excludes all 6 keys",
                                           "no key_bias, segment or causal", "batch_stride -1", NULL};
        if (names[c]) CHECKF(strstr(st_error(), names[c]), "refusal case %d said \"%s\"", c, st_error());
        CHECKF(pool_live(P) == keep.bytes, "%s refusal case %d: %zu bytes live", mech_name(mech), c, pool_live(P));
        op_state_release(&keep);
    }
    free_buffers(&z), free_data(&d);
}

/* Grouped-query attention is plain attention over k and v with each kv head repeated for its group's query heads
 * (torch's repeat_interleave: query head h reads kv head h / G, not h % kv_heads). Out and dq are the same bits;
 * a kv head's dk and dv are the sum of its repeats' (to fp32 rounding: the group accumulates in one buffer). */
static void check_gqa_as_repeated(attention_mechanism mech)
{
    const int64_t B = 2, T = 70, H = 6, KVH = 2, G = H / KVH, hd = 8;
    const attn_shape sg = {B, T, H, hd, mech, 0, KVH, 0}, sp = {B, T, H, hd, mech, 0, 0, 0};
    data d = make_data(&sg, 51), e = make_data(&sp, 51);
    /* e's k and v: d's, head h a copy of kv head h / G */
    for (int64_t r = 0; r < B * T; r++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < hd; j++) {
                e.k[(r * H + h) * hd + j] = d.k[(r * KVH + h / G) * hd + j];
                e.v[(r * H + h) * hd + j] = d.v[(r * KVH + h / G) * hd + j];
            }
    memcpy(e.q, d.q, (size_t)d.n * sizeof(float)), memcpy(e.w, d.w, (size_t)d.n * sizeof(float));
    result rg = alloc_result(d.n), rp = alloc_result(e.n);
    run_op(&sg, NULL, LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &rg);
    run_op(&sp, NULL, LAYOUT_CONTIG, e.q, e.k, e.v, e.w, NULL, &rp);
    char what[96];
    snprintf(what, sizeof what, "%s GQA vs repeated kv heads: out", mech_name(mech));
    tk_expect_bitwise(what, rg.o, rp.o, d.n);
    snprintf(what, sizeof what, "%s GQA vs repeated kv heads: dq", mech_name(mech));
    tk_expect_bitwise(what, rg.dq, rp.dq, d.n);
    double *want = calloc((size_t)d.nk, sizeof(double));
    const float *got[2] = {rg.dk, rg.dv}, *rep[2] = {rp.dk, rp.dv};
    for (int g = 0; g < 2; g++) {
        memset(want, 0, (size_t)d.nk * sizeof(double));
        for (int64_t r = 0; r < B * T; r++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t j = 0; j < hd; j++) want[(r * KVH + h / G) * hd + j] += rep[g][(r * H + h) * hd + j];
        snprintf(what, sizeof what, "%s GQA vs repeated kv heads: %s is the group's sum", mech_name(mech),
                 g ? "dv" : "dk");
        tk_expect_close(what, got[g], want, d.nk, 1e-5);
    }
    free(want), free_result(&rg), free_result(&rp), free_data(&d), free_data(&e);
}

/* A window that reaches every key (>= tokens - 1) is no window: the same bits, with and without a mask. */
static void check_window_covering_all(attention_mechanism mech)
{
    const int64_t B = 2, T = 300, H = 2, hd = 8;
    const attn_shape plain = {B, T, H, hd, mech, 0, 0, 0};
    data d = make_data(&plain, 57);
    mask_data md = make_mask(MASK_BOOL, B, T, T, 5);
    result rp = alloc_result(d.n), rw = alloc_result(d.n);
    const char *nm[4] = {"out", "dq", "dk", "dv"};
    char what[96];
    for (int masked = 0; masked < 2; masked++) {
        run_op(&plain, masked ? mask_of(&md) : NULL, LAYOUT_CONTIG, d.q, d.k, d.v, d.w, NULL, &rp);
        const int64_t windows[2] = {T - 1, 100000};
        for (int wi = 0; wi < 2; wi++) {
            attn_shape sw = plain;
            sw.window = windows[wi];
            run_op(&sw, masked ? mask_of(&md) : NULL, LAYOUT_CONTIG, d.q, d.k, d.v, d.w, NULL, &rw);
            const float *a[4] = {rw.o, rw.dq, rw.dk, rw.dv}, *b[4] = {rp.o, rp.dq, rp.dk, rp.dv};
            for (int i = 0; i < 4; i++) {
                snprintf(what, sizeof what, "%s %s window %lld vs none bitwise %s", mech_name(mech),
                         masked ? "bool mask" : "no mask", (long long)sw.window, nm[i]);
                tk_expect_bitwise(what, a[i], b[i], d.n);
            }
        }
    }
    free_result(&rp), free_result(&rw), free_data(&d), free_mask(&md);
}

/* Shapes that make no sense, and a mask leaving a query's whole window excluded: one error line naming the field
 * and its value, from forward and backward alike, nothing left live in the pool. */
static void check_shape_refusals(attention_mechanism mech)
{
    const int64_t B = 1, T = 8, H = 6, hd = 2, D = H * hd;
    buffers z = make_buffers(B, T, D, LAYOUT_CONTIG);
    for (size_t i = 0; i < z.n_in; i++) z.in[i] = z.kin[i] = z.vin[i] = z.dout[i] = 0.25f;
    enum { HEADS_4, NEG_WINDOW, NEG_KV, WINDOW_CROSS, WINDOW_MASK, CASES };
    static const char *said[CASES] = {"kv_heads 4 does not divide heads 6", "window -1", "kv_tokens -3",
                                      "window 2 with kv_tokens 8", "excludes every key within window 1 of query 3"};
    float kb[8] = {0, 0, -INFINITY, -INFINITY, -INFINITY, 0, 0, 0};
    const attn_mask m = {.key_bias = kb};
    for (int c = 0; c < CASES; c++) {
        attn_shape s = {B, T, H, hd, mech, 0, 0, 0};
        if (c == HEADS_4) s.kv_heads = 4;
        if (c == NEG_WINDOW) s.window = -1;
        if (c == NEG_KV) s.kv_tokens = -3;
        if (c == WINDOW_CROSS) s.window = 2, s.kv_tokens = 8;
        if (c == WINDOW_MASK) s.window = 1;
        const attn_mask *mask = c == WINDOW_MASK ? &m : NULL;
        op_state keep = {0};
        st_status got = attention_forward_masked(P, &s, mask, z.o, z.q, z.k, z.v, &keep);
        CHECKF(got == ST_ERR_INVALID, "%s shape case %d: forward status %d", mech_name(mech), c, (int)got);
        CHECKF(strstr(st_error(), said[c]), "%s shape case %d said \"%s\"", mech_name(mech), c, st_error());
        CHECKF(pool_live(P) == 0 && keep.data == NULL, "%s shape case %d: %zu bytes live", mech_name(mech), c,
               pool_live(P));
        if (c == WINDOW_MASK) { /* a window of 2 reaches key 5 from query 3: accepted */
            s.window = 2;
            CHECK(attention_forward_masked(P, &s, mask, z.o, z.q, z.k, z.v, &keep) == ST_OK);
            op_state_release(&keep);
            continue;
        }
        float dummy = 0;
        const op_state fake = {P, &dummy, sizeof dummy};
        got = attention_backward(P, &s, z.dq, z.dk, z.dv, z.dO, z.q, z.k, z.v, z.o, &fake);
        CHECKF(got == ST_ERR_INVALID && strstr(st_error(), said[c]), "%s shape case %d: backward status %d, \"%s\"",
               mech_name(mech), c, (int)got, st_error());
        CHECK(pool_live(P) == 0);
    }
    free_buffers(&z);
}

/* The profile counts the products run: 4 T Tk hd a head forward, 8 (math) or 10 (flash) backward; with a
 * window, flash the tiles it visits. T = 600, window 100: the forward's query tiles of 512 and 88 rows see keys
 * [0, 600) and [412, 600), 323744 scores a head; the backward's 256-wide key tiles of 256, 256 and 88 keys are seen
 * by queries [0, 356), [156, 600) and [412, 600), 221344; math the whole 600^2 both ways. */
static void check_profile_flops(void)
{
    const attn_shape shapes[] = {{2, 37, 3, 8, ATTN_MATH, 53, 0, 0}, {2, 37, 3, 8, ATTN_FLASH, 53, 1, 0},
                                 {1, 600, 2, 4, ATTN_FLASH, 0, 0, 100}, {1, 600, 2, 4, ATTN_MATH, 0, 0, 100}};
    const double area[] = {37.0 * 53, 37.0 * 53, 221344, 600.0 * 600}, fwd_area[] = {37.0 * 53, 37.0 * 53, 323744,
                                                                                       600.0 * 600};
    for (int i = 0; i < 4; i++) {
        const attn_shape *s = &shapes[i];
        data d = make_data(s, 3);
        result r = alloc_result(d.n > d.nk ? d.n : d.nk);
        op_profile pr;
        ops_profile_start();
        run_op(s, NULL, LAYOUT_CONTIG, d.q, d.k, d.v, d.w, NULL, &r);
        ops_profile_stop(&pr);
        const double per = (double)s->batch * s->heads * s->head_dim;
        const double want = (4.0 * fwd_area[i] + (s->mechanism == ATTN_FLASH ? 10.0 : 8.0) * area[i]) * per;
        CHECKF(pr.calls[OP_ATTENTION] == 2 && pr.flops[OP_ATTENTION] == want,
               "profile shape %d: %ld calls, %.0f FLOPs, want 2 and %.0f", i, pr.calls[OP_ATTENTION],
               pr.flops[OP_ATTENTION], want);
        free_result(&r), free_data(&d);
    }
}

int main(void)
{
    P = pool_create(POOL_DEVICE, 0);
    CHECK(P != NULL);
    ops_set_threads(2);

    check_against_reference(2, 5, 2, 3, 1 << 30, 11, MASK_NONE);  /* tiny and odd: every element by FD */
    check_against_reference(1, 130, 2, 4, 60, 21, MASK_NONE);     /* one partial tile each way: FD on a subset */
    check_against_reference(1, 600, 1, 4, 40, 23, MASK_NONE);     /* three query and three key tiles (256 wide),
                                                                     the last partial: the online softmax's
                                                                     rescaling, by FD on a subset */
    for (int kind = MASK_BOOL; kind < MASK_KINDS; kind++) {
        check_against_reference(2, 7, 3, 5, 1 << 30, 31, kind);    /* every element by FD */
        check_against_reference(2, 300, 2, 3, 40, 33, kind);       /* sample 1's first key tile all excluded */
    }
    for (int kind = MASK_NONE; kind < MASK_KINDS; kind++) {
        check_math_vs_flash(2, 200, 3, 16, kind);
        check_math_vs_flash(1 + (kind != MASK_NONE), 530, 2, 8, kind); /* several query and key tiles, partial */
        check_math_vs_flash(1, 64, 2, 8, kind);
    }

    /* cross-attention (kv_tokens), grouped-query (kv_heads), sliding window, and their mixes */
    for (int kind = MASK_NONE; kind < MASK_KINDS; kind++) {
        check_reference(&(attn_shape){2, 5, 2, 3, ATTN_MATH, 7, 0, 0}, 1 << 30, 41, kind, false);
        check_reference(&(attn_shape){2, 6, 4, 3, ATTN_MATH, 0, 2, 0}, 1 << 30, 43, kind, false);
        check_reference(&(attn_shape){2, 9, 4, 3, ATTN_MATH, 5, 2, 0}, 1 << 30, 45, kind, false);
        check_reference(&(attn_shape){2, 9, 2, 3, ATTN_MATH, 0, 0, 2}, 1 << 30, 47, kind, true);
        check_reference(&(attn_shape){2, 12, 3, 2, ATTN_MATH, 0, 1, 3}, 1 << 30, 49, kind, true);
    }
    check_reference(&(attn_shape){2, 130, 1, 4, ATTN_MATH, 300, 0, 0}, 40, 51, MASK_BOOL, false); /* two key tiles,
                                                                          sample 1's first one all excluded */
    check_reference(&(attn_shape){2, 300, 2, 3, ATTN_MATH, 20, 0, 0}, 40, 53, MASK_FLOAT, false); /* two query tiles */
    check_reference(&(attn_shape){1, 130, 6, 4, ATTN_MATH, 0, 2, 0}, 60, 55, MASK_NONE, false);
    check_reference(&(attn_shape){1, 600, 1, 4, ATTN_MATH, 0, 0, 100}, 40, 57, MASK_NONE, false); /* tiles skipped */
    check_reference(&(attn_shape){2, 600, 1, 4, ATTN_MATH, 0, 0, 300}, 40, 59, MASK_BOOL, true);  /* wider than a tile */
    for (int kind = MASK_NONE; kind < MASK_KINDS; kind++) {
        check_math_vs_flash_s(&(attn_shape){2, 200, 3, 16, ATTN_MATH, 530, 0, 0}, kind, false, 0.0f);
        check_math_vs_flash_s(&(attn_shape){1, 530, 4, 8, ATTN_MATH, 0, 2, 0}, kind, false, 0.0f);
        check_math_vs_flash_s(&(attn_shape){2, 530, 2, 8, ATTN_MATH, 0, 0, 100}, kind, true, 0.0f);
        check_math_vs_flash_s(&(attn_shape){2, 530, 4, 8, ATTN_MATH, 0, 1, 20}, kind, true, 0.0f);
        /* the third key tile's scores jump by ~21 (past LAG_MAX: retaken) and by ~8.5 (a lagging max) */
        check_math_vs_flash_s(&(attn_shape){2, 600, 2, 8, ATTN_MATH, 0, 0, 0}, kind, false, 10.0f);
        check_math_vs_flash_s(&(attn_shape){2, 600, 2, 8, ATTN_MATH, 0, 0, 0}, kind, false, 4.0f);
    }
    for (int mech = ATTN_MATH; mech <= ATTN_FLASH; mech++) {
        const attention_mechanism me = (attention_mechanism)mech;
        check_memory_s(&(attn_shape){2, 70, 6, 8, me, 45, 2, 0}, 1, MASK_FLOAT);
        check_memory_s(&(attn_shape){2, 70, 6, 8, me, 300, 3, 0}, 2, MASK_BOOL);
        check_memory_s(&(attn_shape){2, 300, 3, 8, me, 0, 0, 10}, 2, MASK_BOOL);
        for (int kind = MASK_NONE; kind < MASK_KINDS; kind++) {
            check_determinism_s(&(attn_shape){3, 130, 4, 16, me, 77, 2, 0}, kind);
            check_determinism_s(&(attn_shape){2, 300, 6, 16, me, 0, 2, 50}, kind);
        }
        check_gqa_as_repeated(me);
        check_window_covering_all(me);
        check_shape_refusals(me);
    }
    check_profile_flops();
    for (int mech = ATTN_MATH; mech <= ATTN_FLASH; mech++) {
        check_memory((attention_mechanism)mech, 1, MASK_NONE);
        check_memory((attention_mechanism)mech, 2, MASK_NONE);
        check_memory((attention_mechanism)mech, 2, MASK_FLOAT);
        for (int kind = MASK_NONE; kind < MASK_KINDS; kind++) check_determinism((attention_mechanism)mech, kind);
        check_null_grads((attention_mechanism)mech);
        check_plain_unchanged((attention_mechanism)mech);
        check_excluded_keys((attention_mechanism)mech, MASK_BOOL);
        check_excluded_keys((attention_mechanism)mech, MASK_FLOAT);
        check_refusals((attention_mechanism)mech);
    }

    /* math backward needs what forward kept */
    attn_shape s = {1, 4, 1, 2, ATTN_MATH, 0, 0, 0};
    float buf[8] = {0};
    attn_view a = {buf, 2, 8};
    CHECK(attention_backward(P, &s, a, a, a, a, a, a, a, a, NULL) == ST_ERR_INVALID);

    ops_set_threads(2);
    CHECK(pool_live(P) == 0);
    CHECK(pool_destroy(P) == 0);
    return tk_finish();
}
