/* The CPU backend's copy engine: memcpy on a worker thread (a CUDA build's is ops/cuda/copy.cu). */
#include "segtrain/copy.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct copy_job {
    copy_job *next;
    copy_dir dir;
    void *dst;
    const void *src;
    size_t bytes; /* moved: under bf16, n elements of 2 bytes */
    int done, failed, bf16;
};

/* copy_submit_bf16's copy: each float's high half out, or each half widened back (exact for bf16 values) */
static void copy_bf16(const copy_job *j)
{
    const size_t n = j->bytes / sizeof(uint16_t);
    if (j->dir == COPY_TO_HOST) {
        const float *src = j->src;
        uint16_t *dst = j->dst;
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, &src[i], sizeof bits);
            dst[i] = (uint16_t)(bits >> 16);
        }
    } else {
        const uint16_t *src = j->src;
        float *dst = j->dst;
        for (size_t i = 0; i < n; i++) {
            const uint32_t bits = (uint32_t)src[i] << 16;
            memcpy(&dst[i], &bits, sizeof bits);
        }
    }
}

struct copy_engine {
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t work, finished;
    copy_job *head, *tail;
    int stop, fail_countdown;
    copy_stats stats;
};

static void *worker_main(void *arg)
{
    copy_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->head && !e->stop) pthread_cond_wait(&e->work, &e->lock);
        if (!e->head) break; /* stopping with nothing left */
        copy_job *j = e->head;
        e->head = j->next;
        if (!e->head) e->tail = NULL;
        pthread_mutex_unlock(&e->lock);
        double t0 = clock_seconds();
        if (!j->failed && !pool_is_dry_ptr(j->dst)) { /* a dry copy moves nothing */
            if (j->bf16) copy_bf16(j);
            else memcpy(j->dst, j->src, j->bytes);
        }
        double busy = clock_seconds() - t0;
        pthread_mutex_lock(&e->lock);
        e->stats.busy_seconds += busy;
        j->done = 1;
        pthread_cond_broadcast(&e->finished);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

st_status copy_engine_create(copy_engine **out)
{
    copy_engine *e = calloc(1, sizeof *e);
    if (!e) return st_host_oom("the copy engine");
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->finished, NULL);
    if (pthread_create(&e->worker, NULL, worker_main, e) != 0) {
        pthread_cond_destroy(&e->finished);
        pthread_cond_destroy(&e->work);
        pthread_mutex_destroy(&e->lock);
        free(e);
        return st_fail(ST_ERR_INTERNAL, "cannot start the copy engine's thread");
    }
    *out = e;
    return ST_OK;
}

void copy_engine_destroy(copy_engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->stop = 1;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->worker, NULL);
    pthread_cond_destroy(&e->finished);
    pthread_cond_destroy(&e->work);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static st_status submit(copy_engine *e, copy_dir dir, void *dst, const void *src, size_t bytes, int bf16,
                        copy_job **job)
{
    copy_job *j = calloc(1, sizeof *j);
    if (!j) return st_host_oom("a copy job");
    *j = (copy_job){.dir = dir, .dst = dst, .src = src, .bytes = bytes, .bf16 = bf16};
    pthread_mutex_lock(&e->lock);
    if (e->fail_countdown > 0 && --e->fail_countdown == 0) j->failed = 1;
    e->stats.bytes[dir] += bytes;
    e->stats.copies[dir]++;
    if (e->tail) e->tail->next = j;
    else e->head = j;
    e->tail = j;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->lock);
    *job = j;
    return ST_OK;
}

st_status copy_submit(copy_engine *e, copy_dir dir, void *dst, const void *src, size_t bytes, copy_job **job)
{
    return submit(e, dir, dst, src, bytes, 0, job);
}

st_status copy_submit_bf16(copy_engine *e, copy_dir dir, void *dst, const void *src, size_t n, copy_job **job)
{
    return submit(e, dir, dst, src, n * sizeof(uint16_t), 1, job);
}

st_status copy_wait(copy_engine *e, copy_job *j)
{
    pthread_mutex_lock(&e->lock);
    if (!j->done) {
        double t0 = clock_seconds();
        while (!j->done) pthread_cond_wait(&e->finished, &e->lock);
        e->stats.waited_seconds += clock_seconds() - t0;
    }
    pthread_mutex_unlock(&e->lock);
    const int failed = j->failed;
    const copy_dir dir = j->dir;
    const size_t bytes = j->bytes;
    free(j);
    if (failed)
        return st_fail(ST_ERR_IO, "a copy of %zu bytes to %s memory failed (injected fault)", bytes,
                       dir == COPY_TO_HOST ? "host" : "device");
    return ST_OK;
}

void copy_engine_stats(copy_engine *e, copy_stats *out)
{
    pthread_mutex_lock(&e->lock);
    *out = e->stats;
    pthread_mutex_unlock(&e->lock);
}

void copy_engine_reset_stats(copy_engine *e)
{
    pthread_mutex_lock(&e->lock);
    e->stats = (copy_stats){0};
    pthread_mutex_unlock(&e->lock);
}

void copy_engine_fail_nth(copy_engine *e, int n)
{
    pthread_mutex_lock(&e->lock);
    e->fail_countdown = n;
    pthread_mutex_unlock(&e->lock);
}
