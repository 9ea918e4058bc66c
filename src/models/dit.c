/* The single-stream DiT model (../shared/spec/dit.md): embeddings and the final layer around one sequence of
 * DiT blocks (dit_block.c). Weight names and layouts are the public DiT state_dict's. */
#include "dit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/rng.h"

static const struct {
    const char *name;
    int64_t depth, hidden, heads, patch, channels, resolution, classes;
} presets[] = {
    {"dit-tiny", 4, 64, 4, 2, 4, 8, 10},
    {"dit-s2", 12, 384, 6, 2, 4, 32, 1000},
    {"dit-b2", 12, 768, 12, 2, 4, 32, 1000},
    {"dit-xl2", 28, 1152, 16, 2, 4, 32, 1000},
};

st_status model_preset(const char *name, model_config *out)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(presets[i].name, name)) {
            *out = (model_config){.depth = presets[i].depth,
                                  .hidden = presets[i].hidden,
                                  .heads = presets[i].heads,
                                  .patch = presets[i].patch,
                                  .channels = presets[i].channels,
                                  .resolution = presets[i].resolution,
                                  .classes = presets[i].classes,
                                  .mechanism = ATTN_FLASH};
            snprintf(out->family, sizeof out->family, "dit");
            snprintf(out->preset, sizeof out->preset, "%s", name);
            return ST_OK;
        }
    return st_fail(ST_ERR_INVALID, "model_preset: '%s' is not one of dit-tiny, dit-s2, dit-b2, dit-xl2", name);
}

st_status model_config_check(const model_config *mc)
{
    if (strcmp(mc->family, "dit"))
        return st_fail(ST_ERR_INVALID, "model_family: '%s' is not available (dit)", mc->family);
    const struct {
        const char *key;
        int64_t v;
    } positive[] = {{"depth", mc->depth},           {"hidden_size", mc->hidden}, {"num_heads", mc->heads},
                    {"patch_size", mc->patch},      {"in_channels", mc->channels}, {"resolution", mc->resolution},
                    {"num_classes", mc->classes}};
    for (size_t i = 0; i < sizeof positive / sizeof *positive; i++)
        if (positive[i].v < 1) return st_fail(ST_ERR_INVALID, "%s: %lld must be at least 1", positive[i].key,
                                              (long long)positive[i].v);
    if (mc->hidden % mc->heads)
        return st_fail(ST_ERR_INVALID, "num_heads: %lld does not divide hidden_size %lld", (long long)mc->heads,
                       (long long)mc->hidden);
    if (mc->hidden % 4)
        return st_fail(ST_ERR_INVALID, "hidden_size: %lld must be a multiple of 4 (the 2D sine-cosine table)",
                       (long long)mc->hidden);
    if (mc->resolution % mc->patch)
        return st_fail(ST_ERR_INVALID, "patch_size: %lld does not divide resolution %lld", (long long)mc->patch,
                       (long long)mc->resolution);
    return ST_OK;
}

static int add2(param_set *s, const char *name, int64_t a, int64_t b, bool trainable)
{
    return param_add(s, name, 2, (int64_t[]){a, b}, trainable);
}

static int add1(param_set *s, const char *name, int64_t a, bool trainable)
{
    return param_add(s, name, 1, (int64_t[]){a}, trainable);
}

/* The public DiT state_dict's names. With LoRA every base weight is frozen and the targeted linears of each
 * block get adapters named after the weight they adapt. */
static void register_params(model *m)
{
    const model_config *c = &m->cfg;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, P = c->channels * c->patch * c->patch, T = (c->resolution / c->patch) * (c->resolution / c->patch);
    m->p_x_w = param_add(s, "x_embedder.proj.weight", 4, (int64_t[]){D, c->channels, c->patch, c->patch}, full);
    m->p_x_b = add1(s, "x_embedder.proj.bias", D, full);
    m->p_pos = param_add_fixed(s, "pos_embed", 3, (int64_t[]){1, T, D});
    m->p_t0_w = add2(s, "t_embedder.mlp.0.weight", D, DIT_FREQ_DIM, full);
    m->p_t0_b = add1(s, "t_embedder.mlp.0.bias", D, full);
    m->p_t2_w = add2(s, "t_embedder.mlp.2.weight", D, D, full);
    m->p_t2_b = add1(s, "t_embedder.mlp.2.bias", D, full);
    m->p_y = add2(s, "y_embedder.embedding_table.weight", c->classes + 1, D, full);
    const int64_t ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    const float alpha = (float)c->lora_alpha;
    for (int i = 0; i < c->depth; i++) {
        char n[PARAM_NAME_MAX];
        dit_block *b = &m->block_data[i];
#define NAME(suffix) (snprintf(n, sizeof n, "blocks.%d.%s", i, suffix), n)
        b->qkv = lin_register(s, NAME("attn.qkv"), D, 3 * D, true, ra, alpha, full);
        b->proj = lin_register(s, NAME("attn.proj"), D, D, true, ra, alpha, full);
        b->fc1 = lin_register(s, NAME("mlp.fc1"), D, 4 * D, true, rm, alpha, full);
        b->fc2 = lin_register(s, NAME("mlp.fc2"), 4 * D, D, true, rm, alpha, full);
        b->ada = lin_register(s, NAME("adaLN_modulation.1"), D, 6 * D, true, 0, 0, full);
#undef NAME
    }
    m->p_fa_w = add2(s, "final_layer.adaLN_modulation.1.weight", 2 * D, D, full);
    m->p_fa_b = add1(s, "final_layer.adaLN_modulation.1.bias", 2 * D, full);
    m->p_fl_w = add2(s, "final_layer.linear.weight", P, D, full);
    m->p_fl_b = add1(s, "final_layer.linear.bias", P, full);
}

st_status model_create(const model_config *mc, pool *device, model **out)
{
    *out = NULL;
    st_status st = model_config_check(mc);
    if (st) return st;
    model *m = calloc(1, sizeof *m);
    if (!m) return st_fail(ST_ERR_INTERNAL, "out of host memory");
    m->cfg = *mc;
    m->pool = device;
    m->params = &m->own_params;
    const int64_t G = mc->resolution / mc->patch;
    m->shape = (dit_shape){.tokens = G * G, .hidden = mc->hidden, .heads = mc->heads, .mechanism = mc->mechanism};
    m->block_data = calloc((size_t)mc->depth, sizeof *m->block_data);
    m->seq.blocks = calloc((size_t)mc->depth, sizeof *m->seq.blocks);
    if (!m->block_data || !m->seq.blocks) {
        model_destroy(m);
        return st_fail(ST_ERR_INTERNAL, "out of host memory");
    }
    register_params(m);
    m->seq = (block_seq){.name = "blocks", .n = (int)mc->depth, .blocks = m->seq.blocks, .state_n = 1, .pool = device};
    for (int i = 0; i < mc->depth; i++) {
        m->block_data[i].m = m;
        m->seq.blocks[i] = (block){.kind = &dit_block_kind, .self = &m->block_data[i], .index = i};
    }
    const ckpt_settings none = {.interval = 1, .stride = 1};
    if (!st) st = model_set_checkpointing(m, &none, NULL, 0);
    if (!st && device && !(st = param_set_alloc(m->params, device)))
        pos_embed_2d(param_at(m->params, m->p_pos)->w, G, mc->hidden);
    if (st) {
        model_destroy(m);
        return st;
    }
    *out = m;
    return ST_OK;
}

void model_destroy(model *m)
{
    if (!m) return;
    model_release(m);
    copy_engine_destroy(m->off.engine);
    param_set_free(&m->own_params);
    seq_plan_free(&m->plan);
    free(m->captured);
    free(m->capture);
    free(m->seq.blocks);
    free(m->block_data);
    free(m);
}

const model_config *model_get_config(const model *m) { return &m->cfg; }
param_set *model_params(model *m) { return m->params; }

int model_sequences(model *m, block_seq **seqs)
{
    *seqs = &m->seq;
    return 1;
}

static void set_batch(model *m, int64_t batch)
{
    m->shape.batch = batch;
    m->seq.state_numel[0] = batch * m->shape.tokens * m->shape.hidden;
}

st_status model_set_checkpointing(model *m, const ckpt_settings *cs, const int64_t *capture, size_t n_capture)
{
    const int n = m->seq.n;
    bool *captured = calloc((size_t)(n ? n : 1), sizeof *captured);
    int *list = calloc(n_capture ? n_capture : 1, sizeof *list);
    if (!captured || !list) {
        free(captured), free(list);
        return st_fail(ST_ERR_INTERNAL, "out of host memory");
    }
    for (size_t k = 0; k < n_capture; k++) {
        if (capture[k] < 0 || capture[k] >= n) {
            free(captured), free(list);
            return st_fail(ST_ERR_INVALID, "capture_hidden_states: block %lld does not exist (blocks 0-%d)",
                           (long long)capture[k], n - 1);
        }
        captured[capture[k]] = true;
        list[k] = (int)capture[k];
    }
    seq_plan plan;
    st_status st = plan_sequence(cs, &m->seq, "dit", captured, &plan);
    if (st) {
        free(captured), free(list);
        return st;
    }
    seq_plan_free(&m->plan);
    free(m->captured), free(m->capture);
    m->plan = plan;
    m->captured = captured;
    m->capture = list;
    m->n_capture = (int)n_capture;
    return ST_OK;
}

const seq_plan *model_plan(const model *m, int sequence) { return sequence == 0 ? &m->plan : NULL; }

st_status model_set_host_pool(model *m, pool *host)
{
    if (!m->off.engine) {
        st_status st = copy_engine_create(&m->off.engine);
        if (st) return st;
    }
    m->off.device = m->pool;
    m->off.host = host;
    return ST_OK;
}

copy_engine *model_copy_engine(model *m) { return m->off.engine; }

/* DiT's initialize_weights: xavier-uniform linears (the patch embedding as a (D, C p p) matrix) with zero
 * biases, N(0, 0.02) timestep MLP and label table, zero adaLN modulations and final linear (adaLN-Zero). */
void model_init(model *m, uint64_t seed, bool random_all)
{
    param_set *s = m->params;
    for (int i = 0; i < s->n; i++) {
        param *p = param_at(s, i);
        if (p->fixed) continue;
        const uint64_t stream = rng_stream(p->name);
        const int64_t fan_out = p->shape[0], fan_in = p->ndim > 1 ? p->numel / p->shape[0] : 1;
        const bool weight = p->ndim > 1;
        if (random_all) {
            /* every value non-zero and of a scale that keeps activations O(1) */
            float a = weight ? (float)(1.0 / sqrt((double)fan_in)) : 0.1f;
            rng_fill_uniform(p->w, p->numel, seed, stream, -a, a);
            continue;
        }
        memset(p->w, 0, (size_t)p->numel * sizeof(float));
        if (strstr(p->name, "lora_A")) { /* PEFT's kaiming-uniform(a = sqrt 5): bound 1/sqrt(fan_in); B stays 0 */
            float a = (float)(1.0 / sqrt((double)fan_in));
            rng_fill_uniform(p->w, p->numel, seed, stream, -a, a);
            continue;
        }
        if (strstr(p->name, "adaLN_modulation") || !strcmp(p->name, "final_layer.linear.weight") || !weight ||
            strstr(p->name, "lora_B"))
            continue;
        if (strstr(p->name, "t_embedder.mlp") || strstr(p->name, "y_embedder"))
            rng_fill_normal(p->w, p->numel, seed, stream, 0.0f, 0.02f);
        else {
            float a = (float)sqrt(6.0 / (double)(fan_in + fan_out));
            rng_fill_uniform(p->w, p->numel, seed, stream, -a, a);
        }
    }
}

#define PW(name) (param_at(m->params, m->name)->w)
#define PG(name) (param_at(m->params, m->name)->g)

void model_release(model *m)
{
    dit_step *s = &m->step;
    if (!s->active) return;
    seq_release(s->run);
    state_free(m->pool, &s->last);
    for (int k = 0; s->dhidden && k < m->n_capture; k++) pool_free(m->pool, s->dhidden[k]);
    free(s->dhidden);
    op_state_release(&s->fstats);
    void *bufs[] = {s->pred, s->hf, s->ln, s->fmod, m->ctx.dcs, m->ctx.cs, s->c, s->ts, s->th, s->tfreq, s->tokens,
                    s->patches, s->labels}; /* tokens only if forward failed before the executor took them */
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) pool_free(m->pool, bufs[i]);
    m->ctx.cs = m->ctx.dcs = NULL;
    *s = (dit_step){0};
}

static float *take(model *m, st_status *st, int64_t floats, const char *what, bool zero)
{
    void *p = NULL;
    if (!*st) *st = (zero ? pool_alloc_zero : pool_alloc)(m->pool, (size_t)floats * sizeof(float), MEM_ACTIVATIONS,
                                                          what, &p);
    return p;
}

/* x_t -> tokens (the first state), and the conditioning c = t_embedder(t) + y_embedder(y), cs = SiLU(c). */
static st_status embed_forward(model *m, const float *x, const float *timesteps, const int64_t *labels, bool train)
{
    const model_config *c = &m->cfg;
    dit_step *s = &m->step;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t P = c->channels * c->patch * c->patch;
    st_status st = ST_OK;
    s->labels = (int64_t *)take(m, &st, 2 * B, "dit.labels", false); /* int64: two floats each */
    s->patches = take(m, &st, N * P, "dit.patches", false);
    s->tokens = take(m, &st, N * D, "dit.tokens", false);
    s->tfreq = take(m, &st, B * DIT_FREQ_DIM, "dit.t_freq", false);
    s->th = take(m, &st, B * D, "dit.t_hidden", false);
    s->ts = take(m, &st, B * D, "dit.t_silu", false);
    s->c = take(m, &st, B * D, "dit.c", false);
    m->ctx.cs = take(m, &st, B * D, "dit.silu_c", false);
    if (train) m->ctx.dcs = take(m, &st, B * D, "dit.dsilu_c", true);
    if (st) return st;
    /* the label embedding goes through cs's buffer before cs is computed: no extra allocation */
    if ((st = embedding_forward(m->ctx.cs, PW(p_y), labels, B, c->classes + 1, D)))
        return st_fail(st, "labels: %s (the null label is %lld)", st_error(), (long long)c->classes);
    memcpy(s->labels, labels, (size_t)B * sizeof *labels);

    patchify_forward(s->patches, x, B, c->channels, c->resolution, c->resolution, c->patch);
    linear_forward(s->tokens, s->patches, PW(p_x_w), PW(p_x_b), N, P, D);
    const float *pos = PW(p_pos);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < T * D; i++) s->tokens[b * T * D + i] += pos[i];

    timestep_embedding(s->tfreq, timesteps, B, DIT_FREQ_DIM, 10000.0);
    linear_forward(s->th, s->tfreq, PW(p_t0_w), PW(p_t0_b), B, DIT_FREQ_DIM, D);
    silu_forward(s->ts, s->th, B * D);
    linear_forward(s->c, s->ts, PW(p_t2_w), PW(p_t2_b), B, D, D);
    for (int64_t i = 0; i < B * D; i++) s->c[i] += m->ctx.cs[i];
    silu_forward(m->ctx.cs, s->c, B * D);
    return ST_OK;
}

/* final layer: pred = unpatchify(linear(LN(x) * (1 + scale) + shift)) */
static st_status head_forward(model *m)
{
    const model_config *c = &m->cfg;
    dit_step *s = &m->step;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t P = c->channels * c->patch * c->patch;
    st_status st = ST_OK;
    s->fmod = take(m, &st, B * 2 * D, "dit.final.mod", false);
    s->ln = take(m, &st, N * D, "dit.final.ln", false);
    s->hf = take(m, &st, N * D, "dit.final.h", false);
    s->pred = take(m, &st, B * c->channels * c->resolution * c->resolution, "dit.pred", false);
    float *out = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(N * P) * sizeof(float), MEM_WORKSPACE, "dit.final.out", (void **)&out);
    if (!st) st = layernorm_forward(m->pool, s->ln, s->last.t[0], NULL, NULL, N, D, DIT_LN_EPS, &s->fstats);
    if (!st) {
        linear_forward(s->fmod, m->ctx.cs, PW(p_fa_w), PW(p_fa_b), B, D, 2 * D);
        modulate_forward(s->hf, s->ln, s->fmod, s->fmod + D, B, T, D, 2 * D);
        linear_forward(out, s->hf, PW(p_fl_w), PW(p_fl_b), N, D, P);
        unpatchify_forward(s->pred, out, B, c->channels, c->resolution, c->resolution, c->patch);
    }
    pool_free(m->pool, out);
    return st;
}

/* Gradient buffers for the captured hidden states, zeroed for the caller's auxiliary loss. */
static st_status capture_forward(model *m)
{
    dit_step *s = &m->step;
    s->dhidden = calloc((size_t)m->n_capture, sizeof *s->dhidden);
    if (!s->dhidden) return st_fail(ST_ERR_INTERNAL, "out of host memory");
    st_status st = ST_OK;
    for (int k = 0; k < m->n_capture && !st; k++)
        st = pool_alloc_zero(m->pool, (size_t)m->seq.state_numel[0] * sizeof(float), MEM_ACTIVATIONS,
                             "dit.dhidden", (void **)&s->dhidden[k]);
    return st;
}

st_status model_hidden(model *m, int k, const float **h, float **dh)
{
    dit_step *s = &m->step;
    if (!s->active || !s->run || k < 0 || k >= m->n_capture)
        return st_fail(ST_ERR_INVALID, "model_hidden: no captured hidden state %d after a training forward", k);
    const int i = m->capture[k];
    const block_state *out = i == m->seq.n - 1 ? &s->last : seq_run_output(s->run, i);
    if (!out) return st_fail(ST_ERR_INTERNAL, "model_hidden: block %d's output was not kept", i);
    *h = out->t[0];
    *dh = s->dhidden[k];
    return ST_OK;
}

st_status model_forward(model *m, const float *x, const float *timesteps, const int64_t *labels, int64_t batch,
                        bool train, const float **pred)
{
    *pred = NULL;
    if (m->step.active) return st_fail(ST_ERR_INTERNAL, "model_forward: the previous forward was not released");
    if (batch < 1) return st_fail(ST_ERR_INVALID, "model_forward: batch %lld must be at least 1", (long long)batch);
    set_batch(m, batch);
    m->step.active = true;
    st_status st = embed_forward(m, x, timesteps, labels, train);
    if (!st) {
        block_state first = {.n = 1, .t = {m->step.tokens}};
        m->step.tokens = NULL; /* the executor owns the first state now */
        st = seq_forward(&m->seq, &m->plan, m->off.host ? &m->off : NULL, &first, train, &m->step.last, &m->step.run);
    }
    if (!st && train && m->n_capture) st = capture_forward(m);
    if (!st) st = head_forward(m);
    if (st) {
        model_release(m);
        return st;
    }
    *pred = m->step.pred;
    return ST_OK;
}

static st_status head_backward(model *m, const float *dpred, float *dstate)
{
    const model_config *c = &m->cfg;
    dit_step *s = &m->step;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t P = c->channels * c->patch * c->patch;
    scratch k = {.pool = m->pool};
    float *dout = scratch_take_zero(&k, N * P, MEM_WORKSPACE, "dit.final.dout");
    float *dh = scratch_take_zero(&k, N * D, MEM_WORKSPACE, "dit.final.dh");
    float *dln = scratch_take_zero(&k, N * D, MEM_WORKSPACE, "dit.final.dln");
    float *dmod = scratch_take_zero(&k, B * 2 * D, MEM_WORKSPACE, "dit.final.dmod");
    if (k.status) return scratch_end(&k);
    unpatchify_backward(dout, dpred, B, c->channels, c->resolution, c->resolution, c->patch);
    linear_backward(dh, PG(p_fl_w), PG(p_fl_b), dout, s->hf, PW(p_fl_w), N, D, P);
    modulate_backward(dln, dmod, dmod + D, dh, s->ln, s->fmod + D, B, T, D, 2 * D);
    layernorm_backward(dstate, NULL, NULL, dln, s->last.t[0], NULL, N, D, &s->fstats);
    linear_backward(m->ctx.dcs, PG(p_fa_w), PG(p_fa_b), dmod, m->ctx.cs, PW(p_fa_w), B, D, 2 * D);
    return scratch_end(&k);
}

static st_status embed_backward(model *m, const float *dtokens)
{
    const model_config *c = &m->cfg;
    dit_step *s = &m->step;
    const int64_t B = m->shape.batch, D = c->hidden, N = B * m->shape.tokens;
    const int64_t P = c->channels * c->patch * c->patch;
    linear_backward(NULL, PG(p_x_w), PG(p_x_b), dtokens, s->patches, PW(p_x_w), N, P, D);
    scratch k = {.pool = m->pool};
    float *dc = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "dit.dc");
    float *dts = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "dit.dt_silu");
    float *dth = scratch_take_zero(&k, B * D, MEM_WORKSPACE, "dit.dt_hidden");
    if (k.status) return scratch_end(&k);
    silu_backward(dc, m->ctx.dcs, s->c, B * D);
    if (PG(p_y)) embedding_backward(PG(p_y), dc, s->labels, B, D);
    linear_backward(dts, PG(p_t2_w), PG(p_t2_b), dc, s->ts, PW(p_t2_w), B, D, D);
    silu_backward(dth, dts, s->th, B * D);
    linear_backward(NULL, PG(p_t0_w), PG(p_t0_b), dth, s->tfreq, PW(p_t0_w), B, DIT_FREQ_DIM, D);
    return scratch_end(&k);
}

st_status model_backward(model *m, const float *dpred)
{
    dit_step *s = &m->step;
    if (!s->active || !s->run) return st_fail(ST_ERR_INTERNAL, "model_backward: no training forward to go back through");
    const int64_t N = m->shape.batch * m->shape.tokens;
    float *dstate = NULL;
    st_status st = pool_alloc_zero(m->pool, (size_t)(N * m->cfg.hidden) * sizeof(float), MEM_ACTIVATIONS,
                                   "dit.dstate", (void **)&dstate);
    if (!st) st = head_backward(m, dpred, dstate);
    op_state_release(&s->fstats);
    state_free(m->pool, &s->last);
    pool_free(m->pool, s->hf);
    pool_free(m->pool, s->ln);
    s->hf = s->ln = NULL;
    if (!st) {
        const float **extra = NULL;
        if (m->n_capture && !(extra = calloc((size_t)m->seq.n, sizeof *extra)))
            st = st_fail(ST_ERR_INTERNAL, "out of host memory");
        for (int k = 0; extra && k < m->n_capture; k++) extra[m->capture[k]] = s->dhidden[k];
        if (!st) {
            st = seq_backward(s->run, &(block_state){.n = 1, .t = {dstate}}, (const float *const *)extra);
            s->run = NULL;
        }
        free(extra);
    }
    if (!st) st = embed_backward(m, dstate);
    pool_free(m->pool, dstate);
    model_release(m);
    return st;
}

/* embed_forward, the executor, capture_forward and head_forward, as allocations. */
void model_simulate_forward(model *m, int64_t batch, mem_sim *sim, mem_sim *host)
{
    set_batch(m, batch);
    const model_config *c = &m->cfg;
    const size_t f = sizeof(float), B = (size_t)batch, N = B * (size_t)m->shape.tokens, D = (size_t)c->hidden;
    const size_t P = (size_t)(c->channels * c->patch * c->patch), S = N * D * f;
    sim_take(sim, MEM_ACTIVATIONS, B * sizeof(int64_t) + N * P * f + S + B * DIT_FREQ_DIM * f + 5 * B * D * f);
    seq_plan_simulate_forward(&m->plan, &m->seq, sim, host);
    sim_take(sim, MEM_ACTIVATIONS, (size_t)m->n_capture * S);
    sim_take(sim, MEM_ACTIVATIONS, B * 2 * D * f + 2 * S + B * (size_t)(c->channels * c->resolution * c->resolution) * f);
    sim_take(sim, MEM_WORKSPACE, N * P * f); /* the final linear's output, before unpatchify */
    sim_take(sim, MEM_ACTIVATIONS, 2 * N * f);
    sim_drop(sim, MEM_WORKSPACE, N * P * f);
}

/* model_backward and model_release, as allocations. */
void model_simulate_backward(model *m, int64_t batch, mem_sim *sim, mem_sim *host)
{
    set_batch(m, batch);
    const model_config *c = &m->cfg;
    const size_t f = sizeof(float), B = (size_t)batch, N = B * (size_t)m->shape.tokens, D = (size_t)c->hidden;
    const size_t P = (size_t)(c->channels * c->patch * c->patch), S = N * D * f;
    sim_take(sim, MEM_ACTIVATIONS, S); /* the state gradient */
    sim_take(sim, MEM_WORKSPACE, N * P * f + 2 * S + B * 2 * D * f);
    sim_drop(sim, MEM_WORKSPACE, N * P * f + 2 * S + B * 2 * D * f);
    sim_drop(sim, MEM_ACTIVATIONS, 2 * N * f + 3 * S); /* LN statistics, the last state, ln and h */
    seq_plan_simulate_backward(&m->plan, &m->seq, sim, host);
    sim_take(sim, MEM_WORKSPACE, 3 * B * D * f);
    sim_drop(sim, MEM_WORKSPACE, 3 * B * D * f);
    sim_drop(sim, MEM_ACTIVATIONS, S);
    sim_drop(sim, MEM_ACTIVATIONS, B * (size_t)(c->channels * c->resolution * c->resolution) * f + B * 2 * D * f +
                                       5 * B * D * f + B * DIT_FREQ_DIM * f + N * P * f + B * sizeof(int64_t) +
                                       (size_t)m->n_capture * S);
}
