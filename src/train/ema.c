/* The average of the trainable weights (ema.h). */
#include "ema.h"

double ema_decay(double decay, int64_t warmup_steps, int64_t k)
{
    if (warmup_steps > 0) return k < warmup_steps ? 0.0 : decay;
    const int64_t s = k - 1; /* EMAModel's step: optimization_step - update_after_step - 1 */
    if (s <= 0) return 0.0;
    const double d = (double)(1 + s) / (double)(10 + s);
    return d < decay ? d : decay;
}

void ema_update(const param_set *ps, float *ema, double d)
{
    const float a = (float)(1.0 - d);
    for (int i = 0; i < ps->n; i++) {
        const param *q = &ps->items[i];
        if (!q->trainable || !q->g) continue;
        float *e = ema + (q->g - ps->grads);
        for (int64_t j = 0; j < q->numel; j++) e[j] -= a * (e[j] - q->w[j]);
    }
}

void ema_swap(param_set *ps, float *ema)
{
    for (int i = 0; i < ps->n; i++) {
        const param *q = &ps->items[i];
        if (!q->trainable || !q->g) continue;
        float *e = ema + (q->g - ps->grads);
        for (int64_t j = 0; j < q->numel; j++) {
            const float w = q->w[j];
            q->w[j] = e[j], e[j] = w;
        }
    }
}
