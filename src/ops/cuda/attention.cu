/* Flash attention on the GPU (the ATTN_FLASH mechanism of ops/cpu/attention.c) for plain self-attention: no mask,
 * kv_tokens and kv_heads the queries' own, no window, head_dim 1 .. 128. Every other case (math, linear, cross-
 * attention, grouped-query, a window, the masked ops) runs the CPU code.
 *
 * Memory stays linear in the tokens: forward walks the key tiles of each query tile with an online softmax (a running
 * max and sum per row, the output rescaled when the max grows), so no T x T matrix exists anywhere, and keeps exactly
 * what the CPU's flash forward keeps: the log-sum-exp per (batch, head, token), lse[(b H + h) T + t], the same bytes
 * under the same tag, so that either backend's backward can follow either's forward. No workspace.
 *
 * Backward recomputes each score tile from q, k and the kept lse (P = exp(S - lse)), and needs D = rowsum(dO * O)
 * (= rowsum(dP * P)) per query, which each block recomputes for the query tiles it visits rather than keeping. The
 * gradients are sums over tiles, and to keep them deterministic without atomics each output element has one owner:
 * dk and dv come from a kernel whose block owns a key tile and walks all query tiles in order; dq from a second
 * kernel whose block owns a query tile and walks all key tiles in order. Each accumulates in registers and adds
 * into the caller's gradient once at the end (backward accumulates, as the CPU's does).
 *
 * Tiles are 64 queries x 64 keys, 256 threads as 16 x 16, each thread owning 4 rows x 4 columns of a score tile
 * (rows ty + 16 i, columns tx + 16 j) and 4 rows x DMAX/16 columns of an output tile. A row's 16 owners are 16 lanes
 * of one warp, so row max and row sum are xor-butterfly shuffles: a fixed order, and the same bits on every lane.
 * Operand tiles sit in shared memory with rows DMAX + 1 floats apart, so that the 16 lanes reading 16 different
 * rows at one column hit 16 different banks. fp32 throughout, expf (not __expf), and every dot product runs over
 * the head dimension from 0 up with fmaf: the same bits on every run. */
#include <math.h>

#include "backend.h"
#include "ops/fallback.h"

namespace {

constexpr int BQ = 64, BK = 64;   /* queries and keys a tile */
constexpr int THREADS = 256;      /* 16 x 16 */
constexpr int PLD = BK + 1;       /* row stride of the probability tiles (P, dS) */
constexpr int ROWS = 4, COLS = 4; /* a thread's share of a 64 x 64 tile: 16-strided rows and columns */
static_assert(BQ == BK, "the tiles are square: tile_product sums a transposed tile over its rows");

/* Shared memory of each kernel, in floats. */
template <int DMAX> __host__ __device__ constexpr int tile_floats() { return 64 * (DMAX + 1); }
template <int DMAX> constexpr size_t forward_smem() { return (2 * tile_floats<DMAX>() + BQ * PLD) * sizeof(float); }
template <int DMAX> constexpr size_t backward_kv_smem()
{
    return (4 * tile_floats<DMAX>() + 2 * BQ * PLD + 2 * BQ) * sizeof(float);
}
template <int DMAX> constexpr size_t backward_q_smem()
{
    return (4 * tile_floats<DMAX>() + BQ * PLD + 2 * BQ) * sizeof(float);
}
static_assert(backward_kv_smem<128>() <= 227 * 1024, "sm_90 gives a block at most 227 KiB of shared memory");

/* Head h of batch b in a view. */
__device__ __forceinline__ const float *head(attn_view a, int64_t b, int64_t h, int hd)
{
    return a.data + b * a.batch_stride + h * hd;
}

/* Rows t0 .. t0 + 63 of a head (rows `stride` floats apart) into a tile of rows DMAX + 1 apart, zeros past T and
 * past hd: padded rows and columns then add nothing to any product. */
template <int DMAX>
__device__ __forceinline__ void load_tile(float *dst, const float *src, int64_t stride, int64_t t0, int64_t T, int hd)
{
    for (int i = threadIdx.x; i < 64 * DMAX; i += THREADS) {
        const int r = i / DMAX, d = i % DMAX;
        dst[r * (DMAX + 1) + d] = t0 + r < T && d < hd ? src[(t0 + r) * stride + d] : 0.0f;
    }
}

/* s[i][j] = scale * (row ty + 16 i of A) . (row tx + 16 j of B) over d = 0 .. hd - 1 in order: a score tile
 * (A = Q, B = K) or dP (A = dO, B = V, scale 1). */
template <int DMAX>
__device__ __forceinline__ void dot_tile(float s[ROWS][COLS], const float *A, const float *B, int hd, int tx, int ty,
                                         float scale)
{
    constexpr int LD = DMAX + 1;
#pragma unroll
    for (int i = 0; i < ROWS; i++)
#pragma unroll
        for (int j = 0; j < COLS; j++) s[i][j] = 0.0f;
    for (int d = 0; d < hd; d++) {
        float a[ROWS], b[COLS];
#pragma unroll
        for (int i = 0; i < ROWS; i++) a[i] = A[(ty + 16 * i) * LD + d];
#pragma unroll
        for (int j = 0; j < COLS; j++) b[j] = B[(tx + 16 * j) * LD + d];
#pragma unroll
        for (int i = 0; i < ROWS; i++)
#pragma unroll
            for (int j = 0; j < COLS; j++) s[i][j] = fmaf(a[i], b[j], s[i][j]);
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++)
#pragma unroll
        for (int j = 0; j < COLS; j++) s[i][j] *= scale;
}

/* Max and sum over the 16 lanes that share a row (lane bit 4 is the row's parity, bits 0-3 its columns). */
__device__ __forceinline__ float max16(float x)
{
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ __forceinline__ float sum16(float x)
{
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* D[r] = rowsum(dO * O) of query rows i0 + r, r < 64 (0 past T): a warp a row, lanes over the head, then a
 * butterfly. */
__device__ __forceinline__ void row_dots(float *D, const float *doh, int64_t ldo, const float *oh, int64_t lo,
                                         int64_t i0, int64_t T, int hd)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int r = warp; r < BQ; r += THREADS / 32) {
        float acc = 0.0f;
        if (i0 + r < T)
            for (int c = lane; c < hd; c += 32) acc = fmaf(doh[(i0 + r) * ldo + c], oh[(i0 + r) * lo + c], acc);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) D[r] = acc;
    }
}

/* acc += S X over one tile, the product every kernel here accumulates (P V, dS K, P^T dO, dS^T Q): acc is a thread's
 * ROWS x DMAX/16 share (rows ty + 16 i, head columns tx + 16 c); S's element (row, kk) is S[row s_row + kk s_col]
 * (s_col PLD: S read transposed, its BQ query rows then summed over, hence BQ == BK); X holds BK rows of a head,
 * DMAX + 1 floats apart. Each element adds its BK products in order, one fmaf each. */
template <int DMAX>
__device__ __forceinline__ void tile_product(float (&acc)[ROWS][DMAX / 16], const float *S, int s_row, int s_col,
                                             const float *X, int tx, int ty)
{
    constexpr int LD = DMAX + 1, NC = DMAX / 16;
    for (int kk = 0; kk < BK; kk++) {
        float x[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) x[c] = X[kk * LD + tx + 16 * c];
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            const float sv = S[(ty + 16 * i) * s_row + kk * s_col];
#pragma unroll
            for (int c = 0; c < NC; c++) acc[i][c] = fmaf(sv, x[c], acc[i][c]);
        }
    }
}

/* Block (b H + h, query tile): out rows of the tile, and their lse when kept (lse NULL: not). */
template <int DMAX>
__global__ void __launch_bounds__(THREADS)
    flash_forward_kernel(attn_view out, attn_view q, attn_view k, attn_view v, float *lse, int64_t T, int64_t H,
                         int hd, float scale)
{
    constexpr int NC = DMAX / 16;
    extern __shared__ float smem[];
    float *Qs = smem, *KVs = Qs + tile_floats<DMAX>(), *Ps = KVs + tile_floats<DMAX>();
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, i0 = (int64_t)blockIdx.y * BQ;
    const float *qh = head(q, b, h, hd), *kh = head(k, b, h, hd), *vh = head(v, b, h, hd);

    load_tile<DMAX>(Qs, qh, q.token_stride, i0, T, hd);
    float o[ROWS][NC], m[ROWS], l[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < NC; c++) o[i][c] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < T; j0 += BK) {
        load_tile<DMAX>(KVs, kh, k.token_stride, j0, T, hd);
        __syncthreads();
        float s[ROWS][COLS];
        dot_tile<DMAX>(s, Qs, KVs, hd, tx, ty, scale);
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            /* keys past T get probability 0; key j0 < T is always there, so the tile's max is finite */
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < COLS; j++) {
                if (j0 + tx + 16 * j >= T) s[i][j] = -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            const float m_new = fmaxf(m[i], max16(mx));
            const float corr = expf(m[i] - m_new); /* 0 on the first tile, where o and l are still 0 */
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < COLS; j++) {
                const float p = expf(s[i][j] - m_new);
                Ps[(ty + 16 * i) * PLD + tx + 16 * j] = p;
                sum += p;
            }
            l[i] = l[i] * corr + sum16(sum);
#pragma unroll
            for (int c = 0; c < NC; c++) o[i][c] *= corr;
            m[i] = m_new;
        }
        __syncthreads(); /* P written; K no longer read: V takes its place */
        load_tile<DMAX>(KVs, vh, v.token_stride, j0, T, hd);
        __syncthreads();
        tile_product<DMAX>(o, Ps, PLD, 1, KVs, tx, ty);
        __syncthreads(); /* before the next tile overwrites K/V and P */
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int64_t t = i0 + ty + 16 * i;
        if (t >= T) continue;
        const float inv = 1.0f / l[i];
        float *orow = out.data + b * out.batch_stride + t * out.token_stride + h * hd;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (tx + 16 * c < hd) orow[tx + 16 * c] = o[i][c] * inv;
        if (lse && tx == 0) lse[bh * T + t] = m[i] + logf(l[i]);
    }
}

/* Block (b H + h, key tile): dv += P^T dO and dk += scale dS^T Q over every query tile in order, with
 * dS = P * (dP - D), dP = dO V^T. dk or dv may be NULL (not both); out is read only for dk. */
template <int DMAX>
__global__ void __launch_bounds__(THREADS)
    flash_backward_kv_kernel(attn_view dk, attn_view dv, attn_view dout, attn_view q, attn_view k, attn_view v,
                             attn_view out, const float *lse, int64_t T, int64_t H, int hd, float scale)
{
    constexpr int NC = DMAX / 16;
    extern __shared__ float smem[];
    float *Ks = smem, *Vs = Ks + tile_floats<DMAX>(), *Qs = Vs + tile_floats<DMAX>(), *dOs = Qs + tile_floats<DMAX>();
    float *Ps = dOs + tile_floats<DMAX>(), *dSs = Ps + BQ * PLD, *Ls = dSs + BQ * PLD, *Ds = Ls + BQ;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, j0 = (int64_t)blockIdx.y * BK;
    const float *qh = head(q, b, h, hd), *kh = head(k, b, h, hd), *vh = head(v, b, h, hd);
    const float *doh = head(dout, b, h, hd);
    const bool want_dk = dk.data != nullptr, want_dv = dv.data != nullptr;

    load_tile<DMAX>(Ks, kh, k.token_stride, j0, T, hd);
    load_tile<DMAX>(Vs, vh, v.token_stride, j0, T, hd);
    float acc_k[ROWS][NC], acc_v[ROWS][NC]; /* rows: keys ty + 16 i of the tile */
#pragma unroll
    for (int i = 0; i < ROWS; i++)
#pragma unroll
        for (int c = 0; c < NC; c++) acc_k[i][c] = acc_v[i][c] = 0.0f;

    for (int64_t i0 = 0; i0 < T; i0 += BQ) {
        load_tile<DMAX>(Qs, qh, q.token_stride, i0, T, hd);
        load_tile<DMAX>(dOs, doh, dout.token_stride, i0, T, hd);
        for (int r = threadIdx.x; r < BQ; r += THREADS) Ls[r] = i0 + r < T ? lse[bh * T + i0 + r] : 0.0f;
        if (want_dk) row_dots(Ds, doh, dout.token_stride, head(out, b, h, hd), out.token_stride, i0, T, hd);
        __syncthreads();
        /* the tile's P (rows: queries ty + 16 i, columns: keys tx + 16 j), 0 outside the T x T square */
        float pt[ROWS][COLS];
        dot_tile<DMAX>(pt, Qs, Ks, hd, tx, ty, scale);
#pragma unroll
        for (int i = 0; i < ROWS; i++)
#pragma unroll
            for (int j = 0; j < COLS; j++) {
                const bool in = i0 + ty + 16 * i < T && j0 + tx + 16 * j < T;
                pt[i][j] = in ? expf(pt[i][j] - Ls[ty + 16 * i]) : 0.0f;
                Ps[(ty + 16 * i) * PLD + tx + 16 * j] = pt[i][j];
            }
        if (want_dk) {
            float dp[ROWS][COLS];
            dot_tile<DMAX>(dp, dOs, Vs, hd, tx, ty, 1.0f);
#pragma unroll
            for (int i = 0; i < ROWS; i++)
#pragma unroll
                for (int j = 0; j < COLS; j++)
                    dSs[(ty + 16 * i) * PLD + tx + 16 * j] = pt[i][j] * (dp[i][j] - Ds[ty + 16 * i]);
        }
        __syncthreads();
        /* the products over this tile's queries, in order; now rows are keys, columns the head */
        if (want_dv) tile_product<DMAX>(acc_v, Ps, 1, PLD, dOs, tx, ty);
        if (want_dk) tile_product<DMAX>(acc_k, dSs, 1, PLD, Qs, tx, ty);
        __syncthreads(); /* before the next query tile overwrites Q, dO, P, dS */
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int64_t t = j0 + ty + 16 * i;
        if (t >= T) continue;
        float *dkr = want_dk ? dk.data + b * dk.batch_stride + t * dk.token_stride + h * hd : nullptr;
        float *dvr = want_dv ? dv.data + b * dv.batch_stride + t * dv.token_stride + h * hd : nullptr;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int col = tx + 16 * c;
            if (col >= hd) continue;
            if (dkr) dkr[col] += scale * acc_k[i][c];
            if (dvr) dvr[col] += acc_v[i][c];
        }
    }
}

/* Block (b H + h, query tile): dq += scale dS K over every key tile in order. */
template <int DMAX>
__global__ void __launch_bounds__(THREADS)
    flash_backward_q_kernel(attn_view dq, attn_view dout, attn_view q, attn_view k, attn_view v, attn_view out,
                            const float *lse, int64_t T, int64_t H, int hd, float scale)
{
    constexpr int NC = DMAX / 16;
    extern __shared__ float smem[];
    float *Qs = smem, *dOs = Qs + tile_floats<DMAX>(), *Ks = dOs + tile_floats<DMAX>(), *Vs = Ks + tile_floats<DMAX>();
    float *dSs = Vs + tile_floats<DMAX>(), *Ls = dSs + BQ * PLD, *Ds = Ls + BQ;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, i0 = (int64_t)blockIdx.y * BQ;
    const float *qh = head(q, b, h, hd), *kh = head(k, b, h, hd), *vh = head(v, b, h, hd);
    const float *doh = head(dout, b, h, hd);

    load_tile<DMAX>(Qs, qh, q.token_stride, i0, T, hd);
    load_tile<DMAX>(dOs, doh, dout.token_stride, i0, T, hd);
    for (int r = threadIdx.x; r < BQ; r += THREADS) Ls[r] = i0 + r < T ? lse[bh * T + i0 + r] : 0.0f;
    row_dots(Ds, doh, dout.token_stride, head(out, b, h, hd), out.token_stride, i0, T, hd);
    float acc[ROWS][NC]; /* rows: queries ty + 16 i of the tile */
#pragma unroll
    for (int i = 0; i < ROWS; i++)
#pragma unroll
        for (int c = 0; c < NC; c++) acc[i][c] = 0.0f;

    for (int64_t j0 = 0; j0 < T; j0 += BK) {
        load_tile<DMAX>(Ks, kh, k.token_stride, j0, T, hd);
        load_tile<DMAX>(Vs, vh, v.token_stride, j0, T, hd);
        __syncthreads(); /* (the first time also Q, dO, lse and D) */
        float pt[ROWS][COLS], dp[ROWS][COLS];
        dot_tile<DMAX>(pt, Qs, Ks, hd, tx, ty, scale);
        dot_tile<DMAX>(dp, dOs, Vs, hd, tx, ty, 1.0f);
#pragma unroll
        for (int i = 0; i < ROWS; i++)
#pragma unroll
            for (int j = 0; j < COLS; j++) {
                const bool in = i0 + ty + 16 * i < T && j0 + tx + 16 * j < T;
                const float p = in ? expf(pt[i][j] - Ls[ty + 16 * i]) : 0.0f;
                dSs[(ty + 16 * i) * PLD + tx + 16 * j] = p * (dp[i][j] - Ds[ty + 16 * i]);
            }
        __syncthreads();
        tile_product<DMAX>(acc, dSs, PLD, 1, Ks, tx, ty);
        __syncthreads(); /* before the next key tile overwrites K, V and dS */
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int64_t t = i0 + ty + 16 * i;
        if (t >= T) continue;
        float *dqr = dq.data + b * dq.batch_stride + t * dq.token_stride + h * hd;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (tx + 16 * c < hd) dqr[tx + 16 * c] += scale * acc[i][c];
    }
}

/* The case the kernels serve: flash self-attention, nothing but plain, a head of at most 128, and few enough query
 * tiles for the grid's y. */
/* the cases (ops/fallback.h, shared with the CPU code that counts them), and a valid shape the grid holds */
bool served(const attn_shape *s)
{
    return !fallback_attention_case(s, NULL) && s->batch > 0 && s->heads > 0 && s->tokens > 0 && s->head_dim >= 1 &&
           (s->tokens + BQ - 1) / BQ <= 65535 && s->batch * s->heads <= INT32_MAX;
}

/* The CPU's scale, 1 / sqrt(head_dim) rounded once from double. */
float scale_of(const attn_shape *s) { return (float)(1.0 / sqrt((double)s->head_dim)); }

dim3 grid_of(const attn_shape *s) { return dim3((unsigned)(s->batch * s->heads), (unsigned)((s->tokens + 63) / 64)); }

template <int DMAX> void launch_forward(const attn_shape *s, attn_view out, attn_view q, attn_view k, attn_view v,
                                        float *lse)
{
    const size_t smem = forward_smem<DMAX>();
    cu_check(cudaFuncSetAttribute(flash_forward_kernel<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "attention forward smem");
    flash_forward_kernel<DMAX><<<grid_of(s), THREADS, smem, cu_compute_stream()>>>(
        out, q, k, v, lse, s->tokens, s->heads, (int)s->head_dim, scale_of(s));
}

template <int DMAX> void launch_backward(const attn_shape *s, attn_view dq, attn_view dk, attn_view dv, attn_view dout,
                                         attn_view q, attn_view k, attn_view v, attn_view out, const float *lse)
{
    const int hd = (int)s->head_dim;
    const float scale = scale_of(s);
    if (dk.data || dv.data) {
        const size_t smem = backward_kv_smem<DMAX>();
        cu_check(cudaFuncSetAttribute(flash_backward_kv_kernel<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem),
                 "attention backward smem");
        flash_backward_kv_kernel<DMAX><<<grid_of(s), THREADS, smem, cu_compute_stream()>>>(
            dk, dv, dout, q, k, v, out, lse, s->tokens, s->heads, hd, scale);
    }
    if (dq.data) {
        const size_t smem = backward_q_smem<DMAX>();
        cu_check(cudaFuncSetAttribute(flash_backward_q_kernel<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem),
                 "attention backward smem");
        flash_backward_q_kernel<DMAX><<<grid_of(s), THREADS, smem, cu_compute_stream()>>>(
            dq, dout, q, k, v, out, lse, s->tokens, s->heads, hd, scale);
    }
}

} // namespace

extern "C" {

st_status attention_forward(pool *p, const attn_shape *s, attn_view out, attn_view q, attn_view k, attn_view v,
                            op_state *keep)
{
    if (!served(s) || !cu_on_device(out.data, q.data, k.data, v.data))
        return cpu_attention_forward(p, s, out, q, k, v, keep);
    const double t0 = cu_op_start();
    const double flops = 4.0 * s->batch * s->heads * s->head_dim * (double)s->tokens * (double)s->tokens;
    float *lse = NULL;
    if (keep) { /* as the CPU's op_state_alloc: the kept lse, (batch, heads, tokens) floats */
        *keep = op_state{p, NULL, attention_kept_bytes(s)};
        const st_status st = pool_alloc(p, keep->bytes, MEM_ACTIVATIONS, "attention kept state", &keep->data);
        if (st != ST_OK) {
            cu_op_done(OP_ATTENTION, t0, flops, 0, "attention_forward");
            return st;
        }
        if (!cu_in_arena(keep->data)) { /* a host pool: the kernel cannot write it */
            op_state_release(keep);
            return cpu_attention_forward(p, s, out, q, k, v, keep);
        }
        lse = (float *)keep->data;
    }
    if (s->head_dim <= 64)
        launch_forward<64>(s, out, q, k, v, lse);
    else
        launch_forward<128>(s, out, q, k, v, lse);
    cu_op_done(OP_ATTENTION, t0, flops, 0, "attention_forward");
    return ST_OK;
}

st_status attention_backward(pool *p, const attn_shape *s, attn_view dq, attn_view dk, attn_view dv, attn_view dout,
                             attn_view q, attn_view k, attn_view v, attn_view out, const op_state *keep)
{
    /* no kept lse, or no out where dq or dk needs D: the CPU code, which refuses or serves it */
    if (!served(s) || !keep || !keep->data || ((dq.data || dk.data) && !out.data) ||
        !cu_on_device(dq.data, dk.data, dv.data, dout.data, q.data, k.data, v.data, out.data, keep->data))
        return cpu_attention_backward(p, s, dq, dk, dv, dout, q, k, v, out, keep);
    const double t0 = cu_op_start();
    const float *lse = (const float *)keep->data;
    if (s->head_dim <= 64)
        launch_backward<64>(s, dq, dk, dv, dout, q, k, v, out, lse);
    else
        launch_backward<128>(s, dq, dk, dv, dout, q, k, v, out, lse);
    cu_op_done(OP_ATTENTION, t0, 10.0 * s->batch * s->heads * s->head_dim * (double)s->tokens * (double)s->tokens, 0,
               "attention_backward");
    return ST_OK;
}

/* The masked entries with a NULL mask are the plain ops, bit for bit (ops.h): the dual-stream families call them so
 * when no caption is padded. A mask, even an empty one (which the CPU refuses), runs the CPU code. */
st_status attention_forward_masked(pool *p, const attn_shape *s, const attn_mask *mask, attn_view out, attn_view q,
                                   attn_view k, attn_view v, op_state *keep)
{
    if (!mask) return attention_forward(p, s, out, q, k, v, keep);
    return cpu_attention_forward_masked(p, s, mask, out, q, k, v, keep);
}

st_status attention_backward_masked(pool *p, const attn_shape *s, const attn_mask *mask, attn_view dq, attn_view dk,
                                    attn_view dv, attn_view dout, attn_view q, attn_view k, attn_view v, attn_view out,
                                    const op_state *keep)
{
    if (!mask) return attention_backward(p, s, dq, dk, dv, dout, q, k, v, out, keep);
    return cpu_attention_backward_masked(p, s, mask, dq, dk, dv, dout, q, k, v, out, keep);
}

} // extern "C"
