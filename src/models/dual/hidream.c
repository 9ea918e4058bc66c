/* HiDream, in diffusers' HiDreamImageTransformer2DModel's names and layouts (docs/FAMILIES.md). The latent's 2x2
 * patches in DiT's (i, j, c) order through x_embedder; the text as caption_projection (a bias-free linear per
 * block, and the last one for T5) of T5's tokens and of each block's own Llama hidden states; c =
 * t_embedder(timestep) + p_embedder(pooled CLIP vector). The double blocks carry the image and the initial text
 * [T5; the last block's Llama tokens] as two streams, each block's own Llama tokens joining the text as keys and
 * values only; the single blocks carry [initial text; image] likewise; then final_layer (LayerNorm, (shift, scale),
 * linear in DiT's order) on the image rows. The rotary embedding turns image token (r, c) at ids (0, r, c) over
 * axes_dims_rope (text ids 0: unrotated). The prediction is the negated output, as HiDreamImagePipeline and
 * SimpleTuner read it (the model was trained to predict the negated velocity). A non-square latent's patches are
 * padded to max_tokens rows as the model's patchify pads them: zero patches at ids (0, 0, 0), whose keys are zeroed
 * (hidden_states_masks multiplies them) but which stay in the sequence, so every query gives them logit 0 and their
 * values count; their output rows are dropped. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/dual/hidream.h"
#include "models/dual/mmdit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define HD_ROPE_THETA 10000.0

typedef struct hd_model {
    dual_model b;
    temb t, p;
    int p_x_w, p_x_b, *p_cap; /* caption_projection.{i}: block i's Llama tokens, the last T5's */
    float *llama_in;          /* (blocks, B Ll, text_dim): the Llama states, kept while their projections train */
    float *llama, *dllama;    /* (blocks, B Ll, D): their projections and gradients */
} hd_model;

static hd_model *hd_of(const model *m) { return m->impl; }
static int64_t blocks_of(const model_config *c) { return c->depth + c->single_depth; }

float *hd_llama(const struct model *m, int index, bool grad)
{
    hd_model *d = hd_of(m);
    float *base = grad ? d->dllama : d->llama;
    return base ? base + (int64_t)index * m->shape.batch * m->cfg.llama_len * m->cfg.hidden : NULL;
}

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train);
static st_status embed_backward(model *m, float *dimg, const float *dtxt);

static st_status hd_create(model *m)
{
    const model_config *c = &m->cfg;
    if (c->single_depth < 1 || c->experts < 1 || c->experts > HD_EXPERTS_MAX || c->experts_active < 1 ||
        c->experts_active > c->experts || c->llama_len < 1)
        return st_fail(ST_ERR_INVALID, "num_single_layers %lld, num_routed_experts %lld, num_activated_experts %lld, "
                       "llama tokens %lld: hidream needs at least 1 single block, 1 to %d experts with 1 to all of "
                       "them active, and at least 1 Llama token", (long long)c->single_depth, (long long)c->experts,
                       (long long)c->experts_active, (long long)c->llama_len, HD_EXPERTS_MAX);
    const int nd = (int)c->depth, ns = (int)c->single_depth, nb = nd + ns;
    hd_model *d = m->impl;
    hd_block *blocks = dual_blocks(m, nb, sizeof(hd_block));
    if (blocks) d->p_cap = model_alloc(m, (size_t)nb + 1, sizeof *d->p_cap);
    if (!blocks || !d->p_cap) return st_host_oom("the HiDream model");
    m->shape.text = c->text_len + c->llama_len;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch;
    /* in the order of HiDreamImageTransformer2DModel's state_dict */
    temb_register_at(s, &d->t, "t_embedder.timestep_embedder", DIT_FREQ_DIM, D, true, full);
    temb_register_at(s, &d->p, "p_embedder.pooled_embedder", c->pooled_dim, D, true, full);
    d->p_x_w = param_add(s, "x_embedder.proj.weight", 2, (int64_t[]){D, P}, full);
    d->p_x_b = param_add(s, "x_embedder.proj.bias", 1, (int64_t[]){D}, full);
    for (int i = 0; i < nd; i++) hd_double_register(s, &blocks[i], i, c);
    for (int i = 0; i < ns; i++) hd_single_register(s, &blocks[nd + i], i, c);
    d->b.final = (final_layer){.order = PATCH_DIT, .negate = true};
    final_register(s, &d->b.final, c, "final_layer.adaLN_modulation.1", "final_layer.linear", true);
    for (int i = 0; i <= nb; i++) {
        char n[PARAM_NAME_MAX];
        snprintf(n, sizeof n, "caption_projection.%d.linear.weight", i);
        d->p_cap[i] = param_add(s, n, 2, (int64_t[]){D, c->text_dim}, full);
    }
    for (int i = 0; i < nb; i++) blocks[i].m = m;
    dual_sequences(m, "double_stream_blocks", nd, &hd_double_kind, ns, &hd_single_kind, sizeof *blocks);
    m->seq[1].name = "single_stream_blocks";
    d->b.embed = embed_forward, d->b.embed_backward = embed_backward;
    return ST_OK;
}

/* adaLN-Zero (every modulation and the final projection zero), RMSNorm weights one, N(0, 0.02) embedding MLPs,
 * xavier-uniform elsewhere. */
static const init_rule hd_inits[] = {
    {INIT_ZERO, "adaLN_modulation|^final_layer.linear.weight$"}, {INIT_ONE, "rms_norm"},
    {INIT_NORMAL, "t_embedder.|p_embedder."}, {0}};

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

/* The image's patches in (i, j, c) order (DiT's, as HiDream's patchify lays them), the text's projections, c and
 * the rotary table of the image tokens. The conditioning: T5's tokens (text_len, text_dim), the pooled vector,
 * then each block's Llama states (blocks, llama_len, text_dim). */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    hd_model *d = hd_of(m);
    dual_step *s = &d->b.step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, Lt = c->text_len, Ll = c->llama_len, L0 = m->shape.text, D = c->hidden;
    const int64_t Dt = c->text_dim, K = model_cond_len(c), nb = blocks_of(c), T = m->shape.tokens;
    const int64_t P = c->channels * c->patch * c->patch, hd = D / c->heads;
    const int64_t llama_at = Lt * Dt + c->pooled_dim, BL = B * Ll;
    const bool cap_trains = train && PG(d->p_cap[0]);
    st_status st = ST_OK;
    dual_take_tokens(m, &st, cond);
    dual_take_c(m, &st, train, &d->t, NULL, &d->p);
    model_hold(m, &st, &d->llama, nb * BL * D, "hidream.llama", false);
    if (cap_trains) model_hold(m, &st, &d->dllama, nb * BL * D, "hidream.dllama", true);
    model_hold(m, &st, &d->llama_in, nb * BL * Dt, "hidream.llama_in", false);
    model_hold(m, &st, &m->ctx.rope, T * hd, "hidream.rope", false);
    float *ctx = NULL, *ids = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(B * Lt * D) * sizeof(float), MEM_WORKSPACE, "hidream.t5", (void **)&ctx);
    if (!st) st = pool_alloc(m->pool, (size_t)(T * 3) * sizeof(float), MEM_WORKSPACE, "hidream.ids", (void **)&ids);
    if (st) {
        pool_free(m->pool, ids);
        pool_free(m->pool, ctx);
        return st;
    }
    /* the image, and a non-square one's padding rows: zero patches at ids (0, 0, 0) */
    zero_bytes(s->patches, (size_t)(B * T * P) * sizeof(float));
    const patch_shape ps = model_patches(m);
    unpatchify_backward(s->patches, x, &ps, PATCH_DIT);
    linear_forward(s->img, s->patches, PW(d->p_x_w), PW(d->p_x_b), B * T, P, D);
    zero_bytes(ids, (size_t)(T * 3) * sizeof(float));
    position_ids_grid(ids, 0, 1, grid_rows(c), grid_cols(c));
    rope_table(m->ctx.rope, ids, T, 3, c->rope_axes, HD_ROPE_THETA);
    pool_free(m->pool, ids);
    /* the text: the initial [T5; the last block's Llama tokens], and every block's Llama tokens */
    linear_forward(ctx, s->text_in, PW(d->p_cap[nb]), NULL, B * Lt, Dt, D);
    for (int64_t i = 0; i < nb; i++) {
        float *in = d->llama_in + i * BL * Dt;
        copy_rows(in, Ll * Dt, cond + llama_at + i * Ll * Dt, K, B, Ll * Dt);
        linear_forward(d->llama + i * BL * D, in, PW(d->p_cap[i]), NULL, BL, Dt, D);
    }
    model_rows_scatter(m, s->txt, ctx, L0, 0, Lt);
    model_rows_scatter(m, s->txt, d->llama + (nb - 1) * BL * D, L0, Lt, Ll);
    pool_free(m->pool, ctx);
    if (!cap_trains) { /* only the projections' weight gradients read them again */
        pool_free(m->pool, s->text_in);
        pool_free(m->pool, d->llama_in);
        s->text_in = d->llama_in = NULL;
    }
    return dual_c_forward(m, timesteps, cond, &d->t, NULL, &d->p); /* c = t_embedder(t) + p_embedder(pooled) */
}

static st_status embed_backward(model *m, float *dimg, const float *dtxt)
{
    hd_model *d = hd_of(m);
    dual_step *s = &d->b.step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, Lt = c->text_len, Ll = c->llama_len, L0 = m->shape.text, D = c->hidden;
    const int64_t Dt = c->text_dim, nb = blocks_of(c), BL = B * Ll;
    dual_image_backward(m, dimg, d->p_x_w, d->p_x_b);
    scratch k = {.pool = m->pool};
    float *dctx = s->text_in ? scratch_take(&k, B * (Lt > Ll ? Lt : Ll) * D, MEM_WORKSPACE, "hidream.dtext") : NULL;
    if (k.status) return scratch_end(&k);
    if (s->text_in) { /* the initial text's rows: T5's, then the last block's Llama tokens' */
        model_rows_gather(m, dctx, dtxt, L0, 0, Lt);
        linear_backward(NULL, PG(d->p_cap[nb]), NULL, dctx, s->text_in, PW(d->p_cap[nb]), B * Lt, Dt, D);
        float *dl = d->dllama + (nb - 1) * BL * D;
        model_rows_gather(m, dctx, dtxt, L0, Lt, Ll);
        add_to(dl, dctx, BL * D);
        for (int64_t i = 0; i < nb; i++)
            linear_backward(NULL, PG(d->p_cap[i]), NULL, d->dllama + i * BL * D, d->llama_in + i * BL * Dt,
                            PW(d->p_cap[i]), BL, Dt, D);
    }
    k.status = dual_c_backward(m, &d->t, NULL, &d->p);
    return scratch_end(&k);
}

/* ---- the family's descriptor (family.h) ---- */

/* T5's sequence, the pooled vector, then each block's Llama states */
static int64_t hidream_cond_len(const model_config *mc)
{
    return (mc->text_len + (mc->depth + mc->single_depth) * mc->llama_len) * mc->text_dim + mc->pooled_dim;
}

static void hidream_condition(const model_config *mc, const char *caption, float *cond)
{
    float *pooled;
    float *rest = family_text_condition(mc, caption, cond, &pooled);
    for (int64_t i = 0; i < mc->depth + mc->single_depth; i++) /* Llama's */
        encode_caption(caption ? caption : "", mc->text_vocab, mc->llama_len, mc->text_dim, mc->pooled_dim,
                       rest + i * mc->llama_len * mc->text_dim, pooled);
}

static const family_preset presets[] = {
    /* HiDream-ai/HiDream-I1-Full's (-Dev and -Fast are the same transformer, distilled): 16 double + 32 single
     * blocks of 20 heads x 128, T5-XXL's and Llama 3.1's 4096 (caption_channels), CLIP-L + G's pooled 2048
     * (text_emb_dim), 128 tokens of each (the pipeline's max_sequence_length); 4 routed experts, 2 active, and
     * 128 Llama tokens are set in its preset hook below */
    {"hidream-tiny", 1, 16, 2, 2, 4, 8, 10, 1, 6, 24, 20, false, true, 0, 0},
    {"hidream-full", 16, 2560, 20, 2, 16, 128, 10, 32, 128, 4096, 2048, false, true, 0, 0},
    {"hidream-dev", 16, 2560, 20, 2, 16, 128, 10, 32, 128, 4096, 2048, false, true, 0, 0},
    {"hidream-fast", 16, 2560, 20, 2, 16, 128, 10, 32, 128, 4096, 2048, false, true, 0, 0},
};

/* HiDream's (64, 32, 32) at 128 */
static void hidream_rope_axes(model_config *mc)
{
    const int64_t hd = mc->hidden / mc->heads;
    mc->rope_axes[0] = hd - 2 * (hd / 4), mc->rope_axes[1] = mc->rope_axes[2] = hd / 4;
}

static void hidream_preset(model_config *mc, const char *name, bool tiny)
{
    /* the tiny one is the fixture's: max_resolution its 8 x 8 latent, HiDream-I1's (128, 128) */
    mc->experts = tiny ? 3 : 4, mc->experts_active = 2, mc->llama_len = tiny ? 3 : 128;
    mc->max_tokens = tiny ? 16 : 4096;
}

/* diffusers' patchify fills max_tokens rows with a non-square latent's patches: they must fit */
static st_status hidream_check(const model_config *mc)
{
    const int64_t patches = grid_rows(mc) * grid_cols(mc);
    if (mc->max_tokens < 1 || (mc->height != mc->width && patches > mc->max_tokens))
        return st_fail(ST_ERR_INVALID, "max_resolution: %lld tokens; hidream pads a non-square latent's patches to "
                       "them, at least 1 and here at least its %lld x %lld", (long long)mc->max_tokens,
                       (long long)grid_rows(mc), (long long)grid_cols(mc));
    return ST_OK;
}

/* Each family's diffusers class and the reader of its config.json. */
/* HiDreamImageTransformer2DModel's: its text is caption_channels [T5's, Llama's] wide (one width here), one Llama
 * layer per block (llama_layers: which ones is the cache's choice, so only their count is checked). */
static st_status hidream_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t in = 64, out = 0, hd = 128, heads = 20, caption[2] = {4096, 4096}, max_resolution[2] = {128, 128};
    mc->patch = 2, mc->depth = 16, mc->single_depth = 32, mc->pooled_dim = 2048, mc->experts = 4;
    mc->experts_active = 2;
    const json_key keys[] = {{"patch_size", &mc->patch}, {"in_channels", &in}, {"out_channels", &out},
                             {"num_layers", &mc->depth}, {"num_single_layers", &mc->single_depth},
                             {"attention_head_dim", &hd}, {"num_attention_heads", &heads},
                             {"text_emb_dim", &mc->pooled_dim}, {"num_routed_experts", &mc->experts},
                             {"num_activated_experts", &mc->experts_active}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "caption_channels", 2, caption);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, mc->rope_axes);
    if (!st) st = json_axes(j, file, "max_resolution", 2, max_resolution);
    if (st) return st;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(j, "llama_layers");
    const cJSON *inference = cJSON_GetObjectItemCaseSensitive(j, "force_inference_output");
    if ((out && out != in) || caption[0] != caption[1] || cJSON_IsTrue(inference) ||
        (layers && (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) != mc->depth + mc->single_depth)))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, caption_channels (%lld, %lld), "
                       "force_inference_output, llama_layers: segtrain reads HiDream's with out_channels = in_channels "
                       "(%lld), one caption width, the training path, and one Llama layer per block (%lld)", file,
                       (long long)out, (long long)caption[0], (long long)caption[1], (long long)in,
                       (long long)(mc->depth + mc->single_depth));
    mc->channels = in, mc->heads = heads, mc->hidden = hd * heads, mc->text_dim = caption[0];
    mc->guidance_embeds = false;
    if (mc->patch > 0) mc->max_tokens = max_resolution[0] * max_resolution[1] / (mc->patch * mc->patch);
    return ST_OK;
}

const family_desc hidream_desc = {
    .name = "hidream", .topology = TOPO_DUAL, .traits = TR_TEXT | TR_POOLED,
    .st = {{.name = "hidream", .title = "HiDream", .diffusers = "HiDreamImageTransformer2DModel",
            .flavours = "dev|full|fast", .built = "full:hidream-full|dev:hidream-dev|fast:hidream-fast",
            .fallback = "full", .example = "hidream.peft-lora.json", .tiny = "hidream-tiny"}},
    .uncached = "each block's Llama hidden states", .cond_len = hidream_cond_len, .condition = hidream_condition,
    FAMILY_PRESETS(presets), .preset = hidream_preset, .rope_axes = hidream_rope_axes,
    .readers = {{"HiDreamImageTransformer2DModel", hidream_from_json}}, .fields = F_SINGLE | F_MAX_TOKENS, .axes = 3,
    .check = hidream_check,
    .ops = &(const model_family){.create = hd_create, .impl_size = sizeof(hd_model), DUAL_STEPS, .inits = hd_inits},
    .swap_blocks = {"double_stream_blocks", "single_stream_blocks"},
};
