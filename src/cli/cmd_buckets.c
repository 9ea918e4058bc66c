/* `segtrain buckets`: where SimpleTuner's aspect buckets put every image of the configured data_backend_config, by
 * segtrain's one bucket assignment (bucket_assign through dataset_open_backend_buckets), for people and, as JSON,
 * for scripts/make_cache.py --buckets, which caches each image at its bucket's size. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "segtrain/data.h"
#include "segtrain/train.h"

static const char buckets_help[] =
    "usage: segtrain buckets --config C [--json] [--set key=value ...]\n"
    "\n"
    "Sorts the images of the config's data_backend_config (a SimpleTuner multidatabackend.json of local image\n"
    "backends) into SimpleTuner's aspect buckets, as `segtrain train` would, and prints them: each backend's\n"
    "buckets (SimpleTuner's name, the trained width x height in pixels, images, samples an epoch with repeats),\n"
    "then every image: its size, the size it is resized to, the top left of its bucket's window in that (crop_style\n"
    "random: as drawn from `seed`) and its bucket. The run's resolution, resolution_type, aspect_bucket_alignment\n"
    "and aspect_bucket_rounding apply under each backend's own keys (docs/DATA.md, \"Aspect buckets\"). Images are\n"
    "read to check them and to learn their sizes; no model is built. A video backend's clips (each a folder of PNG\n"
    "frames) go in buckets of width x height and frames, printed WxH@F, each clip with its own frames.\n"
    "\n"
    "  --json   one JSON object, {\"buckets\": [...], \"images\": [...]}, with the same for scripts: what\n"
    "           scripts/make_cache.py --buckets reads to cache each image at its bucket's size (docs/CACHE.md)\n"
    "\n"
    "examples:\n"
    "  segtrain buckets --config config.json\n"
    "  segtrain buckets --config config.json --set aspect_bucket_alignment=32\n"
    "  segtrain buckets --config config.json --json > buckets.json\n"
    "  python scripts/make_cache.py --buckets buckets.json --images DIR --pipeline P --out CACHE\n";

static void print_text(const dataset *ds)
{
    bool clips = false; /* a video backend's samples: size is WxH@F, the clip's own frames */
    for (int b = 0; b < dataset_buckets(ds); b++) clips |= dataset_bucket(ds, b)->frames > 0;
    printf("%-3s %-16s %-8s %-11s %7s %8s\n", "#", "backend", "bucket", "size", "images", "samples");
    for (int b = 0; b < dataset_buckets(ds); b++) {
        const data_bucket *k = dataset_bucket(ds, b);
        char size[48];
        const bucket_shape shape = {k->width, k->height, k->frames};
        bucket_shape_name(&shape, size, sizeof size);
        printf("%-3d %-16s %-8s %-11s %7lld %8lld\n", b, dataset_class_name(ds, k->label), k->name, size,
               (long long)k->images, (long long)k->count);
    }
    printf("\n%-11s %-11s %-12s %s\n", "size", "resized to", "crop at", "bucket  image");
    for (int64_t i = 0; i < dataset_images(ds); i++) {
        data_placement p;
        if (dataset_placement(ds, i, &p)) continue;
        char size[48], resized[32], crop[32];
        const bucket_shape own = {p.width, p.height, p.frames};
        bucket_shape_name(&own, size, sizeof size);
        snprintf(resized, sizeof resized, "%dx%d", p.resize_w, p.resize_h);
        snprintf(crop, sizeof crop, "(%d, %d)", p.crop_top, p.crop_left);
        printf("%-11s %-11s %-12s %-7d %s\n", size, resized, crop, p.bucket, p.path);
    }
    printf("\n%lld %s in %d buckets; crop at (top, left) of the resized %s\n", (long long)dataset_images(ds),
           clips ? "images or clips" : "images", dataset_buckets(ds), clips ? "image or frames" : "image");
}

static cJSON *pair(int a, int b)
{
    cJSON *p = cJSON_CreateArray();
    cJSON_AddItemToArray(p, cJSON_CreateNumber(a));
    cJSON_AddItemToArray(p, cJSON_CreateNumber(b));
    return p;
}

/* Sizes as [width, height], crops as [top, left], in pixels: what make_cache.py reads. */
static st_status print_json(const dataset *ds, const char *backends, const bucket_config *run, uint64_t seed)
{
    static const char *const types[] = {"pixel", "area", "pixel_area"};
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "data_backend_config", backends);
    cJSON_AddNumberToObject(root, "resolution", run->resolution);
    cJSON_AddStringToObject(root, "resolution_type", types[run->resolution_type]);
    cJSON_AddNumberToObject(root, "aspect_bucket_alignment", run->alignment);
    cJSON_AddNumberToObject(root, "aspect_bucket_rounding", run->rounding);
    cJSON_AddNumberToObject(root, "seed", (double)seed);
    cJSON *buckets = cJSON_AddArrayToObject(root, "buckets");
    for (int b = 0; b < dataset_buckets(ds); b++) {
        const data_bucket *k = dataset_bucket(ds, b);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToArray(buckets, j);
        cJSON_AddStringToObject(j, "backend", dataset_class_name(ds, k->label));
        cJSON_AddStringToObject(j, "name", k->name);
        cJSON_AddItemToObject(j, "size", pair(k->width, k->height));
        if (k->frames) cJSON_AddNumberToObject(j, "frames", k->frames);
        cJSON_AddNumberToObject(j, "images", (double)k->images);
        cJSON_AddNumberToObject(j, "samples", (double)k->count);
    }
    cJSON *images = cJSON_AddArrayToObject(root, "images");
    for (int64_t i = 0; i < dataset_images(ds); i++) {
        data_placement p;
        st_status st = dataset_placement(ds, i, &p);
        if (st) return cJSON_Delete(root), st;
        const data_bucket *k = dataset_bucket(ds, p.bucket);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToArray(images, j);
        cJSON_AddStringToObject(j, "path", p.path);
        cJSON_AddStringToObject(j, "backend", dataset_class_name(ds, p.label));
        cJSON_AddNumberToObject(j, "bucket", p.bucket);
        cJSON_AddStringToObject(j, "name", k->name);
        cJSON_AddItemToObject(j, "image_size", pair(p.width, p.height));
        cJSON_AddItemToObject(j, "resize", pair(p.resize_w, p.resize_h));
        cJSON_AddItemToObject(j, "crop", pair(p.crop_top, p.crop_left));
        cJSON_AddItemToObject(j, "size", pair(k->width, k->height));
        if (p.frames) cJSON_AddNumberToObject(j, "clip_frames", p.frames), cJSON_AddNumberToObject(j, "frames", k->frames);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return st_host_oom("the JSON");
    puts(text);
    cJSON_free(text);
    return ST_OK;
}

int cmd_buckets(int argc, char **argv)
{
    const char *config_path = NULL;
    bool json = false;
    const cli_flag flags[] = {{"--config", .text = &config_path}, {"--json", .on = &json}, {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(buckets_help, stdout), 0) : rc;
    config *cfg;
    model_config mc;
    bucket_config run;
    dataset *ds = NULL;
    st_status st = cli_load_config(config_path, &a, &cfg);
    const char *backends = st ? "" : config_string(cfg, "data_backend_config");
    if (!st && !*backends)
        st = st_fail(ST_ERR_INVALID, "data_backend_config is empty: buckets are made of the images of a SimpleTuner "
                     "multidatabackend.json (--set data_backend_config=FILE)");
    if (!st) st = model_config_from(cfg, &mc);
    if (!st) st = train_bucket_settings(cfg, &mc, &run);
    const uint64_t seed = st ? 0 : (uint64_t)config_int(cfg, "seed");
    if (!st) st = dataset_open_backend_buckets(backends, &run, seed, &ds);
    if (!st && json) st = print_json(ds, backends, &run, seed);
    else if (!st) print_text(ds);
    dataset_close(ds);
    config_free(cfg);
    return st ? cli_error("buckets") : 0;
}
