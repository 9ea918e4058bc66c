/* SimpleTuner's bucket assignment (see segtrain/buckets.h). Each function below names the SimpleTuner function whose
 * rule it follows; Python's arithmetic is kept where it decides a pixel: round() rounds half to even, round(x, n)
 * rounds x's exact value to n decimals, int() truncates, and int / int is a correctly rounded double. */
#include "segtrain/buckets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/rng.h"

struct bucket_size_entry {
    double megapixels, aspect;
    int w, h;
};

typedef struct size2 {
    int w, h;
} size2;

/* One sample's settings after the pixel_area conversion, and the sample. */
typedef struct job {
    bucket_config c;
    bucket_state *s;
    int w, h; /* original size */
    double target_area;
    int pixel_resolution;
} job;

void bucket_config_default(bucket_config *c)
{
    memset(c, 0, sizeof *c);
    c->resolution = 1024;
    c->resolution_type = BUCKET_PIXEL;
    c->max_upscale_threshold = -1;
    c->crop_style = BUCKET_CROP_RANDOM;
    c->crop_aspect = BUCKET_ASPECT_SQUARE;
    c->alignment = 64;
    c->rounding = 2;
}

void bucket_state_free(bucket_state *s)
{
    free(s->entries);
    memset(s, 0, sizeof *s);
}

/* Python's round(x, n): x's exact binary value to n decimals, ties to even (printf's exact conversion does both). */
static double round_digits(double x, int n)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.*f", n, x);
    return strtod(buf, NULL);
}

/* MultiaspectImage._round_to_nearest_multiple */
static int round_multiple(double value, int multiple)
{
    double r = nearbyint(value / multiple) * multiple;
    return r < multiple ? multiple : (int)r;
}

/* MultiaspectImage.calculate_image_aspect_ratio of a (w, h) */
static double aspect_of(const job *j, int w, int h)
{
    return round_digits((double)w / (double)h, j->c.rounding);
}

static struct bucket_size_entry *map_find(bucket_state *s, double mp, double aspect)
{
    for (int i = 0; i < s->n; i++)
        if (s->entries[i].megapixels == mp && s->entries[i].aspect == aspect) return &s->entries[i];
    return NULL;
}

static st_status map_add(bucket_state *s, double mp, double aspect, int w, int h)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        struct bucket_size_entry *e = realloc(s->entries, (size_t)cap * sizeof *e);
        if (!e) return st_host_oom("the aspect bucket map (%d entries)", cap);
        s->entries = e;
        s->cap = cap;
    }
    s->entries[s->n++] = (struct bucket_size_entry){mp, aspect, w, h};
    return ST_OK;
}

/* MultiaspectImage.calculate_new_size_by_pixel_edge: target and intermediary of an edge of resolution. */
static void size_by_edge(const job *j, double aspect, double resolution, size2 *target, size2 *inter)
{
    double raw = (double)j->w / (double)j->h;
    double wt, ht;
    if (j->w < j->h) {
        wt = resolution;
        ht = trunc(wt / aspect);
    } else {
        ht = resolution;
        wt = trunc(ht * aspect);
    }
    int wa = round_multiple(wt, j->c.alignment), ha = round_multiple(ht, j->c.alignment);
    double wi, hi;
    if (raw >= 1.0) {
        hi = fmax(ha, ht);
        wi = trunc(hi * raw);
        if (wi < wa) wi = wa, hi = trunc(wi / raw);
    } else {
        wi = fmax(wa, wt);
        hi = trunc(wi / raw);
        if (hi < ha) hi = ha, wi = trunc(hi * raw);
    }
    *target = (size2){wa, ha};
    *inter = (size2){(int)wi, (int)hi};
}

/* MultiaspectImage.calculate_new_size_by_pixel_area, with its read and write of the aspect map. */
static st_status size_by_area(job *j, double aspect, double mp, size2 *target, size2 *inter)
{
    int edge = round_multiple(trunc(sqrt(mp * 1e6)), j->c.alignment);
    if (aspect == 1.0 && j->w == j->h) {
        *target = *inter = (size2){edge, edge};
        return ST_OK;
    }
    int wt = round_multiple(edge * sqrt(aspect), j->c.alignment);
    int ht = round_multiple(edge / sqrt(aspect), j->c.alignment);
    double raw = (double)j->w / (double)j->h;
    int wi, hi;
    if (wt < ht) {
        wi = wt;
        hi = (int)(wi / raw);
    } else {
        hi = ht;
        wi = (int)(hi * raw);
    }
    double adjusted = aspect_of(j, wt, ht);
    struct bucket_size_entry *prev = map_find(j->s, mp, adjusted);
    if (prev) wt = prev->w, ht = prev->h;
    if (wt > wi || ht > hi) {
        int wd, hd;
        if (wt > wi) {
            wd = wt - wi;
            hd = (int)(wd / raw);
        } else {
            hd = ht - hi;
            wd = (int)(hd * raw);
        }
        hi += hd;
        wi += wd;
    }
    *target = (size2){wt, ht};
    *inter = (size2){wi, hi};
    return prev ? ST_OK : map_add(j->s, mp, adjusted, wt, ht);
}

/* TrainingSample.target_size_calculator: the calculator of the resolution type */
static st_status size_for(job *j, double aspect, double resolution, size2 *target, size2 *inter)
{
    if (j->c.resolution_type == BUCKET_PIXEL) {
        size_by_edge(j, aspect, resolution, target, inter);
        return ST_OK;
    }
    return size_by_area(j, aspect, resolution, target, inter);
}

/* MultiaspectImage.limit_canvas_size: one alignment off the longer edge, then off the other if still too large */
static size2 limit_canvas(size2 t, int64_t max, int align)
{
    bool width_first = t.w >= t.h; /* a stable sort by size, descending: width first on a tie */
    if (width_first) t.w -= align;
    else t.h -= align;
    if ((int64_t)t.w * t.h > max) {
        if (width_first) t.h -= align;
        else t.w -= align;
    }
    return t;
}

/* TrainingSample._limit_maximum_size: the model's largest canvas */
static size2 limit_maximum(const job *j, size2 t)
{
    int64_t max = j->c.max_canvas, canvas = (int64_t)t.w * t.h;
    if (!max || canvas <= max) return t;
    double scale = sqrt((double)max / (double)canvas);
    size2 n = {round_multiple(trunc(t.w * scale), j->c.alignment), round_multiple(trunc(t.h * scale), j->c.alignment)};
    if ((int64_t)n.w * n.h > max) n = limit_canvas(n, max, j->c.alignment);
    return n;
}

/* TrainingSample._trim_aspect_bucket_list: the buckets within max_upscale_threshold of the original size */
static st_status trim_aspects(job *j, double *out, int *n)
{
    *n = 0;
    for (int i = 0; i < j->c.n_crop_aspect_buckets; i++) {
        double a = j->c.crop_aspect_buckets[i];
        if (j->c.max_upscale_threshold >= 0) {
            size2 t, unused;
            st_status st = size_for(j, a, j->c.resolution, &t, &unused);
            if (st != ST_OK) return st;
            double m = 1 + j->c.max_upscale_threshold;
            if (!(t.w <= j->w * m && t.h <= j->h * m)) continue;
        }
        out[(*n)++] = a;
    }
    return ST_OK;
}

/* TrainingSample._select_random_aspect: closest to the sample's aspect (first on a tie), or a random draw: by weight
 * among all (the weighted form), or among those trim_aspects leaves */
static st_status select_aspect(job *j, double aspect, bucket_choose_fn choose, void *ctx, double *out)
{
    const bucket_config *c = &j->c;
    if (c->n_crop_aspect_buckets == 0) return st_fail(ST_ERR_INVALID, "crop_aspect random and closest need crop_aspect_buckets");
    if (c->crop_aspect == BUCKET_ASPECT_CLOSEST) {
        int best = 0;
        for (int i = 1; i < c->n_crop_aspect_buckets; i++)
            if (fabs(c->crop_aspect_buckets[i] - aspect) < fabs(c->crop_aspect_buckets[best] - aspect)) best = i;
        *out = c->crop_aspect_buckets[best];
        return ST_OK;
    }
    if (c->crop_aspect_weighted) {
        *out = choose(c->crop_aspect_buckets, c->crop_aspect_weights, c->n_crop_aspect_buckets, ctx);
        return ST_OK;
    }
    double avail[BUCKET_ASPECTS_MAX];
    int n;
    st_status st = trim_aspects(j, avail, &n);
    if (st != ST_OK) return st;
    *out = n ? choose(avail, NULL, n, ctx) : 1.0;
    return ST_OK;
}

/* TrainingSample.correct_intermediary_square_size */
static void square_intermediary(const job *j, double aspect, size2 *inter)
{
    if (aspect == 1.0 && inter->w < j->pixel_resolution) *inter = (size2){j->pixel_resolution, j->pixel_resolution};
}

/* TrainingSample.calculate_target_size */
static st_status target_size(job *j, bucket_choose_fn choose, void *ctx, size2 *target, size2 *inter, double *aspect)
{
    const bucket_config *c = &j->c;
    size2 unused;
    *aspect = aspect_of(j, j->w, j->h);
    if (c->crop && c->crop_aspect == BUCKET_ASPECT_SQUARE) {
        *target = limit_maximum(j, (size2){j->pixel_resolution, j->pixel_resolution});
        if (target->w != target->h) target->w = target->h = target->w < target->h ? target->w : target->h;
        st_status st = size_for(j, 1.0, c->resolution, &unused, inter);
        *aspect = 1.0;
        square_intermediary(j, *aspect, inter);
        return st;
    }
    if (c->crop && (c->crop_aspect == BUCKET_ASPECT_RANDOM || c->crop_aspect == BUCKET_ASPECT_CLOSEST)) {
        st_status st = select_aspect(j, *aspect, choose, ctx, aspect);
        if (st != ST_OK) return st;
    }
    st_status st = size_for(j, *aspect, c->resolution, target, inter);
    if (st != ST_OK) return st;
    *target = limit_maximum(j, *target);
    *aspect = aspect_of(j, target->w, target->h);
    square_intermediary(j, *aspect, inter);
    if (*aspect == 1.0) *target = (size2){j->pixel_resolution, j->pixel_resolution};
    return ST_OK;
}

/* TrainingSample._should_resize_before_crop and _calculate_target_downsample_size: the size a cropped sample is
 * resized to first when maximum_image_size and target_downsample_size are set (else the intermediary size). */
static st_status before_crop(job *j, size2 target, size2 *size)
{
    const bucket_config *c = &j->c;
    if (!c->crop || !c->maximum_image_size || !c->target_downsample_size) return ST_OK;
    int64_t area = (int64_t)j->w * j->h;
    bool resize = c->resolution_type == BUCKET_PIXEL
                      ? !(j->w == j->pixel_resolution && j->h == j->pixel_resolution)
                      : ((double)area != j->target_area || j->w < target.w || j->h < target.h);
    if (!resize) return ST_OK;
    size2 unused, d;
    st_status st = size_for(j, aspect_of(j, j->w, j->h), c->target_downsample_size, &unused, &d);
    if (st != ST_OK) return st;
    if (d.w < target.w) d = (size2){target.w, (int)(d.h * ((double)target.w / d.w))};
    else if (d.h < target.h) d = (size2){(int)(d.w * ((double)target.h / d.h)), target.h};
    *size = d;
    return ST_OK;
}

/* The crop handlers (cropping.py) on an image of size from, and trainingsample's center crop, which agrees with them
 * where the crop fits. */
static void crop_at(const job *j, size2 from, size2 target, bucket_sample *out)
{
    out->crop_top = out->crop_left = 0;
    if (j->c.crop_style == BUCKET_CROP_RANDOM) out->crop_top = out->crop_left = -1;
    else if (j->c.crop_style == BUCKET_CROP_CENTER) {
        out->crop_left = from.w > target.w ? (from.w - target.w) / 2 : 0;
        out->crop_top = from.h > target.h ? (from.h - target.h) / 2 : 0;
    }
}

/* TrainingSample._set_resolution, after the factory's pixel_area conversion (_handle_resolution_conversion) */
static void resolve(job *j)
{
    bucket_config *c = &j->c;
    if (c->resolution_type == BUCKET_PIXEL_AREA) {
        c->resolution_type = BUCKET_AREA;
        c->resolution = c->resolution * c->resolution / 1e6;
        double *sizes[3] = {&c->maximum_image_size, &c->target_downsample_size, &c->minimum_image_size};
        for (int i = 0; i < 3; i++)
            if (*sizes[i] > 0) *sizes[i] = *sizes[i] * *sizes[i] / 1e6;
    }
    if (c->resolution_type == BUCKET_PIXEL) {
        j->target_area = c->resolution;
        j->pixel_resolution = (int)c->resolution;
        return;
    }
    static const double mp[5] = {0.25, 0.5, 1.0, 2.0, 4.0}, edge[5] = {512, 768, 1024, 1536, 2048};
    j->target_area = c->resolution * 1e6;
    for (int i = 0; i < 5; i++)
        if (fabs(c->resolution - mp[i]) < 0.05) {
            j->target_area = edge[i] * edge[i];
            break;
        }
    j->pixel_resolution = round_multiple(sqrt(j->target_area), c->alignment);
}

/* MetadataBackend.meets_resolution_requirements: minimum_image_size (the resolution type's unit) */
static st_status big_enough(const job *j, bool *ok)
{
    const bucket_config *c = &j->c;
    double min = c->minimum_image_size;
    *ok = true;
    if (!min) return ST_OK;
    if (c->resolution_type == BUCKET_PIXEL) {
        *ok = min <= j->w && min <= j->h;
        return ST_OK;
    }
    if (min > 5) return st_fail(ST_ERR_INVALID, "minimum_image_size %g is in megapixels with resolution_type area: "
                                                 "use a value below 5", min);
    double area = min * 1e6;
    if (c->crop && c->crop_aspect == BUCKET_ASPECT_SQUARE) {
        double e = floor(sqrt(area));
        if (!(e <= j->w && e <= j->h)) *ok = false;
    }
    *ok = *ok && area <= (double)j->w * j->h;
    return ST_OK;
}

int bucket_adjust_frames(const bucket_config *c, int frames)
{
    return c->frames_8k1 && frames % 8 != 1 ? ((frames - 1) / 8 * 8 + 1 > 1 ? (frames - 1) / 8 * 8 + 1 : 1) : frames;
}

/* A video model's adjust_video_frames (8k+1), the frame limits, and the resolution_frames bucket */
static bool frames_fit(const bucket_config *c, int frames, bucket_sample *out)
{
    frames = bucket_adjust_frames(c, frames);
    out->frames = out->bucket_frames = frames;
    if ((c->min_frames && frames < c->min_frames) || (c->max_frames && frames > c->max_frames)) return false;
    if (c->resolution_frames && c->frame_interval > 0 && frames / c->frame_interval * c->frame_interval > 0)
        out->bucket_frames = frames / c->frame_interval * c->frame_interval;
    return true;
}

/* Python's repr of a float, as a bucket's name: the shortest digits that read back, with ".0" on a whole number. */
static void python_repr(double x, char *buf, size_t n)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, x);
        if (strtod(buf, NULL) == x) break;
    }
    if (!strpbrk(buf, ".e")) strncat(buf, ".0", n - strlen(buf) - 1);
}

st_status bucket_assign(const bucket_config *c, bucket_state *s, int w, int h, int frames, bucket_choose_fn choose,
                        void *choose_ctx, bucket_sample *out)
{
    memset(out, 0, sizeof *out);
    if (w <= 0 || h <= 0) return st_fail(ST_ERR_INVALID, "a sample of %dx%d pixels", w, h);
    job j = {.c = *c, .s = s, .w = w, .h = h};
    resolve(&j);
    bool ok = true;
    if (frames > 0) ok = frames_fit(c, frames, out);
    st_status st = ok ? big_enough(&j, &ok) : ST_OK;
    if (st != ST_OK || !ok) {
        out->skipped = true;
        return st;
    }
    size2 target, inter;
    st = target_size(&j, choose, choose_ctx, &target, &inter, &out->aspect);
    size2 from = c->crop ? inter : target;
    if (st == ST_OK && c->crop) st = before_crop(&j, target, &from);
    if (st != ST_OK) return st;
    if (!c->crop && (target.w != inter.w || target.h != inter.h)) from = inter;
    crop_at(&j, from, target, out);
    out->target_w = target.w, out->target_h = target.h, out->inter_w = inter.w, out->inter_h = inter.h;
    out->resize_w = from.w, out->resize_h = from.h;
    if (frames > 0 && c->resolution_frames)
        snprintf(out->key, sizeof out->key, "%dx%d@%d", target.w, target.h, out->bucket_frames);
    else python_repr(out->aspect, out->key, sizeof out->key);
    return ST_OK;
}

void bucket_epoch_free(bucket_epoch *e)
{
    free(e->index);
    free(e->first);
    memset(e, 0, sizeof *e);
}

/* Fisher-Yates over x[0..n) with draws (seed, stream, i): the same order for the same stream, however resumed */
static void shuffle(int64_t *x, int64_t n, uint64_t seed, uint64_t stream)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_u64(seed, stream, (uint64_t)i) % (uint64_t)(i + 1));
        int64_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

/* The batches of one bucket, appended to out (its samples repeated and shuffled, cut into whole batches) */
static void bucket_batches(const int *bucket_of, int64_t n, int b, int batch, int repeats, bool keep_small,
                           uint64_t seed, uint64_t stream, int64_t *tmp, bucket_epoch *out, int64_t *used)
{
    int64_t m = 0;
    for (int r = 0; r <= repeats; r++)
        for (int64_t i = 0; i < n; i++)
            if (bucket_of[i] == b) tmp[m++] = i;
    if (m == 0 || (m < batch && !keep_small)) return;
    shuffle(tmp, m, seed, stream);
    for (int64_t k = 0; k < m; k += batch) {
        int64_t len = m - k < batch ? m - k : batch;
        if (len < batch && k > 0) break; /* a remainder after whole batches is left out */
        out->first[out->n_batches++] = *used;
        memcpy(out->index + *used, tmp + k, (size_t)len * sizeof *tmp);
        *used += len;
    }
}

st_status bucket_epoch_make(const int *bucket_of, int64_t n, int n_buckets, int batch, int repeats, bool keep_small,
                            uint64_t seed, int64_t epoch, bucket_epoch *out)
{
    memset(out, 0, sizeof *out);
    if (batch < 1 || repeats < 0 || n_buckets < 1) return st_fail(ST_ERR_INVALID, "batches of %d, repeats %d", batch, repeats);
    for (int64_t i = 0; i < n; i++)
        if (bucket_of[i] < 0 || bucket_of[i] >= n_buckets)
            return st_fail(ST_ERR_INVALID, "sample %lld is in bucket %d of %d", (long long)i, bucket_of[i], n_buckets);
    int64_t total = n * (repeats + 1);
    int64_t *tmp = malloc((size_t)(total + 1) * sizeof *tmp);
    out->index = malloc((size_t)(total + 1) * sizeof *out->index);
    out->first = malloc((size_t)(total + 2) * sizeof *out->first);
    if (!tmp || !out->index || !out->first) {
        free(tmp);
        bucket_epoch_free(out);
        return st_host_oom("an epoch's order (%lld samples)", (long long)total);
    }
    uint64_t stream = rng_stream("bucket_epoch") ^ ((uint64_t)epoch * 0x9e3779b97f4a7c15ull);
    int64_t used_i = 0;
    for (int b = 0; b < n_buckets; b++)
        bucket_batches(bucket_of, n, b, batch, repeats, keep_small, seed, stream + 1 + (uint64_t)b, tmp, out, &used_i);
    /* the batches shuffled together: permute batch numbers, then lay the samples out in that order */
    int64_t *perm = malloc((size_t)(out->n_batches + 1) * sizeof *perm);
    if (!perm) {
        free(tmp);
        bucket_epoch_free(out);
        return st_host_oom("an epoch's batch order (%lld batches)", (long long)out->n_batches);
    }
    for (int64_t k = 0; k < out->n_batches; k++) perm[k] = k;
    shuffle(perm, out->n_batches, seed, stream);
    out->first[out->n_batches] = used_i;
    int64_t at = 0;
    for (int64_t k = 0; k < out->n_batches; k++) {
        int64_t b = perm[k], len = out->first[b + 1] - out->first[b];
        memcpy(tmp + at, out->index + out->first[b], (size_t)len * sizeof *tmp);
        perm[k] = at; /* the new start of batch k */
        at += len;
    }
    memcpy(out->index, tmp, (size_t)at * sizeof *tmp);
    memcpy(out->first, perm, (size_t)out->n_batches * sizeof *perm);
    out->first[out->n_batches] = at;
    free(perm);
    free(tmp);
    return ST_OK;
}
