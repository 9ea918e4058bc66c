/* Weights from diffusers' folders (one file, sharded with an index, a pipeline's transformer/), in the messy states
 * real folders have, and LoRA files under PEFT's names as diffusers' save_lora_weights writes them. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/params.h"
#include "segtrain/safetensors.h"
#include "testkit.h"

static char root[256];

/* A small transformer under diffusers' names: 7 tensors, one a fixed buffer. */
static const struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} model[] = {
    {"x_embedder.weight", 2, {4, 3}},
    {"x_embedder.bias", 1, {4}},
    {"transformer_blocks.0.attn.to_q.weight", 2, {4, 4}},
    {"transformer_blocks.0.attn.to_out.0.weight", 2, {4, 4}},
    {"transformer_blocks.0.attn.norm_q.weight", 1, {4}},
    {"proj_out.weight", 2, {3, 4}},
    {"pos_embed", 2, {2, 4}},
};
#define N_MODEL 7

static pool *the_pool;

/* The model's parameters with weights from seed (seed 0: zeros). */
static void make_model(param_set *s, uint64_t seed)
{
    *s = (param_set){0};
    for (int i = 0; i < N_MODEL; i++) {
        if (i == N_MODEL - 1) param_add_fixed(s, model[i].name, model[i].ndim, model[i].shape);
        else param_add(s, model[i].name, model[i].ndim, model[i].shape, true);
    }
    CHECKF(param_set_alloc(s, the_pool) == ST_OK, "%s", st_error());
    if (seed) tk_fill(s->weights, s->weight_count, seed, -1.0f, 1.0f);
}

/* root/name, created; the path stays valid (tk_path's buffers rotate). */
static const char *folder(const char *name)
{
    static char paths[32][300];
    static int next;
    char *p = paths[next++ % 32];
    snprintf(p, sizeof paths[0], "%s/%s", root, name);
    mkdir(p, 0755);
    return p;
}

static const char *shard_name(int k, int n)
{
    static char buf[4][64];
    snprintf(buf[k % 4], sizeof buf[0], "diffusion_pytorch_model-%05d-of-%05d.safetensors", k, n);
    return buf[k % 4];
}

/* Tensor i goes to shard shard_of[i] (1-based; 0: nowhere) in file dtype dt[shard]; the index maps tensor i to
 * index_of[i] (0: not in the index). Shards and index as diffusers' save_pretrained writes them. */
typedef struct layout {
    int shard_of[N_MODEL], index_of[N_MODEL];
    sft_dtype dtype[4];
} layout;

static const layout even = {.shard_of = {1, 1, 2, 2, 2, 3, 3}, .index_of = {1, 1, 2, 2, 2, 3, 3}};

static void write_sharded(const char *dir, const param_set *s, const layout *l)
{
    for (int k = 1; k <= 3; k++) {
        sft_entry e[N_MODEL];
        uint16_t half[N_MODEL][16];
        int n = 0;
        for (int i = 0; i < N_MODEL; i++) {
            if (l->shard_of[i] != k) continue;
            const param *q = &s->items[i];
            e[n] = (sft_entry){.name = q->name, .dtype = l->dtype[k], .ndim = q->ndim, .data = q->w};
            memcpy(e[n].shape, q->shape, sizeof q->shape);
            if (l->dtype[k] == SFT_BF16) {
                for (int64_t j = 0; j < q->numel; j++) half[i][j] = sft_f32_to_bf16(q->w[j]);
                e[n].data = half[i];
            }
            n++;
        }
        CHECKF(sft_write(tk_path(dir, shard_name(k, 3)), e, n, (const char *[]){"format", "pt"}, 1) == ST_OK, "%s",
               st_error());
    }
    cJSON *idx = cJSON_CreateObject(), *map = cJSON_CreateObject();
    cJSON_AddItemToObject(cJSON_AddObjectToObject(idx, "metadata"), "total_size", cJSON_CreateNumber(1000));
    cJSON_AddItemToObject(idx, "weight_map", map);
    for (int i = 0; i < N_MODEL; i++)
        if (l->index_of[i]) cJSON_AddStringToObject(map, s->items[i].name, shard_name(l->index_of[i], 3));
    char *text = cJSON_Print(idx);
    tk_write_file(dir, SFT_DIFFUSERS_INDEX, text);
    free(text);
    cJSON_Delete(idx);
}

static bool same_weights(const param_set *a, const param_set *b)
{
    return a->weight_count == b->weight_count && !memcmp(a->weights, b->weights, (size_t)a->weight_count * 4);
}

/* The load must fail with `code` and a line containing both fragments. */
static void expect_error(const char *what, st_status got, st_status code, const char *frag1, const char *frag2)
{
    const char *msg = st_error();
    CHECKF(got == code, "%s: status %d, expected %d (%s)", what, (int)got, (int)code, msg);
    CHECKF(!strchr(msg, '\n'), "%s: not one line: %s", what, msg);
    CHECKF(frag1 && strstr(msg, frag1), "%s: message lacks '%s': %s", what, frag1, msg);
    CHECKF(!frag2 || strstr(msg, frag2), "%s: message lacks '%s': %s", what, frag2, msg);
    printf("     %s -> %s\n", what, msg);
}

static void test_folders(void)
{
    param_set src, dst;
    make_model(&src, 7);
    make_model(&dst, 0);

    /* sharded: by the folder, by the index itself, and through a pipeline folder's transformer/ */
    const char *sharded = folder("sharded");
    write_sharded(sharded, &src, &even);
    CHECKF(param_set_load(&dst, sharded, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    CHECK(same_weights(&src, &dst));
    memset(dst.weights, 0, (size_t)dst.weight_count * 4);
    CHECKF(param_set_load(&dst, tk_path(sharded, SFT_DIFFUSERS_INDEX), PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    CHECK(same_weights(&src, &dst));
    folder("pipeline");
    write_sharded(folder("pipeline/transformer"), &src, &even);
    memset(dst.weights, 0, (size_t)dst.weight_count * 4);
    CHECKF(param_set_load(&dst, tk_path(root, "pipeline"), PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    CHECK(same_weights(&src, &dst));

    /* one file: in a folder, in a pipeline's transformer/ */
    const char *single = folder("single");
    CHECK(param_set_save(&src, tk_path(single, SFT_DIFFUSERS_SINGLE), PARAMS_ALL, false, NULL, 0, NULL, 0) == ST_OK);
    memset(dst.weights, 0, (size_t)dst.weight_count * 4);
    CHECKF(param_set_load(&dst, single, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    CHECK(same_weights(&src, &dst));
    folder("pipe1");
    CHECK(param_set_save(&src, tk_path(folder("pipe1/transformer"), SFT_DIFFUSERS_SINGLE), PARAMS_ALL, false, NULL, 0,
                         NULL, 0) == ST_OK);
    memset(dst.weights, 0, (size_t)dst.weight_count * 4);
    CHECKF(param_set_load(&dst, tk_path(root, "pipe1"), PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    CHECK(same_weights(&src, &dst));

    /* both: the index wins (diffusers' from_pretrained looks for the index first); the single file holds others */
    param_set other;
    make_model(&other, 99);
    CHECK(param_set_save(&other, tk_path(sharded, SFT_DIFFUSERS_SINGLE), PARAMS_ALL, false, NULL, 0, NULL, 0) == ST_OK);
    CHECKF(param_set_load(&dst, sharded, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    CHECKF(same_weights(&src, &dst), "with both files, the single file's weights were read, not the index's");
    param_set_free(&other);

    /* a BF16 shard reads as the bf16-rounded floats */
    const char *bf = folder("bf16");
    layout l = even;
    l.dtype[2] = SFT_BF16;
    write_sharded(bf, &src, &l);
    CHECKF(param_set_load(&dst, bf, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    bool rounded = true, changed = false;
    for (int i = 0; i < N_MODEL; i++)
        for (int64_t j = 0; j < src.items[i].numel; j++) {
            float want = l.shard_of[i] == 2 ? sft_bf16_to_f32(sft_f32_to_bf16(src.items[i].w[j])) : src.items[i].w[j];
            rounded = rounded && dst.items[i].w[j] == want;
            changed = changed || dst.items[i].w[j] != src.items[i].w[j];
        }
    CHECKF(rounded && changed, "bf16 shard: values are not the bf16-rounded ones (rounded %d, changed %d)", rounded,
           changed);

    /* the fixed buffer may be absent (a diffusers checkpoint has no pos_embed buffer) */
    l = even;
    l.shard_of[6] = l.index_of[6] = 0;
    write_sharded(folder("nofixed"), &src, &l);
    CHECKF(param_set_load(&dst, tk_path(root, "nofixed"), PARAMS_ALL, NULL) == ST_OK, "%s", st_error());

    param_set_free(&src);
    param_set_free(&dst);
}

static void test_broken_folders(void)
{
    param_set src, dst;
    make_model(&src, 7);
    make_model(&dst, 0);
    char name[64];
    int case_no = 0;
#define CASE() (snprintf(name, sizeof name, "broken%d", ++case_no), folder(name))

    const char *d = CASE();
    write_sharded(d, &src, &even);
    unlink(tk_path(d, shard_name(2, 3)));
    expect_error("a shard missing", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_IO, shard_name(2, 3),
                 SFT_DIFFUSERS_INDEX);

    d = CASE();
    write_sharded(d, &src, &even);
    CHECK(truncate(tk_path(d, shard_name(3, 3)), 100) == 0);
    expect_error("a truncated shard", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_FORMAT, shard_name(3, 3),
                 "truncated");

    d = CASE();
    layout l = even;
    l.index_of[3] = 3; /* the index says shard 3, the tensor is in shard 2 */
    write_sharded(d, &src, &l);
    expect_error("the index names the wrong shard", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_FORMAT,
                 "'transformer_blocks.0.attn.to_out.0.weight' to shard diffusion_pytorch_model-00003-of-00003",
                 "lacks it");

    d = CASE();
    l = even;
    l.index_of[4] = 0; /* shard 2 has it; the index names no shard for it, and shard 3 has a second copy */
    write_sharded(d, &src, &l);
    param_set two = {0};
    param_add(&two, model[4].name, model[4].ndim, model[4].shape, true);
    param_add(&two, model[5].name, model[5].ndim, model[5].shape, true);
    param_add(&two, model[6].name, model[6].ndim, model[6].shape, true);
    CHECK(param_set_alloc(&two, the_pool) == ST_OK);
    CHECK(param_set_save(&two, tk_path(d, shard_name(3, 3)), PARAMS_ALL, false, NULL, 0, NULL, 0) == ST_OK);
    param_set_free(&two);
    expect_error("a tensor in two shards", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_FORMAT,
                 "'transformer_blocks.0.attn.norm_q.weight' is in two shards", shard_name(3, 3));

    d = CASE();
    write_sharded(d, &src, &even);
    tk_write_file(d, SFT_DIFFUSERS_INDEX, "{\"weight_map\": {\"a\": ");
    expect_error("an index that is not JSON", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_FORMAT,
                 SFT_DIFFUSERS_INDEX, "not a JSON object");
    tk_write_file(d, SFT_DIFFUSERS_INDEX, "{\"metadata\": {\"total_size\": 10}}");
    expect_error("an index without weight_map", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_FORMAT,
                 SFT_DIFFUSERS_INDEX, "weight_map");
    tk_write_file(d, SFT_DIFFUSERS_INDEX, "{\"weight_map\": {\"x_embedder.weight\": \"../elsewhere.safetensors\"}}");
    expect_error("an index naming a shard outside its folder", param_set_load(&dst, d, PARAMS_ALL, NULL),
                 ST_ERR_FORMAT, "../elsewhere.safetensors", "shard file name");
    tk_write_file(d, SFT_DIFFUSERS_INDEX, "{\"weight_map\": {\"x_embedder.weight\": 3}}");
    expect_error("an index mapping to a number", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_FORMAT,
                 "'x_embedder.weight'", "not a string");

    d = CASE();
    tk_write_file(d, "config.json", "{}");
    expect_error("a folder with neither file", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_IO,
                 SFT_DIFFUSERS_INDEX, SFT_DIFFUSERS_SINGLE);

    d = CASE();
    l = even;
    l.shard_of[2] = l.index_of[2] = 0;
    write_sharded(d, &src, &l);
    expect_error("a tensor in no shard", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_FORMAT,
                 "'transformer_blocks.0.attn.to_q.weight' is missing", SFT_DIFFUSERS_INDEX);

    /* unexpected tensors and wrong shapes name the shard that holds them */
    d = CASE();
    param_set big = {0};
    for (int i = 0; i < N_MODEL; i++)
        param_add(&big, model[i].name, model[i].ndim, i == 5 ? (int64_t[]){3, 5} : model[i].shape, true);
    CHECK(param_set_alloc(&big, the_pool) == ST_OK);
    write_sharded(d, &big, &even);
    expect_error("a wrong shape", param_set_load(&dst, d, PARAMS_ALL, NULL), ST_ERR_FORMAT, shard_name(3, 3),
                 "'proj_out.weight' has shape (3, 5), expected (3, 4)");
    param_set_free(&big);
    d = CASE();
    write_sharded(d, &src, &even);
    param_set smaller = {0};
    for (int i = 1; i < N_MODEL; i++) param_add(&smaller, model[i].name, model[i].ndim, model[i].shape, true);
    CHECK(param_set_alloc(&smaller, the_pool) == ST_OK);
    expect_error("an unexpected tensor", param_set_load(&smaller, d, PARAMS_ALL, NULL), ST_ERR_FORMAT,
                 "unexpected tensor 'x_embedder.weight'", shard_name(1, 3));
    param_set_free(&smaller);
#undef CASE
    param_set_free(&src);
    param_set_free(&dst);
}

/* ---- LoRA ---- */

/* Frozen base layers, adapters of `rank` on to_q and to_out.0; with other_to_q, a to_q without an adapter too. */
static void make_lora(param_set *s, int64_t rank, bool other_to_q, uint64_t seed)
{
    *s = (param_set){0};
    static const char *const adapted[] = {"transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_out.0",
                                          "transformer_blocks.1.attn.to_q", "transformer_blocks.1.attn.to_out.0"};
    char n[PARAM_NAME_MAX];
    for (int i = 0; i < 4; i++) {
        snprintf(n, sizeof n, "%s.weight", adapted[i]);
        param_add(s, n, 2, (int64_t[]){4, 4}, false);
        snprintf(n, sizeof n, "%s.lora_A.weight", adapted[i]);
        param_add(s, n, 2, (int64_t[]){rank, 4}, true);
        snprintf(n, sizeof n, "%s.lora_B.weight", adapted[i]);
        param_add(s, n, 2, (int64_t[]){4, rank}, true);
    }
    param_add(s, "proj_out.weight", 2, (int64_t[]){3, 4}, false);
    if (other_to_q) param_add(s, "context_block.to_q.weight", 2, (int64_t[]){4, 4}, false);
    CHECKF(param_set_alloc(s, the_pool) == ST_OK, "%s", st_error());
    if (seed) tk_fill(s->weights, s->weight_count, seed, -1.0f, 1.0f);
}

static bool same_adapters(const param_set *a, const param_set *b)
{
    for (int i = 0; i < a->n; i++)
        if (a->items[i].trainable && memcmp(a->items[i].w, b->items[i].w, (size_t)a->items[i].numel * 4)) return false;
    return true;
}

/* The target_modules of a LoRA file, joined by spaces. */
static const char *targets_of(const char *path, double *r, double *alpha)
{
    static char out[512];
    out[0] = 0;
    sft_file *f;
    if (sft_open(path, &f)) return "(cannot open)";
    const char *raw = sft_metadata(f, "lora_adapter_metadata");
    cJSON *j = raw ? cJSON_Parse(raw) : NULL;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "transformer.target_modules"), *it;
    cJSON_ArrayForEach(it, list) snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", *out ? " " : "",
                                          cJSON_IsString(it) ? it->valuestring : "?");
    *r = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "transformer.r"));
    *alpha = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "transformer.lora_alpha"));
    cJSON_Delete(j);
    sft_close(f);
    return out;
}

static void test_lora(void)
{
    param_set src, dst;
    make_lora(&src, 2, false, 5);
    make_lora(&dst, 2, false, 0);
    const char *dir = folder("lora");
    const char *file = tk_path(dir, SFT_LORA_FILE);

    /* written under "transformer.", with diffusers' metadata */
    CHECKF(param_set_save_lora(&src, file, 4.0, (const char *[]){"segtrain.model_type", "lora"}, 1) == ST_OK, "%s",
           st_error());
    sft_file *f;
    CHECKF(sft_open(file, &f) == ST_OK, "%s", st_error());
    if (f) {
        CHECK(sft_count(f) == 8);
        CHECK(sft_find(f, "transformer.transformer_blocks.1.attn.to_out.0.lora_B.weight") != NULL);
        CHECK(!sft_find(f, "transformer_blocks.1.attn.to_out.0.lora_B.weight"));
        CHECK(sft_metadata(f, "format") && !strcmp(sft_metadata(f, "format"), "pt"));
        CHECK(sft_metadata(f, "segtrain.model_type") && !strcmp(sft_metadata(f, "segtrain.model_type"), "lora"));
        sft_close(f);
    }
    double r = 0, alpha = 0;
    const char *t = targets_of(file, &r, &alpha);
    CHECKF(!strcmp(t, "to_out.0 to_q") && r == 2 && alpha == 4, "target_modules '%s', r %g, alpha %g", t, r, alpha);

    /* a U-Net's: under "unet.", its metadata keys too; read back by a set of that component, refused by another */
    const char *ufile = tk_path(dir, "unet_lora.safetensors");
    src.lora_component = "unet";
    CHECKF(param_set_save_lora(&src, ufile, 4.0, NULL, 0) == ST_OK, "%s", st_error());
    src.lora_component = NULL;
    CHECKF(sft_open(ufile, &f) == ST_OK, "%s", st_error());
    if (f) {
        CHECK(sft_find(f, "unet.transformer_blocks.1.attn.to_out.0.lora_B.weight") != NULL);
        const char *meta = sft_metadata(f, "lora_adapter_metadata");
        CHECKF(meta && strstr(meta, "\"unet.r\"") && strstr(meta, "\"unet.target_modules\""), "%s", meta ? meta : "");
        sft_close(f);
    }
    dst.lora_component = "unet";
    CHECKF(param_set_load_lora(&dst, ufile, 4.0) == ST_OK, "%s", st_error());
    CHECK(same_adapters(&src, &dst));
    dst.lora_component = NULL;
    expect_error("a U-Net's LoRA file read as a transformer's", param_set_load_lora(&dst, ufile, 4.0), ST_ERR_FORMAT,
                 "unet.transformer_blocks", "unet_lora.safetensors");
    memset(dst.weights, 0, (size_t)dst.weight_count * 4);

    /* round trip, by the file and by its folder */
    CHECKF(param_set_load_lora(&dst, file, 4.0) == ST_OK, "%s", st_error());
    CHECK(same_adapters(&src, &dst));
    memset(dst.weights, 0, (size_t)dst.weight_count * 4);
    CHECKF(param_set_load_lora(&dst, dir, 4.0) == ST_OK, "%s", st_error());
    CHECK(same_adapters(&src, &dst));

    /* a to_q without an adapter: "to_q" would select it too, so the adapted ones are named in full */
    param_set wide;
    make_lora(&wide, 2, true, 5);
    const char *wfile = tk_path(dir, "wide.safetensors");
    CHECK(param_set_save_lora(&wide, wfile, 2.0, NULL, 0) == ST_OK);
    t = targets_of(wfile, &r, &alpha);
    CHECKF(!strcmp(t, "to_out.0 transformer_blocks.0.attn.to_q transformer_blocks.1.attn.to_q"),
           "target_modules with a bare to_q: '%s'", t);
    param_set_free(&wide);

    /* segtrain's own names (no metadata) and PEFT's ".default" names load too */
    const char *own = tk_path(dir, "own.safetensors");
    CHECK(param_set_save(&src, own, PARAMS_TRAINABLE, false, NULL, 0, NULL, 0) == ST_OK);
    memset(dst.weights, 0, (size_t)dst.weight_count * 4);
    CHECKF(param_set_load_lora(&dst, own, 4.0) == ST_OK, "%s", st_error());
    CHECK(same_adapters(&src, &dst));
    sft_entry e[9];
    char names[8][PARAM_NAME_MAX + 16];
    int n = 0;
    for (int i = 0; i < src.n; i++) {
        const param *q = &src.items[i];
        if (!q->trainable) continue;
        snprintf(names[n], sizeof names[n], "%.*s.default.weight", (int)(strlen(q->name) - strlen(".weight")), q->name);
        e[n] = (sft_entry){.name = names[n], .dtype = SFT_F32, .ndim = 2, .shape = {q->shape[0], q->shape[1]},
                           .data = q->w};
        n++;
    }
    const char *peft = tk_path(dir, "peft.safetensors");
    CHECK(sft_write(peft, e, n, NULL, 0) == ST_OK);
    memset(dst.weights, 0, (size_t)dst.weight_count * 4);
    CHECKF(param_set_load_lora(&dst, peft, 4.0) == ST_OK, "%s", st_error());
    CHECK(same_adapters(&src, &dst));

    /* the wrong rank: by the metadata, and (without it) by the shapes; the wrong alpha */
    param_set r3;
    make_lora(&r3, 3, false, 0);
    expect_error("LoRA file of another rank", param_set_load_lora(&r3, file, 4.0), ST_ERR_INVALID, "rank (r) 2",
                 "rank 3");
    expect_error("LoRA file of another rank, no metadata", param_set_load_lora(&r3, own, 4.0), ST_ERR_FORMAT,
                 "has shape (2, 4), expected (3, 4)", NULL);
    param_set_free(&r3);
    expect_error("LoRA file of another alpha", param_set_load_lora(&dst, file, 2.0), ST_ERR_INVALID, "lora_alpha 4",
                 "this model's is 2");

    /* one adapter under two names; a missing one; a stranger (a text encoder's adapter) */
    e[n] = e[0];
    e[n].name = "transformer.transformer_blocks.0.attn.to_q.lora_A.weight";
    CHECK(sft_write(peft, e, n + 1, NULL, 0) == ST_OK);
    expect_error("an adapter under two names", param_set_load_lora(&dst, peft, 4.0), ST_ERR_FORMAT,
                 "'transformer_blocks.0.attn.to_q.lora_A.default.weight' and "
                 "'transformer.transformer_blocks.0.attn.to_q.lora_A.weight'", "both");
    CHECK(sft_write(peft, e + 1, n - 1, NULL, 0) == ST_OK);
    expect_error("a missing adapter", param_set_load_lora(&dst, peft, 4.0), ST_ERR_FORMAT,
                 "'transformer.transformer_blocks.0.attn.to_q.lora_A.weight' is missing", NULL);
    e[0].name = "text_encoder.layers.0.q_proj.lora_A.weight";
    CHECK(sft_write(peft, e, n, NULL, 0) == ST_OK);
    expect_error("a text encoder's adapter", param_set_load_lora(&dst, peft, 4.0), ST_ERR_FORMAT,
                 "unexpected tensor 'text_encoder.layers.0.q_proj.lora_A.weight'", NULL);

    /* metadata segtrain's adapters cannot honour */
    e[0].name = names[0];
    CHECK(sft_write(peft, e, n, (const char *[]){"lora_adapter_metadata", "{\"transformer.r\": 2, "
                                                 "\"transformer.rank_pattern\": {\"to_q\": 8}}"}, 1) == ST_OK);
    expect_error("per-module ranks", param_set_load_lora(&dst, peft, 4.0), ST_ERR_UNSUPPORTED, "rank_pattern", NULL);
    CHECK(sft_write(peft, e, n, (const char *[]){"lora_adapter_metadata", "{\"r\": 2, \"use_rslora\": true}"}, 1) ==
          ST_OK);
    expect_error("rsLoRA", param_set_load_lora(&dst, peft, 4.0), ST_ERR_UNSUPPORTED, "use_rslora", NULL);
    CHECK(sft_write(peft, e, n, (const char *[]){"lora_adapter_metadata", "[2"}, 1) == ST_OK);
    expect_error("metadata that is not JSON", param_set_load_lora(&dst, peft, 4.0), ST_ERR_FORMAT,
                 "lora_adapter_metadata", "not a JSON object");

    /* a model without adapters, and one with a trainable non-adapter, cannot write a PEFT file */
    param_set full;
    make_model(&full, 3);
    expect_error("saving LoRA of a model without adapters", param_set_save_lora(&full, file, 4.0, NULL, 0),
                 ST_ERR_INVALID, "no LoRA adapters", NULL);
    param_set_free(&full);
    param_set mixed;
    make_lora(&mixed, 2, false, 0);
    mixed.items[mixed.n - 1].trainable = true;
    expect_error("saving LoRA with a trainable non-adapter", param_set_save_lora(&mixed, file, 4.0, NULL, 0),
                 ST_ERR_INVALID, "'proj_out.weight' is not a LoRA adapter", NULL);
    mixed.items[mixed.n - 1].trainable = false;
    param_set_free(&mixed);

    param_set_free(&src);
    param_set_free(&dst);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segtrain_dload_XXXXXX");
    if (!mkdtemp(root)) return 1;
    the_pool = pool_create(POOL_DEVICE, 0);
    test_folders();
    test_broken_folders();
    test_lora();
    CHECK(pool_destroy(the_pool) == 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return tk_finish();
}
