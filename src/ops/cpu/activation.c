/* Pointwise activations. Each element is independent, so results never depend on the thread count.
 *
 * glibc's expf/tanhf are a call per element and are vectorised only under -ffast-math, which the build
 * excludes; at dit-s2 size GELU alone would then cost more than the MLP matmuls. So both activations are
 * written over exp_f (internal.h), plain float arithmetic that the compiler vectorises. The tanh of GELU is taken
 * as a sigmoid, 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)), which also avoids cancellation in 1 + tanh(u) < 0.5. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "segtrain/rng.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN ((int64_t)1 << 15)

/* sqrt(2/pi); M_PI is not in C11. */
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

static void gelu_forward_run(float *restrict y, const float *restrict x, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_K * (v + GELU_C * v * v * v);
        y[i] = v / (1.0f + exp_f(-2.0f * u));
    }
}

/* GELU's derivative at v */
static inline float gelu_grad(float v)
{
    float u = GELU_K * (v + GELU_C * v * v * v);
    float e = exp_f(-2.0f * u);
    float s = 1.0f / (1.0f + e); /* 0.5 (1 + tanh u) */
    float s1 = e * s;             /* 1 - s without cancellation */
    /* d/dx x s(2u) = s + 2 x s (1 - s) u',  u' = k (1 + 3 c x^2) */
    return s + 2.0f * v * (s * s1) * (GELU_K * (1.0f + 3.0f * GELU_C * v * v));
}

static void gelu_backward_run(float *dx, const float *dy, const float *restrict x, int64_t n)
{
    if (!dx) return;
    if (dx == dy) { /* in place: dy becomes dx */
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) dx[i] *= gelu_grad(x[i]);
        return;
    }
    float *restrict o = dx;
    const float *restrict g = dy;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) o[i] += g[i] * gelu_grad(x[i]);
}

static void silu_forward_run(float *restrict y, const float *restrict x, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = v / (1.0f + exp_f(-v));
    }
}

static void silu_backward_run(float *restrict dx, const float *restrict dy, const float *restrict x, int64_t n)
{
    if (!dx) return;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float e = exp_f(-v);
        float s = 1.0f / (1.0f + e);
        dx[i] += dy[i] * (s * (1.0f + v * (e * s))); /* s (1 + x (1 - s)) */
    }
}

void gelu_forward(float *restrict y, const float *restrict x, int64_t n)
{
    OP_TIMED(y, gelu_forward_run(y, x, n), OP_POINTWISE, 0, 8.0 * n);
}

void gelu_backward(float *restrict dx, const float *restrict dy, const float *restrict x, int64_t n)
{
    OP_TIMED(dy, gelu_backward_run(dx, dy, x, n), OP_POINTWISE, 0, 12.0 * n);
}

/* The exact GELU reads libm's erff per element: it serves small inputs (a text projection's tokens), where that
 * costs nothing next to the GEMMs around it. */
#define SQRT1_2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

void gelu_erf_forward(float *restrict y, const float *restrict x, int64_t n)
{
    const double t0 = prof_now();
    if (!op_dry(y))
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * SQRT1_2));
    prof_add(OP_POINTWISE, t0, 0, 8.0 * n);
}

void gelu_erf_backward(float *restrict dx, const float *restrict dy, const float *restrict x, int64_t n)
{
    const double t0 = prof_now();
    if (dx && !op_dry(dy))
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) { /* Phi(x) + x phi(x) */
            const float v = x[i];
            dx[i] += dy[i] * (0.5f * (1.0f + erff(v * SQRT1_2)) + v * INV_SQRT_2PI * expf(-0.5f * v * v));
        }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * n);
}

void silu_forward(float *restrict y, const float *restrict x, int64_t n)
{
    OP_TIMED(y, silu_forward_run(y, x, n), OP_POINTWISE, 0, 8.0 * n);
}

void silu_backward(float *restrict dx, const float *restrict dy, const float *restrict x, int64_t n)
{
    OP_TIMED(dy, silu_backward_run(dx, dy, x, n), OP_POINTWISE, 0, 12.0 * n);
}

/* StyleGAN's fused bias and leaky ReLU over (n, c, inner): y = leaky_relu(x + b[c], slope) * scale, the bias added
 * first as torch adds it */
void bias_leaky_relu_forward(float *y, const float *x, const float *b, float slope, float scale, int64_t n, int64_t c,
                             int64_t inner)
{
    const double t0 = prof_now();
    if (!op_dry(y))
#pragma omp parallel for collapse(2) schedule(static) if (n * c * inner >= PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            for (int64_t ch = 0; ch < c; ch++) {
                const float bias = b ? b[ch] : 0.0f;
                const float *xr = x + (i * c + ch) * inner;
                float *yr = y + (i * c + ch) * inner;
                for (int64_t k = 0; k < inner; k++) {
                    const float v = xr[k] + bias;
                    yr[k] = (v > 0.0f ? v : v * slope) * scale;
                }
            }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * (double)(n * c * inner));
}

void bias_leaky_relu_backward(float *dx, float *db, const float *dy, const float *x, const float *b, float slope,
                              float scale, int64_t n, int64_t c, int64_t inner)
{
    const double t0 = prof_now();
    if (!op_dry(dy))
#pragma omp parallel for schedule(static) if (n * c * inner >= PAR_MIN)
        for (int64_t ch = 0; ch < c; ch++) { /* a channel's bias gradient: its rows in order, one thread */
            const float bias = b ? b[ch] : 0.0f;
            float acc = 0.0f;
            for (int64_t i = 0; i < n; i++) {
                const float *xr = x + (i * c + ch) * inner, *gr = dy + (i * c + ch) * inner;
                float *dr = dx ? dx + (i * c + ch) * inner : NULL;
                for (int64_t k = 0; k < inner; k++) {
                    const float g = gr[k] * scale, v = g * (xr[k] + bias > 0.0f ? 1.0f : slope);
                    if (dr) dr[k] += v;
                    acc += v;
                }
            }
            if (db) db[ch] += acc;
        }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * (double)(n * c * inner));
}

/* ---- gated linear units: y = act(a) * b ---- */

/* act(v) and act'(v), with silu's and the GELUs' own arithmetic above, so a GLU gives the bits of its parts */
static inline float glu_act(glu_kind k, float v)
{
    if (k == GLU_SILU) return v / (1.0f + exp_f(-v));
    if (k == GLU_GELU_TANH) return v / (1.0f + exp_f(-2.0f * (GELU_K * (v + GELU_C * v * v * v))));
    if (k == GLU_SIGMOID) return 1.0f / (1.0f + exp_f(-v));
    return 0.5f * v * (1.0f + erff(v * SQRT1_2));
}

static inline float glu_act_grad(glu_kind k, float v)
{
    if (k == GLU_SILU) {
        const float e = exp_f(-v), s = 1.0f / (1.0f + e);
        return s * (1.0f + v * (e * s));
    }
    if (k == GLU_GELU_TANH) return gelu_grad(v);
    if (k == GLU_SIGMOID) {
        const float e = exp_f(-v), s = 1.0f / (1.0f + e);
        return s * (e * s); /* s (1 - s), 1 - s without cancellation */
    }
    return 0.5f * (1.0f + erff(v * SQRT1_2)) + v * INV_SQRT_2PI * expf(-0.5f * v * v);
}

void glu_forward(float *y, const float *a, const float *b, int64_t rows, int64_t F, int64_t ld, glu_kind k)
{
    const double t0 = prof_now();
    if (!op_dry(y))
#pragma omp parallel for schedule(static) if (rows * F >= PAR_MIN)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < F; j++) y[r * F + j] = glu_act(k, a[r * ld + j]) * b[r * ld + j];
    prof_add(OP_POINTWISE, t0, 0, 12.0 * (double)(rows * F));
}

void glu_backward(float *da, float *db, const float *dy, const float *a, const float *b, int64_t rows, int64_t F,
                  int64_t ld, glu_kind k)
{
    const double t0 = prof_now();
    if (!op_dry(dy))
#pragma omp parallel for schedule(static) if (rows * F >= PAR_MIN)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < F; j++) {
                const float g = dy[r * F + j], v = a[r * ld + j];
                if (da) da[r * ld + j] += (g * b[r * ld + j]) * glu_act_grad(k, v);
                if (db) db[r * ld + j] += g * glu_act(k, v);
            }
    prof_add(OP_POINTWISE, t0, 0, 20.0 * (double)(rows * F));
}

/* ---- dropout: the mask is a pure function of (seed, stream, index) ---- */

static float dropout_scale(float p, uint64_t seed, uint64_t stream, int64_t i)
{
    return rng_uniform(seed, stream, (uint64_t)i) >= (double)p ? 1.0f / (1.0f - p) : 0.0f;
}

void dropout_forward(float *y, const float *x, int64_t n, float p, uint64_t seed, uint64_t stream)
{
    const double t0 = prof_now();
    if (!op_dry(y))
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) { /* a dropped element is +0, whatever its sign */
            const float k = dropout_scale(p, seed, stream, i);
            y[i] = k != 0.0f ? x[i] * k : 0.0f;
        }
    prof_add(OP_POINTWISE, t0, 0, 8.0 * n);
}

void dropout_backward(float *dx, const float *dy, int64_t n, float p, uint64_t seed, uint64_t stream)
{
    const double t0 = prof_now();
    if (dx && !op_dry(dy))
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            const float k = dropout_scale(p, seed, stream, i), v = k != 0.0f ? dy[i] * k : 0.0f;
            dx[i] = dx == dy ? v : dx[i] + v;
        }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * n);
}

void tanh_forward(float *restrict y, const float *restrict x, int64_t n)
{
    const double t0 = prof_now();
    if (!op_dry(y))
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
    prof_add(OP_POINTWISE, t0, 0, 8.0 * n);
}

void tanh_backward(float *dx, const float *dy, const float *restrict y, int64_t n)
{
    const double t0 = prof_now();
    if (!op_dry(dy)) {
        if (dx == dy) /* in place: dy becomes dx */
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
            for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
        else
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
            for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
    }
    prof_add(OP_POINTWISE, t0, 0, 12.0 * n);
}
