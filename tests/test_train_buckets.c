/* A run over three bucket shapes (SimpleTuner's aspect buckets, on synthetic data): every step's measured device and
 * host peaks are its bucket's dry-run prediction to the byte; a bucket's model, sharing the run's weights, computes
 * the gradients a model made alone at its shape with those weights computes, bit for bit; a run resumed from a
 * checkpoint mid-way trains the same buckets in the same order and ends with the straight run's weights, byte for
 * byte; a run whose largest bucket does not fit device_memory is refused naming it. On DiT (a position table of the
 * grid, each bucket's own) and MMDiT (Flux's rotary positions, nothing of its own), each at a non-square pair of
 * one token count where the family takes non-square latents, else at three squares.
 * Then the same on real data: tests/fixtures/bucket-images.json's PNGs in their three aspect buckets (24x16, 16x24,
 * 32x16), the run's shapes being the data's, each step at its data batch's bucket (the iterator's order, every batch
 * of one bucket), its peak that bucket's prediction, a resume continuing the order to the same final bytes; a step
 * of two micro-batches of two buckets peaks at the larger's; num_train_epochs counts the bucket batches. And a
 * DiT position table saved at one shape is not loaded into a model of another. And a cache of video clips of two
 * lengths in buckets of width, height and frames, trained checkpointed and not to the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "segtrain/model_run.h"
#include "segtrain/objective.h"
#include "segtrain/train.h"
#include "testkit.h"

static char root[256];
static const char *preset, *shapes; /* the run's; the last shape is the largest */
/* what run() saw of its last trainer: its shapes' names ("24x16,16x24,32x16"), each one's predicted device peak and
 * its total steps */
static char run_shapes[256];
static size_t run_peaks[MODEL_SHAPES_MAX];
static int64_t run_total;

static config *make_config(const char *dir, const char *sets)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model_preset\": \"%s\", \"in_channels\": 3, \"vae_scale_factor\": 1, \"num_classes\": 8, "
             "\"synthetic_data\": true, \"bucket_shapes\": \"%s\", \"train_batch_size\": 2, "
             "\"learning_rate\": 1e-3, \"lr_warmup_steps\": 2, \"seed\": 3, \"validation_steps\": 0, "
             "\"checkpoint_step_interval\": 0, \"output_dir\": \"%s/%s-%s\"}", preset, shapes, root, preset, dir);
    config *c = NULL;
    CHECKF(config_parse(json, "test", &c) == ST_OK, "%s", st_error());
    CHECKF(!c || config_set_all(c, sets) == ST_OK, "%s", st_error());
    return c;
}

/* Trains up to stop_after steps (finishing the run when it ends), each step's peaks checked against its bucket's
 * prediction; each step's bucket into order[step - 1]. */
static st_status run(config *c, int64_t stop_after, int *order)
{
    trainer *t;
    st_status st = trainer_create(c, NULL, &t);
    const bucket_shape *shape = NULL;
    const int n = st ? 0 : trainer_buckets(t, &shape);
    CHECKF(st || n == 3, "the run has three buckets (%d): %s", n, st ? st_error() : "");
    run_shapes[0] = 0;
    for (int i = 0; i < n; i++) {
        const size_t at = strlen(run_shapes);
        bucket_shape_name(&shape[i], run_shapes + at + (i > 0), sizeof run_shapes - at - 1);
        if (i) run_shapes[at] = ',';
        run_peaks[i] = trainer_bucket_predicted(t, i, false)->peak;
    }
    run_total = st ? 0 : trainer_total_steps(t);
    for (int64_t k = 0; !st && !trainer_done(t) && k < stop_after; k++) {
        train_step_info in;
        if ((st = trainer_step(t, &in))) break;
        const pool_stats *dev = trainer_bucket_predicted(t, in.bucket, false), *host = trainer_bucket_predicted(t, in.bucket, true);
        char name[48];
        bucket_shape_name(&shape[in.bucket], name, sizeof name);
        printf("     step %lld bucket %-6s device peak measured %zu, predicted %zu; host %zu, %zu\n", (long long)in.step,
               name, in.peak_device, dev->peak, in.peak_host, host->peak);
        CHECKF(in.peak_device == dev->peak && in.peak_host == host->peak && !strcmp(in.bucket_name, name),
               "step %lld's peaks are bucket %s's prediction", (long long)in.step, name);
        order[in.step - 1] = in.bucket;
    }
    const char *path;
    if (!st && trainer_done(t)) st = trainer_finish(t, &path);
    trainer_destroy(t);
    return st;
}

/* root/<preset>-<dir>, a run's output_dir */
static const char *run_dir(const char *dir)
{
    char name[160];
    snprintf(name, sizeof name, "%s-%s", preset, dir);
    return tk_path(root, name);
}

/* extra's run straight (in <prefix>straight) and, in <prefix>resumed, "killed" after 5 steps and resumed from its
 * newest checkpoint (step 3): each step's bucket in straight[] and resumed[]; the two runs' final weights checked to
 * be the same bytes. */
static void straight_and_resumed(config *(*make)(const char *, const char *), const char *prefix, const char *extra,
                                 int steps, int *straight, int *resumed)
{
    char dir[2][32], more[512];
    snprintf(dir[0], sizeof dir[0], "%sstraight", prefix);
    snprintf(dir[1], sizeof dir[1], "%sresumed", prefix);
    snprintf(more, sizeof more, "%s;resume_from_checkpoint=latest", extra);
    config *a = make(dir[0], extra), *b = make(dir[1], extra), *c = make(dir[1], more);
    CHECKF(run(a, 1000, straight) == ST_OK, "%s", st_error());
    CHECK(run(b, 5, resumed) == ST_OK); /* "killed" after 5 steps: checkpoint-3 is the newest */
    for (int i = 3; i < steps; i++) resumed[i] = -1;
    CHECKF(run(c, 1000, resumed) == ST_OK, "%s", st_error());
    CHECKF(tk_same_file(tk_path(run_dir(dir[0]), "model.safetensors"), tk_path(run_dir(dir[1]), "model.safetensors")),
           "the resumed run's final weights are the straight run's, byte for byte");
    config_free(a), config_free(b), config_free(c);
}

static void test_peaks_and_resume(void)
{
    printf("-- three buckets (%s): each step's peak is its bucket's; a resume goes on in the same order\n", shapes);
    enum { STEPS = 6 };
    const char *extra = "max_train_steps=6;checkpoint_step_interval=3;gradient_accumulation_steps=2;"
                        "gradient_checkpointing=true;use_ema=true;ema_update_interval=1";
    int straight[STEPS] = {0}, resumed[STEPS] = {0}, seen[3] = {0};
    straight_and_resumed(make_config, "", extra, STEPS, straight, resumed);
    bool same = true;
    for (int i = 0; i < STEPS; i++) same = same && straight[i] == resumed[i], seen[straight[i]]++;
    CHECKF(same, "the resumed run's steps 4-6 train the straight run's buckets");
    CHECKF(seen[0] && seen[1] && seen[2], "every bucket trains in %d steps (%d, %d, %d)", STEPS, seen[0], seen[1],
           seen[2]);
    CHECKF(tk_same_file(tk_path(run_dir("straight"), "checkpoint-000006.safetensors"),
                        tk_path(run_dir("resumed"), "checkpoint-000006.safetensors")),
           "and so are the checkpoints at step 6");
    char *log = tk_read_file(run_dir("resumed"), "train_log.jsonl");
    CHECKF(log && tk_count(log, "\"bucket\": \"") == STEPS, "the log names each step's bucket:\n%s", log ? log : "");
    free(log);
    /* the order is the bucket list's: a resume with other shapes is refused */
    config *other = make_config("resumed", "max_train_steps=7;resume_from_checkpoint=latest");
    char swapped[128];
    snprintf(swapped, sizeof swapped, "bucket_shapes=%s,8x8", shapes);
    CHECK(config_set(other, swapped) == ST_OK);
    trainer *t = NULL;
    CHECKF(trainer_create(other, NULL, &t) == ST_ERR_FORMAT && strstr(st_error(), "bucket_shapes"),
           "a resume over other bucket shapes is refused: %s", st_error());
    trainer_destroy(t);
    config_free(other);
}

/* Forward and backward of m on seeded inputs, labels and captions; the prediction into pred_copy. */
static void step_once(model *m, float *pred_copy)
{
    const model_config *mc = model_get_config(m);
    const int64_t B = 2, per = model_sample_numel(mc), n = B * per, cond_len = model_cond_len(mc);
    float *x = malloc((size_t)n * sizeof *x), *dpred = malloc((size_t)n * sizeof *dpred), ts[2] = {150.0f, 725.0f},
          *cond = malloc((size_t)(B * cond_len) * sizeof *cond);
    tk_fill(x, n, 11, -1.0f, 1.0f);
    tk_fill(dpred, n, 12, -1.0f, 1.0f);
    model_condition(mc, 1, "a red circle", cond);
    model_condition(mc, 6, "two blue squares", cond + cond_len);
    const float *pred = NULL;
    param_set_zero_grads(model_params(m));
    CHECKF(model_forward(m, x, ts, cond, B, true, &pred) == ST_OK, "%s", st_error());
    if (pred) memcpy(pred_copy, pred, (size_t)n * sizeof *pred);
    CHECKF(pred && model_backward(m, dpred) == ST_OK, "%s", st_error());
    free(x), free(dpred), free(cond);
}

/* Bucket k's model against a model made alone at its shape, given run's weights (all but the grid tables). */
static void compare_alone(config *c, model_run *run, int k)
{
    char one[80] = "bucket_shapes=";
    bucket_shape_name(&run->shape[k], one + strlen(one), sizeof one - strlen(one));
    printf("     bucket %s\n", one + strlen("bucket_shapes="));
    model_run alone;
    CHECK(config_set(c, one) == ST_OK);
    CHECKF(model_run_open(c, true, &alone) == ST_OK, "%s", st_error());
    param_set *base = model_params(run->m), *own = model_params(alone.m);
    for (int i = 0; i < own->n; i++) {
        const param *q = param_at(own, i), *b = param_find(base, q->name);
        if (!q->grid) memcpy(q->w, b->w, (size_t)q->numel * sizeof(float));
    }
    const int64_t n = 2 * model_sample_numel(model_get_config(alone.m));
    float *p1 = calloc((size_t)n, sizeof *p1), *p2 = calloc((size_t)n, sizeof *p2);
    step_once(run->bucket[k], p1);
    step_once(alone.m, p2);
    tk_expect_bitwise("the prediction", p1, p2, n);
    tk_expect_bitwise("every gradient", base->grads, own->grads, base->grad_count);
    const param *table = param_find(model_params(run->bucket[k]), "pos_embed");
    if (param_find(base, "pos_embed")) /* DiT's */
        CHECKF(table && table->grid && table->w != param_find(base, "pos_embed")->w &&
                   !memcmp(table->w, param_find(own, "pos_embed")->w, (size_t)table->numel * sizeof(float)),
               "the bucket's position table is its own, the alone model's");
    free(p1), free(p2);
    CHECK(model_run_close(&alone) == 0);
}

static void test_shared_gradients(void)
{
    printf("-- a bucket's model computes the gradients of a model made alone at its shape with the same weights\n");
    config *c = make_config("grads", "gradient_checkpointing=true");
    model_run run;
    CHECKF(model_run_open(c, true, &run) == ST_OK, "%s", st_error());
    CHECKF(model_init(run.m, 5, true) == ST_OK, "%s", st_error());
    for (int k = 1; k < run.n_buckets; k++) compare_alone(c, &run, k);
    CHECK(model_run_close(&run) == 0);
    config_free(c);
}

/* device_memory one byte short of the largest bucket's peak: refused before anything is written, naming that bucket */
static void test_largest_bucket_must_fit(void)
{
    printf("-- a run whose largest bucket does not fit device_memory is refused, naming the bucket\n");
    config *c = make_config("tight", "max_train_steps=2");
    pool_stats dev, host;
    CHECKF(train_plan(c, 1, &dev, &host) == ST_OK, "%s", st_error());
    char budget[64];
    snprintf(budget, sizeof budget, "device_memory=%zu", dev.peak - 1);
    CHECK(config_set(c, budget) == ST_OK);
    trainer *t = NULL;
    const char *largest = strrchr(shapes, ',') + 1; /* the last shape is the largest of both sets */
    char want[64];
    snprintf(want, sizeof want, "at bucket %s (the largest of 3)", largest);
    CHECKF(trainer_create(c, NULL, &t) == ST_ERR_OOM && strstr(st_error(), want), "refused naming %s: %s", largest,
           st_error());
    trainer_destroy(t);
    snprintf(budget, sizeof budget, "device_memory=%zu", dev.peak);
    CHECK(config_set(c, budget) == ST_OK);
    CHECKF(trainer_create(c, NULL, &t) == ST_OK, "the largest bucket's peak itself fits: %s", st_error());
    trainer_destroy(t);
    config_free(c);
}

/* ---- real data in its aspect buckets (run from the source folder: a backend's instance_data_dir is relative) ---- */

#define DATA_SHAPES "32x16,16x24,24x16" /* the buckets of tests/fixtures/bucket-images.json, in the data's order */

static config *data_config(const char *dir, const char *sets)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model_preset\": \"%s\", \"in_channels\": 3, \"vae_scale_factor\": 1, \"num_classes\": 8, "
             "\"data_backend_config\": \"tests/fixtures/bucket-images.json\", \"resolution\": 16, "
             "\"resolution_type\": \"pixel\", \"aspect_bucket_alignment\": 8, \"disable_bucket_pruning\": true, "
             "\"train_batch_size\": 2, \"learning_rate\": 1e-3, \"lr_warmup_steps\": 2, \"seed\": 3, "
             "\"validation_steps\": 0, \"checkpoint_step_interval\": 0, \"output_dir\": \"%s/%s-%s\"}",
             preset, root, preset, dir);
    config *c = NULL;
    CHECKF(config_parse(json, "test", &c) == ST_OK, "%s", st_error());
    CHECKF(!c || config_set_all(c, sets) == ST_OK, "%s", st_error());
    return c;
}

/* The run's shape of each of the first n batches the data's iterator gives (a batch of 2 at the run's seed), each
 * batch's samples checked to be all of its bucket. */
static void data_order(const config *c, int n, int *order)
{
    train_buckets tb;
    CHECKF(train_buckets_open(c, 1, &tb) == ST_OK, "%s", st_error());
    if (!tb.data) return;
    bucket_shape shape[MODEL_SHAPES_MAX];
    int n_shapes = 0;
    CHECK(model_bucket_shapes(tb.cfg, shape, &n_shapes) == ST_OK && n_shapes == 3);
    CHECKF(!strcmp(config_string(tb.cfg, "bucket_shapes"), DATA_SHAPES), "the data's shapes are %s",
           config_string(tb.cfg, "bucket_shapes"));
    for (int k = 0; k < n; k++) {
        int b = -1;
        int64_t idx[2] = {-1, -1};
        CHECK(data_iter_peek_bucket(tb.iter, &b) == ST_OK &&
              data_iter_next_batch(tb.iter, 2, NULL, NULL, NULL, idx) == ST_OK);
        CHECKF(dataset_bucket_of(tb.data, idx[0]) == b && dataset_bucket_of(tb.data, idx[1]) == b,
               "batch %d is of one bucket", k);
        const data_bucket *bk = dataset_bucket(tb.data, b);
        order[k] = -1;
        for (int i = 0; bk && i < n_shapes; i++)
            if (shape[i].width == bk->width && shape[i].height == bk->height) order[k] = i;
    }
    train_buckets_close(&tb);
}

static void test_data_buckets(void)
{
    printf("-- %s in its aspect buckets: each step at its batch's bucket, its peak that bucket's; a resume goes on\n",
           "tests/fixtures/bucket-images.json");
    enum { STEPS = 8 }; /* two epochs of 4 batches: 32x16 one (kept: disable_bucket_pruning), 16x24 one, 24x16 two */
    const char *extra = "max_train_steps=8;checkpoint_step_interval=3;use_ema=true";
    int straight[STEPS] = {0}, resumed[STEPS] = {0}, want[2 * STEPS] = {0}, seen[3] = {0};
    config *a = data_config("data-straight", extra);
    data_order(a, 2 * STEPS, want);
    config_free(a);
    straight_and_resumed(data_config, "data-", extra, STEPS, straight, resumed);
    CHECKF(!strcmp(run_shapes, DATA_SHAPES), "the run's shapes are the data's buckets: %s", run_shapes);
    bool same = true, data = true;
    for (int i = 0; i < STEPS; i++) same = same && straight[i] == resumed[i], data = data && straight[i] == want[i];
    for (int i = 0; i < STEPS; i++) seen[straight[i]]++;
    CHECKF(data, "each step trains its data batch's bucket");
    CHECKF(same, "the resumed run's steps 4-8 train the straight run's buckets");
    CHECKF(seen[0] == 2 && seen[1] == 2 && seen[2] == 4, "two epochs: 32x16 and 16x24 twice, 24x16 4 times (%d, %d, "
           "%d)", seen[0], seen[1], seen[2]);
    /* two micro-batches a step, counted in epochs: 4 bucket batches an epoch are 2 steps; a step of two buckets is
     * named by (and peaks at) the one of the larger predicted peak */
    int pairs[STEPS] = {0};
    config *e = data_config("data-epochs", "num_train_epochs=2;gradient_accumulation_steps=2");
    CHECKF(run(e, 1000, pairs) == ST_OK, "%s", st_error());
    CHECKF(run_total == 4, "num_train_epochs 2 of 4 bucket batches, 2 a step, is 4 steps (%lld)", (long long)run_total);
    bool larger = true, mixed = false;
    for (int s = 0; s < 4; s++) {
        const int x = want[2 * s], y = want[2 * s + 1];
        larger = larger && pairs[s] == (run_peaks[y] > run_peaks[x] ? y : x);
        mixed = mixed || x != y;
    }
    CHECKF(larger, "each step is named by its micro-batches' bucket of the larger peak");
    CHECKF(mixed, "some step mixes two buckets");
    config_free(e);
}

/* What the data's buckets make of other settings: a pruned bucket is no shape of the run; a bucket_shapes given
 * beside them must name them; data_dir stays square. */
static void test_data_bucket_refusals(void)
{
    printf("-- a pruned bucket is no shape; bucket_shapes must name the data's; data_dir takes one square\n");
    config *c = data_config("data-refused", "disable_bucket_pruning=false");
    train_buckets tb;
    CHECKF(train_buckets_open(c, 1, &tb) == ST_OK && tb.cfg &&
               !strcmp(config_string(tb.cfg, "bucket_shapes"), "16x24,24x16"),
           "32x16 (one image, a batch of 2) is pruned: %s",
           tb.cfg ? config_string(tb.cfg, "bucket_shapes") : st_error());
    train_buckets_close(&tb);
    CHECK(config_set(c, "bucket_shapes=24x16,16x24") == ST_OK); /* the same, in another order: the data's order */
    CHECKF(train_buckets_open(c, 1, &tb) == ST_OK && tb.cfg &&
               !strcmp(config_string(tb.cfg, "bucket_shapes"), "16x24,24x16"), "%s", st_error());
    train_buckets_close(&tb);
    CHECK(config_set(c, "bucket_shapes=24x16,32x32") == ST_OK);
    trainer *t = NULL;
    CHECKF(trainer_create(c, NULL, &t) == ST_ERR_INVALID &&
               strstr(st_error(), "bucket_shapes \"24x16,32x32\", but the buckets of data_backend_config "
                                  "tests/fixtures/bucket-images.json are 16x24,24x16"),
           "a bucket_shapes other than the data's is refused: %s", st_error());
    trainer_destroy(t);
    CHECK(config_set(c, "data_backend_config=") == ST_OK &&
          config_set(c, "data_dir=tests/fixtures/bucket-images") == ST_OK);
    CHECKF(trainer_create(c, NULL, &t) == ST_ERR_UNSUPPORTED && strstr(st_error(), "a data_dir folder gives square "
                                                                                   "crops of one shape"),
           "data_dir over several shapes is refused: %s", st_error());
    trainer_destroy(t);
    config_free(c);
}

/* A cache of mixed shapes (make_cache.py --buckets: SDXL's latents at a VAE factor of 2 in four buckets) trains in
 * its buckets: the run's shapes are its latents' times the factor, each step at its batch's bucket, its peak that
 * bucket's prediction. A cache of one shape (version 1) keeps refusing several shapes. */
static void test_cache_buckets(void)
{
    printf("-- a cache of four latent buckets trains each batch at its bucket's shape\n");
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model_family\": \"sdxl\", \"model_preset\": \"sdxl-tiny\", \"vae_scale_factor\": 2, "
             "\"data_cache_dir\": \"tests/fixtures/cache-sdxl-buckets-tiny\", \"train_batch_size\": 2, "
             "\"learning_rate\": 1e-3, "
             "\"seed\": 5, \"validation_steps\": 0, \"checkpoint_step_interval\": 0, \"max_train_steps\": 6, "
             "\"output_dir\": \"%s/sdxl-cache\"}", root);
    config *c = NULL;
    CHECKF(config_parse(json, "test", &c) == ST_OK, "%s", st_error());
    trainer *t = NULL;
    CHECKF(c && trainer_create(c, NULL, &t) == ST_OK, "%s", st_error());
    const bucket_shape *shape = NULL;
    const int n = t ? trainer_buckets(t, &shape) : 0;
    char names[128] = "";
    for (int i = 0; i < n; i++) {
        const size_t at = strlen(names);
        snprintf(names + at, sizeof names - at, "%s%lldx%lld", i ? "," : "", (long long)shape[i].width,
                 (long long)shape[i].height);
    }
    CHECKF(!strcmp(names, "16x16,32x16,16x24,24x16"), "the cache's buckets (latents 8x8, 16x8, 8x12, 12x8) times 2: %s",
           names);
    int seen[4] = {0};
    for (int k = 0; t && !trainer_done(t); k++) {
        train_step_info in;
        CHECKF(trainer_step(t, &in) == ST_OK, "%s", st_error());
        if (in.bucket < 0 || in.bucket >= 4) break;
        const pool_stats *dev = trainer_bucket_predicted(t, in.bucket, false);
        printf("     step %lld bucket %-6s device peak measured %zu, predicted %zu\n", (long long)in.step,
               in.bucket_name, in.peak_device, dev->peak);
        CHECKF(in.peak_device == dev->peak, "step %lld's peak is bucket %s's prediction", (long long)in.step,
               in.bucket_name);
        seen[in.bucket]++;
    }
    CHECKF(seen[0] + seen[1] + seen[2] + seen[3] == 6 && (!!seen[0] + !!seen[1] + !!seen[2] + !!seen[3]) >= 3,
           "6 steps over the buckets (%d, %d, %d, %d)", seen[0], seen[1], seen[2], seen[3]);
    trainer_destroy(t);
    CHECK(config_set(c, "data_cache_dir=tests/fixtures/cache-sdxl-tiny") == ST_OK &&
          config_set(c, "vae_scale_factor=0") == ST_OK && config_set(c, "bucket_shapes=64x64,128x128") == ST_OK);
    t = NULL;
    CHECKF(trainer_create(c, NULL, &t) == ST_ERR_UNSUPPORTED &&
               strstr(st_error(), "holds latents of one square shape: cache aspect buckets with"),
           "a cache of one shape refuses two: %s", st_error());
    trainer_destroy(t);
    config_free(c);
}

/* ---- a cache of clips of two lengths: buckets of (width, height, frames) ---- */

#define FRAME_SHAPES "32x32@17,32x32@9,48x32@9" /* tests/fixtures/cache-wan-frames-tiny's latents, in pixels */

static config *frames_config(const char *dir, const char *sets)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model_family\": \"wan\", \"model_preset\": \"%s\", \"data_cache_dir\": "
             "\"tests/fixtures/cache-wan-frames-tiny\", \"train_batch_size\": 2, \"learning_rate\": 1e-3, "
             "\"lr_warmup_steps\": 2, \"seed\": 3, \"validation_steps\": 0, \"checkpoint_step_interval\": 0, "
             "\"output_dir\": \"%s/%s-%s\"}", preset, root, preset, dir);
    config *c = NULL;
    CHECKF(config_parse(json, "test", &c) == ST_OK, "%s", st_error());
    CHECKF(!c || config_set_all(c, sets) == ST_OK, "%s", st_error());
    return c;
}

/* The cache's five clips (5 and 3 latent frames, 17 and 9 in pixels) are three buckets, the run's shapes WxH@F; each
 * step trains at its batch's bucket, its peak that bucket's prediction; a resume ends with the straight run's bytes,
 * and so does a run without gradient checkpointing. */
static void test_cache_frames(void)
{
    printf("-- a cache of clips of two lengths trains each batch at its bucket's width, height and frames\n");
    enum { STEPS = 6 }; /* two epochs of 3 batches: 32x32@17 and 32x32@9 two clips each, 48x32@9 one (short) */
    const char *extra = "max_train_steps=6;checkpoint_step_interval=3;gradient_checkpointing=true";
    int straight[STEPS] = {0}, resumed[STEPS] = {0}, unchecked[STEPS] = {0}, seen[3] = {0};
    straight_and_resumed(frames_config, "frames-", extra, STEPS, straight, resumed);
    CHECKF(!strcmp(run_shapes, FRAME_SHAPES), "the run's shapes are the cache's buckets with frames: %s", run_shapes);
    bool same = true;
    for (int i = 0; i < STEPS; i++) same = same && straight[i] == resumed[i], seen[straight[i]]++;
    CHECKF(same, "the resumed run's steps 4-6 train the straight run's buckets");
    CHECKF(seen[0] == 2 && seen[1] == 2 && seen[2] == 2, "each bucket trains once an epoch (%d, %d, %d)", seen[0],
           seen[1], seen[2]);
    config *c = frames_config("frames-unchecked", "max_train_steps=6;gradient_checkpointing=false");
    CHECKF(run(c, 1000, unchecked) == ST_OK, "%s", st_error());
    CHECKF(!memcmp(straight, unchecked, sizeof straight), "the same buckets in the same order");
    CHECKF(tk_same_file(tk_path(run_dir("frames-straight"), "model.safetensors"),
                        tk_path(run_dir("frames-unchecked"), "model.safetensors")),
           "gradient checkpointing changes no bit of the trained weights");
    config_free(c);
}

/* A DiT position table (a grid table) in a weights file is of the shape its model had: loading the file into a
 * model of another grid, of one token count (16x24 from 24x16) or another (32x32), keeps the model's own table. */
static void test_grid_tables_not_loaded(void)
{
    printf("-- a position table saved at one shape is not loaded into a model of another\n");
    config *c = make_config("grid", "");
    model_run saved;
    CHECKF(model_run_open(c, true, &saved) == ST_OK, "%s", st_error());
    CHECK(model_init(saved.m, 5, true) == ST_OK);
    const char *file = tk_path(root, "grid.safetensors");
    CHECKF(param_set_save(model_params(saved.m), file, PARAMS_ALL, false, NULL, 0, NULL, 0) == ST_OK, "%s", st_error());
    static const char *const others[] = {"bucket_shapes=16x24", "bucket_shapes=32x32"};
    for (int k = 0; k < 2; k++) {
        model_run alone;
        CHECK(config_set(c, others[k]) == ST_OK);
        CHECKF(model_run_open(c, true, &alone) == ST_OK, "%s", st_error());
        param_set *ps = model_params(alone.m), *from = model_params(saved.m);
        const param *table = param_find(ps, "pos_embed"), *w = param_find(ps, "final_layer.linear.weight");
        float *own = malloc((size_t)table->numel * sizeof *own);
        memcpy(own, table->w, (size_t)table->numel * sizeof *own);
        CHECKF(param_set_load(ps, file, PARAMS_ALL, NULL) == ST_OK, "%s: %s", others[k], st_error());
        CHECKF(!memcmp(own, table->w, (size_t)table->numel * sizeof *own), "%s keeps its own position table",
               others[k]);
        CHECKF(w && !memcmp(w->w, param_find(from, w->name)->w, (size_t)w->numel * sizeof(float)),
               "and reads the other weights");
        free(own);
        CHECK(model_run_close(&alone) == 0);
    }
    CHECK(model_run_close(&saved) == 0);
    config_free(c);
}

/* A plan of m in gradient_checkpointing_plan's words: each sequence's block 0 checkpointed, the rest kept. */
static void first_block_ckpt(model *m, char *buf, size_t size)
{
    block_seq *seqs;
    size_t at = 0;
    buf[0] = 0;
    for (int q = 0, n = model_sequences(m, &seqs); q < n && at < size; q++) {
        at += (size_t)snprintf(buf + at, size - at, "%s%s: 0 ckpt", q ? " / " : "", seqs[q].name);
        if (seqs[q].n > 1 && at < size) at += (size_t)snprintf(buf + at, size - at, " | 1-%d keep", seqs[q].n - 1);
    }
}

/* Bucket k's dry device peak in the run of c, and its plan's words. */
static size_t run_peak(config *c, int k, char *plan, size_t size)
{
    model_run r;
    pool_stats dev[MODEL_SHAPES_MAX], host[MODEL_SHAPES_MAX];
    int largest;
    CHECKF(model_run_open(c, false, &r) == ST_OK, "%s", st_error());
    CHECKF(flow_step_dry_buckets(&r, 2, 1, dev, host, &largest) == ST_OK, "%s", st_error());
    if (plan) model_plan_text(r.bucket[k], plan, size);
    CHECK(model_run_close(&r) == 0);
    return dev[k].peak;
}

/* The dry device peak of c's run at bucket `name` alone, under the overrides `sets`, and its plan's words. */
static size_t alone_peak(config *c, const char *name, const char *sets, char *plan, size_t size)
{
    config *one = config_copy(c);
    char shape[80];
    snprintf(shape, sizeof shape, "bucket_shapes=%s", name);
    CHECK(one && config_set(one, shape) == ST_OK);
    CHECKF(config_set(one, "gradient_checkpointing_bucket_plans=") == ST_OK && config_set_all(one, sets) == ST_OK,
           "%s", st_error());
    model_run r;
    pool_stats dev, host;
    CHECKF(model_run_open(one, false, &r) == ST_OK, "%s", st_error());
    CHECKF(flow_step_dry(&r, 2, 1, &dev, &host) == ST_OK, "%s", st_error());
    if (plan) model_plan_text(r.m, plan, size);
    CHECK(model_run_close(&r) == 0);
    config_free(one);
    return dev.peak;
}

/* A refusal of model_run_open for the bucket plans `value` (on c's buckets), its message holding `want`. */
static void expect_refused(config *c, const char *value, const char *want)
{
    char set[PLAN_TEXT_MAX + 64];
    snprintf(set, sizeof set, "gradient_checkpointing_bucket_plans=%s", value);
    CHECK(config_set(c, set) == ST_OK);
    model_run r;
    const st_status st = model_run_open(c, false, &r);
    CHECKF(st != ST_OK && strstr(st_error(), want), "\"%s\" is refused with \"%s\": %s", value, want,
           st ? st_error() : "accepted");
    if (!st) model_run_close(&r);
}

/* gradient_checkpointing_bucket_plans: its refusals; each bucket's model planned by its own plan (its dry peak a run
 * of that bucket alone at that plan's, beside what the run holds for the other buckets, the same under any plan),
 * a bucket not named by the run's schedule; a run's every step's peak its bucket's prediction. */
static void test_bucket_plans(void)
{
    printf("-- gradient_checkpointing_bucket_plans: each bucket's model is planned by its own plan\n");
    config *c = make_config("plans", "gradient_checkpointing=true;gradient_checkpointing_interval=2");
    model_run r;
    char names[3][48], own[PLAN_TEXT_MAX], value[2 * PLAN_TEXT_MAX], valid[200];
    CHECKF(model_run_open(c, false, &r) == ST_OK, "%s", st_error());
    for (int k = 0; k < 3; k++) bucket_shape_name(&r.shape[k], names[k], sizeof names[k]);
    first_block_ckpt(r.m, own, sizeof own);
    const param *table = param_find(model_params(r.m), "pos_embed");
    const bool tables = table && table->grid; /* DiT's; MMDiT's positions are rotary */
    CHECK(model_run_close(&r) == 0);
    snprintf(valid, sizeof valid, "(valid: %s, %s, %s)", names[0], names[1], names[2]);
    expect_refused(c, "640x480: none", valid);
    snprintf(value, sizeof value, "%s: none, %s: none", names[1], names[1]);
    expect_refused(c, value, "is given twice");
    expect_refused(c, names[0], "is not a bucket's plan");
    snprintf(value, sizeof value, "%s: 0-99 ckpt", names[2]);
    char want[160];
    snprintf(want, sizeof want, "gradient_checkpointing_bucket_plans: %s: gradient_checkpointing_plan:", names[2]);
    expect_refused(c, value, want);
    config *single = make_config("plans-single", "gradient_checkpointing=true;bucket_shapes=");
    expect_refused(single, "16x16: none", "the run has no bucket_shapes");
    config_free(single);

    /* bucket 0 keeps everything, bucket 1 takes the run's interval 2, bucket 2 checkpoints each sequence's block 0 */
    snprintf(value, sizeof value, "gradient_checkpointing_bucket_plans= %s: none ,%s: %s", names[0], names[2], own);
    CHECK(config_set(c, value) == ST_OK);
    char plan_sets[PLAN_TEXT_MAX + 96];
    snprintf(plan_sets, sizeof plan_sets, "gradient_checkpointing_interval=1;gradient_checkpointing_plan=%s", own);
    const char *alone_sets[3] = {"gradient_checkpointing=false", "", plan_sets};
    config *none = make_config("plans-none", "");
    char in_run[3][PLAN_TEXT_MAX], alone[PLAN_TEXT_MAX];
    for (int k = 0; k < 3; k++) {
        const size_t got = run_peak(c, k, in_run[k], sizeof in_run[k]);
        const size_t want_peak = alone_peak(c, names[k], alone_sets[k], alone, sizeof alone);
        const size_t others = run_peak(none, k, NULL, 0) - alone_peak(none, names[k], "", NULL, 0);
        printf("     bucket %-6s %s: peak %zu in the run, %zu alone + %zu for the other buckets\n", names[k], in_run[k],
               got, want_peak, others);
        CHECKF(!strcmp(in_run[k], alone), "bucket %s is planned as a run of it alone at its plan: %s, %s", names[k],
               in_run[k], alone);
        CHECKF(got == want_peak + others, "bucket %s's dry peak is its plan's alone, beside the others' tables",
               names[k]);
        CHECKF(tables || others == 0, "a run whose models hold no position tables holds nothing for other buckets");
    }
    CHECKF(strcmp(in_run[0], in_run[1]) && strcmp(in_run[1], in_run[2]) && strcmp(in_run[0], in_run[2]),
           "the three buckets have three plans");
    config_free(none);

    int order[6];
    CHECK(config_set(c, "max_train_steps=6") == ST_OK);
    CHECKF(run(c, 1000, order) == ST_OK, "%s", st_error());
    config_free(c);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segtrain-test-buckets-XXXXXX");
    if (!mkdtemp(root)) return 1;
    static const char *const presets[] = {"dit-tiny", "mmdit-tiny"};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        char probe_json[160];
        snprintf(probe_json, sizeof probe_json, "{\"model_preset\": \"%s\", \"bucket_shapes\": \"16x24\", "
                 "\"vae_scale_factor\": 1}", presets[i]);
        model_config mc;
        config *probe = NULL;
        preset = presets[i];
        shapes = "24x16,16x24,32x32"; /* 16x24 and 24x16: one token count, two grids */
        if (config_parse(probe_json, "probe", &probe) || model_config_from(probe, &mc) || model_config_check(&mc))
            shapes = "16x16,8x8,24x24";
        config_free(probe);
        printf("== %s at %s\n", preset, shapes);
        test_shared_gradients();
        test_peaks_and_resume();
        test_largest_bucket_must_fit();
        if (!strcmp(preset, "dit-tiny")) test_grid_tables_not_loaded();
        test_bucket_plans();
    }
    /* the committed multidatabackend.json names its folder from the source folder, as SimpleTuner reads it */
    if (chdir(SEGTRAIN_SOURCE_DIR) != 0) return 1;
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        preset = presets[i];
        printf("== %s on %s\n", preset, DATA_SHAPES);
        test_data_buckets();
    }
    test_data_bucket_refusals();
    test_cache_buckets();
    preset = "wan-tiny";
    test_cache_frames();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
