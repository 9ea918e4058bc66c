/* Linear attention (ATTN_LINEAR, ops/cpu/attention_linear.c) against an independent double-precision reference and
 * central finite differences, plain and with a rotary table (Sana-Video's), over one chunk of tokens and several, one
 * segment and several, one group of heads and several, in a contiguous and a packed-qkv layout, at 1 and 2 threads
 * (bitwise the same); its
 * kept state is hd (hd + 1) floats a head whatever the tokens; what it does not take is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

/* ---- double reference, contiguous (B, T, H hd) ---- */
typedef struct ref {
    int64_t B, T, H, hd;
    double *q, *k, *v, *w, *o;
    const float *rope; /* (T, hd/2, 2) or NULL */
} ref;

/* x (hd) = relu(in), then turned by token t's rows of the table when there is one */
static void ref_features(double *x, const double *in, const float *rope, int64_t t, int64_t hd)
{
    for (int64_t i = 0; i < hd; i++) x[i] = in[i] > 0 ? in[i] : 0;
    for (int64_t p = 0; rope && p < hd / 2; p++) {
        const double c = rope[(t * hd / 2 + p) * 2], s = rope[(t * hd / 2 + p) * 2 + 1], x0 = x[2 * p],
                     x1 = x[2 * p + 1];
        x[2 * p] = x0 * c - x1 * s, x[2 * p + 1] = x1 * c + x0 * s;
    }
}

static void ref_forward(ref *r)
{
    const int64_t D = r->H * r->hd, hd = r->hd;
    double *S = malloc((size_t)(hd * hd) * sizeof(double)), *z = malloc((size_t)hd * sizeof(double));
    double *x = malloc((size_t)hd * sizeof(double));
    for (int64_t b = 0; b < r->B; b++)
        for (int64_t h = 0; h < r->H; h++) {
            memset(S, 0, (size_t)(hd * hd) * sizeof(double)), memset(z, 0, (size_t)hd * sizeof(double));
            for (int64_t s = 0; s < r->T; s++) {
                const double *k = r->k + (b * r->T + s) * D + h * hd, *v = r->v + (b * r->T + s) * D + h * hd;
                for (int64_t i = 0; i < hd; i++) z[i] += k[i] > 0 ? k[i] : 0;
                ref_features(x, k, r->rope, s, hd);
                for (int64_t i = 0; i < hd; i++)
                    for (int64_t j = 0; j < hd; j++) S[i * hd + j] += x[i] * v[j];
            }
            for (int64_t t = 0; t < r->T; t++) {
                const double *q = r->q + (b * r->T + t) * D + h * hd;
                double *o = r->o + (b * r->T + t) * D + h * hd, den = 1e-15;
                for (int64_t i = 0; i < hd; i++) den += (q[i] > 0 ? q[i] : 0) * z[i];
                ref_features(x, q, r->rope, t, hd);
                for (int64_t j = 0; j < hd; j++) {
                    double num = 0;
                    for (int64_t i = 0; i < hd; i++) num += x[i] * S[i * hd + j];
                    o[j] = num / den;
                }
            }
        }
    free(S), free(z), free(x);
}

static double ref_loss(void *ctx)
{
    ref *r = ctx;
    ref_forward(r);
    double l = 0;
    for (int64_t i = 0; i < r->B * r->T * r->H * r->hd; i++) l += r->w[i] * r->o[i];
    return l;
}

/* q, k, v and their gradients, contiguous (stride D) or packed as one qkv buffer (stride 3 D) */
typedef struct run_out {
    float *o, *dq, *dk, *dv;
    size_t kept;
} run_out;

/* With poison_out, backward is handed NaNs for the forward's output: the linear mechanism does not read it. */
static run_out run(const attn_shape *s, const attn_mask *m, bool packed, int threads, const float *q, const float *k,
                   const float *v, const float *w, bool poison_out)
{
    const int64_t D = s->heads * s->head_dim, N = s->batch * s->tokens, ld = packed ? 3 * D : D;
    float *x = calloc((size_t)(N * ld * (packed ? 1 : 3)), sizeof(float)), *g = calloc((size_t)(N * ld * (packed ? 1 : 3)),
                                                                                        sizeof(float));
    float *xq = x, *xk = packed ? x + D : x + N * D, *xv = packed ? x + 2 * D : x + 2 * N * D;
    float *gq = g, *gk = packed ? g + D : g + N * D, *gv = packed ? g + 2 * D : g + 2 * N * D;
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = 0; j < D; j++)
            xq[r * ld + j] = q[r * D + j], xk[r * ld + j] = k[r * D + j], xv[r * ld + j] = v[r * D + j];
    run_out o = {calloc((size_t)(N * D), sizeof(float)), malloc((size_t)(N * D) * sizeof(float)),
                 malloc((size_t)(N * D) * sizeof(float)), malloc((size_t)(N * D) * sizeof(float)), 0};
    pool *p = pool_create(POOL_DEVICE, 0);
    ops_set_threads(threads);
    op_state keep = {0};
    const int64_t T = s->tokens;
    const attn_view vo = {o.o, D, T * D}, vq = {xq, ld, T * ld}, vk = {xk, ld, T * ld}, vv = {xv, ld, T * ld};
    CHECK(attention_forward_masked(p, s, m, vo, vq, vk, vv, &keep) == ST_OK);
    o.kept = keep.bytes;
    float *poison = poison_out ? malloc((size_t)(N * D) * sizeof(float)) : NULL;
    for (int64_t i = 0; poison && i < N * D; i++) poison[i] = NAN;
    CHECK(attention_backward_masked(p, s, m, (attn_view){gq, ld, T * ld}, (attn_view){gk, ld, T * ld},
                                    (attn_view){gv, ld, T * ld}, (attn_view){(float *)w, D, T * D}, vq, vk, vv,
                                    poison ? (attn_view){poison, D, T * D} : vo, &keep) == ST_OK);
    free(poison);
    op_state_release(&keep);
    CHECK(pool_destroy(p) == 0);
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = 0; j < D; j++)
            o.dq[r * D + j] = gq[r * ld + j], o.dk[r * D + j] = gk[r * ld + j], o.dv[r * D + j] = gv[r * ld + j];
    free(x), free(g);
    return o;
}

static void free_run(run_out *o) { free(o->o), free(o->dq), free(o->dk), free(o->dv); }

/* Central differences of ref_loss at picks elements of x spread over its rows and every head (every element when
 * picks is 0): their indices go to at, the differences to grad. Returns how many. */
static int64_t central_differences(ref *r, double *x, int64_t n, int64_t picks, int64_t *at, double *grad)
{
    if (!picks) {
        for (int64_t i = 0; i < n; i++) at[i] = i;
        tk_numeric_grad(ref_loss, r, x, n, 1e-6, grad);
        return n;
    }
    for (int64_t j = 0; j < picks; j++) {
        const int64_t D = r->H * r->hd, i = at[j] = j * (n / D) / picks * D + j % r->H * r->hd + j * 5 % r->hd;
        const double x0 = x[i];
        x[i] = x0 + 1e-6;
        const double up = ref_loss(r);
        x[i] = x0 - 1e-6;
        grad[j] = (up - ref_loss(r)) / 2e-6;
        x[i] = x0;
    }
    return picks;
}

/* rotated: with a rotary table of random angles (Sana-Video's form); picks: as central_differences */
static void test_shape(int64_t B, int64_t T, int64_t H, int64_t hd, bool rotated, int64_t picks, uint64_t seed)
{
    printf("-- linear attention B=%lld T=%lld H=%lld hd=%lld%s\n", (long long)B, (long long)T, (long long)H,
           (long long)hd, rotated ? ", rotated" : "");
    const attn_shape s = {.batch = B, .tokens = T, .heads = H, .head_dim = hd, .mechanism = ATTN_LINEAR};
    const int64_t n = B * T * H * hd;
    float *rope = rotated ? malloc((size_t)(T * hd) * sizeof(float)) : NULL;
    if (rope) {
        tk_fill(rope, T * hd, seed + 4, -3, 3); /* angles, then their (cos, sin) */
        for (int64_t i = 0; i < T * hd; i += 2) {
            const float a = rope[i];
            rope[i] = cosf(a), rope[i + 1] = sinf(a);
        }
    }
    const attn_mask mask = {.linear_rope = rope}, *m = rope ? &mask : NULL;
    float *q = malloc((size_t)n * sizeof(float)), *k = malloc((size_t)n * sizeof(float));
    float *v = malloc((size_t)n * sizeof(float)), *w = malloc((size_t)n * sizeof(float));
    tk_fill(q, n, seed, -1, 1), tk_fill(k, n, seed + 1, -0.5f, 1), tk_fill(v, n, seed + 2, -1, 1);
    tk_fill(w, n, seed + 3, -1, 1);
    ref r = {B, T, H, hd, malloc((size_t)n * sizeof(double)), malloc((size_t)n * sizeof(double)),
             malloc((size_t)n * sizeof(double)), malloc((size_t)n * sizeof(double)), malloc((size_t)n * sizeof(double)),
             rope};
    tk_to_double(r.q, q, n), tk_to_double(r.k, k, n), tk_to_double(r.v, v, n), tk_to_double(r.w, w, n);
    ref_forward(&r);
    double *o_ref = malloc((size_t)n * sizeof(double)), *fd[3];
    memcpy(o_ref, r.o, (size_t)n * sizeof(double));
    double *xs[3] = {r.q, r.k, r.v};
    int64_t *at = malloc((size_t)n * sizeof(int64_t)), picked_n = 0;
    float *picked = malloc((size_t)n * sizeof(float));
    for (int g = 0; g < 3; g++) {
        fd[g] = malloc((size_t)n * sizeof(double));
        picked_n = central_differences(&r, xs[g], n, picks, at, fd[g]);
    }
    run_out base = run(&s, m, false, 1, q, k, v, w, false);
    CHECKF(base.kept == (size_t)(B * H * hd * (hd + 1)) * sizeof(float), "kept %zu bytes", base.kept);
    for (int layout = 0; layout < 2; layout++)
        for (int threads = 1; threads <= 2; threads++) {
            run_out o = run(&s, m, layout == 1, threads, q, k, v, w, false);
            char what[96];
            snprintf(what, sizeof what, "%s, %d thread%s: forward", layout ? "packed" : "contig", threads,
                     threads > 1 ? "s" : "");
            tk_expect_close(what, o.o, o_ref, n, 1e-5);
            const float *got[3] = {o.dq, o.dk, o.dv};
            const char *names[3] = {"dq", "dk", "dv"};
            for (int g = 0; g < 3; g++) {
                snprintf(what, sizeof what, "%s, %d thread%s: %s against central differences",
                         layout ? "packed" : "contig", threads, threads > 1 ? "s" : "", names[g]);
                for (int64_t j = 0; j < picked_n; j++) picked[j] = got[g][at[j]];
                tk_expect_close(what, picked, fd[g], picked_n, 2e-4);
            }
            snprintf(what, sizeof what, "%s, %d thread%s: the same bits as contig at 1 thread",
                     layout ? "packed" : "contig", threads, threads > 1 ? "s" : "");
            tk_expect_bitwise(what, o.dq, base.dq, n);
            free_run(&o);
        }
    run_out blind = run(&s, m, false, 1, q, k, v, w, true);
    tk_expect_bitwise("backward with NaNs for the forward's output: dq unchanged", blind.dq, base.dq, n);
    tk_expect_bitwise("backward with NaNs for the forward's output: dk unchanged", blind.dk, base.dk, n);
    tk_expect_bitwise("backward with NaNs for the forward's output: dv unchanged", blind.dv, base.dv, n);
    free_run(&blind);
    free_run(&base);
    for (int g = 0; g < 3; g++) free(fd[g]);
    free(o_ref), free(r.q), free(r.k), free(r.v), free(r.w), free(r.o), free(q), free(k), free(v), free(w), free(rope);
    free(at), free(picked);
}

/* masks, cross-attention, grouped queries and windows are the softmax mechanisms' */
static void test_refusals(void)
{
    printf("-- what linear attention does not take is refused\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    float buf[64] = {0};
    const attn_view x = {buf, 4, 16};
    const attn_shape bad[] = {{.batch = 1, .tokens = 4, .heads = 2, .head_dim = 2, .mechanism = ATTN_LINEAR,
                               .kv_tokens = 3},
                              {.batch = 1, .tokens = 4, .heads = 2, .head_dim = 2, .mechanism = ATTN_LINEAR,
                               .kv_heads = 1},
                              {.batch = 1, .tokens = 4, .heads = 2, .head_dim = 2, .mechanism = ATTN_LINEAR,
                               .window = 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECKF(attention_forward(p, &bad[i], x, x, x, x, NULL) == ST_ERR_INVALID && strstr(st_error(), "linear"),
               "%s", st_error());
    const attn_shape ok = {.batch = 1, .tokens = 4, .heads = 2, .head_dim = 2, .mechanism = ATTN_LINEAR};
    const float kb[4] = {0};
    const attn_mask m = {.key_bias = kb}, causal = {.causal = true, .linear_rope = kb};
    CHECKF(attention_forward_masked(p, &ok, &m, x, x, x, x, NULL) == ST_ERR_INVALID && strstr(st_error(), "key_bias"),
           "%s", st_error());
    CHECKF(attention_forward_masked(p, &ok, &causal, x, x, x, x, NULL) == ST_ERR_INVALID &&
               strstr(st_error(), "causal"), "%s", st_error());
    const attn_shape flash = {.batch = 1, .tokens = 4, .heads = 2, .head_dim = 2, .mechanism = ATTN_FLASH};
    const attn_mask rot = {.linear_rope = kb};
    CHECKF(attention_forward_masked(p, &flash, &rot, x, x, x, x, NULL) == ST_ERR_INVALID &&
               strstr(st_error(), "linear_rope"), "%s", st_error());
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    test_shape(2, 7, 2, 4, false, 0, 11);
    test_shape(1, 33, 3, 8, false, 0, 12);
    test_shape(1, 600, 1, 4, false, 0, 13); /* two segments of tokens, the last short, in chunks, the last short */
    test_shape(2, 7, 2, 4, true, 0, 14);
    test_shape(1, 300, 2, 6, true, 0, 15);
    test_shape(1, 520, 9, 64, true, 18, 16); /* two groups of heads (8 and 1) by two segments */
    test_refusals();
    return tk_finish();
}
