/* Krea 2 (docs/FAMILIES.md): diffusers' Krea2Transformer2DModel, called as SimpleTuner's krea2 calls it: its time t
 * (1 is noise) as the class takes it, the latents packed in 2 x 2 patches (features (channel, row, column)), the
 * prediction the output itself.
 *
 * - Three block sequences of lumina2_block.c's block in Krea 2's style (krea2_style: zero-centred RMSNorms, q and k
 *   RMSNorm-ed per head, grouped queries, an output gate sigmoid(to_gate(h)) on the attention, SwiGLU):
 *   text_fusion.layerwise_blocks over each token's tapped encoder layers (attending across the layers, token by
 *   token; no rotation, no mask), then, after text_fusion.projector (a weighted sum over the layers),
 *   text_fusion.refiner_blocks over the tokens (the text's key mask); then transformer_blocks over the joint rows
 *   [text; image] per sample (the text's padding keys masked), modulated by time_mod_proj's rows plus each block's
 *   scale_shift_table.
 * - time_embed: Timesteps(256) of 1000 t, cosines first, linear_1, GELU (tanh), linear_2: temb; time_mod_proj(
 *   GELU(temb)) is what every joint block reads (kept in m->ctx.mod; m->ctx.cs holds GELU(temb)).
 * - txt_in: the refined text through a zero-centred RMSNorm, linear_1, GELU (tanh), linear_2; img_in: a linear of
 *   the packed patches.
 * - Rotary positions on three axes (t, h, w), interleaved pairs at theta 1000: the text rows at 0, the image's at
 *   (0, row, column), as SimpleTuner's _position_ids_for_grids makes them.
 * - final_layer: zero-centred RMSNorm of the image rows, times 1 + (temb + table[0]), plus temb + table[1], then its
 *   linear, unpacked. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/lumina2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KREA2_FREQ 256
#define KREA2_THETA 1000.0
#define KREA2_MOD 6 /* prescale, preshift, pregate, postscale, postshift, postgate */
enum { LAYERWISE, REFINER, JOINT, NSEQ };

typedef struct kr_model {
    lumina_block *blocks[NSEQ];
    temb t;
    lin_layer mod, img;
    int proj;
    txt_in txt;
    joint_final fin; /* final_layer */
    float *rope;    /* the joint rows' per-sample rotary tables, a step's */
    float *no_rope; /* what the text's blocks read: NULL, no rotation */
    attn_mask masks[NSEQ];
    const attn_mask *maskp[NSEQ];
    /* a step */
    float *kb[NSEQ], *patches;
    block_state lw_out, ref_out;
} kr_model;

static kr_model *kr_of(const model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static int64_t text_width(const model_config *c) { return c->text_dim / c->text_layers; } /* text_hidden_dim */
static int64_t joint_rows(const model *m) { return m->shape.text + m->shape.tokens; }

static st_status kr_create(model *m)
{
    const model_config *c = &m->cfg;
    kr_model *d = m->impl;
    const int n[NSEQ] = {(int)c->text_blocks, (int)c->refiner_depth, (int)c->depth};
    static const char *const names[NSEQ] = {"text_fusion.layerwise_blocks", "text_fusion.refiner_blocks",
                                            "transformer_blocks"};
    for (int q = 0; q < NSEQ; q++)
        if (!(d->blocks[q] = model_seq_blocks(m, q, names[q], n[q], &lumina_block_kind, sizeof *d->blocks[q])))
            return st_host_oom("the Krea 2 model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = model_patch_dim(c), Dt = text_width(c), L = m->shape.text, nl = c->text_layers;
    const int64_t rows[NSEQ] = {L * nl, L, joint_rows(m)};
    /* in the order of Krea2Transformer2DModel's state_dict */
    d->img = lin_register(s, "img_in", P, D, true, 0, 0, full);
    temb_register(s, &d->t, "time_embed.linear_1", "time_embed.linear_2", KREA2_FREQ, D, full);
    d->t.gelu = true;
    d->mod = lin_register(s, "time_mod_proj", D, KREA2_MOD * D, true, 0, 0, full);
    char prefix[96];
    for (int q = 0; q < NSEQ; q++) {
        if (q == REFINER) d->proj = param_add(s, "text_fusion.projector.weight", 2, (int64_t[]){1, nl}, full);
        if (q == JOINT) {
            d->txt.norm = param_add(s, "txt_in.norm.weight", 1, (int64_t[]){Dt}, full);
            d->txt.l1 = lin_register(s, "txt_in.linear_1", Dt, D, true, 0, 0, full);
            d->txt.l2 = lin_register(s, "txt_in.linear_2", D, D, true, 0, 0, full);
            d->txt.eps = (float)c->norm_eps;
        }
        const bool text = q != JOINT;
        m->seq_sample[q] = rows[q] * (text ? Dt : D);
        for (int i = 0; i < n[q]; i++) {
            lumina_block *b = &d->blocks[q][i];
            *b = (lumina_block){.m = m, .modulated = !text, .rows = rows[q], .width = text ? Dt : 0,
                                .heads = text ? c->text_heads : 0, .kv_heads = text ? c->text_kv_heads : c->kv_heads,
                                .ffn = text ? c->text_ffn : c->ffn_dim, .attn_rows = q == LAYERWISE ? nl : 0,
                                .eps = (float)c->norm_eps, .rope = text ? &d->no_rope : &d->rope,
                                .mask = &d->maskp[q], .style = &krea2_style};
            snprintf(prefix, sizeof prefix, "%s.%d", names[q], i);
            lumina_block_register(s, b, prefix, c);
        }
    }
    /* (scale, shift) = temb + the table, on a zero-centred RMSNorm */
    d->fin = (joint_final){.mod = {.w = -1}, .rms = true, .zero_centred = true, .n_mod = 2, .eps = (float)c->norm_eps,
                           .order = PATCH_CONV, .rows = joint_rows(m), .at = L};
    d->fin.table = param_add(s, "final_layer.scale_shift_table", 2, (int64_t[]){2, D}, full);
    d->fin.norm = param_add(s, "final_layer.norm.weight", 1, (int64_t[]){D}, full);
    d->fin.out = lin_register(s, "final_layer.linear", D, P, true, 0, 0, full);
    return ST_OK;
}

static void kr_release(model *m)
{
    kr_model *d = kr_of(m);
    state_free(m->pool, &d->lw_out), state_free(m->pool, &d->ref_out);
    op_state_release(&d->txt.stats), joint_final_release(&d->fin);
    for (int q = 0; q < NSEQ; q++) d->maskp[q] = NULL;
}

/* The same from the samples' text masks, ids (S, 3) (a host loop's) */
static st_status mask_positions(model *m, const float *cond, float *ids)
{
    kr_model *d = kr_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = joint_rows(m), hd = c->hidden / c->heads;
    const int64_t K = model_cond_len(c), g = grid_cols(c);
    for (int64_t r = 0; r < S; r++) { /* the text at 0, the image at (0, row, column) */
        const int64_t i = r - L;
        ids[r * 3] = 0.0f;
        ids[r * 3 + 1] = r < L ? 0.0f : (float)(i / g), ids[r * 3 + 2] = r < L ? 0.0f : (float)(i % g);
    }
    rope_table(d->rope, ids, S, 3, c->rope_axes, KREA2_THETA);
    for (int64_t b = 1; b < B; b++) memcpy(d->rope + b * S * hd, d->rope, (size_t)(S * hd) * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        const float *mask = cond + b * K + L * c->text_dim;
        for (int64_t r = 0; r < S; r++) {
            const float kb = r < L && mask[r] == 0.0f ? -INFINITY : 0.0f;
            if (r < L && mask[r] != 0.0f && mask[r] != 1.0f)
                return st_fail(ST_ERR_INVALID, "the batch's sample %lld: its text mask is %g at token %lld; Krea 2 "
                               "takes 1 for a token and 0 for padding", (long long)b, mask[r], (long long)r);
            if (r < L) d->kb[REFINER][b * L + r] = kb;
            d->kb[JOINT][b * S + r] = kb;
        }
    }
    return ST_OK;
}

/* The text's key masks (the refiner's and the joint rows') and the joint rows' rotary tables */
static st_status positions(model *m, const float *cond)
{
    kr_model *d = kr_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = joint_rows(m), hd = c->hidden / c->heads;
    st_status st = ST_OK;
    model_hold(m, &st, &d->kb[REFINER], B * L, "krea2.text_key_mask", false);
    model_hold(m, &st, &d->kb[JOINT], B * S, "krea2.key_mask", false);
    model_hold(m, &st, &d->rope, B * S * hd, "krea2.rope", false);
    if (!st) st = model_host_loop(m, d->rope, mask_positions, cond, S * 3, "krea2.position_ids");
    if (st) return st;
    d->masks[REFINER] = (attn_mask){.key_bias = d->kb[REFINER], .batch_stride = L};
    d->masks[JOINT] = (attn_mask){.key_bias = d->kb[JOINT], .batch_stride = S};
    d->maskp[LAYERWISE] = NULL, d->maskp[REFINER] = &d->masks[REFINER], d->maskp[JOINT] = &d->masks[JOINT];
    return ST_OK;
}

/* text_fusion.projector: out (B L, Dt) = sum over k of w[k] times layer k's rows; back: dw and dlayers from dout */
static void project(model *m, float *out, const float *layers, bool back, float *dlayers, const float *dout)
{
    const model_config *c = &m->cfg;
    const int64_t n = m->shape.batch * m->shape.text, nl = c->text_layers, Dt = text_width(c);
    if (back) weighted_sum_backward(dlayers, PG(kr_of(m)->proj), dout, layers, PW(kr_of(m)->proj), n, nl, Dt);
    else weighted_sum_forward(out, layers, PW(kr_of(m)->proj), n, nl, Dt);
}

static st_status kr_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    kr_model *d = kr_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = L + T, D = c->hidden;
    const int64_t Dt = text_width(c), K = model_cond_len(c), P = model_patch_dim(c), BL = B * L;
    st_status st = ST_OK;
    temb_take(m, &d->t, &st, train);
    model_hold(m, &st, &m->ctx.mod, B * KREA2_MOD * D, "krea2.modulation", false);
    if (train) model_hold(m, &st, &m->ctx.dmod, B * KREA2_MOD * D, "krea2.dmodulation", true);
    model_hold(m, &st, &d->patches, B * T * P, "krea2.patches", false);
    float *lw0 = model_take(m, &st, BL * c->text_dim, "krea2.text_layers", false);
    if (!st) st = positions(m, cond);
    if (st) goto fail;
    copy_rows(lw0, L * c->text_dim, cond, K, B, L * c->text_dim);
    if ((st = temb_forward(m, &d->t, timesteps))) goto fail; /* the class's 1000 t: segtrain's timesteps */
    gelu_forward(m->ctx.cs, d->t.c, B * D);
    if ((st = lin_forward(m->params, m->pool, &d->mod, m->ctx.mod, m->ctx.cs, B))) goto fail;
    /* the text fusion */
    st = model_seq_forward1(m, LAYERWISE, &lw0, train, &d->lw_out);
    float *ref0 = st ? NULL : model_take(m, &st, BL * Dt, "krea2.text_projected", false);
    if (st) goto fail;
    project(m, ref0, d->lw_out.t[0], false, NULL, NULL);
    st = model_seq_forward1(m, REFINER, &ref0, train, &d->ref_out);
    /* txt_in and img_in into the joint rows */
    float *part = model_take(m, &st, B * (L > T ? L : T) * D, "krea2.rows", false);
    float *joint = model_take(m, &st, B * S * D, "krea2.joint", false);
    if (!st) st = txt_in_joint_rows(m, &d->txt, &d->img, joint, part, d->ref_out.t[0], d->patches, x, train);
    pool_free(m->pool, part);
    if (!st) st = joint_last_forward(m, &d->fin, JOINT, &joint, d->t.c, train, pred);
    pool_free(m->pool, joint);
fail:
    pool_free(m->pool, lw0); /* NULL once the text fusion took it */
    return st;
}

static st_status kr_backward(model *m, const float *dpred)
{
    kr_model *d = kr_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = L + T, D = c->hidden, N = B * T;
    const int64_t Dt = text_width(c), BL = B * L;
    st_status st = ST_OK;
    scratch k = {.pool = m->pool};
    float *dtemb = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "krea2.dtemb");
    block_state grad = {.n = 1};
    if ((st = joint_final_head_backward(m, &d->fin, &k, dpred, d->t.c, dtemb, "krea2.djoint", &grad.t[0]))) goto done;
    scratch_drop(&k, d->fin.dh), scratch_drop(&k, d->fin.dout);
    /* the joint blocks */
    st = model_seq_backward(m, JOINT, &grad); /* releases the run whatever it returns */
    float *part = st ? NULL : scratch_take(&k, B * (L > T ? L : T) * D, MEM_WORKSPACE, "krea2.drows");
    if (!st) st = k.status;
    if (!st) { /* img_in, then txt_in back to the refined text */
        model_rows_gather(m, part, grad.t[0], S, L, T);
        st = lin_backward(m->params, m->pool, &d->img, NULL, part, d->patches, N);
    }
    if (!st) model_rows_gather(m, part, grad.t[0], S, 0, L);
    state_free(m->pool, &grad);
    block_state gref = {.n = 1, .t = {st ? NULL : model_take(m, &st, BL * Dt, "krea2.drefined", true)}};
    if (!st) st = txt_in_backward(m, &d->txt, &k, gref.t[0], part, d->ref_out.t[0], BL);
    state_free(m->pool, &d->ref_out);
    if (!st) st = model_seq_backward(m, REFINER, &gref); /* else model_release's */
    block_state glw = {.n = 1, .t = {st ? NULL : model_take(m, &st, BL * c->text_dim, "krea2.dtext_layers", true)}};
    if (!st) project(m, NULL, d->lw_out.t[0], true, glw.t[0], gref.t[0]);
    state_free(m->pool, &gref), state_free(m->pool, &d->lw_out);
    if (!st) st = model_seq_backward(m, LAYERWISE, &glw);
    state_free(m->pool, &glw);
    /* the blocks' modulation back through time_mod_proj and GELU, with the final layer's, to time_embed */
    if (!st) st = lin_backward(m->params, m->pool, &d->mod, m->ctx.dcs, m->ctx.dmod, m->ctx.cs, B);
    if (!st) {
        gelu_backward(dtemb, m->ctx.dcs, d->t.c, B * D);
        st = temb_backward(m, &d->t, dtemb);
    }
done:;
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

/* segtrain's own initialisation, for training from scratch: the zero-centred norms and the tables at zero (as the
 * class initialises them: a scale of 1, no change), the output linear at zero, the time path N(0, 0.02), xavier
 * linears elsewhere */
static const init_rule kr_inits[] = {
    {INIT_ZERO, "norm|scale_shift_table|final_layer.linear"}, {INIT_NORMAL, "time_embed"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

static const family_preset presets[] = {
    /* Krea 2 (krea/Krea-2-Raw's transformer, Krea2Transformer2DModel's defaults): 28 blocks of 48 heads x 128 with 12
     * key-value heads, feed-forward 16384, over 16 latent channels (Qwen-Image's VAE, 8x) in 2 x 2 patches; its text
     * fusion reads 12 tapped Qwen3-VL layers of 2560 a token (text_dim 30720) at the pipeline's 512 tokens. The rest
     * in its preset hook below; the tiny one is the fixture's. */
    {"krea2-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 72, 0, false, false, 0, 0},
    {"krea2", 28, 6144, 48, 2, 16, 128, 10, 0, 512, 30720, 0, false, false, 0, 0},
};

static void krea2_preset(model_config *mc, const char *name, bool tiny)
{
    /* the text fusion: text_dim is its tapped layers' widths side by side */
    mc->kv_heads = tiny ? 1 : 12, mc->ffn_dim = tiny ? 64 : 16384, mc->norm_eps = 1e-5,
    mc->text_layers = tiny ? 3 : 12, mc->text_heads = tiny ? 2 : 20, mc->text_kv_heads = tiny ? 1 : 20,
    mc->text_ffn = tiny ? 48 : 6912, mc->text_blocks = 2, mc->refiner_depth = tiny ? 1 : 2;
}

static st_status krea2_check(const model_config *mc)
{
    st_status st = joint_check(mc, true);
    if (st) return st;
    const int64_t th = mc->text_layers ? mc->text_dim / mc->text_layers : 0; /* its text_hidden_dim */
    if (mc->text_layers < 1 || mc->text_layers > 1024 || mc->text_dim % mc->text_layers || mc->text_heads < 1 ||
        th % mc->text_heads || mc->text_kv_heads < 1 || mc->text_heads % mc->text_kv_heads || mc->text_ffn < 1 ||
        mc->text_ffn > 8 * th || mc->text_blocks < 1 || mc->text_blocks > 64 || mc->refiner_depth < 1 ||
        mc->refiner_depth > MODEL_REFINER_MAX)
        return family_refuse(mc, GROUP_TEXT_FUSION, "krea2 takes 1 to 1024 layers dividing text_dim, heads dividing "
                             "their width and divided by the key-value heads, a feed-forward of 1 to 8 widths, 1 to 64 "
                             "layerwise and 1 to 8 refiner blocks");
    return ST_OK;
}

/* Krea2Transformer2DModel's config: the class defaults (krea/Krea-2-Raw's), then the file's values. in_channels is the
 * pipeline's packing of 2 x 2 latent patches; another timestep width or rope_theta is refused by name. */
static st_status krea2_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t in = 64, hd = 128, heads = 48, text_hidden = 2560, axes[3] = {32, 48, 48};
    mc->depth = 28, mc->kv_heads = 12, mc->ffn_dim = 16384, mc->text_layers = 12, mc->text_heads = 20;
    mc->text_kv_heads = 20, mc->text_ffn = 6912, mc->text_blocks = 2, mc->refiner_depth = 2, mc->norm_eps = 1e-5;
    const json_key keys[] = {{"in_channels", &in}, {"num_layers", &mc->depth}, {"attention_head_dim", &hd},
                             {"num_attention_heads", &heads}, {"num_key_value_heads", &mc->kv_heads},
                             {"intermediate_size", &mc->ffn_dim}, {"text_hidden_dim", &text_hidden},
                             {"num_text_layers", &mc->text_layers}, {"text_num_attention_heads", &mc->text_heads},
                             {"text_num_key_value_heads", &mc->text_kv_heads},
                             {"text_intermediate_size", &mc->text_ffn}, {"num_layerwise_text_blocks", &mc->text_blocks},
                             {"num_refiner_text_blocks", &mc->refiner_depth}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_axes(j, file, "axes_dims_rope", 3, axes);
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    if (!st) st = json_fixed(j, file, "rope_theta", 1000.0, "Krea 2 (its published config's)");
    if (!st) st = json_fixed(j, file, "timestep_embed_dim", 256, "Krea 2");
    if (st) return st;
    if (in % 4 || heads < 1 || mc->text_layers < 1)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: in_channels %lld, num_attention_heads %lld, num_text_layers %lld; "
                       "segtrain reads Krea 2's packing (in_channels 4 C) with at least 1 head and 1 text layer",
                       file, (long long)in, (long long)heads, (long long)mc->text_layers);
    mc->channels = in / 4, mc->patch = 2, mc->patch_t = 1, mc->heads = heads, mc->hidden = hd * heads;
    mc->text_dim = mc->text_layers * text_hidden, mc->pooled_dim = 0, mc->guidance_embeds = false;
    mc->single_depth = 0;
    set_rope_axes(mc, axes, 3);
    return ST_OK;
}

const family_desc krea2_desc = {
    .name = "krea2", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK,
    .st = {{.name = "krea2", .title = "Krea 2", .diffusers = "Krea2Transformer2DModel", .flavours = "raw|turbo",
            .built = "raw:krea2|turbo:krea2", .fallback = "raw", .example = "krea2.peft-lora.json",
            .tiny = "krea2-tiny"}},
    .mask = MASK_EMPTY_ONE,
    .blocks_words = &(const blocks_words){"%lld + %lld text fusion blocks, %lld joint blocks",
                                          {offsetof(model_config, text_blocks), offsetof(model_config, refiner_depth),
                                           offsetof(model_config, depth)}},
    FAMILY_PRESETS(presets), .preset = krea2_preset,
    .rope_axes = family_rope_axes_wide, .readers = {{"Krea2Transformer2DModel", krea2_from_json}},
    .fields = F_FFN | F_NORM_EPS | F_KV_HEADS | F_TEXT_FUSION | F_TEXT_BLOCKS, .check = krea2_check,
    .ops = &(const model_family){.create = kr_create, .impl_size = sizeof(kr_model), .forward = kr_forward,
                                 .backward = kr_backward, .release = kr_release, .inits = kr_inits},
    .swap_blocks = {"transformer_blocks"},
};
