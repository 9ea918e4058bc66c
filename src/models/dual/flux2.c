/* Flux.2, in diffusers' Flux2Transformer2DModel's names and layouts (docs/FAMILIES.md): the text encoder's tokens
 * (context_embedder) and the latent's 2x2 patches (x_embedder, Flux's packing) as two streams through `depth` double
 * blocks, then [text; image] as one sequence through `single_depth` single blocks, and the image rows through
 * norm_out (AdaLayerNormContinuous: scale, shift) and proj_out (rows in the packing's (c, i, j) order). No bias
 * anywhere. c = timestep_embedder(1000 t) + guidance_embedder(1000 g) (dev: guidance_embeds), each a
 * Linear-SiLU-Linear on `time_channels` sinusoidal features; from SiLU(c) the model makes the three shared
 * modulations once (flux2.h), which every block reads. Rotary embedding by 4-axis position ids (t, h, w, l) at
 * theta 2000: text token k at (0, 0, 0, k), image token (r, q) at (0, r, q, 0). */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/dual/flux2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

typedef struct f2_model {
    dual_model b;
    temb t, g; /* the timestep's and (guidance_embeds) the guidance's embeddings */
    int p_mod[F2_MOD_N], p_x_w, p_ctx_w;
    f2_shared sh;
} f2_model;

static f2_model *f2_of(model *m) { return m->impl; }

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train);
static st_status embed_backward(model *m, float *dimg, const float *dtxt);

static const char *const mod_names[F2_MOD_N] = {"double_stream_modulation_img.linear.weight",
                                                "double_stream_modulation_txt.linear.weight",
                                                "single_stream_modulation.linear.weight"};
static const int64_t mod_width[F2_MOD_N] = {6, 6, 3}; /* in D */

static st_status f2_create(model *m)
{
    const model_config *c = &m->cfg;
    if (c->single_depth < 1)
        return st_fail(ST_ERR_INVALID, "num_single_layers: %lld; flux2 needs at least 1 single block",
                       (long long)c->single_depth);
    const int nd = (int)c->depth, ns = (int)c->single_depth;
    f2_model *d = m->impl;
    f2_block *blocks = dual_blocks(m, nd + ns, sizeof(f2_block));
    if (!blocks) return st_host_oom("the Flux.2 model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch;
    /* in the order of Flux2Transformer2DModel's state_dict */
    temb_register_at(s, &d->t, "time_guidance_embed.timestep_embedder", c->time_channels, D, false, full);
    if (c->guidance_embeds)
        temb_register_at(s, &d->g, "time_guidance_embed.guidance_embedder", c->time_channels, D, false, full);
    for (int i = 0; i < F2_MOD_N; i++) d->p_mod[i] = param_add(s, mod_names[i], 2, (int64_t[]){mod_width[i] * D, D}, full);
    d->p_x_w = param_add(s, "x_embedder.weight", 2, (int64_t[]){D, P}, full);
    d->p_ctx_w = param_add(s, "context_embedder.weight", 2, (int64_t[]){D, c->text_dim}, full);
    for (int i = 0; i < nd; i++) f2_double_register(s, &blocks[i], i, c);
    for (int i = 0; i < ns; i++) f2_single_register(s, &blocks[nd + i], i, c);
    d->b.final = (final_layer){.scale_first = true, .order = PATCH_CONV};
    final_register(s, &d->b.final, c, "norm_out.linear", "proj_out", false);
    for (int i = 0; i < nd + ns; i++) blocks[i].m = m, blocks[i].sh = &d->sh;
    dual_sequences(m, "transformer_blocks", nd, &f2_double_kind, ns, &f2_single_kind, sizeof *blocks);
    d->b.embed = embed_forward, d->b.embed_backward = embed_backward;
    return ST_OK;
}

/* Zero modulations and final projection (adaLN-Zero), RMSNorm weights one, N(0, 0.02) embedding MLPs,
 * xavier-uniform elsewhere. */
static const init_rule f2_inits[] = {
    {INIT_ZERO, "_modulation_|single_stream_modulation|norm_out.linear|^proj_out.weight$"}, {INIT_ONE, ".norm_"},
    {INIT_NORMAL, "time_guidance_embed."}, {0}};

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

/* The image and text tokens, the rotary table of their positions, c = timestep + guidance embeddings,
 * cs = SiLU(c) and the shared modulations of cs. */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    f2_model *d = f2_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, D = c->hidden, hd = D / c->heads;
    st_status st = ST_OK;
    dual_take_tokens(m, &st, cond);
    dual_take_c(m, &st, train, &d->t, c->guidance_embeds ? &d->g : NULL, NULL);
    for (int i = 0; i < F2_MOD_N; i++) {
        model_hold(m, &st, &d->sh.mod[i], B * mod_width[i] * D, "flux2.modulation", false);
        if (train) model_hold(m, &st, &d->sh.dmod[i], B * mod_width[i] * D, "flux2.dmodulation", true);
    }
    model_hold(m, &st, &m->ctx.rope, (L + T) * hd, "flux2.rope", false);
    float *ids = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)((L + T) * 4) * sizeof(float), MEM_WORKSPACE, "flux2.position_ids",
                             (void **)&ids);
    if (st) return st;
    position_ids_flux2(ids, L, grid_rows(c), grid_cols(c));
    rope_table(m->ctx.rope, ids, L + T, 4, c->rope_axes, F2_ROPE_THETA);
    pool_free(m->pool, ids);

    dual_embed_text(m, cond, train, d->p_ctx_w, -1);
    dual_embed_image(m, x, d->p_x_w, -1);
    st = dual_c_forward(m, timesteps, cond, &d->t, c->guidance_embeds ? &d->g : NULL, NULL);
    if (st) return st;
    for (int i = 0; i < F2_MOD_N; i++) linear_forward(d->sh.mod[i], m->ctx.cs, PW(p_mod[i]), NULL, B, D, mod_width[i] * D);
    return ST_OK;
}

static st_status embed_backward(model *m, float *dimg, const float *dtxt)
{
    f2_model *d = f2_of(m);
    const int64_t B = m->shape.batch, D = m->cfg.hidden;
    dual_tokens_backward(m, dimg, dtxt, d->p_x_w, -1, d->p_ctx_w, -1);
    for (int i = 0; i < F2_MOD_N; i++) /* every block's modulation gradient is in: on to SiLU(c) */
        linear_backward(m->ctx.dcs, PG(p_mod[i]), NULL, d->sh.dmod[i], m->ctx.cs, PW(p_mod[i]), B, D, mod_width[i] * D);
    return dual_c_backward(m, &d->t, m->cfg.guidance_embeds ? &d->g : NULL, NULL);
}

/* ---- the family's descriptor (family.h) ---- */

/* Flux.2's are the published Flux2Transformer2DModel configs (FLUX.2-dev: 8 double + 48 single blocks, 48 heads x
 * 128, Mistral Small 3.1's three stacked hidden states, 15360 wide; FLUX.2-klein-base-4B and -9B: 5 + 20 blocks of 24
 * heads and 8 + 24 of 32, Qwen3-4B's and -8B's three stacked states, 7680 and 12288 wide, no guidance embedding), all
 * with 32 latent channels packed 2x2 (in_channels 128) and SimpleTuner's 512 text tokens (its flux2
 * MAX_SEQUENCE_LENGTH); timestep_guidance_channels 256, axes_dims_rope (32, 32, 32, 32). */
static const family_preset presets[] = {
    {"flux2-tiny", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 0, true, true, 0, 0},
    {"flux2-dev", 8, 6144, 48, 2, 32, 128, 10, 48, 512, 15360, 0, true, true, 0, 0},
    {"flux2-klein-4b", 5, 3072, 24, 2, 32, 128, 10, 20, 512, 7680, 0, false, true, 0, 0},
    {"flux2-klein-9b", 8, 4096, 32, 2, 32, 128, 10, 24, 512, 12288, 0, false, true, 0, 0},
};

static void flux2_preset(model_config *mc, const char *name, bool tiny)
{
    mc->time_channels = 256; /* timestep_guidance_channels */
}

static st_status flux2_check(const model_config *mc) { return family_check_four(mc, false); }

/* Flux2Transformer2DModel's config: its defaults (FLUX.2-dev's), then the file's values. mlp_ratio, rope_theta
 * and eps other than every published config's (3.0, 2000, 1e-6) are refused by name. */
static st_status flux2_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t in = 128, out = 0, patch = 1, hd = 128, heads = 48, axes[4] = {32, 32, 32, 32};
    mc->depth = 8, mc->single_depth = 48, mc->text_dim = 15360, mc->time_channels = 256;
    const json_key keys[] = {{"in_channels", &in}, {"out_channels", &out}, {"patch_size", &patch},
                             {"num_layers", &mc->depth}, {"num_single_layers", &mc->single_depth},
                             {"attention_head_dim", &hd}, {"num_attention_heads", &heads},
                             {"joint_attention_dim", &mc->text_dim},
                             {"timestep_guidance_channels", &mc->time_channels}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 4, axes);
    if (st) return st;
    if ((st = json_fixed(j, file, "mlp_ratio", 3.0, "Flux.2 (every published config's)")) ||
        (st = json_fixed(j, file, "rope_theta", 2000.0, "Flux.2 (every published config's)")) ||
        (st = json_fixed(j, file, "eps", 1e-6, "Flux.2 (every published config's)")))
        return st;
    /* the pipeline packs 2x2 latent patches into in_channels: segtrain patchifies the latent itself */
    if (patch != 1 || in % 4 || (out && out != in))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size %lld, in_channels %lld, out_channels %lld; segtrain reads "
                       "Flux.2's packing (patch_size 1, in_channels 4 C, out_channels as in_channels)", file,
                       (long long)patch, (long long)in, (long long)out);
    mc->guidance_embeds = true; /* the class's default */
    if ((st = json_bool(j, file, "guidance_embeds", &mc->guidance_embeds))) return st;
    mc->channels = in / 4, mc->patch = 2, mc->heads = heads, mc->hidden = hd * heads, mc->pooled_dim = 0;
    set_rope_axes(mc, axes, 4);
    return ST_OK;
}

const family_desc flux2_desc = {
    .name = "flux2", .topology = TOPO_DUAL, .traits = TR_TEXT,
    .st = {{.name = "flux2", .title = "Flux.2", .diffusers = "Flux2Transformer2DModel",
            .flavours = "dev|klein-4b|klein-9b",
            .built = "dev:flux2-dev|klein-4b:flux2-klein-4b|klein-9b:flux2-klein-9b", .fallback = "klein-9b",
            .example = "flux2.peft-lora.json", .tiny = "flux2-tiny"}},
    .packed = 4, FAMILY_PRESETS(presets), .preset = flux2_preset, .rope_axes = family_rope_axes_four,
    .readers = {{"Flux2Transformer2DModel", flux2_from_json}}, .fields = F_SINGLE, .axes = 4, .check = flux2_check,
    .ops = &(const model_family){.create = f2_create, .impl_size = sizeof(f2_model), DUAL_STEPS, .inits = f2_inits},
    .swap_blocks = {"transformer_blocks", "single_transformer_blocks"},
};
