#include "testkit.h"
#include "testkit_batch.h"

#include <fcntl.h>
#include <math.h>
#include <png.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "segtrain/advise.h"
#include "segtrain/rng.h"
#include "segtrain/status.h"

static int passed, failed;

void tk_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    failed++;
}

void tk_pass(void) { passed++; }

int tk_finish(void)
{
    /* a test program that ran no check has tested nothing: that is a failure too */
    if (passed + failed == 0) {
        fprintf(stderr, "FAIL: no checks ran\n");
        failed = 1;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/* splitmix64: tiny, seedable, the same on every platform */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

void tk_fill(float *x, int64_t n, uint64_t seed, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * next_unit(&seed));
}

void tk_fill_d(double *x, int64_t n, uint64_t seed, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * next_unit(&seed);
}

void tk_to_double(double *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

void tk_numeric_grad(tk_loss_fn f, void *ctx, double *x, int64_t n, double h, double *grad)
{
    for (int64_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + h;
        double up = f(ctx);
        x[i] = saved - h;
        double down = f(ctx);
        x[i] = saved;
        grad[i] = (up - down) / (2 * h);
    }
}

bool tk_close(const float *got, const double *want, int64_t n, double tol, double *rel_err)
{
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst)) worst = e; /* also catches NaN */
    }
    double rel = scale > 0 ? worst / scale : worst;
    if (rel_err) *rel_err = rel;
    return rel <= tol;
}

bool tk_expect_close(const char *what, const float *got, const double *want, int64_t n, double tol)
{
    double scale = 0, worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst)) worst = e, at = i;
    }
    double rel = scale > 0 ? worst / scale : worst;
    bool ok = rel <= tol && scale > 0;
    printf("%s %-44s rel err %.2e (tol %.0e) worst [%lld] got %.8g want %.8g\n", ok ? "ok  " : "FAIL", what, rel, tol,
           (long long)at, n ? (double)got[at] : 0.0, n ? want[at] : 0.0);
    if (scale == 0) printf("FAIL %s: the reference is all zeros, so this check could not fail\n", what);
    if (ok) passed++;
    else failed++;
    return ok;
}

bool tk_same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    for (int p = 0, q = 0; same && (p != EOF || q != EOF);) same = (p = fgetc(fa)) == (q = fgetc(fb));
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

bool tk_expect_bitwise(const char *what, const float *got, const float *want, int64_t n)
{
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            if (first < 0) first = i;
            diff++;
        }
    printf("%s %-44s %lld of %lld elements differ\n", diff ? "FAIL" : "ok  ", what, (long long)diff, (long long)n);
    if (diff) {
        printf("     first at [%lld]: %.9g vs %.9g\n", (long long)first, got[first], want[first]);
        failed++;
    } else {
        passed++;
    }
    return diff == 0;
}

void tk_expect_grads_agree(const char *tag, const char *const names[3], const int64_t sizes[3], float *one[3],
                           float *two[3], float *alone[3])
{
    char what[256];
    for (int k = 0; k < 3; k++) {
        snprintf(what, sizeof what, "%s %s at 1 and 2 threads", tag, names[k]);
        tk_expect_bitwise(what, one[k], two[k], sizes[k]);
        if (alone) {
            snprintf(what, sizeof what, "%s %s alone == full", tag, names[k]);
            tk_expect_bitwise(what, alone[k], two[k], sizes[k]);
            free(alone[k]);
        }
        free(one[k]), free(two[k]);
    }
}

const char *tk_path(const char *dir, const char *name)
{
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

char *tk_read_file(const char *dir, const char *name)
{
    FILE *f = fopen(tk_path(dir, name), "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

void tk_write_file(const char *dir, const char *name, const char *text)
{
    FILE *f = fopen(tk_path(dir, name), "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

void tk_write_png(const char *dir, const char *name, int w, int h, unsigned format, const void *pixels,
                  const void *colormap, int entries)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = format;
    img.colormap_entries = (png_uint_32)entries;
    CHECKF(png_image_write_to_file(&img, tk_path(dir, name), 0, pixels, 0, colormap), "writing %s: %s", name,
           img.message);
}

void tk_fill_bytes(unsigned char *p, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (unsigned char)(seed >> 56);
    }
}

static int saved_stderr = -1;
static char capture_path[512], captured[8192];

void tk_capture_begin(const char *dir)
{
    fflush(stderr);
    snprintf(capture_path, sizeof capture_path, "%s", tk_path(dir, "stderr.log"));
    saved_stderr = dup(2);
    int fd = open(capture_path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    dup2(fd, 2);
    close(fd);
}

const char *tk_capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    captured[0] = 0;
    FILE *f = fopen(capture_path, "rb");
    if (f) {
        size_t n = fread(captured, 1, sizeof captured - 1, f);
        captured[n] = 0;
        fclose(f);
    }
    return captured;
}

static struct {
    char *text;
    size_t len, cap;
    st_warn_sink was;
} warned;

static void warned_line(void *ctx, const char *line)
{
    (void)ctx;
    const size_t n = strlen(line);
    if (warned.len + n + 2 > warned.cap) {
        warned.cap = 2 * (warned.len + n + 2);
        warned.text = realloc(warned.text, warned.cap);
        if (!warned.text) abort(); /* a test's own memory */
    }
    memcpy(warned.text + warned.len, line, n);
    warned.len += n;
    warned.text[warned.len++] = '\n';
    warned.text[warned.len] = 0;
}

void tk_warn_begin(void)
{
    warned.len = 0;
    if (warned.text) warned.text[0] = 0;
    warned.was = st_warn_set((st_warn_sink){warned_line, NULL});
}

const char *tk_warn_end(void)
{
    st_warn_set(warned.was);
    return warned.text ? warned.text : "";
}

int tk_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

void tk_ref_shrink(const unsigned char *px, int w, int x0, int y0, int S, int R, double *out)
{
    const double sc = (double)S / R;
    for (int ch = 0; ch < 3; ch++)
        for (int oy = 0; oy < R; oy++)
            for (int ox = 0; ox < R; ox++) {
                double acc = 0;
                for (int sy = 0; sy < S; sy++) {
                    double wy = fmin((oy + 1) * sc, sy + 1.0) - fmax(oy * sc, (double)sy);
                    if (wy <= 0) continue;
                    for (int sx = 0; sx < S; sx++) {
                        double wx = fmin((ox + 1) * sc, sx + 1.0) - fmax(ox * sc, (double)sx);
                        if (wx > 0) acc += wx * wy * px[((y0 + sy) * w + x0 + sx) * 3 + ch];
                    }
                }
                out[(ch * R + oy) * R + ox] = acc / (sc * sc) / 255.0 * 2.0 - 1.0;
            }
}

void tk_ref_grow(const unsigned char *px, int w, int x0, int y0, int S, int R, double *out)
{
    for (int ch = 0; ch < 3; ch++)
        for (int oy = 0; oy < R; oy++)
            for (int ox = 0; ox < R; ox++) {
                double fy = fmin(fmax((oy + 0.5) * S / R - 0.5, 0.0), S - 1.0);
                double fx = fmin(fmax((ox + 0.5) * S / R - 0.5, 0.0), S - 1.0);
                int iy = (int)fy, ix = (int)fx, jy = iy + 1 < S ? iy + 1 : iy, jx = ix + 1 < S ? ix + 1 : ix;
                double ty = fy - iy, tx = fx - ix;
#define P(y, x) px[((y0 + (y)) * w + x0 + (x)) * 3 + ch]
                double v = (1 - ty) * ((1 - tx) * P(iy, ix) + tx * P(iy, jx)) +
                           ty * ((1 - tx) * P(jy, ix) + tx * P(jy, jx));
#undef P
                out[(ch * R + oy) * R + ox] = v / 255.0 * 2.0 - 1.0;
            }
}

double tk_max_diff(const float *got, const double *want, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(got[i] - want[i]));
    return m;
}

tk_batch tk_random_batch(const model_config *mc, int64_t n, uint64_t seed)
{
    tk_batch b = {.n = n, .per = model_sample_numel(mc)}; /* video: its frames too */
    const int64_t L = model_cond_len(mc);
    b.x0 = malloc((size_t)(n * b.per) * sizeof(float));
    b.noise = malloc((size_t)(n * b.per) * sizeof(float));
    b.t = malloc((size_t)n * sizeof(float));
    b.y = malloc((size_t)(n * L) * sizeof(float));
    rng_fill_normal(b.x0, n * b.per, seed, 1, 0, 1);
    rng_fill_normal(b.noise, n * b.per, seed, 2, 0, 1);
    tk_token_ids(mc, b.x0, n * b.per, seed);
    for (int64_t i = 0; i < n; i++) {
        b.t[i] = (float)(0.1 + 0.8 * rng_uniform(seed, 3, (uint64_t)i));
        static const char *const captions[] = {"a red circle", "", "green", "a blue square"};
        model_condition(mc, (i * 7) % (mc->classes + 1), captions[i % 4], b.y + i * L);
    }
    return b;
}

void tk_token_ids(const model_config *mc, float *x0, int64_t count, uint64_t seed)
{
    for (int64_t i = 0; model_tokens(mc) && i < count; i++)
        x0[i] = (float)((i * 7919 + (int64_t)seed) % (i % mc->channels == mc->channels - 1 ? mc->text_vocab
                                                                                           : mc->classes));
}

flow_batch tk_flow(const tk_batch *b)
{
    return (flow_batch){.batch = b->n, .x0 = b->x0, .noise = b->noise, .t = b->t, .cond = b->y, .grad_scale = 1.0f};
}

void tk_free_batch(tk_batch *b)
{
    free(b->x0), free(b->noise), free(b->t), free(b->y);
}

void tk_dry_loss(const model_config *mc, const ckpt_settings *cs, int64_t n, pool_stats *dev, pool_stats *host)
{
    link_traffic moved;
    tk_dry_loss_moved(mc, cs, n, dev, host, &moved);
}

/* tk_dry_loss_moved, giving the model to after (if any) once the step is done */
static void dry_step(const model_config *mc, const ckpt_settings *cs, int64_t n, pool_stats *dev, pool_stats *host,
                     link_traffic *moved, void (*after)(model *m, void *ctx), void *ctx)
{
    link_traffic before = {0};
    pool *d = pool_create_dry(POOL_DEVICE, 0), *h = pool_create_dry(POOL_HOST, 0), *in = pool_create_dry(POOL_HOST, 0);
    model *m = NULL;
    st_status st = model_create(mc, d, &m);
    if (!st) st = model_set_host_pool(m, h);
    if (!st) st = model_spill_weights(m); /* group_offload_to_disk_path: as model_run_open does it dry */
    if (!st) st = model_set_checkpointing(m, cs, NULL, 0);
    const int64_t per = mc->channels * mc->height * mc->width, L = model_cond_len(mc);
    float *x0 = NULL, *noise = NULL, *t = NULL;
    float *cond = NULL;
    if (!st) st = pool_alloc(in, (size_t)(n * per) * sizeof(float), MEM_ACTIVATIONS, "x0", (void **)&x0);
    if (!st) st = pool_alloc(in, (size_t)(n * per) * sizeof(float), MEM_ACTIVATIONS, "noise", (void **)&noise);
    if (!st) st = pool_alloc(in, (size_t)n * sizeof(float), MEM_ACTIVATIONS, "t", (void **)&t);
    if (!st) st = pool_alloc(in, (size_t)(n * L) * sizeof(float), MEM_ACTIVATIONS, "cond", (void **)&cond);
    if (!st) {
        pool_reset_peak(d);
        pool_reset_peak(h);
        const flow_batch fb = {.batch = n, .x0 = x0, .noise = noise, .t = t, .cond = cond};
        float loss;
        link_traffic_read(m, &before);
        st = flow_loss(m, &fb, true, &loss);
    }
    *moved = m ? link_traffic_since(m, &before) : (link_traffic){0};
    CHECKF(st == ST_OK, "dry step: %s", st_error());
    pool_get_stats(d, dev);
    pool_get_stats(h, host);
    pool_free(in, x0), pool_free(in, noise), pool_free(in, t), pool_free(in, cond);
    if (!st && after) after(m, ctx);
    model_destroy(m);
    CHECK(pool_destroy(d) == 0 && pool_destroy(h) == 0 && pool_destroy(in) == 0);
}

void tk_dry_loss_moved(const model_config *mc, const ckpt_settings *cs, int64_t n, pool_stats *dev, pool_stats *host,
                       link_traffic *moved)
{
    dry_step(mc, cs, n, dev, host, moved, NULL, NULL);
}

void tk_dry_model(const model_config *mc, const ckpt_settings *cs, int64_t n, void (*after)(model *m, void *ctx),
                  void *ctx)
{
    pool_stats dev, host;
    link_traffic moved;
    dry_step(mc, cs, n, &dev, &host, &moved, after, ctx);
}

struct tk_yardstick {
    cJSON *root;
};

/* The "errors" object of file, or NULL. */
static const cJSON *yardstick_errors(const tk_yardstick *y, const char *file)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(y->root, "files"), file);
    return cJSON_GetObjectItemCaseSensitive(f, "errors");
}

/* Whether draws is a non-empty array of finite errors >= 0 whose smallest and largest bracket median. */
static bool draws_within(const cJSON *draws, double median)
{
    double lo = INFINITY, hi = -INFINITY;
    const cJSON *d;
    if (!cJSON_IsArray(draws) || !draws->child) return false;
    cJSON_ArrayForEach(d, draws) {
        if (!cJSON_IsNumber(d) || !isfinite(d->valuedouble) || d->valuedouble < 0) return false;
        lo = fmin(lo, d->valuedouble), hi = fmax(hi, d->valuedouble);
    }
    return lo <= median && median <= hi;
}

/* Why a yardstick's parsed root is not well-formed, or NULL. */
static const char *yardstick_malformed(const cJSON *root)
{
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files"), *f, *e;
    if (!cJSON_IsObject(files) || !files->child) return "no \"files\" object, or an empty one";
    cJSON_ArrayForEach(f, files) {
        const cJSON *errors = cJSON_GetObjectItemCaseSensitive(f, "errors");
        const cJSON *bound = cJSON_GetObjectItemCaseSensitive(f, "loss_bound");
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(f, "reference_loss")) || !cJSON_IsObject(errors) ||
            !cJSON_IsNumber(bound) || !(bound->valuedouble >= 0))
            return "a file without a numeric \"reference_loss\", a \"loss_bound\" >= 0 and an \"errors\" object";
        if (!cJSON_GetObjectItemCaseSensitive(errors, "pred") || !cJSON_GetObjectItemCaseSensitive(errors, "loss"))
            return "a file's errors without \"pred\" or \"loss\"";
        const cJSON *draws = cJSON_GetObjectItemCaseSensitive(f, "draws");
        if (!cJSON_IsObject(draws) || cJSON_GetArraySize(draws) != cJSON_GetArraySize(errors))
            return "a file without a \"draws\" object listing the tensors of its \"errors\"";
        cJSON_ArrayForEach(e, errors) {
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < 0)
                return "an error that is not a finite number >= 0";
            if (!draws_within(cJSON_GetObjectItemCaseSensitive(draws, e->string), e->valuedouble))
                return "a tensor whose draws are not an array of errors >= 0 around its own (the median)";
        }
    }
    return NULL;
}

tk_yardstick *tk_yardstick_load(const char *fixture, const char **why)
{
    char dir[512];
    snprintf(dir, sizeof dir, SEGTRAIN_SOURCE_DIR "/tests/fixtures/%s", fixture);
    char *text = tk_read_file(dir, "bf16_yardstick.json");
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    *why = !text ? "no bf16_yardstick.json: run scripts/bf16_yardstick.py for it" : !root ? "not JSON"
                                                                                          : yardstick_malformed(root);
    tk_yardstick *y = *why ? NULL : malloc(sizeof *y);
    if (!y) {
        if (!*why) *why = "out of memory";
        cJSON_Delete(root);
        return NULL;
    }
    y->root = root;
    return y;
}

void tk_yardstick_free(tk_yardstick *y)
{
    if (y) cJSON_Delete(y->root);
    free(y);
}

int tk_yardstick_count(const tk_yardstick *y, const char *file)
{
    return cJSON_GetArraySize(yardstick_errors(y, file));
}

/* file's number key, or fallback */
static double yardstick_number(const tk_yardstick *y, const char *file, const char *key, double fallback)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(y->root, "files"), file);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(f, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

double tk_yardstick_reference_loss(const tk_yardstick *y, const char *file)
{
    return yardstick_number(y, file, "reference_loss", NAN);
}

double tk_yardstick_error(const tk_yardstick *y, const char *file, const char *tensor)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(yardstick_errors(y, file), tensor);
    return cJSON_IsNumber(e) ? e->valuedouble : -1;
}

bool tk_yardstick_spread(const tk_yardstick *y, const char *file, const char *tensor, double *lo, double *hi)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(y->root, "files"), file);
    const cJSON *draws = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "draws"), tensor), *d;
    *lo = INFINITY, *hi = -INFINITY;
    cJSON_ArrayForEach(d, draws) *lo = fmin(*lo, d->valuedouble), *hi = fmax(*hi, d->valuedouble);
    return cJSON_IsArray(draws);
}

bool tk_expect_within_yardstick(const tk_yardstick *y, const char *what, const char *file, const char *tensor,
                                double err)
{
    const bool loss = !strcmp(tensor, "loss");
    const double bar = loss ? yardstick_number(y, file, "loss_bound", -1) : tk_yardstick_error(y, file, tensor);
    const bool ok = bar >= 0 && err <= 2 * bar;
    CHECKF(ok, "%s, %s: %s error %.3g, over 2x PyTorch's bf16 %s %.3g", what, file, tensor, err,
           loss ? "loss bound" : "error", bar);
    return ok;
}
