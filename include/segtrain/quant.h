/* Quantized frozen weights (base_model_precision, docs/QUANTIZATION.md): a linear layer's (out, in) weight (or a
 * Conv2d's (out, in, k, k), as the (out, in k k) matrix) held packed
 * as optimum-quanto holds it after SimpleTuner's quantize(model, weights=...) and freeze(model) on the bf16 model,
 * and dequantized to the library's bf16 values, widened to float, around its GEMM. Every rounding is the library's:
 * each of its bf16 tensor ops is a float op rounded to bf16 (to nearest even), so quantize gives its bytes and
 * dequantize its floats bit for bit (tests/test_quant.c on scripts/make_quant_fixtures.py's fixture). */
#ifndef SEGTRAIN_QUANT_H
#define SEGTRAIN_QUANT_H

#include <stdint.h>

#include "segtrain/status.h"

typedef enum quant_format {
    QUANT_NONE, /* not quantized */
    QUANT_INT8, /* int8-quanto: qint8, symmetric per output channel (absmax / 127), int8 data */
    QUANT_FP8,  /* fp8-quanto: qfloat8 (float8_e4m3fn), symmetric per output channel (absmax / 448) */
    QUANT_INT4, /* int4-quanto: qint4, affine (min, max) per group of 128, 96, 64 or 32 inputs (else per output
                 * channel), values 0..15 packed two a byte */
} quant_format;

/* How a weight of (rows, cols) is held: data (data_bytes bytes), then per unit of unit_len consecutive elements a bf16
 * scale (and for int4 a bf16 shift, after all the scales). */
typedef struct quant_layout {
    int64_t data_bytes;
    int64_t data_rows, data_cols; /* int4: the values' grid before packing (groups as rows); else rows, cols */
    int64_t units, unit_len; /* units * unit_len = rows * cols */
    int64_t stats;           /* bf16 values: units, or 2 units with shifts */
    int64_t group;           /* int4's group size; 0: per output channel */
} quant_layout;

/* SimpleTuner's name of a format ("int8-quanto"), "no_change" for QUANT_NONE. */
const char *quant_name(quant_format f);
/* The format a base_model_precision value names; ST_ERR_UNSUPPORTED for a value segtrain does not build. */
st_status quant_format_of(const char *name, quant_format *out);
quant_layout quant_layout_of(quant_format f, int64_t rows, int64_t cols);
/* w: the weight in bf16 (as SimpleTuner's bf16 model holds it before quantizing), of ndim dimensions: a Linear's 2, a
 * Conv2d's 4 ((out, in / groups, k, k) as rows = out and cols = in k k: QConv2d quantizes it as QLinear does that
 * matrix, but never in tinygemm's layout, which quanto takes only for a 2-d int4 weight in groups of 128). data,
 * stats: quant_layout_of's. */
void quant_pack(quant_format f, int64_t rows, int64_t cols, int ndim, const uint16_t *w, uint8_t *data,
                uint16_t *stats);
/* y: the library's dequantized weight (bf16 values), as float. Nothing on a dry buffer. */
void quant_unpack(quant_format f, int64_t rows, int64_t cols, const uint8_t *data, const uint16_t *stats, float *y);

#endif
