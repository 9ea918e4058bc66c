/* What the dual-stream blocks (mmdit_block.c, flux2_block.c, auraflow_block.c) share, internal to src/models:
 * one layout of a block's saved tensors, the attention side's trip to the host, and the forward's frame (which
 * scratch a buffer comes from, by keep level, and what a forward leaves in block_saved). */
#ifndef SEGTRAIN_MODELS_ATTN_SIDE_H
#define SEGTRAIN_MODELS_ATTN_SIDE_H

#include "models/core/internal.h"

/* The side: an attention's q, k, v, o, q and k before their norm (SIDE_PER tensors), for up to ATTN_N attentions a
 * block: the joint one's, then SD3.5's attn2's on the image rows (or a cross-attention's), then LTX-2's four more.
 * Attention a's tensors start at a * SIDE_PER, and its kept state is attn[a]. */
enum { SQ, SK, SV, SO, SQR, SKR, XQ, XK, XV, XO, XQR, XKR };
#define SIDE_PER 6
#define ATTN_N 6
#define SIDE_MAX (SIDE_PER * ATTN_N)

/* Every field a family leaves unused stays NULL. */
struct block_saved {
    float *mod[2];            /* the streams' modulations (B, wD), w the modulation's width */
    float *side[SIDE_MAX];    /* the side; raw q/k hold the streams one after another */
    int64_t side_n[SIDE_MAX]; /* floats of each side tensor, 0: unused (set by side_take) */
    int n_attn;               /* attention states kept (set by side_take) */
    op_state attn[ATTN_N];
    float *o[2], *o2;         /* output projections per stream and attn2's (for the gates' gradients); lumina2_block.c's
                                 o2 is Krea 2's attention output gate, to_gate's output */
    float *o3[4];             /* LTX-2's further four attentions' */
    float *f1[2], *f2[2], *f3[2]; /* KEEP_ALL: the feed-forward's outputs */
    pool *pool;
    offload *off;
    bool on_host;
    bool mod_borrowed; /* mod points into the model's modulation rows (Chroma), not the block's own */
    bool att_kept;     /* a KEEP_ATTENTION_OUTPUT forward left the attentions' outputs and states, for its recompute */
    bool xo_kept;      /* ... XO's among them (frame's keep_xo) */
    bool bf16;         /* mixed_precision bf16: what is kept is held in bf16 between forward and backward */
    bool packed;       /* ... and is so now (side_pack) */
    bool f1_raw[2];    /* f1[s] holds bytes, not a tensor (HiDream's routing state, its indices among them): kept as is */
    host_tensor h[SIDE_MAX + ATTN_N]; /* the side and the attention states, while on the host */
};

/* The forward's common frame: what is kept, tagged by keep level, and the cases of the attention side. What is
 * kept goes through `kept` (tagged activations), what is transient through `tmp` (workspace); with KEEP_NOTHING
 * the side, modulations and projections are transient (ks, kt), and only KEEP_ALL keeps the feed-forward's
 * outputs (fs, ft). */
typedef struct frame {
    keep_level keep;
    bool from_host, to_host;
    bool reuse; /* a recompute after KEEP_ATTENTION_OUTPUT: the attentions' outputs and states are sv's already */
    /* KEEP_ATTENTION_OUTPUT keeps SO, and XO too when this is set (SD3.5's attn2, a self-attention of the image): a
     * cross-attention to the text is cheap to run again (its keys are the text's few tokens), its output is not */
    bool keep_xo;
    mem_tag kt, ft;
    scratch kept, tmp;
    scratch *ks, *fs;
} frame;
/* A block's forward begins: counts the run, takes the saved tensors a recompute brings back (*saved_io) or new ones,
 * and sets up f for them; NULL when the host is out of memory. */
block_saved *frame_begin(frame *f, block *b, const struct model *m, keep_level keep, offload *off,
                         block_saved **saved_io);
/* Records the side's sizes (numel[SIDE_MAX], 0: unused) and attention states, and takes its buffers unless they
 * come back from the host (or, the attentions' outputs, are kept from a KEEP_ATTENTION_OUTPUT forward). */
void side_take(frame *f, block_saved *sv, const int64_t *numel, int n_attn);
/* Ends a forward: transient buffers go, sv keeps what the keep level says; on failure outs[0 .. n_out) and sv go. */
st_status frame_end(frame *f, st_status st, block_saved *sv, block_saved **saved_io, float **outs, int n_out);

/* The side's trip: send queues the copies to the host (under bf16 its tensors as bf16, as side_made made them, the
 * attentions' states float); drop frees the device copies once their last reader is done (the scratch that
 * allocated them forgets them); back waits for the copies from the host (float, as backward reads them). */
st_status side_send(block_saved *sv);
st_status side_drop(block_saved *sv, scratch *owner);
st_status side_back(block_saved *sv);
/* A backward's scratch on pool p, with the side back from the host first where it went there (its status
 * side_back's). */
scratch side_scratch(pool *p, block_saved *sv);
/* A block's per-head norm weight `prefix.name.weight` (hd), trained unless LoRA trains. */
int block_norm(param_set *ps, const char *prefix, const char *name, int64_t hd, const model_config *c);
/* A block's linear layer `prefix.name`, LoRA-adapted at `rank` (0: not), trained unless LoRA trains. */
lin_layer block_linear(param_set *ps, const char *prefix, const char *name, int64_t in, int64_t out, bool bias,
                       int64_t rank, const model_config *c);
/* mixed_precision bf16 (docs/PRECISION.md): what PyTorch's bf16 block makes in bf16 (every GEMM's and attention's
 * output, q and k after their norms and rotation) is rounded where it is made, at every keep level, so that what a
 * block keeps packs to bf16 without loss and every schedule computes the same bits; side_elem is the bytes a kept
 * tensor takes. */
static inline void side_made(const struct model *m, float *y, int64_t n)
{
    if (m->cfg.bf16_activations) round_to_bf16(y, n);
}
static inline size_t side_elem(const struct model *m) { return m->cfg.bf16_activations ? 2 : sizeof(float); }
/* A block's linear layers on the model's parameters and pool; fwd's output is made as PyTorch's bf16 GEMM's
 * (side_made) */
static inline st_status fwd(const struct model *m, const lin_layer *l, float *y, const float *x, int64_t n)
{
    const st_status st = lin_forward(m->params, m->pool, l, y, x, n);
    if (!st) side_made(m, y, n * l->out);
    return st;
}
static inline st_status bwd(const struct model *m, const lin_layer *l, float *dx, const float *dy, const float *x,
                            int64_t n)
{
    return lin_backward(m->params, m->pool, l, dx, dy, x, n);
}

/* One attention of a block (the side's tensors at `at`: SQ or XQ). The sizes come from shape: the queries' tokens
 * and heads, kv_tokens for a cross-attention, kv_heads for grouped queries. */
typedef struct side_attention {
    const struct model *m;
    const lin_layer *q, *k, *v, *out;
    int norm_q, norm_k;  /* RMSNorm weights of q and k; < 0: none */
    int64_t norm_width;  /* the norms' row: a head's width, or the whole width */
    float eps;
    bool zero_centred;   /* the norms scale by 1 + weight (Krea 2's, rmsnorm_zc_forward) */
    attn_shape shape;
    const attn_mask *mask;
    /* the self-attention's rotation of q (keys false) or k in place, back: its gradient's; NULL: none */
    void (*rotate)(const void *self, float *x, bool keys, bool back);
    const void *block;
    bool k_bias_zero;    /* k's bias gradient is left exactly zero (its bias adds q . b to a query's every logit) */
    /* A mixture of transformers (Cosmos 3's self-attention): each sample's rows from `split` on are projected and
     * normed by gen's q, k, v, out, norm_q and norm_k, the rows before it by these; NULL: one set for all rows */
    const struct side_attention *gen;
    int64_t split;
    /* A checkpoint's fused projection (LongCat-Video's attn.qkv, cross_attn.kv_linear), one GEMM and one adapter:
     * SIDE_FUSED_QKV: q makes each row's [q | k | v] (k, v unused); SIDE_FUSED_KV: k makes [k | v] (v unused). */
    int fused;
} side_attention;
enum { SIDE_FUSED_QKV = 1, SIDE_FUSED_KV = 2 };

/* a with w's projections and norms (internal.h's attn_weights) */
static inline side_attention side_attention_of(side_attention a, const attn_weights *w)
{
    a.q = &w->q, a.k = &w->k, a.v = &w->v, a.out = &w->out, a.norm_q = w->norm_q, a.norm_k = w->norm_k;
    return a;
}
/* The projections of xq (the queries' input) and xkv (the keys' and values'), their norms and rotation, and the
 * attention into the side (its state kept when keep), but not the self-attention (at SQ) in a recompute after
 * KEEP_ATTENTION_OUTPUT, whose output and state are kept; the output projection is the block's. */
st_status side_attention_forward(const side_attention *a, block_saved *sv, int at, const float *xq, const float *xkv,
                                 bool keep);
/* From dout, dL/d(the output projection's output), or with a NULL out dL/d(the attention's output): the weights'
 * gradients, and dxq (the queries' input) and dxkv (the keys' and values' input; the same buffer for a
 * self-attention) accumulated. */
st_status side_attention_backward(const side_attention *a, block_saved *sv, int at, const float *dout, const float *xq,
                                  const float *xkv, float *dxq, float *dxkv);

/* y = out(att) over the queries' rows, each row by its set's output projection (a->gen's past the split) */
st_status side_out_forward(const side_attention *a, float *y, const float *att);

/* Sizes with tensors of elem bytes an element (side_elem: what a block keeps, and attention offload's host copies);
 * an attention's kept state is float. What KEEP_ATTENTION_OUTPUT keeps of
 * an attention of this shape: its output (queries x heads x head width) and kept state. */
size_t side_output_bytes(const attn_shape *s, size_t elem);
/* The side of a block with this one self-attention: six tensors of its rows (queries x heads x head width) and the
 * kept state. side_take_self takes them; side_kept_bytes is the block's kept_bytes: nothing, what
 * KEEP_ATTENTION_OUTPUT keeps, or the side and `floats` more (with KEEP_ALL `all` more again). */
size_t side_self_bytes(attn_shape s, size_t elem);
size_t side_kept_bytes(attn_shape s, keep_level keep, int64_t floats, int64_t all, size_t elem);
/* The same for a block of several attentions whose side (its offload bytes) is `side` bytes (at elem), s its
 * self-attention: KEEP_ATTENTION_OUTPUT keeps s's output alone (the others run again). */
size_t side_block_kept_bytes(size_t side, attn_shape s, keep_level keep, int64_t floats, int64_t all, size_t elem);
void side_take_self(frame *f, block_saved *sv, attn_shape s);

/* The attention at `at` (SQ or XQ) from the side's q, k and v into its o, in the rows side_attention_forward lays
 * out, its state kept when keep; nothing in a recompute after KEEP_ATTENTION_OUTPUT, whose o and state are kept.
 * Backward: dq, dk and dv accumulate from dout, o's gradient in rows of dout_width floats. */
st_status side_attend(pool *p, const attn_shape *as, const attn_mask *mask, block_saved *sv, int at, bool keep);
st_status side_attend_backward(pool *p, const attn_shape *as, const attn_mask *mask, block_saved *sv, int at,
                               float *dq, float *dk, float *dv, float *dout, int64_t dout_width);

/* dx += the gradient of h = LN(x) (1 + scale) + shift (a LayerNorm without affine over rows of D, its statistics in
 * *stats, released here) from dh, and the modulation's into dshift and dscale; ln is LN(x), dln a (B T, D)
 * workspace. The modulation's rows are `stride` apart. */
void ln_modulate_backward(float *dx, float *dshift, float *dscale, float *dln, const float *dh, const float *ln,
                          const float *x, const float *scale, int64_t B, int64_t T, int64_t D, int64_t stride,
                          op_state *stats);

/* A gated feed-forward of two input projections (SwiGLU, GEGLU): f1 = w1 h, f3 = w3 h, f2 = w2(act(f1) f3); w3 NULL:
 * w1 is both, fused (gate rows first), and f1 (n, 2F) holds f1 and f3 side by side. h is
 * s's and is dropped once w1 and w3 have read it, before the activation's buffer (named `what`) is taken, so the two
 * are never live together; nothing runs once s has failed. */
void glu_ffn_forward(scratch *s, const struct model *m, const lin_layer *w1, const lin_layer *w3, const lin_layer *w2,
                     float *h, int64_t n, int64_t F, glu_kind kind, float *f1, float *f3, float *f2, const char *what);

/* A block's first two residuals again from what its forward kept, adaLN-single's six rows a sample in sv->mod[0] and
 * an ungated cross-attention (ace_step_block.c, xdit_block.c): x1 = x + gate1 o[0], x2 = x1 + o2, B samples of T rows
 * of D */
void side_residuals(const block_saved *sv, const float *x, float *x1, float *x2, int64_t B, int64_t T, int64_t D);

/* The feed-forward's GEMM outputs (sv's f1, f2, f3) that a backward made again in its scratch s, KEEP_ATTENTION having
 * kept none (*again set): side_ffn_drop frees them once read for the last time, side_ffn_forget has sv forget them at
 * the backward's end (s frees them then); both clear *again. */
void side_ffn_drop(block_saved *sv, scratch *s, bool *again);
void side_ffn_forget(block_saved *sv, bool *again);

/* block_kind's prefetch and release */
st_status side_prefetch(block *b, block_saved *sv);
void saved_release(block *b, block_saved *sv);

/* The fields of a block kind whose attention side is this file's: the FFN split, softmax attention whose output
 * KEEP_ATTENTION_OUTPUT keeps, side_prefetch and saved_release, with the kind's own name, sizes, forward and
 * backward. const block_kind k = {SIDE_BLOCK_KIND(...)}; a kind with more fields lists them after it. side_send
 * copies the side as kept_bytes counts it (under bf16, its tensors in bf16: side_elem), so `offloaded` is both its
 * host and its device bytes. */
#define SIDE_BLOCK_KIND(label, kept, offloaded, fwd, bwd)                                                             \
    .name = (label), .ffn_split = true, .softmax_attention = true, .keeps_attention_output = true,                   \
    .kept_bytes = (kept), .offload_host_bytes = (offloaded), .offload_device_bytes = (offloaded), .forward = (fwd),   \
    .prefetch = side_prefetch, .backward = (bwd), .release = saved_release

#endif
