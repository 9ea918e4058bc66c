#include "segtrain/advise.h"

#include <stdio.h>
#include <stdlib.h>
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
    else {
        at = (size_t)snprintf(s->name, sizeof s->name, "%s interval %d", ckpt_backend_name(c->backend), c->interval);
        if (c->stride != c->interval) at += (size_t)snprintf(s->name + at, sizeof s->name - at, " stride %d", c->stride);
    }
    if (c->offload_attention && at < sizeof s->name) snprintf(s->name + at, sizeof s->name - at, " + attention offload");
    ckpt_settings_text(c, s->sets, sizeof s->sets);
}

/* A scratch output folder holds only the run's step log. */
void remove_scratch(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/train_log.jsonl", dir);
    remove(path);
    remove(dir);
}

/* Measures one schedule: the median seconds of a few steps. */
static st_status measure(config_factory make, void *ctx, ckpt_settings cs, FILE *progress, double *sec)
{
    schedule s = {.cs = cs};
    schedule_describe(&s);
    char tmpdir[] = "/tmp/segtrain-advise-XXXXXX";
    if (!mkdtemp(tmpdir)) return st_fail(ST_ERR_IO, "cannot create a scratch folder in /tmp");
    config *cfg = make(ctx, s.sets);
    st_status st = cfg ? sweep_measured_config(cfg, 3, tmpdir) : ST_ERR_INVALID;
    if (st) {
        config_free(cfg);
        remove_scratch(tmpdir);
        return st;
    }
    sweep_cell cell = {0};
    sweep_run_cell(cfg, 1, 2, &cell);
    config_free(cfg);
    remove_scratch(tmpdir);
    if (cell.status != CELL_OK) return st_fail(ST_ERR_INTERNAL, "calibrating with %s: %s", s.name, cell.error);
    *sec = cell.sec_median;
    if (progress) fprintf(progress, "calibration: %-40s %.3f s/step (measured)\n", s.name, *sec);
    return ST_OK;
}

/* What the plan set on m recomputes, over all its sequences: blocks in segments, segments' last blocks (which
 * make no output), and feed-forward halves. */
typedef struct recompute_count {
    int ckpt, last, ffn;
} recompute_count;

static recompute_count count_recompute(model *m)
{
    recompute_count n = {0};
    block_seq *seqs;
    for (int q = 0, nq = model_sequences(m, &seqs); q < nq; q++) {
        const seq_plan *p = model_plan(m, q);
        for (int i = 0; i < p->n; i++) n.ckpt += p->mode[i] == MODE_CKPT, n.ffn += p->mode[i] == MODE_FFN;
        n.last += p->n_segments;
    }
    return n;
}

/* Fills a schedule's predicted peaks (a dry step) and time. */
static void predict(model_run *r, int64_t batch, size_t optimizer, const advice *a, size_t budget, schedule *s)
{
    schedule_describe(s);
    s->fits = false;
    if (model_set_checkpointing(r->m, &s->cs, NULL, 0)) return; /* refused: never fits */
    pool_stats dev, host;
    if (flow_step_dry(r, batch, optimizer, &dev, &host)) return; /* a batch too large never fits */
    s->peak_device = dev.peak;
    s->peak_host = host.peak;
    s->fits = !budget || dev.peak <= budget;
    const recompute_count n = count_recompute(r->m);
    s->sec = a->t_none + n.last * a->r_recompute + (n.ckpt - n.last) * a->r_inner + n.ffn * a->r_ffn -
             (s->cs.offload_attention ? n.ckpt * a->r_attention : 0);
}

static double positive(double x) { return x > 0 ? x : 0; }

st_status advise(config_factory make, void *ctx, size_t budget, FILE *progress, advice *a)
{
    *a = (advice){.rule_choice = -1};
    config *cfg = make(ctx, "");
    if (!cfg) return ST_ERR_INVALID;
    model_run r;
    char warning[256];
    st_status st = model_run_open(cfg, false, &r, warning);
    const int64_t batch = config_int(cfg, "train_batch_size");
    const size_t optimizer = st ? 0 : train_optimizer_bytes(cfg, model_params(r.m)->grad_count);
    config_free(cfg);
    if (st) return st;
    block_seq *seqs;
    for (int q = 0, nq = model_sequences(r.m, &seqs); q < nq; q++) a->n_blocks += seqs[q].n;
    const bool softmax = a->n_blocks && seqs[0].blocks[0].kind->softmax_attention;

    /* calibration */
    double t_layer = 0, t_pairs = 0, t_ffn = 0, t_offload = 0;
    const ckpt_settings none = {.interval = 1, .stride = 1}, layer = {.enabled = true, .interval = 1, .stride = 1};
    ckpt_settings ffn = layer, off = layer, pairs = layer;
    pairs.interval = 2;
    pairs.stride = 2;
    ffn.backend = BACKEND_TORCH_FFN;
    off.offload_attention = true;
    st = measure(make, ctx, none, progress, &a->t_none);
    if (!st) st = measure(make, ctx, layer, progress, &t_layer);
    if (!st && a->n_blocks > 1) st = measure(make, ctx, pairs, progress, &t_pairs);
    if (!st) st = measure(make, ctx, ffn, progress, &t_ffn);
    if (!st && softmax) st = measure(make, ctx, off, progress, &t_offload);
    if (st) {
        model_run_close(&r);
        return st;
    }
    const int n = a->n_blocks ? a->n_blocks : 1;
    a->r_recompute = positive((t_layer - a->t_none) / n);
    a->r_inner = a->r_recompute;
    if (a->n_blocks > 1 && !model_set_checkpointing(r.m, &pairs, NULL, 0)) { /* interval 2: n/2 last, n/2 inner */
        const recompute_count c = count_recompute(r.m);
        if (c.ckpt > c.last) a->r_inner = positive((t_pairs - a->t_none - c.last * a->r_recompute) / (c.ckpt - c.last));
    }
    a->r_ffn = positive((t_ffn - a->t_none) / n);
    a->r_attention = softmax ? positive((t_layer - t_offload) / n) : 0;
    if (a->r_attention > a->r_recompute) a->r_attention = a->r_recompute;

    /* SimpleTuner's decision rule: none; torch-ffn, torch, unsloth-ffn, unsloth; then a wider interval while it fits */
    const ckpt_backend order[] = {BACKEND_TORCH_FFN, BACKEND_TORCH, BACKEND_UNSLOTH_FFN, BACKEND_UNSLOTH};
    schedule s = {.cs = none};
    predict(&r, batch, optimizer, a, budget, &s);
    a->rule[a->n_rule++] = s;
    if (s.fits) a->rule_choice = 0;
    for (int i = 0; i < 4 && a->rule_choice < 0; i++) {
        s = (schedule){.cs = {.enabled = true, .backend = order[i], .interval = 1, .stride = 1}};
        predict(&r, batch, optimizer, a, budget, &s);
        a->rule[a->n_rule++] = s;
        if (s.fits) a->rule_choice = a->n_rule - 1;
    }
    for (int k = 2; a->rule_choice > 0 && k <= n && a->n_rule < 16; k++) {
        schedule wider = a->rule[a->rule_choice];
        if (wider.cs.backend == BACKEND_TORCH_FFN || wider.cs.backend == BACKEND_UNSLOTH_FFN) break; /* no segments */
        wider.cs.interval = wider.cs.stride = k;
        predict(&r, batch, optimizer, a, budget, &wider);
        a->rule[a->n_rule++] = wider;
        if (!wider.fits) break;
        a->rule_choice = a->n_rule - 1;
    }

    /* the search */
    for (int enabled = 0; enabled <= 1; enabled++)
        for (int b = 0; b < (enabled ? 4 : 1); b++)
            for (int k = 1; k <= (enabled ? n : 1); k++)
                for (int stride = k; stride <= (enabled ? n : 1); stride++)
                    for (int o = 0; o <= (softmax ? 1 : 0); o++) {
                        s = (schedule){.cs = {.enabled = enabled, .backend = (ckpt_backend)b, .interval = k,
                                              .stride = stride, .offload_attention = o}};
                        predict(&r, batch, optimizer, a, budget, &s);
                        a->searched++;
                        if (!s.fits) continue;
                        if (!a->found || s.sec < a->best.sec - 1e-9 ||
                            (s.sec <= a->best.sec + 1e-9 && s.peak_device < a->best.peak_device))
                            a->best = s, a->found = true;
                    }
    model_run_close(&r);
    return ST_OK;
}
