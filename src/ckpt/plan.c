/* The checkpoint settings, the schedule and the plan of a block sequence. */
#include "segtrain/plan.h"

#include <ctype.h>
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

/* the keys of the schedule besides gradient_checkpointing (on or off) and its attention offload */
static const char *const keys[] = {"gradient_checkpointing_interval", "gradient_checkpointing_segment_stride",
                                   "gradient_checkpointing_backend", "gradient_checkpointing_keep_attention_output",
                                   "gradient_checkpointing_plan", "gradient_checkpointing_bucket_plans"};
enum { KEY_COUNT = sizeof keys / sizeof *keys };

st_status ckpt_settings_from(const config *cfg, ckpt_settings *out)
{
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
    const char *plan = config_string(cfg, keys[4]);
    if (strlen(plan) >= sizeof c.plan)
        return st_fail(ST_ERR_INVALID, "%s: %zu characters is too long (valid: up to %zu)", keys[4], strlen(plan),
                       sizeof c.plan - 1);
    snprintf(c.plan, sizeof c.plan, "%s", plan);
    if (c.plan[0] && c.enabled) { /* the plan says it all, per block: a uniform key beside it would mean nothing */
        char beside[96] = "";
        if (c.interval != 1) snprintf(beside, sizeof beside, "%s: %d", keys[0], c.interval);
        else if (c.stride != 1) snprintf(beside, sizeof beside, "%s: %d", keys[1], c.stride);
        else if (c.backend != BACKEND_TORCH) snprintf(beside, sizeof beside, "%s: %s", keys[2], backend);
        else if (c.keep_attention_output) snprintf(beside, sizeof beside, "%s: true", keys[3]);
        else if (c.offload_attention) snprintf(beside, sizeof beside, "gradient_checkpointing_offload_attention: true");
        if (beside[0])
            return st_fail(ST_ERR_UNSUPPORTED, "gradient_checkpointing_plan gives every block's mode, and %s would "
                           "mean nothing beside it (valid with a plan: the interval, stride, backend, attention "
                           "offload and kept attention output at their defaults; a plan's runs say \"+ host\" and "
                           "\"+ attention-offload\" themselves)", beside);
    }
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
    *out = c;
    return ST_OK;
}

st_status ckpt_settings_warn(const config *cfg)
{
    if (config_bool(cfg, "gradient_checkpointing")) return ST_OK;
    size_t len = 0;
    int given = 0;
    for (int i = 0; i < KEY_COUNT; i++)
        if (config_is_set(cfg, keys[i])) len += strlen(keys[i]) + 2, given++;
    if (!given) return ST_OK;
    char *list = malloc(len);
    if (!list) return st_host_oom("a warning's list of %d keys", given);
    size_t at = 0;
    for (int i = 0; i < KEY_COUNT; i++)
        if (config_is_set(cfg, keys[i])) at += (size_t)sprintf(list + at, "%s%s", at ? ", " : "", keys[i]);
    st_warn("segtrain: warning: %s %s nothing while gradient_checkpointing is false", list, given > 1 ? "do" : "does");
    free(list);
    return ST_OK;
}

/* The text from s to end, without surrounding blanks. */
static void trim(const char **s, const char **end)
{
    while (*s < *end && isspace((unsigned char)**s)) (*s)++;
    while (*end > *s && isspace((unsigned char)(*end)[-1])) (*end)--;
}

/* The buckets' names as a refusal lists them, "256x256, 512x512". */
static void bucket_list(const char *const *names, int n, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = 0;
    for (int j = 0; j < n && at < size; j++) at += (size_t)snprintf(buf + at, size - at, "%s%s", j ? ", " : "", names[j]);
}

/* One "BUCKET: PLAN" of gradient_checkpointing_bucket_plans, from item to end: which of names it is, and its plan. */
static st_status bucket_item(const char *item, const char *end, const char *const *names, int n, int *which,
                             const char **plan, size_t *plan_len)
{
    const char *key = keys[5], *colon = memchr(item, ':', (size_t)(end - item));
    const char *name = item, *name_end = colon ? colon : end, *p = colon ? colon + 1 : end, *p_end = end;
    trim(&name, &name_end);
    trim(&p, &p_end);
    if (!colon || name == name_end || p == p_end)
        return st_fail(ST_ERR_INVALID, "%s: \"%.*s\" is not a bucket's plan (valid: \"BUCKET: PLAN\", comma-separated, "
                       "e.g. \"1024x1024: 0-5 ckpt | 6-11 keep, 256x256: none\")", key, (int)(end - item), item);
    *which = 0;
    while (*which < n && (strlen(names[*which]) != (size_t)(name_end - name) ||
                          strncmp(names[*which], name, (size_t)(name_end - name))))
        (*which)++;
    if (*which == n && !n)
        return st_fail(ST_ERR_INVALID, "%s: names \"%.*s\", and the run has no bucket_shapes (valid: the key empty, "
                       "or the bucket in bucket_shapes)", key, (int)(name_end - name), name);
    if (*which == n) {
        char valid[1024];
        bucket_list(names, n, valid, sizeof valid);
        return st_fail(ST_ERR_INVALID, "%s: \"%.*s\" is not one of the run's buckets (valid: %s)", key,
                       (int)(name_end - name), name, valid);
    }
    if ((size_t)(p_end - p) >= PLAN_TEXT_MAX)
        return st_fail(ST_ERR_INVALID, "%s: %s: %zu characters is too long (valid: up to %d)", key, names[*which],
                       (size_t)(p_end - p), PLAN_TEXT_MAX - 1);
    *plan = p, *plan_len = (size_t)(p_end - p);
    return ST_OK;
}

st_status ckpt_settings_of_bucket(const config *cfg, const ckpt_settings *run, const char *const *names, int n, int i,
                                  ckpt_settings *out)
{
    *out = *run;
    bool *given = calloc((size_t)(n ? n : 1), sizeof *given);
    if (!given) return st_host_oom("the buckets' plans");
    st_status st = ST_OK;
    for (const char *at = config_string(cfg, keys[5]); !st && *at;) {
        const char *end = strchr(at, ','), *item = at;
        if (!end) end = at + strlen(at);
        at = *end ? end + 1 : end;
        const char *first = item, *last = end;
        trim(&first, &last);
        if (first == last) continue; /* blanks between commas, as bucket_shapes allows */
        int j;
        const char *plan;
        size_t len;
        st = bucket_item(item, end, names, n, &j, &plan, &len);
        if (!st && given[j]) st = st_fail(ST_ERR_INVALID, "%s: %s is given twice", keys[5], names[j]);
        if (!st) given[j] = true;
        if (st || j != i || !run->enabled) continue; /* the master switch off: it does nothing (ckpt_settings_warn) */
        *out = (ckpt_settings){.interval = 1, .stride = 1}; /* none: every block keeps its activations */
        if (len != 4 || strncmp(plan, "none", 4))
            out->enabled = true, snprintf(out->plan, sizeof out->plan, "%.*s", (int)len, plan);
    }
    free(given);
    return st;
}

void ckpt_settings_text(const ckpt_settings *cs, char *buf, size_t size)
{
    snprintf(buf, size,
             "gradient_checkpointing=%s;gradient_checkpointing_backend=%s;gradient_checkpointing_interval=%d;"
             "gradient_checkpointing_segment_stride=%d;gradient_checkpointing_offload_attention=%s;"
             "gradient_checkpointing_keep_attention_output=%s;gradient_checkpointing_plan=%s;"
             "gradient_checkpointing_bucket_plans=",
             cs->enabled ? "true" : "false", ckpt_backend_name(cs->backend), cs->interval, cs->stride,
             cs->offload_attention ? "true" : "false", cs->keep_attention_output ? "true" : "false", cs->plan);
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
    free(p->attention_offload);
    free(p->attention_output);
    *p = (seq_plan){0};
}

/* A family's state maps must chain (each block's output is the next one's input) and end in distinct new
 * tensors: the caller frees the last state on its own, and gives its gradient as tensors no block frees. The
 * fixed signature (no states hook) chains by construction. */
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

/* ---- gradient_checkpointing_plan: "name: runs / name: runs", each run "0-3 ckpt in segments of 2 + host" ---- */

#define PLAN_SEQ_MAX 8 /* more sequences than any model has */

/* The next clause of a plan from *at: its sequence name (or an empty one) and its runs. False past the last. */
static bool next_clause(const char **at, const char **name, size_t *name_len, const char **runs, size_t *runs_len)
{
    if (!**at) return false;
    const char *end = strchr(*at, '/'), *colon;
    if (!end) end = *at + strlen(*at);
    const char *start = *at, *stop = end;
    *at = *end ? end + 1 : end;
    colon = memchr(start, ':', (size_t)(stop - start));
    const char *n = start, *n_end = colon ? colon : start;
    trim(&n, &n_end);
    const char *r = colon ? colon + 1 : start;
    trim(&r, &stop);
    *name = n, *name_len = (size_t)(n_end - n), *runs = r, *runs_len = (size_t)(stop - r);
    return true;
}

st_status plan_check_sequences(const char *plan, const block_seq *seqs, int n)
{
    if (!plan[0]) return ST_OK;
    char names[512] = "";
    size_t at = 0;
    for (int q = 0; q < n && at < sizeof names; q++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", q ? ", " : "", seqs[q].name);
    int clauses = 0, given[PLAN_SEQ_MAX] = {0};
    const char *cursor = plan, *name, *runs;
    size_t name_len, runs_len;
    while (next_clause(&cursor, &name, &name_len, &runs, &runs_len)) {
        clauses++;
        int q = 0;
        while (q < n && (strlen(seqs[q].name) != name_len || strncmp(seqs[q].name, name, name_len))) q++;
        if (!name_len && n == 1) q = 0;
        if (q == n || q >= PLAN_SEQ_MAX) {
            if (!name_len)
                return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: the clause \"%.*s\" names no block "
                               "sequence, and this model has several (valid: %s, each as \"name: runs\" and "
                               "separated by \"/\")", (int)runs_len, runs, names);
            return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: \"%.*s\" is not a block sequence of this "
                           "model (valid: %s, each as \"name: runs\" and separated by \"/\")", (int)name_len, name,
                           names);
        }
        if (given[q]++)
            return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: %s is given twice", seqs[q].name);
    }
    for (int q = 0; q < n && q < PLAN_SEQ_MAX; q++)
        if (!given[q])
            return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: gives no runs for %s (valid: a clause "
                           "\"%s: runs\" for each of %s, separated by \"/\")", seqs[q].name, seqs[q].name, names);
    return clauses ? ST_OK : st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: is empty");
}

/* One run of a clause, read. */
typedef struct plan_run {
    int first, last, width; /* width: segments' (ckpt), 0 = the whole run */
    block_mode mode;
    bool host, attention, output;
} plan_run;

static st_status parse_run(const char *text, size_t len, const char *seq, int n, plan_run *r)
{
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), text);
    *r = (plan_run){0};
    char *tok = strtok_r(buf, " \t\n", &save), *end = NULL;
    long a = tok ? strtol(tok, &end, 10) : -1, b = a;
    if (tok && *end == '-') b = strtol(end + 1, &end, 10);
    const char *mode = strtok_r(NULL, " \t\n", &save);
    static const char *word[] = {"keep", "ckpt", "ffn"};
    int m = 0;
    while (mode && m < 3 && strcmp(mode, word[m])) m++;
    if (!tok || *end || a < 0 || b < a || !mode || m == 3)
        return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: %s: \"%.*s\" is not a run (valid: blocks, as "
                       "\"i\" or \"i-j\", then keep, ckpt or ffn, e.g. \"0-3 ckpt in segments of 2 + host\")", seq,
                       (int)len, text);
    if (b >= n)
        return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: %s: \"%.*s\" names block %ld, and %s has "
                       "blocks 0-%d", seq, (int)len, text, b, seq, n - 1);
    *r = (plan_run){.first = (int)a, .last = (int)b, .mode = (block_mode)m};
    for (tok = strtok_r(NULL, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
        if (!strcmp(tok, "in") && r->mode == MODE_CKPT && !r->width) {
            const char *s1 = strtok_r(NULL, " \t\n", &save), *s2 = strtok_r(NULL, " \t\n", &save);
            const char *w = strtok_r(NULL, " \t\n", &save);
            long width = w ? strtol(w, &end, 10) : 0;
            if (!s1 || !s2 || strcmp(s1, "segments") || strcmp(s2, "of") || !w || *end || width < 1 || width > INT_MAX)
                return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: %s: \"%.*s\": expected \"in segments "
                               "of N\", N a whole number from 1", seq, (int)len, text);
            r->width = (int)width;
            continue;
        }
        const char *flag = !strcmp(tok, "+") ? strtok_r(NULL, " \t\n", &save) : tok[0] == '+' ? tok + 1 : NULL;
        if (flag && !strcmp(flag, "host") && r->mode != MODE_KEEP) r->host = true;
        else if (flag && !strcmp(flag, "attention-offload")) r->attention = true;
        else if (flag && !strcmp(flag, "attention-output") && r->mode == MODE_CKPT) r->output = true;
        else
            return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: %s: \"%.*s\": \"%s\" is not understood "
                           "(valid after the mode: \"in segments of N\" for ckpt, \"+ host\" for ckpt and ffn, "
                           "\"+ attention-offload\", \"+ attention-output\" for ckpt)", seq, (int)len, text,
                           flag ? flag : tok);
    }
    if (r->output && r->attention)
        return st_fail(ST_ERR_UNSUPPORTED, "gradient_checkpointing_plan: %s: \"%.*s\": + attention-output keeps "
                       "attention's output on the device and + attention-offload moves it to the host (valid: one of "
                       "them)", seq, (int)len, text);
    return ST_OK;
}

/* Fills out from the sequence's clause of the plan (plan_check_sequences has matched the names). */
static st_status plan_from_text(const char *plan, const block_seq *seq, const char *family, const bool *captured,
                                seq_plan *out)
{
    const char *cursor = plan, *name, *runs = NULL;
    size_t name_len, runs_len = 0;
    bool found = false;
    while (!found && next_clause(&cursor, &name, &name_len, &runs, &runs_len))
        found = !name_len || (strlen(seq->name) == name_len && !strncmp(seq->name, name, name_len));
    if (!found)
        return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: gives no runs for %s (valid: a clause \"%s: "
                       "runs\")", seq->name, seq->name);
    const block_kind *kind = seq->blocks[0].kind;
    int next = 0;
    for (const char *at = runs, *stop = runs + runs_len; at < stop;) {
        const char *bar = memchr(at, '|', (size_t)(stop - at)), *end = bar ? bar : stop;
        plan_run r;
        st_status st = parse_run(at, (size_t)(end - at), seq->name, seq->n, &r);
        if (st) return st;
        at = bar ? bar + 1 : stop;
        if (r.first != next)
            return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: %s: %s (valid: runs that give blocks 0-%d "
                           "a mode each, in order)", seq->name,
                           r.first > next ? "a block between runs has no mode" : "runs overlap", seq->n - 1);
        next = r.last + 1;
        const char *refused =
            r.mode == MODE_FFN && !kind->ffn_split ? "ffn: its blocks have no attention/feed-forward split"
            : r.attention && !kind->softmax_attention ? "+ attention-offload: its blocks have no softmax attention"
            : r.output && !kind->keeps_attention_output
                ? "+ attention-output: its blocks do not keep their attention's output"
            : r.host && seq_shares_tensors(seq) ? "+ host: its states share skip tensors that later blocks still read"
                                                  " on the device"
                                                : NULL;
        if (refused)
            return st_fail(ST_ERR_UNSUPPORTED, "gradient_checkpointing_plan: the %s family's %s refuse %s", family,
                           seq->name, refused);
        for (int i = r.first; i <= r.last; i++) {
            out->mode[i] = r.mode;
            out->attention_offload[i] = r.attention;
            out->attention_output[i] = r.output;
            out->host_input[i] = r.host && r.mode == MODE_FFN;
        }
        for (int f = r.first; r.mode == MODE_CKPT && f <= r.last; f += r.width ? r.width : r.last - r.first + 1) {
            segment g = {f, r.width && f + r.width - 1 < r.last ? f + r.width - 1 : r.last};
            for (int i = g.first; captured && i < g.last; i++)
                if (captured[i])
                    return st_fail(ST_ERR_UNSUPPORTED, "gradient_checkpointing_plan: %s: capture_hidden_states needs "
                                   "block %d's output after forward, and the segment of blocks %d-%d recomputes it "
                                   "(valid: a segment that ends at block %d)", seq->name, i, g.first, g.last, i);
            out->segments[out->n_segments++] = g;
            out->host_input[g.first] = r.host;
        }
    }
    if (next != seq->n)
        return st_fail(ST_ERR_INVALID, "gradient_checkpointing_plan: %s: blocks %d-%d have no mode (valid: runs that "
                       "give blocks 0-%d a mode each, in order)", seq->name, next, seq->n - 1, seq->n - 1);
    return ST_OK;
}

/* Fills out from the uniform schedule of interval and stride. */
static st_status plan_uniform(const ckpt_settings *cs, const block_seq *seq, const char *family, const bool *captured,
                              seq_plan *out)
{
    const block_kind *kind = seq->blocks[0].kind;
    if (cs->keep_attention_output && !kind->keeps_attention_output)
        return st_fail(ST_ERR_UNSUPPORTED,
                       "gradient_checkpointing_keep_attention_output: true keeps softmax attention's output, but "
                       "the %s family's %s do not keep theirs (valid for %s: false)",
                       family, seq->name, family);
    const bool ffn = cs->backend == BACKEND_TORCH_FFN || cs->backend == BACKEND_UNSLOTH_FFN;
    if (ffn && !kind->ffn_split)
        return st_fail(ST_ERR_UNSUPPORTED,
                       "gradient_checkpointing_backend: \"%s\" recomputes a block's feed-forward half, but the %s "
                       "family's %s have no attention/feed-forward split (valid for %s: torch, unsloth)",
                       ckpt_backend_name(cs->backend), family, seq->name, family);
    /* a host copy of a state is only worth its device bytes if nothing reads them meanwhile; skips are read by
     * blocks far later */
    const bool to_host = cs->backend == BACKEND_UNSLOTH || cs->backend == BACKEND_UNSLOTH_FFN;
    if (to_host && seq_shares_tensors(seq))
        return st_fail(ST_ERR_UNSUPPORTED,
                       "gradient_checkpointing_backend: \"%s\" moves %s to host memory, but the %s family's %s share "
                       "skip tensors that later blocks still read on the device (valid for %s: torch, torch-ffn)",
                       ckpt_backend_name(cs->backend),
                       cs->backend == BACKEND_UNSLOTH ? "segment boundaries" : "feed-forward inputs", family, seq->name,
                       family);
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
    for (int i = 0; i < seq->n; i++) out->attention_output[i] = cs->keep_attention_output && out->mode[i] == MODE_CKPT;
    if (cs->backend == BACKEND_UNSLOTH)
        for (int g = 0; g < n_segs; g++) out->host_input[segs[g].first] = true;
    if (cs->backend == BACKEND_UNSLOTH_FFN)
        for (int i = 0; i < seq->n; i++) out->host_input[i] = out->mode[i] == MODE_FFN;
    if (per_block)
        snprintf(out->fallback, sizeof out->fallback,
                 "fell back to single-block segments: capture_hidden_states needs the outputs of blocks %s", which);
    return ST_OK;
}

st_status plan_sequence(const ckpt_settings *cs, const block_seq *seq, const char *family, const bool *captured,
                        seq_plan *out)
{
    const size_t n = (size_t)(seq->n ? seq->n : 1);
    *out = (seq_plan){.n = seq->n, .mode = calloc(n, sizeof *out->mode), .segments = calloc(n, sizeof *out->segments),
                      .host_input = calloc(n, sizeof *out->host_input),
                      .attention_offload = calloc(n, sizeof *out->attention_offload),
                      .attention_output = calloc(n, sizeof *out->attention_output)};
    if (!out->mode || !out->segments || !out->host_input || !out->attention_offload || !out->attention_output) {
        seq_plan_free(out);
        return st_host_oom("the checkpoint plan of %s", seq->name);
    }
    if (seq->n == 0) return ST_OK;
    st_status st = check_states(seq);
    if (!st && cs->offload_attention && !seq->blocks[0].kind->softmax_attention)
        st = st_fail(ST_ERR_UNSUPPORTED,
                     "gradient_checkpointing_offload_attention: true moves softmax attention's saved tensors, but "
                     "the %s family's %s have no softmax attention (valid for %s: false)",
                     family, seq->name, family);
    for (int i = 0; i < seq->n; i++) out->attention_offload[i] = cs->offload_attention; /* with checkpointing off too */
    if (!st && cs->enabled)
        st = cs->plan[0] ? plan_from_text(cs->plan, seq, family, captured, out)
                         : plan_uniform(cs, seq, family, captured, out);
    if (st) seq_plan_free(out);
    return st;
}

/* Whether block i's host copy is on: a checkpointed block's is its segment's boundary's. */
static bool block_host(const seq_plan *p, int i)
{
    const segment *g = p->mode[i] == MODE_CKPT ? seq_plan_segment(p, i) : NULL;
    return p->host_input[g ? g->first : i];
}

void seq_plan_format(const seq_plan *p, char *buf, size_t size)
{
    static const char *word[] = {"keep", "ckpt", "ffn"};
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < p->n && at < size;) {
        int j = i, width = 0;
        const bool host = block_host(p, i), attention = p->attention_offload[i], output = p->attention_output[i];
        if (p->mode[i] == MODE_CKPT) {
            /* adjacent segments of one width and the same flags print as one run */
            const segment *g = seq_plan_segment(p, i);
            width = g->last - g->first + 1;
            j = g->last;
            for (const segment *h = g + 1; h < p->segments + p->n_segments && h->first == j + 1 &&
                                           h->last - h->first + 1 == width && block_host(p, h->first) == host &&
                                           p->attention_offload[h->first] == attention &&
                                           p->attention_output[h->first] == output;
                 h++)
                j = h->last;
        } else {
            while (j + 1 < p->n && p->mode[j + 1] == p->mode[i] && block_host(p, j + 1) == host &&
                   p->attention_offload[j + 1] == attention && p->attention_output[j + 1] == output)
                j++;
        }
        at += (size_t)snprintf(buf + at, size - at, i ? " | " : "");
        if (at < size && i == j) at += (size_t)snprintf(buf + at, size - at, "%d %s", i, word[p->mode[i]]);
        else if (at < size) at += (size_t)snprintf(buf + at, size - at, "%d-%d %s", i, j, word[p->mode[i]]);
        if (at < size && width && j - i + 1 > width)
            at += (size_t)snprintf(buf + at, size - at, " in segments of %d", width);
        if (at < size && host) at += (size_t)snprintf(buf + at, size - at, " + host");
        if (at < size && attention) at += (size_t)snprintf(buf + at, size - at, " + attention-offload");
        if (at < size && output) at += (size_t)snprintf(buf + at, size - at, " + attention-output");
        i = j + 1;
    }
}

bool seq_plan_offloads_attention(const seq_plan *p)
{
    for (int i = 0; i < p->n; i++)
        if (p->attention_offload[i]) return true;
    return false;
}

mem_tag seq_plan_host_tag(const seq_plan *p, int i)
{
    return p->mode[i] == MODE_CKPT ? MEM_BOUNDARIES : MEM_ACTIVATIONS;
}

keep_level seq_plan_keep(const seq_plan *p, int i)
{
    const block_mode m = p->mode[i];
    return m == MODE_KEEP  ? KEEP_ALL
           : m == MODE_FFN ? KEEP_ATTENTION
                           : p->attention_output[i] ? KEEP_ATTENTION_OUTPUT : KEEP_NOTHING;
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
    for (int k = 0; k < map.n_in; k++) bytes += (size_t)map.in_numel[k] * state_elem_size(seq);
    return bytes;
}

size_t seq_plan_host_bytes(const seq_plan *p, const block_seq *seq)
{
    size_t bytes = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->host_input[i]) bytes += input_bytes(seq, i); /* never a sharing sequence: plan_sequence refuses */
        if (p->attention_offload[i]) bytes += seq->blocks[i].kind->offload_host_bytes(&seq->blocks[i]);
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
        w.t[k] = (walk_tensor){.id = w.next_id++, .creator = -1, .bytes = (size_t)map.in_numel[k] * state_elem_size(seq)};
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
                                                       .bytes = (size_t)map.out_numel[k] * state_elem_size(seq)};
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
