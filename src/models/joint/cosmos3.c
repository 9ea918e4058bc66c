/* Cosmos 3 (docs/FAMILIES.md): diffusers' Cosmos3OmniTransformer, text to image (and video), called as
 * Cosmos3OmniPipeline calls it: one packed sequence a sample, [the prompt's token ids (the understanding stream,
 * causal); the latents' patches (the generation stream)], through layers of mot_block.c's block.
 *
 * - The prompt: embed_tokens of its ids (the conditioning holds them as floats, text_dim 1, with their mask); its
 *   padding rows come after its tokens, hidden from the generated rows by a key bias (the causal prompt rows never
 *   see them).
 * - The latents: 2 x 2 patches, features (row, column, channel) as the class's einsum packs them (PATCH_DIT), through
 *   proj_in, plus the time embedding: time_embedder(time_proj(t)) with t = 1000 sigma x timestep_scale (0.001), the
 *   pipeline's per-token timesteps, every frame noisy.
 * - The mask: a prompt row sees the prompt rows up to it, a generated row every prompt token and every generated row.
 * - Rotary: interleaved MRoPE (sections rope_axes_dim) on rotate-half pairs over the whole head at rope_theta: a
 *   prompt row j at (j, j, j), a latent patch of frame u, row r, column c at (len + margin + u, r, c), len the
 *   sample's prompt length and margin unified_3d_mrope_temporal_modality_margin (the pipeline's layout at its
 *   base_fps, with its spatial ids reset).
 * - The output: norm_moe_gen of the generated rows, proj_out, unpatchified: the velocity noise - x0 (the pipeline's
 *   UniPC flow prediction), segtrain's target as it is.
 * - Loaded and saved as they are, never trained: lm_head and the prompt stream's final `norm` (text generation's),
 *   and the sound and action heads of the omni checkpoints (sound_gen, action_gen). */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/cosmos3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define C3_THETA 5000000.0
#define C3_MARGIN 15000.0
#define C3_TIME_SCALE 0.001f

typedef struct c3_model {
    mot_block *blocks;
    temb te;
    lin_layer proj_in, lm_head, audio_in, audio_out;
    joint_final fin; /* norm_moe_gen, proj_out */
    int embed, norm_und, audio_embed, action_in[2], action_out[2], action_embed;
    float *rope, *kb, *seg;
    attn_mask mask;
    const attn_mask *maskp;
    /* a step */
    float *ids, *tin, *patches;
} c3_model;

static c3_model *c3_of(const model *m) { return m->impl; }
static int64_t rows_of(const model *m) { return m->shape.text + m->shape.tokens; }
static float *pw(const model *m, int i) { return param_at(m->params, i)->w; }
static float *pg(const model *m, int i) { return param_at(m->params, i)->g; }

static st_status c3_create(model *m)
{
    const model_config *c = &m->cfg;
    c3_model *d = m->impl;
    d->blocks = model_seq_blocks(m, 0, "layers", (int)c->depth, &mot_block_kind, sizeof *d->blocks);
    if (!d->blocks) return st_host_oom("the Cosmos 3 model");
    m->seq_sample[0] = rows_of(m) * m->shape.hidden;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = model_patch_dim(c);
    /* in the order of Cosmos3OmniTransformer's state_dict */
    d->embed = param_add(s, "embed_tokens.weight", 2, (int64_t[]){c->text_vocab, D}, full);
    char name[64];
    for (int i = 0; i < c->depth; i++) {
        mot_block *b = &d->blocks[i];
        *b = (mot_block){.m = m, .rows = rows_of(m), .split = m->shape.text, .ffn = c->ffn_dim,
                         .kv_heads = c->kv_heads, .head_dim = c->head_dim, .eps = (float)c->norm_eps, .rope = &d->rope,
                         .mask = &d->maskp};
        snprintf(name, sizeof name, "layers.%d", i);
        mot_block_register(s, b, name, c);
    }
    d->norm_und = param_add(s, "norm.weight", 1, (int64_t[]){D}, false);
    d->fin = (joint_final){.rms = true, .eps = (float)c->norm_eps, .order = PATCH_DIT, .rows = rows_of(m),
                           .at = m->shape.text};
    d->fin.norm = param_add(s, "norm_moe_gen.weight", 1, (int64_t[]){D}, full);
    d->lm_head = lin_register(s, "lm_head", D, c->text_vocab, false, 0, 0, false);
    d->proj_in = lin_register(s, "proj_in", P, D, true, 0, 0, full);
    d->fin.out = lin_register(s, "proj_out", D, P, true, 0, 0, full);
    temb_register(s, &d->te, "time_embedder.linear_1", "time_embedder.linear_2", DIT_FREQ_DIM, D, full);
    if (c->action_dim) { /* DomainAwareLinear: one (in x out) matrix and bias a domain, as embedding rows */
        const int64_t A = c->action_dim, K = c->action_domains;
        d->action_in[0] = param_add(s, "action_proj_in.fc.weight", 2, (int64_t[]){K, D * A}, false);
        d->action_in[1] = param_add(s, "action_proj_in.bias.weight", 2, (int64_t[]){K, D}, false);
        d->action_out[0] = param_add(s, "action_proj_out.fc.weight", 2, (int64_t[]){K, A * D}, false);
        d->action_out[1] = param_add(s, "action_proj_out.bias.weight", 2, (int64_t[]){K, A}, false);
        d->action_embed = param_add(s, "action_modality_embed", 1, (int64_t[]){D}, false);
    }
    if (c->audio_channels) {
        d->audio_in = lin_register(s, "audio_proj_in", c->audio_channels, D, true, 0, 0, false);
        d->audio_out = lin_register(s, "audio_proj_out", D, c->audio_channels, true, 0, 0, false);
        d->audio_embed = param_add(s, "audio_modality_embed", 1, (int64_t[]){D}, false);
    }
    return ST_OK;
}

static void c3_release(model *m)
{
    c3_model *d = c3_of(m);
    joint_final_release(&d->fin);
    d->maskp = NULL;
}

/* Each sample's prompt length and ids, positions (pos: (S, 3)), rotary table and mask (a host loop's) */
static st_status prompt_positions(model *m, const float *cond, float *pos)
{
    c3_model *d = c3_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = rows_of(m), hd = c->head_dim, K = model_cond_len(c);
    const int64_t n = grid_cols(c), grid = grid_rows(c) * n;
    st_status st = ST_OK;
    for (int64_t b = 0; !st && b < B; b++) {
        float len = 0.0f;
        if ((st = model_caption_length(m, cond, b, &len))) break;
        if (len < 1.0f) {
            st = st_fail(ST_ERR_INVALID, "the batch's sample %lld: its prompt has no tokens; Cosmos 3's prompt always "
                         "holds its chat template's", (long long)b);
            break;
        }
        copy_rows(d->ids + b * L, L, cond + b * K, K, 1, L);
        for (int64_t r = 0; r < S; r++) {
            const int64_t v = r - L, u = v / grid, i = v % grid;
            pos[r * 3] = r < L ? (float)r : (float)((double)len + C3_MARGIN + (double)u);
            pos[r * 3 + 1] = (float)(r < L ? r : i / n);
            pos[r * 3 + 2] = (float)(r < L ? r : i % n);
            d->kb[b * S + r] = r < L && r >= (int64_t)len ? -INFINITY : 0.0f;
            d->seg[b * S + r] = r < L ? -1.0f - (float)r : 1.0f; /* each prompt row alone; the generated rows one */
        }
        rope_table_mrope(d->rope + b * S * hd, pos, S, hd, c->rope_axes, C3_THETA);
    }
    return st;
}

/* Each sample's prompt ids, rotary table and mask (the prompt's padding keys hidden) */
static st_status positions(model *m, const float *cond)
{
    c3_model *d = c3_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, S = rows_of(m), hd = c->head_dim;
    st_status st = ST_OK;
    model_hold(m, &st, &d->ids, B * L, "cosmos3.ids", false);
    model_hold(m, &st, &d->rope, B * S * hd, "cosmos3.rope", false);
    model_hold(m, &st, &d->kb, B * S, "cosmos3.key_mask", false);
    model_hold(m, &st, &d->seg, B * S, "cosmos3.segments", false);
    if (st) return st;
    st = model_host_loop(m, d->rope, prompt_positions, cond, S * 3, "cosmos3.position_ids");
    d->mask = (attn_mask){.key_bias = d->kb, .segment = d->seg, .causal = true, .batch_stride = S};
    d->maskp = &d->mask;
    return st;
}

/* The first state: the prompt's embedded ids, then the patches through proj_in plus the time embedding */
static st_status embed(model *m, const float *x, const float *timesteps, float *x0)
{
    c3_model *d = c3_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = L + T, D = c->hidden;
    const int64_t P = model_patch_dim(c);
    st_status st = ST_OK;
    copy_rows(d->tin, B, timesteps, B, 1, B); /* the pipeline's 1000 sigma times timestep_scale, in float */
    scale_by(d->tin, B, C3_TIME_SCALE);
    timestep_embedding(d->te.freq, d->tin, B, DIT_FREQ_DIM, 10000.0);
    if ((st = temb_mlp_forward(m, &d->te))) return st;
    const patch_shape ps = model_patches(m);
    zero_bytes(d->patches, (size_t)(B * T * P) * sizeof(float));
    unpatchify_backward(d->patches, x, &ps, PATCH_DIT); /* patchify, features (row, column, channel) */
    for (int64_t b = 0; !st && b < B; b++) {
        float *rows = x0 + b * S * D, *gen = rows + L * D;
        if (embedding_forward(rows, pw(m, d->embed), d->ids + b * L, L, c->text_vocab, D)) {
            char why[256];
            snprintf(why, sizeof why, "%s", st_error());
            st = st_fail(ST_ERR_INVALID, "the batch's sample %lld: %s; Cosmos 3's conditioning is the prompt's token "
                         "ids (whole numbers below vocab_size %lld), not a text encoder's states", (long long)b, why,
                         (long long)c->text_vocab);
        }
        if (!st) st = lin_forward(m->params, m->pool, &d->proj_in, gen, d->patches + b * T * P, T);
        if (!st) add_row(gen, d->te.c + b * D, T, D);
    }
    return st;
}

static st_status final_out(model *m, bool train, const float **pred)
{
    c3_model *d = c3_of(m);
    const st_status st = joint_final_forward(m, &d->fin, NULL, train);
    if (!st) *pred = d->fin.pred;
    return st;
}

static st_status embed_step(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            float **x0)
{
    (void)train;
    c3_model *d = c3_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden;
    st_status st = ST_OK;
    model_hold(m, &st, &d->tin, B, "cosmos3.t", false);
    model_hold(m, &st, &d->patches, B * T * model_patch_dim(c), "cosmos3.patches", false);
    temb_take_path(m, &d->te, &st);
    *x0 = model_take(m, &st, B * rows_of(m) * D, "cosmos3.rows", false);
    if (!st) st = positions(m, cond);
    if (!st) st = embed(m, x, timesteps, *x0);
    return st;
}

/* The output back to dL/d(the rows), *dx */
static st_status head_backward(model *m, const float *dpred, scratch *k, float **dx)
{
    return joint_final_head_backward(m, &c3_of(m)->fin, k, dpred, NULL, NULL, "cosmos3.drows", dx);
}

static st_status embed_backward(model *m, scratch *k, block_state *grad)
{
    c3_model *d = c3_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = L + T, D = c->hidden;
    const int64_t P = model_patch_dim(c);
    float *dc = scratch_take_zero(k, B * D, MEM_WORKSPACE, "cosmos3.dtemb");
    st_status st = k->status;
    for (int64_t b = 0; !st && b < B; b++) {
        const float *g = grad->t[0] + b * S * D;
        float *embed_g = pg(m, d->embed);
        if (embed_g) embedding_backward(embed_g, g, d->ids + b * L, L, D);
        st = lin_backward(m->params, m->pool, &d->proj_in, NULL, g + L * D, d->patches + b * T * P, T);
        for (int64_t r = 0; !st && r < T; r++) add_to(dc + b * D, g + (L + r) * D, D);
    }
    state_free(m->pool, grad);
    if (!st) st = temb_backward(m, &d->te, dc);
    return st;
}

static const model_chain c3_chain = {.embed = embed_step, .embed_backward = embed_backward, .head = final_out,
                                     .head_backward = head_backward};

/* segtrain's own initialisation, for training from scratch: the norms at 1, the output at zero, the time embedder
 * and the token table N(0, 0.02), xavier linears elsewhere */
static const init_rule c3_inits[] = {
    {INIT_ZERO, "proj_out"}, {INIT_ONE, "norm&.weight$"}, {INIT_NORMAL, "time_embedder|embed_tokens"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

/* the words' ids inside its chat turn, then their mask */
static void cosmos3_condition(const model_config *mc, const char *caption, float *cond)
{
    const char *const parts[] = {"<|im_start|> user", caption ? caption : "",
                                 "<|im_end|> <|im_start|> assistant <|endoftext|> <|start_of_generation|>"};
    family_ids_condition(mc, parts, cond);
}

static const family_preset presets[] = {
    /* Cosmos3OmniTransformer's defaults, which are Cosmos3-Nano's 16 B (36 layers a stream of 32 heads x 128 with 8
     * key-value heads over 4096, Qwen3's 151936 tokens), 48 latent channels through the 16x VAE, 1024 px, 512 prompt
     * tokens (segtrain's choice) */
    {"cosmos3-tiny", 2, 32, 2, 2, 4, 8, 10, 0, 6, 1, 0, false, false, 0, 0},
    {"cosmos3-nano", 36, 4096, 32, 2, 48, 64, 10, 0, 512, 1, 0, false, false, 0, 0},
};

static void cosmos3_preset(model_config *mc, const char *name, bool tiny)
{
    /* the tiny one is the fixture's: grouped queries, MRoPE (2, 2, 2) of 8, a sound head loaded untrained */
    mc->head_dim = tiny ? 16 : 128, mc->kv_heads = tiny ? 1 : 8, mc->ffn_dim = tiny ? 64 : 12288;
    mc->text_vocab = tiny ? 64 : 151936, mc->norm_eps = 1e-6, mc->audio_channels = tiny ? 8 : 0;
    mc->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
    const int64_t sections[4] = {tiny ? 2 : 24, tiny ? 2 : 20, tiny ? 2 : 20, 0};
    memcpy(mc->rope_axes, sections, sizeof sections);
}

static st_status cosmos3_check(const model_config *mc)
{
    const int64_t hd = mc->head_dim;
    if (mc->kv_heads < 1 || mc->heads % mc->kv_heads || hd < 2 || hd > 1024 || hd % 2 || mc->ffn_dim < 1 ||
        mc->ffn_dim > (1 << 20) || !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->text_dim != 1 ||
        mc->text_vocab >= (1 << 24) || mc->rope_axes[0] < 0 || mc->rope_axes[1] < 0 || mc->rope_axes[2] < 0 ||
        3 * mc->rope_axes[1] > hd / 2 + 1 || 3 * mc->rope_axes[2] > hd / 2 || mc->rope_axes[3] ||
        mc->audio_channels < 0 || mc->audio_channels > (1 << 16) || mc->action_dim < 0 || mc->action_dim > (1 << 16) ||
        mc->action_domains < (mc->action_dim ? 1 : 0) || mc->action_domains > (1 << 16) || mc->patch_t != 1 ||
        mc->out_channels || mc->pooled_dim || mc->guidance_embeds)
        return family_refuse(mc, GROUP_ACTION, "cosmos3 takes a divisor of the heads, an even head width of 2 to 1024, 1 "
                             "to 2^20, an eps in (0, 1), token ids (text_dim 1) below 2^24, sections whose interleaved "
                             "frequencies lie within the head (3 sections[1] <= head/2 + 1, 3 sections[2] <= head/2), "
                             "and heads of at most 65536 (an action head over at least 1 domain)");
    return ST_OK;
}

/* Cosmos3OmniTransformer's config: the class defaults (Cosmos3-Nano's), then the file's values; rope_axes_dim, or
 * rope_scaling's mrope_section without it. What segtrain does not build is refused by name: attention biases, the
 * relu2 (Nemotron) stacks, other q/k norm arrangements, another rope_theta, margin or timestep_scale, spatial ids not
 * reset, a patch_latent_dim other than the patch's. The sound and action heads are read to be loaded untrained. */
static st_status cosmos3_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t patch_dim = -1, sections[3] = {24, 20, 20};
    bool sound = false, action = false;
    mc->head_dim = 128, mc->hidden = 4096, mc->ffn_dim = 12288, mc->channels = 48, mc->patch = 2, mc->heads = 32;
    mc->depth = 36, mc->kv_heads = 8, mc->text_vocab = 151936, mc->norm_eps = 1e-6, mc->audio_channels = 0;
    mc->action_dim = 0, mc->action_domains = 32;
    const json_key keys[] = {{"head_dim", &mc->head_dim}, {"hidden_size", &mc->hidden},
                             {"intermediate_size", &mc->ffn_dim}, {"latent_channel", &mc->channels},
                             {"latent_patch_size", &mc->patch}, {"num_attention_heads", &mc->heads},
                             {"num_hidden_layers", &mc->depth}, {"num_key_value_heads", &mc->kv_heads},
                             {"patch_latent_dim", &patch_dim}, {"vocab_size", &mc->text_vocab},
                             {"sound_dim", &mc->audio_channels}, {"action_dim", &mc->action_dim},
                             {"num_embodiment_domains", &mc->action_domains}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!st && cJSON_IsObject(scaling)) st = json_axes(scaling, file, "mrope_section", 3, sections);
    if (!st) st = json_axes(j, file, "rope_axes_dim", 3, sections);
    if (!st) st = json_eps(j, file, "rms_norm_eps", &mc->norm_eps);
    if (!st) st = json_fixed(j, file, "rope_theta", 5000000.0, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed(j, file, "unified_3d_mrope_temporal_modality_margin", 15000, "Cosmos 3 (the default)");
    if (!st) st = json_fixed(j, file, "timestep_scale", 0.001, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed(j, file, "attention_dropout", 0, "training");
    if (!st) st = json_fixed_bool(j, file, "attention_bias", false, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "qk_norm_for_text", true, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "use_und_k_norm_for_gen", false, "Cosmos 3 (the class default)");
    if (!st) st = json_fixed_bool(j, file, "unified_3d_mrope_reset_spatial_ids", true, "Cosmos 3 (the default)");
    if (!st) st = json_fixed_text(j, file, "hidden_act", "silu", "Cosmos 3 (its Qwen3 stacks; relu2's Nemotron "
                                  "stacks are not built)");
    sound = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "sound_gen"));
    action = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "action_gen"));
    if (st) return st;
    if (mc->patch < 1 || (patch_dim != -1 && patch_dim != mc->patch * mc->patch * mc->channels) ||
        (sound && mc->audio_channels < 1) || (action && mc->action_dim < 1))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: latent_patch_size %lld, patch_latent_dim %lld for %lld latent "
                       "channels, sound_gen %d with sound_dim %lld, action_gen %d with action_dim %lld; segtrain reads "
                       "a patch of at least 1 whose features are patch^2 latent channels, and each head's width when "
                       "it is on", file, (long long)mc->patch, (long long)patch_dim, (long long)mc->channels,
                       (int)sound, (long long)mc->audio_channels, (int)action, (long long)mc->action_dim);
    if (!sound) mc->audio_channels = 0;
    if (!action) mc->action_dim = 0, mc->action_domains = 0;
    mc->text_dim = 1, mc->patch_t = 1, mc->pooled_dim = 0, mc->guidance_embeds = false, mc->single_depth = 0;
    set_rope_axes(mc, sections, 3);
    return ST_OK;
}

/* Cosmos3VLTextMoTDecoderLayer's self_attn (Cosmos3PackedMoTAttention: both pathways' projections) and its two
 * Cosmos3VLTextMLPs, mlp (the prompt's) and mlp_moe_gen (the latents') */
static const lyco_class cosmos3_lycoris_classes[] = {
    {"Cosmos3PackedMoTAttention", "self_attn"}, {"Cosmos3VLTextMLP", "mlp mlp_moe_gen"}, {NULL, NULL}};

const family_desc cosmos3_desc = {
    .name = "cosmos3", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK | TR_VIDEO,
    .st = {{.name = "cosmos3", .title = "Cosmos 3", .diffusers = "Cosmos3OmniTransformer",
            .flavours = "edge|nano|super|super-i2v|super-t2i", .built = "nano:cosmos3-nano", .fallback = "nano",
            .why = "edge, super and super-t2i are other transformer sizes (4 B and 65 B) whose configs were not at hand "
                   "to verify; give the checkpoint's folder as pretrained_model_name_or_path with flavour nano. "
                   "super-i2v also takes a first frame's latents, which segtrain's conditioning does not carry",
            .example = "cosmos3-image.lycoris-lokr.json", .tiny = "cosmos3-tiny"}},
    .condition = cosmos3_condition,
    .blocks_words = &(const blocks_words){"%lld mixture-of-transformers layers, heads %lld wide, %lld kv heads",
                                          {offsetof(model_config, depth), offsetof(model_config, head_dim),
                                           offsetof(model_config, kv_heads)}},
    FAMILY_PRESETS(presets),
    .preset = cosmos3_preset, .readers = {{"Cosmos3OmniTransformer", cosmos3_from_json}},
    .fields = F_FFN | F_NORM_EPS | F_KV_HEADS | F_HEAD_DIM | F_ACTION | F_AUDIO_CHANNELS, .check = cosmos3_check,
    .ops = &(const model_family){.create = c3_create, .impl_size = sizeof(c3_model), .release = c3_release,
                                 .chain = &c3_chain, .inits = c3_inits},
    .swap_blocks = {"layers"},
    .lycoris_classes = cosmos3_lycoris_classes,
};
