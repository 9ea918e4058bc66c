/* Pointwise activations. Each element is independent, so results never depend on the thread count.
 *
 * glibc's expf/tanhf are a call per element and are vectorised only under -ffast-math, which the build
 * excludes; at dit-s2 size GELU alone would then cost more than the MLP matmuls. So both activations are
 * written over exp_f below, plain float arithmetic that the compiler vectorises. The tanh of GELU is taken
 * as a sigmoid, 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)), which also avoids cancellation in 1 + tanh(u) < 0.5. */
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN ((int64_t)1 << 15)

/* sqrt(2/pi); M_PI is not in C11. */
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

/* e^x to about 1 ulp (Cephes expf: Cody-Waite reduction, degree-5 polynomial on |r| <= ln2/2). x is clamped
 * to [-87, 88] so that 2^n stays a normal float and nothing overflows to inf: the activations only use
 * 1 / (1 + e^x), where the clamp changes values below 1e-37. The clamp is an integer min on the magnitude
 * bits because, under the default -ftrapping-math, gcc will not vectorise a float compare-and-select.
 * A NaN is clamped too, but every caller multiplies by x, so NaN still propagates. */
static inline float exp_f(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t sign = b & 0x80000000u, mag = b & 0x7fffffffu;
    uint32_t lim = 0x42b00000u - (sign >> 31) * (0x42b00000u - 0x42ae0000u); /* 88.0f, or 87.0f below 0 */
    mag = mag < lim ? mag : lim;
    b = sign | mag;
    memcpy(&x, &b, sizeof x);
    /* round x / ln2 to nearest with the 1.5 * 2^23 trick: rintf would be a call per element */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t e = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

void gelu_forward(float *restrict y, const float *restrict x, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_K * (v + GELU_C * v * v * v);
        y[i] = v / (1.0f + exp_f(-2.0f * u));
    }
}

void gelu_backward(float *restrict dx, const float *restrict dy, const float *restrict x, int64_t n)
{
    if (!dx) return;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_K * (v + GELU_C * v * v * v);
        float e = exp_f(-2.0f * u);
        float s = 1.0f / (1.0f + e); /* 0.5 (1 + tanh u) */
        float s1 = e * s;             /* 1 - s without cancellation */
        /* d/dx x s(2u) = s + 2 x s (1 - s) u',  u' = k (1 + 3 c x^2) */
        float d = s + 2.0f * v * (s * s1) * (GELU_K * (1.0f + 3.0f * GELU_C * v * v));
        dx[i] += dy[i] * d;
    }
}

void silu_forward(float *restrict y, const float *restrict x, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = v / (1.0f + exp_f(-v));
    }
}

void silu_backward(float *restrict dx, const float *restrict dy, const float *restrict x, int64_t n)
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
