/* The sweep as a user runs it: a small dit-tiny sweep (2 warm-up + 2 measured steps) with a budget column that some
 * modes cannot fit and a row the engine refuses; every status cell and every report file is checked. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "segtrain/plan.h"
#include "segtrain/sweep.h"
#include "testkit.h"

static char dir[256];

static const cJSON *cell(const cJSON *cells, const char *mode, double budget)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cells)
    {
        const cJSON *m = cJSON_GetObjectItem(c, "mode"), *b = cJSON_GetObjectItem(c, "device_memory");
        if (cJSON_IsString(m) && !strcmp(m->valuestring, mode) && cJSON_IsNumber(b) && b->valuedouble == budget) return c;
    }
    return NULL;
}

static const char *str(const cJSON *c, const char *key)
{
    const cJSON *v = c ? cJSON_GetObjectItem(c, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *c, const char *key)
{
    const cJSON *v = c ? cJSON_GetObjectItem(c, key) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

#define SETS(on, b, k, s, off)                                                                                        \
    "gradient_checkpointing=" on ";gradient_checkpointing_backend=" b ";gradient_checkpointing_interval=" k            \
    ";gradient_checkpointing_segment_stride=" s ";gradient_checkpointing_offload_attention=" off                  \
    ";gradient_checkpointing_keep_attention_output=false;gradient_checkpointing_plan="                               \
    ";gradient_checkpointing_bucket_plans="

/* The checkpointing settings' one encode (ckpt_settings_text) and one decode (ckpt_settings_from): every schedule
 * the sweep and advise can write reads back as itself, the standard rows' overrides stay what they were, and a
 * value the schedule's int arithmetic cannot hold is refused (it wrapped, and `plan` crashed). */
static void test_settings_text(void)
{
    int wrong = 0, runs = 0;
    for (int on = 0; on <= 1; on++)
        for (int b = BACKEND_TORCH; b <= BACKEND_UNSLOTH_FFN; b++)
            for (int k = 1; k <= 3; k++)
                for (int s = k; s <= 4; s++)
                    for (int off = 0; off <= 2; off++) { /* nothing, attention offload, attention output kept */
                        if (off == 2 && on && (b == BACKEND_TORCH_FFN || b == BACKEND_UNSLOTH_FFN)) continue; /* refused */
                        runs++;
                        const ckpt_settings cs = {.enabled = on, .backend = (ckpt_backend)b, .interval = k,
                                                  .stride = s, .offload_attention = off == 1,
                                                  .keep_attention_output = off == 2};
                        ckpt_settings back = {0};
                        char text[CKPT_TEXT_MAX];
                        ckpt_settings_text(&cs, text, sizeof text);
                        config *c = NULL;
                        st_status st = config_parse("{}", "test", &c);
                        if (!st) st = config_set_all(c, text);
                        if (!st) st = ckpt_settings_from(c, &back);
                        config_free(c);
                        if (st || back.enabled != cs.enabled || back.backend != cs.backend ||
                            back.interval != cs.interval || back.stride != cs.stride ||
                            back.offload_attention != cs.offload_attention ||
                            back.keep_attention_output != cs.keep_attention_output)
                            wrong++, printf("     %s does not read back as itself (%s)\n", text, st ? st_error() : "");
                    }
    CHECKF(!wrong && runs == 4 * 9 * 3 + 2 * 9 * 3 + 2 * 9 * 2, "%d of %d settings do not read back as themselves", wrong,
           runs);

    sweep_mode rows[16], one;
    const int n = sweep_standard_modes(rows, 16);
    CHECKF(n == 9 && !strcmp(rows[0].name, "none") && !strcmp(rows[0].sets, SETS("false", "torch", "1", "1", "false")) &&
               !strcmp(rows[8].name, "seg2-stride4-offload") &&
               !strcmp(rows[8].sets, SETS("true", "torch", "2", "4", "true")),
           "the standard rows' overrides: %s, %s", rows[0].sets, rows[8].sets);
    CHECKF(!sweep_parse_mode("unsloth-ffn", &one) && !strcmp(one.name, "unsloth-ffn") &&
               !strcmp(one.sets, SETS("true", "unsloth-ffn", "1", "1", "false")),
           "a standard row by name: %s", one.sets);
    /* with where its weights live (issue 43): swapped blocks and a quantized base after a standard row */
    CHECKF(!sweep_parse_mode("unsloth-ffn+swap2+int8-quanto", &one) && !strcmp(one.name, "unsloth-ffn+swap2+int8-quanto") &&
               !strcmp(one.sets, SETS("true", "unsloth-ffn", "1", "1", "false")
                                 ";musubi_blocks_to_swap=2;base_model_precision=int8-quanto"),
           "a standard row with swap and a base: %s", one.sets);
    const char *bad[] = {"layr+swap2", "layer+swap", "layer+swap2x", "layer+", "layer++int8-quanto"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECKF(sweep_parse_mode(bad[i], &one) == ST_ERR_INVALID && strstr(st_error(), bad[i]), "%s: %s", bad[i],
               st_error());

    const char *huge[] = {"gradient_checkpointing_interval=3000000000",
                          "gradient_checkpointing_segment_stride=4294967298"};
    for (int i = 0; i < 2; i++) {
        config *c = NULL;
        ckpt_settings cs;
        st_status st = config_parse("{}", "test", &c);
        if (!st) st = config_set_all(c, "gradient_checkpointing=true");
        if (!st) st = config_set(c, huge[i]);
        if (!st) st = ckpt_settings_from(c, &cs);
        config_free(c);
        char want[128];
        snprintf(want, sizeof want, "%.*s: %s is too large", (int)strcspn(huge[i], "="), huge[i],
                 strchr(huge[i], '=') + 1);
        CHECKF(st == ST_ERR_INVALID && strstr(st_error(), want), "%s is refused: %s", huge[i], st ? st_error() : "ok");
    }
}
#undef SETS

int main(void)
{
    test_settings_text();
    snprintf(dir, sizeof dir, "/tmp/segtrain-test-sweep-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && echo '{\"model_preset\": \"dit-tiny\", \"train_batch_size\": 2}' > c.json && "
                              "%s sweep --config c.json --warmup 2 --steps 2 --out report --device-memory 0,3MiB "
                              "--modes none,layer,interval2,torch-ffn,unsloth,activation-offload,"
                              "'wrong:gradient_checkpointing=true,gradient_checkpointing_interval=3,"
                              "gradient_checkpointing_segment_stride=2',"
                              "'ffn2:gradient_checkpointing=true,gradient_checkpointing_backend=torch-ffn,"
                              "gradient_checkpointing_interval=2' > out.txt 2> err.txt",
             dir, SEGTRAIN_BIN);
    CHECKF(system(cmd) == 0, "the sweep runs (see %s/err.txt)", dir);

    char *json = tk_read_file(tk_path(dir, "report"), "sweep.json");
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    CHECKF(cJSON_IsObject(root), "sweep.json parses");
    const cJSON *cells = cJSON_GetObjectItem(root, "cells"), *machine = cJSON_GetObjectItem(root, "machine");
    CHECK(cJSON_GetArraySize(cells) == 16);
    CHECK(cJSON_IsObject(machine) && cJSON_IsString(cJSON_GetObjectItem(machine, "cpu")) &&
          num(machine, "cores") >= 1 && num(machine, "threads") >= 1 && cJSON_IsString(cJSON_GetObjectItem(machine, "blas")));
    const char *modes[] = {"none", "layer", "interval2", "torch-ffn", "unsloth", "activation-offload", "ffn2"};
    for (int i = 0; i < 7; i++) {
        const cJSON *c = cell(cells, modes[i], 0);
        CHECKF(!strcmp(str(c, "status"), "ok"), "%s unlimited: status %s (%s)", modes[i], str(c, "status"), str(c, "error"));
        CHECKF(num(c, "sec_per_step_median") > 0 && num(c, "peak_device_bytes") > 0, "%s has its numbers", modes[i]);
        CHECKF(num(c, "peak_device_bytes") == num(c, "predicted_peak_device_bytes"), "%s: measured peak = predicted",
               modes[i]);
        CHECK(strlen(str(c, "plan")) > 0);
        const cJSON *small = cell(cells, modes[i], 3 * 1048576.0);
        CHECKF(!strcmp(str(small, "status"), "oom") && num(small, "peak_device_bytes") > 3 * 1048576.0 &&
                   strstr(str(small, "error"), "device_memory"),
               "%s at 3 MiB: oom with the peak it needs (%s)", modes[i], str(small, "status"));
    }
    CHECKF(num(cell(cells, "unsloth", 0), "bytes_to_host_per_step") > 0, "unsloth moves bytes to the host");
    const cJSON *wrong = cell(cells, "wrong", 0);
    CHECKF(!strcmp(str(wrong, "status"), "unsupported") && strstr(str(wrong, "error"), "segments would overlap"),
           "a refused row is unsupported, with its message: %s", str(wrong, "error"));
    const cJSON *same = cJSON_GetObjectItem(cell(cells, "ffn2", 0), "same_plan_as");
    CHECKF(cJSON_IsString(same) && !strcmp(same->valuestring, "torch-ffn"), "ffn2 is marked as torch-ffn's plan");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(cell(cells, "none", 0), "same_plan_as")));

    char *md = tk_read_file(tk_path(dir, "report"), "sweep.md");
    CHECKF(md && strstr(md, "| none") && strstr(md, " s / ") && strstr(md, "GiB") && strstr(md, "OOM (needs") &&
               strstr(md, "unsupported") && strstr(md, "same plan as torch-ffn"),
           "sweep.md has every kind of cell and the identical-plan marker");
    char *csv = tk_read_file(tk_path(dir, "report"), "sweep.csv");
    int lines = 0;
    for (char *p = csv; p && *p; p++) lines += *p == '\n';
    CHECKF(csv && lines == 17 && strstr(csv, "unsupported") && strstr(csv, "oom"), "sweep.csv: a header and 16 rows (%d lines)",
           lines);
    char *svg = tk_read_file(tk_path(dir, "report"), "sweep.svg");
    int points = 0;
    for (const char *p = svg; p && (p = strstr(p, "<circle")); p++) points++;
    CHECKF(svg && !strncmp(svg, "<?xml", 5) && strstr(svg, "<svg") && strstr(svg, "</svg>") && points >= 6 &&
               strstr(svg, "activation-offload"),
           "sweep.svg: one point per mode that ran (%d)", points);
    snprintf(cmd, sizeof cmd, "%s/out.txt", dir);
    FILE *f = fopen(cmd, "rb");
    char *out = calloc(1 << 16, 1);
    if (f && fread(out, 1, (1 << 16) - 1, f) == 0) out[0] = 0;
    if (f) fclose(f);
    CHECKF(out && strstr(out, "| none"), "the terminal shows the matrix");
    free(out), free(svg), free(csv), free(md), free(json);
    cJSON_Delete(root);

    /* a row with a key segtrain does not have is unsupported; a sweep in which no cell ran exits non-zero */
    snprintf(cmd, sizeof cmd, "cd %s && %s sweep --config c.json --warmup 0 --steps 1 --out nothing "
                              "--modes 'mine:gradient_checkpointing_foo=1','bad:gradient_checkpointing_interval=x' "
                              "> out2.txt 2> err2.txt", dir, SEGTRAIN_BIN);
    int rc = system(cmd);
    CHECKF(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "a sweep whose every cell failed or was refused exits 1 (status %d)",
           rc);
    json = tk_read_file(tk_path(dir, "nothing"), "sweep.json");
    root = json ? cJSON_Parse(json) : NULL;
    cells = cJSON_GetObjectItem(root, "cells");
    const cJSON *mine = cell(cells, "mine", 0), *bad = cell(cells, "bad", 0);
    CHECKF(!strcmp(str(mine, "status"), "unsupported") && strstr(str(mine, "error"), "gradient_checkpointing_foo"),
           "an unknown checkpointing key is unsupported, with its message: %s %s", str(mine, "status"), str(mine, "error"));
    CHECKF(!strcmp(str(bad, "status"), "failed"), "a malformed value fails its cell: %s", str(bad, "status"));
    char *err = tk_read_file(dir, "err2.txt");
    CHECKF(err && strstr(err, "no cell ran"), "and says so: %s", err ? err : "");
    free(err), free(json);
    cJSON_Delete(root);

    /* a budget that binds nothing is not measured again: its cells are the earlier column's runs, and say so */
    snprintf(cmd, sizeof cmd, "cd %s && %s sweep --config c.json --warmup 1 --steps 1 --out reuse "
                              "--device-memory 1GiB,0,3MiB --modes none,layer > out3.txt 2> err3.txt", dir, SEGTRAIN_BIN);
    CHECKF(system(cmd) == 0, "the sweep with a budget binding nothing runs (see %s/err3.txt)", dir);
    json = tk_read_file(tk_path(dir, "reuse"), "sweep.json");
    root = json ? cJSON_Parse(json) : NULL;
    cells = cJSON_GetObjectItem(root, "cells");
    for (int i = 0; i < 2; i++) {
        const cJSON *first = cell(cells, modes[i], 1073741824.0), *again = cell(cells, modes[i], 0),
                    *small = cell(cells, modes[i], 3 * 1048576.0);
        const cJSON *from = cJSON_GetObjectItem(again, "reused_from_device_memory");
        CHECKF(!strcmp(str(first, "status"), "ok") && !strcmp(str(again, "status"), "ok") && cJSON_IsNumber(from) &&
                   from->valuedouble == 1073741824.0 && num(again, "sec_per_step_median") == num(first, "sec_per_step_median") &&
                   !strcmp(str(again, "plan"), str(first, "plan")),
               "%s unlimited: the 1 GiB column's run, reused (%s)", modes[i], str(again, "status"));
        CHECKF(cJSON_IsNull(cJSON_GetObjectItem(first, "reused_from_device_memory")) &&
                   cJSON_IsNull(cJSON_GetObjectItem(small, "reused_from_device_memory")) &&
                   !strcmp(str(small, "status"), "oom"),
               "%s: measured at 1 GiB, and 3 MiB, which binds, is its own cell (%s)", modes[i], str(small, "status"));
    }
    err = tk_read_file(dir, "err3.txt");
    md = tk_read_file(tk_path(dir, "reuse"), "sweep.md");
    CHECKF(err && strstr(err, "reused, the budget binds nothing: the 1.00 GiB column's run"), "the progress says so: %s",
           err ? err : "");
    CHECKF(md && strstr(md, "Not measured again, the budget unlimited binding nothing (the 1 GiB column's runs): none, "
                            "layer."),
           "sweep.md says so: %s", md ? md : "");
    free(err), free(md), free(json);
    cJSON_Delete(root);

    /* a sweep refused at once leaves no output folder */
    const char *refused[] = {"--config missing.json", "--config c.json --device-memory lots",
                             "--config c.json --modes nonsense"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "cd %s && %s sweep %s --out never > /dev/null 2>&1", dir, SEGTRAIN_BIN, refused[i]);
        rc = system(cmd);
        CHECKF(WIFEXITED(rc) && WEXITSTATUS(rc) != 0 && access(tk_path(dir, "never"), F_OK) != 0,
               "sweep %s: refused (status %d) and no 'never' folder left", refused[i], rc);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
