/* The skipdit family's blocks (U-ViT-style long skips); dit.c runs them between DiT's embeddings and final layer.
 *
 * depth = 2 in + 1 blocks, each a DiT block (dit_block.c): in-blocks 0 .. in-1, a mid block, out-blocks 0 .. in-1.
 * In-block i's output is its own skip s_i, so its output state is (y, s_0 .. s_{i-1}, y): one tensor in two
 * slots. Out-block j reads the newest skip, which is s_{in-1-j}: x' = skip_linear(concat(x, s)) along features,
 * then the DiT block on x', and passes the older skips on. The skips are passed from state to state as the same
 * tensors (block_kind.states says which), so the executor stores each once, however many boundaries hold it.
 *
 * Backward mirrors it: an in-block adds its skip's gradient to the stream's and frees it before the DiT part's
 * backward; an out-block, after the DiT part's, splits skip_linear's input gradient into the stream's and a new
 * gradient tensor for its skip, which travels back in the gradient state to the in-block that made the skip. */
#include "models/core/family.h"
#include "models/core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum skip_role { ROLE_IN, ROLE_MID, ROLE_OUT } skip_role;

typedef struct skip_block {
    dit_block dit; /* first, so that dit_block_kind's functions take a skipdit block as one of theirs */
    lin_layer skip; /* out-blocks: skip_linear, Linear(2D -> D) */
    skip_role role;
    int skips; /* skip tensors in the input state */
} skip_block;

/* What a forward kept: the DiT part's, and for out-blocks x' (the DiT part's input, which its backward reads). */
typedef struct skip_saved {
    block_saved *dit;
    float *xs;
} skip_saved;

typedef struct dims {
    int64_t N, D;
    size_t ND; /* bytes of one (N, D) tensor */
} dims;

static dims dims_of(const skip_block *sb)
{
    const model_shape *s = &sb->dit.m->shape;
    const int64_t N = s->batch * s->tokens;
    return (dims){N, s->hidden, (size_t)(N * s->hidden) * sizeof(float)};
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

/* x' = skip_linear(concat(x, s)) with s the newest skip (the input state's last tensor). x' is what the DiT part
 * reads: kept for its backward, or workspace when nothing is kept. */
/* A checkpointed block's first forward: the merged input is not kept (the recompute makes it again). */
static bool first_forward(keep_level keep) { return keep == KEEP_NOTHING || keep == KEEP_ATTENTION_OUTPUT; }

static st_status merge_forward(const skip_block *sb, const block_state *in, keep_level keep, float **xs)
{
    const dims d = dims_of(sb);
    model *m = sb->dit.m;
    scratch s = {.pool = m->pool};
    float *x = scratch_take(&s, d.N * d.D, first_forward(keep) ? MEM_WORKSPACE : MEM_ACTIVATIONS, "skipdit.merged");
    float *cat = scratch_take(&s, d.N * 2 * d.D, MEM_WORKSPACE, "skipdit.concat");
    if (!s.status) {
        concat_rows(cat, in->t[0], in->t[sb->skips], d.N, d.D);
        s.status = lin_forward(m->params, m->pool, &sb->skip, x, cat, d.N);
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
    const dims d = dims_of(sb);
    model *m = sb->dit.m;
    scratch s = {.pool = m->pool};
    float *cat = scratch_take(&s, d.N * 2 * d.D, MEM_WORKSPACE, "skipdit.concat");
    float *dcat = scratch_take_zero(&s, d.N * 2 * d.D, MEM_WORKSPACE, "skipdit.dconcat");
    if (!s.status) {
        concat_rows(cat, in->t[0], in->t[sb->skips], d.N, d.D);
        s.status = lin_backward(m->params, m->pool, &sb->skip, dcat, grad->t[0], cat, d.N);
    }
    float *dskip = scratch_take(&s, d.N * d.D, MEM_ACTIVATIONS, "skipdit.dskip");
    if (!s.status) {
        split_rows(grad->t[0], dskip, dcat, d.N, d.D); /* dL/dx' is dead: it becomes dL/dx */
        scratch_forget(&s, dskip);
        grad->t[grad->n++] = dskip;
    }
    return scratch_end(&s);
}

static void release_parts(block *b, block_saved *dit, float *xs)
{
    dit_block_kind.release(b, dit);
    pool_free(((skip_block *)b->self)->dit.m->pool, xs);
}

static void skip_release(block *b, block_saved *saved)
{
    skip_saved *ss = (skip_saved *)saved;
    if (!ss) return;
    release_parts(b, ss->dit, ss->xs);
    free(ss);
}

/* *saved_io is NULL on entry but in a recompute after attention offload or KEEP_ATTENTION_OUTPUT, where it holds the
 * DiT part's attention side on its way back, or its attention's output and state. */
static st_status skip_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                              block_saved **saved_io)
{
    skip_block *sb = b->self;
    skip_saved *ss = saved_io ? (skip_saved *)*saved_io : NULL;
    if (saved_io && !ss && !(ss = calloc(1, sizeof *ss))) return st_host_oom("a block's saved tensors");
    block_saved *dit = ss ? ss->dit : NULL;
    float *xs = NULL;
    block_state x = {.n = 1, .t = {in->t[0]}}, y = {0};
    st_status st = sb->role == ROLE_OUT ? merge_forward(sb, in, keep, &xs) : ST_OK;
    if (xs) x.t[0] = xs;
    /* (releases dit if it fails; no output wanted, none made) */
    if (!st) st = dit_block_kind.forward(b, &x, out ? &y : NULL, keep, off, saved_io ? &dit : NULL);
    if (st || first_forward(keep)) { /* x' was transient (the recompute merges again) */
        pool_free(sb->dit.m->pool, xs);
        xs = NULL;
    }
    if (st || (!dit && !xs)) { /* nothing kept */
        release_parts(b, dit, xs);
        free(ss);
        if (saved_io) *saved_io = NULL;
        if (st) return st;
    } else if (saved_io) {
        *ss = (skip_saved){dit, xs};
        *saved_io = (block_saved *)ss;
    }
    if (!out) return ST_OK;
    /* (y, the skips passed on, and for an in-block y again: its new skip) */
    const int passed = sb->role == ROLE_OUT ? sb->skips - 1 : sb->skips;
    *out = (block_state){.n = 1 + passed, .t = {y.t[0]}};
    for (int k = 1; k <= passed; k++) out->t[k] = in->t[k];
    if (sb->role == ROLE_IN) out->t[out->n++] = y.t[0];
    return ST_OK;
}

static st_status skip_prefetch(block *b, block_saved *saved)
{
    skip_saved *ss = (skip_saved *)saved;
    return dit_block_kind.prefetch(b, ss ? ss->dit : NULL);
}

static st_status skip_backward(block *b, const block_state *in, block_saved *saved, block_state *grad)
{
    skip_block *sb = b->self;
    skip_saved *ss = (skip_saved *)saved;
    if (sb->role == ROLE_IN) { /* the output's two slots of y: their gradients add up */
        const dims d = dims_of(sb);
        float *dy = grad->t[0], *dskip = grad->t[grad->n - 1];
        add_to(dy, dskip, d.N * d.D);
        pool_free(sb->dit.m->pool, dskip);
        grad->t[--grad->n] = NULL;
    }
    const block_state x = {.n = 1, .t = {sb->role == ROLE_OUT ? ss->xs : in->t[0]}};
    st_status st = dit_block_kind.backward(b, &x, ss->dit, grad);
    if (!st && sb->role == ROLE_OUT) st = merge_backward(sb, in, grad);
    return st;
}

static size_t skip_kept_bytes(const block *b, keep_level keep)
{
    const skip_block *sb = b->self;
    const bool merged = sb->role == ROLE_OUT && !first_forward(keep);
    return dit_block_kind.kept_bytes(b, keep) + (merged ? dims_of(sb).ND : 0);
}

static void skip_states(const block *b, state_map *out)
{
    const skip_block *sb = b->self;
    const int64_t ND = dims_of(sb).N * dims_of(sb).D;
    const int passed = sb->role == ROLE_OUT ? sb->skips - 1 : sb->skips;
    *out = (state_map){.n_in = 1 + sb->skips, .n_out = 1 + passed + (sb->role == ROLE_IN)};
    for (int k = 0; k < out->n_in; k++) out->in_numel[k] = ND;
    for (int k = 0; k < out->n_out; k++) out->out_numel[k] = ND;
    out->out_from[0] = -1; /* y */
    for (int k = 1; k <= passed; k++) out->out_from[k] = k;
    if (sb->role == ROLE_IN) out->out_from[out->n_out - 1] = -1; /* y again, as the new skip */
}

static size_t skip_offloaded_bytes(const block *b) { return dit_block_kind.offloaded_bytes(b); }

static const block_kind skipdit_block_kind = {
    .name = "skipdit", .ffn_split = true, .softmax_attention = true, .output_optional = true,
    .keeps_attention_output = true, .kept_bytes = skip_kept_bytes, .offloaded_bytes = skip_offloaded_bytes,
    .forward = skip_forward, .prefetch = skip_prefetch, .backward = skip_backward, .release = skip_release,
    .states = skip_states,
};

st_status skipdit_blocks(model *m, param_set *s, void **data)
{
    const model_config *c = &m->cfg;
    const int depth = (int)c->depth, in = depth / 2;
    /* the widest states (the last in-block's output, the mid block's input) hold the stream and `in` skips */
    if (in + 1 > STATE_MAX)
        return st_fail(ST_ERR_UNSUPPORTED, "depth: %d blocks; skipdit holds at most %d skips at once (valid: an odd "
                       "depth from 3 to %d)", depth, STATE_MAX - 1, 2 * STATE_MAX - 1);
    skip_block *sb = model_seq_blocks(m, 0, "blocks", depth, &skipdit_block_kind, sizeof *sb);
    if (!sb) return st_host_oom("%d skip blocks", depth);
    for (int i = 0; i < depth; i++) {
        const skip_role role = i < in ? ROLE_IN : i == in ? ROLE_MID : ROLE_OUT;
        char prefix[32], name[PARAM_NAME_MAX];
        if (role == ROLE_IN) snprintf(prefix, sizeof prefix, "in_blocks.%d", i);
        else if (role == ROLE_MID) snprintf(prefix, sizeof prefix, "mid_block");
        else snprintf(prefix, sizeof prefix, "out_blocks.%d", i - in - 1);
        sb[i] = (skip_block){.role = role, .skips = role == ROLE_IN ? i : role == ROLE_MID ? in : depth - i};
        dit_block_register(s, &sb[i].dit, prefix, c);
        if (role == ROLE_OUT) { /* LoRA adapts it as it does the MLP's linears */
            snprintf(name, sizeof name, "%s.skip_linear", prefix);
            sb[i].skip = lin_register(s, name, 2 * c->hidden, c->hidden, true, c->lora_mlp ? c->lora_rank : 0,
                                      (float)c->lora_alpha, !c->lora_rank);
        }
        sb[i].dit.m = m;
    }
    *data = sb;
    return ST_OK;
}

/* ---- the family's descriptor (family.h) ---- */

static const family_preset presets[] = {
    {"skipdit-tiny", 5, 64, 4, 2, 4, 8, 10, 0, 0, 0, 0, false, false, 0, 0},
    {"skipdit-s", 13, 384, 6, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
};

static st_status skipdit_check(const model_config *mc)
{
    if (mc->depth < 3 || mc->depth % 2 == 0)
        return st_fail(ST_ERR_INVALID, "depth: %lld blocks; skipdit needs an odd number >= 3 (in-blocks, a mid block, "
                       "as many out-blocks)", (long long)mc->depth);
    return ST_OK;
}

const family_desc skipdit_desc = {
    .name = "skipdit", .topology = TOPO_OWN, .traits = TR_OWN,
    .ops = &skipdit_family, FAMILY_PRESETS(presets), .check = skipdit_check,
};
