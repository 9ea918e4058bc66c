#include "segtrain/advise.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "segtrain/model_run.h"
#include "segtrain/objective.h"
#include "segtrain/sweep.h"
#include "segtrain/train.h"

/* The overrides that place the weights as s says: "musubi_blocks_to_swap=N", or group offload's settings. */
static void place_sets(const schedule *s, char *buf, size_t n)
{
    if (s->group_blocks)
        snprintf(buf, n, "enable_group_offload=true;group_offload_type=block_level;group_offload_blocks_per_group=%d;"
                 "group_offload_use_stream=%s", s->group_blocks, s->group_stream ? "true" : "false");
    else snprintf(buf, n, "musubi_blocks_to_swap=%d", s->blocks_to_swap);
}

void schedule_describe(schedule *s)
{
    const ckpt_settings *c = &s->cs;
    size_t at = 0;
    if (!c->enabled) at = (size_t)snprintf(s->name, sizeof s->name, "none");
    else if (c->plan[0]) at = (size_t)snprintf(s->name, sizeof s->name, "per-block plan");
    else {
        at = (size_t)snprintf(s->name, sizeof s->name, "%s interval %d", ckpt_backend_name(c->backend), c->interval);
        if (c->stride != c->interval) at += (size_t)snprintf(s->name + at, sizeof s->name - at, " stride %d", c->stride);
    }
    if (c->offload_attention && at < sizeof s->name)
        at += (size_t)snprintf(s->name + at, sizeof s->name - at, " + attention offload");
    if (c->keep_attention_output && at < sizeof s->name)
        at += (size_t)snprintf(s->name + at, sizeof s->name - at, " + attention output kept");
    if (s->places && s->blocks_to_swap && at < sizeof s->name)
        snprintf(s->name + at, sizeof s->name - at, " + swap %d blocks", s->blocks_to_swap);
    else if (s->places && s->group_blocks && at < sizeof s->name)
        snprintf(s->name + at, sizeof s->name - at, " + group offload %d block%s a group%s", s->group_blocks,
                 s->group_blocks > 1 ? "s" : "", s->group_stream ? ", streamed" : "");
    ckpt_settings_text(c, s->sets, sizeof s->sets);
    const size_t end = strlen(s->sets);
    if (s->places && end + 1 < sizeof s->sets) {
        s->sets[end] = ';';
        place_sets(s, s->sets + end + 1, sizeof s->sets - end - 1);
    }
}

/* Measures one schedule: the median seconds of a few steps, and their op profile. */
static st_status measure(config_factory make, void *ctx, schedule s, FILE *progress, double *sec,
                         op_profile *work, sweep_cell *out)
{
    schedule_describe(&s);
    config *cfg = make(ctx, s.sets);
    if (!cfg) return ST_ERR_INVALID;
    if (progress) { /* a real model's steps on this machine take minutes: say so before they start */
        fprintf(progress, "calibration: %s, 1 warm-up and 2 measured steps at this config's size...\n", s.name);
        fflush(progress);
    }
    sweep_cell cell = {0};
    const st_status st = sweep_measure(cfg, 1, 2, &cell);
    config_free(cfg);
    if (st) return st;
    if (cell.status != CELL_OK) return st_fail(ST_ERR_INTERNAL, "calibrating with %s: %s", s.name, cell.error);
    *sec = cell.sec_median;
    *work = cell.work;
    *out = cell;
    if (progress) fprintf(progress, "calibration: %-40s %.3f s/step (measured)\n", s.name, *sec);
    return ST_OK;
}

cost_rates cost_calibrate(const op_profile *measured, double step_seconds)
{
    cost_rates r = {.fixed = step_seconds};
    for (int k = 0; k < OP_KIND_COUNT; k++) {
        const double units = measured->flops[k] > 0 ? measured->flops[k] : measured->bytes[k];
        r.per_unit[k] = units > 0 ? measured->seconds[k] / units : 0;
        r.fixed -= measured->seconds[k];
    }
    if (r.fixed < 0) r.fixed = 0;
    return r;
}

double cost_predict(const cost_rates *r, const op_profile *work)
{
    double sec = r->fixed;
    for (int k = 0; k < OP_KIND_COUNT; k++)
        sec += r->per_unit[k] * (work->flops[k] > 0 ? work->flops[k] : work->bytes[k]);
    return sec;
}

void link_traffic_read(model *m, link_traffic *out)
{
    copy_engine *e = model_copy_engine(m);
    copy_stats cs = {0};
    if (e) copy_engine_stats(e, &cs);
    out->swap_in = model_params(m)->swap_bytes_in;
    out->offload_out = cs.bytes[COPY_TO_HOST];
    /* the engine counts the swapped weights' copies too */
    out->offload_in = cs.bytes[COPY_TO_DEVICE] - out->swap_in;
}

link_traffic link_traffic_since(model *m, const link_traffic *before)
{
    link_traffic now;
    link_traffic_read(m, &now);
    return (link_traffic){now.swap_in - before->swap_in, now.offload_out - before->offload_out,
                          now.offload_in - before->offload_in};
}

double link_seconds_waited(const cost_rates *r, const link_traffic *t) { return r->link_per_byte * (double)t->swap_in; }

double link_seconds_all(const cost_rates *r, const link_traffic *t)
{
    return r->link_per_byte * (double)(t->swap_in + t->offload_out + t->offload_in);
}

st_status link_bandwidth_measure(double *bytes_per_sec)
{
    const size_t bytes = (size_t)64 << 20;
    pool *dev = pool_create(POOL_DEVICE, 0), *host = pool_create(POOL_HOST, 0);
    copy_engine *e = NULL;
    void *src = NULL, *dst = NULL;
    st_status st = dev && host ? copy_engine_create(&e) : st_host_oom("the link benchmark's pools");
    if (!st) st = pool_alloc_zero(host, bytes, MEM_WORKSPACE, "link benchmark (host)", &src);
    if (!st) st = pool_alloc_zero(dev, bytes, MEM_WORKSPACE, "link benchmark (device)", &dst);
    double best = 0, start = clock_seconds();
    for (int k = 0; !st && (k < 3 || clock_seconds() - start < 0.25); k++) { /* the first warms the pages */
        copy_job *job;
        const double t0 = clock_seconds();
        st = copy_submit(e, COPY_TO_DEVICE, dst, src, bytes, &job);
        if (!st) st = copy_wait(e, job);
        const double t = clock_seconds() - t0;
        if (!st && k > 0 && t > 0 && (double)bytes / t > best) best = (double)bytes / t;
    }
    copy_engine_destroy(e);
    if (dev) pool_free(dev, dst);
    if (host) pool_free(host, src);
    pool_destroy(dev);
    pool_destroy(host);
    *bytes_per_sec = best;
    return st;
}

double cost_predict_step(const cost_rates *r, const op_profile *work, const link_traffic *moved)
{
    return cost_predict(r, work) + link_seconds_waited(r, moved);
}

st_status cost_of_dry_step(model_run *r, int64_t batch, int ranks, const cost_rates *rates,
                           pool_stats *dev, pool_stats *host, double *sec)
{
    op_profile work;
    link_traffic before;
    link_traffic_read(r->m, &before);
    ops_profile_start();
    const st_status st = flow_step_dry(r, batch, ranks, dev, host);
    ops_profile_stop(&work);
    const link_traffic moved = link_traffic_since(r->m, &before);
    *sec = cost_predict_step(rates, &work, &moved);
    return st;
}

/* Fills a schedule's predicted peaks (a dry step) and time. */
static void predict(model_run *r, int64_t batch, int ranks, const cost_rates *rates, size_t budget,
                    schedule *s)
{
    schedule_describe(s);
    s->fits = false;
    s->refused = model_set_checkpointing(r->m, &s->cs, NULL, 0) != ST_OK; /* never fits */
    if (s->refused) return;
    pool_stats dev, host;
    if (cost_of_dry_step(r, batch, ranks, rates, &dev, &host, &s->sec)) return; /* too large: never fits */
    s->peak_device = dev.peak;
    s->peak_host = host.peak;
    s->fits = !budget || dev.peak <= budget;
}

void search_uniform(model_run *r, int64_t batch, int ranks, const cost_rates *rates, size_t budget,
                    schedule *best, bool *found, int *searched)
{
    block_seq *seqs;
    int n = 0;
    bool softmax = true, keeps = true; /* every sequence's blocks have softmax attention, can keep its output */
    for (int q = 0, nq = model_sequences(r->m, &seqs); q < nq; q++) {
        n += seqs[q].n;
        softmax &= !seqs[q].n || seqs[q].blocks[0].kind->softmax_attention;
        keeps &= !seqs[q].n || seqs[q].blocks[0].kind->keeps_attention_output;
    }
    *found = false, *searched = 0;
    for (int enabled = 0; enabled <= 1; enabled++)
        for (int b = 0; b < (enabled ? 4 : 1); b++)
            for (int k = 1; k <= (enabled ? n : 1); k++)
                for (int stride = k; stride <= (enabled ? n : 1); stride++)
                    for (int o = 0; o <= (softmax ? 1 + keeps : 0); o++) { /* nothing, offload, keep output */
                        const bool ffn = b == BACKEND_TORCH_FFN || b == BACKEND_UNSLOTH_FFN;
                        if (o == 2 && (!enabled || ffn)) continue; /* refused, or nothing to keep */
                        schedule s = {.cs = {.enabled = enabled, .backend = (ckpt_backend)b, .interval = k,
                                             .stride = stride, .offload_attention = o == 1,
                                             .keep_attention_output = o == 2}};
                        predict(r, batch, ranks, rates, budget, &s);
                        (*searched)++;
                        if (!s.fits) continue;
                        if (!*found || s.sec < best->sec - 1e-9 ||
                            (s.sec <= best->sec + 1e-9 && s.peak_device < best->peak_device))
                            *best = s, *found = true;
                    }
}

/* The most blocks musubi_blocks_to_swap may swap in m: all the manager counts but one, under LoRA or LyCORIS (full
 * fine-tuning is refused with swap); 0 where the family has no block swap, or under ramtorch or group offload. */
static int swap_limit(model *m)
{
    const int n = model_swappable_blocks(m);
    const model_config *mc = model_get_config(m);
    return n > 1 && mc->lora_rank && !mc->ramtorch && !mc->group_offload ? n - 1 : 0; /* swap is refused with them */
}

/* r on the config make(ctx, sets) builds, and its train_batch_size. */
static st_status open_run(config_factory make, void *ctx, const char *sets, model_run *r, int64_t *batch)
{
    config *cfg = make(ctx, sets);
    if (!cfg) return ST_ERR_INVALID;
    const st_status st = model_run_open(cfg, false, r);
    *batch = config_int(cfg, "train_batch_size");
    config_free(cfg);
    return st;
}

static const ckpt_settings place_candidates[] = {
    {.interval = 1, .stride = 1}, /* first: where it fits, more swapped blocks only add link time */
    {.enabled = true, .backend = BACKEND_TORCH_FFN, .interval = 1, .stride = 1},
    {.enabled = true, .backend = BACKEND_TORCH, .interval = 1, .stride = 1},
    {.enabled = true, .backend = BACKEND_UNSLOTH_FFN, .interval = 1, .stride = 1},
    {.enabled = true, .backend = BACKEND_UNSLOTH, .interval = 1, .stride = 1},
    {.enabled = true, .backend = BACKEND_TORCH, .interval = 1, .stride = 1, .offload_attention = true},
    {.enabled = true, .backend = BACKEND_UNSLOTH, .interval = 1, .stride = 1, .offload_attention = true},
};

/* One placement (how's placing fields): the candidates on the config with its overrides, the fastest that fits in
 * *p; whether the first (no checkpointing) fits in *plain, the longest block sequence in *longest. Streams take no
 * checkpointing (SimpleTuner turns them off under gradient_checkpointing): the first candidate alone. An error where
 * the config refuses the placement (group offload on a U-Net, under full fine-tuning, with ramtorch). */
static st_status place_one(config_factory make, void *ctx, int ranks, const cost_rates *rates, size_t budget,
                           const schedule *how, placement *p, bool *plain, int *longest)
{
    char sets[CKPT_TEXT_MAX] = "gradient_checkpointing=false;";
    const size_t at = how->group_stream ? strlen(sets) : 0;
    place_sets(how, sets + at, sizeof sets - at);
    model_run r;
    int64_t batch;
    const st_status st = open_run(make, ctx, sets, &r, &batch);
    if (st) return st;
    block_seq *seqs;
    for (int q = 0, nq = model_sequences(r.m, &seqs); q < nq; q++) *longest = seqs[q].n > *longest ? seqs[q].n : *longest;
    *p = (placement){.group_blocks = how->group_blocks, .stream = how->group_stream};
    const size_t n = how->group_stream ? 1 : sizeof place_candidates / sizeof *place_candidates;
    for (size_t k = 0; k < n; k++) {
        schedule s = *how;
        s.cs = place_candidates[k];
        predict(&r, batch, ranks, rates, budget, &s);
        if (!k) *plain = s.fits;
        if (s.fits && (!p->fits || s.sec < p->sec))
            snprintf(p->name, sizeof p->name, "%s", s.name), p->sec = s.sec, p->peak_device = s.peak_device,
                p->fits = true, p->candidate = (int)k;
    }
    model_run_close(&r);
    return ST_OK;
}

const placement *advice_placement(const advice *a)
{
    if (a->grouped_pick >= 0) return &a->grouped[a->grouped_pick];
    return a->placed >= 0 && a->placed < a->n_placed && a->place[a->placed].fits ? &a->place[a->placed] : NULL;
}

/* One group offload setting tried (an error where the config refuses it), the answer where it is faster than the
 * answer so far (the fewer changes on a tie); whether the run fits it without checkpointing in *plain. */
static st_status place_group(config_factory make, void *ctx, int ranks, const cost_rates *rates, size_t budget,
                             int k, bool stream, advice *a, bool *plain, int *longest)
{
    const schedule how = {.places = true, .group_blocks = k, .group_stream = stream};
    placement *p = &a->grouped[a->n_grouped];
    const st_status st = place_one(make, ctx, ranks, rates, budget, &how, p, plain, longest);
    if (st) return st;
    const placement *best = advice_placement(a);
    if (p->fits && (!best || p->sec < best->sec)) a->grouped_pick = a->n_grouped, a->placed = 0;
    a->n_grouped++;
    return ST_OK;
}

/* Group offload's settings, where nothing fits without checkpointing at swap 0 (else they only add link time): 1, 2,
 * 4, ... blocks a group up to the longest sequence, and one block a group streamed where one block a group fits
 * without checkpointing (streams take none). It stops where nothing fits (a larger group holds more) or the run fits
 * without checkpointing (a larger group computes the same), and where the config refuses group offload. */
static void place_groups(config_factory make, void *ctx, int ranks, const cost_rates *rates, size_t budget, advice *a)
{
    int longest = 1;
    for (int k = 1; k <= longest && a->n_grouped + 2 <= GROUP_PLACE_MAX; k *= 2) {
        bool plain = false, streamed;
        if (place_group(make, ctx, ranks, rates, budget, k, false, a, &plain, &longest)) return;
        if (k == 1 && plain && place_group(make, ctx, ranks, rates, budget, 1, true, a, &streamed, &longest)) return;
        if (plain || !a->grouped[a->n_grouped - 1 - (k == 1 && plain)].fits) return;
    }
}

/* The placement: every count of swapped blocks under the candidates, each count's fastest that fits in a->place;
 * the count whose one is fastest (the fewer blocks on a tie) in a->placed, -1 when none fits; then group offload's
 * settings. The counts stop at the first where no checkpointing fits: a count above it computes no less and waits
 * for more weights. */
static st_status place(config_factory make, void *ctx, int ranks, const cost_rates *rates, size_t budget, advice *a)
{
    a->placed = a->grouped_pick = -1;
    bool plain = false, plain_at_0 = false;
    int longest = 0;
    for (int n = 0; n <= a->swappable && n < PLACE_MAX && !plain; n++) {
        const schedule how = {.places = true, .blocks_to_swap = n};
        placement *p = &a->place[n];
        const st_status st = place_one(make, ctx, ranks, rates, budget, &how, p, &plain, &longest);
        if (st) return st;
        plain_at_0 |= !n && plain;
        a->n_placed = n + 1;
        if (p->fits && (a->placed < 0 || p->sec < a->place[a->placed].sec)) a->placed = n;
    }
    if (!plain_at_0) place_groups(make, ctx, ranks, rates, budget, a);
    return ST_OK;
}

/* The placement the search and the planner run at: the answer's, else (none fits) the most the placement moves:
 * every swappable block, or group offload at one block a group. */
static schedule placed_as(const advice *a)
{
    schedule s = {.places = true};
    const placement *p = advice_placement(a);
    if (p && p->group_blocks) s.group_blocks = p->group_blocks, s.group_stream = p->stream;
    else if (p) s.blocks_to_swap = a->placed;
    else if (a->swappable) s.blocks_to_swap = a->swappable;
    else s.group_blocks = 1;
    return s;
}

/* Whether the config make builds takes group offload: SimpleTuner refuses it for U-Nets, with ramtorch or block swap
 * and under full fine-tuning, as the model does. */
static bool takes_group_offload(config_factory make, void *ctx)
{
    model_run r;
    int64_t batch;
    if (open_run(make, ctx, "enable_group_offload=true;group_offload_type=block_level", &r, &batch)) return false;
    model_run_close(&r);
    return true;
}

const schedule *advice_pick(const advice *a)
{
    /* the plan only where it is predicted faster by more than the cost model's error (a few per cent on dit-s2,
     * BENCHMARKS.md); else the uniform schedule, which anyone can read */
    if (a->planned_found && (!a->found || a->planned.sec < a->best.sec * (1 - ADVICE_PLAN_MARGIN))) return &a->planned;
    return a->found ? &a->best : NULL;
}

/* The search, the per-block planner seeded with its answer, and the pick in a bucket plan's words: "none" where it
 * checkpoints nothing and offloads nothing, else the plan it makes of r's model. */
static st_status search_and_plan(model_run *r, int64_t batch, int ranks, size_t budget, bool search, FILE *progress,
                                 advice *a)
{
    if (search) search_uniform(r, batch, ranks, &a->rates, budget, &a->best, &a->found, &a->searched);
    st_status st = plan_blocks(r, batch, ranks, &a->rates, budget, a->found ? &a->best : NULL, progress, &a->planned,
                               &a->planned_found);
    const schedule *pick = st ? NULL : advice_pick(a);
    if (pick && !pick->cs.enabled && !pick->cs.offload_attention) snprintf(a->plan_words, sizeof a->plan_words, "none");
    else if (pick && !(st = model_set_checkpointing(r->m, &pick->cs, NULL, 0)))
        model_plan_text(r->m, a->plan_words, sizeof a->plan_words);
    return st;
}

/* The placement where the model can swap blocks (a->swappable) or take group offload, then the search and the
 * per-block planner at the placement it chose (the most it moves where nothing fits), their answers saying it; else
 * the two alone. */
static st_status place_and_plan(config_factory make, void *ctx, int ranks, size_t budget, bool search, FILE *progress,
                                advice *a)
{
    model_run r;
    int64_t batch;
    st_status st = open_run(make, ctx, "", &r, &batch);
    if (st) return st;
    a->swappable = swap_limit(r.m);
    a->placed = 0, a->grouped_pick = -1;
    schedule how = {0};
    if (a->swappable || takes_group_offload(make, ctx)) {
        model_run_close(&r);
        st = place(make, ctx, ranks, &a->rates, budget, a);
        how = placed_as(a);
        how.places = a->swappable || how.group_blocks; /* swap 0 said where blocks can swap */
        char sets[CKPT_TEXT_MAX] = "";
        if (how.places) place_sets(&how, sets, sizeof sets);
        if (!st) st = open_run(make, ctx, sets, &r, &batch);
        if (st) return st;
    }
    const placement *chosen = advice_placement(a);
    if (!search && chosen) { /* the placement's answer stands for the search's */
        a->best = (schedule){.cs = place_candidates[chosen->candidate]};
        predict(&r, batch, ranks, &a->rates, budget, &a->best);
        a->found = a->best.fits, a->searched = 1;
    }
    st = search_and_plan(&r, batch, ranks, budget, search, progress, a);
    model_run_close(&r);
    schedule *answers[] = {&a->best, &a->planned};
    for (int k = 0; k < 2 && how.places; k++) {
        answers[k]->places = true;
        answers[k]->blocks_to_swap = how.blocks_to_swap;
        answers[k]->group_blocks = how.group_blocks, answers[k]->group_stream = how.group_stream;
        schedule_describe(answers[k]);
    }
    return st;
}

st_status advise_placement(config_factory make, void *ctx, size_t budget, const cost_rates *rates, advice *a)
{
    *a = (advice){.rule_choice = -1, .rates = *rates, .placed = -1, .grouped_pick = -1};
    model_run r;
    int64_t batch;
    st_status st = open_run(make, ctx, "", &r, &batch);
    if (st) return st;
    a->swappable = swap_limit(r.m);
    model_run_close(&r);
    return place(make, ctx, 1, rates, budget, a);
}

st_status advise_at_rates(config_factory make, void *ctx, size_t budget, const cost_rates *rates, FILE *progress,
                          advice *a)
{
    *a = (advice){.rule_choice = -1, .rates = *rates, .grouped_pick = -1,
                  .link_rate = rates->link_per_byte > 0 ? 1 / rates->link_per_byte : 0};
    model_run r;
    int64_t batch;
    st_status st = open_run(make, ctx, "", &r, &batch);
    if (st) return st;
    block_seq *seqs;
    for (int q = 0, nq = model_sequences(r.m, &seqs); q < nq; q++) a->n_blocks += seqs[q].n;
    model_run_close(&r);
    return place_and_plan(make, ctx, 1, budget, true, progress, a);
}

/* advise_options.rates_preset's config: the preset at batch 4, with the overrides */
static config *preset_config(void *ctx, const char *sets)
{
    char json[160];
    config *cfg = NULL;
    snprintf(json, sizeof json, "{\"model_preset\": \"%.100s\", \"train_batch_size\": 4}", (const char *)ctx);
    if (config_parse(json, "the calibration", &cfg) || config_set_all(cfg, sets)) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* The rates: one real step without checkpointing (or block swap: the fixed seconds then hold no link time, which the
 * cost model prices apart) of r's config, or of the options' preset; refused, rather than run into swap or the OOM
 * killer, where the config's step needs more memory than the machine has. */
static st_status calibrate(config_factory make, void *ctx, model_run *r, int64_t batch, int ranks,
                           const advise_options *o, FILE *progress, advice *a)
{
    const ckpt_settings none = {.interval = 1, .stride = 1};
    pool_stats dev, host;
    const double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    st_status st = model_set_checkpointing(r->m, &none, NULL, 0);
    if (!st && !o->rates_preset) st = flow_step_dry(r, batch, ranks, &dev, &host);
    if (!st && !o->rates_preset && have > 0 && (double)(dev.peak + host.peak) > have)
        st = st_fail(ST_ERR_UNSUPPORTED, "advise calibrates this machine's rates with a real step of the config "
                     "without checkpointing, which needs %.2f GiB; this machine has %.2f GiB of memory (the dry "
                     "numbers of every schedule, without times: segtrain plan, or bench_plan; or --rates-from dit-s2)",
                     (double)(dev.peak + host.peak) / 1073741824.0, have / 1073741824.0);
    op_profile measured;
    sweep_cell calibration;
    const schedule calibrated = {.cs = none, .places = !o->rates_preset && swap_limit(r->m) > 0};
    if (!st && o->rates_preset) st = measure(preset_config, (void *)o->rates_preset, calibrated, progress, &a->t_none,
                                             &measured, &calibration);
    else if (!st) st = measure(make, ctx, calibrated, progress, &a->t_none, &measured, &calibration);
    if (st) return st;
    a->t_none_min = calibration.sec_min, a->t_none_max = calibration.sec_max;
    a->noisy = sweep_cell_noisy(&calibration);
    a->rates = cost_calibrate(&measured, a->t_none);
    if (o->rates_preset) a->rates.fixed = 0; /* the preset's optimizer and bookkeeping say nothing of this model's */
    a->rates.link_per_byte = a->link_rate > 0 ? 1 / a->link_rate : 0;
    return ST_OK;
}

st_status advise(config_factory make, void *ctx, size_t budget, const advise_options *o, FILE *progress, advice *a)
{
    *a = (advice){.rule_choice = -1, .grouped_pick = -1, .link_rate = o->link_rate};
    st_status st = o->link_rate > 0 ? ST_OK : link_bandwidth_measure(&a->link_rate);
    a->link_measured = o->link_rate <= 0;
    if (st) return st;
    model_run r;
    int64_t batch;
    const int ranks = 1; /* a process's step, the whole optimizer state */
    if ((st = open_run(make, ctx, "", &r, &batch))) return st;
    block_seq *seqs;
    for (int q = 0, nq = model_sequences(r.m, &seqs); q < nq; q++) a->n_blocks += seqs[q].n;
    if ((st = calibrate(make, ctx, &r, batch, ranks, o, progress, a))) {
        model_run_close(&r);
        return st;
    }
    const int n = a->n_blocks ? a->n_blocks : 1;
    const ckpt_settings none = {.interval = 1, .stride = 1};

    /* SimpleTuner's decision rule: none; torch-ffn, torch, unsloth-ffn, unsloth; then a wider interval while it fits */
    const ckpt_backend order[] = {BACKEND_TORCH_FFN, BACKEND_TORCH, BACKEND_UNSLOTH_FFN, BACKEND_UNSLOTH};
    schedule s = {.cs = none};
    predict(&r, batch, ranks, &a->rates, budget, &s);
    a->rule[a->n_rule++] = s;
    if (s.fits) a->rule_choice = 0;
    for (int i = 0; i < 4 && a->rule_choice < 0; i++) {
        s = (schedule){.cs = {.enabled = true, .backend = order[i], .interval = 1, .stride = 1}};
        predict(&r, batch, ranks, &a->rates, budget, &s);
        a->rule[a->n_rule++] = s;
        if (s.fits) a->rule_choice = a->n_rule - 1;
    }
    for (int k = 2; a->rule_choice > 0 && k <= n && a->n_rule < 16; k++) {
        schedule wider = a->rule[a->rule_choice];
        if (wider.cs.backend == BACKEND_TORCH_FFN || wider.cs.backend == BACKEND_UNSLOTH_FFN) break; /* no segments */
        wider.cs.interval = wider.cs.stride = k;
        predict(&r, batch, ranks, &a->rates, budget, &wider);
        a->rule[a->n_rule++] = wider;
        if (!wider.fits) break;
        a->rule_choice = a->n_rule - 1;
    }

    model_run_close(&r);
    return place_and_plan(make, ctx, ranks, budget, !o->quick, progress, a);
}
