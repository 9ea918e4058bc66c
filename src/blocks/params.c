#include "segtrain/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/checked.h"
#include "segtrain/safetensors.h"

/* Registration has no status to return (the families register dozens of parameters in a row): running out of
 * memory is kept in s->oom, returns -1 (lin_layer's "none") and param_set_check reports it before any use. */
static int add(param_set *s, const char *name, int ndim, const int64_t *shape, bool trainable, bool fixed)
{
    if (s->oom) return -1;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        param *items = realloc(s->items, (size_t)cap * sizeof *items);
        if (!items) {
            s->oom = true;
            return -1;
        }
        s->items = items;
        s->cap = cap;
    }
    param *p = &s->items[s->n];
    *p = (param){.ndim = ndim, .trainable = trainable, .fixed = fixed, .numel = 1};
    snprintf(p->name, sizeof p->name, "%s", name);
    bool ok = true;
    for (int d = 0; d < ndim; d++) ok = ck_mul(p->numel, p->shape[d] = shape[d], CK_MAX_ELEMENTS, &p->numel) && ok;
    if (!ok) p->numel = 0; /* param_set_check refuses the set */
    ok = ok && ck_add(s->weight_count, p->numel, CK_MAX_ELEMENTS, &s->weight_count);
    if (ok && trainable) s->grad_count += p->numel; /* <= weight_count */
    if (!ok && !s->too_large) s->too_large = s->n + 1;
    return s->n++;
}

st_status param_set_check(const param_set *s)
{
    if (s->oom) return st_host_oom("the list of parameters (%d registered)", s->n);
    if (!s->too_large) return ST_OK;
    const param *p = &s->items[s->too_large - 1];
    char shape[160];
    int at = snprintf(shape, sizeof shape, "(");
    for (int d = 0; d < p->ndim && at < (int)sizeof shape; d++)
        at += snprintf(shape + at, sizeof shape - (size_t)at, d ? ", %lld" : "%lld", (long long)p->shape[d]);
    if (at < (int)sizeof shape) snprintf(shape + at, sizeof shape - (size_t)at, ")");
    return st_fail(ST_ERR_INVALID, "parameter '%s' of shape %s: %s more than 2^57 floats (the model's size keys are "
                   "too large)", p->name, shape, p->numel ? "the parameters up to it add up to" : "it has");
}

int param_add(param_set *s, const char *name, int ndim, const int64_t *shape, bool trainable)
{
    return add(s, name, ndim, shape, trainable, false);
}

int param_add_fixed(param_set *s, const char *name, int ndim, const int64_t *shape)
{
    return add(s, name, ndim, shape, false, true);
}

param *param_at(param_set *s, int index) { return &s->items[index]; }

param *param_find(param_set *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->items[i].name, name)) return &s->items[i];
    return NULL;
}

st_status param_set_alloc(param_set *s, pool *p)
{
    s->pool = p;
    st_status st = param_set_check(s);
    if (!st)
        st = pool_alloc_zero(p, (size_t)s->weight_count * sizeof(float), MEM_WEIGHTS, "weights", (void **)&s->weights);
    if (!st && s->grad_count)
        st = pool_alloc_zero(p, (size_t)s->grad_count * sizeof(float), MEM_GRADIENTS, "gradients",
                             (void **)&s->grads);
    if (st) {
        param_set_free(s);
        return st;
    }
    int64_t w = 0, g = 0;
    for (int i = 0; i < s->n; i++) {
        param *q = &s->items[i];
        q->w = s->weights + w;
        w += q->numel;
        q->g = q->trainable ? s->grads + g : NULL;
        if (q->trainable) g += q->numel;
    }
    return ST_OK;
}

void param_set_free(param_set *s)
{
    if (s->pool) {
        pool_free(s->pool, s->grads);
        pool_free(s->pool, s->weights);
    }
    free(s->items);
    *s = (param_set){0};
}

void param_set_zero_grads(param_set *s)
{
    if (s->grads) zero_bytes(s->grads, (size_t)s->grad_count * sizeof(float));
}

static bool in_part(const param *q, param_part part)
{
    return part == PARAMS_ALL || (part == PARAMS_TRAINABLE) == q->trainable;
}

st_status param_set_load(param_set *s, const char *path, param_part part, const char *other_prefix)
{
    sft_file *f;
    st_status st = sft_open(path, &f);
    if (st) return st;
    for (int i = 0; i < s->n && !st; i++) {
        param *q = &s->items[i];
        if (!in_part(q, part) || (q->fixed && !sft_find(f, q->name))) continue;
        st = sft_read_f32(f, q->name, q->ndim, q->shape, q->w);
    }
    for (int i = 0; i < sft_count(f) && !st; i++) {
        const char *name = sft_at(f, i)->name;
        const param *q = param_find(s, name);
        if (other_prefix && !strncmp(name, other_prefix, strlen(other_prefix))) continue;
        if (!q)
            st = st_fail(ST_ERR_FORMAT, "%s: unexpected tensor '%s' (not a parameter of this model)", path, name);
        else if (!in_part(q, part))
            st = st_fail(ST_ERR_FORMAT, "%s: unexpected tensor '%s' (a %s parameter; this file should hold the %s ones)",
                         path, name, q->trainable ? "trainable" : "frozen",
                         part == PARAMS_TRAINABLE ? "trainable" : "frozen");
    }
    sft_close(f);
    return st;
}

st_status param_set_save(param_set *s, const char *path, param_part part, bool grads, const named_floats *extra,
                         int n_extra, const char *const *meta, int n_meta)
{
    sft_entry *e = calloc((size_t)(s->n + n_extra), sizeof *e);
    if (!e) return st_host_oom("the tensor list of %s", path);
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        const param *q = &s->items[i];
        if (!in_part(q, part) || (grads && !q->trainable)) continue;
        e[n] = (sft_entry){.name = q->name, .dtype = SFT_F32, .ndim = q->ndim, .data = grads ? q->g : q->w};
        memcpy(e[n].shape, q->shape, sizeof q->shape);
        n++;
    }
    for (int i = 0; i < n_extra; i++, n++) {
        e[n] = (sft_entry){.name = extra[i].name, .dtype = SFT_F32, .ndim = extra[i].ndim, .data = extra[i].data};
        memcpy(e[n].shape, extra[i].shape, sizeof extra[i].shape);
    }
    st_status st = sft_write(path, e, n, meta, n_meta);
    free(e);
    return st;
}
