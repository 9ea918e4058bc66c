/* Runs a block sequence forward and backward for one step. */
#ifndef SEGTRAIN_EXECUTOR_H
#define SEGTRAIN_EXECUTOR_H

#include "segtrain/block.h"

typedef struct seq_run seq_run;

/* Runs every block of s from `in` (owned by the caller and kept alive until backward) and returns the last
 * state in `out` (the caller frees it). With train, *run holds what backward needs; without, intermediate
 * states are freed as soon as the next block has read them and *run is NULL. */
st_status seq_forward(block_seq *s, const block_state *in, bool train, block_state *out, seq_run **run);
/* grad holds the gradient of the sequence's output state and receives that of its input state. Releases run. */
st_status seq_backward(seq_run *run, block_state *grad);
/* Drops a forward's state without a backward. */
void seq_release(seq_run *run);

#endif
