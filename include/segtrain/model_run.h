/* A model built from a run configuration: its model keys, planned by its checkpointing keys, with the pools it
 * runs in. What every command that builds a model from a config shares (train, plan, the sweep, advise, ...). */
#ifndef SEGTRAIN_MODEL_RUN_H
#define SEGTRAIN_MODEL_RUN_H

#include <stdbool.h>

#include "segtrain/config.h"
#include "segtrain/model.h"
#include "segtrain/plan.h"
#include "segtrain/pool.h"

typedef struct model_run {
    model *m;            /* the model at the run's first shape */
    pool *device, *host; /* dry pools when not allocated */
    ckpt_settings cs;    /* what the model is planned by, as ckpt_settings_from read the config: the run's schedule */
    config *cfg;         /* a copy of the config it was opened from, for what a step reads besides the model */
    int n_buckets;       /* bucket_shapes' shapes; 0 when none is given (m is the run's one shape) */
    bucket_shape shape[MODEL_SHAPES_MAX];
    model *bucket[MODEL_SHAPES_MAX]; /* each shape's model: bucket[0] is m, the others share m's weights */
    ckpt_settings *bucket_cs; /* n_buckets of them: what each bucket's model is planned by (its own plan, from
                                 gradient_checkpointing_bucket_plans, or cs) */
} model_run;

/* The model of a run configuration, planned by its checkpointing keys; with allocate, in new device and host
 * pools budgeted by device_memory and host_memory, else in dry pools without a budget (pool.h): its memory is
 * accounted, nothing is allocated, and a step run on it (flow_step_dry) predicts a real one's peaks, however
 * large the model. With bucket_shapes, a model at each shape, all of them m's weights (model_create_sharing), each
 * planned by its own plan where gradient_checkpointing_bucket_plans gives one, else by the run's schedule: a run
 * over several shapes trains one set of weights, and holds every shape's grid tables.
 * (ckpt_settings_warn says when the config's checkpointing keys do nothing.) */
st_status model_run_open(const config *cfg, bool allocate, model_run *out);
/* The run as it steps at bucket i: the same pools and config, m that bucket's model and cs what it is planned by
 * (r itself without buckets). A view of r: close r, not it. */
model_run model_run_at(const model_run *r, int i);
/* Destroys the models and their pools; returns the number of leaked allocations (0). */
size_t model_run_close(model_run *r);

#endif
