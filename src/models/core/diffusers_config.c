/* A diffusers transformer's own config.json, read into a model configuration: for each family the class whose
 * config it reads (diffusers_classes), its defaults, then the file's values; what segtrain does not build is refused
 * by name. model_config.c calls it when a run's weights are a diffusers folder. The value readers are here
 * (diffusers_json.h); each family's readers are in its own file. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/core/internal.h"
#include "segtrain/config.h"
#include "segtrain/fileio.h"
#include "segtrain/model.h"

/* config.json of a diffusers model folder, or of a pipeline folder's transformer/, or the file itself. */
st_status json_read_config(const char *path, char *resolved, size_t n, cJSON **out)
{
    struct stat sb;
    snprintf(resolved, n, "%s", path);
    if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) {
        snprintf(resolved, n, "%s/config.json", path);
        if (access(resolved, R_OK)) snprintf(resolved, n, "%s/transformer/config.json", path);
    }
    FILE *f;
    if (file_fopen_regular(resolved, &f)) {
        char why[512]; /* st_fail writes where st_error() reads */
        snprintf(why, sizeof why, "%s", st_error());
        return st_fail(ST_ERR_IO, "%s: cannot read a diffusers config.json there (%s)", path, why);
    }
    char buf[1 << 16];
    const size_t len = fread(buf, 1, sizeof buf - 1, f);
    const bool whole = feof(f);
    fclose(f);
    buf[len] = 0;
    *out = whole ? cJSON_Parse(buf) : NULL;
    if (!*out) return st_fail(ST_ERR_FORMAT, "%s: not a diffusers config.json (%s)", resolved, whole ? "not JSON" : "over 64 KiB");
    return ST_OK;
}

/* The range of the sizes that every family's model divides by or builds one of per unit, by the classes' own key
 * names: checked as each is read, so that no zero divides and no huge count is walked before model_config_check
 * (other keys: 0 to 10^9, and that check). */
static const struct {
    const char *key;
    int64_t min, max;
} json_ranges[] = {
    {"num_attention_heads", 1, 4096}, {"n_heads", 1, 4096}, {"num_key_value_heads", 1, 4096},
    {"num_kv_heads", 1, 4096}, {"text_num_attention_heads", 1, 4096}, {"text_num_key_value_heads", 1, 4096},
    {"num_cross_attention_heads", 1, 4096}, {"face_encoder_num_heads", 1, 4096},
    {"audio_num_attention_heads", 1, 4096}, {"attention_head_dim", 1, 4096}, {"head_dim", 1, 4096},
    {"cross_attention_head_dim", 1, 4096}, {"audio_attention_head_dim", 1, 4096},
    {"num_layers", 1, 1024}, {"n_layers", 1, 1024}, {"num_hidden_layers", 1, 1024}, {"num_single_layers", 0, 1024},
    {"num_mmdit_layers", 0, 1024}, {"num_single_dit_layers", 0, 1024}, {"num_refiner_layers", 0, 1024},
    {"n_refiner_layers", 0, 1024}, {"num_text_layers", 0, 1024}, {"num_text_blocks", 0, 1024},
    {"num_visual_blocks", 0, 1024}, {"inject_face_latents_blocks", 1, 1024},
    {"in_channels", 1, 65536}, {"out_channels", 0, 65536}, {"patch_size", 1, 64}, {"patch_size_t", 1, 64},
    {"hidden_size", 1, 65536}, {"dim", 1, 65536}, {"model_dim", 1, 65536},
};

/* patch_size as a list (frames, height, width), when given, into patch_t and patch */
st_status json_patch_3d(const cJSON *j, const char *file, model_config *mc)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "patch_size");
    if (p && (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 3))
        return st_fail(ST_ERR_FORMAT, "%s: patch_size is not a list of 3 (frames, height, width)", file);
    for (int i = 0; p && i < 3; i++) {
        const cJSON *x = cJSON_GetArrayItem(p, i);
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 64 || x->valuedouble != floor(x->valuedouble))
            return st_fail(ST_ERR_FORMAT, "%s: patch_size[%d] is not a whole number 1 to 64", file, i);
    }
    if (!p) return ST_OK;
    mc->patch_t = (int64_t)cJSON_GetArrayItem(p, 0)->valuedouble;
    mc->patch = (int64_t)cJSON_GetArrayItem(p, 1)->valuedouble;
    if (cJSON_GetArrayItem(p, 2)->valuedouble != (double)mc->patch)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: patch_size's height and width differ; segtrain's patches are square",
                       file);
    return ST_OK;
}

/* A whole number at key, or ST_ERR_FORMAT naming it and its range; absent keys keep *v (diffusers' default is the
 * caller's). */
st_status json_int(const cJSON *j, const char *file, const char *key, int64_t *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return ST_OK;
    int64_t min = 0, max = 1000000000;
    for (size_t i = 0; i < sizeof json_ranges / sizeof *json_ranges; i++)
        if (!strcmp(key, json_ranges[i].key)) min = json_ranges[i].min, max = json_ranges[i].max;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < (double)min ||
        x->valuedouble > (double)max) {
        char got[64];
        if (cJSON_IsNumber(x)) snprintf(got, sizeof got, "%.17g", x->valuedouble);
        else snprintf(got, sizeof got, "not a number");
        return st_fail(ST_ERR_FORMAT, "%s: %s is %s; it takes a whole number from %lld to %lld", file, key, got,
                       (long long)min, (long long)max);
    }
    *v = (int64_t)x->valuedouble;
    return ST_OK;
}

st_status json_ints(const cJSON *j, const char *file, const json_key *keys, size_t n)
{
    st_status st = ST_OK;
    for (size_t i = 0; !st && i < n; i++) st = json_int(j, file, keys[i].key, keys[i].v);
    return st;
}

void set_rope_axes(model_config *mc, const int64_t *axes, int n)
{
    for (int a = 0; a < (int)(sizeof mc->rope_axes / sizeof *mc->rope_axes); a++)
        mc->rope_axes[a] = a < n ? axes[a] : 0;
}

/* The rotary axes at key (axes_dims_rope; HunyuanVideo's rope_axes_dim), when the file has them: a list of n whole
 * widths; absent, *axes keeps the class's defaults. */
st_status json_axes(const cJSON *j, const char *file, const char *key, int n, int64_t *axes)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    if (a && (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n))
        return st_fail(ST_ERR_FORMAT, "%s: %s is not a list of %d widths", file, key, n);
    for (int i = 0; a && i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 || x->valuedouble > 1e6)
            return st_fail(ST_ERR_FORMAT, "%s: %s[%d] is not a whole number", file, key, i);
        axes[i] = (int64_t)x->valuedouble;
    }
    return ST_OK;
}

/* A number at key other than the only value segtrain builds, refused by name (absent or null: the class's default,
 * which is that value). */
st_status json_fixed(const cJSON *j, const char *file, const char *key, double want, const char *what)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && (!cJSON_IsNumber(x) || x->valuedouble != want))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is not %g, the only value segtrain builds %s with", file, key, want,
                       what);
    return ST_OK;
}

/* A string at key other than the only value segtrain builds (absent or null: the class's default, that value). */
st_status json_fixed_text(const cJSON *j, const char *file, const char *key, const char *want, const char *what)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && !(cJSON_IsString(x) && !strcmp(x->valuestring, want)))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is not \"%s\", the only value segtrain builds %s with", file, key,
                       want, what);
    return ST_OK;
}

/* A boolean at key other than the only value segtrain builds, refused by name (absent or null: the class's default,
 * which is that value). */
st_status json_fixed_bool(const cJSON *j, const char *file, const char *key, bool want, const char *what)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && !cJSON_IsNull(x) && (!cJSON_IsBool(x) || cJSON_IsTrue(x) != want))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s is not %s, the only value segtrain builds %s with", file, key,
                       want ? "true" : "false", what);
    return ST_OK;
}

/* A boolean at key into *v, or ST_ERR_FORMAT naming it; absent or null keeps *v (the class's default). */
st_status json_bool(const cJSON *j, const char *file, const char *key, bool *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return ST_OK;
    if (!cJSON_IsBool(x)) return st_fail(ST_ERR_FORMAT, "%s: %s is not true or false", file, key);
    *v = cJSON_IsTrue(x);
    return ST_OK;
}

/* An epsilon at key, when the file gives it: a number in (0, 1) */
st_status json_eps(const cJSON *j, const char *file, const char *key, double *eps)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!e || cJSON_IsNull(e)) return ST_OK;
    if (!cJSON_IsNumber(e) || !(e->valuedouble > 0 && e->valuedouble < 1))
        return st_fail(ST_ERR_FORMAT, "%s: %s is not a number in (0, 1)", file, key);
    *eps = e->valuedouble;
    return ST_OK;
}

bool model_reads_diffusers(const model_config *mc) { return family_of_config(mc)->readers[0].diffusers != NULL; }

/* The file's architecture over mc, unchecked: model_config_from checks once the resolution and every key are in. */
st_status model_read_diffusers(const char *path, model_config *mc)
{
    char file[4096];
    cJSON *j;
    st_status st = json_read_config(path, file, sizeof file, &j);
    if (st) return st;
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(j, "_class_name");
    const char *name = cJSON_IsString(cls) ? cls->valuestring : "(none)";
    st = st_fail(ST_ERR_UNSUPPORTED, "%s: _class_name %s is not a class the %s family reads", file, name, mc->family);
    char classes[256] = ""; /* the family's, for the refusal */
    const family_reader *r = family_of_config(mc)->readers;
    for (int i = 0; i < FAMILY_READERS_MAX && r[i].diffusers; i++) {
        if (!strcmp(name, r[i].diffusers)) {
            st = r[i].read(j, file, mc);
            classes[0] = 0;
            break;
        }
        snprintf(classes + strlen(classes), sizeof classes - strlen(classes), "%s%s's", classes[0] ? " or " : "",
                 r[i].diffusers);
    }
    if (classes[0])
        st = st_fail(ST_ERR_UNSUPPORTED, "%s: _class_name %s; the %s family reads %s", file, name, mc->family, classes);
    cJSON_Delete(j);
    return st;
}

st_status model_config_from_diffusers(const char *path, model_config *mc)
{
    st_status st = model_read_diffusers(path, mc);
    return st ? st : model_config_check(mc);
}
