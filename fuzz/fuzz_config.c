/* Fuzz target: a run configuration as a user gives it, a JSON file plus --set overrides, through model allocation
 * and, when cheap, one training forward and backward. The input is the JSON text, then optionally a line "--" and
 * one key=value per line (at most 8), each applied with config_set as --set applies it. device_memory and
 * host_memory are then forced to 64 MiB, so that a huge model must be an out-of-memory status, not a crash or a
 * huge allocation. Whatever is refused is fine; what is accepted must allocate, initialise, run and free cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/config.h"
#include "segtrain/model.h"
#include "segtrain/model_run.h"
#include "segtrain/objective.h"
#include "segtrain/ops.h"
#include "segtrain/pool.h"
#include "segtrain/rng.h"

#define MAX_SETS 8
#define MAX_STEP_WORK 200000000.0 /* weights x samples x tokens of a step worth running: about 0.1 s */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ops_set_threads(1); /* one core per fuzzer: the machine is shared */
    return 0;
}

static void drop_line(void *ctx, const char *line) { (void)ctx, (void)line; }

static void must(st_status st, const char *what)
{
    if (st) {
        fprintf(stderr, "fuzz_config: %s: %s\n", what, st_error());
        abort();
    }
}

/* One training forward and backward of a batch of up to 2 seeded samples, in the model's device pool. */
static void step(model_run *r, const config *cfg)
{
    const model_config *mc = model_get_config(r->m);
    int64_t batch = config_int(cfg, "train_batch_size");
    batch = batch < 1 ? 1 : batch > 2 ? 2 : batch;
    const int64_t L = model_cond_len(mc);
    const double grid = mc->patch > 0 ? (double)(mc->height / mc->patch) * (double)(mc->width / mc->patch) : 0;
    const double work = (double)model_params(r->m)->weight_count * (double)batch * (grid + (double)mc->text_len);
    int64_t n, conds;
    if (work > MAX_STEP_WORK || __builtin_mul_overflow(mc->height, mc->width, &n) ||
        __builtin_mul_overflow(n, mc->channels, &n) || __builtin_mul_overflow(n, batch, &n) || n > INT64_MAX / 8 ||
        __builtin_mul_overflow(batch, L, &conds) || conds > INT64_MAX / 8)
        return;
    float *x0 = NULL, *noise = NULL, *t = NULL;
    float *cond = NULL;
    st_status st = pool_alloc(r->device, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "fuzz.x0", (void **)&x0);
    if (!st) st = pool_alloc(r->device, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "fuzz.noise", (void **)&noise);
    if (!st) st = pool_alloc(r->device, (size_t)batch * sizeof(float), MEM_ACTIVATIONS, "fuzz.t", (void **)&t);
    if (!st) st = pool_alloc(r->device, (size_t)conds * sizeof(float), MEM_ACTIVATIONS, "fuzz.cond", (void **)&cond);
    if (!st) {
        rng_fill_normal(x0, n, 1, rng_stream("fuzz.x0"), 0.0f, 1.0f);
        rng_fill_normal(noise, n, 1, rng_stream("fuzz.noise"), 0.0f, 1.0f);
        for (int64_t i = 0; i < batch; i++) {
            t[i] = 0.25f + 0.5f * (float)i;
            model_condition(mc, i % (mc->classes + 1), "a red circle", cond + i * L);
        }
        float loss;
        const flow_batch fb = {.batch = batch, .x0 = x0, .noise = noise, .t = t, .cond = cond};
        (void)flow_loss(r->m, &fb, true, &loss); /* out of memory or a non-finite loss are statuses, fine */
    }
    pool_free(r->device, cond);
    pool_free(r->device, t);
    pool_free(r->device, noise);
    pool_free(r->device, x0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    char *sets = strstr(text, "\n--\n");
    if (sets) *sets = 0, sets += 4;
    config *cfg;
    if (config_parse(text, "fuzz.json", &cfg)) {
        free(text);
        return 0;
    }
    for (int k = 0; sets && *sets && k < MAX_SETS; k++) {
        char *end = strchr(sets, '\n');
        if (end) *end = 0;
        (void)config_set(cfg, sets); /* a refused override leaves cfg unchanged */
        sets = end ? end + 1 : NULL;
    }
    must(config_set(cfg, "device_memory=64MiB"), "forcing device_memory");
    must(config_set(cfg, "host_memory=64MiB"), "forcing host_memory");
    model_run r;
    static const st_warn_sink quiet = {drop_line, NULL};
    st_warn_set(quiet);
    config_warn(cfg); /* the warning lines are built from the input too */
    if (!model_run_open(cfg, true, &r)) {
        (void)ckpt_settings_warn(cfg); /* as is the checkpointing keys' */
        model_init(r.m, (uint64_t)config_int(cfg, "seed"), false);
        step(&r, cfg);
        size_t leaks = model_run_close(&r);
        if (leaks) {
            fprintf(stderr, "fuzz_config: %zu allocations leaked in the pools\n", leaks);
            abort();
        }
    }
    config_free(cfg);
    free(text);
    return 0;
}
