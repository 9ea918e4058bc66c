/* Optimizers over the trainable parameters of a param_set: AdamW and Lion with torch's update formulas, a
 * learning-rate schedule (linear warm-up, then constant or cosine decay, as diffusers'), gradient clipping by the
 * global norm (as torch.nn.utils.clip_grad_norm_), and the optimizer state as named float buffers for checkpoints.
 *
 * State lives in the param_set's pool, tagged MEM_OPTIMIZER, one allocation per moment over all trainable floats
 * in the order of the gradient block (ps->grads): element i of "optimizer.m" belongs to ps->grads[i]. Every update
 * is element-wise and the norm is summed in fixed chunks in order, so results do not depend on the thread count.
 *
 * A training step: accumulate gradients, optim_clip (logs the norm; stop on a non-finite one), optim_step, zero the
 * gradients. */
#ifndef SEGTRAIN_OPTIM_H
#define SEGTRAIN_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segtrain/params.h"

typedef enum optim_kind { OPTIM_ADAMW, OPTIM_LION } optim_kind;

/* After the warm-up, as diffusers' schedules of the same names (the config's lr_scheduler). */
typedef enum optim_schedule {
    SCHED_CONSTANT,
    SCHED_LINEAR,              /* to 0 at total_steps */
    SCHED_COSINE,              /* half a cosine wave to 0 at total_steps */
    SCHED_COSINE_WITH_RESTARTS, /* `cycles` waves, each from lr to 0 */
    SCHED_POLYNOMIAL           /* from lr to lr_end with power `power` */
} optim_schedule;

typedef struct optim_settings {
    optim_kind kind;
    double lr;            /* peak learning rate, reached at the end of the warm-up */
    double beta1, beta2;  /* AdamW: moment decays. Lion: interpolation (beta1) and momentum (beta2) decays */
    double eps;           /* AdamW's denominator epsilon; unused by Lion */
    double weight_decay;  /* decoupled: w *= 1 - lr * weight_decay before the update */
    double max_grad_norm; /* optim_clip's threshold; 0 or negative disables clipping */
    bool clip_by_value;   /* clamp each element to +-max_grad_norm (SimpleTuner's default) instead of the norm */
    int64_t warmup_steps; /* linear warm-up from 0 to lr over this many steps */
    int64_t total_steps;  /* where the decaying schedules end (max_train_steps) */
    optim_schedule schedule;
    double lr_end, power; /* SCHED_POLYNOMIAL: the final rate (below lr) and the power */
    int64_t cycles;       /* SCHED_COSINE_WITH_RESTARTS: waves (>= 1) */
} optim_settings;

typedef struct optimizer optimizer;

/* Settings with torch's defaults for `kind` (AdamW: lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 1e-2;
 * Lion: lr 1e-4, betas 0.9/0.99, weight decay 0), no clipping, no warm-up, constant schedule. */
optim_settings optim_defaults(optim_kind kind);

/* The schedule of a config's lr_scheduler value ("constant", "linear", "cosine", "cosine_with_restarts",
 * "polynomial"; the config has validated it). */
optim_schedule optim_schedule_named(const char *name);

/* "adamw" or "lion" (the config's `optimizer` values; for checkpoint metadata). */
const char *optim_kind_name(optim_kind kind);

/* Bytes of optimizer state for `grad_count` trainable floats: moments * grad_count * 4 (AdamW 2, Lion 1). The
 * planner adds this as MEM_OPTIMIZER; optim_create allocates exactly this. */
size_t optim_state_bytes(optim_kind kind, int64_t grad_count);

/* The learning rate of the update that follows `step` completed updates (step 0 is the first update), as
 * diffusers' get_*_schedule_with_warmup driven by LambdaLR: step < warmup: lr * step / max(1, warmup), so the
 * first update of a warm-up uses 0; then, with p = (step - warmup) / max(1, total - warmup): lr (constant),
 * lr * max(0, 1 - p) (linear), lr * 0.5 * (1 + cos(pi * p)) (cosine), 0 from p >= 1 else
 * lr * 0.5 * (1 + cos(pi * ((cycles * p) mod 1))) (cosine_with_restarts), (lr - lr_end) * (1 - p)^power + lr_end,
 * lr_end from p >= 1 (polynomial). Unlike diffusers, the cosine's p is capped at 1, so it stays at 0 after
 * total_steps instead of rising again. */
double optim_lr_at(const optim_settings *s, int64_t step);

/* Validates the settings (ST_ERR_INVALID naming the bad one), then allocates zeroed state from ps->pool (ps must
 * be allocated and have trainable parameters). On failure *out is NULL, nothing stays allocated and the status
 * is the pool's (ST_ERR_OOM, ...). `ps` must outlive the optimizer. */
st_status optim_create(param_set *ps, const optim_settings *s, optimizer **out);

/* ZeRO-1: an optimizer of the trainable floats first .. first + count - 1 of the gradient block alone (a
 * data-parallel rank's shard): its state holds count floats a moment, optim_sum_squares and optim_clip_by see
 * only those gradients, optim_step updates only those weights, and optim_state_restore takes its part of a whole
 * state. optim_create is the shard of the whole block. */
st_status optim_create_shard(param_set *ps, const optim_settings *s, int64_t first, int64_t count, optimizer **out);
int64_t optim_shard_first(const optimizer *o);
/* The sum of squares of the shard's gradients (in double, in fixed chunks in order), and the clipping optim_clip
 * does, by a norm given (a sharded run's global norm). */
double optim_sum_squares(optimizer *o);
void optim_clip_by(optimizer *o, double norm);
/* Frees the state back to the pool. NULL is a no-op. */
void optim_destroy(optimizer *o);

const optim_settings *optim_get_settings(const optimizer *o);

/* The global L2 norm of all trainable gradients (in double), and when max_grad_norm > 0 clips: with
 * clip_by_value, clamps every element to [-max_grad_norm, max_grad_norm] (torch's clip_grad_value_); else, when
 * max_grad_norm / (norm + 1e-6) < 1, scales every gradient by that factor (torch's clip_grad_norm_). Returns the
 * norm before clipping, computed and returned even when clipping is disabled. A non-finite norm (a NaN or inf
 * gradient) is returned as is and the gradients are left untouched: the caller must stop or skip the step. */
double optim_clip(optimizer *o);

/* Applies one update to every trainable weight with lr = optim_lr_at(settings, steps taken) and counts the step
 * (AdamW's bias corrections use the new count, as torch). Frozen weights are never touched. *lr_used (may be
 * NULL) receives the rate used. */
st_status optim_step(optimizer *o, double *lr_used);

/* Completed updates so far (torch's `step` in the state, diffusers' scheduler position). */
int64_t optim_steps_taken(const optimizer *o);

/* Sets the completed-update count when resuming a checkpoint. Negative counts are ST_ERR_FORMAT. */
st_status optim_set_steps(optimizer *o, int64_t steps);

/* The state as named float buffers for the checkpoint writer: AdamW "optimizer.m", "optimizer.v"; Lion
 * "optimizer.m". Each holds optim_state_size() floats (grad_count; a shard's count), 1-D, in the gradient
 * block's order.
 * optim_state_data returns the live buffer (write it only through optim_state_restore to get checks). */
int optim_state_count(const optimizer *o);
const char *optim_state_name(const optimizer *o, int i);
float *optim_state_data(optimizer *o, int i);
int64_t optim_state_size(const optimizer *o, int i);

/* Copies a whole state buffer called `name` (n = grad_count floats; a shard keeps its part). An unknown name
 * (e.g. "optimizer.v" into Lion) or another size is ST_ERR_FORMAT with a line naming the buffer and both sizes;
 * the state is then unchanged. */
st_status optim_state_restore(optimizer *o, const char *name, const float *data, int64_t n);

#endif
