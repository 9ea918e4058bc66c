/* Linear attention with a ReLU feature map (ATTN_LINEAR; ops.h), as diffusers' SanaLinearAttnProcessor2_0 computes
 * it per head: with a = relu(q), c = relu(k),
 *
 *   S = c^T v (hd x hd),  z = sum_s c_s (hd),  out_t = (a_t S) / (a_t . z + 1e-15)
 *
 * and, with a rotary table (SanaLinearAttnProcessor3_0, Sana-Video's), the numerator's features rotated after the
 * ReLU while the normaliser keeps them unrotated: S = rot(c)^T v, out_t = (rot(a_t) S) / (a_t . z + 1e-15).
 * Memory and work are linear in tokens. A sample's S and z are its kept state (hd (hd + 1) floats a head, not
 * T x T); backward recomputes a and c, and not the forward's output either: with y = rot^T(g S^T),
 *
 *   g_t = dout_t / den_t,  e_t = -(dout_t . out_t) / den_t = -(a_t . y_t) / den_t,
 *   da = y + e z^T,  dS = rot(a)^T g,  dz = a^T e,  dv = rot(c) dS,  dc = rot^T(v dS^T) + 1 dz^T,
 *   dq = da [q > 0],  dk = dc [k > 0].
 *
 * At a head width of 32 the products do 8 to 16 flops a byte of q, k and v, so the op runs as fast as it streams
 * them. Rows are read whole (or in runs of WIDTH floats): one head's slice of a row is a short piece that the
 * prefetchers do not follow. A work unit is a segment of SEGMENT tokens of a sample by a group of heads; it reads
 * its rows in chunks of CHUNK into buffers that BLAS multiplies head by head while they are in cache. Each pass
 * over the keys sums a segment's S and z; the segments' sums are added in order, so results depend neither on the
 * thread count nor on how units are shared out. Forward: keys (S, z), sums, queries (out). Backward: queries (dq,
 * dS, dz), sums, keys (dk, dv). */
#include <omp.h>

#include "internal.h"

#define LINEAR_EPS 1e-15f
#define CHUNK 64    /* rows a pass holds in cache */
#define WIDTH 512   /* floats of a row a unit reads, at most (whole heads, at least one) */
#define SEGMENT 512 /* tokens a unit covers */

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

typedef struct layout {
    int64_t B, T, H, hd;
    int64_t R;            /* rows a chunk */
    int64_t G, W;         /* heads a group and their floats, G hd */
    int64_t groups, segs; /* a sample's head groups and token segments */
    size_t state;         /* a sample's sums: S of every head (H hd hd), then z of every head (H hd) */
} layout;

static layout layout_of(const attn_shape *s)
{
    layout L = {.B = s->batch, .T = s->tokens, .H = s->heads, .hd = s->head_dim};
    L.R = min64(L.T, CHUNK);
    L.G = min64(L.H, WIDTH / L.hd > 1 ? WIDTH / L.hd : 1);
    L.W = L.G * L.hd;
    L.groups = (L.H + L.G - 1) / L.G;
    L.segs = (L.T + SEGMENT - 1) / SEGMENT;
    L.state = (size_t)(L.H * L.hd * (L.hd + 1));
    return L;
}

size_t linear_attention_kept_floats(const attn_shape *s)
{
    return (size_t)s->batch * (size_t)s->heads * (size_t)(s->head_dim * (s->head_dim + 1));
}

/* a thread's chunk buffers (two forward, three backward) and a row scale for each of its heads */
static size_t thread_floats(const layout *L, attn_pass pass)
{
    return round16((size_t)((pass == ATTN_BACKWARD ? 3 : 2) * L->R * L->W + L->R * L->G));
}

/* the segments' sums; forward without keep, the sample's sums; backward, the sample's dS and dz; then the threads' */
size_t linear_attention_workspace_floats(const attn_shape *s, int threads, attn_pass pass)
{
    const layout L = layout_of(s);
    const size_t sums = (size_t)(L.B * L.segs) * L.state + (pass == ATTN_FORWARD_KEEP ? 0 : (size_t)L.B * L.state);
    return round16(sums) + (size_t)threads * thread_floats(&L, pass);
}

typedef struct unit {
    int64_t b, seg, h0, n; /* sample b's heads h0 .. h0 + n */
    int64_t t0, t1;        /* its tokens */
} unit;

static unit unit_of(const layout *L, int64_t u)
{
    const int64_t g = u % L->groups, seg = u / L->groups % L->segs, b = u / L->groups / L->segs;
    const int64_t h0 = g * L->G, t0 = seg * SEGMENT;
    return (unit){b, seg, h0, min64(L->G, L->H - h0), t0, min64(L->T, t0 + SEGMENT)};
}

static float *row_of(attn_view x, const unit *w, int64_t t, int64_t hd)
{
    return x.data + w->b * x.batch_stride + t * x.token_stride + w->h0 * hd;
}

/* Rows t0 .. t0 + n of the unit's heads of x into buf (ld W), relu'd when asked; z, when given, gathers their sum */
static void gather(float *buf, attn_view x, const layout *L, const unit *w, int64_t t0, int64_t n, bool relu,
                   float *z)
{
    const int64_t m = w->n * L->hd;
    for (int64_t t = 0; t < n; t++) {
        const float *in = row_of(x, w, t0 + t, L->hd);
        float *o = buf + t * L->W;
        if (!relu) {
            memcpy(o, in, (size_t)m * sizeof(float));
            continue;
        }
        for (int64_t i = 0; i < m; i++) o[i] = in[i] > 0.0f ? in[i] : 0.0f;
        if (z)
            for (int64_t i = 0; i < m; i++) z[i] += o[i];
    }
}

/* x += buf over rows t0 .. t0 + n of the unit's heads */
static void scatter_add(attn_view x, const float *buf, const layout *L, const unit *w, int64_t t0, int64_t n)
{
    for (int64_t t = 0; t < n; t++) {
        float *o = row_of(x, w, t0 + t, L->hd);
        const float *in = buf + t * L->W;
        for (int64_t i = 0; i < w->n * L->hd; i++) o[i] += in[i];
    }
}

/* Eight running sums added in a tree written out: gcc's own epilogue for a vector reduction adds the lanes one after
 * another through memory, a long chain at every row of every head. */
static float dot(const float *a, const float *b, int64_t n)
{
    float d[8] = {0};
    int64_t i0 = 0;
    for (; i0 + 8 <= n; i0 += 8)
        for (int i = 0; i < 8; i++) d[i] += a[i0 + i] * b[i0 + i];
    for (int i = 0; i0 + i < n; i++) d[i] += a[i0 + i] * b[i0 + i];
    return ((d[0] + d[4]) + (d[1] + d[5])) + ((d[2] + d[6]) + (d[3] + d[7]));
}

/* Rotates one head's n rows of x (ld apart) by the table's rows (rope_forward's interleaved pairs, rope_backward's
 * inverse with back), in place. */
static void rotate_rows(float *x, int64_t ld, const float *table, int64_t n, int64_t hd, bool back)
{
    const float sign = back ? -1.0f : 1.0f;
    for (int64_t t = 0; t < n; t++)
        for (int64_t p = 0; p < hd / 2; p++) {
            float *e = x + t * ld + 2 * p;
            const float c = table[(t * hd / 2 + p) * 2], sn = sign * table[(t * hd / 2 + p) * 2 + 1];
            const float x0 = e[0], x1 = e[1];
            e[0] = x0 * c - x1 * sn, e[1] = x1 * c + x0 * sn;
        }
}

/* Sums of sample b's segments, added in order: dst = part_0 + part_1 + ... */
static void sum_segments(const layout *L, float *dst, const float *part, int64_t b)
{
    const float *p = part + (size_t)(b * L->segs) * L->state;
    memcpy(dst, p, L->state * sizeof(float));
    for (int64_t sg = 1; sg < L->segs; sg++)
        for (size_t i = 0; i < L->state; i++) dst[i] += p[(size_t)sg * L->state + i];
}

/* The unit's share of its segment's S and z: S += rot(c)^T v, z += c */
static void keys_forward(const layout *L, const unit *w, float *ws, float *part, const float *rope, attn_view k,
                         attn_view v)
{
    const int64_t hd = L->hd, R = L->R, W = L->W;
    float *x = ws, *y = x + R * W;
    float *S = part + (size_t)(w->b * L->segs + w->seg) * L->state, *z = S + L->H * hd * hd + w->h0 * hd;
    memset(z, 0, (size_t)(w->n * hd) * sizeof(float));
    for (int64_t t0 = w->t0; t0 < w->t1; t0 += R) {
        const int64_t n = min64(R, w->t1 - t0);
        gather(x, k, L, w, t0, n, true, z);
        gather(y, v, L, w, t0, n, false, NULL);
        for (int64_t j = 0; j < w->n; j++) {
            if (rope) rotate_rows(x + j * hd, W, rope + t0 * hd, n, hd, false);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)hd, (int)hd, (int)n, 1.0f, x + j * hd, (int)W,
                        y + j * hd, (int)W, t0 > w->t0 ? 1.0f : 0.0f, S + (w->h0 + j) * hd * hd, (int)hd);
        }
    }
}

/* out = rot(a) S / (a . z + eps) over the unit's rows */
static void queries_forward(const layout *L, const unit *w, float *ws, const float *sums, const float *rope,
                            attn_view out, attn_view q)
{
    const int64_t hd = L->hd, R = L->R, W = L->W;
    float *x = ws, *y = x + R * W, *inv = y + R * W; /* inv: head j's row t at j R + t */
    const float *S = sums + (size_t)w->b * L->state, *z = S + L->H * hd * hd;
    for (int64_t t0 = w->t0; t0 < w->t1; t0 += R) {
        const int64_t n = min64(R, w->t1 - t0);
        gather(x, q, L, w, t0, n, true, NULL);
        for (int64_t j = 0; j < w->n; j++) {
            float *a = x + j * hd;
            const float *zj = z + (w->h0 + j) * hd;
            for (int64_t t = 0; t < n; t++) inv[j * R + t] = 1.0f / (dot(a + t * W, zj, hd) + LINEAR_EPS);
            if (rope) rotate_rows(a, W, rope + t0 * hd, n, hd, false);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)hd, (int)hd, 1.0f, a, (int)W,
                        S + (w->h0 + j) * hd * hd, (int)hd, 0.0f, y + j * hd, (int)W);
        }
        for (int64_t t = 0; t < n; t++) {
            float *o = row_of(out, w, t0 + t, hd);
            for (int64_t j = 0; j < w->n; j++)
                for (int64_t i = 0; i < hd; i++) o[j * hd + i] = y[t * W + j * hd + i] * inv[j * R + t];
        }
    }
}

/* The unit's rows of dq, and its share of its segment's dS += rot(a)^T g and dz += a^T e */
static void queries_backward(const layout *L, const unit *w, float *ws, const float *sums, float *part,
                             const float *rope, attn_view dq, attn_view dout, attn_view q)
{
    const int64_t hd = L->hd, R = L->R, W = L->W;
    float *x = ws, *g = x + R * W, *y = g + R * W, *e = y + R * W; /* e: head j's row t at j R + t */
    const float *S = sums + (size_t)w->b * L->state, *z = S + L->H * hd * hd;
    float *dS = part + (size_t)(w->b * L->segs + w->seg) * L->state, *dz = dS + L->H * hd * hd;
    memset(dz + w->h0 * hd, 0, (size_t)(w->n * hd) * sizeof(float));
    for (int64_t t0 = w->t0; t0 < w->t1; t0 += R) {
        const int64_t n = min64(R, w->t1 - t0);
        gather(x, q, L, w, t0, n, true, NULL);
        gather(g, dout, L, w, t0, n, false, NULL);
        for (int64_t t = 0; t < n; t++) /* g = dout / den, and e = 1 / den for now */
            for (int64_t j = 0; j < w->n; j++) {
                float *gt = g + t * W + j * hd;
                const float inv = 1.0f / (dot(x + t * W + j * hd, z + (w->h0 + j) * hd, hd) + LINEAR_EPS);
                e[j * R + t] = inv;
                for (int64_t i = 0; i < hd; i++) gt[i] *= inv;
            }
        for (int64_t j = 0; j < w->n; j++) {
            const int64_t h = w->h0 + j;
            float *a = x + j * hd, *gj = g + j * hd, *da = y + j * hd, *ej = e + j * R;
            const float *zj = z + h * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)hd, (int)hd, 1.0f, gj, (int)W,
                        S + h * hd * hd, (int)hd, 0.0f, da, (int)W);
            if (rope) rotate_rows(da, W, rope + t0 * hd, n, hd, true);
            for (int64_t t = 0; t < n; t++) {
                const float et = -dot(a + t * W, da + t * W, hd) * ej[t]; /* a local: the loop below vectorises */
                ej[t] = et;
                for (int64_t i = 0; i < hd; i++) /* branch-free, so that the loop vectorises: a's sign is data */
                    da[t * W + i] = (a[t * W + i] > 0.0f ? 1.0f : 0.0f) * (da[t * W + i] + et * zj[i]);
            }
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)n, (int)hd, 1.0f, a, (int)W, ej, 1, 1.0f, dz + h * hd, 1);
            if (rope) rotate_rows(a, W, rope + t0 * hd, n, hd, false);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)hd, (int)hd, (int)n, 1.0f, a, (int)W, gj,
                        (int)W, t0 > w->t0 ? 1.0f : 0.0f, dS + h * hd * hd, (int)hd);
        }
        scatter_add(dq, y, L, w, t0, n);
    }
}

/* The unit's rows of dk += [k > 0] (rot^T(v dS^T) + dz) and dv += rot(c) dS */
static void keys_backward(const layout *L, const unit *w, float *ws, const float *dsums, const float *rope,
                          attn_view dk, attn_view dv, attn_view k, attn_view v)
{
    const int64_t hd = L->hd, R = L->R, W = L->W;
    float *x = ws, *g = x + R * W, *y = g + R * W;
    const float *dS = dsums + (size_t)w->b * L->state, *dz = dS + L->H * hd * hd;
    for (int64_t t0 = w->t0; t0 < w->t1; t0 += R) {
        const int64_t n = min64(R, w->t1 - t0);
        gather(x, k, L, w, t0, n, true, NULL);
        gather(g, v, L, w, t0, n, false, NULL);
        for (int64_t j = 0; j < w->n; j++) {
            const int64_t h = w->h0 + j;
            float *c = x + j * hd, *vj = g + j * hd, *dc = y + j * hd;
            const float *dzj = dz + h * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)hd, (int)hd, 1.0f, vj, (int)W,
                        dS + h * hd * hd, (int)hd, 0.0f, dc, (int)W);
            if (rope) rotate_rows(dc, W, rope + t0 * hd, n, hd, true);
            for (int64_t t = 0; t < n; t++)
                for (int64_t i = 0; i < hd; i++)
                    dc[t * W + i] = (c[t * W + i] > 0.0f ? 1.0f : 0.0f) * (dc[t * W + i] + dzj[i]);
            if (rope) rotate_rows(c, W, rope + t0 * hd, n, hd, false);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)hd, (int)hd, 1.0f, c, (int)W,
                        dS + h * hd * hd, (int)hd, 0.0f, vj, (int)W); /* v's rows are done with: dv's */
        }
        scatter_add(dk, y, L, w, t0, n);
        scatter_add(dv, g, L, w, t0, n);
    }
}

/* The views a pass reads and writes, and the forward's kept sums (NULL: none kept) */
typedef struct pass_views {
    attn_view out, q, k, v, dq, dk, dv, dout;
    float *keep;
} pass_views;

/* Both passes' one schedule (the file's head says which sweep does what): units writing their segments' parts, the
 * parts summed a sample at a time, units reading the sums. kept: the forward's sums, the backward's queries' input. */
static void run_pass(const attn_shape *s, int threads, float *ws, attn_pass pass, const float *kept,
                     const float *rope, const pass_views *a)
{
    const layout L = layout_of(s);
    const int64_t units = L.B * L.segs * L.groups;
    const bool fwd = pass != ATTN_BACKWARD;
    float *part = ws, *sums = a->keep ? a->keep : part + (size_t)(L.B * L.segs) * L.state;
    float *mine0 = ws + linear_attention_workspace_floats(s, 0, pass);
    const size_t per = thread_floats(&L, pass);
#pragma omp parallel num_threads(threads)
    {
        float *mine = mine0 + (size_t)omp_get_thread_num() * per;
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units; u++) {
            const unit w = unit_of(&L, u);
            if (fwd) keys_forward(&L, &w, mine, part, rope, a->k, a->v);
            else queries_backward(&L, &w, mine, kept, part, rope, a->dq, a->dout, a->q);
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < L.B; b++) sum_segments(&L, sums + (size_t)b * L.state, part, b);
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units; u++) {
            const unit w = unit_of(&L, u);
            if (fwd) queries_forward(&L, &w, mine, sums, rope, a->out, a->q);
            else keys_backward(&L, &w, mine, sums, rope, a->dk, a->dv, a->k, a->v);
        }
    }
}

void linear_attention_forward(const attn_shape *s, int threads, float *ws, float *kept, const float *rope,
                              attn_view out, attn_view q, attn_view k, attn_view v)
{
    const pass_views a = {.out = out, .q = q, .k = k, .v = v, .keep = kept};
    run_pass(s, threads, ws, kept ? ATTN_FORWARD_KEEP : ATTN_FORWARD, NULL, rope, &a);
}

void linear_attention_backward(const attn_shape *s, int threads, float *ws, const float *kept, const float *rope,
                               attn_view dq, attn_view dk, attn_view dv, attn_view dout, attn_view q, attn_view k,
                               attn_view v)
{
    const pass_views a = {.q = q, .k = k, .v = v, .dq = dq, .dk = dk, .dv = dv, .dout = dout};
    run_pass(s, threads, ws, ATTN_BACKWARD, kept, rope, &a);
}
