/* The CUDA backend's runtime (backend.h): the device, its two streams and cuBLAS handle, and the pools' arenas. */
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static struct {
    std::once_flag once;
    bool ok;
    int device;
    char why[256], name[320];
    cudaStream_t compute, copy;
    cublasHandle_t blas;
    void *blas_workspace;
} cu;

/* cuBLAS's own workspace, fixed so that it allocates nothing during a step (device memory outside the pools). */
#define BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

static bool holds_device(const void *p) { return p && cu_in_arena(p); }

static void cu_init(void)
{
    const char *want = getenv("SEGTRAIN_BACKEND");
    if (want && !strcmp(want, "cpu")) {
        snprintf(cu.why, sizeof cu.why, "SEGTRAIN_BACKEND=cpu");
        return;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(cu.why, sizeof cu.why, "no GPU (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        (void)cudaGetLastError();
        return;
    }
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(cu.device)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, cu.device)) ||
        (e = cudaStreamCreateWithFlags(&cu.compute, cudaStreamNonBlocking)) ||
        (e = cudaStreamCreateWithFlags(&cu.copy, cudaStreamNonBlocking)) ||
        (e = cudaMalloc(&cu.blas_workspace, BLAS_WORKSPACE_BYTES))) {
        snprintf(cu.why, sizeof cu.why, "the GPU could not be set up (%s)", cudaGetErrorString(e));
        return;
    }
    if (cublasCreate(&cu.blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(cu.blas, cu.compute) ||
        cublasSetWorkspace(cu.blas, cu.blas_workspace, BLAS_WORKSPACE_BYTES) ||
        cublasSetMathMode(cu.blas, CUBLAS_DEFAULT_MATH)) { /* no TF32: the GEMMs ask for CUBLAS_COMPUTE_32F */
        snprintf(cu.why, sizeof cu.why, "cuBLAS could not be set up");
        return;
    }
    snprintf(cu.name, sizeof cu.name, "cuda (%s, %.1f GiB, sm_%d%d)", prop.name,
             (double)prop.totalGlobalMem / (1 << 30), prop.major, prop.minor);
    cu.ok = true;
    ops_fallback_device(holds_device); /* the CPU code run on this memory is a fallback, counted (ops.h) */
}

bool cu_ready(void)
{
    std::call_once(cu.once, cu_init);
    return cu.ok;
}

const char *cu_unavailable_reason(void) { return cu_ready() ? "" : cu.why; }
cudaStream_t cu_compute_stream(void) { return cu.compute; }
cudaStream_t cu_copy_stream(void) { return cu.copy; }
cublasHandle_t cu_blas(void) { return cu.blas; }

extern "C" const char *ops_backend_name(void)
{
    static char text[320];
    if (cu_ready()) return cu.name;
    snprintf(text, sizeof text, "cuda: %s, every op on the CPU", cu.why);
    return text;
}

extern "C" size_t ops_device_bytes_in_use(void)
{
    size_t free_bytes = 0, total = 0;
    if (!cu_ready()) return cpu_ops_device_bytes_in_use();
    cu_check(cudaMemGetInfo(&free_bytes, &total), "reading the GPU's free memory");
    return total - free_bytes;
}

void cu_check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) st_panic("CUDA error in %s: %s", what, cudaGetErrorString(e));
}

void cu_check_blas(cublasStatus_t s, const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS) st_panic("cuBLAS error in %s: %s", what, cublasGetStatusString(s));
}

void cu_op_done_unprofiled(const char *what)
{
    cu_check(cudaGetLastError(), what);
    cu_check(cudaStreamSynchronize(cu.compute), what); /* the device is idle between ops (backend.h) */
}

void cu_op_done(op_kind kind, double t0, double flops, double bytes, const char *what)
{
    cu_op_done_unprofiled(what);
    if (ops_profiling) prof_record(kind, t0, flops, bytes);
}

/* ---- arenas ---- */

/* Device memory is what a device pool's arena holds (the host pool's pinned arena is the host's). */
bool cu_in_arena(const void *p)
{
    if (!p) return true;
    const pool *in = pool_arena_of(p);
    return in && pool_get_kind(in) == POOL_DEVICE;
}

static void release_device(void *base, void *ctx) { cu_check(cudaFree(base), "freeing the device arena"); }

static void zero_device(void *ptr, size_t bytes, void *ctx)
{
    cu_check(cudaMemsetAsync(ptr, 0, bytes, cu.compute), "zeroing device memory");
    cu_check(cudaStreamSynchronize(cu.compute), "zeroing device memory");
}

static void release_host(void *base, void *ctx) { cu_check(cudaFreeHost(base), "freeing the pinned arena"); }

/* A pinned arena's size when host_memory is unlimited: pinning is slow and takes memory from the whole system. */
#define HOST_ARENA_DEFAULT ((size_t)16 << 30)
#define ARENA_ALIGN 256 /* cudaMalloc's own alignment: what cuBLAS and vector loads expect */

extern "C" st_status ops_device_pool_create(size_t capacity, pool **out)
{
    *out = NULL;
    if (!cu_ready()) return (*out = pool_create(POOL_DEVICE, capacity)) ? ST_OK : st_host_oom("the device pool");
    size_t free_bytes = 0, total = 0;
    cu_check(cudaMemGetInfo(&free_bytes, &total), "reading the GPU's free memory");
    char b[3][24];
    if (capacity > free_bytes)
        return st_fail(ST_ERR_OOM, "device_memory %s is more than the GPU has free (%s of %s)",
                       st_bytes(b[0], capacity), st_bytes(b[1], free_bytes), st_bytes(b[2], total));
    /* unset: 90 % of what is free, leaving room for the context's growth and kernels' local memory */
    const size_t bytes = capacity ? capacity : free_bytes / 10 * 9;
    void *base = NULL;
    /* managed, so that the host code of models and the CPU fallbacks can read and write it between ops; it prefers
     * the GPU and starts there, so that kernels do not fault it in */
    if (!bytes || cudaMallocManaged(&base, bytes, cudaMemAttachGlobal) != cudaSuccess) {
        (void)cudaGetLastError();
        return st_fail(ST_ERR_OOM, "the GPU refused a device arena of %s (%s free)", st_bytes(b[0], bytes),
                       st_bytes(b[1], free_bytes));
    }
    cudaMemLocation gpu = {cudaMemLocationTypeDevice, cu.device};
    /* hints: a device without concurrent managed access (some virtual machines) refuses them, and pages then move
     * on first touch instead */
    if (cudaMemAdvise(base, bytes, cudaMemAdviseSetPreferredLocation, gpu) != cudaSuccess ||
        cudaMemPrefetchAsync(base, bytes, gpu, 0, cu.compute) != cudaSuccess)
        (void)cudaGetLastError();
    cu_check(cudaStreamSynchronize(cu.compute), "placing the device arena");
    const pool_arena_ops ops = {release_device, zero_device, NULL};
    if (!(*out = pool_create_arena(POOL_DEVICE, base, bytes, ARENA_ALIGN, &ops))) {
        cudaFree(base);
        return st_fail(ST_ERR_HOST_OOM, "no table for the device pool's arena (or 16 arena pools live already)");
    }
    return ST_OK;
}

extern "C" st_status ops_host_pool_create(size_t capacity, pool **out)
{
    *out = NULL;
    if (!cu_ready()) return (*out = pool_create(POOL_HOST, capacity)) ? ST_OK : st_host_oom("the host pool");
    size_t bytes = capacity ? capacity : HOST_ARENA_DEFAULT;
    const size_t available = pool_system_available();
    if (!capacity && available && bytes > available / 2) bytes = available / 2;
    void *base = NULL;
    if (cudaHostAlloc(&base, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        char b[24];
        return st_fail(ST_ERR_HOST_OOM, "the system refused %s of pinned host memory for offload (set host_memory)",
                       st_bytes(b, bytes));
    }
    const pool_arena_ops ops = {release_host, NULL, NULL}; /* pinned memory is the host's: zeroed by memset */
    if (!(*out = pool_create_arena(POOL_HOST, base, bytes, ARENA_ALIGN, &ops))) {
        cudaFreeHost(base);
        return st_host_oom("the host pool");
    }
    return ST_OK;
}
