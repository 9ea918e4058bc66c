/* From a run configuration to a model configuration (checked by config_check.c): a preset's sizes
 * (model_presets.c), then any size given (non-zero). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/core/family.h"
#include "models/core/internal.h"
#include "segtrain/config.h"
#include "segtrain/model.h"

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

st_status model_shapes_of(const config *cfg, const char *key, bucket_shape *out, int *n)
{
    const char *p = config_string(cfg, key);
    *n = 0;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        long long w = 0, h = 0, f = 0;
        int used = 0, got = sscanf(p, "%lldx%lld%n@%lld%n", &w, &h, &used, &f, &used);
        if (got == 1 && p[strspn(p, "0123456789")] != 'x') /* an edge alone: its square */
            h = w, got = 2, used = (int)strspn(p, "0123456789");
        if (got < 2 || w < 1 || h < 1 || w > 65536 || h > 65536 || f < 0 || f > (1 << 20) ||
            (p[used] && p[used] != ',' && p[used] != ' '))
            return st_fail(ST_ERR_INVALID, "%s: \"%.40s\" is not a shape: WxH in pixels, WxH@F with frames "
                           "(832x480@81), or an edge (1024: its square), up to 65536 a side", key, p);
        if (*n == MODEL_SHAPES_MAX) return st_fail(ST_ERR_INVALID, "%s: more than %d shapes", key, MODEL_SHAPES_MAX);
        out[(*n)++] = (bucket_shape){w, h, f};
        p += used;
    }
    return ST_OK;
}

st_status model_bucket_shapes(const config *cfg, bucket_shape *out, int *n)
{
    return model_shapes_of(cfg, "bucket_shapes", out, n);
}

void bucket_shape_name(const bucket_shape *s, char *buf, size_t n)
{
    if (s->frames) snprintf(buf, n, "%lldx%lld@%lld", (long long)s->width, (long long)s->height, (long long)s->frames);
    else snprintf(buf, n, "%lldx%lld", (long long)s->width, (long long)s->height);
}

st_status model_set_bucket(config *cfg, const bucket_shape *s)
{
    char set[80] = "bucket_shapes=";
    bucket_shape_name(s, set + strlen(set), sizeof set - strlen(set));
    return config_set(cfg, set);
}

st_status model_config_at(const config *cfg, const bucket_shape *s, model_config *mc)
{
    config *one = config_copy(cfg);
    st_status st = one ? model_set_bucket(one, s) : st_host_oom("a copy of the config");
    if (!st) st = model_config_from(one, mc);
    config_free(one);
    return st;
}

/* The latent of the run's first bucket shape: each edge over the VAE's factor, a whole number of patches. */
static st_status first_bucket(const bucket_shape *s, model_config *mc)
{
    const int64_t unit = mc->vae_scale * mc->patch;
    char name[48];
    bucket_shape_name(s, name, sizeof name);
    if (s->width % unit || s->height % unit)
        return st_fail(ST_ERR_INVALID, "bucket_shapes: %s; %s takes edges of whole patches, multiples of %lld pixels "
                       "(vae_scale_factor %lld x patch %lld): %lldx%lld is the nearest", name, mc->family,
                       (long long)unit, (long long)mc->vae_scale, (long long)mc->patch,
                       (long long)(llround((double)s->width / (double)unit) * unit),
                       (long long)(llround((double)s->height / (double)unit) * unit));
    mc->height = s->height / mc->vae_scale, mc->width = s->width / mc->vae_scale;
    return ST_OK;
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

/* lora_type lycoris: the spec of lycoris_config, on a family whose module classes are mapped */
static st_status lycoris_of(const config *cfg, model_config *mc)
{
    const lyco_class *classes = family_of_config(mc)->lycoris_classes;
    if (!classes)
        return st_fail(ST_ERR_UNSUPPORTED, "lora_type lycoris: %s's modules are not mapped onto LyCORIS's module classes "
                       "yet (pixart, sana, sdxl, sd1x, kolors, cosmos2image, cosmos3, kandinsky5, omnigen and "
                       "stable_cascade are; docs/LYCORIS.md)", mc->family);
    st_status st = lycoris_spec_read(config_string(cfg, "lycoris_config"), &mc->lycoris);
    for (int i = 0; !st && i < mc->lycoris.n_classes; i++) {
        const lyco_class *c = classes;
        while (c->cls && strcmp(c->cls, mc->lycoris.classes[i].cls)) c++;
        if (!c->cls)
            st = st_fail(ST_ERR_UNSUPPORTED, "%s: apply_preset targets %s, a module class segtrain does not map onto "
                         "%s's layers (docs/LYCORIS.md lists those it maps)", config_string(cfg, "lycoris_config"),
                         mc->lycoris.classes[i].cls, mc->family);
    }
    mc->lora_rank = 1, mc->lora_alpha = 1; /* the base frozen; the spec decides the adapters */
    mc->lora_attention = mc->lora_mlp = true;
    return st;
}

/* ramtorch (docs/WEIGHTS.md): the layers it streams; the selection itself is model.c's, over the registered layers */
static st_status ramtorch_keys(const config *cfg, model_config *mc)
{
    mc->ramtorch = config_bool(cfg, "ramtorch");
    if (!mc->ramtorch) return ST_OK;
    if (config_bool(cfg, "enable_group_offload")) /* SimpleTuner's cmd_args.py refuses the pair too */
        return st_fail(ST_ERR_INVALID, "ramtorch cannot be used together with enable_group_offload (SimpleTuner "
                       "refuses the pair): pick one");
    if (mc->blocks_to_swap) /* SimpleTuner's safety_check.py exits on the pair */
        return st_fail(ST_ERR_INVALID, "ramtorch is incompatible with musubi_blocks_to_swap (SimpleTuner refuses the "
                       "pair): set musubi_blocks_to_swap=0 or ramtorch=false");
    mc->ramtorch_percent = config_float(cfg, "ramtorch_transformer_percent");
    const char *targets = config_string(cfg, "ramtorch_target_modules");
    if (!strcmp(targets, "None")) targets = ""; /* SimpleTuner reads the text None as no patterns */
    if (strlen(targets) >= sizeof mc->ramtorch_targets)
        return st_fail(ST_ERR_INVALID, "ramtorch_target_modules: %zu characters, at most %zu", strlen(targets),
                       sizeof mc->ramtorch_targets - 1);
    snprintf(mc->ramtorch_targets, sizeof mc->ramtorch_targets, "%s", targets);
    return ST_OK;
}

/* enable_group_offload (docs/WEIGHTS.md): SimpleTuner's configure_group_offload's settings as it hands them to
 * diffusers; ramtorch's refusal of the pair is ramtorch_keys'. */
static st_status group_offload_keys(const config *cfg, model_config *mc)
{
    mc->group_offload = config_bool(cfg, "enable_group_offload");
    if (!mc->group_offload) return ST_OK;
    if (mc->blocks_to_swap) /* SimpleTuner would hook both onto one transformer's blocks */
        return st_fail(ST_ERR_INVALID, "enable_group_offload cannot be used together with musubi_blocks_to_swap: both "
                       "move the same blocks' weights between host and device (SimpleTuner applies both hooks to one "
                       "transformer, which segtrain does not follow): pick one");
    mc->group_offload_leaf = !strcmp(config_string(cfg, "group_offload_type"), "leaf_level");
    mc->group_offload_blocks = config_int(cfg, "group_offload_blocks_per_group");
    mc->group_offload_stream = config_bool(cfg, "group_offload_use_stream");
    if (mc->group_offload_stream && config_bool(cfg, "gradient_checkpointing")) {
        st_warn("segtrain: warning: group_offload_use_stream is turned off under gradient_checkpointing, as "
                "SimpleTuner turns it off (a recompute replays blocks out of diffusers' prefetch order)");
        mc->group_offload_stream = false;
    }
    if (mc->group_offload_stream && !mc->group_offload_leaf && mc->group_offload_blocks != 1) {
        st_warn("segtrain: warning: group_offload_use_stream takes one block a group, as diffusers forces it: "
                "group_offload_blocks_per_group %lld is taken as 1", (long long)mc->group_offload_blocks);
        mc->group_offload_blocks = 1;
    }
    const char *dir = config_string(cfg, "group_offload_to_disk_path");
    if (strlen(dir) >= sizeof mc->group_offload_dir)
        return st_fail(ST_ERR_INVALID, "group_offload_to_disk_path: %zu characters, at most %zu", strlen(dir),
                       sizeof mc->group_offload_dir - 1);
    if (dir[0] == '~' && (dir[1] == '/' || !dir[1]) && getenv("HOME")) /* SimpleTuner's os.path.expanduser */
        snprintf(mc->group_offload_dir, sizeof mc->group_offload_dir, "%s%s", getenv("HOME"), dir + 1);
    else snprintf(mc->group_offload_dir, sizeof mc->group_offload_dir, "%s", dir);
    return ST_OK;
}

/* Where the weights live (docs/WEIGHTS.md): musubi_blocks_to_swap's blocks, ramtorch's layers or group offload's
 * groups on the host. */
static st_status weights_placement(const config *cfg, model_config *mc)
{
    mc->blocks_to_swap = config_int(cfg, "musubi_blocks_to_swap");
    const char *device = config_string(cfg, "musubi_block_swap_device");
    if (mc->blocks_to_swap && strcmp(device, "cpu"))
        return st_fail(ST_ERR_UNSUPPORTED, "musubi_block_swap_device \"%s\": only cpu (host memory) is built for the "
                       "swapped blocks", device);
    st_status st = ramtorch_keys(cfg, mc);
    if (!st) st = group_offload_keys(cfg, mc);
    return st;
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
    if (config_is_set(cfg, "model_family") && family_find(family) != family_of_config(mc) &&
        !model_family_builds(family, mc->family))
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
    bucket_shape shapes[MODEL_SHAPES_MAX];
    int n_shapes = 0;
    if ((st = model_bucket_shapes(cfg, shapes, &n_shapes))) return st;
    /* a video VAE keeps the first frame and one in every scale_t after it (HunyuanVideo's and Wan's 4, LTX's 8) */
    const bool framed = n_shapes && shapes[0].frames;
    const int64_t frames = framed ? shapes[0].frames : config_int(cfg, "num_frames"), scale_t = model_vae_scale_t(mc);
    /* audio: the clip's latent frames; a token model: its rows (a token cache's samples are padded to them); else
     * the preset's */
    const bool rows = model_audio(mc) || model_tokens(mc);
    if (rows && config_is_set(cfg, "num_frames")) mc->frames = frames;
    const family_desc *d = family_of_config(mc);
    if (d->latent_frames) { /* a VAE of its own chunking (MiniMax-H3's) */
        if ((st = d->latent_frames(mc, frames))) return st;
    } else if (frames > 1 && !rows && (!model_video(mc) || (frames - 1) % scale_t))
        return st_fail(ST_ERR_INVALID, "%s: %lld; %s %lld k + 1 frames (its VAE keeps the first and every "
                       "%lldth after it)", framed ? "bucket_shapes" : "num_frames", (long long)frames, model_video(mc) ? "this video family takes" :
                       "an image family takes 1, not", (long long)scale_t, (long long)scale_t);
    /* a preset's own frames are the tests'; Wan Animate (a config with face adapters) keeps its preset's unless told
     * (it takes at least 2) */
    if (model_video(mc) && !d->latent_frames && (mc->face_every <= 0 || config_is_set(cfg, "num_frames") || framed))
        mc->frames = 1 + (frames - 1) / scale_t;
    const double resolution = config_float(cfg, "resolution");
    if (resolution > 0 && !model_audio(mc)) { /* audio has no edge: SimpleTuner's audio path ignores it too */
        const double edge = image_edge(resolution, config_string(cfg, "resolution_type"));
        const int64_t patches = llround(edge / (double)(mc->vae_scale * mc->patch));
        mc->height = mc->width = (patches > 1 ? patches : 1) * mc->patch;
    }
    if (n_shapes && !model_audio(mc) && (st = first_bucket(&shapes[0], mc))) return st;
    /* the axes follow a head width that the keys above changed; a preset's or a folder's own stand otherwise, and
     * model_config_check refuses a folder whose axes do not fill its heads */
    const bool width_set = config_int(cfg, "hidden_size") > 0 || config_int(cfg, "num_heads") > 0;
    const int64_t *ax = mc->rope_axes;
    if (width_set && mc->heads > 0 && d->topology == TOPO_DUAL && !(d->traits & TR_SINCOS) &&
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
        if (!strcmp(config_string(cfg, "lora_type"), "lycoris") && (st = lycoris_of(cfg, mc))) return st;
    }
    const char *precision = config_string(cfg, "mixed_precision");
    if (!strcmp(precision, "fp16") || !strcmp(precision, "fp8"))
        return st_fail(ST_ERR_UNSUPPORTED, "mixed_precision %s: segtrain holds a frozen base in bf16 (mixed_precision "
                       "bf16) or in float (no); %s weights are not built", precision, precision);
    mc->bf16_base = !strcmp(precision, "bf16") && mc->lora_rank > 0;
    const char *base = config_string(cfg, "base_model_precision");
    if ((st = quant_format_of(base, &mc->quant_base))) return st;
    if (mc->quant_base && mc->lora_rank <= 0)
        return st_fail(ST_ERR_UNSUPPORTED, "base_model_precision %s quantizes a frozen base: SimpleTuner quantizes "
                       "only under model_type lora (its is_quantized), and full training trains every weight; use "
                       "model_type lora, or no_change", base);
    for (int i = -1; mc->quant_base && mc->lycoris.on && i < mc->lycoris.n_classes; i++) /* i -1: the root's */
        if ((i < 0 ? mc->lycoris.n_names && mc->lycoris.root.algo == LYCO_FULL
                   : mc->lycoris.classes[i].s.algo == LYCO_FULL))
            return st_fail(ST_ERR_UNSUPPORTED, "base_model_precision %s with LyCORIS algo full: lycoris-lora refuses "
                           "full on a quantized Linear (\"Quant Linear is not supported and meaningless in Full "
                           "algo\"); use no_change, or another algo", base);
    mc->bf16_activations = !strcmp(precision, "bf16");
    if ((st = weights_placement(cfg, mc))) return st;
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
