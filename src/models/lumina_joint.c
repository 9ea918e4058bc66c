/* One sequence of lumina2_block.c's blocks over each sample's joint rows: ERNIE-Image's and Ideogram 4's skeleton
 * (lumina2.h). The families make the rows, the rotary tables and the key mask; this owns the blocks and the step's
 * run of them. */
#include "lumina2.h"

#include <stdio.h>
#include <stdlib.h>

st_status lumina_joint_create(model *m, lumina_joint *j, const lumina_style *style, int64_t rows, int64_t ada_in)
{
    const model_config *c = &m->cfg;
    j->blocks = calloc((size_t)c->depth, sizeof *j->blocks);
    j->seq_blocks = calloc((size_t)c->depth, sizeof *j->seq_blocks);
    if (!j->blocks || !j->seq_blocks) return st_host_oom("a model's blocks");
    char prefix[64];
    for (int i = 0; i < c->depth; i++) {
        lumina_block *b = &j->blocks[i];
        *b = (lumina_block){.m = m, .modulated = true, .rows = rows, .kv_heads = c->heads, .ffn = c->ffn_dim,
                            .eps = (float)c->norm_eps, .rope = &j->rope, .mask = &j->maskp, .ada_in = ada_in,
                            .style = style};
        snprintf(prefix, sizeof prefix, "layers.%d", i);
        lumina_block_register(&m->own_params, b, prefix, c);
        j->seq_blocks[i] = (block){.kind = &lumina_block_kind, .self = b, .index = i};
    }
    m->seq[0] = (block_seq){.name = "layers", .n = (int)c->depth, .blocks = j->seq_blocks, .state_n = 1,
                            .pool = m->pool};
    m->n_seq = 1;
    return ST_OK;
}

void lumina_joint_destroy(lumina_joint *j)
{
    free(j->blocks), free(j->seq_blocks);
    j->blocks = NULL, j->seq_blocks = NULL;
}

void lumina_joint_set_batch(model *m, const lumina_joint *j, int64_t batch)
{
    m->shape.batch = batch;
    m->seq[0].state_numel[0] = batch * j->blocks[0].rows * m->shape.hidden;
}

st_status lumina_joint_forward(model *m, lumina_joint *j, const lumina_joint_parts *parts, const float *x,
                               const float *timesteps, const float *cond, bool train)
{
    if (j->active) return st_fail(ST_ERR_INTERNAL, "model_forward: the previous forward was not released");
    j->active = true;
    float *x0 = NULL;
    st_status st = parts->embed(m, x, timesteps, cond, train, &x0);
    if (!st) {
        block_state first = {.n = 1, .t = {x0}};
        x0 = NULL; /* the executor owns it now */
        st = seq_forward(&m->seq[0], &m->plan[0], model_offload(m), &first, train, &j->last, &j->run);
    }
    pool_free(m->pool, x0);
    if (!st) st = parts->final(m, train);
    if (st) parts->release(m);
    return st;
}

void lumina_joint_release(model *m, lumina_joint *j)
{
    seq_release(j->run);
    j->run = NULL;
    state_free(m->pool, &j->last);
    pool_free(m->pool, j->rope), pool_free(m->pool, j->kb);
    j->rope = j->kb = NULL, j->maskp = NULL;
    j->active = false;
}
