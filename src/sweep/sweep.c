/* The sweep's rows, its cells (one training run each) and the machine they ran on. */
#include "segtrain/sweep.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "segtrain/model_run.h"
#include "segtrain/objective.h"
#include "segtrain/ops.h"
#include "segtrain/plan.h"
#include "segtrain/train.h"

/* The rows' settings; their overrides are ckpt_settings_text's, every checkpointing key, so that nothing of the
 * user's own schedule leaks into a row. */
#define ROW(on, b, k, s, off) {.enabled = on, .backend = b, .interval = k, .stride = s, .offload_attention = off}
static const struct {
    const char *name;
    ckpt_settings cs;
} standard[] = {
    {"none", ROW(false, BACKEND_TORCH, 1, 1, false)},
    {"layer", ROW(true, BACKEND_TORCH, 1, 1, false)},
    {"interval2", ROW(true, BACKEND_TORCH, 2, 2, false)},
    {"seg2-stride4", ROW(true, BACKEND_TORCH, 2, 4, false)},
    {"torch-ffn", ROW(true, BACKEND_TORCH_FFN, 1, 1, false)},
    {"unsloth", ROW(true, BACKEND_UNSLOTH, 1, 1, false)},
    {"unsloth-ffn", ROW(true, BACKEND_UNSLOTH_FFN, 1, 1, false)},
    {"activation-offload", ROW(true, BACKEND_TORCH, 1, 1, true)},
    {"seg2-stride4-offload", ROW(true, BACKEND_TORCH, 2, 4, true)},
};
#undef ROW
#define N_STANDARD ((int)(sizeof standard / sizeof *standard))

static sweep_mode standard_mode(int i)
{
    sweep_mode m = {0};
    snprintf(m.name, sizeof m.name, "%s", standard[i].name);
    ckpt_settings_text(&standard[i].cs, m.sets, sizeof m.sets);
    return m;
}

int sweep_standard_modes(sweep_mode *out, int max)
{
    for (int i = 0; i < N_STANDARD && i < max; i++) out[i] = standard_mode(i);
    return N_STANDARD < max ? N_STANDARD : max;
}

/* "layer+swap4+int8-quanto": a standard row with where its weights live (docs/WEIGHTS.md): +swapN sets
 * musubi_blocks_to_swap N, any other +word the base_model_precision (the config refuses what is not built). */
static st_status parse_placed(const char *text, sweep_mode *out)
{
    const size_t row = strcspn(text, "+");
    int i = 0;
    while (i < N_STANDARD && (strlen(standard[i].name) != row || strncmp(text, standard[i].name, row))) i++;
    if (i == N_STANDARD || strlen(text) >= SWEEP_NAME_MAX)
        return st_fail(ST_ERR_INVALID, "--modes: '%s': a row with + is a standard row, then +swapN (musubi_blocks_to_swap) "
                       "or +a base_model_precision (e.g. layer+swap4+int8-quanto)", text);
    *out = standard_mode(i);
    snprintf(out->name, sizeof out->name, "%s", text);
    for (const char *w = text + row; *w == '+';) {
        const size_t len = strcspn(w + 1, "+"), at = strlen(out->sets);
        char *end = NULL;
        const long n = !strncmp(w + 1, "swap", 4) ? strtol(w + 5, &end, 10) : -1;
        if (!len || (end && (end != w + 1 + len || end == w + 5 || n < 0)))
            return st_fail(ST_ERR_INVALID, "--modes: '%s': '+%.*s' is neither +swapN nor +a base_model_precision", text,
                           (int)len, w + 1);
        if (end) snprintf(out->sets + at, sizeof out->sets - at, ";musubi_blocks_to_swap=%ld", n);
        else snprintf(out->sets + at, sizeof out->sets - at, ";base_model_precision=%.*s", (int)len, w + 1);
        w += 1 + len;
    }
    return ST_OK;
}

st_status sweep_parse_mode(const char *text, sweep_mode *out)
{
    for (int i = 0; i < N_STANDARD; i++)
        if (!strcmp(text, standard[i].name)) return *out = standard_mode(i), ST_OK;
    const char *colon = strchr(text, ':');
    if (!colon && strchr(text, '+')) return parse_placed(text, out);
    if (!colon || colon == text || (size_t)(colon - text) >= SWEEP_NAME_MAX || !colon[1] || strlen(colon + 1) >= SWEEP_TEXT_MAX)
        return st_fail(ST_ERR_INVALID,
                       "--modes: '%s' is neither a standard row (none, layer, interval2, seg2-stride4, torch-ffn, "
                       "unsloth, unsloth-ffn, activation-offload, seg2-stride4-offload; +swapN or +int8-quanto after "
                       "one) nor name:key=value,key=value",
                       text);
    *out = (sweep_mode){0};
    memcpy(out->name, text, (size_t)(colon - text));
    snprintf(out->sets, sizeof out->sets, "%s", colon + 1);
    for (char *c = out->sets; *c; c++)
        if (*c == ',') *c = ';';
    return ST_OK;
}

st_status sweep_check_mode(const sweep_mode *m)
{
    char sets[SWEEP_TEXT_MAX], key[SWEEP_TEXT_MAX];
    snprintf(sets, sizeof sets, "%s", m->sets);
    for (char *save = NULL, *kv = strtok_r(sets, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
        snprintf(key, sizeof key, "%.*s", (int)strcspn(kv, "="), kv);
        if (config_key_known(key, NULL)) continue;
        config *c = NULL; /* the config's own line for it, with its suggestion */
        st_status st = config_parse("{}", "--modes", &c);
        if (!st) st = config_set(c, kv);
        config_free(c);
        return st_fail(ST_ERR_UNSUPPORTED, "row %s: %s", m->name, st ? st_error() : "an unknown key");
    }
    return ST_OK;
}

void machine_describe(machine_info *m)
{
    *m = (machine_info){.cores = (int)sysconf(_SC_NPROCESSORS_ONLN), .threads = ops_threads()};
    snprintf(m->cpu, sizeof m->cpu, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(m->cpu, sizeof m->cpu, "%s", strchr(line, ':') + 2);
            m->cpu[strcspn(m->cpu, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    snprintf(m->blas, sizeof m->blas, "%s", ops_blas_info());
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double machine_others_running(void)
{
    /* /proc/loadavg's fourth field counts the tasks running or runnable now, this thread among them; the load
     * average itself trails by a minute (a build that just ended would read as load). The median of 5 readings
     * 2 ms apart rides over a kernel thread's blip. */
    double seen[5];
    int n = 0;
    for (int i = 0; i < 5; i++) {
        FILE *f = fopen("/proc/loadavg", "r");
        int running = 0;
        if (f && fscanf(f, "%*f %*f %*f %d/", &running) == 1 && running >= 1) seen[n++] = running - 1;
        if (f) fclose(f);
        if (i < 4) nanosleep(&(struct timespec){.tv_nsec = 2 * 1000 * 1000}, NULL);
    }
    if (!n) return -1;
    qsort(seen, (size_t)n, sizeof *seen, by_value);
    return seen[n / 2];
}

bool machine_load_note(double others, int cores, double rate1, double rate2, char *note, size_t n)
{
    note[0] = 0;
    const double lo = fmin(rate1, rate2), hi = fmax(rate1, rate2);
    const bool loaded = cores > 0 && others > 0.25 * cores, disagree = lo > 0 && hi > 1.25 * lo;
    if (!loaded && !disagree) return false;
    char why[160] = "";
    if (loaded)
        snprintf(why, sizeof why, "%.0f other process%s running on %d core%s", others, others == 1 ? "" : "es",
                 cores, cores == 1 ? "" : "s");
    if (disagree)
        snprintf(why + strlen(why), sizeof why - strlen(why), "%sGEMM rates %.1f and %.1f GFLOP/s back to back",
                 loaded ? ", " : "", rate1, rate2);
    snprintf(note, n, "the machine is busy (%s): other processes take cores the threads wait on, so speeds "
             "measured now are low and noisy", why);
    return true;
}

static void fail(sweep_cell *cell, st_status st)
{
    cell->status = st == ST_ERR_OOM || st == ST_ERR_HOST_OOM ? CELL_OOM
                   : st == ST_ERR_UNSUPPORTED                 ? CELL_UNSUPPORTED
                                                              : CELL_FAILED;
    snprintf(cell->error, sizeof cell->error, "%s", st_error());
}

/* The plan's prediction (a dry step) and text: available even when the run is refused. */
static st_status predict(const config *cfg, sweep_cell *cell, link_traffic *moved)
{
    model_run r;
    st_status st = model_run_open(cfg, false, &r);
    if (st) return st;
    const int64_t batch = config_int(cfg, "train_batch_size");
    pool_stats dev, host;
    link_traffic before;
    link_traffic_read(r.m, &before);
    ops_profile_start(); /* the dry step's work: what the cost model prices (sweep_predict_cell) */
    st = flow_step_dry(&r, batch, 1, &dev, &host);
    ops_profile_stop(&cell->work);
    *moved = link_traffic_since(r.m, &before);
    if (st) {
        model_run_close(&r);
        return st;
    }
    cell->predicted_device = dev.peak;
    cell->predicted_host = host.peak;
    block_seq *seqs;
    const int n = model_sequences(r.m, &seqs);
    size_t at = 0;
    for (int i = 0; i < n && at < sizeof cell->plan; i++) {
        char line[SWEEP_TEXT_MAX];
        seq_plan_format(model_plan(r.m, i), line, sizeof line);
        at += (size_t)snprintf(cell->plan + at, sizeof cell->plan - at, "%s%s: %s", i ? "; " : "", seqs[i].name,
                               line);
    }
    model_run_close(&r);
    return ST_OK;
}

st_status sweep_measured_config(config *cfg, int steps, const char *output_dir)
{
    char total[64];
    snprintf(total, sizeof total, "max_train_steps=%d", steps); /* steps, not the config's epochs */
    st_status st =
        config_set_all(cfg, "synthetic_data=true;checkpoint_step_interval=0;validation_steps=0;num_train_epochs=0");
    if (!st) st = config_set(cfg, total);
    if (!st && output_dir) {
        const size_t n = strlen(output_dir) + sizeof "output_dir=";
        char *out = malloc(n);
        if (!out) return st_host_oom("the setting output_dir=%s", output_dir);
        snprintf(out, n, "output_dir=%s", output_dir);
        st = config_set(cfg, out);
        free(out);
    }
    return st;
}

void sweep_predict_cell(const config *cfg, const cost_rates *rates, sweep_cell *cell)
{
    cell->status = CELL_OK;
    cell->error[0] = 0;
    const st_status st = predict(cfg, cell, &cell->moved);
    if (st) {
        fail(cell, st);
        return;
    }
    /* as advise prices a step: its ops, and the swapped weights it waits for */
    cell->sec_median = cell->sec_min = cell->sec_max = cost_predict_step(rates, &cell->work, &cell->moved);
    cell->peak_device = cell->predicted_device;
    cell->peak_host = cell->predicted_host;
}

void sweep_run_cell(const config *cfg, int warmup, int steps, sweep_cell *cell)
{
    cell->status = CELL_OK;
    cell->error[0] = 0;
    link_traffic moved;
    st_status st = predict(cfg, cell, &moved);
    trainer *t = NULL;
    if (!st) st = trainer_create(cfg, NULL, &t);
    if (st) {
        fail(cell, st);
        if (cell->status == CELL_OOM) cell->peak_device = cell->predicted_device; /* what it would need */
        return;
    }
    double *sec = calloc((size_t)steps, sizeof *sec);
    if (!sec) st = st_host_oom("the times of %d steps", steps);
    copy_engine *engine = model_copy_engine(trainer_model(t));
    for (int s = 0; s < warmup + steps && !st; s++) {
        if (s == warmup && engine) copy_engine_reset_stats(engine);
        if (s == warmup) ops_profile_start();
        train_step_info in;
        double t0 = clock_seconds();
        st = trainer_step(t, &in);
        if (st || s < warmup) continue;
        sec[s - warmup] = clock_seconds() - t0;
        if (in.peak_device > cell->peak_device) cell->peak_device = in.peak_device;
        if (in.peak_host > cell->peak_host) cell->peak_host = in.peak_host;
    }
    ops_profile_stop(&cell->work);
    for (int k = 0; k < OP_KIND_COUNT; k++) {
        cell->work.calls[k] /= steps;
        cell->work.seconds[k] /= steps, cell->work.flops[k] /= steps, cell->work.bytes[k] /= steps;
    }
    if (st) {
        fail(cell, st);
    } else {
        qsort(sec, (size_t)steps, sizeof *sec, by_value);
        cell->steps = steps;
        cell->sec_median = steps % 2 ? sec[steps / 2] : 0.5 * (sec[steps / 2 - 1] + sec[steps / 2]);
        cell->sec_min = sec[0];
        cell->sec_max = sec[steps - 1];
        if (engine) {
            copy_stats cs;
            copy_engine_stats(engine, &cs);
            cell->to_host = cs.bytes[COPY_TO_HOST] / (size_t)steps;
            cell->to_device = cs.bytes[COPY_TO_DEVICE] / (size_t)steps;
        }
    }
    free(sec);
    trainer_destroy(t);
}

void remove_scratch(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/train_log.jsonl", dir);
    remove(path);
    remove(dir);
}

st_status sweep_measure(config *cfg, int warmup, int steps, sweep_cell *cell)
{
    char tmpdir[] = "/tmp/segtrain-measure-XXXXXX";
    if (!mkdtemp(tmpdir)) return st_fail(ST_ERR_IO, "cannot create a scratch folder in /tmp");
    const st_status st = sweep_measured_config(cfg, warmup + steps, tmpdir);
    if (!st) sweep_run_cell(cfg, warmup, steps, cell);
    remove_scratch(tmpdir);
    return st;
}

char *sweep_cell_to_json(const sweep_cell *c)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "status", c->status);
    cJSON_AddStringToObject(j, "error", c->error);
    cJSON_AddNumberToObject(j, "steps", c->steps);
    cJSON_AddNumberToObject(j, "sec_median", c->sec_median);
    cJSON_AddNumberToObject(j, "sec_min", c->sec_min);
    cJSON_AddNumberToObject(j, "sec_max", c->sec_max);
    cJSON_AddNumberToObject(j, "peak_device", (double)c->peak_device);
    cJSON_AddNumberToObject(j, "peak_host", (double)c->peak_host);
    cJSON_AddNumberToObject(j, "predicted_device", (double)c->predicted_device);
    cJSON_AddNumberToObject(j, "predicted_host", (double)c->predicted_host);
    cJSON_AddNumberToObject(j, "to_host", (double)c->to_host);
    cJSON_AddNumberToObject(j, "to_device", (double)c->to_device);
    cJSON_AddStringToObject(j, "plan", c->plan);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

st_status sweep_cell_from_json(const char *text, sweep_cell *c)
{
    cJSON *j = cJSON_Parse(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return st_fail(ST_ERR_FORMAT, "a sweep cell's result is not JSON");
    }
#define NUM(key) (cJSON_IsNumber(cJSON_GetObjectItem(j, key)) ? cJSON_GetObjectItem(j, key)->valuedouble : 0)
#define STR(key, dst)                                                                                                  \
    snprintf(dst, sizeof dst, "%s", cJSON_IsString(cJSON_GetObjectItem(j, key)) ? cJSON_GetObjectItem(j, key)->valuestring : "")
    c->status = (cell_status)NUM("status");
    STR("error", c->error);
    STR("plan", c->plan);
    c->steps = (int)NUM("steps");
    c->sec_median = NUM("sec_median"), c->sec_min = NUM("sec_min"), c->sec_max = NUM("sec_max");
    c->peak_device = (size_t)NUM("peak_device"), c->peak_host = (size_t)NUM("peak_host");
    c->predicted_device = (size_t)NUM("predicted_device"), c->predicted_host = (size_t)NUM("predicted_host");
    c->to_host = (size_t)NUM("to_host"), c->to_device = (size_t)NUM("to_device");
#undef NUM
#undef STR
    cJSON_Delete(j);
    return ST_OK;
}

/* Whether two rows place the weights alike: the same musubi_blocks_to_swap and base_model_precision overrides (a
 * plan's text says only what blocks keep). */
static bool placed_alike(const sweep_mode *a, const sweep_mode *b)
{
    static const char *const keys[] = {"musubi_blocks_to_swap=", "base_model_precision="};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const char *x = strstr(a->sets, keys[k]), *y = strstr(b->sets, keys[k]);
        if (!x != !y || (x && strcspn(x, ";") != strcspn(y, ";")) || (x && strncmp(x, y, strcspn(x, ";"))))
            return false;
    }
    return true;
}

void sweep_mark_identical_plans(sweep_result *r)
{
    for (int b = 0; b < r->n_budgets; b++)
        for (int m = 0; m < r->n_modes; m++) {
            sweep_cell *c = &r->cells[m * r->n_budgets + b];
            c->same_plan_as = -1;
            for (int e = 0; e < m && c->same_plan_as < 0 && c->plan[0]; e++)
                if (!strcmp(r->cells[e * r->n_budgets + b].plan, c->plan) && placed_alike(&r->modes[e], &r->modes[m]))
                    c->same_plan_as = e;
        }
}
