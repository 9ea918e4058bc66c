/* Host tensors over whichever copy engine the backend has (copy.h). */
#include "segtrain/copy.h"

st_status host_tensor_offload(offload *o, host_tensor *t, float *dev, size_t bytes, mem_tag tag, const char *what)
{
    *t = (host_tensor){.dev = dev, .bytes = bytes, .tag = tag, .what = what};
    st_status st = pool_alloc(o->host, bytes, tag, what, (void **)&t->host);
    if (!st) st = copy_submit(o->engine, COPY_TO_HOST, t->host, dev, bytes, &t->job);
    return st;
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
    if (!st) st = copy_submit(o->engine, COPY_TO_DEVICE, t->dev, t->host, t->bytes, &t->job);
    return st;
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
