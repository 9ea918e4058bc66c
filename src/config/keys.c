/* Every configuration key segtrain reads. Names, and defaults where segtrain has no reason to differ, are
 * SimpleTuner's, so that the relevant part of a SimpleTuner config.json carries over unchanged. The
 * checkpointing rows follow ../shared/spec/checkpointing.md ("Controls") exactly. */
#include "keys.h"

#include <math.h>
#include <stddef.h>

#define ANY_MIN (-INFINITY)
#define ANY_MAX INFINITY

/* One macro per kind of row keeps the table readable: name, default, [choices | bounds], section, SimpleTuner
 * counterpart, doc. */
#define BOOL_KEY(n, d, sec, st, doc) {n, NULL, CFG_BOOL, d, NULL, ANY_MIN, ANY_MAX, sec, st, doc}
#define INT_KEY(n, d, lo, hi, sec, st, doc) {n, NULL, CFG_INT, d, NULL, lo, hi, sec, st, doc}
#define FLOAT_KEY(n, d, lo, hi, sec, st, doc) {n, NULL, CFG_FLOAT, d, NULL, lo, hi, sec, st, doc}
#define CHOICE_KEY(n, d, ch, sec, st, doc) {n, NULL, CFG_STRING, d, ch, ANY_MIN, ANY_MAX, sec, st, doc}
#define TEXT_KEY(n, d, sec, st, doc) {n, NULL, CFG_STRING, d, NULL, ANY_MIN, ANY_MAX, sec, st, doc}
#define SIZE_KEY(n, sec, st, doc) {n, NULL, CFG_SIZE, "", NULL, ANY_MIN, ANY_MAX, sec, st, doc}

const char *const cfg_section_names[SEC_COUNT] = {"Model", "Checkpointing", "Memory", "Training"};

const cfg_key cfg_keys[] = {
    /* model */
    CHOICE_KEY("model_family", "dit", "dit|mmdit|skipdit", SEC_MODEL,
               "=; its families are `flux`, `sd3`, `sdxl`, ...",
               "Model family, given by its block topology."),
    CHOICE_KEY("model_preset", "dit-tiny", "dit-tiny|dit-s2|dit-b2|dit-xl2|mmdit-tiny|mmdit-s|skipdit-tiny|skipdit-s",
               SEC_MODEL, NULL,
               "Named size, which also names the family (see ../shared/spec/dit.md and docs/FAMILIES.md); given "
               "model_family alone, that family's `-tiny`. The keys below override single dimensions."),
    INT_KEY("depth", "0", 0, ANY_MAX, SEC_MODEL, NULL,
            "Number of blocks (mmdit: double-stream blocks; skipdit: odd, in + mid + out); 0 = from the preset."),
    INT_KEY("num_single_layers", "0", 0, ANY_MAX, SEC_MODEL, "= (diffusers' Flux config)",
            "mmdit: single-stream blocks after the double-stream ones; 0 = from the preset."),
    INT_KEY("tokenizer_max_length", "0", 0, ANY_MAX, SEC_MODEL, "= (T5's length there)",
            "mmdit: text tokens per caption (padded, longer captions cut); 0 = from the preset."),
    INT_KEY("text_vocab_size", "0", 0, ANY_MAX, SEC_MODEL, NULL,
            "mmdit: rows of the text token table (words are hashed into them); 0 = from the preset (1024)."),
    INT_KEY("hidden_size", "0", 0, ANY_MAX, SEC_MODEL, NULL, "Token width D; 0 = from the preset."),
    INT_KEY("num_heads", "0", 0, ANY_MAX, SEC_MODEL, NULL, "Attention heads; 0 = from the preset."),
    INT_KEY("patch_size", "0", 0, ANY_MAX, SEC_MODEL, NULL, "Patch edge p; 0 = from the preset."),
    INT_KEY("in_channels", "0", 0, ANY_MAX, SEC_MODEL, NULL, "Input (latent) channels C; 0 = from the preset."),
    INT_KEY("resolution", "0", 0, ANY_MAX, SEC_MODEL, "= (pixels or megapixels there, default 1024)",
            "Input edge H = W, in latent pixels; 0 = from the preset."),
    INT_KEY("num_classes", "0", 0, ANY_MAX, SEC_MODEL, NULL,
            "Class labels K (plus one \"no label\" row); 0 = from the preset."),
    CHOICE_KEY("attention_mechanism", "flash", "math|flash", SEC_MODEL,
               "=, other choices there (`diffusers`, `xformers`, ...)",
               "`math` keeps the softmax probabilities for backward; `flash` keeps only the row log-sum-exp "
               "and recomputes them tile by tile."),

    /* checkpointing: ../shared/spec/checkpointing.md, "Controls" */
    BOOL_KEY("gradient_checkpointing", "false", SEC_CHECKPOINTING, "=",
             "Master switch for activation checkpointing."),
    CHOICE_KEY("gradient_checkpointing_backend", "torch", "torch|torch-ffn|unsloth|unsloth-ffn", SEC_CHECKPOINTING,
               "=",
               "What a checkpointed unit keeps, and where: `torch` recomputes the whole segment from its boundary "
               "in device memory; `unsloth` as `torch` with the boundary in host memory; `torch-ffn` recomputes "
               "only each block's feed-forward; `unsloth-ffn` as `torch-ffn` with the saved FFN input in host memory."),
    INT_KEY("gradient_checkpointing_interval", "1", 1, ANY_MAX, SEC_CHECKPOINTING,
            "= (default none there, and \"every n-th block\" on some families)",
            "Segment width: this many consecutive blocks run as one checkpointed unit."),
    INT_KEY("gradient_checkpointing_segment_stride", "0", 1, ANY_MAX, SEC_CHECKPOINTING, "=",
            "A segment starts every `stride` blocks and the blocks between segments keep their activations; "
            "0 (the default, not accepted as a value) = the interval. Must be >= the interval."),
    BOOL_KEY("gradient_checkpointing_offload_attention", "false", SEC_CHECKPOINTING, "=",
             "The attention side's saved activations move to host memory during forward and come back for "
             "backward (nothing is recomputed); applies even with `gradient_checkpointing` false."),
    {"capture_hidden_states", NULL, CFG_INT_LIST, "", NULL, 0, ANY_MAX, SEC_CHECKPOINTING, NULL,
     "Block indices whose output hidden states are captured, e.g. `[3, 7]` or `\"3,7\"`; capturing makes "
     "checkpointed segments fall back to single blocks."},

    /* memory */
    SIZE_KEY("device_memory", SEC_MEMORY, NULL,
             "Device memory budget, e.g. `\"24GiB\"`: `train` refuses a run whose predicted peak exceeds it, and "
             "an allocation past it is an out-of-memory status, never a crash."),
    SIZE_KEY("host_memory", SEC_MEMORY, NULL, "Host memory budget for offloaded state, e.g. `\"64GiB\"`."),
    INT_KEY("num_threads", "0", 0, ANY_MAX, SEC_MEMORY, NULL, "Threads for ops and BLAS; 0 = all cores."),

    /* training */
    INT_KEY("train_batch_size", "1", 1, ANY_MAX, SEC_TRAINING, "= (default 4 there)", "Samples per step."),
    INT_KEY("gradient_accumulation_steps", "1", 1, ANY_MAX, SEC_TRAINING, "=",
            "Micro-batches whose gradients are summed before one optimizer step."),
    INT_KEY("max_train_steps", "100", 1, ANY_MAX, SEC_TRAINING, "=", "Optimizer steps to run."),
    INT_KEY("seed", "0", 0, ANY_MAX, SEC_TRAINING, "=", "Seed of every random stream (init, data, noise, timesteps)."),
    FLOAT_KEY("learning_rate", "1e-4", 0, ANY_MAX, SEC_TRAINING, "= (default 4e-7 there)",
              "Peak learning rate, reached after the warm-up."),
    CHOICE_KEY("optimizer", "adamw", "adamw|lion", SEC_TRAINING, "=, more choices there", "Optimizer."),
    CHOICE_KEY("lr_scheduler", "constant", "constant|cosine", SEC_TRAINING, "=, more choices there",
               "Learning-rate schedule after the warm-up."),
    INT_KEY("lr_warmup_steps", "0", 0, ANY_MAX, SEC_TRAINING, "= (default 500 there)",
            "Steps of linear warm-up from 0 to the learning rate."),
    FLOAT_KEY("adam_beta1", "0.9", 0, 1, SEC_TRAINING, "=", "First-moment decay (AdamW; Lion's interpolation)."),
    FLOAT_KEY("adam_beta2", "0.999", 0, 1, SEC_TRAINING, "=", "Second-moment decay (AdamW; Lion's momentum)."),
    FLOAT_KEY("adam_weight_decay", "1e-2", 0, ANY_MAX, SEC_TRAINING, "=", "Decoupled weight decay."),
    FLOAT_KEY("adam_epsilon", "1e-8", 0, ANY_MAX, SEC_TRAINING, "=", "AdamW's denominator epsilon."),
    FLOAT_KEY("max_grad_norm", "2.0", 0, ANY_MAX, SEC_TRAINING, "=",
              "Clip the global gradient norm to this; 0 = no clipping."),
    CHOICE_KEY("model_type", "full", "full|lora", SEC_TRAINING, "=, more choices there",
               "Train every weight (`full`) or low-rank adapters only (`lora`)."),
    INT_KEY("lora_rank", "16", 1, ANY_MAX, SEC_TRAINING, "=", "Rank of the LoRA update matrices."),
    FLOAT_KEY("lora_alpha", "0", 0, ANY_MAX, SEC_TRAINING, "= (default none there, meaning the rank)",
              "LoRA scale numerator (the update is scaled by alpha / rank); 0 = the rank."),
    TEXT_KEY("lora_target", "attention", SEC_TRAINING, "none (`flux_lora_target` is the nearest)",
             "Which linears get adapters, e.g. `attention` or `attention+mlp`."),
    TEXT_KEY("output_dir", "output", SEC_TRAINING, "= (default `simpletuner-results` there)",
             "Folder for checkpoints, reports and the final weights."),
    {"checkpoint_step_interval", "checkpointing_steps", CFG_INT, "500", NULL, 0, ANY_MAX, SEC_TRAINING,
     "`checkpointing_steps`, accepted here as an alias",
     "Save a training-state checkpoint every this many steps; 0 = never."},
    INT_KEY("checkpoints_total_limit", "0", 0, ANY_MAX, SEC_TRAINING, "=",
            "Keep at most this many checkpoints, deleting the oldest; 0 = keep all."),
    TEXT_KEY("resume_from_checkpoint", "", SEC_TRAINING, "= (default `latest` there)",
             "A checkpoint folder to resume from, or `latest` for the newest in `output_dir`; empty = start fresh."),
    INT_KEY("validation_steps", "100", 0, ANY_MAX, SEC_TRAINING, "=",
            "Sample a validation grid (`output_dir/validation/step-N.png`) every this many steps; 0 = never."),
    INT_KEY("validation_num_inference_steps", "30", 1, ANY_MAX, SEC_TRAINING, "= (default 30 there)",
            "Euler steps from noise to image when sampling."),
    FLOAT_KEY("validation_guidance", "4.0", 0, ANY_MAX, SEC_TRAINING, "= (default 7.5 there)",
              "Classifier-free guidance scale when sampling; 1 = no guidance."),
    INT_KEY("validation_seed", "0", 0, ANY_MAX, SEC_TRAINING, "=", "Seed of the sampling noise."),
    INT_KEY("validation_samples_per_class", "4", 1, ANY_MAX, SEC_TRAINING, NULL,
            "Images per class in a sample grid (one row per class)."),
    FLOAT_KEY("caption_dropout_probability", "0.1", 0, 1, SEC_TRAINING, "= (default 0.1 there)",
              "Share of samples trained with the null label, so that classifier-free guidance has an "
              "unconditional model to steer from."),
    TEXT_KEY("pretrained_model_name_or_path", "", SEC_TRAINING, "= (a hub name or folder there)",
             "A safetensors file of the model's weights to start from (and, with LoRA, to adapt); empty = "
             "the family's initialisation from `seed`."),
    TEXT_KEY("data_dir", "", SEC_TRAINING, NULL,
             "Folder of training data (PNG images, optional same-named .txt captions, or class subfolders); "
             "empty = the built-in dataset of procedurally drawn shapes."),
    BOOL_KEY("synthetic_data", "false", SEC_TRAINING, NULL,
             "Train on seeded random batches (standard-normal images of the model's shape, labels cycling through "
             "the classes) instead of a dataset: for sweeps and benchmarks, which measure time and memory."),
    INT_KEY("builtin_dataset_size", "4096", 1, ANY_MAX, SEC_TRAINING, NULL,
            "Samples in the built-in dataset (drawn on demand from `seed`, nothing is stored)."),
};

const int cfg_key_count = (int)(sizeof cfg_keys / sizeof cfg_keys[0]);
