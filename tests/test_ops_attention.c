/* Attention (ops/cpu/attention.c): both mechanisms against an independent double-precision reference and
 * central finite differences, in contiguous and packed-qkv layouts, without and with each kind of mask; math vs
 * flash; the kept and workspace byte statements against the pool; OOM; determinism across runs and thread
 * counts; += gradients; excluded keys contributing nothing; bad masks refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

static pool *P; /* the pool every op call of this test uses */

/* ---- double reference, contiguous (B, T, H*hd) ---- */

typedef struct ref_ctx {
    int64_t B, T, H, hd;
    double *q, *k, *v, *w, *o; /* o: scratch output */
    double *row;               /* scratch, T */
    const double *kb, *qg;     /* the mask (B, T) each, NULL: none / a gate of 1 */
} ref_ctx;

/* What the mask adds to logit (i, j) of sample b, by its definition in ops.h: an excluded key whatever the gate. */
static double ref_bias(const ref_ctx *c, int64_t b, int64_t i, int64_t j)
{
    if (!c->kb) return 0;
    const double kb = c->kb[b * c->T + j];
    if (kb == -INFINITY) return kb;
    return (c->qg ? c->qg[b * c->T + i] : 1.0) * kb;
}

static void ref_forward(ref_ctx *c)
{
    const int64_t D = c->H * c->hd;
    const double scale = 1.0 / sqrt((double)c->hd);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->T; i++) {
                const double *qi = c->q + (b * c->T + i) * D + h * c->hd;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < c->T; j++) {
                    const double *kj = c->k + (b * c->T + j) * D + h * c->hd;
                    double dot = 0;
                    for (int64_t e = 0; e < c->hd; e++) dot += qi[e] * kj[e];
                    c->row[j] = dot * scale + ref_bias(c, b, i, j);
                    if (c->row[j] > m) m = c->row[j];
                }
                for (int64_t j = 0; j < c->T; j++) sum += (c->row[j] = exp(c->row[j] - m));
                double *oi = c->o + (b * c->T + i) * D + h * c->hd;
                for (int64_t e = 0; e < c->hd; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < c->T; j++) acc += c->row[j] * c->v[(b * c->T + j) * D + h * c->hd + e];
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

static bool masked_out(int64_t b, int64_t j, int64_t T)
{
    return b > 0 && ((j >= T / 3 && j < 2 * T / 3) || (T > 256 && j < 260));
}

typedef struct mask_data {
    float *kb, *qg; /* rows `stride` apart; the padding between them is NaN */
    attn_mask m;
    double *kb_d, *qg_d; /* the same, dense (B, T), for the reference */
} mask_data;

/* The mask of `kind` for B samples of T tokens, rows `stride` >= T apart, or 0: one row for the batch (sample 0's).
 * m.key_bias is NULL for MASK_NONE. */
static mask_data make_mask(int kind, int64_t B, int64_t T, int64_t stride, uint64_t seed)
{
    mask_data d = {0};
    if (kind == MASK_NONE) return d;
    const int64_t rows = stride ? B : 1, n = stride ? (B - 1) * stride + T : T;
    d.kb = alloc_fill((size_t)n, NAN);
    d.qg = kind == MASK_BOOL ? NULL : alloc_fill((size_t)n, NAN);
    float *r1 = malloc((size_t)T * sizeof(float)), *r2 = malloc((size_t)T * sizeof(float));
    for (int64_t b = 0; b < rows; b++) {
        tk_fill(r1, T, seed + (uint64_t)b, -2.0f, 2.0f), tk_fill(r2, T, seed + 100 + (uint64_t)b, -1.5f, 1.5f);
        for (int64_t j = 0; j < T; j++) {
            const bool out = masked_out(b, j, T);
            float *kb = d.kb + b * stride + j, *qg = d.qg ? d.qg + b * stride + j : NULL;
            if (kind == MASK_BOOL) *kb = out ? -INFINITY : 0.0f;
            if (kind == MASK_CHROMA) *kb = *qg = out ? 0.0f : 1.0f;
            if (kind == MASK_FLOAT) *kb = out ? -INFINITY : r1[j], *qg = j % 5 == 2 ? 0.0f : r2[j];
        }
    }
    free(r1), free(r2);
    d.m = (attn_mask){d.kb, d.qg, stride};
    d.kb_d = malloc((size_t)(B * T) * sizeof(double));
    d.qg_d = d.qg ? malloc((size_t)(B * T) * sizeof(double)) : NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < T; j++) {
            d.kb_d[b * T + j] = d.kb[b * stride + j];
            if (d.qg) d.qg_d[b * T + j] = d.qg[b * stride + j];
        }
    return d;
}

static const attn_mask *mask_of(const mask_data *d) { return d->kb ? &d->m : NULL; }
static void free_mask(mask_data *d) { free(d->kb), free(d->qg), free(d->kb_d), free(d->qg_d); }

/* ---- strided views over malloc'd buffers ---- */

enum { LAYOUT_CONTIG, LAYOUT_PACKED };
static const float PAD = 12345.0f; /* what padding of output buffers holds, and must still hold after */

typedef struct buffers {
    int64_t B, T, D;
    int layout;
    float *in, *kin, *vin;    /* q (or packed qkv), k, v */
    float *out, *dout;        /* out, dout */
    float *din, *dkin, *dvin; /* dq (or packed dqkv), dk, dv */
    size_t n_in, n_out, n_dout;
    attn_view q, k, v, o, dO, dq, dk, dv;
} buffers;

static attn_view mk_view(float *base, int64_t ts, int64_t bs) { return (attn_view){base, ts, bs}; }

/* Contiguous: every operand (B,T,D) on its own. Packed: q/k/v thirds of a (B,T,3D) buffer with a gap
 * between batches, dq/dk/dv likewise, out and dout with their own padded strides. Input padding is NaN,
 * so reading it would poison results; output padding is PAD, checked after. */
static buffers make_buffers(int64_t B, int64_t T, int64_t D, int layout)
{
    buffers z = {.B = B, .T = T, .D = D, .layout = layout};
    if (layout == LAYOUT_CONTIG) {
        const int64_t bs = T * D;
        z.n_in = z.n_out = z.n_dout = (size_t)(B * bs);
        z.in = alloc_fill(z.n_in, NAN), z.kin = alloc_fill(z.n_in, NAN), z.vin = alloc_fill(z.n_in, NAN);
        z.out = alloc_fill(z.n_out, PAD), z.dout = alloc_fill(z.n_dout, NAN);
        z.din = alloc_fill(z.n_in, PAD), z.dkin = alloc_fill(z.n_in, PAD), z.dvin = alloc_fill(z.n_in, PAD);
        z.q = mk_view(z.in, D, bs), z.k = mk_view(z.kin, D, bs), z.v = mk_view(z.vin, D, bs);
        z.o = mk_view(z.out, D, bs), z.dO = mk_view(z.dout, D, bs);
        z.dq = mk_view(z.din, D, bs), z.dk = mk_view(z.dkin, D, bs), z.dv = mk_view(z.dvin, D, bs);
    } else {
        const int64_t bs = T * 3 * D + 7, obs = T * (D + 3) + 5, dbs = T * (D + 1) + 2;
        z.n_in = (size_t)(B * bs), z.n_out = (size_t)(B * obs), z.n_dout = (size_t)(B * dbs);
        z.in = alloc_fill(z.n_in, NAN), z.out = alloc_fill(z.n_out, PAD), z.dout = alloc_fill(z.n_dout, NAN);
        z.din = alloc_fill(z.n_in, PAD);
        z.q = mk_view(z.in, 3 * D, bs), z.k = mk_view(z.in + D, 3 * D, bs), z.v = mk_view(z.in + 2 * D, 3 * D, bs);
        z.o = mk_view(z.out, D + 3, obs), z.dO = mk_view(z.dout, D + 1, dbs);
        z.dq = mk_view(z.din, 3 * D, bs), z.dk = mk_view(z.din + D, 3 * D, bs), z.dv = mk_view(z.din + 2 * D, 3 * D, bs);
    }
    return z;
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

/* Counts elements of buf outside the view `a` (D columns of each token) that no longer hold PAD. */
static int64_t pad_damage(const float *buf, size_t n, attn_view a, int64_t B, int64_t T, int64_t D)
{
    char *covered = calloc(n, 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) memset(covered + (a.data - buf) + b * a.batch_stride + t * a.token_stride, 1, (size_t)D);
    int64_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !covered[i] && buf[i] != PAD;
    free(covered);
    return bad;
}

/* ---- one forward + backward through the op ---- */

typedef struct result {
    float *o, *dq, *dk, *dv; /* contiguous (B,T,D) */
} result;

static result alloc_result(int64_t n)
{
    return (result){malloc((size_t)n * sizeof(float)), malloc((size_t)n * sizeof(float)),
                    malloc((size_t)n * sizeof(float)), malloc((size_t)n * sizeof(float))};
}

static void free_result(result *r) { free(r->o), free(r->dq), free(r->dk), free(r->dv); }

/* Forward with keep, backward with dout into gradients that start at g0 (NULL: zero); results gathered
 * contiguous. Also checks that padding around outputs and gradients is untouched. A NULL mask calls the plain
 * ops. */
static void run_op(const attn_shape *s, const attn_mask *mask, int layout, const float *q, const float *k,
                   const float *v, const float *dout, const float *g0, result *r)
{
    const int64_t B = s->batch, T = s->tokens, D = s->heads * s->head_dim, n = B * T * D;
    buffers z = make_buffers(B, T, D, layout);
    scatter(z.q, q, B, T, D), scatter(z.k, k, B, T, D), scatter(z.v, v, B, T, D), scatter(z.dO, dout, B, T, D);
    float *zero = calloc((size_t)n, sizeof(float));
    const float *init = g0 ? g0 : zero;
    scatter(z.dq, init, B, T, D), scatter(z.dk, init, B, T, D), scatter(z.dv, init, B, T, D);
    op_state keep = {0};
    if (mask) {
        CHECK(attention_forward_masked(P, s, mask, z.o, z.q, z.k, z.v, &keep) == ST_OK);
        CHECK(attention_backward_masked(P, s, mask, z.dq, z.dk, z.dv, z.dO, z.q, z.k, z.v, z.o, &keep) == ST_OK);
    } else {
        CHECK(attention_forward(P, s, z.o, z.q, z.k, z.v, &keep) == ST_OK);
        CHECK(attention_backward(P, s, z.dq, z.dk, z.dv, z.dO, z.q, z.k, z.v, z.o, &keep) == ST_OK);
    }
    op_state_release(&keep);
    gather(r->o, z.o, B, T, D), gather(r->dq, z.dq, B, T, D), gather(r->dk, z.dk, B, T, D), gather(r->dv, z.dv, B, T, D);
    int64_t bad = pad_damage(z.out, z.n_out, z.o, B, T, D);
    if (layout == LAYOUT_PACKED) {
        /* dq, dk, dv together cover the 3D columns of each token; only the batch gaps are padding */
        attn_view all = {z.din, 3 * D, z.dq.batch_stride};
        bad += pad_damage(z.din, z.n_in, all, B, T, 3 * D);
    }
    CHECKF(bad == 0, "%lld padding elements written outside the views", (long long)bad);
    free(zero);
    free_buffers(&z);
}

/* ---- data ---- */

typedef struct data {
    int64_t n;
    float *q, *k, *v, *w;
} data;

static data make_data(const attn_shape *s, uint64_t seed)
{
    data d = {.n = s->batch * s->tokens * s->heads * s->head_dim};
    d.q = malloc((size_t)d.n * sizeof(float)), d.k = malloc((size_t)d.n * sizeof(float));
    d.v = malloc((size_t)d.n * sizeof(float)), d.w = malloc((size_t)d.n * sizeof(float));
    /* wide enough that the softmax is far from uniform */
    tk_fill(d.q, d.n, seed, -1.5f, 1.5f), tk_fill(d.k, d.n, seed + 1, -1.5f, 1.5f);
    tk_fill(d.v, d.n, seed + 2, -1.0f, 1.0f), tk_fill(d.w, d.n, seed + 3, -1.0f, 1.0f);
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
static void check_against_reference(int64_t B, int64_t T, int64_t H, int64_t hd, int64_t check, uint64_t seed,
                                    int mask_kind)
{
    attn_shape s = {B, T, H, hd, ATTN_MATH, 0, 0, 0};
    data d = make_data(&s, seed);
    const int64_t n = d.n;
    mask_data md = make_mask(mask_kind, B, T, T + 3, seed + 7);
    ref_ctx c = {B, T, H, hd, malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(n * sizeof(double)),
                 malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(T * sizeof(double)), md.kb_d,
                 md.qg_d};
    tk_to_double(c.q, d.q, n), tk_to_double(c.k, d.k, n), tk_to_double(c.v, d.v, n), tk_to_double(c.w, d.w, n);
    ref_forward(&c);
    double *o_ref = malloc(n * sizeof(double));
    memcpy(o_ref, c.o, n * sizeof(double));

    const int64_t m = check < n ? check : n;
    int64_t *idx = malloc(m * sizeof(int64_t));
    for (int64_t i = 0; i < m; i++) idx[i] = m == n ? i : i * (n - 1) / (m - 1);
    double *fd[3];
    double *xs[3] = {c.q, c.k, c.v};
    for (int g = 0; g < 3; g++) {
        fd[g] = malloc(m * sizeof(double));
        for (int64_t i = 0; i < m; i++) tk_numeric_grad(ref_loss, &c, xs[g] + idx[i], 1, 1e-6, &fd[g][i]);
    }

    result r = alloc_result(n);
    float *sub = malloc(m * sizeof(float));
    char what[96];
    for (int mech = ATTN_MATH; mech <= ATTN_FLASH; mech++)
        for (int layout = LAYOUT_CONTIG; layout <= LAYOUT_PACKED; layout++) {
            s.mechanism = (attention_mechanism)mech;
            run_op(&s, mask_of(&md), layout, d.q, d.k, d.v, d.w, NULL, &r);
            snprintf(what, sizeof what, "%s %s %s T=%lld forward", mech_name(s.mechanism), layout_name(layout),
                     mask_name(mask_kind), (long long)T);
            tk_expect_close(what, r.o, o_ref, n, 1e-5);
            const float *got[3] = {r.dq, r.dk, r.dv};
            const char *gn[3] = {"dq", "dk", "dv"};
            for (int g = 0; g < 3; g++) {
                for (int64_t i = 0; i < m; i++) sub[i] = got[g][idx[i]];
                snprintf(what, sizeof what, "%s %s %s T=%lld %s vs FD (%lld el)", mech_name(s.mechanism),
                         layout_name(layout), mask_name(mask_kind), (long long)T, gn[g], (long long)m);
                tk_expect_close(what, sub, fd[g], m, 1e-4);
            }
        }
    free(sub), free_result(&r), free(idx), free(o_ref);
    for (int g = 0; g < 3; g++) free(fd[g]);
    free(c.q), free(c.k), free(c.v), free(c.w), free(c.o), free(c.row);
    free_data(&d), free_mask(&md);
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
static void check_math_vs_flash(int64_t B, int64_t T, int64_t H, int64_t hd, int mask_kind)
{
    attn_shape sm = {B, T, H, hd, ATTN_MATH, 0, 0, 0}, sf = sm;
    sf.mechanism = ATTN_FLASH;
    data d = make_data(&sm, 77 + (uint64_t)T);
    mask_data md = make_mask(mask_kind, B, T, T, 3);
    result rm = alloc_result(d.n), rf = alloc_result(d.n);
    run_op(&sm, mask_of(&md), LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &rm);
    run_op(&sf, mask_of(&md), LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &rf);
    char what[96];
    const float *a[4] = {rf.o, rf.dq, rf.dk, rf.dv}, *b[4] = {rm.o, rm.dq, rm.dk, rm.dv};
    const char *nm[4] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++) {
        snprintf(what, sizeof what, "flash vs math %s T=%lld %s", mask_name(mask_kind), (long long)T, nm[i]);
        expect_close_f(what, a[i], b[i], d.n, 1e-5);
    }
    free_result(&rm), free_result(&rf), free_data(&d), free_mask(&md);
}

/* 4: kept and workspace bytes against the pool, and OOM; with a mask too, which adds nothing to either
 * statement. A NULL mask is the plain op (checked bitwise in check_plain_unchanged). */
static void check_memory(attention_mechanism mech, int threads, int mask_kind)
{
    ops_set_threads(threads);
    const int64_t B = 2, T = 70, H = 3, hd = 8, D = H * hd;
    attn_shape s = {B, T, H, hd, mech, 0, 0, 0};
    data d = make_data(&s, 5);
    mask_data md = make_mask(mask_kind, B, T, 0, 13);
    const attn_mask *mask = mask_of(&md);
    buffers z = make_buffers(B, T, D, LAYOUT_PACKED);
    scatter(z.q, d.q, B, T, D), scatter(z.k, d.k, B, T, D), scatter(z.v, d.v, B, T, D), scatter(z.dO, d.w, B, T, D);
    memset(z.din, 0, z.n_in * sizeof(float));

    /* something unrelated is live, so that the baseline is not zero */
    void *other = NULL;
    CHECK(pool_alloc(P, 1000, MEM_ACTIVATIONS, "unrelated", &other) == ST_OK);
    const size_t base = pool_live(P);
    const size_t kept = attention_kept_bytes(&s);
    const size_t ws_f = attention_workspace_bytes(&s, threads, ATTN_FORWARD);
    const size_t ws_keep = attention_workspace_bytes(&s, threads, ATTN_FORWARD_KEEP);
    const size_t ws_b = attention_workspace_bytes(&s, threads, ATTN_BACKWARD);
    const size_t want_kept = (size_t)(B * H * T) * (mech == ATTN_MATH ? (size_t)T : 1) * sizeof(float);
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

/* 5: determinism. Each (batch, head) pair is computed entirely by one thread with single-threaded BLAS in
 * a fixed order, so neither a rerun nor the thread count can change a single bit. */
static void check_determinism(attention_mechanism mech, int mask_kind)
{
    attn_shape s = {2, 130, 3, 16, mech, 0, 0, 0};
    data d = make_data(&s, 99);
    mask_data md = make_mask(mask_kind, 2, 130, 130, 41);
    const attn_mask *mask = mask_of(&md);
    result r1 = alloc_result(d.n), r2 = alloc_result(d.n), r3 = alloc_result(d.n);
    ops_set_threads(2);
    CHECK(ops_threads() == 2);
    run_op(&s, mask, LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &r1);
    run_op(&s, mask, LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &r2);
    ops_set_threads(1);
    CHECK(ops_threads() == 1);
    run_op(&s, mask, LAYOUT_PACKED, d.q, d.k, d.v, d.w, NULL, &r3);
    ops_set_threads(2);
    char what[96];
    const float *a[4] = {r1.o, r1.dq, r1.dk, r1.dv}, *b[4] = {r2.o, r2.dq, r2.dk, r2.dv},
                *c[4] = {r3.o, r3.dq, r3.dk, r3.dv};
    const char *nm[4] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++) {
        snprintf(what, sizeof what, "%s %s rerun bitwise %s", mech_name(mech), mask_name(mask_kind), nm[i]);
        tk_expect_bitwise(what, b[i], a[i], d.n);
        snprintf(what, sizeof what, "%s %s 1 vs 2 threads bitwise %s", mech_name(mech), mask_name(mask_kind), nm[i]);
        tk_expect_bitwise(what, c[i], a[i], d.n);
    }

    /* 6: backward accumulates: starting from g0 gives g0 + g (fp32 rounding of the sum apart) */
    float *g0 = malloc((size_t)d.n * sizeof(float));
    tk_fill(g0, d.n, 1234, -0.05f, 0.05f);
    run_op(&s, mask, LAYOUT_CONTIG, d.q, d.k, d.v, d.w, g0, &r2);
    double *want = malloc((size_t)d.n * sizeof(double));
    const float *got[3] = {r2.dq, r2.dk, r2.dv}, *g[3] = {r1.dq, r1.dk, r1.dv};
    for (int i = 0; i < 3; i++) {
        for (int64_t e = 0; e < d.n; e++) want[e] = (double)g0[e] + g[i][e];
        snprintf(what, sizeof what, "%s %s accumulates into %s", mech_name(mech), mask_name(mask_kind), nm[i + 1]);
        tk_expect_close(what, got[i], want, d.n, 1e-5);
    }
    free(want), free(g0);
    free_result(&r1), free_result(&r2), free_result(&r3), free_data(&d), free_mask(&md);
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
    const attn_mask zero_mask = {zero, NULL, T};
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
        attn_mask m = {kb, NULL, T};
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
                                           "key_bias is NULL", "batch_stride -1", NULL};
        if (names[c]) CHECKF(strstr(st_error(), names[c]), "refusal case %d said \"%s\"", c, st_error());
        CHECKF(pool_live(P) == keep.bytes, "%s refusal case %d: %zu bytes live", mech_name(mech), c, pool_live(P));
        op_state_release(&keep);
    }
    free_buffers(&z), free_data(&d);
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
