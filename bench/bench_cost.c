/* How well a dry step predicts a real step's time (not a test): the cost model of advise.h, calibrated on one
 * measured run without checkpointing, against the measured median of every standard sweep row, in one run on one
 * machine. Rows are measured in turns over `rounds` rounds, so that a slow minute of a shared machine spreads over
 * all of them instead of landing on one.
 *
 *   build/bench_cost [--config C] [--steps N] [--warmup W] [--rounds R]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h" /* cli_number: numbers read as the tool reads them */
#include "segtrain/advise.h"
#include "segtrain/model_run.h"
#include "segtrain/objective.h"
#include "segtrain/sweep.h"
#include "segtrain/train.h"

#define ROWS_MAX 16

/* One measured cell of a row: the config with the row's overrides, trained warmup + steps steps here. */
static st_status measure(const char *config_path, const sweep_mode *mode, int warmup, int steps, sweep_cell *cell)
{
    char dir[] = "/tmp/segtrain-cost.XXXXXX";
    if (!mkdtemp(dir)) return st_fail(ST_ERR_IO, "cannot create a scratch folder in /tmp");
    config *cfg = NULL;
    st_status st = config_path ? config_load(config_path, &cfg) : config_parse("{}", "defaults", &cfg);
    if (!st) st = config_set_all(cfg, mode->sets);
    if (!st) st = sweep_measured_config(cfg, warmup + steps, dir);
    if (!st) {
        *cell = (sweep_cell){0};
        sweep_run_cell(cfg, warmup, steps, cell);
        if (cell->status != CELL_OK) st = st_fail(ST_ERR_INTERNAL, "%s: %s", mode->name, cell->error);
    }
    config_free(cfg);
    remove_scratch(dir);
    return st;
}

/* The row's predicted seconds: its dry step's work at the calibrated rates. */
static st_status predict(const char *config_path, const sweep_mode *mode, const cost_rates *rates, double *sec)
{
    config *cfg = NULL;
    st_status st = config_path ? config_load(config_path, &cfg) : config_parse("{}", "defaults", &cfg);
    if (!st) st = config_set_all(cfg, mode->sets);
    model_run r = {0};
    char warning[256];
    if (!st) st = model_run_open(cfg, false, &r, warning);
    if (!st) {
        pool_stats dev, host;
        op_profile work;
        ops_profile_start();
        st = flow_step_dry(&r, config_int(cfg, "train_batch_size"),
                           train_optimizer_bytes(cfg, model_params(r.m)->grad_count), &dev, &host);
        ops_profile_stop(&work);
        *sec = cost_predict(rates, &work);
    }
    model_run_close(&r);
    config_free(cfg);
    return st;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *config_path = NULL;
    long long steps = 3, warmup = 1, rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const cli_flag f[] = {{"--steps", .whole = &steps, .min = 1, .max = 1000},
                              {"--warmup", .whole = &warmup, .min = 0, .max = 1000},
                              {"--rounds", .whole = &rounds, .min = 1, .max = 100}};
        int known = 0;
        for (size_t k = 0; k < sizeof f / sizeof *f; k++)
            if (!strcmp(argv[i], f[k].name)) {
                if (cli_number("bench_cost", &f[k], argv[i + 1])) return 2;
                known = 1;
            }
        if (!strcmp(argv[i], "--config")) config_path = argv[i + 1], known = 1;
        if (!known) {
            fprintf(stderr, "usage: bench_cost [--config C] [--steps N] [--warmup W] [--rounds R]\n");
            return 2;
        }
    }
    sweep_mode modes[ROWS_MAX];
    const int n = sweep_standard_modes(modes, ROWS_MAX);
    static double measured[ROWS_MAX][100], predicted[ROWS_MAX];
    machine_info mi;
    machine_describe(&mi);
    printf("machine: %s, %d threads; %s\n", mi.cpu, mi.threads, config_path ? config_path : "defaults");
    st_status st = ST_OK;
    for (int round = 0; round < rounds && !st; round++) {
        /* each round calibrates on its own `none` cell and predicts every row from it */
        sweep_cell cal;
        st = measure(config_path, &modes[0], (int)warmup, (int)steps, &cal);
        if (st) break;
        const cost_rates rates = cost_calibrate(&cal.work, cal.sec_median);
        measured[0][round] = cal.sec_median;
        for (int m = 1; m < n && !st; m++) {
            sweep_cell c;
            st = measure(config_path, &modes[m], (int)warmup, (int)steps, &c);
            if (!st) measured[m][round] = c.sec_median;
        }
        for (int m = 0; m < n && !st; m++) {
            double sec = 0;
            st = predict(config_path, &modes[m], &rates, &sec);
            predicted[m] += sec / (double)rounds;
            if (!st) fprintf(stderr, "round %d: %-22s measured %.3f s, predicted %.3f s\n", round + 1, modes[m].name,
                             measured[m][round], sec);
        }
    }
    if (st) {
        fprintf(stderr, "bench_cost: %s\n", st_error());
        return 1;
    }
    printf("| row | measured s/step (median of %lld rounds) | predicted s/step | error |\n|---|---|---|---|\n", rounds);
    double worst = 0;
    for (int m = 0; m < n; m++) {
        qsort(measured[m], (size_t)rounds, sizeof(double), by_value);
        const double med = rounds % 2 ? measured[m][rounds / 2] : 0.5 * (measured[m][rounds / 2 - 1] + measured[m][rounds / 2]);
        const double err = 100 * (predicted[m] - med) / med;
        if (fabs(err) > worst) worst = fabs(err);
        printf("| %s | %.3f | %.3f | %+.1f%% |\n", modes[m].name, med, predicted[m], err);
    }
    printf("\nlargest error %.1f%%\n", worst);
    return 0;
}
