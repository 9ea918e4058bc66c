/* A step server for lockstep comparisons (not a test): one sweep row's training, one optimizer step for every line
 * read from stdin, each answered with "step SECONDS" on stdout, and at the end of input "peak DEVICE HOST": the
 * largest device and host pool peaks of its steps, in bytes (weights, gradients, optimizer state and the step's
 * activations and workspace). bench/compare.sh --lockstep drives it and
 * bench/pytorch_dit.py --lockstep the same way, alternating step by step, so that both sides' steps are taken in
 * the same seconds of a shared machine. A step is what a cell of `segtrain sweep` times: trainer_step on synthetic
 * data, with the mode's overrides on top of the config.
 *
 *   build/bench_step --mode ROW [--config C] [--set key=value]... [--threads T]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h" /* args_parse: the command line read as the tool reads it */
#include "segtrain/advise.h"
#include "segtrain/ops.h"
#include "segtrain/sweep.h"
#include "segtrain/train.h"

static int usage(void)
{
    fprintf(stderr, "usage: bench_step --mode ROW [--config C] [--set key=value]... [--threads T]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *mode_name = NULL, *config_path = NULL;
    long long threads = 0;
    const cli_flag flags[] = {{"--mode", .text = &mode_name, .required = true},
                              {"--config", .text = &config_path},
                              {"--threads", .whole = &threads, .min = 1, .max = 1024},
                              {0}};
    cli_args a;
    argv[0] = "bench_step";
    const int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return rc ? rc : usage();
    if (threads) ops_set_threads((int)threads);

    char dir[] = "/tmp/segtrain-step.XXXXXX";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    sweep_mode mode;
    config *cfg = NULL;
    trainer *t = NULL;
    st_status st = sweep_parse_mode(mode_name, &mode);
    if (!st) st = config_load_with(config_path, a.sets, a.n_sets, &cfg, NULL);
    if (!st) st = config_set_all(cfg, mode.sets);
    if (!st) st = sweep_measured_config(cfg, 1000000, dir); /* steps come as stdin asks */
    if (!st) st = trainer_create(cfg, NULL, &t);
    if (!st) {
        printf("ready %s\n", mode.name);
        fflush(stdout);
    }
    char line[64];
    size_t peak_device = 0, peak_host = 0;
    while (!st && fgets(line, sizeof line, stdin)) {
        train_step_info info;
        const double t0 = clock_seconds();
        st = trainer_step(t, &info);
        if (!st) printf("step %.6f\n", clock_seconds() - t0);
        if (!st && info.peak_device > peak_device) peak_device = info.peak_device;
        if (!st && info.peak_host > peak_host) peak_host = info.peak_host;
        fflush(stdout);
    }
    if (!st) printf("peak %zu %zu\n", peak_device, peak_host);
    if (st) fprintf(stderr, "bench_step: %s\n", st_error());
    trainer_destroy(t);
    config_free(cfg);
    remove_scratch(dir);
    return st ? 1 : 0;
}
