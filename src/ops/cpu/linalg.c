/* The thin QR's Q and its gradient, for a small matrix (Wan Animate's motion basis, 512 x 20), in double: a few
 * thousand elements, so plain loops; nothing here depends on the thread count. */
#include "internal.h"

size_t qr_workspace_bytes(int64_t m, int64_t n) { return (size_t)(3 * m * n + 2 * n * n + n) * sizeof(double); }

/* Householder reflections as LAPACK's dgeqr2 and dorg2r apply them: reflector j maps column j's rows j.. to
 * (beta, 0, ...), beta = -sign(alpha) |(alpha, x)|, v = (1, x / (alpha - beta)), tau = (beta - alpha) / beta; a
 * column already zero below the diagonal gets none (tau 0). q (m, n) = H_0 ... H_{n-1} applied to I's first n
 * columns, reflector by reflector from the last. a is overwritten (column j's rows j+1.. hold v). */
static void householder_q(double *q, double *a, double *tau, int64_t m, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        double xnorm = 0.0;
        for (int64_t i = j + 1; i < m; i++) xnorm = hypot(xnorm, a[i * n + j]);
        const double alpha = a[j * n + j];
        if (xnorm == 0.0) {
            tau[j] = 0.0;
            continue;
        }
        const double beta = -copysign(hypot(alpha, xnorm), alpha);
        tau[j] = (beta - alpha) / beta;
        for (int64_t i = j + 1; i < m; i++) a[i * n + j] /= alpha - beta;
        a[j * n + j] = beta;
        for (int64_t k = j + 1; k < n; k++) { /* the rest of the columns: A -= tau v (v^T A) */
            double w = a[j * n + k];
            for (int64_t i = j + 1; i < m; i++) w += a[i * n + j] * a[i * n + k];
            a[j * n + k] -= tau[j] * w;
            for (int64_t i = j + 1; i < m; i++) a[i * n + k] -= tau[j] * w * a[i * n + j];
        }
    }
    for (int64_t i = 0; i < m * n; i++) q[i] = 0.0;
    for (int64_t j = 0; j < n; j++) q[j * n + j] = 1.0;
    for (int64_t j = n - 1; j >= 0; j--)
        for (int64_t k = j; k < n; k++) {
            double w = q[j * n + k];
            for (int64_t i = j + 1; i < m; i++) w += a[i * n + j] * q[i * n + k];
            q[j * n + k] -= tau[j] * w;
            for (int64_t i = j + 1; i < m; i++) q[i * n + k] -= tau[j] * w * a[i * n + j];
        }
}

st_status qr_forward(pool *p, float *q, const float *a, int64_t m, int64_t n)
{
    if (m < n) return st_fail(ST_ERR_INVALID, "qr: a %lld x %lld matrix; the thin QR needs rows >= columns",
                              (long long)m, (long long)n);
    double *ws = NULL;
    st_status st = pool_alloc(p, qr_workspace_bytes(m, n), MEM_WORKSPACE, "qr", (void **)&ws);
    if (st || op_dry(q)) {
        pool_free(p, ws);
        return st;
    }
    double *ad = ws, *qd = ws + m * n, *tau = ws + 2 * m * n;
    for (int64_t i = 0; i < m * n; i++) ad[i] = a[i];
    householder_q(qd, ad, tau, m, n);
    for (int64_t i = 0; i < m * n; i++) q[i] = (float)qd[i];
    pool_free(p, ws);
    return ST_OK;
}

/* With R = Q^T A and dR = 0 (only Q is read): M = -dQ^T Q, S = tril(M) + tril(M, -1)^T, dA = (dQ + Q S) R^-T,
 * each row of it by back substitution in R. */
st_status qr_backward(pool *p, float *da, const float *dq, const float *a, const float *q, int64_t m, int64_t n)
{
    double *ws = NULL;
    st_status st = pool_alloc(p, qr_workspace_bytes(m, n), MEM_WORKSPACE, "qr", (void **)&ws);
    if (st || !da || op_dry(dq)) {
        pool_free(p, ws);
        return st;
    }
    double *qd = ws, *g = ws + m * n, *b = ws + 2 * m * n, *r = ws + 3 * m * n, *s = r + n * n;
    for (int64_t i = 0; i < m * n; i++) qd[i] = q[i], g[i] = dq[i];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double rij = 0.0, mij = 0.0;
            for (int64_t k = 0; k < m; k++) rij += qd[k * n + i] * a[k * n + j], mij -= g[k * n + i] * qd[k * n + j];
            r[i * n + j] = j >= i ? rij : 0.0;
            s[i * n + j] = mij; /* M, made symmetric from its lower triangle below */
        }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) s[i * n + j] = s[j * n + i];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = g[i * n + j];
            for (int64_t k = 0; k < n; k++) v += qd[i * n + k] * s[k * n + j];
            b[i * n + j] = v;
        }
    for (int64_t i = 0; i < m; i++) { /* x R^T = b: R x^T = b^T, R upper triangular */
        double *x = b + i * n;
        for (int64_t j = n - 1; j >= 0; j--) {
            double v = x[j];
            for (int64_t k = j + 1; k < n; k++) v -= r[j * n + k] * x[k];
            x[j] = v / r[j * n + j];
        }
        for (int64_t j = 0; j < n; j++) da[i * n + j] += (float)x[j];
    }
    pool_free(p, ws);
    return ST_OK;
}
