/* HeartMuLa's published checkpoint names (src/models/joint/heartmula.c, hm_checkpoint_name): its Llamas' tensors in
 * torchtune's names (attn.q_proj, attn.output_proj, mlp.w1 .. w3, sa_norm.scale, mlp_norm.scale, norm.scale), as
 * SimpleTuner's HeartMuLaModel.from_pretrained maps them (_map_llama_key), in a transformers folder
 * (model.safetensors, or model.safetensors.index.json and its shards). The fixture's weights, renamed so here apart
 * from heartmula.c, load into heartmula-tiny bit for bit as the fixture's own names do; a tensor held under both
 * names, and one no parameter takes, are refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "segtrain/model.h"
#include "segtrain/params.h"
#include "segtrain/safetensors.h"
#include "testkit.h"

#define FIXTURE SEGTRAIN_SOURCE_DIR "/tests/fixtures/heartmula"

static char root[256];

/* torchtune's name of a class name (the inverse of _map_llama_key, written from its table) */
static void torchtune_name(const char *name, char *out, size_t n)
{
    static const char *const map[][2] = {
        {".self_attn.q_proj.", ".attn.q_proj."},   {".self_attn.k_proj.", ".attn.k_proj."},
        {".self_attn.v_proj.", ".attn.v_proj."},   {".self_attn.o_proj.", ".attn.output_proj."},
        {".mlp.gate_proj.", ".mlp.w1."},           {".mlp.down_proj.", ".mlp.w2."},
        {".mlp.up_proj.", ".mlp.w3."},             {".input_layernorm.weight", ".sa_norm.scale"},
        {".post_attention_layernorm.weight", ".mlp_norm.scale"}, {"backbone.norm.weight", "backbone.norm.scale"},
        {"decoder.norm.weight", "decoder.norm.scale"}};
    snprintf(out, n, "%s", name);
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        const char *at = strstr(name, map[i][0]);
        if (at) snprintf(out, n, "%.*s%s%s", (int)(at - name), name, map[i][1], at + strlen(map[i][0]));
    }
}

/* The fixture's tensors under torchtune's names as dir/file (and one more under extra_name when not NULL); *renamed:
 * how many names changed */
static int write_renamed(const char *dir, const char *file, const char *extra_name, int *renamed)
{
    sft_file *f = NULL;
    CHECKF(sft_open(FIXTURE "/diffusion_pytorch_model.safetensors", &f) == ST_OK, "%s", st_error());
    if (!f) return 0;
    const int n = sft_count(f);
    sft_entry *e = calloc((size_t)n + 1, sizeof *e);
    char (*names)[128] = calloc((size_t)n, sizeof *names);
    float **data = calloc((size_t)n, sizeof *data);
    *renamed = 0;
    for (int i = 0; i < n; i++) {
        const sft_tensor *t = sft_at(f, i);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        data[i] = malloc((size_t)numel * sizeof(float));
        CHECK(sft_read_f32(f, t->name, t->ndim, t->shape, data[i]) == ST_OK);
        torchtune_name(t->name, names[i], sizeof names[i]);
        *renamed += strcmp(names[i], t->name) != 0;
        e[i] = (sft_entry){names[i], SFT_F32, t->ndim, {0}, data[i]};
        memcpy(e[i].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    }
    int count = n, like = 0; /* the extra tensor: a copy of the one its torchtune name names, or of the first */
    char extra_tt[128] = "";
    if (extra_name) torchtune_name(extra_name, extra_tt, sizeof extra_tt);
    for (int i = 0; extra_name && i < n; i++)
        if (!strcmp(names[i], extra_tt)) like = i;
    if (extra_name) e[count] = e[like], e[count++].name = extra_name;
    CHECKF(sft_write(tk_path(dir, file), e, count, NULL, 0) == ST_OK, "%s", st_error());
    for (int i = 0; i < n; i++) free(data[i]);
    free(data), free(names), free(e);
    sft_close(f);
    return n;
}

static model *tiny(pool **p)
{
    model_config mc;
    CHECK(model_preset("heartmula-tiny", &mc) == ST_OK);
    *p = pool_create(POOL_DEVICE, 0);
    model *m = NULL;
    CHECKF(model_create(&mc, *p, &m) == ST_OK, "%s", st_error());
    return m;
}

static void test_torchtune_names(void)
{
    printf("-- the fixture's weights under torchtune's names load as under the class's\n");
    char dir[300], sharded[300];
    snprintf(dir, sizeof dir, "%s/HeartMuLa-tiny", root);
    snprintf(sharded, sizeof sharded, "%s/sharded", root);
    CHECK(mkdir(dir, 0755) == 0 && mkdir(sharded, 0755) == 0);
    int renamed = 0;
    const int n = write_renamed(dir, "model.safetensors", NULL, &renamed);
    CHECKF(renamed == 38, "%d of %d tensors renamed (9 in each of 4 layers, the two norms)", renamed, n);
    /* one shard and its index, as transformers' save_pretrained writes a larger one */
    write_renamed(sharded, "model-00001-of-00001.safetensors", NULL, &renamed);
    sft_file *f = NULL;
    CHECK(sft_open(tk_path(sharded, "model-00001-of-00001.safetensors"), &f) == ST_OK);
    char index[8192] = "{\"metadata\": {}, \"weight_map\": {";
    for (int i = 0; f && i < sft_count(f); i++)
        snprintf(index + strlen(index), sizeof index - strlen(index), "%s\"%s\": \"model-00001-of-00001.safetensors\"",
                 i ? ", " : "", sft_at(f, i)->name);
    strcat(index, "}}");
    sft_close(f);
    tk_write_file(sharded, "model.safetensors.index.json", index);
    pool *pa, *pb, *pc;
    model *a = tiny(&pa), *b = tiny(&pb), *c = tiny(&pc);
    if (!a || !b || !c) return;
    CHECKF(param_set_load(model_params(a), FIXTURE, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    CHECKF(param_set_load(model_params(b), dir, PARAMS_ALL, NULL) == ST_OK, "torchtune names: %s", st_error());
    CHECKF(param_set_load(model_params(c), sharded, PARAMS_ALL, NULL) == ST_OK, "sharded: %s", st_error());
    const param_set *sa = model_params(a), *sb = model_params(b), *sc = model_params(c);
    CHECK(sa->weight_count == sb->weight_count && sa->weight_count == sc->weight_count);
    tk_expect_bitwise("weights from model.safetensors", sb->weights, sa->weights, sa->weight_count);
    tk_expect_bitwise("weights from model.safetensors.index.json", sc->weights, sa->weights, sa->weight_count);
    model_destroy(a), model_destroy(b), model_destroy(c);
    pool_destroy(pa), pool_destroy(pb), pool_destroy(pc);
}

static void refused(const char *what, const char *file, const char *extra, const char *needle)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/%s", root, what);
    CHECK(mkdir(dir, 0755) == 0);
    int renamed;
    write_renamed(dir, file, extra, &renamed);
    pool *p;
    model *m = tiny(&p);
    const st_status st = m ? param_set_load(model_params(m), dir, PARAMS_ALL, NULL) : ST_OK;
    CHECKF(st && strstr(st_error(), needle), "%s: got %d: %s", what, (int)st, st ? st_error() : "(loaded)");
    printf("     %s: %s\n", what, st_error());
    model_destroy(m);
    pool_destroy(p);
}

static void test_refusals(void)
{
    printf("-- a tensor under both names, or under a name no parameter takes, is refused by name\n");
    refused("unknown", "model.safetensors", "audio_embeddings.weight.copy",
            "unexpected tensor 'audio_embeddings.weight.copy'");
    refused("twice", "model.safetensors", "backbone.layers.0.self_attn.q_proj.weight",
            "'backbone.layers.0.attn.q_proj.weight' and 'backbone.layers.0.self_attn.q_proj.weight' both hold");
    /* a flow family's folder is looked up in diffusers' layout only */
    pool *p;
    model_config mc;
    CHECK(model_preset("flux-tiny", &mc) == ST_OK);
    p = pool_create(POOL_DEVICE, 0);
    model *m = NULL;
    CHECK(model_create(&mc, p, &m) == ST_OK);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/HeartMuLa-tiny", root);
    const st_status st = m ? param_set_load(model_params(m), dir, PARAMS_ALL, NULL) : ST_OK;
    CHECKF(st && strstr(st_error(), "a folder without diffusers weights"), "flux: %s", st_error());
    model_destroy(m);
    pool_destroy(p);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segtrain-test-heartmula-ckpt-XXXXXX");
    if (!mkdtemp(root)) return 1;
    test_torchtune_names();
    test_refusals();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
