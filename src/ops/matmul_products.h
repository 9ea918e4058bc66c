/* matmul's products (ops.h: matmul_forward, matmul_backward), which each backend runs through its own batched GEMM
 * (the CPU's cblas_sgemm loop in ops/cpu/linear.c, cuBLAS in ops/cuda/linear.cu): one derivation of the operands,
 * leading dimensions and transposes for both. */
#ifndef SEGTRAIN_OPS_MATMUL_PRODUCTS_H
#define SEGTRAIN_OPS_MATMUL_PRODUCTS_H

#include <stdbool.h>
#include <stdint.h>

/* C_i (M,N) = op(X_i) op(Y_i) + beta C_i for i < batch, row-major; X_i, Y_i and C_i stride_x, stride_y and stride_c
 * floats apart, C's rows N apart. */
typedef void batched_gemm_fn(bool trans_x, bool trans_y, int64_t batch, int64_t M, int64_t N, int64_t K,
                             const float *x, int64_t ldx, int64_t stride_x, const float *y, int64_t ldy,
                             int64_t stride_y, float beta, float *c, int64_t stride_c);

/* C = Am Bm for k > 0; A stored (m,k) or, transposed, (k,m); B stored (k,n) or, transposed, (n,k) */
static inline void matmul_forward_products(batched_gemm_fn *product, float *c, const float *a, const float *b,
                                           int64_t batch, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b)
{
    const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
    product(trans_a, trans_b, batch, m, n, k, a, lda, m * k, b, ldb, k * n, 0.0f, c, m * n);
}

/* With Am = op(A) (m,k) and Bm = op(B) (k,n): dAm = dC Bm^T and dBm = Am^T dC, accumulated. A stored transposed
 * receives dAm^T = Bm dC^T; B stored transposed receives dBm^T = dC^T Am. For m, n, k > 0. */
static inline void matmul_backward_products(batched_gemm_fn *product, float *da, float *db, const float *dc,
                                            const float *a, const float *b, int64_t batch, int64_t m, int64_t n,
                                            int64_t k, bool trans_a, bool trans_b)
{
    const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
    if (da) {
        if (!trans_a) /* dA (m,k) += dC (m,n) Bm^T; B stored (n,k) is Bm^T already */
            product(false, !trans_b, batch, m, k, n, dc, n, m * n, b, ldb, k * n, 1.0f, da, m * k);
        else /* dA (k,m) += Bm (k,n) dC^T */
            product(trans_b, true, batch, k, m, n, b, ldb, k * n, dc, n, m * n, 1.0f, da, m * k);
    }
    if (db) {
        if (!trans_b) /* dB (k,n) += Am^T (k,m) dC; A stored (k,m) is Am^T already */
            product(!trans_a, false, batch, k, n, m, a, lda, m * k, dc, n, m * n, 1.0f, db, k * n);
        else /* dB (n,k) += dC^T (n,m) Am */
            product(true, trans_a, batch, n, k, m, dc, n, m * n, a, lda, m * k, 1.0f, db, k * n);
    }
}

#endif
