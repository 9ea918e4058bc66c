/* The sd3 family: diffusers' SD3Transformer2DModel in its names and layouts (docs/FAMILIES.md). The image's
 * patches (pos_embed.proj, a Conv2d read as patchify + linear) plus the centre crop of a fixed 2D sine-cosine
 * table (pos_embed.pos_embed), and the text encoder's tokens (context_embedder), as two streams through one
 * sequence of joint blocks (mmdit_block.c's double block: qk_norm for SD3.5, attn2 in the first dual_attention
 * blocks, the last block context_pre_only), then the image rows through norm_out (scale, shift) and proj_out, whose
 * rows are in DiT's (i, j, c) order. No rotary embedding. c = timestep_embedder(t) + text_embedder(pooled); the
 * timestep is given as diffusers takes it, 1000 sigma. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/dual/mmdit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sd3_model {
    dual_model b;
    temb t, p; /* the timestep's and the pooled text's embeddings */
    int p_ctx_w, p_ctx_b, p_x_w, p_x_b, p_pos;
} sd3_model;

static sd3_model *sd3_of(model *m) { return m->impl; }

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train);
static st_status embed_backward(model *m, float *dimg, const float *dtxt);

static st_status sd3_create(model *m)
{
    const model_config *c = &m->cfg;
    const int n = (int)c->depth;
    sd3_model *d = m->impl;
    mm_block *blocks = dual_blocks(m, n, sizeof(mm_block));
    if (!blocks) return st_host_oom("the SD3 model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, E = c->pos_embed_max;
    /* in the order of SD3Transformer2DModel's state_dict */
    d->p_x_w = param_add(s, "pos_embed.proj.weight", 4, (int64_t[]){D, c->channels, c->patch, c->patch}, full);
    d->p_x_b = param_add(s, "pos_embed.proj.bias", 1, (int64_t[]){D}, full);
    d->p_pos = param_add_fixed(s, "pos_embed.pos_embed", 3, (int64_t[]){1, E * E, D});
    temb_register_at(s, &d->t, "time_text_embed.timestep_embedder", DIT_FREQ_DIM, D, true, full);
    temb_register_at(s, &d->p, "time_text_embed.text_embedder", c->pooled_dim, D, true, full);
    d->p_ctx_w = param_add(s, "context_embedder.weight", 2, (int64_t[]){D, c->text_dim}, full);
    d->p_ctx_b = param_add(s, "context_embedder.bias", 1, (int64_t[]){D}, full);
    for (int i = 0; i < n; i++) {
        blocks[i] = (mm_block){.m = m, .qk_norm = c->qk_norm, .dual = i < c->dual_attention, .context_pre_only = i == n - 1};
        mm_double_register(s, &blocks[i], i, c);
    }
    d->b.final = (final_layer){.scale_first = true, .order = PATCH_DIT};
    final_register(s, &d->b.final, c, "norm_out.linear", "proj_out", true);
    d->b.embed = embed_forward, d->b.embed_backward = embed_backward;
    dual_sequences(m, "transformer_blocks", n, &mm_double_kind, 0, NULL, sizeof *blocks);
    return ST_OK;
}

static void sd3_fill_fixed(model *m) { sincos_table_fill(&m->cfg, param_at(m->params, sd3_of(m)->p_pos)->w); }

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

/* The image tokens with their positions, the text tokens from the encoder's sequence, and the conditioning
 * c = timestep + pooled-text embeddings, cs = SiLU(c). */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    sd3_model *d = sd3_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden;
    const int64_t gh = grid_rows(c), gw = grid_cols(c), E = c->pos_embed_max, top = (E - gh) / 2, left = (E - gw) / 2;
    st_status st = ST_OK;
    dual_take_tokens(m, &st, cond);
    dual_take_c(m, &st, train, &d->t, NULL, &d->p);
    float *pos = NULL; /* the table's centre gh x gw, as PatchEmbed.cropped_pos_embed takes it */
    if (!st) st = pool_alloc(m->pool, (size_t)(T * D) * sizeof(float), MEM_WORKSPACE, "sd3.pos_embed (cropped)",
                             (void **)&pos);
    if (st) return st;
    copy_rows(pos, gw * D, PW(p_pos) + (top * E + left) * D, E * D, gh, gw * D);

    dual_embed_text(m, cond, train, d->p_ctx_w, d->p_ctx_b);
    dual_embed_image(m, x, d->p_x_w, d->p_x_b);
    add_row(d->b.step.img, pos, B, T * D);
    pool_free(m->pool, pos);
    return dual_c_forward(m, timesteps, cond, &d->t, NULL, &d->p);
}

static st_status embed_backward(model *m, float *dimg, const float *dtxt)
{
    sd3_model *d = sd3_of(m);
    dual_tokens_backward(m, dimg, dtxt, d->p_x_w, d->p_x_b, d->p_ctx_w, d->p_ctx_b);
    return dual_c_backward(m, &d->t, NULL, &d->p);
}

/* ---- the family's descriptor (family.h) ---- */

/* SD3's are the published transformer config.json's (stable-diffusion-3-medium-diffusers, -3.5-large, -3.5-medium):
 * 64-wide heads, T5-XXL's 4096 and the two CLIPs' pooled 2048, and SimpleTuner's cached text, 77 CLIP tokens then
 * 154 T5 tokens (its sd3 tokenizer_max_length); sample_size 128. */
static const family_preset presets[] = {
    {"sd3-tiny", 3, 64, 4, 2, 4, 8, 10, 0, 8, 32, 16, false, true, 2, 16},
    {"sd3-medium", 24, 1536, 24, 2, 16, 128, 10, 0, 231, 4096, 2048, false, false, 0, 192},
    {"sd35-large", 38, 2432, 38, 2, 16, 128, 10, 0, 231, 4096, 2048, false, true, 0, 192},
    {"sd35-medium", 24, 1536, 24, 2, 16, 128, 10, 0, 231, 4096, 2048, false, true, 13, 384},
};

static st_status sd3_check(const model_config *mc)
{
    if (grid_rows(mc) > mc->pos_embed_max || grid_cols(mc) > mc->pos_embed_max || mc->sample_size < mc->patch)
        return st_fail(ST_ERR_INVALID, "pos_embed_max_size: %lld; sd3's table must cover the %lld x %lld patch grid, "
                       "and sample_size %lld at least one patch", (long long)mc->pos_embed_max, (long long)grid_rows(mc),
                       (long long)grid_cols(mc), (long long)mc->sample_size);
    return ST_OK;
}

/* SD3Transformer2DModel's config: its defaults, then the file's values. */
static st_status sd3_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t in = 16, out = -1, hd = 64, heads = 18, caption = 1152; /* out_channels null: in_channels */
    mc->sample_size = 128, mc->patch = 2, mc->depth = 18, mc->text_dim = 4096, mc->pooled_dim = 2048;
    mc->pos_embed_max = 96, mc->single_depth = 0, mc->dual_attention = 0, mc->guidance_embeds = false;
    const json_key keys[] = {{"sample_size", &mc->sample_size}, {"patch_size", &mc->patch}, {"in_channels", &in},
                             {"out_channels", &out}, {"num_layers", &mc->depth}, {"attention_head_dim", &hd},
                             {"num_attention_heads", &heads}, {"joint_attention_dim", &mc->text_dim},
                             {"caption_projection_dim", &caption}, {"pooled_projection_dim", &mc->pooled_dim},
                             {"pos_embed_max_size", &mc->pos_embed_max}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (st) return st;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "qk_norm");
    if (q && !cJSON_IsNull(q) && !(cJSON_IsString(q) && !strcmp(q->valuestring, "rms_norm")))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: qk_norm is neither null nor \"rms_norm\" (the two SD3 uses)", file);
    mc->qk_norm = q && cJSON_IsString(q);
    /* every published SD3.5 lists its dual-attention blocks from 0 on: segtrain takes them as a count */
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "dual_attention_layers");
    if (a && !cJSON_IsArray(a)) return st_fail(ST_ERR_FORMAT, "%s: dual_attention_layers is not a list", file);
    for (int i = 0; a && i < cJSON_GetArraySize(a); i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(x) || x->valuedouble != i)
            return st_fail(ST_ERR_UNSUPPORTED, "%s: dual_attention_layers[%d] is not %d; segtrain builds dual attention "
                           "in the first blocks, listed in order from 0", file, i, i);
        mc->dual_attention = i + 1;
    }
    if ((out != -1 && out != in) || caption != hd * heads)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: out_channels %lld, caption_projection_dim %lld; segtrain reads SD3's "
                       "with out_channels = in_channels (%lld) and caption_projection_dim = the width (%lld heads x %lld)",
                       file, (long long)out, (long long)caption, (long long)in, (long long)heads, (long long)hd);
    mc->channels = in, mc->heads = heads, mc->hidden = hd * heads;
    return ST_OK;
}

const family_desc sd3_desc = {
    .name = "sd3", .topology = TOPO_DUAL,
    .traits = TR_SINCOS | TR_TEXT | TR_POOLED | TR_DUAL_ATTENTION,
    .st = {{.name = "sd3", .title = "Stable Diffusion 3.x", .diffusers = "SD3Transformer2DModel",
            .flavours = "medium|large", .built = "medium:sd35-medium|large:sd35-large", .fallback = "medium",
            .example = "sd3.peft-lora.json", .tiny = "sd3-tiny"}},
    FAMILY_PRESETS(presets), .readers = {{"SD3Transformer2DModel", sd3_from_json}}, .check = sd3_check,
    .quanto_exclude = quanto_exclude_video,
    .ops = &(const model_family){.create = sd3_create, .impl_size = sizeof(sd3_model), .fill_fixed = sd3_fill_fixed,
                                 DUAL_STEPS, .init_of = mm_init_of},
    .swap_blocks = {"transformer_blocks"},
};
