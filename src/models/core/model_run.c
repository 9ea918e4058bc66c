/* A model from a run configuration, with its pools (model_run.h). */
#include "segtrain/model_run.h"

#include <stddef.h>

st_status model_run_open(const config *cfg, bool allocate, model_run *out)
{
    model_config mc;
    ckpt_settings cs;
    size_t n_capture, device_cap = 0, host_cap = 0;
    const int64_t *capture = config_int_list(cfg, "capture_hidden_states", &n_capture);
    *out = (model_run){0};
    st_status st = model_config_from(cfg, &mc);
    if (!st) st = ckpt_settings_from(cfg, &cs);
    if (!st) st = config_bytes(cfg, "device_memory", &device_cap);
    if (!st) st = config_bytes(cfg, "host_memory", &host_cap);
    if (st) return st;
    /* dry pools have no budget: a plan reports the peak, whatever it is, and the caller compares */
    if (allocate) {
        st = ops_device_pool_create(device_cap, &out->device);
        if (!st) st = ops_host_pool_create(host_cap, &out->host);
    } else if (!(out->device = pool_create_dry(POOL_DEVICE, 0)) || !(out->host = pool_create_dry(POOL_HOST, 0)))
        st = st_host_oom("the pools");
    out->cs = cs;
    if (!st && !(out->cfg = config_copy(cfg))) st = st_host_oom("the run's config");
    if (!st) st = model_bucket_shapes(cfg, out->shape, &out->n_buckets);
    if (!st) st = model_create(&mc, out->device, &out->m);
    if (!st) st = model_set_checkpointing(out->m, &cs, capture, n_capture);
    if (!st) st = model_set_host_pool(out->m, out->host);
    out->bucket[0] = out->m; /* bucket_shapes' first: the model's own shape */
    for (int i = 1; !st && i < out->n_buckets; i++) {
        model **m = &out->bucket[i];
        st = model_config_at(cfg, &out->shape[i], &mc);
        if (!st) st = model_create_sharing(&mc, out->m, m);
        if (!st) st = model_set_checkpointing(*m, &cs, capture, n_capture);
        if (!st) st = model_set_host_pool(*m, out->host);
    }
    if (st) model_run_close(out);
    return st;
}

model_run model_run_at(const model_run *r, int i)
{
    model_run at = *r;
    if (r->n_buckets) at.m = r->bucket[i];
    return at;
}

size_t model_run_close(model_run *r)
{
    for (int i = r->n_buckets - 1; i > 0; i--) model_destroy(r->bucket[i]); /* before the weights they share */
    model_destroy(r->m);
    config_free(r->cfg);
    size_t leaks = 0;
    if (r->device) leaks += pool_destroy(r->device);
    if (r->host) leaks += pool_destroy(r->host);
    *r = (model_run){0};
    return leaks;
}
