/* What the joint families share beyond models/core (joint.h): Krea 2's and Qwen-Image 2.1's text input MLP, and the
 * output projection of the families on lumina2_block.c. */
#include "models/joint/joint.h"

#include <stdio.h>

#define W(i) (param_at(m->params, (i))->w)
#define G(i) (param_at(m->params, (i))->g)

lin_layer joint_out_register(param_set *s, const char *name, int64_t in, int64_t out, bool trainable)
{
    char n[PARAM_NAME_MAX];
    lin_layer l = {.lora_a = -1, .lora_b = -1, .in = in, .out = out};
    snprintf(n, sizeof n, "%s.weight", name);
    l.w = param_add(s, n, 2, (int64_t[]){out, in}, trainable);
    snprintf(n, sizeof n, "%s.bias", name);
    l.b = param_add(s, n, 1, (int64_t[]){out}, trainable);
    return l;
}

/* ---- the text input MLP ---- */

st_status txt_in_forward(model *m, txt_in *t, float *y, const float *x, int64_t n, bool train)
{
    const int64_t in = t->l1.in, D = t->l1.out;
    st_status st = ST_OK;
    model_hold(m, &st, &t->xn, n * in, "txt_in.norm", false);
    model_hold(m, &st, &t->a, n * D, "txt_in.linear_1", false);
    model_hold(m, &st, &t->g, n * D, "txt_in.gelu", false);
    if (!st) st = rmsnorm_zc_forward(m->pool, t->xn, x, W(t->norm), n, in, t->eps, train ? &t->stats : NULL);
    if (!st) st = lin_forward(m->params, m->pool, &t->l1, t->a, t->xn, n);
    if (!st) gelu_forward(t->g, t->a, n * D);
    if (!st) st = lin_forward(m->params, m->pool, &t->l2, y, t->g, n);
    return st;
}

st_status txt_in_backward(model *m, txt_in *t, scratch *k, float *dx, const float *dy, const float *x, int64_t n)
{
    const int64_t in = t->l1.in, D = t->l1.out;
    float *dg = scratch_take_zero(k, n * D, MEM_WORKSPACE, "txt_in.dgelu");
    float *da = scratch_take_zero(k, n * D, MEM_WORKSPACE, "txt_in.dlinear_1");
    float *dxn = scratch_take_zero(k, n * in, MEM_WORKSPACE, "txt_in.dnorm");
    st_status st = k->status;
    if (!st) st = lin_backward(m->params, m->pool, &t->l2, dg, dy, t->g, n);
    if (!st) gelu_backward(da, dg, t->a, n * D);
    if (!st) st = lin_backward(m->params, m->pool, &t->l1, dxn, da, t->xn, n);
    if (!st) st = rmsnorm_zc_backward(m->pool, dx, G(t->norm), dxn, x, W(t->norm), n, in, &t->stats);
    return st;
}

st_status txt_in_joint_rows(model *m, txt_in *t, const lin_layer *img, float *joint, float *part, const float *text,
                            float *patches, const float *x, bool train)
{
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = L + T;
    st_status st = txt_in_forward(m, t, part, text, B * L, train);
    if (!st) model_rows_scatter(m, joint, part, S, 0, L);
    const patch_shape ps = model_patches(m);
    if (!st) patchify_forward(patches, x, &ps);
    if (!st) st = lin_forward(m->params, m->pool, img, part, patches, B * T);
    if (!st) model_rows_scatter(m, joint, part, S, L, T);
    return st;
}
