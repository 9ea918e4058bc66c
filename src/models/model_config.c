/* Presets, their checks, and from a run configuration to a model configuration: a preset's sizes, then any
 * size given (non-zero). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "segtrain/config.h"
#include "segtrain/model.h"

static const struct {
    const char *name, *family;
    int64_t depth, hidden, heads, patch, channels, resolution, classes, single_depth, text_len;
} presets[] = {
    {"dit-tiny", "dit", 4, 64, 4, 2, 4, 8, 10, 0, 0},
    {"dit-s2", "dit", 12, 384, 6, 2, 4, 32, 1000, 0, 0},
    {"dit-b2", "dit", 12, 768, 12, 2, 4, 32, 1000, 0, 0},
    {"dit-xl2", "dit", 28, 1152, 16, 2, 4, 32, 1000, 0, 0},
    {"mmdit-tiny", "mmdit", 2, 64, 4, 2, 4, 8, 10, 2, 8},
    {"mmdit-s", "mmdit", 4, 384, 6, 2, 4, 32, 1000, 8, 16},
    {"skipdit-tiny", "skipdit", 5, 64, 4, 2, 4, 8, 10, 0, 0},
    {"skipdit-s", "skipdit", 13, 384, 6, 2, 4, 32, 1000, 0, 0},
};
#define TEXT_VOCAB 1024
/* The presets' latent grids are those of images through Stable Diffusion's VAE (DiT's: 256 px -> 32). */
#define FAMILY_VAE_SCALE 8

st_status model_preset(const char *name, model_config *out)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(presets[i].name, name)) {
            *out = (model_config){.depth = presets[i].depth,
                                  .hidden = presets[i].hidden,
                                  .heads = presets[i].heads,
                                  .patch = presets[i].patch,
                                  .channels = presets[i].channels,
                                  .resolution = presets[i].resolution,
                                  .classes = presets[i].classes,
                                  .single_depth = presets[i].single_depth,
                                  .text_len = presets[i].text_len,
                                  .text_vocab = presets[i].text_len ? TEXT_VOCAB : 0,
                                  .vae_scale = FAMILY_VAE_SCALE,
                                  .mechanism = ATTN_FLASH};
            snprintf(out->family, sizeof out->family, "%s", presets[i].family);
            snprintf(out->preset, sizeof out->preset, "%s", name);
            return ST_OK;
        }
    return st_fail(ST_ERR_INVALID, "model_preset: '%s' is not one of dit-tiny, dit-s2, dit-b2, dit-xl2, mmdit-tiny, "
                   "mmdit-s, skipdit-tiny, skipdit-s", name);
}

st_status model_config_check(const model_config *mc)
{
    const bool mmdit = !strcmp(mc->family, "mmdit"), skipdit = !strcmp(mc->family, "skipdit");
    if (!mmdit && !skipdit && strcmp(mc->family, "dit"))
        return st_fail(ST_ERR_INVALID, "model_family: '%s' is not one of dit, mmdit, skipdit", mc->family);
    const struct {
        const char *key;
        int64_t v;
    } positive[] = {{"depth", mc->depth},           {"hidden_size", mc->hidden}, {"num_heads", mc->heads},
                    {"patch_size", mc->patch},      {"in_channels", mc->channels}, {"resolution", mc->resolution},
                    {"num_classes", mc->classes},   {"tokenizer_max_length", mmdit ? mc->text_len : 1},
                    {"vae_scale_factor", mc->vae_scale}};
    for (size_t i = 0; i < sizeof positive / sizeof *positive; i++)
        if (positive[i].v < 1) return st_fail(ST_ERR_INVALID, "%s: %lld must be at least 1", positive[i].key,
                                              (long long)positive[i].v);
    if (mmdit && mc->text_vocab < 2)
        return st_fail(ST_ERR_INVALID, "text_vocab_size: %lld must be at least 2 (padding and one word)",
                       (long long)mc->text_vocab);
    if (mc->hidden % mc->heads)
        return st_fail(ST_ERR_INVALID, "num_heads: %lld does not divide hidden_size %lld", (long long)mc->heads,
                       (long long)mc->hidden);
    if (mc->hidden % 4)
        return st_fail(ST_ERR_INVALID, "hidden_size: %lld must be a multiple of 4 (the 2D sine-cosine table)",
                       (long long)mc->hidden);
    if (mmdit && (mc->hidden / mc->heads) % 4)
        return st_fail(ST_ERR_INVALID, "num_heads: the head width %lld must be a multiple of 4 (2D rotary embedding)",
                       (long long)(mc->hidden / mc->heads));
    if (skipdit && (mc->depth < 3 || mc->depth % 2 == 0))
        return st_fail(ST_ERR_INVALID, "depth: %lld blocks; skipdit needs an odd number >= 3 (in-blocks, a mid block, "
                       "as many out-blocks)", (long long)mc->depth);
    if (mc->single_depth < 0 || (!mmdit && mc->single_depth))
        return st_fail(ST_ERR_INVALID, "num_single_layers: %lld (single-stream blocks exist in mmdit only)",
                       (long long)mc->single_depth);
    if (mc->resolution % mc->patch)
        return st_fail(ST_ERR_INVALID, "patch_size: %lld does not divide resolution %lld", (long long)mc->patch,
                       (long long)mc->resolution);
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

st_status model_config_from(const config *cfg, model_config *mc)
{
    /* model_family alone picks its family's tiny preset; both given must agree */
    const char *family = config_string(cfg, "model_family"), *preset = config_string(cfg, "model_preset");
    st_status st = model_family_check(family, config_string(cfg, "model_flavour"));
    if (st) return st;
    char tiny[32];
    if (config_is_set(cfg, "model_family") && !config_is_set(cfg, "model_preset"))
        snprintf(tiny, sizeof tiny, "%s-tiny", family), preset = tiny;
    st = model_preset(preset, mc);
    if (st) return st;
    if (config_is_set(cfg, "model_family") && strcmp(family, mc->family))
        return st_fail(ST_ERR_INVALID, "model_preset: %s belongs to the %s family, but model_family is %s", preset, mc->family,
                       family);
    const struct {
        const char *key;
        int64_t *field;
    } sizes[] = {{"depth", &mc->depth},          {"hidden_size", &mc->hidden},   {"num_heads", &mc->heads},
                 {"patch_size", &mc->patch},     {"in_channels", &mc->channels}, {"vae_scale_factor", &mc->vae_scale},
                 {"num_classes", &mc->classes},  {"num_single_layers", &mc->single_depth},
                 {"tokenizer_max_length", &mc->text_len}, {"text_vocab_size", &mc->text_vocab}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (config_int(cfg, sizes[i].key) > 0) *sizes[i].field = config_int(cfg, sizes[i].key); /* 0: the preset's */
    const double resolution = config_float(cfg, "resolution");
    if (resolution > 0) {
        const double edge = image_edge(resolution, config_string(cfg, "resolution_type"));
        const int64_t patches = llround(edge / (double)(mc->vae_scale * mc->patch));
        mc->resolution = (patches > 1 ? patches : 1) * mc->patch;
    }
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
    return model_config_check(mc);
}
