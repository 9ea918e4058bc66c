/* Patch (un)flattening on the device (ops/cpu/embed.c's patchify and unpatchify, both directions, both feature
 * orders). The map between a patch token's features and latent pixels is one-to-one, so one thread a token
 * feature touches each element once: no reduction, the same bits whatever the launch. Only the grid's pixels take
 * part (a latent edge that is not a whole number of patches is left alone, as the CPU leaves it). */
#include "backend.h"

namespace {

constexpr int THREADS = 256;

/* The latent's dimensions and the patch grid, as embed.c's patch_tokens_move derives them; rows: a sample's token
 * rows (the grid's T, or more where padding follows them). */
struct patch_geom {
    int64_t c, F, h, w, pt, p, gh, gw, T, f, rows;
};

patch_geom geom_of(const patch_shape *s)
{
    patch_geom g;
    g.c = s->channels, g.F = s->frames, g.h = s->height, g.w = s->width, g.pt = s->patch_t, g.p = s->patch;
    g.gh = g.h / g.p, g.gw = g.w / g.p;
    g.T = (g.F / g.pt) * g.gh * g.gw;
    g.f = g.c * g.pt * g.p * g.p;
    g.rows = s->tokens ? s->tokens : g.T;
    return g;
}

/* Element i of the grid's tokens (batch, T, f) to its latent pixel: token t = (u gh + r) gw + q, feature
 * ((ch pt + z) p + a) p + bb (conv order) or ((z p + a) p + bb) c + ch (DiT's), pixel
 * (b, ch, u pt + z, r p + a, q p + bb). */
__device__ inline int64_t pixel_of(const patch_geom &g, int64_t i, bool dit_order)
{
    const int64_t fe = i % g.f, tok = i / g.f, t = tok % g.T, b = tok / g.T;
    const int64_t u = t / (g.gh * g.gw), r = t / g.gw % g.gh, q = t % g.gw;
    int64_t ch, z, a, bb;
    if (dit_order) {
        ch = fe % g.c;
        bb = fe / g.c % g.p;
        a = fe / (g.c * g.p) % g.p;
        z = fe / (g.c * g.p * g.p);
    } else {
        bb = fe % g.p;
        a = fe / g.p % g.p;
        z = fe / (g.p * g.p) % g.pt;
        ch = fe / (g.p * g.p * g.pt);
    }
    return (((b * g.c + ch) * g.F + u * g.pt + z) * g.h + r * g.p + a) * g.w + q * g.p + bb;
}

/* Element i of the grid's tokens at its place among a sample's rows (padding rows after the grid's T) */
__device__ inline int64_t token_of(const patch_geom &g, int64_t i)
{
    const int64_t per = g.T * g.f;
    return i / per * g.rows * g.f + i % per;
}

/* to_tokens: tokens[k] (+)= latent[pixel]; else latent[pixel] (+)= tokens[k]; acc says whether it is += */
__global__ void patch_kernel(float *tokens, float *latent, const float *src_tokens, const float *src_latent,
                             patch_geom g, int64_t n, bool dit_order, bool to_tokens, bool acc)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pix = pixel_of(g, i, dit_order), k = token_of(g, i);
        if (to_tokens)
            tokens[k] = acc ? tokens[k] + src_latent[pix] : src_latent[pix];
        else
            latent[pix] = acc ? latent[pix] + src_tokens[k] : src_tokens[k];
    }
}

/* embed.c's patch_bytes: what the profile counts */
double patch_bytes(const patch_shape *s)
{
    return 8.0 * (double)s->batch * (double)(s->channels * s->frames * s->height * s->width);
}

void patch_launch(float *tokens, float *latent, const float *src_tokens, const float *src_latent, const patch_shape *s,
                  bool dit_order, bool to_tokens, bool acc, const char *what)
{
    const double t0 = cu_op_start();
    const patch_geom g = geom_of(s);
    const int64_t n = s->batch * g.T * g.f;
    if (n > 0 && (to_tokens ? tokens : latent)) /* a NULL gradient is not wanted: nothing to write */
        patch_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_compute_stream()>>>(tokens, latent, src_tokens,
                                                                                 src_latent, g, n, dit_order,
                                                                                 to_tokens, acc);
    cu_op_done(OP_POINTWISE, t0, 0, patch_bytes(s), what);
}

/* A zero-sized patch would divide by zero here; the CPU code is left to make of it what it makes. */
bool bad_patch(const patch_shape *s) { return s->patch < 1 || s->patch_t < 1 || s->channels < 1; }

} // namespace

extern "C" void patchify_forward(float *tokens, const float *latent, const patch_shape *s)
{
    if (!cu_on_device(tokens, latent) || bad_patch(s)) {
        cpu_patchify_forward(tokens, latent, s);
        return;
    }
    patch_launch(tokens, nullptr, nullptr, latent, s, false, true, false, "patchify_forward");
}

extern "C" void patchify_backward(float *dlatent, const float *dtokens, const patch_shape *s)
{
    if (!cu_on_device(dlatent, dtokens) || bad_patch(s)) {
        cpu_patchify_backward(dlatent, dtokens, s);
        return;
    }
    patch_launch(nullptr, dlatent, dtokens, nullptr, s, false, false, true, "patchify_backward");
}

extern "C" void unpatchify_forward(float *latent, const float *tokens, const patch_shape *s, patch_order order)
{
    if (!cu_on_device(latent, tokens) || bad_patch(s)) {
        cpu_unpatchify_forward(latent, tokens, s, order);
        return;
    }
    patch_launch(nullptr, latent, tokens, nullptr, s, order == PATCH_DIT, false, false, "unpatchify_forward");
}

extern "C" void unpatchify_backward(float *dtokens, const float *dlatent, const patch_shape *s, patch_order order)
{
    if (!cu_on_device(dtokens, dlatent) || bad_patch(s)) {
        cpu_unpatchify_backward(dtokens, dlatent, s, order);
        return;
    }
    patch_launch(dtokens, nullptr, nullptr, dlatent, s, order == PATCH_DIT, true, true, "unpatchify_backward");
}
