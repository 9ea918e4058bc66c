/* The CUDA backend's copy engine (copy.h): copies on their own stream, each with an event to wait on, so that
 * offload and fetch overlap the ops that follow them. The device is idle between ops (backend.h), so a copy out
 * needs no event from the compute stream: what it reads is finished when it is queued. Without a GPU it is the
 * CPU's engine. */
#include <mutex>
#include <stdlib.h>

#include "backend.h"

struct copy_job {
    cudaEvent_t start, done;
    size_t bytes;
    copy_dir dir;
    bool failed;
};

struct copy_engine {
    std::mutex lock;
    copy_stats stats;
    int fail_countdown;
};

extern "C" st_status copy_engine_create(copy_engine **out)
{
    if (!cu_ready()) return cpu_copy_engine_create(out);
    *out = new (std::nothrow) copy_engine();
    return *out ? ST_OK : st_host_oom("the copy engine");
}

extern "C" void copy_engine_destroy(copy_engine *e)
{
    if (!cu_ready()) return cpu_copy_engine_destroy(e);
    if (!e) return;
    cu_check(cudaStreamSynchronize(cu_copy_stream()), "finishing copies");
    delete e;
}

/* bytes moved on stream s; under bf16, n = bytes / 2 floats that are bf16 already, moved as their high halves
 * (bytes 2-3 of each little-endian float) by a pitched copy, and widened back into zeroed floats the same way */
static void copy_async(copy_dir dir, void *dst, const void *src, size_t bytes, bool bf16, cudaStream_t s)
{
    const size_t half = 2, whole = 4, n = bytes / half;
    if (!bf16) {
        cu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "an offload copy");
    } else if (dir == COPY_TO_HOST) {
        cu_check(cudaMemcpy2DAsync(dst, half, (const char *)src + half, whole, half, n, cudaMemcpyDefault, s),
                 "an offload copy (bf16)");
    } else {
        cu_check(cudaMemsetAsync(dst, 0, n * whole, s), "an offload copy (bf16)");
        cu_check(cudaMemcpy2DAsync((char *)dst + half, whole, src, half, half, n, cudaMemcpyDefault, s),
                 "an offload copy (bf16)");
    }
}

/* A copy on the copy stream between two events. */
static st_status submit(copy_engine *e, copy_dir dir, void *dst, const void *src, size_t bytes, bool bf16,
                        copy_job **job)
{
    copy_job *j = new (std::nothrow) copy_job();
    if (!j) return st_host_oom("a copy job");
    j->bytes = bytes, j->dir = dir;
    {
        std::lock_guard<std::mutex> hold(e->lock);
        if (e->fail_countdown > 0 && --e->fail_countdown == 0) j->failed = true;
        e->stats.bytes[dir] += bytes;
        e->stats.copies[dir]++;
    }
    const cudaStream_t s = cu_copy_stream();
    cu_check(cudaEventCreate(&j->start), "a copy's event");
    cu_check(cudaEventCreate(&j->done), "a copy's event");
    cu_check(cudaEventRecord(j->start, s), "a copy's event");
    if (!j->failed && bytes) copy_async(dir, dst, src, bytes, bf16, s);
    cu_check(cudaEventRecord(j->done, s), "a copy's event");
    *job = j;
    return ST_OK;
}

extern "C" st_status copy_submit(copy_engine *e, copy_dir dir, void *dst, const void *src, size_t bytes, copy_job **job)
{
    if (!cu_ready()) return cpu_copy_submit(e, dir, dst, src, bytes, job);
    return submit(e, dir, dst, src, bytes, false, job);
}

extern "C" st_status copy_submit_bf16(copy_engine *e, copy_dir dir, void *dst, const void *src, size_t n,
                                      copy_job **job)
{
    if (!cu_ready()) return cpu_copy_submit_bf16(e, dir, dst, src, n, job);
    return submit(e, dir, dst, src, n * 2, true, job);
}

extern "C" st_status copy_wait(copy_engine *e, copy_job *j)
{
    if (!cu_ready()) return cpu_copy_wait(e, j);
    const double t0 = clock_seconds();
    cu_check(cudaEventSynchronize(j->done), "waiting for a copy");
    float ms = 0;
    cu_check(cudaEventElapsedTime(&ms, j->start, j->done), "timing a copy");
    {
        std::lock_guard<std::mutex> hold(e->lock);
        e->stats.waited_seconds += clock_seconds() - t0;
        e->stats.busy_seconds += ms / 1e3;
    }
    cudaEventDestroy(j->start);
    cudaEventDestroy(j->done);
    const copy_job done = *j;
    delete j;
    if (done.failed)
        return st_fail(ST_ERR_IO, "a copy of %zu bytes to %s memory failed (injected fault)", done.bytes,
                       done.dir == COPY_TO_HOST ? "host" : "device");
    return ST_OK;
}

extern "C" void copy_engine_stats(copy_engine *e, copy_stats *out)
{
    if (!cu_ready()) return cpu_copy_engine_stats(e, out);
    std::lock_guard<std::mutex> hold(e->lock);
    *out = e->stats;
}

extern "C" void copy_engine_reset_stats(copy_engine *e)
{
    if (!cu_ready()) return cpu_copy_engine_reset_stats(e);
    std::lock_guard<std::mutex> hold(e->lock);
    e->stats = copy_stats{};
}

extern "C" void copy_engine_fail_nth(copy_engine *e, int n)
{
    if (!cu_ready()) return cpu_copy_engine_fail_nth(e, n);
    std::lock_guard<std::mutex> hold(e->lock);
    e->fail_countdown = n;
}
