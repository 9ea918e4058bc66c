/* Segmented checkpointing: the settings, the schedule, and the plan of each block sequence
 * (../shared/spec/checkpointing.md).
 *
 * plan_sequence() is the one place that decides what each block does: by plan_segments(), the uniform schedule
 * of interval and stride, or by an explicit per-block plan (gradient_checkpointing_plan, in seq_plan_format's
 * words). Everything else (the executor, the memory prediction, the printed plan) reads its result. */
#ifndef SEGTRAIN_PLAN_H
#define SEGTRAIN_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "segtrain/block.h"
#include "segtrain/config.h"

#define PLAN_TEXT_MAX 4096

typedef enum ckpt_backend { BACKEND_TORCH, BACKEND_TORCH_FFN, BACKEND_UNSLOTH, BACKEND_UNSLOTH_FFN } ckpt_backend;

/* The five gradient_checkpointing* keys, and segtrain's gradient_checkpointing_keep_attention_output and
 * gradient_checkpointing_plan, validated (gradient_checkpointing_bucket_plans: ckpt_settings_of_bucket). */
typedef struct ckpt_settings {
    bool enabled;
    ckpt_backend backend;
    int interval, stride; /* stride already resolved (0 in the config means = interval) */
    bool offload_attention;
    bool keep_attention_output; /* checkpointed blocks keep attention's output and state: recompute skips attention */
    char plan[PLAN_TEXT_MAX];   /* gradient_checkpointing_plan: every block's mode, per sequence; "" = the schedule */
} ckpt_settings;

/* The one decode: reads and validates the keys. Refusals (stride < interval, and anything this build cannot
 * apply) are one line naming the key, the value and what is valid. */
st_status ckpt_settings_from(const config *cfg, ckpt_settings *out);
/* When checkpointing is off but its interval, stride, backend, kept attention output or plan were given, warns
 * (st_warn) that they do nothing; for a config ckpt_settings_from took. */
st_status ckpt_settings_warn(const config *cfg);
/* gradient_checkpointing_bucket_plans, "BUCKET: PLAN, BUCKET: PLAN" (e.g. "1024x1024: 0-5 ckpt | 6-11 keep,
 * 256x256: none"): a bucket's own plan in gradient_checkpointing_plan's words, or none (every block keeps its
 * activations), in place of the run's schedule. The settings bucket i of names[0..n) (bucket_shapes', as
 * bucket_shape_name writes them) is planned by: its own plan where the key names it and gradient_checkpointing is
 * on, else *run (i < 0: only the check). Refuses a name that is not one of them (listing them), a bucket given
 * twice, an item without its plan; the plan itself is plan_sequence's to check. */
st_status ckpt_settings_of_bucket(const config *cfg, const ckpt_settings *run, const char *const *names, int n, int i,
                                  ckpt_settings *out);
/* The one encode: all eight keys as the "key=value;key=value" assignments config_set_all takes, so that nothing
 * of a config's own schedule survives them (gradient_checkpointing_bucket_plans empty: the schedule is every
 * bucket's); ckpt_settings_from reads back the same settings. CKPT_TEXT_MAX bytes
 * hold it. */
#define CKPT_TEXT_MAX (PLAN_TEXT_MAX + 384)
void ckpt_settings_text(const ckpt_settings *cs, char *buf, size_t size);
const char *ckpt_backend_name(ckpt_backend b);

typedef struct segment {
    int first, last; /* blocks first..last, inclusive */
} segment;

/* THE schedule. For n blocks, interval k and stride s: block i is checkpointed iff i mod s < k; the
 * checkpointed blocks of window [j*s, j*s + k) form one segment, the last window cut at n. With per_block,
 * every segment is split into single blocks and the set of checkpointed blocks stays the same. Writes the
 * segments in order to out (room for n) and returns their count. */
int plan_segments(int n, int k, int s, bool per_block, segment *out);

/* What each block of a sequence does in a step. */
typedef enum block_mode {
    MODE_KEEP, /* keeps its activations */
    MODE_CKPT, /* in a checkpointed segment: recomputed from the segment's boundary */
    MODE_FFN   /* FFN-only: keeps the attention side, recomputes its feed-forward half */
} block_mode;

typedef struct seq_plan {
    int n;
    block_mode *mode;   /* per block */
    int n_segments;     /* checkpointed segments (MODE_CKPT) */
    segment *segments;
    bool *host_input;   /* per block: its input state waits in host memory for its backward (a checkpointed
                           segment's first block: its boundary; an FFN-only block: the input its recompute starts
                           from) */
    bool *attention_offload; /* per block: its attention side waits in host memory (one value per segment) */
    bool *attention_output;  /* per block: a checkpointed block keeps its attention's output and state
                                (KEEP_ATTENTION_OUTPUT), so that its recompute skips attention */
    char fallback[256]; /* why segments fell back to single blocks, or "" */
} seq_plan;

/* The plan of a sequence under the settings: cs->plan's clause for the sequence when a plan is given, else the
 * uniform schedule. captured (per block, may be NULL) marks blocks whose own output must exist after forward
 * (hidden-state capture): a schedule's segments then fall back to single blocks, and a plan must end a segment
 * at each. Refuses what the sequence's block kind cannot do, naming the family and what it supports; that
 * includes host copies of states on sequences whose states share tensors (skips stay on the device for the
 * blocks that read them). */
st_status plan_sequence(const ckpt_settings *cs, const block_seq *seq, const char *family, const bool *captured,
                        seq_plan *out);
void seq_plan_free(seq_plan *p);

/* The segment block i belongs to, or NULL (the executor and the boundary descriptions walk plans with these). */
const segment *seq_plan_segment(const seq_plan *p, int i);
/* The unit of backward that block i ends: its segment, or the block alone. */
segment seq_plan_unit(const seq_plan *p, int i);
/* What block i's first forward keeps under the plan. */
keep_level seq_plan_keep(const seq_plan *p, int i);

/* The plan in gradient_checkpointing_plan's words, which plan_sequence reads back to the same plan:
 * "0-3 ckpt in segments of 2 + host | 4-5 keep + attention-offload | 6-9 ffn". A run is a range of blocks and
 * what they do: keep (their activations), ckpt (recomputed from their segment's boundary: the run is one segment,
 * or segments of the given width, the last cut at the run's end) or ffn (keep the attention side, recompute the
 * feed-forward); "+ host" puts a segment's boundary (ckpt) or the feed-forward's input (ffn) in host memory until
 * backward, "+ attention-offload" the attention side's saved tensors; "+ attention-output" has checkpointed blocks
 * keep their attention's output and state (gradient_checkpointing_keep_attention_output, per run). */
void seq_plan_format(const seq_plan *p, char *buf, size_t size);
/* Whether any block of the plan offloads its attention side. */
bool seq_plan_offloads_attention(const seq_plan *p);
/* The pool tag of block i's host input (boundaries for a segment's, activations for an FFN-only block's). */
mem_tag seq_plan_host_tag(const seq_plan *p, int i);
/* Checks that every "name:" clause of a gradient_checkpointing_plan names one of the n sequences, and that a
 * model of several sequences names each; a one-line refusal naming the valid names otherwise. */
st_status plan_check_sequences(const char *plan, const block_seq *seqs, int n);

/* The boundary of checkpointed segment `which` (the state at its first block, as the executor holds it): its
 * bytes, each tensor once, and in desc what it is, e.g. "stream 64.0 KiB (also block 1's skip) + skip of block
 * 0 (64.0 KiB)": the stream is what the block before the segment made, skips are tensors made earlier and still
 * to be read. 0 and "" for a segment that does not exist. Sizes are those of the batch the sequence was last
 * sized for (model_set_batch sizes it). */
size_t seq_plan_boundary(const seq_plan *p, const block_seq *seq, int which, char *desc, size_t desc_size);
/* Bytes all boundaries of the plan hold together, each tensor once however many boundaries share it (sized as
 * seq_plan_boundary). */
size_t seq_plan_boundary_bytes(const seq_plan *p, const block_seq *seq);

/* Bytes the plan's host copies (+ host, + attention-offload) hold in host memory: what a step copies to the host,
 * and back. The device bytes they free can differ (block_kind's offload_device_bytes). */
size_t seq_plan_host_bytes(const seq_plan *p, const block_seq *seq);


#endif
