/* The rectified-flow objective (../shared/spec/dit.md): x_t = (1 - t) x0 + t e, the model sees x_t, timestep
 * 1000 t and the conditioning, and regresses the velocity e - x0 with a mean squared error. */
#include "segtrain/objective.h"

#include "segtrain/ops.h"

st_status flow_loss(model *m, const flow_batch *b, bool backward, float *loss)
{
    const model_config *c = model_get_config(m);
    st_status st = model_check_batch(m, b->batch); /* bounds the products below */
    if (st) return st;
    const int64_t per = c->channels * c->resolution * c->resolution, n = b->batch * per;
    pool *p = model_params(m)->pool;
    float *xt = NULL, *target = NULL, *timesteps = NULL, *dpred = NULL;
    st = pool_alloc(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "flow.x_t", (void **)&xt);
    if (!st) st = pool_alloc(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "flow.target", (void **)&target);
    if (!st) st = pool_alloc(p, (size_t)b->batch * sizeof(float), MEM_ACTIVATIONS, "flow.timesteps", (void **)&timesteps);
    if (!st) {
        flow_interpolate(xt, target, timesteps, b->x0, b->noise, b->t, b->batch, per);
        const float *pred;
        st = model_forward(m, xt, timesteps, b->cond, b->batch, backward, &pred);
        if (!st) {
            *loss = mse_forward(pred, target, n);
            if (backward) {
                st = pool_alloc_zero(p, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "flow.dpred", (void **)&dpred);
                if (!st) mse_backward(dpred, pred, target, n, b->grad_scale ? b->grad_scale : 1.0f);
                if (!st) st = model_backward(m, dpred);
            }
            model_release(m);
        }
    }
    pool_free(p, dpred);
    pool_free(p, timesteps);
    pool_free(p, target);
    pool_free(p, xt);
    return st;
}

void flow_loss_simulate(model *m, int64_t batch, mem_sim *sim, mem_sim *host)
{
    const model_config *c = model_get_config(m);
    const size_t n = (size_t)(batch * c->channels * c->resolution * c->resolution) * sizeof(float);
    sim_take(sim, MEM_ACTIVATIONS, 2 * n + (size_t)batch * sizeof(float)); /* x_t, target, timesteps */
    model_simulate_forward(m, batch, sim, host);
    sim_take(sim, MEM_ACTIVATIONS, n); /* dpred */
    model_simulate_backward(m, batch, sim, host);
    sim_drop(sim, MEM_ACTIVATIONS, 3 * n + (size_t)batch * sizeof(float));
}

st_status flow_step_simulate(model *m, int64_t batch, size_t optimizer_bytes, mem_sim *device, mem_sim *host)
{
    st_status st = model_check_batch(m, batch);
    if (st) return st;
    const param_set *ps = model_params(m);
    const model_config *c = model_get_config(m);
    const size_t n = (size_t)(batch * c->channels * c->resolution * c->resolution);
    sim_take(device, MEM_WEIGHTS, (size_t)ps->weight_count * sizeof(float));
    sim_take(device, MEM_GRADIENTS, (size_t)ps->grad_count * sizeof(float));
    if (optimizer_bytes) sim_take(device, MEM_OPTIMIZER, optimizer_bytes);
    const size_t cond = (size_t)model_cond_len(c) * sizeof(int64_t);
    sim_take(device, MEM_ACTIVATIONS, 2 * n * sizeof(float) + (size_t)batch * (sizeof(float) + cond));
    flow_loss_simulate(m, batch, device, host);
    return ST_OK;
}
