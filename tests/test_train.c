/* The trainer end to end: the loss comes down on the built-in data; mmdit trained on the built-in captions samples
 * what a caption asks for; N + N steps with a resume give the same bits as 2N straight; LoRA leaves the base bit
 * for bit; a non-finite loss stops the run naming the step; a budget the plan exceeds is refused. (A crash while
 * writing a checkpoint is tests/cli_test.sh's: it needs a process to kill.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/dist.h"
#include "segtrain/model_run.h"
#include "segtrain/objective.h"
#include "segtrain/ops.h"
#include "segtrain/sample.h"
#include "segtrain/safetensors.h"
#include "segtrain/train.h"
#include "testkit.h"

static char root[256];

/* A small run in root/dir: the base keys, then `sets` ("key=value;key=value") as --set overrides. */
static config *make_config(const char *dir, const char *sets)
{
    char json[1024];
#ifdef __SANITIZE_ADDRESS__
    const int res = 8; /* the sanitizer pass trains the same model on smaller images */
#else
    const int res = 16;
#endif
    snprintf(json, sizeof json,
             "{\"model_preset\": \"dit-tiny\", \"in_channels\": 3, \"vae_scale_factor\": 1, \"resolution\": %d, \"num_classes\": 8, "
             "\"train_batch_size\": 8, \"learning_rate\": 1e-3, \"lr_warmup_steps\": 5, \"seed\": 3, "
             "\"validation_steps\": 0, \"checkpoint_step_interval\": 0, \"output_dir\": \"%s/%s\"}",
             res, root, dir);
    config *c = NULL;
    CHECKF(config_parse(json, "test", &c) == ST_OK, "%s", st_error());
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", sets);
    for (char *save = NULL, *kv = strtok_r(buf, ";", &save); c && kv; kv = strtok_r(NULL, ";", &save))
        CHECKF(config_set(c, kv) == ST_OK, "%s", st_error());
    return c;
}

static double read_losses(const char *dir, int from, int to)
{
    char path[512], line[512];
    snprintf(path, sizeof path, "%s/%s/train_log.jsonl", root, dir);
    FILE *f = fopen(path, "r");
    double sum = 0;
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        int step;
        double loss;
        if (sscanf(line, "{\"step\": %d, \"loss\": %lf", &step, &loss) == 2 && step >= from && step <= to) sum += loss, n++;
    }
    if (f) fclose(f);
    return n ? sum / n : NAN;
}

static st_status run(config *c, int64_t stop_after, bool finish)
{
    trainer *t;
    st_status st = trainer_create(c, NULL, &t);
    for (int64_t k = 0; !st && !trainer_done(t) && k < stop_after; k++) {
        train_step_info in;
        st = trainer_step(t, &in);
        if (!st && k == 0)
            CHECKF(in.peak_device == trainer_predicted(t, false)->peak && in.peak_host == trainer_predicted(t, true)->peak,
                   "a training step's peak is the plan's: measured %zu, predicted %zu", in.peak_device,
                   trainer_predicted(t, false)->peak);
    }
    const char *path;
    if (!st && finish) st = trainer_finish(t, &path);
    if (t) trainer_destroy(t);
    return st;
}

static void test_loss_comes_down(void)
{
    printf("-- the loss comes down on the built-in data\n");
    config *c = make_config("learn", "max_train_steps=120");
    CHECKF(run(c, 1000, true) == ST_OK, "%s", st_error());
    double first = read_losses("learn", 1, 5), last = read_losses("learn", 101, 120);
    printf("     mean loss of steps 1-5 %.4f, of steps 101-120 %.4f\n", first, last);
    CHECKF(last < 0.6 * first, "a working trainer more than halves the loss here: %.4f -> %.4f", first, last);
    config_free(c);
}

/* Cosmos 2's EDM objective as SimpleTuner's Cosmos2Image computes it (in double: x_t = x0 + sigma e, the model fed
 * x_t / (sigma + 1), x0_pred = (x_t - sigma r) / (sigma + 1), loss mean((sigma^2 + 1) / sigma^2 (x0_pred - x0)^2))
 * against the rectified flow at edm_t's t with objective_weight's weight, as the trainer runs it: the model's input, the loss and
 * d loss / d r agree. Draws past both clamps included. */
static void test_edm_objective(void)
{
    printf("-- EDM (cosmos2image) is the rectified flow at t = sigma / (sigma + 1), weighted\n");
    const double zs[4] = {-7.0, -0.8, 0.9, 5.0}; /* sigma clamped to 0.002, e^-0.8, e^0.9, clamped to 80 */
    enum { B = 4, PER = 50 };
    float x0[B * PER], e[B * PER], r[B * PER], t[B], w[B], xt[B * PER], target[B * PER], ts[B], dr[B * PER] = {0};
    tk_fill(x0, B * PER, 11, -1.0f, 1.0f);
    tk_fill(e, B * PER, 12, -2.0f, 2.0f);
    tk_fill(r, B * PER, 13, -2.0f, 2.0f);
    model_config mc;
    CHECK(model_preset("cosmos2-tiny", &mc) == ST_OK && objective_edm(&mc));
    for (int b = 0; b < B; b++) t[b] = edm_t(zs[b]), w[b] = objective_weight(&mc, t[b]);
    flow_interpolate(xt, target, ts, x0, e, t, B, PER);
    const float loss = mse_forward(r, target, w, B, PER);
    mse_backward(dr, r, target, w, B, PER, 1.0f);
    double want = 0, worst_in = 0, worst_grad = 0, gmax = 0;
    for (int b = 0; b < B; b++) {
        const double sigma = fmin(fmax(exp(zs[b]), 0.002), 80.0), inv = 1.0 / (sigma + 1.0);
        const double wst = (sigma * sigma + 1.0) / (sigma * sigma);
        for (int j = b * PER; j < (b + 1) * PER; j++) {
            const double x_t = x0[j] + sigma * e[j], x0_pred = inv * x_t - sigma * inv * r[j];
            want += wst * (x0_pred - x0[j]) * (x0_pred - x0[j]);
            worst_in = fmax(worst_in, fabs(x_t * inv - xt[j]));
            const double g = 2.0 * wst * (x0_pred - x0[j]) * (-sigma * inv) / (B * PER);
            worst_grad = fmax(worst_grad, fabs(g - dr[j])), gmax = fmax(gmax, fabs(g));
        }
        CHECKF(fabs(ts[b] / 1000.0 - sigma * inv) <= 1e-6, "sample %d: time %g, sigma / (sigma + 1) %g", b,
               ts[b] / 1000.0, sigma * inv);
    }
    want /= B * PER;
    printf("     loss %.7f, SimpleTuner's %.7f; model input off by %.1e, d loss / d r by %.1e of %.1e\n", loss, want,
           worst_in, worst_grad, gmax);
    CHECKF(fabs(loss - want) <= 1e-5 * want, "loss %.9g, EDM's %.9g", loss, want);
    CHECKF(worst_in <= 1e-5, "model input off by %g", worst_in);
    CHECKF(worst_grad <= 1e-5 * gmax, "d loss / d r off by %g (largest %g)", worst_grad, gmax);
    if (fabs(loss - want) <= 1e-5 * want && worst_in <= 1e-5 && worst_grad <= 1e-5 * gmax) tk_pass();

    /* flow_loss weights a cosmos2image model's samples so: its loss is the weighted MSE of the model's prediction */
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = NULL;
    CHECKF(model_create(&mc, p, &m) == ST_OK, "%s", st_error());
    if (!m) return;
    model_init(m, 7, true);
    const int64_t per = model_sample_numel(&mc), K = model_cond_len(&mc);
    float *mx0 = calloc((size_t)(2 * per), sizeof(float)), *me = calloc((size_t)(2 * per), sizeof(float));
    float *cond = calloc((size_t)(2 * K), sizeof(float)), *mxt = calloc((size_t)(2 * per), sizeof(float));
    float *mtarget = calloc((size_t)(2 * per), sizeof(float)), mt[2] = {edm_t(-1.5), edm_t(2.0)}, mts[2];
    tk_fill(mx0, 2 * per, 21, -1.0f, 1.0f);
    tk_fill(me, 2 * per, 22, -1.0f, 1.0f);
    tk_fill(cond, 2 * K, 23, -1.0f, 1.0f);
    const flow_batch fb = {.batch = 2, .x0 = mx0, .noise = me, .t = mt, .cond = cond};
    float got = 0.0f;
    CHECKF(flow_loss(m, &fb, false, &got) == ST_OK, "%s", st_error());
    flow_interpolate(mxt, mtarget, mts, mx0, me, mt, 2, per);
    const float *pred;
    const float mw[2] = {objective_weight(&mc, mt[0]), objective_weight(&mc, mt[1])};
    CHECKF(model_forward(m, mxt, mts, cond, 2, false, &pred) == ST_OK, "%s", st_error());
    const float weighted = mse_forward(pred, mtarget, mw, 2, per), plain = mse_forward(pred, mtarget, NULL, 2, per);
    model_release(m);
    printf("     cosmos2-tiny: flow_loss %.7f, the weighted MSE %.7f (unweighted %.7f)\n", got, weighted, plain);
    CHECKF(got == weighted && got != plain, "flow_loss %.9g, weighted %.9g, unweighted %.9g", got, weighted, plain);
    if (got == weighted && got != plain) tk_pass();
    free(mx0), free(me), free(cond), free(mxt), free(mtarget);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* LTX-2 (ltxvideo2): without audio data the loss is the video's alone, as SimpleTuner masks a batch without audio
 * latents: flow_loss equals the mean of the per-sample MSEs over each sample's video latents, and its gradients are
 * those of a backward whose dL/dpred is zero on the audio latents. */
static void test_ltx2_masks_audio(void)
{
    printf("-- ltxvideo2: the loss reads the video latents alone; the audio stream trains through the video's loss\n");
    model_config mc;
    CHECK(model_preset("ltxvideo2-tiny", &mc) == ST_OK);
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = NULL;
    CHECKF(model_create(&mc, p, &m) == ST_OK, "%s", st_error());
    if (!m) return;
    model_init(m, 9, true);
    enum { B = 2 };
    const int64_t per = model_sample_numel(&mc), used = model_loss_numel(&mc), K = model_cond_len(&mc);
    CHECK(used < per);
    float *x0 = calloc((size_t)(B * per), sizeof(float)), *e = calloc((size_t)(B * per), sizeof(float));
    float *cond = calloc((size_t)(B * K), sizeof(float)), *xt = calloc((size_t)(B * per), sizeof(float));
    float *target = calloc((size_t)(B * per), sizeof(float)), *dpred = calloc((size_t)(B * per), sizeof(float));
    float t[B] = {0.3f, 0.8f}, ts[B];
    tk_fill(x0, B * per, 31, -1.0f, 1.0f);
    for (int b = 0; b < B; b++) memset(x0 + b * per + used, 0, (size_t)(per - used) * sizeof(float)); /* no audio */
    tk_fill(e, B * per, 32, -1.0f, 1.0f);
    for (int b = 0; b < B; b++) model_condition(&mc, 0, b ? "a red square" : "a blue circle", cond + b * K);
    param_set *ps = model_params(m);
    const flow_batch fb = {.batch = B, .x0 = x0, .noise = e, .t = t, .cond = cond};
    float got = 0.0f;
    param_set_zero_grads(ps);
    CHECKF(flow_loss(m, &fb, true, &got) == ST_OK, "%s", st_error());
    float *grads = malloc((size_t)ps->grad_count * sizeof(float));
    memcpy(grads, ps->grads, (size_t)ps->grad_count * sizeof(float));
    /* by hand: the same input, the video's MSE, and dL/dpred zero on the audio */
    flow_interpolate(xt, target, ts, x0, e, t, B, per);
    const float *pred;
    param_set_zero_grads(ps);
    CHECKF(model_forward(m, xt, ts, cond, B, true, &pred) == ST_OK, "%s", st_error());
    double want = 0, all = 0;
    for (int b = 0; b < B; b++) {
        double sample = 0;
        for (int64_t j = b * per; j < b * per + used; j++) {
            sample += ((double)pred[j] - target[j]) * ((double)pred[j] - target[j]);
            dpred[j] = 2.0f * (pred[j] - target[j]) / (float)used / (float)B;
        }
        for (int64_t j = b * per; j < (b + 1) * per; j++)
            all += ((double)pred[j] - target[j]) * ((double)pred[j] - target[j]);
        want += sample / (double)used / B;
    }
    all /= (double)(B * per);
    CHECKF(model_backward(m, dpred) == ST_OK, "%s", st_error());
    double worst = 0, gmax = 0;
    for (int64_t i = 0; i < ps->grad_count; i++)
        worst = fmax(worst, fabs((double)grads[i] - ps->grads[i])), gmax = fmax(gmax, fabs((double)ps->grads[i]));
    printf("     flow_loss %.7f, the video's MSE %.7f (with the audio %.7f); gradients off by %.1e of %.1e\n", got,
           want, all, worst, gmax);
    CHECKF(fabs(got - want) <= 1e-6 * want && fabs(got - all) > 1e-3 * all, "flow_loss %.9g, video %.9g, all %.9g", got,
           want, all);
    CHECKF(gmax > 0 && worst <= 1e-5 * gmax, "gradients off by %g (largest %g)", worst, gmax);
    if (fabs(got - want) <= 1e-6 * want && fabs(got - all) > 1e-3 * all && gmax > 0 && worst <= 1e-5 * gmax) tk_pass();
    free(x0), free(e), free(cond), free(xt), free(target), free(dpred), free(grads);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* Mean of red minus blue over the pixels of n images (3 x r x r each, [-1, 1]). */
static double redness(const float *img, int n, int r)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r * r; k++) sum += img[(i * 3 + 0) * r * r + k] - img[(i * 3 + 2) * r * r + k];
    return sum / (n * r * r);
}

static void test_captions_steer_mmdit(void)
{
    printf("-- mmdit learns the built-in captions: the caption's colours come out in the samples\n");
    config *c = make_config("mmdit", "model_preset=mmdit-tiny;max_train_steps=200;caption_dropout_probability=0.1");
    trainer *t;
    CHECKF(trainer_create(c, NULL, &t) == ST_OK, "%s", st_error());
    train_step_info in;
    for (int k = 0; t && k < 200; k++) CHECKF(trainer_step(t, &in) == ST_OK, "%s", st_error());
    model *m = t ? trainer_model(t) : NULL;
    const model_config *mc = m ? model_get_config(m) : NULL;
    const int n = 4, r = mc ? (int)mc->height : 0;
    /* same shape colour, two backgrounds; two shape colours, one background */
    const char *captions[4] = {"a red circle on a navy background", "a red circle on a brown background",
                               "a blue triangle on a gray background", "a yellow diamond on a gray background"};
    double red[4];
    for (int q = 0; m && q < 4; q++) {
        const int64_t K = model_cond_len(mc);
        float *cond = malloc((size_t)(n * K) * sizeof(float));
        for (int i = 0; i < n; i++) model_condition(mc, 0, captions[q], cond + i * K);
        float *img = malloc((size_t)(n * 3 * r * r) * sizeof(float));
        const sample_settings s = {.steps = 10, .guidance = 3.0f, .seed = 1};
        CHECKF(sample_images(m, &s, cond, n, img) == ST_OK, "%s", st_error());
        free(cond);
        red[q] = redness(img, n, r);
        printf("     \"%s\": mean red - blue %+.3f\n", captions[q], red[q]);
        free(img);
    }
    /* navy (20, 30, 95) is bluer than brown (105, 65, 30); yellow (240, 210, 40) is redder than blue (50, 90, 230) */
    CHECKF(m && red[1] > red[0] + 0.2 && red[3] > red[2] + 0.2, "the samples follow the captions");
    trainer_destroy(t);
    config_free(c);
}

static void test_resume_is_bitwise(void)
{
    printf("-- 6 steps straight == 3 steps, a resume, 3 more\n");
    const char *extra = "max_train_steps=6;checkpoint_step_interval=3;gradient_accumulation_steps=2;"
                        "lr_scheduler=cosine;train_batch_size=3;builtin_dataset_size=10;use_ema=true;"
                        "ema_update_interval=2;ema_decay=0.9";
    config *straight = make_config("straight", extra);
    CHECKF(run(straight, 1000, true) == ST_OK, "%s", st_error());
    config *first = make_config("resumed", extra);
    CHECK(run(first, 5, false) == ST_OK); /* "killed" after 5 steps: checkpoint-3 is the newest */
    char cfg2[512];
    snprintf(cfg2, sizeof cfg2, "%s;resume_from_checkpoint=latest", extra);
    config *second = make_config("resumed", cfg2);
    CHECKF(run(second, 1000, true) == ST_OK, "%s", st_error());
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/straight/model.safetensors", root);
    snprintf(b, sizeof b, "%s/resumed/model.safetensors", root);
    CHECKF(tk_same_file(a, b), "the resumed run's final weights are the straight run's, byte for byte");
    snprintf(a, sizeof a, "%s/straight/checkpoint-000006.safetensors", root);
    snprintf(b, sizeof b, "%s/resumed/checkpoint-000006.safetensors", root);
    CHECKF(tk_same_file(a, b), "and so are the checkpoints at step 6 (weights, optimizer state, EMA, position)");
    snprintf(a, sizeof a, "%s/straight/ema/model.safetensors", root);
    snprintf(b, sizeof b, "%s/resumed/ema/model.safetensors", root);
    CHECKF(tk_same_file(a, b), "and so are the EMA weights");
    /* the log has each step once, in order: the killed run's steps 4 and 5 were dropped at the resume */
    char *log = tk_read_file(tk_path(root, "resumed"), "train_log.jsonl");
    int steps[16], n = 0;
    for (const char *l = log; l && *l && n < 16; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "")
        if (sscanf(l, "{\"step\": %d", &steps[n]) == 1) n++;
    bool once = n == 6;
    for (int i = 0; once && i < n; i++) once = steps[i] == i + 1;
    CHECKF(once, "train_log.jsonl after a kill at step 5 and a resume from step 3 logs steps 1-6 once each:\n%s",
           log ? log : "(unreadable)");
    free(log);

    config_free(straight), config_free(first), config_free(second);
}

/* use_ema: the average written to ema/ is SimpleTuner's EMAModel update applied after each step to the weights the
 * step left (recomputed here from them, in float as the trainer does), with its decay ramp, cap and warm-up */
static void test_ema_follows_the_weights(void)
{
    printf("-- use_ema: the average of the weights, step by step\n");
    const char *runs[][2] = {{"ema", "ema_decay=0.2"}, {"ema_warmup", "ema_decay=0.6;ema_warmup_steps=3"}};
    for (int r = 0; r < 2; r++) {
        char sets[256];
        snprintf(sets, sizeof sets, "max_train_steps=5;use_ema=true;%s", runs[r][1]);
        config *c = make_config(runs[r][0], sets);
        trainer *t = NULL;
        CHECKF(c && trainer_create(c, NULL, &t) == ST_OK, "%s", st_error());
        param_set *ps = t ? model_params(trainer_model(t)) : NULL;
        float *want = ps ? malloc((size_t)ps->grad_count * sizeof(float)) : NULL;
        for (int i = 0; want && i < ps->n; i++)
            if (ps->items[i].trainable)
                memcpy(want + (ps->items[i].g - ps->grads), ps->items[i].w, (size_t)ps->items[i].numel * sizeof(float));
        for (int64_t k = 1; want && !trainer_done(t); k++) {
            train_step_info in;
            CHECKF(trainer_step(t, &in) == ST_OK, "%s", st_error());
            const double cap = r ? 0.6 : 0.2, ramp = k == 1 ? 0.0 : (double)k / (double)(k + 9);
            const double d = r ? (k < 3 ? 0.0 : cap) : (ramp < cap ? ramp : cap);
            const float a = (float)(1.0 - d);
            for (int i = 0; i < ps->n; i++) {
                const param *q = &ps->items[i];
                float *e = q->trainable ? want + (q->g - ps->grads) : NULL;
                for (int64_t j = 0; e && j < q->numel; j++) e[j] -= a * (e[j] - q->w[j]);
            }
        }
        const char *path;
        CHECKF(t && trainer_finish(t, &path) == ST_OK, "%s", st_error());
        char file[512];
        snprintf(file, sizeof file, "%s/%s/ema/model.safetensors", root, runs[r][0]);
        sft_file *f = NULL;
        CHECKF(sft_open(file, &f) == ST_OK, "%s", st_error());
        int same = 0, trainable = 0, moved = 0;
        for (int i = 0; f && want && i < ps->n; i++) {
            const param *q = &ps->items[i];
            if (!q->trainable) continue;
            float *got = malloc((size_t)q->numel * sizeof(float));
            trainable++;
            if (got && sft_read_f32(f, q->name, q->ndim, q->shape, got) == ST_OK)
                same += !memcmp(got, want + (q->g - ps->grads), (size_t)q->numel * sizeof(float)),
                    moved += memcmp(got, q->w, (size_t)q->numel * sizeof(float)) != 0;
            free(got);
        }
        CHECKF(trainable && same == trainable, "%s: %d of %d trainable tensors of ema/ are the average, bit for bit",
               runs[r][1], same, trainable);
        CHECKF(moved > 0, "%s: the average is not the last weights", runs[r][1]);
        sft_close(f);
        free(want);
        trainer_destroy(t);
        config_free(c);
    }
}

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    CHECKF(a && b, "copy %s -> %s", from, to);
    for (int ch; a && b && (ch = fgetc(a)) != EOF;) fputc(ch, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

/* Resumes from `from` into output folder `dir` and returns the step it resumed at (-1: it failed). */
static int64_t resumed_at(const char *dir, const char *from)
{
    char sets[1024];
    snprintf(sets, sizeof sets, "max_train_steps=6;checkpoint_step_interval=1;resume_from_checkpoint=%s", from);
    config *c = make_config(dir, sets);
    trainer *t = NULL;
    st_status st = trainer_create(c, NULL, &t);
    CHECKF(st == ST_OK, "%s", st_error());
    const int64_t step = t ? trainer_steps_done(t) : -1;
    trainer_destroy(t);
    config_free(c);
    return step;
}

static void test_resume_picks_the_newest(void)
{
    printf("-- latest is the highest step, whatever order the checkpoints were written in\n");
    config *c = make_config("six", "max_train_steps=6;checkpoint_step_interval=1");
    CHECKF(run(c, 1000, false) == ST_OK, "%s", st_error());
    config_free(c);
    char dir[512], from[1024], to[1024];
    snprintf(dir, sizeof dir, "%s/shuffled", root);
    CHECK(mkdir(dir, 0755) == 0);
    const int order[] = {4, 1, 6, 2, 5, 3};
    for (int i = 0; i < 6; i++) {
        snprintf(from, sizeof from, "%s/six/checkpoint-%06d.safetensors", root, order[i]);
        snprintf(to, sizeof to, "%s/checkpoint-%06d.safetensors", dir, order[i]);
        copy_file(from, to);
    }
    /* a stray file and the temporary file of a half-written checkpoint of a later step */
    snprintf(to, sizeof to, "%s/notes.txt", dir);
    copy_file(from, to);
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s/checkpoint-000009.safetensors.tmp.4242", dir);
    copy_file(from, tmp);
    int64_t step = resumed_at("shuffled", "latest");
    CHECKF(step == 6, "resume_from_checkpoint=latest resumed at step %lld, the newest checkpoint is step 6",
           (long long)step);
    CHECKF(access(tmp, F_OK) != 0, "the half-written checkpoint's temporary file is removed");
    step = resumed_at("elsewhere", dir);
    CHECKF(step == 6, "a folder as resume_from_checkpoint resumed at step %lld, its newest is step 6", (long long)step);
    snprintf(from, sizeof from, "%s/checkpoint-000002.safetensors", dir);
    step = resumed_at("elsewhere", from);
    CHECKF(step == 2, "a checkpoint file resumes at its own step (got %lld)", (long long)step);
    snprintf(from, sizeof from, "%s/six/validation-none", root);
    CHECK(mkdir(from, 0755) == 0);
    char sets[1200];
    snprintf(sets, sizeof sets, "max_train_steps=6;resume_from_checkpoint=%s", from);
    c = make_config("elsewhere", sets);
    trainer *t = NULL;
    CHECKF(trainer_create(c, NULL, &t) == ST_ERR_INVALID && strstr(st_error(), "validation-none") &&
               strstr(st_error(), "no checkpoint"),
           "a folder without checkpoints is an error naming it: %s", st_error());
    trainer_destroy(t);
    config_free(c);
}

/* Sizes whose products overflow are refused naming the keys or the tensor, before anything is sized by them
 * (a huge num_classes used to wrap the embedding table's size and then overrun it in model_init). */
static void test_sizes_that_overflow(void)
{
    printf("-- sizes whose products overflow are refused, never wrapped\n");
    model_config mc;
    model *m = NULL;
    pool *p = pool_create(POOL_DEVICE, 0);
    CHECK(model_preset("dit-tiny", &mc) == ST_OK);
    mc.classes = 72057594037927935ll; /* 2^56 - 1: the table is 2^56 x hidden_size floats */
    CHECKF(model_create(&mc, NULL, &m) == ST_ERR_INVALID && !m && strstr(st_error(), "num_classes"),
           "a huge num_classes is refused naming it: %s", st_error());
    printf("     %s\n", st_error());
    CHECKF(model_create(&mc, p, &m) == ST_ERR_INVALID && !m, "and refused before allocating: %s", st_error());
    CHECK(model_preset("dit-tiny", &mc) == ST_OK);
    mc.patch = 1, mc.height = mc.width = 65536; /* 2^32 tokens: attention's probabilities alone are 2^66 floats */
    CHECKF(model_create(&mc, NULL, &m) == ST_ERR_INVALID && strstr(st_error(), "resolution"), "%s", st_error());
    CHECK(model_preset("dit-tiny", &mc) == ST_OK);
    mc.hidden = 1ll << 26, mc.depth = 64; /* every tensor fits, their total does not */
    CHECKF(model_create(&mc, NULL, &m) == ST_ERR_INVALID && strstr(st_error(), "parameter 'blocks.") &&
               strstr(st_error(), "add up to more than 2^57"),
           "parameters that add up past the limit are refused naming where: %s", st_error());
    printf("     %s\n", st_error());

    CHECK(model_preset("dit-tiny", &mc) == ST_OK);
    mc.patch = 1, mc.height = mc.width = 1024; /* one sample fits; 2^16 of them do not */
    model_run r = {.device = pool_create_dry(POOL_DEVICE, 0), .host = pool_create_dry(POOL_HOST, 0)};
    CHECKF(model_create(&mc, r.device, &r.m) == ST_OK && model_set_host_pool(r.m, r.host) == ST_OK, "%s", st_error());
    pool_stats dev = {0}, host = {0};
    CHECKF(r.m && flow_step_dry(&r, 65536, 0, &dev, &host) == ST_ERR_INVALID &&
               strstr(st_error(), "train_batch_size: 65536") && dev.peak == 0,
           "a batch whose step overflows is refused, not run: %s", st_error());
    printf("     %s\n", st_error());
    CHECKF(r.m && model_check_batch(r.m, 0) == ST_ERR_INVALID && strstr(st_error(), "at least 1"), "%s", st_error());
    CHECKF(r.m && flow_step_dry(&r, 1, 0, &dev, &host) == ST_OK && dev.peak > ((size_t)1 << 33),
           "one sample plans its true size (%zu bytes)", dev.peak);
    CHECK(model_run_close(&r) == 0);
    CHECK(pool_destroy(p) == 0);
}

static void test_lora_keeps_the_base(void)
{
    printf("-- LoRA trains adapters only; the base stays bit for bit\n");
    config *full = make_config("base", "max_train_steps=5");
    CHECK(run(full, 1000, true) == ST_OK);
    char base[512], extra[1024];
    snprintf(base, sizeof base, "%s/base/model.safetensors", root);
    snprintf(extra, sizeof extra,
             "max_train_steps=5;model_type=lora;lora_rank=4;lora_target=attention+mlp;pretrained_model_name_or_path=%s",
             base);
    config *c = make_config("lora", extra);
    trainer *t;
    CHECKF(trainer_create(c, NULL, &t) == ST_OK, "%s", st_error());
    for (int k = 0; k < 5 && t; k++) {
        train_step_info in;
        CHECK(trainer_step(t, &in) == ST_OK);
    }
    if (t) {
        param_set *ps = model_params(trainer_model(t));
        sft_file *f;
        CHECK(sft_open(base, &f) == ST_OK);
        bool same = true, moved = false;
        for (int i = 0; i < ps->n; i++) {
            const param *q = param_at(ps, i);
            if (q->trainable) {
                const sft_tensor *none = sft_find(f, q->name);
                moved |= !none && strstr(q->name, "lora_B"); /* adapters are not in the base file */
                continue;
            }
            float *w = malloc((size_t)q->numel * sizeof(float));
            if (sft_read_f32(f, q->name, q->ndim, q->shape, w) == ST_OK || q->fixed)
                same &= q->fixed || !memcmp(w, q->w, (size_t)q->numel * sizeof(float));
            free(w);
        }
        bool b_changed = false;
        for (int i = 0; i < ps->n; i++) {
            const param *q = param_at(ps, i);
            for (int64_t j = 0; strstr(q->name, "lora_B") && j < q->numel; j++) b_changed |= q->w[j] != 0.0f;
        }
        CHECKF(same, "every frozen base tensor is bitwise the file's after training");
        CHECKF(moved && b_changed, "the adapters were trained");
        sft_close(f);
        const char *path;
        CHECK(trainer_finish(t, &path) == ST_OK && strstr(path, "pytorch_lora_weights.safetensors"));
        CHECK(sft_open(path, &f) == ST_OK);
        bool only = true;
        for (int i = 0; f && i < sft_count(f); i++) /* PEFT's names, as diffusers' save_lora_weights writes them */
            only &= strstr(sft_at(f, i)->name, ".lora_") && !strncmp(sft_at(f, i)->name, "transformer.", 12);
        CHECK(f && sft_metadata(f, "lora_adapter_metadata") && !strcmp(sft_metadata(f, "format"), "pt"));
        CHECKF(only && sft_count(f) == 4 * 4 * 2, "pytorch_lora_weights.safetensors holds the %d adapters only", sft_count(f));
        if (f) sft_close(f);
        trainer_destroy(t);
    }
    config_free(full), config_free(c);
}

/* AnyFlow's objective in the trainer (its parity is test_parity's): wan-anyflow-tiny on synthetic video, checkpointed
 * and with attention offload, every step's peak the plan's (the dry step runs the same objective: the central
 * difference's forwards, the unconditional one, r and the empty prompt in the batch), a finite loss; guidance 1 (no
 * unconditional pass) and a batch too small for every kind of interval train too; what is not built is refused. */
/* Each config (bad[i][0]) refused when the trainer opens, its message holding bad[i][1] */
static void expect_refusals(const char *const (*bad)[2], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        config *c = NULL;
        st_status st = config_parse(bad[i][0], "test", &c);
        trainer *t = NULL;
        if (!st) st = trainer_create(c, NULL, &t);
        CHECKF(st != ST_OK && strstr(st_error(), bad[i][1]), "%s: %s", bad[i][0], st_error());
        if (t) trainer_destroy(t);
        config_free(c);
    }
}

static void test_anyflow_objective(void)
{
    printf("-- distillation_method anyflow: AnyFlow's MeanFlow objective trains, its peak as planned\n");
    const char *runs[] = {"", "gradient_checkpointing=true;gradient_checkpointing_offload_attention=true",
                          "distillation_config.fuse_guidance_scale=1;train_batch_size=1",
                          "distillation_config.central_difference_boundary_mode=clamp;"
                          "distillation_config.meanflow_weight_type=uniform;"
                          "distillation_config.meanflow_adaptive_weighting=false;"
                          "distillation_config.meanflow_non_diffusion_max_sigma=0.5"};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char json[1024];
        snprintf(json, sizeof json, "{\"model_family\": \"wan\", \"model_preset\": \"wan-anyflow-tiny\", "
                 "\"num_frames\": 5, \"synthetic_data\": true, \"train_batch_size\": 4, \"max_train_steps\": 3, "
                 "\"distillation_method\": \"anyflow\", \"validation_steps\": 0, \"checkpoint_step_interval\": 0, "
                 "\"output_dir\": \"%s/anyflow%zu\"}", root, i);
        config *c = NULL;
        CHECKF(config_parse(json, "test", &c) == ST_OK, "%s", st_error());
        char buf[512];
        snprintf(buf, sizeof buf, "%s", runs[i]);
        for (char *save = NULL, *kv = strtok_r(buf, ";", &save); c && kv; kv = strtok_r(NULL, ";", &save))
            CHECKF(config_set(c, kv) == ST_OK, "%s", st_error());
        CHECKF(run(c, 3, true) == ST_OK, "%s: %s", runs[i], st_error());
        char dir[64];
        snprintf(dir, sizeof dir, "anyflow%zu", i);
        const double loss = read_losses(dir, 1, 3);
        CHECKF(isfinite(loss) && loss > 0, "%s: mean loss %g", runs[i], loss);
        printf("     %s: mean loss of 3 steps %.4f\n", *runs[i] ? runs[i] : "defaults", loss);
        config_free(c);
    }
    const char *bad[][2] = {
        {"{\"model_family\": \"wan\", \"model_preset\": \"wan-tiny\", \"distillation_method\": \"anyflow\"}",
         "has no delta embedder"},
        {"{\"distillation_method\": \"dmd\"}", "DMD distillation is not built"},
        {"{\"distillation_method\": \"anyflow\", \"distillation_config\": {\"stage\": \"onpolicy\"}}",
         "on-policy stage"},
        {"{\"distillation_method\": \"anyflow\", \"distillation_config\": 3}", "is not an object"},
        {"{\"model_family\": \"wan\", \"model_preset\": \"wan-anyflow-tiny\", \"distillation_method\": "
         "\"anyflow\", \"distillation_config\": {\"diffusion_ratio\": 0.8, \"consistency_ratio\": 0.4}, "
         "\"synthetic_data\": true}", "sum to more than 1"},
    };
    expect_refusals(bad, sizeof bad / sizeof *bad);
}

/* distillation_method h3_drift as SimpleTuner's MiniMax-H3 examples set it (its settings under the method's name):
 * MiniMax-H3 LoRA on the fixture's weights trains with the drift term, its first step's peak the plan's (the reference
 * forward included). The adapters start as the identity, so the first step's loss and update are the plain run's, and
 * the second step's loss exceeds it by the drift term; what SimpleTuner refuses is refused. */
static void test_h3_drift_objective(void)
{
    printf("-- distillation_method h3_drift: MiniMax-H3 LoRA held near its base, its peak as planned\n");
    const char *runs[][2] = {{"drift0", "{\"h3_drift\": {\"audio_weight\": 1.0, \"balance\": \"token\", "
                                        "\"loss_weight\": 0.5, \"sft_loss_weight\": 1.0, \"video_weight\": 1.0}}"},
                             {"drift1", "{\"loss_weight\": 2.0, \"balance\": \"modality\"}"},
                             {"plain", NULL}};
    double first[3], second[3];
    for (size_t i = 0; i < 3; i++) {
        char json[1024];
        snprintf(json, sizeof json, "{\"model_family\": \"minimaxh3\", \"model_preset\": \"minimaxh3-tiny\", "
                 "\"pretrained_model_name_or_path\": \"" SEGTRAIN_SOURCE_DIR "/tests/fixtures/minimaxh3\", "
                 "\"num_frames\": 5, \"synthetic_data\": true, \"train_batch_size\": 2, \"max_train_steps\": 3, "
                 "\"model_type\": \"lora\", \"lora_rank\": 4, \"learning_rate\": 1e-2, %s%s%s%s "
                 "\"gradient_checkpointing\": %s, \"validation_steps\": 0, \"checkpoint_step_interval\": 0, "
                 "\"output_dir\": \"%s/%s\"}", runs[i][1] ? "\"distillation_method\": \"h3_drift\", " : "",
                 runs[i][1] ? "\"distillation_config\": " : "", runs[i][1] ? runs[i][1] : "",
                 runs[i][1] ? "," : "", i == 1 ? "true" : "false", root, runs[i][0]);
        config *c = NULL;
        CHECKF(config_parse(json, "test", &c) == ST_OK, "%s", st_error());
        CHECKF(run(c, 3, true) == ST_OK, "%s: %s", runs[i][0], st_error());
        first[i] = read_losses(runs[i][0], 1, 1), second[i] = read_losses(runs[i][0], 2, 2);
        const double loss = read_losses(runs[i][0], 1, 3);
        CHECKF(isfinite(loss) && loss > 0, "%s: mean loss %g", runs[i][0], loss);
        printf("     %s: losses %.7g, %.7g, mean of 3 steps %.6f\n", runs[i][0], first[i], second[i], loss);
        config_free(c);
    }
    CHECKF(first[0] == first[2] && first[1] == first[2], "the adapters start as the identity: first losses %.9g, "
           "%.9g, %.9g", first[0], first[1], first[2]);
    CHECKF(second[0] > second[2] && second[1] > second[0], "the second step's loss adds the drift term (weights 0.5 "
           "and 2): %.9g, %.9g against %.9g", second[0], second[1], second[2]);
    const char *bad[][2] = {
        {"{\"model_family\": \"minimaxh3\", \"distillation_method\": \"h3_drift\"}", "without LoRA"},
        {"{\"model_preset\": \"flux-tiny\", \"model_type\": \"lora\", \"distillation_method\": \"h3_drift\"}",
         "regularises MiniMax-H3's LoRA"},
        {"{\"model_family\": \"minimaxh3\", \"model_type\": \"lora\", \"distillation_method\": \"h3_drift\", "
         "\"distillation_config\": {\"h3_drift\": {\"video_weight\": 0}}}", "positive weight"},
        {"{\"model_family\": \"minimaxh3\", \"model_type\": \"lora\", \"distillation_method\": \"h3_drift\", "
         "\"distillation_config\": {\"h3_drift\": {\"inner_distillation_method\": \"anyflow\"}}}",
         "inner_distillation_method"},
    };
    expect_refusals(bad, sizeof bad / sizeof *bad);
}

static void test_failures(void)
{
    printf("-- a non-finite loss stops the run; a budget the plan exceeds is refused\n");
    config *c = make_config("nan", "max_train_steps=200;learning_rate=1e30;max_grad_norm=0;checkpoint_step_interval=1;"
                                   "optimizer=lion");
    st_status st = run(c, 1000, true);
    CHECKF(st == ST_ERR_NUMERIC && strstr(st_error(), "at step"), "%s", st_error());
    printf("     %s\n", st_error());
    int step = 0;
    sscanf(strstr(st_error(), "at step") ? strstr(st_error(), "at step") : "", "at step %d", &step);
    char path[512];
    snprintf(path, sizeof path, "%s/nan/checkpoint-%06d.safetensors", root, step);
    CHECKF(step > 1 && access(path, F_OK) != 0, "no checkpoint for the failed step %d", step);
    snprintf(path, sizeof path, "%s/nan/checkpoint-%06d.safetensors", root, step - 1);
    CHECKF(access(path, F_OK) == 0, "the last good checkpoint (step %d) is kept", step - 1);
    config_free(c);

    c = make_config("small", "device_memory=4MiB");
    st = run(c, 1, false);
    CHECKF(st == ST_ERR_OOM && strstr(st_error(), "device_memory") && strstr(st_error(), "plan"), "%s", st_error());
    printf("     %s\n", st_error());
    config_free(c);
}

/* A data-parallel rank holds the gradients' reduction scratch in the host pool through every step: the plan counts it
 * before any budget is checked, so a 2-rank run whose scratch breaks host_memory is refused before it starts (the
 * scratch used to be added to the prediction after the check, and such a run accepted). */
static void test_rank_scratch_is_planned(void)
{
    printf("-- a data-parallel rank's reduction scratch counts against host_memory\n");
    config *c = make_config("ranks", "gradient_checkpointing=true;gradient_checkpointing_backend=unsloth;"
                                     "gradient_checkpointing_offload_attention=true");
    model_run r;
    CHECKF(model_run_open(c, false, &r) == ST_OK, "%s", st_error());
    const size_t comm = (size_t)dist_scratch_floats_for(model_params(r.m)->grad_count, 2) * sizeof(float);
    CHECK(model_run_close(&r) == 0);
    pool_stats dev1, host1, dev2, host2;
    CHECKF(train_plan(c, 1, &dev1, &host1) == ST_OK && train_plan(c, 2, &dev2, &host2) == ST_OK, "%s", st_error());
    CHECKF(comm > 0 && host1.peak > 0 && host2.peak == host1.peak + comm && dev2.peak == dev1.peak,
           "2 ranks: host peak %zu = %zu of the step + %zu of scratch; device %zu = %zu", host2.peak, host1.peak,
           comm, dev2.peak, dev1.peak);
    char set[64];
    snprintf(set, sizeof set, "host_memory=%zu", host2.peak - 1); /* above the step's and the scratch's own */
    CHECK(config_set(c, set) == ST_OK);
    CHECKF(train_plan(c, 2, &dev2, &host2) == ST_ERR_HOST_OOM && strstr(st_error(), "host_memory"),
           "a budget 1 byte short of the step and its scratch is refused: %s", st_error());
    printf("     %s\n", st_error());
    CHECKF(train_plan(c, 1, &dev1, &host1) == ST_OK, "one rank (no scratch) fits it: %s", st_error());
    config_free(c);
}

/* The trainer's warnings (its own and the config's) go through the one warning sink (status.h): into its log while
 * it lives, and on to the sink it replaced; that sink is back once the trainer is gone. */
static void test_warnings_reach_the_log(void)
{
    printf("-- warnings: through the sink into the trainer's log\n");
    config *c = make_config("warn", "max_train_steps=1;model_type=lora;lora_rank=4;gradient_checkpointing_interval=2");
    char *text = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&text, &len);
    tk_warn_begin();
    trainer *t = NULL;
    CHECKF(c && log && trainer_create(c, log, &t) == ST_OK, "%s", st_error());
    trainer_destroy(t);
    st_warn("segtrain: warning: after the trainer");
    const char *passed = tk_warn_end();
    fclose(log);
    static const char *const said[] = {"segtrain: warning: model_type lora without pretrained_model_name_or_path",
                                       "segtrain: warning: gradient_checkpointing_interval does nothing"};
    for (int i = 0; i < 2; i++)
        CHECKF(text && tk_count(text, said[i]) == 1 && tk_count(passed, said[i]) == 1, "'%s': log \"%s\", sink \"%s\"",
               said[i], text ? text : "", passed);
    CHECK(text && !strstr(text, "after the trainer") && tk_count(passed, "after the trainer") == 1);
    free(text);
    config_free(c);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segtrain-test-train-XXXXXX");
    if (!mkdtemp(root)) return 1;
    test_loss_comes_down();
    test_edm_objective();
    test_ltx2_masks_audio();
    test_captions_steer_mmdit();
    test_resume_is_bitwise();
    test_ema_follows_the_weights();
    test_resume_picks_the_newest();
    test_sizes_that_overflow();
    test_lora_keeps_the_base();
    test_anyflow_objective();
    test_h3_drift_objective();
    test_failures();
    test_rank_scratch_is_planned();
    test_warnings_reach_the_log();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
