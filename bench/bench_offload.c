/* Offload benchmark (not a test): dit-s2 training steps (forward + backward of the rectified-flow loss) under
 * torch vs unsloth and layer vs activation-offload, side by side in one run, with how much of the copy time
 * was hidden behind compute.
 *
 *   build/bench_offload [--steps N] [--warmup W] [--batch B] [--preset dit-s2]
 */
#include <string.h>

#include "benchkit.h"

typedef struct row {
    const char *name;
    ckpt_settings cs;
} row;

int main(int argc, char **argv)
{
    long long steps = 5, warmup = 1, batch = 8;
    const char *preset = "dit-s2";
    const cli_flag flags[] = {{"--steps", .whole = &steps, .min = 1, .max = 100},
                              {"--warmup", .whole = &warmup, .min = 0, .max = 100},
                              {"--batch", .whole = &batch, .min = 1, .max = 65536},
                              {"--preset", .text = &preset},
                              {0}};
    if (bench_args(argc, argv, "bench_offload", flags)) return 2;
    bench_model bm;
    if (bench_open(preset, batch, &bm)) return 1;
    model *m = bm.m;
    pool *dev = bm.dev;
    flow_batch fb = bm.fb;

    const row rows[] = {
        {"torch (interval 1)", {.enabled = true, .backend = BACKEND_TORCH, .interval = 1, .stride = 1}},
        {"unsloth (interval 1)", {.enabled = true, .backend = BACKEND_UNSLOTH, .interval = 1, .stride = 1}},
        {"torch (interval 2)", {.enabled = true, .backend = BACKEND_TORCH, .interval = 2, .stride = 2}},
        {"unsloth (interval 2)", {.enabled = true, .backend = BACKEND_UNSLOTH, .interval = 2, .stride = 2}},
        {"layer", {.enabled = true, .backend = BACKEND_TORCH, .interval = 1, .stride = 1}},
        {"activation-offload",
         {.enabled = true, .backend = BACKEND_TORCH, .interval = 1, .stride = 1, .offload_attention = true}},
        {"torch-ffn", {.enabled = true, .backend = BACKEND_TORCH_FFN, .interval = 1, .stride = 1}},
        {"unsloth-ffn", {.enabled = true, .backend = BACKEND_UNSLOTH_FFN, .interval = 1, .stride = 1}},
    };
    printf("%s, batch %lld, %d threads; median of %lld steps after %lld warm-up\n", preset, batch, ops_threads(), steps,
           warmup);
    printf("%-22s %9s %11s %12s %12s %10s %8s\n", "mode", "sec/step", "peak MiB", "to host MiB", "copy busy s",
           "waited s", "hidden");
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        if (model_set_checkpointing(m, &rows[r].cs, NULL, 0)) return fprintf(stderr, "%s\n", st_error()), 1;
        double sec[100];
        size_t peak = 0;
        copy_stats cs = {0};
        for (int s = 0; s < warmup + steps; s++) {
            float loss;
            if (s == warmup) {
                pool_reset_peak(dev);
                copy_engine_reset_stats(model_copy_engine(m));
            }
            param_set_zero_grads(model_params(m));
            double t0 = clock_seconds();
            if (flow_loss(m, &fb, true, &loss)) return fprintf(stderr, "%s\n", st_error()), 1;
            if (s >= warmup) sec[s - warmup] = clock_seconds() - t0;
        }
        peak = pool_peak(dev);
        copy_engine_stats(model_copy_engine(m), &cs);
        qsort(sec, (size_t)steps, sizeof *sec, bench_by_value);
        const double busy = cs.busy_seconds / steps, waited = cs.waited_seconds / steps;
        printf("%-22s %9.3f %11.1f %12.1f %12.4f %10.4f %7.0f%%\n", rows[r].name, sec[steps / 2], peak / 1048576.0,
               cs.bytes[COPY_TO_HOST] / (double)steps / 1048576.0, busy, waited,
               busy > 0 ? 100.0 * (1.0 - (waited < busy ? waited : busy) / busy) : 0.0);
    }
    bench_close(&bm);
    return 0;
}
