/* An exponential moving average of the trainable weights (use_ema), as SimpleTuner's EMAModel keeps it; internal to
 * src/train. The average is one float a trainable weight, in the gradient block's order (param_set.grads). */
#ifndef SEGTRAIN_TRAIN_EMA_H
#define SEGTRAIN_TRAIN_EMA_H

#include <stdint.h>

#include "segtrain/params.h"

/* EMAModel.get_decay after optimizer step k (1, 2, ...) at SimpleTuner's settings (update_after_step 0, min_decay 0,
 * no inverse-gamma warm-up): with warmup_steps W > 0, 0 before step W and `decay` from it; else 0 at step 1, then
 * min(k / (k + 9), decay). */
double ema_decay(double decay, int64_t warmup_steps, int64_t k);
/* ema -= (1 - d) (ema - w) over the trainable weights, in float, as torch._foreach_sub_ with alpha 1 - d. */
void ema_update(const param_set *ps, float *ema, double d);
/* Exchanges the trainable weights and the average in place: the weights' writers then write the average, and a
 * second call puts both back. */
void ema_swap(param_set *ps, float *ema);

#endif
