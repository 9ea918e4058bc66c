/* The families against diffusers itself: each fixture (docs/FIXTURES.md, made by scripts/make_fixtures.py) is a
 * diffusers transformer folder, loaded unchanged, and the inputs, prediction, loss and every gradient of the
 * diffusers class at a tiny size, computed in float64. segtrain must match each to a relative L2 error of 1e-4,
 * unchecked and under a checkpointed schedule, and the two schedules' gradients must be bitwise equal. Under
 * mixed_precision bf16 its prediction, loss and every gradient (full training, check_bf16_train; the frozen base's
 * prediction and loss, check_bf16_base) must be within 2x PyTorch's own bf16 error, the fixture's bf16 yardstick. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/model.h"
#include "segtrain/objective.h"
#include "segtrain/ops.h"
#include "segtrain/pool.h"
#include "segtrain/safetensors.h"
#include "testkit.h"

#define FIXTURES SEGTRAIN_SOURCE_DIR "/tests/fixtures/"
#define PARITY_TOL 1e-4

/* ||got - want|| / ||want||, or ||got|| where want is exactly zero (a gradient diffusers leaves at zero). */
static double rel_l2(const float *got, const float *want, int64_t n)
{
    double d = 0, w = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        w += (double)want[i] * want[i];
    }
    return w > 0 ? sqrt(d / w) : sqrt(d);
}

/* The fixture's tensor `name`, shape-checked to numel n. */
static float *tensor(const sft_file *f, const char *name, int64_t n)
{
    const sft_tensor *t = sft_find(f, name);
    float *x = malloc((size_t)n * sizeof(float));
    int64_t numel = 1;
    for (int i = 0; t && i < t->ndim; i++) numel *= t->shape[i];
    CHECKF(t && numel == n && x && sft_read_f32(f, name, t->ndim, t->shape, x) == ST_OK, "fixture tensor %s (%lld floats)",
           name, (long long)n);
    return x;
}

/* The fixture's gradient of parameter q: grad.<name>, or for a Linear weight stored factored (hunyuanvideo15's
 * 2048-wide ByT5 projection) grad_dy.<name>^T grad_x.<name>, summed in double. */
static float *fixture_grad(const sft_file *f, const param *q)
{
    char g[300];
    snprintf(g, sizeof g, "grad.%s", q->name);
    if (sft_find(f, g) || q->ndim != 2) return tensor(f, g, q->numel);
    snprintf(g, sizeof g, "grad_dy.%s", q->name);
    const sft_tensor *t = sft_find(f, g);
    const int64_t out = q->shape[0], in = q->shape[1], n = t ? t->shape[0] : 0;
    float *dy = tensor(f, g, n * out);
    snprintf(g, sizeof g, "grad_x.%s", q->name);
    float *x = tensor(f, g, n * in), *want = malloc((size_t)q->numel * sizeof(float));
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double acc = 0;
            for (int64_t r = 0; r < n; r++) acc += (double)dy[r * out + o] * x[r * in + i];
            want[o * in + i] = (float)acc;
        }
    free(dy), free(x);
    return want;
}

typedef struct fixture_run {
    float loss, *pred, *grads; /* grads: every trainable parameter's, in parameter order */
} fixture_run;

/* The model of mc (sized, and its architecture read from fixture folder dir) in a new pool *p, the folder's weights
 * loaded as diffusers saved them */
static model *fixture_model(const char *dir, const model_config *mc, pool **p)
{
    *p = pool_create(POOL_DEVICE, 0);
    model *m = NULL;
    CHECKF(model_create(mc, *p, &m) == ST_OK, "%s", st_error());
    if (m) CHECKF(param_set_load(model_params(m), dir, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    return m;
}

/* One training forward and backward of the fixture's batch under cs. */
static fixture_run run(model *m, const ckpt_settings *cs, const float *x, const float *ts, const float *cond,
                       const float *target, int64_t B)
{
    const model_config *mc = model_get_config(m);
    param_set *ps = model_params(m);
    const int64_t per = model_sample_numel(mc), n = B * per;
    fixture_run r = {.pred = malloc((size_t)n * sizeof(float)), .grads = malloc((size_t)ps->grad_count * sizeof(float))};
    CHECKF(model_set_checkpointing(m, cs, NULL, 0) == ST_OK, "%s", st_error());
    param_set_zero_grads(ps);
    const float *pred = NULL;
    float *dpred = calloc((size_t)n, sizeof(float));
    st_status st = model_forward(m, x, ts, cond, B, true, &pred);
    CHECKF(st == ST_OK, "forward: %s", st_error());
    if (st) return r;
    memcpy(r.pred, pred, (size_t)n * sizeof(float));
    r.loss = mse_forward(pred, target, NULL, 1, n);
    mse_backward(dpred, pred, target, NULL, 1, n, 1.0f);
    CHECKF(model_backward(m, dpred) == ST_OK, "backward: %s", st_error());
    memcpy(r.grads, ps->grads, (size_t)ps->grad_count * sizeof(float));
    free(dpred);
    return r;
}

/* The fixture's step unchecked and under torch-ffn with interval 2 and stride 2, into r[0] and r[1]. */
static void run_both(model *m, const float *x, const float *ts, const float *cond, const float *target, int64_t B,
                     fixture_run r[2])
{
    const ckpt_settings none = {.interval = 1, .stride = 1};
    const ckpt_settings ckpt = {.enabled = true, .backend = BACKEND_TORCH_FFN, .interval = 2, .stride = 2};
    r[0] = run(m, &none, x, ts, cond, target, B);
    r[1] = run(m, &ckpt, x, ts, cond, target, B);
}

/* Every trainable gradient (grads, in parameter order) against the fixture's to PARITY_TOL, one diffusers leaves
 * exactly zero exactly zero, and all the fixture's compared: the worst error, its parameter, how many were compared
 * and how many are zero. */
static double compare_grads(const char *name, const char *sched, const sft_file *f, param_set *ps, const float *grads,
                            const char **worst_name, int64_t *compared, int64_t *zeros)
{
    double worst = 0;
    int64_t off = 0;
    int frozen = 0; /* parameters segtrain keeps frozen because no step reads them: diffusers' gradient is zero */
    for (int i = 0; i < ps->n; i++) {
        const param *q = param_at(ps, i);
        if (!q->trainable && !q->fixed) {
            char key[PARAM_NAME_MAX + 8];
            snprintf(key, sizeof key, "grad.%s", q->name);
            if (!sft_find(f, key)) continue;
            float *want = fixture_grad(f, q);
            bool zero = true;
            for (int64_t j = 0; j < q->numel; j++) zero &= want[j] == 0.0f;
            CHECKF(zero, "%s: %s is frozen here, but its gradient in diffusers is not zero", name, q->name);
            frozen++;
            free(want);
            continue;
        }
        if (!q->trainable) continue;
        float *want = fixture_grad(f, q);
        const double e = rel_l2(grads + off, want, q->numel);
        CHECKF(e <= PARITY_TOL, "%s, %s: %s rel L2 %.2e", name, sched, q->name, e);
        /* a gradient diffusers leaves at exactly zero (SD3's last block drops its text queries' output) is exactly
         * zero here too: no tolerance needed */
        bool want_zero = true, got_zero = true;
        for (int64_t j = 0; j < q->numel; j++) want_zero &= want[j] == 0.0f, got_zero &= grads[off + j] == 0.0f;
        CHECKF(!want_zero || got_zero, "%s, %s: %s is zero in diffusers, not here", name, sched, q->name);
        *zeros += want_zero;
        if (e > worst) worst = e, *worst_name = q->name;
        off += q->numel, (*compared)++;
        free(want);
    }
    int grads_in_file = 0;
    for (int i = 0; i < sft_count(f); i++)
        grads_in_file += !strncmp(sft_at(f, i)->name, "grad.", 5) || !strncmp(sft_at(f, i)->name, "grad_dy.", 8);
    CHECKF(*compared + frozen == grads_in_file, "%s: %lld gradients compared (and %d frozen, zero), the fixture has %d",
           name, (long long)*compared, frozen, grads_in_file);
    return worst;
}

/* Both runs against the fixture: the prediction (pred[k]: run k's in the fixture's layout, n floats), the loss and
 * every gradient to PARITY_TOL, a gradient diffusers leaves exactly zero exactly zero here too; then the two runs
 * bitwise equal. */
static void compare(const char *name, const sft_file *f, param_set *ps, const fixture_run r[2], const float *pred[2],
                    const float *want_pred, float want_loss, int64_t n)
{
    for (int k = 0; k < 2; k++) {
        const char *sched = k ? "torch-ffn, interval 2" : "none";
        const double ep = rel_l2(pred[k], want_pred, n), el = fabs((double)r[k].loss - want_loss) / want_loss;
        CHECKF(ep <= PARITY_TOL, "%s, %s: pred rel L2 %.2e", name, sched, ep);
        CHECKF(el <= PARITY_TOL, "%s, %s: loss %.7f vs %.7f", name, sched, r[k].loss, want_loss);
        const char *worst_name = "";
        int64_t compared = 0, zeros = 0;
        const double worst = compare_grads(name, sched, f, ps, r[k].grads, &worst_name, &compared, &zeros);
        printf("     %s: loss %.7f (diffusers %.7f), pred rel L2 %.1e, worst of %lld gradients %.1e (%s), %lld exactly "
               "zero\n", sched, r[k].loss, want_loss, ep, (long long)compared, worst, worst_name, (long long)zeros);
    }
    tk_expect_bitwise("gradients, checkpointed vs none", r[1].grads, r[0].grads, ps->grad_count);
    tk_expect_bitwise("prediction, checkpointed vs none", r[1].pred, r[0].pred, n);
}

/* mixed_precision bf16 as segtrain holds it now (under LoRA: every frozen linear weight in bf16, all else float):
 * the fixture's model with adapters, switched off so that the forward is the frozen base's, its prediction (want_pred:
 * the fixture's, in segtrain's layout) and loss against the float64 reference within 2x PyTorch's own bf16 error on
 * the same file (the fixture's bf16 yardstick). The line it prints is what docs/FIXTURES.md's table reads. */
static void check_bf16_base(const char *name, const char *file, const model *m, const float *x, const float *ts,
                            const float *cond, const float *target, int64_t B, const float *want_pred, float want_loss)
{
    model_config mc = *model_get_config(m);
    mc.lora_rank = 4, mc.lora_alpha = 4, mc.lora_attention = mc.lora_mlp = true, mc.bf16_base = true;
    char dir[512];
    snprintf(dir, sizeof dir, FIXTURES "%s", name);
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m16 = NULL;
    st_status st = model_create(&mc, p, &m16);
    if (!st) st = param_set_load(model_params(m16), dir, PARAMS_FROZEN, NULL);
    const float *pred = NULL;
    if (!st) model_params(m16)->adapters_off = true, st = model_forward(m16, x, ts, cond, B, false, &pred);
    int n16 = 0; /* parameters held in bf16: the mode is on */
    for (int i = 0; !st && i < model_params(m16)->n; i++) n16 += param_at(model_params(m16), i)->bf16;
    const char *why = "";
    tk_yardstick *y = tk_yardstick_load(name, &why);
    CHECKF(!st && y && n16 > 0, "%s, %s, mixed_precision bf16: %s", name, file,
           st ? st_error() : !y ? why : "no weight held in bf16");
    if (!st && y) {
        const int64_t n = B * model_sample_numel(&mc);
        const double ep = rel_l2(pred, want_pred, n), loss = mse_forward(pred, target, NULL, 1, n);
        const double el = fabs(loss - want_loss) / want_loss;
        tk_expect_within_yardstick(y, name, file, "pred", ep);
        tk_expect_within_yardstick(y, name, file, "loss", el);
        printf("     bf16-base %s %s: pred %.3g loss %.3g (PyTorch bf16: pred %.3g loss %.3g)\n", name, file, ep, el,
               tk_yardstick_error(y, file, "pred"), tk_yardstick_error(y, file, "loss"));
    }
    tk_yardstick_free(y);
    model_destroy(m16);
    CHECK(pool_destroy(p) == 0);
}

/* The tensors where segtrain's one bf16 draw (the file's inputs) misses 2x PyTorch's bf16 error (the median of its
 * draws) for a reason the engine cannot remove (docs/FIXTURES.md): each is judged as its yardstick is made instead,
 * the median of segtrain's error over as many draws within 2x (bf16_exceptions_over_draws), its one draw held to its
 * own ceiling (about 1.25x what it measures); it is printed with PyTorch's spread, and must still miss the 2x bar on
 * one draw (else it leaves the list). */
static const struct bf16_exception {
    const char *fixture, *file, *tensor;
    double measured, ceiling;
    const char *why;
} bf16_exceptions[] = {
    /* Sana 1.5's ReLU linear attention on RMS-normed queries: at token 20 of block 0 one head's only positive query
     * feature is 0.0008 and at token 19 a head has none, so bf16's rounding of the block's input alone (diffusers in
     * float64 with just that rounding) flips them and moves pred by 0.017, 85% of it in 3 of 128 tokens. One of
     * PyTorch's 8 draws flips them too (its draw 5: pred 0.019, block 1's to_q 0.055, norm_q 0.028, conv_point 0.042);
     * segtrain's one draw, the file's own inputs, is such a draw: inside PyTorch's spread, over 2x its median. Over
     * 8 draws segtrain's median is 1.3-1.4x PyTorch's (to_q 0.028, norm_q 0.016, conv_point 0.020) */
    {"sana-1.5", "parity", "grad.transformer_blocks.1.attn1.to_q.weight", 0.0468, 0.058,
     "ReLU linear attention, queries at zero: flipped by bf16's rounding of the input"},
    {"sana-1.5", "parity", "grad.transformer_blocks.1.attn1.norm_q.weight", 0.0254, 0.032,
     "ReLU linear attention, queries at zero: flipped by bf16's rounding of the input"},
    {"sana-1.5", "parity", "grad.transformer_blocks.1.ff.conv_point.weight", 0.0321, 0.040,
     "ReLU linear attention, queries at zero: flipped by bf16's rounding of the input"},
    /* Krea 2's refiner attends with head_dim 4: its q and k norms' 4-wide gradients are sums of dS q k over keys
     * whose rows of dS add up to 0, so they cancel; PyTorch's 8 draws spread over 0.011-0.103 (norm_k 0.013-0.109),
     * median 0.045 (0.044), and segtrain's one draw, at 0.105, sits at their top; over 8 draws segtrain's spread
     * over 0.010-0.106 (0.015-0.106), median 0.070 (0.070), 1.6x PyTorch's */
    {"krea2", "parity", "grad.text_fusion.refiner_blocks.0.attn.norm_q.weight", 0.105, 0.13,
     "head_dim 4 q/k norms: a cancelling sum, one draw of bf16's roundings"},
    {"krea2", "parity", "grad.text_fusion.refiner_blocks.0.attn.norm_k.weight", 0.106, 0.13,
     "head_dim 4 q/k norms: a cancelling sum, one draw of bf16's roundings"},
};
#define N_BF16_EXCEPTIONS ((int)(sizeof bf16_exceptions / sizeof bf16_exceptions[0]))
static int bf16_excepted; /* the exceptions met in this run: every one, or the list is stale */
static double bf16_exception_error[N_BF16_EXCEPTIONS]; /* each one's error in this run, on the file's inputs */

/* Checks (and counts) segtrain's bf16 error err on tensor of file against 2x PyTorch's, or against its ceiling where
 * it is a known exception (which must still miss the 2x bar); *excepted counts the exceptions met. */
static void bf16_within(const tk_yardstick *y, const char *name, const char *file, const char *tensor, double err,
                        int *excepted)
{
    for (int i = 0; i < N_BF16_EXCEPTIONS; i++) {
        const struct bf16_exception *x = &bf16_exceptions[i];
        if (strcmp(x->fixture, name) || strcmp(x->file, file) || strcmp(x->tensor, tensor)) continue;
        double lo, hi;
        const double bar = tk_yardstick_error(y, file, tensor);
        tk_yardstick_spread(y, file, tensor, &lo, &hi);
        printf("     bf16 known exception %s %s %s: error %.3g (measured %.3g), PyTorch's %.3g (draws %.3g-%.3g), "
               "ceiling %.3g: %s\n", name, file, tensor, err, x->measured, bar, lo, hi, x->ceiling, x->why);
        CHECKF(err <= x->ceiling, "%s, %s: %s error %.3g, over its known exception's ceiling %.3g", name, file, tensor,
               err, x->ceiling);
        CHECKF(err > 2 * bar, "%s, %s: %s error %.3g is within 2x PyTorch's %.3g now: take it off bf16_exceptions",
               name, file, tensor, err, bar);
        bf16_exception_error[i] = err;
        (*excepted)++;
        return;
    }
    tk_expect_within_yardstick(y, name, file, tensor, err);
}

/* Every gradient the file checks (grads: the bf16 run's, in parameter order) against the float64 reference within 2x
 * PyTorch's bf16 error on it (bf16_within); a parameter segtrain keeps frozen (diffusers' gradient is zero) as error
 * 0. The worst ratio of segtrain's error to PyTorch's, and its parameter; *over counts the gradients where segtrain's
 * error is over PyTorch's largest draw (outside its spread), *checked those checked. */
static double bf16_grads_within(const tk_yardstick *y, const char *name, const char *file, const sft_file *f,
                                param_set *ps, const float *grads, const char **worst_name, int *excepted, int *over,
                                int *checked)
{
    double worst = 0, lo, hi;
    int64_t off = 0;
    for (int i = 0; i < ps->n; i++) {
        const param *q = param_at(ps, i);
        char key[PARAM_NAME_MAX + 8];
        snprintf(key, sizeof key, "grad.%s", q->name);
        if (!q->trainable && (q->fixed || !sft_find(f, key))) continue;
        float *want = fixture_grad(f, q);
        const double e = q->trainable ? rel_l2(grads + off, want, q->numel) : 0, bar = tk_yardstick_error(y, file, key);
        bf16_within(y, name, file, key, e, excepted);
        if (bar > 0 && e / bar > worst) worst = e / bar, *worst_name = q->name;
        *over += tk_yardstick_spread(y, file, key, &lo, &hi) && e > hi, ++*checked;
        off += q->trainable ? q->numel : 0;
        free(want);
    }
    return worst;
}

#define BF16_DRAWS 8 /* as scripts/bf16_yardstick.py's DRAWS */

/* A number uniform in [-1, 1) from the xorshift64* state *s: the draws' perturbations, the same on every run. */
static double uniform_pm1(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (double)((*s * 0x2545F4914F6CDD1DULL) >> 11) * 0x1p-52 - 1;
}

/* Another draw of the n inputs v, as bf16_yardstick.py draws PyTorch's: each value times 1 + 2^-9 u, u uniform in
 * [-1, 1], but those that are integers (ids, masks, zeros); NULL for NULL. */
static float *perturbed(const float *v, int64_t n, uint64_t *s)
{
    float *p = v ? malloc((size_t)n * sizeof(float)) : NULL;
    for (int64_t i = 0; p && i < n; i++)
        p[i] = v[i] == nearbyintf(v[i]) ? v[i] : (float)(v[i] * (1 + 0x1p-9 * uniform_pm1(s)));
    return p;
}

/* Where tensor ("grad.<name>") sits among ps's gradients, its numel in *numel; -1 where it is not trained. */
static int64_t grad_offset(param_set *ps, const char *tensor, int64_t *numel)
{
    int64_t off = 0;
    for (int i = 0; i < ps->n; i++) {
        const param *q = param_at(ps, i);
        if (q->trainable && !strcmp(q->name, tensor + 5)) return *numel = q->numel, off;
        off += q->trainable ? q->numel : 0;
    }
    return -1;
}

/* The known exceptions of file judged as their yardstick is made: the median of segtrain's error over BF16_DRAWS
 * draws within 2x PyTorch's median. Draw 0 is the file's inputs against the float64 reference (checked above, in
 * bf16_exception_error); draws 1-7 perturb x, cond and target (perturbed, seeded by fixture and file), each against
 * segtrain's own float32 step on its inputs (m32, mc32: within PARITY_TOL of float64, the parity check, where the
 * errors judged are 1e-2), as PyTorch's are against a float64 reference recomputed per draw. */
static void bf16_exceptions_over_draws(const tk_yardstick *y, const char *name, const char *file, model *m16,
                                       model *m32, const float *x, const float *ts, const float *cond,
                                       const float *target, int64_t B)
{
    int idx[N_BF16_EXCEPTIONS], n = 0;
    for (int i = 0; i < N_BF16_EXCEPTIONS; i++)
        if (!strcmp(bf16_exceptions[i].fixture, name) && !strcmp(bf16_exceptions[i].file, file)) idx[n++] = i;
    if (!n) return;
    double err[N_BF16_EXCEPTIONS][BF16_DRAWS];
    uint64_t s = 14695981039346656037ULL; /* FNV-1a of fixture/file */
    for (const char *c = name; *c; c++) s = (s ^ (unsigned char)*c) * 1099511628211ULL;
    for (const char *c = file; *c; c++) s = (s ^ (unsigned char)*c) * 1099511628211ULL;
    const model_config *mc = model_get_config(m32);
    const int64_t nx = B * model_sample_numel(mc), nc = B * model_cond_len(mc);
    const ckpt_settings none = {.interval = 1, .stride = 1};
    CHECK(model_params(m32)->grad_count == model_params(m16)->grad_count);
    for (int d = 1; d < BF16_DRAWS; d++) {
        float *px = perturbed(x, nx, &s), *pc = perturbed(cond, nc, &s), *pt = perturbed(target, nx, &s);
        fixture_run r32 = run(m32, &none, px, ts, pc, pt, B), r16 = run(m16, &none, px, ts, pc, pt, B);
        for (int k = 0; k < n; k++) {
            int64_t numel = 0;
            const int64_t off = grad_offset(model_params(m16), bf16_exceptions[idx[k]].tensor, &numel);
            err[k][d] = off >= 0 ? rel_l2(r16.grads + off, r32.grads + off, numel) : INFINITY;
        }
        free(px), free(pc), free(pt), free(r32.pred), free(r32.grads), free(r16.pred), free(r16.grads);
    }
    for (int k = 0; k < n; k++) {
        const char *tensor = bf16_exceptions[idx[k]].tensor;
        double *e = err[k], lo, hi;
        e[0] = bf16_exception_error[idx[k]];
        for (int i = 1; i < BF16_DRAWS; i++) /* insertion sort: the median */
            for (int j = i; j > 0 && e[j - 1] > e[j]; j--) {
                const double t = e[j];
                e[j] = e[j - 1], e[j - 1] = t;
            }
        const double median = (e[BF16_DRAWS / 2 - 1] + e[BF16_DRAWS / 2]) / 2;
        const double bar = tk_yardstick_error(y, file, tensor);
        tk_yardstick_spread(y, file, tensor, &lo, &hi);
        printf("     bf16 over draws %s %s %s: segtrain's median %.3g (draws %.3g-%.3g), PyTorch's %.3g (draws "
               "%.3g-%.3g)\n", name, file, tensor, median, e[0], e[BF16_DRAWS - 1], bar, lo, hi);
        CHECKF(median <= 2 * bar, "%s, %s: %s median error over %d draws %.3g, over 2x PyTorch's %.3g", name, file,
               tensor, BF16_DRAWS, median, bar);
    }
}

/* Full training under mixed_precision bf16 (bf16 activations: the states between blocks and what the block kinds
 * that do it keep, rounded where PyTorch makes a bf16 tensor; docs/PRECISION.md): the fixture's step, unchecked, its
 * prediction (want_pred in segtrain's layout), loss and every gradient the file checks against the float64 reference
 * within 2x PyTorch's own bf16 error on the same file. The line it prints is what docs/FIXTURES.md's table reads. */
static void check_bf16_train(const char *name, const char *file, const sft_file *f, model *m, const float *x,
                             const float *ts, const float *cond, const float *target, int64_t B,
                             const float *want_pred, float want_loss)
{
    model_config mc = *model_get_config(m);
    mc.bf16_activations = true;
    char dir[512];
    snprintf(dir, sizeof dir, FIXTURES "%s", name);
    pool *p = NULL;
    model *m16 = fixture_model(dir, &mc, &p);
    const char *why = "";
    tk_yardstick *y = tk_yardstick_load(name, &why);
    CHECKF(m16 && y, "%s, %s, bf16 training: %s", name, file, y ? st_error() : why);
    if (m16 && y) {
        const ckpt_settings none = {.interval = 1, .stride = 1};
        fixture_run r = run(m16, &none, x, ts, cond, target, B);
        const double ep = rel_l2(r.pred, want_pred, B * model_sample_numel(&mc));
        const double el = fabs((double)r.loss - want_loss) / want_loss;
        tk_expect_within_yardstick(y, name, file, "pred", ep);
        tk_expect_within_yardstick(y, name, file, "loss", el);
        const char *worst_name = "";
        int over = 0, checked = 0;
        const double worst = bf16_grads_within(y, name, file, f, model_params(m16), r.grads, &worst_name,
                                               &bf16_excepted, &over, &checked);
        printf("     bf16-train %s %s: pred %.3g loss %.3g worst-gradient-ratio %.3g %s, %d of %d gradients over "
               "PyTorch's largest draw (PyTorch bf16: pred %.3g loss %.3g)\n", name, file, ep, el, worst, worst_name,
               over, checked, tk_yardstick_error(y, file, "pred"), tk_yardstick_error(y, file, "loss"));
        bf16_exceptions_over_draws(y, name, file, m16, m, x, ts, cond, target, B);
        free(r.pred), free(r.grads);
    }
    tk_yardstick_free(y);
    model_destroy(m16);
    CHECK(pool_destroy(p) == 0);
}

/* Both bf16 checks of the fixture's file: the frozen base's forward, and full training. */
static void check_bf16(const char *name, const char *file, const sft_file *f, model *m, const float *x,
                       const float *ts, const float *cond, const float *target, int64_t B, const float *want_pred,
                       float want_loss)
{
    check_bf16_base(name, file, m, x, ts, cond, target, B, want_pred, want_loss);
    check_bf16_train(name, file, f, m, x, ts, cond, target, B, want_pred, want_loss);
}

/* A fixture of a family whose conditioning is a text encoder's sequence, its pooled vector and, where the model
 * embeds it, the guidance value (model.h's layout), run on the family's preset resized by the fixture's own
 * config.json, at the shape and batch of the fixture's file `file` (parity: square; parity_hw: height != width). */
static void run_fixture(const char *name, const char *preset, const char *file)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, FIXTURES "%s", name);
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, file);
    sft_file *f;
    CHECKF(sft_open(path, &f) == ST_OK, "%s", st_error());
    const sft_tensor *lat = sft_find(f, "latents"), *ehs = sft_find(f, "encoder_hidden_states");
    /* anima's text is its conditioner's, from Qwen3 states and T5 ids (B, L) */
    const sft_tensor *qwen = sft_find(f, "qwen_hidden_states"), *ids = sft_find(f, "t5xxl_ids");
    CHECK(lat && (lat->ndim == 4 || lat->ndim == 5) && ((ehs && ehs->ndim == 3) || (qwen && ids))); /* video too */
    if (!lat || !((ehs && ehs->ndim == 3) || (qwen && ids))) return;
    const int64_t B = lat->shape[0], C = lat->shape[1], F = lat->ndim == 5 ? lat->shape[2] : 1;
    const int64_t H = lat->shape[lat->ndim - 2], W = lat->shape[lat->ndim - 1];
    const int64_t L = ehs ? ehs->shape[1] : ids->shape[1];
    printf("-- %s, %s: %s's sizes from the fixture's config.json, diffusers' folder as saved; batch %lld, %lld x %lld"
           "%s\n", name, file, preset, (long long)B, (long long)H, (long long)W, F > 1 ? " x frames" : "");

    const sft_tensor *ehs2 = sft_find(f, "encoder_hidden_states_2"); /* hunyuanvideo15's ByT5 tokens */
    model_config mc;
    CHECK(model_preset(preset, &mc) == ST_OK);
    mc.height = H, mc.width = W, mc.text_len = L, mc.frames = F, mc.text2_len = ehs2 ? ehs2->shape[1] : 0;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK, "%s", st_error());
    const sft_tensor *llt = sft_find(f, "llama_hidden_states"); /* HiDream's: (B, blocks, tokens, width) */
    if (llt) mc.llama_len = llt->shape[2];
    if (qwen) mc.source_len = qwen->shape[1];
    CHECK(mc.channels == C && (qwen ? mc.source_dim == qwen->shape[2] : mc.text_dim == ehs->shape[2]));
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = NULL;
    CHECKF(model_create(&mc, p, &m) == ST_OK, "%s", st_error());
    param_set *ps = model_params(m);
    param *table = param_find(ps, "pos_embed.pos_embed"); /* sd3's fixed sin-cos table: segtrain's own first */
    if (!table) table = param_find(ps, "patch_embedding.pos_embed"); /* OmniGen's */
    if (table && !table->fixed) table = NULL;             /* AuraFlow's is learned */
    float *made = table ? malloc((size_t)table->numel * sizeof(float)) : NULL;
    if (table) memcpy(made, table->w, (size_t)table->numel * sizeof(float));
    CHECKF(param_set_load(ps, dir, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    if (table) {
        double e = 0;
        for (int64_t i = 0; i < table->numel; i++) e = fmax(e, fabs((double)made[i] - table->w[i]));
        CHECKF(e <= 1e-6, "%s: %s made here differs from diffusers' by %.1e", name, table->name, e);
        printf("     %s as made here: max |diff| %.1e from diffusers' (%lld values)\n", table->name, e,
               (long long)table->numel);
        free(made);
    }

    /* the inputs as segtrain takes them: 1000 sigma in float, the conditioning row per sample */
    const int64_t per = C * F * H * W, K = model_cond_len(&mc), P = mc.pooled_dim;
    float *x = tensor(f, "latents", B * per), *sigma = tensor(f, "sigma", B), *target = tensor(f, "target", B * per);
    float *want_pred = tensor(f, "pred", B * per), *want_loss = tensor(f, "loss", 1);
    float *text = ehs ? tensor(f, "encoder_hidden_states", B * L * mc.text_dim) : NULL;
    const int64_t Q = qwen ? mc.source_len * mc.source_dim : 0; /* model.h's anima layout: Qwen's, ids, weights */
    float *qstates = qwen ? tensor(f, "qwen_hidden_states", B * Q) : NULL;
    float *t5 = qwen ? tensor(f, "t5xxl_ids", B * L) : NULL, *t5w = qwen ? tensor(f, "t5xxl_weights", B * L) : NULL;
    float *pooled = P && !sft_find(f, "time_ids") ? tensor(f, "pooled_projections", B * P) : NULL;
    float *guidance = mc.guidance_embeds ? tensor(f, "guidance", B) : NULL;
    const bool size_ids = sft_find(f, "time_ids") != NULL; /* SDXL's six, after the pooled text */
    float *sizes = size_ids ? tensor(f, "time_ids", B * 6) : NULL;
    if (size_ids) pooled = tensor(f, "text_embeds", B * P);
    /* the text mask where the family reads one, after the pooled vector (model.h's layout) */
    const char *mask_name = sft_find(f, "attention_mask")           ? "attention_mask"
                            : sft_find(f, "encoder_attention_mask") ? "encoder_attention_mask" /* HunyuanVideo's */
                                                                    : "encoder_hidden_states_mask"; /* Chroma's */
    float *mask = model_text_mask(&mc) ? tensor(f, mask_name, B * L) : NULL;
    const int64_t nllama = llt ? (mc.depth + mc.single_depth) * mc.llama_len * mc.text_dim : 0;
    float *llama = llt ? tensor(f, "llama_hidden_states", B * nllama) : NULL;
    const int64_t L2 = mc.text2_len, E2 = mc.text2_dim, at_text2 = L * mc.text_dim + P + (mask ? L : 0);
    float *text2 = L2 ? tensor(f, "encoder_hidden_states_2", B * L2 * E2) : NULL;
    float *mask2 = L2 ? tensor(f, "encoder_attention_mask_2", B * L2) : NULL;
    const int64_t at_guidance = at_text2 + L2 * (E2 + 1);
    /* WanVACE's control latents, at the conditioning's end (model.h's layout) */
    const int64_t Nc = !strcmp(mc.family, "wan") && mc.vace_count > 0 ? mc.vace_channels * F * H * W : 0;
    float *control = Nc ? tensor(f, "control_hidden_states", B * Nc) : NULL;
    float *cond = malloc((size_t)(B * K) * sizeof(float)), *ts = malloc((size_t)B * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        if (control) memcpy(cond + b * K + K - Nc, control + b * Nc, (size_t)Nc * sizeof(float));
        /* cosmos2image's fixture holds EDM's sigma: the model's time is t = sigma / (sigma + 1), float as SimpleTuner's */
        const bool cosmos = !strcmp(mc.family, "cosmos2image") || !strcmp(mc.family, "anima");
        ts[b] = 1000.0f * (cosmos && !qwen ? sigma[b] / (sigma[b] + 1.0f) : sigma[b]);
        if (qwen) {
            memcpy(cond + b * K, qstates + b * Q, (size_t)Q * sizeof(float));
            memcpy(cond + b * K + Q, t5 + b * L, (size_t)L * sizeof(float));
            memcpy(cond + b * K + Q + L, t5w + b * L, (size_t)L * sizeof(float));
            continue;
        }
        memcpy(cond + b * K, text + b * L * mc.text_dim, (size_t)(L * mc.text_dim) * sizeof(float));
        if (P) memcpy(cond + b * K + L * mc.text_dim, pooled + b * P, (size_t)P * sizeof(float)); /* AuraFlow: none */
        if (mask) memcpy(cond + b * K + L * mc.text_dim + P, mask + b * L, (size_t)L * sizeof(float));
        if (L2) {
            memcpy(cond + b * K + at_text2, text2 + b * L2 * E2, (size_t)(L2 * E2) * sizeof(float));
            memcpy(cond + b * K + at_text2 + L2 * E2, mask2 + b * L2, (size_t)L2 * sizeof(float));
        }
        if (guidance) cond[b * K + at_guidance] = guidance[b];
        if (sizes) memcpy(cond + b * K + L * mc.text_dim + P, sizes + b * 6, 6 * sizeof(float));
        if (llama) /* after the pooled vector, each block's Llama states (model.h's layout) */
            memcpy(cond + b * K + L * mc.text_dim + P, llama + b * nllama, (size_t)nllama * sizeof(float));
    }

    fixture_run r[2];
    run_both(m, x, ts, cond, target, B, r);
    compare(name, f, ps, r, (const float *[2]){r[0].pred, r[1].pred}, want_pred, want_loss[0], B * per);
    check_bf16(name, file, f, m, x, ts, cond, target, B, want_pred, want_loss[0]);
    for (int k = 0; k < 2; k++) free(r[k].pred), free(r[k].grads);
    free(x), free(sigma), free(target), free(want_pred), free(want_loss), free(text), free(pooled), free(guidance);
    free(mask), free(llama), free(text2), free(mask2), free(qstates), free(t5), free(t5w), free(control), free(sizes);
    free(cond), free(ts);
    sft_close(f);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* The fixture at its square shape (parity.safetensors), then at its non-square one (parity_hw.safetensors). */
static void test_fixture(const char *name, const char *preset)
{
    run_fixture(name, preset, "parity");
    run_fixture(name, preset, "parity_hw");
}

/* A test of a fixture file at its square shape, then at its non-square one. */
static void each_shape(void (*test)(const char *file))
{
    test("parity");
    test("parity_hw");
}

/* channels last (B, T, C) to segtrain's (B, C, T) (H = W = 1), or back */
static float *transpose(const float *x, int64_t B, int64_t T, int64_t C, bool back)
{
    float *y = malloc((size_t)(B * T * C) * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) {
                const int64_t last = (b * T + t) * C + c, first = (b * C + c) * T + t;
                y[back ? last : first] = x[back ? first : last];
            }
    return y;
}

/* ACE-Step 1.5: audio latents channels last (B, T, C) as (B, C, T, 1, 1), the context latents (B, T, 2 C) after
 * the condition sequence in the conditioning (model.h's layout), both schedules against diffusers. */
static void test_ace_step(void)
{
    printf("-- ace-step: ace-step-tiny's sizes from the fixture's config.json, diffusers' folder as saved\n");
    const char *dir = FIXTURES "ace-step";
    sft_file *f;
    CHECKF(sft_open(FIXTURES "ace-step/parity.safetensors", &f) == ST_OK, "%s", st_error());
    const sft_tensor *lat = sft_find(f, "latents"), *ehs = sft_find(f, "encoder_hidden_states");
    const sft_tensor *ctx = sft_find(f, "context_latents");
    CHECK(lat && lat->ndim == 3 && ehs && ehs->ndim == 3 && ctx && ctx->ndim == 3);
    const int64_t B = lat->shape[0], T = lat->shape[1], C = lat->shape[2], L = ehs->shape[1], Cc = ctx->shape[2];
    model_config mc;
    CHECK(model_preset("ace-step-tiny", &mc) == ST_OK);
    mc.frames = T, mc.text_len = L;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK, "%s", st_error());
    CHECK(mc.channels == C && mc.cond_channels == Cc && mc.text_dim == ehs->shape[2] && mc.window == 3 &&
          mc.kv_heads == 2);
    pool *p = NULL;
    model *m = fixture_model(dir, &mc, &p);
    param_set *ps = model_params(m);
    const int64_t per = C * T, K = model_cond_len(&mc), E = mc.text_dim;
    CHECK(K == L * E + T * Cc);
    float *xl = tensor(f, "latents", B * per), *tl = tensor(f, "target", B * per), *pl = tensor(f, "pred", B * per);
    float *x = transpose(xl, B, T, C, false), *target = transpose(tl, B, T, C, false);
    float *sigma = tensor(f, "sigma", B), *want_loss = tensor(f, "loss", 1);
    float *text = tensor(f, "encoder_hidden_states", B * L * E), *context = tensor(f, "context_latents", B * T * Cc);
    float *cond = malloc((size_t)(B * K) * sizeof(float)), *ts = malloc((size_t)B * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        ts[b] = 1000.0f * sigma[b];
        memcpy(cond + b * K, text + b * L * E, (size_t)(L * E) * sizeof(float));
        memcpy(cond + b * K + L * E, context + b * T * Cc, (size_t)(T * Cc) * sizeof(float));
    }
    fixture_run r[2];
    run_both(m, x, ts, cond, target, B, r);
    float *pred[2] = {transpose(r[0].pred, B, T, C, true), transpose(r[1].pred, B, T, C, true)};
    compare("ace-step", f, ps, r, (const float *[2]){pred[0], pred[1]}, pl, want_loss[0], B * per);
    free(pred[0]), free(pred[1]);
    float *want = transpose(pl, B, T, C, false); /* in segtrain's layout */
    check_bf16("ace-step", "parity", f, m, x, ts, cond, target, B, want, want_loss[0]);
    free(want);
    for (int k = 0; k < 2; k++) free(r[k].pred), free(r[k].grads);
    free(xl), free(tl), free(pl), free(x), free(target), free(sigma), free(want_loss), free(text), free(context);
    free(cond), free(ts);
    sft_close(f);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* A Wan-style fixture whose conditioning is several tensors side by side (model.h's layout): each sample's parts
 * packed in order (their per-sample sizes summing to model_cond_len), the times 1000 sigma, then the step unchecked
 * and checkpointed against the file's pred, loss and gradients, and in bf16 against its yardstick. */
static void run_parts(const char *name, const char *file, sft_file *f, model *m, int64_t B, int64_t per,
                      const char *const *parts, const int64_t *sizes, int n)
{
    const int64_t K = model_cond_len(model_get_config(m));
    int64_t sum = 0;
    for (int i = 0; i < n; i++) sum += sizes[i];
    CHECK(K == sum);
    float *cond = malloc((size_t)(B * K) * sizeof(float)), *ts = malloc((size_t)B * sizeof(float));
    for (int i = 0, at = 0; i < n; at += (int)sizes[i], i++) {
        float *t = tensor(f, parts[i], B * sizes[i]);
        for (int64_t b = 0; b < B; b++) memcpy(cond + b * K + at, t + b * sizes[i], (size_t)sizes[i] * sizeof(float));
        free(t);
    }
    float *x = tensor(f, "latents", B * per), *sigma = tensor(f, "sigma", B), *target = tensor(f, "target", B * per);
    float *want_pred = tensor(f, "pred", B * per), *want_loss = tensor(f, "loss", 1);
    for (int64_t b = 0; b < B; b++) ts[b] = 1000.0f * sigma[b];
    fixture_run r[2];
    run_both(m, x, ts, cond, target, B, r);
    compare(name, f, model_params(m), r, (const float *[2]){r[0].pred, r[1].pred}, want_pred, want_loss[0], B * per);
    check_bf16(name, file, f, m, x, ts, cond, target, B, want_pred, want_loss[0]);
    for (int k = 0; k < 2; k++) free(r[k].pred), free(r[k].grads);
    free(x), free(sigma), free(target), free(want_pred), free(want_loss), free(cond), free(ts);
}

/* Wan Animate: after the text, a sample's conditioning holds the reference image's CLIP tokens, the condition
 * latents, the pose latents and the face video (model.h's layout); the fixture's hidden_states are the latents and
 * the condition latents concatenated on channels, which segtrain's model does itself; at file's shape and batch. */
static void test_wan_animate(const char *file)
{
    const char *dir = FIXTURES "wan-animate";
    char path[600];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, file);
    sft_file *f;
    CHECKF(sft_open(path, &f) == ST_OK, "%s", st_error());
    const sft_tensor *lat = sft_find(f, "latents"), *ehs = sft_find(f, "encoder_hidden_states");
    const sft_tensor *img = sft_find(f, "encoder_hidden_states_image");
    CHECK(lat && lat->ndim == 5 && ehs && ehs->ndim == 3 && img && img->ndim == 3);
    if (!lat || !ehs || !img) return;
    const int64_t B = lat->shape[0], C = lat->shape[1], F = lat->shape[2], H = lat->shape[3], W = lat->shape[4];
    const int64_t L = ehs->shape[1];
    printf("-- wan-animate, %s: wan-animate-tiny's sizes from the fixture's config.json, diffusers' folder as saved; "
           "batch %lld, %lld x %lld x frames\n", file, (long long)B, (long long)H, (long long)W);
    model_config mc;
    CHECK(model_preset("wan-animate-tiny", &mc) == ST_OK);
    mc.height = H, mc.width = W, mc.text_len = L, mc.frames = F, mc.image_tokens = img->shape[1];
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK, "%s", st_error());
    CHECK(mc.channels == C && mc.text_dim == ehs->shape[2] && mc.image_dim == img->shape[2] && mc.face_every == 1 &&
          mc.cond_channels == C + 4 && model_face_frames(&mc) == 4 * F - 7);
    pool *p = NULL;
    model *m = fixture_model(dir, &mc, &p);
    const char *parts[5] = {"encoder_hidden_states", "encoder_hidden_states_image", "condition_latents",
                            "pose_hidden_states", "face_pixel_values"};
    const int64_t sizes[5] = {L * mc.text_dim, mc.image_tokens * mc.image_dim, mc.cond_channels * F * H * W,
                              C * (F - 1) * H * W, 3 * model_face_frames(&mc) * mc.face_size * mc.face_size};
    run_parts("wan-animate", file, f, m, B, C * F * H * W, parts, sizes, 5);
    sft_close(f);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* Wan S2V (SimpleTuner's own class): after the text, a sample's conditioning holds the Wav2Vec2 hidden states of its
 * latent frames (layers, audio_dim, frames) and the reference image's latent (model.h's layout, wan_s2v.c); at
 * file's shape and batch. */
static void test_wan_s2v(const char *file)
{
    const char *dir = FIXTURES "wan-s2v";
    char path[600];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, file);
    sft_file *f;
    CHECKF(sft_open(path, &f) == ST_OK, "%s", st_error());
    const sft_tensor *lat = sft_find(f, "latents"), *ehs = sft_find(f, "encoder_hidden_states");
    const sft_tensor *aud = sft_find(f, "audio_embeds");
    CHECK(lat && lat->ndim == 5 && ehs && ehs->ndim == 3 && aud && aud->ndim == 4);
    if (!lat || !ehs || !aud) return;
    const int64_t B = lat->shape[0], C = lat->shape[1], F = lat->shape[2], H = lat->shape[3], W = lat->shape[4];
    const int64_t L = ehs->shape[1];
    printf("-- wan-s2v, %s: wan-s2v-tiny's sizes from the fixture's config.json, SimpleTuner's class's folder as saved; "
           "batch %lld, %lld x %lld x %lld frames\n", file, (long long)B, (long long)H, (long long)W, (long long)F);
    model_config mc;
    CHECK(model_preset("wan-s2v-tiny", &mc) == ST_OK);
    mc.height = H, mc.width = W, mc.text_len = L, mc.frames = F;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK, "%s", st_error());
    CHECK(mc.channels == C && mc.text_dim == ehs->shape[2] && mc.audio_layers == aud->shape[1] &&
          mc.audio_channels == aud->shape[2] && aud->shape[3] == F && mc.audio_inject == 5);
    pool *p = NULL;
    model *m = fixture_model(dir, &mc, &p);
    const char *parts[3] = {"encoder_hidden_states", "audio_embeds", "image_latents"};
    const int64_t sizes[3] = {L * mc.text_dim, mc.audio_layers * mc.audio_channels * F, C * H * W};
    run_parts("wan-s2v", file, f, m, B, C * F * H * W, parts, sizes, 3);
    sft_close(f);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* AnyFlow's MeanFlow objective (distillation_method anyflow at SimpleTuner's defaults) on the anyflow fixture's model:
 * the times from the stored uniforms, then the loss and every gradient against the float64 reference
 * (scripts/make_fixtures.py anyflow-meanflow), unchecked and checkpointed, and the two bitwise equal. */
static void test_anyflow_meanflow(void)
{
    printf("-- anyflow-meanflow: distillation_method anyflow, SimpleTuner's defaults, on anyflow's model\n");
    const char *dir = FIXTURES "anyflow";
    sft_file *f;
    CHECKF(sft_open(FIXTURES "anyflow/meanflow.safetensors", &f) == ST_OK, "%s", st_error());
    const sft_tensor *lat = sft_find(f, "latents"), *ehs = sft_find(f, "encoder_hidden_states");
    CHECK(lat && lat->ndim == 5 && ehs && ehs->ndim == 3);
    if (!lat || !ehs) return;
    const int64_t B = lat->shape[0], C = lat->shape[1], F = lat->shape[2], H = lat->shape[3], W = lat->shape[4];
    const int64_t L = ehs->shape[1];
    config *cfg = NULL;
    CHECKF(config_parse("{\"distillation_method\": \"anyflow\"}", "test", &cfg) == ST_OK, "%s", st_error());
    meanflow_config mf;
    bool on = false;
    CHECK(meanflow_from_config(cfg, &mf, &on) == ST_OK && on && mf.shift == 3 && mf.diffusion_ratio == 0.5 &&
          mf.consistency_ratio == 0.25 && mf.epsilon == 0.005 && mf.guidance == 3 && mf.beta08 && mf.adaptive &&
          !mf.clamp && mf.max_sigma == 1 && mf.loss_weight == 1);
    config_free(cfg);
    model_config mc;
    CHECK(model_preset("wan-anyflow-tiny", &mc) == ST_OK);
    mc.height = H, mc.width = W, mc.text_len = L, mc.frames = F;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK, "%s", st_error());
    pool *p = NULL;
    model *m = fixture_model(dir, &mc, &p);
    param_set *ps = model_params(m);
    const int64_t n = B * C * F * H * W, K = model_cond_len(&mc);
    CHECK(K == L * mc.text_dim);
    float *x0 = tensor(f, "latents", n), *noise = tensor(f, "noise", n), *u1 = tensor(f, "u1", B);
    float *u2 = tensor(f, "u2", B), *want_t = tensor(f, "t", B), *want_r = tensor(f, "r", B);
    float *text = tensor(f, "encoder_hidden_states", B * K), *null = tensor(f, "null_encoder_hidden_states", B * K);
    float *want_loss = tensor(f, "loss", 1), *t = malloc((size_t)B * sizeof(float)), *r = malloc((size_t)B * sizeof(float));
    meanflow_times(&mf, B, u1, u2, t, r);
    for (int64_t i = 0; i < B; i++)
        CHECKF(fabsf(t[i] - want_t[i]) <= 1e-6f && fabsf(r[i] - want_r[i]) <= 1e-6f, "sample %lld: (t, r) (%.7f, %.7f), "
               "the reference's (%.7f, %.7f)", (long long)i, t[i], r[i], want_t[i], want_r[i]);
    const flow_batch fb = {.batch = B, .x0 = x0, .noise = noise, .t = t, .cond = text, .meanflow = &mf, .r = r,
                           .null_cond = null};
    const ckpt_settings sched[2] = {{.interval = 1, .stride = 1},
                                    {.enabled = true, .backend = BACKEND_TORCH_FFN, .interval = 2, .stride = 2}};
    float *grads[2];
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "torch-ffn, interval 2" : "none";
        CHECKF(model_set_checkpointing(m, &sched[k], NULL, 0) == ST_OK, "%s", st_error());
        param_set_zero_grads(ps);
        float loss = 0;
        CHECKF(flow_loss(m, &fb, true, &loss) == ST_OK, "%s", st_error());
        grads[k] = malloc((size_t)ps->grad_count * sizeof(float));
        memcpy(grads[k], ps->grads, (size_t)ps->grad_count * sizeof(float));
        const double el = fabs((double)loss - want_loss[0]) / want_loss[0];
        CHECKF(el <= PARITY_TOL, "anyflow-meanflow, %s: loss %.7f vs %.7f", name, loss, want_loss[0]);
        const char *worst_name = "";
        int64_t compared = 0, zeros = 0;
        const double worst = compare_grads("anyflow-meanflow", name, f, ps, grads[k], &worst_name, &compared, &zeros);
        printf("     %s: loss %.7f (reference %.7f), worst of %lld gradients %.1e (%s)\n", name, loss, want_loss[0],
               (long long)compared, worst, worst_name);
    }
    tk_expect_bitwise("gradients, checkpointed vs none", grads[1], grads[0], ps->grad_count);
    free(grads[0]), free(grads[1]), free(x0), free(noise), free(u1), free(u2), free(want_t), free(want_r), free(text);
    free(null), free(want_loss), free(t), free(r);
    sft_close(f);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* HeartMuLa (SimpleTuner's own HeartMuLaModel) under the token objective: the fixture's batch of two right-padded
 * samples, its logits (in segtrain's codebook-major layout), SimpleTuner's loss and every gradient, unchecked and
 * checkpointed, bitwise between the two */
/* HeartMuLa's step under mixed_precision bf16 (full training, unchecked): its logits (want, as test_heartmula lays
 * them out), loss and every gradient the file checks against the float64 reference within 2x PyTorch's bf16 error
 * (its yardstick: one draw, the file's own, its tokens being integers). The line is docs/FIXTURES.md's table's. */
static void check_heartmula_bf16(const sft_file *f, model_config mc, const float *tokens, const float *cond,
                                 const float *want, float want_loss, int64_t B, int64_t n)
{
    mc.bf16_activations = true;
    pool *p = NULL;
    model *m = fixture_model(FIXTURES "heartmula", &mc, &p);
    const char *why = "";
    tk_yardstick *y = tk_yardstick_load("heartmula", &why);
    CHECKF(m && y, "heartmula, bf16 training: %s", y ? st_error() : why);
    const float *logits = NULL;
    float loss = NAN;
    const flow_batch fb = {.batch = B, .x0 = tokens, .cond = cond};
    st_status st = m && y ? model_forward(m, tokens, NULL, cond, B, false, &logits) : ST_ERR_INVALID;
    const double ep = !st && logits ? rel_l2(logits, want, n) : INFINITY;
    if (m) model_release(m), param_set_zero_grads(model_params(m));
    if (!st) st = flow_loss(m, &fb, true, &loss);
    CHECKF(!st, "heartmula, bf16 training: %s", st_error());
    if (!st) {
        const double el = fabs((double)loss - want_loss) / want_loss;
        tk_expect_within_yardstick(y, "heartmula", "parity", "pred", ep);
        tk_expect_within_yardstick(y, "heartmula", "parity", "loss", el);
        const char *worst_name = "";
        int over = 0, checked = 0;
        const double worst = bf16_grads_within(y, "heartmula", "parity", f, model_params(m), model_params(m)->grads,
                                               &worst_name, &bf16_excepted, &over, &checked);
        printf("     bf16-train heartmula parity: pred %.3g loss %.3g worst-gradient-ratio %.3g %s, %d of %d gradients "
               "over PyTorch's largest draw (PyTorch bf16: pred %.3g loss %.3g)\n", ep, el, worst, worst_name, over,
               checked, tk_yardstick_error(y, "parity", "pred"), tk_yardstick_error(y, "parity", "loss"));
    }
    tk_yardstick_free(y);
    model_destroy(m);
    CHECK(!p || pool_destroy(p) == 0);
}

static void test_heartmula(void)
{
    printf("-- heartmula: HeartMuLaModel (SimpleTuner's), the token objective\n");
    const char *dir = FIXTURES "heartmula";
    sft_file *f;
    CHECKF(sft_open(FIXTURES "heartmula/parity.safetensors", &f) == ST_OK, "%s", st_error());
    const sft_tensor *tk = sft_find(f, "tokens");
    CHECK(tk && tk->ndim == 3);
    if (!tk) return;
    const int64_t B = tk->shape[0], S = tk->shape[1], C = tk->shape[2], K = C - 1;
    model_config mc;
    CHECK(model_preset("heartmula-tiny", &mc) == ST_OK);
    CHECK(mc.frames == S && mc.channels == C && model_tokens(&mc) && model_cond_len(&mc) == S * (C + 1));
    pool *p = NULL;
    model *m = fixture_model(dir, &mc, &p);
    param_set *ps = model_params(m);
    const int64_t V = mc.classes, F = S - 1, n = B * model_token_logits(&mc);
    float *tokens = tensor(f, "tokens", B * S * C), *mask = tensor(f, "tokens_mask", B * S * C);
    float *frames = tensor(f, "audio_frame_mask", B * S), *want_loss = tensor(f, "loss", 1);
    float *c0 = tensor(f, "codebook0_logits", B * F * V), *rest = tensor(f, "codebook_logits", B * F * (K - 1) * V);
    float *cond = malloc((size_t)(B * S * (C + 1)) * sizeof(float)), *want = malloc((size_t)n * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        memcpy(cond + b * S * (C + 1), mask + b * S * C, (size_t)(S * C) * sizeof(float));
        memcpy(cond + b * S * (C + 1) + S * C, frames + b * S, (size_t)S * sizeof(float));
        for (int64_t t = 0; t < F; t++) {
            memcpy(want + (b * F + t) * V, c0 + (b * F + t) * V, (size_t)V * sizeof(float));
            for (int64_t k = 1; k < K; k++)
                memcpy(want + ((k * B + b) * F + t) * V, rest + ((b * F + t) * (K - 1) + k - 1) * V,
                       (size_t)V * sizeof(float));
        }
    }
    const flow_batch fb = {.batch = B, .x0 = tokens, .cond = cond};
    const ckpt_settings sched[2] = {{.interval = 1, .stride = 1},
                                    {.enabled = true, .backend = BACKEND_TORCH_FFN, .interval = 2, .stride = 2}};
    fixture_run r[2];
    const float *pred[2];
    for (int k = 0; k < 2; k++) {
        CHECKF(model_set_checkpointing(m, &sched[k], NULL, 0) == ST_OK, "%s", st_error());
        const float *logits = NULL;
        r[k].pred = malloc((size_t)n * sizeof(float));
        CHECKF(model_forward(m, tokens, NULL, cond, B, false, &logits) == ST_OK, "%s", st_error());
        if (logits) memcpy(r[k].pred, logits, (size_t)n * sizeof(float));
        model_release(m);
        param_set_zero_grads(ps);
        CHECKF(flow_loss(m, &fb, true, &r[k].loss) == ST_OK, "%s", st_error());
        r[k].grads = malloc((size_t)ps->grad_count * sizeof(float));
        memcpy(r[k].grads, ps->grads, (size_t)ps->grad_count * sizeof(float));
        pred[k] = r[k].pred;
    }
    compare("heartmula", f, ps, r, pred, want, want_loss[0], n);
    check_heartmula_bf16(f, mc, tokens, cond, want, want_loss[0], B, n);
    for (int k = 0; k < 2; k++) free(r[k].pred), free(r[k].grads);
    free(tokens), free(mask), free(frames), free(want_loss), free(c0), free(rest), free(cond), free(want);
    sft_close(f);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* A video fixture's latent frames, rows or columns as its file's metadata `key` says (F, H, W), else `fallback`. */
static int64_t meta_size(const sft_file *f, const char *key, int64_t fallback)
{
    const char *v = sft_metadata(f, key);
    return v ? strtoll(v, NULL, 10) : fallback;
}

/* LTX-2.0: a sample is its video latents then its audio latents (model.h's layout, the fixture's too); a token's
 * conditioning row is the video connector's state then the audio one's, then the shared mask. The latents are flat
 * per sample: the video's frames and grid come from the file's metadata, the square file's (2, 8, 8) without. */
static void test_ltx2(const char *file)
{
    const char *dir = FIXTURES "ltxvideo2";
    char path[600];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, file);
    sft_file *f;
    CHECKF(sft_open(path, &f) == ST_OK, "%s", st_error());
    const sft_tensor *lat = sft_find(f, "latents"), *ehs = sft_find(f, "encoder_hidden_states");
    CHECK(lat && lat->ndim == 2 && ehs && ehs->ndim == 3);
    if (!lat || !ehs) return;
    const int64_t B = lat->shape[0], L = ehs->shape[1], Ct = ehs->shape[2];
    model_config mc;
    CHECK(model_preset("ltxvideo2-tiny", &mc) == ST_OK);
    mc.text_len = L, mc.frames = meta_size(f, "F", 2), mc.height = meta_size(f, "H", 8);
    mc.width = meta_size(f, "W", 8);
    printf("-- ltxvideo2, %s: ltxvideo2-tiny's sizes from the fixture's config.json, diffusers' folder as saved; batch "
           "%lld, %lld x %lld x frames\n", file, (long long)B, (long long)mc.height, (long long)mc.width);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK, "%s", st_error());
    const int64_t per = model_sample_numel(&mc), K = model_cond_len(&mc);
    CHECK(mc.text_dim == 2 * Ct && mc.audio_hidden == 16 && mc.audio_heads == 2 && model_audio_tokens(&mc) == 9 &&
          per == lat->shape[1] && K == L * (2 * Ct + 1));
    pool *p = NULL;
    model *m = fixture_model(dir, &mc, &p);
    param_set *ps = model_params(m);
    float *x = tensor(f, "latents", B * per), *target = tensor(f, "target", B * per);
    float *want = tensor(f, "pred", B * per), *sigma = tensor(f, "sigma", B), *want_loss = tensor(f, "loss", 1);
    float *tv = tensor(f, "encoder_hidden_states", B * L * Ct);
    float *ta = tensor(f, "audio_encoder_hidden_states", B * L * Ct);
    float *mask = tensor(f, "encoder_attention_mask", B * L);
    float *cond = malloc((size_t)(B * K) * sizeof(float)), *ts = malloc((size_t)B * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        ts[b] = 1000.0f * sigma[b];
        for (int64_t l = 0; l < L; l++) {
            memcpy(cond + b * K + l * 2 * Ct, tv + (b * L + l) * Ct, (size_t)Ct * sizeof(float));
            memcpy(cond + b * K + l * 2 * Ct + Ct, ta + (b * L + l) * Ct, (size_t)Ct * sizeof(float));
        }
        memcpy(cond + b * K + L * 2 * Ct, mask + b * L, (size_t)L * sizeof(float));
    }
    fixture_run r[2];
    run_both(m, x, ts, cond, target, B, r);
    compare("ltxvideo2", f, ps, r, (const float *[2]){r[0].pred, r[1].pred}, want, want_loss[0], B * per);
    check_bf16("ltxvideo2", file, f, m, x, ts, cond, target, B, want, want_loss[0]);
    for (int k = 0; k < 2; k++) free(r[k].pred), free(r[k].grads);
    free(x), free(target), free(want), free(sigma), free(want_loss), free(tv), free(ta), free(mask), free(cond), free(ts);
    sft_close(f);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    test_fixture("flux-dev", "flux-tiny");
    test_fixture("flux-schnell", "flux-tiny"); /* sharded: an index and three shards */
    test_fixture("sd3", "sd3-tiny");           /* no qk norm, no dual attention */
    test_fixture("sd35-large", "sd3-tiny");    /* qk norm */
    test_fixture("sd35-medium", "sd3-tiny");   /* qk norm, attn2 in block 0 */
    test_fixture("auraflow", "auraflow-tiny"); /* register tokens, learned positions, no pooled vector */
    test_fixture("qwen-image", "qwen-image-tiny"); /* txt_norm, centred RoPE, the text's key mask */
    test_heartmula();
    test_fixture("mageflow", "mageflow-tiny"); /* qwen-image's, patch 1, its text unrotated, sample b at frame b */
    test_fixture("flux2", "flux2-tiny");       /* shared modulation, 4-axis RoPE, fused single blocks */
    test_fixture("longcat-image", "longcat-image-tiny"); /* no pooled vector, its own position ids */
    test_fixture("chroma", "chroma-tiny"); /* modulation from the approximator, the text's additive mask */
    test_fixture("hunyuanvideo", "hunyuanvideo-tiny"); /* video, the token refiner, image-only RoPE, the key mask */
    test_fixture("hunyuanvideo15", "hunyuanvideo15-tiny"); /* ByT5 glyph tokens, condition channels, double only */
    test_fixture("hidream", "hidream-tiny");
    test_fixture("pixart-sigma", "pixart-sigma-tiny"); /* cross-attention to a masked text, learned variance */
    test_fixture("cosmos", "cosmos2-tiny"); /* AdaLN-LoRA, rotate-half NTK RoPE, the padding-mask channel */
    test_fixture("kandinsky5", "kandinsky5-image-tiny"); /* text blocks then visual blocks, 9-way modulation */
    test_fixture("kandinsky5-video", "kandinsky5-video-tiny"); /* video, visual_cond's zero reference channels */
    test_fixture("longcat-video", "longcat-video-tiny"); /* gated_block's LongCat options: fused q k v, SwiGLU */
    test_fixture("anima", "anima-tiny"); /* cosmos's with its text conditioner, loaded from text_conditioner/ */
    test_fixture("wan", "wan-tiny"); /* video, 3D rotary, q/k RMSNorm across heads, norm2 */
    test_fixture("wan-vace", "wan-vace-tiny"); /* wan's with VACE's control branch: a second sequence's hints */
    test_fixture("anyflow", "wan-anyflow-tiny"); /* wan's with AnyFlow's delta embedder, r = t */
    test_fixture("anyflow-interval", "wan-anyflow-tiny"); /* its delta of t - r (= 0), gate 0.5 */
    test_fixture("ltxvideo", "ltxvideo-tiny"); /* video, RoPE over the whole width, RMSNorm block norms, the key mask */
    test_fixture("lumina2", "lumina2-tiny"); /* refiners, then joint rows laid out per caption length */
    test_fixture("boogu-image", "boogu-image-tiny"); /* lumina2's refiners, double-stream layers, then joint rows */
    test_fixture("z-image", "z-image-tiny"); /* lumina2's, image rows first, padded rows of learned tokens */
    test_fixture("ernie", "ernie-tiny"); /* lumina2's blocks without sandwich norms, one modulation for all */
    test_fixture("omnigen", "omnigen-tiny"); /* Phi-3 blocks on token ids, the time token and the image */
    test_fixture("omnigen-short", "omnigen-tiny"); /* the same within its original context: the short factors */
    test_fixture("krea2", "krea2-tiny"); /* a text fusion (layerwise, refiner), then gated joint blocks */
    test_fixture("flux3", "flux3-tiny"); /* per-mode blocks, then single blocks of two modulation sets */
    test_fixture("zlab_i1", "zlab-i1-tiny"); /* SimpleTuner's class: dual-stream blocks with long skips, a text adapter */
    test_fixture("qwen-image-2.1", "qwen-image-2.1-tiny"); /* block-causal joint rows, modulation from t and 0 */
    test_fixture("ideogram", "ideogram-tiny"); /* lumina2's blocks on [caption; image], MRoPE in halves */
    test_fixture("minimaxh3", "minimaxh3-tiny"); /* [text; video] packed, per-modality modulation, partial RoPE */
    test_fixture("cosmos3", "cosmos3-tiny"); /* mixture of transformers: prompt ids causal, the latents after them */
    test_fixture("sana", "sana-tiny"); /* linear self-attention, the cross-attention's own heads, GLUMBConv */
    test_fixture("sana-1.5", "sana-1.5-tiny"); /* the same with q and k RMSNorm-ed across the heads */
    test_fixture("sanavideo", "sanavideo-tiny"); /* Sana's over video: rotated linear attention, conv over frames */
    test_fixture("sd1x", "sd1x-tiny"); /* U-Net micro-blocks: ResnetBlock2D, Transformer2DModel, samplers, skips */
    test_fixture("sdxl", "sdxl-tiny"); /* the same with Linear projections, deeper transformers, size ids */
    test_fixture("kolors", "kolors-tiny"); /* SDXL's, reading the text through encoder_hid_proj */
    test_fixture("stable-cascade", "stable-cascade-tiny"); /* ResBlocks with GRN, timestep and attention blocks */
    test_anyflow_meanflow(); /* AnyFlow's objective: a target from the model's own central difference in t */
    each_shape(test_wan_animate); /* image-to-video inputs, the motion and face encoders, face adapters */
    each_shape(test_wan_s2v); /* SimpleTuner's class: reference tokens at t = 0, audio encoder and injectors */
    test_ace_step(); /* audio: GQA, a sliding window, SwiGLU, conv1d patches, the context latents */
    each_shape(test_ltx2); /* audio and video: six attentions a block, split RoPE, cross-modal rows */
    CHECKF(bf16_excepted == N_BF16_EXCEPTIONS, "%d of the %d known bf16 exceptions met: the list has a stale entry",
           bf16_excepted, N_BF16_EXCEPTIONS);
    return tk_finish();
}
