/* Size arithmetic that cannot overflow. Sizes come from configs and files; a product or sum of them is computed
 * with these and refused when it leaves [0, limit], instead of wrapping (undefined behaviour for int64_t, and a
 * too-small buffer after it). */
#ifndef SEGTRAIN_CHECKED_H
#define SEGTRAIN_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

/* The most elements a tensor, a model's parameters or a sample's largest activation may have: 2^57, so that
 * their bytes (8 per element at most) and a step's sums of them stay far inside int64_t and size_t. */
#define CK_MAX_ELEMENTS ((int64_t)1 << 57)

/* *out = a * b, true; or false (*out untouched) when a or b is negative or the product exceeds limit. */
static inline bool ck_mul(int64_t a, int64_t b, int64_t limit, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > limit) return false;
    *out = r;
    return true;
}

/* *out = a + b, as ck_mul. */
static inline bool ck_add(int64_t a, int64_t b, int64_t limit, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) || r > limit) return false;
    *out = r;
    return true;
}

#endif
