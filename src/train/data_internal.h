/* What data.c (images, folders, the iterator), backends.c (SimpleTuner data backends) and cache.c (latent and
 * text-embedding caches) share, internal to src/train: the dataset object and the folder-scanning helpers. The
 * helpers are described where data.c and cache.c define them. */
#ifndef SEGTRAIN_TRAIN_DATA_INTERNAL_H
#define SEGTRAIN_TRAIN_DATA_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segtrain/data.h"

enum { KIND_BUILTIN, KIND_FOLDER, KIND_CACHE };
#define CAPTION_FILE_MAX (64 << 10) /* more than any caption keeps */

typedef struct item {
    char *path, *caption; /* backends: one or more captions, one a line */
    int label;
    int w, h;   /* backends: the image's size when it was scanned (a clip's: its first frame's) */
    int frames; /* a video backend's clip: its PNG frames (the item's path is its folder); 0: an image */
} item;

/* A bucketed backend image's place (dataset_open_backend_buckets): its bucket, the size it is resized to, and the
 * top left of the bucket's window cut from that (a random crop drawn once, at open). */
typedef struct place {
    int bucket, resize_w, resize_h, top, left;
} place;

enum { CROP_CENTER, CROP_CORNER, CROP_RANDOM };

/* A backend's images are items [first, first + count); each is 1 + repeats samples an epoch. */
typedef struct backend {
    int64_t first, count, repeats;
    int crop_style;
    int edge; /* the backend's square edge when below the model's (a larger square passes through it), else 0 */
    bool prunes; /* bucketed: it has a minimum_image_size, so that its short buckets are pruned (as SimpleTuner's) */
} backend;

struct dataset {
    int kind, resolution, classes;
    int64_t count;      /* samples */
    uint64_t seed;      /* builtin scenes; backends: random crops and the choice among captions */
    char **class_names; /* folder, backends */
    item *items;        /* folder, backends */
    int64_t nitems;
    backend *backends; /* backends: one per class */
    int64_t channels;  /* of a sample's input: 3 for images, the latents' for a cache */
    int64_t frames;    /* cache: the latents' frames (1: images, (C, H, W); more: video, (C, F, H, W)) */
    int64_t text_len, text_dim, pooled_dim; /* cache: the conditioning the model reads */
    bool mask;         /* cache: the model reads the text mask after the pooled vector */
    int64_t size_ids;  /* cache: then SDXL's size ids, each sample's own (not the null prompt's) */
    float *null_text;  /* cache: null.safetensors' conditioning, NULL when the cache has none */
    /* token cache (token_cache.c): a sample's rows, codebooks, vocabularies and padding id; frames is the rows */
    bool tokens;
    int64_t codebooks, audio_vocab, text_vocab, empty_id;
    /* bucketed backends: each item's place, the buckets, and their samples (one array the buckets point into) */
    place *places;
    data_bucket *buckets;
    int nbuckets;
    int64_t *bucket_samples;
};

typedef struct scan {
    item *items;
    int64_t n, cap, skipped;
} scan;

st_status data_oom(void);
char *data_join_path(const char *a, const char *b);
st_status data_check_resolution(int resolution);
bool data_is_png(const char *name);
bool data_is_other_image(const char *name);
void data_free_names(char **names, int n);
st_status data_list_dir(const char *dir, char ***out, int *count);
bool data_is_dir(const char *path);
st_status data_read_small(const char *path, size_t max, bool pipes, char **out, size_t *n);
size_t data_fold_space(char *s, size_t n);
st_status data_add_item(scan *sc, char *path, char *caption, int label);
st_status data_check_png(scan *sc, const char *path, const char *name, bool *ok, int *w, int *h);
st_status data_list_bucket_samples(dataset *ds);
/* cache.json's integer `key` (>= lo), or an error naming it. */
st_status cache_index_int(const char *dir, const cJSON *root, const char *key, int64_t lo, int64_t *out);
/* A token cache (token_cache.c, docs/CACHE.md "Token caches"): cache.json's root checked against want into *out;
 * token_read lays a sample file out as the model reads it (x: the tokens, cond: their masks). */
st_status token_cache_open(const char *dir, const cJSON *root, const cache_want *want, dataset **out);
st_status token_read(const dataset *ds, const char *path, float *x, float *cond);
st_status cache_read(const dataset *ds, const char *path, int64_t frames, int64_t h, int64_t w, float *x, float *text,
                     bool ids);

#endif
