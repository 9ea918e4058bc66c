/* Lumina-Image 2.0 (docs/FAMILIES.md): diffusers' Lumina2Transformer2DModel, called as SimpleTuner's lumina2 calls
 * it: the model's time is 1 - t (its flow runs from noise at 0 to data at 1) and the prediction is minus its output.
 *
 * - Three block sequences: context_refiner on the caption's rows (unmodulated, the caption's key mask),
 *   noise_refiner on the image's (modulated), then layers on the joint rows, per sample [the caption's len tokens,
 *   the image's T, padding] (len: the sample's mask's ones; the padding's keys masked).
 * - time_caption_embed: timestep_embedder (Timesteps(256) of 1 - t, cosines first, linear_1, SiLU, linear_2: temb,
 *   min(D, 1024) wide); caption_embedder (RMSNorm, linear) of the text.
 * - x_embedder: a linear of 2 x 2 patches, features (row, column, channel).
 * - Rotary positions per sample on three axes: a caption token j at (j, 0, 0), an image token at (len, row, column);
 *   the caption's padding rows rotate by 0 in the context refiner (diffusers' zero table) and by identity in the
 *   joint (its zero positions).
 * - norm_out: LayerNorm (no affine) of the image rows, times 1 + linear_1(SiLU(temb)), then linear_2.
 *
 * Z-Image (diffusers' ZImageTransformer2DModel, SimpleTuner's z_image, called the same way) is the same model with
 * other names and these differences: the joint rows are [the image's, the caption's, padding]; the caption's rows
 * and the image's are each padded to a multiple of 32 with a learned pad token (x_pad_token, cap_pad_token), and
 * the caption's padding rows are attended, not masked; a caption token j sits at (1 + j, 0, 0), an image token at
 * (1 + the padded caption length, row, column), a pad token of the image at (0, 0, 0); rotary theta 256; the time
 * is (1 - t) 1000 through t_embedder (256 -> 1024 -> min(D, 256)), the blocks' modulations take temb itself (no
 * SiLU) and only the final layer SiLU(temb).
 *
 * Boogu-Image (SimpleTuner's BooguImageTransformer2DModel, boogu_image.c) is Lumina 2 with other layer names
 * (single_stream_layers for layers), a caption token j at (j, j, j), and a fourth sequence between the refiners and
 * the joint rows: its double-stream layers (DOUBLE, boogu_image.c's block) over each sample's rows [the caption's L
 * refined rows, padding included; the image's T], its key mask the caption's, its rotary table the joint's positions
 * at those rows (the caption's padding rows at zero). Its reference-image weights are loaded and never run. */
#include "models/core/diffusers_json.h"
#include "models/core/family.h"
#include "models/joint/lumina2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LUMINA_FREQ 256
#define LUMINA_THETA 10000.0
#define LUMINA_OUT_EPS 1e-6f
#define ZIMAGE_THETA 256.0
#define ZIMAGE_ROWS 32 /* its caption and image rows are padded to a multiple of this (SEQ_MULTI_OF) */
#define ZIMAGE_T_SCALE 1000.0f
#define ZIMAGE_TIME_MID 1024
enum { CTX, NOISE, JOINT, DOUBLE, NSEQ }; /* DOUBLE: Boogu's double-stream layers */

typedef struct lm_model {
    bool z;     /* Z-Image */
    bool boogu; /* Boogu-Image */
    int nseq;   /* its sequences: Boogu's four, the others' three */
    lumina_block *blocks[NSEQ];
    boogu_double *dbl; /* Boogu's double-stream layers (sequence DOUBLE) */
    temb t;
    int cap_norm;
    lin_layer cap;
    joint_final fin;
    int x_w, x_b, x_pad, cap_pad; /* the pad tokens: Z-Image's */
    float *rope[NSEQ];                /* per-sample rotary tables, a step's */
    attn_mask masks[NSEQ];
    const attn_mask *maskp[NSEQ];     /* what the blocks read: &masks[q], or NULL */
    /* a step */
    float *len;                       /* per sample: the caption's tokens */
    float *tin, *patches, *cap_in, *cap_n, *kb[NSEQ];
    float *final_c; /* the final layer's input: SiLU(temb), Z-Image's own (Lumina's blocks read it as m->ctx.cs) */
    op_state cap_stats;
} lm_model;

static lm_model *lm_of(const model *m) { return m->impl; }

#define PW(i) (param_at(m->params, (i))->w)
#define PG(i) (param_at(m->params, (i))->g)

static int64_t round_up(int64_t n, int64_t k) { return (n + k - 1) / k * k; }
static bool zimage(const model_config *c)
{
    const lumina2_options *o = family_options(c);
    return o && o->zimage;
}
static bool boogu(const model_config *c)
{
    const lumina2_options *o = family_options(c);
    return o && o->boogu;
}
/* The caption refiner's rows and the image refiner's per sample */
static int64_t text_rows(const model *m)
{
    return zimage(&m->cfg) ? round_up(m->shape.text, ZIMAGE_ROWS) : m->shape.text;
}
static int64_t image_rows_of(const model *m)
{
    return zimage(&m->cfg) ? round_up(m->shape.tokens, ZIMAGE_ROWS) : m->shape.tokens;
}
static int64_t joint_rows(const model *m) { return text_rows(m) + image_rows_of(m); }
static int64_t time_dim(const model_config *c)
{
    const int64_t cap = zimage(c) ? 256 : 1024; /* ADALN_EMBED_DIM, Lumina's min(D, 1024) */
    return c->hidden < cap ? c->hidden : cap;
}

static st_status final_rows(model *m, float *img);

static const char *const lumina_names_of[NSEQ] = {"context_refiner", "noise_refiner", "layers", NULL};
static const char *const boogu_names[NSEQ] = {"context_refiner", "noise_refiner", "single_stream_layers",
                                              "double_stream_layers"};

/* Boogu's double-stream layers (sequence DOUBLE, n of them) over each sample's [caption; image] rows, and what its
 * reference images would go through, loaded and never run in text to image: their patch embedder, index table
 * (five images) and refiner (whose gradients stay zero, as SimpleTuner's empty reference rows leave them) */
static st_status boogu_create(model *m, int n)
{
    const model_config *c = &m->cfg;
    lm_model *d = m->impl;
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank;
    const int64_t D = c->hidden, L = text_rows(m), T = image_rows_of(m), P = model_patch_dim(c);
    if (!(d->dbl = model_seq_blocks(m, DOUBLE, boogu_names[DOUBLE], n, &boogu_double_kind, sizeof *d->dbl)))
        return st_host_oom("the Boogu-Image model");
    m->seq_sample[DOUBLE] = (L + T) * D;
    char prefix[64];
    for (int i = 0; i < n; i++) {
        d->dbl[i] = (boogu_double){.m = m, .text = L, .image = T, .kv_heads = c->kv_heads, .ffn = c->ffn_dim,
                                   .ada_in = time_dim(c), .eps = (float)c->norm_eps, .rope = &d->rope[DOUBLE],
                                   .image_rope = &d->rope[NOISE], .mask = &d->maskp[DOUBLE]};
        snprintf(prefix, sizeof prefix, "%s.%d", boogu_names[DOUBLE], i);
        boogu_double_register(s, &d->dbl[i], prefix, c);
    }
    param_add(s, "ref_image_patch_embedder.weight", 2, (int64_t[]){D, P}, full);
    param_add(s, "ref_image_patch_embedder.bias", 1, (int64_t[]){D}, full);
    param_add(s, "image_index_embedding", 2, (int64_t[]){5, D}, full);
    lumina_block *ref = model_alloc(m, (size_t)c->refiner_depth, sizeof *ref);
    if (!ref) return st_host_oom("the Boogu-Image model");
    for (int i = 0; i < c->refiner_depth; i++) {
        ref[i] = (lumina_block){.m = m, .modulated = true, .rows = T, .kv_heads = c->kv_heads, .ffn = c->ffn_dim,
                                .eps = (float)c->norm_eps, .ada_in = time_dim(c), .style = &lumina2_style};
        snprintf(prefix, sizeof prefix, "ref_image_refiner.%d", i);
        lumina_block_register(s, &ref[i], prefix, c);
    }
    return ST_OK;
}

static st_status lm_create(model *m)
{
    const model_config *c = &m->cfg;
    lm_model *d = m->impl;
    const bool bg = d->boogu = boogu(c);
    d->nseq = bg ? NSEQ : DOUBLE;
    const int n[NSEQ] = {(int)c->refiner_depth, (int)c->refiner_depth, (int)(bg ? c->single_depth : c->depth),
                         (int)c->depth};
    const char *const *names = bg ? boogu_names : lumina_names_of;
    for (int q = 0; q < DOUBLE; q++)
        if (!(d->blocks[q] = model_seq_blocks(m, q, names[q], n[q], &lumina_block_kind, sizeof *d->blocks[q])))
            return st_host_oom("the Lumina 2 model");
    param_set *s = &m->own_params;
    const bool full = !c->lora_rank, z = d->z = zimage(c);
    const int64_t D = c->hidden, Dt = time_dim(c), P = model_patch_dim(c);
    st_status st = ST_OK;
    const int64_t rows[NSEQ] = {text_rows(m), image_rows_of(m), joint_rows(m)};
    char prefix[64], n1[96], n2[96], key[32];
    snprintf(key, sizeof key, "%lld-%lld", (long long)c->patch, (long long)c->patch_t); /* Z-Image's patch key */
    snprintf(n1, sizeof n1, z ? "all_x_embedder.%s.weight" : "x_embedder.weight", key);
    snprintf(n2, sizeof n2, z ? "all_x_embedder.%s.bias" : "x_embedder.bias", key);
    d->x_w = param_add(s, n1, 2, (int64_t[]){D, P}, full);
    d->x_b = param_add(s, n2, 1, (int64_t[]){D}, full);
    if (z) {
        temb_register_mid(s, &d->t, "t_embedder.mlp.0", "t_embedder.mlp.2", LUMINA_FREQ, ZIMAGE_TIME_MID, Dt, full);
        d->x_pad = param_add(s, "x_pad_token", 2, (int64_t[]){1, D}, full);
        d->cap_pad = param_add(s, "cap_pad_token", 2, (int64_t[]){1, D}, full);
    } else {
        temb_register(s, &d->t, "time_caption_embed.timestep_embedder.linear_1",
                      "time_caption_embed.timestep_embedder.linear_2", LUMINA_FREQ, Dt, full);
    }
    const char *cap = z ? "cap_embedder" : "time_caption_embed.caption_embedder";
    snprintf(n1, sizeof n1, "%s.0.weight", cap);
    snprintf(n2, sizeof n2, "%s.1", cap);
    d->cap_norm = param_add(s, n1, 1, (int64_t[]){c->text_dim}, full);
    d->cap = lin_register(s, n2, c->text_dim, D, true, 0, 0, full);
    if (bg && (st = boogu_create(m, n[DOUBLE]))) return st;
    for (int q = 0; q < DOUBLE; q++) {
        m->seq_sample[q] = rows[q] * m->shape.hidden;
        for (int i = 0; i < n[q]; i++) {
            lumina_block *b = &d->blocks[q][i];
            *b = (lumina_block){.m = m, .modulated = q != CTX, .rows = rows[q], .kv_heads = c->kv_heads,
                                .ffn = c->ffn_dim, .eps = (float)c->norm_eps, .rope = &d->rope[q],
                                .mask = &d->maskp[q], .ada_in = Dt, .style = z ? &zimage_style : &lumina2_style};
            snprintf(prefix, sizeof prefix, "%s.%d", names[q], i);
            lumina_block_register(s, b, prefix, c);
        }
    }
    char fin[64];
    snprintf(fin, sizeof fin, z ? "all_final_layer.%s" : "norm_out", key);
    snprintf(n1, sizeof n1, z ? "%s.adaLN_modulation.1" : "%s.linear_1", fin);
    d->fin = (joint_final){.mod = lin_register(s, n1, Dt, D, true, 0, 0, full), .n_mod = 1, .negate = true,
                           .eps = LUMINA_OUT_EPS, .order = PATCH_DIT, .rows_of = final_rows};
    snprintf(n1, sizeof n1, z ? "%s.linear" : "%s.linear_2", fin); /* SimpleTuner's lumina2 and z_image negate it */
    d->fin.out = joint_out_register(s, n1, D, P, full);
    return ST_OK;
}

static void lm_release(model *m)
{
    lm_model *d = lm_of(m);
    for (int q = 0; q < d->nseq; q++) d->maskp[q] = NULL;
    op_state_release(&d->cap_stats);
    joint_final_release(&d->fin);
}

/* Sample b's caption tokens (its mask's ones, as diffusers sums the mask) */
static int64_t len_of(const lm_model *d, int64_t b) { return (int64_t)d->len[b]; }
/* ... and its caption's rows in the joint sequence (Z-Image's: padded) */
static int64_t cap_rows(const lm_model *d, int64_t b)
{
    return d->z ? round_up(len_of(d, b), ZIMAGE_ROWS) : len_of(d, b);
}
/* Where sample b's image rows start in the joint rows, and its caption's */
static int64_t image_at(const model *m, int64_t b) { return lm_of(m)->z ? 0 : len_of(lm_of(m), b); }
static int64_t caption_at(const model *m) { return lm_of(m)->z ? image_rows_of(m) : 0; }

/* The position (3 axes) of row r of sequence q for sample b: len its caption's tokens, lr its caption's rows; a row
 * with no position returns false (its rotary table stays zero, as diffusers pads it) */
static bool position_of(const model *m, int q, int64_t r, int64_t len, int64_t lr, float id[3])
{
    const int64_t T = m->shape.tokens, Tr = image_rows_of(m), g = grid_cols(&m->cfg);
    id[0] = id[1] = id[2] = 0;
    if (!lm_of(m)->z) { /* caption j at (j, 0, 0) (Boogu's (j, j, j)), image i at (len, row, column); the joint's
                          * padding at 0; Boogu's double-stream rows: the caption's L rows, then the image's */
        const int64_t L = text_rows(m), img = q == NOISE ? r : q == JOINT ? r - len : q == DOUBLE ? r - L : -1;
        if (q != NOISE && r < len) id[0] = (float)r, id[1] = id[2] = lm_of(m)->boogu ? (float)r : 0.0f;
        else if (img >= 0 && img < T) id[0] = (float)len, id[1] = (float)(img / g), id[2] = (float)(img % g);
        return q == CTX || (q == DOUBLE && r < L) ? r < len : true;
    }
    const int64_t cap = q == CTX ? r : q == JOINT ? r - Tr : -1, img = q == CTX || r >= Tr ? -1 : r;
    if (cap >= 0) id[0] = (float)(1 + cap);
    else if (img >= 0 && img < T) id[0] = (float)(lr + 1), id[1] = (float)(img / g), id[2] = (float)(img % g);
    return cap >= 0 ? cap < lr : img >= 0; /* an image pad token at (0, 0, 0) */
}

/* The per-sample rotary tables and key masks of the three sequences (ids: (S, 3); a host loop's) */
static st_status sample_positions(model *m, const float *cond, float *ids)
{
    lm_model *d = lm_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = text_rows(m), T = image_rows_of(m), S = L + T, hd = c->hidden / c->heads;
    const int64_t rows[NSEQ] = {L, T, S, S};
    const double theta = d->z ? ZIMAGE_THETA : LUMINA_THETA;
    for (int64_t b = 0; b < B; b++) {
        const int64_t len = len_of(d, b), lr = cap_rows(d, b);
        for (int q = 0; q < d->nseq; q++) {
            float *tab = d->rope[q] + b * rows[q] * hd, unused[3];
            for (int64_t r = 0; r < rows[q]; r++) position_of(m, q, r, len, lr, ids + r * 3);
            rope_table(tab, ids, rows[q], 3, c->rope_axes, theta);
            for (int64_t r = 0; r < rows[q]; r++)
                if (!position_of(m, q, r, len, lr, unused)) memset(tab + r * hd, 0, (size_t)hd * sizeof(float));
        }
        /* keys past the caption's rows (past the image's and the caption's in the joint) are masked; an empty
         * caption's refiner sees them all: its rows reach nothing */
        for (int64_t j = 0; j < L; j++) d->kb[CTX][b * L + j] = j < lr || !lr ? 0.0f : -INFINITY;
        for (int64_t j = 0; j < S; j++) d->kb[JOINT][b * S + j] = j < lr + T ? 0.0f : -INFINITY;
        for (int64_t j = 0; d->boogu && j < S; j++) d->kb[DOUBLE][b * S + j] = j < lr || j >= L ? 0.0f : -INFINITY;
    }
    return ST_OK;
}

/* The per-sample rotary tables and key masks of the three sequences */
static st_status positions(model *m)
{
    lm_model *d = lm_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = text_rows(m), T = image_rows_of(m), S = L + T, hd = c->hidden / c->heads;
    const int64_t rows[NSEQ] = {L, T, S, S};
    st_status st = ST_OK;
    for (int q = 0; q < d->nseq; q++) model_hold(m, &st, &d->rope[q], B * rows[q] * hd, "lumina.rope", false);
    model_hold(m, &st, &d->kb[CTX], B * L, "lumina.caption_mask", false);
    model_hold(m, &st, &d->kb[JOINT], B * S, "lumina.joint_mask", false);
    if (d->boogu) model_hold(m, &st, &d->kb[DOUBLE], B * S, "boogu.double_mask", false);
    if (st) return st;
    st = model_host_loop(m, d->len, sample_positions, NULL, S * 3, "lumina.position_ids");
    d->masks[CTX] = (attn_mask){.key_bias = d->kb[CTX], .batch_stride = L};
    d->masks[JOINT] = (attn_mask){.key_bias = d->kb[JOINT], .batch_stride = S};
    d->maskp[CTX] = &d->masks[CTX], d->maskp[NOISE] = NULL, d->maskp[JOINT] = &d->masks[JOINT];
    d->masks[DOUBLE] = (attn_mask){.key_bias = d->kb[DOUBLE], .batch_stride = S};
    d->maskp[DOUBLE] = d->boogu ? &d->masks[DOUBLE] : NULL;
    return st;
}

/* Z-Image's pad tokens: a sample's caption rows past its tokens (to its padded length; zero after) and its image
 * rows past the image's tokens. back: their gradients (the rows of ctx and img) summed into the tokens' (when they
 * train), and those rows of ctx zeroed (they reach no caption weight). */
typedef struct rows_move { /* the row moves below: host_loops, as each reads the samples' caption lengths */
    model *m;
    float *x, *ctx, *img;
    bool back;
} rows_move;

static st_status pad_rows_run(void *arg)
{
    const rows_move *a = arg;
    model *m = a->m;
    float *ctx = a->ctx, *img = a->img;
    const bool back = a->back;
    lm_model *d = lm_of(m);
    const int64_t B = m->shape.batch, T = m->shape.tokens, D = m->shape.hidden, Lr = text_rows(m);
    const int64_t Tr = image_rows_of(m);
    float *xp = back ? PG(d->x_pad) : PW(d->x_pad), *cp = back ? PG(d->cap_pad) : PW(d->cap_pad);
    for (int64_t b = 0; b < B; b++) {
        const int64_t len = len_of(d, b), lr = cap_rows(d, b);
        for (int64_t r = len; r < Lr; r++) {
            float *row = ctx + (b * Lr + r) * D;
            if (back && r < lr && cp) add_to(cp, row, D); /* no gradient when frozen (LoRA) */
            if (back || r >= lr) memset(row, 0, (size_t)D * sizeof(float));
            else memcpy(row, cp, (size_t)D * sizeof(float));
        }
        for (int64_t r = T; r < Tr; r++) {
            float *row = img + (b * Tr + r) * D;
            if (!back) memcpy(row, xp, (size_t)D * sizeof(float));
            else if (xp) add_to(xp, row, D);
        }
    }
    return ST_OK;
}

static void pad_rows(model *m, float *ctx, float *img, bool back)
{
    host_loop(lm_of(m)->len, pad_rows_run, &(rows_move){.m = m, .ctx = ctx, .img = img, .back = back});
}

/* Each sample's caption length and time (a host_loop's; the sizes do not depend on them) */
static st_status caption_times(void *arg)
{
    model *m = ((model_loop *)arg)->m;
    const float *cond = ((model_loop *)arg)->cond, *timesteps = ((model_loop *)arg)->timesteps;
    lm_model *d = lm_of(m);
    for (int64_t b = 0; b < m->shape.batch; b++) {
        float n = 0;
        const st_status st = model_caption_length(m, cond, b, &n);
        if (st) return st;
        d->len[b] = n, d->tin[b] = 1.0f - timesteps[b] / 1000.0f;
        if (d->z) /* SimpleTuner's (1000 - t) / 1000, times t_scale in the model, in float32 */
            d->tin[b] = (1000.0f - timesteps[b]) / 1000.0f * ZIMAGE_T_SCALE;
    }
    return ST_OK;
}

/* The caption's rows after caption_embedder (ctx0) and the image's after x_embedder (x0); temb and SiLU(temb) */
static st_status embed(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                       float **ctx0, float **x0)
{
    lm_model *d = lm_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, D = c->hidden, Dc = c->text_dim;
    const int64_t P = model_patch_dim(c), K = model_cond_len(c), Dt = time_dim(c);
    st_status st = ST_OK;
    model_hold(m, &st, &d->len, B, "lumina.caption_length", false);
    model_hold(m, &st, &d->tin, B, "lumina.time", false);
    model_hold(m, &st, &d->patches, B * T * P, "lumina.patches", true);
    model_hold(m, &st, &d->cap_in, B * L * Dc, "lumina.caption_in", false);
    model_hold(m, &st, &d->cap_n, B * L * Dc, "lumina.caption_norm", false);
    const int64_t Lr = text_rows(m), Tr = image_rows_of(m);
    *ctx0 = model_take(m, &st, B * Lr * D, "lumina.caption", false);
    *x0 = model_take(m, &st, B * Tr * D, "lumina.image", false);
    temb_take(m, &d->t, &st, train);
    if (d->z) model_hold(m, &st, &d->final_c, B * Dt, "zimage.silu_temb", false);
    if (st) return st;
    if ((st = host_loop(d->len, caption_times, &(model_loop){.m = m, .cond = cond, .timesteps = timesteps})))
        return st;
    if ((st = positions(m))) return st;
    const patch_shape ps = model_patches(m); /* x_embedder's features: (row, column, channel), DiT's order */
    unpatchify_backward(d->patches, x, &ps, PATCH_DIT);
    for (int64_t b = 0; b < B; b++) /* per sample: Z-Image's rows are padded */
        linear_forward(*x0 + b * Tr * D, d->patches + b * T * P, PW(d->x_w), PW(d->x_b), T, P, D);
    copy_rows(d->cap_in, L * Dc, cond, K, B, L * Dc);
    st = rmsnorm_forward(m->pool, d->cap_n, d->cap_in, PW(d->cap_norm), B * L, Dc, (float)c->norm_eps,
                         train ? &d->cap_stats : NULL);
    for (int64_t b = 0; !st && b < B; b++)
        st = lin_forward(m->params, m->pool, &d->cap, *ctx0 + b * Lr * D, d->cap_n + b * L * Dc, L);
    if (!st && d->z) pad_rows(m, *ctx0, *x0, false);
    if (!st) st = temb_forward(m, &d->t, d->tin);
    if (!st && d->z) copy_rows(m->ctx.cs, Dt, d->t.c, Dt, B, Dt), silu_forward(d->final_c, d->t.c, B * Dt);
    else if (!st) silu_forward(m->ctx.cs, d->t.c, B * Dt);
    return st;
}

/* The joint rows per sample from the refiners' rows: the caption's (its cap_rows) and the image's at their places,
 * zero padding after; back: the joint's gradients split into the refiners' (their other rows zero). */
static st_status join_run(void *arg)
{
    const rows_move *a = arg;
    model *m = a->m;
    float *joint = a->x, *ctx = a->ctx, *img = a->img;
    const bool back = a->back;
    lm_model *d = lm_of(m);
    const int64_t B = m->shape.batch, L = text_rows(m), T = image_rows_of(m), S = L + T, D = m->shape.hidden;
    for (int64_t b = 0; b < B; b++) {
        const int64_t lr = cap_rows(d, b);
        float *o = joint + b * S * D, *oc = o + caption_at(m) * D, *oi = o + image_at(m, b) * D;
        float *c = ctx + b * L * D, *i = img + b * T * D;
        if (back) {
            memcpy(c, oc, (size_t)(lr * D) * sizeof(float));
            memset(c + lr * D, 0, (size_t)((L - lr) * D) * sizeof(float));
            memcpy(i, oi, (size_t)(T * D) * sizeof(float));
            continue;
        }
        memcpy(oc, c, (size_t)(lr * D) * sizeof(float));
        memcpy(oi, i, (size_t)(T * D) * sizeof(float));
        memset(o + (lr + T) * D, 0, (size_t)((L - lr) * D) * sizeof(float));
    }
    return ST_OK;
}

static void join(model *m, float *joint, float *ctx, float *img, bool back)
{
    host_loop(lm_of(m)->len, join_run, &(rows_move){.m = m, .x = joint, .ctx = ctx, .img = img, .back = back});
}

/* The image tokens' rows of the joint rows (back: their gradients into the joint's, the rest zero) */
static st_status image_rows_run(void *arg)
{
    const rows_move *a = arg;
    model *m = a->m;
    const int64_t B = m->shape.batch, T = m->shape.tokens, S = joint_rows(m), D = m->shape.hidden;
    for (int64_t b = 0; b < B; b++) {
        float *jr = a->x + (b * S + image_at(m, b)) * D;
        if (a->back) memcpy(jr, a->img + b * T * D, (size_t)(T * D) * sizeof(float));
        else memcpy(a->img + b * T * D, jr, (size_t)(T * D) * sizeof(float));
    }
    return ST_OK;
}

static void image_rows(model *m, float *img, const float *joint, bool back)
{
    host_loop(lm_of(m)->len, image_rows_run, &(rows_move){.m = m, .x = (float *)joint, .img = img, .back = back});
}

static st_status final_rows(model *m, float *img)
{
    image_rows(m, img, m->step.last.t[0], false);
    return ST_OK;
}

/* Boogu's double-stream layers over each sample's [caption; image] rows from the refiners' (ctx, img), their
 * output back into them; back: the same for the gradients */
static st_status double_stream(model *m, float *ctx, float *img, bool train, bool back)
{
    const int64_t B = m->shape.batch, L = text_rows(m), T = image_rows_of(m), S = L + T, D = m->shape.hidden;
    st_status st = ST_OK;
    block_state x = {.n = 1, .t = {model_take(m, &st, B * S * D, back ? "boogu.ddouble" : "boogu.double", false)}};
    if (st) return st;
    model_rows_scatter(m, x.t[0], ctx, S, 0, L), model_rows_scatter(m, x.t[0], img, S, L, T);
    block_state y = {0};
    if (back) st = model_seq_backward(m, DOUBLE, &x); /* releases the run whatever it returns */
    else st = model_seq_forward1(m, DOUBLE, &x.t[0], train, &y);
    const float *out = back ? x.t[0] : y.t[0];
    if (!st) model_rows_gather(m, ctx, out, S, 0, L), model_rows_gather(m, img, out, S, L, T);
    state_free(m->pool, &x), state_free(m->pool, &y);
    return st;
}

static st_status lm_forward(model *m, const float *x, const float *timesteps, const float *cond, bool train,
                            const float **pred)
{
    lm_model *d = lm_of(m);
    const int64_t B = m->shape.batch, S = joint_rows(m), D = m->shape.hidden;
    float *ctx0 = NULL, *x0 = NULL;
    st_status st = embed(m, x, timesteps, cond, train, &ctx0, &x0);
    block_state refined[2] = {{0}};
    float *inputs[2] = {ctx0, x0};
    for (int q = CTX; q <= NOISE; q++) {
        if (!st) st = model_seq_forward1(m, q, &inputs[q], train, &refined[q]);
        pool_free(m->pool, inputs[q]);
    }
    if (!st && d->boogu) st = double_stream(m, refined[CTX].t[0], refined[NOISE].t[0], train, false);
    float *joint = model_take(m, &st, B * S * D, "lumina.joint", false);
    if (!st) join(m, joint, refined[CTX].t[0], refined[NOISE].t[0], false);
    for (int q = 0; q < 2; q++) state_free(m->pool, &refined[q]);
    if (!st) st = joint_last_forward(m, &d->fin, JOINT, &joint, d->z ? d->final_c : m->ctx.cs, train, pred);
    pool_free(m->pool, joint);
    return st;
}

static st_status lm_backward(model *m, const float *dpred)
{
    lm_model *d = lm_of(m);
    const model_config *c = &m->cfg;
    const int64_t B = m->shape.batch, L = m->shape.text, T = m->shape.tokens, S = joint_rows(m), D = c->hidden;
    const int64_t N = B * T, P = model_patch_dim(c), Dt = time_dim(c), Dc = c->text_dim;
    const int64_t Lr = text_rows(m), Tr = image_rows_of(m);
    st_status st = ST_OK;
    scratch k = {.pool = m->pool};
    float *dimg = scratch_take_zero(&k, N * D, MEM_WORKSPACE, "lumina.dout_rows");
    float *dfinal = d->z ? scratch_take_zero(&k, B * Dt, MEM_WORKSPACE, "zimage.dsilu_temb") : m->ctx.dcs;
    if ((st = k.status)) goto done;
    st = joint_final_backward(m, &d->fin, &k, dpred, d->z ? d->final_c : m->ctx.cs, dfinal, dimg);
    if (st) goto done;
    state_free(m->pool, &m->step.last);
    block_state grad = {.n = 1, .t = {model_take(m, &st, B * S * D, "lumina.djoint", true)}};
    if (st) goto done;
    image_rows(m, dimg, grad.t[0], true);
    st = model_seq_backward(m, JOINT, &grad); /* releases the run whatever it returns */
    /* the joint rows' gradients back to the refiners' outputs */
    block_state gctx = {.n = 1, .t = {model_take(m, &st, B * Lr * D, "lumina.dcaption", false)}};
    block_state gimg = {.n = 1, .t = {model_take(m, &st, B * Tr * D, "lumina.dimage", false)}};
    if (!st) join(m, grad.t[0], gctx.t[0], gimg.t[0], true);
    state_free(m->pool, &grad);
    if (!st && d->boogu) st = double_stream(m, gctx.t[0], gimg.t[0], false, true);
    if (!st) st = model_seq_backward(m, NOISE, &gimg); /* else model_release's */
    if (!st) st = model_seq_backward(m, CTX, &gctx);
    if (!st && d->z) pad_rows(m, gctx.t[0], gimg.t[0], true);
    for (int64_t b = 0; !st && b < B; b++)
        linear_backward(NULL, PG(d->x_w), PG(d->x_b), gimg.t[0] + b * Tr * D, d->patches + b * T * P, PW(d->x_w), T, P,
                        D);
    float *dcap = st ? NULL : scratch_take_zero(&k, B * L * Dc, MEM_WORKSPACE, "lumina.dcaption_norm");
    if (!st) st = k.status;
    for (int64_t b = 0; !st && b < B; b++)
        st = lin_backward(m->params, m->pool, &d->cap, dcap + b * L * Dc, gctx.t[0] + b * Lr * D, d->cap_n + b * L * Dc,
                          L);
    if (!st) rmsnorm_backward(NULL, PG(d->cap_norm), dcap, d->cap_in, PW(d->cap_norm), B * L, Dc, &d->cap_stats);
    state_free(m->pool, &gctx), state_free(m->pool, &gimg);
    if (!st) { /* back to temb: through SiLU from the final layer (and Lumina's blocks), directly from Z-Image's */
        float *dc = scratch_take_zero(&k, B * Dt, MEM_WORKSPACE, "lumina.dtemb");
        if (!(st = k.status)) {
            if (d->z) add_to(dc, m->ctx.dcs, B * Dt);
            st = temb_silu_backward(m, &d->t, dc, dfinal);
        }
    }
done:;
    const st_status end = scratch_end(&k);
    return st ? st : end;
}

/* segtrain's own initialisation, for training from scratch: the norms at 1, the modulations, the output and Z-Image's
 * pad tokens at zero (the blocks start as identities), the timestep embedding N(0, 0.02), xavier linears elsewhere */
static const init_rule lm_inits[] = {
    {INIT_ZERO, "norm1.linear|_norm2.linear|_norm3.linear|norm_out.linear_2|.adaLN_modulation.0|"
                "all_final_layer&.linear.|pad_token"},
    {INIT_ONE, "norm&.weight$|caption_embedder.0&.weight$|cap_embedder.0&.weight$"}, /* the RMSNorms' (1-D weights) */
    {INIT_NORMAL, "timestep_embedder|t_embedder"}, {0}};

const model_family lumina2_family = {
    .create = lm_create, .impl_size = sizeof(lm_model), .forward = lm_forward, .backward = lm_backward,
    .release = lm_release, .inits = lm_inits,
};

/* ---- the family's descriptor (family.h) ---- */

const blocks_words lumina2_blocks = {"%lld + %lld refiner blocks, %lld joint blocks",
                                     {offsetof(model_config, refiner_depth), offsetof(model_config, refiner_depth),
                                      offsetof(model_config, depth)}};

/* Neta Lumina: a Lumina-Image 2.0 fine-tune, the same shape */
st_status joint_check(const model_config *mc, bool axes)
{
    const int64_t hd = mc->hidden / mc->heads, *a = mc->rope_axes;
    if (mc->kv_heads < 1 || mc->heads % mc->kv_heads || mc->ffn_dim < 1 || mc->ffn_dim > 8 * mc->hidden ||
        !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->text_dim < 1 || mc->pooled_dim ||
        (axes && (a[0] + a[1] + a[2] != hd || a[0] % 2 || a[1] % 2 || a[2] % 2 || a[3])) || mc->patch_t != 1 ||
        mc->out_channels)
        return family_refuse(mc, GROUP_NORM, "lumina2, z_image, ernie, ideogram, omnigen and krea2 take a divisor of "
                             "the heads, 1 to 8 hidden_size, an eps in (0, 1), at least 1, and (but ideogram and "
                             "omnigen) three even axes summing to the head width (no pooled vector, out_channels 0)");
    return ST_OK;
}

static const family_preset presets[] = {
    /* Lumina-Image 2.0 (Alpha-VLLM/Lumina-Image-2.0's transformer): 26 joint blocks after 2 + 2 refiners, 24 heads x
     * 96 with 8 kv heads, Gemma 2 2B's 2304-wide text at SimpleTuner's 256 tokens, 16 latent channels in 2 x 2
     * patches (1024 px: 128 x 128); the rest in its preset hook below. The tiny one is the fixture's. */
    {"lumina2-tiny", 2, 48, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"lumina2", 26, 2304, 24, 2, 16, 128, 10, 0, 256, 2304, 0, false, false, 0, 0},
};

/* Lumina 2's three equal axes, (32, 32, 32) at 96 */
static void lumina2_rope_axes(model_config *mc)
{
    const int64_t hd = mc->hidden / mc->heads;
    mc->rope_axes[1] = mc->rope_axes[2] = 2 * (hd / 6), mc->rope_axes[0] = hd - 4 * (hd / 6), mc->rope_axes[3] = 0;
}

static void lumina2_preset(model_config *mc, const char *name, bool tiny)
{
    /* LuminaFeedForward's 4 D, rounded up to multiple_of 256 */
    mc->refiner_depth = tiny ? 1 : 2, mc->kv_heads = tiny ? 1 : 8, mc->norm_eps = 1e-5,
    mc->ffn_dim = tiny ? 4 * mc->hidden : 9216;
}

static st_status lumina2_check(const model_config *mc) { return joint_check(mc, true); }

/* Lumina2Transformer2DModel's config: its class defaults (cap_feat_dim 1024: the published Lumina-Image 2.0's is 2304,
 * which the file says), then the file's; the feed-forward's width as LuminaFeedForward rounds it (4 hidden_size,
 * times ffn_dim_multiplier, up to a multiple of multiple_of). */
static st_status lumina2_from_json(const cJSON *j, const char *file, model_config *mc)
{
    int64_t heads = 24, out = 0, multiple = 256, axes[3] = {32, 32, 32};
    mc->channels = 16, mc->depth = 26, mc->refiner_depth = 2, mc->hidden = 2304, mc->kv_heads = 8, mc->patch = 2;
    mc->text_dim = 1024, mc->patch_t = 1, mc->norm_eps = 1e-5;
    const json_key keys[] = {{"num_attention_heads", &heads}, {"num_kv_heads", &mc->kv_heads},
                             {"in_channels", &mc->channels}, {"out_channels", &out}, {"hidden_size", &mc->hidden},
                             {"num_layers", &mc->depth}, {"num_refiner_layers", &mc->refiner_depth},
                             {"patch_size", &mc->patch}, {"multiple_of", &multiple}, {"cap_feat_dim", &mc->text_dim}};
    st_status st = json_ints(j, file, keys, sizeof keys / sizeof *keys);
    if (!st) st = json_fixed(j, file, "scaling_factor", 1.0, "Lumina 2 (every published config's)");
    if (!st) st = json_axes(j, file, "axes_dim_rope", 3, axes);
    if (!st) st = json_eps(j, file, "norm_eps", &mc->norm_eps);
    if (st) return st;
    if (heads < 1 || (out && out != mc->channels))
        return st_fail(ST_ERR_UNSUPPORTED, "%s: num_attention_heads %lld, out_channels %lld; segtrain builds Lumina 2 "
                       "with at least 1 and out_channels null or in_channels (%lld)", file, (long long)heads,
                       (long long)out, (long long)mc->channels);
    mc->heads = heads, mc->single_depth = 0, mc->pooled_dim = 0, mc->guidance_embeds = false;
    set_rope_axes(mc, axes, 3);
    return lumina_ffn_width(j, file, multiple, mc);
}

st_status lumina_ffn_width(const cJSON *j, const char *file, int64_t multiple, model_config *mc)
{
    int64_t inner = 4 * mc->hidden;
    const cJSON *mult = cJSON_GetObjectItemCaseSensitive(j, "ffn_dim_multiplier");
    if (mult && !cJSON_IsNull(mult)) {
        if (!cJSON_IsNumber(mult) || !(mult->valuedouble > 0 && mult->valuedouble <= 2))
            return st_fail(ST_ERR_UNSUPPORTED, "%s: ffn_dim_multiplier is not a number in (0, 2]", file);
        inner = (int64_t)(mult->valuedouble * (double)inner);
    }
    if (multiple < 1) return st_fail(ST_ERR_UNSUPPORTED, "%s: multiple_of %lld; segtrain takes at least 1", file,
                                     (long long)multiple);
    mc->ffn_dim = multiple * ((inner + multiple - 1) / multiple);
    return ST_OK;
}

const family_desc lumina2_desc = {
    .name = "lumina2", .topology = TOPO_JOINT, .traits = TR_TEXT | TR_TEXT_MASK,
    .st = {{.name = "lumina2", .title = "Lumina-T2I", .diffusers = "Lumina2Transformer2DModel",
            .flavours = "2.0|neta-lumina", .built = "2.0:lumina2|neta-lumina:lumina2", .fallback = "2.0",
            .example = "lumina2.peft-lora.json", .tiny = "lumina2-tiny"}},
    .blocks_words = &lumina2_blocks, .ops = &lumina2_family, FAMILY_PRESETS(presets), .preset = lumina2_preset,
    .rope_axes = lumina2_rope_axes, .readers = {{"Lumina2Transformer2DModel", lumina2_from_json}},
    .fields = F_FFN | F_NORM_EPS | F_KV_HEADS | F_REFINER, .check = lumina2_check,
    .swap_blocks = {"layers"},
};
