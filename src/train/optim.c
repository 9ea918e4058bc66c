/* AdamW and Lion with torch's formulas, diffusers' schedules and torch's global-norm clipping. Updates run in
 * float like torch's; per-step coefficients are computed once in double. */
#include "segtrain/optim.h"
#include "segtrain/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* M_PI is not in C11. */
#define OPTIM_PI 3.14159265358979323846

static const char *const state_names[2] = {"optimizer.m", "optimizer.v"};

struct optimizer {
    param_set *ps;
    optim_settings s;
    int64_t t; /* completed updates */
    int moments;
    float *state[2]; /* m, v (AdamW); m (Lion): `count` floats each, for gradients first .. first + count - 1 */
    int64_t first, count;
};

static int moments_of(optim_kind kind) { return kind == OPTIM_LION ? 1 : 2; }

optim_settings optim_defaults(optim_kind kind)
{
    if (kind == OPTIM_LION)
        return (optim_settings){.kind = OPTIM_LION, .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99, .eps = 0, .cycles = 1};
    return (optim_settings){.kind = OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                            .weight_decay = 1e-2, .cycles = 1};
}

optim_schedule optim_schedule_named(const char *name)
{
    static const char *const names[] = {"constant", "linear", "cosine", "cosine_with_restarts", "polynomial"};
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (!strcmp(name, names[i])) return (optim_schedule)i;
    return SCHED_CONSTANT;
}

const char *optim_kind_name(optim_kind kind) { return kind == OPTIM_LION ? "lion" : "adamw"; }

size_t optim_state_bytes(optim_kind kind, int64_t grad_count)
{
    return (size_t)moments_of(kind) * (size_t)grad_count * sizeof(float);
}

double optim_lr_at(const optim_settings *s, int64_t step)
{
    if (step < 0) step = 0;
    if (step < s->warmup_steps) return s->lr * (double)step / (double)(s->warmup_steps > 1 ? s->warmup_steps : 1);
    const int64_t span = s->total_steps - s->warmup_steps;
    const double p = (double)(step - s->warmup_steps) / (double)(span > 1 ? span : 1);
    switch (s->schedule) {
    case SCHED_CONSTANT: break;
    case SCHED_LINEAR: return s->lr * fmax(0.0, 1.0 - p);
    case SCHED_COSINE: return s->lr * fmax(0.0, 0.5 * (1.0 + cos(OPTIM_PI * fmin(p, 1.0))));
    case SCHED_COSINE_WITH_RESTARTS:
        return p >= 1 ? 0.0 : s->lr * fmax(0.0, 0.5 * (1.0 + cos(OPTIM_PI * fmod((double)s->cycles * p, 1.0))));
    case SCHED_POLYNOMIAL: return p >= 1 ? s->lr_end : (s->lr - s->lr_end) * pow(1.0 - p, s->power) + s->lr_end;
    }
    return s->lr;
}

static st_status check_settings(const optim_settings *s)
{
    /* written as !(ok) so that NaN fails too */
    if (s->kind != OPTIM_ADAMW && s->kind != OPTIM_LION)
        return st_fail(ST_ERR_INVALID, "optimizer: unknown kind %d", (int)s->kind);
    if (!(s->lr >= 0 && isfinite(s->lr)))
        return st_fail(ST_ERR_INVALID, "optimizer: learning_rate must be finite and >= 0, got %g", s->lr);
    if (!(s->beta1 >= 0 && s->beta1 < 1))
        return st_fail(ST_ERR_INVALID, "optimizer: beta1 must be in [0, 1), got %g", s->beta1);
    if (!(s->beta2 >= 0 && s->beta2 < 1))
        return st_fail(ST_ERR_INVALID, "optimizer: beta2 must be in [0, 1), got %g", s->beta2);
    if (!(s->eps >= 0 && isfinite(s->eps)))
        return st_fail(ST_ERR_INVALID, "optimizer: epsilon must be finite and >= 0, got %g", s->eps);
    if (!(s->weight_decay >= 0 && isfinite(s->weight_decay)))
        return st_fail(ST_ERR_INVALID, "optimizer: weight_decay must be finite and >= 0, got %g", s->weight_decay);
    if (isnan(s->max_grad_norm))
        return st_fail(ST_ERR_INVALID, "optimizer: max_grad_norm is NaN");
    if (s->schedule == SCHED_POLYNOMIAL && !(s->lr_end >= 0 && s->lr_end < s->lr && s->power >= 0))
        return st_fail(ST_ERR_INVALID, "optimizer: polynomial needs 0 <= lr_end < learning_rate and lr_power >= 0, "
                       "got lr_end %g, learning_rate %g, lr_power %g", s->lr_end, s->lr, s->power);
    if (s->schedule == SCHED_COSINE_WITH_RESTARTS && s->cycles < 1)
        return st_fail(ST_ERR_INVALID, "optimizer: lr_num_cycles must be >= 1, got %lld", (long long)s->cycles);
    if (s->warmup_steps < 0 || s->total_steps < 0)
        return st_fail(ST_ERR_INVALID, "optimizer: warm-up (%lld) and total steps (%lld) must be >= 0",
                       (long long)s->warmup_steps, (long long)s->total_steps);
    return ST_OK;
}

st_status optim_create(param_set *ps, const optim_settings *s, optimizer **out)
{
    return optim_create_shard(ps, s, 0, ps->grad_count, out);
}

st_status optim_create_shard(param_set *ps, const optim_settings *s, int64_t first, int64_t count, optimizer **out)
{
    *out = NULL;
    st_status st = check_settings(s);
    if (st) return st;
    if (!ps->pool || !ps->grads || ps->grad_count <= 0)
        return st_fail(ST_ERR_INVALID, "optimizer: the parameter set has no allocated trainable parameters");
    if (first < 0 || count < 0 || first + count > ps->grad_count)
        return st_fail(ST_ERR_INVALID, "optimizer: the shard %lld + %lld is outside the %lld trainable floats",
                       (long long)first, (long long)count, (long long)ps->grad_count);
    optimizer *o = calloc(1, sizeof *o);
    if (!o) return st_host_oom("the optimizer's bookkeeping");
    *o = (optimizer){.ps = ps, .s = *s, .moments = moments_of(s->kind), .first = first, .count = count};
    const size_t bytes = (size_t)(count ? count : 1) * sizeof(float);
    for (int i = 0; i < o->moments && !st; i++)
        st = pool_alloc_zero(ps->pool, bytes, MEM_OPTIMIZER, state_names[i], (void **)&o->state[i]);
    if (st) {
        optim_destroy(o);
        return st;
    }
    *out = o;
    return ST_OK;
}

void optim_destroy(optimizer *o)
{
    if (!o) return;
    for (int i = 0; i < o->moments; i++) pool_free(o->ps->pool, o->state[i]);
    free(o);
}

const optim_settings *optim_get_settings(const optimizer *o) { return &o->s; }

double optim_sum_squares(optimizer *o) { return sum_squares(o->ps->grads + o->first, o->count); }

double optim_clip(optimizer *o)
{
    const double norm = sqrt(optim_sum_squares(o));
    optim_clip_by(o, norm);
    return norm;
}

void optim_clip_by(optimizer *o, double norm)
{
    float *g = o->ps->grads + o->first;
    if (!isfinite(norm) || !(o->s.max_grad_norm > 0)) return;
    if (o->s.clip_by_value) {
        clamp_abs(g, o->count, (float)o->s.max_grad_norm);
        return;
    }
    const double coef = o->s.max_grad_norm / (norm + 1e-6);
    if (coef < 1) scale_by(g, o->count, (float)coef);
}

st_status optim_step(optimizer *o, double *lr_used)
{
    const optim_settings *s = &o->s;
    const double lr = optim_lr_at(s, o->t);
    const int64_t t = o->t + 1;
    optim_coefs k = {.decay = (float)(1.0 - lr * s->weight_decay),
                     .b1 = (float)s->beta1,
                     .omb1 = (float)(1.0 - s->beta1),
                     .b2 = (float)s->beta2,
                     .omb2 = (float)(1.0 - s->beta2),
                     .step = (float)lr,
                     .eps = (float)s->eps};
    if (s->kind == OPTIM_ADAMW) {
        k.step = (float)(lr / (1.0 - pow(s->beta1, (double)t)));
        k.inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow(s->beta2, (double)t)));
    }
    param_set *ps = o->ps;
    float *m = o->state[0], *v = o->state[1];
    /* one update a parameter (its part inside the shard): the backend spreads it over its threads or its GPU, and
     * elements are independent, so the bits do not depend on how */
    for (int i = 0; i < ps->n; i++) {
        const param *q = &ps->items[i];
        if (!q->trainable || !q->g) continue;
        const int64_t at = q->g - ps->grads, from = at > o->first ? at : o->first,
                      to = at + q->numel < o->first + o->count ? at + q->numel : o->first + o->count;
        if (to <= from) continue;
        const int64_t lo = from - at, st = from - o->first; /* the parameter's index and the state's */
        if (s->kind == OPTIM_ADAMW)
            adamw_update(q->w + lo, q->g + lo, m + st, v + st, to - from, &k);
        else
            lion_update(q->w + lo, q->g + lo, m + st, to - from, &k);
    }
    o->t = t;
    if (lr_used) *lr_used = lr;
    return ST_OK;
}

int64_t optim_steps_taken(const optimizer *o) { return o->t; }

st_status optim_set_steps(optimizer *o, int64_t steps)
{
    if (steps < 0) return st_fail(ST_ERR_FORMAT, "optimizer: step count must be >= 0, got %lld", (long long)steps);
    o->t = steps;
    return ST_OK;
}

int optim_state_count(const optimizer *o) { return o->moments; }

const char *optim_state_name(const optimizer *o, int i) { return i >= 0 && i < o->moments ? state_names[i] : NULL; }

float *optim_state_data(optimizer *o, int i) { return i >= 0 && i < o->moments ? o->state[i] : NULL; }

int64_t optim_state_size(const optimizer *o, int i) { return i >= 0 && i < o->moments ? o->count : 0; }
int64_t optim_shard_first(const optimizer *o) { return o->first; }

st_status optim_state_restore(optimizer *o, const char *name, const float *data, int64_t n)
{
    int i = 0;
    while (i < o->moments && strcmp(name, state_names[i])) i++;
    if (i == o->moments)
        return st_fail(ST_ERR_FORMAT, "optimizer state '%s' is not part of %s (its state is %s%s)", name,
                       optim_kind_name(o->s.kind), state_names[0], o->moments > 1 ? ", optimizer.v" : "");
    if (n != o->ps->grad_count)
        return st_fail(ST_ERR_FORMAT,
                       "optimizer state '%s' has %lld floats, but the trainable parameters have %lld (a checkpoint "
                       "of another model or training setup?)",
                       name, (long long)n, (long long)o->ps->grad_count);
    memcpy(o->state[i], data + o->first, (size_t)o->count * sizeof(float)); /* a shard takes its part */
    return ST_OK;
}
