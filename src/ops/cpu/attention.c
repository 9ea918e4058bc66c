/* Multi-head attention, non-causal, scale 1/sqrt(head_dim): a math mechanism that keeps P and a flash
 * mechanism that keeps only the log-sum-exp per row and recomputes P in tiles.
 *
 * Operands are strided views (q/k/v may be thirds of a packed qkv buffer), and every GEMM runs on them
 * directly with lda = token_stride, so nothing is permuted or copied. Each (batch, head) pair is computed
 * entirely by one thread of a static OpenMP loop, with BLAS single-threaded inside it (OpenBLAS's OpenMP
 * build sees omp_in_parallel()): results are independent of the thread count, and heads of one batch
 * write disjoint columns of the outputs and gradients, so no synchronisation is needed.
 *
 * Cross-attention (kv_tokens) only changes the key count Tk. Grouped-query attention (kv_heads) maps query head h
 * to kv head h / G (G = heads / kv_heads); forward runs per (batch, query head) as before, but backward runs per
 * (batch, kv head), the group's G query heads one after another in a fixed order, because they all accumulate
 * into that kv head's dk and dv. A sliding window (|i - j| <= window) skips every tile wholly outside the band
 * and clips each row to its band inside the others (exp over the band only, zeros outside, so backward's P and
 * dS are exactly 0 there); math computes the whole T x T scores and clips the rows the same way.
 *
 * Workspace (MEM_WORKSPACE, one block of threads * per-thread bytes, per-thread slices rounded up to 64
 * bytes so threads do not share cache lines):
 *   math  forward : T*Tk per thread for P, but only when keep == NULL (with keep P is written straight
 *                   into the kept buffer and forward takes no workspace at all);
 *   math  backward: T*Tk per thread for dP/dS;
 *   flash forward : BrF*Bc score tile, another for the rare rows whose scores are taken again, running max and
 *                   sum (2*BrF), with or without keep;
 *   flash backward: Br*Bc P tile + Br*Bc dP/dS tile + T floats of D = rowsum(dO*O) (or rowsum(dP*P), the same
 *                   tiles reused, where the caller gives no output).
 * attention_workspace_bytes states exactly what each pass takes. (Br, BrF are clipped to T and Bc to Tk, so small
 * sequences take small tiles.)
 *
 * A mask (attn_mask) is a per-key bias, gated per query, added to the scores right after the score GEMM, in the
 * score buffer itself (no workspace); an excluded key's exp is then set to exactly 0. Math keeps P, so its
 * backward never reads the mask; flash recomputes P tile by tile the same way. */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>

#include "internal.h"
#include "ops/fallback.h"

/* Query and key tile sizes of the flash mechanism: a 256x256 fp32 tile is 256 KiB, so backward's P and dP tiles
 * (512 KiB) and the row slices of q, k, v (hd=64) stay in a 1 MiB L2, while the tiles keep the GEMMs few and
 * large enough for BLAS to run near its peak (64x64 tiles made attention run at half the rate of the linears;
 * on dit-s2 64x256 ran at 125 GFLOP/s, 128x256 at 133, and 256x256 takes 5 % less time than 128x256). */
static const int64_t Br = 256;
static const int64_t Bc = 256;
/* The forward's query tiles are twice as tall: each key and value tile is then packed for BLAS half as often, which
 * a forward at head width 64 feels (docs/BENCHMARKS.md); backward keeps Br, its two tiles a thread staying in L2. */
static const int64_t BrF = 512;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Keys per sample and heads of k and v (0 in the shape: the queries'). */
static int64_t kv_tokens(const attn_shape *s) { return s->kv_tokens ? s->kv_tokens : s->tokens; }
static int64_t kv_heads(const attn_shape *s) { return s->kv_heads ? s->kv_heads : s->heads; }

/* Rounded to whole 64-byte lines so that per-thread slices do not share a cache line. */
static size_t round_floats(size_t n) { return (n + 15) / 16 * 16; }

static size_t per_thread_floats(const attn_shape *s, attn_pass pass)
{
    const int64_t T = s->tokens, Tk = kv_tokens(s);
    if (s->mechanism == ATTN_MATH) return pass == ATTN_FORWARD_KEEP ? 0 : round_floats((size_t)T * (size_t)Tk);
    const size_t br = (size_t)min64(pass != ATTN_BACKWARD ? BrF : Br, T), bc = (size_t)min64(Bc, Tk);
    if (pass != ATTN_BACKWARD) return round_floats(2 * br * bc + 2 * br);
    return round_floats(2 * br * bc + (size_t)T);
}

static bool empty(const attn_shape *s) { return s->batch <= 0 || s->heads <= 0 || s->tokens <= 0; }

/* The shape's attention fields as ops.h allows them: one error line, otherwise ST_OK. */
static st_status check_shape(const attn_shape *s)
{
    if (s->kv_tokens < 0 || s->kv_heads < 0 || s->window < 0)
        return st_fail(ST_ERR_INVALID, "attention: kv_tokens %lld, kv_heads %lld, window %lld; valid: >= 0 each "
                                       "(0: the queries' own)", (long long)s->kv_tokens, (long long)s->kv_heads,
                       (long long)s->window);
    if (s->kv_heads && s->heads % s->kv_heads)
        return st_fail(ST_ERR_INVALID, "attention: kv_heads %lld does not divide heads %lld; valid: a divisor of "
                                       "heads (grouped-query attention), or 0", (long long)s->kv_heads,
                       (long long)s->heads);
    if (s->window && s->kv_tokens)
        return st_fail(ST_ERR_INVALID, "attention: window %lld with kv_tokens %lld; valid: a sliding window on "
                                       "self-attention only (kv_tokens 0)", (long long)s->window,
                       (long long)s->kv_tokens);
    if (s->mechanism == ATTN_LINEAR && (s->kv_tokens || s->kv_heads || s->window))
        return st_fail(ST_ERR_INVALID, "attention: linear with kv_tokens %lld, kv_heads %lld, window %lld; valid: "
                                       "linear attention is self-attention over every key (0 each)",
                       (long long)s->kv_tokens, (long long)s->kv_heads, (long long)s->window);
    return ST_OK;
}

/* Columns [*a, *e) of a tile of keys j0 .. j0 + bc - 1 that query i sees: all of them without a window. */
static void band(int64_t window, int64_t i, int64_t j0, int64_t bc, int64_t *a, int64_t *e)
{
    *a = 0, *e = bc;
    if (!window) return;
    *a = min64(max64(i - window - j0, 0), bc);
    *e = min64(max64(i + window + 1 - j0, 0), bc);
}

/* The key range [*lo, *hi) that queries i0 .. i0 + br - 1 see, of Tk keys (and, by the window's symmetry, the
 * query range that keys i0 .. i0 + br - 1 are seen by). */
static void span(const attn_shape *s, int64_t i0, int64_t br, int64_t Tk, int64_t *lo, int64_t *hi)
{
    *lo = 0, *hi = Tk;
    if (!s->window) return;
    *lo = max64(i0 - s->window, 0);
    *hi = min64(i0 + br + s->window, Tk);
}

/* Score entries one (batch, head) pair computes: T Tk, but for flash with a window the tiles' area, which the
 * loops below cover the same way (forward by query tiles, backward by key tiles). */
static double score_area(const attn_shape *s, bool backward)
{
    const int64_t T = s->tokens, Tk = kv_tokens(s);
    if (s->mechanism == ATTN_MATH || !s->window) return (double)T * (double)Tk;
    const int64_t step = backward ? Bc : BrF, n = backward ? Tk : T;
    double area = 0;
    for (int64_t i0 = 0; i0 < n; i0 += step) {
        int64_t lo, hi;
        span(s, i0, min64(step, n - i0), backward ? T : Tk, &lo, &hi);
        area += (double)min64(step, n - i0) * (double)(hi - lo);
    }
    return area;
}

size_t attention_kept_bytes(const attn_shape *s)
{
    if (empty(s)) return 0;
    if (s->mechanism == ATTN_LINEAR) return linear_attention_kept_floats(s) * sizeof(float);
    const size_t rows = (size_t)s->batch * (size_t)s->heads * (size_t)s->tokens;
    return (s->mechanism == ATTN_MATH ? rows * (size_t)kv_tokens(s) : rows) * sizeof(float);
}

size_t attention_workspace_bytes(const attn_shape *s, int threads, attn_pass pass)
{
    if (empty(s)) return 0;
    if (threads < 1) threads = 1;
    if (s->mechanism == ATTN_LINEAR) return linear_attention_workspace_floats(s, threads, pass) * sizeof(float);
    return (size_t)threads * per_thread_floats(s, pass) * sizeof(float);
}

static float attn_scale(const attn_shape *s) { return (float)(1.0 / sqrt((double)s->head_dim)); }

/* Start of head h of batch b in a view. */
static float *head_ptr(attn_view a, int64_t b, int64_t h, int64_t hd)
{
    return a.data + b * a.batch_stride + h * hd;
}

/* A row's max and sum over 16 lanes combined in a fixed order: the compiler vectorises them without -ffast-math
 * (a float reduction in plain order is a chain of dependent adds), and the result is the same on every call. */
#define LANES 16

static float row_max(const float *x, int64_t n)
{
    float lane[LANES];
    for (int k = 0; k < LANES; k++) lane[k] = x[0];
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
    float m = lane[0];
    for (int k = 1; k < LANES; k++) m = lane[k] > m ? lane[k] : m;
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

static float row_sum(const float *x, int64_t n)
{
    float lane[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) lane[k] += x[j + k];
    float s = 0.0f;
    for (int k = 0; k < LANES; k++) s += lane[k];
    for (; j < n; j++) s += x[j];
    return s;
}

/* x[j] = exp_f(x[j] - m) for j < n, returning their sum: the bits of that loop followed by row_sum, in one pass
 * over the row instead of two (the softmax passes, not the products, are what keeps flash below the GEMM rate). */
static float exp_sum(float *x, int64_t n, float m)
{
    float lane[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) lane[k] += x[j + k] = exp_f(x[j + k] - m);
    float s = 0.0f;
    for (int k = 0; k < LANES; k++) s += lane[k];
    for (; j < n; j++) s += x[j] = exp_f(x[j] - m);
    return s;
}

/* x[j] = exp_f(x[j] - m) for j < n, returning their sum and, in *mx, the largest x[j] before: exp_sum and row_max in
 * one pass, for the flash forward's rows whose running max may lag (flash_forward_pair). */
static float exp_sum_max(float *x, int64_t n, float m, float *mx)
{
    float lane[LANES] = {0}, top[LANES];
    for (int k = 0; k < LANES; k++) top[k] = x[0];
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) {
            const float v = x[j + k];
            top[k] = v > top[k] ? v : top[k];
            lane[k] += x[j + k] = exp_f(v - m);
        }
    float s = 0.0f, t = top[0];
    for (int k = 0; k < LANES; k++) s += lane[k], t = top[k] > t ? top[k] : t;
    for (; j < n; j++) {
        t = x[j] > t ? x[j] : t;
        s += x[j] = exp_f(x[j] - m);
    }
    *mx = t;
    return s;
}

/* ---- mask ---- */

/* Sample b's row of a mask array (NULL stays NULL). */
static const float *mask_row(const float *a, const attn_mask *m, int64_t b)
{
    return a ? a + b * m->batch_stride : NULL;
}

/* Scores S (br x bc, rows ld apart) of queries i0.. and keys j0..: S[r][c] += qg[r] * kb[c], with kb and qg (NULL:
 * a gate of 1) already at j0 and i0. An excluded key (-inf) stays -inf under any gate, never 0 * -inf = NaN. */
static void add_mask(float *S, int64_t br, int64_t bc, int64_t ld, const float *kb, const float *qg)
{
    for (int64_t r = 0; r < br; r++) {
        float *row = S + r * ld;
        if (!qg) {
            for (int64_t c = 0; c < bc; c++) row[c] += kb[c];
            continue;
        }
        const float g = qg[r];
        for (int64_t c = 0; c < bc; c++) row[c] += kb[c] == -INFINITY ? -INFINITY : g * kb[c];
    }
}

/* exp_f clamps its argument at -87, so an excluded key's exp must be zeroed: exactly 0, whatever its v holds.
 * kb NULL: no mask. */
static void zero_excluded(float *row, int64_t n, const float *kb)
{
    if (kb)
        for (int64_t j = 0; j < n; j++)
            if (kb[j] == -INFINITY) row[j] = 0.0f;
}

/* The mask's structure (ops.h): whether query i sees key j by their positions and segments, before any key_bias */
static inline bool sees(const float *seg, bool causal, int64_t i, int64_t j)
{
    return (causal && j <= i) || (seg && seg[i] == seg[j]);
}

static bool structured(const attn_mask *m) { return m && (m->segment || m->causal); }

/* S's scores of queries i0 .. i0 + br and keys j0 .. j0 + bc (rows ld apart) that the structure hides become -inf;
 * seg is the sample's row */
static void add_structure(float *S, int64_t br, int64_t bc, int64_t ld, int64_t i0, int64_t j0, const float *seg,
                          bool causal)
{
    for (int64_t r = 0; r < br; r++)
        for (int64_t c = 0; c < bc; c++)
            if (!sees(seg, causal, i0 + r, j0 + c)) S[r * ld + c] = -INFINITY;
}

/* After the exps, as zero_excluded: the hidden keys' entries of query i's row (keys j0 + a .. j0 + e) exactly 0 */
static void zero_unseen(float *row, int64_t a, int64_t e, int64_t i, int64_t j0, const float *seg, bool causal)
{
    for (int64_t j = a; j < e; j++)
        if (!sees(seg, causal, i, j0 + j)) row[j] = 0.0f;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Every query of sample b sees a kept key under the structure: causally the first kept key, or a kept key of its own
 * segment (the kept keys' segments sorted in ids, tokens floats). */
static st_status check_structure(const attn_shape *s, const attn_mask *m, int64_t b, const float *kb, float *ids)
{
    const int64_t T = s->tokens;
    const float *seg = mask_row(m->segment, m, b);
    int64_t first = T, n = 0;
    for (int64_t j = 0; j < T; j++) {
        if (seg && !isfinite(seg[j]))
            return st_fail(ST_ERR_INVALID, "attention mask: segment[%lld][%lld] is %g; valid: finite", (long long)b,
                           (long long)j, (double)seg[j]);
        if (kb && kb[j] == -INFINITY) continue;
        if (first == T) first = j;
        if (seg) ids[n++] = seg[j];
    }
    if (seg) qsort(ids, (size_t)n, sizeof *ids, cmp_float);
    for (int64_t i = 0; i < T; i++) {
        const bool ok = (m->causal && i >= first) ||
                        (seg && n && bsearch(&seg[i], ids, (size_t)n, sizeof *ids, cmp_float));
        if (!ok)
            return st_fail(ST_ERR_INVALID, "attention mask: query %lld of sample %lld sees no kept key (%s); valid: "
                                           "at least one kept key that each query sees", (long long)i, (long long)b,
                           seg ? "none of its segment, and none before it if causal" : "causal, none before it");
    }
    return ST_OK;
}

/* The mask as ops.h allows it (checked by forward; backward reads the same buffers): one error line naming the
 * entry, its value and what is valid, otherwise ST_OK. ids: tokens floats for the structure's check. */
static st_status check_mask(const attn_shape *s, const attn_mask *m, float *ids)
{
    if (!m->key_bias && !structured(m))
        return st_fail(ST_ERR_INVALID, "attention mask: no key_bias, segment or causal; valid: at least one "
                                       "(pass no mask for plain attention)");
    if (structured(m) && ((s->kv_tokens && s->kv_tokens != s->tokens) || s->window))
        return st_fail(ST_ERR_INVALID, "attention mask: segment and causal are for self-attention without a window "
                                       "(kv_tokens %lld, window %lld)", (long long)s->kv_tokens, (long long)s->window);
    if (m->batch_stride < 0)
        return st_fail(ST_ERR_INVALID, "attention mask: batch_stride %lld; valid: >= 0",
                       (long long)m->batch_stride);
    const int64_t T = s->tokens, Tk = kv_tokens(s), W = s->window;
    for (int64_t b = 0; b < s->batch; b++) {
        const float *kb = mask_row(m->key_bias, m, b), *qg = mask_row(m->query_gate, m, b);
        if (structured(m)) {
            const st_status st = check_structure(s, m, b, kb, ids);
            if (st) return st;
        }
        if (!kb) continue;
        int64_t kept = 0;
        for (int64_t j = 0; j < Tk; j++) {
            if (!isfinite(kb[j]) && kb[j] != -INFINITY)
                return st_fail(ST_ERR_INVALID, "attention mask: key_bias[%lld][%lld] is %g; valid: finite, or -inf "
                                               "to exclude the key", (long long)b, (long long)j, (double)kb[j]);
            kept += kb[j] != -INFINITY;
        }
        for (int64_t i = 0; qg && i < T; i++)
            if (!isfinite(qg[i]))
                return st_fail(ST_ERR_INVALID, "attention mask: query_gate[%lld][%lld] is %g; valid: finite",
                               (long long)b, (long long)i, (double)qg[i]);
        if (!kept)
            return st_fail(ST_ERR_INVALID, "attention mask: sample %lld excludes all %lld keys (key_bias all -inf); "
                                           "valid: at least one kept key per sample", (long long)b, (long long)Tk);
        /* with a window, every query's own band needs a kept key: last is the last kept key <= i + W */
        for (int64_t i = 0, j = 0, last = -1; W && i < T; i++) {
            for (; j < Tk && j <= i + W; j++)
                if (kb[j] != -INFINITY) last = j;
            if (last < i - W)
                return st_fail(ST_ERR_INVALID, "attention mask: sample %lld excludes every key within window %lld "
                                               "of query %lld; valid: at least one kept key in each query's window",
                               (long long)b, (long long)W, (long long)i);
        }
    }
    return ST_OK;
}

/* Zeroes row[0 .. a) and row[e .. n): the keys outside a query's window. */
static void zero_outside(float *row, int64_t n, int64_t a, int64_t e)
{
    for (int64_t j = 0; j < a; j++) row[j] = 0.0f;
    for (int64_t j = e; j < n; j++) row[j] = 0.0f;
}

/* In place softmax of each of `rows` contiguous rows of length n (row r: query r, keys 0 .. n - 1, within the
 * window when there is one); kb: the mask's key bias (NULL: none), already added to the rows, whose excluded keys
 * get probability 0, as do the keys the structure (seg, causal; already -inf in the rows) hides. */
static void softmax_rows(float *x, int64_t rows, int64_t n, const float *kb, int64_t window, const float *seg,
                         bool causal)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * n;
        int64_t a, e;
        band(window, r, 0, n, &a, &e);
        const float m = row_max(row + a, e - a);
        float sum;
        if (kb || seg || causal) {
            for (int64_t j = a; j < e; j++) row[j] = exp_f(row[j] - m);
            zero_excluded(row, n, kb);
            if (seg || causal) zero_unseen(row, a, e, r, 0, seg, causal);
            sum = row_sum(row + a, e - a);
        } else {
            sum = exp_sum(row + a, e - a, m);
        }
        zero_outside(row, n, a, e);
        const float inv = 1.0f / sum;
        for (int64_t j = a; j < e; j++) row[j] *= inv;
    }
}

/* dS = P * (dP - c_r) row by row, in place in dp; c_r = rowsum(dP*P) when c == NULL (math), else c[r]
 * (flash, where c = D is the same quantity: flash_rowsum). */
static void softmax_grad_rows(float *dp, const float *p, const float *c, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++) {
        float *drow = dp + r * n;
        const float *prow = p + r * n;
        float cr;
        if (c) {
            cr = c[r];
        } else {
            cr = 0.0f;
            for (int64_t j = 0; j < n; j++) cr += drow[j] * prow[j];
        }
        for (int64_t j = 0; j < n; j++) drow[j] = prow[j] * (drow[j] - cr);
    }
}

/* ---- math ---- */

/* Query head h of batch b; its kv head is h / G. */
static void math_forward_pair(const attn_shape *s, const attn_mask *mask, float scale, int64_t b, int64_t h, float *P,
                              attn_view out, attn_view q, attn_view k, attn_view v)
{
    const int T = (int)s->tokens, Tk = (int)kv_tokens(s), hd = (int)s->head_dim;
    const int64_t g = h / (s->heads / kv_heads(s));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, Tk, hd, scale, head_ptr(q, b, h, hd), (int)q.token_stride,
                head_ptr(k, b, g, hd), (int)k.token_stride, 0.0f, P, Tk);
    const float *kb = mask ? mask_row(mask->key_bias, mask, b) : NULL;
    const float *seg = mask ? mask_row(mask->segment, mask, b) : NULL;
    const bool causal = mask && mask->causal;
    if (kb) add_mask(P, T, Tk, Tk, kb, mask_row(mask->query_gate, mask, b));
    if (seg || causal) add_structure(P, T, Tk, Tk, 0, 0, seg, causal);
    softmax_rows(P, T, Tk, kb, s->window, seg, causal);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, Tk, 1.0f, P, Tk, head_ptr(v, b, g, hd),
                (int)v.token_stride, 0.0f, head_ptr(out, b, h, hd), (int)out.token_stride);
}

/* Query head h of batch b, with P its kept probabilities; accumulates into kv head g's dk and dv. */
static void math_backward_pair(const attn_shape *s, float scale, int64_t b, int64_t h, int64_t g, const float *P,
                               float *dP, attn_view dq, attn_view dk, attn_view dv, attn_view dout, attn_view q,
                               attn_view k, attn_view v)
{
    const int T = (int)s->tokens, Tk = (int)kv_tokens(s), hd = (int)s->head_dim;
    const float *dO = head_ptr(dout, b, h, hd);
    const int ldo = (int)dout.token_stride;
    if (dv.data)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hd, T, 1.0f, P, Tk, dO, ldo, 1.0f,
                    head_ptr(dv, b, g, hd), (int)dv.token_stride);
    if (!dq.data && !dk.data) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, Tk, hd, 1.0f, dO, ldo, head_ptr(v, b, g, hd),
                (int)v.token_stride, 0.0f, dP, Tk);
    softmax_grad_rows(dP, P, NULL, T, Tk);
    if (dq.data)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, Tk, scale, dP, Tk, head_ptr(k, b, g, hd),
                    (int)k.token_stride, 1.0f, head_ptr(dq, b, h, hd), (int)dq.token_stride);
    if (dk.data)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hd, T, scale, dP, Tk, head_ptr(q, b, h, hd),
                    (int)q.token_stride, 1.0f, head_ptr(dk, b, g, hd), (int)dk.token_stride);
}

/* ---- flash ---- */

/* How far a row's running max may lag its scores before the exps are retaken against the new max: e^16 keeps the
 * sums and the output's accumulations far from overflow, and any reference max gives the same softmax. */
#define LAG_MAX 16.0f

/* Online softmax over key tiles, accumulating straight into the output rows, normalised at the end. lse (T floats)
 * may be NULL when nothing is kept. A row's exps are taken against its running max m in the same pass that finds
 * the tile's max (exp_sum_max); only when the tile's max passes m + LAG_MAX are its scores taken again (the tile's
 * GEMM once more, into a second tile: the same bits that backward recomputes) and exponentiated against the new max,
 * and the output row and sum rescaled. So most tiles take one pass over the scores, not two, and leave the output
 * rows alone; lse = m + log(sum) is the same quantity whatever m was. A row's first tile, and a row that has seen
 * only excluded keys so far (m = -inf), take the row's max first. With a window, each query tile visits only the
 * keys its rows can see (span), and each row only its band of a tile. */
static void flash_forward_pair(const attn_shape *s, const attn_mask *mask, float scale, int64_t b, int64_t h, float *ws,
                               float *lse, attn_view out, attn_view q, attn_view k, attn_view v)
{
    const float *kb = mask ? mask_row(mask->key_bias, mask, b) : NULL;
    const float *qg = mask ? mask_row(mask->query_gate, mask, b) : NULL;
    const float *seg = mask ? mask_row(mask->segment, mask, b) : NULL;
    const bool causal = mask && mask->causal, hides = kb || seg || causal; /* some entries are excluded */
    const int64_t T = s->tokens, Tk = kv_tokens(s), hd = s->head_dim, W = s->window;
    const int64_t g = h / (s->heads / kv_heads(s));
    const int64_t bc_max = min64(Bc, Tk), br_max = min64(BrF, T);
    float *S = ws, *S2 = S + br_max * bc_max, *mrow = S2 + br_max * bc_max, *lrow = mrow + br_max;
    const float *qh = head_ptr(q, b, h, hd), *kh = head_ptr(k, b, g, hd), *vh = head_ptr(v, b, g, hd);
    float *oh = head_ptr(out, b, h, hd);
    const int64_t lq = q.token_stride, lk = k.token_stride, lv = v.token_stride, lo = out.token_stride;

    for (int64_t i0 = 0; i0 < T; i0 += BrF) {
        const int64_t br = min64(BrF, T - i0);
        float *o = oh + i0 * lo;
        int64_t jlo, jhi;
        span(s, i0, br, Tk, &jlo, &jhi);
        for (int64_t j0 = jlo; j0 < jhi; j0 += Bc) {
            const int64_t bc = min64(Bc, jhi - j0);
            const bool first = j0 == jlo;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)br, (int)bc, (int)hd, scale, qh + i0 * lq,
                        (int)lq, kh + j0 * lk, (int)lk, 0.0f, S, (int)bc);
            if (kb) add_mask(S, br, bc, bc, kb + j0, qg ? qg + i0 : NULL);
            if (seg || causal) add_structure(S, br, bc, bc, i0, j0, seg, causal);
            bool again = false; /* S2 holds this tile's scores */
            for (int64_t r = 0; r < br; r++) {
                float *row = S + r * bc;
                int64_t a, e;
                band(W, i0 + r, j0, bc, &a, &e);
                float m_new, sum, mx;
                if (!first && a < e && mrow[r] > -INFINITY) { /* against the lagging max */
                    m_new = mrow[r];
                    sum = exp_sum_max(row + a, e - a, m_new, &mx);
                    if (mx > m_new + LAG_MAX) { /* the row's scores again (its exps overwrote them), against mx */
                        if (!again) { /* the tile's GEMM once more: the same call, so the same bits as S's */
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)br, (int)bc, (int)hd, scale,
                                        qh + i0 * lq, (int)lq, kh + j0 * lk, (int)lk, 0.0f, S2, (int)bc);
                            if (kb) add_mask(S2, br, bc, bc, kb + j0, qg ? qg + i0 : NULL);
                            if (seg || causal) add_structure(S2, br, bc, bc, i0, j0, seg, causal);
                            again = true;
                        }
                        memcpy(row + a, S2 + r * bc + a, (size_t)(e - a) * sizeof(float));
                        m_new = mx;
                        sum = exp_sum(row + a, e - a, m_new);
                    }
                    if (hides) { /* the excluded keys' exps out of the row and its sum (row_sum: exp_sum's order) */
                        zero_excluded(row + a, e - a, kb ? kb + j0 + a : NULL);
                        if (seg || causal) zero_unseen(row, a, e, i0 + r, j0, seg, causal);
                        sum = row_sum(row + a, e - a);
                    }
                } else {
                    mx = a < e ? row_max(row + a, e - a) : -INFINITY;
                    /* first tile: no previous accumulator (out may hold anything, even NaN). While every key so far
                     * is excluded (or outside the window), m_new is -inf and the exps are garbage that zero_excluded
                     * overwrites (or none are taken): the row's sum and output stay 0, and the first kept key's
                     * correction e^(-inf) = 0 keeps them so. */
                    m_new = first || mx > mrow[r] ? mx : mrow[r];
                    if (hides) {
                        for (int64_t j = a; j < e; j++) row[j] = exp_f(row[j] - m_new);
                        zero_excluded(row + a, e - a, kb ? kb + j0 + a : NULL);
                        if (seg || causal) zero_unseen(row, a, e, i0 + r, j0, seg, causal);
                        sum = row_sum(row + a, e - a);
                    } else {
                        sum = exp_sum(row + a, e - a, m_new);
                    }
                }
                zero_outside(row, bc, a, e);
                if (first) {
                    lrow[r] = sum;
                } else {
                    if (m_new != mrow[r]) {
                        const float corr = expf(mrow[r] - m_new);
                        float *orow = o + r * lo;
                        for (int64_t j = 0; j < hd; j++) orow[j] *= corr;
                        lrow[r] *= corr;
                    }
                    lrow[r] += sum;
                }
                mrow[r] = m_new;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)br, (int)hd, (int)bc, 1.0f, S, (int)bc,
                        vh + j0 * lv, (int)lv, first ? 0.0f : 1.0f, o, (int)lo);
        }
        for (int64_t r = 0; r < br; r++) {
            const float inv = 1.0f / lrow[r];
            float *orow = o + r * lo;
            for (int64_t j = 0; j < hd; j++) orow[j] *= inv;
            if (lse) lse[i0 + r] = mrow[r] + logf(lrow[r]);
        }
    }
}

/* One query head's operands in the flash backward: its q, k, v and dO rows, and its sample's mask rows. */
typedef struct flash_head {
    const float *q, *k, *v, *dout, *lse, *kb, *qg, *seg;
    int64_t lq, lk, lv, ldo;
    bool causal;
} flash_head;

/* P's tile (rows i0.., keys j0..) recomputed from the same scores as the forward's (the same GEMM), in P (br x bc) */
static void flash_p_tile(const attn_shape *s, const flash_head *f, float scale, float *P, int64_t i0, int64_t br,
                         int64_t j0, int64_t bc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)br, (int)bc, (int)s->head_dim, scale, f->q + i0 * f->lq,
                (int)f->lq, f->k + j0 * f->lk, (int)f->lk, 0.0f, P, (int)bc);
    if (f->kb) add_mask(P, br, bc, bc, f->kb + j0, f->qg ? f->qg + i0 : NULL);
    for (int64_t r = 0; r < br; r++) {
        float *row = P + r * bc;
        const float l = f->lse[i0 + r];
        int64_t a, e;
        band(s->window, i0 + r, j0, bc, &a, &e);
        for (int64_t j = a; j < e; j++) row[j] = exp_f(row[j] - l);
        zero_outside(row, bc, a, e);
        zero_excluded(row, bc, f->kb ? f->kb + j0 : NULL);
        if (f->seg || f->causal) zero_unseen(row, 0, bc, i0 + r, j0, f->seg, f->causal);
    }
}

/* The backward's tiles in order: each key tile (Bc), and within it the query tiles (Br) that see it (span). Start
 * from (bwd_tile){0}; each call moves to the next tile, false past the last. */
typedef struct bwd_tile {
    int64_t j0, bc, i0, br, ihi;
    bool started;
} bwd_tile;

static bool next_tile(const attn_shape *s, bwd_tile *t)
{
    if (t->started) t->i0 += Br;
    while (!t->started || t->i0 >= t->ihi) {
        if (t->started) t->j0 += Bc;
        t->started = true;
        if (t->j0 >= kv_tokens(s)) return false;
        t->bc = min64(Bc, kv_tokens(s) - t->j0);
        span(s, t->j0, t->bc, s->tokens, &t->i0, &t->ihi);
    }
    t->br = min64(Br, t->ihi - t->i0);
    return true;
}

/* dP's tile: dO V^T */
static void flash_dp_tile(const attn_shape *s, const flash_head *f, float *dP, int64_t i0, int64_t br, int64_t j0,
                          int64_t bc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)br, (int)bc, (int)s->head_dim, 1.0f,
                f->dout + i0 * f->ldo, (int)f->ldo, f->v + j0 * f->lv, (int)f->lv, 0.0f, dP, (int)bc);
}

/* D_i = rowsum(dO_i * O_i) = rowsum(dP_i * P_i), without materialising a whole row of P: from the output where the
 * caller gives the forward's own (oh), else from P and dP in a first pass over the tiles (two more products a tile),
 * for a caller whose kept output is rounded (mixed_precision bf16): D from a rounded O no longer matches the P that
 * backward recomputes, and dS = P (dP - D) cancels, so its rounding error reaches dq and dk amplified. */
static void flash_rowsum(const attn_shape *s, const flash_head *f, float scale, const float *oh, int64_t lo, float *P,
                         float *dP, float *D)
{
    const int64_t T = s->tokens, hd = s->head_dim;
    if (oh) {
        for (int64_t t = 0; t < T; t++) {
            const float *orow = oh + t * lo, *drow = f->dout + t * f->ldo;
            float acc = 0.0f;
            for (int64_t j = 0; j < hd; j++) acc += orow[j] * drow[j];
            D[t] = acc;
        }
        return;
    }
    for (int64_t t = 0; t < T; t++) D[t] = 0.0f;
    for (bwd_tile t = {0}; next_tile(s, &t);) {
        flash_p_tile(s, f, scale, P, t.i0, t.br, t.j0, t.bc);
        flash_dp_tile(s, f, dP, t.i0, t.br, t.j0, t.bc);
        for (int64_t r = 0; r < t.br; r++) {
            const float *prow = P + r * t.bc, *drow = dP + r * t.bc;
            float acc = 0.0f;
            for (int64_t j = 0; j < t.bc; j++) acc += prow[j] * drow[j];
            D[t.i0 + r] += acc;
        }
    }
}

/* Query head h of batch b; accumulates into kv head g's dk and dv. With a window, each key tile visits only the
 * queries that see it. */
static void flash_backward_pair(const attn_shape *s, const attn_mask *mask, float scale, int64_t b, int64_t h,
                                int64_t g, float *ws, const float *lse, attn_view dq, attn_view dk, attn_view dv,
                                attn_view dout, attn_view q, attn_view k, attn_view v, attn_view out)
{
    const int64_t T = s->tokens, Tk = kv_tokens(s), hd = s->head_dim;
    const int64_t bc_max = min64(Bc, Tk), br_max = min64(Br, T);
    float *P = ws, *dP = ws + br_max * bc_max, *D = dP + br_max * bc_max;
    const flash_head f = {.q = head_ptr(q, b, h, hd), .k = head_ptr(k, b, g, hd), .v = head_ptr(v, b, g, hd),
                          .dout = head_ptr(dout, b, h, hd), .lse = lse,
                          .kb = mask ? mask_row(mask->key_bias, mask, b) : NULL,
                          .qg = mask ? mask_row(mask->query_gate, mask, b) : NULL,
                          .seg = mask ? mask_row(mask->segment, mask, b) : NULL, .lq = q.token_stride,
                          .lk = k.token_stride, .lv = v.token_stride, .ldo = dout.token_stride,
                          .causal = mask && mask->causal};
    float *dqh = dq.data ? head_ptr(dq, b, h, hd) : NULL;
    float *dkh = dk.data ? head_ptr(dk, b, g, hd) : NULL;
    float *dvh = dv.data ? head_ptr(dv, b, g, hd) : NULL;
    const int64_t ldq = dq.token_stride, ldk = dk.token_stride, ldv = dv.token_stride;
    const bool need_ds = dqh || dkh;

    if (need_ds) flash_rowsum(s, &f, scale, out.data ? head_ptr(out, b, h, hd) : NULL, out.token_stride, P, dP, D);
    for (bwd_tile t = {0}; next_tile(s, &t);) {
        const int64_t i0 = t.i0, br = t.br, j0 = t.j0, bc = t.bc;
        flash_p_tile(s, &f, scale, P, i0, br, j0, bc);
        if (dvh)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)bc, (int)hd, (int)br, 1.0f, P, (int)bc,
                        f.dout + i0 * f.ldo, (int)f.ldo, 1.0f, dvh + j0 * ldv, (int)ldv);
        if (!need_ds) continue;
        flash_dp_tile(s, &f, dP, i0, br, j0, bc);
        softmax_grad_rows(dP, P, D + i0, br, bc);
        if (dqh)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)br, (int)hd, (int)bc, scale, dP, (int)bc,
                        f.k + j0 * f.lk, (int)f.lk, 1.0f, dqh + i0 * ldq, (int)ldq);
        if (dkh)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)bc, (int)hd, (int)br, scale, dP, (int)bc,
                        f.q + i0 * f.lq, (int)f.lq, 1.0f, dkh + j0 * ldk, (int)ldk);
    }
}

/* ---- entry points ---- */

/* What a mask may hold for the mechanism (ops.h): linear attention takes only linear_rope, the others all but it. */
static st_status check_mask_kind(const attn_shape *s, const attn_mask *m)
{
    if (!m) return ST_OK;
    if (s->mechanism != ATTN_LINEAR && m->linear_rope)
        return st_fail(ST_ERR_INVALID, "attention mask: linear_rope is for linear attention only");
    if (s->mechanism == ATTN_LINEAR && (m->key_bias || m->query_gate || structured(m)))
        return st_fail(ST_ERR_INVALID, "attention: linear attention takes no key_bias, query_gate, segment or causal "
                                       "mask (only linear_rope)");
    return ST_OK;
}

static st_status attention_forward_run(pool *p, const attn_shape *s, const attn_mask *mask, attn_view out, attn_view q,
                                       attn_view k, attn_view v, op_state *keep)
{
    st_status st = check_shape(s);
    if (st == ST_OK) st = check_mask_kind(s, mask);
    if (st != ST_OK) return st;
    if ((st = op_state_alloc(keep, p, attention_kept_bytes(s), "attention kept state")) != ST_OK) return st;
    if (empty(s)) return ST_OK;

    const int threads = ops_threads();
    const bool math = s->mechanism == ATTN_MATH;
    const attn_pass pass = keep ? ATTN_FORWARD_KEEP : ATTN_FORWARD;
    const size_t per = per_thread_floats(s, pass), bytes = attention_workspace_bytes(s, threads, pass);
    float *ws = NULL;
    if (bytes) {
        st = pool_alloc(p, bytes, MEM_WORKSPACE, "attention forward workspace", (void **)&ws);
        if (st != ST_OK) {
            if (keep) op_state_release(keep);
            return st;
        }
    }
    if (op_dry(out.data)) return pool_free(p, ws), ST_OK;
    const bool linear = s->mechanism == ATTN_LINEAR;
    float *ids = NULL; /* the structure's check: a sample's kept segments */
    if (structured(mask))
        st = pool_alloc(p, (size_t)s->tokens * sizeof(float), MEM_WORKSPACE, "attention mask check", (void **)&ids);
    if (!st && mask && !linear) st = check_mask(s, mask, ids);
    pool_free(p, ids);
    if (st != ST_OK) {
        pool_free(p, ws);
        if (keep) op_state_release(keep);
        return st;
    }
    const int64_t H = s->heads, T = s->tokens, pairs = s->batch * s->heads;
    const size_t kept_pair = (size_t)T * (size_t)(math ? kv_tokens(s) : 1);
    const float scale = attn_scale(s);
    float *kept = keep ? keep->data : NULL;
    if (s->mechanism == ATTN_LINEAR) {
        linear_attention_forward(s, threads, ws, kept, mask ? mask->linear_rope : NULL, out, q, k, v);
        pool_free(p, ws);
        return ST_OK;
    }

#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t bh = 0; bh < pairs; bh++) {
        float *mine = ws ? ws + (size_t)omp_get_thread_num() * per : NULL;
        float *kp = kept ? kept + (size_t)bh * kept_pair : NULL;
        if (math)
            math_forward_pair(s, mask, scale, bh / H, bh % H, kp ? kp : mine, out, q, k, v);
        else
            flash_forward_pair(s, mask, scale, bh / H, bh % H, mine, kp, out, q, k, v);
    }
    pool_free(p, ws);
    return ST_OK;
}

static st_status attention_backward_run(pool *p, const attn_shape *s, const attn_mask *mask, attn_view dq, attn_view dk,
                                        attn_view dv, attn_view dout, attn_view q, attn_view k, attn_view v,
                                        attn_view out, const op_state *keep)
{
    st_status st = check_shape(s);
    if (st == ST_OK) st = check_mask_kind(s, mask);
    if (st != ST_OK || empty(s)) return st;
    if (!keep || !keep->data)
        return st_fail(ST_ERR_INVALID, "attention_backward: the forward kept nothing (keep was NULL)");

    const int threads = ops_threads();
    const size_t per = per_thread_floats(s, ATTN_BACKWARD);
    float *ws = NULL;
    st = pool_alloc(p, attention_workspace_bytes(s, threads, ATTN_BACKWARD), MEM_WORKSPACE,
                    "attention backward workspace", (void **)&ws);
    if (st != ST_OK) return st;
    if (op_dry(dout.data)) return pool_free(p, ws), ST_OK;
    if (s->mechanism == ATTN_LINEAR) {
        linear_attention_backward(s, threads, ws, keep->data, mask ? mask->linear_rope : NULL, dq, dk, dv, dout, q, k,
                                  v);
        pool_free(p, ws);
        return ST_OK;
    }
    const bool math = s->mechanism == ATTN_MATH;
    /* one (batch, kv head) pair a thread: its group's query heads all accumulate into its dk and dv */
    const int64_t H = s->heads, KVH = kv_heads(s), G = H / KVH, pairs = s->batch * KVH;
    const size_t kept_pair = (size_t)s->tokens * (size_t)(math ? kv_tokens(s) : 1);
    const float scale = attn_scale(s);
    const float *kept = keep->data;

#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t bg = 0; bg < pairs; bg++) {
        float *mine = ws + (size_t)omp_get_thread_num() * per;
        const int64_t b = bg / KVH, g = bg % KVH;
        for (int64_t h = g * G; h < (g + 1) * G; h++) {
            const float *kp = kept + (size_t)(b * H + h) * kept_pair;
            if (math)
                math_backward_pair(s, scale, b, h, g, kp, mine, dq, dk, dv, dout, q, k, v);
            else
                flash_backward_pair(s, mask, scale, b, h, g, mine, kp, dq, dk, dv, dout, q, k, v, out);
        }
    }
    pool_free(p, ws);
    return ST_OK;
}

/* The plain ops are the masked ones without a mask, under the same profile kind and FLOP count (the mask's
 * additions are O(T Tk) against the products' O(T Tk hd)). The count is of the products run: with a window, the
 * flash tiles' area (score_area), not only the band. */
st_status attention_forward_masked(pool *p, const attn_shape *s, const attn_mask *mask, attn_view out, attn_view q,
                                   attn_view k, attn_view v, op_state *keep)
{
    const char *why = fallback_attention_case(s, mask); /* what a device kernel leaves to this code */
    const st_status refused = why ? fallback_enter("attention_forward", why, q.data) : ST_OK;
    if (refused) return refused;
    const double t0 = prof_now();
    const st_status r = attention_forward_run(p, s, mask, out, q, k, v, keep);
    const double area = s->mechanism == ATTN_LINEAR ? (double)s->tokens * s->head_dim : score_area(s, false);
    prof_add(OP_ATTENTION, t0, 4.0 * s->batch * s->heads * s->head_dim * area, 0);
    return r;
}

st_status attention_backward_masked(pool *p, const attn_shape *s, const attn_mask *mask, attn_view dq, attn_view dk,
                                    attn_view dv, attn_view dout, attn_view q, attn_view k, attn_view v, attn_view out,
                                    const op_state *keep)
{
    const bool flash = s->mechanism == ATTN_FLASH, d_from_p = flash && !out.data && (dq.data || dk.data);
    const char *why = fallback_attention_case(s, mask);
    if (!why && d_from_p) why = "no output (D from P)";
    const st_status refused = why ? fallback_enter("attention_backward", why, dout.data) : ST_OK;
    if (refused) return refused;
    const double t0 = prof_now();
    const st_status r = attention_backward_run(p, s, mask, dq, dk, dv, dout, q, k, v, out, keep);
    prof_add(OP_ATTENTION, t0,
             (flash ? (d_from_p ? 14.0 : 10.0) : 8.0) * s->batch * s->heads * s->head_dim *
                 (s->mechanism == ATTN_LINEAR ? (double)s->tokens * s->head_dim : score_area(s, true)),
             0);
    return r;
}

st_status attention_forward(pool *p, const attn_shape *s, attn_view out, attn_view q, attn_view k, attn_view v,
                            op_state *keep)
{
    return attention_forward_masked(p, s, NULL, out, q, k, v, keep);
}

st_status attention_backward(pool *p, const attn_shape *s, attn_view dq, attn_view dk, attn_view dv, attn_view dout,
                             attn_view q, attn_view k, attn_view v, attn_view out, const op_state *keep)
{
    return attention_backward_masked(p, s, NULL, dq, dk, dv, dout, q, k, v, out, keep);
}
