/* Datasets, the epoch iterator and PNG grids (include/segtrain/data.h); SimpleTuner data backends are read by
 * backends.c into the same dataset (data_internal.h). PNG goes through libpng's simplified API (png_image): it
 * expands gray and palette, converts 16-bit and gamma to 8-bit sRGB, composites alpha, and reports every error as a
 * return value with a message instead of a longjmp. */
#include "data_internal.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "segtrain/fileio.h"
#include "segtrain/rng.h"

enum { SHAPE_CIRCLE, SHAPE_SQUARE, SHAPE_TRIANGLE, SHAPE_DIAMOND };

#define MAX_SIDE 16384              /* larger PNGs are refused rather than risking a huge allocation */
#define MAX_PIXELS (64ll << 20)     /* 64 Mpixel, 192 MiB decoded */

/* Builtin classes: each a shape and a colour (a colour names a class on its own; a shape spans two classes). */
static const struct {
    const char *name, *colour, *shape_word;
    int shape;
    unsigned char rgb[3];
} builtin_classes[] = {
    {"red circle", "red", "circle", SHAPE_CIRCLE, {220, 40, 40}},
    {"green square", "green", "square", SHAPE_SQUARE, {40, 180, 60}},
    {"blue triangle", "blue", "triangle", SHAPE_TRIANGLE, {50, 90, 230}},
    {"yellow diamond", "yellow", "diamond", SHAPE_DIAMOND, {240, 210, 40}},
    {"magenta circle", "magenta", "circle", SHAPE_CIRCLE, {210, 50, 210}},
    {"cyan square", "cyan", "square", SHAPE_SQUARE, {40, 210, 220}},
    {"orange triangle", "orange", "triangle", SHAPE_TRIANGLE, {245, 135, 30}},
    {"white diamond", "white", "diamond", SHAPE_DIAMOND, {245, 245, 245}},
};
#define BUILTIN_CLASSES ((int)(sizeof builtin_classes / sizeof builtin_classes[0]))

/* Backgrounds are dark or muted so that every shape colour stands out on every one of them. */
static const struct {
    const char *word;
    unsigned char rgb[3];
} builtin_backgrounds[] = {
    {"black", {18, 18, 22}},    {"gray", {110, 110, 115}}, {"navy", {20, 30, 95}},
    {"brown", {105, 65, 30}},   {"dark green", {20, 80, 40}}, {"maroon", {100, 20, 45}},
};
#define BUILTIN_BACKGROUNDS ((int)(sizeof builtin_backgrounds / sizeof builtin_backgrounds[0]))

struct data_iter {
    const dataset *ds;
    uint64_t seed;
    data_position pos;
    int64_t *perm, perm_epoch; /* perm is the order of epoch perm_epoch (-1: none yet) */
    /* bucket mode (batch > 0): the samples not pruned and the bucket of each, and the batches of epoch `made`
     * (-1: none yet), whose indices are into kept */
    int64_t batch, batches, made, *kept, nkept;
    int *bucket_of;
    bucket_epoch order;
};

st_status data_oom(void) { return st_host_oom("the data set"); }

char *data_join_path(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* Copies n bytes of src into a CAPTION_MAX buffer, cutting a long caption at a UTF-8 character boundary. */
static void copy_caption_n(char *dst, const char *src, size_t n)
{
    if (n >= CAPTION_MAX) {
        n = CAPTION_MAX - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) n--;
    }
    memcpy(dst, src, n);
    dst[n] = 0;
}

static void copy_caption(char *dst, const char *src) { copy_caption_n(dst, src, strlen(src)); }

st_status data_check_resolution(int resolution)
{
    if (resolution < DATA_MIN_RESOLUTION || resolution > DATA_MAX_RESOLUTION)
        return st_fail(ST_ERR_INVALID, "data: resolution must be in [%d, %d], got %d", DATA_MIN_RESOLUTION,
                       DATA_MAX_RESOLUTION, resolution);
    return ST_OK;
}

/* ---- builtin scenes ---- */

static bool inside(int shape, double x, double y, double s)
{
    switch (shape) {
    case SHAPE_CIRCLE: return x * x + y * y <= s * s;
    case SHAPE_SQUARE: return fabs(x) <= 0.8 * s && fabs(y) <= 0.8 * s;
    case SHAPE_TRIANGLE: return y <= 0.5 * s && fabs(x) <= (y + s) * 0.5773502691896258; /* pointing up, r = s */
    default: return fabs(x) + fabs(y) <= s;
    }
}

static void builtin_get(const dataset *ds, int64_t index, float *image, int64_t *label, char *caption)
{
    const int c = (int)(index % BUILTIN_CLASSES); /* balanced classes */
    const uint64_t seed = ds->seed, i = (uint64_t)index;
    const int bg = (int)(rng_u64(seed, rng_stream("data.builtin.background"), i) % BUILTIN_BACKGROUNDS);
    if (label) *label = c;
    if (caption)
        snprintf(caption, CAPTION_MAX, "%s %s %s on a %s background",
                 strchr("aeiou", builtin_classes[c].colour[0]) ? "an" : "a", builtin_classes[c].colour,
                 builtin_classes[c].shape_word, builtin_backgrounds[bg].word);
    if (!image) return;

    const int R = ds->resolution;
    /* Every shape fits in the box center +- s, kept a pixel inside the frame so corners show the background. */
    const double s = R * (0.20 + 0.14 * rng_uniform(seed, rng_stream("data.builtin.size"), i));
    const double span = fmax(0.0, R - 2 * s - 2);
    const double cx = s + 1 + span * rng_uniform(seed, rng_stream("data.builtin.x"), i);
    const double cy = s + 1 + span * rng_uniform(seed, rng_stream("data.builtin.y"), i);
    float fg[3], back[3];
    for (int ch = 0; ch < 3; ch++) {
        fg[ch] = builtin_classes[c].rgb[ch] / 255.0f;
        const double tint = 0.16 * (rng_uniform(seed, rng_stream("data.builtin.tint"), 3 * i + (uint64_t)ch) - 0.5);
        back[ch] = (float)fmin(1.0, fmax(0.0, builtin_backgrounds[bg].rgb[ch] / 255.0 + tint));
    }
    for (int y = 0; y < R; y++)
        for (int x = 0; x < R; x++) {
            int hits = 0; /* 4x4 supersampled coverage: antialiased edges */
            for (int sy = 0; sy < 4; sy++)
                for (int sx = 0; sx < 4; sx++)
                    hits += inside(builtin_classes[c].shape, x + (sx + 0.5) / 4 - cx, y + (sy + 0.5) / 4 - cy, s);
            const float cov = hits / 16.0f;
            for (int ch = 0; ch < 3; ch++)
                image[((int64_t)ch * R + y) * R + x] = 2.0f * (cov * fg[ch] + (1.0f - cov) * back[ch]) - 1.0f;
        }
}

st_status dataset_open_builtin(int resolution, int64_t count, uint64_t seed, dataset **out)
{
    *out = NULL;
    st_status st = data_check_resolution(resolution);
    if (st) return st;
    if (count < 1)
        return st_fail(ST_ERR_INVALID, "data: builtin dataset size must be >= 1, got %lld", (long long)count);
    dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return data_oom();
    ds->kind = KIND_BUILTIN;
    ds->resolution = resolution;
    ds->classes = BUILTIN_CLASSES;
    ds->count = count;
    ds->seed = seed;
    *out = ds;
    return ST_OK;
}

/* ---- PNG decoding, crop and resize ---- */

/* libpng allocates a chunk's declared length before it reads the chunk, and png_image downgrades libpng's own chunk
 * limit (png_set_chunk_malloc_max) to a warning and gives no handle to tighten it before it reads every chunk up to
 * the image data: a 57-byte file whose sPLT claims 1.1 GB cost 1.1 GB. So chunk lengths are checked here first.
 * IDAT is exempt (libpng streams it through a small buffer; a truncated one is reported by the decode). The limit
 * is 64 rows of the widest image accepted in 16-bit RGBA (8 MiB, about libpng's default): no metadata chunk of a
 * training image comes near it. */
#define PNG_CHUNK_MAX (MAX_SIDE * 8L * 64)

static st_status check_png_chunks(const char *path, FILE *fp)
{
    const long size = fseek(fp, 0, SEEK_END) ? -1 : ftell(fp);
    long at = 8; /* after the signature */
    unsigned char h[8];
    /* A header with no room for its CRC is still read: a chunk in the last 8-11 bytes is allocated all the same. */
    while (at + 8 <= size && !fseek(fp, at, SEEK_SET) && fread(h, 1, 8, fp) == 8) {
        const long len = (long)((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3]);
        bool letters = true; /* else libpng refuses the chunk type before it allocates */
        for (int i = 4; i < 8; i++) letters = letters && (h[i] | 32) >= 'a' && (h[i] | 32) <= 'z';
        if (!letters || !memcmp(h + 4, "IEND", 4)) break;
        if (memcmp(h + 4, "IDAT", 4) && len > PNG_CHUNK_MAX)
            return st_fail(ST_ERR_FORMAT, "%s: chunk %.4s at byte %ld claims %ld bytes; the limit is %ld", path,
                           (const char *)h + 4, at, len, PNG_CHUNK_MAX);
        if (memcmp(h + 4, "IDAT", 4) && len + 4 > size - at - 8) /* its data and CRC */
            return st_fail(ST_ERR_FORMAT, "%s: chunk %.4s at byte %ld claims %ld bytes, but only %ld follow its header "
                           "(truncated or corrupt)", path, (const char *)h + 4, at, len, size - at - 8);
        at += 12 + len;
    }
    rewind(fp);
    return ST_OK;
}

/* Decodes path to 8-bit RGB, alpha composited over white. */
static st_status load_png(const char *path, unsigned char **pixels, int *width, int *height)
{
    *pixels = NULL;
    FILE *fp;
    st_status st = file_fopen_regular(path, &fp);
    if (st) return st;
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    st = check_png_chunks(path, fp);
    unsigned char *buf = NULL;
    if (!st && !png_image_begin_read_from_stdio(&img, fp)) {
        st = st_fail(ST_ERR_FORMAT, "%s: not a readable PNG (%s)", path, img.message);
    } else if (!st && (img.width > MAX_SIDE || img.height > MAX_SIDE || (int64_t)img.width * img.height > MAX_PIXELS)) {
        st = st_fail(ST_ERR_FORMAT, "%s: %ux%u is larger than the %lld-pixel limit", path, img.width, img.height,
                     MAX_PIXELS);
    } else if (!st) {
        img.format = PNG_FORMAT_RGB;
        img.flags |= PNG_IMAGE_FLAG_16BIT_sRGB; /* untagged 16-bit files are sRGB in practice */
        buf = malloc(PNG_IMAGE_SIZE(img));
        static const png_color white = {255, 255, 255};
        if (!buf) st = data_oom();
        else if (!png_image_finish_read(&img, &white, buf, 0, NULL))
            st = st_fail(ST_ERR_FORMAT, "%s: corrupt or truncated PNG (%s)", path, img.message);
    }
    png_image_free(&img);
    fclose(fp);
    if (st) {
        free(buf);
        return st;
    }
    *pixels = buf;
    *width = (int)img.width;
    *height = (int)img.height;
    return ST_OK;
}

/* Resampling weights from S source pixels to R output pixels along one axis: output o reads `count[o]` sources
 * from `first[o]` with weights w[o * taps ...]. Shrinking averages the area [o S/R, (o+1) S/R) covers; growing is
 * bilinear with pixel centers at +0.5 (align_corners = false), clamped at the edges. */
typedef struct resampler {
    int taps, *first, *count;
    double *w;
} resampler;

static st_status resampler_init(resampler *r, int S, int R)
{
    const double scale = (double)S / R;
    r->taps = S >= R ? (int)ceil(scale) + 1 : 2;
    r->first = malloc(sizeof(int) * (size_t)R);
    r->count = malloc(sizeof(int) * (size_t)R);
    r->w = malloc(sizeof(double) * (size_t)R * (size_t)r->taps);
    if (!r->first || !r->count || !r->w) return data_oom();
    for (int o = 0; o < R; o++) {
        double *w = r->w + (size_t)o * r->taps;
        if (S >= R) {
            const double lo = o * scale, hi = (o + 1) * scale;
            int j0 = (int)floor(lo), j1 = (int)ceil(hi);
            if (j1 > S) j1 = S;
            r->first[o] = j0;
            r->count[o] = j1 - j0;
            for (int j = j0; j < j1; j++) w[j - j0] = (fmin(hi, j + 1.0) - fmax(lo, (double)j)) / scale;
        } else {
            double f = fmin(fmax((o + 0.5) * scale - 0.5, 0.0), S - 1.0);
            int j0 = (int)floor(f);
            if (j0 > S - 2) j0 = S > 1 ? S - 2 : 0; /* so j0 + 1 stays inside; t becomes 1 at the last pixel */
            const double t = f - j0;
            r->first[o] = j0;
            r->count[o] = S > 1 ? 2 : 1;
            w[0] = S > 1 ? 1.0 - t : 1.0;
            w[1] = t;
        }
    }
    return ST_OK;
}

static void resampler_free(resampler *r)
{
    free(r->first);
    free(r->count);
    free(r->w);
}

/* One image region resampled: the sw x sh pixels at (x0, y0) of an RGB image `width` pixels wide, scaled to
 * rw x rh, of which the out_w x out_h window at (left, top) is written as CHW floats in [-1, 1]. */
typedef struct region {
    int x0, y0, sw, sh, rw, rh, left, top, out_w, out_h;
} region;

static st_status resample(const unsigned char *px, int width, const region *g, float *image)
{
    resampler rx = {0}, ry = {0};
    st_status st = resampler_init(&rx, g->sw, g->rw);
    if (!st) st = resampler_init(&ry, g->sh, g->rh);
    int lo = g->sh, hi = 0; /* the source rows the window reads */
    for (int o = g->top; !st && o < g->top + g->out_h; o++) {
        lo = ry.first[o] < lo ? ry.first[o] : lo;
        hi = ry.first[o] + ry.count[o] > hi ? ry.first[o] + ry.count[o] : hi;
    }
    const int W = g->out_w;
    double *rows = st ? NULL : malloc(sizeof(double) * (size_t)(hi > lo ? hi - lo : 1) * (size_t)W * 3);
    if (!st && !rows) st = data_oom();
    if (!st) {
        for (int y = lo; y < hi; y++) { /* horizontal pass: the window's columns of each row read */
            const unsigned char *src = px + ((size_t)(g->y0 + y) * (size_t)width + (size_t)g->x0) * 3;
            for (int x = 0; x < W; x++)
                for (int ch = 0; ch < 3; ch++) {
                    const int o = g->left + x;
                    const double *w = rx.w + (size_t)o * rx.taps;
                    double acc = 0;
                    for (int k = 0; k < rx.count[o]; k++) acc += w[k] * src[(rx.first[o] + k) * 3 + ch];
                    rows[((size_t)(y - lo) * W + x) * 3 + ch] = acc;
                }
        }
        const int64_t plane = (int64_t)g->out_h * W;
        for (int y = 0; y < g->out_h; y++)
            for (int x = 0; x < W; x++)
                for (int ch = 0; ch < 3; ch++) {
                    const int o = g->top + y;
                    double acc = 0;
                    for (int k = 0; k < ry.count[o]; k++)
                        acc += ry.w[(size_t)o * ry.taps + k] * rows[((size_t)(ry.first[o] + k - lo) * W + x) * 3 + ch];
                    const double v = acc * (2.0 / 255.0) - 1.0;
                    image[ch * plane + (int64_t)y * W + x] = (float)fmin(1.0, fmax(-1.0, v));
                }
    }
    resampler_free(&rx);
    resampler_free(&ry);
    free(rows);
    return st;
}

/* Resamples the S x S square at (x0, y0) of an RGB image `width` pixels wide to R x R CHW floats in [-1, 1]. */
static st_status crop_resize(const unsigned char *px, int width, int x0, int y0, int S, int R, float *image)
{
    const region g = {x0, y0, S, S, R, R, 0, 0, R, R};
    return resample(px, width, &g, image);
}

/* Item `index` (px, w x h) as the model sees it: the square of its shorter side at the backend's crop position
 * (the center without a backend), resampled to the dataset's resolution; through the backend's edge first when
 * that is smaller than the square, as 8-bit pixels, as SimpleTuner's resized image is. */
static st_status square_image(const dataset *ds, const backend *b, int64_t index, const unsigned char *px, int w, int h,
                              float *image)
{
    const int S = w < h ? w : h, slack = (w > h ? w : h) - S, E = b ? b->edge : 0, R = ds->resolution;
    int off = slack / 2;
    if (b && b->crop_style == CROP_CORNER) off = 0;
    else if (b && b->crop_style == CROP_RANDOM)
        off = (int)(rng_u64(ds->seed, rng_stream("data.crop"), (uint64_t)index) % (uint64_t)(slack + 1));
    const int x0 = w > h ? off : 0, y0 = w > h ? 0 : off;
    if (!E || E >= S) return crop_resize(px, w, x0, y0, S, R, image);
    float *mid = malloc(sizeof(float) * 3 * (size_t)E * (size_t)E);
    unsigned char *mid8 = malloc(3 * (size_t)E * (size_t)E);
    st_status st = mid && mid8 ? crop_resize(px, w, x0, y0, S, E, mid) : data_oom();
    for (int64_t k = 0; !st && k < (int64_t)E * E; k++)
        for (int ch = 0; ch < 3; ch++)
            mid8[k * 3 + ch] = (unsigned char)lrintf((mid[ch * (int64_t)E * E + k] + 1.0f) * 127.5f);
    if (!st) st = crop_resize(mid8, E, 0, 0, E, R, image);
    free(mid);
    free(mid8);
    return st;
}

/* Item `index` (px, w x h) of a bucketed dataset: the whole image resampled to its resize size and its bucket's
 * window cut from it at its crop's top left (SimpleTuner's resize, then crop, in one pass). */
static st_status bucket_image(const dataset *ds, int64_t index, const unsigned char *px, int w, int h, float *image)
{
    const place *p = &ds->places[index];
    const data_bucket *b = &ds->buckets[p->bucket];
    const region g = {0, 0, w, h, p->resize_w, p->resize_h, p->left, p->top, b->width, b->height};
    return resample(px, w, &g, image);
}

/* ---- folder datasets ---- */

static bool has_ext(const char *name, const char *ext)
{
    size_t n = strlen(name), e = strlen(ext);
    return n > e && strcasecmp(name + n - e, ext) == 0;
}

bool data_is_png(const char *name) { return has_ext(name, ".png"); }

bool data_is_other_image(const char *name)
{
    static const char *const exts[] = {".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff"};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++)
        if (has_ext(name, exts[i])) return true;
    return false;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void data_free_names(char **names, int n)
{
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* The non-hidden entries of dir, sorted by name (so sample order and labels do not depend on the filesystem). */
st_status data_list_dir(const char *dir, char ***out, int *count)
{
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return st_fail(ST_ERR_IO, "%s: cannot read folder: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    st_status st = ST_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(names, sizeof(char *) * (size_t)cap);
            if (!grown) {
                st = data_oom();
                break;
            }
            names = grown;
        }
        if (!(names[n] = strdup(e->d_name))) {
            st = data_oom();
            break;
        }
        n++;
    }
    closedir(d);
    if (st) {
        data_free_names(names, n);
        return st;
    }
    if (n) qsort(names, (size_t)n, sizeof(char *), cmp_str);
    *out = names;
    *count = n;
    return ST_OK;
}

bool data_is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* *out: the first `max` bytes of a file, NUL-terminated (*n: their count, which is max when there may be more).
 * With pipes, a pipe or FIFO is read too (file_fopen_stream). On failure *out is NULL, errno says why (ENOENT: no
 * such file) and the status's line names the path. */
st_status data_read_small(const char *path, size_t max, bool pipes, char **out, size_t *n)
{
    FILE *fp;
    *out = NULL;
    *n = 0;
    st_status st = pipes ? file_fopen_stream(path, &fp) : file_fopen_regular(path, &fp);
    if (st) return st;
    char *buf = malloc(max + 1);
    *n = buf ? fread(buf, 1, max, fp) : 0;
    const bool failed = buf && ferror(fp);
    fclose(fp);
    if (!buf) {
        st = data_oom();
        errno = ENOMEM; /* what the callers test, whatever the message's formatting left there */
        return st;
    }
    if (failed) {
        free(buf);
        st = st_fail(ST_ERR_IO, "%s: cannot read: %s", path, strerror(EIO));
        errno = EIO;
        return st;
    }
    buf[*n] = 0;
    *out = buf;
    return ST_OK;
}

/* Folds every whitespace run of s[0, n) to one space and trims both ends, in place; returns the new length. */
size_t data_fold_space(char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char ch = s[i];
        const bool space = ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
        if (!space) s[o++] = ch;
        else if (o > 0 && s[o - 1] != ' ') s[o++] = ' ';
    }
    if (o > 0 && s[o - 1] == ' ') o--;
    s[o] = 0;
    return o;
}

/* *out: the caption file's text, folded to one line cut to CAPTION_MAX; NULL when there is none (the default
 * caption applies). One that exists but cannot be read (a FIFO, no permission) is an error: its caption would be
 * lost. */
static st_status read_caption(const char *path, char **out)
{
    size_t n;
    char *buf;
    *out = NULL;
    st_status st = data_read_small(path, CAPTION_FILE_MAX, false, &buf, &n);
    if (st) return errno == ENOENT ? ST_OK : st;
    data_fold_space(buf, n);
    char caption[CAPTION_MAX];
    copy_caption(caption, buf);
    free(buf);
    return (*out = strdup(caption)) ? ST_OK : data_oom();
}

static void report_skip(const char *why) { st_warn("data: skipped %s", why); }

/* Appends a sample; takes path and caption (freed on failure). */
st_status data_add_item(scan *sc, char *path, char *caption, int label)
{
    if (sc->n == sc->cap) {
        sc->cap = sc->cap ? 2 * sc->cap : 64;
        item *grown = realloc(sc->items, sizeof(item) * (size_t)sc->cap);
        if (grown) sc->items = grown;
        else sc->cap = sc->n;
    }
    if (!path || !caption || sc->n == sc->cap) {
        free(caption);
        free(path);
        return data_oom();
    }
    sc->items[sc->n++] = (item){.path = path, .caption = caption, .label = label};
    return ST_OK;
}

/* *ok: whether the image file `path` (base name `name`) is a PNG that decodes (then *width x *height is its size,
 * where width is not NULL); one that is not is reported on stderr and counted. The full decode costs about 1 ms per
 * 256x256 image: the price of catching a truncated file before training starts rather than in the middle of a run.
 * A cut anywhere up to the last image chunk's CRC is caught; a file missing only its final IEND chunk still decodes
 * every pixel and is kept. */
st_status data_check_png(scan *sc, const char *path, const char *name, bool *ok, int *width, int *height)
{
    *ok = false;
    if (!data_is_png(name)) {
        st_warn("data: skipped %s: unsupported image format (only PNG is read)", path);
        sc->skipped++;
        return ST_OK;
    }
    unsigned char *px;
    int w, h;
    st_status st = load_png(path, &px, &w, &h);
    free(px);
    if (!st && width) *width = w, *height = h;
    if (st == ST_ERR_IO || st == ST_ERR_FORMAT) {
        report_skip(st_error()); /* the message starts with the path */
        sc->skipped++;
        return ST_OK;
    }
    *ok = !st;
    return st;
}

/* Adds the usable PNGs of folder as samples of label (class_mode_top: only reports images lying beside the class
 * subfolders). */
static st_status scan_folder(scan *sc, const char *folder, int label, const char *default_caption, bool class_mode_top)
{
    char **names;
    int n;
    st_status st = data_list_dir(folder, &names, &n);
    if (st) return st;
    for (int i = 0; i < n && !st; i++) {
        char *path = data_join_path(folder, names[i]);
        if (!path) {
            st = data_oom();
            break;
        }
        if (data_is_dir(path) || !(data_is_png(names[i]) || data_is_other_image(names[i]))) {
            free(path); /* subfolders (handled by the caller) and non-image files */
            continue;
        }
        if (class_mode_top) {
            st_warn("data: skipped %s: an image outside the class subfolders", path);
            sc->skipped++;
            free(path);
            continue;
        }
        bool ok;
        if ((st = data_check_png(sc, path, names[i], &ok, NULL, NULL)) || !ok) {
            free(path);
            continue;
        }
        /* the caption: a.png -> a.txt beside it */
        char *caption = NULL;
        size_t stem = strlen(path) - 4;
        char *txt = malloc(stem + 5);
        if (txt) {
            memcpy(txt, path, stem);
            memcpy(txt + stem, ".txt", 5);
            st = read_caption(txt, &caption);
            free(txt);
        }
        if (!txt || st) { /* not the default caption: the sample's own one is there */
            free(path);
            st = st ? st : data_oom();
            break;
        }
        if (!caption) caption = strdup(default_caption);
        st = data_add_item(sc, path, caption, label);
    }
    data_free_names(names, n);
    return st;
}

static void free_dataset(dataset *ds)
{
    if (!ds) return;
    if (ds->items)
        for (int64_t i = 0; i < ds->nitems; i++) {
            free(ds->items[i].path);
            free(ds->items[i].caption);
        }
    free(ds->items);
    if (ds->class_names) data_free_names(ds->class_names, ds->classes);
    free(ds->backends);
    free(ds->null_text);
    free(ds->places);
    free(ds->buckets);
    free(ds->bucket_samples);
    free(ds);
}

st_status dataset_open_folder(const char *dir, int resolution, dataset **out)
{
    *out = NULL;
    st_status st = data_check_resolution(resolution);
    if (st) return st;
    char **names;
    int n;
    if ((st = data_list_dir(dir, &names, &n))) return st;

    /* Class mode when dir has subfolders: they are the classes, in sorted order. */
    char **classes = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    int nclasses = 0;
    bool oom = !classes;
    for (int i = 0; i < n && !oom; i++) {
        char *path = data_join_path(dir, names[i]);
        oom = !path; /* not "no class": a folder left out would shift every label after it */
        if (path && data_is_dir(path)) classes[nclasses++] = names[i], names[i] = NULL;
        free(path);
    }
    data_free_names(names, n);
    if (oom) {
        data_free_names(classes, nclasses);
        return data_oom();
    }

    scan sc = {0};
    if (nclasses == 0) {
        /* flat: one class named after the folder */
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/') len--;
        size_t start = len;
        while (start > 0 && dir[start - 1] != '/') start--;
        classes[0] = malloc(len - start + 1);
        if (!classes[0]) st = data_oom();
        else {
            memcpy(classes[0], dir + start, len - start);
            classes[0][len - start] = 0;
            nclasses = 1;
            st = scan_folder(&sc, dir, 0, "", false);
        }
    } else {
        st = scan_folder(&sc, dir, 0, "", true); /* only to report images left outside the class folders */
        for (int c = 0; c < nclasses && !st; c++) {
            char *sub = data_join_path(dir, classes[c]);
            st = sub ? scan_folder(&sc, sub, c, classes[c], false) : data_oom();
            free(sub);
        }
    }

    dataset *ds = calloc(1, sizeof *ds);
    if (!ds && !st) st = data_oom();
    if (ds) {
        ds->kind = KIND_FOLDER;
        ds->resolution = resolution;
        ds->classes = nclasses;
        ds->class_names = classes;
        ds->items = sc.items;
        ds->count = ds->nitems = sc.n;
    } else {
        data_free_names(classes, nclasses);
        for (int64_t i = 0; i < sc.n; i++) free(sc.items[i].path), free(sc.items[i].caption);
        free(sc.items);
    }
    if (!st && sc.n == 0)
        st = st_fail(ST_ERR_FORMAT, "%s: no usable PNG image (%lld skipped)", dir, (long long)sc.skipped);
    if (st) {
        free_dataset(ds);
        return st;
    }
    *out = ds;
    return ST_OK;
}

void dataset_close(dataset *ds) { free_dataset(ds); }

int64_t dataset_size(const dataset *ds) { return ds->count; }
int dataset_resolution(const dataset *ds) { return ds->resolution; }
int dataset_channels(const dataset *ds) { return ds->kind == KIND_CACHE ? (int)ds->channels : 3; }
int dataset_classes(const dataset *ds) { return ds->classes; }

int dataset_buckets(const dataset *ds) { return ds->nbuckets; }

const data_bucket *dataset_bucket(const dataset *ds, int b)
{
    return b >= 0 && b < ds->nbuckets ? &ds->buckets[b] : NULL;
}

/* The item of sample index (index in range), and its backend (*of, NULL without backends): a backend's samples are
 * its images 1 + repeats times over. */
static int64_t item_of(const dataset *ds, int64_t index, const backend **of)
{
    *of = NULL;
    for (int c = 0; ds->backends && c < ds->classes; c++) {
        const backend *b = *of = &ds->backends[c];
        const int64_t n = b->count * (1 + b->repeats);
        if (index < n) return b->first + index % b->count;
        index -= n;
    }
    return index;
}

int dataset_bucket_of(const dataset *ds, int64_t index)
{
    const backend *b;
    return ds->places && index >= 0 && index < ds->count ? ds->places[item_of(ds, index, &b)].bucket : -1;
}

/* Each bucket's samples (its images' places given), ascending, in one array: a backend's samples are its images
 * 1 + repeats times over. */
st_status data_list_bucket_samples(dataset *ds)
{
    int64_t *at = malloc(sizeof *at * (size_t)ds->nbuckets), end = 0;
    ds->bucket_samples = malloc(sizeof *ds->bucket_samples * (size_t)(ds->count ? ds->count : 1));
    if (!at || !ds->bucket_samples) return free(at), data_oom();
    for (int k = 0; k < ds->nbuckets; k++) {
        data_bucket *b = &ds->buckets[k];
        b->count = b->images * (1 + ds->backends[b->label].repeats);
        b->samples = ds->bucket_samples + end;
        at[k] = end;
        end += b->count;
    }
    int64_t s = 0;
    for (int c = 0; c < ds->classes; c++) {
        const backend *b = &ds->backends[c];
        for (int64_t r = 0; r <= b->repeats; r++)
            for (int64_t i = b->first; i < b->first + b->count; i++)
                ds->bucket_samples[at[ds->places[i].bucket]++] = s++;
    }
    free(at);
    return ST_OK;
}

int64_t dataset_images(const dataset *ds) { return ds->kind == KIND_BUILTIN ? ds->count : ds->nitems; }

st_status dataset_placement(const dataset *ds, int64_t image, data_placement *out)
{
    *out = (data_placement){0};
    if (!ds->places || image < 0 || image >= ds->nitems)
        return st_fail(ST_ERR_INVALID, "data: image %lld of %s", (long long)image,
                       ds->places ? "a dataset with fewer" : "a dataset that is not bucketed");
    const item *e = &ds->items[image];
    const place *p = &ds->places[image];
    *out = (data_placement){e->path, e->label, p->bucket, e->w, e->h, p->resize_w, p->resize_h, p->top, p->left,
                            e->frames};
    return ST_OK;
}

const char *dataset_class_name(const dataset *ds, int label)
{
    if (label < 0 || label >= ds->classes) return NULL;
    return ds->kind == KIND_BUILTIN ? builtin_classes[label].name : ds->class_names[label];
}

/* Sample `index` of epoch `epoch`: the epoch picks among an image's captions, so that each is seen. A cache's
 * sample gives its latents as the image, and its conditioning into cond when that is not NULL. */
static st_status get_sample(const dataset *ds, int64_t index, int64_t epoch, float *image, int64_t *label,
                            char *caption, float *cond)
{
    if (index < 0 || index >= ds->count)
        return st_fail(ST_ERR_INVALID, "data: sample %lld is out of range [0, %lld)", (long long)index,
                       (long long)ds->count);
    if (ds->kind == KIND_BUILTIN) {
        builtin_get(ds, index, image, label, caption);
        return ST_OK;
    }
    const backend *b;
    const int64_t at = item_of(ds, index, &b);
    const item *e = &ds->items[at];
    if (label) *label = e->label;
    if (caption) {
        const char *text = e->caption, *end;
        int64_t lines = 1;
        for (const char *p = text; (p = strchr(p, '\n')) != NULL; p++) lines++;
        if (lines > 1) {
            const uint64_t stream = rng_stream("data.caption");
            int64_t k = (int64_t)(rng_u64(rng_u64(ds->seed, stream, (uint64_t)epoch), stream, (uint64_t)index) %
                                  (uint64_t)lines);
            while (k-- > 0) text = strchr(text, '\n') + 1;
        }
        end = strchr(text, '\n');
        copy_caption_n(caption, text, end ? (size_t)(end - text) : strlen(text));
    }
    if (ds->kind == KIND_CACHE && !(image || cond)) return ST_OK;
    if (ds->kind == KIND_CACHE) { /* a bucketed cache's latents are its bucket's shape */
        const data_bucket *bk = ds->places ? &ds->buckets[ds->places[at].bucket] : NULL;
        return cache_read(ds, e->path, bk ? bk->frames : ds->frames > 1 ? ds->frames : 0,
                          bk ? bk->height : ds->resolution, bk ? bk->width : ds->resolution, image, cond, true);
    }
    if (!image) return ST_OK;
    if (e->frames) /* run_buckets refuses a video backend before this */
        return st_fail(ST_ERR_UNSUPPORTED, "data: %s is a clip: segtrain reads clips only to place them in buckets",
                       e->path);
    unsigned char *px;
    int w, h;
    st_status st = load_png(e->path, &px, &w, &h); /* can only fail if the file changed since open */
    if (!st) st = ds->places ? bucket_image(ds, at, px, w, h, image) : square_image(ds, b, at, px, w, h, image);
    free(px);
    return st;
}

st_status dataset_get(const dataset *ds, int64_t index, float *image, int64_t *label, char *caption)
{
    return get_sample(ds, index, 0, image, label, caption, NULL);
}

/* ---- the iterator ---- */

static void shuffle(data_iter *it, int64_t epoch)
{
    const int64_t n = it->ds->count;
    const uint64_t stream = rng_stream("data.shuffle"), key = rng_u64(it->seed, stream, (uint64_t)epoch);
    for (int64_t i = 0; i < n; i++) it->perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates; modulo bias is below n / 2^64 */
        const int64_t j = (int64_t)(rng_u64(key, stream, (uint64_t)i) % (uint64_t)(i + 1));
        const int64_t t = it->perm[i];
        it->perm[i] = it->perm[j];
        it->perm[j] = t;
    }
    it->perm_epoch = epoch;
}

st_status data_iter_create(const dataset *ds, uint64_t seed, data_iter **out)
{
    *out = NULL;
    if (ds->nbuckets) /* its samples are of several sizes: a batch must keep to one */
        return st_fail(ST_ERR_INVALID, "data: a bucketed dataset's batches come from data_iter_create_buckets");
    data_iter *it = calloc(1, sizeof *it);
    if (it) it->perm = malloc(sizeof(int64_t) * (size_t)ds->count);
    if (!it || !it->perm) {
        free(it);
        return data_oom();
    }
    it->ds = ds;
    it->seed = seed;
    it->perm_epoch = -1;
    *out = it;
    return ST_OK;
}

void data_iter_destroy(data_iter *it)
{
    if (!it) return;
    free(it->perm);
    free(it->kept);
    free(it->bucket_of);
    bucket_epoch_free(&it->order);
    free(it);
}

/* Bucket mode: the batches of epoch `epoch` in it->order. Every bucket left is kept whole: one that is short of a
 * batch gives one short batch. */
static st_status make_epoch(data_iter *it, int64_t epoch)
{
    if (it->made == epoch) return ST_OK;
    bucket_epoch_free(&it->order);
    it->made = -1;
    st_status st = bucket_epoch_make(it->bucket_of, it->nkept, it->ds->nbuckets, (int)it->batch, 0, true, it->seed,
                                     epoch, &it->order);
    if (!st) it->made = epoch;
    return st;
}

/* Whether bucket b is pruned from batches of `batch`: SimpleTuner prunes a bucket short of a batch (repeats
 * counted) only in a backend with a minimum_image_size (_enforce_min_bucket_size returns early without one), and
 * never under disable_bucket_pruning (keep_small); a line says so. */
static bool pruned(const dataset *ds, int b, int64_t batch, bool keep_small)
{
    const data_bucket *bk = &ds->buckets[b];
    const bool out = !keep_small && ds->backends[bk->label].prunes && bk->count < batch;
    if (out)
        st_warn("data: backend '%s': bucket %s (%dx%d) left out: %lld sample%s, fewer than a batch of %lld "
                "(disable_bucket_pruning keeps it)", ds->class_names[bk->label], bk->name, bk->width, bk->height,
                (long long)bk->count, bk->count == 1 ? "" : "s", (long long)batch);
    return out;
}

st_status data_iter_create_buckets(const dataset *ds, uint64_t seed, int64_t batch, bool keep_small, data_iter **out)
{
    *out = NULL;
    if (!ds->nbuckets)
        return st_fail(ST_ERR_INVALID, "data: bucket batches need a bucketed dataset (dataset_open_backend_buckets)");
    if (batch < 1 || batch > INT32_MAX)
        return st_fail(ST_ERR_INVALID, "data: batch size must be in [1, %d], got %lld", INT32_MAX, (long long)batch);
    data_iter *it = calloc(1, sizeof *it);
    int *bucket_of = malloc(sizeof(int) * (size_t)ds->count);
    int64_t *kept = malloc(sizeof(int64_t) * (size_t)ds->count);
    if (!it || !bucket_of || !kept) {
        free(it), free(bucket_of), free(kept);
        return data_oom();
    }
    *it = (data_iter){.ds = ds, .seed = seed, .perm_epoch = -1, .batch = batch, .made = -1, .kept = kept,
                      .bucket_of = bucket_of};
    for (int b = 0; b < ds->nbuckets; b++) {
        if (pruned(ds, b, batch, keep_small)) continue;
        for (int64_t k = 0; k < ds->buckets[b].count; k++)
            kept[it->nkept] = ds->buckets[b].samples[k], bucket_of[it->nkept++] = b;
    }
    st_status st = it->nkept ? make_epoch(it, 0) : ST_OK;
    it->batches = it->order.n_batches; /* the same every epoch: each bucket's count of batches */
    if (!st && !it->batches) {
        int largest = 0;
        for (int b = 1; b < ds->nbuckets; b++)
            largest = ds->buckets[b].count > ds->buckets[largest].count ? b : largest;
        st = st_fail(ST_ERR_INVALID, "data: every bucket has fewer samples than a batch of %lld (the largest, %s "
                     "(%dx%d) of backend '%s', has %lld): lower train_batch_size or set disable_bucket_pruning",
                     (long long)batch, ds->buckets[largest].name, ds->buckets[largest].width,
                     ds->buckets[largest].height, ds->class_names[ds->buckets[largest].label],
                     (long long)ds->buckets[largest].count);
    }
    if (st) {
        data_iter_destroy(it);
        return st;
    }
    *out = it;
    return ST_OK;
}

int64_t data_iter_epoch_batches(const data_iter *it) { return it->batches; }

int64_t data_iter_bucket_batches(const data_iter *it, int b)
{
    int64_t n = 0;
    for (int64_t k = 0; it->batch && k < it->order.n_batches; k++) /* any epoch's order has every epoch's count */
        n += it->bucket_of[it->order.index[it->order.first[k]]] == b;
    return n;
}

st_status data_iter_peek_bucket(data_iter *it, int *bucket)
{
    *bucket = -1;
    if (!it->batch) return st_fail(ST_ERR_INVALID, "data: the iterator is not in bucket mode");
    st_status st = make_epoch(it, it->pos.epoch);
    if (!st) *bucket = it->bucket_of[it->order.index[it->order.first[it->pos.index]]]; /* indices into kept */
    return st;
}

/* Bucket mode's data_iter_next_share: batch `pos.index` of the epoch, a short one filled up by its own samples. */
static st_status next_bucket_share(data_iter *it, int64_t batch, int64_t first, int64_t count, float *images,
                                   int64_t *labels, char (*captions)[CAPTION_MAX], int64_t *indices, float *text,
                                   int64_t text_stride)
{
    if (batch != it->batch)
        return st_fail(ST_ERR_INVALID, "data: a batch of %lld from bucket batches of %lld", (long long)batch,
                       (long long)it->batch);
    st_status st = make_epoch(it, it->pos.epoch);
    if (st) return st;
    const int64_t at = it->order.first[it->pos.index], len = it->order.first[it->pos.index + 1] - at;
    const data_bucket *bk = &it->ds->buckets[it->bucket_of[it->order.index[at]]];
    const int64_t per = (int64_t)dataset_channels(it->ds) * (bk->frames > 1 ? bk->frames : 1) * bk->width * bk->height;
    for (int64_t b = 0; b < count; b++) {
        const int64_t index = it->kept[it->order.index[at + (first + b) % len]];
        st = get_sample(it->ds, index, it->pos.epoch, images ? images + b * per : NULL, labels ? labels + b : NULL,
                        captions ? captions[b] : NULL, text ? text + b * text_stride : NULL);
        if (st) return st; /* it->pos untouched: the same batch is tried again */
        if (indices) indices[b] = index;
    }
    if (++it->pos.index == it->batches) it->pos = (data_position){it->pos.epoch + 1, 0};
    return ST_OK;
}

data_position data_iter_position(const data_iter *it) { return it->pos; }

st_status data_iter_seek(data_iter *it, data_position pos)
{
    const int64_t n = it->batch ? it->batches : it->ds->count;
    if (pos.epoch < 0 || pos.index < 0 || pos.index > n || (pos.index == n && pos.epoch == INT64_MAX))
        return st_fail(ST_ERR_INVALID, "data: position (epoch %lld, index %lld) is invalid for %lld %s",
                       (long long)pos.epoch, (long long)pos.index, (long long)n,
                       it->batch ? "batches an epoch" : "samples");
    if (pos.index == n) pos = (data_position){pos.epoch + 1, 0}; /* the end of an epoch is the next one's start */
    it->pos = pos;
    return ST_OK;
}

st_status data_iter_next_share(data_iter *it, int64_t batch, int64_t first, int64_t count, float *images,
                               int64_t *labels, char (*captions)[CAPTION_MAX], int64_t *indices, float *text,
                               int64_t text_stride)
{
    if (batch < 1) return st_fail(ST_ERR_INVALID, "data: batch size must be >= 1, got %lld", (long long)batch);
    if (first < 0 || count < 0 || first + count > batch)
        return st_fail(ST_ERR_INVALID, "data: the share %lld + %lld is outside a batch of %lld", (long long)first,
                       (long long)count, (long long)batch);
    if (it->batch)
        return next_bucket_share(it, batch, first, count, images, labels, captions, indices, text, text_stride);
    const dataset *ds = it->ds;
    const int64_t n = ds->count, per = (int64_t)dataset_channels(ds) * (ds->frames > 1 ? ds->frames : 1) *
                                      ds->resolution * ds->resolution;
    data_position pos = it->pos;
    for (int64_t g = 0; g < batch; g++) { /* every position of the batch passes; only the share is read */
        if (pos.epoch != it->perm_epoch) shuffle(it, pos.epoch);
        const int64_t index = it->perm[pos.index], b = g - first;
        if (b >= 0 && b < count) {
            st_status st = get_sample(ds, index, pos.epoch, images ? images + b * per : NULL,
                                      labels ? labels + b : NULL, captions ? captions[b] : NULL,
                                      text ? text + b * text_stride : NULL);
            if (st) return st; /* it->pos untouched: the same batch is tried again */
            if (indices) indices[b] = index;
        }
        if (++pos.index == n) pos = (data_position){pos.epoch + 1, 0};
    }
    it->pos = pos;
    return ST_OK;
}

st_status data_iter_next_with_text(data_iter *it, int64_t batch, float *images, int64_t *labels,
                                   char (*captions)[CAPTION_MAX], int64_t *indices, float *text, int64_t text_stride)
{
    return data_iter_next_share(it, batch, 0, batch, images, labels, captions, indices, text, text_stride);
}

st_status data_iter_next_batch(data_iter *it, int64_t batch, float *images, int64_t *labels,
                               char (*captions)[CAPTION_MAX], int64_t *indices)
{
    return data_iter_next_with_text(it, batch, images, labels, captions, indices, NULL, 0);
}

/* ---- PNG grids ---- */

st_status png_write_grid(const char *path, const float *images, int n, int channels, int h, int w, int cols)
{
    enum { GAP = 2 };
    if (n < 1 || (channels != 1 && channels != 3) || h < 1 || w < 1 || cols < 1 || !images)
        return st_fail(ST_ERR_INVALID, "%s: bad grid (n %d, channels %d, %dx%d, cols %d)", path, n, channels, h, w,
                       cols);
    if (cols > n) cols = n;
    const int rows = (n + cols - 1) / cols;
    const int64_t W = (int64_t)cols * w + (int64_t)(cols - 1) * GAP, H = (int64_t)rows * h + (int64_t)(rows - 1) * GAP;
    if (W > MAX_SIDE * 4 || H > MAX_SIDE * 4 || W * H > MAX_PIXELS)
        return st_fail(ST_ERR_INVALID, "%s: a %lldx%lld grid is too large", path, (long long)W, (long long)H);
    unsigned char *buf = malloc((size_t)(W * H * channels));
    if (!buf) return data_oom();
    memset(buf, 255, (size_t)(W * H * channels)); /* gaps and empty cells */
    for (int k = 0; k < n; k++) {
        const int64_t ox = (int64_t)(k % cols) * (w + GAP), oy = (int64_t)(k / cols) * (h + GAP);
        const float *img = images + (int64_t)k * channels * h * w;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int ch = 0; ch < channels; ch++) {
                    const float v = (img[((int64_t)ch * h + y) * w + x] + 1.0f) * 127.5f;
                    const float c = v >= 0.0f ? (v <= 255.0f ? v : 255.0f) : 0.0f; /* NaN -> 0 */
                    buf[((oy + y) * W + ox + x) * channels + ch] = (unsigned char)lrintf(c);
                }
    }
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)W;
    img.height = (png_uint_32)H;
    img.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    atomic_file af;
    st_status st = atomic_file_open(&af, path);
    if (!st) {
        /* the simplified writer does png_init_io on af.fp: libpng writes into the temporary file */
        if (!png_image_write_to_stdio(&img, af.fp, 0, buf, 0, NULL)) {
            st = st_fail(ST_ERR_IO, "%s: cannot write PNG: %s", path, img.message);
            atomic_file_abort(&af);
        } else {
            st = atomic_file_commit(&af);
        }
    }
    png_image_free(&img);
    free(buf);
    return st;
}
