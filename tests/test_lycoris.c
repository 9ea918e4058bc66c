/* LyCORIS against the lycoris-lora package itself (LoKr, LoHa, LoCon, full, and one of each per module): each fixture
 * (scripts/make_lycoris_fixtures.py) is a tiny model
 * of Linear layers in module classes named as diffusers' (Attention, FeedForward), wrapped by the package from a
 * lycoris_config, with one forward and backward in float64. segtrain reads the same lycoris_config, must adapt the
 * same layers with tensors of the same keys and shapes, and match the output, dx and every adapter gradient at
 * 1e-5 (locon_conv, conv_algos, lokr_conv: a model of Conv2d layers in classes named ResnetBlock2D and Downsample2D,
 * through conv_layer, whose LoCon, LoHa, full and LoKr are first checked against central differences; conv_grouped:
 * depthwise convolutions with each algorithm, Stable Cascade's); then it saves the adapters as SimpleTuner's file (lycoris_saved_<case>.safetensors in build/, which
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

/* Checks and allocates the set, and reads every parameter from the fixture by name and shape: the package's adapter
 * tensors are segtrain's, no more. */
static void read_params(param_set *s, const sft_file *f, pool *p)
{
    CHECK(param_set_check(s) == ST_OK && param_set_alloc(s, p) == ST_OK);
    int adapters = 0, trainable = 0;
    for (int i = 0; i < s->n; i++) {
        param *q = param_at(s, i);
        trainable += q->trainable;
        CHECKF(sft_find(f, q->name) && sft_read_f32(f, q->name, q->ndim, q->shape, q->w) == ST_OK,
               "the package has %s at segtrain's shape", q->name);
    }
    for (int i = 0; i < sft_count(f); i++) {
        const char *name = sft_at(f, i)->name, *dot = strrchr(name, '.');
        adapters += !strncmp(name, "lycoris_", 8) && strcmp(dot, ".alpha");
    }
    CHECKF(adapters == trainable, "%d adapter tensors in the fixture, segtrain registers %d", adapters, trainable);
}

/* The model's layers, registered under the spec; every parameter read from the fixture by name and shape. */
static void build(tiny *m, const lycoris_spec *ly, const sft_file *f, pool *p)
{
    m->s = (param_set){.lycoris = ly, .lycoris_classes = tiny_classes};
    const int64_t d = m->d, ff = m->f, in[LAYERS] = {d, d, d, ff, d}, out[LAYERS] = {d, d, ff, d, d};
    for (int i = 0; i < LAYERS; i++) m->l[i] = lin_register(&m->s, layer_names[i], in[i], out[i], true, 0, 0, false);
    read_params(&m->s, f, p);
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

static void save_and_reload(param_set *s, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "lycoris_saved_%s.safetensors", name); /* in the working directory: ctest's build/ */
    CHECK(param_set_save_lycoris(s, path, "{}", NULL, 0) == ST_OK);
    const param *q = NULL;
    for (int i = 0; i < s->n && !q; i++) q = param_at(s, i)->trainable ? param_at(s, i) : NULL;
    float *first = malloc((size_t)q->numel * sizeof(float));
    memcpy(first, q->w, (size_t)q->numel * sizeof(float));
    memset(q->w, 0, (size_t)q->numel * sizeof(float));
    CHECK(param_set_load_lycoris(s, path) == ST_OK);
    CHECKF(!memcmp(first, q->w, (size_t)q->numel * sizeof(float)), "%s: %s read back", path, q->name);
    free(first);
}

/* Every adapter gradient against the fixture's grad.<key>, then the file saved and read back. */
static void check_adapters(param_set *s, const sft_file *f, const char *name)
{
    for (int i = 0; i < s->n; i++) {
        const param *q = param_at(s, i);
        if (!q->trainable) continue;
        char g[PARAM_NAME_MAX + 8];
        snprintf(g, sizeof g, "grad.%s", q->name);
        float *want = read_tensor(f, g, q->numel);
        close_to(g, q->g, want, q->numel);
        free(want);
    }
    save_and_reload(s, name);
}

static sft_file *open_case(const char *name, lycoris_spec *ly)
{
    printf("-- %s\n", name);
    char file[600];
    snprintf(file, sizeof file, FIXTURES "%s/lycoris_config.json", name);
    CHECK(lycoris_spec_read(file, ly) == ST_OK);
    snprintf(file, sizeof file, FIXTURES "%s/fixture.safetensors", name);
    sft_file *f = NULL;
    CHECK(sft_open(file, &f) == ST_OK);
    return f;
}

static void run_case(const char *name)
{
    lycoris_spec ly;
    sft_file *f = open_case(name, &ly);
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
    check_adapters(&m.s, f, name);
    for (int i = 0; i <= LAYERS; i++) free(m.act[i]);
    free(dy), free(dx);
    param_set_free(&m.s);
    pool_destroy(p);
    sft_close(f);
}

/* The conv case: make_lycoris_fixtures.py's ConvModel, x (B, C, H, W) through blocks.0.conv1 (3 x 3 to M channels),
 * blocks.0.conv_shortcut (1 x 1 back to C), down.0.conv (3 x 3, stride 2) and proj (1 x 1), each a conv_layer. */
#define CONVS 4
static const lyco_class conv_classes[] = {{"ResnetBlock2D", "blocks"}, {"Downsample2D", "down"}, {NULL, NULL}};
static const char *const conv_names[CONVS] = {"blocks.0.conv1", "blocks.0.conv_shortcut", "down.0.conv", "proj"};

static void conv_shapes(const sft_file *f, conv_shape *cs)
{
    const int64_t B = meta_int(f, "batch"), C = meta_int(f, "channels"), M = meta_int(f, "mid");
    const int64_t H = meta_int(f, "height"), W = meta_int(f, "width");
    cs[0] = (conv_shape){B, C, H, W, M, 3, 3, 1, 1, 1, 1};
    cs[1] = (conv_shape){B, M, H, W, C, 1, 1, 1, 1, 0, 0};
    cs[2] = (conv_shape){B, C, H, W, C, 3, 3, 2, 2, 1, 1};
    cs[3] = (conv_shape){B, C, conv_out_h(&cs[2]), conv_out_w(&cs[2]), C, 1, 1, 1, 1, 0, 0};
}

static int64_t numel_in(const conv_shape *c) { return c->batch * c->in * c->h * c->w; }
static int64_t numel_out(const conv_shape *c) { return c->batch * c->out * conv_out_h(c) * conv_out_w(c); }

static void conv_forward_backward(param_set *s, pool *p, const conv_layer *l, const conv_shape *cs, float **act,
                                  const float *dy, float *dx)
{
    for (int i = 0; i < CONVS; i++) {
        act[i + 1] = calloc((size_t)numel_out(&cs[i]), sizeof(float));
        CHECK(conv_layer_forward(s, p, &l[i], act[i + 1], act[i], &cs[i]) == ST_OK);
    }
    float *g = malloc((size_t)numel_out(&cs[CONVS - 1]) * sizeof(float));
    memcpy(g, dy, (size_t)numel_out(&cs[CONVS - 1]) * sizeof(float));
    param_set_zero_grads(s);
    for (int i = CONVS - 1; i >= 0; i--) {
        float *gin = i ? calloc((size_t)numel_in(&cs[i]), sizeof(float)) : dx;
        CHECK(conv_layer_backward(s, p, &l[i], gin, g, act[i], &cs[i]) == ST_OK);
        free(g);
        g = i ? gin : NULL;
    }
}

static void run_conv_case(const char *name)
{
    lycoris_spec ly;
    sft_file *f = open_case(name, &ly);
    pool *p = pool_create(POOL_DEVICE, 0);
    conv_shape cs[CONVS];
    conv_shapes(f, cs);
    param_set s = {.lycoris = &ly, .lycoris_classes = conv_classes};
    conv_layer l[CONVS];
    for (int i = 0; i < CONVS; i++) l[i] = conv_register(&s, conv_names[i], cs[i].in, cs[i].out, cs[i].kh, false);
    read_params(&s, f, p);
    float *act[CONVS + 1] = {read_tensor(f, "x", numel_in(&cs[0]))};
    const int64_t ny = numel_out(&cs[CONVS - 1]), nx = numel_in(&cs[0]);
    float *dy = read_tensor(f, "dy", ny), *dx = calloc((size_t)nx, sizeof(float));
    conv_forward_backward(&s, p, l, cs, act, dy, dx);
    float *want = read_tensor(f, "y", ny);
    close_to("y", act[CONVS], want, ny);
    free(want);
    want = read_tensor(f, "dx", nx);
    close_to("dx", dx, want, nx);
    free(want);
    check_adapters(&s, f, name);
    for (int i = 0; i <= CONVS; i++) free(act[i]);
    free(dy), free(dx);
    param_set_free(&s);
    pool_destroy(p);
    sft_close(f);
}

/* The grouped case: make_lycoris_fixtures.py's GroupedModel, x (B, C, H, W) through four depthwise 3 x 3
 * convolutions (res.0.depthwise, blocks.0.depthwise, down.0.depthwise, proj: LoKr, LoHa, full, LoCon), each a
 * conv_register_depthwise layer, channels last as Stable Cascade's ResBlock runs them. */
#define GROUPED 4
static const lyco_class grouped_classes[] = {
    {"SDCascadeResBlock", "res"}, {"ResnetBlock2D", "blocks"}, {"Downsample2D", "down"}, {NULL, NULL}};
static const char *const grouped_names[GROUPED] = {"res.0.depthwise", "blocks.0.depthwise", "down.0.depthwise",
                                                   "proj"};

/* a fixture's (B, C, H W) tensor, channels last: (B, H W, C) */
static float *channels_last(const sft_file *f, const char *name, int64_t B, int64_t C, int64_t T)
{
    float *x = read_tensor(f, name, B * C * T), *t = malloc((size_t)(B * C * T) * sizeof(float));
    transpose_batched(t, x, B, C, T);
    free(x);
    return t;
}

static void run_grouped_case(const char *name)
{
    lycoris_spec ly;
    sft_file *f = open_case(name, &ly);
    pool *p = pool_create(POOL_DEVICE, 0);
    const int64_t B = meta_int(f, "batch"), C = meta_int(f, "channels"), H = meta_int(f, "height");
    const int64_t W = meta_int(f, "width"), T = H * W, n = B * C * T;
    const conv_shape c = {.batch = B, .in = C, .h = H, .w = W, .out = C};
    param_set s = {.lycoris = &ly, .lycoris_classes = grouped_classes};
    conv_layer l[GROUPED];
    for (int i = 0; i < GROUPED; i++) l[i] = conv_register_depthwise(&s, grouped_names[i], C, false);
    read_params(&s, f, p);
    float *act[GROUPED + 1] = {channels_last(f, "x", B, C, T)};
    for (int i = 0; i < GROUPED; i++) {
        act[i + 1] = calloc((size_t)n, sizeof(float));
        CHECK(conv_layer_forward(&s, p, &l[i], act[i + 1], act[i], &c) == ST_OK);
    }
    float *g = channels_last(f, "dy", B, C, T), *dx = NULL, *t = malloc((size_t)n * sizeof(float));
    param_set_zero_grads(&s);
    for (int i = GROUPED - 1; i >= 0; i--) {
        dx = calloc((size_t)n, sizeof(float));
        CHECK(conv_layer_backward(&s, p, &l[i], dx, g, act[i], &c) == ST_OK);
        free(g);
        g = dx;
    }
    const char *what[2] = {"y", "dx"};
    const float *got[2] = {act[GROUPED], dx};
    for (int k = 0; k < 2; k++) { /* back to channels first */
        float *want = read_tensor(f, what[k], n);
        transpose_batched(t, got[k], B, T, C);
        close_to(what[k], t, want, n);
        free(want);
    }
    check_adapters(&s, f, name);
    for (int i = 0; i <= GROUPED; i++) free(act[i]);
    free(dx), free(t);
    param_set_free(&s);
    pool_destroy(p);
    sft_close(f);
}

/* ---- a conv_layer's LoCon against central differences of a double-precision reference ---- */

/* y (B, out, oh, ow) += scale times the convolution of x by w (c's shape) */
static void conv_ref(const conv_shape *c, const double *x, const double *w, double scale, double *y)
{
    const int64_t oh = conv_out_h(c), ow = conv_out_w(c);
    for (int64_t n = 0; n < c->batch; n++)
        for (int64_t o = 0; o < c->out; o++)
            for (int64_t q = 0; q < oh * ow; q++)
                for (int64_t ci = 0; ci < c->in; ci++)
                    for (int64_t i = 0; i < c->kh * c->kw; i++) {
                        const int64_t yy = q / ow * c->sh - c->ph + i / c->kw, xx = q % ow * c->sw - c->pw + i % c->kw;
                        if (yy < 0 || yy >= c->h || xx < 0 || xx >= c->w) continue;
                        y[(n * c->out + o) * oh * ow + q] += scale * w[(o * c->in + ci) * c->kh * c->kw + i] *
                                                             x[((n * c->in + ci) * c->h + yy) * c->w + xx];
                    }
}

typedef struct fd_ctx {
    const param_set *s;
    const conv_layer *l;
    conv_shape c;
    double *v[16];                /* every parameter, in the set's order */
    double *x, *dy, *w, *b, *t, *y; /* x, dy; workspace: W + dW, b + diff_b, LoCon's r channels, y */
} fd_ctx;

/* y (m, n) = a (m, r) b (r, n), in double */
static void fd_product(double *y, const double *a, const double *b, int64_t m, int64_t n, int64_t r)
{
    for (int64_t i = 0; i < m * n; i++) {
        y[i] = 0;
        for (int64_t j = 0; j < r; j++) y[i] += a[i / n * r + j] * b[j * n + i % n];
    }
}

/* w (a b, c d) += scale kron(w1, w2), each half itself or its factors' product */
static void fd_kron(const fd_ctx *f, const lyco_adapter *k, double *w)
{
    double *w1 = malloc((size_t)(k->a * k->c) * sizeof(double)), *w2 = malloc((size_t)(k->b * k->d) * sizeof(double));
    if (k->w1 >= 0) memcpy(w1, f->v[k->w1], (size_t)(k->a * k->c) * sizeof(double));
    else fd_product(w1, f->v[k->w1_a], f->v[k->w1_b], k->a, k->c, k->rank);
    if (k->w2 >= 0) memcpy(w2, f->v[k->w2], (size_t)(k->b * k->d) * sizeof(double));
    else fd_product(w2, f->v[k->w2_a], f->v[k->w2_b], k->b, k->d, k->rank);
    for (int64_t r = 0; r < k->a * k->b; r++)
        for (int64_t col = 0; col < k->c * k->d; col++)
            w[r * k->c * k->d + col] += (double)k->scale * w1[r / k->b * k->c + col / k->d] *
                                        w2[r % k->b * k->d + col % k->d];
    free(w1), free(w2);
}

/* W + dW into f->w and the bias (full's b + diff_b) into f->b, in double */
static void fd_weight(fd_ctx *f)
{
    const conv_layer *l = f->l;
    const lyco_adapter *k = &l->lyco;
    const int64_t O = f->c.out, K = f->c.in * f->c.kh * f->c.kw, r = k->rank;
    for (int64_t i = 0; i < O * K; i++) f->w[i] = f->v[l->w][i] + (k->algo == LYCO_FULL ? f->v[k->diff][i] : 0);
    for (int64_t o = 0; o < O; o++) f->b[o] = f->v[l->b][o] + (k->algo == LYCO_FULL ? f->v[k->diff_b][o] : 0);
    if (k->algo == LYCO_LOKR) fd_kron(f, k, f->w);
    for (int64_t o = 0; k->algo == LYCO_LOHA && o < O; o++) /* scale (w1_a w1_b) * (w2_a w2_b) */
        for (int64_t i = 0; i < K; i++) {
            double p1 = 0, p2 = 0;
            for (int64_t j = 0; j < r; j++) {
                p1 += f->v[k->w1_a][o * r + j] * f->v[k->w1_b][j * K + i];
                p2 += f->v[k->w2_a][o * r + j] * f->v[k->w2_b][j * K + i];
            }
            f->w[o * K + i] += (double)k->scale * p1 * p2;
        }
}

/* sum(dy * (conv(x, W + dW) + b (+ diff_b) + LoCon's scale up(down(x)))) */
static double fd_loss(void *ctx)
{
    fd_ctx *f = ctx;
    const conv_layer *l = f->l;
    const int64_t P = conv_out_h(&f->c) * conv_out_w(&f->c), ny = f->c.batch * f->c.out * P;
    fd_weight(f);
    for (int64_t i = 0; i < ny; i++) f->y[i] = f->b[i / P % f->c.out];
    conv_ref(&f->c, f->x, f->w, 1.0, f->y);
    if (l->down >= 0) {
        conv_shape d = f->c, u = {f->c.batch, l->rank, conv_out_h(&f->c), conv_out_w(&f->c), f->c.out, 1, 1, 1, 1, 0, 0};
        d.out = l->rank;
        memset(f->t, 0, (size_t)(f->c.batch * l->rank * P) * sizeof(double));
        conv_ref(&d, f->x, f->v[l->down], 1.0, f->t);
        conv_ref(&u, f->t, f->v[l->up], l->scale, f->y);
    }
    double loss = 0;
    for (int64_t i = 0; i < ny; i++) loss += f->dy[i] * f->y[i];
    return loss;
}

static double *to_double(const float *x, int64_t n)
{
    double *d = malloc((size_t)n * sizeof(double));
    tk_to_double(d, x, n);
    return d;
}

/* A 3 x 3 stride-2 padded convolution on a non-square map with its adapter (algo): forward, and dx and every
 * adapter gradient, added to what the buffers held, against the reference's central differences. */
static void test_conv_fd(lyco_algo algo, const char *what)
{
    printf("-- conv_layer's %s by central differences\n", what);
    const lyco_settings ly = {.algo = algo, .dim = 2, .alpha = 1, .conv_dim = 3, .conv_alpha = 4.5};
    const lycoris_spec spec = {.on = true, .root = ly, .n_names = 1, .names = {"c"}};
    param_set s = {.lycoris = &spec};
    const conv_shape c = {2, 3, 5, 6, 4, 3, 3, 2, 2, 1, 1};
    const conv_layer l = conv_register(&s, "c", c.in, c.out, 3, false);
    pool *p = pool_create(POOL_DEVICE, 0);
    CHECK(s.n <= 16 && param_set_check(&s) == ST_OK && param_set_alloc(&s, p) == ST_OK);
    for (int i = 0; i < s.n; i++) tk_fill(param_at(&s, i)->w, param_at(&s, i)->numel, 40 + (uint64_t)i, -1, 1);
    const int64_t nx = c.batch * c.in * c.h * c.w, ny = c.batch * c.out * conv_out_h(&c) * conv_out_w(&c);
    float *x = malloc((size_t)nx * sizeof(float)), *dy = malloc((size_t)ny * sizeof(float));
    float *y = malloc((size_t)ny * sizeof(float)), *dx = malloc((size_t)nx * sizeof(float));
    tk_fill(x, nx, 50, -1, 1), tk_fill(dy, ny, 51, -1, 1), tk_fill(dx, nx, 52, -1, 1);
    param_set_zero_grads(&s);
    double *pre = to_double(dx, nx);
    const size_t live = pool_live(p);
    CHECK(conv_layer_forward(&s, p, &l, y, x, &c) == ST_OK);
    CHECK(conv_layer_backward(&s, p, &l, dx, dy, x, &c) == ST_OK);
    CHECK(pool_live(p) == live); /* its workspace given back */
    fd_ctx f = {.s = &s, .l = &l, .c = c, .x = to_double(x, nx), .dy = to_double(dy, ny),
                .w = calloc(108, sizeof(double)), .b = calloc(4, sizeof(double)),
                .t = calloc((size_t)(c.batch * 3 * 9), sizeof(double)), .y = malloc((size_t)ny * sizeof(double))};
    for (int i = 0; i < s.n; i++) f.v[i] = to_double(param_at(&s, i)->w, param_at(&s, i)->numel);
    fd_loss(&f);
    char name[PARAM_NAME_MAX + 32];
    snprintf(name, sizeof name, "conv %s forward", what);
    tk_expect_close(name, y, f.y, ny, 1e-5);
    double *g = malloc((size_t)nx * sizeof(double));
    tk_numeric_grad(fd_loss, &f, f.x, nx, 1e-6, g);
    for (int64_t i = 0; i < nx; i++) g[i] += pre[i]; /* backward adds to dx */
    snprintf(name, sizeof name, "conv %s dx", what);
    tk_expect_close(name, dx, g, nx, 1e-4);
    for (int i = 0; i < s.n; i++) {
        const param *q = param_at(&s, i);
        if (!q->trainable) continue;
        tk_numeric_grad(fd_loss, &f, f.v[i], q->numel, 1e-6, g);
        snprintf(name, sizeof name, "conv %s d%s", what, q->name);
        tk_expect_close(name, q->g, g, q->numel, 1e-4);
    }
    free(x), free(dy), free(y), free(dx), free(pre), free(g);
    free(f.x), free(f.dy), free(f.w), free(f.b), free(f.t), free(f.y);
    for (int i = 0; i < s.n; i++) free(f.v[i]);
    param_set_free(&s);
    pool_destroy(p);
}

int main(void)
{
    test_conv_fd(LYCO_LOCON, "LoCon");
    test_conv_fd(LYCO_LOHA, "LoHa");
    test_conv_fd(LYCO_FULL, "full");
    test_conv_fd(LYCO_LOKR, "LoKr");
    run_case("lokr_full");
    run_case("lokr_split");
    run_case("lokr_name");
    run_case("loha");
    run_case("locon");
    run_case("full");
    run_case("mixed");
    run_conv_case("locon_conv");
    run_conv_case("conv_algos");
    run_conv_case("lokr_conv");
    run_grouped_case("conv_grouped");
    return tk_finish();
}
