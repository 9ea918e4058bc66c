/* SimpleTuner backend lists (multidatabackend.json, src/train/backends.c) opened as datasets of PNGs written here:
 * captions by filename, textfile and instanceprompt, repeats, crops against an independent reference, and each
 * refusal with the words it must name. */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/data.h"
#include "testkit.h"

static char root[256];
static const char *captured = ""; /* what the last captured call reported */

static void make_dir(const char *name) { mkdir(tk_path(root, name), 0755); }

/* Writes json as bk.json, every '@' standing for the test's folder, and opens it at resolution R, stderr captured. */
static st_status open_json(const char *json, int R, dataset **ds)
{
    char text[4096];
    size_t o = 0;
    for (const char *p = json; *p && o + strlen(root) + 1 < sizeof text; p++)
        if (*p == '@') o += (size_t)snprintf(text + o, sizeof text - o, "%s", root);
        else text[o++] = *p;
    text[o] = 0;
    tk_write_file(root, "bk.json", text);
    tk_capture_begin(root);
    st_status st = dataset_open_backends(tk_path(root, "bk.json"), R, 7, ds);
    captured = tk_capture_end();
    return st;
}

/* A refusal: the status, and every one of up to three fragments in the message. */
static void expect_refusal(const char *what, const char *json, st_status want, const char *a, const char *b,
                           const char *c)
{
    dataset *ds = (dataset *)1;
    st_status st = open_json(json, 8, &ds);
    const char *msg = st_error();
    CHECKF(st == want && ds == NULL && strstr(msg, a) && (!b || strstr(msg, b)) && (!c || strstr(msg, c)),
           "%s: status %d, '%s'", what, (int)st, msg);
    if (!st) dataset_close(ds);
    printf("     %s -> %s\n", what, msg);
}

static void caption_of(const dataset *ds, int64_t i, char *cap)
{
    CHECK(dataset_get(ds, i, NULL, NULL, cap) == ST_OK);
}

static void test_backends_captions(void)
{
    unsigned char px[6][6][3];
    tk_fill_bytes(&px[0][0][0], sizeof px, 9);
    make_dir("bk");
    make_dir("bk/a");
    make_dir("bk/a/sub");
    tk_write_png(root, "bk/a/red_fox.png", 6, 6, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_png(root, "bk/a/blue_cat.png", 6, 6, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_file(root, "bk/a/blue_cat.txt", "a blue cat\n");
    tk_write_png(root, "bk/a/sub/deep_one.v2.png", 6, 6, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_png(root, "bk/a/.hidden.png", 6, 6, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_file(root, "bk/a/photo.jpg", "jpeg is not read");

    /* filename: the stem with '_' as ' ', the folder walked; caches and disabled backends skipped with a line each,
     * unknown keys one warning */
    dataset *ds = NULL;
    st_status st = open_json("[{\"id\": \"a\", \"type\": \"local\", \"instance_data_dir\": \"@/bk/a\", "
                             "\"minimum_image_size\": 4, \"frobnicate\": 1, \"cache_dir_vae\": \"x\"},\n"
                             " {\"id\": \"te\", \"type\": \"aws\", \"dataset_type\": \"text_embeds\", \"default\": true},\n"
                             " {\"id\": \"old\", \"type\": \"huggingface\", \"disabled\": true}]",
                             8, &ds);
    printf("     reported: %s", captured);
    CHECKF(st == ST_OK, "%s", st_error());
    if (st) return;
    CHECK(dataset_size(ds) == 3 && dataset_classes(ds) == 1 && !strcmp(dataset_class_name(ds, 0), "a"));
    static const char *want[] = {"blue cat", "red fox", "deep one.v2"};
    for (int i = 0; i < 3; i++) {
        char cap[CAPTION_MAX];
        int64_t label = -1;
        CHECK(dataset_get(ds, i, NULL, &label, cap) == ST_OK);
        CHECKF(!strcmp(cap, want[i]) && label == 0, "filename caption %d: '%s'", i, cap);
    }
    CHECK(strstr(captured, "ignoring keys segtrain does not read: minimum_image_size, frobnicate\n") != NULL);
    CHECK(tk_count(captured, "backend 'te': text_embeds cache, not needed") == 1);
    CHECK(tk_count(captured, "backend 'old': disabled") == 1 && tk_count(captured, "photo.jpg") == 1);
    CHECK(tk_count(captured, "hidden") == 0 && tk_count(captured, "backend 'a': 3 images") == 1);
    dataset_close(ds);

    /* textfile: every non-empty line a caption, one picked per sample and epoch; a missing .txt is an error */
    make_dir("bk/t");
    tk_write_png(root, "bk/t/one.png", 6, 6, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_file(root, "bk/t/one.txt", "first  line\n\n   \nsecond line\n");
    tk_write_png(root, "bk/t/two.png", 6, 6, PNG_FORMAT_RGB, px, NULL, 0);
    tk_write_file(root, "bk/t/two.txt", "solo");
    st = open_json("[{\"id\": \"t\", \"instance_data_dir\": \"@/bk/t\", \"caption_strategy\": \"textfile\"}]", 8, &ds);
    CHECKF(st == ST_OK, "%s", st_error());
    if (!st) {
        data_iter *it;
        CHECK(data_iter_create(ds, 1, &it) == ST_OK);
        int first = 0, second = 0, solo = 0, other = 0;
        for (int k = 0; k < 40; k++) {
            char caps[1][CAPTION_MAX];
            CHECK(data_iter_next_batch(it, 1, NULL, NULL, caps, NULL) == ST_OK);
            first += !strcmp(caps[0], "first line"), second += !strcmp(caps[0], "second line");
            solo += !strcmp(caps[0], "solo");
        }
        other = 40 - first - second - solo;
        CHECKF(first > 0 && second > 0 && solo == 20 && other == 0, "textfile lines: %d %d %d %d", first, second,
               solo, other);
        data_iter_destroy(it);
        dataset_close(ds);
    }
    st = open_json("[{\"id\": \"t\", \"instance_data_dir\": \"@/bk/t\", \"caption_strategy\": \"textfile\", "
                   "\"disable_multiline_split\": true, \"prepend_instance_prompt\": true, "
                   "\"instance_prompt\": \"sks\"}]", 8, &ds);
    if (!st) {
        char cap[CAPTION_MAX];
        caption_of(ds, 0, cap);
        CHECKF(!strcmp(cap, "sks first line second line"), "one line, prompt first: '%s'", cap);
        dataset_close(ds);
    }
    CHECK(st == ST_OK);
    expect_refusal("textfile without a .txt", "[{\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\", "
                   "\"caption_strategy\": \"textfile\"}]", ST_ERR_IO, "red_fox.png", "red_fox.txt", "backend 'a'");

    /* instanceprompt: the prompt for every image; a list gives one of them per sample */
    st = open_json("[{\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\", \"caption_strategy\": \"instanceprompt\", "
                   "\"instance_prompt\": \"  a photo of sks \"}]", 8, &ds);
    if (!st) {
        char cap[CAPTION_MAX];
        int same = 0;
        for (int i = 0; i < 3; i++) caption_of(ds, i, cap), same += !strcmp(cap, "a photo of sks");
        CHECKF(same == 3, "instanceprompt captions: %d of 3", same);
        dataset_close(ds);
    }
    CHECK(st == ST_OK);
    expect_refusal("instanceprompt without a prompt", "[{\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\", "
                   "\"caption_strategy\": \"instanceprompt\"}]", ST_ERR_INVALID, "needs an instance_prompt", NULL,
                   NULL);
    expect_refusal("a caption table", "[{\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\", "
                   "\"caption_strategy\": \"parquet\"}]", ST_ERR_UNSUPPORTED, "caption_strategy parquet",
                   "filename, textfile or instanceprompt", NULL);
}

static void test_backends_repeats(void)
{
    /* a: 3 images seen 1 + 2 times an epoch; t: 2 images once; labels are the backends */
    dataset *ds = NULL;
    st_status st = open_json("[{\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\", \"repeats\": 2},"
                             " {\"id\": \"t\", \"instance_data_dir\": \"@/bk/t\", \"caption_strategy\": \"textfile\","
                             "  \"disable_multiline_split\": true, \"repeats\": \"0\"}]", 8, &ds);
    CHECKF(st == ST_OK, "%s", st_error());
    if (st) return;
    CHECKF(dataset_size(ds) == 3 * 3 + 2 && dataset_classes(ds) == 2, "size %lld", (long long)dataset_size(ds));
    CHECK(!strcmp(dataset_class_name(ds, 1), "t"));
    data_iter *it;
    CHECK(data_iter_create(ds, 5, &it) == ST_OK);
    int fox = 0, cat = 0, deep = 0, one = 0, two = 0, bad_label = 0;
    for (int k = 0; k < 11; k++) {
        char caps[1][CAPTION_MAX];
        int64_t label;
        CHECK(data_iter_next_batch(it, 1, NULL, &label, caps, NULL) == ST_OK);
        fox += !strcmp(caps[0], "red fox"), cat += !strcmp(caps[0], "blue cat");
        deep += !strcmp(caps[0], "deep one.v2");
        one += !strcmp(caps[0], "first line second line"), two += !strcmp(caps[0], "solo");
        bad_label += label != (caps[0][0] == 'f' || caps[0][0] == 's' ? 1 : 0);
    }
    CHECKF(fox == 3 && cat == 3 && deep == 3 && one == 1 && two == 1 && bad_label == 0,
           "one epoch: fox %d cat %d deep %d one %d two %d, %d labels wrong", fox, cat, deep, one, two, bad_label);
    data_iter_destroy(it);
    dataset_close(ds);
    expect_refusal("negative repeats", "[{\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\", \"repeats\": -1}]",
                   ST_ERR_INVALID, "repeats -1", "backend 'a'", NULL);
    /* 23 backends of 3 images, each seen a million times: past the 2^26 samples the iterator's order may hold */
    char many[3000] = "[";
    for (int b = 0; b < 23; b++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s{\"id\": \"b%d\", \"instance_data_dir\": "
                 "\"@/bk/a\", \"repeats\": 1000000}", b ? ", " : "", b);
    strcat(many, "]");
    expect_refusal("repeats past the sample limit", many, ST_ERR_INVALID, "backend 'b22'", "lower repeats", NULL);
}

/* A 40 x 30 image (test_data's test_folder_flat has the same) through each crop: the square of its shorter side at
 * x 5 (center), x 0 (corner) or a place fixed by the seed (random), and through a smaller backend edge first. */
static void test_backends_crop(void)
{
    enum { R = 8, per = 3 * R * R };
    static unsigned char wide[30][40][3]; /* green margins 5 wide left and right, random inside */
    tk_fill_bytes(&wide[0][0][0], sizeof wide, 3);
    for (int y = 0; y < 30; y++)
        for (int x = 0; x < 40; x++)
            if (x < 5 || x >= 35) wide[y][x][0] = 0, wide[y][x][1] = 255, wide[y][x][2] = 0;
    make_dir("bk/w");
    tk_write_png(root, "bk/w/wide.png", 40, 30, PNG_FORMAT_RGB, wide, NULL, 0);
    float got[per];
    double want[per];
    static const struct {
        const char *keys;
        int x0;
    } crops[] = {{"\"crop\": true, \"crop_style\": \"center\"", 5},
                 {"\"crop\": true, \"crop_style\": \"centre\", \"crop_aspect\": \"square\"", 5},
                 {"\"crop\": true, \"crop_style\": \"corner\"", 0},
                 {"\"crop\": false, \"crop_style\": \"corner\"", 5}, /* no crop: the center square */
                 {"\"resolution\": 1024, \"resolution_type\": \"pixel_area\"", 5}};
    for (size_t i = 0; i < sizeof crops / sizeof crops[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, "[{\"id\": \"w\", \"instance_data_dir\": \"@/bk/w\", %s}]", crops[i].keys);
        dataset *ds = NULL;
        CHECKF(open_json(json, R, &ds) == ST_OK, "%s: %s", crops[i].keys, st_error());
        if (!ds) continue;
        CHECK(dataset_get(ds, 0, got, NULL, NULL) == ST_OK);
        tk_ref_shrink(&wide[0][0][0], 40, crops[i].x0, 0, 30, R, want);
        CHECKF(tk_max_diff(got, want, per) < 1e-5, "%s: diff %g", crops[i].keys, tk_max_diff(got, want, per));
        dataset_close(ds);
    }
    CHECKF(strstr(captured, "center square crop (crop is false, but the model takes squares), 1024-pixel squares "
                            "(resolution 1024 pixel_area), resampled to the model's 8\n") != NULL, "%s", captured);

    /* random: one of the eleven places, the same for the same seed; other seeds reach other places */
    const char *random = "[{\"id\": \"w\", \"instance_data_dir\": \"@/bk/w\", \"crop\": true}]";
    int places = 0, again = 1;
    for (uint64_t seed = 0; seed < 12; seed++) {
        dataset *ds = NULL, *ds2 = NULL;
        open_json(random, R, &ds);
        CHECK(ds != NULL);
        if (!ds) return;
        dataset_close(ds);
        tk_capture_begin(root);
        CHECK(dataset_open_backends(tk_path(root, "bk.json"), R, seed, &ds) == ST_OK);
        CHECK(dataset_open_backends(tk_path(root, "bk.json"), R, seed, &ds2) == ST_OK);
        captured = tk_capture_end();
        float got2[per];
        CHECK(dataset_get(ds, 0, got, NULL, NULL) == ST_OK && dataset_get(ds2, 0, got2, NULL, NULL) == ST_OK);
        again &= memcmp(got, got2, sizeof got) == 0;
        int at = -1;
        for (int x0 = 0; x0 <= 10 && at < 0; x0++) {
            tk_ref_shrink(&wide[0][0][0], 40, x0, 0, 30, R, want);
            if (tk_max_diff(got, want, per) < 1e-5) at = x0;
        }
        CHECKF(at >= 0, "seed %llu: the random crop is none of the 11 squares", (unsigned long long)seed);
        places |= at >= 0 ? 1 << at : 0;
        dataset_close(ds);
        dataset_close(ds2);
    }
    CHECK(again);
    CHECKF(__builtin_popcount((unsigned)places) >= 3, "12 seeds reach only places %#x", (unsigned)places);

    /* resolution 4 (pixel) below the model's 8: the square is first 4 x 4 8-bit pixels, then grown to 8 */
    dataset *ds = NULL;
    CHECK(open_json("[{\"id\": \"w\", \"instance_data_dir\": \"@/bk/w\", \"crop\": true, \"crop_style\": \"center\", "
                    "\"resolution\": 4, \"resolution_type\": \"pixel\"}]", R, &ds) == ST_OK);
    if (!ds) return;
    double small[3 * 16];
    unsigned char mid[4][4][3];
    tk_ref_shrink(&wide[0][0][0], 40, 5, 0, 30, 4, small);
    for (int ch = 0; ch < 3; ch++)
        for (int k = 0; k < 16; k++) mid[k / 4][k % 4][ch] = (unsigned char)lrint((small[ch * 16 + k] + 1) * 127.5);
    tk_ref_grow(&mid[0][0][0], 4, 0, 0, 4, R, want);
    CHECK(dataset_get(ds, 0, got, NULL, NULL) == ST_OK);
    CHECKF(tk_max_diff(got, want, per) < 1e-5, "through a 4-pixel edge: diff %g", tk_max_diff(got, want, per));
    dataset_close(ds);
    expect_refusal("a face crop", "[{\"id\": \"w\", \"instance_data_dir\": \"@/bk/w\", \"crop\": true, "
                   "\"crop_style\": \"face\"}]", ST_ERR_UNSUPPORTED, "crop_style face", NULL, NULL);
    expect_refusal("crop as a string", "[{\"id\": \"w\", \"instance_data_dir\": \"@/bk/w\", \"crop\": \"yes\"}]",
                   ST_ERR_INVALID, "crop must be true or false, got \"yes\"", NULL, NULL);
    expect_refusal("an unknown resolution_type", "[{\"id\": \"w\", \"instance_data_dir\": \"@/bk/w\", "
                   "\"resolution_type\": \"megapixel\"}]", ST_ERR_INVALID, "resolution_type megapixel",
                   "pixel, area or pixel_area", NULL);
}

static void test_backends_refusals(void)
{
    expect_refusal("a hub dataset", "[{\"id\": \"dreambooth-512\", \"type\": \"huggingface\", \"dataset_name\": "
                   "\"RareConcepts/Domokun\"}]", ST_ERR_UNSUPPORTED, "backend 'dreambooth-512'", "type huggingface",
                   "local image folders");
    expect_refusal("a bucket", "[{\"id\": \"s3\", \"type\": \"aws\", \"aws_bucket_name\": \"b\"}]",
                   ST_ERR_UNSUPPORTED, "backend 's3'", "type aws", "local image folders");
    expect_refusal("a video dataset", "[{\"id\": \"clips\", \"dataset_type\": \"video\", \"instance_data_dir\": "
                   "\"@/bk/a\"}]", ST_ERR_UNSUPPORTED, "backend 'clips'", "video dataset", "aspect buckets only");
    expect_refusal("an unknown dataset_type", "[{\"id\": \"x\", \"dataset_type\": \"images\", \"instance_data_dir\": "
                   "\"@/bk/a\"}]", ST_ERR_INVALID, "dataset_type images", NULL, NULL);
    expect_refusal("a missing folder, relative", "[{\"id\": \"gone\", \"instance_data_dir\": \"no/such/folder\"}]",
                   ST_ERR_IO, "backend 'gone'", "no/such/folder: No such file", "working directory");
    expect_refusal("a missing folder, absolute", "[{\"id\": \"gone\", \"instance_data_dir\": \"@/nowhere\"}]",
                   ST_ERR_IO, "nowhere: No such file", NULL, NULL);
    expect_refusal("no instance_data_dir", "[{\"id\": \"a\"}]", ST_ERR_INVALID, "no instance_data_dir", NULL, NULL);
    make_dir("bk/empty");
    tk_write_file(root, "bk/empty/readme.md", "no images here");
    tk_write_file(root, "bk/empty/fake.png", "not a png");
    expect_refusal("a backend with no images", "[{\"id\": \"e\", \"instance_data_dir\": \"@/bk/empty\"}]",
                   ST_ERR_FORMAT, "backend 'e'", "no usable PNG image", "1 skipped");
    expect_refusal("malformed JSON", "[{\"id\": \"a\",\n  \"crop\": tru}]", ST_ERR_FORMAT, "bk.json:2:", "malformed JSON",
                   NULL);
    expect_refusal("cut JSON", "[{\"id\": \"a\"", ST_ERR_FORMAT, "unexpected end of text", NULL, NULL);
    expect_refusal("not a list", "{\"id\": \"a\"}", ST_ERR_FORMAT, "expected a JSON list of backends", NULL, NULL);
    expect_refusal("an entry without id", "[{\"type\": \"local\"}]", ST_ERR_INVALID, "entry 0: no id", NULL, NULL);
    expect_refusal("only disabled backends and caches", "[{\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\", "
                   "\"disabled\": true}, {\"id\": \"b\", \"instance_data_dir\": \"@/bk/a\", \"disable\": true}, "
                   "{\"id\": \"v\", \"dataset_type\": \"image_embeds\"}]", ST_ERR_INVALID, "no enabled image backend",
                   "3 entries", NULL);
    /* ids: two enabled entries may not share one (a disabled one may, as SimpleTuner skips it first) */
    expect_refusal("a duplicate id", "[{\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\"}, {\"id\": \"b\", "
                   "\"instance_data_dir\": \"@/bk/a\"}, {\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\"}]",
                   ST_ERR_INVALID, "id 'a'", "entries 0 and 2", NULL);
    expect_refusal("a cache with an image backend's id", "[{\"id\": \"te\", \"dataset_type\": \"text_embeds\"}, "
                   "{\"id\": \"te\", \"instance_data_dir\": \"@/bk/a\"}]", ST_ERR_INVALID, "id 'te'",
                   "entries 0 and 1", NULL);
    dataset *ds = NULL;
    st_status st = open_json("[{\"id\": \"a\", \"instance_data_dir\": \"@/bk/a\"}, {\"id\": \"a\", "
                             "\"instance_data_dir\": \"@/bk/a\", \"disabled\": true}]", 8, &ds);
    CHECKF(st == ST_OK, "a disabled twin: %s", st_error());
    if (!st) dataset_close(ds);
    /* instance_prompt: a list with nothing to pick from */
    expect_refusal("an empty instance_prompt list", "[{\"id\": \"p\", \"instance_data_dir\": \"@/bk/a\", "
                   "\"caption_strategy\": \"instanceprompt\", \"instance_prompt\": []}]", ST_ERR_INVALID,
                   "backend 'p'", "instance_prompt []", "no non-empty prompt");
    expect_refusal("a list of blank prompts", "[{\"id\": \"p\", \"instance_data_dir\": \"@/bk/a\", "
                   "\"instance_prompt\": [\"\", \"  \"]}]", ST_ERR_INVALID, "backend 'p'", "no non-empty prompt",
                   NULL);
    /* walks that would wander: a pseudo-filesystem (/proc/self leads to / again), a folder too deep */
    if (!access("/proc/self", R_OK))
        expect_refusal("a backend in /proc", "[{\"id\": \"pr\", \"instance_data_dir\": \"/proc/self\"}]",
                       ST_ERR_INVALID, "backend 'pr'", "proc pseudo-filesystem", NULL);
    if (!access("/sys/kernel", R_OK))
        expect_refusal("a backend in /sys", "[{\"id\": \"sy\", \"instance_data_dir\": \"/sys\"}]",
                       ST_ERR_INVALID, "sysfs pseudo-filesystem", NULL, NULL);
    char deep[512] = "bk/deep";
    make_dir(deep);
    for (int d = 0; d < 33; d++) strcat(deep, "/d"), make_dir(deep);
    expect_refusal("folders nested too deep", "[{\"id\": \"dp\", \"instance_data_dir\": \"@/bk/deep\"}]",
                   ST_ERR_INVALID, "more than 32 levels", "bk/deep", NULL);
    ds = (dataset *)1;
    CHECK(dataset_open_backends(tk_path(root, "no-such.json"), 8, 1, &ds) == ST_ERR_IO && ds == NULL &&
          strstr(st_error(), "no-such.json"));
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segtrain-test-backends-XXXXXX");
    if (!mkdtemp(root)) return 1;
    test_backends_captions();
    test_backends_repeats();
    test_backends_crop();
    test_backends_refusals();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
