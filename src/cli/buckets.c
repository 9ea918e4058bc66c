/* A run's buckets (bucket_shapes) as plan and advise show them: each shape's dry step on the run's model of it. */
#include <stdio.h>

#include "cli.h"
#include "segtrain/objective.h"
#include "segtrain/train.h"

void cli_data_buckets(config **cfg, int ranks, bool *from_data)
{
    train_buckets tb;
    *from_data = false;
    if (train_buckets_open(*cfg, ranks, &tb)) { /* a plan of data it cannot read is still a plan, of the config */
        st_warn("segtrain: warning: %s; the plan is of the config's shapes", st_error());
        return;
    }
    if (tb.cfg) {
        config_free(*cfg);
        *cfg = tb.cfg, tb.cfg = NULL, *from_data = true;
    }
    train_buckets_close(&tb);
}

st_status cli_buckets(const config *cfg, int ranks, const cost_rates *rates, bucket_report *out, int *n, int *largest)
{
    model_run r = {0};
    const int64_t batch = config_int(cfg, "train_batch_size");
    st_status st = model_run_open(cfg, false, &r); /* one model a shape, on one set of weights, as train holds them */
    *n = st ? 0 : r.n_buckets;
    *largest = 0;
    for (int i = 0; !st && i < *n; i++) {
        model_run at = model_run_at(&r, i);
        pool_stats dev, host;
        double sec = 0;
        st = rates ? cost_of_dry_step(&at, batch, ranks, rates, &dev, &host, &sec)
                   : flow_step_dry(&at, batch, ranks, &dev, &host);
        if (!st) out[i] = (bucket_report){r.shape[i], model_image_tokens(model_get_config(at.m)), dev.peak, sec, ""};
        if (!st) model_plan_text(at.m, out[i].plan, sizeof out[i].plan);
        if (!st && out[i].peak > out[*largest].peak) *largest = i;
    }
    if (r.m) model_run_close(&r);
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
        printf("%s\n    its plan: %s\n", i == largest ? "  (the run's peak)" : "", b[i].plan);
    }
}
