/* A model's named parameters: one pool allocation for all weights (MEM_WEIGHTS) and one for the gradients of
 * the trainable ones (MEM_GRADIENTS), each parameter a named slice of them. Names and layouts are the public
 * state_dict's, so that safetensors files load by name. */
#ifndef SEGTRAIN_PARAMS_H
#define SEGTRAIN_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/pool.h"

#define PARAM_NAME_MAX 128
#define PARAM_MAX_DIMS 4

typedef struct param {
    char name[PARAM_NAME_MAX];
    int ndim;
    int64_t shape[PARAM_MAX_DIMS];
    int64_t numel;
    float *w;
    float *g;       /* NULL for a frozen parameter */
    bool trainable; /* has a gradient and optimizer state */
    bool fixed;     /* a fixed buffer (pos_embed): saved with the weights, loaded only if a file has it */
} param;

typedef struct param_set {
    int n, cap;
    param *items;
    pool *pool;
    float *weights, *grads;
    int64_t weight_count, grad_count; /* floats, counted as parameters are registered */
    int too_large; /* 1 + the index of the first parameter that took a size or the total past CK_MAX_ELEMENTS */
    bool oom;      /* the list could not grow: param_add returned -1 from then on */
} param_set;

/* Registers a parameter (before param_set_alloc) and returns its index; -1 when out of memory, which
 * param_set_check reports. */
int param_add(param_set *s, const char *name, int ndim, const int64_t *shape, bool trainable);
int param_add_fixed(param_set *s, const char *name, int ndim, const int64_t *shape);
param *param_at(param_set *s, int index);
param *param_find(param_set *s, const char *name);

/* ST_ERR_HOST_OOM if a registration ran out of memory; else ST_ERR_INVALID naming the first parameter whose
 * size, or the parameters' total, exceeds CK_MAX_ELEMENTS. */
st_status param_set_check(const param_set *s);
/* Allocates weights and gradients from the pool and points every parameter into them (after param_set_check). */
st_status param_set_alloc(param_set *s, pool *p);
void param_set_free(param_set *s);

void param_set_zero_grads(param_set *s);

/* Which parameters a file holds: all of them, the trainable ones (LoRA adapters when training LoRA), or the
 * frozen ones (the base model under LoRA). */
typedef enum param_part { PARAMS_ALL, PARAMS_TRAINABLE, PARAMS_FROZEN } param_part;

/* Reads the parameters of `part` from a safetensors file by name and shape. A missing tensor (other than a fixed
 * one), an unexpected tensor (unless its name starts with other_prefix, e.g. "optimizer." in a checkpoint), a
 * wrong shape or dtype is one error line naming the file and the tensor. */
st_status param_set_load(param_set *s, const char *path, param_part part, const char *other_prefix);

/* A named float tensor to write beside the parameters. */
typedef struct named_floats {
    const char *name;
    int ndim;
    int64_t shape[PARAM_MAX_DIMS];
    const float *data;
} named_floats;

/* Writes the weights of `part` (or, with grads, the gradients of its trainable parameters), each under the
 * parameter's own name, then `extra` (F32 tensors such as the loss or optimizer state), with metadata pairs.
 * Atomic. */
st_status param_set_save(param_set *s, const char *path, param_part part, bool grads, const named_floats *extra,
                         int n_extra, const char *const *meta, int n_meta);

#endif
