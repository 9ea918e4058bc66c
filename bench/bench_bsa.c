/* Block-sparse attention benchmark (not a test): LongCat-Video's block-sparse attention (bsa_attention_*) against
 * dense flash attention on the same q, k, v, forward (keeping what backward reads) and backward, each the median of
 * --reps runs; with each one's kept bytes and workspace, and the tiles the sparse one ran. The default shape is
 * SimpleTuner's longcat-video.peft-lora+ramtorch example's video (480 px pixel area, 81 frames) at the nearest grid
 * that LongCat's [4, 4, 4] chunks divide (docs/BENCHMARKS.md): a 16:9 clip at 480 px pixel area is 640 x 360, on
 * LongCat's 64 px grid 640 x 384, so 24 x 40 tokens after Wan's VAE (/8) and the (1, 2, 2) patch; 81 frames are 21
 * latent frames, which 4 does not divide (LongCat's flash_attn_bsa_3d asserts, SimpleTuner's Attention then runs
 * dense), so 20 (77 frames); head width 128, one head a thread (the model's 32 heads and 48 blocks scale both sides
 * alike).
 *
 *   build/bench_bsa [--frames F] [--height H] [--width W] [--chunk C] [--sparsity S] [--cdf X] [--head-dim HD]
 *                   [--heads N] [--threads N] [--reps R]
 */
#include <string.h>

#include "benchkit.h"
#include "segtrain/ops.h"
#include "segtrain/status.h"

#define REPS_MAX 9

typedef struct timing {
    double fwd, bwd, fwd_flops, bwd_flops;
    size_t kept, ws_fwd, ws_bwd;
} timing;

/* one side's forward and backward, medians over reps; 0 after printing why */
static int run(pool *p, const attn_shape *dense, const bsa_shape *bsa, int reps, float *buf, int64_t n, timing *t)
{
    const int64_t T = dense->tokens, D = dense->heads * dense->head_dim;
    attn_view q = {buf, D, T * D}, k = {buf + n, D, T * D}, v = {buf + 2 * n, D, T * D}, dO = {buf + 3 * n, D, T * D},
              o = {buf + 4 * n, D, T * D}, dq = {buf + 5 * n, D, T * D}, dk = {buf + 6 * n, D, T * D},
              dv = {buf + 7 * n, D, T * D};
    double tf[REPS_MAX], tb[REPS_MAX];
    for (int r = 0; r < reps; r++) {
        op_state keep = {0};
        op_profile pf, pb;
        ops_profile_start();
        const double t0 = clock_seconds();
        const st_status sf = bsa ? bsa_attention_forward(p, bsa, o, q, k, v, &keep)
                                 : attention_forward(p, dense, o, q, k, v, &keep);
        const double t1 = clock_seconds();
        ops_profile_stop(&pf);
        if (sf) return fprintf(stderr, "%s\n", st_error()), 0;
        ops_profile_start();
        const st_status sb = bsa ? bsa_attention_backward(p, bsa, dq, dk, dv, dO, q, k, v, o, &keep)
                                 : attention_backward(p, dense, dq, dk, dv, dO, q, k, v, o, &keep);
        const double t2 = clock_seconds();
        ops_profile_stop(&pb);
        if (sb) return fprintf(stderr, "%s\n", st_error()), 0;
        t->kept = keep.bytes;
        op_state_release(&keep);
        tf[r] = t1 - t0, tb[r] = t2 - t1;
        t->fwd_flops = pf.flops[OP_ATTENTION], t->bwd_flops = pb.flops[OP_ATTENTION];
    }
    t->fwd = bench_median(tf, reps), t->bwd = bench_median(tb, reps);
    const int th = ops_threads();
    t->ws_fwd = bsa ? bsa_attention_workspace_bytes(bsa, th, ATTN_FORWARD_KEEP)
                    : attention_workspace_bytes(dense, th, ATTN_FORWARD_KEEP);
    t->ws_bwd = bsa ? bsa_attention_workspace_bytes(bsa, th, ATTN_BACKWARD)
                    : attention_workspace_bytes(dense, th, ATTN_BACKWARD);
    return 1;
}

static void row(const char *name, const timing *t, const timing *base)
{
    printf("| %s | %.2f | %.2f | %.2f | %.0f | %.2f | %.2f | %.2f |\n", name, t->fwd, t->bwd, t->fwd + t->bwd,
           (t->fwd_flops + t->bwd_flops) * 1e-9, (base->fwd + base->bwd) / (t->fwd + t->bwd), t->kept / 1048576.0,
           (t->ws_fwd > t->ws_bwd ? t->ws_fwd : t->ws_bwd) / 1048576.0);
}

int main(int argc, char **argv)
{
    long long frames = 20, height = 24, width = 40, chunk = 4, head_dim = 128, heads = 0, threads = 2, reps = 3;
    double sparsity = 0.9375, cdf = -1;
    const cli_flag flags[] = {{"--frames", .whole = &frames, .min = 1, .max = 1 << 12},
                              {"--height", .whole = &height, .min = 1, .max = 1 << 12},
                              {"--width", .whole = &width, .min = 1, .max = 1 << 12},
                              {"--chunk", .whole = &chunk, .min = 1, .max = 64},
                              {"--sparsity", .real = &sparsity, .min = -1, .max = 1},
                              {"--cdf", .real = &cdf, .min = -1, .max = 1},
                              {"--head-dim", .whole = &head_dim, .min = 1, .max = 1024},
                              {"--heads", .whole = &heads, .min = 1, .max = 1024},
                              {"--threads", .whole = &threads, .min = 1, .max = 1024},
                              {"--reps", .whole = &reps, .min = 1, .max = REPS_MAX},
                              {0}};
    if (bench_args(argc, argv, "bench_bsa", flags)) return 2;
    ops_set_threads((int)threads);
    if (!heads) heads = ops_threads();
    const int64_t T = frames * height * width, n = T * heads * head_dim;
    const attn_shape dense = {.batch = 1, .tokens = T, .heads = heads, .head_dim = head_dim, .mechanism = ATTN_FLASH};
    const bsa_shape bsa = {.batch = 1, .heads = heads, .head_dim = head_dim, .grid = {frames, height, width},
                           .chunk_q = {chunk, chunk, chunk}, .chunk_k = {chunk, chunk, chunk},
                           .sparsity = sparsity, .cdf_threshold = cdf};
    float *buf = malloc((size_t)(8 * n) * sizeof(float));
    if (!buf) return fprintf(stderr, "out of memory\n"), 1;
    bench_fill(buf, (size_t)(4 * n), 7);
    memset(buf + 4 * n, 0, (size_t)(4 * n) * sizeof(float));
    pool *p = pool_create(POOL_DEVICE, 0);
    printf("attention over a %lld x %lld x %lld token grid (%lld tokens), %lld heads of %lld, batch 1, %d threads; "
           "block-sparse: chunks %lld^3, sparsity %g, cdf_threshold %g; %s\n",
           frames, height, width, (long long)T, heads, head_dim, ops_threads(), chunk, sparsity, cdf, ops_blas_info());
    timing td = {0}, tb = {0};
    if (!run(p, &dense, NULL, (int)reps, buf, n, &td)) return 1;
    memset(buf + 5 * n, 0, (size_t)(3 * n) * sizeof(float));
    if (!run(p, &dense, &bsa, (int)reps, buf, n, &tb)) return 1;
    printf("| attention | forward s | backward s | step s | GFLOP run | speed-up | kept MiB | workspace MiB |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    row("dense (flash)", &td, &td);
    row("block-sparse", &tb, &td);
    pool_destroy(p);
    free(buf);
    return 0;
}
