/* Wan (WanTransformer3DModel, and its VACE, AnyFlow and Animate classes): xattn/xdit.c's steps, wan_animate.c's
 * Animate parts. */
#include <stdio.h>
#include <string.h>
#include <math.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"

/* VACE's control branch (WanVACETransformer3DModel), and Animate (WanAnimateTransformer3DModel): their configs have
 * control blocks and face adapters */
static bool vace(const model_config *mc) { return mc->vace_count > 0; }
static bool animate(const model_config *mc) { return mc->face_every > 0; }

static int64_t wan_cond_len(const model_config *mc)
{
    const int64_t plane = mc->height * mc->width;
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

static const family_preset presets[] = {
    {"wan-tiny", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, false, 0, 0},
    {"wan-1.3b", 30, 1536, 12, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    {"wan-14b", 40, 5120, 40, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    /* Wan 2.1 VACE 1.3B and 14B (Wan-AI/Wan2.1-VACE-*-diffusers): the T2V backbones with a control branch of 15 blocks
     * (a hint every 2nd block) and 8 (every 5th), 96 control channels; set in its preset hook below */
    {"wan-vace-tiny", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, false, 0, 0},
    /* NVIDIA's AnyFlow-Wan2.1-T2V-1.3B and -14B: the T2V backbones with AnyFlow's delta embedder (gate 0.25) */
    {"wan-anyflow-tiny", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, false, 0, 0},
    {"wan-anyflow-1.3b", 30, 1536, 12, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    {"wan-anyflow-14b", 40, 5120, 40, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    {"wan-vace-1.3b", 30, 1536, 12, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    /* Wan 2.2 Animate 14B (Wan-AI/Wan2.2-Animate-14B-Diffusers): the 14B backbone with its image-to-video inputs, the
     * motion and face encoders and a face adapter every 5th block, set in its preset hook below; 21 latent frames (a 77-frame
     * segment and the reference). The tiny one is the fixture's, with the class's 512 text tokens. */
    {"wan-animate-tiny", 2, 64, 4, 2, 4, 8, 10, 0, 512, 32, 0, false, false, 0, 0},
    {"wan-animate-14b", 40, 5120, 40, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    {"wan-vace-14b", 40, 5120, 40, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
};

static void wan_preset(model_config *mc, const char *name, bool tiny)
{
    mc->ffn_dim = tiny ? 0 : strstr(name, "14b") ? 13824 : 8960, mc->frames = tiny ? 2 : 1;
    if (!strncmp(name, "wan-anyflow", 11)) mc->anyflow = true, mc->anyflow_gate = 0.25;
    if (!strncmp(name, "wan-animate", 11)) {
        static const int64_t real[9] = {512, 512, 512, 512, 256, 128, 64, 32, 16}, small[9] = {8, 6, 4};
        memcpy(mc->motion_channels, tiny ? small : real, sizeof real);
        mc->frames = 3 + !tiny * 18, mc->image_tokens = tiny ? 5 : 257, mc->image_dim = tiny ? 16 : 1280;
        mc->cond_channels = mc->channels + 4, mc->face_every = tiny ? 1 : 5, mc->face_size = tiny ? 16 : 512;
        mc->motion_style = tiny ? 16 : 512, mc->motion_dim = tiny ? 4 : 20, mc->motion_out = tiny ? 12 : 512;
        mc->face_hidden = tiny ? 8 : 1024, mc->face_heads = tiny ? 2 : 4;
    }
    if (!strncmp(name, "wan-vace", 8)) {
        const bool big = strstr(name, "14b") != NULL;
        mc->vace_count = tiny ? 2 : big ? 8 : 15, mc->vace_every = tiny ? 1 : big ? 5 : 2;
        mc->vace_channels = tiny ? 8 : 96;
    }
}

/* Animate's sizes (WanAnimateTransformer3DModel) */
static st_status wan_animate_check(const model_config *mc)
{
    const int64_t *ch = mc->motion_channels;
    bool channels = true;
    int64_t log = 2;
    while (((int64_t)1 << log) < mc->face_size && log < 10) log++;
    for (int64_t k = 0; k <= log - 2; k++) channels = channels && ch[k] >= 1 && ch[k] <= (1 << 16);
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

/* its VACE flavours' control branch; Animate's sizes; a plain wan has no reference image or condition latents */
static st_status wan_check(const model_config *mc)
{
    if (mc->vace_count < 0 || mc->vace_every < 0 || mc->vace_channels < 0 || mc->vace_channels > (1 << 16) ||
        (mc->vace_count && (mc->vace_every < 1 || (mc->vace_count - 1) * mc->vace_every >= mc->depth ||
                            mc->vace_channels < 1)))
        return family_refuse(mc, GROUP_VACE, "wan's VACE hints land on main blocks 0, k, 2k, ... inside its depth, "
                             "with 1 to 65536 control channels");
    st_status st = animate(mc) ? wan_animate_check(mc) : ST_OK;
    if (!st && !animate(mc) && (mc->image_dim || mc->cond_channels))
        st = family_refuse(mc, GROUP_TEXT2, "only hunyuanvideo15 has them (0)");
    return st;
}

/* WanTransformer3DModel's config: its defaults (Wan 2.1 T2V 14B's), then the file's values; the image-to-video
 * branches (image_dim, added_kv_proj_dim) and what the published text-to-video configs do not vary are refused. */
/* Wan's keys; with animate, WanAnimateTransformer3DModel's defaults and in_channels = 2 latent_channels + 4 */
static st_status wan_read(const cJSON *j, const char *file, model_config *mc, bool animate)
{
    int64_t hd = 128, heads = 40, out = 16, freq = 256, rope_len = 1024, latent = 16;
    mc->channels = animate ? 36 : 16, mc->depth = 40, mc->text_dim = 4096, mc->ffn_dim = 13824, mc->patch = 2;
    mc->patch_t = 1;
    const json_key keys[] = {{"num_attention_heads", &heads}, {"attention_head_dim", &hd},
                             {"in_channels", &mc->channels}, {"out_channels", &out}, {"text_dim", &mc->text_dim},
                             {"freq_dim", &freq}, {"ffn_dim", &mc->ffn_dim}, {"num_layers", &mc->depth},
                             {"rope_max_seq_len", &rope_len}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_fixed(j, file, "eps", 1e-6, "Wan");
    if (!st) st = json_fixed_text(j, file, "qk_norm", "rms_norm_across_heads", "Wan");
    if (st) return st;
    if ((st = json_patch_3d(j, file, mc))) return st;
    static const char *const branches[] = {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"};
    for (size_t i = animate ? 2 : 0; i < sizeof branches / sizeof *branches; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, branches[i]);
        if (x && !cJSON_IsNull(x))
            return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is set (an image-to-video model's image branch); segtrain builds "
                           "Wan's text-to-video transformer, where it is null", file, branches[i]);
    }
    if (animate && (st = json_int(j, file, "latent_channels", &latent))) return st;
    if (animate && mc->channels != 2 * latent + 4)
        return st_fail(ST_ERR_FORMAT, "%s: in_channels %lld is not 2 latent_channels (%lld) + 4", file,
                       (long long)mc->channels, (long long)latent);
    if (animate) mc->cond_channels = mc->channels - latent, mc->channels = latent;
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(j, "cross_attn_norm");
    if ((cn && !cJSON_IsTrue(cn)) || freq != DIT_FREQ_DIM || out != mc->channels)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: cross_attn_norm %s, freq_dim %lld, out_channels %lld; segtrain builds "
                       "Wan's with cross_attn_norm true, freq_dim 256 and out_channels = in_channels (%lld)", file,
                       cn && !cJSON_IsTrue(cn) ? "false" : "true", (long long)freq, (long long)out,
                       (long long)mc->channels);
    mc->heads = heads, mc->hidden = hd * heads, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    if (mc->ffn_dim == 4 * mc->hidden) mc->ffn_dim = 0;
    mc->vace_count = mc->vace_every = mc->vace_channels = 0;
    mc->anyflow = mc->anyflow_interval = false, mc->anyflow_gate = 0;
    if (!animate) {
        mc->cond_channels = mc->image_tokens = mc->image_dim = mc->face_every = mc->face_size = 0;
        mc->motion_style = mc->motion_dim = mc->motion_out = mc->face_hidden = mc->face_heads = 0;
        memset(mc->motion_channels, 0, sizeof mc->motion_channels);
    }
    return ST_OK;
}

static st_status wan_from_json(const cJSON *j, const char *file, model_config *mc) { return wan_read(j, file, mc, false); }

/* WanAnimateTransformer3DModel's config: Wan's, its image-to-video inputs (image_dim; added_kv_proj_dim must be the
 * hidden width, as the published config's is: without it the class would read the image tokens as text), its
 * motion encoder's (motion_encoder_channel_sizes by edge as text, "4" to "1024"), its face encoder's and
 * inject_face_latents_blocks; the image tokens are CLIP's 257 unless mc says. */
static st_status wan_animate_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = wan_read(j, file, mc, true);
    int64_t added = -1, image_dim = 1280, size = 512, style = 512, motion = 20, out = 512, hid = 1024, heads = 4,
            every = 5;
    static const int64_t real[9] = {512, 512, 512, 512, 256, 128, 64, 32, 16}; /* the class's default table */
    const json_key keys[] = {{"image_dim", &image_dim}, {"added_kv_proj_dim", &added}, {"motion_encoder_size", &size},
                             {"motion_style_dim", &style}, {"motion_dim", &motion}, {"motion_encoder_dim", &out},
                             {"face_encoder_hidden_dim", &hid}, {"face_encoder_num_heads", &heads},
                             {"inject_face_latents_blocks", &every}};
    if (!st) st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (st) return st;
    const cJSON *idim = cJSON_GetObjectItemCaseSensitive(j, "image_dim");
    if (added != mc->hidden || (idim && cJSON_IsNull(idim))) {
        char a[24] = "null";
        if (added >= 0) snprintf(a, sizeof a, "%lld", (long long)added);
        return st_fail(ST_ERR_UNSUPPORTED, "%s: added_kv_proj_dim %s, image_dim %s; segtrain builds Wan Animate with "
                       "the image tokens' added keys and values of the hidden width %lld, as its published config has "
                       "them", file, a, idim && cJSON_IsNull(idim) ? "null" : "set", (long long)mc->hidden);
    }
    memcpy(mc->motion_channels, real, sizeof real);
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "motion_encoder_channel_sizes");
    if (ch && !cJSON_IsNull(ch)) {
        if (!cJSON_IsObject(ch))
            return st_fail(ST_ERR_FORMAT, "%s: motion_encoder_channel_sizes is not an object of edge: channels", file);
        memset(mc->motion_channels, 0, sizeof mc->motion_channels);
        for (int k = 0; k < 9; k++) {
            char edge[8];
            snprintf(edge, sizeof edge, "%d", 4 << k);
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(ch, edge);
            if (v && (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (1 << 16) ||
                      v->valuedouble != floor(v->valuedouble)))
                return st_fail(ST_ERR_FORMAT, "%s: motion_encoder_channel_sizes[\"%s\"] is not a whole number 1 to "
                               "65536", file, edge);
            if (v) mc->motion_channels[k] = (int64_t)v->valuedouble;
        }
    }
    if (!mc->image_tokens) mc->image_tokens = 257;
    mc->image_dim = image_dim, mc->face_size = size, mc->motion_style = style, mc->motion_dim = motion;
    mc->motion_out = out, mc->face_hidden = hid, mc->face_heads = heads, mc->face_every = every;
    return ST_OK;
}

/* AnyFlowTransformer3DModel's config (NVIDIA's bidirectional AnyFlow-Wan2.1-T2V): Wan's, then gate_value (0.25) and
 * deltatime_type ("r" or "t-r"). */
static st_status anyflow_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = wan_from_json(j, file, mc);
    if (st) return st;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "gate_value");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "deltatime_type");
    mc->anyflow = true, mc->anyflow_gate = 0.25, mc->anyflow_interval = false;
    if (g && !cJSON_IsNull(g)) {
        if (!cJSON_IsNumber(g) || !(g->valuedouble >= 0 && g->valuedouble <= 1))
            return st_fail(ST_ERR_FORMAT, "%s: gate_value is not a number from 0 to 1", file);
        mc->anyflow_gate = g->valuedouble;
    }
    if (dt && !cJSON_IsNull(dt)) {
        if (!cJSON_IsString(dt) || (strcmp(dt->valuestring, "r") && strcmp(dt->valuestring, "t-r")))
            return st_fail(ST_ERR_FORMAT, "%s: deltatime_type is not \"r\" or \"t-r\"", file);
        mc->anyflow_interval = !strcmp(dt->valuestring, "t-r");
    }
    return ST_OK;
}

/* WanVACETransformer3DModel's config: Wan's, then its control branch: vace_layers (its default, 0, 5, ..., 35, is
 * the 14B's) must be 0, k, 2k, ... (every published VACE's is), vace_in_channels (96). */
static st_status wan_vace_from_json(const cJSON *j, const char *file, model_config *mc)
{
    st_status st = wan_from_json(j, file, mc);
    int64_t layers[64] = {0, 5, 10, 15, 20, 25, 30, 35}, n = 8, channels = 96;
    if (!st) st = json_int(j, file, "vace_in_channels", &channels);
    if (st) return st;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "vace_layers");
    if (v && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1 || cJSON_GetArraySize(v) > 64))
        return st_fail(ST_ERR_FORMAT, "%s: vace_layers is not a list of 1 to 64 block indices", file);
    if (v) {
        n = cJSON_GetArraySize(v);
        if ((st = json_axes(j, file, "vace_layers", (int)n, layers))) return st;
    }
    const int64_t every = n > 1 ? layers[1] : 1;
    for (int64_t i = 0; i < n; i++)
        if (layers[i] != i * every || every < 1)
            return st_fail(ST_ERR_UNSUPPORTED, "%s: vace_layers [%lld, %lld, ...] are not 0, k, 2k, ...; segtrain "
                           "builds VACE's hints every k blocks from block 0, as every published VACE has them", file,
                           (long long)layers[0], (long long)(n > 1 ? layers[1] : 0));
    mc->vace_count = n, mc->vace_every = every, mc->vace_channels = channels;
    return ST_OK;
}

const family_desc wan_desc = {
    .name = "wan", .topology = TOPO_XATTN, .traits = TR_TEXT | TR_VIDEO | TR_FRAMES_8K1 | TR_UNPOOLED,
    .outside_blocks = (const char *const[]){"vace_blocks.0.proj_in.", NULL},
    .st = {{.name = "wan", .title = "Wan", .diffusers = "WanTransformer3DModel",
            .flavours = "t2v-480p-1.3b-2.1|t2v-480p-14b-2.1|i2v-14b-2.1|i2v-14b-2.1-720p|i2v-14b-2.2-high|i2v-14b-2.2-low|"
                        "animegen-t2v-high|animegen-t2v-low|flf2v-14b-2.1|vace-1.3b-2.1|vace-14b-2.1|ti2v-5b-2.2",
            .built = "t2v-480p-1.3b-2.1:wan-1.3b|t2v-480p-14b-2.1:wan-14b|animegen-t2v-high:wan-14b|animegen-t2v-low:wan-14b|"
                     "vace-1.3b-2.1:wan-vace-1.3b|vace-14b-2.1:wan-vace-14b",
            .fallback = "t2v-480p-1.3b-2.1",
            .why = "the i2v and flf2v flavours also take reference frames (CLIP image tokens, conditioning latents) and "
                   "ti2v-5b-2.2 per-token timesteps and a 48-channel VAE; segtrain's conditioning carries no reference",
            .example = "wan-1.3b.peft-lora+TREAD.json", .tiny = "wan-tiny",
            .shape = "832x480@81"}}, /* SimpleTuner's Wan quickstart: 832x480 */
    .uncached_of = wan_uncached, .cond_len = wan_cond_len, .condition = wan_condition, .describe_blocks = wan_blocks,
    .ops = &xdit_family, .topology_options = &(const xdit_options){.wan = true}, FAMILY_PRESETS(presets),
    .quanto_exclude = quanto_exclude_video, .swap_blocks = {"blocks"},
    .preset = wan_preset,
    .readers = {{"WanTransformer3DModel", wan_from_json},
                {"WanVACETransformer3DModel", wan_vace_from_json},
                {"AnyFlowTransformer3DModel", anyflow_from_json},
                {"WanAnimateTransformer3DModel", wan_animate_from_json}},
    .fields = F_FFN | F_VACE | F_ANIMATE | F_IMAGE_DIM | F_COND_CHANNELS, .check = wan_check,
};
