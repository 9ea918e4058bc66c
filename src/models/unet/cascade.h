/* Stable Cascade's stage C (cascade.c, cascade_block.c): StableCascadeUNet as one sequence of micro-blocks; internal to
 * src/models. */
#ifndef SEGTRAIN_MODELS_CASCADE_H
#define SEGTRAIN_MODELS_CASCADE_H

#include "models/unet/micro_seq.h"

#define CASCADE_EPS 1e-6f /* SDCascadeLayerNorm's, the clip norm's */
#define CASCADE_TIME_CONDS 3 /* the timestep ratio's embedding, then sca's and crp's (zero here) */

typedef enum cascade_role { SC_EMBED, SC_RES, SC_TIME, SC_ATTN, SC_DOWN, SC_UP } cascade_role;

/* What every block reads beside its state: the time embeddings (B, 3 D) and SiLU of the conditioning tokens
 * (B, tokens, width), with that's gradient, which the AttnBlocks' kv_mappers accumulate */
typedef struct cascade_ctx {
    const float *r_embed;
    const float *clip_s;
    float *dclip_s;
    int64_t tokens;
    bool train;            /* a training forward: dropout applies */
    uint64_t dropout_seed; /* the step's masks */
} cascade_ctx;

typedef struct cascade_block {
    struct model *m;
    const cascade_ctx *cx;
    cascade_role role;
    int64_t cin, cout, h, w; /* the stream's channels in and out, its edges at the input */
    int64_t cskip;           /* an up level's first ResBlock: the skip's channels, read after its norm's output */
    skip_io io;              /* its states; its output is also a skip at a down level's last block */
    int64_t heads;
    float dropout;                 /* its level's (ResBlock: after GRN; AttnBlock: after the output projection) */
    uint64_t stream;               /* its dropout masks' stream (its place in the sequence) */
    conv_layer dw;                 /* SDCascadeResBlock: depthwise */
    int gamma, beta;               /* ... GlobalResponseNorm */
    lin_layer l1, l2;              /* ... channelwise.0, channelwise.4 */
    lin_layer map[CASCADE_TIME_CONDS]; /* SDCascadeTimestepBlock: mapper, mapper_sca, mapper_crp */
    lin_layer q, k, v, o, kv;      /* SDCascadeAttnBlock: attention.to_*, kv_mapper.1 */
    int conv_w, conv_b;            /* embedding.1, down_downscalers.*.1, up_upscalers.*.1 */
} cascade_block;

extern const block_kind cascade_block_kind;

#endif
