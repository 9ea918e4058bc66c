/* The sweep's reports: sweep.md, sweep.json, sweep.csv and sweep.svg from a hand-built result covering every cell
 * status, two modes with identical plans, and names and errors that need escaping. */
#include "segtrain/status.h"
#include "segtrain/sweep.h"
#include "testkit.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

static const char *const FAILED_ERROR = "bad value \"x\" for lr, expected a number";
static const char *const OOM_ERROR = "out of device memory: needs 1.20 GiB, budget 512 MiB";
static const char *const UNSUPPORTED_ERROR = "the family cannot apply <offload> & friends";
static const char *const ODD_MODE = "x<y>&z";

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* ---- the hand-built result ---- */

static sweep_mode modes[4];
static size_t budgets[2] = {0, 512 * MIB};
static sweep_cell cells[8];

static sweep_cell *cell(int m, int b) { return &cells[m * 2 + b]; }

static void set_ok(sweep_cell *c, double sec, size_t peak)
{
    c->status = CELL_OK;
    c->steps = 5;
    c->sec_median = sec;
    c->sec_min = sec * 0.98;
    c->sec_max = sec * 1.03;
    c->peak_device = peak;
    c->peak_host = 3 * GIB;
    c->predicted_device = peak + 1000;
    c->predicted_host = 3 * GIB + 7;
    c->to_host = 12345;
    c->to_device = 23456;
}

static sweep_result build(void)
{
    const char *names[4] = {"none", "layer", "torch-ffn", ODD_MODE};
    for (int m = 0; m < 4; m++) {
        snprintf(modes[m].name, sizeof modes[m].name, "%s", names[m]);
        snprintf(modes[m].sets, sizeof modes[m].sets, "gradient_checkpointing=%s;x=%d", m ? "true" : "false", m);
    }
    memset(cells, 0, sizeof cells);
    for (int m = 0; m < 4; m++)
        for (int b = 0; b < 2; b++) {
            sweep_cell *c = cell(m, b);
            c->mode = m;
            c->device_memory = budgets[b];
            c->same_plan_as = -1;
            snprintf(c->plan, sizeof c->plan, "seq 0: plan of %s, segments [0,2), [2,4)", names[m]);
        }
    set_ok(cell(0, 0), 2.41, (size_t)(0.35 * (double)GIB));
    cell(0, 1)->status = CELL_OOM;
    cell(0, 1)->peak_device = (size_t)(1.2 * (double)GIB);
    snprintf(cell(0, 1)->error, SWEEP_TEXT_MAX, "%s", OOM_ERROR);
    set_ok(cell(1, 0), 2.9, (size_t)(0.0193 * (double)GIB));
    set_ok(cell(1, 1), 2.95, (size_t)(0.0193 * (double)GIB));
    set_ok(cell(2, 0), 2.91, (size_t)(0.0193 * (double)GIB));
    cell(2, 0)->same_plan_as = 1;
    cell(2, 1)->status = CELL_FAILED;
    cell(2, 1)->same_plan_as = 1;
    snprintf(cell(2, 1)->error, SWEEP_TEXT_MAX, "%s", FAILED_ERROR);
    cell(3, 0)->status = CELL_UNSUPPORTED;
    snprintf(cell(3, 0)->error, SWEEP_TEXT_MAX, "%s", UNSUPPORTED_ERROR);
    cell(3, 1)->status = CELL_NOT_RUN;

    sweep_result r = {0};
    snprintf(r.config, sizeof r.config, "configs/tiny.json");
    snprintf(r.preset, sizeof r.preset, "tiny");
    r.warmup = 2;
    r.steps = 5;
    snprintf(r.machine.cpu, sizeof r.machine.cpu, "Test CPU 9000");
    snprintf(r.machine.blas, sizeof r.machine.blas, "OpenBLAS 0.3.21");
    r.machine.cores = 16;
    r.machine.threads = 8;
    r.n_modes = 4;
    r.n_budgets = 2;
    r.modes = modes;
    r.budgets = budgets;
    r.cells = cells;
    return r;
}

/* ---- CSV: an RFC 4180 reader ---- */

#define CSV_MAX_ROWS 32
#define CSV_MAX_FIELDS 32

typedef struct csv_table {
    int rows;
    int fields[CSV_MAX_ROWS];
    char *cell[CSV_MAX_ROWS][CSV_MAX_FIELDS];
} csv_table;

/* Returns false on malformed input (a stray quote, too many rows or fields). */
static bool csv_parse(const char *s, csv_table *t)
{
    memset(t, 0, sizeof *t);
    size_t cap = strlen(s) + 1;
    while (*s) {
        if (t->rows == CSV_MAX_ROWS) return false;
        int row = t->rows++;
        for (;;) {
            if (t->fields[row] == CSV_MAX_FIELDS) return false;
            char *out = malloc(cap), *o = out;
            if (*s == '"') {
                s++;
                for (;;) {
                    if (!*s) return false;
                    if (*s == '"' && s[1] == '"') {
                        *o++ = '"';
                        s += 2;
                    } else if (*s == '"') {
                        s++;
                        break;
                    } else {
                        *o++ = *s++;
                    }
                }
                if (*s && *s != ',' && *s != '\r' && *s != '\n') return false;
            } else {
                while (*s && *s != ',' && *s != '\r' && *s != '\n') {
                    if (*s == '"') return false;
                    *o++ = *s++;
                }
            }
            *o = 0;
            t->cell[row][t->fields[row]++] = out;
            if (*s == ',') {
                s++;
                continue;
            }
            if (*s == '\r') s++;
            if (*s == '\n') s++;
            break;
        }
    }
    return true;
}

static void csv_free(csv_table *t)
{
    for (int r = 0; r < CSV_MAX_ROWS; r++)
        for (int f = 0; f < CSV_MAX_FIELDS; f++) free(t->cell[r][f]);
}

/* ---- XML: a small well-formedness checker ---- */

static bool xml_name_char(char c, bool first)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':') return true;
    return !first && ((c >= '0' && c <= '9') || c == '-' || c == '.');
}

/* An entity or character reference at s ('&'): its length, or 0 if invalid. */
static int xml_entity(const char *s)
{
    static const char *const named[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (int i = 0; i < 5; i++)
        if (!strncmp(s, named[i], strlen(named[i]))) return (int)strlen(named[i]);
    if (s[1] != '#') return 0;
    const char *p = s + 2;
    bool hex = *p == 'x';
    if (hex) p++;
    const char *digits = p;
    while ((*p >= '0' && *p <= '9') || (hex && ((*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))) p++;
    return p > digits && *p == ';' ? (int)(p - s + 1) : 0;
}

/* Character data or an attribute value up to stop: no '<', every '&' a reference, no control characters. */
static bool xml_chars(const char **ps, char stop, const char **why)
{
    const char *s = *ps;
    while (*s && *s != stop) {
        if (*s == '<' && stop != '<') return *why = "'<' in an attribute", false;
        if (*s == '&') {
            int n = xml_entity(s);
            if (!n) return *why = "bad '&'", false;
            s += n;
            continue;
        }
        if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\r' && *s != '\t')
            return *why = "control character", false;
        s++;
    }
    *ps = s;
    return true;
}

/* Well-formed: one root element, tags balanced and nested, names valid, attributes quoted and not repeated, text
 * escaped. Counts the elements named count_name into *counted. */
static bool xml_well_formed(const char *s, const char *count_name, int *counted, const char **why)
{
    const char *stack[64];
    size_t stack_len[64];
    int depth = 0, roots = 0;
    *counted = 0;
    *why = "";
    if (!strncmp(s, "<?xml", 5)) {
        const char *e = strstr(s, "?>");
        if (!e) return *why = "unterminated declaration", false;
        s = e + 2;
    }
    for (;;) {
        if (depth == 0) {
            while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++;
            if (!*s) break;
            if (*s != '<') return *why = "text outside the root", false;
        } else if (!xml_chars(&s, '<', why)) {
            return false;
        }
        if (!*s) return *why = "unterminated element", false;
        /* s at '<' */
        if (!strncmp(s, "<!--", 4)) {
            const char *e = strstr(s + 4, "-->");
            if (!e) return *why = "unterminated comment", false;
            s = e + 3;
            continue;
        }
        if (s[1] == '/') {
            s += 2;
            const char *name = s;
            while (xml_name_char(*s, s == name)) s++;
            size_t len = (size_t)(s - name);
            while (*s == ' ' || *s == '\n') s++;
            if (*s != '>') return *why = "bad end tag", false;
            s++;
            if (depth == 0 || stack_len[depth - 1] != len || strncmp(stack[depth - 1], name, len))
                return *why = "mismatched end tag", false;
            depth--;
            continue;
        }
        s++;
        const char *name = s;
        while (xml_name_char(*s, s == name)) s++;
        size_t len = (size_t)(s - name);
        if (!len) return *why = "bad tag name", false;
        if (depth == 0 && roots++) return *why = "more than one root", false;
        if (strlen(count_name) == len && !strncmp(name, count_name, len)) ++*counted;
        const char *attrs[64];
        size_t attr_len[64];
        int n_attrs = 0;
        for (;;) {
            bool space = false;
            while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++, space = true;
            if (*s == '>' || (s[0] == '/' && s[1] == '>')) break;
            if (!space) return *why = "attribute without a space before it", false;
            const char *an = s;
            while (xml_name_char(*s, s == an)) s++;
            size_t al = (size_t)(s - an);
            if (!al || *s != '=') return *why = "bad attribute", false;
            for (int i = 0; i < n_attrs; i++)
                if (attr_len[i] == al && !strncmp(attrs[i], an, al)) return *why = "repeated attribute", false;
            if (n_attrs == 64) return *why = "too many attributes", false;
            attrs[n_attrs] = an;
            attr_len[n_attrs++] = al;
            s++;
            char q = *s;
            if (q != '"' && q != '\'') return *why = "unquoted attribute", false;
            s++;
            if (!xml_chars(&s, q, why)) return false;
            if (*s != q) return *why = "unterminated attribute", false;
            s++;
        }
        if (*s == '/') {
            s += 2;
            continue;
        }
        s++;
        if (depth == 64) return *why = "too deep", false;
        stack[depth] = name;
        stack_len[depth++] = len;
    }
    if (depth) return *why = "unclosed element", false;
    if (roots != 1) return *why = "no root element", false;
    return true;
}

static void test_xml_checker(void)
{
    int n;
    const char *why;
    CHECK(xml_well_formed("<?xml version=\"1.0\"?>\n<a x=\"1\"><b/><b y='&amp;'>t &lt; u</b></a>\n", "b", &n, &why));
    CHECK(n == 2);
    CHECK(!xml_well_formed("<a><b></a></b>", "b", &n, &why));
    CHECK(!xml_well_formed("<a x=1/>", "b", &n, &why));
    CHECK(!xml_well_formed("<a>x & y</a>", "b", &n, &why));
    CHECK(!xml_well_formed("<a>x < y</a>", "b", &n, &why));
    CHECK(!xml_well_formed("<a x=\"1\" x=\"2\"/>", "b", &n, &why));
    CHECK(!xml_well_formed("<a/><b/>", "b", &n, &why));
    CHECK(!xml_well_formed("<a>", "b", &n, &why));
}

/* ---- the checks ---- */

static void check_markdown(const char *md)
{
    CHECK(strstr(md, "# segtrain sweep: tiny") == md);
    CHECK(strstr(md, "| mode "));
    CHECK(strstr(md, "| unlimited "));
    CHECK(strstr(md, "| 512 MiB "));
    CHECK(strstr(md, "| 2.41 s / 0.350 GiB "));
    CHECK(strstr(md, "| 2.90 s / 0.0193 GiB "));
    CHECK(strstr(md, "| 2.95 s / 0.0193 GiB "));
    CHECK(strstr(md, "| OOM (needs 1.20 GiB) "));
    CHECK(strstr(md, "| failed "));
    CHECK(strstr(md, "| unsupported "));
    CHECK(strstr(md, "| not run "));
    CHECK(strstr(md, "| torch-ffn (same plan as layer) "));
    CHECK(count_of(md, "same plan as") == 1);
    /* header, separator, 4 rows: every line of the table has 4 '|' (3 columns) */
    int table_lines = 0;
    for (const char *line = md; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (*line == '|') {
            table_lines++;
            const char *end = strchr(line, '\n');
            int bars = 0;
            for (const char *p = line; p < end; p++) bars += *p == '|';
            CHECKF(bars == 4, "table line with %d bars", bars);
        }
    CHECK(table_lines == 6);
    const char *notes = strstr(md, "Notes");
    CHECK(notes != NULL);
    if (notes) {
        CHECK(strstr(notes, "none, 512 MiB: OOM (needs 1.20 GiB): "));
        CHECK(strstr(notes, OOM_ERROR));
        CHECK(strstr(notes, "torch-ffn, 512 MiB: failed: "));
        CHECK(strstr(notes, FAILED_ERROR));
        CHECK(strstr(notes, "x<y>&z, unlimited: unsupported: "));
        CHECK(strstr(notes, UNSUPPORTED_ERROR));
        CHECK(!strstr(notes, "not run")); /* a not-run cell with no reason has no note */
    }
    CHECK(strstr(md, "Test CPU 9000, 16 cores, 8 threads, BLAS: OpenBLAS 0.3.21"));
    CHECK(strstr(md, "2 warm-up steps, then 5 measured steps"));
}

static const cJSON *field(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static bool is_num(const cJSON *o, const char *k, double want)
{
    const cJSON *v = field(o, k);
    return cJSON_IsNumber(v) && fabs(v->valuedouble - want) <= 1e-9 * fmax(1, fabs(want));
}

static bool is_str(const cJSON *o, const char *k, const char *want)
{
    const cJSON *v = field(o, k);
    return cJSON_IsString(v) && !strcmp(v->valuestring, want);
}

static void check_json(const char *text, const sweep_result *r)
{
    cJSON *j = cJSON_Parse(text);
    CHECK(j != NULL);
    if (!j) return;
    CHECK(is_str(j, "config", "configs/tiny.json"));
    CHECK(is_str(j, "preset", "tiny"));
    CHECK(is_num(j, "warmup", 2));
    CHECK(is_num(j, "steps", 5));
    const cJSON *mach = field(j, "machine");
    CHECK(is_str(mach, "cpu", "Test CPU 9000") && is_num(mach, "cores", 16) && is_num(mach, "threads", 8) &&
          is_str(mach, "blas", "OpenBLAS 0.3.21"));
    const cJSON *jm = field(j, "modes");
    CHECK(cJSON_IsArray(jm) && cJSON_GetArraySize(jm) == 4);
    for (int m = 0; m < 4 && cJSON_IsArray(jm); m++) {
        const cJSON *o = cJSON_GetArrayItem(jm, m);
        CHECK(is_str(o, "name", r->modes[m].name) && is_str(o, "sets", r->modes[m].sets));
    }
    const cJSON *jb = field(j, "device_memory");
    CHECK(cJSON_IsArray(jb) && cJSON_GetArraySize(jb) == 2);
    CHECK(cJSON_IsNumber(cJSON_GetArrayItem(jb, 0)) && cJSON_GetArrayItem(jb, 0)->valuedouble == 0);
    CHECK(cJSON_IsNumber(cJSON_GetArrayItem(jb, 1)) &&
          cJSON_GetArrayItem(jb, 1)->valuedouble == (double)(512 * MIB));

    static const char *const status_names[] = {"ok", "oom", "failed", "unsupported", "not_run"};
    const cJSON *jc = field(j, "cells");
    CHECK(cJSON_IsArray(jc) && cJSON_GetArraySize(jc) == 8);
    for (int i = 0; i < 8 && cJSON_IsArray(jc); i++) {
        const cJSON *o = cJSON_GetArrayItem(jc, i);
        const sweep_cell *c = &r->cells[i];
        int m = i / 2, b = i % 2;
        CHECKF(cJSON_GetArraySize(o) == 18, "cell %d has %d fields", i, cJSON_GetArraySize(o));
        CHECKF(cJSON_IsNull(cJSON_GetObjectItem(o, "reused_from_device_memory")), "cell %d was measured", i);
        CHECKF(is_str(o, "mode", r->modes[m].name), "cell %d mode", i);
        CHECKF(is_num(o, "device_memory", (double)r->budgets[b]), "cell %d device_memory", i);
        CHECKF(is_str(o, "status", status_names[c->status]), "cell %d status", i);
        CHECKF(is_str(o, "error", c->error), "cell %d error", i);
        if (c->status == CELL_OK) {
            CHECKF(is_num(o, "sec_per_step_median", c->sec_median) && is_num(o, "sec_per_step_min", c->sec_min) &&
                       is_num(o, "sec_per_step_max", c->sec_max),
                   "cell %d seconds", i);
        } else {
            CHECKF(cJSON_IsNull(field(o, "sec_per_step_median")) && cJSON_IsNull(field(o, "sec_per_step_min")) &&
                       cJSON_IsNull(field(o, "sec_per_step_max")),
                   "cell %d seconds are null", i);
        }
        CHECKF(is_num(o, "steps", c->steps), "cell %d steps", i);
        CHECKF(is_num(o, "peak_device_bytes", (double)c->peak_device) &&
                   is_num(o, "peak_host_bytes", (double)c->peak_host) &&
                   is_num(o, "predicted_peak_device_bytes", (double)c->predicted_device) &&
                   is_num(o, "predicted_peak_host_bytes", (double)c->predicted_host) &&
                   is_num(o, "bytes_to_host_per_step", (double)c->to_host) &&
                   is_num(o, "bytes_to_device_per_step", (double)c->to_device),
               "cell %d bytes", i);
        CHECKF(is_str(o, "plan", c->plan), "cell %d plan", i);
        if (m == 2) CHECKF(is_str(o, "same_plan_as", "layer"), "cell %d same_plan_as", i);
        else CHECKF(cJSON_IsNull(field(o, "same_plan_as")), "cell %d same_plan_as is null", i);
    }
    cJSON_Delete(j);
}

static void check_csv(const char *text, const sweep_result *r)
{
    csv_table t;
    bool parsed = csv_parse(text, &t);
    CHECK(parsed);
    CHECK(t.rows == 9);
    for (int row = 0; row < t.rows; row++) CHECKF(t.fields[row] == 17, "csv row %d has %d fields", row, t.fields[row]);
    if (parsed && t.rows == 9) {
        CHECK(!strcmp(t.cell[0][0], "mode") && !strcmp(t.cell[0][2], "status") &&
              !strcmp(t.cell[0][15], "same_plan_as"));
        /* row 6: torch-ffn at 512 MiB, the failed cell whose error holds a comma and quotes */
        CHECK(!strcmp(t.cell[6][0], "torch-ffn") && !strcmp(t.cell[6][1], "536870912"));
        CHECK(!strcmp(t.cell[6][2], "failed"));
        CHECK(!strcmp(t.cell[6][3], FAILED_ERROR));
        CHECK(!strcmp(t.cell[6][4], ""));
        CHECK(!strcmp(t.cell[6][14], r->cells[5].plan)); /* the plan holds commas too */
        CHECK(!strcmp(t.cell[6][15], "layer"));
        CHECK(!strcmp(t.cell[1][2], "ok") && fabs(atof(t.cell[1][4]) - 2.41) < 1e-9);
        CHECK(!strcmp(t.cell[1][8], "375809638"));
        CHECK(!strcmp(t.cell[7][0], ODD_MODE) && !strcmp(t.cell[7][2], "unsupported"));
        CHECK(!strcmp(t.cell[8][2], "not_run") && !strcmp(t.cell[8][15], ""));
    }
    csv_free(&t);
}

static void check_svg(const char *svg)
{
    int circles = 0;
    const char *why = "";
    bool ok = xml_well_formed(svg, "circle", &circles, &why);
    CHECKF(ok, "sweep.svg is not well-formed: %s", why);
    CHECK(strstr(svg, "xmlns=\"http://www.w3.org/2000/svg\""));
    CHECK(strstr(svg, "viewBox=\"0 0 "));
    CHECK(strstr(svg, " width=\"") && strstr(svg, " height=\""));
    /* plotted: none, and layer = torch-ffn as one point; x<y>&z has no ok cell */
    CHECKF(circles == 2, "%d circles", circles);
    CHECK(strstr(svg, ">none</text>"));
    CHECK(strstr(svg, ">layer = torch-ffn</text>"));
    CHECK(strstr(svg, "x&lt;y&gt;&amp;z"));
    CHECK(!strstr(svg, ODD_MODE));
    CHECK(strstr(svg, "peak device memory (MiB)"));
    CHECK(strstr(svg, "seconds per step"));
    CHECK(strstr(svg, "segtrain sweep: tiny"));
    CHECK(strstr(svg, "Test CPU 9000"));
}

/* Points with identical coordinates and different plans: one circle each, labels stacked, not on top of each
 * other. */
static void test_stacked_labels(const char *dir)
{
    sweep_mode m3[3];
    size_t b1[1] = {0};
    sweep_cell c3[3];
    memset(c3, 0, sizeof c3);
    const char *names[3] = {"alpha", "beta", "gamma"};
    for (int m = 0; m < 3; m++) {
        snprintf(m3[m].name, sizeof m3[m].name, "%s", names[m]);
        m3[m].sets[0] = 0;
        c3[m].mode = m;
        c3[m].same_plan_as = -1;
        set_ok(&c3[m], 1.5, 3 * GIB);
    }
    sweep_result r = {.n_modes = 3, .n_budgets = 1, .modes = m3, .budgets = b1, .cells = c3, .warmup = 1, .steps = 2};
    CHECK(sweep_write_reports(&r, dir) == ST_OK);
    char *md = tk_read_file(dir, "sweep.md");
    CHECK(md && strstr(md, " 1 warm-up step, then 2 measured steps per cell."));
    free(md);
    char *svg = tk_read_file(dir, "sweep.svg");
    CHECK(svg != NULL);
    if (!svg) return;
    int circles = 0;
    const char *why = "";
    CHECKF(xml_well_formed(svg, "circle", &circles, &why), "not well-formed: %s", why);
    CHECK(circles == 3);
    CHECK(strstr(svg, "peak device memory (GiB)"));
    /* each label at its own spot: on another line, or on the other side of the point */
    double ys[3];
    bool left[3];
    for (int m = 0; m < 3; m++) {
        char needle[64];
        snprintf(needle, sizeof needle, ">%s</text>", names[m]);
        const char *p = strstr(svg, needle);
        CHECK(p != NULL);
        ys[m] = -1;
        left[m] = false;
        while (p && p > svg && strncmp(p, "<text ", 6)) p--;
        const char *y = p ? strstr(p, " y=\"") : NULL;
        const char *close = p ? strchr(p, '>') : NULL;
        if (y) ys[m] = atof(y + 4);
        if (close) {
            const char *a = strstr(p, "text-anchor=\"end\"");
            left[m] = a && a < close;
        }
    }
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            CHECKF(fabs(ys[i] - ys[j]) >= 12 || left[i] != left[j], "labels %s and %s on top of each other", names[i],
                   names[j]);
    free(svg);
}

static void check_folder_holds_only_reports(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        CHECKF(!strcmp(e->d_name, "sweep.md") || !strcmp(e->d_name, "sweep.json") || !strcmp(e->d_name, "sweep.csv") ||
                   !strcmp(e->d_name, "sweep.svg"),
               "unexpected file %s", e->d_name);
    }
    closedir(d);
    CHECK(n == 4);
}

static void remove_reports(const char *dir)
{
    static const char *const names[] = {"sweep.md", "sweep.json", "sweep.csv", "sweep.svg"};
    char path[512];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
}

int main(void)
{
    CHECK(!strcmp(cell_status_name(CELL_OK), "ok"));
    CHECK(!strcmp(cell_status_name(CELL_OOM), "oom"));
    CHECK(!strcmp(cell_status_name(CELL_FAILED), "failed"));
    CHECK(!strcmp(cell_status_name(CELL_UNSUPPORTED), "unsupported"));
    CHECK(!strcmp(cell_status_name(CELL_NOT_RUN), "not_run"));
    test_xml_checker();

    char dir[] = "/tmp/segtrain_sweep_report_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    sweep_result r = build();
    st_status s = sweep_write_reports(&r, dir);
    CHECKF(s == ST_OK, "sweep_write_reports: %s", st_error());
    check_folder_holds_only_reports(dir);

    char *md = tk_read_file(dir, "sweep.md");
    char *json = tk_read_file(dir, "sweep.json");
    char *csv = tk_read_file(dir, "sweep.csv");
    char *svg = tk_read_file(dir, "sweep.svg");
    CHECK(md && json && csv && svg);
    if (md) check_markdown(md);
    if (json) check_json(json, &r);
    if (csv) check_csv(csv, &r);
    if (svg) check_svg(svg);

    /* the terminal's table is the file's */
    char *term = NULL;
    size_t term_len = 0;
    FILE *mf = open_memstream(&term, &term_len);
    CHECK(mf != NULL);
    if (mf) {
        sweep_write_markdown(&r, mf);
        fclose(mf);
        CHECK(md && !strcmp(term, md));
    }
    free(term);
    if (getenv("SWEEP_REPORT_KEEP")) printf("reports in %s\n", dir); /* to look at them */
    free(md);
    free(json);
    free(csv);
    free(svg);

    /* a folder that does not exist: an i/o error naming it, nothing written */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/folder", dir);
    CHECK(sweep_write_reports(&r, missing) == ST_ERR_IO);
    CHECK(strstr(st_error(), "no/such/folder") != NULL);
    CHECK(sweep_write_reports(NULL, dir) == ST_ERR_INVALID);

    if (!getenv("SWEEP_REPORT_KEEP")) {
        char dir2[] = "/tmp/segtrain_sweep_report_XXXXXX";
        CHECK(mkdtemp(dir2) != NULL);
        test_stacked_labels(dir2);
        remove_reports(dir2);
        rmdir(dir2);
        remove_reports(dir);
        rmdir(dir);
    }
    return tk_finish();
}
