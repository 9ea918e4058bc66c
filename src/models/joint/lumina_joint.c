/* One sequence of lumina2_block.c's blocks over each sample's joint rows: ERNIE-Image's and Ideogram 4's skeleton
 * (lumina2.h). The families make the rows, the rotary tables and the key mask; this owns the blocks (model_chain runs
 * them). Also the final layer the four families on lumina2_block.c share. */
#include "models/joint/lumina2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

st_status lumina_joint_create(model *m, lumina_joint *j, const lumina_style *style, int64_t rows, int64_t ada_in)
{
    const model_config *c = &m->cfg;
    j->blocks = model_seq_blocks(m, 0, "layers", (int)c->depth, &lumina_block_kind, sizeof *j->blocks);
    if (!j->blocks) return st_host_oom("a model's blocks");
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


void lumina_joint_set_batch(model *m, const lumina_joint *j, int64_t batch)
{
    m->shape.batch = batch;
    m->seq[0].state_numel[0] = batch * j->blocks[0].rows * m->shape.hidden;
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

/* ---- the final layer ---- */

st_status lumina_final_forward(model *m, lumina_final *f, st_status (*rows)(model *m, float *img), const float *c,
                               bool train)
{
    const model_config *mc = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = mc->hidden, N = B * T, P = model_patch_dim(mc);
    const int64_t M = f->shift ? 2 * D : D, n = B * model_sample_numel(mc);
    st_status st = ST_OK;
    model_hold(m, &st, &f->img, N * D, "final.rows", false);
    model_hold(m, &st, &f->ln, N * D, "final.ln", false);
    model_hold(m, &st, &f->mods, B * M, "final.modulation", false);
    if (!f->shift) model_hold(m, &st, &f->zero, B * D, "final.shift", true);
    model_hold(m, &st, &f->h, N * D, "final.h", false);
    model_hold(m, &st, &f->out, N * P, "final.out", false);
    model_hold(m, &st, &f->pred, n, "pred", false);
    if (st) return st;
    if ((st = rows(m, f->img))) return st;
    if ((st = lin_forward(m->params, m->pool, &f->mod, f->mods, c, B))) return st;
    if ((st = layernorm_forward(m->pool, f->ln, f->img, NULL, NULL, N, D, f->eps, train ? &f->stats : NULL))) return st;
    const int64_t sc = f->shift_first ? D : 0, sh = D - sc; /* the scale's and the shift's rows in mods */
    modulate_forward(f->h, f->ln, f->shift ? f->mods + sh : f->zero, f->mods + sc, B, T, D, M);
    linear_forward(f->out, f->h, param_at(m->params, f->out_w)->w, param_at(m->params, f->out_b)->w, N, D, P);
    const patch_shape ps = model_patches(m);
    unpatchify_forward(f->pred, f->out, &ps, PATCH_DIT);
    if (f->sign != 1.0f) scale_by(f->pred, n, f->sign);
    return ST_OK;
}

st_status lumina_final_backward(model *m, lumina_final *f, scratch *k, const float *dpred, const float *c, float *dc,
                                float *drows)
{
    const model_config *mc = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = mc->hidden, N = B * T, P = model_patch_dim(mc);
    const int64_t M = f->shift ? 2 * D : D, n = B * model_sample_numel(mc);
    float *dout = scratch_take_zero(k, N * P, MEM_WORKSPACE, "final.dout");
    float *dh = scratch_take_zero(k, N * D, MEM_WORKSPACE, "final.dh");
    float *dmods = scratch_take_zero(k, B * M, MEM_WORKSPACE, "final.dmodulation");
    float *signed_dpred = f->sign != 1.0f ? scratch_take(k, n, MEM_WORKSPACE, "final.dpred") : NULL;
    if (k->status) return k->status;
    if (signed_dpred) {
        copy_rows(signed_dpred, n, dpred, n, 1, n);
        scale_by(signed_dpred, n, f->sign);
        dpred = signed_dpred;
    }
    const patch_shape ps = model_patches(m);
    const param *w = param_at(m->params, f->out_w), *b = param_at(m->params, f->out_b);
    unpatchify_backward(dout, dpred, &ps, PATCH_DIT);
    linear_backward(dh, w->g, b->g, dout, f->h, w->w, N, D, P);
    const int64_t sc = f->shift_first ? D : 0, sh = D - sc;
    modulate_backward(dh, f->shift ? dmods + sh : NULL, dmods + sc, dh, f->ln, f->mods + sc, B, T, D, M);
    const st_status st = lin_backward(m->params, m->pool, &f->mod, dc, dmods, c, B);
    if (!st) layernorm_backward(drows, NULL, NULL, dh, f->img, NULL, N, D, &f->stats);
    return st;
}

void lumina_final_release(model *m, lumina_final *f)
{
    op_state_release(&f->stats);
}
