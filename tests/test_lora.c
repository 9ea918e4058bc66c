/* LoRA: adapters named after the weights they adapt, the base frozen (no gradients, no optimizer state), an
 * adapter that starts as the identity, gradients against finite differences, and the checkpoint guarantees with
 * adapters in the blocks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "segtrain/model.h"
#include "segtrain/objective.h"
#include "segtrain/ops.h"
#include "segtrain/rng.h"
#include "segtrain/safetensors.h"
#include "testkit.h"
#include "testkit_batch.h"

static model_config lora_config(bool mlp)
{
    model_config mc;
    CHECK(model_preset("dit-tiny", &mc) == ST_OK);
    mc.lora_rank = 4;
    mc.lora_alpha = 8;
    mc.lora_attention = true;
    mc.lora_mlp = mlp;
    return mc;
}

typedef struct batch {
    flow_batch fb;
    float *x0, *noise;
} batch;

static batch make_batch(const model_config *mc, uint64_t seed)
{
    static float t[2] = {0.3f, 0.7f};
    static float y[2] = {2, 10};
    const int64_t n = 2 * mc->channels * mc->height * mc->width;
    batch b = {.x0 = malloc((size_t)n * sizeof(float)), .noise = malloc((size_t)n * sizeof(float))};
    rng_fill_normal(b.x0, n, seed, 1, 0, 1);
    rng_fill_normal(b.noise, n, seed, 2, 0, 1);
    b.fb = (flow_batch){.batch = 2, .x0 = b.x0, .noise = b.noise, .t = t, .cond = y, .grad_scale = 1.0f};
    return b;
}

static void test_structure_and_identity(void)
{
    printf("-- adapters, frozen base, identity at initialisation\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    model_config base_mc = lora_config(false), mc = lora_config(true);
    base_mc.lora_rank = 0;
    model *base, *m;
    CHECK(model_create(&base_mc, p, &base) == ST_OK && model_create(&mc, p, &m) == ST_OK);
    param_set *ps = model_params(m);
    int adapters = 0, trainable_base = 0;
    for (int i = 0; i < ps->n; i++) {
        const param *q = param_at(ps, i);
        adapters += strstr(q->name, ".lora_A.weight") || strstr(q->name, ".lora_B.weight");
        trainable_base += q->trainable && !strstr(q->name, ".lora_");
    }
    CHECKF(adapters == 4 * 4 * 2 && trainable_base == 0, "%d adapter tensors, %d trainable base tensors", adapters,
           trainable_base);
    const param *a = param_find(ps, "blocks.1.attn.qkv.lora_A.weight"), *bb = param_find(ps, "blocks.1.attn.qkv.lora_B.weight");
    CHECK(a && bb && a->shape[0] == 4 && a->shape[1] == 64 && bb->shape[0] == 192 && bb->shape[1] == 4);
    CHECK(param_find(ps, "blocks.3.mlp.fc2.lora_B.weight") != NULL && param_find(ps, "blocks.0.adaLN_modulation.1.lora_A.weight") == NULL);
    CHECK(param_find(ps, "blocks.0.attn.qkv.weight")->g == NULL);
    int64_t lora_floats = 0;
    for (int i = 0; i < ps->n; i++)
        if (strstr(param_at(ps, i)->name, ".lora_")) lora_floats += param_at(ps, i)->numel;
    CHECKF(ps->grad_count == lora_floats, "gradients only for the adapters: %lld floats", (long long)ps->grad_count);

    /* the same base weights, adapters from DiT's init (B = 0): the same predictions, bit for bit */
    model_init(base, 3, true);
    model_init(m, 3, false);
    param_set *bs = model_params(base);
    for (int i = 0; i < bs->n; i++) {
        const param *src = param_at(bs, i);
        memcpy(param_find(ps, src->name)->w, src->w, (size_t)src->numel * sizeof(float));
    }
    batch b = make_batch(&mc, 4);
    float l0, l1;
    CHECK(flow_loss(base, &b.fb, false, &l0) == ST_OK && flow_loss(m, &b.fb, false, &l1) == ST_OK);
    CHECKF(!memcmp(&l0, &l1, sizeof l0), "an adapter starts as the identity: loss %.9g vs %.9g", l0, l1);
    free(b.x0), free(b.noise);
    model_destroy(base);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

static double eval_loss(model *m, const flow_batch *fb)
{
    float l;
    return flow_loss(m, fb, false, &l) == ST_OK ? l : NAN;
}

static void test_gradients(void)
{
    printf("-- adapter gradients against central differences of the loss\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    model_config mc = lora_config(true);
    model *m;
    CHECK(model_create(&mc, p, &m) == ST_OK);
    model_init(m, 5, true); /* B non-zero too, so every adapter gradient is non-zero */
    param_set *ps = model_params(m);
    batch b = make_batch(&mc, 6);
    float loss;
    param_set_zero_grads(ps);
    CHECK(flow_loss(m, &b.fb, true, &loss) == ST_OK);
    for (int i = 0; i < ps->n; i++) {
        param *q = param_at(ps, i);
        if (!q->trainable) continue;
        double gmax = 0, worst = 0;
        int64_t at = 0;
        for (int64_t j = 0; j < q->numel; j++)
            if (fabs(q->g[j]) > gmax) gmax = fabs(q->g[j]), at = j;
        int64_t idx[2] = {at, (int64_t)(rng_u64(2, (uint64_t)i, 0) % (uint64_t)q->numel)};
        for (int k = 0; k < 2; k++) {
            float *w = &q->w[idx[k]], saved = *w, h = 1e-2f;
            *w = saved + h;
            double up = eval_loss(m, &b.fb);
            *w = saved - h;
            double down = eval_loss(m, &b.fb);
            *w = saved;
            worst = fmax(worst, fabs((up - down) / (2.0 * h) - q->g[idx[k]]));
        }
        /* the loss is a float: differences of ~1e-7 over 2h bound the error near 1e-5 */
        bool ok = gmax > 0 && worst <= 2e-2 * gmax + 2e-5;
        printf("%s %-40s worst |fd - grad| %.2e of max |grad| %.2e\n", ok ? "ok  " : "FAIL", q->name, worst, gmax);
        CHECKF(ok, "%s", q->name);
    }
    free(b.x0), free(b.noise);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* h3_drift's term (objective.h) on MiniMax-H3 with adapters: adapters at the identity leave the base's prediction the
 * model's, so the loss and every gradient are the flow loss's, bit for bit; adapters away from it give the distance
 * between two forwards (adapters on, then off), and gradients that match central differences. */
static void test_drift(void)
{
    printf("-- h3_drift on minimaxh3-tiny: the identity's bits, the distance, its gradients\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    model_config mc;
    CHECK(model_preset("minimaxh3-tiny", &mc) == ST_OK);
    mc.lora_rank = 4, mc.lora_alpha = 8, mc.lora_attention = mc.lora_mlp = true;
    model *m;
    CHECK(model_create(&mc, p, &m) == ST_OK);
    model_init(m, 3, false);
    param_set *ps = model_params(m);
    tk_batch tb = tk_random_batch(&mc, 2, 4);
    flow_batch fb = tk_flow(&tb);
    const drift_config half = {.sft_weight = 1.0, .weight = 0.5}, only = {.sft_weight = 0.0, .weight = 1.0};
    float l0, l1;
    float *g0 = malloc((size_t)ps->grad_count * sizeof(float));
    param_set_zero_grads(ps);
    CHECK(flow_loss(m, &fb, true, &l0) == ST_OK);
    memcpy(g0, ps->grads, (size_t)ps->grad_count * sizeof(float));
    fb.drift = &half;
    param_set_zero_grads(ps);
    CHECK(flow_loss(m, &fb, true, &l1) == ST_OK);
    CHECKF(isfinite(l0) && !memcmp(&l0, &l1, sizeof l0), "identity adapters: loss %.9g with the drift term, %.9g "
           "without", l1, l0);
    tk_expect_bitwise("identity adapters: gradients with the drift term", ps->grads, g0, ps->grad_count);

    model_init(m, 5, true); /* B non-zero: the adapters move the prediction */
    const int64_t per = model_sample_numel(&mc), n = 2 * per;
    float *xt = malloc((size_t)n * sizeof(float)), *target = malloc((size_t)n * sizeof(float)), ts[2];
    float *on = malloc((size_t)n * sizeof(float));
    flow_interpolate(xt, target, ts, tb.x0, tb.noise, tb.t, 2, per);
    const float *pred;
    CHECK(model_forward(m, xt, ts, tb.y, 2, false, &pred) == ST_OK);
    memcpy(on, pred, (size_t)n * sizeof(float));
    model_release(m);
    ps->adapters_off = true;
    CHECK(model_forward(m, xt, ts, tb.y, 2, false, &pred) == ST_OK);
    ps->adapters_off = false;
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += ((double)on[i] - pred[i]) * ((double)on[i] - pred[i]);
    want /= (double)n;
    model_release(m);
    fb.drift = &only;
    float got;
    param_set_zero_grads(ps);
    CHECK(flow_loss(m, &fb, true, &got) == ST_OK);
    CHECKF(want > 1e-4 && fabs(got - want) <= 1e-5 * want, "the drift term %.9g, the distance %.9g", got, want);
    printf("     the drift term %.6g, the distance of two forwards %.6g\n", got, want);
    int checked = 0;
    for (int i = 0; i < ps->n && checked < 6; i++) {
        param *q = param_at(ps, i);
        if (!q->trainable || (i % 5)) continue;
        int64_t at = 0;
        for (int64_t j = 0; j < q->numel; j++)
            if (fabs(q->g[j]) > fabs(q->g[at])) at = j;
        float *w = &q->w[at], saved = *w, h = 1e-2f;
        *w = saved + h;
        const double up = eval_loss(m, &fb);
        *w = saved - h;
        const double down = eval_loss(m, &fb);
        *w = saved;
        const double fd = (up - down) / (2.0 * h), err = fabs(fd - q->g[at]);
        const bool ok = q->g[at] != 0.0f && err <= 2e-2 * fabs(q->g[at]) + 2e-5;
        printf("%s %-48s fd %.5e grad %.5e\n", ok ? "ok  " : "FAIL", q->name, fd, q->g[at]);
        CHECKF(ok, "%s", q->name);
        checked++;
    }
    CHECK(checked == 6);
    free(xt), free(target), free(on), free(g0);
    tk_free_batch(&tb);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

static void test_checkpointing_with_adapters(void)
{
    printf("-- schedules with adapters: the same bits, the predicted peak\n");
    pool *p = pool_create(POOL_DEVICE, 0), *host = pool_create(POOL_HOST, 0);
    model_config mc = lora_config(true);
    model *m;
    CHECK(model_create(&mc, p, &m) == ST_OK && model_set_host_pool(m, host) == ST_OK);
    model_init(m, 8, true);
    param_set *ps = model_params(m);
    batch b = make_batch(&mc, 9);
    const ckpt_settings rows[] = {
        {.interval = 1, .stride = 1},
        {.enabled = true, .backend = BACKEND_TORCH, .interval = 2, .stride = 2},
        {.enabled = true, .backend = BACKEND_TORCH_FFN, .interval = 1, .stride = 1},
        {.enabled = true, .backend = BACKEND_UNSLOTH, .interval = 1, .stride = 1, .offload_attention = true},
    };
    float *base = malloc((size_t)ps->grad_count * sizeof(float));
    for (int r = 0; r < 4; r++) {
        CHECK(model_set_checkpointing(m, &rows[r], NULL, 0) == ST_OK);
        pool_stats dry, dry_host;
        tk_dry_loss(&mc, &rows[r], 2, &dry, &dry_host);
        param_set_zero_grads(ps);
        pool_reset_peak(p);
        float loss;
        CHECK(flow_loss(m, &b.fb, true, &loss) == ST_OK);
        CHECKF(pool_peak(p) == dry.peak, "row %d: measured %zu, predicted %zu", r, pool_peak(p), dry.peak);
        if (r == 0) memcpy(base, ps->grads, (size_t)ps->grad_count * sizeof(float));
        else tk_expect_bitwise("adapter gradients under a schedule", ps->grads, base, ps->grad_count);
    }
    free(base), free(b.x0), free(b.noise);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0 && pool_destroy(host) == 0);
}

/* Whether q is the base weight of an adapted linear (mixed_precision bf16 holds those in bf16, and the other frozen
 * linear weights). */
static bool adapted_base(param_set *ps, const param *q)
{
    char name[PARAM_NAME_MAX + 16];
    const size_t n = strlen(q->name);
    if (n < 7 || strcmp(q->name + n - 7, ".weight")) return false;
    snprintf(name, sizeof name, "%.*s.lora_A.weight", (int)(n - 7), q->name);
    return param_find(ps, name) != NULL;
}

/* mixed_precision bf16: frozen linear weights in bf16 (every adapted base among them), accounted at 2 bytes each,
 * and the arithmetic of the float model holding those values: loss and adapter gradients bit for bit under every
 * schedule, each peak as predicted; the weights saved as BF16 and read back unchanged. */
static void test_bf16_base(void)
{
    printf("-- mixed_precision bf16: the frozen base in bf16, the float model's bits on the rounded weights\n");
    pool *pf = pool_create(POOL_DEVICE, 0), *p = pool_create(POOL_DEVICE, 0), *host = pool_create(POOL_HOST, 0);
    model_config mc = lora_config(true), mc16 = mc;
    mc16.bf16_base = true;
    model *m, *m16;
    CHECK(model_create(&mc, pf, &m) == ST_OK && model_create(&mc16, p, &m16) == ST_OK);
    CHECK(model_set_host_pool(m, host) == ST_OK && model_set_host_pool(m16, host) == ST_OK);
    CHECK(model_init(m16, 11, true) == ST_OK);
    param_set *ps = model_params(m), *ps16 = model_params(m16);
    int64_t n16 = 0;
    int misplaced = 0;
    for (int i = 0; i < ps16->n; i++) {
        param *q = param_at(ps16, i), *f = param_find(ps, q->name);
        misplaced += (q->bf16 && (q->trainable || q->ndim != 2)) || (adapted_base(ps16, q) && !q->bf16) ||
                     (q->bf16 ? !q->w16 || q->w : !q->w || q->w16);
        n16 += q->bf16 ? q->numel : 0;
        if (q->bf16) bf16_to_float(f->w, q->w16, q->numel); /* exact: the float model holds the rounded values */
        else memcpy(f->w, q->w, (size_t)q->numel * sizeof(float));
    }
    CHECKF(!misplaced && n16 > 0, "%d parameters held in the wrong precision; %lld values in bf16", misplaced,
           (long long)n16);
    const param *qkv = param_find(ps16, "blocks.0.attn.qkv.weight");
    CHECK(qkv && qkv->bf16 && (qkv->w16[0] & 0x7fff) && (float)qkv->w16[0] != 0); /* random init reached it */

    const ckpt_settings rows[] = {
        {.interval = 1, .stride = 1},
        {.enabled = true, .backend = BACKEND_TORCH, .interval = 2, .stride = 2},
        {.enabled = true, .backend = BACKEND_UNSLOTH, .interval = 1, .stride = 1, .offload_attention = true},
    };
    batch b = make_batch(&mc, 12);
    float *want = malloc((size_t)ps->grad_count * sizeof(float));
    float loss, loss16;
    param_set_zero_grads(ps);
    CHECK(flow_loss(m, &b.fb, true, &loss) == ST_OK);
    memcpy(want, ps->grads, (size_t)ps->grad_count * sizeof(float));
    for (int r = 0; r < 3; r++) {
        pool_stats dry, dry16, dry_host;
        tk_dry_loss(&mc, &rows[r], 2, &dry, &dry_host);
        tk_dry_loss(&mc16, &rows[r], 2, &dry16, &dry_host);
        CHECKF(dry.at_peak_by_tag[MEM_WEIGHTS] - dry16.at_peak_by_tag[MEM_WEIGHTS] == 2 * (size_t)n16,
               "row %d: weights %zu in float, %zu with the base in bf16, for %lld bf16 values", r,
               dry.at_peak_by_tag[MEM_WEIGHTS], dry16.at_peak_by_tag[MEM_WEIGHTS], (long long)n16);
        CHECK(model_set_checkpointing(m16, &rows[r], NULL, 0) == ST_OK);
        param_set_zero_grads(ps16);
        pool_reset_peak(p);
        CHECK(flow_loss(m16, &b.fb, true, &loss16) == ST_OK);
        CHECKF(pool_peak(p) == dry16.peak, "row %d: measured %zu, predicted %zu", r, pool_peak(p), dry16.peak);
        CHECKF(!memcmp(&loss, &loss16, sizeof loss), "row %d: loss %.9g in bf16, %.9g in float", r, loss16, loss);
        tk_expect_bitwise("adapter gradients, bf16 base against float", ps16->grads, want, ps->grad_count);
    }

    /* saved as BF16, as torch saves a bf16 model; read back into a bf16 model unchanged, into a float one widened */
    char dir[] = "/tmp/segtrain-bf16-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *path = tk_path(dir, "base.safetensors");
    CHECK(param_set_save(ps16, path, PARAMS_ALL, false, NULL, 0, NULL, 0) == ST_OK);
    sft_file *f;
    CHECK(sft_open(path, &f) == ST_OK);
    CHECK(sft_find(f, "blocks.0.attn.qkv.weight")->dtype == SFT_BF16 &&
          sft_find(f, "blocks.0.attn.qkv.lora_A.weight")->dtype == SFT_F32);
    sft_close(f);
    model *back;
    CHECK(model_create(&mc16, pf, &back) == ST_OK);
    CHECK(param_set_load(model_params(back), path, PARAMS_ALL, NULL) == ST_OK);
    CHECK(!memcmp(model_params(back)->weights16, ps16->weights16, (size_t)n16 * sizeof(uint16_t)));
    CHECK(param_set_load(ps, path, PARAMS_ALL, NULL) == ST_OK);
    float first;
    bf16_to_float(&first, qkv->w16, 1);
    CHECK(!memcmp(&first, param_find(ps, "blocks.0.attn.qkv.weight")->w, sizeof first));
    unlink(path);
    rmdir(dir);
    model_destroy(back);

    free(want), free(b.x0), free(b.noise);
    model_destroy(m16);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0 && pool_destroy(pf) == 0 && pool_destroy(host) == 0);
}

/* Every preset with adapters on every linear, its adapted bases in bf16: a training step runs and its peak is the
 * predicted one. A model that read such a weight as float (param->w, NULL there) would crash here. */
static void test_bf16_every_family(void)
{
    printf("-- mixed_precision bf16 under LoRA in every family\n");
    const ckpt_settings layer = {.enabled = true, .backend = BACKEND_TORCH, .interval = 1, .stride = 1};
    int families = 0;
    for (int i = 0; model_preset_name(i); i++) {
        const char *name = model_preset_name(i);
        if (!strstr(name, "-tiny")) continue;
        model_config mc;
        CHECK(model_preset(name, &mc) == ST_OK);
        mc.lora_rank = 2, mc.lora_alpha = 2, mc.lora_attention = true, mc.lora_mlp = i % 2, mc.bf16_base = true;
        pool *p = pool_create(POOL_DEVICE, 0), *host = pool_create(POOL_HOST, 0);
        model *m;
        st_status st = model_create(&mc, p, &m);
        CHECKF(st == ST_OK, "%s: %s", name, st_error());
        if (st) {
            pool_destroy(p), pool_destroy(host);
            continue;
        }
        int64_t n16 = 0;
        for (int k = 0; k < model_params(m)->n; k++) n16 += param_at(model_params(m), k)->bf16;
        CHECK(model_set_host_pool(m, host) == ST_OK && model_set_checkpointing(m, &layer, NULL, 0) == ST_OK);
        CHECK(model_init(m, 1, true) == ST_OK);
        tk_batch b = tk_random_batch(&mc, 2, 3);
        flow_batch fb = tk_flow(&b);
        pool_stats dry, dry_host;
        tk_dry_loss(&mc, &layer, 2, &dry, &dry_host);
        pool_reset_peak(p);
        float loss;
        st = flow_loss(m, &fb, true, &loss);
        CHECKF(st == ST_OK && isfinite(loss) && pool_peak(p) == dry.peak && n16 > 0,
               "%s: %s, loss %g, peak %zu predicted %zu, %lld bf16 weights", name, st ? st_error() : "ok", loss,
               pool_peak(p), dry.peak, (long long)n16);
        tk_free_batch(&b);
        model_destroy(m);
        CHECK(pool_destroy(p) == 0 && pool_destroy(host) == 0);
        families++;
    }
    printf("   %d presets\n", families);
    CHECK(families >= 40);
}

int main(void)
{
    test_structure_and_identity();
    test_gradients();
    test_checkpointing_with_adapters();
    test_drift();
    test_bf16_base();
    test_bf16_every_family();
    return tk_finish();
}
