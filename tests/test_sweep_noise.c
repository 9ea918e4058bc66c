/* A busy machine in the sweep's reports (issue 39): a measured cell whose slowest step took more than
 * SWEEP_NOISY_SPREAD times its fastest is marked noisy in sweep.md, .json, .csv and .svg, and the reports say that
 * the machine was busy; a quiet sweep says nothing of the kind. */
#include "segtrain/status.h"
#include "segtrain/sweep.h"
#include "testkit.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static sweep_cell ok_cell(int steps, double lo, double median, double hi)
{
    return (sweep_cell){.status = CELL_OK, .steps = steps, .sec_min = lo, .sec_median = median, .sec_max = hi,
                        .peak_device = (size_t)100 << 20, .same_plan_as = -1};
}

static void test_predicate(void)
{
    const double t = SWEEP_NOISY_SPREAD;
    struct {
        sweep_cell c;
        bool noisy;
    } cases[] = {
        {ok_cell(3, 0.30, 0.31, 0.33), false},           /* a quiet machine: a few per cent */
        {ok_cell(2, 1.0, 1.2, 0.999 * t), false},        /* just under the threshold */
        {ok_cell(2, 1.0, 1.2, 1.001 * t), true},         /* just over it */
        {ok_cell(4, 0.33, 0.5, 9.1), true},              /* issue 39's 0.33 and 9.1 s/step */
        {ok_cell(30, 0.68, 2.0, 6.2), true},             /* its 30-step run */
        {ok_cell(1, 0.5, 0.5, 0.5), false},              /* one step has no spread */
        {ok_cell(5, 0, 0.1, 0.2), false},                /* no minimum recorded: nothing to compare */
        {(sweep_cell){.status = CELL_OOM, .steps = 3, .sec_min = 1, .sec_max = 10}, false}, /* only ran cells */
        {(sweep_cell){.status = CELL_FAILED, .steps = 3, .sec_min = 1, .sec_max = 10}, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECKF(sweep_cell_noisy(&cases[i].c) == cases[i].noisy, "case %zu: noisy should be %d", i, cases[i].noisy);
}

/* selfcheck's verdict on the machine, from given numbers */
static void test_load_note(void)
{
    struct {
        double load;
        int cores;
        double r1, r2;
        bool busy;
        const char *says; /* in the note */
    } cases[] = {
        {0.10, 2, 190, 185, false, NULL},     /* quiet */
        {0.50, 2, 190, 185, false, NULL},     /* a quarter of the cores: not yet */
        {1, 2, 0, 0, true, "1 other process running on 2 cores"},
        {3, 2, 190, 200, true, "3 other processes running on 2 cores"},
        {4, 16, 190, 185, false, NULL},    /* the same load on more cores */
        {5, 16, 190, 185, true, "5 other processes running on 16 cores"},
        {0, 1, 190, 185, false, NULL},
        {1, 1, 190, 185, true, "on 1 core)"},
        {-1, 2, 190, 152.1, false, NULL},     /* no load average; readings within a quarter */
        {-1, 2, 190, 151.9, true, "GEMM rates 190.0 and 151.9 GFLOP/s"},
        {-1, 2, 57, 158, true, "GEMM rates 57.0 and 158.0"},
        {3.0, 2, 57, 158, true, "3 other processes running on 2 cores, GEMM rates 57.0 and 158.0"},
        {0.1, 2, 0, 158, false, NULL},        /* a reading missing: nothing to compare */
        {0.1, 0, 190, 185, false, NULL},      /* cores unknown */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char note[400] = "x";
        const bool busy = machine_load_note(cases[i].load, cases[i].cores, cases[i].r1, cases[i].r2, note, sizeof note);
        CHECKF(busy == cases[i].busy, "case %zu: busy %d, want %d", i, busy, cases[i].busy);
        if (cases[i].busy)
            CHECKF(strstr(note, "the machine is busy") && strstr(note, cases[i].says), "case %zu: '%s'", i, note);
        else CHECKF(note[0] == 0, "case %zu: a note on a quiet machine: '%s'", i, note);
    }
    const double others = machine_others_running(); /* this machine's: a count, or -1 without /proc */
    CHECKF(others >= 0 || (others == -1 && access("/proc/loadavg", R_OK)), "others running %g", others);
}

/* 3 modes x 2 budgets; the cells named in noisy[] (mode * 2 + budget) get a spread of 4x, the rest 1.05x. */
static void build(sweep_mode modes[3], size_t budgets[2], sweep_cell cells[6], const int *noisy, int n_noisy)
{
    const char *names[3] = {"none", "layer", "unsloth"};
    for (int m = 0; m < 3; m++) {
        snprintf(modes[m].name, sizeof modes[m].name, "%s", names[m]);
        snprintf(modes[m].sets, sizeof modes[m].sets, "gradient_checkpointing=%s", m ? "true" : "false");
    }
    budgets[0] = 0;
    budgets[1] = (size_t)1 << 30;
    for (int i = 0; i < 6; i++) {
        const double sec = 0.3 + 0.1 * i;
        cells[i] = ok_cell(3, sec, sec * 1.02, sec * 1.05);
        cells[i].mode = i / 2;
        cells[i].device_memory = budgets[i % 2];
        snprintf(cells[i].plan, sizeof cells[i].plan, "seq: plan %d", i);
    }
    for (int k = 0; k < n_noisy; k++) cells[noisy[k]].sec_max = cells[noisy[k]].sec_min * 4;
}

static void check_reports(const char *dir, const int *noisy, int n_noisy)
{
    sweep_mode modes[3];
    size_t budgets[2];
    sweep_cell cells[6];
    build(modes, budgets, cells, noisy, n_noisy);
    sweep_result r = {.n_modes = 3, .n_budgets = 2, .modes = modes, .budgets = budgets, .cells = cells,
                      .warmup = 1, .steps = 3, .preset = "dit-tiny"};
    CHECK(sweep_noisy_cells(&r) == n_noisy);
    CHECKF(sweep_write_reports(&r, dir) == ST_OK, "sweep_write_reports: %s", st_error());
    bool is_noisy[6] = {false};
    for (int k = 0; k < n_noisy; k++) is_noisy[noisy[k]] = true;

    char *md = tk_read_file(dir, "sweep.md");
    CHECK(md != NULL);
    if (md) {
        CHECKF(count_of(md, "(noisy) ") == (size_t)n_noisy, "%zu cells marked (noisy), want %d", count_of(md, "(noisy) "),
               n_noisy);
        CHECK(!strstr(md, "machine was busy") == !n_noisy);
        CHECKF(count_of(md, ": noisy: its steps took") == (size_t)n_noisy, "%d notes", n_noisy);
        for (int i = 0; i < 6; i++) { /* each mark on its own cell: the text after the cell's own figures */
            char text[64], marked[80];
            sweep_cell_text(&cells[i], text, sizeof text);
            snprintf(marked, sizeof marked, "| %s (noisy) ", text);
            CHECKF(!strstr(md, marked) == !is_noisy[i], "cell %d: marked %d", i, is_noisy[i]);
        }
    }
    free(md);

    char *json = tk_read_file(dir, "sweep.json");
    cJSON *j = json ? cJSON_Parse(json) : NULL;
    CHECK(j != NULL);
    if (j) {
        CHECK(cJSON_IsBool(cJSON_GetObjectItem(j, "machine_busy")) &&
              cJSON_IsTrue(cJSON_GetObjectItem(j, "machine_busy")) == (n_noisy > 0));
        const cJSON *spread = cJSON_GetObjectItem(j, "noisy_spread");
        CHECK(cJSON_IsNumber(spread) && spread->valuedouble == SWEEP_NOISY_SPREAD);
        const cJSON *jc = cJSON_GetObjectItem(j, "cells");
        CHECK(cJSON_GetArraySize(jc) == 6);
        for (int i = 0; i < 6 && cJSON_GetArraySize(jc) == 6; i++) {
            const cJSON *v = cJSON_GetObjectItem(cJSON_GetArrayItem(jc, i), "noisy");
            CHECKF(cJSON_IsBool(v) && cJSON_IsTrue(v) == is_noisy[i], "json cell %d noisy", i);
        }
    }
    cJSON_Delete(j);
    free(json);

    char *csv = tk_read_file(dir, "sweep.csv");
    CHECK(csv != NULL);
    if (csv) { /* no field here holds a comma or a quote: split plainly; "noisy" is the last column */
        char *save = NULL;
        int row = 0;
        for (char *line = strtok_r(csv, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save), row++) {
            const char *last = strrchr(line, ',');
            CHECK(last != NULL);
            if (!last) continue;
            const char *want = row == 0 ? "noisy" : is_noisy[row - 1] ? "1" : "0";
            CHECKF(!strcmp(last + 1, want), "csv row %d ends in '%s', want '%s'", row, last + 1, want);
        }
        CHECK(row == 7);
    }
    free(csv);

    /* the plot: a point per mode (its unlimited cell), hollow where that cell is noisy, and a line saying so */
    char *svg = tk_read_file(dir, "sweep.svg");
    CHECK(svg != NULL);
    if (svg) {
        int plotted_noisy = is_noisy[0] + is_noisy[2] + is_noisy[4];
        CHECKF(count_of(svg, "fill=\"#ffffff\" stroke=\"#c0392b\"") == (size_t)plotted_noisy, "%d hollow points",
               plotted_noisy);
        CHECK(count_of(svg, "; noisy: steps took") == (size_t)plotted_noisy);
        CHECK(!strstr(svg, "The machine was busy") == !n_noisy);
        CHECK(count_of(svg, "<circle ") == 3);
    }
    free(svg);
}

static void remove_reports(const char *dir)
{
    static const char *const names[] = {"sweep.md", "sweep.json", "sweep.csv", "sweep.svg"};
    for (int i = 0; i < 4; i++) remove(tk_path(dir, names[i]));
}

int main(void)
{
    test_predicate();
    test_load_note();
    char dir[] = "/tmp/segtrain_sweep_noise_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const int quiet[1] = {0}, one[] = {3}, plotted[] = {0, 4}, all[] = {0, 1, 2, 3, 4, 5};
    check_reports(dir, quiet, 0);
    check_reports(dir, one, 1);     /* layer's 1 GiB cell: not the plotted one */
    check_reports(dir, plotted, 2); /* none's and unsloth's unlimited cells */
    check_reports(dir, all, 6);
    remove_reports(dir);
    rmdir(dir);
    return tk_finish();
}
