/* `segtrain sweep`: every mode x budget cell in a fresh child process (`segtrain sweep-cell`), then the reports. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "segtrain/ops.h"
#include "segtrain/sweep.h"

static const char sweep_help[] =
    "usage: segtrain sweep [--config C] [--modes LIST] [--warmup W] [--steps N] [--device-memory SIZE,SIZE...]\n"
    "                      [--out DIR] [--timeout SECONDS] [--set key=value ...]\n"
    "\n"
    "Measures the configured model under each checkpointing mode and device-memory budget: every cell trains\n"
    "W warm-up and N measured steps (synthetic batches of the model's shape) in a fresh process, so that its peak\n"
    "and its failure are its own. A cell reads `sec/step / peak GiB` (the median seconds per optimizer step and\n"
    "the peak device memory of the measured steps), or OOM (with what the plan needs), failed (the error is in\n"
    "sweep.json), unsupported (the option was refused, with its message) or not run (the sweep was interrupted).\n"
    "Modes whose plans are identical are marked so in every report.\n"
    "\n"
    "  --modes LIST          comma-separated rows: the standard ones (none, layer, interval2, seg2-stride4,\n"
    "                        torch-ffn, unsloth, unsloth-ffn, activation-offload, seg2-stride4-offload; the\n"
    "                        default is all of them) and your own as name:key=value,key=value, e.g.\n"
    "                        --modes none,layer,'wide:gradient_checkpointing=true,gradient_checkpointing_interval=4'\n"
    "  --warmup W            unmeasured steps first (default 1)\n"
    "  --steps N             measured steps (default 3)\n"
    "  --device-memory LIST  budget columns, e.g. unlimited,24GiB,80GiB (default: one unlimited column)\n"
    "  --out DIR             where sweep.md, sweep.json, sweep.csv and sweep.svg go (default sweep-report)\n"
    "  --timeout SECONDS     a cell still running after this is killed and marked failed (default 1800)\n"
    "\n"
    "With no --config the model is dit-s2 at batch 8 (the built-in default).\n";

static const char *self_path;
static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) { interrupted = sig; }

static st_status parse_size(const char *text, size_t *out)
{
    if (!strcmp(text, "0") || !strcmp(text, "unlimited")) return *out = 0, ST_OK;
    char json[160];
    config *c;
    snprintf(json, sizeof json, "{\"device_memory\": \"%.100s\"}", text);
    st_status st = config_parse(json, "--device-memory", &c);
    if (!st) st = config_bytes(c, "device_memory", out);
    config_free(c);
    return st;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf) buf[fread(buf, 1, (size_t)n, f)] = 0;
    fclose(f);
    return buf;
}

/* The last non-empty line of a file (a child's stderr), for a failed cell's reason. */
static void last_line(const char *path, char *out, size_t n)
{
    char *text = read_file(path);
    out[0] = 0;
    if (!text) return;
    char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == '\r')) *--end = 0;
    char *start = strrchr(text, '\n');
    snprintf(out, n, "%s", start ? start + 1 : text);
    free(text);
}

/* Runs one cell in a child process and waits for it, at most timeout seconds. */
static void run_cell(const cli_args *a, const char *config_path, const sweep_mode *mode, size_t budget, int warmup,
                     int steps, int timeout, const char *cell_dir, int index, sweep_cell *cell)
{
    if (sweep_check_mode(mode)) { /* a key segtrain does not have: an option it refuses, like the spec's */
        cell->status = CELL_UNSUPPORTED;
        snprintf(cell->error, sizeof cell->error, "%s", st_error());
        return;
    }
    char result[600], errors[600], outdir[600], w[16], s[16], mem[64], threads[16];
    snprintf(result, sizeof result, "%s/cell-%d.json", cell_dir, index);
    snprintf(errors, sizeof errors, "%s/cell-%d.err", cell_dir, index);
    snprintf(outdir, sizeof outdir, "output_dir=%s/cell-%d", cell_dir, index);
    snprintf(w, sizeof w, "%d", warmup);
    snprintf(s, sizeof s, "%d", steps);
    if (budget) snprintf(mem, sizeof mem, "device_memory=%zu", budget);
    else snprintf(mem, sizeof mem, "device_memory="); /* unlimited */
    snprintf(threads, sizeof threads, "%d", ops_threads());
    const char *argv[4 * CLI_MAX_SETS + 64];
    int n = 0;
    argv[n++] = self_path;
    argv[n++] = "--threads";
    argv[n++] = threads;
    argv[n++] = "sweep-cell";
    if (config_path) argv[n++] = "--config", argv[n++] = config_path;
    for (int i = 0; i < a->n_sets; i++) argv[n++] = "--set", argv[n++] = a->sets[i];
    char sets[SWEEP_TEXT_MAX];
    snprintf(sets, sizeof sets, "%s", mode->sets);
    for (char *save = NULL, *kv = strtok_r(sets, ";", &save); kv && n < (int)(sizeof argv / sizeof *argv) - 16;
         kv = strtok_r(NULL, ";", &save))
        argv[n++] = "--set", argv[n++] = kv;
    argv[n++] = "--set", argv[n++] = mem;
    argv[n++] = "--set", argv[n++] = outdir;
    argv[n++] = "--warmup", argv[n++] = w;
    argv[n++] = "--steps", argv[n++] = s;
    argv[n++] = "--out", argv[n++] = result;
    argv[n] = NULL;

    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *err = freopen(errors, "w", stderr);
        (void)err;
        if (!freopen("/dev/null", "w", stdout)) _exit(126);
        execv(self_path, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    const time_t deadline = time(NULL) + timeout;
    pid_t done = 0;
    while (pid > 0 && (done = waitpid(pid, &status, WNOHANG)) == 0 && !interrupted && time(NULL) < deadline)
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL); /* a child's whole step is seconds: 50 ms is fine */
    if (pid > 0 && done == 0) { /* timed out or interrupted: the cell goes */
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cell->status = interrupted ? CELL_NOT_RUN : CELL_FAILED;
        snprintf(cell->error, sizeof cell->error, interrupted ? "interrupted" : "timed out after %d s", timeout);
        return;
    }
    char *text = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? read_file(result) : NULL;
    if (text && !sweep_cell_from_json(text, cell)) {
        free(text);
        return;
    }
    free(text);
    cell->status = CELL_FAILED;
    char why[300];
    last_line(errors, why, sizeof why);
    if (pid < 0) snprintf(cell->error, sizeof cell->error, "cannot start a process: %s", strerror(errno));
    else if (WIFSIGNALED(status))
        snprintf(cell->error, sizeof cell->error, "crashed (signal %d)%s%s", WTERMSIG(status), why[0] ? ": " : "", why);
    else snprintf(cell->error, sizeof cell->error, "exited with status %d%s%s", WEXITSTATUS(status), why[0] ? ": " : "", why);
}

static void print_cell(const sweep_cell *c)
{
    switch (c->status) {
    case CELL_OK: fprintf(stderr, "%.3f s/step, peak %.3f GiB\n", c->sec_median, c->peak_device / 1073741824.0); break;
    case CELL_OOM: fprintf(stderr, "OOM (needs %.3f GiB)\n", c->peak_device / 1073741824.0); break;
    default: fprintf(stderr, "%s: %s\n", cell_status_name(c->status), c->error);
    }
}

int cmd_sweep(int argc, char **argv)
{
    const char *config_file = NULL, *mode_list = NULL, *memory = NULL, *out = "sweep-report";
    long long warmup = 1, steps = 3, timeout = 1800;
    const cli_flag flags[] = {{"--config", .text = &config_file},
                              {"--modes", .text = &mode_list},
                              {"--warmup", .whole = &warmup, .min = 0, .max = CLI_STEPS_MAX},
                              {"--steps", .whole = &steps, .min = 1, .max = CLI_STEPS_MAX},
                              {"--device-memory", .text = &memory},
                              {"--out", .text = &out},
                              {"--timeout", .whole = &timeout, .min = 1, .max = INT_MAX},
                              {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(sweep_help, stdout), 0) : rc;
    static char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "segtrain sweep: cannot find its own executable in /proc/self/exe\n");
        return 1;
    }
    self[len] = 0;
    self_path = self;

    sweep_result r = {.warmup = (int)warmup, .steps = (int)steps};
    sweep_mode modes[64];
    size_t budgets[16] = {0};
    st_status st = ST_OK;
    if (mode_list) {
        /* comma-separated: a token with ':' starts a user row, key=value tokens continue it, others are
         * standard rows */
        char list[4096];
        snprintf(list, sizeof list, "%s", mode_list);
        for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && !st; tok = strtok_r(NULL, ",", &save)) {
            sweep_mode *last = r.n_modes ? &modes[r.n_modes - 1] : NULL;
            if (!strchr(tok, ':') && strchr(tok, '=') && last && strcmp(last->name, "none") &&
                strlen(last->sets) + strlen(tok) + 2 < sizeof last->sets) {
                strcat(last->sets, ";");
                strcat(last->sets, tok);
            } else if (r.n_modes < 64) {
                st = sweep_parse_mode(tok, &modes[r.n_modes++]);
            }
        }
    } else {
        r.n_modes = sweep_standard_modes(modes, 64);
    }
    r.n_budgets = 1;
    if (!st && memory) {
        char list[1024];
        snprintf(list, sizeof list, "%s", memory);
        r.n_budgets = 0;
        for (char *save = NULL, *b = strtok_r(list, ",", &save); b && !st && r.n_budgets < 16; b = strtok_r(NULL, ",", &save))
            st = parse_size(b, &budgets[r.n_budgets++]);
    }
    if (st) return cli_error("sweep"); /* before any folder is made: a refused command leaves none */
    char cell_dir[512], default_config[600] = "";
    snprintf(cell_dir, sizeof cell_dir, "%s/cells", out);
    const bool made_out = mkdir(out, 0755) == 0;
    if ((!made_out && errno != EEXIST) || (mkdir(cell_dir, 0755) && errno != EEXIST)) {
        fprintf(stderr, "segtrain sweep: cannot create %s: %s\n", cell_dir, strerror(errno));
        if (made_out) rmdir(out);
        return 1;
    }
    const char *config_path = config_file;
    if (!config_path) { /* the built-in default, written down so that every cell reads the same */
        snprintf(default_config, sizeof default_config, "%s/default-config.json", out);
        FILE *f = fopen(default_config, "w");
        if (f) fputs("{\"model_preset\": \"dit-s2\", \"train_batch_size\": 8}\n", f), fclose(f);
        config_path = default_config;
    }
    config *cfg = NULL;
    st = cli_load_config(config_path, &a, &cfg); /* validates the config once, up front */
    if (!st && !(r.cells = calloc((size_t)(r.n_modes * r.n_budgets), sizeof *r.cells)))
        st = st_host_oom("the sweep's %d cells", r.n_modes * r.n_budgets);
    if (st) { /* nothing was measured: what this run made goes (rmdir keeps a folder that holds anything else) */
        config_free(cfg);
        if (default_config[0]) unlink(default_config);
        rmdir(cell_dir);
        if (made_out) rmdir(out);
        return cli_error("sweep");
    }
    snprintf(r.config, sizeof r.config, "%s", config_file ? config_file : "built-in default (dit-s2, batch 8)");
    snprintf(r.preset, sizeof r.preset, "%s", config_string(cfg, "model_preset"));
    machine_describe(&r.machine);
    r.modes = modes;
    r.budgets = budgets;
    signal(SIGINT, on_interrupt);
    const int total = r.n_modes * r.n_budgets;
    for (int b = 0, k = 0; b < r.n_budgets; b++)
        for (int m = 0; m < r.n_modes; m++, k++) {
            sweep_cell *c = &r.cells[m * r.n_budgets + b];
            *c = (sweep_cell){.mode = m, .device_memory = budgets[b], .status = CELL_NOT_RUN, .same_plan_as = -1};
            if (interrupted) continue;
            char budget[32] = "unlimited";
            if (budgets[b]) snprintf(budget, sizeof budget, "%.2f GiB", budgets[b] / 1073741824.0);
            fprintf(stderr, "[%d/%d] %-22s %-10s ... ", k + 1, total, modes[m].name, budget);
            fflush(stderr);
            run_cell(&a, config_path, &modes[m], budgets[b], r.warmup, r.steps, (int)timeout, cell_dir, k, c);
            c->mode = m, c->device_memory = budgets[b];
            print_cell(c);
        }
    signal(SIGINT, SIG_DFL);
    sweep_mark_identical_plans(&r);
    st = sweep_write_reports(&r, out);
    if (!st) {
        printf("\n");
        sweep_write_markdown(&r, stdout);
        printf("\nreports: %s/sweep.md, sweep.json, sweep.csv, sweep.svg\n", out);
    }
    int measured = 0, failed = 0;
    for (int k = 0; k < total; k++) {
        measured += r.cells[k].status == CELL_OK || r.cells[k].status == CELL_OOM;
        failed += r.cells[k].status == CELL_FAILED;
    }
    free(r.cells);
    config_free(cfg);
    if (st) return cli_error("sweep");
    if (interrupted) return 130;
    if (!measured) /* the reports say why; the exit status says that the sweep measured nothing */
        fprintf(stderr, "segtrain sweep: no cell ran: %d failed, %d unsupported (see %s/sweep.json)\n", failed,
                total - failed, out);
    return measured ? 0 : 1;
}

/* The child side: one cell, its result as JSON in --out. */
int cmd_sweep_cell(int argc, char **argv)
{
    const char *config_path = NULL, *out = NULL;
    long long warmup = 1, steps = 3; /* sweep's defaults; it always gives both */
    const cli_flag flags[] = {{"--config", .text = &config_path},
                              {"--warmup", .whole = &warmup, .min = 0, .max = CLI_STEPS_MAX},
                              {"--steps", .whole = &steps, .min = 1, .max = CLI_STEPS_MAX},
                              {"--out", .text = &out, .required = true},
                              {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return 2;
    config *cfg;
    sweep_cell cell = {0};
    st_status st = cli_load_config(config_path, &a, &cfg);
    if (!st) st = sweep_measured_config(cfg, (int)(warmup + steps), NULL);
    if (st) { /* a refusal of the mode's keys is a cell status, not a failure of the sweep */
        cell.status = st == ST_ERR_UNSUPPORTED ? CELL_UNSUPPORTED : CELL_FAILED;
        snprintf(cell.error, sizeof cell.error, "%s", st_error());
    } else {
        sweep_run_cell(cfg, (int)warmup, (int)steps, &cell);
    }
    char *json = sweep_cell_to_json(&cell);
    FILE *f = fopen(out, "w");
    int ok = f && json && fputs(json, f) >= 0;
    if (f) ok &= fclose(f) == 0;
    free(json);
    config_free(cfg);
    return ok ? 0 : 1;
}
