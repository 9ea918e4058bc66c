/* The checkpoint settings, the schedule and the plan of a block sequence. */
#include "segtrain/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ckpt_backend_name(ckpt_backend b)
{
    static const char *names[] = {"torch", "torch-ffn", "unsloth", "unsloth-ffn"};
    return names[b];
}

st_status ckpt_settings_from(const config *cfg, ckpt_settings *out, char *warning, size_t warning_size)
{
    ckpt_settings c = {.enabled = config_bool(cfg, "gradient_checkpointing"),
                       .interval = (int)config_int(cfg, "gradient_checkpointing_interval"),
                       .offload_attention = config_bool(cfg, "gradient_checkpointing_offload_attention")};
    const char *backend = config_string(cfg, "gradient_checkpointing_backend");
    for (ckpt_backend b = BACKEND_TORCH; b <= BACKEND_UNSLOTH_FFN; b++)
        if (!strcmp(backend, ckpt_backend_name(b))) c.backend = b;
    int64_t stride = config_int(cfg, "gradient_checkpointing_segment_stride");
    c.stride = stride ? (int)stride : c.interval;
    if (c.stride < c.interval)
        return st_fail(ST_ERR_INVALID,
                       "gradient_checkpointing_segment_stride: %d is smaller than gradient_checkpointing_interval %d, "
                       "so segments would overlap (valid: a stride >= the interval)",
                       c.stride, c.interval);
    if (c.enabled && (c.backend == BACKEND_UNSLOTH || c.backend == BACKEND_UNSLOTH_FFN))
        return st_fail(ST_ERR_INVALID,
                       "gradient_checkpointing_backend: \"%s\" moves tensors to host memory, which this build cannot "
                       "do yet (valid here: torch, torch-ffn)",
                       backend);
    if (c.offload_attention)
        return st_fail(ST_ERR_INVALID,
                       "gradient_checkpointing_offload_attention: true moves attention activations to host memory, "
                       "which this build cannot do yet (valid here: false)");
    if (warning) {
        warning[0] = 0;
        const char *keys[] = {"gradient_checkpointing_interval", "gradient_checkpointing_segment_stride",
                              "gradient_checkpointing_backend"};
        size_t at = 0;
        for (int i = 0; i < 3 && !c.enabled; i++)
            if (config_is_set(cfg, keys[i]) && at < warning_size)
                at += (size_t)snprintf(warning + at, warning_size - at, "%s%s", at ? ", " : "", keys[i]);
        if (at && at < warning_size)
            snprintf(warning + at, warning_size - at, " %s nothing while gradient_checkpointing is false",
                     strchr(warning, ',') ? "do" : "does");
    }
    *out = c;
    return ST_OK;
}

int plan_segments(int n, int k, int s, bool per_block, segment *out)
{
    int count = 0;
    for (int start = 0; start < n; start += s) {
        int end = start + k < n ? start + k : n; /* the last window is cut at n */
        if (per_block)
            for (int i = start; i < end; i++) out[count++] = (segment){i, i};
        else
            out[count++] = (segment){start, end - 1};
    }
    return count;
}

void seq_plan_free(seq_plan *p)
{
    free(p->mode);
    free(p->segments);
    *p = (seq_plan){0};
}

st_status plan_sequence(const ckpt_settings *cs, const block_seq *seq, const char *family, const bool *captured,
                        seq_plan *out)
{
    *out = (seq_plan){.n = seq->n};
    out->mode = calloc((size_t)(seq->n ? seq->n : 1), sizeof *out->mode);
    out->segments = calloc((size_t)(seq->n ? seq->n : 1), sizeof *out->segments);
    if (!out->mode || !out->segments) {
        seq_plan_free(out);
        return st_fail(ST_ERR_INTERNAL, "out of host memory");
    }
    if (!cs->enabled || seq->n == 0) return ST_OK; /* every block MODE_KEEP */
    const block_kind *kind = seq->blocks[0].kind;
    const bool ffn = cs->backend == BACKEND_TORCH_FFN || cs->backend == BACKEND_UNSLOTH_FFN;
    if (ffn && !kind->ffn_split) {
        seq_plan_free(out);
        return st_fail(ST_ERR_INVALID,
                       "gradient_checkpointing_backend: \"%s\" recomputes a block's feed-forward half, but the %s "
                       "family's %s have no attention/feed-forward split (valid for %s: torch, unsloth)",
                       ckpt_backend_name(cs->backend), family, seq->name, family);
    }
    /* hidden-state capture needs each captured block's output to exist after forward: only segment edges do */
    char which[96] = "";
    size_t at = 0;
    for (int i = 0; captured && i < seq->n && at < sizeof which; i++)
        if (captured[i]) at += (size_t)snprintf(which + at, sizeof which - at, "%s%d", at ? ", " : "", i);
    const bool per_block = at > 0 && !ffn && cs->interval > 1;
    segment *segs = out->segments;
    int n_segs = plan_segments(seq->n, cs->interval, cs->stride, per_block, segs);
    for (int g = 0; g < n_segs; g++)
        for (int i = segs[g].first; i <= segs[g].last; i++) out->mode[i] = ffn ? MODE_FFN : MODE_CKPT;
    out->n_segments = ffn ? 0 : n_segs;
    if (per_block)
        snprintf(out->fallback, sizeof out->fallback,
                 "fell back to single-block segments: capture_hidden_states needs the outputs of blocks %s", which);
    return ST_OK;
}

void seq_plan_format(const seq_plan *p, char *buf, size_t size)
{
    static const char *word[] = {"keep", "ckpt", "ffn"};
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < p->n && at < size;) {
        int j = i, width = 0;
        if (p->mode[i] == MODE_CKPT) {
            /* adjacent segments of one width print as one run */
            const segment *g = NULL;
            for (int k = 0; k < p->n_segments; k++)
                if (p->segments[k].first == i) g = &p->segments[k];
            width = g->last - g->first + 1;
            j = g->last;
            for (const segment *h = g + 1; h < p->segments + p->n_segments && h->first == j + 1 &&
                                           h->last - h->first + 1 == width;
                 h++)
                j = h->last;
        } else {
            while (j + 1 < p->n && p->mode[j + 1] == p->mode[i]) j++;
        }
        at += (size_t)snprintf(buf + at, size - at, i ? " | " : "");
        if (at < size && i == j) at += (size_t)snprintf(buf + at, size - at, "%d %s", i, word[p->mode[i]]);
        else if (at < size) at += (size_t)snprintf(buf + at, size - at, "%d-%d %s", i, j, word[p->mode[i]]);
        if (at < size && width && j - i + 1 > width)
            at += (size_t)snprintf(buf + at, size - at, " in segments of %d", width);
        i = j + 1;
    }
}

static keep_level keep_of(block_mode m) { return m == MODE_KEEP ? KEEP_ALL : m == MODE_FFN ? KEEP_ATTENTION : KEEP_NOTHING; }

/* The segment a block belongs to, or NULL. */
static const segment *segment_of(const seq_plan *p, int i)
{
    for (int g = 0; g < p->n_segments; g++)
        if (p->segments[g].first <= i && i <= p->segments[g].last) return &p->segments[g];
    return NULL;
}

void seq_plan_simulate_forward(const seq_plan *p, const block_seq *seq, mem_sim *sim)
{
    const size_t S = state_bytes(seq);
    for (int i = 0; i < p->n; i++) {
        const block *b = &seq->blocks[i];
        const segment *g = segment_of(p, i);
        if (g && g->first == i) sim_retag(sim, MEM_ACTIVATIONS, MEM_BOUNDARIES, S);
        b->kind->simulate(b, keep_of(p->mode[i]), false, sim);
        if (g && g->first != i) sim_drop(sim, MEM_ACTIVATIONS, S); /* a segment's intermediate state */
    }
}

void seq_plan_simulate_backward(const seq_plan *p, const block_seq *seq, mem_sim *sim)
{
    const size_t S = state_bytes(seq);
    for (int i = p->n - 1; i >= 0; i--) {
        const segment *g = segment_of(p, i);
        if (!g) {
            const block *b = &seq->blocks[i];
            b->kind->simulate(b, keep_of(p->mode[i]), true, sim);
            sim_drop(sim, MEM_ACTIVATIONS, b->kind->kept_bytes(b, keep_of(p->mode[i])) + S);
            continue;
        }
        for (int j = g->first; j <= g->last; j++) /* recompute, keeping */
            seq->blocks[j].kind->simulate(&seq->blocks[j], KEEP_ALL, false, sim);
        sim_drop(sim, MEM_ACTIVATIONS, S); /* the recomputed output of the last block: its successor has it */
        for (int j = g->last; j >= g->first; j--) {
            const block *b = &seq->blocks[j];
            b->kind->simulate(b, KEEP_ALL, true, sim);
            sim_drop(sim, MEM_ACTIVATIONS, b->kind->kept_bytes(b, KEEP_ALL));
            if (j > g->first) sim_drop(sim, MEM_ACTIVATIONS, S);
        }
        sim_drop(sim, MEM_BOUNDARIES, S);
        i = g->first;
    }
}
