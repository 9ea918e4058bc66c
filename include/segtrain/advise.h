/* The budget advisor: given a device-memory budget, the fastest schedule predicted to fit. Both predictions come
 * from the same dry step (objective.h): its pools' peaks are the memory, exactly, and the work its ops count is the
 * time, through a cost model calibrated by one real step without checkpointing on this machine:
 *   sec/step = fixed + sum over kinds of op (GEMM, attention, normalization, elementwise) of work * seconds per unit
 * with work in FLOPs for GEMMs and attention and in bytes read and written for the memory-bound kinds, each kind's
 * seconds per unit as that step measured them, and `fixed` what no op accounts for (the optimizer, copies waited
 * for), the same for every schedule. Recompute, feed-forward recompute and attention offload change the work a
 * dry step counts, so each schedule's time follows from its own plan (docs/BENCHMARKS.md measures the error). */
#ifndef SEGTRAIN_ADVISE_H
#define SEGTRAIN_ADVISE_H

#include <stdbool.h>
#include <stdio.h>

#include "segtrain/config.h"
#include "segtrain/model_run.h"
#include "segtrain/ops.h"
#include "segtrain/plan.h"

/* Builds the run's config with extra overrides ("key=value;key=value"); NULL (with st_error set) on failure. */
typedef config *(*config_factory)(void *ctx, const char *sets);

typedef struct schedule {
    ckpt_settings cs;
    char name[96];  /* "torch interval 2 stride 4 + attention offload" */
    char sets[CKPT_TEXT_MAX]; /* the same as key=value overrides */
    double sec;     /* predicted */
    size_t peak_device, peak_host;
    bool fits;
    bool refused; /* the family refuses it (model_set_checkpointing's reason, e.g. skips read after boundary offload) */
    bool places; /* it says where the weights live: musubi_blocks_to_swap = blocks_to_swap, or group offload
                    (group_blocks > 0), in its name and sets */
    int blocks_to_swap;
    int group_blocks;  /* enable_group_offload, block_level, group_offload_blocks_per_group = group_blocks */
    bool group_stream; /* and group_offload_use_stream */
} schedule;

/* Seconds per unit of work for each kind of op (per FLOP, or per byte for memory-bound kinds), and fixed seconds;
 * and the host-to-device link's seconds per byte (0: its traffic not priced). */
typedef struct cost_rates {
    double per_unit[OP_KIND_COUNT];
    double fixed;
    double link_per_byte;
} cost_rates;

/* What a step moves between host and device memory: the swapped blocks' weights brought in (block swap: each
 * block's at its forward, at its recompute and at its backward), and what attention and boundary offload send to
 * the host and bring back. */
typedef struct link_traffic {
    size_t swap_in, offload_out, offload_in;
} link_traffic;

/* The traffic counted so far by m's swapped weights and copy engine (dry or not); a step's is the difference of two
 * readings, link_traffic_since. */
void link_traffic_read(model *m, link_traffic *out);
link_traffic link_traffic_since(model *m, const link_traffic *before);
/* The seconds of a step's traffic that the step waits for, at the rates' link bandwidth: the swapped weights' alone.
 * The executor brings a block's weights in right before the block runs and waits for them (param_swap_in: not
 * prefetched), so nothing hides them; offload's copies run on the copy thread while the blocks after compute, and
 * are taken as hidden, as BENCHMARKS.md measured them (their seconds: link_seconds_all). */
double link_seconds_waited(const cost_rates *r, const link_traffic *t);
double link_seconds_all(const cost_rates *r, const link_traffic *t);
/* This machine's host-to-device bandwidth, bytes per second: 64 MiB copies from the host pool to the device pool
 * on a copy engine, the best of those made in about a quarter of a second (on the CPU backend, a memcpy). */
st_status link_bandwidth_measure(double *bytes_per_sec);

/* Rates from a real step's op profile (measured) and its wall time. */
cost_rates cost_calibrate(const op_profile *measured, double step_seconds);
/* A step's predicted seconds from its work (a dry step's op profile). */
double cost_predict(const cost_rates *r, const op_profile *work);
/* ... and with the link's seconds that the step waits for (link_seconds_waited): a whole step's prediction. */
double cost_predict_step(const cost_rates *r, const op_profile *work, const link_traffic *moved);
/* A step of r's model (on dry pools) run dry under the ops' profile (flow_step_dry, the optimizer of one rank of
 * `ranks`): its peaks in *dev and *host, and its seconds at the rates in *sec (its ops' and the link's that it waits
 * for, link_seconds_waited). */
st_status cost_of_dry_step(model_run *r, int64_t batch, int ranks, const cost_rates *rates,
                           pool_stats *dev, pool_stats *host, double *sec);

/* Every uniform schedule (backend x interval x stride x attention offload or kept attention output) predicted
 * by a dry step at the rates: the fastest that fits device_budget in *best (*found), and how many were tried. */
void search_uniform(model_run *r, int64_t batch, int ranks, const cost_rates *rates,
                    size_t device_budget, schedule *best, bool *found, int *searched);
/* The per-block planner (planner.c): a gradient_checkpointing_plan in which each block keeps, recomputes its
 * feed-forward or sits in a checkpointed segment, found by dynamic programming for the least predicted time whose
 * dry-run peak fits device_budget (0: unlimited). It probes every block with a dry step, then searches the
 * program's memory allowance until the dry peak, which is exact, fits. seed (may be NULL), a uniform schedule
 * that fits, is a candidate in its plan's words, so that the answer is never predicted slower than it. *found is
 * false when no plan fits; the model is left planned by *out's plan when one does. */
st_status plan_blocks(model_run *r, int64_t batch, int ranks, const cost_rates *rates,
                      size_t device_budget, const schedule *seed, FILE *progress, schedule *out, bool *found);

/* The placement's candidates at each count of swapped blocks, and under group offload at each number of blocks a
 * group: SimpleTuner's rule's schedules (none; torch-ffn, torch, unsloth-ffn, unsloth at interval 1), and torch and
 * unsloth with attention offload. */
#define PLACE_MAX 256 /* the most counts of swapped blocks the placement tries (a sequence's blocks) */
/* Group offload's tries: block_level at 1, 2, 4, ... blocks a group (group_offload_blocks_per_group, up to the
 * longest block list), and one block a group with group_offload_use_stream, which SimpleTuner turns off under
 * gradient_checkpointing (so only without checkpointing) and diffusers takes at one block a group. */
#define GROUP_PLACE_MAX 16

/* One count of swapped blocks, or one group offload setting: its fastest candidate that fits (fits false: none
 * does). */
typedef struct placement {
    char name[96];
    double sec;
    size_t peak_device;
    bool fits;
    int candidate;    /* its index among the candidates */
    int group_blocks; /* group offload's blocks a group; 0: block swap (the count is its index in advice.place) */
    bool stream;      /* group offload's group_offload_use_stream */
} placement;

typedef struct advice {
    double t_none;    /* the calibration step: no checkpointing, measured (the median of its steps) */
    double t_none_min, t_none_max; /* its fastest and slowest steps */
    bool noisy;       /* they differ by more than a sweep cell may (sweep_cell_noisy): every rate is suspect */
    cost_rates rates; /* and what it measured */
    int n_blocks;
    schedule rule[16]; /* the decision rule's walk, in order */
    int n_rule, rule_choice; /* rule_choice: index into rule, or -1 when nothing fits */
    schedule best;           /* the search's answer (valid when found) */
    bool found;
    int searched;
    schedule planned; /* the per-block planner's answer (valid when planned_found) */
    bool planned_found;
    char plan_words[PLAN_TEXT_MAX]; /* the advice (advice_pick) in gradient_checkpointing_bucket_plans' words: "none",
                                       or the plan it makes of the model; "" when nothing fits */
    double link_rate;  /* the link's bytes per second the times are priced at */
    bool link_measured; /* measured here (link_bandwidth_measure), else given */
    /* the placement: blocks to swap tried (0 .. swappable, model_swappable_blocks; 0 where the model cannot swap, and
     * the config's musubi_blocks_to_swap stands), and each count's fastest candidate that fits (place[n].fits) */
    int swappable;
    placement place[PLACE_MAX];
    int n_placed; /* counts tried: place[0 .. n_placed) (the search stops where no checkpointing fits) */
    int placed; /* the count the search and the per-block planner ran at (their answers hold it), -1: none fits */
    /* group offload's tries (block_level), where the family takes it (SimpleTuner refuses it for U-Nets, with
     * ramtorch or block swap, and under full fine-tuning) and nothing fits at swap 0 without checkpointing: each
     * setting's fastest candidate that fits; grouped_pick the answer's index (placed 0 then), -1: a swap count's */
    placement grouped[GROUP_PLACE_MAX];
    int n_grouped, grouped_pick;
} advice;

/* How much faster a per-block plan must be predicted to be advised over a uniform schedule, and a bucket's own
 * advice over the run's: the cost model's error is a few per cent (BENCHMARKS.md). */
#define ADVICE_PLAN_MARGIN 0.03

/* Calibrates (one schedule run here, a few steps, without block swap), walks the decision rule (the config as it
 * is), places the weights (where the model can swap blocks: every count of swapped blocks with the placement's
 * candidates, the count whose fastest candidate fits device_budget fastest), then at that count searches every
 * schedule (backend x interval x stride x attention offload) for the fastest predicted to fit, and runs the
 * per-block planner for the same budget. */
typedef struct advise_options {
    double link_rate;         /* the link's bytes a second; 0: measured here (link_bandwidth_measure) */
    const char *rates_preset; /* calibrate on a step of this preset at batch 4 (a model too large to step here, as
                                 the family sweep calibrates on dit-s2; no fixed seconds then); NULL: the config's */
    bool quick; /* no uniform search (at a real model's size, thousands of dry steps): the placement's answer stands
                   for it (searched 1), then the per-block planner */
} advise_options;
st_status advise(config_factory make, void *ctx, size_t device_budget, const advise_options *o, FILE *progress,
                 advice *out);
/* The placement, the search and the per-block planner alone, at rates another run calibrated (advise's, at a run's
 * largest bucket: the same machine and model, at another shape), for the config make(ctx, "") builds; no decision
 * rule (out->n_rule 0). */
st_status advise_at_rates(config_factory make, void *ctx, size_t device_budget, const cost_rates *rates,
                          FILE *progress, advice *out);
/* The placement alone, at rates, for the config make(ctx, "") builds: every count of swapped blocks (0 .. swappable;
 * only 0 where the model cannot swap) under the placement's candidates, each count's fastest that fits
 * device_budget in out->place[0 .. n_placed), and the count whose one is fastest in out->placed (-1: none fits);
 * then group offload's settings (out->grouped), one of which is the answer where it is faster (grouped_pick). */
st_status advise_placement(config_factory make, void *ctx, size_t device_budget, const cost_rates *rates,
                           advice *out);
/* A GPU's figures, from which a step's seconds there are predicted with this cost model (gpus.c): its published dense
 * peaks and bandwidths, and the fraction of them each kind of op reaches on segtrain's CUDA backend (assumed until
 * measured). Built in: h100, h200, l40s, a100, rtx4090; or a JSON file of the same fields. */
typedef struct gpu_profile {
    char key[16];       /* "h100" (built in), "file" */
    char name[64];      /* "NVIDIA H100 SXM5 80GB" */
    double memory_bytes;
    double fp32_flops, tf32_flops, bf16_flops; /* dense peaks, FLOP/s */
    double memory_rate, link_rate;             /* bytes a second: device memory, host to device */
    double efficiency[OP_KIND_COUNT];          /* the fraction of its peak each kind reaches */
    char source[160];   /* where the figures come from */
    bool measured;      /* the efficiencies were measured on that GPU, not assumed */
} gpu_profile;
int gpu_profiles_builtin(const gpu_profile **out);
/* A built-in profile by key (any case), or a .json file's; a clear error otherwise. */
st_status gpu_profile_find(const char *name_or_path, gpu_profile *out);
/* The cost model's rates on that GPU, as segtrain's CUDA backend computes: float32 GEMMs and attention. */
cost_rates gpu_profile_rates(const gpu_profile *g);

/* The advice: the per-block planner's answer where it is predicted ADVICE_PLAN_MARGIN faster than the uniform
 * search's, else the search's; NULL when neither fits. */
const schedule *advice_pick(const advice *a);
/* The placement the answer holds (a count of swapped blocks, swap 0 included, or a group offload setting), NULL when
 * none fits. */
const placement *advice_placement(const advice *a);
/* The schedule's name and overrides, from its settings. */
void schedule_describe(schedule *s);

#endif
