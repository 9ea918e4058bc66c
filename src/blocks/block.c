#include "segtrain/block.h"
#include "segtrain/ops.h"

#include <string.h>

size_t state_elem_size(const block_seq *s) { return s->bf16_states ? sizeof(uint16_t) : sizeof(float); }

size_t state_bytes(const block_seq *s)
{
    size_t b = 0;
    for (int i = 0; i < s->state_n; i++) b += (size_t)s->state_numel[i] * state_elem_size(s);
    return b;
}

void block_state_map(const block_seq *s, int i, state_map *out)
{
    const block *b = &s->blocks[i];
    if (b->kind->states) {
        b->kind->states(b, out);
        return;
    }
    *out = (state_map){.n_in = s->state_n, .n_out = s->state_n};
    for (int k = 0; k < s->state_n; k++) {
        out->in_numel[k] = out->out_numel[k] = s->state_numel[k];
        out->out_from[k] = -1 - k;
    }
}

bool seq_shares_tensors(const block_seq *s)
{
    for (int i = 0; i < s->n; i++) {
        if (!s->blocks[i].kind->states) continue;
        state_map m;
        block_state_map(s, i, &m);
        for (int k = 0; k < m.n_out; k++) {
            if (m.out_from[k] >= 0) return true;
            for (int j = 0; j < k; j++)
                if (m.out_from[j] == m.out_from[k]) return true;
        }
    }
    return false;
}

void state_free(pool *p, block_state *st)
{
    for (int i = 0; i < st->n; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= st->t[j] == st->t[i];
        if (!seen) pool_free(p, st->t[i]);
    }
    *st = (block_state){0};
}

float *tensor_convert(pool *p, const float *from, int64_t numel, bool widen, st_status *st)
{
    void *to = NULL;
    *st = pool_alloc(p, (size_t)numel * (widen ? sizeof(float) : sizeof(uint16_t)), MEM_ACTIVATIONS,
                     widen ? "bf16 tensor (float)" : "tensor (bf16)", &to);
    if (*st) return NULL;
    if (widen) bf16_to_float(to, (const uint16_t *)from, numel);
    else float_to_bf16(to, from, numel);
    return to;
}

st_status kept_convert(pool *p, const kept_tensor *k, int n, bool widen)
{
    st_status st = ST_OK;
    for (int i = 0; i < n && !st; i++) {
        if (!*k[i].slot) continue;
        float *to = tensor_convert(p, *k[i].slot, k[i].numel, widen, &st);
        if (st) break;
        pool_free(p, *k[i].slot);
        *k[i].slot = to;
    }
    return st;
}

float *scratch_take(scratch *s, int64_t floats, mem_tag tag, const char *what)
{
    if (s->status) return NULL;
    if (s->n == SCRATCH_MAX) {
        s->status = st_fail(ST_ERR_INTERNAL, "scratch: more than %d buffers for '%s'", SCRATCH_MAX, what);
        return NULL;
    }
    void *p;
    s->status = pool_alloc(s->pool, (size_t)floats * sizeof(float), tag, what, &p);
    if (s->status) return NULL;
    s->ptr[s->n++] = p;
    return p;
}

float *scratch_take_zero(scratch *s, int64_t floats, mem_tag tag, const char *what)
{
    float *p = scratch_take(s, floats, tag, what);
    if (p) zero_bytes(p, (size_t)floats * sizeof(float));
    return p;
}

void scratch_forget(scratch *s, void *ptr)
{
    for (int i = 0; i < s->n; i++)
        if (s->ptr[i] == ptr) {
            /* keep the order: scratch_end frees newest first, as a stack would */
            memmove(&s->ptr[i], &s->ptr[i + 1], (size_t)(s->n - i - 1) * sizeof *s->ptr);
            s->n--;
            return;
        }
}

void scratch_drop(scratch *s, void *ptr)
{
    for (int i = 0; i < s->n; i++)
        if (s->ptr[i] == ptr) {
            scratch_forget(s, ptr);
            pool_free(s->pool, ptr);
            return;
        }
}

st_status scratch_end(scratch *s)
{
    for (int i = s->n - 1; i >= 0; i--) pool_free(s->pool, s->ptr[i]);
    s->n = 0;
    return s->status;
}
