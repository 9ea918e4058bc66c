/* LyCORIS adapters on linear layers (and on convolutions: lin.h's conv_layer), as the lycoris-lora package
 * (4.1.3) builds them from SimpleTuner's
 * lycoris_config: which layers a config adapts (lycoris_settings_for) and each algorithm's parameters,
 * initialisation, scale and products (LoKr, LoHa, full here; LoCon is lin.c's LoRA product under the package's
 * names). lin.c calls them; the config is read in src/models/core/lycoris_config.c. */
#ifndef SEGTRAIN_LYCORIS_H
#define SEGTRAIN_LYCORIS_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/params.h"

/* The package's network_module_dict names: lora and locon are one module (LoConModule). */
typedef enum lyco_algo { LYCO_NONE, LYCO_LOKR, LYCO_LOHA, LYCO_LOCON, LYCO_FULL } lyco_algo;

/* One module's settings: the config's root keys, with its class's module_algo_map entry over them. */
typedef struct lyco_settings {
    lyco_algo algo;
    int64_t dim;    /* linear_dim (the package's lora_dim); unused by full */
    double alpha;   /* linear_alpha; 0: dim */
    int64_t conv_dim;  /* a convolution's of a kernel over 1 x 1: a module_algo_map dim, else conv_dim (linear_dim
                        * where 0 or absent) */
    double conv_alpha; /* ... and its alpha: a module_algo_map alpha, else conv_alpha (linear_alpha where 0 or
                        * absent); 0: conv_dim */
    int64_t factor; /* LoKr: the factorization's factor; -1: the package's default (the most balanced split) */
    bool full_matrix, decompose_both, unbalanced; /* LoKr: unbalanced_factorization */
} lyco_settings;

#define LYCO_TARGETS_MAX 8
#define LYCO_NAME_MAX 64
#define LYCO_PATTERN_MAX 128

/* The adapted modules: apply_preset's target_module (and module_algo_map's keys, which the package targets too),
 * each with its settings, and target_name's patterns (Python's re.match: from the start of a module path; with
 * use_fnmatch, fnmatch over the whole path), which take the root settings. */
typedef struct lycoris_spec {
    bool on;
    lyco_settings root;
    int n_classes;
    struct {
        char cls[LYCO_NAME_MAX];
        lyco_settings s;
        bool mapped; /* has a module_algo_map entry: overrides a targeted class around it */
    } classes[LYCO_TARGETS_MAX];
    int n_names;
    char names[LYCO_TARGETS_MAX][LYCO_PATTERN_MAX];
    bool use_fnmatch;
    bool bypass; /* bypass_mode: the package's LoKr bypass fails on a grouped conv, refused there */
} lycoris_spec;

/* A family's instances of one of the package's module classes: the attribute names (space-separated) such a module
 * has in the state dict's paths ("attn1 attn2" for diffusers' Attention in a BasicTransformerBlock); "" where the
 * family has none of the class. A list ends with cls NULL. */
typedef struct lyco_class {
    const char *cls, *attrs;
} lyco_class;

/* diffusers' BasicTransformerBlock (attn1, attn2: Attention; ff: FeedForward), and Sana's (attention only: its ff is
 * a GLUMBConv). */
extern const lyco_class lyco_basic_block_classes[];
extern const lyco_class lyco_sana_classes[];

/* The settings of the linear layer at module path `name` ("transformer_blocks.0.attn1.to_q"), NULL when the set's
 * spec adapts none of it: inside an instance of a targeted class (the outermost, unless a deeper one has its own
 * module_algo_map entry), or matching a target_name pattern. */
const lyco_settings *lycoris_settings_for(const param_set *s, const char *name);
/* Whether the parameter `name` of ndim dimensions is a convolution's weight (".weight", 3 to 5 dimensions) inside a
 * module the spec targets (lycoris_settings_for), which the package adapts: a 1 x 1 kernel at linear_dim, a larger
 * one at conv_dim (linear_dim where it is 0 or absent; create_lycoris's own preset turns enable_conv back on).
 * segtrain adapts those conv_register and conv_register_depthwise register (lin.h: the U-Nets' convolutions,
 * Stable Cascade's depthwise ones); param_set_check refuses a set with any other (lycoris_conv_refusal). */
bool lycoris_adapts_conv(const param_set *s, const char *name, int ndim);
/* The package's factorization(dimension, factor): m <= n, m * n = dim. */
void lyco_factorization(int64_t dim, int64_t factor, int64_t *m, int64_t *n);
/* "lycoris_" and the module path with dots as underscores (LycorisNetwork's lora_name); false when it does not fit. */
bool lyco_module_name(char *out, size_t n, const char *path);

/* A LyCORIS adapter of a linear layer (in, out), one of:
 * - LoKr: dW = scale kron(w1, w2), in = c d, out = a b; w1 (a, c) or w1_a (a, r) w1_b (r, c); w2 (b, d) or w2_a
 *   (b, r) w2_b (r, d). Keys "lycoris_<module>.lokr_w1" ... On a k x k convolution (lyco_conv_register) the
 *   channels are factored, in = c d', and w2 carries the kernel: (b, d', k, k), or w2_b (r, d' k k); d is d' k k,
 *   so that dW is the weight (out, in k k) flattened.
 * - LoHa: dW = scale (w1_a w1_b) * (w2_a w2_b) elementwise, w1_a, w2_a (out, r), w1_b, w2_b (r, in); keys
 *   "hada_w1_a" ..., held in w1_a, w1_b, w2_a, w2_b.
 * - full: the weight's difference itself, diff (out, in) and diff_b (out) where the layer has a bias: y gains
 *   x diff^T + diff_b. Keys "diff", "diff_b"; no alpha.
 * LoCon is not one on a linear layer or a groups-1 conv: lin_register and conv_register give it the LoRA product
 * (locon_register). On a grouped conv it is one, rebuilt as the package rebuilds it there: dW = scale up down,
 * w1_a lora_up (out, r), w1_b lora_down (r, in k k). */
typedef struct lyco_adapter {
    lyco_algo algo; /* LYCO_NONE: none */
    int w1, w1_a, w1_b, w2, w2_a, w2_b, diff, diff_b; /* parameter indices, -1 where not used */
    int64_t a, b, c, d, rank;
    float scale; /* alpha / dim (LoKr: 1 with both halves full, the package sets alpha = dim then) */
    float alpha; /* the "alpha" the package saves beside the weights */
} lyco_adapter;

/* The adapter a module's settings give the linear layer `name` (bias: whether it has one, which full's diff_b
 * follows); LoCon's go to locon_register. */
lyco_adapter lyco_register(param_set *s, const char *name, int64_t in, int64_t out, bool bias,
                           const lyco_settings *ly);
/* LoCon, LoRA under the package's keys, into *down and *up, the module's alpha beside them; *scale alpha / r; returns
 * r. kernel 0: a linear layer's, lora_down (r, in), lora_up (out, r), r linear_dim. kernel k: a k x k
 * convolution's, lora_down (r, in, k, k) (the layer's own kernel, stride and padding), lora_up (out, r, 1, 1), r
 * linear_dim where k is 1 and conv_dim above (the alpha likewise). */
int64_t locon_register(param_set *s, const char *name, int64_t in, int64_t out, int64_t kernel,
                       const lyco_settings *ly, int *down, int *up, float *scale);
/* Why param_set_check refuses the convolution weight `name` (of `shape`) that the spec's targets reach (lycoris.h's
 * lycoris_adapts_conv), into buf. */
void lycoris_conv_refusal(const param_set *s, const char *name, const int64_t *shape, char *buf, size_t n);
/* The rebuilt adapter of a k x k convolution (in channels a group, out), at conv_dim and conv_alpha where k is over
 * 1: LoHa's as a linear layer's of in k k inputs (the package's hada_w1_b (r, in k k)); LoKr's over the channels'
 * factorization, the kernel in w2; full's diff (out, in, k, k) and diff_b (out); LoCon's (a grouped conv's)
 * lora_down (r, in, k, k) and lora_up (out, r, 1, 1). */
lyco_adapter lyco_conv_register(param_set *s, const char *name, int64_t in, int64_t out, int64_t kernel,
                                const lyco_settings *ly);
/* w (out, in) += the adapter's dW (LoHa's, LoKr's, LoCon's rebuilt in workspace). */
st_status lyco_delta_add(param_set *s, pool *p, const lyco_adapter *k, float *w);
/* The adapter's gradients from G, dW's (out, in): full's diff takes it, LoHa's as HadaWeight's, LoKr's through
 * kron (kron_backward), LoCon's through up down. */
st_status lyco_delta_backward(param_set *s, pool *p, const lyco_adapter *k, const float *G);
/* y (n, out) += the adapter's x dW^T (LoKr in the package's bypass form: dW never built; LoHa's dW built in
 * workspace, as the package's bypass builds it). */
st_status lyco_forward(param_set *s, pool *p, const lyco_adapter *k, float *y, const float *x, int64_t n);
/* dx (may be NULL) += dL/dx; accumulates the adapter's gradients. */
st_status lyco_backward(param_set *s, pool *p, const lyco_adapter *k, float *dx, const float *dy, const float *x,
                        int64_t n);
/* The adapters as LycorisNetwork.save_weights writes them (SimpleTuner's pytorch_lora_weights.safetensors under
 * lora_type lycoris): every trainable parameter under its own name (the package's keys), each module's
 * "lycoris_<module>.alpha" (a 0-d tensor), and the metadata "lycoris_config": config_json (the file's text, as
 * SimpleTuner's save hook puts its json.dumps there), then meta's pairs. Atomic. */
st_status param_set_save_lycoris(param_set *s, const char *path, const char *config_json, const char *const *meta,
                                 int n_meta);
/* Reads the adapters from such a file (or SFT_LORA_FILE in a folder): every trainable parameter by name and shape,
 * and each module's alpha, which must be the one the model's spec gives it. */
st_status param_set_load_lycoris(param_set *s, const char *path);
/* How the package initialises a parameter of this name. */
typedef enum lyco_init {
    LYCO_INIT_NONE = -1, /* not a LyCORIS parameter */
    LYCO_INIT_ZERO,      /* LoKr's w2, w2_b; LoHa's hada_w2_a; LoCon's lora_up; full's diff, diff_b */
    LYCO_INIT_KAIMING,   /* kaiming-uniform(a = sqrt 5), bound 1 / sqrt(fan_in): LoKr's others, lora_down */
    LYCO_INIT_NORMAL,    /* normal(0, *std): LoHa's hada_w1_a (0.1), hada_w1_b and hada_w2_b (1) */
} lyco_init;
lyco_init lyco_init_of(const char *name, float *std);

#endif
