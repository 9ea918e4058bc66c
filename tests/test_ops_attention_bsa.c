/* Block-sparse attention (ops.h bsa_attention_*, LongCat-Video's flash_attn_bsa_3d) against a double-precision
 * reference: the selection (blocks' mean q and k, their scores, top-k / cdf / both) recomputed in double and compared
 * where no two scores tie within 1e-4 at the cut; the attention over the op's selection in closed form, its gradients
 * checked by central differences; the op's output and gradients against it; selecting every block is dense attention;
 * a query block selecting nothing outputs zeros; forward without keep and across thread counts the same bits; kept and
 * workspace bytes to the byte, on a real pool and a dry one; refusals in one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

typedef struct ref {
    const bsa_shape *s;
    int64_t T, D;
    const double *q, *k, *v, *w; /* one sample: (T, H hd) each; w: d loss / d out */
    const unsigned char *sel;    /* the op's selection for this sample: (H, nq, nk) */
    double *out;
} ref;

static int64_t blocks(const int64_t grid[3], const int64_t c[3]) { return grid[0] / c[0] * (grid[1] / c[1]) * (grid[2] / c[2]); }

/* the block of token t in chunks c */
static int64_t block_of(const int64_t grid[3], const int64_t c[3], int64_t t)
{
    const int64_t ft = t / (grid[1] * grid[2]), fh = t / grid[2] % grid[1], fw = t % grid[2];
    return (ft / c[0] * (grid[1] / c[1]) + fh / c[1]) * (grid[2] / c[2]) + fw / c[2];
}

/* out and, with dq, the gradients of sum(w * out), over each query's selected keys */
static void ref_run(ref *r, double *dq, double *dk, double *dv)
{
    const bsa_shape *s = r->s;
    const int64_t T = r->T, D = r->D, hd = s->head_dim, H = s->heads;
    const int64_t nq = blocks(s->grid, s->chunk_q), nk = blocks(s->grid, s->chunk_k);
    const double scale = 1.0 / sqrt((double)hd);
    double *p = calloc((size_t)T, sizeof(double)), *dp = calloc((size_t)T, sizeof(double));
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < T; i++) {
            const unsigned char *row = r->sel + (h * nq + block_of(s->grid, s->chunk_q, i)) * nk;
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < T; j++) {
                p[j] = -INFINITY;
                if (!row[block_of(s->grid, s->chunk_k, j)]) continue;
                double d = 0;
                for (int64_t c = 0; c < hd; c++) d += r->q[i * D + h * hd + c] * r->k[j * D + h * hd + c];
                m = fmax(m, p[j] = d * scale);
            }
            for (int64_t j = 0; j < T; j++) sum += p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - m);
            for (int64_t j = 0; j < T; j++) p[j] = sum > 0 ? p[j] / sum : 0.0;
            for (int64_t c = 0; c < hd; c++) {
                double o = 0;
                for (int64_t j = 0; j < T; j++) o += p[j] * r->v[j * D + h * hd + c];
                r->out[i * D + h * hd + c] = o;
            }
            if (!dq) continue;
            const double *wi = r->w + i * D + h * hd;
            double rs = 0;
            for (int64_t j = 0; j < T; j++) {
                double d = 0;
                for (int64_t c = 0; c < hd; c++) d += wi[c] * r->v[j * D + h * hd + c], dv[j * D + h * hd + c] += p[j] * wi[c];
                rs += p[j] * (dp[j] = d);
            }
            for (int64_t j = 0; j < T; j++) {
                const double ds = p[j] * (dp[j] - rs) * scale;
                for (int64_t c = 0; c < hd; c++)
                    dq[i * D + h * hd + c] += ds * r->k[j * D + h * hd + c],
                        dk[j * D + h * hd + c] += ds * r->q[i * D + h * hd + c];
            }
        }
    free(p), free(dp);
}

static double ref_loss(void *ctx)
{
    ref *r = ctx;
    ref_run(r, NULL, NULL, NULL);
    double s = 0;
    for (int64_t i = 0; i < r->T * r->D; i++) s += r->w[i] * r->out[i];
    return s;
}

static int cmp_desc(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* The selection of one (sample, head) in double, against the op's: returns rows compared; rows whose cut falls
 * within 1e-4 of a tie are skipped (float may order them either way) */
static int64_t ref_select(const bsa_shape *s, const double *q, const double *k, int64_t D, int64_t h,
                          const unsigned char *sel, int64_t *wrong)
{
    const int64_t hd = s->head_dim, T = s->grid[0] * s->grid[1] * s->grid[2];
    const int64_t nq = blocks(s->grid, s->chunk_q), nk = blocks(s->grid, s->chunk_k);
    const int64_t cq = T / nq, ck = T / nk;
    double *qc = calloc((size_t)(nq * hd), sizeof(double)), *kc = calloc((size_t)(nk * hd), sizeof(double));
    double *row = malloc((size_t)nk * sizeof(double)), *sorted = malloc((size_t)nk * sizeof(double));
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < hd; c++)
            qc[block_of(s->grid, s->chunk_q, t) * hd + c] += q[t * D + h * hd + c] / (double)cq,
                kc[block_of(s->grid, s->chunk_k, t) * hd + c] += k[t * D + h * hd + c] / (double)ck;
    int64_t compared = 0;
    const int64_t ntop = s->sparsity >= 0 ? (int64_t)((1.0 - s->sparsity) * (double)nk) : 0;
    for (int64_t i = 0; i < nq; i++) {
        for (int64_t j = 0; j < nk; j++) {
            double d = 0;
            for (int64_t c = 0; c < hd; c++) d += qc[i * hd + c] * kc[j * hd + c];
            row[j] = d;
        }
        if (s->cdf_threshold >= 0) { /* rank by the softmax weights, which keep the scores' order */
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < nk; j++) m = fmax(m, row[j] / sqrt((double)hd));
            for (int64_t j = 0; j < nk; j++) sum += row[j] = exp(row[j] / sqrt((double)hd) - m);
            for (int64_t j = 0; j < nk; j++) row[j] /= sum;
        }
        memcpy(sorted, row, (size_t)nk * sizeof(double));
        qsort(sorted, (size_t)nk, sizeof(double), cmp_desc);
        int64_t n = ntop;
        bool near = false;
        if (s->cdf_threshold >= 0) {
            double cdf = 0;
            int64_t nc = 0;
            for (; nc < nk && (cdf += sorted[nc]) <= s->cdf_threshold; nc++) {}
            near = fabs(cdf - s->cdf_threshold) < 1e-4 || (nc && fabs(cdf - sorted[nc] - s->cdf_threshold) < 1e-4);
            n = nc > ntop ? nc : ntop;
        }
        if (n > 0 && n < nk) near = near || sorted[n - 1] - sorted[n] < 1e-4 * fabs(sorted[0]);
        if (near) continue;
        compared++;
        int64_t bad = 0;
        for (int64_t j = 0; j < nk; j++) bad += sel[i * nk + j] != (n > 0 && row[j] >= sorted[n - 1]);
        *wrong += bad != 0;
    }
    free(qc), free(kc), free(row), free(sorted);
    return compared;
}

typedef struct kase {
    const char *name;
    int64_t H, hd, grid[3], cq[3], ck[3];
    double sparsity, cdf;
    bool fd;
} kase;

static bsa_shape shape_of(const kase *c, int64_t B)
{
    bsa_shape s = {.batch = B, .heads = c->H, .head_dim = c->hd, .sparsity = c->sparsity, .cdf_threshold = c->cdf};
    for (int a = 0; a < 3; a++) s.grid[a] = c->grid[a], s.chunk_q[a] = c->cq[a], s.chunk_k[a] = c->ck[a];
    return s;
}

/* output and gradients at the given thread count; keep left for the caller to read and release */
static void run_op(const bsa_shape *s, int threads, float *const io[4], float *out, float *dq, float *dk, float *dv,
                   pool *p, op_state *keep)
{
    const int64_t T = s->grid[0] * s->grid[1] * s->grid[2], D = s->heads * s->head_dim;
    const attn_view vq = {io[0], D, T * D}, vk = {io[1], D, T * D}, vv = {io[2], D, T * D}, vo = {out, D, T * D};
    ops_set_threads(threads);
    CHECKF(bsa_attention_forward(p, s, vo, vq, vk, vv, keep) == ST_OK, "forward: %s", st_error());
    CHECKF(bsa_attention_backward(p, s, (attn_view){dq, D, T * D}, (attn_view){dk, D, T * D},
                                  (attn_view){dv, D, T * D}, (attn_view){io[3], D, T * D}, vq, vk, vv, vo,
                                  keep) == ST_OK, "backward: %s", st_error());
}

static void run_case(const kase *c)
{
    const int64_t B = 2, T = c->grid[0] * c->grid[1] * c->grid[2], D = c->H * c->hd, n = B * T * D;
    const bsa_shape s = shape_of(c, B);
    float *io[4], *out = malloc(n * sizeof(float)), *out2 = malloc(n * sizeof(float));
    for (int i = 0; i < 4; i++) io[i] = malloc(n * sizeof(float)), tk_fill(io[i], n, 21 + i + T, -1.5f, 1.5f);
    float *g1[3], *g2[3];
    for (int i = 0; i < 3; i++) g1[i] = calloc(n, sizeof(float)), g2[i] = calloc(n, sizeof(float));
    pool *p = pool_create(POOL_DEVICE, 0);
    op_state keep = {0}, keep2 = {0};
    run_op(&s, 2, io, out, g2[0], g2[1], g2[2], p, &keep2);
    run_op(&s, 1, io, out2, g1[0], g1[1], g1[2], p, &keep);
    char what[160];
    snprintf(what, sizeof what, "%s: output at 1 and 2 threads", c->name);
    tk_expect_bitwise(what, out2, out, n);
    CHECK(memcmp(keep.data, keep2.data, keep.bytes) == 0);
    CHECK(bsa_attention_forward(p, &s, (attn_view){out2, D, T * D}, (attn_view){io[0], D, T * D},
                                (attn_view){io[1], D, T * D}, (attn_view){io[2], D, T * D}, NULL) == ST_OK);
    snprintf(what, sizeof what, "%s: forward without keep, same bits", c->name);
    tk_expect_bitwise(what, out2, out, n);
    const unsigned char *sel = bsa_attention_selection(&s, &keep);
    const int64_t nsel = blocks(s.grid, s.chunk_q) * blocks(s.grid, s.chunk_k);
    int64_t compared = 0, wrong = 0, picked = 0;
    for (int64_t i = 0; i < B * c->H * nsel; i++) picked += sel[i];
    for (int64_t b = 0; b < B; b++) {
        double *dd = calloc((size_t)(8 * T * D), sizeof(double));
        double *rq = dd, *rk = rq + T * D, *rv = rk + T * D, *rw = rv + T * D, *ro = rw + T * D, *gq = ro + T * D;
        double *gk = gq + T * D, *gv = gk + T * D;
        tk_to_double(rq, io[0] + b * T * D, T * D), tk_to_double(rk, io[1] + b * T * D, T * D);
        tk_to_double(rv, io[2] + b * T * D, T * D), tk_to_double(rw, io[3] + b * T * D, T * D);
        for (int64_t h = 0; h < c->H; h++)
            compared += ref_select(&s, rq, rk, D, h, sel + (b * c->H + h) * nsel, &wrong);
        ref r = {.s = &s, .T = T, .D = D, .q = rq, .k = rk, .v = rv, .w = rw, .sel = sel + b * c->H * nsel, .out = ro};
        ref_run(&r, gq, gk, gv);
        const char *nm[4] = {"out", "dq", "dk", "dv"};
        const float *got[4] = {out, g1[0], g1[1], g1[2]};
        const double *want[4] = {ro, gq, gk, gv};
        for (int t = 0; t < 4; t++) {
            snprintf(what, sizeof what, "%s sample %lld: %s against the reference", c->name, (long long)b, nm[t]);
            tk_expect_close(what, got[t] + b * T * D, want[t], T * D, t ? 1e-4 : 1e-5);
        }
        if (c->fd && !b) { /* the reference's closed form against central differences */
            double *num = malloc((size_t)(T * D) * sizeof(double));
            float *f = malloc((size_t)(T * D) * sizeof(float));
            double *x[3] = {rq, rk, rv}, *gx[3] = {gq, gk, gv};
            for (int t = 0; t < 3; t++) {
                tk_numeric_grad(ref_loss, &r, x[t], T * D, 1e-6, num);
                for (int64_t i = 0; i < T * D; i++) f[i] = (float)gx[t][i];
                snprintf(what, sizeof what, "reference %s: %s against central differences", c->name, nm[t + 1]);
                tk_expect_close(what, f, num, T * D, 1e-5);
            }
            free(num), free(f);
        }
        free(dd);
    }
    CHECKF(wrong == 0 && compared > 0, "%s: selection differs from the double one in %lld of %lld rows", c->name,
           (long long)wrong, (long long)compared);
    printf("ok   %s: %lld of %lld block pairs selected; the double selection agrees on %lld rows clear of ties\n",
           c->name, (long long)picked, (long long)(B * c->H * nsel), (long long)compared);
    const char *names[3] = {"dq", "dk", "dv"};
    const int64_t sizes[3] = {n, n, n};
    tk_expect_grads_agree(c->name, names, sizes, g1, g2, NULL);
    op_state_release(&keep), op_state_release(&keep2);
    CHECK(pool_destroy(p) == 0);
    for (int i = 0; i < 4; i++) free(io[i]);
    free(out), free(out2);
}

/* Keeping every block (sparsity 0) is dense attention: the flash op's outputs and gradients within float rounding */
static void test_dense(void)
{
    const kase c = {"dense", 2, 16, {4, 4, 8}, {2, 2, 4}, {2, 4, 2}, 0.0, -1, false};
    const int64_t B = 1, T = 128, D = 32, n = B * T * D;
    const bsa_shape s = shape_of(&c, B);
    float *io[4], *o[2], *g[2][3];
    for (int i = 0; i < 4; i++) io[i] = malloc(n * sizeof(float)), tk_fill(io[i], n, 51 + i, -2, 2);
    for (int r = 0; r < 2; r++) {
        o[r] = malloc(n * sizeof(float));
        for (int i = 0; i < 3; i++) g[r][i] = calloc(n, sizeof(float));
    }
    pool *p = pool_create(POOL_DEVICE, 0);
    op_state keep = {0};
    run_op(&s, 2, io, o[0], g[0][0], g[0][1], g[0][2], p, &keep);
    op_state_release(&keep);
    const attn_shape a = {.batch = B, .tokens = T, .heads = 2, .head_dim = 16, .mechanism = ATTN_FLASH};
    const attn_view vq = {io[0], D, T * D}, vk = {io[1], D, T * D}, vv = {io[2], D, T * D}, vo = {o[1], D, T * D};
    CHECK(attention_forward(p, &a, vo, vq, vk, vv, &keep) == ST_OK);
    CHECK(attention_backward(p, &a, (attn_view){g[1][0], D, T * D}, (attn_view){g[1][1], D, T * D},
                             (attn_view){g[1][2], D, T * D}, (attn_view){io[3], D, T * D}, vq, vk, vv, vo,
                             &keep) == ST_OK);
    op_state_release(&keep);
    double *want = malloc((size_t)n * sizeof(double));
    const char *nm[4] = {"dense: out against flash attention", "dense: dq against flash attention",
                         "dense: dk against flash attention", "dense: dv against flash attention"};
    for (int t = 0; t < 4; t++) {
        tk_to_double(want, t ? g[1][t - 1] : o[1], n);
        tk_expect_close(nm[t], t ? g[0][t - 1] : o[0], want, n, 1e-5);
    }
    CHECK(pool_destroy(p) == 0);
    free(want);
    for (int i = 0; i < 4; i++) free(io[i]);
    for (int r = 0; r < 2; r++) {
        free(o[r]);
        for (int i = 0; i < 3; i++) free(g[r][i]);
    }
}

/* A cdf threshold below every block's weight selects nothing: zeros out, zero gradients */
static void test_nothing_selected(void)
{
    const kase c = {"nothing", 1, 8, {2, 4, 4}, {2, 2, 2}, {2, 2, 2}, -1, 1e-6, false};
    const int64_t T = 32, n = T * 8;
    const bsa_shape s = shape_of(&c, 1);
    float *io[4], *o = malloc(n * sizeof(float)), *g[3];
    for (int i = 0; i < 4; i++) io[i] = malloc(n * sizeof(float)), tk_fill(io[i], n, 61 + i, -1, 1);
    for (int i = 0; i < 3; i++) g[i] = calloc(n, sizeof(float));
    pool *p = pool_create(POOL_DEVICE, 0);
    op_state keep = {0};
    run_op(&s, 2, io, o, g[0], g[1], g[2], p, &keep);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += o[i] != 0 || g[0][i] != 0 || g[1][i] != 0 || g[2][i] != 0;
    CHECKF(nonzero == 0, "no block selected: %lld nonzero outputs or gradients", (long long)nonzero);
    op_state_release(&keep);
    CHECK(pool_destroy(p) == 0);
    for (int i = 0; i < 4; i++) free(io[i]);
    for (int i = 0; i < 3; i++) free(g[i]);
    free(o);
}

/* Kept and workspace bytes against a real pool and a dry one, at 1 and 2 threads: each pass's peak over what was live
 * is its statement to the byte, and the dry step's peaks are the real ones */
static void test_memory(void)
{
    const kase c = {"memory", 3, 16, {4, 8, 8}, {2, 4, 4}, {4, 2, 4}, 0.75, 0.5, false};
    const bsa_shape s = shape_of(&c, 2);
    const int64_t T = 256, D = 48, n = 2 * T * D;
    for (int threads = 1; threads <= 2; threads++)
        for (int dry = 0; dry < 2; dry++) {
            ops_set_threads(threads);
            pool *p = dry ? pool_create_dry(POOL_DEVICE, 0) : pool_create(POOL_DEVICE, 0);
            float *b[8];
            for (int i = 0; i < 8; i++) {
                CHECK(pool_alloc(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "operand", (void **)&b[i]) == ST_OK);
                if (!dry) tk_fill(b[i], n, 71 + i, -1, 1);
            }
            const attn_view v[8] = {{b[0], D, T * D}, {b[1], D, T * D}, {b[2], D, T * D}, {b[3], D, T * D},
                                    {b[4], D, T * D}, {b[5], D, T * D}, {b[6], D, T * D}, {b[7], D, T * D}};
            const size_t base = pool_live(p), kept = bsa_attention_kept_bytes(&s);
            pool_reset_peak(p);
            CHECK(bsa_attention_forward(p, &s, v[3], v[0], v[1], v[2], NULL) == ST_OK);
            CHECKF(pool_peak(p) - base == bsa_attention_workspace_bytes(&s, threads, ATTN_FORWARD),
                   "t=%d dry=%d forward without keep: peak %zu over live, statement %zu", threads, dry,
                   pool_peak(p) - base, bsa_attention_workspace_bytes(&s, threads, ATTN_FORWARD));
            op_state keep = {0};
            pool_reset_peak(p);
            CHECK(bsa_attention_forward(p, &s, v[3], v[0], v[1], v[2], &keep) == ST_OK);
            CHECKF(pool_peak(p) - base == kept + bsa_attention_workspace_bytes(&s, threads, ATTN_FORWARD_KEEP),
                   "t=%d dry=%d forward: peak %zu over live, statement %zu", threads, dry, pool_peak(p) - base,
                   kept + bsa_attention_workspace_bytes(&s, threads, ATTN_FORWARD_KEEP));
            CHECK(pool_live(p) - base == kept && keep.bytes == kept);
            CHECK(kept == 2 * 3 * (256 * 4 + 8 * 8));
            pool_reset_peak(p);
            CHECK(bsa_attention_backward(p, &s, v[5], v[6], v[7], v[4], v[0], v[1], v[2], v[3], &keep) == ST_OK);
            CHECKF(pool_peak(p) - base - kept == bsa_attention_workspace_bytes(&s, threads, ATTN_BACKWARD),
                   "t=%d dry=%d backward: peak %zu over live, statement %zu", threads, dry, pool_peak(p) - base - kept,
                   bsa_attention_workspace_bytes(&s, threads, ATTN_BACKWARD));
            op_state_release(&keep);
            for (int i = 0; i < 8; i++) pool_free(p, b[i]);
            CHECK(pool_destroy(p) == 0);
        }
    ops_set_threads(2);
}

static void test_refusals(void)
{
    const struct {
        kase c;
        const char *says;
    } bad[] = {
        {{"", 1, 8, {3, 4, 4}, {2, 2, 2}, {1, 2, 2}, 0.5, -1, false}, "frames 3 in chunks of 2"},
        {{"", 1, 8, {2, 4, 4}, {2, 2, 2}, {2, 2, 2}, -1, -1, false}, "neither sparsity nor cdf_threshold"},
        {{"", 1, 8, {2, 4, 4}, {2, 2, 2}, {2, 2, 2}, 0.9, -1, false}, "keeps 0 of 4 key blocks"},
        {{"", 1, 8, {2, 4, 4}, {2, 2, 2}, {2, 2, 2}, -1, 1.5, false}, "cdf_threshold 1.5"},
    };
    float x[32 * 8] = {0};
    const attn_view v = {x, 8, 32 * 8};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const bsa_shape s = shape_of(&bad[i].c, 1);
        pool *p = pool_create(POOL_DEVICE, 0);
        const st_status st = bsa_attention_forward(p, &s, v, v, v, v, NULL);
        CHECKF(st == ST_ERR_INVALID && strstr(st_error(), bad[i].says) && !strchr(st_error(), '\n'), "case %zu: %s",
               i, st_error());
        CHECK(pool_destroy(p) == 0);
    }
}

int main(void)
{
    const kase cases[] = {
        /* small enough for central differences: top-k, cdf, both; query and key chunks differ */
        {"top-k, 1 of 4 key blocks", 2, 4, {2, 4, 4}, {1, 2, 2}, {1, 2, 4}, 0.75, -1, true},
        {"cdf 0.6", 1, 4, {2, 4, 4}, {2, 2, 1}, {1, 2, 2}, -1, 0.6, true},
        {"cdf 0.3 or top-k 1 of 8", 2, 4, {2, 4, 4}, {2, 2, 2}, {1, 2, 2}, 0.875, 0.3, true},
        /* LongCat's [4, 4, 4] chunks at its sparsity 0.9375: 2 of 32 key blocks */
        {"LongCat's chunks, sparsity 0.9375", 2, 16, {8, 16, 16}, {4, 4, 4}, {4, 4, 4}, 0.9375, -1, false},
        {"LongCat's chunks, cdf 0.5 and sparsity 0.9", 1, 32, {8, 8, 8}, {4, 4, 4}, {4, 4, 4}, 0.9, 0.5, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
    test_dense();
    test_nothing_selected();
    test_memory();
    test_refusals();
    return tk_finish();
}
