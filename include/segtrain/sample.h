/* Sampling a trained model: Euler integration of the rectified flow (../shared/spec/dit.md) from pure noise at
 * t = 1 to an image at t = 0, with classifier-free guidance.
 *
 * The model predicts v = e - x0 from x_t = (1 - t) x0 + t e (timestep 1000 t), so dx/dt = v and an Euler step
 * from t to t_next < t is x <- x + (t_next - t) v. With `steps` equal steps the times are
 * t_k = (float)(steps - k) / (float)steps for k = 0 .. steps (exactly 1 and 0 at the ends).
 *
 * Guidance g: v = v_uncond + g * (v_cond - v_uncond), where v_uncond is the prediction for no conditioning
 * (model_null_condition: the null label, the empty caption). g = 1 is no guidance and runs the model once a step
 * on the batch; any other g runs it once a step on the batch stacked twice (conditioned first, then
 * unconditioned), one forward of 2n.
 *
 * The starting noise of image i is x_1[i, j] = rng_normal(seed, rng_stream("sample.noise"), i * C*H*W + j): a pure
 * function of (seed, i), so image i does not depend on n or on the other labels of its batch. */
#ifndef SEGTRAIN_SAMPLE_H
#define SEGTRAIN_SAMPLE_H

#include <stdint.h>

#include "segtrain/model.h"
#include "segtrain/status.h"

typedef struct sample_settings {
    int steps;      /* Euler steps, >= 1 */
    float guidance; /* classifier-free guidance scale, >= 0; 1 = none */
    uint64_t seed;  /* seed of the starting noise */
} sample_settings;

/* Samples n images conditioned on cond (n x model_cond_len floats; labels in [0, classes], classes the null
 * label) into images (caller memory, n x C x H x W, the model's [-1, 1] convention). Every buffer comes from the model's device pool (tagged
 * activations) and is freed before return, so a pool capacity bounds a sampling run too; a refused allocation is
 * ST_ERR_OOM, and the pool is left as it was. images is unspecified on failure. */
st_status sample_images(model *m, const sample_settings *s, const float *cond, int64_t n, float *images);

/* Samples per_row images of each row r = 0 .. rows-1, conditioned on model_condition(label r, captions[r])
 * (captions may be NULL: labels only), image index r * per_row + k, so its noise is that of sample_images'
 * image of the same index, and writes them with png_write_grid: one row each, per_row columns. The model's
 * channels must be 1 or 3 (a PNG); for a labelled family rows is at most its classes. */
st_status sample_grid(model *m, const sample_settings *s, const char *const *captions, int rows, int per_row,
                      const char *png_path);

#endif
