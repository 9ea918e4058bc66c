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
#define BOOL_KEY(n, d, sec, st, doc) {n, NULL, CFG_BOOL, d, NULL, ANY_MIN, ANY_MAX, sec, st, doc, 0}
#define INT_KEY(n, d, lo, hi, sec, st, doc) {n, NULL, CFG_INT, d, NULL, lo, hi, sec, st, doc, 0}
#define FLOAT_KEY(n, d, lo, hi, sec, st, doc) {n, NULL, CFG_FLOAT, d, NULL, lo, hi, sec, st, doc, 0}
#define CHOICE_KEY(n, d, ch, sec, st, doc) {n, NULL, CFG_STRING, d, ch, ANY_MIN, ANY_MAX, sec, st, doc, 0}
#define TEXT_KEY(n, d, sec, st, doc) {n, NULL, CFG_STRING, d, NULL, ANY_MIN, ANY_MAX, sec, st, doc, 0}
/* A name that a higher layer checks against its own list (model_preset: the models registry's presets) */
#define NAME_KEY(n, d, sec, st, doc) {n, NULL, CFG_STRING, d, NULL, ANY_MIN, ANY_MAX, sec, st, doc, CFG_EMPTY_CLEARS}
#define SIZE_KEY(n, sec, st, doc) {n, NULL, CFG_SIZE, "", NULL, ANY_MIN, ANY_MAX, sec, st, doc, 0}
/* A number whose bound itself breaks the arithmetic: a zero epsilon or learning rate, a beta of 1 */
#define POSITIVE_KEY(n, d, sec, st, doc) {n, NULL, CFG_FLOAT, d, NULL, 0, ANY_MAX, sec, st, doc, CFG_OPEN_MIN}

const char *const cfg_section_names[SEC_COUNT] = {"Model", "Checkpointing", "Memory", "Training"};

const cfg_key cfg_keys[] = {
    /* model */
    TEXT_KEY("model_family", "dit", SEC_MODEL, "=",
             "Model family: segtrain's own topologies `dit`, `mmdit`, `skipdit`, or a SimpleTuner family by "
             "SimpleTuner's name (`flux`, `sd3`, `pixart_sigma`, `wan`, ...; docs/FAMILIES.md lists each, what "
             "topology it needs and whether it is built)."),
    TEXT_KEY("model_flavour", "", SEC_MODEL, "=",
             "A SimpleTuner family's flavour (`dev`, `schnell`, ...), checked against that family's list; empty = "
             "its default."),
    NAME_KEY("model_preset", "dit-tiny", SEC_MODEL, NULL,
             "Named size, which also names the family (see ../shared/spec/dit.md; docs/FAMILIES.md lists each "
             "family's presets, `segtrain plan --set model_preset=?` all of them); given model_family alone, a "
             "SimpleTuner family's flavour's real sizes (`flux` `dev` is `flux-dev`), or segtrain's own family's "
             "`-tiny`. The keys below override single dimensions."),
    INT_KEY("depth", "0", 0, 4096, SEC_MODEL, NULL,
            "Number of blocks (mmdit: double-stream blocks; skipdit: odd, in + mid + out); 0 = from the preset."),
    INT_KEY("num_single_layers", "0", 0, 4096, SEC_MODEL, "= (diffusers' Flux config)",
            "mmdit: single-stream blocks after the double-stream ones; 0 = from the preset."),
    INT_KEY("tokenizer_max_length", "0", 0, 65536, SEC_MODEL, "= (T5's length there)",
            "mmdit: text tokens per caption (padded, longer captions cut); 0 = from the preset."),
    INT_KEY("text_vocab_size", "0", 0, 16777216, SEC_MODEL, NULL,
            "mmdit, flux: rows of the built-in stand-in text encoder's word table (words are hashed into them), "
            "used without a cache of real encoder outputs; 0 = from the preset (1024)."),
    INT_KEY("joint_attention_dim", "0", 0, 65536, SEC_MODEL, "none (diffusers' Flux config)",
            "mmdit, flux: the text encoder's width (T5-XXL's 4096 for Flux); 0 = from the preset."),
    INT_KEY("pooled_projection_dim", "0", 0, 65536, SEC_MODEL, "none (diffusers' Flux config)",
            "mmdit, flux: the pooled text vector's width (CLIP-L's 768 for Flux); 0 = from the preset."),
    FLOAT_KEY("flux_guidance_value", "1.0", 0, ANY_MAX, SEC_MODEL, "= (constant mode)",
              "flux dev: the guidance value its guidance embedding reads in training."),
    INT_KEY("hidden_size", "0", 0, 65536, SEC_MODEL, NULL, "Token width D; 0 = from the preset."),
    INT_KEY("num_heads", "0", 0, 4096, SEC_MODEL, NULL, "Attention heads; 0 = from the preset."),
    INT_KEY("patch_size", "0", 0, 64, SEC_MODEL, NULL, "Patch edge p; 0 = from the preset."),
    INT_KEY("in_channels", "0", 0, 4096, SEC_MODEL, NULL, "Input (latent) channels C; 0 = from the preset."),
    FLOAT_KEY("resolution", "0", 0, 65536, SEC_MODEL, "= (default 1024 there)",
              "Image edge in pixels (megapixels with `resolution_type` `area`), as in SimpleTuner; the model's input "
              "edge is this over `vae_scale_factor`, rounded to a multiple of the patch. 0 = from the preset."),
    CHOICE_KEY("resolution_type", "pixel_area", "pixel|area|pixel_area", SEC_MODEL, "=",
               "How `resolution` is read: `pixel` and `pixel_area` (a square of that edge) or `area` (megapixels: "
               "1.0 is 1024 x 1024, 0.25 is 512 x 512, as SimpleTuner maps them)."),
    TEXT_KEY("bucket_shapes", "", SEC_MODEL, "none (the aspect buckets SimpleTuner makes of the data)",
             "The shapes a run trains at, in image pixels as SimpleTuner names its buckets: `WxH`, or `WxH@F` for a "
             "video's F frames, comma-separated (`832x480@81, 480x832@81`). The model is built at the first, and one "
             "sharing its weights at each other; each step trains at one of them (docs/DATA.md); `plan` predicts "
             "the peak of each and the run's is the largest. Each edge must be a multiple of the VAE's factor times "
             "the patch. Empty: a `resolution` square, or with `data_backend_config` the data's buckets (a list "
             "given with it must name the same shapes)."),
    INT_KEY("aspect_bucket_alignment", "64", 1, 4096, SEC_MODEL, "=",
            "The multiple, in image pixels, that SimpleTuner's aspect buckets round a width and a height to "
            "(`data_backend_config`, `segtrain buckets`). It must be a multiple of `vae_scale_factor` times the "
            "patch, so that every bucket is a latent the model takes."),
    INT_KEY("aspect_bucket_rounding", "2", 1, 9, SEC_MODEL, "=",
            "Decimals of an aspect bucket's aspect (its name, `1.5`), as SimpleTuner rounds it."),
    INT_KEY("num_frames", "1", 1, 1 << 20, SEC_MODEL, "none (a video dataset's `video.num_frames` there)",
            "Video frames per sample, in pixels' frames; a video family's latent has 1 + (num_frames - 1) / 4 of "
            "them (its VAE's temporal compression; ltxvideo's is 8), so num_frames is 4 k + 1 (ltxvideo: 8 k + 1). "
            "1 for images, and for every image family."),
    INT_KEY("vae_scale_factor", "0", 0, 64, SEC_MODEL, "none (the VAE's downscale factor there)",
            "Image pixels per latent pixel along an edge; 0 = the family's (8 for dit, mmdit and skipdit); 1 = "
            "pixel space, no VAE: what training on images needs, since segtrain has no VAE."),
    INT_KEY("num_classes", "0", 0, 16777216, SEC_MODEL, NULL,
            "Class labels K (plus one \"no label\" row); 0 = from the preset."),
    CHOICE_KEY("attention_mechanism", "flash", "math|flash", SEC_MODEL,
               "=; its exact-attention choices (`diffusers`, `xformers`, `flash-attn-*`, `native-*`, `cudnn`, "
               "...) are read as `flash`, `native-math` as `math`, SageAttention as `flash` (SimpleTuner trains "
               "exact by default); other quantized ones are refused",
               "`math` keeps the softmax probabilities for backward; `flash` keeps only the row log-sum-exp "
               "and recomputes them tile by tile."),

    CHOICE_KEY("sageattention_usage", "inference", "inference", SEC_MODEL, "=",
               "Where SimpleTuner would use SageAttention: `inference` (its default) keeps training exact, which "
               "is all segtrain does; `training` is refused."),

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
    BOOL_KEY("gradient_checkpointing_keep_attention_output", "false", SEC_CHECKPOINTING, NULL,
             "Checkpointed blocks keep their attention's output and log-sum-exp (tokens x hidden + heads x tokens "
             "floats a block) so that their recompute skips attention, the most of it at long sequences (the "
             "cross-attention families keep their self-attention's; the cross-attention to the text runs again); "
             "every family with softmax attention has it. Not with attention offload or an -ffn backend."),
    TEXT_KEY("gradient_checkpointing_plan", "", SEC_CHECKPOINTING, NULL,
             "Every block's mode, per block sequence, in place of the uniform interval and stride: "
             "`name: runs / name: runs` (the name may go for a one-sequence model), each run a range of blocks and "
             "what they do, separated by `|`, e.g. `transformer_blocks: 0-7 ckpt in segments of 4 | 8-15 ffn | "
             "16-18 keep + attention-offload`. `keep` keeps activations; `ckpt` recomputes from the segment's "
             "boundary (the run is one segment, or `in segments of N`); `ffn` recomputes only the feed-forward; "
             "`+ host` keeps a ckpt segment's boundary or an ffn block's feed-forward input in host memory (as the "
             "unsloth backends do); `+ attention-offload` moves the attention side's saved tensors to the host; "
             "`+ attention-output` has a ckpt run's blocks keep their attention's output and state, so that their "
             "recompute skips attention (as gradient_checkpointing_keep_attention_output). "
             "`segtrain advise` writes one (its per-block planner); `segtrain plan` prints every plan in these words. "
             "Needs `gradient_checkpointing` true and the uniform keys at their defaults."),
    TEXT_KEY("gradient_checkpointing_bucket_plans", "", SEC_CHECKPOINTING, NULL,
             "A plan for each of `bucket_shapes` that wants its own, in place of the run's schedule, so that the "
             "largest bucket's checkpointing is not every bucket's: `BUCKET: PLAN, BUCKET: PLAN`, each bucket named "
             "as in `bucket_shapes` and its plan in `gradient_checkpointing_plan`'s words, or `none` (every block "
             "keeps its activations), e.g. `1024x1024: 0-7 ckpt in segments of 2 | 8-11 keep, 256x256: none`. A "
             "bucket not named takes the run's schedule (the uniform keys or `gradient_checkpointing_plan`); a name "
             "that is not one of the run's buckets is refused, naming them. `segtrain advise` writes one where the "
             "buckets want different plans; `segtrain plan` prints each bucket's plan and peak. Needs "
             "`gradient_checkpointing` true."),
    BOOL_KEY("gradient_checkpointing_offload_prefetch", "false", SEC_CHECKPOINTING, "=",
             "Bring offloaded tensors back ahead of their use in backward. segtrain's copy thread always does: "
             "the restore order is known from the plan, so nothing needs learning; either value gives the same "
             "step."),
    INT_KEY("gradient_checkpointing_offload_pin_memory_max_buckets", "12", 0, 1048576, SEC_CHECKPOINTING, "=",
            "How many pinned host buffers of distinct shapes offloading may keep. segtrain's host pool is one "
            "arena sized by the plan, so any value gives the same step and the same host peak."),
    {"capture_hidden_states", NULL, CFG_INT_LIST, "", NULL, 0, ANY_MAX, SEC_CHECKPOINTING, NULL,
     "Block indices whose output hidden states are captured, e.g. `[3, 7]` or `\"3,7\"`; capturing makes "
     "checkpointed segments fall back to single blocks.", 0},

    /* memory */
    SIZE_KEY("device_memory", SEC_MEMORY, NULL,
             "Device memory budget, e.g. `\"24GiB\"`: `train` refuses a run whose predicted peak exceeds it, and "
             "an allocation past it is an out-of-memory status, never a crash."),
    SIZE_KEY("host_memory", SEC_MEMORY, NULL, "Host memory budget for offloaded state, e.g. `\"64GiB\"`."),
    INT_KEY("num_threads", "0", 0, 1024, SEC_MEMORY, NULL, "Threads for ops and BLAS; 0 = all cores."),
    CHOICE_KEY("mixed_precision", "no", "no|bf16|fp16|fp8", SEC_MEMORY, "= (default bf16 there)",
               "`bf16` holds in bfloat16 what PyTorch's bf16 run holds so (docs/PRECISION.md): the states between "
               "blocks (the stream, kept blocks' inputs, segment boundaries, skips, their host copies), rounded to "
               "nearest even, and under LoRA the weight of every frozen linear layer (the adapted bases among them); "
               "each is widened to float for the ops that read it. Other weights, the adapters, gradients, the "
               "optimizer and the arithmetic stay float. `fp16` and `fp8` are refused."),
    CHOICE_KEY("base_model_precision", "no_change", "no_change|int8-quanto|fp8-quanto|int4-quanto", SEC_MEMORY, "=",
               "Under LoRA, the weight of every frozen linear layer (and the U-Nets' convolutions, as QConv2d) held "
               "quantized as optimum-quanto quantizes SimpleTuner's bf16 model (docs/QUANTIZATION.md): `int8-quanto` int8 with a bf16 scale per output "
               "channel, `fp8-quanto` float8 e4m3 likewise, `int4-quanto` 4-bit with a bf16 scale and shift per group "
               "of 128 inputs (96, 64, 32, else per channel); each is dequantized to the library's bf16 values around "
               "its GEMM. The other values are refused by name with the nearest built one."),
    INT_KEY("musubi_blocks_to_swap", "0", 0, 4096, SEC_MEMORY, "=",
            "Under LoRA or LyCORIS, the last N transformer blocks keep their frozen weights in host memory, and each "
            "block's are copied into one device buffer before its forward, its recompute and its backward and let go "
            "after, as SimpleTuner's MusubiBlockSwapManager streams them (docs/WEIGHTS.md): the device holds the other "
            "blocks' weights and one swapped block's. Adapters stay on the device; numbers are bitwise unchanged. At "
            "most the blocks less one, counted over a model's block lists as SimpleTuner counts them (Flux: "
            "double-stream then single-stream); built for the families SimpleTuner swaps (docs/WEIGHTS.md lists "
            "them); full fine-tuning is refused."),
    TEXT_KEY("musubi_block_swap_device", "cpu", SEC_MEMORY, "=",
             "Where musubi_blocks_to_swap keeps the swapped blocks: `cpu` (host memory), the only value built."),
    BOOL_KEY("ramtorch", "false", SEC_MEMORY, "=",
             "Under LoRA or LyCORIS, the frozen weight and bias of each linear layer that ramtorch_target_modules and "
             "ramtorch_transformer_percent select are held in host memory and copied into one device buffer around "
             "each GEMM that reads them (forward, recompute, backward), as SimpleTuner's RamTorch Linear streams them "
             "(docs/WEIGHTS.md). Adapters stay on the device; numbers are bitwise unchanged. Refused with "
             "musubi_blocks_to_swap or enable_group_offload (as SimpleTuner refuses them), and where a selected "
             "weight trains (full fine-tuning). Only linear layers stream (ramtorch_disable_extensions true); the "
             "text encoder, VAE and ControlNet keys are ignored (segtrain trains no such component)."),
    TEXT_KEY("ramtorch_target_modules", "", SEC_MEMORY, "=",
             "With ramtorch, comma-separated fnmatch patterns: a linear layer streams when one matches its module "
             "name (`blocks.3.attn1.to_q`), that name under the component (`transformer.blocks.3.attn1.to_q`) or "
             "its class (`Linear`); a pattern without `*?[` also matches the modules under it (`blocks.3`). Empty "
             "or `None`: every linear layer. Patterns that select no layer are refused."),
    FLOAT_KEY("ramtorch_transformer_percent", "100", 0, 100, SEC_MEMORY, "=",
              "With ramtorch, the share of the selected linear layers that stream: the first ceil(n x percent / "
              "100) in the order the model registers them (at least one above 0); 100 all, 0 none."),
    BOOL_KEY("enable_group_offload", "false", SEC_MEMORY, "=",
             "Under LoRA or LyCORIS, every frozen weight is held in host memory (or on disk) in diffusers' groups "
             "(group_offload_type) and brought into one device buffer around its group's use, as SimpleTuner's "
             "configure_group_offload has diffusers do it (docs/WEIGHTS.md); the weights of no group come in for "
             "each step. Adapters stay on the device; numbers are bitwise unchanged. Refused with ramtorch or "
             "musubi_blocks_to_swap, for the U-Net families (as SimpleTuner) and under full fine-tuning."),
    CHOICE_KEY("group_offload_type", "block_level", "block_level|leaf_level", SEC_MEMORY, "=",
               "With enable_group_offload: `block_level` groups group_offload_blocks_per_group consecutive blocks of "
               "each block list; `leaf_level` makes each linear layer a group, brought in around each GEMM that "
               "reads it (the other leaves' weights come in with the step's rest)."),
    INT_KEY("group_offload_blocks_per_group", "1", 1, 1 << 20, SEC_MEMORY, "=",
            "With enable_group_offload and block_level, the blocks a group holds (the last group of a list "
            "shorter); 1 under group_offload_use_stream, as diffusers forces it."),
    BOOL_KEY("group_offload_use_stream", "false", SEC_MEMORY, "=",
             "With enable_group_offload and block_level, a group coming in for a forward starts the next group's "
             "copy (diffusers' prefetch: two groups on the device at once). Turned off under "
             "gradient_checkpointing, as SimpleTuner turns it off."),
    TEXT_KEY("group_offload_to_disk_path", "", SEC_MEMORY, "=",
             "With enable_group_offload, a folder (made if missing; `~` expanded) that holds each group's weights in "
             "a file of its own, group_<group>.safetensors, written atomically when the weights are loaded and read "
             "into a host buffer before each copy to the device; host memory then holds none of them."),

    /* training */
    INT_KEY("train_batch_size", "1", 1, 65536, SEC_TRAINING, "= (default 4 there)", "Samples per step."),
    INT_KEY("gradient_accumulation_steps", "1", 1, 1048576, SEC_TRAINING, "=",
            "Micro-batches whose gradients are summed before one optimizer step."),
    INT_KEY("max_train_steps", "100", 0, ANY_MAX, SEC_TRAINING, "= (default none there)",
            "Optimizer steps to run; 0 = count `num_train_epochs` instead."),
    FLOAT_KEY("num_train_epochs", "0", 0, 1e6, SEC_TRAINING, "= (default 1 there)",
              "Passes over the dataset to train, when `max_train_steps` is 0 or not given: each is ceil(ceil(samples "
              "/ (train_batch_size x ranks)) / gradient_accumulation_steps) steps, samples counting repeats "
              "(SimpleTuner rounds up per backend and aspect bucket); the run takes ceil(epochs x that). Giving "
              "both above 0 is refused, as SimpleTuner refuses it; 0 = count `max_train_steps`."),
    INT_KEY("zero_stage", "0", 0, 1, SEC_TRAINING, NULL,
            "Data-parallel runs (`mpirun -np N segtrain train`): 1 shards the optimizer state over the ranks "
            "(ZeRO-1: each rank holds and updates 1/N of it, then the updated weights are all-gathered); 0 keeps "
            "the whole state on every rank. Checkpoints hold the whole state either way, and resume with any N. "
            "`segtrain plan --ranks N` shows a rank's memory."),
    INT_KEY("seed", "0", 0, ANY_MAX, SEC_TRAINING, "=", "Seed of every random stream (init, data, noise, timesteps)."),
    POSITIVE_KEY("learning_rate", "1e-4", SEC_TRAINING, "= (default 4e-7 there)",
                 "Peak learning rate, reached after the warm-up."),
    CHOICE_KEY("optimizer", "adamw", "adamw|lion", SEC_TRAINING,
               "=; `torch-adamw`, `optimi-adamw`, `adamw_bf16` are read as `adamw` (the last with float32 "
               "weights), `optimi-lion` as `lion`",
               "Optimizer."),
    CHOICE_KEY("lr_scheduler", "constant", "constant|linear|cosine|cosine_with_restarts|polynomial", SEC_TRAINING,
               "=; `constant_with_warmup` is read as `constant`",
               "Learning-rate schedule after the warm-up, as diffusers': `constant`; `linear` to 0 at "
               "`max_train_steps`; `cosine` half a wave to 0; `cosine_with_restarts` `lr_num_cycles` waves, each "
               "from the peak to 0; `polynomial` from the peak to `lr_end` with power `lr_power`."),
    FLOAT_KEY("lr_end", "4e-7", 0, 1e6, SEC_TRAINING, "=",
              "`polynomial`: the rate reached at `max_train_steps` (must be below `learning_rate`)."),
    FLOAT_KEY("lr_power", "0.8", 0, 1e3, SEC_TRAINING, "=", "`polynomial`: the power of the decay."),
    INT_KEY("lr_num_cycles", "1", 1, 1000000, SEC_TRAINING, "=", "`cosine_with_restarts`: how many waves."),
    INT_KEY("lr_warmup_steps", "0", 0, ANY_MAX, SEC_TRAINING, "= (default 500 there)",
            "Steps of linear warm-up from 0 to the learning rate."),
    {"adam_beta1", "optimizer_beta1", CFG_FLOAT, "0.9", NULL, 0, 1, SEC_TRAINING,
     "= (`optimizer_beta1` there too, accepted as an alias)",
     "First-moment decay (AdamW; Lion's interpolation); below 1, since AdamW divides by 1 - beta^step.",
     CFG_OPEN_MAX},
    {"adam_beta2", "optimizer_beta2", CFG_FLOAT, "0.999", NULL, 0, 1, SEC_TRAINING,
     "= (`optimizer_beta2` there too, accepted as an alias)",
     "Second-moment decay (AdamW; Lion's momentum); below 1, since AdamW divides by 1 - beta^step.", CFG_OPEN_MAX},
    FLOAT_KEY("adam_weight_decay", "1e-2", 0, ANY_MAX, SEC_TRAINING, "=", "Decoupled weight decay."),
    POSITIVE_KEY("adam_epsilon", "1e-8", SEC_TRAINING, "=",
                 "AdamW's denominator epsilon; above 0, since a zero one divides by zero where a gradient is 0."),
    FLOAT_KEY("max_grad_norm", "2.0", 0, ANY_MAX, SEC_TRAINING, "=",
              "The clipping threshold `grad_clip_method` applies; 0 = no clipping."),
    CHOICE_KEY("grad_clip_method", "value", "value|norm", SEC_TRAINING, "=",
               "`value`: every gradient element is clamped to [-max_grad_norm, max_grad_norm] (torch's "
               "clip_grad_value_); `norm`: all gradients are scaled so that their global L2 norm is at most "
               "max_grad_norm (clip_grad_norm_)."),
    CHOICE_KEY("model_type", "full", "full|lora", SEC_TRAINING, "=, more choices there",
               "Train every weight (`full`) or low-rank adapters only (`lora`)."),
    CHOICE_KEY("lora_type", "standard", "standard|lycoris", SEC_TRAINING, "=",
               "The kind of adapter: `standard`, PEFT's LoRA (low-rank update matrices, `lora_rank`, `lora_alpha`, "
               "`lora_target`); `lycoris`, the adapters `lycoris_config` describes, as the lycoris-lora package "
               "builds them: LoKr, LoHa, LoCon (`lora`) or full on the linear layers of the module classes its "
               "`apply_preset` targets, LoCon, LoHa or full on the U-Nets' convolutions too "
               "(docs/LYCORIS.md; pixart, sana, sdxl, sd1x and kolors are mapped)."),
    TEXT_KEY("lycoris_config", "", SEC_TRAINING, "=",
             "With `lora_type` lycoris: SimpleTuner's LyCORIS JSON file, a path relative to the working directory "
             "as SimpleTuner reads it. Read as SimpleTuner hands it to lycoris-lora 4.1.3: `algo` (`lokr`, `loha`, "
             "`lora` or `locon`, `full`), "
             "`linear_dim` and `linear_alpha` (whole numbers, SimpleTuner's int()), `factor` (-1: the package's "
             "balanced split), `full_matrix`, `decompose_both`, `unbalanced_factorization`, `bypass_mode` (the same "
             "result), and `apply_preset`'s `target_module`, `target_name` (a regular expression from the start of "
             "a module path; `use_fnmatch`: a glob) and `module_algo_map` (per class: `algo`, `factor`, `dim`, "
             "`alpha`, ...). `conv_dim` and `conv_alpha` (0 or absent: `linear_dim`, `linear_alpha`) size the "
             "adapters of a convolution of a kernel over 1 x 1 (a 1 x 1 one takes `linear_dim`): the sd1x, sdxl and "
             "kolors U-Nets' (ResnetBlock2D, Downsample2D, Upsample2D, sd1x's proj_in and proj_out, conv_in and "
             "conv_out by name) and Stable Cascade's depthwise ones (by name), every algorithm. Refused by name: "
             "other algorithms, a convolution of another family or another of Stable Cascade's, LoKr under "
             "`bypass_mode` on a depthwise conv (the package fails there), non-zero dropouts, `use_scalar`, "
             "`dora_wd`, a `multiplier` other than 1, `use_tucker`, `bypass_mode` with `full` (as the package), and "
             "keys neither reads. The "
             "adapters are saved under the package's keys (`lycoris_<module>.lokr_w1`, `.hada_w1_a`, "
             "`.lora_down.weight`, `.diff`, `.alpha`), the config's text in the file's metadata."),
    INT_KEY("lora_rank", "16", 1, 65536, SEC_TRAINING, "=", "Rank of the LoRA update matrices."),
    FLOAT_KEY("lora_alpha", "0", 0, ANY_MAX, SEC_TRAINING, "= (default none there, meaning the rank)",
              "LoRA scale numerator (the update is scaled by alpha / rank); 0 = the rank."),
    TEXT_KEY("lora_target", "attention", SEC_TRAINING, "none (`flux_lora_target` is the nearest)",
             "Which linears get adapters, e.g. `attention` or `attention+mlp`."),
    TEXT_KEY("output_dir", "output", SEC_TRAINING, "= (default `simpletuner-results` there)",
             "Folder for checkpoints, reports and the final weights."),
    {"checkpoint_step_interval", "checkpointing_steps", CFG_INT, "500", NULL, 0, ANY_MAX, SEC_TRAINING,
     "`checkpointing_steps`, accepted here as an alias",
     "Save a training-state checkpoint every this many steps; 0 = never.", 0},
    INT_KEY("checkpoints_total_limit", "0", 0, ANY_MAX, SEC_TRAINING, "=",
            "Keep at most this many checkpoints, deleting the oldest; 0 = keep all."),
    TEXT_KEY("resume_from_checkpoint", "", SEC_TRAINING, "= (default `latest` there)",
             "A checkpoint file (`output_dir/checkpoint-<step>.safetensors`) to resume from, or `latest` for the "
             "newest in `output_dir`; empty = start fresh."),
    INT_KEY("validation_steps", "100", 0, ANY_MAX, SEC_TRAINING, "=",
            "Sample a validation grid (`output_dir/validation/step-N.png`) every this many steps; 0 = never."),
    INT_KEY("validation_num_inference_steps", "30", 1, 100000, SEC_TRAINING, "= (default 30 there)",
            "Euler steps from noise to image when sampling."),
    FLOAT_KEY("validation_guidance", "4.0", 0, ANY_MAX, SEC_TRAINING, "= (default 7.5 there)",
              "Classifier-free guidance scale when sampling; 1 = no guidance."),
    INT_KEY("validation_seed", "0", 0, ANY_MAX, SEC_TRAINING, "=", "Seed of the sampling noise."),
    TEXT_KEY("validation_resolution", "", SEC_TRAINING, "=",
             "The sizes validation samples at, in image pixels as SimpleTuner takes them: `WxH` or an edge alone "
             "(`1024`: its square), comma-separated (`1024x1024,1216x832`); one grid a size, "
             "`step-N-WxH.png`. Empty: the run's first shape, `step-N.png`."),
    INT_KEY("validation_samples_per_class", "4", 1, 1024, SEC_TRAINING, NULL,
            "Images per class in a sample grid (one row per class)."),
    FLOAT_KEY("caption_dropout_probability", "0.1", 0, 1, SEC_TRAINING, "= (default 0.1 there)",
              "Share of samples trained with the null label or the empty caption, so that classifier-free guidance "
              "has an unconditional model to steer from. With `data_cache_dir` the empty caption is the cache's "
              "`null.safetensors`, which must then be there."),
    TEXT_KEY("pretrained_model_name_or_path", "", SEC_TRAINING, "= (a hub name or folder there)",
             "A local safetensors file of the model's weights to start from (and, with LoRA, to adapt); empty = "
             "the family's initialisation from `seed`. segtrain reads local files only: a hub name, or a path that "
             "is not there, is refused by every command."),
    TEXT_KEY("data_dir", "", SEC_TRAINING, NULL,
             "Folder of training data (PNG images, optional same-named .txt captions, or class subfolders); "
             "empty = the built-in dataset of procedurally drawn shapes."),
    TEXT_KEY("data_backend_config", "", SEC_TRAINING, "=",
             "A SimpleTuner multidatabackend.json (a list of data backends); its local image backends are "
             "read (`instance_data_dir`, `caption_strategy`, `repeats` and the aspect-bucket keys: `resolution`, "
             "`resolution_type`, `crop`, `crop_style`, `crop_aspect`, `minimum_image_size`, ...), any other backend "
             "type is refused. Each image goes in SimpleTuner's aspect bucket, and the run trains each batch at its "
             "bucket's shape (docs/DATA.md). A `dataset_type` video backend (its `video` keys: `num_frames`, "
             "`min_frames`, `max_frames`, `bucket_strategy`, `frame_interval`, `is_i2v`) puts each clip in its "
             "`WxH@F` bucket, for `segtrain buckets` and scripts/make_cache.py --buckets: segtrain decodes no video "
             "files, so a clip is a folder of PNG frames (an .mp4 is refused), and a run trains on the cache made of "
             "them (`data_cache_dir`), not on the clips. Empty = `data_dir`, or the built-in dataset."),
    BOOL_KEY("disable_bucket_pruning", "false", SEC_TRAINING, "=",
             "`data_backend_config`: keep an aspect bucket with fewer samples than a global batch (one short batch "
             "an epoch, filled up with its own samples) where SimpleTuner would prune it, in a backend with a "
             "`minimum_image_size`."),
    TEXT_KEY("data_cache_dir", "", SEC_TRAINING,
             "none (SimpleTuner keeps latents in each dataset's `cache_dir_vae` and text embeddings in a "
             "`text_embeds` backend's `cache_dir`, as .pt files)",
             "A cache of VAE latents and text-encoder embeddings (docs/CACHE.md: `cache.json` and one safetensors "
             "file per sample) that scripts/make_cache.py writes with a local diffusers pipeline; the dual-stream "
             "families train on it instead of images and the built-in stand-in text encoder. Its own name: "
             "SimpleTuner's `cache_dir`, `cache_dir_text` and `cache_dir_vae` name folders of SimpleTuner's .pt "
             "caches, which segtrain does not read, so they keep that meaning and are ignored. Empty = images "
             "(`data_backend_config`, `data_dir` or the built-in dataset)."),
    BOOL_KEY("use_ema", "false", SEC_TRAINING, "=",
             "Keep an exponential moving average of the trainable weights, as SimpleTuner's EMAModel: after "
             "optimizer step k (every `ema_update_interval`), ema -= (1 - d) (ema - w) with d = 0 before "
             "`ema_warmup_steps` and `ema_decay` after it, or without a warm-up min(k / (k + 9), `ema_decay`) (0 at "
             "step 1). It is held beside the optimizer state (tag optimizer: SimpleTuner's "
             "`ema_device` cpu keeps it in host memory), saved in checkpoints, and written at the end to "
             "`output_dir/ema/` under the final weights' name."),
    FLOAT_KEY("ema_decay", "0.995", 0, 1, SEC_TRAINING, "=", "`use_ema`: the decay the average settles at."),
    INT_KEY("ema_update_interval", "1", 1, ANY_MAX, SEC_TRAINING, "=",
            "`use_ema`: update the average after every this many optimizer steps."),
    INT_KEY("ema_warmup_steps", "0", 0, ANY_MAX, SEC_TRAINING, "=",
            "`use_ema`: before this step the average copies the weights, then decays by `ema_decay`; 0 = the "
            "gradual decay above."),
    BOOL_KEY("synthetic_data", "false", SEC_TRAINING, NULL,
             "Train on seeded random batches (standard-normal images of the model's shape, labels cycling through "
             "the classes) instead of a dataset: for sweeps and benchmarks, which measure time and memory."),
    INT_KEY("builtin_dataset_size", "4096", 1, 1073741824, SEC_TRAINING, NULL,
            "Samples in the built-in dataset (drawn on demand from `seed`, nothing is stored)."),
    /* distillation: SimpleTuner's distillation_config object is read as these rows, its members (or those of its
     * member named by distillation_method) as distillation_config.<name> (config.c flattens it) */
    CHOICE_KEY("distillation_method", "none", "none|anyflow|h3_drift", SEC_TRAINING, "= (default none there)",
               "`anyflow`: AnyFlow's forward MeanFlow stage (NVIDIA's AnyFlow, as SimpleTuner trains it) on Wan with "
               "AnyFlow's transformer: each sample a (t, r) interval, the target from the model's own central "
               "difference in t, guidance fused with an unconditional pass. `h3_drift`: MiniMax-H3's LoRA drift "
               "regulariser, the flow loss plus the prediction's distance from the frozen base's "
               "(docs/OBJECTIVES.md)."),
    CHOICE_KEY("distillation_config.stage", "forward", "forward|meanflow|pretrain", SEC_TRAINING, "=",
               "AnyFlow's stage: `forward` (its aliases `meanflow`, `pretrain`). The on-policy DMD stage is not built."),
    FLOAT_KEY("distillation_config.gate_value", "0.25", 0, 1, SEC_TRAINING, "=",
              "AnyFlow: the delta embedder's share of the time embedding; it replaces the transformer config's "
              "gate_value, as SimpleTuner sets it."),
    CHOICE_KEY("distillation_config.deltatime_type", "r", "r|t-r", SEC_TRAINING, "=",
               "AnyFlow: what the delta embedder reads, r or t - r; it replaces the transformer config's."),
    FLOAT_KEY("distillation_config.loss_weight", "1", 0, ANY_MAX, SEC_TRAINING, "=",
              "AnyFlow: the loss's factor. H3 drift: the drift term's (0: no reference forward)."),
    FLOAT_KEY("distillation_config.sft_loss_weight", "1", 0, ANY_MAX, SEC_TRAINING, "=",
              "H3 drift: the flow loss's factor."),
    CHOICE_KEY("distillation_config.balance", "token", "token|modality", SEC_TRAINING, "=",
               "H3 drift: how the video and audio terms are combined, per element or per modality; the same with "
               "video rows alone, as segtrain trains MiniMax-H3."),
    FLOAT_KEY("distillation_config.video_weight", "1", 0, ANY_MAX, SEC_TRAINING, "=",
              "H3 drift: the video term's weight (video alone: any positive value gives the same loss)."),
    FLOAT_KEY("distillation_config.audio_weight", "1", 0, ANY_MAX, SEC_TRAINING, "=",
              "H3 drift: the audio term's weight (no audio rows in the video target mode)."),
    CHOICE_KEY("distillation_config.inner_distillation_method", "none", "none", SEC_TRAINING, "=, more choices there",
               "H3 drift: a distiller it wraps; none is built."),
    FLOAT_KEY("distillation_config.schedule_shift", "3", 1e-6, 1e6, SEC_TRAINING,
              "= (default null there: its flow_schedule_shift, default 3)",
              "AnyFlow: the shift s of both endpoints, sigma = s u / (1 + (s - 1) u) of a uniform u, and of the "
              "loss weight's normalising grid."),
    FLOAT_KEY("distillation_config.diffusion_ratio", "0.5", 0, 1, SEC_TRAINING, "=",
              "AnyFlow: the share of a batch trained as diffusion intervals (r = t, the flow velocity target): its "
              "first round(ratio x batch) samples, rounding half to even as Python does."),
    FLOAT_KEY("distillation_config.consistency_ratio", "0.25", 0, 1, SEC_TRAINING, "=",
              "AnyFlow: the share trained as consistency intervals (r = 0), the next samples; the rest are "
              "arbitrary intervals (r < t). With diffusion_ratio, at most 1."),
    FLOAT_KEY("distillation_config.central_difference_epsilon", "0.005", 1e-9, 0.5, SEC_TRAINING, "=",
              "AnyFlow: the step of the central difference in t (two no-gradient forwards at t +- epsilon)."),
    CHOICE_KEY("distillation_config.central_difference_boundary_mode", "extrapolate", "extrapolate|clamp",
               SEC_TRAINING, "=", "AnyFlow: `clamp` keeps t +- epsilon inside [0, 1]; `extrapolate` does not."),
    FLOAT_KEY("distillation_config.fuse_guidance_scale", "3", 1e-6, ANY_MAX, SEC_TRAINING, "=",
              "AnyFlow: g of the guidance fused into the student, (prediction - (1 - g) unconditional) / g, the "
              "unconditional prediction from the empty prompt's embeddings; 1: no unconditional pass."),
    CHOICE_KEY("distillation_config.meanflow_weight_type", "beta08", "beta08|uniform", SEC_TRAINING, "=",
               "AnyFlow: each sample's loss weight, `beta08` t sqrt(1 - t) normalised to mean 1 over the shifted "
               "1000-step grid, or `uniform` 1."),
    BOOL_KEY("distillation_config.meanflow_adaptive_weighting", "true", SEC_TRAINING, "=",
             "AnyFlow: scale each non-diffusion sample's loss to the batch's mean diffusion loss (the scale not "
             "differentiated), when the batch has a diffusion sample."),
    FLOAT_KEY("distillation_config.meanflow_non_diffusion_max_sigma", "1", 1e-9, 1, SEC_TRAINING, "=",
              "AnyFlow: the largest sigma of the consistency and arbitrary intervals (their uniforms scaled by the "
              "shift's inverse of it)."),
    CHOICE_KEY("distillation_config.diffusion_target", "flow", "flow", SEC_TRAINING, "=, more choices there",
               "AnyFlow: the diffusion intervals' target, the flow velocity."),
};

const int cfg_key_count = (int)(sizeof cfg_keys / sizeof cfg_keys[0]);

#define EXACT_ATTENTION(v) {"attention_mechanism", v, "flash", NULL}
#define QUANTIZED_ATTENTION(v)                                                                                 \
    {"attention_mechanism", v, NULL, "quantized attention, which segtrain does not have; the nearest it takes is " \
                                     "flash (exact attention)"}

/* SimpleTuner uses SageAttention only where sageattention_usage says, by default inference (validation): its
 * training runs exact attention, as segtrain's does. */
#define UNBUILT_DISTILLATION(v, what)                                                                          \
    {"distillation_method", v, NULL, what " is not built; the distillations segtrain has are anyflow and h3_drift"}
#define SAGE_ATTENTION(v)                                                                                      \
    {"attention_mechanism", v, "flash",                                                                         \
     "is read as flash: SimpleTuner trains with exact attention under its default sageattention_usage "         \
     "(inference), as segtrain does; segtrain's sampling is exact too"}

/* SimpleTuner's quantized bases segtrain does not build (simpletuner/helpers/training/__init__.py's
 * quantised_precision_levels), each refused with the built format nearest in bits and kind */
#define UNBUILT_PRECISION(v, what, nearest)                                                                    \
    {"base_model_precision", v, NULL, what " is not built; the nearest built is " nearest}

const cfg_value_alias cfg_value_aliases[] = {
    UNBUILT_PRECISION("int2-quanto", "quanto's 2-bit qint2", "int4-quanto"),
    UNBUILT_PRECISION("fp8uz-quanto", "quanto's float8_e4m3fnuz", "fp8-quanto (float8_e4m3fn)"),
    UNBUILT_PRECISION("int8-torchao", "TorchAO's int8 weight-only", "int8-quanto"),
    UNBUILT_PRECISION("int8dq-torchao", "TorchAO's int8 with int8 dynamic activations", "int8-quanto"),
    UNBUILT_PRECISION("int8dq-int4-torchao", "TorchAO's int4 with int8 dynamic activations", "int4-quanto"),
    UNBUILT_PRECISION("int4-torchao", "TorchAO's int4 weight-only", "int4-quanto"),
    UNBUILT_PRECISION("fp8-torchao", "TorchAO's float8 with float8 dynamic activations", "fp8-quanto"),
    UNBUILT_PRECISION("fp8wo-torchao", "TorchAO's float8 weight-only", "fp8-quanto"),
    UNBUILT_PRECISION("fp8-int4-torchao", "TorchAO's int4 with float8 dynamic activations", "int4-quanto"),
    UNBUILT_PRECISION("nf4-bnb", "bitsandbytes' NF4", "int4-quanto"),
    UNBUILT_PRECISION("int8-sdnq", "SDNQ's int8", "int8-quanto"),
    UNBUILT_PRECISION("uint8-sdnq", "SDNQ's uint8", "int8-quanto"),
    UNBUILT_PRECISION("int16-sdnq", "SDNQ's int16", "int8-quanto"),
    UNBUILT_PRECISION("uint16-sdnq", "SDNQ's uint16", "int8-quanto"),
    UNBUILT_PRECISION("fp16-sdnq", "SDNQ's fp16", "int8-quanto"),
    UNBUILT_PRECISION("fp8-sdnq", "SDNQ's fp8", "fp8-quanto"),
    UNBUILT_PRECISION("int6-sdnq", "SDNQ's int6", "int8-quanto"),
    UNBUILT_PRECISION("int5-sdnq", "SDNQ's int5", "int4-quanto"),
    UNBUILT_PRECISION("uint5-sdnq", "SDNQ's uint5", "int4-quanto"),
    UNBUILT_PRECISION("uint4-sdnq", "SDNQ's uint4", "int4-quanto"),
    UNBUILT_PRECISION("uint3-sdnq", "SDNQ's uint3", "int4-quanto"),
    UNBUILT_PRECISION("uint2-sdnq", "SDNQ's uint2", "int4-quanto"),
    UNBUILT_PRECISION("fp8-native", "SimpleTuner's native fp8 scaled matmul", "fp8-quanto"),
    UNBUILT_PRECISION("fp8-transformerengine", "TransformerEngine's fp8", "fp8-quanto"),
    {"optimizer", "torch-adamw", "adamw", NULL},
    {"optimizer", "optimi-adamw", "adamw", NULL},
    {"optimizer", "adamw_bf16", "adamw",
     "runs as adamw with float32 weights and state (SimpleTuner keeps bf16 weights with stochastic rounding)"},
    {"optimizer", "optimi-lion", "lion", NULL},
    {"optimizer", "torch-adam", NULL, "Adam with L2 decay is not built; the nearest is adamw (decoupled decay)"},
    {"lr_scheduler", "constant_with_warmup", "constant", NULL},
    {"lr_scheduler", "sine", NULL, "SimpleTuner's sine schedule is not built; the nearest is cosine_with_restarts"},
    {"attention_mechanism", "native-math", "math", NULL},
    EXACT_ATTENTION("diffusers"), EXACT_ATTENTION("xformers"), EXACT_ATTENTION("native"),
    EXACT_ATTENTION("native-flash"), EXACT_ATTENTION("native-efficient"), EXACT_ATTENTION("cudnn"),
    EXACT_ATTENTION("flex"), EXACT_ATTENTION("flash-attn"), EXACT_ATTENTION("flash-attn-2"),
    EXACT_ATTENTION("flash-attn-3"), EXACT_ATTENTION("flash-attn-hub"), EXACT_ATTENTION("flash-attn-3-hub"),
    EXACT_ATTENTION("flash-attn-4-hub"), EXACT_ATTENTION("flash-attn-varlen-hub"),
    EXACT_ATTENTION("flash-attn-3-varlen"), EXACT_ATTENTION("flash-attn-3-varlen-hub"),
    EXACT_ATTENTION("metal-flash-attention"), EXACT_ATTENTION("native-npu"), EXACT_ATTENTION("native-xla"),
    SAGE_ATTENTION("sageattention"), SAGE_ATTENTION("sageattention-int8-fp16-triton"),
    SAGE_ATTENTION("sageattention-int8-fp16-cuda"), SAGE_ATTENTION("sageattention-int8-fp8-cuda"),
    {"sageattention_usage", "training", NULL, "SageAttention's quantized attention in training is not built; the "
                                              "nearest is inference, where training runs exact attention"},
    {"sageattention_usage", "training+inference", NULL, "SageAttention's quantized attention in training is not "
                                                        "built; the nearest is inference (exact attention in training)"},
    QUANTIZED_ATTENTION("metal-flash-attention-int8"), QUANTIZED_ATTENTION("metal-flash-attention-int4"),
    UNBUILT_DISTILLATION("lcm", "LCM distillation"), UNBUILT_DISTILLATION("dcm", "DCM distillation"),
    UNBUILT_DISTILLATION("dmd", "DMD distillation"), UNBUILT_DISTILLATION("flow_dpo", "Flow-DPO"),
    UNBUILT_DISTILLATION("perflow", "PeRFlow"), UNBUILT_DISTILLATION("self_forcing", "Self Forcing"),
    UNBUILT_DISTILLATION("self_transcendence", "self-transcendence"),
    {"distillation_config.stage", "onpolicy", NULL,
     "AnyFlow's on-policy stage (DMD with rollouts and a discriminator adapter) is not built; the nearest is forward"},
    {"distillation_config.diffusion_target", "base_prediction", NULL,
     "the frozen base's prediction as the diffusion target (a forward without the adapters) is not built; the "
     "nearest is flow"},
    {"attention_mechanism", "sla", NULL,
     "sparse-linear attention approximates softmax attention; the nearest segtrain takes is flash (exact)"},
};
const int cfg_value_alias_count = (int)(sizeof cfg_value_aliases / sizeof cfg_value_aliases[0]);

const char *const cfg_speed_only_keys[] = {
    "vae_batch_size", "vae_enable_*", "vae_cache_*", "text_encoder_batch_size", "text_cache_*",
    "offload_during_startup", "quantize_via", "compress_disk_cache", "disable_benchmark", "dynamo_*",
    "ramtorch_*", "group_offload_*", "num_processes",
    "context_parallel_*", "find_unused_parameters", "skip_file_discovery", "delete_problematic_images",
    "trust_remote_code", "fuse_qkv_projections", "ema_cpu_only", "ema_device", "ema_foreach_disable",
    "sdnq_compile_mode",
    "allow_dataset_oversubscription", "aspect_bucket_worker_count", "dataloader_*", "gradient_precision",
    "cache_dir", "cache_dir_text", "cache_dir_vae", NULL};

const cfg_neutral cfg_neutral_values[] = {
    {"controlnet", "false"},               /* no ControlNet beside the model */
    {"strict_epoch_limit", "false"},       /* counting steps it does nothing; counting epochs SimpleTuner sets it */
    {"loss_type", "l2"},                   /* the mean squared error */
    {"minimum_image_size", "0"},           /* no image left out for its size */
    {"flow_schedule_auto_shift", "false"}, /* no shift by resolution */
    {"hidream_use_load_balancing_loss", "false"},
    {NULL, NULL}};

const char *const cfg_report_only_keys[] = {
    "validation_*", "num_validation_images", "num_eval_images", "eval_*", "evaluation_type", "hub_model_id",
    "push_to_hub", "push_to_hub_background", "push_checkpoints_to_hub", "report_to", "tracker_*", "logging_dir",
    "webhook_*", "model_card_*", "user_prompt_library", "ema_validation", "_metadata", NULL};
