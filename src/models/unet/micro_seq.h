/* What the U-Nets (unet.c with unet_block.c, cascade.c with cascade_block.c) share (micro_seq.c), internal to
 * src/models: how a micro-block's states carry the skips from the down path to the up path, the walk that lays the
 * blocks out, the end of a block's forward, an attention side's trip to the host, and the model's one sequence. */
#ifndef SEGTRAIN_MODELS_MICRO_SEQ_H
#define SEGTRAIN_MODELS_MICRO_SEQ_H

#include "models/core/internal.h"

/* A micro-block's states: the input state is the stream, then the live skips, oldest first; a block that reads a
 * skip takes the newest (and passes the others on), one whose output is also a skip lists it twice. Sizes are a
 * sample's floats. */
typedef struct skip_io {
    int skips;                     /* skips in the input state */
    bool reads, emit;              /* reads the newest skip; its output is also a new skip */
    int64_t in_numel, out_numel;   /* the stream's in and out */
    int64_t skip_numel[STATE_MAX]; /* input slot k's (1 .. skips) */
} skip_io;
void micro_skip_states(const skip_io *io, int64_t batch, state_map *out);
/* The output state of y: y, the skips passed on, and y again when it is a new skip. */
void micro_skip_output(const skip_io *io, const block_state *in, float *y, block_state *out);
/* Backward's first step for a block whose output is also a skip: the gradient of that slot (the gradient state's
 * last) is added to the stream's and freed. */
void micro_skip_grad_join(const skip_io *io, int64_t batch, pool *p, block_state *grad);

/* A builder's walk over the micro-blocks in order: the stream's channels, height and width after the blocks so far,
 * and the skips on the stack, newest last (their channels and planes, height x width). */
typedef struct micro_walk {
    int n; /* blocks so far */
    int64_t c, h, w;
    int skips;
    int64_t skip_c[STATE_MAX], skip_plane[STATE_MAX];
    bool overflow; /* a new skip found the state full, and was left out */
} micro_walk;
/* The next block, its stream out cout channels of h_out x w_out: its states into io; with reads it reads the newest
 * skip, whose channels it returns (0: none read), with emit its output is a new skip. */
int64_t micro_walk_next(micro_walk *w, skip_io *io, int64_t cout, int64_t h_out, int64_t w_out, bool reads,
                        bool emit);

/* A micro-block's forward ends, r its status: sv (what it kept; empty: nothing) goes to *saved_io, or back to its
 * kind's release on failure, when empty, or with no saved_io; then the output state is y's (micro_skip_output). */
st_status micro_forward_end(block *b, st_status r, block_saved *sv, bool empty, block_saved **saved_io,
                            const skip_io *io, const block_state *in, float *y, block_state *out);

/* "<prefix>.<name>" into buf (cut at the buffer; param_add refuses a name that long). */
const char *micro_name(char *buf, size_t n, const char *prefix, const char *name);
/* The model's one sequence, n micro-blocks of kind whose first state is the latents (state_name says as what): their
 * data, size bytes each, as model_seq_blocks returns it */
void *micro_seq_blocks(model *m, int n, const block_kind *kind, size_t size, const char *state_name);
/* The latents x, copied as the first state of the model's one sequence (the executor owns it), through it into
 * m->step.last, then the head (head_forward, from the last state's stream h). */
st_status micro_seq_forward(model *m, const float *x, bool train,
                            st_status (*head_forward)(model *m, const float *h));
/* Back from dpred through the head (head_backward: from the last state's stream h, dL/dh into dh) and the sequence;
 * *dh, the stream's gradient buffer, ends as dL/d(the latents) (the caller frees it). */
st_status micro_seq_backward(model *m, const float *dpred,
                             st_status (*head_backward)(model *m, const float *h, const float *dpred, float *dh),
                             float **dh);

/* A block's attention side that attention offload keeps in host memory between forward and backward (the U-Nets'
 * Transformer2DModels and AttnBlocks): dev is the side while on the device. send queues the copy of dev (a buffer of
 * owner's, `bytes` of floats) to the host, there in bf16 with bf16 (mixed_precision bf16: every value made bf16),
 * and frees the device bytes once it is done; fetch starts the copy back (a prefetch), float; back waits for it, dev
 * being the side again; release frees either copy. */
typedef struct host_side {
    float *dev;
    offload *off;
    bool on_host;
    host_tensor h;
} host_side;
st_status host_side_send(host_side *hs, offload *off, scratch *owner, float *dev, size_t bytes, bool bf16,
                         const char *what);
/* A micro-block kind's prefetch: fetch of the side its saved tensors begin with */
st_status micro_prefetch(block *b, block_saved *saved);
st_status host_side_fetch(host_side *hs);
st_status host_side_back(host_side *hs);
void host_side_release(host_side *hs, pool *p);

#endif
