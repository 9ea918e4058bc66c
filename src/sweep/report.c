/* The sweep's reports: sweep.md (the table users read), sweep.json and sweep.csv (every number of every cell),
 * and sweep.svg (sec/step against peak device memory, one point per mode). Each file is written atomically. */
#include "segtrain/fileio.h"
#include "segtrain/status.h"
#include "segtrain/sweep.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GIB_F (1024.0 * 1024.0 * 1024.0)
#define MIB_F (1024.0 * 1024.0)

const char *cell_status_name(cell_status s)
{
    switch (s) {
    case CELL_OK: return "ok";
    case CELL_OOM: return "oom";
    case CELL_FAILED: return "failed";
    case CELL_UNSUPPORTED: return "unsupported";
    case CELL_NOT_RUN: return "not_run";
    }
    return "unknown";
}

/* ---- shared helpers ------------------------------------------------------------------------------------------ */

/* x with 3 significant digits and no exponent: 2.41, 12.3, 0.0193, 1234. */
static void sig3(char *buf, size_t n, double x)
{
    if (!isfinite(x)) {
        snprintf(buf, n, "%s", isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
        return;
    }
    if (x == 0) {
        snprintf(buf, n, "0");
        return;
    }
    char e[40];
    snprintf(e, sizeof e, "%.2e", x); /* the exponent after rounding to 3 digits, so 9.996 counts as 10.0 */
    const char *ep = strchr(e, 'e');
    int exp10 = ep ? atoi(ep + 1) : 0;
    int dec = exp10 >= 2 ? 0 : 2 - exp10;
    if (dec > 15) dec = 15;
    snprintf(buf, n, "%.*f", dec, x);
}

void sweep_size_text(char *buf, size_t n, size_t bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    uint64_t v = bytes;
    int u = 0;
    while (u < 4 && v >= ((uint64_t)1 << (10 * (u + 1)))) u++;
    uint64_t base = (uint64_t)1 << (10 * u);
    if (v % base == 0) {
        snprintf(buf, n, "%llu %s", (unsigned long long)(v / base), unit[u]);
    } else {
        char num[40];
        sig3(num, sizeof num, (double)v / (double)base);
        snprintf(buf, n, "%s %s", num, unit[u]);
    }
}

static void budget_name(char *buf, size_t n, size_t budget)
{
    if (budget == 0) snprintf(buf, n, "unlimited");
    else sweep_size_text(buf, n, budget);
}

static const sweep_cell *cell_at(const sweep_result *r, int m, int b)
{
    return &r->cells[(size_t)m * r->n_budgets + b];
}

/* The earlier mode whose plan this mode's plan is identical to (the first cell of the row that names one), or -1. */
static int same_plan_mode(const sweep_result *r, int m)
{
    for (int b = 0; b < r->n_budgets; b++) {
        int k = cell_at(r, m, b)->same_plan_as;
        if (k >= 0 && k < r->n_modes && k != m) return k;
    }
    return -1;
}

/* A cell's same_plan_as, validated: a mode index, or -1. */
static int cell_same_plan(const sweep_result *r, int m, const sweep_cell *c)
{
    int k = c->same_plan_as;
    return (k >= 0 && k < r->n_modes && k != m) ? k : -1;
}

bool sweep_cell_noisy(const sweep_cell *c)
{
    return c->status == CELL_OK && c->steps >= 2 && c->sec_min > 0 && c->sec_max > c->sec_min * SWEEP_NOISY_SPREAD;
}

int sweep_noisy_cells(const sweep_result *r)
{
    int n = 0;
    for (int i = 0; i < r->n_modes * r->n_budgets; i++) n += sweep_cell_noisy(&r->cells[i]);
    return n;
}

void sweep_cell_text(const sweep_cell *c, char *buf, size_t n)
{
    char a[40], g[40];
    switch (c->status) {
    case CELL_OK:
        sig3(a, sizeof a, c->sec_median);
        sig3(g, sizeof g, (double)c->peak_device / GIB_F);
        snprintf(buf, n, "%s s / %s GiB", a, g);
        return;
    case CELL_OOM:
        if (c->peak_device) {
            sig3(g, sizeof g, (double)c->peak_device / GIB_F);
            snprintf(buf, n, "OOM (needs %s GiB)", g);
        } else {
            snprintf(buf, n, "OOM");
        }
        return;
    case CELL_FAILED: snprintf(buf, n, "failed"); return;
    case CELL_UNSUPPORTED: snprintf(buf, n, "unsupported"); return;
    case CELL_NOT_RUN: snprintf(buf, n, "not run"); return;
    }
    snprintf(buf, n, "?");
}

/* ---- sweep.md ------------------------------------------------------------------------------------------------ */

/* Copies s into buf for a Markdown table cell: '|' escaped, control characters as spaces. */
static void md_escape(char *buf, size_t n, const char *s)
{
    size_t o = 0;
    for (; *s && o + 3 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '|') {
            buf[o++] = '\\';
            buf[o++] = '|';
        } else {
            buf[o++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
        }
    }
    buf[o] = 0;
}

/* Characters on screen, counting a UTF-8 sequence as one. */
static int display_width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

#define MD_CELL_MAX (5 * SWEEP_NAME_MAX)

static void row_name(const sweep_result *r, int m, char *buf, size_t n)
{
    char name[2 * SWEEP_NAME_MAX + 4];
    md_escape(name, sizeof name, r->modes[m].name);
    int k = same_plan_mode(r, m);
    if (k >= 0) {
        char other[2 * SWEEP_NAME_MAX + 4];
        md_escape(other, sizeof other, r->modes[k].name);
        snprintf(buf, n, "%s (same plan as %s)", name, other);
    } else {
        snprintf(buf, n, "%s", name);
    }
}

/* Column b of row m (b = -1: the mode column; m = -1: the header). */
static void md_cell(const sweep_result *r, int m, int b, char *buf, size_t n)
{
    if (m < 0 && b < 0) snprintf(buf, n, "mode");
    else if (m < 0) budget_name(buf, n, r->budgets[b]);
    else if (b < 0) row_name(r, m, buf, n);
    else {
        const sweep_cell *c = cell_at(r, m, b);
        sweep_cell_text(c, buf, n);
        if (sweep_cell_noisy(c)) snprintf(buf + strlen(buf), n - strlen(buf), " (noisy)");
    }
}

static void md_one_line(FILE *f, const char *s)
{
    for (; *s; s++) fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
}

void sweep_write_markdown_table(const sweep_result *r, FILE *f)
{
    /* Columns padded to their widest entry, so the table also reads as plain text in a terminal. */
    char buf[MD_CELL_MAX];
    int *widths = calloc((size_t)r->n_budgets + 1, sizeof *widths); /* NULL: the table unpadded */
    for (int b = -1; b < r->n_budgets; b++) {
        int width = 3;
        for (int m = -1; m < r->n_modes; m++) {
            md_cell(r, m, b, buf, sizeof buf);
            int w = display_width(buf);
            if (w > width) width = w;
        }
        if (widths) widths[b + 1] = width;
    }
    for (int m = -1; m < r->n_modes; m++) {
        for (int b = -1; b < r->n_budgets; b++) {
            md_cell(r, m, b, buf, sizeof buf);
            fprintf(f, "| %s ", buf);
            int pad = widths ? widths[b + 1] - display_width(buf) : 0;
            for (int i = 0; i < pad; i++) fputc(' ', f);
        }
        fprintf(f, "|\n");
        if (m < 0) {
            for (int b = -1; b < r->n_budgets; b++) {
                int w = widths ? widths[b + 1] : 3;
                fputs("|", f);
                for (int i = 0; i < w + 2; i++) fputc('-', f);
            }
            fprintf(f, "|\n");
        }
    }
    free(widths);
}

void sweep_write_markdown(const sweep_result *r, FILE *f)
{
    fprintf(f, "# segtrain sweep: %s%s%s (config: ", r->preset[0] ? r->preset : "?", r->precision[0] ? " in " : "",
            r->precision);
    md_one_line(f, r->config[0] ? r->config : "defaults");
    fprintf(f, ")\n\n");
    sweep_write_markdown_table(r, f);
    if (r->predicted)
        fprintf(f, "\nEach cell: predicted seconds per step (the cost model at this machine's rates) / predicted peak "
                   "device memory (a dry step: exact for this engine).\n");
    else
        fprintf(f, "\nEach cell: median seconds per optimizer step after the warm-up / peak device memory of the "
                   "measured steps.\n");

    const int noisy = sweep_noisy_cells(r);
    if (noisy)
        fprintf(f, "\n**The machine was busy**: in %d cell%s marked (noisy), the slowest measured step took more than "
                   "%.1fx the fastest, so something else had the cores; those times are not results, and the order of "
                   "the modes may be wrong. Rerun on a quiet machine (`segtrain selfcheck` says when it is loaded).\n",
                noisy, noisy == 1 ? "" : "s", SWEEP_NOISY_SPREAD);

    bool any = false;
    for (int m = 0; m < r->n_modes; m++) {
        for (int b = 0; b < r->n_budgets; b++) {
            const sweep_cell *c = cell_at(r, m, b);
            bool noted = c->status == CELL_OOM || c->status == CELL_FAILED || c->status == CELL_UNSUPPORTED ||
                         (c->status != CELL_OK && c->error[0]) || sweep_cell_noisy(c);
            if (!noted) continue;
            if (!any) fprintf(f, "\nNotes:\n\n");
            any = true;
            char budget[48], text[64];
            budget_name(budget, sizeof budget, r->budgets[b]);
            sweep_cell_text(c, text, sizeof text);
            fputs("- ", f);
            md_one_line(f, r->modes[m].name);
            fprintf(f, ", %s: %s: ", budget, text);
            if (c->status == CELL_OK) {
                char lo[40], hi[40];
                sig3(lo, sizeof lo, c->sec_min);
                sig3(hi, sizeof hi, c->sec_max);
                fprintf(f, "noisy: its steps took %s to %s s (%.1fx)", lo, hi, c->sec_max / c->sec_min);
            } else {
                md_one_line(f, c->error[0] ? c->error : "(no reason recorded)");
            }
            fputc('\n', f);
        }
    }

    /* a budget that binds nothing runs the same steps: those cells are the earlier column's runs, said once */
    for (int b = 0; b < r->n_budgets; b++) {
        int n = 0;
        for (int m = 0; m < r->n_modes; m++) {
            const int from = cell_at(r, m, b)->reused_from - 1;
            if (from < 0 || from >= r->n_budgets) continue;
            char budget[48], other[48];
            budget_name(budget, sizeof budget, r->budgets[b]);
            budget_name(other, sizeof other, r->budgets[from]);
            if (!n++) fprintf(f, "\nNot measured again, the budget %s binding nothing (the %s column's runs): ", budget, other);
            else fputs(", ", f);
            md_one_line(f, r->modes[m].name);
        }
        if (n) fputs(".\n", f);
    }

    const machine_info *mi = &r->machine;
    fprintf(f, "\nMachine: ");
    md_one_line(f, mi->cpu[0] ? mi->cpu : "unknown CPU");
    fprintf(f, ", %d cores, %d threads, BLAS: ", mi->cores, mi->threads);
    md_one_line(f, mi->blas[0] ? mi->blas : "unknown");
    if (r->predicted) fprintf(f, ". Predicted: no step ran.\n");
    else
        fprintf(f, ". %d warm-up step%s, then %d measured step%s per cell.\n", r->warmup, r->warmup == 1 ? "" : "s",
                r->steps, r->steps == 1 ? "" : "s");
}

/* ---- sweep.json ---------------------------------------------------------------------------------------------- */

/* a cell's byte counts, in the order and under the names sweep.json and sweep.csv both give them */
static const struct {
    const char *name;
    size_t offset;
} cell_bytes[] = {{"peak_device_bytes", offsetof(sweep_cell, peak_device)},
                  {"peak_host_bytes", offsetof(sweep_cell, peak_host)},
                  {"predicted_peak_device_bytes", offsetof(sweep_cell, predicted_device)},
                  {"predicted_peak_host_bytes", offsetof(sweep_cell, predicted_host)},
                  {"bytes_to_host_per_step", offsetof(sweep_cell, to_host)},
                  {"bytes_to_device_per_step", offsetof(sweep_cell, to_device)}};
enum { CELL_BYTES = sizeof cell_bytes / sizeof *cell_bytes };

static size_t cell_bytes_at(const sweep_cell *c, int i)
{
    return *(const size_t *)((const char *)c + cell_bytes[i].offset);
}

static bool j_num(cJSON *o, const char *k, double v) { return cJSON_AddNumberToObject(o, k, v) != NULL; }
static bool j_str(cJSON *o, const char *k, const char *v) { return cJSON_AddStringToObject(o, k, v) != NULL; }
static bool j_null(cJSON *o, const char *k) { return cJSON_AddNullToObject(o, k) != NULL; }

cJSON *sweep_result_json(const sweep_result *r)
{
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    ok = ok && j_str(root, "config", r->config) && j_str(root, "preset", r->preset) &&
         (r->precision[0] ? j_str(root, "precision", r->precision) : j_null(root, "precision"));
    ok = ok && j_num(root, "warmup", r->warmup) && j_num(root, "steps", r->steps);
    if (r->predicted) /* no step ran: its times are the cost model's, its peaks a dry step's */
        ok = ok && cJSON_AddTrueToObject(root, "predicted");
    ok = ok && cJSON_AddBoolToObject(root, "machine_busy", sweep_noisy_cells(r) > 0) &&
         j_num(root, "noisy_spread", SWEEP_NOISY_SPREAD);
    cJSON *mach = ok ? cJSON_AddObjectToObject(root, "machine") : NULL;
    ok = ok && mach && j_str(mach, "cpu", r->machine.cpu) && j_num(mach, "cores", r->machine.cores) &&
         j_num(mach, "threads", r->machine.threads) && j_str(mach, "blas", r->machine.blas);
    cJSON *modes = ok ? cJSON_AddArrayToObject(root, "modes") : NULL;
    ok = ok && modes;
    for (int m = 0; ok && m < r->n_modes; m++) {
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(modes, o);
        if (!ok) cJSON_Delete(o);
        ok = ok && j_str(o, "name", r->modes[m].name) && j_str(o, "sets", r->modes[m].sets);
    }
    cJSON *budgets = ok ? cJSON_AddArrayToObject(root, "device_memory") : NULL;
    ok = ok && budgets;
    for (int b = 0; ok && b < r->n_budgets; b++) {
        cJSON *n = cJSON_CreateNumber((double)r->budgets[b]);
        ok = n && cJSON_AddItemToArray(budgets, n);
        if (!ok) cJSON_Delete(n);
    }
    cJSON *cells = ok ? cJSON_AddArrayToObject(root, "cells") : NULL;
    ok = ok && cells;
    for (int m = 0; ok && m < r->n_modes; m++) {
        for (int b = 0; ok && b < r->n_budgets; b++) {
            const sweep_cell *c = cell_at(r, m, b);
            cJSON *o = cJSON_CreateObject();
            ok = o && cJSON_AddItemToArray(cells, o);
            if (!ok) {
                cJSON_Delete(o);
                break;
            }
            ok = j_str(o, "mode", r->modes[m].name) && j_num(o, "device_memory", (double)r->budgets[b]) &&
                 j_str(o, "status", cell_status_name(c->status)) && j_str(o, "error", c->error);
            if (c->status == CELL_OK)
                ok = ok && j_num(o, "sec_per_step_median", c->sec_median) &&
                     j_num(o, "sec_per_step_min", c->sec_min) && j_num(o, "sec_per_step_max", c->sec_max);
            else
                ok = ok && j_null(o, "sec_per_step_median") && j_null(o, "sec_per_step_min") &&
                     j_null(o, "sec_per_step_max");
            ok = ok && j_num(o, "steps", c->steps);
            for (int i = 0; ok && i < CELL_BYTES; i++) ok = j_num(o, cell_bytes[i].name, (double)cell_bytes_at(c, i));
            ok = ok && j_str(o, "plan", c->plan);
            int k = cell_same_plan(r, m, c);
            ok = ok && (k >= 0 ? j_str(o, "same_plan_as", r->modes[k].name) : j_null(o, "same_plan_as"));
            const int from = c->reused_from - 1; /* the column whose run this cell is (its budget binds nothing) */
            ok = ok && (from >= 0 && from < r->n_budgets ? j_num(o, "reused_from_device_memory", (double)r->budgets[from])
                                                         : j_null(o, "reused_from_device_memory"));
            ok = ok && cJSON_AddBoolToObject(o, "noisy", sweep_cell_noisy(c));
        }
    }
    if (!ok) cJSON_Delete(root);
    return ok ? root : NULL;
}

st_status sweep_print_json(cJSON *root, FILE *f, const char *what)
{
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return st_host_oom("building %s", what);
    fputs(text, f);
    fputc('\n', f);
    free(text);
    return ST_OK;
}

static st_status write_json(const void *r, FILE *f)
{
    return sweep_print_json(sweep_result_json(r), f, "sweep.json");
}

/* ---- sweep.csv ----------------------------------------------------------------------------------------------- */

/* One RFC 4180 field: quoted (quotes doubled) when it holds a comma, a quote or a line break. */
static void csv_field(FILE *f, const char *s, bool last)
{
    if (strpbrk(s, ",\"\r\n")) {
        fputc('"', f);
        for (; *s; s++) {
            if (*s == '"') fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    } else {
        fputs(s, f);
    }
    fputs(last ? "\r\n" : ",", f);
}

static void csv_size(FILE *f, size_t v)
{
    fprintf(f, "%llu,", (unsigned long long)v);
}

static void csv_sec(FILE *f, const sweep_cell *c, double v)
{
    if (c->status == CELL_OK && isfinite(v)) fprintf(f, "%.9g", v);
    fputc(',', f);
}

void sweep_write_csv(const sweep_result *r, FILE *f, const char *const *lead_names, const char *const *lead_values,
                     int n_lead, bool header)
{
    static const char *const names[] = {"mode", "device_memory", "status", "error", "sec_per_step_median",
                                        "sec_per_step_min", "sec_per_step_max", "steps"};
    for (int i = 0; header && i < n_lead; i++) csv_field(f, lead_names[i], false);
    for (int i = 0; header && i < (int)(sizeof names / sizeof names[0]); i++) csv_field(f, names[i], false);
    for (int i = 0; header && i < CELL_BYTES; i++) csv_field(f, cell_bytes[i].name, false);
    if (header) csv_field(f, "plan", false), csv_field(f, "same_plan_as", false), csv_field(f, "noisy", true);
    for (int m = 0; m < r->n_modes; m++) {
        for (int b = 0; b < r->n_budgets; b++) {
            const sweep_cell *c = cell_at(r, m, b);
            for (int i = 0; i < n_lead; i++) csv_field(f, lead_values[i], false);
            csv_field(f, r->modes[m].name, false);
            csv_size(f, r->budgets[b]);
            csv_field(f, cell_status_name(c->status), false);
            csv_field(f, c->error, false);
            csv_sec(f, c, c->sec_median);
            csv_sec(f, c, c->sec_min);
            csv_sec(f, c, c->sec_max);
            fprintf(f, "%d,", c->steps);
            for (int i = 0; i < CELL_BYTES; i++) csv_size(f, cell_bytes_at(c, i));
            csv_field(f, c->plan, false);
            int k = cell_same_plan(r, m, c);
            csv_field(f, k >= 0 ? r->modes[k].name : "", false);
            csv_field(f, sweep_cell_noisy(c) ? "1" : "0", true);
        }
    }
}

static st_status write_csv(const void *r, FILE *f)
{
    sweep_write_csv(r, f, NULL, NULL, 0, true);
    return ST_OK;
}

/* ---- sweep.svg ----------------------------------------------------------------------------------------------- */

/* Length of a valid UTF-8 sequence starting at s, or 0 if it is not one. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 2 && s[0] < 0xC2) return 0; /* overlong */
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return n;
}

/* Text for XML character data or an attribute value: markup escaped, control characters and bytes that are not
 * UTF-8 replaced, at most max_chars characters (then "..."; max_chars <= 0: no limit). */
static void xml_text(FILE *f, const char *s, int max_chars)
{
    const unsigned char *p = (const unsigned char *)s;
    for (int chars = 0; *p; chars++) {
        if (max_chars > 0 && chars == max_chars) {
            fputs("...", f);
            return;
        }
        int n = utf8_len(p);
        if (n == 0) {
            fputc('?', f);
            p++;
            continue;
        }
        if (n > 1) {
            fwrite(p, 1, (size_t)n, f);
            p += n;
            continue;
        }
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*p < 0x20 || *p == 0x7f ? ' ' : *p, f);
        }
        p++;
    }
}

/* The cell a mode is plotted with: its unlimited-budget cell when that ran ok, else its first column that did. */
static int plotted_column(const sweep_result *r, int m)
{
    for (int b = 0; b < r->n_budgets; b++)
        if (r->budgets[b] == 0 && cell_at(r, m, b)->status == CELL_OK) return b;
    for (int b = 0; b < r->n_budgets; b++)
        if (cell_at(r, m, b)->status == CELL_OK) return b;
    return -1;
}

/* The first mode of the same_plan_as chain (the earliest mode with this mode's plan). */
static int plan_root(const sweep_result *r, int m)
{
    for (int hops = 0; hops < r->n_modes; hops++) {
        int k = same_plan_mode(r, m);
        if (k < 0) break;
        m = k;
    }
    return m;
}

/* An axis from 0 with a round step and about 5 ticks, covering max. */
static void nice_axis(double max, double *step, double *top, int *decimals)
{
    if (!(max > 0) || !isfinite(max)) max = 1;
    double raw = max / 5;
    double mag = pow(10, floor(log10(raw)));
    double norm = raw / mag;
    double s = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10) * mag;
    double t = ceil(max * 1.04 / s) * s;
    int d = 0;
    while (d < 12) {
        double scaled = s * pow(10, d);
        if (fabs(scaled - round(scaled)) <= 1e-6 * scaled) break;
        d++;
    }
    *step = s;
    *top = t;
    *decimals = d;
}

typedef struct svg_point {
    int rep;             /* the first mode of the group: its cell gives the coordinates */
    double x, y;         /* data: peak in the axis unit, sec/step */
    double px, py;       /* pixels */
    double lx, ly;       /* label anchor */
    bool anchor_end;     /* label to the left of the point */
    double w;            /* estimated label width in pixels */
} svg_point;

/* The picture's layout in pixels: the plot area, and the line height of the labels. */
enum { SVG_W = 820, SVG_H = 570, PLOT_L = 86, PLOT_R = 780, PLOT_T = 92, PLOT_B = 460, LINE_PX = 15 };
#define LABEL_PX 6.5 /* the estimated width of a character of the 12px labels, on the safe side */

/* The box of point g's label as placed: [x0, x1] x [y0, y1]. */
static void label_box(const svg_point *p, double *x0, double *x1, double *y0, double *y1)
{
    *x0 = p->anchor_end ? p->lx - p->w : p->lx;
    *x1 = *x0 + p->w;
    *y0 = p->ly - 11;
    *y1 = p->ly + 3;
}

/* Whether point g's label, as placed, overlaps no label of points 0..g-1 and none of the ng points; with
 * in_picture, also whether it stays inside the plot area. */
static bool label_fits(const svg_point *pt, int ng, int g, bool in_picture)
{
    double x0, x1, y0, y1;
    label_box(&pt[g], &x0, &x1, &y0, &y1);
    if (x0 < 2 || x1 > SVG_W - 4) return false;
    if (in_picture && (y0 < PLOT_T - 4 || y1 > PLOT_B - 2)) return false;
    for (int j = 0; j < g; j++) {
        double a0, a1, b0, b1;
        label_box(&pt[j], &a0, &a1, &b0, &b1);
        if (x0 < a1 && a0 < x1 && y0 < b1 && b0 < y1) return false;
    }
    for (int j = 0; j < ng; j++) {
        if (x0 < pt[j].px + 6 && pt[j].px - 6 < x1 && y0 < pt[j].py + 6 && pt[j].py - 6 < y1) return false;
    }
    return true;
}

/* Places point g's label (in mode order, after those of points 0..g-1): at the first free spot, nearest first:
 * right of the point, left of it, then a line above or below on either side, then two lines, and so on. Free: in
 * the picture, covering no point and no label already placed. Points with the same coordinates thus get their
 * labels side by side or stacked, never on top of each other. A label off its point's line gets a leader line. */
static void place_label(svg_point *pt, int ng, int g)
{
    svg_point *p = &pt[g];
    for (int pass = 0; pass < 2; pass++) { /* the second pass lets the label leave the plot area */
        for (int level = 0; level <= ng + 1; level++) {
            for (int k = 0; k < (level ? 4 : 2); k++) {
                bool end = level ? k >= 2 : k == 1;
                double dy = level ? (k % 2 ? 1 : -1) * level * LINE_PX : 0;
                p->anchor_end = end;
                p->lx = end ? p->px - 9 : p->px + 9;
                p->ly = p->py + 4 + dy;
                if (label_fits(pt, ng, g, pass == 0)) return;
            }
        }
    }
    p->anchor_end = false; /* nowhere free: beside the point all the same */
    p->lx = p->px + 9;
    p->ly = p->py + 4;
}

static void group_label(const sweep_result *r, const int *group, int g, FILE *f)
{
    bool first = true;
    for (int m = 0; m < r->n_modes; m++) {
        if (group[m] != g) continue;
        if (!first) fputs(" = ", f);
        xml_text(f, r->modes[m].name, 0);
        first = false;
    }
}

/* Groups the plotted modes into points, modes with identical plans sharing one point (the first such mode's
 * cell): group[m] is mode m's point, or -1 where m is not plotted. Returns the number of points. */
static int svg_group_points(const sweep_result *r, int *group, svg_point *pt)
{
    int ng = 0;
    for (int m = 0; m < r->n_modes; m++) {
        group[m] = -1;
        int b = plotted_column(r, m);
        if (b < 0) continue;
        int root = plan_root(r, m);
        for (int j = 0; j < m; j++)
            if (group[j] >= 0 && plan_root(r, j) == root) {
                group[m] = group[j];
                break;
            }
        if (group[m] >= 0) continue;
        const sweep_cell *c = cell_at(r, m, b);
        pt[ng] = (svg_point){.rep = m, .x = (double)c->peak_device, .y = c->sec_median};
        group[m] = ng++;
    }
    return ng;
}

/* The two axes: the memory axis in its unit, the time axis in seconds. */
typedef struct svg_axes {
    const char *unit;  /* the memory axis' unit: GiB or MiB */
    double unit_bytes; /* its size in bytes */
    double xstep, xtop, ystep, ytop;
    int xdec, ydec;
} svg_axes;

/* Sizes the axes to the points, then puts each point and its label in pixels. */
static svg_axes svg_scale_points(const sweep_result *r, const int *group, svg_point *pt, int ng)
{
    double max_bytes = 0, max_sec = 0;
    for (int g = 0; g < ng; g++) {
        if (pt[g].x > max_bytes) max_bytes = pt[g].x;
        if (isfinite(pt[g].y) && pt[g].y > max_sec) max_sec = pt[g].y;
    }
    svg_axes ax;
    bool gib = max_bytes >= GIB_F;
    ax.unit = gib ? "GiB" : "MiB";
    ax.unit_bytes = gib ? GIB_F : MIB_F;
    nice_axis(max_bytes / ax.unit_bytes, &ax.xstep, &ax.xtop, &ax.xdec);
    nice_axis(max_sec, &ax.ystep, &ax.ytop, &ax.ydec);

    for (int g = 0; g < ng; g++) {
        svg_point *p = &pt[g];
        p->x /= ax.unit_bytes;
        double y = isfinite(p->y) && p->y > 0 ? p->y : 0;
        p->px = PLOT_L + p->x / ax.xtop * (PLOT_R - PLOT_L);
        p->py = PLOT_B - y / ax.ytop * (PLOT_B - PLOT_T);
        int chars = 0;
        for (int m = 0; m < r->n_modes; m++)
            if (group[m] == g) chars += display_width(r->modes[m].name) + (chars ? 3 : 0);
        p->w = chars * LABEL_PX;
    }
    for (int g = 0; g < ng; g++) place_label(pt, ng, g);
    return ax;
}

/* The picture's head: the preset, the machine, the config, and the busy-machine note. */
static void svg_write_title(const sweep_result *r, FILE *f)
{
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
            "%d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", SVG_W, SVG_H);
    fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"18\" font-weight=\"bold\">segtrain sweep: ", PLOT_L);
    xml_text(f, r->preset[0] ? r->preset : "?", 60);
    if (r->precision[0]) fprintf(f, " in %s", r->precision);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"48\" font-size=\"12\" fill=\"#444444\">", PLOT_L);
    xml_text(f, r->machine.cpu[0] ? r->machine.cpu : "unknown CPU", 48);
    fprintf(f, ", %d cores, %d threads, BLAS: ", r->machine.cores, r->machine.threads);
    xml_text(f, r->machine.blas[0] ? r->machine.blas : "unknown", 40);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"65\" font-size=\"12\" fill=\"#444444\">config: ", PLOT_L);
    xml_text(f, r->config[0] ? r->config : "defaults", 60);
    if (r->predicted) fprintf(f, "; predicted on this CPU: dry-step peaks, cost-model times</text>\n");
    else fprintf(f, "; %d warm-up + %d measured steps per cell</text>\n", r->warmup, r->steps);
    if (sweep_noisy_cells(r))
        fprintf(f, "<text x=\"%d\" y=\"82\" font-size=\"12\" fill=\"#c0392b\">The machine was busy: hollow points "
                   "are noisy cells (slowest step over %.1fx the fastest), not results.</text>\n",
                PLOT_L, SWEEP_NOISY_SPREAD);
}

/* Grid, ticks, axes and their titles. */
static void svg_write_axes(const sweep_result *r, const svg_axes *ax, FILE *f)
{
    fprintf(f, "<g font-size=\"11\" fill=\"#333333\">\n");
    for (int i = 0; i * ax->xstep <= ax->xtop * (1 + 1e-9); i++) {
        double px = PLOT_L + i * ax->xstep / ax->xtop * (PLOT_R - PLOT_L);
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>"
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333333\"/>"
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.*f</text>\n",
                px, PLOT_T, px, PLOT_B, px, PLOT_B, px, PLOT_B + 5, px, PLOT_B + 19, ax->xdec, i * ax->xstep);
    }
    for (int i = 0; i * ax->ystep <= ax->ytop * (1 + 1e-9); i++) {
        double py = PLOT_B - i * ax->ystep / ax->ytop * (PLOT_B - PLOT_T);
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333333\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n",
                PLOT_L, py, PLOT_R, py, PLOT_L - 5, py, PLOT_L, py, PLOT_L - 8, py + 4, ax->ydec, i * ax->ystep);
    }
    fprintf(f, "</g>\n");
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333333\"/>\n", PLOT_L, PLOT_B, PLOT_R, PLOT_B);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333333\"/>\n", PLOT_L, PLOT_T, PLOT_L, PLOT_B);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\">peak device memory (%s)</text>\n",
            (PLOT_L + PLOT_R) / 2, PLOT_B + 40, ax->unit);
    fprintf(f,
            "<text x=\"24\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\" transform=\"rotate(-90 24 %d)\">"
            "seconds per step (%s)</text>\n",
            (PLOT_T + PLOT_B) / 2, (PLOT_T + PLOT_B) / 2, r->predicted ? "predicted" : "median");
}

/* The points: leader lines first, then the circles with their tooltips, then the labels on top. */
static void svg_write_points(const sweep_result *r, const int *group, const svg_point *pt, int ng,
                             const char *unit, FILE *f)
{
    if (ng == 0)
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\" fill=\"#888888\">no cell ran "
                   "ok</text>\n",
                (PLOT_L + PLOT_R) / 2, (PLOT_T + PLOT_B) / 2);
    for (int g = 0; g < ng; g++) {
        const svg_point *p = &pt[g];
        if (fabs(p->ly - (p->py + 4)) > 0.5) /* a label off its point's line */
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999999\" "
                    "stroke-width=\"0.8\"/>\n",
                    p->px, p->py, p->anchor_end ? p->lx + 2 : p->lx - 2, p->ly - 4);
    }
    for (int g = 0; g < ng; g++) {
        const svg_point *p = &pt[g];
        char sec[40], mem[40];
        sig3(sec, sizeof sec, p->y);
        sig3(mem, sizeof mem, p->x);
        const sweep_cell *c = cell_at(r, p->rep, plotted_column(r, p->rep));
        const bool noisy = sweep_cell_noisy(c);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\" stroke=\"%s\" stroke-width=\"%s\"><title>",
                p->px, p->py, noisy ? "#ffffff" : "#1f77b4", noisy ? "#c0392b" : "#ffffff", noisy ? "2" : "1");
        group_label(r, group, g, f);
        fprintf(f, ": %s s/step, %s %s", sec, mem, unit);
        if (noisy) {
            char lo[40], hi[40];
            sig3(lo, sizeof lo, c->sec_min);
            sig3(hi, sizeof hi, c->sec_max);
            fprintf(f, "; noisy: steps took %s to %s s", lo, hi);
        }
        fprintf(f, "</title></circle>\n");
    }
    for (int g = 0; g < ng; g++) {
        const svg_point *p = &pt[g];
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\"%s>", p->lx, p->ly,
                p->anchor_end ? " text-anchor=\"end\"" : "");
        group_label(r, group, g, f);
        fprintf(f, "</text>\n");
    }
}

/* The foot: what the points are, and the modes that are missing (as many as fit on the line). */
static void svg_write_legend(const sweep_result *r, const int *group, FILE *f)
{
    int nm = r->n_modes;
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#555555\">Each point: a mode's unlimited-budget "
            "cell (else its first budget that ran ok); modes with identical plans share one point.</text>\n",
            PLOT_L, SVG_H - 36);
    int missing = 0, shown_chars = 0;
    for (int m = 0; m < nm; m++) {
        if (group[m] >= 0) continue;
        int w = display_width(r->modes[m].name);
        if (!missing)
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#555555\">Not plotted (no cell ran ok): ",
                    PLOT_L, SVG_H - 18);
        else if (shown_chars >= 0 && shown_chars + w > 90) { /* the rest would run off the picture */
            int rest = 0;
            for (int j = m; j < nm; j++) rest += group[j] < 0;
            fprintf(f, " and %d more (see sweep.md)", rest);
            shown_chars = -1;
        } else if (shown_chars >= 0) {
            fputs(", ", f);
        }
        if (shown_chars >= 0) {
            xml_text(f, r->modes[m].name, 40);
            shown_chars += w + 2;
        }
        missing++;
    }
    if (missing) fputs("</text>\n", f);
}

st_status sweep_write_svg(const sweep_result *r, FILE *f)
{
    int nm = r->n_modes;
    int *group = malloc(sizeof(int) * (size_t)(nm > 0 ? nm : 1));
    svg_point *pt = malloc(sizeof(svg_point) * (size_t)(nm > 0 ? nm : 1));
    if (!group || !pt) {
        free(group);
        free(pt);
        return st_host_oom("building sweep.svg");
    }
    int ng = svg_group_points(r, group, pt);
    svg_axes ax = svg_scale_points(r, group, pt, ng);
    svg_write_title(r, f);
    svg_write_axes(r, &ax, f);
    svg_write_points(r, group, pt, ng, ax.unit, f);
    svg_write_legend(r, group, f);
    fprintf(f, "</svg>\n");

    free(group);
    free(pt);
    return ST_OK;
}

/* ---- the four files ------------------------------------------------------------------------------------------ */

static st_status write_md(const void *r, FILE *f)
{
    sweep_write_markdown(r, f);
    return ST_OK;
}

static st_status write_svg(const void *r, FILE *f) { return sweep_write_svg(r, f); }

st_status sweep_write_file(const char *dir, const char *name, sweep_writer writer, const void *ctx)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    if (!path) return st_host_oom("the path %s/%s", dir, name);
    snprintf(path, n, "%s/%s", dir, name);
    atomic_file af;
    st_status s = atomic_file_open(&af, path);
    if (s == ST_OK) {
        s = writer(ctx, af.fp);
        if (s == ST_OK && ferror(af.fp)) s = st_fail(ST_ERR_IO, "%s: cannot write", path);
        if (s == ST_OK) s = atomic_file_commit(&af);
        else atomic_file_abort(&af);
    }
    free(path);
    return s;
}

st_status sweep_write_reports(const sweep_result *r, const char *dir)
{
    if (!r || !dir || !dir[0]) return st_fail(ST_ERR_INVALID, "sweep reports: no result or no folder given");
    if (r->n_modes < 0 || r->n_budgets < 0 || (r->n_modes > 0 && !r->modes) || (r->n_budgets > 0 && !r->budgets) ||
        (r->n_modes > 0 && r->n_budgets > 0 && !r->cells))
        return st_fail(ST_ERR_INVALID, "sweep reports: malformed result (%d modes, %d budgets)", r->n_modes,
                       r->n_budgets);
    static const struct {
        const char *name;
        sweep_writer writer;
    } files[] = {
        {"sweep.md", write_md}, {"sweep.json", write_json}, {"sweep.csv", write_csv}, {"sweep.svg", write_svg}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        st_status s = sweep_write_file(dir, files[i].name, files[i].writer, r);
        if (s != ST_OK) return s;
    }
    return ST_OK;
}
