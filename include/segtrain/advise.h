/* The budget advisor: given a device-memory budget, the fastest schedule predicted to fit. Memory comes from the
 * dry step (exact); time from a cost model calibrated by measuring five schedules on this machine:
 *   sec/step = T_none + n_last * r_recompute + (n_ckpt - n_last) * r_inner + n_ffn * r_ffn
 *              - (attention offload ? n_ckpt * r_attention : 0)
 * with r_recompute the cost of recomputing a segment's last block (which need not make its output), r_inner of
 * recomputing a block inside a segment (it makes its output for the next), r_ffn of recomputing a feed-forward
 * half, r_attention what attention offload saves a recomputed block (copies are hidden behind compute,
 * docs/BENCHMARKS.md). */
#ifndef SEGTRAIN_ADVISE_H
#define SEGTRAIN_ADVISE_H

#include <stdbool.h>
#include <stdio.h>

#include "segtrain/config.h"
#include "segtrain/plan.h"

/* Builds the run's config with extra overrides ("key=value;key=value"); NULL (with st_error set) on failure. */
typedef config *(*config_factory)(void *ctx, const char *sets);

typedef struct schedule {
    ckpt_settings cs;
    char name[96];  /* "torch interval 2 stride 4 + attention offload" */
    char sets[256]; /* the same as key=value overrides */
    double sec;     /* predicted */
    size_t peak_device, peak_host;
    bool fits;
} schedule;

typedef struct advice {
    double t_none, r_recompute, r_inner, r_ffn, r_attention; /* the calibration, seconds */
    int n_blocks;
    schedule rule[16]; /* the decision rule's walk, in order */
    int n_rule, rule_choice; /* rule_choice: index into rule, or -1 when nothing fits */
    schedule best;           /* the search's answer (valid when found) */
    bool found;
    int searched;
} advice;

/* Calibrates (runs five schedules here, a few steps each), walks the decision rule and searches every schedule
 * (backend x interval x stride x attention offload) for the fastest predicted to fit device_budget. */
st_status advise(config_factory make, void *ctx, size_t device_budget, FILE *progress, advice *out);
/* Removes a scratch output folder made for measuring runs (it holds only their step log). */
void remove_scratch(const char *dir);
/* The schedule's name and overrides, from its settings. */
void schedule_describe(schedule *s);

#endif
