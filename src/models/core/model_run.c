/* A model from a run configuration, with its pools (model_run.h). */
#include "segtrain/model_run.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each bucket's settings (ckpt_settings_of_bucket) into r->bucket_cs; without buckets, only the check that
 * gradient_checkpointing_bucket_plans names none. */
static st_status bucket_settings(const config *cfg, model_run *r)
{
    char names[MODEL_SHAPES_MAX][48];
    const char *list[MODEL_SHAPES_MAX];
    for (int i = 0; i < r->n_buckets; i++) bucket_shape_name(&r->shape[i], names[i], sizeof names[i]), list[i] = names[i];
    if (!r->n_buckets) {
        ckpt_settings unused;
        return ckpt_settings_of_bucket(cfg, &r->cs, list, 0, -1, &unused);
    }
    if (!(r->bucket_cs = calloc((size_t)r->n_buckets, sizeof *r->bucket_cs))) return st_host_oom("the buckets' plans");
    st_status st = ST_OK;
    for (int i = 0; !st && i < r->n_buckets; i++)
        st = ckpt_settings_of_bucket(cfg, &r->cs, list, r->n_buckets, i, &r->bucket_cs[i]);
    return st;
}

/* Plans bucket i's model (the run's one model without buckets) by its settings; a refusal of a bucket's own plan
 * names the key and the bucket. */
static st_status plan_bucket(model_run *r, int i, const int64_t *capture, size_t n_capture)
{
    const model_run at = model_run_at(r, i);
    st_status st = model_set_checkpointing(at.m, &at.cs, capture, n_capture);
    if (!st || !r->n_buckets || (at.cs.enabled == r->cs.enabled && !strcmp(at.cs.plan, r->cs.plan))) return st;
    char name[48], why[1024];
    bucket_shape_name(&r->shape[i], name, sizeof name);
    snprintf(why, sizeof why, "%s", st_error());
    return st_fail(st, "gradient_checkpointing_bucket_plans: %s: %s", name, why);
}

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
    if (!st) st = bucket_settings(cfg, out);
    if (!st) st = model_create(&mc, out->device, &out->m);
    out->bucket[0] = out->m; /* bucket_shapes' first: the model's own shape */
    if (!st) st = plan_bucket(out, 0, capture, n_capture);
    if (!st) st = model_set_host_pool(out->m, out->host);
    if (!st && !allocate) st = model_spill_weights(out->m); /* a real run's, once its weights are loaded */
    for (int i = 1; !st && i < out->n_buckets; i++) {
        model **m = &out->bucket[i];
        st = model_config_at(cfg, &out->shape[i], &mc);
        if (!st) st = model_create_sharing(&mc, out->m, m);
        if (!st) st = plan_bucket(out, i, capture, n_capture);
        if (!st) st = model_set_host_pool(*m, out->host);
    }
    if (st) model_run_close(out);
    return st;
}

model_run model_run_at(const model_run *r, int i)
{
    model_run at = *r;
    if (r->n_buckets) at.m = r->bucket[i], at.cs = r->bucket_cs[i];
    return at;
}

size_t model_run_close(model_run *r)
{
    for (int i = r->n_buckets - 1; i > 0; i--) model_destroy(r->bucket[i]); /* before the weights they share */
    model_destroy(r->m);
    free(r->bucket_cs);
    config_free(r->cfg);
    size_t leaks = 0;
    if (r->device) leaks += pool_destroy(r->device);
    if (r->host) leaks += pool_destroy(r->host);
    *r = (model_run){0};
    return leaks;
}
