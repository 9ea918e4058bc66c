/* From a run configuration to a model configuration: a preset's sizes, then any size given (non-zero). */
#include <stdio.h>
#include <string.h>

#include "segtrain/config.h"
#include "segtrain/model.h"

st_status model_config_from(const config *cfg, model_config *mc)
{
    st_status st = model_preset(config_string(cfg, "model_preset"), mc);
    if (st) return st;
    snprintf(mc->family, sizeof mc->family, "%s", config_string(cfg, "model_family"));
    const struct {
        const char *key;
        int64_t *field;
    } sizes[] = {{"depth", &mc->depth},          {"hidden_size", &mc->hidden},   {"num_heads", &mc->heads},
                 {"patch_size", &mc->patch},     {"in_channels", &mc->channels}, {"resolution", &mc->resolution},
                 {"num_classes", &mc->classes}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (config_int(cfg, sizes[i].key) > 0) *sizes[i].field = config_int(cfg, sizes[i].key); /* 0: the preset's */
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
    }
    return model_config_check(mc);
}
