/* Fuzz target: a diffusers config.json, read by every family that reads one. The input is written as config.json
 * into a scratch folder, which each family's first preset then takes as pretrained_model_name_or_path (at a 64-pixel
 * resolution), through model_config_from and, when accepted, the model plan builds (model_run_open on dry pools).
 * Whatever is refused is fine; no input may crash, hang or leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_files.h"
#include "segtrain/config.h"
#include "segtrain/model.h"
#include "segtrain/model_run.h"
#include "segtrain/ops.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ops_set_threads(1); /* one core per fuzzer: the machine is shared */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *file = fuzz_write("config.json", data, size);
    char dir[512];
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(file, '/') - file), file);
    char seen[128][32]; /* the families tried, one preset each */
    int n_seen = 0;
    for (int i = 0; model_preset_name(i); i++) {
        model_config mc;
        if (model_preset(model_preset_name(i), &mc)) continue;
        int k = 0;
        while (k < n_seen && strcmp(seen[k], mc.family)) k++;
        if (k < n_seen || n_seen == (int)(sizeof seen / sizeof *seen)) continue;
        snprintf(seen[n_seen++], sizeof *seen, "%s", mc.family);
        char json[1024];
        snprintf(json, sizeof json, "{\"model_preset\": \"%s\", \"pretrained_model_name_or_path\": \"%s\", "
                 "\"resolution\": 64}", model_preset_name(i), dir);
        config *cfg;
        if (config_parse(json, "fuzz.json", &cfg)) {
            fprintf(stderr, "fuzz_diffusers_config: %s\n", st_error());
            abort(); /* the harness's own config */
        }
        model_run r;
        if (!model_run_open(cfg, false, &r)) {
            const size_t leaks = model_run_close(&r);
            if (leaks) {
                fprintf(stderr, "fuzz_diffusers_config: %zu allocations leaked in the pools (%s)\n", leaks, mc.family);
                abort();
            }
        }
        config_free(cfg);
    }
    return 0;
}
