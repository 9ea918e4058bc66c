/* `segtrain selfcheck`: what a user runs first on a new machine. It says which BLAS and how many threads
 * the engine will use, measures the GEMM rate on DiT-S/2 shapes (the ceiling every speed figure is read
 * against), and checks that the two attention mechanisms agree, all through the engine's own pools. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "segtrain/ops.h"
#include "segtrain/sweep.h"

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (1.0 / 16777216.0) - 0.5);
    }
}

/* The fc1 GEMM of DiT-S/2 at batch 8: 2048 tokens, 384 -> 1536. */
static st_status gemm_rate(pool *p, double *gflops)
{
    const int64_t n = 2048, in = 384, out = 1536;
    float *x, *w, *y;
    st_status s = pool_alloc(p, n * in * sizeof(float), MEM_ACTIVATIONS, "selfcheck.x", (void **)&x);
    if (!s) s = pool_alloc(p, out * in * sizeof(float), MEM_WEIGHTS, "selfcheck.w", (void **)&w);
    if (!s) s = pool_alloc(p, n * out * sizeof(float), MEM_ACTIVATIONS, "selfcheck.y", (void **)&y);
    if (s) return s;
    fill(x, n * in, 1);
    fill(w, out * in, 2);
    linear_forward(y, x, w, NULL, n, in, out); /* warm-up: threads and BLAS buffers */
    int reps = 0;
    double t0 = clock_seconds(), t;
    do {
        linear_forward(y, x, w, NULL, n, in, out);
        reps++;
    } while ((t = clock_seconds() - t0) < 0.5);
    *gflops = 2.0 * n * in * out * reps / t * 1e-9;
    pool_free(p, y);
    pool_free(p, w);
    pool_free(p, x);
    return ST_OK;
}

/* Both mechanisms on DiT-S/2's attention shape; returns the largest output difference. */
static st_status attention_agreement(pool *p, double *max_diff, size_t kept[2])
{
    attn_shape sh = {.batch = 2, .tokens = 256, .heads = 6, .head_dim = 64};
    const int64_t d = sh.heads * sh.head_dim, rows = sh.batch * sh.tokens;
    float *qkv, *out[2];
    st_status s = pool_alloc(p, rows * 3 * d * sizeof(float), MEM_ACTIVATIONS, "selfcheck.qkv", (void **)&qkv);
    if (!s) s = pool_alloc(p, rows * d * sizeof(float), MEM_ACTIVATIONS, "selfcheck.out0", (void **)&out[0]);
    if (!s) s = pool_alloc(p, rows * d * sizeof(float), MEM_ACTIVATIONS, "selfcheck.out1", (void **)&out[1]);
    if (s) return s;
    fill(qkv, rows * 3 * d, 3);
    for (int m = 0; m < 2; m++) {
        sh.mechanism = m ? ATTN_FLASH : ATTN_MATH;
        attn_view q = {qkv, 3 * d, sh.tokens * 3 * d}, k = q, v = q, o = {out[m], d, sh.tokens * d};
        k.data += d;
        v.data += 2 * d;
        op_state keep = {0};
        if ((s = attention_forward(p, &sh, o, q, k, v, &keep))) return s;
        kept[m] = keep.bytes;
        op_state_release(&keep);
    }
    *max_diff = 0;
    for (int64_t i = 0; i < rows * d; i++) *max_diff = fmax(*max_diff, fabs((double)out[0][i] - out[1][i]));
    pool_free(p, out[1]);
    pool_free(p, out[0]);
    pool_free(p, qkv);
    return ST_OK;
}

int cmd_selfcheck(int argc, char **argv)
{
    if (argc > 1) {
        printf("usage: segtrain [--threads N] selfcheck\n\n"
               "Prints the engine's version, BLAS and thread count (with a note where the CPU takes faster OpenBLAS\n"
               "kernels than the ones loaded), measures the GEMM rate on DiT-S/2 shapes and checks that the math and\n"
               "flash attention mechanisms agree, and measures the host-to-device copy bandwidth. Says when the machine\n"
               "is busy (other processes running, more than a quarter of the cores' worth, or two GEMM readings that\n"
               "differ by more than a quarter): speeds measured then are not the machine's. Exits 1 if a check fails.\n");
        return strcmp(argv[1], "--help") && strcmp(argv[1], "-h") ? 2 : 0;
    }
    printf("segtrain %s\n", SEGTRAIN_VERSION);
    const char *policy = getenv("OMP_WAIT_POLICY"), *spins = getenv("GOMP_SPINCOUNT");
    printf("threads  %d (OpenMP, shared with BLAS; waits: %s%s)\n", ops_threads(),
           policy ? "OMP_WAIT_POLICY=" : spins ? "GOMP_SPINCOUNT=" : "libgomp's default, spinning",
           policy ? policy : spins ? spins : "");
    const double others = machine_others_running(); /* before our own threads run */
    const char *chosen = getenv("OPENBLAS_CORETYPE"), *better = ops_blas_better_core();
    printf("blas     %s%s%s\n", ops_blas_info(), chosen ? ", OPENBLAS_CORETYPE=" : "", chosen ? chosen : "");
    if (better)
        printf(chosen ? "note     OPENBLAS_CORETYPE holds OpenBLAS to older kernels than this CPU takes "
                        "(%s: faster GEMMs)\n"
                      : "note     OpenBLAS does not know this CPU: OPENBLAS_CORETYPE=%s gives faster GEMMs\n",
               better);
    printf("backend  %s\n", ops_backend_name());

    pool *p = pool_create(POOL_DEVICE, 0);
    double gflops = 0, again = 0, diff = 0;
    size_t kept[2] = {0};
    st_status s = p ? gemm_rate(p, &gflops) : st_host_oom("a pool");
    if (!s) s = gemm_rate(p, &again); /* a second reading: on a busy machine the two disagree */
    if (!s) s = attention_agreement(p, &diff, kept);
    double link = 0;
    if (!s) s = link_bandwidth_measure(&link);
    size_t peak = p ? pool_peak(p) : 0, leaks = pool_destroy(p);
    if (s) {
        fprintf(stderr, "segtrain selfcheck: %s\n", st_error());
        return 1;
    }
    const double tol = 1e-5;
    printf("gemm     %.1f GFLOP/s (2048x384 @ 384x1536, the fc1 of dit-s2 at batch 8; the better of 2 readings)\n",
           fmax(gflops, again));
    printf("link     %.2f GB/s host to device (64 MiB copies on the copy engine: what advise and plan price block "
           "swap's weights at)\n", link * 1e-9);
    char busy[400];
    const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (machine_load_note(others, cores, gflops, again, busy, sizeof busy)) printf("load     %s\n", busy);
    else if (others >= 0) printf("load     quiet (%.0f other process%s running on %d cores)\n", others, others == 1 ? "" : "es", cores);
    printf("attention math vs flash: max |diff| %.2e (tol %.0e); kept for backward: math %.2f MiB, flash %.3f MiB\n",
           diff, tol, kept[0] / 1048576.0, kept[1] / 1048576.0);
    printf("pool     peak %.2f MiB, %zu leaked allocations\n", peak / 1048576.0, leaks);
    print_fallbacks(stdout);
    int ok = diff <= tol && leaks == 0;
    printf("selfcheck %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
}
