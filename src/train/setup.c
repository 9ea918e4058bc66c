/* The step's set-up besides the model (setup.h), and the dry step that runs it with the model on dry pools. */
#include "setup.h"

#include <string.h>

#include "segtrain/dist.h"
#include "segtrain/objective.h"

st_status step_batch_open(pool *p, int64_t batch, int64_t sample_numel, int64_t cond_len, bool anyflow,
                          step_batch *b)
{
    *b = (step_batch){0};
    const size_t n = (size_t)(batch * sample_numel) * sizeof(float), nt = (size_t)batch * sizeof(float),
                 nc = (size_t)(batch * cond_len) * sizeof(float);
    st_status st = pool_alloc(p, n, MEM_ACTIVATIONS, "batch.x0", (void **)&b->x0);
    if (!st) st = pool_alloc(p, n, MEM_ACTIVATIONS, "batch.noise", (void **)&b->noise);
    if (!st) st = pool_alloc(p, nt, MEM_ACTIVATIONS, "batch.t", (void **)&b->t);
    if (!st) st = pool_alloc(p, nc, MEM_ACTIVATIONS, "batch.cond", (void **)&b->cond);
    if (!st && anyflow) st = pool_alloc(p, nt, MEM_ACTIVATIONS, "batch.r", (void **)&b->r);
    if (!st && anyflow) st = pool_alloc(p, nc, MEM_ACTIVATIONS, "batch.null_cond", (void **)&b->null_cond);
    if (st) step_batch_close(p, b);
    return st;
}

void step_batch_close(pool *p, step_batch *b)
{
    float *const last_first[] = {b->null_cond, b->r, b->cond, b->t, b->noise, b->x0};
    for (size_t i = 0; i < sizeof last_first / sizeof *last_first; i++) pool_free(p, last_first[i]);
    *b = (step_batch){0};
}

st_status step_optimizer_open(const config *c, param_set *ps, int64_t total_steps, int64_t first, int64_t count,
                              optimizer **opt, float **ema)
{
    *opt = NULL, *ema = NULL;
    optim_settings s = optim_defaults(strcmp(config_string(c, "optimizer"), "lion") ? OPTIM_ADAMW : OPTIM_LION);
    s.lr = config_float(c, "learning_rate");
    s.beta1 = config_float(c, "adam_beta1");
    s.beta2 = config_float(c, "adam_beta2");
    s.eps = config_float(c, "adam_epsilon");
    s.weight_decay = config_float(c, "adam_weight_decay");
    s.max_grad_norm = config_float(c, "max_grad_norm");
    s.clip_by_value = !strcmp(config_string(c, "grad_clip_method"), "value");
    s.warmup_steps = config_int(c, "lr_warmup_steps");
    s.total_steps = total_steps;
    s.schedule = optim_schedule_named(config_string(c, "lr_scheduler"));
    s.lr_end = config_float(c, "lr_end");
    s.power = config_float(c, "lr_power");
    s.cycles = config_int(c, "lr_num_cycles");
    st_status st = optim_create_shard(ps, &s, first, count, opt);
    if (!st && config_bool(c, "use_ema")) /* the whole average on every rank */
        st = pool_alloc(ps->pool, (size_t)ps->grad_count * sizeof(float), MEM_OPTIMIZER, "ema", (void **)ema);
    if (st) optim_destroy(*opt), *opt = NULL;
    return st;
}

void step_optimizer_share(const config *cfg, int64_t grad_count, int rank, int ranks, int64_t *first, int64_t *count)
{
    if (config_int(cfg, "zero_stage") == 1 && ranks > 1) dist_share_of(grad_count, rank, ranks, first, count);
    else *first = 0, *count = grad_count;
}

st_status step_comm_open(pool *host, int64_t grad_count, int ranks, float **comm)
{
    *comm = NULL;
    const int64_t floats = dist_scratch_floats_for(grad_count, ranks);
    return floats ? pool_alloc(host, (size_t)floats * sizeof(float), MEM_WORKSPACE, "dist.scratch", (void **)comm)
                  : ST_OK;
}

/* The optimizer as the trainer sets it up, for the rank of `ranks` that keeps the most state (none for 0 ranks) */
static st_status dry_optimizer(model_run *r, int ranks, optimizer **opt, float **ema)
{
    *opt = NULL, *ema = NULL;
    if (!ranks) return ST_OK;
    if (!r->cfg) return st_fail(ST_ERR_INTERNAL, "flow_step_dry: an optimizer without the run's config");
    param_set *ps = model_params(r->m);
    int64_t first, count;
    step_optimizer_share(r->cfg, ps->grad_count, dist_largest_share(ps->grad_count, ranks), ranks, &first, &count);
    return step_optimizer_open(r->cfg, ps, config_int(r->cfg, "max_train_steps"), first, count, opt, ema);
}

st_status flow_step_dry(model_run *r, int64_t batch, int ranks, pool_stats *device, pool_stats *host)
{
    if (!r->device || !pool_is_dry(r->device) || !pool_is_dry(r->host))
        return st_fail(ST_ERR_INTERNAL, "flow_step_dry: the model is not on dry pools");
    model *m = r->m;
    const model_config *c = model_get_config(m);
    st_status st = model_check_batch(m, batch); /* bounds the products below */
    if (st) return st;
    meanflow_config mf;
    drift_config drift;
    bool anyflow = false, drifts = false;
    if (r->cfg && (st = meanflow_from_config(r->cfg, &mf, &anyflow))) return st;
    if (r->cfg && (st = drift_from_config(r->cfg, c, &drift, &drifts))) return st;
    pool_reset_peak(r->device);
    pool_reset_peak(r->host);
    /* what a training step holds besides the model: the optimizer's state and the batch, set up as the trainer does */
    optimizer *opt;
    float *ema;
    step_batch b = {0};
    st = dry_optimizer(r, ranks, &opt, &ema);
    if (!st) st = step_batch_open(r->device, batch, model_sample_numel(c), model_cond_len(c), anyflow, &b);
    if (!st) {
        const flow_batch fb = {.batch = batch, .x0 = b.x0, .noise = b.noise, .t = b.t, .cond = b.cond,
                               .meanflow = anyflow ? &mf : NULL, .r = b.r, .null_cond = b.null_cond,
                               .drift = drifts ? &drift : NULL};
        float loss;
        st = flow_loss(m, &fb, true, &loss);
    }
    step_batch_close(r->device, &b);
    pool_free(r->device, ema);
    optim_destroy(opt);
    pool_get_stats(r->device, device);
    pool_get_stats(r->host, host);
    return st;
}

st_status flow_step_dry_buckets(model_run *r, int64_t batch, int ranks, pool_stats *device, pool_stats *host,
                                int *largest)
{
    st_status st = ST_OK;
    *largest = 0;
    for (int i = 0; !st && i < (r->n_buckets ? r->n_buckets : 1); i++) {
        model_run at = model_run_at(r, i);
        st = flow_step_dry(&at, batch, ranks, &device[i], &host[i]);
        if (!st && device[i].peak > device[*largest].peak) *largest = i;
    }
    return st;
}
