/* SimpleTuner's lycoris_config JSON into a lycoris_spec (lycoris.h), read as SimpleTuner hands it to lycoris-lora
 * 4.1.3: int() of multiplier, linear_dim and linear_alpha (trainer.py), create_lycoris's keys and defaults, and
 * apply_preset's LycorisNetwork.apply_preset. A key the package reads but segtrain does not build is refused by
 * name; so is a key neither reads (SimpleTuner would hand it on unread, which is never what its writer meant). */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "models/core/diffusers_json.h"
#include "models/core/internal.h"

#define BAD(...) st_fail(ST_ERR_INVALID, __VA_ARGS__)

/* The keys create_lycoris reads that segtrain reads (bypass_mode changes nothing: segtrain computes LoKr's bypass
 * product and LoHa's rebuilt weight either way, the same in exact arithmetic; the Tucker and conv keys are refused
 * unless off, by unbuilt_at) */
static const char *const read_keys[] = {"bypass_mode", "use_tucker", "use_cp", "use_conv_cp", "disable_conv_cp",
                                           "conv_dim", "conv_alpha", "apply_preset", "algo", "multiplier",
                                           "linear_dim", "linear_alpha", "factor", "full_matrix", "decompose_both",
                                           "unbalanced_factorization", "use_scalar", "dropout", "rank_dropout",
                                           "module_dropout", "dora_wd", "rs_lora", "train_norm", NULL};

static bool listed(const char *const *keys, const char *k)
{
    for (; *keys; keys++)
        if (!strcmp(*keys, k)) return true;
    return false;
}

/* A number, or a string holding one (SimpleTuner's values may be strings); absent keeps *v. */
static st_status number_at(const cJSON *j, const char *file, const char *key, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return ST_OK;
    char *end = NULL;
    if (cJSON_IsNumber(x)) *v = x->valuedouble;
    else if (!cJSON_IsString(x) || (*v = strtod(x->valuestring, &end), end == x->valuestring || *end))
        return BAD("%s: %s is not a number", file, key);
    return ST_OK;
}

/* The package's str_bool: true, false, or their strings; absent keeps *v. */
static st_status bool_at(const cJSON *j, const char *file, const char *key, bool *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return ST_OK;
    if (cJSON_IsBool(x)) *v = cJSON_IsTrue(x);
    else if (cJSON_IsString(x) && (!strcmp(x->valuestring, "true") || !strcmp(x->valuestring, "True"))) *v = true;
    else if (cJSON_IsString(x) && (!strcmp(x->valuestring, "false") || !strcmp(x->valuestring, "False"))) *v = false;
    else return BAD("%s: %s is not true or false", file, key);
    return ST_OK;
}

/* The package's network_module_dict: the root's algo lower-cased (create_lycoris), a module_algo_map entry's as
 * given. */
static st_status algo_at(const cJSON *j, const char *file, bool root, lyco_algo *algo)
{
    static const struct {
        const char *name;
        lyco_algo algo;
    } built[] = {{"lokr", LYCO_LOKR}, {"loha", LYCO_LOHA}, {"lora", LYCO_LOCON}, {"locon", LYCO_LOCON},
                 {"full", LYCO_FULL}};
    static const char *const unbuilt[] = {"dylora", "glora", "diag-oft", "boft", "ia3", "tlora", NULL};
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "algo");
    if (!x || cJSON_IsNull(x)) return ST_OK;
    if (!cJSON_IsString(x)) return BAD("%s: algo is not a name", file);
    char name[32];
    snprintf(name, sizeof name, "%s", x->valuestring);
    for (char *c = name; root && *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    for (size_t i = 0; i < sizeof built / sizeof *built; i++)
        if (!strcmp(name, built[i].name)) return *algo = built[i].algo, ST_OK;
    if (listed(unbuilt, name))
        return BAD("%s: algo %s is not built; segtrain builds LyCORIS's lokr, loha, lora (locon) and full", file,
                   x->valuestring);
    return BAD("%s: algo \"%s\" is not one of the lycoris-lora package's (lokr, loha, lora, locon, full, dylora, "
               "glora, diag-oft, boft, ia3, tlora)%s", file, x->valuestring,
               root ? "" : " (a module_algo_map entry's algo is matched as written, not lower-cased)");
}

/* A larger-than-1 x 1 convolution's dimension and alpha. The root's: create_lycoris's int(conv_dim or linear_dim)
 * and float(conv_alpha or linear_alpha); an entry's: its dim and alpha where given (the package's create_single_module:
 * dim or conv_lora_dim, alpha or conv_alpha), else the root's. */
static st_status conv_settings_at(const cJSON *j, const char *file, bool root, lyco_settings *s)
{
    double dim = 0, alpha = 0;
    st_status st = number_at(j, file, root ? "conv_dim" : "dim", &dim);
    if (!st) st = number_at(j, file, root ? "conv_alpha" : "alpha", &alpha);
    if (st) return st;
    if (root || dim != 0) s->conv_dim = (int64_t)dim ? (int64_t)dim : s->dim;
    if (root || alpha != 0) s->conv_alpha = alpha != 0 ? alpha : s->alpha;
    if (s->conv_dim < 1 || s->conv_dim > (1 << 30))
        return BAD("%s: conv_dim %g; the adapters' dimension is a whole number from 1", file, dim);
    return ST_OK;
}

/* The keys a module's settings take (the root's, or a module_algo_map entry's over them: the package hands an entry's
 * keys to the module as its own keyword arguments, dim and alpha included). */
static st_status settings_at(const cJSON *j, const char *file, bool root, lyco_settings *s)
{
    double dim = (double)s->dim, alpha = s->alpha, factor = (double)s->factor;
    st_status st = algo_at(j, file, root, &s->algo);
    if (!st) st = number_at(j, file, root ? "linear_dim" : "dim", &dim);
    if (!st) st = number_at(j, file, root ? "linear_alpha" : "alpha", &alpha);
    if (!st) st = number_at(j, file, "factor", &factor);
    if (!st) st = bool_at(j, file, "full_matrix", &s->full_matrix);
    if (!st) st = bool_at(j, file, "decompose_both", &s->decompose_both);
    if (!st) st = bool_at(j, file, "unbalanced_factorization", &s->unbalanced);
    if (st) return st;
    /* SimpleTuner reads linear_dim and linear_alpha with int(); an entry's dim and alpha reach the module as given */
    s->dim = (int64_t)dim;
    s->alpha = root ? (double)(int64_t)alpha : (alpha != 0 ? alpha : s->alpha); /* the package: alpha or self.alpha */
    s->factor = (int64_t)factor;
    if (s->dim < 1 || s->dim > (1 << 30))
        return BAD("%s: %s %g; the adapters' dimension is a whole number from 1", file, root ? "linear_dim" : "dim",
                   dim);
    return conv_settings_at(j, file, root, s);
}

/* The package's Tucker option (use_tucker, its old names use_cp, use_conv_cp, and disable_conv_cp false), refused
 * unless off: it reshapes only a conv's kernel of over 1 x 1 (LoCon's lora_mid), which is not built. */
static st_status conv_refusals(const cJSON *j, const char *file)
{
    static const char *const tucker[] = {"use_tucker", "use_cp", "use_conv_cp"};
    for (size_t i = 0; i < sizeof tucker / sizeof *tucker; i++) {
        bool on = false;
        st_status st = bool_at(j, file, tucker[i], &on);
        if (st) return st;
        if (on)
            return BAD("%s: %s (Tucker decomposition) is not built: the package applies it to a convolution's kernel "
                       "only (LoCon's lora_mid, LoHa's hada_t1 and hada_t2, LoKr's lokr_t2); give %s false", file,
                       tucker[i], tucker[i]);
    }
    bool disable = true;
    st_status st = bool_at(j, file, "disable_conv_cp", &disable);
    if (!st && !disable)
        return BAD("%s: disable_conv_cp false turns on Tucker decomposition of convolutions' kernels, which is not "
                   "built; give true or leave it out", file);
    return st;
}

/* What segtrain does not build, refused by name: a non-zero dropout, the trained scalar, DoRA, rsLoRA, the conv
 * keys. */
static st_status unbuilt_at(const cJSON *j, const char *file)
{
    static const char *const dropouts[] = {"dropout", "rank_dropout", "module_dropout"};
    for (size_t i = 0; i < sizeof dropouts / sizeof *dropouts; i++) {
        double v = 0;
        st_status st = number_at(j, file, dropouts[i], &v);
        if (st) return st;
        if (v != 0) return BAD("%s: %s %g; LyCORIS's dropouts are not built (give 0)", file, dropouts[i], v);
    }
    static const char *const flags[][2] = {{"use_scalar", "the trained scalar (use_scalar)"},
                                           {"dora_wd", "weight decomposition (dora_wd)"},
                                           {"rs_lora", "rank-stabilised scaling (rs_lora)"},
                                           {"train_norm", "trained norm layers (train_norm)"}};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        bool on = false;
        st_status st = bool_at(j, file, flags[i][0], &on);
        if (st) return st;
        if (on) return BAD("%s: %s is not built; give %s false", file, flags[i][1], flags[i][0]);
    }
    st_status st = conv_refusals(j, file);
    if (st) return st;
    double multiplier = 1;
    st = number_at(j, file, "multiplier", &multiplier);
    if (!st && (int64_t)multiplier != 1) /* SimpleTuner: int(multiplier) */
        return BAD("%s: multiplier %g (SimpleTuner reads int(%g)); segtrain trains at 1", file, multiplier, multiplier);
    return st;
}

static st_status names_at(const cJSON *preset, const char *file, const char *key, char (*out)[LYCO_PATTERN_MAX],
                          size_t size, int *n)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(preset, key), *x;
    if (!list || cJSON_IsNull(list)) return ST_OK;
    if (!cJSON_IsArray(list)) return BAD("%s: apply_preset.%s is not a list of names", file, key);
    cJSON_ArrayForEach(x, list) {
        if (!cJSON_IsString(x)) return BAD("%s: apply_preset.%s holds a value that is not a name", file, key);
        if (*n == LYCO_TARGETS_MAX) return BAD("%s: apply_preset.%s: more than %d names", file, key, LYCO_TARGETS_MAX);
        if (strlen(x->valuestring) >= size)
            return BAD("%s: apply_preset.%s: \"%.40s...\" is longer than %zu characters", file, key, x->valuestring,
                       size - 1);
        snprintf(out[(*n)++], size, "%s", x->valuestring);
    }
    return ST_OK;
}

static int class_index(lycoris_spec *ly, const char *cls)
{
    for (int i = 0; i < ly->n_classes; i++)
        if (!strcmp(ly->classes[i].cls, cls)) return i;
    if (ly->n_classes == LYCO_TARGETS_MAX) return -1;
    snprintf(ly->classes[ly->n_classes].cls, LYCO_NAME_MAX, "%.*s", LYCO_NAME_MAX - 1, cls);
    ly->classes[ly->n_classes].s = ly->root;
    return ly->n_classes++;
}

static st_status algo_map_at(const cJSON *preset, const char *file, lycoris_spec *ly)
{
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(preset, "module_algo_map"), *e, *k;
    if (!map || cJSON_IsNull(map)) return ST_OK;
    if (!cJSON_IsObject(map)) return BAD("%s: apply_preset.module_algo_map is not an object", file);
    cJSON_ArrayForEach(e, map) {
        const int i = strlen(e->string) < LYCO_NAME_MAX ? class_index(ly, e->string) : -1;
        if (i < 0) return BAD("%s: apply_preset.module_algo_map: too many classes, or \"%.40s\" too long", file, e->string);
        if (!cJSON_IsObject(e)) return BAD("%s: apply_preset.module_algo_map.%s is not an object", file, e->string);
        cJSON_ArrayForEach(k, e) {
            static const char *const keys[] = {"algo", "dim", "alpha", "factor", "full_matrix", "decompose_both",
                                               "unbalanced_factorization", NULL};
            if (!listed(keys, k->string))
                return BAD("%s: apply_preset.module_algo_map.%s.%s is not read by segtrain (it reads algo, dim, "
                           "alpha, factor, full_matrix, decompose_both, unbalanced_factorization)", file, e->string,
                           k->string);
        }
        ly->classes[i].mapped = true;
        st_status st = settings_at(e, file, false, &ly->classes[i].s);
        if (st) return st;
    }
    return ST_OK;
}

static st_status preset_refusals(const cJSON *preset, const char *file)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, preset) {
        static const char *const read[] = {"target_module", "target_name", "module_algo_map", "use_fnmatch",
                                           "enable_conv", NULL};
        const bool empty = cJSON_IsNull(k) || (cJSON_IsArray(k) || cJSON_IsObject(k) ? !k->child : false);
        if (!strcmp(k->string, "lora_prefix") && cJSON_IsString(k) && !strcmp(k->valuestring, "lycoris")) continue;
        if (!listed(read, k->string) && !empty)
            return BAD("%s: apply_preset.%s is not built (segtrain reads target_module, target_name, "
                       "module_algo_map, use_fnmatch)", file, k->string);
    }
    return ST_OK;
}

static st_status preset_at(const cJSON *j, const char *file, lycoris_spec *ly)
{
    const cJSON *preset = cJSON_GetObjectItemCaseSensitive(j, "apply_preset");
    if (!preset || cJSON_IsNull(preset) || (cJSON_IsObject(preset) && !preset->child))
        return BAD("%s: no apply_preset; the package's default targets (every Linear, Conv and norm of the model) "
                   "are not built: give apply_preset.target_module", file);
    if (!cJSON_IsObject(preset)) return BAD("%s: apply_preset is not an object", file);
    if (!cJSON_GetObjectItemCaseSensitive(preset, "target_module")) /* apply_preset keeps the class's list then */
        return BAD("%s: apply_preset has no target_module, so the package keeps its default target classes (every "
                   "Linear, Conv and norm of the model) beside target_name and module_algo_map; that is not built: "
                   "give target_module (an empty list for names and module_algo_map alone)", file);
    char classes[LYCO_TARGETS_MAX][LYCO_PATTERN_MAX];
    int n = 0;
    st_status st = preset_refusals(preset, file);
    if (!st) st = names_at(preset, file, "target_module", classes, LYCO_NAME_MAX, &n);
    for (int i = 0; !st && i < n; i++)
        if (class_index(ly, classes[i]) < 0) st = BAD("%s: apply_preset: too many classes", file);
    if (!st) st = algo_map_at(preset, file, ly);
    if (!st) st = names_at(preset, file, "target_name", ly->names, LYCO_PATTERN_MAX, &ly->n_names);
    if (!st) st = bool_at(preset, file, "use_fnmatch", &ly->use_fnmatch);
    for (int i = 0; !st && !ly->use_fnmatch && i < ly->n_names; i++) {
        char anchored[LYCO_PATTERN_MAX + 8];
        regex_t re;
        snprintf(anchored, sizeof anchored, "^(%s)", ly->names[i]);
        if (regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB))
            st = BAD("%s: apply_preset.target_name \"%s\" is not a regular expression segtrain reads (POSIX "
                     "extended)", file, ly->names[i]);
        else regfree(&re);
    }
    return st;
}

static st_status spec_from_json(const cJSON *j, const char *file, lycoris_spec *ly)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, j) {
        if (!listed(read_keys, k->string))
            return BAD("%s: %s is not a key SimpleTuner's LyCORIS reads that segtrain builds", file, k->string);
    }
    *ly = (lycoris_spec){.on = true, .root = {.algo = LYCO_NONE, .dim = 4, .alpha = 1, .factor = -1}};
    st_status st = unbuilt_at(j, file);
    if (!st) st = settings_at(j, file, true, &ly->root);
    if (!st && ly->root.algo == LYCO_NONE) ly->root.algo = LYCO_LOCON; /* the package's default, lora */
    if (!st) st = preset_at(j, file, ly);
    bool bypass = false;
    if (!st) st = bool_at(j, file, "bypass_mode", &bypass);
    ly->bypass = bypass;
    /* FullModule raises "bypass mode is not supported in Full algo" for every module it would build */
    for (int i = -1; !st && bypass && i < ly->n_classes; i++) {
        const lyco_settings *m = i < 0 ? &ly->root : &ly->classes[i].s;
        if (m->algo == LYCO_FULL && (i >= 0 || ly->n_names))
            st = BAD("%s: bypass_mode true with algo full%s%s: the package refuses it (bypass mode is not supported "
                     "in Full algo); give bypass_mode false", file, i < 0 ? "" : " for ",
                     i < 0 ? "" : ly->classes[i].cls);
    }
    return st;
}

st_status lycoris_spec_read(const char *path, lycoris_spec *ly)
{
    if (!*path) return BAD("lora_type lycoris needs lycoris_config, SimpleTuner's LyCORIS JSON file");
    char file[4096];
    cJSON *j = NULL;
    st_status st = json_read_config(path, file, sizeof file, &j);
    if (st == ST_ERR_IO)
        return st_fail(ST_ERR_IO, "lycoris_config: cannot read %s (a path relative to the working directory, as "
                       "SimpleTuner reads it)", path);
    if (st) return st_fail(st, "lycoris_config %s: not JSON", path);
    if (!cJSON_IsObject(j)) st = st_fail(ST_ERR_FORMAT, "lycoris_config %s: not a JSON object", path);
    else st = spec_from_json(j, path, ly);
    cJSON_Delete(j);
    return st;
}
