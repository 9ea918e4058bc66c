/* The cross-attention DiT families, internal to src/models: the block (xdit_block.c) and the models (xdit.c:
 * PixArt Sigma's PixArtTransformer2DModel, Wan's WanTransformer3DModel, LTX-Video's LTXVideoTransformer3DModel). */
#ifndef SEGTRAIN_MODELS_XDIT_H
#define SEGTRAIN_MODELS_XDIT_H

#include "models/core/internal.h"

#define XDIT_LN_EPS 1e-6f

/* What Wan's image-conditioned blocks read besides the text, made by the model per step (wan_animate.c) */
typedef struct xdit_inputs {
    float *image, *dimage; /* the reference image's tokens after image_embedder (B image_tokens, D), their gradient */
    int64_t image_tokens;
    float *face, *dface;   /* Animate: the face adapters' key and value input, the face encoder's output after their
                              pre_norm_kv (B, face_frames, face_tokens, D), and its gradient */
    int64_t face_frames, face_tokens;
    /* Wan S2V: the reference image's tokens after each sample's video tokens, modulated by the rows of t = 0
     * (m->ctx.mod's rows 8 to 13); its audio injectors' keys and values, the audio encoder's tokens of each chunk of
     * the video tokens (B audio_chunks, audio_tokens, D), and SiLU of the chunk's global audio vector, the AdaLN's
     * input (B audio_chunks, D), with their gradients */
    int64_t ref_tokens, audio_chunks, audio_tokens;
    float *audio, *daudio, *audio_cs, *daudio_cs;
} xdit_inputs;

/* A block's weights and options (set the options before registering). The model provides m->ctx.mod (B,
 * mod_rows, D; rows 0-5 the blocks' shared t6) with its gradient m->ctx.dmod, m->ctx.text (B L, D: the text as the
 * cross-attention's keys and values read it) with m->ctx.dtext, m->ctx.mask (the cross-attention's key mask, or
 * NULL) and, with rope, m->ctx.rope. */
typedef struct xdit_block {
    struct model *m;
    attn_weights sa, ca;  /* attn1, attn2; the RMSNorm weights (D) of q and k, < 0: none */
    lin_layer ff0, ff2;
    int table;            /* scale_shift_table (6, D), Wan's (1, 6, D) */
    int cross_w, cross_b; /* Wan's norm2 before the cross-attention */
    /* options */
    bool qk_norm;    /* Wan, LTX: RMSNorm of q and k over the width, in both attentions */
    bool rope;       /* Wan, LTX: the self-attention's q and k rotated by m->ctx.rope */
    bool rope_width; /* LTX: one rotation over the whole width before the heads split (table (T, D/2, 2)); else per
                        head (table (T, head_dim/2, 2)) */
    bool rms_norms;  /* LTX: norm1 and norm2 are RMSNorms without weights (PixArt, Wan: LayerNorms) */
    bool cross_norm; /* Wan: LayerNorm with weights of x1 before the cross-attention (cross_attn_norm) */
    float eps;       /* the q/k RMSNorm's */
    int64_t ffn;     /* the feed-forward's width */
    /* Sana's (SanaTransformerBlock): linear self-attention (ATTN_LINEAR) without q/k/v biases, the cross-attention
     * over cross_heads, and GLUMBConv for the feed-forward on the model's h x w token grid: ff0 is conv_inverted
     * (D -> 2F), SiLU, conv_depth (depthwise 3 x 3) into (hidden, gate), hidden SiLU(gate), ff2 conv_point (F -> D,
     * no bias); no adapters on the convolutions */
    bool sana;
    int64_t cross_heads;
    int conv_w, conv_b; /* conv_depth's weight (2F, 1, 3, 3) and bias */
    /* Sana-Video's (SanaVideoTransformerBlock): the linear attention's mask carries the model's rotary table
     * (attn_mask.linear_rope), and GLUMBTempConv adds conv_temp(f2) to conv_point's output f2, a (3, 1) convolution
     * over the frames (conv_temp: its weight (D, D, 3, 1), no bias; < 0 elsewhere) */
    const attn_mask *self_mask;
    int conv_temp;
    /* WanVACE: a main block with hint_in >= 0 adds the control branch's hint hint_in to its output; a VACE block
     * (hint_out >= 0) writes hint hint_out = proj_out(its output). hints and dhints are the model's, per step. */
    int hint_in, hint_out;
    lin_layer proj_out;
    float **hints, **dhints;
    /* Wan image-to-video (Animate's backbone): attn2 also attends to in->image through add_k_proj and add_v_proj
     * (norm_added_k on its keys), the two attentions' outputs summed before to_out; its queries are the text's */
    bool added_kv;
    lin_layer ak, av;
    int norm_added_k;
    /* Wan Animate: face adapter `face` (>= 0) adds its cross-attention to in->face, frame by frame, to the output */
    int face;
    attn_weights fa; /* its q and k RMSNorm-ed per head */
    /* Wan S2V (WanS2VTransformerBlock): no q, k, v biases (diffusers' Attention's default), and audio injector `audio`
     * (>= 0) after the block: y[video] += to_out(attention(q of AdaLN(y[video]) per chunk, k and v of the chunk's audio
     * tokens)), AdaLN's shift and scale adain(in->audio_cs); its weights in fa (no norms) */
    bool no_qkv_bias;
    int audio;
    lin_layer adain;
    const xdit_inputs *in;
} xdit_block;

/* Registers block weights under prefix ("transformer_blocks.3", "blocks.3"), the feed-forward under "<prefix>.<ff>"
 * (ff or ffn), the table with table_dims (2 or 3) dimensions, a VACE block's proj_out, attn2's added keys and values,
 * and face adapter `face` as face_adapter.<face>. */
void xdit_block_register(param_set *s, xdit_block *b, const char *prefix, const char *ff, int table_dims,
                         const model_config *c);

extern const block_kind xdit_block_kind;

/* Wan S2V's audio encoder (wan_s2v.c, condition_embedder.causal_audio_encoder): registered in create; forward makes
 * in->audio and in->audio_cs (and their gradient buffers with train) from the Wav2Vec2 hidden states in cond;
 * backward accumulates its weights' gradients from in->daudio and in->daudio_cs. */
#define S2V_POSE_DIM 16    /* pose_dim: the 16 channels of SimpleTuner's zero pose latents */
#define S2V_AUDIO_TOKENS 5 /* an audio chunk's tokens: the encoder's 4 (num_audio_token) and its padding token */
typedef struct wan_s2v_audio wan_s2v_audio;
/* Where a sample's reference image latent (channels, 1, height, width) starts in its conditioning, after the text
 * and the audio features (wan_s2v.c's layout) */
int64_t wan_s2v_reference_at(const model_config *c);
st_status wan_s2v_audio_create(param_set *s, const model_config *c, wan_s2v_audio **out);
void wan_s2v_audio_destroy(wan_s2v_audio *a);
int64_t wan_s2v_audio_chunks(const model_config *c);
st_status wan_s2v_audio_forward(struct model *m, wan_s2v_audio *a, const float *cond, bool train, xdit_inputs *in);
st_status wan_s2v_audio_backward(struct model *m, wan_s2v_audio *a, xdit_inputs *in);
void wan_s2v_audio_release(struct model *m, wan_s2v_audio *a, xdit_inputs *in);

/* Wan Animate's encoders and embeddings besides the blocks (wan_animate.c): registered in create; forward makes
 * in->image and in->face (and their gradient buffers with train) from the conditioning and adds the pose embedding
 * to x0's tokens; backward reads the same cond (kept by the caller until then) and dL/dx0, and accumulates their
 * weights' gradients (none under LoRA). */
typedef struct wan_animate wan_animate;
st_status wan_animate_create(param_set *s, const model_config *c, wan_animate **out);
void wan_animate_destroy(wan_animate *a);
st_status wan_animate_forward(struct model *m, wan_animate *a, const float *cond, float *x0, bool train,
                              xdit_inputs *in);
st_status wan_animate_backward(struct model *m, wan_animate *a, const float *cond, const float *dx0, xdit_inputs *in);
void wan_animate_release(struct model *m, wan_animate *a, xdit_inputs *in);

#endif
