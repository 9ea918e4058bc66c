/* The executor: forward keeps what the plan says, backward walks segments last to first, recomputing each
 * checkpointed segment from its boundary, and frees every tensor as soon as nothing needs it. States may share
 * tensors (a skip passed on from block to block, held by several boundaries at once): a tensor is freed when the
 * last state the run holds that references it goes, so it is stored, and freed, once. Run on dry pools, this
 * same code is the plan's prediction of a step's memory. */
#include "segtrain/executor.h"
#include "segtrain/ops.h"

#include <stdlib.h>
#include <string.h>

struct seq_run {
    block_seq *seq;
    const seq_plan *plan;
    offload *off;
    block_state *inputs;              /* per block: its input state while held (kept blocks' inputs, boundaries) */
    host_tensor (*host_in)[STATE_MAX]; /* per block: its input state while in host memory */
    block_saved **saved;              /* per block: what its forward kept */
};

/* Whether `also` or a state the run holds (a kept block's input, a boundary) references t. */
static bool referenced(const seq_run *run, const float *t, const block_state *also)
{
    for (int k = 0; also && k < also->n; k++)
        if (also->t[k] == t) return true;
    for (int i = 0; run && i < run->seq->n; i++)
        for (int k = 0; k < run->inputs[i].n; k++)
            if (run->inputs[i].t[k] == t) return true;
    return false;
}

/* Clears st (which may be one of the run's held states) and frees each of its tensors, once, that neither `also`
 * nor a state the run still holds references. run may be NULL (nothing held). */
static void drop_state(pool *p, const seq_run *run, block_state *st, const block_state *also)
{
    const block_state mine = *st;
    *st = (block_state){0};
    for (int k = 0; k < mine.n; k++) {
        bool seen = false;
        for (int j = 0; j < k; j++) seen |= mine.t[j] == mine.t[k];
        if (!seen && !referenced(run, mine.t[k], also)) pool_free(p, mine.t[k]);
    }
}

void seq_release(seq_run *run)
{
    if (!run) return;
    block_seq *s = run->seq;
    for (int i = s->n - 1; i >= 0; i--) {
        if (run->saved[i]) s->blocks[i].kind->release(&s->blocks[i], run->saved[i]);
        for (int k = 0; run->off && k < STATE_MAX; k++) host_tensor_release(run->off, &run->host_in[i][k]);
        drop_state(s->pool, run, &run->inputs[i], NULL); /* a tensor goes with the last state holding it */
    }
    free(run->saved);
    free(run->host_in);
    free(run->inputs);
    free(run);
}

static seq_run *run_new(block_seq *s, const seq_plan *plan, offload *off)
{
    seq_run *run = calloc(1, sizeof *run);
    if (!run) return NULL;
    run->seq = s;
    run->plan = plan;
    run->off = off;
    run->inputs = calloc((size_t)(s->n ? s->n : 1), sizeof *run->inputs);
    run->host_in = calloc((size_t)(s->n ? s->n : 1), sizeof *run->host_in);
    run->saved = calloc((size_t)(s->n ? s->n : 1), sizeof *run->saved);
    if (!run->inputs || !run->host_in || !run->saved) {
        seq_release(run);
        return NULL;
    }
    return run;
}

static int check_kept = -1; /* seq_check_kept_bytes; -1: SEGTRAIN_CHECK_KEPT_BYTES=1 says, at the first forward */

void seq_check_kept_bytes(bool on) { check_kept = on; }

/* Bytes of the tensors of `out` that `in` does not hold (each once): what a forward made of its output state. */
static size_t made_bytes(const block_state *in, const block_state *out)
{
    size_t bytes = 0;
    for (int k = 0; out && k < out->n; k++) {
        bool old = false;
        for (int j = 0; j < in->n; j++) old |= in->t[j] == out->t[k];
        for (int j = 0; j < k; j++) old |= out->t[j] == out->t[k];
        if (!old) bytes += pool_size_of(out->t[k]);
    }
    return bytes;
}

/* A block's forward. With seq_check_kept_bytes on, a training forward (nothing given in *saved) is held to its
 * kind's statements, which the planner and `plan` read: keeping all it keeps on the device, it must grow the pool
 * by its output state and exactly kept_bytes(keep); under attention offload, the host pool by exactly
 * offload_host_bytes and, keeping, the device pool by offload_device_bytes less (with KEEP_NOTHING a kind may keep
 * what its recompute needs beside the side: Stable Cascade's attention state). */
static st_status forward(block_seq *s, block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                         block_saved **saved)
{
    if (check_kept < 0) check_kept = getenv("SEGTRAIN_CHECK_KEPT_BYTES") && !strcmp(getenv("SEGTRAIN_CHECK_KEPT_BYTES"), "1");
    const bool check = check_kept && saved && !*saved;
    const size_t before = check ? pool_live(s->pool) : 0, host_before = check && off ? pool_live(off->host) : 0;
    const st_status st = b->kind->forward(b, in, out, keep, off, saved);
    if (st || !check) return st;
    if (off) {
        const size_t sent = pool_live(off->host) - host_before, said = b->kind->offload_host_bytes(b);
        if (sent != said)
            return st_fail(ST_ERR_INTERNAL, "%s block %d (%s): its forward sends %zu bytes to the host under attention "
                           "offload, but its kind's offload_host_bytes says %zu", s->name, b->index, b->kind->name,
                           sent, said);
    }
    if (off && keep == KEEP_NOTHING) return ST_OK;
    const size_t kept = pool_live(s->pool) - before - made_bytes(in, out), all = b->kind->kept_bytes(b, keep);
    const size_t freed = off ? b->kind->offload_device_bytes(b) : 0;
    if (kept + freed == all) return ST_OK;
    return st_fail(ST_ERR_INTERNAL, "%s block %d (%s): its forward keeps %zu bytes at keep level %d, but its kind says "
                   "%zu (kept_bytes %zu less offload_device_bytes %zu)", s->name, b->index, b->kind->name, kept,
                   (int)keep, all - freed, all, freed);
}

static void retag_state(pool *p, const block_state *st, mem_tag tag)
{
    for (int i = 0; i < st->n; i++) pool_retag(p, st->t[i], tag);
}

/* ---- bf16 states (block_seq.bf16_states, docs/PRECISION.md) ----
 * Every state the executor holds is then bf16: a block's output state is rounded to bf16 and packed to 2 bytes an
 * element as soon as its forward returns, and a block's forward or backward reads its input state widened into
 * float tensors that live for that call only. Every block so reads the same rounded input in every schedule (a
 * recompute widens the same boundary), and every schedule stays bitwise equal to none. */

/* to = from's tensors in the other width (widen: bf16 to float), each tensor once (a tensor filling several slots
 * stays one); NULL slots stay NULL. */
static st_status convert_state(pool *p, const block_state *from, block_state *to, const int64_t *numel, bool widen)
{
    *to = (block_state){.n = from->n};
    st_status st = ST_OK;
    for (int k = 0; k < from->n && !st; k++) {
        int j = 0;
        while (j < k && from->t[j] != from->t[k]) j++;
        if (j < k || !from->t[k]) {
            to->t[k] = j < k ? to->t[j] : NULL;
            continue;
        }
        to->t[k] = tensor_convert(p, from->t[k], numel[k], widen, &st);
        if (st) to->n = k;
    }
    if (st) state_free(p, to);
    return st;
}

/* Replaces a state of float tensors by its packed copy (or frees it on failure). */
static st_status pack_state(pool *p, block_state *st, const int64_t *numel)
{
    block_state packed;
    const st_status s = convert_state(p, st, &packed, numel, false);
    state_free(p, st);
    *st = packed;
    return s;
}

/* The output of a forward that read `wide` (in, widened) into bf16: the new tensors are packed and their float
 * copies freed, the slots that pass a tensor on take in's packed one again. */
static st_status pack_output(pool *p, const state_map *map, const block_state *in, const block_state *wide,
                             block_state *made, block_state *out)
{
    block_state fresh = *made; /* the forward's new tensors; NULL where a slot passes one on */
    bool as_mapped = made->n == map->n_out;
    for (int k = 0; k < made->n; k++) {
        if (map->out_from[k] < 0) continue;
        as_mapped &= made->t[k] == wide->t[map->out_from[k]];
        fresh.t[k] = NULL;
    }
    *made = (block_state){0};
    st_status st = pack_state(p, &fresh, map->out_numel);
    if (!st && !as_mapped) {
        state_free(p, &fresh);
        st = st_fail(ST_ERR_INTERNAL, "a block's output state does not pass its input's tensors on as its state map "
                     "says");
    }
    for (int k = 0; !st && k < fresh.n; k++)
        if (map->out_from[k] >= 0) fresh.t[k] = in->t[map->out_from[k]];
    *out = st ? (block_state){0} : fresh;
    return st;
}

/* Block i's input state `in`, as the executor holds it, widened to float into *wide. */
static st_status widen_input(block_seq *s, int i, const block_state *in, block_state *wide, state_map *map)
{
    block_state_map(s, i, map);
    return convert_state(s->pool, in, wide, map->in_numel, true);
}

/* Block b's forward on a state the executor holds: as it is, or under bf16_states widened for the call and the
 * output packed. out NULL: a recompute's last block, which makes no output. */
static st_status forward_held(block_seq *s, block *b, const block_state *in, block_state *out, keep_level keep,
                              offload *off, block_saved **saved)
{
    if (!s->bf16_states) return forward(s, b, in, out, keep, off, saved);
    state_map map;
    block_state wide, made = {0};
    st_status st = widen_input(s, b->index, in, &wide, &map);
    if (!st) st = forward(s, b, &wide, out ? &made : NULL, keep, off, saved);
    if (!st && out) st = pack_output(s->pool, &map, in, &wide, &made, out);
    state_free(s->pool, &wide);
    return st;
}

/* A swapped block's weights are on the device only around its forward, recompute or backward (block swap). */
static st_status run_forward(block_seq *s, block *b, const block_state *in, block_state *out, keep_level keep,
                             offload *off, block_saved **saved, int next)
{
    st_status st = s->weights_in ? s->weights_in(s->weights_ctx, b->index, next) : ST_OK;
    if (!st) st = forward_held(s, b, in, out, keep, off, saved);
    if (s->weights_out) s->weights_out(s->weights_ctx, b->index, next);
    return st;
}

static st_status backward_held(block_seq *s, block *b, const block_state *in, block_saved *saved, block_state *grad)
{
    if (!s->bf16_states) return b->kind->backward(b, in, saved, grad);
    state_map map;
    block_state wide;
    st_status st = widen_input(s, b->index, in, &wide, &map);
    if (!st) st = b->kind->backward(b, &wide, saved, grad);
    state_free(s->pool, &wide);
    return st;
}

/* The sequence's input state (float, the caller's) as the executor holds it. */
static st_status take_input(block_seq *s, block_state *in)
{
    if (!s->bf16_states || !s->n) return ST_OK;
    state_map map;
    block_state_map(s, 0, &map);
    return pack_state(s->pool, in, map.in_numel);
}

/* The last block's output state, as the executor holds it, to the caller's float one. */
static st_status give_output(block_seq *s, const seq_run *run, block_state *cur, block_state *out)
{
    if (!s->bf16_states || !s->n) {
        *out = *cur;
        return ST_OK;
    }
    state_map map;
    block_state_map(s, s->n - 1, &map);
    const st_status st = convert_state(s->pool, cur, out, map.out_numel, true);
    drop_state(s->pool, run, cur, NULL);
    return st;
}

/* Starts copying block i's input state to the host; the block's forward still reads the device copy. */
static st_status input_to_host(seq_run *run, int i, const block_state *in)
{
    state_map map;
    block_state_map(run->seq, i, &map);
    st_status st = ST_OK;
    for (int k = 0; k < in->n && !st; k++)
        st = host_tensor_offload(run->off, &run->host_in[i][k], in->t[k], (size_t)map.in_numel[k] * state_elem_size(run->seq),
                                 seq_plan_host_tag(run->plan, i), "input state (host)");
    return st;
}

/* The forward that read it is done: the device copy goes once its copy to the host has finished. */
static st_status input_drop_device(seq_run *run, int i)
{
    st_status st = ST_OK;
    for (int k = 0; k < run->inputs[i].n; k++) {
        st_status sk = host_tensor_drop_device(run->off, &run->host_in[i][k]);
        run->inputs[i].t[k] = NULL;
        st = st ? st : sk;
    }
    return st;
}

st_status seq_forward(block_seq *s, const seq_plan *plan, offload *off, block_state *in, bool train,
                      block_state *out, seq_run **run_out)
{
    *run_out = NULL;
    if (train && (seq_plan_offloads_attention(plan) || seq_plan_host_bytes(plan, s)) && !off) {
        state_free(s->pool, in);
        return st_fail(ST_ERR_INTERNAL, "seq_forward: the plan moves tensors to the host but no host pool was given");
    }
    seq_run *run = train ? run_new(s, plan, off) : NULL;
    if (train && !run) {
        state_free(s->pool, in);
        return st_host_oom("the executor's bookkeeping of %s", s->name);
    }
    st_status st = take_input(s, in);
    block_state cur = *in;
    *in = (block_state){0};
    for (int i = 0; i < s->n && !st; i++) {
        block *b = &s->blocks[i];
        const segment *g = train ? seq_plan_segment(plan, i) : NULL;
        const bool held = train && (!g || g->first == i); /* a kept block's input, or a boundary */
        const bool to_host = train && plan->host_input[i];
        if (g && g->first == i) retag_state(s->pool, &cur, MEM_BOUNDARIES);
        if (to_host) st = input_to_host(run, i, &cur);
        block_state next = {0};
        if (!st)
            st = run_forward(s, b, &cur, &next, train ? seq_plan_keep(plan, i) : KEEP_NOTHING,
                         train && plan->attention_offload[i] ? off : NULL, train ? &run->saved[i] : NULL,
                         i + 1 < s->n ? i + 1 : -1);
        if (held) run->inputs[i] = cur;
        else drop_state(s->pool, run, &cur, &next); /* what the block passed on lives on in next */
        if (!st && to_host) st = input_drop_device(run, i);
        cur = next;
    }
    if (!st) st = give_output(s, run, &cur, out);
    if (st) {
        drop_state(s->pool, run, &cur, NULL);
        seq_release(run);
        return st;
    }
    *run_out = run;
    return ST_OK;
}

const block_state *seq_run_output(const seq_run *run, int i)
{
    return i + 1 < run->seq->n && run->inputs[i + 1].n ? &run->inputs[i + 1] : NULL;
}

static void add_extra(block_state *grad, const float *extra, int64_t numel)
{
    if (!extra) return;
    add_to(grad->t[0], extra, numel);
}

/* Backward of block i from what it kept, then frees that and its input; next: the block the pass runs after it. */
static st_status backward_block(seq_run *run, int i, block_state *grad, const float *const *extra, int next)
{
    block_seq *s = run->seq;
    block *b = &s->blocks[i];
    if (extra) add_extra(grad, extra[i], s->state_numel[0]);
    st_status st = s->weights_in ? s->weights_in(s->weights_ctx, i, next) : ST_OK;
    if (!st) st = backward_held(s, b, &run->inputs[i], run->saved[i], grad);
    if (s->weights_out) s->weights_out(s->weights_ctx, i, next);
    b->kind->release(b, run->saved[i]);
    run->saved[i] = NULL;
    drop_state(s->pool, run, &run->inputs[i], NULL);
    return st;
}

/* Recomputes segment g from its boundary, keeping everything, then runs its backward. Tensors the segment's
 * blocks make (the skips of in-segment blocks too) are made afresh, with the same bits; tensors the boundary
 * holds (skips made before the segment) are passed on from it. */
static st_status backward_segment(seq_run *run, const segment *g, block_state *grad, const float *const *extra,
                                  int after)
{
    block_seq *s = run->seq;
    block_state cur = run->inputs[g->first];
    st_status st = ST_OK;
    for (int j = g->first; j <= g->last && !st; j++) {
        block *b = &s->blocks[j];
        block_state next = {0};
        const bool output = j < g->last || !b->kind->output_optional;
        st = run_forward(s, b, &cur, output ? &next : NULL, KEEP_ALL, NULL, &run->saved[j], j < g->last ? j + 1 : j);
        if (j > g->first) run->inputs[j] = cur;
        cur = next;
    }
    drop_state(s->pool, run, &cur, NULL); /* the last block's output again (if made), less what it passed on */
    for (int j = g->last; j >= g->first && !st; j--)
        st = backward_block(run, j, grad, extra, j > g->first ? j - 1 : after);
    return st;
}

/* Starts bringing a unit's host tensors back to the device (a no-op for what is already on its way). */
static st_status fetch_unit(seq_run *run, segment u)
{
    st_status st = ST_OK;
    for (int j = u.first; j <= u.last && !st; j++) {
        for (int k = 0; run->plan->host_input[j] && k < run->inputs[j].n && !st; k++)
            st = host_tensor_fetch(run->off, &run->host_in[j][k]);
        block *b = &run->seq->blocks[j];
        if (!st && run->plan->attention_offload[j] && run->saved[j]) st = b->kind->prefetch(b, run->saved[j]);
    }
    return st;
}

/* Waits for block i's input state to be back on the device. */
static st_status input_back(seq_run *run, int i)
{
    st_status st = ST_OK;
    for (int k = 0; k < run->inputs[i].n && !st; k++) {
        st = host_tensor_wait(run->off, &run->host_in[i][k]);
        if (!st) {
            run->inputs[i].t[k] = run->host_in[i][k].dev;
            run->host_in[i][k].dev = NULL; /* the state owns it again */
        }
    }
    return st;
}

/* The first block the backward pass runs after the unit that starts at block first: the next unit's first block
 * when it is a segment (its recompute), else its last (its backward); -1: none. */
static int after_unit(const seq_run *run, int first)
{
    if (first == 0) return -1;
    return seq_plan_segment(run->plan, first - 1) ? seq_plan_unit(run->plan, first - 1).first : first - 1;
}

st_status seq_backward(seq_run *run, block_state *grad, const float *const *extra)
{
    block_seq *s = run->seq;
    const block_state given = *grad;
    st_status st = ST_OK;
    for (int i = s->n - 1; i >= 0 && !st; i--) {
        const segment u = seq_plan_unit(run->plan, i);
        st = fetch_unit(run, u);
        if (!st && u.first > 0) st = fetch_unit(run, seq_plan_unit(run->plan, u.first - 1)); /* one unit ahead */
        if (!st && run->plan->host_input[u.first]) st = input_back(run, u.first);
        if (!st && seq_plan_segment(run->plan, i)) st = backward_segment(run, &u, grad, extra, after_unit(run, u.first));
        else if (!st) st = backward_block(run, i, grad, extra, after_unit(run, i));
        i = u.first;
        if (!st && s->after_backward) s->after_backward(s->after_backward_ctx, i);
    }
    if (st) { /* the gradients that blocks made (a skip's, between its reader and its maker) go; the caller's stay */
        for (int k = 0; k < grad->n; k++)
            if (!referenced(NULL, grad->t[k], &given)) pool_free(s->pool, grad->t[k]);
        *grad = given;
    }
    seq_release(run);
    return st;
}
