/* Convolution benchmark (not a test): the forward and backward GFLOP/s of conv2d against the GEMM rate of the same
 * run, on SDXL's U-Net shapes at 1024 x 1024 (a 128 x 128 latent): the 3 x 3 convolutions of its three levels
 * (320 channels at 128 x 128, 640 at 64 x 64, 1280 at 32 x 32), its stride-2 downsampler into the 1280 level and the
 * 1 x 1 shortcut that widens 640 channels to 1280 (or one shape given by the flags). The GEMM rate is measured
 * right before each row (DiT-S/2's fc1 GEMM, as `segtrain selfcheck` does) so that the machine's drift hits both
 * alike; each rate is the median of the row's repetitions. FLOPs are the op's own profile count: forward
 * 2 out (in kh kw) (oh ow) an image, backward twice that (the input's and the weight's gradients).
 *
 *   build/bench_conv [--batch N] [--in C] [--out C] [--size HW] [--kernel K] [--stride S] [--threads N]
 *                    [--seconds S]
 */
#include <string.h>

#include "benchkit.h"
#include "segtrain/ops.h"
#include "segtrain/status.h"

#define REPS_MAX 15

/* Forward and backward of one shape after a warm-up, repeated until `seconds` have passed (at least twice); medians
 * in GFLOP/s. 0 after printing why on failure. */
static int conv_rates(pool *p, const conv_shape *s, double seconds, double *fwd, double *bwd)
{
    const size_t nx = (size_t)(s->batch * s->in * s->h * s->w), nw = (size_t)(s->out * s->in * s->kh * s->kw);
    const size_t ny = (size_t)(s->batch * s->out * conv_out_h(s) * conv_out_w(s));
    float *x = malloc(nx * sizeof(float)), *w = malloc(nw * sizeof(float)), *b = malloc((size_t)s->out * sizeof(float));
    float *y = malloc(ny * sizeof(float)), *dx = calloc(nx, sizeof(float)), *dw = calloc(nw, sizeof(float));
    float *db = calloc((size_t)s->out, sizeof(float));
    if (!x || !w || !b || !y || !dx || !dw || !db) return fprintf(stderr, "out of memory\n"), 0;
    bench_fill(x, nx, 1), bench_fill(w, nw, 2), bench_fill(b, (size_t)s->out, 3);
    double tf[REPS_MAX], tb[REPS_MAX], flop[2];
    int reps = 0, ok = 1;
    const double start = clock_seconds();
    for (int r = 0; r <= REPS_MAX && ok; r++) {
        op_profile pf, pb;
        ops_profile_start();
        double t0 = clock_seconds();
        ok = conv2d_forward(p, y, x, w, b, s) == ST_OK;
        double t1 = clock_seconds();
        ops_profile_stop(&pf);
        ops_profile_start();
        double t2 = clock_seconds();
        ok = ok && conv2d_backward(p, dx, dw, db, y, x, w, s) == ST_OK;
        double t3 = clock_seconds();
        ops_profile_stop(&pb);
        flop[0] = pf.flops[OP_GEMM], flop[1] = pb.flops[OP_GEMM];
        if (r == 0) continue;
        tf[reps] = t1 - t0, tb[reps] = t3 - t2, reps++;
        if (reps >= 2 && clock_seconds() - start > seconds) break;
    }
    if (!ok) fprintf(stderr, "%s\n", st_error());
    else *fwd = flop[0] / bench_median(tf, reps) * 1e-9, *bwd = flop[1] / bench_median(tb, reps) * 1e-9;
    free(x), free(w), free(b), free(y), free(dx), free(dw), free(db);
    return ok;
}

int main(int argc, char **argv)
{
    long long batch = 1, in = 0, out = 0, size = 0, kernel = 3, stride = 1, threads = 2;
    double seconds = 2.0;
    const cli_flag flags[] = {{"--batch", .whole = &batch, .min = 1, .max = 1024},
                              {"--in", .whole = &in, .min = 1, .max = 1 << 16},
                              {"--out", .whole = &out, .min = 1, .max = 1 << 16},
                              {"--size", .whole = &size, .min = 1, .max = 1 << 14},
                              {"--kernel", .whole = &kernel, .min = 1, .max = 15},
                              {"--stride", .whole = &stride, .min = 1, .max = 8},
                              {"--threads", .whole = &threads, .min = 1, .max = 1024},
                              {"--seconds", .real = &seconds, .min = 0, .max = 3600},
                              {0}};
    if (bench_args(argc, argv, "bench_conv", flags)) return 2;
    if ((in || out || size) && !(in && out && size))
        return fprintf(stderr, "bench_conv: --in, --out and --size go together\n"), 2;
    ops_set_threads((int)threads);
    /* in, out, size, kernel, stride */
    const long long sdxl[][5] = {{320, 320, 128, 3, 1}, {640, 640, 64, 3, 1}, {1280, 1280, 32, 3, 1},
                                 {640, 640, 64, 3, 2},  {640, 1280, 32, 1, 1}};
    const long long mine[][5] = {{in, out, size, kernel, stride}};
    const long long(*shapes)[5] = in ? mine : sdxl;
    const int n = in ? 1 : (int)(sizeof sdxl / sizeof sdxl[0]);
    pool *p = pool_create(POOL_DEVICE, 0);
    printf("conv2d, batch %lld, %d threads, %s\n", batch, ops_threads(), ops_blas_info());
    printf("| in | out | size | kernel | stride | GEMM GFLOP/s | forward GFLOP/s | ratio | backward GFLOP/s | "
           "ratio |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const long long *r = shapes[i];
        const conv_shape s = {.batch = batch, .in = r[0], .out = r[1], .h = r[2], .w = r[2], .kh = r[3], .kw = r[3],
                              .sh = r[4], .sw = r[4], .ph = r[3] / 2, .pw = r[3] / 2};
        const double g = bench_gemm_rate(0.5);
        double f, b;
        if (!conv_rates(p, &s, seconds, &f, &b)) return 1;
        printf("| %lld | %lld | %lld | %lld | %lld | %.1f | %.1f | %.2f | %.1f | %.2f |\n", r[0], r[1], r[2], r[3],
               r[4], g, f, f / g, b, b / g);
        fflush(stdout);
    }
    pool_destroy(p);
    return 0;
}
