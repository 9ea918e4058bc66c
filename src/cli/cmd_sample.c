/* `segtrain sample`: a grid of images from trained weights, one row per class (src/train/sample.c). */
#include <limits.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "segtrain/data.h"
#include "segtrain/fileio.h"
#include "segtrain/model.h"
#include "segtrain/sample.h"

static const char sample_help[] =
    "usage: segtrain sample --config C --weights W.safetensors [--lora L.safetensors] --out GRID.png\n"
    "                       [--steps N] [--guidance G] [--seed S] [--per-class K] [--classes N]\n"
    "                       [--prompt 'CAPTION|CAPTION|...']\n"
    "                       [--set key=value ...]\n"
    "\n"
    "Draws images from the model the config describes, with the weights of W (a full weights file, as written by\n"
    "`segtrain init` or by training), and writes them as one PNG: one row per class, or per caption for mmdit,\n"
    "K images per row. For a config with model_type lora, W is the base model and --lora the adapters training\n"
    "wrote (pytorch_lora_weights.safetensors, or any LoRA file under PEFT's names).\n"
    "\n"
    "Each image starts as pure noise at t = 1 and follows the velocity the model predicts down to t = 0 in N equal\n"
    "Euler steps (x <- x + (t_next - t) v). More steps follow the flow more closely and cost one forward each.\n"
    "Classifier-free guidance G mixes the prediction for the class (caption) with the one for the null label\n"
    "(the empty caption): v = v_uncond + G (v_class - v_uncond). G = 1 is the plain conditional model (one\n"
    "forward of the batch a step), G = 0 the unconditional one; G > 1 pushes images towards their class. Any G\n"
    "other than 1 runs the model on the batch twice stacked, so a step costs twice as much and takes twice the\n"
    "activation memory.\n"
    "The noise of image i is a function of (S, i) alone: the same seed gives the same grid.\n"
    "\n"
    "  --steps N      Euler steps (default: the config's validation_num_inference_steps, 30)\n"
    "  --guidance G   guidance scale, >= 0 (default: validation_guidance, 4.0)\n"
    "  --seed S       seed of the starting noise (default: validation_seed, 0)\n"
    "  --per-class K  images per class, the grid's columns (default: validation_samples_per_class, 4)\n"
    "  --classes N    classes 0 .. N-1, the grid's rows (default: the model's classes, at most 8)\n"
    "  --prompt P     mmdit: captions separated by '|', one row each, spaces and quotes around each dropped\n"
    "                 (default: a caption of each of the built-in dataset's 8 classes, e.g. \"a red circle on\n"
    "                 a navy background\")\n"
    "\n"
    "Images are decoded as the model's [-1, 1] pixels (no VAE), so the model needs in_channels 1 (gray) or 3 (RGB).\n"
    "The whole grid is sampled as one batch, within device_memory like any other run.\n";

#define ROWS_MAX 64

/* The grid's captions: the --prompt list (checked to hold at most ROWS_MAX), or a caption of each built-in
 * class. Returns the row count. Each caption loses the spaces around it and one pair of double quotes, so that
 * "a|b", "a" | "b" and '"a"|"b"' caption the same rows (quotes copied from a shell line are not words). */
static int caption_rows(const char *prompt, int resolution, char (*buf)[CAPTION_MAX], const char **rows)
{
    int n = 0;
    if (prompt) {
        for (const char *p = prompt; n < ROWS_MAX; n++) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            const char *c = p;
            while (len && isspace((unsigned char)*c)) c++, len--;
            while (len && isspace((unsigned char)c[len - 1])) len--;
            if (len >= 2 && c[0] == '"' && c[len - 1] == '"') c++, len -= 2;
            snprintf(buf[n], CAPTION_MAX, "%.*s", (int)(len < CAPTION_MAX - 1 ? len : CAPTION_MAX - 1), c);
            rows[n] = buf[n];
            if (!bar) return n + 1;
            p = bar + 1;
        }
        return n;
    }
    dataset *ds = NULL;
    if (!dataset_open_builtin(resolution, 8, 0, &ds))
        for (; n < 8 && !dataset_get(ds, n, NULL, NULL, buf[n]); n++) rows[n] = buf[n];
    dataset_close(ds);
    return n;
}

int cmd_sample(int argc, char **argv)
{
    const char *config_path = NULL, *weights = NULL, *out = NULL, *lora_path = NULL, *prompt = NULL, *classes_text = NULL;
    long long steps = 0, seed = -1, per_class = 0; /* 0 and -1 (below the range): the config's validation_ keys */
    double guidance = -1;
    const cli_flag flags[] = {{"--config", .text = &config_path},
                              {"--weights", .text = &weights, .required = true},
                              {"--out", .text = &out, .required = true},
                              {"--steps", .whole = &steps, .min = 1, .max = 100000},
                              {"--guidance", .real = &guidance, .min = 0, .max = LLONG_MAX},
                              {"--seed", .whole = &seed, .min = 0, .max = LLONG_MAX},
                              {"--per-class", .whole = &per_class, .min = 1, .max = 1024},
                              {"--classes", .text = &classes_text}, /* read against the model's classes below */
                              {"--lora", .text = &lora_path},
                              {"--prompt", .text = &prompt},
                              {0}};
    cli_args a;
    int rc = args_parse(argc, argv, flags, &a);
    if (rc || a.help) return a.help ? (fputs(sample_help, stdout), 0) : rc;

    config *cfg;
    st_status st = cli_load_config(config_path, &a, &cfg);
    if (st) return cli_error("sample");
    model_config mc;
    if ((st = model_config_from(cfg, &mc))) {
        config_free(cfg);
        return cli_error("sample");
    }
    if (!steps) steps = config_int(cfg, "validation_num_inference_steps");
    if (seed < 0) seed = config_int(cfg, "validation_seed");
    if (!per_class) per_class = config_int(cfg, "validation_samples_per_class");
    if (guidance < 0) guidance = config_float(cfg, "validation_guidance");
    long long classes = mc.classes < 8 ? mc.classes : 8;
    const cli_flag classes_flag = {"--classes", .whole = &classes, .min = 1, .max = mc.classes};
    if (classes_text) rc = cli_number("segtrain sample", &classes_flag, classes_text);
    const bool text = model_reads_text(&mc);
    int captions = 1;
    for (const char *p = prompt; p && *p; p++) captions += *p == '|';
    if (!rc && prompt && !text) {
        fprintf(stderr, "segtrain sample: --prompt: the %s family is conditioned on class labels (use --classes)\n",
                mc.family);
        rc = 2;
    }
    if (!rc && classes_text && text) {
        fprintf(stderr, "segtrain sample: --classes: the %s family is conditioned on captions (use --prompt)\n",
                mc.family);
        rc = 2;
    }
    if (!rc && captions > ROWS_MAX) {
        fprintf(stderr, "segtrain sample: --prompt: %d captions; a grid takes at most %d rows\n", captions, ROWS_MAX);
        rc = 2;
    }
    if (!rc && per_class > 1024) {
        fprintf(stderr, "segtrain sample: validation_samples_per_class %lld is more than the 1024 a grid row takes\n",
                per_class);
        rc = 2;
    }
    if (rc) {
        config_free(cfg);
        return rc;
    }

    cli_model cm = {0};
    const sample_settings s = {.steps = (int)steps, .guidance = (float)guidance, .seed = (uint64_t)seed};
    const double t0 = clock_seconds();
    st = atomic_file_check(out); /* before the sampling, not after it */
    if (!st) st = cli_open_model(cfg, true, &cm);
    const bool lora = !st && model_get_config(cm.m)->lora_rank > 0;
    if (!st && lora && !lora_path)
        st = st_fail(ST_ERR_INVALID, "the config trains LoRA (model_type lora): give the adapters with --lora");
    if (!st) st = param_set_load(model_params(cm.m), weights, lora ? PARAMS_FROZEN : PARAMS_ALL, NULL);
    if (!st && lora && model_params(cm.m)->lycoris) st = param_set_load_lycoris(model_params(cm.m), lora_path);
    else if (!st && lora) st = param_set_load_lora(model_params(cm.m), lora_path, model_get_config(cm.m)->lora_alpha);
    const double t1 = clock_seconds();
    char prompts[ROWS_MAX][CAPTION_MAX];
    const char *rows[ROWS_MAX];
    if (!st && text) classes = caption_rows(prompt, (int)mc.height, prompts, rows);
    if (!st) st = sample_grid(cm.m, &s, text ? rows : NULL, (int)classes, (int)per_class, out);
    if (!st) {
        const model_config *c = model_get_config(cm.m);
        for (int r = 0; text && r < classes; r++) printf("row %d: \"%s\"\n", r, rows[r]);
        printf("wrote %lld samples to %s: %lld %s x %lld per row, %lldx%lld, %lld steps, guidance %g, seed %lld\n",
               classes * per_class, out, classes, text ? "captions" : "classes", per_class, (long long)c->width,
               (long long)c->height, steps, guidance, seed);
        const double t2 = clock_seconds();
        printf("took %.2f s (sampling %.2f s, %.3f s a step)\n", t2 - t0, t2 - t1, (t2 - t1) / (double)steps);
    }
    cli_close_model(&cm);
    config_free(cfg);
    return st ? cli_error("sample") : 0;
}
