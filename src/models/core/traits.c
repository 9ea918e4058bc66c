/* The families' traits as model.h gives them, read from each family's descriptor (family.h), and plan's description
 * of a model: the generic line, with the family's own parts from its hooks. */
#include <stdio.h>
#include <string.h>

#include "models/core/family.h"
#include "segtrain/model.h"

static const family_desc *of(const model_config *mc) { return family_of_config(mc); }

bool model_reads_text(const model_config *mc) { return of(mc)->traits & TR_TEXT; }
bool model_text_mask(const model_config *mc) { return of(mc)->traits & TR_TEXT_MASK; }
bool model_audio(const model_config *mc) { return of(mc)->traits & TR_AUDIO; }
bool model_edm(const model_config *mc) { return of(mc)->traits & TR_EDM; }
bool model_upstream_epsilon(const model_config *mc) { return of(mc)->traits & TR_UPSTREAM_EPSILON; }
bool model_batch_padded(const model_config *mc) { return of(mc)->traits & TR_BATCH_PADDED; }
bool model_drift(const model_config *mc) { return of(mc)->traits & TR_DRIFT; }
bool model_frames_8k1(const model_config *mc) { return of(mc)->traits & TR_FRAMES_8K1; }
bool model_tokens(const model_config *mc) { return of(mc)->traits & TR_TOKENS; }
int64_t model_token_logits(const model_config *mc)
{
    return model_tokens(mc) ? (mc->channels - 1) * (mc->frames - 1) * mc->classes : 0;
}
const char *model_text_width(const model_config *mc) { return of(mc)->text_width; }

bool model_video(const model_config *mc)
{
    const family_desc *d = of(mc);
    return d->is_video ? d->is_video(mc) : (d->traits & TR_VIDEO);
}

int64_t model_audio_tokens(const model_config *mc)
{
    return of(mc)->traits & TR_AUDIO_VIDEO ? (mc->frames - 1) * 8 + 1 : 0;
}

/* only wan as WanAnimateTransformer3DModel has face adapters (model_config_check) */
int64_t model_face_frames(const model_config *mc) { return mc->face_every > 0 ? 4 * mc->frames - 7 : 0; }

int64_t model_size_ids(const model_config *mc) { return mc->pooled_dim ? of(mc)->size_ids : 0; }

int64_t model_vae_scale_t(const model_config *mc) { return of(mc)->vae_scale_t ? of(mc)->vae_scale_t : 4; }

int64_t model_pixel_frames(const model_config *mc)
{
    const family_desc *d = of(mc);
    return d->pixel_frames ? d->pixel_frames(mc) : 1 + model_vae_scale_t(mc) * (mc->frames - 1);
}

int64_t model_packed_channels(const model_config *mc)
{
    const int packed = of(mc)->packed;
    return packed == 4 ? 4 * mc->channels : packed < 0 ? mc->channels * mc->patch * mc->patch : mc->channels;
}

const char *model_uncached(const model_config *mc)
{
    const family_desc *d = of(mc);
    const char *what = d->uncached_of ? d->uncached_of(mc) : d->uncached;
    return what ? what : "what the family reads beside them";
}

/* ---- plan's description ---- */

/* w's format with the values of its fields, one for each conversion */
static void blocks_in_words(const blocks_words *w, const model_config *mc, char *buf, size_t n)
{
    long long v[4] = {0};
    int k = 0;
    for (const char *p = strchr(w->format, '%'); p && k < 4; p = strchr(p + 1, '%'), k++)
        v[k] = *(const int64_t *)((const char *)mc + w->fields[k]);
    snprintf(buf, n, w->format, v[0], v[1], v[2], v[3]);
}

static void describe_blocks(const model_config *mc, char *blocks, size_t n)
{
    const family_desc *d = of(mc);
    if (!(d->traits & TR_TEXT)) snprintf(blocks, n, "%lld blocks", (long long)mc->depth);
    else if (d->blocks_words) blocks_in_words(d->blocks_words, mc, blocks, n);
    else if (d->describe_blocks) d->describe_blocks(mc, blocks, n);
    else if (d->topology == TOPO_XATTN || d->topology == TOPO_LINEAR)
        snprintf(blocks, n, "%lld cross-attention blocks", (long long)mc->depth);
    else if (mc->single_depth)
        snprintf(blocks, n, "%lld double-stream + %lld single-stream blocks", (long long)mc->depth,
                 (long long)mc->single_depth);
    else snprintf(blocks, n, "%lld joint blocks", (long long)mc->depth); /* sd3 */
}

static void describe_tokens(const model_config *mc, char *tokens, size_t n)
{
    const long long image = (long long)model_image_tokens(mc);
    if (!model_reads_text(mc)) snprintf(tokens, n, "%lld tokens", image);
    else if (model_audio_tokens(mc))
        snprintf(tokens, n, "%lld video + %lld audio + %lld text tokens", image, (long long)model_audio_tokens(mc),
                 (long long)mc->text_len);
    else
        snprintf(tokens, n, "%lld %s + %lld text tokens", image, model_audio(mc) ? "audio" : "image",
                 (long long)(mc->text_len + mc->text2_len));
}

void model_pixels(const model_config *mc, char *buf, size_t n)
{
    const long long h = (long long)(mc->height * mc->vae_scale), w = (long long)(mc->width * mc->vae_scale);
    if (h == w) snprintf(buf, n, "%lld", h);
    else snprintf(buf, n, "%lldx%lld", w, h);
}

static void describe_grid(const model_config *mc, char *grid, size_t n)
{
    const long long h = (long long)mc->height, w = (long long)mc->width;
    char px[48], time[48];
    model_pixels(mc, px, sizeof px);
    snprintf(time, sizeof time, "/%lld in time", (long long)model_vae_scale_t(mc));
    if (model_audio(mc)) snprintf(grid, n, "a clip of %lld latent frames", (long long)mc->frames);
    else if (mc->vae_scale == 1) snprintf(grid, n, "%s px images in pixel space", px);
    else if (model_video(mc)) /* num_frames = 1 + scale_t (latent frames - 1) */
        snprintf(grid, n, "%lld-frame %s px video (%lld x %lld x %lld latent, VAE /%lld, %s)",
                 (long long)model_pixel_frames(mc), px, (long long)mc->frames, h, w, (long long)mc->vae_scale,
                 of(mc)->frames_note ? of(mc)->frames_note : time);
    else snprintf(grid, n, "%s px images (%lld x %lld latent, VAE /%lld)", px, h, w, (long long)mc->vae_scale);
}

void model_describe(const model_config *mc, int64_t batch, char *buf, size_t n)
{
    char blocks[80], tokens[80], grid[160];
    describe_grid(mc, grid, sizeof grid);
    if (of(mc)->describe) { /* the U-Nets: their levels instead of one width */
        of(mc)->describe(mc, grid, batch, buf, n);
        return;
    }
    describe_blocks(mc, blocks, sizeof blocks);
    describe_tokens(mc, tokens, sizeof tokens);
    const bool linear = of(mc)->topology == TOPO_LINEAR;
    snprintf(buf, n, "model %s (%s): %s, width %lld, %lld heads, %s of %s, %s attention; batch %lld", mc->preset,
             mc->family, blocks, (long long)mc->hidden, (long long)mc->heads, tokens, grid,
             linear ? (mc->mechanism == ATTN_MATH ? "linear self- and math cross-" : "linear self- and flash cross-")
                    : mc->mechanism == ATTN_MATH ? "math" : "flash",
             (long long)batch);
}
