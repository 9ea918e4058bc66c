/* Training objectives. */
#ifndef SEGTRAIN_OBJECTIVE_H
#define SEGTRAIN_OBJECTIVE_H

#include "segtrain/model.h"
#include "segtrain/model_run.h"

/* One batch for the rectified-flow objective: data x0 and noise (batch, C, H, W), t in (0, 1) and the
 * conditioning (batch x model_cond_len floats: labels, or a text encoder's output). */
typedef struct flow_batch {
    int64_t batch;
    const float *x0, *noise, *t;
    const float *cond;
    float grad_scale; /* the loss's gradient is scaled by this (1/micro-batches when accumulating); 0 means 1 */
} flow_batch;

/* Whether the family trains with Cosmos 2's EDM objective (SimpleTuner's cosmos2image): x_t = x0 + sigma e, log sigma
 * ~ N(0, 1) clamped to [0.002, 80], the model fed x_t / (sigma + 1) and sigma / (sigma + 1), its output r giving
 * x0_pred = (x_t - sigma r) / (sigma + 1), and the loss mean((sigma^2 + 1) / sigma^2 (x0_pred - x0)^2). With t =
 * sigma / (sigma + 1) that is the rectified flow's input, time and velocity target exactly, each sample's squared
 * error weighted by (sigma^2 + 1) / (sigma + 1)^2 = (1 - t)^2 + t^2: flow_loss applies that weight for such a model,
 * and the trainer draws t with edm_t. */
bool objective_edm(const model_config *mc);
/* EDM's t = sigma / (sigma + 1) for a standard normal draw z = log sigma. */
float edm_t(double z);
/* A sample's loss weight at t: 1, or EDM's (1 - t)^2 + t^2. */
float objective_weight(const model_config *mc, float t);

/* Computes the loss of the batch and, with backward, accumulates every trainable gradient. */
st_status flow_loss(model *m, const flow_batch *b, bool backward, float *loss);

/* A whole training step predicted by running it dry: the model of r on dry pools (model_run_open without
 * allocate), plus the optimizer's state and the batch (x0, noise, t and the conditioning) as the trainer holds
 * them, then flow_loss's forward and backward. *device and *host are the pools' stats over the step: their peaks
 * are the step's peaks, to the byte. Refuses (model_check_batch) a batch whose sizes would overflow. */
st_status flow_step_dry(model_run *r, int64_t batch, size_t optimizer_bytes, pool_stats *device, pool_stats *host);

#endif
