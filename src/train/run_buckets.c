/* A run's data in SimpleTuner's aspect buckets, and the run's shapes made of them (train.h: train_buckets_open):
 * what the trainer trains on and what plan predicts, from one reading. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/train.h"

/* Bucket bk's shape in image pixels and frames: a cache's latents times the VAE's factor, their frames the video the
 * model's VAE makes them of (a video family's sample without a frame axis is one frame); an image's, none. */
static bucket_shape data_shape(const data_bucket *bk, const model_config *mc, bool cache)
{
    const int64_t scale = cache ? mc->vae_scale : 1;
    bucket_shape s = {bk->width * scale, bk->height * scale, cache && model_video(mc) ? 1 : 0};
    model_config at = *mc;
    at.frames = bk->frames;
    if (bk->frames) s.frames = cache ? model_pixel_frames(&at) : bk->frames;
    return s;
}

/* The shapes of the buckets that train, in the data's order, each once (data_shape), and each bucket's among them
 * (tb->shape_of): bucket_shapes' text into list (n bytes). `source` names the data for messages. */
static st_status trained_shapes(train_buckets *tb, const model_config *mc, bool cache, const char *source,
                                bucket_shape *shapes, int *count, char *list, size_t n)
{
    *count = 0;
    list[0] = 0;
    for (int b = 0; b < dataset_buckets(tb->data); b++) {
        const bucket_shape s = data_shape(dataset_bucket(tb->data, b), mc, cache);
        int i = 0;
        while (i < *count && (shapes[i].width != s.width || shapes[i].height != s.height || shapes[i].frames != s.frames))
            i++;
        const bool pruned = !data_iter_bucket_batches(tb->iter, b);
        tb->shape_of[b] = pruned ? -1 : i;
        if (i < *count || pruned) continue; /* a shape met before, or none */
        if (*count == MODEL_SHAPES_MAX)
            return st_fail(ST_ERR_INVALID, "%s: more than %d bucket shapes (a run builds a model for each): raise "
                           "aspect_bucket_alignment, or give fewer aspects (crop_aspect_buckets)", source,
                           MODEL_SHAPES_MAX);
        shapes[(*count)++] = s;
        const size_t at = strlen(list);
        if (at && at + 1 < n) list[at] = ',', list[at + 1] = 0;
        bucket_shape_name(&s, list + strlen(list), n - strlen(list));
    }
    return ST_OK;
}

static bool same_shape(const bucket_shape *a, const bucket_shape *b)
{
    return a->width == b->width && a->height == b->height && a->frames == b->frames;
}

/* A bucket_shapes given beside the data must name the data's shapes: which the run trains comes from one place. */
static st_status same_shapes(const config *cfg, const char *source, const bucket_shape *data, int n, const char *list)
{
    bucket_shape given[MODEL_SHAPES_MAX];
    int k = 0;
    st_status st = model_bucket_shapes(cfg, given, &k);
    if (st || !k) return st;
    bool same = k == n;
    for (int i = 0; same && i < k; i++) {
        int j = 0;
        while (j < n && !same_shape(&data[j], &given[i])) j++;
        same = j < n;
    }
    for (int i = 0; same && i < k; i++) /* each once */
        for (int j = 0; j < i; j++) same = same && !same_shape(&given[i], &given[j]);
    if (same) return ST_OK;
    return st_fail(ST_ERR_INVALID, "bucket_shapes \"%s\", but the buckets of %s are %s: leave bucket_shapes out (the "
                   "data gives them) or list exactly those", config_string(cfg, "bucket_shapes"), source, list);
}

/* A cache of one latent shape (version 1) trains one square: several shapes or a non-square one are refused. */
static st_status one_shape(const config *cfg, const model_config *mc, const char *source)
{
    bucket_shape shapes[MODEL_SHAPES_MAX];
    int n = 0;
    st_status st = model_bucket_shapes(cfg, shapes, &n);
    if (!st && n > 1)
        st = st_fail(ST_ERR_UNSUPPORTED, "bucket_shapes: %d shapes, but %s holds latents of one square shape: cache "
                     "aspect buckets with scripts/make_cache.py --buckets, or train several shapes on synthetic_data",
                     n, source);
    if (!st && mc->height != mc->width)
        st = st_fail(ST_ERR_UNSUPPORTED, "a %lld x %lld latent, but %s holds latents of one square shape: cache aspect "
                     "buckets with scripts/make_cache.py --buckets, or train non-square shapes on synthetic_data",
                     (long long)mc->height, (long long)mc->width, source);
    return st;
}

void train_buckets_close(train_buckets *b)
{
    data_iter_destroy(b->iter); /* before the dataset it reads */
    dataset_close(b->data);
    free(b->shape_of), config_free(b->cfg);
    *b = (train_buckets){0};
}

bool train_data_bucketed(const config *cfg)
{
    return !config_bool(cfg, "synthetic_data") &&
           (config_string(cfg, "data_backend_config")[0] || config_string(cfg, "data_cache_dir")[0]);
}

/* Backends of clips are placed in buckets (segtrain buckets) to be cached: segtrain has no VAE to train on them. */
static st_status no_clips(const dataset *ds, const char *source)
{
    for (int b = 0; b < dataset_buckets(ds); b++)
        if (dataset_bucket(ds, b)->frames)
            return st_fail(ST_ERR_UNSUPPORTED, "%s: backend '%s' is a video dataset, whose clips segtrain reads only to "
                           "place them in buckets: cache them (segtrain buckets --json, then scripts/make_cache.py "
                           "--buckets) and train on data_cache_dir (docs/CACHE.md)", source,
                           dataset_class_name(ds, dataset_bucket(ds, b)->label));
    return ST_OK;
}

/* The data, as the model of cfg (mc) reads it: a cache checked against the model's latents and conditioning, or the
 * backends in their aspect buckets at the run's settings. */
static st_status open_data(const config *cfg, const model_config *mc, dataset **out)
{
    const char *cache = config_string(cfg, "data_cache_dir");
    const cache_want want = {mc->family,   mc->channels,   mc->height,          mc->frames, mc->text_len,
                             mc->text_dim, mc->pooled_dim, model_text_mask(mc), model_size_ids(mc),
                             model_text_width(mc), model_video(mc),
                             model_tokens(mc) ? mc->channels - 1 : 0, mc->classes, mc->text_vocab, mc->frames};
    bucket_config settings;
    if (cache[0]) return dataset_open_cache(cache, &want, out);
    st_status st = train_bucket_settings(cfg, mc, &settings);
    return st ? st : dataset_open_backend_buckets(config_string(cfg, "data_backend_config"), &settings,
                                                  (uint64_t)config_int(cfg, "seed"), out);
}

st_status train_buckets_open(const config *cfg, int ranks, train_buckets *out)
{
    *out = (train_buckets){0};
    if (!train_data_bucketed(cfg)) return ST_OK;
    const char *cache = config_string(cfg, "data_cache_dir");
    char source[1100];
    snprintf(source, sizeof source, "%s %.1024s", cache[0] ? "data_cache_dir" : "data_backend_config",
             cache[0] ? cache : config_string(cfg, "data_backend_config"));
    model_config mc;
    st_status st = model_config_from(cfg, &mc);
    if (!st) st = open_data(cfg, &mc, &out->data);
    if (!st && !cache[0]) st = no_clips(out->data, source);
    if (!st && !dataset_buckets(out->data)) { /* a cache of one shape: the config's */
        if ((st = one_shape(cfg, &mc, source))) train_buckets_close(out);
        return st;
    }
    if (!st)
        st = data_iter_create_buckets(out->data, (uint64_t)config_int(cfg, "seed"),
                                      config_int(cfg, "train_batch_size") * ranks,
                                      config_bool(cfg, "disable_bucket_pruning"), &out->iter);
    if (!st && (!(out->cfg = config_copy(cfg)) ||
                !(out->shape_of = malloc(sizeof *out->shape_of * (size_t)dataset_buckets(out->data)))))
        st = st_host_oom("a copy of the config and its bucket map");
    bucket_shape shapes[MODEL_SHAPES_MAX];
    int n = 0;
    char set[MODEL_SHAPES_MAX * 24 + 16] = "bucket_shapes=";
    const size_t at = strlen(set);
    if (!st) st = trained_shapes(out, &mc, cache[0] != 0, source, shapes, &n, set + at, sizeof set - at);
    if (!st) st = same_shapes(cfg, source, shapes, n, set + at);
    if (!st) st = config_set(out->cfg, set);
    if (st) train_buckets_close(out);
    return st;
}
