/* The dual-stream family of diffusers' FluxTransformer2DModel, in its names and layouts (docs/FAMILIES.md): the
 * text encoder's tokens (through context_embedder) and the image's 2x2 patches (x_embedder) as two streams through
 * `depth` double-stream blocks (separate weights, one joint attention), then [text; image] as one sequence through
 * `single_depth` single-stream blocks, and the image rows through the final adaLN and projection (proj_out's rows
 * in the packing's (c, i, j) order). Rotary embedding by position ids on three axes; the conditioning vector is
 * c = timestep_embedder(1000 t) + guidance_embedder(1000 g) (Flux dev) + text_embedder(pooled text). `mmdit` and
 * `flux` are this family at segtrain's and at Flux's own sizes; `longcat_image` is LongCatImageTransformer2DModel,
 * Flux's blocks and layout with the timestep alone as c (`time_embed`) and LongCat's position ids; `chroma` is
 * ChromaTransformer2DModel: no c at all, every block's modulation vectors (and norm_out's) are rows of one tensor
 * the distilled_guidance_layer (approximator) makes from the timestep, and the text's padding mask adds
 * m_i m_j to the attention logits. */
#include "models/core/family.h"
#include "models/dual/mmdit.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* LongCatImagePipeline places the image's position ids after its tokenizer_max_length, whatever the text length
 * (SimpleTuner's trainer after the cached prompt's length, which the pipeline pads to the same 512). */
#define LONGCAT_IMAGE_POS_OFFSET 512
#define CHROMA_APPROX_MAX 16 /* approximator_layers (model_config_check's bound) */

/* Chroma's distilled_guidance_layer: in_proj, layers of x + linear_2(silu(linear_1(RMSNorm(x)))), out_proj */
typedef struct chroma_approx {
    int in_w, in_b, out_w, out_b, norm[CHROMA_APPROX_MAX], l1w[CHROMA_APPROX_MAX], l1b[CHROMA_APPROX_MAX],
        l2w[CHROMA_APPROX_MAX], l2b[CHROMA_APPROX_MAX];
    float *in, *x[CHROMA_APPROX_MAX + 1]; /* (B R, channels), each layer's input and the last output (B R, hidden) */
    float *mask;                          /* (B, S): the text's mask, then 1 for every image token */
    attn_mask am;
} chroma_approx;

typedef struct mm_model {
    dual_model b;
    chroma_approx a;
    bool chroma;
    temb t, g, p; /* the timestep's, the guidance's (guidance_embeds) and the pooled text's embeddings */
    int p_ctx_w, p_ctx_b, p_x_w, p_x_b;
} mm_model;

static mm_model *mm_of(model *m) { return m->impl; }

static const mmdit_options *mm_options(const model_config *c)
{
    static const mmdit_options flux = {0};
    const mmdit_options *o = family_options(c);
    return o ? o : &flux;
}

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train);
static st_status embed_backward(model *m, float *dimg, const float *dtxt);
static st_status backward_begin(model *m);
static void release_own(model *m);

static st_status mm_create(model *m)
{
    const model_config *c = &m->cfg;
    if (c->single_depth < 1)
        return st_fail(ST_ERR_INVALID, "num_single_layers: %lld; %s needs at least 1 single-stream block",
                       (long long)c->single_depth, c->family);
    const int nd = (int)c->depth, ns = (int)c->single_depth;
    mm_model *d = m->impl;
    mm_block *blocks = dual_blocks(m, nd + ns, sizeof(mm_block));
    if (!blocks) return st_host_oom("the MMDiT model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch;
    d->chroma = mm_options(c)->approximator;
    /* in the order of FluxTransformer2DModel's state_dict (ChromaTransformer2DModel's) */
    if (d->chroma) {
        chroma_approx *a = &d->a;
        const int64_t H = c->approx_hidden;
        char n[PARAM_NAME_MAX];
        a->in_w = param_add(s, "distilled_guidance_layer.in_proj.weight", 2, (int64_t[]){H, c->approx_channels}, full);
        a->in_b = param_add(s, "distilled_guidance_layer.in_proj.bias", 1, (int64_t[]){H}, full);
        for (int l = 0; l < c->approx_layers; l++) {
            int *w[4] = {&a->l1w[l], &a->l1b[l], &a->l2w[l], &a->l2b[l]};
            for (int k = 0; k < 4; k++) {
                snprintf(n, sizeof n, "distilled_guidance_layer.layers.%d.linear_%d.%s", l, 1 + k / 2, k % 2 ? "bias" : "weight");
                *w[k] = param_add(s, n, k % 2 ? 1 : 2, (int64_t[]){H, H}, full);
            }
        }
        for (int l = 0; l < c->approx_layers; l++) {
            snprintf(n, sizeof n, "distilled_guidance_layer.norms.%d.weight", l);
            a->norm[l] = param_add(s, n, 1, (int64_t[]){H}, full);
        }
        a->out_w = param_add(s, "distilled_guidance_layer.out_proj.weight", 2, (int64_t[]){D, H}, full);
        a->out_b = param_add(s, "distilled_guidance_layer.out_proj.bias", 1, (int64_t[]){D}, full);
        /* its rows: the single blocks' 3 each, the double blocks' image 6 each, their text 6 each, norm_out's 2 */
        m->ctx.mod_rows = 3 * ns + 12 * nd + 2;
        for (int i = 0; i < nd + ns; i++) {
            blocks[i].model_mod = true;
            blocks[i].mod_row[0] = i < nd ? 3 * ns + 6 * i : 3 * (i - nd);
            blocks[i].mod_row[1] = 3 * ns + 6 * nd + 6 * i;
        }
    } else if (mm_options(c)->longcat)
        temb_register_at(s, &d->t, "time_embed.timestep_embedder", DIT_FREQ_DIM, D, true, full);
    else
        temb_register_at(s, &d->t, "time_text_embed.timestep_embedder", DIT_FREQ_DIM, D, true, full);
    if (c->guidance_embeds)
        temb_register_at(s, &d->g, "time_text_embed.guidance_embedder", DIT_FREQ_DIM, D, true, full);
    if (c->pooled_dim) /* LongCat has no pooled text */
        temb_register_at(s, &d->p, "time_text_embed.text_embedder", c->pooled_dim, D, true, full);
    d->p_ctx_w = param_add(s, "context_embedder.weight", 2, (int64_t[]){D, c->text_dim}, full);
    d->p_ctx_b = param_add(s, "context_embedder.bias", 1, (int64_t[]){D}, full);
    d->p_x_w = param_add(s, "x_embedder.weight", 2, (int64_t[]){D, P}, full);
    d->p_x_b = param_add(s, "x_embedder.bias", 1, (int64_t[]){D}, full);
    for (int i = 0; i < nd + ns; i++) blocks[i].qk_norm = true;
    for (int i = 0; i < nd; i++) mm_double_register(s, &blocks[i], i, c);
    for (int i = 0; i < ns; i++) mm_single_register(s, &blocks[nd + i], i, c);
    /* norm_out: Chroma's (shift, scale) rows, the last two, no linear */
    d->b.final = d->chroma ? (final_layer){.mod_row = m->ctx.mod_rows - 2, .order = PATCH_CONV}
                           : (final_layer){.scale_first = true, .order = PATCH_CONV};
    final_register(s, &d->b.final, c, d->chroma ? NULL : "norm_out.linear", "proj_out", true);
    for (int i = 0; i < nd + ns; i++) blocks[i].m = m;
    dual_sequences(m, "transformer_blocks", nd, &mm_double_kind, ns, &mm_single_kind, sizeof *blocks);
    d->b.embed = embed_forward, d->b.embed_backward = embed_backward, d->b.release_own = release_own;
    if (d->chroma) d->b.backward_begin = backward_begin;
    return ST_OK;
}

static const init_rule mm_inits[] = {
    {INIT_ZERO, "norm1.linear|norm1_context.linear|norm.linear|norm_out.linear|^proj_out.weight$"},
    {INIT_ONE, ".norm_|.norms."}, {INIT_NORMAL, "time_text_embed.|time_embed."}, {0}};
param_init mm_init_of(const char *name) { return init_by_rules(name, mm_inits, INIT_XAVIER); }

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

#define AW(name) (param_at(m->params, a->name)->w)
#define AG(name) (param_at(m->params, a->name)->g)

/* Chroma's buffers for a step: the approximator's input and each layer's input (kept for backward), the
 * modulation rows and the attention mask. */
static void chroma_take(model *m, st_status *st)
{
    chroma_approx *a = &mm_of(m)->a;
    const model_config *c = &m->cfg;
    const int64_t BR = m->shape.batch * m->ctx.mod_rows;
    a->in = model_take(m, st, BR * c->approx_channels, "chroma.approximator_in", false);
    for (int l = 0; l <= c->approx_layers; l++) a->x[l] = model_take(m, st, BR * c->approx_hidden, "chroma.approximator", false);
    m->ctx.mod = model_take(m, st, BR * c->hidden, "chroma.modulation", false);
    a->mask = model_take(m, st, m->shape.batch * (m->shape.text + m->shape.tokens), "chroma.mask", false);
}

static void chroma_release(model *m)
{
    chroma_approx *a = &mm_of(m)->a;
    for (int l = 0; l <= CHROMA_APPROX_MAX; l++) pool_free(m->pool, a->x[l]), a->x[l] = NULL;
    pool_free(m->pool, a->in), pool_free(m->pool, a->mask), pool_free(m->pool, m->ctx.mod), pool_free(m->pool, m->ctx.dmod);
    a->in = a->mask = m->ctx.mod = m->ctx.dmod = NULL;
    m->ctx.mask = NULL;
}

/* ChromaCombinedTimestepTextProjEmbeddings then ChromaApproximator: row r of a sample's input is
 * [time_proj(1000 t) (n), guidance_proj(0) (n), mod_proj[r] = sinusoid(1000 r) (2 n)], n = channels / 4, each
 * cosines first; the rows go through in_proj, the residual layers and out_proj into m->ctx.mod. And the
 * attention mask over [text; image]: the conditioning's text mask, then 1. */
static st_status chroma_forward(model *m, const float *timesteps, const float *cond)
{
    chroma_approx *a = &mm_of(m)->a;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, R = m->ctx.mod_rows, BR = B * R, Ci = c->approx_channels, n = Ci / 4;
    const int64_t H = c->approx_hidden, L = m->shape.text, T = m->shape.tokens, S = L + T, K = model_cond_len(c);
    scratch k = {.pool = m->pool};
    float *tproj = scratch_take(&k, B * n, MEM_WORKSPACE, "chroma.time_proj");
    float *g0 = scratch_take(&k, n, MEM_WORKSPACE, "chroma.guidance_proj");
    float *table = scratch_take(&k, R * 2 * n, MEM_WORKSPACE, "chroma.mod_proj");
    float *nrm = scratch_take(&k, BR * H, MEM_WORKSPACE, "chroma.norm");
    float *h1 = scratch_take(&k, BR * H, MEM_WORKSPACE, "chroma.linear_1");
    float *h2 = scratch_take(&k, BR * H, MEM_WORKSPACE, "chroma.silu");
    float *rows = malloc((size_t)(R + 1) * sizeof(float)); /* the sinusoids' arguments: 1000 r, and guidance's 0 */
    if (!rows) k.status = k.status ? k.status : st_host_oom("chroma's modulation indices");
    if (k.status) {
        free(rows);
        return scratch_end(&k);
    }
    for (int64_t r = 0; r < R; r++) rows[r] = 1000.0f * (float)r;
    rows[R] = 0.0f;
    timestep_embedding(tproj, timesteps, B, n, 10000.0);
    timestep_embedding(g0, rows + R, 1, n, 10000.0);
    timestep_embedding(table, rows, R, 2 * n, 10000.0);
    free(rows);
    for (int64_t b = 0; b < B; b++) {
        float *in = a->in + b * R * Ci;
        copy_rows(in, Ci, tproj + b * n, 0, R, n);
        copy_rows(in + n, Ci, g0, 0, R, n);
        copy_rows(in + 2 * n, Ci, table, 2 * n, R, 2 * n);
    }
    linear_forward(a->x[0], a->in, AW(in_w), AW(in_b), BR, Ci, H);
    for (int l = 0; l < c->approx_layers && !k.status; l++) {
        /* nn.RMSNorm(eps=None): torch's float32 epsilon */
        k.status = rmsnorm_forward(m->pool, nrm, a->x[l], AW(norm[l]), BR, H, FLT_EPSILON, NULL);
        linear_forward(h1, nrm, AW(l1w[l]), AW(l1b[l]), BR, H, H);
        silu_forward(h2, h1, BR * H);
        linear_forward(a->x[l + 1], h2, AW(l2w[l]), AW(l2b[l]), BR, H, H);
        add_to(a->x[l + 1], a->x[l], BR * H);
    }
    linear_forward(m->ctx.mod, a->x[c->approx_layers], AW(out_w), AW(out_b), BR, H, c->hidden);
    const float one = 1.0f;
    copy_rows(a->mask, S, cond + L * c->text_dim + c->pooled_dim, K, B, L);
    for (int64_t b = 0; b < B; b++) copy_rows(a->mask + b * S + L, 1, &one, 0, T, 1);
    a->am = (attn_mask){.key_bias = a->mask, .query_gate = a->mask, .batch_stride = S}; /* + m_i m_j */
    m->ctx.mask = &a->am;
    return scratch_end(&k);
}

/* The approximator's weight gradients from the modulation rows' (m->ctx.dmod); each layer's inner values are
 * made again from its kept input. */
static st_status chroma_backward(model *m)
{
    chroma_approx *a = &mm_of(m)->a;
    const model_config *c = &m->cfg;
    const int64_t BR = m->shape.batch * m->ctx.mod_rows, H = c->approx_hidden;
    if (!AG(out_w)) return ST_OK; /* frozen (LoRA) */
    scratch k = {.pool = m->pool};
    float *dx = scratch_take_zero(&k, BR * H, MEM_WORKSPACE, "chroma.dx");
    float *nrm = scratch_take(&k, BR * H, MEM_WORKSPACE, "chroma.norm");
    float *h1 = scratch_take(&k, BR * H, MEM_WORKSPACE, "chroma.linear_1");
    float *h2 = scratch_take(&k, BR * H, MEM_WORKSPACE, "chroma.silu");
    float *dh = scratch_take(&k, BR * H, MEM_WORKSPACE, "chroma.dh");
    float *dn = scratch_take(&k, BR * H, MEM_WORKSPACE, "chroma.dnorm");
    op_state stats = {0};
    if (k.status) return scratch_end(&k);
    const size_t bytes = (size_t)(BR * H) * sizeof(float);
    linear_backward(dx, AG(out_w), AG(out_b), m->ctx.dmod, a->x[c->approx_layers], AW(out_w), BR, H, c->hidden);
    for (int l = c->approx_layers - 1; l >= 0 && !k.status; l--) { /* dx is the residual stream's gradient */
        if ((k.status = rmsnorm_forward(m->pool, nrm, a->x[l], AW(norm[l]), BR, H, FLT_EPSILON, &stats))) break;
        linear_forward(h1, nrm, AW(l1w[l]), AW(l1b[l]), BR, H, H);
        silu_forward(h2, h1, BR * H);
        zero_bytes(dh, bytes);
        linear_backward(dh, AG(l2w[l]), AG(l2b[l]), dx, h2, AW(l2w[l]), BR, H, H);
        zero_bytes(dn, bytes);
        silu_backward(dn, dh, h1, BR * H);
        zero_bytes(dh, bytes);
        linear_backward(dh, AG(l1w[l]), AG(l1b[l]), dn, nrm, AW(l1w[l]), BR, H, H);
        rmsnorm_backward(dx, AG(norm[l]), dh, a->x[l], AW(norm[l]), BR, H, &stats);
        op_state_release(&stats);
    }
    if (!k.status) linear_backward(NULL, AG(in_w), AG(in_b), dx, a->in, AW(in_w), BR, c->approx_channels, H);
    op_state_release(&stats);
    return scratch_end(&k);
}

/* The conditioning's optional paths, NULL where the options have none */
static temb *guidance(model *m) { return m->cfg.guidance_embeds ? &mm_of(m)->g : NULL; }
static temb *pooled(model *m) { return m->cfg.pooled_dim ? &mm_of(m)->p : NULL; }

static void release_own(model *m) { chroma_release(m); }

/* The image tokens, the text tokens from the encoder's sequence, the rotary table of their positions, and the
 * conditioning c = timestep + guidance + pooled-text embeddings (in Flux's order of addition), cs = SiLU(c). */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    mm_model *d = mm_of(m);
    const model_config *c = &m->cfg;
    const int64_t L = m->shape.text, T = m->shape.tokens, hd = c->hidden / c->heads;
    st_status st = ST_OK;
    dual_take_tokens(m, &st, cond);
    if (d->chroma) chroma_take(m, &st);
    dual_take_c(m, &st, train, d->chroma ? NULL : &d->t, guidance(m), pooled(m));
    model_hold(m, &st, &m->ctx.rope, (L + T) * hd, "mmdit.rope", false);
    float *ids = NULL; /* Flux's: text tokens at 0, image token (r, q) at (0, r, q); LongCat's its own */
    if (!st) st = pool_alloc(m->pool, (size_t)((L + T) * 3) * sizeof(float), MEM_WORKSPACE, "mmdit.position_ids",
                             (void **)&ids);
    if (st) return st;
    /* Chroma's are Flux's */
    const int64_t rows = grid_rows(c), cols = grid_cols(c);
    if (mm_options(c)->longcat) position_ids_longcat(ids, L, rows, cols, LONGCAT_IMAGE_POS_OFFSET);
    else position_ids_grid(ids, L, 1, rows, cols);
    rope_table(m->ctx.rope, ids, L + T, 3, c->rope_axes, MMDIT_ROPE_THETA);
    pool_free(m->pool, ids);

    dual_embed_text(m, cond, train, d->p_ctx_w, d->p_ctx_b);
    dual_embed_image(m, x, d->p_x_w, d->p_x_b);
    if (d->chroma) return chroma_forward(m, timesteps, cond);
    return dual_c_forward(m, timesteps, cond, &d->t, guidance(m), pooled(m));
}

static st_status embed_backward(model *m, float *dimg, const float *dtxt)
{
    mm_model *d = mm_of(m);
    dual_tokens_backward(m, dimg, dtxt, d->p_x_w, d->p_x_b, d->p_ctx_w, d->p_ctx_b);
    if (d->chroma) return chroma_backward(m);
    return dual_c_backward(m, &d->t, guidance(m), pooled(m));
}

/* Every modulation row's gradient, for the approximator: the final layer's and the blocks' (Chroma). */
static st_status backward_begin(model *m)
{
    st_status st = ST_OK;
    m->ctx.dmod = model_take(m, &st, m->shape.batch * m->ctx.mod_rows * m->shape.hidden, "chroma.dmodulation", true);
    return st;
}

const model_family mmdit_family = {
    .create = mm_create, .impl_size = sizeof(mm_model), DUAL_STEPS, .init_of = mm_init_of,
};
