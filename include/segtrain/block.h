/* Blocks: the unit that checkpointing keeps or recomputes, and the block sequences they form.
 *
 * A block maps an input state to an output state. The state is a small tuple of tensors (one hidden stream
 * for DiT; image and text streams, or a stream plus live skip tensors, for other families). By default every
 * state has the sequence's fixed signature and a forward's output shares no tensor with its input; a block
 * kind whose states share tensors (U-Net skips passed on from block to block) describes each block's states
 * with block_kind.states. Tensors every block reads but none replaces (the conditioning vector) are the
 * sequence's context, owned by the model; blocks accumulate the context's gradient.
 *
 * forward allocates the output state from the pool (MEM_ACTIVATIONS) and, unless keep is KEEP_NOTHING, what
 * backward needs (exactly kept_bytes(keep) through the pool). backward takes the gradient of the output state
 * in `grad` and leaves the gradient of the input state there (in place: a residual stream's gradient flows
 * through without a copy), accumulating weight and context gradients. It reads the input state, so the
 * caller keeps that alive until backward. The gradient state may change its tensor count on the way (a skip's
 * gradient is born where the skip is read and dies where it was made); such tensors come from the pool
 * (MEM_ACTIVATIONS) like everything else a block allocates. */
#ifndef SEGTRAIN_BLOCK_H
#define SEGTRAIN_BLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/copy.h"
#include "segtrain/pool.h"

#define STATE_MAX 16

typedef struct block_state {
    int n;
    float *t[STATE_MAX];
} block_state;

typedef enum keep_level {
    KEEP_NOTHING,         /* a checkpointed block's first forward */
    KEEP_ALL,             /* a kept block, or a recompute */
    KEEP_ATTENTION,       /* torch-ffn: the attention side keeps; backward recomputes the feed-forward sub-block */
    KEEP_ATTENTION_OUTPUT /* a checkpointed block's first forward that keeps its attention's output and state, which
                             its recompute (given them in *saved) reuses instead of running attention again */
} keep_level;

/* How a block's output state is made of its input state. A tensor passed on is the same pointer in both, and
 * one new tensor may fill several slots (a stream that is also the newest skip): the executor frees a tensor
 * only once no state it holds references it, and the memory plan counts it once. */
typedef struct state_map {
    int n_in, n_out;
    int64_t in_numel[STATE_MAX], out_numel[STATE_MAX];
    /* per output slot: k >= 0, input slot k passed on; or -1 - j, the forward's j-th new tensor */
    int out_from[STATE_MAX];
} state_map;

typedef struct block_saved block_saved; /* what a forward kept: the block kind's own */
typedef struct block block;

typedef struct block_kind {
    const char *name;
    bool ffn_split;         /* has an attention / feed-forward split (KEEP_ATTENTION applies) */
    bool softmax_attention; /* has softmax attention (attention offload applies) */
    /* forward takes out == NULL: the recompute of a segment's last block, whose output the next boundary already
     * holds, then makes only what backward reads */
    bool output_optional;
    bool keeps_attention_output; /* takes KEEP_ATTENTION_OUTPUT */
    /* Device bytes what a forward keeps occupies once backward can run (all of it back on the device). */
    size_t (*kept_bytes)(const block *b, keep_level keep);
    /* Attention offload's two counts of the attention side, which differ where the host copy is bf16 and the device
     * one float (docs/PRECISION.md). Host: the bytes it holds in host memory between forward and backward, which
     * are also the bytes copied each way. Device: the bytes of kept_bytes(keep) it frees until backward (an
     * offloading forward keeps kept_bytes(keep) less these but with KEEP_NOTHING); it comes back in the form backward
     * reads it. The executor checks both on every forward under seq_check_kept_bytes. */
    size_t (*offload_host_bytes)(const block *b);
    size_t (*offload_device_bytes)(const block *b);
    /* off (NULL: everything stays on the device) sends the attention side's saved tensors to host memory, also
     * with KEEP_NOTHING. out may be NULL only for output_optional kinds. *saved is NULL on entry, except in a
     * recompute after such a forward, or after one with KEEP_ATTENTION_OUTPUT: it then holds the attention side (on
     * its way back from the host) or the attention's output and state, which forward reuses instead of recomputing
     * attention. */
    st_status (*forward)(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                         block_saved **saved);
    /* Starts bringing an offloaded attention side back (the executor calls it one segment ahead). */
    st_status (*prefetch)(block *b, block_saved *saved);
    st_status (*backward)(block *b, const block_state *in, block_saved *saved, block_state *grad);
    void (*release)(block *b, block_saved *saved);
    /* The block's states (NULL: the sequence's fixed signature in and out, every output tensor new). */
    void (*states)(const block *b, state_map *out);
} block_kind;

struct block {
    const block_kind *kind;
    void *self;        /* the family's data: weights, sizes, context */
    int index;         /* position in its sequence */
    long forward_runs; /* forwards run so far: tests check recompute counts with it */
};

/* A sequence of blocks passing a state along. */
typedef struct block_seq {
    const char *name;
    int n;
    block *blocks;
    /* The fixed state signature of kinds without states(); with it, the stream (the first tensor) alone. */
    int state_n;
    int64_t state_numel[STATE_MAX];
    const char *state_names[STATE_MAX]; /* what each tensor of the fixed signature is ("image stream"); may be NULL */
    pool *pool;
    /* mixed_precision bf16 (docs/PRECISION.md): the states the executor holds (the stream between blocks, kept
     * blocks' inputs, boundaries, their host copies) are bf16, 2 bytes an element; a block's forward and backward
     * see them widened to float */
    bool bf16_states;
    /* Called after each segment's or kept block's backward with its first block (tests watch memory with it). */
    void (*after_backward)(void *ctx, int first_block);
    void *after_backward_ctx;
    /* musubi_blocks_to_swap, group offload (docs/WEIGHTS.md): brings block i's weights onto the device before each
     * forward, recompute and backward of it, and lets them go after (NULL: every weight stays on the device). next:
     * the block the executor runs next in this pass (its forward, recompute or backward; -1: none or not known), so
     * that a group of blocks stays while the executor runs its blocks one after the other. */
    st_status (*weights_in)(void *ctx, int block, int next);
    void (*weights_out)(void *ctx, int block, int next);
    void *weights_ctx;
} block_seq;

/* Bytes an element of a state the executor holds: 2 under bf16_states, else 4. */
size_t state_elem_size(const block_seq *s);
/* Bytes of the sequence's fixed signature (state_n, state_numel), as the executor holds it. */
size_t state_bytes(const block_seq *s);
/* Block i's state map: its kind's, or the fixed signature in and out with every output tensor new. */
void block_state_map(const block_seq *s, int i, state_map *out);
/* Whether any block passes a tensor on or repeats one in its output (its states share tensors). */
bool seq_shares_tensors(const block_seq *s);
/* Frees the tensors of a state (each once, even if listed twice) and clears it. */
void state_free(pool *p, block_state *st);

/* mixed_precision bf16 (docs/PRECISION.md): a new tensor (MEM_ACTIVATIONS) holding `from` in the other width, bf16
 * to float (widen, exact) or float to bf16 (rounded); NULL with *st set when the pool refuses. A bf16 tensor sits in
 * a float * slot, as the executor's states and a block's kept tensors do while packed. */
float *tensor_convert(pool *p, const float *from, int64_t numel, bool widen, st_status *st);

/* A tensor a block keeps from its forward for its backward, held in bf16 in between under mixed_precision bf16: its
 * values are made bf16 where they are made (round_to_bf16), so packing loses nothing and every schedule computes
 * the same bits. *slot holds the float tensor, or while packed the bf16 one; NULL: not kept. */
typedef struct kept_tensor {
    float **slot;
    int64_t numel;
} kept_tensor;
/* Packs each kept tensor to bf16 (or, widen, back to float): a new buffer, the old one freed. */
st_status kept_convert(pool *p, const kept_tensor *k, int n, bool widen);

/* Straight-line allocation for kernels: take many buffers, check the status once, free them all at the end.
 * After the first failure every further take returns NULL and the status keeps the first error. */
#define SCRATCH_MAX 64 /* LTX-2's block keeps six attentions' sides, 36 buffers, with its other tensors */
typedef struct scratch {
    pool *pool;
    st_status status;
    int n;
    void *ptr[SCRATCH_MAX];
} scratch;

float *scratch_take(scratch *s, int64_t floats, mem_tag tag, const char *what);
float *scratch_take_zero(scratch *s, int64_t floats, mem_tag tag, const char *what);
/* Frees one buffer early (it must have come from this scratch). */
void scratch_drop(scratch *s, void *ptr);
/* Stops tracking a buffer whose ownership moved elsewhere. */
void scratch_forget(scratch *s, void *ptr);
/* Frees everything still held and returns the status. */
st_status scratch_end(scratch *s);

#endif
