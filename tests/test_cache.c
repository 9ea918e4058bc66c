/* Caches of latents and text embeddings (docs/CACHE.md, src/train/cache.c): the committed fixture that
 * scripts/make_cache.py wrote (--tiny-random) reads as the files hold it; a short sequence is zero-padded and BF16
 * and SimpleTuner's I64 masks convert; every bad input is refused at open in one line naming the file; and
 * `segtrain train` on flux-tiny reads x0, the conditioning, the guidance value and the empty prompt's embeddings
 * from the cache, learns, and resumes bit for bit. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "segtrain/buckets.h"
#include "segtrain/data.h"
#include "segtrain/safetensors.h"
#include "segtrain/train.h"
#include "testkit.h"

#define FIXTURE SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-flux-tiny"
enum { C = 4, E = 8, L = 8, D = 32, P = 16, TEXT = L * D + P };

static char root[256];
static const cache_want flux_tiny = {"flux", C, E, 1, L, D, P, false, 0, NULL, false, 0, 0, 0, 0};

/* ---- the committed fixture ---- */

static void test_fixture(void)
{
    printf("-- the committed cache (make_cache.py --tiny-random) reads as its files hold it\n");
    dataset *ds = NULL;
    CHECKF(dataset_open_cache(FIXTURE, &flux_tiny, &ds) == ST_OK, "%s", st_error());
    if (!ds) return;
    CHECK(dataset_size(ds) == 5 && dataset_channels(ds) == C && dataset_resolution(ds) == E);
    CHECK(dataset_text_floats(ds) == TEXT && dataset_null_text(ds) != NULL && dataset_classes(ds) == 1);
    /* the iterator's batch against each file read directly: latents, then the sequence and the pooled vector */
    data_iter *it;
    CHECK(data_iter_create(ds, 7, &it) == ST_OK);
    float x[5][C * E * E], text[5][TEXT + 3]; /* a stride wider than the text: the guidance slot and more */
    char caps[5][CAPTION_MAX];
    int64_t idx[5];
    memset(text, 0x7f, sizeof text);
    CHECKF(data_iter_next_with_text(it, 5, &x[0][0], NULL, caps, idx, &text[0][0], TEXT + 3) == ST_OK, "%s",
           st_error());
    int wrong = 0, seen = 0;
    for (int b = 0; b < 5; b++) {
        static const char *const files[] = {"blue_triangle", "green_square", "more/white_circle",
                                            "more/yellow_diamond", "red_circle"}; /* cache.json's order */
        char name[128];
        snprintf(name, sizeof name, "%s.safetensors", files[idx[b]]);
        sft_file *f;
        float lat[C * E * E], seq[L * D], pooled[P];
        const int64_t ls[3] = {C, E, E}, ss[2] = {L, D}, ps[1] = {P};
        CHECKF(sft_open(tk_path(FIXTURE, name), &f) == ST_OK, "%s", st_error());
        CHECK(sft_read_f32(f, "latents", 3, ls, lat) == ST_OK && sft_read_f32(f, "prompt_embeds", 2, ss, seq) == ST_OK &&
              sft_read_f32(f, "pooled_prompt_embeds", 1, ps, pooled) == ST_OK);
        wrong += memcmp(x[b], lat, sizeof lat) || memcmp(text[b], seq, sizeof seq) ||
                 memcmp(text[b] + L * D, pooled, sizeof pooled);
        wrong += strcmp(caps[b], sft_metadata(f, "caption"));
        float untouched;
        memset(&untouched, 0x7f, sizeof untouched);
        wrong += memcmp(&text[b][TEXT], &untouched, sizeof untouched) != 0; /* the stride's gap is the caller's */
        seen |= 1 << idx[b];
        sft_close(f);
    }
    CHECKF(wrong == 0 && seen == 31, "an epoch of the 5 samples, each as its file holds it (%d wrong)", wrong);
    /* sample 0 (sorted first): "a blue triangle", 4 of 8 T5 tokens real, padded as FluxPipeline pads */
    char cap[CAPTION_MAX];
    CHECK(dataset_get(ds, 0, NULL, NULL, cap) == ST_OK && !strcmp(cap, "a blue triangle"));
    const float *null = dataset_null_text(ds);
    CHECKF(memcmp(null, text[0], sizeof(float) * TEXT) != 0, "the empty prompt's embeddings are their own");
    data_iter_destroy(it);
    dataset_close(ds);
}

/* ---- caches written here: each variant changes one thing of a good one ---- */

typedef struct variant {
    const char *family, *meta_family; /* cache.json's, the files' metadata's */
    int version, count, text_len, text_dim, pooled_dim;
    int latents[3];  /* cache.json's latent_shape */
    int file_edge;   /* the files' latent edge */
    int rows;        /* prompt_embeds rows of sample 1 */
    bool bf16;       /* sample 1 in BF16 with an I64 mask */
    float mask;      /* attention_mask[0] of sample 1 */
    bool no_pooled, no_null, truncate, no_index, missing_file;
    float seq_value, latent_value, null_value; /* fill values: to tell caches apart in training */
    int frames;                                /* video latents (C, frames, H, W) when above 1 */
    bool ids;                                  /* prompt_embeds holds token ids (OmniGen's): 1 .. 60 */
} variant;

static variant good(void)
{
    return (variant){"flux", "flux", 1, 3, L, D, P, {C, E, E}, E, L, false, 1.0f, false, false, false, false, false,
                     0.5f, 0.25f, -0.75f, 1, false};
}

static void write_sample(const char *dir, const char *name, const variant *v, int rows, bool bf16, bool latents,
                         float seqv, int k)
{
    const int F = v->frames > 1 ? v->frames : 1, n_lat = C * F * v->file_edge * v->file_edge, n_seq = rows * v->text_dim;
    float *lat = malloc(sizeof(float) * (size_t)n_lat), *seq = malloc(sizeof(float) * (size_t)n_seq);
    float pooled[P + 8], mask[L + 8];
    int64_t imask[L + 8];
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n_seq);
    for (int i = 0; i < n_lat; i++) lat[i] = v->latent_value * (float)((i + k) % 7 - 3);
    for (int i = 0; i < n_seq; i++)
        seq[i] = v->ids ? (float)((7 * i + 3 * k) % 60 + 1) : seqv * (float)((i + 2 * k) % 5 - 2) + (float)k;
    for (int i = 0; i < P; i++) pooled[i] = seqv * (float)(i % 3 - 1) - (float)k;
    for (int i = 0; i < rows; i++) mask[i] = i < rows - 1 ? 1.0f : 0.0f, imask[i] = i < rows - 1;
    if (k == 1) mask[0] = v->mask, imask[0] = (int64_t)v->mask;
    for (int i = 0; i < n_seq; i++) h[i] = sft_f32_to_bf16(seq[i]);
    sft_entry e[4];
    int n = 0;
    if (latents)
        e[n++] = F > 1 ? (sft_entry){"latents", SFT_F32, 4, {C, F, v->file_edge, v->file_edge}, lat}
                       : (sft_entry){"latents", SFT_F32, 3, {C, v->file_edge, v->file_edge}, lat};
    e[n++] = bf16 ? (sft_entry){"prompt_embeds", SFT_BF16, 2, {rows, v->text_dim}, h}
                  : (sft_entry){"prompt_embeds", SFT_F32, 2, {rows, v->text_dim}, seq};
    if (!v->no_pooled) e[n++] = (sft_entry){"pooled_prompt_embeds", SFT_F32, 1, {P}, pooled};
    e[n++] = bf16 ? (sft_entry){"attention_mask", SFT_I64, 1, {rows}, imask}
                  : (sft_entry){"attention_mask", SFT_F32, 1, {rows}, mask};
    char caption[32];
    snprintf(caption, sizeof caption, "sample %d", k);
    const char *meta[] = {"caption", caption, "family", v->meta_family};
    CHECKF(sft_write(tk_path(dir, name), e, n, meta, 2) == ST_OK, "%s", st_error());
    free(lat), free(seq), free(h);
}

/* Writes the cache of v into root/name and returns its path. */
static const char *make_cache(const char *name, const variant *v)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/sub", dir, dir);
    CHECK(system(cmd) == 0);
    const char *files[3] = {"a.safetensors", "sub/b.safetensors", "c.safetensors"};
    for (int k = 0; k < 3; k++)
        if (!(v->missing_file && k == 2))
            write_sample(dir, files[k], v, k == 1 ? v->rows : L, k == 1 && v->bf16, true, v->seq_value, k);
    if (!v->no_null) write_sample(dir, "null.safetensors", v, L, false, false, v->null_value, 9);
    if (v->truncate) { /* cut c.safetensors short, as an interrupted copy leaves it */
        char *whole = tk_read_file(dir, "c.safetensors");
        FILE *f = fopen(tk_path(dir, "c.safetensors"), "r+b");
        CHECK(whole && f && ftruncate(fileno(f), 200) == 0);
        if (f) fclose(f);
        free(whole);
    }
    char json[1024], shape[64];
    if (v->frames > 1) snprintf(shape, sizeof shape, "%d, %d, %d, %d", v->latents[0], v->frames, v->latents[1], v->latents[2]);
    else snprintf(shape, sizeof shape, "%d, %d, %d", v->latents[0], v->latents[1], v->latents[2]);
    snprintf(json, sizeof json,
             "{\"format\": \"segtrain-cache\", \"version\": %d, \"family\": \"%s\", \"flavour\": \"dev\", "
             "\"latent_shape\": [%s], \"text_len\": %d, \"text_dim\": %d, \"pooled_dim\": %d, "
             "\"dtype\": \"F32\", \"count\": %d, \"samples\": [%s]}\n",
             v->version, v->family, shape, v->text_len, v->text_dim,
             v->pooled_dim, v->count,
             v->count == 0 ? "" : "\"a.safetensors\", \"sub/b.safetensors\", \"c.safetensors\"");
    if (!v->no_index) tk_write_file(dir, "cache.json", json);
    return dir;
}

static void test_padding_and_dtypes(void)
{
    printf("-- a shorter sequence is zero-padded; BF16 and an I64 mask convert\n");
    variant v = good();
    v.rows = 3;
    v.bf16 = true;
    const char *dir = make_cache("short", &v);
    dataset *ds = NULL;
    CHECKF(dataset_open_cache(dir, &flux_tiny, &ds) == ST_OK, "%s", st_error());
    float text[TEXT], x[C * E * E];
    memset(text, 0x55, sizeof text);
    data_iter *it = NULL;
    if (ds) CHECK(data_iter_create(ds, 1, &it) == ST_OK);
    /* find sample 1 (sub/b) through the iterator: caption "sample 1" */
    char cap[1][CAPTION_MAX] = {{0}};
    for (int k = 0; it && k < 3 && strcmp(cap[0], "sample 1"); k++)
        CHECK(data_iter_next_with_text(it, 1, x, NULL, cap, NULL, text, TEXT) == ST_OK);
    CHECK(!strcmp(cap[0], "sample 1"));
    int bad_rows = 0, bad_pad = 0, bad_pooled = 0;
    for (int i = 0; i < 3 * D; i++) /* BF16 of small integers and halves is exact */
        bad_rows += text[i] != v.seq_value * (float)((i + 2) % 5 - 2) + 1.0f;
    for (int i = 3 * D; i < L * D; i++) bad_pad += text[i] != 0.0f;
    for (int i = 0; i < P; i++) bad_pooled += text[L * D + i] != v.seq_value * (float)(i % 3 - 1) - 1.0f;
    CHECKF(!bad_rows && !bad_pad && !bad_pooled, "3 rows as written (%d wrong), 5 zero rows (%d wrong), then the "
           "pooled vector (%d wrong)", bad_rows, bad_pad, bad_pooled);
    data_iter_destroy(it);
    dataset_close(ds);
}

/* A family that reads the text mask (qwen_image) gets it after the pooled vector, an I64 mask as floats, and 0 on
 * the padded rows; the empty prompt's too. */
static void test_mask(void)
{
    printf("-- the attention mask follows the pooled vector where the model reads it, 0 on padding\n");
    variant v = good();
    v.rows = 3;
    v.bf16 = true; /* sample 1's mask is I64 [1 1 0] */
    const char *dir = make_cache("masked", &v);
    cache_want want = flux_tiny;
    want.mask = true;
    dataset *ds = NULL;
    CHECKF(dataset_open_cache(dir, &want, &ds) == ST_OK, "%s", st_error());
    enum { MASKED = TEXT + L };
    CHECK(ds && dataset_text_floats(ds) == MASKED);
    float text[MASKED], x[C * E * E];
    data_iter *it = NULL;
    if (ds) CHECK(data_iter_create(ds, 1, &it) == ST_OK);
    char cap[1][CAPTION_MAX] = {{0}};
    for (int k = 0; it && k < 3 && strcmp(cap[0], "sample 1"); k++) {
        memset(text, 0x55, sizeof text);
        CHECK(data_iter_next_with_text(it, 1, x, NULL, cap, NULL, text, MASKED) == ST_OK);
    }
    const float want_mask[L] = {1, 1, 0, 0, 0, 0, 0, 0};
    tk_expect_bitwise("sample 1's mask after its pooled vector", text + TEXT, want_mask, L);
    const float null_mask[L] = {1, 1, 1, 1, 1, 1, 1, 0}; /* written with L rows, the last one padding */
    if (ds) tk_expect_bitwise("the empty prompt's mask", dataset_null_text(ds) + TEXT, null_mask, L);
    data_iter_destroy(it);
    dataset_close(ds);
}

/* Opening the cache of v as flux-tiny fails with code `code` and a line holding both needles. */
static void refused(const char *what, const variant *v, const cache_want *want, st_status code, const char *needle,
                    const char *needle2)
{
    const char *dir = make_cache("bad", v);
    dataset *ds = NULL;
    const st_status st = dataset_open_cache(dir, want ? want : &flux_tiny, &ds);
    const char *msg = st_error();
    CHECKF(st == code && !ds && strstr(msg, needle) && strstr(msg, needle2) && !strchr(msg, '\n') &&
               strstr(msg, "data_cache_dir"),
           "%s: got %d: %s", what, (int)st, st ? msg : "(opened)");
    printf("     %s: %s\n", what, msg);
    dataset_close(ds);
}

static void test_refusals(void)
{
    printf("-- every bad cache is refused at open, in one line naming the file\n");
    variant v = good();
    const char *dir = make_cache("ok", &v);
    dataset *ds = NULL;
    CHECKF(dataset_open_cache(dir, &flux_tiny, &ds) == ST_OK && dataset_size(ds) == 3, "%s", st_error());
    dataset_close(ds);

    v = good(), v.no_index = true;
    refused("no cache.json", &v, NULL, ST_ERR_IO, "no cache.json", "make_cache.py");
    v = good(), v.version = 3;
    refused("a later version", &v, NULL, ST_ERR_UNSUPPORTED, "version 3", "reads versions 1 to 2");
    v = good(), v.family = "sd3";
    refused("another family", &v, NULL, ST_ERR_INVALID, "model_family sd3", "the model is flux");
    v = good(), v.meta_family = "sd3";
    refused("a file of another family", &v, NULL, ST_ERR_INVALID, "a.safetensors", "family sd3");
    v = good(), v.latents[1] = v.latents[2] = 16;
    refused("latents of another edge", &v, NULL, ST_ERR_INVALID, "4 x 16 x 16", "4 x 8 x 8");
    v = good(), v.file_edge = 4;
    refused("a file's latents", &v, NULL, ST_ERR_INVALID, "a.safetensors: latents are 4 x 4 x 4", "4 x 8 x 8");
    const cache_want wide = {"flux", C, E, 1, L, 64, P, false, 0, NULL, false, 0, 0, 0, 0},
                     nopool = {"flux", C, E, 1, L, D, 8, false, 0, NULL, false, 0, 0, 0, 0},
                     longer = {"flux", C, E, 1, 4, D, P, false, 0, NULL, false, 0, 0, 0, 0};
    v = good();
    refused("text_dim", &v, &wide, ST_ERR_INVALID, "text_dim 32", "joint_attention_dim is 64");
    refused("pooled_dim", &v, &nopool, ST_ERR_INVALID, "pooled_dim 16", "pooled_projection_dim is 8");
    refused("text_len", &v, &longer, ST_ERR_INVALID, "text_len 8", "model's 4 tokens");
    /* a cache made for another model: every way it differs, in one run */
    v = good(), v.family = "sd3", v.latents[1] = v.latents[2] = 16;
    const char *dir2 = make_cache("others", &v);
    st_status st = dataset_open_cache(dir2, &wide, &ds);
    const char *msg = st_error();
    CHECKF(st == ST_ERR_INVALID && !ds && strstr(msg, "data_cache_dir") && strstr(msg, "3 mismatches with the model") &&
               strstr(msg, "\n  written for model_family sd3") && strstr(msg, "\n  latents are 4 x 16 x 16") &&
               strstr(msg, "\n  text_dim 32, the model's joint_attention_dim is 64"),
           "three mismatches: got %d: %s", (int)st, msg);
    v = good(), v.latents[0] = 16;
    dir2 = make_cache("others2", &v);
    st = dataset_open_cache(dir2, &nopool, &ds);
    msg = st_error();
    CHECKF(st == ST_ERR_INVALID && strstr(msg, "2 mismatches") && strstr(msg, "16 x 8 x 8") &&
               strstr(msg, "pooled_dim 16") && !strstr(msg, "model_family"),
           "two mismatches: got %d: %s", (int)st, msg);
    printf("     a cache for another model: %s\n", msg);
    v = good(), v.rows = 9;
    refused("a sample's sequence too long", &v, NULL, ST_ERR_INVALID, "sub/b.safetensors", "9 tokens");
    v = good(), v.no_pooled = true;
    refused("no pooled vector", &v, NULL, ST_ERR_FORMAT, "a.safetensors", "pooled_prompt_embeds");
    v = good(), v.mask = 0.5f;
    refused("a mask of 0.5", &v, NULL, ST_ERR_FORMAT, "sub/b.safetensors", "attention_mask[0] is 0.5");
    v = good(), v.truncate = true;
    refused("a truncated sample", &v, NULL, ST_ERR_FORMAT, "c.safetensors", "corrupt");
    v = good(), v.missing_file = true;
    refused("a missing sample", &v, NULL, ST_ERR_IO, "c.safetensors", "unreadable");
    v = good(), v.count = 0;
    refused("an empty cache", &v, NULL, ST_ERR_INVALID, "empty", "lists no sample");
    v = good(), v.count = 4;
    refused("a wrong count", &v, NULL, ST_ERR_FORMAT, "count is 4", "lists 3");
    v = good(), v.no_null = true;
    dir = make_cache("nonull", &v);
    CHECKF(dataset_open_cache(dir, &flux_tiny, &ds) == ST_OK && !dataset_null_text(ds), "%s", st_error());
    dataset_close(ds);
}

/* ---- a cache of mixed shapes: make_cache.py --buckets, from `segtrain buckets --json` ---- */

#define BUCKETED SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-sdxl-buckets-tiny"
#define BUCKETED_SOURCE SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-buckets-source"
enum { SDXL_TEXT = 6 * 24 + 20, LAT_MAX = 4 * 16 * 8 };
static const cache_want sdxl_tiny = {"sdxl", 4, 8, 1, 6, 24, 20, false, 6, NULL, false, 0, 0, 0, 0};

/* Sample `index`'s latents (its bucket's height x width) and size ids as its file holds them. */
static void file_sample(const dataset *ds, int64_t index, float *lat, float ids[6])
{
    data_placement p;
    sft_file *f = NULL;
    CHECK(dataset_placement(ds, index, &p) == ST_OK && sft_open(p.path, &f) == ST_OK);
    const data_bucket *b = dataset_bucket(ds, p.bucket);
    const int64_t shape[3] = {4, b ? b->height : 0, b ? b->width : 0}, six = 6;
    CHECKF(f && sft_read_f32(f, "latents", 3, shape, lat) == ST_OK && sft_read_f32(f, "add_time_ids", 1, &six, ids) ==
           ST_OK, "%s", st_error());
    sft_close(f);
}

/* The images of the fixture's source list, bucketed here as `segtrain buckets` buckets them (its config's settings,
 * paths from the source folder), are the cache's: each cached sample's bucket is its image's over the tiny VAE's
 * factor 2, its file records the image's resize, and its size ids are (height, width, crop top, crop left, bucket
 * height, bucket width). */
static void test_bucketed_placements(const dataset *ds)
{
    char cwd[1024];
    config *cfg = NULL;
    model_config mc;
    bucket_config run;
    dataset *src = NULL;
    CHECK(getcwd(cwd, sizeof cwd) && chdir(SEGTRAIN_SOURCE_DIR) == 0);
    st_status st = config_load(BUCKETED_SOURCE "/config.json", &cfg);
    if (!st) st = model_config_from(cfg, &mc);
    if (!st) st = train_bucket_settings(cfg, &mc, &run);
    tk_capture_begin(root);
    if (!st) st = dataset_open_backend_buckets(config_string(cfg, "data_backend_config"), &run, 0, &src);
    tk_capture_end();
    CHECKF(st == ST_OK && chdir(cwd) == 0, "%s", st_error());
    int found = 0, wrong = 0;
    for (int64_t i = 0; src && i < dataset_images(src); i++) {
        data_placement p, q;
        CHECK(dataset_placement(src, i, &p) == ST_OK);
        const char *rel = strstr(p.path, "/tests/fixtures/") ? strstr(p.path, "/tests/fixtures/") + 16 : p.path;
        for (int64_t j = 0; j < dataset_images(ds); j++) {
            sft_file *f = NULL;
            CHECK(dataset_placement(ds, j, &q) == ST_OK && sft_open(q.path, &f) == ST_OK);
            const char *image = f ? sft_metadata(f, "image") : NULL, *resize = f ? sft_metadata(f, "resize") : NULL;
            if (image && !strcmp(image, rel)) {
                const data_bucket *a = dataset_bucket(src, p.bucket), *b = dataset_bucket(ds, q.bucket);
                char want_resize[32];
                snprintf(want_resize, sizeof want_resize, "%dx%d", p.resize_w, p.resize_h);
                float lat[LAT_MAX], ids[6];
                file_sample(ds, j, lat, ids);
                const float want_ids[6] = {(float)p.height, (float)p.width, (float)p.crop_top, (float)p.crop_left,
                                           (float)a->height, (float)a->width};
                found++;
                wrong += a->width != 2 * b->width || a->height != 2 * b->height || strcmp(a->name, b->name) ||
                         !resize || strcmp(resize, want_resize) || memcmp(ids, want_ids, sizeof ids);
            }
            sft_close(f);
        }
    }
    CHECKF(src && found == 12 && wrong == 0, "all 12 images cached at their buckets (%d found, %d wrong)", found,
           wrong);
    dataset_close(src);
    config_free(cfg);
}

/* Batches of 2 in bucket mode: each of one bucket (data_iter_peek_bucket says which first), its samples at that
 * bucket's shape with their size ids, as their files hold them; 6 batches an epoch (a bucket's odd sample waits for
 * another epoch; the one-sample bucket's short batch is filled up by itself); and an iterator seeked to a saved
 * position gives exactly the batches that followed it. */
static void test_bucketed_batches(const dataset *ds)
{
    enum { STEPS = 14, SAVED = 5 };
    data_iter *it = NULL, *again = NULL;
    CHECKF(data_iter_create_buckets(ds, 3, 2, false, &it) == ST_OK, "%s", st_error());
    if (!it) return;
    CHECK(data_iter_epoch_batches(it) == 6);
    int64_t drawn[STEPS][2];
    data_position saved = {0, 0};
    int wrong = 0, seen = 0;
    for (int k = 0; k < STEPS; k++) {
        if (k == SAVED) saved = data_iter_position(it);
        int b = -1;
        float x[2 * LAT_MAX], text[2][SDXL_TEXT + 6];
        CHECK(data_iter_peek_bucket(it, &b) == ST_OK);
        CHECKF(data_iter_next_with_text(it, 2, x, NULL, NULL, drawn[k], &text[0][0], SDXL_TEXT + 6) == ST_OK, "%s",
               st_error());
        const data_bucket *bk = dataset_bucket(ds, b);
        const int64_t per = bk ? 4ll * bk->width * bk->height : 0;
        for (int j = 0; j < 2 && bk; j++) {
            float lat[LAT_MAX], ids[6];
            file_sample(ds, drawn[k][j], lat, ids);
            wrong += dataset_bucket_of(ds, drawn[k][j]) != b || memcmp(x + j * per, lat, sizeof(float) * per) ||
                     memcmp(&text[j][SDXL_TEXT], ids, sizeof ids);
            seen |= k < 6 ? 1 << drawn[k][j] : 0;
        }
    }
    CHECKF(wrong == 0, "every batch of one bucket, each sample as its file holds it (%d wrong)", wrong);
    CHECKF(__builtin_popcount((unsigned)seen) >= 9, "an epoch draws from every bucket (%#x)", seen);
    CHECK(data_iter_create_buckets(ds, 3, 2, false, &again) == ST_OK && data_iter_seek(again, saved) == ST_OK);
    int differ = 0;
    for (int k = SAVED; again && k < STEPS; k++) {
        int64_t idx[2];
        CHECK(data_iter_next_batch(again, 2, NULL, NULL, NULL, idx) == ST_OK);
        differ += idx[0] != drawn[k][0] || idx[1] != drawn[k][1];
    }
    CHECKF(differ == 0, "a resume at batch %d (epoch %lld, batch %lld) continues with the same batches (%d differ)",
           SAVED, (long long)saved.epoch, (long long)saved.index, differ);
    data_iter_destroy(again);
    data_iter_destroy(it);
}

static void test_bucketed_cache(void)
{
    printf("-- a cache of mixed shapes (make_cache.py --buckets): four buckets, batches of one, as segtrain buckets "
           "put its images\n");
    dataset *ds = NULL;
    CHECKF(dataset_open_cache(BUCKETED, &sdxl_tiny, &ds) == ST_OK, "%s", st_error());
    if (!ds) return;
    CHECK(dataset_size(ds) == 12 && dataset_images(ds) == 12 && dataset_resolution(ds) == 0 &&
          dataset_text_floats(ds) == SDXL_TEXT && dataset_null_text(ds) && dataset_buckets(ds) == 4);
    static const struct {
        const char *name;
        int w, h, n;
    } want[4] = {{"1.0", 8, 8, 5}, {"2.0", 16, 8, 1}, {"0.67", 8, 12, 2}, {"1.5", 12, 8, 4}}; /* latent pixels */
    for (int b = 0; b < 4 && b < dataset_buckets(ds); b++) {
        const data_bucket *k = dataset_bucket(ds, b);
        int outside = 0;
        for (int64_t s = 0; s < k->count; s++) outside += dataset_bucket_of(ds, k->samples[s]) != b;
        CHECKF(!strcmp(k->name, want[b].name) && k->width == want[b].w && k->height == want[b].h &&
                   k->count == want[b].n && k->images == want[b].n && k->label == 0 && !outside,
               "bucket %d: %s, %d x %d latents, %lld samples", b, k->name, k->width, k->height, (long long)k->count);
        printf("     bucket %d: %s, latents 4 x %d x %d (h x w), %lld samples\n", b, k->name, k->height, k->width,
               (long long)k->count);
    }
    data_iter *it = NULL;
    CHECK(data_iter_create(ds, 1, &it) == ST_ERR_INVALID && !it);
    test_bucketed_placements(ds);
    test_bucketed_batches(ds);
    dataset_close(ds);
}

/* A version 2 cache.json edited one way: the first sample's latent_shape (or, with `file`, its file name) set to
 * `value`. */
static const char *edit_bucketed(const char *name, const char *key, const char *value)
{
    static char dir[512];
    char cmd[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", dir, BUCKETED, dir);
    CHECK(system(cmd) == 0);
    char *text = tk_read_file(dir, "cache.json");
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "samples"), 0);
    CHECK(first && cJSON_ReplaceItemInObjectCaseSensitive(first, key, cJSON_Parse(value)));
    char *out = cJSON_Print(j);
    tk_write_file(dir, "cache.json", out);
    cJSON_free(out);
    cJSON_Delete(j);
    free(text);
    return dir;
}

static void refused_bucketed(const char *what, const char *dir, const cache_want *want, st_status code,
                             const char *needle, const char *needle2)
{
    dataset *ds = NULL;
    const st_status st = dataset_open_cache(dir, want, &ds);
    const char *msg = st_error();
    CHECKF(st == code && !ds && strstr(msg, needle) && strstr(msg, needle2) && !strchr(msg, '\n'),
           "%s: got %d: %s", what, (int)st, st ? msg : "(opened)");
    printf("     %s: %s\n", what, msg);
    dataset_close(ds);
}

static void test_bucketed_refusals(void)
{
    printf("-- a cache of mixed shapes is checked as strictly, every error one line naming the file\n");
    refused_bucketed("a listed shape that is not the file's",
                     edit_bucketed("bk-shape", "latent_shape", "[4, 8, 12]"), &sdxl_tiny, ST_ERR_INVALID,
                     "cache-images/blue_triangle.safetensors: latents are 4 x 8 x 8", "cache.json lists 4 x 8 x 12");
    refused_bucketed("a shape of another rank", edit_bucketed("bk-rank", "latent_shape", "[4, 1, 8, 8]"), &sdxl_tiny,
                     ST_ERR_FORMAT, "sample cache-images/blue_triangle.safetensors", "[channels, height, width]");
    refused_bucketed("a shape of another model", edit_bucketed("bk-chan", "latent_shape", "[16, 8, 8]"), &sdxl_tiny,
                     ST_ERR_INVALID, "latents are 16 x 8 x 8 (cache-images/blue_triangle.safetensors)",
                     "the model takes 4 channels");
    refused_bucketed("an absolute file", edit_bucketed("bk-abs", "file", "\"/etc/passwd\""), &sdxl_tiny,
                     ST_ERR_FORMAT, "an empty or absolute path", "\"file\"");
    const cache_want wide = {"sdxl", 4, 8, 1, 6, 32, 20, false, 6, NULL, false, 0, 0, 0, 0};
    dataset *ds = NULL;
    const st_status st = dataset_open_cache(edit_bucketed("bk-model", "latent_shape", "[16, 8, 8]"), &wide, &ds);
    CHECKF(st == ST_ERR_INVALID && !ds && strstr(st_error(), "2 mismatches with the model:") &&
               strstr(st_error(), "\n  text_dim 24") && strstr(st_error(), "\n  latents are 16 x 8 x 8 (cache-images/"),
           "another model, every way: %s", st_error());
}

/* A video family's version 2 cache of clips of two lengths (tests/fixtures/cache-wan-frames-tiny): its samples
 * grouped by latent frames, height and width, each read at its own shape; for an image family, 4-D latents are
 * refused by their rank. */
static void test_frames_cache(void)
{
    printf("-- a video cache of clips of two lengths: buckets of frames, height and width\n");
    const char *dir = SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-wan-frames-tiny";
    const cache_want wan = {"wan", 4, 4, 1, 8, 32, 0, false, 0, NULL, true, 0, 0, 0, 0};
    dataset *ds = NULL;
    CHECKF(dataset_open_cache(dir, &wan, &ds) == ST_OK, "%s", st_error());
    static const int want[3][4] = {{5, 4, 4, 2}, {3, 4, 4, 2}, {3, 4, 6, 1}}; /* frames, height, width, clips */
    CHECK(ds && dataset_buckets(ds) == 3);
    for (int b = 0; ds && b < dataset_buckets(ds) && b < 3; b++) {
        const data_bucket *k = dataset_bucket(ds, b);
        CHECKF(k->frames == want[b][0] && k->height == want[b][1] && k->width == want[b][2] && k->images == want[b][3],
               "bucket %d (%s) is %d x %d x %d, %lld clips", b, k->name, k->frames, k->height, k->width,
               (long long)k->images);
        float *x = malloc(sizeof(float) * (size_t)(4 * k->frames * k->height * k->width));
        CHECKF(dataset_get(ds, k->samples[0], x, NULL, NULL) == ST_OK, "%s", st_error());
        free(x);
    }
    dataset_close(ds);
    const cache_want image = {"wan", 4, 4, 1, 8, 32, 0, false, 0, NULL, false, 0, 0, 0, 0};
    refused_bucketed("clips for an image family", dir, &image, ST_ERR_FORMAT, "sample blue_square.safetensors",
                     "[channels, height, width]");
}

/* ---- training on a cache ---- */

static config *make_config(const char *out, const char *cache, const char *sets)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model_family\": \"flux\", \"model_preset\": \"flux-tiny\", \"data_cache_dir\": \"%s\", "
             "\"train_batch_size\": 2, \"learning_rate\": 1e-3, \"seed\": 5, \"validation_steps\": 0, "
             "\"checkpoint_step_interval\": 0, \"output_dir\": \"%s/%s\"}",
             cache, root, out);
    config *c = NULL;
    CHECKF(config_parse(json, "test", &c) == ST_OK, "%s", st_error());
    CHECKF(!c || config_set_all(c, sets) == ST_OK, "%s", st_error());
    return c;
}

/* Runs up to `steps` steps (then trainer_finish when finish); the step losses go into losses when not NULL. */
static st_status run(const char *out, const char *cache, const char *sets, int steps, bool finish, float *losses)
{
    config *c = make_config(out, cache, sets);
    trainer *t = NULL;
    st_status st = c ? trainer_create(c, NULL, &t) : ST_ERR_INVALID;
    for (int k = 0; !st && k < steps && !trainer_done(t); k++) {
        train_step_info in;
        st = trainer_step(t, &in);
        if (!st && losses) losses[k] = in.loss;
    }
    const char *path;
    if (!st && finish) st = trainer_finish(t, &path);
    trainer_destroy(t);
    config_free(c);
    return st;
}

/* SDXL's cache (make_cache.py --family sdxl): both CLIPs' states, OpenCLIP-G's pooled vector and each sample's six
 * size ids, which caption dropout leaves as they are (the empty prompt has none); a cache without them is refused.
 * Then SD 1.x's. */
static void test_sdxl_cache(void)
{
    printf("-- sdxl-tiny trains on the committed cache, with its size ids, half its captions dropped\n");
    float loss[3];
    const st_status st = run("sdxl-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-sdxl-tiny",
                             "model_family=sdxl;model_preset=sdxl-tiny;caption_dropout_probability=0.5;"
                             "max_train_steps=3", 3, true, loss);
    CHECKF(st == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)st, st_error());
    if (st == ST_OK) printf("     3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    dataset *ds = NULL;
    const cache_want want = {"sdxl", 4, 8, 1, 6, 24, 20, false, 6, NULL, false, 0, 0, 0, 0};
    CHECKF(dataset_open_cache(SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-sdxl-tiny", &want, &ds) == ST_OK, "%s",
           st_error());
    const int64_t n = dataset_text_floats(ds);
    float *cond = malloc(sizeof(float) * (size_t)(n + 6));
    data_iter *it = NULL;
    bool seen = false; /* red_circle.png is 20 x 16: its crop 2 px from the left, at 16 px */
    CHECK(data_iter_create(ds, 5, &it) == ST_OK);
    for (int k = 0; k < 5 && it; k++) {
        char caption[1][CAPTION_MAX];
        CHECK(data_iter_next_with_text(it, 1, NULL, NULL, caption, NULL, cond, n + 6) == ST_OK);
        const float want_ids[6] = {16, 20, 0, 2, 16, 16};
        if (strstr(caption[0], "red circle")) seen = !memcmp(cond + n, want_ids, sizeof want_ids);
    }
    CHECK(seen);
    data_iter_destroy(it);
    dataset_close(ds);
    free(cond);
    variant v = good();
    v.family = v.meta_family = "sdxl", v.text_dim = 24, v.rows = 6; /* its pooled vector is 16 wide */
    const st_status sn = run("sdxl-noids-out", make_cache("sdxl-noids", &v),
                             "model_family=sdxl;model_preset=sdxl-tiny;tokenizer_max_length=8;pooled_projection_dim=16;"
                             "max_train_steps=1", 1, false, NULL);
    CHECKF(sn == ST_ERR_FORMAT && strstr(st_error(), "add_time_ids"), "%d %s", (int)sn, st_error());
    printf("     a cache without size ids: %s\n", st_error());
    /* and SD 1.x's (make_cache.py --family sd1x): CLIP-L's last hidden state alone */
    const st_status s1 = run("sd1x-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-sd1x-tiny",
                             "model_family=sd1x;model_preset=sd1x-tiny;max_train_steps=3", 3, true, loss);
    CHECKF(s1 == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)s1, st_error());
    if (s1 == ST_OK) printf("     the committed sd1x cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
}

/* A cache of a family whose conditioning the format does not hold all of (hunyuanvideo15's ByT5 tokens) is refused
 * when training starts, in one line, rather than read into a partly filled conditioning. */
static void test_unheld_conditioning(void)
{
    printf("-- a cache short of the family's conditioning is refused\n");
    variant v = good();
    v.family = v.meta_family = "hunyuanvideo15", v.pooled_dim = 0, v.no_pooled = true;
    const char *dir = make_cache("hv15", &v);
    const st_status st = run("hv15-out", dir, "model_family=hunyuanvideo;model_preset=hunyuanvideo15-tiny", 1, false, NULL);
    CHECKF(st == ST_ERR_UNSUPPORTED && strstr(st_error(), "data_cache_dir") && strstr(st_error(), "ByT5") &&
               !strchr(st_error(), '\n'),
           "%d %s", (int)st, st_error());
    printf("     %s\n", st_error());
}

/* A video family trains on a cache of video latents (C, F, H, W): wan-tiny at num_frames 5 (2 latent frames); the
 * same cache refused for 1 frame, by its latent shape. */
static void test_video_cache(void)
{
    printf("-- wan-tiny trains on a cache of video latents\n");
    variant v = good();
    v.family = v.meta_family = "wan", v.pooled_dim = 0, v.no_pooled = true, v.frames = 2;
    const char *dir = make_cache("video", &v);
    float loss[3];
    st_status st = run("video-out", dir, "model_family=wan;model_preset=wan-tiny;num_frames=5;max_train_steps=3", 3,
                       true, loss);
    CHECKF(st == ST_OK && isfinite(loss[0]) && isfinite(loss[2]), "%d %s", (int)st, st_error());
    st = run("video-1", dir, "model_family=wan;model_preset=wan-tiny;num_frames=1", 1, false, NULL);
    CHECKF(st == ST_ERR_FORMAT && strstr(st_error(), "latent_shape must be [channels, height, width]"), "%d %s",
           (int)st, st_error());
    printf("     3 steps, loss %.4f -> %.4f; with num_frames 1: %s\n", loss[0], loss[2], st_error());
    /* and on the committed one make_cache.py --tiny-random --family wan --num_frames 5 wrote from frame folders */
    st = run("video-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-wan-tiny",
             "model_family=wan;model_preset=wan-tiny;num_frames=5;max_train_steps=3", 3, true, loss);
    CHECKF(st == ST_OK && isfinite(loss[0]) && isfinite(loss[2]), "%d %s", (int)st, st_error());
}

/* Lumina 2, Z-Image, ERNIE-Image, Ideogram 4, OmniGen, Krea 2, MiniMax-H3 and Cosmos 3 read one sequence and its
 * mask: each trains on a cache of masked captions, each sample's caption length (its mask's ones: 8 and 5 here)
 * laying out its own joint rows (MiniMax-H3's: its video's rotary clock); OmniGen's and Cosmos 3's sequence is
 * token ids, (L, 1), Krea 2's each token's tapped layers side by side. Flux.3 reads the sequence alone (its padding
 * tokens attended, as the class has it). MiniMax-H3's cache holds video latents of 2 frames (num_frames 5). */
static void test_lumina2_cache(void)
{
    static const char *const families[][3] = {{"lumina2", "lumina2-tiny", "2.0"}, {"z_image", "z-image-tiny", "base"},
                                              {"ernie", "ernie-tiny", "base"}, {"ideogram", "ideogram-tiny", "fp8"},
                                              {"omnigen", "omnigen-tiny", "v1"}, {"krea2", "krea2-tiny", "raw"},
                                              {"flux3_image", "flux3-tiny", ""},
                                              {"qwen_image", "qwen-image-2.1-tiny", "v2.1"},
                                              {"minimaxh3", "minimaxh3-tiny", "fl2va"},
                                              {"cosmos3", "cosmos3-tiny", "nano"}};
    for (size_t f = 0; f < sizeof families / sizeof *families; f++) {
        printf("-- %s trains on a cache of masked captions\n", families[f][1]);
        variant v = good();
        v.ids = !strcmp(families[f][0], "omnigen") || !strcmp(families[f][0], "cosmos3");
        v.family = v.meta_family = families[f][0], v.pooled_dim = 0, v.no_pooled = true, v.text_dim = v.ids ? 1 : 24;
        if (!strcmp(families[f][0], "krea2")) v.text_dim = 72; /* its 3 tapped layers of 24, side by side */
        if (!strcmp(families[f][2], "v2.1")) v.family = v.meta_family = "qwen_image21"; /* the model's own family */
        const bool video = !strcmp(families[f][0], "minimaxh3");
        v.frames = video ? 2 : 1;
        v.rows = 5;
        const char *dir = make_cache(families[f][1], &v);
        char sets[192];
        snprintf(sets, sizeof sets, "model_family=%s;model_flavour=%s;model_preset=%s;tokenizer_max_length=8;"
                 "max_train_steps=3%s", families[f][0], families[f][2], families[f][1], video ? ";num_frames=5" : "");
        char out[64];
        snprintf(out, sizeof out, "%s-out", families[f][1]);
        float loss[3];
        const st_status st = run(out, dir, sets, 3, true, loss);
        CHECKF(st == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%s: %d %s",
               families[f][0], (int)st, st_error());
        if (st == ST_OK) printf("     3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    }
    /* a mask with a hole (sample 1's first token masked) would lay the rows out wrong: refused, naming it */
    variant v = good();
    v.family = v.meta_family = "lumina2", v.pooled_dim = 0, v.no_pooled = true, v.text_dim = 24, v.mask = 0.0f;
    const st_status st = run("lumina2-hole-out", make_cache("lumina2-hole", &v),
                             "model_family=lumina2;model_preset=lumina2-tiny;tokenizer_max_length=8;max_train_steps=3",
                             3, false, NULL);
    CHECKF(st == ST_ERR_INVALID && strstr(st_error(), "caption mask") && strstr(st_error(), "tokens first"), "%d %s",
           (int)st, st_error());
    printf("     a mask with a hole: %s\n", st_error());
    /* OmniGen's rows are token ids: a cache of other numbers is refused when the step reads them, naming the value */
    variant w = good();
    w.family = w.meta_family = "omnigen", w.pooled_dim = 0, w.no_pooled = true, w.text_dim = 1, w.rows = 5;
    const st_status sw = run("omnigen-float-out", make_cache("omnigen-float", &w),
                             "model_family=omnigen;model_preset=omnigen-tiny;tokenizer_max_length=8;max_train_steps=3",
                             3, false, NULL);
    CHECKF(sw == ST_ERR_INVALID && strstr(st_error(), "embedding index") && strstr(st_error(), "64 rows"), "%d %s",
           (int)sw, st_error());
    printf("     a cache of numbers that are not token ids: %s\n", st_error());
    /* the committed one make_cache.py --tiny-random --family omnigen wrote: the prompts' ids in OmniGen's template */
    float loss[3];
    const st_status so = run("omnigen-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-omnigen-tiny",
                             "model_family=omnigen;model_preset=omnigen-tiny;tokenizer_max_length=40;"
                             "max_train_steps=3", 3, true, loss);
    CHECKF(so == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)so, st_error());
    if (so == ST_OK) printf("     the committed omnigen cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the committed one make_cache.py --tiny-random --family pixart_sigma wrote: T5's states with its mask */
    const st_status sp = run("pixart-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-pixart-tiny",
                             "model_family=pixart_sigma;model_preset=pixart-sigma-tiny;max_train_steps=3", 3, true,
                             loss);
    CHECKF(sp == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)sp, st_error());
    if (sp == ST_OK) printf("     the committed pixart_sigma cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family sana one: Gemma 2's states after Sana's instruction, with its mask, DC-AE latents */
    const st_status sn = run("sana-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-sana-tiny",
                             "model_family=sana;model_preset=sana-tiny;max_train_steps=3", 3, true, loss);
    CHECKF(sn == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)sn, st_error());
    if (sn == ST_OK) printf("     the committed sana cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family sanavideo one, from the 5-frame folders: Wan's VAE latents of 2 frames */
    const st_status sv = run("sanavideo-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-sanavideo-tiny",
                             "model_family=sanavideo;model_preset=sanavideo-tiny;num_frames=5;max_train_steps=3", 3,
                             true, loss);
    CHECKF(sv == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)sv, st_error());
    if (sv == ST_OK) printf("     the committed sanavideo cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family cosmos2image one: T5's states with their padding zeroed, Wan's VAE on one-frame clips */
    const st_status sc = run("cosmos2-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-cosmos2-tiny",
                             "model_family=cosmos2image;model_preset=cosmos2-tiny;max_train_steps=3", 3, true, loss);
    CHECKF(sc == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)sc, st_error());
    if (sc == ST_OK) printf("     the committed cosmos2image cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family ltxvideo one, from 9-frame folders: LTX's VAE (8x in time) gives 2 latent frames */
    const st_status sl = run("ltxvideo-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-ltxvideo-tiny",
                             "model_family=ltxvideo;model_preset=ltxvideo-tiny;num_frames=9;max_train_steps=3", 3,
                             true, loss);
    CHECKF(sl == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)sl, st_error());
    if (sl == ST_OK) printf("     the committed ltxvideo cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family lumina2 one: Gemma 2's second-to-last states after Lumina 2's system prompt (48 tokens) */
    const st_status su = run("lumina2-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-lumina2-tiny",
                             "model_family=lumina2;model_preset=lumina2-tiny;tokenizer_max_length=48;max_train_steps=3",
                             3, true, loss);
    CHECKF(su == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)su, st_error());
    if (su == ST_OK) printf("     the committed lumina2 cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family z_image one: Qwen3's second-to-last states of the caption in its chat template (16 tokens) */
    const st_status sz = run("z-image-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-z-image-tiny",
                             "model_family=z_image;model_flavour=base;model_preset=z-image-tiny;"
                             "tokenizer_max_length=16;max_train_steps=3", 3, true, loss);
    CHECKF(sz == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)sz, st_error());
    if (sz == ST_OK) printf("     the committed z_image cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family cosmos3 one: the ids of Cosmos3OmniPipeline's prompt (system turn, resolution template) */
    const st_status s3 = run("cosmos3-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-cosmos3-tiny",
                             "model_family=cosmos3;model_preset=cosmos3-tiny;tokenizer_max_length=48;"
                             "max_train_steps=3", 3, true, loss);
    CHECKF(s3 == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)s3, st_error());
    if (s3 == ST_OK) printf("     the committed cosmos3 cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family ernie one: unpadded captions' second-to-last states, Flux.2's patched, normalised latents */
    const st_status se = run("ernie-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-ernie-tiny",
                             "model_family=ernie;model_flavour=base;model_preset=ernie-tiny;max_train_steps=3", 3,
                             true, loss);
    CHECKF(se == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)se, st_error());
    if (se == ST_OK) printf("     the committed ernie cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family qwen_image one: Qwen2.5-VL's last states after the template's 34-token system prefix */
    const st_status sq = run("qwen-image-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-qwen-image-tiny",
                             "model_family=qwen_image;model_preset=qwen-image-tiny;max_train_steps=3", 3, true, loss);
    CHECKF(sq == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)sq, st_error());
    if (sq == ST_OK) printf("     the committed qwen_image cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family krea2 one: 3 tapped Qwen3-VL layers a token, its mask with the template's hole */
    const st_status sk = run("krea2-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-krea2-tiny",
                             "model_family=krea2;model_flavour=raw;model_preset=krea2-tiny;tokenizer_max_length=16;"
                             "max_train_steps=3", 3, true, loss);
    CHECKF(sk == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)sk, st_error());
    if (sk == ST_OK) printf("     the committed krea2 cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
    /* and the --family flux2 one: FLUX.2 Klein's Qwen3, two tapped layers a token (flux2-tiny's 32 = 2 x 16) */
    const st_status sf = run("flux2-committed", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-flux2-tiny",
                             "model_family=flux2;model_flavour=klein-9b;model_preset=flux2-tiny;max_train_steps=3", 3,
                             true, loss);
    CHECKF(sf == ST_OK && isfinite(loss[0]) && isfinite(loss[2]) && loss[0] != loss[2], "%d %s", (int)sf, st_error());
    if (sf == ST_OK) printf("     the committed flux2 cache: 3 steps, loss %.4f -> %.4f\n", loss[0], loss[2]);
}

static void test_training(void)
{
    printf("-- flux-tiny trains on the committed cache\n");
    enum { N = 40 };
    float loss[N];
    CHECKF(run("learn", FIXTURE, "max_train_steps=40", N, true, loss) == ST_OK, "%s", st_error());
    double first = 0, last = 0;
    bool finite = true;
    for (int k = 0; k < N; k++) finite = finite && isfinite(loss[k]);
    for (int k = 0; k < 8; k++) first += loss[k] / 8, last += loss[N - 8 + k] / 8;
    printf("     mean loss of steps 1-8 %.4f, of steps 33-40 %.4f\n", first, last);
    CHECKF(finite && last < 0.9 * first, "every loss finite and the loss comes down: %.4f -> %.4f", first, last);

    printf("-- 6 steps straight == 3 steps, a resume, 3 more (epochs of 5 in batches of 2, caption dropout)\n");
    const char *extra = "max_train_steps=6;checkpoint_step_interval=3;caption_dropout_probability=0.4";
    CHECKF(run("straight", FIXTURE, extra, 6, true, NULL) == ST_OK, "%s", st_error());
    CHECK(run("resumed", FIXTURE, extra, 5, false, NULL) == ST_OK); /* stopped after 5: checkpoint 3 is the newest */
    char sets[256];
    snprintf(sets, sizeof sets, "%s;resume_from_checkpoint=latest", extra);
    CHECKF(run("resumed", FIXTURE, sets, 6, true, NULL) == ST_OK, "%s", st_error());
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/straight/model.safetensors", root);
    snprintf(b, sizeof b, "%s/resumed/model.safetensors", root);
    CHECKF(tk_same_file(a, b), "the resumed run's final weights are the straight run's, byte for byte");
}

/* Step 3's loss of a run on cache `v` with the extra settings: flux's initialisation zeroes the modulation, so
 * step 1 reads the latents only. */
static float third_loss(const char *name, const variant *v, const char *sets)
{
    float loss[3] = {NAN, NAN, NAN};
    const char *dir = make_cache(name, v);
    char out[64];
    snprintf(out, sizeof out, "out-%s", name);
    CHECKF(run(out, dir, sets, 3, false, loss) == ST_OK, "%s", st_error());
    return loss[2];
}

static void test_what_training_reads(void)
{
    printf("-- the trainer reads x0, the embeddings, the guidance value and null.safetensors from the cache\n");
    const char *all = "caption_dropout_probability=0";
    variant v = good();
    const float base = third_loss("base", &v, all);
    v.latent_value = 0.5f;
    const float latents = third_loss("latents", &v, all);
    v = good(), v.seq_value = 2.0f;
    const float embeds = third_loss("embeds", &v, all);
    v = good();
    const float guided = third_loss("guided", &v, "caption_dropout_probability=0;flux_guidance_value=3.5");
    v = good(), v.null_value = 3.0f;
    const float null_unused = third_loss("null0", &v, all);
    const float dropped = third_loss("dropped", &v, "caption_dropout_probability=1");
    v = good();
    const float dropped_other = third_loss("dropped2", &v, "caption_dropout_probability=1");
    printf("     step-3 losses: %.6f; other latents %.6f, embeddings %.6f, guidance 3.5 %.6f; with another null "
           "%.6f, all dropped %.6f and %.6f\n", base, latents, embeds, guided, null_unused, dropped, dropped_other);
    CHECKF(latents != base && embeds != base && guided != base, "the loss depends on the latents, the embeddings "
           "and flux_guidance_value");
    CHECKF(null_unused == base && dropped != dropped_other, "null.safetensors is what a dropped caption trains "
           "with, and only then");

    printf("-- refusals at the start of a run\n");
    v = good(), v.no_null = true;
    const char *dir = make_cache("nonull", &v);
    st_status st = run("nonull", dir, "caption_dropout_probability=0.1", 1, false, NULL);
    CHECKF(st == ST_ERR_INVALID && strstr(st_error(), "nonull/null.safetensors") && strstr(st_error(), "make_cache.py"),
           "%s", st_error());
    printf("     %s\n", st_error());
    CHECKF(run("nonull0", dir, "caption_dropout_probability=0", 1, false, NULL) == ST_OK, "%s", st_error());
    st = run("both", dir, "data_dir=/tmp", 1, false, NULL);
    CHECKF(st == ST_ERR_INVALID && strstr(st_error(), "data_cache_dir") && strstr(st_error(), "data_dir"), "%s",
           st_error());
    st = run("dit", dir, "model_family=dit;model_preset=dit-tiny", 1, false, NULL);
    CHECKF(st == ST_ERR_INVALID && strstr(st_error(), "model_family dit"), "%s", st_error());
    printf("     %s\n", st_error());
    st = run("mmdit", dir, "model_family=mmdit;model_preset=mmdit-tiny", 1, false, NULL);
    CHECKF(st && strstr(st_error(), "data_cache_dir"), "%s", st_error());
    printf("     %s\n", st_error());
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segtrain-test-cache-XXXXXX");
    if (!mkdtemp(root)) return 1;
    test_fixture();
    test_padding_and_dtypes();
    test_mask();
    test_refusals();
    test_bucketed_cache();
    test_bucketed_refusals();
    test_frames_cache();
    test_unheld_conditioning();
    test_video_cache();
    test_lumina2_cache();
    test_sdxl_cache();
    test_training();
    test_what_training_reads();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
