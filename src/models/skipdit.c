/* The skipdit family (U-ViT-style long skips): not built yet. */
#include "internal.h"

static st_status skipdit_create(model *m)
{
    return st_fail(ST_ERR_UNSUPPORTED, "model_family: %s is not built yet", m->cfg.family);
}
static void skipdit_destroy(model *m) { (void)m; }
static void skipdit_release(model *m) { (void)m; }
static param_init skipdit_init_of(const char *n) { (void)n; return INIT_ZERO; }
const model_family skipdit_family = {
    .name = "skipdit", .create = skipdit_create, .destroy = skipdit_destroy, .release = skipdit_release,
    .init_of = skipdit_init_of};
