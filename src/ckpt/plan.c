/* The checkpoint settings, the schedule and the plan of a block sequence. */
#include "segtrain/plan.h"

#include <limits.h>
#include <stdarg.h>
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
    const char *keys[] = {"gradient_checkpointing_interval", "gradient_checkpointing_segment_stride",
                          "gradient_checkpointing_backend", "gradient_checkpointing_keep_attention_output"};
    for (int i = 0; i < 2; i++) /* the schedule is int arithmetic, where a larger value would wrap */
        if (config_int(cfg, keys[i]) > INT_MAX)
            return st_fail(ST_ERR_INVALID, "%s: %lld is too large (valid: up to %d)", keys[i],
                           (long long)config_int(cfg, keys[i]), INT_MAX);
    ckpt_settings c = {.enabled = config_bool(cfg, "gradient_checkpointing"),
                       .interval = (int)config_int(cfg, keys[0]),
                       .offload_attention = config_bool(cfg, "gradient_checkpointing_offload_attention"),
                       .keep_attention_output = config_bool(cfg, keys[3])};
    const char *backend = config_string(cfg, keys[2]);
    for (ckpt_backend b = BACKEND_TORCH; b <= BACKEND_UNSLOTH_FFN; b++)
        if (!strcmp(backend, ckpt_backend_name(b))) c.backend = b;
    const int stride = (int)config_int(cfg, keys[1]);
    c.stride = stride ? stride : c.interval;
    if (c.stride < c.interval)
        return st_fail(ST_ERR_UNSUPPORTED,
                       "gradient_checkpointing_segment_stride: %d is smaller than gradient_checkpointing_interval %d, "
                       "so segments would overlap (valid: a stride >= the interval)",
                       c.stride, c.interval);
    if (c.keep_attention_output && c.offload_attention)
        return st_fail(ST_ERR_UNSUPPORTED, "gradient_checkpointing_keep_attention_output: true keeps attention's "
                       "output on the device, and gradient_checkpointing_offload_attention: true moves it to the host "
                       "(valid: one of them)");
    if (c.keep_attention_output && c.enabled && (c.backend == BACKEND_TORCH_FFN || c.backend == BACKEND_UNSLOTH_FFN))
        return st_fail(ST_ERR_UNSUPPORTED, "gradient_checkpointing_keep_attention_output: true with backend \"%s\", "
                       "whose blocks keep their whole attention side already (valid with it: false; or backend torch, "
                       "unsloth)", ckpt_backend_name(c.backend));
    if (warning) {
        warning[0] = 0;
        size_t at = 0;
        for (int i = 0; i < 4 && !c.enabled; i++)
            if (config_is_set(cfg, keys[i]) && at < warning_size)
                at += (size_t)snprintf(warning + at, warning_size - at, "%s%s", at ? ", " : "", keys[i]);
        if (at && at < warning_size)
            snprintf(warning + at, warning_size - at, " %s nothing while gradient_checkpointing is false",
                     strchr(warning, ',') ? "do" : "does");
    }
    *out = c;
    return ST_OK;
}

void ckpt_settings_text(const ckpt_settings *cs, char *buf, size_t size)
{
    snprintf(buf, size,
             "gradient_checkpointing=%s;gradient_checkpointing_backend=%s;gradient_checkpointing_interval=%d;"
             "gradient_checkpointing_segment_stride=%d;gradient_checkpointing_offload_attention=%s;"
             "gradient_checkpointing_keep_attention_output=%s",
             cs->enabled ? "true" : "false", ckpt_backend_name(cs->backend), cs->interval, cs->stride,
             cs->offload_attention ? "true" : "false", cs->keep_attention_output ? "true" : "false");
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

/* A family's state maps must chain (each block's output is the next one's input) and end in distinct new
 * tensors: the caller frees the last state on its own, and gives its gradient as tensors no block frees. The fixed signature (no states hook) chains by construction. */
static st_status check_states(const block_seq *seq)
{
    bool described = false;
    for (int i = 0; i < seq->n; i++) described |= seq->blocks[i].kind->states != NULL;
    state_map prev = {0}, map;
    for (int i = 0; described && i < seq->n; i++) {
        block_state_map(seq, i, &map);
        bool ok = map.n_in >= 1 && map.n_in <= STATE_MAX && map.n_out >= 1 && map.n_out <= STATE_MAX;
        for (int k = 0; ok && k < map.n_out; k++) ok = map.out_from[k] < map.n_in && map.out_from[k] >= -STATE_MAX;
        for (int k = 0; ok && i > 0 && k < map.n_in; k++) ok = map.n_in == prev.n_out && map.in_numel[k] == prev.out_numel[k];
        for (int k = 0; ok && i == seq->n - 1 && k < map.n_out; k++) /* distinct new tensors */
            for (int j = 0; ok && j <= k; j++) ok = map.out_from[k] < 0 && (j == k || map.out_from[j] != map.out_from[k]);
        if (!ok) return st_fail(ST_ERR_INTERNAL, "%s: block %d's states do not chain with its neighbours'", seq->name, i);
        prev = map;
    }
    return ST_OK;
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
        return st_host_oom("the checkpoint plan of %s", seq->name);
    }
    if (seq->n == 0) return ST_OK;
    st_status st = check_states(seq);
    if (st) {
        seq_plan_free(out);
        return st;
    }
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
    if (cs->keep_attention_output && !kind->keeps_attention_output) {
        seq_plan_free(out);
        return st_fail(ST_ERR_UNSUPPORTED,
                       "gradient_checkpointing_keep_attention_output: true keeps softmax attention's output, but "
                       "the %s family's %s do not keep theirs (valid for %s: false)",
                       family, seq->name, family);
    }
    out->attention_output = cs->keep_attention_output;
    const bool ffn = cs->backend == BACKEND_TORCH_FFN || cs->backend == BACKEND_UNSLOTH_FFN;
    if (ffn && !kind->ffn_split) {
        seq_plan_free(out);
        return st_fail(ST_ERR_UNSUPPORTED,
                       "gradient_checkpointing_backend: \"%s\" recomputes a block's feed-forward half, but the %s "
                       "family's %s have no attention/feed-forward split (valid for %s: torch, unsloth)",
                       ckpt_backend_name(cs->backend), family, seq->name, family);
    }
    /* a host copy of a state is only worth its device bytes if nothing reads them meanwhile; skips are read by
     * blocks far later */
    const bool to_host = cs->backend == BACKEND_UNSLOTH || cs->backend == BACKEND_UNSLOTH_FFN;
    if (to_host && seq_shares_tensors(seq)) {
        seq_plan_free(out);
        return st_fail(ST_ERR_UNSUPPORTED,
                       "gradient_checkpointing_backend: \"%s\" moves %s to host memory, but the %s family's %s share "
                       "skip tensors that later blocks still read on the device (valid for %s: torch, torch-ffn)",
                       ckpt_backend_name(cs->backend),
                       cs->backend == BACKEND_UNSLOTH ? "segment boundaries" : "feed-forward inputs", family, seq->name,
                       family);
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

keep_level seq_plan_keep(const seq_plan *p, int i)
{
    const block_mode m = p->mode[i];
    return m == MODE_KEEP  ? KEEP_ALL
           : m == MODE_FFN ? KEEP_ATTENTION
                           : p->attention_output ? KEEP_ATTENTION_OUTPUT : KEEP_NOTHING;
}

const segment *seq_plan_segment(const seq_plan *p, int i)
{
    for (int g = 0; g < p->n_segments; g++)
        if (p->segments[g].first <= i && i <= p->segments[g].last) return &p->segments[g];
    return NULL;
}

/* Bytes of block i's input state, slot by slot (only asked of states that share nothing). */
static size_t input_bytes(const block_seq *seq, int i)
{
    state_map map;
    block_state_map(seq, i, &map);
    size_t bytes = 0;
    for (int k = 0; k < map.n_in; k++) bytes += (size_t)map.in_numel[k] * sizeof(float);
    return bytes;
}

size_t seq_plan_offload_bytes(const seq_plan *p, const block_seq *seq)
{
    size_t bytes = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->host_input[i]) bytes += input_bytes(seq, i); /* never a sharing sequence: plan_sequence refuses */
        if (p->attention_offload) bytes += seq->blocks[i].kind->offloaded_bytes(&seq->blocks[i]);
    }
    return bytes;
}

/* ---- the states between blocks, by tensor ----
 *
 * States share tensors (a skip passed on from block to block): a walk over the plan's forward gives each tensor
 * an id, so that a boundary's description counts each tensor once and says which block made it. A tensor goes
 * with the state that holds it, so the walk needs no memory beyond the current state (and cannot fail). */

typedef struct walk_tensor {
    int id;
    int creator; /* the block whose forward made it; -1: the sequence's input */
    size_t bytes;
    bool counted; /* seq_plan_boundary_bytes: already held at an earlier boundary */
} walk_tensor;

typedef struct walk_state {
    int n, next_id;
    walk_tensor t[STATE_MAX];
} walk_state;

/* Block 0's input state: the sequence's input. */
static walk_state walk_start(const block_seq *seq)
{
    state_map map;
    block_state_map(seq, 0, &map);
    walk_state w = {.n = map.n_in};
    for (int k = 0; k < map.n_in; k++)
        w.t[k] = (walk_tensor){.id = w.next_id++, .creator = -1, .bytes = (size_t)map.in_numel[k] * sizeof(float)};
    return w;
}

/* Block i's input state to its output state: passed-on tensors keep their ids, new ones get fresh ids. */
static void walk_step(walk_state *w, const block_seq *seq, int i)
{
    state_map map;
    block_state_map(seq, i, &map);
    int made[STATE_MAX]; /* per new tensor: the output slot that holds it */
    for (int j = 0; j < STATE_MAX; j++) made[j] = -1;
    walk_state out = {.n = map.n_out, .next_id = w->next_id};
    for (int k = 0; k < map.n_out; k++) {
        const int from = map.out_from[k];
        if (from >= 0) out.t[k] = w->t[from];
        else if (made[-1 - from] >= 0) out.t[k] = out.t[made[-1 - from]];
        else
            out.t[made[-1 - from] = k] = (walk_tensor){.id = out.next_id++, .creator = i,
                                                       .bytes = (size_t)map.out_numel[k] * sizeof(float)};
    }
    *w = out;
}

/* The state the executor holds at block `first`'s input. */
static walk_state walk_to(const block_seq *seq, int first)
{
    walk_state w = walk_start(seq);
    for (int i = 0; i < first; i++) walk_step(&w, seq, i);
    return w;
}

segment seq_plan_unit(const seq_plan *p, int i)
{
    const segment *g = seq_plan_segment(p, i);
    return g ? *g : (segment){i, i};
}

/* ---- boundaries, each tensor once ---- */

/* Appends to buf at *at, never past size. */
static void put(char *buf, size_t size, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t size, size_t *at, const char *fmt, ...)
{
    if (*at >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *at, size - *at, fmt, ap);
    va_end(ap);
    *at += n > 0 ? (size_t)n : 0;
}

static void put_bytes(char *buf, size_t size, size_t *at, size_t bytes)
{
    char b[24];
    put(buf, size, at, "%s", st_bytes(b, bytes));
}

size_t seq_plan_boundary(const seq_plan *p, const block_seq *seq, int which, char *desc, size_t desc_size)
{
    if (desc_size) desc[0] = 0;
    if (which < 0 || which >= p->n_segments || !seq->n) return 0;
    const int first = p->segments[which].first;
    const walk_state w = walk_to(seq, first), *st = &w;
    /* the stream: what the block before made (the sequence's input for block 0); skips: older tensors */
    size_t stream = 0, skips = 0;
    int n_stream = 0, n_skips = 0, also_skip = -1;
    for (int k = 0; k < st->n; k++) {
        bool seen = false;
        for (int j = 0; j < k; j++) seen |= st->t[j].id == st->t[k].id;
        const walk_tensor *t = &st->t[k];
        if (seen && t->creator == first - 1) also_skip = t->creator;
        if (seen) continue;
        if (t->creator == first - 1) stream += t->bytes, n_stream++;
        else skips += t->bytes, n_skips++;
    }
    size_t at = 0;
    if (n_stream > 1 && seq->state_names[0]) { /* named streams, one by one (mmdit: image stream + text stream) */
        for (int k = 0; k < st->n && k < seq->state_n; k++) {
            put(desc, desc_size, &at, "%s%s ", k ? " + " : "", seq->state_names[k]);
            put_bytes(desc, desc_size, &at, st->t[k].bytes);
        }
    } else {
        if (n_stream > 1) put(desc, desc_size, &at, "%d streams ", n_stream);
        else put(desc, desc_size, &at, "stream ");
        put_bytes(desc, desc_size, &at, stream);
    }
    if (also_skip >= 0) put(desc, desc_size, &at, " (also block %d's skip)", also_skip);
    if (n_skips) {
        put(desc, desc_size, &at, " + skip%s of block%s ", n_skips > 1 ? "s" : "", n_skips > 1 ? "s" : "");
        int listed = 0;
        for (int k = 0; k < st->n; k++) {
            const walk_tensor *t = &st->t[k];
            bool seen = t->creator == first - 1;
            for (int j = 0; j < k; j++) seen |= st->t[j].id == st->t[k].id;
            if (!seen) put(desc, desc_size, &at, "%s%d", listed++ ? ", " : "", t->creator);
        }
        put(desc, desc_size, &at, " (");
        put_bytes(desc, desc_size, &at, skips);
        put(desc, desc_size, &at, ")");
    }
    return stream + skips;
}

size_t seq_plan_boundary_bytes(const seq_plan *p, const block_seq *seq)
{
    if (!seq->n) return 0;
    size_t bytes = 0;
    walk_state w = walk_start(seq);
    for (int i = 0; i < p->n; i++) {
        bool boundary = false;
        for (int g = 0; g < p->n_segments && !boundary; g++) boundary = p->segments[g].first == i;
        for (int k = 0; boundary && k < w.n; k++) {
            if (w.t[k].counted) continue;
            bytes += w.t[k].bytes;
            for (int j = k; j < w.n; j++) w.t[j].counted |= w.t[j].id == w.t[k].id; /* and its other slots */
        }
        walk_step(&w, seq, i);
    }
    return bytes;
}
