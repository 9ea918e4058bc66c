/* Block-sparse attention (ops.h: bsa_attention_*), LongCat-Video's flash_attn_bsa_3d on the CPU.
 *
 * LongCat rearranges the tokens so that each 3D block is contiguous; here a block's rows are gathered into a tile
 * instead (a block is runs of chunk width tokens), so q, k, v and the outputs stay strided views. Per (sample, head),
 * one thread of a static OpenMP loop with BLAS single-threaded inside (as attention.c): results do not depend on the
 * thread count, and heads write disjoint columns.
 *
 * Forward: pool each block's q and k (sum of its rows in row order, divided by the count), score the blocks with one
 * GEMM, select per query block (select_row), then for each query block an online softmax over its selected key
 * blocks in increasing order. Backward: per key block, the query blocks that selected it in increasing order (P
 * recomputed from the kept log-sum-exp, dV and dK accumulated in tiles and added once, dQ added tile by tile).
 *
 * Workspace per thread, in floats, each slice rounded to 64 bytes (bsa_attention_workspace_bytes):
 *   forward : pooled q (nq hd) and k (nk hd), scores (nq nk), a sort buffer (2 nk), the selection's bytes when
 *             nothing is kept (nq nk / 4), Q, K, V, O tiles, the score tile (cq ck), running max and sum (2 cq);
 *   backward: D = rowsum(dO O) (T), K, V, dK, dV tiles (4 ck hd), Q, dO, dQ tiles (3 cq hd), P and dP (2 cq ck). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "internal.h"
#include "ops/fallback.h"

typedef struct geom {
    int64_t T, hd, nq, nk, cq, ck;
    int64_t bq[3], bk[3]; /* blocks per axis */
} geom;

static size_t round_floats(size_t n) { return (n + 15) / 16 * 16; }

static geom geom_of(const bsa_shape *s)
{
    geom g = {.T = s->grid[0] * s->grid[1] * s->grid[2], .hd = s->head_dim, .nq = 1, .nk = 1, .cq = 1, .ck = 1};
    for (int a = 0; a < 3; a++) {
        g.bq[a] = s->chunk_q[a] > 0 ? s->grid[a] / s->chunk_q[a] : 0;
        g.bk[a] = s->chunk_k[a] > 0 ? s->grid[a] / s->chunk_k[a] : 0;
        g.nq *= g.bq[a], g.nk *= g.bk[a], g.cq *= s->chunk_q[a], g.ck *= s->chunk_k[a];
    }
    return g;
}

static bool empty(const bsa_shape *s) { return s->batch <= 0 || s->heads <= 0; }

/* LongCat's int((1 - sparsity) * nk), in double as Python computes it; 0 without a top-k rule */
static int64_t topk_count(const bsa_shape *s, int64_t nk)
{
    return s->sparsity >= 0 ? (int64_t)((1.0 - s->sparsity) * (double)nk) : 0;
}

static st_status check_shape(const bsa_shape *s)
{
    if (s->batch < 0 || s->heads < 0 || s->head_dim <= 0)
        return st_fail(ST_ERR_INVALID, "block-sparse attention: batch %lld, heads %lld, head_dim %lld; valid: >= 0, "
                                       ">= 0, > 0", (long long)s->batch, (long long)s->heads, (long long)s->head_dim);
    static const char *axis[3] = {"frames", "height", "width"};
    for (int a = 0; a < 3; a++)
        if (s->grid[a] <= 0 || s->chunk_q[a] <= 0 || s->chunk_k[a] <= 0 || s->grid[a] % s->chunk_q[a] ||
            s->grid[a] % s->chunk_k[a])
            return st_fail(ST_ERR_INVALID, "block-sparse attention: %s %lld in chunks of %lld (queries) and %lld "
                                           "(keys); valid: chunks dividing the latent grid (LongCat asserts the same)",
                           axis[a], (long long)s->grid[a], (long long)s->chunk_q[a], (long long)s->chunk_k[a]);
    if (s->sparsity < 0 && s->cdf_threshold < 0)
        return st_fail(ST_ERR_INVALID, "block-sparse attention: neither sparsity nor cdf_threshold; valid: either "
                                       "or both (LongCat's get_select_indices)");
    if (s->sparsity >= 1 || (s->sparsity >= 0 && s->cdf_threshold < 0 && topk_count(s, geom_of(s).nk) < 1))
        return st_fail(ST_ERR_INVALID, "block-sparse attention: sparsity %g keeps %lld of %lld key blocks; valid: "
                                       "in [0, 1), keeping at least one", s->sparsity,
                       (long long)topk_count(s, geom_of(s).nk), (long long)geom_of(s).nk);
    if (s->cdf_threshold == 0 || s->cdf_threshold > 1)
        return st_fail(ST_ERR_INVALID, "block-sparse attention: cdf_threshold %g; valid: in (0, 1], or < 0 for none",
                       s->cdf_threshold);
    return ST_OK;
}

size_t bsa_attention_kept_bytes(const bsa_shape *s)
{
    if (empty(s)) return 0;
    const geom g = geom_of(s);
    return (size_t)s->batch * (size_t)s->heads * ((size_t)g.T * sizeof(float) + (size_t)(g.nq * g.nk));
}

static size_t per_thread_floats(const bsa_shape *s, attn_pass pass)
{
    const geom g = geom_of(s);
    const size_t hd = (size_t)g.hd, cq = (size_t)g.cq, ck = (size_t)g.ck, nq = (size_t)g.nq, nk = (size_t)g.nk;
    if (pass == ATTN_BACKWARD)
        return round_floats((size_t)g.T) + round_floats(4 * ck * hd) + round_floats(3 * cq * hd) +
               round_floats(2 * cq * ck);
    const size_t select = round_floats(nq * hd) + round_floats(nk * hd) + round_floats(nq * nk) +
                          round_floats(2 * nk) + (pass == ATTN_FORWARD ? round_floats((nq * nk + 3) / 4) : 0);
    return select + round_floats(2 * cq * hd + 2 * ck * hd) + round_floats(cq * ck) + round_floats(2 * cq);
}

size_t bsa_attention_workspace_bytes(const bsa_shape *s, int threads, attn_pass pass)
{
    if (empty(s)) return 0;
    if (threads < 1) threads = 1;
    return (size_t)threads * per_thread_floats(s, pass) * sizeof(float);
}

const unsigned char *bsa_attention_selection(const bsa_shape *s, const op_state *keep)
{
    if (!keep || !keep->data || empty(s)) return NULL;
    return (const unsigned char *)keep->data + (size_t)s->batch * (size_t)s->heads * (size_t)geom_of(s).T * 4;
}

/* ---- a block's rows ---- */

/* Token of row r of block `blk` whose chunk is c (blocks per axis nb) in the grid */
static int64_t block_token(const int64_t grid[3], const int64_t c[3], const int64_t nb[3], int64_t blk, int64_t r)
{
    const int64_t bt = blk / (nb[1] * nb[2]), bh = blk / nb[2] % nb[1], bw = blk % nb[2];
    const int64_t rt = r / (c[1] * c[2]), rh = r / c[2] % c[1], rw = r % c[2];
    return ((bt * c[0] + rt) * grid[1] + bh * c[1] + rh) * grid[2] + bw * c[2] + rw;
}

/* one side's blocks (queries' or keys'): held by value, so a head can be passed around */
typedef struct side {
    int64_t grid[3], c[3], nb[3];
    int64_t rows;
} side;

static side side_of(const bsa_shape *s, const int64_t c[3], const int64_t nb[3], int64_t rows)
{
    side sd = {.rows = rows};
    memcpy(sd.grid, s->grid, sizeof sd.grid), memcpy(sd.c, c, sizeof sd.c), memcpy(sd.nb, nb, sizeof sd.nb);
    return sd;
}

/* dst (rows x hd) = the block's rows of src (a head's rows ld apart) */
static void gather(float *dst, const float *src, int64_t ld, const side *sd, int64_t blk, int64_t hd)
{
    for (int64_t r = 0; r < sd->rows; r++)
        memcpy(dst + r * hd, src + block_token(sd->grid, sd->c, sd->nb, blk, r) * ld, (size_t)hd * sizeof(float));
}

/* dst's block rows += src (rows x hd) */
static void scatter_add(float *dst, int64_t ld, const float *src, const side *sd, int64_t blk, int64_t hd)
{
    for (int64_t r = 0; r < sd->rows; r++) {
        float *row = dst + block_token(sd->grid, sd->c, sd->nb, blk, r) * ld;
        for (int64_t j = 0; j < hd; j++) row[j] += src[r * hd + j];
    }
}

/* ---- selection ---- */

typedef struct ranked {
    float v;
    int32_t j;
} ranked;

/* descending by value, ties (and NaNs, last) by the lower block */
static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    const bool xn = isnan(x->v), yn = isnan(y->v);
    if (xn != yn) return xn ? 1 : -1;
    if (!xn && x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j);
}

/* One query block's key blocks (scores row, nk) into mask (nk bytes): top-k, cdf, or the larger count of both */
static void select_row(const bsa_shape *s, const float *row, int64_t nk, ranked *rk, unsigned char *mask)
{
    const int64_t ntop = topk_count(s, nk);
    int64_t n = ntop;
    for (int64_t j = 0; j < nk; j++) rk[j] = (ranked){row[j], (int32_t)j};
    if (s->cdf_threshold >= 0) { /* softmax(s / sqrt(hd)) sorted descending, its running sum against the threshold */
        const float scale = (float)(1.0 / sqrt((double)s->head_dim));
        float mx = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < nk; j++) mx = row[j] * scale > mx ? row[j] * scale : mx;
        for (int64_t j = 0; j < nk; j++) sum += rk[j].v = expf(row[j] * scale - mx);
        for (int64_t j = 0; j < nk; j++) rk[j].v /= sum;
        qsort(rk, (size_t)nk, sizeof *rk, cmp_ranked);
        float cdf = 0.0f;
        int64_t ncdf = 0;
        for (; ncdf < nk && (cdf += rk[ncdf].v) <= (float)s->cdf_threshold; ncdf++) {}
        n = ncdf > ntop ? ncdf : ntop;
    } else {
        qsort(rk, (size_t)nk, sizeof *rk, cmp_ranked);
    }
    memset(mask, 0, (size_t)nk);
    for (int64_t j = 0; j < n; j++) mask[rk[j].j] = 1;
}

/* mean of each block's rows (nb blocks) into out (nb x hd) */
static void pool_blocks(float *out, const float *src, int64_t ld, const side *sd, int64_t nb, int64_t hd)
{
    for (int64_t b = 0; b < nb; b++) {
        float *o = out + b * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int64_t r = 0; r < sd->rows; r++) {
            const float *row = src + block_token(sd->grid, sd->c, sd->nb, b, r) * ld;
            for (int64_t j = 0; j < hd; j++) o[j] += row[j];
        }
        for (int64_t j = 0; j < hd; j++) o[j] /= (float)sd->rows;
    }
}

/* ---- forward ---- */

typedef struct head {
    const bsa_shape *s;
    geom g;
    side qs, ks;
    const float *q, *k, *v, *dout, *o;
    float *out, *dq, *dk, *dv;
    int64_t lq, lk, lv, lo, ldo, ldq, ldk, ldv;
} head;

static head head_of(const bsa_shape *s, const geom *g, int64_t b, int64_t h, attn_view out, attn_view q, attn_view k,
                    attn_view v)
{
    const int64_t hd = s->head_dim;
    head x = {.s = s, .g = *g, .lq = q.token_stride, .lk = k.token_stride, .lv = v.token_stride,
              .lo = out.token_stride};
    x.qs = side_of(s, s->chunk_q, g->bq, g->cq);
    x.ks = side_of(s, s->chunk_k, g->bk, g->ck);
    x.q = q.data + b * q.batch_stride + h * hd, x.k = k.data + b * k.batch_stride + h * hd;
    x.v = v.data + b * v.batch_stride + h * hd;
    x.out = out.data ? out.data + b * out.batch_stride + h * hd : NULL;
    x.o = x.out;
    return x;
}

/* The head's selection into mask (nq nk bytes), from ws (pooled q, k, scores, sort buffer) */
static void select_head(head *x, float *ws, unsigned char *mask)
{
    const geom *g = &x->g;
    float *qc = ws, *kc = qc + round_floats((size_t)(g->nq * g->hd)), *sc = kc + round_floats((size_t)(g->nk * g->hd));
    ranked *rk = (ranked *)(sc + round_floats((size_t)(g->nq * g->nk)));
    pool_blocks(qc, x->q, x->lq, &x->qs, g->nq, g->hd);
    pool_blocks(kc, x->k, x->lk, &x->ks, g->nk, g->hd);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->nq, (int)g->nk, (int)g->hd, 1.0f, qc, (int)g->hd, kc,
                (int)g->hd, 0.0f, sc, (int)g->nk);
    for (int64_t i = 0; i < g->nq; i++) select_row(x->s, sc + i * g->nk, g->nk, rk, mask + i * g->nk);
}

/* Query block i over its selected key blocks: an online softmax into O, then out's rows and lse (T floats, may be
 * NULL). tiles: Q, O (cq hd), K, V (ck hd), S (cq ck), running max and sum (cq each). */
static void forward_block(const head *x, float *tiles, const unsigned char *mrow, int64_t i, float *lse)
{
    const geom *g = &x->g;
    const int64_t hd = g->hd, cq = g->cq, ck = g->ck;
    float *Q = tiles, *O = Q + cq * hd, *K = O + cq * hd, *V = K + ck * hd;
    float *S = tiles + round_floats((size_t)(2 * cq * hd + 2 * ck * hd)), *m = S + round_floats((size_t)(cq * ck));
    float *l = m + cq;
    const float scale = (float)(1.0 / sqrt((double)hd));
    gather(Q, x->q, x->lq, &x->qs, i, hd);
    memset(O, 0, (size_t)(cq * hd) * sizeof(float));
    for (int64_t r = 0; r < cq; r++) m[r] = -INFINITY, l[r] = 0.0f;
    for (int64_t j = 0; j < g->nk; j++) {
        if (!mrow[j]) continue;
        gather(K, x->k, x->lk, &x->ks, j, hd), gather(V, x->v, x->lv, &x->ks, j, hd);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)cq, (int)ck, (int)hd, scale, Q, (int)hd, K, (int)hd,
                    0.0f, S, (int)ck);
        for (int64_t r = 0; r < cq; r++) {
            float *row = S + r * ck, mx = m[r], sum = 0.0f;
            for (int64_t c = 0; c < ck; c++) mx = row[c] > mx ? row[c] : mx;
            for (int64_t c = 0; c < ck; c++) sum += row[c] = exp_f(row[c] - mx);
            if (mx != m[r]) {
                const float corr = expf(m[r] - mx);
                for (int64_t c = 0; c < hd; c++) O[r * hd + c] *= corr;
                l[r] *= corr;
            }
            l[r] += sum, m[r] = mx;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cq, (int)hd, (int)ck, 1.0f, S, (int)ck, V,
                    (int)hd, 1.0f, O, (int)hd);
    }
    for (int64_t r = 0; r < cq; r++) { /* no block selected: zeros, lse -inf (LongCat's kernel) */
        const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        const int64_t t = block_token(x->qs.grid, x->qs.c, x->qs.nb, i, r);
        float *orow = x->out + t * x->lo;
        for (int64_t c = 0; c < hd; c++) orow[c] = O[r * hd + c] * inv;
        if (lse) lse[t] = l[r] > 0 ? m[r] + logf(l[r]) : -INFINITY;
    }
}

/* Tiles run: the selection's ones, or (mask NULL, a dry step) the top-k count, all where only the cdf rule is given */
static double tiles_run(const bsa_shape *s, const unsigned char *mask)
{
    const geom g = geom_of(s);
    const size_t n = (size_t)s->batch * (size_t)s->heads * (size_t)(g.nq * g.nk);
    if (!mask) return (double)s->batch * s->heads * g.nq * (s->sparsity >= 0 ? topk_count(s, g.nk) : g.nk);
    double t = 0;
    for (size_t i = 0; i < n; i++) t += mask[i];
    return t;
}

static st_status forward_run(pool *p, const bsa_shape *s, attn_view out, attn_view q, attn_view k, attn_view v,
                             op_state *keep, const unsigned char **sel)
{
    st_status st = check_shape(s);
    if (st != ST_OK) return st;
    if ((st = op_state_alloc(keep, p, bsa_attention_kept_bytes(s), "block-sparse attention kept state")) != ST_OK)
        return st;
    if (empty(s)) return ST_OK;
    const int threads = ops_threads();
    const attn_pass pass = keep ? ATTN_FORWARD_KEEP : ATTN_FORWARD;
    float *ws = NULL;
    st = pool_alloc(p, bsa_attention_workspace_bytes(s, threads, pass), MEM_WORKSPACE,
                    "block-sparse attention forward workspace", (void **)&ws);
    if (st != ST_OK) {
        if (keep) op_state_release(keep);
        return st;
    }
    if (op_dry(out.data)) return pool_free(p, ws), ST_OK;
    const geom g = geom_of(s);
    const size_t per = per_thread_floats(s, pass), nsel = (size_t)(g.nq * g.nk);
    const size_t select = round_floats((size_t)(g.nq * g.hd)) + round_floats((size_t)(g.nk * g.hd)) +
                          round_floats(nsel) + round_floats((size_t)(2 * g.nk));
    const int64_t H = s->heads, pairs = s->batch * H;
    float *lse = keep ? keep->data : NULL;
    unsigned char *kept_mask = keep ? (unsigned char *)keep->data + (size_t)pairs * (size_t)g.T * 4 : NULL;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t bh = 0; bh < pairs; bh++) {
        float *mine = ws + (size_t)omp_get_thread_num() * per;
        unsigned char *mask = kept_mask ? kept_mask + (size_t)bh * nsel : (unsigned char *)(mine + select);
        head x = head_of(s, &g, bh / H, bh % H, out, q, k, v);
        select_head(&x, mine, mask);
        float *tiles = mine + select + (keep ? 0 : round_floats((nsel + 3) / 4));
        for (int64_t i = 0; i < g.nq; i++)
            forward_block(&x, tiles, mask + i * g.nk, i, lse ? lse + (size_t)bh * (size_t)g.T : NULL);
    }
    pool_free(p, ws);
    *sel = kept_mask;
    return ST_OK;
}

/* ---- backward ---- */

/* Key block j against the query blocks that selected it: dV, dK into its tiles, dQ added to dq's rows */
static void backward_block(const head *x, float *ws, const float *D, const float *lse, const unsigned char *mask,
                           int64_t j)
{
    const geom *g = &x->g;
    const int64_t hd = g->hd, cq = g->cq, ck = g->ck;
    float *K = ws, *V = K + ck * hd, *dK = V + ck * hd, *dV = dK + ck * hd;
    float *Q = ws + round_floats((size_t)(4 * ck * hd)), *dO = Q + cq * hd, *dQ = dO + cq * hd;
    float *P = Q + round_floats((size_t)(3 * cq * hd)), *dP = P + cq * ck;
    const float scale = (float)(1.0 / sqrt((double)hd));
    gather(K, x->k, x->lk, &x->ks, j, hd), gather(V, x->v, x->lv, &x->ks, j, hd);
    memset(dK, 0, (size_t)(2 * ck * hd) * sizeof(float));
    for (int64_t i = 0; i < g->nq; i++) {
        if (!mask[i * g->nk + j]) continue;
        gather(Q, x->q, x->lq, &x->qs, i, hd), gather(dO, x->dout, x->ldo, &x->qs, i, hd);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)cq, (int)ck, (int)hd, scale, Q, (int)hd, K, (int)hd,
                    0.0f, P, (int)ck);
        for (int64_t r = 0; r < cq; r++) {
            const float l = lse[block_token(x->qs.grid, x->qs.c, x->qs.nb, i, r)];
            for (int64_t c = 0; c < ck; c++) P[r * ck + c] = exp_f(P[r * ck + c] - l);
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ck, (int)hd, (int)cq, 1.0f, P, (int)ck, dO, (int)hd,
                    1.0f, dV, (int)hd);
        if (!x->dq && !x->dk) continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)cq, (int)ck, (int)hd, 1.0f, dO, (int)hd, V, (int)hd,
                    0.0f, dP, (int)ck);
        for (int64_t r = 0; r < cq; r++) {
            const float d = D[block_token(x->qs.grid, x->qs.c, x->qs.nb, i, r)];
            for (int64_t c = 0; c < ck; c++) dP[r * ck + c] = P[r * ck + c] * (dP[r * ck + c] - d);
        }
        if (x->dq) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cq, (int)hd, (int)ck, scale, dP, (int)ck, K,
                        (int)hd, 0.0f, dQ, (int)hd);
            scatter_add(x->dq, x->ldq, dQ, &x->qs, i, hd);
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ck, (int)hd, (int)cq, scale, dP, (int)ck, Q, (int)hd,
                    1.0f, dK, (int)hd);
    }
    if (x->dk) scatter_add(x->dk, x->ldk, dK, &x->ks, j, hd);
    if (x->dv) scatter_add(x->dv, x->ldv, dV, &x->ks, j, hd);
}

static st_status backward_run(pool *p, const bsa_shape *s, attn_view dq, attn_view dk, attn_view dv, attn_view dout,
                              attn_view q, attn_view k, attn_view v, attn_view out, const op_state *keep)
{
    st_status st = check_shape(s);
    if (st != ST_OK || empty(s)) return st;
    if (!keep || !keep->data)
        return st_fail(ST_ERR_INVALID, "bsa_attention_backward: the forward kept nothing (keep was NULL)");
    if (!out.data && (dq.data || dk.data))
        return st_fail(ST_ERR_INVALID, "bsa_attention_backward: dq or dk asked for without the forward's output");
    const int threads = ops_threads();
    float *ws = NULL;
    st = pool_alloc(p, bsa_attention_workspace_bytes(s, threads, ATTN_BACKWARD), MEM_WORKSPACE,
                    "block-sparse attention backward workspace", (void **)&ws);
    if (st != ST_OK) return st;
    if (op_dry(dout.data)) return pool_free(p, ws), ST_OK;
    const geom g = geom_of(s);
    const size_t per = per_thread_floats(s, ATTN_BACKWARD);
    const int64_t H = s->heads, pairs = s->batch * H, hd = s->head_dim;
    const unsigned char *sel = bsa_attention_selection(s, keep);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t bh = 0; bh < pairs; bh++) {
        float *D = ws + (size_t)omp_get_thread_num() * per;
        const int64_t b = bh / H, h = bh % H;
        head x = head_of(s, &g, b, h, out, q, k, v);
        x.dout = dout.data + b * dout.batch_stride + h * hd, x.ldo = dout.token_stride;
        x.dq = dq.data ? dq.data + b * dq.batch_stride + h * hd : NULL, x.ldq = dq.token_stride;
        x.dk = dk.data ? dk.data + b * dk.batch_stride + h * hd : NULL, x.ldk = dk.token_stride;
        x.dv = dv.data ? dv.data + b * dv.batch_stride + h * hd : NULL, x.ldv = dv.token_stride;
        for (int64_t t = 0; x.o && t < g.T; t++) {
            float acc = 0.0f;
            for (int64_t c = 0; c < hd; c++) acc += x.o[t * x.lo + c] * x.dout[t * x.ldo + c];
            D[t] = acc;
        }
        const float *lse = (const float *)keep->data + (size_t)bh * (size_t)g.T;
        for (int64_t j = 0; j < g.nk; j++)
            backward_block(&x, D + round_floats((size_t)g.T), D, lse, sel + (size_t)bh * (size_t)(g.nq * g.nk), j);
    }
    pool_free(p, ws);
    return ST_OK;
}

/* ---- entry points ---- */

st_status bsa_attention_forward(pool *p, const bsa_shape *s, attn_view out, attn_view q, attn_view k, attn_view v,
                                op_state *keep)
{
    /* no device kernel: on a device's memory the CPU code runs as a counted fallback */
    const st_status refused = fallback_enter("bsa_attention_forward", "block-sparse", q.data);
    if (refused) return refused;
    const double t0 = prof_now();
    const unsigned char *sel = NULL;
    const st_status r = forward_run(p, s, out, q, k, v, keep, &sel);
    const geom g = geom_of(s);
    if (r == ST_OK) prof_add(OP_ATTENTION, t0, 4.0 * (double)(g.cq * g.ck * g.hd) * tiles_run(s, sel), 0);
    return r;
}

st_status bsa_attention_backward(pool *p, const bsa_shape *s, attn_view dq, attn_view dk, attn_view dv,
                                 attn_view dout, attn_view q, attn_view k, attn_view v, attn_view out,
                                 const op_state *keep)
{
    const st_status refused = fallback_enter("bsa_attention_backward", "block-sparse", dout.data);
    if (refused) return refused;
    const double t0 = prof_now();
    const st_status r = backward_run(p, s, dq, dk, dv, dout, q, k, v, out, keep);
    const geom g = geom_of(s);
    const unsigned char *sel = op_dry(dout.data) ? NULL : bsa_attention_selection(s, keep);
    if (r == ST_OK) prof_add(OP_ATTENTION, t0, 10.0 * (double)(g.cq * g.ck * g.hd) * tiles_run(s, sel), 0);
    return r;
}
