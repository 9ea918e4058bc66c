/* What the model families share, internal to src/models: the model object, whose generic parts (parameters,
 * block sequences and their plans, the offload engine, hidden-state capture) model.c runs, and the family
 * table through which a family supplies its embeddings, head and blocks. */
#ifndef SEGTRAIN_MODELS_INTERNAL_H
#define SEGTRAIN_MODELS_INTERNAL_H

#include "segtrain/executor.h"
#include "segtrain/lin.h"
#include "segtrain/model.h"
#include "segtrain/plan.h"

#define DIT_LN_EPS 1e-6f
#define DIT_FREQ_DIM 256 /* timestep frequency embedding width */
#define MODEL_SEQ_MAX 4
/* The rotary axes of the family's heads at mc's width (model_presets.c): Flux's (16, 56, 56) at 128, ... */
void model_rope_axes(model_config *mc);

typedef struct model_shape {
    int64_t batch, tokens, hidden, heads; /* tokens: image tokens per sample */
    int64_t text;                         /* mmdit: text tokens per sample */
    attention_mechanism mechanism;
} model_shape;

/* One attention's weights: its projections, and q and k's RMSNorm weights (< 0: none) */
typedef struct attn_weights {
    lin_layer q, k, v, out;
    int norm_q, norm_k;
} attn_weights;

/* How model_init starts a parameter (LoRA adapters and fixed tables aside). */
typedef enum param_init { INIT_XAVIER, INIT_NORMAL, INIT_ZERO, INIT_ONE } param_init;
/* A family's init_of as a table, ended by {0}: the first rule whose pattern the name matches gives its init. A
 * pattern is alternatives split by '|', each terms joined by '&'; a term is a substring, held at the name's start
 * with a '^' before it, at its end with a '$' after it, and not held with a '!' before it ("norm&.weight$"). */
typedef struct init_rule {
    param_init init;
    const char *pattern;
} init_rule;
param_init init_by_rules(const char *name, const init_rule *rules, param_init otherwise);

/* The skeleton most families share (model_step.c runs it): embed makes sequence 0's first state, one tensor (*x0),
 * the blocks run, and head makes the prediction from m->step.last. Back: head_backward makes dL/d(last) (*dx, which
 * the skeleton frees; it may free m->step.last itself, which the skeleton frees after it otherwise), the blocks go
 * back, and embed_backward takes dL/dx0 (grad's one tensor, which it may free early: the skeleton frees it after it
 * otherwise). k: a scratch the skeleton ends after embed_backward (its buffers may live across the blocks' backward).
 * A family whose head is a final_layer gives final and dx_name instead of head and head_backward. */
typedef struct final_layer final_layer;
typedef struct model_chain {
    st_status (*embed)(model *m, const float *x, const float *timesteps, const float *cond, bool train, float **x0);
    st_status (*embed_backward)(model *m, scratch *k, block_state *grad);
    st_status (*head)(model *m, bool train, const float **pred);
    st_status (*head_backward)(model *m, const float *dpred, scratch *k, float **dx);
    final_layer *(*final)(model *m);
    const char *dx_name;
} model_chain;

typedef struct model_family {
    /* Registers the parameters and sets up the block sequences (m->cfg and m->pool are set, and m->impl is
     * impl_size zeroed bytes, model_alloc's, when impl_size is not 0). */
    st_status (*create)(model *m);
    size_t impl_size;
    /* Fills fixed tables once the parameters are allocated (NULL: none); not on dry pools, which hold no data. */
    void (*fill_fixed)(model *m);
    void (*destroy)(model *m); /* NULL: nothing beyond what model_alloc gave */
    /* Sets m->shape.batch and every sequence's state sizes for a batch (NULL: each sequence's one state is
     * batch x tokens x hidden). */
    void (*set_batch)(model *m, int64_t batch);
    st_status (*forward)(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                         const float **pred);
    st_status (*backward)(model *m, const float *dpred);
    void (*release)(model *m); /* the end of a step that began (m->impl is the family's then) */
    const model_chain *chain; /* set: forward and backward are model_chain's skeleton around these */
    /* NULL: the family refuses capture_hidden_states. */
    st_status (*hidden)(model *m, int k, const float **h, float **dh);
    /* How model_init starts a parameter: its rules, then Xavier (init_of NULL), or init_of itself. */
    const init_rule *inits;
    param_init (*init_of)(const char *name);
} model_family;

/* A step, from model_forward to its release (model_step.c owns it): whether it is active and trains, each sequence's
 * run, the last sequence's output, the gradients to add to sequence 0's outputs on the way back (extra, per block,
 * NULL: none; a host array freed at release), and the slots of the buffers the family took for the step (model_hold). */
#define MODEL_STEP_HELD 128
#define MODEL_OWNED_MAX 16
typedef struct model_step {
    bool active, train;
    seq_run *run[MODEL_SEQ_MAX];
    block_state last;
    const float **extra;
    int n_held;
    float **held[MODEL_STEP_HELD];
} model_step;

struct model {
    model_config cfg;
    const model_family *family;
    pool *pool;
    param_set *params;
    param_set own_params;
    model_shape shape;
    struct {
        float *cs, *dcs; /* the blocks' context SiLU(c) (B, D) and its gradient */
        float *rope;     /* dual-stream: the joint sequence's rotary table (S, head_dim / 2, (cos, sin)) */
        int64_t rope_sample; /* dual-stream: floats from one sample's table to the next's (0: one table for all) */
        const attn_mask *mask; /* dual-stream: the joint attention's mask over [text; image] keys, NULL: none */
        float *mod, *dmod;     /* Chroma: every modulation vector (B, mod_rows, D), made by the model, and its gradient;
                                  the cross-attention DiTs: the blocks' t6 (rows 0-5) and the final layer's (6, 7) */
        float *text, *dtext;   /* the cross-attention DiTs: the text tokens (B L, D) the blocks attend to, and their
                                  gradient */
        int64_t mod_rows;
    } ctx;
    model_step step;
    int n_seq;
    block_seq seq[MODEL_SEQ_MAX];
    int64_t seq_sample[MODEL_SEQ_MAX]; /* a sample's floats of sequence q's state (0: image tokens x hidden) */
    seq_plan plan[MODEL_SEQ_MAX];
    offload off;    /* engine NULL until a host pool is set */
    /* musubi_blocks_to_swap: per sequence, its weights_ctx: block i is swapped block group i + first (when >= 0).
     * Group offload: block i is group group[i] (0: none), of groups first .. last; prefetch: use_stream's */
    struct swap_seq {
        struct model *m;
        int first, last;
        int *group;
        bool prefetch;
    } swap[MODEL_SEQ_MAX];
    bool *captured; /* per block of sequence 0: its output is wanted after forward */
    int *capture;   /* the captured blocks, in the order given */
    int n_capture;
    int64_t per_sample; /* elements of a sample's largest activation (model.c's check_sizes) */
    const float *r_time; /* AnyFlow's second time per sample (model_set_r_timesteps), NULL: r = t */
    uint64_t dropout_seed; /* model_set_dropout_seed's */
    void *impl; /* the family's own */
    void *owned[MODEL_OWNED_MAX]; /* model_alloc's */
    int n_owned;
};

/* ramtorch (docs/WEIGHTS.md; ramtorch.c): marks the selected linear layers' frozen weights as streamed groups of
 * m's parameters, each brought onto the device by lin.c around its GEMMs. Before the parameters are allocated. */
st_status model_stream_layers(model *m);
/* The module name of block i of m's sequence q: "transformer_blocks.3", or the family's (family_desc.block_module). */
void model_block_module(const model *m, int q, int i, char *name, size_t n);
/* Points lin.c's hooks at m's streamed layers (ramtorch's, group offload's leaf_level). */
void model_hook_layers(model *m);
/* enable_group_offload (docs/WEIGHTS.md; group_offload.c): marks m's frozen weights as diffusers' groups. Before the
 * parameters are allocated. */
st_status model_group_offload(model *m);

/* The steps several descriptors share (the others' are in their descriptors). */
extern const model_family dit_family, skipdit_family, mmdit_family, qwen_image_family, hunyuan_video_family,
    xdit_family, cosmos_family, lumina2_family, unet_family;
/* xdit_family's topology_options (family.h): the diffusers class whose layout and embeddings its steps follow; NULL:
 * PixArtTransformer2DModel's */
typedef struct xdit_options {
    bool wan;        /* WanTransformer3DModel's */
    bool ltx;        /* LTXVideoTransformer3DModel's */
    bool sana;       /* SanaTransformer2DModel's, or (sana_video) SanaVideoTransformer3DModel's */
    bool sana_video; /* SanaVideoTransformer3DModel's */
    bool s2v;        /* SimpleTuner's WanS2VTransformer3DModel's (with wan) */
} xdit_options;

/* unet.c: the U-Net's micro-blocks, counted from its config (conv_in, the ResnetBlock2Ds, Transformer2DModels and
 * samplers of every block). */
int64_t unet_depth(const model_config *c);
/* cascade.c: Stable Cascade's micro-blocks, counted from its config. */
int64_t cascade_depth(const model_config *c);

/* The patches of a step's latents (m->shape.batch of them), and a patch's features (channels x patch_t x patch^2). */
patch_shape model_patches(const model *m);
int64_t model_patch_dim(const model_config *c);
/* The output's channels: out_channels, or in_channels when 0. */
int64_t model_out_channels(const model_config *c);

/* n zeroed elements of size bytes, host memory that lives as long as the model (model_destroy frees it, after the
 * family's destroy): a family's impl and its blocks. NULL when out of host memory or of slots (MODEL_OWNED_MAX). */
void *model_alloc(model *m, size_t n, size_t size);
/* Sequence q, named name, of n blocks of kind, one state a boundary: returns the blocks' data, n zeroed items of size
 * bytes (the family's to fill), block i's self the i-th; NULL when out of host memory (model_alloc's, both it and the
 * sequence's table of blocks). */
void *model_seq_blocks(model *m, int q, const char *name, int n, const block_kind *kind, size_t size);
/* A training forward's activation buffer from the model's pool (nothing once *st is set). */
float *model_take(model *m, st_status *st, int64_t floats, const char *what, bool zero);
/* model_take into *slot, which the step holds: model_release frees *slot (whatever it then points at, NULL when the
 * family freed it or passed it on) and sets it NULL. */
void model_hold(model *m, st_status *st, float **slot, int64_t floats, const char *what, bool zero);
/* Runs sequence q from first (the executor takes its tensors over; a one-tensor state from *x0, which becomes NULL),
 * its output into out (NULL: m->step.last), its run the step's (model_release releases it). */
st_status model_seq_forward(model *m, int q, block_state *first, bool train, block_state *out);
st_status model_seq_forward1(model *m, int q, float **x0, bool train, block_state *out);
/* Back through sequence q from grad, which receives the gradient of its input; releases its run whatever it returns. */
st_status model_seq_backward(model *m, int q, block_state *grad);
/* Rows [at, at + n) of each sample's S rows of x (batch, S, hidden): gathered into part (batch, n, hidden), or
 * scattered from it (those rows of x overwritten) */
static inline void model_rows_gather(const model *m, float *part, const float *x, int64_t S, int64_t at, int64_t n)
{
    const int64_t D = m->shape.hidden;
    copy_rows(part, n * D, x + at * D, S * D, m->shape.batch, n * D);
}
static inline void model_rows_scatter(const model *m, float *x, const float *part, int64_t S, int64_t at, int64_t n)
{
    const int64_t D = m->shape.hidden;
    copy_rows(x + at * D, S * D, part, n * D, m->shape.batch, n * D);
}
/* A model_chain head's last step back over joint rows: m->step.last freed, then dL/d(the rows) (*dx, named what, zeroed,
 * S rows a sample) with the image tokens' gradient dimg (T rows a sample) at row `at` of each sample's. */
st_status model_rows_grad(model *m, const float *dimg, int64_t S, int64_t at, const char *what, float **dx);
/* Sample b's caption length from its conditioning's mask (after the text's L x text_dim: ones for its tokens, first,
 * then zeros), for the families that lay each sample's rows out by it; a mask of another form is refused. */
st_status model_caption_length(const model *m, const float *cond, int64_t b, float *len);
/* diffusers_config.c: whether the family's architecture can come from a diffusers config.json, and reading one
 * (a model folder, a pipeline's transformer/, or the file) over mc, unchecked. */
bool model_reads_diffusers(const model_config *mc);
st_status model_read_diffusers(const char *path, model_config *mc);
/* The offload to use for a forward: NULL without a host pool. */
offload *model_offload(model *m);

/* The timestep embedding path shared by the families: c = linear_2(SiLU(linear_1(freq(t)))), then the caller adds
 * what else conditions (a label's embedding, a guidance or pooled-text embedding made the same way) and makes
 * cs = SiLU(c). Buffers are the family's; backward takes dL/dc and accumulates the path's weight gradients. */
typedef struct temb {
    int w0, b0, w2, b2; /* parameter indices; a bias < 0: none (Flux.2's) */
    int64_t in;         /* linear_1's input width: DIT_FREQ_DIM timestep features, or a pooled text vector's */
    int64_t mid;        /* linear_1's output width: D, or temb_register_mid's */
    int64_t out;        /* c's width: the D registered (hidden_size; LTX-2's audio paths: its audio width) */
    bool gelu;          /* GELU (tanh) between the linears, not SiLU (Krea 2's time_embed) */
    float *freq, *h, *hs, *c; /* freq: linear_1's input */
} temb;
void temb_register(param_set *s, temb *t, const char *linear_1, const char *linear_2, int64_t in, int64_t D,
                   bool trainable);
/* One whose hidden width is not its output's (Z-Image's t_embedder: 1024 wide, out 256). */
void temb_register_mid(param_set *s, temb *t, const char *linear_1, const char *linear_2, int64_t in, int64_t mid,
                       int64_t D, bool trainable);
/* A TimestepEmbedding without biases (sample_proj_bias False, Flux.2's). */
void temb_register_nobias(param_set *s, temb *t, const char *linear_1, const char *linear_2, int64_t in, int64_t D,
                          bool trainable);
/* diffusers' TimestepEmbedding `prefix`: prefix.linear_1 and prefix.linear_2, with biases or (Flux.2's) none. */
void temb_register_at(param_set *s, temb *t, const char *prefix, int64_t in, int64_t D, bool bias, bool trainable);
/* Takes the path's buffers (activations: freq, h, hs, c); temb_take also the context's (cs, and with train dcs,
 * zeroed), hidden wide, temb_take_wide `width` wide (a context wider than the stream: Ideogram's adaln_dim). The step
 * holds them (model_hold): model_release frees them. */
void temb_take_path(model *m, temb *t, st_status *st);
void temb_take(model *m, temb *t, st_status *st, bool train);
void temb_take_wide(model *m, temb *t, st_status *st, bool train, int64_t width);
/* c from the timesteps' features; temb_mlp_forward: c from whatever the caller put in freq. */
st_status temb_forward(model *m, temb *t, const float *timesteps);
st_status temb_mlp_forward(model *m, temb *t);
st_status temb_backward(model *m, temb *t, float *dc);
/* The same from a context SiLU(c) too: dc += its gradient dcs through the SiLU, then back through the path. */
st_status temb_silu_backward(model *m, temb *t, float *dc, const float *dcs);

/* The adaLN final layer both families end with: pred = unpatchify(out(LN(x) (1 + scale) + shift)), the
 * modulation linear of SiLU(c). DiT's modulation is (shift, scale); Flux's AdaLayerNormContinuous (scale, shift).
 * forward takes mod, ln, h and pred (activations) and keeps LayerNorm's statistics; backward_done frees what
 * only backward read (statistics, ln, h); release frees the rest. */
struct final_layer {
    int ada_w, ada_b, out_w, out_b; /* parameter indices; a bias < 0: none */
    bool scale_first;
    bool no_norm; /* AuraFlow's norm_out modulates x itself, without LayerNorm */
    int64_t mod_row; /* ada_w < 0 (Chroma): the modulation is rows mod_row, mod_row + 1 of m->ctx.mod */
    patch_order order; /* of proj_out's rows */
    bool negate;       /* HiDream: the prediction is the negated output */
    float *mod, *ln, *h, *pred;
    op_state stats;
};
/* Registers f's modulation linear `ada` (D -> 2D; NULL: none, the model's rows) and output projection `out` (D -> the
 * patch's features), each `.weight` then (bias) `.bias`, in that order; trained unless LoRA trains. */
void final_register(param_set *s, final_layer *f, const model_config *c, const char *ada, const char *out, bool bias);
st_status final_forward(model *m, final_layer *f, const float *x);
st_status final_backward(model *m, final_layer *f, const float *x, const float *dpred, float *dx);
void final_backward_done(model *m, final_layer *f);
void final_release(model *m, final_layer *f);

/* SD3's and OmniGen's fixed 2D sine-cosine table (E^2, D), E = pos_embed_max: diffusers' get_2d_sincos_pos_embed(D, E,
 * base_size = sample_size / patch). Position k of an edge is k / (E / base) (in float32, as torch divides), the
 * column's sin-cos in the first half of a row, the row's in the second, each half sines then cosines of frequencies
 * 10000^(-j / (D/4)). A checkpoint's own table replaces this one when it is loaded. */
void sincos_table_fill(const model_config *c, float *t);

/* The argument of a family's host_loop (ops.h): the model, the batch's conditioning and timesteps it reads, and a
 * workspace its caller allocated for it (each may be NULL). */
typedef struct model_loop {
    model *m;
    const float *cond, *timesteps;
    float *work;
} model_loop;
/* A family's per-step host loop (host_loop, writing out) of fn(m, cond, work), work a workspace of `work` floats
 * (named what; none when 0) taken from the pool before it and freed after, so that a dry step counts it too */
typedef st_status (*model_loop_fn)(model *m, const float *cond, float *work);
st_status model_host_loop(model *m, const void *out, model_loop_fn fn, const float *cond, int64_t work,
                          const char *what);
/* out = 1 - timesteps / 1000 over n samples, in float (1 - sigma: the time several families' embedders read) */
static inline void time_one_minus_sigma(float *out, const float *timesteps, int64_t n)
{
    copy_rows(out, n, timesteps, n, 1, n), div_by(out, n, 1000.0f), scale_by(out, n, -1.0f), add_scalar(out, n, 1.0f);
}
/* The argument of a host_loop that fills a fixed table t of `rows` from its sizes alone. */
typedef struct table_fill {
    float *t;
    int64_t rows, cols;
} table_fill;

/* The built-in stand-in for a text encoder (tokenizer.c), for a caption: its words (ASCII letters and digits,
 * lowercased) hashed into rows 1 .. vocab-1; seq (len, dim) holds each word's row vector (N(0, 1) values) in
 * order, zero rows for padding; pooled (pooled_dim) the mean of the words' own pooled vectors (zero without
 * words). Returns the number of words placed (they fill rows 0 .. words - 1). */
int64_t encode_caption(const char *caption, int64_t vocab, int64_t len, int64_t dim, int64_t pooled_dim, float *seq,
                       float *pooled);
/* The words of parts[0 .. n_parts), in order, as their rows' ids (floats) in ids[0 .. len), 0 after them; returns how
 * many were placed. */
int64_t encode_caption_ids(const char *const *parts, int n_parts, int64_t vocab, int64_t len, float *ids);

/* The DiT block (dit_block.c): adaLN-Zero attention and MLP, reading m->shape and m->ctx. */
typedef struct dit_block {
    struct model *m;
    lin_layer ada, qkv, proj, fc1, fc2;
} dit_block;
void dit_block_register(param_set *s, dit_block *b, const char *prefix, const model_config *c);
extern const block_kind dit_block_kind;

/* The blocks between DiT's embeddings and its final layer (dit.c runs dit and skipdit with either): registers
 * their parameters into s in state_dict order as sequence 0, "blocks" (model_seq_blocks), and returns their data in
 * *data. */
typedef st_status (*dit_blocks_fn)(model *m, param_set *s, void **data);
/* skipdit.c: in_blocks.{i}, mid_block, out_blocks.{j}, with U-ViT's long skips. */
st_status skipdit_blocks(model *m, param_set *s, void **data);

#endif
