/* What the joint families share beyond models/core (joint.c): the text input MLP of Krea 2 and Qwen-Image 2.1 (their
 * final layer is models/core/joint_final.h's). */
#ifndef SEGTRAIN_MODELS_JOINT_H
#define SEGTRAIN_MODELS_JOINT_H

#include "models/core/joint_final.h"

/* A linear layer (name.weight, name.bias) whose weight stays in float when frozen, as lin_register's does not under
 * bf16_base: the output projection of the families on lumina2_block.c */
lin_layer joint_out_register(param_set *s, const char *name, int64_t in, int64_t out, bool trainable);

/* Krea 2's and Qwen-Image 2.1's txt_in: y = linear_2(GELU (tanh)(linear_1(RMSNorm_zc(x)))), x (n, in), y (n, D). */
typedef struct txt_in {
    int norm;
    lin_layer l1, l2;
    float eps;
    float *xn, *a, *g; /* a step's */
    op_state stats;
} txt_in;
/* Takes the step's buffers and makes y (the caller's) from x, n rows */
st_status txt_in_forward(model *m, txt_in *t, float *y, const float *x, int64_t n, bool train);
/* dx (NULL: none) += dL/dx from dy; its workspace from k (the caller's, alive to its end) */
st_status txt_in_backward(model *m, txt_in *t, scratch *k, float *dx, const float *dy, const float *x, int64_t n);
/* The joint rows (B, L + T, D): t's of the text (B L rows) first, then img's of x's patches (patchified into patches),
 * each made in part (B max(L, T) D floats) */
st_status txt_in_joint_rows(model *m, txt_in *t, const lin_layer *img, float *joint, float *part, const float *text,
                            float *patches, const float *x, bool train);

#endif
