/* The DiT block (adaLN-Zero), ../shared/spec/dit.md:
 *
 *   (shift1, scale1, gate1, shift2, scale2, gate2) = adaLN_modulation(SiLU(c))
 *   x1 = x  + gate1 * proj(attention(qkv(LN(x)  * (1 + scale1) + shift1)))
 *   x2 = x1 + gate2 * fc2(gelu(fc1(LN(x1) * (1 + scale2) + shift2)))
 *
 * What forward keeps is chosen to be small: the modulation vectors, qkv, the attention output and its own
 * kept state, the projection (for gate1's gradient and x1), and with KEEP_ALL fc1's output. fc2's output is
 * kept only when fc2's weight does not train (LoRA, frozen): gate2's gradient then needs it. When the weight
 * trains, gate2's gradient comes out of the products dW is made of (gated_linear_backward), so the output is
 * never kept nor recomputed for backward. Everything pointwise is recomputed in backward from those and the
 * block's input: the LayerNorm outputs, the modulated inputs, x1 and gelu(fc1). Recomputing runs the same kernels
 * on the same inputs, so the values are bitwise those of forward. */
#include "models/core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct block_saved {
    float *mod;          /* (B, 6D) */
    float *qkv;          /* (N, 3D) */
    float *att;          /* (N, D) attention output */
    op_state attn;       /* attention's own kept state */
    float *proj;         /* (N, D) */
    float *f1, *f2;      /* (N, 4D) fc1 output and (N, D) fc2 output (unless fc2_gated); NULL with KEEP_ATTENTION */
    bool ffn_recomputed; /* f1/f2 came from backward's recompute, not from forward */
    bool att_kept;       /* a KEEP_ATTENTION_OUTPUT forward left att and attn alone, for its recompute */
    bool packed;         /* mixed_precision bf16: the tensors above are held in bf16 (pack_kept) */
    /* attention offload: qkv, the attention output and attention's state live here between forward and
     * backward, and the three pointers above are NULL */
    offload *off;
    bool on_host;
    host_tensor h_qkv, h_att, h_attn;
};

typedef struct dims {
    int64_t B, T, D, N;
} dims;

void dit_block_register(param_set *s, dit_block *b, const char *prefix, const model_config *c)
{
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, ra = c->lora_attention ? c->lora_rank : 0, rm = c->lora_mlp ? c->lora_rank : 0;
    const float alpha = (float)c->lora_alpha;
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", prefix, suffix), n)
    b->qkv = lin_register(s, NAME("attn.qkv"), D, 3 * D, true, ra, alpha, full);
    b->proj = lin_register(s, NAME("attn.proj"), D, D, true, ra, alpha, full);
    b->fc1 = lin_register(s, NAME("mlp.fc1"), D, 4 * D, true, rm, alpha, full);
    b->fc2 = lin_register(s, NAME("mlp.fc2"), 4 * D, D, true, rm, alpha, full);
    b->ada = lin_register(s, NAME("adaLN_modulation.1"), D, 6 * D, true, 0, 0, full);
#undef NAME
}

static dims dims_of(const dit_block *db)
{
    const model_shape *s = &db->m->shape;
    return (dims){s->batch, s->tokens, s->hidden, s->batch * s->tokens};
}

/* mixed_precision bf16: what PyTorch's bf16 block makes in bf16 (every GEMM's and attention's output) is rounded
 * where it is made, and what forward keeps of it is held in bf16 until backward (docs/PRECISION.md) */
static bool bf16(const dit_block *db) { return db->m->cfg.bf16_activations; }

static void made(const dit_block *db, float *y, int64_t numel)
{
    if (bf16(db)) round_to_bf16(y, numel);
}

/* Attention offload's copy of a tensor made above: in bf16 on the host under mixed_precision bf16 (it is bf16
 * already, so exactly), else float. */
static st_status offload_made(const dit_block *db, offload *off, host_tensor *t, float *y, int64_t numel,
                              const char *what)
{
    const size_t bytes = (size_t)numel * sizeof(float);
    return bf16(db) ? host_tensor_offload_bf16(off, t, y, bytes, MEM_ACTIVATIONS, what)
                    : host_tensor_offload(off, t, y, bytes, MEM_ACTIVATIONS, what);
}

static st_status fwd(const dit_block *db, const lin_layer *l, float *y, const float *x, int64_t n)
{
    const st_status st = lin_forward(db->m->params, db->m->pool, l, y, x, n);
    if (!st) made(db, y, n * l->out);
    return st;
}

static st_status bwd(const dit_block *db, const lin_layer *l, float *dx, const float *dy, const float *x, int64_t n)
{
    return lin_backward(db->m->params, db->m->pool, l, dx, dy, x, n);
}

static attn_shape attn_of(const dit_block *db)
{
    const model_shape *s = &db->m->shape;
    return (attn_shape){.batch = s->batch, .tokens = s->tokens, .heads = s->heads, .head_dim = s->hidden / s->heads,
                        .mechanism = s->mechanism};
}

/* q, k and v are thirds of the packed (N, 3D) projection */
static attn_view qkv_view(float *qkv, int which, int64_t T, int64_t D)
{
    return (attn_view){qkv + which * D, 3 * D, T * 3 * D};
}

static attn_view rows_view(float *x, int64_t T, int64_t D) { return (attn_view){x, D, T * D}; }

/* gate2's gradient from fc2's weight-gradient products, without fc2's output (see the top) */
static bool fc2_gated(const dit_block *db) { return lin_trains_weight(db->m->params, &db->fc2); }

/* What the feed-forward half keeps, in (N, D) units: fc1's output, and fc2's unless fc2_gated. */
static int64_t ffn_kept_nd(const dit_block *db) { return fc2_gated(db) ? 4 : 5; }

static size_t dit_kept_bytes(const block *b, keep_level keep)
{
    const dit_block *db = b->self;
    dims d = dims_of(db);
    attn_shape as = attn_of(db);
    const size_t elem = bf16(db) ? sizeof(uint16_t) : sizeof(float); /* attention's own state stays float */
    if (keep == KEEP_NOTHING) return 0;
    if (keep == KEEP_ATTENTION_OUTPUT) return (size_t)(d.N * d.D) * elem + attention_kept_bytes(&as);
    size_t floats = (size_t)(d.B * 6 * d.D + 3 * d.N * d.D + 2 * d.N * d.D);
    if (keep == KEEP_ALL) floats += (size_t)(ffn_kept_nd(db) * d.N * d.D);
    return floats * elem + attention_kept_bytes(&as);
}

/* Under mixed_precision bf16, the tensors sv holds on the device to bf16 after a forward, or back to float (widen)
 * before whatever reads them: a recompute that reuses the attention's output, or backward. */
static st_status pack_kept(const dit_block *db, block_saved *sv, bool widen)
{
    if (!bf16(db) || sv->packed != widen) return ST_OK;
    dims d = dims_of(db);
    const kept_tensor k[] = {{&sv->mod, d.B * 6 * d.D}, {&sv->qkv, d.N * 3 * d.D}, {&sv->att, d.N * d.D},
                             {&sv->proj, d.N * d.D},    {&sv->f1, d.N * 4 * d.D},  {&sv->f2, d.N * d.D}};
    sv->packed = !widen;
    return kept_convert(db->m->pool, k, (int)(sizeof k / sizeof *k), widen);
}

/* h = LN(x) * (1 + scale) + shift, into h (LayerNorm keeps nothing: its statistics are recomputed too) */
static st_status ln_modulate(const dit_block *db, float *h, const float *x, const float *mod, int chunk)
{
    dims d = dims_of(db);
    st_status st = layernorm_forward(db->m->pool, h, x, NULL, NULL, d.N, d.D, DIT_LN_EPS, NULL);
    if (!st) modulate_forward(h, h, mod + chunk * d.D, mod + (chunk + 1) * d.D, d.B, d.T, d.D, 6 * d.D);
    return st;
}

/* The feed-forward half's GEMM outputs from x1: f1 = fc1(LN(x1) * (1 + scale2) + shift2), and f2 = fc2(gelu(f1))
 * unless f2 is NULL. */
static st_status ffn_compute(const dit_block *db, const float *x1, const float *mod, float *f1, float *f2)
{
    dims d = dims_of(db);
    scratch s = {.pool = db->m->pool};
    float *h = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "dit.ffn.h");
    if (!s.status) s.status = ln_modulate(db, h, x1, mod, 3);
    if (!s.status) s.status = fwd(db, &db->fc1, f1, h, d.N);
    scratch_drop(&s, h);
    if (!f2) return scratch_end(&s);
    float *g = scratch_take(&s, d.N * 4 * d.D, MEM_WORKSPACE, "dit.ffn.gelu");
    if (!s.status) {
        gelu_forward(g, f1, d.N * 4 * d.D);
        s.status = fwd(db, &db->fc2, f2, g, d.N);
    }
    return scratch_end(&s);
}

static void release_saved(pool *p, block_saved *sv)
{
    if (sv->off) {
        host_tensor_release(sv->off, &sv->h_qkv);
        host_tensor_release(sv->off, &sv->h_att);
        host_tensor_release(sv->off, &sv->h_attn);
    }
    op_state_release(&sv->attn);
    pool_free(p, sv->f2);
    pool_free(p, sv->f1);
    pool_free(p, sv->proj);
    pool_free(p, sv->att);
    pool_free(p, sv->qkv);
    pool_free(p, sv->mod);
    free(sv);
}

/* Waits for an offloaded attention side and makes it the saved qkv, output and attention state again. */
static st_status attention_side_back(const dit_block *db, block_saved *sv)
{
    st_status st = host_tensor_wait(sv->off, &sv->h_qkv);
    if (!st) st = host_tensor_wait(sv->off, &sv->h_att);
    if (!st) st = host_tensor_wait(sv->off, &sv->h_attn);
    if (st) return st;
    sv->qkv = sv->h_qkv.dev;
    sv->att = sv->h_att.dev;
    sv->attn = (op_state){.pool = db->m->pool, .data = sv->h_attn.dev, .bytes = sv->h_attn.bytes};
    sv->h_qkv.dev = sv->h_att.dev = sv->h_attn.dev = NULL; /* owned by sv now */
    sv->on_host = false;
    return ST_OK;
}

static st_status dit_prefetch(block *b, block_saved *sv)
{
    if (!sv || !sv->on_host) return ST_OK;
    st_status st = host_tensor_fetch(sv->off, &sv->h_qkv);
    if (!st) st = host_tensor_fetch(sv->off, &sv->h_att);
    if (!st) st = host_tensor_fetch(sv->off, &sv->h_attn);
    return st;
}

/* Four cases: a plain forward at a keep level; a first forward with off, which sends the attention side to
 * the host (even with KEEP_NOTHING: that side is not recomputed later); a recompute after such a forward, which
 * takes the attention side back instead of computing qkv and attention again; and a recompute after a
 * KEEP_ATTENTION_OUTPUT forward, which computes qkv (backward reads it) but reuses the attention's output and
 * state. */
static st_status dit_forward(block *b, const block_state *in, block_state *out, keep_level keep, offload *off,
                             block_saved **saved_io)
{
    dit_block *db = b->self;
    dims d = dims_of(db);
    attn_shape as = attn_of(db);
    const float *x = in->t[0];
    b->forward_runs++;

    block_saved *sv = saved_io && *saved_io ? *saved_io : calloc(1, sizeof *sv);
    if (!sv) return st_host_oom("a block's saved tensors");
    st_status st = pack_kept(db, sv, true); /* a recompute reuses the attention's output */
    const bool from_host = sv->on_host, to_host = off && !from_host, reuse = sv->att_kept;
    const bool keep_att = keep == KEEP_ATTENTION_OUTPUT, first_ckpt = keep == KEEP_NOTHING || keep_att;
    if (to_host) sv->off = off;
    const mem_tag kt = first_ckpt ? MEM_WORKSPACE : MEM_ACTIVATIONS; /* what is kept, is activations */
    const mem_tag ft = keep == KEEP_ALL ? MEM_ACTIVATIONS : MEM_WORKSPACE;
    scratch kept = {.pool = db->m->pool}, tmp = {.pool = db->m->pool};
    /* without an output (a segment's last block, recomputed), y only holds x1 */
    float *y = out ? scratch_take(&kept, d.N * d.D, MEM_ACTIVATIONS, "dit.state")
                   : scratch_take(&tmp, d.N * d.D, MEM_WORKSPACE, "dit.x1");
    scratch *ks = first_ckpt ? &tmp : &kept, *fs = keep == KEEP_ALL ? &kept : &tmp;
    sv->mod = scratch_take(ks, d.B * 6 * d.D, kt, "dit.mod");
    if (!from_host) sv->qkv = scratch_take(ks, d.N * 3 * d.D, kt, "dit.qkv");
    if (!from_host && !reuse)
        sv->att = scratch_take(keep_att ? &kept : ks, d.N * d.D, keep_att ? MEM_ACTIVATIONS : kt, "dit.attention");
    sv->proj = scratch_take(ks, d.N * d.D, kt, "dit.proj");
    const bool gated = fc2_gated(db);
    sv->f1 = scratch_take(fs, d.N * 4 * d.D, ft, "dit.fc1");
    if (out || !gated) /* fc2's output: for y, or kept for gate2's gradient */
        sv->f2 = scratch_take(gated ? &tmp : fs, d.N * d.D, gated ? MEM_WORKSPACE : ft, "dit.fc2");
    float *h = from_host ? NULL : scratch_take(&tmp, d.N * d.D, MEM_WORKSPACE, "dit.attn.h");
    st = st ? st : kept.status ? kept.status : tmp.status;

    if (!st) st = fwd(db, &db->ada, sv->mod, db->m->ctx.cs, d.B);
    if (!st && from_host) st = attention_side_back(db, sv);
    if (!st && !from_host) {
        st = ln_modulate(db, h, x, sv->mod, 0);
        if (!st) st = fwd(db, &db->qkv, sv->qkv, h, d.N);
        scratch_drop(&tmp, h);
        /* each copy to the host overlaps the compute that follows it */
        if (!st && to_host) st = offload_made(db, off, &sv->h_qkv, sv->qkv, d.N * 3 * d.D, "dit.qkv (host)");
        if (!st && !reuse)
            st = attention_forward(db->m->pool, &as, rows_view(sv->att, d.T, d.D), qkv_view(sv->qkv, 0, d.T, d.D),
                                   qkv_view(sv->qkv, 1, d.T, d.D), qkv_view(sv->qkv, 2, d.T, d.D),
                                   keep == KEEP_NOTHING && !to_host ? NULL : &sv->attn);
        if (!st && !reuse) made(db, sv->att, d.N * d.D);
        if (!st && to_host) st = host_tensor_offload(off, &sv->h_attn, sv->attn.data, sv->attn.bytes, MEM_ACTIVATIONS,
                                                     "dit.attention state (host)");
        if (!st && to_host) st = offload_made(db, off, &sv->h_att, sv->att, d.N * d.D, "dit.attention (host)");
    }
    if (!st) st = fwd(db, &db->proj, sv->proj, sv->att, d.N);
    if (!st) gated_residual_forward(y, x, sv->mod + 2 * d.D, sv->proj, d.B, d.T, d.D, 6 * d.D);
    if (!st && to_host) { /* the attention side's last reader is done: its device bytes go */
        scratch_forget(ks, sv->qkv);
        scratch_forget(ks, sv->att);
        sv->attn = (op_state){0};
        st = host_tensor_drop_device(off, &sv->h_qkv);
        st_status s2 = host_tensor_drop_device(off, &sv->h_att), s3 = host_tensor_drop_device(off, &sv->h_attn);
        st = st ? st : s2 ? s2 : s3;
        sv->qkv = sv->att = NULL;
        sv->on_host = true;
    }
    if (!st) st = ffn_compute(db, y, sv->mod, sv->f1, sv->f2);
    if (!st && out) gated_residual_forward(y, y, sv->mod + 5 * d.D, sv->f2, d.B, d.T, d.D, 6 * d.D);
    if (st && sv->off) { /* a copy still in flight reads device buffers scratch_end frees: it finishes first */
        host_tensor_release(sv->off, &sv->h_qkv);
        host_tensor_release(sv->off, &sv->h_att);
        host_tensor_release(sv->off, &sv->h_attn);
    }
    scratch_end(&tmp);
    if (first_ckpt) sv->mod = sv->qkv = sv->proj = NULL; /* those were transient */
    if (keep == KEEP_NOTHING) sv->att = NULL;
    sv->att_kept = keep_att; /* a recompute has made the rest: sv is a KEEP_ALL forward's now */
    if (keep != KEEP_ALL) sv->f1 = NULL;
    if (keep != KEEP_ALL || gated) sv->f2 = NULL;
    if (st) { /* everything kept is also sv's: release it through sv */
        if (out) pool_free(db->m->pool, y);
        release_saved(db->m->pool, sv);
        if (saved_io) *saved_io = NULL;
        return st;
    }
    if (keep == KEEP_NOTHING && !sv->on_host) {
        free(sv);
        sv = NULL;
    }
    if (sv && (st = pack_kept(db, sv, false))) {
        if (out) pool_free(db->m->pool, y);
        release_saved(db->m->pool, sv);
        sv = NULL;
    }
    if (saved_io) *saved_io = sv;
    if (st) return st;
    if (out) *out = (block_state){.n = 1, .t = {y}};
    return ST_OK;
}

/* Backward, freeing every buffer as soon as it is dead. grad->t[0] holds dL/dx2 on entry; the residual
 * stream's gradient is accumulated in place, becoming dL/dx1 after the feed-forward half and dL/dx at the end. */
static st_status backward_body(dit_block *db, const block_state *in, block_saved *sv, block_state *grad)
{
    dims d = dims_of(db);
    attn_shape as = attn_of(db);
    const int64_t N = d.N, D = d.D, B = d.B, T = d.T, ND = N * D;
    const float *x = in->t[0], *mod = sv->mod;
    float *gx = grad->t[0];
    pool *p = db->m->pool;
    const bool gated = fc2_gated(db);
    op_state stats = {0};
    scratch s = {.pool = p};
    float *dmod = scratch_take_zero(&s, B * 6 * D, MEM_WORKSPACE, "dit.dmod");
    float *x1 = scratch_take(&s, ND, MEM_WORKSPACE, "dit.x1");
    if (s.status) goto done;
    gated_residual_forward(x1, x, mod + 2 * D, sv->proj, B, T, D, 6 * D);
    if (!sv->f1) { /* KEEP_ATTENTION: recompute the feed-forward half from x1 */
        sv->f1 = scratch_take(&s, N * 4 * D, MEM_ACTIVATIONS, "dit.fc1 (recomputed)");
        if (!gated) sv->f2 = scratch_take(&s, ND, MEM_ACTIVATIONS, "dit.fc2 (recomputed)");
        sv->ffn_recomputed = true;
        if (s.status || (s.status = ffn_compute(db, x1, mod, sv->f1, sv->f2))) goto done;
    }

    /* feed-forward half: x2 = x1 + gate2 * fc2(gelu(fc1(h2))); the residual's gradient passes through gx */
    float *df2 = gated ? NULL : scratch_take_zero(&s, ND, MEM_WORKSPACE, "dit.dfc2");
    float *g = scratch_take(&s, N * 4 * D, MEM_WORKSPACE, "dit.gelu");
    float *dg = scratch_take_zero(&s, N * 4 * D, MEM_WORKSPACE, "dit.dgelu");
    if (s.status) goto done;
    gelu_forward(g, sv->f1, N * 4 * D);
    if (gated) {
        s.status = lin_backward_gated(db->m->params, p, &db->fc2, dg, dmod + 5 * D, gx, g, mod + 5 * D, B, T, 6 * D);
    } else {
        gated_residual_backward(gx, dmod + 5 * D, df2, gx, mod + 5 * D, sv->f2, B, T, D, 6 * D);
        s.status = bwd(db, &db->fc2, dg, df2, g, N);
    }
    if (s.status) goto done;
    scratch_drop(&s, g);
    scratch_drop(&s, df2);
    float *df1 = dg; /* in place */
    gelu_backward(df1, dg, sv->f1, N * 4 * D);
    float *ln = scratch_take(&s, ND, MEM_WORKSPACE, "dit.ln2");
    float *h = scratch_take(&s, ND, MEM_WORKSPACE, "dit.h2");
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "dit.dh2");
    if (s.status || (s.status = layernorm_forward(p, ln, x1, NULL, NULL, N, D, DIT_LN_EPS, &stats))) goto done;
    modulate_forward(h, ln, mod + 3 * D, mod + 4 * D, B, T, D, 6 * D);
    if ((s.status = bwd(db, &db->fc1, dh, df1, h, N))) goto done;
    scratch_drop(&s, df1);
    modulate_backward(dh, dmod + 3 * D, dmod + 4 * D, dh, ln, mod + 4 * D, B, T, D, 6 * D); /* dh becomes dLN2 */
    layernorm_backward(gx, NULL, NULL, dh, x1, NULL, N, D, &stats);
    op_state_release(&stats);
    if (sv->ffn_recomputed) {
        scratch_drop(&s, sv->f1);
        if (sv->f2) scratch_drop(&s, sv->f2);
        sv->f1 = sv->f2 = NULL;
        sv->ffn_recomputed = false;
    }

    /* attention half: x1 = x + gate1 * proj(attention(qkv(h1))); x1, ln, h and dh are reused as buffers */
    float *dproj = x1, *datt = dh;
    zero_bytes(dproj, (size_t)ND * sizeof(float));
    zero_bytes(datt, (size_t)ND * sizeof(float));
    gated_residual_backward(gx, dmod + 2 * D, dproj, gx, mod + 2 * D, sv->proj, B, T, D, 6 * D);
    if ((s.status = bwd(db, &db->proj, datt, dproj, sv->att, N))) goto done;
    float *dqkv = scratch_take_zero(&s, N * 3 * D, MEM_WORKSPACE, "dit.dqkv");
    if (s.status) goto done;
    s.status = attention_backward(p, &as, qkv_view(dqkv, 0, T, D), qkv_view(dqkv, 1, T, D), qkv_view(dqkv, 2, T, D),
                                  rows_view(datt, T, D), qkv_view(sv->qkv, 0, T, D), qkv_view(sv->qkv, 1, T, D),
                                  qkv_view(sv->qkv, 2, T, D), bf16(db) ? (attn_view){0} : rows_view(sv->att, T, D),
                                  &sv->attn); /* bf16: att is rounded, so D from P (ops.h) */
    if (s.status || (s.status = layernorm_forward(p, ln, x, NULL, NULL, N, D, DIT_LN_EPS, &stats))) goto done;
    float *dh1 = dproj;
    zero_bytes(dh1, (size_t)ND * sizeof(float));
    modulate_forward(h, ln, mod, mod + D, B, T, D, 6 * D);
    if ((s.status = bwd(db, &db->qkv, dh1, dqkv, h, N))) goto done;
    scratch_drop(&s, dqkv);
    modulate_backward(dh1, dmod, dmod + D, dh1, ln, mod + D, B, T, D, 6 * D); /* dh1 becomes dLN1 */
    layernorm_backward(gx, NULL, NULL, dh1, x, NULL, N, D, &stats);
    s.status = bwd(db, &db->ada, db->m->ctx.dcs, dmod, db->m->ctx.cs, B);
done:
    op_state_release(&stats);
    if (sv->ffn_recomputed) sv->f1 = sv->f2 = NULL;
    return scratch_end(&s);
}

static st_status dit_backward(block *b, const block_state *in, block_saved *sv, block_state *grad)
{
    dit_block *db = b->self;
    st_status st = pack_kept(db, sv, true); /* before the side comes back from the host in float */
    if (!st && sv->on_host) st = attention_side_back(db, sv); /* a kept block whose attention side was offloaded */
    return st ? st : backward_body(db, in, sv, grad);
}

static void dit_release(block *b, block_saved *sv)
{
    if (sv) release_saved(((dit_block *)b->self)->m->pool, sv);
}

/* Attention offload's side, qkv and the output 2 bytes an element under bf16 both in host memory (offload_made) and
 * in what it frees of kept_bytes (packed there): its host and device bytes are the same. The device copies that go
 * and come back are float (backward widens what it kept too). */
static size_t dit_offload_bytes(const block *b)
{
    const dit_block *db = b->self;
    dims d = dims_of(db);
    attn_shape as = attn_of(db);
    const size_t elem = bf16(db) ? sizeof(uint16_t) : sizeof(float);
    return (size_t)(4 * d.N * d.D) * elem + attention_kept_bytes(&as);
}

const block_kind dit_block_kind = {
    .name = "dit", .ffn_split = true, .softmax_attention = true, .output_optional = true,
    .keeps_attention_output = true, .kept_bytes = dit_kept_bytes, .offload_host_bytes = dit_offload_bytes,
    .offload_device_bytes = dit_offload_bytes,
    .forward = dit_forward, .prefetch = dit_prefetch, .backward = dit_backward, .release = dit_release,
};
