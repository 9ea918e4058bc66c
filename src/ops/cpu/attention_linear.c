/* Linear attention with a ReLU feature map (ATTN_LINEAR; ops.h), as diffusers' SanaLinearAttnProcessor2_0 computes
 * it per head: with a = relu(q), c = relu(k),
 *
 *   S = c^T v (hd x hd),  z = sum_s c_s (hd),  out_t = (a_t S) / (a_t . z + 1e-15)
 *
 * so memory and work are linear in tokens. A (batch, head) pair's S and z are its kept state (hd (hd + 1) floats,
 * not T x T); backward recomputes a and c and reads the forward's output:
 *
 *   g_t = dout_t / den_t,  e_t = -(dout_t . out_t) / den_t,
 *   da = g S^T + e z^T,  dS = a^T g,  dz = a^T e,  dv = c dS,  dc = v dS^T + 1 dz^T,
 *   dq = da [q > 0],  dk = dc [k > 0].
 *
 * Every product goes through BLAS; the sums over tokens run in order, so results do not depend on the thread count
 * (a thread takes whole (batch, head) pairs). */
#include "internal.h"

#define LINEAR_EPS 1e-15f

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

size_t linear_attention_kept_floats(const attn_shape *s)
{
    return (size_t)s->batch * (size_t)s->heads * (size_t)(s->head_dim * (s->head_dim + 1));
}

size_t linear_attention_thread_floats(const attn_shape *s, bool backward)
{
    const size_t T = (size_t)s->tokens, hd = (size_t)s->head_dim;
    if (!backward) return round16(2 * T * hd + T + hd * (hd + 1)); /* the sums last, when not kept */
    return round16(4 * T * hd + 2 * T + hd * hd + hd);
}

/* a = relu(x) of head h of sample b, contiguous (T, hd) */
static void relu_rows(float *a, attn_view x, int64_t b, int64_t h, int64_t T, int64_t hd)
{
    for (int64_t t = 0; t < T; t++) {
        const float *r = x.data + b * x.batch_stride + t * x.token_stride + h * hd;
        for (int64_t i = 0; i < hd; i++) a[t * hd + i] = r[i] > 0.0f ? r[i] : 0.0f;
    }
}

/* den_t = a_t . z + eps */
static void denominators(float *den, const float *a, const float *z, int64_t T, int64_t hd)
{
    for (int64_t t = 0; t < T; t++) {
        float d = 0.0f;
        for (int64_t i = 0; i < hd; i++) d += a[t * hd + i] * z[i];
        den[t] = d + LINEAR_EPS;
    }
}

void linear_forward_pair(const attn_shape *s, int64_t b, int64_t h, float *ws, float *kept, attn_view out,
                         attn_view q, attn_view k, attn_view v)
{
    const int64_t T = s->tokens, hd = s->head_dim;
    float *a = ws, *c = a + T * hd, *den = c + T * hd, *S = kept, *z = kept + hd * hd;
    relu_rows(a, q, b, h, T, hd);
    relu_rows(c, k, b, h, T, hd);
    const float *vh = v.data + b * v.batch_stride + h * hd;
    float *oh = out.data + b * out.batch_stride + h * hd;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)hd, (int)hd, (int)T, 1.0f, c, (int)hd, vh,
                (int)v.token_stride, 0.0f, S, (int)hd);
    for (int64_t i = 0; i < hd; i++) z[i] = 0.0f;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < hd; i++) z[i] += c[t * hd + i];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)hd, (int)hd, 1.0f, a, (int)hd, S, (int)hd,
                0.0f, oh, (int)out.token_stride);
    denominators(den, a, z, T, hd);
    for (int64_t t = 0; t < T; t++) {
        float *ot = oh + t * out.token_stride;
        for (int64_t j = 0; j < hd; j++) ot[j] /= den[t];
    }
}

void linear_backward_pair(const attn_shape *s, int64_t b, int64_t h, float *ws, const float *kept, attn_view dq,
                          attn_view dk, attn_view dv, attn_view dout, attn_view q, attn_view k, attn_view v,
                          attn_view out)
{
    const int64_t T = s->tokens, hd = s->head_dim;
    float *a = ws, *c = a + T * hd, *g = c + T * hd, *dc = g + T * hd, *den = dc + T * hd, *e = den + T;
    float *dS = e + T, *dz = dS + hd * hd;
    const float *S = kept, *z = kept + hd * hd;
    relu_rows(a, q, b, h, T, hd);
    relu_rows(c, k, b, h, T, hd);
    denominators(den, a, z, T, hd);
    const float *go = dout.data + b * dout.batch_stride + h * hd, *oh = out.data + b * out.batch_stride + h * hd;
    for (int64_t t = 0; t < T; t++) {
        const float *gt = go + t * dout.token_stride, *ot = oh + t * out.token_stride, inv = 1.0f / den[t];
        float dot = 0.0f;
        for (int64_t j = 0; j < hd; j++) g[t * hd + j] = gt[j] * inv, dot += gt[j] * ot[j];
        e[t] = -dot * inv;
    }
    /* da = g S^T + e z^T, into dc's buffer for now; dq += da where q > 0 */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)hd, (int)hd, 1.0f, g, (int)hd, S, (int)hd, 0.0f,
                dc, (int)hd);
    const float *qh = q.data + b * q.batch_stride + h * hd;
    float *dqh = dq.data + b * dq.batch_stride + h * hd;
    for (int64_t t = 0; t < T; t++) { /* branch-free, so that the loop vectorises: q's sign is data */
        const float *qt = qh + t * q.token_stride, *da = dc + t * hd;
        float *dqt = dqh + t * dq.token_stride;
        for (int64_t i = 0; i < hd; i++) dqt[i] += (qt[i] > 0.0f ? 1.0f : 0.0f) * (da[i] + e[t] * z[i]);
    }
    /* dS = a^T g, dz = a^T e */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)hd, (int)hd, (int)T, 1.0f, a, (int)hd, g, (int)hd, 0.0f,
                dS, (int)hd);
    for (int64_t i = 0; i < hd; i++) dz[i] = 0.0f;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < hd; i++) dz[i] += a[t * hd + i] * e[t];
    /* dv += c dS; dc = v dS^T + dz, dk += dc where k > 0 */
    const float *vh = v.data + b * v.batch_stride + h * hd, *kh = k.data + b * k.batch_stride + h * hd;
    float *dvh = dv.data + b * dv.batch_stride + h * hd, *dkh = dk.data + b * dk.batch_stride + h * hd;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)hd, (int)hd, 1.0f, c, (int)hd, dS, (int)hd,
                1.0f, dvh, (int)dv.token_stride);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)hd, (int)hd, 1.0f, vh, (int)v.token_stride, dS,
                (int)hd, 0.0f, dc, (int)hd);
    for (int64_t t = 0; t < T; t++) {
        const float *kt = kh + t * k.token_stride, *dct = dc + t * hd;
        float *dkt = dkh + t * dk.token_stride;
        for (int64_t i = 0; i < hd; i++) dkt[i] += (kt[i] > 0.0f ? 1.0f : 0.0f) * (dct[i] + dz[i]);
    }
}
