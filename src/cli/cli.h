/* The commands of the segtrain tool; each takes its own argv (argv[0] is the command name) and returns the
 * process exit code: 0 success, 1 the work failed, 2 bad usage. */
#ifndef SEGTRAIN_CLI_H
#define SEGTRAIN_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "segtrain/advise.h"
#include "segtrain/config.h"
#include "segtrain/model.h"
#include "segtrain/model_run.h"
#include "segtrain/pool.h"

typedef int cli_command(int argc, char **argv);
cli_command cmd_version, cmd_selfcheck, cmd_init, cmd_grad, cmd_batch, cmd_plan, cmd_sample, cmd_train, cmd_sweep,
    cmd_sweep_cell, cmd_advise, cmd_profile, cmd_buckets;

#define CLI_MAX_FLAGS 16
#define CLI_MAX_SETS CONFIG_MAX_SETS
#define CLI_STEPS_MAX 1000000 /* --steps and --warmup: days of a step a second, and warmup + steps fits an int */

/* One option of a command, by name; exactly one of text, on, whole and real says where it goes. A command lists
 * its options (at most CLI_MAX_FLAGS) in a table ending with {0} and reads them from its own variables. */
typedef struct cli_flag {
    const char *name;  /* "--steps" */
    const char **text; /* the value as given */
    bool *on;          /* a switch, set when given */
    long long *whole;  /* a whole number in [min, max] */
    double *real;      /* a finite number in [min, max] */
    long long min, max;
    bool required;
} cli_flag;

typedef struct cli_args {
    const char *sets[CLI_MAX_SETS];  /* every --set key=value, in order */
    int n_sets;
    char spelled[CLI_MAX_SETS][256]; /* "key=value" of each "--key value" given SimpleTuner's way */
    int n_spelled;
    int help;
} cli_args;

/* Parses argv against a command's flags plus repeated --set; each value lands where its flag says, numbers
 * through cli_number, and a required flag left out is an error. SimpleTuner's habits work too: "--flag=value",
 * and "--config_key value" (or "--config_key=value", or a bare "--bool_key") read as "--set config_key=value".
 * Returns 0 (a->help set for --help, nothing else checked), or 2 after printing a usage error. */
int args_parse(int argc, char **argv, const cli_flag *flags, cli_args *a);
/* The one reading of a number on the command line: the whole of text, as f's kind, within [f->min, f->max],
 * stored through f->whole or f->real. 0, or 2 after printing "WHO: --flag takes ..., got 'text'" (who: e.g.
 * "segtrain sample"). */
int cli_number(const char *who, const cli_flag *f, const char *text);

/* A size on the command line ("24GiB", "450MiB"), or with rate a bandwidth ("25GB/s": bytes a second, the "/s"
 * optional), in the units of config sizes (GB 10^9, GiB 2^30); not zero. 0, or 2 after printing the usage line. */
int cli_size(const char *who, const char *flag, const char *text, bool rate, size_t *out);

/* What a config plans and trains in, after its mixed_precision: "bf16", or "float32" for `no` (the key's default,
 * where SimpleTuner's is bf16). */
const char *cli_precision(const config *cfg);
/* Says that the user chose the thread count (--threads or OMP_NUM_THREADS), not segtrain (the free cores): loaded
 * configs then carry it as num_threads. */
void cli_threads_given(void);
/* Loads the config file (NULL: all defaults) with the --set overrides applied before validation, checks the
 * model it describes (so a family that is not built is refused here, in one line), prints the warning lines
 * and applies num_threads (set to the user's count when the command line chose it). */
st_status cli_load_config(const char *path, const cli_args *a, config **out);
/* A bucket of a run (bucket_shapes) by its dry step on the run's model of its shape (model_run_open: every shape
 * on one set of weights, as train holds them): its image tokens, predicted peak and, at rates, seconds, and the
 * plan its model is planned by (its own, or the run's schedule) in gradient_checkpointing_plan's words. */
typedef struct bucket_report {
    bucket_shape shape;
    int64_t tokens;
    size_t peak;
    double sec;
    char plan[PLAN_TEXT_MAX];
} bucket_report;
/* Each of cfg's bucket_shapes at train_batch_size (*n = 0 when it gives none), timed at rates when not NULL; the
 * index of the largest peak in *largest. */
st_status cli_buckets(const config *cfg, int ranks, const cost_rates *rates, bucket_report *out, int *n, int *largest);
/* With data_backend_config or a cache of aspect buckets, *cfg becomes its copy whose bucket_shapes are the data's
 * buckets, as train makes them (train_buckets_open: the data is read, a backend's lines said on stderr) and
 * *from_data is set; other data leave *cfg as it is, and so does data that cannot be read, with a warning (the
 * config's shapes are still a plan). */
void cli_data_buckets(config **cfg, int ranks, bool *from_data);
/* One line a bucket (timed: with its seconds), and its plan. */
void cli_print_buckets(const bucket_report *b, int n, int largest, bool timed);

/* Prints "segtrain COMMAND: <error line>" and returns 1. */
int cli_error(const char *command);

typedef model_run cli_model;

/* The model of a run configuration, planned by its checkpointing keys (printing the warning when they do
 * nothing); with allocate, in new device and host pools budgeted by device_memory and host_memory, else on dry
 * pools (model_run.h: enough to plan and to run a step dry). */
st_status cli_open_model(const config *cfg, bool allocate, cli_model *out);
/* Destroys the model and its pools, reporting leaks. */
void cli_close_model(cli_model *cm);
/* "plan blocks: 0-1 ckpt | 2-3 keep ..." per sequence, and any fallback. */
void print_plans(FILE *f, model *m);

void print_bytes(FILE *f, size_t bytes);
/* "label 12.3 MiB (weights 1.2 MiB, activations ...)": a peak and its composition by tag. */
void print_peak(FILE *f, const char *label, const pool_stats *s);
/* The op cases that ran on the CPU over the device's memory (ops_fallbacks), "fallback <op>: <case>, <n> calls" a
 * line, or "no fallbacks"; nothing on the CPU backend, which has no device memory (segtrain profile, selfcheck). */
void print_fallbacks(FILE *f);

#endif
