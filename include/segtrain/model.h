/* Model families, given by their block topology. A model owns its parameters, embeds the inputs into the
 * first state of its block sequences, runs them through an executor, and turns the last state into the
 * prediction. Forward keeps what backward needs; backward accumulates every trainable gradient. */
#ifndef SEGTRAIN_MODEL_H
#define SEGTRAIN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/block.h"
#include "segtrain/config.h"
#include "segtrain/ops.h"
#include "segtrain/params.h"

typedef struct model_config {
    char family[16]; /* "dit" */
    char preset[16];
    int64_t depth, hidden, heads, patch, channels, resolution, classes;
    attention_mechanism mechanism;
} model_config;

/* A named preset's sizes ("dit-tiny", "dit-s2", "dit-b2", "dit-xl2"). */
st_status model_preset(const char *name, model_config *out);
/* The model keys of a run configuration: model_preset's sizes, overridden by any size given explicitly. */
st_status model_config_from(const config *cfg, model_config *out);
/* Checks sizes that must fit together (heads divide the width, the patch divides the resolution, ...). */
st_status model_config_check(const model_config *mc);

typedef struct model model;

st_status model_create(const model_config *mc, pool *device, model **out);
void model_destroy(model *m);

const model_config *model_get_config(const model *m);
param_set *model_params(model *m);
/* The model's block sequences (DiT has one). */
int model_sequences(model *m, block_seq **seqs);

/* The family's own initialisation (DiT: xavier linears, zero adaLN), or, with random_all, seeded non-zero
 * values in every tensor, so that every gradient is non-zero (for gradient checks). */
void model_init(model *m, uint64_t seed, bool random_all);

/* Predicts from x (batch, channels, res, res), timesteps (batch) and labels (batch; `classes` is the null
 * label). *pred (same shape as x) stays valid until model_backward or model_release. With train, forward keeps
 * what backward needs. */
st_status model_forward(model *m, const float *x, const float *timesteps, const int64_t *labels, int64_t batch,
                        bool train, const float **pred);
/* Accumulates into the trainable gradients from dpred, then releases forward's state. */
st_status model_backward(model *m, const float *dpred);
/* Releases forward's state without a backward. */
void model_release(model *m);

#endif
