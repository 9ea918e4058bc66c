/* The commands of the segtrain tool; each takes its own argv (argv[0] is the command name) and returns the
 * process exit code: 0 success, 1 the work failed, 2 bad usage. */
#ifndef SEGTRAIN_CLI_H
#define SEGTRAIN_CLI_H

#include <stdio.h>

#include "segtrain/config.h"
#include "segtrain/model.h"
#include "segtrain/model_run.h"
#include "segtrain/pool.h"

int cmd_version(int argc, char **argv);
int cmd_selfcheck(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_grad(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_sweep_cell(int argc, char **argv);
int cmd_advise(int argc, char **argv);
int cmd_profile(int argc, char **argv);

#define CLI_MAX_FLAGS 16
#define CLI_MAX_SETS CONFIG_MAX_SETS

typedef struct cli_args {
    const char *value[CLI_MAX_FLAGS]; /* value of flags[k], or NULL */
    int on[CLI_MAX_FLAGS];            /* whether switches[k] was given */
    const char *sets[CLI_MAX_SETS];   /* every --set key=value, in order */
    int n_sets;
    char spelled[CLI_MAX_SETS][256];  /* "key=value" of each "--key value" given SimpleTuner's way */
    int n_spelled;
    int help;
} cli_args;

/* Parses argv against NULL-terminated lists of flags taking a value and of switches, plus repeated --set.
 * SimpleTuner's habits work too: "--flag=value", and "--config_key value" (or "--config_key=value", or a bare
 * "--bool_key") read as "--set config_key=value". Returns 0, or 2 after printing a usage error. */
int args_parse(int argc, char **argv, const char *const *flags, const char *const *switches, cli_args *a);
/* Checks that flags[first .. first+n) were given; 0 or 2 after printing which is missing. */
int args_require(const cli_args *a, const char *const *flags, int first, int n, const char *command);

/* Loads the config file (NULL: all defaults) with the --set overrides applied before validation, checks the
 * model it describes (so a family that is not built is refused here, in one line), prints the warning lines
 * and applies num_threads. */
st_status cli_load_config(const char *path, const cli_args *a, config **out);
/* Prints "segtrain COMMAND: <error line>" and returns 1. */
int cli_error(const char *command);

typedef model_run cli_model;

/* The model of a run configuration, planned by its checkpointing keys (printing the warning when they do
 * nothing); with allocate, in new device and host pools budgeted by device_memory and host_memory, else with
 * its parameters registered but not allocated (enough to plan). */
st_status cli_open_model(const config *cfg, bool allocate, cli_model *out);
/* Destroys the model and its pools, reporting leaks. */
void cli_close_model(cli_model *cm);
/* "plan blocks: 0-1 ckpt | 2-3 keep ..." per sequence, and any fallback. */
void print_plans(FILE *f, model *m);

void print_bytes(FILE *f, size_t bytes);
/* "label 12.3 MiB (weights 1.2 MiB, activations ...)": a peak and its composition by tag. */
void print_peak(FILE *f, const char *label, const pool_stats *s);

#endif
