/* A run's buckets (bucket_shapes) as plan and advise show them: each shape's own dry step. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "segtrain/objective.h"

st_status cli_set_bucket(config *cfg, const bucket_shape *s)
{
    char set[80] = "bucket_shapes=";
    bucket_shape_name(s, set + strlen(set), sizeof set - strlen(set));
    return config_set(cfg, set);
}

st_status cli_buckets(const config *cfg, int ranks, const cost_rates *rates, bucket_report *out, int *n, int *largest)
{
    bucket_shape shapes[MODEL_SHAPES_MAX];
    st_status st = model_bucket_shapes(cfg, shapes, n);
    const int64_t batch = config_int(cfg, "train_batch_size");
    *largest = 0;
    for (int i = 0; !st && i < *n; i++) {
        config *one = config_copy(cfg);
        model_run r = {0};
        pool_stats dev, host;
        double sec = 0;
        st = one ? cli_set_bucket(one, &shapes[i]) : st_host_oom("a config");
        if (!st) st = model_run_open(one, false, &r);
        if (!st) st = rates ? cost_of_dry_step(&r, batch, ranks, rates, &dev, &host, &sec)
                            : flow_step_dry(&r, batch, ranks, &dev, &host);
        if (!st) out[i] = (bucket_report){shapes[i], model_image_tokens(model_get_config(r.m)), dev.peak, sec};
        if (!st && out[i].peak > out[*largest].peak) *largest = i;
        if (r.m) model_run_close(&r);
        config_free(one);
    }
    return st;
}

void cli_print_buckets(const bucket_report *b, int n, int largest, bool timed)
{
    for (int i = 0; i < n; i++) {
        char name[48], bytes[24];
        bucket_shape_name(&b[i].shape, name, sizeof name);
        printf("  bucket %-14s %8lld image tokens  predicted peak %s", name, (long long)b[i].tokens,
               st_bytes(bytes, b[i].peak));
        if (timed) printf(", %.3f s/step", b[i].sec);
        printf("%s\n", i == largest ? "  (the run's peak)" : "");
    }
}
