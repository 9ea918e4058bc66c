/* Quantized frozen weights as optimum-quanto 0.2.7 makes them (quant.h): its optimizers' scales, its
 * quantize_symmetric / quantize_affine, its packing and its dequantize, each bf16 tensor op a float op rounded to
 * bf16. */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "segtrain/quant.h"
#include "segtrain/safetensors.h"

#define QINT8_MAX 127.0f
#define QFLOAT8_MAX 448.0f /* float8_e4m3fn's largest finite value, quanto's qfloat8.qmax */
#define QINT4_LEVELS 15.0f /* qint4: qmax - qmin = 7 - (-8) */
#define QINT4_HALF 8.0f    /* 2 ** (bits - 1): tinygemm's mid-point of the range */

static const char *const names[] = {[QUANT_NONE] = "no_change", [QUANT_INT8] = "int8-quanto",
                                    [QUANT_FP8] = "fp8-quanto", [QUANT_INT4] = "int4-quanto"};

const char *quant_name(quant_format f) { return names[f]; }

st_status quant_format_of(const char *name, quant_format *out)
{
    for (int f = QUANT_NONE; f <= QUANT_INT4; f++)
        if (!strcmp(name, names[f])) return *out = (quant_format)f, ST_OK;
    return st_fail(ST_ERR_UNSUPPORTED, "base_model_precision %s is not built (built: no_change, int8-quanto, "
                   "fp8-quanto, int4-quanto)", name);
}

/* torch's bf16 tensor op: the float result rounded to bf16 */
static float bf(float x) { return sft_bf16_to_f32(sft_f32_to_bf16(x)); }

/* QModuleMixin's group size for qint4: 128, else the largest of 96, 64, 32 dividing the inputs; 0 (per output
 * channel) when none does or there are 128 inputs or fewer. */
static int64_t int4_group(int64_t cols)
{
    if (cols <= 128) return 0;
    int64_t g = 128;
    while (cols % g && g > 32) g -= 32;
    return cols % g ? 0 : g;
}

quant_layout quant_layout_of(quant_format f, int64_t rows, int64_t cols)
{
    quant_layout l = {.units = rows, .unit_len = cols, .data_rows = rows, .data_cols = cols};
    if (f == QUANT_NONE) return (quant_layout){0};
    if (f != QUANT_INT4) {
        l.data_bytes = rows * cols; /* a row of one is quantized per tensor: one unit all the same */
        l.stats = rows;
        return l;
    }
    l.group = int4_group(cols);
    const int64_t drows = l.group ? rows * cols / l.group : rows, dcols = l.group ? l.group : cols;
    l.data_rows = drows, l.data_cols = dcols;
    l.data_bytes = (drows + 1) / 2 * dcols; /* PackedTensor: row i's nibble in row i mod ceil(drows / 2) */
    /* the optimizer reduces over the data's rows, or where there is one row (its axis then None) over its columns */
    l.units = drows > 1 ? drows : dcols;
    l.unit_len = drows > 1 ? dcols : 1;
    l.stats = 2 * l.units;
    return l;
}

static void pack_symmetric(quant_format f, quant_layout l, const uint16_t *w, uint8_t *data, uint16_t *scales)
{
    const float qmax = f == QUANT_INT8 ? QINT8_MAX : QFLOAT8_MAX;
#pragma omp parallel for schedule(static) if (l.units >= 64)
    for (int64_t u = 0; u < l.units; u++) {
        const uint16_t *x = w + u * l.unit_len;
        float amax = 0.0f;
        for (int64_t k = 0; k < l.unit_len; k++) amax = fmaxf(amax, fabsf(sft_bf16_to_f32(x[k])));
        const float s = bf(amax / qmax); /* AbsmaxOptimizer */
        scales[u] = sft_f32_to_bf16(s);
        for (int64_t k = 0; k < l.unit_len; k++) {
            const float v = bf(sft_bf16_to_f32(x[k]) / s);
            uint8_t *q = data + u * l.unit_len + k;
            if (v != v) *q = 0; /* 0 / 0 in an all-zero row: torch's NaN to int8 is 0; for fp8 see QUANTIZATION.md */
            else if (f == QUANT_INT8) *q = (uint8_t)(int8_t)fminf(fmaxf(nearbyintf(v), -128.0f), QINT8_MAX);
            else *q = sft_f32_to_f8e4m3(fminf(fmaxf(v, -QFLOAT8_MAX), QFLOAT8_MAX));
        }
    }
}

static void pack_int4(quant_layout l, bool tinygemm, const uint16_t *w, uint8_t *data, uint16_t *stats)
{
    const int64_t dcols = l.data_cols, half = (l.data_rows + 1) / 2;
    memset(data, 0, (size_t)l.data_bytes);
    for (int64_t u = 0; u < l.units; u++) {
        const uint16_t *x = w + u * l.unit_len;
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t k = 0; k < l.unit_len; k++) lo = fminf(lo, sft_bf16_to_f32(x[k])), hi = fmaxf(hi, sft_bf16_to_f32(x[k]));
        const float s = bf(bf(hi - lo) / QINT4_LEVELS), shift = -lo; /* MaxOptimizer */
        float kept = shift;
        if (tinygemm) { /* tinygemm's scale_shift holds the mid-point, then dequantize recovers the shift */
            const float mid = bf(-shift + bf(QINT4_HALF * s));
            kept = bf(bf(QINT4_HALF * s) - mid);
        }
        stats[u] = sft_f32_to_bf16(s);
        stats[l.units + u] = sft_f32_to_bf16(kept);
        for (int64_t k = 0; k < l.unit_len; k++) {
            const float v = nearbyintf(bf(bf(sft_bf16_to_f32(x[k]) + shift) / s));
            const uint8_t q = v != v ? 0 : (uint8_t)fminf(fmaxf(v, 0.0f), QINT4_LEVELS);
            const int64_t e = u * l.unit_len + k, r = e / dcols, c = e % dcols;
            data[(r % half) * dcols + c] |= (uint8_t)(q << (4 * (r / half)));
        }
    }
}

void quant_pack(quant_format f, int64_t rows, int64_t cols, int ndim, const uint16_t *w, uint8_t *data,
                uint16_t *stats)
{
    const quant_layout l = quant_layout_of(f, rows, cols);
    if (op_dry(data) || f == QUANT_NONE) return;
    if (f == QUANT_INT4) pack_int4(l, l.group == 128 && ndim == 2, w, data, stats);
    else pack_symmetric(f, l, w, data, stats);
}

void quant_unpack(quant_format f, int64_t rows, int64_t cols, const uint8_t *data, const uint16_t *stats, float *y)
{
    if (op_dry(y) || f == QUANT_NONE) return;
    const double t0 = prof_now();
    const quant_layout l = quant_layout_of(f, rows, cols);
    const int64_t dcols = l.data_cols, half = (l.data_rows + 1) / 2;
#pragma omp parallel for schedule(static) if (l.units >= 64)
    for (int64_t u = 0; u < l.units; u++) {
        const float s = sft_bf16_to_f32(stats[u]);
        for (int64_t k = 0; k < l.unit_len; k++) {
            const int64_t e = u * l.unit_len + k;
            if (f == QUANT_INT8) y[e] = bf(s * (float)(int8_t)data[e]);
            else if (f == QUANT_FP8) y[e] = bf(s * sft_f8e4m3_to_f32(data[e]));
            else {
                const int64_t r = e / dcols, c = e % dcols;
                const float q = (float)((data[(r % half) * dcols + c] >> (4 * (r / half))) & 15);
                y[e] = bf(bf(s * q) - sft_bf16_to_f32(stats[l.units + u]));
            }
        }
    }
    prof_add(OP_POINTWISE, t0, 0, 6.0 * (double)(rows * cols));
}
