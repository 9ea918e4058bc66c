/* The attention mask's structure (ops.h: segment, causal) against a double-precision reference that builds the whole
 * T x T mask: block-diagonal segments (Ideogram), causal, and block-causal (Qwen-Image 2.1: causal text, then image
 * blocks each bidirectional), alone and with a key_bias that excludes padding; math and flash, grouped queries too.
 * The reference's backward is checked by central differences on small cases, then the ops against it on sequences of
 * several flash tiles (rows whose tiles are all hidden included); flash's recompute gives the forward's bits; bad
 * structures are refused in one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

typedef struct ref {
    int64_t T, H, KVH, hd;
    const double *q, *k, *v, *w; /* one sample: (T, H hd), (T, KVH hd) x 2, w: d loss / d out */
    const float *seg, *kb;        /* the mask (kb may be NULL) */
    bool causal;
    double *out;
} ref;

static bool ref_sees(const ref *r, int64_t i, int64_t j)
{
    if (r->kb && r->kb[j] == -INFINITY) return false;
    if (!r->seg && !r->causal) return true;
    return (r->causal && j <= i) || (r->seg && r->seg[i] == r->seg[j]);
}

/* out (T, H hd) and, when dq is not NULL, the gradients of sum(w * out) in closed form */
static void ref_run(ref *r, double *dq, double *dk, double *dv)
{
    const int64_t T = r->T, H = r->H, hd = r->hd, D = H * hd, K = r->KVH * hd, G = H / r->KVH;
    const double scale = 1.0 / sqrt((double)hd);
    double *p = calloc((size_t)T, sizeof(double)), *dp = calloc((size_t)T, sizeof(double));
    for (int64_t h = 0; h < H; h++) {
        const int64_t g = h / G;
        for (int64_t i = 0; i < T; i++) {
            double m = -INFINITY;
            for (int64_t j = 0; j < T; j++) {
                p[j] = -INFINITY;
                if (!ref_sees(r, i, j)) continue;
                double sdot = 0;
                for (int64_t c = 0; c < hd; c++) sdot += r->q[i * D + h * hd + c] * r->k[j * K + g * hd + c];
                p[j] = sdot * scale + (r->kb ? r->kb[j] : 0.0);
                m = fmax(m, p[j]);
            }
            double sum = 0;
            for (int64_t j = 0; j < T; j++) sum += p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - m);
            for (int64_t j = 0; j < T; j++) p[j] /= sum;
            for (int64_t c = 0; c < hd; c++) {
                double o = 0;
                for (int64_t j = 0; j < T; j++) o += p[j] * r->v[j * K + g * hd + c];
                r->out[i * D + h * hd + c] = o;
            }
            if (!dq) continue;
            const double *wi = r->w + i * D + h * hd;
            double rowsum = 0;
            for (int64_t j = 0; j < T; j++) {
                double s2 = 0;
                for (int64_t c = 0; c < hd; c++)
                    s2 += wi[c] * r->v[j * K + g * hd + c], dv[j * K + g * hd + c] += p[j] * wi[c];
                dp[j] = s2;
                rowsum += p[j] * s2;
            }
            for (int64_t j = 0; j < T; j++) {
                const double ds = p[j] * (dp[j] - rowsum) * scale;
                for (int64_t c = 0; c < hd; c++) {
                    dq[i * D + h * hd + c] += ds * r->k[j * K + g * hd + c];
                    dk[j * K + g * hd + c] += ds * r->q[i * D + h * hd + c];
                }
            }
        }
    }
    free(p), free(dp);
}

static double ref_loss(void *ctx)
{
    ref *r = ctx;
    ref_run(r, NULL, NULL, NULL);
    double s = 0;
    for (int64_t i = 0; i < r->T * r->H * r->hd; i++) s += r->w[i] * r->out[i];
    return s;
}

typedef struct kase {
    const char *name;
    int64_t T, H, KVH, hd;
    bool causal, segments, pad; /* pad: the last tokens excluded by key_bias */
} kase;

/* segments as the families make them: with causal, text tokens each their own id, then image blocks of a few dozen
 * tokens; without, packed samples of uneven lengths with ids out of order */
static void make_segments(float *seg, int64_t T, bool causal)
{
    const int64_t text = causal ? T / 4 : 0;
    for (int64_t i = 0; i < T; i++)
        seg[i] = i < text ? (float)(1000 + i)
                 : causal ? (float)((i - text) / (T / 5 + 3))
                          : (float)((i * 7 / T + 3) % 5);
}

static void run_case(const kase *c, attention_mechanism mech, bool fd)
{
    const int64_t B = 2, T = c->T, H = c->H, KVH = c->KVH, hd = c->hd, D = H * hd, K = KVH * hd;
    const int64_t nq = B * T * D, nk = B * T * K;
    float *q = malloc(nq * sizeof(float)), *k = malloc(nk * sizeof(float)), *v = malloc(nk * sizeof(float));
    float *w = malloc(nq * sizeof(float)), *out = malloc(nq * sizeof(float)), *out2 = malloc(nq * sizeof(float));
    float *dq = calloc(nq, sizeof(float)), *dk = calloc(nk, sizeof(float)), *dv = calloc(nk, sizeof(float));
    float *seg = malloc(B * T * sizeof(float)), *kb = malloc(B * T * sizeof(float));
    tk_fill(q, nq, 11 + T, -1.5f, 1.5f), tk_fill(k, nk, 12 + T, -1.5f, 1.5f), tk_fill(v, nk, 13 + T, -1, 1);
    tk_fill(w, nq, 14 + T, -1, 1);
    for (int64_t b = 0; b < B; b++) {
        make_segments(seg + b * T, T, c->causal);
        if (b) seg[b * T] = seg[b * T + 1]; /* the second sample's first two share a segment */
        for (int64_t j = 0; j < T; j++) kb[b * T + j] = c->pad && j >= T - (b + 1) * 3 ? -INFINITY : 0.0f;
    }
    if (c->pad && c->segments && !c->causal) /* a padded key's segment keeps a kept key: pad inside the last segment */
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = T - 8; j < T; j++) seg[b * T + j] = seg[b * T + T - 9];
    const attn_mask m = {.key_bias = c->pad ? kb : NULL, .batch_stride = T, .segment = c->segments ? seg : NULL,
                         .causal = c->causal};
    const attn_shape s = {.batch = B, .tokens = T, .heads = H, .head_dim = hd, .mechanism = mech, .kv_heads = KVH};
    pool *p = pool_create(POOL_DEVICE, 0);
    op_state keep = {0};
    const attn_view vq = {q, D, T * D}, vk = {k, K, T * K}, vv = {v, K, T * K}, vo = {out, D, T * D};
    CHECKF(attention_forward_masked(p, &s, &m, vo, vq, vk, vv, &keep) == ST_OK, "%s: %s", c->name, st_error());
    CHECK(attention_forward_masked(p, &s, &m, (attn_view){out2, D, T * D}, vq, vk, vv, NULL) == ST_OK);
    CHECKF(attention_backward_masked(p, &s, &m, (attn_view){dq, D, T * D}, (attn_view){dk, K, T * K},
                                     (attn_view){dv, K, T * K}, (attn_view){w, D, T * D}, vq, vk, vv, vo,
                                     &keep) == ST_OK, "%s: %s", c->name, st_error());
    char what[128];
    const char *mn = mech == ATTN_MATH ? "math" : "flash";
    snprintf(what, sizeof what, "%s %s: forward without keep, same bits", mn, c->name);
    tk_expect_bitwise(what, out2, out, nq);
    for (int64_t b = 0; b < B; b++) { /* against the reference, sample by sample */
        double *dd = malloc((size_t)(4 * nq + 3 * nk) * sizeof(double));
        double *rq = dd, *rk = rq + nq / B, *rv = rk + nk / B, *rw = rv + nk / B, *ro = rw + nq / B;
        double *gq = ro + nq / B, *gk = gq + nq / B, *gv = gk + nk / B;
        memset(gq, 0, (size_t)(nq / B + 2 * nk / B) * sizeof(double));
        tk_to_double(rq, q + b * T * D, T * D), tk_to_double(rk, k + b * T * K, T * K);
        tk_to_double(rv, v + b * T * K, T * K), tk_to_double(rw, w + b * T * D, T * D);
        ref r = {.T = T, .H = H, .KVH = KVH, .hd = hd, .q = rq, .k = rk, .v = rv, .w = rw, .seg = m.segment ?
                 seg + b * T : NULL, .kb = m.key_bias ? kb + b * T : NULL, .causal = c->causal, .out = ro};
        ref_run(&r, gq, gk, gv);
        snprintf(what, sizeof what, "%s %s sample %lld: out", mn, c->name, (long long)b);
        tk_expect_close(what, out + b * T * D, ro, T * D, 1e-5);
        snprintf(what, sizeof what, "%s %s sample %lld: dq", mn, c->name, (long long)b);
        tk_expect_close(what, dq + b * T * D, gq, T * D, 1e-4);
        snprintf(what, sizeof what, "%s %s sample %lld: dk", mn, c->name, (long long)b);
        tk_expect_close(what, dk + b * T * K, gk, T * K, 1e-4);
        snprintf(what, sizeof what, "%s %s sample %lld: dv", mn, c->name, (long long)b);
        tk_expect_close(what, dv + b * T * K, gv, T * K, 1e-4);
        if (fd && !b) { /* the reference's closed form against central differences */
            double *num = malloc((size_t)(T * D) * sizeof(double));
            float *got = malloc((size_t)(T * D) * sizeof(float));
            tk_numeric_grad(ref_loss, &r, rq, T * D, 1e-6, num);
            for (int64_t i = 0; i < T * D; i++) got[i] = (float)gq[i];
            snprintf(what, sizeof what, "reference %s: dq vs central differences", c->name);
            tk_expect_close(what, got, num, T * D, 1e-5);
            tk_numeric_grad(ref_loss, &r, rk, T * K, 1e-6, num);
            for (int64_t i = 0; i < T * K; i++) got[i] = (float)gk[i];
            snprintf(what, sizeof what, "reference %s: dk vs central differences", c->name);
            tk_expect_close(what, got, num, T * K, 1e-5);
            free(num), free(got);
        }
        free(dd);
    }
    op_state_release(&keep);
    CHECK(pool_destroy(p) == 0);
    free(q), free(k), free(v), free(w), free(out), free(out2), free(dq), free(dk), free(dv), free(seg), free(kb);
}

/* A hidden key is out of a query's row exactly: segment 0's keys and values made huge (scores near 1e4 against its
 * neighbours', values 1e30) change no bit of any other segment's outputs or of their q gradient, in math and flash */
static void test_hidden_exactly(attention_mechanism mech)
{
    enum { B = 1, T = 600, H = 2, hd = 8, D = H * hd };
    float *q = malloc(T * D * sizeof(float)), *k = malloc(T * D * sizeof(float)), *v = malloc(T * D * sizeof(float));
    float *w = malloc(T * D * sizeof(float)), *seg = malloc(T * sizeof(float)), *out[2], *dq[2];
    tk_fill(q, T * D, 41, -1, 1), tk_fill(k, T * D, 42, -1, 1), tk_fill(v, T * D, 43, -1, 1);
    tk_fill(w, T * D, 44, -1, 1);
    for (int64_t i = 0; i < T; i++) seg[i] = (float)(i % 3 == 0 ? 0 : 1 + i / 200); /* segment 0 strewn through */
    const attn_mask m = {.segment = seg, .batch_stride = T};
    const attn_shape s = {.batch = B, .tokens = T, .heads = H, .head_dim = hd, .mechanism = mech};
    for (int run = 0; run < 2; run++) {
        if (run)
            for (int64_t i = 0; i < T; i += 3)
                for (int64_t c = 0; c < D; c++) k[i * D + c] = 300.0f * (q[(i + 1) % T * D + c] > 0 ? 1 : -1),
                                                v[i * D + c] = 1e30f;
        out[run] = calloc(T * D, sizeof(float)), dq[run] = calloc(T * D, sizeof(float));
        pool *p = pool_create(POOL_DEVICE, 0);
        op_state keep = {0};
        const attn_view vq = {q, D, T * D}, vk = {k, D, T * D}, vv = {v, D, T * D}, vo = {out[run], D, T * D};
        CHECK(attention_forward_masked(p, &s, &m, vo, vq, vk, vv, &keep) == ST_OK);
        CHECK(attention_backward_masked(p, &s, &m, (attn_view){dq[run], D, T * D}, (attn_view){NULL, D, T * D},
                                        (attn_view){NULL, D, T * D}, (attn_view){w, D, T * D}, vq, vk, vv, vo,
                                        &keep) == ST_OK);
        op_state_release(&keep);
        CHECK(pool_destroy(p) == 0);
    }
    int64_t differ = 0;
    for (int64_t i = 0; i < T; i++)
        for (int64_t c = 0; i % 3 && c < D; c++)
            differ += memcmp(&out[0][i * D + c], &out[1][i * D + c], sizeof(float)) != 0 ||
                      memcmp(&dq[0][i * D + c], &dq[1][i * D + c], sizeof(float)) != 0;
    CHECKF(differ == 0, "%s: huge hidden keys and values changed %lld bits of other segments' outputs and dq",
           mech == ATTN_MATH ? "math" : "flash", (long long)differ);
    printf("ok   %s: huge keys and values of a hidden segment change no bit of the others'\n",
           mech == ATTN_MATH ? "math" : "flash");
    free(q), free(k), free(v), free(w), free(seg);
    for (int run = 0; run < 2; run++) free(out[run]), free(dq[run]);
}

/* One line each: a non-finite segment; a query whose segment has no kept key; a structure with cross-attention or a
 * window; causal with the first keys all excluded */
static void test_refusals(void)
{
    enum { T = 6 };
    float q[T * 8] = {0}, out[T * 8];
    float seg[T] = {0, 0, 1, 1, 2, 2}, kb[T] = {0, 0, -INFINITY, -INFINITY, 0, 0};
    const attn_view v = {q, 8, T * 8}, o = {out, 8, T * 8};
    const struct {
        attn_mask m;
        attn_shape s;
        const char *says;
    } bad[] = {
        {{.segment = seg, .batch_stride = T}, {1, T, 1, 8, ATTN_FLASH, 0, 0, 0}, "segment[0][3] is nan"},
        {{.key_bias = kb, .segment = seg, .batch_stride = T}, {1, T, 1, 8, ATTN_FLASH, 0, 0, 0}, "query 2 of sample 0"},
        {{.segment = seg, .batch_stride = T}, {1, T, 1, 8, ATTN_FLASH, 4, 0, 0}, "for self-attention"},
        {{.causal = true}, {1, T, 1, 8, ATTN_MATH, 0, 0, 2}, "without a window"},
        {{.key_bias = kb, .causal = true, .batch_stride = T}, {1, T, 1, 8, ATTN_FLASH, 0, 0, 0}, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        seg[3] = i == 0 ? NAN : 1.0f;
        kb[0] = kb[1] = i == 4 ? -INFINITY : 0.0f; /* causal: queries 0 .. 3 see no kept key */
        pool *p = pool_create(POOL_DEVICE, 0);
        const st_status st = attention_forward_masked(p, &bad[i].s, &bad[i].m, o, v, v, v, NULL);
        const char *want = bad[i].says ? bad[i].says : "query 0 of sample 0";
        CHECKF(st == ST_ERR_INVALID && strstr(st_error(), want) && !strchr(st_error(), '\n'), "case %zu: %s", i,
               st_error());
        CHECK(pool_destroy(p) == 0);
    }
}

int main(void)
{
    const kase small[] = {
        {"segments", 13, 2, 2, 4, false, true, false},
        {"causal", 11, 2, 1, 4, true, false, false},
        {"block-causal", 17, 2, 2, 4, true, true, false},
        {"block-causal, padded", 17, 4, 2, 4, true, true, true},
        {"segments, padded", 19, 2, 2, 4, false, true, true},
    };
    for (size_t i = 0; i < sizeof small / sizeof *small; i++)
        for (int mech = 0; mech < 2; mech++) run_case(&small[i], (attention_mechanism)mech, mech == 0);
    /* several flash tiles (256 keys, 512 queries a tile): whole tiles hidden from some rows */
    const kase large[] = {
        {"segments, 3 key tiles", 700, 2, 1, 16, false, true, true},
        {"block-causal, 3 key tiles", 650, 2, 2, 8, true, true, true},
        {"causal, 2 query tiles", 1030, 1, 1, 8, true, false, false},
    };
    for (size_t i = 0; i < sizeof large / sizeof *large; i++) run_case(&large[i], ATTN_FLASH, false);
    test_hidden_exactly(ATTN_MATH);
    test_hidden_exactly(ATTN_FLASH);
    test_refusals();
    return tk_finish();
}
