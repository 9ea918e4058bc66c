/* Training objectives. */
#ifndef SEGTRAIN_OBJECTIVE_H
#define SEGTRAIN_OBJECTIVE_H

#include "segtrain/model.h"

/* One batch for the rectified-flow objective: data x0 and noise (batch, C, H, W), t in (0, 1) and the
 * conditioning (batch x model_cond_len ids: labels, or caption tokens). */
typedef struct flow_batch {
    int64_t batch;
    const float *x0, *noise, *t;
    const int64_t *cond;
    float grad_scale; /* the loss's gradient is scaled by this (1/micro-batches when accumulating); 0 means 1 */
} flow_batch;

/* Computes the loss of the batch and, with backward, accumulates every trainable gradient. */
st_status flow_loss(model *m, const flow_batch *b, bool backward, float *loss);

/* Replays flow_loss's allocations (with backward) for a batch of the given size into memory simulations of the
 * device and host pools: with the resident bytes already taken, their peaks are the step's predicted peaks. The
 * batch must have passed model_check_batch. */
void flow_loss_simulate(model *m, int64_t batch, mem_sim *device, mem_sim *host);
/* A whole step as the plan sees it: weights, gradients, optimizer state and the batch (x0, noise, t and the conditioning
 * in the device pool) resident, then flow_loss. Refuses (model_check_batch) a batch whose sizes would overflow. */
st_status flow_step_simulate(model *m, int64_t batch, size_t optimizer_bytes, mem_sim *device, mem_sim *host);

#endif
