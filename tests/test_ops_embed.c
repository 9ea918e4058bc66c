/* Embedding lookup, patchify/unpatchify and the fixed DiT tables, against direct implementations of the
 * formulas in ops.h and the DiT spec, with literal values where a formula could be wrong on both sides. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

#define GRAD_TOL 1e-4
#define FD_H 1e-6

static float *fbuf(int64_t n) { return calloc((size_t)n, sizeof(float)); }
static double *dbuf(int64_t n) { return calloc((size_t)n, sizeof(double)); }

static void plus(double *want, const float *base, const double *g, int64_t n)
{
    for (int64_t i = 0; i < n; i++) want[i] = base[i] + g[i];
}

static void expect_value(const char *what, float got, double want, double tol)
{
    CHECKF(fabs(got - want) <= tol, "%s: got %.9g want %.9g", what, got, want);
    if (fabs(got - want) <= tol) tk_pass();
}

/* ---- embedding ---- */

enum { ER = 6, ED = 37, EN = 9 }; /* ED spans two column blocks */
static const float eidx[EN] = {3, 0, 5, 3, 3, 1, 0, 5, 2};

typedef struct emb_ctx {
    double *table, *w;
} emb_ctx;

static double emb_loss(void *c)
{
    emb_ctx *e = c;
    double s = 0;
    for (int i = 0; i < EN; i++)
        for (int j = 0; j < ED; j++) s += e->w[i * ED + j] * e->table[(int)eidx[i] * ED + j];
    return s;
}

static void test_embedding(void)
{
    float table[ER * ED], out[EN * ED], w[EN * ED], dt[ER * ED], dt0[ER * ED];
    double td[ER * ED], wd[EN * ED], ref[EN * ED], g[ER * ED], want[ER * ED];
    tk_fill(table, ER * ED, 51, -1.0f, 1.0f);
    tk_fill(w, EN * ED, 52, -1.0f, 1.0f);
    tk_fill(dt0, ER * ED, 53, -0.5f, 0.5f);
    tk_to_double(td, table, ER * ED);
    tk_to_double(wd, w, EN * ED);

    CHECK(embedding_forward(out, table, eidx, EN, ER, ED) == ST_OK);
    for (int i = 0; i < EN; i++)
        for (int j = 0; j < ED; j++) ref[i * ED + j] = td[(int)eidx[i] * ED + j];
    tk_expect_close("embedding forward", out, ref, EN * ED, 0.0);

    emb_ctx c = {td, wd};
    tk_numeric_grad(emb_loss, &c, td, ER * ED, FD_H, g);
    memcpy(dt, dt0, sizeof dt);
    embedding_backward(dt, w, eidx, EN, ED);
    plus(want, dt0, g, ER * ED);
    tk_expect_close("embedding backward (accumulated, vs FD)", dt, want, ER * ED, GRAD_TOL);
    /* row 3 is read three times: its gradient is the sum of those three rows of dout */
    for (int j = 0; j < ED; j += 9) {
        double s = (double)dt0[3 * ED + j] + w[0 * ED + j] + w[3 * ED + j] + w[4 * ED + j];
        expect_value("embedding repeated index accumulates", dt[3 * ED + j], s, 1e-6);
    }
    /* row 4 is never read */
    tk_expect_bitwise("embedding unread row untouched", dt + 4 * ED, dt0 + 4 * ED, ED);
    embedding_backward(NULL, w, eidx, EN, ED);

    /* an out-of-range index is refused before anything is written, with a message naming it */
    const float bad_hi[3] = {1, 1234, 2}, bad_lo[2] = {0, -3}, bad_edge[1] = {ER}, bad_frac[2] = {1, 2.5f};
    float sentinel[3 * ED], o2[3 * ED];
    tk_fill(sentinel, 3 * ED, 54, 5.0f, 6.0f);
    memcpy(o2, sentinel, sizeof o2);
    CHECK(embedding_forward(o2, table, bad_hi, 3, ER, ED) == ST_ERR_INVALID);
    CHECKF(strstr(st_error(), "1234") && strstr(st_error(), "6"), "message: %s", st_error());
    tk_expect_bitwise("embedding bad index writes nothing", o2, sentinel, 3 * ED);
    CHECK(embedding_forward(o2, table, bad_lo, 2, ER, ED) == ST_ERR_INVALID);
    CHECKF(strstr(st_error(), "-3"), "message: %s", st_error());
    CHECK(embedding_forward(o2, table, bad_edge, 1, ER, ED) == ST_ERR_INVALID); /* rows itself is outside */
    CHECK(embedding_forward(o2, table, bad_frac, 2, ER, ED) == ST_ERR_INVALID); /* not a whole row */
    CHECKF(strstr(st_error(), "2.5"), "message: %s", st_error());
    const float bad_nan[1] = {NAN};
    CHECK(embedding_forward(o2, table, bad_nan, 1, ER, ED) == ST_ERR_INVALID);
    tk_expect_bitwise("embedding bad index writes nothing (2)", o2, sentinel, 3 * ED);
    CHECK(embedding_forward(o2, table, eidx, 0, ER, ED) == ST_OK); /* n = 0 is fine */
}

static void test_embedding_threads(void)
{
    const int64_t n = 4000, d = 100, rows = 11;
    int saved = ops_threads();
    float *idx = malloc((size_t)n * sizeof(float));
    float *dout = fbuf(n * d), *d1 = fbuf(rows * d), *d2 = fbuf(rows * d);
    for (int64_t i = 0; i < n; i++) idx[i] = (float)((i * 7 + i / 13) % rows);
    tk_fill(dout, n * d, 55, -1.0f, 1.0f);
    ops_set_threads(1);
    embedding_backward(d1, dout, idx, n, d);
    ops_set_threads(2);
    embedding_backward(d2, dout, idx, n, d);
    tk_expect_bitwise("embedding backward, 2 threads vs 1", d2, d1, rows * d);
    memset(d2, 0, (size_t)(rows * d) * sizeof(float));
    ops_set_threads(7);
    embedding_backward(d2, dout, idx, n, d);
    tk_expect_bitwise("embedding backward, 7 threads vs 1", d2, d1, rows * d);
    ops_set_threads(saved);
    free(idx), free(dout), free(d1), free(d2);
}

/* ---- patchify / unpatchify: direct loops over the formulas of ops.h ---- */

enum { PB = 2, PC = 3, PH = 6, PW = 4, PP = 2, GH = PH / PP, GW = PW / PP, PT = GH * GW, PF = PC * PP * PP,
       PN = PB * PC * PH * PW };

static const patch_shape PS = {PB, PC, 1, PH, PW, 1, PP, 0}, PS1 = {PB, 1, 1, PH, PW, 1, PP, 0};

static int64_t pix_at(int b, int ch, int y, int x) { return ((int64_t)(b * PC + ch) * PH + y) * PW + x; }
/* patchify: token r*GW+q, feature ch*p*p + a*p + bb  <->  pixel (ch, r*p+a, q*p+bb) */
static int64_t patch_at(int b, int r, int q, int ch, int a, int bb)
{
    return ((int64_t)b * PT + r * GW + q) * PF + ch * PP * PP + a * PP + bb;
}
/* unpatchify: feature (a*p + bb)*c + ch */
static int64_t unpatch_at(int b, int r, int q, int ch, int a, int bb)
{
    return ((int64_t)b * PT + r * GW + q) * PF + (a * PP + bb) * PC + ch;
}

#define FOR_PATCH                                                                                                      \
    for (int b = 0; b < PB; b++)                                                                                       \
        for (int r = 0; r < GH; r++)                                                                                   \
            for (int q = 0; q < GW; q++)                                                                               \
                for (int ch = 0; ch < PC; ch++)                                                                        \
                    for (int a = 0; a < PP; a++)                                                                       \
                        for (int bb = 0; bb < PP; bb++)

typedef struct patch_ctx {
    double *in, *w;
    bool unpatch;
} patch_ctx;

static double patch_loss(void *c)
{
    patch_ctx *p = c;
    double s = 0;
    FOR_PATCH
    {
        int64_t px = pix_at(b, ch, r * PP + a, q * PP + bb);
        if (p->unpatch) s += p->w[px] * p->in[unpatch_at(b, r, q, ch, a, bb)];
        else s += p->w[patch_at(b, r, q, ch, a, bb)] * p->in[px];
    }
    return s;
}

static void test_patches(void)
{
    float img[PN], tok[PN], ref[PN], back[PN], w[PN], g0[PN], gr[PN];
    double ind[PN], wd[PN], fd[PN], want[PN];
    /* distinctive values: each pixel's value spells its (b, ch, y, x) */
    for (int b = 0; b < PB; b++)
        for (int ch = 0; ch < PC; ch++)
            for (int y = 0; y < PH; y++)
                for (int x = 0; x < PW; x++) img[pix_at(b, ch, y, x)] = (float)(b * 1000 + ch * 100 + y * 10 + x);

    patchify_forward(tok, img, &PS);
    FOR_PATCH ref[patch_at(b, r, q, ch, a, bb)] = img[pix_at(b, ch, r * PP + a, q * PP + bb)];
    tk_expect_bitwise("patchify forward order", tok, ref, PN);
    /* a literal: batch 1, token (r=2, q=1) = 5, feature ch 2, a 1, bb 0 = 2*4+2 = 10 -> pixel (2, 5, 2) */
    expect_value("patchify literal", tok[(1 * PT + 5) * PF + 10], 1252.0, 0);

    memset(back, 0, sizeof back);
    patchify_backward(back, tok, &PS);
    tk_expect_bitwise("patchify round trip (backward is the inverse)", back, img, PN);

    /* tokens with distinctive values through unpatchify */
    for (int i = 0; i < PN; i++) tok[i] = (float)i;
    unpatchify_forward(back, tok, &PS, PATCH_DIT);
    FOR_PATCH ref[pix_at(b, ch, r * PP + a, q * PP + bb)] = tok[unpatch_at(b, r, q, ch, a, bb)];
    tk_expect_bitwise("unpatchify forward order", back, ref, PN);
    /* literal: pixel (b 0, ch 1, y 3, x 2): r 1, a 1, q 1, bb 0 -> token 1*2+1 = 3, feature (1*2+0)*3+1 = 7 */
    expect_value("unpatchify literal", back[pix_at(0, 1, 3, 2)], 3 * PF + 7, 0);
    float tok2[PN] = {0};
    unpatchify_backward(tok2, back, &PS, PATCH_DIT);
    tk_expect_bitwise("unpatchify round trip (backward is the inverse)", tok2, tok, PN);

    /* with one channel the two feature orders coincide: unpatchify(patchify(x)) == x */
    float one[PB * PH * PW], t1[PB * PH * PW], o1[PB * PH * PW];
    tk_fill(one, PB * PH * PW, 61, -1.0f, 1.0f);
    patchify_forward(t1, one, &PS1);
    unpatchify_forward(o1, t1, &PS1, PATCH_DIT);
    tk_expect_bitwise("unpatchify(patchify(x)) with c = 1", o1, one, PB * PH * PW);
    /* in conv order (Flux's packing) unpatchify is patchify's inverse for any c */
    float conv_back[PN];
    patchify_forward(tok, img, &PS);
    unpatchify_forward(conv_back, tok, &PS, PATCH_CONV);
    tk_expect_bitwise("unpatchify(patchify(x)) in conv order, c = 3", conv_back, img, PN);
    memset(tok2, 0, sizeof tok2);
    unpatchify_backward(tok2, img, &PS, PATCH_CONV);
    tk_expect_bitwise("unpatchify backward in conv order is patchify", tok2, tok, PN);

    /* backward vs FD, accumulating */
    tk_fill(img, PN, 62, -1.0f, 1.0f);
    tk_fill(w, PN, 63, -1.0f, 1.0f);
    tk_fill(g0, PN, 64, -0.5f, 0.5f);
    tk_to_double(ind, img, PN);
    tk_to_double(wd, w, PN);
    patch_ctx c = {ind, wd, false};
    tk_numeric_grad(patch_loss, &c, ind, PN, FD_H, fd);
    memcpy(gr, g0, sizeof gr);
    patchify_backward(gr, w, &PS);
    plus(want, g0, fd, PN);
    tk_expect_close("patchify backward (accumulated, vs FD)", gr, want, PN, GRAD_TOL);
    c.unpatch = true;
    tk_numeric_grad(patch_loss, &c, ind, PN, FD_H, fd);
    memcpy(gr, g0, sizeof gr);
    unpatchify_backward(gr, w, &PS, PATCH_DIT);
    plus(want, g0, fd, PN);
    tk_expect_close("unpatchify backward (accumulated, vs FD)", gr, want, PN, GRAD_TOL);
    patchify_backward(NULL, w, &PS);
    unpatchify_backward(NULL, w, &PS, PATCH_DIT);
}

/* A sample's rows padded past its grid's PT (HiDream's non-square latents): the grid's tokens at the sample's rows,
 * in both directions, and the padding rows neither read nor written. */
static void test_padded_patches(void)
{
    enum { ROWS = PT + 3, NT = PB * ROWS * PF };
    const patch_shape padded = {PB, PC, 1, PH, PW, 1, PP, ROWS};
    float img[PN], tok[PN], ptok[NT], dtok[NT], want[NT], back[PN], ref[PN], grid[PN];
    tk_fill(img, PN, 65, -1.0f, 1.0f);
    patchify_forward(tok, img, &PS);
    for (int i = 0; i < NT; i++) ptok[i] = 7.0f; /* the padding's sentinel */
    patchify_forward(ptok, img, &padded);
    bool rows = true, pad = true;
    for (int b = 0; b < PB; b++) {
        rows &= !memcmp(ptok + b * ROWS * PF, tok + b * PT * PF, PT * PF * sizeof(float));
        for (int i = PT * PF; i < ROWS * PF; i++) pad &= ptok[b * ROWS * PF + i] == 7.0f;
    }
    CHECKF(rows && pad, "patchify with %d rows a sample: the grid's tokens at each sample's rows, padding untouched",
           ROWS);
    for (int order = 0; order < 2; order++) {
        unpatchify_forward(ref, tok, &PS, (patch_order)order);
        unpatchify_forward(back, ptok, &padded, (patch_order)order);
        tk_expect_bitwise("unpatchify reads the grid's rows of a padded sample", back, ref, PN);
        for (int i = 0; i < NT; i++) dtok[i] = want[i] = 7.0f;
        for (int i = 0; i < PN; i++) grid[i] = 7.0f;
        unpatchify_backward(dtok, img, &padded, (patch_order)order);
        unpatchify_backward(grid, img, &PS, (patch_order)order);
        for (int b = 0; b < PB; b++) memcpy(want + b * ROWS * PF, grid + b * PT * PF, PT * PF * sizeof(float));
        tk_expect_bitwise("unpatchify backward accumulates into the grid's rows alone", dtok, want, NT);
    }
    memset(back, 0, sizeof back);
    memset(ref, 0, sizeof ref);
    patchify_backward(back, ptok, &padded);
    patchify_backward(ref, tok, &PS);
    tk_expect_bitwise("patchify backward reads the grid's rows of a padded sample", back, ref, PN);
}

/* Video: (B, C, F, H, W) with a temporal patch, against the formulas of ops.h written out: token
 * (u*gh + r)*gw + q, conv feature ((ch*pt + z)*p + a)*p + bb, DiT feature ((z*p + a)*p + bb)*c + ch. */
static void test_video_patches(void)
{
    enum { B = 2, C = 3, F = 4, H = 4, W = 6, Z = 2, P = 2, N = B * C * F * H * W };
    const patch_shape s = {B, C, F, H, W, Z, P, 0};
    const int64_t gh = H / P, gw = W / P, T = (F / Z) * gh * gw, Fe = C * Z * P * P;
    float lat[N], tok[N], ref[N], back[N];
    for (int i = 0; i < N; i++) lat[i] = (float)i;
    patchify_forward(tok, lat, &s);
    for (int b = 0; b < B; b++)
        for (int ch = 0; ch < C; ch++)
            for (int fr = 0; fr < F; fr++)
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++) {
                        const int64_t t = (fr / Z * gh + y / P) * gw + x / P;
                        const int64_t px = (((int64_t)(b * C + ch) * F + fr) * H + y) * W + x;
                        ref[(b * T + t) * Fe + ((ch * Z + fr % Z) * P + y % P) * P + x % P] = lat[px];
                        back[(b * T + t) * Fe + (((fr % Z) * P + y % P) * P + x % P) * C + ch] = lat[px];
                    }
    tk_expect_bitwise("video patchify forward order (conv: ch, z, a, b)", tok, ref, N);
    /* a literal: b 1, ch 2, frame 3, y 1, x 4: token (1*2 + 0)*3 + 2 = 8, feature ((2*2 + 1)*2 + 1)*2 + 0 = 22 */
    expect_value("video patchify literal", tok[(1 * T + 8) * Fe + 22], (((1 * C + 2) * F + 3) * H + 1) * W + 4, 0);
    float out[N];
    unpatchify_forward(out, back, &s, PATCH_DIT);
    tk_expect_bitwise("video unpatchify in DiT order (z, a, b, ch)", out, lat, N);
    unpatchify_forward(out, tok, &s, PATCH_CONV);
    tk_expect_bitwise("video unpatchify(patchify(x)) in conv order", out, lat, N);
    memset(out, 0, sizeof out);
    patchify_backward(out, tok, &s);
    tk_expect_bitwise("video patchify backward is its inverse", out, lat, N);
    memset(back, 0, sizeof back);
    unpatchify_backward(back, lat, &s, PATCH_CONV);
    tk_expect_bitwise("video unpatchify backward in conv order is patchify", back, tok, N);
}

/* ---- fixed tables ---- */

static void pos_ref(double *t, int64_t rows, int64_t cols, int64_t d)
{
    int64_t e = d / 2, half = e / 2;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
            double *row = t + (r * cols + q) * d;
            for (int64_t j = 0; j < half; j++) {
                double om = 1.0 / pow(10000.0, (double)j / (double)half);
                row[j] = sin((double)q * om);
                row[half + j] = cos((double)q * om);
                row[e + j] = sin((double)r * om);
                row[e + half + j] = cos((double)r * om);
            }
        }
}

static void test_pos_embed(void)
{
    /* small: grid 4, d 16 (E 8, w_1 = 10000^(-1/4) = 0.1) */
    float t[16 * 16];
    double ref[16 * 16];
    pos_embed_2d(t, 4, 4, 16);
    pos_ref(ref, 4, 4, 16);
    tk_expect_close("pos_embed_2d grid 4 d 16 vs formula", t, ref, 16 * 16, 2e-7);
    const float *k1 = t + 1 * 16; /* (r 0, q 1) */
    expect_value("pos (0,1) ch 0 = sin(1)", k1[0], 0.8414709848078965, 1e-7);
    expect_value("pos (0,1) ch 1 = sin(0.1)", k1[1], 0.09983341664682815, 1e-7);
    expect_value("pos (0,1) ch E/2 = cos(1)", k1[4], 0.5403023058681398, 1e-7);
    expect_value("pos (0,1) ch E/2+1 = cos(0.1)", k1[5], 0.9950041652780258, 1e-7);
    expect_value("pos (0,1) ch E = sin(0)", k1[8], 0.0, 0);
    expect_value("pos (0,1) ch E+E/2 = cos(0)", k1[12], 1.0, 0);
    const float *k8 = t + 8 * 16; /* (r 2, q 0) */
    expect_value("pos (2,0) ch 0 = sin(0)", k8[0], 0.0, 0);
    expect_value("pos (2,0) ch E = sin(2)", k8[8], 0.9092974268256817, 1e-7);

    /* dit-s2 size: grid 16, d 384 */
    const int64_t g = 16, d = 384;
    float *tb = fbuf(g * g * d);
    double *rb = dbuf(g * g * d);
    pos_embed_2d(tb, g, g, d);
    pos_ref(rb, g, g, d);
    tk_expect_close("pos_embed_2d grid 16 d 384 vs formula", tb, rb, g * g * d, 2e-7);
    free(tb), free(rb);

    /* a 3 x 5 grid: the column in the first half, the row in the second, row-major */
    float w[15 * 8];
    double rw[15 * 8];
    pos_embed_2d(w, 3, 5, 8);
    pos_ref(rw, 3, 5, 8);
    tk_expect_close("pos_embed_2d grid 3 x 5 d 8 vs formula", w, rw, 15 * 8, 2e-7);
    expect_value("pos (1,4) ch 0 = sin(4)", w[9 * 8], -0.7568024953079282, 1e-7);
    expect_value("pos (1,4) ch E = sin(1)", w[9 * 8 + 4], 0.8414709848078965, 1e-7);
}

static void test_timestep(void)
{
    enum { TN = 5, DIM = 256, H = DIM / 2 };
    const float ts[TN] = {0.0f, 1.0f, 2.5f, 500.0f, 999.0f};
    float *e = fbuf(TN * DIM);
    double *ref = dbuf(TN * DIM);
    timestep_embedding(e, ts, TN, DIM, 10000.0);
    for (int i = 0; i < TN; i++)
        for (int j = 0; j < H; j++) {
            double f = exp(-log(10000.0) * j / H);
            ref[i * DIM + j] = cos(ts[i] * f);
            ref[i * DIM + H + j] = sin(ts[i] * f);
        }
    tk_expect_close("timestep_embedding vs formula", e, ref, TN * DIM, 2e-7);
    int zero_ok = 1;
    for (int j = 0; j < H; j++) zero_ok &= e[j] == 1.0f && e[H + j] == 0.0f;
    CHECKF(zero_ok, "t = 0 must give cos 1, sin 0");
    if (zero_ok) tk_pass();
    const float *e1 = e + DIM; /* t = 1 */
    expect_value("t=1 j=0 cos(1)", e1[0], 0.5403023058681398, 1e-7);
    expect_value("t=1 j=0 sin(1)", e1[H], 0.8414709848078965, 1e-7);
    /* f_1 = exp(-ln(10000)/128) = 0.9305720409296989 */
    expect_value("t=1 j=1 cos(f_1)", e1[1], 0.5973753250812079, 1e-7);
    expect_value("t=1 j=1 sin(f_1)", e1[H + 1], 0.8019617952147852, 1e-7);
    /* another max_period: f_1 = 100^(-1/2) with dim 4 */
    float e4[4];
    const float t1 = 1.0f;
    timestep_embedding(e4, &t1, 1, 4, 100.0);
    expect_value("dim 4, max_period 100: cos(0.1)", e4[1], 0.9950041652780258, 1e-7);
    expect_value("dim 4, max_period 100: sin(0.1)", e4[3], 0.09983341664682815, 1e-7);
    free(e), free(ref);
}

/* Flux.2's ids for 3 text tokens and a 2 x 2 grid, literally: (t, h, w, l), the text on the last axis. */
static void test_position_ids_flux2(void)
{
    float ids[7 * 4];
    const float want[7 * 4] = {0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 0};
    for (int i = 0; i < 7 * 4; i++) ids[i] = 7.0f;
    position_ids_flux2(ids, 3, 2, 2);
    tk_expect_bitwise("Flux.2 position ids of [3 text; 2 x 2 grid]", ids, want, 7 * 4);
}

/* Flux's ids for 2 text tokens and a 2 x 3 grid, literally. */
static void test_position_ids(void)
{
    float ids[8 * 3];
    const float want[8 * 3] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 1, 0, 0, 1, 1, 0, 1, 2};
    for (int i = 0; i < 8 * 3; i++) ids[i] = 7.0f;
    position_ids_grid(ids, 2, 1, 2, 3);
    tk_expect_bitwise("position ids of [text; 2 x 3 grid]", ids, want, 8 * 3);
    /* HunyuanVideo's: 1 text token, 2 frames of a 1 x 2 grid */
    float v[5 * 3];
    const float vw[5 * 3] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1};
    position_ids_grid(v, 1, 2, 1, 2);
    tk_expect_bitwise("position ids of [text; 2 frames x 1 x 2 grid]", v, vw, 5 * 3);

    /* QwenEmbedRope's (scale_rope): rows cat(neg[-(h - h//2):], pos[:h//2]) = -2 .. 1 of 4, columns -2 .. 0 of 3,
     * text after max(4 // 2, 3 // 2) = 2 */
    float c[(2 + 12) * 3];
    const float cw[(2 + 12) * 3] = {2, 2, 2, 3, 3, 3, 0, -2, -2, 0, -2, -1, 0, -2, 0, 0, -1, -2, 0, -1, -1,
                                    0, -1, 0, 0, 0, -2, 0, 0, -1, 0, 0, 0, 0, 1, -2, 0, 1, -1, 0, 1, 0};
    for (int i = 0; i < (2 + 12) * 3; i++) c[i] = 7.0f;
    position_ids_centred(c, 2, 4, 3);
    tk_expect_bitwise("centred position ids of [text; 4 x 3 grid]", c, cw, (2 + 12) * 3);
    /* an odd edge puts the extra row on the negative side (-2 .. 0), and the text after the larger half-edge */
    float o[(1 + 3) * 3];
    const float ow[(1 + 3) * 3] = {1, 1, 1, 0, -2, -1, 0, -1, -1, 0, 0, -1};
    position_ids_centred(o, 1, 3, 1);
    tk_expect_bitwise("centred position ids of [text; 3 x 1 grid]", o, ow, (1 + 3) * 3);
    /* LongCat-Image's: the text on the diagonal, the image on modality 1 from the pipeline's 512 */
    const float lc[8 * 3] = {0, 0, 0, 0, 1, 1, 1, 512, 512, 1, 512, 513, 1, 512, 514, 1, 513, 512, 1, 513, 513, 1, 513, 514};
    for (int i = 0; i < 8 * 3; i++) ids[i] = 7.0f;
    position_ids_longcat(ids, 2, 2, 3, 512);
    tk_expect_bitwise("LongCat's position ids of [text; 2 x 3 grid]", ids, lc, 8 * 3);
}

int main(void)
{
    test_embedding();
    test_embedding_threads();
    test_patches();
    test_video_patches();
    test_padded_patches();
    test_pos_embed();
    test_timestep();
    test_position_ids();
    test_position_ids_flux2();
    return tk_finish();
}
