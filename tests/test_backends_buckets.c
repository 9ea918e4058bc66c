/* A multidatabackend.json opened into SimpleTuner's aspect buckets (dataset_open_backend_buckets) over the committed
 * PNGs of tests/fixtures/cache-images (five images, three aspects, square random crops) and
 * tests/fixtures/bucket-images (landscape, portrait, one 2:1 banner and one image below minimum_image_size, aspects
 * preserved, center crops): each image's bucket and size against bucket_assign given the same settings in the same
 * order, each sample's pixels against a resize and crop computed here from the PNG, one line per bucket, the bucket
 * iterator's batches (one bucket each, every sample once an epoch, pruning, disable_bucket_pruning), a resume from
 * a saved position, and the refusals of the bucket keys. */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/buckets.h"
#include "segtrain/data.h"
#include "testkit.h"

#define IMAGES SEGTRAIN_SOURCE_DIR "/tests/fixtures/"
#define EDGE_MAX 64 /* no bucket of these settings is larger */
enum { SHAPES = 5, ASPECTS = 7, SAMPLES = SHAPES + ASPECTS, BATCH = 2 };

static char root[256];
static const char *captured = "";

/* The images in walk order (names sorted, folders entered where they sort), and their backends: speck.png (8 x 8)
 * is below the second's minimum_image_size. */
static const char *const files[SAMPLES + 1] = {
    "cache-images/blue_triangle.png", "cache-images/green_square.png", "cache-images/more/white_circle.png",
    "cache-images/more/yellow_diamond.png", "cache-images/red_circle.png", "bucket-images/banner.png",
    "bucket-images/speck.png", "bucket-images/tall_fern.png", "bucket-images/tall_pine.png",
    "bucket-images/wide_cat.png", "bucket-images/wide_elk.png", "bucket-images/wide_fox.png",
    "bucket-images/wide_owl.png"};
static const int backend_of[SAMPLES + 1] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};

static const char *const list =
    "[{\"id\": \"shapes\", \"instance_data_dir\": \"" IMAGES "cache-images\", \"crop\": true, \"crop_style\": "
    "\"random\", \"resolution\": 16, \"resolution_type\": \"pixel\"},\n"
    " {\"id\": \"aspects\", \"instance_data_dir\": \"" IMAGES "bucket-images\", \"crop\": true, \"crop_aspect\": "
    "\"preserve\", \"crop_style\": \"center\", \"resolution\": 16, \"resolution_type\": \"pixel\", "
    "\"minimum_image_size\": 12},\n"
    " {\"id\": \"te\", \"dataset_type\": \"text_embeds\"}]";

/* The run's settings: SimpleTuner's defaults with a 16-pixel resolution and an alignment of 8. */
static bucket_config run_settings(void)
{
    bucket_config c;
    bucket_config_default(&c);
    c.resolution = 16;
    c.resolution_type = BUCKET_PIXEL_AREA;
    c.alignment = 8;
    return c;
}

/* Each backend's settings as its entry gives them over the run's. */
static bucket_config backend_settings(int backend)
{
    bucket_config c = run_settings();
    c.resolution_type = BUCKET_PIXEL;
    c.crop = true;
    c.crop_style = backend ? BUCKET_CROP_CENTER : BUCKET_CROP_RANDOM;
    c.crop_aspect = backend ? BUCKET_ASPECT_PRESERVE : BUCKET_ASPECT_SQUARE;
    c.minimum_image_size = backend ? 12 : 0;
    return c;
}

static st_status open_list(const char *json, const bucket_config *run, uint64_t seed, dataset **ds)
{
    tk_write_file(root, "bk.json", json);
    tk_capture_begin(root);
    st_status st = dataset_open_backend_buckets(tk_path(root, "bk.json"), run, seed, ds);
    captured = tk_capture_end();
    return st;
}

static unsigned char *read_png(const char *path, int *w, int *h)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    unsigned char *px = NULL;
    if (png_image_begin_read_from_file(&img, path)) {
        img.format = PNG_FORMAT_RGB;
        px = malloc(PNG_IMAGE_SIZE(img));
        if (px && !png_image_finish_read(&img, NULL, px, 0, NULL)) free(px), px = NULL;
    }
    CHECKF(px != NULL, "%s: %s", path, img.message);
    *w = (int)img.width, *h = (int)img.height;
    png_image_free(&img);
    return px;
}

/* The weight of source pixel j in output pixel o, S pixels scaled to R: the area average of [o S/R, (o+1) S/R)
 * when shrinking, bilinear between pixel centers (at +0.5, clamped to the edge pixels) when growing. */
static double weight(int S, int R, int o, int j)
{
    if (S >= R) {
        const double sc = (double)S / R, overlap = fmin((o + 1) * sc, j + 1.0) - fmax(o * sc, (double)j);
        return overlap > 0 ? overlap / sc : 0;
    }
    const double f = fmin(fmax((o + 0.5) * S / R - 0.5, 0.0), S - 1.0);
    const int j0 = (int)f;
    const double t = f - j0;
    return j == j0 ? 1 - t : j == j0 + 1 ? t : 0;
}

/* The w x h image px resized to rw x rh, the tw x th window at (left, top) of it, as CHW values in [-1, 1]. */
static void reference(const unsigned char *px, int w, int h, int rw, int rh, int left, int top, int tw, int th,
                      double *out)
{
    for (int ch = 0; ch < 3; ch++)
        for (int y = 0; y < th; y++)
            for (int x = 0; x < tw; x++) {
                double acc = 0;
                for (int sy = 0; sy < h; sy++) {
                    const double wy = weight(h, rh, top + y, sy);
                    for (int sx = 0; wy != 0 && sx < w; sx++)
                        acc += wy * weight(w, rw, left + x, sx) * px[(sy * w + sx) * 3 + ch];
                }
                out[((int64_t)ch * th + y) * tw + x] = fmin(1.0, fmax(-1.0, acc / 255.0 * 2.0 - 1.0));
            }
}

/* Every sample's bucket and pixels, for the n images of paths in walk order, image i read with configs[labels[i]]:
 * the bucket bucket_assign gives it (one aspect map for every backend, in order; an image it skips is no sample), the
 * image resized and cut where bucket_assign says (crop_style random: at one of the places it may take). Returns how
 * many images were resized to a size other than their intermediary one (target_downsample_size). */
static int check_samples(const dataset *ds, const char *const *paths, const bucket_config *configs, const int *labels,
                         int n)
{
    static float got[3 * EDGE_MAX * EDGE_MAX];
    static double want[3 * EDGE_MAX * EDGE_MAX];
    bucket_state map = {0};
    int64_t sample = 0;
    int downsampled = 0;
    for (int i = 0; i < n; i++) {
        int w, h;
        unsigned char *px = read_png(tk_path(IMAGES, paths[i]), &w, &h);
        bucket_sample s;
        CHECK(bucket_assign(&configs[labels[i]], &map, w, h, 0, NULL, NULL, &s) == ST_OK);
        if (!px || s.skipped) {
            printf("     %-36s %3dx%-3d -> left out\n", paths[i], w, h);
            free(px);
            continue;
        }
        const int64_t at = sample++;
        const data_bucket *b = dataset_bucket(ds, dataset_bucket_of(ds, at));
        CHECKF(b && b->width == s.target_w && b->height == s.target_h && !strcmp(b->name, s.key) &&
               b->label == labels[i], "%s: bucket %s %dx%d, bucket_assign %s %dx%d", paths[i], b ? b->name : "-",
               b ? b->width : 0, b ? b->height : 0, s.key, s.target_w, s.target_h);
        int64_t label;
        CHECK(b && dataset_get(ds, at, got, &label, NULL) == ST_OK && label == labels[i]);
        const int rw = s.resize_w > s.target_w ? s.resize_w : s.target_w;
        const int rh = s.resize_h > s.target_h ? s.resize_h : s.target_h, size = 3 * s.target_w * s.target_h;
        int places = 0, matched = 0;
        for (int top = 0; top <= rh - s.target_h; top++)
            for (int left = 0; left <= rw - s.target_w; left++) {
                if (s.crop_top >= 0 && (top != s.crop_top || left != s.crop_left)) continue;
                places++;
                reference(px, w, h, rw, rh, left, top, s.target_w, s.target_h, want);
                matched += tk_max_diff(got, want, size) < 1e-5;
            }
        CHECKF(matched == 1, "%s (%dx%d) in %s (%dx%d, through %dx%d): %d of %d crop places match", paths[i], w, h,
               s.key, s.target_w, s.target_h, rw, rh, matched, places);
        downsampled += s.resize_w != s.inter_w || s.resize_h != s.inter_h;
        printf("     %-36s %3dx%-3d -> bucket %-4s %dx%d through %dx%d, %d place%s\n", paths[i], w, h, s.key,
               s.target_w, s.target_h, rw, rh, places, places == 1 ? "" : "s");
        free(px);
    }
    CHECK(sample == dataset_size(ds));
    bucket_state_free(&map);
    return downsampled;
}

static void test_buckets_open(void)
{
    const bucket_config run = run_settings();
    dataset *ds = NULL, *again = NULL;
    CHECKF(open_list(list, &run, 11, &ds) == ST_OK, "%s", st_error());
    if (!ds) return;
    printf("%s", captured);
    CHECK(dataset_size(ds) == SAMPLES && dataset_classes(ds) == 2 && dataset_resolution(ds) == 0);
    CHECK(dataset_buckets(ds) == 4 && !dataset_bucket(ds, 4) && dataset_bucket_of(ds, SAMPLES) == -1);
    CHECK(strstr(captured, "data: backend 'aspects': 7 images in " IMAGES "bucket-images in 3 aspect buckets "
                           "(resolution 16 pixel, crop true, crop_style center, crop_aspect preserve, alignment 8); 1 "
                           "below minimum_image_size 12 left out") != NULL);
    CHECK(strstr(captured, "data: backend 'aspects': bucket 1.5 (24x16): 4 images\n") != NULL);
    CHECK(strstr(captured, "data: backend 'aspects': bucket 0.67 (16x24): 2 images\n") != NULL);
    CHECK(strstr(captured, "data: backend 'aspects': bucket 2.0 (32x16): 1 image\n") != NULL);
    CHECK(strstr(captured, "data: backend 'shapes': bucket 1.0 (16x16): 5 images\n") != NULL);
    CHECK(strstr(captured, "ignoring keys") == NULL); /* the bucket keys are read */
    const bucket_config configs[2] = {backend_settings(0), backend_settings(1)};
    check_samples(ds, files, configs, backend_of, SAMPLES + 1);
    /* each bucket lists its samples, ascending, and every sample is in one */
    int64_t listed = 0;
    for (int b = 0; b < dataset_buckets(ds); b++) {
        const data_bucket *bk = dataset_bucket(ds, b);
        CHECK(bk->count == bk->images);
        for (int64_t k = 0; k < bk->count; k++)
            CHECK(dataset_bucket_of(ds, bk->samples[k]) == b && (k == 0 || bk->samples[k] > bk->samples[k - 1]));
        listed += bk->count;
    }
    CHECK(listed == SAMPLES);
    /* a random crop is fixed by the seed: the same seed, the same pixels */
    static float a[3 * 16 * 16], b2[3 * 16 * 16];
    CHECK(open_list(list, &run, 11, &again) == ST_OK);
    int same = 1;
    for (int i = 0; again && i < SHAPES; i++) {
        CHECK(dataset_get(ds, i, a, NULL, NULL) == ST_OK && dataset_get(again, i, b2, NULL, NULL) == ST_OK);
        same &= !memcmp(a, b2, sizeof a);
    }
    CHECK(same);
    dataset_close(again);
    dataset_close(ds);
}

/* maximum_image_size and target_downsample_size (area, tiny megapixels for tiny images): an image is resized to
 * target_downsample_size's size before the crop, and the aspect map gives each aspect the size its first image got;
 * crop_style corner. */
static void test_buckets_downsample(void)
{
    static const char *const paths[8] = {"bucket-images/banner.png", "bucket-images/speck.png",
                                         "bucket-images/tall_fern.png", "bucket-images/tall_pine.png",
                                         "bucket-images/wide_cat.png", "bucket-images/wide_elk.png",
                                         "bucket-images/wide_fox.png", "bucket-images/wide_owl.png"};
    static const int labels[8] = {0};
    const bucket_config run = run_settings();
    dataset *ds = NULL;
    CHECKF(open_list("[{\"id\": \"d\", \"instance_data_dir\": \"" IMAGES "bucket-images\", \"crop\": true, "
                     "\"crop_aspect\": \"preserve\", \"crop_style\": \"corner\", \"resolution\": 0.0005, "
                     "\"resolution_type\": \"area\", \"maximum_image_size\": 0.001, \"target_downsample_size\": "
                     "0.0008}]", &run, 1, &ds) == ST_OK, "%s", st_error());
    if (!ds) return;
    printf("%s", captured);
    bucket_config c = run;
    c.resolution = 0.0005, c.resolution_type = BUCKET_AREA, c.crop = true, c.crop_aspect = BUCKET_ASPECT_PRESERVE;
    c.crop_style = BUCKET_CROP_CORNER, c.maximum_image_size = 0.001, c.target_downsample_size = 0.0008;
    const int downsampled = check_samples(ds, paths, &c, labels, 8);
    CHECKF(downsampled >= 1, "no image went through target_downsample_size (%d)", downsampled);
    dataset_close(ds);
}

/* The batches of n_batches steps from it (bucket, then sample indices), checking each is of one bucket. */
static void draw_batches(const dataset *ds, data_iter *it, int n_batches, int *buckets, int64_t *indices)
{
    static float images[BATCH * 3 * EDGE_MAX * EDGE_MAX];
    for (int k = 0; k < n_batches; k++) {
        int b = -1;
        CHECK(data_iter_peek_bucket(it, &b) == ST_OK);
        const data_bucket *bk = dataset_bucket(ds, b);
        CHECK(bk != NULL && data_iter_next_batch(it, BATCH, images, NULL, NULL, indices + k * BATCH) == ST_OK);
        for (int j = 0; bk && j < BATCH; j++) {
            static float one[3 * EDGE_MAX * EDGE_MAX];
            const int64_t per = 3ll * bk->width * bk->height;
            CHECK(dataset_bucket_of(ds, indices[k * BATCH + j]) == b);
            CHECK(dataset_get(ds, indices[k * BATCH + j], one, NULL, NULL) == ST_OK &&
                  !memcmp(one, images + j * per, sizeof(float) * (size_t)per));
        }
        buckets[k] = b;
    }
}

static void test_buckets_batches(void)
{
    const bucket_config run = run_settings();
    dataset *ds = NULL;
    CHECK(open_list(list, &run, 11, &ds) == ST_OK);
    if (!ds) return;
    data_iter *it = NULL, *resumed = NULL;
    /* batches of 2: shapes' 1.0 gives 2 (one left over), 1.5 gives 2, 0.67 one; 2.0 (one image) is pruned */
    tk_capture_begin(root);
    CHECK(data_iter_create_buckets(ds, 5, BATCH, false, &it) == ST_OK);
    captured = tk_capture_end();
    CHECKF(strstr(captured, "data: backend 'aspects': bucket 2.0 (32x16) left out: 1 sample, fewer than a batch of 2 "
                            "(disable_bucket_pruning keeps it)\n") != NULL, "%s", captured);
    if (!it) return;
    enum { PER_EPOCH = 5, STEPS = 3 * PER_EPOCH };
    CHECK(data_iter_epoch_batches(it) == PER_EPOCH);
    data_iter *square = NULL;
    CHECK(data_iter_create(ds, 5, &square) == ST_ERR_INVALID && !square &&
          strstr(st_error(), "data_iter_create_buckets"));
    int buckets[STEPS], again[STEPS];
    int64_t indices[STEPS * BATCH], more[STEPS * BATCH];
    draw_batches(ds, it, STEPS, buckets, indices);
    for (int e = 0; e < 3; e++) { /* each epoch: no sample twice, the banner never */
        int seen[SAMPLES] = {0};
        for (int k = 0; k < PER_EPOCH * BATCH; k++) seen[indices[e * PER_EPOCH * BATCH + k]]++;
        int twice = 0;
        for (int i = 0; i < SAMPLES; i++) twice += seen[i] > 1;
        CHECKF(twice == 0 && seen[SHAPES] == 0, "epoch %d: %d samples twice, banner %d times", e, twice, seen[SHAPES]);
    }
    CHECK(memcmp(indices, indices + PER_EPOCH * BATCH, sizeof(int64_t) * PER_EPOCH * BATCH) != 0);
    /* a resume at the position after 7 batches continues with the same batches */
    data_iter_destroy(it);
    CHECK(data_iter_create_buckets(ds, 5, BATCH, false, &it) == ST_OK);
    draw_batches(ds, it, 7, again, more);
    const data_position at = data_iter_position(it);
    CHECK(at.epoch == 1 && at.index == 2);
    tk_capture_begin(root);
    CHECK(data_iter_create_buckets(ds, 5, BATCH, false, &resumed) == ST_OK && data_iter_seek(resumed, at) == ST_OK);
    captured = tk_capture_end();
    draw_batches(ds, resumed, STEPS - 7, again + 7, more + 7 * BATCH);
    CHECK(!memcmp(buckets, again, sizeof buckets) && !memcmp(indices, more, sizeof indices));
    CHECK(data_iter_seek(resumed, (data_position){0, PER_EPOCH + 1}) == ST_ERR_INVALID &&
          strstr(st_error(), "5 batches an epoch"));
    CHECK(data_iter_next_batch(resumed, 3, NULL, NULL, NULL, NULL) == ST_ERR_INVALID &&
          strstr(st_error(), "a batch of 3 from bucket batches of 2"));
    data_iter_destroy(resumed);
    data_iter_destroy(it);
    /* disable_bucket_pruning: the banner's one short batch, filled up with itself */
    CHECK(data_iter_create_buckets(ds, 5, BATCH, true, &it) == ST_OK && data_iter_epoch_batches(it) == PER_EPOCH + 1);
    int banner = 0;
    draw_batches(ds, it, PER_EPOCH + 1, buckets, indices);
    for (int k = 0; k <= PER_EPOCH; k++)
        banner += indices[k * BATCH] == SHAPES && indices[k * BATCH + 1] == SHAPES;
    CHECK(banner == 1);
    data_iter_destroy(it);
    /* batches of 6: the aspects' buckets are pruned (it has a minimum_image_size); the shapes' five images, in a
     * backend with none, make one batch, filled up with one of them again, as SimpleTuner keeps them */
    tk_capture_begin(root);
    CHECK(data_iter_create_buckets(ds, 5, 6, false, &it) == ST_OK && data_iter_epoch_batches(it) == 1);
    captured = tk_capture_end();
    CHECK(tk_count(captured, "left out") == 3 && strstr(captured, "bucket 1.5 (24x16) left out: 4 samples"));
    int64_t six[6];
    CHECK(it && data_iter_next_batch(it, 6, NULL, NULL, NULL, six) == ST_OK);
    int from_shapes = 0;
    for (int j = 0; j < 6; j++) from_shapes += six[j] < SHAPES && six[j] == six[j % 5];
    CHECK(from_shapes == 6);
    data_iter_destroy(it);
    dataset_close(ds);
    /* the aspects alone, in batches of 6: every bucket pruned */
    const char *aspects = strstr(list, " {\"id\": \"aspects\"");
    char only[1024];
    snprintf(only, sizeof only, "[%.*s]", (int)(strstr(aspects, "},\n") + 1 - aspects), aspects);
    CHECK(open_list(only, &run, 11, &ds) == ST_OK);
    tk_capture_begin(root);
    CHECK(ds && data_iter_create_buckets(ds, 5, 6, false, &it) == ST_ERR_INVALID && it == NULL &&
          strstr(st_error(), "every bucket has fewer samples than a batch of 6") &&
          strstr(st_error(), "1.5 (24x16) of backend 'aspects', has 4"));
    captured = tk_capture_end();
    dataset_close(ds);
    /* a square dataset has no buckets */
    CHECK(dataset_open_builtin(8, 4, 1, &ds) == ST_OK);
    CHECK(dataset_buckets(ds) == 0 && dataset_bucket_of(ds, 0) == -1);
    CHECK(data_iter_create_buckets(ds, 5, 2, false, &it) == ST_ERR_INVALID && strstr(st_error(), "bucketed dataset"));
    dataset_close(ds);
}

/* repeats count as samples: each image 1 + repeats times, in its bucket. */
static void test_buckets_repeats(void)
{
    const bucket_config run = run_settings();
    dataset *ds = NULL;
    CHECK(open_list("[{\"id\": \"a\", \"instance_data_dir\": \"" IMAGES "bucket-images\", \"crop\": true, "
                    "\"crop_aspect\": \"preserve\", \"repeats\": 2}]", &run, 1, &ds) == ST_OK);
    if (!ds) return;
    /* no minimum_image_size here: speck.png is in, at the run's 16-pixel area as a square */
    CHECK(dataset_size(ds) == 8 * 3);
    int64_t total = 0;
    for (int b = 0; b < dataset_buckets(ds); b++) {
        CHECK(dataset_bucket(ds, b)->count == 3 * dataset_bucket(ds, b)->images);
        total += dataset_bucket(ds, b)->count;
    }
    CHECK(total == 24);
    dataset_close(ds);
}

static void expect_refusal(const char *what, const char *entry_keys, st_status want, const char *fragment)
{
    char json[1024];
    snprintf(json, sizeof json, "[{\"id\": \"a\", \"instance_data_dir\": \"" IMAGES "bucket-images\", %s}]",
             entry_keys);
    const bucket_config run = run_settings();
    dataset *ds = (dataset *)1;
    const st_status st = open_list(json, &run, 1, &ds);
    CHECKF(st == want && ds == NULL && strstr(st_error(), fragment) && strstr(st_error(), "backend 'a'"),
           "%s: status %d, '%s'", what, (int)st, st_error());
    if (!st) dataset_close(ds);
    printf("     %s -> %s\n", what, st_error());
}

static void test_buckets_refusals(void)
{
    expect_refusal("maximum_image_size alone", "\"crop\": true, \"maximum_image_size\": 32", ST_ERR_INVALID,
                   "maximum_image_size needs a target_downsample_size");
    expect_refusal("closest without buckets", "\"crop\": true, \"crop_aspect\": \"closest\"", ST_ERR_INVALID,
                   "crop_aspect closest needs crop_aspect_buckets");
    expect_refusal("weighted aspects under the key SimpleTuner does not read", "\"crop\": true, \"crop_aspect\": "
                   "\"random\", \"crop_aspect_buckets\": [{\"aspect_bucket\": 1.0, \"weight\": 1.0}]",
                   ST_ERR_INVALID, "its messages say aspect_bucket");
    expect_refusal("weights that do not add up to 1", "\"crop\": true, \"crop_aspect\": \"random\", "
                   "\"crop_aspect_buckets\": [{\"aspect\": 1.0, \"weight\": 0.3}, {\"aspect\": 2.0, \"weight\": "
                   "0.3}]", ST_ERR_INVALID, "weights add up to 0.59999999999999998");
    expect_refusal("aspects and weighted aspects mixed", "\"crop\": true, \"crop_aspect\": \"random\", "
                   "\"crop_aspect_buckets\": [{\"aspect\": 1.0, \"weight\": 1.0}, 2.0]", ST_ERR_INVALID,
                   "mixes aspects and weighted aspects");
    expect_refusal("an aspect that is not one", "\"crop_aspect_buckets\": [1.0, \"wide\"]", ST_ERR_INVALID,
                   "positive aspects");
    expect_refusal("every image too small", "\"minimum_image_size\": 100, \"resolution_type\": \"pixel\"",
                   ST_ERR_INVALID, "all 8 images are below minimum_image_size 100 (pixel)");
    expect_refusal("an area minimum over 5 megapixels", "\"minimum_image_size\": 6, \"resolution\": 1, "
                   "\"resolution_type\": \"area\"", ST_ERR_INVALID, "minimum_image_size 6 is in megapixels");
}

/* A video backend (tests/fixtures/make_bucket_clips.py's clips, folders of PNG frames) at Wan's settings (8 k + 1
 * frames, an alignment of 16): each clip in its WxH@F bucket, frames trimmed to the rule, a clip below min_frames
 * left out, captions from the folders' names; aspect_ratio buckets split by length; and the refusals of clips. */
static const char *const clips_entry =
    "{\"id\": \"c\", \"dataset_type\": \"video\", \"instance_data_dir\": \"" IMAGES "bucket-clips\", "
    "\"resolution\": 32, \"resolution_type\": \"pixel\", \"video\": {\"num_frames\": 9, \"max_frames\": 17%s}%s}";

static dataset *open_clips(const char *video_keys, const char *entry_keys, st_status want)
{
    char json[1024];
    bucket_config run = run_settings();
    run.alignment = 16, run.frames_8k1 = true;
    snprintf(json, sizeof json, "[%s]", clips_entry);
    char filled[1200];
    snprintf(filled, sizeof filled, json, video_keys, entry_keys);
    dataset *ds = NULL;
    const st_status st = open_list(filled, &run, 1, &ds);
    CHECKF(st == want, "clips (%s%s): status %d, %s", video_keys, entry_keys, (int)st, st ? st_error() : "opened");
    return ds;
}

static void test_buckets_clips(void)
{
    printf("-- a video backend: clips in buckets of width, height and frames\n");
    dataset *ds = open_clips(", \"bucket_strategy\": \"resolution_frames\"", "", ST_OK);
    static const struct { const char *name; int w, h, frames, clips; } want[] = {
        {"32x32@17", 32, 32, 17, 2}, {"32x32@9", 32, 32, 9, 2}, {"48x32@9", 48, 32, 9, 1}};
    CHECKF(ds && dataset_buckets(ds) == 3 && dataset_images(ds) == 5, "5 clips in 3 buckets (%d)",
           ds ? dataset_buckets(ds) : 0);
    for (int b = 0; ds && b < dataset_buckets(ds) && b < 3; b++) {
        const data_bucket *k = dataset_bucket(ds, b);
        CHECKF(!strcmp(k->name, want[b].name) && k->width == want[b].w && k->height == want[b].h &&
                   k->frames == want[b].frames && k->images == want[b].clips,
               "bucket %d: %s %dx%d@%d, %lld clips", b, k->name, k->width, k->height, k->frames, (long long)k->images);
    }
    data_placement p;
    char caption[CAPTION_MAX];
    CHECK(ds && dataset_placement(ds, 1, &p) == ST_OK && p.frames == 10 && strstr(p.path, "bucket-clips/green_square"));
    CHECK(ds && dataset_get(ds, 1, NULL, NULL, caption) == ST_OK && !strcmp(caption, "green square"));
    CHECKF(strstr(captured, "5 clips of 9 frames to 17 (bucket_strategy resolution_frames, the model's 8 k + 1)") &&
               strstr(captured, "1 of other lengths left out") && strstr(captured, "bucket 32x32@9 (32x32@9): 2 clips"),
           "the backend's lines say so:\n%s", captured);
    dataset_close(ds);
    ds = open_clips("", "", ST_OK); /* aspect_ratio: SimpleTuner's bucket "1.0" holds both lengths */
    CHECKF(ds && dataset_buckets(ds) == 3 && !strcmp(dataset_bucket(ds, 0)->name, "1.0") &&
               !strcmp(dataset_bucket(ds, 1)->name, "1.0") && dataset_bucket(ds, 0)->frames == 17 &&
               dataset_bucket(ds, 1)->frames == 9, "aspect_ratio: one bucket a length");
    dataset_close(ds);
    open_clips(", \"min_frames\": 5", "", ST_ERR_INVALID);
    CHECKF(strstr(st_error(), "video.min_frames 5 is below video.num_frames 9"), "%s", st_error());
    open_clips(", \"bucket_strategy\": \"frames\"", "", ST_ERR_INVALID);
    CHECKF(strstr(st_error(), "video.bucket_strategy frames is not"), "%s", st_error());
    open_clips(", \"min_frames\": 40", "", ST_ERR_INVALID);
    CHECKF(strstr(st_error(), "all 6 clips are left out: 0 below minimum_image_size 0, 6 of frames outside "
                              "video.min_frames 33 and max_frames 17"), "%s", st_error());
    char json[512];
    CHECK(mkdir(tk_path(root, "clips"), 0755) == 0 && mkdir(tk_path(root, "clips/a"), 0755) == 0);
    snprintf(json, sizeof json, "[{\"id\": \"v\", \"dataset_type\": \"video\", \"instance_data_dir\": \"%s\"}]",
             tk_path(root, "clips"));
    tk_write_file(root, "clips/a/clip.mp4", "not decoded");
    bucket_config run = run_settings();
    dataset *none = NULL;
    CHECKF(open_list(json, &run, 1, &none) == ST_ERR_UNSUPPORTED && strstr(st_error(), "clip.mp4: segtrain reads no "
           "video files") && strstr(st_error(), "make_cache.py"), "a video file is refused: %s", st_error());
    printf("     %s\n", st_error());
}

static double forced(const double *aspects, const double *weights, int n, void *ctx)
{
    (void)aspects, (void)weights, (void)n;
    return *(const double *)ctx;
}

/* crop_aspect random: each image's aspect drawn from the seed among crop_aspect_buckets (pixel resolution, so that
 * no aspect map ties one image's size to another's): its bucket is bucket_assign's for one of them, the same seed
 * gives the same buckets, and the draws reach more than one. */
static void test_buckets_random_aspect(void)
{
    static const char *const names[8] = {"banner", "speck", "tall_fern", "tall_pine", "wide_cat", "wide_elk",
                                         "wide_fox", "wide_owl"};
    static const double aspects[3] = {0.5, 1.0, 2.0};
    const bucket_config run = run_settings();
    const char *json = "[{\"id\": \"a\", \"instance_data_dir\": \"" IMAGES "bucket-images\", \"crop\": true, "
                       "\"crop_aspect\": \"random\", \"crop_aspect_buckets\": [0.5, 1.0, 2.0], \"resolution\": 16, "
                       "\"resolution_type\": \"pixel\"}]";
    dataset *ds = NULL, *again = NULL;
    CHECK(open_list(json, &run, 3, &ds) == ST_OK && open_list(json, &run, 3, &again) == ST_OK);
    if (!ds || !again) return;
    bucket_config c = run;
    c.resolution_type = BUCKET_PIXEL, c.crop = true, c.crop_aspect = BUCKET_ASPECT_RANDOM;
    c.n_crop_aspect_buckets = 3;
    memcpy(c.crop_aspect_buckets, aspects, sizeof aspects);
    int same = dataset_buckets(ds) == dataset_buckets(again);
    for (int i = 0; i < 8; i++) {
        const data_bucket *a = dataset_bucket(ds, dataset_bucket_of(ds, i));
        const data_bucket *b = dataset_bucket(again, dataset_bucket_of(again, i));
        same &= a && b && !strcmp(a->name, b->name);
        char file[64];
        snprintf(file, sizeof file, "bucket-images/%s.png", names[i]);
        int w, h, one = 0;
        free(read_png(tk_path(IMAGES, file), &w, &h));
        for (int k = 0; k < 3; k++) {
            bucket_state map = {0};
            bucket_sample s;
            CHECK(bucket_assign(&c, &map, w, h, 0, forced, (void *)&aspects[k], &s) == ST_OK);
            one += a && !strcmp(a->name, s.key) && a->width == s.target_w && a->height == s.target_h;
            bucket_state_free(&map);
        }
        CHECKF(one >= 1, "%s: bucket %s is none of the three aspects'", names[i], a ? a->name : "-");
    }
    CHECK(same && dataset_buckets(ds) >= 2);
    dataset_close(ds);
    dataset_close(again);
}

/* crop_aspect random with weights: the draw follows them over every aspect, with no max_upscale_threshold trim (as
 * SimpleTuner's weighted form): all the weight on 2.0 puts every image, portraits too, in the 2.0 bucket, where the
 * plain list under the same threshold would leave a portrait no wide aspect. */
static void test_buckets_weighted_aspect(void)
{
    const bucket_config run = run_settings();
    const char *json = "[{\"id\": \"a\", \"instance_data_dir\": \"" IMAGES "bucket-images\", \"crop\": true, "
                       "\"crop_aspect\": \"random\", \"crop_aspect_buckets\": [{\"aspect\": 0.5, \"weight\": 0}, "
                       "{\"aspect\": 2.0, \"weight\": 1.0}], \"max_upscale_threshold\": 0, \"resolution\": 16, "
                       "\"resolution_type\": \"pixel\"}]";
    dataset *ds = NULL;
    CHECK(open_list(json, &run, 3, &ds) == ST_OK);
    if (!ds) return;
    for (int i = 0; i < 8; i++) {
        const data_bucket *a = dataset_bucket(ds, dataset_bucket_of(ds, i));
        CHECKF(a && !strcmp(a->name, "2.0"), "image %d in bucket %s, not 2.0", i, a ? a->name : "-");
    }
    dataset_close(ds);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segtrain-test-buckets-XXXXXX");
    if (!mkdtemp(root)) return 1;
    test_buckets_open();
    test_buckets_batches();
    test_buckets_repeats();
    test_buckets_downsample();
    test_buckets_refusals();
    test_buckets_random_aspect();
    test_buckets_weighted_aspect();
    test_buckets_clips();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
