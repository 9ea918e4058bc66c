/* LayerNorm, RMSNorm, zero-centred RMSNorm, GroupNorm and GlobalResponseNorm against double-precision references:
 * forward, backward by central differences, accumulation, NULL gradients, kept-state accounting against the pool, OOM,
 * and thread-count independence. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

static float *fbuf(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }
static double *dbuf(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(double)); }

typedef enum { LAYERNORM, RMSNORM } norm_kind;

typedef struct {
    norm_kind kind;
    double *x, *w, *b, *lw, *y; /* w, b may be NULL; lw: loss weights; y: scratch */
    int64_t n, d;
    double eps;
} norm_ctx;

static void norm_ref(norm_ctx *c)
{
    const int64_t d = c->d;
    for (int64_t i = 0; i < c->n; i++) {
        const double *x = c->x + i * d;
        double m = 0, v = 0;
        if (c->kind == LAYERNORM) {
            for (int64_t j = 0; j < d; j++) m += x[j];
            m /= (double)d;
        }
        for (int64_t j = 0; j < d; j++) v += (x[j] - m) * (x[j] - m);
        const double r = 1.0 / sqrt(v / (double)d + c->eps);
        for (int64_t j = 0; j < d; j++)
            c->y[i * d + j] = (x[j] - m) * r * (c->w ? c->w[j] : 1.0) + (c->b ? c->b[j] : 0.0);
    }
}

static double norm_loss(void *ctx)
{
    norm_ctx *c = ctx;
    norm_ref(c);
    double s = 0;
    for (int64_t i = 0; i < c->n * c->d; i++) s += c->lw[i] * c->y[i];
    return s;
}

static size_t kept_bytes(norm_kind k, int64_t n) { return k == LAYERNORM ? layernorm_kept_bytes(n) : rmsnorm_kept_bytes(n); }

static st_status fwd(norm_kind k, pool *p, float *y, const float *x, const float *w, const float *b, int64_t n,
                     int64_t d, float eps, op_state *keep)
{
    return k == LAYERNORM ? layernorm_forward(p, y, x, w, b, n, d, eps, keep)
                          : rmsnorm_forward(p, y, x, w, n, d, eps, keep);
}

static void bwd(norm_kind k, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                int64_t n, int64_t d, const op_state *keep)
{
    if (k == LAYERNORM) layernorm_backward(dx, dw, db, dy, x, w, n, d, keep);
    else rmsnorm_backward(dx, dw, dy, x, w, n, d, keep);
}

/* affine: LayerNorm with w and b, RMSNorm with w. Checks everything about one configuration. */
static void test_norm(norm_kind kind, bool affine, int64_t n, int64_t d, float xlo, float xhi, uint64_t seed)
{
    char what[128], tag[64];
    snprintf(tag, sizeof tag, "%s%s %lldx%lld", kind == LAYERNORM ? "layernorm" : "rmsnorm",
             affine ? "" : " plain", (long long)n, (long long)d);
    const bool has_b = kind == LAYERNORM && affine;
    const float eps = 1e-6f;
    const int64_t nd = n * d;
    pool *p = pool_create(POOL_DEVICE, 0);

    float *x = fbuf(nd), *w = affine ? fbuf(d) : NULL, *b = has_b ? fbuf(d) : NULL, *dy = fbuf(nd);
    float *y = fbuf(nd), *y2 = fbuf(nd);
    tk_fill(x, nd, seed, xlo, xhi);
    if (w) tk_fill(w, d, seed + 1, 0.5f, 1.5f);
    if (b) tk_fill(b, d, seed + 2, -1, 1);
    tk_fill(dy, nd, seed + 3, -1, 1);

    norm_ctx c = {.kind = kind, .x = dbuf(nd), .w = w ? dbuf(d) : NULL, .b = b ? dbuf(d) : NULL, .lw = dbuf(nd),
                  .y = dbuf(nd), .n = n, .d = d, .eps = eps};
    tk_to_double(c.x, x, nd);
    if (w) tk_to_double(c.w, w, d);
    if (b) tk_to_double(c.b, b, d);
    tk_to_double(c.lw, dy, nd);

    /* forward with kept state: the pool grows by exactly the stated bytes, as activations */
    pool_stats s0, s1;
    pool_get_stats(p, &s0);
    op_state keep = {0};
    CHECK(fwd(kind, p, y, x, w, b, n, d, eps, &keep) == ST_OK);
    pool_get_stats(p, &s1);
    CHECKF(s1.live - s0.live == kept_bytes(kind, n), "%s: kept %zu bytes, states %zu", tag, s1.live - s0.live,
           kept_bytes(kind, n));
    CHECK(s1.live_by_tag[MEM_ACTIVATIONS] - s0.live_by_tag[MEM_ACTIVATIONS] == kept_bytes(kind, n));
    CHECK(keep.bytes == kept_bytes(kind, n) && keep.pool == p);
    CHECK(s1.peak == s1.live); /* nothing transient on top */

    norm_ref(&c);
    snprintf(what, sizeof what, "%s fwd", tag);
    tk_expect_close(what, y, c.y, nd, 1e-5);

    /* without kept state: nothing allocated, and the same bits (recomputation reproduces forward) */
    pool_reset_peak(p);
    CHECK(fwd(kind, p, y2, x, w, b, n, d, eps, NULL) == ST_OK);
    CHECK(pool_live(p) == s1.live && pool_peak(p) == s1.live);
    snprintf(what, sizeof what, "%s fwd keep=NULL same bits", tag);
    tk_expect_bitwise(what, y2, y, nd);

    /* backward vs finite differences */
    float *dx = fbuf(nd), *dw = fbuf(d), *db = fbuf(d);
    bwd(kind, dx, affine ? dw : NULL, has_b ? db : NULL, dy, x, w, n, d, &keep);
    double *gx = dbuf(nd), *gw = dbuf(d), *gb = dbuf(d);
    tk_numeric_grad(norm_loss, &c, c.x, nd, 1e-6, gx);
    snprintf(what, sizeof what, "%s dx vs FD", tag);
    tk_expect_close(what, dx, gx, nd, 1e-4);
    if (affine) {
        tk_numeric_grad(norm_loss, &c, c.w, d, 1e-6, gw);
        snprintf(what, sizeof what, "%s dw vs FD", tag);
        tk_expect_close(what, dw, gw, d, 1e-4);
    }
    if (has_b) {
        tk_numeric_grad(norm_loss, &c, c.b, d, 1e-6, gb);
        snprintf(what, sizeof what, "%s db vs FD", tag);
        tk_expect_close(what, db, gb, d, 1e-4);
    }
    /* weight gradients of the plain forms are still defined (w = 1, b = 0): dw = sum dy xhat, db = sum dy */
    if (!affine) {
        float *pw = fbuf(d), *pb = fbuf(d);
        double *ew = dbuf(d), *eb = dbuf(d);
        norm_ref(&c); /* the FD left y at a perturbed x */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < d; j++) ew[j] += c.lw[i * d + j] * c.y[i * d + j], eb[j] += c.lw[i * d + j];
        bwd(kind, NULL, pw, pb, dy, x, NULL, n, d, &keep);
        snprintf(what, sizeof what, "%s dw (w = 1)", tag);
        tk_expect_close(what, pw, ew, d, 1e-5);
        if (kind == LAYERNORM) {
            snprintf(what, sizeof what, "%s db (b = 0)", tag);
            tk_expect_close(what, pb, eb, d, 1e-5);
        }
        free(pw), free(pb), free(ew), free(eb);
    }

    /* accumulation into non-zero gradients */
    float *ax = fbuf(nd), *aw = fbuf(d), *ab = fbuf(d);
    double *ex = dbuf(nd), *ew = dbuf(d), *eb = dbuf(d);
    tk_fill(ax, nd, seed + 4, -1, 1);
    tk_fill(aw, d, seed + 5, -1, 1);
    tk_fill(ab, d, seed + 6, -1, 1);
    for (int64_t i = 0; i < nd; i++) ex[i] = ax[i] + gx[i];
    for (int64_t i = 0; i < d; i++) ew[i] = aw[i] + gw[i], eb[i] = ab[i] + gb[i];
    bwd(kind, ax, affine ? aw : NULL, has_b ? ab : NULL, dy, x, w, n, d, &keep);
    snprintf(what, sizeof what, "%s dx accumulates", tag);
    tk_expect_close(what, ax, ex, nd, 1e-4);
    if (affine) {
        snprintf(what, sizeof what, "%s dw accumulates", tag);
        tk_expect_close(what, aw, ew, d, 1e-4);
    }
    if (has_b) {
        snprintf(what, sizeof what, "%s db accumulates", tag);
        tk_expect_close(what, ab, eb, d, 1e-4);
    }

    /* NULL gradients: each alone gives the full call's bits (and backward is deterministic) */
    if (affine) {
        float *ox = fbuf(nd), *ow = fbuf(d), *ob = fbuf(d);
        bwd(kind, ox, NULL, NULL, dy, x, w, n, d, &keep);
        bwd(kind, NULL, ow, NULL, dy, x, w, n, d, &keep);
        if (has_b) bwd(kind, NULL, NULL, ob, dy, x, w, n, d, &keep);
        bwd(kind, NULL, NULL, NULL, dy, x, w, n, d, &keep);
        snprintf(what, sizeof what, "%s dx alone == full", tag);
        tk_expect_bitwise(what, ox, dx, nd);
        snprintf(what, sizeof what, "%s dw alone == full", tag);
        tk_expect_bitwise(what, ow, dw, d);
        if (has_b) {
            snprintf(what, sizeof what, "%s db alone == full", tag);
            tk_expect_bitwise(what, ob, db, d);
        }
        free(ox), free(ow), free(ob);
    }

    /* release returns the pool to its baseline */
    op_state_release(&keep);
    CHECK(pool_live(p) == s0.live && keep.data == NULL);
    CHECKF(pool_destroy(p) == 0, "%s: pool leaks", tag);

    free(x), free(w), free(b), free(dy), free(y), free(y2), free(dx), free(dw), free(db);
    free(c.x), free(c.w), free(c.b), free(c.lw), free(c.y), free(gx), free(gw), free(gb);
    free(ax), free(aw), free(ab), free(ex), free(ew), free(eb);
}

/* A capacity-limited device pool that cannot hold the kept state: ST_ERR_OOM, nothing live changes. */
static void test_oom(norm_kind kind)
{
    const int64_t n = 40, d = 24;
    const char *name = kind == LAYERNORM ? "layernorm" : "rmsnorm";
    float *x = fbuf(n * d), *y = fbuf(n * d), *w = fbuf(d);
    tk_fill(x, n * d, 5, -1, 1);
    tk_fill(w, d, 6, -1, 1);
    pool *p = pool_create(POOL_DEVICE, kept_bytes(kind, n) + 100);
    void *hog = NULL;
    CHECK(pool_alloc(p, 200, MEM_WEIGHTS, "hog", &hog) == ST_OK);
    const size_t live = pool_live(p);
    op_state keep = {0};
    const st_status s = fwd(kind, p, y, x, w, NULL, n, d, 1e-6f, &keep);
    CHECKF(s == ST_ERR_OOM, "%s forward into a full pool returned %d (%s)", name, (int)s, st_error());
    CHECK(pool_live(p) == live && keep.data == NULL);
    op_state_release(&keep); /* harmless on a failed state */
    /* with room it works, and the state fits exactly */
    pool_free(p, hog);
    CHECK(fwd(kind, p, y, x, w, NULL, n, d, 1e-6f, &keep) == ST_OK);
    CHECK(pool_live(p) == kept_bytes(kind, n));
    op_state_release(&keep);
    CHECK(pool_live(p) == 0);
    CHECK(pool_destroy(p) == 0);
    printf("ok   %s OOM: %s\n", name, st_error());
    free(x), free(y), free(w);
}

/* forward and every gradient at 1 and 2 threads: the same bits */
static void test_threads(norm_kind kind, int64_t n, int64_t d)
{
    char what[96];
    const char *name = kind == LAYERNORM ? "layernorm" : "rmsnorm";
    const int64_t nd = n * d;
    pool *p = pool_create(POOL_DEVICE, 0);
    float *x = fbuf(nd), *w = fbuf(d), *b = fbuf(d), *dy = fbuf(nd);
    tk_fill(x, nd, 91, -2, 3);
    tk_fill(w, d, 92, 0.5f, 1.5f);
    tk_fill(b, d, 93, -1, 1);
    tk_fill(dy, nd, 94, -1, 1);
    float *y[2], *dx[2], *dw[2], *db[2];
    const int saved = ops_threads();
    for (int t = 0; t < 2; t++) {
        ops_set_threads(t + 1);
        y[t] = fbuf(nd), dx[t] = fbuf(nd), dw[t] = fbuf(d), db[t] = fbuf(d);
        op_state keep = {0};
        CHECK(fwd(kind, p, y[t], x, w, b, n, d, 1e-6f, &keep) == ST_OK);
        bwd(kind, dx[t], dw[t], db[t], dy, x, w, n, d, &keep);
        op_state_release(&keep);
    }
    ops_set_threads(saved);
    snprintf(what, sizeof what, "%s %lldx%lld y 1 vs 2 threads", name, (long long)n, (long long)d);
    tk_expect_bitwise(what, y[1], y[0], nd);
    snprintf(what, sizeof what, "%s %lldx%lld dx 1 vs 2 threads", name, (long long)n, (long long)d);
    tk_expect_bitwise(what, dx[1], dx[0], nd);
    snprintf(what, sizeof what, "%s %lldx%lld dw 1 vs 2 threads", name, (long long)n, (long long)d);
    tk_expect_bitwise(what, dw[1], dw[0], d);
    if (kind == LAYERNORM) {
        snprintf(what, sizeof what, "%s %lldx%lld db 1 vs 2 threads", name, (long long)n, (long long)d);
        tk_expect_bitwise(what, db[1], db[0], d);
    }
    CHECK(pool_destroy(p) == 0);
    for (int t = 0; t < 2; t++) free(y[t]), free(dx[t]), free(dw[t]), free(db[t]);
    free(x), free(w), free(b), free(dy);
}

/* The zero-centred RMSNorm: y = x r (1 + w) against the double reference (its weight 1 + w there), dx and dw by
 * central differences, accumulated into non-zero buffers; its forward's bits are rmsnorm's with the weight 1 + w
 * given; the kept state is rmsnorm's and the workspace (d floats) is gone after each call. */
static void test_rmsnorm_zc(int64_t n, int64_t d, uint64_t seed)
{
    const int64_t nd = n * d;
    const float eps = 1e-6f;
    float *x = fbuf(nd), *w = fbuf(d), *w1 = fbuf(d), *dy = fbuf(nd), *y = fbuf(nd), *y1 = fbuf(nd);
    float *dx = fbuf(nd), *dw = fbuf(d);
    tk_fill(x, nd, seed, -2, 2);
    tk_fill(w, d, seed + 1, -0.5f, 0.5f);
    tk_fill(dy, nd, seed + 2, -1, 1);
    for (int64_t j = 0; j < d; j++) w1[j] = w[j] + 1.0f;
    norm_ctx c = {.kind = RMSNORM, .x = dbuf(nd), .w = dbuf(d), .lw = dbuf(nd), .y = dbuf(nd), .n = n, .d = d,
                  .eps = eps};
    tk_to_double(c.x, x, nd);
    for (int64_t j = 0; j < d; j++) c.w[j] = (double)w[j] + 1.0; /* the reference's weight is 1 + w */
    tk_to_double(c.lw, dy, nd);
    pool *p = pool_create(POOL_DEVICE, 0);
    op_state keep = {0};
    CHECK(rmsnorm_zc_forward(p, y, x, w, n, d, eps, &keep) == ST_OK);
    CHECK(pool_live(p) == rmsnorm_kept_bytes(n) && pool_peak(p) == rmsnorm_kept_bytes(n) + (size_t)d * sizeof(float));
    norm_ref(&c);
    tk_expect_close("rmsnorm_zc fwd", y, c.y, nd, 1e-5);
    CHECK(rmsnorm_forward(p, y1, x, w1, n, d, eps, NULL) == ST_OK);
    tk_expect_bitwise("rmsnorm_zc fwd = rmsnorm with 1 + w", y, y1, nd);
    for (int64_t i = 0; i < nd; i++) dx[i] = 0.5f;
    for (int64_t j = 0; j < d; j++) dw[j] = 0.5f;
    CHECK(rmsnorm_zc_backward(p, dx, dw, dy, x, w, n, d, &keep) == ST_OK && pool_live(p) == rmsnorm_kept_bytes(n));
    for (int64_t i = 0; i < nd; i++) dx[i] -= 0.5f;
    for (int64_t j = 0; j < d; j++) dw[j] -= 0.5f;
    double *gx = dbuf(nd), *gw = dbuf(d);
    tk_numeric_grad(norm_loss, &c, c.x, nd, 1e-6, gx);
    tk_expect_close("rmsnorm_zc dx vs FD", dx, gx, nd, 1e-4);
    tk_numeric_grad(norm_loss, &c, c.w, d, 1e-6, gw); /* d/dw = d/d(1 + w) */
    tk_expect_close("rmsnorm_zc dw vs FD", dw, gw, d, 1e-4);
    op_state_release(&keep);
    CHECK(pool_destroy(p) == 0);
    free(x), free(w), free(w1), free(dy), free(y), free(y1), free(dx), free(dw), free(gx), free(gw);
    free(c.x), free(c.w), free(c.lw), free(c.y);
}

/* ---- GroupNorm, channels first ---- */

typedef struct gn_ctx {
    int64_t n, c, inner, groups;
    double *x, *w, *b, *lw, *y;
} gn_ctx;

static void gn_ref(gn_ctx *g)
{
    const int64_t cg = g->c / g->groups, m = cg * g->inner;
    for (int64_t ig = 0; ig < g->n * g->groups; ig++) {
        const double *x = g->x + ig * m;
        double mu = 0, v = 0;
        for (int64_t k = 0; k < m; k++) mu += x[k];
        mu /= (double)m;
        for (int64_t k = 0; k < m; k++) v += (x[k] - mu) * (x[k] - mu);
        const double r = 1.0 / sqrt(v / (double)m + 1e-5);
        for (int64_t k = 0; k < m; k++) {
            const int64_t ch = ig % g->groups * cg + k / g->inner;
            g->y[ig * m + k] = (x[k] - mu) * r * g->w[ch] + g->b[ch];
        }
    }
}

static double gn_loss(void *ctx)
{
    gn_ctx *g = ctx;
    gn_ref(g);
    double l = 0;
    for (int64_t k = 0; k < g->n * g->c * g->inner; k++) l += g->lw[k] * g->y[k];
    return l;
}

/* against the reference and central differences (gradients added onto what was there), the kept state as stated,
 * the same bits at 1 and 2 threads, groups that do not divide the channels refused */
static void test_groupnorm(int64_t n, int64_t c, int64_t inner, int64_t groups, float xlo, float xhi, uint64_t seed)
{
    char what[128];
    const int64_t total = n * c * inner;
    float *x = fbuf(total), *w = fbuf(c), *b = fbuf(c), *dy = fbuf(total), *y = fbuf(total), *dx = fbuf(total);
    float *dw = fbuf(c), *db = fbuf(c);
    tk_fill(x, total, seed, xlo, xhi), tk_fill(w, c, seed + 1, 0.5f, 1.5f), tk_fill(b, c, seed + 2, -1, 1);
    tk_fill(dy, total, seed + 3, -1, 1);
    gn_ctx g = {n, c, inner, groups, dbuf(total), dbuf(c), dbuf(c), dbuf(total), dbuf(total)};
    tk_to_double(g.x, x, total), tk_to_double(g.w, w, c), tk_to_double(g.b, b, c), tk_to_double(g.lw, dy, total);
    pool *p = pool_create(POOL_DEVICE, 0);
    op_state keep = {0};
    CHECK(groupnorm_forward(p, y, x, w, b, n, c, inner, groups, 1e-5f, &keep) == ST_OK);
    CHECK(keep.bytes == groupnorm_kept_bytes(n, groups) && pool_live(p) == keep.bytes);
    gn_ref(&g);
    snprintf(what, sizeof what, "groupnorm n=%lld c=%lld inner=%lld groups=%lld forward", (long long)n, (long long)c,
             (long long)inner, (long long)groups);
    tk_expect_close(what, y, g.y, total, 1e-5);
    for (int64_t k = 0; k < total; k++) dx[k] = 0.25f;
    for (int64_t k = 0; k < c; k++) dw[k] = db[k] = 0.25f;
    pool_reset_peak(p);
    const size_t live = pool_live(p);
    CHECK(groupnorm_backward(p, dx, dw, db, dy, x, w, n, c, inner, groups, &keep) == ST_OK);
    CHECKF(pool_peak(p) == live + groupnorm_workspace_bytes(n, c) && pool_live(p) == live, "backward's peak %zu",
           pool_peak(p) - live);
    for (int64_t k = 0; k < total; k++) dx[k] -= 0.25f;
    for (int64_t k = 0; k < c; k++) dw[k] -= 0.25f, db[k] -= 0.25f;
    double *fd = dbuf(total);
    double *const in[3] = {g.x, g.w, g.b};
    const float *got[3] = {dx, dw, db};
    const int64_t sizes[3] = {total, c, c};
    const char *names[3] = {"dx", "dw", "db"};
    for (int k = 0; k < 3; k++) {
        tk_numeric_grad(gn_loss, &g, in[k], sizes[k], 1e-6, fd);
        snprintf(what, sizeof what, "groupnorm groups=%lld %s", (long long)groups, names[k]);
        tk_expect_close(what, got[k], fd, sizes[k], 2e-4);
    }
    float *d1[3] = {fbuf(total), fbuf(c), fbuf(c)}, *d2[3] = {fbuf(total), fbuf(c), fbuf(c)};
    const int threads = ops_threads();
    ops_set_threads(1);
    CHECK(groupnorm_backward(p, d1[0], d1[1], d1[2], dy, x, w, n, c, inner, groups, &keep) == ST_OK);
    ops_set_threads(2);
    CHECK(groupnorm_backward(p, d2[0], d2[1], d2[2], dy, x, w, n, c, inner, groups, &keep) == ST_OK);
    ops_set_threads(threads);
    tk_expect_grads_agree("groupnorm", names, sizes, d1, d2, NULL);
    op_state_release(&keep);
    CHECKF(groupnorm_forward(p, y, x, w, b, n, c, inner, c + 1, 1e-5f, NULL) == ST_ERR_INVALID &&
               strstr(st_error(), "groups dividing c"),
           "groups that do not divide the channels: %s", st_error());
    CHECK(pool_destroy(p) == 0);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(fd);
    free(g.x), free(g.w), free(g.b), free(g.lw), free(g.y);
}

/* ---- GlobalResponseNorm, channels last ---- */

typedef struct grn_ctx {
    int64_t batch, tokens, c;
    double *x, *gamma, *beta, *lw, *y, *a; /* a: scratch, one sample's norms */
} grn_ctx;

static void grn_ref(grn_ctx *g)
{
    const int64_t T = g->tokens, C = g->c;
    for (int64_t b = 0; b < g->batch; b++) {
        const double *x = g->x + b * T * C;
        double m = 0;
        for (int64_t ch = 0; ch < C; ch++) {
            double s = 0;
            for (int64_t t = 0; t < T; t++) s += x[t * C + ch] * x[t * C + ch];
            g->a[ch] = sqrt(s), m += g->a[ch];
        }
        m /= (double)C;
        for (int64_t t = 0; t < T; t++)
            for (int64_t ch = 0; ch < C; ch++) {
                const double v = x[t * C + ch];
                g->y[(b * T + t) * C + ch] = g->gamma[ch] * v * (g->a[ch] / (m + 1e-6)) + g->beta[ch] + v;
            }
    }
}

static double grn_loss(void *ctx)
{
    grn_ctx *g = ctx;
    grn_ref(g);
    double l = 0;
    for (int64_t k = 0; k < g->batch * g->tokens * g->c; k++) l += g->lw[k] * g->y[k];
    return l;
}

/* against the reference and central differences (gradients added onto what was there), the kept state and workspace
 * as stated, keep = NULL the same bits, each gradient alone the full call's bits, the same bits at 1 and 2 threads.
 * The last sample is offset by `offset`; with zero_channel, sample 0's channel 1 is all zero (a = 0 there). */
static void test_grn(int64_t batch, int64_t tokens, int64_t c, float offset, bool zero_channel, uint64_t seed)
{
    char what[128], tag[64];
    snprintf(tag, sizeof tag, "grn %lldx%lldx%lld", (long long)batch, (long long)tokens, (long long)c);
    const int64_t total = batch * tokens * c, last = (batch - 1) * tokens * c;
    float *x = fbuf(total), *gm = fbuf(c), *bt = fbuf(c), *dy = fbuf(total), *y = fbuf(total), *y2 = fbuf(total);
    float *dx = fbuf(total), *dg = fbuf(c), *db = fbuf(c);
    tk_fill(x, total, seed, -1, 1), tk_fill(gm, c, seed + 1, -1, 1), tk_fill(bt, c, seed + 2, -1, 1);
    tk_fill(dy, total, seed + 3, -1, 1);
    for (int64_t k = last; k < total; k++) x[k] += offset;
    for (int64_t t = 0; zero_channel && t < tokens; t++) x[t * c + 1] = 0.0f;
    grn_ctx g = {batch, tokens, c, dbuf(total), dbuf(c), dbuf(c), dbuf(total), dbuf(total), dbuf(c)};
    tk_to_double(g.x, x, total), tk_to_double(g.gamma, gm, c), tk_to_double(g.beta, bt, c);
    tk_to_double(g.lw, dy, total);
    pool *p = pool_create(POOL_DEVICE, 0);

    /* forward with kept state: exactly the stated bytes, as activations, nothing transient on top */
    op_state keep = {0};
    CHECK(grn_forward(p, y, x, gm, bt, batch, tokens, c, false, &keep) == ST_OK);
    CHECKF(keep.bytes == grn_kept_bytes(batch, c) && keep.pool == p && pool_live(p) == keep.bytes &&
               pool_peak(p) == keep.bytes, "%s: kept %zu bytes (live %zu, peak %zu), states %zu", tag, keep.bytes,
           pool_live(p), pool_peak(p), grn_kept_bytes(batch, c));
    grn_ref(&g);
    snprintf(what, sizeof what, "%s forward", tag);
    tk_expect_close(what, y, g.y, total, 1e-5);

    /* without kept state: the same bits, the state's bytes as workspace, freed */
    const size_t live = pool_live(p);
    pool_reset_peak(p);
    CHECK(grn_forward(p, y2, x, gm, bt, batch, tokens, c, false, NULL) == ST_OK);
    CHECKF(pool_live(p) == live && pool_peak(p) == live + grn_kept_bytes(batch, c), "%s keep=NULL: peak %zu", tag,
           pool_peak(p) - live);
    snprintf(what, sizeof what, "%s forward keep=NULL same bits", tag);
    tk_expect_bitwise(what, y2, y, total);
    /* bf16 (PyTorch's bf16 module's steps): a bf16 output, within a few bf16 roundings of float's */
    CHECK(grn_forward(p, y2, x, gm, bt, batch, tokens, c, true, NULL) == ST_OK);
    snprintf(what, sizeof what, "%s bf16 forward", tag);
    tk_expect_close(what, y2, g.y, total, 2e-2);
    for (int64_t k = 0; k < total; k++) dx[k] = y2[k];
    round_to_bf16(dx, total);
    snprintf(what, sizeof what, "%s bf16 forward is bf16", tag);
    tk_expect_bitwise(what, dx, y2, total);

    /* backward, accumulated onto 0.25, against central differences */
    for (int64_t k = 0; k < total; k++) dx[k] = 0.25f;
    for (int64_t k = 0; k < c; k++) dg[k] = db[k] = 0.25f;
    pool_reset_peak(p);
    CHECK(grn_backward(p, dx, dg, db, dy, x, gm, batch, tokens, c, &keep) == ST_OK);
    CHECKF(pool_peak(p) == live + grn_workspace_bytes(batch, c) && pool_live(p) == live, "%s backward's peak %zu",
           tag, pool_peak(p) - live);
    for (int64_t k = 0; k < total; k++) dx[k] -= 0.25f;
    for (int64_t k = 0; k < c; k++) dg[k] -= 0.25f, db[k] -= 0.25f;
    double *fd = dbuf(total);
    double *const in[3] = {g.x, g.gamma, g.beta};
    const float *got[3] = {dx, dg, db};
    const int64_t sizes[3] = {total, c, c};
    const char *names[3] = {"dx", "dgamma", "dbeta"};
    for (int k = 0; k < 3; k++) {
        tk_numeric_grad(grn_loss, &g, in[k], sizes[k], 1e-6, fd);
        snprintf(what, sizeof what, "%s %s vs FD", tag, names[k]);
        tk_expect_close(what, got[k], fd, sizes[k], 2e-4);
    }

    /* 1 and 2 threads: the same bits, forward and every gradient; each gradient alone: the full call's bits */
    float *y1 = fbuf(total), *d1[3] = {fbuf(total), fbuf(c), fbuf(c)}, *d2[3] = {fbuf(total), fbuf(c), fbuf(c)};
    float *alone[3] = {fbuf(total), fbuf(c), fbuf(c)};
    const int threads = ops_threads();
    ops_set_threads(1);
    CHECK(grn_forward(p, y1, x, gm, bt, batch, tokens, c, false, NULL) == ST_OK);
    CHECK(grn_backward(p, d1[0], d1[1], d1[2], dy, x, gm, batch, tokens, c, &keep) == ST_OK);
    ops_set_threads(2);
    CHECK(grn_forward(p, y2, x, gm, bt, batch, tokens, c, false, NULL) == ST_OK);
    CHECK(grn_backward(p, d2[0], d2[1], d2[2], dy, x, gm, batch, tokens, c, &keep) == ST_OK);
    CHECK(grn_backward(p, alone[0], NULL, NULL, dy, x, gm, batch, tokens, c, &keep) == ST_OK);
    CHECK(grn_backward(p, NULL, alone[1], NULL, dy, x, NULL, batch, tokens, c, &keep) == ST_OK); /* gamma unread */
    CHECK(grn_backward(p, NULL, NULL, alone[2], dy, x, NULL, batch, tokens, c, &keep) == ST_OK);
    CHECK(grn_backward(p, NULL, NULL, NULL, dy, x, gm, batch, tokens, c, &keep) == ST_OK);
    ops_set_threads(threads);
    snprintf(what, sizeof what, "%s y at 1 and 2 threads", tag);
    tk_expect_bitwise(what, y1, y2, total);
    tk_expect_grads_agree(tag, names, sizes, d1, d2, alone);

    op_state_release(&keep);
    CHECK(pool_live(p) == 0 && keep.data == NULL);
    CHECKF(grn_forward(p, y, x, gm, bt, batch, 0, c, false, NULL) == ST_ERR_INVALID && strstr(st_error(), "grn:"),
           "no tokens: %s", st_error());
    CHECKF(pool_destroy(p) == 0, "%s: pool leaks", tag);
    free(x), free(gm), free(bt), free(dy), free(y), free(y2), free(y1), free(dx), free(dg), free(db), free(fd);
    free(g.x), free(g.gamma), free(g.beta), free(g.lw), free(g.y), free(g.a);
}

/* On dry pools: the kept state, then the workspace, allocated as stated and nothing computed */
static void test_grn_dry(void)
{
    const int64_t batch = 2, tokens = 9, c = 24, total = batch * tokens * c;
    pool *p = pool_create_dry(POOL_DEVICE, 0);
    float *x, *g, *y;
    CHECK(pool_alloc(p, (size_t)total * 4, MEM_ACTIVATIONS, "x", (void **)&x) == ST_OK);
    CHECK(pool_alloc(p, (size_t)c * 4, MEM_WEIGHTS, "gamma", (void **)&g) == ST_OK);
    CHECK(pool_alloc(p, (size_t)total * 4, MEM_ACTIVATIONS, "y", (void **)&y) == ST_OK);
    const size_t live = pool_live(p);
    op_state keep = {0};
    CHECK(grn_forward(p, y, x, g, g, batch, tokens, c, false, NULL) == ST_OK && pool_live(p) == live);
    CHECK(pool_peak(p) == live + grn_kept_bytes(batch, c));
    CHECK(grn_forward(p, y, x, g, g, batch, tokens, c, false, &keep) == ST_OK);
    CHECK(keep.bytes == grn_kept_bytes(batch, c) && pool_live(p) == live + keep.bytes);
    pool_reset_peak(p);
    CHECK(grn_backward(p, x, g, g, y, x, g, batch, tokens, c, &keep) == ST_OK);
    CHECK(pool_peak(p) == live + keep.bytes + grn_workspace_bytes(batch, c));
    op_state_release(&keep);
    CHECK(pool_live(p) == live);
    pool_free(p, x), pool_free(p, g), pool_free(p, y);
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    for (int k = 0; k < 2; k++) {
        const norm_kind kind = k ? RMSNORM : LAYERNORM;
        test_norm(kind, true, 6, 13, -1, 1, 10 + 100 * (uint64_t)k);
        test_norm(kind, false, 6, 13, -1, 1, 20 + 100 * (uint64_t)k);
        /* a dit-s width; an offset mean checks the variance does not cancel */
        test_norm(kind, true, 8, 384, 2, 4, 30 + 100 * (uint64_t)k);
        test_norm(kind, false, 8, 384, -3, 1, 40 + 100 * (uint64_t)k);
        test_oom(kind);
        test_threads(kind, 97, 384);
        test_threads(kind, 33, 45);
    }
    test_rmsnorm_zc(5, 24, 501);
    test_rmsnorm_zc(3, 384, 502);
    test_groupnorm(2, 6, 5, 3, -1, 1, 601);
    test_groupnorm(1, 8, 9, 1, 2, 4, 602); /* one group (LayerNorm over the image), an offset mean */
    test_groupnorm(3, 4, 17, 4, -1, 1, 603); /* a group a channel (InstanceNorm), inner past the lanes */
    test_grn(2, 5, 6, 2.0f, true, 701);      /* sample 1 offset from zero, a zero channel in sample 0 */
    test_grn(1, 37, 40, 0.0f, false, 702);   /* tokens past the lanes; one channel block at 1 thread, two at 2 */
    test_grn(3, 20, 70, -1.5f, false, 703);  /* three samples, the last offset */
    test_grn(2, 3, 600, 1.0f, false, 704);   /* channels past a block's 512 */
    test_grn_dry();
    return tk_finish();
}
