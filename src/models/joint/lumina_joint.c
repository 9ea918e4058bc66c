/* One sequence of lumina2_block.c's blocks over each sample's joint rows: ERNIE-Image's, Ideogram 4's and OmniGen's
 * skeleton (lumina2.h). The families make the rows and fill the rotary tables and the key mask this takes; this owns
 * the blocks (model_chain runs them). */
#include "models/joint/lumina2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

st_status lumina_joint_create(model *m, lumina_joint *j, const lumina_style *style, int64_t rows, int64_t ada_in)
{
    const model_config *c = &m->cfg;
    j->blocks = model_seq_blocks(m, 0, "layers", (int)c->depth, &lumina_block_kind, sizeof *j->blocks);
    if (!j->blocks) return st_host_oom("a model's blocks");
    m->seq_sample[0] = rows * m->shape.hidden;
    char prefix[64];
    for (int i = 0; i < c->depth; i++) {
        lumina_block *b = &j->blocks[i];
        *b = (lumina_block){.m = m, .modulated = ada_in > 0, .rows = rows, .ffn = c->ffn_dim,
                            .kv_heads = c->kv_heads ? c->kv_heads : c->heads,
                            .eps = (float)c->norm_eps, .rope = &j->rope, .mask = &j->maskp, .ada_in = ada_in,
                            .style = style};
        snprintf(prefix, sizeof prefix, "layers.%d", i);
        lumina_block_register(&m->own_params, b, prefix, c);
    }
    return ST_OK;
}

st_status lumina_joint_positions(model *m, lumina_joint *j, model_loop_fn fn, const float *cond, int64_t work,
                                 const float *seg)
{
    const int64_t B = m->shape.batch, S = j->blocks[0].rows, hd = m->cfg.hidden / m->cfg.heads;
    st_status st = ST_OK;
    model_hold(m, &st, &j->len, B, "joint.caption_length", false);
    model_hold(m, &st, &j->rope, B * S * hd, "joint.rope", false);
    model_hold(m, &st, &j->kb, B * S, "joint.key_mask", false);
    if (!st) st = model_host_loop(m, j->len, fn, cond, work, "joint.position_ids");
    j->mask = (attn_mask){.key_bias = j->kb, .segment = seg, .causal = seg != NULL, .batch_stride = S};
    j->maskp = &j->mask;
    return st;
}
