/* Caches of VAE latents and text-encoder embeddings (docs/CACHE.md), as scripts/make_cache.py writes them: a
 * folder with cache.json and one safetensors file per sample, read into a dataset of kind KIND_CACHE. Everything is
 * checked against what the model reads when the cache is opened, so that a bad file stops the run before its first
 * step with one line naming it; a sample is read again (and its tensors converted to float) when it is drawn. */
#include "data_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/safetensors.h"

#define CACHE_FORMAT "segtrain-cache"
#define CACHE_VERSION 2 /* 1: one latent shape; 2: a shape per sample (make_cache.py --buckets) */
#define CACHE_INDEX_MAX (256 << 20) /* cache.json lists every sample: 256 MiB is millions of names */
#define CACHE_NULL "null.safetensors"
#define TOKEN_FORMAT "segtrain-token-cache"

static st_status bad(const char *dir, st_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static st_status bad(const char *dir, st_status code, const char *fmt, ...)
{
    char msg[2048]; /* check_index's mismatches, all of them */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return st_fail(code, "data_cache_dir %s: %s", dir, msg);
}

/* cache.json's integer `key` (>= lo), or an error naming it. */
static st_status index_int(const char *dir, const cJSON *root, const char *key, int64_t lo, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble || v->valuedouble < (double)lo ||
        v->valuedouble > 1e15)
        return bad(dir, ST_ERR_FORMAT, "cache.json: %s must be an integer >= %lld", key, (long long)lo);
    *out = (int64_t)v->valuedouble;
    return ST_OK;
}

st_status cache_index_int(const char *dir, const cJSON *root, const char *key, int64_t lo, int64_t *out)
{
    return index_int(dir, root, key, lo, out);
}

/* A float tensor (F32, BF16 or F16) of `ndim` dimensions, or NULL (*st set when it is there but wrong). */
static const sft_tensor *float_tensor(const char *dir, const char *file, const sft_file *f, const char *name, int ndim,
                                      st_status *st)
{
    const sft_tensor *t = sft_find(f, name);
    if (!t) return NULL;
    if (t->dtype == SFT_I64 || t->ndim != ndim)
        *st = bad(dir, ST_ERR_FORMAT, "%s: %s is %s of %d dimensions; the format has %d of F32 or BF16", file, name,
                  sft_dtype_name(t->dtype), t->ndim, ndim);
    return *st ? NULL : t;
}

/* attention_mask (rows) as floats into m, zero to text_len: SimpleTuner's are I64, ours F32 (checked 1 or 0 when
 * the cache was opened). */
static st_status read_mask(const sft_file *f, int64_t rows, float *m, int64_t text_len)
{
    st_status st;
    if (sft_find(f, "attention_mask")->dtype == SFT_I64) {
        int64_t *mi = malloc(sizeof(int64_t) * (size_t)rows);
        if (!mi) return data_oom();
        st = sft_read_i64(f, "attention_mask", 1, &rows, mi);
        for (int64_t i = 0; !st && i < rows; i++) m[i] = (float)mi[i];
        free(mi);
    } else st = sft_read_f32(f, "attention_mask", 1, &rows, m);
    for (int64_t i = rows; i < text_len; i++) m[i] = 0.0f;
    return st;
}

/* "4 x 8 x 8" */
static void dims_text(char *out, size_t n, const int64_t *d, int nd)
{
    size_t k = 0;
    for (int i = 0; i < nd && k < n; i++) k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? " x " : "", (long long)d[i]);
}

/* A sample as cache.json lists it: its file, its latents' frames (0: no frame axis), height and width, and (version
 * 2) its bucket's key. */
typedef struct entry {
    const char *file, *key;
    int64_t f, h, w;
} entry;

/* A sample's latent shape, (C, F, H, W) or (C, H, W) where it has no frame axis (f 0): its number of dimensions. */
static int latent_dims(const dataset *ds, int64_t f, int64_t h, int64_t w, int64_t *d)
{
    const int64_t video[4] = {ds->channels, f, h, w}, image[3] = {ds->channels, h, w};
    memcpy(d, f ? video : image, sizeof(int64_t) * (f ? 4 : 3));
    return f ? 4 : 3;
}

/* Checks one sample file (its latents, of e's height and width, only when e is not NULL: null.safetensors has none)
 * against the cache and the model, and reads its caption from the metadata into *caption (a copy). */
static st_status check_sample(const dataset *ds, const char *dir, const char *file, const cache_want *cw,
                              const entry *e, char **caption)
{
    const bool with_latents = e != NULL;
    char *path = data_join_path(dir, file);
    if (!path) return data_oom();
    sft_file *f = NULL;
    st_status st = sft_open(path, &f);
    free(path);
    if (st) return bad(dir, st, "sample %s is unreadable or corrupt: %s", file, st_error());
    const char *meta_family = sft_metadata(f, "family"), *meta_caption = sft_metadata(f, "caption");
    const int64_t L = ds->text_len, D = ds->text_dim, P = ds->pooled_dim;
    const sft_tensor *lat = NULL, *seq = NULL, *pooled = NULL, *mask = NULL;
    const char *family = cw->family;
    if (meta_family && strcmp(meta_family, family))
        st = bad(dir, ST_ERR_INVALID, "%s: written for family %s, cache.json says %s", file, meta_family, family);
    int64_t want[4];
    const int nd = e ? latent_dims(ds, e->f, e->h, e->w, want) : 3;
    if (with_latents && !st && !(lat = float_tensor(dir, file, f, "latents", nd, &st)) && !st)
        st = bad(dir, ST_ERR_FORMAT, "%s: no latents tensor", file);
    bool same = true;
    for (int i = 0; lat && i < nd; i++) same = same && lat->shape[i] == want[i];
    if (lat && !same) {
        char got_s[96], want_s[96];
        dims_text(got_s, sizeof got_s, lat->shape, nd);
        dims_text(want_s, sizeof want_s, want, nd);
        st = bad(dir, ST_ERR_INVALID, "%s: latents are %s, %s %s", file, got_s,
                 ds->resolution ? "the model takes" : "cache.json lists", want_s); /* version 2: its own shape */
    }
    if (!st && !(seq = float_tensor(dir, file, f, "prompt_embeds", 2, &st)) && !st)
        st = bad(dir, ST_ERR_FORMAT, "%s: no prompt_embeds tensor", file);
    if (!st && seq->shape[1] != D)
        st = bad(dir, ST_ERR_INVALID, "%s: prompt_embeds is %lld wide, the model's joint_attention_dim is %lld%s%s%s", file,
                 (long long)seq->shape[1], (long long)D,
                 cw->text_width ? " (" : "", cw->text_width ? cw->text_width : "", cw->text_width ? ")" : "");
    if (!st && (seq->shape[0] < 1 || seq->shape[0] > L))
        st = bad(dir, ST_ERR_INVALID, "%s: prompt_embeds has %lld tokens, the model reads 1 to %lld "
                 "(tokenizer_max_length; shorter ones are zero-padded)", file, (long long)seq->shape[0], (long long)L);
    if (!st && P && !(pooled = float_tensor(dir, file, f, "pooled_prompt_embeds", 1, &st)) && !st)
        st = bad(dir, ST_ERR_FORMAT, "%s: no pooled_prompt_embeds tensor (the family reads a pooled vector)", file);
    if (!st && P && pooled->shape[0] != P)
        st = bad(dir, ST_ERR_INVALID, "%s: pooled_prompt_embeds is %lld wide, the model's pooled_projection_dim is %lld",
                 file, (long long)pooled->shape[0], (long long)P);
    if (!st && !(mask = sft_find(f, "attention_mask")))
        st = bad(dir, ST_ERR_FORMAT, "%s: no attention_mask tensor", file);
    if (!st && (mask->ndim != 1 || mask->shape[0] != seq->shape[0]))
        st = bad(dir, ST_ERR_FORMAT, "%s: attention_mask must be (%lld), one 1 or 0 per prompt_embeds token", file,
                 (long long)seq->shape[0]);
    if (!st) { /* 1 or 0 in any dtype: SimpleTuner's masks are I64 */
        const int64_t n = mask->shape[0];
        float *m = malloc(sizeof(float) * (size_t)n);
        int64_t *mi = malloc(sizeof(int64_t) * (size_t)n);
        if (!m || !mi) st = data_oom();
        else if (mask->dtype == SFT_I64) {
            st = sft_read_i64(f, "attention_mask", 1, &n, mi);
            for (int64_t i = 0; !st && i < n; i++) m[i] = (float)mi[i];
        } else st = sft_read_f32(f, "attention_mask", 1, &n, m);
        for (int64_t i = 0; !st && i < n; i++)
            if (m[i] != 0.0f && m[i] != 1.0f)
                st = bad(dir, ST_ERR_FORMAT, "%s: attention_mask[%lld] is %g; it holds 1 or 0", file, (long long)i,
                         (double)m[i]);
        free(m);
        free(mi);
    }
    if (!st && with_latents && ds->size_ids && !float_tensor(dir, file, f, "add_time_ids", 1, &st) && !st)
        st = bad(dir, ST_ERR_FORMAT, "%s: no add_time_ids tensor (the family reads SDXL's six size ids)", file);
    if (!st && with_latents && ds->size_ids && sft_find(f, "add_time_ids")->shape[0] != ds->size_ids)
        st = bad(dir, ST_ERR_FORMAT, "%s: add_time_ids holds %lld values; SDXL's are %lld (original height and width, "
                 "crop top and left, target height and width)", file, (long long)sft_find(f, "add_time_ids")->shape[0],
                 (long long)ds->size_ids);
    if (!st && !(*caption = strdup(meta_caption ? meta_caption : ""))) st = data_oom();
    sft_close(f);
    return st;
}

/* The sample file `path`'s latents (into x when not NULL) and its conditioning (into text when not NULL): the
 * sequence zero-padded to text_len rows, then the pooled vector, then where the model reads it the mask, 0 on the
 * padded rows, then with ids the size ids (model.h's layout). */
st_status cache_read(const dataset *ds, const char *path, int64_t frames, int64_t h, int64_t w, float *x, float *text,
                     bool ids)
{
    if (ds->tokens) return token_read(ds, path, x, text);
    sft_file *f;
    st_status st = sft_open(path, &f);
    if (st) return st; /* the file changed since the cache was opened */
    int64_t lat[4];
    const int nd = latent_dims(ds, frames, h, w, lat);
    const int64_t D = ds->text_dim;
    if (x) st = sft_read_f32(f, "latents", nd, lat, x);
    if (!st && text) {
        const sft_tensor *seq = sft_find(f, "prompt_embeds");
        const int64_t rows = seq && seq->ndim == 2 ? seq->shape[0] : 0, shape[2] = {rows, D};
        if (rows < 1 || rows > ds->text_len)
            st = st_fail(ST_ERR_FORMAT, "%s: prompt_embeds changed since the cache was opened", path);
        if (!st) st = sft_read_f32(f, "prompt_embeds", 2, shape, text);
        if (!st) memset(text + rows * D, 0, sizeof(float) * (size_t)((ds->text_len - rows) * D));
        if (!st && ds->pooled_dim)
            st = sft_read_f32(f, "pooled_prompt_embeds", 1, &ds->pooled_dim, text + ds->text_len * D);
        if (!st && ds->mask) st = read_mask(f, rows, text + ds->text_len * D + ds->pooled_dim, ds->text_len);
        if (!st && ids && ds->size_ids)
            st = sft_read_f32(f, "add_time_ids", 1, &ds->size_ids, text + dataset_text_floats(ds));
    }
    sft_close(f);
    return st;
}

/* The ways a cache.json disagrees with the model, gathered so that one run names them all (a cache made for another
 * model usually differs in several), one line each, as the config reports its errors. */
typedef struct mismatches {
    char text[1536];
    int n;
    bool shape; /* version 2: a sample's latent shape is among them (the first that differs stands for all) */
} mismatches;

static void mismatch(mismatches *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mismatch(mismatches *m, const char *fmt, ...)
{
    const size_t used = strlen(m->text);
    if (used + 4 < sizeof m->text) {
        snprintf(m->text + used, sizeof m->text - used, "\n  ");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->text + used + 3, sizeof m->text - used - 3, fmt, ap);
        va_end(ap);
    }
    m->n++;
}

/* latent_shape's nd positive integers into dims, or an error naming where it is. */
static st_status read_shape(const char *dir, const char *where, const cJSON *shape, int nd, int64_t *dims)
{
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != nd)
        return bad(dir, ST_ERR_FORMAT, "%s: latent_shape must be %s, as the model takes %s", where,
                   nd == 4 ? "[channels, frames, height, width]" : "[channels, height, width]",
                   nd == 4 ? "video (num_frames above 1)" : "images");
    for (int i = 0; i < nd; i++) {
        const cJSON *v = cJSON_GetArrayItem(shape, i);
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e9 ||
            v->valuedouble != (double)(int64_t)v->valuedouble)
            return bad(dir, ST_ERR_FORMAT, "%s: latent_shape must be %d positive integers", where, nd);
        dims[i] = (int64_t)v->valuedouble;
    }
    return ST_OK;
}

/* cache.json's header fields, checked against `want`: a malformed field stops at once, a value the model does not
 * take is gathered in m with the others. Version 1's latent_shape is the model's one shape. */
static st_status check_header(const char *dir, const cJSON *root, const cache_want *want, int64_t *version,
                              mismatches *m)
{
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *family = cJSON_GetObjectItemCaseSensitive(root, "family");
    int64_t text_len = 0, text_dim = 0, pooled = 0, dims[4] = {0};
    if (!cJSON_IsString(format) || strcmp(format->valuestring, CACHE_FORMAT))
        return bad(dir, ST_ERR_FORMAT, "cache.json: format must be \"%s\" (docs/CACHE.md)", CACHE_FORMAT);
    st_status st = index_int(dir, root, "version", 0, version);
    if (!st && (*version < 1 || *version > CACHE_VERSION))
        st = bad(dir, ST_ERR_UNSUPPORTED, "cache.json: version %lld; this segtrain reads versions 1 to %d",
                 (long long)*version, CACHE_VERSION);
    if (!st && !cJSON_IsString(family)) st = bad(dir, ST_ERR_FORMAT, "cache.json: family must be a string");
    if (!st && strcmp(family->valuestring, want->family))
        mismatch(m, "written for model_family %s; the model is %s", family->valuestring, want->family);
    const int nd = want->frames > 1 ? 4 : 3;
    const int64_t wanted[4] = {want->channels, nd == 4 ? want->frames : want->edge, want->edge, want->edge};
    if (!st && *version == 1)
        st = read_shape(dir, "cache.json", cJSON_GetObjectItemCaseSensitive(root, "latent_shape"), nd, dims);
    bool same = true;
    for (int i = 0; i < nd; i++) same = same && dims[i] == wanted[i];
    if (!st && *version == 1 && !same) {
        char got_s[96], want_s[96];
        dims_text(got_s, sizeof got_s, dims, nd);
        dims_text(want_s, sizeof want_s, wanted, nd);
        mismatch(m, "latents are %s, the model takes %s (in_channels,%s and resolution / vae_scale_factor as the "
                 "edge)", got_s, want_s, nd == 4 ? " the latent frames of num_frames," : "");
    }
    if (!st) st = index_int(dir, root, "text_len", 1, &text_len);
    if (!st) st = index_int(dir, root, "text_dim", 1, &text_dim);
    if (!st) st = index_int(dir, root, "pooled_dim", 0, &pooled);
    if (!st && text_dim != want->text_dim)
        mismatch(m, "text_dim %lld, the model's joint_attention_dim is %lld", (long long)text_dim,
                 (long long)want->text_dim);
    if (!st && pooled != want->pooled_dim)
        mismatch(m, "pooled_dim %lld, the model's pooled_projection_dim is %lld", (long long)pooled,
                 (long long)want->pooled_dim);
    if (!st && text_len > want->text_len)
        mismatch(m, "text_len %lld is longer than the model's %lld tokens (tokenizer_max_length)",
                 (long long)text_len, (long long)want->text_len);
    return st;
}

/* One of cache.json's samples: version 1 names its file, its latents the model's frames and edge; version 2 lists
 * {"file", "latent_shape", "bucket"}, the shape of the model's channels (the first sample that differs is gathered
 * in m) and of any height and width, and for a video family of any frames ([C, F, H, W]; [C, H, W] is one frame
 * with no frame axis). */
static st_status read_entry(const char *dir, const cJSON *s, const cache_want *want, int64_t version, mismatches *m,
                            entry *e)
{
    const cJSON *file = version == 1 ? s : cJSON_GetObjectItemCaseSensitive(s, "file");
    if (version > 1 && !cJSON_IsObject(s))
        return bad(dir, ST_ERR_FORMAT, "cache.json: samples lists a non-object; a version 2 cache lists {\"file\": "
                   "..., \"latent_shape\": [...]} per sample");
    if (!cJSON_IsString(file) || !file->valuestring[0] || file->valuestring[0] == '/')
        return bad(dir, ST_ERR_FORMAT, "cache.json: samples lists %s; each %s a file name relative to the cache "
                   "folder", cJSON_IsString(file) ? "an empty or absolute path" : "a non-string",
                   version == 1 ? "entry is" : "entry's \"file\" is");
    *e = (entry){file->valuestring, NULL, want->frames > 1 ? want->frames : 0, want->edge, want->edge};
    if (version == 1) return ST_OK;
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(s, "bucket");
    e->key = cJSON_IsString(key) ? key->valuestring : NULL;
    char where[320], shape_s[96];
    snprintf(where, sizeof where, "cache.json: sample %.256s", e->file);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(s, "latent_shape");
    const int nd = want->video && cJSON_GetArraySize(shape) != 3 ? 4 : 3; /* a video family's clips have frames */
    int64_t d[4];
    st_status st = read_shape(dir, where, shape, nd, d);
    if (st) return st;
    e->f = nd == 4 ? d[1] : 0, e->h = d[nd - 2], e->w = d[nd - 1];
    dims_text(shape_s, sizeof shape_s, d, nd);
    if (d[0] != want->channels && !m->shape) {
        m->shape = true;
        mismatch(m, "latents are %s (%s), the model takes %lld channels (in_channels)", shape_s, e->file,
                 (long long)want->channels);
    }
    return ST_OK;
}

/* cache.json checked against `want` (check_header), then its samples into *entries (count of them, not empty). */
static st_status check_index(const char *dir, const cJSON *root, const cache_want *want, int64_t *version,
                             entry **entries, int *n)
{
    mismatches m = {{0}, 0, false};
    int64_t count = 0;
    st_status st = check_header(dir, root, want, version, &m);
    const cJSON *samples = cJSON_GetObjectItemCaseSensitive(root, "samples");
    if (!st) st = index_int(dir, root, "count", 0, &count);
    if (!st && !cJSON_IsArray(samples))
        st = bad(dir, ST_ERR_FORMAT, "cache.json: samples must be a list of %s",
                 *version == 1 ? "files" : "{\"file\", \"latent_shape\"} objects");
    if (!st && cJSON_GetArraySize(samples) != count)
        st = bad(dir, ST_ERR_FORMAT, "cache.json: count is %lld but samples lists %d", (long long)count,
                 cJSON_GetArraySize(samples));
    entry *e = st || !count ? NULL : calloc((size_t)count, sizeof *e);
    if (!st && count && !e) st = data_oom();
    int k = 0;
    for (const cJSON *s = e ? samples->child : NULL; s && !st; s = s->next)
        st = read_entry(dir, s, want, *version, &m, &e[k++]);
    if (!st && m.n == 1) st = bad(dir, ST_ERR_INVALID, "%s", m.text + 3);
    if (!st && m.n) st = bad(dir, ST_ERR_INVALID, "%d mismatches with the model:%s", m.n, m.text);
    if (!st && !count) st = bad(dir, ST_ERR_INVALID, "the cache is empty (cache.json lists no sample)");
    if (st) free(e);
    *entries = st ? NULL : e;
    *n = st ? 0 : k;
    return st;
}

/* Version 2: the samples grouped by latent shape (frames, height, width) into buckets, in the order of their first
 * sample, as one backend of no repeats that prunes nothing (make_cache.py left out what its bucket list did). */
static st_status group_buckets(dataset *ds, const entry *e, int n)
{
    ds->places = calloc((size_t)n, sizeof *ds->places);
    ds->buckets = calloc((size_t)n, sizeof *ds->buckets);
    ds->backends = calloc(1, sizeof *ds->backends);
    if (!ds->places || !ds->buckets || !ds->backends) return data_oom();
    ds->backends[0] = (backend){.first = 0, .count = n};
    for (int i = 0; i < n; i++) {
        int b = 0;
        const data_bucket *k = ds->buckets;
        while (b < ds->nbuckets && (k[b].height != e[i].h || k[b].width != e[i].w || k[b].frames != e[i].f)) b++;
        if (b == ds->nbuckets) {
            data_bucket *add = &ds->buckets[ds->nbuckets++];
            *add = (data_bucket){.width = (int)e[i].w, .height = (int)e[i].h, .frames = (int)e[i].f};
            if (e[i].key) snprintf(add->name, sizeof add->name, "%s", e[i].key);
            else if (e[i].f) snprintf(add->name, sizeof add->name, "%dx%d@%d", add->width, add->height, add->frames);
            else snprintf(add->name, sizeof add->name, "%dx%d", add->width, add->height);
        }
        ds->buckets[b].images++;
        ds->places[i] = (place){.bucket = b};
    }
    return data_list_bucket_samples(ds);
}

/* The dataset of a checked cache.json: its model-side sizes from want, one class named after the folder. */
static st_status new_cache(const char *dir, const cache_want *want, int64_t version, dataset **out)
{
    dataset *ds = *out = calloc(1, sizeof *ds);
    if (!ds) return data_oom();
    ds->kind = KIND_CACHE;
    ds->resolution = version == 1 ? (int)want->edge : 0;
    ds->channels = want->channels;
    ds->frames = want->frames > 1 ? want->frames : 1;
    ds->text_len = want->text_len;
    ds->text_dim = want->text_dim;
    ds->pooled_dim = want->pooled_dim;
    ds->mask = want->mask;
    ds->size_ids = want->size_ids;
    ds->classes = 1;
    ds->class_names = calloc(1, sizeof(char *));
    const char *slash = strrchr(dir, '/');
    if (ds->class_names) ds->class_names[0] = strdup(slash && slash[1] ? slash + 1 : dir);
    return ds->class_names && ds->class_names[0] ? ST_OK : data_oom();
}

/* The empty prompt's conditioning, for caption dropout, when the cache has it. */
static st_status read_null(dataset *ds, const char *dir, const cache_want *want)
{
    char *null_path = data_join_path(dir, CACHE_NULL), *null_caption = NULL;
    if (!null_path) return data_oom();
    FILE *probe = fopen(null_path, "rb");
    st_status st = ST_OK;
    if (probe) {
        fclose(probe);
        st = check_sample(ds, dir, CACHE_NULL, want, NULL, &null_caption);
        if (!st && !(ds->null_text = malloc(sizeof(float) * (size_t)dataset_text_floats(ds)))) st = data_oom();
        if (!st) st = cache_read(ds, null_path, 0, 0, 0, NULL, ds->null_text, false); /* the ids stay each sample's */
    }
    free(null_caption);
    free(null_path);
    return st;
}

st_status dataset_open_cache(const char *dir, const cache_want *want, dataset **out)
{
    *out = NULL;
    char *index = data_join_path(dir, "cache.json");
    size_t n = 0;
    char *text = NULL;
    const st_status read = index ? data_read_small(index, CACHE_INDEX_MAX, false, &text, &n) : ST_OK;
    const int err = errno;
    free(index);
    if (!text && (!index || err == ENOMEM)) return data_oom();
    if (!text && err != ENOENT) return bad(dir, read, "%s", st_error());
    if (!text)
        return bad(dir, ST_ERR_IO, "no cache.json there (%s): a cache is made by scripts/make_cache.py (docs/CACHE.md)",
                   strerror(err));
    cJSON *root = n < CACHE_INDEX_MAX ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
    free(text);
    if (!root) return bad(dir, ST_ERR_FORMAT, "cache.json is not valid JSON (or over %d MiB)", CACHE_INDEX_MAX >> 20);
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (cJSON_IsString(format) && !strcmp(format->valuestring, TOKEN_FORMAT)) { /* a token model's (token_cache.c) */
        const st_status st = token_cache_open(dir, root, want, out);
        cJSON_Delete(root);
        return st;
    }
    entry *entries = NULL;
    int count = 0;
    int64_t version = 0;
    st_status st = !cJSON_IsObject(root) ? bad(dir, ST_ERR_FORMAT, "cache.json must be a JSON object")
                   : want->codebooks     ? bad(dir, ST_ERR_FORMAT, "cache.json: format must be \"%s\": model_family %s "
                                               "trains on a token cache (make_cache.py --family %s, docs/CACHE.md)",
                                               TOKEN_FORMAT, want->family, want->family)
                                         : check_index(dir, root, want, &version, &entries, &count);
    dataset *ds = NULL;
    if (!st) st = new_cache(dir, want, version, &ds);
    scan sc = {0};
    for (int k = 0; k < count && !st; k++) {
        char *caption = NULL;
        st = check_sample(ds, dir, entries[k].file, want, &entries[k], &caption);
        if (!st) st = data_add_item(&sc, data_join_path(dir, entries[k].file), caption, 0);
    }
    if (ds) {
        ds->items = sc.items;
        ds->count = ds->nitems = sc.n;
    }
    if (!st && version > 1) st = group_buckets(ds, entries, count);
    if (!st) st = read_null(ds, dir, want);
    free(entries);
    cJSON_Delete(root);
    if (st) {
        dataset_close(ds);
        return st;
    }
    *out = ds;
    return ST_OK;
}

int64_t dataset_text_floats(const dataset *ds)
{
    if (ds->tokens) return ds->frames * (ds->channels + 1); /* the tokens' mask (S, K + 1), the frame mask (S) */
    return ds->kind == KIND_CACHE ? ds->text_len * (ds->text_dim + ds->mask) + ds->pooled_dim : 0;
}

const float *dataset_null_text(const dataset *ds) { return ds->null_text; }
