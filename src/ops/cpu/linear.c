/* Linear layers and batched matmul: every product goes through cblas_sgemm, backward with beta = 1 so
 * that gradients accumulate in place without a temporary. */
#include <omp.h>
#include <string.h>

#include "internal.h"
#include "ops/matmul_products.h"

/* The bias gradient sums columns over rows, each column's rows added in order, so the partition into column
 * blocks changes no bit and may follow the thread count. Blocks are wide (whole cache lines, up to
 * COL_MAX floats) so that each thread streams contiguous row segments rather than one line per row. */
#define COL_ALIGN 16
#define COL_MAX 1024

static int64_t col_block_width(int64_t cols)
{
    const int64_t threads = omp_get_max_threads();
    int64_t w = (cols + threads - 1) / threads;
    w = (w + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN;
    return w > COL_MAX ? COL_MAX : w;
}

/* db[c0..c0+w) += column sums of dy over all rows, rows added in order. */
static void column_sums(float *restrict db, const float *restrict dy, int64_t rows, int64_t ld, int64_t c0, int64_t w)
{
    float acc[COL_MAX] = {0};
    for (int64_t i = 0; i < rows; i++) {
        const float *restrict r = dy + i * ld + c0;
        for (int64_t j = 0; j < w; j++) acc[j] += r[j];
    }
    for (int64_t j = 0; j < w; j++) db[c0 + j] += acc[j];
}

static void linear_forward_run(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t in, int64_t out)
{
    if (n <= 0 || out <= 0) return;
    if (b) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) memcpy(y + i * out, b, (size_t)out * sizeof(float));
    } else if (in <= 0) {
        memset(y, 0, (size_t)(n * out) * sizeof(float));
    }
    if (in <= 0) return; /* y = b (or 0): BLAS rejects a zero leading dimension */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, 1.0f, x, (int)in, w, (int)in,
                b ? 1.0f : 0.0f, y, (int)out);
}

static void linear_backward_run(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t n,
                     int64_t in, int64_t out)
{
    if (n <= 0 || out <= 0) return;
    if (in > 0) {
        /* dx (n,in) += dy (n,out) W (out,in) */
        if (dx)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)in, (int)out, 1.0f, dy, (int)out, w,
                        (int)in, 1.0f, dx, (int)in);
        /* dW (out,in) += dy^T (out,n) x (n,in) */
        if (dw)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)n, 1.0f, dy, (int)out, x,
                        (int)in, 1.0f, dw, (int)in);
    }
    if (db) {
        const int64_t width = col_block_width(out), blocks = (out + width - 1) / width;
#pragma omp parallel for schedule(static)
        for (int64_t cb = 0; cb < blocks; cb++) {
            const int64_t c0 = cb * width;
            column_sums(db, dy, n, out, c0, out - c0 < width ? out - c0 : width);
        }
    }
}

/* Per batch item s: dh_s = gate_s * dy_s (for dx) and c_s = colsum(dy_s), each column's tokens in order. */
static void gate_rows(float *restrict dh, float *restrict colsum, const float *restrict dy, const float *restrict gate,
                      int64_t batch, int64_t tokens, int64_t out, int64_t gate_stride)
{
    const int64_t width = col_block_width(out), blocks = (out + width - 1) / width;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t s = 0; s < batch; s++)
        for (int64_t cb = 0; cb < blocks; cb++) {
            const int64_t c0 = cb * width, w = out - c0 < width ? out - c0 : width;
            const float *restrict g = gate + s * gate_stride + c0;
            float acc[COL_MAX] = {0};
            for (int64_t t = 0; t < tokens; t++) {
                const int64_t off = (s * tokens + t) * out + c0;
                for (int64_t j = 0; j < w; j++) {
                    acc[j] += dy[off + j];
                    dh[off + j] = g[j] * dy[off + j];
                }
            }
            memcpy(colsum + s * out + c0, acc, (size_t)w * sizeof(float));
        }
}

/* sum_k w[k] m[k] over 16 lanes combined in a fixed order (vectorised without reassociating anything). */
static float row_dot(const float *restrict w, const float *restrict m, int64_t n)
{
    float lane[16] = {0};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int l = 0; l < 16; l++) lane[l] += w[k + l] * m[k + l];
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += lane[l];
    for (; k < n; k++) s += w[k] * m[k];
    return s;
}

size_t gated_linear_workspace_bytes(int64_t batch, int64_t tokens, int64_t in, int64_t out)
{
    return (size_t)(out * in + batch * out + batch * tokens * out) * sizeof(float);
}

static st_status gated_linear_backward_run(pool *p, float *dx, float *dw, float *db, float *dgate, const float *dy,
                                           const float *x, const float *w, const float *b, const float *gate,
                                           int64_t batch, int64_t tokens, int64_t in, int64_t out, int64_t gate_stride)
{
    const int64_t n = batch * tokens;
    if (n <= 0 || out <= 0 || (!dx && !dw && !db && !dgate)) return ST_OK;
    float *m;
    st_status st = pool_alloc(p, gated_linear_workspace_bytes(batch, tokens, in, out), MEM_WORKSPACE,
                              "gated linear backward", (void **)&m);
    if (st) return st;
    if (op_dry(dy)) return pool_free(p, m), ST_OK;
    float *colsum = m + out * in, *dh = colsum + batch * out;
    gate_rows(dh, colsum, dy, gate, batch, tokens, out, gate_stride);
    for (int64_t s = 0; s < batch; s++) {
        const float *g = gate + s * gate_stride, *cs = colsum + s * out;
        if (in > 0 && (dw || dgate)) /* M_s (out,in) = dy_s^T x_s */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)tokens, 1.0f,
                        dy + s * tokens * out, (int)out, x + s * tokens * in, (int)in, 0.0f, m, (int)in);
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < out; c++) {
            const float *restrict mr = m + c * in;
            if (dw) {
                float *restrict dwr = dw + c * in;
                for (int64_t k = 0; k < in; k++) dwr[k] += g[c] * mr[k];
            }
            if (dgate) dgate[s * gate_stride + c] += (in > 0 ? row_dot(w + c * in, mr, in) : 0.0f) + (b ? b[c] * cs[c] : 0.0f);
            if (db) db[c] += g[c] * cs[c];
        }
    }
    if (dx && in > 0) /* dx (n,in) += dh (n,out) W (out,in) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)in, (int)out, 1.0f, dh, (int)out, w,
                    (int)in, 1.0f, dx, (int)in);
    pool_free(p, m);
    return ST_OK;
}

void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, const float *b,
               float beta, float *c)
{
    if (m <= 0 || n <= 0 || k <= 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                (int)k, alpha, a, trans_a ? (int)m : (int)k, b, trans_b ? (int)k : (int)n, beta, c, (int)n);
}

/* Whether to run the batch's GEMMs side by side, each single-threaded (OpenBLAS's OpenMP build runs serially
 * inside a parallel region), rather than one after another with threaded GEMMs. Worth it when every thread
 * gets whole matrices in equal shares, or when each matrix is too small to split well. Either way each GEMM
 * sums over k in the same order, so the choice changes timing, not the partition of any reduction we own. */
static bool batch_parallel(int64_t batch, int64_t m, int64_t n, int64_t k)
{
    const int threads = omp_get_max_threads();
    if (threads <= 1 || batch < threads) return false;
    return batch % threads == 0 || m * n * k <= ((int64_t)1 << 21);
}

/* One GEMM per batch element: C_i (M,N) (+)= op(X_i) op(Y_i), with the strides between elements given. */
static void batched_sgemm(bool trans_x, bool trans_y, int64_t batch, int64_t M, int64_t N, int64_t K, const float *x,
                          int64_t ldx, int64_t stride_x, const float *y, int64_t ldy, int64_t stride_y, float beta,
                          float *c, int64_t stride_c)
{
    const enum CBLAS_TRANSPOSE tx = trans_x ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE ty = trans_y ? CblasTrans : CblasNoTrans;
#pragma omp parallel for schedule(static) if (batch_parallel(batch, M, N, K))
    for (int64_t i = 0; i < batch; i++)
        cblas_sgemm(CblasRowMajor, tx, ty, (int)M, (int)N, (int)K, 1.0f, x + i * stride_x, (int)ldx,
                    y + i * stride_y, (int)ldy, beta, c + i * stride_c, (int)N);
}

static void matmul_forward_run(float *c, const float *a, const float *b, int64_t batch, int64_t m, int64_t n, int64_t k,
                               bool trans_a, bool trans_b)
{
    if (batch <= 0 || m <= 0 || n <= 0) return;
    if (k <= 0) memset(c, 0, (size_t)(batch * m * n) * sizeof(float));
    else matmul_forward_products(batched_sgemm, c, a, b, batch, m, n, k, trans_a, trans_b);
}

void linear_forward(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t in, int64_t out)
{
    OP_TIMED(y, linear_forward_run(y, x, w, b, n, in, out), OP_GEMM, 2.0 * n * in * out, 0);
}

void linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t n, int64_t in, int64_t out)
{
    OP_TIMED(dy, linear_backward_run(dx, dw, db, dy, x, w, n, in, out),
             OP_GEMM, 2.0 * n * in * out * ((dx != NULL) + (dw != NULL)), 0);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, const float *b, float beta, float *c)
{
    const double t0 = prof_now();
    if (!op_dry(c)) blas_gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    prof_add(OP_GEMM, t0, 2.0 * m * n * k, 0);
}

void matmul_forward(float *c, const float *a, const float *b, int64_t batch, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b)
{
    OP_TIMED(c, matmul_forward_run(c, a, b, batch, m, n, k, trans_a, trans_b), OP_GEMM, 2.0 * batch * m * n * k, 0);
}

void matmul_backward(float *da, float *db, const float *dc, const float *a, const float *b, int64_t batch, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b)
{
    const double t0 = prof_now();
    if (!op_dry(dc) && batch > 0 && m > 0 && n > 0 && k > 0)
        matmul_backward_products(batched_sgemm, da, db, dc, a, b, batch, m, n, k, trans_a, trans_b);
    prof_add(OP_GEMM, t0, 2.0 * batch * m * n * k * ((da != NULL) + (db != NULL)), 0);
}

st_status gated_linear_backward(pool *p, float *dx, float *dw, float *db, float *dgate, const float *dy, const float *x,
                                const float *w, const float *b, const float *gate, int64_t batch, int64_t tokens,
                                int64_t in, int64_t out, int64_t gate_stride)
{
    const double t0 = prof_now();
    const st_status st = gated_linear_backward_run(p, dx, dw, db, dgate, dy, x, w, b, gate, batch, tokens, in, out,
                                                   gate_stride);
    prof_add(OP_GEMM, t0, 2.0 * batch * tokens * in * out * ((dx != NULL) + (dw != NULL || dgate != NULL)), 0);
    return st;
}
