/* Segmented checkpointing against ../shared/spec/checkpointing.md: the schedule, the refusals, and for every
 * standard schedule on each family (dit, mmdit's two sequences, skipdit's shared skips; tiny and deeper models)
 * at 1 and 2 threads: loss and gradients bitwise identical to
 * no checkpointing, forward counts, the predicted peak equal to the measured one (per tag, to the byte), and
 * activation memory that only goes down during backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/executor.h"
#include "segtrain/model.h"
#include "segtrain/objective.h"
#include "segtrain/rng.h"
#include "testkit.h"
#include "testkit_batch.h"

/* ---- the schedule ---- */

static void expect_schedule(int n, int k, int s, const char *want_segments, const char *want_kept)
{
    segment segs[64];
    int count = plan_segments(n, k, s, false, segs);
    char got[256] = "", kept[256] = "";
    size_t at = 0;
    bool in[64] = {0};
    for (int g = 0; g < count; g++) {
        at += (size_t)snprintf(got + at, sizeof got - at, "%s{", g ? " " : "");
        for (int i = segs[g].first; i <= segs[g].last; i++) {
            at += (size_t)snprintf(got + at, sizeof got - at, i > segs[g].first ? ",%d" : "%d", i);
            in[i] = true;
        }
        at += (size_t)snprintf(got + at, sizeof got - at, "}");
    }
    at = 0;
    for (int i = 0; i < n; i++)
        if (!in[i]) at += (size_t)snprintf(kept + at, sizeof kept - at, "%s%d", at ? " " : "", i);
    CHECKF(!strcmp(got, want_segments) && !strcmp(kept, want_kept), "n %d k %d s %d: segments %s kept [%s]", n, k, s,
           got, kept);
    /* the per-block fallback splits segments but checkpoints exactly the same blocks */
    segment single[64];
    int c1 = plan_segments(n, k, s, true, single), covered = 0;
    bool same = true;
    for (int g = 0; g < c1; g++) same &= single[g].first == single[g].last && in[single[g].first], covered++;
    for (int i = 0; i < n; i++) covered -= in[i];
    CHECKF(same && covered == 0, "n %d k %d s %d: per-block fallback changed the checkpointed set", n, k, s);
}

static void test_schedule(void)
{
    printf("-- the schedule table of the spec\n");
    expect_schedule(8, 1, 1, "{0} {1} {2} {3} {4} {5} {6} {7}", "");
    expect_schedule(8, 2, 2, "{0,1} {2,3} {4,5} {6,7}", "");
    expect_schedule(8, 2, 4, "{0,1} {4,5}", "2 3 6 7");
    expect_schedule(5, 2, 2, "{0,1} {2,3} {4}", "");
    expect_schedule(6, 1, 2, "{0} {2} {4}", "1 3 5");
    expect_schedule(12, 5, 5, "{0,1,2,3,4} {5,6,7,8,9} {10,11}", "");
    expect_schedule(7, 3, 5, "{0,1,2} {5,6}", "3 4");
}

/* ---- refusals: one line naming the key, the value given and what is valid ---- */

/* The settings of a config; *warned (when not NULL) receives what ckpt_settings_warn says of it ("" if nothing). */
static st_status settings_of(const char *json, ckpt_settings *cs, const char **warned)
{
    config *c;
    if (warned) tk_warn_begin();
    st_status st = config_parse(json, "test.json", &c);
    if (!st) st = ckpt_settings_from(c, cs);
    if (!st && warned) st = ckpt_settings_warn(c);
    config_free(c);
    if (warned) *warned = tk_warn_end();
    return st;
}

static void expect_refusal(const char *json, const char *frag1, const char *frag2)
{
    ckpt_settings cs;
    st_status st = settings_of(json, &cs, NULL);
    CHECKF(st != ST_OK && strstr(st_error(), frag1) && strstr(st_error(), frag2), "%s -> %s", json, st_error());
    printf("     %s -> %s\n", json, st_error());
}

static st_status no_forward(block *b, const block_state *in, block_state *out, keep_level k, offload *o,
                            block_saved **s)
{
    return ST_ERR_INTERNAL;
}

static void test_refusals(void)
{
    printf("-- refusals\n");
    expect_refusal("{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 0}",
                   "gradient_checkpointing_interval", "0");
    expect_refusal("{\"gradient_checkpointing\": true, \"gradient_checkpointing_segment_stride\": 0}",
                   "gradient_checkpointing_segment_stride", "0");
    expect_refusal("{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 3, "
                   "\"gradient_checkpointing_segment_stride\": 2}",
                   "segments would overlap", "gradient_checkpointing_segment_stride: 2");
    expect_refusal("{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"torch2\"}",
                   "gradient_checkpointing_backend", "unsloth-ffn");
    expect_refusal("{\"gradient_checkpointing_intervall\": 2}", "gradient_checkpointing_intervall",
                   "gradient_checkpointing_interval");
    expect_refusal("{\"gradient_checkpointing\": true, \"gradient_checkpointing_keep_attention_output\": true, "
                   "\"gradient_checkpointing_offload_attention\": true}",
                   "gradient_checkpointing_keep_attention_output", "one of them");
    expect_refusal("{\"gradient_checkpointing\": true, \"gradient_checkpointing_keep_attention_output\": true, "
                   "\"gradient_checkpointing_backend\": \"torch-ffn\"}",
                   "keep their whole attention side already", "torch, unsloth");

    /* the family cannot do what was asked: FFN-only checkpointing on blocks without the split */
    const block_kind plain = {.name = "linear", .ffn_split = false, .forward = no_forward};
    block blocks[4] = {{.kind = &plain}, {.kind = &plain}, {.kind = &plain}, {.kind = &plain}};
    block_seq seq = {.name = "blocks", .n = 4, .blocks = blocks};
    ckpt_settings cs = {.enabled = true, .backend = BACKEND_TORCH_FFN, .interval = 1, .stride = 1};
    seq_plan p;
    CHECK(plan_sequence(&cs, &seq, "linear-attention", NULL, &p) == ST_ERR_UNSUPPORTED);
    CHECKF(strstr(st_error(), "torch-ffn") && strstr(st_error(), "linear-attention") && strstr(st_error(), "torch, unsloth"),
           "%s", st_error());
    printf("     torch-ffn on a block without the split -> %s\n", st_error());
    cs.backend = BACKEND_TORCH;
    CHECK(plan_sequence(&cs, &seq, "linear-attention", NULL, &p) == ST_OK && p.n_segments == 4);
    seq_plan_free(&p);
    /* attention offload on blocks without softmax attention, with checkpointing on or off */
    cs.offload_attention = true;
    for (int on = 0; on <= 1; on++) {
        cs.enabled = on;
        CHECK(plan_sequence(&cs, &seq, "linear-attention", NULL, &p) == ST_ERR_UNSUPPORTED);
        CHECKF(strstr(st_error(), "gradient_checkpointing_offload_attention") && strstr(st_error(), "linear-attention") &&
                   strstr(st_error(), "no softmax attention"),
               "%s", st_error());
    }
    printf("     attention offload on a block without softmax attention -> %s\n", st_error());
    /* keeping attention's output on blocks that cannot; with checkpointing off it plans (and warns: below) */
    cs = (ckpt_settings){.enabled = true, .backend = BACKEND_TORCH, .interval = 1, .stride = 1,
                         .keep_attention_output = true};
    CHECK(plan_sequence(&cs, &seq, "linear-attention", NULL, &p) == ST_ERR_UNSUPPORTED);
    CHECKF(strstr(st_error(), "gradient_checkpointing_keep_attention_output") &&
               strstr(st_error(), "linear-attention") && strstr(st_error(), "valid for linear-attention: false"),
           "%s", st_error());
    printf("     keep attention output on a block without it -> %s\n", st_error());
    cs.enabled = false;
    CHECK(plan_sequence(&cs, &seq, "linear-attention", NULL, &p) == ST_OK && !p.attention_output[0]);
    seq_plan_free(&p);
    const char *kw;
    CHECK(settings_of("{\"gradient_checkpointing_keep_attention_output\": true}", &cs, &kw) == ST_OK &&
          strstr(kw, "gradient_checkpointing_keep_attention_output does nothing"));

    /* per-block plans: what they say, and one line for each way of getting one wrong */
    cs = (ckpt_settings){.enabled = true, .interval = 1, .stride = 1};
    snprintf(cs.plan, sizeof cs.plan, "blocks: 0-3 ckpt in segments of 3 + host");
    CHECK(plan_check_sequences(cs.plan, &seq, 1) == ST_OK && plan_sequence(&cs, &seq, "linear", NULL, &p) == ST_OK);
    CHECKF(p.n_segments == 2 && p.segments[0].first == 0 && p.segments[0].last == 2 && p.segments[1].first == 3 &&
               p.host_input[0] && !p.host_input[1] && p.host_input[3] && p.mode[3] == MODE_CKPT,
           "a plan's segments: %d", p.n_segments);
    char line[256];
    seq_plan_format(&p, line, sizeof line);
    CHECKF(!strcmp(line, "0-2 ckpt + host | 3 ckpt + host"), "printed as %s", line);
    seq_plan_free(&p);
    const bool captured[4] = {true, false, false, false};
    const struct {
        const char *plan, *frag1, *frag2;
        st_status want;
    } bad[] = {
        {"0-1 ffn | 2-3 keep", "linear family's blocks refuse ffn", "no attention/feed-forward split",
         ST_ERR_UNSUPPORTED},
        {"0-3 keep + attention-offload", "refuse + attention-offload", "no softmax attention", ST_ERR_UNSUPPORTED},
        {"0-3 ckpt + attention-output", "refuse + attention-output", "do not keep", ST_ERR_UNSUPPORTED},
        {"0-3 ckpt + attention-output + attention-offload", "moves it to the host", "one of them", ST_ERR_UNSUPPORTED},
        {"0-3 ffn + attention-output", "\"attention-output\" is not understood", "for ckpt", ST_ERR_INVALID},
        {"0-1 ckpt | 3 keep", "a block between runs has no mode", "blocks 0-3", ST_ERR_INVALID},
        {"0-1 ckpt | 1-3 keep", "runs overlap", "in order", ST_ERR_INVALID},
        {"0-2 ckpt", "blocks 3-3 have no mode", "blocks 0-3", ST_ERR_INVALID},
        {"0-3 kept", "\"0-3 kept\" is not a run", "keep, ckpt or ffn", ST_ERR_INVALID},
        {"3-0 keep", "\"3-0 keep\" is not a run", "\"i-j\"", ST_ERR_INVALID},
        {"0-3 keep + host", "\"host\" is not understood", "\"+ host\" for ckpt and ffn", ST_ERR_INVALID},
        {"0-5 keep", "names block 5", "blocks 0-3", ST_ERR_INVALID},
        {"0-3 ckpt in segments of none", "expected \"in segments of N\"", "from 1", ST_ERR_INVALID},
        {"0-3 ckpt in segments of 2", "block 0's output after forward", "a segment that ends at block 0",
         ST_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cs.plan, sizeof cs.plan, "%s", bad[i].plan);
        const st_status st = plan_sequence(&cs, &seq, "linear", i + 1 == sizeof bad / sizeof *bad ? captured : NULL, &p);
        CHECKF(st == bad[i].want && strstr(st_error(), "gradient_checkpointing_plan") &&
                   strstr(st_error(), bad[i].frag1) && strstr(st_error(), bad[i].frag2),
               "plan \"%s\" -> %s", bad[i].plan, st_error());
        printf("     plan \"%s\" -> %s\n", bad[i].plan, st_error());
    }
    block_seq two[2] = {seq, seq};
    two[1].name = "single_blocks";
    const char *bad_names[][3] = {{"others: 0-3 keep", "\"others\" is not a block sequence", "valid: blocks"},
                                  {"blocks: 0-3 keep", "gives no runs for single_blocks", "\"single_blocks: runs\""},
                                  {"blocks: 0-3 keep / blocks: 0-3 ckpt", "blocks is given twice", "twice"},
                                  {"0-3 keep / single_blocks: 0-3 keep", "the clause \"0-3 keep\" names no block sequence", "has several"}};
    for (int i = 0; i < 4; i++) {
        CHECKF(plan_check_sequences(bad_names[i][0], two, 2) == ST_ERR_INVALID && strstr(st_error(), bad_names[i][1]) &&
                   strstr(st_error(), bad_names[i][2]),
               "plan \"%s\" -> %s", bad_names[i][0], st_error());
        printf("     plan \"%s\" -> %s\n", bad_names[i][0], st_error());
    }
    CHECK(plan_check_sequences("blocks: 0-3 keep / single_blocks: 0-3 ffn", two, 2) == ST_OK);
    expect_refusal("{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 2, "
                   "\"gradient_checkpointing_plan\": \"0-3 keep\"}",
                   "gradient_checkpointing_interval: 2 would mean nothing", "a plan's runs say");
    expect_refusal("{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"unsloth\", "
                   "\"gradient_checkpointing_plan\": \"0-3 keep\"}",
                   "gradient_checkpointing_backend: unsloth would mean nothing", "defaults");
    CHECK(settings_of("{\"gradient_checkpointing_plan\": \"0-3 ckpt\"}", &cs, &kw) == ST_OK &&
          strstr(kw, "gradient_checkpointing_plan does nothing while gradient_checkpointing is false"));

    /* checkpointing off: interval, stride and backend do nothing, and a warning says so */
    const char *warning;
    CHECK(settings_of("{\"gradient_checkpointing_interval\": 2, \"gradient_checkpointing_backend\": \"torch-ffn\"}",
                      &cs, &warning) == ST_OK);
    CHECKF(strstr(warning, "gradient_checkpointing_interval") && strstr(warning, "gradient_checkpointing_backend") &&
               strstr(warning, "do nothing while gradient_checkpointing is false"),
           "warning: %s", warning);
    CHECK(settings_of("{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 2}", &cs, &warning) ==
              ST_OK &&
          warning[0] == 0 && cs.stride == 2);
}

/* ---- one step under a schedule ---- */

typedef struct schedule {
    const char *name, *json;
} schedule;

static const schedule schedules[] = {
    {"none", "{}"},
    {"interval 1", "{\"gradient_checkpointing\": true}"},
    {"interval 2", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 2}"},
    {"interval 3", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 3}"},
    {"interval 5", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 5}"},
    {"interval 2 stride 4",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 2, \"gradient_checkpointing_segment_stride\": 4}"},
    {"interval 1 stride 2",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_segment_stride\": 2}"},
    {"torch-ffn", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"torch-ffn\"}"},
    {"torch-ffn interval 2",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"torch-ffn\", \"gradient_checkpointing_interval\": 2}"},
    {"torch-ffn interval 1 stride 3",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"torch-ffn\", \"gradient_checkpointing_segment_stride\": 3}"},
    {"unsloth", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"unsloth\"}"},
    {"unsloth interval 3",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"unsloth\", \"gradient_checkpointing_interval\": 3}"},
    {"unsloth-ffn", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"unsloth-ffn\"}"},
    {"unsloth-ffn interval 1 stride 2",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"unsloth-ffn\", \"gradient_checkpointing_segment_stride\": 2}"},
    {"attention offload alone", "{\"gradient_checkpointing_offload_attention\": true}"},
    {"activation-offload", "{\"gradient_checkpointing\": true, \"gradient_checkpointing_offload_attention\": true}"},
    {"seg2-stride4-offload",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 2, \"gradient_checkpointing_segment_stride\": 4, "
     "\"gradient_checkpointing_offload_attention\": true}"},
    {"torch-ffn + attention offload",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"torch-ffn\", \"gradient_checkpointing_offload_attention\": true}"},
    {"layer + keep attention output",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_keep_attention_output\": true}"},
    {"seg2-stride4 + keep attention output",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 2, \"gradient_checkpointing_segment_stride\": 4, "
     "\"gradient_checkpointing_keep_attention_output\": true}"},
    {"unsloth interval 2 + keep attention output",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"unsloth\", \"gradient_checkpointing_interval\": 2, "
     "\"gradient_checkpointing_keep_attention_output\": true}"},
    {"unsloth interval 2 + attention offload",
     "{\"gradient_checkpointing\": true, \"gradient_checkpointing_backend\": \"unsloth\", \"gradient_checkpointing_interval\": 2, "
     "\"gradient_checkpointing_offload_attention\": true}"},
};

/* Activation memory after each unit's backward, less the state gradient's tensors after the first: a skip's
 * gradient (skipdit) lives from its out-block to the in-block that made the skip, which no schedule avoids; and less
 * the attention sides of the next unit, which attention offload brings back one unit ahead (blocks whose sides differ
 * in size, a U-Net's, would otherwise seem to rise). */
typedef struct watch {
    pool *pool;
    const block_seq *seq;
    const seq_plan *plan;
    const size_t *back; /* side_back_bytes, block by block */
    size_t last;
    bool rose;
    int calls;
} watch;

static void read_back_bytes(model *twin, void *ctx)
{
    size_t(*back)[64] = ctx;
    block_seq *seqs;
    for (int q = 0, n = model_sequences(twin, &seqs); q < n; q++)
        for (int j = 0; j < seqs[q].n; j++) back[q][j] = seqs[q].blocks[j].kind->offload_host_bytes(&seqs[q].blocks[j]);
}

/* The device bytes each block's attention side comes back from the host as: float, as backward reads it, whatever
 * the host held (bf16 where the kind's copies are) and kept_bytes counted (packed, under bf16): a float twin's host
 * count, after a dry step of the batch */
static void side_back_bytes(const model *m, const ckpt_settings *cs, int64_t batch, size_t back[][64])
{
    model_config wide = *model_get_config(m);
    wide.bf16_activations = false;
    tk_dry_model(&wide, cs, batch, read_back_bytes, back);
}

static void after_backward(void *ctx, int first)
{
    watch *w = ctx;
    pool_stats s;
    pool_get_stats(w->pool, &s);
    state_map map; /* the gradient state now is that of block first's input */
    block_state_map(w->seq, first, &map);
    size_t held = s.live_by_tag[MEM_ACTIVATIONS] + s.live_by_tag[MEM_BOUNDARIES];
    for (int k = 1; k < map.n_in; k++) held -= (size_t)map.in_numel[k] * sizeof(float);
    const segment next = first > 0 ? seq_plan_unit(w->plan, first - 1) : (segment){0, -1};
    for (int j = next.first; j <= next.last; j++)
        if (w->plan->attention_offload[j]) held -= w->back[j];
    if (w->calls++ && held > w->last) w->rose = true;
    w->last = held;
}

typedef struct step_result {
    float loss;
    float *grads;
    int64_t n;
    size_t device_peak, host_peak;
} step_result;

static pool *host_pool; /* one host pool for every model of the test */

static model *make_model(pool *p, const model_config *mc)
{
    model *m = NULL;
    CHECKF(model_create(mc, p, &m) == ST_OK, "%s", st_error());
    CHECK(model_set_host_pool(m, host_pool) == ST_OK);
    model_init(m, 17, true);
    return m;
}

/* One step under a schedule; checks counts, the prediction and the backward memory trace; returns the
 * gradients. */
static step_result run_step(pool *p, model *m, const schedule *sc, const flow_batch *fb, const char *label)
{
    ckpt_settings cs;
    CHECKF(settings_of(sc->json, &cs, NULL) == ST_OK, "%s", st_error());
    CHECKF(model_set_checkpointing(m, &cs, NULL, 0) == ST_OK, "%s", st_error());
    block_seq *seqs;
    const int n_seq = model_sequences(m, &seqs);
    enum { SEQ_MAX = 4 };
    if (n_seq > SEQ_MAX) abort(); /* the test's own limit, not the engine's */
    long runs[SEQ_MAX][64];
    size_t back[SEQ_MAX][64];
    side_back_bytes(m, &cs, fb->batch, back);
    watch w[SEQ_MAX]; /* per sequence */
    for (int q = 0; q < n_seq; q++) {
        w[q] = (watch){.pool = p, .seq = &seqs[q], .plan = model_plan(m, q), .back = back[q]};
        for (int i = 0; i < seqs[q].n; i++) runs[q][i] = seqs[q].blocks[i].forward_runs;
        seqs[q].after_backward = after_backward;
        seqs[q].after_backward_ctx = &w[q];
    }

    param_set *ps = model_params(m);
    pool_stats sim, host; /* the prediction: the same step run dry */
    tk_dry_loss(model_get_config(m), &cs, fb->batch, &sim, &host);

    param_set_zero_grads(ps);
    pool_reset_peak(p);
    pool_reset_peak(host_pool);
    copy_engine_reset_stats(model_copy_engine(m));
    const size_t resident = pool_live(p);
    step_result r = {.n = ps->grad_count};
    CHECKF(flow_loss(m, fb, true, &r.loss) == ST_OK, "%s %s: %s", label, sc->name, st_error());
    for (int q = 0; q < n_seq; q++) seqs[q].after_backward = NULL;
    pool_stats measured, measured_host;
    pool_get_stats(p, &measured);
    pool_get_stats(host_pool, &measured_host);
    r.device_peak = measured.peak;
    r.host_peak = measured_host.peak;
    copy_stats cstats;
    copy_engine_stats(model_copy_engine(m), &cstats);
    size_t moved = 0;
    for (int q = 0; q < n_seq; q++) moved += seq_plan_host_bytes(model_plan(m, q), &seqs[q]);
    CHECKF(cstats.bytes[COPY_TO_HOST] == moved && cstats.bytes[COPY_TO_DEVICE] == moved,
           "%s %s: moved %zu to host and %zu back, the plan says %zu each way", label, sc->name,
           cstats.bytes[COPY_TO_HOST], cstats.bytes[COPY_TO_DEVICE], moved);
    CHECKF(measured.live == resident, "%s %s: the step leaves only what was there before", label, sc->name);
    CHECKF(measured_host.peak == host.peak && measured_host.live == 0 &&
               !memcmp(measured_host.at_peak_by_tag, host.at_peak_by_tag, sizeof host.at_peak_by_tag),
           "%s %s: host peak measured %zu, predicted %zu (live after %zu)", label, sc->name, measured_host.peak,
           host.peak, measured_host.live);

    bool counts = true;
    for (int q = 0; q < n_seq; q++)
        for (int i = 0; i < seqs[q].n; i++)
            counts &= seqs[q].blocks[i].forward_runs - runs[q][i] == (model_plan(m, q)->mode[i] == MODE_CKPT ? 2 : 1);
    CHECKF(counts, "%s %s: checkpointed blocks run forward twice, others once", label, sc->name);
    bool exact = measured.peak == sim.peak && !memcmp(measured.at_peak_by_tag, sim.at_peak_by_tag, sizeof measured.at_peak_by_tag);
    CHECKF(exact, "%s %s: measured peak %zu, predicted %zu", label, sc->name, measured.peak, sim.peak);
    for (int t = 0; !exact && t < MEM_TAG_COUNT; t++)
        printf("     %-12s measured %zu predicted %zu\n", mem_tag_name(t), measured.at_peak_by_tag[t], sim.at_peak_by_tag[t]);
    for (int q = 0; q < n_seq; q++)
        CHECKF(!w[q].rose && w[q].calls > 0, "%s %s: activation memory rose after a segment's backward (%s)", label,
               sc->name, seqs[q].name);
    char line[512];
    seq_plan_format(model_plan(m, n_seq - 1), line, sizeof line);
    printf("%s %s %-38s peak %9zu host %8zu = predicted | %s\n", exact ? "ok  " : "FAIL", label, sc->name,
           measured.peak, measured_host.peak, line);

    r.grads = malloc((size_t)r.n * sizeof(float));
    memcpy(r.grads, ps->grads, (size_t)r.n * sizeof(float));
    return r;
}

/* A batch of n samples: x0 and noise standard normal from the seed (streams 1 and 2), t and labels as given
 * (for a captioned family: captions "caption <label>", "" for the null label). */
typedef struct test_batch {
    float *x0, *noise, t[8];
    float *y; /* n x model_cond_len */
    flow_batch fb;
} test_batch;

static test_batch *make_batch(const model_config *mc, int64_t n, uint64_t seed, const float *t, const int64_t *labels)
{
    const int64_t L = model_cond_len(mc);
    test_batch *b = calloc(1, sizeof *b);
    b->y = malloc((size_t)(n * L) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        char caption[32] = "";
        if (labels[i] != mc->classes) snprintf(caption, sizeof caption, "caption %lld", (long long)labels[i]);
        model_condition(mc, labels[i], caption, b->y + i * L);
    }
    const int64_t count = n * model_sample_numel(mc);
    b->x0 = malloc((size_t)count * sizeof(float));
    b->noise = malloc((size_t)count * sizeof(float));
    rng_fill_normal(b->x0, count, seed, 1, 0, 1);
    rng_fill_normal(b->noise, count, seed, 2, 0, 1);
    tk_token_ids(mc, b->x0, count, seed);
    memcpy(b->t, t, (size_t)n * sizeof *t);
    b->fb = (flow_batch){.batch = n, .x0 = b->x0, .noise = b->noise, .t = b->t, .cond = b->y, .grad_scale = 1.0f};
    return b;
}

static void free_batch(test_batch *b)
{
    free(b->x0), free(b->noise), free(b->y), free(b);
}

/* No control flow that allocates depends on data (docs/ARCHITECTURE.md): a step on zeros, on huge values and on NaN
 * makes the same allocations as a step on ordinary data, so the pools' statistics are equal, field for field. */
static void test_memory_ignores_data(const model_config *mc, const char *label)
{
    printf("-- %s: the same allocations whatever the data\n", label);
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, mc);
    ckpt_settings cs;
    const char *json = "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 2, "
                       "\"gradient_checkpointing_segment_stride\": 3, \"gradient_checkpointing_offload_attention\": true}";
    CHECKF(settings_of(json, &cs, NULL) == ST_OK && model_set_checkpointing(m, &cs, NULL, 0) == ST_OK, "%s", st_error());
    test_batch *b = make_batch(mc, 2, 1, (float[]){0.3f, 0.8f}, (int64_t[]){1, mc->classes});
    const int64_t count = 2 * model_sample_numel(mc);
    const float fills[] = {0.0f, 3e38f, NAN};
    pool_stats base = {0}, dev, host;
    for (int k = -1; k < 3; k++) {
        if (k >= 0)
            for (int64_t i = 0; i < count; i++) b->x0[i] = b->noise[i] = fills[k];
        pool_reset_peak(p);
        pool_reset_peak(host_pool);
        float loss;
        CHECK(flow_loss(m, &b->fb, true, &loss) == ST_OK);
        pool_get_stats(p, &dev);
        pool_get_stats(host_pool, &host);
        if (k < 0) base = dev;
        else CHECKF(!memcmp(&dev, &base, sizeof dev) && host.live == 0, "%s: data %g changed the pool's statistics "
                    "(peak %zu, was %zu)", label, fills[k], dev.peak, base.peak);
    }
    free_batch(b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* A per-block plan that mixes every mode and flag the model's sequences allow, run by run: segments of 2 in a
 * run of 3, FFN-only blocks with and without their input on the host, kept blocks with and without attention
 * offload, a segment with its boundary on the host and its attention offloaded. */
static void mixed_plan(model *m, char *json, size_t size)
{
    block_seq *seqs;
    const int n_seq = model_sequences(m, &seqs);
    size_t at = (size_t)snprintf(json, size, "{\"gradient_checkpointing\": true, \"gradient_checkpointing_plan\": \"");
    for (int q = 0; q < n_seq; q++) {
        const block_kind *k = seqs[q].blocks[0].kind;
        const bool host = !seq_shares_tensors(&seqs[q]), ffn = k->ffn_split, att = k->softmax_attention;
        const bool output = k->keeps_attention_output;
        at += (size_t)snprintf(json + at, size - at, "%s%s: ", q ? " / " : "", seqs[q].name);
        for (int i = 0, r = q; i < seqs[q].n; r++) {
            const int left = seqs[q].n - i;
            char run[96];
            int width = 1;
            switch (r % 6) {
            case 0:
                width = left < 3 ? left : 3;
                snprintf(run, sizeof run, "ckpt in segments of 2%s", output ? " + attention-output" : "");
                break;
            case 1: snprintf(run, sizeof run, ffn ? "ffn%s" : "ckpt%s", host ? " + host" : ""); break;
            case 2: snprintf(run, sizeof run, "keep%s", att ? " + attention-offload" : ""); break;
            case 3:
                width = left < 2 ? left : 2;
                snprintf(run, sizeof run, "ckpt%s%s", host ? " + host" : "", att ? " + attention-offload" : "");
                break;
            case 4: snprintf(run, sizeof run, ffn ? "ffn" : "keep"); break;
            default: snprintf(run, sizeof run, "keep");
            }
            if (width > 1) at += (size_t)snprintf(json + at, size - at, "%s%d-%d %s", i ? " | " : "", i, i + width - 1, run);
            else at += (size_t)snprintf(json + at, size - at, "%s%d %s", i ? " | " : "", i, run);
            i += width;
        }
    }
    snprintf(json + at, size - at, "\"}");
}

/* The plan the model holds, as it prints, reads back as the same plan. */
static void expect_plan_round_trip(model *m, const char *label)
{
    char text[PLAN_TEXT_MAX], again[PLAN_TEXT_MAX];
    model_plan_text(m, text, sizeof text);
    ckpt_settings cs = {.enabled = true, .interval = 1, .stride = 1};
    snprintf(cs.plan, sizeof cs.plan, "%s", text);
    block_seq *seqs;
    const int n_seq = model_sequences(m, &seqs);
    bool same = n_seq <= 4;
    for (int q = 0; same && q < n_seq; q++) {
        const seq_plan *a = model_plan(m, q);
        seq_plan b;
        same = plan_sequence(&cs, &seqs[q], "test", NULL, &b) == ST_OK && b.n_segments == a->n_segments &&
               !memcmp(b.mode, a->mode, (size_t)a->n * sizeof *a->mode) &&
               !memcmp(b.segments, a->segments, (size_t)a->n_segments * sizeof *a->segments) &&
               !memcmp(b.host_input, a->host_input, (size_t)a->n * sizeof *a->host_input) &&
               !memcmp(b.attention_offload, a->attention_offload, (size_t)a->n * sizeof *a->attention_offload) &&
               !memcmp(b.attention_output, a->attention_output, (size_t)a->n * sizeof *a->attention_output);
        seq_plan_free(&b);
    }
    CHECK(model_set_checkpointing(m, &cs, NULL, 0) == ST_OK);
    model_plan_text(m, again, sizeof again);
    CHECKF(same && !strcmp(text, again), "%s: the plan \"%s\" reads back as itself (\"%s\")", label, text, again);
}

static void test_bitwise(const model_config *mc, const char *label, int threads)
{
    printf("-- %s at %d thread%s: every schedule against no checkpointing\n", label, threads, threads > 1 ? "s" : "");
    ops_set_threads(threads);
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, mc);
    test_batch *b = make_batch(mc, 2, 1, (float[]){0.3f, 0.8f}, (int64_t[]){1, mc->classes});
    flow_batch fb = b->fb;
    step_result base = run_step(p, m, &schedules[0], &fb, label);
    block_seq *seqs;
    const int n_seqs = model_sequences(m, &seqs);
    for (size_t i = 1; i < sizeof schedules / sizeof *schedules; i++) {
        bool keeps = true, split = true, softmax = true; /* what every sequence's blocks can do */
        for (int q = 0; q < n_seqs; q++) {
            const block_kind *k = seqs[q].blocks[0].kind;
            keeps &= k->keeps_attention_output, split &= k->ffn_split, softmax &= k->softmax_attention;
        }
        const char *json = schedules[i].json;
        if ((seq_shares_tensors(&seqs[0]) && strstr(json, "unsloth")) || /* refused: test_skipdit.c */
            (!keeps && strstr(json, "keep_attention_output")) || (!split && strstr(json, "-ffn")) ||
            (!softmax && strstr(json, "offload_attention\": true"))) {
            ckpt_settings cs;
            CHECK(settings_of(schedules[i].json, &cs, NULL) == ST_OK);
            CHECK(model_set_checkpointing(m, &cs, NULL, 0) == ST_ERR_UNSUPPORTED);
            continue;
        }
        step_result r = run_step(p, m, &schedules[i], &fb, label);
        char what[128];
        snprintf(what, sizeof what, "%s %s: loss and gradients", label, schedules[i].name);
        CHECKF(!memcmp(&r.loss, &base.loss, sizeof r.loss), "%s: loss %.9g vs %.9g", what, r.loss, base.loss);
        tk_expect_bitwise(what, r.grads, base.grads, base.n);
        free(r.grads);
    }
    char json[PLAN_TEXT_MAX + 128];
    mixed_plan(m, json, sizeof json);
    const schedule mixed = {"a per-block plan", json};
    step_result r = run_step(p, m, &mixed, &fb, label);
    char what[160];
    snprintf(what, sizeof what, "%s %s: loss and gradients", label, mixed.name);
    CHECKF(!memcmp(&r.loss, &base.loss, sizeof r.loss), "%s: loss %.9g vs %.9g", what, r.loss, base.loss);
    tk_expect_bitwise(what, r.grads, base.grads, base.n);
    free(r.grads);
    expect_plan_round_trip(m, label);
    free(base.grads);
    free_batch(b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
    ops_set_threads(2);
}

/* ---- hidden-state capture: per-block fallback with an auxiliary loss ---- */

static void capture_step(model *m, const flow_batch *fb, const int64_t *capture, size_t n, const char *json,
                         float *grads_out, char *fallback)
{
    ckpt_settings cs;
    CHECK(settings_of(json, &cs, NULL) == ST_OK);
    CHECKF(model_set_checkpointing(m, &cs, capture, n) == ST_OK, "%s", st_error());
    snprintf(fallback, 256, "%s", model_plan(m, 0)->fallback);
    const model_config *mc = model_get_config(m);
    const int64_t per = model_sample_numel(mc), total = fb->batch * per;
    /* flow loss by hand, plus aux = sum(w * h_k) over the captured blocks: dh_k = w */
    float *xt = malloc((size_t)total * sizeof(float)), *dpred = calloc((size_t)total, sizeof(float));
    float ts[8];
    for (int64_t i = 0; i < fb->batch; i++) {
        ts[i] = 1000 * fb->t[i];
        for (int64_t j = i * per; j < (i + 1) * per; j++) xt[j] = (1 - fb->t[i]) * fb->x0[j] + fb->t[i] * fb->noise[j];
    }
    param_set_zero_grads(model_params(m));
    const float *pred;
    CHECK(model_forward(m, xt, ts, fb->cond, fb->batch, true, &pred) == ST_OK);
    for (int64_t j = 0; j < total; j++) dpred[j] = 2 * (pred[j] - (fb->noise[j] - fb->x0[j])) / (float)total;
    const int64_t S = fb->batch * (mc->height / mc->patch) * (mc->width / mc->patch) * mc->hidden;
    for (size_t k = 0; k < n; k++) {
        const float *h;
        float *dh;
        CHECKF(model_hidden(m, (int)k, &h, &dh) == ST_OK, "%s", st_error());
        rng_fill_uniform(dh, S, 3, k, -0.01f, 0.01f);
        CHECK(h[0] == h[0]); /* the captured state is readable */
    }
    CHECK(model_backward(m, dpred) == ST_OK);
    memcpy(grads_out, model_params(m)->grads, (size_t)model_params(m)->grad_count * sizeof(float));
    free(dpred), free(xt);
}

static void test_capture(const model_config *mc)
{
    printf("-- capture_hidden_states: per-block fallback, same checkpointed blocks, same bits\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, mc);
    const int64_t n = model_params(m)->grad_count;
    test_batch *b = make_batch(mc, 2, 4, (float[]){0.25f, 0.5f}, (int64_t[]){3, 4});
    flow_batch fb = b->fb;
    const int64_t capture[] = {2, (int64_t)mc->depth - 1};
    float *plain = malloc((size_t)n * sizeof(float)), *ckpt = malloc((size_t)n * sizeof(float));
    char fb0[256], fb1[256];
    capture_step(m, &fb, capture, 2, "{}", plain, fb0);
    capture_step(m, &fb, capture, 2, "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": 3}", ckpt, fb1);
    const seq_plan *pl = model_plan(m, 0);
    int ckpt_blocks = 0;
    for (int i = 0; i < pl->n; i++) ckpt_blocks += pl->mode[i] == MODE_CKPT;
    CHECKF(fb0[0] == 0 && strstr(fb1, "fell back") && strstr(fb1, "capture_hidden_states"), "fallback: '%s'", fb1);
    CHECKF(pl->n_segments == ckpt_blocks && ckpt_blocks == pl->n, "single-block segments over the same blocks");
    printf("     plan says: %s\n", fb1);
    tk_expect_bitwise("gradients with an auxiliary loss on captured states", ckpt, plain, n);
    free(plain), free(ckpt), free_batch(b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* ---- dit-s2: the peaks order as the cost model says ---- */

static void test_dit_s2_peaks(void)
{
#ifdef __SANITIZE_ADDRESS__
    const int64_t B = 1; /* the same ordering at a batch the sanitizer pass runs quickly */
#else
    const int64_t B = 8;
#endif
    printf("-- dit-s2 at batch %lld: measured peaks\n", (long long)B);
    model_config mc;
    CHECK(model_preset("dit-s2", &mc) == ST_OK);
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, &mc);
    float t[8];
    int64_t y[8];
    for (int i = 0; i < B; i++) t[i] = 0.1f * (float)(i + 1), y[i] = i * 100;
    test_batch *b = make_batch(&mc, B, 5, t, y);
    flow_batch fb = b->fb;
    const schedule rows[] = {schedules[0], schedules[5], schedules[2], schedules[1], schedules[10]};
    size_t peak[5];
    for (int i = 0; i < 5; i++) {
        step_result r = run_step(p, m, &rows[i], &fb, "dit-s2");
        free(r.grads);
        peak[i] = r.device_peak;
    }
    printf("     none %.1f MiB > seg2-stride4 %.1f MiB > interval2 %.1f MiB, layer %.1f MiB > unsloth %.1f MiB\n",
           peak[0] / 1048576.0, peak[1] / 1048576.0, peak[2] / 1048576.0, peak[3] / 1048576.0, peak[4] / 1048576.0);
    CHECK(peak[0] > peak[1] && peak[1] > peak[2] && peak[1] > peak[3] && peak[3] > peak[4]);
    free_batch(b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* unsloth keeps boundaries off the device: its device peak is torch's less what the plan moved off at that
 * moment, and the difference the plans predict is the difference measured. */
static void test_unsloth_saves_what_it_predicts(const model_config *mc)
{
    printf("-- unsloth's device peak is torch's minus the predicted amount\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, mc);
    test_batch *b = make_batch(mc, 2, 8, (float[]){0.4f, 0.6f}, (int64_t[]){0, 1});
    flow_batch fb = b->fb;
    for (int k = 1; k <= 3; k += 2) {
        char tj[160], uj[160];
        snprintf(tj, sizeof tj, "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": %d}", k);
        snprintf(uj, sizeof uj, "{\"gradient_checkpointing\": true, \"gradient_checkpointing_interval\": %d, "
                                "\"gradient_checkpointing_backend\": \"unsloth\"}", k);
        schedule ts = {"torch", tj}, us = {"unsloth", uj};
        size_t predicted[2];
        for (int u = 0; u < 2; u++) {
            ckpt_settings cs;
            CHECK(settings_of(u ? uj : tj, &cs, NULL) == ST_OK && model_set_checkpointing(m, &cs, NULL, 0) == ST_OK);
            pool_stats dev, host;
            tk_dry_loss(model_get_config(m), &cs, 2, &dev, &host);
            predicted[u] = dev.peak;
        }
        step_result rt = run_step(p, m, &ts, &fb, "deep-13"), ru = run_step(p, m, &us, &fb, "deep-13");
        printf("     interval %d: torch %zu, unsloth %zu: %zu bytes less, predicted %zu\n", k, rt.device_peak,
               ru.device_peak, rt.device_peak - ru.device_peak, predicted[0] - predicted[1]);
        CHECK(ru.device_peak < rt.device_peak);
        CHECK(rt.device_peak - ru.device_peak == predicted[0] - predicted[1]);
        free(rt.grads), free(ru.grads);
    }
    free_batch(b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* Every device budget short of a step's peak fails as ST_ERR_OOM with the pools as before (whatever the states
 * share, however many sequences), and a budget of exactly the peak runs the step to the same bits. */
static void test_budgets(const model_config *mc, const char *label)
{
    printf("-- %s: every budget short of a step's peak fails cleanly\n", label);
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, mc);
    test_batch *b = make_batch(mc, 2, 7, (float[]){0.3f, 0.6f}, (int64_t[]){2, mc->classes});
    const char *rows[] = {"none", "interval 2", "interval 2 stride 4", "torch-ffn", "seg2-stride4-offload"};
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        size_t k = 0;
        while (strcmp(schedules[k].name, rows[r])) k++;
        ckpt_settings cs;
        CHECK(settings_of(schedules[k].json, &cs, NULL) == ST_OK && model_set_checkpointing(m, &cs, NULL, 0) == ST_OK);
        const size_t resident = pool_live(p);
        float loss, again;
        param_set_zero_grads(model_params(m));
        pool_reset_peak(p);
        CHECK(flow_loss(m, &b->fb, true, &loss) == ST_OK);
        const size_t peak = pool_peak(p);
        bool clean = true;
        int tried = 0;
        for (size_t cap = resident + 1; cap < peak; cap += (peak - resident) / 29 + 1, tried++) {
            pool_set_capacity(p, cap);
            st_status st = flow_loss(m, &b->fb, true, &again);
            clean &= st == ST_ERR_OOM && pool_live(p) == resident && pool_live(host_pool) == 0;
        }
        pool_set_capacity(p, peak);
        param_set_zero_grads(model_params(m));
        CHECKF(flow_loss(m, &b->fb, true, &again) == ST_OK, "%s %s: a budget of exactly the peak: %s", label, rows[r],
               st_error());
        pool_set_capacity(p, 0);
        CHECKF(clean && !memcmp(&loss, &again, sizeof loss), "%s %s: %d budgets below the peak fail cleanly", label,
               rows[r], tried);
    }
    free_batch(b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* A copy that fails, or a host pool too small, ends the step with a clear status; the pools are as before and
 * the next step runs, to the same bits. */
static void test_offload_faults(const model_config *mc)
{
    printf("-- faults: failed copies and a full host pool\n");
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, mc);
    test_batch *b = make_batch(mc, 2, 9, (float[]){0.2f, 0.9f}, (int64_t[]){5, 6});
    flow_batch fb = b->fb;
    const schedule *sc = &schedules[sizeof schedules / sizeof *schedules - 1]; /* unsloth + attention offload */
    step_result good = run_step(p, m, sc, &fb, "deep-13");
    const size_t resident = pool_live(p);
    copy_stats cs;
    copy_engine_stats(model_copy_engine(m), &cs);
    const int copies = (int)(cs.copies[0] + cs.copies[1]);
    bool clean = true;
    float loss;
    for (int nth = 1; nth <= copies; nth += 3) { /* copies to the host and back, early and late in the step */
        copy_engine_fail_nth(model_copy_engine(m), nth);
        st_status st = flow_loss(m, &fb, true, &loss);
        clean &= st == ST_ERR_IO && strstr(st_error(), "failed") && pool_live(p) == resident && pool_live(host_pool) == 0;
    }
    copy_engine_fail_nth(model_copy_engine(m), 0);
    CHECKF(clean, "every injected copy failure is ST_ERR_IO, with the pools as before the step");
    printf("     an injected failure -> %s\n", st_error());

    pool_set_capacity(host_pool, good.host_peak - 1);
    st_status st = flow_loss(m, &fb, true, &loss);
    CHECKF(st == ST_ERR_HOST_OOM && strstr(st_error(), "host"), "host pool one byte short: %s", st_error());
    printf("     a host pool one byte short -> %s\n", st_error());
    CHECK(pool_live(p) == resident && pool_live(host_pool) == 0);
    pool_set_capacity(host_pool, good.host_peak);
    step_result again = run_step(p, m, sc, &fb, "deep-13");
    CHECK(!memcmp(&again.loss, &good.loss, sizeof loss));
    tk_expect_bitwise("the step after the faults", again.grads, good.grads, good.n);
    pool_set_capacity(host_pool, 0);
    free(good.grads), free(again.grads), free_batch(b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* ---- sd3: what a block keeps, attn2 counted ---- */

/* A training forward under `none` (every block KEEP_ALL) holds, beyond one under interval 1 (every block
 * KEEP_NOTHING, its input a boundary), exactly the blocks' kept_bytes(KEEP_ALL); torch-ffn's KEEP_ATTENTION
 * likewise. And a dual-attention block keeps attn2's side (6 tensors of the image rows with qk norm), its output
 * projection, its attention state and three more modulation rows over a block without. */
static void test_sd3_kept(void)
{
    printf("-- sd3-tiny: the plan counts attn2 and the last block's missing text MLP\n");
    model_config mc;
    CHECK(model_preset("sd3-tiny", &mc) == ST_OK && mc.depth == 3 && mc.dual_attention == 2 && mc.qk_norm);
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, &mc);
    const int64_t B = 2, T = (mc.height / mc.patch) * (mc.width / mc.patch), D = mc.hidden;
    test_batch *b = make_batch(&mc, B, 3, (float[]){0.3f, 0.7f}, (int64_t[]){1, 2});
    model_set_batch(m, B);
    block_seq *seqs;
    CHECK(model_sequences(m, &seqs) == 1 && seqs[0].n == 3);
    block *blk = seqs[0].blocks;
    const attn_shape image = {B, T, mc.heads, D / mc.heads, mc.mechanism, 0, 0, 0};
    const size_t attn2 = (size_t)((6 + 1) * B * T * D + B * 3 * D) * sizeof(float) + attention_kept_bytes(&image);
    for (keep_level k = KEEP_ALL; k <= KEEP_ATTENTION; k++)
        CHECKF(blk[0].kind->kept_bytes(&blk[0], k) - blk[1].kind->kept_bytes(&blk[1], k) == 0 &&
                   blk[1].kind->kept_bytes(&blk[1], k) - blk[2].kind->kept_bytes(&blk[2], k) > attn2,
               "blocks 0 and 1 both have attn2; block 2 has none and no text MLP");
    model_config plain = mc;
    plain.dual_attention = 0;
    pool *q = pool_create(POOL_DEVICE, 0);
    model *pm = make_model(q, &plain);
    model_set_batch(pm, B);
    block_seq *pseqs;
    model_sequences(pm, &pseqs);
    for (keep_level k = KEEP_ALL; k <= KEEP_ATTENTION; k++) {
        const size_t with = blk[0].kind->kept_bytes(&blk[0], k), without = pseqs[0].blocks[0].kind->kept_bytes(&pseqs[0].blocks[0], k);
        CHECKF(with - without == attn2, "keep %d: attn2 adds %zu bytes, want %zu", (int)k, with - without, attn2);
    }
    CHECKF(blk[0].kind->offload_host_bytes(&blk[0]) - pseqs[0].blocks[0].kind->offload_host_bytes(&pseqs[0].blocks[0]) ==
               (size_t)(6 * B * T * D) * sizeof(float) + attention_kept_bytes(&image),
           "attention offload moves attn2's side too");
    model_destroy(pm);
    CHECK(pool_destroy(q) == 0);

    /* the kept bytes are what a forward holds */
    const char *rows[][2] = {{"interval 1", "none"}, {"interval 1", "torch-ffn"}};
    for (int r = 0; r < 2; r++) {
        size_t live[2];
        for (int j = 0; j < 2; j++) {
            size_t k = 0;
            while (strcmp(schedules[k].name, rows[r][j])) k++;
            ckpt_settings cs;
            CHECK(settings_of(schedules[k].json, &cs, NULL) == ST_OK && model_set_checkpointing(m, &cs, NULL, 0) == ST_OK);
            const float *pred;
            CHECK(model_forward(m, b->x0, b->t, b->y, B, true, &pred) == ST_OK);
            live[j] = pool_live(p);
            model_release(m);
        }
        size_t want = 0;
        for (int i = 0; i < 3; i++) want += blk[i].kind->kept_bytes(&blk[i], r ? KEEP_ATTENTION : KEEP_ALL);
        CHECKF(live[1] - live[0] == want, "%s holds %zu bytes more than interval 1, the plan says %zu", rows[r][1],
               live[1] - live[0], want);
    }
    free_batch(b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* ---- every family's tiny model ---- */

/* A family's tiny model (its preset, with depth, single-stream depth and text blocks overridden where non-zero; a
 * video one's latent frames checked) under every schedule at 1 and 2 threads (or 2 alone), then with LoRA on
 * attention and MLP (and LyCORIS's LoKr where mapped), every budget short of its peak, and data-independent memory, as flagged. */
static const struct family_case {
    const char *preset, *why;
    int64_t depth, single_depth, text_blocks;
    bool one_thread, lora, budgets, data;
    int64_t frames; /* 0: an image or audio model */
} family_cases[] = {
    {"flux2-tiny", "shared modulation, fused single blocks; sequences of different lengths", 3, 0, 0, 1, 1, 1, 1, 0},
    {"hunyuanvideo-tiny", "video, the token refiner", 0, 0, 0, 1, 1, 1, 1, 2},
    {"pixart-sigma-tiny", "cross-attention to a masked text, 8 output channels", 0, 0, 0, 1, 1, 1, 1, 0},
    {"wan-tiny", "video, 3D rotary, q/k RMSNorm, norm2", 0, 0, 0, 1, 0, 1, 1, 2},
    {"wan-vace-tiny", "VACE's control branch: a second sequence whose hints the main blocks add", 3, 0, 0, 1, 1, 1, 1,
     2},
    {"wan-anyflow-tiny", "AnyFlow's blend of the time and delta embeddings", 0, 0, 0, 0, 0, 0, 0, 2},
    {"wan-animate-tiny", "Animate: the image tokens' added keys and values, a face adapter after each block reading "
     "the motion and face encoders' output", 3, 0, 0, 1, 1, 1, 1, 3},
    {"wan-s2v-tiny", "S2V: each sample's reference tokens after its video's at t = 0, no q/k/v biases, the audio "
     "encoder's chunks read by injectors after blocks 0 and 2", 0, 0, 0, 1, 1, 1, 1, 8},
    {"cosmos2-tiny", "AdaLN-LoRA, rotate-half RoPE, no biases", 3, 0, 0, 1, 1, 1, 1, 0},
    {"kandinsky5-image-tiny", "text blocks, then visual blocks reading them", 3, 0, 3, 1, 1, 1, 1, 0},
    {"kandinsky5-video-tiny", "video, visual_cond's zero channels", 0, 0, 0, 0, 0, 1, 0, 2},
    {"longcat-video-tiny", "video, fused q k v, an ungated cross-attention after an affine LayerNorm, SwiGLU", 3, 0, 0,
     1, 1, 1, 1, 2},
    {"anima-tiny", "cosmos2's blocks reading its text conditioner's output, whose gradient they return", 3, 0, 0, 1,
     1, 1, 1, 0},
    {"ltxvideo-tiny", "video, RoPE over the width, RMSNorm norms", 0, 0, 0, 1, 0, 1, 1, 2},
    {"ltxvideo2-tiny", "audio and video streams, six attentions a block, split RoPE", 3, 0, 0, 1, 1, 1, 1, 2},
    {"ace-step-tiny", "audio: GQA, a sliding window, conv1d patches", 0, 0, 0, 1, 1, 1, 1, 0},
    {"hunyuanvideo15-tiny", "video, ByT5 tokens, condition channels, double blocks only", 3, 0, 0, 0, 0, 1, 1, 2},
    {"qwen-image-tiny", "one sequence of double blocks, the text's key mask", 3, 0, 0, 1, 1, 1, 1, 0},
    {"heartmula-tiny", "a token model: the Llama backbone, then the decoder over each frame's rows, the token "
     "objective (its masks are data: a sample of no rows is refused, so no data-independence case)", 0, 0, 0, 1, 1, 1,
     0, 0},
    {"mageflow-tiny", "qwen-image's blocks on patch-1 tokens, a rotary table per sample (the text unrotated), the "
     "text's key mask", 3, 0, 0, 1, 1, 1, 1, 0},
    {"longcat-image-tiny", "no pooled vector, LongCat's position ids", 3, 0, 0, 1, 0, 1, 0, 0},
    {"chroma-tiny", "the approximator's modulation rows, the text's additive mask", 3, 0, 0, 1, 1, 1, 1, 0},
    {"lumina2-tiny", "three sequences (caption refiner, image refiner, joint), rows laid out per caption length, "
     "GQA, tanh gates, sandwich norms", 3, 0, 0, 1, 1, 1, 1, 0},
    {"boogu-image-tiny", "lumina2's refiners and joint blocks with double-stream layers between them: the caption's "
     "and the image's rows through their own weights, one attention over both and the image's own", 3, 2, 0, 1, 1, 1,
     1, 0},
    {"z-image-tiny", "lumina2's blocks, the image rows first, caption and image rows padded with learned tokens",
     3, 0, 0, 1, 1, 1, 1, 0},
    {"ernie-tiny", "lumina2's blocks without sandwich norms, GEGLU, one modulation every block reads and adds to",
     3, 0, 0, 1, 1, 1, 1, 0},
    {"ideogram-tiny", "lumina2's blocks on [caption; image], MRoPE on rotate-half pairs", 3, 0, 0, 1, 1, 1, 1, 0},
    {"omnigen-tiny", "Phi-3 blocks (no modulation, no q/k norms, fused gate and up) on [prompt ids; time; image], "
     "block-causal mask, su-scaled RoPE", 3, 0, 0, 1, 1, 1, 1, 0},
    {"krea2-tiny", "three sequences (text layers per token, text refiner, joint), zero-centred norms, gated attention, "
     "a modulation table per block", 3, 0, 0, 1, 1, 1, 1, 0},
    {"flux3-tiny", "per-mode blocks for the text and the image, then single blocks whose text and image rows read two "
     "modulation sets; attention and feed-forward in parallel", 3, 2, 0, 1, 1, 1, 1, 0},
    {"qwen-image-2.1-tiny", "[text; image] under the block-causal mask, the text modulated from t = 0, attention then "
     "feed-forward", 3, 0, 0, 1, 1, 1, 1, 0},
    {"minimaxh3-tiny", "a token refiner without modulation, then [text; video] whose rows read their modality's "
     "modulation; heads x head wider than the stream, RoPE on part of each head", 3, 0, 0, 1, 1, 1, 1, 2},
    {"cosmos3-tiny", "a mixture of transformers: the prompt's rows and the latents' through their own weights, one "
     "attention (the prompt causal), grouped queries, MRoPE", 3, 0, 0, 1, 1, 1, 1, 0},
    {"sana-tiny", "linear self-attention (its state hd x hd a head), the cross-attention over its own heads, GLUMBConv "
     "on the token grid", 3, 0, 0, 1, 1, 1, 1, 0},
    {"sana-1.5-tiny", "Sana's block with q and k RMSNorm-ed across the heads", 0, 0, 0, 0, 1, 0, 0, 0},
    {"sanavideo-tiny", "Sana's block over video: the linear attention's features rotated, a convolution over the "
     "frames after GLUMBConv", 3, 0, 0, 1, 1, 1, 1, 3},
    {"sd1x-tiny", "U-Net micro-blocks: conv_in, ResnetBlock2Ds, Transformer2DModels, samplers; skips of different "
     "shapes passed from the down path to the up path", 0, 0, 0, 1, 1, 1, 1, 0},
    {"sdxl-tiny", "SDXL's U-Net: Linear projections, two transformer blocks a micro-block, the pooled text and size "
     "ids", 0, 0, 0, 0, 1, 1, 0, 0},
    {"kolors-tiny", "Kolors: SDXL's U-Net reading its text through a trained projection, whose gradient every "
     "cross-attention adds to", 0, 0, 0, 0, 0, 1, 0, 0},
    {"stable-cascade-tiny", "Stable Cascade's stage C: ResBlocks (depthwise convolution, GRN), timestep and attention "
     "blocks, a level's output skipped to the up path", 0, 0, 0, 1, 1, 1, 1, 0},
    {"hidream-tiny", "experts routed per token (the routing follows the data, no allocation does), each block's own "
     "Llama tokens", 3, 2, 0, 1, 1, 1, 1, 0},
    {"zlab-i1-tiny", "dual-stream blocks (the image's rows then the text's, one state) with long skips merged per "
     "stream, shared by boundaries; a text adapter beside them; the text's key mask", 7, 0, 0, 1, 1, 1, 1, 0},
};

/* The families LyCORIS is mapped on, each with lycoris_configs: SimpleTuner's LoKr example's (full matrices, scale 1),
 * for sd1x the LoKr fixture whose halves are all low-rank (decompose_both, scale 1.5) and the one with LoHa, LoCon
 * and full modules side by side, LoHa on pixart, LoCon on sana, full on sdxl; cosmos2image, kandinsky5, omnigen,
 * cosmos3 and stable cascade with their examples' LoKr, and cosmos2image and cosmos3 with every class mapped there;
 * sd1x and sdxl with LoCon on every U-Net class (their convolutions, conv_in and conv_out too), sd1x with LoHa and
 * full there and with LoKr; stable cascade with LoKr and LoCon on its depthwise convolutions */
static const char *const lycoris_configs[][3] = {
    {"pixart-sigma-tiny", "simpletuner/config/examples/pixart.lycoris-lokr", "lokr"},
    {"pixart-sigma-tiny", "lycoris/loha", "loha"},
    {"sana-tiny", "simpletuner/config/examples/sana.lycoris-lokr", "lokr"},
    {"sana-tiny", "lycoris/locon", "locon"},
    {"sd1x-tiny", "lycoris/lokr_split", "lokr"},
    {"sd1x-tiny", "lycoris/mixed", "loha, locon, full"},
    {"sdxl-tiny", "simpletuner/config/examples/sdxl.lycoris-lokr", "lokr"},
    {"sd1x-tiny", "lycoris/families/sd1x-conv", "locon on convs"},
    {"sd1x-tiny", "lycoris/families/sd1x-conv-algos", "loha, full on convs"},
    {"sd1x-tiny", "lycoris/families/sd1x-conv-lokr", "lokr on convs"},
    {"sdxl-tiny", "lycoris/full", "full"},
    {"sdxl-tiny", "lycoris/families/sdxl-conv", "locon on convs"},
    {"cosmos2-tiny", "simpletuner/config/examples/cosmos2image.lycoris-lokr", "lokr"},
    {"cosmos2-tiny", "lycoris/families/cosmos2image-every-class", "lokr, loha"},
    {"kandinsky5-image-tiny", "simpletuner/config/examples/kandinsky5-image-6b-t2i.lycoris-lokr", "lokr"},
    {"omnigen-tiny", "simpletuner/config/examples/omnigen.lycoris-lokr", "lokr"},
    {"cosmos3-tiny", "simpletuner/config/examples/cosmos3-image.lycoris-lokr", "lokr"},
    {"cosmos3-tiny", "lycoris/families/cosmos3-every-class", "lokr, locon"},
    {"stable-cascade-tiny", "simpletuner/config/examples/cascade-stage-c.lycoris-lokr", "lokr"},
    {"stable-cascade-tiny", "lycoris/families/cascade-depthwise", "lokr on depthwise convs"},
    {"stable-cascade-tiny", "lycoris/families/cascade-depthwise-locon", "locon on depthwise convs"},
};

/* The family's LyCORIS adapters (lora_type lycoris) under every schedule, for each lycoris_config above. */
static void test_lycoris(const model_config *mc, const char *preset)
{
    for (size_t i = 0; i < sizeof lycoris_configs / sizeof *lycoris_configs; i++) {
        if (strcmp(lycoris_configs[i][0], preset)) continue;
        model_config ly = *mc;
        char path[512], label[64];
        snprintf(path, sizeof path, SEGTRAIN_SOURCE_DIR "/tests/fixtures/%s%s", lycoris_configs[i][1],
                 strstr(lycoris_configs[i][1], "families/") ? ".json" : "/lycoris_config.json");
        CHECKF(lycoris_spec_read(path, &ly.lycoris) == ST_OK, "%s", st_error());
        ly.lora_rank = 1, ly.lora_alpha = 1, ly.lora_attention = ly.lora_mlp = true;
        snprintf(label, sizeof label, "%s lycoris %s", preset, lycoris_configs[i][2]);
        test_bitwise(&ly, label, 2);
    }
}

static void test_family(const struct family_case *c)
{
    printf("-- %s: %s\n", c->preset, c->why);
    model_config mc;
    CHECK(model_preset(c->preset, &mc) == ST_OK && (!c->frames || mc.frames == c->frames));
    if (c->depth) mc.depth = c->depth;
    if (c->single_depth) mc.single_depth = c->single_depth;
    if (c->text_blocks) mc.text_blocks = c->text_blocks;
    for (int threads = c->one_thread ? 1 : 2; threads <= 2; threads++) test_bitwise(&mc, c->preset, threads);
    if (c->lora) {
        model_config lora = mc;
        lora.lora_rank = 4, lora.lora_alpha = 8, lora.lora_attention = lora.lora_mlp = true;
        char label[64];
        snprintf(label, sizeof label, "%s lora", c->preset);
        test_bitwise(&lora, label, 2);
        test_lycoris(&mc, c->preset);
    }
    if (c->budgets) test_budgets(&mc, c->preset);
    if (c->data) test_memory_ignores_data(&mc, c->preset);
}

/* ---- mixed_precision bf16: the states the executor holds are bf16 (docs/PRECISION.md) ---- */

/* Relative L2 distance of a from b. */
static double rel_l2(const float *a, const float *b, int64_t n)
{
    double d = 0, w = 0;
    for (int64_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), w += (double)b[i] * b[i];
    return sqrt(d / (w > 0 ? w : 1));
}

/* Against the same model in float: every boundary takes half the bytes, attention offload holds the side on the
 * host in bf16 but its attention states (float; the U-Nets' stay on the device) and frees as much of kept_bytes
 * (packed) as it holds there, and the step is bf16's, not float's (its loss and gradients differ), within bf16's error of it. Every offload schedule's
 * peaks under bf16 are test_bf16's (run_step). */
static void test_bf16_against_float(const model_config *mc, const char *label)
{
    printf("-- %s: bf16 states against float ones\n", label);
    model_config wide = *mc, narrow = *mc;
    wide.bf16_activations = false, narrow.bf16_activations = true;
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m[2] = {make_model(p, &wide), make_model(p, &narrow)};
    test_batch *b = make_batch(mc, 2, 1, (float[]){0.3f, 0.8f}, (int64_t[]){1, mc->classes});
    ckpt_settings cs;
    CHECK(settings_of("{\"gradient_checkpointing\": true}", &cs, NULL) == ST_OK);
    float loss[2], *grads[2];
    size_t boundaries[2] = {0}, host[2], device[2];
    for (int k = 0; k < 2; k++) {
        CHECKF(model_set_checkpointing(m[k], &cs, NULL, 0) == ST_OK, "%s", st_error());
        block_seq *seqs;
        for (int q = 0, n = model_sequences(m[k], &seqs); q < n; q++)
            boundaries[k] += seq_plan_boundary_bytes(model_plan(m[k], q), &seqs[q]);
        param_set *ps = model_params(m[k]);
        param_set_zero_grads(ps);
        CHECKF(flow_loss(m[k], &b->fb, true, &loss[k]) == ST_OK, "%s: %s", label, st_error());
        const block *ob = seqs[0].blocks; /* the first block with an attention side (a U-Net's conv_in has none) */
        while (ob < seqs[0].blocks + seqs[0].n - 1 && !ob->kind->offload_host_bytes(ob)) ob++;
        host[k] = ob->kind->offload_host_bytes(ob); /* at the batch's size */
        device[k] = ob->kind->offload_device_bytes(ob);
        grads[k] = malloc((size_t)ps->grad_count * sizeof(float));
        memcpy(grads[k], ps->grads, (size_t)ps->grad_count * sizeof(float));
    }
    const int64_t n = model_params(m[0])->grad_count;
    const double dg = rel_l2(grads[1], grads[0], n), dl = fabs((double)loss[1] - loss[0]) / fabs((double)loss[0]);
    CHECKF(boundaries[1] * 2 == boundaries[0], "%s: boundaries %zu bytes in bf16, %zu in float", label, boundaries[1],
           boundaries[0]);
    CHECKF(host[1] < host[0] && 2 * host[1] >= host[0] && device[0] == host[0] && device[1] == host[1],
           "%s: attention offload holds %zu host bytes a block and frees %zu device bytes in bf16, %zu and %zu in float",
           label, host[1], device[1], host[0], device[0]);
    CHECKF(loss[1] != loss[0] && dl < 1e-2 && dg > 0 && dg < 5e-2, "%s: loss %.9g in bf16, %.9g in float (%.2g); "
           "gradients %.2g apart", label, loss[1], loss[0], dl, dg);
    printf("     loss %.2g and gradients %.2g apart (relative)\n", dl, dg);
    free(grads[0]), free(grads[1]), free_batch(b);
    model_destroy(m[0]), model_destroy(m[1]);
    CHECK(pool_destroy(p) == 0);
}

static bool only_listed(const char *only, const char *preset);

/* Families of every kind of state (one stream, skips shared by boundaries, two streams, several sequences, a U-Net's
 * micro-blocks, video, audio), full and LoRA (the frozen base in bf16 too), at other shapes: every schedule bitwise
 * equal to none and every peak as predicted, as in float. only (NULL: every case): SEGTRAIN_CKPT_ONLY's presets. */
static void test_bf16(const char *only)
{
    static const struct {
        const char *preset;
        int64_t depth, height, width;
        bool lora;
    } cases[] = {{"dit-tiny", 0, 0, 0, 0},        {"dit-tiny", 13, 8, 12, 1}, {"skipdit-tiny", 13, 0, 0, 0},
                 {"skipdit-tiny", 0, 8, 12, 1},   {"mmdit-tiny", 3, 0, 0, 1}, {"flux2-tiny", 3, 0, 0, 0},
                 {"sd1x-tiny", 0, 0, 0, 0},       {"sdxl-tiny", 0, 0, 0, 1},  {"stable-cascade-tiny", 0, 0, 0, 0},
                 {"lumina2-tiny", 3, 0, 0, 1},    {"wan-tiny", 0, 0, 0, 0},   {"ltxvideo2-tiny", 3, 0, 0, 0},
                 {"pixart-sigma-tiny", 0, 0, 0, 1}, {"sana-tiny", 3, 0, 0, 0}, {"hidream-tiny", 3, 0, 0, 0},
                 {"flux-tiny", 3, 0, 0, 0}, {"chroma-tiny", 3, 0, 0, 1}, {"auraflow-tiny", 3, 0, 0, 0},
                 {"flux3-tiny", 3, 0, 0, 0}, {"cosmos3-tiny", 0, 0, 0, 0}, {"ace-step-tiny", 0, 0, 0, 0},
                 {"cosmos2-tiny", 0, 0, 0, 0}, {"kandinsky5-image-tiny", 0, 0, 0, 1}, {"krea2-tiny", 0, 0, 0, 0},
                 {"sanavideo-tiny", 0, 0, 0, 0}, {"wan-animate-tiny", 0, 0, 0, 0}, {"wan-vace-tiny", 0, 0, 0, 0},
                 {"zlab-i1-tiny", 0, 8, 12, 1}, {"mageflow-tiny", 3, 8, 12, 1}, {"wan-s2v-tiny", 0, 8, 12, 1},
                 {"stable-cascade-tiny", 0, 8, 12, 1}, {"heartmula-tiny", 0, 0, 0, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (only && !only_listed(only, cases[i].preset)) continue;
        model_config mc;
        CHECK(model_preset(cases[i].preset, &mc) == ST_OK);
        if (cases[i].depth) mc.depth = cases[i].depth;
        if (cases[i].height) mc.height = cases[i].height, mc.width = cases[i].width;
        if (cases[i].lora) mc.lora_rank = 4, mc.lora_alpha = 8, mc.lora_attention = mc.lora_mlp = true;
        mc.bf16_activations = true, mc.bf16_base = cases[i].lora;
        char label[96];
        snprintf(label, sizeof label, "%s%s bf16 depth %lld at %lld x %lld", cases[i].preset,
                 cases[i].lora ? " lora" : "", (long long)mc.depth, (long long)mc.height, (long long)mc.width);
        test_bitwise(&mc, label, 2);
        if (i < 2 || !strcmp(cases[i].preset, "flux2-tiny") || !strcmp(cases[i].preset, "sd1x-tiny") ||
            !strcmp(cases[i].preset, "stable-cascade-tiny"))
            test_bf16_against_float(&mc, label);
    }
    if (only) return;
    model_config deep;
    CHECK(model_preset("dit-tiny", &deep) == ST_OK);
    deep.depth = 13, deep.hidden = 32, deep.heads = 2, deep.mechanism = ATTN_MATH, deep.bf16_activations = true;
    test_capture(&deep);
    test_memory_ignores_data(&deep, "deep-13 bf16");
    test_budgets(&deep, "deep-13 bf16");
}

/* base_model_precision (docs/QUANTIZATION.md): a quantized frozen base under LoRA, each format on a family of its
 * own kind of state, with bf16 states or float ones: every schedule bitwise equal to none, every peak as predicted */
static void test_quantized(void)
{
    static const struct {
        const char *preset;
        quant_format q;
        bool bf16;
    } cases[] = {{"dit-tiny", QUANT_INT8, true}, {"mmdit-tiny", QUANT_INT4, false},
                 {"pixart-sigma-tiny", QUANT_FP8, true}, {"sdxl-tiny", QUANT_INT4, true},
                 {"sd1x-tiny", QUANT_FP8, false}, {"stable-cascade-tiny", QUANT_INT8, true}, /* convs quantized too */
                 {"flux-tiny", QUANT_INT8, true}}; /* time_text_embed's and norm_out.linear quantized too */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        model_config mc;
        CHECK(model_preset(cases[i].preset, &mc) == ST_OK);
        if (!strcmp(cases[i].preset, "mmdit-tiny")) mc.depth = 3;
        mc.lora_rank = 4, mc.lora_alpha = 8, mc.lora_attention = mc.lora_mlp = true;
        mc.quant_base = cases[i].q, mc.bf16_activations = cases[i].bf16;
        char label[96];
        snprintf(label, sizeof label, "%s lora %s%s", cases[i].preset, quant_name(cases[i].q),
                 cases[i].bf16 ? " bf16" : "");
        test_bitwise(&mc, label, 2);
    }
}

/* Ideogram with adaln_dim wider than its stream (a config.json may say so): adaln_input once overran a buffer as wide
 * as the stream (heap corruption, found by bench/vs_diffusers.py); under ASan this is its regression test */
static void test_wide_adaln(void)
{
    model_config mc;
    CHECK(model_preset("ideogram-tiny", &mc) == ST_OK);
    mc.time_dim = 2 * mc.hidden;
    test_bitwise(&mc, "ideogram-tiny adaln_dim twice the stream's width", 2);
}

/* segtrain's own families at a non-square input, 8 x 12: every schedule against none (the diffusers families' one
 * checkpointed schedule at theirs is test_parity's) */
static void test_any_shape(void)
{
    static const char *const presets[] = {"dit-tiny", "skipdit-tiny"};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        model_config mc;
        CHECK(model_preset(presets[i], &mc) == ST_OK);
        mc.height = 8, mc.width = 12;
        char label[64];
        snprintf(label, sizeof label, "%s at 8 x 12", presets[i]);
        test_bitwise(&mc, label, 2);
    }
}

/* SEGTRAIN_CKPT_ONLY=preset,preset...: only those families' cases (their LyCORIS configs with them; "quantized":
 * test_quantized's) and test_bf16's, for a change in one area on a busy machine; ctest runs everything. */
static bool only_listed(const char *only, const char *preset)
{
    const size_t n = strlen(preset);
    for (const char *p = only; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
        if (strcspn(p, ",") == n && !strncmp(p, preset, n)) return true;
    return false;
}

int main(void)
{
    seq_check_kept_bytes(true); /* every block kind's kept_bytes, on every training forward below */
    host_pool = pool_create(POOL_HOST, 0);
    const char *only = getenv("SEGTRAIN_CKPT_ONLY");
    if (only && *only) {
        for (size_t i = 0; i < sizeof family_cases / sizeof *family_cases; i++)
            if (only_listed(only, family_cases[i].preset)) test_family(&family_cases[i]);
        if (only_listed(only, "quantized")) test_quantized();
        test_bf16(only);
        CHECK(pool_destroy(host_pool) == 0);
        return tk_finish();
    }
    test_schedule();
    test_refusals();
    model_config tiny, deep;
    CHECK(model_preset("dit-tiny", &tiny) == ST_OK);
    deep = tiny;
    deep.depth = 13; /* a prime depth: no interval but 1 divides it */
    deep.hidden = 32;
    deep.heads = 2;
    deep.mechanism = ATTN_MATH;
    model_config mm, mm_lora, skip, skip13, skip_lora, af, af_lora;
    CHECK(model_preset("mmdit-tiny", &mm) == ST_OK);
    CHECK(model_preset("auraflow-tiny", &af) == ST_OK);
    af.depth = 3; /* joint and single sequences of different lengths */
    mm.depth = 3; /* double and single sequences of different lengths, each segmented on its own */
    CHECK(model_preset("skipdit-tiny", &skip) == ST_OK);
    { /* Stable Cascade's dropout: the recompute draws the step's masks again, and they change the loss */
        model_config sc;
        CHECK(model_preset("stable-cascade-tiny", &sc) == ST_OK);
        sc.cascade_dropout[0] = sc.cascade_dropout[1] = 0.25f;
        test_bitwise(&sc, "stable-cascade-tiny dropout 0.25", 2);
        float loss[2];
        for (int k = 0; k < 2; k++) {
            pool *p = pool_create(POOL_DEVICE, 0);
            model *m = make_model(p, &sc);
            test_batch *b = make_batch(&sc, 2, 3, (float[]){0.3f, 0.8f}, (int64_t[]){1, sc.classes});
            model_set_dropout_seed(m, (uint64_t)k);
            CHECK(flow_loss(m, &b->fb, true, &loss[k]) == ST_OK);
            free_batch(b);
            model_destroy(m);
            CHECK(pool_destroy(p) == 0);
        }
        CHECKF(loss[0] != loss[1], "dropout applies: seeds 0 and 1 give losses %.7g and %.7g", loss[0], loss[1]);
    }
    skip13 = skip;
    skip13.depth = 13; /* 6 skips alive at the middle; no interval but 1 divides it */
    skip13.hidden = 32;
    skip13.heads = 2;
    skip13.mechanism = ATTN_MATH;
    skip_lora = skip;
    skip_lora.lora_rank = 4, skip_lora.lora_alpha = 8, skip_lora.lora_attention = skip_lora.lora_mlp = true;
    for (int threads = 1; threads <= 2; threads++) {
        test_bitwise(&tiny, "dit-tiny", threads);
        test_bitwise(&deep, "deep-13", threads);
        test_bitwise(&mm, "mmdit-tiny", threads);
        test_bitwise(&af, "auraflow-tiny", threads);
        test_bitwise(&skip, "skipdit-tiny", threads);
        test_bitwise(&skip13, "skipdit-13", threads);
    }
    mm_lora = mm;
    mm_lora.lora_rank = 4, mm_lora.lora_alpha = 8, mm_lora.lora_attention = mm_lora.lora_mlp = true;
    test_bitwise(&skip_lora, "skipdit-tiny lora", 2);
    test_bitwise(&mm_lora, "mmdit-tiny lora", 2);
    af_lora = af;
    af_lora.lora_rank = 4, af_lora.lora_alpha = 8, af_lora.lora_attention = af_lora.lora_mlp = true;
    test_bitwise(&af_lora, "auraflow-tiny lora", 2);
    test_capture(&deep);
    test_unsloth_saves_what_it_predicts(&deep);
    test_offload_faults(&deep);
    test_budgets(&tiny, "dit-tiny");
    test_budgets(&mm, "mmdit-tiny");
    test_budgets(&af, "auraflow-tiny");
    test_budgets(&skip, "skipdit-tiny");
    test_dit_s2_peaks();
    test_memory_ignores_data(&tiny, "dit-tiny");
    test_memory_ignores_data(&mm, "mmdit-tiny");
    test_memory_ignores_data(&af, "auraflow-tiny");
    test_memory_ignores_data(&skip13, "skipdit-13");
    for (size_t i = 0; i < sizeof family_cases / sizeof *family_cases; i++) test_family(&family_cases[i]);
    test_any_shape();
    test_wide_adaln();
    test_bf16(NULL);
    test_quantized();
    model_config sd3;
    CHECK(model_preset("sd3-tiny", &sd3) == ST_OK); /* attn2 in blocks 0 and 1, the last context_pre_only */
    for (int threads = 1; threads <= 2; threads++) test_bitwise(&sd3, "sd3-tiny", threads);
    model_config sd3_lora = sd3;
    sd3_lora.lora_rank = 4, sd3_lora.lora_alpha = 8, sd3_lora.lora_attention = sd3_lora.lora_mlp = true;
    test_bitwise(&sd3_lora, "sd3-tiny lora", 2);
    sd3.qk_norm = false, sd3.dual_attention = 0; /* SD3 medium's blocks */
    test_bitwise(&sd3, "sd3-tiny as SD3 medium", 1);
    sd3.qk_norm = true, sd3.dual_attention = 2;
    test_budgets(&sd3, "sd3-tiny");
    test_memory_ignores_data(&sd3, "sd3-tiny");
    test_sd3_kept();
    CHECK(pool_destroy(host_pool) == 0);
    return tk_finish();
}
