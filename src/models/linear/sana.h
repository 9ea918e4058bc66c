/* What Sana's and Sana-Video's files share (linear/); internal to src/models. */
#ifndef SEGTRAIN_MODELS_SANA_H
#define SEGTRAIN_MODELS_SANA_H

#include "models/core/diffusers_json.h"

/* SanaTransformer2DModel's config over mc; with video, SanaVideoTransformer3DModel's (sana.c) */
st_status sana_read(const cJSON *j, const char *file, model_config *mc, bool video);

#endif
