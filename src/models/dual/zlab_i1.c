/* ZLab I1 (docs/FAMILIES.md): SimpleTuner's ZlabI1Transformer2DModel (simpletuner/helpers/models/zlab_i1), which has
 * no diffusers class. Its weights are the class's state_dict; SimpleTuner calls it with the latents, the caption's
 * encoder states and their mask (the timestep it ignores), and trains it to x0 - noise: the prediction is the output
 * negated.
 *
 * - x_embedder (a Conv2d, read as patchify + linear) plus pos_embed: the checkpoint's learned table on its own
 *   input_size grid, else the class's sine-cosine table of the grid (column in the first half, row in the second, each
 *   at position k 256 / (its pixels)).
 * - text_encoder_adapter: connector_in, then two pre-norm layers (zlab_i1_block.c's block with one stream) over the
 *   caption's rows, all of them, unmasked; run beside the blocks, kept whole.
 * - in_blocks, mid_block, out_blocks: i1DiTBlocks (zlab_i1_block.c) with U-ViT's long skips (models/core/skips.h),
 *   one sequence whose state is the image's rows then the text's; an out-block merges each stream with its skip by
 *   skip_linear_image and skip_linear_text. Rotary embedding of 3 axes (time, row, column) by interleaved pairs: a
 *   caption token k at (k, 0, 0) (padding at 0), an image token at (caption length, row s, column s'), s = 256 / the
 *   image's pixel rows (columns), theta 10000; the text's padding keys masked.
 * - final_layer: RMSNorm, then linear, in DiT's patch order.
 * The timestep embedder, the null caption and the rotary tables are loaded and saved as they are, frozen: training
 * never reads them. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/skips.h"
#include "models/core/attn_side.h"
#include "models/core/joint_final.h"
#include "models/dual/zlab_i1.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZL_THETA 10000.0
#define ZL_PIXELS 8   /* the class's pixels per latent pixel, in its position scales */
#define ZL_BASE 256.0 /* ... and the image size they are scaled to */

typedef struct zl_model {
    skip_block *sb;
    zl_block *blocks, adapter[2];
    block adapter_blk[2];
    block_saved *adapter_sv[2];
    float *adapter_out[2];
    lin_layer connector_in;
    int x_w, x_b, pos;
    joint_final fin;
    /* a step's */
    float *patches, *text_in, *txt0, *len, *keep, *kb, *rope, *sincos;
    attn_mask mask;
    const attn_mask *maskp;
} zl_model;

static zl_model *zl_of(const model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static const block_kind zl_skip_kind = {
    SKIP_BLOCK_KIND("zlab_i1"), .ffn_split = true, .softmax_attention = true, .keeps_attention_output = true};

/* The frozen tensors training never reads: t_embedder, and the rotary tables (the class's buffers as parameters) */
static void register_frozen(param_set *s, const model_config *c, const char *which)
{
    const int64_t D = c->hidden, hw = c->sample_size / c->patch;
    char n[PARAM_NAME_MAX];
    if (!strcmp(which, "t_embedder")) {
        param_add(s, "t_embedder.linear1.weight", 2, (int64_t[]){D, DIT_FREQ_DIM}, false);
        param_add(s, "t_embedder.linear1.bias", 1, (int64_t[]){D}, false);
        param_add(s, "t_embedder.linear2.weight", 2, (int64_t[]){D, D}, false);
        param_add(s, "t_embedder.linear2.bias", 1, (int64_t[]){D}, false);
        return;
    }
    const int64_t len[3] = {c->text_tokens + 1, hw, hw};
    for (int t = 0; t < 2; t++)
        for (int a = 0; a < 3; a++) {
            snprintf(n, sizeof n, "rope_embedder.%s_tables.%d", t ? "sin" : "cos", a);
            param_add(s, n, 2, (int64_t[]){len[a], c->rope_axes[a] / 2}, false);
        }
}

static void register_adapter(model *m, zl_model *d, param_set *s)
{
    const model_config *c = &m->cfg;
    const bool full = !c->lora_rank;
    param_add(s, "text_encoder_adapter.learnable_null_caption", 3, (int64_t[]){1, c->text_tokens, c->text_dim}, false);
    d->connector_in = lin_register(s, "text_encoder_adapter.connector_in", c->text_dim, c->hidden, true, 0, 0, full);
    model_config ca = *c; /* SimpleTuner's LoRA targets reach the adapter's feed-forwards, not its attentions */
    ca.lora_attention = false;
    for (int i = 0; i < 2; i++) {
        d->adapter[i] = (zl_block){.m = m, .streams = 1, .ffn = c->ffn_dim};
        zl_block_register(s, &d->adapter[i], "text_encoder_adapter", &zl_adapter_names[i], &ca);
        d->adapter_blk[i] = (block){.kind = &zl_block_kind, .self = &d->adapter[i], .index = i};
    }
}

static st_status register_blocks(model *m, zl_model *d, param_set *s)
{
    const model_config *c = &m->cfg;
    const int depth = (int)c->depth;
    d->sb = model_seq_blocks(m, 0, "blocks", depth, &zl_skip_kind, sizeof *d->sb);
    d->blocks = d->sb ? model_alloc(m, (size_t)depth, sizeof *d->blocks) : NULL;
    if (!d->blocks) return st_host_oom("%d ZLab I1 blocks", depth);
    m->seq_sample[0] = (m->shape.tokens + m->shape.text) * c->hidden;
    for (int i = 0; i < depth; i++) {
        const skip_role role = skip_role_of(i, depth);
        char prefix[32];
        skip_module_name(i, depth, prefix, sizeof prefix);
        d->sb[i] = (skip_block){.kind = &zl_block_kind, .inner = &d->blocks[i], .m = m, .role = role,
                                .skips = skip_count(i, depth), .ranges = 2};
        for (int r = 0; role == SKIP_OUT && r < 2; r++) /* not among SimpleTuner's LoRA targets */
            d->sb[i].merge[r] = block_linear(s, prefix, r ? "skip_linear_text" : "skip_linear_image", 2 * c->hidden,
                                             c->hidden, true, 0, c);
        d->blocks[i] = (zl_block){.m = m, .streams = 2, .sandwich = true, .ffn = c->ffn_dim, .rope = &d->rope,
                                  .mask = &d->maskp, .keep = &d->keep};
        zl_block_register(s, &d->blocks[i], prefix, &zl_block_names, c);
    }
    return ST_OK;
}

static st_status zl_create(model *m)
{
    const model_config *c = &m->cfg;
    zl_model *d = m->impl;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, hw = c->sample_size / c->patch;
    /* in the order of the class's state_dict */
    d->pos = param_add(s, "pos_embed", 3, (int64_t[]){1, hw * hw, D}, full);
    d->x_w = param_add(s, "x_embedder.proj.weight", 4, (int64_t[]){D, c->channels, c->patch, c->patch}, full);
    d->x_b = param_add(s, "x_embedder.proj.bias", 1, (int64_t[]){D}, full);
    register_frozen(s, c, "t_embedder");
    register_adapter(m, d, s);
    register_frozen(s, c, "rope_embedder");
    st_status st = register_blocks(m, d, s);
    if (st) return st;
    d->fin = (joint_final){.rms = true, .eps = ZL_EPS, .negate = true, .order = PATCH_DIT, .rows = m->shape.tokens,
                           .mod = {.w = -1}, .table = -1};
    d->fin.norm = param_add(s, "final_layer.norm_final.scale", 1, (int64_t[]){D}, full);
    d->fin.out = lin_register(s, "final_layer.linear", D, model_patch_dim(c), true,
                              c->lora_attention || c->lora_mlp ? c->lora_rank : 0, (float)c->lora_alpha, full);
    return ST_OK;
}

/* ---- a step ---- */

/* the grid is the checkpoint's: pos_embed is its table */
static bool on_grid(const model_config *c)
{
    return grid_rows(c) == c->sample_size / c->patch && grid_cols(c) == c->sample_size / c->patch;
}

/* A position k along an edge of n patches, as the class makes it in float32: k 256 / (n patch 8) */
static float edge_pos(const model_config *c, int64_t k, int64_t n)
{
    return (float)k * (float)(ZL_BASE / (double)(n * c->patch * ZL_PIXELS));
}

/* _get_rectangular_pos_embed: token (r, q) the sin-cos of its column's position in the first half, its row's in the
 * second, each half sines then cosines of frequencies 10000^(-j / (D/4)) (in double, rounded once) */
static void sincos_fill(const model_config *c, float *t)
{
    const int64_t rows = grid_rows(c), cols = grid_cols(c), D = c->hidden, q = D / 4;
    for (int64_t k = 0; k < rows * cols; k++)
        for (int half = 0; half < 2; half++) {
            const double pos = half ? edge_pos(c, k / cols, rows) : edge_pos(c, k % cols, cols);
            float *row = t + k * D + half * 2 * q;
            for (int64_t j = 0; j < q; j++) {
                const double arg = pos / pow(10000.0, (double)j / (double)q);
                row[j] = (float)sin(arg);
                row[q + j] = (float)cos(arg);
            }
        }
}

/* Each sample's caption length, text keep mask, key mask and rotary table over its joint rows [image; text] (ids:
 * (S, 3); a host loop's), and off the checkpoint's grid the sine-cosine table */
static st_status positions_run(model *m, const float *cond, float *ids)
{
    zl_model *d = zl_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = T + L, hd = c->hidden / c->heads;
    const int64_t rows = grid_rows(c), cols = grid_cols(c);
    for (int64_t b = 0; b < B; b++) {
        float n = 0;
        const st_status st = model_caption_length(m, cond, b, &n);
        if (st) return st;
        d->len[b] = n;
        for (int64_t i = 0; i < T; i++)
            ids[i * 3] = n, ids[i * 3 + 1] = edge_pos(c, i / cols, rows), ids[i * 3 + 2] = edge_pos(c, i % cols, cols);
        for (int64_t j = 0; j < L; j++) {
            const bool token = (float)j < n;
            ids[(T + j) * 3] = token ? (float)j : 0.0f, ids[(T + j) * 3 + 1] = ids[(T + j) * 3 + 2] = 0;
            d->keep[b * L + j] = token ? 1.0f : 0.0f;
        }
        rope_table(d->rope + b * S * hd, ids, S, 3, c->rope_axes, ZL_THETA);
        for (int64_t k = 0; k < S; k++) d->kb[b * S + k] = k < T || (float)(k - T) < n ? 0.0f : -INFINITY;
    }
    if (d->sincos) sincos_fill(c, d->sincos);
    return ST_OK;
}

static st_status positions(model *m, const float *cond)
{
    zl_model *d = zl_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = T + L, hd = c->hidden / c->heads;
    st_status st = ST_OK;
    model_hold(m, &st, &d->len, B, "zlab.caption_length", false);
    model_hold(m, &st, &d->keep, B * L, "zlab.text_mask", false);
    model_hold(m, &st, &d->kb, B * S, "zlab.key_mask", false);
    model_hold(m, &st, &d->rope, B * S * hd, "zlab.rope", false);
    if (!on_grid(c)) model_hold(m, &st, &d->sincos, T * c->hidden, "zlab.pos_embed", false);
    if (!st) st = model_host_loop(m, d->len, positions_run, cond, S * 3, "zlab.position_ids");
    d->mask = (attn_mask){.key_bias = d->kb, .batch_stride = S};
    d->maskp = &d->mask;
    return st;
}

/* The text adapter's two layers from txt0, kept whole for their backward; the last one's output into txt */
static st_status adapter_forward(model *m, zl_model *d, float *txt)
{
    block_state x = {.n = 1, .t = {d->txt0}};
    st_status st = ST_OK;
    for (int i = 0; i < 2 && !st; i++) {
        block_state y = {0};
        st = zl_block_kind.forward(&d->adapter_blk[i], &x, &y, KEEP_ALL, NULL, &d->adapter_sv[i]);
        d->adapter_out[i] = y.t[0];
        x = y;
    }
    if (st) return st;
    const int64_t n = m->shape.batch * m->shape.text * m->shape.hidden;
    copy_rows(txt, n, d->adapter_out[1], n, 1, n);
    pool_free(m->pool, d->adapter_out[1]); /* no backward reads it */
    d->adapter_out[1] = NULL;
    return ST_OK;
}

/* The first state: the image's patches embedded with their positions, then the text's rows out of the adapter */
static st_status zl_embed(model *m, const float *x, const float *timesteps, const float *cond, bool train, float **x0)
{
    zl_model *d = zl_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, P = model_patch_dim(c);
    const int64_t K = model_cond_len(c), Dt = c->text_dim;
    st_status st = positions(m, cond);
    model_hold(m, &st, &d->patches, B * T * P, "zlab.patches", false);
    model_hold(m, &st, &d->text_in, B * L * Dt, "zlab.caption", false);
    model_hold(m, &st, &d->txt0, B * L * D, "zlab.connector_in", false);
    float *s0 = *x0 = model_take(m, &st, B * (T + L) * D, "zlab.tokens", false);
    if (st) return st;
    const patch_shape ps = model_patches(m);
    patchify_forward(d->patches, x, &ps);
    linear_forward(s0, d->patches, PW(d->x_w), PW(d->x_b), B * T, P, D);
    add_row(s0, d->sincos ? d->sincos : PW(d->pos), B, T * D);
    copy_rows(d->text_in, L * Dt, cond, K, B, L * Dt);
    st = lin_forward(m->params, m->pool, &d->connector_in, d->txt0, d->text_in, B * L);
    return st ? st : adapter_forward(m, d, s0 + B * T * D);
}

static st_status zl_embed_backward(model *m, scratch *k, block_state *grad)
{
    zl_model *d = zl_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, P = model_patch_dim(c);
    float *dimg = grad->t[0];
    block_state g = {.n = 1, .t = {dimg + B * T * D}};
    st_status st = ST_OK;
    for (int i = 1; i >= 0 && !st; i--) {
        const block_state in = {.n = 1, .t = {i ? d->adapter_out[0] : d->txt0}};
        st = zl_block_kind.backward(&d->adapter_blk[i], &in, d->adapter_sv[i], &g);
        zl_block_kind.release(&d->adapter_blk[i], d->adapter_sv[i]);
        d->adapter_sv[i] = NULL;
    }
    if (!st) st = lin_backward(m->params, m->pool, &d->connector_in, NULL, g.t[0], d->text_in, B * L);
    if (st) return st;
    if (!d->sincos && PG(d->pos))
        for (int64_t b = 0; b < B; b++) add_to(PG(d->pos), dimg + b * T * D, T * D);
    if (PG(d->x_w)) linear_backward(NULL, PG(d->x_w), PG(d->x_b), dimg, d->patches, PW(d->x_w), B * T, P, D);
    return ST_OK;
}

static st_status zl_head(model *m, bool train, const float **pred)
{
    zl_model *d = zl_of(m);
    st_status st = joint_final_forward(m, &d->fin, NULL, train);
    if (!st) *pred = d->fin.pred;
    return st;
}

/* The final layer back into the image rows of a new dL/d(last) (the text's rows reach nothing: zero) */
static st_status zl_head_backward(model *m, const float *dpred, scratch *k, float **dx)
{
    zl_model *d = zl_of(m);
    st_status st = ST_OK;
    state_free(m->pool, &m->step.last);
    *dx = model_take(m, &st, m->seq[0].state_numel[0], "zlab.dstate", true);
    return st ? st : joint_final_backward(m, &d->fin, k, dpred, NULL, NULL, *dx);
}

static void zl_release(model *m)
{
    zl_model *d = zl_of(m);
    for (int i = 0; i < 2; i++) {
        zl_block_kind.release(&d->adapter_blk[i], d->adapter_sv[i]);
        pool_free(m->pool, d->adapter_out[i]);
        d->adapter_sv[i] = NULL, d->adapter_out[i] = NULL;
    }
    joint_final_release(&d->fin);
    d->maskp = NULL;
}

/* segtrain's own initialisation, for training from scratch: the norms at 1, the positions and frozen tables
 * N(0, 0.02), xavier linears elsewhere */
static const init_rule zl_inits[] = {{INIT_ONE, "scale$"}, {INIT_NORMAL, "pos_embed|_tables.|t_embedder|null_caption"},
                                     {0}};

static const model_chain zl_chain = {.embed = zl_embed, .embed_backward = zl_embed_backward, .head = zl_head,
                                     .head_backward = zl_head_backward};

/* ---- the family's descriptor (family.h) ---- */

static void zlab_blocks(const model_config *mc, char *buf, size_t n)
{
    snprintf(buf, n, "%lld + 1 + %lld dual-stream blocks with long skips, 2 adapter layers", (long long)(mc->depth / 2),
             (long long)(mc->depth / 2));
}

static const family_preset presets[] = {
    /* i1-3B (zlab-princeton/i1-3B, the class defaults): 29 blocks (14 in, mid, 14 out) of 28 heads x 72, the FLUX.2
     * VAE's 32 channels in 2 x 2 patches of a 128 latent (1024 px), T5Gemma 2B's 2304-wide states at 256 tokens. The
     * tiny one is the fixture's. */
    {"zlab-i1-tiny", 5, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"zlab-i1-3b", 29, 2016, 28, 2, 32, 128, 10, 0, 256, 2304, 0, false, false, 0, 0},
};

/* the class's feed-forward: int(2/3 int(D mlp_ratio)) */
static int64_t ffn_of(int64_t D, double mlp_ratio)
{
    return (int64_t)(2.0 / 3.0 * (double)(int64_t)((double)D * mlp_ratio));
}

static void zlab_preset(model_config *mc, const char *name, bool tiny)
{
    mc->ffn_dim = ffn_of(mc->hidden, tiny ? 2.0 : 4.0), mc->sample_size = mc->height, mc->text_tokens = mc->text_len;
}

/* _default_rope_axes_dims: half the head (even) for the time, the rest split evenly (even) between row and column */
static void zlab_rope_axes(model_config *mc)
{
    const int64_t hd = mc->hidden / mc->heads, t = hd / 2 - (hd / 2) % 2, rest = hd - t;
    int64_t r = rest / 2, q = rest - r;
    if (r % 2) r--, q++;
    if (q % 2) q--, r++;
    mc->rope_axes[0] = t, mc->rope_axes[1] = r, mc->rope_axes[2] = q, mc->rope_axes[3] = 0;
}

static st_status zlab_check(const model_config *mc)
{
    const int64_t hd = mc->hidden / mc->heads;
    if (mc->depth < 3 || mc->depth % 2 == 0 || mc->depth / 2 + 1 > STATE_MAX)
        return st_fail(ST_ERR_INVALID, "depth: %lld blocks; zlab_i1 needs an odd number from 3 to %d (in-blocks, a mid "
                       "block, as many out-blocks; at most %d skips at once)", (long long)mc->depth,
                       2 * STATE_MAX - 1, STATE_MAX - 1);
    if (hd % 2 || mc->rope_axes[1] < 2 || mc->rope_axes[2] < 2 || mc->sample_size < mc->patch ||
        mc->sample_size % mc->patch || mc->text_len > mc->text_tokens || mc->ffn_dim < 1 || mc->pooled_dim ||
        mc->frames != 1)
        return st_fail(ST_ERR_INVALID, "head width %lld, input_size %lld (patch %lld), %lld caption tokens of "
                       "text_num_tokens %lld, feed-forward %lld, pooled_projection_dim %lld, %lld frames; zlab_i1 has "
                       "an even head of at least 12, input_size a multiple of the patch, at most text_num_tokens "
                       "caption tokens, a feed-forward, no pooled vector, one frame", (long long)hd,
                       (long long)mc->sample_size, (long long)mc->patch, (long long)mc->text_len,
                       (long long)mc->text_tokens, (long long)mc->ffn_dim, (long long)mc->pooled_dim,
                       (long long)mc->frames);
    return ST_OK;
}

/* ZlabI1Transformer2DModel's config: the class defaults, then the file's values; an image_resolution other than
 * input_size's pixels, and another rope_theta, are refused by name. */
static st_status zlab_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t input = 128, resolution = 1024, heads = 28, hd = -1;
    double ratio = 4.0;
    mc->patch = 2, mc->channels = 32, mc->hidden = 2016, mc->depth = 29, mc->text_dim = 2304, mc->text_tokens = 256;
    const json_key keys[] = {{"input_size", &input}, {"image_resolution", &resolution}, {"patch_size", &mc->patch},
                             {"in_channels", &mc->channels}, {"hidden_size", &mc->hidden}, {"depth", &mc->depth},
                             {"num_heads", &heads}, {"head_dim", &hd}, {"text_embed_dim", &mc->text_dim},
                             {"text_num_tokens", &mc->text_tokens}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_fixed(j, file, "rope_theta", ZL_THETA, "ZLab I1 (the class default)");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "mlp_ratio");
    if (!st && r && !cJSON_IsNull(r)) {
        if (!cJSON_IsNumber(r) || !(r->valuedouble > 0))
            return st_fail(ST_ERR_FORMAT, "%s: mlp_ratio is not a positive number", file);
        ratio = r->valuedouble;
    }
    if (st) return st;
    if (heads < 1 || mc->hidden % heads || (hd >= 0 && hd != mc->hidden / heads) || resolution != input * ZL_PIXELS)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: hidden_size %lld, num_heads %lld, head_dim %lld, input_size %lld, "
                       "image_resolution %lld; ZLab I1 has hidden_size num_heads x head_dim, and image_resolution 8 x "
                       "input_size (its positions' scale)", file, (long long)mc->hidden, (long long)heads,
                       (long long)hd, (long long)input, (long long)resolution);
    mc->heads = heads, mc->sample_size = input, mc->patch_t = 1, mc->ffn_dim = ffn_of(mc->hidden, ratio);
    mc->pooled_dim = 0, mc->guidance_embeds = false, mc->single_depth = 0;
    zlab_rope_axes(mc);
    return ST_OK;
}

const family_desc zlab_i1_desc = {
    .name = "zlab_i1", .topology = TOPO_DUAL, .traits = TR_TEXT | TR_TEXT_MASK, .block_module = skip_module_name,
    .swap_blocks = {"blocks"}, /* SimpleTuner's combined_blocks: in_blocks, mid_block, out_blocks */
    .st = {{.name = "zlab_i1", .title = "zlab i1", .diffusers = "ZlabI1Transformer2DModel",
            .flavours = "3b", .built = "3b:zlab-i1-3b", .fallback = "3b", .example = "zlab-i1.peft-lora.json",
            .tiny = "zlab-i1-tiny"}},
    .describe_blocks = zlab_blocks, FAMILY_PRESETS(presets), .preset = zlab_preset, .rope_axes = zlab_rope_axes,
    .readers = {{"ZlabI1Transformer2DModel", zlab_from_json}}, .fields = F_FFN, .check = zlab_check,
    .ops = &(const model_family){.create = zl_create, .impl_size = sizeof(zl_model), .release = zl_release,
                                 .chain = &zl_chain, .inits = zl_inits},
};
