/* The trainer: `segtrain train` is a loop over trainer_step. Everything a run needs is set up from the config
 * before the first step (data, model, weights, optimizer, resume, the memory plan); a step is one optimizer
 * update with its checkpoint and validation grid when they are due; the run's files go to output_dir:
 *   checkpoint-<step>.safetensors  trainable weights, optimizer state, step and data position (atomic)
 *   train_log.jsonl                one line of figures per step
 *   validation/step-<step>.png     sample grids, every validation_steps
 *   model.safetensors / pytorch_lora_weights.safetensors  the final weights (LoRA under PEFT's names)
 *   ema/  the same, averaged (use_ema) */
#ifndef SEGTRAIN_TRAIN_H
#define SEGTRAIN_TRAIN_H

#include <stdbool.h>
#include <stdio.h>

#include "segtrain/buckets.h"
#include "segtrain/config.h"
#include "segtrain/data.h"
#include "segtrain/model.h"

/* pretrained_model_name_or_path as segtrain reads it: a local file or folder. A hub name, or a path that does not
 * exist, is ST_ERR_INVALID with a line saying what to give instead (every command checks it, cli_load_config). */
st_status train_weights_path_check(const char *path);

/* What train refuses of a run's data before opening any (plan says it too): image datasets of a video family's
 * frames, or of a model that does not take RGB pixels (segtrain has no VAE); several bucket_shapes or a non-square
 * shape on data of squares (data_dir, the built-in scenes, a cache); a cache or synthetic data pass the rest. */
st_status train_data_check(const config *cfg, const model_config *mc);
/* The run's aspect-bucket settings, which each backend's keys override (dataset_open_backend_buckets' defaults), as
 * SimpleTuner's arguments give them: resolution and resolution_type (resolution 0: the model's height in image
 * pixels, a pixel edge), aspect_bucket_alignment and aspect_bucket_rounding, and the model's largest canvas (HiDream's
 * max_resolution); the rest bucket_config_default's. An alignment that is not a multiple of the model's
 * vae_scale_factor times its patch is refused in one line: its buckets would not be latents the model takes. */
st_status train_bucket_settings(const config *cfg, const model_config *mc, bucket_config *out);
/* A run's data in SimpleTuner's aspect buckets: with data_backend_config (not synthetic_data), its backends opened
 * so (train_bucket_settings, cfg's seed); with data_cache_dir, the cache (checked against cfg's model: its latents'
 * channels and frames, its conditioning), whose version 2 holds buckets. Then their bucket iterator at the global
 * batch of `ranks` x train_batch_size (disable_bucket_pruning keeps a short bucket), and cfg's copy whose
 * bucket_shapes are the shapes of the buckets that train: the data's buckets in their order, each shape once (two
 * backends' buckets of one size are one), a pruned bucket none. Shapes are in image pixels, as bucket_shapes' are: a
 * cache's latent buckets times vae_scale_factor; a backend's buckets as they are, which a model with a VAE plans as
 * latents, and which on image data (vae_scale_factor 1, what train takes: train_data_check) are the model's input.
 * A bucket_shapes that cfg gives must name the same shapes (ST_ERR_INVALID names both lists). A cache of one shape
 * (version 1) gives *data alone, and refuses several bucket_shapes or a non-square one (ST_ERR_UNSUPPORTED); other
 * data give nothing (all NULL). */
bool train_data_bucketed(const config *cfg); /* not synthetic_data, and data_backend_config or data_cache_dir */
typedef struct train_buckets {
    dataset *data;
    data_iter *iter;
    config *cfg;
    int *shape_of; /* each data bucket's index in cfg's bucket_shapes; -1: pruned */
} train_buckets;
st_status train_buckets_open(const config *cfg, int ranks, train_buckets *out);
void train_buckets_close(train_buckets *b);
/* Bytes of state the config's optimizer (with use_ema's average) keeps for ps's trainable floats on the rank of
 * `ranks` data-parallel ranks that keeps the most: the whole state, or with zero_stage 1 a share (ZeRO-1). Measured:
 * the trainer's optimizer is set up in ps's pool (a dry one: nothing is allocated) and closed again; 0 if it cannot
 * be. */
size_t train_optimizer_bytes(const config *cfg, param_set *ps, int ranks);
/* The memory plan of a run of the config as one of `ranks` data-parallel ranks: its step run dry with everything the
 * trainer holds besides the model (optimizer, batch, the gradients' reduction scratch in the host pool), *device and
 * *host its pools' stats (flow_step_dry). With bucket_shapes, a step at each bucket on the run's models of every shape
 * (model_run_open: one set of weights, every shape's grid tables), and *device and *host are the largest bucket's,
 * the run's peak. Refuses a plan past device_memory (ST_ERR_OOM), host_memory or this machine's available memory
 * (ST_ERR_HOST_OOM), naming the bucket (the largest first), all before anything is allocated: the trainer's first
 * check. */
st_status train_plan(const config *cfg, int ranks, pool_stats *device, pool_stats *host);

typedef struct trainer trainer;

typedef struct train_step_info {
    int64_t step; /* steps done, this one included */
    float loss;   /* mean over the step's micro-batches */
    double lr, grad_norm, seconds;
    double optimizer_seconds; /* clipping and the update, part of seconds */
    double comm_seconds;      /* the gradients' reduction over the ranks, part of seconds (0 for one rank) */
    size_t peak_device, peak_host; /* of this step */
    int bucket;                    /* the step's bucket: its index in bucket_shapes (0 without them); where its
                                    * micro-batches trained several, the one of the largest predicted peak */
    const char *bucket_name;       /* and its name ("832x480") in a run of several shapes, else NULL */
    const char *checkpoint;        /* the file written after this step, or NULL */
    const char *validation;        /* the grid written after this step, or NULL */
} train_step_info;

/* Sets up a run; `log` (may be NULL) receives one-line notes (resume, plan, warnings). */
st_status trainer_create(const config *cfg, FILE *log, trainer **out);
/* One optimizer step. A non-finite loss or gradient norm stops the run with ST_ERR_NUMERIC and a message naming
 * the step; nothing is written for that step, so the last good checkpoint stays the newest. */
st_status trainer_step(trainer *t, train_step_info *info);
bool trainer_done(const trainer *t);
int64_t trainer_steps_done(const trainer *t);
int64_t trainer_total_steps(const trainer *t);
/* The predicted peaks of a step, by tag: of the largest bucket's (the run's peak), or of bucket i's. */
const pool_stats *trainer_predicted(const trainer *t, bool host);
const pool_stats *trainer_bucket_predicted(const trainer *t, int bucket, bool host);
/* The shapes the run trains at (bucket_shapes, or the data's buckets: train_buckets_open; *shapes may be NULL), and
 * how many: 1 without them. A run of several trains each step at one of them, on a model of that shape sharing the
 * weights of the others: on data in aspect buckets, each micro-batch at its batch's bucket (data_iter_peek_bucket);
 * on synthetic data, drawn by (seed, step) alone (docs/DATA.md). */
int trainer_buckets(const trainer *t, const bucket_shape **shapes);
/* Writes the final weights (and a final checkpoint when checkpointing is on); *path receives the weights file. */
st_status trainer_finish(trainer *t, const char **path);
/* Makes sure the steps done have a checkpoint, whatever checkpoint_step_interval says: writes one unless the newest
 * step already has one (written by this run or resumed from). Every rank calls it; *path (may be NULL) receives the
 * file on rank 0. An interrupted run keeps its progress this way. */
st_status trainer_checkpoint(trainer *t, const char **path);
void trainer_destroy(trainer *t);
model *trainer_model(trainer *t);

#endif
