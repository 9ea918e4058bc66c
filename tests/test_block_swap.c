/* musubi_blocks_to_swap (docs/WEIGHTS.md): the last blocks' frozen weights in host memory, each block's brought onto
 * the device around its forward, recompute and backward. Under several checkpointing schedules, on dit, wan,
 * ltxvideo2, flux and auraflow (two block lists counted as one) with LoRA (float, bf16 and int8 bases), a LyCORIS
 * LoKr on pixart_sigma, and every other family it is built for: loss and every gradient bitwise equal to the same
 * model without swap; device and host peaks and the link's traffic (swapped weights in, offload out and back) as the
 * dry run predicts them, to the byte (peaks per tag), on dit-tiny for every precision x swap {0, 2} x schedule too;
 * the device holding one swapped block's weights at a time; and no swapped weight read outside its block's window
 * (the host copy is poisoned outside it). ramtorch the same way, a linear layer's weights brought in around each of
 * its GEMMs: every family's tiny preset, the dit-tiny grid, and SimpleTuner's selection (patterns, percent).
 * enable_group_offload likewise (diffusers' groups: blocks of each list, leaf layers, the rest for the step; a stream;
 * a file per group): every transformer family's tiny preset, the grid, the groups and their files. Refusals name the
 * key and the reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

#define SEQS 4 /* the most block sequences a model has (internal.h's MODEL_SEQ_MAX) */

typedef struct poison poison;
typedef struct poison_seq { /* one sequence's hooks (or lin.c's), and the ones they wrap */
    poison *p;
    st_status (*in)(void *, int, int);
    void (*out)(void *, int, int);
    st_status (*layer_in)(void *, int);
    void (*layer_out)(void *, int);
    void *ctx;
} poison_seq;

struct poison {
    param_set *ps;
    uint8_t **saved; /* each group's true bytes */
    poison_seq seq[SEQS];
    poison_seq layers; /* ramtorch: lin.c's hooks around each streamed layer's GEMMs */
    int in_calls;
};

/* Every group held in host memory but group offload's rest (on the device for the whole step) and a group on its
 * way in (use_stream's prefetch: the copy engine reads its home after the hook returns) is poisoned. */
static bool poisoned_group(const poison *p, int g)
{
    return p->ps->swap[g].home && g + 1 != p->ps->step_group && !p->ps->swap[g].job;
}

static void poison_all(poison *p)
{
    for (int g = 0; g < p->ps->n_swap; g++)
        if (poisoned_group(p, g)) memset(p->ps->swap[g].home, 0xff, p->ps->swap[g].bytes);
}

static void unpoison_all(poison *p)
{
    for (int g = 0; g < p->ps->n_swap; g++)
        if (poisoned_group(p, g)) memcpy(p->ps->swap[g].home, p->saved[g], p->ps->swap[g].bytes);
}

static st_status poisoned_in(void *ctx, int i, int next)
{
    poison_seq *q = ctx;
    unpoison_all(q->p);
    const st_status st = q->in(q->ctx, i, next);
    poison_all(q->p);
    q->p->in_calls += q->p->ps->swap_in != 0;
    return st;
}

static void poisoned_out(void *ctx, int i, int next)
{
    poison_seq *q = ctx;
    q->out(q->ctx, i, next);
}

static st_status poisoned_layer_in(void *ctx, int g)
{
    poison_seq *q = ctx;
    unpoison_all(q->p);
    const st_status st = q->layer_in(q->ctx, g);
    poison_all(q->p);
    q->p->in_calls += q->p->ps->swap_in != 0;
    return st;
}

static void poisoned_layer_out(void *ctx, int g)
{
    poison_seq *q = ctx;
    q->layer_out(q->ctx, g);
}

static void poison_begin(poison *p, model *m)
{
    block_seq *seqs;
    const int n = model_sequences(m, &seqs);
    CHECKF(n <= SEQS, "%d block sequences, the poison wraps %d", n, SEQS);
    *p = (poison){.ps = model_params(m)};
    p->saved = calloc((size_t)p->ps->n_swap, sizeof *p->saved);
    for (int g = 0; g < p->ps->n_swap; g++) {
        if (!poisoned_group(p, g)) continue;
        p->saved[g] = malloc(p->ps->swap[g].bytes);
        memcpy(p->saved[g], p->ps->swap[g].home, p->ps->swap[g].bytes);
    }
    poison_all(p);
    for (int q = 0; q < n && q < SEQS; q++) {
        if (!seqs[q].weights_in) continue;
        p->seq[q] = (poison_seq){.p = p, .in = seqs[q].weights_in, .out = seqs[q].weights_out, .ctx = seqs[q].weights_ctx};
        seqs[q].weights_in = poisoned_in, seqs[q].weights_out = poisoned_out, seqs[q].weights_ctx = &p->seq[q];
    }
    param_set *ps = p->ps;
    if (!ps->layer_in) return;
    p->layers = (poison_seq){.p = p, .layer_in = ps->layer_in, .layer_out = ps->layer_out, .ctx = ps->layer_ctx};
    ps->layer_in = poisoned_layer_in, ps->layer_out = poisoned_layer_out, ps->layer_ctx = &p->layers;
}

static void poison_end(poison *p, model *m)
{
    block_seq *seqs;
    const int n = model_sequences(m, &seqs);
    for (int q = 0; q < n && q < SEQS; q++)
        if (p->seq[q].p)
            seqs[q].weights_in = p->seq[q].in, seqs[q].weights_out = p->seq[q].out, seqs[q].weights_ctx = p->seq[q].ctx;
    if (p->layers.p)
        p->ps->layer_in = p->layers.layer_in, p->ps->layer_out = p->layers.layer_out, p->ps->layer_ctx = p->layers.ctx;
    unpoison_all(p);
    for (int g = 0; g < p->ps->n_swap; g++) free(p->saved[g]);
    free(p->saved);
}

/* ---- one step ---- */

typedef struct step {
    float loss;
    float *grads;
    int64_t n;
    size_t weights_live; /* device MEM_WEIGHTS before the step */
    size_t buffer_peak;  /* the largest swapped-block (or streamed-layer) buffer seen */
} step;

/* Where mc keeps its frozen weights, for the lines: "swap 2", "ramtorch blocks.0.* 50%", "group offload block 2
 * stream disk" or "swap 0". */
static const char *where_held(const model_config *mc, char *buf, size_t n)
{
    if (mc->ramtorch) snprintf(buf, n, "ramtorch %s %g%%", *mc->ramtorch_targets ? mc->ramtorch_targets : "*",
                               mc->ramtorch_percent);
    else if (mc->group_offload)
        snprintf(buf, n, "group offload %s %lld%s%s", mc->group_offload_leaf ? "leaf" : "block",
                 (long long)mc->group_offload_blocks, mc->group_offload_stream ? " stream" : "",
                 mc->group_offload_dir[0] ? " disk" : "");
    else snprintf(buf, n, "swap %lld", (long long)mc->blocks_to_swap);
    return buf;
}

/* The dry step's peaks (per tag) and link traffic against the step's, to the byte. */
static bool check_as_dry(const model_config *mc, const char *where, const pool_stats *dev, const pool_stats *host,
                         const pool_stats *dry_dev, const pool_stats *dry_host, const link_traffic *moved,
                         const link_traffic *dry_moved)
{
    const bool exact = dev->peak == dry_dev->peak && host->peak == dry_host->peak &&
                       !memcmp(dev->at_peak_by_tag, dry_dev->at_peak_by_tag, sizeof dev->at_peak_by_tag) &&
                       !memcmp(host->at_peak_by_tag, dry_host->at_peak_by_tag, sizeof host->at_peak_by_tag);
    CHECKF(exact, "%s: device peak %zu host %zu measured, %zu and %zu predicted", where, dev->peak, host->peak,
           dry_dev->peak, dry_host->peak);
    CHECKF(!memcmp(moved, dry_moved, sizeof *moved), "%s: the link moved %zu in, %zu out, %zu back; the dry step "
           "counted %zu, %zu, %zu", where, moved->swap_in, moved->offload_out, moved->offload_in, dry_moved->swap_in,
           dry_moved->offload_out, dry_moved->offload_in);
    const bool streams = mc->blocks_to_swap || (mc->ramtorch && mc->ramtorch_percent > 0) || mc->group_offload;
    CHECKF(!streams == !moved->swap_in, "%s: %zu bytes of host-held weights brought in", where, moved->swap_in);
    return exact;
}

static step run(const model_config *mc, const char *name, const char *json, const tk_batch *b)
{
    pool *dev = pool_create(POOL_DEVICE, 0), *host = pool_create(POOL_HOST, 0);
    model *m = NULL;
    st_status st = model_create(mc, dev, &m);
    if (!st) st = model_set_host_pool(m, host);
    if (!st) st = model_init(m, 17, true);
    if (!st) st = model_spill_weights(m); /* group_offload_to_disk_path: as the trainer, once the weights are made */
    const ckpt_settings cs = settings_of(json);
    if (!st) st = model_set_checkpointing(m, &cs, NULL, 0);
    char where[RAMTORCH_TARGETS_MAX + 128], placed[RAMTORCH_TARGETS_MAX + 32];
    snprintf(where, sizeof where, "%s %s %s", mc->family, where_held(mc, placed, sizeof placed), name);
    CHECKF(st == ST_OK, "%s: %s", where, st_error());
    step r = {0};
    if (st) return r;
    poison p;
    const bool poisoned = model_params(m)->n_swap > 0;
    if (poisoned) poison_begin(&p, m);
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
    CHECKF(flow_loss(m, &fb, true, &r.loss) == ST_OK, "%s: %s", where, st_error());
    pool_get_stats(dev, &got_dev);
    pool_get_stats(host, &got_host);
    r.buffer_peak = got_dev.peak_by_tag[MEM_WEIGHTS] - r.weights_live;
    CHECKF(got_dev.live == before.live, "%s: the step leaves the device as it found it", where);
    const link_traffic moved = link_traffic_since(m, &before_moved);
    const bool exact = check_as_dry(mc, where, &got_dev, &got_host, &dry_dev, &dry_host, &moved, &dry_moved);
    if (poisoned) {
        CHECKF(p.in_calls > 0, "%s: the host-held weights were never brought in", where);
        poison_end(&p, m);
    }
    printf("%s %-8s %-24s %-20s loss %.9g device peak %8zu host peak %8zu (weights %zu + buffer %zu)\n",
           exact ? "ok  " : "FAIL", mc->family, placed, name, r.loss, got_dev.peak, got_host.peak, r.weights_live,
           r.buffer_peak);
    param_set *ps = model_params(m);
    r.n = ps->grad_count;
    r.grads = malloc((size_t)r.n * sizeof(float));
    memcpy(r.grads, ps->grads, (size_t)r.n * sizeof(float));
    model_destroy(m);
    CHECK(pool_destroy(dev) == 0 && pool_destroy(host) == 0);
    return r;
}

/* A placement of the weights, and its schedules: every `every`-th from `first`. */
typedef struct placed_as {
    model_config mc;
    size_t first, every;
} placed_as;

/* Schedule i with placed's weights against base, mc's step with every weight on the device: bitwise. */
static void check_placed(const model_config *placed, const char *label, size_t i, const step *base, const tk_batch *b)
{
    char where[RAMTORCH_TARGETS_MAX + 32], what[RAMTORCH_TARGETS_MAX + 256];
    where_held(placed, where, sizeof where);
    const step r = run(placed, schedules[i][0], schedules[i][1], b);
    snprintf(what, sizeof what, "%s %s %s: gradients", label, where, schedules[i][0]);
    CHECKF(!memcmp(&r.loss, &base->loss, sizeof r.loss), "%s: loss %.9g vs %.9g", what, r.loss, base->loss);
    CHECKF(r.n == base->n, "%s: %lld gradients vs %lld", what, (long long)r.n, (long long)base->n);
    if (r.n == base->n) tk_expect_bitwise(what, r.grads, base->grads, base->n);
    CHECKF(r.weights_live < base->weights_live, "%s: the device holds %zu bytes of weights, %zu on the device", what,
           r.weights_live, base->weights_live);
    CHECKF(r.buffer_peak > 0, "%s: no host-held weights were on the device", what);
    free(r.grads);
}

/* Whether mc's family takes schedule i (U-ViT's skips refuse unsloth's host boundaries and feed-forward inputs). */
static bool schedule_taken(const model_config *mc, size_t i)
{
    pool *dry = pool_create_dry(POOL_DEVICE, 0);
    model *m = NULL;
    const ckpt_settings cs = settings_of(schedules[i][1]);
    const bool taken = !model_create(mc, dry, &m) && !model_set_checkpointing(m, &cs, NULL, 0);
    model_destroy(m);
    pool_destroy(dry);
    return taken;
}

/* Each placement's schedules against one step of mc on the device (the placements of every family share it). */
static void test_placements(model_config mc, const placed_as *p, int n, const char *label)
{
    tk_batch b = tk_random_batch(&mc, 2, 3);
    const step base = run(&mc, schedules[0][0], schedules[0][1], &b);
    for (int k = 0; k < n; k++)
        for (size_t i = p[k].first; i < sizeof schedules / sizeof *schedules; i += p[k].every)
            if (schedule_taken(&mc, i)) check_placed(&p[k].mc, label, i, &base, &b);
    free(base.grads);
    tk_free_batch(&b);
}

static void test_placed(model_config mc, model_config placed, const char *label, size_t first, size_t every)
{
    test_placements(mc, &(placed_as){placed, first, every}, 1, label);
}

/* The last `swap` blocks swapped. */
static void test_swap(model_config mc, const char *label, int64_t swap, size_t first, size_t every)
{
    model_config placed = mc;
    placed.blocks_to_swap = swap;
    test_placed(mc, placed, label, first, every);
}

/* ramtorch: the linear layers targets selects (NULL: all), percent of them, streamed. */
static void test_ramtorch(model_config mc, const char *label, const char *targets, double percent, size_t first,
                          size_t every)
{
    model_config placed = mc;
    placed.ramtorch = true, placed.ramtorch_percent = percent;
    snprintf(placed.ramtorch_targets, sizeof placed.ramtorch_targets, "%s", targets ? targets : "");
    test_placed(mc, placed, label, first, every);
}

/* enable_group_offload: block_level with per blocks a group (0: leaf_level), use_stream, a file per group under a
 * fresh folder. */
static model_config group_offload_of(model_config mc, int per, bool stream, bool disk)
{
    mc.group_offload = true, mc.group_offload_leaf = per == 0, mc.group_offload_blocks = per ? per : 1;
    mc.group_offload_stream = stream;
    char dir[] = "/tmp/segtrain-groups-XXXXXX";
    if (disk) CHECK(mkdtemp(dir) != NULL);
    snprintf(mc.group_offload_dir, sizeof mc.group_offload_dir, "%s", disk ? dir : "");
    return mc;
}

static void test_group_offload(model_config mc, const char *label, int per, bool stream, bool disk, size_t first,
                               size_t every)
{
    model_config placed = group_offload_of(mc, per, stream, disk);
    test_placed(mc, placed, label, first, every);
    if (!disk) return;
    char cmd[GROUP_OFFLOAD_PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -r '%s'", placed.group_offload_dir);
    CHECK(system(cmd) == 0);
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
    test_ramtorch(mc, "pixart-sigma-tiny lycoris lokr", NULL, 100, 0, 2);
    test_group_offload(mc, "pixart-sigma-tiny lycoris lokr", 1, false, false, 1, 2);
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
        if (st) continue;
        /* every layer streamed, under interval 2 stride 3 (recompute; offload's schedules some families refuse); group
         * offload's groups of two blocks (U-Nets: refused); all blocks but one swapped */
        placed_as p[3] = {{mc, 2, 8}};
        int n = 1;
        p[0].mc.ramtorch = true, p[0].mc.ramtorch_percent = 100;
        if (strncmp(preset, "sd", 2) && !strstr(preset, "kolors") && !strstr(preset, "cascade"))
            p[n++] = (placed_as){group_offload_of(mc, 2, false, false), 2, 8};
        if (swappable >= 2) p[n] = (placed_as){mc, 2, 2}, p[n++].mc.blocks_to_swap = swappable - 1, families++;
        test_placements(mc, p, n, preset);
    }
    CHECKF(families >= 20, "block swap: %d families' tiny presets swap", families);
}

/* ---- ramtorch's selection (SimpleTuner's _matches_pattern and percentage mode) ---- */

/* The layers mc streams, -1 when refused; *first: the name of group 1's weight. */
static int streamed_layers(const model_config *mc, char *first, size_t n)
{
    pool *dry = pool_create_dry(POOL_DEVICE, 0);
    model *m = NULL;
    int count = -1;
    if (!model_create(mc, dry, &m)) {
        const param_set *ps = model_params(m);
        count = ps->n_swap;
        for (int i = ps->n - 1; i >= 0; i--)
            if (ps->items[i].swap_group == 1) snprintf(first, n, "%s", ps->items[i].name);
    }
    model_destroy(m);
    pool_destroy(dry);
    return count;
}

static int streamed_of(model_config mc, const char *targets, double percent, char *first)
{
    mc.ramtorch = true, mc.ramtorch_percent = percent;
    snprintf(mc.ramtorch_targets, sizeof mc.ramtorch_targets, "%s", targets);
    first[0] = 0;
    return streamed_layers(&mc, first, PARAM_NAME_MAX);
}

static void test_selection(void)
{
    model_config mc = lora_on("dit-tiny", 0, QUANT_NONE, false);
    char first[PARAM_NAME_MAX];
    const int all = streamed_of(mc, "", 100, first); /* dit-tiny: 4 blocks of 5 linear layers, registered first */
    CHECKF(all == 20 && !strcmp(first, "blocks.0.attn.qkv.weight"), "ramtorch: %d layers, the first %s", all, first);
    static const struct {
        const char *targets;
        double percent;
        int layers;
    } cases[] = {
        {"blocks.0", 100, 5},            /* a name without glob characters: the modules under it */
        {"blocks.0.*", 100, 5},          /* SimpleTuner's recommended form */
        {"transformer.blocks.0.*", 100, 5}, /* the name under the component */
        {"blocks.0.attn.qkv", 100, 1},   /* one module */
        {" blocks.0.* , ,blocks.3.* ", 100, 10}, /* entries trimmed, blank ones skipped */
        {"Linear", 100, 20},             /* the class */
        {"*.mlp.*", 100, 8},             /* '*' crosses dots */
        {"blocks.?.attn.*", 50, 4},      /* ceil(8 x 50 / 100) */
        {"", 12.5, 3},                   /* ceil(20 x 12.5 / 100) */
        {"", 0.001, 1},                  /* at least one above 0 */
        {"", 0, 0},                      /* none */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int got = streamed_of(mc, cases[i].targets, cases[i].percent, first);
        CHECKF(got == cases[i].layers, "ramtorch_target_modules \"%s\" at %g%%: %d layers, %d expected",
               cases[i].targets, cases[i].percent, got, cases[i].layers);
    }
    CHECKF(streamed_of(mc, "blocks.1*", 100, first) == 5 && !strcmp(first, "blocks.1.attn.qkv.weight"),
           "ramtorch: blocks.1* streams from %s", first);
    /* under a quantized base SimpleTuner streams quanto's QLinear modules */
    mc = lora_on("dit-tiny", 0, QUANT_INT8, true);
    const int qlinear = streamed_of(mc, "QLinear", 100, first), linear = streamed_of(mc, "Linear", 100, first);
    CHECKF(qlinear == 20 && linear == -1, "ramtorch under int8-quanto: %d QLinear layers, %d Linear", qlinear, linear);
}

/* Issue 43's grid on dit-tiny: every precision x {swap 0, swap 2, ramtorch 50%} x the schedules above, each step's peaks and link
 * traffic as its dry run predicts them (run() checks both, to the byte). */
static void test_every_combination(void)
{
    static const struct {
        quant_format q;
        bool bf16;
    } precisions[] = {{QUANT_NONE, false}, {QUANT_NONE, true}, {QUANT_INT8, true}, {QUANT_FP8, true},
                      {QUANT_INT4, true}};
    for (size_t p = 0; p < sizeof precisions / sizeof *precisions; p++)
        for (int placed = 0; placed < 4; placed++) { /* on the device, the last 2 blocks swapped, ramtorch's half,
                                                        group offload's pairs of blocks */
            model_config mc;
            CHECK(model_preset("dit-tiny", &mc) == ST_OK);
            mc.lora_rank = 4, mc.lora_alpha = 8, mc.lora_attention = mc.lora_mlp = true;
            mc.quant_base = precisions[p].q, mc.bf16_base = mc.bf16_activations = precisions[p].bf16;
            mc.blocks_to_swap = placed == 1 ? 2 : 0;
            mc.ramtorch = placed == 2, mc.ramtorch_percent = 50;
            if (placed == 3) mc = group_offload_of(mc, 2, false, false);
            tk_batch b = tk_random_batch(&mc, 2, 3);
            char where[RAMTORCH_TARGETS_MAX + 32];
            printf("mixed_precision %s, base_model_precision %s, %s:\n", precisions[p].bf16 ? "bf16" : "no",
                   quant_name(precisions[p].q), where_held(&mc, where, sizeof where));
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
    char where[RAMTORCH_TARGETS_MAX + 32];
    CHECKF(st != ST_OK && strstr(st_error(), frag1) && strstr(st_error(), frag2), "%s %s: %s", mc->family,
           where_held(mc, where, sizeof where), st ? st_error() : "taken");
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
    CHECK(model_preset("sdxl-tiny", &mc) == ST_OK);
    mc.lora_rank = 4, mc.lora_alpha = 4;
    mc = group_offload_of(mc, 1, false, false);
    expect_refused(&mc, "enable_group_offload", "only supported for transformer-based models");
    CHECK(model_preset("dit-tiny", &mc) == ST_OK);
    mc = group_offload_of(mc, 1, false, false);
    expect_refused(&mc, "enable_group_offload", "full fine-tuning");
    /* the config keys */
    static const char *const refused[][3] = {
        {"{\"musubi_blocks_to_swap\": 2, \"musubi_block_swap_device\": \"cuda:0\"}", "musubi_block_swap_device", "cpu"},
        {"{\"enable_group_offload\": true, \"musubi_blocks_to_swap\": 2}", "enable_group_offload cannot be used "
         "together with musubi_blocks_to_swap", "pick one"},
        {"{\"enable_group_offload\": true, \"group_offload_type\": \"module_level\"}", "group_offload_type",
         "block_level"},
        {"{\"enable_group_offload\": true, \"group_offload_blocks_per_group\": 0}", "group_offload_blocks_per_group",
         "1"},
        {"{\"ramtorch\": true, \"musubi_blocks_to_swap\": 2}", "ramtorch is incompatible with musubi_blocks_to_swap",
         "set musubi_blocks_to_swap=0 or ramtorch=false"},
        {"{\"ramtorch\": true, \"enable_group_offload\": true}", "ramtorch cannot be used together with "
         "enable_group_offload", "pick one"},
        {"{\"ramtorch\": true, \"ramtorch_transformer_percent\": 101}", "ramtorch_transformer_percent", "100"},
        {"{\"ramtorch\": true, \"ramtorch_transformer_percent\": -1}", "ramtorch_transformer_percent", "0"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        config *c = NULL;
        st_status st = config_parse(refused[i][0], "test.json", &c);
        if (!st) st = model_config_from(c, &mc);
        CHECKF(st != ST_OK && strstr(st_error(), refused[i][1]) && strstr(st_error(), refused[i][2]), "%s: %s",
               refused[i][0], st ? st_error() : "taken");
        config_free(c);
    }
    CHECK(model_preset("dit-tiny", &mc) == ST_OK);
    mc.lora_rank = 4, mc.lora_alpha = 4, mc.ramtorch = true, mc.ramtorch_percent = 100;
    snprintf(mc.ramtorch_targets, sizeof mc.ramtorch_targets, "transformer_blocks.*");
    expect_refused(&mc, "ramtorch_target_modules \"transformer_blocks.*\" selects none of the dit model's linear layers",
                   "such as blocks.0.attn.qkv or transformer.blocks.0.attn.qkv");
    mc.ramtorch_targets[0] = 0, mc.lora_rank = 0;
    expect_refused(&mc, "ramtorch: blocks.0.attn.qkv.weight trains (full fine-tuning)", "ramtorch_target_modules");
    mc.ramtorch_percent = 0; /* nothing streams: full fine-tuning is taken */
    char first[PARAM_NAME_MAX];
    CHECKF(streamed_layers(&mc, first, sizeof first) == 0, "ramtorch at 0%%: %s", st_error());
    config *c = NULL;
    CHECK(config_parse("{\"model_family\": \"dit\", \"lora_rank\": 4, \"musubi_blocks_to_swap\": 2, "
                       "\"musubi_block_swap_device\": \"cpu\", \"ramtorch\": false}", "test.json", &c) == ST_OK);
    CHECKF(model_config_from(c, &mc) == ST_OK && mc.blocks_to_swap == 2, "musubi_blocks_to_swap 2: %s", st_error());
    config_free(c);
    CHECK(config_parse("{\"model_family\": \"dit\", \"lora_rank\": 4, \"ramtorch\": true, "
                       "\"ramtorch_target_modules\": \"None\", \"ramtorch_transformer_percent\": 40}", "test.json",
                       &c) == ST_OK);
    CHECKF(model_config_from(c, &mc) == ST_OK && mc.ramtorch && !mc.ramtorch_targets[0] && mc.ramtorch_percent == 40,
           "ramtorch with None targets at 40%%: %s", st_error());
    config_free(c);
    /* SimpleTuner's rules: no stream under gradient checkpointing; diffusers': one block a group with a stream */
    CHECK(config_parse("{\"model_family\": \"dit\", \"lora_rank\": 4, \"enable_group_offload\": true, "
                       "\"group_offload_use_stream\": true, \"group_offload_blocks_per_group\": 3, "
                       "\"gradient_checkpointing\": true}", "test.json", &c) == ST_OK);
    CHECKF(model_config_from(c, &mc) == ST_OK && mc.group_offload && !mc.group_offload_leaf &&
           !mc.group_offload_stream && mc.group_offload_blocks == 3, "group offload under checkpointing: %s", st_error());
    config_free(c);
    CHECK(config_parse("{\"model_family\": \"dit\", \"lora_rank\": 4, \"enable_group_offload\": true, "
                       "\"group_offload_use_stream\": true, \"group_offload_blocks_per_group\": 3, "
                       "\"group_offload_to_disk_path\": \"~/groups\"}", "test.json", &c) == ST_OK);
    CHECKF(model_config_from(c, &mc) == ST_OK && mc.group_offload_stream && mc.group_offload_blocks == 1 &&
           mc.group_offload_dir[0] != '~' && strstr(mc.group_offload_dir, "/groups"), "group offload with a stream: "
           "%lld blocks a group, folder %s", (long long)mc.group_offload_blocks, mc.group_offload_dir);
    config_free(c);
}

/* diffusers' groups on dit-tiny (4 blocks): block_level 3 a group makes blocks_0_2, blocks_3_3 and the rest;
 * leaf_level a group a frozen linear layer and the rest; the disk's files, one a group, of the predicted size. */
static void test_groups(void)
{
    model_config mc = group_offload_of(lora_on("dit-tiny", 0, QUANT_NONE, false), 3, false, true);
    pool *dev = pool_create(POOL_DEVICE, 0), *host = pool_create(POOL_HOST, 0);
    model *m = NULL;
    st_status st = model_create(&mc, dev, &m);
    if (!st) st = model_set_host_pool(m, host);
    if (!st) st = model_spill_weights(m);
    CHECKF(st == ST_OK, "group offload on dit-tiny: %s", st_error());
    const param_set *ps = st ? NULL : model_params(m);
    CHECKF(ps && ps->n_swap == 3 && ps->step_group == 3 && !strcmp(ps->swap[0].label, "blocks_0_2") &&
           !strcmp(ps->swap[1].label, "blocks_3_3") && strstr(ps->swap[2].label, "_unmatched_group"),
           "dit-tiny's groups: %d, %s, %s", ps ? ps->n_swap : -1, ps ? ps->swap[0].label : "", ps ? ps->swap[1].label : "");
    pool_stats hs;
    pool_get_stats(host, &hs);
    CHECKF(hs.live == 0, "the host holds %zu bytes once the groups are on disk", hs.live);
    for (int g = 0; ps && g < ps->n_swap; g++) {
        struct stat sb;
        CHECKF(ps->swap[g].file && !stat(ps->swap[g].file, &sb) && (size_t)sb.st_size == param_spill_file_bytes(ps, g + 1),
               "group %s's file %s", ps->swap[g].label, ps->swap[g].file ? ps->swap[g].file : "(none)");
    }
    char cmd[2 * GROUP_OFFLOAD_PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) = 3 && rm -r '%s'", mc.group_offload_dir, mc.group_offload_dir);
    CHECKF(system(cmd) == 0, "%s: one file a group, nothing else", mc.group_offload_dir);
    model_destroy(m);
    CHECK(pool_destroy(dev) == 0 && pool_destroy(host) == 0);
    mc = group_offload_of(lora_on("dit-tiny", 0, QUANT_NONE, false), 0, false, false);
    char first[PARAM_NAME_MAX];
    CHECKF(streamed_layers(&mc, first, sizeof first) == 21 && !strcmp(first, "blocks.0.attn.qkv.weight"),
           "leaf_level on dit-tiny: %d groups from %s", streamed_layers(&mc, first, sizeof first), first);
}

/* group offload: one block a group, three (across segments), leaf_level under int8, a stream, files on disk (Flux's
 * two lists), the U-ViT lists (ZLab I1, whose blocks also swap as one list; its schedules without unsloth's), Wan
 * VACE's outside module and Wan S2V's audio injectors */
static void test_group_offload_configs(void)
{
    test_group_offload(lora_on("dit-tiny", 0, QUANT_NONE, false), "dit-tiny", 1, false, false, 0, 1);
    test_group_offload(lora_on("dit-tiny", 0, QUANT_NONE, true), "dit-tiny", 3, false, false, 0, 1);
    test_group_offload(lora_on("dit-tiny", 0, QUANT_INT8, true), "dit-tiny", 0, false, false, 0, 1);
    test_group_offload(lora_on("dit-tiny", 0, QUANT_NONE, false), "dit-tiny", 1, true, false, 0, 1);
    test_group_offload(lora_on("flux-tiny", 0, QUANT_NONE, false), "flux-tiny", 2, false, true, 0, 1);
    test_group_offload(lora_on("wan-tiny", 3, QUANT_FP8, true), "wan-tiny", 2, true, true, 0, 2);
    test_group_offload(lora_on("zlab-i1-tiny", 0, QUANT_NONE, false), "zlab-i1-tiny", 2, false, true, 1, 4);
    test_swap(lora_on("zlab-i1-tiny", 0, QUANT_NONE, false), "zlab-i1-tiny", 3, 1, 4);
    test_group_offload(lora_on("wan-vace-tiny", 0, QUANT_NONE, false), "wan-vace-tiny", 1, false, false, 0, 2);
    test_group_offload(lora_on("wan-s2v-tiny", 0, QUANT_NONE, false), "wan-s2v-tiny", 2, false, false, 2, 8);
}

/* "group-offload": its tests alone (a run under the sanitizers on a busy machine). */
int main(int argc, char **argv)
{
    test_groups();
    test_refusals();
    if (argc > 1 && !strcmp(argv[1], "group-offload")) {
        test_group_offload_configs();
        return tk_finish();
    }
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
    /* ramtorch: every layer, half of them, one list's blocks, a quantized base, a LyCORIS LoKr */
    test_ramtorch(lora_on("dit-tiny", 0, QUANT_NONE, false), "dit-tiny", NULL, 100, 0, 1);
    test_ramtorch(lora_on("dit-tiny", 0, QUANT_INT4, true), "dit-tiny", "blocks.*", 50, 0, 1);
    test_ramtorch(lora_on("flux-tiny", 0, QUANT_NONE, false), "flux-tiny", "single_transformer_blocks.*", 100, 0, 1);
    test_ramtorch(lora_on("wan-tiny", 3, QUANT_FP8, true), "wan-tiny", "blocks.1,proj_out", 100, 0, 1);
    test_selection();
    test_group_offload_configs();
    test_every_family();
    return tk_finish();
}
