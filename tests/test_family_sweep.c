/* The family sweep as a user runs it: two small families (sd1x, a U-Net that refuses the unsloth backends, and
 * flux), one measured step a cell, a budget too small for any real preset and one that fits: every report file, every
 * family's 9 measured and 9 predicted rows, the refusals with their reasons, OOM cells and the fastest that fits. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testkit.h"

#define GIB 1073741824.0

static char dir[256];

/* The member of o named key, or NULL (any o). */
static const cJSON *at(const cJSON *o, const char *key) { return o ? cJSON_GetObjectItem(o, key) : NULL; }
static const char *text_of(const cJSON *o, const char *key)
{
    return cJSON_IsString(at(o, key)) ? at(o, key)->valuestring : "";
}
static double number_of(const cJSON *o, const char *key)
{
    return cJSON_IsNumber(at(o, key)) ? at(o, key)->valuedouble : -1;
}

/* The cell of a half for mode at budget (0: unlimited), or NULL. */
static const cJSON *cell_of(const cJSON *half, const char *mode, double budget)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, at(half, "cells"))
    {
        if (!strcmp(text_of(c, "mode"), mode) && number_of(c, "device_memory") == budget) return c;
    }
    return NULL;
}

static int run(const char *command)
{
    const int rc = system(command);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* One family's halves: 9 rows each, refusals with reasons, OOM below its need, the fastest that fits. */
static void check_family(const cJSON *fam, const char *md)
{
    const char *name = text_of(fam, "family");
    const cJSON *measured = at(fam, "measured"), *predicted = at(fam, "predicted");
    CHECKF(cJSON_IsNull(at(fam, "skipped")), "%s runs", name);
    CHECKF(cJSON_GetArraySize(at(measured, "modes")) == 9 && cJSON_GetArraySize(at(measured, "cells")) == 9,
           "%s: 9 measured rows, one unlimited column", name);
    CHECKF(cJSON_GetArraySize(at(predicted, "modes")) == 9 && cJSON_GetArraySize(at(predicted, "cells")) == 27,
           "%s: 9 predicted rows, in columns unlimited, 1 GiB and 80 GiB", name);
    CHECKF(cJSON_IsTrue(at(predicted, "predicted")) && !cJSON_IsTrue(at(measured, "predicted")),
           "%s: the predicted half says so", name);
    const cJSON *mode;
    int ran = 0, refused = 0;
    cJSON_ArrayForEach(mode, at(predicted, "modes"))
    {
        const char *m = text_of(mode, "name");
        const cJSON *free_cell = cell_of(predicted, m, 0), *small = cell_of(predicted, m, GIB);
        const cJSON *big = cell_of(predicted, m, 80 * GIB), *tiny = cell_of(measured, m, 0);
        if (!strcmp(text_of(free_cell, "status"), "unsupported")) {
            refused++;
            CHECKF(strlen(text_of(free_cell, "error")) > 20 && !strcmp(text_of(small, "status"), "unsupported") &&
                       !strcmp(text_of(big, "status"), "unsupported"),
                   "%s %s: refused in every column, with its reason: %s", name, m, text_of(free_cell, "error"));
            continue;
        }
        ran++;
        const double need = number_of(free_cell, "peak_device_bytes");
        CHECKF(!strcmp(text_of(free_cell, "status"), "ok") && need > GIB &&
                   number_of(free_cell, "sec_per_step_median") > 0 && strlen(text_of(free_cell, "plan")) > 0,
               "%s %s: predicted at the real preset (%s, %.0f bytes)", name, m, text_of(free_cell, "status"), need);
        CHECKF(!strcmp(text_of(small, "status"), "oom") && number_of(small, "peak_device_bytes") == need &&
                   strstr(text_of(small, "error"), "exceeds device_memory 1 GiB"),
               "%s %s at 1 GiB: OOM with what it needs (%s)", name, m, text_of(small, "status"));
        CHECKF(!strcmp(text_of(big, "status"), need <= 80 * GIB ? "ok" : "oom"), "%s %s at 80 GiB: %s", name, m,
               text_of(big, "status"));
        CHECKF(!strcmp(text_of(tiny, "status"), "ok") && number_of(tiny, "sec_per_step_median") > 0 &&
                   number_of(tiny, "peak_device_bytes") < 0.1 * GIB,
               "%s %s: measured on the tiny preset (%s %s)", name, m, text_of(tiny, "status"), text_of(tiny, "error"));
    }
    CHECKF(ran + refused == 9 && ran >= 7, "%s: %d modes predicted, %d refused", name, ran, refused);

    /* the fastest that fits: none at 1 GiB, and at 80 GiB the quickest ok cell of that column */
    const cJSON *fastest = at(fam, "fastest_that_fits");
    CHECKF(cJSON_GetArraySize(fastest) == 2, "%s: the fastest that fits, per budget", name);
    const cJSON *none = cJSON_GetArrayItem(fastest, 0), *fit = cJSON_GetArrayItem(fastest, 1);
    CHECKF(cJSON_IsNull(at(none, "mode")) && number_of(none, "smallest_need_bytes") > GIB,
           "%s: nothing fits 1 GiB, and the report says what the smallest need is", name);
    double quickest = 1e300;
    const cJSON *c;
    cJSON_ArrayForEach(c, at(predicted, "cells"))
    {
        if (number_of(c, "device_memory") == 80 * GIB && !strcmp(text_of(c, "status"), "ok") &&
            number_of(c, "sec_per_step_median") < quickest)
            quickest = number_of(c, "sec_per_step_median");
    }
    CHECKF(cJSON_IsString(at(fit, "mode")) && number_of(fit, "sec_per_step") == quickest &&
               number_of(fit, "peak_device_bytes") <= 80 * GIB,
           "%s: the fastest that fits 80 GiB is the quickest cell that fits (%s)", name, text_of(fit, "mode"));

    char heading[64];
    snprintf(heading, sizeof heading, "## %s (", name);
    const char *section = md ? strstr(md, heading) : NULL;
    const char *next = section ? strstr(section + 3, "\n## ") : NULL;
    const size_t len = section ? (next ? (size_t)(next - section) : strlen(section)) : 0;
    char *own = calloc(len + 1, 1);
    if (own && section) memcpy(own, section, len);
    CHECKF(own && strstr(own, "- Fastest that fits 1 GiB: nothing fits (the smallest need: ") &&
               strstr(own, "- Fastest that fits 80 GiB: ") && strstr(own, "**Predicted** at ") &&
               strstr(own, "**Measured** on ") && strstr(own, "/predicted/sweep.svg"),
           "families.md: %s's section has both halves and a fastest-that-fits line per budget", name);
    free(own);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/segtrain-test-family-sweep-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && %s sweep --families sd1x,flux --steps 1 --warmup 0 --device-memory 1GiB,80GiB "
                              "--planner --examples %s/tests/fixtures/simpletuner --out report > out.txt 2> err.txt",
             dir, SEGTRAIN_BIN, SEGTRAIN_SOURCE_DIR);
    CHECKF(run(cmd) == 0, "the family sweep runs (see %s/err.txt)", dir);

    char report[300]; /* tk_path's buffers rotate */
    snprintf(report, sizeof report, "%s/report", dir);
    char *json = tk_read_file(report, "families.json"), *md = tk_read_file(report, "families.md");
    char *csv = tk_read_file(report, "families.csv"), *err = tk_read_file(dir, "err.txt");
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    CHECKF(cJSON_IsObject(root), "families.json parses");
    CHECKF(md && strstr(md, "# segtrain family sweep") && strstr(md, "Command: `") &&
               strstr(md, "--families sd1x,flux") && strstr(md, "Machine: ") && strstr(md, "BLAS: ") && strstr(md, "GFLOP/s"),
           "families.md starts with the command, the machine and the rates");
    CHECKF(number_of(at(root, "rates"), "gemm_gflops") > 0 && number_of(at(root, "rates"), "attention_gflops") > 0 &&
               number_of(at(root, "rates"), "pointwise_gbytes_per_s") > 0,
           "the rates of this machine are in families.json");
    const cJSON *families = at(root, "families");
    CHECKF(cJSON_GetArraySize(families) == 2 && !strcmp(text_of(cJSON_GetArrayItem(families, 0), "family"), "sd1x") &&
               !strcmp(text_of(cJSON_GetArrayItem(families, 1), "family"), "flux"),
           "both families, in the order asked");
    const cJSON *fam;
    cJSON_ArrayForEach(fam, families) check_family(fam, md);

    /* --planner: at 80 GiB each family has a per-block plan, predicted no slower than the fastest mode and within
     * the budget; at 1 GiB none fits */
    cJSON_ArrayForEach(fam, families)
    {
        const cJSON *fits = at(fam, "fastest_that_fits"), *small = cJSON_GetArrayItem(fits, 0);
        const cJSON *big = cJSON_GetArrayItem(fits, 1), *plan = at(big, "per_block_plan");
        const double sec = cJSON_GetNumberValue(at(plan, "sec_per_step"));
        CHECKF(plan && !at(small, "per_block_plan") && sec > 0 && sec <= cJSON_GetNumberValue(at(big, "sec_per_step")) &&
                   cJSON_GetNumberValue(at(plan, "peak_device_bytes")) <= 80.0 * 1073741824 &&
                   strchr(text_of(plan, "gradient_checkpointing_plan"), ':'),
               "%s: the planner's plan at 80 GiB (%.4g s) is no slower than the fastest mode (%.4g s)",
               text_of(fam, "family"), sec, cJSON_GetNumberValue(at(big, "sec_per_step")));
    }
    CHECKF(md && strstr(md, "; per-block plan ") && strstr(md, "no per-block plan fits"),
           "families.md gives the planner's answer beside the fastest mode");

    /* sd1x refuses the unsloth backends in both halves, and the report says why */
    const cJSON *sd1x = cJSON_GetArrayItem(families, 0);
    const cJSON *unsloth = cell_of(at(sd1x, "measured"), "unsloth", 0);
    CHECKF(!strcmp(text_of(unsloth, "status"), "unsupported") && strstr(text_of(unsloth, "error"), "skip tensors"),
           "sd1x's measured unsloth cell is unsupported, with its reason: %s", text_of(unsloth, "error"));
    CHECKF(md && strstr(md, "- unsloth (both halves): unsupported: gradient_checkpointing_backend"),
           "families.md lists sd1x's refusal with its reason");
    CHECKF(md && strstr(md, "same plan as"), "identical plans are marked");
    CHECKF(strstr(text_of(sd1x, "example"), "sd1x-dreamshaper.peft-lora.json") &&
               strstr(text_of(sd1x, "shape"), "512 px") && !strcmp(text_of(at(sd1x, "predicted"), "preset"), "sd15"),
           "sd1x is predicted at its example's shape on its real preset: %s", text_of(sd1x, "shape"));

    int lines = 0;
    for (const char *p = csv; p && *p; p++) lines += *p == '\n';
    CHECKF(csv && !strncmp(csv, "family,half,mode,device_memory,status", 37) && lines == 1 + 2 * (9 + 27),
           "families.csv: a header and a row per cell (%d lines)", lines);
    const char *fams[] = {"sd1x", "flux"}, *halves[] = {"measured", "predicted"};
    for (int i = 0; i < 4; i++) {
        char sub[128];
        snprintf(sub, sizeof sub, "%s/%s", fams[i / 2], halves[i % 2]);
        char *svg = tk_read_file(tk_path(report, sub), "sweep.svg");
        CHECKF(svg && strstr(svg, "<svg") && strstr(svg, "</svg>") && tk_count(svg, "<circle") >= 3,
               "%s/sweep.svg: a chart with its points", sub);
        CHECKF(i % 2 == 0 || (svg && strstr(svg, "predicted")), "%s/sweep.svg says it is predicted", sub);
        free(svg);
    }
    CHECKF(err && strstr(err, "family 1/2 sd1x") && strstr(err, "family 2/2 flux") && strstr(err, "rates: "),
           "a progress line per family on stderr");
    free(json), free(md), free(csv), free(err);
    cJSON_Delete(root);

    /* an unknown family: one line naming the valid ones, and no folder */
    snprintf(cmd, sizeof cmd, "cd %s && %s sweep --families sd1x,fluxx --out never > out2.txt 2> err2.txt", dir,
             SEGTRAIN_BIN);
    CHECK(run(cmd) == 1);
    err = tk_read_file(dir, "err2.txt");
    CHECKF(err && strstr(err, "\"fluxx\" is not a SimpleTuner family (did you mean flux?); valid: all, ") &&
               strstr(err, "sdxl") && tk_count(err, "\n") == 1 && access(tk_path(dir, "never"), F_OK) != 0,
           "an unknown family is one line listing the valid names: %s", err ? err : "");
    free(err);

    /* a family not built: its row says why, the sweep goes on */
    snprintf(cmd, sizeof cmd, "cd %s && %s sweep --families deepfloyd --modes none,layer --device-memory 80GiB "
                              "--examples %s/tests/fixtures/simpletuner --out unbuilt > out3.txt 2> err3.txt",
             dir, SEGTRAIN_BIN, SEGTRAIN_SOURCE_DIR);
    CHECKF(run(cmd) == 1, "a sweep of families that are not built ran nothing, and exits 1");
    md = tk_read_file(tk_path(dir, "unbuilt"), "families.md");
    CHECKF(md && strstr(md, "## deepfloyd (DeepFloyd IF)\n\nNot run: model_family deepfloyd") &&
               strstr(md, "planned, not built yet"),
           "families.md says why deepfloyd did not run");
    free(md);

    const int rc = tk_finish();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!rc) run(cmd); /* kept for a look when a check failed */
    return rc;
}
