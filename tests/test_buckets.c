/* SimpleTuner's bucket assignment (segtrain/buckets.h) against tests/fixtures/buckets/table.csv, which
 * scripts/bucket_table.py computed with SimpleTuner's own code: every row's skip, target and intermediary sizes,
 * crop, aspect, bucket name and frames, exactly. Each #config line of the table is one dataset, its rows in order.
 *
 * Usage: test_buckets [SOURCE_DIR] */
#include "segtrain/buckets.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#define CONFIGS_MAX 64

typedef struct named_config {
    char name[64];
    bucket_config c;
} named_config;

static double num(const cJSON *o, const char *key, double fallback)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

static int pick(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    tk_fail(__FILE__, __LINE__, "unknown setting %s", s);
    return 0;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* One "#config {json}" line of the table, as bucket_table.py's CONFIGS spell a dataset. */
static void parse_config(const char *json, named_config *out)
{
    static const char *const types[] = {"pixel", "area", "pixel_area"}, *const styles[] = {"center", "corner", "random"},
                             *const aspects[] = {"square", "preserve", "closest", "random"};
    cJSON *o = cJSON_Parse(json);
    CHECKF(o != NULL, "config line does not parse: %s", json);
    if (!o) return;
    bucket_config *c = &out->c;
    bucket_config_default(c);
    snprintf(out->name, sizeof out->name, "%s", str(o, "name"));
    c->resolution = num(o, "resolution", c->resolution);
    c->resolution_type = (bucket_resolution_type)pick(str(o, "resolution_type"), types, 3);
    c->minimum_image_size = num(o, "minimum_image_size", 0);
    c->maximum_image_size = num(o, "maximum_image_size", 0);
    c->target_downsample_size = num(o, "target_downsample_size", 0);
    c->max_upscale_threshold = num(o, "max_upscale_threshold", -1);
    c->crop = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "crop"));
    c->crop_style = (bucket_crop_style)pick(str(o, "crop_style"), styles, 3);
    c->crop_aspect = (bucket_crop_aspect)pick(str(o, "crop_aspect"), aspects, 4);
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(o, "crop_aspect_buckets"))
    {
        if (c->n_crop_aspect_buckets == BUCKET_ASPECTS_MAX) break;
        c->crop_aspect_weighted = cJSON_IsObject(b); /* {"aspect": a, "weight": w}, as SimpleTuner reads it */
        c->crop_aspect_weights[c->n_crop_aspect_buckets] = num(b, "weight", 0);
        c->crop_aspect_buckets[c->n_crop_aspect_buckets++] = cJSON_IsObject(b) ? num(b, "aspect", 0) : b->valuedouble;
    }
    c->alignment = (int)num(o, "alignment", 64);
    c->rounding = (int)num(o, "rounding", 2);
    c->max_canvas = (int64_t)num(o, "canvas", 0);
    c->frames_8k1 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "frames_model"));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "video");
    c->min_frames = (int)num(v, "min_frames", 0);
    c->max_frames = (int)num(v, "max_frames", 0);
    c->resolution_frames = !strcmp(str(v, "bucket_strategy"), "resolution_frames");
    c->frame_interval = (int)num(v, "frame_interval", 0);
    cJSON_Delete(o);
}

/* crop_aspect random: the table's row says which aspect SimpleTuner drew; it must be one of those offered (with a
 * weight above 0 in the weighted form). */
static double table_choice(const double *aspects, const double *weights, int n, void *ctx)
{
    double want = *(const double *)ctx;
    bool offered = false;
    for (int i = 0; i < n; i++) offered |= aspects[i] == want && (!weights || weights[i] > 0);
    CHECKF(offered, "SimpleTuner drew aspect %g, which is not among the %d offered", want, n);
    return want;
}

/* "-" (not recorded) matches anything, else an integer */
static bool int_field(const char *field, int got)
{
    return !strcmp(field, "-") || atoi(field) == got;
}

static void check_row(char *line, named_config *configs, int n_configs, bucket_state *states, int *rows)
{
    char *f[16];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(line, ",\n", &save); t && n < 16; t = strtok_r(NULL, ",\n", &save)) f[n++] = t;
    CHECKF(n == 16, "a row of %d fields", n);
    if (n != 16) return;
    int k = 0;
    while (k < n_configs && strcmp(configs[k].name, f[0])) k++;
    CHECKF(k < n_configs, "row of unknown config %s", f[0]);
    if (k == n_configs) return;
    double drawn = strcmp(f[15], "-") ? strtod(f[15], NULL) : 0;
    bucket_sample s;
    int w = atoi(f[1]), h = atoi(f[2]), frames = atoi(f[3]);
    st_status st = bucket_assign(&configs[k].c, &states[k], w, h, frames, table_choice, &drawn, &s);
    CHECKF(st == ST_OK, "%s %dx%dx%d: %s", f[0], w, h, frames, st_error());
    bool skip = atoi(f[4]) != 0;
    bool same = s.skipped == skip;
    if (same && !skip)
        same = int_field(f[5], s.target_w) && int_field(f[6], s.target_h) && int_field(f[7], s.inter_w) &&
               int_field(f[8], s.inter_h) && int_field(f[9], s.crop_top) && int_field(f[10], s.crop_left) &&
               strtod(f[11], NULL) == s.aspect && !strcmp(f[12], s.key) && int_field(f[13], s.frames) &&
               int_field(f[14], s.bucket_frames);
    CHECKF(same,
           "%s %dx%d frames %d: SimpleTuner skip %s target %sx%s inter %sx%s crop %s,%s aspect %s key %s frames %s/%s;"
           " segtrain skip %d target %dx%d inter %dx%d crop %d,%d aspect %.17g key %s frames %d/%d",
           f[0], w, h, frames, f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12], f[13], f[14], s.skipped,
           s.target_w, s.target_h, s.inter_w, s.inter_h, s.crop_top, s.crop_left, s.aspect, s.key, s.frames,
           s.bucket_frames);
    (*rows)++;
}

static void check_table(const char *dir)
{
    char *text = tk_read_file(tk_path(dir, "tests/fixtures/buckets"), "table.csv");
    CHECKF(text != NULL, "cannot read %s/tests/fixtures/buckets/table.csv", dir);
    if (!text) return;
    static named_config configs[CONFIGS_MAX];
    bucket_state states[CONFIGS_MAX] = {{0}};
    int n_configs = 0, rows = 0, images = 0, clips = 0, skipped = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "#config ", 8)) {
            if (n_configs < CONFIGS_MAX) parse_config(line + 8, &configs[n_configs++]);
        } else if (line[0] != '#' && strncmp(line, "config,", 7)) {
            char copy[512];
            snprintf(copy, sizeof copy, "%s", line);
            int before = rows;
            check_row(copy, configs, n_configs, states, &rows);
            if (rows > before) {
                char *p = strchr(line, ',');
                int frames = 0, skip = 0, w, h;
                if (p && sscanf(p, ",%d,%d,%d,%d", &w, &h, &frames, &skip) == 4) {
                    images += frames == 0;
                    clips += frames != 0;
                    skipped += skip;
                }
            }
        }
    }
    for (int i = 0; i < n_configs; i++) bucket_state_free(&states[i]);
    printf("table: %d configs, %d rows (%d images, %d clips, %d skipped)\n", n_configs, rows, images, clips, skipped);
    CHECK(n_configs >= 10 && images >= 50 && clips >= 10);
    free(text);
}

/* The sampler: each batch one bucket, every kept sample repeats + 1 times, small buckets pruned unless kept, the
 * order a function of (seed, epoch), so that a resume at step k continues it exactly. */
static void check_sampler(void)
{
    enum { N = 23 };
    int bucket_of[N];
    for (int i = 0; i < N; i++) bucket_of[i] = i < 12 ? 0 : i < 21 ? 1 : 2; /* 12, 9 and 2 samples */
    bucket_epoch a, b, c;
    CHECK(bucket_epoch_make(bucket_of, N, 3, 4, 0, false, 7, 0, &a) == ST_OK);
    CHECK(a.n_batches == 3 + 2); /* bucket 1 leaves 1 out; bucket 2 (2 < 4) is pruned */
    int seen[N] = {0};
    for (int64_t k = 0; k < a.n_batches; k++) {
        CHECK(a.first[k + 1] - a.first[k] == 4);
        for (int64_t i = a.first[k]; i < a.first[k + 1]; i++) {
            CHECKF(bucket_of[a.index[i]] == bucket_of[a.index[a.first[k]]], "batch %lld mixes buckets", (long long)k);
            seen[a.index[i]]++;
        }
    }
    for (int i = 0; i < N; i++) CHECKF(seen[i] <= 1 && (i < 12 ? seen[i] == 1 : i >= 21 ? seen[i] == 0 : 1), "sample %d", i);
    /* a resume from step k recomputes the epoch and goes on from first[k]: the same samples, batch for batch */
    CHECK(bucket_epoch_make(bucket_of, N, 3, 4, 0, false, 7, 0, &b) == ST_OK);
    int64_t k = 2;
    CHECK(b.n_batches == a.n_batches && !memcmp(a.index + a.first[k], b.index + b.first[k],
                                                 (size_t)(a.first[a.n_batches] - a.first[k]) * sizeof *a.index));
    bucket_epoch_free(&b);
    CHECK(bucket_epoch_make(bucket_of, N, 3, 4, 0, false, 7, 1, &b) == ST_OK); /* the next epoch: another order */
    CHECK(memcmp(a.index, b.index, (size_t)a.first[a.n_batches] * sizeof *a.index) != 0);
    /* repeats 1 doubles each sample (bucket 2's two then fill a batch); disable_bucket_pruning keeps bucket 2 alone as
     * one short batch */
    CHECK(bucket_epoch_make(bucket_of, N, 3, 4, 1, false, 7, 0, &c) == ST_OK);
    CHECK(c.n_batches == 6 + 4 + 1 && c.first[c.n_batches] == 24 + 16 + 4);
    bucket_epoch_free(&c);
    CHECK(bucket_epoch_make(bucket_of, N, 3, 4, 0, true, 7, 0, &c) == ST_OK);
    CHECK(c.n_batches == 3 + 2 + 1 && c.first[c.n_batches] == 12 + 8 + 2);
    bucket_epoch_free(&a);
    bucket_epoch_free(&b);
    bucket_epoch_free(&c);
}

int main(int argc, char **argv)
{
    check_table(argc > 1 ? argv[1] : SEGTRAIN_SOURCE_DIR);
    check_sampler();
    return tk_finish();
}
