/* The mixture-of-experts routing ops against a double-precision reference of HiDream's MOEFeedForwardSwiGLU
 * training path (softmax gate, top-k unrenormalised, each expert on its tokens, the weighted sum), the experts
 * here plain linears (their GEMMs are the caller's): forward values, the routing itself, backward of x, the gate
 * and the experts by central differences, and a rerun's state bitwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

enum { N = 7, D = 5, E = 4, K = 2 };

typedef struct {
    double x[N * D], wg[E * D], we[E * D * D], lw[N * D], y[N * D];
    int chosen[N * K];
} ref_ctx;

/* y_t = sum over t's top-k experts e (largest score first) of s_e (x_t W_e^T), s = softmax(x_t Wg^T) */
static double ref_loss(void *ctx)
{
    ref_ctx *c = ctx;
    for (int t = 0; t < N; t++) {
        double s[E], mx = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) {
            s[e] = 0;
            for (int j = 0; j < D; j++) s[e] += c->x[t * D + j] * c->wg[e * D + j];
            mx = s[e] > mx ? s[e] : mx;
        }
        for (int e = 0; e < E; e++) sum += s[e] = exp(s[e] - mx);
        for (int e = 0; e < E; e++) s[e] /= sum;
        bool taken[E] = {0};
        for (int j = 0; j < D; j++) c->y[t * D + j] = 0;
        for (int q = 0; q < K; q++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || s[e] > s[best])) best = e;
            taken[best] = true;
            c->chosen[t * K + q] = best;
            for (int o = 0; o < D; o++) {
                double v = 0;
                for (int j = 0; j < D; j++) v += c->x[t * D + j] * c->we[(best * D + o) * D + j];
                c->y[t * D + o] += s[best] * v;
            }
        }
    }
    double l = 0;
    for (int i = 0; i < N * D; i++) l += c->lw[i] * c->y[i];
    return l;
}

/* The ops' forward: route, dispatch, each expert's linear over its rows, combine. */
static void moe_run(moe_route *r, float *y, float *xr, float *yr, const float *x, const float *wg, const float *we)
{
    moe_route_forward(r, x, wg, D);
    moe_dispatch_forward(xr, x, r, D);
    for (int e = 0; e < E; e++)
        linear_forward(yr + r->start[e] * D, xr + r->start[e] * D, we + e * D * D, NULL, r->start[e + 1] - r->start[e],
                       D, D);
    moe_combine_forward(y, yr, r, D);
}

int main(void)
{
    pool *p = pool_create(POOL_HOST, 1 << 20);
    float x[N * D], wg[E * D], we[E * D * D], dy[N * D], y[N * D], xr[N * K * D], yr[N * K * D];
    tk_fill(x, N * D, 1, -1, 1);
    tk_fill(wg, E * D, 2, -2, 2);
    tk_fill(we, E * D * D, 3, -1, 1);
    tk_fill(dy, N * D, 4, -1, 1);
    ref_ctx *c = calloc(1, sizeof *c);
    tk_to_double(c->x, x, N * D);
    tk_to_double(c->wg, wg, E * D);
    tk_to_double(c->we, we, E * D * D);
    tk_to_double(c->lw, dy, N * D);

    const size_t bytes = moe_route_bytes(N, E, K);
    void *b1 = malloc(bytes), *b2 = malloc(bytes);
    moe_route r, r2;
    moe_route_view(&r, b1, N, E, K);
    moe_route_view(&r2, b2, N, E, K);
    moe_run(&r, y, xr, yr, x, wg, we);
    ref_loss(c);
    tk_expect_close("moe forward", y, c->y, N * D, 1e-5);
    bool same = true;
    for (int f = 0; f < N * K; f++) same &= r.expert[f] == c->chosen[f];
    CHECKF(same, "moe routing: the top-k experts differ from the reference's");
    CHECKF(r.start[0] == 0 && r.start[E] == N * K, "moe routing: rows %lld .. %lld, want 0 .. %d",
           (long long)r.start[0], (long long)r.start[E], N * K);
    for (int f = 0; f < N * K; f++) /* row f's token and expert agree with the grouping */
        CHECKF(r.src[r.row[f]] == f / K && r.row[f] >= r.start[r.expert[f]] && r.row[f] < r.start[r.expert[f] + 1],
               "moe routing: choice %d at row %d", f, r.row[f]);

    /* a rerun (a checkpointed block's recompute) makes the state and output bitwise again */
    float y2[N * D];
    moe_run(&r2, y2, xr, yr, x, wg, we);
    tk_expect_bitwise("moe rerun output", y2, y, N * D);
    CHECK(memcmp(b1, b2, bytes) == 0);

    /* backward: combine, each expert's linear, dispatch, and the gate */
    float dx[N * D] = {0}, dwg[E * D] = {0}, dwe[E * D * D] = {0}, dw[N * K] = {0}, dyr[N * K * D] = {0},
          dxr[N * K * D] = {0};
    moe_combine_backward(dyr, dw, dy, yr, &r, D);
    for (int e = 0; e < E; e++) {
        const int64_t a = r.start[e], n = r.start[e + 1] - a;
        linear_backward(dxr + a * D, dwe + e * D * D, NULL, dyr + a * D, xr + a * D, we + e * D * D, n, D, D);
    }
    moe_dispatch_backward(dx, dxr, &r, D);
    CHECK(moe_route_backward(p, dx, dwg, dw, &r, x, wg, D) == ST_OK);
    double gx[N * D], gwg[E * D], gwe[E * D * D];
    tk_numeric_grad(ref_loss, c, c->x, N * D, 1e-6, gx);
    tk_numeric_grad(ref_loss, c, c->wg, E * D, 1e-6, gwg);
    tk_numeric_grad(ref_loss, c, c->we, E * D * D, 1e-6, gwe);
    tk_expect_close("moe dx vs FD", dx, gx, N * D, 1e-4);
    tk_expect_close("moe dWgate vs FD", dwg, gwg, E * D, 1e-4);
    tk_expect_close("moe dWexperts vs FD", dwe, gwe, E * D * D, 1e-4);
    double nz = 0;
    for (int i = 0; i < E * D; i++) nz += fabs(gwg[i]);
    CHECKF(nz > 1e-3, "the gate's gradient is non-zero (%g)", nz); /* the weights' path is exercised */

    /* mixed_precision bf16: the scores, the weights and the combined output are bf16 values, near float's */
    moe_route_view(&r2, b2, N, E, K);
    r2.bf16 = true;
    moe_run(&r2, y2, xr, yr, x, wg, we);
    float held[N * D]; /* D > E: it holds the scores too */
    memcpy(held, r2.scores, (size_t)(N * E) * sizeof(float));
    round_to_bf16(held, N * E);
    tk_expect_bitwise("moe bf16 scores are bf16", held, r2.scores, N * E);
    memcpy(held, y2, sizeof y2);
    round_to_bf16(held, N * D);
    tk_expect_bitwise("moe bf16 output is bf16", held, y2, N * D);
    tk_expect_close("moe bf16 output near the reference", y2, c->y, N * D, 3e-2);

    free(b1), free(b2), free(c);
    CHECKF(pool_destroy(p) == 0, "moe: the pool leaked");
    return tk_finish();
}
