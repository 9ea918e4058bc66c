/* The model object's generic half: families (dit.c, mmdit.c) supply embeddings, head and blocks through
 * model_family; everything that only needs block sequences and their plans lives here. */
#include "models/core/family.h"
#include "models/core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/checked.h"
#include "segtrain/rng.h"

static const model_family *family_of(const model_config *mc) { return family_of_config(mc)->ops; }

/* Every size product of the families is, times a constant of at most 8 (qkv 3D, fc1 4D, a single-stream block's
 * 7D), one of the terms below, or the batch times a sample's term (model_check_batch). Checking the terms once
 * here keeps every product in the families inside int64_t; params.c checks the parameters' total. A sample's
 * terms: its rows S (image tokens, plus caption tokens for mmdit and AuraFlow's 8 register tokens) times the
 * widest row (8 D, or a LoRA rank), the attention probabilities H S^2 (kept by math; checked for flash too), its
 * pixels and the timestep features. */
static int64_t blocks_of(const model_config *c) { return c->depth + c->single_depth; }

static st_status too_large(const char *keys, const model_config *c)
{
    return st_fail(ST_ERR_INVALID, "%s: these sizes make a tensor of more than 2^57 elements (depth %lld, hidden_size "
                   "%lld, num_heads %lld, patch_size %lld, in_channels %lld, latent %lld x %lld, num_classes %lld, "
                   "tokenizer_max_length %lld, text_vocab_size %lld, lora_rank %lld)", keys, (long long)c->depth,
                   (long long)c->hidden, (long long)c->heads, (long long)c->patch, (long long)c->channels,
                   (long long)c->height, (long long)c->width, (long long)c->classes, (long long)c->text_len, (long long)c->text_vocab,
                   (long long)c->lora_rank);
}

static st_status check_sizes(const model_config *c, int64_t *per_sample)
{
    const int64_t lim = CK_MAX_ELEMENTS, D = c->hidden;
    const int64_t L = model_reads_text(c) ? c->text_len + c->text2_len + family_of_config(c)->register_tokens +
                                                 (c->depth + c->single_depth + 1) * c->llama_len : 0; /* hidream's */
    const int64_t wide = D > c->lora_rank ? D : c->lora_rank;
    int64_t W, P, S, x, rows, attn, pixels, freq;
    if (!ck_add(c->depth, c->single_depth, INT32_MAX / 4, &x)) /* block counts are ints */
        return st_fail(ST_ERR_INVALID, "depth, num_single_layers: %lld + %lld blocks; at most %d in all",
                       (long long)c->depth, (long long)c->single_depth, INT32_MAX / 4);
    if (!ck_mul(wide, 8, lim, &W) || !ck_mul(D, W, lim, &x)) return too_large("hidden_size, lora_rank", c);
    if (!ck_mul(c->channels, c->patch, lim, &P) || !ck_mul(P, c->patch, lim, &P) || !ck_mul(P, c->patch_t, lim, &P) ||
        !ck_mul(P, D, lim, &x))
        return too_large("in_channels, patch_size, hidden_size", c);
    if (!ck_add(c->classes, 1, lim, &x) || !ck_mul(x, D, lim, &x)) return too_large("num_classes, hidden_size", c);
    if (!ck_mul(c->text_dim, D, lim, &x) || !ck_mul(c->pooled_dim, D, lim, &x) || !ck_mul(L, c->text_dim, lim, &x) ||
        !ck_add(x, c->pooled_dim, lim, &x))
        return too_large("joint_attention_dim, pooled_projection_dim, tokenizer_max_length, hidden_size", c);
    const bool grid = ck_mul(c->height / c->patch, c->width / c->patch, lim, &S) &&
                      ck_mul(S, c->frames / c->patch_t, lim, &S);
    if (grid && c->height != c->width && c->max_tokens > S) S = c->max_tokens; /* HiDream's padding */
    if (!grid || !ck_add(S, L, lim, &S) || !ck_mul(S, W, lim, &rows))
        return too_large("resolution, num_frames, patch_size, tokenizer_max_length, hidden_size", c);
    if (!ck_mul(c->heads, S, lim, &attn) || !ck_mul(attn, S, lim, &attn))
        return too_large("num_heads, resolution, patch_size, tokenizer_max_length", c);
    if (!ck_mul(c->channels, c->height, lim, &pixels) || !ck_mul(pixels, c->width, lim, &pixels) ||
        !ck_mul(pixels, c->frames, lim, &pixels))
        return too_large("in_channels, resolution, num_frames", c);
    if (!ck_mul(D, DIT_FREQ_DIM, lim, &freq)) return too_large("hidden_size", c);
    if (!ck_mul(model_audio_tokens(c) + 1, c->audio_channels + 8 * D, lim, &x)) /* LTX-2's audio rows */
        return too_large("num_frames, audio_in_channels, hidden_size", c);
    if (!ck_mul(c->text2_len, c->text2_dim, lim, &x) || !ck_mul(c->text2_len + c->text2_dim + D, 2048, lim, &x) ||
        !ck_mul(c->image_dim, c->image_dim + D, lim, &x)) /* hunyuanvideo15's ByT5 projection is 2048 wide */
        return too_large("text_embed_2_dim, image_embed_dim, hidden_size", c);
    if (!ck_mul(c->pos_embed_max, c->pos_embed_max, lim, &x) || !ck_mul(x, D, lim, &x)) /* sd3's table */
        return too_large("pos_embed_max_size, hidden_size", c);
    *per_sample = rows > attn ? rows : attn;
    *per_sample = *per_sample > pixels ? *per_sample : pixels;
    *per_sample = *per_sample > freq ? *per_sample : freq;
    return ST_OK;
}

st_status model_check_batch(const model *m, int64_t batch)
{
    if (batch < 1) return st_fail(ST_ERR_INVALID, "train_batch_size: %lld must be at least 1", (long long)batch);
    /* a step holds at most about 16 sample-sized tensors per block and as many again outside the blocks */
    int64_t x;
    if (!ck_mul(batch, m->per_sample, CK_MAX_ELEMENTS, &x) || !ck_mul(x, 16 * (blocks_of(&m->cfg) + 8), INT64_MAX / 64, &x))
        return st_fail(ST_ERR_INVALID, "train_batch_size: %lld samples of this model need more than 2^57 floats (%lld "
                       "in a sample's largest tensor, %lld blocks)", (long long)batch, (long long)m->per_sample,
                       (long long)blocks_of(&m->cfg));
    return ST_OK;
}

/* ---- musubi_blocks_to_swap (docs/WEIGHTS.md) ----
 * SimpleTuner's MusubiBlockSwapManager counts the blocks of the sequences a family lists as one list (Flux: the
 * double-stream blocks, then the single-stream ones) and keeps the last n of it on its offload device. Here their
 * frozen weights are in host memory: the k-th swapped block in that order is group k + 1, brought into one device
 * buffer around each forward, recompute and backward of the block (stream_in, stream_out), so the device holds the
 * other blocks' weights and one swapped block's at a time. Adapters (trainable) stay on the device. */

static int swap_group_of(const struct swap_seq *q, int i) { return i + q->first >= 0 ? i + q->first + 1 : 0; }

static st_status swap_weights_in(void *ctx, int i, int next)
{
    (void)next; /* a block's weights come in around each use */
    const struct swap_seq *q = ctx;
    const int g = swap_group_of(q, i);
    return g ? param_swap_in(q->m->params, g, q->m->off.engine) : ST_OK;
}

static void swap_weights_out(void *ctx, int i, int next)
{
    (void)next;
    const struct swap_seq *q = ctx;
    const int g = swap_group_of(q, i);
    if (g) param_swap_out(q->m->params, g);
}

void model_block_module(const model *m, int q, int i, char *name, size_t n)
{
    const family_desc *d = family_of_config(&m->cfg);
    if (d->block_module) d->block_module(i, m->seq[q].n, name, n);
    else snprintf(name, n, "%s.%d", m->seq[q].name, i);
}

/* The index of m's sequence of that name, -1: none (a Flux config without single-stream blocks has no such). */
static int seq_named(const model *m, const char *name)
{
    for (int q = 0; q < m->n_seq; q++)
        if (!strcmp(m->seq[q].name, name)) return q;
    return -1;
}

static st_status swap_not_built(const model *m)
{
    char built[512] = "";
    size_t at = 0;
    for (int i = 0; family_at(i) && at < sizeof built; i++)
        if (family_at(i)->swap_blocks[0])
            at += (size_t)snprintf(built + at, sizeof built - at, "%s%s", at ? ", " : "", family_at(i)->name);
    /* every family SimpleTuner's transformers stream has its lists; the others have nothing to follow */
    const family_desc *desc = family_of_config(&m->cfg);
    const char *st_name = desc->st[0].name;
    char why[256];
    if (st_name) snprintf(why, sizeof why, "SimpleTuner's %s model streams none of its blocks (no "
                          "MusubiBlockSwapManager: the key moves nothing there)", st_name);
    else snprintf(why, sizeof why, "it is not a SimpleTuner family, with no swap to follow");
    return st_fail(ST_ERR_UNSUPPORTED, "musubi_blocks_to_swap: block swap is not built for the %s family: %s (built: "
                   "%s)", m->cfg.family, why, built);
}

/* The blocks of the family's swap lists, and their description ("transformer_blocks 19 + single_transformer_blocks
 * 38"). */
static int swappable_blocks(const model *m, const char *const *lists, char *what, size_t size)
{
    int total = 0;
    size_t at = 0;
    what[0] = 0;
    for (int k = 0; k < 2 && lists[k]; k++) {
        const int q = seq_named(m, lists[k]);
        if (q < 0) continue;
        total += m->seq[q].n;
        if (at < size) at += (size_t)snprintf(what + at, size - at, "%s%s %d", at ? " + " : "", lists[k], m->seq[q].n);
    }
    return total;
}

static st_status swap_blocks(model *m)
{
    const int64_t n = m->cfg.blocks_to_swap;
    const char *const *lists = family_of_config(&m->cfg)->swap_blocks;
    if (!n) return ST_OK;
    if (!lists[0]) return swap_not_built(m);
    if (!m->cfg.lora_rank)
        return st_fail(ST_ERR_UNSUPPORTED, "musubi_blocks_to_swap: full fine-tuning trains every weight of the swapped "
                       "blocks, and SimpleTuner's MusubiBlockSwapManager keeps trainable weights on the device (it "
                       "moves the frozen ones), so the key would move nothing; moving a trained weight's gradient and "
                       "optimizer state with it is not built: train LoRA or LyCORIS (the adapters stay on the device) "
                       "or set musubi_blocks_to_swap=0");
    char what[160];
    const int total = swappable_blocks(m, lists, what, sizeof what);
    if (n > total - 1)
        return st_fail(ST_ERR_INVALID, "musubi_blocks_to_swap: %lld, but the %s model has %d blocks (%s): at most %d "
                       "swap (SimpleTuner's max_swappable_blocks: one block stays on the device)", (long long)n,
                       m->cfg.family, total, what, total - 1);
    st_status st = ST_OK;
    int at = -(total - (int)n); /* the global index of a sequence's first block, less the first swapped one's */
    for (int k = 0; k < 2 && lists[k] && !st; k++) {
        const int q = seq_named(m, lists[k]);
        if (q < 0) continue;
        block_seq *s = &m->seq[q];
        m->swap[q] = (struct swap_seq){.m = m, .first = at};
        for (int i = at < 0 ? -at : 0; i < s->n && !st; i++) {
            char name[80];
            model_block_module(m, q, i, name, sizeof name - 1);
            strcat(name, ".");
            st = param_set_swap(m->params, swap_group_of(&m->swap[q], i), name);
        }
        if (at + s->n > 0) s->weights_in = swap_weights_in, s->weights_out = swap_weights_out, s->weights_ctx = &m->swap[q];
        at += s->n;
    }
    return st;
}

int model_swappable_blocks(const model *m)
{
    char what[160];
    return swappable_blocks(m, family_of_config(&m->cfg)->swap_blocks, what, sizeof what);
}

int model_swapped_blocks(const model *m, int sequence)
{
    if (sequence < 0 || sequence >= m->n_seq || !m->swap[sequence].m) return 0;
    const int first = m->swap[sequence].first, n = m->seq[sequence].n;
    return first >= 0 ? n : first + n > 0 ? first + n : 0;
}

/* model_create's, or with base model_create_sharing's: the parameters are base's but for the grid tables */
static st_status create(const model_config *mc, pool *device, model *base, model **out)
{
    *out = NULL;
    int64_t per_sample = 0;
    st_status st = model_config_check(mc);
    if (!st) st = check_sizes(mc, &per_sample);
    if (st) return st;
    model *m = calloc(1, sizeof *m);
    if (!m) return st_host_oom("the model");
    m->cfg = *mc;
    m->family = family_of(mc);
    m->pool = device;
    m->params = &m->own_params;
    m->per_sample = per_sample;
    m->shape = (model_shape){.tokens = model_image_tokens(mc), .hidden = mc->hidden, .heads = mc->heads,
                             .text = mc->text_len + mc->text2_len,
                             .mechanism = mc->mechanism};
    /* the U-Nets' LoRA files name their adapters under "unet.", as diffusers' and SimpleTuner's U-Net pipelines do */
    m->own_params.lora_component = family_of_config(mc)->lora_component;
    m->own_params.checkpoint_name = family_of_config(mc)->checkpoint_name;
    m->own_params.bf16_base = mc->bf16_base;
    m->own_params.quant_base = mc->quant_base;
    m->own_params.quant_exclude = family_of_config(mc)->quanto_exclude;
    m->own_params.lycoris = m->cfg.lycoris.on ? &m->cfg.lycoris : NULL;
    m->own_params.lycoris_classes = family_of_config(mc)->lycoris_classes;
    const size_t impl = m->family->impl_size;
    if (impl && !(m->impl = model_alloc(m, 1, impl))) st = st_host_oom("the %s model", mc->family);
    if (!st) st = m->family->create(m);
    for (int q = 0; q < m->n_seq; q++) m->seq[q].bf16_states = mc->bf16_activations;
    if (!st) st = param_set_check(m->params);
    if (!st) st = swap_blocks(m);
    if (!st) st = model_stream_layers(m);
    if (!st) st = model_group_offload(m);
    const ckpt_settings none = {.interval = 1, .stride = 1};
    if (!st) st = model_set_checkpointing(m, &none, NULL, 0);
    if (!st && base && m->family != base->family)
        st = st_fail(ST_ERR_INVALID, "a %s model cannot share the weights of a %s model", mc->family, base->cfg.family);
    if (!st && device)
        st = base ? param_set_share(m->params, base->params, device) : param_set_alloc(m->params, device);
    /* a dry model plans: it has no data; a sharing one has only its grid tables to fill (a family with one has no
     * other fixed table, which fill_fixed would write into base's) */
    if (!st && device && m->family->fill_fixed && !pool_is_dry(device) && (!base || m->params->weights))
        m->family->fill_fixed(m);
    if (st) {
        model_destroy(m);
        return st;
    }
    *out = m;
    return ST_OK;
}

st_status model_create(const model_config *mc, pool *device, model **out) { return create(mc, device, NULL, out); }

st_status model_create_sharing(const model_config *mc, model *base, model **out)
{
    *out = NULL;
    if (!base->pool) return st_fail(ST_ERR_INVALID, "model_create_sharing: the base model has no parameters allocated");
    return create(mc, base->pool, base, out);
}

void model_destroy(model *m)
{
    if (!m) return;
    model_release(m);
    copy_engine_destroy(m->off.engine);
    param_set_free(&m->own_params);
    for (int i = 0; i < m->n_seq; i++) seq_plan_free(&m->plan[i]);
    free(m->captured);
    free(m->capture);
    if (m->family->destroy) m->family->destroy(m);
    while (m->n_owned) free(m->owned[--m->n_owned]);
    free(m);
}

const model_config *model_get_config(const model *m) { return &m->cfg; }
param_set *model_params(model *m) { return m->params; }

int model_sequences(model *m, block_seq **seqs)
{
    *seqs = m->seq;
    return m->n_seq;
}

st_status model_set_checkpointing(model *m, const ckpt_settings *cs, const int64_t *capture, size_t n_capture)
{
    if (n_capture && !m->family->hidden)
        return st_fail(ST_ERR_UNSUPPORTED, "capture_hidden_states: the %s family does not support it (dit, skipdit do)",
                       m->cfg.family);
    const int n = m->seq[0].n;
    bool *captured = calloc((size_t)(n ? n : 1), sizeof *captured);
    int *list = calloc(n_capture ? n_capture : 1, sizeof *list);
    seq_plan plans[MODEL_SEQ_MAX] = {0};
    st_status st = captured && list ? ST_OK : st_host_oom("the list of captured blocks");
    for (size_t k = 0; k < n_capture && !st; k++) {
        if (capture[k] < 0 || capture[k] >= n)
            st = st_fail(ST_ERR_INVALID, "capture_hidden_states: block %lld does not exist (blocks 0-%d)",
                         (long long)capture[k], n - 1);
        else captured[capture[k]] = true, list[k] = (int)capture[k];
    }
    if (!st && cs->enabled && cs->plan[0]) st = plan_check_sequences(cs->plan, m->seq, m->n_seq);
    int planned = 0;
    for (; planned < m->n_seq && !st; planned++)
        st = plan_sequence(cs, &m->seq[planned], m->cfg.family, planned ? NULL : captured, &plans[planned]);
    if (st) {
        for (int i = 0; i < planned; i++) seq_plan_free(&plans[i]);
        free(captured), free(list);
        return st;
    }
    for (int i = 0; i < m->n_seq; i++) {
        seq_plan_free(&m->plan[i]);
        m->plan[i] = plans[i];
    }
    free(m->captured), free(m->capture);
    m->captured = captured;
    m->capture = list;
    m->n_capture = (int)n_capture;
    return ST_OK;
}

void model_plan_text(const model *m, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < m->n_seq && at < size; i++) {
        at += (size_t)snprintf(buf + at, size - at, "%s%s: ", i ? " / " : "", m->seq[i].name);
        if (at < size) seq_plan_format(&m->plan[i], buf + at, size - at);
        at += strlen(buf + at);
    }
}

const seq_plan *model_plan(const model *m, int sequence)
{
    return sequence >= 0 && sequence < m->n_seq ? &m->plan[sequence] : NULL;
}

st_status model_set_host_pool(model *m, pool *host)
{
    if (!m->off.engine) {
        st_status st = copy_engine_create(&m->off.engine);
        if (st) return st;
    }
    m->off.device = m->pool;
    m->off.host = host;
    return param_set_alloc_swapped(m->params, host);
}

st_status model_spill_weights(model *m)
{
    return m->cfg.group_offload && m->cfg.group_offload_dir[0] ? param_set_spill(m->params, m->cfg.group_offload_dir)
                                                               : ST_OK;
}

copy_engine *model_copy_engine(model *m) { return m->off.engine; }

offload *model_offload(model *m) { return m->off.host ? &m->off : NULL; }

/* Whether name holds the pattern term t[0, len) where its marks say (internal.h's init_rule). */
static bool init_term(const char *name, const char *t, size_t len)
{
    const bool negated = len && *t == '!';
    t += negated, len -= negated;
    const bool start = len && *t == '^';
    t += start, len -= start;
    const bool end = len && t[len - 1] == '$';
    len -= end;
    const size_t n = strlen(name);
    bool held = false;
    for (size_t i = 0; !held && i + len <= n; i++)
        held = (!start || i == 0) && (!end || i + len == n) && !memcmp(name + i, t, len);
    return held != negated;
}

/* Whether name matches one alternative of a pattern: each of its terms, up to the next '|'. */
static bool init_alternative(const char *name, const char *t)
{
    for (;; t++) {
        const size_t len = strcspn(t, "&|");
        if (!init_term(name, t, len)) return false;
        if (t[len] != '&') return true;
        t += len;
    }
}

param_init init_by_rules(const char *name, const init_rule *rules, param_init otherwise)
{
    for (; rules->pattern; rules++)
        for (const char *alt = rules->pattern;; alt++) {
            if (init_alternative(name, alt)) return rules->init;
            if (!(alt = strchr(alt, '|'))) break;
        }
    return otherwise;
}

static param_init init_of(const model *m, const char *name)
{
    const model_family *f = m->family;
    return f->init_of ? f->init_of(name) : init_by_rules(name, f->inits, INIT_XAVIER);
}

/* p's initial values into w (p->w, or a float copy of a bf16 weight): xavier-uniform weights (a conv kernel as a
 * (out, in k k) matrix), N(0, 0.02) embedding tables and timestep MLPs, zero adaLN modulations and output layers
 * (adaLN-Zero), as the family says; LoRA A as PEFT's kaiming-uniform(a = sqrt 5), B zero; LyCORIS's as the
 * lycoris-lora package's (lyco_init_of). */
static void init_param(model *m, const param *p, float *w, uint64_t seed, bool random_all)
{
    const uint64_t stream = rng_stream(p->name);
    const int64_t fan_out = p->shape[0], fan_in = p->ndim > 1 ? p->numel / p->shape[0] : 1;
    if (random_all) { /* every value non-zero and of a scale that keeps activations O(1) (gradient checks) */
        float a = p->ndim > 1 ? (float)(1.0 / sqrt((double)fan_in)) : 0.1f;
        rng_fill_uniform(w, p->numel, seed, stream, -a, a);
        if (init_of(m, p->name) == INIT_ONE)
            for (int64_t k = 0; k < p->numel; k++) w[k] += 1.0f;
        return;
    }
    memset(w, 0, (size_t)p->numel * sizeof(float));
    float std = 0;
    const lyco_init lyco = lyco_init_of(p->name, &std);
    if (strstr(p->name, "lora_A") || lyco == LYCO_INIT_KAIMING) {
        float a = (float)(1.0 / sqrt((double)fan_in));
        rng_fill_uniform(w, p->numel, seed, stream, -a, a);
        return;
    }
    if (lyco == LYCO_INIT_NORMAL) {
        rng_fill_normal(w, p->numel, seed, stream, 0.0f, std);
        return;
    }
    if (strstr(p->name, "lora_B") || lyco == LYCO_INIT_ZERO) return;
    switch (init_of(m, p->name)) {
    case INIT_ZERO: break;
    case INIT_ONE:
        for (int64_t k = 0; k < p->numel; k++) w[k] = 1.0f;
        break;
    case INIT_NORMAL: /* tables and weights; biases start at zero */
        if (p->ndim > 1) rng_fill_normal(w, p->numel, seed, stream, 0.0f, 0.02f);
        break;
    case INIT_XAVIER:
        if (p->ndim > 1) {
            float a = (float)sqrt(6.0 / (double)(fan_in + fan_out));
            rng_fill_uniform(w, p->numel, seed, stream, -a, a);
        }
        break;
    }
}

st_status model_init(model *m, uint64_t seed, bool random_all)
{
    param_set *s = m->params;
    for (int i = 0; i < s->n; i++) {
        param *p = param_at(s, i);
        if (p->fixed) continue;
        if (!p->bf16 && !p->quant) {
            init_param(m, p, p->w, seed, random_all);
            continue;
        }
        /* a bf16 weight is drawn in float as any other and rounded (a quantized one then quantized): the float
         * model's weight, rounded */
        float *w = malloc((size_t)p->numel * sizeof(float));
        if (!w) return st_host_oom("a float copy of %s to initialise", p->name);
        init_param(m, p, w, seed, random_all);
        st_status st = param_store_bf16(p, w);
        free(w);
        if (st) return st;
    }
    return ST_OK;
}

st_status model_hidden(model *m, int k, const float **h, float **dh)
{
    if (!m->family->hidden) return st_fail(ST_ERR_INVALID, "model_hidden: the %s family captures nothing", m->cfg.family);
    return m->family->hidden(m, k, h, dh);
}

void model_set_r_timesteps(model *m, const float *r) { m->r_time = r; }

void model_set_dropout_seed(model *m, uint64_t seed) { m->dropout_seed = seed; }

float *model_take(model *m, st_status *st, int64_t floats, const char *what, bool zero)
{
    void *p = NULL;
    if (!*st)
        *st = (zero ? pool_alloc_zero : pool_alloc)(m->pool, (size_t)floats * sizeof(float), MEM_ACTIVATIONS, what, &p);
    return p;
}

st_status model_caption_length(const model *m, const float *cond, int64_t b, float *len)
{
    const int64_t L = m->shape.text;
    const float *mask = cond + b * model_cond_len(&m->cfg) + L * m->cfg.text_dim;
    int64_t n = 0;
    while (n < L && mask[n] == 1.0f) n++;
    for (int64_t j = n; j < L; j++)
        if (mask[j] != 0.0f)
            return st_fail(ST_ERR_INVALID, "the batch's sample %lld: its caption mask is %g at token %lld after %lld "
                           "ones: %s lays out a sample's rows by its caption's length, and takes a mask of its tokens "
                           "first, then padding (ones, then zeros)", (long long)b, mask[j], (long long)j, (long long)n,
                           m->cfg.family);
    *len = (float)n;
    return ST_OK;
}

int64_t family_text_cond_len(const model_config *mc)
{
    return mc->text_len * (mc->text_dim + model_text_mask(mc)) + mc->pooled_dim + mc->text2_len * (mc->text2_dim + 1) +
           mc->guidance_embeds + model_size_ids(mc);
}

int64_t model_cond_len(const model_config *mc)
{
    const family_desc *d = family_of_config(mc);
    if (d->cond_len) return d->cond_len(mc);
    return d->traits & TR_TEXT ? family_text_cond_len(mc) : 1;
}

float *family_text_condition(const model_config *mc, const char *caption, float *cond, float **pooled_out)
{
    float *pooled = cond + mc->text_len * mc->text_dim, *rest = pooled + mc->pooled_dim;
    const int64_t words = encode_caption(caption ? caption : "", mc->text_vocab, mc->text_len, mc->text_dim,
                                         mc->pooled_dim, cond, pooled);
    if (model_text_mask(mc)) { /* the words fill the first tokens; ChromaPipeline keeps one padding token too, and
                                  Krea 2's text attends within itself: its empty caption keeps one token (a real
                                  one's chat template always has some) */
        const mask_keep keep = family_of_config(mc)->mask;
        const int64_t kept = words + (keep == MASK_PAD_ONE || (keep == MASK_EMPTY_ONE && !words));
        for (int64_t l = 0; l < mc->text_len; l++) *rest++ = l < kept ? 1.0f : 0.0f;
    }
    if (mc->text2_len) { /* hunyuanvideo15's ByT5 glyph tokens: the caption's words again, and their mask */
        const int64_t glyphs = encode_caption(caption ? caption : "", mc->text_vocab, mc->text2_len, mc->text2_dim,
                                              0, rest, NULL);
        rest += mc->text2_len * mc->text2_dim;
        for (int64_t l = 0; l < mc->text2_len; l++) *rest++ = l < glyphs ? 1.0f : 0.0f;
    }
    if (mc->guidance_embeds) *rest = (float)mc->guidance;
    if (model_size_ids(mc)) { /* SDXL's size ids (height, width): the image uncropped at the training size */
        const float h = (float)(mc->height * mc->vae_scale), w = (float)(mc->width * mc->vae_scale);
        const float ids[6] = {h, w, 0.0f, 0.0f, h, w};
        memcpy(rest, ids, sizeof ids);
    }
    if (pooled_out) *pooled_out = pooled;
    return rest;
}

void family_ids_condition(const model_config *mc, const char *const parts[3], float *cond)
{
    const int64_t n = encode_caption_ids(parts, 3, mc->text_vocab, mc->text_len, cond);
    for (int64_t l = 0; l < mc->text_len; l++) cond[mc->text_len + l] = l < n ? 1.0f : 0.0f;
}

void model_condition(const model_config *mc, int64_t label, const char *caption, float *cond)
{
    const family_desc *d = family_of_config(mc);
    if (d->condition) d->condition(mc, caption, cond);
    else if (!(d->traits & TR_TEXT)) cond[0] = (float)label;
    else family_text_condition(mc, caption, cond, NULL);
}

void model_null_condition(const model_config *mc, float *cond) { model_condition(mc, mc->classes, "", cond); }

#define W(i) (param_at(m->params, (i))->w)
#define G(i) (param_at(m->params, (i))->g)

/* ---- the final layer ---- */

#define BIAS(of, i) ((i) < 0 ? NULL : of(i))

/* y = x W^T + b, and its backward, with weight w read as float: widened around the GEMM where it is held quantized
 * (lin_quantize_frozen: the embedders' and final layer's linears under base_model_precision) */
static st_status frozen_forward(model *m, float *y, const float *x, int w, int b, int64_t n, int64_t in, int64_t out)
{
    const float *wf;
    float *tmp;
    const st_status st = lin_weight_float(m->params, m->pool, w, &wf, &tmp);
    if (!st) linear_forward(y, x, wf, BIAS(W, b), n, in, out);
    pool_free(m->pool, tmp);
    return st;
}

static st_status frozen_backward(model *m, float *dx, int w, int b, const float *dy, const float *x, int64_t n,
                                 int64_t in, int64_t out)
{
    const float *wf = W(w);
    float *tmp = NULL;
    const st_status st = dx ? lin_weight_float(m->params, m->pool, w, &wf, &tmp) : ST_OK; /* only dx reads it */
    if (!st) linear_backward(dx, G(w), BIAS(G, b), dy, x, wf, n, in, out);
    pool_free(m->pool, tmp);
    return st;
}

int64_t model_loss_numel(const model_config *mc) { return mc->channels * mc->frames * mc->height * mc->width; }

int64_t model_image_tokens(const model_config *mc)
{
    const int64_t grid = mc->frames / mc->patch_t * (mc->height / mc->patch) * (mc->width / mc->patch);
    return mc->height != mc->width && mc->max_tokens ? mc->max_tokens : grid; /* HiDream pads a non-square grid */
}

int64_t model_sample_numel(const model_config *mc)
{
    return model_loss_numel(mc) + model_audio_tokens(mc) * mc->audio_channels;
}

int64_t model_out_channels(const model_config *c) { return c->out_channels ? c->out_channels : c->channels; }

int64_t model_patch_dim(const model_config *c) { return c->channels * c->patch_t * c->patch * c->patch; }

patch_shape model_patches(const model *m)
{
    const model_config *c = &m->cfg;
    return (patch_shape){m->shape.batch, c->channels, c->frames, c->height, c->width, c->patch_t, c->patch,
                         m->shape.tokens};
}

/* The output's patches as the prediction: unpatchified, and where the output has more channels than the input
 * (PixArt's learned variance), only the input's first channels. */
static patch_shape out_patches(const model *m)
{
    patch_shape ps = model_patches(m);
    ps.channels = model_out_channels(&m->cfg);
    return ps;
}

void final_register(param_set *s, final_layer *f, const model_config *c, const char *ada, const char *out, bool bias)
{
    const int64_t D = c->hidden, P = model_patch_dim(c);
    const bool full = !c->lora_rank;
    char n[PARAM_NAME_MAX];
    f->ada_w = f->ada_b = f->out_b = -1;
    if (ada) {
        snprintf(n, sizeof n, "%.100s.weight", ada);
        f->ada_w = param_add(s, n, 2, (int64_t[]){2 * D, D}, full);
        snprintf(n, sizeof n, "%.100s.bias", ada);
        if (bias) f->ada_b = param_add(s, n, 1, (int64_t[]){2 * D}, full);
    }
    snprintf(n, sizeof n, "%.100s.weight", out);
    f->out_w = param_add(s, n, 2, (int64_t[]){P, D}, full);
    snprintf(n, sizeof n, "%.100s.bias", out);
    if (bias) f->out_b = param_add(s, n, 1, (int64_t[]){P}, full);
    if (!full && ada) lin_quantize_frozen(s, f->ada_w, ada); /* quanto quantizes both nn.Linear (not excluded) */
    if (!full) lin_quantize_frozen(s, f->out_w, out);
}

st_status final_forward(model *m, final_layer *f, const float *x)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t Cout = model_out_channels(c), P = model_patch_dim(c) / c->channels * Cout;
    const int64_t per = model_sample_numel(c), per_out = per / c->channels * Cout;
    st_status st = ST_OK;
    const bool own = f->ada_w >= 0; /* else the modulation is rows of the model's (Chroma, the cross-attention DiTs) */
    if (own) model_hold(m, &st, &f->mod, B * 2 * D, "final.mod", false);
    if (!f->no_norm) model_hold(m, &st, &f->ln, N * D, "final.ln", false);
    model_hold(m, &st, &f->h, N * D, "final.h", false);
    model_hold(m, &st, &f->pred, B * per, "pred", false);
    float *out = NULL, *full = NULL;
    if (!st) st = pool_alloc(m->pool, (size_t)(N * P) * sizeof(float), MEM_WORKSPACE, "final.out", (void **)&out);
    if (!st && Cout != c->channels)
        st = pool_alloc(m->pool, (size_t)(B * per_out) * sizeof(float), MEM_WORKSPACE, "final.output", (void **)&full);
    if (!st && !f->no_norm) st = layernorm_forward(m->pool, f->ln, x, NULL, NULL, N, D, DIT_LN_EPS, &f->stats);
    if (!st) {
        const float *mod = own ? f->mod : m->ctx.mod + f->mod_row * D;
        const int64_t stride = own ? 2 * D : m->ctx.mod_rows * D;
        const float *shift = mod + (f->scale_first ? D : 0), *scale = mod + (f->scale_first ? 0 : D);
        if (own) st = frozen_forward(m, f->mod, m->ctx.cs, f->ada_w, f->ada_b, B, D, 2 * D);
        if (!st) modulate_forward(f->h, f->no_norm ? x : f->ln, shift, scale, B, T, D, stride);
        if (!st) st = frozen_forward(m, out, f->h, f->out_w, f->out_b, N, D, P);
    }
    if (!st) {
        if (f->negate) scale_by(out, N * P, -1.0f);
        const patch_shape ps = out_patches(m);
        unpatchify_forward(full ? full : f->pred, out, &ps, f->order);
        if (full) copy_rows(f->pred, per, full, per_out, B, per); /* channels lead a sample's latent */
    }
    pool_free(m->pool, full);
    pool_free(m->pool, out);
    return st;
}

st_status final_backward(model *m, final_layer *f, const float *x, const float *dpred, float *dx)
{
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = c->hidden, N = B * T;
    const int64_t Cout = model_out_channels(c), P = model_patch_dim(c) / c->channels * Cout;
    const int64_t per = model_sample_numel(c), per_out = per / c->channels * Cout;
    const patch_shape ps = out_patches(m);
    scratch k = {.pool = m->pool};
    float *dout = scratch_take_zero(&k, N * P, MEM_WORKSPACE, "final.dout");
    float *dfull = Cout != c->channels ? scratch_take_zero(&k, B * per_out, MEM_WORKSPACE, "final.doutput") : NULL;
    float *dh = scratch_take_zero(&k, N * D, MEM_WORKSPACE, "final.dh");
    float *dln = f->no_norm ? dx : scratch_take_zero(&k, N * D, MEM_WORKSPACE, "final.dln");
    const bool own = f->ada_w >= 0;
    float *dmod = own ? scratch_take_zero(&k, B * 2 * D, MEM_WORKSPACE, "final.dmod") : m->ctx.dmod + f->mod_row * D;
    const float *mod = own ? f->mod : m->ctx.mod + f->mod_row * D;
    const int64_t stride = own ? 2 * D : m->ctx.mod_rows * D;
    if (k.status) return scratch_end(&k);
    const int64_t shift = f->scale_first ? D : 0, scale = f->scale_first ? 0 : D;
    if (dfull) copy_rows(dfull, per_out, dpred, per, B, per); /* the extra channels reach no loss */
    unpatchify_backward(dout, dfull ? dfull : dpred, &ps, f->order);
    if (f->negate) scale_by(dout, N * P, -1.0f);
    k.status = frozen_backward(m, dh, f->out_w, f->out_b, dout, f->h, N, D, P);
    if (k.status) return scratch_end(&k);
    modulate_backward(dln, dmod + shift, dmod + scale, dh, f->no_norm ? x : f->ln, mod + scale, B, T, D, stride);
    if (!f->no_norm) layernorm_backward(dx, NULL, NULL, dln, x, NULL, N, D, &f->stats);
    if (own) k.status = frozen_backward(m, m->ctx.dcs, f->ada_w, f->ada_b, dmod, m->ctx.cs, B, D, 2 * D);
    return scratch_end(&k);
}

void final_backward_done(model *m, final_layer *f)
{
    op_state_release(&f->stats);
    pool_free(m->pool, f->h);
    pool_free(m->pool, f->ln);
    f->h = f->ln = NULL;
}

void final_release(model *m, final_layer *f) { op_state_release(&f->stats); }

/* ---- the timestep path, and MLP embeddings like it ---- */

/* Registers in state_dict order: linear_1's weight and bias, then linear_2's; without bias, indices -1. */
static void temb_add(param_set *s, temb *t, const char *linear_1, const char *linear_2, int64_t in, int64_t mid,
                     int64_t D, bool trainable, bool bias)
{
    char n[PARAM_NAME_MAX];
    t->in = in, t->mid = mid, t->out = D, t->gelu = false;
    t->b0 = t->b2 = -1;
    snprintf(n, sizeof n, "%s.weight", linear_1);
    t->w0 = param_add(s, n, 2, (int64_t[]){mid, in}, trainable);
    snprintf(n, sizeof n, "%s.bias", linear_1);
    if (bias) t->b0 = param_add(s, n, 1, (int64_t[]){mid}, trainable);
    snprintf(n, sizeof n, "%s.weight", linear_2);
    t->w2 = param_add(s, n, 2, (int64_t[]){D, mid}, trainable);
    snprintf(n, sizeof n, "%s.bias", linear_2);
    if (bias) t->b2 = param_add(s, n, 1, (int64_t[]){D}, trainable);
    if (!trainable) lin_quantize_frozen(s, t->w0, linear_1), lin_quantize_frozen(s, t->w2, linear_2); /* nn.Linear */
}

void temb_register(param_set *s, temb *t, const char *linear_1, const char *linear_2, int64_t in, int64_t D,
                   bool trainable)
{
    temb_add(s, t, linear_1, linear_2, in, D, D, trainable, true);
}

void temb_register_mid(param_set *s, temb *t, const char *linear_1, const char *linear_2, int64_t in, int64_t mid,
                       int64_t D, bool trainable)
{
    temb_add(s, t, linear_1, linear_2, in, mid, D, trainable, true);
}

void temb_register_nobias(param_set *s, temb *t, const char *linear_1, const char *linear_2, int64_t in, int64_t D,
                          bool trainable)
{
    temb_add(s, t, linear_1, linear_2, in, D, D, trainable, false);
}

void temb_register_at(param_set *s, temb *t, const char *prefix, int64_t in, int64_t D, bool bias, bool trainable)
{
    char l1[PARAM_NAME_MAX - 16], l2[PARAM_NAME_MAX - 16]; /* room for temb_add's .weight */
    snprintf(l1, sizeof l1, "%.100s.linear_1", prefix);
    snprintf(l2, sizeof l2, "%.100s.linear_2", prefix);
    temb_add(s, t, l1, l2, in, D, D, trainable, bias);
}

void temb_take_path(model *m, temb *t, st_status *st)
{
    const int64_t B = m->shape.batch, D = t->out;
    model_hold(m, st, &t->freq, B * t->in, "t_freq", false);
    model_hold(m, st, &t->h, B * t->mid, "t_hidden", false);
    model_hold(m, st, &t->hs, B * t->mid, "t_silu", false);
    model_hold(m, st, &t->c, B * D, "c", false);
}

void temb_take_wide(model *m, temb *t, st_status *st, bool train, int64_t width)
{
    const int64_t B = m->shape.batch;
    temb_take_path(m, t, st);
    model_hold(m, st, &m->ctx.cs, B * width, "silu_c", false);
    if (train) model_hold(m, st, &m->ctx.dcs, B * width, "dsilu_c", true);
}

void temb_take(model *m, temb *t, st_status *st, bool train)
{
    temb_take_wide(m, t, st, train, m->cfg.hidden);
}

st_status temb_mlp_forward(model *m, temb *t)
{
    const int64_t B = m->shape.batch, D = t->out, H = t->mid;
    st_status st = frozen_forward(m, t->h, t->freq, t->w0, t->b0, B, t->in, H);
    if (!st) (t->gelu ? gelu_forward : silu_forward)(t->hs, t->h, B * H);
    return st ? st : frozen_forward(m, t->c, t->hs, t->w2, t->b2, B, H, D);
}

st_status temb_forward(model *m, temb *t, const float *timesteps)
{
    timestep_embedding(t->freq, timesteps, m->shape.batch, t->in, 10000.0);
    return temb_mlp_forward(m, t);
}

/* Workspace: two (B, D) buffers. */
st_status temb_backward(model *m, temb *t, float *dc)
{
    const int64_t B = m->shape.batch, D = t->out, H = t->mid;
    scratch k = {.pool = m->pool};
    float *dhs = scratch_take_zero(&k, B * H, MEM_WORKSPACE, "temb.dsilu");
    float *dh = scratch_take_zero(&k, B * H, MEM_WORKSPACE, "temb.dhidden");
    if (k.status) return scratch_end(&k);
    k.status = frozen_backward(m, dhs, t->w2, t->b2, dc, t->hs, B, H, D);
    if (!k.status) (t->gelu ? gelu_backward : silu_backward)(dh, dhs, t->h, B * H);
    if (!k.status) k.status = frozen_backward(m, NULL, t->w0, t->b0, dh, t->freq, B, t->in, H);
    return scratch_end(&k);
}

st_status temb_silu_backward(model *m, temb *t, float *dc, const float *dcs)
{
    silu_backward(dc, dcs, t->c, m->shape.batch * t->out);
    return temb_backward(m, t, dc);
}

void sincos_table_fill(const model_config *c, float *t)
{
    const int64_t E = c->pos_embed_max, D = c->hidden, q = D / 4;
    const float step = (float)((double)E / (double)(c->sample_size / c->patch));
    for (int64_t k = 0; k < E * E; k++)
        for (int half = 0; half < 2; half++) {
            const double pos = (double)((float)(half ? k / E : k % E) / step);
            float *row = t + k * D + half * 2 * q;
            for (int64_t j = 0; j < q; j++) {
                const double arg = pos / pow(10000.0, (double)j / (double)q);
                row[j] = (float)sin(arg);
                row[q + j] = (float)cos(arg);
            }
        }
}
