/* OmniGen (docs/FAMILIES.md): diffusers' OmniGenTransformer2DModel, called as SimpleTuner's omnigen calls it: the
 * model's time is 1 - t (its flow runs from noise at 0 to data at 1) and the prediction is minus its output.
 *
 * - One block sequence, `layers`, of Phi-3 blocks (lumina2_block.c in omnigen_style) on the rows per sample
 *   [the prompt's L tokens, the time token, the image's T tokens].
 * - The prompt: embed_tokens' rows of its ids (a padding position reads row 0 and is never attended); the row of
 *   pad_token_id gets no gradient, as nn.Embedding's padding_idx.
 * - The time token: time_token (linear_1, SiLU, linear_2) of Timesteps(256) of the time, cosines first.
 * - The image: patch_embedding.output_image_proj (a Conv2d of p x p patches) plus the centre crop of the fixed
 *   sine-cosine table patch_embedding.pos_embed. input_image_proj embeds an editing task's input images: text-to-
 *   image training never reads it, so it is loaded and saved as it is, frozen.
 * - The mask, as OmniGenCollator makes it: the prompt and the time token causal, each image row seeing the prompt, the
 *   time token and every image row; padding keys hidden. SimpleTuner pads prompts on the left and segtrain on the
 *   right: the attended rows and their positions are the same.
 * - Rotary positions by rotate-half pairs with Phi-3's su scaling: frequency i is 10000^(-2i / hd) / factor_i, the
 *   long factors once the batch's longest sequence passes original_max_position_embeddings, and cos and sin are
 *   scaled by sqrt(1 + ln(max / original) / ln(original)). As diffusers does (the [0] in
 *   OmniGenSuScaledRotaryEmbedding), every sample turns by the first sample's positions: prompt token j at j, the
 *   time token at n, image token i at n + 1 + i (n: its tokens), each row of another sample taking the position at
 *   its left-padded index; with prompts of different lengths the others' are off, as in diffusers.
 * - norm (RMSNorm) of the image rows, then norm_out: LayerNorm (no affine, 1e-6) times 1 + scale plus shift,
 *   (shift, scale) = norm_out.linear(SiLU(t_embedder(time))), and proj_out, unpatchified (row, column, channel). */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/lumina2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OMNIGEN_FREQ 256   /* time_step_dim */
#define OMNIGEN_THETA 10000.0

typedef struct og_model {
    lumina_joint j;
    temb tok, t;           /* time_token (a row of the sequence), t_embedder (the final layer's) */
    joint_final fin;
    int embed, x_w, x_b, pos, norm;
    /* a step */
    float *ids, *seg, *tin, *patches, *raw; /* raw: the image rows before norm (B T, D) */
    float *dc, *dtok; /* backward's dL/d(t_embedder's output) and dL/d(the time token) */
    op_state norm_stats;
} og_model;

static og_model *og_of(const model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static int64_t rows_of(const model *m) { return m->shape.text + 1 + m->shape.tokens; }

/* The image rows through norm: each sample's last T rows */
static st_status final_rows(model *m, float *img)
{
    og_model *d = og_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = c->hidden, N = B * T;
    model_rows_gather(m, d->raw, m->step.last.t[0], rows_of(m), L + 1, T);
    return rmsnorm_forward(m->pool, img, d->raw, PW(d->norm), N, D, (float)c->norm_eps, &d->norm_stats);
}

static st_status og_create(model *m)
{
    const model_config *c = &m->cfg;
    og_model *d = m->impl;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, C = c->channels, p = c->patch, P = model_patch_dim(c), E = c->pos_embed_max;
    /* in the order of OmniGenTransformer2DModel's state_dict */
    d->x_w = param_add(s, "patch_embedding.output_image_proj.weight", 4, (int64_t[]){D, C, p, p}, full);
    d->x_b = param_add(s, "patch_embedding.output_image_proj.bias", 1, (int64_t[]){D}, full);
    param_add(s, "patch_embedding.input_image_proj.weight", 4, (int64_t[]){D, C, p, p}, false);
    param_add(s, "patch_embedding.input_image_proj.bias", 1, (int64_t[]){D}, false);
    d->pos = param_add_fixed(s, "patch_embedding.pos_embed", 3, (int64_t[]){1, E * E, D});
    temb_register(s, &d->tok, "time_token.linear_1", "time_token.linear_2", OMNIGEN_FREQ, D, full);
    temb_register(s, &d->t, "t_embedder.linear_1", "t_embedder.linear_2", OMNIGEN_FREQ, D, full);
    d->embed = param_add(s, "embed_tokens.weight", 2, (int64_t[]){c->text_vocab, D}, full);
    st_status st = lumina_joint_create(m, &d->j, &omnigen_style, rows_of(m), 0);
    if (st) return st;
    d->norm = param_add(s, "norm.weight", 1, (int64_t[]){D}, full);
    d->fin = (joint_final){.mod = lin_register(s, "norm_out.linear", D, 2 * D, true, 0, 0, full), .n_mod = 2,
                           .shift_first = true, .negate = true, .eps = 1e-6f, .order = PATCH_DIT, .rows_of = final_rows};
    d->fin.out = joint_out_register(s, "proj_out", D, P, full);
    return ST_OK;
}

static void og_fill_fixed(model *m) { sincos_table_fill(&m->cfg, PW(og_of(m)->pos)); }

static void og_release(model *m)
{
    og_model *d = og_of(m);
    joint_final_release(&d->fin);
    op_state_release(&d->norm_stats);
}

/* The rotary table of positions pos (S), su-scaled: (S, hd / 2, (cos, sin)) */
static void su_table(const model *m, float *tab, const float *pos, int64_t S, bool long_factors)
{
    const model_config *c = &m->cfg;
    const int64_t hd = c->hidden / c->heads, half = hd / 2;
    const double ratio = (double)c->rope_max / (double)c->rope_original;
    const double scale = ratio <= 1.0 ? 1.0 : sqrt(1.0 + log(ratio) / log((double)c->rope_original));
    const float *factor = long_factors ? c->rope_long : c->rope_short;
    for (int64_t i = 0; i < half; i++) {
        const double inv = 1.0 / ((double)factor[i] * pow(OMNIGEN_THETA, (double)(2 * i) / (double)hd));
        for (int64_t r = 0; r < S; r++) {
            const double a = (double)pos[r] * inv;
            tab[(r * half + i) * 2] = (float)(cos(a) * scale);
            tab[(r * half + i) * 2 + 1] = (float)(sin(a) * scale);
        }
    }
}

/* Per sample: its prompt's length, ids, positions (pos: S), rotary table and mask (a host loop's) */
static st_status prompt_positions(model *m, const float *cond, float *pos)
{
    og_model *d = og_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = L + 1 + T, hd = c->hidden / c->heads;
    const int64_t K = model_cond_len(c);
    st_status st = ST_OK;
    int64_t longest = 0;
    for (int64_t b = 0; !st && b < B; b++) {
        float n = 0;
        if ((st = model_caption_length(m, cond, b, &n))) break;
        if (n < 1)
            st = st_fail(ST_ERR_INVALID, "the batch's sample %lld: its prompt has no tokens; OmniGen's prompt holds at "
                         "least its instruction template's", (long long)b);
        d->j.len[b] = n, longest = (int64_t)n > longest ? (int64_t)n : longest;
        for (int64_t l = 0; l < L; l++) d->ids[b * L + l] = l < (int64_t)n ? cond[b * K + l] : 0.0f;
    }
    /* torch.max(position_ids) + 1 over the batch picks the factors; sample 0's positions turn every sample */
    const bool long_factors = longest + T + 1 > c->rope_original;
    for (int64_t b = 0; !st && b < B; b++) {
        const int64_t n = (int64_t)d->j.len[b], n0 = (int64_t)d->j.len[0];
        for (int64_t r = 0; r < S; r++) {
            const int64_t at = r < n ? r + n0 - n : r < L ? 0 : n0 + r - L;
            pos[r] = (float)(at > 0 ? at : 0);
            d->j.kb[b * S + r] = r >= n && r < L ? -INFINITY : 0.0f;
            d->seg[b * S + r] = r <= L ? -1.0f - (float)r : 1.0f; /* each prompt row alone; the image rows one */
        }
        su_table(m, d->j.rope + b * S * hd, pos, S, long_factors);
    }
    return st;
}

/* The rows: the prompt's embeddings, the time token, the image's patches plus their positions, per sample */
static st_status embed(model *m, const float *x, const float *timesteps, const float *cond, bool train, float **x0)
{
    og_model *d = og_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = L + 1 + T, D = c->hidden;
    const int64_t P = model_patch_dim(c), gh = grid_rows(c), gw = grid_cols(c), E = c->pos_embed_max;
    const int64_t top = (E - gh) / 2, left = (E - gw) / 2;
    st_status st = ST_OK;
    model_hold(m, &st, &d->patches, B * T * P, "omnigen.patches", false);
    model_hold(m, &st, &d->tin, B, "omnigen.time", false);
    *x0 = model_take(m, &st, B * S * D, "omnigen.rows", false);
    temb_take(m, &d->t, &st, train);
    temb_take_path(m, &d->tok, &st);
    model_hold(m, &st, &d->ids, B * L, "omnigen.ids", false);
    model_hold(m, &st, &d->seg, B * S, "omnigen.segments", false);
    if (!st) st = lumina_joint_positions(m, &d->j, prompt_positions, cond, S, d->seg);
    float *crop = NULL; /* the table's centre gh x gw, as OmniGenPatchEmbed._cropped_pos_embed takes it */
    if (!st) st = pool_alloc(m->pool, (size_t)(T * D) * sizeof(float), MEM_WORKSPACE, "omnigen.pos_embed (cropped)",
                             (void **)&crop);
    if (st) return st;
    copy_rows(crop, gw * D, PW(d->pos) + (top * E + left) * D, E * D, gh, gw * D);
    const patch_shape ps = model_patches(m);
    patchify_forward(d->patches, x, &ps); /* a Conv weight's feature order */
    for (int64_t b = 0; !st && b < B; b++) {
        float *rows = *x0 + b * S * D, *img = rows + (L + 1) * D;
        if (embedding_forward(rows, PW(d->embed), d->ids + b * L, L, c->text_vocab, D)) {
            char why[256];
            snprintf(why, sizeof why, "%s", st_error());
            st = st_fail(ST_ERR_INVALID, "the batch's sample %lld: %s; OmniGen's conditioning is the prompt's token "
                         "ids (whole numbers below vocab_size %lld), not a text encoder's states", (long long)b, why,
                         (long long)c->text_vocab);
        }
        linear_forward(img, d->patches + b * T * P, PW(d->x_w), PW(d->x_b), T, P, D);
        add_to(img, crop, T * D);
    }
    pool_free(m->pool, crop);
    if (st) return st;
    time_one_minus_sigma(d->tin, timesteps, B);
    if ((st = temb_forward(m, &d->tok, d->tin)) || (st = temb_forward(m, &d->t, d->tin))) return st;
    model_rows_scatter(m, *x0, d->tok.c, S, L, 1); /* the time token */
    silu_forward(m->ctx.cs, d->t.c, B * D);
    return ST_OK;
}

static st_status final_out(model *m, bool train, const float **pred)
{
    og_model *d = og_of(m);
    st_status st = ST_OK;
    model_hold(m, &st, &d->raw, m->shape.batch * m->shape.tokens * m->cfg.hidden, "omnigen.image_rows", false);
    if (!st && !(st = joint_final_forward(m, &d->fin, m->ctx.cs, train))) *pred = d->fin.pred;
    return st;
}

/* dL/d(embed_tokens) from the prompt rows' gradients, none to pad_token_id's row (padding_idx) */
static void embed_backward(model *m, const float *g, const float *ids)
{
    const model_config *c = &m->cfg;
    embedding_backward_padded(PG(og_of(m)->embed), g, ids, m->shape.text, c->hidden, c->text_pad);
}

/* The final layer and norm back to dL/d(joint rows), *dx */
static st_status head_backward(model *m, const float *dpred, scratch *k, float **dx)
{
    og_model *d = og_of(m);
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = L + 1 + T, D = m->cfg.hidden;
    const int64_t N = B * T;
    float *dimg = scratch_take_zero(k, N * D, MEM_WORKSPACE, "omnigen.dnorm");
    float *draw = scratch_take_zero(k, N * D, MEM_WORKSPACE, "omnigen.dimage_rows");
    d->dc = scratch_take_zero(k, B * D, MEM_WORKSPACE, "omnigen.dtemb");
    d->dtok = scratch_take_zero(k, B * D, MEM_WORKSPACE, "omnigen.dtime_token");
    st_status st = k->status;
    if (st || (st = joint_final_backward(m, &d->fin, k, dpred, m->ctx.cs, m->ctx.dcs, dimg))) return st;
    rmsnorm_backward(draw, PG(d->norm), dimg, d->raw, PW(d->norm), N, D, &d->norm_stats);
    return model_rows_grad(m, draw, S, L + 1, "omnigen.drows", dx);
}

static st_status og_embed_backward(model *m, scratch *k, block_state *grad)
{
    (void)k;
    og_model *d = og_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, S = L + 1 + T, D = c->hidden;
    const int64_t P = model_patch_dim(c);
    for (int64_t b = 0; b < B; b++) {
        const float *g = grad->t[0] + b * S * D;
        embed_backward(m, g, d->ids + b * L);
        copy_rows(d->dtok + b * D, D, g + L * D, D, 1, D); /* the time token's row */
        linear_backward(NULL, PG(d->x_w), PG(d->x_b), g + (L + 1) * D, d->patches + b * T * P, PW(d->x_w), T, P, D);
    }
    state_free(m->pool, grad);
    st_status st = temb_backward(m, &d->tok, d->dtok);
    if (!st) st = temb_silu_backward(m, &d->t, d->dc, m->ctx.dcs); /* the final layer's modulation */
    return st;
}

static const model_chain og_chain = {.embed = embed, .embed_backward = og_embed_backward, .head = final_out,
                                     .head_backward = head_backward};

/* segtrain's own initialisation, for training from scratch: the norms at 1, the output's modulation and projection
 * at zero, the time paths and the token table N(0, 0.02), xavier linears elsewhere */
static const init_rule og_inits[] = {
    {INIT_ZERO, "norm_out|proj_out"}, {INIT_ONE, "layernorm|^norm.weight$"},
    {INIT_NORMAL, "time_token|t_embedder|embed_tokens"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

/* the words' ids inside its instruction, then their mask */
static void omnigen_condition(const model_config *mc, const char *caption, float *cond)
{
    const char *const parts[] = {"<|user|> Generate an image according to the following instructions",
                                 caption ? caption : "", "<|end|> <|assistant|> <|diffusion|>"};
    family_ids_condition(mc, parts, cond);
}

static const family_preset presets[] = {
    /* OmniGen (Shitao/OmniGen-v1-diffusers's transformer): Phi-3 mini's 32 layers of 32 heads x 96 on the prompt's
     * token ids (its 32064-row table, text_dim 1: an id a token), SDXL's VAE's 4 channels in 2 x 2 patches, the 2D
     * sine-cosine table 192 wide; 128 prompt tokens is segtrain's choice (SimpleTuner pads a batch to its longest).
     * The rest in its preset hook below; the real rotary factors come with a checkpoint's config.json. */
    {"omnigen-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 1, 0, false, false, 0, 16},
    {"omnigen-v1", 32, 3072, 32, 2, 4, 128, 10, 0, 128, 1, 0, false, false, 0, 192},
};

static void omnigen_preset(model_config *mc, const char *name, bool tiny)
{
    /* the tiny one's is the fixture's: GQA, and past its original context */
    mc->kv_heads = tiny ? 1 : 32, mc->ffn_dim = tiny ? 64 : 8192, mc->norm_eps = 1e-5;
    mc->text_vocab = tiny ? 64 : 32064, mc->text_pad = tiny ? 5 : 32000, mc->sample_size = 64 * mc->patch;
    mc->rope_original = tiny ? 20 : 4096, mc->rope_max = tiny ? 160 : 131072;
    for (int64_t f = 0; f < mc->hidden / mc->heads / 2; f++)
        mc->rope_short[f] = tiny ? 1.0f + 0.125f * (float)f : 1.0f,
        mc->rope_long[f] = tiny ? 1.0f + 0.5f * (float)f : 1.0f;
}

static st_status omnigen_check(const model_config *mc)
{
    st_status st = joint_check(mc, false);
    if (st) return st;
    const int64_t hd = mc->hidden / mc->heads;
    bool factors = true;
    for (int64_t i = 0; i < hd / 2 && i < MODEL_ROPE_FACTORS; i++)
        factors &= mc->rope_short[i] > 0 && mc->rope_short[i] < 1e6f && mc->rope_long[i] > 0 && mc->rope_long[i] < 1e6f;
    if (mc->text_dim != 1 || hd % 2 || hd > 2 * MODEL_ROPE_FACTORS || !factors || mc->rope_original < 1 ||
        mc->rope_max < 1 || mc->rope_original > (1 << 30) || mc->rope_max > (1 << 30) || mc->text_pad < 0 ||
        mc->text_vocab >= (1 << 24) || (grid_rows(mc) > mc->pos_embed_max || grid_cols(mc) > mc->pos_embed_max) || mc->sample_size < mc->patch)
        return family_refuse(mc, GROUP_ROPE_SCALED, "omnigen takes token ids (text_dim 1), an even head width of at "
                             "most 128 with positive rotary factors, 1 to 2^30 positions, a pad token of at least 0, "
                             "fewer than 2^24 ids (they travel as floats), and a table covering the patch grid");
    return ST_OK;
}

/* rope_scaling's factor list `key` into f: n positive numbers, as the su-scaled rotary embedding divides its n
 * frequencies by them */
static st_status json_factors(const cJSON *scaling, const char *file, const char *key, int64_t n, float *f)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(scaling, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return st_fail(ST_ERR_FORMAT, "%s: rope_scaling.%s is not a list of %lld factors (head width / 2)", file, key,
                       (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, (int)i);
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0 && x->valuedouble < 1e6))
            return st_fail(ST_ERR_FORMAT, "%s: rope_scaling.%s[%lld] is not a number in (0, 10^6)", file, key,
                           (long long)i);
        f[i] = (float)x->valuedouble; /* a float32 tensor where the class uses them */
    }
    return ST_OK;
}

/* OmniGenTransformer2DModel's config: the class defaults (Shitao/OmniGen-v1-diffusers's), then the file's values;
 * rope_scaling (which the class cannot be built without) gives the rotary factors. The timestep path's fixed options
 * and another rope_base are refused by name. */
static st_status omnigen_from_json(const cJSON *j, const char *file, model_config *mc)
{
    mc->channels = 4, mc->patch = 2, mc->hidden = 3072, mc->norm_eps = 1e-5, mc->heads = 32, mc->kv_heads = 32;
    mc->ffn_dim = 8192, mc->depth = 32, mc->text_pad = 32000, mc->text_vocab = 32064, mc->rope_max = 131072;
    mc->rope_original = 4096, mc->pos_embed_max = 192;
    const json_key keys[] = {{"in_channels", &mc->channels}, {"patch_size", &mc->patch}, {"hidden_size", &mc->hidden},
                             {"num_attention_heads", &mc->heads}, {"num_key_value_heads", &mc->kv_heads},
                             {"intermediate_size", &mc->ffn_dim}, {"num_layers", &mc->depth},
                             {"pad_token_id", &mc->text_pad}, {"vocab_size", &mc->text_vocab},
                             {"max_position_embeddings", &mc->rope_max},
                             {"original_max_position_embeddings", &mc->rope_original},
                             {"pos_embed_max_size", &mc->pos_embed_max}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_eps(j, file, "rms_norm_eps", &mc->norm_eps);
    if (!st) st = json_fixed(j, file, "rope_base", 10000, "OmniGen (its published config's)");
    if (!st) st = json_fixed(j, file, "time_step_dim", 256, "OmniGen");
    if (!st) st = json_fixed_bool(j, file, "flip_sin_to_cos", true, "OmniGen");
    if (!st) st = json_fixed(j, file, "downscale_freq_shift", 0, "OmniGen");
    if (!st) st = json_fixed_text(j, file, "timestep_activation_fn", "silu", "OmniGen");
    if (st) return st;
    if (mc->heads < 1 || mc->hidden % mc->heads || (mc->hidden / mc->heads) % 2 ||
        mc->hidden / mc->heads > 2 * MODEL_ROPE_FACTORS)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: hidden_size %lld over num_attention_heads %lld; segtrain builds "
                       "OmniGen with an even head width of at most %d", file, (long long)mc->hidden,
                       (long long)mc->heads, 2 * MODEL_ROPE_FACTORS);
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!cJSON_IsObject(scaling))
        return st_fail(ST_ERR_FORMAT, "%s: rope_scaling is not an object with short_factor and long_factor (the class "
                       "is not built without them)", file);
    const int64_t n = mc->hidden / mc->heads / 2;
    if (!st) st = json_factors(scaling, file, "short_factor", n, mc->rope_short);
    if (!st) st = json_factors(scaling, file, "long_factor", n, mc->rope_long);
    mc->text_dim = 1, mc->sample_size = 64 * mc->patch; /* OmniGenPatchEmbed's base_size 64, in latent pixels */
    mc->patch_t = 1, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false, mc->refiner_depth = 0;
    return st;
}

/* OmniGenBlock's self_attn is diffusers' Attention; its mlp an OmniGenFeedForward, not a FeedForward (which the
 * package then finds nowhere, as here) */
static const lyco_class omnigen_lycoris_classes[] = {
    {"Attention", "self_attn"}, {"OmniGenFeedForward", "mlp"}, {"FeedForward", ""}, {NULL, NULL}};

const family_desc omnigen_desc = {
    .name = "omnigen", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK | TR_BATCH_PADDED,
    .st = {{.name = "omnigen", .title = "OmniGen", .diffusers = "OmniGenTransformer2DModel", .flavours = "v1",
            .built = "v1:omnigen-v1", .fallback = "v1", .example = "omnigen.lycoris-lokr.json",
            .tiny = "omnigen-tiny"}},
    .condition = omnigen_condition, FAMILY_PRESETS(presets), .preset = omnigen_preset,
    .readers = {{"OmniGenTransformer2DModel", omnigen_from_json}},
    .fields = F_FFN | F_NORM_EPS | F_KV_HEADS | F_ROPE_SCALED, .check = omnigen_check,
    .ops = &(const model_family){.create = og_create, .impl_size = sizeof(og_model), .fill_fixed = og_fill_fixed,
                                 .release = og_release, .chain = &og_chain, .inits = og_inits},
    .swap_blocks = {"layers"},
    .lycoris_classes = omnigen_lycoris_classes,
};
