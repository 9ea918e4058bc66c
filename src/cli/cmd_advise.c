/* `segtrain advise`: the decision rule and the search for the fastest schedule that fits a budget. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "segtrain/advise.h"
#include "segtrain/sweep.h"

#define PLAN_MARGIN 0.03 /* how much faster a per-block plan must be predicted to be advised over a uniform one */

static const char advise_help[] =
    "usage: segtrain advise [--config C] --device-memory SIZE [--verify] [--steps N] [--set key=value ...]\n"
    "\n"
    "Which checkpointing schedule to use for a device-memory budget (e.g. 24GiB, 450MiB). It first measures a few\n"
    "steps without checkpointing here, for this machine's seconds per FLOP of GEMMs and attention and per byte of\n"
    "the memory-bound ops; every schedule's time is then its own work, counted by a dry step, at those rates. Then:\n"
    "  - walks SimpleTuner's manual rule: no checkpointing if the run fits; otherwise torch-ffn, then torch, then\n"
    "    unsloth-ffn, then unsloth; then a wider interval while it still fits, for speed;\n"
    "  - searches every schedule (backend x interval x stride x attention offload) for the fastest predicted to\n"
    "    fit;\n"
    "  - runs the per-block planner: each block keeps, recomputes only its feed-forward, or sits in a checkpointed\n"
    "    segment of any width, chosen by dynamic programming for the least predicted time that fits; its answer is\n"
    "    a gradient_checkpointing_plan (docs/CONFIG.md), which train, plan, grad and sweep take as it is.\n"
    "The advice is the planner's answer where it is predicted at least 3 % faster than the uniform search's (the\n"
    "cost model's error is a few per cent), else the uniform one.\n"
    "Peaks are the dry step's (exact); times are the cost model's. --verify runs both answers, one after the other,\n"
    "for N measured steps each (default 3) and prints the measured figures beside the predicted ones.\n"
    "With several bucket_shapes it advises for the bucket of the largest peak (the run's), then gives every\n"
    "bucket's predicted time and peak under the advice.\n";

typedef struct factory_ctx {
    const char *path;
    const cli_args *args;
    const bucket_shape *bucket; /* the run's largest bucket, where it has several: what advise plans for */
} factory_ctx;

static config *make_config(void *p, const char *sets)
{
    const factory_ctx *c = p;
    config *cfg;
    if (cli_load_config(c->path, c->args, &cfg)) return NULL;
    /* a bucket alone is planned by the schedule under advice, not by the config's plans for the run's buckets */
    if (config_set_all(cfg, sets) || (c->bucket && (cli_set_bucket(cfg, c->bucket) ||
                                                    config_set(cfg, "gradient_checkpointing_bucket_plans=")))) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* The run's buckets (bucket_shapes) by their dry steps: the largest one's index, or -1 with fewer than two. */
static st_status largest_bucket(factory_ctx *ctx, bucket_report *buckets, int *n, int *largest)
{
    config *cfg = make_config(ctx, "");
    st_status st = cfg ? cli_buckets(cfg, 1, NULL, buckets, n, largest) : ST_ERR_INVALID;
    config_free(cfg);
    if (!st && *n < 2) *largest = -1;
    return st;
}

/* Each bucket under the advice's schedule, its seconds at the advice's rates. */
static st_status print_bucket_times(const factory_ctx *ctx, const schedule *pick, const cost_rates *rates)
{
    const factory_ctx every = {ctx->path, ctx->args, NULL}; /* all the config's buckets */
    bucket_report buckets[MODEL_SHAPES_MAX];
    int n = 0, largest = 0;
    config *cfg = make_config((void *)&every, pick->sets);
    st_status st = cfg ? cli_buckets(cfg, 1, rates, buckets, &n, &largest) : ST_ERR_INVALID;
    config_free(cfg);
    if (st) return st;
    printf("\neach bucket under it (predicted; a step takes its batch's bucket):\n");
    cli_print_buckets(buckets, n, largest, true);
    return ST_OK;
}

static void print_schedule(const char *label, const schedule *s)
{
    if (s->refused) printf("%s%-44s unsupported: this family refuses it (segtrain plan says why)\n", label, s->name);
    else
        printf("%s%-44s peak %9.2f MiB  %-14s %7.3f s/step (predicted)\n", label, s->name, s->peak_device / 1048576.0,
               s->fits ? "fits" : "does not fit", s->sec);
}

/* The schedule's keys (a;b;c, config_set_all's list) as options to paste after any command: one --set each, in
 * single quotes where the shell would split or expand the value (a plan's spaces and |). Left out: empty values
 * and, without checkpointing, the keys that then do nothing (the config would warn about them). */
static void print_as_options(const char *sets)
{
    const bool off = !strncmp(sets, "gradient_checkpointing=false;", 29);
    static const char *const idle[] = {"gradient_checkpointing_backend=", "gradient_checkpointing_interval=",
                                       "gradient_checkpointing_segment_stride=",
                                       "gradient_checkpointing_keep_attention_output="};
    for (const char *kv = sets; *kv;) {
        const size_t n = strcspn(kv, ";");
        bool skip = kv[n - 1] == '=';
        for (size_t i = 0; off && i < sizeof idle / sizeof *idle; i++) skip |= !strncmp(kv, idle[i], strlen(idle[i]));
        const char *q = strcspn(kv, " |&;<>()*?$\"\\`#~![]{}") < n ? "'" : "";
        if (!skip) printf(" --set %s%.*s%s", q, (int)n, kv, q);
        kv += n + (kv[n] == ';');
    }
    putchar('\n');
}

int cmd_advise(int argc, char **argv)
{
    const char *config_path = NULL, *memory = NULL;
    long long steps = 3;
    bool verify = false;
    const cli_flag flags[] = {{"--config", .text = &config_path},
                              {"--device-memory", .text = &memory, .required = true},
                              {"--steps", .whole = &steps, .min = 1, .max = CLI_STEPS_MAX},
                              {"--verify", .on = &verify},
                              {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(advise_help, stdout), 0) : rc;
    size_t budget = 0;
    char json[160];
    config *probe;
    snprintf(json, sizeof json, "{\"device_memory\": \"%.100s\"}", memory);
    st_status st = config_parse(json, "--device-memory", &probe);
    if (!st) st = config_bytes(probe, "device_memory", &budget), config_free(probe);
    if (st) {
        fprintf(stderr, "segtrain advise: %s\n", st_error());
        return 2;
    }
    factory_ctx ctx = {config_path, &a, NULL};
    bucket_report buckets[MODEL_SHAPES_MAX];
    int n_buckets = 0, largest = -1;
    if ((st = largest_bucket(&ctx, buckets, &n_buckets, &largest))) return cli_error("advise");
    if (largest >= 0) {
        char name[48];
        bucket_shape_name(&buckets[largest].shape, name, sizeof name);
        printf("%d buckets: advising for the largest, %s (its peak is the run's)\n", n_buckets, name);
        ctx.bucket = &buckets[largest].shape;
    }
    advice adv;
    if ((st = advise(make_config, &ctx, budget, stdout, &adv))) return cli_error("advise");
    const cost_rates *c = &adv.rates;
    printf("cost model: %.3f s/step without checkpointing; GEMM %.1f GFLOP/s, attention %.1f GFLOP/s, "
           "normalization %.1f GB/s, elementwise %.1f GB/s, %.3f s fixed (optimizer, glue)\n\n",
           adv.t_none, c->per_unit[OP_GEMM] > 0 ? 1e-9 / c->per_unit[OP_GEMM] : 0,
           c->per_unit[OP_ATTENTION] > 0 ? 1e-9 / c->per_unit[OP_ATTENTION] : 0,
           c->per_unit[OP_NORM] > 0 ? 1e-9 / c->per_unit[OP_NORM] : 0,
           c->per_unit[OP_POINTWISE] > 0 ? 1e-9 / c->per_unit[OP_POINTWISE] : 0, c->fixed);
    if (adv.noisy)
        printf("noisy: the calibration's steps took %.3f to %.3f s: the machine was busy, so these rates and every "
               "time below are suspect (the peaks are not); advise again on a quiet machine\n\n",
               adv.t_none_min, adv.t_none_max);
    char b[24];
    printf("decision rule (budget %s):\n", st_bytes(b, budget));
    for (int i = 0; i < adv.n_rule; i++) print_schedule("  ", &adv.rule[i]);
    if (adv.rule_choice >= 0) printf("  -> %s\n\n", adv.rule[adv.rule_choice].name);
    else printf("  -> nothing in the rule fits\n\n");
    printf("search over %d schedules:\n", adv.searched);
    if (adv.found) print_schedule("  fastest that fits: ", &adv.best);
    else printf("  none fits %s\n", st_bytes(b, budget));
    printf("\nper-block planner:\n");
    if (adv.planned_found) {
        print_schedule("  ", &adv.planned);
        if (adv.found)
            printf("  %+.1f%% time against the fastest uniform schedule, %+.2f MiB peak\n",
                   100.0 * (adv.planned.sec - adv.best.sec) / adv.best.sec,
                   ((double)adv.planned.peak_device - (double)adv.best.peak_device) / 1048576.0);
        printf("  gradient_checkpointing_plan: %s\n", adv.planned.cs.plan);
    } else {
        printf("  no plan of kept, FFN-only and checkpointed blocks fits %s\n", st_bytes(b, budget));
    }
    if (!adv.found && !adv.planned_found) {
        printf("\nnothing fits %s: lower train_batch_size or the resolution\n", st_bytes(b, budget));
        return 1;
    }
    /* the answer: the plan only where it is predicted faster by more than the cost model's error (a few per cent
     * on dit-s2, BENCHMARKS.md); else the uniform schedule, which anyone can read */
    const bool plan_wins = adv.planned_found && (!adv.found || adv.planned.sec < adv.best.sec * (1 - PLAN_MARGIN));
    const schedule *pick = plan_wins ? &adv.planned : &adv.best;
    printf("\nadvice: %s, %.3f s/step, peak %.2f MiB (predicted%s)\n", pick->name, pick->sec,
           pick->peak_device / 1048576.0, adv.noisy ? "; the times from a busy machine's rates" : "");
    printf("  as options:");
    print_as_options(pick->sets);
    if (largest >= 0 && (st = print_bucket_times(&ctx, pick, &adv.rates))) return cli_error("advise");
    if (!verify) return 0;

    /* both answers measured side by side, in this run */
    const schedule *measured[2] = {adv.found ? &adv.best : NULL, adv.planned_found ? &adv.planned : NULL};
    printf("\nverified (%lld measured steps each, one after the other):\n", steps);
    for (int k = 0; k < 2; k++) {
        const schedule *s = measured[k];
        if (!s) continue;
        config *cfg = make_config(&ctx, s->sets);
        sweep_cell cell = {0};
        const st_status ran = cfg ? sweep_measure(cfg, 1, (int)steps, &cell) : ST_ERR_INVALID;
        config_free(cfg);
        if (ran) return cli_error("advise");
        if (cell.status != CELL_OK) {
            fprintf(stderr, "segtrain advise: --verify: %s: %s\n", s->name, cell.error);
            return 1;
        }
        printf("  %-34s sec/step measured %.3f, predicted %.3f (%+.1f%%); peak measured %.2f MiB, predicted "
               "%.2f MiB (%+.2f%%)\n", s->name, cell.sec_median, s->sec, 100.0 * (cell.sec_median - s->sec) / s->sec,
               cell.peak_device / 1048576.0, s->peak_device / 1048576.0,
               100.0 * ((double)cell.peak_device - (double)s->peak_device) / (double)s->peak_device);
        if (sweep_cell_noisy(&cell))
            printf("  %-34s noisy: its steps took %.3f to %.3f s (the machine was busy)\n", "", cell.sec_min,
                   cell.sec_max);
    }
    return 0;
}
