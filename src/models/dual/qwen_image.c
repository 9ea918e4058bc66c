/* The qwen_image family: diffusers' QwenImageTransformer2DModel (Qwen-Image 1.0) in its names and layouts
 * (docs/FAMILIES.md). The text encoder's tokens (txt_norm, an RMSNorm over joint_attention_dim, then txt_in) and
 * the image's 2x2 patches in Flux's packing (img_in) as two streams through one sequence of double blocks
 * (mmdit_block.c's, under Qwen's names: img_mod / txt_mod, img_mlp / txt_mlp), then the image rows through
 * norm_out (scale, shift) and proj_out in the packing's (c, i, j) order. No single-stream blocks and no pooled
 * vector: c = timestep_embedder(Timesteps(scale 1000)), given here as 1000 sigma. Rotary embedding by centred
 * position ids (position_ids_centred) on three axes, and the text's padding keys are excluded from every query's
 * attention by the conditioning's mask (image keys always kept). The last block's text output reaches nothing:
 * its gradient is zero, as in diffusers.
 *
 * Mage-Flow (SimpleTuner's MageFlowTransformer2DModel, mageflow.c) is this model with its latent's own channels
 * (patch 1), its text not rotated (MageFlowEmbedRope turns the image alone), and sample b's image at rotary frame b:
 * SimpleTuner packs a batch into one sequence whose img_shapes list the samples in turn, and the embedder places
 * the i-th at frame i (each sample attends within itself, so a table per sample). Its padding tokens, which
 * SimpleTuner drops from the packed text, are masked keys here: the same outputs and gradients. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/dual/mmdit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

typedef struct qw_model {
    dual_model b;
    temb t;
    int p_norm, p_txt_w, p_txt_b, p_img_w, p_img_b;
    float *normed;       /* (B L, text_dim): txt_in's input, kept while its weight trains */
    op_state norm_stats; /* txt_norm's 1/rms per token, kept with the step's text_in */
    float *key_bias;     /* (B, L + T): 0 for a kept key, -inf for a padding token's */
    attn_mask mask;
} qw_model;

static qw_model *qw_of(model *m) { return m->impl; }
static bool mageflow(const model_config *c)
{
    const qwen_image_options *o = family_options(c);
    return o && o->mageflow;
}

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train);
static st_status embed_backward(model *m, float *dimg, const float *dtxt);
static void release_own(model *m);

static st_status qw_create(model *m)
{
    const model_config *c = &m->cfg;
    const int n = (int)c->depth;
    qw_model *d = m->impl;
    mm_block *blocks = dual_blocks(m, n, sizeof(mm_block));
    if (!blocks) return st_host_oom("the Qwen Image model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch;
    /* in the order of QwenImageTransformer2DModel's state_dict */
    temb_register_at(s, &d->t, "time_text_embed.timestep_embedder", DIT_FREQ_DIM, D, true, full);
    d->p_norm = param_add(s, "txt_norm.weight", 1, (int64_t[]){c->text_dim}, full);
    d->p_img_w = param_add(s, "img_in.weight", 2, (int64_t[]){D, P}, full);
    d->p_img_b = param_add(s, "img_in.bias", 1, (int64_t[]){D}, full);
    d->p_txt_w = param_add(s, "txt_in.weight", 2, (int64_t[]){D, c->text_dim}, full);
    d->p_txt_b = param_add(s, "txt_in.bias", 1, (int64_t[]){D}, full);
    for (int i = 0; i < n; i++) {
        blocks[i] = (mm_block){.m = m, .qk_norm = true, .names = &mm_qwen_names};
        mm_double_register(s, &blocks[i], i, c);
    }
    d->b.final = (final_layer){.scale_first = true, .order = PATCH_CONV};
    final_register(s, &d->b.final, c, "norm_out.linear", "proj_out", true);
    d->b.embed = embed_forward, d->b.embed_backward = embed_backward, d->b.release_own = release_own;
    dual_sequences(m, "transformer_blocks", n, &mm_double_kind, 0, NULL, sizeof *blocks);
    return ST_OK;
}

/* adaLN-Zero (img_mod, txt_mod) and RMSNorm weights of one, as Flux's otherwise */
static const init_rule qw_inits[] = {{INIT_ZERO, "_mod.1."}, {INIT_ONE, "^txt_norm.weight$"}, {0}};
static param_init qw_init_of(const char *name) { return init_by_rules(name, qw_inits, mm_init_of(name)); }

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

static void release_own(model *m)
{
    qw_model *d = qw_of(m);
    op_state_release(&d->norm_stats);
}

/* Mage-Flow's tables from Qwen's ids: the text's at zero (no turn), sample b's image at frame b, one table each */
static void mageflow_tables(model *m, float *ids)
{
    const model_config *c = &m->cfg;
    const int64_t L = m->shape.text, S = L + m->shape.tokens;
    for (int64_t k = 0; k < L * 3; k++) ids[k] = 0.0f;
    for (int64_t b = 0; b < m->shape.batch; b++) {
        for (int64_t j = L; j < S; j++) ids[j * 3] = (float)b;
        rope_table(m->ctx.rope + b * m->ctx.rope_sample, ids, S, 3, c->rope_axes, MMDIT_ROPE_THETA);
    }
}

/* The rotary table of the centred positions (ids: S x 3) and the joint attention's key bias from the conditioning's
 * text mask (nonzero: a token, as diffusers' bool()), the image keys always kept (a model_host_loop's) */
static st_status key_bias_of(model *m, const float *cond, float *ids)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = L + m->shape.tokens;
    const int64_t K = model_cond_len(c), at = L * c->text_dim + c->pooled_dim;
    position_ids_centred(ids, L, grid_rows(c), grid_cols(c));
    if (mageflow(c)) mageflow_tables(m, ids);
    else rope_table(m->ctx.rope, ids, S, 3, c->rope_axes, MMDIT_ROPE_THETA);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < S; j++)
            qw_of(m)->key_bias[b * S + j] = j >= L || cond[b * K + at + j] != 0.0f ? 0.0f : -INFINITY;
    return ST_OK;
}

static st_status context_forward(model *m, const float *cond)
{
    qw_model *d = qw_of(m);
    const int64_t B = m->shape.batch, S = m->shape.text + m->shape.tokens, hd = m->cfg.hidden / m->cfg.heads;
    st_status st = ST_OK;
    model_hold(m, &st, &d->key_bias, B * S, "qwen_image.key_bias", false);
    m->ctx.rope_sample = mageflow(&m->cfg) ? S * hd : 0;
    model_hold(m, &st, &m->ctx.rope, (mageflow(&m->cfg) ? B : 1) * S * hd, "qwen_image.rope", false);
    if (st) return st;
    st = model_host_loop(m, d->key_bias, key_bias_of, cond, S * 3, "qwen_image.position_ids");
    d->mask = (attn_mask){.key_bias = d->key_bias, .batch_stride = S};
    m->ctx.mask = &d->mask;
    return st;
}

/* The image tokens, the text tokens (txt_in of txt_norm of the encoder's sequence), and c = the timestep's
 * embedding, cs = SiLU(c). */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    qw_model *d = qw_of(m);
    dual_step *s = &d->b.step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, D = c->hidden, Dt = c->text_dim;
    st_status st = ST_OK;
    dual_take_tokens(m, &st, cond);
    model_hold(m, &st, &d->normed, B * L * Dt, "qwen_image.txt_norm", false);
    dual_take_c(m, &st, train, &d->t, NULL, NULL);
    if (!st) st = context_forward(m, cond);
    if (st) return st;

    const bool norm_trains = train && PG(p_norm), txt_trains = train && PG(p_txt_w);
    st = rmsnorm_forward(m->pool, d->normed, s->text_in, PW(p_norm), B * L, Dt, MMDIT_RMS_EPS,
                         norm_trains ? &d->norm_stats : NULL);
    if (st) return st;
    linear_forward(s->txt, d->normed, PW(p_txt_w), PW(p_txt_b), B * L, Dt, D);
    if (!norm_trains) { /* only the weights' gradients read them again */
        pool_free(m->pool, s->text_in);
        s->text_in = NULL;
    }
    if (!txt_trains) {
        pool_free(m->pool, d->normed);
        d->normed = NULL;
    }
    dual_embed_image(m, x, d->p_img_w, d->p_img_b);
    return dual_c_forward(m, timesteps, cond, &d->t, NULL, NULL);
}

static st_status embed_backward(model *m, float *dimg, const float *dtxt)
{
    qw_model *d = qw_of(m);
    dual_step *s = &d->b.step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, D = c->hidden, Dt = c->text_dim;
    dual_image_backward(m, dimg, d->p_img_w, d->p_img_b);
    scratch k = {.pool = m->pool};
    float *dnormed = s->text_in ? scratch_take_zero(&k, B * L * Dt, MEM_WORKSPACE, "qwen_image.dtxt_norm") : NULL;
    if (k.status) return scratch_end(&k);
    if (d->normed || dnormed) /* txt_in's x is read only for its weight's gradient */
        linear_backward(dnormed, PG(p_txt_w), PG(p_txt_b), dtxt, d->normed, PW(p_txt_w), B * L, Dt, D);
    if (dnormed) rmsnorm_backward(NULL, PG(p_norm), dnormed, s->text_in, PW(p_norm), B * L, Dt, &d->norm_stats);
    k.status = dual_c_backward(m, &d->t, NULL, NULL);
    return scratch_end(&k);
}

const model_family qwen_image_family = {.create = qw_create, .impl_size = sizeof(qw_model), DUAL_STEPS,
                                        .init_of = qw_init_of};

/* ---- the family's descriptor (family.h) ---- */

/* "v2.1" is segtrain's name for Qwen-Image 2.1 (qwen_image21), which SimpleTuner lists not yet */
/* Qwen Image's are Qwen/Qwen-Image's: 60 blocks of 24 heads x 128, Qwen2.5-VL's 3584-wide hidden states without a
 * pooled vector, up to 1024 tokens (the pipeline's tokenizer_max_length: SimpleTuner caches each prompt at its own
 * length, at most that), 16 latent channels. */
static const family_preset presets[] = {
    {"qwen-image-tiny", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, true, 0, 0},
    {"qwen-image", 60, 3072, 24, 2, 16, 128, 10, 0, 1024, 3584, 0, false, true, 0, 0},
};

/* QwenImageTransformer2DModel's config: its defaults, then the file's values. in_channels is the pipeline's packing
 * of 2x2 latent patches, out_channels the latent's channels. guidance_embeds and the edit and layered models'
 * options (zero_cond_t, use_additional_t_cond, use_layer3d_rope) are refused by name. */
static st_status qwen_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t in = 64, out = 16, hd = 128, heads = 24, axes[3] = {16, 56, 56};
    mc->patch = 2, mc->depth = 60, mc->text_dim = 3584;
    const json_key keys[] = {{"patch_size", &mc->patch}, {"in_channels", &in}, {"out_channels", &out},
                             {"num_layers", &mc->depth}, {"attention_head_dim", &hd}, {"num_attention_heads", &heads},
                             {"joint_attention_dim", &mc->text_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, axes);
    if (st) return st;
    static const char *const options[] = {"guidance_embeds", "zero_cond_t", "use_additional_t_cond", "use_layer3d_rope"};
    for (size_t i = 0; i < sizeof options / sizeof *options; i++)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, options[i])))
            return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is true; segtrain builds Qwen-Image's transformer, where it is "
                           "false (an edit or layered model's option)", file, options[i]);
    if (!out || in != out * mc->patch * mc->patch)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: in_channels %lld, out_channels %lld, patch_size %lld; segtrain reads "
                       "Qwen Image's packing (in_channels = out_channels x patch_size^2)", file, (long long)in,
                       (long long)out, (long long)mc->patch);
    mc->channels = out, mc->heads = heads, mc->hidden = hd * heads;
    mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    set_rope_axes(mc, axes, 3);
    return ST_OK;
}

const family_desc qwen_image_desc = {
    .name = "qwen_image", .topology = TOPO_DUAL, .traits = TR_TEXT | TR_TEXT_MASK | TR_UNPOOLED,
    .st = {{.name = "qwen_image", .title = "Qwen-Image", .diffusers = "QwenImageTransformer2DModel",
            .flavours = "v1.0|v2.0|edit-v1|edit-v2|edit-v2+|edit-v3|v2.1",
            .built = "v1.0:qwen-image|v2.0:qwen-image|v2.1:qwen-image-2.1", .fallback = "v2.0",
            .why = "the edit flavours also take reference images' latents as image tokens (at RoPE frame 1 on), and "
                   "edit-v2+ and edit-v3 modulate those with a zero timestep (zero_cond_t); segtrain's conditioning "
                   "carries no reference image",
            .example = "qwen_image.peft-lora.json", .tiny = "qwen-image-tiny"}},
    .packed = -1 /* C p^2 */, FAMILY_PRESETS(presets), .readers = {{"QwenImageTransformer2DModel", qwen_from_json}},
    .axes = 3,
    .ops = &qwen_image_family,
    .swap_blocks = {"transformer_blocks"},
};
