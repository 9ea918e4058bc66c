/* Token caches (docs/CACHE.md, "Token caches"): a token model's data (HeartMuLa's), as scripts/make_cache.py
 * --family heartmula writes it from precomputed HeartCodec tokens and HeartMuLaGen's tokenizer: cache.json and one
 * safetensors file a sample holding its audio_tokens (frames, K), tag_ids and lyric_ids (I64). A sample is laid out
 * as SimpleTuner's HeartMuLa.collate_audio_tokens lays one out: rows [tags; an empty row; lyrics] in the text column,
 * then the audio frames' K codebooks, every other place empty_id; its tokens' mask and audio frame mask after it.
 * SimpleTuner right-pads a batch to its longest sample with empty rows (mask 0); here every sample is padded to the
 * model's rows (num_frames), which gives the same loss and gradients: the backbone is causal, so no real row sees a
 * padding row, padding rows are hidden as keys and weigh 0 in the loss, and the decoder runs each frame alone. Every
 * file and id is checked when the cache is opened, so that a bad one stops the run before its first step. */
#include "data_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/safetensors.h"

#define TOKEN_VERSION 1

/* One sample file's ids */
typedef struct token_sample {
    int64_t *audio, *tags, *lyrics; /* (frames, K), (ntags), (nlyrics) */
    int64_t frames, ntags, nlyrics;
} token_sample;

static void sample_free(token_sample *s)
{
    free(s->audio), free(s->tags), free(s->lyrics);
    *s = (token_sample){0};
}

/* An I64 tensor of ndim dimensions, at least one element, read into a new array (*n elements, *shape0 its first
 * dimension's) */
static st_status read_ids(const char *dir, const char *file, const sft_file *f, const char *name, int ndim,
                          int64_t **out, int64_t *shape0, int64_t *shape1)
{
    const sft_tensor *t = sft_find(f, name);
    if (!t)
        return st_fail(ST_ERR_FORMAT, "data_cache_dir %s: %s: no %s tensor (docs/CACHE.md, \"Token caches\")", dir,
                       file, name);
    if (t->dtype != SFT_I64 || t->ndim != ndim || t->shape[0] < 1)
        return st_fail(ST_ERR_FORMAT, "data_cache_dir %s: %s: %s is %s of %d dimensions (first %lld); the format has "
                       "%s of I64, at least one", dir, file, name, sft_dtype_name(t->dtype), t->ndim,
                       (long long)t->shape[0], ndim == 2 ? "(frames, codebooks)" : "one dimension");
    const int64_t n = t->shape[0] * (ndim == 2 ? t->shape[1] : 1);
    *shape0 = t->shape[0];
    if (shape1) *shape1 = ndim == 2 ? t->shape[1] : 1;
    if (!(*out = malloc(sizeof(int64_t) * (size_t)(n ? n : 1)))) return data_oom();
    return sft_read_i64(f, name, ndim, t->shape, *out);
}

/* The first id of ids (n of them, in rows of `width`) outside [0, vocab), named, or ST_OK */
static st_status in_vocab(const char *dir, const char *file, const char *name, const int64_t *ids, int64_t n,
                          int64_t width, int64_t vocab, const char *what, const char *whose)
{
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < vocab) continue;
        char at[48];
        if (width > 1) snprintf(at, sizeof at, "[%lld][%lld]", (long long)(i / width), (long long)(i % width));
        else snprintf(at, sizeof at, "[%lld]", (long long)i);
        return st_fail(ST_ERR_INVALID, "data_cache_dir %s: %s: %s%s is %lld, outside the %s 0 to %lld (%s)", dir,
                       file, name, at, (long long)ids[i], what, (long long)(vocab - 1), whose);
    }
    return ST_OK;
}

/* A sample file read and checked against the dataset (its codebooks, vocabularies and rows) and, where cache_family
 * is not NULL, against cache.json's family, dir and file naming it; its tags (metadata) into *caption, a copy, where
 * caption is not NULL */
static st_status load_sample(const dataset *ds, const char *dir, const char *file, const char *path,
                             const char *cache_family, token_sample *s, char **caption)
{
    *s = (token_sample){0};
    sft_file *f = NULL;
    st_status st = sft_open(path, &f);
    if (st) return st_fail(st, "data_cache_dir %s: sample %s is unreadable or corrupt: %s", dir, file, st_error());
    const char *family = sft_metadata(f, "family");
    int64_t k = 0;
    if (family && cache_family && strcmp(family, cache_family))
        st = st_fail(ST_ERR_INVALID, "data_cache_dir %s: %s: written for family %s, cache.json says %s", dir, file,
                     family, cache_family);
    if (!st) st = read_ids(dir, file, f, "audio_tokens", 2, &s->audio, &s->frames, &k);
    if (!st && k != ds->codebooks)
        st = st_fail(ST_ERR_INVALID, "data_cache_dir %s: %s: audio_tokens is %lld x %lld, %lld codebooks; the model "
                     "has %lld (in_channels - 1, HeartMuLa's audio_num_codebooks)", dir, file, (long long)s->frames,
                     (long long)k, (long long)k, (long long)ds->codebooks);
    if (!st) st = read_ids(dir, file, f, "tag_ids", 1, &s->tags, &s->ntags, NULL);
    if (!st) st = read_ids(dir, file, f, "lyric_ids", 1, &s->lyrics, &s->nlyrics, NULL);
    const char *tags = sft_metadata(f, "tags");
    if (!st && caption && !(*caption = strdup(tags ? tags : ""))) st = data_oom();
    sft_close(f);
    const char *audio = "num_classes, HeartMuLa's audio_vocab_size", *text = "text_vocab_size", *tv = "text vocabulary";
    if (!st) st = in_vocab(dir, file, "audio_tokens", s->audio, s->frames * k, k, ds->audio_vocab, "audio vocabulary",
                           audio);
    if (!st) st = in_vocab(dir, file, "tag_ids", s->tags, s->ntags, 1, ds->text_vocab, tv, text);
    if (!st) st = in_vocab(dir, file, "lyric_ids", s->lyrics, s->nlyrics, 1, ds->text_vocab, tv, text);
    const int64_t rows = s->ntags + 1 + s->nlyrics + s->frames;
    if (!st && rows > ds->frames)
        st = st_fail(ST_ERR_INVALID, "data_cache_dir %s: %s: %lld rows (%lld tag ids, the empty row, %lld lyric ids, "
                     "%lld audio frames), the model takes %lld (num_frames: set it to at least %lld)", dir, file,
                     (long long)rows, (long long)s->ntags, (long long)s->nlyrics, (long long)s->frames,
                     (long long)ds->frames, (long long)rows);
    if (st) sample_free(s);
    if (st && caption) free(*caption), *caption = NULL;
    return st;
}

/* s laid out as collate_audio_tokens lays a sample out, padded to the model's rows: x (S, K + 1) the tokens, cond
 * their mask (S, K + 1) then the audio frame mask (S) */
static void lay_out(const dataset *ds, const token_sample *s, float *x, float *cond)
{
    const int64_t S = ds->frames, K = ds->codebooks, C = K + 1, prompt = s->ntags + 1 + s->nlyrics;
    for (int64_t i = 0; x && i < S * C; i++) x[i] = (float)ds->empty_id;
    if (cond) memset(cond, 0, sizeof(float) * (size_t)(S * (C + 1)));
    for (int64_t r = 0; r < prompt; r++) { /* the text column: tags, the empty row's empty_id, lyrics */
        const int64_t id = r < s->ntags ? s->tags[r] : r == s->ntags ? ds->empty_id : s->lyrics[r - s->ntags - 1];
        if (x) x[r * C + K] = (float)id;
        if (cond) cond[r * C + K] = 1.0f;
    }
    for (int64_t t = 0; t < s->frames; t++) {
        const int64_t r = prompt + t;
        for (int64_t k = 0; k < K; k++) {
            if (x) x[r * C + k] = (float)s->audio[t * K + k];
            if (cond) cond[r * C + k] = 1.0f;
        }
        if (cond) cond[S * C + r] = 1.0f;
    }
}

st_status token_read(const dataset *ds, const char *path, float *x, float *cond)
{
    token_sample s;
    st_status st = load_sample(ds, "(read again)", path, path, NULL, &s, NULL); /* it changed since the cache was opened */
    if (!st) lay_out(ds, &s, x, cond);
    sample_free(&s);
    return st;
}

/* cache.json's header against the model: every field the model does not take, in one error */
static st_status check_header(const char *dir, const cJSON *root, const cache_want *want, int64_t *empty)
{
    int64_t version = 0, k = 0, vocab = 0, text = 0;
    const cJSON *family = cJSON_GetObjectItemCaseSensitive(root, "family");
    st_status st = cache_index_int(dir, root, "version", 0, &version);
    if (!st && version != TOKEN_VERSION)
        st = st_fail(ST_ERR_UNSUPPORTED, "data_cache_dir %s: cache.json: token cache version %lld; this segtrain "
                     "reads version %d", dir, (long long)version, TOKEN_VERSION);
    if (!st && !cJSON_IsString(family))
        st = st_fail(ST_ERR_FORMAT, "data_cache_dir %s: cache.json: family must be a string", dir);
    if (!st) st = cache_index_int(dir, root, "num_codebooks", 1, &k);
    if (!st) st = cache_index_int(dir, root, "audio_vocab_size", 1, &vocab);
    if (!st) st = cache_index_int(dir, root, "text_vocab_size", 1, &text);
    if (!st) st = cache_index_int(dir, root, "empty_id", 0, empty);
    if (st) return st;
    char lines[1024] = "";
    size_t at = 0;
    if (strcmp(family->valuestring, want->family))
        at += (size_t)snprintf(lines, sizeof lines, "; written for model_family %.64s, the model is %s",
                               family->valuestring, want->family);
    const struct {
        bool differs;
        const char *fmt;
        long long got, want;
    } checks[] = {
        {k != want->codebooks, "; num_codebooks %lld, the model has %lld (in_channels - 1)", k, want->codebooks},
        {vocab != want->audio_vocab, "; audio_vocab_size %lld, the model's is %lld (num_classes)", vocab,
         want->audio_vocab},
        {text != want->text_vocab, "; text_vocab_size %lld, the model's is %lld (text_vocab_size)", text,
         want->text_vocab},
        {*empty >= vocab || *empty >= text, "; empty_id %lld is outside the audio vocabulary of %lld or the text's",
         *empty, vocab},
    };
    for (size_t i = 0; i < sizeof checks / sizeof *checks && at < sizeof lines; i++)
        if (checks[i].differs) at += (size_t)snprintf(lines + at, sizeof lines - at, checks[i].fmt, checks[i].got,
                                                      checks[i].want);
    return at ? st_fail(ST_ERR_INVALID, "data_cache_dir %s: cache.json: %s", dir, lines + 2) : ST_OK;
}

/* The dataset of a checked header: one class named after the folder, the model's rows and codebooks */
static st_status new_tokens(const char *dir, const cache_want *want, int64_t empty, dataset **out)
{
    dataset *ds = *out = calloc(1, sizeof *ds);
    if (!ds) return data_oom();
    *ds = (dataset){.kind = KIND_CACHE, .resolution = 1, .classes = 1, .channels = want->codebooks + 1,
                    .frames = want->rows, .tokens = true, .codebooks = want->codebooks,
                    .audio_vocab = want->audio_vocab, .text_vocab = want->text_vocab, .empty_id = empty};
    ds->class_names = calloc(1, sizeof(char *));
    const char *slash = strrchr(dir, '/');
    if (ds->class_names) ds->class_names[0] = strdup(slash && slash[1] ? slash + 1 : dir);
    return ds->class_names && ds->class_names[0] ? ST_OK : data_oom();
}

/* Every sample cache.json lists, loaded and checked, as the dataset's items (the tags their captions) */
static st_status add_samples(dataset *ds, const char *dir, const cJSON *root)
{
    int64_t count = 0;
    const cJSON *samples = cJSON_GetObjectItemCaseSensitive(root, "samples");
    const char *family = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "family")); /* checked */
    st_status st = cache_index_int(dir, root, "count", 0, &count);
    if (!st && (!cJSON_IsArray(samples) || cJSON_GetArraySize(samples) != count || !count))
        st = st_fail(ST_ERR_FORMAT, "data_cache_dir %s: cache.json: samples must be a list of the %lld files count "
                     "says, and the cache not empty", dir, (long long)count);
    scan sc = {0};
    for (const cJSON *s = st ? NULL : samples->child; s && !st; s = s->next) {
        if (!cJSON_IsString(s) || !s->valuestring[0] || s->valuestring[0] == '/') {
            st = st_fail(ST_ERR_FORMAT, "data_cache_dir %s: cache.json: samples lists %s; each entry is a file name "
                         "relative to the cache folder", dir, cJSON_IsString(s) ? "an empty or absolute path"
                                                                                : "a non-string");
            break;
        }
        char *path = data_join_path(dir, s->valuestring), *caption = NULL;
        token_sample ts = {0};
        st = path ? load_sample(ds, dir, s->valuestring, path, family, &ts, &caption) : data_oom();
        sample_free(&ts);
        if (!st) st = data_add_item(&sc, path, caption, 0), path = NULL; /* the tags as its caption */
        free(path);
    }
    ds->items = sc.items;
    ds->count = ds->nitems = sc.n;
    return st;
}

st_status token_cache_open(const char *dir, const cJSON *root, const cache_want *want, dataset **out)
{
    *out = NULL;
    if (!want->codebooks)
        return st_fail(ST_ERR_INVALID, "data_cache_dir %s: a token cache (a token model's audio codec tokens, "
                       "make_cache.py --family heartmula), but model_family %s reads latents and text embeddings (a "
                       "cache of format segtrain-cache)", dir, want->family);
    int64_t empty = 0;
    dataset *ds = NULL;
    st_status st = check_header(dir, root, want, &empty);
    if (!st) st = new_tokens(dir, want, empty, &ds);
    if (!st) st = add_samples(ds, dir, root);
    if (st) {
        dataset_close(ds);
        return st;
    }
    *out = ds;
    return ST_OK;
}
