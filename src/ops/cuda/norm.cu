/* LayerNorm and RMSNorm on the device: the functions of ops/cpu/norm.c, kept state in its layout (mean[n] then
 * rstd[n] for LayerNorm, rstd[n] for RMSNorm), so that either backend's backward reads the other's forward.
 *
 * One warp a row for the statistics and the input gradient: the lanes take the row's columns in a stride of 32, in
 * order, and fold with a butterfly, so every bit is fixed by the launch shape alone. dw and db are column sums over
 * the rows: one thread a column and one of SUM_LANES row lanes, each lane's rows in order, the lanes folded in order
 * (fold_lanes). No workspace (the ops state none) and no atomics. */
#include "backend.h"

namespace {

constexpr int WARPS = 8; /* rows a block of the row kernels (256 threads) */

/* A butterfly: lane i adds s_i + s_(i^o) and lane i^o the same two in the other order, which IEEE addition makes
 * the same bits, so all lanes end with one value. */
__device__ inline float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* y = (x - m) r w + b with m the row mean (centre) or 0 (RMSNorm), r = 1 / sqrt(mean((x - m)^2) + eps), as
 * norm.c's row_sum and row_sq_dev take them; w and b may be NULL. Writes m and r where asked (mean_out, rstd_out:
 * NULL when nothing is kept). y may be x: each element is read before its lane writes it. */
__global__ void norm_forward_kernel(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t d,
                                    float inv_d, float eps, bool centre, float *mean_out, float *rstd_out)
{
    const int lane = threadIdx.x & 31;
    for (int64_t i = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32; i < n; i += (int64_t)gridDim.x * WARPS) {
        const float *xr = x + i * d;
        float m = 0.0f;
        if (centre) {
            float s = 0.0f;
            for (int64_t j = lane; j < d; j += 32) s += xr[j];
            m = warp_sum(s) * inv_d;
        }
        float q = 0.0f;
        for (int64_t j = lane; j < d; j += 32) {
            const float t = xr[j] - m;
            q += t * t;
        }
        const float r = 1.0f / sqrtf(warp_sum(q) * inv_d + eps);
        if (lane == 0) {
            if (mean_out) mean_out[i] = m;
            if (rstd_out) rstd_out[i] = r;
        }
        float *yr = y + i * d;
        for (int64_t j = lane; j < d; j += 32) {
            float v = (xr[j] - m) * r;
            if (w) v = v * w[j];
            if (b) v = v + b[j];
            yr[j] = v;
        }
    }
}

/* dx += r (g - a - xhat bb) with g = dy w (dy without w), xhat = (x - m) r, bb = mean(g xhat) and a = mean(g) for
 * LayerNorm (mean given), 0 for RMSNorm (mean NULL, m = 0), as norm.c's grad_row_sums and grad_row_apply. */
__global__ void norm_dx_kernel(float *dx, const float *dy, const float *x, const float *w, const float *mean,
                               const float *rstd, int64_t n, int64_t d, float inv_d)
{
    const int lane = threadIdx.x & 31;
    for (int64_t i = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32; i < n; i += (int64_t)gridDim.x * WARPS) {
        const float *dyr = dy + i * d, *xr = x + i * d;
        const float m = mean ? mean[i] : 0.0f, r = rstd[i];
        float s1 = 0.0f, s2 = 0.0f;
        for (int64_t j = lane; j < d; j += 32) {
            const float g = w ? dyr[j] * w[j] : dyr[j];
            s1 += g;
            s2 += g * ((xr[j] - m) * r);
        }
        s1 = warp_sum(s1);
        s2 = warp_sum(s2);
        const float a = mean ? s1 * inv_d : 0.0f, bb = s2 * inv_d;
        float *dxr = dx + i * d;
        for (int64_t j = lane; j < d; j += 32) {
            const float g = w ? dyr[j] * w[j] : dyr[j];
            dxr[j] += r * (g - a - ((xr[j] - m) * r) * bb);
        }
    }
}

/* dw[c] += sum_i dy xhat and db[c] += sum_i dy (either may be NULL; mean NULL: m = 0). Block (SUM_COLS, SUM_LANES):
 * lane y sums rows y, y + SUM_LANES, ... in order; fold_lanes adds the lanes in order. */
__global__ void norm_param_kernel(float *dw, float *db, const float *dy, const float *x, const float *mean,
                                  const float *rstd, int64_t n, int64_t d)
{
    const int64_t c = (int64_t)blockIdx.x * SUM_COLS + threadIdx.x;
    float a[2] = {0.0f, 0.0f}; /* dw's and db's */
    if (c < d)
        for (int64_t i = threadIdx.y; i < n; i += SUM_LANES) {
            const float g = dy[i * d + c];
            const float m = mean ? mean[i] : 0.0f;
            a[0] += g * ((x[i * d + c] - m) * rstd[i]);
            a[1] += g;
        }
    fold_lanes(a);
    if (threadIdx.y == 0 && c < d) {
        if (dw) dw[c] += a[0];
        if (db) db[c] += a[1];
    }
}

/* The kept state, as norm.c's op_state_alloc makes it: `bytes` of MEM_ACTIVATIONS from p into keep (NULL: none). */
st_status keep_alloc(op_state *keep, pool *p, size_t bytes, const char *what)
{
    if (!keep) return ST_OK;
    *keep = op_state{};
    keep->pool = p;
    keep->bytes = bytes;
    const st_status s = pool_alloc(p, bytes, MEM_ACTIVATIONS, what, &keep->data);
    if (s != ST_OK) *keep = op_state{};
    return s;
}

void launch_forward(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t d, float eps,
                    bool centre, float *mean_out, float *rstd_out)
{
    if (n <= 0) return;
    norm_forward_kernel<<<cu_blocks(n, WARPS), WARPS * 32, 0, cu_compute_stream()>>>(
        y, x, w, b, n, d, 1.0f / (float)d, eps, centre, mean_out, rstd_out);
}

void launch_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                     const float *mean, const float *rstd, int64_t n, int64_t d)
{
    if (n <= 0 || d <= 0) return;
    /* the column sums first: they read dy, which nothing may alias, but this order is the harmless one if it did */
    if (dw || db)
        norm_param_kernel<<<(unsigned)((d + SUM_COLS - 1) / SUM_COLS), dim3(SUM_COLS, SUM_LANES), 0,
                            cu_compute_stream()>>>(dw, db, dy, x, mean, rstd, n, d);
    if (dx)
        norm_dx_kernel<<<cu_blocks(n, WARPS), WARPS * 32, 0, cu_compute_stream()>>>(dx, dy, x, w, mean, rstd, n, d,
                                                                                     1.0f / (float)d);
}

} // namespace

extern "C" st_status layernorm_forward(pool *p, float *y, const float *x, const float *w, const float *b, int64_t n,
                                       int64_t d, float eps, op_state *keep)
{
    /* a bad shape is refused by the CPU code, with its message */
    if (!cu_on_device(y, x, w, b) || n < 0 || d < 1) return cpu_layernorm_forward(p, y, x, w, b, n, d, eps, keep);
    const double t0 = cu_op_start();
    const st_status s = keep_alloc(keep, p, layernorm_kept_bytes(n), "layernorm mean/rstd");
    if (s == ST_OK && keep && !cu_in_arena(keep->data)) { /* a host pool's state: the CPU code writes it */
        op_state_release(keep);
        return cpu_layernorm_forward(p, y, x, w, b, n, d, eps, keep);
    }
    if (s == ST_OK) {
        float *kept = keep ? (float *)keep->data : nullptr;
        launch_forward(y, x, w, b, n, d, eps, true, kept, kept ? kept + n : nullptr);
    }
    cu_op_done(OP_NORM, t0, 0, 8.0 * n * d, "layernorm_forward");
    return s;
}

extern "C" void layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                                   int64_t n, int64_t d, const op_state *keep)
{
    /* without the kept state (or with the wrong one) the CPU code panics, as the contract says */
    const void *kept = keep ? keep->data : nullptr;
    if (!cu_on_device(dx, dw, db, dy, x, w, kept) || !kept || keep->bytes != layernorm_kept_bytes(n))
        return cpu_layernorm_backward(dx, dw, db, dy, x, w, n, d, keep);
    const double t0 = cu_op_start();
    const float *mean = (const float *)kept, *rstd = mean + n;
    launch_backward(dx, dw, db, dy, x, w, mean, rstd, n, d);
    cu_op_done(OP_NORM, t0, 0, 16.0 * n * d, "layernorm_backward");
}

extern "C" st_status rmsnorm_forward(pool *p, float *y, const float *x, const float *w, int64_t n, int64_t d,
                                     float eps, op_state *keep)
{
    if (!cu_on_device(y, x, w) || n < 0 || d < 1) return cpu_rmsnorm_forward(p, y, x, w, n, d, eps, keep);
    const double t0 = cu_op_start();
    const st_status s = keep_alloc(keep, p, rmsnorm_kept_bytes(n), "rmsnorm rstd");
    if (s == ST_OK && keep && !cu_in_arena(keep->data)) { /* a host pool's state: the CPU code writes it */
        op_state_release(keep);
        return cpu_rmsnorm_forward(p, y, x, w, n, d, eps, keep);
    }
    if (s == ST_OK) launch_forward(y, x, w, nullptr, n, d, eps, false, nullptr, keep ? (float *)keep->data : nullptr);
    cu_op_done(OP_NORM, t0, 0, 8.0 * n * d, "rmsnorm_forward");
    return s;
}

extern "C" void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t n,
                                 int64_t d, const op_state *keep)
{
    const void *kept = keep ? keep->data : nullptr;
    if (!cu_on_device(dx, dw, dy, x, w, kept) || !kept || keep->bytes != rmsnorm_kept_bytes(n))
        return cpu_rmsnorm_backward(dx, dw, dy, x, w, n, d, keep);
    const double t0 = cu_op_start();
    launch_backward(dx, dw, nullptr, dy, x, w, nullptr, (const float *)kept, n, d);
    cu_op_done(OP_NORM, t0, 0, 16.0 * n * d, "rmsnorm_backward");
}
