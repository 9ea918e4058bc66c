/* Embedding lookup, patch (un)flattening and the fixed DiT tables. Patch ops are permutations, so their
 * backward is the inverse gather and touches every element once: no reduction, no thread dependence. */
#include <math.h>
#include <string.h>

#include "internal.h"

#define PAR_MIN ((int64_t)1 << 15)
/* Column width of one embedding_backward item. */
#define EMB_COLS 32

static st_status embedding_forward_run(float *out, const float *table, const float *idx, int64_t n, int64_t rows, int64_t d)
{
    /* validate everything first so that a bad index leaves out untouched */
    for (int64_t i = 0; i < n; i++)
        if (!(idx[i] >= 0 && idx[i] < (float)rows && idx[i] == floorf(idx[i])))
            return st_fail(ST_ERR_INVALID, "embedding index %g (position %lld) is not a row of the table of %lld rows",
                           (double)idx[i], (long long)i, (long long)rows);
#pragma omp parallel for schedule(static) if (n * d >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) memcpy(out + i * d, table + (int64_t)idx[i] * d, (size_t)d * sizeof(float));
    return ST_OK;
}

/* skip: a row that gets no gradient (torch's padding_idx), or -1 */
static void embedding_backward_run(float *dtable, const float *dout, const float *idx, int64_t n, int64_t d,
                                   int64_t skip)
{
    if (!dtable) return;
    /* Repeated indices collide on rows, so split by columns: each element is summed by one thread with
     * the positions in order. */
    int64_t nblk = (d + EMB_COLS - 1) / EMB_COLS;
#pragma omp parallel for schedule(static) if (n * d >= PAR_MIN)
    for (int64_t cb = 0; cb < nblk; cb++) {
        int64_t j0 = cb * EMB_COLS, m = d - j0 < EMB_COLS ? d - j0 : EMB_COLS;
        for (int64_t i = 0; i < n; i++) {
            if ((int64_t)idx[i] == skip) continue;
            float *restrict o = dtable + (int64_t)idx[i] * d + j0;
            const float *restrict g = dout + i * d + j0;
            for (int64_t j = 0; j < m; j++) o[j] += g[j];
        }
    }
}

/* One routine per direction pair keeps the index formulas in one place. Latent pixel (ch, u*pt+z, r*p+a, q*p+bb)
 * pairs with patch token (u*gh + r)*gw + q of its sample's rows; `to_tokens` says which side is written, `acc`
 * whether it is += . */
static void patch_tokens_move(float *tokens, float *latent, const float *src_tokens, const float *src_latent,
                              const patch_shape *s, bool dit_order, bool to_tokens, bool acc)
{
    const int64_t c = s->channels, F = s->frames, h = s->height, w = s->width, pt = s->patch_t, p = s->patch;
    const int64_t gf = F / pt, gh = h / p, gw = w / p, f = c * pt * p * p, T = gf * gh * gw;
    const int64_t rows = s->tokens ? s->tokens : T; /* a sample's token rows */
#pragma omp parallel for collapse(2) schedule(static) if (s->batch * c * F * h * w >= PAR_MIN)
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t u = t / (gh * gw), r = t / gw % gh, q = t % gw, tok = (b * rows + t) * f;
            for (int64_t ch = 0; ch < c; ch++)
                for (int64_t z = 0; z < pt; z++)
                    for (int64_t a = 0; a < p; a++) {
                        const int64_t pix = (((b * c + ch) * F + u * pt + z) * h + r * p + a) * w + q * p;
                        /* feature of (ch, z, a, bb): conv order ((ch*pt + z)*p + a)*p + bb, or DiT's
                         * ((z*p + a)*p + bb)*c + ch */
                        const int64_t fbase = dit_order ? ((z * p + a) * p) * c + ch : ((ch * pt + z) * p + a) * p;
                        const int64_t fstep = dit_order ? c : 1;
                        if (to_tokens) {
                            float *o = tokens + tok + fbase;
                            const float *x = src_latent + pix;
                            if (acc)
                                for (int64_t bb = 0; bb < p; bb++) o[bb * fstep] += x[bb];
                            else
                                for (int64_t bb = 0; bb < p; bb++) o[bb * fstep] = x[bb];
                        } else {
                            float *o = latent + pix;
                            const float *x = src_tokens + tok + fbase;
                            if (acc)
                                for (int64_t bb = 0; bb < p; bb++) o[bb] += x[bb * fstep];
                            else
                                for (int64_t bb = 0; bb < p; bb++) o[bb] = x[bb * fstep];
                        }
                    }
        }
}

/* 1D sine-cosine embedding of position u into e channels: [sin(u w_j), cos(u w_j)], w_j = 10000^(-j/(e/2)). */
static void sincos_1d(float *out, double u, int64_t e)
{
    int64_t half = e / 2;
    for (int64_t j = 0; j < half; j++) {
        double ang = u * pow(10000.0, -(double)j / (double)half);
        out[j] = (float)sin(ang);
        out[half + j] = (float)cos(ang);
    }
}

void pos_embed_2d(float *table, int64_t rows, int64_t cols, int64_t d)
{
    if (op_dry(table)) return;
    /* column q in the first half, row r in the second, as DiT's meshgrid(w, h) order gives */
#pragma omp parallel for schedule(static) if (rows * cols * d >= PAR_MIN)
    for (int64_t k = 0; k < rows * cols; k++) {
        float *row = table + k * d;
        sincos_1d(row, (double)(k % cols), d / 2);
        sincos_1d(row + d / 2, (double)(k / cols), d / 2);
    }
}

void timestep_embedding(float *emb, const float *t, int64_t n, int64_t dim, double max_period)
{
    if (op_dry(emb)) return;
    int64_t half = dim / 2;
    double lmp = log(max_period);
#pragma omp parallel for schedule(static) if (n * dim >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float *row = emb + i * dim;
        for (int64_t j = 0; j < half; j++) {
            double arg = (double)t[i] * exp(-lmp * (double)j / (double)half);
            row[j] = (float)cos(arg);
            row[half + j] = (float)sin(arg);
        }
        if (dim & 1) row[dim - 1] = 0.0f; /* DiT's zero pad for an odd dim */
    }
}

st_status embedding_forward(float *out, const float *table, const float *idx, int64_t n, int64_t rows, int64_t d)
{
    const double t0 = prof_now();
    const st_status r = op_dry(out) ? ST_OK : embedding_forward_run(out, table, idx, n, rows, d);
    prof_add(OP_POINTWISE, t0, 0, 8.0 * n * d);
    return r;
}

void embedding_backward(float *dtable, const float *dout, const float *idx, int64_t n, int64_t d)
{
    OP_TIMED(dout, embedding_backward_run(dtable, dout, idx, n, d, -1), OP_POINTWISE, 0, 12.0 * n * d);
}

void embedding_backward_padded(float *dtable, const float *dout, const float *idx, int64_t n, int64_t d,
                               int64_t padding_idx)
{
    OP_TIMED(dout, embedding_backward_run(dtable, dout, idx, n, d, padding_idx), OP_POINTWISE, 0, 12.0 * n * d);
}

static double patch_bytes(const patch_shape *s)
{
    return 8.0 * (double)s->batch * (double)(s->channels * s->frames * s->height * s->width);
}

void patchify_forward(float *tokens, const float *latent, const patch_shape *s)
{
    const double t0 = prof_now();
    if (!op_dry(tokens)) patch_tokens_move(tokens, NULL, NULL, latent, s, false, true, false);
    prof_add(OP_POINTWISE, t0, 0, patch_bytes(s));
}

void patchify_backward(float *dlatent, const float *dtokens, const patch_shape *s)
{
    const double t0 = prof_now();
    if (dlatent && !op_dry(dtokens)) patch_tokens_move(NULL, dlatent, dtokens, NULL, s, false, false, true);
    prof_add(OP_POINTWISE, t0, 0, patch_bytes(s));
}

void unpatchify_forward(float *latent, const float *tokens, const patch_shape *s, patch_order order)
{
    const double t0 = prof_now();
    if (!op_dry(latent)) patch_tokens_move(NULL, latent, tokens, NULL, s, order == PATCH_DIT, false, false);
    prof_add(OP_POINTWISE, t0, 0, patch_bytes(s));
}

void unpatchify_backward(float *dtokens, const float *dlatent, const patch_shape *s, patch_order order)
{
    const double t0 = prof_now();
    if (dtokens && !op_dry(dlatent)) patch_tokens_move(dtokens, NULL, NULL, dlatent, s, order == PATCH_DIT, true, true);
    prof_add(OP_POINTWISE, t0, 0, patch_bytes(s));
}

void position_ids_flux2(float *ids, int64_t text, int64_t rows, int64_t cols)
{
    if (op_dry(ids)) return;
    for (int64_t k = 0; k < text; k++) ids[k * 4] = ids[k * 4 + 1] = ids[k * 4 + 2] = 0.0f, ids[k * 4 + 3] = (float)k;
    float *img = ids + text * 4;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
            float *id = img + (r * cols + q) * 4;
            id[0] = 0.0f, id[1] = (float)r, id[2] = (float)q, id[3] = 0.0f;
        }
}

void position_ids_grid(float *ids, int64_t text, int64_t frames, int64_t rows, int64_t cols)
{
    if (op_dry(ids)) return;
    for (int64_t i = 0; i < text * 3; i++) ids[i] = 0.0f;
    float *id = ids + text * 3;
    for (int64_t u = 0; u < frames; u++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t q = 0; q < cols; q++, id += 3) id[0] = (float)u, id[1] = (float)r, id[2] = (float)q;
}

void position_ids_centred(float *ids, int64_t text, int64_t rows, int64_t cols)
{
    if (op_dry(ids)) return;
    const int64_t m = rows / 2 > cols / 2 ? rows / 2 : cols / 2, top = rows - rows / 2, left = cols - cols / 2;
    for (int64_t k = 0; k < text; k++) ids[k * 3] = ids[k * 3 + 1] = ids[k * 3 + 2] = (float)(m + k);
    float *img = ids + text * 3;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
            float *id = img + (r * cols + q) * 3;
            id[0] = 0.0f, id[1] = (float)(r - top), id[2] = (float)(q - left);
        }
}

void position_ids_longcat(float *ids, int64_t text, int64_t rows, int64_t cols, int64_t offset)
{
    if (op_dry(ids)) return;
    for (int64_t k = 0; k < text; k++) ids[3 * k] = 0.0f, ids[3 * k + 1] = ids[3 * k + 2] = (float)k;
    float *img = ids + text * 3;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
            float *id = img + (r * cols + q) * 3;
            id[0] = 1.0f, id[1] = (float)(offset + r), id[2] = (float)(offset + q);
        }
}
