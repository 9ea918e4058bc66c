/* Flux.2, in diffusers' Flux2Transformer2DModel's names and layouts (docs/FAMILIES.md): the text encoder's tokens
 * (context_embedder) and the latent's 2x2 patches (x_embedder, Flux's packing) as two streams through `depth` double
 * blocks, then [text; image] as one sequence through `single_depth` single blocks, and the image rows through
 * norm_out (AdaLayerNormContinuous: scale, shift) and proj_out (rows in the packing's (c, i, j) order). No bias
 * anywhere. c = timestep_embedder(1000 t) + guidance_embedder(1000 g) (dev: guidance_embeds), each a
 * Linear-SiLU-Linear on `time_channels` sinusoidal features; from SiLU(c) the model makes the three shared
 * modulations once (flux2.h), which every block reads. Rotary embedding by 4-axis position ids (t, h, w, l) at
 * theta 2000: text token k at (0, 0, 0, k), image token (r, q) at (0, r, q, 0). */
#include "flux2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct f2_step {
    bool active;
    float *text_in;             /* (B L, text_dim): context_embedder's input, kept while its weight trains */
    float *patches, *img, *txt; /* (N, C p p); the first state (N, D), (B L, D) until the executor takes it */
    float *guidance;            /* (B): 1000 * the guidance value */
    block_state last;           /* the single sequence's output */
    seq_run *run[2];
    float *xh; /* the image rows of the last state (N, D): the final layer's input */
} f2_step;

typedef struct f2_model {
    f2_block *blocks; /* double, then single */
    block *seq_blocks;
    temb t, g; /* the timestep's and (guidance_embeds) the guidance's embeddings */
    int p_mod[F2_MOD_N], p_x_w, p_ctx_w;
    f2_shared sh;
    final_layer final;
    f2_step step;
} f2_model;

static f2_model *f2_of(model *m) { return m->impl; }

static const char *const mod_names[F2_MOD_N] = {"double_stream_modulation_img.linear.weight",
                                                "double_stream_modulation_txt.linear.weight",
                                                "single_stream_modulation.linear.weight"};
static const int64_t mod_width[F2_MOD_N] = {6, 6, 3}; /* in D */

/* A TimestepEmbedding without biases (sample_proj_bias False): temb's path with none. */
static void temb_register_nobias(param_set *s, temb *t, const char *prefix, int64_t in, int64_t D, bool trainable)
{
    char n[PARAM_NAME_MAX];
    t->in = in;
    snprintf(n, sizeof n, "%s.linear_1.weight", prefix);
    t->w0 = param_add(s, n, 2, (int64_t[]){D, in}, trainable);
    snprintf(n, sizeof n, "%s.linear_2.weight", prefix);
    t->w2 = param_add(s, n, 2, (int64_t[]){D, D}, trainable);
    t->b0 = t->b2 = -1;
}

static st_status f2_create(model *m)
{
    const model_config *c = &m->cfg;
    if (c->single_depth < 1)
        return st_fail(ST_ERR_INVALID, "num_single_layers: %lld; flux2 needs at least 1 single block",
                       (long long)c->single_depth);
    const int nd = (int)c->depth, ns = (int)c->single_depth;
    f2_model *d = calloc(1, sizeof *d);
    m->impl = d;
    if (d) d->blocks = calloc((size_t)(nd + ns), sizeof *d->blocks);
    if (d && d->blocks) d->seq_blocks = calloc((size_t)(nd + ns), sizeof *d->seq_blocks);
    if (!d || !d->seq_blocks) return st_host_oom("the Flux.2 model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch;
    /* in the order of Flux2Transformer2DModel's state_dict */
    temb_register_nobias(s, &d->t, "time_guidance_embed.timestep_embedder", c->time_channels, D, full);
    if (c->guidance_embeds)
        temb_register_nobias(s, &d->g, "time_guidance_embed.guidance_embedder", c->time_channels, D, full);
    for (int i = 0; i < F2_MOD_N; i++) d->p_mod[i] = param_add(s, mod_names[i], 2, (int64_t[]){mod_width[i] * D, D}, full);
    d->p_x_w = param_add(s, "x_embedder.weight", 2, (int64_t[]){D, P}, full);
    d->p_ctx_w = param_add(s, "context_embedder.weight", 2, (int64_t[]){D, c->text_dim}, full);
    for (int i = 0; i < nd; i++) f2_double_register(s, &d->blocks[i], i, c);
    for (int i = 0; i < ns; i++) f2_single_register(s, &d->blocks[nd + i], i, c);
    d->final = (final_layer){.ada_w = param_add(s, "norm_out.linear.weight", 2, (int64_t[]){2 * D, D}, full),
                             .ada_b = -1,
                             .out_w = param_add(s, "proj_out.weight", 2, (int64_t[]){P, D}, full),
                             .out_b = -1,
                             .scale_first = true, .order = PATCH_CONV};
    m->n_seq = 2;
    m->seq[0] = (block_seq){.name = "transformer_blocks", .n = nd, .blocks = d->seq_blocks, .state_n = 2,
                            .pool = m->pool, .state_names = {"image stream", "text stream"}};
    m->seq[1] = (block_seq){
        .name = "single_transformer_blocks", .n = ns, .blocks = d->seq_blocks + nd, .state_n = 1, .pool = m->pool};
    for (int i = 0; i < nd + ns; i++) {
        d->blocks[i].m = m;
        d->blocks[i].sh = &d->sh;
        d->seq_blocks[i] = (block){.kind = i < nd ? &f2_double_kind : &f2_single_kind, .self = &d->blocks[i],
                                   .index = i < nd ? i : i - nd};
    }
    return ST_OK;
}

static void f2_destroy(model *m)
{
    f2_model *d = f2_of(m);
    if (d) free(d->blocks), free(d->seq_blocks);
    free(d);
}

static void f2_set_batch(model *m, int64_t batch)
{
    m->shape.batch = batch;
    const int64_t D = m->shape.hidden;
    m->seq[0].state_numel[0] = batch * m->shape.tokens * D;
    m->seq[0].state_numel[1] = batch * m->shape.text * D;
    m->seq[1].state_numel[0] = batch * (m->shape.tokens + m->shape.text) * D;
}

/* Zero modulations and final projection (adaLN-Zero), RMSNorm weights one, N(0, 0.02) embedding MLPs,
 * xavier-uniform elsewhere. */
static param_init f2_init_of(const char *name)
{
    if (strstr(name, "_modulation_") || strstr(name, "single_stream_modulation") || strstr(name, "norm_out.linear") ||
        !strcmp(name, "proj_out.weight"))
        return INIT_ZERO;
    if (strstr(name, ".norm_")) return INIT_ONE;
    if (strstr(name, "time_guidance_embed.")) return INIT_NORMAL;
    return INIT_XAVIER;
}

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

static void f2_release(model *m)
{
    f2_model *d = f2_of(m);
    if (!d || !d->step.active) return;
    f2_step *s = &d->step;
    seq_release(s->run[1]);
    seq_release(s->run[0]);
    state_free(m->pool, &s->last);
    final_release(m, &d->final);
    pool_free(m->pool, m->ctx.rope);
    m->ctx.rope = NULL;
    for (int i = 0; i < F2_MOD_N; i++) {
        pool_free(m->pool, d->sh.dmod[i]);
        pool_free(m->pool, d->sh.mod[i]);
        d->sh.mod[i] = d->sh.dmod[i] = NULL;
    }
    temb_release_path(m, &d->g);
    temb_release(m, &d->t);
    void *bufs[] = {s->xh, s->guidance, s->txt, s->img, s->patches, s->text_in};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) pool_free(m->pool, bufs[i]);
    *s = (f2_step){0};
}

/* The image and text tokens, the rotary table of their positions, c = timestep + guidance embeddings,
 * cs = SiLU(c) and the shared modulations of cs. */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    f2_model *d = f2_of(m);
    f2_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t P = c->channels * c->patch * c->patch, Dt = c->text_dim, hd = D / c->heads;
    const int64_t K = model_cond_len(c), grid = c->resolution / c->patch;
    st_status st = ST_OK;
    s->text_in = model_take(m, &st, B * L * Dt, "flux2.text_in", false);
    s->patches = model_take(m, &st, N * P, "flux2.patches", false);
    s->img = model_take(m, &st, N * D, "flux2.image", false);
    s->txt = model_take(m, &st, B * L * D, "flux2.text", false);
    temb_take(m, &d->t, &st, train);
    if (c->guidance_embeds) {
        s->guidance = model_take(m, &st, B, "flux2.guidance", false);
        temb_take_path(m, &d->g, &st);
    }
    for (int i = 0; i < F2_MOD_N; i++) {
        d->sh.mod[i] = model_take(m, &st, B * mod_width[i] * D, "flux2.modulation", false);
        if (train) d->sh.dmod[i] = model_take(m, &st, B * mod_width[i] * D, "flux2.dmodulation", true);
    }
    m->ctx.rope = model_take(m, &st, (L + T) * hd, "flux2.rope", false);
    float *ids = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)((L + T) * 4) * sizeof(float), MEM_WORKSPACE, "flux2.position_ids",
                             (void **)&ids);
    if (st) return st;
    position_ids_flux2(ids, L, grid, grid);
    rope_table(m->ctx.rope, ids, L + T, 4, c->rope_axes, F2_ROPE_THETA);
    pool_free(m->pool, ids);

    copy_rows(s->text_in, L * Dt, cond, K, B, L * Dt);
    linear_forward(s->txt, s->text_in, PW(p_ctx_w), NULL, B * L, Dt, D);
    if (!train || !PG(p_ctx_w)) { /* only context_embedder's weight gradient reads it again */
        pool_free(m->pool, s->text_in);
        s->text_in = NULL;
    }
    patchify_forward(s->patches, x, B, c->channels, c->resolution, c->resolution, c->patch);
    linear_forward(s->img, s->patches, PW(p_x_w), NULL, N, P, D);
    temb_forward(m, &d->t, timesteps);
    if (c->guidance_embeds) { /* 1000 g in float, as the model scales it */
        copy_rows(s->guidance, 1, cond + L * Dt + c->pooled_dim, K, B, 1);
        scale_by(s->guidance, B, 1000.0f);
        temb_forward(m, &d->g, s->guidance);
        add_to(d->t.c, d->g.c, B * D);
    }
    silu_forward(m->ctx.cs, d->t.c, B * D);
    for (int i = 0; i < F2_MOD_N; i++) linear_forward(d->sh.mod[i], m->ctx.cs, PW(p_mod[i]), NULL, B, D, mod_width[i] * D);
    return ST_OK;
}

static st_status f2_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    f2_model *d = f2_of(m);
    f2_step *s = &d->step;
    if (s->active) return st_fail(ST_ERR_INTERNAL, "model_forward: the previous forward was not released");
    s->active = true;
    mm_dims dm = mm_dims_of(m);
    st_status st = embed_forward(m, x, timesteps, cond, train);
    block_state streams = {0};
    if (!st) {
        block_state first = {.n = 2, .t = {s->img, s->txt}};
        s->img = s->txt = NULL; /* the executor owns the first state now */
        st = seq_forward(&m->seq[0], &m->plan[0], model_offload(m), &first, train, &streams, &s->run[0]);
    }
    float *joint = NULL;
    if (!st) joint = model_take(m, &st, dm.J * dm.D, "flux2.joint", false);
    if (!st) {
        mm_to_joint(&dm, 0, joint, streams.t[0]);
        mm_to_joint(&dm, 1, joint, streams.t[1]);
    }
    state_free(m->pool, &streams);
    if (!st) {
        block_state first = {.n = 1, .t = {joint}};
        st = seq_forward(&m->seq[1], &m->plan[1], model_offload(m), &first, train, &s->last, &s->run[1]);
    }
    if (!st) s->xh = model_take(m, &st, dm.rows[0] * dm.D, "flux2.final.x", false);
    if (!st) { /* the final layer reads the image rows of the last state: those are copied out and the state goes */
        mm_from_joint(&dm, 0, s->xh, s->last.t[0]);
        state_free(m->pool, &s->last);
        st = final_forward(m, &d->final, s->xh);
    }
    if (st) {
        f2_release(m);
        return st;
    }
    *pred = d->final.pred;
    return ST_OK;
}

static st_status embed_backward(model *m, const float *dimg, const float *dtxt)
{
    f2_model *d = f2_of(m);
    f2_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, D = c->hidden, N = B * m->shape.tokens;
    const int64_t P = c->channels * c->patch * c->patch;
    linear_backward(NULL, PG(p_x_w), NULL, dimg, s->patches, PW(p_x_w), N, P, D);
    if (s->text_in) linear_backward(NULL, PG(p_ctx_w), NULL, dtxt, s->text_in, PW(p_ctx_w), B * L, c->text_dim, D);
    for (int i = 0; i < F2_MOD_N; i++) /* every block's modulation gradient is in: on to SiLU(c) */
        linear_backward(m->ctx.dcs, PG(p_mod[i]), NULL, d->sh.dmod[i], m->ctx.cs, PW(p_mod[i]), B, D, mod_width[i] * D);
    scratch k = {.pool = m->pool};
    float *dc = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "flux2.dc");
    if (k.status) return scratch_end(&k);
    silu_backward(dc, m->ctx.dcs, d->t.c, B * D);
    k.status = temb_backward(m, &d->t, dc);
    if (!k.status && c->guidance_embeds) k.status = temb_backward(m, &d->g, dc);
    return scratch_end(&k);
}

static st_status f2_backward(model *m, const float *dpred)
{
    f2_model *d = f2_of(m);
    f2_step *s = &d->step;
    if (!s->active || !s->run[0]) return st_fail(ST_ERR_INTERNAL, "model_backward: no training forward to go back through");
    mm_dims dm = mm_dims_of(m);
    st_status st = ST_OK;
    float *dx = model_take(m, &st, dm.rows[0] * dm.D, "flux2.dstate", true);
    if (!st) st = final_backward(m, &d->final, s->xh, dpred, dx);
    final_backward_done(m, &d->final);
    pool_free(m->pool, s->xh);
    s->xh = NULL;
    float *dj = model_take(m, &st, dm.J * dm.D, "flux2.djoint", true);
    if (!st) mm_to_joint(&dm, 0, dj, dx);
    pool_free(m->pool, dx);
    if (!st) { /* seq_backward releases the run, whatever it returns; f2_release does otherwise */
        st = seq_backward(s->run[1], &(block_state){.n = 1, .t = {dj}}, NULL);
        s->run[1] = NULL;
    }
    float *dimg = model_take(m, &st, dm.rows[0] * dm.D, "flux2.dimage", false);
    float *dtxt = model_take(m, &st, dm.rows[1] * dm.D, "flux2.dtext", false);
    if (!st) {
        mm_from_joint(&dm, 0, dimg, dj);
        mm_from_joint(&dm, 1, dtxt, dj);
    }
    pool_free(m->pool, dj);
    if (!st) {
        st = seq_backward(s->run[0], &(block_state){.n = 2, .t = {dimg, dtxt}}, NULL);
        s->run[0] = NULL;
    }
    if (!st) st = embed_backward(m, dimg, dtxt);
    pool_free(m->pool, dtxt);
    pool_free(m->pool, dimg);
    f2_release(m);
    return st;
}

const model_family flux2_family = {
    .name = "flux2",
    .create = f2_create,
    .destroy = f2_destroy,
    .set_batch = f2_set_batch,
    .forward = f2_forward,
    .backward = f2_backward,
    .release = f2_release,
    .init_of = f2_init_of,
};
