/* safetensors files: read by mapping the file, written atomically.
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON header
 * ({"__metadata__": {string: string}, name: {"dtype", "shape", "data_offsets": [begin, end]}}), then the byte
 * buffer the offsets index. Opening validates everything before any tensor is read: header length and JSON,
 * dtypes, shapes, that each tensor's byte size matches its shape and that the tensors tile the buffer exactly
 * (no holes, no overlaps, nothing past the end of the file). Every error is one line naming the file and,
 * where there is one, the tensor. */
#ifndef SEGTRAIN_SAFETENSORS_H
#define SEGTRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "segtrain/status.h"

#define SFT_MAX_DIMS 8

/* F8_E4M3 (float8_e4m3fn: no infinities, S.1111.111 NaN) and F8_E5M2 (a half's high byte) are read as float, as a
 * pre-quantized fp8 checkpoint stores its weights; U8 and I8 are raw bytes (packed quantized data). */
typedef enum sft_dtype { SFT_F32, SFT_F16, SFT_BF16, SFT_I64, SFT_U8, SFT_I8, SFT_F8_E4M3, SFT_F8_E5M2 } sft_dtype;

typedef struct sft_tensor {
    const char *name;
    sft_dtype dtype;
    int ndim;
    int64_t shape[SFT_MAX_DIMS];
    const void *data; /* into the mapping; little-endian, possibly unaligned for its dtype */
    size_t nbytes;
} sft_tensor;

typedef struct sft_file sft_file;

st_status sft_open(const char *path, sft_file **out);
void sft_close(sft_file *f);

const char *sft_path(const sft_file *f);
int sft_count(const sft_file *f);
const sft_tensor *sft_at(const sft_file *f, int i);
const sft_tensor *sft_find(const sft_file *f, const char *name); /* NULL if absent */
const char *sft_metadata(const sft_file *f, const char *key);    /* NULL if absent */

/* Copies tensor `name` into dst as float (F32, F16, BF16, F8_E4M3 and F8_E5M2 convert), after checking that it
 * exists and has exactly `shape`. */
st_status sft_read_f32(const sft_file *f, const char *name, int ndim, const int64_t *shape, float *dst);
/* As sft_read_f32 for I64 tensors. */
st_status sft_read_i64(const sft_file *f, const char *name, int ndim, const int64_t *shape, int64_t *dst);

/* One tensor to write: `data` holds numel elements of `dtype` in native (little-endian) order. */
typedef struct sft_entry {
    const char *name;
    sft_dtype dtype;
    int ndim;
    int64_t shape[SFT_MAX_DIMS];
    const void *data;
} sft_entry;

/* Writes the entries (in the given order) and the metadata pairs meta[2*i] -> meta[2*i+1] to path atomically:
 * a temporary file in the same folder, fsync, rename, fsync of the folder. A failure leaves path untouched. */
st_status sft_write(const char *path, const sft_entry *entries, int n, const char *const *meta, int n_meta);

/* The bytes sft_write writes for these entries and metadata (0: no memory to build the header). */
size_t sft_file_bytes(const sft_entry *entries, int n, const char *const *meta, int n_meta);

size_t sft_dtype_size(sft_dtype t);
const char *sft_dtype_name(sft_dtype t);
uint16_t sft_f32_to_f16(float x);
uint16_t sft_f32_to_bf16(float x);
float sft_f16_to_f32(uint16_t h);
float sft_bf16_to_f32(uint16_t h);
float sft_f8e4m3_to_f32(uint8_t b);
float sft_f8e5m2_to_f32(uint8_t b);
/* x rounded to float8_e4m3fn, to nearest even, as torch's .to(torch.float8_e4m3fn); |x| <= 448 (no saturation). */
uint8_t sft_f32_to_f8e4m3(float x);

#endif
