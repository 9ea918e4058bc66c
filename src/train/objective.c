/* The rectified-flow objective (../shared/spec/dit.md): x_t = (1 - t) x0 + t e, the model sees x_t, timestep
 * 1000 t and the conditioning, and regresses the velocity e - x0 with a mean squared error (each sample's weighted,
 * for EDM: objective.h). */
#include "segtrain/objective.h"

#include <math.h>
#include <string.h>

#include "segtrain/ops.h"

#define EDM_SIGMA_MIN 0.002
#define EDM_SIGMA_MAX 80.0

bool objective_edm(const model_config *mc) { return model_edm(mc); }

bool objective_upstream_epsilon(const model_config *mc) { return model_upstream_epsilon(mc); }

float edm_t(double z)
{
    const double sigma = fmin(fmax(exp(z), EDM_SIGMA_MIN), EDM_SIGMA_MAX);
    return (float)(sigma / (sigma + 1.0));
}

float objective_weight(const model_config *mc, float t)
{
    return objective_edm(mc) ? (1.0f - t) * (1.0f - t) + t * t : 1.0f;
}

/* The mean squared error over each sample's first `used` of its `per` floats (model_loss_numel: all but LTX-2's
 * audio latents, masked out as SimpleTuner masks a batch without audio), and its gradient. */
static float loss_forward(const float *pred, const float *target, const float *weight, int64_t batch, int64_t per,
                          int64_t used)
{
    if (used == per) return mse_forward(pred, target, weight, batch, per);
    double sum = 0;
    for (int64_t i = 0; i < batch; i++)
        sum += mse_forward(pred + i * per, target + i * per, weight ? weight + i : NULL, 1, used);
    return (float)(sum / (double)batch);
}

static void loss_backward(float *dpred, const float *pred, const float *target, const float *weight, int64_t batch,
                          int64_t per, int64_t used, float scale)
{
    if (used == per) {
        mse_backward(dpred, pred, target, weight, batch, per, scale);
        return;
    }
    for (int64_t i = 0; i < batch; i++)
        mse_backward(dpred + i * per, pred + i * per, target + i * per, weight ? weight + i : NULL, 1, used,
                     scale / (float)batch);
}

st_status drift_from_config(const config *cfg, const model_config *mc, drift_config *out, bool *on)
{
    *on = !strcmp(config_string(cfg, "distillation_method"), "h3_drift");
    if (!*on) return ST_OK;
    if (!model_drift(mc) || !mc->lora_rank)
        return st_fail(ST_ERR_INVALID, "distillation_method h3_drift: it regularises MiniMax-H3's LoRA training "
                       "against the frozen base, and this is %s%s", *mc->preset ? mc->preset : mc->family,
                       mc->lora_rank ? "" : " without LoRA (model_type lora, as SimpleTuner requires)");
    *out = (drift_config){.sft_weight = config_float(cfg, "distillation_config.sft_loss_weight"),
                          .weight = config_float(cfg, "distillation_config.loss_weight")};
    if (config_float(cfg, "distillation_config.video_weight") <= 0.0)
        return st_fail(ST_ERR_INVALID, "distillation_config.video_weight: %g; h3_drift's video term is segtrain's "
                       "whole drift term (no audio rows), so it takes a positive weight",
                       config_float(cfg, "distillation_config.video_weight"));
    return ST_OK;
}

/* The frozen base's prediction at the step's inputs: every adapter off, no gradient, released at once */
static st_status drift_reference(model *m, const flow_batch *b, const float *xt, const float *timesteps, int64_t n,
                                 float **ref)
{
    param_set *ps = model_params(m);
    st_status st = pool_alloc(ps->pool, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "h3_drift.reference", (void **)ref);
    if (st) return st;
    const float *pred;
    ps->adapters_off = true;
    st = model_forward(m, xt, timesteps, b->cond, b->batch, false, &pred);
    ps->adapters_off = false;
    if (st) return st;
    if (!pool_is_dry_ptr(*ref)) memcpy(*ref, pred, (size_t)n * sizeof(float));
    model_release(m);
    return ST_OK;
}

st_status flow_loss(model *m, const flow_batch *b, bool backward, float *loss)
{
    if (b->meanflow) return meanflow_loss(m, b, backward, loss);
    const model_config *c = model_get_config(m);
    if (model_tokens(c)) return token_loss(m, b, backward, loss);
    st_status st = model_check_batch(m, b->batch); /* bounds the products below */
    if (st) return st;
    const int64_t per = model_sample_numel(c), used = model_loss_numel(c), n = b->batch * per;
    pool *p = model_params(m)->pool;
    float *xt = NULL, *target = NULL, *timesteps = NULL, *weight = NULL, *dpred = NULL, *ref = NULL;
    st = pool_alloc(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "flow.x_t", (void **)&xt);
    if (!st) st = pool_alloc(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "flow.target", (void **)&target);
    if (!st) st = pool_alloc(p, (size_t)b->batch * sizeof(float), MEM_ACTIVATIONS, "flow.timesteps", (void **)&timesteps);
    if (!st && objective_edm(c))
        st = pool_alloc(p, (size_t)b->batch * sizeof(float), MEM_ACTIVATIONS, "flow.weight", (void **)&weight);
    if (!st) {
        flow_interpolate(xt, target, timesteps, b->x0, b->noise, b->t, b->batch, per);
        for (int64_t i = 0; weight && !pool_is_dry_ptr(weight) && i < b->batch; i++)
            weight[i] = objective_weight(c, b->t[i]);
        if (b->drift && b->drift->weight != 0.0) st = drift_reference(m, b, xt, timesteps, n, &ref);
        const float *pred;
        if (!st) st = model_forward(m, xt, timesteps, b->cond, b->batch, backward, &pred);
        if (!st) {
            *loss = loss_forward(pred, target, weight, b->batch, per, used);
            if (b->drift) /* sft_weight x the flow loss + weight x the distance from the base */
                *loss = (float)(b->drift->sft_weight * *loss +
                                (ref ? b->drift->weight * loss_forward(pred, ref, NULL, b->batch, per, used) : 0.0));
            if (backward) {
                const float scale = b->grad_scale ? b->grad_scale : 1.0f;
                st = pool_alloc_zero(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "flow.dpred", (void **)&dpred);
                if (!st)
                    loss_backward(dpred, pred, target, weight, b->batch, per, used,
                                  b->drift ? scale * (float)b->drift->sft_weight : scale);
                if (!st && ref)
                    loss_backward(dpred, pred, ref, NULL, b->batch, per, used, scale * (float)b->drift->weight);
                if (!st) st = model_backward(m, dpred);
            }
            model_release(m);
        }
    }
    pool_free(p, dpred);
    pool_free(p, ref);
    pool_free(p, weight);
    pool_free(p, timesteps);
    pool_free(p, target);
    pool_free(p, xt);
    return st;
}
