/* The sweep: the benchmark matrix users read to choose a schedule. Rows are modes (the spec's standard rows
 * and user rows of key=value overrides), columns device-memory budgets; each cell is a few training steps in
 * a fresh process, so that its peak and its failure are its own. */
#ifndef SEGTRAIN_SWEEP_H
#define SEGTRAIN_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "segtrain/config.h"
#include "segtrain/ops.h"
#include "segtrain/status.h"

#define SWEEP_NAME_MAX 64
#define SWEEP_TEXT_MAX 512

typedef struct sweep_mode {
    char name[SWEEP_NAME_MAX];
    char sets[SWEEP_TEXT_MAX]; /* "key=value;key=value": overrides on top of the config */
} sweep_mode;

/* The spec's standard rows (../shared/spec/checkpointing.md, "Measurement"), in its order. */
int sweep_standard_modes(sweep_mode *out, int max);
/* A mode from the command line: a standard row's name, or "name:key=value,key=value". */
st_status sweep_parse_mode(const char *text, sweep_mode *out);
/* ST_ERR_UNSUPPORTED, with the config's line, when the row sets a key segtrain does not have (an option it does
 * not offer, such as a checkpointing key of another trainer): its cells are unsupported, not failed. */
st_status sweep_check_mode(const sweep_mode *m);

typedef enum cell_status { CELL_OK, CELL_OOM, CELL_FAILED, CELL_UNSUPPORTED, CELL_NOT_RUN } cell_status;
const char *cell_status_name(cell_status s); /* "ok", "oom", "failed", "unsupported", "not_run" */

typedef struct sweep_cell {
    int mode;                 /* index into the sweep's modes */
    size_t device_memory;     /* the column's budget; 0 = unlimited */
    cell_status status;
    char error[SWEEP_TEXT_MAX]; /* failed / unsupported / oom: the one-line reason */
    int steps;                /* measured steps */
    double sec_median, sec_min, sec_max;
    size_t peak_device, peak_host;           /* measured over the measured steps (oom: what the plan needed) */
    size_t predicted_device, predicted_host; /* the plan's */
    size_t to_host, to_device;               /* bytes moved per step */
    char plan[SWEEP_TEXT_MAX];               /* the printed plan of every sequence, "; "-joined */
    op_profile work; /* the ops' profile of one measured step, averaged (in-process runs: not in the cell's JSON) */
    int same_plan_as;                        /* index of an earlier mode with an identical plan, or -1 */
} sweep_cell;

typedef struct machine_info {
    char cpu[128], blas[256];
    int cores, threads;
} machine_info;

void machine_describe(machine_info *out);

typedef struct sweep_result {
    char config[SWEEP_TEXT_MAX]; /* the config path (or "defaults") */
    char preset[SWEEP_NAME_MAX];
    int warmup, steps;
    machine_info machine;
    int n_modes, n_budgets;
    sweep_mode *modes;
    size_t *budgets;    /* n_budgets columns; 0 = unlimited */
    sweep_cell *cells;  /* n_modes * n_budgets, row-major */
} sweep_result;

/* What a measured run sets on top of its config: synthetic data, no checkpoint files and no validation, `steps`
 * steps in all, and its output in output_dir (unless NULL). */
st_status sweep_measured_config(config *cfg, int steps, const char *output_dir);

/* Runs one cell in this process: the config (with the mode's overrides and the budget already applied) trained
 * for warmup + steps steps in a scratch output folder, measuring the last `steps`. The prediction and the plan are
 * filled in whatever happens; refusals and budgets become statuses, not errors. */
void sweep_run_cell(const config *cfg, int warmup, int steps, sweep_cell *cell);
/* A cell as one JSON object and back: how a child process hands its cell to the sweep. */
char *sweep_cell_to_json(const sweep_cell *c);
st_status sweep_cell_from_json(const char *text, sweep_cell *c);
/* Marks, in every cell, the earlier mode whose plan (in the same column) is identical, or -1. */
void sweep_mark_identical_plans(sweep_result *r);

/* Writes sweep.md, sweep.json, sweep.csv and sweep.svg into dir. */
st_status sweep_write_reports(const sweep_result *r, const char *dir);
/* The Markdown table alone (what the terminal shows at the end). */
void sweep_write_markdown(const sweep_result *r, FILE *f);

#endif
