#include "segtrain/rng.h"

#include <math.h>

/* splitmix64's finaliser: a bijective mix with full avalanche, enough to key values by counter */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t index)
{
    return mix(mix(mix(seed + 0x9e3779b97f4a7c15ull) ^ stream) + index * 0x9e3779b97f4a7c15ull);
}

double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return (double)(rng_u64(seed, stream, index) >> 11) * (1.0 / 9007199254740992.0);
}

double rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t r = rng_u64(seed, stream, index), s = mix(r ^ 0x5bd1e9955bd1e995ull);
    double u1 = ((double)(r >> 11) + 1.0) * (1.0 / 9007199254740993.0); /* (0, 1]: log is finite */
    double u2 = (double)(s >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t rng_stream(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
    return h;
}

void rng_fill_uniform(float *x, int64_t n, uint64_t seed, uint64_t stream, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * rng_uniform(seed, stream, (uint64_t)i));
}

void rng_fill_normal_at(float *x, int64_t n, uint64_t seed, uint64_t stream, int64_t first, float mean, float std)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(mean + std * rng_normal(seed, stream, (uint64_t)(first + i)));
}

void rng_fill_normal(float *x, int64_t n, uint64_t seed, uint64_t stream, float mean, float std)
{
    rng_fill_normal_at(x, n, seed, stream, 0, mean, std);
}
