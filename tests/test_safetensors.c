/* safetensors: round trips of every dtype, and one clear error for each way a file can be broken. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segtrain/lin.h"
#include "segtrain/params.h"
#include "segtrain/quant.h"
#include "segtrain/safetensors.h"
#include "testkit.h"

static char dir[256];

/* Writes a file from a header (padded by nothing) and raw data bytes. */
static const char *craft(const char *name, const char *header, const void *data, size_t n)
{
    const char *p = tk_path(dir, name);
    FILE *f = fopen(p, "wb");
    uint64_t len = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(len >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, len, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
    return p;
}

/* Opening must fail with ST_ERR_FORMAT and a message containing each of the given fragments. */
static void expect_open_error(const char *what, const char *path, const char *frag1, const char *frag2)
{
    sft_file *f = (sft_file *)1;
    st_status st = sft_open(path, &f);
    const char *msg = st_error();
    CHECKF(st != ST_OK && f == NULL, "%s: opened a broken file", what);
    CHECKF(strstr(msg, path) != NULL, "%s: message does not name the file: %s", what, msg);
    CHECKF(!frag1 || strstr(msg, frag1), "%s: message lacks '%s': %s", what, frag1, msg);
    CHECKF(!frag2 || strstr(msg, frag2), "%s: message lacks '%s': %s", what, frag2, msg);
    printf("     %s -> %s\n", what, msg);
}

static void test_round_trip(void)
{
    float f32[6] = {1.5f, -2.25f, 0.0f, 3.0e-5f, 65504.0f, -1e30f};
    uint16_t f16[3] = {sft_f32_to_f16(1.0f), sft_f32_to_f16(-0.5f), sft_f32_to_f16(6.1035156e-05f)};
    uint16_t bf16[2] = {sft_f32_to_bf16(3.140625f), sft_f32_to_bf16(-1e30f)};
    int64_t i64[3] = {0, -7, 1234567890123ll};
    sft_entry e[] = {
        {.name = "a.weight", .dtype = SFT_F32, .ndim = 2, .shape = {2, 3}, .data = f32},
        {.name = "half", .dtype = SFT_F16, .ndim = 1, .shape = {3}, .data = f16},
        {.name = "brain", .dtype = SFT_BF16, .ndim = 2, .shape = {1, 2}, .data = bf16},
        {.name = "ids", .dtype = SFT_I64, .ndim = 1, .shape = {3}, .data = i64},
        {.name = "scalar", .dtype = SFT_F32, .ndim = 0, .data = f32},
    };
    const char *meta[] = {"format", "pt", "note", "quotes \" and \\ survive"};
    const char *p = tk_path(dir, "round.safetensors");
    CHECK(sft_write(p, e, 5, meta, 2) == ST_OK);
    CHECK(access(tk_path(dir, "round.safetensors.tmp"), F_OK) != 0);
    sft_file *f;
    CHECKF(sft_open(p, &f) == ST_OK, "%s", st_error());
    if (!f) return;
    CHECK(sft_count(f) == 5);
    CHECK(sft_metadata(f, "format") && !strcmp(sft_metadata(f, "format"), "pt"));
    CHECK(sft_metadata(f, "note") && !strcmp(sft_metadata(f, "note"), "quotes \" and \\ survive"));
    CHECK(sft_metadata(f, "absent") == NULL);
    float back[6];
    CHECK(sft_read_f32(f, "a.weight", 2, (int64_t[]){2, 3}, back) == ST_OK && !memcmp(back, f32, sizeof f32));
    CHECK(sft_read_f32(f, "half", 1, (int64_t[]){3}, back) == ST_OK);
    CHECK(back[0] == 1.0f && back[1] == -0.5f && back[2] == 6.1035156e-05f);
    CHECK(sft_read_f32(f, "brain", 2, (int64_t[]){1, 2}, back) == ST_OK);
    CHECK(back[0] == 3.140625f && fabsf(back[1] + 1e30f) < 1e28f);
    int64_t ib[3];
    CHECK(sft_read_i64(f, "ids", 1, (int64_t[]){3}, ib) == ST_OK && !memcmp(ib, i64, sizeof i64));
    CHECK(sft_read_f32(f, "scalar", 0, NULL, back) == ST_OK && back[0] == 1.5f);

    /* each read error names the file and the tensor */
    CHECK(sft_read_f32(f, "missing.weight", 1, (int64_t[]){3}, back) == ST_ERR_FORMAT);
    CHECKF(strstr(st_error(), "missing.weight") && strstr(st_error(), "missing"), "%s", st_error());
    CHECK(sft_read_f32(f, "a.weight", 2, (int64_t[]){3, 2}, back) == ST_ERR_FORMAT);
    CHECKF(strstr(st_error(), "a.weight") && strstr(st_error(), "(2, 3)") && strstr(st_error(), "(3, 2)"), "%s",
           st_error());
    CHECK(sft_read_f32(f, "ids", 1, (int64_t[]){3}, back) == ST_ERR_FORMAT);
    CHECKF(strstr(st_error(), "ids") && strstr(st_error(), "I64"), "%s", st_error());
    CHECK(sft_read_i64(f, "half", 1, (int64_t[]){3}, ib) == ST_ERR_FORMAT);
    CHECKF(strstr(st_error(), "half") && strstr(st_error(), "F16"), "%s", st_error());
    sft_close(f);
}

static void test_half_conversions(void)
{
    CHECK(sft_f32_to_f16(1.0f) == 0x3c00 && sft_f32_to_f16(-2.0f) == 0xc000);
    CHECK(sft_f32_to_f16(65504.0f) == 0x7bff && sft_f32_to_f16(65520.0f) == 0x7c00); /* max, then inf */
    CHECK(sft_f32_to_f16(5.9604645e-08f) == 0x0001);                                  /* smallest subnormal */
    CHECK(sft_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00);           /* a tie rounds to even (down) */
    CHECK(sft_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02);           /* a tie rounds to even (up) */
    CHECK(sft_f16_to_f32(0x7c00) == INFINITY && isnan(sft_f16_to_f32(0x7e00)));
    CHECK(sft_f16_to_f32(0x0001) == 5.9604645e-08f && sft_f16_to_f32(0x3555) == 0.33325195f);
    CHECK(sft_f32_to_bf16(1.0f) == 0x3f80 && sft_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(sft_f32_to_bf16(1.00390625f) == 0x3f80); /* tie to even */
    CHECK(isnan(sft_bf16_to_f32(sft_f32_to_bf16(NAN))));
    int exact = 1;
    for (uint32_t h = 0; h < 0x7c00; h++) exact &= sft_f32_to_f16(sft_f16_to_f32((uint16_t)h)) == h;
    CHECKF(exact, "every finite half survives a round trip through float");
}

static void test_broken_files(void)
{
    unsigned char data[24] = {0};
    const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    sft_file *f;
    CHECKF(sft_open(craft("ok.safetensors", ok, data, 24), &f) == ST_OK, "%s", st_error());
    sft_close(f);

    expect_open_error("truncated data", craft("trunc.safetensors", ok, data, 20), "'w'", "truncated");
    expect_open_error("trailing bytes",
                      craft("extra.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                            data, 12),
                      "belong to no tensor", NULL);
    expect_open_error("unknown dtype",
                      craft("dtype.safetensors", "{\"w\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[0,24]}}",
                            data, 24),
                      "'w'", "F64");
    expect_open_error("size mismatch",
                      craft("size.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[0,24]}}",
                            data, 24),
                      "'w'", "24 bytes");
    expect_open_error("overlap",
                      craft("overlap.safetensors",
                            "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                            data, 24),
                      "overlaps", NULL);
    /* a zero-byte tensor occupies no byte: accepted before, after or inside another tensor, in any key order */
    const char *empties[] = {"{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                             "\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}",
                             "{\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
                             "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                             "{\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
                             "\"e\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[8,8]}}",
                             "{\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
                             "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[24,24]}}"};
    for (int i = 0; i < 4; i++) {
        f = NULL;
        CHECKF(sft_open(craft("empty.safetensors", empties[i], data, 24), &f) == ST_OK && sft_find(f, "e") &&
                   sft_find(f, "e")->nbytes == 0,
               "zero-byte tensor, header %d: %s", i, st_error());
        sft_close(f);
    }
    expect_open_error("overlap, the other key order",
                      craft("overlap2.safetensors",
                            "{\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]},"
                            "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                            data, 24),
                      "overlaps", NULL);
    expect_open_error("hole",
                      craft("hole.safetensors",
                            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
                            data, 24),
                      "'b'", "hole");
    expect_open_error("duplicate",
                      craft("dup.safetensors",
                            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                            data, 16),
                      "'a'", "twice");
    expect_open_error("not JSON", craft("json.safetensors", "{\"w\": [1, 2", data, 0), "JSON", NULL);
    expect_open_error("negative shape",
                      craft("neg.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
                            data, 8),
                      "'w'", "shape");
    expect_open_error("bad offsets",
                      craft("offs.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
                            data, 8),
                      "'w'", "data_offsets");
    expect_open_error("metadata not strings",
                      craft("meta.safetensors", "{\"__metadata__\":{\"n\":3}}", data, 0), "__metadata__", NULL);

    /* a header length beyond the file, and a file shorter than the length field */
    const char *p = tk_path(dir, "len.safetensors");
    FILE *fp = fopen(p, "wb");
    unsigned char big[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    fwrite(big, 1, 8, fp);
    fputs("{}", fp);
    fclose(fp);
    expect_open_error("header length", p, "header length", NULL);
    p = tk_path(dir, "short.safetensors");
    fp = fopen(p, "wb");
    fputs("abc", fp);
    fclose(fp);
    expect_open_error("too short", p, "too short", NULL);

    CHECK(sft_open(tk_path(dir, "does-not-exist.safetensors"), &f) == ST_ERR_IO);
    CHECKF(strstr(st_error(), "does-not-exist.safetensors") && strstr(st_error(), "No such file"), "%s", st_error());
}

static void test_param_files(void)
{
    pool *p = pool_create(POOL_DEVICE, 0);
    param_set s = {0};
    param_add(&s, "a.weight", 2, (int64_t[]){2, 3}, true);
    param_add(&s, "a.bias", 1, (int64_t[]){2}, true);
    param_add_fixed(&s, "pos", 1, (int64_t[]){4});
    CHECK(param_set_alloc(&s, p) == ST_OK);
    CHECK(s.weight_count == 12 && s.grad_count == 8 && param_find(&s, "pos")->g == NULL);
    for (int i = 0; i < 12; i++) s.weights[i] = (float)i;
    const char *file = tk_path(dir, "params.safetensors");
    CHECK(param_set_save(&s, file, PARAMS_ALL, false, NULL, 0, NULL, 0) == ST_OK);
    memset(s.weights, 0, 12 * sizeof(float));
    CHECKF(param_set_load(&s, file, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    CHECK(s.weights[7] == 7.0f && s.weights[11] == 11.0f);

    /* a file without the fixed buffer loads; one without a trainable tensor, or with a stranger, does not */
    float w[6] = {0}, b[2] = {0}, extra[1] = {0};
    sft_entry e[] = {{.name = "a.weight", .dtype = SFT_F32, .ndim = 2, .shape = {2, 3}, .data = w},
                     {.name = "a.bias", .dtype = SFT_F32, .ndim = 1, .shape = {2}, .data = b},
                     {.name = "stranger", .dtype = SFT_F32, .ndim = 1, .shape = {1}, .data = extra}};
    CHECK(sft_write(file, e, 2, NULL, 0) == ST_OK);
    CHECKF(param_set_load(&s, file, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    CHECK(sft_write(file, e + 1, 1, NULL, 0) == ST_OK);
    CHECK(param_set_load(&s, file, PARAMS_ALL, NULL) == ST_ERR_FORMAT);
    CHECKF(strstr(st_error(), "'a.weight' is missing"), "%s", st_error());
    CHECK(sft_write(file, e, 3, NULL, 0) == ST_OK);
    CHECK(param_set_load(&s, file, PARAMS_ALL, NULL) == ST_ERR_FORMAT);
    CHECKF(strstr(st_error(), "unexpected tensor 'stranger'"), "%s", st_error());
    param_set_free(&s);
    CHECK(pool_destroy(p) == 0);
}

/* float8: every e4m3fn code decodes and rounds back to itself, ties go to even, e5m2 is a half's high byte; U8 and I8
 * open as bytes and are no floats */
static void test_fp8_conversions(void)
{
    CHECK(sft_f8e4m3_to_f32(0x7e) == 448.0f && sft_f8e4m3_to_f32(0x38) == 1.0f && sft_f8e4m3_to_f32(0x08) == 0x1p-6f);
    CHECK(sft_f8e4m3_to_f32(0x01) == 0x1p-9f && sft_f8e4m3_to_f32(0xb8) == -1.0f && isnan(sft_f8e4m3_to_f32(0x7f)));
    CHECK(sft_f8e5m2_to_f32(0x3c) == 1.0f && sft_f8e5m2_to_f32(0x7b) == 57344.0f && isinf(sft_f8e5m2_to_f32(0x7c)));
    int back = 0;
    for (int b = 0; b < 256; b++) back += (b & 0x7f) == 0x7f || sft_f32_to_f8e4m3(sft_f8e4m3_to_f32((uint8_t)b)) == b;
    CHECKF(back == 256, "%d of 256 e4m3fn codes round back to themselves", back);
    CHECK(sft_f32_to_f8e4m3(1.0625f) == 0x38 && sft_f32_to_f8e4m3(1.1875f) == 0x3a); /* ties to even */
    CHECK(sft_f32_to_f8e4m3(0x1p-10f) == 0x00 && sft_f32_to_f8e4m3(0x3p-10f) == 0x02); /* subnormal ties */
    unsigned char data[4] = {1, 2, 3, 4};
    const char *path = craft("u8.safetensors", "{\"q\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                             data, 4);
    sft_file *f;
    CHECKF(sft_open(path, &f) == ST_OK, "%s", st_error());
    float x[4];
    CHECK(sft_read_f32(f, "q", 1, (int64_t[]){4}, x) == ST_ERR_FORMAT &&
          strstr(st_error(), "has dtype U8, expected a float"));
    sft_close(f);
}

/* A pre-quantized fp8 checkpoint (Ideogram's fp8 flavour, ComfyUI's scaled fp8): an F8_E4M3 weight with its scale
 * beside it (one a row as "<layer>.weight_scale", one for the tensor as "<layer>.scale_weight"), an F8_E5M2 one
 * without, loads unchanged into a float base, a bf16 one and a quantized one; a scale of the wrong size, or beside a
 * weight that is no fp8, is refused. */
static void test_fp8_checkpoint(void)
{
    pool *p = pool_create(POOL_DEVICE, 0);
    param_set s = {0};
    param_add(&s, "a.weight", 2, (int64_t[]){2, 3}, false);
    param_add(&s, "b.weight", 2, (int64_t[]){2, 3}, false);
    param_add(&s, "c.weight", 2, (int64_t[]){2, 3}, false);
    CHECK(param_set_alloc(&s, p) == ST_OK);
    const uint8_t a[6] = {0x38, 0x40, 0xb8, 0x7e, 0x01, 0x00}, c[6] = {0x3c, 0x40, 0xbc, 0x7b, 0x01, 0x00};
    const float a_scale[2] = {0.5f, 3.0f}, b_scale[1] = {0.25f};
    sft_entry e[] = {{.name = "a.weight", .dtype = SFT_F8_E4M3, .ndim = 2, .shape = {2, 3}, .data = a},
                     {.name = "a.weight_scale", .dtype = SFT_F32, .ndim = 1, .shape = {2}, .data = a_scale},
                     {.name = "b.weight", .dtype = SFT_F8_E4M3, .ndim = 2, .shape = {2, 3}, .data = a},
                     {.name = "b.scale_weight", .dtype = SFT_F32, .ndim = 0, .data = b_scale},
                     {.name = "c.weight", .dtype = SFT_F8_E5M2, .ndim = 2, .shape = {2, 3}, .data = c}};
    const char *file = tk_path(dir, "fp8.safetensors");
    CHECK(sft_write(file, e, 5, NULL, 0) == ST_OK);
    CHECKF(param_set_load(&s, file, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    const float *w = param_find(&s, "a.weight")->w, *v = param_find(&s, "b.weight")->w;
    const float *u = param_find(&s, "c.weight")->w;
    CHECK(w[0] == 0.5f && w[1] == 1.0f && w[2] == -0.5f && w[3] == 1344.0f && w[4] == 3.0f * 0x1p-9f && w[5] == 0.0f);
    CHECK(v[0] == 0.25f && v[3] == 112.0f && u[0] == 1.0f && u[3] == 57344.0f);
    param_set_free(&s);

    /* into a quantized base: rounded to bf16 and quantized, as SimpleTuner quantizes its bf16 model */
    s = (param_set){.quant_base = QUANT_INT8};
    lin_layer l = lin_register(&s, "a", 3, 2, false, 0, 0, false);
    CHECK(param_set_alloc(&s, p) == ST_OK && param_at(&s, l.w)->quant == QUANT_INT8);
    CHECK(sft_write(file, e, 2, NULL, 0) == ST_OK);
    CHECKF(param_set_load(&s, file, PARAMS_ALL, NULL) == ST_OK, "%s", st_error());
    const float scaled[6] = {0.5f, 1.0f, -0.5f, 1344.0f, 3.0f * 0x1p-9f, 0.0f}; /* each exact in bf16 */
    uint16_t h[6], stats[2];
    uint8_t data[6];
    for (int i = 0; i < 6; i++) h[i] = sft_f32_to_bf16(scaled[i]);
    quant_pack(QUANT_INT8, 2, 3, 2, h, data, stats);
    CHECK(!memcmp(data, param_at(&s, l.w)->wq, 6) && !memcmp(stats, param_at(&s, l.w)->wq_stats, 4));
    param_set_free(&s);

    s = (param_set){0};
    param_add(&s, "a.weight", 2, (int64_t[]){2, 3}, false);
    CHECK(param_set_alloc(&s, p) == ST_OK);
    const float wide[3] = {1, 2, 3};
    sft_entry bad[] = {e[0], {.name = "a.weight_scale", .dtype = SFT_F32, .ndim = 1, .shape = {3}, .data = wide}};
    CHECK(sft_write(file, bad, 2, NULL, 0) == ST_OK);
    CHECK(param_set_load(&s, file, PARAMS_ALL, NULL) == ST_ERR_FORMAT);
    CHECKF(strstr(st_error(), "fp8 scale 'a.weight_scale' has 3 values"), "%s", st_error());
    float f32[6] = {0};
    sft_entry plain[] = {{.name = "a.weight", .dtype = SFT_F32, .ndim = 2, .shape = {2, 3}, .data = f32}, e[1]};
    CHECK(sft_write(file, plain, 2, NULL, 0) == ST_OK);
    CHECK(param_set_load(&s, file, PARAMS_ALL, NULL) == ST_ERR_FORMAT);
    CHECKF(strstr(st_error(), "unexpected tensor 'a.weight_scale'"), "%s", st_error());
    param_set_free(&s);
    CHECK(pool_destroy(p) == 0);
}

/* An output path that is a symlink is written through (the link stays, its target changes); one that exists but
 * is not a regular file is refused and left as it was. */
static void test_output_paths(void)
{
    float v[2] = {1.0f, 2.0f};
    const sft_entry e[] = {{.name = "v", .dtype = SFT_F32, .ndim = 1, .shape = {2}, .data = v}};
    CHECK(mkdir(tk_path(dir, "sub"), 0755) == 0);
    CHECK(sft_write(tk_path(dir, "sub/target.safetensors"), e, 1, NULL, 0) == ST_OK);
    CHECK(symlink("sub/target.safetensors", tk_path(dir, "link.safetensors")) == 0); /* relative to its folder */
    CHECK(symlink("link.safetensors", tk_path(dir, "link2.safetensors")) == 0);       /* a chain */
    CHECK(symlink("sub/new.safetensors", tk_path(dir, "dangling.safetensors")) == 0); /* to a file not there yet */
    v[0] = 5.0f;
    CHECKF(sft_write(tk_path(dir, "link2.safetensors"), e, 1, NULL, 0) == ST_OK, "%s", st_error());
    CHECKF(sft_write(tk_path(dir, "dangling.safetensors"), e, 1, NULL, 0) == ST_OK, "%s", st_error());
    struct stat st;
    const char *links[] = {"link.safetensors", "link2.safetensors", "dangling.safetensors"};
    for (int i = 0; i < 3; i++)
        CHECKF(lstat(tk_path(dir, links[i]), &st) == 0 && S_ISLNK(st.st_mode), "%s is still a symlink", links[i]);
    const char *targets[] = {"sub/target.safetensors", "sub/new.safetensors"};
    for (int i = 0; i < 2; i++) {
        sft_file *f = NULL;
        float back[2] = {0};
        CHECKF(lstat(tk_path(dir, targets[i]), &st) == 0 && S_ISREG(st.st_mode), "%s is a regular file", targets[i]);
        CHECKF(sft_open(tk_path(dir, targets[i]), &f) == ST_OK && sft_read_f32(f, "v", 1, (int64_t[]){2}, back) == ST_OK &&
                   back[0] == 5.0f,
               "the link's target %s holds the new contents", targets[i]);
        sft_close(f);
    }

    const char *fifo = tk_path(dir, "fifo.safetensors");
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK(mkdir(tk_path(dir, "folder.safetensors"), 0755) == 0);
    const char *refused[] = {"fifo.safetensors", "folder.safetensors"}, *kind[] = {"a FIFO", "a folder"};
    for (int i = 0; i < 2; i++) {
        const char *p = tk_path(dir, refused[i]);
        CHECK(sft_write(p, e, 1, NULL, 0) == ST_ERR_IO);
        CHECKF(strstr(st_error(), p) && strstr(st_error(), kind[i]) && strstr(st_error(), "not a regular file"),
               "writing over %s is refused naming the path and what it is: %s", kind[i], st_error());
        printf("     %s\n", st_error());
    }
    CHECKF(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still a FIFO");
    char *ls = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&ls, &n);
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) fprintf(out, "%s ", de->d_name);
    if (d) closedir(d);
    fclose(out);
    CHECKF(ls && !strstr(ls, ".tmp."), "no temporary file is left: %s", ls ? ls : "");
    free(ls);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/segtrain-test-sft-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char cmd[300];
    test_round_trip();
    test_half_conversions();
    test_broken_files();
    test_param_files();
    test_fp8_conversions();
    test_fp8_checkpoint();
    test_output_paths();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return tk_finish();
}
