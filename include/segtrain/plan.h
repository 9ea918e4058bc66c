/* Segmented checkpointing: the settings, the schedule, and the plan of each block sequence
 * (../shared/spec/checkpointing.md).
 *
 * plan_segments() is the one place that decides which blocks are checkpointed and how they group into
 * segments. Everything else (the executor, the memory prediction, the printed plan) reads its result. */
#ifndef SEGTRAIN_PLAN_H
#define SEGTRAIN_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "segtrain/block.h"
#include "segtrain/config.h"

typedef enum ckpt_backend { BACKEND_TORCH, BACKEND_TORCH_FFN, BACKEND_UNSLOTH, BACKEND_UNSLOTH_FFN } ckpt_backend;

/* The five gradient_checkpointing* keys, and segtrain's gradient_checkpointing_keep_attention_output, validated. */
typedef struct ckpt_settings {
    bool enabled;
    ckpt_backend backend;
    int interval, stride; /* stride already resolved (0 in the config means = interval) */
    bool offload_attention;
    bool keep_attention_output; /* checkpointed blocks keep attention's output and state: recompute skips attention */
} ckpt_settings;

/* The one decode: reads and validates the keys. Refusals (stride < interval, and anything this build cannot
 * apply) are one line naming the key, the value and what is valid. When checkpointing is off but interval, stride
 * or backend were given, *warning (if not NULL) is set to a line saying they do nothing, else to "". */
st_status ckpt_settings_from(const config *cfg, ckpt_settings *out, char *warning, size_t warning_size);
/* The one encode: all six keys as the "key=value;key=value" assignments config_set_all takes, so that nothing
 * of a config's own schedule survives them; ckpt_settings_from reads back the same settings. 320 bytes hold it. */
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
    bool *host_input;   /* per block: its input state waits in host memory for its backward (unsloth: the
                           boundaries; unsloth-ffn: the inputs the feed-forward recompute starts from) */
    mem_tag host_input_tag;
    bool attention_offload; /* every block's attention side waits in host memory */
    bool attention_output;  /* checkpointed blocks keep their attention's output and state (KEEP_ATTENTION_OUTPUT) */
    char fallback[256]; /* why segments fell back to single blocks, or "" */
} seq_plan;

/* The plan of a sequence under the settings. captured (per block, may be NULL) marks blocks whose own output
 * must exist after forward (hidden-state capture): segments then fall back to single blocks. Refuses what the
 * sequence's block kind cannot do, naming the family and what it supports; that includes the unsloth backends
 * on sequences whose states share tensors (skips stay on the device for the blocks that read them). */
st_status plan_sequence(const ckpt_settings *cs, const block_seq *seq, const char *family, const bool *captured,
                        seq_plan *out);
void seq_plan_free(seq_plan *p);

/* The segment block i belongs to, or NULL (the executor and the boundary descriptions walk plans with these). */
const segment *seq_plan_segment(const seq_plan *p, int i);
/* The unit of backward that block i ends: its segment, or the block alone. */
segment seq_plan_unit(const seq_plan *p, int i);
/* What block i's first forward keeps under the plan. */
keep_level seq_plan_keep(const seq_plan *p, int i);

/* "blocks 0-1 ckpt | 2-3 keep | ..." */
void seq_plan_format(const seq_plan *p, char *buf, size_t size);

/* The boundary of checkpointed segment `which` (the state at its first block, as the executor holds it): its
 * bytes, each tensor once, and in desc what it is, e.g. "stream 64.0 KiB (also block 1's skip) + skip of block
 * 0 (64.0 KiB)": the stream is what the block before the segment made, skips are tensors made earlier and still
 * to be read. 0 and "" for a segment that does not exist. Sizes are those of the batch the sequence was last
 * sized for (model_set_batch sizes it). */
size_t seq_plan_boundary(const seq_plan *p, const block_seq *seq, int which, char *desc, size_t desc_size);
/* Bytes all boundaries of the plan hold together, each tensor once however many boundaries share it (sized as
 * seq_plan_boundary). */
size_t seq_plan_boundary_bytes(const seq_plan *p, const block_seq *seq);

/* Bytes a step moves to the host (and back: the same) under this plan. */
size_t seq_plan_offload_bytes(const seq_plan *p, const block_seq *seq);


#endif
