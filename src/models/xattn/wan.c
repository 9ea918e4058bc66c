/* Wan (WanTransformer3DModel, and its VACE, AnyFlow and Animate classes): xattn/xdit.c's steps, wan_animate.c's
 * Animate parts. */
#include <stdio.h>
#include <string.h>

#include "models/core/family.h"
#include "models/core/internal.h"

/* VACE's control branch (WanVACETransformer3DModel), and Animate (WanAnimateTransformer3DModel): their configs have
 * control blocks and face adapters */
static bool vace(const model_config *mc) { return mc->vace_count > 0; }
static bool animate(const model_config *mc) { return mc->face_every > 0; }

static int64_t wan_cond_len(const model_config *mc)
{
    const int64_t plane = mc->resolution * mc->resolution;
    int64_t control = vace(mc) ? mc->vace_channels * mc->frames * plane : 0;
    if (animate(mc)) /* the reference image's tokens, condition and pose latents, the face video */
        control = mc->image_tokens * mc->image_dim + (mc->cond_channels * mc->frames + mc->channels * (mc->frames - 1)) *
                  plane + 3 * model_face_frames(mc) * mc->face_size * mc->face_size;
    return family_text_cond_len(mc) + control;
}

static void wan_condition(const model_config *mc, const char *caption, float *cond)
{
    float *rest = family_text_condition(mc, caption, cond, NULL);
    if (vace(mc) || animate(mc)) /* VACE's control latents, Animate's reference, pose and face video: none (the
                                    stand-in has no video to read them from) */
        memset(rest, 0, (size_t)(model_cond_len(mc) - (rest - cond)) * sizeof *rest);
}

static const char *wan_uncached(const model_config *mc)
{
    return vace(mc)      ? "VACE's control latents"
           : animate(mc) ? "Animate's reference image tokens, condition and pose latents and face video"
                         : NULL;
}

static void wan_blocks(const model_config *mc, char *buf, size_t n)
{
    if (vace(mc))
        snprintf(buf, n, "%lld cross-attention blocks + %lld VACE control blocks", (long long)mc->depth,
                 (long long)mc->vace_count);
    else if (animate(mc))
        snprintf(buf, n, "%lld cross-attention blocks, a face adapter every %lld", (long long)mc->depth,
                 (long long)mc->face_every);
    else snprintf(buf, n, "%lld cross-attention blocks", (long long)mc->depth);
}

const family_desc wan_desc = {
    .name = "wan",
    .topology = TOPO_XATTN,
    .st = {{.name = "wan",
            .title = "Wan",
            .diffusers = "WanTransformer3DModel",
            .flavours = "t2v-480p-1.3b-2.1|t2v-480p-14b-2.1|i2v-14b-2.1|i2v-14b-2.1-720p|i2v-14b-2.2-high|i2v-14b-2.2-low|"
               "animegen-t2v-high|animegen-t2v-low|flf2v-14b-2.1|vace-1.3b-2.1|vace-14b-2.1|ti2v-5b-2.2",
            .built = "t2v-480p-1.3b-2.1:wan-1.3b|t2v-480p-14b-2.1:wan-14b|animegen-t2v-high:wan-14b|animegen-t2v-low:wan-14b|"
               "vace-1.3b-2.1:wan-vace-1.3b|vace-14b-2.1:wan-vace-14b",
            .fallback = "t2v-480p-1.3b-2.1",
            .why = "the i2v and flf2v flavours also take reference frames (CLIP image tokens, conditioning latents) and "
            "ti2v-5b-2.2 per-token timesteps and a 48-channel VAE; segtrain's conditioning carries no reference"}},
    .text = true,
    .video = true,
    .uncached_of = wan_uncached,
    .cond_len = wan_cond_len,
    .condition = wan_condition,
    .describe_blocks = wan_blocks,
    .ops = &xdit_family,
};
