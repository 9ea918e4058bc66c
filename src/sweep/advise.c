#include "segtrain/advise.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "segtrain/model_run.h"
#include "segtrain/objective.h"
#include "segtrain/sweep.h"
#include "segtrain/train.h"

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
    if (c->offload_attention && at < sizeof s->name) snprintf(s->name + at, sizeof s->name - at, " + attention offload");
    if (c->keep_attention_output && at < sizeof s->name)
        snprintf(s->name + at, sizeof s->name - at, " + attention output kept");
    ckpt_settings_text(c, s->sets, sizeof s->sets);
}

/* Measures one schedule: the median seconds of a few steps, and their op profile. */
static st_status measure(config_factory make, void *ctx, ckpt_settings cs, FILE *progress, double *sec,
                         op_profile *work, sweep_cell *out)
{
    schedule s = {.cs = cs};
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

st_status cost_of_dry_step(model_run *r, int64_t batch, int ranks, const cost_rates *rates,
                           pool_stats *dev, pool_stats *host, double *sec)
{
    op_profile work;
    ops_profile_start();
    const st_status st = flow_step_dry(r, batch, ranks, dev, host);
    ops_profile_stop(&work);
    *sec = cost_predict(rates, &work);
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

const schedule *advice_pick(const advice *a)
{
    /* the plan only where it is predicted faster by more than the cost model's error (a few per cent on dit-s2,
     * BENCHMARKS.md); else the uniform schedule, which anyone can read */
    if (a->planned_found && (!a->found || a->planned.sec < a->best.sec * (1 - ADVICE_PLAN_MARGIN))) return &a->planned;
    return a->found ? &a->best : NULL;
}

/* The search, the per-block planner seeded with its answer, and the pick in a bucket plan's words: "none" where it
 * checkpoints nothing and offloads nothing, else the plan it makes of r's model. */
static st_status search_and_plan(model_run *r, int64_t batch, int ranks, size_t budget, FILE *progress, advice *a)
{
    search_uniform(r, batch, ranks, &a->rates, budget, &a->best, &a->found, &a->searched);
    st_status st = plan_blocks(r, batch, ranks, &a->rates, budget, a->found ? &a->best : NULL, progress, &a->planned,
                               &a->planned_found);
    const schedule *pick = st ? NULL : advice_pick(a);
    if (pick && !pick->cs.enabled && !pick->cs.offload_attention) snprintf(a->plan_words, sizeof a->plan_words, "none");
    else if (pick && !(st = model_set_checkpointing(r->m, &pick->cs, NULL, 0)))
        model_plan_text(r->m, a->plan_words, sizeof a->plan_words);
    return st;
}

st_status advise_at_rates(config_factory make, void *ctx, size_t budget, const cost_rates *rates, FILE *progress,
                          advice *a)
{
    *a = (advice){.rule_choice = -1, .rates = *rates};
    config *cfg = make(ctx, "");
    if (!cfg) return ST_ERR_INVALID;
    model_run r;
    st_status st = model_run_open(cfg, false, &r);
    const int64_t batch = config_int(cfg, "train_batch_size");
    config_free(cfg);
    if (st) return st;
    block_seq *seqs;
    for (int q = 0, nq = model_sequences(r.m, &seqs); q < nq; q++) a->n_blocks += seqs[q].n;
    st = search_and_plan(&r, batch, 1, budget, progress, a);
    model_run_close(&r);
    return st;
}

st_status advise(config_factory make, void *ctx, size_t budget, FILE *progress, advice *a)
{
    *a = (advice){.rule_choice = -1};
    config *cfg = make(ctx, "");
    if (!cfg) return ST_ERR_INVALID;
    model_run r;
    st_status st = model_run_open(cfg, false, &r);
    const int64_t batch = config_int(cfg, "train_batch_size");
    const int ranks = 1; /* a process's step, the whole optimizer state */
    config_free(cfg);
    if (st) return st;
    block_seq *seqs;
    for (int q = 0, nq = model_sequences(r.m, &seqs); q < nq; q++) a->n_blocks += seqs[q].n;

    /* calibration: one real step without checkpointing gives this machine's rates; refused, rather than run into
     * swap or the OOM killer, where that step needs more memory than the machine has */
    const ckpt_settings none = {.interval = 1, .stride = 1};
    pool_stats dev, host;
    const double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    st = model_set_checkpointing(r.m, &none, NULL, 0);
    if (!st) st = flow_step_dry(&r, batch, ranks, &dev, &host);
    if (!st && have > 0 && (double)(dev.peak + host.peak) > have)
        st = st_fail(ST_ERR_UNSUPPORTED, "advise calibrates this machine's rates with a real step of the config "
                     "without checkpointing, which needs %.2f GiB; this machine has %.2f GiB of memory (the dry "
                     "numbers of every schedule, without times: segtrain plan, or bench_plan)",
                     (double)(dev.peak + host.peak) / 1073741824.0, have / 1073741824.0);
    if (st) {
        model_run_close(&r);
        return st;
    }
    op_profile measured;
    sweep_cell calibration;
    st = measure(make, ctx, none, progress, &a->t_none, &measured, &calibration);
    if (st) {
        model_run_close(&r);
        return st;
    }
    a->t_none_min = calibration.sec_min, a->t_none_max = calibration.sec_max;
    a->noisy = sweep_cell_noisy(&calibration);
    a->rates = cost_calibrate(&measured, a->t_none);
    const int n = a->n_blocks ? a->n_blocks : 1;

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

    st = search_and_plan(&r, batch, ranks, budget, progress, a);
    model_run_close(&r);
    return st;
}
