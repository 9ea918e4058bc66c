/* Optimizers: AdamW and Lion against double-precision references written from torch's formulas, the schedule,
 * clipping, thread-count independence, state round trips through safetensors, and the state's memory. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "segtrain/optim.h"
#include "segtrain/safetensors.h"
#include "testkit.h"

#define PI 3.14159265358979323846

/* A small set with frozen parameters between and after trainable ones; 20068 trainable floats: more than one
 * norm chunk and enough for the parallel paths. */
typedef struct fixture {
    pool *pool;
    param_set ps;
} fixture;

static st_status make_set(fixture *f, size_t capacity, uint64_t seed)
{
    *f = (fixture){.pool = pool_create(POOL_DEVICE, capacity)};
    const int64_t a[2] = {7, 5}, fr[2] = {3, 4}, b[1] = {33}, c[2] = {5, 4000}, d[1] = {9};
    param_add(&f->ps, "a.weight", 2, a, true);
    param_add(&f->ps, "frozen.weight", 2, fr, false);
    param_add(&f->ps, "b.bias", 1, b, true);
    param_add(&f->ps, "c.weight", 2, c, true);
    param_add(&f->ps, "d.frozen", 1, d, false);
    st_status st = param_set_alloc(&f->ps, f->pool);
    if (!st) tk_fill(f->ps.weights, f->ps.weight_count, seed, -1, 1);
    return st;
}

static void free_set(fixture *f)
{
    param_set_free(&f->ps);
    CHECK(pool_destroy(f->pool) == 0);
}

/* The trainable weights in gradient-block order, and the frozen ones. */
static void gather(param_set *ps, bool trainable, float *out)
{
    for (int i = 0; i < ps->n; i++) {
        const param *q = param_at(ps, i);
        if (q->trainable != trainable) continue;
        memcpy(out, q->w, (size_t)q->numel * sizeof(float));
        out += q->numel;
    }
}

static void fill_grads(param_set *ps, uint64_t seed, double scale, double *gd)
{
    tk_fill(ps->grads, ps->grad_count, seed, (float)-scale, (float)scale);
    if (gd) tk_to_double(gd, ps->grads, ps->grad_count);
}

/* ---- references, in double, from the formulas (torch.optim.AdamW, lion-pytorch, diffusers) ---- */

static double ref_lr(const optim_settings *s, int64_t step)
{
    if (step < s->warmup_steps) return s->lr * (double)step / fmax(1.0, (double)s->warmup_steps);
    double progress = (double)(step - s->warmup_steps) / fmax(1.0, (double)(s->total_steps - s->warmup_steps));
    switch (s->schedule) {
    case SCHED_CONSTANT: return s->lr;
    case SCHED_LINEAR: /* get_linear_schedule_with_warmup */
        return s->lr * fmax(0.0, (double)(s->total_steps - step) / fmax(1.0, (double)(s->total_steps - s->warmup_steps)));
    case SCHED_COSINE: return s->lr * fmax(0.0, 0.5 * (1.0 + cos(PI * 0.5 * 2.0 * progress)));
    case SCHED_COSINE_WITH_RESTARTS: /* get_cosine_with_hard_restarts_schedule_with_warmup */
        if (progress >= 1.0) return 0.0;
        return s->lr * fmax(0.0, 0.5 * (1.0 + cos(PI * fmod((double)s->cycles * progress, 1.0))));
    case SCHED_POLYNOMIAL: /* get_polynomial_decay_schedule_with_warmup */
        if (step > s->total_steps) return s->lr_end;
        return (s->lr - s->lr_end) * pow(1.0 - (double)(step - s->warmup_steps) /
                                                   (double)(s->total_steps - s->warmup_steps), s->power) + s->lr_end;
    }
    return NAN;
}

/* t counts from 1 (torch's state step after its increment) */
static void ref_adamw(double *w, double *m, double *v, const double *g, int64_t n, const optim_settings *s, double lr,
                      int64_t t)
{
    for (int64_t i = 0; i < n; i++) {
        w[i] *= 1 - lr * s->weight_decay;
        m[i] = s->beta1 * m[i] + (1 - s->beta1) * g[i];
        v[i] = s->beta2 * v[i] + (1 - s->beta2) * g[i] * g[i];
        double mhat = m[i] / (1 - pow(s->beta1, (double)t)), vhat = v[i] / (1 - pow(s->beta2, (double)t));
        w[i] -= lr * mhat / (sqrt(vhat) + s->eps);
    }
}

static void ref_lion(double *w, double *m, const double *g, int64_t n, const optim_settings *s, double lr)
{
    for (int64_t i = 0; i < n; i++) {
        w[i] *= 1 - lr * s->weight_decay;
        double c = s->beta1 * m[i] + (1 - s->beta1) * g[i];
        w[i] -= lr * (double)((c > 0) - (c < 0));
        m[i] = s->beta2 * m[i] + (1 - s->beta2) * g[i];
    }
}

static void test_against_reference(optim_kind kind)
{
    fixture f;
    CHECK(make_set(&f, 0, 11) == ST_OK);
    param_set *ps = &f.ps;
    const int64_t n = ps->grad_count, nfrozen = ps->weight_count - n;
    optim_settings s = optim_defaults(kind);
    s.lr = kind == OPTIM_ADAMW ? 1e-2 : 1e-3;
    s.weight_decay = 0.1;
    s.warmup_steps = 2, s.total_steps = 8, s.schedule = SCHED_COSINE;
    optimizer *o;
    CHECK(optim_create(ps, &s, &o) == ST_OK);
    CHECK(optim_state_count(o) == (kind == OPTIM_ADAMW ? 2 : 1));

    double *w = malloc((size_t)n * sizeof *w), *m = calloc((size_t)n, sizeof *m), *v = calloc((size_t)n, sizeof *v);
    double *g = malloc((size_t)n * sizeof *g);
    float *got = malloc((size_t)n * sizeof *got), *frozen0 = malloc((size_t)nfrozen * sizeof *frozen0);
    float *frozen = malloc((size_t)nfrozen * sizeof *frozen);
    gather(ps, true, got);
    tk_to_double(w, got, n);
    gather(ps, false, frozen0);
    char what[96];
    for (int64_t step = 0; step < s.total_steps; step++) {
        fill_grads(ps, 100 + (uint64_t)step, 1.0, NULL);
        if (step < 2) /* exact zeros on fresh state: Lion's sign(0) = 0, AdamW's 0 / (0 + eps) */
            for (int64_t i = 0; i < n; i += 97) ps->grads[i] = 0;
        tk_to_double(g, ps->grads, n);
        double lr_used = -1, lr = ref_lr(&s, step);
        CHECK(optim_step(o, &lr_used) == ST_OK);
        CHECKF(fabs(lr_used - lr) <= 1e-15, "%s step %lld lr %.17g, want %.17g", optim_kind_name(kind),
               (long long)step, lr_used, lr);
        if (kind == OPTIM_ADAMW) ref_adamw(w, m, v, g, n, &s, lr, step + 1);
        else ref_lion(w, m, g, n, &s, lr);
        gather(ps, true, got);
        snprintf(what, sizeof what, "%s step %lld weights (lr %.3g)", optim_kind_name(kind), (long long)step, lr);
        tk_expect_close(what, got, w, n, 1e-6);
        snprintf(what, sizeof what, "%s step %lld m", optim_kind_name(kind), (long long)step);
        tk_expect_close(what, optim_state_data(o, 0), m, n, 1e-6);
        if (kind == OPTIM_ADAMW) {
            snprintf(what, sizeof what, "%s step %lld v", optim_kind_name(kind), (long long)step);
            tk_expect_close(what, optim_state_data(o, 1), v, n, 1e-6);
        }
    }
    CHECK(optim_steps_taken(o) == s.total_steps);
    gather(ps, false, frozen);
    snprintf(what, sizeof what, "%s frozen weights untouched", optim_kind_name(kind));
    tk_expect_bitwise(what, frozen, frozen0, nfrozen);
    free(w), free(m), free(v), free(g), free(got), free(frozen0), free(frozen);
    optim_destroy(o);
    free_set(&f);
}

static void test_schedule(void)
{
    optim_settings s = optim_defaults(OPTIM_ADAMW);
    s.lr = 1e-3, s.warmup_steps = 10, s.total_steps = 110, s.schedule = SCHED_COSINE;
    const struct {
        int64_t step;
        double want;
    } cos_cases[] = {
        {0, 0},                                  /* warm-up starts at 0 */
        {5, 0.5e-3},                             /* middle of the warm-up */
        {10, 1e-3},                              /* end of the warm-up: the peak */
        {35, 1e-3 * 0.5 * (1 + cos(PI * 0.25))}, /* a quarter of the decay */
        {60, 0.5e-3},                            /* cosine midpoint */
        {110, 0},                                /* the end */
        {200, 0},                                /* stays at 0 after the end */
    };
    for (size_t i = 0; i < sizeof cos_cases / sizeof cos_cases[0]; i++) {
        double got = optim_lr_at(&s, cos_cases[i].step);
        CHECKF(fabs(got - cos_cases[i].want) <= 1e-15, "cosine lr at %lld: %.17g, want %.17g",
               (long long)cos_cases[i].step, got, cos_cases[i].want);
    }
    for (int64_t step = 0; step <= 110; step++)
        CHECKF(fabs(optim_lr_at(&s, step) - ref_lr(&s, step)) <= 1e-15, "cosine lr at %lld", (long long)step);
    s.schedule = SCHED_CONSTANT;
    CHECK(fabs(optim_lr_at(&s, 5) - 0.5e-3) <= 1e-15);
    CHECK(optim_lr_at(&s, 10) == 1e-3 && optim_lr_at(&s, 110) == 1e-3 && optim_lr_at(&s, 100000) == 1e-3);
    s.warmup_steps = 0;
    CHECK(optim_lr_at(&s, 0) == 1e-3); /* no warm-up: the first update uses the full rate */
    s.schedule = SCHED_COSINE;
    CHECK(optim_lr_at(&s, 0) == 1e-3 && fabs(optim_lr_at(&s, 55) - 0.5e-3) <= 1e-15 && optim_lr_at(&s, 110) == 0);

    /* SimpleTuner's other schedules, against diffusers' formulas step by step */
    s.warmup_steps = 10, s.lr_end = 4e-7, s.power = 0.8, s.cycles = 3;
    const optim_schedule others[] = {SCHED_LINEAR, SCHED_COSINE_WITH_RESTARTS, SCHED_POLYNOMIAL};
    for (int k = 0; k < 3; k++) {
        s.schedule = others[k];
        for (int64_t step = 0; step <= 110; step++)
            CHECKF(fabs(optim_lr_at(&s, step) - ref_lr(&s, step)) <= 1e-15, "schedule %d lr at %lld: %.17g, want %.17g",
                   (int)others[k], (long long)step, optim_lr_at(&s, step), ref_lr(&s, step));
    }
    s.schedule = SCHED_COSINE_WITH_RESTARTS; /* three waves: each restarts at the peak */
    CHECK(optim_lr_at(&s, 10) == 1e-3 && fabs(optim_lr_at(&s, 10 + 100 / 3 + 1) - 1e-3) < 1e-5 && optim_lr_at(&s, 110) == 0);
    s.schedule = SCHED_POLYNOMIAL;
    CHECK(optim_lr_at(&s, 110) == 4e-7 && optim_lr_at(&s, 500) == 4e-7);
    s.lr_end = 2e-3; /* above the peak: diffusers refuses it, and so does optim_create */
    fixture f;
    CHECK(make_set(&f, 0, 4) == ST_OK);
    optimizer *o = NULL;
    CHECK(optim_create(&f.ps, &s, &o) == ST_ERR_INVALID && o == NULL && strstr(st_error(), "lr_end"));
    free_set(&f);
}

static double ref_norm(const float *g, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return sqrt(s);
}

/* A fresh optimizer with this threshold, clipping once; returns the norm it reported. */
static double clip_with(param_set *ps, double max_norm)
{
    optim_settings s = optim_defaults(OPTIM_ADAMW);
    s.max_grad_norm = max_norm;
    optimizer *o;
    CHECK(optim_create(ps, &s, &o) == ST_OK);
    double norm = optim_clip(o);
    optim_destroy(o);
    return norm;
}

static void test_clipping(void)
{
    fixture f;
    CHECK(make_set(&f, 0, 12) == ST_OK);
    param_set *ps = &f.ps;
    const int64_t n = ps->grad_count;
    float *g0 = malloc((size_t)n * sizeof *g0);
    double *want = malloc((size_t)n * sizeof *want);
    fill_grads(ps, 7, 1.0, NULL);
    memcpy(g0, ps->grads, (size_t)n * sizeof *g0);
    const double norm = ref_norm(g0, n);

    double got = clip_with(ps, 2 * norm);
    CHECKF(fabs(got - norm) <= 1e-12 * norm, "norm %.17g, want %.17g", got, norm);
    tk_expect_bitwise("grads below the threshold unchanged", ps->grads, g0, n);
    got = clip_with(ps, 0);
    CHECKF(fabs(got - norm) <= 1e-12 * norm, "norm with clipping disabled %.17g, want %.17g", got, norm);
    tk_expect_bitwise("grads unchanged with max_grad_norm 0", ps->grads, g0, n);
    got = clip_with(ps, -1);
    tk_expect_bitwise("grads unchanged with max_grad_norm < 0", ps->grads, g0, n);

    const double max_norm = norm / 4;
    got = clip_with(ps, max_norm);
    CHECKF(fabs(got - norm) <= 1e-12 * norm, "returned norm is the pre-clip one: %.17g, want %.17g", got, norm);
    for (int64_t i = 0; i < n; i++) want[i] = g0[i] * (max_norm / (norm + 1e-6));
    tk_expect_close("grads scaled above the threshold", ps->grads, want, n, 1e-6);
    const double after = ref_norm(ps->grads, n);
    CHECKF(fabs(after - max_norm) <= 1e-6 * max_norm, "norm after clipping %.9g, want %.9g", after, max_norm);

    memcpy(ps->grads, g0, (size_t)n * sizeof *g0);
    ps->grads[n - 3] = INFINITY;
    got = clip_with(ps, max_norm);
    CHECKF(isinf(got), "an inf gradient gives norm %g", got);
    CHECK(ps->grads[0] == g0[0] && ps->grads[n - 1] == g0[n - 1]); /* left untouched for the caller */
    ps->grads[n - 3] = NAN;
    got = clip_with(ps, max_norm);
    CHECKF(isnan(got), "a NaN gradient gives norm %g", got);

    /* by value (SimpleTuner's default grad_clip_method): each element clamped, as torch's clip_grad_value_ */
    memcpy(ps->grads, g0, (size_t)n * sizeof *g0);
    float hi = 0;
    for (int64_t i = 0; i < n; i++) hi = fmaxf(hi, fabsf(g0[i]));
    const float limit = hi / 2;
    optim_settings vs = optim_defaults(OPTIM_ADAMW);
    vs.max_grad_norm = limit, vs.clip_by_value = true;
    optimizer *o;
    CHECK(optim_create(ps, &vs, &o) == ST_OK);
    got = optim_clip(o);
    optim_destroy(o);
    CHECKF(fabs(got - norm) <= 1e-12 * norm, "by value: the returned norm is the pre-clip one: %.17g", got);
    int clamped = 0;
    for (int64_t i = 0; i < n; i++) {
        const float w = g0[i] > limit ? limit : g0[i] < -limit ? -limit : g0[i];
        clamped += w != g0[i];
        CHECKF(ps->grads[i] == w, "by value: element %lld is %g, want %g", (long long)i, ps->grads[i], w);
    }
    CHECKF(clamped > 0, "the test clamps nothing");
    free(g0), free(want);
    free_set(&f);
}

/* Clip + step a few times at a thread count; returns the weights, state and norms. */
typedef struct run_result {
    float *w, *m, *v;
    double norms[4];
} run_result;

static void run_threads(optim_kind kind, int threads, run_result *r)
{
    omp_set_num_threads(threads);
    fixture f;
    CHECK(make_set(&f, 0, 13) == ST_OK);
    param_set *ps = &f.ps;
    optim_settings s = optim_defaults(kind);
    s.max_grad_norm = 20.0, s.weight_decay = 0.1, s.warmup_steps = 1, s.total_steps = 4, s.schedule = SCHED_COSINE;
    optimizer *o;
    CHECK(optim_create(ps, &s, &o) == ST_OK);
    for (int step = 0; step < 4; step++) {
        fill_grads(ps, 200 + (uint64_t)step, 1.0, NULL); /* norm ~ 82: always clipped */
        r->norms[step] = optim_clip(o);
        CHECK(optim_step(o, NULL) == ST_OK);
    }
    const size_t bytes = (size_t)ps->grad_count * sizeof(float);
    r->w = malloc((size_t)ps->weight_count * sizeof(float));
    r->m = malloc(bytes);
    r->v = malloc(bytes);
    memcpy(r->w, ps->weights, (size_t)ps->weight_count * sizeof(float));
    memcpy(r->m, optim_state_data(o, 0), bytes);
    memcpy(r->v, kind == OPTIM_ADAMW ? optim_state_data(o, 1) : optim_state_data(o, 0), bytes);
    optim_destroy(o);
    free_set(&f);
}

static void test_threads(optim_kind kind)
{
    const int max = omp_get_max_threads();
    run_result one;
    run_threads(kind, 1, &one);
    CHECK(one.norms[0] > 20.0);
    const int64_t nw = 35 + 12 + 33 + 20000 + 9, ng = 35 + 33 + 20000;
    for (int threads = 2; threads <= 3; threads++) {
        run_result r;
        run_threads(kind, threads, &r);
        char what[96];
        snprintf(what, sizeof what, "%s weights, 1 vs %d threads", optim_kind_name(kind), threads);
        tk_expect_bitwise(what, r.w, one.w, nw);
        snprintf(what, sizeof what, "%s m, 1 vs %d threads", optim_kind_name(kind), threads);
        tk_expect_bitwise(what, r.m, one.m, ng);
        if (kind == OPTIM_ADAMW) {
            snprintf(what, sizeof what, "%s v, 1 vs %d threads", optim_kind_name(kind), threads);
            tk_expect_bitwise(what, r.v, one.v, ng);
        }
        CHECK(memcmp(one.norms, r.norms, sizeof one.norms) == 0);
        free(r.w), free(r.m), free(r.v);
    }
    omp_set_num_threads(max);
    free(one.w), free(one.m), free(one.v);
}

/* Three steps, state to a safetensors file, restored into a second optimizer over a copy of the weights: the
 * next three steps are bitwise those of the uninterrupted run. */
static void test_state_round_trip(optim_kind kind, const char *dir)
{
    fixture a, b;
    CHECK(make_set(&a, 0, 14) == ST_OK);
    CHECK(make_set(&b, 0, 99) == ST_OK);
    optim_settings s = optim_defaults(kind);
    s.max_grad_norm = 30.0, s.weight_decay = 0.05, s.warmup_steps = 2, s.total_steps = 6, s.schedule = SCHED_COSINE;
    optimizer *oa, *ob;
    CHECK(optim_create(&a.ps, &s, &oa) == ST_OK);
    CHECK(optim_create(&b.ps, &s, &ob) == ST_OK);
    for (int step = 0; step < 3; step++) {
        fill_grads(&a.ps, 300 + (uint64_t)step, 1.0, NULL);
        optim_clip(oa);
        CHECK(optim_step(oa, NULL) == ST_OK);
    }

    char path[512], steps[32];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, optim_kind_name(kind));
    snprintf(steps, sizeof steps, "%lld", (long long)optim_steps_taken(oa));
    sft_entry e[2];
    const int count = optim_state_count(oa);
    for (int i = 0; i < count; i++)
        e[i] = (sft_entry){.name = optim_state_name(oa, i), .dtype = SFT_F32, .ndim = 1,
                           .shape = {optim_state_size(oa, i)}, .data = optim_state_data(oa, i)};
    const char *meta[4] = {"optimizer", optim_kind_name(kind), "step", steps};
    CHECK(sft_write(path, e, count, meta, 2) == ST_OK);

    memcpy(b.ps.weights, a.ps.weights, (size_t)a.ps.weight_count * sizeof(float));
    sft_file *file;
    CHECK(sft_open(path, &file) == ST_OK);
    CHECK(!strcmp(sft_metadata(file, "optimizer"), optim_kind_name(kind)));
    float *buf = malloc((size_t)b.ps.grad_count * sizeof *buf);
    for (int i = 0; i < optim_state_count(ob); i++) {
        const int64_t shape[1] = {optim_state_size(ob, i)};
        CHECK(sft_read_f32(file, optim_state_name(ob, i), 1, shape, buf) == ST_OK);
        CHECK(optim_state_restore(ob, optim_state_name(ob, i), buf, shape[0]) == ST_OK);
    }
    CHECK(optim_set_steps(ob, strtoll(sft_metadata(file, "step"), NULL, 10)) == ST_OK);
    sft_close(file);
    CHECK(optim_steps_taken(ob) == 3);

    for (int step = 3; step < 6; step++) {
        double lra, lrb;
        fill_grads(&a.ps, 300 + (uint64_t)step, 1.0, NULL);
        fill_grads(&b.ps, 300 + (uint64_t)step, 1.0, NULL);
        double na = optim_clip(oa), nb = optim_clip(ob);
        CHECK(optim_step(oa, &lra) == ST_OK && optim_step(ob, &lrb) == ST_OK);
        CHECK(na == nb && lra == lrb);
    }
    char what[96];
    snprintf(what, sizeof what, "%s resumed run = uninterrupted run", optim_kind_name(kind));
    tk_expect_bitwise(what, b.ps.weights, a.ps.weights, a.ps.weight_count);
    for (int i = 0; i < count; i++)
        tk_expect_bitwise(optim_state_name(oa, i), optim_state_data(ob, i), optim_state_data(oa, i),
                          a.ps.grad_count);

    /* mismatches: ST_ERR_FORMAT naming the buffer, state unchanged */
    float *before = malloc((size_t)b.ps.grad_count * sizeof *before);
    memcpy(before, optim_state_data(ob, 0), (size_t)b.ps.grad_count * sizeof *before);
    CHECK(optim_state_restore(ob, "optimizer.m", buf, b.ps.grad_count - 1) == ST_ERR_FORMAT);
    CHECKF(strstr(st_error(), "optimizer.m") && strstr(st_error(), "20067"), "%s", st_error());
    CHECK(memcmp(before, optim_state_data(ob, 0), (size_t)b.ps.grad_count * sizeof *before) == 0);
    CHECK(optim_state_restore(ob, "optimizer.w", buf, b.ps.grad_count) == ST_ERR_FORMAT);
    if (kind == OPTIM_LION) {
        CHECK(optim_state_restore(ob, "optimizer.v", buf, b.ps.grad_count) == ST_ERR_FORMAT);
        CHECKF(strstr(st_error(), "'optimizer.v' is not part of lion"), "%s", st_error());
    }
    CHECK(optim_set_steps(ob, -1) == ST_ERR_FORMAT && optim_steps_taken(ob) == 6);
    CHECK(optim_state_name(ob, count) == NULL && optim_state_data(ob, -1) == NULL);
    free(buf), free(before);
    optim_destroy(oa);
    optim_destroy(ob);
    free_set(&a);
    free_set(&b);
}

static void test_memory(optim_kind kind)
{
    fixture f;
    CHECK(make_set(&f, 0, 15) == ST_OK);
    const int64_t n = f.ps.grad_count;
    CHECK(n == 35 + 33 + 20000 && f.ps.weight_count == n + 12 + 9); /* frozen floats have no gradient */
    CHECK(optim_state_bytes(kind, n) == (size_t)(kind == OPTIM_ADAMW ? 2 : 1) * (size_t)n * 4);
    const size_t resident = pool_live(f.pool);
    optimizer *o;
    CHECK(optim_create(&f.ps, &(optim_settings){.kind = kind, .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99}, &o) == ST_OK);
    pool_stats st;
    pool_get_stats(f.pool, &st);
    CHECKF(st.live_by_tag[MEM_OPTIMIZER] == optim_state_bytes(kind, n), "optimizer bytes %zu, predicted %zu",
           st.live_by_tag[MEM_OPTIMIZER], optim_state_bytes(kind, n));
    CHECK(st.live == resident + optim_state_bytes(kind, n));
    for (int i = 0; i < optim_state_count(o); i++) {
        CHECK(optim_state_size(o, i) == n && pool_size_of(optim_state_data(o, i)) == (size_t)n * 4);
        float zero = 0;
        bool zeroed = true;
        for (int64_t j = 0; j < n; j++) zeroed &= !memcmp(&optim_state_data(o, i)[j], &zero, sizeof zero);
        CHECK(zeroed);
    }
    optim_destroy(o);
    CHECK(pool_live(f.pool) == resident);
    free_set(&f);

    /* a pool one byte short of the state (and one short of the first moment): a clean failure */
    for (int short_of = 0; short_of < (kind == OPTIM_ADAMW ? 2 : 1); short_of++) {
        const size_t need = resident + (size_t)(short_of + 1) * (size_t)n * 4;
        CHECK(make_set(&f, need - 1, 15) == ST_OK);
        o = (optimizer *)&f; /* must be reset */
        st_status s = optim_create(&f.ps, &(optim_settings){.kind = kind, .beta1 = 0.9, .beta2 = 0.99}, &o);
        CHECKF(s == ST_ERR_OOM && o == NULL, "status %d (%s)", (int)s, st_error());
        CHECKF(strstr(st_error(), "optimizer."), "%s", st_error());
        CHECK(pool_live(f.pool) == resident);
        free_set(&f); /* pool_destroy == 0: nothing leaked */
    }
    /* exactly enough fits */
    CHECK(make_set(&f, resident + optim_state_bytes(kind, n), 15) == ST_OK);
    CHECK(optim_create(&f.ps, &(optim_settings){.kind = kind, .beta1 = 0.9, .beta2 = 0.99}, &o) == ST_OK);
    optim_destroy(o);
    free_set(&f);
}

static void test_invalid(void)
{
    fixture f;
    CHECK(make_set(&f, 0, 16) == ST_OK);
    optimizer *o;
    optim_settings s = optim_defaults(OPTIM_ADAMW);
    s.beta1 = 1.0;
    CHECK(optim_create(&f.ps, &s, &o) == ST_ERR_INVALID && o == NULL);
    CHECKF(strstr(st_error(), "beta1"), "%s", st_error());
    s = optim_defaults(OPTIM_LION);
    s.lr = NAN;
    CHECK(optim_create(&f.ps, &s, &o) == ST_ERR_INVALID);
    s = optim_defaults(OPTIM_LION);
    s.warmup_steps = -1;
    CHECK(optim_create(&f.ps, &s, &o) == ST_ERR_INVALID);
    free_set(&f);

    /* only frozen parameters: nothing to optimize */
    s = optim_defaults(OPTIM_LION);
    pool *p = pool_create(POOL_DEVICE, 0);
    param_set ps = {0};
    param_add(&ps, "frozen", 1, (const int64_t[]){4}, false);
    CHECK(param_set_alloc(&ps, p) == ST_OK);
    CHECK(optim_create(&ps, &s, &o) == ST_ERR_INVALID);
    param_set_free(&ps);
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/segtrain-test-optim-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_against_reference(OPTIM_ADAMW);
    test_against_reference(OPTIM_LION);
    test_schedule();
    test_clipping();
    test_threads(OPTIM_ADAMW);
    test_threads(OPTIM_LION);
    test_state_round_trip(OPTIM_ADAMW, dir);
    test_state_round_trip(OPTIM_LION, dir);
    test_memory(OPTIM_ADAMW);
    test_memory(OPTIM_LION);
    test_invalid();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
