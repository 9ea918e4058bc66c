#include "internal.h"
static st_status none_create(model *m) { return st_fail(ST_ERR_UNSUPPORTED, "model_family: %s is not built yet", m->cfg.family); }
static void none_destroy(model *m) { (void)m; }
static param_init none_init(const char *n) { (void)n; return INIT_ZERO; }
const model_family mmdit_family = {.name = "mmdit", .create = none_create, .destroy = none_destroy, .release = none_destroy, .init_of = none_init};
