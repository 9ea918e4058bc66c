/* The single-stream DiT family (../shared/spec/dit.md): embeddings and the final layer around one sequence of
 * DiT blocks (dit_block.c). Weight names and layouts are the public DiT state_dict's. The skipdit family is the
 * same model with another block sequence (skipdit.c: U-ViT's long skips), so it is a variant here. */
#include "models/core/family.h"
#include "models/core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The forward state of one step, alive from model_forward to model_backward or model_release. */
typedef struct dit_step {
    float *labels;                           /* (B) */
    float *patches, *tokens;                 /* (N, C p p), (N, D): the first state */
    float *tfreq, *th, *ts, *c;              /* timestep/label embedding path, (B, 256) and (B, D) each */
    block_state last;                        /* the last block's output */
    float **dhidden;                         /* per captured block: the caller's gradient for its output */
    seq_run *run;
} dit_step;

typedef struct dit_model {
    void *blocks; /* the blocks' own data (dit_block or skipdit's) */
    block *seq_blocks;
    temb t;
    int p_x_w, p_x_b, p_y, p_pos;
    final_layer final;
    dit_step step;
} dit_model;

static dit_model *dit_of(model *m) { return m->impl; }

static int add2(param_set *s, const char *name, int64_t a, int64_t b, bool trainable)
{
    return param_add(s, name, 2, (int64_t[]){a, b}, trainable);
}

static int add1(param_set *s, const char *name, int64_t a, bool trainable)
{
    return param_add(s, name, 1, (int64_t[]){a}, trainable);
}

/* DiT's blocks: blocks.{i}. */
static st_status dit_blocks(model *m, param_set *s, block *blocks, void **data)
{
    dit_block *db = calloc((size_t)m->cfg.depth, sizeof *db);
    if (!db) return st_host_oom("%lld DiT blocks", (long long)m->cfg.depth);
    for (int i = 0; i < m->cfg.depth; i++) {
        char prefix[PARAM_NAME_MAX];
        snprintf(prefix, sizeof prefix, "blocks.%d", i);
        dit_block_register(s, &db[i], prefix, &m->cfg);
        db[i].m = m;
        blocks[i] = (block){.kind = &dit_block_kind, .self = &db[i], .index = i};
    }
    *data = db;
    return ST_OK;
}

/* The public DiT state_dict's names. With LoRA every base weight is frozen and the targeted linears of each
 * block get adapters named after the weight they adapt. */
static st_status register_params(model *m, dit_blocks_fn blocks)
{
    dit_model *d = dit_of(m);
    const model_config *c = &m->cfg;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch, T = (c->resolution / c->patch) * (c->resolution / c->patch);
    d->p_x_w = param_add(s, "x_embedder.proj.weight", 4, (int64_t[]){D, c->channels, c->patch, c->patch}, full);
    d->p_x_b = add1(s, "x_embedder.proj.bias", D, full);
    d->p_pos = param_add_fixed(s, "pos_embed", 3, (int64_t[]){1, T, D});
    temb_register(s, &d->t, "t_embedder.mlp.0", "t_embedder.mlp.2", DIT_FREQ_DIM, D, full);
    d->p_y = add2(s, "y_embedder.embedding_table.weight", c->classes + 1, D, full);
    st_status st = blocks(m, s, d->seq_blocks, &d->blocks);
    if (st) return st;
    d->final = (final_layer){.ada_w = add2(s, "final_layer.adaLN_modulation.1.weight", 2 * D, D, full),
                             .ada_b = add1(s, "final_layer.adaLN_modulation.1.bias", 2 * D, full),
                             .out_w = add2(s, "final_layer.linear.weight", P, D, full),
                             .out_b = add1(s, "final_layer.linear.bias", P, full),
                             .order = PATCH_DIT};
    return ST_OK;
}

static st_status create(model *m, dit_blocks_fn blocks)
{
    const model_config *mc = &m->cfg;
    dit_model *d = calloc(1, sizeof *d);
    m->impl = d;
    if (d) d->seq_blocks = calloc((size_t)mc->depth, sizeof *d->seq_blocks);
    if (!d || !d->seq_blocks) return st_host_oom("the DiT model");
    m->n_seq = 1;
    m->seq[0] = (block_seq){.name = "blocks", .n = (int)mc->depth, .blocks = d->seq_blocks, .state_n = 1, .pool = m->pool};
    return register_params(m, blocks);
}

static st_status dit_create(model *m) { return create(m, dit_blocks); }
static st_status skipdit_create(model *m) { return create(m, skipdit_blocks); }

static void dit_fill_fixed(model *m)
{
    pos_embed_2d(param_at(m->params, dit_of(m)->p_pos)->w, m->cfg.resolution / m->cfg.patch, m->cfg.hidden);
}

static void dit_destroy(model *m)
{
    dit_model *d = dit_of(m);
    if (d) free(d->blocks), free(d->seq_blocks);
    free(d);
}

static void set_batch(model *m, int64_t batch)
{
    m->shape.batch = batch;
    m->seq[0].state_numel[0] = batch * m->shape.tokens * m->shape.hidden;
}

/* DiT's initialize_weights: xavier-uniform linears (the patch embedding as a (D, C p p) matrix) with zero
 * biases, N(0, 0.02) timestep MLP and label table, zero adaLN modulations and final linear (adaLN-Zero). */
static param_init dit_init_of(const char *name)
{
    if (strstr(name, "adaLN_modulation") || !strcmp(name, "final_layer.linear.weight")) return INIT_ZERO;
    if (strstr(name, "t_embedder.mlp") || strstr(name, "y_embedder")) return INIT_NORMAL;
    return INIT_XAVIER;
}

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

static void dit_release(model *m)
{
    dit_model *d = dit_of(m);
    if (!d) return;
    dit_step *s = &d->step;
    seq_release(s->run);
    state_free(m->pool, &s->last);
    for (int k = 0; s->dhidden && k < m->n_capture; k++) pool_free(m->pool, s->dhidden[k]);
    free(s->dhidden);
    final_release(m, &d->final);
    temb_release(m, &d->t);
    void *bufs[] = {s->tokens, s->patches, s->labels}; /* tokens only if forward failed before the executor took them */
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) pool_free(m->pool, bufs[i]);
    *s = (dit_step){0};
}

/* x_t -> tokens (the first state), and the conditioning c = t_embedder(t) + y_embedder(y), cs = SiLU(c). */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *labels, bool train)
{
    const model_config *c = &m->cfg;
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t P = c->channels * c->patch * c->patch;
    st_status st = ST_OK;
    s->labels = model_take(m, &st, B, "dit.labels", false);
    s->patches = model_take(m, &st, N * P, "dit.patches", false);
    s->tokens = model_take(m, &st, N * D, "dit.tokens", false);
    temb_take(m, &d->t, &st, train);
    if (st) return st;
    /* the label embedding goes through cs's buffer before cs is computed: no extra allocation */
    if ((st = embedding_forward(m->ctx.cs, PW(p_y), labels, B, c->classes + 1, D)))
        return st_fail(st, "labels: %s (the null label is %lld)", st_error(), (long long)c->classes);
    copy_bytes(s->labels, labels, (size_t)B * sizeof *labels);

    const patch_shape ps = model_patches(m);
    patchify_forward(s->patches, x, &ps);
    linear_forward(s->tokens, s->patches, PW(p_x_w), PW(p_x_b), N, P, D);
    const float *pos = PW(p_pos);
    add_row(s->tokens, pos, B, T * D);

    temb_forward(m, &d->t, timesteps);
    add_to(d->t.c, m->ctx.cs, B * D);
    silu_forward(m->ctx.cs, d->t.c, B * D);
    return ST_OK;
}

/* Gradient buffers for the captured hidden states, zeroed for the caller's auxiliary loss. */
static st_status capture_forward(model *m)
{
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    s->dhidden = calloc((size_t)m->n_capture, sizeof *s->dhidden);
    if (!s->dhidden) return st_host_oom("the captured blocks' gradients");
    st_status st = ST_OK;
    for (int k = 0; k < m->n_capture && !st; k++)
        st = pool_alloc_zero(m->pool, (size_t)m->seq[0].state_numel[0] * sizeof(float), MEM_ACTIVATIONS,
                             "dit.dhidden", (void **)&s->dhidden[k]);
    return st;
}

static st_status dit_hidden(model *m, int k, const float **h, float **dh)
{
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    if (!s->run || k < 0 || k >= m->n_capture)
        return st_fail(ST_ERR_INVALID, "model_hidden: no captured hidden state %d after a training forward", k);
    const int i = m->capture[k];
    const block_state *out = i == m->seq[0].n - 1 ? &s->last : seq_run_output(s->run, i);
    if (!out) return st_fail(ST_ERR_INTERNAL, "model_hidden: block %d's output was not kept", i);
    *h = out->t[0];
    *dh = s->dhidden[k];
    return ST_OK;
}

static st_status dit_forward(model *m, const float *x, const float *timesteps, const float *labels, bool train,
                             const float **pred)
{
    dit_model *d = dit_of(m);
    st_status st = embed_forward(m, x, timesteps, labels, train);
    if (!st) {
        block_state first = {.n = 1, .t = {d->step.tokens}};
        d->step.tokens = NULL; /* the executor owns the first state now */
        st = seq_forward(&m->seq[0], &m->plan[0], model_offload(m), &first, train, &d->step.last, &d->step.run);
    }
    if (!st && train && m->n_capture) st = capture_forward(m);
    if (!st) st = final_forward(m, &d->final, d->step.last.t[0]);
    if (st) return st;
    *pred = d->final.pred;
    return ST_OK;
}

static st_status embed_backward(model *m, const float *dtokens)
{
    const model_config *c = &m->cfg;
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    const int64_t B = m->shape.batch, D = c->hidden, N = B * m->shape.tokens;
    const int64_t P = c->channels * c->patch * c->patch;
    linear_backward(NULL, PG(p_x_w), PG(p_x_b), dtokens, s->patches, PW(p_x_w), N, P, D);
    scratch k = {.pool = m->pool};
    float *dc = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "dit.dc");
    if (k.status) return scratch_end(&k);
    silu_backward(dc, m->ctx.dcs, d->t.c, B * D);
    if (PG(p_y)) embedding_backward(PG(p_y), dc, s->labels, B, D);
    k.status = temb_backward(m, &d->t, dc);
    return scratch_end(&k);
}

static st_status dit_backward(model *m, const float *dpred)
{
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    const int64_t N = m->shape.batch * m->shape.tokens;
    float *dstate = NULL;
    st_status st = pool_alloc_zero(m->pool, (size_t)(N * m->cfg.hidden) * sizeof(float), MEM_ACTIVATIONS,
                                   "dit.dstate", (void **)&dstate);
    if (!st) st = final_backward(m, &d->final, s->last.t[0], dpred, dstate);
    final_backward_done(m, &d->final);
    state_free(m->pool, &s->last);
    if (!st) {
        const float **extra = NULL;
        if (m->n_capture && !(extra = calloc((size_t)m->seq[0].n, sizeof *extra)))
            st = st_host_oom("the captured blocks' gradients");
        for (int k = 0; extra && k < m->n_capture; k++) extra[m->capture[k]] = s->dhidden[k];
        if (!st) {
            st = seq_backward(s->run, &(block_state){.n = 1, .t = {dstate}}, (const float *const *)extra);
            s->run = NULL;
        }
        free(extra);
    }
    if (!st) st = embed_backward(m, dstate);
    pool_free(m->pool, dstate);
    return st;
}

/* skipdit is DiT with other blocks: everything but the name and the blocks is shared */
#define DIT_FAMILY(family_name, create_fn)                                                                             \
    {                                                                                                                  \
        .name = family_name, .create = create_fn, .fill_fixed = dit_fill_fixed, .destroy = dit_destroy,               \
        .set_batch = set_batch, .forward = dit_forward, .backward = dit_backward, .release = dit_release,             \
        .hidden = dit_hidden, .init_of = dit_init_of,                                                                  \
    }
const model_family dit_family = DIT_FAMILY("dit", dit_create);
const model_family skipdit_family = DIT_FAMILY("skipdit", skipdit_create);

/* ---- the family's descriptor (family.h) ---- */

static const family_preset presets[] = {
    {"dit-tiny", 4, 64, 4, 2, 4, 8, 10, 0, 0, 0, 0, false, false, 0, 0},
    {"dit-s2", 12, 384, 6, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
    {"dit-b2", 12, 768, 12, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
    {"dit-xl2", 28, 1152, 16, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
};

const family_desc dit_desc = {
    .name = "dit",
    .topology = TOPO_OWN,
    .own = true,
    .ops = &dit_family,
    FAMILY_PRESETS(presets),
};
