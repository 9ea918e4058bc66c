/* Euler sampling of the rectified flow with classifier-free guidance (include/segtrain/sample.h). */
#include "segtrain/sample.h"

#include <math.h>
#include <string.h>

#include "segtrain/data.h"
#include "segtrain/pool.h"
#include "segtrain/rng.h"

static st_status check_settings(const model *m, const sample_settings *s, int64_t n)
{
    (void)m;
    if (!s) return st_fail(ST_ERR_INVALID, "sampling: no settings");
    if (s->steps < 1) return st_fail(ST_ERR_INVALID, "sampling: steps %d must be at least 1", s->steps);
    if (!(s->guidance >= 0.0f) || !isfinite(s->guidance))
        return st_fail(ST_ERR_INVALID, "sampling: guidance %g must be a finite number >= 0", (double)s->guidance);
    if (n < 1) return st_fail(ST_ERR_INVALID, "sampling: %lld images; at least 1", (long long)n);
    return ST_OK;
}

st_status sample_images(model *m, const sample_settings *s, const float *cond, int64_t n, float *images)
{
    st_status st = check_settings(m, s, n);
    if (st) return st;
    if (!cond || !images) return st_fail(ST_ERR_INVALID, "sampling: conditioning and images must be given");
    const model_config *c = model_get_config(m);
    const int64_t L = model_cond_len(c);
    for (int64_t i = 0; !model_reads_text(c) && i < n; i++)
        if (!(cond[i] >= 0 && cond[i] <= (float)c->classes && cond[i] == floorf(cond[i])))
            return st_fail(ST_ERR_INVALID, "sampling: label %g of image %lld is not one of 0 .. %lld (%lld is the null "
                           "label)", (double)cond[i], (long long)i, (long long)c->classes, (long long)c->classes);
    pool *p = model_params(m)->pool;
    const int64_t per = model_sample_numel(c), numel = n * per;
    const bool guided = s->guidance != 1.0f;
    const int64_t B = guided ? 2 * n : n; /* the batch the model sees */
    const float g = s->guidance;

    float *x = NULL, *xin = NULL, *ts = NULL;
    float *lab = NULL;
    st = pool_alloc(p, (size_t)numel * sizeof(float), MEM_ACTIVATIONS, "sample.x", (void **)&x);
    if (!st) st = pool_alloc(p, (size_t)B * sizeof(float), MEM_ACTIVATIONS, "sample.timesteps", (void **)&ts);
    if (!st && guided) {
        st = pool_alloc(p, (size_t)(B * per) * sizeof(float), MEM_ACTIVATIONS, "sample.x_in", (void **)&xin);
        if (!st) st = pool_alloc(p, (size_t)(B * L) * sizeof(float), MEM_ACTIVATIONS, "sample.cond", (void **)&lab);
        if (!st) {
            memcpy(lab, cond, (size_t)(n * L) * sizeof(float));
            for (int64_t i = 0; i < n; i++) model_null_condition(c, lab + (n + i) * L); /* unconditional */
        }
    }
    if (!st) {
        const uint64_t stream = rng_stream("sample.noise");
        for (int64_t j = 0; j < numel; j++) x[j] = (float)rng_normal(s->seed, stream, (uint64_t)j);
    }
    for (int k = 0; !st && k < s->steps; k++) {
        const float t = (float)(s->steps - k) / (float)s->steps, t_next = (float)(s->steps - k - 1) / (float)s->steps;
        const float dt = t_next - t;
        for (int64_t i = 0; i < B; i++) ts[i] = 1000.0f * t;
        if (guided) {
            memcpy(xin, x, (size_t)numel * sizeof(float));
            memcpy(xin + numel, x, (size_t)numel * sizeof(float));
        }
        const float *v;
        st = model_forward(m, guided ? xin : x, ts, guided ? lab : cond, B, false, &v);
        if (st) break;
        if (guided) {
            const float *vc = v, *vu = v + numel;
            for (int64_t j = 0; j < numel; j++) x[j] = x[j] + dt * (vu[j] + g * (vc[j] - vu[j]));
        } else {
            for (int64_t j = 0; j < numel; j++) x[j] = x[j] + dt * v[j];
        }
        model_release(m);
    }
    if (!st) memcpy(images, x, (size_t)numel * sizeof(float));
    pool_free(p, lab);
    pool_free(p, xin);
    pool_free(p, ts);
    pool_free(p, x);
    return st;
}

st_status sample_grid(model *m, const sample_settings *s, const char *const *captions, int rows, int per_class,
                      const char *png_path)
{
    const model_config *c = model_get_config(m);
    const int64_t L = model_cond_len(c);
    if (rows < 1 || (!model_reads_text(c) && rows > c->classes))
        return st_fail(ST_ERR_INVALID, "sample grid: %d rows of classes; the model has %lld (at least 1)", rows,
                       (long long)c->classes);
    if (per_class < 1) return st_fail(ST_ERR_INVALID, "sample grid: %d images per class; at least 1", per_class);
    if (c->channels != 1 && c->channels != 3)
        return st_fail(ST_ERR_INVALID,
                       "sample grid: the model has %lld input channels; a PNG grid needs 1 (gray) or 3 (RGB)",
                       (long long)c->channels);
    if (c->frames > 1)
        return st_fail(ST_ERR_INVALID, "sample grid: the model takes %lld latent frames; a PNG grid shows images (1 "
                       "frame: num_frames 1)", (long long)c->frames);
    const int64_t n = (int64_t)rows * per_class;
    if (n > 1 << 20) return st_fail(ST_ERR_INVALID, "sample grid: %lld images is too many", (long long)n);
    st_status st = check_settings(m, s, n);
    if (st) return st;
    pool *p = model_params(m)->pool;
    const int64_t per = model_sample_numel(c);
    float *images = NULL;
    float *cond = NULL;
    st = pool_alloc(p, (size_t)(n * L) * sizeof(float), MEM_ACTIVATIONS, "sample.grid_cond", (void **)&cond);
    if (!st) st = pool_alloc(p, (size_t)(n * per) * sizeof(float), MEM_ACTIVATIONS, "sample.grid", (void **)&images);
    if (!st) {
        for (int64_t i = 0; i < n; i++)
            model_condition(c, i / per_class, captions ? captions[i / per_class] : NULL, cond + i * L);
        st = sample_images(m, s, cond, n, images);
    }
    if (!st) st = png_write_grid(png_path, images, (int)n, (int)c->channels, (int)c->height, (int)c->width,
                                 per_class);
    pool_free(p, images);
    pool_free(p, cond);
    return st;
}
