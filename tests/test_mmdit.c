/* What is particular to the mmdit family (its gradients, bitwise checkpointing and predicted peaks are in
 * test_dit.c and test_checkpointing.c with the other families): the built-in text encoder, diffusers' Flux names,
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

/* The stand-in encoder's sequence row l of a sample's conditioning. */
static const float *row(const model_config *mc, const float *cond, int l) { return cond + l * mc->text_dim; }

static bool row_zero(const model_config *mc, const float *cond, int l)
{
    for (int64_t j = 0; j < mc->text_dim; j++)
        if (row(mc, cond, l)[j] != 0.0f) return false;
    return true;
}

static void test_text_encoder(void)
{
    printf("-- the built-in text encoder: words, case, padding, truncation, the pooled mean\n");
    model_config mc = tiny();
    const int64_t K = model_cond_len(&mc), D = mc.text_dim, pooled = mc.text_len * D;
    CHECK(K == mc.text_len * mc.text_dim + mc.pooled_dim && mc.text_len == 8);
    float *a = malloc((size_t)K * sizeof(float)), *b = malloc((size_t)K * sizeof(float));
    float *e = malloc((size_t)K * sizeof(float));
    model_condition(&mc, 0, "A red circle, on a NAVY background!", a);
    model_condition(&mc, 0, "a red circle on a navy background", b);
    CHECK(!memcmp(a, b, (size_t)K * sizeof(float)));
    CHECKF(!memcmp(row(&mc, a, 0), row(&mc, a, 4), (size_t)D * sizeof(float)) &&
               memcmp(row(&mc, a, 0), row(&mc, a, 1), (size_t)D * sizeof(float)) && !row_zero(&mc, a, 6) &&
               row_zero(&mc, a, 7),
           "words are rows (\"a\" twice), the eighth is padding");
    model_null_condition(&mc, e);
    for (int64_t i = 0; i < K; i++) CHECK(e[i] == 0.0f);
    model_condition(&mc, 0, "one two three four five six seven eight nine", a);
    CHECK(!row_zero(&mc, a, 7));
    model_condition(&mc, 0, "red", a);
    model_condition(&mc, 0, "red red", b);
    CHECKF(!memcmp(a + pooled, b + pooled, (size_t)mc.pooled_dim * sizeof(float)) &&
               memcmp(a + pooled, row(&mc, a, 0), (size_t)mc.pooled_dim * sizeof(float)),
           "the pooled vector is the mean of the words' own vectors, not their rows");

    /* every word of the built-in captions has a row of its own at the default table size */
    dataset *ds;
    CHECK(dataset_open_builtin(8, 48, 1, &ds) == ST_OK);
    float rows[64][32];
    char words[64][32];
    int n = 0;
    CHECK(D <= 32);
    for (int64_t i = 0; i < dataset_size(ds); i++) {
        char caption[CAPTION_MAX];
        CHECK(dataset_get(ds, i, NULL, NULL, caption) == ST_OK);
        for (char *w = strtok(caption, " "); w; w = strtok(NULL, " ")) {
            int k = 0;
            while (k < n && strcmp(words[k], w)) k++;
            if (k < n || n == 64) continue;
            snprintf(words[n], sizeof words[n], "%s", w);
            model_condition(&mc, 0, w, a);
            memcpy(rows[n++], a, (size_t)D * sizeof(float));
        }
    }
    dataset_close(ds);
    bool distinct = n > 15;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) distinct &= memcmp(rows[i], rows[j], (size_t)D * sizeof(float)) != 0;
    CHECKF(distinct, "%d built-in words, each its own row of %lld", n, (long long)mc.text_vocab);
    free(a), free(b), free(e);
}

static void test_names(void)
{
    printf("-- diffusers' Flux weight names\n");
    model_config mc = tiny();
    model *m;
    CHECK(model_create(&mc, NULL, &m) == ST_OK);
    const char *want[] = {"x_embedder.weight",
                          "context_embedder.weight",
                          "time_text_embed.timestep_embedder.linear_1.weight",
                          "time_text_embed.text_embedder.linear_2.bias",
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
    CHECK(!param_find(ps, "time_text_embed.guidance_embedder.linear_1.weight"));
    model_destroy(m);
    CHECK(model_preset("flux-tiny", &mc) == ST_OK && mc.guidance_embeds);
    CHECK(model_create(&mc, NULL, &m) == ST_OK);
    CHECK(param_find(model_params(m), "time_text_embed.guidance_embedder.linear_2.weight") != NULL);
    model_destroy(m);
}

/* The prediction for one x and t under two captions. */
static void predict(model *m, const char *caption, float *out)
{
    const model_config *mc = model_get_config(m);
    const int64_t per = mc->channels * mc->height * mc->width;
    float *x = malloc((size_t)per * sizeof(float)), t = 500.0f;
    rng_fill_normal(x, per, 3, 1, 0, 1);
    float *cond = malloc((size_t)model_cond_len(mc) * sizeof(float));
    model_condition(mc, 0, caption, cond);
    const float *pred;
    CHECKF(model_forward(m, x, &t, cond, 1, false, &pred) == ST_OK, "%s", st_error());
    memcpy(out, pred, (size_t)per * sizeof(float));
    model_release(m);
    free(x), free(cond);
}

static void test_conditioning(void)
{
    printf("-- the caption reaches the prediction; the family refuses what it cannot do\n");
    model_config mc = tiny();
    pool *p = pool_create(POOL_DEVICE, 0);
    model *m;
    CHECK(model_create(&mc, p, &m) == ST_OK);
    model_init(m, 5, true);
    const int64_t per = mc.channels * mc.height * mc.width;
    float *a = malloc((size_t)per * sizeof(float)), *b = malloc((size_t)per * sizeof(float));
    float *c = malloc((size_t)per * sizeof(float));
    predict(m, "a red circle", a);
    predict(m, "a red circle", b);
    predict(m, "a blue circle", c);
    CHECK(!memcmp(a, b, (size_t)per * sizeof(float)));
    CHECK(memcmp(a, c, (size_t)per * sizeof(float)) != 0);

    ckpt_settings none = {.interval = 1, .stride = 1};
    const int64_t capture[1] = {0};
    CHECK(model_set_checkpointing(m, &none, capture, 1) == ST_ERR_UNSUPPORTED);
    CHECKF(strstr(st_error(), "capture_hidden_states") && strstr(st_error(), "mmdit"), "%s", st_error());

    model_config odd = mc; /* head width 16 in axes (4, 6, 6) */
    odd.rope_axes[2] = 8;
    CHECK(model_config_check(&odd) == ST_ERR_INVALID && strstr(st_error(), "axes_dims_rope"));
    odd = mc;
    odd.rope_axes[0] = 3, odd.rope_axes[1] = 7;
    CHECK(model_config_check(&odd) == ST_ERR_INVALID && strstr(st_error(), "even"));
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
    test_text_encoder();
    test_names();
    test_conditioning();
    return tk_finish();
}
