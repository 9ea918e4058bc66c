/* Runs a block sequence forward and backward for one step, following its checkpoint plan
 * (../shared/spec/executor.md). */
#ifndef SEGTRAIN_EXECUTOR_H
#define SEGTRAIN_EXECUTOR_H

#include "segtrain/block.h"
#include "segtrain/plan.h"

typedef struct seq_run seq_run;

/* Runs every block of s from `in`, whose tensors it takes over (each is freed once no state the run holds
 * references it: states may share tensors), and returns the last state in `out` (the caller frees it; the
 * plan makes sure the last block passes nothing on, so `out` shares no tensor with the run). With train, the plan says what each block keeps and
 * *run holds it for backward: kept blocks keep their input and activations, checkpointed segments only their
 * boundary (the segment's input state), intermediate states are freed as soon as the next block has read them.
 * Without train nothing is kept, every state is freed once read, and *run is NULL. On failure everything taken
 * is freed, `in` included. off (needed when the plan moves anything to the host) is where host tensors go;
 * the copies to the host overlap the block that still reads them, and backward brings each segment's host
 * tensors back while the segment after it (in backward order) runs. */
st_status seq_forward(block_seq *s, const seq_plan *plan, offload *off, block_state *in, bool train,
                      block_state *out, seq_run **run);
/* grad holds the gradient of the sequence's output state and receives that of its input state (blocks may add
 * and free gradient tensors on the way: a skip's gradient lives from its reader's backward to its maker's; on
 * failure those are freed and grad holds the caller's tensors again). Segments are recomputed from their
 * boundaries, last first. extra (may be NULL) gives, per block, a gradient to add to that
 * block's output-state gradient (an auxiliary loss on captured hidden states), or NULL. Releases run. */
st_status seq_backward(seq_run *run, block_state *grad, const float *const *extra);
/* The output state of block i as forward left it, if it is still held (the next block's input or boundary). */
const block_state *seq_run_output(const seq_run *run, int i);
/* Drops a forward's state without a backward. */
void seq_release(seq_run *run);
/* Tests and debugging: with on, every training forward that keeps on the device (no attention offload) checks its
 * block kind's kept_bytes(keep) against what the forward left in the pool besides its output state, and fails
 * (ST_ERR_INTERNAL, naming the block) where they differ. Off unless the environment has SEGTRAIN_CHECK_KEPT_BYTES=1
 * (plan and train check so); process-wide. */
void seq_check_kept_bytes(bool on);

#endif
