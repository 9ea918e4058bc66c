/* SimpleTuner's model families by SimpleTuner's names: for each, the topology it needs, the diffusers class that
 * defines its layout, and its flavours, as SimpleTuner registers them (ModelRegistry.register and each model's
 * flavour choices), with the flavours built so far and their presets. Selecting one not built is refused in one
 * line that says what it needs, so that a user's own config.json fails clearly and the same file plans once the
 * topology lands. */
#include <stdio.h>
#include <string.h>

#include "models/core/family.h"
#include "models/core/internal.h"
#include "segtrain/config.h"

const char *const quanto_exclude_video[] = {
    "*norm*", "*norm1_context*", "*norm_added_q*", "*norm_added_k*", "proj_out*", "*pos_embed*", "*patch_embedding*",
    "*ffn*", "*scale_shift_table*", "*norm_out*", "*context_embedder*", "*time_text_embed*", "*time_proj*",
    "*condition_embedder*", NULL};

static const char *const topology_text[TOPO_COUNT] = {
    [TOPO_OWN] = "segtrain's own DiT topology",
    [TOPO_DUAL] = "the dual-stream MMDiT topology (text and image streams with joint attention)",
    [TOPO_XATTN] = "the cross-attention DiT topology (image or video tokens attending to text tokens)",
    [TOPO_JOINT] = "the single-stream joint DiT topology (text and image tokens in one sequence)",
    [TOPO_LINEAR] = "the linear-attention DiT topology (ReLU linear attention, Mix-FFN)",
    [TOPO_UNET] = "the U-Net topology (ResNet, attention and up/down-sampling micro-blocks)",
    [TOPO_AUDIO_LM] = "an autoregressive audio language model, trained on tokens, not as a flow",
};

/* The i-th of SimpleTuner's rows across the registry (in its order: alphabetical), and its family's descriptor. */
static const family_st *st_row(int i, const family_desc **of)
{
    for (int k = 0, seen = 0; family_at(k); k++)
        for (int r = 0; r < FAMILY_ST_MAX && family_at(k)->st[r].name; r++)
            if (seen++ == i) {
                if (of) *of = family_at(k);
                return &family_at(k)->st[r];
            }
    return NULL;
}

/* segtrain's own families (dit, mmdit, skipdit), in the registry's order */
static const char *own_name(int i)
{
    for (int k = 0, seen = 0; family_at(k); k++)
        if ((family_at(k)->traits & TR_OWN) && seen++ == i) return family_at(k)->name;
    return NULL;
}

static int own_count(void)
{
    int n = 0;
    while (own_name(n)) n++;
    return n;
}

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
    const int own = own_count();
    if (i < own) return own_name(i);
    const family_st *r = st_row(i - own, NULL);
    return r ? r->name : NULL;
}

static const family_st *find_family(const char *family, const family_desc **of)
{
    const family_st *r;
    for (int i = 0; (r = st_row(i, of)); i++)
        if (!strcmp(family, r->name) || (r->alias && !strcmp(family, r->alias))) return r;
    return NULL;
}

/* The preset that "flavour:preset" in f->built gives the flavour (the fallback's when empty), or NULL. */
static const char *built_preset(const family_st *f, const char *flavour, char *out, size_t n)
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

/* The refusal of a SimpleTuner family, or its flavour, that is not built. */
static st_status not_built(const family_desc *d, const family_st *f, const char *flavour)
{
    if (!*flavour && f->fallback) flavour = f->fallback; /* the messages name the default flavour taken */
    if (f->built && f->why)
        return st_fail(ST_ERR_UNSUPPORTED, "model_flavour %s of %s (%s): not built: %s. Built flavours: %s", flavour,
                       f->name, f->title, f->why, f->built);
    if (f->built)
        return st_fail(ST_ERR_UNSUPPORTED, "model_flavour %s of %s (%s): not built yet; built flavours: %s", flavour,
                       f->name, f->title, f->built);
    if (d->topology == TOPO_AUDIO_LM)
        return st_fail(ST_ERR_UNSUPPORTED, "model_family %s (%s): needs %s (%s); of SimpleTuner's audio "
                       "language models segtrain builds heartmula (its token objective), and does not plan to build "
                       "this one", f->name, f->title, topology_text[d->topology],
                       f->diffusers);
    char built_list[1024] = "";
    for (int i = 0; own_name(i); i++)
        snprintf(built_list + strlen(built_list), sizeof built_list - strlen(built_list), "%s%s", i ? ", " : "",
                 own_name(i));
    const family_st *r;
    for (int i = 0; (r = st_row(i, NULL)); i++)
        if (r->built) snprintf(built_list + strlen(built_list), sizeof built_list - strlen(built_list), ", %s", r->name);
    return st_fail(ST_ERR_UNSUPPORTED, "model_family %s (%s%s%s): needs %s in diffusers' %s layout: planned, not "
                   "built yet. Built today: %s; --set model_family=mmdit plans this file on one", f->name, f->title,
                   *flavour ? ", flavour " : "", flavour, topology_text[d->topology], f->diffusers, built_list);
}

st_status model_family_check(const char *family, const char *flavour)
{
    for (int i = 0; own_name(i); i++) /* segtrain's own have no flavours: a SimpleTuner file's stays harmless */
        if (!strcmp(family, own_name(i))) return ST_OK;
    const family_desc *d;
    const family_st *f = find_family(family, &d);
    if (!f) {
        const char *names[128]; /* and the NULL that ends them */
        int n = 0;
        while (n < 127 && (names[n] = model_family_name(n))) n++;
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
    return not_built(d, f, flavour);
}

bool model_family_builds(const char *family, const char *topology)
{
    const family_st *f = find_family(family, NULL);
    const family_desc *want = family_find(topology);
    for (const char *p = f && f->built ? f->built : ""; *p;) {
        const size_t w = strcspn(p, "|");
        const char *colon = memchr(p, ':', w);
        char preset[32];
        model_config mc;
        snprintf(preset, sizeof preset, "%.*s", colon ? (int)(w - (size_t)(colon + 1 - p)) : 0, colon ? colon + 1 : "");
        if (colon && model_preset(preset, &mc) == ST_OK && want && family_of_config(&mc) == want) return true;
        p += w + (p[w] == '|');
    }
    return false;
}

const char *model_family_preset(const char *family, const char *flavour, char *preset, size_t n)
{
    const family_st *f = find_family(family, NULL);
    return f ? built_preset(f, flavour, preset, n) : NULL;
}

const char *model_family_built_flavour(const char *family, int i, char *flavour, size_t n)
{
    const family_st *f = find_family(family, NULL);
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

model_family_about model_family_about_of(const char *family)
{
    const family_st *f = find_family(family, NULL);
    return f ? (model_family_about){f->title, f->example, f->tiny, f->shape} : (model_family_about){0};
}
