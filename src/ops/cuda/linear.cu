/* Linear layers, the plain GEMM and batched matmul on the GPU (ports of ops/cpu/linear.c): every product through
 * cuBLAS, backward with beta = 1 so that gradients accumulate in place, and the few column sums and row updates in
 * small kernels whose every sum runs in a fixed order (no atomics), so that a run and its recompute agree bit for bit.
 *
 * fp32 accuracy: the products run as cublasGemmEx / cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F, never
 * CUBLAS_COMPUTE_32F_FAST_TF32: TF32 keeps 10 mantissa bits, far off the 1e-5 the CPU backend is checked against.
 * (The handle's math mode is runtime.cu's default one, which does not turn TF32 on either.) */
#include "backend.h"
#include "ops/matmul_products.h"

namespace {

constexpr int THREADS = 256;

/* Row-major to column-major. A row-major (r, c) matrix with row stride ld is, read column-major, the (c, r) matrix
 * with leading dimension ld: its transpose. So the row-major C (M, N) = op(A) op(B) is the column-major
 * C^T (N, M) = op(B)^T op(A)^T over the same buffers: cuBLAS gets the operands swapped (B first), the same transpose
 * flags, the dimensions (N, M, K) and the very leading dimensions a row-major cblas_sgemm would take. */
void rm_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *a, int64_t lda,
             const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    cu_check_blas(cublasGemmEx(cu_blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N,
                               (int)M, (int)K, &alpha, b, CUDA_R_32F, (int)ldb, a, CUDA_R_32F, (int)lda, &beta, c,
                               CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx");
}

/* rm_gemm over `batch` matrices sa, sb, sc floats apart; C's rows N apart (dense). */
void rm_gemm_batched(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                     int64_t sa, const float *b, int64_t ldb, int64_t sb, float beta, float *c, int64_t sc)
{
    const float alpha = 1.0f;
    cu_check_blas(cublasGemmStridedBatchedEx(cu_blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                             (int)N, (int)M, (int)K, &alpha, b, CUDA_R_32F, (int)ldb, (long long)sb, a,
                                             CUDA_R_32F, (int)lda, (long long)sa, &beta, c, CUDA_R_32F, (int)N,
                                             (long long)sc, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmStridedBatchedEx");
}

/* y (n, cols) = b on every row. */
__global__ void fill_rows_kernel(float *y, const float *b, int64_t n, int64_t cols)
{
    const int64_t total = n * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = b[i % cols];
}

/* db[c] += the sum of column c of dy (rows, cols): one thread a column adding the rows in order, as the CPU's
 * column_sums does (a warp reads 32 neighbouring columns of a row at a time). */
__global__ void column_sums_kernel(float *db, const float *dy, int64_t rows, int64_t cols)
{
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int64_t i = 0; i < rows; i++) acc += dy[i * cols + c];
        db[c] += acc;
    }
}

/* Per batch item s and column c: dh_s = gate_s * dy_s and colsum_s[c] = the column's sum over the item's tokens,
 * in order (the CPU's gate_rows). */
__global__ void gate_rows_kernel(float *dh, float *colsum, const float *dy, const float *gate, int64_t batch,
                                 int64_t tokens, int64_t out, int64_t gate_stride)
{
    const int64_t total = batch * out;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = i / out, c = i % out;
        const float g = gate[s * gate_stride + c];
        float acc = 0.0f;
        for (int64_t t = 0; t < tokens; t++) {
            const int64_t off = (s * tokens + t) * out + c;
            acc += dy[off];
            dh[off] = g * dy[off];
        }
        colsum[i] = acc;
    }
}

/* Batch item s's share of the weight, gate and bias gradients from M_s (out, in) = dy_s^T x_s, one block a row c:
 * dw[c] += g[c] M[c], dgate[s, c] += rowdot(W[c], M[c]) + b[c] colsum[c], db[c] += g[c] colsum[c]. The row dot is
 * each thread's strided partial sum in order, then a fixed tree over the block. */
__global__ void __launch_bounds__(THREADS)
    gated_rows_kernel(float *dw, float *dgate, float *db, const float *m, const float *w, const float *b,
                      const float *g, const float *cs, int64_t in, int64_t out)
{
    __shared__ float red[THREADS];
    const int tid = threadIdx.x;
    for (int64_t c = blockIdx.x; c < out; c += gridDim.x) {
        const float *mr = m + c * in, *wr = w + c * in;
        float part = 0.0f;
        if (dw || dgate)
            for (int64_t k = tid; k < in; k += THREADS) {
                const float mv = mr[k];
                if (dw) dw[c * in + k] += g[c] * mv;
                if (dgate) part = fmaf(wr[k], mv, part);
            }
        red[tid] = part;
        __syncthreads();
        for (int o = THREADS / 2; o > 0; o >>= 1) {
            if (tid < o) red[tid] += red[tid + o];
            __syncthreads();
        }
        if (tid == 0) {
            if (dgate) dgate[c] += red[0] + (b ? b[c] * cs[c] : 0.0f);
            if (db) db[c] += g[c] * cs[c];
        }
        __syncthreads(); /* red is reused by the block's next row */
    }
}

} // namespace

extern "C" {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, const float *b,
          float beta, float *c)
{
    if (!cu_on_device(a, b, c)) {
        cpu_gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
        return;
    }
    const double t0 = cu_op_start();
    if (m > 0 && n > 0 && k > 0) /* as the CPU's blas_gemm: nothing at all (not even beta C) for an empty product */
        rm_gemm(trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
    cu_op_done(OP_GEMM, t0, 2.0 * m * n * k, 0, "gemm");
}

void linear_forward(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t in, int64_t out)
{
    if (!cu_on_device(y, x, w, b)) {
        cpu_linear_forward(y, x, w, b, n, in, out);
        return;
    }
    const double t0 = cu_op_start();
    if (n > 0 && out > 0) {
        cudaStream_t st = cu_compute_stream();
        if (b)
            fill_rows_kernel<<<cu_blocks(n * out, THREADS), THREADS, 0, st>>>(y, b, n, out);
        else if (in <= 0)
            cu_check(cudaMemsetAsync(y, 0, (size_t)(n * out) * sizeof(float), st), "linear_forward memset");
        /* y (n, out) = x (n, in) W^T (+ y holding b) */
        if (in > 0) rm_gemm(false, true, n, out, in, 1.0f, x, in, w, in, b ? 1.0f : 0.0f, y, out);
    }
    cu_op_done(OP_GEMM, t0, 2.0 * n * in * out, 0, "linear_forward");
}

void linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t n,
                     int64_t in, int64_t out)
{
    if (!cu_on_device(dx, dw, db, dy, x, w)) {
        cpu_linear_backward(dx, dw, db, dy, x, w, n, in, out);
        return;
    }
    const double t0 = cu_op_start();
    if (n > 0 && out > 0) {
        if (in > 0) {
            if (dx) rm_gemm(false, false, n, in, out, 1.0f, dy, out, w, in, 1.0f, dx, in); /* dx += dy W */
            if (dw) rm_gemm(true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);  /* dW += dy^T x */
        }
        if (db) column_sums_kernel<<<cu_blocks(out, THREADS), THREADS, 0, cu_compute_stream()>>>(db, dy, n, out);
    }
    cu_op_done(OP_GEMM, t0, 2.0 * n * in * out * ((dx != NULL) + (dw != NULL)), 0, "linear_backward");
}

void matmul_forward(float *c, const float *a, const float *b, int64_t batch, int64_t m, int64_t n, int64_t k,
                    bool trans_a, bool trans_b)
{
    if (!cu_on_device(c, a, b)) {
        cpu_matmul_forward(c, a, b, batch, m, n, k, trans_a, trans_b);
        return;
    }
    const double t0 = cu_op_start();
    if (batch > 0 && m > 0 && n > 0) {
        if (k <= 0) {
            cu_check(cudaMemsetAsync(c, 0, (size_t)(batch * m * n) * sizeof(float), cu_compute_stream()),
                     "matmul_forward memset");
        } else {
            matmul_forward_products(rm_gemm_batched, c, a, b, batch, m, n, k, trans_a, trans_b);
        }
    }
    cu_op_done(OP_GEMM, t0, 2.0 * batch * m * n * k, 0, "matmul_forward");
}

void matmul_backward(float *da, float *db, const float *dc, const float *a, const float *b, int64_t batch, int64_t m,
                     int64_t n, int64_t k, bool trans_a, bool trans_b)
{
    if (!cu_on_device(da, db, dc, a, b)) {
        cpu_matmul_backward(da, db, dc, a, b, batch, m, n, k, trans_a, trans_b);
        return;
    }
    const double t0 = cu_op_start();
    if (batch > 0 && m > 0 && n > 0 && k > 0)
        matmul_backward_products(rm_gemm_batched, da, db, dc, a, b, batch, m, n, k, trans_a, trans_b);
    cu_op_done(OP_GEMM, t0, 2.0 * batch * m * n * k * ((da != NULL) + (db != NULL)), 0, "matmul_backward");
}

/* The CPU's structure with its workspace, exactly gated_linear_workspace_bytes: M (out, in) for one batch item at a
 * time, colsum (batch, out) and dh (batch tokens, out). Per item s, in order: M_s by one GEMM, then its row updates;
 * the items' contributions to dw, dgate and db thus add in item order, as on the CPU. */
st_status gated_linear_backward(pool *p, float *dx, float *dw, float *db, float *dgate, const float *dy, const float *x,
                                const float *w, const float *b, const float *gate, int64_t batch, int64_t tokens,
                                int64_t in, int64_t out, int64_t gate_stride)
{
    if (!cu_on_device(dx, dw, db, dgate, dy, x, w, b, gate))
        return cpu_gated_linear_backward(p, dx, dw, db, dgate, dy, x, w, b, gate, batch, tokens, in, out, gate_stride);
    const double t0 = cu_op_start();
    const double flops = 2.0 * batch * tokens * in * out * ((dx != NULL) + (dw != NULL || dgate != NULL));
    const int64_t n = batch * tokens;
    if (n <= 0 || out <= 0 || (!dx && !dw && !db && !dgate)) {
        cu_op_done(OP_GEMM, t0, flops, 0, "gated_linear_backward");
        return ST_OK;
    }
    float *m;
    const st_status st = pool_alloc(p, gated_linear_workspace_bytes(batch, tokens, in, out), MEM_WORKSPACE,
                                    "gated linear backward", (void **)&m);
    if (st != ST_OK) {
        cu_op_done(OP_GEMM, t0, flops, 0, "gated_linear_backward");
        return st;
    }
    if (!cu_in_arena(m)) { /* a host pool's workspace: the kernels cannot use it */
        pool_free(p, m);
        return cpu_gated_linear_backward(p, dx, dw, db, dgate, dy, x, w, b, gate, batch, tokens, in, out, gate_stride);
    }
    cudaStream_t stream = cu_compute_stream();
    float *colsum = m + out * in, *dh = colsum + batch * out;
    gate_rows_kernel<<<cu_blocks(batch * out, THREADS), THREADS, 0, stream>>>(dh, colsum, dy, gate, batch, tokens, out,
                                                                            gate_stride);
    for (int64_t s = 0; s < batch; s++) {
        if (in > 0 && (dw || dgate)) /* M_s (out,in) = dy_s^T x_s */
            rm_gemm(true, false, out, in, tokens, 1.0f, dy + s * tokens * out, out, x + s * tokens * in, in, 0.0f, m,
                    in);
        gated_rows_kernel<<<cu_blocks(out, 1), THREADS, 0, stream>>>(
            dw, dgate ? dgate + s * gate_stride : NULL, db, m, w, b, gate + s * gate_stride, colsum + s * out, in, out);
    }
    if (dx && in > 0) /* dx (n,in) += dh (n,out) W (out,in) */
        rm_gemm(false, false, n, in, out, 1.0f, dh, out, w, in, 1.0f, dx, in);
    cu_op_done(OP_GEMM, t0, flops, 0, "gated_linear_backward");
    pool_free(p, m); /* after cu_op_done: the kernels are done with it */
    return ST_OK;
}

} // extern "C"
