/* What diffusers_config.c's readers share, internal to src/models: the config.json value readers (each names the
 * file and the key in its refusal). Each family's readers are in its own file (its descriptor's readers). */
#ifndef SEGTRAIN_MODELS_DIFFUSERS_JSON_H
#define SEGTRAIN_MODELS_DIFFUSERS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "segtrain/model.h"

/* config.json of a diffusers model folder, of a pipeline folder's transformer/, or the file itself, parsed into *out
 * (the caller's to cJSON_Delete); resolved gets the file's path for messages. ST_ERR_IO / ST_ERR_FORMAT naming it. */
st_status json_read_config(const char *path, char *resolved, size_t n, cJSON **out);
/* A whole number at key, or ST_ERR_FORMAT naming it; absent or null keys keep *v (diffusers' default is the
 * caller's). */
st_status json_int(const cJSON *j, const char *file, const char *key, int64_t *v);
/* A reader's whole-number keys, each read by json_int into its v in turn; the first refusal stops them. */
typedef struct json_key {
    const char *key;
    int64_t *v;
} json_key;
st_status json_ints(const cJSON *j, const char *file, const json_key *keys, size_t n);
/* mc's rotary axes: the n (3 or 4) given, the rest 0 */
void set_rope_axes(model_config *mc, const int64_t *axes, int n);
/* The rotary axes at key, when the file has them: a list of n whole widths; absent, *axes keeps the defaults. */
st_status json_axes(const cJSON *j, const char *file, const char *key, int n, int64_t *axes);
/* A number, string or boolean at key other than the only value segtrain builds, refused by name (absent or null:
 * the class's default, which is that value). */
st_status json_fixed(const cJSON *j, const char *file, const char *key, double want, const char *what);
st_status json_fixed_text(const cJSON *j, const char *file, const char *key, const char *want, const char *what);
st_status json_fixed_bool(const cJSON *j, const char *file, const char *key, bool want, const char *what);
/* An epsilon at key, when the file gives it: a number in (0, 1) */
/* A boolean at key, when the file gives one; absent keeps *v. */
st_status json_bool(const cJSON *j, const char *file, const char *key, bool *v);
st_status json_eps(const cJSON *j, const char *file, const char *key, double *eps);
/* patch_size as a list (frames, height, width), when given, into patch_t and patch (square patches only) */
st_status json_patch_3d(const cJSON *j, const char *file, model_config *mc);

/* A class's config over mc (the family's defaults, then the file's values), unchecked */
typedef st_status diffusers_reader(const cJSON *j, const char *file, model_config *mc);
diffusers_reader unet_from_json; /* sd1x's, sdxl's and kolors' (unet/diffusers_unet.c) */
diffusers_reader flux_from_json; /* FluxTransformer2DModel's (dual/flux.c), mmdit's too */

#endif
