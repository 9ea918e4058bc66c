/* `segtrain advise`: the decision rule and the search for the fastest schedule that fits a budget. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "segtrain/advise.h"
#include "segtrain/sweep.h"
#include "segtrain/train.h"

static const char advise_help[] =
    "usage: segtrain advise [--config C] --device-memory SIZE [--verify] [--steps N] [--bucket-steps N,N,...]\n"
    "                       [--link-bandwidth RATE] [--rates-from PRESET] [--quick] [--mixed_precision no|bf16]\n"
    "                       [--set key=value ...]\n"
    "\n"
    "Which checkpointing schedule to use for a device-memory budget (e.g. 24GiB, 450MiB), and, where the model can\n"
    "swap blocks (musubi_blocks_to_swap under LoRA; docs/WEIGHTS.md lists the families), how many blocks' weights\n"
    "to keep in host memory, or whether group offload places them better. It first measures a few steps without\n"
    "checkpointing or swap here, for this machine's seconds per FLOP of GEMMs and attention and per byte of the\n"
    "memory-bound ops, and the host-to-device link's bandwidth (64 MiB copies; --link-bandwidth RATE, e.g. 25GB/s,\n"
    "gives it instead, to plan for another machine's bus); every schedule's time is then its own work, counted by\n"
    "a dry step, at those rates, plus the swapped or offloaded weights it brings in (at each swapped block's\n"
    "forward, recompute and backward; a group's while its blocks run) at the link's rate: the executor waits for\n"
    "them, while offload's copies are taken as hidden behind compute. --rates-from PRESET (e.g. dit-s2) measures\n"
    "the rates on a step of that preset at batch 4 instead, for a model too large to step here (the family sweep's\n"
    "way; the preset's optimizer seconds are left out). --quick leaves out the uniform search below (thousands of\n"
    "dry steps at a real model's size). Then:\n"
    "  - walks SimpleTuner's manual rule: no checkpointing if the run fits; otherwise torch-ffn, then torch, then\n"
    "    unsloth-ffn, then unsloth; then a wider interval while it still fits, for speed (the config's own swap);\n"
    "  - places the weights: every count of swapped blocks from 0, each with the rule's schedules and torch and\n"
    "    unsloth with attention offload, until no checkpointing fits; where nothing fits at swap 0 without\n"
    "    checkpointing and the family takes group offload (a transformer under LoRA, without ramtorch, as\n"
    "    SimpleTuner), block_level group offload at 1, 2, 4, ... blocks a group with the same schedules, and one\n"
    "    block a group streamed without checkpointing (its copies waited for, as plan prices them); the fastest\n"
    "    that fits (the precision is the config's: base_model_precision and mixed_precision are not changed);\n"
    "  - with that placement, searches every schedule (backend x interval x stride x attention offload) for the\n"
    "    fastest predicted to fit;\n"
    "  - runs the per-block planner: each block keeps, recomputes only its feed-forward, or sits in a checkpointed\n"
    "    segment of any width, chosen by dynamic programming for the least predicted time that fits; its answer is\n"
    "    a gradient_checkpointing_plan (docs/CONFIG.md), which train, plan, grad and sweep take as it is.\n"
    "The advice is the planner's answer where it is predicted at least 3 % faster than the uniform search's (the\n"
    "cost model's error is a few per cent), else the uniform one.\n"
    "Peaks are the dry step's (exact); times are the cost model's. --verify runs both answers, one after the other,\n"
    "for N measured steps each (default 3) and prints the measured figures beside the predicted ones.\n"
    "With several shapes (bucket_shapes, or the aspect buckets of the data: data_backend_config or a version 2\n"
    "cache, as plan and train read them) it advises for the bucket of the largest peak (the run's), then gives every\n"
    "bucket's predicted time and peak under the advice. Then it searches and plans for each other bucket alone\n"
    "at the same rates; where a bucket's own advice is predicted at least 3 % faster than the run's advice at\n"
    "that bucket, it writes a gradient_checkpointing_bucket_plans for those buckets (as options), each bucket's\n"
    "predicted time and exact peak under it, and the run's seconds per epoch-equivalent both ways: a step at each\n"
    "bucket, weighted by --bucket-steps (steps an epoch at each bucket, in the buckets' order; default: the\n"
    "data's batches an epoch at each, or one each, as synthetic data draws them). Every bucket is advised for the\n"
    "budget less what the run holds for its other buckets (their position tables), so that each bucket's peak in\n"
    "the run fits.\n"
    "Every schedule is planned in the config's precision, its mixed_precision (the first line of the output says\n"
    "which): bf16 holds the states between blocks and what blocks keep in bf16 (docs/PRECISION.md), about half the\n"
    "activation memory; a config that sets none is float32, as train runs it (segtrain's default `no`; SimpleTuner's\n"
    "is bf16). --mixed_precision no|bf16 (SimpleTuner's key, as any config key can be given) plans in the other.\n";

typedef struct factory_ctx {
    const char *path;
    const cli_args *args;
    const bucket_shape *bucket; /* the run's largest bucket, where it has several: what advise plans for */
    const char *data_shapes;    /* "bucket_shapes=..." of the data's buckets, read once; NULL: the config's */
} factory_ctx;

static config *make_config(void *p, const char *sets)
{
    const factory_ctx *c = p;
    config *cfg;
    if (cli_load_config(c->path, c->args, &cfg)) return NULL;
    /* a bucket alone is planned by the schedule under advice, not by the config's plans for the run's buckets */
    if ((c->data_shapes && config_set(cfg, c->data_shapes)) || config_set_all(cfg, sets) ||
        (c->bucket && (model_set_bucket(cfg, c->bucket) ||
                       config_set(cfg, "gradient_checkpointing_bucket_plans=")))) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* The precision every schedule below is planned in (the config's mixed_precision), first, with the flag for the
 * other. */
static st_status print_precision(const factory_ctx *ctx, const char **precision)
{
    config *cfg = make_config((void *)ctx, "");
    if (!cfg) return ST_ERR_INVALID;
    *precision = cli_precision(cfg);
    const bool bf16 = !strcmp(*precision, "bf16");
    printf("precision: %s (%s); --mixed_precision %s plans in %s\n", cli_precision(cfg),
           bf16 ? "mixed_precision bf16: the states between blocks and what blocks keep in bf16, docs/PRECISION.md"
           : config_is_set(cfg, "mixed_precision") ? "mixed_precision no"
                                                   : "the config sets no mixed_precision: segtrain's default, no, as "
                                                     "train runs it; SimpleTuner's default is bf16",
           bf16 ? "no" : "bf16", bf16 ? "float32" : "bf16");
    config_free(cfg);
    return ST_OK;
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

/* The run's buckets (every one of the config's, or ctx->bucket alone) under the overrides `sets`, timed at rates
 * when not NULL; the index of the largest peak in *largest. */
static st_status bucket_times(const factory_ctx *ctx, bool every, const char *sets, const cost_rates *rates,
                              bucket_report *out, int *n, int *largest)
{
    const factory_ctx which = {ctx->path, ctx->args, every ? NULL : ctx->bucket, ctx->data_shapes};
    config *cfg = make_config((void *)&which, sets);
    st_status st = cfg ? cli_buckets(cfg, 1, rates, out, n, largest) : ST_ERR_INVALID;
    config_free(cfg);
    return st;
}

/* What the run holds for its other buckets beside bucket i (their position tables): bucket i's peak in the run
 * less its peak alone, without checkpointing (the tables are held throughout, so under any schedule). */
static st_status held_for_others(const factory_ctx *ctx, int n, size_t *extra)
{
    char none[CKPT_TEXT_MAX];
    ckpt_settings_text(&(ckpt_settings){.interval = 1, .stride = 1}, none, sizeof none);
    bucket_report *run = calloc((size_t)n + 1, sizeof *run), *alone = run ? run + n : NULL;
    int got = 0, largest;
    st_status st = run ? bucket_times(ctx, true, none, NULL, run, &got, &largest) : st_host_oom("the buckets' reports");
    for (int i = 0, one; !st && i < n; i++) {
        const factory_ctx at = {ctx->path, ctx->args, &run[i].shape, ctx->data_shapes};
        st = bucket_times(&at, false, none, NULL, alone, &one, &largest);
        extra[i] = !st && run[i].peak > alone->peak ? run[i].peak - alone->peak : 0;
    }
    free(run);
    return st;
}

/* The run's shapes from its data's buckets (train_buckets_open, as plan and train read them), once: into set
 * ("bucket_shapes=...", n bytes; empty when the shapes are the config's), and each shape's batches an epoch into
 * w, as "3,1,2" into steps. Data that cannot be read leaves the config's shapes, with a warning, as plan does. */
static void data_buckets(const factory_ctx *ctx, char *set, size_t n, double *w, char *steps, size_t steps_n)
{
    config *cfg = make_config((void *)ctx, "");
    train_buckets tb = {0};
    set[0] = steps[0] = 0;
    if (cfg && train_buckets_open(cfg, 1, &tb))
        st_warn("segtrain: warning: %s; the advice is for the config's shapes", st_error());
    else if (tb.cfg) {
        snprintf(set, n, "bucket_shapes=%s", config_string(tb.cfg, "bucket_shapes"));
        for (int i = 0; i < MODEL_SHAPES_MAX; i++) w[i] = 0;
        int shapes = 0;
        for (int b = 0; b < dataset_buckets(tb.data); b++)
            if (tb.shape_of[b] >= 0) {
                w[tb.shape_of[b]] += (double)data_iter_bucket_batches(tb.iter, b);
                if (tb.shape_of[b] >= shapes) shapes = tb.shape_of[b] + 1;
            }
        for (int i = 0, at = 0; i < shapes && at < (int)steps_n; i++)
            at += snprintf(steps + at, steps_n - (size_t)at, "%s%.0f", i ? "," : "", w[i]);
    }
    train_buckets_close(&tb);
    config_free(cfg);
}

/* --bucket-steps "3,1,1": steps an epoch at each of n buckets, into w; NULL: one each. */
static st_status bucket_weights(const char *text, int n, double *w)
{
    double sum = 0;
    const char *p = text;
    for (int i = 0; i < n; i++) {
        char *end = NULL;
        const long long v = p ? strtoll(p, &end, 10) : 1;
        if (p && (end == p || v < 0 || *end != (i < n - 1 ? ',' : '\0')))
            return st_fail(ST_ERR_INVALID, "--bucket-steps: \"%s\" is not %d step counts (valid: a whole number >= 0 for "
                           "each bucket of bucket_shapes, in its order, comma-separated, not all 0)", text, n);
        w[i] = (double)v, sum += w[i];
        if (p) p = end + 1;
    }
    return sum > 0 ? ST_OK : st_fail(ST_ERR_INVALID, "--bucket-steps: \"%s\" gives no bucket a step", text);
}

/* How the buckets weigh in the run's time: --bucket-steps, else the data's own batches an epoch (data_steps, already
 * in w), else one each; what weighs them into label. */
static st_status bucket_weighting(const char *bucket_steps, const char *data_steps, int n, double *w, char *label,
                                  size_t size)
{
    if (bucket_steps) snprintf(label, size, "weighted by --bucket-steps %.600s", bucket_steps);
    else if (data_steps[0]) snprintf(label, size, "weighted by the data's batches an epoch, %.700s", data_steps);
    else snprintf(label, size, "weighted equally, as synthetic data draws them");
    return bucket_steps || !data_steps[0] ? bucket_weights(bucket_steps, n, w) : ST_OK;
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

/* Each bucket's own advice at the advice's rates (advise_at_rates, for the budget less what the run holds for the
 * others), against one[i], the bucket under the run's advice: where it is predicted ADVICE_PLAN_MARGIN faster,
 * "name: plan, " into value (and the rest's words too where rest is not NULL: the run's advice checkpoints nothing,
 * so every bucket needs its own). */
static st_status own_advice(const factory_ctx *ctx, const bucket_report *one, int n, int largest, const size_t *extra,
                            size_t budget, const advice *adv, const char *rest, char *value, size_t size, bool *any)
{
    advice *a = malloc(sizeof *a);
    if (!a) return st_host_oom("a bucket's advice");
    printf("\neach bucket's own advice (the search and the per-block planner for it alone, at these rates):\n");
    st_status st = ST_OK;
    size_t at = 0;
    *any = false;
    for (int i = 0; !st && i < n; i++) {
        char name[48];
        bucket_shape_name(&one[i].shape, name, sizeof name);
        const factory_ctx alone = {ctx->path, ctx->args, &one[i].shape, ctx->data_shapes};
        const schedule *s = NULL;
        if (i != largest) st = advise_at_rates(make_config, (void *)&alone, budget > extra[i] ? budget - extra[i] : 1,
                                               &adv->rates, NULL, a);
        if (!st && i != largest) s = advice_pick(a);
        const bool own = s && s->sec < one[i].sec * (1 - ADVICE_PLAN_MARGIN);
        if (i == largest) printf("  bucket %-14s the advice above (the largest bucket)\n", name);
        else if (!st && !s) printf("  bucket %-14s nothing fits: the run's advice\n", name);
        else if (!st)
            printf("  bucket %-14s %-34s peak %9.2f MiB  %7.3f s/step (%+.1f%% against the run's advice): %s\n", name,
                   s->name, (double)(s->peak_device + extra[i]) / 1048576.0, s->sec,
                   100.0 * (s->sec - one[i].sec) / one[i].sec, own ? "its own plan" : "the run's advice");
        if ((own || (!st && rest)) && at < size)
            at += (size_t)snprintf(value + at, size - at, "%s%s: %s", at ? ", " : "", name, own ? a->plan_words : rest);
        *any |= own;
    }
    free(a);
    return st || at < size ? st : st_fail(ST_ERR_INTERNAL, "the buckets' plans are longer than %zu characters", size);
}

/* The buckets under the per-bucket answer: their table, the run's seconds per epoch-equivalent both ways, the
 * options. */
static void print_per_bucket(const bucket_report *one, const bucket_report *own, int n, int largest, size_t budget,
                             const double *w, const char *weighted, const char *sets)
{
    char b[2][24];
    double t_one = 0, t_own = 0;
    for (int i = 0; i < n; i++) t_one += w[i] * one[i].sec, t_own += w[i] * own[i].sec;
    printf("\nper-bucket advice: each bucket under its own plan (predicted; each peak is its step's in the run, "
           "exact):\n");
    cli_print_buckets(own, n, largest, true);
    printf("  the run's peak %s %s %s\n", st_bytes(b[0], own[largest].peak),
           own[largest].peak <= budget ? "fits" : "does not fit (a bug: each bucket was advised to fit)",
           st_bytes(b[1], budget));
    printf("  per epoch-equivalent (a step at each bucket, %s): %.3f s under the run's advice, %.3f s under each "
           "bucket's own (%+.1f%%)\n", weighted, t_one, t_own, 100.0 * (t_own - t_one) / t_one);
    printf("  as options:");
    print_as_options(sets);
}

/* With several buckets, after the run's advice (pick, for the largest): each bucket under it, each bucket's own
 * advice, and where some bucket wants its own, the per-bucket answer. */
static st_status advise_buckets(const factory_ctx *ctx, int n, int largest, const size_t *extra, size_t budget,
                                const advice *adv, const schedule *pick, const double *w, const char *weighted)
{
    st_status st = ST_OK;
    bucket_report *one = calloc(2 * (size_t)n, sizeof *one), *own = one ? one + n : NULL;
    const size_t size = (size_t)n * (PLAN_TEXT_MAX + 64) + CKPT_TEXT_MAX + 64;
    char *sets = malloc(size);
    int got = 0, peak = largest;
    bool any = false;
    if (!st && (!one || !sets)) st = st_host_oom("the buckets' advice");
    if (!st) st = bucket_times(ctx, true, pick->sets, &adv->rates, one, &got, &peak);
    if (!st) {
        printf("\neach bucket under it (predicted; a step takes its batch's bucket):\n");
        cli_print_buckets(one, n, peak, true);
        /* the run's schedule: the advice's, or where that checkpoints nothing, a switch on for the buckets' plans */
        const ckpt_settings on = {.enabled = true, .interval = 1, .stride = 1};
        if (pick->cs.enabled) snprintf(sets, size, "%s", pick->sets);
        else ckpt_settings_text(&on, sets, size);
        const size_t at = strlen(sets) + (size_t)snprintf(sets + strlen(sets), size - strlen(sets),
                                                          ";gradient_checkpointing_bucket_plans=");
        st = own_advice(ctx, one, n, largest, extra, budget, adv, pick->cs.enabled ? NULL : adv->plan_words,
                        sets + at, size - at, &any);
    }
    if (!st && !any) printf("every bucket's own advice is within 3 %% of the run's: one schedule serves them all\n");
    if (!st && any) st = bucket_times(ctx, true, sets, &adv->rates, own, &got, &peak);
    if (!st && any) print_per_bucket(one, own, n, peak, budget, w, weighted, sets);
    free(one);
    free(sets);
    return st;
}

/* The cost model's rates: the calibration's, and the link's. */
static void print_rates(const advice *adv, const advise_options *opt)
{
    const cost_rates *c = &adv->rates;
    if (opt->rates_preset)
        printf("cost model: the rates of a step of %s at batch 4 (--rates-from; no fixed seconds)\n", opt->rates_preset);
    printf("cost model: %.3f s/step without checkpointing; GEMM %.1f GFLOP/s, attention %.1f GFLOP/s, "
           "normalization %.1f GB/s, elementwise %.1f GB/s, %.3f s fixed (optimizer, glue); link %.2f GB/s host to "
           "device (%s)\n\n",
           adv->t_none, c->per_unit[OP_GEMM] > 0 ? 1e-9 / c->per_unit[OP_GEMM] : 0,
           c->per_unit[OP_ATTENTION] > 0 ? 1e-9 / c->per_unit[OP_ATTENTION] : 0,
           c->per_unit[OP_NORM] > 0 ? 1e-9 / c->per_unit[OP_NORM] : 0,
           c->per_unit[OP_POINTWISE] > 0 ? 1e-9 / c->per_unit[OP_POINTWISE] : 0, c->fixed, adv->link_rate * 1e-9,
           adv->link_measured ? "measured here" : "--link-bandwidth");
}

static void print_placed(const char *what, const placement *p, size_t budget)
{
    char b[24];
    if (p->fits)
        printf("  %s: %-44s peak %9.2f MiB  %7.3f s/step (predicted)\n", what, p->name, p->peak_device / 1048576.0,
               p->sec);
    else printf("  %s: none fits %s\n", what, st_bytes(b, budget));
}

/* The placement's walk over counts of swapped blocks, where the model can swap, and over group offload's settings,
 * where it takes them. */
static void print_placement(const advice *adv, size_t budget)
{
    if (!adv->swappable && !adv->n_grouped) return;
    char what[64];
    if (adv->swappable)
        printf("placement (musubi_blocks_to_swap 0-%d; at each count the rule's schedules and torch and unsloth with "
               "attention offload):\n", adv->swappable);
    for (int n = 0; n < adv->n_placed && adv->swappable; n++) {
        snprintf(what, sizeof what, "swap %3d", n);
        print_placed(what, &adv->place[n], budget);
    }
    if (adv->swappable && adv->n_placed <= adv->swappable)
        printf("  (from swap %d on, no checkpointing fits: more swapped blocks only wait for more weights)\n",
               adv->n_placed - 1);
    if (adv->n_grouped)
        printf("group offload (block_level; every frozen weight in host memory, a group brought in while its blocks "
               "run; the same schedules, streamed groups without checkpointing; their copies waited for):\n");
    for (int g = 0; g < adv->n_grouped; g++) {
        const placement *p = &adv->grouped[g];
        snprintf(what, sizeof what, "%2d block%s a group%s", p->group_blocks, p->group_blocks > 1 ? "s" : " ",
                 p->stream ? ", streamed" : "");
        print_placed(what, p, budget);
    }
    const placement *chosen = advice_placement(adv);
    if (chosen && chosen->group_blocks)
        printf("  -> group offload, %d block%s a group%s\n\n", chosen->group_blocks, chosen->group_blocks > 1 ? "s" : "",
               chosen->stream ? ", streamed" : "");
    else if (adv->placed >= 0) printf("  -> swap %d blocks\n\n", adv->placed);
    else if (adv->swappable) printf("  -> none fits: the search below at swap %d, the most\n\n", adv->swappable);
    else printf("  -> none fits: the search below at group offload, 1 block a group\n\n");
}

int cmd_advise(int argc, char **argv)
{
    const char *config_path = NULL, *memory = NULL, *bucket_steps = NULL, *precision = "", *link = NULL;
    advise_options opt = {0};
    long long steps = 3;
    bool verify = false;
    const cli_flag flags[] = {{"--config", .text = &config_path},
                              {"--device-memory", .text = &memory, .required = true},
                              {"--steps", .whole = &steps, .min = 1, .max = CLI_STEPS_MAX},
                              {"--verify", .on = &verify}, {"--bucket-steps", .text = &bucket_steps},
                              {"--link-bandwidth", .text = &link}, {"--rates-from", .text = &opt.rates_preset},
                              {"--quick", .on = &opt.quick}, {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(advise_help, stdout), 0) : rc;
    size_t budget = 0, link_rate = 0;
    if (cli_size("segtrain advise", "--device-memory", memory, false, &budget) ||
        (link && cli_size("segtrain advise", "--link-bandwidth", link, true, &link_rate)))
        return 2;
    st_status st;
    factory_ctx ctx = {config_path, &a, NULL, NULL};
    bucket_report buckets[MODEL_SHAPES_MAX];
    int n_buckets = 0, largest = -1;
    size_t extra[MODEL_SHAPES_MAX] = {0};
    double weights[MODEL_SHAPES_MAX];
    char data_set[MODEL_SHAPES_MAX * 24 + 16], data_steps[MODEL_SHAPES_MAX * 12], weighted[MODEL_SHAPES_MAX * 12 + 64];
    data_buckets(&ctx, data_set, sizeof data_set, weights, data_steps, sizeof data_steps);
    if (data_set[0]) ctx.data_shapes = data_set;
    if ((st = print_precision(&ctx, &precision)) || (st = largest_bucket(&ctx, buckets, &n_buckets, &largest)))
        return cli_error("advise");
    if (bucket_steps && largest < 0) {
        fprintf(stderr, "segtrain advise: --bucket-steps: the run has one shape (valid with several buckets)\n");
        return 2;
    }
    if (largest >= 0 && (st = bucket_weighting(bucket_steps, data_steps, n_buckets, weights, weighted,
                                               sizeof weighted)))
        return cli_error("advise");
    if (largest >= 0 && (st = held_for_others(&ctx, n_buckets, extra))) return cli_error("advise");
    const size_t held = largest >= 0 ? extra[largest] : 0, advised = budget > held ? budget - held : 1;
    if (largest >= 0) {
        char name[48], b[2][24];
        bucket_shape_name(&buckets[largest].shape, name, sizeof name);
        printf("%d buckets: advising for the largest, %s (its peak is the run's)\n", n_buckets, name);
        if (held)
            printf("the run holds %s for its other buckets (their position tables): %s is advised for %s\n",
                   st_bytes(b[0], held), name, st_bytes(b[1], advised));
        ctx.bucket = &buckets[largest].shape;
    }
    advice adv;
    opt.link_rate = (double)link_rate;
    if ((st = advise(make_config, &ctx, advised, &opt, stdout, &adv))) return cli_error("advise");
    print_rates(&adv, &opt);
    if (adv.noisy)
        printf("noisy: the calibration's steps took %.3f to %.3f s: the machine was busy, so these rates and every "
               "time below are suspect (the peaks are not); advise again on a quiet machine\n\n",
               adv.t_none_min, adv.t_none_max);
    char b[24];
    printf("decision rule (budget %s):\n", st_bytes(b, advised));
    for (int i = 0; i < adv.n_rule; i++) print_schedule("  ", &adv.rule[i]);
    if (adv.rule_choice >= 0) printf("  -> %s\n\n", adv.rule[adv.rule_choice].name);
    else printf("  -> nothing in the rule fits\n\n");
    print_placement(&adv, advised);
    if (opt.quick) printf("search: the placement's answer alone (--quick)\n");
    else printf("search over %d schedules:\n", adv.searched);
    if (adv.found) print_schedule("  fastest that fits: ", &adv.best);
    else if (!opt.quick) printf("  none fits %s\n", st_bytes(b, advised));
    printf("\nper-block planner:\n");
    if (adv.planned_found) {
        print_schedule("  ", &adv.planned);
        if (adv.found)
            printf("  %+.1f%% time against the fastest uniform schedule, %+.2f MiB peak\n",
                   100.0 * (adv.planned.sec - adv.best.sec) / adv.best.sec,
                   ((double)adv.planned.peak_device - (double)adv.best.peak_device) / 1048576.0);
        printf("  gradient_checkpointing_plan: %s\n", adv.planned.cs.plan);
    } else {
        printf("  no plan of kept, FFN-only and checkpointed blocks fits %s\n", st_bytes(b, advised));
    }
    if (!adv.found && !adv.planned_found) {
        printf("\nnothing fits %s: lower train_batch_size or the resolution\n", st_bytes(b, advised));
        return 1;
    }
    const schedule *pick = advice_pick(&adv);
    printf("\nadvice: %s, %.3f s/step, peak %.2f MiB (predicted in %s%s)\n", pick->name, pick->sec,
           pick->peak_device / 1048576.0, precision, adv.noisy ? "; the times from a busy machine's rates" : "");
    printf("  as options:");
    print_as_options(pick->sets);
    if (largest >= 0 && (st = advise_buckets(&ctx, n_buckets, largest, extra, budget, &adv, pick, weights,
                                                 weighted)))
        return cli_error("advise");
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
