/* SimpleTuner data backends (docs/DATA.md): dataset_open_backends reads a multidatabackend.json and scans each
 * enabled image backend's folder into a dataset whose classes are the backends (data_internal.h);
 * dataset_open_backend_buckets then gives every image its aspect bucket (segtrain/buckets.h). */
#include "data_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/magic.h>
#include <sys/vfs.h>
#endif

#include "segtrain/rng.h"

#define BACKEND_FILE_MAX (16 << 20) /* a backend list is a few KiB; this refuses a wrong file early */
#define REPEATS_MAX 1000000
#define SAMPLES_MAX (1ll << 26) /* the iterator keeps the order of every sample: 512 MiB at this many */
/* A dataset's folders nest a few deep and number hundreds at most; past these a walk has wandered off (a link to
 * the root) and would take hours, so it stops with an error. */
#define WALK_DEPTH_MAX 32
#define WALK_FOLDERS_MAX 100000

enum { CAP_FILENAME, CAP_TEXTFILE, CAP_INSTANCEPROMPT };
static const char *const res_types[] = {"pixel", "area", "pixel_area"}; /* bucket_resolution_type's names */

/* One enabled image backend, as its entry gives it. */
typedef struct spec {
    const char *id, *given_dir;
    char *dir;    /* instance_data_dir, absolute */
    char *prompt; /* instance_prompt, one a line (a list gives several); NULL when not given */
    int strategy, crop_style;
    bucket_resolution_type res_type;
    bool crop, square_aspect, prepend, only_prompt, no_split;
    bool video; /* dataset_type video: its samples are clips, folders of PNG frames */
    double resolution; /* 0: not given */
    int64_t repeats;
    bucket_config bucket; /* dataset_open_backend_buckets: the entry's bucket settings over the run's */
} spec;

/* Where an error is: the file and the backend's id (NULL before it is known). */
typedef struct where {
    const char *file, *id;
    int entry;
} where;

static st_status refuse(const where *w, st_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static st_status refuse(const where *w, st_status code, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (w->id) return st_fail(code, "data_backend_config %s: backend '%s': %s", w->file, w->id, msg);
    return st_fail(code, "data_backend_config %s: entry %d: %s", w->file, w->entry, msg);
}

static void shown(const cJSON *v, char *buf, size_t n)
{
    char *text = cJSON_PrintUnformatted(v);
    snprintf(buf, n, "%s", text ? text : "?");
    cJSON_free(text);
}

static int choice(const char *v, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) return i;
    return -1;
}

/* Entry values; an absent key or null leaves *out as it is (SimpleTuner's .get(key, default)). */
static st_status get_bool(const where *w, const cJSON *e, const char *key, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!v || cJSON_IsNull(v)) return ST_OK;
    if (cJSON_IsBool(v)) return *out = cJSON_IsTrue(v), ST_OK;
    char b[64];
    shown(v, b, sizeof b);
    return refuse(w, ST_ERR_INVALID, "%s must be true or false, got %s", key, b);
}

static st_status get_text(const where *w, const cJSON *e, const char *key, const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!v || cJSON_IsNull(v)) return ST_OK;
    if (cJSON_IsString(v)) return *out = v->valuestring, ST_OK;
    char b[64];
    shown(v, b, sizeof b);
    return refuse(w, ST_ERR_INVALID, "%s must be a string, got %s", key, b);
}

/* A number, or a string holding one (SimpleTuner converts with int() and float()). */
static st_status get_number(const where *w, const cJSON *e, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!v || cJSON_IsNull(v)) return ST_OK;
    char *end = NULL;
    const double x = cJSON_IsNumber(v) ? v->valuedouble : cJSON_IsString(v) ? strtod(v->valuestring, &end) : NAN;
    if (isfinite(x) && (!end || (end != v->valuestring && !*end))) return *out = x, ST_OK;
    char b[64];
    shown(v, b, sizeof b);
    return refuse(w, ST_ERR_INVALID, "%s must be a number, got %s", key, b);
}

/* instance_prompt: a string, or a list of strings (one picked per sample); each folded, empty ones dropped. */
static st_status get_prompt(const where *w, const cJSON *e, char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "instance_prompt");
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return ST_OK;
    size_t n = 0;
    bool ok = cJSON_IsString(v) || cJSON_IsArray(v);
    if (cJSON_IsString(v)) n = strlen(v->valuestring) + 1;
    for (const cJSON *p = cJSON_IsArray(v) ? v->child : NULL; p; p = p->next) {
        ok = ok && cJSON_IsString(p);
        n += cJSON_IsString(p) ? strlen(p->valuestring) + 1 : 0;
    }
    if (!ok) {
        char b[64];
        shown(v, b, sizeof b);
        return refuse(w, ST_ERR_INVALID, "instance_prompt must be a string or a list of strings, got %s", b);
    }
    char *s = malloc(n + 1);
    if (!s) return data_oom();
    size_t o = 0;
    for (const cJSON *p = cJSON_IsString(v) ? v : v->child; p; p = cJSON_IsString(v) ? NULL : p->next) {
        const size_t len = strlen(p->valuestring);
        memcpy(s + o, p->valuestring, len);
        const size_t k = data_fold_space(s + o, len);
        if (k) o += k, s[o++] = '\n';
    }
    if (o) o--; /* the last newline */
    s[o] = 0;
    if (!o && cJSON_IsArray(v)) { /* a list is a choice of prompts: none to choose from is a mistake */
        free(s);
        char b[64];
        shown(v, b, sizeof b);
        return refuse(w, ST_ERR_INVALID, "instance_prompt %s holds no non-empty prompt; give a string or a list with "
                      "at least one", b);
    }
    *out = s;
    return ST_OK;
}

/* The square edge SimpleTuner crops to (TrainingSample._set_resolution): `pixel` is the edge itself; `area` is
 * megapixels, its common values mapped to 512, 768, 1024, 1536 and 2048 squared, rounded to the 64-pixel
 * aspect_bucket_alignment; `pixel_area` is an edge whose square is the area. */
static int64_t square_edge(double resolution, int type)
{
    if (type == BUCKET_PIXEL) return resolution < 1e9 ? (int64_t)resolution : 1000000000;
    const double mp = type == BUCKET_PIXEL_AREA ? resolution * resolution / 1e6 : resolution;
    static const double known[][2] = {{0.25, 512}, {0.5, 768}, {1.0, 1024}, {2.0, 1536}, {4.0, 2048}};
    double area = mp * 1e6;
    for (int i = 0; i < 5; i++)
        if (fabs(mp - known[i][0]) < 0.05) area = known[i][1] * known[i][1];
    const double edge = round(sqrt(area) / 64) * 64;
    return edge < 64 ? 64 : edge < 1e9 ? (int64_t)edge : 1000000000;
}

/* Keys SimpleTuner reads for where its caches go or how fast it reads: nothing segtrain trains on depends on them. */
static bool idle_key(const char *key)
{
    static const char *const keys[] = {"cache_dir_vae", "cache_dir", "text_embeds", "image_embeds",
                                       "conditioning_image_embeds", "cache_dir_conditioning_image_embeds",
                                       "metadata_backend", "skip_file_discovery", "preserve_data_backend_cache",
                                       "vae_cache_ondemand", "vae_cache_disable", "compress_cache",
                                       "hash_filenames", "disable_validation", "metadata_update_interval"};
    return choice(key, keys, (int)(sizeof keys / sizeof keys[0])) >= 0;
}

/* The keys segtrain reads (bucketed: the bucket keys too, which squares do not apply). */
static bool used_key(const char *key, bool bucketed)
{
    static const char *const keys[] = {"id", "type", "dataset_type", "disabled", "disable", "instance_data_dir",
                                       "caption_strategy", "instance_prompt", "prepend_instance_prompt",
                                       "only_instance_prompt", "disable_multiline_split", "resolution",
                                       "resolution_type", "crop", "crop_style", "crop_aspect", "repeats"};
    static const char *const bucket_keys[] = {"minimum_image_size", "maximum_image_size", "target_downsample_size",
                                              "max_upscale_threshold", "crop_aspect_buckets", "video"};
    return choice(key, keys, (int)(sizeof keys / sizeof keys[0])) >= 0 ||
           (bucketed && choice(key, bucket_keys, (int)(sizeof bucket_keys / sizeof bucket_keys[0])) >= 0);
}

/* One warning naming every key of entry e that segtrain neither reads nor knows to be idle. */
static st_status warn_unknown_keys(const char *file, const char *id, const cJSON *e, bool bucketed)
{
    size_t len = 0;
    for (const cJSON *k = e->child; k; k = k->next)
        if (!used_key(k->string, bucketed) && !idle_key(k->string)) len += strlen(k->string) + 2; /* ", " or '\0' */
    if (!len) return ST_OK;
    char *unknown = malloc(len), *at = unknown;
    if (!unknown) return data_oom();
    for (const cJSON *k = e->child; k; k = k->next)
        if (!used_key(k->string, bucketed) && !idle_key(k->string))
            at += sprintf(at, "%s%s", at > unknown ? ", " : "", k->string);
    st_warn("data: warning: %s: backend '%s': ignoring keys segtrain does not read: %s", file, id, unknown);
    free(unknown);
    return ST_OK;
}

/* One weighted aspect, {"aspect": a, "weight": w}, as training_sample.py reads it. SimpleTuner's messages spell the
 * key "aspect_bucket", which its code does not read (a KeyError there): refused, naming the key it reads. */
static st_status get_weighted_aspect(const where *w, const cJSON *a, const char *shown_list, double *aspect,
                                     double *weight)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "aspect"), *p = cJSON_GetObjectItemCaseSensitive(a, "weight");
    if (!v && cJSON_GetObjectItemCaseSensitive(a, "aspect_bucket"))
        return refuse(w, ST_ERR_INVALID, "crop_aspect_buckets: SimpleTuner reads a weighted aspect as {\"aspect\": a, "
                      "\"weight\": w} (training_sample.py; its messages say aspect_bucket, which it does not read), got %s",
                      shown_list);
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !cJSON_IsNumber(p) || !(p->valuedouble >= 0))
        return refuse(w, ST_ERR_INVALID, "crop_aspect_buckets: a weighted aspect is {\"aspect\": a > 0, \"weight\": "
                      "w >= 0}, got %s", shown_list);
    *aspect = v->valuedouble, *weight = p->valuedouble;
    return ST_OK;
}

/* crop_aspect_buckets: a list of aspects, or of weighted aspects (every entry one form: SimpleTuner tells them apart
 * by the first). Under crop_aspect random the weights must add up to exactly 1.0, summed in order, as SimpleTuner
 * checks them. */
static st_status get_aspects(const where *w, const cJSON *e, bucket_config *c)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "crop_aspect_buckets");
    if (!v || cJSON_IsNull(v)) return ST_OK;
    char b[64];
    shown(v, b, sizeof b);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > BUCKET_ASPECTS_MAX)
        return refuse(w, ST_ERR_INVALID, "crop_aspect_buckets must be a list of at most %d aspects, got %s",
                      BUCKET_ASPECTS_MAX, b);
    c->n_crop_aspect_buckets = 0;
    c->crop_aspect_weighted = v->child && cJSON_IsObject(v->child);
    double sum = 0;
    for (const cJSON *a = v->child; a; a = a->next) {
        const int i = c->n_crop_aspect_buckets++;
        if (cJSON_IsObject(a) != c->crop_aspect_weighted)
            return refuse(w, ST_ERR_INVALID, "crop_aspect_buckets mixes aspects and weighted aspects (%s): one form "
                          "for the whole list", b);
        if (c->crop_aspect_weighted) {
            st_status st = get_weighted_aspect(w, a, b, &c->crop_aspect_buckets[i], &c->crop_aspect_weights[i]);
            if (st != ST_OK) return st;
            sum += c->crop_aspect_weights[i];
            continue;
        }
        if (!cJSON_IsNumber(a) || !(a->valuedouble > 0))
            return refuse(w, ST_ERR_INVALID, "crop_aspect_buckets must hold positive aspects, got %s", b);
        c->crop_aspect_buckets[i] = a->valuedouble;
    }
    if (c->crop_aspect_weighted && c->crop_aspect == BUCKET_ASPECT_RANDOM && sum != 1.0)
        return refuse(w, ST_ERR_INVALID, "crop_aspect_buckets' weights add up to %.17g, and SimpleTuner draws from "
                      "them only when they add up to exactly 1.0 (%s)", sum, b);
    return ST_OK;
}

/* The entry's bucket settings over the run's (SimpleTuner's backend.get(key, args.key)), refused where SimpleTuner's
 * validators refuse them. style and aspect are the entry's crop_style and crop_aspect, NULL when not given. */
static st_status read_bucket_keys(const where *w, const cJSON *e, const bucket_config *run, spec *sp,
                                  const char *style, const char *aspect)
{
    static const char *const styles[] = {"center", "centre", "corner", "random"};
    static const char *const aspects[] = {"square", "preserve", "closest", "random"};
    static const bucket_crop_style style_of[] = {BUCKET_CROP_CENTER, BUCKET_CROP_CENTER, BUCKET_CROP_CORNER,
                                                 BUCKET_CROP_RANDOM};
    bucket_config *c = &sp->bucket;
    *c = *run;
    c->crop = sp->crop;
    c->crop_style = style ? style_of[choice(style, styles, 4)] : BUCKET_CROP_RANDOM;
    c->crop_aspect = aspect ? (bucket_crop_aspect)choice(aspect, aspects, 4) : BUCKET_ASPECT_SQUARE;
    if (sp->resolution > 0) c->resolution = sp->resolution;
    if (!cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "resolution_type")) &&
        cJSON_GetObjectItemCaseSensitive(e, "resolution_type"))
        c->resolution_type = sp->res_type;
    st_status st;
    if ((st = get_number(w, e, "minimum_image_size", &c->minimum_image_size)) ||
        (st = get_number(w, e, "maximum_image_size", &c->maximum_image_size)) ||
        (st = get_number(w, e, "target_downsample_size", &c->target_downsample_size)) ||
        (st = get_number(w, e, "max_upscale_threshold", &c->max_upscale_threshold)) || (st = get_aspects(w, e, c)))
        return st;
    if (!(c->resolution > 0))
        return refuse(w, ST_ERR_INVALID, "no resolution, and the run gives none to fall back on");
    if (c->minimum_image_size < 0 || c->maximum_image_size < 0 || c->target_downsample_size < 0)
        return refuse(w, ST_ERR_INVALID, "minimum_image_size, maximum_image_size and target_downsample_size must not "
                      "be negative");
    if (c->maximum_image_size > 0 && !(c->target_downsample_size > 0))
        return refuse(w, ST_ERR_INVALID, "maximum_image_size needs a target_downsample_size too (SimpleTuner refuses "
                      "one without the other)");
    if ((c->crop_aspect == BUCKET_ASPECT_RANDOM || c->crop_aspect == BUCKET_ASPECT_CLOSEST) &&
        !c->n_crop_aspect_buckets)
        return refuse(w, ST_ERR_INVALID, "crop_aspect %s needs crop_aspect_buckets (a list of aspects)", aspect);
    return ST_OK;
}

/* A whole number >= 1 of the video block, or 0 when absent. */
static st_status get_frames(const where *w, const cJSON *video, const char *key, int *out)
{
    double v = 0;
    char name[32];
    snprintf(name, sizeof name, "video.%s", key);
    st_status st = get_number(w, video, key, &v);
    if (!st && v != 0 && !(v >= 1 && v <= (1 << 20) && v == floor(v)))
        st = refuse(w, ST_ERR_INVALID, "%s must be a whole number of frames from 1 to %d, got %g", name, 1 << 20, v);
    if (!st) *out = (int)v;
    return st;
}

/* The entry's `video` block as SimpleTuner's factory reads it: num_frames (150 when absent: 5 seconds at its default
 * 30 frames a second), min_frames (num_frames when absent, never below it), both then put to the model's rule;
 * max_frames; bucket_strategy aspect_ratio or resolution_frames, with frame_interval (a value SimpleTuner ignores,
 * not a whole number above 0, is ignored with a warning); is_i2v read and left: it changes no bucket. */
static st_status read_video_keys(const where *w, const cJSON *e, bucket_config *c)
{
    const cJSON *video = cJSON_GetObjectItemCaseSensitive(e, "video");
    if (video && !cJSON_IsNull(video) && !cJSON_IsObject(video))
        return refuse(w, ST_ERR_INVALID, "video must be an object ({\"num_frames\": ..., \"min_frames\": ...})");
    int num = 0, min = 0, max = 0;
    const char *strategy = "aspect_ratio";
    bool i2v = false;
    double interval = 0;
    st_status st;
    if ((st = get_frames(w, video, "num_frames", &num)) || (st = get_frames(w, video, "min_frames", &min)) ||
        (st = get_frames(w, video, "max_frames", &max)) || (st = get_text(w, video, "bucket_strategy", &strategy)) ||
        (st = get_bool(w, video, "is_i2v", &i2v)))
        return st;
    const bool by_frames = !strcmp(strategy, "resolution_frames"); /* frame_interval is read for it alone */
    if (by_frames && (get_number(w, video, "frame_interval", &interval) ||
                      (interval != 0 && !(interval >= 1 && interval == floor(interval) && interval < 1e9))))
        st_warn("data: warning: %s: backend '%s': ignoring video.frame_interval, not a whole number above 0 (as "
                "SimpleTuner ignores it)", w->file, w->id), interval = 0;
    num = num ? num : 150, min = min ? min : num;
    if (min < num)
        return refuse(w, ST_ERR_INVALID, "video.min_frames %d is below video.num_frames %d (SimpleTuner refuses it: "
                      "min_frames defaults to num_frames and may not be lower)", min, num);
    if (strcmp(strategy, "aspect_ratio") && strcmp(strategy, "resolution_frames"))
        return refuse(w, ST_ERR_INVALID, "video.bucket_strategy %s is not aspect_ratio or resolution_frames",
                      strategy);
    c->min_frames = bucket_adjust_frames(c, min), c->max_frames = max;
    c->resolution_frames = by_frames;
    c->frame_interval = (int)interval;
    return ST_OK;
}

/* Reads one entry (bucketed: with its bucket settings over the run's). *sp->id stays NULL for an entry that gives
 * no images (disabled, a cache): `skipped` then says why. */
static st_status read_entry(const char *file, int index, const cJSON *e, const bucket_config *bucketed, spec *sp,
                            char *skipped, size_t nskipped)
{
    where w = {file, NULL, index};
    skipped[0] = 0;
    if (!cJSON_IsObject(e)) return refuse(&w, ST_ERR_FORMAT, "a backend is a JSON object ({\"id\": ..., ...})");
    const char *id = NULL, *dtype = "image", *type = "local";
    st_status st = get_text(&w, e, "id", &id);
    if (!st && (!id || !id[0])) st = refuse(&w, ST_ERR_INVALID, "no id (every backend needs one)");
    if (st) return st;
    w.id = id;
    bool disabled = false, disable = false;
    if ((st = get_bool(&w, e, "disabled", &disabled)) || (st = get_bool(&w, e, "disable", &disable)) ||
        (st = get_text(&w, e, "dataset_type", &dtype)) || (st = get_text(&w, e, "type", &type)))
        return st;
    if (disabled || disable) return snprintf(skipped, nskipped, "disabled"), ST_OK;
    static const char *const caches[] = {"text_embeds", "image_embeds", "conditioning_image_embeds"};
    static const char *const others[] = {"audio", "conditioning", "eval", "caption", "distillation_cache",
                                         "grounding"};
    const int cache = choice(dtype, caches, 3);
    if (cache >= 0) {
        snprintf(skipped, nskipped, "%s cache, not needed: %s", dtype,
                 cache == 0 ? "segtrain encodes captions itself" : "segtrain trains in pixel space, with no VAE");
        return ST_OK;
    }
    if (choice(dtype, others, 6) >= 0)
        return refuse(&w, ST_ERR_UNSUPPORTED, "a %s dataset (dataset_type %s); segtrain reads local image folders "
                      "(dataset_type image, type local) and video ones in aspect buckets", dtype, dtype);
    const bool video = !strcmp(dtype, "video");
    if (video && !bucketed)
        return refuse(&w, ST_ERR_UNSUPPORTED, "a video dataset (dataset_type video) is read in aspect buckets only, "
                      "to place its clips for scripts/make_cache.py (segtrain buckets, docs/DATA.md)");
    if (strcmp(dtype, "image") && !video)
        return refuse(&w, ST_ERR_INVALID, "dataset_type %s is not one of SimpleTuner's (image, video, audio, "
                      "conditioning, eval, caption, text_embeds, image_embeds, conditioning_image_embeds, "
                      "distillation_cache, grounding)", dtype);
    if (strcmp(type, "local"))
        return refuse(&w, ST_ERR_UNSUPPORTED, "type %s; segtrain reads local image folders only (type local, with "
                      "instance_data_dir)", type);

    *sp = (spec){.id = id, .crop_style = CROP_RANDOM, .res_type = BUCKET_PIXEL_AREA, .square_aspect = true,
                 .video = video};
    const char *strategy = "filename", *res_type = NULL, *style = NULL, *aspect = NULL, *dir = NULL;
    double repeats = 0;
    if ((st = get_text(&w, e, "instance_data_dir", &dir)) || (st = get_text(&w, e, "caption_strategy", &strategy)) ||
        (st = get_bool(&w, e, "prepend_instance_prompt", &sp->prepend)) ||
        (st = get_bool(&w, e, "only_instance_prompt", &sp->only_prompt)) ||
        (st = get_bool(&w, e, "disable_multiline_split", &sp->no_split)) ||
        (st = get_number(&w, e, "resolution", &sp->resolution)) ||
        (st = get_text(&w, e, "resolution_type", &res_type)) || (st = get_bool(&w, e, "crop", &sp->crop)) ||
        (st = get_text(&w, e, "crop_style", &style)) || (st = get_text(&w, e, "crop_aspect", &aspect)) ||
        (st = get_number(&w, e, "repeats", &repeats)) || (st = get_prompt(&w, e, &sp->prompt)))
        return st;

    static const char *const strategies[] = {"filename", "textfile", "instanceprompt"};
    static const char *const tables[] = {"parquet", "huggingface", "csv", "webshart"};
    static const char *const styles[] = {"center", "centre", "corner", "random"};
    static const char *const aspects[] = {"square", "preserve", "random", "closest"};
    if ((sp->strategy = choice(strategy, strategies, 3)) < 0)
        return refuse(&w, ST_ERR_UNSUPPORTED, "caption_strategy %s %s; segtrain takes filename, textfile or "
                      "instanceprompt", strategy, choice(strategy, tables, 4) >= 0 ? "reads captions from a table "
                      "or a hub dataset" : "is not one of SimpleTuner's");
    if (!sp->prompt && (sp->strategy == CAP_INSTANCEPROMPT || sp->only_prompt || sp->prepend))
        return refuse(&w, ST_ERR_INVALID, "%s needs an instance_prompt", sp->strategy == CAP_INSTANCEPROMPT ?
                      "caption_strategy instanceprompt" : sp->only_prompt ? "only_instance_prompt" :
                      "prepend_instance_prompt");
    if (sp->prepend && strchr(sp->prompt, '\n') && sp->strategy != CAP_INSTANCEPROMPT && !sp->only_prompt)
        return refuse(&w, ST_ERR_INVALID, "prepend_instance_prompt takes one instance_prompt, not a list");
    const int rtype = res_type ? choice(res_type, res_types, 3) : (int)sp->res_type; /* in bucket_resolution_type's */
    if (rtype < 0) return refuse(&w, ST_ERR_INVALID, "resolution_type %s is not pixel, area or pixel_area", res_type);
    sp->res_type = (bucket_resolution_type)rtype;
    if (sp->resolution < 0 || (sp->resolution > 0 && sp->res_type == BUCKET_PIXEL && sp->resolution < 1))
        return refuse(&w, ST_ERR_INVALID, "resolution %g is not a %s", sp->resolution,
                      sp->res_type == BUCKET_AREA ? "positive number of megapixels" : "positive number of pixels");
    if (style) {
        if (!strcmp(style, "face"))
            return refuse(&w, ST_ERR_UNSUPPORTED, "crop_style face needs a face detector, which segtrain does not "
                          "have; it takes center, centre, corner or random");
        const int k = choice(style, styles, 4);
        if (k < 0) return refuse(&w, ST_ERR_INVALID, "crop_style %s is not center, centre, corner or random", style);
        sp->crop_style = k <= 1 ? CROP_CENTER : k == 2 ? CROP_CORNER : CROP_RANDOM;
    }
    if (!sp->crop) sp->crop_style = CROP_CENTER; /* the model takes squares: the center one, nearest to no crop */
    if (aspect && choice(aspect, aspects, 4) < 0)
        return refuse(&w, ST_ERR_INVALID, "crop_aspect %s is not square, preserve, random or closest", aspect);
    if (bucketed && (st = read_bucket_keys(&w, e, bucketed, sp, style, aspect))) return st;
    if (video && (st = read_video_keys(&w, e, &sp->bucket))) return st;
    sp->square_aspect = !aspect || !strcmp(aspect, "square");
    if (repeats < 0 || repeats > REPEATS_MAX || repeats != floor(repeats))
        return refuse(&w, ST_ERR_INVALID, "repeats %g is not a whole number in [0, %d] (0: each image once an "
                      "epoch)", repeats, REPEATS_MAX);
    sp->repeats = (int64_t)repeats;
    if (!dir || !dir[0]) return refuse(&w, ST_ERR_INVALID, "no instance_data_dir (the folder of its images)");
    sp->given_dir = dir;
    if (dir[0] == '/') sp->dir = strdup(dir);
    else {
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd)) return refuse(&w, ST_ERR_IO, "cannot read the working directory, which a "
                                                    "relative instance_data_dir is taken from: %s", strerror(errno));
        sp->dir = data_join_path(cwd, dir);
    }
    if (!sp->dir) return data_oom();
    return warn_unknown_keys(file, id, e, bucketed != NULL);
}

/* The caption(s) of an image, one a line, as SimpleTuner's PromptHandler builds them; a clip's (a folder: sp->video)
 * from the folder's whole name, and its textfile <folder>.txt beside it, as make_cache.py takes them. */
static st_status make_caption(const where *w, const spec *sp, const char *path, char **out)
{
    *out = NULL;
    if (sp->only_prompt || sp->strategy == CAP_INSTANCEPROMPT)
        return (*out = strdup(sp->prompt)) ? ST_OK : data_oom();
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *dot = sp->video || !strrchr(base, '.') ? base + strlen(base) : strrchr(base, '.');
    char *text;
    size_t n;
    if (sp->strategy == CAP_FILENAME) { /* Path(image).stem with '_' -> ' ' */
        n = (size_t)(dot - base);
        if (!(text = malloc(n + 1))) return data_oom();
        for (size_t i = 0; i < n; i++) text[i] = base[i] == '_' ? ' ' : base[i];
        text[n] = 0;
    } else { /* the same-named .txt; every non-empty line a caption, unless disable_multiline_split */
        const size_t stem = (size_t)(dot - path);
        char *txt = malloc(stem + 5);
        if (!txt) return data_oom();
        memcpy(txt, path, stem);
        memcpy(txt + stem, ".txt", 5);
        st_status st = data_read_small(txt, CAPTION_FILE_MAX, false, &text, &n);
        if (st) {
            if (errno != ENOMEM)
                st = errno == ENOENT ? refuse(w, ST_ERR_IO, "caption_strategy textfile: %s has no caption file %s (%s)",
                                              path, txt, strerror(ENOENT))
                                     : refuse(w, ST_ERR_IO, "caption_strategy textfile: %s", st_error());
            free(txt);
            return st;
        }
        free(txt);
        if (sp->no_split)
            for (size_t i = 0; i < n; i++) text[i] = text[i] == '\n' ? ' ' : text[i];
    }
    /* fold each line, drop empty ones, prepend the instance prompt */
    const size_t plen = sp->prepend ? strlen(sp->prompt) + 1 : 0;
    size_t lines = 1;
    for (char *p = text; (p = strchr(p, '\n')) != NULL; p++) lines++;
    char *joined = malloc(strlen(text) + lines * plen + 1);
    if (!joined) return free(text), data_oom();
    size_t o = 0;
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        const size_t len = data_fold_space(line, strlen(line));
        if (!len) continue;
        if (plen) memcpy(joined + o, sp->prompt, plen - 1), joined[o + plen - 1] = ' ', o += plen;
        memcpy(joined + o, line, len);
        o += len;
        joined[o++] = '\n';
    }
    if (o) o--;
    else if (plen) memcpy(joined, sp->prompt, plen - 1), o = plen - 1; /* an empty caption with its prompt */
    joined[o] = 0;
    free(text);
    *out = joined;
    return ST_OK;
}

/* Folders already walked, by device and inode: a link back up is walked once, as SimpleTuner's os.walk does. */
typedef struct seen {
    dev_t *dev;
    ino_t *ino;
    int n, cap;
} seen;

/* The name of a kernel's pseudo-filesystem dir is on (/proc, /sys, ...), or NULL: they hold no images, and /proc
 * leads to the whole tree again through every process's root and cwd. */
static const char *pseudo_fs(const char *dir)
{
#ifdef __linux__
    static const struct { unsigned long magic; const char *name; } fs[] = {
        {PROC_SUPER_MAGIC, "proc"},      {SYSFS_MAGIC, "sysfs"},         {DEBUGFS_MAGIC, "debugfs"},
        {TRACEFS_MAGIC, "tracefs"},      {CGROUP_SUPER_MAGIC, "cgroup"}, {CGROUP2_SUPER_MAGIC, "cgroup2"},
        {SECURITYFS_MAGIC, "securityfs"}, {DEVPTS_SUPER_MAGIC, "devpts"}, {BPF_FS_MAGIC, "bpf"},
        {PSTOREFS_MAGIC, "pstore"},      {EFIVARFS_MAGIC, "efivarfs"}};
    struct statfs sf;
    if (statfs(dir, &sf)) return NULL; /* opening it reports the error */
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        if ((unsigned long)sf.f_type == fs[i].magic) return fs[i].name;
#else
    (void)dir;
#endif
    return NULL;
}

static bool is_video_file(const char *name)
{
    static const char *const exts[] = {".mp4", ".mov", ".avi", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv"};
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof exts / sizeof exts[0]; i++)
        if (!strcasecmp(dot, exts[i])) return true;
    return false;
}

/* A video backend's folder dir (its entries names[0..n)): where it holds PNG frames it is a clip, added as one sample
 * of label (its path the folder's, its size the first frame's, its frames the PNGs', in name order). Every frame is
 * checked as an image is, and must be the first one's size. A video file is refused: segtrain decodes none. */
static st_status add_clip(scan *sc, const where *w, const spec *sp, const char *dir, char **names, int n, int label,
                          int depth)
{
    int frames = 0, fw = 0, fh = 0;
    st_status st = ST_OK;
    for (int i = 0; i < n && !st; i++) {
        char *path = data_join_path(dir, names[i]);
        bool ok = false;
        int iw = 0, ih = 0;
        if (!path) return data_oom();
        if (is_video_file(names[i]))
            st = refuse(w, ST_ERR_UNSUPPORTED, "%s: segtrain reads no video files (SimpleTuner decodes them with "
                        "ffmpeg); give each clip as a folder of PNG frames (ffmpeg -i clip.mp4 clip/%%05d.png), as "
                        "scripts/make_cache.py reads them", path);
        else if (data_is_png(names[i]) && !data_is_dir(path) && !(st = data_check_png(sc, path, names[i], &ok, &iw, &ih)) && ok) {
            if (frames++ == 0) fw = iw, fh = ih;
            else if (iw != fw || ih != fh)
                st = refuse(w, ST_ERR_FORMAT, "%s is %dx%d, but the clip's first frame is %dx%d: a clip's frames "
                            "share one size", path, iw, ih, fw, fh);
        }
        free(path);
    }
    if (st || !frames) return st;
    if (!depth)
        return refuse(w, ST_ERR_INVALID, "%s holds frames at its top: a video backend's clips are its folders of "
                      "PNG frames, one folder a clip", dir);
    char *path = strdup(dir), *caption = NULL;
    if (!path) return data_oom();
    if ((st = make_caption(w, sp, path, &caption))) return free(path), st;
    if ((st = data_add_item(sc, path, caption, label))) return st; /* it frees both */
    item *e = &sc->items[sc->n - 1];
    e->w = fw, e->h = fh, e->frames = frames;
    return ST_OK;
}

/* Adds the usable PNGs under dir (recursively, hidden entries skipped, in name order) as samples of label; a video
 * backend's clips (add_clip) instead. */
static st_status walk(scan *sc, seen *sn, const where *w, const spec *sp, const char *dir, int label, int depth)
{
    struct stat sb;
    if (stat(dir, &sb)) return refuse(w, ST_ERR_IO, "%s: cannot read folder: %s", dir, strerror(errno));
    for (int i = 0; i < sn->n; i++)
        if (sn->dev[i] == sb.st_dev && sn->ino[i] == sb.st_ino) return ST_OK;
    const char *pseudo = pseudo_fs(dir);
    if (pseudo)
        return refuse(w, ST_ERR_INVALID, "%s is on the kernel's %s pseudo-filesystem, which holds no images; "
                      "instance_data_dir must be a folder of image files", dir, pseudo);
    if (depth > WALK_DEPTH_MAX || sn->n >= WALK_FOLDERS_MAX)
        return refuse(w, ST_ERR_INVALID, "%s: more than %d %s under instance_data_dir %s (a link to a folder above "
                      "it?); segtrain walks at most %d levels and %d folders", dir,
                      depth > WALK_DEPTH_MAX ? WALK_DEPTH_MAX : WALK_FOLDERS_MAX,
                      depth > WALK_DEPTH_MAX ? "levels of folders" : "folders", sp->dir, WALK_DEPTH_MAX,
                      WALK_FOLDERS_MAX);
    if (sn->n == sn->cap) {
        sn->cap = sn->cap ? 2 * sn->cap : 16;
        dev_t *d = realloc(sn->dev, sizeof(dev_t) * (size_t)sn->cap);
        if (d) sn->dev = d;
        ino_t *in = d ? realloc(sn->ino, sizeof(ino_t) * (size_t)sn->cap) : NULL;
        if (in) sn->ino = in;
        if (!in) return sn->cap = sn->n, data_oom();
    }
    sn->dev[sn->n] = sb.st_dev, sn->ino[sn->n++] = sb.st_ino;
    char **names;
    int n;
    st_status st = data_list_dir(dir, &names, &n);
    if (!st && sp->video) st = add_clip(sc, w, sp, dir, names, n, label, depth);
    for (int i = 0; i < n && !st; i++) {
        char *path = data_join_path(dir, names[i]), *caption = NULL;
        bool ok = false;
        int iw = 0, ih = 0;
        if (!path) st = data_oom();
        else if (data_is_dir(path)) st = walk(sc, sn, w, sp, path, label, depth + 1);
        else if (!sp->video && (data_is_png(names[i]) || data_is_other_image(names[i])) &&
                 !(st = data_check_png(sc, path, names[i], &ok, &iw, &ih)) && ok &&
                 !(st = make_caption(w, sp, path, &caption))) {
            if (!(st = data_add_item(sc, path, caption, label)))
                sc->items[sc->n - 1].w = iw, sc->items[sc->n - 1].h = ih;
            continue; /* data_add_item owns path */
        }
        free(path);
    }
    if (names) data_free_names(names, n);
    return st;
}

typedef struct named {
    const char *id;
    int entry;
} named;

static int cmp_named(const void *a, const void *b)
{
    const named *x = a, *y = b;
    const int c = strcmp(x->id, y->id);
    return c ? c : (x->entry > y->entry) - (x->entry < y->entry);
}

/* Every enabled entry's id is its own, caches included: SimpleTuner keys its backends by id (skipping disabled
 * ones first), so a second entry with one would stand for the first. Sorted, so that a long list costs n log n. */
static st_status check_unique_ids(const char *file, const cJSON *root)
{
    const int n = cJSON_GetArraySize(root);
    named *ids = calloc((size_t)n + 1, sizeof *ids);
    if (!ids) return data_oom();
    int k = 0, i = 0;
    for (const cJSON *e = root->child; e; e = e->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const bool off = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "disabled")) ||
                         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "disable"));
        if (cJSON_IsString(id) && !off) ids[k++] = (named){id->valuestring, i};
    }
    qsort(ids, (size_t)k, sizeof *ids, cmp_named);
    st_status st = ST_OK;
    for (int j = 1; j < k && !st; j++)
        if (!strcmp(ids[j - 1].id, ids[j].id))
            st = st_fail(ST_ERR_INVALID, "data_backend_config %s: id '%s' is given to entries %d and %d; each backend "
                         "needs an id of its own", file, ids[j].id, ids[j - 1].entry, ids[j].entry);
    free(ids);
    return st;
}

/* Where cJSON stopped, as file:line:column and the text there. */
static st_status json_error(const char *file, const char *text, const char *at)
{
    int line = 1, col = 1;
    for (const char *p = text; at && p < at; p++) {
        if (*p == '\n') line++, col = 1;
        else col++;
    }
    if (!at || !*at)
        return st_fail(ST_ERR_FORMAT, "data_backend_config %s:%d:%d: malformed JSON: unexpected end of text", file,
                       line, col);
    return st_fail(ST_ERR_FORMAT, "data_backend_config %s:%d:%d: malformed JSON at '%.*s'", file, line, col,
                   (int)strcspn(at, "\n") < 24 ? (int)strcspn(at, "\n") : 24, at);
}

/* How a backend's captions are made, for its line. */
static const char *captions_by(const spec *sp, char *buf, size_t n)
{
    static const char *const strategies[] = {"filename", "textfile", "instanceprompt"};
    snprintf(buf, n, "%s%s", sp->only_prompt ? "instance_prompt (only_instance_prompt)" : strategies[sp->strategy],
             sp->prepend && !sp->only_prompt && sp->strategy != CAP_INSTANCEPROMPT ? " after instance_prompt" : "");
    return buf;
}

/* One line on what a backend gives, and wherever it differs from what SimpleTuner would train on, why. */
static void report_backend(const spec *sp, const backend *b, int R)
{
    static const char *const styles[] = {"center", "corner", "random"};
    char size[160], model[64] = "", caps[64];
    const int64_t edge = sp->resolution > 0 ? square_edge(sp->resolution, sp->res_type) : R;
    if (edge != R) snprintf(model, sizeof model, ", resampled to the model's %d", R);
    snprintf(size, sizeof size, "%lld-pixel squares (resolution %g %s)%s", (long long)edge, sp->resolution,
             res_types[sp->res_type], model);
    if (sp->resolution <= 0) snprintf(size, sizeof size, "squares of the model's %d (no resolution given)", R);
    fprintf(stderr, "data: backend '%s': %lld images in %s, %lld sample%s each an epoch (repeats %lld), captions "
            "by %s, %s square crop%s, %s\n", sp->id, (long long)b->count, sp->dir, (long long)(1 + b->repeats),
            b->repeats ? "s" : "", (long long)b->repeats, captions_by(sp, caps, sizeof caps), styles[b->crop_style],
            !sp->crop ? " (crop is false, but the model takes squares)"
            : sp->square_aspect ? "" : " (crop_aspect is not square, but the model takes squares)", size);
}

/* ---- aspect buckets (dataset_open_backend_buckets) ---- */

/* The buckets as they are found: one place per image, the buckets, and each backend's images left out as too
 * small, and clips outside the frame limits. */
typedef struct bucketing {
    place *places;
    data_bucket *buckets;
    int n, cap;
    int64_t *small, *off_frames;
} bucketing;

/* crop_aspect random: an aspect drawn per image from the run's seed (SimpleTuner draws with Python's random). */
typedef struct aspect_draw {
    uint64_t seed;
    int64_t item;
} aspect_draw;

/* The seeded draw: uniform, or by weight (the first aspect whose running sum of weights passes a uniform [0, 1)). */
static double draw_aspect(const double *aspects, const double *weights, int n, void *ctx)
{
    const aspect_draw *d = ctx;
    const uint64_t r = rng_u64(d->seed, rng_stream("data.bucket_aspect"), (uint64_t)d->item);
    if (!weights) return aspects[r % (uint64_t)n];
    const double u = (double)(r >> 11) * 0x1p-53;
    double below = 0;
    for (int i = 0; i < n - 1; i++)
        if (u < (below += weights[i])) return aspects[i];
    return aspects[n - 1];
}

/* *out: the bucket of backend `label` that s falls in, among buckets from .. n - 1 (that backend's), added after
 * them when new. A bucket is its name and its size and frames: one shape for every sample in it (SimpleTuner's
 * aspect bucket of clips of several lengths is one bucket a length). */
static st_status find_bucket(bucketing *bk, int from, int label, const bucket_sample *s, int *out)
{
    for (int i = from; i < bk->n; i++)
        if (bk->buckets[i].width == s->target_w && bk->buckets[i].height == s->target_h &&
            bk->buckets[i].frames == s->bucket_frames && !strcmp(bk->buckets[i].name, s->key))
            return *out = i, ST_OK;
    if (bk->n == bk->cap) {
        const int cap = bk->cap ? 2 * bk->cap : 16;
        data_bucket *grown = realloc(bk->buckets, sizeof *grown * (size_t)cap);
        if (!grown) return data_oom();
        bk->buckets = grown, bk->cap = cap;
    }
    data_bucket *b = &bk->buckets[bk->n];
    *b = (data_bucket){.width = s->target_w, .height = s->target_h, .frames = s->bucket_frames, .label = label};
    snprintf(b->name, sizeof b->name, "%s", s->key);
    *out = bk->n++;
    return ST_OK;
}

/* An image's place from its bucket_sample: the bucket's window inside the resize (which is never smaller than the
 * window), at the crop's top left; crop_style random draws it here, once per image and seed. */
static place place_of(const bucket_sample *s, int bucket, uint64_t seed, int64_t image)
{
    place p = {bucket, s->resize_w > s->target_w ? s->resize_w : s->target_w,
               s->resize_h > s->target_h ? s->resize_h : s->target_h, s->crop_top, s->crop_left};
    const int slack_x = p.resize_w - s->target_w, slack_y = p.resize_h - s->target_h;
    if (s->crop_top < 0) {
        const uint64_t stream = rng_stream("data.bucket_crop");
        p.top = (int)(rng_u64(seed, stream, 2 * (uint64_t)image) % (uint64_t)(slack_y + 1));
        p.left = (int)(rng_u64(seed, stream, 2 * (uint64_t)image + 1) % (uint64_t)(slack_x + 1));
    }
    p.top = p.top < slack_y ? p.top : slack_y;
    p.left = p.left < slack_x ? p.left : slack_x;
    return p;
}

/* Every image's bucket: backends in file order, each one's images in walk order, through one aspect map (SimpleTuner
 * keeps one for all backends, keyed by resolution). An image below minimum_image_size is dropped from sc (freed, its
 * slot emptied, sc->n lowered once all are placed) and from its backend's range. */
static st_status assign_buckets(const char *file, const spec *specs, int nspecs, backend *backends, scan *sc,
                                uint64_t seed, bucketing *bk)
{
    bk->places = malloc(sizeof *bk->places * (size_t)(sc->n ? sc->n : 1));
    bk->small = calloc((size_t)nspecs, sizeof *bk->small);
    bk->off_frames = calloc((size_t)nspecs, sizeof *bk->off_frames);
    if (!bk->places || !bk->small || !bk->off_frames) return data_oom();
    bucket_state map = {0};
    int64_t kept = 0;
    st_status st = ST_OK;
    for (int b = 0; b < nspecs && !st; b++) {
        const where w = {file, specs[b].id, 0};
        const int64_t first = kept;
        const int from = bk->n;
        for (int64_t i = backends[b].first; i < backends[b].first + backends[b].count && !st; i++) {
            item *e = &sc->items[i];
            bucket_sample s;
            aspect_draw draw = {seed, kept};
            int k = 0;
            if ((st = bucket_assign(&specs[b].bucket, &map, e->w, e->h, e->frames, draw_aspect, &draw, &s)))
                st = refuse(&w, st, "%s", st_error());
            else if (s.skipped) {
                const bucket_config *c = &specs[b].bucket;
                const bool off = e->frames && (s.frames < c->min_frames || (c->max_frames && s.frames > c->max_frames));
                free(e->path), free(e->caption);
                *e = (item){0};
                (off ? bk->off_frames : bk->small)[b]++;
            } else if (!(st = find_bucket(bk, from, b, &s, &k))) {
                bk->places[kept] = place_of(&s, k, seed, kept);
                bk->buckets[k].images++;
                sc->items[kept++] = *e;
                if (kept - 1 != i) *e = (item){0};
            }
        }
        backends[b].first = first, backends[b].count = kept - first;
        backends[b].prunes = specs[b].bucket.minimum_image_size > 0;
        const bucket_config *c = &specs[b].bucket;
        if (!st && !backends[b].count && !specs[b].video)
            st = refuse(&w, ST_ERR_INVALID, "all %lld images are below minimum_image_size %g (%s)",
                        (long long)bk->small[b], c->minimum_image_size, res_types[c->resolution_type]);
        else if (!st && !backends[b].count)
            st = refuse(&w, ST_ERR_INVALID, "all %lld clips are left out: %lld below minimum_image_size %g, %lld of "
                        "frames outside video.min_frames %d and max_frames %d (after the model's rule)",
                        (long long)(bk->small[b] + bk->off_frames[b]), (long long)bk->small[b],
                        c->minimum_image_size, (long long)bk->off_frames[b], c->min_frames, c->max_frames);
    }
    bucket_state_free(&map);
    if (!st) sc->n = kept;
    return st;
}

/* A backend's line, then a line for each of its buckets. */
static void report_buckets(const spec *sp, const backend *b, const dataset *ds, int64_t small, int64_t off_frames)
{
    static const char *const styles[] = {"center", "corner", "random"};
    static const char *const aspects[] = {"square", "preserve", "closest", "random"};
    const bucket_config *c = &sp->bucket;
    const int label = (int)(b - ds->backends);
    int n = 0;
    for (int k = 0; k < ds->nbuckets; k++) n += ds->buckets[k].label == label;
    const char *what = sp->video ? "clip" : "image";
    char caps[64], left_out[96] = "", frames[160] = "";
    if (small)
        snprintf(left_out, sizeof left_out, "; %lld below minimum_image_size %g left out", (long long)small,
                 c->minimum_image_size);
    char upto[24] = " or more";
    if (c->max_frames) snprintf(upto, sizeof upto, " to %d", c->max_frames);
    if (sp->video)
        snprintf(frames, sizeof frames, " of %d frames%s (bucket_strategy %s%s)", c->min_frames, upto,
                 c->resolution_frames ? "resolution_frames" : "aspect_ratio", c->frames_8k1 ? ", the model's 8 k + 1" : "");
    if (off_frames)
        snprintf(left_out + strlen(left_out), sizeof left_out - strlen(left_out), "; %lld of other lengths left out",
                 (long long)off_frames);
    fprintf(stderr, "data: backend '%s': %lld %ss%s in %s in %d aspect bucket%s (resolution %g %s, crop %s, "
            "crop_style %s, crop_aspect %s, alignment %d)%s, %lld sample%s each an epoch (repeats %lld), captions by "
            "%s\n", sp->id, (long long)b->count, what, frames, sp->dir, n, n == 1 ? "" : "s", c->resolution,
            res_types[c->resolution_type], c->crop ? "true" : "false", styles[c->crop_style], aspects[c->crop_aspect],
            c->alignment, left_out, (long long)(1 + b->repeats), b->repeats ? "s" : "", (long long)b->repeats,
            captions_by(sp, caps, sizeof caps));
    for (int k = 0; k < ds->nbuckets; k++) {
        const data_bucket *bk = &ds->buckets[k];
        if (bk->label != label) continue;
        char at[24] = "";
        if (bk->frames) snprintf(at, sizeof at, "@%d", bk->frames);
        fprintf(stderr, "data: backend '%s': bucket %s (%dx%d%s): %lld %s%s\n", sp->id, bk->name, bk->width, bk->height,
                at, (long long)bk->images, what, bk->images == 1 ? "" : "s");
    }
}

/* ---- opening ---- */

/* What opening a backend list holds until the dataset takes it. */
typedef struct opening {
    const char *path;
    const bucket_config *bucketed; /* the run's bucket settings; NULL: squares */
    cJSON *root;
    spec *specs;
    int nspecs, entries;
    char (*skipped)[160]; /* per entry: why it gives no images, or "" */
    scan sc;
    backend *backends;
    char **names;
    int64_t samples;
    bucketing bk;
} opening;

/* Reads path's list and each entry of it. */
static st_status read_list(opening *o)
{
    size_t n;
    char *text;
    st_status st = data_read_small(o->path, BACKEND_FILE_MAX, true, &text, &n);
    if (st) {
        if (errno == ENOMEM) return st;
        char why[512]; /* st_fail writes where st_error() reads */
        snprintf(why, sizeof why, "%s", st_error());
        return st_fail(ST_ERR_IO, "data_backend_config %s", why);
    }
    if (n == BACKEND_FILE_MAX)
        st = st_fail(ST_ERR_FORMAT, "data_backend_config %s: over %d MiB, too large for a list of backends", o->path,
                     BACKEND_FILE_MAX >> 20);
    else if (!(o->root = cJSON_ParseWithOpts(text, NULL, 1)))
        st = json_error(o->path, text, cJSON_GetErrorPtr());
    else if (!cJSON_IsArray(o->root))
        st = st_fail(ST_ERR_FORMAT, "data_backend_config %s: expected a JSON list of backends ([{\"id\": ...}, ...])",
                     o->path);
    free(text);
    o->entries = st ? 0 : cJSON_GetArraySize(o->root);
    o->specs = calloc((size_t)o->entries + 1, sizeof *o->specs);
    o->skipped = calloc((size_t)o->entries + 1, sizeof *o->skipped);
    if (!st && (!o->specs || !o->skipped)) st = data_oom();
    int i = 0;
    for (const cJSON *e = o->root ? o->root->child : NULL; e && !st; e = e->next, i++) {
        st = read_entry(o->path, i, e, o->bucketed, &o->specs[o->nspecs], o->skipped[i], sizeof o->skipped[i]);
        if (!st && o->specs[o->nspecs].id) o->nspecs++;
    }
    if (!st) st = check_unique_ids(o->path, o->root);
    if (!st && !o->nspecs)
        st = st_fail(ST_ERR_INVALID, "data_backend_config %s: no enabled image backend (%d entr%s: disabled or "
                     "caches); segtrain trains on local image folders (type local, instance_data_dir)", o->path,
                     o->entries, o->entries == 1 ? "y" : "ies");
    return st;
}

/* Walks every backend's folder into o->sc (squares: through edges below the model's `resolution`). */
static st_status scan_backends(opening *o, int resolution)
{
    seen sn = {0};
    o->backends = calloc((size_t)o->nspecs, sizeof *o->backends);
    o->names = calloc((size_t)o->nspecs, sizeof *o->names);
    st_status st = !o->backends || !o->names ? data_oom() : ST_OK;
    for (int b = 0; b < o->nspecs && !st; b++) {
        const spec *sp = &o->specs[b];
        const where w = {o->path, sp->id, 0};
        const int64_t first = o->sc.n, skipped_before = o->sc.skipped;
        struct stat sb;
        const bool missing = stat(sp->dir, &sb) != 0;
        if (missing || !S_ISDIR(sb.st_mode))
            st = refuse(&w, ST_ERR_IO, "instance_data_dir %s: %s%s", sp->dir,
                        missing ? strerror(errno) : "not a folder", sp->given_dir[0] == '/' ? "" : " (a relative "
                        "instance_data_dir is taken from the working directory, as SimpleTuner takes it)");
        sn.n = 0; /* a folder under two backends is read by both */
        if (!st) st = walk(&o->sc, &sn, &w, sp, sp->dir, b, 0);
        if (!st && o->sc.n == first)
            st = refuse(&w, ST_ERR_FORMAT, "no usable %s in %s (%lld skipped)", sp->video ? "clip (a folder of PNG "
                        "frames)" : "PNG image", sp->dir, (long long)(o->sc.skipped - skipped_before));
        if (st) break;
        const int64_t edge = sp->resolution > 0 ? square_edge(sp->resolution, sp->res_type) : 0;
        o->backends[b] = (backend){.first = first, .count = o->sc.n - first, .repeats = sp->repeats,
                                   .crop_style = sp->crop_style, .edge = edge && edge < resolution ? (int)edge : 0};
        o->samples += o->backends[b].count * (1 + sp->repeats);
        if (o->samples > SAMPLES_MAX)
            st = refuse(&w, ST_ERR_INVALID, "%lld images with repeats %lld make over %lld samples an epoch; lower "
                        "repeats", (long long)o->backends[b].count, (long long)sp->repeats, SAMPLES_MAX);
        if (!st && !(o->names[b] = strdup(sp->id))) st = data_oom();
    }
    free(sn.dev);
    free(sn.ino);
    return st;
}

/* The dataset o's backends make, and their lines; o's parts pass to it. */
static st_status make_dataset(opening *o, int resolution, uint64_t seed, dataset **out)
{
    dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return data_oom();
    *ds = (dataset){.kind = KIND_FOLDER, .resolution = resolution, .classes = o->nspecs, .count = o->samples,
                    .seed = seed, .class_names = o->names, .items = o->sc.items, .nitems = o->sc.n,
                    .backends = o->backends, .places = o->bk.places, .buckets = o->bk.buckets, .nbuckets = o->bk.n};
    o->names = NULL, o->sc = (scan){0}, o->backends = NULL, o->bk.places = NULL, o->bk.buckets = NULL;
    st_status st = o->bucketed ? data_list_bucket_samples(ds) : ST_OK;
    if (st) {
        dataset_close(ds);
        return st;
    }
    for (int b = 0; b < o->nspecs; b++)
        if (o->bucketed) report_buckets(&o->specs[b], &ds->backends[b], ds, o->bk.small[b], o->bk.off_frames[b]);
        else report_backend(&o->specs[b], &ds->backends[b], resolution);
    int i = 0;
    for (const cJSON *e = o->root->child; e; e = e->next, i++)
        if (o->skipped[i][0]) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
            fprintf(stderr, "data: backend '%s': %s\n", id->valuestring, o->skipped[i]);
        }
    *out = ds;
    return ST_OK;
}

static st_status open_backends(const char *path, int resolution, const bucket_config *bucketed, uint64_t seed,
                               dataset **out)
{
    *out = NULL;
    opening o = {.path = path, .bucketed = bucketed};
    st_status st = read_list(&o);
    if (!st) st = scan_backends(&o, resolution);
    if (!st && bucketed) {
        st = assign_buckets(path, o.specs, o.nspecs, o.backends, &o.sc, seed, &o.bk);
        o.samples = 0;
        for (int b = 0; !st && b < o.nspecs; b++) o.samples += o.backends[b].count * (1 + o.backends[b].repeats);
    }
    if (!st) st = make_dataset(&o, resolution, seed, out);
    for (int64_t k = 0; k < o.sc.n; k++) free(o.sc.items[k].path), free(o.sc.items[k].caption);
    free(o.sc.items);
    if (o.names) data_free_names(o.names, o.nspecs);
    free(o.backends);
    free(o.bk.places);
    free(o.bk.buckets);
    free(o.bk.small);
    free(o.bk.off_frames);
    for (int b = 0; o.specs && b <= o.nspecs; b++) free(o.specs[b].dir), free(o.specs[b].prompt);
    free(o.specs);
    free(o.skipped);
    cJSON_Delete(o.root);
    return st;
}

st_status dataset_open_backends(const char *path, int resolution, uint64_t seed, dataset **out)
{
    *out = NULL;
    st_status st = data_check_resolution(resolution);
    return st ? st : open_backends(path, resolution, NULL, seed, out);
}

st_status dataset_open_backend_buckets(const char *path, const bucket_config *defaults, uint64_t seed, dataset **out)
{
    return open_backends(path, 0, defaults, seed, out);
}
