/* The registry: every model family's descriptor, one line a family (family.h). Adding a family is its own files in
 * its topology folder and one line here. The order is the listings' (model_family_name: segtrain's own, then
 * SimpleTuner's families alphabetically; model_preset_name: each family's presets in turn). */
#include <string.h>

#include "models/core/family.h"

#define FAMILIES(X)                                                                                                   \
    X(dit) X(mmdit) X(skipdit)                                                  /* own/ */                            \
    X(ace_step) X(anima) X(auraflow) X(boogu_image) X(chroma) X(cosmos2image) X(cosmos3) X(deepfloyd) X(ernie)       \
    X(flux) X(flux2) X(flux3_image) X(heartmula) X(hidream) X(hunyuanvideo15) X(hunyuanvideo) X(ideogram)            \
    X(infinitetalk) X(kandinsky5) X(kolors) X(krea2) X(longcat_image) X(longcat_video) X(ltxvideo) X(ltxvideo2)      \
    X(lumina2) X(mageflow) X(minimaxh3) X(minimaxmusic) X(omnigen) X(pixart_sigma) X(qwen_image) X(qwen_image21)     \
    X(sana) X(sanavideo) X(sd1x) X(sd2x) X(sd3) X(sdxl) X(stable_cascade) X(wan) X(wan_s2v) X(z_image)              \
    X(z_image_omni) X(zlab_i1)

#define DECLARE(f) extern const family_desc f##_desc;
FAMILIES(DECLARE)
#define LIST(f) &f##_desc,
static const family_desc *const registry[] = {FAMILIES(LIST)};
#define REGISTRY_COUNT ((int)(sizeof registry / sizeof *registry))

static const family_desc unknown = {0}; /* a name no built family has: no traits, no implementation */

const family_desc *family_at(int i) { return i >= 0 && i < REGISTRY_COUNT ? registry[i] : NULL; }

const family_desc *family_find(const char *name)
{
    for (int i = 0; i < REGISTRY_COUNT; i++)
        if (registry[i]->name && !strcmp(registry[i]->name, name)) return registry[i];
    return NULL;
}

const family_desc *family_of_config(const model_config *mc)
{
    const family_desc *d = family_find(mc->family);
    return d ? d : &unknown;
}

const void *family_options(const model_config *mc) { return family_of_config(mc)->topology_options; }
