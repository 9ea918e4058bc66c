/* Quantized frozen bases against optimum-quanto itself (scripts/make_quant_fixtures.py, docs/QUANTIZATION.md):
 * - quanto.safetensors: for every format and shape, segtrain's quant_pack of the bf16 weight gives the library's
 *   packed bytes, scales and shifts byte for byte, and quant_unpack its dequantized weight bit for bit;
 * - conv.safetensors: the same for Conv2d weights (QConv2d: per output channel over in k k, int4 never tinygemm's);
 * - lora_step.safetensors: a LoRA step on a two-layer model of quantized Linear layers, loaded from the float weights
 *   as a checkpoint loads (rounded to bf16, then quantized), matches PyTorch's float64 step on the library's
 *   dequantized weights at 1e-5 (output, dx, every adapter gradient), and its weights take exactly the bytes
 *   quant_layout_of counts;
 * - the format names and their refusals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segtrain/lin.h"
#include "segtrain/model.h"
#include "segtrain/quant.h"
#include "segtrain/safetensors.h"
#include "testkit.h"

#define FIXTURES SEGTRAIN_SOURCE_DIR "/tests/fixtures/quant/"
#define TOL 1e-5

static const float *w_of_bias(param_set *s, int b) { return b < 0 ? NULL : param_at(s, b)->w; }

static const sft_tensor *tensor(const sft_file *f, const char *prefix, const char *name)
{
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    const sft_tensor *t = sft_find(f, key);
    CHECKF(t != NULL, "fixture tensor %s", key);
    return t;
}

static void bf16_values(const sft_tensor *t, uint16_t *out, int64_t n)
{
    CHECKF(t->dtype == SFT_BF16 && (int64_t)t->nbytes == 2 * n, "%s: %lld bf16 values", t->name, (long long)n);
    if ((int64_t)t->nbytes == 2 * n) memcpy(out, t->data, t->nbytes);
}

/* One "<format>/<out>x<in>/" case of quanto.safetensors, or "<format>/<out>x<in>x<kh>x<kw>/" of conv.safetensors (a
 * Conv2d's weight, rows out and columns in kh kw). */
static void check_case(const sft_file *f, const char *prefix)
{
    char fmt[32];
    long long rows, cols, kh = 1, kw = 1;
    const int got = sscanf(prefix, "%31[^/]/%lldx%lldx%lldx%lld/", fmt, &rows, &cols, &kh, &kw);
    const int ndim = got == 5 ? 4 : 2;
    cols *= kh * kw;
    if (got != 3 && got != 5) {
        CHECKF(0, "fixture case %s", prefix);
        return;
    }
    quant_format q;
    CHECK(quant_format_of(fmt, &q) == ST_OK && q != QUANT_NONE);
    const quant_layout l = quant_layout_of(q, rows, cols);
    const sft_tensor *data = tensor(f, prefix, "data"), *scale = tensor(f, prefix, "scale");
    const sft_tensor *shift = q == QUANT_INT4 ? tensor(f, prefix, "shift") : NULL;
    if (!data || !scale || (q == QUANT_INT4 && !shift)) return;
    CHECKF((int64_t)data->nbytes == l.data_bytes, "%s: %lld packed bytes, the library's %zu", prefix,
           (long long)l.data_bytes, data->nbytes);
    CHECKF((int64_t)(scale->nbytes + (shift ? shift->nbytes : 0)) == 2 * l.stats, "%s: %lld bf16 statistics, the "
           "library's %zu", prefix, (long long)l.stats, (scale->nbytes + (shift ? shift->nbytes : 0)) / 2);
    const int64_t n = rows * cols;
    uint16_t *w = malloc((size_t)n * 2), *stats = calloc((size_t)l.stats + 1, 2), *want16 = malloc((size_t)n * 2);
    uint8_t *packed = calloc((size_t)l.data_bytes + 1, 1);
    float *y = malloc((size_t)n * sizeof(float)), *want = malloc((size_t)n * sizeof(float));
    bf16_values(tensor(f, prefix, "weight"), w, n);
    quant_pack(q, rows, cols, ndim, w, packed, stats);
    CHECKF((int64_t)data->nbytes != l.data_bytes || !memcmp(packed, data->data, data->nbytes),
           "%s: packed data byte for byte", prefix);
    CHECKF(!memcmp(stats, scale->data, scale->nbytes), "%s: scales bit for bit", prefix);
    CHECKF(!shift || !memcmp(stats + l.units, shift->data, shift->nbytes), "%s: shifts bit for bit", prefix);
    /* dequantize the library's own bytes, so that a packing difference above cannot hide one here */
    memcpy(stats, scale->data, scale->nbytes);
    if (shift) memcpy(stats + l.units, shift->data, shift->nbytes);
    if ((int64_t)data->nbytes == l.data_bytes) quant_unpack(q, rows, cols, data->data, stats, y);
    bf16_values(tensor(f, prefix, "dequantized"), want16, n);
    for (int64_t i = 0; i < n; i++) want[i] = sft_bf16_to_f32(want16[i]);
    tk_expect_bitwise(prefix, y, want, n);
    free(w), free(stats), free(want16), free(packed), free(y), free(want);
}

/* Every case of a file (quanto.safetensors: Linear weights; conv.safetensors: Conv2d ones), at least `least`. */
static void test_library_bytes(const char *file, int least)
{
    sft_file *f = NULL;
    char path[512];
    snprintf(path, sizeof path, FIXTURES "%s", file);
    CHECK(sft_open(path, &f) == ST_OK);
    int cases = 0;
    for (int i = 0; f && i < sft_count(f); i++) {
        const char *name = sft_at(f, i)->name;
        const size_t len = strlen(name);
        if (len < 7 || strcmp(name + len - 7, "/weight")) continue;
        char prefix[128];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 6), name);
        check_case(f, prefix);
        cases++;
    }
    printf("-- %s: %d weights of optimum-quanto's, byte and bit for bit\n", file, cases);
    CHECKF(cases >= least, "the fixture has every format's cases (%d)", cases);
    sft_close(f);
}

/* ---- a LoRA step on a quantized base ---- */

static int64_t meta_int(const sft_file *f, const char *key)
{
    const char *v = sft_metadata(f, key);
    CHECKF(v != NULL, "fixture metadata %s", key);
    return v ? atoll(v) : 0;
}

static float *read_floats(const sft_file *f, const char *prefix, const char *name, int64_t n)
{
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    const sft_tensor *t = sft_find(f, key);
    float *x = calloc((size_t)n, sizeof(float));
    CHECKF(t && sft_read_f32(f, key, t->ndim, t->shape, x) == ST_OK && (int64_t)t->nbytes == 4 * n, "tensor %s", key);
    return x;
}

static void close_to(const char *what, const float *got, const float *want, int64_t n)
{
    double *w = malloc((size_t)n * sizeof(double)), err = 0;
    tk_to_double(w, want, n);
    CHECKF(tk_close(got, w, n, TOL, &err), "%s: relative error %.3g over %g", what, err, TOL);
    free(w);
}

static void lora_step(const sft_file *f, quant_format q)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s/", quant_name(q));
    printf("-- %s: a LoRA step against PyTorch's on the library's dequantized weights\n", prefix);
    const int64_t d = meta_int(f, "width"), ff = meta_int(f, "ffn"), n = meta_int(f, "tokens");
    const int64_t in[2] = {d, ff}, out[2] = {ff, d};
    pool *p = pool_create(POOL_DEVICE, 0);
    param_set s = {.quant_base = q};
    lin_layer l[2];
    for (int i = 0; i < 2; i++) {
        char name[24];
        snprintf(name, sizeof name, "layer%d", i);
        l[i] = lin_register(&s, name, in[i], out[i], true, meta_int(f, "rank"), (float)atof(sft_metadata(f, "alpha")),
                            false);
    }
    CHECK(param_set_check(&s) == ST_OK && param_set_alloc(&s, p) == ST_OK);
    size_t want_bytes = 0;
    for (int i = 0; i < s.n; i++) {
        param *w = param_at(&s, i);
        float *v = read_floats(f, prefix, w->name, w->numel);
        CHECKF(!w->quant == (strstr(w->name, "lora") || strstr(w->name, "bias")), "%s: only the bases quantized",
               w->name);
        if (w->quant) {
            CHECK(param_store_bf16(w, v) == ST_OK);
            const quant_layout lay = quant_layout_of(q, w->shape[0], w->shape[1]);
            want_bytes += (size_t)lay.data_bytes + 2 * (size_t)lay.stats;
        } else {
            memcpy(w->w, v, (size_t)w->numel * sizeof(float));
            want_bytes += (size_t)w->numel * sizeof(float);
        }
        free(v);
    }
    pool_stats ps;
    pool_get_stats(p, &ps);
    CHECKF(ps.live_by_tag[MEM_WEIGHTS] == want_bytes, "weights: %zu bytes in the pool, %zu counted",
           ps.live_by_tag[MEM_WEIGHTS], want_bytes);
    float *x = read_floats(f, prefix, "x", n * d), *dy = read_floats(f, prefix, "dy", n * d);
    float *h = calloc((size_t)(n * ff), sizeof(float)), *y = calloc((size_t)(n * d), sizeof(float));
    float *dh = calloc((size_t)(n * ff), sizeof(float)), *dx = calloc((size_t)(n * d), sizeof(float));
    CHECK(lin_forward(&s, p, &l[0], h, x, n) == ST_OK && lin_forward(&s, p, &l[1], y, h, n) == ST_OK);
    param_set_zero_grads(&s);
    CHECK(lin_backward(&s, p, &l[1], dh, dy, h, n) == ST_OK && lin_backward(&s, p, &l[0], dx, dh, x, n) == ST_OK);
    float *want = read_floats(f, prefix, "y", n * d);
    close_to("y", y, want, n * d);
    free(want);
    want = read_floats(f, prefix, "dx", n * d);
    close_to("dx", dx, want, n * d);
    free(want);
    for (int i = 0; i < s.n; i++) {
        const param *w = param_at(&s, i);
        if (!w->trainable) continue;
        char g[PARAM_NAME_MAX + 8];
        snprintf(g, sizeof g, "grad.%s", w->name);
        want = read_floats(f, prefix, g, w->numel);
        close_to(g, w->g, want, w->numel);
        free(want);
    }
    free(x), free(dy), free(h), free(y), free(dh), free(dx);
    param_set_free(&s);
    CHECK(pool_destroy(p) == 0);
}

static void test_names(void)
{
    quant_format q;
    CHECK(quant_format_of("no_change", &q) == ST_OK && q == QUANT_NONE);
    CHECK(quant_format_of("int8-quanto", &q) == ST_OK && q == QUANT_INT8 && !strcmp(quant_name(q), "int8-quanto"));
    CHECK(quant_format_of("fp8-quanto", &q) == ST_OK && q == QUANT_FP8);
    CHECK(quant_format_of("int4-quanto", &q) == ST_OK && q == QUANT_INT4);
    CHECK(quant_format_of("nf4-bnb", &q) == ST_ERR_UNSUPPORTED &&
          strstr(st_error(), "base_model_precision nf4-bnb is not built"));
    /* bytes a weight takes: data, then 2 bytes a scale (and shift) */
    CHECK(quant_layout_of(QUANT_INT8, 7, 200).data_bytes == 1400 && quant_layout_of(QUANT_INT8, 7, 200).stats == 7);
    CHECK(quant_layout_of(QUANT_FP8, 1, 33).data_bytes == 33 && quant_layout_of(QUANT_FP8, 1, 33).stats == 1);
    const quant_layout g128 = quant_layout_of(QUANT_INT4, 16, 256), chan = quant_layout_of(QUANT_INT4, 6, 150);
    CHECK(g128.group == 128 && g128.data_bytes == 16 * 256 / 2 && g128.stats == 2 * 32);
    CHECK(chan.group == 0 && chan.data_bytes == 3 * 150 && chan.stats == 2 * 6);
    CHECK(quant_layout_of(QUANT_INT4, 3, 160).group == 32 && quant_layout_of(QUANT_INT4, 4, 192).group == 96);
}

/* SimpleTuner's per-family exclude lists: the modules quanto leaves alone stay in bf16, the rest are quantized */
/* One conv.safetensors case held by a conv_layer on a quantized base (a depthwise one where in / groups is 1),
 * loaded as a checkpoint loads: its packed bytes the library's, its pool bytes quant_layout_of's, and its forward
 * and dx those of the convolution on the library's dequantized weight, bit for bit. */
static void conv_base(const sft_file *f, const char *prefix)
{
    char fmt[32];
    long long o, i, k, kw;
    quant_format q;
    if (sscanf(prefix, "%31[^/]/%lldx%lldx%lldx%lld/", fmt, &o, &i, &k, &kw) != 5 || quant_format_of(fmt, &q)) return;
    const bool dw = i == 1 && o > 1;
    pool *p = pool_create(POOL_DEVICE, 0);
    param_set s = {.quant_base = q};
    const conv_layer l = dw ? conv_register_depthwise(&s, "c", o, false) : conv_register(&s, "c", i, o, k, false);
    CHECK(param_set_check(&s) == ST_OK && param_set_alloc(&s, p) == ST_OK);
    param *w = param_at(&s, l.w);
    const int64_t n = o * i * k * k, B = 2, H = 5, W = 6;
    const quant_layout lay = quant_layout_of(q, o, i * k * k);
    pool_stats ps;
    pool_get_stats(p, &ps);
    CHECKF(w->quant == q && ps.live_by_tag[MEM_WEIGHTS] == (size_t)(lay.data_bytes + 2 * lay.stats + 4 * o),
           "%s: a quantized conv's weights take %zu bytes", prefix, ps.live_by_tag[MEM_WEIGHTS]);
    uint16_t *w16 = malloc((size_t)n * 2);
    float *v = malloc((size_t)n * sizeof(float)), *deq = malloc((size_t)n * sizeof(float));
    bf16_values(tensor(f, prefix, "weight"), w16, n);
    for (int64_t e = 0; e < n; e++) v[e] = sft_bf16_to_f32(w16[e]);
    CHECK(param_store_bf16(w, v) == ST_OK);
    CHECKF(!memcmp(w->wq, tensor(f, prefix, "data")->data, (size_t)lay.data_bytes), "%s: loaded as the library packs",
           prefix);
    bf16_values(tensor(f, prefix, "dequantized"), w16, n);
    for (int64_t e = 0; e < n; e++) deq[e] = sft_bf16_to_f32(w16[e]);
    const int64_t pad = k / 2 * (k % 2), C = dw ? o : i;
    const conv_shape c = {B, C, H, W, o, k, k, 1, 1, pad, pad};
    const int64_t nx = B * C * H * W, ny = B * o * conv_out_h(&c) * conv_out_w(&c);
    float *x = malloc((size_t)nx * sizeof(float)), *dy = malloc((size_t)ny * sizeof(float));
    float *y[2] = {calloc((size_t)ny, 4), calloc((size_t)ny, 4)}, *dx[2] = {calloc((size_t)nx, 4), calloc((size_t)nx, 4)};
    tk_fill(x, nx, 5, -1, 1), tk_fill(dy, ny, 6, -1, 1);
    CHECK(conv_layer_forward(&s, p, &l, y[0], x, &c) == ST_OK && conv_layer_backward(&s, p, &l, dx[0], dy, x, &c) == ST_OK);
    if (dw) {
        CHECK(depthwise3x3_forward(p, y[1], x, deq, w_of_bias(&s, l.b), B, H, W, o) == ST_OK);
        CHECK(depthwise3x3_backward(p, dx[1], NULL, NULL, dy, x, deq, B, H, W, o) == ST_OK);
    } else {
        CHECK(conv2d_forward(p, y[1], x, deq, w_of_bias(&s, l.b), &c) == ST_OK);
        CHECK(conv2d_backward(p, dx[1], NULL, NULL, dy, x, deq, &c) == ST_OK);
    }
    char what[160];
    snprintf(what, sizeof what, "%sconv on the dequantized weight", prefix);
    tk_expect_bitwise(what, y[0], y[1], ny);
    snprintf(what, sizeof what, "%sconv's dx", prefix);
    tk_expect_bitwise(what, dx[0], dx[1], nx);
    free(w16), free(v), free(deq), free(x), free(dy), free(y[0]), free(y[1]), free(dx[0]), free(dx[1]);
    param_set_free(&s);
    pool_destroy(p);
}

static void test_conv_bases(void)
{
    sft_file *f = NULL;
    CHECK(sft_open(FIXTURES "conv.safetensors", &f) == ST_OK);
    printf("-- convolutions on quantized bases: the convolution of the library's dequantized weight\n");
    for (int i = 0; f && i < sft_count(f); i++) {
        const char *name = sft_at(f, i)->name;
        const size_t len = strlen(name);
        char prefix[128];
        if (len < 7 || strcmp(name + len - 7, "/weight")) continue;
        snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 6), name);
        conv_base(f, prefix);
    }
    sft_close(f);
}

static void test_excluded(void)
{
    static const struct {
        const char *preset, *kept, *quantized;
    } cases[] = {{"wan-tiny", "blocks.0.ffn.net.0.proj.weight", "blocks.0.attn1.to_q.weight"}, /* "*ffn*" */
                 {"sd3-tiny", "transformer_blocks.0.norm1.linear.weight", "transformer_blocks.0.ff.net.2.weight"},
                 {"ltxvideo2-tiny", "caption_projection.linear_1.weight", "transformer_blocks.0.attn1.to_q.weight"},
                 {"dit-tiny", NULL, "blocks.0.mlp.fc1.weight"},
                 {"sdxl-tiny", NULL, "down_blocks.0.resnets.0.conv1.weight"}, /* QConv2d, as every Conv2d */
                 {"sd1x-tiny", NULL, "down_blocks.0.attentions.0.proj_in.weight"},
                 {"stable-cascade-tiny", NULL, "down_blocks.0.0.depthwise.weight"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        model_config mc;
        CHECK(model_preset(cases[i].preset, &mc) == ST_OK);
        mc.lora_rank = 4, mc.lora_alpha = 4, mc.lora_attention = mc.lora_mlp = true, mc.quant_base = QUANT_INT4;
        pool *p = pool_create_dry(POOL_DEVICE, 0);
        model *m = NULL;
        CHECKF(model_create(&mc, p, &m) == ST_OK, "%s: %s", cases[i].preset, st_error());
        const param *kept = cases[i].kept && m ? param_find(model_params(m), cases[i].kept) : NULL;
        const param *quantized = m ? param_find(model_params(m), cases[i].quantized) : NULL;
        CHECKF(!cases[i].kept || (kept && !kept->quant && kept->bf16), "%s: %s excluded, held in bf16",
               cases[i].preset, cases[i].kept);
        CHECKF(quantized && quantized->quant == QUANT_INT4, "%s: %s quantized", cases[i].preset, cases[i].quantized);
        model_destroy(m);
        CHECK(pool_destroy(p) == 0);
    }
}

/* The linears a model registers outside its blocks (its timestep and text embedders, its final layer's modulation and
 * projection) are quantized as quanto quantizes every nn.Linear the family's exclude list does not name: Flux's
 * time_text_embed and norm_out.linear (its list names norm_out, the module, not its child), not its proj_out; none of
 * SD3's (*time_text_embed*, *norm_out*, proj_out*); the U-Nets' time_embedding and add_embedding (no list). Under full
 * training nothing is quantized. */
static void test_embedders(void)
{
    static const struct {
        const char *preset, *name;
        bool quantized;
    } cases[] = {{"flux-tiny", "time_text_embed.timestep_embedder.linear_1.weight", true},
                 {"flux-tiny", "time_text_embed.guidance_embedder.linear_2.weight", true},
                 {"flux-tiny", "time_text_embed.text_embedder.linear_1.weight", true},
                 {"flux-tiny", "norm_out.linear.weight", true},
                 {"flux-tiny", "proj_out.weight", false},
                 {"sd3-tiny", "time_text_embed.timestep_embedder.linear_1.weight", false},
                 {"sd3-tiny", "norm_out.linear.weight", false},
                 {"sdxl-tiny", "time_embedding.linear_1.weight", true},
                 {"sdxl-tiny", "add_embedding.linear_2.weight", true},
                 {"dit-tiny", "t_embedder.mlp.0.weight", true}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int full = 0; full <= 1; full++) {
            model_config mc;
            CHECK(model_preset(cases[i].preset, &mc) == ST_OK);
            mc.lora_rank = full ? 0 : 4, mc.lora_alpha = 4, mc.lora_attention = mc.lora_mlp = true;
            mc.quant_base = full ? QUANT_NONE : QUANT_INT8;
            pool *p = pool_create_dry(POOL_DEVICE, 0);
            model *m = NULL;
            CHECKF(model_create(&mc, p, &m) == ST_OK, "%s: %s", cases[i].preset, st_error());
            const param *q = m ? param_find(model_params(m), cases[i].name) : NULL;
            const bool want = cases[i].quantized && !full;
            CHECKF(q && (q->quant == QUANT_INT8) == want && !q->bf16, "%s: %s %s%s", cases[i].preset, cases[i].name,
                   want ? "quantized" : "left float32", full ? " (full training)" : "");
            model_destroy(m);
            CHECK(pool_destroy(p) == 0);
        }
}

int main(void)
{
    test_excluded();
    test_embedders();
    test_names();
    test_library_bytes("quanto.safetensors", 12);
    test_library_bytes("conv.safetensors", 13);
    test_conv_bases();
    sft_file *f = NULL;
    CHECK(sft_open(FIXTURES "lora_step.safetensors", &f) == ST_OK);
    for (quant_format q = QUANT_INT8; f && q <= QUANT_INT4; q++) lora_step(f, q);
    sft_close(f);
    return tk_finish();
}
