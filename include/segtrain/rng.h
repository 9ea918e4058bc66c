/* Counter-based random numbers: every value is a pure function of (seed, stream, index), so a tensor's random
 * values do not depend on what was drawn before it, on the thread count, or on whether a block is being
 * recomputed. Streams name what the numbers are for (a parameter, a step's noise, ...). */
#ifndef SEGTRAIN_RNG_H
#define SEGTRAIN_RNG_H

#include <stdint.h>

uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0, 1). */
double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box-Muller on two uniforms of the same index). */
double rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* A stream id from a name, e.g. a parameter's name. */
uint64_t rng_stream(const char *name);

void rng_fill_uniform(float *x, int64_t n, uint64_t seed, uint64_t stream, float lo, float hi);
void rng_fill_normal(float *x, int64_t n, uint64_t seed, uint64_t stream, float mean, float std);
/* Elements first .. first + n - 1 of the stream rng_fill_normal fills from 0: a data-parallel rank's share. */
void rng_fill_normal_at(float *x, int64_t n, uint64_t seed, uint64_t stream, int64_t first, float mean, float std);

#endif
