/* How well a dry step predicts a real step's time (not a test): the cost model of advise.h against measured steps,
 * for the tiny preset of every topology, over the nine standard rows, two per-block plans (the planner's, at two
 * budgets between `layer`'s peak and `none`'s) and one plan with attention offload, in one run on one machine.
 *
 * A shared machine's speed drifts by more than the model's error within a minute, so each row is measured in
 * lockstep with its calibration: two trainers in this process, one without checkpointing and one with the row's
 * schedule, take turns one optimizer step each. The first's profiled steps give the rates (cost_calibrate), the
 * row's dry step gives its work, and the prediction is set against the second's steps, taken in the same seconds.
 *
 *   build/bench_cost [--presets dit-tiny,sd1x-tiny] [--config C] [--steps N] [--warmup W] [--detail]
 *
 * --config C runs C's own model (its preset, batch and resolution) instead of the preset list; --detail prints,
 * per row, each op kind's measured seconds against its predicted. Exit status 1 only when a row cannot run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchkit.h"
#include "segtrain/advise.h"
#include "segtrain/model_run.h"
#include "segtrain/sweep.h"
#include "segtrain/train.h"

#define ROWS_MAX 16
#define STEPS_MAX 100

/* One model of each topology, at a batch and resolution whose step takes a few tenths of a second on 2 cores. */
static const struct {
    const char *preset, *topology;
    int resolution, batch;
} models[] = {
    {"dit-tiny", "dit", 256, 8},
    {"mmdit-tiny", "mmdit", 256, 8},
    {"flux-tiny", "dual-stream", 256, 8},
    {"pixart-sigma-tiny", "cross-attention", 256, 8},
    {"lumina2-tiny", "joint", 256, 8},
    {"sana-tiny", "linear attention", 512, 2},
    {"sd1x-tiny", "U-Net", 256, 4},
};
#define N_MODELS ((int)(sizeof models / sizeof *models))

typedef struct row {
    char name[SWEEP_NAME_MAX];
    char sets[CKPT_TEXT_MAX]; /* ';'-separated overrides on the base */
} row;

typedef struct side {
    char dir[32];
    config *cfg;
    trainer *t;
    double best;     /* its fastest measured step's seconds */
    op_profile prof; /* and that step's ops */
} side;

typedef struct measured {
    double t_none, t_row, predicted;
    op_profile row_work;   /* the row's dry step's work */
    op_profile row_prof;   /* the row's measured steps' ops */
    cost_rates rates;
} measured;

static st_status base_config(const char *config_path, const char *base, const char *sets, config **out)
{
    st_status st = config_path ? config_load(config_path, out) : config_parse("{}", "defaults", out);
    if (!st && base[0]) st = config_set_all(*out, base);
    if (!st && sets[0]) st = config_set_all(*out, sets);
    return st;
}

static st_status side_open(const char *config_path, const char *base, const char *sets, int steps, side *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/segtrain-cost.XXXXXX");
    if (!mkdtemp(s->dir)) return st_fail(ST_ERR_IO, "cannot create a scratch folder in /tmp");
    st_status st = base_config(config_path, base, sets, &s->cfg);
    if (!st) st = sweep_measured_config(s->cfg, steps, s->dir);
    if (!st) st = trainer_create(s->cfg, NULL, &s->t);
    return st;
}

static void side_close(side *s)
{
    trainer_destroy(s->t);
    config_free(s->cfg);
    if (s->dir[0]) remove_scratch(s->dir);
    *s = (side){0};
}

/* One profiled step of s; when counted and the fastest so far, its seconds and ops in s->best and s->prof. */
static st_status side_step(side *s, bool counted)
{
    train_step_info in;
    op_profile p;
    ops_profile_start();
    const st_status st = trainer_step(s->t, &in);
    ops_profile_stop(&p);
    if (!st && counted && (s->best == 0 || in.seconds < s->best)) s->best = in.seconds, s->prof = p;
    return st;
}

/* The row's dry step: its work and its host-device traffic. */
static st_status dry_work(const config *cfg, op_profile *work, link_traffic *moved)
{
    model_run r = {0};
    st_status st = model_run_open(cfg, false, &r);
    pool_stats dev, host;
    link_traffic before;
    if (!st) link_traffic_read(r.m, &before);
    ops_profile_start();
    if (!st) st = flow_step_dry(&r, config_int(cfg, "train_batch_size"), 1, &dev, &host);
    ops_profile_stop(work);
    if (!st) *moved = link_traffic_since(r.m, &before);
    model_run_close(&r);
    return st;
}

/* The row in lockstep with `none`: both sides' fastest steps, and the row's predicted time from the calibration
 * side's fastest step and its profile. The fastest, not the median: on a shared machine a step that another
 * process slowed down is slower, never faster, so the fastest of a few is each side's own speed, and the
 * calibration's op seconds and wall time then come from one and the same step. */
static st_status measure_row(const char *config_path, const char *base, const row *rw, int warmup, int steps,
                             measured *out)
{
    side cal = {0}, run = {0};
    st_status st = side_open(config_path, base, "gradient_checkpointing=false", warmup + steps, &cal);
    if (!st) st = side_open(config_path, base, rw->sets, warmup + steps, &run);
    for (int s = 0; s < warmup + steps && !st; s++) {
        /* which side goes first alternates: the second runs on the first's caches */
        if (s % 2 == 0) st = side_step(&cal, s >= warmup);
        if (!st) st = side_step(&run, s >= warmup);
        if (!st && s % 2) st = side_step(&cal, s >= warmup);
    }
    if (!st) {
        out->t_none = cal.best, out->t_row = run.best;
        out->rates = cost_calibrate(&cal.prof, out->t_none);
        out->row_prof = run.prof;
        link_traffic moved;
        st = dry_work(run.cfg, &out->row_work, &moved);
        if (!st) out->predicted = cost_predict_step(&out->rates, &out->row_work, &moved);
    }
    side_close(&cal);
    side_close(&run);
    return st;
}

/* The dry peak of the model planned by cs. */
static st_status dry_peak(model_run *r, int64_t batch, const cost_rates *rates, const ckpt_settings *cs, size_t *peak)
{
    pool_stats dev, host;
    double sec;
    st_status st = model_set_checkpointing(r->m, cs, NULL, 0);
    if (!st) st = cost_of_dry_step(r, batch, 1, rates, &dev, &host, &sec);
    *peak = dev.peak;
    return st;
}

/* A plan with attention offload: in each sequence with softmax attention, the first half of its blocks kept and the
 * rest checkpointed block by block, every block's attention side offloaded; a sequence without it kept. */
static void offload_plan(model_run *r, char *buf, size_t size)
{
    block_seq *seqs;
    size_t at = 0;
    buf[0] = 0;
    for (int q = 0, nq = model_sequences(r->m, &seqs); q < nq && at < size; q++) {
        const int n = seqs[q].n, h = n / 2;
        if (!n) continue;
        at += (size_t)snprintf(buf + at, size - at, "%s%s: ", at ? " / " : "", seqs[q].name);
        if (at >= size) break;
        if (!seqs[q].blocks[0].kind->softmax_attention) at += (size_t)snprintf(buf + at, size - at, "0-%d keep", n - 1);
        else if (h == 0) at += (size_t)snprintf(buf + at, size - at, "0 ckpt + attention-offload");
        else
            at += (size_t)snprintf(buf + at, size - at, "0-%d keep + attention-offload | %d-%d ckpt + attention-offload",
                                   h - 1, h, n - 1);
    }
}

/* The planned rows: the per-block planner at a third and two thirds of the way from `layer`'s dry peak to `none`'s,
 * and the attention-offload plan; appended to rows from *n. */
static st_status planned_rows(const char *config_path, const char *base, const cost_rates *rates, row *rows, int *n)
{
    config *cfg = NULL;
    model_run r = {0};
    st_status st = base_config(config_path, base, "", &cfg);
    if (!st) st = model_run_open(cfg, false, &r);
    const int64_t batch = st ? 0 : config_int(cfg, "train_batch_size");
    size_t none_peak = 0, layer_peak = 0;
    const ckpt_settings none = {.interval = 1, .stride = 1}, layer = {.enabled = true, .interval = 1, .stride = 1};
    if (!st) st = dry_peak(&r, batch, rates, &none, &none_peak);
    if (!st) st = dry_peak(&r, batch, rates, &layer, &layer_peak);
    for (int third = 1; third <= 2 && !st; third++) {
        const size_t budget = layer_peak + (none_peak - layer_peak) * (size_t)third / 3;
        schedule plan;
        bool found = false;
        st = plan_blocks(&r, batch, 1, rates, budget, NULL, NULL, &plan, &found);
        if (st || !found) continue;
        row *rw = &rows[(*n)++];
        snprintf(rw->name, sizeof rw->name, "per-block plan, %s", third == 1 ? "a third" : "two thirds");
        snprintf(rw->sets, sizeof rw->sets, "%s", plan.sets);
    }
    if (!st) {
        ckpt_settings cs = {.enabled = true, .interval = 1, .stride = 1};
        offload_plan(&r, cs.plan, sizeof cs.plan);
        st = model_set_checkpointing(r.m, &cs, NULL, 0);
        row *rw = &rows[*n];
        snprintf(rw->name, sizeof rw->name, "attention-offload plan");
        if (!st) ckpt_settings_text(&cs, rw->sets, sizeof rw->sets), (*n)++;
    }
    model_run_close(&r);
    config_free(cfg);
    return st;
}

static void print_detail(const row *rw, const measured *m)
{
    printf("|   %s by kind | measured s | predicted s |\n", rw->name);
    double rest = m->t_row;
    for (int k = 0; k < OP_KIND_COUNT; k++) {
        const op_profile *w = &m->row_work;
        const double units = w->flops[k] > 0 ? w->flops[k] : w->bytes[k];
        printf("|   %s | %.3f | %.3f |\n", op_kind_name((op_kind)k), m->row_prof.seconds[k], m->rates.per_unit[k] * units);
        rest -= m->row_prof.seconds[k];
    }
    printf("|   the rest | %.3f | %.3f |\n", rest, m->predicted - cost_predict(&m->rates, &m->row_work) + m->rates.fixed);
}

/* Whether name is one of the comma-separated list's. */
static bool listed(const char *list, const char *name)
{
    const size_t len = strlen(name);
    for (const char *at = list; *at; at += strcspn(at, ",") + (at[strcspn(at, ",")] == ',')) {
        if (strcspn(at, ",") == len && !strncmp(at, name, len)) return true;
    }
    return false;
}

typedef struct tally {
    double err[N_MODELS * ROWS_MAX]; /* |error| % */
    int n, within, failed;
} tally;

/* Every row of one model, each printed as it is measured (and said on stderr before it starts). */
static void bench_rows(const char *config_path, const char *label, const char *base, int warmup, int steps,
                        bool detail, tally *t)
{
    row rows[ROWS_MAX];
    sweep_mode modes[ROWS_MAX];
    int n = sweep_standard_modes(modes, ROWS_MAX);
    for (int m = 0; m < n; m++) {
        memcpy(rows[m].name, modes[m].name, sizeof modes[m].name); /* both NUL-terminated, no longer than row's */
        memcpy(rows[m].sets, modes[m].sets, sizeof modes[m].sets);
    }
    for (int i = 0; i < n; i++) {
        fprintf(stderr, "bench_cost: %s: %s (%d of %d)...\n", label, rows[i].name, i + 1, n);
        measured m;
        const st_status st = measure_row(config_path, base, &rows[i], warmup, steps, &m);
        if (st == ST_ERR_UNSUPPORTED) { /* the family refuses the schedule (sd1x's skips and unsloth): no row */
            printf("| %s | %s | refused by the family | | | |\n", label, rows[i].name);
            continue;
        }
        if (st) {
            fprintf(stderr, "bench_cost: %s: %s: %s\n", label, rows[i].name, st_error());
            t->failed++;
            continue;
        }
        const double err = 100 * (m.predicted - m.t_row) / m.t_row;
        t->err[t->n++] = fabs(err);
        t->within += fabs(err) <= 5;
        printf("| %s | %s | %.3f | %.3f | %.3f | %+.1f%% |\n", label, rows[i].name, m.t_none, m.t_row, m.predicted, err);
        if (detail) print_detail(&rows[i], &m);
        fflush(stdout);
        if (i == 0 && planned_rows(config_path, base, &m.rates, rows, &n)) {
            fprintf(stderr, "bench_cost: %s: planning: %s\n", label, st_error());
            t->failed++;
        }
    }
}

int main(int argc, char **argv)
{
    const char *config_path = NULL, *presets = NULL;
    long long steps = 5, warmup = 1;
    bool detail = false;
    const cli_flag flags[] = {{"--steps", .whole = &steps, .min = 1, .max = STEPS_MAX},
                              {"--warmup", .whole = &warmup, .min = 0, .max = 100},
                              {"--config", .text = &config_path},
                              {"--presets", .text = &presets},
                              {"--detail", .on = &detail},
                              {0}};
    if (bench_args(argc, argv, "bench_cost", flags)) return 2;
    for (const char *at = presets ? presets : ""; *at; at += strcspn(at, ",") + (at[strcspn(at, ",")] == ',')) {
        int i = 0;
        while (i < N_MODELS && (strlen(models[i].preset) != strcspn(at, ",") ||
                                strncmp(models[i].preset, at, strcspn(at, ","))))
            i++;
        if (i == N_MODELS) return fprintf(stderr, "bench_cost: --presets: '%.*s' is not one of its models\n",
                                          (int)strcspn(at, ","), at), 2;
    }
    machine_info mi;
    machine_describe(&mi);
    printf("machine: %s, %d threads; %s; %lld steps a side after %lld warm-up, in lockstep with `none`\n\n", mi.cpu,
           mi.threads, config_path ? config_path : "the tiny preset of each topology", steps, warmup);
    printf("| model | row | none s/step | row s/step, measured | predicted | error |\n|---|---|---|---|---|---|\n");
    tally t = {0};
    if (config_path) bench_rows(config_path, config_path, "", (int)warmup, (int)steps, detail, &t);
    for (int i = 0; i < N_MODELS && !config_path; i++) {
        if (presets && !listed(presets, models[i].preset)) continue;
        char base[160], label[96];
        snprintf(base, sizeof base, "model_preset=%s;resolution=%d;train_batch_size=%d;seed=3", models[i].preset,
                 models[i].resolution, models[i].batch);
        snprintf(label, sizeof label, "%s (%s, %d px, batch %d)", models[i].preset, models[i].topology,
                 models[i].resolution, models[i].batch);
        bench_rows(NULL, label, base, (int)warmup, (int)steps, detail, &t);
    }
    const int n = t.n;
    const double median = n ? bench_median(t.err, n) : 0; /* sorts t.err: the largest is last */
    printf("\n%d of %d rows within 5 %%, median |error| %.1f %%, largest %.1f %%%s\n", t.within, n, median,
           n ? t.err[n - 1] : 0, t.failed ? "; some rows failed (stderr)" : "");
    return t.failed ? 1 : 0;
}
