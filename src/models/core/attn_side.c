/* The dual-stream blocks' saved tensors and their attention side's trip to the host (attn_side.h). */
#include "models/core/attn_side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int block_norm(param_set *ps, const char *prefix, const char *name, int64_t hd, const model_config *c)
{
    char n[PARAM_NAME_MAX];
    snprintf(n, sizeof n, "%.64s.%.40s.weight", prefix, name);
    return param_add(ps, n, 1, (int64_t[]){hd}, !c->lora_rank);
}

lin_layer block_linear(param_set *ps, const char *prefix, const char *name, int64_t in, int64_t out, bool bias,
                       int64_t rank, const model_config *c)
{
    char n[PARAM_NAME_MAX];
    snprintf(n, sizeof n, "%.72s.%.48s", prefix, name);
    return lin_register(ps, n, in, out, bias, rank, (float)c->lora_alpha, !c->lora_rank);
}

static bool in_use(const block_saved *sv, int i) { return i < SIDE_MAX ? sv->side_n[i] > 0 : i - SIDE_MAX < sv->n_attn; }

static void frame_init(frame *f, const struct model *m, keep_level keep, offload *off, block_saved *sv)
{
    *f = (frame){.keep = keep, .from_host = sv->on_host, .to_host = off && !sv->on_host, .reuse = sv->att_kept};
    const bool first = keep == KEEP_NOTHING || keep == KEEP_ATTENTION_OUTPUT; /* a checkpointed block's first */
    f->kt = first ? MEM_WORKSPACE : MEM_ACTIVATIONS;
    f->ft = keep == KEEP_ALL ? MEM_ACTIVATIONS : MEM_WORKSPACE;
    f->kept = (scratch){.pool = m->pool};
    f->tmp = (scratch){.pool = m->pool};
    f->ks = first ? &f->tmp : &f->kept;
    f->fs = keep == KEEP_ALL ? &f->kept : &f->tmp;
    sv->pool = m->pool;
    sv->bf16 = m->cfg.bf16_activations;
    if (f->to_host) sv->off = off;
}

/* Under mixed_precision bf16, every tensor sv keeps on the device (the side, the modulations, the projections, the
 * feed-forward's outputs; not the attentions' float states, nor a borrowed modulation) to bf16 after a forward, or
 * back to float (widen) before whatever reads them: a recompute that reuses the attentions' outputs, or backward.
 * Each was made bf16 (side_made), so packing loses nothing. */
static st_status side_pack(block_saved *sv, bool widen)
{
    if (!sv->bf16 || sv->packed != widen) return ST_OK;
    float **slot[SIDE_MAX + 17];
    int n = 0;
    for (int i = 0; i < SIDE_MAX; i++) slot[n++] = &sv->side[i];
    for (int s = 0; s < 2; s++) {
        if (!sv->mod_borrowed) slot[n++] = &sv->mod[s];
        slot[n++] = &sv->o[s];
        if (!sv->f1_raw[s]) slot[n++] = &sv->f1[s];
        slot[n++] = &sv->f2[s], slot[n++] = &sv->f3[s];
    }
    slot[n++] = &sv->o2;
    for (int i = 0; i < 4; i++) slot[n++] = &sv->o3[i];
    kept_tensor k[SIDE_MAX + 17];
    for (int i = 0; i < n; i++) /* each a whole allocation: its size says its elements */
        k[i] = (kept_tensor){slot[i], (int64_t)(pool_size_of(*slot[i]) / (widen ? sizeof(uint16_t) : sizeof(float)))};
    sv->packed = !widen;
    return kept_convert(sv->pool, k, n, widen);
}

block_saved *frame_begin(frame *f, block *b, const struct model *m, keep_level keep, offload *off,
                         block_saved **saved_io)
{
    b->forward_runs++;
    block_saved *sv = saved_io && *saved_io ? *saved_io : calloc(1, sizeof *sv);
    if (sv) frame_init(f, m, keep, off, sv);
    if (sv) f->kept.status = side_pack(sv, true); /* a recompute reuses the attentions' outputs */
    return sv;
}

void side_take(frame *f, block_saved *sv, const int64_t *numel, int n_attn)
{
    memcpy(sv->side_n, numel, sizeof sv->side_n);
    sv->n_attn = n_attn;
    sv->xo_kept = f->keep_xo;
    for (int i = 0; !f->from_host && i < SIDE_MAX; i++) {
        const bool output = i == SO || (i == XO && f->keep_xo);
        if (!numel[i] || (output && f->reuse)) continue;
        if (output && f->keep == KEEP_ATTENTION_OUTPUT)
            sv->side[i] = scratch_take(&f->kept, numel[i], MEM_ACTIVATIONS, "attention output");
        else sv->side[i] = scratch_take(f->ks, numel[i], f->kt, "attention side");
    }
}

size_t side_output_bytes(const attn_shape *s, size_t elem)
{
    return (size_t)(s->batch * s->tokens * s->heads * s->head_dim) * elem + attention_kept_bytes(s);
}

size_t side_self_bytes(attn_shape s, size_t elem)
{
    return (size_t)(6 * s.batch * s.tokens * s.heads * s.head_dim) * elem + attention_kept_bytes(&s);
}

size_t side_block_kept_bytes(size_t side, attn_shape s, keep_level keep, int64_t floats, int64_t all, size_t elem)
{
    if (keep == KEEP_NOTHING) return 0;
    if (keep == KEEP_ATTENTION_OUTPUT) return side_output_bytes(&s, elem);
    if (keep == KEEP_ALL) floats += all;
    return (size_t)floats * elem + side;
}

size_t side_kept_bytes(attn_shape s, keep_level keep, int64_t floats, int64_t all, size_t elem)
{
    return side_block_kept_bytes(side_self_bytes(s, elem), s, keep, floats, all, elem);
}

void side_take_self(frame *f, block_saved *sv, attn_shape s)
{
    const int64_t n = s.batch * s.tokens * s.heads * s.head_dim;
    side_take(f, sv, (int64_t[SIDE_MAX]){n, n, n, n, n, n}, 1);
}

static void release_saved(block_saved *sv)
{
    pool *p = sv->pool;
    for (int i = 0; sv->off && i < SIDE_MAX + ATTN_N; i++) host_tensor_release(sv->off, &sv->h[i]);
    for (int a = 0; a < ATTN_N; a++) op_state_release(&sv->attn[a]);
    for (int s = 0; s < 2; s++) {
        pool_free(p, sv->f3[s]);
        pool_free(p, sv->f2[s]);
        pool_free(p, sv->f1[s]);
        pool_free(p, sv->o[s]);
        if (!sv->mod_borrowed) pool_free(p, sv->mod[s]);
    }
    pool_free(p, sv->o2);
    for (int i = 0; i < 4; i++) pool_free(p, sv->o3[i]);
    for (int i = 0; i < SIDE_MAX; i++) pool_free(p, sv->side[i]);
    free(sv);
}

void side_residuals(const block_saved *sv, const float *x, float *x1, float *x2, int64_t B, int64_t T, int64_t D)
{
    gated_residual_forward(x1, x, sv->mod[0] + 2 * D, sv->o[0], B, T, D, 6 * D);
    copy_rows(x2, D, x1, D, B * T, D);
    add_to(x2, sv->o2, B * T * D);
}

void side_ffn_drop(block_saved *sv, scratch *s, bool *again)
{
    for (int q = 0; *again && q < 2; q++) {
        float **f[3] = {&sv->f1[q], &sv->f2[q], &sv->f3[q]};
        for (int i = 0; i < 3; i++)
            if (*f[i]) scratch_drop(s, *f[i]), *f[i] = NULL;
    }
    *again = false;
}

void side_ffn_forget(block_saved *sv, bool *again)
{
    for (int q = 0; *again && q < 2; q++) sv->f1[q] = sv->f2[q] = sv->f3[q] = NULL;
    *again = false;
}

void saved_release(block *b, block_saved *sv)
{
    (void)b;
    if (sv) release_saved(sv);
}

st_status frame_end(frame *f, st_status st, block_saved *sv, block_saved **saved_io, float **outs, int n_out)
{
    for (int i = 0; st && sv->off && i < SIDE_MAX + ATTN_N; i++) /* copies in flight read what scratch_end frees: they finish */
        host_tensor_release(sv->off, &sv->h[i]);
    scratch_end(&f->tmp);
    if (f->keep == KEEP_NOTHING || f->keep == KEEP_ATTENTION_OUTPUT) {
        for (int s = 0; s < 2; s++) sv->mod[s] = sv->o[s] = NULL;
        sv->o2 = sv->o3[0] = sv->o3[1] = sv->o3[2] = sv->o3[3] = NULL;
        for (int i = 0; !sv->on_host && i < SIDE_MAX; i++)
            if (f->keep == KEEP_NOTHING || (i != SO && (i != XO || !f->keep_xo))) sv->side[i] = NULL;
    }
    sv->att_kept = f->keep == KEEP_ATTENTION_OUTPUT; /* a recompute has made the rest: KEEP_ALL's now */
    if (f->keep != KEEP_ALL)
        for (int s = 0; s < 2; s++) sv->f1[s] = sv->f2[s] = sv->f3[s] = NULL;
    if (st) { /* the output state is the caller's to free no more; what was kept is sv's */
        for (int i = 0; i < n_out; i++) pool_free(sv->pool, outs[i]);
        release_saved(sv);
        if (saved_io) *saved_io = NULL;
        return st;
    }
    if (f->keep == KEEP_NOTHING && !sv->on_host) {
        free(sv);
        sv = NULL;
    }
    if (sv && (st = side_pack(sv, false))) {
        for (int i = 0; i < n_out; i++) pool_free(sv->pool, outs[i]);
        release_saved(sv);
        sv = NULL;
    }
    if (saved_io) *saved_io = sv;
    return st;
}

st_status side_send(block_saved *sv)
{
    st_status st = ST_OK;
    st_status (*const send)(offload *, host_tensor *, float *, size_t, mem_tag, const char *) =
        sv->bf16 ? host_tensor_offload_bf16 : host_tensor_offload;
    for (int i = 0; i < SIDE_MAX && !st; i++)
        if (in_use(sv, i))
            st = send(sv->off, &sv->h[i], sv->side[i], (size_t)sv->side_n[i] * sizeof(float), MEM_ACTIVATIONS,
                      "attention side (host)");
    for (int a = 0; a < sv->n_attn && !st; a++)
        st = host_tensor_offload(sv->off, &sv->h[SIDE_MAX + a], sv->attn[a].data, sv->attn[a].bytes, MEM_ACTIVATIONS,
                                 "attention state (host)");
    return st;
}

st_status side_drop(block_saved *sv, scratch *owner)
{
    st_status st = ST_OK;
    for (int i = 0; i < SIDE_MAX; i++) {
        if (!in_use(sv, i)) continue;
        scratch_forget(owner, sv->side[i]);
        st_status si = host_tensor_drop_device(sv->off, &sv->h[i]);
        st = st ? st : si;
        sv->side[i] = NULL;
    }
    for (int a = 0; a < sv->n_attn; a++) {
        st_status sa = host_tensor_drop_device(sv->off, &sv->h[SIDE_MAX + a]);
        st = st ? st : sa;
        sv->attn[a] = (op_state){0};
    }
    sv->on_host = true;
    return st;
}

st_status side_back(block_saved *sv)
{
    st_status st = ST_OK;
    for (int i = 0; i < SIDE_MAX + ATTN_N && !st; i++)
        if (in_use(sv, i)) st = host_tensor_wait(sv->off, &sv->h[i]);
    if (st) return st;
    for (int i = 0; i < SIDE_MAX; i++)
        if (in_use(sv, i)) sv->side[i] = sv->h[i].dev, sv->h[i].dev = NULL;
    for (int a = 0; a < sv->n_attn; a++) {
        host_tensor *h = &sv->h[SIDE_MAX + a];
        sv->attn[a] = (op_state){.pool = sv->pool, .data = h->dev, .bytes = h->bytes};
        h->dev = NULL;
    }
    sv->on_host = false;
    return ST_OK;
}

scratch side_scratch(pool *p, block_saved *sv)
{
    st_status st = side_pack(sv, true); /* before the side comes back from the host in float */
    if (!st && sv->on_host) st = side_back(sv);
    return (scratch){.pool = p, .status = st};
}

st_status side_prefetch(block *b, block_saved *sv)
{
    (void)b;
    st_status st = ST_OK;
    for (int i = 0; sv && sv->on_host && i < SIDE_MAX + ATTN_N && !st; i++)
        if (in_use(sv, i)) st = host_tensor_fetch(sv->off, &sv->h[i]);
    return st;
}

/* draw += dL/draw from dy, the gradient after an RMSNorm over rows of `width` (its statistics recomputed); no norm:
 * dy itself. n rows of `total` floats. */
static st_status norm_back(const side_attention *a, float *draw, const float *dy, const float *raw, int w, int64_t n,
                           int64_t total)
{
    if (w < 0) {
        add_to(draw, dy, n * total);
        return ST_OK;
    }
    const model *m = a->m;
    const int64_t rows = n * total / a->norm_width;
    scratch s = {.pool = m->pool};
    float *tmp = scratch_take(&s, n * total, MEM_WORKSPACE, "attention.norm");
    op_state stats = {0};
    param *p = param_at(m->params, w);
    if (!s.status && a->zero_centred) {
        s.status = rmsnorm_zc_forward(m->pool, tmp, raw, p->w, rows, a->norm_width, a->eps, &stats);
        if (!s.status) s.status = rmsnorm_zc_backward(m->pool, draw, p->g, dy, raw, p->w, rows, a->norm_width, &stats);
    } else if (!s.status) {
        s.status = rmsnorm_forward(m->pool, tmp, raw, p->w, rows, a->norm_width, a->eps, &stats);
        if (!s.status) rmsnorm_backward(draw, p->g, dy, raw, p->w, rows, a->norm_width, &stats);
    }
    op_state_release(&stats);
    return scratch_end(&s);
}

static attn_view rows_of(float *x, int64_t tokens, int64_t width) { return (attn_view){x, width, tokens * width}; }

/* A run of rows under one set of weights: all rows, or with a->gen a sample's rows before the split (a's) or from it
 * (gen's) */
typedef struct side_run {
    const side_attention *w;
    int64_t r0, n;
} side_run;

static int64_t runs_of(const side_attention *a) { return a->gen ? 2 * a->shape.batch : 1; }

static side_run run_at(const side_attention *a, int64_t i, int64_t rows)
{
    if (!a->gen) return (side_run){a, 0, rows};
    const int64_t T = a->shape.tokens, b = i / 2;
    return i % 2 ? (side_run){a->gen, b * T + a->split, T - a->split} : (side_run){a, b * T, a->split};
}

/* The projection `which` (0 q, 1 k, 2 v, 3 out) of a run's set */
static const lin_layer *layer_of(const side_attention *w, int which)
{
    return which == 0 ? w->q : which == 1 ? w->k : which == 2 ? w->v : w->out;
}

/* y = l(x) over `rows` rows, run by run; back: dx += and the weights' gradients from dy */
static st_status proj(const side_attention *a, int which, float *y, const float *x, int64_t rows, bool back, float *dx,
                      const float *dy, bool k_bias_zero)
{
    st_status st = ST_OK;
    for (int64_t i = 0; !st && i < runs_of(a); i++) {
        const side_run r = run_at(a, i, rows);
        lin_layer l = *layer_of(r.w, which);
        if (k_bias_zero) l.b = -1;
        const int64_t in = r.r0 * l.in, out = r.r0 * l.out;
        st = back ? bwd(a->m, &l, dx ? dx + in : NULL, dy + out, x + in, r.n) : fwd(a->m, &l, y + out, x + in, r.n);
    }
    return st;
}

st_status side_out_forward(const side_attention *a, float *y, const float *att)
{
    return proj(a, 3, y, att, a->shape.batch * a->shape.tokens, false, NULL, NULL, false);
}

/* The per-head RMSNorm `which` (0 of q, 1 of k) of a run's set; < 0: none */
static int qk_norm_of(const side_attention *w, int which) { return which ? w->norm_k : w->norm_q; }

/* y = RMSNorm(raw) per head over `rows` rows of `width`, run by run */
static st_status qk_norm(const side_attention *a, int which, float *y, const float *raw, int64_t rows, int64_t width)
{
    st_status (*const norm)(pool *, float *, const float *, const float *, int64_t, int64_t, float, op_state *) =
        a->zero_centred ? rmsnorm_zc_forward : rmsnorm_forward;
    const int64_t w = a->norm_width;
    st_status st = ST_OK;
    for (int64_t i = 0; !st && i < runs_of(a); i++) {
        const side_run r = run_at(a, i, rows);
        const int n = qk_norm_of(r.w, which);
        st = norm(a->m->pool, y + r.r0 * width, raw + r.r0 * width, param_at(a->m->params, n)->w, r.n * width / w, w,
                  a->eps, NULL);
    }
    return st;
}

/* An attention's sizes: the queries' tokens T, rows nq and width D; the keys' and values' tokens Tkv, rows nkv and
 * width K (a cross-attention's kv_tokens, grouped queries' kv_heads) */
typedef struct side_sizes {
    int64_t T, Tkv, D, K, nq, nkv;
} side_sizes;

static side_sizes sizes_of(const attn_shape *as)
{
    side_sizes z = {.T = as->tokens, .D = as->heads * as->head_dim};
    z.Tkv = as->kv_tokens ? as->kv_tokens : z.T;
    z.K = (as->kv_heads ? as->kv_heads : as->heads) * as->head_dim;
    z.nq = as->batch * z.T, z.nkv = as->batch * z.Tkv;
    return z;
}

st_status side_attend(pool *p, const attn_shape *as, const attn_mask *mask, block_saved *sv, int at, bool keep)
{
    if (sv->att_kept && (at == SQ || (at == XQ && sv->xo_kept))) return ST_OK;
    const side_sizes z = sizes_of(as);
    float **side = sv->side + at;
    if (sv->bf16) /* q, k and v as the attention reads them (rotated, normed, or as their GEMM made them) are bf16 */
        round_to_bf16(side[SQ], z.nq * z.D), round_to_bf16(side[SK], z.nkv * z.K), round_to_bf16(side[SV], z.nkv * z.K);
    const st_status st = attention_forward_masked(p, as, mask, rows_of(side[SO], z.T, z.D), rows_of(side[SQ], z.T, z.D),
                                                  rows_of(side[SK], z.Tkv, z.K), rows_of(side[SV], z.Tkv, z.K),
                                                  keep ? &sv->attn[at / SIDE_PER] : NULL);
    if (!st && sv->bf16) round_to_bf16(side[SO], z.nq * z.D); /* as side_made */
    return st;
}

st_status side_attend_backward(pool *p, const attn_shape *as, const attn_mask *mask, block_saved *sv, int at,
                               float *dq, float *dk, float *dv, float *dout, int64_t dout_width)
{
    const side_sizes z = sizes_of(as);
    float **side = sv->side + at;
    const attn_view out = sv->bf16 ? (attn_view){0} : rows_of(side[SO], z.T, z.D); /* bf16: o rounded, D from P */
    return attention_backward_masked(p, as, mask, rows_of(dq, z.T, z.D), rows_of(dk, z.Tkv, z.K),
                                     rows_of(dv, z.Tkv, z.K), rows_of(dout, z.T, dout_width),
                                     rows_of(side[SQ], z.T, z.D), rows_of(side[SK], z.Tkv, z.K),
                                     rows_of(side[SV], z.Tkv, z.K), out, &sv->attn[at / SIDE_PER]);
}

/* A fused projection (side_attention.fused): y = l(x) over n rows of `parts` blocks of w, block i into dst[i]; back:
 * the blocks' gradients src[i] side by side into one dL/dy, then l's gradients and dx += */
static st_status fused_forward(const side_attention *a, float *const *dst, int parts, const lin_layer *l,
                               const float *x, int64_t n, int64_t w)
{
    scratch s = {.pool = a->m->pool};
    float *y = scratch_take(&s, n * parts * w, MEM_WORKSPACE, "attention.fused");
    if (!s.status) s.status = fwd(a->m, l, y, x, n);
    for (int i = 0; !s.status && i < parts; i++) copy_rows(dst[i], w, y + i * w, parts * w, n, w);
    return scratch_end(&s);
}

static st_status fused_backward(const side_attention *a, const float *const *src, int parts, const lin_layer *l,
                                const float *x, int64_t n, int64_t w, float *dx)
{
    scratch s = {.pool = a->m->pool};
    float *dy = scratch_take(&s, n * parts * w, MEM_WORKSPACE, "attention.dfused");
    for (int i = 0; !s.status && i < parts; i++) copy_rows(dy + i * w, parts * w, src[i], w, n, w);
    if (!s.status) s.status = bwd(a->m, l, dx, dy, x, n);
    return scratch_end(&s);
}

st_status side_attention_forward(const side_attention *a, block_saved *sv, int at, const float *xq, const float *xkv,
                                 bool keep)
{
    const model *m = a->m;
    const attn_shape *as = &a->shape;
    const side_sizes z = sizes_of(as);
    const int64_t D = z.D, K = z.K, nq = z.nq, nkv = z.nkv;
    float **side = sv->side + at;
    const bool nq_on = a->norm_q >= 0, nk_on = a->norm_k >= 0;
    float *qraw = nq_on ? side[SQR] : side[SQ], *kraw = nk_on ? side[SKR] : side[SK];
    st_status st = a->fused == SIDE_FUSED_QKV ? fused_forward(a, (float *[]){qraw, kraw, side[SV]}, 3, a->q, xq, nq, D)
                                              : proj(a, 0, qraw, xq, nq, false, NULL, NULL, false);
    if (!st && a->fused == SIDE_FUSED_KV) st = fused_forward(a, (float *[]){kraw, side[SV]}, 2, a->k, xkv, nkv, K);
    if (!st && !a->fused) st = proj(a, 1, kraw, xkv, nkv, false, NULL, NULL, false);
    if (!st && !a->fused) st = proj(a, 2, side[SV], xkv, nkv, false, NULL, NULL, false);
    if (!st && nq_on) st = qk_norm(a, 0, side[SQ], side[SQR], nq, D);
    if (!st && nk_on) st = qk_norm(a, 1, side[SK], side[SKR], nkv, K);
    if (st) return st;
    if (nq_on) side_made(m, side[SQ], nq * D); /* the norms' outputs are bf16; the rotation's, side_attend's */
    if (nk_on) side_made(m, side[SK], nkv * K);
    if (a->rotate) a->rotate(a->block, side[SQ], false, false), a->rotate(a->block, side[SK], true, false);
    return side_attend(m->pool, as, a->mask, sv, at, keep);
}

st_status side_attention_backward(const side_attention *a, block_saved *sv, int at, const float *dout, const float *xq,
                                  const float *xkv, float *dxq, float *dxkv)
{
    const model *m = a->m;
    const attn_shape *as = &a->shape;
    const side_sizes z = sizes_of(as);
    const int64_t D = z.D, K = z.K, nq = z.nq, nkv = z.nkv;
    float **side = sv->side + at;
    scratch s = {.pool = m->pool};
    float *datt = a->out ? scratch_take_zero(&s, nq * D, MEM_WORKSPACE, "attention.datt") : (float *)dout;
    float *dq = scratch_take_zero(&s, nq * D, MEM_WORKSPACE, "attention.dq");
    float *dk = scratch_take_zero(&s, nkv * K, MEM_WORKSPACE, "attention.dk");
    float *dv = scratch_take_zero(&s, nkv * K, MEM_WORKSPACE, "attention.dv");
    const bool qkv = a->fused == SIDE_FUSED_QKV; /* q's and k's raw gradients both live until the fused GEMM */
    float *draw = scratch_take_zero(&s, qkv ? nq * D + nkv * K : nq * D > nkv * K ? nq * D : nkv * K, MEM_WORKSPACE,
                                    "attention.draw");
    float *drawk = qkv ? draw + nq * D : draw;
    if (s.status) return scratch_end(&s);
    if (a->out && (s.status = proj(a, 3, NULL, side[SO], nq, true, datt, dout, false))) return scratch_end(&s);
    s.status = side_attend_backward(m->pool, as, a->mask, sv, at, dq, dk, dv, datt, D);
    if (s.status) return scratch_end(&s);
    if (a->rotate) a->rotate(a->block, dq, false, true), a->rotate(a->block, dk, true, true);
    for (int64_t i = 0; !s.status && i < runs_of(a); i++) {
        const side_run r = run_at(a, i, nq);
        s.status = norm_back(a, draw + r.r0 * D, dq + r.r0 * D, side[SQR] + r.r0 * D, r.w->norm_q, r.n, D);
    }
    if (!s.status && !qkv) s.status = proj(a, 0, NULL, xq, nq, true, dxq, draw, false);
    if (!s.status && !qkv) zero_bytes(draw, (size_t)(nkv * K) * sizeof(float));
    for (int64_t i = 0; !s.status && i < runs_of(a); i++) {
        const side_run r = run_at(a, i, nkv);
        s.status = norm_back(a, drawk + r.r0 * K, dk + r.r0 * K, side[SKR] + r.r0 * K, r.w->norm_k, r.n, K);
    }
    if (!s.status && qkv)
        s.status = fused_backward(a, (const float *[]){draw, drawk, dv}, 3, a->q, xq, nq, D, dxq);
    else if (!s.status && a->fused == SIDE_FUSED_KV)
        s.status = fused_backward(a, (const float *[]){drawk, dv}, 2, a->k, xkv, nkv, K, dxkv);
    else if (!s.status) s.status = proj(a, 1, NULL, xkv, nkv, true, dxkv, drawk, a->k_bias_zero);
    if (!s.status && !a->fused) s.status = proj(a, 2, NULL, xkv, nkv, true, dxkv, dv, false);
    return scratch_end(&s);
}

void glu_ffn_forward(scratch *s, const struct model *m, const lin_layer *w1, const lin_layer *w3, const lin_layer *w2,
                     float *h, int64_t n, int64_t F, glu_kind kind, float *f1, float *f3, float *f2, const char *what)
{
    if (!s->status) s->status = fwd(m, w1, f1, h, n);
    if (!s->status && w3) s->status = fwd(m, w3, f3, h, n);
    scratch_drop(s, h);
    float *a = scratch_take(s, n * F, MEM_WORKSPACE, what);
    if (s->status) return;
    glu_forward(a, f1, w3 ? f3 : f1 + F, n, F, w3 ? F : 2 * F, kind);
    s->status = fwd(m, w2, f2, a, n);
}

void ln_modulate_backward(float *dx, float *dshift, float *dscale, float *dln, const float *dh, const float *ln,
                          const float *x, const float *scale, int64_t B, int64_t T, int64_t D, int64_t stride,
                          op_state *stats)
{
    zero_bytes(dln, (size_t)(B * T * D) * sizeof(float));
    modulate_backward(dln, dshift, dscale, dh, ln, scale, B, T, D, stride);
    layernorm_backward(dx, NULL, NULL, dln, x, NULL, B * T, D, stats);
    op_state_release(stats);
}
