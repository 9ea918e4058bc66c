/* AuraFlow, in diffusers' AuraFlowTransformer2DModel's names and layouts (docs/FAMILIES.md): the image's patches
 * (pos_embed.proj, plus the learned position table's rows of the grid, cropped from the table's centre) and the
 * text as 8 learned register tokens followed by the text encoder's tokens through context_embedder, as two
 * streams through `depth` joint blocks, then [text; image] as one sequence through `single_depth` single blocks,
 * and the image rows through norm_out (a modulation without LayerNorm) and proj_out (rows in DiT's (i, j, c)
 * order). No rotary embedding and no pooled text: the conditioning vector is the timestep's embedding alone.
 * Nothing but pos_embed.proj and the timestep MLP has a bias. */
#include "auraflow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AF_REGISTERS 8

typedef struct af_step {
    bool active;
    float *text_in;             /* (B Lt, text_dim): context_embedder's input, kept while its weight trains */
    float *patches, *img, *txt; /* (N, C p p); the first state (N, D), (B L, D) until the executor takes it */
    block_state last;           /* the single sequence's output */
    seq_run *run[2];
    float *xh; /* the image rows of the last state (N, D): the final layer's input */
} af_step;

typedef struct af_model {
    af_block *blocks; /* joint, then single */
    block *seq_blocks;
    temb t;
    int p_reg, p_pos, p_x_w, p_x_b, p_ctx_w;
    final_layer final;
    af_step step;
} af_model;

static af_model *af_of(model *m) { return m->impl; }

/* The table's (row, column) of the grid's top-left token: AuraFlowPatchEmbed centres the grid in it. */
static int64_t table_start(const model_config *c) { return c->pos_embed_max / 2 - c->resolution / c->patch / 2; }

static st_status af_create(model *m)
{
    const model_config *c = &m->cfg;
    if (c->single_depth < 1)
        return st_fail(ST_ERR_INVALID, "num_single_dit_layers: %lld; auraflow needs at least 1 single block",
                       (long long)c->single_depth);
    const int nd = (int)c->depth, ns = (int)c->single_depth;
    af_model *d = calloc(1, sizeof *d);
    m->impl = d;
    if (d) d->blocks = calloc((size_t)(nd + ns), sizeof *d->blocks);
    if (d && d->blocks) d->seq_blocks = calloc((size_t)(nd + ns), sizeof *d->seq_blocks);
    if (!d || !d->seq_blocks) return st_host_oom("the AuraFlow model");
    m->shape.text = c->text_len + AF_REGISTERS;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch;
    /* in the order of AuraFlowTransformer2DModel's state_dict */
    d->p_reg = param_add(s, "register_tokens", 3, (int64_t[]){1, AF_REGISTERS, D}, full);
    d->p_pos = param_add(s, "pos_embed.pos_embed", 3, (int64_t[]){1, c->pos_embed_max * c->pos_embed_max, D}, full);
    d->p_x_w = param_add(s, "pos_embed.proj.weight", 2, (int64_t[]){D, P}, full);
    d->p_x_b = param_add(s, "pos_embed.proj.bias", 1, (int64_t[]){D}, full);
    d->p_ctx_w = param_add(s, "context_embedder.weight", 2, (int64_t[]){D, c->text_dim}, full);
    temb_register(s, &d->t, "time_step_proj.linear_1", "time_step_proj.linear_2", DIT_FREQ_DIM, D, full);
    for (int i = 0; i < nd; i++) af_joint_register(s, &d->blocks[i], i, c);
    for (int i = 0; i < ns; i++) af_single_register(s, &d->blocks[nd + i], i, c);
    d->final = (final_layer){.ada_w = param_add(s, "norm_out.linear.weight", 2, (int64_t[]){2 * D, D}, full),
                             .ada_b = -1,
                             .out_w = param_add(s, "proj_out.weight", 2, (int64_t[]){P, D}, full),
                             .out_b = -1,
                             .scale_first = true, .no_norm = true, .order = PATCH_DIT};
    m->n_seq = 2;
    m->seq[0] = (block_seq){.name = "joint_transformer_blocks", .n = nd, .blocks = d->seq_blocks, .state_n = 2,
                            .pool = m->pool, .state_names = {"image stream", "text stream"}};
    m->seq[1] = (block_seq){
        .name = "single_transformer_blocks", .n = ns, .blocks = d->seq_blocks + nd, .state_n = 1, .pool = m->pool};
    for (int i = 0; i < nd + ns; i++) {
        d->blocks[i].m = m;
        d->seq_blocks[i] = (block){.kind = i < nd ? &af_joint_kind : &af_single_kind, .self = &d->blocks[i],
                                   .index = i < nd ? i : i - nd};
    }
    return ST_OK;
}

static void af_destroy(model *m)
{
    af_model *d = af_of(m);
    if (d) free(d->blocks), free(d->seq_blocks);
    free(d);
}

static void af_set_batch(model *m, int64_t batch)
{
    m->shape.batch = batch;
    const int64_t D = m->shape.hidden;
    m->seq[0].state_numel[0] = batch * m->shape.tokens * D;
    m->seq[0].state_numel[1] = batch * m->shape.text * D;
    m->seq[1].state_numel[0] = batch * (m->shape.tokens + m->shape.text) * D;
}

/* adaLN-Zero (every modulation and the final projection zero), N(0, 0.02) embedding MLPs, position table and
 * register tokens, xavier-uniform elsewhere. */
static param_init af_init_of(const char *name)
{
    if (strstr(name, "norm1.linear") || strstr(name, "norm1_context.linear") || strstr(name, "norm_out.linear") ||
        !strcmp(name, "proj_out.weight"))
        return INIT_ZERO;
    if (strstr(name, "time_step_proj.") || !strcmp(name, "register_tokens") || !strcmp(name, "pos_embed.pos_embed"))
        return INIT_NORMAL;
    return INIT_XAVIER;
}

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

static void af_release(model *m)
{
    af_model *d = af_of(m);
    if (!d || !d->step.active) return;
    af_step *s = &d->step;
    seq_release(s->run[1]);
    seq_release(s->run[0]);
    state_free(m->pool, &s->last);
    final_release(m, &d->final);
    temb_release(m, &d->t);
    void *bufs[] = {s->xh, s->txt, s->img, s->patches, s->text_in};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) pool_free(m->pool, bufs[i]);
    *s = (af_step){0};
}

/* The position table's rows of the grid, added to (or, backward, accumulated from) each sample's image rows:
 * grid row r is table row (r0 + r) from column r0 on, one run of `grid` rows. */
static void pos_rows(model *m, float *img, float *table, bool backward)
{
    const model_config *c = &m->cfg;
    const int64_t D = c->hidden, grid = c->resolution / c->patch, r0 = table_start(c), T = grid * grid;
    for (int64_t b = 0; b < m->shape.batch; b++)
        for (int64_t r = 0; r < grid; r++) {
            float *x = img + (b * T + r * grid) * D, *t = table + ((r0 + r) * c->pos_embed_max + r0) * D;
            if (backward) add_to(t, x, grid * D);
            else add_to(x, t, grid * D);
        }
}

/* The image tokens with their positions, the register and text tokens, and c = the timestep's embedding. */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    af_model *d = af_of(m);
    af_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, Lt = c->text_len, L = m->shape.text, T = m->shape.tokens, D = c->hidden;
    const int64_t N = B * T, P = c->channels * c->patch * c->patch, Dt = c->text_dim, K = model_cond_len(c);
    st_status st = ST_OK;
    s->text_in = model_take(m, &st, B * Lt * Dt, "auraflow.text_in", false);
    s->patches = model_take(m, &st, N * P, "auraflow.patches", false);
    s->img = model_take(m, &st, N * D, "auraflow.image", false);
    s->txt = model_take(m, &st, B * L * D, "auraflow.text", false);
    temb_take(m, &d->t, &st, train);
    float *ctx = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(B * Lt * D) * sizeof(float), MEM_WORKSPACE, "auraflow.context",
                             (void **)&ctx);
    if (st) return st;
    copy_rows(s->text_in, Lt * Dt, cond, K, B, Lt * Dt);
    linear_forward(ctx, s->text_in, PW(p_ctx_w), NULL, B * Lt, Dt, D);
    copy_rows(s->txt, L * D, PW(p_reg), 0, B, AF_REGISTERS * D);
    copy_rows(s->txt + AF_REGISTERS * D, L * D, ctx, Lt * D, B, Lt * D);
    pool_free(m->pool, ctx);
    if (!train || !PG(p_ctx_w)) { /* only context_embedder's weight gradient reads it again */
        pool_free(m->pool, s->text_in);
        s->text_in = NULL;
    }
    patchify_forward(s->patches, x, B, c->channels, c->resolution, c->resolution, c->patch);
    linear_forward(s->img, s->patches, PW(p_x_w), PW(p_x_b), N, P, D);
    pos_rows(m, s->img, PW(p_pos), false);
    temb_forward(m, &d->t, timesteps);
    silu_forward(m->ctx.cs, d->t.c, B * D);
    return ST_OK;
}

/* A stream's rows (B, n, D) into / out of the joint (B, S, D) rows, starting at token `at`. */
static void joint_rows(model *m, float *joint, float *x, int64_t n, int64_t at, bool into)
{
    const int64_t D = m->shape.hidden, S = m->shape.tokens + m->shape.text;
    if (into) copy_rows(joint + at * D, S * D, x, n * D, m->shape.batch, n * D);
    else copy_rows(x, n * D, joint + at * D, S * D, m->shape.batch, n * D);
}

static st_status af_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    af_model *d = af_of(m);
    af_step *s = &d->step;
    if (s->active) return st_fail(ST_ERR_INTERNAL, "model_forward: the previous forward was not released");
    s->active = true;
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = m->shape.hidden;
    st_status st = embed_forward(m, x, timesteps, cond, train);
    block_state streams = {0};
    if (!st) {
        block_state first = {.n = 2, .t = {s->img, s->txt}};
        s->img = s->txt = NULL; /* the executor owns the first state now */
        st = seq_forward(&m->seq[0], &m->plan[0], model_offload(m), &first, train, &streams, &s->run[0]);
    }
    float *joint = NULL;
    if (!st) joint = model_take(m, &st, B * (T + L) * D, "auraflow.joint", false);
    if (!st) {
        joint_rows(m, joint, streams.t[0], T, L, true);
        joint_rows(m, joint, streams.t[1], L, 0, true);
    }
    state_free(m->pool, &streams);
    if (!st) {
        block_state first = {.n = 1, .t = {joint}};
        st = seq_forward(&m->seq[1], &m->plan[1], model_offload(m), &first, train, &s->last, &s->run[1]);
    }
    if (!st) s->xh = model_take(m, &st, B * T * D, "auraflow.final.x", false);
    if (!st) { /* the final layer reads the image rows of the last state: those are copied out and the state goes */
        joint_rows(m, s->last.t[0], s->xh, T, L, false);
        state_free(m->pool, &s->last);
        st = final_forward(m, &d->final, s->xh);
    }
    if (st) {
        af_release(m);
        return st;
    }
    *pred = d->final.pred;
    return ST_OK;
}

static st_status embed_backward(model *m, float *dimg, const float *dtxt)
{
    af_model *d = af_of(m);
    af_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, Lt = c->text_len, L = m->shape.text, D = c->hidden, N = B * m->shape.tokens;
    const int64_t P = c->channels * c->patch * c->patch;
    linear_backward(NULL, PG(p_x_w), PG(p_x_b), dimg, s->patches, PW(p_x_w), N, P, D);
    if (PG(p_pos)) pos_rows(m, dimg, PG(p_pos), true);
    for (int64_t b = 0; PG(p_reg) && b < B; b++) add_to(PG(p_reg), dtxt + b * L * D, AF_REGISTERS * D);
    scratch k = {.pool = m->pool};
    float *dc = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "auraflow.dc");
    float *dctx = s->text_in ? scratch_take(&k, B * Lt * D, MEM_WORKSPACE, "auraflow.dcontext") : NULL;
    if (k.status) return scratch_end(&k);
    if (s->text_in) {
        copy_rows(dctx, Lt * D, dtxt + AF_REGISTERS * D, L * D, B, Lt * D);
        linear_backward(NULL, PG(p_ctx_w), NULL, dctx, s->text_in, PW(p_ctx_w), B * Lt, c->text_dim, D);
    }
    silu_backward(dc, m->ctx.dcs, d->t.c, B * D);
    k.status = temb_backward(m, &d->t, dc);
    return scratch_end(&k);
}

static st_status af_backward(model *m, const float *dpred)
{
    af_model *d = af_of(m);
    af_step *s = &d->step;
    if (!s->active || !s->run[0])
        return st_fail(ST_ERR_INTERNAL, "model_backward: no training forward to go back through");
    const int64_t B = m->shape.batch, T = m->shape.tokens, L = m->shape.text, D = m->shape.hidden;
    st_status st = ST_OK;
    float *dx = model_take(m, &st, B * T * D, "auraflow.dstate", true);
    if (!st) st = final_backward(m, &d->final, s->xh, dpred, dx);
    final_backward_done(m, &d->final);
    pool_free(m->pool, s->xh);
    s->xh = NULL;
    float *dj = model_take(m, &st, B * (T + L) * D, "auraflow.djoint", true);
    if (!st) joint_rows(m, dj, dx, T, L, true);
    pool_free(m->pool, dx);
    if (!st) { /* seq_backward releases the run, whatever it returns; af_release does otherwise */
        st = seq_backward(s->run[1], &(block_state){.n = 1, .t = {dj}}, NULL);
        s->run[1] = NULL;
    }
    float *dimg = model_take(m, &st, B * T * D, "auraflow.dimage", false);
    float *dtxt = model_take(m, &st, B * L * D, "auraflow.dtext", false);
    if (!st) {
        joint_rows(m, dj, dimg, T, L, false);
        joint_rows(m, dj, dtxt, L, 0, false);
    }
    pool_free(m->pool, dj);
    if (!st) {
        st = seq_backward(s->run[0], &(block_state){.n = 2, .t = {dimg, dtxt}}, NULL);
        s->run[0] = NULL;
    }
    if (!st) st = embed_backward(m, dimg, dtxt);
    pool_free(m->pool, dtxt);
    pool_free(m->pool, dimg);
    af_release(m);
    return st;
}

const model_family auraflow_family = {
    .name = "auraflow",
    .create = af_create,
    .destroy = af_destroy,
    .set_batch = af_set_batch,
    .forward = af_forward,
    .backward = af_backward,
    .release = af_release,
    .init_of = af_init_of,
};
