/* The single-stream DiT family, internal to src/models. */
#ifndef SEGTRAIN_MODELS_DIT_H
#define SEGTRAIN_MODELS_DIT_H

#include "segtrain/executor.h"
#include "segtrain/lin.h"
#include "segtrain/model.h"
#include "segtrain/plan.h"

#define DIT_LN_EPS 1e-6f
#define DIT_FREQ_DIM 256 /* timestep frequency embedding width */


typedef struct dit_shape {
    int64_t batch, tokens, hidden, heads;
    attention_mechanism mechanism;
} dit_shape;

typedef struct dit_block {
    struct model *m;
    lin_layer ada, qkv, proj, fc1, fc2;
} dit_block;

/* The forward state of one step, alive from model_forward to model_backward or model_release. */
typedef struct dit_step {
    bool active;
    int64_t *labels;                         /* (B) */
    float *patches, *tokens;                 /* (N, C p p), (N, D): the first state */
    float *tfreq, *th, *ts, *c;              /* timestep/label embedding path, (B, 256) and (B, D) each */
    block_state last;                        /* the last block's output */
    float **dhidden;                         /* per captured block: the caller's gradient for its output */
    seq_run *run;
    float *fmod, *ln, *hf, *pred;            /* final layer: (B, 2D), (N, D), (N, D), (B, C, H, W) */
    op_state fstats;
} dit_step;

struct model {
    model_config cfg;
    pool *pool;
    param_set *params;
    param_set own_params;
    dit_shape shape;
    struct {
        float *cs, *dcs; /* the blocks' context SiLU(c) (B, D) and its gradient */
    } ctx;
    block_seq seq;
    dit_block *block_data;
    seq_plan plan;
    offload off; /* engine NULL until a host pool is set */
    bool *captured; /* per block: its output is wanted after forward */
    int *capture;   /* the captured blocks, in the order given */
    int n_capture;
    int p_x_w, p_x_b, p_t0_w, p_t0_b, p_t2_w, p_t2_b, p_y, p_pos, p_fa_w, p_fa_b, p_fl_w, p_fl_b;
    dit_step step;
};

extern const block_kind dit_block_kind;

#endif
