/* Presets, their checks, and from a run configuration to a model configuration: a preset's sizes, then any
 * size given (non-zero). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "segtrain/config.h"
#include "segtrain/model.h"

/* The dual-stream presets' text sides: a stand-in encoder's widths for segtrain's own, T5-XXL's 4096 and CLIP-L's
 * pooled 768 for Flux; Flux's rotary axes are (16, 56, 56) of its 128-wide heads (rope_axes_for gives others).
 * SD3's are the published transformer config.json's (stable-diffusion-3-medium-diffusers, -3.5-large,
 * -3.5-medium): 64-wide heads, T5-XXL's 4096 and the two CLIPs' pooled 2048, and SimpleTuner's cached text, 77
 * CLIP tokens then 154 T5 tokens (its sd3 tokenizer_max_length); sample_size 128. AuraFlow's are v0.3's
 * (fal/AuraFlow-v0.3): Pile-T5's 2048 without a pooled vector, 120 tokens (SimpleTuner's auraflow limit), a
 * learned position table of 96 x 96 (pos_embed_max_size 9216). Flux.2's are the published
 * Flux2Transformer2DModel configs (FLUX.2-dev: 8 double + 48 single blocks, 48 heads x 128, Mistral Small 3.1's
 * three stacked hidden states, 15360 wide; FLUX.2-klein-base-4B and -9B: 5 + 20 blocks of 24 heads and 8 + 24 of
 * 32, Qwen3-4B's and -8B's three stacked states, 7680 and 12288 wide, no guidance embedding), all with 32 latent
 * channels packed 2x2 (in_channels 128) and SimpleTuner's 512 text tokens (its flux2 MAX_SEQUENCE_LENGTH);
 * timestep_guidance_channels 256, axes_dims_rope (32, 32, 32, 32). LongCat-Image's are meituan-longcat/LongCat-Image's
 * transformer config (10 double + 20 single blocks of Flux's width, Qwen2.5-VL's 3584-wide text, no pooled vector)
 * with its pipeline's 512 tokens. Qwen Image's are Qwen/Qwen-Image's: 60 blocks of 24 heads x 128, Qwen2.5-VL's
 * 3584-wide hidden states without a pooled vector, up to 1024 tokens (the pipeline's tokenizer_max_length: SimpleTuner
 * caches each prompt at its own length, at most that), 16 latent channels. */
static const struct preset {
    const char *name, *family;
    int64_t depth, hidden, heads, patch, channels, resolution, classes, single_depth, text_len;
    int64_t text_dim, pooled_dim;
    bool guidance_embeds;
    bool qk_norm; /* Flux's blocks always normalise q and k, SD3.5's too */
    int64_t dual_attention, pos_embed_max;
} presets[] = {
    {"dit-tiny", "dit", 4, 64, 4, 2, 4, 8, 10, 0, 0, 0, 0, false, false, 0, 0},
    {"dit-s2", "dit", 12, 384, 6, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
    {"dit-b2", "dit", 12, 768, 12, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
    {"dit-xl2", "dit", 28, 1152, 16, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
    {"mmdit-tiny", "mmdit", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 16, false, true, 0, 0},
    {"mmdit-s", "mmdit", 4, 384, 6, 2, 4, 32, 1000, 8, 16, 256, 128, false, true, 0, 0},
    {"flux-tiny", "flux", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 16, true, true, 0, 0},
    {"flux-dev", "flux", 19, 3072, 24, 2, 16, 128, 10, 38, 512, 4096, 768, true, true, 0, 0},
    {"flux-schnell", "flux", 19, 3072, 24, 2, 16, 128, 10, 38, 256, 4096, 768, false, true, 0, 0},
    {"flux2-tiny", "flux2", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 0, true, true, 0, 0},
    {"flux2-dev", "flux2", 8, 6144, 48, 2, 32, 128, 10, 48, 512, 15360, 0, true, true, 0, 0},
    {"flux2-klein-4b", "flux2", 5, 3072, 24, 2, 32, 128, 10, 20, 512, 7680, 0, false, true, 0, 0},
    {"flux2-klein-9b", "flux2", 8, 4096, 32, 2, 32, 128, 10, 24, 512, 12288, 0, false, true, 0, 0},
    {"sd3-tiny", "sd3", 3, 64, 4, 2, 4, 8, 10, 0, 8, 32, 16, false, true, 2, 16},
    {"sd3-medium", "sd3", 24, 1536, 24, 2, 16, 128, 10, 0, 231, 4096, 2048, false, false, 0, 192},
    {"sd35-large", "sd3", 38, 2432, 38, 2, 16, 128, 10, 0, 231, 4096, 2048, false, true, 0, 192},
    {"sd35-medium", "sd3", 24, 1536, 24, 2, 16, 128, 10, 0, 231, 4096, 2048, false, true, 13, 384},
    {"auraflow-tiny", "auraflow", 2, 32, 2, 2, 4, 8, 10, 2, 8, 24, 0, false, false, 0, 8},
    {"auraflow", "auraflow", 4, 3072, 12, 2, 4, 128, 10, 32, 120, 2048, 0, false, false, 0, 96},
    {"qwen-image-tiny", "qwen_image", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, true, 0, 0},
    {"qwen-image", "qwen_image", 60, 3072, 24, 2, 16, 128, 10, 0, 1024, 3584, 0, false, true, 0, 0},
    {"longcat-image-tiny", "longcat_image", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 0, false, true, 0, 0},
    {"longcat-image", "longcat_image", 10, 3072, 24, 2, 16, 128, 10, 20, 512, 3584, 0, false, true, 0, 0},
    /* lodestones/Chroma1-HD's: Flux's blocks without their adaLN linears, T5-XXL's text padded to 512, no pooled
     * vector; its approximator (64 -> 5120, 5 layers) is set in model_preset */
    {"chroma-tiny", "chroma", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 0, false, true, 0, 0},
    {"chroma", "chroma", 19, 3072, 24, 2, 16, 128, 10, 38, 512, 4096, 0, false, true, 0, 0},
    /* HiDream-ai/HiDream-I1-Full's (-Dev and -Fast are the same transformer, distilled): 16 double + 32 single
     * blocks of 20 heads x 128, T5-XXL's and Llama 3.1's 4096 (caption_channels), CLIP-L + G's pooled 2048
     * (text_emb_dim), 128 tokens of each (the pipeline's max_sequence_length); 4 routed experts, 2 active, and
     * 128 Llama tokens are set in model_preset */
    {"hidream-tiny", "hidream", 1, 16, 2, 2, 4, 8, 10, 1, 6, 24, 20, false, true, 0, 0},
    {"hidream-full", "hidream", 16, 2560, 20, 2, 16, 128, 10, 32, 128, 4096, 2048, false, true, 0, 0},
    {"hidream-dev", "hidream", 16, 2560, 20, 2, 16, 128, 10, 32, 128, 4096, 2048, false, true, 0, 0},
    {"hidream-fast", "hidream", 16, 2560, 20, 2, 16, 128, 10, 32, 128, 4096, 2048, false, true, 0, 0},
    {"hunyuanvideo-tiny", "hunyuanvideo", 2, 64, 4, 2, 4, 8, 10, 2, 8, 32, 16, true, true, 0, 0},
    {"hunyuanvideo-1.0", "hunyuanvideo", 20, 3072, 24, 2, 16, 60, 10, 40, 256, 4096, 768, true, true, 0, 0},
    {"hunyuanvideo15-tiny", "hunyuanvideo15", 2, 64, 4, 1, 4, 8, 10, 0, 8, 32, 0, false, true, 0, 0},
    {"hunyuanvideo15-480p", "hunyuanvideo15", 54, 2048, 16, 1, 32, 30, 10, 0, 1000, 3584, 0, false, true, 0, 0},
    {"hunyuanvideo15-720p", "hunyuanvideo15", 54, 2048, 16, 1, 32, 45, 10, 0, 1000, 3584, 0, false, true, 0, 0},
    /* PixArt-Sigma-XL-2 (PixArt-alpha/PixArt-Sigma-XL-2-{512,1024,2K}-MS): 28 blocks of 16 heads x 72, T5-XXL's 4096
     * (caption_channels) at its 300 tokens, 8 output channels; SimpleTuner's 900M flavours (terminusresearch's
     * fine-tunes) are 42 such blocks (their 0.9 B parameters; the config is not public here). Wan 2.1 T2V 1.3B and
     * 14B (Wan-AI/Wan2.1-T2V-*-Diffusers): 30 blocks of 12 heads and 40 of 40 (x 128), feed-forwards 8960 and
     * 13824, UMT5's 4096 at 512 tokens, 16 latent channels in (1, 2, 2) patches. The rest in model_preset. */
    {"pixart-sigma-tiny", "pixart_sigma", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, false, 0, 0},
    {"pixart-sigma-512", "pixart_sigma", 28, 1152, 16, 2, 4, 64, 10, 0, 300, 4096, 0, false, false, 0, 0},
    {"pixart-sigma-1024", "pixart_sigma", 28, 1152, 16, 2, 4, 128, 10, 0, 300, 4096, 0, false, false, 0, 0},
    {"pixart-sigma-2048", "pixart_sigma", 28, 1152, 16, 2, 4, 256, 10, 0, 300, 4096, 0, false, false, 0, 0},
    {"pixart-900m-1024", "pixart_sigma", 42, 1152, 16, 2, 4, 128, 10, 0, 300, 4096, 0, false, false, 0, 0},
    /* Sana 1.0's: SanaTransformer2DModel's defaults are Sana_1600M_1024px's (20 blocks of 70 heads x 32, the
     * cross-attention 20 x 112, Gemma 2's 2304-wide states at SimpleTuner's 300 tokens, mlp_ratio 2.5), 600M's 28 of
     * 36 x 32 and 16 x 72; 32 latent channels through DC-AE's 32x, 1 x 1 patches */
    {"sana-tiny", "sana", 2, 32, 4, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"sana-1.6b-1024", "sana", 20, 2240, 70, 1, 32, 32, 10, 0, 300, 2304, 0, false, false, 0, 0},
    {"sana-1.6b-2048", "sana", 20, 2240, 70, 1, 32, 64, 10, 0, 300, 2304, 0, false, false, 0, 0},
    {"sana-600m-1024", "sana", 28, 1152, 36, 1, 32, 32, 10, 0, 300, 2304, 0, false, false, 0, 0},
    {"sana-600m-512", "sana", 28, 1152, 36, 1, 32, 16, 10, 0, 300, 2304, 0, false, false, 0, 0},
    /* Sana 1.5's: q and k RMSNorm-ed across the heads; 4.8B is 60 blocks of 1.6B's width (the paper's depth growth) */
    {"sana-1.5-tiny", "sana", 2, 32, 4, 1, 4, 8, 10, 0, 6, 24, 0, false, true, 0, 0},
    {"sana-1.5-4.8b-1024", "sana", 60, 2240, 70, 1, 32, 32, 10, 0, 300, 2304, 0, false, true, 0, 0},
    {"sana-1.5-1.6b-1024", "sana", 20, 2240, 70, 1, 32, 32, 10, 0, 300, 2304, 0, false, true, 0, 0},
    /* Sana-Video 2B (Efficient-Large-Model/SANA-Video_2B_480p_diffusers, as diffusers' conversion script makes it):
     * 20 blocks of 20 heads x 112, the cross-attention the same, Gemma 2's 2304 at 300 tokens, mlp_ratio 3, q/k
     * RMSNorms; Wan's VAE (16 channels, 8x, 4 frames a latent one), (1, 2, 2) patches */
    {"sanavideo-tiny", "sanavideo", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, true, 0, 0},
    {"sanavideo-2b-480p", "sanavideo", 20, 2240, 20, 2, 16, 60, 10, 0, 300, 2304, 0, false, true, 0, 0},
    {"wan-tiny", "wan", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, false, 0, 0},
    {"wan-1.3b", "wan", 30, 1536, 12, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    {"wan-14b", "wan", 40, 5120, 40, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    /* Wan 2.1 VACE 1.3B and 14B (Wan-AI/Wan2.1-VACE-*-diffusers): the T2V backbones with a control branch of 15 blocks
     * (a hint every 2nd block) and 8 (every 5th), 96 control channels; set in model_preset */
    {"wan-vace-tiny", "wan", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, false, 0, 0},
    /* NVIDIA's AnyFlow-Wan2.1-T2V-1.3B and -14B: the T2V backbones with AnyFlow's delta embedder (gate 0.25) */
    {"wan-anyflow-tiny", "wan", 2, 64, 4, 2, 4, 8, 10, 0, 8, 32, 0, false, false, 0, 0},
    {"wan-anyflow-1.3b", "wan", 30, 1536, 12, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    {"wan-anyflow-14b", "wan", 40, 5120, 40, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    {"wan-vace-1.3b", "wan", 30, 1536, 12, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    /* Wan 2.2 Animate 14B (Wan-AI/Wan2.2-Animate-14B-Diffusers): the 14B backbone with its image-to-video inputs, the
     * motion and face encoders and a face adapter every 5th block, set in model_preset; 21 latent frames (a 77-frame
     * segment and the reference). The tiny one is the fixture's, with the class's 512 text tokens. */
    {"wan-animate-tiny", "wan", 2, 64, 4, 2, 4, 8, 10, 0, 512, 32, 0, false, false, 0, 0},
    {"wan-animate-14b", "wan", 40, 5120, 40, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    {"wan-vace-14b", "wan", 40, 5120, 40, 2, 16, 60, 10, 0, 512, 4096, 0, false, false, 0, 0},
    /* LTX-Video 0.9.5 (Lightricks/LTX-Video-0.9.5's transformer, the same shape as 0.9.0's): 28 blocks of 32 heads x
     * 64, T5-XXL's 4096 at SimpleTuner's 226 tokens, 128 latent channels in 1 x 1 x 1 patches from a VAE of 32x in
     * space (512 px: 16 x 16) and 8x in time; the tiny one is the fixture's. */
    {"ltxvideo-tiny", "ltxvideo", 2, 32, 2, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"ltxvideo-0.9.5", "ltxvideo", 28, 2048, 32, 1, 128, 16, 10, 0, 226, 4096, 0, false, false, 0, 0},
    /* LTX-2 19B (Lightricks/LTX-2's transformer, diffusers' 2.0 conversion): 48 blocks of a video stream (32 heads x
     * 128) and an audio stream (32 x 64, set in model_preset), both 128 latent channels; the Gemma 3 connectors'
     * 3840-wide states for each stream side by side at 1024 tokens; a VAE of 32x in space, 8x in time. */
    {"ltxvideo2-tiny", "ltxvideo2", 2, 32, 2, 1, 4, 8, 10, 0, 6, 48, 0, false, false, 0, 0},
    {"ltxvideo2-19b", "ltxvideo2", 48, 4096, 32, 1, 128, 16, 10, 0, 1024, 7680, 0, false, false, 0, 0},
    /* Cosmos-Predict2-2B- and -14B-Text2Image's (nvidia/Cosmos-Predict2-*-Text2Image): 28 blocks of 16 heads and 36
     * of 40 (x 128), AdaLN-LoRA 256 wide, T5-11B's 1024 at 512 tokens, 16 latent channels in (1, 2, 2) patches; the
     * tiny one is the fixture's shape. */
    {"cosmos2-tiny", "cosmos2image", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    /* Anima (circlestone-labs/Anima-Base-v1.0-Diffusers and its previews): Cosmos-Predict2-2B's transformer with
     * AnimaTextConditioner's defaults (6 blocks, 1024 wide, 16 heads, T5's 32128 ids, Qwen3-0.6B's 1024-wide states,
     * min_sequence_length 512), as SimpleTuner's AnimaTransformerModel sets them; 512 T5 ids and Qwen tokens (its
     * tokenizer_max_length). The tiny one is the fixture's; both set in model_preset. */
    {"anima-tiny", "anima", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"anima", "anima", 28, 2048, 16, 2, 16, 128, 10, 0, 512, 1024, 0, false, false, 0, 0},
    {"cosmos2-2b", "cosmos2image", 28, 2048, 16, 2, 16, 128, 10, 0, 512, 1024, 0, false, false, 0, 0},
    {"cosmos2-14b", "cosmos2image", 36, 5120, 40, 2, 16, 128, 10, 0, 512, 1024, 0, false, false, 0, 0},
    /* Kandinsky 5.0 T2I Lite's (kandinskylab/Kandinsky-5.0-T2I-Lite-*-Diffusers): 2 text blocks, then 50 visual
     * blocks of 20 heads x 128 (axes 32, 48, 48), time_dim 512, ff 10240 (4 D), Qwen2.5-VL's 3584 at SimpleTuner's
     * 256 tokens and CLIP-L's pooled 768, 16 latent channels (Flux's VAE, 1024 px); the tiny one is the fixture's. */
    {"kandinsky5-image-tiny", "kandinsky5", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"kandinsky5-t2i-lite", "kandinsky5", 50, 2560, 20, 2, 16, 128, 10, 0, 256, 3584, 768, false, false, 0, 0},
    /* Kandinsky 5.0 Video's (kandinskylab/Kandinsky-5.0-T2V-*-Diffusers): visual_cond (the input's reference latents
     * and mask: 33 channels a position, zero in text-to-video), the HunyuanVideo VAE (16 channels, 8x, 4 frames a
     * latent frame). Lite: 2 + 32 blocks of 28 heads x 64 (axes 16, 24, 24), time_dim 512, ff 7168 (4 D); Pro: 4 + 60
     * of 32 x 128 (axes 32, 48, 48), time_dim 1024, ff 16384; their grids 512 px and 1024 px (a config's resolution
     * and num_frames set the real ones); the tiny one is the fixture's. */
    {"kandinsky5-video-tiny", "kandinsky5", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"kandinsky5-t2v-lite", "kandinsky5", 32, 1792, 28, 2, 16, 64, 10, 0, 256, 3584, 768, false, false, 0, 0},
    {"kandinsky5-t2v-pro", "kandinsky5", 60, 4096, 32, 2, 16, 128, 10, 0, 256, 3584, 768, false, false, 0, 0},
    /* ACE-Step 1.5's (ACE-Step/Ace-Step1.5's acestep-v15-* transformers, AceStepTransformer1DModel's defaults): 24
     * layers of 16 heads x 128, 8 key-value heads, SwiGLU 6144, 64 latent channels with 128 of context, patches of
     * 2 frames, window 128; the condition 2048 wide, 589 tokens (SimpleTuner's v1.5 caption 77 and lyrics 512); 750
     * latent frames (30 s at the VAE's 25 a second). Audio is (C, F, 1, 1): resolution and patch 1. The tiny one is
     * the fixture's. */
    {"ace-step-tiny", "ace_step", 2, 32, 4, 1, 4, 1, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"ace-step-1.5", "ace_step", 24, 2048, 16, 1, 64, 1, 10, 0, 589, 2048, 0, false, false, 0, 0},
    /* Lumina-Image 2.0 (Alpha-VLLM/Lumina-Image-2.0's transformer): 26 joint blocks after 2 + 2 refiners, 24 heads x
     * 96 with 8 kv heads, Gemma 2 2B's 2304-wide text at SimpleTuner's 256 tokens, 16 latent channels in 2 x 2
     * patches (1024 px: 128 x 128); the rest in model_preset. The tiny one is the fixture's. */
    {"lumina2-tiny", "lumina2", 2, 48, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"lumina2", "lumina2", 26, 2304, 24, 2, 16, 128, 10, 0, 256, 2304, 0, false, false, 0, 0},
    /* Z-Image (Tongyi-MAI/Z-Image-Turbo's transformer, Z-Image's the same shape): 30 joint blocks after 2 + 2
     * refiners, 30 heads x 128, Qwen3 4B's 2560-wide text at SimpleTuner's 512 tokens; the rest in model_preset. */
    {"z-image-tiny", "z_image", 2, 48, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"z-image", "z_image", 30, 3840, 30, 2, 16, 128, 10, 0, 512, 2560, 0, false, false, 0, 0},
    /* ERNIE-Image (baidu/ERNIE-Image's transformer, Turbo's the same shape): 36 blocks of 32 heads x 128, its text
     * encoder's 3072-wide states, Flux.2's VAE's 128 packed channels at 16x (1024 px: 64 x 64, patch 1); 256 caption
     * tokens is segtrain's choice (SimpleTuner pads a batch to its longest caption). The rest in model_preset. */
    {"ernie-tiny", "ernie", 2, 32, 2, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"ernie-image", "ernie", 36, 4096, 32, 1, 128, 64, 10, 0, 256, 3072, 0, false, false, 0, 0},
    /* Ideogram 4 (Ideogram4Transformer2DModel's defaults, the published checkpoints' shape): 34 blocks of 18 heads x
     * 256, 13 Qwen3-VL layers' states side by side (53248 wide) per caption token, packed 128-channel latents at 16x
     * (patch 1); 256 caption tokens is segtrain's choice (SimpleTuner pads a batch to its longest). The rest in
     * model_preset. */
    {"ideogram-tiny", "ideogram", 2, 32, 2, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"ideogram-4", "ideogram", 34, 4608, 18, 1, 128, 64, 10, 0, 256, 53248, 0, false, false, 0, 0},
    /* OmniGen (Shitao/OmniGen-v1-diffusers's transformer): Phi-3 mini's 32 layers of 32 heads x 96 on the prompt's
     * token ids (its 32064-row table, text_dim 1: an id a token), SDXL's VAE's 4 channels in 2 x 2 patches, the 2D
     * sine-cosine table 192 wide; 128 prompt tokens is segtrain's choice (SimpleTuner pads a batch to its longest).
     * The rest in model_preset; the real rotary factors come with a checkpoint's config.json. */
    {"omnigen-tiny", "omnigen", 2, 32, 2, 2, 4, 8, 10, 0, 6, 1, 0, false, false, 0, 16},
    {"omnigen-v1", "omnigen", 32, 3072, 32, 2, 4, 128, 10, 0, 128, 1, 0, false, false, 0, 192},
    /* Krea 2 (krea/Krea-2-Raw's transformer, Krea2Transformer2DModel's defaults): 28 blocks of 48 heads x 128 with 12
     * key-value heads, feed-forward 16384, over 16 latent channels (Qwen-Image's VAE, 8x) in 2 x 2 patches; its text
     * fusion reads 12 tapped Qwen3-VL layers of 2560 a token (text_dim 30720) at the pipeline's 512 tokens. The rest
     * in model_preset; the tiny one is the fixture's. */
    {"krea2-tiny", "krea2", 2, 32, 2, 2, 4, 8, 10, 0, 6, 72, 0, false, false, 0, 0},
    {"krea2", "krea2", 28, 6144, 48, 2, 16, 128, 10, 0, 512, 30720, 0, false, false, 0, 0},
    /* Flux.3 Klein (Flux3Transformer2DModel's defaults; no published config was at hand): 5 mode blocks for the text
     * and for the image, then 28 single blocks, of 24 heads x 128; Flux.2's VAE (32 channels, 8x) in 2 x 2 patches;
     * stacked Qwen3-VL states 20480 wide at 512 tokens (segtrain's choice, Flux.2's). The tiny one is the fixture's. */
    {"flux3-tiny", "flux3_image", 2, 32, 2, 2, 4, 8, 10, 2, 6, 24, 0, false, false, 0, 0},
    {"flux3-klein", "flux3_image", 5, 3072, 24, 2, 32, 128, 10, 28, 512, 20480, 0, false, false, 0, 0},
    /* Qwen-Image 2.1 (QwenImage21Transformer2DModel's defaults; no published config was at hand): 32 single-stream
     * blocks of 32 heads x 128 on 16 latent channels in 2 x 2 patches, its encoder's 4096-wide states at Qwen-Image's
     * 1024 tokens. The tiny one is the fixture's. */
    {"qwen-image-2.1-tiny", "qwen_image21", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"qwen-image-2.1", "qwen_image21", 32, 4096, 32, 2, 16, 128, 10, 0, 1024, 4096, 0, false, false, 0, 0},
    /* MiniMaxH3Transformer3DModel's defaults (MiniMaxAI/MiniMax-H3): 50 blocks of 56 heads x 128 over a 5376-wide
     * stream, Qwen3-VL's 5120-wide states (SimpleTuner's 512 tokens), 24 latent channels through a 16x VAE; the
     * release's 768 px short edge, and 12 latent frames (SimpleTuner's example: 39 frames at 24 fps) */
    {"minimaxh3-tiny", "minimaxh3", 2, 32, 2, 2, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"minimaxh3", "minimaxh3", 50, 5376, 56, 2, 24, 48, 10, 0, 512, 5120, 0, false, false, 0, 0},
    /* Cosmos3OmniTransformer's defaults, which are Cosmos3-Nano's 16 B (36 layers a stream of 32 heads x 128 with 8
     * key-value heads over 4096, Qwen3's 151936 tokens), 48 latent channels through the 16x VAE, 1024 px, 512 prompt
     * tokens (segtrain's choice) */
    {"cosmos3-tiny", "cosmos3", 2, 32, 2, 2, 4, 8, 10, 0, 6, 1, 0, false, false, 0, 0},
    {"cosmos3-nano", "cosmos3", 36, 4096, 32, 2, 48, 64, 10, 0, 512, 1, 0, false, false, 0, 0},
    /* Stable Diffusion 1.x (stable-diffusion-v1-5's unet/config.json): levels of 320, 640, 1280, 1280 channels (the
     * last without attention), 2 ResnetBlock2Ds a down block, 8 heads, CLIP-L's 768 at 77 tokens, 512 px (64 x 64
     * latents); hidden_size is the time embedding's 1280. The rest in model_preset; the tiny one is the fixture's. */
    {"sd1x-tiny", "sd1x", 0, 32, 1, 1, 4, 8, 10, 0, 6, 24, 0, false, false, 0, 0},
    {"sd15", "sd1x", 0, 1280, 1, 1, 4, 64, 10, 0, 77, 768, 0, false, false, 0, 0},
    /* Stable Diffusion XL base 1.0 (stabilityai/stable-diffusion-xl-base-1.0's unet/config.json): levels of 320, 640,
     * 1280 channels (the first without attention) with 2 and 10 transformer blocks, heads of 64, the two CLIPs'
     * 2048 at 77 tokens, the pooled 1280 and six size ids (addition_time_embed_dim 256), 1024 px (128 x 128). */
    {"sdxl-tiny", "sdxl", 0, 32, 1, 1, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"sdxl", "sdxl", 0, 1280, 1, 1, 4, 128, 10, 0, 77, 2048, 1280, false, false, 0, 0},
    /* Kolors (Kwai-Kolors/Kolors-diffusers' unet/config.json): SDXL's U-Net reading ChatGLM3's 4096-wide states at
     * SimpleTuner's 77 tokens through encoder_hid_proj (to 2048), its pooled 4096 and the six size ids. */
    {"kolors-tiny", "kolors", 0, 32, 1, 1, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"kolors", "kolors", 0, 1280, 1, 1, 4, 128, 10, 0, 77, 4096, 4096, false, false, 0, 0},
    /* Stable Cascade's stage C (stabilityai/stable-cascade-prior's prior/config.json, and prior_lite/ for lite): two
     * levels of 2048 channels (1536), 8 and 24 [ResBlock, TimestepBlock, AttnBlock] layers (4 and 12) of 32 heads (24),
     * one resolution (switch_level [false]), conditioning 2048 wide from CLIP-G's 1280 at 77 tokens, its pooled 1280
     * and a zero CLIP image embedding 768, 4 tokens each; 16 latent channels, 24 x 24 at 1024 px (42.67 px a latent
     * pixel: vae_scale 42). The rest in model_preset; the tiny one is the fixture's. */
    {"stable-cascade-tiny", "stable_cascade", 0, 16, 1, 1, 4, 8, 10, 0, 6, 24, 20, false, false, 0, 0},
    {"stable-cascade-c", "stable_cascade", 0, 2048, 1, 1, 16, 24, 10, 0, 77, 1280, 1280, false, false, 0, 0},
    {"stable-cascade-c-lite", "stable_cascade", 0, 1536, 1, 1, 16, 24, 10, 0, 77, 1280, 1280, false, false, 0, 0},
    {"skipdit-tiny", "skipdit", 5, 64, 4, 2, 4, 8, 10, 0, 0, 0, 0, false, false, 0, 0},
    {"skipdit-s", "skipdit", 13, 384, 6, 2, 4, 32, 1000, 0, 0, 0, 0, false, false, 0, 0},
};
#define PRESET_COUNT (sizeof presets / sizeof *presets)
#define TEXT_VOCAB 1024
/* The presets' latent grids are those of images through Stable Diffusion's or Flux's VAE (DiT's: 256 px -> 32). */
#define FAMILY_VAE_SCALE 8

/* Flux's split of a head into rotary axes, (hd - 2 a, a, a) pairs-wide with a = 2 floor(7 hd / 32): its
 * (16, 56, 56) at 128. */
#define CHROMA_APPROX_LAYERS_MAX 16

static void rope_axes_for(model_config *mc)
{
    const int64_t hd = mc->hidden / mc->heads, a = 2 * (7 * hd / 32);
    if (!strcmp(mc->family, "flux2") || !strcmp(mc->family, "flux3_image")) { /* four equal axes, (32, 32, 32, 32) at
                                                                               128 */
        const int64_t q = 2 * (hd / 8);
        mc->rope_axes[0] = mc->rope_axes[1] = mc->rope_axes[2] = q, mc->rope_axes[3] = hd - 3 * q;
        return;
    }
    if (!strcmp(mc->family, "z_image") || !strcmp(mc->family, "ernie") || !strcmp(mc->family, "krea2")) {
        /* (32, 48, 48) at 128 */
        mc->rope_axes[1] = mc->rope_axes[2] = 2 * (3 * hd / 16), mc->rope_axes[0] = hd - 4 * (3 * hd / 16);
        mc->rope_axes[3] = 0;
        return;
    }
    if (!strcmp(mc->family, "lumina2")) { /* Lumina 2's three equal axes, (32, 32, 32) at 96 */
        mc->rope_axes[1] = mc->rope_axes[2] = 2 * (hd / 6), mc->rope_axes[0] = hd - 4 * (hd / 6), mc->rope_axes[3] = 0;
        return;
    }
    if (!strcmp(mc->family, "hidream")) { /* HiDream's (64, 32, 32) at 128 */
        mc->rope_axes[0] = hd - 2 * (hd / 4), mc->rope_axes[1] = mc->rope_axes[2] = hd / 4;
        return;
    }
    mc->rope_axes[0] = hd - 2 * a, mc->rope_axes[1] = a, mc->rope_axes[2] = a;
}

const char *model_preset_name(int i) { return i >= 0 && i < (int)PRESET_COUNT ? presets[i].name : NULL; }

st_status model_preset(const char *name, model_config *out)
{
    for (size_t i = 0; i < PRESET_COUNT; i++) {
        const struct preset *p = &presets[i];
        if (strcmp(p->name, name)) continue;
        *out = (model_config){.depth = p->depth, .hidden = p->hidden, .heads = p->heads, .patch = p->patch,
                              .channels = p->channels, .resolution = p->resolution, .classes = p->classes,
                              .single_depth = p->single_depth, .text_len = p->text_len,
                              .text_vocab = p->text_len ? TEXT_VOCAB : 0, .text_dim = p->text_dim,
                              .pooled_dim = p->pooled_dim, .guidance_embeds = p->guidance_embeds, .guidance = 1.0,
                              .vae_scale = FAMILY_VAE_SCALE, .mechanism = ATTN_FLASH, .frames = 1, .patch_t = 1,
                              .qk_norm = p->qk_norm, .dual_attention = p->dual_attention,
                              .time_channels = strcmp(p->family, "flux2") && strcmp(p->family, "flux3_image")
                                                   ? 0 : 256, /* Flux.2's timestep_guidance_channels, Flux.3's
                                                                 timestep_channels */
                              .pos_embed_max = p->pos_embed_max, .sample_size = p->pos_embed_max ? p->resolution : 0};
        snprintf(out->family, sizeof out->family, "%s", p->family);
        snprintf(out->preset, sizeof out->preset, "%s", name);
        rope_axes_for(out);
        const bool tiny = strstr(name, "tiny") != NULL;
        if (!strncmp(p->family, "hunyuanvideo", 12)) /* the tiny ones' latents have 2 frames, a video's smallest */
            out->refiner_depth = 2, out->frames = tiny ? 2 : 1;
        if (!strcmp(p->family, "hunyuanvideo15")) { /* ByT5's 1472-wide glyph tokens (256 of them), SigLIP's 1152,
                                                       the i2v condition's 32 + 1 channels; a 16x VAE */
            out->text2_len = tiny ? 4 : 256, out->text2_dim = tiny ? 12 : 1472, out->image_dim = tiny ? 8 : 1152;
            out->cond_channels = out->channels + 1, out->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
        }
        if (!strcmp(p->family, "sana")) /* GLUMBConv's int(2.5 D) */
            out->cross_heads = tiny ? 2 : p->hidden == 2240 ? 20 : 16, out->vae_scale = tiny ? FAMILY_VAE_SCALE : 32,
            out->ffn_dim = (int64_t)(2.5 * (double)p->hidden);
        if (!strcmp(p->family, "sanavideo")) /* GLUMBTempConv's int(3 D); the tiny one's 3 frames take every tap */
            out->cross_heads = p->heads, out->vae_scale = tiny ? FAMILY_VAE_SCALE : 8, out->frames = tiny ? 3 : 1,
            out->ffn_dim = 3 * p->hidden;
        if (!strcmp(p->family, "pixart_sigma")) /* learned variance; the table's base grid and interpolation */
            out->out_channels = 2 * out->channels, out->sample_size = p->resolution,
            out->interpolation = tiny ? 1.0 : (double)(p->resolution / 64 > 1 ? p->resolution / 64 : 1);
        if (!strcmp(p->family, "wan"))
            out->ffn_dim = tiny ? 0 : strstr(name, "14b") ? 13824 : 8960, out->frames = tiny ? 2 : 1;
        if (!strncmp(name, "wan-anyflow", 11)) out->anyflow = true, out->anyflow_gate = 0.25;
        if (!strcmp(p->family, "lumina2")) /* LuminaFeedForward's 4 D, rounded up to multiple_of 256 */
            out->refiner_depth = tiny ? 1 : 2, out->kv_heads = tiny ? 1 : 8, out->norm_eps = 1e-5,
            out->ffn_dim = tiny ? 4 * p->hidden : 9216;
        if (!strcmp(p->family, "ideogram")) { /* adaln_dim, mrope_section (24, 20, 20) of 128 frequencies */
            out->kv_heads = p->heads, out->norm_eps = 1e-5, out->ffn_dim = tiny ? 64 : 12288;
            out->time_dim = tiny ? 16 : 512, out->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
            const int64_t sections[4] = {tiny ? 2 : 24, tiny ? 2 : 20, tiny ? 2 : 20, 0};
            memcpy(out->rope_axes, sections, sizeof sections);
        }
        if (!strcmp(p->family, "omnigen")) { /* the tiny one's is the fixture's: GQA, and past its original context */
            out->kv_heads = tiny ? 1 : 32, out->ffn_dim = tiny ? 64 : 8192, out->norm_eps = 1e-5;
            out->text_vocab = tiny ? 64 : 32064, out->text_pad = tiny ? 5 : 32000, out->sample_size = 64 * p->patch;
            out->rope_original = tiny ? 20 : 4096, out->rope_max = tiny ? 160 : 131072;
            for (int64_t f = 0; f < p->hidden / p->heads / 2; f++)
                out->rope_short[f] = tiny ? 1.0f + 0.125f * (float)f : 1.0f,
                out->rope_long[f] = tiny ? 1.0f + 0.5f * (float)f : 1.0f;
        }
        if (!strcmp(p->family, "krea2")) /* the text fusion: text_dim is its tapped layers' widths side by side */
            out->kv_heads = tiny ? 1 : 12, out->ffn_dim = tiny ? 64 : 16384, out->norm_eps = 1e-5,
            out->text_layers = tiny ? 3 : 12, out->text_heads = tiny ? 2 : 20, out->text_kv_heads = tiny ? 1 : 20,
            out->text_ffn = tiny ? 48 : 6912, out->text_blocks = 2, out->refiner_depth = tiny ? 1 : 2;
        if (!strcmp(p->family, "ernie")) /* full multi-head attention; eps 1e-6; SimpleTuner's packed latents at 16x */
            out->kv_heads = p->heads, out->norm_eps = 1e-6, out->ffn_dim = tiny ? 2 * p->hidden : 12288,
            out->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
        if (!strcmp(p->family, "z_image")) /* its FeedForward's int(D / 3 * 8); its n_kv_heads is not used */
            out->refiner_depth = tiny ? 1 : 2, out->kv_heads = p->heads, out->norm_eps = 1e-5,
            out->ffn_dim = (int64_t)((double)p->hidden / 3.0 * 8.0);
        if (model_cascade(out)) {
            const bool lite = strstr(name, "lite") != NULL;
            const int64_t C = p->hidden;
            out->unet_levels = 2, out->unet_cross = tiny ? 16 : 2048, out->clip_seq = tiny ? 2 : 4;
            out->time_channels = tiny ? 8 : 64, out->image_dim = tiny ? 8 : 768, out->vae_scale = tiny ? 8 : 42;
            const int64_t ch[2] = {C, tiny ? 24 : C}, n[2] = {tiny ? 1 : lite ? 4 : 8, tiny ? 2 : lite ? 12 : 24};
            for (int l = 0; l < 2; l++) /* the published dropout; the fixture's 0 */
                out->unet_channels[l] = ch[l], out->unet_attn[l] = n[l], out->unet_heads[l] = tiny ? 2 : C / 64,
                out->cascade_dropout[l] = tiny ? 0.0f : 0.1f;
            out->depth = cascade_depth(out);
        }
        if (model_unet(out)) { /* the tiny ones are the fixtures' */
            const bool xl = strcmp(p->family, "sd1x") != 0;
            static const int64_t ch[4][UNET_LEVELS_MAX] = {{320, 640, 1280, 1280}, {8, 16, 24}, {320, 640, 1280},
                                                           {8, 16, 24}};
            static const int64_t at[4][UNET_LEVELS_MAX] = {{1, 1, 1, 0}, {1, 1, 0}, {0, 2, 10}, {0, 1, 2}};
            static const int64_t heads[4][UNET_LEVELS_MAX] = {{8, 8, 8, 8}, {2, 2, 2}, {5, 10, 20}, {2, 2, 2}};
            const int k = 2 * xl + tiny;
            out->unet_levels = xl || tiny ? 3 : 4, out->unet_layers = tiny ? 1 : 2, out->unet_mid = at[k][2] + !xl;
            out->norm_groups = tiny ? 4 : 32, out->norm_eps = 1e-5, out->unet_linear = xl;
            out->time_channels = xl ? (tiny ? 8 : 256) : 0;
            out->unet_cross = strcmp(p->family, "kolors") ? 0 : tiny ? 16 : 2048;
            for (int l = 0; l < UNET_LEVELS_MAX; l++)
                out->unet_channels[l] = ch[k][l], out->unet_attn[l] = at[k][l], out->unet_heads[l] = heads[k][l];
            out->depth = unet_depth(out);
        }
        if (!strncmp(name, "wan-animate", 11)) {
            static const int64_t real[9] = {512, 512, 512, 512, 256, 128, 64, 32, 16}, small[9] = {8, 6, 4};
            memcpy(out->motion_channels, tiny ? small : real, sizeof real);
            out->frames = 3 + !tiny * 18, out->image_tokens = tiny ? 5 : 257, out->image_dim = tiny ? 16 : 1280;
            out->cond_channels = out->channels + 4, out->face_every = tiny ? 1 : 5, out->face_size = tiny ? 16 : 512;
            out->motion_style = tiny ? 16 : 512, out->motion_dim = tiny ? 4 : 20, out->motion_out = tiny ? 12 : 512;
            out->face_hidden = tiny ? 8 : 1024, out->face_heads = tiny ? 2 : 4;
        }
        if (!strncmp(name, "wan-vace", 8)) {
            const bool big = strstr(name, "14b") != NULL;
            out->vace_count = tiny ? 2 : big ? 8 : 15, out->vace_every = tiny ? 1 : big ? 5 : 2;
            out->vace_channels = tiny ? 8 : 96;
        }
        if (!strcmp(p->family, "ace_step"))
            out->kv_heads = tiny ? 2 : 8, out->window = tiny ? 3 : 128, out->ffn_dim = tiny ? 64 : 6144,
            out->cond_channels = 2 * out->channels, out->patch_t = 2, out->frames = tiny ? 32 : 750;
        if (!strcmp(p->family, "kandinsky5")) {
            const bool pro = strstr(name, "-pro") != NULL;
            out->text_blocks = pro ? 4 : 2, out->time_dim = tiny ? 32 : pro ? 1024 : 512, out->ffn_dim = tiny ? 64 : 0;
            if (strstr(name, "t2v") || strstr(name, "video")) /* visual_cond: a reference's latents and mask */
                out->cond_channels = out->channels + 1, out->frames = tiny ? 2 : 1;
        }
        if (!strcmp(p->family, "cosmos2image") || !strcmp(p->family, "anima")) out->adaln_lora = tiny ? 16 : 256;
        if (!strcmp(p->family, "anima"))
            out->source_len = tiny ? 5 : 512, out->source_dim = tiny ? 24 : 1024, out->text_min_len = tiny ? 8 : 512,
            out->refiner_depth = tiny ? 2 : 6, out->text_vocab = tiny ? 32 : 32128;
        if (!strcmp(p->family, "ltxvideo") || !strcmp(p->family, "ltxvideo2"))
            out->frames = tiny ? 2 : 1, out->vae_scale = tiny ? FAMILY_VAE_SCALE : 32;
        if (!strcmp(p->family, "ltxvideo2"))
            out->audio_hidden = tiny ? 16 : 2048, out->audio_heads = tiny ? 2 : 32,
            out->audio_channels = tiny ? 4 : 128;
        if (!strcmp(p->family, "chroma")) { /* the tiny one's approximator is the fixture's shape, with 2 layers */
            out->approx_channels = tiny ? 32 : 64, out->approx_hidden = tiny ? 32 : 5120, out->approx_layers = tiny ? 2 : 5;
        }
        if (!strcmp(p->family, "minimaxh3")) { /* the tiny one is the fixture's: heads x head_dim wider than the
                                                   stream, the rotary pairs on a half of each head */
            out->head_dim = tiny ? 24 : 128, out->refiner_depth = tiny ? 1 : 2, out->ffn_dim = tiny ? 64 : 14336;
            out->time_channels = tiny ? 32 : 256, out->time_hidden = tiny ? 48 : 5376, out->time_dim = tiny ? 16 : 2688;
            out->norm_eps = 1e-5, out->audio_channels = tiny ? 8 : 32, out->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
            out->frames = tiny ? 2 : 12;
            const int64_t axes[4] = {tiny ? 4 : 32, tiny ? 4 : 32, tiny ? 4 : 32, 0}; /* 2 rope_freq_dim each */
            memcpy(out->rope_axes, axes, sizeof axes);
        }
        if (!strcmp(p->family, "cosmos3")) { /* the tiny one is the fixture's: grouped queries, MRoPE (2, 2, 2) of 8,
                                                 a sound head loaded untrained */
            out->head_dim = tiny ? 16 : 128, out->kv_heads = tiny ? 1 : 8, out->ffn_dim = tiny ? 64 : 12288;
            out->text_vocab = tiny ? 64 : 151936, out->norm_eps = 1e-6, out->audio_channels = tiny ? 8 : 0;
            out->vae_scale = tiny ? FAMILY_VAE_SCALE : 16;
            const int64_t sections[4] = {tiny ? 2 : 24, tiny ? 2 : 20, tiny ? 2 : 20, 0};
            memcpy(out->rope_axes, sections, sizeof sections);
        }
        if (!strcmp(p->family, "hidream")) /* the tiny one is the fixture's */
            out->experts = strstr(name, "tiny") ? 3 : 4, out->experts_active = 2, out->llama_len = strstr(name, "tiny") ? 3 : 128;
        return ST_OK;
    }
    char names[512] = "";
    for (size_t i = 0; i < PRESET_COUNT; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", presets[i].name);
    return st_fail(ST_ERR_INVALID, "model_preset: '%s' is not one of %s", name, names);
}

/* Wan Animate's sizes (model_wan_animate), or none of them elsewhere */
/* The U-Net's sizes: what unet.c builds */
/* Stable Cascade's sizes: what cascade.c builds */
static st_status check_cascade(const model_config *mc)
{
    const int64_t L = mc->unet_levels;
    bool ok = L >= 1 && L <= UNET_LEVELS_MAX && mc->clip_seq >= 1 && mc->clip_seq <= 64 && mc->unet_cross >= 1 &&
              mc->unet_cross <= (1 << 20) && mc->time_channels >= 2 && mc->time_channels <= 65536 &&
              mc->time_channels % 2 == 0 && mc->pooled_dim >= 1 && mc->image_dim >= 1 && mc->patch == 1 &&
              mc->frames == 1 && !mc->out_channels && mc->hidden == mc->unet_channels[0] &&
              (!mc->cascade_resample || mc->resolution % ((int64_t)1 << (L - 1)) == 0);
    for (int64_t i = 0; ok && i < L; i++)
        ok = mc->cascade_dropout[i] >= 0 && mc->cascade_dropout[i] < 1 && mc->unet_channels[i] >= 1 &&
             mc->unet_channels[i] <= (1 << 16) && mc->unet_heads[i] >= 1 &&
             mc->unet_channels[i] % mc->unet_heads[i] == 0 && mc->unet_attn[i] >= 1 && mc->unet_attn[i] <= 64;
    if (ok) return ST_OK;
    return st_fail(ST_ERR_INVALID, "block_out_channels: %lld levels (%lld, %lld, %lld, %lld) with heads (%lld, %lld, "
                   "%lld, %lld), conditioning_dim %lld, clip_seq %lld, timestep_ratio_embedding_dim %lld, resolution "
                   "%lld; stable_cascade takes 1 to %d levels of 1 to 65536 channels that each level's heads divide, 1 "
                   "to 64 layers a level, dropout in [0, 1), conditioning of 1 to 2^20, 1 to 64 clip tokens, even time "
                   "sinusoids of 2 to "
                   "65536, pooled and image widths of at least 1, hidden_size block_out_channels[0], 1 x 1 patches, "
                   "1 frame, and with resampling scalers a latent edge that halves evenly", (long long)L,
                   (long long)mc->unet_channels[0], (long long)mc->unet_channels[1], (long long)mc->unet_channels[2],
                   (long long)mc->unet_channels[3], (long long)mc->unet_heads[0], (long long)mc->unet_heads[1],
                   (long long)mc->unet_heads[2], (long long)mc->unet_heads[3], (long long)mc->unet_cross,
                   (long long)mc->clip_seq, (long long)mc->time_channels, (long long)mc->resolution, UNET_LEVELS_MAX);
}

static st_status check_unet(const model_config *mc)
{
    if (model_cascade(mc)) return check_cascade(mc);
    bool dropout = false;
    for (int i = 0; i < UNET_LEVELS_MAX; i++) dropout |= mc->cascade_dropout[i] != 0;
    if (mc->clip_seq || mc->cascade_resample || dropout)
        return st_fail(ST_ERR_INVALID, "clip_seq: %lld; only stable_cascade has conditioning tokens of pooled vectors "
                       "(0)", (long long)mc->clip_seq);
    const bool unet = model_unet(mc);
    const int64_t L = mc->unet_levels, g = mc->norm_groups;
    if (!unet) {
        if (L || mc->unet_layers || mc->unet_mid || g || mc->unet_linear || mc->unet_cross)
            return st_fail(ST_ERR_INVALID, "block_out_channels: %lld levels; only sd1x, sdxl and kolors are U-Nets (0)",
                           (long long)L);
        return ST_OK;
    }
    bool ok = L >= 1 && L <= UNET_LEVELS_MAX && mc->unet_layers >= 1 && mc->unet_layers <= 8 && mc->unet_mid >= 0 &&
              mc->unet_mid <= 64 && g >= 1 && mc->norm_eps > 0 && mc->norm_eps < 1 && mc->patch == 1 &&
              mc->frames == 1 && !mc->out_channels && mc->hidden == 4 * mc->unet_channels[0] &&
              mc->resolution % ((int64_t)1 << (L - 1)) == 0 &&
              (!strcmp(mc->family, "sd1x") ? !mc->pooled_dim && !mc->time_channels
                                           : mc->pooled_dim >= 1 && mc->time_channels >= 2 &&
                                                 mc->time_channels % 2 == 0 && mc->time_channels <= 65536) &&
              (strcmp(mc->family, "kolors") ? !mc->unet_cross : mc->unet_cross >= 1 && mc->unet_cross <= (1 << 20));
    for (int64_t i = 0; ok && i < L; i++)
        ok = mc->unet_channels[i] >= 1 && mc->unet_channels[i] <= (1 << 16) && mc->unet_channels[i] % g == 0 &&
             mc->unet_heads[i] >= 1 && mc->unet_channels[i] % mc->unet_heads[i] == 0 && mc->unet_attn[i] >= 0 &&
             mc->unet_attn[i] <= 64;
    if (ok) return ST_OK;
    return st_fail(ST_ERR_INVALID, "block_out_channels: %lld levels (%lld, %lld, %lld, %lld) with heads (%lld, %lld, "
                   "%lld, %lld), layers_per_block %lld, norm_num_groups %lld, norm_eps %g, resolution %lld; %s takes 1 "
                   "to %d levels of 1 to 65536 channels that the groups and each level's heads divide, 1 to 8 layers "
                   "a block, 0 to 64 transformer blocks an attention, an eps in (0, 1), a latent edge that halves "
                   "evenly at every level, time_embed_dim 4 x block_out_channels[0], 1 x 1 patches, 1 frame (sdxl, "
                   "kolors: a pooled text of at least 1 and even size-id sinusoids of 2 to 65536, sd1x neither; "
                   "kolors: a text projection to 1 to 2^20)",
                   (long long)L, (long long)mc->unet_channels[0], (long long)mc->unet_channels[1],
                   (long long)mc->unet_channels[2], (long long)mc->unet_channels[3], (long long)mc->unet_heads[0],
                   (long long)mc->unet_heads[1], (long long)mc->unet_heads[2], (long long)mc->unet_heads[3],
                   (long long)mc->unet_layers, (long long)g, mc->norm_eps, (long long)mc->resolution, mc->family,
                   UNET_LEVELS_MAX);
}

static st_status check_animate(const model_config *mc)
{
    const int64_t *ch = mc->motion_channels;
    bool channels = true;
    int64_t log = 2;
    while (((int64_t)1 << log) < mc->face_size && log < 10) log++;
    for (int64_t k = 0; k <= log - 2; k++) channels = channels && ch[k] >= 1 && ch[k] <= (1 << 16);
    if (!model_wan_animate(mc)) {
        bool none = !mc->face_every && !mc->image_tokens && !mc->face_size && !mc->motion_style && !mc->motion_dim && !mc->motion_out &&
                    !mc->face_hidden && !mc->face_heads;
        for (int k = 0; k < 9; k++) none = none && !ch[k];
        return none ? ST_OK : st_fail(ST_ERR_INVALID, "the reference image's tokens, the motion and face encoders: "
                                      "only wan as WanAnimateTransformer3DModel has them (0)");
    }
    const bool sizes = mc->image_tokens >= 1 && mc->image_tokens <= (1 << 16) && mc->image_dim >= 1 &&
                       mc->image_dim <= (1 << 16) && mc->motion_style >= 1 && mc->motion_style <= (1 << 16) &&
                       mc->motion_dim >= 1 && mc->motion_dim <= mc->motion_out && mc->motion_out <= (1 << 16) &&
                       mc->face_hidden >= 1 && mc->face_hidden <= (1 << 16) && mc->face_heads >= 1 &&
                       mc->face_heads <= 64;
    if (!sizes || !channels || mc->face_size != ((int64_t)1 << log))
        return st_fail(ST_ERR_INVALID, "Wan Animate: image tokens %lld of width %lld, motion_encoder_size %lld, "
                       "motion_style_dim %lld, motion_dim %lld, motion_encoder_dim %lld, face encoder %lld wide with "
                       "%lld heads; it takes 1 to 65536 of each (64 heads at most, motion_dim at most "
                       "motion_encoder_dim), an edge that is a power of two from 4 to 1024, and channels for each of "
                       "its edges", (long long)mc->image_tokens, (long long)mc->image_dim, (long long)mc->face_size,
                       (long long)mc->motion_style, (long long)mc->motion_dim, (long long)mc->motion_out,
                       (long long)mc->face_hidden, (long long)mc->face_heads);
    if (mc->depth % mc->face_every || mc->frames < 2 || mc->patch_t != 1 || mc->cond_channels != mc->channels + 4 ||
        mc->text_len != 512 || mc->out_channels)
        return st_fail(ST_ERR_INVALID, "Wan Animate: %lld blocks with a face adapter every %lld, %lld latent frames, "
                       "patch_size_t %lld, %lld condition channels over %lld latent ones, %lld text tokens, "
                       "out_channels %lld; it takes a multiple of inject_face_latents_blocks, at least 2 frames (the "
                       "reference and one more), 1, in_channels = 2 latent channels + 4, the 512 tokens its attention "
                       "splits the context at, and 0 (= the latent channels)", (long long)mc->depth,
                       (long long)mc->face_every, (long long)mc->frames, (long long)mc->patch_t,
                       (long long)mc->cond_channels, (long long)mc->channels, (long long)mc->text_len,
                       (long long)mc->out_channels);
    return ST_OK;
}

st_status model_config_check(const model_config *mc)
{
    const bool mmdit = model_dual_stream(mc), skipdit = !strcmp(mc->family, "skipdit"), sd3 = !strcmp(mc->family, "sd3");
    const bool xattn = model_xattn(mc), text = model_reads_text(mc);
    const bool aura = !strcmp(mc->family, "auraflow"), flux2 = !strcmp(mc->family, "flux2");
    const bool chroma = !strcmp(mc->family, "chroma"), qwen = !strcmp(mc->family, "qwen_image");
    const bool hv15 = !strcmp(mc->family, "hunyuanvideo15");
    const bool unpooled = aura || !strcmp(mc->family, "longcat_image") || chroma || qwen || hv15 ||
                          (xattn && !model_kandinsky5(mc)) || model_qwen_image21(mc); /* no pooled text */
    if (!text && !skipdit && strcmp(mc->family, "dit"))
        return st_fail(ST_ERR_INVALID, "model_family: '%s' is not one of dit, mmdit, skipdit, flux, sd3, auraflow, "
                       "qwen_image", mc->family);
    const struct {
        const char *key;
        int64_t v;
    } positive[] = {{"depth", mc->depth},           {"hidden_size", mc->hidden}, {"num_heads", mc->heads},
                    {"patch_size", mc->patch},      {"in_channels", mc->channels}, {"resolution", mc->resolution},
                    {"num_classes", mc->classes},   {"tokenizer_max_length", text ? mc->text_len : 1},
                    {"joint_attention_dim", text ? mc->text_dim : 1},
                    {"pooled_projection_dim", mmdit && !unpooled && !flux2 ? mc->pooled_dim : 1},
                    {"vae_scale_factor", mc->vae_scale}};
    for (size_t i = 0; i < sizeof positive / sizeof *positive; i++)
        if (positive[i].v < 1) return st_fail(ST_ERR_INVALID, "%s: %lld must be at least 1", positive[i].key,
                                              (long long)positive[i].v);
    if (text && mc->text_vocab < 2)
        return st_fail(ST_ERR_INVALID, "text_vocab_size: %lld must be at least 2 (padding and one word)",
                       (long long)mc->text_vocab);
    if (mc->hidden % mc->heads)
        return st_fail(ST_ERR_INVALID, "num_heads: %lld does not divide hidden_size %lld", (long long)mc->heads,
                       (long long)mc->hidden);
    if (mc->hidden % 4)
        return st_fail(ST_ERR_INVALID, "hidden_size: %lld must be a multiple of 4 (the 2D sine-cosine table)",
                       (long long)mc->hidden);
    const bool flux3 = model_flux3(mc), four = flux2 || flux3; /* Flux.2 and Flux.3 rotate on four axes */
    const bool q21 = model_qwen_image21(mc);
    if ((mmdit && !sd3 && !aura) || flux3 || q21) {
        const int64_t hd = mc->hidden / mc->heads, *a = mc->rope_axes;
        const int n = four ? 4 : 3;
        int64_t sum = 0;
        bool even = true;
        for (int i = 0; i < n; i++) sum += a[i], even &= a[i] >= 0 && a[i] % 2 == 0;
        if (!even || sum != hd)
            return st_fail(ST_ERR_INVALID, "axes_dims_rope: (%lld, %lld, %lld%s%.0lld) must be even widths that add up "
                           "to the head width %lld (hidden_size / num_heads)", (long long)a[0], (long long)a[1],
                           (long long)a[2], four ? ", " : "", four ? (long long)a[3] : 0LL, (long long)hd);
    }
    if (four && (mc->pooled_dim || (mc->guidance_embeds && flux3)))
        return st_fail(ST_ERR_INVALID, "pooled_projection_dim: %lld, guidance_embeds %d; %s has no pooled text vector "
                       "(0)%s", (long long)mc->pooled_dim, (int)mc->guidance_embeds, mc->family,
                       flux3 ? " and no guidance embedding (false)" : "");
    if (four && (mc->time_channels < 2 || mc->time_channels % 2 || mc->time_channels > 65536))
        return st_fail(ST_ERR_INVALID, "timestep_guidance_channels (Flux.3: timestep_channels): %lld must be even, 2 "
                       "to 65536", (long long)mc->time_channels);
    if (mc->classes >= (1 << 24))
        return st_fail(ST_ERR_INVALID, "num_classes: %lld; at most %d (labels travel as floats)", (long long)mc->classes,
                       (1 << 24) - 1);
    if (skipdit && (mc->depth < 3 || mc->depth % 2 == 0))
        return st_fail(ST_ERR_INVALID, "depth: %lld blocks; skipdit needs an odd number >= 3 (in-blocks, a mid block, "
                       "as many out-blocks)", (long long)mc->depth);
    if (sd3 && (mc->resolution / mc->patch > mc->pos_embed_max || mc->sample_size < mc->patch))
        return st_fail(ST_ERR_INVALID, "pos_embed_max_size: %lld; sd3's table must cover the %lld-patch grid of "
                       "resolution %lld, and sample_size %lld at least one patch", (long long)mc->pos_embed_max,
                       (long long)(mc->resolution / mc->patch), (long long)mc->resolution, (long long)mc->sample_size);
    if (aura && (mc->resolution / mc->patch > mc->pos_embed_max || mc->pooled_dim))
        return st_fail(ST_ERR_INVALID, "pos_embed_max_size: %lld x %lld; auraflow's learned table must cover the "
                       "%lld-patch grid of resolution %lld (and pooled_projection_dim %lld must be 0: it has none)",
                       (long long)mc->pos_embed_max, (long long)mc->pos_embed_max,
                       (long long)(mc->resolution / mc->patch), (long long)mc->resolution, (long long)mc->pooled_dim);
    if (unpooled && !aura && (mc->pooled_dim || mc->guidance_embeds))
        return st_fail(ST_ERR_INVALID, "pooled_projection_dim: %lld, guidance_embeds %d; %s conditions on the timestep "
                       "alone (0 and false)", (long long)mc->pooled_dim, (int)mc->guidance_embeds, mc->family);
    if (chroma && (mc->approx_channels < 8 || mc->approx_channels % 8 || mc->approx_channels > (1 << 16) ||
                   mc->approx_hidden < 1 || mc->approx_hidden > (1 << 20) || mc->approx_layers < 0 ||
                   mc->approx_layers > CHROMA_APPROX_LAYERS_MAX))
        return st_fail(ST_ERR_INVALID, "approximator_num_channels %lld, approximator_hidden_dim %lld, "
                       "approximator_layers %lld: chroma's take a multiple of 8 up to 65536, 1 to 2^20 and 0 to %d",
                       (long long)mc->approx_channels, (long long)mc->approx_hidden, (long long)mc->approx_layers,
                       CHROMA_APPROX_LAYERS_MAX);
    if (mc->dual_attention < 0 || mc->dual_attention > (sd3 ? mc->depth : 0))
        return st_fail(ST_ERR_INVALID, "dual_attention_layers: the first %lld blocks; sd3 has %lld (other families "
                       "none)", (long long)mc->dual_attention, (long long)(sd3 ? mc->depth : 0));
    if (mc->out_channels && (mc->out_channels < mc->channels || !xattn))
        return st_fail(ST_ERR_INVALID, "out_channels: %lld; %s", (long long)mc->out_channels,
                       xattn ? "at least in_channels (the prediction is the first in_channels)"
                             : "only pixart_sigma's output differs from its input (0)");
    if (mc->ffn_dim < 0 || mc->ffn_dim > (1 << 20) ||
        (mc->ffn_dim && !xattn && !model_lumina2(mc) && !model_ernie(mc) && !model_ideogram(mc) && !model_omnigen(mc) &&
         !model_krea2(mc) && !model_minimax_h3(mc) && !model_cosmos3(mc)))
        return st_fail(ST_ERR_INVALID, "ffn_dim: %lld; the feed-forward of wan (0: 4 hidden_size), lumina2, z_image "
                       "and ernie is 1 to 2^20 wide (other families 0)", (long long)mc->ffn_dim);
    if (mc->single_depth < 0 || ((!mmdit || sd3 || qwen || hv15) && !flux3 && mc->single_depth) ||
        (flux3 && mc->single_depth < 1))
        return st_fail(ST_ERR_INVALID, "num_single_layers: %lld (single-stream blocks exist in mmdit, flux, flux2, "
                       "auraflow and hunyuanvideo; flux3_image has at least 1)",
                       (long long)mc->single_depth);
    if (q21 && (mc->resolution / mc->patch) * (mc->resolution / mc->patch) % 4)
        return st_fail(ST_ERR_INVALID, "resolution %lld, patch_size %lld: Qwen-Image 2.1's image takes its encoder's "
                       "slots of 2 x 2 latent tokens each, so its %lld tokens must be a multiple of 4",
                       (long long)mc->resolution, (long long)mc->patch,
                       (long long)((mc->resolution / mc->patch) * (mc->resolution / mc->patch)));
    if (mc->resolution % mc->patch)
        return st_fail(ST_ERR_INVALID, "patch_size: %lld does not divide resolution %lld", (long long)mc->patch,
                       (long long)mc->resolution);
    const bool hv = !strncmp(mc->family, "hunyuanvideo", 12);
    if (model_cosmos(mc) ? (mc->adaln_lora < 1 || mc->adaln_lora > (1 << 16) || mc->patch_t != 1 ||
                            mc->hidden / mc->heads < 8 || mc->hidden / mc->heads > 128 || mc->out_channels)
                         : mc->adaln_lora != 0)
        return st_fail(ST_ERR_INVALID, "adaln_lora_dim %lld, patch_size_t %lld, head width %lld, out_channels %lld; %s",
                       (long long)mc->adaln_lora, (long long)mc->patch_t, (long long)(mc->hidden / mc->heads),
                       (long long)mc->out_channels, model_cosmos(mc) ? "cosmos2image takes 1 to 65536, 1, 8 to 128 "
                       "and 0 (= in_channels)" : "only cosmos2image has AdaLN-LoRA (0)");
    const bool ace = model_audio(mc);
    const bool lumina = model_lumina2(mc), ernie = model_ernie(mc), ideo = model_ideogram(mc), omni = model_omnigen(mc);
    const bool krea = model_krea2(mc), mh = model_minimax_h3(mc), c3 = model_cosmos3(mc);
    const int64_t axes_sum = mc->rope_axes[0] + mc->rope_axes[1] + mc->rope_axes[2], hd = mc->hidden / mc->heads;
    if (ideo && (mc->time_dim < 1 || mc->time_dim > (1 << 16) || hd % 2 || mc->rope_axes[0] < 0 ||
                 mc->rope_axes[1] < 0 || mc->rope_axes[2] < 0 || 3 * mc->rope_axes[1] > hd / 2 + 1 ||
                 3 * mc->rope_axes[2] > hd / 2 || mc->rope_axes[3]))
        return st_fail(ST_ERR_INVALID, "adaln_dim %lld, mrope_section (%lld, %lld, %lld), head width %lld; ideogram "
                       "takes 1 to 65536 and sections whose interleaved frequencies lie within the (even) head's "
                       "(3 sections[1] <= head/2 + 1, 3 sections[2] <= head/2)", (long long)mc->time_dim,
                       (long long)mc->rope_axes[0], (long long)mc->rope_axes[1], (long long)mc->rope_axes[2],
                       (long long)hd);
    if (lumina || ernie || ideo || omni || krea ? (mc->kv_heads < 1 || mc->heads % mc->kv_heads || mc->ffn_dim < 1 ||
                           mc->ffn_dim > 8 * mc->hidden ||
                  !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->text_dim < 1 || mc->pooled_dim ||
                  (!ideo && !omni && (axes_sum != hd || mc->rope_axes[0] % 2 || mc->rope_axes[1] % 2 ||
                             mc->rope_axes[2] % 2 || mc->rope_axes[3])) ||
                  mc->patch_t != 1 || mc->out_channels)
               : mc->norm_eps != 0 && !mh && !c3 && !model_unet(mc))
        return st_fail(ST_ERR_INVALID, "num_kv_heads %lld of %lld heads, feed-forward %lld wide, norm_eps %g, "
                       "cap_feat_dim %lld, rotary axes (%lld, %lld, %lld); %s", (long long)mc->kv_heads,
                       (long long)mc->heads, (long long)mc->ffn_dim, mc->norm_eps, (long long)mc->text_dim,
                       (long long)mc->rope_axes[0], (long long)mc->rope_axes[1], (long long)mc->rope_axes[2],
                       lumina || ernie || ideo || omni || krea
                           ? "lumina2, z_image, ernie, ideogram, omnigen and krea2 take a divisor of the heads, 1 to 8 "
                             "hidden_size, an eps in (0, 1), at least 1, and (but ideogram and omnigen) three even "
                             "axes summing to the head width (no pooled vector, out_channels 0)"
                           : "only lumina2, z_image, ernie, ideogram, omnigen, krea2, minimaxh3 and cosmos3 have "
                             "norm_eps (0)");
    const bool sana = model_sana(mc);
    if (sana ? (mc->cross_heads < 1 || mc->hidden % mc->cross_heads || mc->ffn_dim < 1 ||
                (mc->frames != 1 && !model_sanavideo(mc)) || mc->out_channels || mc->pooled_dim)
             : mc->cross_heads)
        return st_fail(ST_ERR_INVALID, "num_cross_attention_heads %lld of hidden_size %lld, GLUMBConv %lld wide, %lld "
                       "frames, out_channels %lld; %s", (long long)mc->cross_heads, (long long)mc->hidden,
                       (long long)mc->ffn_dim, (long long)mc->frames, (long long)mc->out_channels,
                       sana ? "sana and sanavideo take cross-attention heads dividing hidden_size, a feed-forward of "
                              "at least 1, out_channels 0 (= in_channels), and sana images (1 frame)"
                            : "only sana and sanavideo have them (0)");
    const int64_t c3hd = mc->head_dim;
    if (c3 ? (mc->kv_heads < 1 || mc->heads % mc->kv_heads || c3hd < 2 || c3hd > 1024 || c3hd % 2 || mc->ffn_dim < 1 ||
              mc->ffn_dim > (1 << 20) || !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->text_dim != 1 ||
              mc->text_vocab >= (1 << 24) || mc->rope_axes[0] < 0 || mc->rope_axes[1] < 0 || mc->rope_axes[2] < 0 ||
              3 * mc->rope_axes[1] > c3hd / 2 + 1 || 3 * mc->rope_axes[2] > c3hd / 2 || mc->rope_axes[3] ||
              mc->audio_channels < 0 || mc->audio_channels > (1 << 16) || mc->action_dim < 0 ||
              mc->action_dim > (1 << 16) || mc->action_domains < (mc->action_dim ? 1 : 0) ||
              mc->action_domains > (1 << 16) || mc->patch_t != 1 || mc->out_channels || mc->pooled_dim ||
              mc->guidance_embeds)
           : (mc->action_dim || mc->action_domains))
        return st_fail(ST_ERR_INVALID, "num_key_value_heads %lld of %lld heads, head_dim %lld, intermediate_size %lld, "
                       "rms_norm_eps %g, text_dim %lld, vocab_size %lld, rope_axes_dim (%lld, %lld, %lld), sound_dim "
                       "%lld, action_dim %lld over %lld domains; %s", (long long)mc->kv_heads, (long long)mc->heads,
                       (long long)c3hd, (long long)mc->ffn_dim, mc->norm_eps, (long long)mc->text_dim,
                       (long long)mc->text_vocab, (long long)mc->rope_axes[0], (long long)mc->rope_axes[1],
                       (long long)mc->rope_axes[2], (long long)mc->audio_channels, (long long)mc->action_dim,
                       (long long)mc->action_domains,
                       c3 ? "cosmos3 takes a divisor of the heads, an even head width of 2 to 1024, 1 to 2^20, an eps "
                            "in (0, 1), token ids (text_dim 1) below 2^24, sections whose interleaved frequencies lie "
                            "within the head (3 sections[1] <= head/2 + 1, 3 sections[2] <= head/2), and heads of at "
                            "most 65536 (an action head over at least 1 domain)"
                          : "only cosmos3 has action heads (0)");
    const int64_t mh_rot = mc->rope_axes[0] + mc->rope_axes[1] + mc->rope_axes[2];
    if (mh ? (mc->head_dim < 2 || mc->head_dim > 1024 || mc->head_dim % 2 || mh_rot < 6 || mh_rot > mc->head_dim ||
              mc->rope_axes[0] % 2 || mc->rope_axes[1] != mc->rope_axes[0] || mc->rope_axes[2] != mc->rope_axes[0] ||
              mc->rope_axes[3] || mc->time_channels < 2 || mc->time_channels % 2 || mc->time_channels > 65536 ||
              mc->time_hidden < 1 || mc->time_hidden > (1 << 20) || mc->time_dim < 1 || mc->time_dim > (1 << 20) ||
              mc->ffn_dim < 1 || mc->audio_channels < 1 || mc->audio_channels > (1 << 16) ||
              !(mc->norm_eps > 0 && mc->norm_eps < 1) || mc->patch_t != 1 || mc->out_channels || mc->pooled_dim ||
              mc->guidance_embeds)
           : ((mc->head_dim && !c3) || mc->time_hidden))
        return st_fail(ST_ERR_INVALID, "attention_head_dim %lld, rotary pairs (%lld, %lld, %lld), freq_dim %lld, "
                       "time_embed_hidden_dim %lld, time_embed_dim %lld, ffn_dim %lld, audio_in_channels %lld, "
                       "norm_eps %g, patch_size_t %lld; %s", (long long)mc->head_dim, (long long)mc->rope_axes[0],
                       (long long)mc->rope_axes[1], (long long)mc->rope_axes[2], (long long)mc->time_channels,
                       (long long)mc->time_hidden, (long long)mc->time_dim, (long long)mc->ffn_dim,
                       (long long)mc->audio_channels, mc->norm_eps, (long long)mc->patch_t,
                       mh ? "minimaxh3 takes an even head width of 2 to 1024 holding its three equal even rotary "
                            "axes (2 rope_freq_dim each), even sinusoids of 2 to 65536, widths of 1 to 2^20, 1 to "
                            "65536 audio channels, an eps in (0, 1) and 1 (no pooled vector, no guidance, "
                            "out_channels 0)"
                          : "only minimaxh3 has them (0)");
    const int64_t th = mc->text_layers ? mc->text_dim / mc->text_layers : 0; /* krea2's text_hidden_dim */
    if (krea ? (mc->text_layers < 1 || mc->text_layers > 1024 || mc->text_dim % mc->text_layers || mc->text_heads < 1 ||
                th % mc->text_heads || mc->text_kv_heads < 1 || mc->text_heads % mc->text_kv_heads ||
                mc->text_ffn < 1 || mc->text_ffn > 8 * th || mc->text_blocks < 1 || mc->text_blocks > 64 ||
                mc->refiner_depth < 1 || mc->refiner_depth > MODEL_REFINER_MAX)
             : (mc->text_layers || mc->text_heads || mc->text_kv_heads || mc->text_ffn))
        return st_fail(ST_ERR_INVALID, "num_text_layers %lld (text_dim %lld), text_num_attention_heads %lld, "
                       "text_num_key_value_heads %lld, text_intermediate_size %lld, %lld layerwise and %lld refiner "
                       "text blocks; %s", (long long)mc->text_layers, (long long)mc->text_dim,
                       (long long)mc->text_heads, (long long)mc->text_kv_heads, (long long)mc->text_ffn,
                       (long long)mc->text_blocks, (long long)mc->refiner_depth,
                       krea ? "krea2 takes 1 to 1024 layers dividing text_dim, heads dividing their width and divided "
                              "by the key-value heads, a feed-forward of 1 to 8 widths, 1 to 64 layerwise and 1 to 8 "
                              "refiner blocks"
                            : "only krea2 has a text fusion (0)");
    bool factors = true;
    for (int64_t i = 0; omni && i < hd / 2 && i < MODEL_ROPE_FACTORS; i++)
        factors &= mc->rope_short[i] > 0 && mc->rope_short[i] < 1e6f && mc->rope_long[i] > 0 && mc->rope_long[i] < 1e6f;
    if (omni ? (mc->text_dim != 1 || hd % 2 || hd > 2 * MODEL_ROPE_FACTORS || !factors || mc->rope_original < 1 ||
                mc->rope_max < 1 || mc->rope_original > (1 << 30) || mc->rope_max > (1 << 30) || mc->text_pad < 0 ||
                mc->text_vocab >= (1 << 24) || mc->resolution / mc->patch > mc->pos_embed_max ||
                mc->sample_size < mc->patch)
             : (mc->rope_original || mc->rope_max || mc->text_pad))
        return st_fail(ST_ERR_INVALID, "text_dim %lld, head width %lld, original_max_position_embeddings %lld, "
                       "max_position_embeddings %lld, pad_token_id %lld, vocab_size %lld, pos_embed_max_size %lld; %s",
                       (long long)mc->text_dim, (long long)hd, (long long)mc->rope_original, (long long)mc->rope_max,
                       (long long)mc->text_pad, (long long)mc->text_vocab, (long long)mc->pos_embed_max,
                       omni ? "omnigen takes token ids (text_dim 1), an even head width of at most 128 with positive "
                              "rotary factors, 1 to 2^30 positions, a pad token of at least 0, fewer than 2^24 ids "
                              "(they travel as floats), and a table covering the patch grid"
                            : "only omnigen has them (0)");
    if (ace ? (mc->kv_heads < 1 || mc->heads % mc->kv_heads || mc->window < 0 || mc->cond_channels < 0 ||
               mc->cond_channels > (1 << 16) || mc->patch != 1 || mc->resolution != 1 || mc->out_channels)
            : ((mc->kv_heads && !lumina && !ernie && !ideo && !omni && !krea && !c3) || mc->window))
        return st_fail(ST_ERR_INVALID, "num_key_value_heads %lld, sliding_window %lld, context channels %lld, patch_size "
                       "%lld, resolution %lld, out_channels %lld; %s", (long long)mc->kv_heads, (long long)mc->window,
                       (long long)mc->cond_channels, (long long)mc->patch, (long long)mc->resolution,
                       (long long)mc->out_channels, ace ? "ace_step takes a divisor of num_heads, a window of at least "
                       "0, 0 to 65536 context channels, and audio's 1, 1 and 0 (= in_channels)"
                       : "only ace_step has them (0)");
    const bool wan = !strcmp(mc->family, "wan");
    if (wan ? (mc->vace_count < 0 || mc->vace_every < 0 || mc->vace_channels < 0 || mc->vace_channels > (1 << 16) ||
               (mc->vace_count && (mc->vace_every < 1 || (mc->vace_count - 1) * mc->vace_every >= mc->depth ||
                                   mc->vace_channels < 1)))
            : (mc->vace_count || mc->vace_every || mc->vace_channels || mc->anyflow))
        return st_fail(ST_ERR_INVALID, "vace_layers: %lld blocks every %lld, %lld control channels; %s",
                       (long long)mc->vace_count, (long long)mc->vace_every, (long long)mc->vace_channels,
                       wan ? "wan's VACE hints land on main blocks 0, k, 2k, ... inside its depth, with 1 to 65536 "
                       "control channels" : "only wan's VACE flavours have a control branch (0), and only wan reads "
                       "AnyFlow's transformer");
    const bool ltx2 = model_ltx2(mc);
    if (ltx2 ? (mc->audio_heads < 1 || mc->audio_hidden < 1 || mc->audio_hidden > mc->hidden ||
                mc->audio_hidden % (2 * mc->audio_heads) || mc->audio_hidden % (2 * mc->heads) ||
                mc->audio_channels < 1 || mc->audio_channels > (1 << 16) || mc->text_dim % 2 || mc->patch != 1 ||
                mc->patch_t != 1 || (mc->hidden / mc->heads) % 2 || mc->out_channels || mc->ffn_dim)
             : (mc->audio_heads || mc->audio_hidden || (mc->audio_channels && !mh && !c3)))
        return st_fail(ST_ERR_INVALID, "audio width %lld, audio heads %lld, audio channels %lld, caption width %lld, "
                       "patch %lld x %lld; %s", (long long)mc->audio_hidden, (long long)mc->audio_heads,
                       (long long)mc->audio_channels, (long long)mc->text_dim, (long long)mc->patch,
                       (long long)mc->patch_t, ltx2 ? "ltxvideo2 takes an audio width of at most hidden_size that "
                       "2 x each stream's heads divide (its cross-modal rotations split it by both), 1 to 65536 audio "
                       "channels, two connector states per token (an even width), 1 x 1 patches and even head widths"
                       : "only ltxvideo2 has an audio stream (0)");
    const bool k5 = model_kandinsky5(mc);
    const int64_t k5hd = mc->hidden / mc->heads;
    if (k5 ? (mc->text_blocks < 1 || mc->text_blocks > 4096 || mc->time_dim < 1 || mc->time_dim > (1 << 16) ||
              mc->pooled_dim < 1 || mc->patch_t != 1 || k5hd % 16 || k5hd > 256 || mc->out_channels ||
              (mc->cond_channels && mc->cond_channels != mc->channels + 1))
           : ((mc->text_blocks && !model_krea2(mc)) || (mc->time_dim && !model_ideogram(mc) && !mh)))
        return st_fail(ST_ERR_INVALID, "num_text_blocks %lld, time_dim %lld, in_text_dim2 %lld, patch_size_t %lld, head "
                       "width %lld, out_visual_dim %lld, visual_cond channels %lld; %s", (long long)mc->text_blocks,
                       (long long)mc->time_dim, (long long)mc->pooled_dim, (long long)mc->patch_t, (long long)k5hd,
                       (long long)mc->out_channels, (long long)mc->cond_channels,
                       k5 ? "kandinsky5 takes 1 to 4096, 1 to 65536, at least 1, 1, a multiple of 16 up to 256 (axes "
                       "hd / 4, 3 hd / 8, 3 hd / 8), 0 (= in_visual_dim) and 0 or in_visual_dim + 1"
                          : "only kandinsky5 has them (0, 0)");
    const bool anima = model_anima(mc);
    if (anima ? mc->source_len < 1 || mc->source_dim < 1 || mc->text_min_len < 0 || mc->refiner_depth < 1 ||
                    mc->refiner_depth > MODEL_REFINER_MAX || mc->text_dim % mc->heads || mc->text_dim / mc->heads % 2
              : mc->source_len || mc->source_dim || mc->text_min_len)
        return st_fail(ST_ERR_INVALID, "the text conditioner's Qwen tokens %lld, source_dim %lld, min_sequence_length "
                       "%lld, blocks %lld, width %lld over %lld heads; %s", (long long)mc->source_len,
                       (long long)mc->source_dim, (long long)mc->text_min_len, (long long)mc->refiner_depth,
                       (long long)mc->text_dim, (long long)mc->heads, anima ? "anima takes at least 1, 1, 0, 1 to "
                       "8 blocks, and an even head width" : "only anima has one (0, 0, 0)");
    const st_status animate = check_animate(mc);
    if (animate) return animate;
    const st_status unet = check_unet(mc);
    if (unet) return unet;
    const bool anim = model_wan_animate(mc); /* its image_dim and condition channels are its own */
    if ((hv15 && (mc->text2_len < 1 || mc->text2_dim < 1 || mc->image_dim < 1 || mc->cond_channels < 0)) ||
        (!hv15 && (mc->text2_len || mc->text2_dim || (mc->image_dim && !anim && !model_cascade(mc)) ||
                   (mc->cond_channels && !ace && !k5 && !anim))))
        return st_fail(ST_ERR_INVALID, "text_embed_2_dim %lld, ByT5 tokens %lld, image_embed_dim %lld, condition "
                       "channels %lld; %s", (long long)mc->text2_dim, (long long)mc->text2_len, (long long)mc->image_dim,
                       (long long)mc->cond_channels, hv15 ? "hunyuanvideo15 takes at least 1 of the first three"
                                                          : "only hunyuanvideo15 has them (0)");
    const bool refines = hv || anima || lumina || mh; /* anima's text conditioner, lumina2's and minimaxh3's refiners
                                                         have blocks too */
    if (!model_krea2(mc) && /* its refiner blocks are checked with its text fusion */
        (mc->refiner_depth < (refines ? 1 : 0) || mc->refiner_depth > (refines ? MODEL_REFINER_MAX : 0)))
        return st_fail(ST_ERR_INVALID, "num_refiner_layers: %lld; %s %d", (long long)mc->refiner_depth,
                       refines ? "hunyuanvideo's token refiner, anima's text conditioner and lumina2's refiners have "
                                 "from 1 block to"
                               : "only hunyuanvideo has a token refiner (anima a text conditioner): blocks at most",
                       refines ? MODEL_REFINER_MAX : 0);
    if (mc->frames < 1 || mc->patch_t < 1 || mc->frames % mc->patch_t || (!model_video(mc) && !ace && mc->frames > 1))
        return st_fail(ST_ERR_INVALID, "num_frames: %lld latent frames, patch_size_t %lld; %s", (long long)mc->frames,
                       (long long)mc->patch_t, model_video(mc) || ace ? "the patch's frames must divide the latent's"
                                                                : "an image family takes 1 frame");
    return ST_OK;
}

/* SimpleTuner's resolution as a square image edge in pixels: `area` is megapixels, with its round values read
 * as SimpleTuner maps them (1.0 -> 1024 x 1024); `pixel` and `pixel_area` are the edge itself. */
static double image_edge(double resolution, const char *type)
{
    if (strcmp(type, "area")) return resolution;
    static const double mapped[][2] = {{0.25, 512}, {0.5, 768}, {1.0, 1024}, {2.0, 1536}, {4.0, 2048}};
    for (size_t i = 0; i < sizeof mapped / sizeof *mapped; i++)
        if (fabs(resolution - mapped[i][0]) < 0.05) return mapped[i][1];
    return sqrt(resolution * 1e6);
}

/* A folder with config.json, itself or in transformer/ (a folder without one is the weight loader's to refuse). */
static bool has_diffusers_config(const char *dir)
{
    char p[4096];
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) return false;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (!access(p, R_OK)) return true;
    snprintf(p, sizeof p, "%s/transformer/config.json", dir);
    return !access(p, R_OK);
}

st_status model_config_from(const config *cfg, model_config *mc)
{
    /* model_family alone picks its preset: a SimpleTuner family's flavour's (its real sizes), segtrain's own
     * families' tiny one; both given must agree */
    const char *family = config_string(cfg, "model_family"), *preset = config_string(cfg, "model_preset");
    const char *flavour = config_string(cfg, "model_flavour");
    st_status st = model_family_check(family, flavour);
    if (st) return st;
    char own[32];
    if (config_is_set(cfg, "model_family") && !config_is_set(cfg, "model_preset") &&
        !(preset = model_family_preset(family, flavour, own, sizeof own)))
        snprintf(own, sizeof own, "%s-tiny", family), preset = own;
    st = model_preset(preset, mc);
    if (st) return st;
    if (config_is_set(cfg, "model_family") && strcmp(family, mc->family) && !model_family_builds(family, mc->family))
        return st_fail(ST_ERR_INVALID, "model_preset: %s belongs to the %s family, but model_family is %s", preset, mc->family,
                       family);
    /* a diffusers folder of weights brings its own architecture; the keys below still override it */
    const char *weights = config_string(cfg, "pretrained_model_name_or_path");
    if (*weights && model_reads_diffusers(mc) && has_diffusers_config(weights) && (st = model_read_diffusers(weights, mc))) {
        char why[1024];
        snprintf(why, sizeof why, "%s", st_error());
        return st_fail(st, "pretrained_model_name_or_path: %s", why);
    }
    const struct {
        const char *key;
        int64_t *field;
    } sizes[] = {{"depth", &mc->depth},          {"hidden_size", &mc->hidden},   {"num_heads", &mc->heads},
                 {"patch_size", &mc->patch},     {"in_channels", &mc->channels}, {"vae_scale_factor", &mc->vae_scale},
                 {"num_classes", &mc->classes},  {"num_single_layers", &mc->single_depth},
                 {"tokenizer_max_length", &mc->text_len}, {"text_vocab_size", &mc->text_vocab},
                 {"joint_attention_dim", &mc->text_dim}, {"pooled_projection_dim", &mc->pooled_dim}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (config_int(cfg, sizes[i].key) > 0) *sizes[i].field = config_int(cfg, sizes[i].key); /* 0: the preset's */
    /* a video VAE keeps the first frame and one in every scale_t after it (HunyuanVideo's and Wan's 4, LTX's 8) */
    const int64_t frames = config_int(cfg, "num_frames"), scale_t = model_vae_scale_t(mc);
    if (model_audio(mc) && config_is_set(cfg, "num_frames")) mc->frames = frames; /* audio: the clip's latent frames; else the preset's */
    if (model_minimax_h3(mc)) { /* its VAE: chunks of 17 frames to 5 latent ones, 17 k + 5 frames to 5 k + 2 */
        if (frames > 1 && frames % 17 != 5)
            return st_fail(ST_ERR_INVALID, "num_frames: %lld; MiniMax-H3 takes 1 or 17 k + 5 frames (its VAE encodes "
                           "17 frames a chunk into 5 latent ones, 17 k + 5 into 5 k + 2)", (long long)frames);
        mc->frames = frames > 1 ? (frames - 5) / 17 * 5 + 2 : 1;
    } else if (frames > 1 && !model_audio(mc) && (!model_video(mc) || (frames - 1) % scale_t))
        return st_fail(ST_ERR_INVALID, "num_frames: %lld; %s %lld k + 1 frames (its VAE keeps the first and every "
                       "%lldth after it)", (long long)frames, model_video(mc) ? "this video family takes" :
                       "an image family takes 1, not", (long long)scale_t, (long long)scale_t);
    /* a preset's own frames are the tests'; Wan Animate keeps its preset's unless told (it takes at least 2) */
    if (model_video(mc) && !model_minimax_h3(mc) && (!model_wan_animate(mc) || config_is_set(cfg, "num_frames")))
        mc->frames = 1 + (frames - 1) / scale_t;
    const double resolution = config_float(cfg, "resolution");
    if (resolution > 0 && !model_audio(mc)) { /* audio has no edge: SimpleTuner's audio path ignores it too */
        const double edge = image_edge(resolution, config_string(cfg, "resolution_type"));
        const int64_t patches = llround(edge / (double)(mc->vae_scale * mc->patch));
        mc->resolution = (patches > 1 ? patches : 1) * mc->patch;
    }
    /* the axes follow a head width that the keys above changed; a preset's or a folder's own stand otherwise */
    const int64_t *ax = mc->rope_axes;
    if (model_dual_stream(mc) && strcmp(mc->family, "sd3") && ax[0] + ax[1] + ax[2] + ax[3] != mc->hidden / mc->heads)
        rope_axes_for(mc);
    mc->guidance = config_float(cfg, "flux_guidance_value");
    mc->mechanism = strcmp(config_string(cfg, "attention_mechanism"), "math") ? ATTN_FLASH : ATTN_MATH;
    if (!strcmp(config_string(cfg, "model_type"), "lora")) {
        const char *target = config_string(cfg, "lora_target");
        if (strcmp(target, "attention") && strcmp(target, "mlp") && strcmp(target, "attention+mlp") &&
            strcmp(target, "all"))
            return st_fail(ST_ERR_INVALID, "lora_target: \"%s\" is not one of attention, mlp, attention+mlp, all",
                           target);
        mc->lora_rank = config_int(cfg, "lora_rank");
        mc->lora_alpha = config_float(cfg, "lora_alpha") > 0 ? config_float(cfg, "lora_alpha") : (double)mc->lora_rank;
        mc->lora_attention = strcmp(target, "mlp") != 0;
        mc->lora_mlp = strcmp(target, "attention") != 0;
    }
    const char *precision = config_string(cfg, "mixed_precision");
    if (!strcmp(precision, "fp16") || !strcmp(precision, "fp8"))
        return st_fail(ST_ERR_UNSUPPORTED, "mixed_precision %s: segtrain holds a frozen base in bf16 (mixed_precision "
                       "bf16) or in float (no); %s weights are not built", precision, precision);
    mc->bf16_base = !strcmp(precision, "bf16") && mc->lora_rank > 0;
    if (!strcmp(config_string(cfg, "distillation_method"), "anyflow")) {
        /* the delta embedder's gate and input are the distillation's, as SimpleTuner's
         * enable_flowmap_time_conditioning sets them */
        if (!mc->anyflow)
            return st_fail(ST_ERR_UNSUPPORTED, "distillation_method anyflow: %s has no delta embedder; it needs "
                           "AnyFlow's transformer (AnyFlowTransformer3DModel: a wan-anyflow preset, or its folder). "
                           "SimpleTuner copies time_embedder into a new delta embedder on a plain Wan; segtrain "
                           "does not", *mc->preset ? mc->preset : mc->family);
        mc->anyflow_gate = config_float(cfg, "distillation_config.gate_value");
        mc->anyflow_interval = !strcmp(config_string(cfg, "distillation_config.deltatime_type"), "t-r");
    }
    return model_config_check(mc);
}
