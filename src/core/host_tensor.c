/* Host tensors over whichever copy engine the backend has (copy.h). */
#include "segtrain/copy.h"

/* One copy of t between dev and host, in the direction given, in t's form (float, or bf16 on the host). */
static st_status submit(offload *o, host_tensor *t, copy_dir dir)
{
    void *dst = dir == COPY_TO_HOST ? (void *)t->host : (void *)t->dev;
    const void *src = dir == COPY_TO_HOST ? (const void *)t->dev : (const void *)t->host;
    return t->bf16 ? copy_submit_bf16(o->engine, dir, dst, src, t->bytes / sizeof(float), &t->job)
                   : copy_submit(o->engine, dir, dst, src, t->bytes, &t->job);
}

static st_status offload_as(offload *o, host_tensor *t, float *dev, size_t bytes, bool bf16, mem_tag tag,
                            const char *what)
{
    *t = (host_tensor){.dev = dev, .bytes = bytes, .tag = tag, .what = what, .bf16 = bf16};
    st_status st = pool_alloc(o->host, bf16 ? bytes / 2 : bytes, tag, what, (void **)&t->host);
    return st ? st : submit(o, t, COPY_TO_HOST);
}

st_status host_tensor_offload(offload *o, host_tensor *t, float *dev, size_t bytes, mem_tag tag, const char *what)
{
    return offload_as(o, t, dev, bytes, false, tag, what);
}

st_status host_tensor_offload_bf16(offload *o, host_tensor *t, float *dev, size_t bytes, mem_tag tag, const char *what)
{
    return offload_as(o, t, dev, bytes, true, tag, what);
}

st_status host_tensor_drop_device(offload *o, host_tensor *t)
{
    st_status st = ST_OK;
    if (t->job) st = copy_wait(o->engine, t->job);
    t->job = NULL;
    pool_free(o->device, t->dev);
    t->dev = NULL;
    return st;
}

st_status host_tensor_fetch(offload *o, host_tensor *t)
{
    if (t->dev || t->job) return ST_OK;
    st_status st = pool_alloc(o->device, t->bytes, t->tag, t->what, (void **)&t->dev);
    t->owns_dev = t->dev != NULL;
    return st ? st : submit(o, t, COPY_TO_DEVICE);
}

st_status host_tensor_wait(offload *o, host_tensor *t)
{
    st_status st = host_tensor_fetch(o, t);
    if (!st && t->job) st = copy_wait(o->engine, t->job);
    t->job = NULL;
    if (!st) {
        pool_free(o->host, t->host);
        t->host = NULL;
    }
    return st;
}

void host_tensor_release(offload *o, host_tensor *t)
{
    if (t->job) (void)copy_wait(o->engine, t->job); /* the status no longer matters: both copies go */
    if (t->dev && t->owns_dev) pool_free(o->device, t->dev);
    if (t->host) pool_free(o->host, t->host);
    *t = (host_tensor){0};
}
