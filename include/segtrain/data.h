/* Training data: datasets of RGB images with a class label and a caption, or of cached latents with their text
 * conditioning; a seeded epoch iterator whose position can be saved and restored exactly, and PNG sample grids.
 *
 * Images are float32 in CHW layout (3 x R x R, or a bucket's 3 x H x W), values in [-1, 1]. Four kinds of dataset:
 *   builtin:  procedural scenes (a coloured shape on a background of another colour), 8 classes, nothing stored;
 *             sample i is a pure function of (seed, i); label = i mod 8; caption "a red circle on a navy background".
 *   folder:   PNG files (see dataset_open_folder). JPEG and other formats are not read (reported and skipped).
 *   backends: the local image backends of a SimpleTuner multidatabackend.json (see dataset_open_backends), as
 *             squares or in SimpleTuner's aspect buckets (dataset_open_backend_buckets).
 *   cache:    VAE latents (C x R x R, in place of the image; a bucketed cache's C x h x w, each its bucket's) and
 *             text-encoder embeddings, as scripts/make_cache.py writes them (see dataset_open_cache, docs/CACHE.md).
 * dataset_get has no mutable state, so several threads may call it on one dataset at once. */
#ifndef SEGTRAIN_DATA_H
#define SEGTRAIN_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/buckets.h"
#include "segtrain/status.h"

#define CAPTION_MAX 256 /* bytes of a caption, terminating NUL included; longer captions are cut at a UTF-8 boundary */
#define DATA_MIN_RESOLUTION 4
#define DATA_MAX_RESOLUTION 4096

typedef struct dataset dataset;

/* count samples (>= 1) of resolution x resolution, drawn from seed. */
st_status dataset_open_builtin(int resolution, int64_t count, uint64_t seed, dataset **out);

/* dir holds either PNG files (flat: one class named after the folder, label 0) or class subfolders
 * (dir/<class>/<name>.png: one class per non-hidden subfolder, labels by sorted name, empty subfolders included so that
 * labels do not depend on which files are usable). Samples are ordered by class, then by file name. A caption is
 * the same-named .txt beside the image (a.png + a.txt, whitespace runs folded to one space); without one it is the
 * class name in class mode and "" in flat mode. Each image is converted to RGB (gray and palette expanded, alpha
 * composited over white), center-cropped to a square and resized to resolution (area average when shrinking,
 * bilinear when growing).
 * Every PNG is fully decoded once here, so that a truncated or corrupt file is reported by name on stderr once and
 * left out before training starts; other image formats are reported the same way; other files are ignored. Fails
 * with ST_ERR_FORMAT naming dir when no usable image is left, ST_ERR_IO when dir cannot be read. Only the file list
 * and the captions are kept: dataset_get decodes its image again. */
st_status dataset_open_folder(const char *dir, int resolution, dataset **out);

/* The enabled image backends of a SimpleTuner multidatabackend.json (docs/DATA.md), as one dataset whose classes
 * are the backends (labels in file order, named by id). A backend is read as SimpleTuner reads it: type local
 * (the default), its instance_data_dir walked recursively (a relative one from the working directory),
 * caption_strategy filename (the default: the file name without extension, '_' -> ' '), textfile (the same-named
 * .txt, one caption a line, one picked per sample and epoch; a missing .txt is an error) or instanceprompt,
 * with instance_prompt, prepend_instance_prompt, only_instance_prompt and disable_multiline_split; repeats r
 * makes each image r + 1 samples an epoch. Every image becomes a square (the models are square): crop_style
 * center/centre, corner (top left) or random (fixed per image and seed, as SimpleTuner's VAE cache fixes it),
 * center when crop is false; the square is resampled to the backend's resolution/resolution_type edge when that
 * is below both the square and `resolution`, then to `resolution`. Disabled backends and text_embeds /
 * image_embeds caches are skipped; any other backend type or dataset type is refused with one line naming the
 * backend. Unknown keys of an entry are one warning line on stderr, and each backend gets a line saying what it
 * gives. Images are checked as dataset_open_folder checks them. */
st_status dataset_open_backends(const char *path, int resolution, uint64_t seed, dataset **out);

/* The same backends sorted into SimpleTuner's aspect buckets (docs/DATA.md, "Aspect buckets"), video backends too
 * (docs/DATA.md, "Video backends": each clip a folder of PNG frames, bucketed with its backend's `video` keys and the
 * model's frame rule, a bucket's frames those of its clips; dataset_get refuses a clip's pixels): every image is
 * given its bucket by bucket_assign with its backend's resolution, resolution_type, minimum_image_size,
 * maximum_image_size, target_downsample_size, max_upscale_threshold, crop, crop_style, crop_aspect and
 * crop_aspect_buckets over defaults' (the run's resolution and resolution_type, the model's alignment, rounding and
 * largest canvas; the rest as bucket_config_default), backends in file order and each backend's images in walk
 * order, through one aspect map, as SimpleTuner's global map serves all its backends. An image below
 * minimum_image_size is left out, and counted on its backend's line; every bucket gets a line
 * ("data: backend 'pets': bucket 1.5 (24x16): 3 images"). Buckets are per backend, in the order their first image
 * came, so a batch never mixes backends, as SimpleTuner's per-backend samplers do not. dataset_get gives sample i
 * at its bucket's size (3 x height x width): the image resized to its resize size, then the bucket's window cut at
 * the crop's top left (crop_style random: drawn once per image from seed, as SimpleTuner's VAE cache fixes it).
 * dataset_resolution is 0. */
st_status dataset_open_backend_buckets(const char *path, const bucket_config *defaults, uint64_t seed, dataset **out);

/* A bucket of a bucketed dataset: every sample in it is width x height pixels (a cache's: latent pixels, each sample
 * channels x [frames x] height x width floats) of frames frames (a cache's: latent frames; 0: an image, or a cache's
 * latents without a frame axis). */
typedef struct data_bucket {
    int width, height, frames;
    int label;              /* its backend */
    char name[40];          /* SimpleTuner's bucket key ("1.5"; a cache: its first sample's) */
    int64_t images, count;  /* its images, and its samples (each image 1 + repeats times) */
    const int64_t *samples; /* their dataset indices, ascending */
} data_bucket;

int dataset_buckets(const dataset *ds);                      /* 0 for every other dataset */
const data_bucket *dataset_bucket(const dataset *ds, int b); /* NULL when out of range */
int dataset_bucket_of(const dataset *ds, int64_t index);     /* -1 when not bucketed or out of range */

/* Where an image of a bucketed dataset goes (segtrain buckets prints them; make_cache.py --buckets caches them so):
 * its file, backend and bucket, its own size, the size it is resized to and the top left of its bucket's window in
 * that (a random crop as drawn from the dataset's seed). A cache's sizes are 0: its samples were cut when made. */
typedef struct data_placement {
    const char *path;
    int label, bucket;
    int width, height;
    int resize_w, resize_h, crop_top, crop_left;
    int frames; /* a clip's (path is its folder of PNG frames): its frames; 0 for an image */
} data_placement;
int64_t dataset_images(const dataset *ds); /* the files behind the samples (a backend's repeats count once) */
/* Image `image` (0 <= image < dataset_images) of a bucketed dataset; ST_ERR_INVALID otherwise. */
st_status dataset_placement(const dataset *ds, int64_t image, data_placement *out);

/* What a cache must hold for the model that trains on it. */
typedef struct cache_want {
    const char *family;                     /* the model's family ("flux") */
    int64_t channels, edge;                 /* latents (channels, edge, edge) */
    int64_t frames;                         /* video: latents (channels, frames, edge, edge); 1 (or 0): images */
    int64_t text_len, text_dim, pooled_dim; /* the model's conditioning: (text_len, text_dim), then pooled_dim */
    bool mask;                              /* then the text mask (text_len), where the model reads one */
    int64_t size_ids;                       /* then SDXL's size ids (each sample file's add_time_ids), or 0 */
    const char *text_width;                 /* what prompt_embeds' width holds where not one encoder's (NULL) */
    bool video;                             /* a video family: a version 2 cache's samples may have frames */
    /* a token model's (a token cache, docs/CACHE.md "Token caches"): its codebooks (0: not a token model), audio
     * and text vocabularies, and the rows a sample is padded to */
    int64_t codebooks, audio_vocab, text_vocab, rows;
} cache_want;

/* The cache folder dir (docs/CACHE.md): cache.json, checked against want (format and version, family, latent shape,
 * text_dim, pooled_dim, a text_len no longer than want's, count, a non-empty sample list), then every sample file
 * listed, opened and checked the same way (latents, prompt_embeds of 1 to text_len rows, pooled_prompt_embeds where
 * pooled_dim > 0, a 1/0 attention_mask per token, add_time_ids where size_ids > 0; F32, BF16 or F16), and
 * null.safetensors, the empty prompt's conditioning, when the folder has it. One class (named after the folder);
 * captions from the files' metadata. A version 1 cache holds one latent shape, (channels, [frames,] edge, edge).
 * A version 2 cache (make_cache.py --buckets) lists each sample's shape: want's channels, any height and width (edge
 * is not compared: the model built at a bucket's shape checks that its patch divides it) and, where want is video,
 * any frames ((C, F, H, W); (C, H, W) has none). Its samples are grouped by latent shape (frames, height, width) into
 * buckets, in the order of their first sample, read through dataset_buckets and
 * data_iter_create_buckets as a bucketed backend's are (never pruned: one short batch an epoch), and
 * dataset_resolution is 0. Every error is one line starting "data_cache_dir <dir>:" and naming the file.
 * A token cache (format segtrain-token-cache, make_cache.py --family heartmula) is read for a token model (want's
 * codebooks above 0) only, and is its only cache: its header's codebooks and vocabularies are the model's, every
 * sample's audio_tokens (frames, codebooks), tag_ids and lyric_ids are I64 ids inside their vocabularies and its
 * rows (tags, an empty row, lyrics, frames) at most want's rows; a sample is its tokens (rows x (codebooks + 1),
 * each its channels) and its conditioning their masks (dataset_text_floats), laid out as SimpleTuner's
 * collate_audio_tokens lays them out and padded to the rows with empty_id. */
st_status dataset_open_cache(const char *dir, const cache_want *want, dataset **out);

void dataset_close(dataset *ds);

int64_t dataset_size(const dataset *ds);
int dataset_resolution(const dataset *ds);
int dataset_channels(const dataset *ds); /* 3; a cache: its latents' */
int dataset_classes(const dataset *ds);
const char *dataset_class_name(const dataset *ds, int label); /* NULL when out of range */

/* A cache's conditioning floats per sample: text_len x text_dim (shorter sequences zero-padded), then pooled_dim,
 * the model's layout (model_cond_len less the guidance value); 0 for the image datasets. */
int64_t dataset_text_floats(const dataset *ds);
/* A cache's empty-prompt conditioning (dataset_text_floats of them) for caption dropout; NULL when it has none. */
const float *dataset_null_text(const dataset *ds);

/* Sample index: image (channels x R x R floats; a bucketed dataset's: 3 x its bucket's height x width), label and
 * caption (CAPTION_MAX bytes); any output may be NULL. */
st_status dataset_get(const dataset *ds, int64_t index, float *image, int64_t *label, char *caption);

/* Where an iterator is: the next sample is entry `index` of epoch `epoch`'s shuffled order (bucket mode: the next
 * batch is batch `index` of the epoch). */
typedef struct data_position {
    int64_t epoch, index;
} data_position;

/* Epochs of a Fisher-Yates shuffle keyed by (seed, epoch); batches run on across epoch ends, so no sample is
 * dropped and every batch is full. ds must outlive the iterator. */
typedef struct data_iter data_iter;

st_status data_iter_create(const dataset *ds, uint64_t seed, data_iter **out);
void data_iter_destroy(data_iter *it);
data_position data_iter_position(const data_iter *it);
/* Continues from a saved position: the batches that follow are exactly those that followed it when it was saved. */
st_status data_iter_seek(data_iter *it, data_position pos);
/* The next batch samples: images (batch x channels x R x R), labels, captions and the dataset indices they came
 * from; any output may be NULL. On failure the position is unchanged. */
st_status data_iter_next_batch(data_iter *it, int64_t batch, float *images, int64_t *labels,
                               char (*captions)[CAPTION_MAX], int64_t *indices);
/* As data_iter_next_batch, and each sample's conditioning (dataset_text_floats) at text + b * text_stride: the
 * same samples as data_iter_next_batch would give. For a cache. */
st_status data_iter_next_with_text(data_iter *it, int64_t batch, float *images, int64_t *labels,
                                   char (*captions)[CAPTION_MAX], int64_t *indices, float *text, int64_t text_stride);
/* A data-parallel rank's share of the next batch: the batch's samples first .. first + count - 1, written from
 * index 0 of each output (text may be NULL), with the position moved past the whole batch, as every rank's is. */
st_status data_iter_next_share(data_iter *it, int64_t batch, int64_t first, int64_t count, float *images,
                               int64_t *labels, char (*captions)[CAPTION_MAX], int64_t *indices, float *text,
                               int64_t text_stride);

/* Bucket mode, for a bucketed dataset: each epoch is bucket_epoch_make's over the buckets (seed, the batch, each
 * sample once: repeats are already samples). A bucket short of a batch is pruned with a line where SimpleTuner
 * prunes one, in a backend with a minimum_image_size, unless keep_small (disable_bucket_pruning); any other gives
 * one short batch an epoch, filled up by its own samples again, as SimpleTuner fills one. Every batch is of one
 * bucket: data_iter_peek_bucket names it before the batch is read, and data_iter_next_* (with this batch) give its
 * samples at that bucket's size, each image 3 x height x width. A position's index counts batches, so a resume at a
 * saved position continues with the same batches. ST_ERR_INVALID when no batch is left (every bucket pruned). */
st_status data_iter_create_buckets(const dataset *ds, uint64_t seed, int64_t batch, bool keep_small, data_iter **out);
int64_t data_iter_epoch_batches(const data_iter *it); /* batches an epoch in bucket mode; 0 otherwise */
/* Bucket b's batches an epoch in bucket mode (the same every epoch): 0 for a pruned bucket, or out of range. */
int64_t data_iter_bucket_batches(const data_iter *it, int b);
st_status data_iter_peek_bucket(data_iter *it, int *bucket);

/* Writes n images (channels 1 or 3, h x w, CHW, [-1, 1] mapped to 0..255 and clamped) as one PNG, tiled row-major
 * into cols columns with a 2-pixel white gap between tiles (empty cells white), atomically. */
st_status png_write_grid(const char *path, const float *images, int n, int channels, int h, int w, int cols);

#endif
