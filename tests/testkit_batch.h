/* Seeded training batches for the model tests (testkit.c). */
#ifndef SEGTRAIN_TESTKIT_BATCH_H
#define SEGTRAIN_TESTKIT_BATCH_H

#include "segtrain/model.h"
#include "segtrain/objective.h"

typedef struct tk_batch {
    int64_t n, per; /* samples, floats per sample */
    float *x0, *noise, *t;
    float *y; /* n x model_cond_len */
} tk_batch;

/* x0 and noise standard normal (streams 1 and 2 of the seed), t in (0.1, 0.9) (stream 3), labels
 * (i * 7) mod (classes + 1), which includes the null label, or for a captioned family captions of 0 .. 3 words
 * (the empty one: only padding). A token model's x0 is ids instead (tk_token_ids). */
tk_batch tk_random_batch(const model_config *mc, int64_t n, uint64_t seed);
/* A token model's data (model_tokens): count floats of ids, each column of a sample's rows below its vocabulary
 * (the codebooks' classes, the last column the text's), spread by the seed; nothing for another model. */
void tk_token_ids(const model_config *mc, float *x0, int64_t count, uint64_t seed);
flow_batch tk_flow(const tk_batch *b);
void tk_free_batch(tk_batch *b);

/* The peaks of flow_loss (forward and backward) on a batch of n samples held outside the pools, as the model
 * tests run it, predicted by running it dry: the model of mc planned by cs on dry pools. *dev's peak counts from
 * the model's resident bytes (weights, gradients), as a real pool's after pool_reset_peak. */
void tk_dry_loss(const model_config *mc, const ckpt_settings *cs, int64_t n, pool_stats *dev, pool_stats *host);
/* The same, with the link's traffic of the step (advise.h: the swapped weights brought in, offload's copies). */
struct link_traffic;
void tk_dry_loss_moved(const model_config *mc, const ckpt_settings *cs, int64_t n, pool_stats *dev, pool_stats *host,
                       struct link_traffic *moved);
/* The same dry step, then the model given to after before it goes: its sizes are the step's (a family's inputs
 * sized by the batch). */
void tk_dry_model(const model_config *mc, const ckpt_settings *cs, int64_t n, void (*after)(model *m, void *ctx),
                  void *ctx);

#endif
