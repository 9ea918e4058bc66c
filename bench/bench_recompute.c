/* Recompute benchmark (not a test): does checkpointing cost what it must and no more? Training steps under
 * none, layer, interval2, seg2-stride4 and their attention-offload variants, and a forward of the block
 * sequence alone (what a recompute runs) and of every block without making its output (what the recompute of a
 * segment's last block runs), interleaved round by round so that the machine's drift hits every row alike;
 * medians per row. The extra time of a checkpointed row over none is set against the measured forward time of
 * the blocks it recomputes, each segment's last block at its output-less time.
 *
 *   build/bench_recompute [--rounds R] [--batch B] [--preset dit-s2]
 */
#include <string.h>

#include "benchkit.h"
#include "segtrain/executor.h"

typedef struct row {
    const char *name;
    ckpt_settings cs;
    const char *baseline; /* the row whose time this one is read against */
} row;

#define ROUNDS_MAX 50

/* A forward of the whole block sequence without keeping anything: what recomputing every block costs. With
 * last, instead every block alone from the same input, keeping what backward reads but making no output: what
 * recomputing a segment's last block costs (output_optional kinds). It runs inside a model forward, whose
 * conditioning the blocks read. */
static double blocks_forward(model *m, pool *dev, const flow_batch *fb, bool last)
{
    const float *pred;
    float ts[64];
    for (int64_t i = 0; i < fb->batch && i < 64; i++) ts[i] = 1000.0f * fb->t[i];
    if (fb->batch > 64 || model_forward(m, fb->x0, ts, fb->cond, fb->batch, false, &pred)) return -1;
    block_seq *seq;
    model_sequences(m, &seq);
    const seq_plan *plan = model_plan(m, 0);
    block_state in = {.n = seq->state_n}, out = {0};
    for (int k = 0; k < seq->state_n; k++) {
        if (pool_alloc(dev, (size_t)seq->state_numel[k] * sizeof(float), MEM_ACTIVATIONS, "bench.state",
                       (void **)&in.t[k]))
            return -1;
        rng_fill_normal(in.t[k], seq->state_numel[k], 1, (uint64_t)k, 0, 1);
    }
    st_status st = ST_OK;
    double t0 = clock_seconds();
    if (last) {
        for (int i = 0; i < seq->n && !st; i++) {
            block *b = &seq->blocks[i];
            block_saved *saved = NULL;
            st = b->kind->forward(b, &in, b->kind->output_optional ? NULL : &out, KEEP_ALL, NULL, &saved);
            b->kind->release(b, saved);
            state_free(dev, &out);
        }
        state_free(dev, &in);
    } else {
        seq_run *run = NULL;
        st = seq_forward(seq, plan, NULL, &in, false, &out, &run);
    }
    const double t = clock_seconds() - t0;
    state_free(dev, &out);
    model_release(m);
    return st ? -1 : t;
}

int main(int argc, char **argv)
{
    long long rounds = 7, batch = 8;
    const char *preset = "dit-s2";
    const cli_flag flags[] = {{"--rounds", .whole = &rounds, .min = 1, .max = ROUNDS_MAX},
                              {"--batch", .whole = &batch, .min = 1, .max = 65536},
                              {"--preset", .text = &preset},
                              {0}};
    if (bench_args(argc, argv, "bench_recompute", flags)) return 2;
    bench_model bm;
    if (bench_open(preset, batch, &bm)) return 1;
    model *m = bm.m;
    pool *dev = bm.dev;
    flow_batch fb = bm.fb;

    const ckpt_settings off = {.interval = 1, .stride = 1};
    const row rows[] = {
        {"none", off, NULL},
        {"layer", {.enabled = true, .interval = 1, .stride = 1}, "none"},
        {"interval2", {.enabled = true, .interval = 2, .stride = 2}, "none"},
        {"seg2-stride4", {.enabled = true, .interval = 2, .stride = 4}, "none"},
        {"activation-offload", {.enabled = true, .interval = 1, .stride = 1, .offload_attention = true}, "layer"},
        {"seg2-stride4-offload", {.enabled = true, .interval = 2, .stride = 4, .offload_attention = true},
         "seg2-stride4"},
    };
    enum { NROWS = sizeof rows / sizeof *rows };
    static double sec[NROWS + 2][ROUNDS_MAX];
    printf("%s, batch %lld, %d threads; %lld rounds, every row once a round, plus one forward of the blocks\n", preset,
           batch, ops_threads(), rounds);
    for (int r = -1; r < rounds; r++) { /* round -1 warms up */
        for (int k = 0; k < NROWS; k++) {
            float loss;
            if (model_set_checkpointing(m, &rows[k].cs, NULL, 0)) return fprintf(stderr, "%s\n", st_error()), 1;
            param_set_zero_grads(model_params(m));
            const double t0 = clock_seconds();
            if (flow_loss(m, &fb, true, &loss)) return fprintf(stderr, "%s\n", st_error()), 1;
            if (r >= 0) sec[k][r] = clock_seconds() - t0;
        }
        if (model_set_checkpointing(m, &off, NULL, 0)) return fprintf(stderr, "%s\n", st_error()), 1;
        for (int last = 0; last < 2; last++) {
            const double f = blocks_forward(m, dev, &fb, last);
            if (f < 0) return fprintf(stderr, "%s\n", st_error()), 1;
            if (r >= 0) sec[NROWS + last][r] = f;
        }
    }
    double med[NROWS + 2];
    for (int k = 0; k < NROWS + 2; k++) med[k] = bench_median(sec[k], rounds);
    block_seq *seq;
    model_sequences(m, &seq);
    const double fwd = med[NROWS], fwd_last = med[NROWS + 1];
    printf("forward of all %d blocks (what recompute runs): %.3f s; each block without its output (a segment's last, "
           "recomputed): %.3f s\n\n", seq->n, fwd, fwd_last);
    printf("%-22s %9s %9s %30s\n", "mode", "sec/step", "extra", "read against");
    for (int k = 0; k < NROWS; k++) {
        if (!rows[k].baseline) {
            printf("%-22s %9.3f\n", rows[k].name, med[k]);
            continue;
        }
        int b = 0;
        while (strcmp(rows[b].name, rows[k].baseline)) b++;
        const double extra = med[k] - med[b];
        if (b == 0) { /* a recompute row: the forwards it adds */
            model_set_checkpointing(m, &rows[k].cs, NULL, 0);
            const seq_plan *plan = model_plan(m, 0);
            int recomputed = 0, last = plan->n_segments;
            for (int i = 0; i < seq->n; i++) recomputed += plan->mode[i] == MODE_CKPT;
            const double want = (fwd * (recomputed - last) + fwd_last * last) / seq->n;
            printf("%-22s %9.3f %+8.3fs   %2d blocks' forward (%d without output) %.3f s: %+5.1f %%\n", rows[k].name,
                   med[k], extra, recomputed, last, want, 100.0 * (extra - want) / want);
        } else {
            printf("%-22s %9.3f %+8.3fs   %s: %+5.1f %%\n", rows[k].name, med[k], extra, rows[b].name,
                   100.0 * extra / med[b]);
        }
    }
    bench_close(&bm);
    return 0;
}
