/* The CUDA backend's runtime, shared by its op files (C++ under nvcc; nothing here is public).
 *
 * How an op is ported. ops.h stays the one interface: a ported op is defined here under its own name, on device
 * pointers, and the CPU backend's definition of it is compiled into the CUDA build renamed cpu_<name> (ported.txt
 * lists the ported ops; CMake turns the list into the renaming header and into cpu_<name> declarations, below).
 * Each ported op starts with
 *
 *     if (!cu_on_device(y, x, w)) return cpu_<name>(...);
 *
 * so that whatever the kernel does not serve runs the CPU code unchanged: a dry pool's pointers (the op counts its
 * profile there), host memory, no GPU at all, and any case the kernel leaves out (a mask, a layout). Device memory
 * is the device pools' arena, which is managed memory: host code (models writing a table, the trainer reading a
 * loss, a CPU fallback) may touch it whenever the device is idle. Every op therefore ends with cu_op_done, which
 * waits for the compute stream: the device is idle between ops. The copy stream is not waited for: offload copies
 * overlap the ops that follow them, ordered by events (copy.cu). */
#ifndef SEGTRAIN_OPS_CUDA_BACKEND_H
#define SEGTRAIN_OPS_CUDA_BACKEND_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "segtrain/copy.h"
#include "segtrain/ops.h"
#include "segtrain/pool.h"
#include "segtrain/status.h"

/* The profile's counters (ops/cpu/common.c). */
extern int ops_profiling;
double prof_clock(void);
void prof_record(op_kind kind, double t0, double flops, double bytes);

/* The CPU definitions of the ported ops, under their cpu_ names (generated from ported.txt). */
#define SEGTRAIN_CPU_DECLARE(name) extern decltype(name) cpu_##name;
#include "cuda_ported.h"
SEGTRAIN_CUDA_PORTED(SEGTRAIN_CPU_DECLARE)
#undef SEGTRAIN_CPU_DECLARE
}

/* Whether a GPU is usable: the first call picks device 0 and creates the streams and the cuBLAS handle; false, for
 * good, when there is none (no driver, no device) or that fails, with the reason in cu_unavailable_reason(). */
bool cu_ready(void);
const char *cu_unavailable_reason(void);
cudaStream_t cu_compute_stream(void);
cudaStream_t cu_copy_stream(void);
cublasHandle_t cu_blas(void);

/* Whether p (NULL: yes, nothing to read) lies in a device pool's arena. */
bool cu_in_arena(const void *p);

/* True when a GPU is ready and every pointer given lies in a device arena (NULLs are skipped). */
template <typename... P> static inline bool cu_on_device(const P *...p)
{
    if (!cu_ready()) return false;
    const void *all[] = {static_cast<const void *>(p)...};
    for (const void *q : all)
        if (!cu_in_arena(q)) return false;
    return true;
}

/* Panics with the CUDA error's text: a failed launch or copy is a defect, not an input error (device memory is the
 * pools', so an allocation here never fails for want of memory). */
void cu_check(cudaError_t e, const char *what);
void cu_check_blas(cublasStatus_t s, const char *what);

/* Start and end of every ported op's device path: cu_op_done checks the launches, waits for the compute stream and
 * records the profile (flops for GEMMs and attention, bytes for memory-bound ops, as the CPU ops count them). */
static inline double cu_op_start(void) { return ops_profiling ? prof_clock() : 0; }
void cu_op_done(op_kind kind, double t0, double flops, double bytes, const char *what);
/* cu_op_done without the profile, for the ops the CPU backend does not profile either (scale_by, zero_floats, the
 * optimizer updates), so that both backends' profiles count the same calls. */
void cu_op_done_unprofiled(const char *what);

/* The column-sum kernels' block (norm's dw and db, the token sums of modulate and the gated residual): SUM_COLS
 * columns by SUM_LANES lanes, each lane summing its rows in order. */
constexpr int SUM_COLS = 32, SUM_LANES = 16;

/* Lane 0 of each column gets the column's totals of the S partial sums `a`, the lanes added in order, so that the
 * bits are fixed by the launch shape alone. Every thread of the block calls it. */
template <int S> __device__ inline void fold_lanes(float (&a)[S])
{
    __shared__ float part[S][SUM_LANES][SUM_COLS + 1];
    for (int s = 0; s < S; s++) part[s][threadIdx.y][threadIdx.x] = a[s];
    __syncthreads();
    for (int s = 0; threadIdx.y == 0 && s < S; s++) {
        a[s] = 0.0f;
        for (int k = 0; k < SUM_LANES; k++) a[s] += part[s][k][threadIdx.x];
    }
    __syncthreads(); /* part is written again by the next call */
}

/* A launch grid of at most 65535 * 32 blocks of `threads` covering n items with a grid-stride loop. */
static inline unsigned cu_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 32 ? 65535 * 32 : b);
}

#endif
