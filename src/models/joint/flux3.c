/* Flux.3 (docs/FAMILIES.md): diffusers' Flux3Transformer2DModel, text to image: the noisy image and the text, each
 * through its own mode blocks, then together through the single blocks. diffusers 0.42.1 has no Flux.3 pipeline and
 * SimpleTuner's snapshot no flux3_image model, so it is called as the class documents and as Flux2Pipeline calls
 * Flux.2: its time is t (1 is noise), which it scales by 1000 itself; the latents packed in 2 x 2 patches
 * (features (channel, row, column)); position ids (t, h, w, l) of the text (0, 0, 0, k) and the image
 * (0, row, column, 0); the prediction the output itself.
 *
 * - Three block sequences of flux3_block.c's block: txt_mode_blocks on the text's rows, mode_blocks.image on the
 *   image's, then single_transformer_blocks on the joint rows [text; image]. The reference-image mode
 *   (mode_blocks.image_cond, x_embedders.image_cond, the image_cond modulations) is image-to-image's: text-to-image
 *   never runs it, so its weights are loaded and saved as they are, frozen.
 * - time: timestep_embedder (Timesteps(256), cosines first; linear_1, SiLU, linear_2, no biases) of 1000 t for the
 *   image and of 0 for the text (the same weights); SiLU of each feeds its modulations: early_stream_modulations.
 *   {image, txt} for the mode blocks, single_stream_modulations.{txt, image} for the single blocks' two row sets.
 * - context_embedder and x_embedders.image: linears without bias; rotary tables on four axes (rope_table, theta
 *   10000), interleaved pairs.
 * - norm_out: LayerNorm (no affine) of the image rows times 1 + scale plus shift, (scale, shift) =
 *   norm_out.linear(SiLU(image temb)); proj_out, unpacked. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/flux3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F3_EPS 1e-6f
#define F3_THETA 10000.0
#define F3_MLP_RATIO 3
enum { TXT, IMG, JOINT, NSEQ };
enum { MODE_IMAGE, MODE_COND, MODE_TXT, NMODE }; /* the modulation heads, in the class's order */

typedef struct f3_model {
    f3_block *blocks[NSEQ], *cond_blocks;
    time_pair tp; /* timestep_embedder of 1000 t and of 0 */
    lin_layer early[NMODE], single[NMODE], x_img, ctx;
    joint_final fin;
    float *mod[NSEQ], *dmod[NSEQ], *rope[NSEQ];
    /* a step */
    float *patches, *text_in;
} f3_model;

static f3_model *f3_of(const model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)

static int64_t rows_of(const model *m, int q)
{
    return q == TXT ? m->shape.text : q == IMG ? m->shape.tokens : m->shape.text + m->shape.tokens;
}

static st_status f3_create(model *m)
{
    const model_config *c = &m->cfg;
    f3_model *d = m->impl;
    const int n[NSEQ] = {(int)c->depth, (int)c->depth, (int)c->single_depth};
    static const char *const names[NSEQ] = {"txt_mode_blocks", "mode_blocks.image", "single_transformer_blocks"};
    for (int q = 0; q < NSEQ; q++) {
        if (!(d->blocks[q] = model_seq_blocks(m, q, names[q], n[q], &f3_block_kind, sizeof *d->blocks[q])))
            return st_host_oom("the Flux.3 model");
        m->seq_sample[q] = rows_of(m, q) * m->shape.hidden;
    }
    d->cond_blocks = model_alloc(m, (size_t)c->depth, sizeof *d->cond_blocks);
    if (!d->cond_blocks) return st_host_oom("the Flux.3 model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = model_patch_dim(c), F = F3_MLP_RATIO * D;
    static const char *const modes[NMODE] = {"image", "image_cond", "txt"};
    char name[128];
    /* in the order of Flux3Transformer2DModel's state_dict */
    time_pair_register(s, &d->tp, "timestep_embedder.linear_1", "timestep_embedder.linear_2", c->time_channels, D,
                       full);
    for (int k = 0; k < NMODE; k++) {
        snprintf(name, sizeof name, "early_stream_modulations.%s.linear", modes[k]);
        d->early[k] = lin_register(s, name, D, 3 * D, false, 0, 0, full && k != MODE_COND);
    }
    for (int k = 0; k < NMODE; k++) {
        snprintf(name, sizeof name, "single_stream_modulations.%s.linear", modes[k]);
        d->single[k] = lin_register(s, name, D, 3 * D, false, 0, 0, full && k != MODE_COND);
    }
    d->x_img = lin_register(s, "x_embedders.image", P, D, false, 0, 0, full);
    lin_register(s, "x_embedders.image_cond", P, D, false, 0, 0, false);
    d->ctx = lin_register(s, "context_embedder", c->text_dim, D, false, 0, 0, full);
    static const int order[NSEQ + 1] = {IMG, -1, TXT, JOINT}; /* the state_dict's; -1: mode_blocks.image_cond */
    for (int o = 0; o <= NSEQ; o++) {
        const int q = order[o];
        for (int i = 0; i < (q < 0 ? n[IMG] : n[q]); i++) {
            f3_block *b = q < 0 ? &d->cond_blocks[i] : &d->blocks[q][i];
            if (q < 0) *b = (f3_block){.m = m, .ffn = F};
            else *b = (f3_block){.m = m, .rows = rows_of(m, q), .split = q == JOINT ? m->shape.text : 0, .ffn = F,
                                 .eps = F3_EPS, .mod = &d->mod[q], .dmod = &d->dmod[q], .rope = &d->rope[q]};
            snprintf(name, sizeof name, "%s.%d", q < 0 ? "mode_blocks.image_cond" : names[q], i);
            f3_block_register(s, b, name, c, q >= 0);
        }
    }
    d->fin = (joint_final){.mod = lin_register(s, "norm_out.linear", D, 2 * D, false, 0, 0, full), .n_mod = 2,
                           .eps = F3_EPS, .order = PATCH_CONV, .rows = rows_of(m, JOINT), .at = m->shape.text};
    d->fin.out = lin_register(s, "proj_out", D, P, false, 0, 0, full);
    return ST_OK;
}

static void f3_release(model *m)
{
    f3_model *d = f3_of(m);
    joint_final_release(&d->fin);
}

void time_pair_register(param_set *s, time_pair *p, const char *linear_1, const char *linear_2, int64_t in, int64_t D,
                        bool trainable)
{
    temb_register_nobias(s, &p->t, linear_1, linear_2, in, D, trainable);
    p->z = p->t; /* the same parameters, its own buffers */
}

st_status time_pair_forward(model *m, time_pair *p, const float *timesteps, bool train)
{
    const int64_t B = m->shape.batch, D = m->shape.hidden;
    st_status st = ST_OK;
    temb_take(m, &p->t, &st, train);
    temb_take_path(m, &p->z, &st);
    model_hold(m, &st, &p->zero, B, "time.zero", true);
    model_hold(m, &st, &p->zs, B * D, "time.silu_zero_temb", false);
    if (train) model_hold(m, &st, &p->dzs, B * D, "time.dsilu_zero_temb", true);
    if (!st) st = temb_forward(m, &p->t, timesteps);
    if (!st) st = temb_forward(m, &p->z, p->zero);
    if (!st) silu_forward(m->ctx.cs, p->t.c, B * D), silu_forward(p->zs, p->z.c, B * D);
    return st;
}

st_status time_pair_backward(model *m, time_pair *p, scratch *k)
{
    const int64_t B = m->shape.batch, D = m->shape.hidden;
    float *dc = scratch_take_zero(k, B * D, MEM_WORKSPACE, "time.dtemb");
    if (k->status) return k->status;
    st_status st = temb_silu_backward(m, &p->t, dc, m->ctx.dcs);
    if (!st) {
        zero_bytes(dc, (size_t)(B * D) * sizeof(float));
        st = temb_silu_backward(m, &p->z, dc, p->dzs);
    }
    scratch_drop(k, dc);
    return st;
}

/* The sequences' rotary tables: the joint rows' [text (0, 0, 0, k); image (0, row, column, 0)] per sample, and each
 * mode's part of them */
static st_status tables(model *m)
{
    f3_model *d = f3_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = rows_of(m, JOINT), hd = c->hidden / c->heads;
    st_status st = ST_OK;
    for (int q = 0; q < NSEQ; q++) model_hold(m, &st, &d->rope[q], B * rows_of(m, q) * hd, "flux3.rope", false);
    float *ids = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(S * 4) * sizeof(float), MEM_WORKSPACE, "flux3.position_ids",
                             (void **)&ids);
    if (st) return st;
    position_ids_flux2(ids, L, grid_rows(c), grid_cols(c));
    rope_table(d->rope[JOINT], ids, S, 4, c->rope_axes, F3_THETA);
    /* every sample's table sample 0's (a source row 0 floats apart), the text's and the image's parts of it */
    copy_rows(d->rope[JOINT] + S * hd, S * hd, d->rope[JOINT], 0, B - 1, S * hd);
    copy_rows(d->rope[TXT], L * hd, d->rope[JOINT], 0, B, L * hd);
    copy_rows(d->rope[IMG], (S - L) * hd, d->rope[JOINT] + L * hd, 0, B, (S - L) * hd);
    pool_free(m->pool, ids);
    return ST_OK;
}

/* The modulations: the mode blocks' from SiLU of their temb, the single blocks' two sets side by side per sample */
static st_status modulations(model *m, bool train)
{
    f3_model *d = f3_of(m);
    const int64_t B = m->shape.batch, D = m->shape.hidden;
    st_status st = ST_OK;
    for (int q = 0; q < NSEQ; q++) {
        const int64_t w = (q == JOINT ? 2 : 1) * 3 * D;
        model_hold(m, &st, &d->mod[q], B * w, "flux3.modulation", false);
        if (train) model_hold(m, &st, &d->dmod[q], B * w, "flux3.dmodulation", true);
    }
    float *tmp = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(B * 3 * D) * sizeof(float), MEM_WORKSPACE, "flux3.single_mod",
                             (void **)&tmp);
    if (st) return st;
    const float *is = m->ctx.cs, *zs = d->tp.zs;
    st = lin_forward(m->params, m->pool, &d->early[MODE_TXT], d->mod[TXT], zs, B);
    if (!st) st = lin_forward(m->params, m->pool, &d->early[MODE_IMAGE], d->mod[IMG], is, B);
    for (int k = 0; k < 2 && !st; k++) { /* set 0 the text's, set 1 the image's */
        st = lin_forward(m->params, m->pool, &d->single[k ? MODE_IMAGE : MODE_TXT], tmp, k ? is : zs, B);
        if (!st) copy_rows(d->mod[JOINT] + k * 3 * D, 6 * D, tmp, 3 * D, B, 3 * D);
    }
    pool_free(m->pool, tmp);
    return st;
}

/* back from the modulations' gradients to dL/d SiLU(temb) of the image (m->ctx.dcs) and of 0 (d->dzs) */
static st_status modulations_backward(model *m)
{
    f3_model *d = f3_of(m);
    const int64_t B = m->shape.batch, D = m->shape.hidden;
    float *tmp = NULL;
    st_status st = pool_alloc(m->pool, (size_t)(B * 3 * D) * sizeof(float), MEM_WORKSPACE, "flux3.dsingle_mod",
                              (void **)&tmp);
    if (st) return st;
    st = lin_backward(m->params, m->pool, &d->early[MODE_TXT], d->tp.dzs, d->dmod[TXT], d->tp.zs, B);
    if (!st) st = lin_backward(m->params, m->pool, &d->early[MODE_IMAGE], m->ctx.dcs, d->dmod[IMG], m->ctx.cs, B);
    for (int k = 0; k < 2 && !st; k++) {
        copy_rows(tmp, 3 * D, d->dmod[JOINT] + k * 3 * D, 6 * D, B, 3 * D);
        st = lin_backward(m->params, m->pool, &d->single[k ? MODE_IMAGE : MODE_TXT], k ? m->ctx.dcs : d->tp.dzs, tmp,
                          k ? m->ctx.cs : d->tp.zs, B);
    }
    pool_free(m->pool, tmp);
    return st;
}

static st_status f3_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    f3_model *d = f3_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, D = c->hidden, S = L + T;
    const int64_t P = model_patch_dim(c), K = model_cond_len(c), Dc = c->text_dim;
    st_status st = ST_OK;
    model_hold(m, &st, &d->patches, B * T * P, "flux3.patches", false);
    model_hold(m, &st, &d->text_in, B * L * Dc, "flux3.text", false);
    float *x0[2] = {model_take(m, &st, B * L * D, "flux3.text_rows", false),
                    model_take(m, &st, B * T * D, "flux3.image_rows", false)};
    if (!st) st = tables(m);
    if (!st) st = time_pair_forward(m, &d->tp, timesteps, train);
    if (!st) st = modulations(m, train);
    if (!st) {
        copy_rows(d->text_in, L * Dc, cond, K, B, L * Dc);
        const patch_shape ps = model_patches(m);
        patchify_forward(d->patches, x, &ps);
        st = lin_forward(m->params, m->pool, &d->ctx, x0[0], d->text_in, B * L);
    }
    if (!st) st = lin_forward(m->params, m->pool, &d->x_img, x0[1], d->patches, B * T);
    block_state out[2] = {{0}};
    for (int q = TXT; q <= IMG; q++) {
        if (!st) st = model_seq_forward1(m, q, &x0[q], train, &out[q]);
        pool_free(m->pool, x0[q]);
    }
    float *joint = model_take(m, &st, B * S * D, "flux3.joint", false);
    for (int q = TXT; !st && q <= IMG; q++) /* text first */
        model_rows_scatter(m, joint, out[q].t[0], S, q == IMG ? L : 0, rows_of(m, q));
    for (int q = TXT; q <= IMG; q++) state_free(m->pool, &out[q]);
    if (!st) st = joint_last_forward(m, &d->fin, JOINT, &joint, m->ctx.cs, train, pred);
    pool_free(m->pool, joint);
    return st;
}

static st_status f3_backward(model *m, const float *dpred)
{
    f3_model *d = f3_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = L + T, D = c->hidden, N = B * T;
    st_status st = ST_OK;
    scratch k = {.pool = m->pool};
    block_state grad = {.n = 1};
    if ((st = joint_final_head_backward(m, &d->fin, &k, dpred, m->ctx.cs, m->ctx.dcs, "flux3.djoint", &grad.t[0])))
        goto done;
    st = model_seq_backward(m, JOINT, &grad);
    block_state part[2] = {{.n = 1, .t = {model_take(m, &st, B * L * D, "flux3.dtext_rows", false)}},
                           {.n = 1, .t = {model_take(m, &st, B * T * D, "flux3.dimage_rows", false)}}};
    for (int q = TXT; !st && q <= IMG; q++)
        model_rows_gather(m, part[q].t[0], grad.t[0], S, q == IMG ? L : 0, rows_of(m, q));
    state_free(m->pool, &grad);
    for (int q = IMG; q >= TXT; q--)
        if (!st) st = model_seq_backward(m, q, &part[q]); /* else model_release's */
    if (!st) st = lin_backward(m->params, m->pool, &d->x_img, NULL, part[IMG].t[0], d->patches, N);
    if (!st) st = lin_backward(m->params, m->pool, &d->ctx, NULL, part[TXT].t[0], d->text_in, B * L);
    state_free(m->pool, &part[0]), state_free(m->pool, &part[1]);
    if (!st) st = modulations_backward(m);
    if (!st) st = time_pair_backward(m, &d->tp, &k);
done:;
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

/* segtrain's own initialisation, for training from scratch: the modulations and the output at zero (the blocks start
 * as identities), the q/k norms at 1, the time path N(0, 0.02), xavier linears elsewhere */
static const init_rule f3_inits[] = {
    {INIT_ZERO, "modulations|norm_out|proj_out"}, {INIT_ONE, "norm_q|norm_k"}, {INIT_NORMAL, "timestep_embedder"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

static const family_preset presets[] = {
    /* Flux.3 Klein (Flux3Transformer2DModel's defaults; no published config was at hand): 5 mode blocks for the text
     * and for the image, then 28 single blocks, of 24 heads x 128; Flux.2's VAE (32 channels, 8x) in 2 x 2 patches;
     * stacked Qwen3-VL states 20480 wide at 512 tokens (segtrain's choice, Flux.2's). The tiny one is the fixture's. */
    {"flux3-tiny", 2, 32, 2, 2, 4, 8, 10, 2, 6, 24, 0, false, false, 0, 0},
    {"flux3-klein", 5, 3072, 24, 2, 32, 128, 10, 28, 512, 20480, 0, false, false, 0, 0},
};

static void flux3_preset(model_config *mc, const char *name, bool tiny)
{
    mc->time_channels = 256; /* timestep_channels */
}

static st_status flux3_check(const model_config *mc)
{
    st_status st = family_check_four(mc, true);
    if (!st && mc->single_depth < 1) st = family_refuse(mc, GROUP_SINGLE, "flux3_image has at least 1");
    return st;
}

/* Flux3Transformer2DModel's config: the class defaults, then the file's values. in_channels is the pipeline's 2 x 2
 * packing; a reference mode of other channels, the flow-map (step-distilled) models, and another mlp_ratio,
 * rope_theta or eps are refused by name. */
static st_status flux3_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t in = 128, cond = 128, hd = 128, heads = 24, axes[4] = {32, 32, 32, 32};
    mc->depth = 5, mc->single_depth = 28, mc->text_dim = 20480, mc->time_channels = 256;
    const json_key keys[] = {{"in_channels", &in}, {"cond_in_channels", &cond}, {"num_layers", &mc->depth},
                             {"num_single_layers", &mc->single_depth}, {"attention_head_dim", &hd},
                             {"num_attention_heads", &heads}, {"joint_attention_dim", &mc->text_dim},
                             {"timestep_channels", &mc->time_channels}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 4, axes);
    if (!st) st = json_fixed(j, file, "mlp_ratio", 3.0, "Flux.3 (the class default)");
    if (!st) st = json_fixed(j, file, "rope_theta", 10000, "Flux.3 (the class default)");
    if (!st) st = json_fixed(j, file, "eps", 1e-6, "Flux.3 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "flow_map", false, "Flux.3 (a flow map's target timestep is not built)");
    if (st) return st;
    if (in % 4 || cond != in || heads < 1)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: in_channels %lld, cond_in_channels %lld, num_attention_heads %lld; "
                       "segtrain reads Flux.3's packing (in_channels 4 C, the reference mode's the same) with at least "
                       "1 head", file, (long long)in, (long long)cond, (long long)heads);
    mc->channels = in / 4, mc->patch = 2, mc->patch_t = 1, mc->heads = heads, mc->hidden = hd * heads;
    mc->pooled_dim = 0, mc->guidance_embeds = false;
    set_rope_axes(mc, axes, 4);
    return ST_OK;
}

const family_desc flux3_image_desc = {
    .name = "flux3_image", .topology = TOPO_JOINT, .traits = TR_TEXT,
    .st = {{.name = "flux3_image", .title = "Flux.3 Klein", .diffusers = "Flux3Transformer2DModel", .flavours = "",
            .built = ":flux3-klein", .fallback = "", .tiny = "flux3-tiny"}},
    .blocks_words = &(const blocks_words){"%lld text + %lld image mode blocks, %lld single blocks",
                                          {offsetof(model_config, depth), offsetof(model_config, depth),
                                           offsetof(model_config, single_depth)}},
    FAMILY_PRESETS(presets), .preset = flux3_preset,
    .rope_axes = family_rope_axes_four, .readers = {{"Flux3Transformer2DModel", flux3_from_json}}, .fields = F_SINGLE,
    .axes = 4, .check = flux3_check,
    .ops = &(const model_family){.create = f3_create, .impl_size = sizeof(f3_model), .forward = f3_forward,
                                 .backward = f3_backward, .release = f3_release, .inits = f3_inits},
};
