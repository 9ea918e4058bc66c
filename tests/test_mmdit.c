/* What is particular to the mmdit family (its gradients, bitwise checkpointing and predicted peaks are in
 * test_dit.c and test_checkpointing.c with the other families): the tokenizer, diffusers' Flux weight names,
 * the text conditioning actually reaching the prediction, and what the family refuses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/data.h"
#include "segtrain/model.h"
#include "segtrain/rng.h"
#include "testkit.h"

static model_config tiny(void)
{
    model_config mc;
    CHECK(model_preset("mmdit-tiny", &mc) == ST_OK);
    return mc;
}

static void test_tokenizer(void)
{
    printf("-- the tokenizer: words, case, padding, truncation\n");
    model_config mc = tiny();
    const int64_t L = model_cond_len(&mc);
    CHECK(L == mc.text_len && L == 8);
    int64_t a[8], b[8], e[8];
    model_condition(&mc, 0, "A red circle, on a NAVY background!", a);
    model_condition(&mc, 0, "a red circle on a navy background", b);
    CHECK(!memcmp(a, b, sizeof a));
    CHECKF(a[0] == a[4] && a[0] != a[1] && a[6] != 0 && a[7] == 0, "words hash to rows, the eighth is padding");
    for (int i = 0; i < 8; i++) CHECK(a[i] >= 0 && a[i] < mc.text_vocab);
    model_null_condition(&mc, e);
    for (int i = 0; i < 8; i++) CHECK(e[i] == 0);
    model_condition(&mc, 0, "one two three four five six seven eight nine", a);
    CHECK(a[7] != 0);

    /* every word of the built-in captions has a row of its own at the default table size */
    dataset *ds;
    CHECK(dataset_open_builtin(8, 48, 1, &ds) == ST_OK);
    model_config big = mc;
    big.text_len = 1;
    int64_t rows[64];
    char words[64][32];
    int n = 0;
    for (int64_t i = 0; i < dataset_size(ds); i++) {
        char caption[CAPTION_MAX];
        CHECK(dataset_get(ds, i, NULL, NULL, caption) == ST_OK);
        for (char *w = strtok(caption, " "); w; w = strtok(NULL, " ")) {
            int k = 0;
            while (k < n && strcmp(words[k], w)) k++;
            if (k < n || n == 64) continue;
            snprintf(words[n], sizeof words[n], "%s", w);
            model_condition(&big, 0, w, &rows[n++]);
        }
    }
    dataset_close(ds);
    bool distinct = n > 15;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) distinct &= rows[i] != rows[j];
    CHECKF(distinct, "%d built-in words, each its own row of %lld", n, (long long)mc.text_vocab);
}

static void test_names(void)
{
    printf("-- diffusers' Flux weight names\n");
    model_config mc = tiny();
    model *m;
    CHECK(model_create(&mc, NULL, &m) == ST_OK);
    const char *want[] = {"x_embedder.weight",
                          "time_text_embed.timestep_embedder.linear_1.weight",
                          "transformer_blocks.0.norm1.linear.weight",
                          "transformer_blocks.0.norm1_context.linear.weight",
                          "transformer_blocks.1.attn.to_q.weight",
                          "transformer_blocks.1.attn.add_k_proj.bias",
                          "transformer_blocks.1.attn.to_out.0.weight",
                          "transformer_blocks.1.attn.to_add_out.weight",
                          "transformer_blocks.1.attn.norm_added_q.weight",
                          "transformer_blocks.1.ff.net.0.proj.weight",
                          "transformer_blocks.1.ff_context.net.2.weight",
                          "single_transformer_blocks.1.proj_mlp.weight",
                          "single_transformer_blocks.1.proj_out.weight",
                          "single_transformer_blocks.0.attn.norm_k.weight",
                          "norm_out.linear.weight",
                          "proj_out.weight"};
    param_set *ps = model_params(m);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        bool found = false;
        for (int k = 0; k < ps->n; k++) found |= !strcmp(param_at(ps, k)->name, want[i]);
        CHECKF(found, "%s", want[i]);
    }
    block_seq *seqs;
    CHECK(model_sequences(m, &seqs) == 2 && seqs[0].n == 2 && seqs[1].n == 2 && seqs[0].state_n == 2);
    model_destroy(m);
}

/* The prediction for one x and t under two captions. */
static void predict(model *m, const char *caption, float *out)
{
    const model_config *mc = model_get_config(m);
    const int64_t per = mc->channels * mc->resolution * mc->resolution;
    float *x = malloc((size_t)per * sizeof(float)), t = 500.0f;
    rng_fill_normal(x, per, 3, 1, 0, 1);
    int64_t ids[64];
    model_condition(mc, 0, caption, ids);
    const float *pred;
    CHECKF(model_forward(m, x, &t, ids, 1, false, &pred) == ST_OK, "%s", st_error());
    memcpy(out, pred, (size_t)per * sizeof(float));
    model_release(m);
    free(x);
}

static void test_conditioning(void)
{
    printf("-- the caption reaches the prediction; the family refuses what it cannot do\n");
    model_config mc = tiny();
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m;
    CHECK(model_create(&mc, p, &m) == ST_OK);
    model_init(m, 5, true);
    const int64_t per = mc.channels * mc.resolution * mc.resolution;
    float *a = malloc((size_t)per * sizeof(float)), *b = malloc((size_t)per * sizeof(float));
    float *c = malloc((size_t)per * sizeof(float));
    predict(m, "a red circle", a);
    predict(m, "a red circle", b);
    predict(m, "a blue circle", c);
    CHECK(!memcmp(a, b, (size_t)per * sizeof(float)));
    CHECK(memcmp(a, c, (size_t)per * sizeof(float)) != 0);

    int64_t bad[8] = {0, 0, 0, 0, 0, 0, 0, mc.text_vocab};
    float x[256] = {0}, t = 1.0f;
    const float *pred;
    CHECK(model_forward(m, x, &t, bad, 1, false, &pred) == ST_ERR_INVALID && strstr(st_error(), "caption tokens"));

    ckpt_settings none = {.interval = 1, .stride = 1};
    const int64_t capture[1] = {0};
    CHECK(model_set_checkpointing(m, &none, capture, 1) == ST_ERR_UNSUPPORTED);
    CHECKF(strstr(st_error(), "capture_hidden_states") && strstr(st_error(), "mmdit"), "%s", st_error());

    model_config odd = mc;
    odd.heads = 8; /* head width 8: fine; 64 / 16 = 4 fine; a width of 6 is not */
    odd.hidden = 48;
    CHECK(model_config_check(&odd) == ST_ERR_INVALID && strstr(st_error(), "rotary"));
    odd = mc;
    odd.single_depth = 0;
    model *none_single;
    CHECK(model_create(&odd, NULL, &none_single) == ST_ERR_INVALID && strstr(st_error(), "num_single_layers"));
    free(a), free(b), free(c);
    model_destroy(m);
    CHECK(pool_destroy(p) == 0);
}

int main(void)
{
    test_tokenizer();
    test_names();
    test_conditioning();
    return tk_finish();
}
