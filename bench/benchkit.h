/* What the benchmarks share: their command lines read as the tool reads its own, a model of a preset with seeded
 * weights, device and host pools, a seeded batch of its shape (labels or captions as the family reads them), and
 * sorting for medians. Header-only: every bench is one program. */
#ifndef SEGTRAIN_BENCHKIT_H
#define SEGTRAIN_BENCHKIT_H

#include <stdio.h>
#include <stdlib.h>

#include "cli.h" /* args_parse, cli_number: the tool's own flag and number reading */
#include "segtrain/model.h"
#include "segtrain/objective.h"
#include "segtrain/ops.h"
#include "segtrain/rng.h"
#include "segtrain/status.h"

typedef struct bench_model {
    pool *dev, *host;
    model *m;
    model_config mc;
    float *x0, *noise, *t;
    float *cond;
    flow_batch fb;
} bench_model;

/* 0, or 1 after printing why. */
static inline int bench_open(const char *preset, int64_t batch, bench_model *b)
{
    *b = (bench_model){.dev = pool_create(POOL_DEVICE, 0), .host = pool_create(POOL_HOST, 0)};
    if (model_preset(preset, &b->mc) || model_create(&b->mc, b->dev, &b->m) || model_set_host_pool(b->m, b->host))
        return fprintf(stderr, "%s\n", st_error()), 1;
    model_init(b->m, 1, true);
    const model_config *mc = &b->mc;
    const int64_t n = batch * mc->channels * mc->height * mc->width, L = model_cond_len(mc);
    b->x0 = malloc((size_t)n * sizeof(float));
    b->noise = malloc((size_t)n * sizeof(float));
    b->t = malloc((size_t)batch * sizeof(float));
    b->cond = malloc((size_t)(batch * L) * sizeof(float));
    if (!b->x0 || !b->noise || !b->t || !b->cond) return fprintf(stderr, "out of memory\n"), 1;
    rng_fill_normal(b->x0, n, 1, 1, 0, 1);
    rng_fill_normal(b->noise, n, 1, 2, 0, 1);
    for (int64_t i = 0; i < batch; i++) {
        b->t[i] = (float)rng_uniform(1, 3, (uint64_t)i);
        model_condition(mc, i % mc->classes, "a red circle on a navy background", b->cond + i * L);
    }
    b->fb = (flow_batch){.batch = batch, .x0 = b->x0, .noise = b->noise, .t = b->t, .cond = b->cond,
                         .grad_scale = 1.0f};
    return 0;
}

static inline void bench_close(bench_model *b)
{
    free(b->x0), free(b->noise), free(b->t), free(b->cond);
    model_destroy(b->m);
    pool_destroy(b->host);
    pool_destroy(b->dev);
}

static inline int bench_by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v's n values (v is sorted) */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* x[0..n) uniform in [-0.5, 0.5), a linear congruential sequence from seed */
static inline void bench_fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (1.0 / 16777216.0) - 0.5);
    }
}

/* GFLOP/s of DiT-S/2's fc1 GEMM at batch 8 (2048 tokens, 384 -> 1536) over `seconds`, as `segtrain selfcheck`
 * measures the machine's: the reference an op's rate is read against. */
static inline double bench_gemm_rate(double seconds)
{
    const int64_t n = 2048, in = 384, out = 1536;
    float *x = malloc((size_t)(n * in) * sizeof(float)), *w = malloc((size_t)(out * in) * sizeof(float));
    float *y = malloc((size_t)(n * out) * sizeof(float));
    bench_fill(x, (size_t)(n * in), 1), bench_fill(w, (size_t)(out * in), 2);
    linear_forward(y, x, w, NULL, n, in, out); /* warm-up */
    int reps = 0;
    double t0 = clock_seconds(), t;
    do {
        linear_forward(y, x, w, NULL, n, in, out);
        reps++;
    } while ((t = clock_seconds() - t0) < seconds);
    free(x), free(w), free(y);
    return 2.0 * n * in * out * reps / t * 1e-9;
}

/* Reads argv against flags (NULL-terminated, as args_parse takes them); 0, or 2 after a usage line. Config keys are
 * not options of a bench. */
static inline int bench_args(int argc, char **argv, const char *name, const cli_flag *flags)
{
    cli_args a;
    argv[0] = (char *)name;
    int rc = args_parse(argc, argv, flags, &a);
    if (!rc && (a.help || a.n_sets)) {
        fprintf(stderr, "usage: %s", name);
        for (const cli_flag *f = flags; f->name; f++) fprintf(stderr, " [%s %s]", f->name, f->text ? "TEXT" : "N");
        fprintf(stderr, "\n");
        rc = 2;
    }
    return rc;
}

#endif
