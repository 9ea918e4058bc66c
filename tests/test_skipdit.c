/* What is particular to the skipdit family (U-ViT-style long skips) and the executor's shared states: parameter
 * names, each skip stored once however many boundaries hold it, the unsloth backends refused, and hidden-state
 * capture. Its gradients against finite differences are in test_dit.c, and the standard schedules (bitwise,
 * forward counts, predicted = measured peaks, budgets short of the peak) in test_checkpointing.c, with the other
 * families. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/model.h"
#include "segtrain/objective.h"
#include "segtrain/rng.h"
#include "testkit.h"
#include "testkit_batch.h"

static pool *host_pool; /* one host pool for every model of the test */

static model *make_model(pool *p, const model_config *mc, uint64_t seed)
{
    model *m = NULL;
    CHECKF(model_create(mc, p, &m) == ST_OK, "%s", st_error());
    CHECK(model_set_host_pool(m, host_pool) == ST_OK);
    model_init(m, seed, true);
    return m;
}

static st_status settings_of(const char *json, ckpt_settings *cs)
{
    config *c;
    st_status st = config_parse(json, "test.json", &c);
    if (!st) st = ckpt_settings_from(c, cs);
    config_free(c);
    return st;
}

static st_status plan(model *m, const char *json)
{
    ckpt_settings cs;
    st_status st = settings_of(json, &cs);
    return st ? st : model_set_checkpointing(m, &cs, NULL, 0);
}


/* ---- the parameters ---- */

static void test_names(void)
{
    printf("-- parameter names: DiT's embeddings and final layer, in_blocks, mid_block, out_blocks with skip_linear\n");
    model_config mc;
    CHECK(model_preset("skipdit-tiny", &mc) == ST_OK);
    model *m = NULL;
    CHECKF(model_create(&mc, NULL, &m) == ST_OK, "%s", st_error());
    param_set *ps = model_params(m);
    const char *want[] = {"x_embedder.proj.weight", "pos_embed", "t_embedder.mlp.0.weight", "y_embedder.embedding_table.weight",
                          "in_blocks.0.attn.qkv.weight", "in_blocks.1.mlp.fc2.bias", "in_blocks.1.adaLN_modulation.1.weight",
                          "mid_block.attn.proj.weight", "out_blocks.0.mlp.fc1.weight", "out_blocks.1.skip_linear.weight",
                          "out_blocks.1.skip_linear.bias", "final_layer.linear.weight"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) CHECKF(param_find(ps, want[i]), "%s is registered", want[i]);
    const char *absent[] = {"blocks.0.attn.qkv.weight", "in_blocks.2.attn.qkv.weight", "in_blocks.0.skip_linear.weight",
                            "mid_block.skip_linear.weight", "out_blocks.2.attn.qkv.weight"};
    for (size_t i = 0; i < sizeof absent / sizeof *absent; i++) CHECKF(!param_find(ps, absent[i]), "%s is not", absent[i]);
    const param *sl = param_find(ps, "out_blocks.0.skip_linear.weight");
    CHECK(sl && sl->ndim == 2 && sl->shape[0] == 64 && sl->shape[1] == 128 && sl->trainable);
    /* 5 DiT blocks of 10 tensors each, 2 skip linears of 2, and DiT's 12 others */
    CHECKF(ps->n == 5 * 10 + 2 * 2 + 12, "%d parameter tensors", ps->n);
    model_destroy(m);

    /* LoRA on the MLP targets adapts skip_linear too and freezes its base */
    mc.lora_rank = 4, mc.lora_alpha = 4, mc.lora_mlp = true;
    CHECKF(model_create(&mc, NULL, &m) == ST_OK, "%s", st_error());
    ps = model_params(m);
    CHECK(param_find(ps, "out_blocks.1.skip_linear.lora_A.weight") && param_find(ps, "out_blocks.1.skip_linear.lora_B.weight"));
    CHECK(!param_find(ps, "out_blocks.1.skip_linear.weight")->trainable);
    model_destroy(m);

    mc = (model_config){0};
    CHECK(model_preset("skipdit-tiny", &mc) == ST_OK);
    mc.depth = 33; /* 16 skips and the stream do not fit a state */
    CHECK(model_create(&mc, NULL, &m) == ST_ERR_UNSUPPORTED && strstr(st_error(), "depth") && strstr(st_error(), "31"));
    printf("     depth 33 -> %s\n", st_error());
}

#define ON "\"gradient_checkpointing\": true"

/* ---- a skip is stored once ---- */

static void test_stored_once(void)
{
    printf("-- skips shared by states and boundaries are stored once\n");
    model_config mc;
    CHECK(model_preset("skipdit-tiny", &mc) == ST_OK);
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, &mc, 3);
    tk_batch b = tk_random_batch(&mc, 2, 2);
    block_seq *seq;
    model_sequences(m, &seq);
    const size_t S = (size_t)(2 * 16 * 64) * sizeof(float); /* one (B T, D) tensor */
    /* interval 1: the boundaries are the inputs of blocks 0-4: (x), (y0, y0), (y1, y0, y1), (y2, y0, y1), (y3, y0),
     * 11 slots, 9 tensors counted per boundary, 5 distinct: x and y0-y3 */
    const struct {
        const char *json;
        size_t slots, per_boundary, distinct;
    } rows[] = {{"{" ON "}", 11, 9, 5}, {"{" ON ", \"gradient_checkpointing_interval\": 2}", 6, 5, 4}};
    for (int r = 0; r < 2; r++) {
        CHECKF(plan(m, rows[r].json) == ST_OK, "%s", st_error());
        const seq_plan *pl = model_plan(m, 0);
        model_set_batch(m, 2); /* the descriptions read the states' sizes */
        size_t slots = 0, per_boundary = 0;
        for (int g = 0; g < pl->n_segments; g++) {
            state_map map;
            block_state_map(seq, pl->segments[g].first, &map);
            slots += (size_t)map.n_in;
            char desc[160];
            per_boundary += seq_plan_boundary(pl, seq, g, desc, sizeof desc);
            printf("     %s segment %d (blocks %d-%d): %s\n", r ? "interval 2" : "interval 1", g, pl->segments[g].first,
                   pl->segments[g].last, desc);
        }
        const size_t total = seq_plan_boundary_bytes(pl, seq);
        CHECKF(slots == rows[r].slots && per_boundary == rows[r].per_boundary * S && total == rows[r].distinct * S,
               "boundaries: %zu slots, %zu bytes per boundary, %zu distinct", slots, per_boundary, total);
        CHECK(total < per_boundary && per_boundary < slots * S);

        /* measured: what the pool holds as boundaries once a training forward is done */
        float *xt = calloc((size_t)(2 * b.per), sizeof(float));
        const float ts[2] = {100, 700};
        const float *pred;
        CHECK(model_forward(m, xt, ts, b.y, 2, true, &pred) == ST_OK);
        pool_stats st;
        pool_get_stats(p, &st);
        CHECKF(st.live_by_tag[MEM_BOUNDARIES] == total, "measured boundaries after forward %zu, predicted %zu",
               st.live_by_tag[MEM_BOUNDARIES], total);
        model_release(m);
        free(xt);
    }
    /* what the descriptions say, interval 2: {0, 1} {2, 3} {4} */
    const seq_plan *pl = model_plan(m, 0);
    char d0[160], d1[160], d2[160];
    seq_plan_boundary(pl, seq, 0, d0, sizeof d0);
    seq_plan_boundary(pl, seq, 1, d1, sizeof d1);
    seq_plan_boundary(pl, seq, 2, d2, sizeof d2);
    CHECKF(!strcmp(d0, "stream 8.0 KiB"), "%s", d0);
    CHECKF(!strcmp(d1, "stream 8.0 KiB (also block 1's skip) + skip of block 0 (8.0 KiB)"), "%s", d1);
    CHECKF(!strcmp(d2, "stream 8.0 KiB + skip of block 0 (8.0 KiB)"), "%s", d2);
    CHECK(seq_plan_boundary(pl, seq, 3, d0, sizeof d0) == 0 && d0[0] == 0);
    tk_free_batch(&b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

/* ---- refusals ---- */

static void test_refusals(void)
{
    printf("-- the unsloth backends are refused: skips stay on the device\n");
    model_config mc;
    CHECK(model_preset("skipdit-tiny", &mc) == ST_OK);
    model *m = NULL;
    CHECKF(model_create(&mc, NULL, &m) == ST_OK, "%s", st_error());
    CHECK(plan(m, "{" ON ", \"gradient_checkpointing_interval\": 2}") == ST_OK);
    const char *backends[] = {"unsloth", "unsloth-ffn"};
    for (int i = 0; i < 2; i++) {
        char json[160];
        snprintf(json, sizeof json, "{" ON ", \"gradient_checkpointing_backend\": \"%s\"}", backends[i]);
        CHECK(plan(m, json) == ST_ERR_UNSUPPORTED);
        char quoted[32];
        snprintf(quoted, sizeof quoted, "\"%s\"", backends[i]);
        CHECKF(strstr(st_error(), "gradient_checkpointing_backend") && strstr(st_error(), quoted) &&
                   strstr(st_error(), "skipdit family") && strstr(st_error(), "skip tensors") &&
                   strstr(st_error(), "valid for skipdit: torch, torch-ffn") && !strchr(st_error(), '\n'),
               "%s", st_error());
        printf("     %s -> %s\n", backends[i], st_error());
    }
    CHECKF(model_plan(m, 0)->n_segments == 3, "a refused plan leaves the previous one");
    /* with checkpointing off the backend does nothing, so nothing is refused */
    CHECK(plan(m, "{\"gradient_checkpointing_backend\": \"unsloth\"}") == ST_OK);
    model_destroy(m);
}

/* ---- hidden-state capture ---- */

static void test_capture(void)
{
    printf("-- capture_hidden_states: the stream after a block, per-block fallback\n");
    model_config mc;
    CHECK(model_preset("skipdit-tiny", &mc) == ST_OK);
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m = make_model(p, &mc, 9);
    tk_batch b = tk_random_batch(&mc, 2, 4);
    ckpt_settings none, k3;
    CHECK(settings_of("{}", &none) == ST_OK && settings_of("{" ON ", \"gradient_checkpointing_interval\": 3}", &k3) == ST_OK);
    const int64_t capture[] = {1};
    float ts[2] = {1000 * b.t[0], 1000 * b.t[1]}, *xt = calloc((size_t)(2 * b.per), sizeof(float));
    const float *h[2];
    for (int r = 0; r < 2; r++) {
        CHECKF(model_set_checkpointing(m, r ? &k3 : &none, capture, 1) == ST_OK, "%s", st_error());
        const float *pred;
        float *dh;
        CHECK(model_forward(m, xt, ts, b.y, 2, true, &pred) == ST_OK);
        CHECK(model_hidden(m, 0, &h[r], &dh) == ST_OK);
        float *copy = malloc((size_t)(2 * 16 * 64) * sizeof(float));
        memcpy(copy, h[r], (size_t)(2 * 16 * 64) * sizeof(float));
        h[r] = copy;
        model_release(m);
    }
    CHECKF(strstr(model_plan(m, 0)->fallback, "fell back"), "%s", model_plan(m, 0)->fallback);
    tk_expect_bitwise("in-block 1's output with and without checkpointing", h[1], h[0], 2 * 16 * 64);
    free((void *)h[0]), free((void *)h[1]), free(xt);
    tk_free_batch(&b);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    host_pool = pool_create(POOL_HOST, 0);
    test_names();
    test_refusals();
    test_stored_once();
    test_capture();
    CHECK(pool_destroy(host_pool) == 0);
    return tk_finish();
}
