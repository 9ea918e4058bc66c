/* The DiT block (adaLN-Zero), ../shared/spec/dit.md:
 *
 *   (shift1, scale1, gate1, shift2, scale2, gate2) = adaLN_modulation(SiLU(c))
 *   x1 = x  + gate1 * proj(attention(qkv(LN(x)  * (1 + scale1) + shift1)))
 *   x2 = x1 + gate2 * fc2(gelu(fc1(LN(x1) * (1 + scale2) + shift2)))
 *
 * What forward keeps is chosen to be small: the modulation vectors, qkv, the attention output and its own
 * kept state, the projection (for gate1's gradient), and with KEEP_ALL fc1's output and fc2's output (for
 * gate2's gradient). Everything pointwise is recomputed in backward from those and the block's input: the
 * LayerNorm outputs, the modulated inputs, x1 and gelu(fc1). Recomputing runs the same kernels on the same
 * inputs, so the values are bitwise those of forward. */
#include "dit.h"

#include <stdlib.h>
#include <string.h>

struct block_saved {
    float *mod;        /* (B, 6D) */
    float *qkv;        /* (N, 3D) */
    float *att;        /* (N, D) attention output */
    op_state attn;     /* attention's own kept state */
    float *proj;       /* (N, D) */
    float *f1, *f2;    /* (N, 4D) fc1 output and (N, D) fc2 output; NULL with KEEP_ATTENTION */
    bool ffn_recomputed; /* f1/f2 came from backward's recompute, not from forward */
};

typedef struct dims {
    int64_t B, T, D, N;
} dims;

static dims dims_of(const dit_block *db)
{
    const dit_shape *s = &db->m->shape;
    return (dims){s->batch, s->tokens, s->hidden, s->batch * s->tokens};
}

static float *W(const dit_block *db, int which) { return param_at(db->m->params, db->p[which])->w; }
static float *G(const dit_block *db, int which) { return param_at(db->m->params, db->p[which])->g; }

static attn_shape attn_of(const dit_block *db)
{
    const dit_shape *s = &db->m->shape;
    return (attn_shape){s->batch, s->tokens, s->heads, s->hidden / s->heads, s->mechanism};
}

/* q, k and v are thirds of the packed (N, 3D) projection */
static attn_view qkv_view(float *qkv, int which, int64_t T, int64_t D)
{
    return (attn_view){qkv + which * D, 3 * D, T * 3 * D};
}

static attn_view rows_view(float *x, int64_t T, int64_t D) { return (attn_view){x, D, T * D}; }

static size_t ffn_kept_floats(dims d) { return (size_t)(5 * d.N * d.D); }

static size_t dit_kept_bytes(const block *b, keep_level keep)
{
    const dit_block *db = b->self;
    dims d = dims_of(db);
    attn_shape as = attn_of(db);
    if (keep == KEEP_NOTHING) return 0;
    size_t floats = (size_t)(d.B * 6 * d.D + 3 * d.N * d.D + 2 * d.N * d.D);
    if (keep == KEEP_ALL) floats += ffn_kept_floats(d);
    return floats * sizeof(float) + attention_kept_bytes(&as);
}

/* h = LN(x) * (1 + scale) + shift, into h (LayerNorm keeps nothing: its statistics are recomputed too) */
static st_status ln_modulate(const dit_block *db, float *h, const float *x, const float *mod, int chunk)
{
    dims d = dims_of(db);
    st_status st = layernorm_forward(db->m->pool, h, x, NULL, NULL, d.N, d.D, DIT_LN_EPS, NULL);
    if (!st) modulate_forward(h, h, mod + chunk * d.D, mod + (chunk + 1) * d.D, d.B, d.T, d.D, 6 * d.D);
    return st;
}

/* The feed-forward half's GEMM outputs from x1: f1 = fc1(LN(x1) * (1 + scale2) + shift2), f2 = fc2(gelu(f1)). */
static st_status ffn_compute(const dit_block *db, const float *x1, const float *mod, float *f1, float *f2)
{
    dims d = dims_of(db);
    scratch s = {.pool = db->m->pool};
    float *h = scratch_take(&s, d.N * d.D, MEM_WORKSPACE, "dit.ffn.h");
    if (!s.status) s.status = ln_modulate(db, h, x1, mod, 3);
    if (!s.status) linear_forward(f1, h, W(db, DB_FC1_W), W(db, DB_FC1_B), d.N, d.D, 4 * d.D);
    scratch_drop(&s, h);
    float *g = scratch_take(&s, d.N * 4 * d.D, MEM_WORKSPACE, "dit.ffn.gelu");
    if (!s.status) {
        gelu_forward(g, f1, d.N * 4 * d.D);
        linear_forward(f2, g, W(db, DB_FC2_W), W(db, DB_FC2_B), d.N, 4 * d.D, d.D);
    }
    return scratch_end(&s);
}

static st_status dit_forward(block *b, const block_state *in, block_state *out, keep_level keep,
                             block_saved **saved_out)
{
    dit_block *db = b->self;
    dims d = dims_of(db);
    attn_shape as = attn_of(db);
    const float *x = in->t[0];
    b->forward_runs++;

    block_saved *sv = calloc(1, sizeof *sv);
    if (!sv) return st_fail(ST_ERR_INTERNAL, "out of host memory");
    const mem_tag kt = keep == KEEP_NOTHING ? MEM_WORKSPACE : MEM_ACTIVATIONS; /* what is kept, is activations */
    const mem_tag ft = keep == KEEP_ALL ? MEM_ACTIVATIONS : MEM_WORKSPACE;
    scratch kept = {.pool = db->m->pool}, tmp = {.pool = db->m->pool};
    float *y = scratch_take(&kept, d.N * d.D, MEM_ACTIVATIONS, "dit.state");
    scratch *ks = keep == KEEP_NOTHING ? &tmp : &kept, *fs = keep == KEEP_ALL ? &kept : &tmp;
    sv->mod = scratch_take(ks, d.B * 6 * d.D, kt, "dit.mod");
    sv->qkv = scratch_take(ks, d.N * 3 * d.D, kt, "dit.qkv");
    sv->att = scratch_take(ks, d.N * d.D, kt, "dit.attention");
    sv->proj = scratch_take(ks, d.N * d.D, kt, "dit.proj");
    sv->f1 = scratch_take(fs, d.N * 4 * d.D, ft, "dit.fc1");
    sv->f2 = scratch_take(fs, d.N * d.D, ft, "dit.fc2");
    float *h = scratch_take(&tmp, d.N * d.D, MEM_WORKSPACE, "dit.attn.h");
    st_status st = kept.status ? kept.status : tmp.status;

    if (!st) {
        linear_forward(sv->mod, db->m->ctx.cs, W(db, DB_ADA_W), W(db, DB_ADA_B), d.B, d.D, 6 * d.D);
        st = ln_modulate(db, h, x, sv->mod, 0);
    }
    if (!st) {
        linear_forward(sv->qkv, h, W(db, DB_QKV_W), W(db, DB_QKV_B), d.N, d.D, 3 * d.D);
        scratch_drop(&tmp, h);
        st = attention_forward(db->m->pool, &as, rows_view(sv->att, d.T, d.D), qkv_view(sv->qkv, 0, d.T, d.D),
                               qkv_view(sv->qkv, 1, d.T, d.D), qkv_view(sv->qkv, 2, d.T, d.D),
                               keep == KEEP_NOTHING ? NULL : &sv->attn);
    }
    if (!st) {
        linear_forward(sv->proj, sv->att, W(db, DB_PROJ_W), W(db, DB_PROJ_B), d.N, d.D, d.D);
        gated_residual_forward(y, x, sv->mod + 2 * d.D, sv->proj, d.B, d.T, d.D, 6 * d.D);
        st = ffn_compute(db, y, sv->mod, sv->f1, sv->f2);
    }
    if (!st) gated_residual_forward(y, y, sv->mod + 5 * d.D, sv->f2, d.B, d.T, d.D, 6 * d.D);
    scratch_end(&tmp);
    if (st || keep == KEEP_NOTHING) {
        op_state_release(&sv->attn);
        if (st) scratch_end(&kept);
        free(sv);
        sv = NULL;
        if (st) return st;
    }
    if (keep == KEEP_ATTENTION) sv->f1 = sv->f2 = NULL;
    if (saved_out) *saved_out = sv;
    *out = (block_state){.n = 1, .t = {y}};
    return ST_OK;
}

/* Backward, freeing every buffer as soon as it is dead. grad->t[0] holds dL/dx2 on entry; the residual
 * stream's gradient is accumulated in place, becoming dL/dx1 after the feed-forward half and dL/dx at the end. */
static st_status dit_backward(block *b, const block_state *in, block_saved *sv, block_state *grad)
{
    dit_block *db = b->self;
    dims d = dims_of(db);
    attn_shape as = attn_of(db);
    const int64_t N = d.N, D = d.D, B = d.B, T = d.T, ND = N * D;
    const float *x = in->t[0], *mod = sv->mod;
    float *gx = grad->t[0];
    pool *p = db->m->pool;
    op_state stats = {0};
    scratch s = {.pool = p};
    float *dmod = scratch_take_zero(&s, B * 6 * D, MEM_WORKSPACE, "dit.dmod");
    float *x1 = scratch_take(&s, ND, MEM_WORKSPACE, "dit.x1");
    if (s.status) goto done;
    gated_residual_forward(x1, x, mod + 2 * D, sv->proj, B, T, D, 6 * D);
    if (!sv->f1) { /* KEEP_ATTENTION: recompute the feed-forward half from x1 */
        sv->f1 = scratch_take(&s, N * 4 * D, MEM_ACTIVATIONS, "dit.fc1 (recomputed)");
        sv->f2 = scratch_take(&s, ND, MEM_ACTIVATIONS, "dit.fc2 (recomputed)");
        sv->ffn_recomputed = true;
        if (s.status || (s.status = ffn_compute(db, x1, mod, sv->f1, sv->f2))) goto done;
    }

    /* feed-forward half: x2 = x1 + gate2 * fc2(gelu(fc1(h2))) */
    float *df2 = scratch_take_zero(&s, ND, MEM_WORKSPACE, "dit.dfc2");
    float *g = scratch_take(&s, N * 4 * D, MEM_WORKSPACE, "dit.gelu");
    float *dg = scratch_take_zero(&s, N * 4 * D, MEM_WORKSPACE, "dit.dgelu");
    if (s.status) goto done;
    gated_residual_backward(gx, dmod + 5 * D, df2, gx, mod + 5 * D, sv->f2, B, T, D, 6 * D);
    gelu_forward(g, sv->f1, N * 4 * D);
    linear_backward(dg, G(db, DB_FC2_W), G(db, DB_FC2_B), df2, g, W(db, DB_FC2_W), N, 4 * D, D);
    scratch_drop(&s, g);
    scratch_drop(&s, df2);
    float *df1 = scratch_take_zero(&s, N * 4 * D, MEM_WORKSPACE, "dit.dfc1");
    if (s.status) goto done;
    gelu_backward(df1, dg, sv->f1, N * 4 * D);
    scratch_drop(&s, dg);
    float *ln = scratch_take(&s, ND, MEM_WORKSPACE, "dit.ln2");
    float *h = scratch_take(&s, ND, MEM_WORKSPACE, "dit.h2");
    float *dh = scratch_take_zero(&s, ND, MEM_WORKSPACE, "dit.dh2");
    if (s.status || (s.status = layernorm_forward(p, ln, x1, NULL, NULL, N, D, DIT_LN_EPS, &stats))) goto done;
    modulate_forward(h, ln, mod + 3 * D, mod + 4 * D, B, T, D, 6 * D);
    linear_backward(dh, G(db, DB_FC1_W), G(db, DB_FC1_B), df1, h, W(db, DB_FC1_W), N, D, 4 * D);
    scratch_drop(&s, df1);
    memset(h, 0, (size_t)ND * sizeof(float)); /* h2 is dead: it becomes dLN2 */
    modulate_backward(h, dmod + 3 * D, dmod + 4 * D, dh, ln, mod + 4 * D, B, T, D, 6 * D);
    layernorm_backward(gx, NULL, NULL, h, x1, NULL, N, D, &stats);
    op_state_release(&stats);
    if (sv->ffn_recomputed) {
        scratch_drop(&s, sv->f1);
        scratch_drop(&s, sv->f2);
        sv->f1 = sv->f2 = NULL;
        sv->ffn_recomputed = false;
    }

    /* attention half: x1 = x + gate1 * proj(attention(qkv(h1))); x1, ln, h and dh are reused as buffers */
    float *dproj = x1, *datt = dh;
    memset(dproj, 0, (size_t)ND * sizeof(float));
    memset(datt, 0, (size_t)ND * sizeof(float));
    gated_residual_backward(gx, dmod + 2 * D, dproj, gx, mod + 2 * D, sv->proj, B, T, D, 6 * D);
    linear_backward(datt, G(db, DB_PROJ_W), G(db, DB_PROJ_B), dproj, sv->att, W(db, DB_PROJ_W), N, D, D);
    float *dqkv = scratch_take_zero(&s, N * 3 * D, MEM_WORKSPACE, "dit.dqkv");
    if (s.status) goto done;
    s.status = attention_backward(p, &as, qkv_view(dqkv, 0, T, D), qkv_view(dqkv, 1, T, D), qkv_view(dqkv, 2, T, D),
                                  rows_view(datt, T, D), qkv_view(sv->qkv, 0, T, D), qkv_view(sv->qkv, 1, T, D),
                                  qkv_view(sv->qkv, 2, T, D), rows_view(sv->att, T, D), &sv->attn);
    if (s.status || (s.status = layernorm_forward(p, ln, x, NULL, NULL, N, D, DIT_LN_EPS, &stats))) goto done;
    float *dh1 = dproj;
    memset(dh1, 0, (size_t)ND * sizeof(float));
    modulate_forward(h, ln, mod, mod + D, B, T, D, 6 * D);
    linear_backward(dh1, G(db, DB_QKV_W), G(db, DB_QKV_B), dqkv, h, W(db, DB_QKV_W), N, D, 3 * D);
    scratch_drop(&s, dqkv);
    memset(h, 0, (size_t)ND * sizeof(float)); /* h1 is dead: it becomes dLN1 */
    modulate_backward(h, dmod, dmod + D, dh1, ln, mod + D, B, T, D, 6 * D);
    layernorm_backward(gx, NULL, NULL, h, x, NULL, N, D, &stats);
    linear_backward(db->m->ctx.dcs, G(db, DB_ADA_W), G(db, DB_ADA_B), dmod, db->m->ctx.cs, W(db, DB_ADA_W), B, D,
                    6 * D);
done:
    op_state_release(&stats);
    if (sv->ffn_recomputed) sv->f1 = sv->f2 = NULL;
    return scratch_end(&s);
}

static void dit_release(block *b, block_saved *sv)
{
    if (!sv) return;
    dit_block *db = b->self;
    op_state_release(&sv->attn);
    pool *p = db->m->pool;
    pool_free(p, sv->f2);
    pool_free(p, sv->f1);
    pool_free(p, sv->proj);
    pool_free(p, sv->att);
    pool_free(p, sv->qkv);
    pool_free(p, sv->mod);
    free(sv);
}


/* dit_forward's and dit_backward's allocations, in their order, for the memory plan. Keep in step with them:
 * the checkpointing tests compare the plan's peak with the pool's to the byte. */
static void dit_simulate(const block *b, keep_level keep, bool backward, mem_sim *sim)
{
    const dit_block *db = b->self;
    dims d = dims_of(db);
    attn_shape as = attn_of(db);
    const size_t f = sizeof(float), ND = (size_t)(d.N * d.D) * f, mod = (size_t)(d.B * 6 * d.D) * f;
    const size_t stats = (size_t)(2 * d.N) * f, threads = (size_t)ops_threads();
    if (!backward) {
        const mem_tag kt = keep == KEEP_NOTHING ? MEM_WORKSPACE : MEM_ACTIVATIONS;
        const mem_tag ft = keep == KEEP_ALL ? MEM_ACTIVATIONS : MEM_WORKSPACE;
        sim_take(sim, MEM_ACTIVATIONS, ND); /* the output state */
        sim_take(sim, kt, mod + 5 * ND);    /* mod, qkv, attention output, projection */
        sim_take(sim, ft, 5 * ND);          /* fc1, fc2 outputs */
        sim_take(sim, MEM_WORKSPACE, ND);   /* h1 */
        sim_drop(sim, MEM_WORKSPACE, ND);
        size_t ws = attention_workspace_bytes(&as, (int)threads, keep == KEEP_NOTHING ? ATTN_FORWARD : ATTN_FORWARD_KEEP);
        if (keep != KEEP_NOTHING) sim_take(sim, MEM_ACTIVATIONS, attention_kept_bytes(&as));
        sim_take(sim, MEM_WORKSPACE, ws);
        sim_drop(sim, MEM_WORKSPACE, ws);
        sim_take(sim, MEM_WORKSPACE, ND); /* ffn h2, then gelu */
        sim_drop(sim, MEM_WORKSPACE, ND);
        sim_take(sim, MEM_WORKSPACE, 4 * ND);
        sim_drop(sim, MEM_WORKSPACE, 4 * ND);
        if (keep == KEEP_NOTHING) sim_drop(sim, MEM_WORKSPACE, mod + 5 * ND);
        if (keep != KEEP_ALL) sim_drop(sim, MEM_WORKSPACE, 5 * ND);
        return;
    }
    sim_take(sim, MEM_WORKSPACE, mod + ND); /* dmod, x1 */
    if (keep == KEEP_ATTENTION) {
        sim_take(sim, MEM_ACTIVATIONS, 5 * ND); /* fc1, fc2 recomputed */
        sim_take(sim, MEM_WORKSPACE, ND);
        sim_drop(sim, MEM_WORKSPACE, ND);
        sim_take(sim, MEM_WORKSPACE, 4 * ND);
        sim_drop(sim, MEM_WORKSPACE, 4 * ND);
    }
    sim_take(sim, MEM_WORKSPACE, 9 * ND); /* dfc2, gelu, dgelu */
    sim_drop(sim, MEM_WORKSPACE, 5 * ND);
    sim_take(sim, MEM_WORKSPACE, 4 * ND); /* dfc1 */
    sim_drop(sim, MEM_WORKSPACE, 4 * ND);
    sim_take(sim, MEM_WORKSPACE, 3 * ND); /* ln2, h2, dh2 */
    sim_take(sim, MEM_ACTIVATIONS, stats);
    sim_drop(sim, MEM_WORKSPACE, 4 * ND);
    sim_drop(sim, MEM_ACTIVATIONS, stats);
    if (keep == KEEP_ATTENTION) sim_drop(sim, MEM_ACTIVATIONS, 5 * ND);
    sim_take(sim, MEM_WORKSPACE, 3 * ND); /* dqkv */
    const size_t ws = attention_workspace_bytes(&as, (int)threads, ATTN_BACKWARD);
    sim_take(sim, MEM_WORKSPACE, ws);
    sim_drop(sim, MEM_WORKSPACE, ws);
    sim_take(sim, MEM_ACTIVATIONS, stats);
    sim_drop(sim, MEM_WORKSPACE, 3 * ND);
    sim_drop(sim, MEM_ACTIVATIONS, stats);
    sim_drop(sim, MEM_WORKSPACE, mod + 4 * ND); /* dmod, x1, ln, h, dh */
}

const block_kind dit_block_kind = {
    .name = "dit",
    .ffn_split = true,
    .softmax_attention = true,
    .kept_bytes = dit_kept_bytes,
    .forward = dit_forward,
    .backward = dit_backward,
    .release = dit_release,
    .simulate = dit_simulate,
};
