/* The trainer (train.h): set-up from the config, one optimizer step at a time, checkpoints and resume. */
#include "segtrain/train.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/data.h"
#include "segtrain/dist.h"
#include "segtrain/fileio.h"
#include "segtrain/model_run.h"
#include "segtrain/objective.h"
#include "segtrain/optim.h"
#include "segtrain/rng.h"
#include "segtrain/safetensors.h"
#include "segtrain/sample.h"

#include "ema.h"
#include "setup.h"

#define DIR_MAX 512 /* output_dir; file names inside it have room to spare */
#define PATH_MAX_LEN 1024

struct trainer {
    const config *cfg;          /* the run's: the caller's, or own_cfg */
    config *own_cfg;            /* the caller's with the data's buckets as bucket_shapes (train_buckets_open) */
    int *shape_of;              /* data in aspect buckets: each data bucket's shape in the run (-1: pruned) */
    FILE *log;
    model_run run;
    dataset *data;
    data_iter *iter;
    optimizer *opt;
    int64_t batch, accum, steps_done, total_steps, classes, cond_len;
    int64_t saved_step;         /* the step of the newest checkpoint this run wrote or resumed from; -1: none */
    bool threads_from_checkpoint; /* the run took its thread count from the checkpoint it resumed from */
    bool cached;                /* data_cache_dir: x0 and cond come from the cache */
    uint64_t seed;
    float label_dropout;
    model *m;                   /* the step's model: its bucket's (run.m's weights) */
    int bucket;                 /* the bucket the batch is open at (at_bucket) */
    float *x0, *noise, *t;      /* the step's batch at its bucket's shape, in the device pool (open_batch) */
    float *cond;                /* (batch, cond_len), in the device pool */
    bool anyflow;               /* distillation_method anyflow: AnyFlow's objective (mf) */
    meanflow_config mf;
    bool drifts;                /* distillation_method h3_drift: the drift term (drift) */
    drift_config drift;
    float *r, *null_cond;       /* its intervals' other ends and the empty prompt's conditioning, in the device pool */
    float *ema;                 /* use_ema: the average of the trainable weights, in the gradient block's order */
    int64_t *labels;            /* the loader's labels and captions, host-side */
    char (*captions)[CAPTION_MAX];
    /* data-parallel: this process is rank `rank` of `ranks`, and trains samples first .. first + batch - 1 of
     * each global batch of ranks x batch; comm is dist_sum's scratch in the host pool */
    int rank, ranks;
    bool zero; /* ZeRO-1: the optimizer state is sharded over the ranks */
    int64_t first;
    float *comm;
    pool_stats predicted[MODEL_SHAPES_MAX], predicted_host[MODEL_SHAPES_MAX]; /* each bucket's step's */
    int largest;                /* the bucket of the largest predicted device peak */
    char bucket_name[48];       /* the step's bucket, "832x480" */
    st_warn_sink warn_was; /* the warning sink before this trainer's, put back by trainer_destroy */
    bool warns;            /* warnings go to log (rank 0 with a log) */
    int log_fd;  /* train_log.jsonl, appended a whole line at a time */
    int lock_fd; /* output_dir/.segtrain.lock, flock'd while the run lives */
    char log_path[PATH_MAX_LEN + 32], dir[DIR_MAX], checkpoint[PATH_MAX_LEN], validation[PATH_MAX_LEN], final[PATH_MAX_LEN];
};

static void note(trainer *t, const char *fmt, const char *a, const char *b)
{
    if (t->rank) return; /* rank 0 speaks for the job */
    if (t->log) fprintf(t->log, fmt, a, b), fputc('\n', t->log);
}

/* The trainer's warning sink: its log, and also the sink it replaced unless that one writes where the log does. */
static void warned(void *ctx, const char *line)
{
    trainer *t = ctx;
    fprintf(t->log, "%s\n", line);
    if (t->log != stderr || t->warn_was.fn) st_warn_pass(t->warn_was, line);
}

/* Removes the folders file_make_dirs made for path, leaf first, while they are empty: a run that fails before writing
 * anything leaves no empty output folder behind. */
static void remove_made(const char *path, const char *created)
{
    char buf[PATH_MAX_LEN];
    snprintf(buf, sizeof buf, "%s", path);
    for (size_t top = strlen(created); created[0] && strlen(buf) >= top && !rmdir(buf);) {
        char *slash = strrchr(buf, '/');
        if (!slash) break;
        *slash = 0;
    }
}

/* Keeps other runs out of output_dir while this one lives: an exclusive flock on dir/.segtrain.lock, which holds
 * the pid of its holder. Two runs on one folder would delete each other's temporary files and overwrite each
 * other's checkpoints and log. The kernel drops the lock when its holder dies, so a lock file left by a run that
 * was killed does not block the next. */
static st_status lock_output_dir(trainer *t)
{
    char path[PATH_MAX_LEN + 32];
    snprintf(path, sizeof path, "%s/.segtrain.lock", t->dir);
    if ((t->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
        return st_fail(ST_ERR_IO, "%s: cannot create the output_dir's lock file: %s", path, strerror(errno));
    if (flock(t->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char holder[32] = "";
        const ssize_t n = pread(t->lock_fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        close(t->lock_fd);
        t->lock_fd = -1;
        if (err != EWOULDBLOCK) return st_fail(ST_ERR_IO, "%s: cannot lock: %s", path, strerror(err));
        return st_fail(ST_ERR_INVALID, "output_dir %s is in use by another run (pid %s, which holds %s): give each run "
                       "its own output_dir, or wait until that one ends", t->dir, holder[0] ? holder : "unknown", path);
    }
    char pid[32];
    const int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(t->lock_fd, 0) != 0 || pwrite(t->lock_fd, pid, (size_t)n, 0) != n)
        return st_fail(ST_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return ST_OK;
}

/* The steps of the checkpoint-<step>.safetensors files in dir, newest first: the newest `max` of them, whatever
 * order the folder lists them in. Other files are skipped; with tidy (the run's own folder) leftovers of
 * interrupted writes (<file>.tmp.<pid>, fileio's temporaries) are removed. Returns the count (at most max). */
static int list_checkpoints(const char *dir, bool tidy, int64_t *steps, int max)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        char name[64];
        const char *tmp = strstr(e->d_name, ".tmp.");
        /* the pid's process is gone (the output_dir lock keeps other runs out; this guards the rest) */
        if (tidy && tmp && tmp[5] && strspn(tmp + 5, "0123456789") == strlen(tmp + 5) &&
            kill((pid_t)atoll(tmp + 5), 0) != 0 && errno == ESRCH) {
            char p[PATH_MAX_LEN * 2];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
            continue;
        }
        if (sscanf(e->d_name, "checkpoint-%lld", &step) != 1 || step < 0) continue;
        snprintf(name, sizeof name, "checkpoint-%06lld.safetensors", step);
        if (strcmp(name, e->d_name)) continue; /* only the names checkpoint_path writes */
        int j = n < max ? n++ : max;           /* insert into the sorted newest `max` */
        for (; j > 0 && steps[j - 1] < step; j--)
            if (j < max) steps[j] = steps[j - 1];
        if (j < max) steps[j] = step;
    }
    closedir(d);
    return n;
}

static void checkpoint_path(const char *dir, int64_t step, char *out, size_t n)
{
    snprintf(out, n, "%s/checkpoint-%06lld.safetensors", dir, (long long)step);
}

/* The run's bucket shapes as a checkpoint records them, "256x256,512x512" ("" for one shape): the steps' bucket order
 * is a function of the list, so a resume must train the same one. */
static void bucket_list(const trainer *t, char *buf, size_t n)
{
    buf[0] = 0;
    for (int i = 0, at = 0; t->run.n_buckets > 1 && i < t->run.n_buckets && at < (int)n - 1; i++) {
        if (i) buf[at++] = ',', buf[at] = 0;
        bucket_shape_name(&t->run.shape[i], buf + at, n - (size_t)at);
        at += (int)strlen(buf + at);
    }
}

/* Writes the checkpoint: the trainable weights and the optimizer state (whole[i]: a sharded run's, gathered;
 * NULL: the optimizer's own). */
static st_status save_checkpoint(trainer *t, float *const *whole)
{
    int k = optim_state_count(t->opt);
    named_floats extra[4];
    for (int i = 0; i < k && i < 4; i++)
        extra[i] = (named_floats){.name = optim_state_name(t->opt, i), .ndim = 1,
                                  .shape = {whole ? model_params(t->run.m)->grad_count : optim_state_size(t->opt, i)},
                                  .data = whole ? whole[i] : optim_state_data(t->opt, i)};
    if (t->ema) /* every rank holds the whole average */
        extra[k++] = (named_floats){.name = "optimizer.ema", .ndim = 1,
                                    .shape = {model_params(t->run.m)->grad_count}, .data = t->ema};
    const data_position pos = t->iter ? data_iter_position(t->iter) : (data_position){0};
    char step[32], epoch[32], index[32], seed[32], threads[16], buckets[MODEL_SHAPES_MAX * 24];
    bucket_list(t, buckets, sizeof buckets);
    snprintf(step, sizeof step, "%lld", (long long)t->steps_done);
    snprintf(epoch, sizeof epoch, "%lld", (long long)pos.epoch);
    snprintf(index, sizeof index, "%lld", (long long)pos.index);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->seed);
    snprintf(threads, sizeof threads, "%d", ops_threads());
    const char *meta[] = {"segtrain.step", step,
                          "segtrain.data_epoch", epoch,
                          "segtrain.data_index", index,
                          "segtrain.seed", seed,
                          "segtrain.optimizer", optim_kind_name(optim_get_settings(t->opt)->kind),
                          "segtrain.model_type", config_string(t->cfg, "model_type"),
                          "segtrain.rng", "counter-based, keyed by seed, step and sample: nothing else to restore",
                          "segtrain.threads", threads,
                          "segtrain.bucket_shapes", buckets};
    checkpoint_path(t->dir, t->steps_done, t->checkpoint, sizeof t->checkpoint);
    st_status st = param_set_save(model_params(t->run.m), t->checkpoint, PARAMS_TRAINABLE, false, extra, k, meta,
                                  buckets[0] ? 9 : 8);
    if (st) return st;
    /* keep the newest checkpoints_total_limit */
    const int64_t limit = config_int(t->cfg, "checkpoints_total_limit");
    int64_t steps[4096];
    int n = list_checkpoints(t->dir, true, steps, 4096);
    for (int i = (int)limit; limit > 0 && i < n; i++) {
        char old[PATH_MAX_LEN];
        checkpoint_path(t->dir, steps[i], old, sizeof old);
        unlink(old);
    }
    return ST_OK;
}

/* A sharded run's checkpoint: every rank calls it; the optimizer state is gathered to rank 0 (in the host pool, for
 * the write), which writes one checkpoint of the same format as a single process's. */
static st_status save_sharded(trainer *t)
{
    const int64_t n = model_params(t->run.m)->grad_count;
    float *whole[2] = {NULL, NULL};
    st_status st = ST_OK;
    const int k = optim_state_count(t->opt);
    for (int i = 0; i < k && !st && !t->rank; i++)
        st = pool_alloc(t->run.host, (size_t)n * sizeof(float), MEM_OPTIMIZER, "checkpoint.optimizer_state",
                        (void **)&whole[i]);
    for (int i = 0; i < k && !st; i++) st = dist_gather_root(optim_state_data(t->opt, i), n, whole[i]);
    if (!st && !t->rank) st = save_checkpoint(t, whole);
    for (int i = 0; i < k; i++) pool_free(t->run.host, whole[i]);
    return st;
}

/* Every rank calls it, and every rank then knows the steps done have a checkpoint; rank 0 writes it. */
static st_status checkpoint(trainer *t)
{
    const st_status st = t->zero ? save_sharded(t) : t->rank ? ST_OK : save_checkpoint(t, NULL);
    if (!st) t->saved_step = t->steps_done;
    return st;
}

/* A checkpoint's integer metadata: decimal digits (an optional '-'), nothing else, within [lo, hi] (`range` says
 * what the bounds are). A file edited or corrupted by hand must not resume at a step of its own invention. */
static st_status meta_int(const sft_file *f, const char *key, int64_t lo, int64_t hi, const char *range, int64_t *out)
{
    const char *v = sft_metadata(f, key);
    if (!v) return st_fail(ST_ERR_FORMAT, "%s: metadata '%s' is missing", sft_path(f), key);
    char *end;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    if (!isdigit((unsigned char)v[v[0] == '-']) || *end || errno == ERANGE)
        return st_fail(ST_ERR_FORMAT, "%s: metadata '%s' is \"%.40s\", not an integer in [%lld, %lld] (%s)",
                       sft_path(f), key, v, (long long)lo, (long long)hi, range);
    if (x < lo || x > hi)
        return st_fail(ST_ERR_FORMAT, "%s: metadata '%s' is %lld, outside [%lld, %lld] (%s)", sft_path(f), key, x,
                       (long long)lo, (long long)hi, range);
    *out = x;
    return ST_OK;
}

/* The checkpoint resume_from_checkpoint names: "latest" the newest of output_dir ("" while it has none), a folder
 * the newest of that folder, else the file itself. */
static st_status find_resume(const trainer *t, char *path, size_t size)
{
    const char *from = config_string(t->cfg, "resume_from_checkpoint");
    const bool latest = !strcmp(from, "latest");
    struct stat sb;
    const char *dir = latest ? t->dir : !stat(from, &sb) && S_ISDIR(sb.st_mode) ? from : NULL;
    int64_t steps[1];
    if (!dir) snprintf(path, size, "%s", from);
    else if (list_checkpoints(dir, latest, steps, 1)) checkpoint_path(dir, steps[0], path, size);
    else if (!latest)
        return st_fail(ST_ERR_INVALID, "resume_from_checkpoint: the folder %s holds no checkpoint-<step>.safetensors",
                       from);
    return ST_OK;
}

/* A GEMM's bits follow the thread count (OpenBLAS splits its products by threads), so a resumed run is bitwise the
 * unbroken one only at the count that wrote its checkpoint. With none given (num_threads, --threads,
 * OMP_NUM_THREADS) the run takes that count, where this machine has the cores; otherwise it says that it cannot. */
static st_status resume_threads(trainer *t, const char *path)
{
    sft_file *f;
    st_status st = sft_open(path, &f);
    if (st) return st;
    int64_t had = 0;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (sft_metadata(f, "segtrain.threads")) /* a checkpoint from before it was recorded: nothing to keep */
        st = meta_int(f, "segtrain.threads", 1, 1024, "threads", &had);
    sft_close(f);
    if (st || !had || had == ops_threads()) return st;
    const bool given = config_is_set(t->cfg, "num_threads");
    if (!given && had <= cores) {
        ops_set_threads((int)had);
        t->threads_from_checkpoint = true;
        return ST_OK;
    }
    char why[160];
    snprintf(why, sizeof why, given ? "num_threads is %d: " : "this machine has %d cores: ",
             given ? ops_threads() : (int)cores);
    st_warn("segtrain: warning: %s was written at %lld threads; %sthe run goes on at %d, and its numbers are no longer "
            "bitwise those of an unbroken run", path, (long long)had, why, ops_threads());
    return ST_OK;
}

static st_status resume(trainer *t, const char *path)
{
    param_set *ps = model_params(t->run.m);
    st_status st = param_set_load(ps, path, PARAMS_TRAINABLE, "optimizer.");
    if (st) return st;
    sft_file *f;
    if ((st = sft_open(path, &f))) return st;
    const char *opt = sft_metadata(f, "segtrain.optimizer"), *type = sft_metadata(f, "segtrain.model_type");
    const char *want_opt = optim_kind_name(optim_get_settings(t->opt)->kind);
    if (!opt || strcmp(opt, want_opt))
        st = st_fail(ST_ERR_FORMAT, "%s: written by a run with optimizer %s; this config uses %s", path,
                     opt ? opt : "(none)", want_opt);
    else if (!type || strcmp(type, config_string(t->cfg, "model_type")))
        st = st_fail(ST_ERR_FORMAT, "%s: written by a model_type %s run; this config is %s", path, type ? type : "(none)",
                     config_string(t->cfg, "model_type"));
    char buckets[MODEL_SHAPES_MAX * 24];
    const char *had = sft_metadata(f, "segtrain.bucket_shapes");
    bucket_list(t, buckets, sizeof buckets);
    if (!st && strcmp(had ? had : "", buckets)) /* the bucket order would not go on */
        st = st_fail(ST_ERR_FORMAT, "%s: written by a run over bucket_shapes \"%s\"; this config's are \"%s\": resume "
                     "with the same shapes, in the same order", path, had ? had : "", buckets);
    /* a checkpoint holds the whole state, whoever wrote it: a whole optimizer reads it in place, and a ZeRO-1 rank
     * reads it into the host pool (as the checkpoint's own gather holds it) to keep its share */
    const int64_t n = ps->grad_count;
    float *whole = NULL;
    if (!st && t->zero)
        st = pool_alloc(t->run.host, (size_t)n * sizeof(float), MEM_OPTIMIZER, "resume.optimizer_state",
                        (void **)&whole);
    for (int i = 0; !st && i < optim_state_count(t->opt); i++) {
        const char *name = optim_state_name(t->opt, i);
        st = sft_read_f32(f, name, 1, &n, whole ? whole : optim_state_data(t->opt, i));
        if (!st && whole) st = optim_state_restore(t->opt, name, whole, n);
    }
    pool_free(t->run.host, whole);
    if (!st && t->ema && sft_find(f, "optimizer.ema")) st = sft_read_f32(f, "optimizer.ema", 1, &n, t->ema);
    else if (!st && t->ema) note(t, "segtrain: %s holds no EMA (use_ema was off): the average starts from its "
                                 "weights%s", path, "");
    int64_t step = 0;
    data_position pos = {0};
    /* the data position: an epoch count that could overflow as the run goes on is no run's; an index is at most
     * the dataset's size (its end) */
    const int64_t samples = t->iter ? dataset_size(t->data) : INT64_MAX;
    if (!st) st = meta_int(f, "segtrain.step", 0, t->total_steps, "the steps of this run: raise max_train_steps "
                           "to train on from a later checkpoint", &step);
    if (!st) st = meta_int(f, "segtrain.data_epoch", 0, INT32_MAX, "epochs", &pos.epoch);
    if (!st) st = meta_int(f, "segtrain.data_index", 0, samples, "the samples of the dataset", &pos.index);
    if (!st) st = optim_set_steps(t->opt, step);
    if (!st && t->iter) st = data_iter_seek(t->iter, pos);
    sft_close(f);
    if (!st) t->steps_done = t->saved_step = step;
    if (!st) snprintf(t->checkpoint, sizeof t->checkpoint, "%s", path);
    return st;
}

/* Each of the run's shapes takes its data buckets' samples as they come (channels x [frames x] height x width: an
 * image's pixels, a cache's latents): the model built at a bucket's shape reads exactly the floats the data writes. */
static st_status same_sizes(const trainer *t)
{
    for (int b = 0; b < dataset_buckets(t->data); b++) {
        const data_bucket *bk = dataset_bucket(t->data, b);
        if (t->shape_of[b] < 0) continue;
        const model_config *mc = model_get_config(model_run_at(&t->run, t->shape_of[b]).m);
        const int64_t frames = bk->frames > 1 ? bk->frames : 1, numel = model_loss_numel(mc);
        if (numel != dataset_channels(t->data) * frames * bk->width * bk->height || mc->width != bk->width)
            return st_fail(ST_ERR_INTERNAL, "bucket %s (%dx%d): the model at its shape takes %lld floats a sample, not "
                           "%d x %lld x %d x %d", bk->name, bk->width, bk->height, (long long)numel,
                           dataset_channels(t->data), (long long)frames, bk->height, bk->width);
    }
    return ST_OK;
}

/* A token model's token cache (docs/CACHE.md, "Token caches"). Caption dropout does not apply: SimpleTuner's
 * collate_audio_tokens reads each sample's tags and lyrics, which its caption dropout (instance_prompt_text) leaves. */
static st_status open_tokens(trainer *t, const model_config *mc, const char *cache)
{
    char what[400];
    snprintf(what, sizeof what, "%lld samples, each padded to %lld rows of %lld codebooks and a text token as "
             "SimpleTuner's collate_audio_tokens pads a batch%s", (long long)dataset_size(t->data),
             (long long)mc->frames, (long long)(mc->channels - 1),
             t->label_dropout > 0 ? "; caption_dropout_probability not applied (SimpleTuner's HeartMuLa keeps every "
                                    "sample's tags and lyrics)" : "");
    t->label_dropout = 0;
    t->cached = true;
    note(t, "segtrain: training on the token cache %s: %s", cache, what);
    return t->iter ? ST_OK : data_iter_create(t->data, t->seed, &t->iter);
}

/* A cache of latents and text embeddings (data_cache_dir), opened with the run's buckets (open_buckets): a
 * dual-stream model reads its conditioning from it; caption dropout needs the cache's empty-prompt embeddings. */
static st_status open_cache(trainer *t, const model_config *mc, const char *cache)
{
    if (model_tokens(mc)) return open_tokens(t, mc, cache);
    st_status st = ST_OK;
    const int64_t held = dataset_text_floats(t->data) + mc->guidance_embeds + model_size_ids(mc);
    const int64_t wanted = model_cond_len(mc);
    if (held != wanted) /* what the families read besides one sequence, pooled vector and mask */
        st = st_fail(ST_ERR_UNSUPPORTED, "data_cache_dir: a cache holds a text encoder's sequence, pooled vector and "
                     "mask (docs/CACHE.md): %lld of the %lld floats model_family %s conditions on; the rest (%s) is "
                     "not in the format yet", (long long)held, (long long)wanted, mc->family,
                     model_uncached(mc));
    if (!st && t->label_dropout > 0 && !dataset_null_text(t->data))
        st = st_fail(ST_ERR_INVALID, "caption_dropout_probability %g needs the empty prompt's embeddings: add "
                     "%s/null.safetensors (scripts/make_cache.py writes it) or set caption_dropout_probability 0",
                     (double)t->label_dropout, cache);
    t->cached = !st;
    if (st) return st;
    char what[200], frames[32] = "", shape[64];
    if (mc->frames > 1) snprintf(frames, sizeof frames, "%lld x ", (long long)mc->frames);
    if (t->shape_of) snprintf(shape, sizeof shape, "%sH x W (%d buckets)", model_video(mc) ? "F x " : "",
                              dataset_buckets(t->data));
    else snprintf(shape, sizeof shape, "%s%lld x %lld", frames, (long long)mc->height, (long long)mc->width);
    snprintf(what, sizeof what, "%lld samples of %lld x %s latents and %lld x %lld text embeddings%s",
             (long long)dataset_size(t->data), (long long)mc->channels, shape, (long long)mc->text_len,
             (long long)mc->text_dim, dataset_null_text(t->data) ? ", null.safetensors for caption dropout" : "");
    note(t, "segtrain: training on the cache %s: %s", cache, what);
    return t->iter ? same_sizes(t) : data_iter_create(t->data, t->seed, &t->iter);
}

st_status train_data_check(const config *cfg, const model_config *mc)
{
    const char *cache = config_string(cfg, "data_cache_dir");
    if (model_tokens(mc) && !config_bool(cfg, "synthetic_data") && !cache[0]) /* docs/FAMILIES.md, heartmula */
        return st_fail(ST_ERR_UNSUPPORTED, "model_family %s trains on audio codec tokens: give a token cache "
                       "(data_cache_dir, made by scripts/make_cache.py --family %s from precomputed HeartCodec tokens "
                       "and HeartMuLaGen's tokenizer.json) or synthetic_data; segtrain reads no audio backend "
                       "(SimpleTuner's dataset_type audio with audio_tokens or audio_tokens_path) and runs no "
                       "HeartCodec", mc->family, mc->family);
    const char *other = config_bool(cfg, "synthetic_data") ? "synthetic_data"
                        : config_string(cfg, "data_dir")[0] ? "data_dir"
                        : config_string(cfg, "data_backend_config")[0] ? "data_backend_config" : NULL;
    if (cache[0] && other)
        return st_fail(ST_ERR_INVALID, "data_cache_dir (%s) and %s are both set: give one", cache, other);
    if (cache[0] && !model_reads_text(mc) && !model_tokens(mc))
        return st_fail(ST_ERR_INVALID, "data_cache_dir: a cache holds text-encoder embeddings, which model_family %s "
                       "does not read (the dual-stream families do: flux, mmdit)", mc->family);
    /* a cache's shapes are its own (train_buckets_open); so are data_backend_config's aspect buckets */
    if (cache[0] || config_bool(cfg, "synthetic_data")) return ST_OK;
    if (config_string(cfg, "data_dir")[0] && config_string(cfg, "data_backend_config")[0])
        return st_fail(ST_ERR_INVALID, "data_dir (%s) and data_backend_config (%s) are both set: give one",
                       config_string(cfg, "data_dir"), config_string(cfg, "data_backend_config"));
    const char *squares = NULL; /* what the data gives where it is squares of one shape */
    if (config_string(cfg, "data_dir")[0]) squares = "a data_dir folder gives square crops of one shape";
    else if (!config_string(cfg, "data_backend_config")[0]) squares = "the built-in scenes are squares of one shape";
    bucket_shape shapes[MODEL_SHAPES_MAX];
    int buckets = 0;
    if (squares && !model_bucket_shapes(cfg, shapes, &buckets) && buckets > 1)
        return st_fail(ST_ERR_UNSUPPORTED, "bucket_shapes: %d shapes, but %s: train aspect buckets on "
                       "data_backend_config (its buckets are the run's shapes), or several shapes on synthetic_data",
                       buckets, squares);
    if (squares && mc->height != mc->width)
        return st_fail(ST_ERR_UNSUPPORTED, "a %lld x %lld latent, but %s: train non-square shapes on "
                       "data_backend_config (its aspect buckets) or on synthetic_data", (long long)mc->height,
                       (long long)mc->width, squares);
    if (mc->frames > 1)
        return st_fail(ST_ERR_UNSUPPORTED, "num_frames %lld: the model takes %lld latent frames, but segtrain's image "
                       "datasets hold images (one frame): train a video family on them with num_frames 1, on a cache "
                       "of video latents (data_cache_dir) or on synthetic_data",
                       (long long)config_int(cfg, "num_frames"), (long long)mc->frames);
    if (mc->channels == 3 && mc->vae_scale == 1) return ST_OK;
    /* a diffusers folder's config.json counts the channels of the pipeline's 2 x 2 packed patches: say both */
    const char *weights = config_string(cfg, "pretrained_model_name_or_path");
    struct stat sb;
    char folder[4200] = "";
    if (model_packed_channels(mc) != mc->channels && *weights && !stat(weights, &sb) && S_ISDIR(sb.st_mode))
        snprintf(folder, sizeof folder, " (%s's config.json: in_channels %lld, the pipeline's 2 x 2 packed patches "
                 "of %lld latent channels)", weights, (long long)model_packed_channels(mc), (long long)mc->channels);
    return st_fail(ST_ERR_INVALID, "in_channels %lld, vae_scale_factor %lld%s: segtrain has no VAE, so it trains on "
                   "images in pixel space (in_channels 3, vae_scale_factor 1: resolution is then the image edge) or on "
                   "a cache of the VAE's latents (data_cache_dir)", (long long)mc->channels, (long long)mc->vae_scale,
                   folder);
}

/* The run's images: data_backend_config in its aspect buckets (opened first, open_buckets), data_dir, or (said on
 * the run's first line) the built-in scenes. They are RGB pixels: segtrain has no VAE, so the model must take 3
 * channels at vae_scale_factor 1. Or a cache. */
static st_status open_data(trainer *t, const model_config *mc)
{
    const char *cache = config_string(t->cfg, "data_cache_dir"), *dir = config_string(t->cfg, "data_dir");
    st_status st = train_data_check(t->cfg, mc);
    if (st) return st;
    if (cache[0]) return open_cache(t, mc, cache);
    if (config_bool(t->cfg, "synthetic_data")) return ST_OK; /* batches are drawn in trainer_step */
    if (!dir[0] && !t->data)
        note(t, "segtrain: training on the built-in dataset of procedurally drawn shapes: no data_dir or "
                "data_backend_config given (data_backend_config: a SimpleTuner multidatabackend.json of local image "
                "folders; data_dir: one folder of PNGs)%s%s", "", "");
    const int edge = mc->height > DATA_MAX_RESOLUTION ? DATA_MAX_RESOLUTION + 1 : (int)mc->height;
    if (!t->data)
        st = dir[0] ? dataset_open_folder(dir, edge, &t->data)
                    : dataset_open_builtin(edge, config_int(t->cfg, "builtin_dataset_size"), t->seed, &t->data);
    if (st) return st;
    if (!model_reads_text(mc) && dataset_classes(t->data) > mc->classes) /* a captioned family reads no label */
        return st_fail(ST_ERR_INVALID, "num_classes: the model has %lld classes but the data has %d (set num_classes %d)",
                       (long long)mc->classes, dataset_classes(t->data), dataset_classes(t->data));
    return t->iter ? same_sizes(t) : data_iter_create(t->data, t->seed, &t->iter);
}

/* The data that brings its shapes (data_backend_config's aspect buckets, a cache), opened before anything else,
 * since its buckets are the run's shapes: t->cfg becomes the config with them as bucket_shapes. */
static st_status open_buckets(trainer *t)
{
    train_buckets tb;
    model_config mc;
    if (!train_data_bucketed(t->cfg)) return ST_OK;
    st_status st = model_config_from(t->cfg, &mc);
    if (!st) st = train_data_check(t->cfg, &mc); /* before any image is read */
    if (!st) st = train_buckets_open(t->cfg, t->ranks, &tb);
    if (st) return st;
    t->data = tb.data, t->iter = tb.iter, t->shape_of = tb.shape_of;
    if (tb.cfg) t->cfg = t->own_cfg = tb.cfg; /* else a cache of one shape */
    return ST_OK;
}

/* The run's length: max_train_steps, or with num_train_epochs (max_train_steps 0 or not given) that many passes
 * over the dataset, counted as SimpleTuner counts them. */
static st_status count_steps(trainer *t)
{
    const double epochs = config_float(t->cfg, "num_train_epochs");
    const int64_t steps = config_int(t->cfg, "max_train_steps");
    const bool by_steps = !epochs || (config_is_set(t->cfg, "max_train_steps") && steps);
    if (by_steps && epochs)
        return st_fail(ST_ERR_INVALID, "max_train_steps %lld and num_train_epochs %g are both set: set "
                       "num_train_epochs to 0 to count steps, or max_train_steps to 0 to count epochs (SimpleTuner "
                       "refuses both too)", (long long)steps, epochs);
    if (by_steps && !steps)
        return st_fail(ST_ERR_INVALID, "max_train_steps and num_train_epochs are both 0: set one above 0");
    if (by_steps) return t->total_steps = steps, ST_OK;
    if (!t->data)
        return st_fail(ST_ERR_INVALID, "num_train_epochs %g: synthetic_data has no dataset to pass over: give "
                       "max_train_steps", epochs);
    /* in aspect buckets an epoch is its batches, each of one bucket (pruned and short buckets as the data says) */
    const int64_t global = t->batch * t->ranks;
    const int64_t batches = t->shape_of ? data_iter_epoch_batches(t->iter)
                                        : (dataset_size(t->data) + global - 1) / global;
    const int64_t per_epoch = (batches + t->accum - 1) / t->accum;
    t->total_steps = (int64_t)ceil(epochs * (double)per_epoch);
    char given[32], what[200], within[64] = "";
    snprintf(given, sizeof given, "%g", epochs);
    if (t->shape_of) snprintf(within, sizeof within, " in %lld bucket batches", (long long)batches);
    snprintf(what, sizeof what, "%lld steps, %lld an epoch (%lld samples%s, a global batch of %lld, %lld accumulated)",
             (long long)t->total_steps, (long long)per_epoch, (long long)dataset_size(t->data), within,
             (long long)global, (long long)t->accum);
    note(t, "segtrain: num_train_epochs %s: %s", given, what);
    return ST_OK;
}

/* The trainable weights to (or from) one flat buffer in the gradient block's order. */
static void flat_weights(param_set *ps, float *flat, bool to_flat)
{
    for (int i = 0; i < ps->n; i++) {
        const param *q = &ps->items[i];
        if (!q->trainable || !q->g) continue;
        float *at = flat + (q->g - ps->grads);
        memcpy(to_flat ? at : q->w, to_flat ? q->w : at, (size_t)q->numel * sizeof(float));
    }
}

/* The optimizer (with ZeRO-1 this rank's share of the state) and use_ema's average, which starts as the trainable
 * weights (a resume then reads the checkpoint's) */
static st_status open_optimizer(trainer *t)
{
    param_set *ps = model_params(t->run.m);
    int64_t first, count;
    step_optimizer_share(t->cfg, ps->grad_count, t->rank, t->ranks, &first, &count);
    const st_status st = step_optimizer_open(t->cfg, ps, t->total_steps, first, count, &t->opt, &t->ema);
    if (!st && t->ema) flat_weights(ps, t->ema, true);
    return st;
}

st_status train_weights_path_check(const char *path)
{
    static const char which[] = "segtrain reads local weights: a .safetensors file, a diffusers index "
                                "(diffusion_pytorch_model.safetensors.index.json), or a diffusers model or pipeline "
                                "folder";
    struct stat st;
    if (stat(path, &st) == 0) return ST_OK;
    const int err = errno;
    const char *slash = strchr(path, '/');
    if (slash && slash != path && path[0] != '.' && !strchr(slash + 1, '/') && !strstr(path, ".safetensors") &&
        !strstr(path, ".json"))
        return st_fail(ST_ERR_INVALID, "pretrained_model_name_or_path: \"%s\" is a Hugging Face hub name, and "
                       "segtrain downloads nothing: %s", path, which);
    return st_fail(ST_ERR_INVALID, "pretrained_model_name_or_path: \"%s\": %s; %s", path, strerror(err), which);
}

/* The model's starting weights: a file, or the family's initialisation. With LoRA the file holds the base. */
static st_status load_weights(trainer *t)
{
    const char *path = config_string(t->cfg, "pretrained_model_name_or_path");
    const bool lora = !strcmp(config_string(t->cfg, "model_type"), "lora");
    st_status st = model_init(t->run.m, t->seed, false);
    if (st) return st;
    if (!path[0]) {
        if (lora && !t->rank)
            st_warn("segtrain: warning: model_type lora without pretrained_model_name_or_path adapts a freshly "
                    "initialised model: where the family zero-initialises its output layer (DiT's adaLN-zero final "
                    "layer, ...), that frozen layer passes no gradient back, so grad_norm stays 0 and the adapters "
                    "learn nothing; give the base weights in pretrained_model_name_or_path, or train model_type full");
        return ST_OK;
    }
    st = train_weights_path_check(path);
    if (!st) st = param_set_load(model_params(t->run.m), path, lora ? PARAMS_FROZEN : PARAMS_ALL, NULL);
    if (!st && !t->rank && objective_upstream_epsilon(model_get_config(t->run.m)))
        st_warn("segtrain: warning: SimpleTuner trains %s as DDPM epsilon-prediction, and its checkpoints predict "
                "noise; segtrain trains every family with the rectified flow, so this run retrains what %s predicts "
                "(docs/OBJECTIVES.md)", model_get_config(t->run.m)->family, path);
    return st;
}

size_t train_optimizer_bytes(const config *cfg, param_set *ps, int ranks)
{
    int64_t first, count;
    step_optimizer_share(cfg, ps->grad_count, dist_largest_share(ps->grad_count, ranks), ranks, &first, &count);
    optimizer *opt;
    float *ema;
    const size_t before = pool_live(ps->pool);
    if (step_optimizer_open(cfg, ps, config_int(cfg, "max_train_steps"), first, count, &opt, &ema)) return 0;
    const size_t bytes = pool_live(ps->pool) - before;
    pool_free(ps->pool, ema);
    optim_destroy(opt);
    return bytes;
}

/* What lowers the peak that the config does not already do, for the refusals below: naming checkpointing to a run
 * that checkpoints sends the user nowhere. */
static const char *peak_remedies(const config *cfg, char *buf, size_t size)
{
    snprintf(buf, size, "what lowers it: %s%s%sa smaller %sresolution; segtrain advise --device-memory SIZE finds the "
             "fastest schedule that fits",
             config_bool(cfg, "gradient_checkpointing") ? "" : "gradient_checkpointing, ",
             config_bool(cfg, "gradient_checkpointing_offload_attention") ? "" : "gradient_checkpointing_offload_attention, ",
             strcmp(config_string(cfg, "model_type"), "lora") ? "LoRA (model_type lora), " : "",
             config_int(cfg, "train_batch_size") > 1 ? "train_batch_size or " : "");
    return buf;
}

/* Refuses a bucket's predicted peaks past device_memory, host_memory or this machine's available memory; `which` names
 * the bucket in a run of several ("" in a run of one shape). */
static st_status plan_fits(const config *cfg, const pool_stats *device, const pool_stats *host, const char *which)
{
    size_t dev = 0, host_budget = 0;
    st_status st = config_bytes(cfg, "device_memory", &dev);
    if (!st) st = config_bytes(cfg, "host_memory", &host_budget);
    if (st) return st;
    char b[2][24], hint[320];
    if (dev && device->peak > dev)
        return st_fail(ST_ERR_OOM, "device_memory: the plan's peak is %s%s but the budget is %s (%s)",
                       st_bytes(b[0], device->peak), which, st_bytes(b[1], dev), peak_remedies(cfg, hint, sizeof hint));
    if (host_budget && host->peak > host_budget)
        return st_fail(ST_ERR_HOST_OOM, "host_memory: the plan's host peak is %s%s but the budget is %s",
                       st_bytes(b[0], host->peak), which, st_bytes(b[1], host_budget));
    /* the CPU backend's device pool is this machine's memory, as the host pool is */
    const size_t avail = pool_system_available(), need = device->peak + host->peak;
    if (avail && need > avail) {
        char c[2][24];
        return st_fail(ST_ERR_HOST_OOM, "the plan's peak is %s (device %s, host %s)%s but this machine has %s "
                       "available: the system would kill the run mid-step (%s)", st_bytes(b[0], need),
                       st_bytes(b[1], device->peak), st_bytes(c[0], host->peak), which,
                       st_bytes(c[1], avail), peak_remedies(cfg, hint, sizeof hint));
    }
    return ST_OK;
}

/* train_plan at every bucket shape (one without bucket_shapes): device[i] and host[i] bucket i's, *largest the run's
 * peak. The largest is checked first, so that a run that does not fit is refused naming it. */
static st_status plan_buckets(const config *cfg, int ranks, pool_stats *device, pool_stats *host, int *largest)
{
    model_run r;
    float *comm = NULL;
    st_status st = model_run_open(cfg, false, &r);
    /* the reduction's scratch lives through every step, as the trainer holds it: counted before any budget check */
    if (!st) st = step_comm_open(r.host, model_params(r.m)->grad_count, ranks, &comm);
    if (!st) st = flow_step_dry_buckets(&r, config_int(cfg, "train_batch_size"), ranks, device, host, largest);
    if (comm) pool_free(r.host, comm);
    const int n = r.n_buckets;
    bucket_shape shape[MODEL_SHAPES_MAX];
    memcpy(shape, r.shape, sizeof shape);
    if (r.m) model_run_close(&r);
    for (int k = -1; !st && k < n; k++) {
        const int i = k < 0 ? *largest : k;
        char name[48], which[96] = "";
        bucket_shape_name(&shape[i], name, sizeof name);
        if (n > 1) snprintf(which, sizeof which, " at bucket %s (%s of %d)", name, i == *largest ? "the largest" : "one",
                            n);
        st = plan_fits(cfg, &device[i], &host[i], which);
    }
    return st;
}

st_status train_plan(const config *cfg, int ranks, pool_stats *device, pool_stats *host)
{
    pool_stats dev[MODEL_SHAPES_MAX], hosts[MODEL_SHAPES_MAX];
    int largest;
    const st_status st = plan_buckets(cfg, ranks, dev, hosts, &largest);
    if (!st) *device = dev[largest], *host = hosts[largest];
    return st;
}

/* A cached sample's conditioning ends with the guidance value where the model embeds guidance, as
 * model_condition's does: the cache holds only what the text encoders gave. */
static void cached_guidance(trainer *t, float *cond)
{
    const model_config *mc = model_get_config(t->run.m);
    if (mc->guidance_embeds) cond[dataset_text_floats(t->data)] = (float)mc->guidance;
}

/* AnyFlow's empty prompt: a cache's null.safetensors must be there when guidance is fused */
static st_status open_meanflow(trainer *t)
{
    if (t->cached && !dataset_null_text(t->data) && t->mf.guidance != 1.0)
        return st_fail(ST_ERR_INVALID, "distillation_config.fuse_guidance_scale %g needs the empty prompt's embeddings: "
                       "add %s/null.safetensors (scripts/make_cache.py writes it) or set it to 1", t->mf.guidance,
                       config_string(t->cfg, "data_cache_dir"));
    return ST_OK;
}

static void close_batch(trainer *t)
{
    step_batch b = {.x0 = t->x0, .noise = t->noise, .t = t->t, .cond = t->cond, .r = t->r, .null_cond = t->null_cond};
    step_batch_close(t->run.device, &b);
    t->x0 = t->noise = t->t = t->cond = t->r = t->null_cond = NULL;
}

/* The step's batch at its model's shape, as flow_step_dry holds it, with AnyFlow's empty prompt's conditioning for
 * every sample. */
static st_status open_batch(trainer *t, const model_config *mc)
{
    step_batch b;
    t->cond_len = model_cond_len(mc);
    const st_status st = step_batch_open(t->run.device, t->batch, model_sample_numel(mc), t->cond_len, t->anyflow, &b);
    t->x0 = b.x0, t->noise = b.noise, t->t = b.t, t->cond = b.cond, t->r = b.r, t->null_cond = b.null_cond;
    for (int64_t i = 0; !st && t->anyflow && i < t->batch; i++) {
        float *cond = t->null_cond + i * t->cond_len;
        if (!t->cached) model_null_condition(mc, cond);
        else if (dataset_null_text(t->data)) {
            memcpy(cond, dataset_null_text(t->data), sizeof(float) * (size_t)dataset_text_floats(t->data));
            cached_guidance(t, cond);
        }
    }
    return st;
}

/* A line of the log as the trainer writes it: one JSON object with the step, then a newline. */
static bool whole_line(const char *line, size_t len, long long *step)
{
    if (!len || line[len - 1] != '\n' || sscanf(line, "{\"step\": %lld,", step) != 1) return false;
    cJSON *j = cJSON_ParseWithLength(line, len);
    const bool ok = cJSON_IsObject(j) && cJSON_IsNumber(cJSON_GetObjectItem(j, "step"));
    cJSON_Delete(j);
    return ok;
}

/* A resumed run goes on from its checkpoint's step: the log's lines of later steps (a run stopped after its last
 * checkpoint) are dropped, and a torn last line (a crash in its write) or one spliced from two (a log written by
 * an older segtrain on a disk that filled) with them, by an atomic rewrite, so that each step is logged once and
 * every line is whole. *spoilt counts the torn and spliced lines dropped. */
static st_status trim_log(const char *path, int64_t last, int *spoilt)
{
    *spoilt = 0;
    FILE *in;
    if (file_fopen_regular(path, &in)) return errno == ENOENT ? ST_OK : ST_ERR_IO;
    atomic_file af;
    st_status st = atomic_file_open(&af, path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    bool dropped = false;
    while (!st && (len = getline(&line, &cap, in)) > 0) {
        long long step;
        const bool whole = whole_line(line, (size_t)len, &step);
        *spoilt += !whole;
        if (!whole || step > last) dropped = true;
        else if (fputs(line, af.fp) == EOF) st = st_fail(ST_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    if (!st && ferror(in)) st = st_fail(ST_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    free(line);
    fclose(in);
    if (st || !dropped) atomic_file_abort(&af); /* nothing to drop: the log stays as it is */
    return st || !dropped ? st : atomic_file_commit(&af);
}

/* Data-parallel: the gradient reduction's scratch, in the host pool (persistent, so it adds to the predicted host
 * peak as it is); the job's global batch, said first. */
static st_status open_ranks(trainer *t)
{
    const int64_t global = t->batch * t->ranks;
    const st_status st = step_comm_open(t->run.host, model_params(t->run.m)->grad_count, t->ranks, &t->comm);
    char line[160];
    snprintf(line, sizeof line, "%d ranks x train_batch_size %lld = a global batch of %lld", t->ranks,
             (long long)t->batch, (long long)global);
    note(t, "segtrain: data-parallel over MPI: %s%s (each rank trains its share; gradients summed in rank order)",
         line, "");
    return st;
}

/* The identity of a weights file, or of a diffusers folder's config and weights: sizes and first MiB, a hash. */
static uint64_t weights_identity(const char *path)
{
    static const char *const names[] = {"", "/config.json", "/diffusion_pytorch_model.safetensors",
                                        "/diffusion_pytorch_model.safetensors.index.json", "/transformer/config.json",
                                        "/transformer/diffusion_pytorch_model.safetensors",
                                        "/transformer/diffusion_pytorch_model.safetensors.index.json"};
    uint64_t h = 0xcbf29ce484222325ull;
    static unsigned char head[1 << 20];
    for (size_t i = 0; *path && i < sizeof names / sizeof *names; i++) {
        char file[PATH_MAX_LEN];
        snprintf(file, sizeof file, "%s%s", path, names[i]);
        struct stat sb;
        FILE *f = !stat(file, &sb) && S_ISREG(sb.st_mode) ? fopen(file, "rb") : NULL;
        if (!f) continue;
        const size_t n = fread(head, 1, sizeof head, f);
        fclose(f);
        const int64_t size = (int64_t)sb.st_size;
        for (size_t k = 0; k < sizeof size; k++) h = (h ^ ((const unsigned char *)&size)[k]) * 0x100000001b3ull;
        for (size_t k = 0; k < n; k++) h = (h ^ head[k]) * 0x100000001b3ull;
    }
    return h;
}

/* Every rank of a data-parallel run resolves the same config and reads the same weights, or the job stops here,
 * naming the first key that differs: a rank with other steps, sizes or intervals would hang or corrupt the
 * collectives, one with another seed or learning rate would train silently apart. Counts are compared first, so
 * that no collective sees another rank's count. */
static st_status same_config_on_ranks(const config *cfg)
{
    if (dist_size() == 1) return ST_OK;
    int n = 0, index, rank;
    for (uint64_t h; config_key_hash(cfg, n, &h);) n++;
    const uint64_t count = (uint64_t)n;
    st_status st = dist_compare(&count, 1, &index, &rank);
    if (!st && index >= 0)
        return st_fail(ST_ERR_INVALID, "rank %d runs another segtrain than rank 0 (%d config keys here): start every "
                       "rank with the same build", rank, n);
    uint64_t *h = st ? NULL : malloc((size_t)n * sizeof *h);
    if (!st && !h) return st_host_oom("the config's hashes");
    for (int i = 0; !st && i < n; i++) {
        const char *key = config_key_hash(cfg, i, &h[i]);
        if (!strcmp(key, "num_threads")) h[i] = 0; /* each host's own */
        if (!strcmp(key, "pretrained_model_name_or_path")) /* the files, wherever each host keeps them */
            h[i] = weights_identity(config_string(cfg, key));
    }
    if (!st) st = dist_compare(h, n, &index, &rank);
    free(h);
    uint64_t unused;
    const char *key = st || index < 0 ? NULL : config_key_hash(cfg, index, &unused);
    if (key && !strcmp(key, "pretrained_model_name_or_path"))
        return st_fail(ST_ERR_INVALID, "pretrained_model_name_or_path: rank %d reads other weights than rank 0 (their "
                       "sizes or first bytes differ): every rank must read the same files", rank);
    if (key)
        return st_fail(ST_ERR_INVALID, "%s: rank %d's value differs from rank 0's: every rank of a data-parallel run "
                       "must be given the same config", key, rank);
    return st;
}

/* validation_resolution's sizes, each one the model takes. */
static st_status check_validation_sizes(const config *cfg)
{
    bucket_shape sizes[MODEL_SHAPES_MAX];
    int n = 0;
    st_status st = model_shapes_of(cfg, "validation_resolution", sizes, &n);
    for (int k = 0; !st && k < n; k++) {
        model_config at;
        char why[512];
        if (!(st = model_config_at(cfg, &sizes[k], &at))) continue;
        const char *e = st_error(), *own = "bucket_shapes: "; /* model_config_at's words are for that key */
        snprintf(why, sizeof why, "%s", strncmp(e, own, strlen(own)) ? e : e + strlen(own));
        st = st_fail(st, "validation_resolution: %s", why);
    }
    return st;
}

st_status trainer_create(const config *cfg, FILE *log, trainer **out)
{
    *out = NULL;
    trainer *t = calloc(1, sizeof *t);
    if (!t) return st_host_oom("the trainer");
    t->log_fd = t->lock_fd = -1;
    t->cfg = cfg;
    t->log = log;
    t->saved_step = -1;
    t->seed = (uint64_t)config_int(cfg, "seed");
    t->batch = config_int(cfg, "train_batch_size");
    t->accum = config_int(cfg, "gradient_accumulation_steps");
    t->label_dropout = (float)config_float(cfg, "caption_dropout_probability");
    t->rank = dist_rank(), t->ranks = dist_size();
    t->zero = t->ranks > 1 && config_int(cfg, "zero_stage") == 1;
    t->first = t->rank * t->batch;
    if ((t->warns = log && !t->rank)) t->warn_was = st_warn_set((st_warn_sink){warned, t});
    st_status st = same_config_on_ranks(cfg);
    if (!st && strlen(config_string(cfg, "output_dir")) >= DIR_MAX)
        st = st_fail(ST_ERR_INVALID, "output_dir: longer than %d characters", DIR_MAX - 1);
    snprintf(t->dir, sizeof t->dir, "%.*s", DIR_MAX - 1, config_string(cfg, "output_dir"));
    if (!st) st = check_validation_sizes(cfg); /* a bad one refused before the first step, not at validation */
    char from[PATH_MAX_LEN] = ""; /* the checkpoint the run resumes from; "" none */
    if (!st) st = find_resume(t, from, sizeof from);
    if (!st && from[0]) st = resume_threads(t, from); /* before anything is sized by the thread count */
    if (!st) st = open_buckets(t); /* the data's aspect buckets are the run's shapes: t->cfg has them */
    if (!st) st = plan_buckets(t->cfg, t->ranks, t->predicted, t->predicted_host, &t->largest);
    char created[PATH_MAX_LEN] = "";
    if (!st && !t->rank) st = file_make_dirs(t->dir, created); /* rank 0 writes every file of the run */
    if (!st && !t->rank) st = lock_output_dir(t);
    if (!st) st = model_run_open(t->cfg, true, &t->run);
    const model_config *mc = st ? NULL : model_get_config(t->run.m);
    if (!st) st = open_data(t, mc); /* before any other note: the built-in data is said on the first line */
    if (!st) st = count_steps(t);
    if (!st && !t->rank) st = ckpt_settings_warn(cfg);
    if (!st) st = load_weights(t);
    if (!st) st = model_spill_weights(t->run.m); /* group_offload_to_disk_path: the loaded weights to their files */
    if (!st) st = open_optimizer(t);
    if (!st) {
        t->classes = t->data ? dataset_classes(t->data) : mc->classes;
        const int64_t global = t->batch * t->ranks; /* labels and captions are indexed by the global batch */
        t->labels = calloc((size_t)global, sizeof *t->labels);
        t->captions = calloc((size_t)global, sizeof *t->captions);
        if (!t->labels || !t->captions) st = st_host_oom("a batch's labels and captions");
        if (!st) st = meanflow_from_config(cfg, &t->mf, &t->anyflow);
        if (!st && t->ranks > 1) st = open_ranks(t);
        if (!st && t->anyflow) st = open_meanflow(t);
        if (!st) st = drift_from_config(cfg, mc, &t->drift, &t->drifts);
    }
    if (!st && !from[0] && !strcmp(config_string(cfg, "resume_from_checkpoint"), "latest"))
        note(t, "segtrain: no checkpoint in %s yet: starting fresh%s", t->dir, "");
    if (!st && from[0] && !(st = resume(t, from))) {
        char done[32], threads[16];
        snprintf(done, sizeof done, "%lld", (long long)t->steps_done);
        snprintf(threads, sizeof threads, "%d", ops_threads());
        note(t, "segtrain: resumed from %s at step %s", from, done);
        if (t->threads_from_checkpoint)
            note(t, "segtrain: it goes on at %s threads, as the run that wrote it%s (a GEMM's bits follow the thread "
                 "count)", threads, "");
    }
    if (!st) {
        char *path = t->log_path;
        int spoilt = 0;
        snprintf(path, sizeof t->log_path, "%s/train_log.jsonl", t->dir);
        if (t->rank) snprintf(path, sizeof t->log_path, "/dev/null"); /* rank 0 logs the job's steps */
        else if (t->steps_done) st = trim_log(path, t->steps_done, &spoilt);
        char count[24];
        snprintf(count, sizeof count, "%d", spoilt);
        if (spoilt) note(t, "segtrain: %s: dropped %s torn or spliced line(s), of steps logged before the resume", path,
                         count);
        if (!st && (t->log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (t->steps_done ? 0 : O_TRUNC),
                                     0644)) < 0)
            st = st_fail(ST_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    if (st) {
        if (!t->rank && created[0] && t->lock_fd >= 0) { /* a folder this run made holds nothing of any other */
            char lock[PATH_MAX_LEN + 32];
            snprintf(lock, sizeof lock, "%s/.segtrain.lock", t->dir);
            unlink(lock);
        }
        if (!t->rank) remove_made(t->dir, created);
        trainer_destroy(t);
        return st;
    }
    *out = t;
    return ST_OK;
}

/* The noise, timesteps (EDM's for a family trained so) and label dropout of micro-batch `micro` of the run:
 * counter-based, so a resumed run draws exactly what the uninterrupted one did. */
static void draw(trainer *t, int64_t micro, int64_t per)
{
    const uint64_t key = rng_u64(t->seed, rng_stream("train.step"), (uint64_t)micro);
    const bool edm = objective_edm(model_get_config(t->m));
    rng_fill_normal_at(t->noise, t->batch * per, t->seed, key ^ rng_stream("noise"), t->first * per, 0.0f, 1.0f);
    for (int64_t i = 0; i < t->batch; i++) {
        const uint64_t g = (uint64_t)(t->first + i); /* the sample's index in the global batch */
        t->t[i] = edm ? edm_t(rng_normal(t->seed, key ^ rng_stream("t"), g))
                      : (float)rng_uniform(t->seed, key ^ rng_stream("t"), g);
        if (t->anyflow) t->r[i] = (float)rng_uniform(t->seed, key ^ rng_stream("r"), g);
        float *cond = t->cond + i * t->cond_len;
        if (rng_uniform(t->seed, key ^ rng_stream("label_dropout"), g) >= t->label_dropout) continue;
        if (!t->cached) model_null_condition(model_get_config(t->m), cond);
        else memcpy(cond, dataset_null_text(t->data), sizeof(float) * (size_t)dataset_text_floats(t->data));
    }
    if (t->anyflow) meanflow_times(&t->mf, t->batch, t->t, t->r, t->t, t->r); /* the two uniforms, in place */
}

/* A batch of `used` floats a sample (model_loss_numel, what data gives) spread to `per` (model_sample_numel) in place,
 * the rest of each sample zero: LTX-2's audio latents, which the data has none of. */
static void spread_samples(float *x, int64_t batch, int64_t used, int64_t per)
{
    for (int64_t i = batch - 1; used < per && i >= 0; i--) {
        memmove(x + i * per, x + i * used, (size_t)used * sizeof(float));
        memset(x + i * per + used, 0, (size_t)(per - used) * sizeof(float));
    }
}

static void synthetic_batch(trainer *t, int64_t micro, int64_t used)
{
    rng_fill_normal_at(t->x0, t->batch * used, t->seed, rng_u64(t->seed, rng_stream("synthetic"), (uint64_t)micro),
                       t->first * used, 0.0f, 1.0f);
    const model_config *mc = model_get_config(t->m);
    for (int64_t i = 0; model_tokens(mc) && i < t->batch * used; i++) { /* a token model's: ids from the draws */
        const int64_t vocab = i % mc->channels == mc->channels - 1 ? mc->text_vocab : mc->classes;
        t->x0[i] = (float)((int64_t)(fabsf(t->x0[i]) * 4096.0f) % vocab);
    }
    for (int64_t i = t->first; i < t->first + t->batch; i++) {
        t->labels[i] = (micro * t->batch * t->ranks + i) % t->classes;
        t->captions[i][0] = 0;
    }
}

/* The validation grid at shape (NULL: the run's model's) into path: on the run's model of that shape, or on one made
 * for it on the same weights (model_create_sharing) and gone after. */
static st_status sample_at(trainer *t, const bucket_shape *shape, const sample_settings *s, const char *const *rowcap,
                           int rows, const char *path)
{
    const int per_row = (int)config_int(t->cfg, "validation_samples_per_class");
    for (int i = 0; shape && i < t->run.n_buckets; i++)
        if (!memcmp(&t->run.shape[i], shape, sizeof *shape))
            return sample_grid(model_run_at(&t->run, i).m, s, rowcap, rows, per_row, path);
    if (!shape) return sample_grid(t->run.m, s, rowcap, rows, per_row, path);
    model_config mc;
    model *m = NULL;
    st_status st = model_config_at(t->cfg, shape, &mc);
    if (!st) st = model_create_sharing(&mc, t->run.m, &m);
    if (!st) st = sample_grid(m, s, rowcap, rows, per_row, path);
    model_destroy(m);
    return st;
}

/* One grid a validation_resolution size (step-N-WxH.png), or one at the run's shape (step-N.png). */
static st_status validate(trainer *t)
{
    snprintf(t->validation, sizeof t->validation, "%s/validation", t->dir);
    st_status st = file_make_dirs(t->validation, NULL);
    bucket_shape shapes[MODEL_SHAPES_MAX];
    int n_shapes = 0;
    if (!st) st = model_shapes_of(t->cfg, "validation_resolution", shapes, &n_shapes);
    const sample_settings s = {.steps = (int)config_int(t->cfg, "validation_num_inference_steps"),
                               .guidance = (float)config_float(t->cfg, "validation_guidance"),
                               .seed = (uint64_t)config_int(t->cfg, "validation_seed")};
    /* one row per class; with a dataset, each row's caption is that of the class's first sample */
    const int rows = (int)(t->classes < 64 ? t->classes : 64);
    char(*captions)[CAPTION_MAX] = calloc((size_t)rows, sizeof *captions);
    const char *rowcap[64];
    if (!captions) st = st ? st : st_host_oom("the validation's %d captions", rows);
    for (int r = 0; r < rows && captions; r++) rowcap[r] = captions[r];
    for (int64_t i = 0, found = 0; !st && t->data && found < rows && i < dataset_size(t->data); i++) {
        int64_t label;
        char caption[CAPTION_MAX];
        if (!(st = dataset_get(t->data, i, NULL, &label, caption)) && label < rows && !captions[label][0])
            memcpy(captions[label], caption, CAPTION_MAX), found++;
    }
    for (int k = 0; !st && k < (n_shapes ? n_shapes : 1); k++) {
        char size[48] = "";
        if (n_shapes) size[0] = '-', bucket_shape_name(&shapes[k], size + 1, sizeof size - 1);
        snprintf(t->validation, sizeof t->validation, "%s/validation/step-%06lld%s.png", t->dir,
                 (long long)t->steps_done, size);
        st = sample_at(t, n_shapes ? &shapes[k] : NULL, &s, rowcap, rows, t->validation);
    }
    if (!st && n_shapes > 1) { /* what was written, said once: step-N-{8x8,12x8}.png */
        char list[512] = "";
        for (int k = 0; k < n_shapes; k++) {
            char name[48];
            bucket_shape_name(&shapes[k], name, sizeof name);
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? "," : "", name);
        }
        snprintf(t->validation, sizeof t->validation, "%s/validation/step-%06lld-{%.200s}.png", t->dir,
                 (long long)t->steps_done, list); /* said, not opened: a long list may be cut */
    }
    free(captions);
    return st;
}

/* ZeRO-1: every rank's share of the trainable weights, to every rank. */
static st_status gather_weights(trainer *t)
{
    param_set *ps = model_params(t->run.m);
    float *flat = t->comm; /* dist_scratch_floats(n) >= n */
    flat_weights(ps, flat, true);
    const st_status st = dist_allgather(flat, ps->grad_count);
    if (!st) flat_weights(ps, flat, false);
    return st;
}

/* Appends one line of the log in one write. A write that fails, or writes part of the line (a full disk), is an
 * error like a checkpoint's: the run stops, and the part written is cut off again so that the log holds whole lines
 * only (the step is done again by a resume from the last checkpoint, which comes after its line).
 * SEGTRAIN_FAULT=log-full-step-S writes half of step S's line and fails as a full disk would (tests). */
static st_status log_line(trainer *t, const char *line, size_t n, int64_t step)
{
    const off_t end = lseek(t->log_fd, 0, SEEK_END);
    const char *fault = getenv("SEGTRAIN_FAULT");
    long long full = -1;
    if (fault) sscanf(fault, "log-full-step-%lld", &full);
    const ssize_t wrote = write(t->log_fd, line, full == step ? n / 2 : n);
    if (wrote == (ssize_t)n) return ST_OK;
    const int err = wrote < 0 ? errno : ENOSPC; /* a short write: what the next one would say */
    const bool cut = end >= 0 && wrote > 0 && ftruncate(t->log_fd, end) == 0;
    return st_fail(ST_ERR_IO, "%s: cannot write the line of step %lld: %s; stopping (%s; a resume from the last "
                   "checkpoint does the step again)", t->log_path, (long long)step, strerror(err),
                   wrote <= 0 ? "nothing of it was written" : cut ? "the part written was cut off again"
                                                                : "the part written could not be cut off");
}

/* The bucket of step `step` (counted from 0) of a run over n shapes. Synthetic data has no samples to put in buckets,
 * so each step draws its shape, uniformly, keyed by (seed, step) alone: a resume at any step continues the order. */
static int step_bucket(uint64_t seed, int64_t step, int n)
{
    return n > 1 ? (int)(rng_u64(seed, rng_stream("train.bucket"), (uint64_t)step) % (uint64_t)n) : 0;
}

/* The bucket of the next micro-batch: its data batch's (aspect buckets), or the step's draw (step_bucket). */
static st_status micro_bucket(trainer *t, int *bucket)
{
    if (!t->shape_of) return *bucket = step_bucket(t->seed, t->steps_done, t->run.n_buckets), ST_OK;
    int b;
    st_status st = data_iter_peek_bucket(t->iter, &b);
    if (!st && (b < 0 || b >= dataset_buckets(t->data) || t->shape_of[b] < 0))
        st = st_fail(ST_ERR_INTERNAL, "the data's next batch is of bucket %d, which the run has no shape for", b);
    if (!st) *bucket = t->shape_of[b];
    return st;
}

/* Puts the step at bucket i: that bucket's model, and the batch at its shape (open_batch), opened again only where
 * the bucket changes, so that a step's micro-batches of one bucket hold one batch, as the dry step does. */
static st_status at_bucket(trainer *t, int i)
{
    if (t->x0 && i == t->bucket) return ST_OK;
    close_batch(t);
    t->bucket = i;
    t->m = model_run_at(&t->run, i).m;
    return open_batch(t, model_get_config(t->m));
}

st_status trainer_step(trainer *t, train_step_info *info)
{
    param_set *ps = model_params(t->run.m); /* every bucket's model trains these */
    const double t0 = clock_seconds();
    close_batch(t); /* a step that failed left its own */
    pool_reset_peak(t->run.device);
    pool_reset_peak(t->run.host);
    param_set_zero_grads(ps);
    double loss_sum = 0;
    st_status st = ST_OK;
    int largest = -1; /* the step's bucket of the largest predicted peak: the step's peak is its */
    for (int64_t k = 0; k < t->accum && !st; k++) {
        const int64_t micro = t->steps_done * t->accum + k;
        int bucket;
        if (!(st = micro_bucket(t, &bucket))) st = at_bucket(t, bucket);
        if (st) break;
        if (largest < 0 || t->predicted[bucket].peak > t->predicted[largest].peak) largest = bucket;
        const model_config *mc = model_get_config(t->m);
        const int64_t per = model_sample_numel(mc), used = model_loss_numel(mc);
        /* a loader reads this rank's share of the global batch, and every rank's position passes all of it */
        if (t->iter)
            st = data_iter_next_share(t->iter, t->batch * t->ranks, t->first, t->batch, t->x0, t->labels + t->first,
                                      t->captions + t->first, NULL, t->cached ? t->cond : NULL, t->cond_len);
        else synthetic_batch(t, micro, used);
        if (st) break;
        spread_samples(t->x0, t->batch, used, per);
        for (int64_t i = 0; i < t->batch; i++)
            if (t->cached) cached_guidance(t, t->cond + i * t->cond_len);
            else model_condition(mc, t->labels[t->first + i], t->captions[t->first + i], t->cond + i * t->cond_len);
        draw(t, micro, per);
        const flow_batch fb = {.batch = t->batch, .x0 = t->x0, .noise = t->noise, .t = t->t, .cond = t->cond,
                               .grad_scale = 1.0f / (float)(t->accum * t->ranks),
                               .meanflow = t->anyflow ? &t->mf : NULL,
                               .r = t->r, .null_cond = t->null_cond, .drift = t->drifts ? &t->drift : NULL};
        float loss;
        model_set_dropout_seed(t->m, rng_u64(t->seed, rng_stream("train.dropout"), (uint64_t)micro));
        st = flow_loss(t->m, &fb, true, &loss);
        loss_sum += loss;
    }
    close_batch(t);
    if (largest >= 0) bucket_shape_name(&t->run.shape[largest], t->bucket_name, sizeof t->bucket_name);
    /* the fault test's dead rank: SEGTRAIN_FAULT=kill-rank-R-step-S dies before step S's reduction */
    const char *fault = getenv("SEGTRAIN_FAULT");
    int fault_rank, fault_step;
    if (fault && sscanf(fault, "kill-rank-%d-step-%d", &fault_rank, &fault_step) == 2 && fault_rank == t->rank &&
        fault_step == t->steps_done + 1)
        raise(SIGKILL);
    /* every rank's gradients (each already scaled by 1 / ranks) summed, and the loss averaged, in rank order */
    double loss = loss_sum / (double)t->accum;
    if (!st && t->ranks > 1) /* ZeRO-1 needs only its own share of the sum */
        st = t->zero ? dist_reduce_scatter(ps->grads, ps->grad_count, t->comm)
                     : dist_sum(ps->grads, ps->grad_count, t->comm);
    if (!st && t->ranks > 1 && !(st = dist_sum_double(&loss))) loss /= t->ranks;
    if (st) return st;
    *info = (train_step_info){.step = t->steps_done + 1, .loss = (float)loss, .bucket = largest,
                              .bucket_name = t->run.n_buckets > 1 ? t->bucket_name : NULL};
    if (!isfinite(info->loss))
        return st_fail(ST_ERR_NUMERIC, "the loss is %g at step %lld: stopping; nothing of this step was saved",
                       info->loss, (long long)info->step);
    const double t_opt = clock_seconds();
    double squares = optim_sum_squares(t->opt); /* a shard's: summed over the ranks in rank order */
    if (t->zero && (st = dist_sum_double(&squares))) return st;
    info->grad_norm = sqrt(squares);
    if (!isfinite(info->grad_norm))
        return st_fail(ST_ERR_NUMERIC, "the gradient norm is %g at step %lld: stopping; nothing of this step was saved",
                       info->grad_norm, (long long)info->step);
    optim_clip_by(t->opt, info->grad_norm);
    if ((st = optim_step(t->opt, &info->lr))) return st;
    if (t->zero) st = gather_weights(t); /* each rank updated its share of the trainable weights */
    if (st) return st;
    info->optimizer_seconds = clock_seconds() - t_opt;
    info->comm_seconds = dist_take_seconds();
    t->steps_done++;
    const int64_t every_ema = config_int(t->cfg, "ema_update_interval");
    if (t->ema && t->steps_done % every_ema == 0) {
        const double d = ema_decay(config_float(t->cfg, "ema_decay"), config_int(t->cfg, "ema_warmup_steps"),
                                   t->steps_done);
        ema_update(model_params(t->run.m), t->ema, d);
    }
    info->seconds = clock_seconds() - t0;
    info->peak_device = pool_peak(t->run.device);
    info->peak_host = pool_peak(t->run.host);
    char line[512], bucket[80] = "";
    if (info->bucket_name) snprintf(bucket, sizeof bucket, ", \"bucket\": \"%s\"", info->bucket_name);
    const int n = snprintf(line, sizeof line,
                           "{\"step\": %lld, \"loss\": %.7g, \"lr\": %.6g, \"grad_norm\": %.6g, \"sec_per_step\": %.4f, "
                           "\"peak_device_bytes\": %zu, \"peak_host_bytes\": %zu, \"ranks\": %d, "
                           "\"allreduce_seconds\": %.4f%s}\n",
                           (long long)info->step, info->loss, info->lr, info->grad_norm, info->seconds,
                           info->peak_device, info->peak_host, t->ranks, info->comm_seconds, bucket);
    if ((st = log_line(t, line, (size_t)n, info->step))) return st;
    const int64_t every = config_int(t->cfg, "checkpoint_step_interval"), val = config_int(t->cfg, "validation_steps");
    if (every && t->steps_done % every == 0) { /* rank 0 writes it */
        if ((st = checkpoint(t))) return st;
        info->checkpoint = t->rank ? NULL : t->checkpoint;
    }
    const model_config *mc = model_get_config(t->run.m); /* no VAE: pixels sample as images; a token model: no */
    const bool images = mc->channels == 3 && !t->cached && !model_tokens(mc);
    if (val && t->steps_done % val == 0 && images && !t->rank) {
        if ((st = validate(t))) return st;
        info->validation = t->validation;
    }
    return ST_OK;
}

bool trainer_done(const trainer *t) { return t->steps_done >= t->total_steps; }
int64_t trainer_steps_done(const trainer *t) { return t->steps_done; }
int64_t trainer_total_steps(const trainer *t) { return t->total_steps; }
model *trainer_model(trainer *t) { return t->run.m; }
const pool_stats *trainer_predicted(const trainer *t, bool host)
{
    return trainer_bucket_predicted(t, t->largest, host);
}

const pool_stats *trainer_bucket_predicted(const trainer *t, int bucket, bool host)
{
    return host ? &t->predicted_host[bucket] : &t->predicted[bucket];
}

int trainer_buckets(const trainer *t, const bucket_shape **shapes)
{
    if (shapes) *shapes = t->run.shape;
    return t->run.n_buckets ? t->run.n_buckets : 1;
}

/* LyCORIS's adapters under the package's keys, lycoris_config's text in the metadata as SimpleTuner writes it */
static st_status save_lycoris(trainer *t, param_set *ps, const char *path, const char *const *meta)
{
    const char *file = config_string(t->cfg, "lycoris_config");
    FILE *f = fopen(file, "rb");
    char text[1 << 16];
    const size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    if (!f || len == sizeof text - 1)
        return st_fail(ST_ERR_IO, "lycoris_config %s: cannot read it back (under 64 KiB) for the adapters' metadata", file);
    text[len] = '\0';
    return param_set_save_lycoris(ps, path, text, meta, 1);
}

/* The model's weights as a run's result: the LoRA adapters under PEFT's names, as SimpleTuner and diffusers'
 * save_lora_weights write them, or every weight. */
static st_status save_weights(trainer *t, const char *path)
{
    const bool lora = !strcmp(config_string(t->cfg, "model_type"), "lora");
    const char *meta[] = {"format", "pt", "segtrain.model_type", lora ? "lora" : "full"};
    param_set *ps = model_params(t->run.m);
    if (ps->lycoris) return save_lycoris(t, ps, path, meta + 2);
    return lora ? param_set_save_lora(ps, path, model_get_config(t->run.m)->lora_alpha, meta + 2, 1)
                : param_set_save(ps, path, PARAMS_ALL, false, NULL, 0, meta, 2);
}

st_status trainer_finish(trainer *t, const char **path)
{
    const char *name = strcmp(config_string(t->cfg, "model_type"), "lora") ? "model.safetensors" : SFT_LORA_FILE;
    snprintf(t->final, sizeof t->final, "%s/%s", t->dir, name);
    *path = t->final;
    st_status st = t->rank ? ST_OK : save_weights(t, t->final); /* rank 0 writes */
    if (!st && t->ema && !t->rank) { /* the average beside them, in ema/, as SimpleTuner writes it */
        char dir[PATH_MAX_LEN], file[PATH_MAX_LEN + 64];
        snprintf(dir, sizeof dir, "%s/ema", t->dir);
        snprintf(file, sizeof file, "%s/%s", dir, name);
        st = file_make_dirs(dir, NULL);
        ema_swap(model_params(t->run.m), t->ema);
        if (!st) st = save_weights(t, file);
        ema_swap(model_params(t->run.m), t->ema);
    }
    if (!st && config_int(t->cfg, "checkpoint_step_interval")) st = trainer_checkpoint(t, NULL);
    *path = t->final;
    return st;
}

st_status trainer_checkpoint(trainer *t, const char **path)
{
    st_status st = t->saved_step == t->steps_done ? ST_OK : checkpoint(t);
    if (path) *path = t->rank || st ? NULL : t->checkpoint;
    return st;
}

void trainer_destroy(trainer *t)
{
    if (!t) return;
    if (t->log_fd >= 0) close(t->log_fd);
    if (t->lock_fd >= 0) close(t->lock_fd); /* the file stays: removing it would race with a run opening it */
    pool *p = t->run.device;
    if (t->run.host) pool_free(t->run.host, t->comm);
    if (p) {
        pool_free(p, t->ema);
        close_batch(t);
    }
    free(t->labels);
    free(t->captions);
    free(t->shape_of);
    optim_destroy(t->opt);
    data_iter_destroy(t->iter);
    dataset_close(t->data);
    if (model_run_close(&t->run)) fprintf(stderr, "segtrain: the trainer's pools had leaks (a bug)\n");
    config_free(t->own_cfg);
    if (t->warns) st_warn_set(t->warn_was);
    free(t);
}
