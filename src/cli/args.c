/* Argument handling shared by the commands: named flags, numbers read one checked way, repeated --set, and the
 * run configuration. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "segtrain/ops.h"
#include "segtrain/plan.h"
#include "segtrain/train.h"

/* A --set override: "--set key=value", and SimpleTuner's "--key value" for a config key. */
static int add_set(cli_args *a, const char *command, const char *assignment)
{
    if (a->n_sets == CLI_MAX_SETS) {
        fprintf(stderr, "segtrain %s: at most %d --set options\n", command, CLI_MAX_SETS);
        return 2;
    }
    a->sets[a->n_sets++] = assignment;
    return 0;
}

/* "--key value" / "--key=value" / a bare "--bool_key" for a config key: stored as "key=value" in `spelled`
 * (owned by the caller for the life of a). 1 if it was one, 0 if not, 2 on a usage error. */
static int config_flag(int argc, char **argv, int *i, cli_args *a, char *spelled, size_t cap)
{
    const char *f = argv[*i], *eq = strchr(f, '=');
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(eq ? (size_t)(eq - f) : strlen(f)), f);
    bool is_bool;
    if (strncmp(f, "--", 2) || !config_key_known(key, &is_bool)) return 0;
    const char *value = eq ? eq + 1 : NULL;
    if (!value && *i + 1 < argc && (!is_bool || strncmp(argv[*i + 1], "--", 2))) value = argv[++*i];
    if (!value && is_bool) value = "true"; /* a store_true flag, as SimpleTuner's command line has them */
    if (!value) {
        fprintf(stderr, "segtrain %s: %s needs a value\n", argv[0], f);
        return 2;
    }
    if ((size_t)snprintf(spelled, cap, "%s=%s", key + 2, value) >= cap) {
        fprintf(stderr, "segtrain %s: %s: the value is longer than %zu characters\n", argv[0], key, cap - 1);
        return 2;
    }
    return add_set(a, argv[0], spelled) ? 2 : 1;
}

int cli_number(const char *who, const cli_flag *f, const char *text)
{
    char *end = NULL;
    errno = 0;
    bool ok = *text && !isspace((unsigned char)*text); /* the whole string: strto* would skip leading blanks */
    if (f->whole) {
        const long long v = strtoll(text, &end, 10);
        ok = ok && !errno && !*end && v >= f->min && v <= f->max;
        if (ok) *f->whole = v;
    } else {
        const double v = strtod(text, &end);
        /* decimal only, as a config's number keys: strtod alone would take "0x10" */
        ok = ok && !strpbrk(text, "xX") && !errno && !*end && isfinite(v) && v >= (double)f->min && v <= (double)f->max;
        if (ok) *f->real = v;
    }
    if (ok) return 0;
    fprintf(stderr, "%s: %s takes a %snumber ", who, f->name, f->whole ? "whole " : "");
    if (f->max == LLONG_MAX) fprintf(stderr, ">= %lld", f->min);
    else fprintf(stderr, "from %lld to %lld", f->min, f->max);
    fprintf(stderr, ", got '%s'\n", text);
    return 2;
}

int cli_size(const char *who, const char *flag, const char *text, bool rate, size_t *out)
{
    char json[160];
    config *probe = NULL;
    const size_t len = strlen(text), cut = rate && len > 2 && !strcmp(text + len - 2, "/s") ? len - 2 : len;
    snprintf(json, sizeof json, "{\"device_memory\": \"%.*s\"}", (int)(cut < 100 ? cut : 100), text);
    st_status st = config_parse(json, flag, &probe);
    if (!st) st = config_bytes(probe, "device_memory", out);
    config_free(probe);
    if (!st && *out) return 0;
    fprintf(stderr, "%s: %s takes a %s (e.g. %s), got '%s'\n", who, flag, rate ? "rate in bytes a second" : "size",
            rate ? "25GB/s, 12GiB/s" : "24GiB, 450MiB", text);
    return 2;
}

/* The one line for argv[i], which is neither the command's option nor a config key: a global option in the wrong
 * place, or the nearest option or key when it is close, or where the valid ones are listed. */
static int unknown_option(char **argv, int i, int argc, const cli_flag *flags, size_t name_len)
{
    const char *f = argv[i], *cmd = argv[0];
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(name_len < sizeof name ? name_len : sizeof name - 1), f);
    if (!strcmp(name, "--threads") || !strcmp(name, "--lenient")) {
        const bool threads = !strcmp(name, "--threads");
        const char *n = !threads ? "" : strchr(f, '=') ? strchr(f, '=') + 1 : i + 1 < argc ? argv[i + 1] : "N";
        fprintf(stderr, "segtrain %s: %s is a global option: it goes before the command (segtrain %s%s%s %s ...)\n",
                cmd, name, name, threads ? " " : "", n, cmd);
        return 2;
    }
    const char *near = NULL;
    if (!strncmp(name, "--", 2)) {
        int best = 1 << 30;
        for (int k = 0; k < CLI_MAX_FLAGS && flags[k].name; k++) {
            const int d = config_distance(name, flags[k].name);
            if (d < best) best = d, near = flags[k].name;
        }
        if (best > 2 || 4 * best > (int)strlen(name)) near = NULL; /* a typo is a letter or two */
        const char *key = config_close_key(name);
        if (key && (!near || config_distance(name + 2, key) < best)) near = key;
    }
    if (near)
        fprintf(stderr, "segtrain %s: unknown option '%s' (did you mean %s%s?)\n", cmd, f,
                strncmp(near, "--", 2) ? "--" : "", near);
    else
        fprintf(stderr, "segtrain %s: unknown option '%s': neither an option of segtrain %s (see segtrain %s --help) "
                "nor a config key (docs/CONFIG.md; given as --key value or --set key=value)\n", cmd, f, cmd, cmd);
    return 2;
}

int args_parse(int argc, char **argv, const cli_flag *flags, cli_args *a)
{
    *a = (cli_args){0};
    const char *given[CLI_MAX_FLAGS] = {0}; /* the last value of each flag; read once argv is all understood */
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *eq = strncmp(f, "--", 2) ? NULL : strchr(f, '=');
        const size_t name_len = eq ? (size_t)(eq - f) : strlen(f);
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return a->help = 1, 0;
        if (!strcmp(f, "--set")) {
            if (i + 1 >= argc) goto missing;
            if (add_set(a, argv[0], argv[++i])) return 2;
            continue;
        }
        int known = 0;
        for (int k = 0; k < CLI_MAX_FLAGS && flags[k].name && !known; k++) {
            if (strlen(flags[k].name) != name_len || strncmp(f, flags[k].name, name_len)) continue;
            if (flags[k].on && eq) continue; /* a switch takes no "=value" */
            if (!flags[k].on && !eq && i + 1 >= argc) goto missing; /* "--flag value", "--flag=value" */
            if (flags[k].on) *flags[k].on = true;
            else given[k] = eq ? eq + 1 : argv[++i];
            known = 1;
        }
        if (!known && a->n_spelled < CLI_MAX_SETS) {
            int r = config_flag(argc, argv, &i, a, a->spelled[a->n_spelled], sizeof a->spelled[0]);
            if (r == 2) return 2;
            if (r == 1) a->n_spelled++, known = 1;
        }
        if (!known) return unknown_option(argv, i, argc, flags, name_len);
        continue;
    missing:
        fprintf(stderr, "segtrain %s: %s needs a value\n", argv[0], f);
        return 2;
    }
    char who[64];
    snprintf(who, sizeof who, "segtrain %s", argv[0]);
    for (int k = 0; k < CLI_MAX_FLAGS && flags[k].name; k++) {
        if (!given[k] && flags[k].required) {
            fprintf(stderr, "segtrain %s: %s is required (see segtrain %s --help)\n", argv[0], flags[k].name, argv[0]);
            return 2;
        }
        if (!given[k]) continue;
        if (flags[k].text) *flags[k].text = given[k];
        else if (cli_number(who, &flags[k], given[k])) return 2;
    }
    return 0;
}

/* The keys the models layer checks, model_family (with model_flavour) and model_preset, in the report of a config
 * (c: it, or the partial one of a config with refused values; st: its status): their lines lead, the family's
 * first, since a SimpleTuner user's file fails on it first and it says what the file needs. */
static st_status with_model_errors(const config *c, st_status st)
{
    char errors[4096] = "", own[2][4096];
    if (st) snprintf(errors, sizeof errors, "%s", st_error());
    int m = 0;
    model_config mc;
    const st_status family = model_family_check(config_string(c, "model_family"), config_string(c, "model_flavour"));
    if (family) snprintf(own[m++], sizeof own[0], "%s", st_error());
    const st_status preset = model_preset(config_string(c, "model_preset"), &mc);
    if (preset) snprintf(own[m++], sizeof own[0], "%s", st_error());
    if (!m) return st ? st_fail(st, "%s", errors) : ST_OK;
    st = st ? st : preset ? preset : family; /* the config's status, as when model_preset was a key with choices */
    int n = 0; /* the config's lines: "N errors in the config:" and a line each, one line, or none */
    for (const char *p = errors; (p = strstr(p, "\n  ")); p++) n++;
    if (!n && *errors) n = 1;
    if (m + n == 1) return st_fail(st, "%s", own[0]);
    const char *lines = strchr(errors, '\n') ? strchr(errors, '\n') + 3 : errors; /* past "N errors ...:\n  " */
    return st_fail(st, "%d errors in the config:\n  %s%s%s%s%s", m + n, own[0], m > 1 ? "\n  " : "",
                   m > 1 ? own[1] : "", n ? "\n  " : "", lines);
}

const char *cli_precision(const config *cfg)
{
    return !strcmp(config_string(cfg, "mixed_precision"), "bf16") ? "bf16" : "float32";
}

static bool threads_given;

void cli_threads_given(void) { threads_given = true; }

st_status cli_load_config(const char *path, const cli_args *a, config **out)
{
    config *partial = NULL;
    st_status st = config_load_with(path, a->sets, a->n_sets, out, &partial);
    if (partial || !st) st = with_model_errors(partial ? partial : *out, st);
    config_free(partial);
    model_config mc;
    if (!st) st = model_config_from(*out, &mc);
    /* every command: a folder that is not there would otherwise plan the preset's sizes, not the folder's */
    const char *weights = st ? "" : config_string(*out, "pretrained_model_name_or_path");
    if (*weights) st = train_weights_path_check(weights);
    if (st) {
        config_free(*out);
        *out = NULL;
        return st;
    }
    config_warn(*out);
    char flavour_preset[32];
    if (*config_string(*out, "model_flavour") &&
        !model_family_preset(config_string(*out, "model_family"), config_string(*out, "model_flavour"), flavour_preset,
                             sizeof flavour_preset))
        st_warn("segtrain: warning: model_flavour %s is not used: segtrain's own %s family has no flavours (sizes "
                "come from model_preset)", config_string(*out, "model_flavour"), mc.family);
    if (model_batch_padded(&mc) &&
        !config_is_set(*out, "tokenizer_max_length") && !*config_string(*out, "data_cache_dir"))
        st_warn("segtrain: warning: SimpleTuner pads each %s batch's captions to its longest, with no fixed length; "
                "segtrain sizes them at %lld tokens (tokenizer_max_length sets it)", mc.family, (long long)mc.text_len);
    int64_t threads = config_int(*out, "num_threads");
    if (threads > 0) ops_set_threads((int)threads);
    else if (threads_given) { /* --threads or OMP_NUM_THREADS: the user's count, as num_threads says it */
        char set[32];
        snprintf(set, sizeof set, "num_threads=%d", ops_threads());
        return config_set(*out, set);
    }
    return ST_OK;
}

int cli_error(const char *command)
{
    fprintf(stderr, "segtrain %s: %s\n", command, st_error());
    return 1;
}

void print_bytes(FILE *f, size_t b)
{
    char buf[24];
    fputs(st_bytes(buf, b), f);
}

void print_peak(FILE *f, const char *label, const pool_stats *s)
{
    fprintf(f, "%s ", label);
    print_bytes(f, s->peak);
    fprintf(f, " (");
    for (int t = 0, first = 1; t < MEM_TAG_COUNT; t++) {
        if (!s->at_peak_by_tag[t]) continue;
        fprintf(f, "%s%s ", first ? "" : ", ", mem_tag_name(t));
        print_bytes(f, s->at_peak_by_tag[t]);
        first = 0;
    }
    fprintf(f, ")\n");
}

void print_fallbacks(FILE *f)
{
    int n;
    const op_fallback *fb = ops_fallbacks(&n);
    if (!n && !strcmp(ops_backend_name(), "cpu")) return;
    if (!n) fputs("no fallbacks\n", f);
    for (int i = 0; i < n; i++)
        fprintf(f, "fallback %s: %s, %lld call%s on the CPU\n", fb[i].op, fb[i].why, (long long)fb[i].calls,
                fb[i].calls == 1 ? "" : "s");
}

st_status cli_open_model(const config *cfg, bool allocate, cli_model *out)
{
    st_status st = model_run_open(cfg, allocate, out);
    if (!st) st = ckpt_settings_warn(cfg);
    if (st) model_run_close(out);
    return st;
}

void cli_close_model(cli_model *cm)
{
    if (model_run_close(cm)) fprintf(stderr, "segtrain: the pools had leaks (a bug; see above)\n");
}

void print_plans(FILE *f, model *m)
{
    block_seq *seqs;
    int n = model_sequences(m, &seqs);
    for (int i = 0; i < n; i++) {
        const seq_plan *p = model_plan(m, i);
        char line[1024];
        seq_plan_format(p, line, sizeof line);
        fprintf(f, "plan %s: %s\n", seqs[i].name, line);
        if (p->fallback[0]) fprintf(f, "plan %s: %s\n", seqs[i].name, p->fallback);
    }
}
