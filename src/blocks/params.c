#include "segtrain/params.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "segtrain/checked.h"
#include "segtrain/copy.h"
#include "segtrain/fileio.h"
#include "segtrain/lycoris.h"
#include "segtrain/safetensors.h"

#define PATH_MAX_LEN 4096
#define INDEX_MAX_BYTES (100 << 20) /* as a safetensors header; a real index is some 100 KiB */

/* Registration has no status to return (the families register dozens of parameters in a row): running out of
 * memory is kept in s->oom, returns -1 (lin_layer's "none") and param_set_check reports it before any use. */
static int add(param_set *s, const char *name, int ndim, const int64_t *shape, bool trainable, bool fixed, bool grid)
{
    if (ndim < 0 || ndim > PARAM_MAX_DIMS) st_panic("param_add: %s has %d dimensions, at most %d", name, ndim, PARAM_MAX_DIMS);
    if (s->oom) return -1;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        param *items = realloc(s->items, (size_t)cap * sizeof *items);
        if (!items) {
            s->oom = true;
            return -1;
        }
        s->items = items;
        s->cap = cap;
    }
    param *p = &s->items[s->n];
    *p = (param){.ndim = ndim, .trainable = trainable, .fixed = fixed, .grid = grid, .numel = 1};
    snprintf(p->name, sizeof p->name, "%s", name);
    bool ok = true;
    for (int d = 0; d < ndim; d++) ok = ck_mul(p->numel, p->shape[d] = shape[d], CK_MAX_ELEMENTS, &p->numel) && ok;
    if (!ok) p->numel = 0; /* param_set_check refuses the set */
    ok = ok && ck_add(s->weight_count, p->numel, CK_MAX_ELEMENTS, &s->weight_count);
    if (ok && trainable) s->grad_count += p->numel; /* <= weight_count */
    if (!ok && !s->too_large) s->too_large = s->n + 1;
    if (s->lycoris && !s->lyco_conv && lycoris_adapts_conv(s, name, ndim)) s->lyco_conv = s->n + 1;
    return s->n++;
}

static void shape_text(const param *q, char *buf, size_t n)
{
    int at = snprintf(buf, n, "(");
    for (int d = 0; d < q->ndim && at < (int)n; d++)
        at += snprintf(buf + at, n - (size_t)at, d ? ", %lld" : "%lld", (long long)q->shape[d]);
    if (at < (int)n) snprintf(buf + at, n - (size_t)at, ")");
}

st_status param_set_check(const param_set *s)
{
    if (s->oom) return st_host_oom("the list of parameters (%d registered)", s->n);
    if (s->lyco_conv) {
        char why[1024];
        const param *c = &s->items[s->lyco_conv - 1];
        lycoris_conv_refusal(s, c->name, c->shape, why, sizeof why);
        return st_fail(ST_ERR_UNSUPPORTED, "%s", why);
    }
    if (!s->too_large) return ST_OK;
    const param *p = &s->items[s->too_large - 1];
    char shape[160];
    shape_text(p, shape, sizeof shape);
    return st_fail(ST_ERR_INVALID, "parameter '%s' of shape %s: %s more than 2^57 floats (the model's size keys are "
                   "too large)", p->name, shape, p->numel ? "the parameters up to it add up to" : "it has");
}

int param_add(param_set *s, const char *name, int ndim, const int64_t *shape, bool trainable)
{
    return add(s, name, ndim, shape, trainable, false, false);
}

int param_add_fixed(param_set *s, const char *name, int ndim, const int64_t *shape)
{
    return add(s, name, ndim, shape, false, true, false);
}

int param_add_grid_table(param_set *s, const char *name, int ndim, const int64_t *shape)
{
    return add(s, name, ndim, shape, false, true, true);
}

param *param_at(param_set *s, int index) { return &s->items[index]; }

param *param_find(param_set *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->items[i].name, name)) return &s->items[i];
    return NULL;
}

/* The packed bytes and bf16 statistics of the set's quantized parameters held on the device. */
static void quant_totals(const param_set *s, int64_t *data, int64_t *stats, int64_t *values)
{
    *data = *stats = *values = 0;
    for (int i = 0; i < s->n; i++) {
        const param *q = &s->items[i];
        if (!q->quant || q->swap_group) continue;
        const quant_layout l = quant_layout_of(q->quant, q->shape[0], q->numel / q->shape[0]);
        *data += l.data_bytes, *stats += l.stats, *values += q->numel;
    }
}

st_status param_set_alloc(param_set *s, pool *p)
{
    s->pool = p;
    int64_t n16 = 0, nq, nstats, qvalues, swapped = 0; /* swapped: param_set_alloc_swapped holds them */
    for (int i = 0; i < s->n; i++) {
        const param *q = &s->items[i];
        if (q->swap_group) swapped += q->numel;
        else n16 += q->bf16 ? q->numel : 0;
    }
    quant_totals(s, &nq, &nstats, &qvalues);
    st_status st = param_set_check(s);
    if (!st)
        st = pool_alloc_zero(p, (size_t)(s->weight_count - n16 - qvalues - swapped) * sizeof(float), MEM_WEIGHTS,
                             "weights", (void **)&s->weights);
    if (!st && n16)
        st = pool_alloc_zero(p, (size_t)n16 * sizeof(uint16_t), MEM_WEIGHTS, "weights (bf16)", (void **)&s->weights16);
    if (!st && nq) st = pool_alloc_zero(p, (size_t)nq, MEM_WEIGHTS, "weights (quantized)", (void **)&s->weightsq);
    if (!st && nq)
        st = pool_alloc_zero(p, (size_t)nstats * sizeof(uint16_t), MEM_WEIGHTS, "weights (quantized scales)",
                             (void **)&s->weightsq_stats);
    if (!st && s->grad_count)
        st = pool_alloc_zero(p, (size_t)s->grad_count * sizeof(float), MEM_GRADIENTS, "gradients",
                             (void **)&s->grads);
    if (st) {
        param_set_free(s);
        return st;
    }
    int64_t w = 0, w16 = 0, g = 0, wq = 0, ws = 0;
    for (int i = 0; i < s->n; i++) {
        param *q = &s->items[i];
        if (q->swap_group) {
            q->w = NULL, q->w16 = NULL, q->wq = NULL, q->wq_stats = NULL;
        } else if (q->quant) {
            const quant_layout l = quant_layout_of(q->quant, q->shape[0], q->numel / q->shape[0]);
            q->wq = s->weightsq + wq, q->wq_stats = s->weightsq_stats + ws;
            wq += l.data_bytes, ws += l.stats;
        } else {
            q->w = q->bf16 ? NULL : s->weights + w;
            q->w16 = q->bf16 ? s->weights16 + w16 : NULL;
            *(q->bf16 ? &w16 : &w) += q->numel;
        }
        q->g = q->trainable ? s->grads + g : NULL;
        if (q->trainable) g += q->numel;
    }
    return ST_OK;
}

/* base's parameter that s's q aliases: the same name and shape */
static st_status shared_of(const param_set *base, const param *q, const param **out)
{
    const param *b = NULL;
    for (int i = 0; i < base->n && !b; i++) b = strcmp(base->items[i].name, q->name) ? NULL : &base->items[i];
    bool same = b && b->ndim == q->ndim && b->trainable == q->trainable && b->bf16 == q->bf16 &&
                b->quant == q->quant;
    for (int d = 0; same && d < q->ndim; d++) same = b->shape[d] == q->shape[d];
    char want[160], has[160] = "";
    shape_text(q, want, sizeof want);
    if (b) shape_text(b, has, sizeof has);
    if (!b) return st_fail(ST_ERR_INVALID, "parameter '%s' %s: the model whose weights it shares has none of that name",
                           q->name, want);
    if (!same)
        return st_fail(ST_ERR_INVALID, "parameter '%s' is %s%s here but %s%s in the model whose weights it shares",
                       q->name, want, q->trainable ? "" : " (frozen)", has, b->trainable ? "" : " (frozen)");
    *out = b;
    return ST_OK;
}

st_status param_set_share(param_set *s, const param_set *base, pool *p)
{
    int64_t own = 0;
    const char *fixed = NULL; /* a fixed table shared: a family's fill_fixed would write it with the grid tables */
    st_status st = param_set_check(s);
    for (int i = 0; i < s->n && !st; i++) {
        param *q = &s->items[i];
        const param *b = NULL;
        if (q->grid) own += q->numel;
        else if (!(st = shared_of(base, q, &b)))
            q->w = b->w, q->w16 = b->w16, q->wq = b->wq, q->wq_stats = b->wq_stats, q->g = b->g;
        if (q->fixed && !q->grid) fixed = q->name;
    }
    if (!st && own && fixed)
        st = st_fail(ST_ERR_INTERNAL, "param_set_share: '%s' is a fixed table beside grid tables: filling a model's "
                     "grid tables would refill the shared one", fixed);
    s->pool = p;
    s->base = base;
    s->grads = base->grads;
    if (!st && s->n_swap && base->n_swap != s->n_swap)
        st = st_fail(ST_ERR_INTERNAL, "param_set_share: %d swapped blocks here, %d in the model whose weights it "
                     "shares", s->n_swap, base->n_swap);
    if (!st && s->n_swap && !base->swap)
        st = st_fail(ST_ERR_INTERNAL, "param_set_share: the swapped blocks' weights of the shared model have no home");
    free(s->swap);
    s->swap = (param_swap_group *)base->swap;
    if (!st && own)
        st = pool_alloc_zero(p, (size_t)own * sizeof(float), MEM_WEIGHTS, "weights (grid tables)", (void **)&s->weights);
    int64_t at = 0;
    for (int i = 0; i < s->n && !st; i++)
        if (s->items[i].grid) s->items[i].w = s->weights + at, at += s->items[i].numel;
    return st;
}

/* ---- musubi_blocks_to_swap (docs/WEIGHTS.md) ---- */

#define SWAP_ALIGN 64 /* each weight (and a quantized one's scales) at the pools' alignment within its group */

static size_t swap_aligned(int64_t bytes) { return ((size_t)bytes + SWAP_ALIGN - 1) / SWAP_ALIGN * SWAP_ALIGN; }

/* The bytes of q as it is held (float, bf16, or quantized data then scales), and where its scales start. */
static size_t held_bytes(const param *q, size_t *stats_at)
{
    *stats_at = 0;
    if (!q->quant) return (size_t)q->numel * (q->bf16 ? sizeof(uint16_t) : sizeof(float));
    const quant_layout l = quant_layout_of(q->quant, q->shape[0], q->numel / q->shape[0]);
    *stats_at = swap_aligned(l.data_bytes);
    return *stats_at + (size_t)l.stats * sizeof(uint16_t);
}

/* Points group g's weights into base, laid out in registration order; returns the group's bytes. */
static size_t swap_point(param_set *s, int g, uint8_t *base)
{
    size_t at = 0, stats_at;
    for (int i = 0; i < s->n; i++) {
        param *q = &s->items[i];
        if (q->swap_group != g) continue;
        const size_t bytes = held_bytes(q, &stats_at);
        if (q->quant) q->wq = base ? base + at : NULL, q->wq_stats = base ? (uint16_t *)(base + at + stats_at) : NULL;
        else if (q->bf16) q->w16 = base ? (uint16_t *)(base + at) : NULL;
        else q->w = base ? (float *)(base + at) : NULL;
        at += swap_aligned((int64_t)bytes);
    }
    return at;
}

/* Groups 1 .. g in s->swap (the new ones empty). */
static st_status groups_upto(param_set *s, int g)
{
    if (g <= s->n_swap) return ST_OK;
    param_swap_group *grown = realloc(s->swap, (size_t)g * sizeof *grown);
    if (!grown) return st_host_oom("the list of weights' groups held in host memory");
    for (int k = s->n_swap; k < g; k++) grown[k] = (param_swap_group){0};
    s->swap = grown;
    s->n_swap = g;
    return ST_OK;
}

st_status param_set_swap(param_set *s, int g, const char *prefix)
{
    int marked = 0;
    const size_t len = strlen(prefix);
    for (int i = 0; i < s->n; i++) {
        param *q = &s->items[i];
        if (q->trainable || q->fixed || strncmp(q->name, prefix, len)) continue;
        q->swap_group = g;
        marked++;
    }
    if (!marked) return st_fail(ST_ERR_INVALID, "musubi_blocks_to_swap: no frozen weight is named %s*", prefix);
    return groups_upto(s, g);
}

/* The tags of a group's host home, its device buffer and a spilled group's read buffer. */
static const char *home_tag(const param_set *s)
{
    return s->offload_tags ? "weights (offloaded groups)"
           : s->stream_layers ? "weights (streamed layers)" : "weights (swapped blocks)";
}

static const char *device_tag(const param_set *s)
{
    return s->offload_tags ? "weights (offloaded group)"
           : s->stream_layers ? "weights (streamed layer)" : "weights (swapped block)";
}

st_status param_set_swap_rest(param_set *s, int g, int *marked)
{
    *marked = 0;
    for (int i = 0; i < s->n; i++) {
        param *q = &s->items[i];
        if (q->trainable || q->fixed || q->swap_group) continue;
        q->swap_group = g;
        ++*marked;
    }
    return *marked ? groups_upto(s, g) : ST_OK;
}

st_status param_set_alloc_swapped(param_set *s, pool *host)
{
    if (!s->n_swap || s->base || s->swap_host) return ST_OK;
    s->swap_host = host;
    st_status st = ST_OK;
    for (int g = 1; g <= s->n_swap && !st; g++) {
        param_swap_group *grp = &s->swap[g - 1];
        grp->bytes = swap_point(s, g, NULL);
        st = pool_alloc_zero(host, grp->bytes, MEM_WEIGHTS, home_tag(s), (void **)&grp->home);
        if (!st) swap_point(s, g, grp->home);
    }
    return st;
}

/* A spilled group's bytes from its file into a host buffer (nothing read on dry pools). */
static st_status spill_read(param_set *s, param_swap_group *grp)
{
    st_status st = pool_alloc(s->swap_host, grp->bytes, MEM_WEIGHTS, "weights (group read from disk)", &grp->staging);
    s->spill_bytes_read += st ? 0 : grp->bytes;
    if (st || pool_is_dry_ptr(grp->staging)) return st;
    sft_file *f = NULL;
    const sft_tensor *t = NULL;
    if (!(st = sft_open(grp->file, &f)) && (!(t = sft_find(f, "weights")) || t->nbytes != grp->bytes))
        st = st_fail(ST_ERR_FORMAT, "%s: group offload's file of %s holds no %zu bytes of weights (written by another "
                     "model?)", grp->file, grp->label, grp->bytes);
    if (!st) memcpy(grp->staging, t->data, grp->bytes);
    sft_close(f);
    return st;
}

/* Drops what a fetch holds: its device buffer and read buffer (a copy on its way waited for first). */
static void group_drop(param_set *s, param_swap_group *grp)
{
    if (grp->job) copy_wait(grp->engine, grp->job);
    grp->job = NULL;
    pool_free(s->swap_host, grp->staging);
    grp->staging = NULL;
    pool_free(s->pool, grp->dev);
    grp->dev = NULL;
}

/* Allocates group g's device buffer and starts its copy (from its home, or its file through a host buffer). */
static st_status group_fetch(param_set *s, int g, copy_engine *e)
{
    param_swap_group *grp = &s->swap[g - 1];
    if (!grp->home && !grp->file)
        return st_fail(ST_ERR_INTERNAL, "block swap: the swapped blocks' weights have no host memory yet");
    grp->engine = e;
    st_status st = pool_alloc(s->pool, grp->bytes, MEM_WEIGHTS, device_tag(s), &grp->dev);
    if (!st && !grp->home) st = spill_read(s, grp);
    if (!st) st = copy_submit(e, COPY_TO_DEVICE, grp->dev, grp->home ? grp->home : grp->staging, grp->bytes, &grp->job);
    if (st) {
        group_drop(s, grp);
        return st;
    }
    s->swap_in++;
    s->swap_bytes_in += grp->bytes;
    return ST_OK;
}

bool param_swap_is_in(const param_set *s, int g) { return s->swap[g - 1].dev && !s->swap[g - 1].job; }

st_status param_swap_prefetch(param_set *s, int g, copy_engine *e)
{
    return s->swap[g - 1].dev ? ST_OK : group_fetch(s, g, e);
}

st_status param_swap_in(param_set *s, int g, copy_engine *e)
{
    param_swap_group *grp = &s->swap[g - 1];
    if (grp->dev && !grp->job)
        return st_fail(ST_ERR_INTERNAL, "block swap: group %d brought in while it is in", g);
    st_status st = grp->dev ? ST_OK : group_fetch(s, g, e);
    if (!st) st = copy_wait(e, grp->job);
    grp->job = NULL;
    pool_free(s->swap_host, grp->staging);
    grp->staging = NULL;
    if (st) {
        param_swap_out(s, g);
        return st;
    }
    swap_point(s, g, grp->dev);
    return ST_OK;
}

void param_swap_out(param_set *s, int g)
{
    param_swap_group *grp = &s->swap[g - 1];
    if (!grp->dev) return;
    group_drop(s, grp);
    swap_point(s, g, grp->home);
    s->swap_in--;
}

/* The one tensor and the metadata of group g's file. */
static void spill_entry(const param_set *s, int g, sft_entry *e, const char *meta[4])
{
    const param_swap_group *grp = &s->swap[g - 1];
    *e = (sft_entry){.name = "weights", .dtype = SFT_U8, .ndim = 1, .shape = {(int64_t)grp->bytes}, .data = grp->home};
    meta[0] = "format", meta[1] = "segtrain group offload", meta[2] = "group", meta[3] = grp->label;
}

size_t param_spill_file_bytes(const param_set *s, int g)
{
    sft_entry e;
    const char *meta[4];
    spill_entry(s, g, &e, meta);
    return sft_file_bytes(&e, 1, meta, 2);
}

st_status param_set_spill(param_set *s, const char *dir)
{
    if (s->base || !s->n_swap || s->swap[0].file) return ST_OK;
    const bool dry = pool_is_dry_ptr(s->swap[0].home);
    st_status st = dry ? ST_OK : file_make_dirs(dir, NULL);
    for (int g = 1; g <= s->n_swap && !st; g++) {
        param_swap_group *grp = &s->swap[g - 1];
        const size_t n = strlen(dir) + strlen(grp->label) + 32;
        if (!(grp->file = malloc(n))) return st_host_oom("the offloaded groups' file names");
        snprintf(grp->file, n, "%s/group_%s.safetensors", dir, grp->label);
        sft_entry e;
        const char *meta[4];
        spill_entry(s, g, &e, meta);
        if (!dry) st = sft_write(grp->file, &e, 1, meta, 2);
        if (st) break;
        pool_free(s->swap_host, grp->home);
        grp->home = NULL;
        if (!grp->dev) swap_point(s, g, NULL);
    }
    return st;
}

void param_set_free(param_set *s)
{
    for (int g = 1; s->swap && g <= s->n_swap; g++) param_swap_out(s, g);
    if (s->pool && s->base) pool_free(s->pool, s->weights);
    else if (s->pool) {
        for (int g = 0; s->swap_host && s->swap && g < s->n_swap; g++) pool_free(s->swap_host, s->swap[g].home);
        for (int g = 0; s->swap && g < s->n_swap; g++) free(s->swap[g].file);
        pool_free(s->pool, s->grads);
        pool_free(s->pool, s->weights);
        pool_free(s->pool, s->weights16);
        pool_free(s->pool, s->weightsq);
        pool_free(s->pool, s->weightsq_stats);
    }
    if (!s->base) free(s->swap);
    free(s->items);
    *s = (param_set){0};
}

void param_set_zero_grads(param_set *s)
{
    if (s->grads) zero_bytes(s->grads, (size_t)s->grad_count * sizeof(float));
}

st_status param_store_bf16(param *q, const float *values)
{
    if (pool_is_dry_ptr(q->quant ? (const void *)q->wq : q->w16)) return ST_OK;
    uint16_t *h = q->quant ? malloc((size_t)q->numel * sizeof(uint16_t)) : q->w16;
    if (!h) return st_host_oom("a bf16 copy of %s to quantize", q->name);
    for (int64_t i = 0; i < q->numel; i++) h[i] = sft_f32_to_bf16(values[i]);
    if (q->quant) quant_pack(q->quant, q->shape[0], q->numel / q->shape[0], q->ndim, h, q->wq, q->wq_stats);
    if (q->quant) free(h);
    return ST_OK;
}

static bool in_part(const param *q, param_part part)
{
    return part == PARAMS_ALL || (part == PARAMS_TRAINABLE) == q->trainable;
}

/* Where a model's tensors come from: one safetensors file, or the shards a diffusers index names. Every tensor
 * is in exactly one file (checked when opened). */
typedef struct tensor_source {
    const char *path; /* the file or index the caller's path resolved to, for messages */
    char resolved[PATH_MAX_LEN];
    int n;
    sft_file **files;
} tensor_source;

static void source_close(tensor_source *src)
{
    for (int i = 0; i < src->n; i++) sft_close(src->files[i]);
    free(src->files);
    src->files = NULL;
    src->n = 0;
}

/* The file holding `name`, NULL if none does. */
static sft_file *source_find(const tensor_source *src, const char *name)
{
    for (int i = 0; i < src->n; i++)
        if (sft_find(src->files[i], name)) return src->files[i];
    return NULL;
}

/* ---- pre-quantized fp8 checkpoints ---- */

static bool is_fp8(const sft_tensor *t) { return t && (t->dtype == SFT_F8_E4M3 || t->dtype == SFT_F8_E5M2); }

/* The scale an fp8 checkpoint keeps beside weight "<layer>.weight": which 0, "<layer>.weight_scale" (Ideogram's, as
 * SimpleTuner's ideogram/quantized_loading.py reads it; ComfyUI's scaled fp8 files too), 1, "<layer>.scale_weight"
 * (ComfyUI's older scaled fp8 files). false: the name is not a layer's weight. */
static bool fp8_scale_name(const char *weight, int which, char *out, size_t n)
{
    const size_t len = strlen(weight);
    if (len < 7 || strcmp(weight + len - 7, ".weight")) return false;
    const int w = which ? snprintf(out, n, "%.*s.scale_weight", (int)(len - 7), weight)
                        : snprintf(out, n, "%s_scale", weight);
    return w > 0 && (size_t)w < n;
}

/* Whether `name` is the scale of an fp8 weight of `part` that src holds: read with it, so not unexpected. */
static bool is_fp8_scale(param_set *s, const tensor_source *src, const char *name, param_part part)
{
    for (int i = 0; i < s->n; i++) {
        const param *q = &s->items[i];
        char scale[PARAM_NAME_MAX + 16];
        for (int which = 0; which < 2; which++)
            if (in_part(q, part) && fp8_scale_name(q->name, which, scale, sizeof scale) && !strcmp(scale, name)) {
                const sft_file *f = source_find(src, q->name);
                return f && is_fp8(sft_find(f, q->name));
            }
    }
    return false;
}

/* An fp8 weight's values times its scale, where src holds one: one a row or one for the tensor, each product in
 * float32, as SimpleTuner's dequantize_fp8_state_dict folds a scale into its weight before the model's own dtype. */
static st_status apply_fp8_scale(const tensor_source *src, const char *weight, const param *q, float *values)
{
    char name[PARAM_NAME_MAX + 16];
    const sft_file *f = NULL;
    for (int which = 0; which < 2 && !f; which++)
        if (fp8_scale_name(weight, which, name, sizeof name)) f = source_find(src, name);
    if (!f) return ST_OK; /* an fp8 weight without a scale: its values as they are */
    const sft_tensor *t = sft_find(f, name);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    const int64_t rows = q->ndim ? q->shape[0] : 1, cols = q->numel / (rows ? rows : 1);
    if (n != 1 && !(t->ndim == 1 && n == rows))
        return st_fail(ST_ERR_FORMAT, "%s: fp8 scale '%s' has %lld values; its weight '%s' takes one, or one a row "
                       "(%lld)", sft_path(f), name, (long long)n, q->name, (long long)rows);
    float *scale = malloc((size_t)n * sizeof(float));
    if (!scale) return st_host_oom("the scale of %s", q->name);
    st_status st = sft_read_f32(f, name, t->ndim, t->shape, scale);
    for (int64_t r = 0; r < rows && !st; r++)
        for (int64_t c = 0; c < cols; c++) values[r * cols + c] *= scale[n == 1 ? 0 : r];
    free(scale);
    return st;
}

/* Reads tensor `name` of f (which src resolved) into q: as float, an fp8 one times its scale; a bf16 or quantized
 * parameter through a float copy rounded to bf16 (what torch's load into a bf16 model does; a BF16 file's values
 * come through unchanged), then quantized. */
static st_status read_param(const tensor_source *src, const sft_file *f, const char *name, param *q)
{
    const bool fp8 = is_fp8(sft_find(f, name)), low = q->bf16 || q->quant;
    if (!low && !fp8) return sft_read_f32(f, name, q->ndim, q->shape, q->w);
    float *values = low ? malloc((size_t)q->numel * sizeof(float)) : q->w;
    if (!values) return st_host_oom("a copy of %s to round to bf16", q->name);
    st_status st = sft_read_f32(f, name, q->ndim, q->shape, values);
    if (!st && fp8) st = apply_fp8_scale(src, name, q, values);
    if (!st && low) st = param_store_bf16(q, values);
    if (low) free(values);
    return st;
}

static st_status source_add(tensor_source *src, sft_file *f)
{
    sft_file **files = realloc(src->files, (size_t)(src->n + 1) * sizeof *files);
    if (!files) {
        sft_close(f);
        return st_host_oom("the shard list of %s", src->path);
    }
    src->files = files;
    src->files[src->n++] = f;
    return ST_OK;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static st_status join(char *out, const char *dir, const char *name)
{
    if (snprintf(out, PATH_MAX_LEN, "%s/%s", dir, name) >= PATH_MAX_LEN)
        return st_fail(ST_ERR_INVALID, "%s/%s: path longer than %d bytes", dir, name, PATH_MAX_LEN - 1);
    return ST_OK;
}

static st_status read_text(const char *path, char **out)
{
    *out = NULL;
    FILE *fp;
    st_status s = file_fopen_regular(path, &fp);
    if (s) return s;
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || st.st_size > INDEX_MAX_BYTES)
        s = st_fail(ST_ERR_FORMAT, "%s: cannot read, or larger than %d MiB (not a diffusers index)", path,
                    INDEX_MAX_BYTES >> 20);
    else if (!(*out = malloc((size_t)st.st_size + 1)))
        s = st_host_oom("reading %s", path);
    else if (fread(*out, 1, (size_t)st.st_size, fp) != (size_t)st.st_size)
        s = st_fail(ST_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    else
        (*out)[st.st_size] = 0;
    fclose(fp);
    if (s) {
        free(*out);
        *out = NULL;
    }
    return s;
}

/* Opens the shards of a diffusers index ({"metadata": ..., "weight_map": {tensor: shard file}}), which lie
 * beside it, and checks that each tensor is where the index says and in no other shard. As diffusers, a shard
 * holds what it holds: a tensor the index does not list still loads (and is then expected or not by name). */
static st_status open_index(tensor_source *src)
{
    const char *path = src->path;
    char *text, dir[PATH_MAX_LEN], shard[PATH_MAX_LEN];
    st_status s = read_text(path, &text);
    if (s) return s;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root))
        s = st_fail(ST_ERR_FORMAT, "%s: not a JSON object (a diffusers index is {\"metadata\": {...}, \"weight_map\": "
                    "{tensor: shard file}})", path);
    else if (!cJSON_IsObject(map) || !map->child)
        s = st_fail(ST_ERR_FORMAT, "%s: no \"weight_map\" object of tensor names to shard files, or an empty one",
                    path);
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    /* the shards in order of first mention; src->files[i] is the i-th */
    for (const cJSON *it = s ? NULL : map->child; it && !s; it = it->next) {
        const char *name = cJSON_IsString(it) ? it->valuestring : NULL;
        if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
            s = st_fail(ST_ERR_FORMAT, "%s: weight_map maps tensor '%s' to %s: expected a shard file name in the "
                        "index's folder", path, it->string, name ? name : "a value that is not a string");
        bool seen = false;
        for (const cJSON *jt = map->child; jt != it && !seen && !s; jt = jt->next)
            seen = !strcmp(jt->valuestring, name);
        if (s || seen || (s = join(shard, dir, name))) continue;
        sft_file *f;
        if ((s = sft_open(shard, &f))) {
            char why[512];
            snprintf(why, sizeof why, "%s", st_error());
            s = st_fail(s, "%s: shard %s (of tensor '%s'): %s", path, name, it->string, why);
        } else {
            s = source_add(src, f);
        }
    }
    for (const cJSON *it = s ? NULL : map->child; it && !s; it = it->next) {
        const sft_file *named = NULL, *f = source_find(src, it->string);
        for (int i = 0; i < src->n && !named; i++)
            if (!strcmp(strrchr(sft_path(src->files[i]), '/') + 1, it->valuestring)) named = src->files[i];
        if (!named || !sft_find(named, it->string))
            s = st_fail(ST_ERR_FORMAT, "%s: weight_map maps tensor '%s' to shard %s, which lacks it%s%s", path,
                        it->string, it->valuestring, f ? "; it is in " : "", f ? sft_path(f) : "");
    }
    for (int i = 0; i < src->n && !s; i++)
        for (int j = 0; j < sft_count(src->files[i]) && !s; j++) {
            const char *name = sft_at(src->files[i], j)->name;
            sft_file *first = source_find(src, name);
            if (first != src->files[i])
                s = st_fail(ST_ERR_FORMAT, "%s: tensor '%s' is in two shards, %s and %s", path, name, sft_path(first),
                            sft_path(src->files[i]));
        }
    cJSON_Delete(root);
    return s;
}

/* path: a .safetensors file, a diffusers index, or a folder holding either (directly or in transformer/, the
 * pipeline's layout). In a folder the index wins over the single file, as in diffusers' from_pretrained; with
 * transformers, a transformers model folder's index or file too (a family's own checkpoint: HeartMuLa's). */
static st_status source_open(const char *path, tensor_source *src, bool transformers)
{
    *src = (tensor_source){.path = path};
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        static const char *const names[] = {SFT_DIFFUSERS_INDEX, SFT_DIFFUSERS_SINGLE, "model.safetensors.index.json",
                                            "model.safetensors"};
        static const char *const subs[] = {"", "/transformer"};
        for (int d = 0; d < 2 && src->path == path; d++)
            for (int k = 0; k < (transformers ? 4 : 2) && src->path == path; k++) {
                char folder[PATH_MAX_LEN];
                snprintf(folder, sizeof folder, "%s%s", path, subs[d]);
                st_status s = join(src->resolved, folder, names[k]);
                if (s) return s;
                if (is_file(src->resolved)) src->path = src->resolved;
            }
        if (src->path == path)
            return st_fail(ST_ERR_IO, "%s: a folder without diffusers weights: looked for %s and %s%s in it and in "
                           "its transformer/ subfolder", path, SFT_DIFFUSERS_INDEX, SFT_DIFFUSERS_SINGLE,
                           transformers ? " (and transformers' model.safetensors.index.json and model.safetensors)"
                                        : "");
    }
    size_t n = strlen(src->path);
    st_status s;
    if (n >= 5 && !strcmp(src->path + n - 5, ".json")) {
        s = open_index(src);
    } else {
        sft_file *f;
        s = sft_open(src->path, &f);
        if (!s) s = source_add(src, f);
    }
    if (s) source_close(src);
    return s;
}

/* The parameter's name of a file's tensor (s->checkpoint_name's, into buf), or the tensor's own */
static const char *param_name_of(const param_set *s, const char *tensor, char *buf)
{
    if (!s->checkpoint_name) return tensor;
    s->checkpoint_name(tensor, buf);
    return buf;
}

/* The file holding parameter q and its tensor's name there (*tensor): q's own name, or under checkpoint_name the
 * tensor it maps to q's; NULL when none */
static sft_file *find_tensor(const param_set *s, const tensor_source *src, const param *q, const char **tensor)
{
    sft_file *f = source_find(src, *tensor = q->name);
    char buf[PARAM_NAME_MAX];
    for (int i = 0; !f && s->checkpoint_name && i < src->n; i++)
        for (int j = 0; !f && j < sft_count(src->files[i]); j++)
            if (!strcmp(param_name_of(s, *tensor = sft_at(src->files[i], j)->name, buf), q->name)) f = src->files[i];
    return f;
}

/* Reads the parameters of `part` from src by name, but those named with skip_prefix (unless NULL); a fixed one may
 * be absent. */
static st_status read_params(param_set *s, const tensor_source *src, param_part part, const char *skip_prefix)
{
    st_status st = ST_OK;
    for (int i = 0; i < s->n && !st; i++) {
        param *q = &s->items[i];
        if (!in_part(q, part) || (skip_prefix && !strncmp(q->name, skip_prefix, strlen(skip_prefix)))) continue;
        if (q->grid) continue; /* computed for this model's grid: a file's is of the grid it was saved at */
        const char *tensor;
        sft_file *f = find_tensor(s, src, q, &tensor);
        if (!f && q->fixed) continue;
        st = f ? read_param(src, f, tensor, q)
               : st_fail(ST_ERR_FORMAT, "%s: tensor '%s' is missing", src->path, q->name);
    }
    return st;
}

static st_status unexpected(const char *path, const char *name, const param *q, param_part part)
{
    if (!q) return st_fail(ST_ERR_FORMAT, "%s: unexpected tensor '%s' (not a parameter of this model)", path, name);
    return st_fail(ST_ERR_FORMAT, "%s: unexpected tensor '%s' (a %s parameter; this file should hold the %s ones)",
                   path, name, q->trainable ? "trainable" : "frozen",
                   part == PARAMS_TRAINABLE ? "trainable" : "frozen");
}

/* A part of the model that its pipeline saves as a model of its own, in a folder beside transformer/ (or in the
 * folder given, a fixture's layout) named as the parameters' first name: anima's AnimaTextConditioner. */
#define PART_NAME "text_conditioner"
#define PART_PREFIX PART_NAME "."

/* The part's folder under path when path is a folder that has one and the model has the part's parameters. */
static bool part_folder(param_set *s, const char *path, char *folder)
{
    struct stat st;
    if (!param_find(s, PART_PREFIX "norm.weight") || stat(path, &st) || !S_ISDIR(st.st_mode)) return false;
    if (snprintf(folder, PATH_MAX_LEN, "%s/" PART_NAME, path) >= PATH_MAX_LEN) return false;
    return stat(folder, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The part's parameters of `part` from its own folder, named there without the prefix; its other tensors are
 * unexpected. */
static st_status read_part(param_set *s, const char *folder, param_part part)
{
    tensor_source src;
    st_status st = source_open(folder, &src, false);
    const size_t k = strlen(PART_PREFIX);
    for (int i = 0; i < s->n && !st; i++) {
        param *q = &s->items[i];
        if (!in_part(q, part) || strncmp(q->name, PART_PREFIX, k)) continue;
        sft_file *f = source_find(&src, q->name + k);
        st = f ? read_param(&src, f, q->name + k, q)
               : st_fail(ST_ERR_FORMAT, "%s: tensor '%s' (the model's %s) is missing", src.path, q->name + k, q->name);
    }
    char full[PARAM_NAME_MAX + 32];
    for (int f = 0; f < src.n && !st; f++)
        for (int i = 0; i < sft_count(src.files[f]) && !st; i++) {
            snprintf(full, sizeof full, PART_PREFIX "%s", sft_at(src.files[f], i)->name);
            const param *q = param_find(s, full);
            if (!q || !in_part(q, part)) st = unexpected(sft_path(src.files[f]), full, q, part);
        }
    source_close(&src);
    return st;
}

st_status param_set_load(param_set *s, const char *path, param_part part, const char *other_prefix)
{
    char folder[PATH_MAX_LEN];
    const bool in_folder = part_folder(s, path, folder);
    tensor_source src;
    char buf[PARAM_NAME_MAX];
    st_status st = source_open(path, &src, s->checkpoint_name != NULL);
    if (!st) st = read_params(s, &src, part, in_folder ? PART_PREFIX : NULL); /* the part's: read_part's */
    for (int f = 0; f < src.n && !st; f++)
        for (int i = 0; i < sft_count(src.files[f]) && !st; i++) {
            const char *name = sft_at(src.files[f], i)->name;
            const param *q = param_find(s, param_name_of(s, name, buf));
            if (other_prefix && !strncmp(name, other_prefix, strlen(other_prefix))) continue;
            if ((!q || !in_part(q, part)) && !is_fp8_scale(s, &src, name, part))
                st = unexpected(sft_path(src.files[f]), name, q, part);
            else if (q && strcmp(name, q->name) && source_find(&src, q->name))
                st = st_fail(ST_ERR_FORMAT, "%s: tensors '%s' and '%s' both hold parameter %s: keep one",
                             sft_path(src.files[f]), name, q->name, q->name);
        }
    source_close(&src);
    if (!st && in_folder) st = read_part(s, folder, part);
    return st;
}

/* A quantized weight as the library's dequantize gives it, in bf16 (*held, freed by the caller). */
static st_status dequantized(const param *q, uint16_t **held)
{
    float *y = malloc((size_t)q->numel * sizeof(float));
    *held = malloc((size_t)q->numel * sizeof(uint16_t));
    if (y && *held) {
        quant_unpack(q->quant, q->shape[0], q->numel / q->shape[0], q->wq, q->wq_stats, y);
        for (int64_t i = 0; i < q->numel; i++) (*held)[i] = sft_f32_to_bf16(y[i]);
    }
    free(y);
    return y && *held ? ST_OK : st_host_oom("a dequantized copy of %s to save", q->name);
}

/* param_set_save, each parameter's name after `prefix`; a quantized weight saved dequantized, in BF16. */
static st_status save(param_set *s, const char *path, param_part part, bool grads, const char *prefix,
                      const named_floats *extra, int n_extra, const char *const *meta, int n_meta)
{
    sft_entry *e = calloc((size_t)(s->n + n_extra), sizeof *e);
    uint16_t **held = calloc((size_t)s->n + 1, sizeof *held);
    char *names = calloc((size_t)s->n + 1, PARAM_NAME_MAX + strlen(prefix));
    st_status st = e && names && held ? ST_OK : st_host_oom("the tensor list of %s", path);
    int n = 0;
    for (int i = 0; i < s->n && !st; i++) {
        const param *q = &s->items[i];
        if (!in_part(q, part) || (grads && !q->trainable)) continue;
        char *name = names + (size_t)n * (PARAM_NAME_MAX + strlen(prefix));
        sprintf(name, "%s%s", prefix, q->name);
        if (q->quant && !grads) st = dequantized(q, &held[n]);
        const void *low = q->quant ? (const void *)held[n] : q->w16;
        e[n] = (sft_entry){.name = name, .dtype = grads || !low ? SFT_F32 : SFT_BF16, .ndim = q->ndim,
                           .data = grads ? (const void *)q->g : low ? low : q->w};
        memcpy(e[n].shape, q->shape, sizeof q->shape);
        n++;
    }
    for (int i = 0; i < n_extra && !st; i++, n++) {
        e[n] = (sft_entry){.name = extra[i].name, .dtype = SFT_F32, .ndim = extra[i].ndim, .data = extra[i].data};
        memcpy(e[n].shape, extra[i].shape, sizeof extra[i].shape);
    }
    if (!st) st = sft_write(path, e, n, meta, n_meta);
    for (int i = 0; held && i < s->n; i++) free(held[i]);
    free(held);
    free(names);
    free(e);
    return st;
}

st_status param_set_save(param_set *s, const char *path, param_part part, bool grads, const named_floats *extra,
                         int n_extra, const char *const *meta, int n_meta)
{
    return save(s, path, part, grads, "", extra, n_extra, meta, n_meta);
}

/* ---- LoRA under PEFT's names ---- */

/* "<component>." before every adapter and metadata key: the set's lora_component, "transformer" by default */
static const char *lora_prefix(const param_set *s, char out[32])
{
    snprintf(out, 32, "%s.", s->lora_component ? s->lora_component : "transformer");
    return out;
}
#define LORA_METADATA_KEY "lora_adapter_metadata" /* diffusers' LORA_ADAPTER_METADATA_KEY */

static bool ends_with(const char *s, size_t n, const char *tail)
{
    size_t t = strlen(tail);
    return n >= t && !memcmp(s + n - t, tail, t);
}

/* The rank of the model's adapters (the first lora_A's rows), or an error when it has none. */
static st_status lora_rank(const param_set *s, const char *path, int64_t *rank)
{
    for (int i = 0; i < s->n; i++)
        if (s->items[i].trainable && ends_with(s->items[i].name, strlen(s->items[i].name), ".lora_A.weight")) {
            *rank = s->items[i].shape[0];
            return ST_OK;
        }
    return st_fail(ST_ERR_INVALID, "%s: this model has no LoRA adapters (model_type lora gives it some)", path);
}

/* Whether PEFT's target_modules entry `t` selects module m[0..n): the names are equal or m ends in "." t. */
static bool peft_selects(const char *m, size_t n, const char *t)
{
    size_t k = strlen(t);
    return n >= k && !memcmp(m + n - k, t, k) && (n == k || m[n - k - 1] == '.');
}

/* Whether a module other than an adapted one would be selected by entry t: any module owning a parameter, at any
 * depth (PEFT would try to wrap it). */
static bool selects_other(param_set *s, const char *t)
{
    char probe[PARAM_NAME_MAX + 16];
    for (int i = 0; i < s->n; i++) {
        const char *name = s->items[i].name;
        if (strstr(name, ".lora_A.") || strstr(name, ".lora_B.")) continue;
        for (const char *dot = strchr(name, '.'); dot; dot = strchr(dot + 1, '.')) {
            size_t n = (size_t)(dot - name);
            if (!peft_selects(name, n, t)) continue;
            snprintf(probe, sizeof probe, "%.*s.lora_A.weight", (int)n, name);
            if (!param_find(s, probe)) return true;
        }
    }
    return false;
}

static int by_string(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* target_modules as SimpleTuner writes them: each adapted module's last name ("to_q"; "to_out.0" for an indexed
 * one), or its full name where that short one would also select a module without an adapter. Sorted, unique. */
static st_status target_modules(param_set *s, const char *path, cJSON *list)
{
    char **names = calloc((size_t)s->n + 1, sizeof *names);
    if (!names) return st_host_oom("the target modules of %s", path);
    int n = 0;
    st_status st = ST_OK;
    for (int i = 0; i < s->n && !st; i++) {
        const char *name = s->items[i].name;
        size_t len = strlen(name);
        if (!ends_with(name, len, ".lora_A.weight")) continue;
        len -= strlen(".lora_A.weight");
        const char *last = name + len;
        while (last > name && last[-1] != '.') last--;
        bool indexed = last > name && strspn(last, "0123456789") == (size_t)(name + len - last);
        if (indexed)
            for (last--; last > name && last[-1] != '.'; last--) {}
        char *entry = strndup(last, (size_t)(name + len - last));
        if (entry && selects_other(s, entry)) {
            free(entry);
            entry = strndup(name, len);
        }
        if (entry) names[n++] = entry;
        else st = st_host_oom("the target modules of %s", path);
    }
    qsort(names, (size_t)n, sizeof *names, by_string);
    for (int i = 0; i < n && !st; i++)
        if ((!i || strcmp(names[i], names[i - 1])) && !cJSON_AddItemToArray(list, cJSON_CreateString(names[i])))
            st = st_host_oom("the target modules of %s", path);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

st_status param_set_save_lora(param_set *s, const char *path, double alpha, const char *const *meta, int n_meta)
{
    int64_t rank = 0;
    st_status st = lora_rank(s, path, &rank);
    for (int i = 0; i < s->n && !st; i++) {
        const param *q = &s->items[i];
        size_t n = strlen(q->name);
        if (q->trainable && !ends_with(q->name, n, ".lora_A.weight") && !ends_with(q->name, n, ".lora_B.weight"))
            st = st_fail(ST_ERR_INVALID, "%s: trainable parameter '%s' is not a LoRA adapter, and a PEFT LoRA file "
                         "holds only adapters", path, q->name);
        else if (q->trainable && q->shape[ends_with(q->name, n, ".lora_B.weight")] != rank)
            st = st_fail(ST_ERR_INVALID, "%s: adapter '%s' has rank %lld, others %lld: PEFT's LoRA file has one rank",
                         path, q->name, (long long)q->shape[ends_with(q->name, n, ".lora_B.weight")], (long long)rank);
    }
    if (st) return st;
    /* diffusers' save_lora_weights: the component's LoraConfig fields, each key after the component's prefix */
    char prefix[32], key[64];
    lora_prefix(s, prefix);
    cJSON *config = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(config, (snprintf(key, sizeof key, "%starget_modules", prefix), key));
    char *json = NULL;
    const char **all = calloc((size_t)n_meta + 2, 2 * sizeof *all);
    if (!config || !list || !all ||
        !cJSON_AddNumberToObject(config, (snprintf(key, sizeof key, "%slora_alpha", prefix), key), alpha) ||
        !cJSON_AddNumberToObject(config, (snprintf(key, sizeof key, "%sr", prefix), key), (double)rank))
        st = st_host_oom("the LoRA metadata of %s", path);
    if (!st) st = target_modules(s, path, list);
    if (!st && !(json = cJSON_Print(config))) st = st_host_oom("the LoRA metadata of %s", path);
    if (!st) {
        all[0] = "format", all[1] = "pt", all[2] = LORA_METADATA_KEY, all[3] = json;
        if (n_meta) memcpy(all + 4, meta, (size_t)n_meta * 2 * sizeof *all);
        st = save(s, path, PARAMS_TRAINABLE, false, prefix, NULL, 0, all, n_meta + 2);
    }
    free(all);
    free(json);
    cJSON_Delete(config);
    return st;
}

/* A LoRA config value: "<component>.<key>" (diffusers' pipeline file) or "<key>" (PEFT's own save). */
static const cJSON *config_value(const cJSON *config, const char *prefix, const char *key)
{
    char full[96];
    snprintf(full, sizeof full, "%s%s", prefix, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, full);
    return v ? v : cJSON_GetObjectItemCaseSensitive(config, key);
}

/* The adapter config the file carries, if any, against the model's rank and alpha; what segtrain's adapters
 * cannot be (per-module ranks, rsLoRA's scale, DoRA) is refused by name. */
static st_status check_lora_config(const sft_file *f, const char *prefix, int64_t rank, double alpha)
{
    const char *raw = sft_metadata(f, LORA_METADATA_KEY), *path = sft_path(f);
    if (!raw) return ST_OK;
    cJSON *config = cJSON_Parse(raw);
    const cJSON *r = config_value(config, prefix, "r"), *a = config_value(config, prefix, "lora_alpha");
    const cJSON *ranks = config_value(config, prefix, "rank_pattern");
    const cJSON *alphas = config_value(config, prefix, "alpha_pattern");
    st_status st = ST_OK;
    if (!cJSON_IsObject(config))
        st = st_fail(ST_ERR_FORMAT, "%s: metadata %s is not a JSON object", path, LORA_METADATA_KEY);
    else if (r && (!cJSON_IsNumber(r) || r->valuedouble != (double)rank))
        st = st_fail(ST_ERR_INVALID, "%s: LoRA rank (r) %g, but this model's adapters have rank %lld (lora_rank)",
                     path, cJSON_IsNumber(r) ? r->valuedouble : -1.0, (long long)rank);
    else if (a && (!cJSON_IsNumber(a) || fabs(a->valuedouble - alpha) > 1e-6 * fabs(alpha)))
        st = st_fail(ST_ERR_INVALID, "%s: lora_alpha %g, but this model's is %g (lora_alpha; none means the rank)",
                     path, cJSON_IsNumber(a) ? a->valuedouble : -1.0, alpha);
    else if ((cJSON_IsObject(ranks) && ranks->child) || (cJSON_IsObject(alphas) && alphas->child))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: per-module ranks or alphas (rank_pattern, alpha_pattern): segtrain's "
                     "adapters share one rank and alpha", path);
    else if (cJSON_IsTrue(config_value(config, prefix, "use_rslora")) ||
             cJSON_IsTrue(config_value(config, prefix, "use_dora")))
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: use_rslora or use_dora is set: segtrain's adapters are plain LoRA "
                     "(scale alpha / r)", path);
    cJSON_Delete(config);
    return st;
}

/* segtrain's name for a file's adapter name: "<component>." dropped, PEFT's ".default" adapter name dropped. */
static void own_name(const char *name, const char *prefix, char out[PARAM_NAME_MAX + 16])
{
    if (!strncmp(name, prefix, strlen(prefix))) name += strlen(prefix);
    snprintf(out, PARAM_NAME_MAX + 16, "%s", name);
    char *d = strstr(out, ".default.weight");
    size_t n = strlen(out);
    if (d && d + strlen(".default.weight") == out + n &&
        (ends_with(out, (size_t)(d - out), ".lora_A") || ends_with(out, (size_t)(d - out), ".lora_B")))
        memmove(d, d + strlen(".default"), strlen(".weight") + 1);
}

st_status param_set_load_lora(param_set *s, const char *path, double alpha)
{
    char file[PATH_MAX_LEN], name[PARAM_NAME_MAX + 16];
    struct stat sb;
    st_status st = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? join(file, path, SFT_LORA_FILE)
                                                                 : (snprintf(file, sizeof file, "%s", path), ST_OK);
    int64_t rank = 0;
    if (!st) st = lora_rank(s, path, &rank);
    sft_file *f = NULL;
    if (!st) st = sft_open(file, &f);
    char prefix[32];
    lora_prefix(s, prefix);
    if (!st) st = check_lora_config(f, prefix, rank, alpha);
    int *from = st ? NULL : calloc((size_t)s->n + 1, sizeof *from); /* 1 + the file's tensor of each parameter */
    if (!st && !from) st = st_host_oom("the tensor list of %s", file);
    for (int i = 0; !st && i < sft_count(f); i++) {
        const sft_tensor *t = sft_at(f, i);
        own_name(t->name, prefix, name);
        param *q = param_find(s, name);
        if (!q || !q->trainable) st = unexpected(file, t->name, q, PARAMS_TRAINABLE);
        else if (from[q - s->items])
            st = st_fail(ST_ERR_FORMAT, "%s: tensors '%s' and '%s' are both parameter '%s'", file,
                         sft_at(f, from[q - s->items] - 1)->name, t->name, q->name);
        else if (!(st = sft_read_f32(f, t->name, q->ndim, q->shape, q->w)))
            from[q - s->items] = i + 1;
    }
    for (int i = 0; !st && i < s->n; i++)
        if (s->items[i].trainable && !from[i])
            st = st_fail(ST_ERR_FORMAT, "%s: tensor '%s%s' is missing (or under segtrain's name, '%s')", file,
                         prefix, s->items[i].name, s->items[i].name);
    free(from);
    sft_close(f);
    return st;
}
