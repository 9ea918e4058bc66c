/* Model families by SimpleTuner's names, and SimpleTuner's meaning of `resolution`: from a config to a model
 * configuration (model_config_from). A family whose topology is not built is refused in one line that names the
 * family, the topology it needs and that it is planned; every family name is documented in docs/FAMILIES.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "segtrain/config.h"
#include "segtrain/model.h"
#include "testkit.h"

/* model_config_from of a JSON config; the status, with the model configuration in *mc. */
static st_status from_json(const char *json, model_config *mc)
{
    config *c = NULL;
    st_status s = config_parse(json, "config.json", &c);
    CHECKF(s == ST_OK, "parse %s: %s", json, st_error());
    if (s) return s;
    s = model_config_from(c, mc);
    config_free(c);
    return s;
}

static void expect_edge(int line, const char *json, int64_t want_resolution)
{
    model_config mc;
    st_status s = from_json(json, &mc);
    CHECKF(s == ST_OK && mc.height == want_resolution && mc.width == want_resolution, "line %d: %s: input edge %lld "
           "(%s), want %lld", line, json, s ? -1LL : (long long)mc.height, s ? st_error() : "ok", (long long)want_resolution);
}
#define EXPECT_EDGE(json, want) expect_edge(__LINE__, json, want)

static void expect_refusal(int line, const char *json, st_status want, const char *const *pieces)
{
    model_config mc;
    st_status s = from_json(json, &mc);
    CHECKF(s == want, "line %d: %s: status %d (%s), want %d", line, json, (int)s, st_error(), (int)want);
    for (; *pieces; pieces++)
        CHECKF(strstr(st_error(), *pieces), "line %d: %s: message lacks '%s': %s", line, json, *pieces, st_error());
    CHECKF(!strchr(st_error(), '\n'), "line %d: a refusal is one line: %s", line, st_error());
}
#define EXPECT_REFUSAL(json, want, ...)                                                                                \
    expect_refusal(__LINE__, json, want, (const char *const[]){__VA_ARGS__, NULL})

/* `resolution` is the image edge in pixels (SimpleTuner's meaning), the model's input edge that over the VAE's
 * downscale factor: resolution 1024 on dit-s2 is 128 latent pixels, 4096 tokens, never 262,144. */
static void test_resolution(void)
{
    model_config mc;
    CHECK(from_json("{\"model_preset\": \"dit-s2\"}", &mc) == ST_OK && mc.height == 32 && mc.width == 32 && mc.vae_scale == 8);
    EXPECT_EDGE("{\"model_preset\": \"dit-s2\", \"resolution\": 1024}", 128);
    CHECK(from_json("{\"model_preset\": \"dit-s2\", \"resolution\": 1024}", &mc) == ST_OK &&
          (mc.height / mc.patch) * (mc.width / mc.patch) == 4096);
    EXPECT_EDGE("{\"model_preset\": \"dit-s2\", \"resolution\": 256, \"resolution_type\": \"pixel\"}", 32);
    EXPECT_EDGE("{\"model_preset\": \"dit-s2\", \"resolution\": 1.0, \"resolution_type\": \"area\"}", 128);
    EXPECT_EDGE("{\"model_preset\": \"dit-s2\", \"resolution\": 0.25, \"resolution_type\": \"area\"}", 64);
    /* within 0.05 of a round value, SimpleTuner reads that value; 0.36 megapixels is not: sqrt(360000) = 600 px,
     * 37.5 patches of 16 px, rounded to 38 */
    EXPECT_EDGE("{\"model_preset\": \"dit-s2\", \"resolution\": 0.3, \"resolution_type\": \"area\"}", 64);
    EXPECT_EDGE("{\"model_preset\": \"dit-s2\", \"resolution\": 0.36, \"resolution_type\": \"area\"}", 76);
    /* rounded to the nearest whole patch of vae x patch = 16 px, and at least one patch */
    EXPECT_EDGE("{\"model_preset\": \"dit-s2\", \"resolution\": 1000}", 126);
    EXPECT_EDGE("{\"model_preset\": \"dit-s2\", \"resolution\": 3}", 2);
    /* pixel space: what training on images needs */
    EXPECT_EDGE("{\"model_preset\": \"dit-tiny\", \"in_channels\": 3, \"vae_scale_factor\": 1, \"resolution\": 32}", 32);
    EXPECT_EDGE("{\"model_preset\": \"mmdit-tiny\", \"vae_scale_factor\": 16, \"resolution\": 512}", 32);
}

static void test_families(void)
{
    model_config mc;
    /* segtrain's own topologies, as before */
    CHECK(from_json("{\"model_family\": \"mmdit\"}", &mc) == ST_OK && !strcmp(mc.preset, "mmdit-tiny"));
    CHECK(from_json("{\"model_family\": \"skipdit\", \"model_preset\": \"skipdit-s\"}", &mc) == ST_OK);
    /* a SimpleTuner file planned on a built topology keeps its flavour, which they do not have */
    CHECK(from_json("{\"model_family\": \"mmdit\", \"model_flavour\": \"dev\"}", &mc) == ST_OK);
    /* a built SimpleTuner family: its flavour's real sizes, SimpleTuner's default flavour (krea, Flux dev's shape)
     * when none is given; a flavour not built is refused by name */
    CHECK(from_json("{\"model_family\": \"flux\"}", &mc) == ST_OK && !strcmp(mc.preset, "flux-dev") &&
          mc.guidance_embeds && mc.hidden == 3072 && mc.rope_axes[0] == 16 && mc.rope_axes[1] == 56);
    CHECK(from_json("{\"model_family\": \"flux\", \"model_flavour\": \"schnell\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "flux-schnell") && !mc.guidance_embeds && mc.text_len == 256);
    CHECK(from_json("{\"model_family\": \"flux\", \"model_preset\": \"flux-tiny\"}", &mc) == ST_OK && mc.hidden == 64);
    /* sd3: SimpleTuner's default flavour is 3.5 medium (qk norm, attn2 in blocks 0-12), large 3.5 large */
    CHECK(from_json("{\"model_family\": \"sd3\"}", &mc) == ST_OK && !strcmp(mc.preset, "sd35-medium") &&
          mc.qk_norm && mc.dual_attention == 13 && mc.pos_embed_max == 384 && mc.text_len == 77 + 154 &&
          mc.hidden == 1536 && mc.pooled_dim == 2048 && mc.channels == 16);
    CHECK(from_json("{\"model_family\": \"sd3\", \"model_flavour\": \"large\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "sd35-large") && mc.qk_norm && !mc.dual_attention && mc.depth == 38 && mc.hidden == 2432);
    CHECK(from_json("{\"model_family\": \"sd3\", \"model_preset\": \"sd3-medium\"}", &mc) == ST_OK &&
          !mc.qk_norm && !mc.dual_attention && mc.pos_embed_max == 192);
    EXPECT_REFUSAL("{\"model_family\": \"sd3\", \"model_preset\": \"sd3-tiny\", \"resolution\": 512, "
                   "\"vae_scale_factor\": 8}", ST_ERR_INVALID, "pos_embed_max_size: 16", "32 x 32 patch grid");
    CHECK(from_json("{\"model_family\": \"auraflow\"}", &mc) == ST_OK && !strcmp(mc.preset, "auraflow") &&
          mc.depth == 4 && mc.single_depth == 32 && mc.hidden == 3072 && mc.heads == 12 && mc.pos_embed_max == 96 &&
          mc.text_len == 120 && mc.text_dim == 2048 && !mc.pooled_dim && mc.channels == 4);
    EXPECT_REFUSAL("{\"model_family\": \"auraflow\", \"model_preset\": \"auraflow-tiny\", \"resolution\": 256, "
                   "\"vae_scale_factor\": 8}", ST_ERR_INVALID, "pos_embed_max_size: 8 x 8", "16 x 16 patch grid");
    EXPECT_REFUSAL("{\"model_family\": \"auraflow\", \"model_flavour\": \"pony\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour pony of auraflow (AuraFlow): not built yet", "v0.3:auraflow");
    /* longcat_image: LongCat-Image's published sizes for final and dev; edit needs reference-image tokens */
    CHECK(from_json("{\"model_family\": \"longcat_image\"}", &mc) == ST_OK && !strcmp(mc.preset, "longcat-image") &&
          mc.depth == 10 && mc.single_depth == 20 && mc.hidden == 3072 && mc.heads == 24 && mc.text_len == 512 &&
          mc.text_dim == 3584 && !mc.pooled_dim && !mc.guidance_embeds && mc.channels == 16 && mc.rope_axes[0] == 16);
    CHECK(from_json("{\"model_family\": \"longcat_image\", \"model_flavour\": \"dev\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "longcat-image"));
    EXPECT_REFUSAL("{\"model_family\": \"longcat_image\", \"model_flavour\": \"edit\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour edit of longcat_image (LongCat-Image): not built yet", "final:longcat-image");
    EXPECT_REFUSAL("{\"model_family\": \"longcat_image\", \"pooled_projection_dim\": 768}", ST_ERR_INVALID,
                   "pooled_projection_dim: 768", "longcat_image conditions on the timestep alone");
    /* chroma: Chroma1's published sizes for every flavour (base, SimpleTuner's default, hd, flash) */
    CHECK(from_json("{\"model_family\": \"chroma\"}", &mc) == ST_OK && !strcmp(mc.preset, "chroma") && mc.depth == 19 &&
          mc.single_depth == 38 && mc.hidden == 3072 && mc.text_len == 512 && mc.text_dim == 4096 && !mc.pooled_dim &&
          !mc.guidance_embeds && mc.approx_channels == 64 && mc.approx_hidden == 5120 && mc.approx_layers == 5);
    CHECK(from_json("{\"model_family\": \"chroma\", \"model_flavour\": \"flash\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "chroma"));
    /* its conditioning carries the text mask: the words and ChromaPipeline's first padding token */
    CHECK(model_preset("chroma-tiny", &mc) == ST_OK && model_text_mask(&mc) &&
          model_cond_len(&mc) == mc.text_len * (mc.text_dim + 1));
    float cond[8 * 33];
    model_condition(&mc, 0, "two words", cond);
    const float *tm = cond + mc.text_len * mc.text_dim;
    CHECKF(tm[0] == 1 && tm[1] == 1 && tm[2] == 1 && tm[3] == 0 && tm[7] == 0, "chroma's text mask %g %g %g %g", tm[0],
           tm[1], tm[2], tm[3]);
    /* qwen_image: Qwen-Image's sizes for v1.0 and v2.0 (SimpleTuner's default); the edit flavours are refused, why */
    CHECK(from_json("{\"model_family\": \"qwen_image\"}", &mc) == ST_OK && !strcmp(mc.preset, "qwen-image") &&
          mc.depth == 60 && !mc.single_depth && mc.hidden == 3072 && mc.heads == 24 && mc.text_dim == 3584 &&
          !mc.pooled_dim && mc.text_len == 1024 && mc.channels == 16 && mc.rope_axes[0] == 16 && mc.rope_axes[2] == 56);
    CHECK(from_json("{\"model_family\": \"qwen_image\", \"model_flavour\": \"v1.0\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "qwen-image"));
    CHECK(model_cond_len(&mc) == 1024 * (3584 + 1)); /* the sequence, then the mask */
    EXPECT_REFUSAL("{\"model_family\": \"qwen_image\", \"model_flavour\": \"edit-v3\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour edit-v3 of qwen_image (Qwen-Image): not built", "reference images' latents",
                   "zero_cond_t", "v1.0:qwen-image");
    EXPECT_REFUSAL("{\"model_family\": \"qwen_image\", \"pooled_projection_dim\": 768}", ST_ERR_INVALID,
                   "pooled_projection_dim: 768");
    EXPECT_REFUSAL("{\"model_family\": \"qwen_image\", \"num_single_layers\": 2}", ST_ERR_INVALID,
                   "num_single_layers: 2");
    EXPECT_REFUSAL("{\"model_family\": \"flux\", \"model_flavour\": \"kontext\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour kontext of flux (Flux.1): not built yet", "dev:flux-dev");
    EXPECT_REFUSAL("{\"model_family\": \"flux\", \"model_preset\": \"dit-s2\"}", ST_ERR_INVALID,
                   "dit-s2 belongs to the dit family");
    /* SimpleTuner's names: each names its topology and that it is planned */
    EXPECT_REFUSAL("{\"model_family\": \"infinitetalk\"}", ST_ERR_UNSUPPORTED, "model_family infinitetalk (",
                   "cross-attention DiT", "InfiniteTalkTransformer3DModel", "planned", "--set model_family=mmdit");
    EXPECT_REFUSAL("{\"model_family\": \"infinitetalk\"}", ST_ERR_UNSUPPORTED, "cross-attention DiT",
                   "InfiniteTalkTransformer3DModel");
    /* LTX-Video: both flavours are the 0.9.5 transformer, its VAE 8x in time (num_frames 8 k + 1) */
    CHECK(from_json("{\"model_family\": \"ltxvideo\"}", &mc) == ST_OK && !strcmp(mc.preset, "ltxvideo-0.9.5") &&
          mc.hidden == 2048 && mc.channels == 128 && mc.patch == 1 && mc.text_len == 226 && mc.vae_scale == 32);
    CHECK(from_json("{\"model_family\": \"ltxvideo\", \"model_flavour\": \"0.9.0\", \"num_frames\": 49}", &mc) ==
              ST_OK && !strcmp(mc.preset, "ltxvideo-0.9.5") && mc.frames == 7);
    EXPECT_REFUSAL("{\"model_family\": \"ltxvideo\", \"num_frames\": 21}", ST_ERR_INVALID, "num_frames: 21",
                   "8 k + 1");
    CHECK(from_json("{\"model_family\": \"wan\", \"num_frames\": 81}", &mc) == ST_OK && mc.frames == 21);
    /* Wan's VACE flavours: the T2V backbone with its control branch (a hint every 5th block of 40 for the 14B) */
    CHECK(from_json("{\"model_family\": \"wan\", \"model_flavour\": \"vace-14b-2.1\", \"num_frames\": 81}", &mc) ==
              ST_OK && !strcmp(mc.preset, "wan-vace-14b") && mc.vace_count == 8 && mc.vace_every == 5 &&
          mc.vace_channels == 96 && (mc.vace_count > 0) &&
          model_cond_len(&mc) == mc.text_len * mc.text_dim + 96 * 21 * mc.height * mc.width);
    CHECK(from_json("{\"model_family\": \"wan\", \"model_flavour\": \"vace-1.3b-2.1\"}", &mc) == ST_OK &&
          mc.vace_count == 15 && mc.vace_every == 2 && mc.hidden == 1536);
    /* LTX-2: dev (and its quantised files) is LTX-2.0's 19B; 121 frames are 16 latent frames and 121 audio latents */
    CHECK(from_json("{\"model_family\": \"ltxvideo2\", \"num_frames\": 121}", &mc) == ST_OK &&
          !strcmp(mc.preset, "ltxvideo2-19b") && mc.frames == 16 && model_audio_tokens(&mc) == 121 &&
          mc.audio_hidden == 2048 && mc.text_dim == 2 * 3840 && mc.text_len == 1024);
    CHECK(from_json("{\"model_family\": \"ltxvideo2\", \"model_flavour\": \"dev-fp8\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "ltxvideo2-19b"));
    EXPECT_REFUSAL("{\"model_family\": \"ltxvideo2\", \"model_flavour\": \"2.3-dev\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour 2.3-dev of ltxvideo2", "gated attention", "dev");
    CHECK(from_json("{\"model_family\": \"pixart\"}", &mc) == ST_OK && !strcmp(mc.family, "pixart_sigma") &&
          !strcmp(mc.preset, "pixart-900m-1024")); /* SimpleTuner's example folder's name, its default flavour */
    CHECK(from_json("{\"model_family\": \"wan\"}", &mc) == ST_OK && !strcmp(mc.preset, "wan-1.3b") &&
          mc.hidden == 1536 && mc.ffn_dim == 8960 && mc.text_len == 512);
    EXPECT_REFUSAL("{\"model_family\": \"wan\", \"model_flavour\": \"i2v-14b-2.1\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour i2v-14b-2.1 of wan", "reference frames");
    /* Anima: every flavour but the single-file 2.9B one is the 2B transformer with its 6-block conditioner */
    CHECK(from_json("{\"model_family\": \"anima\", \"model_flavour\": \"release\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "anima") && mc.hidden == 2048 && mc.refiner_depth == 6 && mc.text_vocab == 32128 &&
          mc.source_dim == 1024 && mc.text_min_len == 512);
    EXPECT_REFUSAL("{\"model_family\": \"anima\", \"model_flavour\": \"gazingstars123-2.9b\"}",
                   ST_ERR_UNSUPPORTED, "model_flavour gazingstars123-2.9b of anima", "single-file");
    /* Kandinsky 5 image: the t2i flavours are T2I Lite's transformer; the i2i ones take a reference image */
    CHECK(from_json("{\"model_family\": \"kandinsky5_image\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "kandinsky5-t2i-lite") && mc.depth == 50 && mc.text_blocks == 2 && mc.hidden == 2560 &&
          mc.heads == 20 && mc.time_dim == 512 && !mc.ffn_dim && mc.text_len == 256 && mc.text_dim == 3584 &&
          mc.pooled_dim == 768);
    CHECK(from_json("{\"model_family\": \"kandinsky5-image\", \"model_flavour\": \"t2i-lite-pretrain\"}", &mc) ==
              ST_OK && !strcmp(mc.preset, "kandinsky5-t2i-lite"));
    EXPECT_REFUSAL("{\"model_family\": \"kandinsky5_image\", \"model_flavour\": \"i2i-lite-sft\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour i2i-lite-sft of kandinsky5-image", "reference image");
    /* Kandinsky 5 video: the t2v flavours are T2V Lite's or Pro's transformer with visual_cond's zero channels (the
     * 10 s ones too: SimpleTuner trains them without sparse attention); the i2v ones take the first frame */
    CHECK(from_json("{\"model_family\": \"kandinsky5_video\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "kandinsky5-t2v-lite") && mc.depth == 32 && mc.text_blocks == 2 && mc.hidden == 1792 &&
          mc.heads == 28 && mc.time_dim == 512 && !mc.ffn_dim && mc.cond_channels == 17 && model_video(&mc));
    CHECK(from_json("{\"model_family\": \"kandinsky5-video\", \"model_flavour\": \"t2v-pro-sft-10s-hd\"}", &mc) ==
              ST_OK && !strcmp(mc.preset, "kandinsky5-t2v-pro") && mc.depth == 60 && mc.text_blocks == 4 &&
          mc.hidden == 4096 && mc.heads == 32 && mc.time_dim == 1024 && mc.cond_channels == 17);
    EXPECT_REFUSAL("{\"model_family\": \"kandinsky5_video\", \"model_flavour\": \"i2v-lite-5s\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour i2v-lite-5s of kandinsky5-video", "first frame");
    CHECK(from_json("{\"model_family\": \"kandinsky5_image\"}", &mc) == ST_OK && !model_video(&mc));
    CHECK(from_json("{\"model_family\": \"sanavideo\"}", &mc) == ST_OK && !strcmp(mc.preset, "sanavideo-2b-480p") &&
          model_video(&mc) && !strcmp(mc.family, "sanavideo"));
    /* SimpleTuner's adjust_video_frames (8 k + 1 frames) is in exactly these classes: Wan, LTX-Video (both), Sana
     * Video and LongCat-Video, read by the data's frame buckets as a trait */
    for (int i = 0; model_family_name(i); i++) {
        const char *f = model_family_name(i);
        const bool trims = !strcmp(f, "wan") || !strcmp(f, "ltxvideo") || !strcmp(f, "ltxvideo2") ||
                           !strcmp(f, "sanavideo") || !strcmp(f, "longcat_video");
        char json[160];
        snprintf(json, sizeof json, "{\"model_family\": \"%s\"}", f);
        if (from_json(json, &mc) != ST_OK) continue; /* a planned family, refused by name above and below */
        CHECKF(model_frames_8k1(&mc) == trims, "%s: model_frames_8k1 %d", f, (int)model_frames_8k1(&mc));
    }
    EXPECT_REFUSAL("{\"model_family\": \"sd2x\"}", ST_ERR_UNSUPPORTED, "U-Net", "UNet2DConditionModel");
    /* the refusal lists every built family, the last (alphabetically) too: the list is not cut short */
    EXPECT_REFUSAL("{\"model_family\": \"sd2x\"}", ST_ERR_UNSUPPORTED, "krea2", "wan, wan_s2v, z_image, zlab_i1; --set");
    EXPECT_REFUSAL("{\"model_family\": \"minimaxmusic\"}", ST_ERR_UNSUPPORTED, "builds heartmula",
                   "does not plan to build this one");
    EXPECT_REFUSAL("{\"model_family\": \"flux\", \"model_flavour\": \"pro\"}", ST_ERR_INVALID,
                   "model_flavour: \"pro\" is not a flavour of flux", "dev|krea|schnell");
    /* a flavour that is one of segtrain's preset sizes points at the preset */
    EXPECT_REFUSAL("{\"model_family\": \"flux\", \"model_flavour\": \"tiny\"}", ST_ERR_INVALID,
                   "model_flavour: \"tiny\" is not a flavour of flux", "give model_preset: flux-tiny");
    EXPECT_REFUSAL("{\"model_family\": \"pixart_sigma\", \"model_flavour\": \"tiny\"}", ST_ERR_INVALID,
                   "give model_preset: pixart-sigma-tiny");
    EXPECT_REFUSAL("{\"model_family\": \"qwen_image\", \"model_flavour\": \"tiny\"}", ST_ERR_INVALID,
                   "give model_preset: qwen-image-tiny");
    EXPECT_REFUSAL("{\"model_family\": \"flx\"}", ST_ERR_INVALID, "model_family: \"flx\"", "did you mean flux?");
    EXPECT_REFUSAL("{\"model_family\": \"Flux\"}", ST_ERR_INVALID, "did you mean flux?");
    /* every name model_family takes is refused or built, never unknown */
    int n = 0;
    for (const char *name; (name = model_family_name(n)); n++) {
        char json[128];
        snprintf(json, sizeof json, "{\"model_family\": \"%s\"}", name);
        st_status s = from_json(json, &mc);
        const bool built = n < 3 || !strcmp(name, "flux") || !strcmp(name, "sd3") || !strcmp(name, "auraflow") ||
                           !strcmp(name, "longcat_image") || !strcmp(name, "chroma") ||
                           !strcmp(name, "flux2") || !strcmp(name, "qwen_image") || !strcmp(name, "hidream") ||
                           !strcmp(name, "hunyuanvideo") || !strcmp(name, "pixart_sigma") || !strcmp(name, "wan") ||
                           !strcmp(name, "ltxvideo") || !strcmp(name, "ltxvideo2") || !strcmp(name, "cosmos2image") ||
                           !strcmp(name, "kandinsky5-image") || !strcmp(name, "kandinsky5-video") ||
                           !strcmp(name, "anima") || !strcmp(name, "lumina2") || !strcmp(name, "ernie") ||
                           !strcmp(name, "boogu_image") ||
                           !strcmp(name, "ideogram") || !strcmp(name, "omnigen") || !strcmp(name, "krea2") ||
                           !strcmp(name, "flux3_image") || !strcmp(name, "minimaxh3") || !strcmp(name, "cosmos3") ||
                           !strcmp(name, "sana") || !strcmp(name, "sanavideo") || !strcmp(name, "sd1x") ||
                           !strcmp(name, "sdxl") || !strcmp(name, "kolors") || !strcmp(name, "stable_cascade") ||
                           !strcmp(name, "zlab_i1") || !strcmp(name, "mageflow") || !strcmp(name, "wan_s2v") ||
                           !strcmp(name, "heartmula") || !strcmp(name, "longcat_video");
        /* z_image: its default flavour (a turbo one) is refused with the reason, its base built (test_zimage_json) */
        CHECKF(built ? s == ST_OK : s == ST_ERR_UNSUPPORTED, "%s: %d %s", name, (int)s, st_error());
    }
    CHECKF(n >= 40, "%d family names", n);
    /* every preset is a value the model_preset key takes */
    for (int i = 0; model_preset_name(i); i++) {
        char json[128];
        snprintf(json, sizeof json, "{\"model_preset\": \"%s\"}", model_preset_name(i));
        CHECKF(from_json(json, &mc) == ST_OK && !strcmp(mc.preset, model_preset_name(i)), "%s: %s", json, st_error());
    }
    /* a name that is not a preset: the nearest first, then every preset */
    EXPECT_REFUSAL("{\"model_preset\": \"dit-s3\"}", ST_ERR_INVALID, "model_preset: \"dit-s3\" is not one of its ",
                   " choices; nearest: dit-s2, dit-b2, dit-xl2 (all: dit-tiny, dit-s2,", "stable-cascade-c-lite");
    EXPECT_REFUSAL("{\"model_preset\": \"flux-dve\"}", ST_ERR_INVALID, "nearest: flux-dev, ");
    EXPECT_REFUSAL("{\"model_preset\": \"sdxl_tiny\"}", ST_ERR_INVALID, "nearest: sdxl-tiny, ");
}

/* Each config text bad[i][0], written to dir/file over preset's sizes, is refused (with `want`; 0: any failure) in
 * one line holding bad[i][1] (and naming the file, with named: model_config_check's refusals name only the key). */
static void expect_json_refusals(const char *dir, const char *file, const char *preset, const char *const (*bad)[2],
                                 size_t n, st_status want, bool named)
{
    for (size_t i = 0; i < n; i++) {
        model_config mc;
        tk_write_file(dir, file, bad[i][0]);
        CHECK(model_preset(preset, &mc) == ST_OK);
        const st_status s = model_config_from_diffusers(dir, &mc);
        CHECKF((want ? s == want : s != ST_OK) && strstr(st_error(), bad[i][1]) && (!named || strstr(st_error(), file)) &&
                   !strchr(st_error(), '\n'),
               "%s: %s", bad[i][0], st_error());
    }
}

/* AuraFlowTransformer2DModel's config.json: its class defaults under the file's values (v0.3's table), and
 * what segtrain does not read refused in one line naming it. */
static void test_auraflow_json(void)
{
    char dir[] = "/tmp/segtrain-auraflow-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    model_config mc;
    CHECK(model_preset("auraflow-tiny", &mc) == ST_OK);
    tk_write_file(dir, "config.json", "{\"_class_name\": \"AuraFlowTransformer2DModel\", \"pos_embed_max_size\": "
                                      "9216}"); /* v0.3's; the rest diffusers' defaults */
    mc.height = mc.width = 128;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 4 && mc.single_depth == 32 &&
               mc.hidden == 3072 && mc.heads == 12 && mc.text_dim == 2048 && mc.pos_embed_max == 96 && mc.patch == 2 &&
               mc.channels == 4 && !mc.pooled_dim, "%s", st_error());
#define AF "{\"_class_name\": \"AuraFlowTransformer2DModel\", "
    const char *bad[][2] = {
        {AF "\"pos_embed_max_size\": 1000}", "pos_embed_max_size 1000"}, /* not a square */
        {AF "\"caption_projection_dim\": 2048}", "caption_projection_dim 2048"},
        {AF "\"out_channels\": 8}", "out_channels 8"},
        {"{\"_class_name\": \"SD3Transformer2DModel\"}", "the auraflow family reads AuraFlowTransformer2DModel's"},
    };
#undef AF
    expect_json_refusals(dir, "config.json", "auraflow-tiny", bad, sizeof bad / sizeof *bad, ST_ERR_UNSUPPORTED, false);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* LongCatImageTransformer2DModel's config.json: the class defaults (Qwen2.5-VL's 3584-wide text) under the file's
 * values (LongCat-Image's 10 + 20 blocks); its stored pooled_projection_dim is no input. */
static void test_longcat_json(void)
{
    char dir[] = "/tmp/segtrain-longcat-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    model_config mc;
    CHECK(model_preset("longcat-image-tiny", &mc) == ST_OK);
    tk_write_file(dir, "config.json", "{\"_class_name\": \"LongCatImageTransformer2DModel\", \"num_layers\": 10, "
                                      "\"num_single_layers\": 20, \"pooled_projection_dim\": 3584}");
    mc.height = mc.width = 128;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 10 && mc.single_depth == 20 &&
               mc.hidden == 3072 && mc.heads == 24 && mc.text_dim == 3584 && !mc.pooled_dim && mc.channels == 16 &&
               mc.patch == 2 && mc.rope_axes[1] == 56, "%s", st_error());
    tk_write_file(dir, "config.json", "{\"_class_name\": \"FluxTransformer2DModel\"}");
    CHECK(model_preset("longcat-image-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_ERR_UNSUPPORTED &&
               strstr(st_error(), "the longcat_image family reads LongCatImageTransformer2DModel's"), "%s", st_error());
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* Kandinsky5Transformer3DModel's config.json: Kandinsky 5.0 T2I Lite's (as published) reads as the
 * kandinsky5-t2i-lite preset; visual_cond makes it a video model; another attention is refused by name. */
static void test_kandinsky5_json(void)
{
    char dir[] = "/tmp/segtrain-kandinsky5-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    model_config mc, want;
    CHECK(model_preset("kandinsky5-t2i-lite", &want) == ST_OK && model_preset("kandinsky5-image-tiny", &mc) == ST_OK);
    const char *lite = "{\"_class_name\": \"Kandinsky5Transformer3DModel\", \"in_visual_dim\": 16, \"out_visual_dim\": 16, "
                       "\"in_text_dim\": 3584, \"in_text_dim2\": 768, \"time_dim\": 512, \"patch_size\": [1, 2, 2], "
                       "\"model_dim\": 2560, \"ff_dim\": 10240, \"num_text_blocks\": 2, \"num_visual_blocks\": 50, "
                       "\"axes_dims\": [32, 48, 48], \"visual_cond\": %s, \"attention_type\": \"%s\"}";
    char json[600];
    snprintf(json, sizeof json, lite, "false", "regular");
    tk_write_file(dir, "config.json", json);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.text_blocks == want.text_blocks && mc.time_dim == want.time_dim &&
               mc.ffn_dim == want.ffn_dim && mc.channels == want.channels && mc.text_dim == want.text_dim &&
               mc.pooled_dim == want.pooled_dim && mc.patch == want.patch && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    /* T2V Lite 10 s's: visual_cond's reference channels, and the sparse attention SimpleTuner never asks for */
    snprintf(json, sizeof json, lite, "true", "nabla");
    tk_write_file(dir, "config.json", json);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.cond_channels == 17 && model_video(&mc) &&
               model_config_check(&mc) == ST_OK, "%s", st_error());
    snprintf(json, sizeof json, lite, "false", "flex");
    tk_write_file(dir, "config.json", json);
    CHECK(model_preset("kandinsky5-image-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_ERR_UNSUPPORTED && strstr(st_error(), "attention_type"), "%s",
           st_error());
    tk_write_file(dir, "config.json", "{\"_class_name\": \"Kandinsky5Transformer3DModel\", \"axes_dims\": [16, 16, 16]}");
    CHECK(model_preset("kandinsky5-image-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_ERR_UNSUPPORTED && strstr(st_error(), "axes_dims"), "%s",
           st_error());
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* hidream: HiDream-I1's sizes for each of SimpleTuner's flavours, the conditioning's per-block Llama states, and
 * HiDreamImageTransformer2DModel's config.json with its refusals. */
static void test_hidream(void)
{
    model_config mc;
    CHECK(from_json("{\"model_family\": \"hidream\"}", &mc) == ST_OK && !strcmp(mc.preset, "hidream-full") &&
          mc.depth == 16 && mc.single_depth == 32 && mc.hidden == 2560 && mc.heads == 20 && mc.experts == 4 &&
          mc.experts_active == 2 && mc.text_dim == 4096 && mc.pooled_dim == 2048 && mc.text_len == 128 &&
          mc.llama_len == 128 && mc.rope_axes[0] == 64 && mc.rope_axes[1] == 32 && mc.rope_axes[2] == 32 &&
          mc.max_tokens == 4096);
    CHECK(model_cond_len(&mc) == (128 + 48 * 128) * 4096 + 2048); /* T5's, pooled, each block's Llama states */
    CHECK(from_json("{\"model_family\": \"hidream\", \"model_flavour\": \"fast\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "hidream-fast"));
    CHECK(model_preset("hidream-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(SEGTRAIN_SOURCE_DIR "/tests/fixtures/hidream", &mc) == ST_OK && mc.depth == 1 &&
               mc.single_depth == 1 && mc.hidden == 16 && mc.experts == 3 && mc.experts_active == 2 &&
               mc.text_dim == 24 && mc.pooled_dim == 20 && mc.rope_axes[0] == 4 && mc.channels == 4 &&
               mc.max_tokens == 16,
           "%s", st_error());
    /* a non-square latent's patches are padded to max_resolution's 8 x 8 / 2^2 = 16 tokens: 3 x 4 fit, 4 x 6 do not */
    mc.height = 6, mc.width = 8;
    CHECKF(model_config_check(&mc) == ST_OK && model_image_tokens(&mc) == 16, "%s", st_error());
    mc.height = 8, mc.width = 12;
    CHECKF(model_config_check(&mc) == ST_ERR_INVALID && strstr(st_error(), "max_resolution"), "%s", st_error());
    mc.height = mc.width = 12; /* a square one is not padded, whatever its size */
    CHECK(model_config_check(&mc) == ST_OK && model_image_tokens(&mc) == 36);
    CHECK(model_preset("flux-tiny", &mc) == ST_OK);
    mc.max_tokens = 16;
    CHECKF(model_config_check(&mc) == ST_ERR_INVALID && strstr(st_error(), "only hidream"), "%s", st_error());
    char dir[] = "/tmp/segtrain-hidream-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *bad[] = {"\"caption_channels\": [4096, 2048]", "\"llama_layers\": [0, 1, 2]",
                         "\"force_inference_output\": true"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[256];
        snprintf(text, sizeof text, "{\"_class_name\": \"HiDreamImageTransformer2DModel\", \"num_layers\": 1, "
                 "\"num_single_layers\": 1, %s}", bad[i]);
        tk_write_file(dir, "config.json", text);
        CHECK(model_preset("hidream-tiny", &mc) == ST_OK);
        CHECKF(model_config_from_diffusers(dir, &mc) == ST_ERR_UNSUPPORTED && strstr(st_error(), "caption_channels"),
               "%s: %s", bad[i], st_error());
    }
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* A Flux folder's own axes_dims_rope stand through model_config_from (pretrained_model_name_or_path); they follow
 * the head width only where hidden_size / num_heads change it. */
static void test_flux_folder_axes(void)
{
    char dir[] = "/tmp/segtrain-fluxaxes-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    tk_write_file(dir, "config.json", "{\"_class_name\": \"FluxTransformer2DModel\", \"num_layers\": 1, "
                                      "\"num_single_layers\": 1, \"attention_head_dim\": 16, \"num_attention_heads\": 2, "
                                      "\"in_channels\": 16, \"joint_attention_dim\": 24, \"pooled_projection_dim\": 20, "
                                      "\"axes_dims_rope\": [2, 8, 6]}");
    char json[256];
    snprintf(json, sizeof json, "{\"model_family\": \"flux\", \"resolution\": 64, \"pretrained_model_name_or_path\": \"%s\"}",
             dir);
    model_config mc;
    CHECKF(from_json(json, &mc) == ST_OK && mc.hidden == 32 && mc.rope_axes[0] == 2 && mc.rope_axes[1] == 8 &&
               mc.rope_axes[2] == 6, "%s: axes (%lld, %lld, %lld)", st_error(), (long long)mc.rope_axes[0],
           (long long)mc.rope_axes[1], (long long)mc.rope_axes[2]);
    snprintf(json, sizeof json, "{\"model_family\": \"flux\", \"resolution\": 64, \"num_heads\": 1, "
             "\"pretrained_model_name_or_path\": \"%s\"}", dir);
    CHECKF(from_json(json, &mc) == ST_OK && mc.rope_axes[0] + mc.rope_axes[1] + mc.rope_axes[2] == 32, "%s",
           st_error());
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* flux2: SimpleTuner's default flavour is klein-9b; dev and klein-4b by name, each at its published size. And
 * Flux2Transformer2DModel's config.json: its class defaults (FLUX.2-dev's) under the file's values, and what
 * segtrain does not build refused in one line naming it. */
static void test_flux2(void)
{
    model_config mc;
    CHECK(from_json("{\"model_family\": \"flux2\"}", &mc) == ST_OK && !strcmp(mc.preset, "flux2-klein-9b") &&
          mc.depth == 8 && mc.single_depth == 24 && mc.hidden == 4096 && mc.heads == 32 && mc.text_dim == 12288 &&
          mc.text_len == 512 && !mc.pooled_dim && !mc.guidance_embeds && mc.channels == 32 && mc.patch == 2 &&
          mc.time_channels == 256 && mc.rope_axes[0] == 32 && mc.rope_axes[3] == 32);
    CHECK(from_json("{\"model_family\": \"flux2\", \"model_flavour\": \"dev\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "flux2-dev") && mc.depth == 8 && mc.single_depth == 48 && mc.hidden == 6144 &&
          mc.heads == 48 && mc.text_dim == 15360 && mc.guidance_embeds);
    CHECK(from_json("{\"model_family\": \"flux2\", \"model_flavour\": \"klein-4b\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "flux2-klein-4b") && mc.depth == 5 && mc.single_depth == 20 && mc.hidden == 3072 &&
          mc.heads == 24 && mc.text_dim == 7680 && !mc.guidance_embeds);
    EXPECT_REFUSAL("{\"model_family\": \"flux2\", \"pooled_projection_dim\": 768}", ST_ERR_INVALID,
                   "pooled_projection_dim: 768", "flux2 has no pooled text vector");
    EXPECT_REFUSAL("{\"model_family\": \"flux2\", \"model_preset\": \"flux2-tiny\", \"num_heads\": 64}", ST_ERR_INVALID,
                   "axes_dims_rope: (0, 0, 0, 1)", "head width 1");

    char dir[] = "/tmp/segtrain-flux2-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(model_preset("flux2-tiny", &mc) == ST_OK);
    tk_write_file(dir, "config.json", "{\"_class_name\": \"Flux2Transformer2DModel\", \"num_layers\": 5, "
                                      "\"num_single_layers\": 20, \"num_attention_heads\": 24, "
                                      "\"joint_attention_dim\": 7680, \"guidance_embeds\": false}"); /* klein 4B's */
    mc.height = mc.width = 128;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 5 && mc.single_depth == 20 &&
               mc.hidden == 3072 && mc.heads == 24 && mc.text_dim == 7680 && !mc.guidance_embeds && mc.channels == 32 &&
               mc.patch == 2 && mc.time_channels == 256 && mc.rope_axes[2] == 32 && !mc.pooled_dim, "%s", st_error());
    tk_write_file(dir, "config.json", "{\"_class_name\": \"Flux2Transformer2DModel\"}"); /* dev's: guidance on */
    CHECK(model_preset("flux2-tiny", &mc) == ST_OK);
    mc.height = mc.width = 128, mc.guidance_embeds = false;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.guidance_embeds && mc.hidden == 6144, "%s", st_error());
#define F2 "{\"_class_name\": \"Flux2Transformer2DModel\", "
    const char *bad[][2] = {
        {F2 "\"mlp_ratio\": 4.0}", "mlp_ratio is not 3"},
        {F2 "\"rope_theta\": 10000}", "rope_theta is not 2000"},
        {F2 "\"out_channels\": 64}", "out_channels 64"},
        {F2 "\"axes_dims_rope\": [16, 56, 56]}", "axes_dims_rope is not a list of 4 widths"},
        {"{\"_class_name\": \"FluxTransformer2DModel\"}", "the flux2 family reads Flux2Transformer2DModel's"},
    };
#undef F2
    expect_json_refusals(dir, "config.json", "flux2-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    tk_write_file(dir, "config.json", "{\"_class_name\": \"ChromaTransformer2DModel\", \"approximator_layers\": 3}");
    CHECK(model_preset("chroma-tiny", &mc) == ST_OK);
    mc.height = mc.width = 128;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 19 && mc.single_depth == 38 &&
               mc.text_dim == 4096 && !mc.pooled_dim && mc.approx_channels == 64 && mc.approx_hidden == 5120 &&
               mc.approx_layers == 3, "%s", st_error());
    tk_write_file(dir, "config.json", "{\"_class_name\": \"ChromaTransformer2DModel\", \"approximator_num_channels\": 60}");
    CHECK(model_preset("chroma-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_ERR_INVALID && strstr(st_error(), "approximator_num_channels 60"),
           "%s", st_error());
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* QwenImageTransformer2DModel's config.json: its class defaults under the file's values (the fixture's), the edit
 * and layered models' options and other packings refused in one line naming them. */
static void test_qwen_json(void)
{
    model_config mc;
    CHECK(model_preset("qwen-image-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(SEGTRAIN_SOURCE_DIR "/tests/fixtures/qwen-image", &mc) == ST_OK && mc.depth == 2 &&
               mc.hidden == 32 && mc.heads == 2 && mc.channels == 4 && mc.patch == 2 && mc.text_dim == 24 &&
               mc.rope_axes[0] == 4 && mc.rope_axes[1] == 6 && !mc.pooled_dim && !mc.single_depth,
           "%s", st_error());
    char dir[] = "/tmp/segtrain-qwen-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    tk_write_file(dir, "config.json", "{\"_class_name\": \"QwenImageTransformer2DModel\"}"); /* defaults: Qwen-Image */
    mc.height = mc.width = 128;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 60 && mc.hidden == 3072 && mc.heads == 24 &&
               mc.channels == 16 && mc.text_dim == 3584 && mc.rope_axes[0] == 16 && mc.rope_axes[1] == 56,
           "%s", st_error());
    static const struct {
        const char *json, *says;
    } bad[] = {
        {"{\"_class_name\": \"QwenImageTransformer2DModel\", \"zero_cond_t\": true}", "zero_cond_t is true"},
        {"{\"_class_name\": \"QwenImageTransformer2DModel\", \"use_layer3d_rope\": true}", "use_layer3d_rope is true"},
        {"{\"_class_name\": \"QwenImageTransformer2DModel\", \"guidance_embeds\": true}", "guidance_embeds is true"},
        {"{\"_class_name\": \"QwenImageTransformer2DModel\", \"out_channels\": 64}", "in_channels 64, out_channels 64"},
        {"{\"_class_name\": \"QwenImageTransformer2DModel\", \"axes_dims_rope\": [16, 56]}", "not a list of 3"},
        {"{\"_class_name\": \"FluxTransformer2DModel\"}", "the qwen_image family reads QwenImageTransformer2DModel's"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tk_write_file(dir, "config.json", bad[i].json);
        CHECK(model_preset("qwen-image-tiny", &mc) == ST_OK);
        const st_status st = model_config_from_diffusers(dir, &mc);
        CHECKF(st != ST_OK && strstr(st_error(), bad[i].says), "%s: %s", bad[i].json, st_error());
    }
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* docs/FAMILIES.md names every family model_family takes. */
static void test_doc(void)
{
    FILE *f = fopen(SEGTRAIN_SOURCE_DIR "/docs/FAMILIES.md", "rb");
    CHECKF(f, "cannot open docs/FAMILIES.md");
    if (!f) return;
    static char doc[1 << 17];
    size_t len = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[len] = '\0';
    for (int i = 0; model_family_name(i); i++) {
        char cell[64];
        snprintf(cell, sizeof cell, "| `%s`", model_family_name(i));
        CHECKF(strstr(doc, cell), "docs/FAMILIES.md has no row for %s", model_family_name(i));
    }
}

/* HunyuanVideo 1.0: its flavour's preset, num_frames as latent frames through the VAE's 4x temporal compression
 * (video families only), and HunyuanVideoTransformer3DModel's config.json (the fixture's) with the image-to-video
 * options and sizes segtrain does not build refused by name. */
static void test_hunyuanvideo(void)
{
    model_config mc;
    CHECK(from_json("{\"model_family\": \"hunyuanvideo\", \"model_flavour\": \"1.0\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "hunyuanvideo-1.0") && mc.depth == 20 && mc.single_depth == 40 && mc.hidden == 3072 &&
          mc.refiner_depth == 2 && mc.text_dim == 4096 && mc.pooled_dim == 768 && mc.guidance_embeds && mc.frames == 1);
    CHECK(from_json("{\"model_family\": \"hunyuanvideo\", \"model_flavour\": \"1.0\", \"num_frames\": 33, "
                    "\"resolution\": 480}", &mc) == ST_OK && mc.frames == 9 && mc.height == 60 && mc.width == 60 &&
          model_sample_numel(&mc) == 16 * 9 * 60 * 60);
    EXPECT_REFUSAL("{\"model_family\": \"hunyuanvideo\", \"model_flavour\": \"1.0\", \"num_frames\": 32}",
                   ST_ERR_INVALID, "num_frames: 32", "4 k + 1");
    EXPECT_REFUSAL("{\"model_family\": \"flux\", \"num_frames\": 5}", ST_ERR_INVALID, "num_frames: 5",
                   "an image family takes 1");
    CHECK(model_preset("hunyuanvideo-tiny", &mc) == ST_OK && mc.frames == 2);
    mc.height = mc.width = 8;
    CHECKF(model_config_from_diffusers(SEGTRAIN_SOURCE_DIR "/tests/fixtures/hunyuanvideo", &mc) == ST_OK &&
               mc.depth == 1 && mc.single_depth == 1 && mc.refiner_depth == 1 && mc.hidden == 32 && mc.heads == 2 &&
               mc.channels == 4 && mc.patch == 2 && mc.patch_t == 1 && mc.text_dim == 24 && mc.pooled_dim == 20 &&
               mc.guidance_embeds && mc.rope_axes[0] == 4 && mc.rope_axes[2] == 6,
           "%s", st_error());
    char dir[] = "/tmp/segtrain-hv-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define HV "{\"_class_name\": \"HunyuanVideoTransformer3DModel\", "
    const char *bad[][2] = {
        {HV "\"image_condition_type\": \"token_replace\"}", "image_condition_type is set"},
        {HV "\"mlp_ratio\": 3.0}", "mlp_ratio is not 4"},
        {HV "\"rope_theta\": 10000}", "rope_theta is not 256"},
        {HV "\"out_channels\": 32}", "out_channels 32"},
        {HV "\"qk_norm\": \"layer_norm\"}", "qk_norm is not \"rms_norm\""},
        {HV "\"num_refiner_layers\": 9}", "num_refiner_layers: 9"},
        {HV "\"rope_axes_dim\": [16, 56]}", "rope_axes_dim is not a list of 3 widths"},
    };
#undef HV
    expect_json_refusals(dir, "config.json", "hunyuanvideo-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    /* ACE-Step: its 1.5 flavours; base (its default, 1.0) refused with the reason */
    CHECK(from_json("{\"model_family\": \"ace_step\", \"model_flavour\": \"v15-sft\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "ace-step-1.5") && mc.frames % 2 == 0);
    EXPECT_REFUSAL("{\"model_family\": \"ace_step\"}", ST_ERR_UNSUPPORTED, "model_flavour base of ace_step",
                   "ACE-Step 1.0");
    /* 1.5, SimpleTuner's hunyuanvideo: its t2v flavours, its i2v ones refused with the reason, its config.json */
    CHECK(from_json("{\"model_family\": \"hunyuanvideo\"}", &mc) == ST_OK && !strcmp(mc.preset, "hunyuanvideo15-480p") &&
          !strcmp(mc.family, "hunyuanvideo15") && mc.depth == 54 && mc.hidden == 2048 && !mc.single_depth &&
          mc.channels == 32 && mc.cond_channels == 33 && mc.text_len == 1000 && mc.text2_len == 256 &&
          mc.vae_scale == 16 && mc.patch == 1);
    CHECK(from_json("{\"model_family\": \"hunyuanvideo\", \"model_flavour\": \"t2v-720p\", \"resolution\": 720, "
                    "\"num_frames\": 121}", &mc) == ST_OK && mc.height == 45 && mc.width == 45 && mc.frames == 31);
    EXPECT_REFUSAL("{\"model_family\": \"hunyuanvideo\", \"model_flavour\": \"i2v-480p\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour i2v-480p of hunyuanvideo", "first frame's latents");
    EXPECT_REFUSAL("{\"model_family\": \"hunyuanvideo\", \"model_preset\": \"flux-dev\"}", ST_ERR_INVALID,
                   "flux-dev belongs to the flux family, but model_family is hunyuanvideo");
    CHECK(model_preset("hunyuanvideo15-tiny", &mc) == ST_OK);
    mc.height = mc.width = 8;
    CHECKF(model_config_from_diffusers(SEGTRAIN_SOURCE_DIR "/tests/fixtures/hunyuanvideo15", &mc) == ST_OK &&
               mc.depth == 2 && mc.refiner_depth == 1 && mc.channels == 4 && mc.cond_channels == 5 && mc.patch == 1 &&
               mc.text_dim == 24 && mc.text2_dim == 12 && mc.image_dim == 8 && !mc.pooled_dim && !mc.guidance_embeds,
           "%s", st_error());
    CHECK(model_preset("hunyuanvideo-tiny", &mc) == ST_OK); /* 1.0's family reads 1.0's class only */
    CHECKF(model_config_from_diffusers(SEGTRAIN_SOURCE_DIR "/tests/fixtures/hunyuanvideo15", &mc) == ST_ERR_UNSUPPORTED &&
               strstr(st_error(), "reads HunyuanVideoTransformer3DModel's"), "%s", st_error());
#define H15 "{\"_class_name\": \"HunyuanVideo15Transformer3DModel\", "
    const char *bad15[][2] = {
        {H15 "\"use_meanflow\": true}", "use_meanflow is true"},
        {H15 "\"in_channels\": 16}", "in_channels 16 below out_channels 32"},
        {H15 "\"mlp_ratio\": 3.0}", "mlp_ratio is not 4"},
    };
#undef H15
    expect_json_refusals(dir, "config.json", "hunyuanvideo15-tiny", bad15, sizeof bad15 / sizeof *bad15, 0, false);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* LTXVideoTransformer3DModel's config.json: Lightricks/LTX-Video-0.9.5's reads as the preset; what the 0.9.x
 * configs do not vary is refused by name */
static void test_ltxvideo_json(void)
{
    char dir[] = "/tmp/segtrain-ltx-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define LTX "{\"_class_name\": \"LTXVideoTransformer3DModel\", "
    tk_write_file(dir, "config.json", LTX "\"activation_fn\": \"gelu-approximate\", \"attention_bias\": true, "
                  "\"attention_head_dim\": 64, \"attention_out_bias\": true, \"caption_channels\": 4096, "
                  "\"cross_attention_dim\": 2048, \"in_channels\": 128, \"norm_elementwise_affine\": false, "
                  "\"norm_eps\": 1e-06, \"num_attention_heads\": 32, \"num_layers\": 28, \"out_channels\": 128, "
                  "\"patch_size\": 1, \"patch_size_t\": 1, \"qk_norm\": \"rms_norm_across_heads\"}");
    model_config mc, want;
    CHECK(model_preset("ltxvideo-tiny", &mc) == ST_OK && model_preset("ltxvideo-0.9.5", &want) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.channels == want.channels && mc.patch == 1 && mc.patch_t == 1 &&
               mc.text_dim == want.text_dim && !mc.out_channels && !mc.ffn_dim,
           "%s", st_error());
    const char *bad[][2] = {
        {LTX "\"norm_elementwise_affine\": true}", "norm_elementwise_affine is not false"},
        {LTX "\"attention_bias\": false}", "attention_bias is not true"},
        {LTX "\"qk_norm\": \"rms_norm\"}", "qk_norm is not \"rms_norm_across_heads\""},
        {LTX "\"cross_attention_dim\": 1024}", "cross_attention_dim 1024"},
        {LTX "\"out_channels\": 64}", "out_channels 64"},
        {LTX "\"norm_eps\": 1e-5}", "norm_eps"},
    };
#undef LTX
    expect_json_refusals(dir, "config.json", "ltxvideo-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* LTX2VideoTransformer3DModel's config.json: LTX-2.0's (diffusers' conversion) reads as the preset; LTX-2.3's and
 * 2.5's additions, the interleaved rotation and other fixed values are refused by name */
static void test_ltxvideo2_json(void)
{
    char dir[] = "/tmp/segtrain-ltx2-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define LTX2 "{\"_class_name\": \"LTX2VideoTransformer3DModel\", \"rope_type\": \"split\", "
    tk_write_file(dir, "config.json", LTX2 "\"activation_fn\": \"gelu-approximate\", \"attention_bias\": true, "
                  "\"attention_head_dim\": 128, \"attention_out_bias\": true, \"audio_attention_head_dim\": 64, "
                  "\"audio_cross_attention_dim\": 2048, \"audio_gated_attn\": false, \"audio_hop_length\": 160, "
                  "\"audio_in_channels\": 128, \"audio_num_attention_heads\": 32, \"audio_out_channels\": 128, "
                  "\"audio_sampling_rate\": 16000, \"caption_channels\": 3840, \"cross_attention_dim\": 4096, "
                  "\"gated_attn\": false, \"in_channels\": 128, \"norm_eps\": 1e-06, \"num_attention_heads\": 32, "
                  "\"num_layers\": 48, \"out_channels\": 128, \"vae_scale_factors\": [8, 32, 32], "
                  "\"use_prompt_embeddings\": true, \"perturbed_attn\": false}");
    model_config mc, want;
    CHECK(model_preset("ltxvideo2-tiny", &mc) == ST_OK && model_preset("ltxvideo2-19b", &want) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.channels == want.channels && mc.audio_hidden == want.audio_hidden &&
               mc.audio_heads == want.audio_heads && mc.audio_channels == want.audio_channels &&
               mc.text_dim == want.text_dim,
           "%s", st_error());
    const char *bad[][2] = {
        {LTX2 "\"gated_attn\": true}", "gated_attn is not false"},
        {LTX2 "\"cross_attn_mod\": true}", "LTX-2.3 and 2.5 set it"},
        {LTX2 "\"use_prompt_embeddings\": false}", "use_prompt_embeddings is not true"},
        {"{\"_class_name\": \"LTX2VideoTransformer3DModel\"}", "rope_type is not given"},
        {"{\"_class_name\": \"LTX2VideoTransformer3DModel\", \"rope_type\": \"interleaved\"}", "\"split\""},
        {LTX2 "\"audio_cross_attention_dim\": 1024}", "audio_cross_attention_dim 1024"},
        {LTX2 "\"vae_scale_factors\": [4, 16, 16]}", "vae_scale_factors (4, 16, 16)"},
        {LTX2 "\"audio_sampling_rate\": 24000}", "audio_sampling_rate"},
        {LTX2 "\"use_keyframes_abs_pos_embedding\": true}", "use_keyframes_abs_pos_embedding"},
    };
#undef LTX2
    expect_json_refusals(dir, "config.json", "ltxvideo2-tiny", bad, sizeof bad / sizeof *bad, ST_ERR_UNSUPPORTED,
                         false);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* WanVACETransformer3DModel's config.json: Wan's keys and the control branch's; vace_layers must be 0, k, 2k, ...;
 * a plain WanTransformer3DModel config has no branch; AnyFlowTransformer3DModel's adds its gate and delta; another
 * family's class is refused naming the three */
static void test_wan_vace_json(void)
{
    char dir[] = "/tmp/segtrain-vace-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define VACE "{\"_class_name\": \"WanVACETransformer3DModel\", \"num_attention_heads\": 12, \"num_layers\": 30, " \
             "\"ffn_dim\": 8960, \"attention_head_dim\": 128, "
    tk_write_file(dir, "config.json", VACE "\"vace_layers\": [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28], "
                  "\"vace_in_channels\": 96}");
    model_config mc, want;
    CHECK(model_preset("wan-vace-tiny", &mc) == ST_OK && model_preset("wan-vace-1.3b", &want) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.vace_count == want.vace_count && mc.vace_every == want.vace_every &&
               mc.vace_channels == want.vace_channels,
           "%s", st_error());
    tk_write_file(dir, "config.json", "{\"_class_name\": \"WanTransformer3DModel\"}");
    CHECK(model_preset("wan-vace-tiny", &mc) == ST_OK && model_config_from_diffusers(dir, &mc) == ST_OK &&
          !(mc.vace_count > 0) && mc.vace_count == 0);
    /* AnyFlow's transformer: Wan's with the delta embedder's gate and kind of delta */
    tk_write_file(dir, "config.json", "{\"_class_name\": \"AnyFlowTransformer3DModel\", \"gate_value\": 0.5, "
                  "\"deltatime_type\": \"t-r\", \"num_layers\": 30, \"num_attention_heads\": 12, \"ffn_dim\": 8960}");
    CHECK(model_preset("wan-anyflow-tiny", &mc) == ST_OK && model_config_from_diffusers(dir, &mc) == ST_OK &&
          mc.anyflow && mc.anyflow_gate == 0.5 && mc.anyflow_interval && mc.depth == 30 && !(mc.vace_count > 0));
    /* Wan Animate's: the published 14B's keys (Wan-AI/Wan2.2-Animate-14B-Diffusers), its preset's sizes */
#define ANIMATE "{\"_class_name\": \"WanAnimateTransformer3DModel\", \"in_channels\": 36"
#define ADDED ", \"added_kv_proj_dim\": 5120"
    tk_write_file(dir, "config.json", ANIMATE ADDED ", \"image_dim\": 1280, \"motion_encoder_size\": 512}");
    CHECK(model_preset("wan-animate-tiny", &mc) == ST_OK && model_preset("wan-animate-14b", &want) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && (mc.face_every > 0) && mc.depth == want.depth &&
               mc.hidden == want.hidden && mc.channels == 16 && mc.cond_channels == want.cond_channels &&
               mc.image_dim == want.image_dim && mc.face_every == want.face_every && mc.face_size == want.face_size &&
               mc.motion_style == want.motion_style && mc.motion_dim == want.motion_dim &&
               mc.motion_out == want.motion_out && mc.face_hidden == want.face_hidden &&
               mc.face_heads == want.face_heads &&
               !memcmp(mc.motion_channels, want.motion_channels, sizeof mc.motion_channels),
           "%s", st_error());
    CHECK(model_preset("wan-14b", &mc) == ST_OK);
    mc.frames = 21; /* Animate's reference frame and a segment's 20 */
    CHECK(model_config_from_diffusers(dir, &mc) == ST_OK && mc.image_tokens == 257); /* CLIP's, unless mc says */
    tk_write_file(dir, "config.json", "{\"_class_name\": \"WanTransformer3DModel\"}");
    CHECK(model_preset("wan-animate-tiny", &mc) == ST_OK && model_config_from_diffusers(dir, &mc) == ST_OK &&
          !(mc.face_every > 0) && !mc.image_tokens && !mc.cond_channels && !mc.motion_channels[0]);
    const char *bad[][2] = {
        {ANIMATE ", \"added_kv_proj_dim\": null}", "added_kv_proj_dim null"},
        {ANIMATE ADDED ", \"image_dim\": null}", "image_dim null"},
        {ANIMATE ADDED ", \"latent_channels\": 8}", "in_channels 36 is not 2 latent_channels (8) + 4"},
        {ANIMATE ADDED ", \"motion_encoder_channel_sizes\": {\"4\": 0}}", "motion_encoder_channel_sizes[\"4\"]"},
        {ANIMATE ADDED ", \"motion_encoder_channel_sizes\": [4]}", "not an object"},
        {ANIMATE ADDED ", \"motion_encoder_channel_sizes\": {\"4\": 8}}", "channels for each of its edges"},
        {ANIMATE ADDED ", \"motion_encoder_size\": 500}", "a power of two from 4 to 1024"},
        {ANIMATE ADDED ", \"inject_face_latents_blocks\": 3}", "a multiple of inject_face_latents_blocks"},
        {ANIMATE ADDED ", \"motion_dim\": 600}", "motion_dim at most motion_encoder_dim"},
        {VACE "\"vace_layers\": [0, 3, 5]}", "are not 0, k, 2k"},
        {VACE "\"vace_layers\": [2, 4]}", "are not 0, k, 2k"},
        {VACE "\"vace_layers\": [0, 10, 20, 30]}", "vace_layers: 4 blocks every 10"},
        {VACE "\"vace_layers\": 5}", "vace_layers is not a list"},
        {"{\"_class_name\": \"LTXVideoTransformer3DModel\"}",
         "the wan family reads WanTransformer3DModel's or WanVACETransformer3DModel's or AnyFlowTransformer3DModel's "
         "or WanAnimateTransformer3DModel's"},
        {"{\"_class_name\": \"AnyFlowTransformer3DModel\", \"deltatime_type\": \"r-t\"}", "deltatime_type"},
        {"{\"_class_name\": \"AnyFlowTransformer3DModel\", \"gate_value\": 2}", "gate_value"},
        {"{\"_class_name\": \"AnyFlowTransformer3DModel\", \"image_dim\": 1280}", "image_dim is set"},
    };
#undef VACE
#undef ANIMATE
#undef ADDED
    expect_json_refusals(dir, "config.json", "wan-animate-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* Anima's pipeline folder: the transformer's config in transformer/, its conditioner's in text_conditioner/ beside
 * it; what the conditioner's reader does not build is refused in one line naming the file and the key. */
static void test_anima_json(void)
{
    char dir[] = "/tmp/segtrain-anima-XXXXXX", sub[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(sub, sizeof sub, "%s/transformer", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(sub, sizeof sub, "%s/text_conditioner", dir);
    CHECK(mkdir(sub, 0700) == 0);
    tk_write_file(dir, "transformer/config.json", "{\"_class_name\": \"CosmosTransformer3DModel\", "
                  "\"num_attention_heads\": 16, \"attention_head_dim\": 128, \"num_layers\": 28, \"in_channels\": "
                  "16, \"out_channels\": 16, \"text_embed_dim\": 1024, \"adaln_lora_dim\": 256, "
                  "\"concat_padding_mask\": true, \"extra_pos_embed_type\": null, \"rope_scale\": [1.0, 4.0, 4.0]}");
#define TC "{\"_class_name\": \"AnimaTextConditioner\", "
    tk_write_file(dir, "text_conditioner/config.json", TC "\"num_layers\": 6, \"source_dim\": 1024}");
    model_config mc, want;
    CHECK(model_preset("anima-tiny", &mc) == ST_OK && model_preset("anima", &want) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.refiner_depth == want.refiner_depth && mc.text_vocab == want.text_vocab &&
               mc.source_dim == want.source_dim && mc.text_min_len == want.text_min_len,
           "%s", st_error());
    const char *bad[][2] = {
        {TC "\"use_layer_norm\": true}", "use_layer_norm"},
        {TC "\"model_dim\": 512, \"target_dim\": 512}", "model_dim 512"},
        {TC "\"num_attention_heads\": 8}", "num_attention_heads 8"},
        {TC "\"num_layers\": 9}", "num_layers 9"},
        {"{\"_class_name\": \"LLMAdapter\"}", "_class_name LLMAdapter"},
    };
#undef TC
    expect_json_refusals(dir, "text_conditioner/config.json", "anima-tiny", bad, sizeof bad / sizeof *bad, 0, true);
    remove(tk_path(dir, "text_conditioner/config.json"));
    CHECK(model_preset("anima-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) != ST_OK && strstr(st_error(), "text_conditioner"), "%s", st_error());
    remove(tk_path(dir, "transformer/config.json"));
    snprintf(sub, sizeof sub, "%s/transformer", dir), remove(sub);
    snprintf(sub, sizeof sub, "%s/text_conditioner", dir), remove(sub);
    remove(dir);
}

/* Lumina2Transformer2DModel's config.json: Lumina-Image 2.0's (as published) reads as the lumina2 preset, a
 * multiplier rounds the feed-forward up to multiple_of; what segtrain does not build is refused by name. */
static void test_lumina2_json(void)
{
    char dir[] = "/tmp/segtrain-lumina2-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define LU "{\"_class_name\": \"Lumina2Transformer2DModel\", "
    tk_write_file(dir, "config.json", LU "\"axes_dim_rope\": [32, 32, 32], \"axes_lens\": [300, 512, 512], "
                  "\"cap_feat_dim\": 2304, \"ffn_dim_multiplier\": null, \"hidden_size\": 2304, \"in_channels\": 16, "
                  "\"multiple_of\": 256, \"norm_eps\": 1e-05, \"num_attention_heads\": 24, \"num_kv_heads\": 8, "
                  "\"num_layers\": 26, \"num_refiner_layers\": 2, \"out_channels\": null, \"patch_size\": 2, "
                  "\"sample_size\": 128, \"scaling_factor\": 1.0}");
    model_config mc, want;
    CHECK(model_preset("lumina2-tiny", &mc) == ST_OK && model_preset("lumina2", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 26 && mc.refiner_depth == 2 &&
               mc.hidden == want.hidden && mc.heads == want.heads && mc.kv_heads == want.kv_heads &&
               mc.ffn_dim == want.ffn_dim && mc.ffn_dim == 9216 && mc.text_dim == want.text_dim &&
               mc.norm_eps == want.norm_eps && mc.rope_axes[2] == 32 && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    tk_write_file(dir, "config.json", LU "\"hidden_size\": 48, \"num_attention_heads\": 2, \"num_kv_heads\": 1, "
                  "\"axes_dim_rope\": [8, 8, 8], \"multiple_of\": 32, \"ffn_dim_multiplier\": 1.3}");
    CHECK(model_preset("lumina2-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.ffn_dim == 256, "ffn %lld: %s", (long long)mc.ffn_dim,
           st_error()); /* int(1.3 * 192) = 249, up to a multiple of 32 */
    const char *bad[][2] = {
        {LU "\"scaling_factor\": 0.5}", "scaling_factor"},
        {LU "\"ffn_dim_multiplier\": 3}", "ffn_dim_multiplier"},
        {LU "\"out_channels\": 32}", "out_channels 32"},
        {LU "\"norm_eps\": \"small\"}", "norm_eps"},
        {LU "\"axes_dim_rope\": [32, 32]}", "axes_dim_rope"},
        {"{\"_class_name\": \"LuminaNextDiT2DModel\"}", "the lumina2 family reads Lumina2Transformer2DModel's"},
    };
#undef LU
    expect_json_refusals(dir, "config.json", "lumina2-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"lumina2\"}", &mc) == ST_OK && !strcmp(mc.preset, "lumina2"));
    CHECK(from_json("{\"model_family\": \"lumina2\", \"model_flavour\": \"neta-lumina\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "lumina2"));
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* BooguImageTransformer2DModel's config.json: the boogu-image preset's sizes read back as it, the instruction's width
 * from instruction_feature_configs (a mean of layers, or their concatenation); what segtrain does not build is refused
 * by name. */
static void test_boogu_json(void)
{
    char dir[] = "/tmp/segtrain-boogu-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define BG "{\"_class_name\": \"BooguImageTransformer2DModel\", "
    tk_write_file(dir, "config.json", BG "\"axes_dim_rope\": [32, 48, 48], \"axes_lens\": [2048, 1664, 1664], "
                  "\"ffn_dim_multiplier\": null, \"hidden_size\": 3072, \"in_channels\": 16, \"multiple_of\": 256, "
                  "\"norm_eps\": 1e-05, \"num_attention_heads\": 24, \"num_kv_heads\": 8, \"num_layers\": 48, "
                  "\"num_double_stream_layers\": 8, \"num_refiner_layers\": 2, \"out_channels\": null, "
                  "\"patch_size\": 2, \"timestep_scale\": 1.0, \"prompt_tuning_configs\": {\"use_prompt_tuning\": false}, "
                  "\"instruction_feature_configs\": {\"instruction_feat_dim\": 4096, \"reduce_type\": \"mean\", "
                  "\"num_instruction_feat_layers\": 3}}");
    model_config mc, want;
    CHECK(model_preset("boogu-image-tiny", &mc) == ST_OK && model_preset("boogu-image", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 8 && mc.single_depth == 40 &&
               mc.refiner_depth == 2 && mc.hidden == want.hidden && mc.heads == want.heads &&
               mc.kv_heads == want.kv_heads && mc.ffn_dim == want.ffn_dim && mc.text_dim == want.text_dim &&
               mc.norm_eps == want.norm_eps && mc.rope_axes[0] == want.rope_axes[0] &&
               mc.rope_axes[2] == want.rope_axes[2] && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    tk_write_file(dir, "config.json", BG "\"hidden_size\": 32, \"num_attention_heads\": 2, \"num_kv_heads\": 1, "
                  "\"axes_dim_rope\": [4, 6, 6], \"num_layers\": 3, \"multiple_of\": 16, "
                  "\"instruction_feature_configs\": {\"instruction_feat_dim\": 24, \"reduce_type\": \"concat\", "
                  "\"num_instruction_feat_layers\": 2}}");
    CHECK(model_preset("boogu-image-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.text_dim == 48 && mc.ffn_dim == 128 &&
               mc.depth == 2 && mc.single_depth == 1, "%s", st_error()); /* the class's 2 double-stream layers */
    const char *bad[][2] = {
        {BG "\"timestep_scale\": 1000.0}", "timestep_scale"},
        {BG "\"prompt_tuning_configs\": {\"use_prompt_tuning\": true}}", "use_prompt_tuning"},
        {BG "\"instruction_feature_configs\": {\"reduce_type\": \"max\"}}", "reduce_type"},
        {BG "\"num_layers\": 1}", "num_layers 1"},
        {BG "\"out_channels\": 32}", "out_channels 32"},
    };
#undef BG
    expect_json_refusals(dir, "config.json", "boogu-image-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"boogu_image\"}", &mc) == ST_OK && !strcmp(mc.preset, "boogu-image"));
    CHECK(from_json("{\"model_family\": \"boogu_image\", \"model_flavour\": \"v0.1-edit\"}", &mc) ==
          ST_ERR_UNSUPPORTED);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* ZImageTransformer2DModel's config.json: Z-Image's (as published) reads as the z-image preset; SimpleTuner's
 * z_image builds base, and refuses its default turbo-ostris-v2 (and the other turbo flavours) with the reason. The
 * same for ErnieImageTransformer2DModel's (baidu/ERNIE-Image's) and ernie's turbo. */
static void test_zimage_json(void)
{
    char dir[] = "/tmp/segtrain-zimage-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define ZI "{\"_class_name\": \"ZImageTransformer2DModel\", "
    tk_write_file(dir, "config.json", ZI "\"all_f_patch_size\": [1], \"all_patch_size\": [2], \"axes_dims\": [32, 48, "
                  "48], \"axes_lens\": [1536, 512, 512], \"cap_feat_dim\": 2560, \"dim\": 3840, \"in_channels\": 16, "
                  "\"n_heads\": 30, \"n_kv_heads\": 30, \"n_layers\": 30, \"n_refiner_layers\": 2, "
                  "\"norm_eps\": 1e-05, \"qk_norm\": true, \"rope_theta\": 256.0, \"t_scale\": 1000.0}");
    model_config mc, want;
    CHECK(model_preset("z-image-tiny", &mc) == ST_OK && model_preset("z-image", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 30 && mc.refiner_depth == 2 &&
               mc.hidden == want.hidden && mc.heads == want.heads && mc.kv_heads == 30 && mc.ffn_dim == 10240 &&
               mc.ffn_dim == want.ffn_dim && mc.text_dim == 2560 && mc.rope_axes[0] == 32 && mc.rope_axes[2] == 48 &&
               mc.rope_axes[0] == want.rope_axes[0] && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {ZI "\"siglip_feat_dim\": 1152}", "siglip_feat_dim"},
        {ZI "\"rope_theta\": 10000.0}", "rope_theta"},
        {ZI "\"t_scale\": 1.0}", "t_scale"},
        {ZI "\"qk_norm\": false}", "qk_norm"},
        {ZI "\"all_f_patch_size\": [2]}", "all_f_patch_size [2]"},
        {ZI "\"axes_dims\": [32, 48]}", "axes_dims"},
    };
#undef ZI
    expect_json_refusals(dir, "config.json", "z-image-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"z_image\", \"model_flavour\": \"base\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "z-image") && mc.ffn_dim == 10240);
    EXPECT_REFUSAL("{\"model_family\": \"z_image\"}", ST_ERR_UNSUPPORTED, "model_flavour turbo-ostris-v2 of z_image",
                   "assistant adapter", "base");
    EXPECT_REFUSAL("{\"model_family\": \"z_image\", \"model_flavour\": \"turbo\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour turbo of z_image");
#define ER "{\"_class_name\": \"ErnieImageTransformer2DModel\", "
    tk_write_file(dir, "config.json", ER "\"eps\": 1e-06, \"ffn_hidden_size\": 12288, \"hidden_size\": 4096, "
                  "\"in_channels\": 128, \"num_attention_heads\": 32, \"num_layers\": 36, \"out_channels\": 128, "
                  "\"patch_size\": 1, \"qk_layernorm\": true, \"rope_axes_dim\": [32, 48, 48], \"rope_theta\": 256, "
                  "\"text_in_dim\": 3072}"); /* baidu/ERNIE-Image's */
    CHECK(model_preset("ernie-tiny", &mc) == ST_OK && model_preset("ernie-image", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.vae_scale = want.vae_scale;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.ffn_dim == want.ffn_dim && mc.channels == want.channels &&
               mc.text_dim == want.text_dim && mc.norm_eps == want.norm_eps && mc.rope_axes[1] == want.rope_axes[1] &&
               model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *ernie_bad[][2] = {
        {ER "\"rope_theta\": 10000}", "rope_theta"},
        {ER "\"qk_layernorm\": false}", "qk_layernorm"},
        {ER "\"out_channels\": 64}", "out_channels 64"},
        {ER "\"eps\": 2}", "eps"},
    };
#undef ER
    expect_json_refusals(dir, "config.json", "ernie-tiny", ernie_bad, sizeof ernie_bad / sizeof *ernie_bad, 0, false);
    CHECK(from_json("{\"model_family\": \"ernie\"}", &mc) == ST_OK && !strcmp(mc.preset, "ernie-image"));
    /* Ideogram 4: the class defaults are the published checkpoints' (its config.json gives a few of them) */
    tk_write_file(dir, "config.json", "{\"_class_name\": \"Ideogram4Transformer2DModel\", \"num_layers\": 34, "
                  "\"attention_head_dim\": 256, \"mrope_section\": [24, 20, 20]}");
    CHECK(model_preset("ideogram-tiny", &mc) == ST_OK && model_preset("ideogram-4", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.vae_scale = want.vae_scale;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.ffn_dim == want.ffn_dim && mc.time_dim == want.time_dim &&
               mc.text_dim == want.text_dim && mc.channels == want.channels &&
               !memcmp(mc.rope_axes, want.rope_axes, sizeof mc.rope_axes) && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *ideo_bad[][2] = {
        {"{\"_class_name\": \"Ideogram4Transformer2DModel\", \"rope_theta\": 10000}", "rope_theta"},
        {"{\"_class_name\": \"Ideogram4Transformer2DModel\", \"mrope_section\": [24, 20]}", "mrope_section"},
        {"{\"_class_name\": \"Ideogram4Transformer2DModel\", \"mrope_section\": [64, 64, 64]}", "mrope_section"},
        {"{\"_class_name\": \"Ideogram4Transformer2DModel\", \"attention_head_dim\": 15}", "attention_head_dim 15"},
    };
    expect_json_refusals(dir, "config.json", "ideogram-tiny", ideo_bad, sizeof ideo_bad / sizeof *ideo_bad, 0, false);
    CHECK(from_json("{\"model_family\": \"ideogram\"}", &mc) == ST_OK && !strcmp(mc.preset, "ideogram-4"));
    EXPECT_REFUSAL("{\"model_family\": \"ernie\", \"model_flavour\": \"turbo\"}", ST_ERR_UNSUPPORTED,
                   "model_flavour turbo of ernie", "assistant adapter");
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* OmniGenTransformer2DModel's config.json: Shitao/OmniGen-v1-diffusers's shape reads as the omnigen preset, with its
 * rope_scaling's factors; what the class cannot be built without, or segtrain does not build, is refused by name. */
static void test_omnigen_json(void)
{
    char dir[] = "/tmp/segtrain-omnigen-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char factors[2][512] = {"", ""};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 48; i++)
            snprintf(factors[k] + strlen(factors[k]), sizeof factors[k] - strlen(factors[k]), "%s%g", i ? ", " : "",
                     k ? 1.0 + 0.5 * i : 1.0 + 0.01 * i);
    char text[2048];
#define OG "{\"_class_name\": \"OmniGenTransformer2DModel\", "
    snprintf(text, sizeof text, OG "\"hidden_size\": 3072, \"num_attention_heads\": 32, \"num_key_value_heads\": 32, "
             "\"intermediate_size\": 8192, \"num_layers\": 32, \"vocab_size\": 32064, \"pad_token_id\": 32000, "
             "\"max_position_embeddings\": 131072, \"original_max_position_embeddings\": 4096, \"rope_base\": 10000, "
             "\"patch_size\": 2, \"in_channels\": 4, \"pos_embed_max_size\": 192, \"rms_norm_eps\": 1e-05, "
             "\"rope_scaling\": {\"short_factor\": [%s], \"long_factor\": [%s], \"type\": \"su\"}}",
             factors[0], factors[1]);
    tk_write_file(dir, "config.json", text);
    model_config mc, want;
    CHECK(model_preset("omnigen-tiny", &mc) == ST_OK && model_preset("omnigen-v1", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.kv_heads == want.kv_heads && mc.ffn_dim == want.ffn_dim &&
               mc.text_vocab == want.text_vocab && mc.text_pad == want.text_pad && mc.text_dim == 1 &&
               mc.rope_max == want.rope_max && mc.rope_original == want.rope_original &&
               mc.pos_embed_max == want.pos_embed_max && mc.sample_size == want.sample_size &&
               mc.rope_short[47] == (float)1.47 && mc.rope_long[47] == 24.5f && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {OG "\"rope_scaling\": null}", "rope_scaling is not an object"},
        {OG "\"num_attention_heads\": 32, \"hidden_size\": 3072, \"rope_scaling\": {\"short_factor\": [1], "
            "\"long_factor\": [1]}}", "rope_scaling.short_factor is not a list of 48"},
        {OG "\"rope_base\": 500000}", "rope_base"},
        {OG "\"timestep_activation_fn\": \"gelu\"}", "timestep_activation_fn"},
        {OG "\"flip_sin_to_cos\": false}", "flip_sin_to_cos"},
        {OG "\"hidden_size\": 3072, \"num_attention_heads\": 1024}", "even head width"},
    };
#undef OG
    expect_json_refusals(dir, "config.json", "omnigen-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    /* a factor of 0 would divide by zero: refused by model_config_check too, naming the family's rule */
    CHECK(model_preset("omnigen-tiny", &mc) == ST_OK);
    mc.rope_long[3] = 0.0f;
    CHECKF(model_config_check(&mc) == ST_ERR_INVALID && strstr(st_error(), "positive rotary factors"), "%s",
           st_error());
    CHECK(from_json("{\"model_family\": \"omnigen\"}", &mc) == ST_OK && !strcmp(mc.preset, "omnigen-v1") &&
          mc.text_dim == 1 && mc.text_vocab == 32064);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* Krea2Transformer2DModel's config.json: krea/Krea-2-Raw's (the class defaults) reads as the krea2 preset, text_dim
 * the tapped layers' widths side by side; what segtrain does not build is refused by name, and sizes that do not fit
 * together by model_config_check naming the text fusion's keys. */
static void test_krea2_json(void)
{
    char dir[] = "/tmp/segtrain-krea2-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define KR "{\"_class_name\": \"Krea2Transformer2DModel\", "
    tk_write_file(dir, "config.json", KR "\"in_channels\": 64, \"num_layers\": 28, \"attention_head_dim\": 128, "
                  "\"num_attention_heads\": 48, \"num_key_value_heads\": 12, \"intermediate_size\": 16384, "
                  "\"timestep_embed_dim\": 256, \"text_hidden_dim\": 2560, \"num_text_layers\": 12, "
                  "\"text_num_attention_heads\": 20, \"text_num_key_value_heads\": 20, "
                  "\"text_intermediate_size\": 6912, \"num_layerwise_text_blocks\": 2, \"num_refiner_text_blocks\": 2, "
                  "\"axes_dims_rope\": [32, 48, 48], \"rope_theta\": 1000.0, \"norm_eps\": 1e-05}");
    model_config mc, want;
    CHECK(model_preset("krea2-tiny", &mc) == ST_OK && model_preset("krea2", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.kv_heads == want.kv_heads && mc.ffn_dim == want.ffn_dim &&
               mc.channels == want.channels && mc.patch == 2 && mc.text_dim == want.text_dim &&
               mc.text_layers == want.text_layers && mc.text_heads == want.text_heads &&
               mc.text_kv_heads == want.text_kv_heads && mc.text_ffn == want.text_ffn &&
               mc.text_blocks == want.text_blocks && mc.refiner_depth == want.refiner_depth &&
               !memcmp(mc.rope_axes, want.rope_axes, sizeof mc.rope_axes) && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {KR "\"rope_theta\": 10000}", "rope_theta"},
        {KR "\"timestep_embed_dim\": 128}", "timestep_embed_dim"},
        {KR "\"in_channels\": 30}", "in_channels 30"},
        {KR "\"axes_dims_rope\": [32, 48]}", "axes_dims_rope"},
        {KR "\"norm_eps\": 0}", "norm_eps"},
    };
#undef KR
    expect_json_refusals(dir, "config.json", "krea2-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(model_preset("krea2-tiny", &mc) == ST_OK);
    mc.text_heads = 5; /* does not divide the text layers' width (24) */
    CHECKF(model_config_check(&mc) == ST_ERR_INVALID && strstr(st_error(), "text_num_attention_heads 5"), "%s",
           st_error());
    CHECK(model_preset("krea2-tiny", &mc) == ST_OK);
    mc.text_dim = 70; /* not a multiple of its 3 layers */
    CHECKF(model_config_check(&mc) == ST_ERR_INVALID && strstr(st_error(), "num_text_layers 3 (text_dim 70)"), "%s",
           st_error());
    CHECK(from_json("{\"model_family\": \"krea2\", \"model_flavour\": \"turbo\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "krea2") && mc.text_dim == 30720);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* Flux3Transformer2DModel's config.json: the class defaults read as the flux3-klein preset; the flow-map models, a
 * reference mode of other channels and other fixed options are refused by name. */
static void test_flux3_json(void)
{
    char dir[] = "/tmp/segtrain-flux3-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define F3 "{\"_class_name\": \"Flux3Transformer2DModel\", "
    tk_write_file(dir, "config.json", F3 "\"in_channels\": 128, \"cond_in_channels\": 128, \"num_layers\": 5, "
                  "\"num_single_layers\": 28, \"attention_head_dim\": 128, \"num_attention_heads\": 24, "
                  "\"joint_attention_dim\": 20480, \"timestep_channels\": 256, \"mlp_ratio\": 3.0, "
                  "\"axes_dims_rope\": [32, 32, 32, 32], \"rope_theta\": 10000, \"eps\": 1e-06, \"flow_map\": false}");
    model_config mc, want;
    CHECK(model_preset("flux3-tiny", &mc) == ST_OK && model_preset("flux3-klein", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth &&
               mc.single_depth == want.single_depth && mc.hidden == want.hidden && mc.heads == want.heads &&
               mc.channels == want.channels && mc.patch == 2 && mc.text_dim == want.text_dim &&
               mc.time_channels == want.time_channels && !memcmp(mc.rope_axes, want.rope_axes, sizeof mc.rope_axes) &&
               model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {F3 "\"flow_map\": true}", "flow_map"},
        {F3 "\"cond_in_channels\": 64}", "cond_in_channels 64"},
        {F3 "\"mlp_ratio\": 4.0}", "mlp_ratio"},
        {F3 "\"rope_theta\": 2000}", "rope_theta"},
        {F3 "\"axes_dims_rope\": [32, 32, 32]}", "axes_dims_rope"},
        {F3 "\"num_single_layers\": 0}", "num_single_layers: 0"},
    };
#undef F3
    expect_json_refusals(dir, "config.json", "flux3-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"flux3_image\"}", &mc) == ST_OK && !strcmp(mc.preset, "flux3-klein"));
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* ZlabI1Transformer2DModel's config.json: the class defaults (i1-3B's) read as the zlab-i1-3b preset; another
 * rope_theta, an image_resolution off input_size's pixels, a head_dim that is not hidden_size / num_heads, and an even
 * depth are refused by name. */
static void test_zlab_i1_json(void)
{
    char dir[] = "/tmp/segtrain-zlab-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define ZL "{\"_class_name\": \"ZlabI1Transformer2DModel\", "
    tk_write_file(dir, "config.json", ZL "\"input_size\": 128, \"image_resolution\": 1024, \"patch_size\": 2, "
                  "\"in_channels\": 32, \"hidden_size\": 2016, \"depth\": 29, \"num_heads\": 28, \"head_dim\": 72, "
                  "\"mlp_ratio\": 4.0, \"text_embed_dim\": 2304, \"text_num_tokens\": 256, \"rope_theta\": 10000.0}");
    model_config mc, want;
    CHECK(model_preset("zlab-i1-tiny", &mc) == ST_OK && model_preset("zlab-i1-3b", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.channels == want.channels && mc.patch == 2 && mc.text_dim == want.text_dim &&
               mc.ffn_dim == want.ffn_dim && mc.ffn_dim == 5376 && mc.sample_size == 128 && mc.text_tokens == 256 &&
               !memcmp(mc.rope_axes, want.rope_axes, sizeof mc.rope_axes) && mc.rope_axes[0] == 36 &&
               mc.rope_axes[1] == 18 && mc.rope_axes[2] == 18 && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {ZL "\"rope_theta\": 2000}", "rope_theta"},
        {ZL "\"image_resolution\": 512}", "image_resolution 512"},
        {ZL "\"head_dim\": 64}", "head_dim 64"},
        {ZL "\"mlp_ratio\": \"4\"}", "mlp_ratio"},
    };
#undef ZL
    expect_json_refusals(dir, "config.json", "zlab-i1-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(model_preset("zlab-i1-tiny", &mc) == ST_OK);
    mc.depth = 4;
    CHECKF(model_config_check(&mc) == ST_ERR_INVALID && strstr(st_error(), "odd number"), "%s", st_error());
    CHECK(from_json("{\"model_family\": \"zlab_i1\"}", &mc) == ST_OK && !strcmp(mc.preset, "zlab-i1-3b"));
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* MageFlowTransformer2DModel's config.json (the class defaults, as SimpleTuner's save_pretrained writes them) reads
 * as the mageflow preset; another patch_size, or out_channels other than in_channels, is refused by name. */
static void test_mageflow_json(void)
{
    char dir[] = "/tmp/segtrain-mageflow-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define MF "{\"_class_name\": \"MageFlowTransformer2DModel\", "
    tk_write_file(dir, "config.json", MF "\"in_channels\": 128, \"out_channels\": 128, \"context_in_dim\": 2560, "
                  "\"hidden_size\": 3072, \"num_heads\": 24, \"depth\": 12, \"axes_dim\": [16, 56, 56], "
                  "\"patch_size\": 1, \"mlp_ratio\": 4.0, \"depth_single_blocks\": 0, \"attn_type\": \"sdpa\"}");
    model_config mc, want;
    CHECK(model_preset("mageflow-tiny", &mc) == ST_OK && model_preset("mageflow", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len, mc.vae_scale = want.vae_scale;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 12 && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.channels == 128 && mc.patch == 1 && mc.text_dim == 2560 &&
               !memcmp(mc.rope_axes, want.rope_axes, sizeof mc.rope_axes) && mc.rope_axes[0] == 16 &&
               model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {MF "\"patch_size\": 2}", "patch_size 2"},
        {MF "\"out_channels\": 64}", "out_channels 64"},
        {MF "\"axes_dim\": [16, 56]}", "axes_dim"},
    };
#undef MF
    expect_json_refusals(dir, "config.json", "mageflow-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"mageflow\"}", &mc) == ST_OK && !strcmp(mc.preset, "mageflow"));
    CHECK(from_json("{\"model_family\": \"mageflow\", \"model_flavour\": \"turbo\"}", &mc) == ST_OK);
    CHECK(from_json("{\"model_family\": \"mageflow\", \"model_flavour\": \"edit\"}", &mc) == ST_ERR_UNSUPPORTED &&
          strstr(st_error(), "reference image"));
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* WanS2VTransformer3DModel's config.json (the class defaults, Wan2.2-S2V-14B's) reads as the wan-s2v-14b preset; what
 * SimpleTuner's training never varies, a pose_dim other than its zero pose latents' 16, an image branch, and a clip
 * whose audio chunks do not split its tokens are refused by name; a cache run names the audio features it lacks. */
static void test_wan_s2v_json(void)
{
    char dir[] = "/tmp/segtrain-wan-s2v-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define S2V "{\"_class_name\": \"WanS2VTransformer3DModel\", "
    tk_write_file(dir, "config.json", S2V "\"patch_size\": [1, 2, 2], \"num_attention_heads\": 40, "
                  "\"attention_head_dim\": 128, \"in_channels\": 16, \"out_channels\": 16, \"text_dim\": 4096, "
                  "\"audio_dim\": 1024, \"audio_inject_layers\": [0, 4, 8, 12, 16, 20, 24, 27, 30, 33, 36, 39], "
                  "\"enable_adain\": true, \"adain_mode\": \"attn_norm\", \"pose_dim\": 16, \"ffn_dim\": 13824, "
                  "\"num_layers\": 40, \"num_weighted_avg_layers\": 25, \"cross_attn_norm\": true, \"eps\": 1e-06, "
                  "\"zero_timestep\": true, \"enable_framepack\": true, \"added_kv_proj_dim\": null}");
    model_config mc, want;
    CHECK(model_preset("wan-s2v-tiny", &mc) == ST_OK && model_preset("wan-s2v-14b", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len, mc.frames = want.frames;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 40 && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.ffn_dim == 13824 && mc.audio_layers == 25 && mc.audio_channels == 1024 &&
               mc.audio_inject == want.audio_inject && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    mc.frames = 3; /* (3 + 17) halved twice is 5: no chunk after the 5 dropped */
    CHECKF(model_config_check(&mc) == ST_ERR_INVALID && strstr(st_error(), "audio chunks"), "%s", st_error());
    const char *bad[][2] = {
        {S2V "\"enable_adain\": false}", "enable_adain"},
        {S2V "\"zero_timestep\": false}", "zero_timestep"},
        {S2V "\"pose_dim\": 8}", "pose_dim 8"},
        {S2V "\"added_kv_proj_dim\": 5120}", "added_kv_proj_dim"},
        {S2V "\"audio_inject_layers\": [70]}", "audio_inject_layers"},
    };
#undef S2V
    expect_json_refusals(dir, "config.json", "wan-s2v-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"wan_s2v\"}", &mc) == ST_OK && !strcmp(mc.preset, "wan-s2v-14b"));
    CHECK(strstr(model_uncached(&mc), "Wav2Vec2") && strstr(model_uncached(&mc), "reference image"));
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* LongCatVideoTransformer3DModel's config.json (meituan-longcat/LongCat-Video's published one) reads as the
 * longcat-video preset; the block-sparse attention, packed captions, context parallelism, TwinFlow's and FlowMap's
 * time conditioning, other patches and output widths are refused by name. */
static void test_longcat_video_json(void)
{
    char dir[] = "/tmp/segtrain-longcat-video-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define LV "{\"_class_name\": \"LongCatVideoTransformer3DModel\", \"text_tokens_zero_pad\": true, "
    tk_write_file(dir, "config.json", LV "\"in_channels\": 16, \"out_channels\": 16, \"hidden_size\": 4096, "
                  "\"depth\": 48, \"num_heads\": 32, \"caption_channels\": 4096, \"mlp_ratio\": 4, "
                  "\"adaln_tembed_dim\": 512, \"frequency_embedding_size\": 256, \"patch_size\": [1, 2, 2], "
                  "\"enable_flashattn3\": false, \"enable_flashattn2\": true, \"enable_xformers\": false, "
                  "\"enable_bsa\": false, \"bsa_params\": {\"sparsity\": 0.9375}, \"cp_split_hw\": [1, 1]}");
    model_config mc, want;
    CHECK(model_preset("longcat-video-tiny", &mc) == ST_OK && model_preset("longcat-video", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len, mc.frames = want.frames;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == 48 && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.channels == 16 && mc.patch == 2 && mc.text_dim == 4096 &&
               mc.time_dim == 512 && mc.time_channels == 256 && mc.ffn_dim == 11008 && mc.ffn_dim == want.ffn_dim &&
               model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {LV "\"enable_bsa\": true}", "enable_bsa"},
        {"{\"_class_name\": \"LongCatVideoTransformer3DModel\"}", "text_tokens_zero_pad false"},
        {LV "\"cp_split_hw\": [2, 1]}", "cp_split_hw"},
        {LV "\"enable_time_sign_embed\": true}", "enable_time_sign_embed"},
        {LV "\"deltatime_type\": \"r\"}", "deltatime_type"},
        {LV "\"patch_size\": [2, 2, 2]}", "patch_size"},
        {LV "\"out_channels\": 32}", "out_channels"},
    };
#undef LV
    expect_json_refusals(dir, "config.json", "longcat-video-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"longcat_video\"}", &mc) == ST_OK && !strcmp(mc.preset, "longcat-video"));
    CHECK(from_json("{\"model_family\": \"longcat_video\", \"model_flavour\": \"final\"}", &mc) == ST_OK);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* QwenImage21Transformer2DModel's config.json (the class defaults) reads as the qwen-image-2.1 preset, SimpleTuner's
 * qwen_image at segtrain's flavour v2.1; what segtrain does not build is refused by name. */
static void test_qwen21_json(void)
{
    char dir[] = "/tmp/segtrain-qwen21-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define Q21 "{\"_class_name\": \"QwenImage21Transformer2DModel\", "
    tk_write_file(dir, "config.json", Q21 "\"patch_size\": 1, \"in_channels\": 64, \"out_channels\": 64, "
                  "\"num_layers\": 32, \"attention_head_dim\": 128, \"num_attention_heads\": 32, "
                  "\"context_in_dim\": 4096, \"mlp_ratio\": 3, \"axes_dims_rope\": [16, 56, 56], \"eps\": 1e-06, "
                  "\"causal_condition\": true}");
    model_config mc, want;
    CHECK(model_preset("qwen-image-2.1-tiny", &mc) == ST_OK && model_preset("qwen-image-2.1", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.channels == want.channels && mc.patch == 2 &&
               mc.text_dim == want.text_dim && !memcmp(mc.rope_axes, want.rope_axes, sizeof mc.rope_axes) &&
               model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {Q21 "\"causal_condition\": false}", "causal_condition"},
        {Q21 "\"patch_size\": 2}", "patch_size 2"},
        {Q21 "\"mlp_ratio\": 4}", "mlp_ratio"},
        {Q21 "\"axes_dims_rope\": [16, 56]}", "axes_dims_rope"},
    };
#undef Q21
    expect_json_refusals(dir, "config.json", "qwen-image-2.1-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    /* its image rows fill encoder slots of 2 x 2 tokens: a grid of an odd number of tokens is refused */
    CHECK(model_preset("qwen-image-2.1-tiny", &mc) == ST_OK);
    mc.height = mc.width = 6;
    CHECKF(model_config_check(&mc) == ST_ERR_INVALID && strstr(st_error(), "multiple of 4"), "%s", st_error());
    CHECK(from_json("{\"model_family\": \"qwen_image\", \"model_flavour\": \"v2.1\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "qwen-image-2.1") && !strcmp(mc.family, "qwen_image21"));
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* MiniMaxH3Transformer3DModel's config.json (the class defaults) reads as the minimaxh3 preset, SimpleTuner's
 * minimaxh3 (fl2va); what segtrain does not build is refused by name, and num_frames follows its VAE's chunks. */
static void test_minimax_json(void)
{
    char dir[] = "/tmp/segtrain-minimax-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define MH "{\"_class_name\": \"MiniMaxH3Transformer3DModel\", "
    tk_write_file(dir, "config.json", MH "\"num_attention_heads\": 56, \"attention_head_dim\": 128, "
                  "\"hidden_size\": 5376, \"num_layers\": 50, \"num_refiner_layers\": 2, \"ffn_dim\": 14336, "
                  "\"in_channels\": 24, \"audio_in_channels\": 32, \"patch_size\": [1, 2, 2], \"text_dim\": 5120, "
                  "\"freq_dim\": 256, \"time_embed_hidden_dim\": 5376, \"time_embed_dim\": 2688, "
                  "\"rope_freq_dim\": 16, \"rope_theta\": 10000.0, \"norm_eps\": 1e-05, \"qk_norm_eps\": 1e-05, "
                  "\"final_norm_eps\": 1e-05}");
    model_config mc, want;
    CHECK(model_preset("minimaxh3-tiny", &mc) == ST_OK && model_preset("minimaxh3", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len, mc.frames = want.frames;
    mc.vae_scale = want.vae_scale;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.head_dim == want.head_dim && mc.refiner_depth == want.refiner_depth &&
               mc.ffn_dim == want.ffn_dim && mc.channels == want.channels && mc.text_dim == want.text_dim &&
               mc.audio_channels == want.audio_channels && mc.time_channels == want.time_channels &&
               mc.time_hidden == want.time_hidden && mc.time_dim == want.time_dim && mc.norm_eps == want.norm_eps &&
               !memcmp(mc.rope_axes, want.rope_axes, sizeof mc.rope_axes) && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {MH "\"patch_size\": [1, 4, 4]}", "patch_size (1, 4, 4)"},
        {MH "\"rope_theta\": 500.0}", "rope_theta"},
        {MH "\"qk_norm_eps\": 1e-06}", "one epsilon"},
        {MH "\"rope_freq_dim\": 32}", "rotary"}, /* 3 x 64 channels turn, more than the head's 128 */
        {MH "\"attention_head_dim\": 127}", "even head width"},
    };
#undef MH
    expect_json_refusals(dir, "config.json", "minimaxh3-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"minimaxh3\"}", &mc) == ST_OK && !strcmp(mc.preset, "minimaxh3") &&
          !strcmp(mc.family, "minimaxh3") && mc.frames == 1);
    CHECK(from_json("{\"model_family\": \"minimaxh3\", \"num_frames\": 39}", &mc) == ST_OK && mc.frames == 12 &&
          model_pixel_frames(&mc) == 39);
    CHECKF(from_json("{\"model_family\": \"minimaxh3\", \"num_frames\": 41}", &mc) == ST_ERR_INVALID &&
               strstr(st_error(), "17 k + 5"),
           "%s", st_error());
    CHECKF(from_json("{\"model_family\": \"minimaxh3\", \"model_flavour\": \"ref2va\"}", &mc) != ST_OK &&
               strstr(st_error(), "transformer_ref"),
           "%s", st_error());
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* Cosmos3OmniTransformer's config.json (the class defaults, Cosmos3-Nano's) reads as the cosmos3-nano preset,
 * SimpleTuner's cosmos3 nano; its sound head is read to be loaded; what segtrain does not build is refused by name. */
static void test_cosmos3_json(void)
{
    char dir[] = "/tmp/segtrain-cosmos3-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define C3 "{\"_class_name\": \"Cosmos3OmniTransformer\", "
    tk_write_file(dir, "config.json", C3 "\"attention_bias\": false, \"attention_dropout\": 0.0, \"head_dim\": 128, "
                  "\"hidden_size\": 4096, \"intermediate_size\": 12288, \"base_fps\": 24, "
                  "\"enable_fps_modulation\": true, \"latent_channel\": 48, "
                  "\"unified_3d_mrope_reset_spatial_ids\": true, \"unified_3d_mrope_temporal_modality_margin\": 15000, "
                  "\"latent_patch_size\": 2, \"num_attention_heads\": 32, \"num_hidden_layers\": 36, "
                  "\"num_key_value_heads\": 8, \"patch_latent_dim\": 192, \"rms_norm_eps\": 1e-06, "
                  "\"rope_scaling\": {\"mrope_section\": [24, 20, 20]}, \"rope_theta\": 5000000.0, "
                  "\"action_dim\": null, \"action_gen\": false, \"sound_dim\": null, \"sound_gen\": false, "
                  "\"timestep_scale\": 0.001, \"vocab_size\": 151936, \"hidden_act\": \"silu\", "
                  "\"qk_norm_for_text\": true, \"use_und_k_norm_for_gen\": false}");
    model_config mc, want;
    CHECK(model_preset("cosmos3-tiny", &mc) == ST_OK && model_preset("cosmos3-nano", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len, mc.vae_scale = want.vae_scale;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.kv_heads == want.kv_heads && mc.head_dim == want.head_dim &&
               mc.ffn_dim == want.ffn_dim && mc.channels == want.channels && mc.patch == want.patch &&
               mc.text_vocab == want.text_vocab && mc.text_dim == 1 && mc.norm_eps == want.norm_eps &&
               !mc.audio_channels && !mc.action_dim && !memcmp(mc.rope_axes, want.rope_axes, sizeof mc.rope_axes) &&
               model_config_check(&mc) == ST_OK,
           "%s", st_error());
    tk_write_file(dir, "config.json", C3 "\"sound_gen\": true, \"sound_dim\": 64, \"action_gen\": true, "
                  "\"action_dim\": 32, \"num_embodiment_domains\": 16}");
    CHECK(model_preset("cosmos3-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.audio_channels == 64 && mc.action_dim == 32 &&
               mc.action_domains == 16 && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {C3 "\"hidden_act\": \"relu2\"}", "hidden_act"},
        {C3 "\"attention_bias\": true}", "attention_bias"},
        {C3 "\"rope_theta\": 10000.0}", "rope_theta"},
        {C3 "\"qk_norm_for_text\": false}", "qk_norm_for_text"},
        {C3 "\"unified_3d_mrope_reset_spatial_ids\": false}", "reset_spatial_ids"},
        {C3 "\"patch_latent_dim\": 100}", "patch_latent_dim 100"},
        {C3 "\"sound_gen\": true}", "sound_gen 1"},
    };
#undef C3
    expect_json_refusals(dir, "config.json", "cosmos3-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"cosmos3\"}", &mc) == ST_OK && !strcmp(mc.preset, "cosmos3-nano") &&
          !strcmp(mc.family, "cosmos3"));
    CHECKF(from_json("{\"model_family\": \"cosmos3\", \"model_flavour\": \"edge\"}", &mc) == ST_ERR_UNSUPPORTED &&
               strstr(st_error(), "pretrained_model_name_or_path"),
           "%s", st_error());
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* UNet2DConditionModel's config.json, stable-diffusion-v1-5's and stable-diffusion-xl-base-1.0's unet/ as published,
 * reads as the sd15 and sdxl presets; the micro-blocks are counted from it; what segtrain does not build is refused
 * by name. */
static void test_unet_json(void)
{
    char dir[] = "/tmp/segtrain-unet-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define U "{\"_class_name\": \"UNet2DConditionModel\", "
    tk_write_file(dir, "config.json", U "\"_diffusers_version\": \"0.6.0\", \"act_fn\": \"silu\", "
                  "\"attention_head_dim\": 8, \"block_out_channels\": [320, 640, 1280, 1280], "
                  "\"center_input_sample\": false, \"cross_attention_dim\": 768, \"down_block_types\": "
                  "[\"CrossAttnDownBlock2D\", \"CrossAttnDownBlock2D\", \"CrossAttnDownBlock2D\", \"DownBlock2D\"], "
                  "\"downsample_padding\": 1, \"flip_sin_to_cos\": true, \"freq_shift\": 0, \"in_channels\": 4, "
                  "\"layers_per_block\": 2, \"mid_block_scale_factor\": 1, \"norm_eps\": 1e-05, "
                  "\"norm_num_groups\": 32, \"out_channels\": 4, \"sample_size\": 64, \"up_block_types\": "
                  "[\"UpBlock2D\", \"CrossAttnUpBlock2D\", \"CrossAttnUpBlock2D\", \"CrossAttnUpBlock2D\"]}");
    model_config mc, want;
    CHECK(model_preset("sd1x-tiny", &mc) == ST_OK && model_preset("sd15", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.depth == 45 &&
               mc.hidden == want.hidden && mc.channels == want.channels && mc.text_dim == want.text_dim &&
               mc.unet_levels == 4 && mc.unet_layers == 2 && mc.unet_mid == 1 && mc.norm_groups == 32 &&
               !memcmp(mc.unet_channels, want.unet_channels, sizeof mc.unet_channels) &&
               !memcmp(mc.unet_heads, want.unet_heads, sizeof mc.unet_heads) &&
               !memcmp(mc.unet_attn, want.unet_attn, sizeof mc.unet_attn) && !mc.unet_linear &&
               mc.norm_eps == want.norm_eps && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {U "\"down_block_types\": [\"CrossAttnDownBlock2D\", \"AttnDownBlock2D\", \"DownBlock2D\", \"DownBlock2D\"]}",
         "down_block_types[1] is \"AttnDownBlock2D\""},
        {U "\"up_block_types\": [\"CrossAttnUpBlock2D\", \"CrossAttnUpBlock2D\", \"CrossAttnUpBlock2D\", "
         "\"CrossAttnUpBlock2D\"]}", "up_block_types[0]"},
        {U "\"block_out_channels\": [320, 640, 1280, 1280, 1280]}", "block_out_channels"},
        {U "\"block_out_channels\": [32, 64], \"attention_head_dim\": [2, 2, 2]}", "attention_head_dim has 3"},
        {U "\"addition_embed_type\": \"text_time\"}", "addition_embed_type"},
        {U "\"encoder_hid_dim\": 4096}", "encoder_hid_dim"},
        {U "\"class_embed_type\": \"timestep\"}", "class_embed_type"},
        {U "\"resnet_time_scale_shift\": \"scale_shift\"}", "resnet_time_scale_shift"},
        {U "\"out_channels\": 8}", "out_channels 8"},
        {U "\"flip_sin_to_cos\": false}", "flip_sin_to_cos"},
        {U "\"only_cross_attention\": true}", "only_cross_attention"},
        {U "\"time_cond_proj_dim\": 256}", "time_cond_proj_dim"},
    };
    expect_json_refusals(dir, "config.json", "sd1x-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"sd1x\"}", &mc) == ST_OK && !strcmp(mc.preset, "sd15"));
    /* stable-diffusion-xl-base-1.0's unet/config.json as published reads as the sdxl preset */
#define XL U "\"addition_embed_type\": \"text_time\", \"addition_time_embed_dim\": 256, "
    tk_write_file(dir, "config.json", XL "\"attention_head_dim\": [5, 10, 20], \"block_out_channels\": [320, 640, "
                  "1280], \"cross_attention_dim\": 2048, \"down_block_types\": [\"DownBlock2D\", "
                  "\"CrossAttnDownBlock2D\", \"CrossAttnDownBlock2D\"], \"layers_per_block\": 2, \"norm_eps\": 1e-05, "
                  "\"norm_num_groups\": 32, \"num_attention_heads\": null, \"projection_class_embeddings_input_dim\": "
                  "2816, \"sample_size\": 128, \"transformer_layers_per_block\": [1, 2, 10], \"up_block_types\": "
                  "[\"CrossAttnUpBlock2D\", \"CrossAttnUpBlock2D\", \"UpBlock2D\"], \"upcast_attention\": null, "
                  "\"use_linear_projection\": true}");
    CHECK(model_preset("sdxl-tiny", &mc) == ST_OK && model_preset("sdxl", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.text_dim == 2048 && mc.pooled_dim == 1280 && mc.time_channels == 256 && mc.unet_levels == 3 &&
               mc.unet_mid == 10 && mc.unet_linear && want.unet_linear && mc.pooled_dim == want.pooled_dim &&
               mc.time_channels == want.time_channels && mc.unet_mid == want.unet_mid &&
               !memcmp(mc.unet_channels, want.unet_channels, sizeof mc.unet_channels) &&
               !memcmp(mc.unet_heads, want.unet_heads, sizeof mc.unet_heads) &&
               !memcmp(mc.unet_attn, want.unet_attn, sizeof mc.unet_attn) && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *xl_bad[][2] = {
        {U "\"block_out_channels\": [384, 768, 1536, 1536], \"cross_attention_dim\": 1280, "
         "\"addition_embed_type\": \"text_time\", \"addition_time_embed_dim\": 256, "
         "\"projection_class_embeddings_input_dim\": 2560}", "SDXL's refiner"},
        {U "\"block_out_channels\": [320, 640, 1280]}", "addition_embed_type is null"},
        {XL "\"block_out_channels\": [320, 640, 1280], \"projection_class_embeddings_input_dim\": 1000}",
         "projection_class_embeddings_input_dim 1000"},
    };
    expect_json_refusals(dir, "config.json", "sdxl-tiny", xl_bad, sizeof xl_bad / sizeof *xl_bad, 0, false);
    CHECK(from_json("{\"model_family\": \"sdxl\"}", &mc) == ST_OK && !strcmp(mc.preset, "sdxl"));
    /* Kolors-diffusers' unet/config.json: SDXL's with ChatGLM3's text through encoder_hid_proj */
    tk_write_file(dir, "config.json", XL "\"attention_head_dim\": [5, 10, 20], \"block_out_channels\": [320, 640, "
                  "1280], \"cross_attention_dim\": 2048, \"down_block_types\": [\"DownBlock2D\", "
                  "\"CrossAttnDownBlock2D\", \"CrossAttnDownBlock2D\"], \"encoder_hid_dim\": 4096, "
                  "\"encoder_hid_dim_type\": \"text_proj\", \"layers_per_block\": 2, "
                  "\"projection_class_embeddings_input_dim\": 5632, \"sample_size\": 128, "
                  "\"transformer_layers_per_block\": [1, 2, 10], \"up_block_types\": [\"CrossAttnUpBlock2D\", "
                  "\"CrossAttnUpBlock2D\", \"UpBlock2D\"], \"use_linear_projection\": true}");
    CHECK(model_preset("kolors-tiny", &mc) == ST_OK && model_preset("kolors", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.text_dim == 4096 &&
               mc.unet_cross == 2048 && mc.pooled_dim == 4096 && mc.text_dim == want.text_dim &&
               mc.unet_cross == want.unet_cross && mc.pooled_dim == want.pooled_dim &&
               !memcmp(mc.unet_attn, want.unet_attn, sizeof mc.unet_attn) && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *kolors_bad[][2] = {
        {XL "\"block_out_channels\": [320, 640, 1280], \"projection_class_embeddings_input_dim\": 2816}",
         "encoder_hid_dim 0"},
        {XL "\"block_out_channels\": [320, 640, 1280], \"encoder_hid_dim\": 4096, \"encoder_hid_dim_type\": "
         "\"image_proj\", \"projection_class_embeddings_input_dim\": 2816}", "image_proj"},
    };
    expect_json_refusals(dir, "config.json", "kolors-tiny", kolors_bad, sizeof kolors_bad / sizeof *kolors_bad, 0,
                         false);
    CHECK(from_json("{\"model_family\": \"kolors\"}", &mc) == ST_OK && !strcmp(mc.preset, "kolors"));
    EXPECT_REFUSAL("{\"model_family\": \"sd1x\", \"model_flavour\": \"realvis\"}", ST_ERR_UNSUPPORTED, "RealVisXL",
                   "model_family sdxl");
    EXPECT_REFUSAL("{\"model_family\": \"sdxl\", \"model_flavour\": \"refiner-1.0\"}", ST_ERR_UNSUPPORTED,
                   "aesthetic score", "base-1.0:sdxl");
#undef XL
#undef U
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* SDXL's six size ids after a caption's text and pooled vector, in pixels, as the pipeline's add_time_ids orders them:
 * original (height, width), crop (top, left), target (height, width); the image uncropped at the training size. */
static void test_size_ids(void)
{
    model_config mc;
    CHECK(model_preset("sdxl-tiny", &mc) == ST_OK);
    mc.height = 8, mc.width = 12;
    CHECKF(model_config_check(&mc) == ST_OK, "%s", st_error());
    const int64_t K = model_cond_len(&mc);
    CHECK(K == mc.text_len * mc.text_dim + mc.pooled_dim + 6);
    float *cond = malloc((size_t)K * sizeof(float));
    model_condition(&mc, 0, "a wide picture", cond);
    const float want[6] = {64, 96, 0, 0, 64, 96}, *ids = cond + K - 6;
    CHECKF(!memcmp(ids, want, sizeof want), "size ids %g %g %g %g %g %g", ids[0], ids[1], ids[2], ids[3], ids[4],
           ids[5]);
    free(cond);
}

/* StableCascadeUNet's config.json, stable-cascade-prior's prior/ as published (dropout 0.1), reads as the
 * stable-cascade-c preset; what segtrain does not build is refused by name. */
static void test_cascade_json(void)
{
    char dir[] = "/tmp/segtrain-cascade-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define SC "{\"_class_name\": \"StableCascadeUNet\", "
#define SC_LAYER "[\"SDCascadeResBlock\", \"SDCascadeTimestepBlock\", \"SDCascadeAttnBlock\"]"
#define SC_C SC "\"block_out_channels\": [2048, 2048], \"block_types_per_layer\": [" SC_LAYER ", " SC_LAYER "], " \
             "\"clip_image_in_channels\": 768, \"clip_seq\": 4, \"clip_text_in_channels\": 1280, " \
             "\"clip_text_pooled_in_channels\": 1280, \"conditioning_dim\": 2048, " \
             "\"down_blocks_repeat_mappers\": [1, 1], \"down_num_layers_per_block\": [8, 24], " \
             "\"effnet_in_channels\": null, \"in_channels\": 16, \"kernel_size\": 3, " \
             "\"num_attention_heads\": [32, 32], \"out_channels\": 16, \"patch_size\": 1, " \
             "\"pixel_mapper_in_channels\": null, \"self_attn\": true, \"switch_level\": [false], " \
             "\"timestep_conditioning_type\": [\"sca\", \"crp\"], \"timestep_ratio_embedding_dim\": 64, " \
             "\"up_blocks_repeat_mappers\": [1, 1], \"up_num_layers_per_block\": [24, 8], "
    tk_write_file(dir, "config.json", SC_C "\"dropout\": [0.0, 0.0]}");
    model_config mc, want;
    CHECK(model_preset("stable-cascade-tiny", &mc) == ST_OK && model_preset("stable-cascade-c", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.depth == 195 &&
               mc.hidden == want.hidden && mc.channels == 16 && mc.text_dim == 1280 && mc.pooled_dim == 1280 &&
               mc.image_dim == 768 && mc.unet_cross == 2048 && mc.clip_seq == 4 && mc.time_channels == 64 &&
               !mc.cascade_resample && !memcmp(mc.unet_channels, want.unet_channels, sizeof mc.unet_channels) &&
               !memcmp(mc.unet_heads, want.unet_heads, sizeof mc.unet_heads) &&
               !memcmp(mc.unet_attn, want.unet_attn, sizeof mc.unet_attn) && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    tk_write_file(dir, "config.json", SC_C "\"dropout\": [0.1, 0.1]}"); /* as published */
    CHECK(model_preset("stable-cascade-tiny", &mc) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.cascade_dropout[0] == 0.1f &&
               mc.cascade_dropout[1] == 0.1f && mc.cascade_dropout[0] == want.cascade_dropout[0],
           "%s", st_error());
    const char *bad[][2] = {
        {SC_C "\"dropout\": [0.1, 1.0]}", "dropout is not a number in [0, 1)"},
        {SC "\"dropout\": 0.0, \"clip_text_in_channels\": 1280, \"clip_image_in_channels\": 768, "
            "\"effnet_in_channels\": 16}", "effnet_in_channels"},
        {SC "\"dropout\": 0.0, \"clip_image_in_channels\": 768}", "clip_text_in_channels 0"},
        {SC "\"dropout\": 0.0, \"clip_text_in_channels\": 1280, \"clip_image_in_channels\": 768, "
            "\"switch_level\": [true]}", "switch_level holds true"},
        {SC "\"dropout\": 0.0, \"clip_text_in_channels\": 1280, \"clip_image_in_channels\": 768, "
            "\"up_num_layers_per_block\": [8, 24]}", "up_num_layers_per_block[0] is 8"},
        {SC "\"dropout\": 0.0, \"clip_text_in_channels\": 1280, \"clip_image_in_channels\": 768, "
            "\"down_blocks_repeat_mappers\": [2, 1]}", "down_blocks_repeat_mappers[0] is 2"},
        {SC "\"dropout\": 0.0, \"clip_text_in_channels\": 1280, \"clip_image_in_channels\": 768, "
            "\"block_types_per_layer\": [[\"SDCascadeResBlock\"], [\"SDCascadeResBlock\"]]}",
         "block_types_per_layer[0]"},
    };
#undef SC_C
#undef SC_LAYER
#undef SC
    expect_json_refusals(dir, "config.json", "stable-cascade-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"stable_cascade\"}", &mc) == ST_OK && !strcmp(mc.preset, "stable-cascade-c"));
    CHECK(from_json("{\"model_family\": \"stable_cascade\", \"model_flavour\": \"stage-c-lite\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "stable-cascade-c-lite") && mc.hidden == 1536 && mc.unet_attn[1] == 12);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* SanaTransformer2DModel's config.json (the class defaults, Sana_1600M_1024px's) reads as the sana-1.6b-1024 preset
 * and Sana 1.5's q/k norm as sana-1.5's; what segtrain does not build is refused by name. */
static void test_sana_json(void)
{
    char dir[] = "/tmp/segtrain-sana-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define SANA "{\"_class_name\": \"SanaTransformer2DModel\", "
    tk_write_file(dir, "config.json", SANA "\"in_channels\": 32, \"out_channels\": 32, \"num_attention_heads\": 70, "
                  "\"attention_head_dim\": 32, \"num_layers\": 20, \"num_cross_attention_heads\": 20, "
                  "\"cross_attention_head_dim\": 112, \"cross_attention_dim\": 2240, \"caption_channels\": 2304, "
                  "\"mlp_ratio\": 2.5, \"dropout\": 0.0, \"attention_bias\": false, \"sample_size\": 32, "
                  "\"patch_size\": 1, \"norm_elementwise_affine\": false, \"norm_eps\": 1e-06, "
                  "\"interpolation_scale\": null, \"guidance_embeds\": false, \"qk_norm\": null}");
    model_config mc, want;
    CHECK(model_preset("sana-tiny", &mc) == ST_OK && model_preset("sana-1.6b-1024", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len, mc.vae_scale = want.vae_scale;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.cross_heads == want.cross_heads && mc.ffn_dim == want.ffn_dim &&
               mc.channels == want.channels && mc.text_dim == want.text_dim && mc.patch == 1 && !mc.qk_norm &&
               model_config_check(&mc) == ST_OK,
           "%s", st_error());
    tk_write_file(dir, "config.json", SANA "\"num_layers\": 60, \"qk_norm\": \"rms_norm_across_heads\"}");
    CHECK(model_preset("sana-tiny", &mc) == ST_OK && model_preset("sana-1.5-4.8b-1024", &want) == ST_OK);
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.qk_norm && mc.depth == want.depth &&
               want.qk_norm && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    const char *bad[][2] = {
        {SANA "\"qk_norm\": \"layer_norm\"}", "qk_norm"},
        {SANA "\"guidance_embeds\": true}", "guidance_embeds"},
        {SANA "\"interpolation_scale\": 1}", "interpolation_scale"},
        {SANA "\"attention_bias\": true}", "attention_bias"},
        {SANA "\"cross_attention_dim\": 1024}", "cross_attention_dim 1024"},
        {SANA "\"timestep_scale\": 1000}", "timestep_scale"},
    };
#undef SANA
    expect_json_refusals(dir, "config.json", "sana-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    CHECK(from_json("{\"model_family\": \"sana\"}", &mc) == ST_OK && !strcmp(mc.preset, "sana-1.5-4.8b-1024"));
    CHECK(from_json("{\"model_family\": \"sana\", \"model_flavour\": \"sana1.0-600m-512\"}", &mc) == ST_OK &&
          !strcmp(mc.preset, "sana-600m-512") && mc.hidden == 1152 && mc.cross_heads == 16 && mc.ffn_dim == 2880);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* SanaVideoTransformer3DModel's config.json (diffusers' conversion of SANA-Video 2B 480p) reads as the
 * sanavideo-2b-480p preset; what segtrain does not build is refused by name. */
static void test_sanavideo_json(void)
{
    char dir[] = "/tmp/segtrain-sanavideo-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
#define SV "{\"_class_name\": \"SanaVideoTransformer3DModel\", "
    tk_write_file(dir, "config.json", SV "\"in_channels\": 16, \"out_channels\": 16, \"num_attention_heads\": 20, "
                  "\"attention_head_dim\": 112, \"num_layers\": 20, \"num_cross_attention_heads\": 20, "
                  "\"cross_attention_head_dim\": 112, \"cross_attention_dim\": 2240, \"caption_channels\": 2304, "
                  "\"mlp_ratio\": 3.0, \"dropout\": 0.0, \"attention_bias\": false, \"sample_size\": 30, "
                  "\"patch_size\": [1, 2, 2], \"norm_elementwise_affine\": false, \"norm_eps\": 1e-06, "
                  "\"interpolation_scale\": null, \"guidance_embeds\": false, \"guidance_embeds_scale\": 0.1, "
                  "\"qk_norm\": \"rms_norm_across_heads\", \"rope_max_seq_len\": 1024}");
    model_config mc, want;
    CHECK(model_preset("sanavideo-tiny", &mc) == ST_OK && model_preset("sanavideo-2b-480p", &want) == ST_OK);
    mc.height = want.height, mc.width = want.width, mc.text_len = want.text_len, mc.vae_scale = want.vae_scale, mc.frames = 1;
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && mc.depth == want.depth && mc.hidden == want.hidden &&
               mc.heads == want.heads && mc.cross_heads == want.cross_heads && mc.ffn_dim == want.ffn_dim &&
               mc.channels == want.channels && mc.text_dim == want.text_dim && mc.patch == 2 && mc.patch_t == 1 &&
               mc.qk_norm && model_config_check(&mc) == ST_OK,
           "%s", st_error());
    tk_write_file(dir, "config.json", SV "\"qk_norm\": null}"); /* the class defaults, without the norms */
    CHECKF(model_config_from_diffusers(dir, &mc) == ST_OK && !mc.qk_norm && mc.ffn_dim == 5600 && mc.patch == 2,
           "%s", st_error());
    const char *bad[][2] = {
        {SV "\"guidance_embeds\": true}", "guidance_embeds"},
        {SV "\"attention_bias\": true}", "attention_bias"},
        {SV "\"patch_size\": [1, 2, 1]}", "patch_size's height and width differ"},
        {SV "\"cross_attention_dim\": 1024}", "cross_attention_dim 1024"},
        {SV "\"qk_norm\": \"layer_norm\"}", "qk_norm"},
    };
#undef SV
    expect_json_refusals(dir, "config.json", "sanavideo-tiny", bad, sizeof bad / sizeof *bad, 0, false);
    remove(tk_path(dir, "config.json"));
    remove(dir);
}

/* An optional field set on a family without it is refused naming the families that have it, read from their
 * descriptors: every family whose presets set the field is named (dit has none of them). */
static void test_field_owners(void)
{
    model_config dit, mc, with;
    CHECK(model_preset("dit-tiny", &dit) == ST_OK);
    for (int i = 0; model_preset_name(i); i++) {
        CHECK(model_preset(model_preset_name(i), &mc) == ST_OK);
        const struct {
            const char *name;
            int64_t *at, value;
        } fields[] = {{"single_depth", &with.single_depth, mc.single_depth}, {"kv_heads", &with.kv_heads, mc.kv_heads},
                      {"cross_heads", &with.cross_heads, mc.cross_heads}, {"adaln_lora", &with.adaln_lora, mc.adaln_lora},
                      {"head_dim", &with.head_dim, mc.head_dim}, {"text_blocks", &with.text_blocks, mc.text_blocks}};
        for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
            if (!fields[f].value || (f == 1 && mc.kv_heads == mc.heads)) continue; /* kv_heads: where it is its own */
            with = dit;
            *fields[f].at = fields[f].value;
            const st_status st = model_config_check(&with);
            CHECKF(st == ST_ERR_INVALID && strstr(st_error(), mc.family), "%s's %s on dit: %s", model_preset_name(i),
                   fields[f].name, st ? st_error() : "accepted");
        }
        with = dit, with.norm_eps = mc.norm_eps;
        CHECKF(!mc.norm_eps || (model_config_check(&with) == ST_ERR_INVALID && strstr(st_error(), mc.family)),
               "%s's norm_eps on dit: %s", model_preset_name(i), st_error());
    }
}

int main(void)
{
    test_resolution();
    test_families();
    test_auraflow_json();
    test_flux2();
    test_longcat_json();
    test_kandinsky5_json();
    test_flux_folder_axes();
    test_qwen_json();
    test_ltxvideo_json();
    test_ltxvideo2_json();
    test_wan_vace_json();
    test_anima_json();
    test_lumina2_json();
    test_boogu_json();
    test_zimage_json();
    test_omnigen_json();
    test_krea2_json();
    test_flux3_json();
    test_zlab_i1_json();
    test_mageflow_json();
    test_wan_s2v_json();
    test_longcat_video_json();
    test_qwen21_json();
    test_minimax_json();
    test_cosmos3_json();
    test_unet_json();
    test_size_ids();
    test_cascade_json();
    test_sana_json();
    test_sanavideo_json();
    test_hunyuanvideo();
    test_hidream();
    test_doc();
    test_field_owners();
    return tk_finish();
}
