/* SimpleTuner data backends (docs/DATA.md): dataset_open_backends reads a multidatabackend.json and scans each
 * enabled image backend's folder into a dataset whose classes are the backends (data_internal.h). */
#include "data_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/magic.h>
#include <sys/vfs.h>
#endif

#define BACKEND_FILE_MAX (16 << 20) /* a backend list is a few KiB; this refuses a wrong file early */
#define REPEATS_MAX 1000000
#define SAMPLES_MAX (1ll << 26) /* the iterator keeps the order of every sample: 512 MiB at this many */
/* A dataset's folders nest a few deep and number hundreds at most; past these a walk has wandered off (a link to
 * the root) and would take hours, so it stops with an error. */
#define WALK_DEPTH_MAX 32
#define WALK_FOLDERS_MAX 100000

enum { CAP_FILENAME, CAP_TEXTFILE, CAP_INSTANCEPROMPT };
enum { RES_PIXEL, RES_AREA, RES_PIXEL_AREA };

/* One enabled image backend, as its entry gives it. */
typedef struct spec {
    const char *id, *given_dir;
    char *dir;    /* instance_data_dir, absolute */
    char *prompt; /* instance_prompt, one a line (a list gives several); NULL when not given */
    int strategy, crop_style, res_type;
    bool crop, square_aspect, prepend, only_prompt, no_split;
    double resolution; /* 0: not given */
    int64_t repeats;
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
    if (type == RES_PIXEL) return resolution < 1e9 ? (int64_t)resolution : 1000000000;
    const double mp = type == RES_PIXEL_AREA ? resolution * resolution / 1e6 : resolution;
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

static bool used_key(const char *key)
{
    static const char *const keys[] = {"id", "type", "dataset_type", "disabled", "disable", "instance_data_dir",
                                       "caption_strategy", "instance_prompt", "prepend_instance_prompt",
                                       "only_instance_prompt", "disable_multiline_split", "resolution",
                                       "resolution_type", "crop", "crop_style", "crop_aspect", "repeats"};
    return choice(key, keys, (int)(sizeof keys / sizeof keys[0])) >= 0;
}

/* Reads one entry. *sp->id stays NULL for an entry that gives no images (disabled, a cache): `skipped` then
 * says why. */
/* One warning naming every key of entry e that segtrain neither reads nor knows to be idle. */
static st_status warn_unknown_keys(const char *file, const char *id, const cJSON *e)
{
    size_t len = 0;
    for (const cJSON *k = e->child; k; k = k->next)
        if (!used_key(k->string) && !idle_key(k->string)) len += strlen(k->string) + 2; /* ", " or the '\0' */
    if (!len) return ST_OK;
    char *unknown = malloc(len), *at = unknown;
    if (!unknown) return data_oom();
    for (const cJSON *k = e->child; k; k = k->next)
        if (!used_key(k->string) && !idle_key(k->string)) at += sprintf(at, "%s%s", at > unknown ? ", " : "", k->string);
    st_warn("data: warning: %s: backend '%s': ignoring keys segtrain does not read: %s", file, id, unknown);
    free(unknown);
    return ST_OK;
}

static st_status read_entry(const char *file, int index, const cJSON *e, spec *sp, char *skipped, size_t nskipped)
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
    static const char *const others[] = {"video", "audio", "conditioning", "eval", "caption", "distillation_cache",
                                         "grounding"};
    const int cache = choice(dtype, caches, 3);
    if (cache >= 0) {
        snprintf(skipped, nskipped, "%s cache, not needed: %s", dtype,
                 cache == 0 ? "segtrain encodes captions itself" : "segtrain trains in pixel space, with no VAE");
        return ST_OK;
    }
    if (choice(dtype, others, 7) >= 0)
        return refuse(&w, ST_ERR_UNSUPPORTED, "a %s dataset (dataset_type %s); segtrain reads local image folders "
                      "(dataset_type image, type local)", dtype, dtype);
    if (strcmp(dtype, "image"))
        return refuse(&w, ST_ERR_INVALID, "dataset_type %s is not one of SimpleTuner's (image, video, audio, "
                      "conditioning, eval, caption, text_embeds, image_embeds, conditioning_image_embeds, "
                      "distillation_cache, grounding)", dtype);
    if (strcmp(type, "local"))
        return refuse(&w, ST_ERR_UNSUPPORTED, "type %s; segtrain reads local image folders only (type local, with "
                      "instance_data_dir)", type);

    *sp = (spec){.id = id, .crop_style = CROP_RANDOM, .res_type = RES_PIXEL_AREA, .square_aspect = true};
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
    static const char *const res_types[] = {"pixel", "area", "pixel_area"};
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
    if (res_type && (sp->res_type = choice(res_type, res_types, 3)) < 0)
        return refuse(&w, ST_ERR_INVALID, "resolution_type %s is not pixel, area or pixel_area", res_type);
    if (sp->resolution < 0 || (sp->resolution > 0 && sp->res_type == RES_PIXEL && sp->resolution < 1))
        return refuse(&w, ST_ERR_INVALID, "resolution %g is not a %s", sp->resolution,
                      sp->res_type == RES_AREA ? "positive number of megapixels" : "positive number of pixels");
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
    return warn_unknown_keys(file, id, e);
}

/* The caption(s) of an image, one a line, as SimpleTuner's PromptHandler builds them. */
static st_status make_caption(const where *w, const spec *sp, const char *path, char **out)
{
    *out = NULL;
    if (sp->only_prompt || sp->strategy == CAP_INSTANCEPROMPT)
        return (*out = strdup(sp->prompt)) ? ST_OK : data_oom();
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path, *dot = strrchr(base, '.');
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

/* Adds the usable PNGs under dir (recursively, hidden entries skipped, in name order) as samples of label. */
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
    for (int i = 0; i < n && !st; i++) {
        char *path = data_join_path(dir, names[i]), *caption = NULL;
        bool ok = false;
        if (!path) st = data_oom();
        else if (data_is_dir(path)) st = walk(sc, sn, w, sp, path, label, depth + 1);
        else if ((data_is_png(names[i]) || data_is_other_image(names[i])) &&
                 !(st = data_check_png(sc, path, names[i], &ok)) && ok && !(st = make_caption(w, sp, path, &caption))) {
            st = data_add_item(sc, path, caption, label);
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

/* One line on what a backend gives, and wherever it differs from what SimpleTuner would train on, why. */
static void report_backend(const spec *sp, const backend *b, int R)
{
    static const char *const strategies[] = {"filename", "textfile", "instanceprompt"};
    static const char *const styles[] = {"center", "corner", "random"};
    static const char *const res_types[] = {"pixel", "area", "pixel_area"};
    char size[160], model[64] = "";
    const int64_t edge = sp->resolution > 0 ? square_edge(sp->resolution, sp->res_type) : R;
    if (edge != R) snprintf(model, sizeof model, ", resampled to the model's %d", R);
    snprintf(size, sizeof size, "%lld-pixel squares (resolution %g %s)%s", (long long)edge, sp->resolution,
             res_types[sp->res_type], model);
    if (sp->resolution <= 0) snprintf(size, sizeof size, "squares of the model's %d (no resolution given)", R);
    fprintf(stderr, "data: backend '%s': %lld images in %s, %lld sample%s each an epoch (repeats %lld), captions "
            "by %s%s, %s square crop%s, %s\n", sp->id, (long long)b->count, sp->dir, (long long)(1 + b->repeats),
            b->repeats ? "s" : "", (long long)b->repeats,
            sp->only_prompt ? "instance_prompt (only_instance_prompt)" : strategies[sp->strategy],
            sp->prepend && !sp->only_prompt && sp->strategy != CAP_INSTANCEPROMPT ? " after instance_prompt" : "",
            styles[b->crop_style],
            !sp->crop ? " (crop is false, but the model takes squares)"
            : sp->square_aspect ? "" : " (crop_aspect is not square, but the model takes squares)", size);
}

st_status dataset_open_backends(const char *path, int resolution, uint64_t seed, dataset **out)
{
    *out = NULL;
    st_status st = data_check_resolution(resolution);
    if (st) return st;
    size_t n;
    char *text;
    if ((st = data_read_small(path, BACKEND_FILE_MAX, true, &text, &n))) {
        if (errno == ENOMEM) return st;
        char why[512]; /* st_fail writes where st_error() reads */
        snprintf(why, sizeof why, "%s", st_error());
        return st_fail(ST_ERR_IO, "data_backend_config %s", why);
    }
    cJSON *root = NULL;
    if (n == BACKEND_FILE_MAX)
        st = st_fail(ST_ERR_FORMAT, "data_backend_config %s: over %d MiB, too large for a list of backends", path,
                     BACKEND_FILE_MAX >> 20);
    else if (!(root = cJSON_ParseWithOpts(text, NULL, 1)))
        st = json_error(path, text, cJSON_GetErrorPtr());
    else if (!cJSON_IsArray(root))
        st = st_fail(ST_ERR_FORMAT, "data_backend_config %s: expected a JSON list of backends ([{\"id\": ...}, ...])",
                     path);
    free(text);
    const int entries = st ? 0 : cJSON_GetArraySize(root);
    spec *specs = calloc((size_t)entries + 1, sizeof *specs);
    char (*skipped)[160] = calloc((size_t)entries + 1, sizeof *skipped);
    if (!st && (!specs || !skipped)) st = data_oom();
    int nspecs = 0, i = 0;
    for (const cJSON *e = root ? root->child : NULL; e && !st; e = e->next, i++) {
        st = read_entry(path, i, e, &specs[nspecs], skipped[i], sizeof skipped[i]);
        if (!st && specs[nspecs].id) nspecs++;
    }
    if (!st) st = check_unique_ids(path, root);
    if (!st && !nspecs)
        st = st_fail(ST_ERR_INVALID, "data_backend_config %s: no enabled image backend (%d entr%s: disabled or "
                     "caches); segtrain trains on local image folders (type local, instance_data_dir)", path, entries,
                     entries == 1 ? "y" : "ies");

    scan sc = {0};
    seen sn = {0};
    backend *backends = st ? NULL : calloc((size_t)nspecs, sizeof *backends);
    char **names = st ? NULL : calloc((size_t)nspecs, sizeof *names);
    if (!st && (!backends || !names)) st = data_oom();
    int64_t samples = 0;
    for (int b = 0; b < nspecs && !st; b++) {
        const spec *sp = &specs[b];
        const where w = {path, sp->id, 0};
        const int64_t first = sc.n, skipped_before = sc.skipped;
        struct stat sb;
        const bool missing = stat(sp->dir, &sb) != 0;
        if (missing || !S_ISDIR(sb.st_mode))
            st = refuse(&w, ST_ERR_IO, "instance_data_dir %s: %s%s", sp->dir,
                        missing ? strerror(errno) : "not a folder", sp->given_dir[0] == '/' ? "" : " (a relative "
                        "instance_data_dir is taken from the working directory, as SimpleTuner takes it)");
        sn.n = 0; /* a folder under two backends is read by both */
        if (!st) st = walk(&sc, &sn, &w, sp, sp->dir, b, 0);
        if (!st && sc.n == first)
            st = refuse(&w, ST_ERR_FORMAT, "no usable PNG image in %s (%lld skipped)", sp->dir,
                        (long long)(sc.skipped - skipped_before));
        if (st) break;
        const int64_t edge = sp->resolution > 0 ? square_edge(sp->resolution, sp->res_type) : 0;
        backends[b] = (backend){.first = first, .count = sc.n - first, .repeats = sp->repeats,
                                .crop_style = sp->crop_style, .edge = edge && edge < resolution ? (int)edge : 0};
        samples += backends[b].count * (1 + sp->repeats);
        if (samples > SAMPLES_MAX)
            st = refuse(&w, ST_ERR_INVALID, "%lld images with repeats %lld make over %lld samples an epoch; lower "
                        "repeats", (long long)backends[b].count, (long long)sp->repeats, SAMPLES_MAX);
        if (!st && !(names[b] = strdup(sp->id))) st = data_oom();
    }
    free(sn.dev);
    free(sn.ino);

    dataset *ds = st ? NULL : calloc(1, sizeof *ds);
    if (!st && !ds) st = data_oom();
    if (!st) {
        *ds = (dataset){.kind = KIND_FOLDER, .resolution = resolution, .classes = nspecs, .count = samples,
                        .seed = seed, .class_names = names, .items = sc.items, .nitems = sc.n, .backends = backends};
        for (int b = 0; b < nspecs; b++) report_backend(&specs[b], &backends[b], resolution);
        i = 0;
        for (const cJSON *e = root->child; e; e = e->next, i++)
            if (skipped[i][0]) {
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
                fprintf(stderr, "data: backend '%s': %s\n", id->valuestring, skipped[i]);
            }
        *out = ds;
    } else {
        for (int64_t k = 0; k < sc.n; k++) free(sc.items[k].path), free(sc.items[k].caption);
        free(sc.items);
        if (names) data_free_names(names, nspecs);
        free(backends);
    }
    for (int b = 0; specs && b <= nspecs; b++) free(specs[b].dir), free(specs[b].prompt);
    free(specs);
    free(skipped);
    cJSON_Delete(root);
    return st;
}
