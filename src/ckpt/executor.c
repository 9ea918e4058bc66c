/* The executor. Today every block keeps its activations; the checkpoint plan arrives with issue 4. */
#include "segtrain/executor.h"

#include <stdlib.h>

struct seq_run {
    block_seq *seq;
    block_state *inputs;  /* input state of each block; inputs[0] is the caller's */
    block_saved **saved;  /* what each block's forward kept */
};

void seq_release(seq_run *run)
{
    if (!run) return;
    block_seq *s = run->seq;
    for (int i = s->n - 1; i >= 0; i--) {
        if (run->saved[i]) s->blocks[i].kind->release(&s->blocks[i], run->saved[i]);
        if (i > 0) state_free(s->pool, &run->inputs[i]);
    }
    free(run->saved);
    free(run->inputs);
    free(run);
}

st_status seq_forward(block_seq *s, const block_state *in, bool train, block_state *out, seq_run **run_out)
{
    *run_out = NULL;
    seq_run *run = NULL;
    if (train) {
        run = calloc(1, sizeof *run);
        if (run) run->inputs = calloc((size_t)s->n, sizeof *run->inputs);
        if (run) run->saved = calloc((size_t)s->n, sizeof *run->saved);
        if (!run || !run->inputs || !run->saved) {
            if (run) free(run->inputs), free(run->saved);
            free(run);
            return st_fail(ST_ERR_INTERNAL, "out of host memory for the executor's bookkeeping");
        }
        run->seq = s;
    }
    block_state cur = *in;
    st_status st = ST_OK;
    for (int i = 0; i < s->n && !st; i++) {
        block *b = &s->blocks[i];
        block_state next = {0};
        st = b->kind->forward(b, &cur, &next, train ? KEEP_ALL : KEEP_NOTHING, train ? &run->saved[i] : NULL);
        if (train) run->inputs[i] = cur;
        else if (i > 0) state_free(s->pool, &cur);
        cur = next;
    }
    if (st) {
        if (!train && s->n > 0 && cur.n) state_free(s->pool, &cur);
        seq_release(run);
        return st;
    }
    *out = cur;
    *run_out = run;
    return ST_OK;
}

st_status seq_backward(seq_run *run, block_state *grad)
{
    block_seq *s = run->seq;
    st_status st = ST_OK;
    for (int i = s->n - 1; i >= 0 && !st; i--) {
        block *b = &s->blocks[i];
        st = b->kind->backward(b, &run->inputs[i], run->saved[i], grad);
        b->kind->release(b, run->saved[i]);
        run->saved[i] = NULL;
        if (i > 0) state_free(s->pool, &run->inputs[i]);
    }
    seq_release(run);
    return st;
}
