/* Threads, the BLAS underneath and kept state, shared by every CPU op. */
#include <cblas.h>
#include <omp.h>
#include <strings.h>

#include "internal.h"

void op_state_release(op_state *s)
{
    if (s->data) pool_free(s->pool, s->data);
    *s = (op_state){0};
}

/* OpenBLAS's OpenMP build runs on this same OpenMP pool: inside our parallel regions it runs single-threaded,
 * outside them it uses omp_get_max_threads(). One setting therefore governs both. */
void ops_set_threads(int n)
{
    if (n < 1) n = 1;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int ops_threads(void) { return omp_get_max_threads(); }

const char *ops_blas_info(void) { return openblas_get_config(); }

/* Whether core is one of names (a NULL-ended list). */
static bool core_in(const char *core, const char *const *names)
{
    for (; *names; names++)
        if (!strcasecmp(core, *names)) return true;
    return false;
}

const char *ops_blas_better_core(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* OpenBLAS 0.3.21's kernels that use AVX-512, and those that use AVX2 at least; anything else (Prescott,
     * Sandybridge, ...) is older, as where OpenBLAS does not know the CPU (an Intel model 207 got Prescott's SSE3
     * kernels, at about a fifth of the GEMM rate) */
    static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const avx2_cores[] = {"Haswell", "Zen", "Excavator", "SkylakeX", "Cooperlake",
                                             "SapphireRapids", NULL};
    const char *core = openblas_get_corename();
    if (!core) return NULL;
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vl"); /* what OpenBLAS's SkylakeX kernels use */
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx512 && !core_in(core, avx512_cores)) return "SkylakeX";
    if (avx2 && !core_in(core, avx2_cores)) return "Haswell";
    return NULL;
#else
    return NULL;
#endif
}

st_status ops_device_pool_create(size_t capacity, pool **out)
{
    return (*out = pool_create(POOL_DEVICE, capacity)) ? ST_OK : st_host_oom("the device pool");
}

st_status ops_host_pool_create(size_t capacity, pool **out)
{
    return (*out = pool_create(POOL_HOST, capacity)) ? ST_OK : st_host_oom("the host pool");
}

const char *ops_backend_name(void) { return "cpu"; }

size_t ops_device_bytes_in_use(void) { return 0; }

int ops_profiling;
static op_profile profile;

double prof_clock(void) { return omp_get_wtime(); }

void prof_record(op_kind kind, double t0, double flops, double bytes)
{
    profile.calls[kind]++;
    profile.seconds[kind] += omp_get_wtime() - t0;
    profile.flops[kind] += flops;
    profile.bytes[kind] += bytes;
}

void ops_profile_start(void)
{
    profile = (op_profile){0};
    ops_profiling = 1;
}

void ops_profile_stop(op_profile *out)
{
    ops_profiling = 0;
    *out = profile;
}

const char *op_kind_name(op_kind k)
{
    static const char *names[OP_KIND_COUNT] = {"GEMM", "attention", "normalization", "elementwise"};
    return (unsigned)k < OP_KIND_COUNT ? names[k] : "?";
}
