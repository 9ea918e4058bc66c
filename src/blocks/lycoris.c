/* LyCORIS's adapters on a linear layer (lycoris.h), as lycoris-lora 4.1.3 builds them: LoKr (LokrModule,
 * modules/lokr.py, for the shapes, scale and initialisation; its bypass product, functional/lokr.py _kron_bypass, for
 * the arithmetic), LoHa (LohaModule and functional/loha.py: the rebuilt dW, HadaWeight's gradients), LoCon's keys
 * and scale (LoConModule: LoRA's product, which lin.c computes) and full (FullModule: the weight's difference). */
#include "segtrain/lycoris.h"

#include <fnmatch.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "segtrain/safetensors.h"

#include "segtrain/ops.h"

const lyco_class lyco_basic_block_classes[] = {{"Attention", "attn1 attn2"}, {"FeedForward", "ff"}, {NULL, NULL}};
const lyco_class lyco_sana_classes[] = {{"Attention", "attn1 attn2"}, {"FeedForward", ""}, {NULL, NULL}};

void lyco_factorization(int64_t dim, int64_t factor, int64_t *m_out, int64_t *n_out)
{
    int64_t m = 1, n = dim;
    if (factor > 0 && dim % factor == 0) {
        m = factor, n = dim / factor;
    } else {
        if (factor < 0) factor = dim;
        const int64_t length = m + n; /* the package never updates it */
        while (m < n) {
            int64_t new_m = m + 1;
            while (dim % new_m) new_m++;
            const int64_t new_n = dim / new_m;
            if (new_m + new_n > length || new_m > factor) break;
            m = new_m, n = new_n;
        }
    }
    *m_out = m < n ? m : n;
    *n_out = m < n ? n : m;
}

bool lyco_module_name(char *out, size_t n, const char *path)
{
    if (snprintf(out, n, "lycoris_%s", path) >= (int)n) return false;
    for (char *c = out; *c; c++)
        if (*c == '.') *c = '_';
    return true;
}

/* Whether a module attribute name of `len` characters is one of attrs' (space-separated). */
static bool attr_in(const char *attrs, const char *name, size_t len)
{
    for (const char *a = attrs; *a;) {
        const size_t k = strcspn(a, " ");
        if (k == len && !strncmp(a, name, len)) return true;
        a += k + (a[k] == ' ');
    }
    return false;
}

/* The spec's entry for the family's class of an attribute name, -1 when not targeted. */
static int targeted_class(const param_set *s, const char *name, size_t len)
{
    for (const lyco_class *c = s->lycoris_classes; c && c->cls; c++) {
        if (!attr_in(c->attrs, name, len)) continue;
        for (int i = 0; i < s->lycoris->n_classes; i++)
            if (!strcmp(s->lycoris->classes[i].cls, c->cls)) return i;
    }
    return -1;
}

static bool name_matches(const lycoris_spec *ly, const char *pattern, const char *path)
{
    if (ly->use_fnmatch) return fnmatch(pattern, path, 0) == 0;
    char anchored[LYCO_PATTERN_MAX + 8];
    regex_t re;
    snprintf(anchored, sizeof anchored, "^(%s)", pattern);
    if (regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB)) return false; /* the reader compiled each one */
    const bool hit = regexec(&re, path, 0, NULL, 0) == 0;
    regfree(&re);
    return hit;
}

const lyco_settings *lycoris_settings_for(const param_set *s, const char *name)
{
    const lycoris_spec *ly = s->lycoris;
    int found = -1;
    for (const char *p = name; *p;) { /* every enclosing module: each path component but the layer's own */
        const size_t len = strcspn(p, ".");
        if (!p[len]) break;
        const int i = targeted_class(s, p, len);
        if (i >= 0 && (found < 0 || ly->classes[i].mapped)) found = i;
        p += len + 1;
    }
    if (found >= 0) return &ly->classes[found].s;
    for (int i = 0; i < ly->n_names; i++)
        if (name_matches(ly, ly->names[i], name)) return &ly->root;
    return NULL;
}

bool lycoris_adapts_conv(const param_set *s, const char *name, int ndim)
{
    const size_t len = strlen(name);
    if (!s->lycoris || ndim < 3 || ndim > 5 || len < 8 || strcmp(name + len - 7, ".weight")) return false;
    char module[PARAM_NAME_MAX];
    snprintf(module, sizeof module, "%.*s", (int)(len - 7), name);
    return lycoris_settings_for(s, module) != NULL;
}

lyco_init lyco_init_of(const char *name, float *std)
{
    static const struct {
        const char *key;
        lyco_init init;
        float std;
    } keys[] = {{".lokr_w1", LYCO_INIT_KAIMING, 0},     {".lokr_w1_a", LYCO_INIT_KAIMING, 0},
                {".lokr_w1_b", LYCO_INIT_KAIMING, 0},   {".lokr_w2_a", LYCO_INIT_KAIMING, 0},
                {".lokr_w2", LYCO_INIT_ZERO, 0},        {".lokr_w2_b", LYCO_INIT_ZERO, 0},
                {".hada_w1_a", LYCO_INIT_NORMAL, 0.1f}, {".hada_w1_b", LYCO_INIT_NORMAL, 1},
                {".hada_w2_b", LYCO_INIT_NORMAL, 1},    {".hada_w2_a", LYCO_INIT_ZERO, 0},
                {".lora_down.weight", LYCO_INIT_KAIMING, 0}, {".lora_up.weight", LYCO_INIT_ZERO, 0},
                {".diff", LYCO_INIT_ZERO, 0},           {".diff_b", LYCO_INIT_ZERO, 0}};
    const char *dot = strchr(name, '.'); /* the module's name has no dots: the key follows the first */
    if (!dot || strncmp(name, "lycoris_", 8)) return LYCO_INIT_NONE;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strcmp(dot, keys[i].key)) {
            if (std) *std = keys[i].std;
            return keys[i].init;
        }
    return LYCO_INIT_NONE;
}

/* "<module>.<key>" of ndim dimensions */
static int add_tensor(param_set *s, const char *module, const char *key, int ndim, const int64_t *shape)
{
    char n[PARAM_NAME_MAX];
    snprintf(n, sizeof n, "%s.%s", module, key);
    return param_add(s, n, ndim, shape, true);
}

/* "<module>.<key>", a (rows, cols) matrix, or a vector of rows when cols is 0 */
static int add_weight(param_set *s, const char *module, const char *key, int64_t rows, int64_t cols)
{
    return add_tensor(s, module, key, cols ? 2 : 1, (int64_t[]){rows, cols});
}

/* alpha, or the dimension where it is 0 (the package: alpha = lora_dim if alpha is None or 0) */
static double alpha_of(const lyco_settings *ly) { return ly->alpha == 0 ? (double)ly->dim : ly->alpha; }

/* kernel 0: a linear layer's; k: a k x k convolution's (in, out channels), whose kernel rides in w2 (LokrModule on a
 * conv: (b, d, k, k), or w2_b (r, d k k)), so that dW is the flattened weight's (out, in k k), k->d being d k k */
static void lokr_register(param_set *s, const char *module, int64_t in, int64_t out, int64_t kernel,
                          const lyco_settings *ly, lyco_adapter *k)
{
    const int64_t kk = kernel ? kernel * kernel : 1;
    lyco_factorization(in, ly->factor, &k->c, &k->d);
    lyco_factorization(out, ly->factor, &k->a, &k->b);
    if (ly->unbalanced) {
        const int64_t t = k->a;
        k->a = k->b, k->b = t;
    }
    /* lora_dim < max(...) / 2 in the package's float arithmetic */
    const bool split_w1 = ly->decompose_both && 2 * ly->dim < (k->a > k->c ? k->a : k->c) && !ly->full_matrix;
    const bool split_w2 = 2 * ly->dim < (k->b > k->d ? k->b : k->d) && !ly->full_matrix;
    if (split_w1) {
        k->w1_a = add_weight(s, module, "lokr_w1_a", k->a, ly->dim);
        k->w1_b = add_weight(s, module, "lokr_w1_b", ly->dim, k->c);
    } else {
        k->w1 = add_weight(s, module, "lokr_w1", k->a, k->c);
    }
    if (split_w2) {
        k->w2_a = add_weight(s, module, "lokr_w2_a", k->b, ly->dim);
        k->w2_b = add_weight(s, module, "lokr_w2_b", ly->dim, k->d * kk);
    } else if (kernel) {
        k->w2 = add_tensor(s, module, "lokr_w2", 4, (int64_t[]){k->b, k->d, kernel, kernel});
    } else {
        k->w2 = add_weight(s, module, "lokr_w2", k->b, k->d);
    }
    k->d *= kk;
    double alpha = alpha_of(ly);
    if (!split_w1 && !split_w2) alpha = (double)ly->dim; /* both halves full: scale 1 */
    k->alpha = (float)alpha;
    k->scale = (float)(alpha / (double)ly->dim);
    const int first = split_w1 ? k->w1_a : k->w1;
    if (first >= 0) s->items[first].lyco_alpha = k->alpha;
}

static float *w_of(param_set *s, int i) { return i < 0 ? NULL : param_at(s, i)->w; }
static float *g_of(param_set *s, int i) { return i < 0 ? NULL : param_at(s, i)->g; }

static void free_all(pool *p, float **bufs, int n)
{
    for (int i = 0; i < n; i++) pool_free(p, bufs[i]), bufs[i] = NULL;
}

/* w1 itself, or w1_a w1_b built into *tmp (workspace). */
static st_status w1_of(param_set *s, pool *p, const lyco_adapter *k, const float **w1, float **tmp)
{
    *tmp = NULL;
    *w1 = w_of(s, k->w1);
    if (k->w1 >= 0) return ST_OK;
    st_status st = pool_alloc(p, (size_t)(k->a * k->c) * sizeof(float), MEM_WORKSPACE, "lokr.w1", (void **)tmp);
    if (st) return st;
    gemm(false, false, k->a, k->c, k->rank, 1.0f, w_of(s, k->w1_a), w_of(s, k->w1_b), 0.0f, *tmp);
    *w1 = *tmp;
    return ST_OK;
}

/* The rows' X w2^T, transposed per row: *ht (n, b, c); with a split w2, *t = X w2_b^T (n c, r) kept for backward
 * when t is not NULL. */
static st_status lokr_hidden(param_set *s, pool *p, const lyco_adapter *k, const float *x, int64_t n, float **ht,
                             float **t)
{
    const int64_t rows = n * k->c;
    float *h = NULL, *xt = NULL;
    *ht = NULL;
    st_status st = pool_alloc(p, (size_t)(rows * k->b) * sizeof(float), MEM_WORKSPACE, "lokr.xw2", (void **)&h);
    if (!st && k->w2 >= 0) linear_forward(h, x, w_of(s, k->w2), NULL, rows, k->d, k->b);
    if (!st && k->w2 < 0) {
        st = pool_alloc(p, (size_t)(rows * k->rank) * sizeof(float), MEM_WORKSPACE, "lokr.xw2b", (void **)&xt);
        if (!st) linear_forward(xt, x, w_of(s, k->w2_b), NULL, rows, k->d, k->rank);
        if (!st) linear_forward(h, xt, w_of(s, k->w2_a), NULL, rows, k->rank, k->b);
    }
    if (!st) st = pool_alloc(p, (size_t)(rows * k->b) * sizeof(float), MEM_WORKSPACE, "lokr.xw2^T", (void **)ht);
    if (!st) transpose_batched(*ht, h, n, k->c, k->b);
    pool_free(p, h);
    if (t && !st) *t = xt;
    else pool_free(p, xt);
    return st;
}

static st_status lokr_forward(param_set *s, pool *p, const lyco_adapter *k, float *y, const float *x, int64_t n)
{
    float *buf[3] = {NULL, NULL, NULL}; /* ht, w1 built, z */
    const float *w1;
    st_status st = lokr_hidden(s, p, k, x, n, &buf[0], NULL);
    if (!st) st = w1_of(s, p, k, &w1, &buf[1]);
    if (!st) st = pool_alloc(p, (size_t)(n * k->b * k->a) * sizeof(float), MEM_WORKSPACE, "lokr.z", (void **)&buf[2]);
    if (!st) {
        gemm(false, true, n * k->b, k->a, k->c, k->scale, buf[0], w1, 0.0f, buf[2]); /* z (n, b, a) */
        transpose_batched_backward(y, buf[2], n, k->a, k->b);                         /* y (n, a, b) += z^T */
    }
    free_all(p, buf, 3);
    return st;
}

/* dw1 (a, c) += scale dZ^T Ht; dHt = scale dZ w1, with dZ (n, b, a) dy transposed per row. Into a split w1's
 * factors by the chain rule through w1_a w1_b. */
static st_status lokr_w1_backward(param_set *s, pool *p, const lyco_adapter *k, const float *dy, const float *ht,
                                  int64_t n, float *dht)
{
    float *buf[3] = {NULL, NULL, NULL}; /* dz, w1 built, dw1 of a split w1 */
    const float *w1;
    float *dw1 = g_of(s, k->w1);
    st_status st = pool_alloc(p, (size_t)(n * k->a * k->b) * sizeof(float), MEM_WORKSPACE, "lokr.dz", (void **)&buf[0]);
    if (!st) st = w1_of(s, p, k, &w1, &buf[1]);
    if (!st && k->w1 < 0)
        st = pool_alloc_zero(p, (size_t)(k->a * k->c) * sizeof(float), MEM_WORKSPACE, "lokr.dw1", (void **)&buf[2]);
    if (!st) {
        if (k->w1 < 0) dw1 = buf[2];
        transpose_batched(buf[0], dy, n, k->a, k->b);
        gemm(true, false, k->a, k->c, n * k->b, k->scale, buf[0], ht, 1.0f, dw1);
        gemm(false, false, n * k->b, k->c, k->a, k->scale, buf[0], w1, 0.0f, dht);
    }
    if (!st && k->w1 < 0) { /* w1 = w1_a w1_b: dw1_a += dw1 w1_b^T, dw1_b += w1_a^T dw1 */
        gemm(false, true, k->a, k->rank, k->c, 1.0f, dw1, w_of(s, k->w1_b), 1.0f, g_of(s, k->w1_a));
        gemm(true, false, k->rank, k->c, k->a, 1.0f, w_of(s, k->w1_a), dw1, 1.0f, g_of(s, k->w1_b));
    }
    free_all(p, buf, 3);
    return st;
}

/* Through X w2^T: dw2 (or w2_a, w2_b) and dx from dH (n c, b). */
static st_status lokr_w2_backward(param_set *s, pool *p, const lyco_adapter *k, float *dx, const float *dh,
                                  const float *x, const float *xt, int64_t n)
{
    const int64_t rows = n * k->c;
    if (k->w2 >= 0) {
        linear_backward(dx, g_of(s, k->w2), NULL, dh, x, w_of(s, k->w2), rows, k->d, k->b);
        return ST_OK;
    }
    float *dt;
    st_status st = pool_alloc_zero(p, (size_t)(rows * k->rank) * sizeof(float), MEM_WORKSPACE, "lokr.dxw2b",
                                   (void **)&dt);
    if (st) return st;
    linear_backward(dt, g_of(s, k->w2_a), NULL, dh, xt, w_of(s, k->w2_a), rows, k->rank, k->b);
    linear_backward(dx, g_of(s, k->w2_b), NULL, dt, x, w_of(s, k->w2_b), rows, k->d, k->rank);
    pool_free(p, dt);
    return ST_OK;
}

static st_status lokr_backward(param_set *s, pool *p, const lyco_adapter *k, float *dx, const float *dy, const float *x,
                        int64_t n)
{
    float *buf[4] = {NULL, NULL, NULL, NULL}; /* ht, xt, dht, dh */
    const size_t bytes = (size_t)(n * k->b * k->c) * sizeof(float);
    st_status st = lokr_hidden(s, p, k, x, n, &buf[0], &buf[1]); /* recomputed: forward keeps nothing */
    if (!st) st = pool_alloc(p, bytes, MEM_WORKSPACE, "lokr.dxw2^T", (void **)&buf[2]);
    if (!st) st = lokr_w1_backward(s, p, k, dy, buf[0], n, buf[2]);
    if (!st) {
        pool_free(p, buf[0]), buf[0] = NULL;
        st = pool_alloc(p, bytes, MEM_WORKSPACE, "lokr.dxw2", (void **)&buf[3]);
    }
    if (!st) {
        transpose_batched(buf[3], buf[2], n, k->b, k->c); /* dH (n, c, b) */
        pool_free(p, buf[2]), buf[2] = NULL;
        st = lokr_w2_backward(s, p, k, dx, buf[3], x, buf[1], n);
    }
    free_all(p, buf, 4);
    return st;
}

/* LoHa's two rank-r products, w1_a w1_b into p1 and w2_a w2_b into p2 (out, in). */
static void loha_products(param_set *s, const lyco_adapter *k, float *p1, float *p2)
{
    gemm(false, false, k->a, k->c, k->rank, 1.0f, w_of(s, k->w1_a), w_of(s, k->w1_b), 0.0f, p1);
    gemm(false, false, k->a, k->c, k->rank, 1.0f, w_of(s, k->w2_a), w_of(s, k->w2_b), 0.0f, p2);
}

/* dW = scale p1 * p2 into *dw (out, in), workspace; p1 and p2 into the two buffers at *prod. */
static st_status loha_build(param_set *s, pool *p, const lyco_adapter *k, float **prod, float **dw)
{
    const size_t bytes = (size_t)(k->a * k->c) * sizeof(float);
    st_status st = pool_alloc(p, bytes, MEM_WORKSPACE, "loha.w1", (void **)&prod[0]);
    if (!st) st = pool_alloc(p, bytes, MEM_WORKSPACE, "loha.w2", (void **)&prod[1]);
    if (!st) st = pool_alloc(p, bytes, MEM_WORKSPACE, "loha.dW", (void **)dw);
    if (st) return st;
    loha_products(s, k, prod[0], prod[1]);
    mul_scaled(*dw, prod[0], prod[1], k->scale, k->a * k->c);
    return ST_OK;
}

/* y += x dW^T with dW rebuilt, as the package's bypass does for LoHa (functional/loha.py, _bypass_diff). */
static st_status loha_forward(param_set *s, pool *p, const lyco_adapter *k, float *y, const float *x, int64_t n)
{
    float *buf[3] = {NULL, NULL, NULL}; /* p1, p2, dW */
    st_status st = loha_build(s, p, k, buf, &buf[2]);
    if (!st) gemm(false, true, n, k->a, k->c, 1.0f, x, buf[2], 1.0f, y);
    free_all(p, buf, 3);
    return st;
}

/* HadaWeight's gradients from G (dW's): T1 = scale G * p2 gives dw1_a += T1 w1_b^T, dw1_b += w1_a^T T1, and
 * T2 = scale G * p1 the same for w2. T2 overwrites p1 (prod[0]) and T1 p2 (prod[1]). */
static void loha_grads(param_set *s, const lyco_adapter *k, float **prod, const float *G)
{
    const int64_t out = k->a, in = k->c, r = k->rank;
    mul_scaled(prod[0], G, prod[0], k->scale, out * in);
    mul_scaled(prod[1], G, prod[1], k->scale, out * in);
    gemm(false, true, out, r, in, 1.0f, prod[1], w_of(s, k->w1_b), 1.0f, g_of(s, k->w1_a));
    gemm(true, false, r, in, out, 1.0f, w_of(s, k->w1_a), prod[1], 1.0f, g_of(s, k->w1_b));
    gemm(false, true, out, r, in, 1.0f, prod[0], w_of(s, k->w2_b), 1.0f, g_of(s, k->w2_a));
    gemm(true, false, r, in, out, 1.0f, w_of(s, k->w2_a), prod[0], 1.0f, g_of(s, k->w2_b));
}

/* dx += dy dW; G = dy^T x (dW's gradient), then loha_grads. */
static st_status loha_backward(param_set *s, pool *p, const lyco_adapter *k, float *dx, const float *dy,
                               const float *x, int64_t n)
{
    float *buf[3] = {NULL, NULL, NULL}; /* p1 then T2, p2 then T1, dW then G */
    const int64_t out = k->a, in = k->c;
    st_status st = loha_build(s, p, k, buf, &buf[2]);
    if (!st) {
        if (dx) gemm(false, false, n, in, out, 1.0f, dy, buf[2], 1.0f, dx);
        gemm(true, false, out, in, n, 1.0f, dy, x, 0.0f, buf[2]);
        loha_grads(s, k, buf, buf[2]);
    }
    free_all(p, buf, 3);
    return st;
}

/* LoKr's halves as matrices: w1 (a, c) and w2 (b, d), each itself or its factors' product built in workspace
 * (buf[0], buf[1], to free). */
static st_status lokr_halves(param_set *s, pool *p, const lyco_adapter *k, const float **w1, const float **w2,
                             float **buf)
{
    st_status st = w1_of(s, p, k, w1, &buf[0]);
    *w2 = w_of(s, k->w2);
    if (!st && k->w2 < 0) {
        st = pool_alloc(p, (size_t)(k->b * k->d) * sizeof(float), MEM_WORKSPACE, "lokr.w2", (void **)&buf[1]);
        if (!st) gemm(false, false, k->b, k->d, k->rank, 1.0f, w_of(s, k->w2_a), w_of(s, k->w2_b), 0.0f, buf[1]);
        *w2 = buf[1];
    }
    return st;
}

/* LoKr's gradients from G (dW's, (a b, c d)): kron's into dw1 and dw2, a split half's through its factors (dw1 =
 * dw1_a... by the chain rule: da += dh b^T, db += a^T dh). */
static st_status lokr_delta_backward(param_set *s, pool *p, const lyco_adapter *k, const float *G)
{
    float *buf[4] = {NULL, NULL, NULL, NULL}; /* w1, w2 built; dw1, dw2 of split halves */
    const float *w1, *w2;
    st_status st = lokr_halves(s, p, k, &w1, &w2, buf);
    if (!st && k->w1 < 0)
        st = pool_alloc_zero(p, (size_t)(k->a * k->c) * sizeof(float), MEM_WORKSPACE, "lokr.dw1", (void **)&buf[2]);
    if (!st && k->w2 < 0)
        st = pool_alloc_zero(p, (size_t)(k->b * k->d) * sizeof(float), MEM_WORKSPACE, "lokr.dw2", (void **)&buf[3]);
    if (!st) {
        float *dw1 = k->w1 < 0 ? buf[2] : g_of(s, k->w1), *dw2 = k->w2 < 0 ? buf[3] : g_of(s, k->w2);
        kron_backward(dw1, dw2, G, w1, w2, k->scale, k->a, k->b, k->c, k->d);
        if (k->w1 < 0) {
            gemm(false, true, k->a, k->rank, k->c, 1.0f, dw1, w_of(s, k->w1_b), 1.0f, g_of(s, k->w1_a));
            gemm(true, false, k->rank, k->c, k->a, 1.0f, w_of(s, k->w1_a), dw1, 1.0f, g_of(s, k->w1_b));
        }
        if (k->w2 < 0) {
            gemm(false, true, k->b, k->rank, k->d, 1.0f, dw2, w_of(s, k->w2_b), 1.0f, g_of(s, k->w2_a));
            gemm(true, false, k->rank, k->d, k->b, 1.0f, w_of(s, k->w2_a), dw2, 1.0f, g_of(s, k->w2_b));
        }
    }
    free_all(p, buf, 4);
    return st;
}

st_status lyco_delta_add(param_set *s, pool *p, const lyco_adapter *k, float *w)
{
    if (k->algo == LYCO_FULL) {
        add_to(w, w_of(s, k->diff), k->a * k->c);
        return ST_OK;
    }
    if (k->algo == LYCO_LOCON) { /* a grouped conv's LoCon, rebuilt: scale lora_up lora_down */
        gemm(false, false, k->a, k->c, k->rank, k->scale, w_of(s, k->w1_a), w_of(s, k->w1_b), 1.0f, w);
        return ST_OK;
    }
    if (k->algo == LYCO_LOKR) {
        float *buf[2] = {NULL, NULL};
        const float *w1, *w2;
        st_status st = lokr_halves(s, p, k, &w1, &w2, buf);
        if (!st) kron_add(w, w1, w2, k->scale, k->a, k->b, k->c, k->d);
        free_all(p, buf, 2);
        return st;
    }
    float *buf[3] = {NULL, NULL, NULL}; /* p1, p2, dW */
    st_status st = k->algo == LYCO_LOHA ? loha_build(s, p, k, buf, &buf[2])
                                        : st_fail(ST_ERR_INTERNAL, "lyco_delta_add: not LoHa or full");
    if (!st) add_to(w, buf[2], k->a * k->c);
    free_all(p, buf, 3);
    return st;
}

st_status lyco_delta_backward(param_set *s, pool *p, const lyco_adapter *k, const float *G)
{
    if (k->algo == LYCO_FULL) {
        add_to(g_of(s, k->diff), G, k->a * k->c);
        return ST_OK;
    }
    if (k->algo == LYCO_LOCON) { /* dup += scale G down^T, ddown += scale up^T G */
        gemm(false, true, k->a, k->rank, k->c, k->scale, G, w_of(s, k->w1_b), 1.0f, g_of(s, k->w1_a));
        gemm(true, false, k->rank, k->c, k->a, k->scale, w_of(s, k->w1_a), G, 1.0f, g_of(s, k->w1_b));
        return ST_OK;
    }
    if (k->algo == LYCO_LOKR) return lokr_delta_backward(s, p, k, G);
    float *buf[3] = {NULL, NULL, NULL}; /* p1 then T2, p2 then T1, dW (unused) */
    st_status st = k->algo == LYCO_LOHA ? loha_build(s, p, k, buf, &buf[2])
                                        : st_fail(ST_ERR_INTERNAL, "lyco_delta_backward: not LoHa or full");
    if (!st) loha_grads(s, k, buf, G);
    free_all(p, buf, 3);
    return st;
}

static void loha_register(param_set *s, const char *module, int64_t in, int64_t out, const lyco_settings *ly,
                          lyco_adapter *k)
{
    k->a = out, k->c = in;
    k->w1_a = add_weight(s, module, "hada_w1_a", out, ly->dim);
    k->w1_b = add_weight(s, module, "hada_w1_b", ly->dim, in);
    k->w2_a = add_weight(s, module, "hada_w2_a", out, ly->dim);
    k->w2_b = add_weight(s, module, "hada_w2_b", ly->dim, in);
    k->alpha = (float)alpha_of(ly);
    k->scale = (float)(alpha_of(ly) / (double)ly->dim);
    if (k->w1_a >= 0) s->items[k->w1_a].lyco_alpha = k->alpha;
}

int64_t locon_register(param_set *s, const char *name, int64_t in, int64_t out, int64_t kernel,
                       const lyco_settings *ly, int *down, int *up, float *scale)
{
    char module[PARAM_NAME_MAX];
    if (!lyco_module_name(module, sizeof module, name)) module[0] = '\0'; /* param_add refuses the empty name */
    const bool wide = kernel > 1; /* the package: a 1 x 1 kernel takes linear_dim, a larger one conv_dim */
    const int64_t r = wide ? ly->conv_dim : ly->dim, k = kernel ? kernel : 1;
    const int dims = kernel ? 4 : 2;
    const double alpha = (wide ? ly->conv_alpha : ly->alpha) == 0 ? (double)r : wide ? ly->conv_alpha : ly->alpha;
    *down = add_tensor(s, module, "lora_down.weight", dims, (int64_t[]){r, in, k, k});
    *up = add_tensor(s, module, "lora_up.weight", dims, (int64_t[]){out, r, 1, 1});
    *scale = (float)(alpha / (double)r);
    if (*down >= 0) s->items[*down].lyco_alpha = (float)alpha;
    return r;
}

void lycoris_conv_refusal(const param_set *s, const char *name, const int64_t *shape, char *buf, size_t n)
{
    char module[PARAM_NAME_MAX];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(name) > 7 ? strlen(name) - 7 : 0), name);
    const lyco_settings *ly = lycoris_settings_for(s, module);
    if (ly && ly->algo == LYCO_LOKR && s->lycoris->bypass && shape[1] == 1 && shape[0] > 1)
        snprintf(buf, n, "lora_type lycoris: %s is a depthwise convolution (groups %lld) that the lycoris_config "
                 "adapts with lokr under bypass_mode: the package's LoKr bypass convolves lokr_w2 with the layer's "
                 "groups and fails (RuntimeError: Given groups=%lld, expected weight to be at least %lld at dimension "
                 "0) unless lokr_w1 is 1 x 1 and lokr_w2 whole; give bypass_mode false (the package then rebuilds the weight, as segtrain does), or that "
                 "module another algo", name, (long long)shape[0], (long long)shape[0], (long long)shape[0]);
    else
        snprintf(buf, n, "lora_type lycoris: %s is a convolution inside the lycoris_config's targets, which "
                 "lycoris-lora adapts (a 1 x 1 kernel at linear_dim, a larger one at conv_dim); adapters on "
                 "convolutions are built on UNet2DConditionModel's (sd1x, sdxl, kolors) and Stable Cascade's "
                 "depthwise ones, not on this one: target classes or names without it", name);
}

/* An adapter of algo with no parameters yet (every index -1) */
static lyco_adapter adapter_of(lyco_algo algo, int64_t rank)
{
    return (lyco_adapter){.algo = algo, .w1 = -1, .w1_a = -1, .w1_b = -1, .w2 = -1, .w2_a = -1, .w2_b = -1,
                          .diff = -1, .diff_b = -1, .rank = rank};
}

lyco_adapter lyco_register(param_set *s, const char *name, int64_t in, int64_t out, bool bias,
                           const lyco_settings *ly)
{
    lyco_adapter k = adapter_of(ly->algo, ly->dim);
    char module[PARAM_NAME_MAX];
    if (!lyco_module_name(module, sizeof module, name)) module[0] = '\0'; /* param_add refuses the empty name */
    if (ly->algo == LYCO_LOKR) lokr_register(s, module, in, out, 0, ly, &k);
    else if (ly->algo == LYCO_LOHA) loha_register(s, module, in, out, ly, &k);
    else if (ly->algo == LYCO_FULL) {
        k.a = out, k.c = in;
        k.diff = add_weight(s, module, "diff", out, in);
        if (bias) k.diff_b = add_weight(s, module, "diff_b", out, 0);
    } else {
        k.algo = LYCO_NONE; /* LoCon: locon_register */
    }
    return k;
}

lyco_adapter lyco_conv_register(param_set *s, const char *name, int64_t in, int64_t out, int64_t kernel,
                                const lyco_settings *ly)
{
    lyco_settings c = *ly;
    if (kernel > 1) c.dim = ly->conv_dim, c.alpha = ly->conv_alpha; /* as locon_register's */
    if (ly->algo == LYCO_LOHA) return lyco_register(s, name, in * kernel * kernel, out, true, &c);
    lyco_adapter k = adapter_of(ly->algo, c.dim);
    k.a = out, k.c = in * kernel * kernel;
    char module[PARAM_NAME_MAX];
    if (!lyco_module_name(module, sizeof module, name)) module[0] = '\0';
    if (ly->algo == LYCO_LOKR) {
        lokr_register(s, module, in, out, kernel, &c, &k); /* the channels factored, the kernel in w2 */
    } else if (ly->algo == LYCO_LOCON) { /* a grouped conv's, rebuilt: w1_a lora_up (out, r), w1_b lora_down */
        k.rank = locon_register(s, name, in, out, kernel, ly, &k.w1_b, &k.w1_a, &k.scale);
    } else {
        k.diff = add_tensor(s, module, "diff", 4, (int64_t[]){out, in, kernel, kernel}); /* the weight's shape */
        k.diff_b = add_weight(s, module, "diff_b", out, 0);
    }
    return k;
}

st_status lyco_forward(param_set *s, pool *p, const lyco_adapter *k, float *y, const float *x, int64_t n)
{
    switch (k->algo) {
    case LYCO_LOKR: return lokr_forward(s, p, k, y, x, n);
    case LYCO_LOHA: return loha_forward(s, p, k, y, x, n);
    case LYCO_FULL: /* y += x diff^T + diff_b: FullModule's x (W + diff)^T + b less the base's */
        gemm(false, true, n, k->a, k->c, 1.0f, x, w_of(s, k->diff), 1.0f, y);
        if (k->diff_b >= 0) add_row(y, w_of(s, k->diff_b), n, k->a);
        return ST_OK;
    default: return ST_OK;
    }
}

st_status lyco_backward(param_set *s, pool *p, const lyco_adapter *k, float *dx, const float *dy, const float *x,
                        int64_t n)
{
    switch (k->algo) {
    case LYCO_LOKR: return lokr_backward(s, p, k, dx, dy, x, n);
    case LYCO_LOHA: return loha_backward(s, p, k, dx, dy, x, n);
    case LYCO_FULL:
        linear_backward(dx, g_of(s, k->diff), g_of(s, k->diff_b), dy, x, w_of(s, k->diff), n, k->c, k->a);
        return ST_OK;
    default: return ST_OK;
    }
}

/* "lycoris_<module>.alpha" of a parameter holding its module's alpha (LoKr's w1 or w1_a, LoHa's hada_w1_a, LoCon's
 * lora_down); false for the others. */
static bool alpha_name(const param *q, char *out, size_t n)
{
    const char *dot = strchr(q->name, '.'); /* the module's name has no dots */
    if (!q->lyco_alpha || !dot) return false;
    snprintf(out, n, "%.*s.alpha", (int)(dot - q->name), q->name);
    return true;
}

st_status param_set_save_lycoris(param_set *s, const char *path, const char *config_json, const char *const *meta,
                                 int n_meta)
{
    named_floats *alphas = calloc((size_t)s->n + 1, sizeof *alphas);
    char(*names)[PARAM_NAME_MAX + 8] = calloc((size_t)s->n + 1, sizeof *names);
    const char **all = calloc((size_t)n_meta + 1, 2 * sizeof *all);
    st_status st = alphas && names && all ? ST_OK : st_host_oom("the LyCORIS alphas of %s", path);
    int n = 0;
    for (int i = 0; !st && i < s->n; i++)
        if (alpha_name(&s->items[i], names[n], sizeof names[n]))
            alphas[n] = (named_floats){.name = names[n], .ndim = 0, .data = &s->items[i].lyco_alpha}, n++;
    if (!st) {
        all[0] = "lycoris_config", all[1] = config_json;
        if (n_meta) memcpy(all + 2, meta, (size_t)n_meta * 2 * sizeof *all);
        st = param_set_save(s, path, PARAMS_TRAINABLE, false, alphas, n, all, n_meta + 1);
    }
    free(all);
    free(names);
    free(alphas);
    return st;
}

/* Each module's alpha in f: present, and the spec's. */
static st_status check_alphas(param_set *s, const sft_file *f)
{
    char name[PARAM_NAME_MAX + 8];
    for (int i = 0; i < s->n; i++) {
        float alpha = 0;
        if (!alpha_name(&s->items[i], name, sizeof name)) continue;
        if (!sft_find(f, name) || sft_read_f32(f, name, 0, NULL, &alpha))
            return st_fail(ST_ERR_FORMAT, "%s: tensor '%s' is missing (a 0-d alpha beside the adapter)", sft_path(f),
                           name);
        if (alpha != s->items[i].lyco_alpha)
            return st_fail(ST_ERR_INVALID, "%s: %s is %g, but this model's lycoris_config gives %g", sft_path(f), name,
                           (double)alpha, (double)s->items[i].lyco_alpha);
    }
    return ST_OK;
}

st_status param_set_load_lycoris(param_set *s, const char *path)
{
    char file[4096];
    struct stat sb;
    const bool dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (snprintf(file, sizeof file, dir ? "%s/%s" : "%s", path, SFT_LORA_FILE) >= (int)sizeof file)
        return st_fail(ST_ERR_INVALID, "%s: the path is too long", path);
    sft_file *f = NULL;
    st_status st = sft_open(file, &f);
    if (!st) st = check_alphas(s, f);
    sft_close(f);
    /* the alphas are checked; every other lycoris_ tensor must be a parameter (param_set_load's missing and shape
     * checks) */
    return st ? st : param_set_load(s, file, PARAMS_TRAINABLE, "lycoris_");
}
