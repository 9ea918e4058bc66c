/* The presets: each family's published sizes and its -tiny ones (model_preset). */
#include <stdio.h>
#include <string.h>

#include "models/core/internal.h"
#include "segtrain/model.h"

static bool model_cascade(const model_config *mc) { return !strcmp(mc->family, "stable_cascade"); }
static bool model_unet(const model_config *mc)
{
    return !strcmp(mc->family, "sd1x") || !strcmp(mc->family, "sdxl") || !strcmp(mc->family, "kolors");
}

/* The dual-stream presets' text sides: a stand-in encoder's widths for segtrain's own, T5-XXL's 4096 and CLIP-L's
 * pooled 768 for Flux; Flux's rotary axes are (16, 56, 56) of its 128-wide heads (model_rope_axes gives others).
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
void model_rope_axes(model_config *mc)
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
        model_rope_axes(out);
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
