/* The family sweep: SimpleTuner's matrix (a row per checkpointing mode, for every family), measured on each
 * family's tiny preset and predicted at its real preset and example config's shape. Which family reads which
 * example config, its predicted half, this machine's rates, and the reports that hold every family. */
#include "segtrain/sweep.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/model.h"
#include "segtrain/model_run.h"
#include "segtrain/train.h"

#define GIB_F (1024.0 * 1024.0 * 1024.0)

/* ---- which families ------------------------------------------------------------------------------------------ */

/* SimpleTuner's family names (segtrain's own topologies have no title), NULL past the last. */
static const char *st_family_name(int i)
{
    for (int k = 0, seen = 0; model_family_name(k); k++)
        if (model_family_about_of(model_family_name(k)).title && seen++ == i) return model_family_name(k);
    return NULL;
}

static bool family_is_built(const char *family)
{
    char flavour[SWEEP_NAME_MAX];
    return model_family_built_flavour(family, 0, flavour, sizeof flavour) != NULL;
}

static st_status unknown_family(const char *name)
{
    const char *names[256];
    char valid[4096] = "all";
    int n = 0;
    for (const char *f; n < 256 && (f = st_family_name(n)); n++) {
        names[n] = f;
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), ", %s", f);
    }
    return st_fail(ST_ERR_INVALID, "--families: \"%s\" is not a SimpleTuner family (did you mean %s?); valid: %s", name,
                   config_nearest(name, names, n), valid);
}

st_status family_sweep_select(const char *list, family_sweep **out, int *n)
{
    *out = NULL;
    *n = 0;
    int most = 1;
    for (const char *p = list; *p; p++) most += *p == ',';
    for (int i = 0; st_family_name(i); i++) most++; /* "all" */
    family_sweep *f = calloc((size_t)most, sizeof *f);
    if (!f) return st_host_oom("the list of %d families", most);
    char names[4096], *save = NULL;
    snprintf(names, sizeof names, "%s", list);
    for (char *tok = strtok_r(names, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        const bool all = !strcmp(tok, "all");
        bool known = all;
        for (int i = 0; st_family_name(i); i++) {
            const char *name = st_family_name(i);
            if (all ? !family_is_built(name) : strcmp(tok, name)) continue;
            known = true;
            bool twice = false; /* "flux,all" lists flux once */
            for (int k = 0; k < *n; k++) twice |= !strcmp(f[k].family, name);
            if (!twice && *n < most) snprintf(f[(*n)++].family, sizeof f->family, "%s", name);
        }
        if (!known) {
            free(f);
            *n = 0;
            return unknown_family(tok);
        }
    }
    if (!*n) {
        free(f);
        return st_fail(ST_ERR_INVALID, "--families: no family named; give all or a comma list (e.g. flux,sdxl,wan)");
    }
    *out = f;
    return ST_OK;
}

/* ---- one family's two halves --------------------------------------------------------------------------------- */

/* The tiny preset of the real preset's family whose name shares the longest start with the real preset's, or NULL. */
static const char *tiny_preset_of(const char *real)
{
    model_config want, mc;
    if (model_preset(real, &want)) return NULL;
    const char *best = NULL;
    size_t best_len = 0;
    for (int i = 0; model_preset_name(i); i++) {
        const char *p = model_preset_name(i);
        if (!strstr(p, "tiny") || model_preset(p, &mc) || strcmp(mc.family, want.family)) continue;
        size_t k = 0;
        while (p[k] && p[k] == real[k]) k++;
        if (!best || k > best_len) best = p, best_len = k;
    }
    return best;
}

static void shape_text(const model_config *mc, int64_t batch, char *buf, size_t n)
{
    char px[48];
    const char *precision = mc->bf16_activations ? "bf16" : "float32";
    model_pixels(mc, px, sizeof px);
    if (model_audio(mc)) snprintf(buf, n, "a clip of %lld latent frames, batch %lld, %s", (long long)mc->frames,
                                  (long long)batch, precision);
    else if (model_tokens(mc))
        snprintf(buf, n, "%lld rows of audio tokens, batch %lld, %s", (long long)mc->frames, (long long)batch, precision);
    else if (model_video(mc))
        snprintf(buf, n, "%lld-frame %s px video, batch %lld, %s", (long long)model_pixel_frames(mc), px,
                 (long long)batch, precision);
    else snprintf(buf, n, "%s px images, batch %lld, %s", px, (long long)batch, precision);
}

/* Every cell of a half the same: not run (to be filled), or what stops the whole half. */
static void fill_half(sweep_result *r, cell_status status, const char *why)
{
    for (int m = 0; m < r->n_modes; m++)
        for (int b = 0; b < r->n_budgets; b++)
            r->cells[m * r->n_budgets + b] = (sweep_cell){.mode = m, .device_memory = r->budgets[b], .status = status,
                                                          .same_plan_as = -1};
    for (int k = 0; why && k < r->n_modes * r->n_budgets; k++)
        snprintf(r->cells[k].error, sizeof r->cells[k].error, "%s", why);
}

static st_status size_half(sweep_result *r, const sweep_mode *modes, int n_modes, const size_t *budgets, int n_budgets)
{
    r->modes = (sweep_mode *)modes;
    r->n_modes = n_modes;
    r->budgets = calloc((size_t)n_budgets + 1, sizeof *r->budgets);
    r->cells = calloc((size_t)(n_modes * (n_budgets + 1)), sizeof *r->cells);
    if (!r->budgets || !r->cells) return st_host_oom("the cells of a family's sweep");
    r->n_budgets = 1; /* unlimited first: every mode's own numbers, whatever the budgets */
    for (int b = 0; b < n_budgets; b++)
        if (budgets[b]) r->budgets[r->n_budgets++] = budgets[b];
    fill_half(r, CELL_NOT_RUN, NULL);
    return ST_OK;
}

/* What an example may ask that segtrain refuses, and what the family sweep predicts instead (said in the report):
 * the refusal's words, the override, and the note. */
static const struct {
    const char *refused, *with, *note;
} stand_ins[] = {
    {"base_model_precision", NULL, "with its base quantized as %s, the nearest built to its base_model_precision"},
    {"ramtorch", "ramtorch=false", "with its weights on the device (its ramtorch is refused)"},
};
#define N_STAND_INS (int)(sizeof stand_ins / sizeof *stand_ins)

/* An example's lycoris_config is a path from SimpleTuner's root, which the examples folder mirrors: read there when
 * it is not a file from here. */
static st_status example_paths(const char *examples, config *c)
{
    const char *rel = config_string(c, "lycoris_config");
    char there[SWEEP_TEXT_MAX + 32];
    if (!*rel || rel[0] == '/' || !access(rel, R_OK)) return ST_OK;
    snprintf(there, sizeof there, "lycoris_config=%s/%s", examples, rel);
    return access(strchr(there, '=') + 1, R_OK) ? ST_OK : config_set(c, there);
}

/* "base_model_precision=<the nearest built>" from a refusal of an unbuilt value (config/keys.c says it last),
 * "base_model_precision=no_change" if it names none. */
static const char *nearest_precision(const char *refusal, char *buf, size_t n)
{
    const char *at = strstr(refusal, "the nearest built is ");
    snprintf(buf, n, "base_model_precision=%.*s", at ? (int)strcspn(at + 21, " ;,)") : 9, at ? at + 21 : "no_change");
    return buf;
}

/* The example, with the overrides in with (room for N_STAND_INS more), read as a model: each refusal a stand-in
 * answers is taken once in its stead, in the order they come. */
static st_status load_example(family_sweep *f, const char *examples, const char *path, const char **with, int n,
                              config **out)
{
    bool taken[N_STAND_INS] = {0};
    char nearest[64];
    for (;;) {
        st_status st = config_load_with(path, with, n, out, NULL);
        if (!st) st = example_paths(examples, *out);
        model_config mc;
        if (!st) st = model_config_from(*out, &mc);
        if (!st) return ST_OK;
        config_free(*out);
        *out = NULL;
        int k = 0;
        while (k < N_STAND_INS && (taken[k] || !strstr(st_error(), stand_ins[k].refused))) k++;
        if (k == N_STAND_INS) return st;
        taken[k] = true;
        with[n++] = stand_ins[k].with ? stand_ins[k].with : nearest_precision(st_error(), nearest, sizeof nearest);
        const size_t at = strlen(f->note);
        snprintf(f->note + at, sizeof f->note - at, "%spredicted ", at ? "; " : "");
        snprintf(f->note + strlen(f->note), sizeof f->note - strlen(f->note), stand_ins[k].note,
                 strchr(with[n - 1], '=') + 1);
    }
}

/* The real config: the family's example as it is, or (without one) the family and flavour alone at batch 1, written
 * into dir so that the report names a file that plans the same. */
static st_status load_real(family_sweep *f, const char *examples, const char *dir, const char *const *sets,
                           int n_sets, config **out)
{
    const model_family_about about = model_family_about_of(f->family);
    char path[SWEEP_TEXT_MAX];
    size_t at = strlen(f->note); /* after what prepare said of the flavour */
    if (about.example) {
        snprintf(path, sizeof path, "%s/%s", examples, about.example);
        if (!access(path, R_OK)) {
            snprintf(f->example, sizeof f->example, "%s", path);
            /* the --set overrides after the example's own: its users' bucket, said in the report */
            const char *with[CONFIG_MAX_SETS];
            char bucket[80];
            int n = 0;
            if (n_sets + 1 + N_STAND_INS > CONFIG_MAX_SETS)
                return st_fail(ST_ERR_INVALID, "--set: more than %d overrides", n_sets);
            if (about.shape) {
                snprintf(bucket, sizeof bucket, "bucket_shapes=%s", about.shape);
                with[n++] = bucket;
                snprintf(f->note + at, sizeof f->note - at, "predicted at its users' bucket %s", about.shape);
            }
            for (int i = 0; i < n_sets; i++) with[n++] = sets[i];
            st_status st = load_example(f, examples, path, with, n, out);
            if (!st && !config_is_set(*out, "mixed_precision")) { /* as SimpleTuner trains it */
                st = config_set(*out, "mixed_precision=" SIMPLETUNER_MIXED_PRECISION);
                at = strlen(f->note);
                snprintf(f->note + at, sizeof f->note - at, "%sin SimpleTuner's default mixed_precision %s (the "
                         "example sets none)", at > 0 ? "; " : "", SIMPLETUNER_MIXED_PRECISION);
            }
            return st;
        }
        snprintf(f->note + at, sizeof f->note - at, "its example %s is not in %s: ", about.example, examples);
    } else {
        snprintf(f->note + at, sizeof f->note - at, "no SimpleTuner example config is at hand: ");
    }
    snprintf(path, sizeof path, "%s/real-config.json", dir);
    FILE *cf = fopen(path, "w");
    if (!cf) return st_fail(ST_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    fprintf(cf, "{\"model_family\": \"%s\", \"model_flavour\": \"%s\", \"train_batch_size\": 1, "
            "\"mixed_precision\": \"%s\"}\n", f->family, f->flavour, SIMPLETUNER_MIXED_PRECISION);
    fclose(cf);
    const st_status st = config_load_with(path, sets, n_sets, out, NULL);
    const bool ours = !st && !strcmp(config_string(*out, "mixed_precision"), SIMPLETUNER_MIXED_PRECISION);
    at = strlen(f->note);
    snprintf(f->note + at, sizeof f->note - at, "predicted at %s%s's preset at its own resolution, batch 1, full "
             "training (segtrain's default model_type; the examples train LoRA)%s (%s)",
             f->flavour[0] ? "flavour " : "the default flavour", f->flavour,
             ours ? ", in SimpleTuner's default mixed_precision " SIMPLETUNER_MIXED_PRECISION : "", path);
    return st;
}

st_status family_sweep_prepare(family_sweep *f, const char *examples, const char *dir, const char *const *sets,
                               int n_sets, const sweep_mode *modes, int n_modes, const size_t *budgets, int n_budgets)
{
    static const size_t unlimited = 0;
    st_status st = size_half(&f->measured, modes, n_modes, &unlimited, 1);
    if (!st) st = size_half(&f->predicted, modes, n_modes, budgets, n_budgets);
    if (st) return st;
    f->predicted.predicted = true;
    if (mkdir(dir, 0755) && errno != EEXIST) return st_fail(ST_ERR_IO, "cannot create %s: %s", dir, strerror(errno));

    /* the flavour: the default one where it is built, else the first built (the report says so) */
    const st_status check = model_family_check(f->family, "");
    if (check) {
        const bool invalid = check == ST_ERR_INVALID;
        snprintf(f->skipped, sizeof f->skipped, "%s", st_error());
        if (invalid || !model_family_built_flavour(f->family, 0, f->flavour, sizeof f->flavour)) {
            fill_half(&f->measured, CELL_UNSUPPORTED, f->skipped);
            fill_half(&f->predicted, CELL_UNSUPPORTED, f->skipped);
            return ST_OK;
        }
        snprintf(f->note, sizeof f->note, "its default flavour is not built, so flavour %s; ", f->flavour);
        f->skipped[0] = 0;
    }
    const size_t noted = strlen(f->note);
    config *real = NULL;
    model_config mc;
    st = load_real(f, examples, dir, sets, n_sets, &real);
    if (!st) st = model_config_from(real, &mc);
    if (st) { /* the example itself refused: a finding for the report, not a reason to stop the sweep */
        fill_half(&f->predicted, st == ST_ERR_UNSUPPORTED ? CELL_UNSUPPORTED : CELL_FAILED, st_error());
        config_free(real);
        real = NULL;
    } else {
        if (f->example[0] && *config_string(real, "model_flavour"))
            snprintf(f->flavour, sizeof f->flavour, "%s", config_string(real, "model_flavour"));
        shape_text(&mc, config_int(real, "train_batch_size"), f->shape, sizeof f->shape);
        snprintf(f->predicted.preset, sizeof f->predicted.preset, "%s", mc.preset);
        snprintf(f->predicted.config, sizeof f->predicted.config, "%s", f->example[0] ? f->example : "no example");
        snprintf(f->predicted.precision, sizeof f->predicted.precision, "%s", mc.bf16_activations ? "bf16" : "float32");
    }
    if (f->note[0] && strlen(f->note) == noted) /* only the flavour's part: end its sentence */
        snprintf(f->note + noted, sizeof f->note - noted, "predicted from %s", f->example[0] ? f->example : "it");
    f->real = real;

    /* the measured half: the tiny preset of the family, in a config file the cells read */
    char real_preset[SWEEP_NAME_MAX];
    const char *tiny = model_family_about_of(f->family).tiny;
    if (!tiny && model_family_preset(f->family, f->flavour, real_preset, sizeof real_preset))
        tiny = tiny_preset_of(real_preset);
    if (!tiny) {
        fill_half(&f->measured, CELL_UNSUPPORTED, "no tiny preset of this family to measure");
        return ST_OK;
    }
    snprintf(f->measured.preset, sizeof f->measured.preset, "%s", tiny);
    snprintf(f->tiny_config, sizeof f->tiny_config, "%s/tiny-config.json", dir);
    snprintf(f->measured.config, sizeof f->measured.config, "%s", f->tiny_config);
    FILE *cf = fopen(f->tiny_config, "w");
    if (!cf) return st_fail(ST_ERR_IO, "cannot write %s: %s", f->tiny_config, strerror(errno));
    /* in the predicted half's precision, so that a family's row is one precision */
    fprintf(cf, "{\"model_family\": \"%s\", \"model_flavour\": \"%s\", \"model_preset\": \"%s\", "
            "\"mixed_precision\": \"%s\"}\n", f->family, f->flavour, tiny,
            real ? config_string(real, "mixed_precision") : SIMPLETUNER_MIXED_PRECISION);
    fclose(cf);
    config *c = NULL; /* checked once here: a config every cell would refuse is one line, not nine failures */
    st = config_load_with(f->tiny_config, sets, n_sets, &c, NULL);
    if (!st) st = model_config_from(c, &mc);
    config_free(c);
    if (!st) snprintf(f->measured.precision, sizeof f->measured.precision, "%s", mc.bf16_activations ? "bf16" : "float32");
    if (st) {
        fill_half(&f->measured, st == ST_ERR_UNSUPPORTED ? CELL_UNSUPPORTED : CELL_FAILED, st_error());
        f->tiny_config[0] = 0;
    }
    return ST_OK;
}

void family_sweep_predict(family_sweep *f, const cost_rates *rates)
{
    sweep_result *r = &f->predicted;
    for (int m = 0; f->real && m < r->n_modes; m++) {
        sweep_cell cell = {.mode = m, .same_plan_as = -1};
        config *c = NULL;
        st_status st = sweep_check_mode(&r->modes[m]); /* a key segtrain does not have: unsupported, as in sweep */
        if (!st) st = (c = config_copy(f->real)) ? config_set_all(c, r->modes[m].sets) : st_host_oom("a config");
        if (st) {
            cell.status = st == ST_ERR_UNSUPPORTED ? CELL_UNSUPPORTED : CELL_FAILED;
            snprintf(cell.error, sizeof cell.error, "%s", st_error());
        } else {
            sweep_predict_cell(c, rates, &cell);
        }
        config_free(c);
        for (int b = 0; b < r->n_budgets; b++) { /* one prediction; each budget column fits it or not */
            sweep_cell *at = &r->cells[m * r->n_budgets + b];
            *at = cell;
            at->device_memory = r->budgets[b];
            if (at->status != CELL_OK || !at->device_memory || at->peak_device <= at->device_memory) continue;
            char need[40], have[40];
            sweep_size_text(need, sizeof need, at->peak_device);
            sweep_size_text(have, sizeof have, at->device_memory);
            at->status = CELL_OOM;
            snprintf(at->error, sizeof at->error, "predicted peak %s exceeds device_memory %s", need, have);
        }
    }
    sweep_mark_identical_plans(r);
}

static int fastest_fitting(const sweep_result *r, int b);

void family_sweep_plan(family_sweep *f, const cost_rates *rates)
{
    const sweep_result *p = &f->predicted;
    model_run r;
    if (!f->real || model_run_open(f->real, false, &r)) return;
    const int64_t batch = config_int(f->real, "train_batch_size");
    for (int b = 1; b < p->n_budgets && b < FAMILY_BUDGETS_MAX; b++) {
        struct family_plan *out = &f->planned[b];
        const int m = fastest_fitting(p, b);
        schedule seed = {0}, plan;
        config *c = m >= 0 ? config_copy(f->real) : NULL;
        bool seeded = c && !config_set_all(c, p->modes[m].sets) && !ckpt_settings_from(c, &seed.cs);
        config_free(c);
        seed.fits = seeded;
        out->run = true;
        if (plan_blocks(&r, batch, 1, rates, p->budgets[b], seeded ? &seed : NULL, NULL, &plan, &out->found))
            out->found = false;
        if (!out->found) continue;
        out->sec = plan.sec, out->peak = plan.peak_device;
        snprintf(out->plan, sizeof out->plan, "%s", plan.cs.plan);
    }
    model_run_close(&r);
}

typedef struct placing {
    const config *real;
    const char *base; /* the base's override ("base_model_precision=int8-quanto"), "" as configured */
} placing;

static config *placing_config(void *ctx, const char *sets)
{
    const placing *p = ctx;
    config *c = config_copy(p->real);
    if (c && !config_set_all(c, p->base) && !config_set_all(c, sets)) return c;
    config_free(c);
    return NULL;
}

void family_sweep_place(family_sweep *f, const cost_rates *rates)
{
    model_config mc;
    if (!f->real || model_config_from(f->real, &mc)) return;
    /* a quantized base where the run trains adapters over an unquantized one (full training quantizes nothing) */
    const char *bases[] = {"", mc.lora_rank && mc.quant_base == QUANT_NONE ? "base_model_precision=int8-quanto" : NULL};
    for (int b = 1; b < f->predicted.n_budgets && b < FAMILY_BUDGETS_MAX; b++) {
        struct family_place *out = &f->placed[b];
        out->run = true;
        for (int k = 0; k < 2 && bases[k]; k++) {
            placing ctx = {f->real, bases[k]};
            advice a;
            if (advise_placement(placing_config, &ctx, f->predicted.budgets[b], rates, &a)) continue;
            const placement *p = advice_placement(&a);
            if (!p || (!k && !a.placed && !p->group_blocks) || (out->found && p->sec >= out->sec))
                continue; /* the modes' own; the fewer changes */
            *out = (struct family_place){.run = true, .found = true, .quantized = k, .blocks = a.placed,
                                         .group_blocks = p->group_blocks, .group_stream = p->stream,
                                         .sec = p->sec, .peak = p->peak_device};
            snprintf(out->how, sizeof out->how, "%s%s", k ? "int8-quanto base, " : "", p->name);
        }
    }
}

void family_sweep_free(family_sweep *f, int n)
{
    for (int i = 0; f && i < n; i++) {
        free(f[i].measured.budgets), free(f[i].measured.cells);
        free(f[i].predicted.budgets), free(f[i].predicted.cells);
        config_free(f[i].real);
    }
    free(f);
}

/* ---- this machine's rates ------------------------------------------------------------------------------------ */

st_status family_sweep_calibrate(family_report *rep)
{
    /* DiT-S/2 at batch 4: GEMMs at the shape selfcheck rates, in a real step's mix of forward and backward */
    static const char calibration[] = "{\"model_preset\": \"dit-s2\", \"train_batch_size\": 4}";
    sweep_mode none;
    sweep_parse_mode("none", &none);
    config *cfg = NULL;
    st_status st = config_parse(calibration, "the calibration", &cfg);
    if (!st) st = config_set_all(cfg, none.sets);
    sweep_cell cell = {0};
    if (!st) st = sweep_measure(cfg, 1, 1, &cell);
    config_free(cfg);
    if (st) return st;
    if (cell.status != CELL_OK) return st_fail(ST_ERR_INTERNAL, "calibrating with dit-s2: %s", cell.error);
    rep->rates = cost_calibrate(&cell.work, cell.sec_median);
    snprintf(rep->calibration, sizeof rep->calibration,
             "one real step of dit-s2 at batch 4 without checkpointing, after one warm-up: %.3f s, of which %.3f s "
             "outside the four kinds of op (the optimizer, bookkeeping) is left out of every prediction, as are "
             "attention offload's copies (taken as hidden behind compute)", cell.sec_median, rep->rates.fixed);
    rep->rates.fixed = 0; /* dit-s2's optimizer and bookkeeping say nothing of another model's */
    double link; /* what the swapped blocks' weights cost a step (block swap waits for them) */
    if ((st = link_bandwidth_measure(&link))) return st;
    rep->rates.link_per_byte = 1 / link;
    return ST_OK;
}

/* A rate as the report prints it: GFLOP/s for GEMMs and attention, GB/s for the memory-bound kinds. */
static double rate_of(const cost_rates *r, op_kind k)
{
    return r->per_unit[k] > 0 ? 1e-9 / r->per_unit[k] : 0;
}

/* ---- the reports --------------------------------------------------------------------------------------------- */

/* The mode of column b predicted fastest among those that fit (ties: the smaller peak), or -1. */
static int fastest_fitting(const sweep_result *r, int b)
{
    int best = -1;
    for (int m = 0; m < r->n_modes; m++) {
        const sweep_cell *c = &r->cells[m * r->n_budgets + b];
        const sweep_cell *o = best >= 0 ? &r->cells[best * r->n_budgets + b] : NULL;
        if (c->status != CELL_OK) continue;
        if (!o || c->sec_median < o->sec_median || (c->sec_median == o->sec_median && c->peak_device < o->peak_device))
            best = m;
    }
    return best;
}

/* The mode whose predicted peak is the smallest (whatever the budgets), or -1. */
static int smallest_need(const sweep_result *r)
{
    int best = -1;
    for (int m = 0; m < r->n_modes; m++) {
        const sweep_cell *c = &r->cells[m * r->n_budgets];
        if ((c->status == CELL_OK || c->status == CELL_OOM) && c->peak_device &&
            (best < 0 || c->peak_device < r->cells[best * r->n_budgets].peak_device))
            best = m;
    }
    return best;
}

/* "; per-block plan 2101 s / 46.2 GiB (-12.8 %)" after the fastest mode, or "" when the planner did not run. */
static void plan_text(const family_sweep *fs, int b, char *buf, size_t n)
{
    const struct family_plan *pl = b < FAMILY_BUDGETS_MAX ? &fs->planned[b] : NULL;
    buf[0] = 0;
    if (!pl || !pl->run) return;
    if (!pl->found) {
        snprintf(buf, n, "; no per-block plan fits");
        return;
    }
    const int m = fastest_fitting(&fs->predicted, b);
    const double base = m >= 0 ? fs->predicted.cells[m * fs->predicted.n_budgets + b].sec_median : 0;
    char size[40], against[48] = "";
    sweep_size_text(size, sizeof size, pl->peak);
    if (base > 0) snprintf(against, sizeof against, " (%+.1f %%)", 100 * (pl->sec - base) / base);
    snprintf(buf, n, pl->sec >= 100 ? "; per-block plan %.0f s / %s%s" : "; per-block plan %.3g s / %s%s", pl->sec,
             size, against);
}

/* "; with the weights placed: swap 6 blocks + unsloth interval 1 (2410 s / 46.9 GiB)" where block swap, group
 * offload or an int8 base fits a budget no mode fits, or fits it faster; "" otherwise, or when the placement did not run. */
static void place_text(const family_sweep *fs, int b, char *buf, size_t n)
{
    const struct family_place *pl = b < FAMILY_BUDGETS_MAX ? &fs->placed[b] : NULL;
    const int m = fastest_fitting(&fs->predicted, b);
    buf[0] = 0;
    if (!pl || !pl->run) return;
    if (!pl->found) {
        if (m < 0) snprintf(buf, n, "; nor with block swap, group offload or an int8 base");
        return;
    }
    if (m >= 0 && pl->sec >= fs->predicted.cells[m * fs->predicted.n_budgets + b].sec_median) return;
    char size[40];
    sweep_size_text(size, sizeof size, pl->peak);
    snprintf(buf, n, pl->sec >= 100 ? "; with the weights placed: %s (%.0f s / %s)" : "; with the weights placed: %s "
             "(%.3g s / %s)", pl->how, pl->sec, size);
}

/* "unsloth (2410 s / 46.9 GiB)" or "nothing fits (the smallest need: 46.9 GiB, unsloth)". */
static void fastest_text(const sweep_result *r, int b, char *buf, size_t n)
{
    const int m = fastest_fitting(r, b), s = smallest_need(r);
    char size[40];
    if (m >= 0) {
        char cell[SWEEP_NAME_MAX];
        sweep_cell_text(&r->cells[m * r->n_budgets + b], cell, sizeof cell);
        snprintf(buf, n, "%s (%s)", r->modes[m].name, cell);
    } else if (s >= 0) {
        sweep_size_text(size, sizeof size, r->cells[s * r->n_budgets].peak_device);
        snprintf(buf, n, "nothing fits (the smallest need: %s, %s)", size, r->modes[s].name);
    } else {
        snprintf(buf, n, "nothing was predicted");
    }
}

static void md_rates(const family_report *rep, FILE *f)
{
    const cost_rates *r = &rep->rates;
    fprintf(f, "Rates of this machine (the cost model's, advise.h): GEMM %.1f GFLOP/s, attention %.1f GFLOP/s, "
               "normalization %.2f GB/s, elementwise %.2f GB/s; measured by %s. The host-device link: %.2f GB/s "
               "(64 MiB copies from the host pool to the device pool; on a CPU, a memcpy), at which the swapped "
               "blocks' weights are priced (block swap waits for them).\n\n",
            rate_of(r, OP_GEMM), rate_of(r, OP_ATTENTION), rate_of(r, OP_NORM), rate_of(r, OP_POINTWISE),
            rep->calibration, r->link_per_byte > 0 ? 1e-9 / r->link_per_byte : 0);
}

/* Each family's fastest mode on each built-in GPU: the modes whose peak fits its memory, priced at its profile's
 * rates (their ranking there may differ from this CPU's). */
static void md_gpus(const family_report *rep, FILE *f)
{
    const gpu_profile *g;
    const int n = gpu_profiles_builtin(&g);
    fprintf(f, "## Predicted on a GPU\n\nEach family's fastest mode that fits the GPU's memory, and its seconds a "
               "step there: **predictions, not measurements**. The same dry steps, priced at each GPU's published "
               "dense peaks and bandwidths times the fraction each kind of op is assumed to reach on segtrain's CUDA "
               "backend (float32 GEMMs and attention; `segtrain plan --gpu` and docs/BENCHMARKS.md, \"Seconds on a "
               "named GPU\", give the figures). Offload's copies are taken as hidden; swapped weights cross PCIe.\n\n"
               "| family |");
    for (int i = 0; i < n; i++) fprintf(f, " %s |", g[i].name);
    fprintf(f, "\n|---|");
    for (int i = 0; i < n; i++) fprintf(f, "---|");
    fputc('\n', f);
    for (int k = 0; k < rep->n_families; k++) {
        const sweep_result *p = &rep->families[k].predicted;
        if (!rep->families[k].real) continue;
        fprintf(f, "| %s |", rep->families[k].family);
        for (int i = 0; i < n; i++) {
            const cost_rates rates = gpu_profile_rates(&g[i]);
            int best = -1;
            double sec = 0;
            size_t least = 0;
            for (int m = 0; m < p->n_modes; m++) {
                const sweep_cell *c = &p->cells[m * p->n_budgets];
                if (c->status != CELL_OK) continue;
                if (!least || c->peak_device < least) least = c->peak_device;
                const double s = cost_predict_step(&rates, &c->work, &c->moved);
                if (c->peak_device <= (size_t)g[i].memory_bytes && (best < 0 || s < sec)) best = m, sec = s;
            }
            char size[40];
            sweep_size_text(size, sizeof size, least);
            if (best >= 0) fprintf(f, sec >= 100 ? " %s %.0f s |" : " %s %.3g s |", p->modes[best].name, sec);
            else fprintf(f, least ? " OOM (needs %s) |" : " - |", size);
        }
        fputc('\n', f);
    }
    fputc('\n', f);
}

static bool refused(const sweep_cell *c) { return c->status == CELL_UNSUPPORTED || c->status == CELL_FAILED; }

/* What the family refuses or failed at, once per mode (and once for both halves where they say the same). */
static void md_refusals(const family_sweep *fs, FILE *f)
{
    const sweep_result *p = &fs->predicted, *m = &fs->measured;
    bool any = false;
    for (int k = 0; k < p->n_modes; k++) {
        const sweep_cell *pc = &p->cells[k * p->n_budgets], *mc = &m->cells[k * m->n_budgets];
        const bool same = refused(pc) && refused(mc) && pc->status == mc->status && !strcmp(pc->error, mc->error);
        for (int h = 0; h < 2; h++) {
            const sweep_cell *c = h ? mc : pc;
            if (!refused(c) || (h && same)) continue;
            if (!any) fprintf(f, "Refused or failed, and why:\n\n");
            any = true;
            fprintf(f, "- %s (%s): %s: %s\n", p->modes[k].name, same ? "both halves" : h ? "measured" : "predicted",
                    cell_status_name(c->status), c->error[0] ? c->error : "(no reason recorded)");
        }
    }
    if (any) fputc('\n', f);
}

static bool any_same_plan(const sweep_result *r)
{
    for (int k = 0; k < r->n_modes * r->n_budgets; k++)
        if (r->cells[k].same_plan_as >= 0) return true;
    return false;
}

static void md_family(const family_report *rep, const family_sweep *fs, FILE *f)
{
    const char *title = model_family_about_of(fs->family).title;
    fprintf(f, "## %s (%s)\n\n", fs->family, title ? title : "?");
    if (fs->skipped[0]) {
        fprintf(f, "Not run: %s\n\n", fs->skipped);
        return;
    }
    if (fs->note[0]) fprintf(f, "Note: %s.\n\n", fs->note);
    const sweep_result *p = &fs->predicted, *m = &fs->measured;
    fprintf(f, "**Predicted** at %s, %s (%s):\n\n", p->preset[0] ? p->preset : "?", fs->shape[0] ? fs->shape : "?",
            fs->example[0] ? fs->example : "no example config");
    sweep_write_markdown_table(p, f);
    fputc('\n', f);
    for (int b = 1; b < p->n_budgets; b++) {
        char size[40], text[SWEEP_TEXT_MAX];
        sweep_size_text(size, sizeof size, p->budgets[b]);
        fastest_text(p, b, text, sizeof text);
        fprintf(f, "- Fastest that fits %s: %s\n", size, text);
        const struct family_plan *pl = b < FAMILY_BUDGETS_MAX ? &fs->planned[b] : NULL;
        if (pl && pl->found) {
            plan_text(fs, b, text, sizeof text);
            fprintf(f, "  - %s: `%s`\n", text + 2, pl->plan);
        } else if (pl && pl->run) {
            fprintf(f, "  - no per-block plan fits\n");
        }
        place_text(fs, b, text, sizeof text);
        if (text[0]) fprintf(f, "  - %s\n", text + 2);
    }
    fprintf(f, "\n**Measured** on %s%s%s (%d warm-up + %d measured steps a cell, each in a fresh process):\n\n",
            m->preset[0] ? m->preset : "?", m->precision[0] ? " in " : "", m->precision, m->warmup, m->steps);
    sweep_write_markdown_table(m, f);
    fputc('\n', f);
    md_refusals(fs, f);
    if (any_same_plan(p) || any_same_plan(m))
        fprintf(f, "Rows marked \"same plan as\" plan exactly as that row here: identical numbers usually mean the "
                   "option was not applied (for this family, it changes nothing).\n\n");
    fprintf(f, "Charts: %s/predicted/sweep.svg, %s/measured/sweep.svg\n\n", fs->family, fs->family);
}

static st_status write_md(const void *ctx, FILE *f)
{
    const family_report *rep = ctx;
    const machine_info *mi = &rep->machine;
    fprintf(f, "# segtrain family sweep\n\nCommand: `%s`\n\n", rep->command);
    fprintf(f, "Machine: %s, %d cores, %d threads, BLAS: %s.\n\n", mi->cpu, mi->cores, mi->threads, mi->blas);
    md_rates(rep, f);
    fprintf(f, "**Predicted** cells: each family at its real preset and its SimpleTuner example config's shape, one "
               "dry step a mode (nothing is allocated): the peak device memory is exact for this engine, the seconds a "
               "step are the cost model's at the rates above, predicted on this CPU. A budget column a mode does not "
               "fit reads OOM with what it needs; the unlimited column is every mode's own numbers.\n\n"
               "**Measured** cells: each family's tiny preset, every mode in a fresh process: the times are "
               "milliseconds of a toy model, to show that each mode runs and what it refuses, not what the real "
               "model takes. PyTorch's side, the same families' diffusers classes trained on the same weights: "
               "docs/BENCHMARKS.md, \"segtrain against diffusers, family by family\" (bench/vs_diffusers.py).\n\n"
               "**Precision**: each family in its example's `mixed_precision` (SimpleTuner's default, `%s`, where the "
               "example sets none or there is no example), both halves, as each row says (bf16: docs/PRECISION.md; "
               "float32: `no`); `--mixed_precision no|bf16` sets every family's.\n\n", SIMPLETUNER_MIXED_PRECISION);
    if (rep->n_families && rep->families[0].predicted.n_budgets > 1) {
        const sweep_result *p0 = &rep->families[0].predicted;
        fprintf(f, "## Fastest predicted schedule that fits\n\n| family |");
        for (int b = 1; b < p0->n_budgets; b++) {
            char size[40];
            sweep_size_text(size, sizeof size, p0->budgets[b]);
            fprintf(f, " %s |", size);
        }
        fprintf(f, "\n|---|");
        for (int b = 1; b < p0->n_budgets; b++) fprintf(f, "---|");
        fputc('\n', f);
        for (int i = 0; i < rep->n_families; i++) {
            const family_sweep *fs = &rep->families[i];
            if (fs->predicted.preset[0]) fprintf(f, "| %s (%s, %s) |", fs->family, fs->predicted.preset, fs->shape);
            else fprintf(f, "| %s |", fs->family);
            for (int b = 1; b < p0->n_budgets; b++) {
                char text[SWEEP_TEXT_MAX];
                char planned[96];
                if (fs->skipped[0]) snprintf(text, sizeof text, "not run");
                else fastest_text(&fs->predicted, b, text, sizeof text);
                char placed[SWEEP_NAME_MAX + 192];
                plan_text(fs, b, planned, sizeof planned);
                place_text(fs, b, placed, sizeof placed);
                fprintf(f, " %s%s%s |", text, planned, placed);
            }
            fputc('\n', f);
        }
        fputc('\n', f);
    }
    md_gpus(rep, f);
    for (int i = 0; i < rep->n_families; i++) md_family(rep, &rep->families[i], f);
    return ST_OK;
}

static cJSON *family_json(const family_sweep *fs, const machine_info *mi)
{
    cJSON *o = cJSON_CreateObject();
    sweep_result m = fs->measured, p = fs->predicted;
    m.machine = p.machine = *mi;
    const char *title = model_family_about_of(fs->family).title;
    bool ok = o && cJSON_AddStringToObject(o, "family", fs->family) &&
              cJSON_AddStringToObject(o, "title", title ? title : "") &&
              cJSON_AddStringToObject(o, "flavour", fs->flavour) &&
              (fs->skipped[0] ? cJSON_AddStringToObject(o, "skipped", fs->skipped)
                              : cJSON_AddNullToObject(o, "skipped")) &&
              cJSON_AddStringToObject(o, "note", fs->note) && cJSON_AddStringToObject(o, "example", fs->example) &&
              cJSON_AddStringToObject(o, "shape", fs->shape) &&
              cJSON_AddStringToObject(o, "precision", fs->predicted.precision);
    for (int h = 0; ok && h < 2; h++) {
        cJSON *half = sweep_result_json(h ? &p : &m);
        ok = half && cJSON_AddItemToObject(o, h ? "predicted" : "measured", half);
        if (!ok) cJSON_Delete(half);
    }
    cJSON *fastest = ok ? cJSON_AddArrayToObject(o, "fastest_that_fits") : NULL;
    ok = ok && fastest;
    for (int b = 1; ok && b < p.n_budgets; b++) {
        const int k = fastest_fitting(&p, b), s = smallest_need(&p);
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToArray(fastest, e);
        if (!ok) cJSON_Delete(e);
        ok = ok && cJSON_AddNumberToObject(e, "device_memory", (double)p.budgets[b]) &&
             (k >= 0 ? cJSON_AddStringToObject(e, "mode", p.modes[k].name) : cJSON_AddNullToObject(e, "mode")) &&
             cJSON_AddNumberToObject(e, "sec_per_step", k >= 0 ? p.cells[k * p.n_budgets + b].sec_median : 0) &&
             cJSON_AddNumberToObject(e, "peak_device_bytes", k >= 0 ? (double)p.cells[k * p.n_budgets + b].peak_device
                                                                    : 0) &&
             cJSON_AddNumberToObject(e, "smallest_need_bytes",
                                     s >= 0 ? (double)p.cells[s * p.n_budgets].peak_device : 0);
        const struct family_plan *pl = b < FAMILY_BUDGETS_MAX ? &fs->planned[b] : NULL;
        cJSON *pj = ok && pl && pl->found ? cJSON_AddObjectToObject(e, "per_block_plan") : NULL;
        if (pj)
            ok = cJSON_AddNumberToObject(pj, "sec_per_step", pl->sec) &&
                 cJSON_AddNumberToObject(pj, "peak_device_bytes", (double)pl->peak) &&
                 cJSON_AddStringToObject(pj, "gradient_checkpointing_plan", pl->plan);
        const struct family_place *pp = b < FAMILY_BUDGETS_MAX ? &fs->placed[b] : NULL;
        cJSON *wj = ok && pp && pp->found ? cJSON_AddObjectToObject(e, "weights_placed") : NULL;
        if (wj)
            ok = cJSON_AddStringToObject(wj, "schedule", pp->how) &&
                 cJSON_AddStringToObject(wj, "base_model_precision", pp->quantized ? "int8-quanto" : "as configured") &&
                 cJSON_AddNumberToObject(wj, "musubi_blocks_to_swap", pp->blocks) &&
                 cJSON_AddBoolToObject(wj, "enable_group_offload", pp->group_blocks > 0) &&
                 (pp->group_blocks ? cJSON_AddNumberToObject(wj, "group_offload_blocks_per_group", pp->group_blocks)
                                   : cJSON_AddNullToObject(wj, "group_offload_blocks_per_group")) &&
                 cJSON_AddBoolToObject(wj, "group_offload_use_stream", pp->group_stream) &&
                 cJSON_AddNumberToObject(wj, "sec_per_step", pp->sec) &&
                 cJSON_AddNumberToObject(wj, "peak_device_bytes", (double)pp->peak);
    }
    if (!ok) cJSON_Delete(o);
    return ok ? o : NULL;
}

static st_status write_json(const void *ctx, FILE *f)
{
    const family_report *rep = ctx;
    cJSON *root = cJSON_CreateObject(), *mach = NULL, *rates = NULL, *list = NULL;
    bool ok = root && cJSON_AddStringToObject(root, "command", rep->command) &&
              (mach = cJSON_AddObjectToObject(root, "machine")) && (rates = cJSON_AddObjectToObject(root, "rates")) &&
              (list = cJSON_AddArrayToObject(root, "families"));
    ok = ok && cJSON_AddStringToObject(mach, "cpu", rep->machine.cpu) &&
         cJSON_AddNumberToObject(mach, "cores", rep->machine.cores) &&
         cJSON_AddNumberToObject(mach, "threads", rep->machine.threads) &&
         cJSON_AddStringToObject(mach, "blas", rep->machine.blas);
    ok = ok && cJSON_AddNumberToObject(rates, "gemm_gflops", rate_of(&rep->rates, OP_GEMM)) &&
         cJSON_AddNumberToObject(rates, "attention_gflops", rate_of(&rep->rates, OP_ATTENTION)) &&
         cJSON_AddNumberToObject(rates, "norm_gbytes_per_s", rate_of(&rep->rates, OP_NORM)) &&
         cJSON_AddNumberToObject(rates, "pointwise_gbytes_per_s", rate_of(&rep->rates, OP_POINTWISE)) &&
         cJSON_AddStringToObject(rates, "calibration", rep->calibration);
    for (int i = 0; ok && i < rep->n_families; i++) {
        cJSON *o = family_json(&rep->families[i], &rep->machine);
        ok = o && cJSON_AddItemToArray(list, o);
        if (!ok) cJSON_Delete(o);
    }
    if (!ok) cJSON_Delete(root);
    return sweep_print_json(ok ? root : NULL, f, "families.json");
}

static st_status write_csv(const void *ctx, FILE *f)
{
    const family_report *rep = ctx;
    static const char *const names[] = {"family", "half"};
    for (int i = 0; i < rep->n_families; i++) {
        const char *measured[] = {rep->families[i].family, "measured"}, *predicted[] = {rep->families[i].family,
                                                                                         "predicted"};
        sweep_write_csv(&rep->families[i].measured, f, names, measured, 2, i == 0);
        sweep_write_csv(&rep->families[i].predicted, f, names, predicted, 2, false);
    }
    return ST_OK;
}

/* dir/family/half/sweep.*: the single sweep's reports and chart of one half. */
static st_status write_half(const char *dir, const char *family, const char *half, const sweep_result *r,
                            const machine_info *mi)
{
    char path[SWEEP_TEXT_MAX + 2 * SWEEP_NAME_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, family);
    if (mkdir(path, 0755) && errno != EEXIST) return st_fail(ST_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/%s/%s", dir, family, half);
    if (mkdir(path, 0755) && errno != EEXIST) return st_fail(ST_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    sweep_result copy = *r;
    copy.machine = *mi;
    return sweep_write_reports(&copy, path);
}

st_status family_sweep_write_reports(const family_report *rep, const char *dir)
{
    st_status st = ST_OK;
    for (int i = 0; i < rep->n_families && !st; i++) {
        const family_sweep *fs = &rep->families[i];
        if (fs->skipped[0]) continue; /* its reason is in families.md; nothing to chart */
        st = write_half(dir, fs->family, "measured", &fs->measured, &rep->machine);
        if (!st) st = write_half(dir, fs->family, "predicted", &fs->predicted, &rep->machine);
    }
    if (!st) st = sweep_write_file(dir, "families.md", write_md, rep);
    if (!st) st = sweep_write_file(dir, "families.json", write_json, rep);
    if (!st) st = sweep_write_file(dir, "families.csv", write_csv, rep);
    return st;
}
