/* What a training step holds besides the model, internal to src/train: the optimizer's state with the EMA's average,
 * the batch's buffers and the data-parallel reduction's scratch. One code path sets them up for the trainer and for
 * the dry step that predicts its memory (flow_step_dry, train_plan), so that the prediction cannot drift from what
 * the trainer allocates. */
#ifndef SEGTRAIN_TRAIN_SETUP_H
#define SEGTRAIN_TRAIN_SETUP_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/config.h"
#include "segtrain/optim.h"
#include "segtrain/pool.h"

/* The batch, in the device pool: x0 and noise (batch x sample_numel), t, the conditioning (batch x cond_len), and
 * with AnyFlow its intervals' other ends r and the empty prompt's conditioning. Uninitialised. */
typedef struct step_batch {
    float *x0, *noise, *t, *cond, *r, *null_cond;
} step_batch;
st_status step_batch_open(pool *p, int64_t batch, int64_t sample_numel, int64_t cond_len, bool anyflow,
                          step_batch *b);
void step_batch_close(pool *p, step_batch *b);

/* The config's optimizer for gradients first .. first + count - 1 of ps (its state in ps's pool) and, with use_ema,
 * the average's buffer (*ema: grad_count floats in the same pool, unfilled; else NULL). */
st_status step_optimizer_open(const config *cfg, param_set *ps, int64_t total_steps, int64_t first, int64_t count,
                              optimizer **opt, float **ema);
/* The gradients whose state rank `rank` of `ranks` keeps: all of them, or with zero_stage 1 its share (ZeRO-1). */
void step_optimizer_share(const config *cfg, int64_t grad_count, int rank, int ranks, int64_t *first, int64_t *count);

/* The gradients' reduction scratch of a job of `ranks` (NULL for one), in the host pool: it lives as long as the
 * run, so a step's host peak holds it. */
st_status step_comm_open(pool *host, int64_t grad_count, int ranks, float **comm);

#endif
