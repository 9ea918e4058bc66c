/* The final layer of the joint families and ZLab I1 (joint_final.c): an RMSNorm or a LayerNorm of the image rows,
 * modulated or not, then the output projection. */
#ifndef SEGTRAIN_MODELS_JOINT_FINAL_H
#define SEGTRAIN_MODELS_JOINT_FINAL_H

#include "models/core/internal.h"

/* The final layer: pred = (-) unpatchify(out(norm(rows) (1 + scale) + shift)), rows the image tokens' (B T, D) of
 * the last state. norm is a LayerNorm without affine, or (rms) an RMSNorm of weight norm (zero_centred: a scale of
 * 1 + weight); the modulation (B, n_mod D) is mod(c), or with mod.w < 0 c on each row plus table (Krea 2's), or none
 * (n_mod 0). The family registers the weights and sets the options; the rest is a step's. */
typedef struct joint_final {
    lin_layer mod, out;
    bool rms, zero_centred;
    int norm, table;
    int n_mod;        /* a sample's modulation rows: 0, 1 (the scale, no shift) or 2 */
    bool shift_first; /* (shift, scale), else (scale, shift) */
    float eps;
    bool negate;      /* the prediction is the output negated */
    bool negate_late; /* ... and backward negates dout itself (MiniMax-H3's), not a copy of dpred before it */
    patch_order order;
    /* the image rows: rows_of's, or each sample's from row `at` of its `rows` in the last state */
    st_status (*rows_of)(model *m, float *img);
    int64_t rows, at;
    float *img, *ln, *mods, *zero, *h, *y, *pred;
    float *dout, *dh; /* backward's, in the caller's scratch */
    op_state stats;
} joint_final;
/* Takes the step's buffers and makes pred from the last state and c (B, mod.in; NULL without a modulation) */
st_status joint_final_forward(model *m, joint_final *f, const float *c, bool train);
/* From dpred: the weights' gradients, dc += dL/dc, drows += dL/d(rows); its workspace taken from k (the caller's,
 * alive to its end) */
st_status joint_final_backward(model *m, joint_final *f, scratch *k, const float *dpred, const float *c, float *dc,
                               float *drows);
/* The last sequence q from the joint rows *joint (the executor takes them over: *joint becomes NULL), then the final
 * layer from c: *pred */
st_status joint_last_forward(model *m, joint_final *f, int q, float **joint, const float *c, bool train,
                             const float **pred);
/* A model_chain head_backward's: the final layer back into dL/d(the image rows) from k, then *dx (model_rows_grad's,
 * named what) over the rows of the last state */
st_status joint_final_head_backward(model *m, joint_final *f, scratch *k, const float *dpred, const float *c, float *dc,
                                    const char *what, float **dx);
void joint_final_release(joint_final *f);

#endif
