/* Mean squared error. The sum is taken per fixed chunk in double, and chunk sums are added in chunk order,
 * so the value is the same for every thread count. */
#include "internal.h"

#define PAR_MIN ((int64_t)1 << 15)
#define CHUNK ((int64_t)4096)
/* Chunk sums are kept on the stack in groups of this many: no allocation, same order of addition. */
#define GROUP 256
/* Independent accumulators inside a chunk, combined in a fixed order: lets the compiler vectorise. */
#define LANES 8

static double chunk_sq_sum(const float *restrict pred, const float *restrict target, int64_t n)
{
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) {
            double e = (double)pred[i + k] - (double)target[i + k];
            acc[k] += e * e;
        }
    for (int k = 0; i < n; i++, k++) {
        double e = (double)pred[i] - (double)target[i];
        acc[k] += e * e;
    }
    double s = 0;
    for (int k = 0; k < LANES; k++) s += acc[k];
    return s;
}

/* sum((pred - target)^2) over n values */
static double sq_sum_run(const float *pred, const float *target, int64_t n)
{
    if (n <= 0) return 0.0;
    int64_t chunks = (n + CHUNK - 1) / CHUNK;
    double total = 0;
    for (int64_t g0 = 0; g0 < chunks; g0 += GROUP) {
        int64_t gn = chunks - g0 < GROUP ? chunks - g0 : GROUP;
        double part[GROUP];
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t c = 0; c < gn; c++) {
            int64_t lo = (g0 + c) * CHUNK;
            int64_t len = n - lo < CHUNK ? n - lo : CHUNK;
            part[c] = chunk_sq_sum(pred + lo, target + lo, len);
        }
        for (int64_t c = 0; c < gn; c++) total += part[c];
    }
    return total;
}

static float mse_forward_run(const float *pred, const float *target, const float *weight, int64_t batch, int64_t per)
{
    const int64_t n = batch * per;
    if (n <= 0) return 0.0f;
    if (!weight) return (float)(sq_sum_run(pred, target, n) / (double)n);
    double total = 0;
    for (int64_t b = 0; b < batch; b++) total += (double)weight[b] * sq_sum_run(pred + b * per, target + b * per, per);
    return (float)(total / (double)n);
}

static void mse_backward_run(float *restrict dpred, const float *restrict pred, const float *restrict target,
                             const float *weight, int64_t batch, int64_t per, float dloss)
{
    const int64_t n = batch * per;
    if (!dpred || n <= 0) return;
    for (int64_t b = 0; b < batch; b++) {
        const float s = (float)(2.0 * (double)dloss * (weight ? (double)weight[b] : 1.0) / (double)n);
        const int64_t lo = b * per;
#pragma omp parallel for schedule(static) if (per >= PAR_MIN)
        for (int64_t i = lo; i < lo + per; i++) dpred[i] += s * (pred[i] - target[i]);
    }
}

float mse_forward(const float *pred, const float *target, const float *weight, int64_t batch, int64_t per)
{
    const double t0 = prof_now();
    const float r = op_dry(pred) ? 0.0f : mse_forward_run(pred, target, weight, batch, per);
    prof_add(OP_POINTWISE, t0, 0, 8.0 * (double)(batch * per));
    return r;
}

void mse_backward(float *restrict dpred, const float *restrict pred, const float *restrict target, const float *weight,
                  int64_t batch, int64_t per, float dloss)
{
    OP_TIMED(pred, mse_backward_run(dpred, pred, target, weight, batch, per, dloss),
             OP_POINTWISE, 0, 16.0 * (double)(batch * per));
}

void flow_interpolate(float *restrict xt, float *restrict target, float *restrict timesteps, const float *restrict x0,
                      const float *restrict noise, const float *restrict t, int64_t batch, int64_t per)
{
    const double t0 = prof_now();
    if (!op_dry(xt))
        for (int64_t i = 0; i < batch; i++) {
            const float ti = t[i];
            timesteps[i] = 1000.0f * ti;
            for (int64_t j = i * per; j < (i + 1) * per; j++) {
                xt[j] = (1.0f - ti) * x0[j] + ti * noise[j];
                target[j] = noise[j] - x0[j];
            }
        }
    prof_add(OP_POINTWISE, t0, 0, 20.0 * batch * per);
}

/* ---- token cross-entropy ---- */

/* Rows whose terms are kept on the stack at once: each row's in its own slot, added in row order after */
#define CE_GROUP 256
#define CE_PAR_MIN ((int64_t)1 << 14) /* logits below which a group runs on one thread */

static bool ce_class(float t, int64_t vocab) { return t >= 0.0f && t < (float)vocab && t == floorf(t); }

/* log sum_j e^(z_j), in double */
static double ce_lse(const float *z, int64_t vocab)
{
    double hi = -INFINITY, s = 0;
    for (int64_t j = 0; j < vocab; j++) hi = z[j] > hi ? z[j] : hi;
    for (int64_t j = 0; j < vocab; j++) s += exp((double)z[j] - hi);
    return hi + log(s);
}

static double ce_forward_run(const float *logits, const float *targets, const float *weight, int64_t rows,
                             int64_t vocab)
{
    double total = 0;
    for (int64_t g0 = 0; g0 < rows; g0 += CE_GROUP) {
        const int64_t gn = rows - g0 < CE_GROUP ? rows - g0 : CE_GROUP;
        double part[CE_GROUP];
#pragma omp parallel for schedule(static) if (gn * vocab >= CE_PAR_MIN)
        for (int64_t i = 0; i < gn; i++) {
            const int64_t r = g0 + i;
            const float *z = logits + r * vocab;
            part[i] = (weight ? (double)weight[r] : 1.0) * (ce_lse(z, vocab) - (double)z[(int64_t)targets[r]]);
        }
        for (int64_t i = 0; i < gn; i++) total += part[i];
    }
    return total;
}

st_status cross_entropy_forward(const float *logits, const float *targets, const float *weight, int64_t rows,
                                int64_t vocab, float *loss)
{
    const double t0 = prof_now();
    if (rows < 0 || vocab < 1) return st_fail(ST_ERR_INVALID, "cross_entropy: %lld rows of %lld classes",
                                              (long long)rows, (long long)vocab);
    if (!op_dry(logits)) {
        for (int64_t r = 0; r < rows; r++)
            if (!ce_class(targets[r], vocab))
                return st_fail(ST_ERR_INVALID, "cross_entropy: row %lld's target %g is not a class of 0 .. %lld",
                               (long long)r, (double)targets[r], (long long)(vocab - 1));
        *loss = (float)ce_forward_run(logits, targets, weight, rows, vocab);
    }
    else *loss = 0.0f;
    prof_add(OP_POINTWISE, t0, 0, 4.0 * (double)(rows * vocab));
    return ST_OK;
}

static void ce_backward_run(float *dlogits, const float *logits, const float *targets, const float *weight,
                            int64_t rows, int64_t vocab, float dloss)
{
#pragma omp parallel for schedule(static) if (rows * vocab >= CE_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *z = logits + r * vocab;
        float *dz = dlogits + r * vocab;
        const double s = (double)dloss * (weight ? (double)weight[r] : 1.0), lse = ce_lse(z, vocab);
        const int64_t t = ce_class(targets[r], vocab) ? (int64_t)targets[r] : -1;
        for (int64_t j = 0; j < vocab; j++) dz[j] += (float)(s * (exp((double)z[j] - lse) - (double)(j == t)));
    }
}

void cross_entropy_backward(float *dlogits, const float *logits, const float *targets, const float *weight,
                            int64_t rows, int64_t vocab, float dloss)
{
    OP_TIMED(dlogits, ce_backward_run(dlogits, logits, targets, weight, rows, vocab, dloss), OP_POINTWISE, 0,
             12.0 * (double)(rows * vocab));
}
