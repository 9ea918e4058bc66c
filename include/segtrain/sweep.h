/* The sweep: the benchmark matrix users read to choose a schedule. Rows are modes (the spec's standard rows
 * and user rows of key=value overrides), columns device-memory budgets; each cell is a few training steps in
 * a fresh process, so that its peak and its failure are its own. */
#ifndef SEGTRAIN_SWEEP_H
#define SEGTRAIN_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "segtrain/advise.h"
#include "segtrain/config.h"
#include "segtrain/ops.h"
#include "segtrain/plan.h"
#include "segtrain/status.h"

typedef struct cJSON cJSON;

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
    link_traffic moved; /* a predicted cell's host-device traffic (in-process: not in the cell's JSON) */
    int same_plan_as;                        /* index of an earlier mode with an identical plan, or -1 */
    int reused_from; /* 1 + the budget column whose run this cell is, not measured again (its budget binds nothing:
                      * the same config, plan and steps); 0: measured here */
} sweep_cell;

/* A measured cell whose slowest step took more than SWEEP_NOISY_SPREAD times its fastest: something else had the
 * cores while it ran (steps of one schedule on a quiet machine differ by a few per cent), so its median is not a
 * result. The reports mark it and say that the machine was busy. */
#define SWEEP_NOISY_SPREAD 1.5
bool sweep_cell_noisy(const sweep_cell *c);
typedef struct machine_info {
    char cpu[128], blas[256];
    int cores, threads;
} machine_info;

void machine_describe(machine_info *out);
/* How many other tasks are running or runnable now (/proc/loadavg, sampled over 8 ms), or -1 where it cannot be
 * read. */
double machine_others_running(void);
/* Whether the machine looks loaded, with one line saying why in note (else note is ""): other running tasks
 * (others < 0: unknown) over a quarter of the cores (they take cores the threads wait on), or two
 * GEMM rates measured back to back that differ by more than a quarter (rate <= 0: not measured). */
bool machine_load_note(double others, int cores, double rate1, double rate2, char *note, size_t n);

typedef struct sweep_result {
    char config[SWEEP_TEXT_MAX]; /* the config path (or "defaults") */
    char preset[SWEEP_NAME_MAX];
    char precision[16];          /* what it plans in, after its config's mixed_precision: "bf16", "float32" ("": unsaid) */
    int warmup, steps;
    bool predicted; /* no step ran: times from the cost model, peaks from a dry step (the family sweep's half) */
    machine_info machine;
    int n_modes, n_budgets;
    sweep_mode *modes;
    size_t *budgets;    /* n_budgets columns; 0 = unlimited */
    sweep_cell *cells;  /* n_modes * n_budgets, row-major */
} sweep_result;

/* How many of r's cells are noisy (sweep_cell_noisy). */
int sweep_noisy_cells(const sweep_result *r);

/* What a measured run sets on top of its config: synthetic data, no checkpoint files and no validation, `steps`
 * steps in all, and its output in output_dir (unless NULL). */
st_status sweep_measured_config(config *cfg, int steps, const char *output_dir);
/* Removes a scratch output folder made for measuring runs (it holds only their step log). */
void remove_scratch(const char *dir);
/* A measured run in this process, start to end: a scratch output folder, cfg made a measured run's there
 * (sweep_measured_config), warmup + steps steps (sweep_run_cell, measuring the last `steps`), the folder removed.
 * The status says what kept it from running (the folder, the config); how the run went is the cell's. */
st_status sweep_measure(config *cfg, int warmup, int steps, sweep_cell *cell);

/* Runs one cell in this process: the config (with the mode's overrides and the budget already applied) trained
 * for warmup + steps steps in a scratch output folder, measuring the last `steps`. The prediction and the plan are
 * filled in whatever happens; refusals and budgets become statuses, not errors. */
void sweep_run_cell(const config *cfg, int warmup, int steps, sweep_cell *cell);
/* A cell predicted, not run: the plan, a dry step's peaks (as peak_device and peak_host: exact for this engine)
 * and the cost model's seconds at rates (as sec_median); a refusal is its status. The budget is the caller's. */
void sweep_predict_cell(const config *cfg, const cost_rates *rates, sweep_cell *cell);
/* A cell as one JSON object and back: how a child process hands its cell to the sweep. */
char *sweep_cell_to_json(const sweep_cell *c);
st_status sweep_cell_from_json(const char *text, sweep_cell *c);
/* Marks, in every cell, the earlier mode whose plan (in the same column) is identical, or -1. */
void sweep_mark_identical_plans(sweep_result *r);

/* Writes sweep.md, sweep.json, sweep.csv and sweep.svg into dir. */
st_status sweep_write_reports(const sweep_result *r, const char *dir);
/* The Markdown report (what the terminal shows at the end), and its table alone. */
void sweep_write_markdown(const sweep_result *r, FILE *f);
void sweep_write_markdown_table(const sweep_result *r, FILE *f);
/* The result as sweep.json's object (NULL: out of memory); sweep_print_json prints and frees one. */
cJSON *sweep_result_json(const sweep_result *r);
st_status sweep_print_json(cJSON *root, FILE *f, const char *what);
/* sweep.csv's rows, each led by n_lead fields (lead_values; lead_names in the header, written when asked). */
void sweep_write_csv(const sweep_result *r, FILE *f, const char *const *lead_names, const char *const *lead_values,
                     int n_lead, bool header);
st_status sweep_write_svg(const sweep_result *r, FILE *f);
/* dir/name written atomically by writer(ctx, f). */
typedef st_status (*sweep_writer)(const void *ctx, FILE *f);
st_status sweep_write_file(const char *dir, const char *name, sweep_writer writer, const void *ctx);
/* A cell as the table shows it ("0.41 s / 2.3 GiB", "OOM (needs 31 GiB)", ...), and a size ("24 GiB", "1.50 GiB"). */
void sweep_cell_text(const sweep_cell *c, char *buf, size_t n);
void sweep_size_text(char *buf, size_t n, size_t bytes);

/* ---- the family sweep (`segtrain sweep --families`) ----------------------------------------------------------
 * SimpleTuner's matrix for each family: the modes measured on its tiny preset (cells in fresh processes, as
 * above) and predicted at its real preset and example config's shape (dry steps priced by advise.h's cost model
 * at this machine's rates) against device-memory budgets. */

#define FAMILY_BUDGETS_MAX 16
/* SimpleTuner's default mixed_precision, which the family sweep takes where an example sets none: the field
 * registry's default_value for it (simpletuner_sdk/server/services/field_registry/sections/advanced.py), from which
 * configuration/cmd_args.py builds its parser. segtrain's own default stays `no`, as `train` runs a config. */
#define SIMPLETUNER_MIXED_PRECISION "bf16"

typedef struct family_sweep {
    char family[SWEEP_NAME_MAX], flavour[SWEEP_NAME_MAX]; /* SimpleTuner's names */
    char skipped[1024];            /* why nothing of it runs (model_family_check's line), else "" */
    char note[SWEEP_TEXT_MAX];     /* what the report should say about the choices made (flavour, example), or "" */
    char example[SWEEP_TEXT_MAX];  /* the example config predicted from, "" for none */
    char shape[SWEEP_TEXT_MAX];    /* what the prediction is at: "1024 px images, batch 1" */
    char tiny_config[SWEEP_TEXT_MAX]; /* the measured half's config file, "" when it cannot run */
    config *real;                  /* the predicted half's config (NULL when it cannot run) */
    sweep_result measured, predicted;
    struct family_plan {           /* the per-block planner's answer for budget column b (b >= 1; --planner) */
        bool run, found;
        double sec;
        size_t peak;
        char plan[PLAN_TEXT_MAX];
    } planned[FAMILY_BUDGETS_MAX];
    struct family_place {          /* the fastest way to fit budget column b with the weights placed (b >= 1;
                                      --planner): advise's placement (block swap or group offload), on the base
                                      as configured and quantized */
        bool run, found;
        bool quantized;            /* on the int8-quanto base */
        int blocks;                /* blocks swapped */
        int group_blocks;          /* group offload (block_level) at this many blocks a group; 0: none */
        bool group_stream;         /* and group_offload_use_stream */
        double sec;
        size_t peak;
        char how[128];             /* "int8-quanto base, unsloth interval 1 + swap 6 blocks" */
    } placed[FAMILY_BUDGETS_MAX];
} family_sweep;

typedef struct family_report {
    char command[2048]; /* the exact command line */
    machine_info machine;
    cost_rates rates;   /* the predictions' (fixed = 0: see calibration) */
    char calibration[SWEEP_TEXT_MAX]; /* how the rates were measured, and what they leave out */
    int n_families;
    family_sweep *families;
} family_report;

/* The families of a --families list: "all" (every SimpleTuner family with a built flavour) or a comma list of
 * SimpleTuner names; an unknown name is ST_ERR_INVALID in one line listing the valid ones. *out: calloc'd. */
st_status family_sweep_select(const char *list, family_sweep **out, int *n);
/* Chooses the flavour, the tiny and the real config (examples: the folder of SimpleTuner's example configs), writes
 * the measured half's config into dir, and sizes both halves' results (modes, and budgets: the predicted half
 * gets an unlimited column before them). A family that cannot run gets `skipped` and unsupported cells. */
st_status family_sweep_prepare(family_sweep *f, const char *examples, const char *dir, const char *const *sets,
                               int n_sets, const sweep_mode *modes, int n_modes, const size_t *budgets, int n_budgets);
/* This machine's rates: one real step of a mid-size preset without checkpointing, measured in this process. */
st_status family_sweep_calibrate(family_report *rep);
/* The predicted half: one dry step per mode, each budget column fits or OOM. */
void family_sweep_predict(family_sweep *f, const cost_rates *rates);
/* The per-block planner (advise.h) at each budget column, seeded with the fastest mode that fits it. */
void family_sweep_plan(family_sweep *f, const cost_rates *rates);
/* advise's placement (advise.h) at each budget column: the fastest candidate and count of swapped blocks that fits,
 * with some blocks swapped on the base as configured or with any on an int8-quanto one (under LoRA or LyCORIS on an
 * unquantized base): what the weights' placement adds to the modes. */
void family_sweep_place(family_sweep *f, const cost_rates *rates);
/* Writes families.md, families.json and families.csv into dir, and each family's sweep reports (with their
 * charts) into dir/FAMILY/measured and dir/FAMILY/predicted. */
st_status family_sweep_write_reports(const family_report *rep, const char *dir);
/* Frees what family_sweep_prepare allocated, and the array. */
void family_sweep_free(family_sweep *f, int n);

#endif
