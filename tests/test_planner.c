/* The per-block planner against every uniform schedule, at fixed rates (so that the test times nothing): at
 * budgets between the smallest uniform peak and no checkpointing's, its plan's dry peak fits the budget, reads
 * back as itself, and is predicted no slower than the fastest uniform schedule that fits. */
#include <stdio.h>
#include <string.h>

#include "segtrain/advise.h"
#include "segtrain/objective.h"
#include "testkit.h"

/* A machine of round numbers: GEMM 100 GFLOP/s, attention 50, memory-bound ops 10 GB/s, 10 ms fixed. */
static const cost_rates rates = {.per_unit = {[OP_GEMM] = 1e-11, [OP_ATTENTION] = 2e-11, [OP_NORM] = 1e-10,
                                              [OP_POINTWISE] = 1e-10},
                                 .fixed = 0.01};

static void test_model(const char *json)
{
    config *cfg;
    CHECKF(config_parse(json, "test", &cfg) == ST_OK, "%s", st_error());
    model_run r;
    CHECKF(model_run_open(cfg, false, &r) == ST_OK, "%s", st_error());
    const int64_t batch = config_int(cfg, "train_batch_size");
    config_free(cfg);
    const size_t optimizer = 0;

    /* the span of uniform peaks: no checkpointing's, and the least of all (an unlimited search's peaks) */
    schedule none = {.cs = {.interval = 1, .stride = 1}};
    pool_stats dev, host;
    CHECK(model_set_checkpointing(r.m, &none.cs, NULL, 0) == ST_OK);
    CHECK(cost_of_dry_step(&r, batch, optimizer, &rates, &dev, &host, &none.sec) == ST_OK);
    const size_t top = dev.peak;
    size_t bottom = top;
    for (size_t budget = top; budget > 0; budget -= budget / 16) { /* lower until no uniform schedule fits */
        schedule u;
        bool found;
        int searched;
        search_uniform(&r, batch, optimizer, &rates, budget, &u, &found, &searched);
        if (!found) break;
        bottom = u.peak_device;
    }
    printf("-- %s: uniform peaks from %zu to %zu bytes\n", json, bottom, top);
    int faster = 0;
    for (int k = 1; k <= 3; k++) {
        const size_t budget = bottom + (top - bottom) * (size_t)k / 4;
        schedule u, p;
        bool u_found, p_found;
        int searched;
        search_uniform(&r, batch, optimizer, &rates, budget, &u, &u_found, &searched);
        CHECKF(plan_blocks(&r, batch, optimizer, &rates, budget, u_found ? &u : NULL, NULL, &p, &p_found) == ST_OK, "%s", st_error());
        CHECKF(u_found && p_found, "budget %zu: uniform %d, planner %d", budget, u_found, p_found);
        if (!u_found || !p_found) continue;
        /* the claim is the dry run's: plan the model by the plan's text again and step it dry */
        pool_stats again;
        double sec;
        CHECKF(model_set_checkpointing(r.m, &p.cs, NULL, 0) == ST_OK, "%s", st_error());
        CHECK(cost_of_dry_step(&r, batch, optimizer, &rates, &again, &host, &sec) == ST_OK);
        char text[PLAN_TEXT_MAX];
        model_plan_text(r.m, text, sizeof text);
        CHECKF(again.peak == p.peak_device && again.peak <= budget && sec == p.sec && !strcmp(text, p.cs.plan),
               "budget %zu: the plan's peak %zu (claimed %zu), %.6f s (claimed %.6f), reads back as \"%s\"", budget,
               again.peak, p.peak_device, sec, p.sec, text);
        CHECKF(p.sec <= u.sec * (1 + 1e-9), "budget %zu: the plan %.6f s/step, the fastest uniform %s %.6f", budget,
               p.sec, u.name, u.sec);
        faster += p.sec < u.sec * 0.999;
        printf("     budget %9zu: uniform %-50s %.4f s %9zu B | plan %.4f s %9zu B (%+.1f%%) %s\n", budget, u.name,
               u.sec, u.peak_device, p.sec, p.peak_device, 100 * (p.sec - u.sec) / u.sec, p.cs.plan);
    }
    printf("     the plan is faster at %d of 3 budgets\n", faster);
    CHECK(model_run_close(&r) == 0);
}

int main(void)
{
    test_model("{\"model_preset\": \"dit-tiny\", \"train_batch_size\": 8}");
    test_model("{\"model_preset\": \"dit-tiny\", \"depth\": 9, \"train_batch_size\": 4}");
    test_model("{\"model_preset\": \"mmdit-tiny\", \"train_batch_size\": 4}");
    test_model("{\"model_preset\": \"skipdit-tiny\", \"train_batch_size\": 4}");
    test_model("{\"model_preset\": \"sd1x-tiny\", \"train_batch_size\": 2}");
    return tk_finish();
}
