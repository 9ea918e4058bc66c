/* The DiT family end to end: loss and every gradient against an independent float64 PyTorch implementation
 * (tests/fixtures) at a square and a non-square input, against finite differences of the whole model's loss,
 * run-to-run determinism, DiT's initialisation, and errors that leave the pools as they were. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/model.h"
#include "segtrain/objective.h"
#include "segtrain/rng.h"
#include "segtrain/safetensors.h"
#include "testkit.h"
#include "testkit_batch.h"

#define FIXTURE(name) SEGTRAIN_SOURCE_DIR "/tests/fixtures/" name

/* The preset's model, at a latent of height x width (0: the preset's). */
static model *make_at(pool *p, const char *preset, attention_mechanism mech, int64_t height, int64_t width)
{
    model_config mc;
    model *m = NULL;
    CHECK(model_preset(preset, &mc) == ST_OK);
    mc.mechanism = mech;
    if (height) mc.height = height, mc.width = width;
    CHECKF(model_create(&mc, p, &m) == ST_OK, "%s", st_error());
    return m;
}

static model *make(pool *p, const char *preset, attention_mechanism mech) { return make_at(p, preset, mech, 0, 0); }

/* The batch and the reference's loss and gradients from their files (one file may hold both), at the size of the
 * batch's x0 */
static void test_against_pytorch(attention_mechanism mech, const char *batch_file, const char *grads_file)
{
    sft_file *bf, *gf;
    CHECKF(sft_open(batch_file, &bf) == ST_OK, "%s", st_error());
    CHECKF(sft_open(grads_file, &gf) == ST_OK, "%s", st_error());
    const sft_tensor *x0 = sft_find(bf, "x0");
    CHECK(x0 && x0->ndim == 4);
    printf("-- dit-tiny at %lld x %lld vs the float64 PyTorch reference (%s attention)\n", (long long)x0->shape[2],
           (long long)x0->shape[3], mech == ATTN_MATH ? "math" : "flash");
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_at(p, "dit-tiny", mech, x0->shape[2], x0->shape[3]);
    param_set *ps = model_params(m);
    CHECKF(param_set_load(ps, FIXTURE("dit_tiny_weights.safetensors"), PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    const model_config *mc = model_get_config(m);
    tk_batch b = tk_random_batch(mc, 3, 0);
    const int64_t img[4] = {3, mc->channels, mc->height, mc->width};
    CHECK(sft_read_f32(bf, "x0", 4, img, b.x0) == ST_OK && sft_read_f32(bf, "noise", 4, img, b.noise) == ST_OK);
    int64_t y[3];
    CHECK(sft_read_f32(bf, "t", 1, (int64_t[]){3}, b.t) == ST_OK && sft_read_i64(bf, "y", 1, (int64_t[]){3}, y) == ST_OK);
    for (int i = 0; i < 3; i++) b.y[i] = (float)y[i]; /* class indices as the conditioning holds them */

    param_set_zero_grads(ps);
    float loss = 0, want_loss = 0;
    flow_batch fb = tk_flow(&b);
    CHECKF(flow_loss(m, &fb, true, &loss) == ST_OK, "%s", st_error());
    CHECK(sft_read_f32(gf, "loss", 1, (int64_t[]){1}, &want_loss) == ST_OK);
    double want = want_loss;
    tk_expect_close("loss", &loss, &want, 1, 1e-5);
    for (int i = 0; i < ps->n; i++) {
        param *q = param_at(ps, i);
        if (!q->trainable) continue;
        float *ref = malloc((size_t)q->numel * sizeof(float));
        double *refd = malloc((size_t)q->numel * sizeof(double));
        CHECKF(sft_read_f32(gf, q->name, q->ndim, q->shape, ref) == ST_OK, "%s", st_error());
        tk_to_double(refd, ref, q->numel);
        /* fp32 against float64: 2e-4 of the tensor's largest gradient is far above rounding (~1e-6 here) and far
         * below any wrong term */
        tk_expect_close(q->name, q->g, refd, q->numel, 2e-4);
        free(refd), free(ref);
    }
    sft_close(gf), sft_close(bf);
    tk_free_batch(&b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

static double eval_loss(model *m, const tk_batch *b)
{
    const int64_t n = b->n * b->per;
    float *xt = malloc((size_t)n * sizeof(float)), *ts = malloc((size_t)b->n * sizeof(float));
    for (int64_t i = 0; i < b->n; i++) {
        ts[i] = 1000.0f * b->t[i];
        for (int64_t j = i * b->per; j < (i + 1) * b->per; j++) xt[j] = (1.0f - b->t[i]) * b->x0[j] + b->t[i] * b->noise[j];
    }
    const float *pred;
    double sum = 0;
    if (model_forward(m, xt, ts, b->y, b->n, false, &pred) == ST_OK) {
        for (int64_t j = 0; j < n; j++) {
            double e = (double)pred[j] - ((double)b->noise[j] - (double)b->x0[j]);
            sum += e * e;
        }
        model_release(m);
    }
    free(ts), free(xt);
    return sum / (double)n;
}

/* At a latent of height x width (0: the preset's). */
static void test_finite_differences(const char *preset, int64_t n, int64_t height, int64_t width)
{
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_at(p, preset, ATTN_FLASH, height, width);
    const model_config *mc = model_get_config(m);
    printf("-- %s at %lld x %lld: every weight's gradient against central differences of the whole model's loss\n",
           preset, (long long)mc->height, (long long)mc->width);
    model_init(m, 11, true);
    param_set *ps = model_params(m);
    tk_batch b = tk_random_batch(mc, n, 5);
    flow_batch fb = tk_flow(&b);
    float loss;
    param_set_zero_grads(ps);
    CHECK(flow_loss(m, &fb, true, &loss) == ST_OK);
    CHECKF(fabs(eval_loss(m, &b) - loss) < 1e-6 * loss, "the finite-difference loss is the objective's loss");
    for (int i = 0; i < ps->n; i++) {
        param *q = param_at(ps, i);
        if (!q->trainable) continue;
        /* the largest-gradient element and two seeded others */
        int64_t idx[3] = {0, (int64_t)(rng_u64(1, (uint64_t)i, 0) % (uint64_t)q->numel),
                          (int64_t)(rng_u64(1, (uint64_t)i, 1) % (uint64_t)q->numel)};
        double gmax = 0;
        for (int64_t j = 0; j < q->numel; j++)
            if (fabs(q->g[j]) > gmax) gmax = fabs(q->g[j]), idx[0] = j;
        double worst = 0;
        for (int k = 0; k < 3; k++) {
            float *w = &q->w[idx[k]], saved = *w;
            const float h = 1e-2f;
            *w = saved + h;
            double up = eval_loss(m, &b);
            *w = saved - h;
            double down = eval_loss(m, &b);
            *w = saved;
            double fd = (up - down) / (2.0 * (double)h);
            worst = fmax(worst, fabs(fd - q->g[idx[k]]));
        }
        /* fp32 forwards limit the differences to ~1e-5 absolute, and the step's truncation to ~1e-4 relative */
        bool ok = gmax > 0 && worst <= 1e-2 * gmax + 1e-5;
        printf("%s %-44s worst |fd - grad| %.2e of max |grad| %.2e\n", ok ? "ok  " : "FAIL", q->name, worst, gmax);
        CHECKF(ok, "%s: finite differences disagree", q->name);
    }
    tk_free_batch(&b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

static void test_determinism_and_memory(void)
{
    printf("-- the same seed gives the same bits; a step leaves only weights and gradients behind\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    model *a = make(p, "dit-tiny", ATTN_FLASH), *c = make(p, "dit-tiny", ATTN_FLASH);
    model_init(a, 42, true);
    model_init(c, 42, true);
    param_set *pa = model_params(a), *pc = model_params(c);
    tk_expect_bitwise("weights, two models of one seed", pa->weights, pc->weights, pa->weight_count);
    tk_batch b = tk_random_batch(model_get_config(a), 4, 9);
    flow_batch fb = tk_flow(&b);
    const size_t resident = pool_live(p);
    float la, lc;
    param_set_zero_grads(pa);
    param_set_zero_grads(pc);
    CHECK(flow_loss(a, &fb, true, &la) == ST_OK && flow_loss(c, &fb, true, &lc) == ST_OK);
    CHECK(memcmp(&la, &lc, sizeof la) == 0);
    tk_expect_bitwise("gradients, two runs", pa->grads, pc->grads, pa->grad_count);
    CHECKF(pool_live(p) == resident, "live %zu after a step, %zu before", pool_live(p), resident);
    pool_stats s;
    pool_get_stats(p, &s);
    CHECK(s.live_by_tag[MEM_ACTIVATIONS] == 0 && s.live_by_tag[MEM_WORKSPACE] == 0);

    /* DiT's own initialisation: adaLN-Zero and the fixed position table */
    model_init(a, 42, false);
    int zero = 1;
    for (int i = 0; i < pa->n; i++) {
        param *q = param_at(pa, i);
        if (strstr(q->name, "adaLN_modulation") || !strcmp(q->name, "final_layer.linear.weight") ||
            (q->ndim == 1 && q->trainable))
            for (int64_t j = 0; j < q->numel; j++) zero &= q->w[j] == 0.0f;
    }
    CHECKF(zero, "adaLN modulations, the final linear and every bias start at zero");
    const model_config *mc = model_get_config(a);
    const int64_t gh = mc->height / mc->patch, gw = mc->width / mc->patch;
    float *pos = malloc((size_t)(gh * gw * mc->hidden) * sizeof(float));
    pos_embed_2d(pos, gh, gw, mc->hidden);
    tk_expect_bitwise("pos_embed is the sine-cosine table", param_find(pa, "pos_embed")->w, pos, gh * gw * mc->hidden);
    free(pos);
    const param *qkv = param_find(pa, "blocks.0.attn.qkv.weight");
    float bound = (float)sqrt(6.0 / (64 + 192)), mx = 0;
    for (int64_t j = 0; j < qkv->numel; j++) mx = fmaxf(mx, fabsf(qkv->w[j]));
    CHECKF(mx <= bound && mx > 0.9f * bound, "xavier-uniform qkv: max %g, bound %g", mx, bound);

    tk_free_batch(&b);
    model_destroy(a);
    model_destroy(c);
    CHECK(pool_destroy(p) == 0);
}

static void test_errors_keep_pools_consistent(void)
{
    printf("-- errors are statuses and leave the pool as it was\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make(p, "dit-tiny", ATTN_MATH);
    model_init(m, 1, true);
    const model_config *mc = model_get_config(m);
    tk_batch b = tk_random_batch(mc, 2, 3);
    flow_batch fb = tk_flow(&b);
    const size_t resident = pool_live(p);
    float loss, again;
    param_set_zero_grads(model_params(m));
    CHECK(flow_loss(m, &fb, true, &loss) == ST_OK);
    const size_t step_peak = pool_peak(p);

    const int64_t label = b.y[1];
    b.y[1] = mc->classes + 1; /* past the null label */
    CHECK(flow_loss(m, &fb, true, &again) == ST_ERR_INVALID);
    CHECKF(strstr(st_error(), "labels") && strstr(st_error(), "11"), "%s", st_error());
    CHECK(pool_live(p) == resident);
    b.y[1] = label;

    /* every budget short of the step's peak fails cleanly somewhere in the step */
    int clean = 1;
    for (size_t cap = resident + 1; cap < step_peak; cap += (step_peak - resident) / 23 + 1) {
        pool_set_capacity(p, cap);
        st_status st = flow_loss(m, &fb, true, &again);
        clean &= st == ST_ERR_OOM && pool_live(p) == resident;
    }
    CHECKF(clean, "every budget below the peak gives ST_ERR_OOM and frees what the step took");
    pool_set_capacity(p, step_peak);
    param_set_zero_grads(model_params(m));
    CHECKF(flow_loss(m, &fb, true, &again) == ST_OK, "the step fits a budget of exactly its peak: %s", st_error());
    CHECK(memcmp(&loss, &again, sizeof loss) == 0);
    tk_free_batch(&b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    test_against_pytorch(ATTN_FLASH, FIXTURE("dit_tiny_batch.safetensors"), FIXTURE("dit_tiny_grads.safetensors"));
    test_against_pytorch(ATTN_MATH, FIXTURE("dit_tiny_batch.safetensors"), FIXTURE("dit_tiny_grads.safetensors"));
    test_against_pytorch(ATTN_FLASH, FIXTURE("dit_tiny_hw.safetensors"), FIXTURE("dit_tiny_hw.safetensors")); /* 8 x 12 */
    test_finite_differences("dit-tiny", 2, 0, 0);
    test_finite_differences("mmdit-tiny", 4, 8, 12); /* non-square: its rows and columns of positions */
    test_finite_differences("skipdit-tiny", 2, 8, 12); /* non-square: dit's embeddings and final layer, its skips */
    test_determinism_and_memory();
    test_errors_keep_pools_consistent();
    return tk_finish();
}
