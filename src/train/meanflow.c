/* AnyFlow's forward MeanFlow stage (objective.h; docs/OBJECTIVES.md), as SimpleTuner's AnyFlowDistiller computes
 * it: a sample's interval (t, r) by the kind its index gives it, x_t = (1 - t) x0 + t e, the model at (x_t, t, r),
 * and the regression target
 *
 *   target = (e - x0) - (t - r) [u(x_{t+eps}, t + eps, r) - u(x_{t-eps}, t - eps, r)] / (2 eps g)
 *
 * from two no-gradient forwards of the model itself, against the guidance-fused prediction (u - (1 - g) u_uncond) / g
 * whose unconditional u reads the empty prompt (a third no-gradient forward, when g != 1). Each sample's mean squared
 * error is weighted by t sqrt(1 - t) (normalised over the shifted 1000-step grid) and, when the batch has a
 * diffusion interval, a non-diffusion sample's is scaled to their mean (the scale not differentiated). Times are
 * given to the model as 1000 sigma, as SimpleTuner's num_train_timesteps. */
#include "segtrain/objective.h"

#include <math.h>
#include <string.h>

#include "segtrain/ops.h"

#define TIMESTEPS 1000.0
#define ADAPTIVE_EPS 1e-5

enum { DIFFUSION, CONSISTENCY, ARBITRARY };

static double shifted(double s, double u) { return s * u / (1.0 + (s - 1.0) * u); }
static double unshifted(double s, double v) { return v / (s + (1.0 - s) * v); }

/* By index: the first round(diffusion_ratio B) samples, then round(consistency_ratio B), as Python's round (ties to
 * even: nearbyint in the default rounding mode) counts them */
static int kind_of(const meanflow_config *c, int64_t batch, int64_t i)
{
    const double d = nearbyint(c->diffusion_ratio * (double)batch), k = nearbyint(c->consistency_ratio * (double)batch);
    return (double)i < d ? DIFFUSION : (double)i < d + k ? CONSISTENCY : ARBITRARY;
}

st_status meanflow_from_config(const config *cfg, meanflow_config *out, bool *on)
{
    *on = !strcmp(config_string(cfg, "distillation_method"), "anyflow");
    if (!*on) return ST_OK;
    *out = (meanflow_config){
        .diffusion_ratio = config_float(cfg, "distillation_config.diffusion_ratio"),
        .consistency_ratio = config_float(cfg, "distillation_config.consistency_ratio"),
        .epsilon = config_float(cfg, "distillation_config.central_difference_epsilon"),
        .clamp = !strcmp(config_string(cfg, "distillation_config.central_difference_boundary_mode"), "clamp"),
        .guidance = config_float(cfg, "distillation_config.fuse_guidance_scale"),
        .beta08 = !strcmp(config_string(cfg, "distillation_config.meanflow_weight_type"), "beta08"),
        .adaptive = config_bool(cfg, "distillation_config.meanflow_adaptive_weighting"),
        .max_sigma = config_float(cfg, "distillation_config.meanflow_non_diffusion_max_sigma"),
        .shift = config_float(cfg, "distillation_config.schedule_shift"),
        .loss_weight = config_float(cfg, "distillation_config.loss_weight")};
    if (out->diffusion_ratio + out->consistency_ratio > 1.0)
        return st_fail(ST_ERR_INVALID, "distillation_config: diffusion_ratio %g and consistency_ratio %g sum to more "
                       "than 1", out->diffusion_ratio, out->consistency_ratio);
    return ST_OK;
}

void meanflow_times(const meanflow_config *c, int64_t batch, const float *u1, const float *u2, float *t, float *r)
{
    const double top = c->max_sigma < 1.0 ? unshifted(c->shift, c->max_sigma) : 1.0;
    for (int64_t i = 0; i < batch; i++) {
        const int kind = kind_of(c, batch, i);
        double tb = fmax(u1[i], u2[i]), rb = fmin(u1[i], u2[i]);
        if (kind != DIFFUSION) tb *= top, rb *= top;
        rb = kind == DIFFUSION ? tb : kind == CONSISTENCY ? 0.0 : rb;
        t[i] = (float)shifted(c->shift, tb), r[i] = (float)shifted(c->shift, rb);
    }
}

/* beta08's normalisation: 1000 over the sum of s sqrt(1 - s) on the shifted grid 1, 0.999, ..., 0.001 */
static double beta08_norm(double shift)
{
    double sum = 0;
    for (int k = 0; k < (int)TIMESTEPS; k++) {
        const double s = shifted(shift, 1.0 - k / TIMESTEPS);
        sum += s * sqrt(fmax(1.0 - s, 0.0));
    }
    return TIMESTEPS / fmax(sum, 1e-30);
}

/* x = (1 - s_i) x0 + s_i e per sample, and the model's time 1000 s_i */
static void interpolate(float *x, float *ts, const float *x0, const float *e, const float *s, int64_t batch,
                        int64_t per)
{
    if (pool_is_dry_ptr(x)) return;
    for (int64_t i = 0; i < batch; i++) {
        ts[i] = (float)(s[i] * TIMESTEPS);
        for (int64_t j = i * per; j < (i + 1) * per; j++) x[j] = (1.0f - s[i]) * x0[j] + s[i] * e[j];
    }
}

st_status meanflow_loss(model *m, const flow_batch *b, bool backward, float *loss)
{
    const meanflow_config *mf = b->meanflow;
    const model_config *c = model_get_config(m);
    st_status st = model_check_batch(m, b->batch); /* bounds the products below */
    if (st) return st;
    const int64_t B = b->batch, per = model_sample_numel(c), n = B * per;
    const float g = (float)mf->guidance;
    if (g != 1.0f && !b->null_cond)
        return st_fail(ST_ERR_INTERNAL, "meanflow_loss: fuse_guidance_scale %g without the empty prompt", (double)g);
    pool *p = model_params(m)->pool;
    float *xt = NULL, *target = NULL, *ts = NULL, *rts = NULL, *sig = NULL, *xs = NULL, *uncond = NULL, *dpred = NULL;
    double *per_loss = NULL; /* per sample: the weighted squared error, its weight, its adaptive scale */
    const struct {
        float **buf;
        int64_t n;
        const char *what;
    } bufs[] = {{&xt, n, "meanflow.x_t"},         {&target, n, "meanflow.target"}, {&ts, B, "meanflow.timesteps"},
                {&rts, B, "meanflow.r_timesteps"}, {&sig, B, "meanflow.sigmas"},   {&xs, n, "meanflow.x_t+-eps"}};
    for (size_t k = 0; !st && k < sizeof bufs / sizeof *bufs; k++)
        st = pool_alloc(p, (size_t)bufs[k].n * sizeof(float), MEM_ACTIVATIONS, bufs[k].what, (void **)bufs[k].buf);
    const bool real = !st && !pool_is_dry_ptr(xt);
    for (int64_t i = 0; real && i < B; i++) rts[i] = (float)(b->r[i] * TIMESTEPS);
    if (!st) model_set_r_timesteps(m, rts);
    /* the derivative in t, accumulated into target: + the forward at t + eps, - the one at t - eps */
    for (int k = 0; !st && k < 2; k++) {
        for (int64_t i = 0; real && i < B; i++) {
            const float s = k ? b->t[i] - (float)mf->epsilon : b->t[i] + (float)mf->epsilon;
            sig[i] = mf->clamp ? fminf(fmaxf(s, 0.0f), 1.0f) : s;
        }
        interpolate(xs, ts, b->x0, b->noise, sig, B, per);
        const float *pred;
        if ((st = model_forward(m, xs, ts, b->cond, B, false, &pred))) break;
        if (real) {
            if (!k) memcpy(target, pred, (size_t)n * sizeof(float));
            else
                for (int64_t j = 0; j < n; j++) target[j] -= pred[j];
        }
        model_release(m);
    }
    if (!st && real) { /* target = (e - x0) - (t - r) (u+ - u-) / ((s+ - s-) g), s+ and s- per sample again */
        for (int64_t i = 0; i < B; i++) {
            float hi = b->t[i] + (float)mf->epsilon, lo = b->t[i] - (float)mf->epsilon;
            if (mf->clamp) hi = fminf(fmaxf(hi, 0.0f), 1.0f), lo = fminf(fmaxf(lo, 0.0f), 1.0f);
            const float den = (hi - lo) * g, interval = b->t[i] - b->r[i];
            for (int64_t j = i * per; j < (i + 1) * per; j++)
                target[j] = (b->noise[j] - b->x0[j]) - interval * (target[j] / den);
        }
    }
    pool_free(p, xs);
    xs = NULL;
    if (!st) interpolate(xt, ts, b->x0, b->noise, b->t, B, per);
    if (!st && g != 1.0f) { /* the unconditional prediction, before the training forward holds its activations */
        const float *pred;
        st = pool_alloc(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "meanflow.unconditional", (void **)&uncond);
        if (!st) st = model_forward(m, xt, ts, b->null_cond, B, false, &pred);
        if (!st) {
            if (real) memcpy(uncond, pred, (size_t)n * sizeof(float));
            model_release(m);
        }
    }
    const float *pred = NULL;
    if (!st) st = pool_alloc(p, (size_t)(3 * B) * sizeof(double), MEM_WORKSPACE, "meanflow.per_sample",
                             (void **)&per_loss);
    if (!st) st = model_forward(m, xt, ts, b->cond, B, backward, &pred);
    if (!st) {
        double *w = per_loss + B, *a = per_loss + 2 * B;
        const double norm = mf->beta08 ? beta08_norm(mf->shift) : 1.0;
        double diffusion_sum = 0, total = 0;
        int64_t diffusion = 0;
        for (int64_t i = 0; real && i < B; i++) {
            double sum = 0;
            for (int64_t j = i * per; j < (i + 1) * per; j++) {
                const float fused = g != 1.0f ? (pred[j] - (1.0f - g) * uncond[j]) / g : pred[j];
                const double d = (double)fused - target[j];
                sum += d * d;
            }
            const double t = b->t[i];
            w[i] = mf->beta08 ? t * sqrt(fmax(1.0 - t, 0.0)) * norm : 1.0;
            per_loss[i] = sum / (double)per * w[i], a[i] = 1.0;
            if (kind_of(mf, B, i) == DIFFUSION) diffusion_sum += per_loss[i], diffusion++;
        }
        for (int64_t i = 0; real && i < B; i++) {
            if (mf->adaptive && diffusion && kind_of(mf, B, i) != DIFFUSION)
                a[i] = diffusion_sum / (double)diffusion / (per_loss[i] + ADAPTIVE_EPS);
            total += per_loss[i] * a[i];
        }
        *loss = real ? (float)(total / (double)B * mf->loss_weight) : 0.0f;
        if (backward) {
            const float scale = b->grad_scale ? b->grad_scale : 1.0f;
            st = pool_alloc(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "meanflow.dpred", (void **)&dpred);
            for (int64_t i = 0; !st && real && i < B; i++) {
                const float k = (float)(2.0 * mf->loss_weight * w[i] * a[i] / ((double)B * (double)per)) * scale / g;
                for (int64_t j = i * per; j < (i + 1) * per; j++) {
                    const float fused = g != 1.0f ? (pred[j] - (1.0f - g) * uncond[j]) / g : pred[j];
                    dpred[j] = k * (fused - target[j]);
                }
            }
            if (!st) st = model_backward(m, dpred);
        }
        model_release(m);
    }
    model_set_r_timesteps(m, NULL);
    pool_free(p, per_loss), pool_free(p, dpred), pool_free(p, uncond), pool_free(p, sig), pool_free(p, rts), pool_free(p, ts);
    pool_free(p, target), pool_free(p, xt);
    return st;
}
