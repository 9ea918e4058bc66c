/* Mixture-of-experts routing (HiDream's MoEGate and MOEFeedForwardSwiGLU's training path): the gate's softmax
 * scores and top-k, the routed rows grouped by expert, and the experts' outputs combined back per token. The
 * experts' own GEMMs are the caller's, over each expert's contiguous rows. */
#include <math.h>

#include "internal.h"

size_t moe_route_bytes(int64_t n, int64_t E, int64_t k)
{
    return (size_t)(E + 1) * sizeof(int64_t) + (size_t)(n * E + n * k) * sizeof(float) +
           (size_t)(3 * n * k) * sizeof(int32_t);
}

void moe_route_view(moe_route *r, void *buf, int64_t n, int64_t E, int64_t k)
{
    char *p = buf; /* int64 first: the pool's alignment holds for it */
    r->start = (int64_t *)p, p += (size_t)(E + 1) * sizeof(int64_t);
    r->scores = (float *)p, p += (size_t)(n * E) * sizeof(float);
    r->weight = (float *)p, p += (size_t)(n * k) * sizeof(float);
    r->expert = (int32_t *)p, p += (size_t)(n * k) * sizeof(int32_t);
    r->row = (int32_t *)p, p += (size_t)(n * k) * sizeof(int32_t);
    r->src = (int32_t *)p;
    r->n = n, r->E = E, r->k = k, r->bf16 = false;
}

static void route_run(moe_route *r)
{
    const int64_t n = r->n, E = r->E, k = r->k;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; t++) {
        float *s = r->scores + t * E;
        for (int64_t e = 0; r->bf16 && e < E; e++) s[e] = bf16_of(s[e]); /* the gate's bf16 logits */
        float mx = s[0], sum = 0.0f;
        for (int64_t e = 1; e < E; e++) mx = s[e] > mx ? s[e] : mx;
        for (int64_t e = 0; e < E; e++) sum += s[e] = expf(s[e] - mx);
        for (int64_t e = 0; e < E; e++) s[e] = r->bf16 ? bf16_of(s[e] / sum) : s[e] / sum;
        /* the k largest, largest first; a tie goes to the lower expert */
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                bool taken = false;
                for (int64_t i = 0; i < j; i++) taken |= r->expert[t * k + i] == e;
                if (!taken && (best < 0 || s[e] > s[best])) best = e;
            }
            r->expert[t * k + j] = (int32_t)best;
            r->weight[t * k + j] = s[best];
        }
    }
    /* rows grouped by expert, in token order within an expert: a counting sort, sequential and so deterministic */
    for (int64_t e = 0; e <= E; e++) r->start[e] = 0;
    for (int64_t f = 0; f < n * k; f++) r->start[r->expert[f] + 1]++;
    for (int64_t e = 0; e < E; e++) r->start[e + 1] += r->start[e];
    for (int64_t e = 0; e < E; e++) {
        int64_t at = r->start[e];
        for (int64_t f = 0; f < n * k; f++)
            if (r->expert[f] == e) r->row[f] = (int32_t)at, r->src[at++] = (int32_t)(f / k);
    }
}

void moe_route_forward(moe_route *r, const float *x, const float *wg, int64_t d)
{
    linear_forward(r->scores, x, wg, NULL, r->n, d, r->E); /* the logits, made scores in place */
    const double t0 = prof_now();
    if (!op_dry(r->start)) route_run(r);
    prof_add(OP_POINTWISE, t0, 0, (double)(r->n * r->E + 3 * r->n * r->k) * 4.0);
}

int64_t moe_expert_start(const moe_route *r, int64_t e)
{
    return op_dry(r->start) ? e * r->n * r->k / r->E : r->start[e];
}

st_status moe_route_backward(pool *p, float *dx, float *dwg, const float *dweight, const moe_route *r, const float *x,
                             const float *wg, int64_t d)
{
    const int64_t n = r->n, E = r->E, k = r->k;
    float *dl = NULL;
    st_status st = pool_alloc(p, (size_t)(n * E) * sizeof(float), MEM_WORKSPACE, "moe.dlogits", (void **)&dl);
    if (st) return st;
    const double t0 = prof_now();
    if (!op_dry(dl)) {
        /* only the chosen scores reach the output; softmax's backward ds (s . ds) */
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < n; t++) {
            const float *s = r->scores + t * E;
            float *g = dl + t * E;
            for (int64_t e = 0; e < E; e++) g[e] = 0.0f;
            for (int64_t j = 0; j < k; j++) g[r->expert[t * k + j]] += dweight[t * k + j];
            float dot = 0.0f;
            for (int64_t e = 0; e < E; e++) dot += s[e] * g[e];
            for (int64_t e = 0; e < E; e++) g[e] = s[e] * (g[e] - dot);
        }
    }
    prof_add(OP_POINTWISE, t0, 0, (double)(2 * n * E) * 4.0);
    linear_backward(dx, dwg, NULL, dl, x, wg, n, d, E);
    pool_free(p, dl);
    return ST_OK;
}

void moe_dispatch_forward(float *xr, const float *x, const moe_route *r, int64_t d)
{
    const double t0 = prof_now();
    if (!op_dry(xr)) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < r->n * r->k; i++) memcpy(xr + i * d, x + (int64_t)r->src[i] * d, (size_t)d * sizeof(float));
    }
    prof_add(OP_POINTWISE, t0, 0, (double)(2 * r->n * r->k * d) * 4.0);
}

void moe_dispatch_backward(float *dx, const float *dxr, const moe_route *r, int64_t d)
{
    const double t0 = prof_now();
    if (dx && !op_dry(dxr)) {
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < r->n; t++)
            for (int64_t j = 0; j < r->k; j++) {
                const float *g = dxr + (int64_t)r->row[t * r->k + j] * d;
                float *o = dx + t * d;
                for (int64_t c = 0; c < d; c++) o[c] += g[c];
            }
    }
    prof_add(OP_POINTWISE, t0, 0, (double)(2 * r->n * r->k * d) * 4.0);
}

void moe_combine_forward(float *y, const float *yr, const moe_route *r, int64_t d)
{
    const double t0 = prof_now();
    if (!op_dry(y)) {
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < r->n; t++) {
            float *o = y + t * d;
            for (int64_t c = 0; c < d; c++) o[c] = 0.0f;
            for (int64_t j = 0; j < r->k; j++) {
                const float w = r->weight[t * r->k + j], *v = yr + (int64_t)r->row[t * r->k + j] * d;
                if (r->bf16) /* y * topk_weight in bf16, then summed over the k choices into bf16 */
                    for (int64_t c = 0; c < d; c++) o[c] += bf16_of(w * v[c]);
                else
                    for (int64_t c = 0; c < d; c++) o[c] += w * v[c];
            }
            for (int64_t c = 0; r->bf16 && c < d; c++) o[c] = bf16_of(o[c]);
        }
    }
    prof_add(OP_POINTWISE, t0, 0, (double)(2 * r->n * r->k * d) * 4.0);
}

void moe_combine_backward(float *dyr, float *dweight, const float *dy, const float *yr, const moe_route *r, int64_t d)
{
    const double t0 = prof_now();
    if (!op_dry(dy)) {
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < r->n; t++) {
            const float *g = dy + t * d;
            for (int64_t j = 0; j < r->k; j++) {
                const int64_t f = t * r->k + j, at = (int64_t)r->row[f] * d;
                const float w = r->weight[f];
                if (dyr)
                    for (int64_t c = 0; c < d; c++) dyr[at + c] += w * g[c];
                if (dweight) {
                    float s = 0.0f;
                    for (int64_t c = 0; c < d; c++) s += g[c] * yr[at + c];
                    dweight[f] += s;
                }
            }
        }
    }
    prof_add(OP_POINTWISE, t0, 0, (double)(3 * r->n * r->k * d) * 4.0);
}
