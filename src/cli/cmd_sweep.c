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
    "       segtrain sweep --families all|NAME,NAME... [--examples DIR] [--planner] [--device-memory SIZE,...]\n"
    "                      [--mixed_precision no|bf16] [...]\n"
    "\n"
    "Measures the configured model under each checkpointing mode and device-memory budget: every cell trains\n"
    "W warm-up and N measured steps (synthetic batches of the model's shape) in a fresh process, so that its peak\n"
    "and its failure are its own. A cell reads `sec/step / peak GiB` (the median seconds per optimizer step and\n"
    "the peak device memory of the measured steps), or OOM (with what the plan needs), failed (the error is in\n"
    "sweep.json), unsupported (the option was refused, with its message) or not run (the sweep was interrupted).\n"
    "Modes whose plans are identical are marked so in every report. A cell whose budget binds nothing (above the\n"
    "peaks of the same mode's cell in an earlier column) is that cell's run, not measured again; the reports say so.\n"
    "A cell whose slowest measured step took over 1.5x its fastest is marked (noisy) (sweep.json: \"noisy\",\n"
    "\"machine_busy\"): something else had the cores, and the report says the machine was busy.\n"
    "\n"
    "  --modes LIST          comma-separated rows: the standard ones (none, layer, interval2, seg2-stride4,\n"
    "                        torch-ffn, unsloth, unsloth-ffn, activation-offload, seg2-stride4-offload; the\n"
    "                        default is all of them) and your own as name:key=value,key=value, e.g.\n"
    "                        --modes none,layer,'wide:gradient_checkpointing=true,gradient_checkpointing_interval=4'\n"
    "                        and plan, the config's own gradient_checkpointing_plan (a row of the default list\n"
    "                        when the config has one; `segtrain advise` writes one); a standard row with where\n"
    "                        its weights live: +swapN (musubi_blocks_to_swap N) and +a base_model_precision,\n"
    "                        e.g. layer+swap2, unsloth+swap2+int8-quanto (docs/WEIGHTS.md, docs/QUANTIZATION.md)\n"
    "  --families LIST       the family sweep (below): all (every SimpleTuner family with a built flavour)\n"
    "                        or SimpleTuner names, e.g. flux,sdxl,wan; instead of --config\n"
    "  --examples DIR        its SimpleTuner example configs (default tests/fixtures/simpletuner)\n"
    "  --planner             the family sweep also runs the per-block planner (segtrain advise's) at each\n"
    "                        budget, seeded with the fastest mode that fits, and reports its plan beside it\n"
    "  --warmup W            unmeasured steps first (default 1)\n"
    "  --steps N             measured steps (default 3; 2 with --families)\n"
    "  --device-memory LIST  budget columns, e.g. unlimited,24GiB,80GiB (default: one unlimited column)\n"
    "  --out DIR             where sweep.md, sweep.json, sweep.csv and sweep.svg go (default sweep-report)\n"
    "  --timeout SECONDS     a cell still running after this is killed and marked failed (default 1800)\n"
    "\n"
    "With no --config the model is dit-s2 at batch 8 (the built-in default).\n"
    "\n"
    "The family sweep (--families) builds SimpleTuner's matrix: for each family, a row per mode in two halves.\n"
    "  predicted  at the family's real preset and the shape (resolution, frames, batch) of its SimpleTuner example\n"
    "             config (--examples DIR, default tests/fixtures/simpletuner: run from the repository root); a\n"
    "             family without one takes its default flavour's preset at batch 1, and the report says so. One\n"
    "             dry step per mode (nothing is allocated) gives the exact peak device and host memory; the time\n"
    "             is advise's cost model at this machine's op rates, measured once per run by one real step of\n"
    "             dit-s2 (the report prints them): seconds predicted on this CPU. Columns: unlimited, then each\n"
    "             --device-memory budget (default 24GiB,48GiB,80GiB), where a mode that does not fit is OOM with\n"
    "             what it needs; per family and budget, the fastest mode that fits.\n"
    "  measured   on the family's tiny preset, each cell in a fresh process as above (default --warmup 1\n"
    "             --steps 2): milliseconds of a toy model, to show that each mode runs and what it refuses.\n"
    "Each family plans and trains in its example's precision, its mixed_precision (SimpleTuner's default, bf16,\n"
    "where the example sets none or there is none), both halves; every row and report says which (bf16 or\n"
    "float32). --mixed_precision no|bf16 (SimpleTuner's key) sets every family's; in the config sweep, the\n"
    "config's mixed_precision (segtrain's default: no, float32) is the report's, and the flag overrides it too.\n"
    "A mode the family refuses is unsupported, with its reason; a family not built says why. --set applies to\n"
    "both halves. --out gets families.md, families.json, families.csv, and per family FAMILY/predicted/ and\n"
    "FAMILY/measured/ with the sweep's four reports (sweep.svg: the chart). Ctrl-C leaves the rest not run and\n"
    "still writes the reports. Example:\n"
    "  segtrain sweep --families flux,sdxl,wan --device-memory 24GiB,48GiB,80GiB --out family-sweep\n";

static const char *self_path;
static bool run_planner; /* --planner: the family sweep also runs the per-block planner at each budget */
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
    if (config_is_lenient()) argv[n++] = "--lenient";
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
    case CELL_OK:
        fprintf(stderr, "%.3f s/step, peak %.3f GiB", c->sec_median, c->peak_device / 1073741824.0);
        if (sweep_cell_noisy(c)) fprintf(stderr, " (noisy: steps took %.3f to %.3f s)", c->sec_min, c->sec_max);
        fputc('\n', stderr);
        break;
    case CELL_OOM: fprintf(stderr, "OOM (needs %.3f GiB)\n", c->peak_device / 1073741824.0); break;
    default: fprintf(stderr, "%s: %s\n", cell_status_name(c->status), c->error);
    }
}

/* An earlier column whose cell of mode m ran whole within budget b, or -1: the budget is the only key that differs
 * between the two cells and it changes no plan, so under a budget above both peaks (the plan's, which a run is
 * refused against, and the measured one, which the pool enforces) the same steps would run again. */
static int binding_nothing(const sweep_result *r, int m, int b)
{
    const size_t budget = r->budgets[b];
    for (int e = 0; e < b; e++) {
        const sweep_cell *c = &r->cells[m * r->n_budgets + e];
        if (c->status == CELL_OK && (!budget || (c->predicted_device <= budget && c->peak_device <= budget)))
            return e;
    }
    return -1;
}

static const char *budget_text(size_t budget)
{
    static char text[32];
    if (budget) snprintf(text, sizeof text, "%.2f GiB", budget / 1073741824.0);
    else snprintf(text, sizeof text, "unlimited");
    return text;
}

/* Every cell of r (modes x budgets), each in a fresh process, a progress line each; once interrupted, the cells
 * left are not run. The sweep and the family sweep's measured half both run their cells here. */
static void run_matrix(const cli_args *a, const char *config_path, sweep_result *r, int timeout, const char *cell_dir,
                       const char *indent)
{
    const int total = r->n_modes * r->n_budgets;
    for (int b = 0, k = 0; b < r->n_budgets; b++)
        for (int m = 0; m < r->n_modes; m++, k++) {
            sweep_cell *c = &r->cells[m * r->n_budgets + b];
            *c = (sweep_cell){.mode = m, .device_memory = r->budgets[b], .status = CELL_NOT_RUN, .same_plan_as = -1};
            if (interrupted) continue;
            fprintf(stderr, "%s[%d/%d] %-22s %-10s ... ", indent, k + 1, total, r->modes[m].name,
                    budget_text(r->budgets[b]));
            fflush(stderr);
            const int e = binding_nothing(r, m, b);
            if (e >= 0) {
                *c = r->cells[m * r->n_budgets + e];
                if (!c->reused_from) c->reused_from = e + 1;
                fprintf(stderr, "reused, the budget binds nothing: the %s column's run: ",
                        budget_text(r->budgets[c->reused_from - 1]));
            } else {
                run_cell(a, config_path, &r->modes[m], r->budgets[b], r->warmup, r->steps, timeout, cell_dir, k, c);
            }
            c->mode = m, c->device_memory = r->budgets[b];
            print_cell(c);
        }
}

/* The command line as it was typed (/proc/self/cmdline), arguments with spaces or quotes quoted. */
static void command_line(int argc, char **argv, char *out, size_t n)
{
    char *text = NULL;
    size_t len = 0, at = 0;
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (f) {
        text = malloc(65536);
        len = text ? fread(text, 1, 65535, f) : 0;
        fclose(f);
    }
    out[0] = 0;
    for (size_t i = 0; text && i < len && at < n; i += strlen(text + i) + 1) {
        const char *arg = text + i;
        const bool quote = !*arg || strpbrk(arg, " \t\"'$`\\|&;<>()*?[]{}!#~");
        at += (size_t)snprintf(out + at, n - at, quote ? "%s'%s'" : "%s%s", at ? " " : "", arg);
    }
    free(text);
    for (int i = 0; !len && i < argc && at < n; i++) /* no /proc: the command's own arguments */
        at += (size_t)snprintf(out + at, n - at, "%s%s", at ? " " : "segtrain ", argv[i]);
}

/* `segtrain sweep --families`: per family, the measured half (cells in fresh processes) and the predicted one. */
static int sweep_families(const cli_args *a, const char *list, const char *examples, sweep_mode *modes, int n_modes,
                          const size_t *budgets, int n_budgets, int warmup, int steps, int timeout, const char *out,
                          int argc, char **argv)
{
    family_report rep = {0};
    struct stat sb;
    st_status st = family_sweep_select(list, &rep.families, &rep.n_families);
    if (!st && (stat(examples, &sb) || !S_ISDIR(sb.st_mode)))
        st = st_fail(ST_ERR_INVALID, "--examples: %s is not a folder (SimpleTuner's example configs: run from the "
                     "repository root, or give --examples DIR)", examples);
    if (st) return cli_error("sweep");
    if (mkdir(out, 0755) && errno != EEXIST) {
        family_sweep_free(rep.families, rep.n_families);
        fprintf(stderr, "segtrain sweep: cannot create %s: %s\n", out, strerror(errno));
        return 1;
    }
    command_line(argc, argv, rep.command, sizeof rep.command);
    machine_describe(&rep.machine);
    signal(SIGINT, on_interrupt);
    fprintf(stderr, "calibrating this machine's op rates: one step of dit-s2 at batch 4 without checkpointing...\n");
    st = family_sweep_calibrate(&rep);
    if (!st) fprintf(stderr, "rates: %s\n", rep.calibration);
    int ran = 0;
    for (int i = 0; i < rep.n_families && !st; i++) {
        family_sweep *f = &rep.families[i];
        char dir[1024], cells[1100];
        snprintf(dir, sizeof dir, "%s/%s", out, f->family);
        st = family_sweep_prepare(f, examples, dir, a->sets, a->n_sets, modes, n_modes, budgets, n_budgets);
        if (st) break;
        f->measured.warmup = warmup, f->measured.steps = steps;
        if (interrupted) continue; /* its cells stay not run; the reports still come */
        if (f->skipped[0]) {
            fprintf(stderr, "family %d/%d %s: not run: %s\n", i + 1, rep.n_families, f->family, f->skipped);
            continue;
        }
        fprintf(stderr, "family %d/%d %s: predicted at %s, %s: %d dry steps\n", i + 1, rep.n_families, f->family,
                f->predicted.preset[0] ? f->predicted.preset : "?", f->shape[0] ? f->shape : "?", n_modes);
        family_sweep_predict(f, &rep.rates);
        if (run_planner) {
            fprintf(stderr, "family %d/%d %s: the per-block planner at %d budgets\n", i + 1, rep.n_families, f->family,
                    f->predicted.n_budgets - 1);
            family_sweep_plan(f, &rep.rates);
            fprintf(stderr, "family %d/%d %s: the weights' placement (block swap, an int8 base) at %d budgets\n", i + 1,
                    rep.n_families, f->family, f->predicted.n_budgets - 1);
            family_sweep_place(f, &rep.rates);
        }
        snprintf(cells, sizeof cells, "%s/cells", dir);
        if (!f->tiny_config[0]) {
            fprintf(stderr, "family %d/%d %s: measured half not run: %s\n", i + 1, rep.n_families, f->family,
                    f->measured.cells[0].error);
        } else if (!interrupted) {
            fprintf(stderr, "family %d/%d %s: measured on %s, %d cells in fresh processes\n", i + 1, rep.n_families,
                    f->family, f->measured.preset, n_modes);
            if (mkdir(cells, 0755) && errno != EEXIST) st = st_fail(ST_ERR_IO, "cannot create %s: %s", cells,
                                                                     strerror(errno));
            else run_matrix(a, f->tiny_config, &f->measured, timeout, cells, "  ");
            sweep_mark_identical_plans(&f->measured);
        }
        for (int k = 0; k < n_modes * f->measured.n_budgets; k++) ran += f->measured.cells[k].status == CELL_OK;
        for (int k = 0; k < n_modes * f->predicted.n_budgets; k++) ran += f->predicted.cells[k].status == CELL_OK;
    }
    signal(SIGINT, SIG_DFL);
    if (interrupted) fprintf(stderr, "interrupted: the cells left are not run; writing the reports\n");
    if (!st) st = family_sweep_write_reports(&rep, out);
    if (!st) printf("reports: %s/families.md, families.json, families.csv; charts: %s/FAMILY/{predicted,measured}/"
                    "sweep.svg\n", out, out);
    family_sweep_free(rep.families, rep.n_families);
    if (st) return cli_error("sweep");
    if (interrupted) return 130;
    if (!ran) fprintf(stderr, "segtrain sweep: no cell ran or was predicted (see %s/families.md)\n", out);
    return ran ? 0 : 1;
}

/* Sets self_path to this executable (every cell runs it again); 0, or 1 with a message. */
static int find_self(void)
{
    static char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "segtrain sweep: cannot find its own executable in /proc/self/exe\n");
        return 1;
    }
    self[len] = 0;
    self_path = self;
    return 0;
}

/* --modes: comma-separated; a token with ':' starts a user row, key=value tokens continue it, others are
 * standard rows. Without --modes, the standard rows. */
static st_status parse_modes(const char *mode_list, sweep_mode *modes, int *n_modes)
{
    st_status st = ST_OK;
    if (!mode_list) {
        *n_modes = sweep_standard_modes(modes, 64);
        return ST_OK;
    }
    char list[4096];
    snprintf(list, sizeof list, "%s", mode_list);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && !st; tok = strtok_r(NULL, ",", &save)) {
        sweep_mode *last = *n_modes ? &modes[*n_modes - 1] : NULL;
        if (!strchr(tok, ':') && strchr(tok, '=') && last && strcmp(last->name, "none") &&
            strlen(last->sets) + strlen(tok) + 2 < sizeof last->sets) {
            strcat(last->sets, ";");
            strcat(last->sets, tok);
        } else if (*n_modes < 64 && !strcmp(tok, "plan")) {
            modes[(*n_modes)++] = (sweep_mode){.name = "plan"}; /* the config's own keys: its plan */
        } else if (*n_modes < 64) {
            st = sweep_parse_mode(tok, &modes[(*n_modes)++]);
        }
    }
    return st;
}

/* --device-memory: comma-separated budget columns (at most 16); without it, one unlimited column. */
static st_status parse_budgets(const char *memory, size_t *budgets, int *n_budgets)
{
    st_status st = ST_OK;
    *n_budgets = 1;
    if (!memory) return ST_OK;
    char list[1024];
    snprintf(list, sizeof list, "%s", memory);
    *n_budgets = 0;
    for (char *save = NULL, *b = strtok_r(list, ",", &save); b && !st && *n_budgets < 16;
         b = strtok_r(NULL, ",", &save))
        st = parse_size(b, &budgets[(*n_budgets)++]);
    return st;
}

/* The config sweep's plan row: refused where the row asks for the config's own plan and it has none; added to
 * the default rows where the config has one. */
static st_status add_plan_row(const config *cfg, const char *config_file, bool mode_list, sweep_result *r,
                              sweep_mode *modes)
{
    bool plan_row = false;
    for (int m = 0; m < r->n_modes; m++) plan_row |= !strcmp(modes[m].name, "plan") && !modes[m].sets[0];
    const bool has_plan = config_string(cfg, "gradient_checkpointing_plan")[0];
    if (plan_row && !has_plan)
        return st_fail(ST_ERR_INVALID, "--modes: the row plan runs the config's own gradient_checkpointing_plan, and "
                       "%s has none (`segtrain advise` writes one)", config_file ? config_file : "the default config");
    if (has_plan && !mode_list && r->n_modes < 64) modes[r->n_modes++] = (sweep_mode){.name = "plan"};
    return ST_OK;
}

/* Runs r's cells on the config, writes the reports and prints the table; the exit status. */
static int measure_config(const cli_args *a, const config *cfg, const char *config_path, const char *config_file,
                          sweep_result *r, int timeout, const char *cell_dir, const char *out)
{
    snprintf(r->config, sizeof r->config, "%s", config_file ? config_file : "built-in default (dit-s2, batch 8)");
    snprintf(r->preset, sizeof r->preset, "%s", config_string(cfg, "model_preset"));
    snprintf(r->precision, sizeof r->precision, "%s", cli_precision(cfg));
    machine_describe(&r->machine);
    signal(SIGINT, on_interrupt);
    const int total = r->n_modes * r->n_budgets;
    run_matrix(a, config_path, r, timeout, cell_dir, "");
    signal(SIGINT, SIG_DFL);
    sweep_mark_identical_plans(r);
    st_status st = sweep_write_reports(r, out);
    if (!st) {
        printf("\n");
        sweep_write_markdown(r, stdout);
        printf("\nreports: %s/sweep.md, sweep.json, sweep.csv, sweep.svg\n", out);
    }
    int measured = 0, failed = 0;
    for (int k = 0; k < total; k++) {
        measured += r->cells[k].status == CELL_OK || r->cells[k].status == CELL_OOM;
        failed += r->cells[k].status == CELL_FAILED;
    }
    if (st) return cli_error("sweep");
    if (interrupted) return 130;
    if (!measured) /* the reports say why; the exit status says that the sweep measured nothing */
        fprintf(stderr, "segtrain sweep: no cell ran: %d failed, %d unsupported (see %s/sweep.json)\n", failed,
                total - failed, out);
    return measured ? 0 : 1;
}

/* The config sweep (no --families): its folders, its config (the built-in default written down when there is
 * none, so that every cell reads the same), its cells and reports. */
static int sweep_config(const cli_args *a, const char *config_file, bool mode_list, sweep_result *r,
                        sweep_mode *modes, size_t *budgets, int timeout, const char *out)
{
    char cell_dir[512], default_config[600] = "";
    snprintf(cell_dir, sizeof cell_dir, "%s/cells", out);
    const bool made_out = mkdir(out, 0755) == 0;
    if ((!made_out && errno != EEXIST) || (mkdir(cell_dir, 0755) && errno != EEXIST)) {
        fprintf(stderr, "segtrain sweep: cannot create %s: %s\n", cell_dir, strerror(errno));
        if (made_out) rmdir(out);
        return 1;
    }
    const char *config_path = config_file;
    if (!config_path) {
        snprintf(default_config, sizeof default_config, "%s/default-config.json", out);
        FILE *f = fopen(default_config, "w");
        if (f) fputs("{\"model_preset\": \"dit-s2\", \"train_batch_size\": 8}\n", f), fclose(f);
        config_path = default_config;
    }
    config *cfg = NULL;
    st_status st = cli_load_config(config_path, a, &cfg); /* validates the config once, up front */
    if (!st) st = add_plan_row(cfg, config_file, mode_list, r, modes);
    if (!st && !(r->cells = calloc((size_t)(r->n_modes * r->n_budgets), sizeof *r->cells)))
        st = st_host_oom("the sweep's %d cells", r->n_modes * r->n_budgets);
    if (st) { /* nothing was measured: what this run made goes (rmdir keeps a folder that holds anything else) */
        config_free(cfg);
        if (default_config[0]) unlink(default_config);
        rmdir(cell_dir);
        if (made_out) rmdir(out);
        return cli_error("sweep");
    }
    r->modes = modes;
    r->budgets = budgets;
    int rc = measure_config(a, cfg, config_path, config_file, r, timeout, cell_dir, out);
    free(r->cells);
    config_free(cfg);
    return rc;
}

int cmd_sweep(int argc, char **argv)
{
    const char *config_file = NULL, *mode_list = NULL, *memory = NULL, *out = "sweep-report", *families = NULL;
    const char *examples = "tests/fixtures/simpletuner";
    long long warmup = -1, steps = -1, timeout = 1800; /* -1: the defaults of the sweep asked for */
    const cli_flag flags[] = {{"--config", .text = &config_file},
                              {"--families", .text = &families},
                              {"--examples", .text = &examples},
                              {"--planner", .on = &run_planner},
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
    if (find_self()) return 1;
    if (families && config_file) {
        fprintf(stderr, "segtrain sweep: --families predicts from each family's example config and measures its tiny "
                "preset; give it without --config\n");
        return 2;
    }
    if (warmup < 0) warmup = 1;
    if (steps < 0) steps = families ? 2 : 3; /* a family's tiny cells: seconds for the whole family */
    if (families && !memory) memory = "24GiB,48GiB,80GiB";

    sweep_result r = {.warmup = (int)warmup, .steps = (int)steps};
    sweep_mode modes[64];
    size_t budgets[16] = {0};
    st_status st = parse_modes(mode_list, modes, &r.n_modes);
    if (!st) st = parse_budgets(memory, budgets, &r.n_budgets);
    if (st) return cli_error("sweep"); /* before any folder is made: a refused command leaves none */
    if (families)
        return sweep_families(&a, families, examples, modes, r.n_modes, budgets, r.n_budgets, (int)warmup, (int)steps,
                              (int)timeout, out, argc, argv);
    return sweep_config(&a, config_file, mode_list != NULL, &r, modes, budgets, (int)timeout, out);
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
