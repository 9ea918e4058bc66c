/* The qwen_image family: diffusers' QwenImageTransformer2DModel (Qwen-Image 1.0) in its names and layouts
 * (docs/FAMILIES.md). The text encoder's tokens (txt_norm, an RMSNorm over joint_attention_dim, then txt_in) and
 * the image's 2x2 patches in Flux's packing (img_in) as two streams through one sequence of double blocks
 * (mmdit_block.c's, under Qwen's names: img_mod / txt_mod, img_mlp / txt_mlp), then the image rows through
 * norm_out (scale, shift) and proj_out in the packing's (c, i, j) order. No single-stream blocks and no pooled
 * vector: c = timestep_embedder(Timesteps(scale 1000)), given here as 1000 sigma. Rotary embedding by centred
 * position ids (position_ids_centred) on three axes, and the text's padding keys are excluded from every query's
 * attention by the conditioning's mask (image keys always kept). The last block's text output reaches nothing:
 * its gradient is zero, as in diffusers. */
#include "mmdit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct qw_step {
    bool active;
    float *text_in;             /* (B L, text_dim): txt_norm's input, kept while its weight trains */
    float *normed;              /* (B L, text_dim): txt_in's input, kept while its weight trains */
    op_state norm_stats;        /* txt_norm's 1/rms per token, kept with text_in */
    float *patches, *img, *txt; /* (N, C p p); the first state (N, D), (B L, D) until the executor takes it */
    float *key_bias;            /* (B, L + T): 0 for a kept key, -inf for a padding token's */
    attn_mask mask;
    block_state last; /* the last block's output: image, text */
    seq_run *run;
} qw_step;

typedef struct qw_model {
    mm_block *blocks;
    block *seq_blocks;
    temb t;
    int p_norm, p_txt_w, p_txt_b, p_img_w, p_img_b;
    final_layer final;
    qw_step step;
} qw_model;

static qw_model *qw_of(model *m) { return m->impl; }

static st_status qw_create(model *m)
{
    const model_config *c = &m->cfg;
    const int n = (int)c->depth;
    qw_model *d = calloc(1, sizeof *d);
    m->impl = d;
    if (d) d->blocks = calloc((size_t)n, sizeof *d->blocks);
    if (d && d->blocks) d->seq_blocks = calloc((size_t)n, sizeof *d->seq_blocks);
    if (!d || !d->seq_blocks) return st_host_oom("the Qwen Image model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch;
    /* in the order of QwenImageTransformer2DModel's state_dict */
    temb_register(s, &d->t, "time_text_embed.timestep_embedder.linear_1", "time_text_embed.timestep_embedder.linear_2",
                  DIT_FREQ_DIM, D, full);
    d->p_norm = param_add(s, "txt_norm.weight", 1, (int64_t[]){c->text_dim}, full);
    d->p_img_w = param_add(s, "img_in.weight", 2, (int64_t[]){D, P}, full);
    d->p_img_b = param_add(s, "img_in.bias", 1, (int64_t[]){D}, full);
    d->p_txt_w = param_add(s, "txt_in.weight", 2, (int64_t[]){D, c->text_dim}, full);
    d->p_txt_b = param_add(s, "txt_in.bias", 1, (int64_t[]){D}, full);
    for (int i = 0; i < n; i++) {
        mm_block *b = &d->blocks[i];
        *b = (mm_block){.m = m, .qk_norm = true, .names = &mm_qwen_names};
        mm_double_register(s, b, i, c);
        d->seq_blocks[i] = (block){.kind = &mm_double_kind, .self = b, .index = i};
    }
    d->final = (final_layer){.ada_w = param_add(s, "norm_out.linear.weight", 2, (int64_t[]){2 * D, D}, full),
                             .ada_b = param_add(s, "norm_out.linear.bias", 1, (int64_t[]){2 * D}, full),
                             .out_w = param_add(s, "proj_out.weight", 2, (int64_t[]){P, D}, full),
                             .out_b = param_add(s, "proj_out.bias", 1, (int64_t[]){P}, full),
                             .scale_first = true, .order = PATCH_CONV};
    m->n_seq = 1;
    m->seq[0] = (block_seq){.name = "transformer_blocks", .n = n, .blocks = d->seq_blocks, .state_n = 2, .pool = m->pool,
                            .state_names = {"image stream", "text stream"}};
    return ST_OK;
}

static void qw_destroy(model *m)
{
    qw_model *d = qw_of(m);
    if (d) free(d->blocks), free(d->seq_blocks);
    free(d);
}

static void qw_set_batch(model *m, int64_t batch)
{
    m->shape.batch = batch;
    const int64_t D = m->shape.hidden;
    m->seq[0].state_numel[0] = batch * m->shape.tokens * D;
    m->seq[0].state_numel[1] = batch * m->shape.text * D;
}

/* adaLN-Zero (img_mod, txt_mod) and RMSNorm weights of one, as Flux's otherwise */
static param_init qw_init_of(const char *name)
{
    if (strstr(name, "_mod.1.")) return INIT_ZERO;
    if (!strcmp(name, "txt_norm.weight")) return INIT_ONE;
    return mm_init_of(name);
}

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

static void qw_release(model *m)
{
    qw_model *d = qw_of(m);
    if (!d || !d->step.active) return;
    qw_step *s = &d->step;
    seq_release(s->run);
    state_free(m->pool, &s->last);
    final_release(m, &d->final);
    temb_release(m, &d->t);
    op_state_release(&s->norm_stats);
    pool_free(m->pool, m->ctx.rope);
    m->ctx.rope = NULL;
    m->ctx.mask = NULL;
    void *bufs[] = {s->key_bias, s->txt, s->img, s->patches, s->normed, s->text_in};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) pool_free(m->pool, bufs[i]);
    *s = (qw_step){0};
}

/* The joint attention's key bias from the conditioning's text mask (nonzero: a token, as diffusers' bool()), the
 * image keys always kept; the rotary table of the centred positions. */
static st_status context_forward(model *m, const float *cond)
{
    qw_model *d = qw_of(m);
    qw_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = L + T, hd = c->hidden / c->heads;
    const int64_t K = model_cond_len(c), at = L * c->text_dim + c->pooled_dim, grid = c->resolution / c->patch;
    st_status st = ST_OK;
    s->key_bias = model_take(m, &st, B * S, "qwen_image.key_bias", false);
    m->ctx.rope = model_take(m, &st, S * hd, "qwen_image.rope", false);
    float *ids = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(S * 3) * sizeof(float), MEM_WORKSPACE, "qwen_image.position_ids",
                             (void **)&ids);
    if (st) return st;
    position_ids_centred(ids, L, grid, grid);
    rope_table(m->ctx.rope, ids, S, 3, c->rope_axes, MMDIT_ROPE_THETA);
    pool_free(m->pool, ids);
    if (!pool_is_dry_ptr(s->key_bias) && !pool_is_dry_ptr(cond))
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < S; j++)
                s->key_bias[b * S + j] = j >= L || cond[b * K + at + j] != 0.0f ? 0.0f : -INFINITY;
    s->mask = (attn_mask){.key_bias = s->key_bias, .batch_stride = S};
    m->ctx.mask = &s->mask;
    return ST_OK;
}

/* The image tokens, the text tokens (txt_in of txt_norm of the encoder's sequence), and c = the timestep's
 * embedding, cs = SiLU(c). */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train)
{
    qw_model *d = qw_of(m);
    qw_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t P = c->channels * c->patch * c->patch, Dt = c->text_dim, K = model_cond_len(c);
    st_status st = ST_OK;
    s->text_in = model_take(m, &st, B * L * Dt, "qwen_image.text_in", false);
    s->normed = model_take(m, &st, B * L * Dt, "qwen_image.txt_norm", false);
    s->patches = model_take(m, &st, N * P, "qwen_image.patches", false);
    s->img = model_take(m, &st, N * D, "qwen_image.image", false);
    s->txt = model_take(m, &st, B * L * D, "qwen_image.text", false);
    temb_take(m, &d->t, &st, train);
    if (!st) st = context_forward(m, cond);
    if (st) return st;

    const bool norm_trains = train && PG(p_norm), txt_trains = train && PG(p_txt_w);
    copy_rows(s->text_in, L * Dt, cond, K, B, L * Dt);
    st = rmsnorm_forward(m->pool, s->normed, s->text_in, PW(p_norm), B * L, Dt, MMDIT_RMS_EPS,
                         norm_trains ? &s->norm_stats : NULL);
    if (st) return st;
    linear_forward(s->txt, s->normed, PW(p_txt_w), PW(p_txt_b), B * L, Dt, D);
    if (!norm_trains) { /* only the weights' gradients read them again */
        pool_free(m->pool, s->text_in);
        s->text_in = NULL;
    }
    if (!txt_trains) {
        pool_free(m->pool, s->normed);
        s->normed = NULL;
    }
    patchify_forward(s->patches, x, B, c->channels, c->resolution, c->resolution, c->patch);
    linear_forward(s->img, s->patches, PW(p_img_w), PW(p_img_b), N, P, D);
    temb_forward(m, &d->t, timesteps);
    silu_forward(m->ctx.cs, d->t.c, B * D);
    return ST_OK;
}

static st_status qw_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    qw_model *d = qw_of(m);
    qw_step *s = &d->step;
    if (s->active) return st_fail(ST_ERR_INTERNAL, "model_forward: the previous forward was not released");
    s->active = true;
    st_status st = embed_forward(m, x, timesteps, cond, train);
    if (!st) {
        block_state first = {.n = 2, .t = {s->img, s->txt}};
        s->img = s->txt = NULL; /* the executor owns the first state now */
        st = seq_forward(&m->seq[0], &m->plan[0], model_offload(m), &first, train, &s->last, &s->run);
    }
    if (!st) st = final_forward(m, &d->final, s->last.t[0]);
    if (st) {
        qw_release(m);
        return st;
    }
    *pred = d->final.pred;
    return ST_OK;
}

static st_status embed_backward(model *m, const float *dimg, const float *dtxt)
{
    qw_model *d = qw_of(m);
    qw_step *s = &d->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, D = c->hidden, N = B * m->shape.tokens, Dt = c->text_dim;
    const int64_t P = c->channels * c->patch * c->patch;
    linear_backward(NULL, PG(p_img_w), PG(p_img_b), dimg, s->patches, PW(p_img_w), N, P, D);
    scratch k = {.pool = m->pool};
    float *dnormed = s->text_in ? scratch_take_zero(&k, B * L * Dt, MEM_WORKSPACE, "qwen_image.dtxt_norm") : NULL;
    float *dc = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "qwen_image.dc");
    if (k.status) return scratch_end(&k);
    if (s->normed || dnormed) /* txt_in's x is read only for its weight's gradient */
        linear_backward(dnormed, PG(p_txt_w), PG(p_txt_b), dtxt, s->normed, PW(p_txt_w), B * L, Dt, D);
    if (dnormed) rmsnorm_backward(NULL, PG(p_norm), dnormed, s->text_in, PW(p_norm), B * L, Dt, &s->norm_stats);
    silu_backward(dc, m->ctx.dcs, d->t.c, B * D);
    k.status = temb_backward(m, &d->t, dc);
    return scratch_end(&k);
}

static st_status qw_backward(model *m, const float *dpred)
{
    qw_model *d = qw_of(m);
    qw_step *s = &d->step;
    if (!s->active || !s->run) return st_fail(ST_ERR_INTERNAL, "model_backward: no training forward to go back through");
    const int64_t D = m->cfg.hidden, N = m->shape.batch * m->shape.tokens, NL = m->shape.batch * m->shape.text;
    st_status st = ST_OK;
    float *dx = model_take(m, &st, N * D, "qwen_image.dimage", true);
    if (!st) st = final_backward(m, &d->final, s->last.t[0], dpred, dx);
    final_backward_done(m, &d->final);
    state_free(m->pool, &s->last);
    float *dt = model_take(m, &st, NL * D, "qwen_image.dtext", true); /* the text's output reaches nothing */
    block_state grad = {.n = 2, .t = {dx, dt}};
    if (!st) { /* seq_backward releases the run whatever it returns */
        st = seq_backward(s->run, &grad, NULL);
        s->run = NULL;
    }
    if (!st) st = embed_backward(m, grad.t[0], grad.t[1]);
    state_free(m->pool, &grad);
    qw_release(m);
    return st;
}

const model_family qwen_image_family = {
    .name = "qwen_image",
    .create = qw_create,
    .destroy = qw_destroy,
    .set_batch = qw_set_batch,
    .forward = qw_forward,
    .backward = qw_backward,
    .release = qw_release,
    .init_of = qw_init_of,
};
