/* The dual-stream families, internal to src/models: Flux's two block kinds (mmdit_block.c), what the models
 * (mmdit.c: Flux; sd3.c, qwen_image.c; flux2.c and auraflow.c with their own blocks) share with them, and the
 * models' common skeleton (dual.c). */
#ifndef SEGTRAIN_MODELS_MMDIT_H
#define SEGTRAIN_MODELS_MMDIT_H

#include "models/core/internal.h"

#define MMDIT_RMS_EPS 1e-6f
#define MMDIT_ROPE_THETA 10000.0 /* Flux.1's */

/* One stream's weights. Double blocks have an image stream [0] and a text stream [1], each with its own adaLN
 * (6D: shift, scale, gate of attention, then of the MLP), q/k/v, RMSNorm of q and k per head, output projection
 * and MLP. A single block has one: adaLN of 3D (shift, scale, gate), q/k/v, proj_mlp as mlp1 and proj_out
 * (attention and MLP outputs concatenated, 5D -> D) as out; mlp2 unused. */
typedef struct mm_stream {
    lin_layer ada, q, k, v, out, mlp1, mlp2;
    int norm_q, norm_k; /* RMSNorm weights (head_dim); < 0 without qk_norm */
} mm_stream;

/* A block's weights, and what SD3's joint blocks add to Flux's double block (set before registering):
 * - no qk_norm: q and k enter attention as projected (SD3; Flux and SD3.5 normalise them);
 * - dual: SD3.5's second, image-only self-attention `attn2` (x: q, k, v, out and norms), its input modulated by
 *   the image adaLN's extra (shift, scale, gate) (9D), its gated output added after attention's;
 * - context_pre_only (SD3's last block): the text stream only gives q, k, v to the joint attention, its adaLN is
 *   AdaLayerNormContinuous (2D: scale, shift), and the block outputs the image stream alone. */
/* A double block's weight names under transformer_blocks.{i}, per stream (image, text, attn2): modulation, q, k, v,
 * output projection, MLP in and out, q and k norms. */
typedef struct mm_names {
    const char *stream[3][9];
} mm_names;
extern const mm_names mm_qwen_names; /* QwenImageTransformerBlock's (img_mod.1, img_mlp, txt_mod.1, txt_mlp) */

typedef struct mm_block {
    struct model *m;
    mm_stream s[2];
    mm_stream x;
    bool qk_norm, dual, context_pre_only;
    /* Chroma: the modulation vectors are rows mod_row[s] .. of the model's m->ctx.mod (the approximator's output),
     * not an adaLN linear of the block's own (set before registering) */
    bool model_mod;
    int64_t mod_row[2];
    const mm_names *names; /* NULL: Flux's and SD3's (norm1.linear, ff, norm1_context.linear, ff_context) */
} mm_block;

/* Sizes of a step: image tokens T and text tokens L per sample; the joint sequence is text first, S = L + T. Its
 * n streams: the image's and the text's, or (mm_joined) the joint sequence as one. */
typedef struct mm_dims {
    int64_t B, T, L, S, D, H, hd;
    int64_t J;         /* B * S rows of the joint sequence */
    int n;
    int64_t len[2];    /* a stream's tokens per sample: image T, text L */
    int64_t rows[2];   /* a stream's rows: image B*T, text B*L */
    int64_t offset[2]; /* where a stream's tokens start within a sample's joint rows: image L, text 0 */
} mm_dims;

mm_dims mm_dims_of(const struct model *m);
mm_dims mm_joined(const mm_dims *d); /* the same step with the joint sequence as its one stream */
int64_t mm_rows_max(const mm_dims *d); /* the larger stream's rows */
/* Copies a stream's rows (rows[s], D) into / out of the joint (J, D) layout. */
void mm_to_joint(const mm_dims *d, int s, float *joint, const float *x);
void mm_from_joint(const mm_dims *d, int s, float *x, const float *joint);
attn_shape mm_joint_attn(const mm_dims *d, attention_mechanism mech);
/* Rotary embedding of joint q or k, every token by its position ids (each sample by its own table where
 * m->ctx.rope_sample says so); none without a table (SD3). */
void mm_rope_joint(const struct model *m, const mm_dims *d, float *x, bool backward);
/* Stream s's raw q or k rows RMSNorm-ed (eps 1e-6, weight w: per head; w < 0: copied) where they sit in the joint
 * rows. */
st_status mm_rms_to_joint(const struct model *m, const mm_dims *d, int s, float *joint, const float *raw, int w);
/* dL/draw += RMSNorm (eps 1e-6, weight w: per head) backward over rows (rows, D) of g, the gradient after the norm
 * (w < 0: no norm, g itself); tmp is a (rows, D) buffer. */
st_status mm_rms_back(const struct model *m, const mm_dims *d, int64_t rows, float *draw, const float *g, const float *raw,
                      int w, float *tmp);

/* A stream's q, k and v projections and the RMSNorms of q and k (mm_rms_to_joint's w) */
typedef struct mm_qkv {
    const lin_layer *q, *k, *v;
    int norm_q, norm_k;
} mm_qkv;
/* Stream s's q, k and v of h (its rows[s] rows) into the side's joint SQ, SK and SV rows, q and k normed from their
 * raw rows qr and kr (NULL, without norms: tmp); tmp is a (rows[s], D) buffer. */
st_status mm_qkv_forward(const struct model *m, const mm_dims *d, int s, mm_qkv p, block_saved *sv, float *qr,
                         float *kr, const float *h, float *tmp);
/* Its backward from the joint dq, dk and dv (dside[SQ .. SV]): dh += h's gradient, the weights' and norms' gradients
 * accumulate; dr, gs and tmp are (rows[s], D) workspaces. */
st_status mm_qkv_backward(const struct model *m, const mm_dims *d, int s, mm_qkv p, float *const *dside,
                          const float *qr, const float *kr, const float *h, float *dh, float *dr, float *gs,
                          float *tmp);

/* Registers block i's weights by diffusers' names (b->names), for b's options (qk_norm, dual, context_pre_only). */
void mm_double_register(param_set *ps, mm_block *b, int i, const model_config *c);
void mm_single_register(param_set *ps, mm_block *b, int i, const model_config *c);

extern const block_kind mm_double_kind, mm_single_kind;

struct cJSON;
/* FluxTransformer2DModel's config keys over mc (diffusers_dual.c): its defaults, text_dim joint_attention_dim's,
 * then the file's values */
st_status flux_keys(const struct cJSON *j, const char *file, model_config *mc, int64_t text_dim);
/* What both HunyuanVideos' configs share (diffusers_dual.c; what: the class in refusals): their heads (the class's
 * default `heads` of 128), layers, refiner layers (2), patches (patch_size_t 1) and text width over mc's defaults, and
 * rope_axes_dim ((16, 56, 56)); what they fix: mlp_ratio 4, rope_theta 256 and RMSNorms on q and k */
st_status hunyuan_keys(const struct cJSON *j, const char *file, model_config *mc, int64_t heads, const char *what);

/* mmdit_family's topology_options (family.h); NULL: FluxTransformer2DModel's */
typedef struct mmdit_options {
    bool approximator; /* ChromaTransformer2DModel's: the modulation from distilled_guidance_layer, not per block */
    bool longcat;      /* LongCatImageTransformer2DModel's: time_embed's names, and its own position ids */
} mmdit_options;

/* qwen_image_family's topology_options (family.h); NULL: QwenImageTransformer2DModel's */
typedef struct qwen_image_options {
    bool mageflow; /* SimpleTuner's MageFlowTransformer2DModel (mageflow.c): its text unrotated, sample b's image at
                      rotary frame b (its packed batch's), its config's keys */
} qwen_image_options;

/* hunyuan_video_family's topology_options; NULL: HunyuanVideoTransformer3DModel's */
typedef struct hunyuan_video_options {
    bool v15; /* HunyuanVideo15Transformer3DModel's */
} hunyuan_video_options;

/* adaLN-Zero (every modulation and the final projection zero), RMSNorm weights one, N(0, 0.02) embedding MLPs,
 * xavier-uniform elsewhere: Flux's and SD3's names alike. */
param_init mm_init_of(const char *name);

/* ---- the models' skeleton (dual.c) ---- */

/* What every dual-stream model keeps for a step. */
typedef struct dual_step {
    float *text_in;             /* (B L, text_dim): the text embedder's input, kept while its weight trains */
    float *patches, *img, *txt; /* (N, C p p); the first state (N, D), (B L, D) until the executor takes it */
    float *xh; /* with single blocks: the image rows of the last state (N, D), the final layer's input */
    float *guidance; /* (B): 1000 * the guidance value, as Flux embeds it */
} dual_step;

/* The first member of a dual-stream model's impl: its blocks, final layer and step, and what the family does. */
typedef struct dual_model {
    void *blocks; /* the family's: double (joint), then single */
    block *seq_blocks;
    final_layer final;
    dual_step step;
    /* the step's embeddings: step.img, step.txt, m->ctx.cs and whatever else the blocks read */
    st_status (*embed)(model *m, const float *x, const float *timesteps, const float *cond, bool train);
    /* the embeddings' weight gradients from the first state's */
    st_status (*embed_backward)(model *m, float *dimg, const float *dtxt);
    st_status (*backward_begin)(model *m); /* NULL: none; before the head's backward */
    void (*release_own)(model *m);          /* NULL: none; the family's own buffers of a step */
} dual_model;

/* m->impl's (a dual_model first: its family's impl_size) n blocks of block_size bytes (model_alloc: the model frees
 * them); NULL: out of memory. */
void *dual_blocks(model *m, int n, size_t block_size);
/* Sequence 0, named name, of the nd double blocks of kind dk (two streams); with ns > 0, the
 * single_transformer_blocks sequence of kind sk after them. Block i is blocks + i * block_size. */
void dual_sequences(model *m, const char *name, int nd, const block_kind *dk, int ns, const block_kind *sk,
                    size_t block_size);
/* model_family's: the streams through sequence 0, with single blocks joined through sequence 1, then the image
 * rows through the final layer; backward mirrors it. */
void dual_set_batch(model *m, int64_t batch);
st_status dual_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                       const float **pred);
st_status dual_backward(model *m, const float *dpred);
void dual_release(model *m);
/* A dual-stream family's model_family steps: the four above. */
#define DUAL_STEPS .set_batch = dual_set_batch, .forward = dual_forward, .backward = dual_backward, .release = dual_release

/* The embeddings' common pieces; w, b are parameter indices, a bias < 0: none. take_tokens takes the step's
 * text_in (B, text_len, text_dim), patches, img and txt (nothing once *st is set) and copies the conditioning's text
 * sequence into text_in; embed_image makes
 * img = x_embedder(patchify(x)); embed_text txt = context_embedder(the conditioning's text sequence), text_in
 * staying only while that weight trains; tokens_backward accumulates both embedders' weight gradients (the text's
 * while text_in stays); c_backward takes dL/dc from the blocks' dL/dcs (cs = SiLU(c), c = t->c) and goes back
 * through each path that is not NULL. */
void dual_take_tokens(model *m, st_status *st, const float *cond);
/* The conditioning: c = t's embedding of the timesteps + g's of 1000 times the conditioning's last value (Flux's
 * guidance) + p's of the pooled text vector, cs = SiLU(c); g and p may be NULL (take_c: t too, for Chroma's own).
 * take_c takes their buffers, t's with the context's (cs, and dcs to train). */
void dual_take_c(model *m, st_status *st, bool train, temb *t, temb *g, temb *p);
st_status dual_c_forward(model *m, const float *timesteps, const float *cond, temb *t, temb *g, temb *p);
void dual_embed_image(model *m, const float *x, int w, int b);
void dual_embed_text(model *m, const float *cond, bool train, int w, int b);
void dual_tokens_backward(model *m, const float *dimg, const float *dtxt, int x_w, int x_b, int ctx_w, int ctx_b);
void dual_image_backward(model *m, const float *dimg, int x_w, int x_b); /* tokens_backward's image half */
st_status dual_c_backward(model *m, temb *t, temb *g, temb *p);

#endif
