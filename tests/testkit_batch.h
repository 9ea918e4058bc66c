/* Seeded training batches for the model tests (testkit.c). */
#ifndef SEGTRAIN_TESTKIT_BATCH_H
#define SEGTRAIN_TESTKIT_BATCH_H

#include "segtrain/model.h"
#include "segtrain/objective.h"

typedef struct tk_batch {
    int64_t n, per; /* samples, floats per sample */
    float *x0, *noise, *t;
    int64_t *y; /* n x model_cond_len */
} tk_batch;

/* x0 and noise standard normal (streams 1 and 2 of the seed), t in (0.1, 0.9) (stream 3), labels
 * (i * 7) mod (classes + 1), which includes the null label, or for a captioned family captions of 0 .. 3 words
 * (the empty one: only padding). */
tk_batch tk_random_batch(const model_config *mc, int64_t n, uint64_t seed);
flow_batch tk_flow(const tk_batch *b);
void tk_free_batch(tk_batch *b);

#endif
