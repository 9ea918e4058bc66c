/* U-ViT's long skips around a block kind (skips.h). */
#include "models/core/skips.h"

#include <stdio.h>
#include <stdlib.h>

skip_role skip_role_of(int i, int depth) { return i < depth / 2 ? SKIP_IN : i == depth / 2 ? SKIP_MID : SKIP_OUT; }

void skip_module_name(int i, int depth, char *name, size_t n)
{
    const skip_role role = skip_role_of(i, depth);
    if (role == SKIP_IN) snprintf(name, n, "in_blocks.%d", i);
    else if (role == SKIP_MID) snprintf(name, n, "mid_block");
    else snprintf(name, n, "out_blocks.%d", i - depth / 2 - 1);
}

int skip_count(int i, int depth)
{
    const skip_role r = skip_role_of(i, depth);
    return r == SKIP_IN ? i : r == SKIP_MID ? depth / 2 : depth - i;
}

/* What a forward kept: the wrapped block's, and for out-blocks x' (its input, which its backward reads). */
typedef struct skip_saved {
    block_saved *inner;
    float *xs;
} skip_saved;

/* A range's rows: the image's, or the text's */
static int64_t range_rows(const skip_block *sb, int r)
{
    const model_shape *s = &sb->m->shape;
    return s->batch * (r ? s->text : s->tokens);
}

/* the stream's rows (every range's) and width */
static int64_t rows_of(const skip_block *sb) { return range_rows(sb, 0) + (sb->ranges > 1 ? range_rows(sb, 1) : 0); }
static int64_t width_of(const skip_block *sb) { return sb->m->shape.hidden; }

/* The wrapped block as the executor's block b would be: its kind and data, b's index and run count. */
static block inner_of(const block *b)
{
    const skip_block *sb = b->self;
    return (block){.kind = sb->kind, .self = sb->inner, .index = b->index, .forward_runs = b->forward_runs};
}

/* cat (n, 2d) = [a | b], row by row */
static void concat_rows(float *cat, const float *a, const float *b, int64_t n, int64_t d)
{
    copy_rows(cat, 2 * d, a, d, n, d);
    copy_rows(cat + d, 2 * d, b, d, n, d);
}

/* the inverse: a = cat[:, :d], b = cat[:, d:] */
static void split_rows(float *a, float *b, const float *cat, int64_t n, int64_t d)
{
    copy_rows(a, d, cat, 2 * d, n, d);
    copy_rows(b, d, cat + d, 2 * d, n, d);
}

/* A checkpointed block's first forward: the merged input is not kept (the recompute makes it again). */
static bool first_forward(keep_level keep) { return keep == KEEP_NOTHING || keep == KEEP_ATTENTION_OUTPUT; }

/* x' = merge(concat(x, s)) range by range, s the newest skip (the input state's last tensor). x' is what the wrapped
 * block reads: kept for its backward, or workspace when nothing is kept. */
static st_status merge_forward(const skip_block *sb, const block_state *in, keep_level keep, float **xs)
{
    const int64_t N = rows_of(sb), D = width_of(sb);
    model *m = sb->m;
    scratch s = {.pool = m->pool};
    float *x = scratch_take(&s, N * D, first_forward(keep) ? MEM_WORKSPACE : MEM_ACTIVATIONS, "skips.merged");
    float *cat = scratch_take(&s, N * 2 * D, MEM_WORKSPACE, "skips.concat");
    for (int r = 0, at = 0; r < sb->ranges && !s.status; at += (int)range_rows(sb, r), r++) {
        const int64_t n = range_rows(sb, r);
        concat_rows(cat, in->t[0] + at * D, in->t[sb->skips] + at * D, n, D);
        s.status = lin_forward(m->params, m->pool, &sb->merge[r], x + at * D, cat, n);
    }
    scratch_drop(&s, cat);
    if (!s.status) {
        scratch_forget(&s, x);
        *xs = x;
    }
    return scratch_end(&s);
}

/* grad->t[0] holds dL/dx' on entry and dL/dx on return; the skip's gradient is a new tensor appended to grad. */
static st_status merge_backward(const skip_block *sb, const block_state *in, block_state *grad)
{
    const int64_t N = rows_of(sb), D = width_of(sb);
    model *m = sb->m;
    scratch s = {.pool = m->pool};
    float *cat = scratch_take(&s, N * 2 * D, MEM_WORKSPACE, "skips.concat");
    float *dcat = scratch_take_zero(&s, N * 2 * D, MEM_WORKSPACE, "skips.dconcat");
    for (int r = 0, at = 0; r < sb->ranges && !s.status; at += (int)range_rows(sb, r), r++) {
        const int64_t n = range_rows(sb, r);
        concat_rows(cat, in->t[0] + at * D, in->t[sb->skips] + at * D, n, D);
        s.status = lin_backward(m->params, m->pool, &sb->merge[r], dcat + at * 2 * D, grad->t[0] + at * D, cat, n);
    }
    float *dskip = scratch_take(&s, N * D, MEM_ACTIVATIONS, "skips.dskip");
    if (!s.status) {
        split_rows(grad->t[0], dskip, dcat, N, D); /* dL/dx' is dead: it becomes dL/dx */
        scratch_forget(&s, dskip);
        grad->t[grad->n++] = dskip;
    }
    return scratch_end(&s);
}

static void release_parts(block *b, block_saved *inner, float *xs)
{
    const skip_block *sb = b->self;
    block ib = inner_of(b);
    sb->kind->release(&ib, inner);
    pool_free(sb->m->pool, xs);
}

void skip_release(block *b, block_saved *saved)
{
    skip_saved *ss = (skip_saved *)saved;
    if (!ss) return;
    release_parts(b, ss->inner, ss->xs);
    free(ss);
}

/* The wrapped block's forward on x, its output into *y when out is wanted (or the kind cannot go without one) */
static st_status inner_forward(block *b, const block_state *x, block_state *y, bool want, keep_level keep,
                               offload *off, block_saved **inner)
{
    const skip_block *sb = b->self;
    block ib = inner_of(b);
    const bool made = want || !sb->kind->output_optional;
    st_status st = sb->kind->forward(&ib, x, made ? y : NULL, keep, off, inner);
    b->forward_runs = ib.forward_runs;
    if (!st && made && !want) state_free(sb->m->pool, y);
    return st;
}

/* *saved_io is NULL on entry but in a recompute after attention offload or KEEP_ATTENTION_OUTPUT, where it holds the
 * wrapped block's attention side on its way back, or its attention's output and state. */
st_status skip_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                       block_saved **saved_io)
{
    skip_block *sb = b->self;
    skip_saved *ss = saved_io ? (skip_saved *)*saved_io : NULL;
    if (saved_io && !ss && !(ss = calloc(1, sizeof *ss))) return st_host_oom("a block's saved tensors");
    block_saved *inner = ss ? ss->inner : NULL;
    float *xs = NULL;
    block_state x = {.n = 1, .t = {in->t[0]}}, y = {0};
    st_status st = sb->role == SKIP_OUT ? merge_forward(sb, in, keep, &xs) : ST_OK;
    if (xs) x.t[0] = xs;
    /* (releases inner if it fails; no output wanted, none made) */
    if (!st) st = inner_forward(b, &x, &y, out != NULL, keep, off, saved_io ? &inner : NULL);
    if (st || first_forward(keep)) { /* x' was transient (the recompute merges again) */
        pool_free(sb->m->pool, xs);
        xs = NULL;
    }
    if (st || (!inner && !xs)) { /* nothing kept */
        release_parts(b, inner, xs);
        free(ss);
        if (saved_io) *saved_io = NULL;
        if (st) return st;
    } else if (saved_io) {
        *ss = (skip_saved){inner, xs};
        *saved_io = (block_saved *)ss;
    }
    if (!out) return ST_OK;
    /* (y, the skips passed on, and for an in-block y again: its new skip) */
    const int passed = sb->role == SKIP_OUT ? sb->skips - 1 : sb->skips;
    *out = (block_state){.n = 1 + passed, .t = {y.t[0]}};
    for (int k = 1; k <= passed; k++) out->t[k] = in->t[k];
    if (sb->role == SKIP_IN) out->t[out->n++] = y.t[0];
    return ST_OK;
}

st_status skip_prefetch(block *b, block_saved *saved)
{
    const skip_block *sb = b->self;
    skip_saved *ss = (skip_saved *)saved;
    block ib = inner_of(b);
    return sb->kind->prefetch(&ib, ss ? ss->inner : NULL);
}

st_status skip_backward(block *b, const block_state *in, block_saved *saved, block_state *grad)
{
    skip_block *sb = b->self;
    skip_saved *ss = (skip_saved *)saved;
    if (sb->role == SKIP_IN) { /* the output's two slots of y: their gradients add up */
        float *dy = grad->t[0], *dskip = grad->t[grad->n - 1];
        add_to(dy, dskip, rows_of(sb) * width_of(sb));
        pool_free(sb->m->pool, dskip);
        grad->t[--grad->n] = NULL;
    }
    const block_state x = {.n = 1, .t = {sb->role == SKIP_OUT ? ss->xs : in->t[0]}};
    block ib = inner_of(b);
    st_status st = sb->kind->backward(&ib, &x, ss->inner, grad);
    if (!st && sb->role == SKIP_OUT) st = merge_backward(sb, in, grad);
    return st;
}

size_t skip_kept_bytes(const block *b, keep_level keep)
{
    const skip_block *sb = b->self;
    const bool merged = sb->role == SKIP_OUT && !first_forward(keep);
    const block ib = inner_of(b);
    return sb->kind->kept_bytes(&ib, keep) + (merged ? (size_t)(rows_of(sb) * width_of(sb)) * sizeof(float) : 0);
}

void skip_states(const block *b, state_map *out)
{
    const skip_block *sb = b->self;
    const int64_t n = rows_of(sb) * width_of(sb);
    const int passed = sb->role == SKIP_OUT ? sb->skips - 1 : sb->skips;
    *out = (state_map){.n_in = 1 + sb->skips, .n_out = 1 + passed + (sb->role == SKIP_IN)};
    for (int k = 0; k < out->n_in; k++) out->in_numel[k] = n;
    for (int k = 0; k < out->n_out; k++) out->out_numel[k] = n;
    out->out_from[0] = -1; /* y */
    for (int k = 1; k <= passed; k++) out->out_from[k] = k;
    if (sb->role == SKIP_IN) out->out_from[out->n_out - 1] = -1; /* y again, as the new skip */
}

/* the wrapped block's: its attention side is all the wrapper sends */
size_t skip_offload_host_bytes(const block *b)
{
    const block ib = inner_of(b);
    return ib.kind->offload_host_bytes(&ib);
}

size_t skip_offload_device_bytes(const block *b)
{
    const block ib = inner_of(b);
    return ib.kind->offload_device_bytes(&ib);
}
