/* A model configuration's checks, and from a run configuration to a model configuration: a preset's sizes
 * (model_presets.c), then any size given (non-zero). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/core/family.h"
#include "models/core/internal.h"
#include "segtrain/config.h"
#include "segtrain/model.h"

#define CHROMA_APPROX_LAYERS_MAX 16

static bool is(const model_config *mc, const char *name) { return !strcmp(mc->family, name); }
static bool model_dual_stream(const model_config *mc) { return family_of_config(mc)->topology == TOPO_DUAL; }
static bool model_xattn(const model_config *mc)
{
    return family_of_config(mc)->topology == TOPO_XATTN || family_of_config(mc)->topology == TOPO_LINEAR;
}
static bool model_kandinsky5(const model_config *mc) { return is(mc, "kandinsky5"); }
static bool model_ltx2(const model_config *mc) { return is(mc, "ltxvideo2"); }
static bool model_anima(const model_config *mc) { return is(mc, "anima"); }
static bool model_cosmos(const model_config *mc) { return is(mc, "cosmos2image") || model_anima(mc); }
static bool model_wan_animate(const model_config *mc) { return is(mc, "wan") && mc->face_every > 0; }
static bool model_lumina2(const model_config *mc) { return is(mc, "lumina2") || is(mc, "z_image"); }
static bool model_ernie(const model_config *mc) { return is(mc, "ernie"); }
static bool model_ideogram(const model_config *mc) { return is(mc, "ideogram"); }
static bool model_omnigen(const model_config *mc) { return is(mc, "omnigen"); }
static bool model_krea2(const model_config *mc) { return is(mc, "krea2"); }
static bool model_flux3(const model_config *mc) { return is(mc, "flux3_image"); }
static bool model_qwen_image21(const model_config *mc) { return is(mc, "qwen_image21"); }
static bool model_minimax_h3(const model_config *mc) { return is(mc, "minimaxh3"); }
static bool model_cosmos3(const model_config *mc) { return is(mc, "cosmos3"); }
static bool model_sanavideo(const model_config *mc) { return is(mc, "sanavideo"); }
static bool model_sana(const model_config *mc) { return is(mc, "sana") || model_sanavideo(mc); }
static bool model_unet(const model_config *mc) { return is(mc, "sd1x") || is(mc, "sdxl") || is(mc, "kolors"); }
static bool model_cascade(const model_config *mc) { return is(mc, "stable_cascade"); } /* residual layers of its distilled guidance (approximator_layers) */

/* Wan Animate's sizes (model_wan_animate), or none of them elsewhere */
/* The U-Net's sizes: what unet.c builds */
/* Stable Cascade's sizes: what cascade.c builds */
static st_status check_cascade(const model_config *mc)
{
    const int64_t L = mc->unet_levels;
    bool ok = L >= 1 && L <= UNET_LEVELS_MAX && mc->clip_seq >= 1 && mc->clip_seq <= 64 && mc->unet_cross >= 1 &&
              mc->unet_cross <= (1 << 20) && mc->time_channels >= 2 && mc->time_channels <= 65536 &&
              mc->time_channels % 2 == 0 && mc->pooled_dim >= 1 && mc->image_dim >= 1 && mc->patch == 1 &&
              mc->frames == 1 && !mc->out_channels && mc->hidden == mc->unet_channels[0] &&
              (!mc->cascade_resample || mc->resolution % ((int64_t)1 << (L - 1)) == 0);
    for (int64_t i = 0; ok && i < L; i++)
        ok = mc->cascade_dropout[i] >= 0 && mc->cascade_dropout[i] < 1 && mc->unet_channels[i] >= 1 &&
             mc->unet_channels[i] <= (1 << 16) && mc->unet_heads[i] >= 1 &&
             mc->unet_channels[i] % mc->unet_heads[i] == 0 && mc->unet_attn[i] >= 1 && mc->unet_attn[i] <= 64;
    if (ok) return ST_OK;
    return st_fail(ST_ERR_INVALID, "block_out_channels: %lld levels (%lld, %lld, %lld, %lld) with heads (%lld, %lld, "
                   "%lld, %lld), conditioning_dim %lld, clip_seq %lld, timestep_ratio_embedding_dim %lld, resolution "
                   "%lld; stable_cascade takes 1 to %d levels of 1 to 65536 channels that each level's heads divide, 1 "
                   "to 64 layers a level, dropout in [0, 1), conditioning of 1 to 2^20, 1 to 64 clip tokens, even time "
                   "sinusoids of 2 to "
                   "65536, pooled and image widths of at least 1, hidden_size block_out_channels[0], 1 x 1 patches, "
                   "1 frame, and with resampling scalers a latent edge that halves evenly", (long long)L,
                   (long long)mc->unet_channels[0], (long long)mc->unet_channels[1], (long long)mc->unet_channels[2],
                   (long long)mc->unet_channels[3], (long long)mc->unet_heads[0], (long long)mc->unet_heads[1],
                   (long long)mc->unet_heads[2], (long long)mc->unet_heads[3], (long long)mc->unet_cross,
                   (long long)mc->clip_seq, (long long)mc->time_channels, (long long)mc->resolution, UNET_LEVELS_MAX);
}

static st_status check_unet(const model_config *mc)
{
    if (model_cascade(mc)) return check_cascade(mc);
    bool dropout = false;
    for (int i = 0; i < UNET_LEVELS_MAX; i++) dropout |= mc->cascade_dropout[i] != 0;
    if (mc->clip_seq || mc->cascade_resample || dropout)
        return st_fail(ST_ERR_INVALID, "clip_seq: %lld; only stable_cascade has conditioning tokens of pooled vectors "
                       "(0)", (long long)mc->clip_seq);
    const bool unet = model_unet(mc);
    const int64_t L = mc->unet_levels, g = mc->norm_groups;
    if (!unet) {
        if (L || mc->unet_layers || mc->unet_mid || g || mc->unet_linear || mc->unet_cross)
            return st_fail(ST_ERR_INVALID, "block_out_channels: %lld levels; only sd1x, sdxl and kolors are U-Nets (0)",
                           (long long)L);
        return ST_OK;
    }
    bool ok = L >= 1 && L <= UNET_LEVELS_MAX && mc->unet_layers >= 1 && mc->unet_layers <= 8 && mc->unet_mid >= 0 &&
              mc->unet_mid <= 64 && g >= 1 && mc->norm_eps > 0 && mc->norm_eps < 1 && mc->patch == 1 &&
              mc->frames == 1 && !mc->out_channels && mc->hidden == 4 * mc->unet_channels[0] &&
              mc->resolution % ((int64_t)1 << (L - 1)) == 0 &&
              (!strcmp(mc->family, "sd1x") ? !mc->pooled_dim && !mc->time_channels
                                           : mc->pooled_dim >= 1 && mc->time_channels >= 2 &&
                                                 mc->time_channels % 2 == 0 && mc->time_channels <= 65536) &&
              (strcmp(mc->family, "kolors") ? !mc->unet_cross : mc->unet_cross >= 1 && mc->unet_cross <= (1 << 20));
    for (int64_t i = 0; ok && i < L; i++)
        ok = mc->unet_channels[i] >= 1 && mc->unet_channels[i] <= (1 << 16) && mc->unet_channels[i] % g == 0 &&
             mc->unet_heads[i] >= 1 && mc->unet_channels[i] % mc->unet_heads[i] == 0 && mc->unet_attn[i] >= 0 &&
             mc->unet_attn[i] <= 64;
    if (ok) return ST_OK;
    return st_fail(ST_ERR_INVALID, "block_out_channels: %lld levels (%lld, %lld, %lld, %lld) with heads (%lld, %lld, "
                   "%lld, %lld), layers_per_block %lld, norm_num_groups %lld, norm_eps %g, resolution %lld; %s takes 1 "
                   "to %d levels of 1 to 65536 channels that the groups and each level's heads divide, 1 to 8 layers "
                   "a block, 0 to 64 transformer blocks an attention, an eps in (0, 1), a latent edge that halves "
                   "evenly at every level, time_embed_dim 4 x block_out_channels[0], 1 x 1 patches, 1 frame (sdxl, "
                   "kolors: a pooled text of at least 1 and even size-id sinusoids of 2 to 65536, sd1x neither; "
                   "kolors: a text projection to 1 to 2^20)",
                   (long long)L, (long long)mc->unet_channels[0], (long long)mc->unet_channels[1],
                   (long long)mc->unet_channels[2], (long long)mc->unet_channels[3], (long long)mc->unet_heads[0],
                   (long long)mc->unet_heads[1], (long long)mc->unet_heads[2], (long long)mc->unet_heads[3],
                   (long long)mc->unet_layers, (long long)g, mc->norm_eps, (long long)mc->resolution, mc->family,
                   UNET_LEVELS_MAX);
}

static st_status check_animate(const model_config *mc)
{
    const int64_t *ch = mc->motion_channels;
    bool channels = true;
    int64_t log = 2;
    while (((int64_t)1 << log) < mc->face_size && log < 10) log++;
    for (int64_t k = 0; k <= log - 2; k++) channels = channels && ch[k] >= 1 && ch[k] <= (1 << 16);
    if (!model_wan_animate(mc)) {
        bool none = !mc->face_every && !mc->image_tokens && !mc->face_size && !mc->motion_style && !mc->motion_dim && !mc->motion_out &&
                    !mc->face_hidden && !mc->face_heads;
        for (int k = 0; k < 9; k++) none = none && !ch[k];
        return none ? ST_OK : st_fail(ST_ERR_INVALID, "the reference image's tokens, the motion and face encoders: "
                                      "only wan as WanAnimateTransformer3DModel has them (0)");
    }
    const bool sizes = mc->image_tokens >= 1 && mc->image_tokens <= (1 << 16) && mc->image_dim >= 1 &&
                       mc->image_dim <= (1 << 16) && mc->motion_style >= 1 && mc->motion_style <= (1 << 16) &&
                       mc->motion_dim >= 1 && mc->motion_dim <= mc->motion_out && mc->motion_out <= (1 << 16) &&
                       mc->face_hidden >= 1 && mc->face_hidden <= (1 << 16) && mc->face_heads >= 1 &&
                       mc->face_heads <= 64;
    if (!sizes || !channels || mc->face_size != ((int64_t)1 << log))
        return st_fail(ST_ERR_INVALID, "Wan Animate: image tokens %lld of width %lld, motion_encoder_size %lld, "
                       "motion_style_dim %lld, motion_dim %lld, motion_encoder_dim %lld, face encoder %lld wide with "
                       "%lld heads; it takes 1 to 65536 of each (64 heads at most, motion_dim at most "
                       "motion_encoder_dim), an edge that is a power of two from 4 to 1024, and channels for each of "
                       "its edges", (long long)mc->image_tokens, (long long)mc->image_dim, (long long)mc->face_size,
                       (long long)mc->motion_style, (long long)mc->motion_dim, (long long)mc->motion_out,
                       (long long)mc->face_hidden, (long long)mc->face_heads);
    if (mc->face_every < 1 || mc->depth % mc->face_every || mc->frames < 2 || mc->patch_t != 1 ||
        mc->cond_channels != mc->channels + 4 || mc->text_len != 512 || mc->out_channels)
        return st_fail(ST_ERR_INVALID, "Wan Animate: %lld blocks with a face adapter every %lld, %lld latent frames, "
                       "patch_size_t %lld, %lld condition channels over %lld latent ones, %lld text tokens, "
                       "out_channels %lld; it takes a multiple of inject_face_latents_blocks, at least 2 frames (the "
                       "reference and one more), 1, in_channels = 2 latent channels + 4, the 512 tokens its attention "
                       "splits the context at, and 0 (= the latent channels)", (long long)mc->depth,
                       (long long)mc->face_every, (long long)mc->frames, (long long)mc->patch_t,
                       (long long)mc->cond_channels, (long long)mc->channels, (long long)mc->text_len,
                       (long long)mc->out_channels);
    return ST_OK;
}

st_status model_config_check(const model_config *mc)
{
    const bool mmdit = model_dual_stream(mc), skipdit = !strcmp(mc->family, "skipdit"), sd3 = !strcmp(mc->family, "sd3");
    const bool xattn = model_xattn(mc), text = model_reads_text(mc);
    const bool aura = !strcmp(mc->family, "auraflow"), flux2 = !strcmp(mc->family, "flux2");
    const bool chroma = !strcmp(mc->family, "chroma"), qwen = !strcmp(mc->family, "qwen_image");
    const bool hv15 = !strcmp(mc->family, "hunyuanvideo15");
    const bool unpooled = aura || !strcmp(mc->family, "longcat_image") || chroma || qwen || hv15 ||
                          (xattn && !model_kandinsky5(mc)) || model_qwen_image21(mc); /* no pooled text */
    if (!text && !skipdit && strcmp(mc->family, "dit"))
        return st_fail(ST_ERR_INVALID, "model_family: '%s' is not one of dit, mmdit, skipdit, flux, sd3, auraflow, "
                       "qwen_image", mc->family);
    const struct {
        const char *key;
        int64_t v;
    } positive[] = {{"depth", mc->depth},           {"hidden_size", mc->hidden}, {"num_heads", mc->heads},
                    {"patch_size", mc->patch},      {"in_channels", mc->channels}, {"resolution", mc->resolution},
                    {"num_classes", mc->classes},   {"tokenizer_max_length", text ? mc->text_len : 1},
                    {"joint_attention_dim", text ? mc->text_dim : 1},
                    {"pooled_projection_dim", mmdit && !unpooled && !flux2 ? mc->pooled_dim : 1},
                    {"vae_scale_factor", mc->vae_scale}};
    for (size_t i = 0; i < sizeof positive / sizeof *positive; i++)
        if (positive[i].v < 1) return st_fail(ST_ERR_INVALID, "%s: %lld must be at least 1", positive[i].key,
                                              (long long)positive[i].v);
    if (text && mc->text_vocab < 2)
        return st_fail(ST_ERR_INVALID, "text_vocab_size: %lld must be at least 2 (padding and one word)",
                       (long long)mc->text_vocab);
    if (mc->hidden % mc->heads)
        return st_fail(ST_ERR_INVALID, "num_heads: %lld does not divide hidden_size %lld", (long long)mc->heads,
                       (long long)mc->hidden);
    if (mc->hidden % 4)
        return st_fail(ST_ERR_INVALID, "hidden_size: %lld must be a multiple of 4 (the 2D sine-cosine table)",
                       (long long)mc->hidden);
    const bool flux3 = model_flux3(mc), four = flux2 || flux3; /* Flux.2 and Flux.3 rotate on four axes */
    const bool q21 = model_qwen_image21(mc);
    if ((mmdit && !sd3 && !aura) || flux3 || q21) {
        const int64_t hd = mc->hidden / mc->heads, *a = mc->rope_axes;
        const int n = four ? 4 : 3;
        int64_t sum = 0;
        bool even = true;
        for (int i = 0; i < n; i++) sum += a[i], even &= a[i] >= 0 && a[i] % 2 == 0;
        if (!even || sum != hd)
            return st_fail(ST_ERR_INVALID, "axes_dims_rope: (%lld, %lld, %lld%s%.0lld) must be even widths that add up "
                           "to the head width %lld (hidden_size / num_heads)", (long long)a[0], (long long)a[1],
                           (long long)a[2], four ? ", " : "", four ? (long long)a[3] : 0LL, (long long)hd);
    }
    if (four && (mc->pooled_dim || (mc->guidance_embeds && flux3)))
        return st_fail(ST_ERR_INVALID, "pooled_projection_dim: %lld, guidance_embeds %d; %s has no pooled text vector "
                       "(0)%s", (long long)mc->pooled_dim, (int)mc->guidance_embeds, mc->family,
                       flux3 ? " and no guidance embedding (false)" : "");
    if (four && (mc->time_channels < 2 || mc->time_channels % 2 || mc->time_channels > 65536))
        return st_fail(ST_ERR_INVALID, "timestep_guidance_channels (Flux.3: timestep_channels): %lld must be even, 2 "
                       "to 65536", (long long)mc->time_channels);
    if (mc->classes >= (1 << 24))
        return st_fail(ST_ERR_INVALID, "num_classes: %lld; at most %d (labels travel as floats)", (long long)mc->classes,
                       (1 << 24) - 1);
    if (skipdit && (mc->depth < 3 || mc->depth % 2 == 0))
        return st_fail(ST_ERR_INVALID, "depth: %lld blocks; skipdit needs an odd number >= 3 (in-blocks, a mid block, "
                       "as many out-blocks)", (long long)mc->depth);
    if (sd3 && (mc->resolution / mc->patch > mc->pos_embed_max || mc->sample_size < mc->patch))
        return st_fail(ST_ERR_INVALID, "pos_embed_max_size: %lld; sd3's table must cover the %lld-patch grid of "
                       "resolution %lld, and sample_size %lld at least one patch", (long long)mc->pos_embed_max,
                       (long long)(mc->resolution / mc->patch), (long long)mc->resolution, (long long)mc->sample_size);
    if (aura && (mc->resolution / mc->patch > mc->pos_embed_max || mc->pooled_dim))
        return st_fail(ST_ERR_INVALID, "pos_embed_max_size: %lld x %lld; auraflow's learned table must cover the "
                       "%lld-patch grid of resolution %lld (and pooled_projection_dim %lld must be 0: it has none)",
                       (long long)mc->pos_embed_max, (long long)mc->pos_embed_max,
                       (long long)(mc->resolution / mc->patch), (long long)mc->resolution, (long long)mc->pooled_dim);
    if (unpooled && !aura && (mc->pooled_dim || mc->guidance_embeds))
        return st_fail(ST_ERR_INVALID, "pooled_projection_dim: %lld, guidance_embeds %d; %s conditions on the timestep "
                       "alone (0 and false)", (long long)mc->pooled_dim, (int)mc->guidance_embeds, mc->family);
    if (chroma && (mc->approx_channels < 8 || mc->approx_channels % 8 || mc->approx_channels > (1 << 16) ||
                   mc->approx_hidden < 1 || mc->approx_hidden > (1 << 20) || mc->approx_layers < 0 ||
                   mc->approx_layers > CHROMA_APPROX_LAYERS_MAX))
        return st_fail(ST_ERR_INVALID, "approximator_num_channels %lld, approximator_hidden_dim %lld, "
                       "approximator_layers %lld: chroma's take a multiple of 8 up to 65536, 1 to 2^20 and 0 to %d",
                       (long long)mc->approx_channels, (long long)mc->approx_hidden, (long long)mc->approx_layers,
                       CHROMA_APPROX_LAYERS_MAX);
    if (mc->dual_attention < 0 || mc->dual_attention > (sd3 ? mc->depth : 0))
        return st_fail(ST_ERR_INVALID, "dual_attention_layers: the first %lld blocks; sd3 has %lld (other families "
                       "none)", (long long)mc->dual_attention, (long long)(sd3 ? mc->depth : 0));
    if (mc->out_channels && (mc->out_channels < mc->channels || !xattn))
        return st_fail(ST_ERR_INVALID, "out_channels: %lld; %s", (long long)mc->out_channels,
                       xattn ? "at least in_channels (the prediction is the first in_channels)"
                             : "only pixart_sigma's output differs from its input (0)");
    if (mc->ffn_dim < 0 || mc->ffn_dim > (1 << 20) ||
        (mc->ffn_dim && !xattn && !model_lumina2(mc) && !model_ernie(mc) && !model_ideogram(mc) && !model_omnigen(mc) &&
         !model_krea2(mc) && !model_minimax_h3(mc) && !model_cosmos3(mc)))
        return st_fail(ST_ERR_INVALID, "ffn_dim: %lld; the feed-forward of wan (0: 4 hidden_size), lumina2, z_image "
                       "and ernie is 1 to 2^20 wide (other families 0)", (long long)mc->ffn_dim);
    if (mc->single_depth < 0 || ((!mmdit || sd3 || qwen || hv15) && !flux3 && mc->single_depth) ||
        (flux3 && mc->single_depth < 1))
        return st_fail(ST_ERR_INVALID, "num_single_layers: %lld (single-stream blocks exist in mmdit, flux, flux2, "
                       "auraflow and hunyuanvideo; flux3_image has at least 1)",
                       (long long)mc->single_depth);
    if (q21 && (mc->resolution / mc->patch) * (mc->resolution / mc->patch) % 4)
        return st_fail(ST_ERR_INVALID, "resolution %lld, patch_size %lld: Qwen-Image 2.1's image takes its encoder's "
                       "slots of 2 x 2 latent tokens each, so its %lld tokens must be a multiple of 4",
                       (long long)mc->resolution, (long long)mc->patch,
                       (long long)((mc->resolution / mc->patch) * (mc->resolution / mc->patch)));
    if (mc->resolution % mc->patch)
        return st_fail(ST_ERR_INVALID, "patch_size: %lld does not divide resolution %lld", (long long)mc->patch,
                       (long long)mc->resolution);
    const bool hv = !strncmp(mc->family, "hunyuanvideo", 12);
    if (model_cosmos(mc) ? (mc->adaln_lora < 1 || mc->adaln_lora > (1 << 16) || mc->patch_t != 1 ||
                            mc->hidden / mc->heads < 8 || mc->hidden / mc->heads > 128 || mc->out_channels)
                         : mc->adaln_lora != 0)
        return st_fail(ST_ERR_INVALID, "adaln_lora_dim %lld, patch_size_t %lld, head width %lld, out_channels %lld; %s",
                       (long long)mc->adaln_lora, (long long)mc->patch_t, (long long)(mc->hidden / mc->heads),
                       (long long)mc->out_channels, model_cosmos(mc) ? "cosmos2image takes 1 to 65536, 1, 8 to 128 "
                       "and 0 (= in_channels)" : "only cosmos2image has AdaLN-LoRA (0)");
    const bool ace = model_audio(mc);
    const bool lumina = model_lumina2(mc), ernie = model_ernie(mc), ideo = model_ideogram(mc), omni = model_omnigen(mc);
    const bool krea = model_krea2(mc), mh = model_minimax_h3(mc), c3 = model_cosmos3(mc);
    const int64_t axes_sum = mc->rope_axes[0] + mc->rope_axes[1] + mc->rope_axes[2], hd = mc->hidden / mc->heads;
    if (ideo && (mc->time_dim < 1 || mc->time_dim > (1 << 16) || hd % 2 || mc->rope_axes[0] < 0 ||
                 mc->rope_axes[1] < 0 || mc->rope_axes[2] < 0 || 3 * mc->rope_axes[1] > hd / 2 + 1 ||
                 3 * mc->rope_axes[2] > hd / 2 || mc->rope_axes[3]))
        return st_fail(ST_ERR_INVALID, "adaln_dim %lld, mrope_section (%lld, %lld, %lld), head width %lld; ideogram "
                       "takes 1 to 65536 and sections whose interleaved frequencies lie within the (even) head's "
                       "(3 sections[1] <= head/2 + 1, 3 sections[2] <= head/2)", (long long)mc->time_dim,
                       (long long)mc->rope_axes[0], (long long)mc->rope_axes[1], (long long)mc->rope_axes[2],
                       (long long)hd);
    if (lumina || ernie || ideo || omni || krea ? (mc->kv_heads < 1 || mc->heads % mc->kv_heads || mc->ffn_dim < 1 ||
                           mc->ffn_dim > 8 * mc->hidden ||
                  !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->text_dim < 1 || mc->pooled_dim ||
                  (!ideo && !omni && (axes_sum != hd || mc->rope_axes[0] % 2 || mc->rope_axes[1] % 2 ||
                             mc->rope_axes[2] % 2 || mc->rope_axes[3])) ||
                  mc->patch_t != 1 || mc->out_channels)
               : mc->norm_eps != 0 && !mh && !c3 && !model_unet(mc))
        return st_fail(ST_ERR_INVALID, "num_kv_heads %lld of %lld heads, feed-forward %lld wide, norm_eps %g, "
                       "cap_feat_dim %lld, rotary axes (%lld, %lld, %lld); %s", (long long)mc->kv_heads,
                       (long long)mc->heads, (long long)mc->ffn_dim, mc->norm_eps, (long long)mc->text_dim,
                       (long long)mc->rope_axes[0], (long long)mc->rope_axes[1], (long long)mc->rope_axes[2],
                       lumina || ernie || ideo || omni || krea
                           ? "lumina2, z_image, ernie, ideogram, omnigen and krea2 take a divisor of the heads, 1 to 8 "
                             "hidden_size, an eps in (0, 1), at least 1, and (but ideogram and omnigen) three even "
                             "axes summing to the head width (no pooled vector, out_channels 0)"
                           : "only lumina2, z_image, ernie, ideogram, omnigen, krea2, minimaxh3 and cosmos3 have "
                             "norm_eps (0)");
    const bool sana = model_sana(mc);
    if (sana ? (mc->cross_heads < 1 || mc->hidden % mc->cross_heads || mc->ffn_dim < 1 ||
                (mc->frames != 1 && !model_sanavideo(mc)) || mc->out_channels || mc->pooled_dim)
             : mc->cross_heads)
        return st_fail(ST_ERR_INVALID, "num_cross_attention_heads %lld of hidden_size %lld, GLUMBConv %lld wide, %lld "
                       "frames, out_channels %lld; %s", (long long)mc->cross_heads, (long long)mc->hidden,
                       (long long)mc->ffn_dim, (long long)mc->frames, (long long)mc->out_channels,
                       sana ? "sana and sanavideo take cross-attention heads dividing hidden_size, a feed-forward of "
                              "at least 1, out_channels 0 (= in_channels), and sana images (1 frame)"
                            : "only sana and sanavideo have them (0)");
    const int64_t c3hd = mc->head_dim;
    if (c3 ? (mc->kv_heads < 1 || mc->heads % mc->kv_heads || c3hd < 2 || c3hd > 1024 || c3hd % 2 || mc->ffn_dim < 1 ||
              mc->ffn_dim > (1 << 20) || !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->text_dim != 1 ||
              mc->text_vocab >= (1 << 24) || mc->rope_axes[0] < 0 || mc->rope_axes[1] < 0 || mc->rope_axes[2] < 0 ||
              3 * mc->rope_axes[1] > c3hd / 2 + 1 || 3 * mc->rope_axes[2] > c3hd / 2 || mc->rope_axes[3] ||
              mc->audio_channels < 0 || mc->audio_channels > (1 << 16) || mc->action_dim < 0 ||
              mc->action_dim > (1 << 16) || mc->action_domains < (mc->action_dim ? 1 : 0) ||
              mc->action_domains > (1 << 16) || mc->patch_t != 1 || mc->out_channels || mc->pooled_dim ||
              mc->guidance_embeds)
           : (mc->action_dim || mc->action_domains))
        return st_fail(ST_ERR_INVALID, "num_key_value_heads %lld of %lld heads, head_dim %lld, intermediate_size %lld, "
                       "rms_norm_eps %g, text_dim %lld, vocab_size %lld, rope_axes_dim (%lld, %lld, %lld), sound_dim "
                       "%lld, action_dim %lld over %lld domains; %s", (long long)mc->kv_heads, (long long)mc->heads,
                       (long long)c3hd, (long long)mc->ffn_dim, mc->norm_eps, (long long)mc->text_dim,
                       (long long)mc->text_vocab, (long long)mc->rope_axes[0], (long long)mc->rope_axes[1],
                       (long long)mc->rope_axes[2], (long long)mc->audio_channels, (long long)mc->action_dim,
                       (long long)mc->action_domains,
                       c3 ? "cosmos3 takes a divisor of the heads, an even head width of 2 to 1024, 1 to 2^20, an eps "
                            "in (0, 1), token ids (text_dim 1) below 2^24, sections whose interleaved frequencies lie "
                            "within the head (3 sections[1] <= head/2 + 1, 3 sections[2] <= head/2), and heads of at "
                            "most 65536 (an action head over at least 1 domain)"
                          : "only cosmos3 has action heads (0)");
    const int64_t mh_rot = mc->rope_axes[0] + mc->rope_axes[1] + mc->rope_axes[2];
    if (mh ? (mc->head_dim < 2 || mc->head_dim > 1024 || mc->head_dim % 2 || mh_rot < 6 || mh_rot > mc->head_dim ||
              mc->rope_axes[0] % 2 || mc->rope_axes[1] != mc->rope_axes[0] || mc->rope_axes[2] != mc->rope_axes[0] ||
              mc->rope_axes[3] || mc->time_channels < 2 || mc->time_channels % 2 || mc->time_channels > 65536 ||
              mc->time_hidden < 1 || mc->time_hidden > (1 << 20) || mc->time_dim < 1 || mc->time_dim > (1 << 20) ||
              mc->ffn_dim < 1 || mc->audio_channels < 1 || mc->audio_channels > (1 << 16) ||
              !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->patch_t != 1 || mc->out_channels || mc->pooled_dim ||
              mc->guidance_embeds)
           : ((mc->head_dim && !c3) || mc->time_hidden))
        return st_fail(ST_ERR_INVALID, "attention_head_dim %lld, rotary pairs (%lld, %lld, %lld), freq_dim %lld, "
                       "time_embed_hidden_dim %lld, time_embed_dim %lld, ffn_dim %lld, audio_in_channels %lld, "
                       "norm_eps %g, patch_size_t %lld; %s", (long long)mc->head_dim, (long long)mc->rope_axes[0],
                       (long long)mc->rope_axes[1], (long long)mc->rope_axes[2], (long long)mc->time_channels,
                       (long long)mc->time_hidden, (long long)mc->time_dim, (long long)mc->ffn_dim,
                       (long long)mc->audio_channels, mc->norm_eps, (long long)mc->patch_t,
                       mh ? "minimaxh3 takes an even head width of 2 to 1024 holding its three equal even rotary "
                            "axes (2 rope_freq_dim each), even sinusoids of 2 to 65536, widths of 1 to 2^20, 1 to "
                            "65536 audio channels, an eps in (0, 1) and 1 (no pooled vector, no guidance, "
                            "out_channels 0)"
                          : "only minimaxh3 has them (0)");
    const int64_t th = mc->text_layers ? mc->text_dim / mc->text_layers : 0; /* krea2's text_hidden_dim */
    if (krea ? (mc->text_layers < 1 || mc->text_layers > 1024 || mc->text_dim % mc->text_layers || mc->text_heads < 1 ||
                th % mc->text_heads || mc->text_kv_heads < 1 || mc->text_heads % mc->text_kv_heads ||
                mc->text_ffn < 1 || mc->text_ffn > 8 * th || mc->text_blocks < 1 || mc->text_blocks > 64 ||
                mc->refiner_depth < 1 || mc->refiner_depth > MODEL_REFINER_MAX)
             : (mc->text_layers || mc->text_heads || mc->text_kv_heads || mc->text_ffn))
        return st_fail(ST_ERR_INVALID, "num_text_layers %lld (text_dim %lld), text_num_attention_heads %lld, "
                       "text_num_key_value_heads %lld, text_intermediate_size %lld, %lld layerwise and %lld refiner "
                       "text blocks; %s", (long long)mc->text_layers, (long long)mc->text_dim,
                       (long long)mc->text_heads, (long long)mc->text_kv_heads, (long long)mc->text_ffn,
                       (long long)mc->text_blocks, (long long)mc->refiner_depth,
                       krea ? "krea2 takes 1 to 1024 layers dividing text_dim, heads dividing their width and divided "
                              "by the key-value heads, a feed-forward of 1 to 8 widths, 1 to 64 layerwise and 1 to 8 "
                              "refiner blocks"
                            : "only krea2 has a text fusion (0)");
    bool factors = true;
    for (int64_t i = 0; omni && i < hd / 2 && i < MODEL_ROPE_FACTORS; i++)
        factors &= mc->rope_short[i] > 0 && mc->rope_short[i] < 1e6f && mc->rope_long[i] > 0 && mc->rope_long[i] < 1e6f;
    if (omni ? (mc->text_dim != 1 || hd % 2 || hd > 2 * MODEL_ROPE_FACTORS || !factors || mc->rope_original < 1 ||
                mc->rope_max < 1 || mc->rope_original > (1 << 30) || mc->rope_max > (1 << 30) || mc->text_pad < 0 ||
                mc->text_vocab >= (1 << 24) || mc->resolution / mc->patch > mc->pos_embed_max ||
                mc->sample_size < mc->patch)
             : (mc->rope_original || mc->rope_max || mc->text_pad))
        return st_fail(ST_ERR_INVALID, "text_dim %lld, head width %lld, original_max_position_embeddings %lld, "
                       "max_position_embeddings %lld, pad_token_id %lld, vocab_size %lld, pos_embed_max_size %lld; %s",
                       (long long)mc->text_dim, (long long)hd, (long long)mc->rope_original, (long long)mc->rope_max,
                       (long long)mc->text_pad, (long long)mc->text_vocab, (long long)mc->pos_embed_max,
                       omni ? "omnigen takes token ids (text_dim 1), an even head width of at most 128 with positive "
                              "rotary factors, 1 to 2^30 positions, a pad token of at least 0, fewer than 2^24 ids "
                              "(they travel as floats), and a table covering the patch grid"
                            : "only omnigen has them (0)");
    if (ace ? (mc->kv_heads < 1 || mc->heads % mc->kv_heads || mc->window < 0 || mc->cond_channels < 0 ||
               mc->cond_channels > (1 << 16) || mc->patch != 1 || mc->resolution != 1 || mc->out_channels)
            : ((mc->kv_heads && !lumina && !ernie && !ideo && !omni && !krea && !c3) || mc->window))
        return st_fail(ST_ERR_INVALID, "num_key_value_heads %lld, sliding_window %lld, context channels %lld, patch_size "
                       "%lld, resolution %lld, out_channels %lld; %s", (long long)mc->kv_heads, (long long)mc->window,
                       (long long)mc->cond_channels, (long long)mc->patch, (long long)mc->resolution,
                       (long long)mc->out_channels, ace ? "ace_step takes a divisor of num_heads, a window of at least "
                       "0, 0 to 65536 context channels, and audio's 1, 1 and 0 (= in_channels)"
                       : "only ace_step has them (0)");
    const bool wan = !strcmp(mc->family, "wan");
    if (wan ? (mc->vace_count < 0 || mc->vace_every < 0 || mc->vace_channels < 0 || mc->vace_channels > (1 << 16) ||
               (mc->vace_count && (mc->vace_every < 1 || (mc->vace_count - 1) * mc->vace_every >= mc->depth ||
                                   mc->vace_channels < 1)))
            : (mc->vace_count || mc->vace_every || mc->vace_channels || mc->anyflow))
        return st_fail(ST_ERR_INVALID, "vace_layers: %lld blocks every %lld, %lld control channels; %s",
                       (long long)mc->vace_count, (long long)mc->vace_every, (long long)mc->vace_channels,
                       wan ? "wan's VACE hints land on main blocks 0, k, 2k, ... inside its depth, with 1 to 65536 "
                       "control channels" : "only wan's VACE flavours have a control branch (0), and only wan reads "
                       "AnyFlow's transformer");
    const bool ltx2 = model_ltx2(mc);
    if (ltx2 ? (mc->audio_heads < 1 || mc->audio_hidden < 1 || mc->audio_hidden > mc->hidden ||
                mc->audio_hidden % (2 * mc->audio_heads) || mc->audio_hidden % (2 * mc->heads) ||
                mc->audio_channels < 1 || mc->audio_channels > (1 << 16) || mc->text_dim % 2 || mc->patch != 1 ||
                mc->patch_t != 1 || (mc->hidden / mc->heads) % 2 || mc->out_channels || mc->ffn_dim)
             : (mc->audio_heads || mc->audio_hidden || (mc->audio_channels && !mh && !c3)))
        return st_fail(ST_ERR_INVALID, "audio width %lld, audio heads %lld, audio channels %lld, caption width %lld, "
                       "patch %lld x %lld; %s", (long long)mc->audio_hidden, (long long)mc->audio_heads,
                       (long long)mc->audio_channels, (long long)mc->text_dim, (long long)mc->patch,
                       (long long)mc->patch_t, ltx2 ? "ltxvideo2 takes an audio width of at most hidden_size that "
                       "2 x each stream's heads divide (its cross-modal rotations split it by both), 1 to 65536 audio "
                       "channels, two connector states per token (an even width), 1 x 1 patches and even head widths"
                       : "only ltxvideo2 has an audio stream (0)");
    const bool k5 = model_kandinsky5(mc);
    const int64_t k5hd = mc->hidden / mc->heads;
    if (k5 ? (mc->text_blocks < 1 || mc->text_blocks > 4096 || mc->time_dim < 1 || mc->time_dim > (1 << 16) ||
              mc->pooled_dim < 1 || mc->patch_t != 1 || k5hd % 16 || k5hd > 256 || mc->out_channels ||
              (mc->cond_channels && mc->cond_channels != mc->channels + 1))
           : ((mc->text_blocks && !model_krea2(mc)) || (mc->time_dim && !model_ideogram(mc) && !mh)))
        return st_fail(ST_ERR_INVALID, "num_text_blocks %lld, time_dim %lld, in_text_dim2 %lld, patch_size_t %lld, head "
                       "width %lld, out_visual_dim %lld, visual_cond channels %lld; %s", (long long)mc->text_blocks,
                       (long long)mc->time_dim, (long long)mc->pooled_dim, (long long)mc->patch_t, (long long)k5hd,
                       (long long)mc->out_channels, (long long)mc->cond_channels,
                       k5 ? "kandinsky5 takes 1 to 4096, 1 to 65536, at least 1, 1, a multiple of 16 up to 256 (axes "
                       "hd / 4, 3 hd / 8, 3 hd / 8), 0 (= in_visual_dim) and 0 or in_visual_dim + 1"
                          : "only kandinsky5 has them (0, 0)");
    const bool anima = model_anima(mc);
    if (anima ? mc->source_len < 1 || mc->source_dim < 1 || mc->text_min_len < 0 || mc->refiner_depth < 1 ||
                    mc->refiner_depth > MODEL_REFINER_MAX || mc->text_dim % mc->heads || mc->text_dim / mc->heads % 2
              : mc->source_len || mc->source_dim || mc->text_min_len)
        return st_fail(ST_ERR_INVALID, "the text conditioner's Qwen tokens %lld, source_dim %lld, min_sequence_length "
                       "%lld, blocks %lld, width %lld over %lld heads; %s", (long long)mc->source_len,
                       (long long)mc->source_dim, (long long)mc->text_min_len, (long long)mc->refiner_depth,
                       (long long)mc->text_dim, (long long)mc->heads, anima ? "anima takes at least 1, 1, 0, 1 to "
                       "8 blocks, and an even head width" : "only anima has one (0, 0, 0)");
    const st_status animate = check_animate(mc);
    if (animate) return animate;
    const st_status unet = check_unet(mc);
    if (unet) return unet;
    const bool anim = model_wan_animate(mc); /* its image_dim and condition channels are its own */
    if ((hv15 && (mc->text2_len < 1 || mc->text2_dim < 1 || mc->image_dim < 1 || mc->cond_channels < 0)) ||
        (!hv15 && (mc->text2_len || mc->text2_dim || (mc->image_dim && !anim && !model_cascade(mc)) ||
                   (mc->cond_channels && !ace && !k5 && !anim))))
        return st_fail(ST_ERR_INVALID, "text_embed_2_dim %lld, ByT5 tokens %lld, image_embed_dim %lld, condition "
                       "channels %lld; %s", (long long)mc->text2_dim, (long long)mc->text2_len, (long long)mc->image_dim,
                       (long long)mc->cond_channels, hv15 ? "hunyuanvideo15 takes at least 1 of the first three"
                                                          : "only hunyuanvideo15 has them (0)");
    const bool refines = hv || anima || lumina || mh; /* anima's text conditioner, lumina2's and minimaxh3's refiners
                                                         have blocks too */
    if (!model_krea2(mc) && /* its refiner blocks are checked with its text fusion */
        (mc->refiner_depth < (refines ? 1 : 0) || mc->refiner_depth > (refines ? MODEL_REFINER_MAX : 0)))
        return st_fail(ST_ERR_INVALID, "num_refiner_layers: %lld; %s %d", (long long)mc->refiner_depth,
                       refines ? "hunyuanvideo's token refiner, anima's text conditioner and lumina2's refiners have "
                                 "from 1 block to"
                               : "only hunyuanvideo has a token refiner (anima a text conditioner): blocks at most",
                       refines ? MODEL_REFINER_MAX : 0);
    if (mc->frames < 1 || mc->patch_t < 1 || mc->frames % mc->patch_t || (!model_video(mc) && !ace && mc->frames > 1))
        return st_fail(ST_ERR_INVALID, "num_frames: %lld latent frames, patch_size_t %lld; %s", (long long)mc->frames,
                       (long long)mc->patch_t, model_video(mc) || ace ? "the patch's frames must divide the latent's"
                                                                : "an image family takes 1 frame");
    return ST_OK;
}

/* SimpleTuner's resolution as a square image edge in pixels: `area` is megapixels, with its round values read
 * as SimpleTuner maps them (1.0 -> 1024 x 1024); `pixel` and `pixel_area` are the edge itself. */
static double image_edge(double resolution, const char *type)
{
    if (strcmp(type, "area")) return resolution;
    static const double mapped[][2] = {{0.25, 512}, {0.5, 768}, {1.0, 1024}, {2.0, 1536}, {4.0, 2048}};
    for (size_t i = 0; i < sizeof mapped / sizeof *mapped; i++)
        if (fabs(resolution - mapped[i][0]) < 0.05) return mapped[i][1];
    return sqrt(resolution * 1e6);
}

/* A folder with config.json, itself or in transformer/ (a folder without one is the weight loader's to refuse). */
static bool has_diffusers_config(const char *dir)
{
    char p[4096];
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) return false;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (!access(p, R_OK)) return true;
    snprintf(p, sizeof p, "%s/transformer/config.json", dir);
    return !access(p, R_OK);
}

st_status model_config_from(const config *cfg, model_config *mc)
{
    /* model_family alone picks its preset: a SimpleTuner family's flavour's (its real sizes), segtrain's own
     * families' tiny one; both given must agree */
    const char *family = config_string(cfg, "model_family"), *preset = config_string(cfg, "model_preset");
    const char *flavour = config_string(cfg, "model_flavour");
    st_status st = model_family_check(family, flavour);
    if (st) return st;
    char own[32];
    if (config_is_set(cfg, "model_family") && !config_is_set(cfg, "model_preset") &&
        !(preset = model_family_preset(family, flavour, own, sizeof own)))
        snprintf(own, sizeof own, "%s-tiny", family), preset = own;
    st = model_preset(preset, mc);
    if (st) return st;
    if (config_is_set(cfg, "model_family") && strcmp(family, mc->family) && !model_family_builds(family, mc->family))
        return st_fail(ST_ERR_INVALID, "model_preset: %s belongs to the %s family, but model_family is %s", preset, mc->family,
                       family);
    /* a diffusers folder of weights brings its own architecture; the keys below still override it */
    const char *weights = config_string(cfg, "pretrained_model_name_or_path");
    if (*weights && model_reads_diffusers(mc) && has_diffusers_config(weights) && (st = model_read_diffusers(weights, mc))) {
        char why[1024];
        snprintf(why, sizeof why, "%s", st_error());
        return st_fail(st, "pretrained_model_name_or_path: %s", why);
    }
    const struct {
        const char *key;
        int64_t *field;
    } sizes[] = {{"depth", &mc->depth},          {"hidden_size", &mc->hidden},   {"num_heads", &mc->heads},
                 {"patch_size", &mc->patch},     {"in_channels", &mc->channels}, {"vae_scale_factor", &mc->vae_scale},
                 {"num_classes", &mc->classes},  {"num_single_layers", &mc->single_depth},
                 {"tokenizer_max_length", &mc->text_len}, {"text_vocab_size", &mc->text_vocab},
                 {"joint_attention_dim", &mc->text_dim}, {"pooled_projection_dim", &mc->pooled_dim}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (config_int(cfg, sizes[i].key) > 0) *sizes[i].field = config_int(cfg, sizes[i].key); /* 0: the preset's */
    /* a video VAE keeps the first frame and one in every scale_t after it (HunyuanVideo's and Wan's 4, LTX's 8) */
    const int64_t frames = config_int(cfg, "num_frames"), scale_t = model_vae_scale_t(mc);
    if (model_audio(mc) && config_is_set(cfg, "num_frames")) mc->frames = frames; /* audio: the clip's latent frames; else the preset's */
    const family_desc *d = family_of_config(mc);
    if (d->latent_frames) { /* a VAE of its own chunking (MiniMax-H3's) */
        if ((st = d->latent_frames(mc, frames))) return st;
    } else if (frames > 1 && !model_audio(mc) && (!model_video(mc) || (frames - 1) % scale_t))
        return st_fail(ST_ERR_INVALID, "num_frames: %lld; %s %lld k + 1 frames (its VAE keeps the first and every "
                       "%lldth after it)", (long long)frames, model_video(mc) ? "this video family takes" :
                       "an image family takes 1, not", (long long)scale_t, (long long)scale_t);
    /* a preset's own frames are the tests'; Wan Animate (a config with face adapters) keeps its preset's unless told
     * (it takes at least 2) */
    if (model_video(mc) && !d->latent_frames && (mc->face_every <= 0 || config_is_set(cfg, "num_frames")))
        mc->frames = 1 + (frames - 1) / scale_t;
    const double resolution = config_float(cfg, "resolution");
    if (resolution > 0 && !model_audio(mc)) { /* audio has no edge: SimpleTuner's audio path ignores it too */
        const double edge = image_edge(resolution, config_string(cfg, "resolution_type"));
        const int64_t patches = llround(edge / (double)(mc->vae_scale * mc->patch));
        mc->resolution = (patches > 1 ? patches : 1) * mc->patch;
    }
    /* the axes follow a head width that the keys above changed; a preset's or a folder's own stand otherwise, and
     * model_config_check refuses a folder whose axes do not fill its heads */
    const bool width_set = config_int(cfg, "hidden_size") > 0 || config_int(cfg, "num_heads") > 0;
    const int64_t *ax = mc->rope_axes;
    if (width_set && mc->heads > 0 && d->topology == TOPO_DUAL && !d->sincos &&
        ax[0] + ax[1] + ax[2] + ax[3] != mc->hidden / mc->heads)
        model_rope_axes(mc);
    mc->guidance = config_float(cfg, "flux_guidance_value");
    mc->mechanism = strcmp(config_string(cfg, "attention_mechanism"), "math") ? ATTN_FLASH : ATTN_MATH;
    if (!strcmp(config_string(cfg, "model_type"), "lora")) {
        const char *target = config_string(cfg, "lora_target");
        if (strcmp(target, "attention") && strcmp(target, "mlp") && strcmp(target, "attention+mlp") &&
            strcmp(target, "all"))
            return st_fail(ST_ERR_INVALID, "lora_target: \"%s\" is not one of attention, mlp, attention+mlp, all",
                           target);
        mc->lora_rank = config_int(cfg, "lora_rank");
        mc->lora_alpha = config_float(cfg, "lora_alpha") > 0 ? config_float(cfg, "lora_alpha") : (double)mc->lora_rank;
        mc->lora_attention = strcmp(target, "mlp") != 0;
        mc->lora_mlp = strcmp(target, "attention") != 0;
    }
    const char *precision = config_string(cfg, "mixed_precision");
    if (!strcmp(precision, "fp16") || !strcmp(precision, "fp8"))
        return st_fail(ST_ERR_UNSUPPORTED, "mixed_precision %s: segtrain holds a frozen base in bf16 (mixed_precision "
                       "bf16) or in float (no); %s weights are not built", precision, precision);
    mc->bf16_base = !strcmp(precision, "bf16") && mc->lora_rank > 0;
    if (!strcmp(config_string(cfg, "distillation_method"), "anyflow")) {
        /* the delta embedder's gate and input are the distillation's, as SimpleTuner's
         * enable_flowmap_time_conditioning sets them */
        if (!mc->anyflow)
            return st_fail(ST_ERR_UNSUPPORTED, "distillation_method anyflow: %s has no delta embedder; it needs "
                           "AnyFlow's transformer (AnyFlowTransformer3DModel: a wan-anyflow preset, or its folder). "
                           "SimpleTuner copies time_embedder into a new delta embedder on a plain Wan; segtrain "
                           "does not", *mc->preset ? mc->preset : mc->family);
        mc->anyflow_gate = config_float(cfg, "distillation_config.gate_value");
        mc->anyflow_interval = !strcmp(config_string(cfg, "distillation_config.deltatime_type"), "t-r");
    }
    return model_config_check(mc);
}
