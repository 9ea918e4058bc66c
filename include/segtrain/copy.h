/* The copy engine and host tensors: how saved tensors leave the device during forward and come back for
 * backward.
 *
 * On a GPU this is a copy stream over the bus to pinned host memory. On the CPU backend the device pool is the
 * budgeted working memory and the host pool the memory outside that budget; the bytes really move, on a worker
 * thread (pthreads), while compute goes on, with the same accounting, so the figures mean the same thing.
 *
 * Device bytes of a tensor going to the host are freed as soon as two things are true: its copy has finished
 * and the compute that still reads it is done. The second is a point in the program (host_tensor_drop_device),
 * where the caller waits for the first; since the copy overlaps that compute, the wait is usually nil. Freeing
 * at program points, not whenever the worker happens to finish, keeps the peak a property of the plan. */
#ifndef SEGTRAIN_COPY_H
#define SEGTRAIN_COPY_H

#include <stdbool.h>
#include <stddef.h>

#include "segtrain/pool.h"

typedef enum copy_dir { COPY_TO_HOST, COPY_TO_DEVICE } copy_dir;

typedef struct copy_engine copy_engine;
typedef struct copy_job copy_job;

typedef struct copy_stats {
    size_t bytes[2], copies[2]; /* by direction */
    double busy_seconds;        /* the worker copying */
    double waited_seconds;      /* callers blocked in copy_wait: copy time that compute did not hide */
} copy_stats;

st_status copy_engine_create(copy_engine **out);
/* Finishes queued copies and joins the worker. */
void copy_engine_destroy(copy_engine *e);

/* Queues memcpy(dst, src, bytes); *job is the event to wait on. */
st_status copy_submit(copy_engine *e, copy_dir dir, void *dst, const void *src, size_t bytes, copy_job **job);
/* Queues a copy of n floats that are bf16 already (round_to_bf16: their low 16 bits are zero) as bf16, 2 bytes each:
 * to the host, dst (uint16_t[n]) gets each float's high half; to the device, dst (float[n]) gets each widened back,
 * exactly. How attention offload moves its bf16 tensors under mixed_precision bf16. */
st_status copy_submit_bf16(copy_engine *e, copy_dir dir, void *dst, const void *src, size_t n, copy_job **job);
/* Blocks on a condition variable until the job is done, frees it and returns its status (ST_ERR_IO for a failed
 * copy). */
st_status copy_wait(copy_engine *e, copy_job *job);

void copy_engine_stats(copy_engine *e, copy_stats *out);
void copy_engine_reset_stats(copy_engine *e);
/* Fault injection for tests: the n-th copy submitted from now on fails (n >= 1); 0 turns it off. */
void copy_engine_fail_nth(copy_engine *e, int n);

/* Where host tensors go: the engine and the two pools. */
typedef struct offload {
    copy_engine *engine;
    pool *device, *host;
} offload;

/* A tensor that spends the time between its forward and its backward in host memory. */
typedef struct host_tensor {
    float *dev, *host;
    size_t bytes;
    mem_tag tag;
    const char *what;
    copy_job *job;  /* the copy in flight, if any */
    bool owns_dev;  /* dev was taken by fetch (else it is the caller's, until drop_device frees it) */
    bool bf16;      /* host holds the floats as bf16 (copy_submit_bf16), bytes / 2 of it */
} host_tensor;

/* Takes the host copy now (host pool) and queues the copy of dev to it; dev stays the caller's, valid and
 * readable, until host_tensor_drop_device. */
st_status host_tensor_offload(offload *o, host_tensor *t, float *dev, size_t bytes, mem_tag tag, const char *what);
/* The same for floats that are bf16 already: the host holds them in bf16, 2 bytes an element, and fetch widens them
 * back into float device bytes (copy_submit_bf16). */
st_status host_tensor_offload_bf16(offload *o, host_tensor *t, float *dev, size_t bytes, mem_tag tag, const char *what);
/* Waits for the copy to the host, then frees the device bytes given to offload. */
st_status host_tensor_drop_device(offload *o, host_tensor *t);
/* Takes the device bytes now (device pool) and queues the copy back. A no-op if already fetched. */
st_status host_tensor_fetch(offload *o, host_tensor *t);
/* Fetches if that was not done, waits for the copy back, frees the host copy; t->dev is then the tensor. */
st_status host_tensor_wait(offload *o, host_tensor *t);
/* Waits for anything in flight and frees what it owns: the host copy, and the device bytes if fetched (after
 * use, or on an error path). */
void host_tensor_release(offload *o, host_tensor *t);

#endif
