/* How well a dry step predicts a real step's time (not a test): the cost model of advise.h against the measured
 * steps of every standard sweep row, in one run on one machine.
 *
 * A shared machine's speed drifts by more than the model's error within a minute, so each row is measured in
 * lockstep with its calibration: two trainers in this process, one without checkpointing and one with the row's
 * schedule, take turns one optimizer step each. The first's profiled steps give the rates (cost_calibrate), the
 * row's dry step gives its work, and the prediction is set against the second's steps, taken in the same seconds.
 *
 *   build/bench_cost [--config C] [--steps N] [--warmup W]
 */
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

typedef struct side {
    char dir[32];
    config *cfg;
    trainer *t;
} side;

/* The config of a row: the base config with the row's overrides. */
static st_status row_config(const char *config_path, const sweep_mode *mode, config **out)
{
    st_status st = config_path ? config_load(config_path, out) : config_parse("{}", "defaults", out);
    if (!st) st = config_set_all(*out, mode->sets);
    return st;
}

static st_status side_open(const char *config_path, const sweep_mode *mode, int steps, side *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/segtrain-cost.XXXXXX");
    if (!mkdtemp(s->dir)) return st_fail(ST_ERR_IO, "cannot create a scratch folder in /tmp");
    st_status st = row_config(config_path, mode, &s->cfg);
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

/* The row's predicted seconds: its dry step's work at the calibrated rates. */
static st_status predict(const config *cfg, const cost_rates *rates, double *sec)
{
    model_run r = {0};
    st_status st = model_run_open(cfg, false, &r);
    pool_stats dev, host;
    if (!st) st = cost_of_dry_step(&r, config_int(cfg, "train_batch_size"), 1, rates, &dev, &host, sec);
    model_run_close(&r);
    return st;
}

/* Row m in lockstep with `none`: the medians of both sides' step times and the row's predicted time from the
 * calibration side's profile. */
static st_status measure_row(const char *config_path, const sweep_mode *none, const sweep_mode *row, int warmup,
                             int steps, double *t_none, double *t_row, double *predicted)
{
    side cal = {0}, run = {0};
    st_status st = side_open(config_path, none, warmup + steps, &cal);
    if (!st) st = side_open(config_path, row, warmup + steps, &run);
    double a[STEPS_MAX], b[STEPS_MAX];
    op_profile sum = {0};
    for (int s = 0; s < warmup + steps && !st; s++) {
        train_step_info in;
        op_profile p;
        ops_profile_start();
        st = trainer_step(cal.t, &in);
        ops_profile_stop(&p);
        if (st) break;
        const double ta = in.seconds;
        if (!(st = trainer_step(run.t, &in)) && s >= warmup) {
            a[s - warmup] = ta, b[s - warmup] = in.seconds;
            for (int k = 0; k < OP_KIND_COUNT; k++) {
                sum.calls[k] += p.calls[k], sum.seconds[k] += p.seconds[k];
                sum.flops[k] += p.flops[k], sum.bytes[k] += p.bytes[k];
            }
        }
    }
    if (!st) {
        for (int k = 0; k < OP_KIND_COUNT; k++)
            sum.seconds[k] /= steps, sum.flops[k] /= steps, sum.bytes[k] /= steps, sum.calls[k] /= steps;
        *t_none = bench_median(a, steps), *t_row = bench_median(b, steps);
        const cost_rates rates = cost_calibrate(&sum, *t_none);
        st = predict(run.cfg, &rates, predicted);
    }
    side_close(&cal);
    side_close(&run);
    return st;
}

int main(int argc, char **argv)
{
    const char *config_path = NULL;
    long long steps = 5, warmup = 1;
    const cli_flag flags[] = {{"--steps", .whole = &steps, .min = 1, .max = STEPS_MAX},
                              {"--warmup", .whole = &warmup, .min = 0, .max = 100},
                              {"--config", .text = &config_path},
                              {0}};
    if (bench_args(argc, argv, "bench_cost", flags)) return 2;
    sweep_mode modes[ROWS_MAX];
    const int n = sweep_standard_modes(modes, ROWS_MAX);
    machine_info mi;
    machine_describe(&mi);
    printf("machine: %s, %d threads; config %s; %lld steps a side after %lld warm-up, in lockstep with `none`\n\n",
           mi.cpu, mi.threads, config_path ? config_path : "defaults", steps, warmup);
    printf("| row | none s/step | row s/step, measured | predicted | error |\n|---|---|---|---|---|\n");
    double worst = 0;
    for (int m = 1; m < n; m++) {
        double t_none = 0, t_row = 0, pred = 0;
        st_status st = measure_row(config_path, &modes[0], &modes[m], (int)warmup, (int)steps, &t_none, &t_row, &pred);
        if (st) {
            fprintf(stderr, "bench_cost: %s: %s\n", modes[m].name, st_error());
            return 1;
        }
        const double err = 100 * (pred - t_row) / t_row;
        if (fabs(err) > worst) worst = fabs(err);
        printf("| %s | %.3f | %.3f | %.3f | %+.1f%% |\n", modes[m].name, t_none, t_row, pred, err);
        fflush(stdout);
    }
    printf("\nlargest error %.1f%%\n", worst);
    return 0;
}
