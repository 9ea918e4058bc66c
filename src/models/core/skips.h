/* U-ViT's long skips around any block kind (skips.c): skipdit's DiT blocks, ZLab I1's dual-stream blocks.
 *
 * depth = 2 in + 1 blocks: in-blocks 0 .. in-1, a mid block, out-blocks 0 .. in-1. In-block i's output is its own
 * skip s_i, so its output state is (y, s_0 .. s_{i-1}, y): one tensor in two slots. Out-block j reads the newest
 * skip, which is s_{in-1-j}: x' = merge(concat(x, s)) along features, then the wrapped block on x', and passes the
 * older skips on. The state's one stream tensor holds one or two ranges of rows (skipdit: the image's; ZLab I1: the
 * image's, then the text's), each merged by its own skip_linear (Linear(2D -> D)). The skips are passed from state
 * to state as the same tensors (block_kind.states says which), so the executor stores each once, however many
 * boundaries hold it.
 *
 * Backward mirrors it: an in-block adds its skip's gradient to the stream's and frees it before the wrapped block's
 * backward; an out-block, after the wrapped block's, splits the merge's input gradient into the stream's and a new
 * gradient tensor for its skip, which travels back in the gradient state to the in-block that made the skip. */
#ifndef SEGTRAIN_MODELS_SKIPS_H
#define SEGTRAIN_MODELS_SKIPS_H

#include "models/core/internal.h"

typedef enum skip_role { SKIP_IN, SKIP_MID, SKIP_OUT } skip_role;

typedef struct skip_block {
    const block_kind *kind; /* the wrapped block's kind and data */
    void *inner;
    struct model *m;
    skip_role role;
    int skips;         /* skip tensors in the input state */
    int ranges;        /* 1: the image rows (batch x tokens); 2: then the text rows (batch x text) */
    lin_layer merge[2]; /* out-blocks: each range's skip_linear */
} skip_block;

/* Block i's role and skip count of a depth (odd) wrapped sequence. */
skip_role skip_role_of(int i, int depth);
/* Block i's module name: in_blocks.i, mid_block or out_blocks.j (family_desc.block_module's). */
void skip_module_name(int i, int depth, char *name, size_t n);
int skip_count(int i, int depth);

/* The wrapper's functions of a block kind (const block_kind k = {SKIP_BLOCK_KIND(...), flags}): the flags are the
 * wrapped kind's, but output_optional, which the wrapper gives every wrapped kind. */
#define SKIP_BLOCK_KIND(label)                                                                                        \
    .name = (label), .output_optional = true, .kept_bytes = skip_kept_bytes,                                          \
    .offload_host_bytes = skip_offload_host_bytes, .offload_device_bytes = skip_offload_device_bytes,                 \
    .forward = skip_forward, .prefetch = skip_prefetch, .backward = skip_backward, .release = skip_release,           \
    .states = skip_states
size_t skip_kept_bytes(const block *b, keep_level keep);
size_t skip_offload_host_bytes(const block *b);
size_t skip_offload_device_bytes(const block *b);
st_status skip_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                       block_saved **saved_io);
st_status skip_prefetch(block *b, block_saved *saved);
st_status skip_backward(block *b, const block_state *in, block_saved *saved, block_state *grad);
void skip_release(block *b, block_saved *saved);
void skip_states(const block *b, state_map *out);

#endif
