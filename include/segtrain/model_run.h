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
    model *m;
    pool *device, *host; /* dry pools when not allocated */
    ckpt_settings cs;    /* what the model is planned by, as ckpt_settings_from read the config */
    config *cfg;         /* a copy of the config it was opened from, for what a step reads besides the model */
} model_run;

/* The model of a run configuration, planned by its checkpointing keys; with allocate, in new device and host
 * pools budgeted by device_memory and host_memory, else in dry pools without a budget (pool.h): its memory is
 * accounted, nothing is allocated, and a step run on it (flow_step_dry) predicts a real one's peaks, however
 * large the model. (ckpt_settings_warn says when the config's checkpointing keys do nothing.) */
st_status model_run_open(const config *cfg, bool allocate, model_run *out);
/* Destroys the model and its pools; returns the number of leaked allocations (0). */
size_t model_run_close(model_run *r);

#endif
