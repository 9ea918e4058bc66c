/* musubi_blocks_to_swap (docs/WEIGHTS.md): the last blocks' frozen weights in host memory, each block's brought onto
 * the device around its forward, recompute and backward. Under several checkpointing schedules, on dit, wan,
 * ltxvideo2, flux and auraflow (two block lists counted as one) with LoRA (float, bf16 and int8 bases), a LyCORIS
 * LoKr on pixart_sigma, and every other family it is built for: loss and every gradient bitwise equal to the same
 * model without swap; device and host peaks and the link's traffic (swapped weights in, offload out and back) as the
 * dry run predicts them, to the byte (peaks per tag), on dit-tiny for every precision x swap {0, 2} x schedule too;
 * the device holding one swapped block's weights at a time; and no swapped weight read outside its block's window
 * (the host copy is poisoned outside it). Refusals name the key and the reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/advise.h"
#include "segtrain/config.h"
#include "segtrain/executor.h"
#include "segtrain/lycoris.h"
#include "segtrain/model.h"
#include "segtrain/objective.h"
#include "testkit.h"
#include "testkit_batch.h"

static const char *const schedules[][2] = {
    {"none", "{}"},
    {"interval 1", "{\"gradient_checkpointing\": true}"},
    {"interval 2 stride 3",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 2, \"gradient_checkpointing_segment_stride\": 3}"},
    {"unsloth", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"unsloth\"}"},
    {"activation-offload", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_offload_attention\": true}"},
    {"torch-ffn", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"torch-ffn\"}"},
    {"unsloth-ffn", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"unsloth-ffn\"}"},
    {"seg2-stride4-offload",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 2, \"gradient_checkpointing_segment_stride\": 4, "
     "\"gradient_checkpointing_offload_attention\": true}"},
};

static ckpt_settings settings_of(const char *json)
{
    config *c = NULL;
    ckpt_settings cs = {0};
    st_status st = config_parse(json, "test.json", &c);
    if (!st) st = ckpt_settings_from(c, &cs);
    CHECKF(st == ST_OK, "%s: %s", json, st_error());
    config_free(c);
    return cs;
}

/* ---- poisoning: a swapped group's host copy holds NaN but while its block's weights are being brought in ---- */

#define SEQS 3 /* the most block sequences a model has */

typedef struct poison poison;
typedef struct poison_seq { /* one sequence's hooks, and the ones they wrap */
    poison *p;
    st_status (*in)(void *, int);
    void (*out)(void *, int);
    void *ctx;
} poison_seq;

struct poison {
    param_set *ps;
    uint8_t **saved; /* each group's true bytes */
    poison_seq seq[SEQS];
    int in_calls;
};

static void poison_all(poison *p)
{
    for (int g = 0; g < p->ps->n_swap; g++) memset(p->ps->swap[g].home, 0xff, p->ps->swap[g].bytes);
}

static st_status poisoned_in(void *ctx, int i)
{
    poison_seq *q = ctx;
    poison *p = q->p;
    for (int g = 0; g < p->ps->n_swap; g++) memcpy(p->ps->swap[g].home, p->saved[g], p->ps->swap[g].bytes);
    const st_status st = q->in(q->ctx, i);
    poison_all(p);
    p->in_calls += p->ps->swap_in != 0;
    return st;
}

static void poisoned_out(void *ctx, int i)
{
    poison_seq *q = ctx;
    q->out(q->ctx, i);
}

static void poison_begin(poison *p, model *m)
{
    block_seq *seqs;
    const int n = model_sequences(m, &seqs);
    *p = (poison){.ps = model_params(m)};
    p->saved = calloc((size_t)p->ps->n_swap, sizeof *p->saved);
    for (int g = 0; g < p->ps->n_swap; g++) {
        p->saved[g] = malloc(p->ps->swap[g].bytes);
        memcpy(p->saved[g], p->ps->swap[g].home, p->ps->swap[g].bytes);
    }
    poison_all(p);
    for (int q = 0; q < n && q < SEQS; q++) {
        if (!seqs[q].weights_in) continue;
        p->seq[q] = (poison_seq){.p = p, .in = seqs[q].weights_in, .out = seqs[q].weights_out, .ctx = seqs[q].weights_ctx};
        seqs[q].weights_in = poisoned_in, seqs[q].weights_out = poisoned_out, seqs[q].weights_ctx = &p->seq[q];
    }
}

static void poison_end(poison *p, model *m)
{
    block_seq *seqs;
    const int n = model_sequences(m, &seqs);
    for (int q = 0; q < n && q < SEQS; q++)
        if (p->seq[q].p)
            seqs[q].weights_in = p->seq[q].in, seqs[q].weights_out = p->seq[q].out, seqs[q].weights_ctx = p->seq[q].ctx;
    for (int g = 0; g < p->ps->n_swap; g++) {
        memcpy(p->ps->swap[g].home, p->saved[g], p->ps->swap[g].bytes);
        free(p->saved[g]);
    }
    free(p->saved);
}

/* ---- one step ---- */

typedef struct step {
    float loss;
    float *grads;
    int64_t n;
    size_t weights_live; /* device MEM_WEIGHTS before the step */
    size_t buffer_peak;  /* the largest swapped-block buffer seen */
} step;

static step run(const model_config *mc, const char *name, const char *json, const tk_batch *b)
{
    pool *dev = pool_create(POOL_DEVICE, 0), *host = pool_create(POOL_HOST, 0);
    model *m = NULL;
    st_status st = model_create(mc, dev, &m);
    if (!st) st = model_set_host_pool(m, host);
    if (!st) st = model_init(m, 17, true);
    const ckpt_settings cs = settings_of(json);
    if (!st) st = model_set_checkpointing(m, &cs, NULL, 0);
    CHECKF(st == ST_OK, "%s %s: %s", mc->family, name, st_error());
    step r = {0};
    if (st) return r;
    poison p;
    if (mc->blocks_to_swap) poison_begin(&p, m);
    pool_stats dry_dev, dry_host, got_dev, got_host;
    link_traffic dry_moved, before_moved;
    tk_dry_loss_moved(mc, &cs, b->n, &dry_dev, &dry_host, &dry_moved);
    link_traffic_read(m, &before_moved);
    pool_stats before;
    pool_get_stats(dev, &before);
    r.weights_live = before.live_by_tag[MEM_WEIGHTS];
    pool_reset_peak(dev);
    pool_reset_peak(host);
    const flow_batch fb = tk_flow(b);
    CHECKF(flow_loss(m, &fb, true, &r.loss) == ST_OK, "%s %s: %s", mc->family, name, st_error());
    pool_get_stats(dev, &got_dev);
    pool_get_stats(host, &got_host);
    r.buffer_peak = got_dev.peak_by_tag[MEM_WEIGHTS] - r.weights_live;
    const bool exact = got_dev.peak == dry_dev.peak && got_host.peak == dry_host.peak &&
                       !memcmp(got_dev.at_peak_by_tag, dry_dev.at_peak_by_tag, sizeof got_dev.at_peak_by_tag) &&
                       !memcmp(got_host.at_peak_by_tag, dry_host.at_peak_by_tag, sizeof got_host.at_peak_by_tag);
    CHECKF(exact, "%s swap %lld %s: device peak %zu host %zu measured, %zu and %zu predicted", mc->family,
           (long long)mc->blocks_to_swap, name, got_dev.peak, got_host.peak, dry_dev.peak, dry_host.peak);
    CHECKF(got_dev.live == before.live, "%s %s: the step leaves the device as it found it", mc->family, name);
    const link_traffic moved = link_traffic_since(m, &before_moved);
    CHECKF(!memcmp(&moved, &dry_moved, sizeof moved), "%s swap %lld %s: the link moved %zu in, %zu out, %zu back; the "
           "dry step counted %zu, %zu, %zu", mc->family, (long long)mc->blocks_to_swap, name, moved.swap_in,
           moved.offload_out, moved.offload_in, dry_moved.swap_in, dry_moved.offload_out, dry_moved.offload_in);
    CHECKF(!mc->blocks_to_swap == !moved.swap_in, "%s swap %lld %s: %zu bytes of swapped weights brought in",
           mc->family, (long long)mc->blocks_to_swap, name, moved.swap_in);
    if (mc->blocks_to_swap) {
        CHECKF(p.in_calls > 0, "%s %s: the swapped blocks' weights were never brought in", mc->family, name);
        poison_end(&p, m);
    }
    printf("%s %-8s swap %lld %-20s loss %.9g device peak %8zu host peak %8zu (weights %zu + buffer %zu)\n",
           exact ? "ok  " : "FAIL", mc->family, (long long)mc->blocks_to_swap, name, r.loss, got_dev.peak,
           got_host.peak, r.weights_live, r.buffer_peak);
    param_set *ps = model_params(m);
    r.n = ps->grad_count;
    r.grads = malloc((size_t)r.n * sizeof(float));
    memcpy(r.grads, ps->grads, (size_t)r.n * sizeof(float));
    model_destroy(m);
    CHECK(pool_destroy(dev) == 0 && pool_destroy(host) == 0);
    return r;
}

/* Every `every`-th schedule from `first` with the last `swap` blocks swapped against none without swap, bitwise. */
static void test_swap(model_config mc, const char *label, int64_t swap, size_t first, size_t every)
{
    tk_batch b = tk_random_batch(&mc, 2, 3);
    const step base = run(&mc, schedules[0][0], schedules[0][1], &b);
    mc.blocks_to_swap = swap;
    for (size_t i = first; i < sizeof schedules / sizeof *schedules; i += every) {
        const step r = run(&mc, schedules[i][0], schedules[i][1], &b);
        char what[160];
        snprintf(what, sizeof what, "%s swap %lld %s: gradients", label, (long long)swap, schedules[i][0]);
        CHECKF(!memcmp(&r.loss, &base.loss, sizeof r.loss), "%s: loss %.9g vs %.9g", what, r.loss, base.loss);
        CHECKF(r.n == base.n, "%s: %lld gradients vs %lld", what, (long long)r.n, (long long)base.n);
        if (r.n == base.n) tk_expect_bitwise(what, r.grads, base.grads, base.n);
        CHECKF(r.weights_live < base.weights_live, "%s: the device holds %zu bytes of weights, %zu without swap", what,
               r.weights_live, base.weights_live);
        CHECKF(r.buffer_peak > 0, "%s: no swapped block's weights were on the device", what);
        free(r.grads);
    }
    free(base.grads);
    tk_free_batch(&b);
}

static model_config lora_on(const char *preset, int64_t depth, quant_format q, bool bf16)
{
    model_config mc;
    CHECK(model_preset(preset, &mc) == ST_OK);
    if (depth) mc.depth = depth;
    mc.lora_rank = 4, mc.lora_alpha = 8, mc.lora_attention = mc.lora_mlp = true;
    mc.quant_base = q, mc.bf16_base = bf16, mc.bf16_activations = bf16;
    return mc;
}

static void test_bitwise(const char *preset, int64_t depth, int64_t swap, quant_format q, bool bf16)
{
    test_swap(lora_on(preset, depth, q, bf16), preset, swap, 0, 1);
}

/* LyCORIS's adapters stay on the device as LoRA's do: SimpleTuner's PixArt LoKr example on pixart-sigma-tiny. */
static void test_lycoris(void)
{
    model_config mc = lora_on("pixart-sigma-tiny", 3, QUANT_NONE, false);
    CHECKF(lycoris_spec_read(SEGTRAIN_SOURCE_DIR "/tests/fixtures/simpletuner/config/examples/pixart.lycoris-lokr/"
                             "lycoris_config.json", &mc.lycoris) == ST_OK, "%s", st_error());
    mc.lora_rank = 1, mc.lora_alpha = 1;
    test_swap(mc, "pixart-sigma-tiny lycoris lokr", 2, 0, 1);
}

/* Every family block swap is built for, on its tiny preset with LoRA: all of its blocks but one swapped (so both block
 * lists of a two-list family), under the schedules that recompute segments and offload attention (the families above
 * take all five). */
static void test_every_family(void)
{
    int families = 0;
    for (int i = 0; model_preset_name(i); i++) {
        const char *preset = model_preset_name(i);
        model_config mc;
        if (!strstr(preset, "-tiny") || model_preset(preset, &mc)) continue;
        mc = lora_on(preset, 0, QUANT_NONE, false);
        pool *dry = pool_create_dry(POOL_DEVICE, 0);
        model *m = NULL;
        const st_status st = model_create(&mc, dry, &m);
        const int swappable = st ? 0 : model_swappable_blocks(m);
        model_destroy(m);
        pool_destroy(dry);
        if (swappable < 2) continue;
        test_swap(mc, preset, swappable - 1, 2, 2);
        families++;
    }
    CHECKF(families >= 20, "block swap: %d families' tiny presets swap", families);
}

/* Issue 43's grid on dit-tiny: every precision x swap {0, 2} x the schedules above, each step's peaks and link
 * traffic as its dry run predicts them (run() checks both, to the byte). */
static void test_every_combination(void)
{
    static const struct {
        quant_format q;
        bool bf16;
    } precisions[] = {{QUANT_NONE, false}, {QUANT_NONE, true}, {QUANT_INT8, true}, {QUANT_FP8, true},
                      {QUANT_INT4, true}};
    for (size_t p = 0; p < sizeof precisions / sizeof *precisions; p++)
        for (int64_t swap = 0; swap <= 2; swap += 2) {
            model_config mc;
            CHECK(model_preset("dit-tiny", &mc) == ST_OK);
            mc.lora_rank = 4, mc.lora_alpha = 8, mc.lora_attention = mc.lora_mlp = true;
            mc.quant_base = precisions[p].q, mc.bf16_base = mc.bf16_activations = precisions[p].bf16;
            mc.blocks_to_swap = swap;
            tk_batch b = tk_random_batch(&mc, 2, 3);
            printf("mixed_precision %s, base_model_precision %s, swap %lld:\n", precisions[p].bf16 ? "bf16" : "no",
                   quant_name(precisions[p].q), (long long)swap);
            for (size_t i = 0; i < sizeof schedules / sizeof *schedules; i++)
                free(run(&mc, schedules[i][0], schedules[i][1], &b).grads);
            tk_free_batch(&b);
        }
}

static void expect_refused(const model_config *mc, const char *frag1, const char *frag2)
{
    pool *dev = pool_create_dry(POOL_DEVICE, 0);
    model *m = NULL;
    const st_status st = model_create(mc, dev, &m);
    CHECKF(st != ST_OK && strstr(st_error(), frag1) && strstr(st_error(), frag2), "%s swap %lld: %s", mc->family,
           (long long)mc->blocks_to_swap, st ? st_error() : "taken");
    model_destroy(m);
    pool_destroy(dev);
}

static void test_refusals(void)
{
    model_config mc;
    CHECK(model_preset("dit-tiny", &mc) == ST_OK);
    mc.lora_rank = 4, mc.lora_alpha = 4;
    mc.blocks_to_swap = 4;
    expect_refused(&mc, "musubi_blocks_to_swap", "at most 3 swap");
    mc.blocks_to_swap = 2, mc.lora_rank = 0;
    expect_refused(&mc, "musubi_blocks_to_swap", "full fine-tuning");
    CHECK(model_preset("mmdit-tiny", &mc) == ST_OK);
    mc.lora_rank = 4, mc.lora_alpha = 4, mc.blocks_to_swap = 1;
    expect_refused(&mc, "not built for the mmdit family", "not a SimpleTuner family");
    CHECK(model_preset("sdxl-tiny", &mc) == ST_OK);
    mc.lora_rank = 4, mc.lora_alpha = 4, mc.blocks_to_swap = 1;
    expect_refused(&mc, "not built for the sdxl family", "SimpleTuner's sdxl model streams none of its blocks");
    CHECK(model_preset("flux-tiny", &mc) == ST_OK);
    mc.lora_rank = 4, mc.lora_alpha = 4, mc.blocks_to_swap = 4;
    expect_refused(&mc, "transformer_blocks 2 + single_transformer_blocks 2", "at most 3 swap");
    /* the config keys */
    static const char *const refused[][3] = {
        {"{\"musubi_blocks_to_swap\": 2, \"musubi_block_swap_device\": \"cuda:0\"}", "musubi_block_swap_device", "cpu"},
        {"{\"ramtorch\": true}", "ramtorch", "not built"},
        {"{\"enable_group_offload\": true}", "enable_group_offload", "not built"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        config *c = NULL;
        st_status st = config_parse(refused[i][0], "test.json", &c);
        if (!st) st = model_config_from(c, &mc);
        CHECKF(st != ST_OK && strstr(st_error(), refused[i][1]) && strstr(st_error(), refused[i][2]), "%s: %s",
               refused[i][0], st ? st_error() : "taken");
        config_free(c);
    }
    config *c = NULL;
    CHECK(config_parse("{\"model_family\": \"dit\", \"lora_rank\": 4, \"musubi_blocks_to_swap\": 2, "
                       "\"musubi_block_swap_device\": \"cpu\", \"ramtorch\": false}", "test.json", &c) == ST_OK);
    CHECKF(model_config_from(c, &mc) == ST_OK && mc.blocks_to_swap == 2, "musubi_blocks_to_swap 2: %s", st_error());
    config_free(c);
}

int main(void)
{
    test_refusals();
    test_every_combination();
    test_bitwise("dit-tiny", 0, 2, QUANT_NONE, false);
    test_bitwise("dit-tiny", 0, 3, QUANT_INT8, true);
    test_bitwise("wan-tiny", 3, 2, QUANT_NONE, true);
    test_bitwise("ltxvideo2-tiny", 3, 2, QUANT_NONE, false);
    /* two block lists counted as one, as SimpleTuner counts Flux's: the last double-stream block and both single */
    test_bitwise("flux-tiny", 0, 3, QUANT_NONE, false);
    test_bitwise("flux-tiny", 0, 1, QUANT_INT8, true);
    test_bitwise("auraflow-tiny", 0, 3, QUANT_NONE, true);
    test_lycoris();
    test_every_family();
    return tk_finish();
}
