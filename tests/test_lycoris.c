/* LyCORIS against the lycoris-lora package itself (LoKr, LoHa, LoCon, full, and one of each per module): each fixture
 * (scripts/make_lycoris_fixtures.py) is a tiny model
 * of Linear layers in module classes named as diffusers' (Attention, FeedForward), wrapped by the package from a
 * lycoris_config, with one forward and backward in float64. segtrain reads the same lycoris_config, must adapt the
 * same layers with tensors of the same keys and shapes, and match the output, dx and every adapter gradient at
 * 1e-5; then it saves the adapters as SimpleTuner's file (lycoris_saved_<case>.safetensors in build/, which
 * `make_lycoris_fixtures.py --check` loads with the package) and reads them back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/lin.h"
#include "segtrain/model.h"
#include "segtrain/safetensors.h"
#include "testkit.h"

#define FIXTURES SEGTRAIN_SOURCE_DIR "/tests/fixtures/lycoris/"
#define TOL 1e-5
#define LAYERS 5

static const lyco_class tiny_classes[] = {{"Attention", "attn1"}, {"FeedForward", "ff"}, {NULL, NULL}};
static const char *const layer_names[LAYERS] = {"blocks.0.attn1.to_q", "blocks.0.attn1.to_out.0", "blocks.0.ff.net.0",
                                                "blocks.0.ff.net.2", "blocks.0.proj"};

typedef struct tiny {
    param_set s;
    lin_layer l[LAYERS];
    int64_t n, d, f;
    float *act[LAYERS + 1]; /* x, then each layer's output */
} tiny;

static int64_t meta_int(const sft_file *f, const char *key)
{
    const char *v = sft_metadata(f, key);
    CHECKF(v != NULL, "fixture metadata %s", key);
    return v ? atoll(v) : 0;
}

static float *read_tensor(const sft_file *f, const char *name, int64_t n)
{
    const sft_tensor *t = sft_find(f, name);
    float *x = calloc((size_t)n, sizeof(float));
    int64_t numel = 1;
    for (int i = 0; t && i < t->ndim; i++) numel *= t->shape[i];
    CHECKF(t && numel == n && sft_read_f32(f, name, t->ndim, t->shape, x) == ST_OK, "fixture tensor %s", name);
    return x;
}

/* The model's layers, registered under the spec; every parameter read from the fixture by name and shape. */
static void build(tiny *m, const lycoris_spec *ly, const sft_file *f, pool *p)
{
    m->s = (param_set){.lycoris = ly, .lycoris_classes = tiny_classes};
    const int64_t d = m->d, ff = m->f, in[LAYERS] = {d, d, d, ff, d}, out[LAYERS] = {d, d, ff, d, d};
    for (int i = 0; i < LAYERS; i++) m->l[i] = lin_register(&m->s, layer_names[i], in[i], out[i], true, 0, 0, false);
    CHECK(param_set_check(&m->s) == ST_OK && param_set_alloc(&m->s, p) == ST_OK);
    for (int i = 0; i < m->s.n; i++) {
        param *q = param_at(&m->s, i);
        CHECKF(sft_find(f, q->name) && sft_read_f32(f, q->name, q->ndim, q->shape, q->w) == ST_OK,
               "the package has %s at segtrain's shape", q->name);
    }
    int adapters = 0, trainable = 0; /* the package's adapter tensors are segtrain's, no more */
    for (int i = 0; i < sft_count(f); i++) {
        const char *name = sft_at(f, i)->name, *dot = strrchr(name, '.');
        adapters += !strncmp(name, "lycoris_", 8) && strcmp(dot, ".alpha");
    }
    for (int i = 0; i < m->s.n; i++) trainable += param_at(&m->s, i)->trainable;
    CHECKF(adapters == trainable, "%d adapter tensors in the fixture, segtrain registers %d", adapters, trainable);
}

static void forward_backward(tiny *m, pool *p, const float *dy, float *dx)
{
    const int64_t width[LAYERS + 1] = {m->d, m->d, m->d, m->f, m->d, m->d};
    for (int i = 0; i < LAYERS; i++) {
        m->act[i + 1] = calloc((size_t)(m->n * width[i + 1]), sizeof(float));
        CHECK(lin_forward(&m->s, p, &m->l[i], m->act[i + 1], m->act[i], m->n) == ST_OK);
    }
    float *g = malloc((size_t)(m->n * m->d) * sizeof(float));
    memcpy(g, dy, (size_t)(m->n * m->d) * sizeof(float));
    param_set_zero_grads(&m->s);
    for (int i = LAYERS - 1; i >= 0; i--) {
        float *gin = i ? calloc((size_t)(m->n * width[i]), sizeof(float)) : dx;
        CHECK(lin_backward(&m->s, p, &m->l[i], gin, g, m->act[i], m->n) == ST_OK);
        free(g);
        g = i ? gin : NULL;
    }
}

static bool close_to(const char *what, const float *got, const float *want, int64_t n)
{
    double *w = malloc((size_t)n * sizeof(double)), err = 0;
    tk_to_double(w, want, n);
    const bool ok = tk_close(got, w, n, TOL, &err);
    CHECKF(ok, "%s: relative error %.3g over %g", what, err, TOL);
    free(w);
    return ok;
}

static void save_and_reload(tiny *m, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "lycoris_saved_%s.safetensors", name); /* in the working directory: ctest's build/ */
    CHECK(param_set_save_lycoris(&m->s, path, "{}", NULL, 0) == ST_OK);
    float *first = malloc((size_t)param_at(&m->s, 0)->numel * sizeof(float));
    const param *q = NULL;
    for (int i = 0; i < m->s.n && !q; i++) q = param_at(&m->s, i)->trainable ? param_at(&m->s, i) : NULL;
    memcpy(first, q->w, (size_t)q->numel * sizeof(float));
    memset(q->w, 0, (size_t)q->numel * sizeof(float));
    CHECK(param_set_load_lycoris(&m->s, path) == ST_OK);
    CHECKF(!memcmp(first, q->w, (size_t)q->numel * sizeof(float)), "%s: %s read back", path, q->name);
    free(first);
}

static void run_case(const char *name)
{
    printf("-- %s\n", name);
    char dir[512], file[600];
    snprintf(dir, sizeof dir, FIXTURES "%s", name);
    snprintf(file, sizeof file, "%s/lycoris_config.json", dir);
    lycoris_spec ly;
    CHECK(lycoris_spec_read(file, &ly) == ST_OK);
    snprintf(file, sizeof file, "%s/fixture.safetensors", dir);
    sft_file *f = NULL;
    CHECK(sft_open(file, &f) == ST_OK);
    pool *p = pool_create(POOL_DEVICE, 0);
    tiny m = {.n = meta_int(f, "batch") * meta_int(f, "tokens"), .d = meta_int(f, "width"), .f = meta_int(f, "ffn")};
    build(&m, &ly, f, p);
    m.act[0] = read_tensor(f, "x", m.n * m.d);
    float *dy = read_tensor(f, "dy", m.n * m.d), *dx = calloc((size_t)(m.n * m.d), sizeof(float));
    forward_backward(&m, p, dy, dx);
    float *want = read_tensor(f, "y", m.n * m.d);
    close_to("y", m.act[LAYERS], want, m.n * m.d);
    free(want);
    want = read_tensor(f, "dx", m.n * m.d);
    close_to("dx", dx, want, m.n * m.d);
    free(want);
    for (int i = 0; i < m.s.n; i++) {
        const param *q = param_at(&m.s, i);
        if (!q->trainable) continue;
        char g[PARAM_NAME_MAX + 8];
        snprintf(g, sizeof g, "grad.%s", q->name);
        want = read_tensor(f, g, q->numel);
        close_to(g, q->g, want, q->numel);
        free(want);
    }
    save_and_reload(&m, name);
    for (int i = 0; i <= LAYERS; i++) free(m.act[i]);
    free(dy), free(dx);
    param_set_free(&m.s);
    pool_destroy(p);
    sft_close(f);
}

int main(void)
{
    run_case("lokr_full");
    run_case("lokr_split");
    run_case("lokr_name");
    run_case("loha");
    run_case("locon");
    run_case("full");
    run_case("mixed");
    return tk_finish();
}
