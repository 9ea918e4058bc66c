/* segtrain: the command-line front end. Each command is one function in this folder; main only dispatches. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "segtrain/config.h"
#include "segtrain/ops.h"
#include "segtrain/sweep.h"

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"sweep", cmd_sweep, "measure every checkpointing mode and budget; Markdown, JSON, CSV and SVG reports"},
    {"advise", cmd_advise, "the fastest schedule predicted to fit a memory budget (--verify runs it)"},
    {"profile", cmd_profile, "where a training step's time goes, by kind of op, with achieved GFLOP/s"},
    {"train", cmd_train, "train on a dataset (the built-in one by default): checkpoints, samples, logs"},
    {"sample", cmd_sample, "a PNG grid of images from trained weights, one row per class or caption"},
    {"plan", cmd_plan, "the checkpoint plan and the predicted peak memory of a training step"},
    {"buckets", cmd_buckets,
     "every image of data_backend_config in its aspect bucket (--json: what make_cache.py --buckets reads)"},
    {"init", cmd_init, "write freshly initialised weights of the configured model"},
    {"grad", cmd_grad, "loss and every weight's gradient for one batch, with the step's peak memory"},
    {"batch", cmd_batch, "write a seeded random batch in the format grad reads"},
    {"selfcheck", cmd_selfcheck, "check the build on this machine: BLAS, threads, GEMM rate, attention"},
    {"version", cmd_version, "print the version"},
    {"sweep-cell", cmd_sweep_cell, NULL}, /* internal: one sweep cell, run by `sweep` in a child process */
};

static void usage(FILE *to)
{
    fprintf(to,
            "segtrain %s: trains diffusion transformers with segmented activation checkpointing\n"
            "\n"
            "usage: segtrain [--threads N] [--lenient] COMMAND [options]\n"
            "\n"
            "commands:\n",
            SEGTRAIN_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (commands[i].summary) fprintf(to, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(to, "\n"
                "start here:\n"
                "  segtrain selfcheck                    what this machine gives the engine\n"
                "  segtrain plan --config c.json         what a config will do and need, before anything runs\n"
                "  segtrain train --config c.json        train (on the built-in shapes dataset when data_dir is empty)\n"
                "  segtrain sweep --config c.json        every checkpointing mode measured; then `advise` for a budget\n"
                "Configs are SimpleTuner's config.json; every key is in docs/CONFIG.md; --set key=value (or\n"
                "SimpleTuner's --key value) overrides one before the file is validated.\n"
                "Families (model_family and model_flavour, or model_preset): SimpleTuner's, by its names (flux,\n"
                "sd3, sana, wan, pixart_sigma, sdxl, ...), with diffusers' weights and config.json; and segtrain's\n"
                "own dit, mmdit and skipdit (dit-s2, ...). docs/FAMILIES.md lists each family with its flavours and\n"
                "presets, and what is refused and why.\n"
                "\n"
                "global options:\n"
                "  --threads N   OpenMP threads for every op and for BLAS (default: the cores that other processes leave\n"
                "                free at start; a waiting thread spins briefly, then sleeps: GOMP_SPINCOUNT=1000 unless\n"
                "                OMP_WAIT_POLICY or GOMP_SPINCOUNT is set)\n"
                "  --lenient     a config key one edit from a known one (learning_rte) is a warning, not an error\n"
                "  -h, --help    this help; `segtrain help COMMAND` or `segtrain COMMAND --help` explains a command\n");
}

int cmd_version(int argc, char **argv)
{
    if (argc > 1) {
        const bool help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
        if (!help) fprintf(stderr, "segtrain version: unexpected argument '%s' (it takes none)\n", argv[1]);
        fputs("usage: segtrain version\n\nPrints the engine's version, as `segtrain --version` does.\n",
              help ? stdout : stderr);
        return help ? 0 : 2;
    }
    printf("segtrain %s\n", SEGTRAIN_VERSION);
    return 0;
}

/* Two settings that the OpenMP runtime and OpenBLAS read once, when they load, before main runs; the only way to
 * change them for this process is to start it again with the variables set: the same pid, argv and environment
 * (mpirun's included), once, since the second start finds nothing left to set. A value the user set wins.
 * - Waits: OpenMP threads that spin hold their core while the thread they wait for has lost its own to another
 *   process: on a busy 2-core machine a step took 10-30x as long as at --threads 1 with libgomp's 300,000 spins.
 *   GOMP_SPINCOUNT=1000 (a few microseconds, then sleep) is as fast as passive waits there and as fast as the long
 *   spin on a quiet machine, where passive waits cost a third of a small step. Unless OMP_WAIT_POLICY or
 *   GOMP_SPINCOUNT is set; SEGTRAIN_OMP_DEFAULTS=1 keeps libgomp's default.
 * - Kernels: an OpenBLAS older than the CPU loads kernels older than the CPU takes (SSE3 ones on an AVX-512 CPU, a
 *   third of the step's speed): OPENBLAS_CORETYPE names the better ones unless it is set; SEGTRAIN_BLAS_DEFAULTS=1
 *   keeps OpenBLAS's own choice. (docs/BENCHMARKS.md, "A busy machine", measures both.) */
#define WAIT_SPINS "1000"
static void restart_with_runtime_settings(char **argv)
{
    bool again = false, waits = false, kernels = false;
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") && !getenv("SEGTRAIN_OMP_DEFAULTS"))
        again = waits = !setenv("GOMP_SPINCOUNT", WAIT_SPINS, 1);
    const bool own_kernels = getenv("OPENBLAS_CORETYPE") || getenv("SEGTRAIN_BLAS_DEFAULTS");
    const char *better = own_kernels ? NULL : ops_blas_better_core();
    if (better && !setenv("OPENBLAS_CORETYPE", better, 1)) again = kernels = true;
    if (!again) return;
    execv("/proc/self/exe", argv);
    /* no /proc: run on as before, and say nothing that is not so */
    if (waits) unsetenv("GOMP_SPINCOUNT");
    if (kernels) unsetenv("OPENBLAS_CORETYPE");
}

/* With no --threads or OMP_NUM_THREADS, the threads take the cores that other processes leave free when the command
 * starts: a thread that shares its core with a busy process stalls every barrier of the step, however it waits
 * (docs/BENCHMARKS.md, "A busy machine"). A sweep passes its count on to its cells. `plan` runs no step's arithmetic
 * and keeps every core: its prediction counts per-thread workspace (attention's), so taking the free cores made it
 * follow the machine's load (auraflow's printed 1023.59 MiB of workspace on a busy machine, 1.00 GiB on a quiet
 * one); with all of them it is the largest a run here can take, the same whatever else runs. */
static void take_free_cores(void)
{
    const int cores = ops_threads();
    if (cores == 1) return; /* nothing to give up: no need to look */
    const int others = (int)machine_others_running();
    if (others >= 1) ops_set_threads(cores - others > 1 ? cores - others : 1);
}

int main(int argc, char **argv)
{
    restart_with_runtime_settings(argv);
    bool threads_given = getenv("OMP_NUM_THREADS") != NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            return cmd_version(0, NULL);
        } else if (!strcmp(argv[i], "--lenient")) {
            config_set_lenient(true);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            long long n;
            const cli_flag threads = {"--threads", .whole = &n, .min = 1, .max = 1024};
            if (cli_number("segtrain", &threads, argv[++i])) return 2;
            ops_set_threads((int)n);
            threads_given = true;
        } else {
            fprintf(stderr, "segtrain: unknown option '%s' (see segtrain --help)\n", argv[i]);
            return 2;
        }
    }
    if (i == argc) {
        usage(stderr);
        return 2;
    }
    if (threads_given) cli_threads_given();
    else if (strcmp(argv[i], "plan")) take_free_cores();
    /* `segtrain help [COMMAND]`, as git and pip take it: the same text as --help */
    const bool help = !strcmp(argv[i], "help");
    if (help && i + 1 == argc) {
        usage(stdout);
        return 0;
    }
    if (help && i + 2 < argc) {
        fprintf(stderr, "segtrain help: takes one command, not '%s' too (see segtrain --help)\n", argv[i + 2]);
        return 2;
    }
    const char *name = argv[i + help];
    for (size_t c = 0; c < sizeof commands / sizeof *commands; c++)
        if (!strcmp(name, commands[c].name)) {
            char *help_argv[] = {argv[i + 1], "--help", NULL};
            return help ? commands[c].run(2, help_argv) : commands[c].run(argc - i, argv + i);
        }
    fprintf(stderr, "segtrain: unknown command '%s' (see segtrain --help)\n", name);
    return 2;
}
