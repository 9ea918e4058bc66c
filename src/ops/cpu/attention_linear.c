/* Linear attention with a ReLU feature map (ATTN_LINEAR; ops.h), as diffusers' SanaLinearAttnProcessor2_0 computes
 * it per head: with a = relu(q), c = relu(k),
 *
 *   S = c^T v (hd x hd),  z = sum_s c_s (hd),  out_t = (a_t S) / (a_t . z + 1e-15)
 *
 * and, with a rotary table (SanaLinearAttnProcessor3_0, Sana-Video's), the numerator's features rotated after the
 * ReLU while the normaliser keeps them unrotated: S = rot(c)^T v, out_t = (rot(a_t) S) / (a_t . z + 1e-15).
 * Memory and work are linear in tokens. A (batch, head) pair's S and z are its kept state (hd (hd + 1) floats, not
 * T x T); backward recomputes a and c and reads the forward's output:
 *
 *   g_t = dout_t / den_t,  e_t = -(dout_t . out_t) / den_t,
 *   da = rot^T(g S^T) + e z^T,  dS = rot(a)^T g,  dz = a^T e,  dv = rot(c) dS,  dc = rot^T(v dS^T) + 1 dz^T,
 *   dq = da [q > 0],  dk = dc [k > 0].
 *
 * The tokens go in chunks of CHUNK rows, so that a chunk's features are made once, used by its products (BLAS)
 * while they are in cache, and never stored whole: forward passes over the keys (S, z), then over the queries;
 * backward over the queries (dq, dS, dz), then over the keys (dk, dv). The sums over chunks run in order, so
 * results do not depend on the thread count (a thread takes whole (batch, head) pairs). */
#include "internal.h"

#define LINEAR_EPS 1e-15f
#define CHUNK 256

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

static int64_t chunk_rows(const attn_shape *s) { return s->tokens < CHUNK ? s->tokens : CHUNK; }

size_t linear_attention_kept_floats(const attn_shape *s)
{
    return (size_t)s->batch * (size_t)s->heads * (size_t)(s->head_dim * (s->head_dim + 1));
}

size_t linear_attention_thread_floats(const attn_shape *s, bool backward)
{
    const size_t R = (size_t)chunk_rows(s), hd = (size_t)s->head_dim;
    if (!backward) return round16(R * hd + R + hd * (hd + 1)); /* the sums last, when not kept */
    return round16(3 * R * hd + 2 * R + hd * hd + hd);
}

/* x (n, hd) = relu of rows t0 .. t0 + n of head h of sample b, contiguous */
static void relu_rows(float *x, attn_view in, int64_t b, int64_t h, int64_t t0, int64_t n, int64_t hd)
{
    for (int64_t t = 0; t < n; t++) {
        const float *r = in.data + b * in.batch_stride + (t0 + t) * in.token_stride + h * hd;
        for (int64_t i = 0; i < hd; i++) x[t * hd + i] = r[i] > 0.0f ? r[i] : 0.0f;
    }
}

/* Rotates the n contiguous rows of x by the table's rows (rope_forward's interleaved pairs, rope_backward's inverse
 * with back), in place. */
static void rotate_rows(float *x, const float *table, int64_t n, int64_t hd, bool back)
{
    const float sign = back ? -1.0f : 1.0f;
    for (int64_t t = 0; t < n; t++)
        for (int64_t p = 0; p < hd / 2; p++) {
            float *e = x + t * hd + 2 * p;
            const float c = table[(t * hd / 2 + p) * 2], sn = sign * table[(t * hd / 2 + p) * 2 + 1];
            const float x0 = e[0], x1 = e[1];
            e[0] = x0 * c - x1 * sn, e[1] = x1 * c + x0 * sn;
        }
}

/* den_t = a_t . z + eps */
static void denominators(float *den, const float *a, const float *z, int64_t n, int64_t hd)
{
    for (int64_t t = 0; t < n; t++) {
        float d = 0.0f;
        for (int64_t i = 0; i < hd; i++) d += a[t * hd + i] * z[i];
        den[t] = d + LINEAR_EPS;
    }
}

void linear_forward_pair(const attn_shape *s, int64_t b, int64_t h, float *ws, float *kept, const float *rope,
                         attn_view out, attn_view q, attn_view k, attn_view v)
{
    const int64_t T = s->tokens, hd = s->head_dim, R = chunk_rows(s);
    float *x = ws, *den = x + R * hd, *S = kept, *z = kept + hd * hd;
    const float *vh = v.data + b * v.batch_stride + h * hd;
    float *oh = out.data + b * out.batch_stride + h * hd;
    for (int64_t i = 0; i < hd; i++) z[i] = 0.0f;
    for (int64_t t0 = 0; t0 < T; t0 += R) {
        const int64_t n = T - t0 < R ? T - t0 : R;
        relu_rows(x, k, b, h, t0, n, hd);
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < hd; i++) z[i] += x[t * hd + i];
        if (rope) rotate_rows(x, rope + t0 * hd, n, hd, false);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)hd, (int)hd, (int)n, 1.0f, x, (int)hd,
                    vh + t0 * v.token_stride, (int)v.token_stride, t0 ? 1.0f : 0.0f, S, (int)hd);
    }
    for (int64_t t0 = 0; t0 < T; t0 += R) {
        const int64_t n = T - t0 < R ? T - t0 : R;
        float *o = oh + t0 * out.token_stride;
        relu_rows(x, q, b, h, t0, n, hd);
        denominators(den, x, z, n, hd);
        if (rope) rotate_rows(x, rope + t0 * hd, n, hd, false);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)hd, (int)hd, 1.0f, x, (int)hd, S, (int)hd,
                    0.0f, o, (int)out.token_stride);
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < hd; j++) o[t * out.token_stride + j] /= den[t];
    }
}

void linear_backward_pair(const attn_shape *s, int64_t b, int64_t h, float *ws, const float *kept, const float *rope,
                          attn_view dq, attn_view dk, attn_view dv, attn_view dout, attn_view q, attn_view k,
                          attn_view v, attn_view out)
{
    const int64_t T = s->tokens, hd = s->head_dim, R = chunk_rows(s);
    float *x = ws, *g = x + R * hd, *dx = g + R * hd, *den = dx + R * hd, *e = den + R, *dS = e + R, *dz = dS + hd * hd;
    const float *S = kept, *z = kept + hd * hd;
    const float *go = dout.data + b * dout.batch_stride + h * hd, *oh = out.data + b * out.batch_stride + h * hd;
    const float *qh = q.data + b * q.batch_stride + h * hd, *kh = k.data + b * k.batch_stride + h * hd;
    const float *vh = v.data + b * v.batch_stride + h * hd;
    float *dqh = dq.data + b * dq.batch_stride + h * hd, *dkh = dk.data + b * dk.batch_stride + h * hd;
    float *dvh = dv.data + b * dv.batch_stride + h * hd;
    for (int64_t i = 0; i < hd; i++) dz[i] = 0.0f;
    /* the queries: g, e; dz = a^T e; dS = rot(a)^T g; dq += [q > 0] (rot^T(g S^T) + e z) */
    for (int64_t t0 = 0; t0 < T; t0 += R) {
        const int64_t n = T - t0 < R ? T - t0 : R;
        relu_rows(x, q, b, h, t0, n, hd);
        denominators(den, x, z, n, hd);
        for (int64_t t = 0; t < n; t++) {
            const float *gt = go + (t0 + t) * dout.token_stride, *ot = oh + (t0 + t) * out.token_stride;
            const float inv = 1.0f / den[t];
            float dot = 0.0f;
            for (int64_t j = 0; j < hd; j++) g[t * hd + j] = gt[j] * inv, dot += gt[j] * ot[j];
            e[t] = -dot * inv;
        }
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < hd; i++) dz[i] += x[t * hd + i] * e[t];
        if (rope) rotate_rows(x, rope + t0 * hd, n, hd, false);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)hd, (int)hd, (int)n, 1.0f, x, (int)hd, g, (int)hd,
                    t0 ? 1.0f : 0.0f, dS, (int)hd);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)hd, (int)hd, 1.0f, g, (int)hd, S, (int)hd,
                    0.0f, dx, (int)hd);
        if (rope) rotate_rows(dx, rope + t0 * hd, n, hd, true);
        for (int64_t t = 0; t < n; t++) { /* branch-free, so that the loop vectorises: q's sign is data */
            const float *qt = qh + (t0 + t) * q.token_stride, *da = dx + t * hd;
            float *dqt = dqh + (t0 + t) * dq.token_stride;
            for (int64_t i = 0; i < hd; i++) dqt[i] += (qt[i] > 0.0f ? 1.0f : 0.0f) * (da[i] + e[t] * z[i]);
        }
    }
    /* the keys: dv += rot(c) dS; dk += [k > 0] (rot^T(v dS^T) + dz) */
    for (int64_t t0 = 0; t0 < T; t0 += R) {
        const int64_t n = T - t0 < R ? T - t0 : R;
        relu_rows(x, k, b, h, t0, n, hd);
        if (rope) rotate_rows(x, rope + t0 * hd, n, hd, false);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)hd, (int)hd, 1.0f, x, (int)hd, dS, (int)hd,
                    1.0f, dvh + t0 * dv.token_stride, (int)dv.token_stride);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)hd, (int)hd, 1.0f, vh + t0 * v.token_stride,
                    (int)v.token_stride, dS, (int)hd, 0.0f, dx, (int)hd);
        if (rope) rotate_rows(dx, rope + t0 * hd, n, hd, true);
        for (int64_t t = 0; t < n; t++) {
            const float *kt = kh + (t0 + t) * k.token_stride, *dct = dx + t * hd;
            float *dkt = dkh + (t0 + t) * dk.token_stride;
            for (int64_t i = 0; i < hd; i++) dkt[i] += (kt[i] > 0.0f ? 1.0f : 0.0f) * (dct[i] + dz[i]);
        }
    }
}
