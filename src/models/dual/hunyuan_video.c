/* HunyuanVideo 1.0 and 1.5, diffusers' HunyuanVideoTransformer3DModel and HunyuanVideo15Transformer3DModel in their
 * names and layouts (docs/FAMILIES.md). 1.0: video latents (B, C, F, H, W) in patches of (patch_t, p, p) through
 * a Conv3d (x_embedder.proj, a linear of the flattened patch), the text through the token refiner (context_embedder: proj_in, then refiner blocks of
 * self-attention among the caption's tokens, gated by its own timestep-and-mean-text embedding), then Flux's
 * double and single blocks, Flux's final layer, and proj_out's rows in the Conv3d's (c, z, a, b) order.
 *
 * What differs from Flux in the blocks is only arrangement: diffusers joins [image; text] and rotates the image
 * tokens alone; segtrain's dual-stream skeleton joins [text; image] with the text at position ids 0, which the
 * rotary table leaves exactly unrotated. Attention does not depend on the order of its keys, so the two are the
 * same function (to float rounding). The conditioning vector is c = timestep_embedder(t) +
 * guidance_embedder(1000 g) + text_embedder(pooled text), t = 1000 sigma, Flux's; and the joint attention
 * excludes the caption's padding keys (the first sum(mask) text tokens are its tokens, as diffusers counts them).
 *
 * 1.5 (`hunyuanvideo15`, text-to-video as SimpleTuner trains it): double blocks only; c = time_embed(t) alone; the
 * x_embedder also reads the image-to-video condition's channels (cond_channels: its latents and mask, zero for
 * text-to-video, so segtrain pads the patches with zeros); the text stream is [ByT5's glyph tokens through
 * context_embedder_2 (LayerNorm, three linears, exact GELUs); the refined caption], plus cond_type_embed's row 1
 * and 0. diffusers also appends the SigLIP image tokens (all masked under text-to-video, so they reach nothing: the
 * image_embedder is registered for loading, and its gradient is zero) and moves each sample's valid tokens first
 * and zeroes the rest: with every invalid token excluded as a key, that is the same function. */
#include "models/core/family.h"
#include "models/dual/mmdit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HV_ROPE_THETA 256.0
#define HV_LN_EPS 1e-6f

/* A refiner block (HunyuanVideoIndividualTokenRefinerBlock): x += gate_msa * to_out(attn(LN1(x))),
 * x += gate_mlp * ff(LN2(x)), ff = net.2(SiLU(net.0.proj(.))), (gate_msa, gate_mlp) = norm_out.linear(SiLU(temb)),
 * LayerNorms with weights and biases, q/k/v with biases and no qk norm. */
typedef struct hv_refiner_block {
    int n1w, n1b, n2w, n2b;
    lin_layer q, k, v, out, ff0, ff2, gates;
    /* a step's kept tensors, (B L, D) unless said: the input, LN1, q, k, v, attention's output, to_out's, the
     * input of LN2, LN2, ff's hidden (B L, 4D) and SiLU of it, ff's output; the gates (B, 2D) */
    float *x, *n1, *q_, *k_, *v_, *a, *o, *x1, *n2, *f1, *s1, *f2, *g;
    op_state st1, st2, attn;
} hv_refiner_block;

/* 1.5's ByT5 projection (HunyuanVideo15ByT5TextProjection), its kept tensors (B L2, width) and LayerNorm state */
typedef struct hv_byt5 {
    int nw, nb;
    lin_layer l1, l2, l3;
    float *in, *n, *h1, *g1, *h2, *g2;
    op_state stats;
} hv_byt5;

#define HV_BYT5_WIDTH 2048 /* HunyuanVideo15ByT5TextProjection's hidden width, fixed in the class */
#define HV_BYT5_LN_EPS 1e-5f /* nn.LayerNorm's default */

typedef struct hv_model {
    dual_model b;
    bool v15;
    hv_byt5 byt5;
    int p_cond_type;   /* 1.5: cond_type_embed (3, D) */
    float *type_idx;   /* 1.5: each text-stream row's cond_type_embed row (B (L2 + L)) */
    float *patches_in; /* 1.5: the patches padded with the condition channels' zeros (N, in features) */
    temb t, g, p;   /* the blocks' conditioning: timestep, guidance, pooled text */
    temb rt, rp;    /* the refiner's: timestep, mean text */
    lin_layer proj_in;
    int n_ref;
    hv_refiner_block ref[MODEL_REFINER_MAX];
    int p_x_w, p_x_b;
    float *rcs, *drcs; /* SiLU of the refiner's conditioning (B, D) and its gradient */
    float *refined;    /* 1.5: the refiner's output (B L, D), copied into the text stream after ByT5's tokens */
    float *key_bias, *ref_bias; /* the joint attention's (B, S) and the refiner's (B, L) key masks */
    attn_mask mask, ref_mask;
} hv_model;

static hv_model *hv_of(model *m) { return m->impl; }

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train);
static st_status embed_backward(model *m, float *dimg, const float *dtxt);
static void release_own(model *m);

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static st_status hv_create(model *m)
{
    const model_config *c = &m->cfg;
    const int nd = (int)c->depth, ns = (int)c->single_depth;
    hv_model *d = m->impl;
    mm_block *blocks = dual_blocks(m, nd + ns, sizeof(mm_block));
    if (!blocks) return st_host_oom("the HunyuanVideo model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, Dt = c->text_dim;
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    const float alpha = (float)c->lora_alpha;
    /* in the order of HunyuanVideoTransformer3DModel's state_dict */
    const hunyuan_video_options *o = family_options(c);
    d->v15 = o && o->v15;
    d->p_x_w = param_add(s, "x_embedder.proj.weight", 5,
                         (int64_t[]){D, c->channels + c->cond_channels, c->patch_t, c->patch, c->patch}, full);
    d->p_x_b = param_add(s, "x_embedder.proj.bias", 1, (int64_t[]){D}, full);
    if (d->v15) { /* loaded, unused under text-to-video */
        const int64_t I = c->image_dim;
        param_add(s, "image_embedder.norm_in.weight", 1, (int64_t[]){I}, full);
        param_add(s, "image_embedder.norm_in.bias", 1, (int64_t[]){I}, full);
        param_add(s, "image_embedder.linear_1.weight", 2, (int64_t[]){I, I}, full);
        param_add(s, "image_embedder.linear_1.bias", 1, (int64_t[]){I}, full);
        param_add(s, "image_embedder.linear_2.weight", 2, (int64_t[]){D, I}, full);
        param_add(s, "image_embedder.linear_2.bias", 1, (int64_t[]){D}, full);
        param_add(s, "image_embedder.norm_out.weight", 1, (int64_t[]){D}, full);
        param_add(s, "image_embedder.norm_out.bias", 1, (int64_t[]){D}, full);
    }
    temb_register_at(s, &d->rt, "context_embedder.time_text_embed.timestep_embedder", DIT_FREQ_DIM, D, true, full);
    temb_register_at(s, &d->rp, "context_embedder.time_text_embed.text_embedder", Dt, D, true, full);
    d->proj_in = lin_register(s, "context_embedder.proj_in", Dt, D, true, 0, 0, full);
    d->n_ref = (int)c->refiner_depth;
    for (int r = 0; r < d->n_ref; r++) {
        hv_refiner_block *k = &d->ref[r];
        char p[64], n[PARAM_NAME_MAX];
        snprintf(p, sizeof p, "context_embedder.token_refiner.refiner_blocks.%d", r);
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", p, suffix), n)
        k->n1w = param_add(s, NAME("norm1.weight"), 1, (int64_t[]){D}, full);
        k->n1b = param_add(s, NAME("norm1.bias"), 1, (int64_t[]){D}, full);
        k->q = lin_register(s, NAME("attn.to_q"), D, D, true, ra, alpha, full);
        k->k = lin_register(s, NAME("attn.to_k"), D, D, true, ra, alpha, full);
        k->v = lin_register(s, NAME("attn.to_v"), D, D, true, ra, alpha, full);
        k->out = lin_register(s, NAME("attn.to_out.0"), D, D, true, ra, alpha, full);
        k->n2w = param_add(s, NAME("norm2.weight"), 1, (int64_t[]){D}, full);
        k->n2b = param_add(s, NAME("norm2.bias"), 1, (int64_t[]){D}, full);
        k->ff0 = lin_register(s, NAME("ff.net.0.proj"), D, 4 * D, true, rm, alpha, full);
        k->ff2 = lin_register(s, NAME("ff.net.2"), 4 * D, D, true, rm, alpha, full);
        k->gates = lin_register(s, NAME("norm_out.linear"), D, 2 * D, true, 0, 0, full);
#undef NAME
    }
    if (d->v15) {
        hv_byt5 *y = &d->byt5;
        const int64_t E = c->text2_dim, Wd = HV_BYT5_WIDTH;
        y->nw = param_add(s, "context_embedder_2.norm.weight", 1, (int64_t[]){E}, full);
        y->nb = param_add(s, "context_embedder_2.norm.bias", 1, (int64_t[]){E}, full);
        y->l1 = lin_register(s, "context_embedder_2.linear_1", E, Wd, true, 0, 0, full);
        y->l2 = lin_register(s, "context_embedder_2.linear_2", Wd, Wd, true, 0, 0, full);
        y->l3 = lin_register(s, "context_embedder_2.linear_3", Wd, D, true, 0, 0, full);
        temb_register_at(s, &d->t, "time_embed.timestep_embedder", DIT_FREQ_DIM, D, true, full);
        d->p_cond_type = param_add(s, "cond_type_embed.weight", 2, (int64_t[]){3, D}, full);
    } else {
        temb_register_at(s, &d->t, "time_text_embed.timestep_embedder", DIT_FREQ_DIM, D, true, full);
        temb_register_at(s, &d->p, "time_text_embed.text_embedder", c->pooled_dim, D, true, full);
    }
    if (c->guidance_embeds)
        temb_register_at(s, &d->g, "time_text_embed.guidance_embedder", DIT_FREQ_DIM, D, true, full);
    for (int i = 0; i < nd + ns; i++) blocks[i].qk_norm = true, blocks[i].m = m;
    for (int i = 0; i < nd; i++) mm_double_register(s, &blocks[i], i, c);
    for (int i = 0; i < ns; i++) mm_single_register(s, &blocks[nd + i], i, c);
    d->b.final = (final_layer){.scale_first = true, .order = PATCH_CONV};
    final_register(s, &d->b.final, c, "norm_out.linear", "proj_out", true);
    dual_sequences(m, "transformer_blocks", nd, &mm_double_kind, ns, &mm_single_kind, sizeof *blocks);
    d->b.embed = embed_forward, d->b.embed_backward = embed_backward, d->b.release_own = release_own;
    return ST_OK;
}

/* Flux's, and the LayerNorms of the refiner, the ByT5 and the image projections at (1, 0) */
static const init_rule hv_inits[] = {
    {INIT_ONE, "refiner_blocks.&.norm&!norm_out&.weight|context_embedder_2.norm.&.weight|image_embedder.norm_&.weight"},
    {INIT_ZERO, "refiner_blocks.&.norm&!norm_out|context_embedder_2.norm.|image_embedder.norm_"},
    {INIT_NORMAL, "context_embedder.time_text_embed."}, {0}};
static param_init hv_init_of(const char *name) { return init_by_rules(name, hv_inits, mm_init_of(name)); }

static temb *guidance(model *m) { return m->cfg.guidance_embeds ? &hv_of(m)->g : NULL; }
static temb *pooled(model *m) { return hv_of(m)->v15 ? NULL : &hv_of(m)->p; }

static void refiner_release(model *m, hv_refiner_block *k)
{
    float **bufs[] = {&k->x, &k->n1, &k->q_, &k->k_, &k->v_, &k->a, &k->o, &k->x1, &k->n2, &k->f1, &k->s1, &k->f2, &k->g};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) pool_free(m->pool, *bufs[i]), *bufs[i] = NULL;
    op_state_release(&k->st1), op_state_release(&k->st2), op_state_release(&k->attn);
}

static void byt5_release(model *m, hv_byt5 *y)
{
    float **bufs[] = {&y->in, &y->n, &y->h1, &y->g1, &y->h2, &y->g2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) pool_free(m->pool, *bufs[i]), *bufs[i] = NULL;
    op_state_release(&y->stats);
}

static void release_own(model *m)
{
    hv_model *d = hv_of(m);
    for (int r = 0; r < d->n_ref; r++) refiner_release(m, &d->ref[r]);
    byt5_release(m, &d->byt5);
}

static attn_shape refiner_attn(const model *m)
{
    return (attn_shape){.batch = m->shape.batch, .tokens = m->cfg.text_len, .heads = m->cfg.heads,
                        .head_dim = m->cfg.hidden / m->cfg.heads, .mechanism = m->cfg.mechanism};
}

/* One refiner block on x (B L, D) into y. */
static st_status refiner_forward(model *m, hv_refiner_block *k, const float *x, float *y, bool train)
{
    hv_model *d = hv_of(m);
    const int64_t B = m->shape.batch, L = m->cfg.text_len, D = m->cfg.hidden, n = B * L;
    param_set *ps = m->params;
    st_status st = ST_OK;
    float **bufs[] = {&k->n1, &k->q_, &k->k_, &k->v_, &k->a, &k->o, &k->x1, &k->n2, &k->f2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) *bufs[i] = model_take(m, &st, n * D, "hunyuanvideo.refiner", false);
    k->f1 = model_take(m, &st, n * 4 * D, "hunyuanvideo.refiner.ff", false);
    k->s1 = model_take(m, &st, n * 4 * D, "hunyuanvideo.refiner.ff", false);
    k->g = model_take(m, &st, B * 2 * D, "hunyuanvideo.refiner.gates", false);
    if (st) return st;
    const attn_shape as = refiner_attn(m);
    const attn_view vq = {k->q_, D, L * D}, vk = {k->k_, D, L * D}, vv = {k->v_, D, L * D}, va = {k->a, D, L * D};
    if ((st = layernorm_forward(m->pool, k->n1, x, PW(k->n1w), PW(k->n1b), n, D, HV_LN_EPS, train ? &k->st1 : NULL)) ||
        (st = lin_forward(ps, m->pool, &k->q, k->q_, k->n1, n)) || (st = lin_forward(ps, m->pool, &k->k, k->k_, k->n1, n)) ||
        (st = lin_forward(ps, m->pool, &k->v, k->v_, k->n1, n)) ||
        (st = attention_forward_masked(m->pool, &as, &d->ref_mask, va, vq, vk, vv, train ? &k->attn : NULL)) ||
        (st = lin_forward(ps, m->pool, &k->out, k->o, k->a, n)) ||
        (st = lin_forward(ps, m->pool, &k->gates, k->g, d->rcs, B)))
        return st;
    gated_residual_forward(k->x1, x, k->g, k->o, B, L, D, 2 * D);
    if ((st = layernorm_forward(m->pool, k->n2, k->x1, PW(k->n2w), PW(k->n2b), n, D, HV_LN_EPS, train ? &k->st2 : NULL)) ||
        (st = lin_forward(ps, m->pool, &k->ff0, k->f1, k->n2, n)))
        return st;
    silu_forward(k->s1, k->f1, n * 4 * D);
    if ((st = lin_forward(ps, m->pool, &k->ff2, k->f2, k->s1, n))) return st;
    gated_residual_forward(y, k->x1, k->g + D, k->f2, B, L, D, 2 * D);
    return ST_OK;
}

/* dx (B L, D) holds dL/dy on entry and dL/dx on return; the block's weights and d SiLU(temb) accumulate. */
static st_status refiner_backward(model *m, hv_refiner_block *k, float *dx)
{
    hv_model *d = hv_of(m);
    const int64_t B = m->shape.batch, L = m->cfg.text_len, D = m->cfg.hidden, n = B * L;
    param_set *ps = m->params;
    scratch w = {.pool = m->pool};
    float *dg = scratch_take_zero(&w, B * 2 * D, MEM_WORKSPACE, "hunyuanvideo.refiner.dgates");
    float *dh = scratch_take_zero(&w, n * 4 * D, MEM_WORKSPACE, "hunyuanvideo.refiner.dff");
    float *ds = scratch_take_zero(&w, n * 4 * D, MEM_WORKSPACE, "hunyuanvideo.refiner.dsilu");
    float *dn = scratch_take_zero(&w, n * D, MEM_WORKSPACE, "hunyuanvideo.refiner.dnorm");
    float *dq = scratch_take_zero(&w, n * D, MEM_WORKSPACE, "hunyuanvideo.refiner.dq");
    float *dk = scratch_take_zero(&w, n * D, MEM_WORKSPACE, "hunyuanvideo.refiner.dk");
    float *dv = scratch_take_zero(&w, n * D, MEM_WORKSPACE, "hunyuanvideo.refiner.dv");
    if (w.status) return scratch_end(&w);
    const size_t bytes = (size_t)(n * D) * sizeof(float);
    /* x2 = x1 + gate_mlp * f2: dx carries dL/dx2, then dL/dx1 in place */
    gated_residual_backward(dx, dg + D, dh, dx, k->g + D, k->f2, B, L, D, 2 * D);
    if (!w.status) w.status = lin_backward(ps, m->pool, &k->ff2, ds, dh, k->s1, n);
    zero_bytes(dh, (size_t)(n * 4 * D) * sizeof(float));
    silu_backward(dh, ds, k->f1, n * 4 * D);
    if (!w.status) w.status = lin_backward(ps, m->pool, &k->ff0, dn, dh, k->n2, n);
    layernorm_backward(dx, PG(k->n2w), PG(k->n2b), dn, k->x1, PW(k->n2w), n, D, &k->st2);
    /* x1 = x + gate_msa * o */
    zero_bytes(dn, bytes);
    gated_residual_backward(dx, dg, dn, dx, k->g, k->o, B, L, D, 2 * D);
    zero_bytes(dq, bytes);
    if (!w.status) w.status = lin_backward(ps, m->pool, &k->out, dq, dn, k->a, n); /* dq holds d attention out */
    const attn_shape as = refiner_attn(m);
    const attn_view va = {k->a, D, L * D}, dva = {dq, D, L * D};
    zero_bytes(dn, bytes);
    float *ddq = dn; /* d q, reusing the buffer; dk, dv as named */
    if (!w.status)
        w.status = attention_backward_masked(m->pool, &as, &d->ref_mask, (attn_view){ddq, D, L * D},
                                             (attn_view){dk, D, L * D}, (attn_view){dv, D, L * D}, dva,
                                             (attn_view){k->q_, D, L * D}, (attn_view){k->k_, D, L * D},
                                             (attn_view){k->v_, D, L * D}, va, &k->attn);
    zero_bytes(dq, bytes); /* d LN1 */
    if (!w.status) w.status = lin_backward(ps, m->pool, &k->q, dq, ddq, k->n1, n);
    /* to_k's bias adds q . b to every logit of a query alike, which the softmax cancels: its gradient, the sum of dk
     * over a sample's keys, is zero (diffusers' to rounding); it is left at exactly zero rather than summed */
    lin_layer keys = k->k;
    keys.b = -1;
    if (!w.status) w.status = lin_backward(ps, m->pool, &keys, dq, dk, k->n1, n);
    if (!w.status) w.status = lin_backward(ps, m->pool, &k->v, dq, dv, k->n1, n);
    layernorm_backward(dx, PG(k->n1w), PG(k->n1b), dq, k->x, PW(k->n1w), n, D, &k->st1);
    if (!w.status) w.status = lin_backward(ps, m->pool, &k->gates, d->drcs, dg, d->rcs, B);
    return scratch_end(&w);
}

/* Where a sample's conditioning holds what (model.h's layout): the caption's mask after its sequence and the pooled
 * vector; 1.5's ByT5 sequence and its mask after that. */
static int64_t at_mask(const model_config *c) { return c->text_len * c->text_dim + c->pooled_dim; }
static int64_t at_byt5(const model_config *c) { return at_mask(c) + c->text_len; }

/* The masks from the conditioning's text masks. The joint attention excludes 1.0's text keys from the sum(mask)-th
 * on (diffusers counts the tokens and takes the first ones), 1.5's where a mask is 0 (its pair mask), image keys
 * never. The refiner's excludes every padding key but the first token's. Its padding queries then see the
 * caption's keys, where diffusers lets 1.0's see key 0 alone and 1.5's none: their outputs are padding rows of the
 * text stream, which every later attention excludes as keys (1.5 also replaces them by zeros), so nothing of them
 * reaches the prediction. */
static st_status key_biases(model *m, const float *cond)
{
    hv_model *d = hv_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = c->text_len, L2 = c->text2_len, S = m->shape.text + m->shape.tokens;
    const int64_t K = model_cond_len(c), at = at_mask(c);
    for (int64_t b = 0; b < B; b++) {
            const float *mask = cond + b * K + at, *mask2 = cond + b * K + at_byt5(c) + L2 * c->text2_dim;
            float *kb = d->key_bias + b * S;
            int64_t count = 0;
            for (int64_t j = 0; j < L; j++) count += mask[j] != 0.0f;
            for (int64_t j = 0; j < L2; j++) kb[j] = mask2[j] != 0.0f ? 0.0f : -INFINITY; /* 1.5's ByT5 first */
            for (int64_t j = 0; j < L; j++) kb[L2 + j] = (d->v15 ? mask[j] != 0.0f : j < count) ? 0.0f : -INFINITY;
            for (int64_t j = L2 + L; j < S; j++) kb[j] = 0.0f;
            for (int64_t j = 0; j < L; j++) d->ref_bias[b * L + j] = j == 0 || mask[j] != 0.0f ? 0.0f : -INFINITY;
        }
    return ST_OK;
}

/* The rotary table of the positions (ids: S x 3; text at 0, unrotated, image token (u, r, q) at (u, r, q)) and the
 * masks (a model_host_loop's) */
static st_status positions_and_masks(model *m, const float *cond, float *ids)
{
    const model_config *c = &m->cfg;
    position_ids_grid(ids, m->shape.text, c->frames / c->patch_t, grid_rows(c), grid_cols(c));
    rope_table(m->ctx.rope, ids, m->shape.text + m->shape.tokens, 3, c->rope_axes, HV_ROPE_THETA);
    return key_biases(m, cond);
}

/* The refiner's pooled input: the mean of the caption's tokens under its mask (zero without tokens, where diffusers
 * divides 0 by 0: a real prompt template always has tokens). */
static void masked_mean(model *m, float *out, const float *text, const float *cond)
{
    const model_config *c = &m->cfg;
    masked_mean_forward(out, text, cond + at_mask(c), m->shape.batch, c->text_len, c->text_dim, model_cond_len(c));
}

/* 1.5's glyph tokens: context_embedder_2 of the conditioning's ByT5 sequence into out (B L2, D). */
static st_status byt5_forward(model *m, const float *cond, float *out, bool train)
{
    hv_byt5 *y = &hv_of(m)->byt5;
    const model_config *c = &m->cfg;
    const int64_t n = m->shape.batch * c->text2_len, E = c->text2_dim, Wd = HV_BYT5_WIDTH;
    st_status st = ST_OK;
    y->in = model_take(m, &st, n * E, "hunyuanvideo15.byt5_in", false);
    y->n = model_take(m, &st, n * E, "hunyuanvideo15.byt5_norm", false);
    float **bufs[] = {&y->h1, &y->g1, &y->h2, &y->g2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) *bufs[i] = model_take(m, &st, n * Wd, "hunyuanvideo15.byt5", false);
    if (st) return st;
    copy_rows(y->in, c->text2_len * E, cond + at_byt5(c), model_cond_len(c), m->shape.batch, c->text2_len * E);
    param_set *ps = m->params;
    if ((st = layernorm_forward(m->pool, y->n, y->in, PW(y->nw), PW(y->nb), n, E, HV_BYT5_LN_EPS,
                                train ? &y->stats : NULL)) ||
        (st = lin_forward(ps, m->pool, &y->l1, y->h1, y->n, n)))
        return st;
    gelu_erf_forward(y->g1, y->h1, n * Wd);
    if ((st = lin_forward(ps, m->pool, &y->l2, y->h2, y->g1, n))) return st;
    gelu_erf_forward(y->g2, y->h2, n * Wd);
    return lin_forward(ps, m->pool, &y->l3, out, y->g2, n);
}

static st_status byt5_backward(model *m, const float *dout)
{
    hv_byt5 *y = &hv_of(m)->byt5;
    const model_config *c = &m->cfg;
    const int64_t n = m->shape.batch * c->text2_len, E = c->text2_dim, Wd = HV_BYT5_WIDTH;
    param_set *ps = m->params;
    scratch w = {.pool = m->pool};
    float *da = scratch_take_zero(&w, n * Wd, MEM_WORKSPACE, "hunyuanvideo15.byt5.da");
    float *db = scratch_take_zero(&w, n * Wd, MEM_WORKSPACE, "hunyuanvideo15.byt5.db");
    float *dn = scratch_take_zero(&w, n * E, MEM_WORKSPACE, "hunyuanvideo15.byt5.dnorm");
    if (w.status) return scratch_end(&w);
    if (!w.status) w.status = lin_backward(ps, m->pool, &y->l3, da, dout, y->g2, n);
    gelu_erf_backward(db, da, y->h2, n * Wd);
    zero_bytes(da, (size_t)(n * Wd) * sizeof(float));
    if (!w.status) w.status = lin_backward(ps, m->pool, &y->l2, da, db, y->g1, n);
    zero_bytes(db, (size_t)(n * Wd) * sizeof(float));
    gelu_erf_backward(db, da, y->h1, n * Wd);
    if (!w.status) w.status = lin_backward(ps, m->pool, &y->l1, dn, db, y->n, n);
    layernorm_backward(NULL, PG(y->nw), PG(y->nb), dn, y->in, PW(y->nw), n, E, &y->stats);
    return scratch_end(&w);
}

/* The refiner: c_r = timestep_embedder(t) + text_embedder(masked mean of the caption), cs_r = SiLU(c_r); its
 * blocks on proj_in(caption) into out (B L, D). */
static st_status refiner_run(model *m, const float *timesteps, const float *cond, float *out, bool train)
{
    hv_model *d = hv_of(m);
    dual_step *s = &d->b.step;
    const int64_t B = m->shape.batch, L = m->cfg.text_len, D = m->cfg.hidden;
    st_status st = temb_forward(m, &d->rt, timesteps);
    masked_mean(m, d->rp.freq, s->text_in, cond);
    if (!st) st = temb_mlp_forward(m, &d->rp);
    if (st) return st;
    add_to(d->rt.c, d->rp.c, B * D);
    silu_forward(d->rcs, d->rt.c, B * D);
    float *h = model_take(m, &st, B * L * D, "hunyuanvideo.refiner.x", false);
    d->ref[0].x = h; /* each block owns its input */
    if (!st) st = lin_forward(m->params, m->pool, &d->proj_in, h, s->text_in, B * L);
    for (int r = 0; r < d->n_ref && !st; r++) {
        float *y = r + 1 < d->n_ref ? model_take(m, &st, B * L * D, "hunyuanvideo.refiner.x", false) : out;
        if (r + 1 < d->n_ref) d->ref[r + 1].x = y;
        if (!st) st = refiner_forward(m, &d->ref[r], d->ref[r].x, y, train);
    }
    return st;
}

static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    hv_model *d = hv_of(m);
    dual_step *s = &d->b.step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = c->text_len, L2 = c->text2_len, Lt = m->shape.text, T = m->shape.tokens;
    const int64_t S = Lt + T, D = c->hidden, hd = D / c->heads;
    const int64_t P = model_patch_dim(c), Pin = (c->channels + c->cond_channels) * c->patch_t * c->patch * c->patch;
    st_status st = ST_OK;
    dual_take_tokens(m, &st, cond);
    dual_take_c(m, &st, train, &d->t, guidance(m), pooled(m));
    temb_take_path(m, &d->rt, &st);
    temb_take_path(m, &d->rp, &st);
    model_hold(m, &st, &d->rcs, B * D, "hunyuanvideo.refiner.cs", false);
    if (train) model_hold(m, &st, &d->drcs, B * D, "hunyuanvideo.refiner.dcs", true);
    model_hold(m, &st, &d->key_bias, B * S, "hunyuanvideo.key_bias", false);
    model_hold(m, &st, &d->ref_bias, B * L, "hunyuanvideo.refiner.key_bias", false);
    model_hold(m, &st, &m->ctx.rope, S * hd, "hunyuanvideo.rope", false);
    if (d->v15) {
        model_hold(m, &st, &d->type_idx, B * Lt, "hunyuanvideo15.cond_type", false);
        model_hold(m, &st, &d->refined, B * L * D, "hunyuanvideo15.refined", false);
        if (Pin != P) model_hold(m, &st, &d->patches_in, B * T * Pin, "hunyuanvideo15.patches", true);
    }
    if (!st) st = model_host_loop(m, d->key_bias, positions_and_masks, cond, S * 3, "hunyuanvideo.position_ids");
    if (st) return st;
    d->mask = (attn_mask){.key_bias = d->key_bias, .batch_stride = S};
    d->ref_mask = (attn_mask){.key_bias = d->ref_bias, .batch_stride = L};
    m->ctx.mask = &d->mask;

    if (d->patches_in) { /* the condition channels' features follow the latent's in every patch, and are zero */
        const patch_shape ps = model_patches(m);
        patchify_forward(s->patches, x, &ps);
        copy_rows(d->patches_in, Pin, s->patches, P, B * T, P);
        linear_forward(s->img, d->patches_in, PW(d->p_x_w), PW(d->p_x_b), B * T, Pin, D);
    } else dual_embed_image(m, x, d->p_x_w, d->p_x_b);
    if ((st = dual_c_forward(m, timesteps, cond, &d->t, guidance(m), pooled(m)))) return st;
    if (!d->v15) st = refiner_run(m, timesteps, cond, s->txt, train);
    else { /* the text stream: [ByT5's tokens; the refined caption], plus cond_type_embed rows 1 and 0 */
        float *glyphs = NULL;
        if (!(st = pool_alloc(m->pool, (size_t)(B * L2 * D) * sizeof(float), MEM_WORKSPACE, "hunyuanvideo15.glyphs",
                              (void **)&glyphs)) &&
            !(st = byt5_forward(m, cond, glyphs, train)) && !(st = refiner_run(m, timesteps, cond, d->refined, train))) {
            model_rows_scatter(m, s->txt, glyphs, Lt, 0, L2);
            model_rows_scatter(m, s->txt, d->refined, Lt, L2, L);
            zero_floats(d->type_idx, B * Lt); /* type 1 for the glyphs, 0 for the caption */
            for (int64_t b = 0; b < B; b++) add_scalar(d->type_idx + b * Lt, L2, 1.0f);
            pool_free(m->pool, glyphs);
            glyphs = NULL;
            float *types = NULL;
            if (!(st = pool_alloc(m->pool, (size_t)(B * Lt * D) * sizeof(float), MEM_WORKSPACE,
                                  "hunyuanvideo15.cond_type_rows", (void **)&types))) {
                st = embedding_forward(types, PW(d->p_cond_type), d->type_idx, B * Lt, 3, D);
                add_to(s->txt, types, B * Lt * D);
                pool_free(m->pool, types);
            }
        }
        pool_free(m->pool, glyphs);
    }
    if (!st && !train) { /* nothing reads the text side's tensors again */
        for (int r = 0; r < d->n_ref; r++) refiner_release(m, &d->ref[r]);
        byt5_release(m, &d->byt5);
        pool_free(m->pool, s->text_in);
        s->text_in = NULL;
    }
    return st;
}

static st_status embed_backward(model *m, float *dimg, const float *dtxt)
{
    hv_model *d = hv_of(m);
    dual_step *s = &d->b.step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = c->text_len, L2 = c->text2_len, Lt = m->shape.text, D = c->hidden;
    const int64_t N = B * m->shape.tokens, Pin = (c->channels + c->cond_channels) * c->patch_t * c->patch * c->patch;
    linear_backward(NULL, PG(d->p_x_w), PG(d->p_x_b), dimg, d->patches_in ? d->patches_in : s->patches, PW(d->p_x_w),
                    N, Pin, D);
    st_status st = dual_c_backward(m, &d->t, guidance(m), pooled(m));
    scratch w = {.pool = m->pool};
    float *dx = scratch_take(&w, B * L * D, MEM_WORKSPACE, "hunyuanvideo.refiner.dx");
    float *dc = scratch_take_zero(&w, B * D, MEM_WORKSPACE, "hunyuanvideo.refiner.dc");
    float *dg = d->v15 ? scratch_take(&w, B * L2 * D, MEM_WORKSPACE, "hunyuanvideo15.dglyphs") : NULL;
    if (w.status) return st ? st : scratch_end(&w);
    model_rows_gather(m, dx, dtxt, Lt, L2, L); /* the caption's rows of the text stream (all of 1.0's) */
    if (d->v15) {
        embedding_backward(PG(d->p_cond_type), dtxt, d->type_idx, B * Lt, D);
        model_rows_gather(m, dg, dtxt, Lt, 0, L2);
        if (!st) st = byt5_backward(m, dg);
    }
    for (int r = d->n_ref - 1; r >= 0 && !st; r--) st = refiner_backward(m, &d->ref[r], dx);
    if (!st) st = lin_backward(m->params, m->pool, &d->proj_in, NULL, dx, s->text_in, B * L);
    if (!st) st = temb_silu_backward(m, &d->rt, dc, d->drcs);
    if (!st) st = temb_backward(m, &d->rp, dc);
    const st_status end = scratch_end(&w);
    return st ? st : end;
}

const model_family hunyuan_video_family = {
    .create = hv_create, .impl_size = sizeof(hv_model), DUAL_STEPS, .init_of = hv_init_of,
};
