/* AuraFlow (diffusers' AuraFlowTransformer2DModel), internal to src/models: its blocks (auraflow_block.c) and what
 * the model (auraflow.c) shares with them. */
#ifndef SEGTRAIN_MODELS_AURAFLOW_H
#define SEGTRAIN_MODELS_AURAFLOW_H

#include "models/core/internal.h"

#define AF_LN_EPS 1e-5f /* FP32LayerNorm's (nn.LayerNorm's default): the blocks' norms and the q/k norms */

/* One stream's weights, all without bias: adaLN-Zero (6D: shift, scale, gate of attention, then of the
 * feed-forward), q/k/v, the output projection and the SwiGLU feed-forward (ff1, ff2: D -> F; ff3: F -> D). */
typedef struct af_stream {
    lin_layer ada, q, k, v, out, ff1, ff2, ff3;
} af_stream;

/* A joint block has an image stream [0] and a text stream [1] (n = 2); a single block one stream over the
 * joint sequence [text; image] (n = 1). */
typedef struct af_block {
    struct model *m;
    int n;
    af_stream s[2];
} af_block;

/* AuraFlowFeedForward's hidden width: 2/3 of 4D, rounded up to a multiple of 256. */
int64_t af_ffn_width(int64_t D);
void af_joint_register(param_set *ps, af_block *b, int i, const model_config *c);
void af_single_register(param_set *ps, af_block *b, int i, const model_config *c);

extern const block_kind af_joint_kind, af_single_kind;

#endif
