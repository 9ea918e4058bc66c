/* Token caches (docs/CACHE.md "Token caches", src/train/token_cache.c): the committed heartmula-tiny cache that
 * scripts/make_cache.py --family heartmula --tiny-random wrote reads as SimpleTuner's collate_audio_tokens lays its
 * samples out (the ids the files hold, checked against the layout written here from them and against values copied
 * from the files); `segtrain train` on heartmula-tiny learns from it at batch 2 over samples of 12 to 16 rows, and
 * padding a batch further leaves its loss as it is (SimpleTuner pads to the batch's longest); every bad cache is
 * refused in one line naming the file and the value, and each way heartmula is refused its data says so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/data.h"
#include "segtrain/safetensors.h"
#include "segtrain/train.h"
#include "testkit.h"

#define FIXTURE SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-heartmula-tiny"
enum { K = 4, C = K + 1, V = 24, TV = 50, ROWS = 16 };

static char root[256];
/* heartmula-tiny at 16 rows (num_frames 16) */
static const cache_want tiny = {"heartmula", C, 1, ROWS, 0, 0, 0, false, 0, NULL, false, K, V, TV, ROWS};

/* The layout from a sample file's ids, written here apart from token_cache.c: tags, the empty row (empty id 0, its
 * text place in the mask), lyrics, the frames */
static void expected(const char *path, float *x, float *cond)
{
    sft_file *f = NULL;
    CHECKF(sft_open(path, &f) == ST_OK, "%s: %s", path, st_error());
    if (!f) return;
    const sft_tensor *a = sft_find(f, "audio_tokens"), *t = sft_find(f, "tag_ids"), *l = sft_find(f, "lyric_ids");
    const int64_t F = a->shape[0], T = t->shape[0], L = l->shape[0];
    int64_t audio[ROWS * K], tags[ROWS], lyrics[ROWS];
    CHECK(sft_read_i64(f, "audio_tokens", 2, a->shape, audio) == ST_OK);
    CHECK(sft_read_i64(f, "tag_ids", 1, &T, tags) == ST_OK && sft_read_i64(f, "lyric_ids", 1, &L, lyrics) == ST_OK);
    sft_close(f);
    memset(x, 0, sizeof(float) * ROWS * C), memset(cond, 0, sizeof(float) * ROWS * (C + 1));
    for (int64_t r = 0; r < T + 1 + L; r++) {
        x[r * C + K] = r < T ? (float)tags[r] : r == T ? 0.0f : (float)lyrics[r - T - 1];
        cond[r * C + K] = 1.0f;
    }
    for (int64_t r = T + 1 + L, j = 0; j < F; r++, j++) {
        for (int k = 0; k < K; k++) x[r * C + k] = (float)audio[j * K + k], cond[r * C + k] = 1.0f;
        cond[ROWS * C + r] = 1.0f;
    }
}

static void test_fixture(void)
{
    printf("-- the committed token cache reads as collate_audio_tokens lays its samples out\n");
    dataset *ds = NULL;
    CHECKF(dataset_open_cache(FIXTURE, &tiny, &ds) == ST_OK, "%s", st_error());
    if (!ds) return;
    CHECK(dataset_size(ds) == 4 && dataset_channels(ds) == C && dataset_text_floats(ds) == ROWS * (C + 1));
    const char *files[4] = {"a-pop.safetensors", "b-jazz.safetensors", "c-rock.safetensors", "sub/d-slow.safetensors"};
    for (int i = 0; i < 4; i++) {
        float x[ROWS * C], cond[ROWS * (C + 1)], want_x[ROWS * C], want_c[ROWS * (C + 1)];
        char caption[CAPTION_MAX];
        CHECKF(dataset_get(ds, i, x, NULL, caption) == ST_OK, "%s", st_error());
        float text[ROWS * (C + 1)];
        data_iter *it = NULL; /* the conditioning through the iterator, as training reads it */
        int64_t index = -1;
        CHECK(data_iter_create(ds, 1, &it) == ST_OK);
        for (int k = 0; it && index != i && k < 8; k++)
            CHECK(data_iter_next_with_text(it, 1, NULL, NULL, NULL, &index, text, ROWS * (C + 1)) == ST_OK);
        data_iter_destroy(it);
        memcpy(cond, text, sizeof cond);
        expected(tk_path(FIXTURE, files[i]), want_x, want_c);
        CHECKF(!memcmp(x, want_x, sizeof x) && !memcmp(cond, want_c, sizeof cond), "%s: laid out otherwise", files[i]);
        printf("     %s: tags \"%s\"\n", files[i], caption);
    }
    /* values copied from the committed files: a-pop's tags <bos> <tag> pop </tag> <eos>, its first frame, its
     * lyrics' la la; b-jazz's last frame at row 15 */
    float x[ROWS * C];
    CHECK(dataset_get(ds, 0, x, NULL, NULL) == ST_OK);
    const float tags[5] = {1, 16, 4, 17, 2}, lyric[4] = {1, 10, 10, 2}, frame[4] = {19, 14, 11, 6};
    for (int r = 0; r < 5; r++) CHECK(x[r * C + K] == tags[r]);
    CHECK(x[5 * C + K] == 0.0f);
    for (int r = 0; r < 4; r++) CHECK(x[(6 + r) * C + K] == lyric[r] && x[10 * C + r] == frame[r]);
    CHECK(dataset_get(ds, 1, x, NULL, NULL) == ST_OK);
    CHECK(x[15 * C + 0] == 2 && x[15 * C + 1] == 19 && x[15 * C + 2] == 0 && x[15 * C + 3] == 12);
    dataset_close(ds);
}

/* ---- training ---- */

static st_status run(const char *out, const char *cache, const char *sets, int steps, float *losses)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model_family\": \"heartmula\", \"model_preset\": \"heartmula-tiny\", \"data_cache_dir\": \"%s\", "
             "\"train_batch_size\": 2, \"learning_rate\": 3e-3, \"seed\": 5, \"validation_steps\": 0, "
             "\"checkpoint_step_interval\": 0, \"num_frames\": %d, \"output_dir\": \"%s/%s\"}",
             cache, ROWS, root, out);
    config *c = NULL;
    CHECKF(config_parse(json, "test", &c) == ST_OK, "%s", st_error());
    CHECKF(!c || config_set_all(c, sets) == ST_OK, "%s", st_error());
    trainer *t = NULL;
    st_status st = c ? trainer_create(c, NULL, &t) : ST_ERR_INVALID;
    for (int k = 0; !st && k < steps && !trainer_done(t); k++) {
        train_step_info in;
        st = trainer_step(t, &in);
        if (!st && losses) losses[k] = in.loss;
    }
    trainer_destroy(t);
    config_free(c);
    return st;
}

static void test_training(void)
{
    printf("-- heartmula-tiny trains on the committed token cache at batch 2\n");
    enum { STEPS = 8 };
    float loss[STEPS], wider[1];
    const st_status st = run("train", FIXTURE, "max_train_steps=8", STEPS, loss);
    CHECKF(st == ST_OK, "%s", st_error());
    bool finite = true;
    for (int k = 0; k < STEPS; k++) finite = finite && isfinite(loss[k]);
    CHECKF(!st && finite && loss[STEPS - 1] < loss[0], "losses %g .. %g", (double)loss[0], (double)loss[STEPS - 1]);
    printf("     %d steps: loss %.4f -> %.4f\n", STEPS, (double)loss[0], (double)loss[STEPS - 1]);
    /* the same first batch padded to 20 rows: SimpleTuner pads to the batch's longest, segtrain to the model's rows */
    CHECK(run("wider", FIXTURE, "max_train_steps=1;num_frames=20", 1, wider) == ST_OK);
    CHECKF(fabsf(wider[0] - loss[0]) <= 1e-5f * fabsf(loss[0]), "padded to 20 rows: loss %.7f, at 16 %.7f",
           (double)wider[0], (double)loss[0]);
    printf("     padded to 20 rows: first loss %.7f, at 16: %.7f\n", (double)wider[0], (double)loss[0]);
}

/* ---- refusals ---- */

/* A sample file of frames x k audio ids (audio as given, in dtype), tag and lyric ids, written for family */
static void write_sample(const char *dir, const char *name, const char *family, int64_t frames, int64_t k,
                         const int64_t *audio, sft_dtype dtype, int64_t tag_id)
{
    float audio_f[64];
    for (int64_t i = 0; i < frames * k; i++) audio_f[i] = (float)audio[i];
    const int64_t tags[3] = {1, tag_id, 2}, lyrics[2] = {1, 2};
    const sft_entry e[3] = {{"audio_tokens", dtype, 2, {frames, k}, dtype == SFT_I64 ? (const void *)audio : audio_f},
                            {"tag_ids", SFT_I64, 1, {3}, tags},
                            {"lyric_ids", SFT_I64, 1, {2}, lyrics}};
    const char *meta[4] = {"family", family, "tags", "pop"};
    CHECKF(sft_write(tk_path(dir, name), e, 3, meta, 2) == ST_OK, "%s", st_error());
}

/* A cache folder under root: cache.json of (k codebooks, audio vocab v) listing a.safetensors, b.safetensors */
static const char *make_cache(const char *name, int64_t k, int64_t v)
{
    static char dir[320];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    CHECK(mkdir(dir, 0755) == 0);
    char json[512];
    snprintf(json, sizeof json,
             "{\"format\": \"segtrain-token-cache\", \"version\": 1, \"family\": \"heartmula\", \"num_codebooks\": "
             "%lld, \"audio_vocab_size\": %lld, \"text_vocab_size\": 50, \"empty_id\": 0, \"count\": 2, "
             "\"samples\": [\"a.safetensors\", \"b.safetensors\"]}", (long long)k, (long long)v);
    tk_write_file(dir, "cache.json", json);
    const int64_t ids[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    write_sample(dir, "a.safetensors", "heartmula", 2, K, ids, SFT_I64, 4);
    write_sample(dir, "b.safetensors", "heartmula", 2, K, ids, SFT_I64, 5);
    return dir;
}

static void refused(const char *what, const char *dir, const cache_want *want, const char *needle)
{
    dataset *ds = NULL;
    const st_status st = dataset_open_cache(dir, want, &ds);
    const char *msg = st_error();
    CHECKF(st && !ds && strstr(msg, needle) && !strchr(msg, '\n') && strstr(msg, "data_cache_dir"),
           "%s: got %d: %s", what, (int)st, st ? msg : "(opened)");
    printf("     %s: %s\n", what, msg);
    dataset_close(ds);
}

static void test_refusals(void)
{
    printf("-- every bad token cache is refused at open, in one line naming the file and the value\n");
    const cache_want three = {"heartmula", 4, 1, ROWS, 0, 0, 0, false, 0, NULL, false, 3, V, TV, ROWS};
    cache_want short_rows = tiny;
    short_rows.rows = 11;
    refused("no cache.json", root, &tiny, "no cache.json there");
    refused("a cache of another codebook count", FIXTURE, &three,
            "cache.json: num_codebooks 4, the model has 3 (in_channels - 1)");
    refused("samples longer than the model's rows", FIXTURE, &short_rows,
            "a-pop.safetensors: 13 rows (5 tag ids, the empty row, 4 lyric ids, 3 audio frames), the model takes 11 "
            "(num_frames: set it to at least 13)");
    const char *dir = make_cache("corrupt", K, V);
    CHECK(truncate(tk_path(dir, "b.safetensors"), 20) == 0);
    refused("a truncated sample", dir, &tiny, "sample b.safetensors is unreadable or corrupt");
    dir = make_cache("codebooks", K, V);
    const int64_t six[6] = {1, 2, 3, 4, 5, 6}, eight[8] = {1, 2, 3, 4, 5, 6, 7, 8}, high[8] = {0, 1, 2, 3, 4, 5, 24, 7};
    write_sample(dir, "b.safetensors", "heartmula", 2, 3, six, SFT_I64, 5);
    refused("a sample of 3 codebooks", dir, &tiny,
            "b.safetensors: audio_tokens is 2 x 3, 3 codebooks; the model has 4");
    dir = make_cache("vocab", K, V);
    write_sample(dir, "b.safetensors", "heartmula", 2, K, high, SFT_I64, 5);
    refused("an audio id past the vocabulary", dir, &tiny,
            "b.safetensors: audio_tokens[1][2] is 24, outside the audio vocabulary 0 to 23");
    dir = make_cache("text-vocab", K, V);
    write_sample(dir, "a.safetensors", "heartmula", 2, K, eight, SFT_I64, 50);
    refused("a tag id past the text vocabulary", dir, &tiny,
            "a.safetensors: tag_ids[1] is 50, outside the text vocabulary 0 to 49");
    dir = make_cache("float-ids", K, V);
    write_sample(dir, "a.safetensors", "heartmula", 2, K, eight, SFT_F32, 4);
    refused("ids stored as floats", dir, &tiny, "a.safetensors: audio_tokens is F32 of 2 dimensions");
    dir = make_cache("family", K, V);
    write_sample(dir, "b.safetensors", "flux", 2, K, eight, SFT_I64, 5);
    refused("a sample written for another family", dir, &tiny,
            "b.safetensors: written for family flux, cache.json says heartmula");
    refused("a header of another vocabulary", make_cache("header", K, 30), &tiny,
            "audio_vocab_size 30, the model's is 24 (num_classes)");
    const cache_want flux = {"flux", 4, 8, 1, 8, 32, 16, false, 0, NULL, false, 0, 0, 0, 0};
    refused("a token cache for flux", FIXTURE, &flux, "a token cache (a token model's audio codec tokens");
    refused("a latent cache for heartmula", SEGTRAIN_SOURCE_DIR "/tests/fixtures/cache-flux-tiny", &tiny,
            "cache.json: format must be \"segtrain-token-cache\": model_family heartmula trains on a token cache");
}

/* What heartmula is refused for lack of data: the message, whole */
static void test_no_data(void)
{
    printf("-- heartmula without a token cache or synthetic_data: what it lacks said by name\n");
    const st_status st = run("no-data", "", "max_train_steps=1", 1, NULL);
    const char *want = "model_family heartmula trains on audio codec tokens: give a token cache (data_cache_dir, made "
                       "by scripts/make_cache.py --family heartmula from precomputed HeartCodec tokens and "
                       "HeartMuLaGen's tokenizer.json) or synthetic_data; segtrain reads no audio backend "
                       "(SimpleTuner's dataset_type audio with audio_tokens or audio_tokens_path) and runs no "
                       "HeartCodec";
    CHECKF(st == ST_ERR_UNSUPPORTED && !strcmp(st_error(), want), "got %d: %s", (int)st, st_error());
    printf("     %s\n", st_error());
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segtrain-test-token-cache-XXXXXX");
    if (!mkdtemp(root)) return 1;
    test_fixture();
    test_refusals();
    test_no_data();
    test_training();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
