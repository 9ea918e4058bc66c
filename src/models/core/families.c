/* SimpleTuner's model families by SimpleTuner's names: for each, the topology it needs, the diffusers class that
 * defines its layout, and its flavours, as SimpleTuner registers them (ModelRegistry.register and each model's
 * flavour choices), with the flavours built so far and their presets. Selecting one not built is refused in one
 * line that says what it needs, so that a user's own config.json fails clearly and the same file plans once the
 * topology lands. */
#include <string.h>

#include "models/core/internal.h"
#include "segtrain/config.h"

enum topology { DUAL, XATTN, JOINT, LINEAR, UNET, AUDIO_LM, TOPOLOGY_COUNT };

static const char *const topology_text[TOPOLOGY_COUNT] = {
    [DUAL] = "the dual-stream MMDiT topology (text and image streams with joint attention)",
    [XATTN] = "the cross-attention DiT topology (image or video tokens attending to text tokens)",
    [JOINT] = "the single-stream joint DiT topology (text and image tokens in one sequence)",
    [LINEAR] = "the linear-attention DiT topology (ReLU linear attention, Mix-FFN)",
    [UNET] = "the U-Net topology (ResNet, attention and up/down-sampling micro-blocks)",
    [AUDIO_LM] = "an autoregressive audio language model, which is not a diffusion transformer",
};

static const struct st_family {
    const char *name, *alias; /* SimpleTuner's registered name, and its example folder's where that differs */
    const char *title;
    enum topology topology;
    const char *diffusers; /* the class whose weight names and layout the family will load */
    const char *flavours;  /* "a|b|c" */
    const char *built;     /* the flavours built, each with its preset: "flavour:preset|..."; NULL: none */
    const char *fallback;  /* the flavour SimpleTuner takes when none is given */
} st_families[] = {
    {"ace_step", NULL, "ACE-Step", XATTN, "AceStepTransformer1DModel", "base|v15-turbo|v15-base|v15-sft",
     "v15-turbo:ace-step-1.5|v15-base:ace-step-1.5|v15-sft:ace-step-1.5", "base"},
    {"anima", NULL, "Anima", XATTN, "CosmosTransformer3DModel",
     "release|base-v1.0|preview-3|preview-2|preview|gazingstars123-2.9b",
     "release:anima|base-v1.0:anima|preview-3:anima|preview-2:anima|preview:anima", "preview-3"},
    {"auraflow", NULL, "AuraFlow", DUAL, "AuraFlowTransformer2DModel", "pony|v0.3|v0.2|v0.1", "v0.3:auraflow", "v0.3"},
    {"boogu_image", NULL, "Boogu-Image", DUAL, "BooguImageTransformer2DModel",
     "v0.1-base|v0.1-base-fp8|v0.1-turbo|v0.1-turbo-fp8|v0.1-edit|v0.1-edit-fp8", NULL, NULL},
    {"chroma", NULL, "Chroma 1", DUAL, "ChromaTransformer2DModel", "base|hd|flash",
     "base:chroma|hd:chroma|flash:chroma", "base"},
    {"cosmos2image", "cosmos", "Cosmos 2 (T2I)", XATTN, "CosmosTransformer3DModel", "2b|14b",
     "2b:cosmos2-2b|14b:cosmos2-14b", "2b"},
    {"cosmos3", NULL, "Cosmos 3", JOINT, "Cosmos3OmniTransformer", "edge|nano|super|super-i2v|super-t2i",
     "nano:cosmos3-nano", "nano"},
    {"deepfloyd", NULL, "DeepFloyd IF", UNET, "UNet2DConditionModel",
     "i-medium-400m|i-large-900m|i-xlarge-4.3b|ii-medium-450m|ii-large-1.2b", NULL, NULL},
    {"ernie", NULL, "ERNIE-Image", JOINT, "ErnieImageTransformer2DModel", "base|turbo", "base:ernie-image", "base"},
    {"flux", NULL, "Flux.1", DUAL, "FluxTransformer2DModel", "dev|krea|schnell|kontext|fluxbooru|libreflux",
     "dev:flux-dev|krea:flux-dev|schnell:flux-schnell|fluxbooru:flux-dev", "krea"},
    {"flux2", NULL, "Flux.2", DUAL, "Flux2Transformer2DModel", "dev|klein-4b|klein-9b",
     "dev:flux2-dev|klein-4b:flux2-klein-4b|klein-9b:flux2-klein-9b", "klein-9b"},
    {"flux3_image", NULL, "Flux.3 Klein", JOINT, "Flux3Transformer2DModel", "", ":flux3-klein", ""},
    {"heartmula", NULL, "HeartMuLa", AUDIO_LM, "HeartMuLaModel", "3b", NULL, NULL},
    {"hidream", NULL, "HiDream", DUAL, "HiDreamImageTransformer2DModel", "dev|full|fast",
     "full:hidream-full|dev:hidream-dev|fast:hidream-fast", "full"},
    /* SimpleTuner's hunyuanvideo is HunyuanVideo 1.5; "1.0" is segtrain's name for the first model */
    {"hunyuanvideo", NULL, "HunyuanVideo", DUAL, "HunyuanVideo15Transformer3DModel",
     "t2v-480p|t2v-720p|t2v-480p-distilled|i2v-480p|i2v-720p|i2v-480p-distilled|i2v-720p-distilled|1.0",
     "t2v-480p:hunyuanvideo15-480p|t2v-720p:hunyuanvideo15-720p|t2v-480p-distilled:hunyuanvideo15-480p|"
     "1.0:hunyuanvideo-1.0", "t2v-480p"},
    {"ideogram", NULL, "Ideogram 4", JOINT, "Ideogram4Transformer2DModel", "fp8|nf4", "fp8:ideogram-4|nf4:ideogram-4",
     "fp8"}, /* both the same transformer, quantised: it plans, and trains from a float copy of the weights */
    {"infinitetalk", NULL, "InfiniteTalk", XATTN, "InfiniteTalkTransformer3DModel", "single-14b-480p", NULL, NULL},
    {"kandinsky5-image", "kandinsky5_image", "Kandinsky5-Image", XATTN, "Kandinsky5Transformer3DModel",
     "t2i-lite-sft|t2i-lite-pretrain|i2i-lite-sft|i2i-lite-pretrain",
     "t2i-lite-sft:kandinsky5-t2i-lite|t2i-lite-pretrain:kandinsky5-t2i-lite", "t2i-lite-sft"},
    {"kandinsky5-video", "kandinsky5_video", "Kandinsky5-Video", XATTN, "Kandinsky5Transformer3DModel",
     "t2v-lite-sft-5s|t2v-lite-pretrain-5s|t2v-lite-sft-10s|t2v-lite-pretrain-10s|t2v-pro-sft-5s-hd|"
     "t2v-pro-sft-10s-hd|t2v-pro-pretrain-5s-hd|t2v-pro-pretrain-10s-hd|i2v-lite-5s|i2v-pro-sft-5s",
     "t2v-lite-sft-5s:kandinsky5-t2v-lite|t2v-lite-pretrain-5s:kandinsky5-t2v-lite|"
     "t2v-lite-sft-10s:kandinsky5-t2v-lite|t2v-lite-pretrain-10s:kandinsky5-t2v-lite|"
     "t2v-pro-sft-5s-hd:kandinsky5-t2v-pro|t2v-pro-sft-10s-hd:kandinsky5-t2v-pro|"
     "t2v-pro-pretrain-5s-hd:kandinsky5-t2v-pro|t2v-pro-pretrain-10s-hd:kandinsky5-t2v-pro", "t2v-lite-sft-5s"},
    {"kolors", NULL, "Kwai Kolors", UNET, "UNet2DConditionModel", "1.0", "1.0:kolors", "1.0"},
    {"krea2", NULL, "Krea 2", JOINT, "Krea2Transformer2DModel", "raw|turbo", "raw:krea2|turbo:krea2", "raw"},
    {"longcat_image", NULL, "LongCat-Image", DUAL, "LongCatImageTransformer2DModel", "final|dev|edit",
     "final:longcat-image|dev:longcat-image", "final"},
    {"longcat_video", NULL, "LongCat-Video", XATTN, "LongCatVideoTransformer3DModel", "final", NULL, NULL},
    {"ltxvideo", NULL, "LTXVideo", XATTN, "LTXVideoTransformer3DModel", "0.9.5|0.9.0",
     "0.9.5:ltxvideo-0.9.5|0.9.0:ltxvideo-0.9.5", "0.9.5"}, /* 0.9.0's transformer is 0.9.5's shape */
    {"ltxvideo2", NULL, "LTXVideo2", XATTN, "LTX2VideoTransformer3DModel",
     "dev|dev-fp4|dev-fp8|2.3-dev|2.3-distilled|2.5-dev|2.5-distilled",
     "dev:ltxvideo2-19b|dev-fp4:ltxvideo2-19b|dev-fp8:ltxvideo2-19b", "dev"}, /* fp4 and fp8: dev's, quantised */
    {"lumina2", NULL, "Lumina-T2I", JOINT, "Lumina2Transformer2DModel", "2.0|neta-lumina",
     "2.0:lumina2|neta-lumina:lumina2", "2.0"}, /* Neta Lumina: a Lumina-Image 2.0 fine-tune, the same shape */
    {"mageflow", NULL, "Mage-Flow", DUAL, "MageFlowTransformer2DModel",
     "base|default|turbo|edit-base|edit|edit-turbo", NULL, NULL},
    {"minimaxh3", NULL, "MiniMax H3", JOINT, "MiniMaxH3Transformer3DModel",
     "fl2va|ref2va|convrot-int8|convrot-int4|nvfp4|fp8-e4m3fn",
     "fl2va:minimaxh3|convrot-int8:minimaxh3|convrot-int4:minimaxh3|nvfp4:minimaxh3|fp8-e4m3fn:minimaxh3", "fl2va"},
    {"minimaxmusic", NULL, "MiniMax Music 3", AUDIO_LM, "MiniMaxMusic3Transformer1DModel", "music3", NULL, NULL},
    {"omnigen", NULL, "OmniGen", JOINT, "OmniGenTransformer2DModel", "v1", "v1:omnigen-v1", "v1"},
    {"pixart_sigma", "pixart", "PixArt Sigma", XATTN, "PixArtTransformer2DModel",
     "900M-1024-v0.6|900M-1024-v0.7-stage1|900M-1024-v0.7-stage2|600M-512|600M-1024|600M-2048",
     "900M-1024-v0.6:pixart-900m-1024|900M-1024-v0.7-stage1:pixart-900m-1024|900M-1024-v0.7-stage2:pixart-900m-1024|"
     "600M-512:pixart-sigma-512|600M-1024:pixart-sigma-1024|600M-2048:pixart-sigma-2048", "900M-1024-v0.6"},
    /* "v2.1" is segtrain's name for Qwen-Image 2.1 (QwenImage21Transformer2DModel), which SimpleTuner lists not yet */
    {"qwen_image", NULL, "Qwen-Image", DUAL, "QwenImageTransformer2DModel",
     "v1.0|v2.0|edit-v1|edit-v2|edit-v2+|edit-v3|v2.1", "v1.0:qwen-image|v2.0:qwen-image|v2.1:qwen-image-2.1",
     "v2.0"},
    {"sana", NULL, "Sana", LINEAR, "SanaTransformer2DModel",
     "sana1.5-4.8b-1024|sana1.5-1.6b-1024|sana1.0-1.6b-2048|sana1.0-1.6b-1024|sana1.0-600m-1024|sana1.0-600m-512",
     "sana1.5-4.8b-1024:sana-1.5-4.8b-1024|sana1.5-1.6b-1024:sana-1.5-1.6b-1024|sana1.0-1.6b-2048:sana-1.6b-2048|"
     "sana1.0-1.6b-1024:sana-1.6b-1024|sana1.0-600m-1024:sana-600m-1024|sana1.0-600m-512:sana-600m-512",
     "sana1.5-4.8b-1024"},
    {"sanavideo", NULL, "SanaVideo", LINEAR, "SanaVideoTransformer3DModel", "2b-480p", "2b-480p:sanavideo-2b-480p",
     "2b-480p"},
    {"sd1x", NULL, "Stable Diffusion 1.x", UNET, "UNet2DConditionModel", "1.5|1.4|dreamshaper|realvis",
     "1.5:sd15|1.4:sd15|dreamshaper:sd15", "dreamshaper"},
    {"sd2x", NULL, "Stable Diffusion 2.x", UNET, "UNet2DConditionModel", "", NULL, NULL},
    {"sd3", NULL, "Stable Diffusion 3.x", DUAL, "SD3Transformer2DModel", "medium|large",
     "medium:sd35-medium|large:sd35-large", "medium"},
    {"sdxl", NULL, "Stable Diffusion XL", UNET, "UNet2DConditionModel", "base-1.0|refiner-1.0|base-0.9|refiner-0.9",
     "base-1.0:sdxl|base-0.9:sdxl", "base-1.0"},
    {"stable_cascade", NULL, "Stable Cascade (Stage C)", UNET, "StableCascadeUNet", "stage-c|stage-c-lite",
     "stage-c:stable-cascade-c|stage-c-lite:stable-cascade-c-lite", "stage-c"},
    {"wan", NULL, "Wan", XATTN, "WanTransformer3DModel",
     "t2v-480p-1.3b-2.1|t2v-480p-14b-2.1|i2v-14b-2.1|i2v-14b-2.1-720p|i2v-14b-2.2-high|i2v-14b-2.2-low|"
     "animegen-t2v-high|animegen-t2v-low|flf2v-14b-2.1|vace-1.3b-2.1|vace-14b-2.1|ti2v-5b-2.2",
     "t2v-480p-1.3b-2.1:wan-1.3b|t2v-480p-14b-2.1:wan-14b|animegen-t2v-high:wan-14b|animegen-t2v-low:wan-14b|"
     "vace-1.3b-2.1:wan-vace-1.3b|vace-14b-2.1:wan-vace-14b",
     "t2v-480p-1.3b-2.1"},
    {"wan_s2v", NULL, "WanS2V", XATTN, "WanS2VTransformer3DModel", "s2v-14b-2.2", NULL, NULL},
    {"z_image", NULL, "Z-Image", JOINT, "ZImageTransformer2DModel", "base|turbo|turbo-ostris-v2|ostris-de-turbo",
     "base:z-image", "turbo-ostris-v2"},
    {"z_image_omni", NULL, "Z-Image Omni", JOINT, "ZImageOmniTransformer2DModel", "base|edit", NULL, NULL},
    {"zlab_i1", NULL, "zlab i1", JOINT, "ZlabI1Transformer2DModel", "3b", NULL, NULL},
};
#define ST_FAMILY_COUNT ((int)(sizeof st_families / sizeof *st_families))

/* Why a partly built family's other flavours are not built, where that is known (else "not built yet"). */
static const struct {
    const char *family, *why;
} unbuilt[] = {
    {"hunyuanvideo", "the i2v flavours also take the first frame's latents (the condition channels) and its SigLIP "
                     "image tokens; segtrain's conditioning carries no reference image"},
    {"ace_step", "base is ACE-Step 1.0, another transformer than 1.5's AceStepTransformer1DModel; the 1.5 flavours "
                 "(v15-turbo, v15-base, v15-sft) are built"},
    {"wan", "the i2v and flf2v flavours also take reference frames (CLIP image tokens, conditioning latents) and "
            "ti2v-5b-2.2 per-token timesteps and a 48-channel VAE; segtrain's conditioning carries no reference"},
    {"anima", "gazingstars123-2.9b is a single-file 2.9B checkpoint whose transformer sizes are not published as a "
              "diffusers config (SimpleTuner infers them from its tensors); give its converted folder as "
              "pretrained_model_name_or_path with a built flavour"},
    {"cosmos3", "edge, super and super-t2i are other transformer sizes (4 B and 65 B) whose configs were not at hand "
                "to verify; give the checkpoint's folder as pretrained_model_name_or_path with flavour nano. "
                "super-i2v also takes a first frame's latents, which segtrain's conditioning does not carry"},
    {"minimaxh3", "ref2va is the reference-to-video-and-audio transformer (SimpleTuner's transformer_ref, with "
                  "reference rows in its sequence); segtrain's conditioning carries no reference"},
    {"ltxvideo2", "the 2.3 and 2.5 flavours add gated attention, timestep-modulated prompt cross-attention "
                  "(cross_attn_mod, prompt_adaln) and per-modality connector projections; LTX-2.0's dev flavours are "
                  "built"},
    {"kandinsky5-video", "the i2v flavours also take the first frame's latents and its mask in the visual_cond "
                         "channels, which are zero in text-to-video; segtrain's conditioning carries no reference "
                         "image"},
    {"kandinsky5-image", "the i2i flavours also take a reference image's latents and mask as input channels "
                         "(visual_cond); segtrain's conditioning carries no reference image"},
    {"ernie", "turbo trains LoRA through an assistant adapter loaded beside it, which segtrain does not load; base, "
              "the same transformer shape, is built"},
    {"z_image", "the turbo flavours (turbo, turbo-ostris-v2, its default, and ostris-de-turbo) train LoRA through an "
                "assistant adapter (ostris's de-distillation LoRA) loaded beside it, which segtrain does not load; "
                "base, the same transformer shape, is built"},
    {"sd1x", "realvis is RealVisXL (SG161222/RealVisXL_V5.0), an SDXL checkpoint: plan it with model_family sdxl"},
    {"sdxl", "the refiners read OpenCLIP-G's text alone and five size ids, one of them an aesthetic score; the base "
             "flavours are built"},
    {"qwen_image", "the edit flavours also take reference images' latents as image tokens (at RoPE frame 1 on), and "
                   "edit-v2+ and edit-v3 modulate those with a zero timestep (zero_cond_t); segtrain's conditioning "
                   "carries no reference image"},
};

static const char *unbuilt_why(const char *family)
{
    for (size_t i = 0; i < sizeof unbuilt / sizeof *unbuilt; i++)
        if (!strcmp(family, unbuilt[i].family)) return unbuilt[i].why;
    return NULL;
}

static const char *const built[] = {"dit", "mmdit", "skipdit"};

static bool in_list(const char *list, const char *s)
{
    const size_t n = strlen(s);
    for (const char *p = list; *p;) {
        size_t w = strcspn(p, "|");
        if (w == n && !strncmp(p, s, n)) return true;
        p += w + (p[w] == '|');
    }
    return false;
}

const char *model_family_name(int i)
{
    if (i < 0) return NULL;
    if (i < 3) return built[i];
    return i - 3 < ST_FAMILY_COUNT ? st_families[i - 3].name : NULL;
}

static const struct st_family *find_family(const char *family)
{
    for (int i = 0; i < ST_FAMILY_COUNT; i++)
        if (!strcmp(family, st_families[i].name) || (st_families[i].alias && !strcmp(family, st_families[i].alias)))
            return &st_families[i];
    return NULL;
}

/* The preset that "flavour:preset" in f->built gives the flavour (the fallback's when empty), or NULL. */
static const char *built_preset(const struct st_family *f, const char *flavour, char *out, size_t n)
{
    if (!f->built) return NULL;
    if (!*flavour) flavour = f->fallback;
    const size_t k = strlen(flavour);
    for (const char *p = f->built; *p;) {
        const size_t w = strcspn(p, "|");
        const char *colon = memchr(p, ':', w);
        if (colon && (size_t)(colon - p) == k && !strncmp(p, flavour, k)) {
            snprintf(out, n, "%.*s", (int)(w - k - 1), colon + 1);
            return out;
        }
        p += w + (p[w] == '|');
    }
    return NULL;
}

st_status model_family_check(const char *family, const char *flavour)
{
    for (int i = 0; i < 3; i++) /* segtrain's own have no flavours: a SimpleTuner file's stays harmless */
        if (!strcmp(family, built[i])) return ST_OK;
    const struct st_family *f = find_family(family);
    if (!f) {
        const char *names[3 + ST_FAMILY_COUNT + 1]; /* and the NULL that ends them */
        int n = 0;
        while ((names[n] = model_family_name(n))) n++;
        const char *near = config_nearest(family, names, n);
        return st_fail(ST_ERR_INVALID, "model_family: \"%s\" is neither one of segtrain's topologies (dit, mmdit, "
                       "skipdit) nor a SimpleTuner family (did you mean %s? docs/FAMILIES.md lists them)", family, near);
    }
    if (*flavour && !in_list(f->flavours, flavour)) {
        /* segtrain's own sizes of a family ("tiny") are presets named after it: "flux" "tiny" is flux-tiny */
        char preset[64], pointer[160] = "";
        model_config mc;
        snprintf(preset, sizeof preset, "%s-%s", f->name, flavour);
        for (char *p = preset; *p; p++) *p = *p == '_' ? '-' : *p;
        if (model_preset(preset, &mc) == ST_OK)
            snprintf(pointer, sizeof pointer, "; segtrain's %s size of %s is a preset: give model_preset: %s (and "
                     "no model_flavour)", flavour, f->name, preset);
        return st_fail(ST_ERR_INVALID, "model_flavour: \"%s\" is not a flavour of %s (%s)%s", flavour, f->name,
                       *f->flavours ? f->flavours : "none known", pointer);
    }
    char preset[32];
    if (built_preset(f, flavour, preset, sizeof preset)) return ST_OK;
    if (!*flavour && f->fallback) flavour = f->fallback; /* the messages name the default flavour taken */
    if (f->built && unbuilt_why(f->name))
        return st_fail(ST_ERR_UNSUPPORTED, "model_flavour %s of %s (%s): not built: %s. Built flavours: %s", flavour,
                       f->name, f->title, unbuilt_why(f->name), f->built);
    if (f->built)
        return st_fail(ST_ERR_UNSUPPORTED, "model_flavour %s of %s (%s): not built yet; built flavours: %s", flavour,
                       f->name, f->title, f->built);
    if (f->topology == AUDIO_LM)
        return st_fail(ST_ERR_UNSUPPORTED, "model_family %s (%s): needs %s (%s); segtrain trains diffusion "
                       "transformers and does not plan to build it", f->name, f->title, topology_text[f->topology],
                       f->diffusers);
    char built_list[1024] = "dit, mmdit, skipdit";
    for (int i = 0; i < ST_FAMILY_COUNT; i++)
        if (st_families[i].built)
            snprintf(built_list + strlen(built_list), sizeof built_list - strlen(built_list), ", %s", st_families[i].name);
    return st_fail(ST_ERR_UNSUPPORTED, "model_family %s (%s%s%s): needs %s in diffusers' %s layout: planned, not "
                   "built yet. Built today: %s; --set model_family=mmdit plans this file on one", f->name, f->title,
                   *flavour ? ", flavour " : "", flavour, topology_text[f->topology], f->diffusers, built_list);
}

bool model_family_builds(const char *family, const char *topology)
{
    const struct st_family *f = find_family(family);
    for (const char *p = f && f->built ? f->built : ""; *p;) {
        const size_t w = strcspn(p, "|");
        const char *colon = memchr(p, ':', w);
        char preset[32];
        model_config mc;
        snprintf(preset, sizeof preset, "%.*s", colon ? (int)(w - (size_t)(colon + 1 - p)) : 0, colon ? colon + 1 : "");
        if (colon && model_preset(preset, &mc) == ST_OK && !strcmp(mc.family, topology)) return true;
        p += w + (p[w] == '|');
    }
    return false;
}

const char *model_family_preset(const char *family, const char *flavour, char *preset, size_t n)
{
    const struct st_family *f = find_family(family);
    return f ? built_preset(f, flavour, preset, n) : NULL;
}

const char *model_family_built_flavour(const char *family, int i, char *flavour, size_t n)
{
    const struct st_family *f = find_family(family);
    for (const char *p = f && f->built ? f->built : ""; *p; i--) {
        const size_t w = strcspn(p, "|"), k = strcspn(p, ":");
        if (i == 0) {
            snprintf(flavour, n, "%.*s", (int)(k < w ? k : w), p);
            return flavour;
        }
        p += w + (p[w] == '|');
    }
    return NULL;
}

const char *model_family_title(const char *family)
{
    const struct st_family *f = find_family(family);
    return f ? f->title : NULL;
}
