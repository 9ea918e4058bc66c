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
        return st_fail(ST_ERR_UNSUPPORTED,
                       "gradient_checkpointing_segment_stride: %d is smaller than gradient_checkpointing_interval %d, "
                       "so segments would overlap (valid: a stride >= the interval)",
                       c.stride, c.interval);
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
    free(p->host_input);
    *p = (seq_plan){0};
}

st_status plan_sequence(const ckpt_settings *cs, const block_seq *seq, const char *family, const bool *captured,
                        seq_plan *out)
{
    *out = (seq_plan){.n = seq->n};
    out->mode = calloc((size_t)(seq->n ? seq->n : 1), sizeof *out->mode);
    out->segments = calloc((size_t)(seq->n ? seq->n : 1), sizeof *out->segments);
    out->host_input = calloc((size_t)(seq->n ? seq->n : 1), sizeof *out->host_input);
    if (!out->mode || !out->segments || !out->host_input) {
        seq_plan_free(out);
        return st_fail(ST_ERR_INTERNAL, "out of host memory");
    }
    if (seq->n == 0) return ST_OK;
    const block_kind *kind = seq->blocks[0].kind;
    if (cs->offload_attention && !kind->softmax_attention) {
        seq_plan_free(out);
        return st_fail(ST_ERR_UNSUPPORTED,
                       "gradient_checkpointing_offload_attention: true moves softmax attention's saved tensors, but "
                       "the %s family's %s have no softmax attention (valid for %s: false)",
                       family, seq->name, family);
    }
    out->attention_offload = cs->offload_attention; /* applies with checkpointing off too */
    if (!cs->enabled) return ST_OK;                  /* every block MODE_KEEP */
    const bool ffn = cs->backend == BACKEND_TORCH_FFN || cs->backend == BACKEND_UNSLOTH_FFN;
    if (ffn && !kind->ffn_split) {
        seq_plan_free(out);
        return st_fail(ST_ERR_UNSUPPORTED,
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
    if (cs->backend == BACKEND_UNSLOTH)
        for (int g = 0; g < n_segs; g++) out->host_input[segs[g].first] = true;
    if (cs->backend == BACKEND_UNSLOTH_FFN)
        for (int i = 0; i < seq->n; i++) out->host_input[i] = out->mode[i] == MODE_FFN;
    out->host_input_tag = cs->backend == BACKEND_UNSLOTH ? MEM_BOUNDARIES : MEM_ACTIVATIONS;
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

size_t seq_plan_offload_bytes(const seq_plan *p, const block_seq *seq)
{
    size_t bytes = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->host_input[i]) bytes += state_bytes(seq);
        if (p->attention_offload) bytes += seq->blocks[i].kind->offloaded_bytes(&seq->blocks[i]);
    }
    return bytes;
}

void seq_plan_simulate_forward(const seq_plan *p, const block_seq *seq, mem_sim *dev, mem_sim *host)
{
    const size_t S = state_bytes(seq);
    for (int i = 0; i < p->n; i++) {
        const block *b = &seq->blocks[i];
        const segment *g = segment_of(p, i);
        if (g && g->first == i) sim_retag(dev, MEM_ACTIVATIONS, MEM_BOUNDARIES, S);
        if (p->host_input[i]) sim_take(host, p->host_input_tag, S);
        b->kind->simulate(b, keep_of(p->mode[i]), SIM_FORWARD, p->attention_offload, dev, host);
        if (p->host_input[i]) sim_drop(dev, p->host_input_tag, S);
        if (g && g->first != i) sim_drop(dev, MEM_ACTIVATIONS, S); /* a segment's intermediate state */
    }
}

/* The unit of backward that block i ends: its segment, or itself. */
static segment unit_of(const seq_plan *p, int i)
{
    const segment *g = segment_of(p, i);
    return g ? *g : (segment){i, i};
}

static void simulate_fetch(const seq_plan *p, const block_seq *seq, segment u, mem_sim *dev, mem_sim *host)
{
    for (int j = u.first; j <= u.last; j++) {
        if (p->host_input[j]) sim_take(dev, p->host_input_tag, state_bytes(seq));
        if (p->attention_offload)
            seq->blocks[j].kind->simulate(&seq->blocks[j], KEEP_ALL, SIM_PREFETCH, true, dev, host);
    }
}

void seq_plan_simulate_backward(const seq_plan *p, const block_seq *seq, mem_sim *dev, mem_sim *host)
{
    const size_t S = state_bytes(seq);
    const bool off = p->attention_offload;
    bool fetched = false;
    for (int i = p->n - 1; i >= 0; i--) {
        const segment u = unit_of(p, i);
        if (!fetched) simulate_fetch(p, seq, u, dev, host);
        if (u.first > 0) simulate_fetch(p, seq, unit_of(p, u.first - 1), dev, host); /* one unit ahead */
        fetched = true;
        if (p->host_input[u.first]) sim_drop(host, p->host_input_tag, S);
        if (!segment_of(p, i)) {
            const block *b = &seq->blocks[i];
            b->kind->simulate(b, keep_of(p->mode[i]), SIM_BACKWARD, off, dev, host);
            sim_drop(dev, MEM_ACTIVATIONS, b->kind->kept_bytes(b, keep_of(p->mode[i])));
            sim_drop(dev, p->host_input[i] ? p->host_input_tag : MEM_ACTIVATIONS, S);
            continue;
        }
        for (int j = u.first; j <= u.last; j++) /* recompute, keeping */
            seq->blocks[j].kind->simulate(&seq->blocks[j], KEEP_ALL, SIM_RECOMPUTE, off, dev, host);
        sim_drop(dev, MEM_ACTIVATIONS, S); /* the recomputed output of the last block: its successor has it */
        for (int j = u.last; j >= u.first; j--) {
            const block *b = &seq->blocks[j];
            b->kind->simulate(b, KEEP_ALL, SIM_BACKWARD, false, dev, host);
            sim_drop(dev, MEM_ACTIVATIONS, b->kind->kept_bytes(b, KEEP_ALL));
            if (j > u.first) sim_drop(dev, MEM_ACTIVATIONS, S);
        }
        sim_drop(dev, MEM_BOUNDARIES, S);
        i = u.first;
    }
}
