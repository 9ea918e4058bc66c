/* Reading SimpleTuner-style JSON configs against the key registry (keys.c). The JSON itself is cJSON's job;
 * this file adds what SimpleTuner's files need on top (leading "--", trailing commas, numbers and bools written
 * as strings) and turns every problem into one line that names the source, the key, the value and what is
 * valid. */
#include "segtrain/config.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "keys.h"
#include "segtrain/fileio.h"

typedef struct value {
    bool set; /* given explicitly */
    bool b;
    int64_t i;
    double f;
    char *s;       /* CFG_STRING, CFG_SIZE */
    int64_t *list; /* CFG_INT_LIST */
    size_t n;
} value;

struct config {
    value *v;      /* one per row of cfg_keys */
    char *warning; /* NULL, or one line per kind of ignored key and per SimpleTuner value read differently */
};

/* Outcome of converting one JSON value: kept apart from st_status so that the caller words the message. */
typedef enum conv { CV_OK, CV_BAD, CV_OOM } conv;

#define GC_PREFIX "gradient_checkpointing"

static st_status oom(void) { return st_host_oom("the config"); }

static const char *strip_dashes(const char *key) { return strncmp(key, "--", 2) == 0 ? key + 2 : key; }

/* ---- the registry ------------------------------------------------------------------------------------- */

/* Row of a canonical name or an alias (without "--"), or -1. */
static int find_key(const char *name)
{
    for (int i = 0; i < cfg_key_count; i++)
        if (strcmp(cfg_keys[i].name, name) == 0 || (cfg_keys[i].alias && strcmp(cfg_keys[i].alias, name) == 0))
            return i;
    return -1;
}

bool config_key_known(const char *name, bool *is_bool)
{
    int i = find_key(strip_dashes(name));
    if (is_bool) *is_bool = i >= 0 && cfg_keys[i].type == CFG_BOOL;
    return i >= 0;
}

const char *cfg_type_name(cfg_type t)
{
    static const char *names[] = {"bool", "int", "float", "string", "size", "int list"};
    return names[t];
}

/* The getters' lookup: a wrong name or type is a bug in the caller, not bad input, so it stops the program. */
static const value *get(const config *c, const char *key, unsigned type_mask, const char *getter)
{
    int i = -1;
    for (int j = 0; j < cfg_key_count && i < 0; j++)
        if (strcmp(cfg_keys[j].name, key) == 0) i = j;
    if (i < 0) st_panic("%s(\"%s\"): no such config key", getter, key);
    if (!(type_mask & (1u << cfg_keys[i].type)))
        st_panic("%s(\"%s\"): it is a %s key", getter, key, cfg_type_name(cfg_keys[i].type));
    return &c->v[i];
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    for (size_t k = 0; k < n; k++) h = (h ^ ((const unsigned char *)data)[k]) * 0x100000001b3ull;
    return h;
}

const char *config_key_hash(const config *c, int i, uint64_t *hash)
{
    if (i < 0 || i >= cfg_key_count) return NULL;
    const value *v = &c->v[i]; /* whether it was given explicitly is not its value */
    uint64_t h = fnv(0xcbf29ce484222325ull, &v->b, sizeof v->b);
    h = fnv(h, &v->i, sizeof v->i), h = fnv(h, &v->f, sizeof v->f);
    h = fnv(h, v->s ? v->s : "", v->s ? strlen(v->s) + 1 : 0), h = fnv(h, &v->n, sizeof v->n);
    *hash = v->list ? fnv(h, v->list, v->n * sizeof *v->list) : h;
    return cfg_keys[i].name;
}

/* ---- a growable string, for the warning line ------------------------------------------------------------ */

typedef struct strbuf {
    char *buf;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_add(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->oom || n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = 2 * (b->len + (size_t)n + 1);
        char *p = realloc(b->buf, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->buf = p, b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* ---- suggestions ------------------------------------------------------------------------------------------ */

#define MAX_KEY_LEN 64

static int levenshtein(const char *a, const char *b)
{
    size_t la = strnlen(a, MAX_KEY_LEN), lb = strnlen(b, MAX_KEY_LEN);
    int row[MAX_KEY_LEN + 1];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *config_nearest(const char *given, const char *const *names, int n)
{
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < n; i++) {
        int d = levenshtein(given, names[i]);
        if (d < best_d) best = names[i], best_d = d;
    }
    return best;
}

static bool is_subsequence(const char *small, const char *big)
{
    for (; *small && *big; big++)
        if (*small == *big) small++;
    return *small == '\0';
}

/* Distance from a given name to a known one. `loose` also treats a dropped word as close
 * ("gradient_checkpointing_stride" -> "..._segment_stride"), which plain edit distance ranks far. */
static int key_distance(const char *given, const char *known, bool loose)
{
    int d = levenshtein(given, known);
    if (loose && is_subsequence(given, known)) {
        int half = ((int)strlen(known) - (int)strlen(given) + 1) / 2;
        if (half < d) d = half;
    }
    return d;
}

int config_distance(const char *a, const char *b) { return levenshtein(a, b); }

/* Whether a and b differ by exactly one insertion, deletion, substitution or swap of neighbours. */
static bool one_edit(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > lb) {
        const char *t = a;
        a = b, b = t;
        size_t n = la;
        la = lb, lb = n;
    }
    if (lb - la > 1) return false;
    size_t i = 0;
    while (i < la && a[i] == b[i]) i++;
    if (la < lb) return strcmp(a + i, b + i + 1) == 0;
    if (i == la) return false; /* the same */
    if (strcmp(a + i + 1, b + i + 1) == 0) return true;
    return i + 1 < la && a[i] == b[i + 1] && a[i + 1] == b[i] && strcmp(a + i + 2, b + i + 2) == 0;
}

/* The known name one edit from `given`, or NULL: such a key is a typo far more often than a SimpleTuner key. */
static const char *typo_of(const char *given)
{
    for (int i = 0; i < cfg_key_count; i++) {
        if (one_edit(given, cfg_keys[i].name)) return cfg_keys[i].name;
        if (cfg_keys[i].alias && one_edit(given, cfg_keys[i].alias)) return cfg_keys[i].alias;
    }
    return NULL;
}

static bool lenient; /* --lenient: typos of keys are warnings */

void config_set_lenient(bool on) { lenient = on; }
bool config_is_lenient(void) { return lenient; }

/* The known name (canonical or alias) nearest to `given`, or NULL unless `always` or it is close enough to be
 * a likely typo. */
static const char *nearest_key(const char *given, bool always)
{
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < cfg_key_count; i++) {
        const char *names[2] = {cfg_keys[i].name, cfg_keys[i].alias};
        for (int j = 0; j < 2; j++) {
            if (!names[j]) continue;
            int d = key_distance(given, names[j], always);
            if (d < best_d) best = names[j], best_d = d;
        }
    }
    if (always) return best;
    int len = (int)strlen(given);
    return best_d <= 3 && 4 * best_d <= len + 4 ? best : NULL;
}

/* ---- describing values and what is valid ------------------------------------------------------------------ */

/* The value as JSON text, shortened: strings keep their quotes, so "4" and 4 read differently. */
static void show_value(const cJSON *item, char *buf, size_t n)
{
    if (cJSON_IsNumber(item) && !isfinite(item->valuedouble)) { /* cJSON would print null */
        snprintf(buf, n, "a number too large for a double");
        return;
    }
    char *text = cJSON_PrintUnformatted(item);
    snprintf(buf, n, "%s", text ? text : "?");
    if (text && strlen(text) >= n && n > 4) strcpy(buf + n - 4, "...");
    cJSON_free(text);
}

void cfg_range_text(const cfg_key *k, char *buf, size_t n)
{
    bool lo = isfinite(k->min), hi = isfinite(k->max);
    bool open_lo = k->flags & CFG_OPEN_MIN, open_hi = k->flags & CFG_OPEN_MAX;
    if (lo && hi) snprintf(buf, n, " in %c%g, %g%c", open_lo ? '(' : '[', k->min, k->max, open_hi ? ')' : ']');
    else if (lo) snprintf(buf, n, " %s %g", open_lo ? ">" : ">=", k->min);
    else if (hi) snprintf(buf, n, " %s %g", open_hi ? "<" : "<=", k->max);
    else buf[0] = '\0';
}

/* "a|b|c" -> "a, b, c"; returns the whole text's length, as snprintf does (it fits when < n) */
static size_t cfg_choices_text(const char *choices, char *buf, size_t n)
{
    size_t len = 0;
    if (n) buf[0] = '\0';
    for (const char *p = choices; *p;) {
        const size_t w = strcspn(p, "|");
        const int wrote =
            snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "%s%.*s", len ? ", " : "", (int)w, p);
        if (wrote < 0) break;
        len += (size_t)wrote;
        p += w + (p[w] == '|');
    }
    return len;
}

/* What a valid value of k is, as the end of "<value> is not ...". */
static void valid_text(const cfg_key *k, char *buf, size_t n)
{
    char range[64], list[2048]; /* a long list of names (the error line holds 4096) */
    cfg_range_text(k, range, sizeof range);
    switch (k->type) {
    case CFG_BOOL: snprintf(buf, n, "a bool (true, false, \"true\", \"false\", 1 or 0)"); break;
    case CFG_INT: snprintf(buf, n, "an integer%s", range); break;
    case CFG_FLOAT: snprintf(buf, n, "a number%s", range); break;
    case CFG_STRING:
        if (k->choices) cfg_choices_text(k->choices, list, sizeof list), snprintf(buf, n, "one of %s", list);
        else snprintf(buf, n, "a string");
        break;
    case CFG_SIZE:
        snprintf(buf, n, "a size (a byte count, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB; \"\" = "
                         "unlimited)");
        break;
    case CFG_INT_LIST: snprintf(buf, n, "a list of integers%s (e.g. [3, 7] or \"3,7\")", range); break;
    }
}

#define NEAREST_SHOWN 3
#define LONG_CHOICES 8 /* past this many choices, the nearest come first: nobody reads a hundred names for a typo */

/* The NEAREST_SHOWN choices nearest to `given` by edit distance, ", "-separated (ties in the table's order). */
static void nearest_choices(const char *choices, const char *given, char *buf, size_t n)
{
    const char *best[NEAREST_SHOWN] = {0};
    int best_len[NEAREST_SHOWN] = {0}, best_d[NEAREST_SHOWN];
    for (int i = 0; i < NEAREST_SHOWN; i++) best_d[i] = 1 << 30;
    for (const char *p = choices; *p;) {
        const size_t w = strcspn(p, "|");
        char name[MAX_KEY_LEN + 1];
        snprintf(name, sizeof name, "%.*s", (int)w, p);
        int d = levenshtein(given, name), at = NEAREST_SHOWN;
        while (at > 0 && d < best_d[at - 1]) at--;
        for (int j = NEAREST_SHOWN - 1; j > at; j--)
            best[j] = best[j - 1], best_len[j] = best_len[j - 1], best_d[j] = best_d[j - 1];
        if (at < NEAREST_SHOWN) best[at] = p, best_len[at] = (int)w, best_d[at] = d;
        p += w + (p[w] == '|');
    }
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < NEAREST_SHOWN && best[i] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%.*s", i ? ", " : "", best_len[i], best[i]);
}

/* "SRC: KEY: VALUE is not ..." (src NULL: from "KEY") */
static st_status bad_value(const char *src, const cfg_key *k, const cJSON *item)
{
    char given[64], valid[2112]; /* "one of " and valid_text's list */
    show_value(item, given, sizeof given);
    valid_text(k, valid, sizeof valid);
    int count = 1;
    for (const char *p = k->choices; p && *p; p++) count += *p == '|';
    if (k->choices && count > LONG_CHOICES && cJSON_IsString(item)) {
        char near[3 * (MAX_KEY_LEN + 2)];
        nearest_choices(k->choices, item->valuestring, near, sizeof near);
        return st_fail(ST_ERR_INVALID, "%s%s%s: %s is not one of its %d choices; nearest: %s (all: %s)", src ? src : "",
                       src ? ": " : "", k->name, given, count, near, valid + strlen("one of "));
    }
    return st_fail(ST_ERR_INVALID, "%s%s%s: %s is not %s", src ? src : "", src ? ": " : "", k->name, given, valid);
}

/* ---- converting one JSON value to a key's type -------------------------------------------------------------- */

/* Whole-string conversions: no leading blanks or trailing characters, so "4x" and " 4" are refused. */
static bool int_of_text(const char *s, int64_t *out)
{
    if (!*s || isspace((unsigned char)*s)) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static bool int_of(const cJSON *it, int64_t *out)
{
    if (cJSON_IsString(it)) return int_of_text(it->valuestring, out);
    if (!cJSON_IsNumber(it)) return false;
    double d = it->valuedouble;
    if (d != floor(d) || fabs(d) >= 9.2e18) return false;
    *out = (int64_t)d;
    return true;
}

/* Whether s is a decimal number as JSON writes one (a sign, digits, a point, an exponent): strtod alone would also
 * take "0x10", "inf" and "nan", which an integer key refuses, so a number key refuses them too. */
static bool decimal_text(const char *s)
{
    bool digits = false;
    if (*s == '+' || *s == '-') s++;
    for (; isdigit((unsigned char)*s); s++) digits = true;
    if (*s == '.')
        for (s++; isdigit((unsigned char)*s); s++) digits = true;
    if (digits && (*s == 'e' || *s == 'E')) {
        s += s[1] == '+' || s[1] == '-' ? 2 : 1;
        if (!isdigit((unsigned char)*s)) return false;
        while (isdigit((unsigned char)*s)) s++;
    }
    return digits && !*s;
}

static bool float_of(const cJSON *it, double *out)
{
    if (cJSON_IsNumber(it)) return *out = it->valuedouble, isfinite(*out); /* 1e999 parses as inf */
    if (!cJSON_IsString(it)) return false;
    const char *s = it->valuestring;
    if (!decimal_text(s)) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool bool_of(const cJSON *it, bool *out)
{
    if (cJSON_IsBool(it)) return *out = cJSON_IsTrue(it), true;
    if (cJSON_IsNumber(it) && (it->valuedouble == 0 || it->valuedouble == 1)) return *out = it->valuedouble == 1, true;
    if (!cJSON_IsString(it)) return false;
    const char *s = it->valuestring;
    if (strcasecmp(s, "true") == 0 || strcmp(s, "1") == 0) return *out = true, true;
    if (strcasecmp(s, "false") == 0 || strcmp(s, "0") == 0) return *out = false, true;
    return false;
}

static bool in_range(const cfg_key *k, double v)
{
    return (k->flags & CFG_OPEN_MIN ? v > k->min : v >= k->min) && (k->flags & CFG_OPEN_MAX ? v < k->max : v <= k->max);
}

static bool is_choice(const char *choices, const char *s)
{
    size_t n = strlen(s);
    for (const char *p = choices; *p;) {
        size_t w = strcspn(p, "|");
        if (w == n && strncmp(p, s, n) == 0) return true;
        p += w + (p[w] == '|');
    }
    return false;
}

/* "24GiB", "80 GB", "1.5GiB", "4096" -> bytes; false if malformed, zero or too large. */
static bool parse_size(const char *s, size_t *out)
{
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1},          {"B", 1},          {"KB", 1e3},          {"MB", 1e6},          {"GB", 1e9},
        {"TB", 1e12},     {"KiB", 1024.0},   {"MiB", 1048576.0},   {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    const char *p = s;
    if (!isdigit((unsigned char)*p)) return false;
    while (isdigit((unsigned char)*p)) p++;
    if (*p == '.' && isdigit((unsigned char)p[1]))
        for (p++; isdigit((unsigned char)*p);) p++;
    double number = strtod(s, NULL);
    if (*p == ' ') p++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(p, units[i].unit) != 0 || (p[-1] == ' ' && !*p)) continue;
        double bytes = floor(number * units[i].mult);
        if (bytes < 1 || bytes >= 18446744073709551616.0) return false; /* 2^64 */
        *out = (size_t)bytes;
        return true;
    }
    return false;
}

static conv string_of(const cfg_key *k, const cJSON *it, bool check, value *out)
{
    if (!cJSON_IsString(it)) return CV_BAD;
    if (check && k->choices && !is_choice(k->choices, it->valuestring)) return CV_BAD;
    return (out->s = strdup(it->valuestring)) ? CV_OK : CV_OOM;
}

static conv size_of(const cJSON *it, value *out)
{
    char text[32];
    size_t bytes;
    if (cJSON_IsString(it)) {
        if (it->valuestring[0] && !parse_size(it->valuestring, &bytes)) return CV_BAD;
        return (out->s = strdup(it->valuestring)) ? CV_OK : CV_OOM;
    }
    int64_t n;
    if (!int_of(it, &n) || n < 1) return CV_BAD;
    snprintf(text, sizeof text, "%lld", (long long)n);
    return (out->s = strdup(text)) ? CV_OK : CV_OOM;
}

/* "3,7", "[3, 7]", "" or "[]" */
static conv list_of_text(const char *s, value *out)
{
    while (isspace((unsigned char)*s)) s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1])) len--;
    bool bracketed = len >= 2 && s[0] == '[' && s[len - 1] == ']';
    const char *p = s + bracketed, *end = s + len - bracketed;
    while (p < end && isspace((unsigned char)*p)) p++;
    if (p == end) return CV_OK;
    size_t cap = 1;
    for (const char *q = p; q < end; q++) cap += *q == ',';
    if (!(out->list = malloc(cap * sizeof *out->list))) return CV_OOM;
    for (;;) {
        char *stop;
        errno = 0;
        out->list[out->n++] = strtoll(p, &stop, 10);
        if (errno || stop == p) return CV_BAD;
        for (p = stop; p < end && isspace((unsigned char)*p);) p++;
        if (p == end) return CV_OK;
        if (*p != ',') return CV_BAD;
        for (p++; p < end && isspace((unsigned char)*p);) p++;
    }
}

static conv list_of(const cfg_key *k, const cJSON *it, bool check, value *out)
{
    conv r = CV_OK;
    if (cJSON_IsString(it)) {
        r = list_of_text(it->valuestring, out);
    } else if (cJSON_IsNumber(it)) { /* a single block index */
        if (!(out->list = malloc(sizeof *out->list))) return CV_OOM;
        r = int_of(it, &out->list[0]) ? (out->n = 1, CV_OK) : CV_BAD;
    } else if (cJSON_IsArray(it)) {
        int n = cJSON_GetArraySize(it);
        if (n > 0 && !(out->list = malloc((size_t)n * sizeof *out->list))) return CV_OOM;
        for (const cJSON *e = it->child; e && r == CV_OK; e = e->next)
            r = int_of(e, &out->list[out->n]) ? (out->n++, CV_OK) : CV_BAD;
    } else {
        r = CV_BAD;
    }
    for (size_t i = 0; r == CV_OK && check && i < out->n; i++)
        if (!in_range(k, (double)out->list[i])) r = CV_BAD;
    return r;
}

static void value_free(value *v)
{
    free(v->s);
    free(v->list);
    v->s = NULL, v->list = NULL, v->n = 0;
}

/* `check` applies bounds and choices; defaults skip it, since some mean "unset" with a value a user may not
 * give (gradient_checkpointing_segment_stride 0 = the interval). On CV_BAD or CV_OOM, *out owns nothing. */
static conv convert(const cfg_key *k, const cJSON *it, bool check, value *out)
{
    conv r = CV_BAD;
    memset(out, 0, sizeof *out);
    switch (k->type) {
    case CFG_BOOL: r = bool_of(it, &out->b) ? CV_OK : CV_BAD; break;
    case CFG_INT: r = int_of(it, &out->i) && (!check || in_range(k, (double)out->i)) ? CV_OK : CV_BAD; break;
    case CFG_FLOAT: r = float_of(it, &out->f) && (!check || in_range(k, out->f)) ? CV_OK : CV_BAD; break;
    case CFG_STRING: r = string_of(k, it, check, out); break;
    case CFG_SIZE: r = size_of(it, out); break;
    case CFG_INT_LIST: r = list_of(k, it, check, out); break;
    }
    if (r != CV_OK) value_free(out);
    return r;
}

static st_status convert_or_fail(const char *src, const cfg_key *k, const cJSON *it, value *out)
{
    conv r = convert(k, it, true, out);
    return r == CV_OK ? ST_OK : r == CV_OOM ? oom() : bad_value(src, k, it);
}

static bool values_equal(const cfg_key *k, const value *a, const value *b)
{
    switch (k->type) {
    case CFG_BOOL: return a->b == b->b;
    case CFG_INT: return a->i == b->i;
    case CFG_FLOAT: return a->f == b->f;
    case CFG_STRING:
    case CFG_SIZE: return strcmp(a->s, b->s) == 0;
    case CFG_INT_LIST: return a->n == b->n && (a->n == 0 || memcmp(a->list, b->list, a->n * sizeof *a->list) == 0);
    }
    return false;
}

static void store(config *c, int i, value *v)
{
    value_free(&c->v[i]);
    c->v[i] = *v;
    c->v[i].set = true;
}

/* A JSON string value on the stack: defaults and --set values go through the same conversion as the file's. */
static cJSON string_item(const char *text)
{
    cJSON it;
    memset(&it, 0, sizeof it);
    it.type = cJSON_String;
    it.valuestring = (char *)text;
    return it;
}

/* ---- creating, parsing, loading ------------------------------------------------------------------------------ */

void config_free(config *c)
{
    if (!c) return;
    for (int i = 0; c->v && i < cfg_key_count; i++) value_free(&c->v[i]);
    free(c->v);
    free(c->warning);
    free(c);
}

config *config_copy(const config *c)
{
    config *d = calloc(1, sizeof *d);
    if (!d || !(d->v = calloc((size_t)cfg_key_count, sizeof *d->v)) ||
        (c->warning && !(d->warning = strdup(c->warning)))) {
        config_free(d);
        return NULL;
    }
    for (int i = 0; i < cfg_key_count; i++) {
        const value *v = &c->v[i];
        d->v[i] = *v;
        d->v[i].s = NULL, d->v[i].list = NULL;
        if ((v->s && !(d->v[i].s = strdup(v->s))) ||
            (v->list && !(d->v[i].list = malloc(v->n * sizeof *v->list)))) {
            config_free(d);
            return NULL;
        }
        if (v->list) memcpy(d->v[i].list, v->list, v->n * sizeof *v->list);
    }
    return d;
}

static config *config_with_defaults(void)
{
    config *c = calloc(1, sizeof *c);
    if (!c || !(c->v = calloc((size_t)cfg_key_count, sizeof *c->v))) {
        config_free(c);
        return NULL;
    }
    for (int i = 0; i < cfg_key_count; i++) {
        cJSON def = string_item(cfg_keys[i].def);
        conv r = convert(&cfg_keys[i], &def, false, &c->v[i]);
        if (r == CV_BAD) /* a broken row in keys.c: caught by the first test that parses anything */
            st_panic("config key %s: default \"%s\" is not a %s", cfg_keys[i].name, cfg_keys[i].def,
                     cfg_type_name(cfg_keys[i].type));
        if (r == CV_OOM) {
            config_free(c);
            return NULL;
        }
    }
    return c;
}

/* SimpleTuner's files often end an object or array with a comma, which JSON forbids. The comma becomes a
 * space (so line:column of any later error still match the file); commas inside strings are left alone, and
 * "[,]" or ",," stay errors. A UTF-8 byte-order mark becomes spaces too. */
static void strip_trailing_commas(char *s)
{
    if ((unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
        s[0] = s[1] = s[2] = ' ';
    bool in_string = false;
    char *pending = NULL; /* a comma outside strings with no value after it yet */
    char last = 0;        /* the last non-blank character outside strings */
    for (char *p = s; *p; p++) {
        if (in_string) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_string = false;
            continue;
        }
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') continue;
        if (*p == ',') pending = (last == ',' || last == '[' || last == '{') ? NULL : p;
        else if ((*p == '}' || *p == ']') && pending) *pending = ' ', pending = NULL;
        else pending = NULL;
        if (*p == '"') in_string = true;
        last = *p;
    }
}

static st_status json_error(const char *src, const char *text, const char *at)
{
    int line = 1, col = 1;
    if (!at) at = text;
    for (const char *p = text; p < at; p++)
        if (*p == '\n') line++, col = 1;
        else col++;
    if (!*at) return st_fail(ST_ERR_FORMAT, "%s:%d:%d: malformed JSON: unexpected end of text", src, line, col);
    size_t n = strcspn(at, "\r\n");
    return st_fail(ST_ERR_FORMAT, "%s:%d:%d: malformed JSON at '%.*s%s'", src, line, col, n > 24 ? 24 : (int)n, at,
                   n > 24 ? "..." : "");
}

static st_status parse_json(const char *json_text, const char *src, cJSON **root)
{
    char *text = strdup(json_text);
    if (!text) return oom();
    strip_trailing_commas(text);
    const char *end = NULL;
    *root = cJSON_ParseWithOpts(text, &end, 1);
    st_status s = ST_OK;
    if (!*root) s = json_error(src, text, end);
    else if (cJSON_IsArray(*root))
        s = st_fail(ST_ERR_FORMAT, "%s: the top level must be a JSON object {...}; a list is a SimpleTuner "
                    "multidatabackend.json, which a config names as data_backend_config", src);
    else if (!cJSON_IsObject(*root)) s = st_fail(ST_ERR_FORMAT, "%s: the top level must be a JSON object {...}", src);
    free(text);
    if (s) cJSON_Delete(*root), *root = NULL;
    return s;
}

/* What reading one config collects on the way: errors are gathered, not returned at the first, so that a run
 * reports every problem of a file at once. */
typedef struct reader {
    const char *src;                 /* the file's name, first word of its messages */
    const cJSON *from_set[CONFIG_MAX_SETS]; /* members that --set put into the object: their messages say "--set" */
    int n_from_set;
    const cJSON **given;             /* per key i: [2i] the member naming it, [2i+1] the member using its alias */
    strbuf unknown[3];               /* ignored keys: would change the result / speed or memory only / reports */
    strbuf notes;                    /* SimpleTuner values read with a difference */
    strbuf errors;
    int n_errors;
    st_status first; /* the status of the first error */
} reader;

/* Records st_error() as one more error line. Out of memory is not recorded but returned: it ends reading. */
static st_status collect(reader *r, st_status s)
{
    if (s == ST_ERR_HOST_OOM) return s;
    if (!r->n_errors++) r->first = s;
    sb_add(&r->errors, "\n  %s", st_error());
    return r->errors.oom ? oom() : ST_OK;
}

static const char *member_src(const reader *r, const cJSON *m)
{
    for (int i = 0; i < r->n_from_set; i++)
        if (r->from_set[i] == m) return "--set";
    return r->src;
}

/* Whether `bare` is in a NULL-terminated list of names and "prefix*" patterns. */
static bool key_listed(const char *const *list, const char *bare)
{
    for (; *list; list++) {
        size_t n = strlen(*list);
        if ((*list)[n - 1] == '*' ? strncmp(bare, *list, n - 1) == 0 : strcmp(bare, *list) == 0) return true;
    }
    return false;
}

/* Whether `it` is the value at which SimpleTuner does what segtrain does anyway (cfg_neutral_values); a bool may
 * come as a string, as SimpleTuner's command line passes it. */
static bool neutral_value(const char *bare, const cJSON *it)
{
    char text[32];
    if (cJSON_IsBool(it)) snprintf(text, sizeof text, "%s", cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsNumber(it)) snprintf(text, sizeof text, "%g", it->valuedouble);
    else if (cJSON_IsString(it)) snprintf(text, sizeof text, "%s", it->valuestring);
    else return false;
    for (const cfg_neutral *n = cfg_neutral_values; n->key; n++)
        if (!strcmp(bare, n->key)) return !strcasecmp(text, n->value);
    return false;
}

static st_status unknown_key(reader *r, const char *src, const cJSON *m)
{
    const char *spelled = m->string, *bare = strip_dashes(spelled);
    if (strncmp(bare, GC_PREFIX, strlen(GC_PREFIX)) == 0)
        return collect(r, st_fail(ST_ERR_INVALID,
                                  "%s: unknown key \"%s\" (did you mean %s?): checkpointing keys are never ignored",
                                  src, spelled, nearest_key(bare, true)));
    if (neutral_value(bare, m)) return ST_OK;
    const char *typo = lenient ? NULL : typo_of(bare);
    if (typo)
        return collect(r, st_fail(ST_ERR_INVALID, "%s: unknown key \"%s\" (did you mean %s?): one edit from a "
                                  "key segtrain reads, so taken for a typo (segtrain --lenient makes it a warning)",
                                  src, spelled, typo));
    strbuf *b = &r->unknown[key_listed(cfg_report_only_keys, bare) ? 2 : key_listed(cfg_speed_only_keys, bare)];
    sb_add(b, "%s", b->len ? ", " : "");
    for (const char *p = spelled; *p; p++) /* keep it one line whatever the key holds */
        sb_add(b, "%c", iscntrl((unsigned char)*p) ? '?' : *p);
    const char *near = nearest_key(bare, false);
    if (near) sb_add(b, " (did you mean %s?)", near);
    return b->oom ? oom() : ST_OK;
}

/* A SimpleTuner value of a choice key that is not segtrain's own name: its row, or NULL. */
static const cfg_value_alias *value_alias(const cfg_key *k, const cJSON *it)
{
    if (!k->choices || !cJSON_IsString(it) || is_choice(k->choices, it->valuestring)) return NULL;
    for (int i = 0; i < cfg_value_alias_count; i++)
        if (!strcmp(cfg_value_aliases[i].key, k->name) && !strcmp(cfg_value_aliases[i].value, it->valuestring))
            return &cfg_value_aliases[i];
    return NULL;
}

/* convert_or_fail, with SimpleTuner's values of choice keys read as segtrain's (a note goes to `notes` where the
 * meaning differs) or refused with the reason and the nearest value. */
static st_status convert_value(const char *src, const cfg_key *k, const cJSON *it, value *out, strbuf *notes)
{
    const cfg_value_alias *a = value_alias(k, it);
    if (!a) return convert_or_fail(src, k, it, out);
    if (!a->becomes)
        return st_fail(ST_ERR_INVALID, "%s: %s: \"%s\" is refused: %s", src, k->name, a->value, a->note);
    if (a->note && notes) {
        sb_add(notes, "%s%s: %s \"%s\" %s", notes->len ? "\n" : "", src, k->name, a->value, a->note);
        if (notes->oom) return oom();
    }
    cJSON as = string_item(a->becomes);
    return convert_or_fail(src, k, &as, out);
}

/* One member of the top-level object. A name given twice ("--seed" and "seed") is an error, and an alias may
 * repeat its key only with the same value. */
static st_status apply_member(config *c, const cJSON *m, reader *r)
{
    const char *src = member_src(r, m), *bare = strip_dashes(m->string);
    int i = find_key(bare);
    if (i < 0) return unknown_key(r, src, m);
    const cfg_key *k = &cfg_keys[i];
    int as_alias = strcmp(k->name, bare) != 0;
    const cJSON *twin = r->given[2 * i + as_alias], *other = r->given[2 * i + !as_alias];
    if (twin)
        return collect(r, st_fail(ST_ERR_INVALID, "%s: %s is given twice (\"%s\" and \"%s\"); give it once", src,
                                  bare, twin->string, m->string));
    r->given[2 * i + as_alias] = m;
    if (cJSON_IsNull(m)) return ST_OK; /* null = the default */
    value v;
    st_status s = convert_value(src, k, m, &v, &r->notes);
    if (s) return collect(r, s);
    if (!other || cJSON_IsNull(other)) {
        store(c, i, &v);
        return ST_OK;
    }
    bool same = values_equal(k, &v, &c->v[i]);
    value_free(&v);
    if (same) return ST_OK;
    char a[64], b[64];
    show_value(other, a, sizeof a), show_value(m, b, sizeof b);
    return collect(r, st_fail(ST_ERR_INVALID,
                              "%s: \"%s\": %s and \"%s\": %s disagree (%s is SimpleTuner's name for %s); give one",
                              src, other->string, a, m->string, b, k->alias, k->name));
}

/* The warning: one line per kind of ignored key, then one per SimpleTuner value read with a difference. */
static st_status make_warning(config *c, reader *r)
{
    static const char *const kinds[3] = {"keys that would change the result", "keys that only change "
                                         "SimpleTuner's speed or memory", "keys that only report or publish"};
    strbuf w = {0};
    for (int k = 0; k < 3; k++)
        if (r->unknown[k].len)
            sb_add(&w, "%s%s: ignoring %s: %s", w.len ? "\n" : "", r->src, kinds[k], r->unknown[k].buf);
    if (r->notes.len) sb_add(&w, "%s%s", w.len ? "\n" : "", r->notes.buf);
    if (w.oom) return free(w.buf), oom();
    c->warning = w.buf;
    return ST_OK;
}

static st_status apply_object(config *c, const cJSON *root, reader *r)
{
    st_status s = ST_OK;
    for (const cJSON *m = root->child; m && !s; m = m->next) s = apply_member(c, m, r);
    if (!s) s = make_warning(c, r);
    if (!s && r->n_errors == 1) s = st_fail(r->first, "%s", r->errors.buf + 3);
    else if (!s && r->n_errors) s = st_fail(r->first, "%d errors in the config:%s", r->n_errors, r->errors.buf);
    return s;
}

const char *config_close_key(const char *given)
{
    const char *bare = strip_dashes(given);
    return nearest_key(bare, strncmp(bare, GC_PREFIX, strlen(GC_PREFIX)) == 0);
}

st_status config_choice_error(const char *key, const char *given, const char *choices)
{
    const cfg_key k = {.name = key, .type = CFG_STRING, .choices = choices, .min = -INFINITY, .max = INFINITY};
    cJSON it = string_item(given);
    return bad_value(NULL, &k, &it);
}

/* "key=value" (key with or without "--", an alias fine): the key's row and where the value starts. An unknown
 * key is an error here: a typo on the command line is never meant. */
static st_status parse_assignment(const char *assignment, int *row, const char **text)
{
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment) return st_fail(ST_ERR_INVALID, "--set: \"%s\" is not key=value", assignment);
    char *key = strndup(assignment, (size_t)(eq - assignment));
    if (!key) return oom();
    const char *bare = strip_dashes(key);
    *row = find_key(bare), *text = eq + 1;
    st_status s = ST_OK;
    if (*row < 0) {
        const char *near = config_close_key(bare);
        s = st_fail(ST_ERR_INVALID, "--set: unknown key \"%s\"%s%s%s", bare, near ? " (did you mean " : "",
                    near ? near : "", near ? "?)" : "");
    }
    free(key);
    return s;
}

static bool clears(int row, const char *text)
{
    return !*text && (cfg_keys[row].choices || cfg_keys[row].flags & CFG_EMPTY_CLEARS);
}

static st_status put_override(cJSON *root, const char *assignment, reader *r)
{
    int i;
    const char *text;
    st_status s = parse_assignment(assignment, &i, &text);
    if (s) return collect(r, s);
    if (r->n_from_set == CONFIG_MAX_SETS)
        return collect(r, st_fail(ST_ERR_INVALID, "--set: more than %d overrides", CONFIG_MAX_SETS));
    for (cJSON *m = root->child, *next; m; m = next) {
        next = m->next;
        if (find_key(strip_dashes(m->string)) == i) cJSON_Delete(cJSON_DetachItemViaPointer(root, m));
    }
    /* "key=" of a choice key (where "" is never a choice) or of model_preset clears it as null does in a file: back
     * to the default, not given (an unset model_preset comes from model_family) */
    cJSON *item = clears(i, text) ? cJSON_CreateNull() : cJSON_CreateString(text);
    if (!item || !cJSON_AddItemToObject(root, cfg_keys[i].name, item)) return cJSON_Delete(item), oom();
    r->from_set[r->n_from_set++] = item;
    return ST_OK;
}

/* SimpleTuner's objects of settings (distillation_config: {"stage": ..., ...}, or the same as JSON text, or such an
 * object under the method's name, {"anyflow": {...}}) become
 * top-level members "distillation_config.stage", ..., which the registry has as rows: so their members are checked,
 * documented, refused or warned about as any key, and --set reaches them by the dotted name. */
static const char *const object_keys[] = {"distillation_config"};

static st_status flatten_objects(cJSON *root, const char *src)
{
    for (size_t k = 0; k < sizeof object_keys / sizeof *object_keys; k++) {
        cJSON *o = cJSON_DetachItemFromObjectCaseSensitive(root, object_keys[k]);
        if (!o || cJSON_IsNull(o)) {
            cJSON_Delete(o);
            continue;
        }
        if (cJSON_IsString(o)) { /* SimpleTuner's command line passes it as JSON text */
            cJSON *parsed = cJSON_Parse(o->valuestring);
            cJSON_Delete(o);
            o = parsed;
        }
        if (!cJSON_IsObject(o)) {
            cJSON_Delete(o);
            return st_fail(ST_ERR_INVALID, "%s: %s is not an object of settings ({\"name\": value, ...})", src,
                           object_keys[k]);
        }
        /* SimpleTuner reads the member named by the method when it has one ({"h3_drift": {...}}), else the object */
        const cJSON *method = cJSON_GetObjectItemCaseSensitive(root, "distillation_method");
        cJSON *own = cJSON_IsString(method) ? cJSON_GetObjectItemCaseSensitive(o, method->valuestring) : NULL;
        if (cJSON_IsObject(own)) {
            cJSON_DetachItemViaPointer(o, own);
            cJSON_Delete(o);
            o = own;
        }
        for (cJSON *m = o->child, *next; m; m = next) {
            next = m->next;
            char name[128];
            snprintf(name, sizeof name, "%s.%s", object_keys[k], m->string);
            cJSON *item = cJSON_DetachItemViaPointer(o, m);
            if (!cJSON_AddItemToObject(root, name, item)) {
                cJSON_Delete(item), cJSON_Delete(o);
                return oom();
            }
        }
        cJSON_Delete(o);
    }
    return ST_OK;
}

/* On ST_ERR_INVALID (bad keys or values, the JSON itself fine), *partial (when not NULL) receives the config with
 * every bad value at its default. */
static st_status parse_with(const char *json_text, const char *src, const char *const *sets, int n_sets,
                            config **out, config **partial)
{
    *out = NULL;
    if (partial) *partial = NULL;
    config *c = config_with_defaults();
    reader r = {.src = src, .given = calloc(2 * (size_t)cfg_key_count, sizeof *r.given)};
    if (!c || !r.given) {
        config_free(c);
        free(r.given);
        return oom();
    }
    cJSON *root = NULL;
    st_status s = parse_json(json_text, src, &root);
    if (!s) s = flatten_objects(root, src);
    for (int i = 0; !s && i < n_sets; i++) s = put_override(root, sets[i], &r);
    if (!s) s = apply_object(c, root, &r);
    cJSON_Delete(root);
    for (int k = 0; k < 3; k++) free(r.unknown[k].buf);
    free(r.notes.buf), free(r.errors.buf), free(r.given);
    if (s == ST_ERR_INVALID && partial) *partial = c;
    else if (s) config_free(c);
    else *out = c;
    return s;
}

st_status config_parse(const char *json_text, const char *source_name, config **out)
{
    return parse_with(json_text, source_name ? source_name : "config", NULL, 0, out, NULL);
}

/* The whole file; fread in a loop so that pipes and /dev/stdin work too (a FIFO without a writer reads as empty
 * rather than blocking). */
static st_status read_text(const char *path, char **text, size_t *len)
{
    FILE *f;
    st_status st = file_fopen_stream(path, &f);
    if (st) return st;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n + 1 < cap) break;
        char *bigger = realloc(buf, cap *= 2);
        if (!bigger) free(buf);
        buf = bigger;
    }
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf) return oom();
    if (err) {
        free(buf);
        return st_fail(ST_ERR_IO, "%s: cannot read: %s", path, strerror(err));
    }
    buf[n] = '\0';
    *text = buf, *len = n;
    return ST_OK;
}

st_status config_load_with(const char *path, const char *const *sets, int n_sets, config **out, config **partial)
{
    *out = NULL;
    if (partial) *partial = NULL;
    if (!path) return parse_with("{}", "defaults", sets, n_sets, out, partial);
    char *text = NULL;
    size_t len = 0;
    st_status s = read_text(path, &text, &len);
    if (s) return s;
    if (strlen(text) != len) s = st_fail(ST_ERR_FORMAT, "%s: contains a NUL byte at offset %zu, so it is not JSON text",
                                         path, strlen(text));
    else s = parse_with(text, path, sets, n_sets, out, partial);
    free(text);
    return s;
}

st_status config_load(const char *path, config **out) { return config_load_with(path, NULL, 0, out, NULL); }

st_status config_set(config *c, const char *assignment)
{
    int i;
    const char *text;
    st_status s = parse_assignment(assignment, &i, &text);
    if (s) return s;
    value v;
    if (clears(i, text)) {
        cJSON def = string_item(cfg_keys[i].def);
        if (convert(&cfg_keys[i], &def, false, &v) != CV_OK) return oom(); /* the default converted at creation */
        value_free(&c->v[i]);
        c->v[i] = v; /* not set */
        return ST_OK;
    }
    cJSON item = string_item(text);
    s = convert_value("--set", &cfg_keys[i], &item, &v, NULL);
    if (!s) store(c, i, &v);
    return s;
}

st_status config_set_all(config *c, const char *assignments)
{
    char *list = strdup(assignments);
    if (!list) return oom();
    st_status s = ST_OK;
    for (char *save = NULL, *kv = strtok_r(list, ";", &save); kv && !s; kv = strtok_r(NULL, ";", &save))
        s = config_set(c, kv);
    free(list);
    return s;
}
/* ---- getters -------------------------------------------------------------------------------------------------- */

#define TYPE(t) (1u << (t))

bool config_bool(const config *c, const char *key) { return get(c, key, TYPE(CFG_BOOL), __func__)->b; }
int64_t config_int(const config *c, const char *key) { return get(c, key, TYPE(CFG_INT), __func__)->i; }
double config_float(const config *c, const char *key) { return get(c, key, TYPE(CFG_FLOAT), __func__)->f; }

const char *config_string(const config *c, const char *key)
{
    return get(c, key, TYPE(CFG_STRING) | TYPE(CFG_SIZE), __func__)->s;
}

const int64_t *config_int_list(const config *c, const char *key, size_t *count)
{
    const value *v = get(c, key, TYPE(CFG_INT_LIST), __func__);
    *count = v->n;
    return v->n ? v->list : NULL;
}

bool config_is_set(const config *c, const char *key) { return get(c, key, ~0u, __func__)->set; }

st_status config_bytes(const config *c, const char *key, size_t *out)
{
    const value *v = get(c, key, TYPE(CFG_SIZE), __func__);
    *out = 0;
    if (!v->s[0]) return ST_OK;
    if (!parse_size(v->s, out))
        return st_fail(ST_ERR_INTERNAL, "config: %s: stored size \"%s\" does not parse", key, v->s);
    return ST_OK;
}

const char *config_warning(const config *c) { return c->warning; }

void config_warn(const config *c)
{
    for (const char *line = c->warning; line && *line;) {
        const size_t n = strcspn(line, "\n");
        st_warn("segtrain: warning: %.*s", (int)n, line);
        line += n + (line[n] == '\n');
    }
}
