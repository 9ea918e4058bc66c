/* Cosmos 2 (CosmosTransformer3DModel, text-to-image), internal to src/models: the model (cosmos.c) on the gated-modules
 * block (gated_block.c), and Anima's text conditioner (anima.c). */
#ifndef SEGTRAIN_MODELS_COSMOS_H
#define SEGTRAIN_MODELS_COSMOS_H

#include "models/xattn/gated_block.h"

#define COSMOS_LN_EPS 1e-6f
#define COSMOS_QK_EPS 1e-5f /* diffusers Attention's RMSNorm of q and k per head */
#define COSMOS_MOD_ROWS 5   /* m->ctx.mod: temb's three rows (shift, scale, gate), then the final layer's two */

/* Anima's text conditioner (anima.c), run in the model's embedding: each block's kept tensors, (B L, D) unless said */
enum { AB_N1, AB_QR, AB_Q, AB_KR, AB_K, AB_V, AB_A, AB_O, AB_X1, AB_N2, AB_CQR, AB_CQ, AB_CA, AB_CO, AB_X2, AB_N3,
       AB_F1 /* (B L, 4 D) */, AB_F2, AB_X3, AB_CK /* these three (B Lq, D) */, AB_CKR, AB_CV, AB_COUNT };
enum { AS_N1, AS_Q, AS_K, AS_A, AS_N2, AS_CQ, AS_CK, AS_CA, AS_N3, AS_COUNT };

struct cJSON;
/* CosmosTransformer3DModel's config over mc (cosmos2image.c), which Anima's reader extends */
st_status cosmos_from_json(const struct cJSON *j, const char *file, model_config *mc);

/* cosmos_family's topology_options (family.h); NULL: CosmosTransformer3DModel's */
typedef struct cosmos_options {
    bool text_adapter; /* Anima's: its text conditioner (anima_adapter), whose weights follow the transformer's */
} cosmos_options;

typedef struct anima_block {
    int n1, n2, n3;     /* RMSNorm weights (D) */
    attn_weights sa, ca; /* self_attn, cross_attn; q_norm and k_norm per head */
    lin_layer f0, f2;
    const float *x; /* the block's input */
    float *t[AB_COUNT];
    op_state st[AS_COUNT];
} anima_block;

typedef struct anima_adapter {
    int n, embed, norm;
    lin_layer out;
    anima_block blocks[MODEL_REFINER_MAX];
    float *h0, *src, *ids, *wts, *y, *z, *rope; /* a step's embedded ids, Qwen states, ids, weights, out_proj, norm */
    op_state zst;
} anima_adapter;

void anima_register(param_set *s, anima_adapter *a, const model_config *c);
/* text (B, shape.text, text_dim): the conditioner's output for cond (model.h's anima layout), zero padded */
st_status anima_forward(struct model *m, anima_adapter *a, const float *cond, float *text);
/* dtext back through the conditioner into its weights' gradients */
st_status anima_backward(struct model *m, anima_adapter *a, const float *dtext);
void anima_release(struct model *m, anima_adapter *a);

/* cosmos2image's and anima's AdaLN-LoRA sizes (their check hooks, family.h) */
st_status cosmos_check(const model_config *mc);

#endif
