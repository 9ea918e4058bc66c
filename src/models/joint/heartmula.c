/* HeartMuLa (docs/FAMILIES.md): SimpleTuner's own HeartMuLaModel (helpers/models/heartmula/modeling_heartmula.py),
 * an autoregressive language model over audio codec tokens, as HeartMuLa.model_predict calls it in training:
 *
 * - A sample is S rows of K + 1 tokens (tokens (S, K + 1) as collate_audio_tokens lays them out: the K codebooks of
 *   an audio frame, then a text token), with tokens_mask (S, K + 1) and audio_frame_mask (S) in its conditioning.
 * - Row s's input is sum_k mask[s][k] audio_embeddings[tokens[s][k] + k V] + mask[s][K] text_embeddings[tokens[s][K]].
 * - The backbone, sequence 0 (`backbone.layers`, LlamaModel's decoder layers: lumina2_block.c in llama_style), over
 *   the S rows, causal, padding keys (rows whose mask is all zero) hidden, positions 0 .. S - 1 on Llama 3's scaled
 *   rotary frequencies; then backbone.norm.
 * - Codebook 0's logits of frame t + 1 from row t (codebook0_head, t < S - 1).
 * - The decoder, sequence 1 (`decoder.layers`), over each frame t < S - 1 by itself: K rows, projection of [the
 *   backbone's row t, audio_embeddings of frame t + 1's codebooks 0 .. K - 2], causal within the frame, positions
 *   0 .. K - 1; then decoder.norm, and codebook q's logits (q = 1 .. K - 1) from its row q through audio_head[q - 1].
 *
 * The prediction is the logits, codebook-major: (K, B, S - 1, V), codebook 0's then the decoder's, as the heads make
 * them (model_token_logits); the token objective (src/train/tokens.c) takes them to SimpleTuner's loss. The Llama
 * token tables (backbone/decoder.embed_tokens) are not held: the class passes inputs_embeds and HeartMuLa's
 * checkpoint has none. unconditional_text_embedding and muq_linear are generation's: loaded and saved, frozen. */
#include "models/core/attn_side.h"
#include "models/core/family.h"
#include "models/joint/lumina2.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define HM_THETA 500000.0 /* LlamaConfig's rope_theta */
#define HM_ROPE_FACTOR 32.0 /* rope_scaling: llama3, factor 32, low_freq_factor 1, high_freq_factor 4 */
#define HM_LOW 1.0
#define HM_HIGH 4.0
#define HM_TAU 6.283185307179586 /* 2 pi */

typedef struct hm_model {
    lumina_block *backbone, *decoder;
    int text_emb, audio_emb, audio_head, bnorm, dnorm;
    lin_layer proj, head0;
    /* a step */
    const float *tokens;
    float *brope, *drope, *kb, *seg, *dseg; /* rotary tables (B, rows, head_dim); key bias and segments (B, S), (K) */
    attn_mask bmask, dmask;
    const attn_mask *bmaskp, *dmaskp;
    float *ids, *wts, *dids; /* the input's table rows and weights (K + 1, B S); the decoder's rows (K - 1, B (S - 1)) */
    block_state bout;        /* the backbone's output, backbone.norm's input */
    float *h, *ctx, *draw, *dout, *rest, *logits; /* backbone.norm's output; its rows t < S - 1; the decoder's input
                             before the projection (B (S - 1), K, D); decoder.norm's output; the codebooks' rows
                             (K - 1, B (S - 1), Dd); the logits */
    op_state bstats, dstats;
} hm_model;

static hm_model *hm_of(const model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

typedef struct hm_dims {
    int64_t B, S, K, V, D, Dd, F; /* F: frames with a next frame, B (S - 1) */
} hm_dims;

static hm_dims dims_of(const model *m)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, S = c->frames;
    return (hm_dims){B, S, c->channels - 1, c->classes, c->hidden, c->text_dim, B * (S - 1)};
}

/* ---- Llama 3's rotary table ---- */

/* Frequency i of a head of hd: theta^(-2i / hd), scaled as rope_type llama3 does for a context of `original`
 * positions: wavelengths past original / low_freq_factor divided by factor, those between original / high and it
 * blended */
static double llama3_freq(int64_t i, int64_t hd, int64_t original)
{
    const double f = pow(HM_THETA, -2.0 * (double)i / (double)hd), wl = HM_TAU / f;
    const double low = (double)original / HM_LOW, high = (double)original / HM_HIGH;
    if (wl > low) return f / HM_ROPE_FACTOR;
    if (wl < high) return f;
    const double s = ((double)original / wl - HM_LOW) / (HM_HIGH - HM_LOW);
    return (1.0 - s) * f / HM_ROPE_FACTOR + s * f;
}

/* rows of a table (rows, hd / 2, (cos, sin)), row r at position r mod period */
static void llama3_table(float *t, int64_t rows, int64_t period, int64_t hd, int64_t original)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < hd / 2; i++) {
            const double a = (double)(r % period) * llama3_freq(i, hd, original);
            t[(r * (hd / 2) + i) * 2] = (float)cos(a), t[(r * (hd / 2) + i) * 2 + 1] = (float)sin(a);
        }
}

/* ---- parameters ---- */

/* LlamaModel's decoder layers: lumina2_block.c without modulation or q/k norms, rotate-half pairs, SwiGLU */
static const lumina_style llama_style = {
    {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", NULL, NULL, "mlp.gate_proj",
     "mlp.down_proj", "mlp.up_proj", NULL, NULL, "input_layernorm.weight", NULL, "post_attention_layernorm.weight",
     NULL, NULL, NULL},
    false, false, ROPE_HALF, GLU_SILU, 0, 0, {0}, false, false};

/* One of the two LlamaModels: sequence q, `name`.layers, its blocks over `rows` a sample in groups of `group` */
static lumina_block *llama_create(model *m, int q, const char *name, int64_t n, int64_t rows, int64_t group,
                                  int64_t width, int64_t heads, int64_t kv_heads, int64_t ffn, float *const *rope,
                                  const attn_mask *const *mask)
{
    lumina_block *bl = model_seq_blocks(m, q, name, (int)n, &lumina_block_kind, sizeof *bl);
    if (!bl) return NULL;
    m->seq_sample[q] = rows * width;
    char prefix[64];
    for (int i = 0; i < n; i++) {
        bl[i] = (lumina_block){.m = m, .rows = rows, .attn_rows = group, .width = width, .heads = heads,
                               .kv_heads = kv_heads, .ffn = ffn, .eps = (float)m->cfg.norm_eps, .style = &llama_style,
                               .rope = rope, .mask = mask};
        snprintf(prefix, sizeof prefix, "%s.%d", name, i);
        lumina_block_register(&m->own_params, &bl[i], prefix, &m->cfg);
    }
    return bl;
}

static st_status hm_create(model *m)
{
    hm_model *d = m->impl;
    const model_config *c = &m->cfg;
    const int64_t D = c->hidden, Dd = c->text_dim, K = c->channels - 1, V = c->classes, S = c->frames;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    /* in the order of HeartMuLaModel's state_dict (its Llama token tables aside) */
    d->backbone = llama_create(m, 0, "backbone.layers", c->depth, S, 0, D, c->heads, c->kv_heads, c->ffn_dim,
                               &d->brope, &d->bmaskp);
    if (!d->backbone) return st_host_oom("a model's blocks");
    d->bnorm = param_add(s, "backbone.norm.weight", 1, (int64_t[]){D}, full);
    d->decoder = llama_create(m, 1, "decoder.layers", c->single_depth, (S - 1) * K, K, Dd, c->text_heads,
                              c->text_kv_heads, c->text_ffn, &d->drope, &d->dmaskp);
    if (!d->decoder) return st_host_oom("a model's blocks");
    d->dnorm = param_add(s, "decoder.norm.weight", 1, (int64_t[]){Dd}, full);
    d->text_emb = param_add(s, "text_embeddings.weight", 2, (int64_t[]){c->text_vocab, D}, full);
    d->audio_emb = param_add(s, "audio_embeddings.weight", 2, (int64_t[]){V * K, D}, full);
    param_add(s, "unconditional_text_embedding.weight", 2, (int64_t[]){1, D}, false);
    d->proj = lin_register(s, "projection", D, Dd, false, 0, (float)c->lora_alpha, full);
    d->head0 = lin_register(s, "codebook0_head", D, V, false, 0, (float)c->lora_alpha, full);
    d->audio_head = param_add(s, "audio_head", 3, (int64_t[]){K - 1, Dd, V}, full);
    param_add(s, "muq_linear.weight", 2, (int64_t[]){D, c->image_dim}, false);
    param_add(s, "muq_linear.bias", 1, (int64_t[]){D}, false);
    return ST_OK;
}

/* ---- a step ---- */

/* The step's tables from the tokens and their masks (cond: tokens_mask (S, K + 1), then audio_frame_mask (S), a
 * sample): the input's table rows and weights, the decoder's codebook rows, the key bias and segments, both rotary
 * tables */
static st_status hm_positions(model *m, const float *cond, float *work)
{
    (void)work;
    hm_model *d = hm_of(m);
    const model_config *c = &m->cfg;
    const hm_dims z = dims_of(m);
    const int64_t N = z.B * z.S, C = z.K + 1, hb = c->hidden / c->heads, hd = z.Dd / c->text_heads;
    for (int64_t b = 0; b < z.B; b++)
        for (int64_t s = 0; s < z.S; s++) {
            const float *tok = d->tokens + (b * z.S + s) * C, *mask = cond + b * model_cond_len(c) + s * C;
            float any = 0.0f;
            for (int64_t k = 0; k < C; k++) {
                d->ids[k * N + b * z.S + s] = tok[k] + (k < z.K ? (float)(k * z.V) : 0.0f);
                d->wts[k * N + b * z.S + s] = mask[k], any = mask[k] != 0.0f ? 1.0f : any;
            }
            d->kb[b * z.S + s] = any != 0.0f ? 0.0f : -INFINITY, d->seg[b * z.S + s] = (float)s;
            for (int64_t k = 0; s > 0 && k < z.K - 1; k++) /* frame s's codebook k feeds frame s - 1's decoder */
                d->dids[k * z.F + b * (z.S - 1) + s - 1] = tok[k] + (float)(k * z.V);
        }
    for (int64_t k = 0; k < z.K; k++) d->dseg[k] = (float)k;
    llama3_table(d->brope, z.S, z.S, hb, c->rope_original);
    for (int64_t b = 1; b < z.B; b++) memcpy(d->brope + b * z.S * hb, d->brope, (size_t)(z.S * hb) * sizeof(float));
    llama3_table(d->drope, z.B * (z.S - 1) * z.K, z.K, hd, c->rope_max);
    return ST_OK;
}

/* The backbone's input rows (B S, D): each column's table row times its mask, summed in column order */
static st_status embed(model *m, const float *cond, float **x0)
{
    hm_model *d = hm_of(m);
    const model_config *c = &m->cfg;
    const hm_dims z = dims_of(m);
    const int64_t N = z.B * z.S, C = z.K + 1, hb = c->hidden / c->heads, hd = z.Dd / c->text_heads;
    st_status st = ST_OK;
    model_hold(m, &st, &d->ids, C * N, "heartmula.ids", false);
    model_hold(m, &st, &d->wts, C * N, "heartmula.token_mask", false);
    model_hold(m, &st, &d->dids, (z.K - 1) * z.F, "heartmula.decoder_ids", false);
    model_hold(m, &st, &d->kb, N, "heartmula.key_mask", false);
    model_hold(m, &st, &d->seg, N, "heartmula.segments", false);
    model_hold(m, &st, &d->dseg, z.K, "heartmula.decoder_segments", false);
    model_hold(m, &st, &d->brope, N * hb, "heartmula.rope", false);
    model_hold(m, &st, &d->drope, z.F * z.K * hd, "heartmula.decoder_rope", false);
    *x0 = model_take(m, &st, N * z.D, "heartmula.rows", true);
    float *e = model_take(m, &st, N * z.D, "heartmula.embedding", false);
    if (!st) st = model_host_loop(m, d->ids, hm_positions, cond, 0, "heartmula.positions");
    d->bmask = (attn_mask){.key_bias = d->kb, .segment = d->seg, .causal = true, .batch_stride = z.S};
    d->dmask = (attn_mask){.segment = d->dseg, .causal = true};
    d->bmaskp = &d->bmask, d->dmaskp = &d->dmask;
    for (int64_t k = 0; !st && k < C; k++) {
        st = k < z.K ? embedding_forward(e, PW(d->audio_emb), d->ids + k * N, N, z.K * z.V, z.D)
                     : embedding_forward(e, PW(d->text_emb), d->ids + k * N, N, c->text_vocab, z.D);
        if (!st) row_scale_forward(e, e, d->wts + k * N, N, z.D), add_to(*x0, e, N * z.D);
    }
    pool_free(m->pool, e);
    return st;
}

/* The heads: codebook 0's from the backbone's rows, the decoder over each frame, the other codebooks' from it */
static st_status heads(model *m, bool train, const float **pred)
{
    hm_model *d = hm_of(m);
    const hm_dims z = dims_of(m);
    const int64_t N = z.B * z.S, FK = z.F * z.K;
    st_status st = ST_OK;
    model_hold(m, &st, &d->h, N * z.D, "heartmula.backbone_norm", false);
    model_hold(m, &st, &d->ctx, z.F * z.D, "heartmula.context", false);
    model_hold(m, &st, &d->logits, z.K * z.F * z.V, "heartmula.logits", false);
    if (!st) st = rmsnorm_forward(m->pool, d->h, d->bout.t[0], PW(d->bnorm), N, z.D, (float)m->cfg.norm_eps,
                                  train ? &d->bstats : NULL);
    if (st) return st;
    side_made(m, d->h, N * z.D); /* LlamaRMSNorm's bf16 output under bf16 (one rounding for its x-hat's and w's) */
    copy_rows(d->ctx, (z.S - 1) * z.D, d->h, z.S * z.D, z.B, (z.S - 1) * z.D);
    if ((st = fwd(m, &d->head0, d->logits, d->ctx, z.F))) return st;
    /* the decoder's input: per frame [its backbone row, the next frame's codebooks 0 .. K - 2], projected */
    model_hold(m, &st, &d->draw, FK * z.D, "heartmula.decoder_input", false);
    float *e = model_take(m, &st, z.F * z.D, "heartmula.codebook_embedding", false);
    float *x0 = model_take(m, &st, FK * z.Dd, "heartmula.decoder_rows", false);
    if (!st) copy_rows(d->draw, z.K * z.D, d->ctx, z.D, z.F, z.D);
    for (int64_t k = 0; !st && k < z.K - 1; k++) {
        st = embedding_forward(e, PW(d->audio_emb), d->dids + k * z.F, z.F, z.K * z.V, z.D);
        if (!st) copy_rows(d->draw + (k + 1) * z.D, z.K * z.D, e, z.D, z.F, z.D);
    }
    pool_free(m->pool, e);
    if (!st) st = fwd(m, &d->proj, x0, d->draw, FK);
    if (!st) st = model_seq_forward1(m, 1, &x0, train, NULL);
    pool_free(m->pool, x0);
    model_hold(m, &st, &d->dout, FK * z.Dd, "heartmula.decoder_norm", false);
    model_hold(m, &st, &d->rest, (z.K - 1) * z.F * z.Dd, "heartmula.codebook_rows", false);
    if (!st) st = rmsnorm_forward(m->pool, d->dout, m->step.last.t[0], PW(d->dnorm), FK, z.Dd,
                                  (float)m->cfg.norm_eps, train ? &d->dstats : NULL);
    if (st) return st;
    side_made(m, d->dout, FK * z.Dd);
    for (int64_t q = 1; q < z.K; q++) copy_rows(d->rest + (q - 1) * z.F * z.Dd, z.Dd, d->dout + q * z.Dd, z.K * z.Dd, z.F, z.Dd);
    matmul_forward(d->logits + z.F * z.V, d->rest, PW(d->audio_head), z.K - 1, z.F, z.V, z.Dd, false, false);
    side_made(m, d->logits + z.F * z.V, (z.K - 1) * z.F * z.V); /* the einsum's bf16 logits */
    *pred = d->logits;
    return ST_OK;
}

static st_status hm_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    (void)timesteps;
    hm_model *d = hm_of(m);
    d->tokens = x;
    float *x0 = NULL;
    st_status st = embed(m, cond, &x0);
    if (!st) st = model_seq_forward1(m, 0, &x0, train, &d->bout);
    pool_free(m->pool, x0);
    if (!st) st = heads(m, train, pred);
    return st;
}

/* Back from the logits to dL/d(the decoder's input before the projection), *ddraw */
static st_status heads_backward(model *m, scratch *k, const float *dpred, float *dctx, float **ddraw)
{
    hm_model *d = hm_of(m);
    const hm_dims z = dims_of(m);
    const int64_t FK = z.F * z.K;
    float *drest = scratch_take_zero(k, (z.K - 1) * z.F * z.Dd, MEM_WORKSPACE, "heartmula.dcodebook_rows");
    float *ddout = scratch_take_zero(k, FK * z.Dd, MEM_WORKSPACE, "heartmula.ddecoder_norm");
    *ddraw = scratch_take_zero(k, FK * z.D, MEM_WORKSPACE, "heartmula.ddecoder_input");
    st_status st = k->status;
    block_state g = {.n = 1};
    g.t[0] = model_take(m, &st, FK * z.Dd, "heartmula.ddecoder", true);
    if (!st) st = bwd(m, &d->head0, dctx, dpred, d->ctx, z.F);
    if (st) {
        state_free(m->pool, &g);
        return st;
    }
    matmul_backward(drest, PG(d->audio_head), dpred + z.F * z.V, d->rest, PW(d->audio_head), z.K - 1, z.F, z.V, z.Dd,
                    false, false);
    for (int64_t q = 1; q < z.K; q++)
        copy_rows(ddout + q * z.Dd, z.K * z.Dd, drest + (q - 1) * z.F * z.Dd, z.Dd, z.F, z.Dd);
    rmsnorm_backward(g.t[0], PG(d->dnorm), ddout, m->step.last.t[0], PW(d->dnorm), FK, z.Dd, &d->dstats);
    state_free(m->pool, &m->step.last);
    scratch_drop(k, ddout), scratch_drop(k, drest);
    st = model_seq_backward(m, 1, &g);
    if (!st) st = bwd(m, &d->proj, *ddraw, g.t[0], d->draw, FK);
    state_free(m->pool, &g);
    return st;
}

/* dL/d(a table) from rows' gradients g (n, D) times their weights (NULL: 1), through rows ids; nothing when the table
 * is frozen */
static void table_backward(model *m, int table, float *tmp, const float *g, const float *w, const float *ids, int64_t n)
{
    if (!PG(table)) return;
    if (w) row_scale_forward(tmp, g, w, n, m->cfg.hidden);
    embedding_backward(PG(table), w ? tmp : g, ids, n, m->cfg.hidden);
}

static st_status hm_backward(model *m, const float *dpred)
{
    hm_model *d = hm_of(m);
    const hm_dims z = dims_of(m);
    const int64_t N = z.B * z.S;
    scratch k = {.pool = m->pool};
    float *dctx = scratch_take_zero(&k, z.F * z.D, MEM_WORKSPACE, "heartmula.dcontext");
    float *ddraw = NULL;
    st_status st = k.status ? k.status : heads_backward(m, &k, dpred, dctx, &ddraw);
    float *tmp = scratch_take(&k, N * z.D, MEM_WORKSPACE, "heartmula.drow");
    float *dh = scratch_take_zero(&k, N * z.D, MEM_WORKSPACE, "heartmula.dbackbone_norm");
    block_state grad = {.n = 1};
    if (!st && !(st = k.status)) { /* the frames' backbone rows, and the next frames' codebooks */
        copy_rows(tmp, z.D, ddraw, z.K * z.D, z.F, z.D), add_to(dctx, tmp, z.F * z.D);
        for (int64_t q = 0; q < z.K - 1; q++) {
            copy_rows(tmp, z.D, ddraw + (q + 1) * z.D, z.K * z.D, z.F, z.D);
            table_backward(m, d->audio_emb, NULL, tmp, NULL, d->dids + q * z.F, z.F);
        }
        copy_rows(dh, z.S * z.D, dctx, (z.S - 1) * z.D, z.B, (z.S - 1) * z.D);
        grad.t[0] = model_take(m, &st, N * z.D, "heartmula.dbackbone", true);
    }
    if (!st) {
        rmsnorm_backward(grad.t[0], PG(d->bnorm), dh, d->bout.t[0], PW(d->bnorm), N, z.D, &d->bstats);
        state_free(m->pool, &d->bout);
        st = model_seq_backward(m, 0, &grad);
    }
    for (int64_t c = 0; !st && c <= z.K; c++)
        table_backward(m, c < z.K ? d->audio_emb : d->text_emb, tmp, grad.t[0], d->wts + c * N, d->ids + c * N, N);
    state_free(m->pool, &grad);
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

static void hm_release(model *m)
{
    hm_model *d = hm_of(m);
    state_free(m->pool, &d->bout);
    op_state_release(&d->bstats), op_state_release(&d->dstats);
}

static void hm_set_batch(model *m, int64_t batch)
{
    m->shape.batch = batch;
    for (int q = 0; q < m->n_seq; q++) m->seq[q].state_numel[0] = batch * m->seq_sample[q];
}

/* A tensor name of HeartMuLa's published checkpoint, whose Llamas are torchtune's (attn.q_proj, attn.output_proj,
 * mlp.w1 .. w3, sa_norm.scale, mlp_norm.scale, norm.scale), as the class's: SimpleTuner's from_pretrained maps its
 * backbone.* and decoder.* keys so (_map_llama_key); the class's own names map to themselves */
static void hm_checkpoint_name(const char *tensor, char *name)
{
    static const char *const map[][2] = {
        {".attn.q_proj.", ".self_attn.q_proj."},  {".attn.k_proj.", ".self_attn.k_proj."},
        {".attn.v_proj.", ".self_attn.v_proj."},  {".attn.output_proj.", ".self_attn.o_proj."},
        {".mlp.w1.", ".mlp.gate_proj."},          {".mlp.w2.", ".mlp.down_proj."},
        {".mlp.w3.", ".mlp.up_proj."},            {".sa_norm.scale", ".input_layernorm.weight"},
        {".mlp_norm.scale", ".post_attention_layernorm.weight"}, {".norm.scale", ".norm.weight"}};
    snprintf(name, PARAM_NAME_MAX, "%s", tensor);
    if (strncmp(tensor, "backbone.", 9) && strncmp(tensor, "decoder.", 8)) return;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        char *at = strstr(name, map[i][0]), rest[PARAM_NAME_MAX];
        if (!at) continue;
        snprintf(rest, sizeof rest, "%s", at + strlen(map[i][0]));
        snprintf(at, PARAM_NAME_MAX - (size_t)(at - name), "%s%s", map[i][1], rest);
    }
}

/* segtrain's own initialisation, for training from scratch: norms at 1, the tables N(0, 0.02), xavier linears */
static const init_rule hm_inits[] = {{INIT_ONE, "norm"}, {INIT_NORMAL, "embedding|audio_head"}, {0}};

/* ---- the family's descriptor (family.h) ---- */

/* tokens_mask (S, K + 1) then audio_frame_mask (S) a sample */
static int64_t hm_cond_len(const model_config *mc) { return mc->frames * (mc->channels + 1); }

/* The masks of a sample laid out as collate_audio_tokens lays one out: the caption's words as the prompt's text rows
 * (and one row more, the empty row between tags and lyrics; at least 1 row, at most all but 2), then audio frames to
 * the end (a sample's tokens are its data, in x0) */
static void hm_condition(const model_config *mc, const char *caption, float *cond)
{
    const int64_t S = mc->frames, C = mc->channels;
    int64_t words = 0;
    for (const char *p = caption ? caption : ""; *p; p++) words += (p == caption || p[-1] == ' ') && *p != ' ';
    const int64_t prompt = words + 1 < S - 2 ? words + 1 : S - 2 > 1 ? S - 2 : 1;
    for (int64_t s = 0; s < S; s++) {
        for (int64_t k = 0; k < C; k++) cond[s * C + k] = (s < prompt) == (k == C - 1) ? 1.0f : 0.0f;
        cond[S * C + s] = s < prompt ? 0.0f : 1.0f;
    }
}

static void hm_describe(const model_config *mc, const char *grid, int64_t batch, char *buf, size_t n)
{
    (void)grid;
    snprintf(buf, n, "model %s (%s): %lld backbone layers, width %lld, %lld heads (%lld key-value); %lld decoder layers, "
             "width %lld, %lld heads (%lld key-value) over each frame's %lld rows; %lld rows of %lld codebooks + text, "
             "%lld-token codebooks, %s attention; batch %lld", mc->preset, mc->family, (long long)mc->depth,
             (long long)mc->hidden, (long long)mc->heads, (long long)mc->kv_heads, (long long)mc->single_depth,
             (long long)mc->text_dim, (long long)mc->text_heads, (long long)mc->text_kv_heads,
             (long long)(mc->channels - 1), (long long)mc->frames, (long long)(mc->channels - 1),
             (long long)mc->classes, mc->mechanism == ATTN_MATH ? "math" : "flash", (long long)batch);
}

static const family_preset presets[] = {
    /* HeartMuLa oss 3B (HeartMuLa/HeartMuLa-oss-3B, the class's defaults): the backbone llama-3B's 28 layers of 24
     * heads x 128 (8 key-value heads, SwiGLU 8192), the decoder llama-300M's 3 of 8 x 384 (4 key-value heads), 8
     * codebooks of 8197 tokens and the text's 128256 (channels: the K codebooks and the text's column); 2048 rows is
     * segtrain's choice (a two-minute clip at HeartCodec's 12.5 frames a second and its prompt; the backbone's
     * context is 8192). The rest in the preset hook. The tiny one is the fixture's. */
    {"heartmula-tiny", 2, 32, 4, 1, 5, 1, 24, 2, 0, 24, 0, false, false, 0, 0},
    {"heartmula-3b", 28, 3072, 24, 1, 9, 1, 8197, 3, 0, 3072, 0, false, false, 0, 0},
};

static void hm_preset(model_config *mc, const char *name, bool tiny)
{
    (void)name;
    mc->kv_heads = tiny ? 2 : 8, mc->ffn_dim = tiny ? 48 : 8192, mc->norm_eps = 1e-5, mc->frames = tiny ? 11 : 2048;
    mc->text_heads = tiny ? 2 : 8, mc->text_kv_heads = tiny ? 1 : 4, mc->text_ffn = tiny ? 40 : 8192;
    mc->text_vocab = tiny ? 50 : 128256, mc->image_dim = tiny ? 8 : 512;
    mc->rope_original = tiny ? 512 : 8192, mc->rope_max = tiny ? 128 : 2048;
}

static st_status hm_check(const model_config *mc)
{
    const int64_t hb = mc->hidden / mc->heads, hd = mc->text_heads ? mc->text_dim / mc->text_heads : 0;
    if (mc->kv_heads < 1 || mc->heads % mc->kv_heads || hb % 2 || mc->text_heads < 1 || mc->text_dim % mc->text_heads ||
        hd % 2 || mc->text_kv_heads < 1 || mc->text_heads % mc->text_kv_heads || mc->ffn_dim < 1 || mc->text_ffn < 1 ||
        mc->single_depth < 1 || mc->channels < 3 || mc->frames < 2 || mc->classes < 1 ||
        mc->classes * (mc->channels - 1) >= (1 << 24) || mc->text_vocab < 1 || mc->text_vocab >= (1 << 24) ||
        !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->rope_original < 1 || mc->rope_max < 1 || mc->image_dim < 1 ||
        mc->patch != 1 || mc->height != 1 || mc->width != 1 || mc->patch_t != 1 || mc->text_len || mc->pooled_dim ||
        mc->out_channels)
        return family_refuse(mc, GROUP_TEXT_FUSION, "heartmula takes even head widths, key-value heads dividing the "
                             "heads, at least one decoder layer, at least 2 codebooks (in_channels: them and the "
                             "text's column), at least 2 rows, fewer than 2^24 token ids (they travel as floats), an "
                             "eps in (0, 1), its rotary contexts, and a sequence's 1 x 1 shape");
    return ST_OK;
}

const family_desc heartmula_desc = {
    .name = "heartmula", .topology = TOPO_AUDIO_LM, .traits = TR_TOKENS,
    .st = {{.name = "heartmula", .title = "HeartMuLa", .diffusers = "HeartMuLaModel", .flavours = "3b",
            .built = "3b:heartmula-3b", .fallback = "3b", .example = "heartmula.peft-lora.json",
            .tiny = "heartmula-tiny"}},
    .uncached = "the audio codec's tokens and their masks", .cond_len = hm_cond_len, .condition = hm_condition,
    .describe = hm_describe, FAMILY_PRESETS(presets), .preset = hm_preset,
    .fields = F_FFN | F_NORM_EPS | F_KV_HEADS | F_ROPE_SCALED | F_SINGLE | F_TEXT_FUSION | F_IMAGE_DIM,
    .check = hm_check,
    .ops = &(const model_family){.create = hm_create, .impl_size = sizeof(hm_model), .set_batch = hm_set_batch,
                                 .forward = hm_forward, .backward = hm_backward, .release = hm_release,
                                 .inits = hm_inits},
    .swap_blocks = {"backbone.layers"}, .checkpoint_name = hm_checkpoint_name,
};
