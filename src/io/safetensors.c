#include "segtrain/safetensors.h"
#include "segtrain/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/fileio.h"

#define MAX_HEADER_BYTES (100u << 20) /* the reference implementation's limit */

struct sft_file {
    char *path;
    unsigned char *map;
    size_t map_size;
    cJSON *header; /* owns the tensor names and metadata strings */
    int n;
    sft_tensor *tensors;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {[SFT_F32] = {"F32", 4},    [SFT_F16] = {"F16", 2},          [SFT_BF16] = {"BF16", 2},
              [SFT_I64] = {"I64", 8},    [SFT_U8] = {"U8", 1},            [SFT_I8] = {"I8", 1},
              [SFT_F8_E4M3] = {"F8_E4M3", 1}, [SFT_F8_E5M2] = {"F8_E5M2", 1}};

size_t sft_dtype_size(sft_dtype t) { return dtypes[t].size; }
const char *sft_dtype_name(sft_dtype t) { return dtypes[t].name; }

/* A JSON number that is a whole number in [0, 2^53]: exact in a double. */
static int as_count(const cJSON *j, int64_t *out)
{
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || floor(v) != v) return 0;
    *out = (int64_t)v;
    return 1;
}

/* By (start, end): the walk's verdict must not depend on the header's key order. */
static int by_offset(const void *a, const void *b)
{
    const sft_tensor *x = a, *y = b;
    const unsigned char *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static st_status parse_tensor(const char *path, const cJSON *item, const unsigned char *buf, size_t buf_len,
                              sft_tensor *t)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item)) return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt)) return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': no dtype", path, name);
    if (!cJSON_IsArray(shape)) return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': no shape", path, name);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': data_offsets is not [begin, end]", path, name);
    t->name = name;
    int found = 0;
    for (int d = 0; d < (int)(sizeof dtypes / sizeof *dtypes); d++)
        if (!strcmp(dt->valuestring, dtypes[d].name)) t->dtype = (sft_dtype)d, found = 1;
    if (!found)
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16, "
                       "F8_E4M3, F8_E5M2, I64, U8, I8)", path, name,
                       dt->valuestring);
    t->ndim = cJSON_GetArraySize(shape);
    if (t->ndim > SFT_MAX_DIMS)
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': %d dimensions, at most %d supported", path, name, t->ndim,
                       SFT_MAX_DIMS);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (!as_count(cJSON_GetArrayItem(shape, d), &t->shape[d]))
            return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': shape entry %d is not a non-negative integer", path, name, d);
        if (t->shape[d] && numel > (UINT64_MAX / 8) / (uint64_t)t->shape[d])
            return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': shape is too large", path, name);
        numel *= (uint64_t)t->shape[d];
    }
    int64_t begin, end;
    if (!as_count(cJSON_GetArrayItem(offs, 0), &begin) || !as_count(cJSON_GetArrayItem(offs, 1), &end) || end < begin)
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': data_offsets is not [begin, end] with begin <= end", path, name);
    t->nbytes = (size_t)(end - begin);
    if (numel * dtypes[t->dtype].size != t->nbytes)
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': %zu bytes of data for %llu %s elements", path, name, t->nbytes,
                       (unsigned long long)numel, dtypes[t->dtype].name);
    if ((uint64_t)end > buf_len)
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': truncated file: data ends at byte %lld of a %zu-byte buffer",
                       path, name, (long long)end, buf_len);
    t->data = buf + begin;
    return ST_OK;
}

static st_status parse(sft_file *f)
{
    const char *path = f->path;
    if (f->map_size < 8)
        return st_fail(ST_ERR_FORMAT, "%s: %zu bytes is too short for a safetensors file", path, f->map_size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->map[i];
    if (hlen > f->map_size - 8 || hlen > MAX_HEADER_BYTES)
        return st_fail(ST_ERR_FORMAT, "%s: header length %llu does not fit the %zu-byte file (truncated or not safetensors)",
                       path, (unsigned long long)hlen, f->map_size);
    const char *hdr = (const char *)f->map + 8;
    if (hlen == 0 || hdr[0] != '{') return st_fail(ST_ERR_FORMAT, "%s: header is not a JSON object", path);
    f->header = cJSON_ParseWithLength(hdr, hlen);
    if (!cJSON_IsObject(f->header)) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= hdr && at <= hdr + hlen ? (long)(at - hdr) : -1;
        return st_fail(ST_ERR_FORMAT, "%s: header is not valid JSON (near header byte %ld)", path, off);
    }
    const unsigned char *buf = f->map + 8 + hlen;
    size_t buf_len = f->map_size - 8 - hlen;
    int n = 0;
    for (const cJSON *it = f->header->child; it; it = it->next) n += strcmp(it->string, "__metadata__") != 0;
    f->tensors = calloc(n ? (size_t)n : 1, sizeof *f->tensors);
    if (!f->tensors) return st_host_oom("the tensor list of %s", path);
    for (const cJSON *it = f->header->child; it; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) {
            if (!cJSON_IsObject(it)) return st_fail(ST_ERR_FORMAT, "%s: __metadata__ is not an object", path);
            for (const cJSON *m = it->child; m; m = m->next)
                if (!cJSON_IsString(m))
                    return st_fail(ST_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string", path, m->string);
            continue;
        }
        for (int j = 0; j < f->n; j++)
            if (!strcmp(f->tensors[j].name, it->string))
                return st_fail(ST_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", path, it->string);
        st_status s = parse_tensor(path, it, buf, buf_len, &f->tensors[f->n]);
        if (s) return s;
        f->n++;
    }
    /* The tensors must tile the buffer: sort by offset and walk it. A zero-byte tensor holds no byte, so it
     * overlaps nothing and fills no hole (its offsets were checked to lie in the buffer). */
    sft_tensor *sorted = malloc((n ? (size_t)n : 1) * sizeof *sorted);
    if (!sorted) return st_host_oom("the tensor list of %s", path);
    memcpy(sorted, f->tensors, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_offset);
    const unsigned char *expect = buf;
    st_status s = ST_OK;
    const char *prev = NULL;
    for (int i = 0; i < n && !s; i++) {
        const unsigned char *p = sorted[i].data;
        if (!sorted[i].nbytes) continue;
        if (p < expect)
            s = st_fail(ST_ERR_FORMAT, "%s: tensor '%s' overlaps tensor '%s'", path, sorted[i].name, prev);
        else if (p > expect)
            s = st_fail(ST_ERR_FORMAT, "%s: tensor '%s' leaves a hole of %zu bytes before it", path, sorted[i].name,
                        (size_t)(p - expect));
        expect = p + sorted[i].nbytes;
        prev = sorted[i].name;
    }
    if (!s && expect != buf + buf_len)
        s = st_fail(ST_ERR_FORMAT, "%s: %zu bytes after the last tensor belong to no tensor", path,
                    (size_t)(buf + buf_len - expect));
    free(sorted);
    return s;
}

st_status sft_open(const char *path, sft_file **out)
{
    *out = NULL;
    sft_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return st_host_oom("reading %s", path);
    }
    int fd;
    st_status s = file_open_regular(path, &fd);
    if (s) {
        sft_close(f);
        return s;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) s = st_fail(ST_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if ((f->map_size = (size_t)st.st_size) > 0) {
        void *m = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) s = st_fail(ST_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        else f->map = m;
    }
    close(fd);
    if (!s) s = parse(f);
    if (s) {
        sft_close(f);
        return s;
    }
    *out = f;
    return ST_OK;
}

void sft_close(sft_file *f)
{
    if (!f) return;
    if (f->map) munmap(f->map, f->map_size);
    cJSON_Delete(f->header);
    free(f->tensors);
    free(f->path);
    free(f);
}

const char *sft_path(const sft_file *f) { return f->path; }
int sft_count(const sft_file *f) { return f->n; }
const sft_tensor *sft_at(const sft_file *f, int i) { return i >= 0 && i < f->n ? &f->tensors[i] : NULL; }

const sft_tensor *sft_find(const sft_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

const char *sft_metadata(const sft_file *f, const char *key)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
    const cJSON *v = m ? cJSON_GetObjectItemCaseSensitive(m, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void format_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < n) snprintf(buf + at, n - at, ndim == 1 ? ",)" : ")");
}

/* Finds `name` and checks its shape; the dtype check is the caller's. */
static st_status lookup(const sft_file *f, const char *name, int ndim, const int64_t *shape, const sft_tensor **out)
{
    const sft_tensor *t = sft_find(f, name);
    if (!t) return st_fail(ST_ERR_FORMAT, "%s: tensor '%s' is missing", f->path, name);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char got[160], want[160];
        format_shape(got, sizeof got, t->ndim, t->shape);
        format_shape(want, sizeof want, ndim, shape);
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", f->path, name, got, want);
    }
    *out = t;
    return ST_OK;
}

st_status sft_read_f32(const sft_file *f, const char *name, int ndim, const int64_t *shape, float *dst)
{
    const sft_tensor *t;
    st_status s = lookup(f, name, ndim, shape, &t);
    if (s) return s;
    size_t n = t->nbytes / dtypes[t->dtype].size;
    const unsigned char *src = t->data;
    switch (t->dtype) {
    case SFT_F32: memcpy(dst, src, t->nbytes); return ST_OK;
    case SFT_F16:
    case SFT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
            dst[i] = t->dtype == SFT_F16 ? sft_f16_to_f32(h) : sft_bf16_to_f32(h);
        }
        return ST_OK;
    case SFT_F8_E4M3:
    case SFT_F8_E5M2:
        for (size_t i = 0; i < n; i++)
            dst[i] = t->dtype == SFT_F8_E4M3 ? sft_f8e4m3_to_f32(src[i]) : sft_f8e5m2_to_f32(src[i]);
        return ST_OK;
    case SFT_I64:
    case SFT_U8:
    case SFT_I8: break;
    }
    return st_fail(ST_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected a float (F32, F16, BF16, F8_E4M3, F8_E5M2)",
                   f->path, name,
                   dtypes[t->dtype].name);
}

st_status sft_read_i64(const sft_file *f, const char *name, int ndim, const int64_t *shape, int64_t *dst)
{
    const sft_tensor *t;
    st_status s = lookup(f, name, ndim, shape, &t);
    if (s) return s;
    if (t->dtype != SFT_I64)
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected I64", f->path, name,
                       dtypes[t->dtype].name);
    memcpy(dst, t->data, t->nbytes);
    return ST_OK;
}

static st_status build_header(const char *path, const sft_entry *e, int n, const char *const *meta, int n_meta,
                              char **out, size_t *padded_len)
{
    cJSON *root = cJSON_CreateObject();
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]);
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        cJSON *t = cJSON_AddObjectToObject(root, e[i].name);
        cJSON_AddStringToObject(t, "dtype", dtypes[e[i].dtype].name);
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        uint64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)e[i].shape[d]));
            numel *= (uint64_t)e[i].shape[d];
        }
        uint64_t bytes = numel * dtypes[e[i].dtype].size;
        cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(offset + bytes)));
        offset += bytes;
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return st_host_oom("the header of %s", path);
    size_t len = strlen(json), padded = (len + 7) / 8 * 8; /* pad with spaces to 8 bytes, as the format suggests */
    char *h = realloc(json, padded + 1);
    if (!h) {
        free(json);
        return st_host_oom("the header of %s", path);
    }
    memset(h + len, ' ', padded - len);
    h[padded] = 0;
    *out = h;
    *padded_len = padded;
    return ST_OK;
}

size_t sft_file_bytes(const sft_entry *entries, int n, const char *const *meta, int n_meta)
{
    char *header = NULL;
    size_t hlen = 0;
    if (build_header("a file's size", entries, n, meta, n_meta, &header, &hlen)) return 0;
    free(header);
    size_t bytes = 8 + hlen;
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < entries[i].ndim; d++) numel *= (size_t)entries[i].shape[d];
        bytes += numel * dtypes[entries[i].dtype].size;
    }
    return bytes;
}

st_status sft_write(const char *path, const sft_entry *entries, int n, const char *const *meta, int n_meta)
{
    char *header = NULL;
    size_t hlen = 0;
    st_status s = build_header(path, entries, n, meta, n_meta, &header, &hlen);
    if (s) return s;
    atomic_file af;
    if ((s = atomic_file_open(&af, path))) {
        free(header);
        return s;
    }
    unsigned char len_le[8];
    for (int i = 0; i < 8; i++) len_le[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(len_le, 1, 8, af.fp) == 8 && fwrite(header, 1, hlen, af.fp) == hlen;
    free(header);
    for (int i = 0; ok && i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < entries[i].ndim; d++) numel *= (size_t)entries[i].shape[d];
        size_t bytes = numel * dtypes[entries[i].dtype].size;
        ok = bytes == 0 || fwrite(entries[i].data, 1, bytes, af.fp) == bytes;
    }
    if (!ok) {
        s = st_fail(ST_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        atomic_file_abort(&af);
        return s;
    }
    return atomic_file_commit(&af);
}

/* Half-precision conversions, round to nearest even. */
uint16_t sft_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float sft_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

float sft_f8e4m3_to_f32(uint8_t b)
{
    const int e = (b >> 3) & 15, m = b & 7;
    const float a = e == 15 && m == 7 ? NAN : e ? ldexpf(1.0f + (float)m / 8.0f, e - 7) : ldexpf((float)m, -9);
    return b & 0x80 ? -a : a;
}

float sft_f8e5m2_to_f32(uint8_t b) { return sft_f16_to_f32((uint16_t)(b << 8)); }

uint8_t sft_f32_to_f8e4m3(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    const float a = fabsf(x);
    if (a != a) return sign | 0x7f;
    if (a < 0x1p-6f) return sign | (uint8_t)nearbyintf(a * 0x1p9f); /* subnormal: steps of 2^-9, 8 the least normal */
    uint32_t au = u & 0x7fffffffu;
    au += 0x7ffffu + ((au >> 20) & 1); /* to 3 mantissa bits, ties to even */
    return sign | (uint8_t)((((au >> 23) - 120) << 3) | ((au >> 20) & 7));
}

uint16_t sft_f32_to_f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                   /* below the smallest normal half: subnormal or 0 */
        float f;
        memcpy(&f, &a, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(f * 16777216.0f)); /* multiples of 2^-24, ties to even */
    }
    uint32_t mant_odd = (a >> 13) & 1;
    a += 0xfffu + mant_odd - (112u << 23); /* rebias the exponent, round to nearest even */
    return (uint16_t)(sign | (a >> 13));
}

float sft_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    float x;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24 */
        x = (float)mant * (1.0f / 16777216.0f);
        uint32_t u;
        memcpy(&u, &x, 4);
        u |= sign;
        memcpy(&x, &u, 4);
        return x;
    }
    uint32_t u = exp == 31 ? sign | 0x7f800000u | mant << 13 : sign | (exp + 112) << 23 | mant << 13;
    memcpy(&x, &u, 4);
    return x;
}
