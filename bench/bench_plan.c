/* What a model's training step needs under every standard sweep row, by running it dry (not a test): the peak
 * device memory of the step by tag, which budgets it fits, and how long the dry run took. Nothing is allocated,
 * so a 12B model plans here without its memory.
 *
 *   build/bench_plan --config C [--budgets 24GiB,48GiB,80GiB]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchkit.h"
#include "segtrain/model_run.h"
#include "segtrain/objective.h"
#include "segtrain/sweep.h"
#include "segtrain/train.h"

#define ROWS_MAX 16
#define BUDGETS_MAX 8

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

int main(int argc, char **argv)
{
    const char *config_path = NULL, *budgets_text = "24GiB,48GiB,80GiB";
    const cli_flag flags[] = {{"--config", .text = &config_path, .required = true}, {"--budgets", .text = &budgets_text},
                              {0}};
    if (bench_args(argc, argv, "bench_plan", flags)) return 2;
    size_t budget[BUDGETS_MAX];
    char names[BUDGETS_MAX][32];
    int nb = 0;
    config *sizes = NULL; /* sizes read as device_memory reads them */
    if (config_parse("{}", "--budgets", &sizes)) return fprintf(stderr, "bench_plan: %s\n", st_error()), 2;
    for (const char *p = budgets_text; *p && nb < BUDGETS_MAX;) {
        const size_t w = strcspn(p, ",");
        char set[300];
        snprintf(names[nb], sizeof names[nb], "%.*s", (int)w, p);
        snprintf(set, sizeof set, "device_memory=%s", names[nb]);
        if (config_set(sizes, set) || config_bytes(sizes, "device_memory", &budget[nb]))
            return fprintf(stderr, "bench_plan: --budgets: %s\n", st_error()), 2;
        nb++;
        p += w + (p[w] == ',');
    }
    config_free(sizes);
    sweep_mode modes[ROWS_MAX];
    const int n = sweep_standard_modes(modes, ROWS_MAX);
    machine_info mi;
    machine_describe(&mi);
    printf("machine: %s; config %s\n\n", mi.cpu, config_path);
    printf("| mode | peak GiB | at the peak: weights | gradients | optimizer | activations | boundaries | workspace | host GiB |");
    for (int b = 0; b < nb; b++) printf(" %s |", names[b]);
    printf(" dry run s |\n|---|---|---|---|---|---|---|---|---|");
    for (int b = 0; b < nb; b++) printf("---|");
    printf("---|\n");
    for (int m = 0; m < n; m++) {
        config *cfg = NULL;
        model_run r = {0};
        pool_stats dev, host;
        const double t0 = clock_seconds();
        st_status st = config_load(config_path, &cfg);
        if (!st) st = config_set_all(cfg, modes[m].sets);
        if (!st) st = model_run_open(cfg, false, &r);
        if (!st) st = flow_step_dry(&r, config_int(cfg, "train_batch_size"), 1, &dev, &host);
        const double sec = clock_seconds() - t0;
        model_run_close(&r);
        config_free(cfg);
        if (st) {
            printf("| %s | %s |\n", modes[m].name, st_error());
            continue;
        }
        const size_t *t = dev.at_peak_by_tag;
        printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |", modes[m].name, gib(dev.peak),
               gib(t[MEM_WEIGHTS]), gib(t[MEM_GRADIENTS]), gib(t[MEM_OPTIMIZER]), gib(t[MEM_ACTIVATIONS]),
               gib(t[MEM_BOUNDARIES]), gib(t[MEM_WORKSPACE]), gib(host.peak));
        for (int b = 0; b < nb; b++) printf(" %s |", dev.peak <= budget[b] ? "fits" : "OOM");
        printf(" %.3f |\n", sec);
        fflush(stdout);
    }
    return 0;
}
