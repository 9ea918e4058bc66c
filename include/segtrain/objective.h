/* Training objectives. */
#ifndef SEGTRAIN_OBJECTIVE_H
#define SEGTRAIN_OBJECTIVE_H

#include "segtrain/model.h"
#include "segtrain/model_run.h"

/* AnyFlow's forward MeanFlow stage (SimpleTuner's distillation_method "anyflow"; docs/OBJECTIVES.md), the
 * distillation_config keys it reads. */
typedef struct meanflow_config {
    double diffusion_ratio, consistency_ratio; /* a batch's first round(ratio B) samples are diffusion intervals (r =
                                                  t), the next consistency intervals (r = 0), the rest arbitrary */
    double epsilon;   /* central_difference_epsilon */
    bool clamp;       /* central_difference_boundary_mode "clamp" */
    double guidance;  /* fuse_guidance_scale */
    bool beta08;      /* meanflow_weight_type "beta08", else "uniform" */
    bool adaptive;    /* meanflow_adaptive_weighting */
    double max_sigma; /* meanflow_non_diffusion_max_sigma */
    double shift;     /* schedule_shift */
    double loss_weight;
} meanflow_config;

/* *on: whether cfg asks for AnyFlow's objective, then its settings in *out. */
st_status meanflow_from_config(const config *cfg, meanflow_config *out, bool *on);
/* Each sample's sigmas t >= r of a batch from its two uniforms u1, u2 (by its index's interval kind), as
 * SimpleTuner's AnyFlow draws them: the larger and the smaller, scaled for the non-diffusion intervals, r = t or
 * 0 by kind, both shifted. t and r may be u1 and u2 themselves. */
void meanflow_times(const meanflow_config *c, int64_t batch, const float *u1, const float *u2, float *t, float *r);

/* SimpleTuner's h3_drift (docs/OBJECTIVES.md): MiniMax-H3's LoRA training held near the frozen base. The loss is
 * sft_weight x the flow loss + weight x the mean squared distance of the prediction from the base's (the same inputs,
 * every adapter off, no gradient); over video rows alone its token or modality balance and its modality weights give
 * that mean. */
typedef struct drift_config {
    double sft_weight, weight;
} drift_config;
/* *on: whether cfg asks for it, then its settings in *out; refused, as SimpleTuner refuses it, but for MiniMax-H3
 * under LoRA. */
st_status drift_from_config(const config *cfg, const model_config *mc, drift_config *out, bool *on);

/* One batch for the rectified-flow objective: data x0 and noise (batch, C, H, W), t in (0, 1) and the
 * conditioning (batch x model_cond_len floats: labels, or a text encoder's output). */
typedef struct flow_batch {
    int64_t batch;
    const float *x0, *noise, *t;
    const float *cond;
    float grad_scale; /* the loss's gradient is scaled by this (1/micro-batches when accumulating); 0 means 1 */
    /* AnyFlow's objective instead (NULL: the rectified flow's): r (batch) the intervals' other ends, null_cond the
     * empty prompt's conditioning per sample, for its unconditional pass (fuse_guidance_scale != 1) */
    const meanflow_config *meanflow;
    const float *r, *null_cond;
    const drift_config *drift; /* h3_drift's (NULL: none) */
} flow_batch;

/* Whether the family trains with Cosmos 2's EDM objective (SimpleTuner's cosmos2image): x_t = x0 + sigma e, log sigma
 * ~ N(0, 1) clamped to [0.002, 80], the model fed x_t / (sigma + 1) and sigma / (sigma + 1), its output r giving
 * x0_pred = (x_t - sigma r) / (sigma + 1), and the loss mean((sigma^2 + 1) / sigma^2 (x0_pred - x0)^2). With t =
 * sigma / (sigma + 1) that is the rectified flow's input, time and velocity target exactly, each sample's squared
 * error weighted by (sigma^2 + 1) / (sigma + 1)^2 = (1 - t)^2 + t^2: flow_loss applies that weight for such a model,
 * and the trainer draws t with edm_t. */
bool objective_edm(const model_config *mc);
/* Whether SimpleTuner trains the family as DDPM epsilon-prediction (sd1x, sdxl, kolors, pixart_sigma,
 * stable_cascade): their checkpoints predict noise, and segtrain trains them with the rectified flow like every other
 * family, so fine-tuning one of their checkpoints here retrains what it predicts (the trainer warns). */
bool objective_upstream_epsilon(const model_config *mc);
/* EDM's t = sigma / (sigma + 1) for a standard normal draw z = log sigma. */
float edm_t(double z);
/* A sample's loss weight at t: 1, or EDM's (1 - t)^2 + t^2. */
float objective_weight(const model_config *mc, float t);

/* SimpleTuner's autoregressive token loss (HeartMuLa._autoregressive_token_loss; docs/OBJECTIVES.md), for a token
 * model (model_tokens): the batch's x0 is its tokens and cond their masks (model.h), noise and t unread. Each row t <
 * frames - 1 of a sample predicts row t + 1's K codebooks: loss = sum over those rows of m (CE of codebook 0) / n +
 * sum of m (CE of codebooks 1 .. K-1) / (n (K - 1)), m row t + 1's audio frame mask, n the batch's count of them (at
 * least 1). flow_loss calls it for such a model. */
st_status token_loss(model *m, const flow_batch *b, bool backward, float *loss);

/* Computes the loss of the batch and, with backward, accumulates every trainable gradient (b->meanflow: by
 * meanflow_loss; b->drift: the base's prediction first, from a no-gradient forward released before the step's own,
 * which SimpleTuner runs after it: the same loss, a lower peak). */
st_status flow_loss(model *m, const flow_batch *b, bool backward, float *loss);
/* AnyFlow's loss at (t, r): the target from two no-gradient forwards at t +- epsilon (the derivative of the model's
 * prediction in t, over g), the prediction fused with an unconditional no-gradient forward, each sample's squared
 * error weighted and adaptively scaled. */
st_status meanflow_loss(model *m, const flow_batch *b, bool backward, float *loss);

/* A whole training step predicted by running it dry: the model of r on dry pools (model_run_open without
 * allocate), plus what the trainer holds besides the model, set up by the trainer's own code (src/train/setup.h): the
 * optimizer's state (of the rank of `ranks` data-parallel ranks that keeps the most, with zero_stage 1; 0 ranks: no
 * optimizer, a gradient alone) with use_ema's average, and the batch (x0, noise, t and the conditioning; AnyFlow's r
 * and empty prompt too), then flow_loss's forward and backward (the objective of r's config, h3_drift's reference
 * forward included). *device and *host are the pools' stats over the step: their peaks are the step's peaks, to the
 * byte, with whatever the caller left live in the pools. Refuses (model_check_batch) a batch whose sizes would
 * overflow. */
st_status flow_step_dry(model_run *r, int64_t batch, int ranks, pool_stats *device, pool_stats *host);
/* flow_step_dry at each bucket of r (model_run_at; r's one model without bucket_shapes): device[i] and host[i] are
 * bucket i's (arrays of MODEL_SHAPES_MAX), *largest the bucket of the largest device peak, the run's. */
st_status flow_step_dry_buckets(model_run *r, int64_t batch, int ranks, pool_stats *device, pool_stats *host,
                                int *largest);

#endif
