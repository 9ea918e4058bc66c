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
    float *labels;   /* (B) */
    float *patches;  /* (N, C p p) */
    float **dhidden; /* per captured block: the caller's gradient for its output */
    float **hidden;  /* per captured block whose output the executor holds in bf16: that output widened */
} dit_step;

typedef struct dit_model {
    void *blocks; /* the blocks' own data (dit_block or skipdit's) */
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
static st_status dit_blocks(model *m, param_set *s, void **data)
{
    dit_block *db = model_seq_blocks(m, 0, "blocks", (int)m->cfg.depth, &dit_block_kind, sizeof *db);
    if (!db) return st_host_oom("%lld DiT blocks", (long long)m->cfg.depth);
    for (int i = 0; i < m->cfg.depth; i++) {
        char prefix[PARAM_NAME_MAX];
        snprintf(prefix, sizeof prefix, "blocks.%d", i);
        dit_block_register(s, &db[i], prefix, &m->cfg);
        db[i].m = m;
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
    const int64_t D = c->hidden, T = grid_rows(c) * grid_cols(c);
    d->p_x_w = param_add(s, "x_embedder.proj.weight", 4, (int64_t[]){D, c->channels, c->patch, c->patch}, full);
    d->p_x_b = add1(s, "x_embedder.proj.bias", D, full);
    d->p_pos = param_add_grid_table(s, "pos_embed", 3, (int64_t[]){1, T, D});
    temb_register(s, &d->t, "t_embedder.mlp.0", "t_embedder.mlp.2", DIT_FREQ_DIM, D, full);
    d->p_y = add2(s, "y_embedder.embedding_table.weight", c->classes + 1, D, full);
    st_status st = blocks(m, s, &d->blocks);
    if (st) return st;
    d->final = (final_layer){.order = PATCH_DIT};
    final_register(s, &d->final, c, "final_layer.adaLN_modulation.1", "final_layer.linear", true);
    return ST_OK;
}

static st_status dit_create(model *m) { return register_params(m, dit_blocks); }
static st_status skipdit_create(model *m) { return register_params(m, skipdit_blocks); }

static void dit_fill_fixed(model *m)
{
    pos_embed_2d(param_at(m->params, dit_of(m)->p_pos)->w, grid_rows(&m->cfg), grid_cols(&m->cfg), m->cfg.hidden);
}

/* DiT's initialize_weights: xavier-uniform linears (the patch embedding as a (D, C p p) matrix) with zero
 * biases, N(0, 0.02) timestep MLP and label table, zero adaLN modulations and final linear (adaLN-Zero). */
static const init_rule dit_inits[] = {
    {INIT_ZERO, "adaLN_modulation|^final_layer.linear.weight$"}, {INIT_NORMAL, "t_embedder.mlp|y_embedder"}, {0}};

#define PW(name) (param_at(m->params, d->name)->w)
#define PG(name) (param_at(m->params, d->name)->g)

static void dit_release(model *m)
{
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    for (int k = 0; k < m->n_capture; k++) {
        if (s->dhidden) pool_free(m->pool, s->dhidden[k]);
        if (s->hidden) pool_free(m->pool, s->hidden[k]);
    }
    free(s->dhidden);
    free(s->hidden);
    final_release(m, &d->final);
    *s = (dit_step){0};
}

/* x_t -> tokens (the first state), and the conditioning c = t_embedder(t) + y_embedder(y), cs = SiLU(c). */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const float *labels, bool train,
                               float **x0)
{
    const model_config *c = &m->cfg;
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t P = c->channels * c->patch * c->patch;
    st_status st = ST_OK;
    model_hold(m, &st, &s->labels, B, "dit.labels", false);
    model_hold(m, &st, &s->patches, N * P, "dit.patches", false);
    float *tokens = *x0 = model_take(m, &st, N * D, "dit.tokens", false);
    temb_take(m, &d->t, &st, train);
    if (st) return st;
    /* the label embedding goes through cs's buffer before cs is computed: no extra allocation */
    if ((st = embedding_forward(m->ctx.cs, PW(p_y), labels, B, c->classes + 1, D)))
        return st_fail(st, "labels: %s (the null label is %lld)", st_error(), (long long)c->classes);
    copy_bytes(s->labels, labels, (size_t)B * sizeof *labels);

    const patch_shape ps = model_patches(m);
    patchify_forward(s->patches, x, &ps);
    linear_forward(tokens, s->patches, PW(p_x_w), PW(p_x_b), N, P, D);
    const float *pos = PW(p_pos);
    add_row(tokens, pos, B, T * D);

    st = temb_forward(m, &d->t, timesteps);
    if (st) return st;
    add_to(d->t.c, m->ctx.cs, B * D);
    silu_forward(m->ctx.cs, d->t.c, B * D);
    return ST_OK;
}

/* Under mixed_precision bf16 the executor holds captured block k's output (but the last's) in bf16: the caller
 * reads it widened, exactly. */
static st_status widen_captured(model *m, int k)
{
    const int i = m->capture[k];
    const block_state *out = i < m->seq[0].n - 1 ? seq_run_output(m->step.run[0], i) : NULL;
    if (!m->seq[0].bf16_states || !out) return ST_OK;
    float **h = &dit_of(m)->step.hidden[k];
    const int64_t numel = m->seq[0].state_numel[0];
    const st_status st = pool_alloc(m->pool, (size_t)numel * sizeof(float), MEM_ACTIVATIONS, "dit.hidden (float)",
                                    (void **)h);
    if (!st) bf16_to_float(*h, (const uint16_t *)out->t[0], numel);
    return st;
}

/* Gradient buffers for the captured hidden states, zeroed for the caller's auxiliary loss. */
static st_status capture_forward(model *m)
{
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    s->dhidden = calloc((size_t)m->n_capture, sizeof *s->dhidden);
    s->hidden = calloc((size_t)m->n_capture, sizeof *s->hidden);
    if (!s->dhidden || !s->hidden) return st_host_oom("the captured blocks' gradients");
    st_status st = ST_OK;
    for (int k = 0; k < m->n_capture && !st; k++) {
        st = pool_alloc_zero(m->pool, (size_t)m->seq[0].state_numel[0] * sizeof(float), MEM_ACTIVATIONS,
                             "dit.dhidden", (void **)&s->dhidden[k]);
        if (!st) st = widen_captured(m, k);
    }
    return st;
}

static st_status dit_hidden(model *m, int k, const float **h, float **dh)
{
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    if (!m->step.run[0] || k < 0 || k >= m->n_capture)
        return st_fail(ST_ERR_INVALID, "model_hidden: no captured hidden state %d after a training forward", k);
    const int i = m->capture[k];
    const block_state *out = i == m->seq[0].n - 1 ? &m->step.last : seq_run_output(m->step.run[0], i);
    if (!out) return st_fail(ST_ERR_INTERNAL, "model_hidden: block %d's output was not kept", i);
    *h = s->hidden && s->hidden[k] ? s->hidden[k] : out->t[0];
    *dh = s->dhidden[k];
    return ST_OK;
}

/* The captured blocks' gradient buffers, then the final layer */
static st_status head_forward(model *m, bool train, const float **pred)
{
    dit_model *d = dit_of(m);
    st_status st = train && m->n_capture ? capture_forward(m) : ST_OK;
    if (!st) st = final_forward(m, &d->final, m->step.last.t[0]);
    if (!st) *pred = d->final.pred;
    return st;
}

/* The final layer back to dL/d(last), *dx, and the captured blocks' gradients for the blocks' backward */
static st_status head_backward(model *m, const float *dpred, scratch *k, float **dx)
{
    (void)k;
    dit_model *d = dit_of(m);
    st_status st = ST_OK;
    *dx = model_take(m, &st, m->shape.batch * m->shape.tokens * m->cfg.hidden, "dit.dstate", true);
    if (!st) st = final_backward(m, &d->final, m->step.last.t[0], dpred, *dx);
    final_backward_done(m, &d->final);
    if (!st && m->n_capture && !(m->step.extra = calloc((size_t)m->seq[0].n, sizeof *m->step.extra)))
        st = st_host_oom("the captured blocks' gradients");
    for (int i = 0; !st && i < m->n_capture; i++) m->step.extra[m->capture[i]] = d->step.dhidden[i];
    return st;
}

static st_status embed_backward(model *m, scratch *k, block_state *grad)
{
    const float *dtokens = grad->t[0];
    const model_config *c = &m->cfg;
    dit_model *d = dit_of(m);
    dit_step *s = &d->step;
    const int64_t B = m->shape.batch, D = c->hidden, N = B * m->shape.tokens;
    const int64_t P = c->channels * c->patch * c->patch;
    linear_backward(NULL, PG(p_x_w), PG(p_x_b), dtokens, s->patches, PW(p_x_w), N, P, D);
    float *dc = scratch_take_zero(k, B * D, MEM_WORKSPACE, "dit.dc");
    if (k->status) return k->status;
    silu_backward(dc, m->ctx.dcs, d->t.c, B * D);
    if (PG(p_y)) embedding_backward(PG(p_y), dc, s->labels, B, D);
    return temb_backward(m, &d->t, dc);
}

static const model_chain dit_chain = {.embed = embed_forward, .embed_backward = embed_backward, .head = head_forward,
                                      .head_backward = head_backward};

/* skipdit is DiT with other blocks: everything but the name and the blocks is shared */
#define DIT_FAMILY(create_fn)                                                                                          \
    {.create = create_fn, .impl_size = sizeof(dit_model), .fill_fixed = dit_fill_fixed, .release = dit_release,        \
     .chain = &dit_chain, .hidden = dit_hidden, .inits = dit_inits}
const model_family dit_family = DIT_FAMILY(dit_create);
const model_family skipdit_family = DIT_FAMILY(skipdit_create);

/* ---- the family's descriptor (family.h) ---- */

static const family_preset presets[] = {
    {"dit-tiny", 4, 64, 4, 2, 4, 8, 10, 0, 0, 0, 0, false, false, 0, 0},
    {"dit-s2", 12, 384, 6, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
    {"dit-b2", 12, 768, 12, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
    {"dit-xl2", 28, 1152, 16, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
};

const family_desc dit_desc = {
    .name = "dit", .topology = TOPO_OWN, .traits = TR_OWN,
    .ops = &dit_family, FAMILY_PRESETS(presets), .swap_blocks = {"blocks"},
};
