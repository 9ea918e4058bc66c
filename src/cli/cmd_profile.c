/* `segtrain profile`: where a training step's time goes, by kind of op, so that the next bottleneck is visible. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "segtrain/advise.h"
#include "segtrain/ops.h"
#include "segtrain/sweep.h"
#include "segtrain/train.h"

static const char profile_help[] =
    "usage: segtrain profile [--config C] [--steps N] [--warmup W] [--set key=value ...]\n"
    "\n"
    "Trains W warm-up and N profiled steps (default 1 and 3) of the configured model on synthetic batches and\n"
    "prints where the time of a step goes: GEMMs, attention, normalization, elementwise ops, the optimizer, and\n"
    "the time compute waited for copies to or from host memory; with the achieved GFLOP/s of the GEMMs and of\n"
    "attention's matrix products. Everything else (allocation, bookkeeping, the loss) is `other`.\n";

int cmd_profile(int argc, char **argv)
{
    const char *config_path = NULL;
    long long steps = 3, warmup = 1;
    const cli_flag flags[] = {{"--config", .text = &config_path},
                              {"--steps", .whole = &steps, .min = 1, .max = CLI_STEPS_MAX},
                              {"--warmup", .whole = &warmup, .min = 0, .max = CLI_STEPS_MAX},
                              {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(profile_help, stdout), 0) : rc;
    config *cfg;
    trainer *t = NULL;
    char tmpdir[] = "/tmp/segtrain-profile-XXXXXX";
    st_status st = cli_load_config(config_path, &a, &cfg);
    if (!st && !mkdtemp(tmpdir)) st = st_fail(ST_ERR_IO, "cannot create a scratch folder in /tmp");
    if (!st) st = sweep_measured_config(cfg, (int)(warmup + steps), tmpdir);
    if (!st) st = trainer_create(cfg, stderr, &t);
    double step_sec = 0, opt_sec = 0;
    copy_stats copies = {0};
    op_profile prof = {0};
    for (int s = 0; !st && s < warmup + steps; s++) {
        copy_engine *engine = model_copy_engine(trainer_model(t));
        if (s == warmup) {
            ops_profile_start();
            if (engine) copy_engine_reset_stats(engine);
        }
        train_step_info in;
        st = trainer_step(t, &in);
        if (s >= warmup) step_sec += in.seconds, opt_sec += in.optimizer_seconds;
        if (s == warmup + steps - 1) {
            ops_profile_stop(&prof);
            if (engine) copy_engine_stats(engine, &copies);
        }
    }
    if (!st) {
        const model_config *mc = model_get_config(trainer_model(t));
        printf("%s, batch %lld, %s attention, %d threads: %.3f s/step over %d steps\n\n", mc->preset,
               (long long)config_int(cfg, "train_batch_size"), mc->mechanism == ATTN_MATH ? "math" : "flash",
               ops_threads(), step_sec / steps, (int)steps);
        printf("| part | calls/step | ms/step | share | GFLOP/s |\n|---|---|---|---|---|\n");
        double accounted = 0;
        for (int k = 0; k < OP_KIND_COUNT; k++) {
            accounted += prof.seconds[k];
            printf("| %s | %.0f | %.1f | %.1f%% | ", op_kind_name((op_kind)k), prof.calls[k] / (double)steps,
                   1e3 * prof.seconds[k] / steps, 100 * prof.seconds[k] / step_sec);
            if (prof.flops[k] > 0) printf("%.1f |\n", prof.flops[k] / prof.seconds[k] * 1e-9);
            else printf("- |\n");
        }
        accounted += opt_sec + copies.waited_seconds;
        printf("| optimizer | 1 | %.1f | %.1f%% | - |\n", 1e3 * opt_sec / steps, 100 * opt_sec / step_sec);
        printf("| waiting for copies | %.0f | %.1f | %.1f%% | - |\n", (copies.copies[0] + copies.copies[1]) / (double)steps,
               1e3 * copies.waited_seconds / steps, 100 * copies.waited_seconds / step_sec);
        printf("| other | | %.1f | %.1f%% | |\n", 1e3 * (step_sec - accounted) / steps, 100 * (step_sec - accounted) / step_sec);
        double flops = 0;
        for (int k = 0; k < OP_KIND_COUNT; k++) flops += prof.flops[k];
        printf("\nall matrix products: %.1f GFLOP a step, %.1f GFLOP/s over the whole step\n", flops / steps * 1e-9,
               flops / step_sec * 1e-9);
        if (copies.busy_seconds > 0)
            printf("copies: %.1f ms a step on the copy thread, %.0f%% of it hidden behind compute\n",
                   1e3 * copies.busy_seconds / steps, 100 * (1 - copies.waited_seconds / copies.busy_seconds));
        print_fallbacks(stdout); /* the whole run's, set-up and warm-up included */
    }
    trainer_destroy(t);
    remove_scratch(tmpdir);
    config_free(cfg);
    return st ? cli_error("profile") : 0;
}
