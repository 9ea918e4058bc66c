/* `segtrain init` and `segtrain grad`: weights in, weights or gradients out, as safetensors files named by the
 * public DiT state_dict. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "segtrain/fileio.h"
#include "segtrain/model.h"
#include "segtrain/objective.h"
#include "segtrain/rng.h"
#include "segtrain/safetensors.h"

static const char init_help[] =
    "usage: segtrain init --config C --out W.safetensors [--random] [--set key=value ...]\n"
    "\n"
    "Writes freshly initialised weights of the model the config describes, seeded by its `seed` key.\n"
    "The initialisation is DiT's (xavier-uniform linears, adaLN-Zero); --random instead fills every tensor with\n"
    "seeded non-zero values, so that every gradient is non-zero (for gradient checks).\n";

int cmd_init(int argc, char **argv)
{
    const char *config_path = NULL, *out = NULL;
    bool random_fill = false;
    const cli_flag flags[] = {{"--config", .text = &config_path}, {"--out", .text = &out, .required = true},
                              {"--random", .on = &random_fill}, {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(init_help, stdout), 0) : rc;
    config *cfg;
    cli_model cm = {0};
    st_status st = cli_load_config(config_path, &a, &cfg);
    if (!st) st = cli_open_model(cfg, true, &cm);
    model *m = cm.m;
    if (!st) st = model_init(m, (uint64_t)config_int(cfg, "seed"), random_fill);
    if (!st) {
        const model_config *mc = model_get_config(m);
        char seed[32];
        snprintf(seed, sizeof seed, "%" PRId64, config_int(cfg, "seed"));
        const char *meta[] = {"format", "pt", "segtrain.family", mc->family, "segtrain.seed", seed,
                              "segtrain.init", random_fill ? "random" : "dit"};
        st = param_set_save(model_params(m), out, PARAMS_ALL, false, NULL, 0, meta, 4);
    }
    if (!st) printf("wrote %d tensors (%" PRId64 " parameters) to %s\n", model_params(m)->n,
                    model_params(m)->weight_count, out);
    cli_close_model(&cm);
    config_free(cfg);
    return st ? cli_error("init") : 0;
}

static const char grad_help[] =
    "usage: segtrain grad --config C --weights W.safetensors --batch B.safetensors --out G.safetensors\n"
    "                     [--set key=value ...]\n"
    "\n"
    "One forward and backward of the rectified-flow loss. The batch file holds x0 (B,C,H,W) F32, noise (B,C,H,W)\n"
    "F32, t (B) F32 and the conditioning: y (B) I64 labels, or for mmdit and flux cond (B, K) F32 (a text encoder's\n"
    "sequence and pooled vector, as `segtrain batch` writes it). Writes `loss` (shape (1)) and the gradient of every\n"
    "trainable weight under the weight's own name, and prints the loss and the peak device memory of the step by\n"
    "what it held.\n";

/* A batch of latents' shape (B, C, H, W), or (B, C, F, H, W) for a video model: its dimensions (shape may be NULL). */
static int latent_shape(const model_config *mc, int64_t batch, int64_t *shape)
{
    if (model_audio_tokens(mc)) { /* (B, S): each sample's video latents, then its audio latents (LTX-2) */
        if (shape) shape[0] = batch, shape[1] = model_sample_numel(mc);
        return 2;
    }
    const int nd = mc->frames > 1 ? 5 : 4;
    if (shape) {
        int i = 0;
        shape[i++] = batch, shape[i++] = mc->channels;
        if (nd == 5) shape[i++] = mc->frames;
        shape[i++] = mc->height, shape[i++] = mc->width;
    }
    return nd;
}

/* "(2, 4, 8, 8)", or with batch_symbol "(B, 4, 8, 8)" */
static void shape_text(char *out, size_t n, const int64_t *shape, int nd, bool batch_symbol)
{
    size_t k = (size_t)snprintf(out, n, "(");
    for (int i = 0; i < nd && k < n; i++) {
        if (i == 0 && batch_symbol) k += (size_t)snprintf(out + k, n - k, "B");
        else k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (k < n) snprintf(out + k, n - k, ")");
}

typedef struct batch_data {
    float *x0, *noise, *t;
    float *y; /* (B, model_cond_len) */
    int64_t batch;
} batch_data;

/* The batch's size comes from the file: it is checked against the model (model_check_batch) before anything is
 * sized by it, and x0's shape against the model's input before its element count is used. */
static st_status read_batch(const char *path, model *m, pool *dev, batch_data *b)
{
    const model_config *mc = model_get_config(m);
    sft_file *f;
    st_status st = sft_open(path, &f);
    if (st) return st;
    /* images (B, C, H, W); video (B, C, F, H, W) */
    const int nd = latent_shape(mc, 0, NULL);
    const sft_tensor *x0 = sft_find(f, "x0");
    if (!x0 || x0->ndim != nd) {
        const int got = x0 ? x0->ndim : 0; /* read before the file goes */
        sft_close(f);
        const char *want = nd == 2 ? "(B,S)" : nd == 4 ? "(B,C,H,W)" : "(B,C,F,H,W)";
        if (got) return st_fail(ST_ERR_FORMAT, "%s: tensor 'x0' has %d dimensions; the model takes %s (%s)", path, got,
                                want, nd == 2 ? "a sample's video latents, then its audio latents"
                                      : nd == 4 ? "num_frames 1: images" : "num_frames above 1: video");
        return st_fail(ST_ERR_FORMAT, "%s: tensor 'x0' %s is missing", path, want);
    }
    b->batch = x0->shape[0];
    int64_t img[5];
    latent_shape(mc, b->batch, img);
    const int64_t vec[1] = {b->batch}, L = model_cond_len(mc), cond[2] = {b->batch, L};
    const bool labels = !model_reads_text(mc);
    bool same = true;
    for (int i = 1; i < nd; i++) same = same && x0->shape[i] == img[i];
    if (!same) {
        char got[128], want[128];
        shape_text(got, sizeof got, x0->shape, nd, false);
        shape_text(want, sizeof want, img, nd, true);
        st = st_fail(ST_ERR_FORMAT, "%s: tensor 'x0' has shape %s, expected %s", path, got, want);
    }
    else if (model_check_batch(m, b->batch)) {
        char why[512];
        snprintf(why, sizeof why, "%s", st_error());
        st = st_fail(ST_ERR_FORMAT, "%s: tensor 'x0': a batch of %lld: %s", path, (long long)b->batch, why);
    }
    if (st) {
        sft_close(f);
        return st;
    }
    const int64_t n = (int64_t)(x0->nbytes / sft_dtype_size(x0->dtype)); /* its shape is img: the model's */
    st = pool_alloc(dev, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "batch.x0", (void **)&b->x0);
    if (!st) st = pool_alloc(dev, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "batch.noise", (void **)&b->noise);
    if (!st) st = pool_alloc(dev, (size_t)b->batch * sizeof(float), MEM_ACTIVATIONS, "batch.t", (void **)&b->t);
    if (!st) st = pool_alloc(dev, (size_t)(b->batch * L) * sizeof(float), MEM_ACTIVATIONS, "batch.cond", (void **)&b->y);
    if (!st) st = sft_read_f32(f, "x0", nd, img, b->x0);
    if (!st) st = sft_read_f32(f, "noise", nd, img, b->noise);
    if (!st) st = sft_read_f32(f, "t", 1, vec, b->t);
    if (!st && labels) { /* I64 labels, as PyTorch's class indices */
        int64_t *y = malloc((size_t)b->batch * sizeof *y);
        st = y ? sft_read_i64(f, "y", 1, vec, y) : st_host_oom("the labels of a batch");
        for (int64_t i = 0; !st && i < b->batch; i++) b->y[i] = (float)y[i];
        free(y);
    }
    if (!st && !labels) st = sft_read_f32(f, "cond", 2, cond, b->y);
    for (int64_t i = 0; !st && i < b->batch; i++)
        if (!(b->t[i] >= 0.0f && b->t[i] <= 1.0f))
            st = st_fail(ST_ERR_FORMAT, "%s: tensor 't': t[%" PRId64 "] = %g is outside [0, 1]", path, i, b->t[i]);
    sft_close(f);
    return st;
}

static void free_batch(pool *dev, batch_data *b)
{
    pool_free(dev, b->y);
    pool_free(dev, b->t);
    pool_free(dev, b->noise);
    pool_free(dev, b->x0);
}

int cmd_grad(int argc, char **argv)
{
    const char *config_path = NULL, *weights = NULL, *batch = NULL, *out = NULL;
    const cli_flag flags[] = {{"--config", .text = &config_path}, {"--weights", .text = &weights, .required = true},
                              {"--batch", .text = &batch, .required = true}, {"--out", .text = &out, .required = true},
                              {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(grad_help, stdout), 0) : rc;
    config *cfg;
    cli_model cm = {0};
    batch_data b = {0};
    float loss = 0;
    st_status st = cli_load_config(config_path, &a, &cfg);
    if (!st) st = atomic_file_check(out); /* before the step, not after it */
    if (!st) st = cli_open_model(cfg, true, &cm);
    model *m = cm.m;
    if (!st) st = param_set_load(model_params(m), weights, PARAMS_ALL, NULL);
    if (!st) st = read_batch(batch, m, cm.device, &b);
    pool_stats predicted, predicted_host; /* the same step run dry beside it, before it */
    model_run dry = {0};
    if (!st) st = model_run_open(cfg, false, &dry);
    if (!st) st = flow_step_dry(&dry, b.batch, 0, &predicted, &predicted_host);
    cli_close_model(&dry);
    if (!st) {
        print_plans(stdout, m);
        param_set_zero_grads(model_params(m));
        pool_reset_peak(cm.device);
        pool_reset_peak(cm.host);
        drift_config drift;
        bool drifts = false;
        st = drift_from_config(cfg, model_get_config(m), &drift, &drifts); /* as the dry step read it */
        flow_batch fb = {.batch = b.batch, .x0 = b.x0, .noise = b.noise, .t = b.t, .cond = b.y,
                         .drift = drifts ? &drift : NULL};
        if (!st) st = flow_loss(m, &fb, true, &loss);
        if (!st && !isfinite(loss)) /* the gradients of a non-finite loss are no gradients: write none */
            st = st_fail(ST_ERR_NUMERIC, "the loss is %g: the weights (%s) or the batch (%s) hold non-finite or "
                         "too large values; nothing was written", loss, weights, batch);
    }
    if (!st) {
        printf("loss %.9g\n", loss);
        pool_stats measured, measured_host;
        pool_get_stats(cm.device, &measured);
        pool_get_stats(cm.host, &measured_host);
        print_peak(stdout, "peak device memory, measured ", &measured);
        print_peak(stdout, "peak device memory, predicted", &predicted);
        if (predicted_host.peak || measured_host.peak) {
            print_peak(stdout, "peak host memory,   measured ", &measured_host);
            print_peak(stdout, "peak host memory,   predicted", &predicted_host);
        }
        const size_t in_use = ops_device_bytes_in_use();
        if (in_use) { /* a GPU's: the arena the pool sub-allocates is part of what the device says is in use */
            char n[3][24];
            printf("device memory in use %s (cudaMemGetInfo), of which the pool's arena %s, its highest byte %s\n",
                   st_bytes(n[0], in_use), st_bytes(n[1], pool_capacity(cm.device)),
                   st_bytes(n[2], pool_arena_high(cm.device)));
        }
        const named_floats extra = {.name = "loss", .ndim = 1, .shape = {1}, .data = &loss};
        const char *meta[] = {"format", "pt"};
        st = param_set_save(model_params(m), out, PARAMS_TRAINABLE, true, &extra, 1, meta, 1);
    }
    if (!st) printf("wrote loss and %" PRId64 " gradients to %s\n", model_params(m)->grad_count, out);
    if (cm.device) free_batch(cm.device, &b);
    cli_close_model(&cm);
    config_free(cfg);
    return st ? cli_error("grad") : 0;
}

static const char batch_help[] =
    "usage: segtrain batch --config C --out B.safetensors [--set key=value ...]\n"
    "\n"
    "Writes a seeded random batch in the format `segtrain grad` reads: train_batch_size samples of x0 and noise\n"
    "(standard normal, the model's input shape), t uniform in (0, 1) and the conditioning y: labels cycling\n"
    "through the classes and the null label (I64), or for mmdit and flux `cond` (B, model_cond_len) F32: the\n"
    "built-in text encoder's output for the captions \"caption 0\", \"caption 1\", ... The same config and seed\n"
    "always give the same file.\n";

int cmd_batch(int argc, char **argv)
{
    const char *config_path = NULL, *out = NULL;
    const cli_flag flags[] = {{"--config", .text = &config_path}, {"--out", .text = &out, .required = true}, {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(batch_help, stdout), 0) : rc;
    config *cfg;
    model_config mc;
    model *sizes = NULL; /* unallocated: its checks bound the products below */
    st_status st = cli_load_config(config_path, &a, &cfg);
    if (!st) st = model_config_from(cfg, &mc);
    if (!st) st = model_create(&mc, NULL, &sizes);
    if (!st) st = model_check_batch(sizes, config_int(cfg, "train_batch_size"));
    model_destroy(sizes);
    if (st) {
        config_free(cfg);
        return cli_error("batch");
    }
    const int64_t B = config_int(cfg, "train_batch_size"), n = B * model_sample_numel(&mc);
    int64_t shape[5] = {0};
    const int nd = latent_shape(&mc, B, shape);
    const uint64_t seed = (uint64_t)config_int(cfg, "seed");
    float *x0 = malloc((size_t)n * sizeof(float)), *noise = malloc((size_t)n * sizeof(float));
    float *t = malloc((size_t)B * sizeof(float));
    const int64_t L = model_cond_len(&mc);
    const bool labels = !model_reads_text(&mc);
    float *y = malloc((size_t)(B * L) * sizeof(float));
    int64_t *ids = malloc((size_t)B * sizeof(int64_t));
    if (!x0 || !noise || !t || !y || !ids) st = st_host_oom("a batch of %lld", (long long)B);
    if (!st) {
        rng_fill_normal(x0, n, seed, rng_stream("batch.x0"), 0.0f, 1.0f);
        rng_fill_normal(noise, n, seed, rng_stream("batch.noise"), 0.0f, 1.0f);
        for (int64_t i = 0; i < B; i++) {
            t[i] = (float)rng_uniform(seed, rng_stream("batch.t"), (uint64_t)i);
            char caption[32];
            snprintf(caption, sizeof caption, "caption %lld", (long long)i);
            model_condition(&mc, i % (mc.classes + 1), caption, y + i * L);
            ids[i] = i % (mc.classes + 1);
        }
        const sft_entry e[] = {
            {.name = "x0", .dtype = SFT_F32, .ndim = nd, .shape = {shape[0], shape[1], shape[2], shape[3], shape[4]}, .data = x0},
            {.name = "noise", .dtype = SFT_F32, .ndim = nd, .shape = {shape[0], shape[1], shape[2], shape[3], shape[4]}, .data = noise},
            {.name = "t", .dtype = SFT_F32, .ndim = 1, .shape = {B}, .data = t},
            labels ? (sft_entry){.name = "y", .dtype = SFT_I64, .ndim = 1, .shape = {B}, .data = ids}
                   : (sft_entry){.name = "cond", .dtype = SFT_F32, .ndim = 2, .shape = {B, L}, .data = y},
        };
        st = sft_write(out, e, 4, NULL, 0);
    }
    if (!st) printf("wrote a batch of %lld to %s\n", (long long)B, out);
    free(ids), free(y), free(t), free(noise), free(x0);
    config_free(cfg);
    return st ? cli_error("batch") : 0;
}
