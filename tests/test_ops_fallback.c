/* CUDA fallbacks on the CPU build (ops.h, ops/fallback.h): with the test's memory declared the device's, the cases
 * the CUDA kernels leave to the CPU (attention with a mask, cross-, linear or math attention; any convolution) are
 * counted by op and case, the cases they serve are not, and SEGTRAIN_STRICT_OPS=1 refuses a fallback, naming the op
 * and the case, before it computes anything. The CUDA build takes the same path on managed memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/ops.h"
#include "testkit.h"

static bool any_memory(const void *p) { return p != NULL; }

static int64_t calls_of(const char *op, const char *why)
{
    int n;
    const op_fallback *f = ops_fallbacks(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i].op, op) && !strcmp(f[i].why, why)) return f[i].calls;
    return 0;
}

static int64_t all_calls(void)
{
    int n;
    int64_t sum = 0;
    const op_fallback *f = ops_fallbacks(&n);
    for (int i = 0; i < n; i++) sum += f[i].calls;
    return sum;
}

enum { B = 1, T = 8, TK = 4, H = 2, HD = 4, W = H * HD };
static float q[B * T * W], k[B * T * W], v[B * T * W], o[B * T * W], bias[B * T];

static st_status attend(attention_mechanism m, int64_t kv_tokens, const attn_mask *mask)
{
    const attn_shape s = {B, T, H, HD, m, kv_tokens, 0, 0};
    const int64_t tk = kv_tokens ? kv_tokens : T;
    const attn_view vo = {o, W, T * W}, vq = {q, W, T * W}, vk = {k, W, tk * W}, vv = {v, W, tk * W};
    pool *p = pool_create(POOL_DEVICE, 0);
    const st_status st = attention_forward_masked(p, &s, mask, vo, vq, vk, vv, NULL);
    pool_destroy(p);
    return st;
}

static st_status convolve(float *y)
{
    static float x[1 * 2 * 4 * 4], w[3 * 2 * 3 * 3];
    const conv_shape s = {.batch = 1, .in = 2, .h = 4, .w = 4, .out = 3, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1,
                          .pw = 1};
    pool *p = pool_create(POOL_DEVICE, 0);
    const st_status st = conv2d_forward(p, y, x, w, NULL, &s);
    pool_destroy(p);
    return st;
}

int main(void)
{
    unsetenv("SEGTRAIN_STRICT_OPS");
    tk_fill(q, B * T * W, 1, -1, 1), tk_fill(k, B * T * W, 2, -1, 1), tk_fill(v, B * T * W, 3, -1, 1);
    const attn_mask mask = {.key_bias = bias};
    float y[1 * 3 * 4 * 4];

    /* the CPU backend has no device memory: nothing falls back */
    CHECK(attend(ATTN_FLASH, 0, &mask) == ST_OK && convolve(y) == ST_OK && all_calls() == 0);

    /* the test's memory declared the device's: the CUDA build's path */
    ops_fallback_device(any_memory);
    CHECK(attend(ATTN_FLASH, 0, NULL) == ST_OK && attend(ATTN_FLASH, 0, NULL) == ST_OK);
    CHECKF(all_calls() == 0, "plain flash self-attention is served, yet %lld calls fell back", (long long)all_calls());
    CHECK(attend(ATTN_FLASH, 0, &mask) == ST_OK && attend(ATTN_FLASH, 0, &mask) == ST_OK);
    CHECK(attend(ATTN_FLASH, TK, NULL) == ST_OK && attend(ATTN_LINEAR, 0, NULL) == ST_OK);
    CHECK(attend(ATTN_MATH, 0, NULL) == ST_OK && convolve(y) == ST_OK);
    CHECKF(calls_of("attention_forward", "mask") == 2 && calls_of("attention_forward", "cross (Tq != Tk)") == 1 &&
               calls_of("attention_forward", "linear") == 1 && calls_of("attention_forward", "math") == 1 &&
               calls_of("conv2d_forward", "no device kernel") == 1 && all_calls() == 6,
           "counted %lld calls", (long long)all_calls());

    /* strict: refused with the op and the case named, nothing computed, nothing counted */
    setenv("SEGTRAIN_STRICT_OPS", "1", 1);
    memset(o, 0, sizeof o);
    st_status st = attend(ATTN_FLASH, 0, &mask);
    CHECKF(st == ST_ERR_UNSUPPORTED && strstr(st_error(), "attention_forward: mask") && o[0] == 0 && o[B * T * W - 1] == 0,
           "strict: status %d, '%s'", (int)st, st_error());
    printf("     strict -> %s\n", st_error());
    for (int i = 0; i < 1 * 3 * 4 * 4; i++) y[i] = 7;
    st = convolve(y);
    CHECKF(st == ST_ERR_UNSUPPORTED && strstr(st_error(), "conv2d_forward: no device kernel") && y[0] == 7,
           "strict conv: status %d, '%s'", (int)st, st_error());
    CHECK(attend(ATTN_FLASH, 0, NULL) == ST_OK && all_calls() == 6); /* a served case runs */
    unsetenv("SEGTRAIN_STRICT_OPS");

    ops_fallback_reset();
    CHECK(all_calls() == 0);
    ops_fallback_device(NULL);
    return tk_finish();
}
