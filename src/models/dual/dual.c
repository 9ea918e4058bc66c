/* The dual-stream models' skeleton (mmdit.h): the image and text streams through the double (joint) blocks, with
 * single blocks [text; image] joined through those, and the image rows through the final layer. The families
 * (mmdit.c, sd3.c, qwen_image.c, flux2.c, auraflow.c) supply their weights, embeddings and blocks. */
#include "models/dual/mmdit.h"

#include <stdlib.h>

static dual_model *dual_of(model *m) { return m->impl; }

void *dual_blocks(model *m, int n, size_t block_size)
{
    dual_model *d = m->impl;
    d->blocks = model_alloc(m, (size_t)n, block_size);
    if (d->blocks) d->seq_blocks = model_alloc(m, (size_t)n, sizeof *d->seq_blocks);
    return d->seq_blocks ? d->blocks : NULL;
}

void dual_sequences(model *m, const char *name, int nd, const block_kind *dk, int ns, const block_kind *sk,
                    size_t block_size)
{
    dual_model *d = dual_of(m);
    for (int i = 0; i < nd + ns; i++)
        d->seq_blocks[i] = (block){.kind = i < nd ? dk : sk, .self = (char *)d->blocks + (size_t)i * block_size,
                                   .index = i < nd ? i : i - nd};
    m->n_seq = ns ? 2 : 1;
    m->seq[0] = (block_seq){.name = name, .n = nd, .blocks = d->seq_blocks, .state_n = 2, .pool = m->pool,
                            .state_names = {"image stream", "text stream"}};
    if (ns)
        m->seq[1] = (block_seq){
            .name = "single_transformer_blocks", .n = ns, .blocks = d->seq_blocks + nd, .state_n = 1, .pool = m->pool};
}

void dual_set_batch(model *m, int64_t batch)
{
    m->shape.batch = batch;
    const int64_t D = m->shape.hidden;
    m->seq[0].state_numel[0] = batch * m->shape.tokens * D;
    m->seq[0].state_numel[1] = batch * m->shape.text * D;
    if (m->n_seq == 2) m->seq[1].state_numel[0] = batch * (m->shape.tokens + m->shape.text) * D;
}

void dual_release(model *m)
{
    dual_model *d = dual_of(m);
    final_release(m, &d->final);
    if (d->release_own) d->release_own(m);
    m->ctx.mask = NULL;
}

st_status dual_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                       const float **pred)
{
    dual_model *d = dual_of(m);
    dual_step *s = &d->step;
    mm_dims dm = mm_dims_of(m);
    const bool single = m->n_seq == 2;
    st_status st = d->embed(m, x, timesteps, cond, train);
    block_state streams = {0};
    if (!st) {
        block_state first = {.n = 2, .t = {s->img, s->txt}};
        s->img = s->txt = NULL; /* the executor owns the first state now */
        st = model_seq_forward(m, 0, &first, train, single ? &streams : NULL);
    }
    if (single) {
        float *joint = NULL;
        if (!st) joint = model_take(m, &st, dm.J * dm.D, "dual.joint", false);
        if (!st) {
            mm_to_joint(&dm, 0, joint, streams.t[0]);
            mm_to_joint(&dm, 1, joint, streams.t[1]);
        }
        state_free(m->pool, &streams);
        if (!st) st = model_seq_forward1(m, 1, &joint, train, NULL);
        if (!st) model_hold(m, &st, &s->xh, dm.rows[0] * dm.D, "dual.final.x", false);
        if (!st) { /* the final layer reads the image rows of the last state: those are copied out and the state goes */
            mm_from_joint(&dm, 0, s->xh, m->step.last.t[0]);
            state_free(m->pool, &m->step.last);
        }
    }
    if (!st) st = final_forward(m, &d->final, single ? s->xh : m->step.last.t[0]);
    if (st) return st;
    *pred = d->final.pred;
    return ST_OK;
}

/* Back through the single blocks (unless st): the final layer's dx into the joint gradient, and the streams'
 * out of it. */
static st_status single_backward(model *m, const mm_dims *dm, float *dx, block_state *grad, st_status st)
{
    float *dj = model_take(m, &st, dm->J * dm->D, "dual.djoint", true);
    if (!st) mm_to_joint(dm, 0, dj, dx);
    pool_free(m->pool, dx);
    if (!st) st = model_seq_backward(m, 1, &(block_state){.n = 1, .t = {dj}});
    float *dimg = model_take(m, &st, dm->rows[0] * dm->D, "dual.dimage", false);
    float *dtxt = model_take(m, &st, dm->rows[1] * dm->D, "dual.dtext", false);
    if (!st) {
        mm_from_joint(dm, 0, dimg, dj);
        mm_from_joint(dm, 1, dtxt, dj);
    }
    pool_free(m->pool, dj);
    *grad = (block_state){.n = 2, .t = {dimg, dtxt}};
    return st;
}

st_status dual_backward(model *m, const float *dpred)
{
    dual_model *d = dual_of(m);
    dual_step *s = &d->step;
    mm_dims dm = mm_dims_of(m);
    const bool single = m->n_seq == 2;
    st_status st = d->backward_begin ? d->backward_begin(m) : ST_OK;
    float *dx = model_take(m, &st, dm.rows[0] * dm.D, "dual.dstate", true);
    if (!st) st = final_backward(m, &d->final, single ? s->xh : m->step.last.t[0], dpred, dx);
    final_backward_done(m, &d->final);
    block_state grad = {0};
    if (single) {
        pool_free(m->pool, s->xh);
        s->xh = NULL;
        st = single_backward(m, &dm, dx, &grad, st);
    } else { /* a last block with a text output gets its zero gradient (the output reaches nothing) */
        const int n = m->step.last.n;
        state_free(m->pool, &m->step.last);
        grad = (block_state){.n = n, .t = {dx, n == 2 ? model_take(m, &st, dm.rows[1] * dm.D, "dual.dtext", true) : NULL}};
    }
    if (!st) st = model_seq_backward(m, 0, &grad);
    if (!st) st = d->embed_backward(m, grad.t[0], grad.t[1]);
    state_free(m->pool, &grad);
    return st;
}

#define W(i) (param_at(m->params, (i))->w)
#define G(i) (param_at(m->params, (i))->g)
#define BIAS(of, i) ((i) < 0 ? NULL : of(i))

void dual_take_tokens(model *m, st_status *st, const float *cond)
{
    dual_step *s = &dual_of(m)->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, N = B * m->shape.tokens, P = model_patch_dim(c), D = c->hidden;
    const int64_t LD = c->text_len * c->text_dim;
    model_hold(m, st, &s->text_in, B * LD, "dual.text_in", false);
    model_hold(m, st, &s->patches, N * P, "dual.patches", false);
    model_hold(m, st, &s->img, N * D, "dual.image", false);
    model_hold(m, st, &s->txt, B * m->shape.text * D, "dual.text", false);
    if (!*st) copy_rows(s->text_in, LD, cond, model_cond_len(c), B, LD);
}

void dual_take_c(model *m, st_status *st, bool train, temb *t, temb *g, temb *p)
{
    dual_step *s = &dual_of(m)->step;
    if (t) temb_take(m, t, st, train);
    if (g) {
        model_hold(m, st, &s->guidance, m->shape.batch, "dual.guidance", false);
        temb_take_path(m, g, st);
    }
    if (p) temb_take_path(m, p, st);
}

st_status dual_c_forward(model *m, const float *timesteps, const float *cond, temb *t, temb *g, temb *p)
{
    dual_step *s = &dual_of(m)->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, BD = B * c->hidden, K = model_cond_len(c);
    st_status st = temb_forward(m, t, timesteps);
    if (!st && g) { /* 1000 g in float, as Flux scales it */
        copy_rows(s->guidance, 1, cond + K - 1, K, B, 1);
        scale_by(s->guidance, B, 1000.0f);
        if (!(st = temb_forward(m, g, s->guidance))) add_to(t->c, g->c, BD);
    }
    if (!st && p) {
        copy_rows(p->freq, c->pooled_dim, cond + c->text_len * c->text_dim, K, B, c->pooled_dim);
        if (!(st = temb_mlp_forward(m, p))) add_to(t->c, p->c, BD);
    }
    if (!st) silu_forward(m->ctx.cs, t->c, BD);
    return st;
}

void dual_embed_image(model *m, const float *x, int w, int b)
{
    dual_step *s = &dual_of(m)->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, P = model_patch_dim(c);
    const patch_shape ps = model_patches(m);
    patchify_forward(s->patches, x, &ps);
    linear_forward(s->img, s->patches, W(w), BIAS(W, b), B * m->shape.tokens, P, c->hidden);
}

void dual_embed_text(model *m, const float *cond, bool train, int w, int b)
{
    dual_step *s = &dual_of(m)->step;
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, Dt = c->text_dim;
    linear_forward(s->txt, s->text_in, W(w), BIAS(W, b), B * L, Dt, c->hidden);
    if (!train || !G(w)) { /* only the weight's gradient reads it again */
        pool_free(m->pool, s->text_in);
        s->text_in = NULL;
    }
}

void dual_image_backward(model *m, const float *dimg, int x_w, int x_b)
{
    dual_step *s = &dual_of(m)->step;
    const model_config *c = &m->cfg;
    linear_backward(NULL, G(x_w), BIAS(G, x_b), dimg, s->patches, W(x_w), m->shape.batch * m->shape.tokens,
                    model_patch_dim(c), c->hidden);
}

void dual_tokens_backward(model *m, const float *dimg, const float *dtxt, int x_w, int x_b, int ctx_w, int ctx_b)
{
    dual_step *s = &dual_of(m)->step;
    const model_config *c = &m->cfg;
    dual_image_backward(m, dimg, x_w, x_b);
    if (s->text_in)
        linear_backward(NULL, G(ctx_w), BIAS(G, ctx_b), dtxt, s->text_in, W(ctx_w), m->shape.batch * m->shape.text,
                        c->text_dim, c->hidden);
}

st_status dual_c_backward(model *m, temb *t, temb *g, temb *p)
{
    const int64_t BD = m->shape.batch * m->cfg.hidden;
    scratch k = {.pool = m->pool};
    float *dc = scratch_take_zero(&k, BD, MEM_WORKSPACE, "dual.dc");
    if (k.status) return scratch_end(&k);
    k.status = temb_silu_backward(m, t, dc, m->ctx.dcs);
    if (!k.status && g) k.status = temb_backward(m, g, dc);
    if (!k.status && p) k.status = temb_backward(m, p, dc);
    return scratch_end(&k);
}
