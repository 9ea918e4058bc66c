/* The per-block planner: each block keeps, recomputes its feed-forward, or sits in a checkpointed segment, chosen
 * by dynamic programming over the blocks for the least predicted time whose peak fits the budget.
 *
 * The model the program optimises, over the blocks of every sequence in forward order (backward meets them in the
 * reverse order, so a block's prefix is what is held while it runs backward):
 *   held(b)  a kept block's input and activations K, an FFN-only block's input and attention side F, a segment's
 *            boundary B (its first block's input; the rest of the segment holds nothing);
 *   a unit's backward (a kept or FFN-only block, or a segment recomputed whole) needs the held bytes of every
 *            earlier unit plus the K of each of its blocks, and that must fit the allowance M;
 *   time     the step without checkpointing plus, per block, what its recompute costs (probed: a dry step with that
 *            block alone checkpointed, or FFN-only, priced by the cost model).
 * K, F and B are the block kinds' own byte counts; a host copy (+ host: the boundary or the feed-forward's input,
 * + attention-offload: the attention side A) takes its bytes off what the block holds, and attention offload takes
 * attention off a segment's recompute, as + attention-output does at the cost of each segment block holding its
 * attention's output O. What the model leaves out (the transients of each op, the skips a segment
 * recomputes, the unit whose host copies come back while the one after it runs backward) the dry run of the chosen
 * plan measures: the allowance M is searched by bisection so that the dry run's peak, which is exact, fits the
 * budget. A copy costs no time in the cost model: the copy thread hides it behind compute (BENCHMARKS.md, offload). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/advise.h"
#include "segtrain/objective.h"

typedef struct chain_block {
    int seq, index;
    size_t keep, ffn, boundary, attention; /* device bytes held until its backward: K, F, B; A what offloading its
                                              attention side frees of K or F (offload_device_bytes) */
    size_t output;                         /* what a checkpointed block keeps of its attention (+ attention-output) */
    double t_ckpt, t_ckpt_att, t_ckpt_out, t_ffn; /* seconds its recompute adds: whole, whole but attention (its
                                                     side offloaded, or its output kept), feed-forward */
    bool can_ffn, can_host, can_att, can_out;
} chain_block;

typedef struct planner {
    model_run *r;
    int64_t batch;
    int ranks;
    const cost_rates *rates;
    int n, n_seq;
    block_seq *seqs;
    chain_block *b;
    int probes;
} planner;

/* The bytes of block i's input state that the block before made (the whole input for block 0): what holding
 * its input adds to what is already held. */
static size_t input_bytes_new(const block_seq *s, int i)
{
    state_map in, before;
    block_state_map(s, i, &in);
    size_t bytes = 0;
    if (i > 0) block_state_map(s, i - 1, &before);
    for (int k = 0; k < in.n_in; k++)
        if (i == 0 || before.out_from[k] < 0) bytes += (size_t)in.in_numel[k] * state_elem_size(s);
    return bytes;
}

/* Plans the model by `text` (a gradient_checkpointing_plan), runs a step dry, and gives its peak and seconds. */
static st_status try_plan(planner *p, const char *text, pool_stats *dev, double *sec)
{
    ckpt_settings cs = {.enabled = text[0] != 0, .interval = 1, .stride = 1};
    snprintf(cs.plan, sizeof cs.plan, "%s", text);
    st_status st = model_set_checkpointing(p->r->m, &cs, NULL, 0);
    pool_stats host;
    p->probes++;
    return st ? st : cost_of_dry_step(p->r, p->batch, p->ranks, p->rates, dev, &host, sec);
}

/* Appends one sequence's runs: every block kept but block `one`, which does `word` (one < 0: none). */
static size_t probe_runs(char *buf, size_t size, int n, int one, const char *word)
{
    size_t at = 0;
    if (one < 0) return (size_t)snprintf(buf, size, "0-%d keep", n - 1);
    if (one > 0) at += (size_t)snprintf(buf + at, size - at, "0-%d keep | ", one - 1);
    at += (size_t)snprintf(buf + at, size - at, "%d %s", one, word);
    if (one < n - 1) at += (size_t)snprintf(buf + at, size - at, " | %d-%d keep", one + 1, n - 1);
    return at;
}

/* A plan with every block kept but chain block c, which does `word`. */
static void probe_text(const planner *p, int c, const char *word, char *buf, size_t size)
{
    size_t at = 0;
    for (int q = 0; q < p->n_seq && at < size; q++) {
        if (!p->seqs[q].n) continue;
        at += (size_t)snprintf(buf + at, size - at, "%s%s: ", at ? " / " : "", p->seqs[q].name);
        if (at < size)
            at += probe_runs(buf + at, size - at, p->seqs[q].n, c >= 0 && p->b[c].seq == q ? p->b[c].index : -1, word);
    }
}

/* Each block's bytes, and its recompute's seconds from one probe per block and mode. */
static st_status measure_blocks(planner *p, double *t_none)
{
    char text[PLAN_TEXT_MAX];
    pool_stats dev;
    probe_text(p, -1, "", text, sizeof text);
    st_status st = try_plan(p, text, &dev, t_none);
    for (int c = 0; c < p->n && !st; c++) {
        chain_block *cb = &p->b[c];
        const block_seq *s = &p->seqs[cb->seq];
        const block *blk = &s->blocks[cb->index];
        cb->boundary = input_bytes_new(s, cb->index);
        cb->keep = cb->boundary + blk->kind->kept_bytes(blk, KEEP_ALL);
        cb->can_ffn = blk->kind->ffn_split;
        cb->can_att = blk->kind->softmax_attention;
        cb->can_host = !seq_shares_tensors(s);
        cb->ffn = cb->boundary + (cb->can_ffn ? blk->kind->kept_bytes(blk, KEEP_ATTENTION) : 0);
        cb->attention = cb->can_att ? blk->kind->offload_device_bytes(blk) : 0;
        cb->can_out = blk->kind->keeps_attention_output;
        cb->output = cb->can_out ? blk->kind->kept_bytes(blk, KEEP_ATTENTION_OUTPUT) : 0;
        const struct {
            bool on;
            const char *word;
            double *sec;
        } probe[] = {{true, "ckpt", &cb->t_ckpt},
                     {cb->can_att, "ckpt + attention-offload", &cb->t_ckpt_att},
                     {cb->can_out, "ckpt + attention-output", &cb->t_ckpt_out},
                     {cb->can_ffn, "ffn", &cb->t_ffn}};
        for (size_t k = 0; k < sizeof probe / sizeof *probe && !st; k++) {
            if (!probe[k].on) continue;
            double sec;
            probe_text(p, c, probe[k].word, text, sizeof text);
            st = try_plan(p, text, &dev, &sec);
            *probe[k].sec = fmax(0, sec - *t_none);
        }
        if (!cb->can_att) cb->t_ckpt_att = cb->t_ckpt;
        if (!cb->can_out) cb->t_ckpt_out = cb->t_ckpt;
    }
    return st;
}

/* ---- the program ---- */

#define BUCKETS 2048
#define SEGMENT_MAX 64 /* the longest segment the program tries */

/* What a block alone can do: kept or FFN-only, each with its host copies. */
typedef struct single_option {
    block_mode mode;
    bool host, att;
} single_option;

static const single_option singles[] = {{MODE_KEEP, false, false}, {MODE_KEEP, false, true},
                                        {MODE_FFN, false, false},  {MODE_FFN, true, false},
                                        {MODE_FFN, false, true},   {MODE_FFN, true, true}};
#define N_SINGLES ((int)(sizeof singles / sizeof *singles))

typedef struct step_from {
    int c, h;  /* the state it came from */
    int unit;  /* -1 - k: singles[k]; e * 8 + flags >= 0: a segment c..e (flags: 1 host, 2 attention offload,
                  4 attention output) */
} step_from;

/* Device bytes a block holds until its backward as singles[k], and whether it may; its recompute's seconds. */
static bool single_hold(const chain_block *b, int k, size_t *hold, double *cost)
{
    const single_option o = singles[k];
    if ((o.mode == MODE_FFN && !b->can_ffn) || (o.host && !b->can_host) || (o.att && !b->can_att)) return false;
    size_t h = o.mode == MODE_KEEP ? b->keep : b->ffn, less = (o.host ? b->boundary : 0) + (o.att ? b->attention : 0);
    *hold = h > less ? h - less : 0;
    *cost = o.mode == MODE_FFN ? b->t_ffn : 0;
    return true;
}

/* A unit of the program's answer, as a run: its blocks and what they do ("ffn + host", "ckpt"). */
typedef struct unit_run {
    int seq, first, last, width; /* width: a segment's, 0 for a single block */
    char word[64];
} unit_run;

static unit_run unit_of(const planner *p, const step_from *f)
{
    const chain_block *b = &p->b[f->c];
    unit_run u = {.seq = b->seq, .first = b->index, .last = b->index};
    if (f->unit < 0) {
        const single_option o = singles[-1 - f->unit];
        snprintf(u.word, sizeof u.word, "%s%s%s", o.mode == MODE_KEEP ? "keep" : "ffn", o.host ? " + host" : "",
                 o.att ? " + attention-offload" : "");
        return u;
    }
    const int e = f->unit / 8, flags = f->unit % 8;
    u.last = p->b[e].index;
    u.width = u.last - u.first + 1;
    snprintf(u.word, sizeof u.word, "ckpt%s%s%s", flags & 1 ? " + host" : "", flags & 2 ? " + attention-offload" : "",
             flags & 4 ? " + attention-output" : "");
    return u;
}

/* The units as plan text: adjacent blocks that do the same join into one run, adjacent segments of one width
 * into "in segments of". False when it does not fit. */
static bool units_text(const planner *p, const unit_run *units, int n, char *text, size_t size)
{
    size_t at = 0;
    text[0] = 0;
    for (int u = 0; u < n && at < size;) {
        int v = u;
        while (v + 1 < n && units[v + 1].seq == units[u].seq && units[v + 1].width == units[u].width &&
               !strcmp(units[v + 1].word, units[u].word))
            v++;
        const bool first = u == 0 || units[u - 1].seq != units[u].seq;
        if (first) at += (size_t)snprintf(text + at, size - at, "%s%s: ", u ? " / " : "", p->seqs[units[u].seq].name);
        else at += (size_t)snprintf(text + at, size - at, " | ");
        if (at >= size) break;
        if (units[u].first == units[v].last) at += (size_t)snprintf(text + at, size - at, "%d", units[u].first);
        else at += (size_t)snprintf(text + at, size - at, "%d-%d", units[u].first, units[v].last);
        if (at < size) at += (size_t)snprintf(text + at, size - at, " %s", units[u].word);
        if (at < size && units[u].width && v > u)
            at += (size_t)snprintf(text + at, size - at, " in segments of %d", units[u].width);
        u = v + 1;
    }
    return at < size;
}

/* The least-time plan whose units fit the allowance, as plan text; false when none does. */
static bool program(const planner *p, double allowance, char *text, size_t size)
{
    const int n = p->n;
    const double q = allowance / BUCKETS; /* bytes a bucket; held bytes round up, so the check stays safe */
    double *best = malloc((size_t)(n + 1) * (BUCKETS + 1) * sizeof *best);
    step_from *from = malloc((size_t)(n + 1) * (BUCKETS + 1) * sizeof *from);
    if (!best || !from || allowance <= 0) {
        free(best), free(from);
        return false;
    }
    for (size_t k = 0; k < (size_t)(n + 1) * (BUCKETS + 1); k++) best[k] = INFINITY;
    best[0] = 0;
#define AT(c, h) ((size_t)(c) * (BUCKETS + 1) + (size_t)(h))
#define RELAX(c2, h2, t2, unit2)                                                                                      \
    do {                                                                                                              \
        if ((t2) < best[AT(c2, h2)]) best[AT(c2, h2)] = (t2), from[AT(c2, h2)] = (step_from){c, h, unit2};           \
    } while (0)
    for (int c = 0; c < n; c++)
        for (int h = 0; h <= BUCKETS; h++) {
            const double t = best[AT(c, h)], held = h * q;
            if (!isfinite(t)) continue;
            const chain_block *b = &p->b[c];
            for (int k = 0; k < N_SINGLES && held + (double)b->keep <= allowance; k++) {
                size_t hold;
                double cost;
                const int nh = single_hold(b, k, &hold, &cost) ? h + (int)ceil((double)hold / q) : BUCKETS + 1;
                if (nh <= BUCKETS) RELAX(c + 1, nh, t + cost, -1 - k);
            }
            for (int flags = 0; flags < 8; flags++) {
                if (((flags & 1) && !b->can_host) || ((flags & 2) && !b->can_att) || ((flags & 4) && !b->can_out) ||
                    (flags & 6) == 6)
                    continue;
                double need = held, cost = t, hold = flags & 1 ? 0 : (double)b->boundary;
                for (int e = c; e < n && e < c + SEGMENT_MAX && p->b[e].seq == b->seq; e++) {
                    const chain_block *be = &p->b[e];
                    need += (double)be->keep;
                    cost += flags & 2 ? be->t_ckpt_att : flags & 4 ? be->t_ckpt_out : be->t_ckpt;
                    hold += flags & 4 ? (double)be->output : 0; /* every block of it keeps its attention's output */
                    const int nh = h + (int)ceil(hold / q);
                    if (need > allowance || nh > BUCKETS) break;
                    RELAX(e + 1, nh, cost, e * 8 + flags);
                }
            }
        }
    int h_end = -1;
    for (int h = 0; h <= BUCKETS; h++)
        if (isfinite(best[AT(n, h)]) && (h_end < 0 || best[AT(n, h)] < best[AT(n, h_end)])) h_end = h;
    if (h_end >= 0) {
        /* walk back from the end, then read the units forward */
        unit_run *units = malloc((size_t)n * sizeof *units);
        int count = 0;
        for (int c = n, h = h_end; units && c > 0; count++) {
            const step_from f = from[AT(c, h)];
            units[n - 1 - count] = unit_of(p, &f);
            c = f.c, h = f.h;
        }
        if (!units || !units_text(p, units + n - count, count, text, size)) h_end = -1;
        free(units);
    }
#undef RELAX
#undef AT
    free(best), free(from);
    return h_end >= 0;
}

st_status plan_blocks(model_run *r, int64_t batch, int ranks, const cost_rates *rates, size_t budget,
                      const schedule *seed, FILE *progress, schedule *out, bool *found)
{
    *found = false;
    planner p = {.r = r, .batch = batch, .ranks = ranks, .rates = rates};
    p.n_seq = model_sequences(r->m, &p.seqs);
    for (int q = 0; q < p.n_seq; q++) p.n += p.seqs[q].n;
    p.b = calloc((size_t)(p.n ? p.n : 1), sizeof *p.b);
    if (!p.b) return st_host_oom("the per-block planner's table");
    for (int q = 0, c = 0; q < p.n_seq; q++)
        for (int i = 0; i < p.seqs[q].n; i++) p.b[c++] = (chain_block){.seq = q, .index = i};
    if (progress) {
        fprintf(progress, "per-block planner: probing each of %d blocks with a dry step...\n", p.n);
        fflush(progress);
    }
    double t_none;
    st_status st = measure_blocks(&p, &t_none);
    double all_kept = 0;
    for (int c = 0; c < p.n; c++) all_kept += (double)p.b[c].keep;
    /* the allowance: between nothing and everything kept; the largest whose dry peak fits */
    double lo = 0, hi = all_kept * 1.01 + 1;
    char text[PLAN_TEXT_MAX], best_text[PLAN_TEXT_MAX] = "";
    for (int round = 0; round < 14 && !st && p.n; round++) {
        const double mid = round == 0 ? hi : (lo + hi) / 2;
        if (!program(&p, mid, text, sizeof text)) {
            lo = mid; /* the program needs more room than this */
            continue;
        }
        pool_stats dev;
        double sec;
        st = try_plan(&p, text, &dev, &sec);
        const bool fits = !st && (!budget || dev.peak <= budget);
        if (fits && (!*found || sec < out->sec))
            *found = true, snprintf(best_text, sizeof best_text, "%s", text),
            *out = (schedule){.sec = sec, .peak_device = dev.peak, .fits = true};
        if (fits && round == 0) break; /* everything it wanted fits */
        if (fits) lo = mid;
        else hi = mid;
    }
    if (!st && seed && seed->fits && seed->cs.enabled) {
        /* the uniform seed, in a plan's words, is a candidate too: the planner never answers slower than it */
        pool_stats dev;
        double sec;
        st = model_set_checkpointing(r->m, &seed->cs, NULL, 0);
        if (!st) model_plan_text(r->m, text, sizeof text);
        if (!st) st = try_plan(&p, text, &dev, &sec);
        if (!st && (!budget || dev.peak <= budget) && (!*found || sec < out->sec))
            *found = true, snprintf(best_text, sizeof best_text, "%s", text),
            *out = (schedule){.sec = sec, .peak_device = dev.peak, .fits = true};
    }
    if (!st && *found) {
        /* the model holds the best plan again, read back in the plan's own words */
        pool_stats dev, host;
        ckpt_settings cs = {.enabled = true, .interval = 1, .stride = 1};
        snprintf(cs.plan, sizeof cs.plan, "%s", best_text);
        st = model_set_checkpointing(r->m, &cs, NULL, 0);
        if (!st) model_plan_text(r->m, cs.plan, sizeof cs.plan);
        if (!st) st = cost_of_dry_step(r, batch, ranks, rates, &dev, &host, &out->sec);
        out->cs = cs;
        out->peak_device = dev.peak, out->peak_host = host.peak;
        schedule_describe(out);
    }
    if (progress && !st)
        fprintf(progress, "per-block planner: %d dry steps%s\n", p.probes, *found ? "" : "; no plan fits");
    free(p.b);
    return st;
}
