/* SimpleTuner's aspect buckets: which bucket a sample of a dataset falls in, at which size it is trained, and the
 * intermediary size and crop it gets there, by the rules of SimpleTuner's multiaspect helpers (MultiaspectImage,
 * TrainingSample.prepare, the crop handlers, MetadataBackend's size and frame checks and video buckets), as
 * scripts/bucket_table.py works them through SimpleTuner's own code into tests/fixtures/buckets/table.csv.
 *
 * SimpleTuner keeps one map per resolution from a bucket's aspect to the first size computed for it (the
 * StateTracker's aspect resolution map), and later samples of that aspect take that size: the assignment depends on
 * the order of the samples, and bucket_state is that map. Give every sample of a dataset, in SimpleTuner's order,
 * to one bucket_state. */
#ifndef SEGTRAIN_BUCKETS_H
#define SEGTRAIN_BUCKETS_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/status.h"

typedef enum { BUCKET_PIXEL, BUCKET_AREA, BUCKET_PIXEL_AREA } bucket_resolution_type;
typedef enum { BUCKET_CROP_CENTER, BUCKET_CROP_CORNER, BUCKET_CROP_RANDOM } bucket_crop_style;
typedef enum { BUCKET_ASPECT_SQUARE, BUCKET_ASPECT_PRESERVE, BUCKET_ASPECT_CLOSEST, BUCKET_ASPECT_RANDOM } bucket_crop_aspect;

#define BUCKET_ASPECTS_MAX 32

/* One dataset's settings, named as in a multidatabackend.json entry; sizes of 0 are unset. */
typedef struct bucket_config {
    double resolution; /* an edge (pixel, pixel_area) or megapixels (area) */
    bucket_resolution_type resolution_type;
    double minimum_image_size, maximum_image_size, target_downsample_size; /* in resolution's unit; 0: unset */
    double max_upscale_threshold;                                          /* < 0: unset */
    bool crop;
    bucket_crop_style crop_style;
    bucket_crop_aspect crop_aspect;
    double crop_aspect_buckets[BUCKET_ASPECTS_MAX];
    int n_crop_aspect_buckets;
    /* SimpleTuner's weighted form ([{"aspect": a, "weight": w}, ...], weights adding up to exactly 1): crop_aspect
     * random then draws among every aspect by weight, with no max_upscale_threshold trim, as SimpleTuner does */
    bool crop_aspect_weighted;
    double crop_aspect_weights[BUCKET_ASPECTS_MAX];
    int alignment;      /* aspect_bucket_alignment: the model's multiple (64 by default; 16, 32, 8 for some) */
    int rounding;       /* aspect_bucket_rounding: decimals of an aspect (2 by default) */
    int64_t max_canvas; /* the model's MAXIMUM_CANVAS_SIZE in pixels (HiDream: 1024^2); 0: none */
    /* video */
    bool frames_8k1;          /* the model trims clips to 8k+1 frames (Wan, LTX, Sana Video) */
    int min_frames, max_frames; /* video.min_frames / max_frames; 0: unset */
    bool resolution_frames;   /* video.bucket_strategy "resolution_frames" (buckets "WxH@F") */
    int frame_interval;       /* video.frame_interval of that strategy; 0: unset */
} bucket_config;

/* SimpleTuner's defaults: resolution 1024 pixel, no crop, crop_style random, crop_aspect square, alignment 64,
 * rounding 2, no threshold. */
void bucket_config_default(bucket_config *c);

/* The aspect-to-size map of one dataset (see above). Zero-initialise; bucket_state_free frees. */
typedef struct bucket_state {
    struct bucket_size_entry *entries;
    int n, cap;
} bucket_state;
void bucket_state_free(bucket_state *s);

/* Where a sample goes. Sizes are width x height. */
typedef struct bucket_sample {
    bool skipped;                 /* below minimum_image_size or outside the frame limits: not trained */
    int target_w, target_h;       /* the trained size */
    int inter_w, inter_h;         /* the intermediary size SimpleTuner records */
    int resize_w, resize_h;       /* the size the sample is resized to before the crop: the intermediary, or
                                   * target_downsample_size's where that applies (the target when nothing is cut) */
    int crop_top, crop_left;      /* the crop's top-left in the resized image; -1 for crop_style random */
    double aspect;                /* the bucket's aspect */
    int frames, bucket_frames;    /* a clip's frames after the model's rule, and its bucket's (0 for an image) */
    char key[40];                 /* the bucket's name: the aspect as Python prints it ("1.5"), or "WxH@F" */
} bucket_sample;

/* A clip's frames after the model's rule (SimpleTuner's adjust_video_frames: 8 k + 1 at or below, where frames_8k1),
 * as bucket_assign trims them before the frame limits. */
int bucket_adjust_frames(const bucket_config *c, int frames);

/* crop_aspect random: picks one of the n aspects a sample may take, each equally likely where weights is NULL, else
 * by weight (SimpleTuner draws with Python's random). */
typedef double (*bucket_choose_fn)(const double *aspects, const double *weights, int n, void *ctx);

/* The bucket of a w x h image (frames 0) or a clip of frames frames. choose is called for crop_aspect random only,
 * and not when no aspect of crop_aspect_buckets is left (then SimpleTuner takes 1.0). ST_ERR_INVALID, with a line,
 * for settings SimpleTuner refuses (an area minimum_image_size over 5, random or closest without buckets). */
st_status bucket_assign(const bucket_config *c, bucket_state *s, int w, int h, int frames, bucket_choose_fn choose,
                        void *choose_ctx, bucket_sample *out);

/* One epoch's batches, each of one bucket: every sample of bucket_of (a bucket id per sample, 0 <= id < n_buckets)
 * repeats + 1 times, shuffled within its bucket and cut into batches of batch (a bucket's remainder short of a batch
 * is left out), the batches then shuffled together. A bucket with fewer than batch samples (repeats included) is
 * pruned, as SimpleTuner prunes it, unless keep_small (disable_bucket_pruning): its one short batch is then kept.
 * The order is a function of (seed, epoch) alone, so that a resume at batch k of an epoch continues from index
 * first[k] of the same order. index holds the samples in order, batch b being index[first[b] .. first[b + 1]). */
typedef struct bucket_epoch {
    int64_t *index, *first;
    int64_t n_batches;
} bucket_epoch;
st_status bucket_epoch_make(const int *bucket_of, int64_t n, int n_buckets, int batch, int repeats, bool keep_small,
                            uint64_t seed, int64_t epoch, bucket_epoch *out);
void bucket_epoch_free(bucket_epoch *e);

#endif
