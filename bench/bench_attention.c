/* Attention benchmark (not a test): the forward and backward GFLOP/s of the attention op against the GEMM rate
 * of the same run. One sample of `heads` heads (default: one per thread, as the op gives each thread whole
 * heads), tokens in {1k, 4k, 16k, 32k} (or --tokens), head width 64 and 128 (or --head-dim); the GEMM rate is
 * measured right before each row (DiT-S/2's fc1 GEMM, as `segtrain selfcheck` does) so that the machine's drift
 * hits both alike, and each rate is the median of the row's repetitions; beside it the rate of the flash forward's
 * two tile products alone (the ceiling of the tiled structure). FLOPs are the op's own profile count, the
 * matrix products it runs: forward 4 T^2 hd a head, flash backward 10 T^2 hd (the scores recomputed); linear
 * (Sana's) forward 4 T hd^2, backward 8 T hd^2.
 *
 *   build/bench_attention [--tokens T] [--head-dim HD] [--heads H] [--threads N] [--mechanism math|flash|linear]
 *                         [--window W] [--seconds S]
 */
#include <omp.h>
#include <string.h>

#include "benchkit.h"
#include "segtrain/ops.h"
#include "segtrain/status.h"

#define REPS_MAX 15

/* GFLOP/s of the flash forward's two products alone, on one 256 x 256 tile per thread as the op runs them (each
 * thread its own single-threaded GEMMs): S = q k^T (256 x 256 x hd), O += S v (256 x hd x 256). The ceiling of the
 * op's structure: what it would reach if its softmax passes took no time. */
static double tile_gemm_rate(int64_t hd, int threads, double seconds)
{
    const int64_t t = 256;
    double flops = 0, elapsed = 0;
#pragma omp parallel num_threads(threads) reduction(+ : flops) reduction(max : elapsed)
    {
        float *q = malloc((size_t)(t * hd) * sizeof(float)), *k = malloc((size_t)(t * hd) * sizeof(float));
        float *S = malloc((size_t)(t * t) * sizeof(float)), *o = malloc((size_t)(t * hd) * sizeof(float));
        bench_fill(q, (size_t)(t * hd), 3 + (unsigned)omp_get_thread_num()), bench_fill(k, (size_t)(t * hd), 4);
        memset(o, 0, (size_t)(t * hd) * sizeof(float));
        int reps = 0;
        double t0 = clock_seconds(), dt;
        do {
            gemm(false, true, t, t, hd, 0.125f, q, k, 0.0f, S);
            gemm(false, false, t, hd, t, 1.0f, S, k, 1.0f, o);
            reps++;
        } while ((dt = clock_seconds() - t0) < seconds);
        flops = 4.0 * t * t * hd * reps / dt;
        elapsed = dt;
        free(q), free(k), free(S), free(o);
    }
    (void)elapsed;
    return flops * 1e-9;
}

/* Forward (keeping what backward reads) and backward of one shape, repeated until `seconds` have passed (at least
 * twice, after a warm-up below 8k tokens); medians in GFLOP/s. 0 after printing why on failure. */
static int attention_rates(pool *p, const attn_shape *s, double seconds, double *fwd, double *bwd)
{
    const int64_t T = s->tokens, D = s->heads * s->head_dim, n = s->batch * T * D;
    float *buf = malloc((size_t)(8 * n) * sizeof(float));
    if (!buf) return fprintf(stderr, "out of memory\n"), 0;
    bench_fill(buf, (size_t)(5 * n), 7);
    memset(buf + 5 * n, 0, (size_t)(3 * n) * sizeof(float));
    attn_view q = {buf, D, T * D}, k = {buf + n, D, T * D}, v = {buf + 2 * n, D, T * D}, dO = {buf + 3 * n, D, T * D},
              o = {buf + 4 * n, D, T * D}, dq = {buf + 5 * n, D, T * D}, dk = {buf + 6 * n, D, T * D},
              dv = {buf + 7 * n, D, T * D};
    double tf[REPS_MAX], tb[REPS_MAX], flop[2];
    int reps = 0;
    const double start = clock_seconds();
    for (int r = 0; r <= REPS_MAX; r++) {
        op_state keep = {0};
        op_profile pf, pb;
        ops_profile_start();
        double t0 = clock_seconds();
        if (attention_forward(p, s, o, q, k, v, &keep)) return fprintf(stderr, "%s\n", st_error()), free(buf), 0;
        double t1 = clock_seconds();
        ops_profile_stop(&pf);
        ops_profile_start();
        double t2 = clock_seconds();
        if (attention_backward(p, s, dq, dk, dv, dO, q, k, v, o, &keep))
            return fprintf(stderr, "%s\n", st_error()), free(buf), 0;
        double t3 = clock_seconds();
        ops_profile_stop(&pb);
        op_state_release(&keep);
        flop[0] = pf.flops[OP_ATTENTION], flop[1] = pb.flops[OP_ATTENTION];
        if (r == 0 && s->tokens < 8192) continue; /* the warm-up, where a call is short enough to be moved by one */
        tf[reps] = t1 - t0, tb[reps] = t3 - t2, reps++;
        if (reps >= 2 && clock_seconds() - start > seconds) break;
    }
    *fwd = flop[0] / bench_median(tf, reps) * 1e-9;
    *bwd = flop[1] / bench_median(tb, reps) * 1e-9;
    free(buf);
    return 1;
}

int main(int argc, char **argv)
{
    long long tokens = 0, head_dim = 0, heads = 0, threads = 2, window = 0;
    double seconds = 2.0;
    const char *mech = "flash";
    const cli_flag flags[] = {{"--tokens", .whole = &tokens, .min = 1, .max = 1 << 20},
                              {"--head-dim", .whole = &head_dim, .min = 1, .max = 4096},
                              {"--heads", .whole = &heads, .min = 1, .max = 4096},
                              {"--threads", .whole = &threads, .min = 1, .max = 1024},
                              {"--window", .whole = &window, .min = 0, .max = 1 << 20},
                              {"--seconds", .real = &seconds, .min = 0, .max = 3600},
                              {"--mechanism", .text = &mech},
                              {0}};
    if (bench_args(argc, argv, "bench_attention", flags)) return 2;
    if (strcmp(mech, "flash") && strcmp(mech, "math") && strcmp(mech, "linear"))
        return fprintf(stderr, "bench_attention: --mechanism '%s'; valid: flash, math, linear\n", mech), 2;
    ops_set_threads((int)threads);
    const int64_t all_tokens[] = {1024, 4096, 16384, 32768}, all_hd[] = {64, 128};
    const int nt = tokens ? 1 : 4, nh = head_dim ? 1 : 2;
    pool *p = pool_create(POOL_DEVICE, 0);
    printf("%s attention, batch 1, %lld heads, %d threads, %s\n", mech, heads ? heads : threads, ops_threads(),
           ops_blas_info());
    printf("| tokens | head dim | GEMM GFLOP/s | tile GEMMs GFLOP/s | forward GFLOP/s | ratio | backward GFLOP/s | "
           "ratio |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int ih = 0; ih < nh; ih++)
        for (int it = 0; it < nt; it++) {
            attn_shape s = {.batch = 1,
                            .tokens = tokens ? tokens : all_tokens[it],
                            .heads = heads ? heads : threads,
                            .head_dim = head_dim ? head_dim : all_hd[ih],
                            .mechanism = !strcmp(mech, "math") ? ATTN_MATH : !strcmp(mech, "linear") ? ATTN_LINEAR
                                                                                                : ATTN_FLASH,
                            .window = window};
            const double g = bench_gemm_rate(0.5), tg = tile_gemm_rate(s.head_dim, ops_threads(), 0.5);
            double f, b;
            if (!attention_rates(p, &s, seconds, &f, &b)) return 1;
            printf("| %lld | %lld | %.1f | %.1f | %.1f | %.2f | %.1f | %.2f |\n", (long long)s.tokens,
                   (long long)s.head_dim, g, tg, f, f / g, b, b / g);
            fflush(stdout);
        }
    pool_destroy(p);
    return 0;
}
