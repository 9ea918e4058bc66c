/* AuraFlow, in diffusers' AuraFlowTransformer2DModel's names and layouts (docs/FAMILIES.md): the image's patches
 * (pos_embed.proj, plus the learned position table's rows of the grid, cropped from the table's centre) and the
 * text as 8 learned register tokens followed by the text encoder's tokens through context_embedder, as two
 * streams through `depth` joint blocks, then [text; image] as one sequence through `single_depth` single blocks,
 * and the image rows through norm_out (a modulation without LayerNorm) and proj_out (rows in DiT's (i, j, c)
 * order). No rotary embedding and no pooled text: the conditioning vector is the timestep's embedding alone.
 * Nothing but pos_embed.proj and the timestep MLP has a bias. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/dual/auraflow.h"
#include "models/dual/mmdit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define AF_REGISTERS 8

typedef struct af_model {
    dual_model b;
    temb t;
    int p_reg, p_pos, p_x_w, p_x_b, p_ctx_w;
} af_model;

static af_model *af_of(model *m) { return m->impl; }

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train);
static st_status embed_backward(model *m, float *dimg, const float *dtxt);


static st_status af_create(model *m)
{
    const model_config *c = &m->cfg;
    if (c->single_depth < 1)
        return st_fail(ST_ERR_INVALID, "num_single_dit_layers: %lld; auraflow needs at least 1 single block",
                       (long long)c->single_depth);
    const int nd = (int)c->depth, ns = (int)c->single_depth;
    af_model *d = m->impl;
    af_block *blocks = dual_blocks(m, nd + ns, sizeof(af_block));
    if (!blocks) return st_host_oom("the AuraFlow model");
    m->shape.text = c->text_len + AF_REGISTERS;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch;
    /* in the order of AuraFlowTransformer2DModel's state_dict */
    d->p_reg = param_add(s, "register_tokens", 3, (int64_t[]){1, AF_REGISTERS, D}, full);
    d->p_pos = param_add(s, "pos_embed.pos_embed", 3, (int64_t[]){1, c->pos_embed_max * c->pos_embed_max, D}, full);
    d->p_x_w = param_add(s, "pos_embed.proj.weight", 2, (int64_t[]){D, P}, full);
    d->p_x_b = param_add(s, "pos_embed.proj.bias", 1, (int64_t[]){D}, full);
    d->p_ctx_w = param_add(s, "context_embedder.weight", 2, (int64_t[]){D, c->text_dim}, full);
    temb_register_at(s, &d->t, "time_step_proj", DIT_FREQ_DIM, D, true, full);
    for (int i = 0; i < nd; i++) af_joint_register(s, &blocks[i], i, c);
    for (int i = 0; i < ns; i++) af_single_register(s, &blocks[nd + i], i, c);
    d->b.final = (final_layer){.scale_first = true, .no_norm = true, .order = PATCH_DIT};
    final_register(s, &d->b.final, c, "norm_out.linear", "proj_out", false);
    for (int i = 0; i < nd + ns; i++) blocks[i].m = m;
    dual_sequences(m, "joint_transformer_blocks", nd, &af_joint_kind, ns, &af_single_kind, sizeof *blocks);
    d->b.embed = embed_forward, d->b.embed_backward = embed_backward;
    return ST_OK;
}

/* adaLN-Zero (every modulation and the final projection zero), N(0, 0.02) embedding MLPs, position table and
 * register tokens, xavier-uniform elsewhere. */
static const init_rule af_inits[] = {
    {INIT_ZERO, "norm1.linear|norm1_context.linear|norm_out.linear|^proj_out.weight$"},
    {INIT_NORMAL, "time_step_proj.|^register_tokens$|^pos_embed.pos_embed$"}, {0}};

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

/* The position table's rows of the grid, added to (or, backward, accumulated from) each sample's image rows:
 * grid row r is table row (r0 + r) from column r0 on, one run of `grid` rows. */
static void pos_rows(model *m, float *img, float *table, bool backward)
{
    const model_config *c = &m->cfg;
    const int64_t D = c->hidden, rows = grid_rows(c), cols = grid_cols(c), T = rows * cols, E = c->pos_embed_max;
    const int64_t r0 = E / 2 - rows / 2, q0 = E / 2 - cols / 2; /* AuraFlowPatchEmbed centres the grid in it */
    for (int64_t b = 0; b < m->shape.batch; b++)
        for (int64_t r = 0; r < rows; r++) {
            float *x = img + (b * T + r * cols) * D, *t = table + ((r0 + r) * E + q0) * D;
            if (backward) add_to(t, x, cols * D);
            else add_to(x, t, cols * D);
        }
}

/* The image tokens with their positions, the register and text tokens, and c = the timestep's embedding. */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    af_model *d = af_of(m);
    dual_step *s = &d->b.step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, Lt = c->text_len, L = m->shape.text, D = c->hidden, Dt = c->text_dim;
    st_status st = ST_OK;
    dual_take_tokens(m, &st, cond);
    dual_take_c(m, &st, train, &d->t, NULL, NULL);
    float *ctx = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(B * Lt * D) * sizeof(float), MEM_WORKSPACE, "auraflow.context",
                             (void **)&ctx);
    if (st) return st;
    linear_forward(ctx, s->text_in, PW(p_ctx_w), NULL, B * Lt, Dt, D);
    copy_rows(s->txt, L * D, PW(p_reg), 0, B, AF_REGISTERS * D);
    model_rows_scatter(m, s->txt, ctx, L, AF_REGISTERS, Lt);
    pool_free(m->pool, ctx);
    if (!train || !PG(p_ctx_w)) { /* only context_embedder's weight gradient reads it again */
        pool_free(m->pool, s->text_in);
        s->text_in = NULL;
    }
    dual_embed_image(m, x, d->p_x_w, d->p_x_b);
    pos_rows(m, s->img, PW(p_pos), false);
    return dual_c_forward(m, timesteps, cond, &d->t, NULL, NULL);
}

static st_status embed_backward(model *m, float *dimg, const float *dtxt)
{
    af_model *d = af_of(m);
    dual_step *s = &d->b.step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, Lt = c->text_len, L = m->shape.text, D = c->hidden;
    dual_image_backward(m, dimg, d->p_x_w, d->p_x_b);
    if (PG(p_pos)) pos_rows(m, dimg, PG(p_pos), true);
    for (int64_t b = 0; PG(p_reg) && b < B; b++) add_to(PG(p_reg), dtxt + b * L * D, AF_REGISTERS * D);
    scratch k = {.pool = m->pool};
    float *dctx = s->text_in ? scratch_take(&k, B * Lt * D, MEM_WORKSPACE, "auraflow.dcontext") : NULL;
    if (k.status) return scratch_end(&k);
    if (s->text_in) {
        model_rows_gather(m, dctx, dtxt, L, AF_REGISTERS, Lt);
        linear_backward(NULL, PG(p_ctx_w), NULL, dctx, s->text_in, PW(p_ctx_w), B * Lt, c->text_dim, D);
    }
    k.status = dual_c_backward(m, &d->t, NULL, NULL);
    return scratch_end(&k);
}

/* ---- the family's descriptor (family.h) ---- */

/* AuraFlow's are v0.3's (fal/AuraFlow-v0.3): Pile-T5's 2048 without a pooled vector, 120 tokens (SimpleTuner's
 * auraflow limit), a learned position table of 96 x 96 (pos_embed_max_size 9216). */
static const family_preset presets[] = {
    {"auraflow-tiny", 2, 32, 2, 2, 4, 8, 10, 2, 8, 24, 0, false, false, 0, 8},
    {"auraflow", 4, 3072, 12, 2, 4, 128, 10, 32, 120, 2048, 0, false, false, 0, 96},
};

static st_status auraflow_check(const model_config *mc)
{
    if (grid_rows(mc) > mc->pos_embed_max || grid_cols(mc) > mc->pos_embed_max || mc->pooled_dim)
        return st_fail(ST_ERR_INVALID, "pos_embed_max_size: %lld x %lld; auraflow's learned table must cover the "
                       "%lld x %lld patch grid (and pooled_projection_dim %lld must be 0: it has none)",
                       (long long)mc->pos_embed_max, (long long)mc->pos_embed_max, (long long)grid_rows(mc),
                       (long long)grid_cols(mc), (long long)mc->pooled_dim);
    return ST_OK;
}

/* AuraFlowTransformer2DModel's config: its defaults, then the file's values. */
static st_status auraflow_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t in = 4, out = 4, hd = 256, heads = 12, caption = 3072, table = 1024;
    mc->patch = 2, mc->depth = 4, mc->single_depth = 32, mc->text_dim = 2048;
    const json_key keys[] = {{"patch_size", &mc->patch}, {"in_channels", &in}, {"out_channels", &out},
                             {"num_mmdit_layers", &mc->depth}, {"num_single_dit_layers", &mc->single_depth},
                             {"attention_head_dim", &hd}, {"num_attention_heads", &heads},
                             {"joint_attention_dim", &mc->text_dim}, {"caption_projection_dim", &caption},
                             {"pos_embed_max_size", &table}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (st) return st;
    int64_t edge = 0; /* AuraFlowPatchEmbed reads the table as a square grid of int(sqrt(pos_embed_max_size)) */
    while ((edge + 1) * (edge + 1) <= table) edge++;
    if (out != in || caption != hd * heads || edge * edge != table)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, caption_projection_dim %lld, pos_embed_max_size "
                       "%lld; segtrain reads AuraFlow's with out_channels = in_channels (%lld), caption_projection_dim "
                       "= the width (%lld heads x %lld) and a square position table", file, (long long)out,
                       (long long)caption, (long long)table, (long long)in, (long long)heads, (long long)hd);
    mc->channels = in, mc->heads = heads, mc->hidden = hd * heads, mc->pos_embed_max = edge;
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    return ST_OK;
}

const family_desc auraflow_desc = {
    .name = "auraflow", .topology = TOPO_DUAL, .traits = TR_TEXT,
    .st = {{.name = "auraflow", .title = "AuraFlow", .diffusers = "AuraFlowTransformer2DModel",
            .flavours = "pony|v0.3|v0.2|v0.1", .built = "v0.3:auraflow", .fallback = "v0.3",
            .example = "auraflow.peft-lora.json", .tiny = "auraflow-tiny"}},
    .register_tokens = 8 /* its register tokens */, FAMILY_PRESETS(presets),
    .readers = {{"AuraFlowTransformer2DModel", auraflow_from_json}}, .fields = F_SINGLE, .check = auraflow_check,
    .ops = &(const model_family){.create = af_create, .impl_size = sizeof(af_model), DUAL_STEPS, .inits = af_inits},
    .swap_blocks = {"joint_transformer_blocks", "single_transformer_blocks"},
};
