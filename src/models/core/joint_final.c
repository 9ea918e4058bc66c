/* The final layer of the joint families and ZLab I1 (joint_final.h). */
#include "models/core/joint_final.h"

#define W(i) (param_at(m->params, (i))->w)
#define G(i) (param_at(m->params, (i))->g)

/* The scale's and the shift's rows in a sample's modulation */
static int64_t scale_at(const joint_final *f, int64_t D) { return f->shift_first ? D : 0; }
static int64_t shift_at(const joint_final *f, int64_t D) { return f->shift_first ? 0 : D; }

/* ln = norm(img), its statistics kept when asked */
static st_status norm_forward(model *m, const joint_final *f, int64_t N, op_state *stats)
{
    const int64_t D = m->shape.hidden;
    if (!f->rms) return layernorm_forward(m->pool, f->ln, f->img, NULL, NULL, N, D, f->eps, stats);
    return (f->zero_centred ? rmsnorm_zc_forward : rmsnorm_forward)(m->pool, f->ln, f->img, W(f->norm), N, D, f->eps,
                                                                    stats);
}

/* mods from c: mod(c), or c on each of the rows plus the table */
static st_status mods_forward(model *m, const joint_final *f, const float *c)
{
    const int64_t B = m->shape.batch, D = m->shape.hidden, M = f->n_mod * D;
    if (f->mod.w >= 0) return lin_forward(m->params, m->pool, &f->mod, f->mods, c, B);
    for (int64_t b = 0; b < B; b++) copy_rows(f->mods + b * M, D, c + b * D, 0, f->n_mod, D);
    if (f->table >= 0) add_row(f->mods, W(f->table), B, M);
    return ST_OK;
}

st_status joint_final_forward(model *m, joint_final *f, const float *c, bool train)
{
    const model_config *mc = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = mc->hidden, N = B * T, P = model_patch_dim(mc);
    const int64_t M = f->n_mod * D, n = B * model_sample_numel(mc);
    st_status st = ST_OK;
    model_hold(m, &st, &f->img, N * D, "final.rows", false);
    model_hold(m, &st, &f->ln, N * D, "final.norm", false);
    if (M) model_hold(m, &st, &f->mods, B * M, "final.modulation", false);
    if (f->n_mod == 1) model_hold(m, &st, &f->zero, B * D, "final.shift", true);
    if (M) model_hold(m, &st, &f->h, N * D, "final.h", false);
    model_hold(m, &st, &f->y, N * P, "final.out", false);
    model_hold(m, &st, &f->pred, n, "pred", false);
    if (st) return st;
    if (f->rows_of) st = f->rows_of(m, f->img);
    else model_rows_gather(m, f->img, m->step.last.t[0], f->rows, f->at, T);
    if (!st && M) st = mods_forward(m, f, c);
    if (!st) st = norm_forward(m, f, N, train ? &f->stats : NULL);
    if (st) return st;
    const float *h = M ? f->h : f->ln;
    if (M) modulate_forward(f->h, f->ln, f->n_mod == 1 ? f->zero : f->mods + shift_at(f, D), f->mods + scale_at(f, D),
                            B, T, D, M);
    if ((st = lin_forward(m->params, m->pool, &f->out, f->y, h, N))) return st;
    if (f->negate) scale_by(f->y, N * P, -1.0f);
    const patch_shape ps = model_patches(m);
    unpatchify_forward(f->pred, f->y, &ps, f->order);
    return ST_OK;
}

/* dc += dL/dc from dmods: through mod, or each row's and the table's sums */
static st_status mods_backward(model *m, const joint_final *f, const float *dmods, const float *c, float *dc)
{
    const int64_t B = m->shape.batch, D = m->shape.hidden, M = f->n_mod * D;
    if (f->mod.w >= 0) return lin_backward(m->params, m->pool, &f->mod, dc, dmods, c, B);
    float *dtable = f->table >= 0 ? G(f->table) : NULL;
    for (int64_t b = 0; b < B; b++) {
        for (int r = 0; r < f->n_mod; r++) add_to(dc + b * D, dmods + b * M + r * D, D);
        if (dtable) add_to(dtable, dmods + b * M, M);
    }
    return ST_OK;
}

st_status joint_final_backward(model *m, joint_final *f, scratch *k, const float *dpred, const float *c, float *dc,
                               float *drows)
{
    const model_config *mc = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = mc->hidden, N = B * T, P = model_patch_dim(mc);
    const int64_t M = f->n_mod * D, n = B * model_sample_numel(mc);
    f->dout = scratch_take_zero(k, N * P, MEM_WORKSPACE, "final.dout");
    f->dh = scratch_take_zero(k, N * D, MEM_WORKSPACE, "final.dh");
    float *dmods = M ? scratch_take_zero(k, B * M, MEM_WORKSPACE, "final.dmodulation") : NULL;
    const bool copy = f->negate && !f->negate_late;
    float *signed_dpred = copy ? scratch_take(k, n, MEM_WORKSPACE, "final.dpred") : NULL;
    if (k->status) return k->status;
    if (copy) {
        copy_rows(signed_dpred, n, dpred, n, 1, n);
        scale_by(signed_dpred, n, -1.0f);
        dpred = signed_dpred;
    }
    const patch_shape ps = model_patches(m);
    unpatchify_backward(f->dout, dpred, &ps, f->order);
    if (f->negate_late) scale_by(f->dout, N * P, -1.0f);
    st_status st = lin_backward(m->params, m->pool, &f->out, f->dh, f->dout, M ? f->h : f->ln, N);
    if (!st && M) {
        const int64_t sc = scale_at(f, D);
        modulate_backward(f->dh, f->n_mod == 1 ? NULL : dmods + shift_at(f, D), dmods + sc, f->dh, f->ln, f->mods + sc,
                          B, T, D, M);
        st = mods_backward(m, f, dmods, c, dc);
    }
    if (st) return st;
    if (!f->rms) layernorm_backward(drows, NULL, NULL, f->dh, f->img, NULL, N, D, &f->stats);
    else if (f->zero_centred)
        st = rmsnorm_zc_backward(m->pool, drows, G(f->norm), f->dh, f->img, W(f->norm), N, D, &f->stats);
    else rmsnorm_backward(drows, G(f->norm), f->dh, f->img, W(f->norm), N, D, &f->stats);
    return st;
}

st_status joint_last_forward(model *m, joint_final *f, int q, float **joint, const float *c, bool train,
                             const float **pred)
{
    st_status st = model_seq_forward1(m, q, joint, train, NULL);
    if (!st) st = joint_final_forward(m, f, c, train);
    if (!st) *pred = f->pred;
    return st;
}

st_status joint_final_head_backward(model *m, joint_final *f, scratch *k, const float *dpred, const float *c, float *dc,
                                    const char *what, float **dx)
{
    const int64_t n = m->shape.batch * m->shape.tokens * m->shape.hidden;
    float *dimg = scratch_take_zero(k, n, MEM_WORKSPACE, "final.drows");
    st_status st = k->status;
    if (!st) st = joint_final_backward(m, f, k, dpred, c, dc, dimg);
    return st ? st : model_rows_grad(m, dimg, f->rows, f->at, what, dx);
}

void joint_final_release(joint_final *f) { op_state_release(&f->stats); }
