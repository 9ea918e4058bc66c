/* A model's named parameters: one pool allocation for all weights (MEM_WEIGHTS) and one for the gradients of
 * the trainable ones (MEM_GRADIENTS), each parameter a named slice of them. Names and layouts are the public
 * state_dict's, so that safetensors files load by name. */
#ifndef SEGTRAIN_PARAMS_H
#define SEGTRAIN_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "segtrain/copy.h"
#include "segtrain/pool.h"
#include "segtrain/quant.h"

#define PARAM_NAME_MAX 128
#define PARAM_MAX_DIMS 5 /* a Conv3d weight's */

typedef struct param {
    char name[PARAM_NAME_MAX];
    int ndim;
    int64_t shape[PARAM_MAX_DIMS];
    int64_t numel;
    float *w;       /* NULL when the weight is held in bf16 or quantized */
    uint16_t *w16;  /* the weight in bfloat16, for a bf16 parameter (below); else NULL */
    float *g;       /* NULL for a frozen parameter */
    bool trainable; /* has a gradient and optimizer state */
    bool fixed;     /* a fixed buffer (pos_embed): saved with the weights, loaded only if a file has it */
    bool bf16;      /* held in bf16: a frozen linear layer's weight (lin.h) under the set's bf16_base */
    quant_format quant; /* held quantized (quant.h): a frozen linear layer's weight under the set's quant_base */
    uint8_t *wq;        /* a quantized weight's packed data, and its bf16 scales (and shifts): quant_layout_of's */
    uint16_t *wq_stats;
    bool grid;      /* a fixed table of the latent's grid (DiT's pos_embed): a model at another shape fills its own */
    float lyco_alpha; /* a LoKr adapter's w1 (or w1_a): the alpha lycoris-lora saves beside it (lycoris.h); else 0 */
    int swap_group;   /* musubi_blocks_to_swap: g > 0, a frozen weight of swapped block group g held in host memory
                         (param_set_swap); 0: on the device. ramtorch: g is one streamed linear layer's */
    bool linear;      /* the weight of a linear layer (lin_register's): what ramtorch may stream */
} param;

#define PARAM_GROUP_LABEL_MAX (PARAM_NAME_MAX + 32)

/* musubi_blocks_to_swap (docs/WEIGHTS.md): a swapped block's frozen weights, one host allocation (MEM_WEIGHTS,
 * "weights (swapped blocks)"), brought into one device buffer ("weights (swapped block)") around each use. Group
 * offload's groups the same, with their own tags; a group spilled to disk (param_set_spill) has no home but a file. */
typedef struct param_swap_group {
    uint8_t *home; /* host pool; NULL once spilled */
    size_t bytes;
    void *dev;        /* its device buffer while it is in (NULL: out) */
    copy_job *job;    /* a prefetch's copy still on its way to dev */
    copy_engine *engine; /* the engine copying it */
    void *staging;    /* a spilled group's bytes read from its file, held until its copy is done (host pool) */
    char *file;       /* the file a spilled group's bytes are in (NULL: not spilled) */
    char label[PARAM_GROUP_LABEL_MAX]; /* its name in messages and its file's: "transformer_blocks_0_1" */
} param_swap_group;

typedef struct param_set {
    int n, cap;
    param *items;
    pool *pool;
    float *weights, *grads;
    uint16_t *weights16;              /* the bf16 parameters' block (MEM_WEIGHTS, "weights (bf16)") */
    int64_t weight_count, grad_count; /* values, counted as parameters are registered */
    /* mixed_precision bf16 under LoRA: the weight of every frozen linear layer (lin.h) is held in bf16, the adapted
     * bases among them. Set before registration. Only those: other weights are read as float where they are read. */
    bool bf16_base;
    /* base_model_precision (docs/QUANTIZATION.md): the weight of every frozen linear layer held quantized instead,
     * in its blocks "weights (quantized)" and "weights (quantized scales)". Set before registration. */
    quant_format quant_base;
    const char *const *quant_exclude; /* modules quant_base leaves in bf16 (fnmatch patterns; NULL: none) */
    uint8_t *weightsq;
    uint16_t *weightsq_stats;
    int too_large; /* 1 + the index of the first parameter that took a size or the total past CK_MAX_ELEMENTS */
    /* 1 + the index of the first convolution weight (a ".weight" of 3 to 5 dimensions) that lora_type lycoris's
     * targets reach (lycoris_adapts_conv): the package adapts it, segtrain does not, so param_set_check refuses */
    int lyco_conv;
    bool oom;      /* the list could not grow: param_add returned -1 from then on */
    bool adapters_off; /* lin_forward skips every LoRA adapter (h3_drift's frozen-base forward) */
    /* A family whose published checkpoint names its tensors otherwise (HeartMuLa's torchtune names): the parameter's
     * name of a file's tensor, into name (PARAM_NAME_MAX bytes); param_set_load then also reads a folder in
     * transformers' layout (model.safetensors.index.json, model.safetensors). NULL: the names are the parameters'. */
    void (*checkpoint_name)(const char *tensor, char *name);
    const char *lora_component; /* the pipeline component its LoRA file names ("unet" for a U-Net); NULL: transformer */
    /* lora_type lycoris: the config's adapters and the family's module classes (lycoris.h), set before registration;
     * lin_register then adapts the layers they select, whatever rank its caller gives. NULL: LoRA. */
    const struct lycoris_spec *lycoris;
    const struct lyco_class *lycoris_classes;
    const struct param_set *base; /* param_set_share's: the set whose weights and gradients these are; NULL: its own */
    param_swap_group *swap; /* groups 1 .. n_swap at swap[g - 1] (a shared set reads base's); NULL: none swapped */
    int n_swap;
    pool *swap_host;        /* the host pool that holds them (param_set_alloc_swapped) */
    int swap_in;            /* how many groups' weights are on the device now */
    size_t swap_bytes_in;   /* bytes brought in by param_swap_in since the set was made (dry or not): the link's
                               weight traffic, which the cost model prices (advise.h) */
    /* ramtorch (docs/WEIGHTS.md): each group is one linear layer's weight and bias, which lin.c brings in with
     * layer_in around each GEMM that reads them and lets go with layer_out (NULL: the executor brings whole blocks'
     * groups in, or nothing streams) */
    bool stream_layers;
    st_status (*layer_in)(void *ctx, int group);
    void (*layer_out)(void *ctx, int group);
    void *layer_ctx;
    /* group offload (docs/WEIGHTS.md): the group of every frozen weight outside the other groups, brought in for a
     * whole step (model_forward to model_release); 0: none. offload_tags: group offload's tags on the pools. */
    int step_group;
    bool offload_tags;
    size_t spill_bytes_read; /* bytes read back from spilled groups' files since the set was made (dry or not) */
} param_set;

/* Registers a parameter (before param_set_alloc) and returns its index; -1 when out of memory, which
 * param_set_check reports. */
int param_add(param_set *s, const char *name, int ndim, const int64_t *shape, bool trainable);
int param_add_fixed(param_set *s, const char *name, int ndim, const int64_t *shape);
/* A fixed table computed from the latent's grid (param.grid): two grids of one token count have tables of one shape
 * but other values, so a model sharing another's weights never shares it. */
int param_add_grid_table(param_set *s, const char *name, int ndim, const int64_t *shape);
param *param_at(param_set *s, int index);
param *param_find(param_set *s, const char *name);

/* ST_ERR_HOST_OOM if a registration ran out of memory; else ST_ERR_INVALID naming the first parameter whose
 * size, or the parameters' total, exceeds CK_MAX_ELEMENTS. */
st_status param_set_check(const param_set *s);
/* Allocates weights (one float block, and one bf16 block when a parameter is bf16) and gradients from the pool and
 * points every parameter into them (after param_set_check). */
st_status param_set_alloc(param_set *s, pool *p);
/* Points every parameter of s (registered, not allocated) into base's (allocated): the weight, bf16 weight and
 * gradient of base's parameter of the same name and shape, which s never frees (s->grads is base's block, so
 * offsets into it are base's). A grid table (param_add_grid_table) gets its own block from p instead (MEM_WEIGHTS,
 * "weights (grid tables)"), unfilled: base's is of another grid. A parameter base lacks or holds at another shape is
 * ST_ERR_INVALID naming both; grid tables beside another fixed table, ST_ERR_INTERNAL (a family fills its fixed
 * tables together, and would refill the shared one). */
st_status param_set_share(param_set *s, const param_set *base, pool *p);
/* musubi_blocks_to_swap (docs/WEIGHTS.md). Before param_set_alloc: the frozen weights whose names start with prefix
 * (a block's, "blocks.7.") form group g (1, 2, ... in the order given); trainable ones (adapters) stay on the
 * device. ST_ERR_INVALID when the prefix names no frozen weight. */
st_status param_set_swap(param_set *s, int g, const char *prefix);
/* After param_set_alloc (which leaves swapped weights out): each group's home in the host pool, zeroed, and the
 * weights pointed there. A no-op when nothing is swapped or it was done; a shared set's groups are base's. */
st_status param_set_alloc_swapped(param_set *s, pool *host);
/* Marks every frozen, non-fixed weight of no group yet as group g (group offload's rest); *marked: how many. */
st_status param_set_swap_rest(param_set *s, int g, int *marked);
/* Brings group g's weights into one device buffer (s->pool) with the copy engine, waits, and points them there; a
 * group param_swap_prefetch started is waited for. A group already in is ST_ERR_INTERNAL. A spilled group is read
 * from its file into a host buffer (swap_host) first. */
st_status param_swap_in(param_set *s, int g, copy_engine *e);
/* Starts bringing group g in without waiting for it (a no-op when it is in or on its way). */
st_status param_swap_prefetch(param_set *s, int g, copy_engine *e);
/* Whether group g is on the device and waited for. */
bool param_swap_is_in(const param_set *s, int g);
/* Points group g's weights home again and frees the device buffer (frozen: nothing is copied back); a no-op when
 * it is not in. */
void param_swap_out(param_set *s, int g);
/* group_offload_to_disk_path: writes each group's bytes (as held) to dir/group_<label>.safetensors (atomically; dir
 * made), frees its home and reads it from there on each param_swap_in. On dry pools nothing is written. A no-op
 * for a shared set, and once done. */
st_status param_set_spill(param_set *s, const char *dir);
/* The bytes of the file param_set_spill writes for group g (its header and data). */
size_t param_spill_file_bytes(const param_set *s, int g);

/* Frees what the set allocated (a shared set: its grid tables alone) and its list. */
void param_set_free(param_set *s);

void param_set_zero_grads(param_set *s);
/* Writes n floats into a bf16 parameter, each rounded to the nearest bf16 (ties to even), as torch's .to(bfloat16);
 * into a quantized one, rounded so and quantized (SimpleTuner quantizes the bf16 model). A dry parameter takes
 * nothing. ST_ERR_HOST_OOM: no room for the bf16 copy a quantized one is packed from. */
st_status param_store_bf16(param *q, const float *values);

/* Which parameters a file holds: all of them, the trainable ones (LoRA adapters when training LoRA), or the
 * frozen ones (the base model under LoRA). */
typedef enum param_part { PARAMS_ALL, PARAMS_TRAINABLE, PARAMS_FROZEN } param_part;

/* The file names of diffusers' model folders (diffusers' SAFETENSORS_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME,
 * LORA_WEIGHT_NAME_SAFE). */
#define SFT_DIFFUSERS_SINGLE "diffusion_pytorch_model.safetensors"
#define SFT_DIFFUSERS_INDEX "diffusion_pytorch_model.safetensors.index.json"
#define SFT_LORA_FILE "pytorch_lora_weights.safetensors"

/* Reads the parameters of `part` by name and shape (F32, F16, BF16, F8_E4M3 or F8_E5M2 stored, read as float) from
 * path, which is
 * - a .safetensors file;
 * - a diffusers index (SFT_DIFFUSERS_INDEX: {"metadata": {...}, "weight_map": {tensor: shard file}}) with its
 *   shards beside it: every tensor must be in the shard the index names and in no other shard;
 * - a diffusers model folder holding SFT_DIFFUSERS_INDEX or SFT_DIFFUSERS_SINGLE, directly or in transformer/ (a
 *   pipeline folder, SimpleTuner's pretrained_model_name_or_path). Where both are present the index wins, as in
 *   diffusers' from_pretrained.
 * With the set's checkpoint_name, a tensor loads into the parameter that names it (its own name or the one
 * checkpoint_name gives it), a parameter held under both is refused, and a folder may be transformers'.
 * A missing tensor (other than a fixed one), an unexpected tensor (unless its name starts with other_prefix, e.g.
 * "optimizer." in a checkpoint), a wrong shape or dtype, a broken index or shard is one error line naming the
 * file and the tensor. A grid table (param_add_grid_table) is never read, whatever the file holds: it is computed
 * for the model's own grid, and a file's was saved at whichever shape its model had. */
st_status param_set_load(param_set *s, const char *path, param_part part, const char *other_prefix);

/* A named float tensor to write beside the parameters. */
typedef struct named_floats {
    const char *name;
    int ndim;
    int64_t shape[PARAM_MAX_DIMS];
    const float *data;
} named_floats;

/* Writes the weights of `part` (or, with grads, the gradients of its trainable parameters), each under the
 * parameter's own name, then `extra` (F32 tensors such as the loss or optimizer state), with metadata pairs.
 * Atomic. */
st_status param_set_save(param_set *s, const char *path, param_part part, bool grads, const named_floats *extra,
                         int n_extra, const char *const *meta, int n_meta);

/* LoRA adapters as diffusers' save_lora_weights writes them (SimpleTuner's pytorch_lora_weights.safetensors):
 * each adapter "<module>.lora_A.weight" / ".lora_B.weight" under "transformer." (the set's lora_component's name:
 * "unet." for the U-Nets, as diffusers' and SimpleTuner's U-Net pipelines name them), and the metadata "format": "pt"
 * and "lora_adapter_metadata": JSON {"transformer.lora_alpha", "transformer.r", "transformer.target_modules"}, the
 * fields of PEFT's LoraConfig; target_modules are the adapted modules' last names ("to_q", "to_out.0"), or the full
 * name where the last one would also select a module without an adapter. meta: more pairs, as param_set_save.
 * Every trainable parameter must be an adapter, all of one rank. Atomic. */
st_status param_set_save_lora(param_set *s, const char *path, double alpha, const char *const *meta, int n_meta);
/* Reads the trainable parameters (the adapters) from a LoRA file, or from SFT_LORA_FILE in a folder, under
 * segtrain's names, with "transformer." (the component's name) before them, or PEFT's ".lora_A.default.weight"
 * form. When the file carries lora_adapter_metadata, its r and lora_alpha must be the model's (alpha: the config's
 * lora_alpha, the rank when unset), and per-module ranks, rsLoRA and DoRA are refused. Missing, unexpected, duplicate
 * (one adapter under two names) and misshapen tensors are one error line each. */
st_status param_set_load_lora(param_set *s, const char *path, double alpha);

#endif
