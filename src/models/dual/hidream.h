/* HiDream (diffusers' HiDreamImageTransformer2DModel), internal to src/models: its blocks (hidream_block.c) and
 * what the model (hidream.c) shares with them. */
#ifndef SEGTRAIN_MODELS_HIDREAM_H
#define SEGTRAIN_MODELS_HIDREAM_H

#include "models/core/internal.h"

#define HD_LN_EPS 1e-6f  /* the blocks' LayerNorms (no affine) */
#define HD_RMS_EPS 1e-5f /* q_rms_norm and k_rms_norm: nn.RMSNorm(inner_dim) at its default eps */
#define HD_EXPERTS_MAX 16

/* HiDreamImageFeedForwardSwiGLU's hidden width for hidden_dim: 2/3 of it, rounded up to a multiple of 256. */
int64_t hd_ffn_width(int64_t hidden_dim);

/* A SwiGLU feed-forward w2(silu(w1 x) * w3 x), no bias. */
typedef struct hd_ffn {
    lin_layer w1, w2, w3;
} hd_ffn;

/* A double block (n = 2: the image stream [0] and the text stream [1], whose input is the initial text followed
 * by this block's Llama tokens, which only give keys and values) or a single block (n = 1: the joint
 * [text; image] state followed by its Llama tokens, likewise). One adaLN linear of n 6D (shift, scale, gate of
 * attention, then of the feed-forward, per stream); attention with q/k/v/out biased and q, k RMSNorm'd over the
 * whole width; the image stream's feed-forward the mixture of experts (`experts` routed SwiGLUs of width F, k of
 * them per token by the gate, plus the shared expert of width Fs), the text stream's ff_t a SwiGLU of width F. */
typedef struct hd_block {
    struct model *m;
    int n, index; /* index: the block's Llama tokens, caption_projection.{index}'s */
    lin_layer ada, q[2], k[2], v[2], out[2];
    int nq[2], nk[2]; /* the RMSNorms' weights (D) */
    hd_ffn ff_t, shared, expert[HD_EXPERTS_MAX];
    int gate; /* ff_i.gate.weight (experts, D) */
} hd_block;

void hd_double_register(param_set *ps, hd_block *b, int i, const model_config *c);
void hd_single_register(param_set *ps, hd_block *b, int i, const model_config *c);
/* Block `index`'s projected Llama tokens (B, llama_len, D) for the step, and their gradient (NULL when the
 * projection does not train). */
float *hd_llama(const struct model *m, int index, bool grad);

extern const block_kind hd_double_kind, hd_single_kind;

#endif
