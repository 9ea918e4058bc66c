/* The step's lifecycle, which the model owns for every family: a forward makes the step active (refused while the
 * previous one is not released), a failed forward and every backward release it, and model_release frees at once
 * what the step holds: the sequences' runs, the last output, the buffers the family took with model_hold, and
 * (through the family's release) the rest of its own. */
#include "models/core/internal.h"

#include <stdlib.h>

void model_release(model *m)
{
    model_step *s = &m->step;
    if (!s->active) return;
    for (int q = MODEL_SEQ_MAX - 1; q >= 0; q--) seq_release(s->run[q]);
    for (int g = 1; g <= m->params->n_swap; g++) param_swap_out(m->params, g); /* group offload's, a failed step's */
    state_free(m->pool, &s->last);
    for (int i = 0; i < s->n_held; i++) pool_free(m->pool, *s->held[i]), *s->held[i] = NULL;
    if (m->family->release) m->family->release(m);
    free(s->extra);
    *s = (model_step){0};
}

void model_set_batch(model *m, int64_t batch)
{
    if (m->family->set_batch) {
        m->family->set_batch(m, batch);
        return;
    }
    m->shape.batch = batch; /* every sequence's one state: its sample's floats, or the image tokens' */
    for (int q = 0; q < m->n_seq; q++)
        m->seq[q].state_numel[0] = batch * (m->seq_sample[q] ? m->seq_sample[q] : m->shape.tokens * m->shape.hidden);
}

static st_status chain_forward(model *m, const model_chain *c, const float *x, const float *timesteps,
                               const float *cond, bool train, const float **pred)
{
    float *x0 = NULL;
    st_status st = c->embed(m, x, timesteps, cond, train, &x0);
    if (!st) st = model_seq_forward1(m, 0, &x0, train, NULL);
    pool_free(m->pool, x0);
    if (!st && c->head) st = c->head(m, train, pred);
    else if (!st) { /* the final layer from the last state */
        final_layer *f = c->final(m);
        if (!(st = final_forward(m, f, m->step.last.t[0]))) *pred = f->pred;
    }
    return st;
}

/* Back through the final layer into a new dL/d(last), zeroed */
static st_status final_head_backward(model *m, const model_chain *c, const float *dpred, float **dx)
{
    st_status st = ST_OK;
    final_layer *f = c->final(m);
    *dx = model_take(m, &st, m->shape.batch * m->shape.tokens * m->shape.hidden, c->dx_name, true);
    if (!st) st = final_backward(m, f, m->step.last.t[0], dpred, *dx);
    final_backward_done(m, f);
    return st;
}

static st_status chain_backward(model *m, const model_chain *c, const float *dpred)
{
    scratch k = {.pool = m->pool};
    block_state grad = {.n = 1};
    st_status st = c->head_backward ? c->head_backward(m, dpred, &k, &grad.t[0]) : final_head_backward(m, c, dpred, &grad.t[0]);
    state_free(m->pool, &m->step.last);
    if (!st) st = model_seq_backward(m, 0, &grad);
    if (!st) st = c->embed_backward(m, &k, &grad);
    const st_status end = scratch_end(&k);
    state_free(m->pool, &grad);
    return st ? st : end;
}

st_status model_forward(model *m, const float *x, const float *timesteps, const float *cond, int64_t batch,
                        bool train, const float **pred)
{
    *pred = NULL;
    st_status st = model_check_batch(m, batch);
    if (st) return st;
    model_set_batch(m, batch);
    if (m->step.active) return st_fail(ST_ERR_INTERNAL, "model_forward: the previous forward was not released");
    m->step.active = true, m->step.train = train;
    const model_chain *c = m->family->chain;
    const int rest = m->params->step_group; /* group offload: the weights of no block group, for the step */
    if (rest) st = param_swap_in(m->params, rest, m->off.engine);
    if (st || (st = c ? chain_forward(m, c, x, timesteps, cond, train, pred)
                      : m->family->forward(m, x, timesteps, cond, train, pred)))
        model_release(m);
    return st;
}

st_status model_backward(model *m, const float *dpred)
{
    if (!m->step.active || !m->step.train)
        return st_fail(ST_ERR_INTERNAL, "model_backward: no training forward to go back through");
    const st_status st = m->family->chain ? chain_backward(m, m->family->chain, dpred) : m->family->backward(m, dpred);
    model_release(m);
    return st;
}

void model_hold(model *m, st_status *st, float **slot, int64_t floats, const char *what, bool zero)
{
    if (!*st && m->step.n_held == MODEL_STEP_HELD)
        *st = st_fail(ST_ERR_INTERNAL, "model_hold: more than %d buffers for '%s'", MODEL_STEP_HELD, what);
    *slot = model_take(m, st, floats, what, zero);
    if (*slot) m->step.held[m->step.n_held++] = slot;
}

st_status model_seq_forward(model *m, int q, block_state *first, bool train, block_state *out)
{
    return seq_forward(&m->seq[q], &m->plan[q], model_offload(m), first, train, out ? out : &m->step.last,
                       &m->step.run[q]);
}

st_status model_seq_forward1(model *m, int q, float **x0, bool train, block_state *out)
{
    block_state first = {.n = 1, .t = {*x0}};
    *x0 = NULL; /* the executor owns it now */
    return model_seq_forward(m, q, &first, train, out);
}

st_status model_seq_backward(model *m, int q, block_state *grad)
{
    const st_status st = seq_backward(m->step.run[q], grad, q ? NULL : (const float *const *)m->step.extra);
    m->step.run[q] = NULL;
    return st;
}

st_status model_rows_grad(model *m, const float *dimg, int64_t S, int64_t at, const char *what, float **dx)
{
    st_status st = ST_OK;
    state_free(m->pool, &m->step.last);
    *dx = model_take(m, &st, m->shape.batch * S * m->shape.hidden, what, true);
    if (!st) model_rows_scatter(m, *dx, dimg, S, at, m->shape.tokens);
    return st;
}

typedef struct loop_call {
    model *m;
    model_loop_fn fn;
    const float *cond;
    float *work;
} loop_call;

static st_status loop_call_run(void *arg)
{
    const loop_call *l = arg;
    return l->fn(l->m, l->cond, l->work);
}

st_status model_host_loop(model *m, const void *out, model_loop_fn fn, const float *cond, int64_t work,
                          const char *what)
{
    float *w = NULL;
    st_status st = work ? pool_alloc(m->pool, (size_t)work * sizeof(float), MEM_WORKSPACE, what, (void **)&w) : ST_OK;
    if (!st) st = host_loop(out, loop_call_run, &(loop_call){m, fn, cond, w});
    pool_free(m->pool, w);
    return st;
}

void *model_alloc(model *m, size_t n, size_t size)
{
    void *p = m->n_owned < MODEL_OWNED_MAX ? calloc(n ? n : 1, size) : NULL;
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

void *model_seq_blocks(model *m, int q, const char *name, int n, const block_kind *kind, size_t size)
{
    char *self = model_alloc(m, (size_t)n, size);
    block *blocks = self ? model_alloc(m, (size_t)n, sizeof *blocks) : NULL;
    if (!blocks) return NULL;
    for (int i = 0; i < n; i++) blocks[i] = (block){.kind = kind, .self = self + (size_t)i * size, .index = i};
    m->seq[q] = (block_seq){.name = name, .n = n, .blocks = blocks, .state_n = 1, .pool = m->pool};
    if (m->n_seq <= q) m->n_seq = q + 1;
    return self;
}
