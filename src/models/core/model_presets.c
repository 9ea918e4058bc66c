/* The presets: each family's published sizes and its -tiny ones, from the families' descriptors (each family's
 * presets table and preset hook, in its own file), and the rotary splits the families share. */
#include <stdio.h>
#include <string.h>

#include "models/core/family.h"
#include "models/core/internal.h"
#include "segtrain/config.h"
#include "segtrain/model.h"

#define TEXT_VOCAB 1024

/* Flux's split of a head into rotary axes, (hd - 2 a, a, a) pairs-wide with a = 2 floor(7 hd / 32): its
 * (16, 56, 56) at 128. */
void model_rope_axes(model_config *mc)
{
    const family_desc *d = family_of_config(mc);
    if (d->rope_axes) {
        d->rope_axes(mc);
        return;
    }
    const int64_t hd = mc->hidden / mc->heads, a = 2 * (7 * hd / 32);
    mc->rope_axes[0] = hd - 2 * a, mc->rope_axes[1] = a, mc->rope_axes[2] = a;
}

void family_rope_axes_four(model_config *mc) /* four equal axes, (32, 32, 32, 32) at 128 */
{
    const int64_t hd = mc->hidden / mc->heads, q = 2 * (hd / 8);
    mc->rope_axes[0] = mc->rope_axes[1] = mc->rope_axes[2] = q, mc->rope_axes[3] = hd - 3 * q;
}

void family_rope_axes_wide(model_config *mc) /* (32, 48, 48) at 128 */
{
    const int64_t hd = mc->hidden / mc->heads;
    mc->rope_axes[1] = mc->rope_axes[2] = 2 * (3 * hd / 16), mc->rope_axes[0] = hd - 4 * (3 * hd / 16);
    mc->rope_axes[3] = 0;
}

/* The i-th preset across the registry, and its family's descriptor. */
static const family_preset *preset_at(int i, const family_desc **of)
{
    const family_desc *d;
    for (int k = 0; i >= 0 && (d = family_at(k)); k++) {
        if (i < d->n_presets) {
            *of = d;
            return &d->presets[i];
        }
        i -= d->n_presets;
    }
    return NULL;
}

const char *model_preset_name(int i)
{
    const family_desc *d;
    const family_preset *p = preset_at(i, &d);
    return p ? p->name : NULL;
}

static void preset_config(const family_desc *d, const family_preset *p, model_config *out)
{
    *out = (model_config){.depth = p->depth, .hidden = p->hidden, .heads = p->heads, .patch = p->patch,
                          .channels = p->channels, .height = p->edge, .width = p->edge, .classes = p->classes,
                          .single_depth = p->single_depth, .text_len = p->text_len,
                          .text_vocab = p->text_len ? TEXT_VOCAB : 0, .text_dim = p->text_dim,
                          .pooled_dim = p->pooled_dim, .guidance_embeds = p->guidance_embeds, .guidance = 1.0,
                          .vae_scale = FAMILY_VAE_SCALE, .mechanism = ATTN_FLASH, .frames = 1, .patch_t = 1,
                          .qk_norm = p->qk_norm, .dual_attention = p->dual_attention,
                          .pos_embed_max = p->pos_embed_max, .sample_size = p->pos_embed_max ? p->edge : 0};
    snprintf(out->family, sizeof out->family, "%s", d->name);
    snprintf(out->preset, sizeof out->preset, "%s", p->name);
    model_rope_axes(out);
    if (d->preset) d->preset(out, p->name, strstr(p->name, "tiny") != NULL);
}

st_status model_preset(const char *name, model_config *out)
{
    const family_desc *d;
    const family_preset *p;
    for (int i = 0; (p = preset_at(i, &d)); i++)
        if (!strcmp(p->name, name)) {
            preset_config(d, p, out);
            return ST_OK;
        }
    char names[4096] = ""; /* "a|b|c": the config's refusal of a name not in a list, nearest first */
    for (int i = 0; (p = preset_at(i, &d)); i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? "|" : "", p->name);
    return config_choice_error("model_preset", name, names);
}
