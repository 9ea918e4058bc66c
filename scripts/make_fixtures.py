#!/usr/bin/env python3
"""Parity fixtures: diffusers' own transformer classes at a tiny size, with random weights (docs/FIXTURES.md).

  make_fixtures.py [--out tests/fixtures] [--verify] [names...]     (default: every fixture, in order)

Per fixture it writes <out>/<name>/: the model's own save_pretrained folder (config.json and float32 weights,
sharded for flux-schnell) and parity.safetensors (inputs, prediction, loss and d loss / d parameter for every
parameter), computed in float64 from the float32 weights and inputs that are stored. --verify writes nothing: it
reloads each folder with from_pretrained and checks that a fresh float64 forward reproduces the stored `pred`.
Every fixture with a spatial latent also gets parity_hw.safetensors: the same weights at another batch (HW_B) and a
non-square latent (the fixture's size_hw), its metadata recording B, H, W (and F for video).

A fixture of a class SimpleTuner holds itself (boogu-image, mageflow, wan-s2v: no diffusers class) imports it from the checkout that
--simpletuner names, at SIMPLETUNER_COMMIT, which its metadata records.

Needs the reference venv (scripts/reference-venv.sh); `make test` never runs this.
"""
import argparse
import functools
import itertools
import json
import math
import os
import platform
import re
import sys

import numpy
import torch
import diffusers
from safetensors.torch import load_file, safe_open

# B, H and W are set per file by use_size (parity.safetensors: SQUARE_B and the fixture's size; parity_hw.safetensors:
# HW_B and its size_hw): the make and run functions read them when called. The constructor kwargs below read the
# defaults once, at import.
B, C, H, W = 2, 4, 8, 8   # latent batch, channels, height, width (image layout)
SQUARE_B, HW_B = B, 3     # the batches of parity.safetensors and parity_hw.safetensors
H_SQUARE, W_SQUARE = H, W
HW_SIZE = (8, 12)         # parity_hw.safetensors' (H, W) but where a fixture says otherwise: not multiples
L = 6                     # text tokens
JOINT, POOLED = 24, 20    # joint_attention_dim (text-encoder width), pooled_projection_dim
SIGMA = [0.25, 0.6875, 0.4375]   # the first B; 1000 * sigma (250, 687.5, 437.5) is exact in float32 and float64
GUIDANCE = [3.5, 4.0, 4.5]       # the first B; given to the model as is; Flux multiplies by 1000 itself (exact too)
TEXT_LENS = [6, 4, 5]            # the first B: each caption's tokens, then padding


# The float64 reference changes some diffusers classes where they compute in float32 whatever the model's dtype (a
# time sinusoid, rotary angles): each such change is an @exact function, applied only while EXACT. bf16_yardstick.py
# clears it to run every class as diffusers ships it.
EXACT = True


def exact(change):
    """change(...) applied while EXACT, a no-op otherwise."""
    @functools.wraps(change)
    def apply(*args):
        if EXACT:
            change(*args)
    return apply


def use_size(b, h, w):
    global B, H, W
    B, H, W = b, h, w


def text_mask(lens=TEXT_LENS, n=L):
    """(B, n) float64, 1 = token, tokens first: sample i has lens[i] tokens."""
    return torch.tensor([[1.0] * k + [0.0] * (n - k) for k in lens[:B]], dtype=torch.float64)


# ------------------------------------------------------------------ packing (FluxPipeline, diffusers 0.42.1)
# Written from FluxPipeline._pack_latents / _unpack_latents / _prepare_latent_image_ids: the pipeline's module
# imports transformers, which the reference venv does not need otherwise.
def flux_pack(x):
    b, c, h, w = x.shape
    return x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2), c * 4)


def flux_unpack(x, h, w):
    b, _, ch = x.shape
    return x.view(b, h // 2, w // 2, ch // 4, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, ch // 4, h, w)


def flux_img_ids(h2, w2):
    ids = torch.zeros(h2, w2, 3, dtype=torch.float64)
    ids[..., 1] += torch.arange(h2)[:, None]
    ids[..., 2] += torch.arange(w2)[None, :]
    return ids.reshape(h2 * w2, 3)


# ------------------------------------------------------------------ families
# Each family: make(gen) -> the stored inputs besides latents/sigma/target (float64 tensors, rounded to float32
# later), and run(model, t) -> pred in image layout from the float64 tensors t. `passed` documents the call.

def randn(gen, *shape, std=1.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float64) * std


def flux_make(guidance):
    def make(gen):
        t = {"encoder_hidden_states": randn(gen, B, L, JOINT), "pooled_projections": randn(gen, B, POOLED),
             "txt_ids": torch.zeros(L, 3, dtype=torch.float64), "img_ids": flux_img_ids(H // 2, W // 2)}
        if guidance:
            t["guidance"] = torch.tensor(GUIDANCE[:B], dtype=torch.float64)
        return t
    return make


def flux_run(model, t):
    out = model(hidden_states=flux_pack(t["latents"]), encoder_hidden_states=t["encoder_hidden_states"],
                pooled_projections=t["pooled_projections"], timestep=t["sigma"], img_ids=t["img_ids"],
                txt_ids=t["txt_ids"], guidance=t.get("guidance"), return_dict=False)[0]
    return flux_unpack(out, H, W)


FLUX_PASSED = ("hidden_states = FluxPipeline._pack_latents(latents) (B, H/2*W/2, 4C); timestep = sigma (the model "
               "multiplies by 1000); guidance = guidance (ditto, dev only); img_ids = "
               "_prepare_latent_image_ids(H/2, W/2) (T, 3) = (0, row, col); txt_ids = zeros (L, 3); "
               "pred = _unpack_latents(output)")


def sd3_make(gen):
    return {"encoder_hidden_states": randn(gen, B, L, JOINT), "pooled_projections": randn(gen, B, POOLED)}


def sd3_run(model, t):
    timestep = (t["sigma"].float() * 1000).double()   # SimpleTuner: sigma * 1000 in float32
    return model(hidden_states=t["latents"], encoder_hidden_states=t["encoder_hidden_states"],
                 pooled_projections=t["pooled_projections"], timestep=timestep, return_dict=False)[0]


SD3_PASSED = ("hidden_states = latents (B, C, H, W) as is; timestep = float32(sigma * 1000); "
              "encoder_hidden_states, pooled_projections as stored; pred = output as is")

def auraflow_make(gen):
    return {"encoder_hidden_states": randn(gen, B, L, JOINT)}


def auraflow_run(model, t):
    return model(hidden_states=t["latents"], encoder_hidden_states=t["encoder_hidden_states"], timestep=t["sigma"],
                 return_dict=False)[0]


AURAFLOW_PASSED = ("hidden_states = latents (B, C, H, W) as is; timestep = sigma (AuraFlowPipeline passes t / 1000; "
                   "the model's Timesteps has scale=1000); encoder_hidden_states as stored; pred = output as is")

def chroma_make(gen):
    # ChromaPipeline._get_t5_prompt_embeds: 1 for the real tokens and the first padding token, 0 after it.
    # Sample 0: 5 real tokens of 6 (mask all ones); sample 1: 3 real tokens (the 4th kept, 2 masked); sample 2 (B = 3):
    # 4 real tokens (the 5th kept, 1 masked).
    return {"encoder_hidden_states": randn(gen, B, L, JOINT), "attention_mask": text_mask(),
            "txt_ids": torch.zeros(L, 3, dtype=torch.float64), "img_ids": flux_img_ids(H // 2, W // 2)}


def chroma_run(model, t):
    # ChromaPipeline._prepare_attention_mask: cat([text mask (the prompt dtype), ones(B, T, bool)]) is float, and
    # each block uses mask[:, None, None, :] * mask[:, None, :, None] as SDPA's attn_mask: an ADDITIVE 0/1 bias.
    mask = t["attention_mask"]
    mask = torch.cat([mask, torch.ones(B, (H // 2) * (W // 2), dtype=torch.bool)], dim=1)
    out = model(hidden_states=flux_pack(t["latents"]), encoder_hidden_states=t["encoder_hidden_states"],
                timestep=t["sigma"], img_ids=t["img_ids"], txt_ids=t["txt_ids"], attention_mask=mask,
                return_dict=False)[0]
    return flux_unpack(out, H, W)


CHROMA_PASSED = ("hidden_states = _pack_latents(latents) (B, H/2*W/2, 4C); timestep = sigma (ChromaPipeline passes "
                 "t / 1000; the model multiplies by 1000); img_ids, txt_ids as Flux; attention_mask = "
                 "cat([attention_mask, ones(B, T)], 1) in float64 (the pipeline's _prepare_attention_mask), which "
                 "every block turns into the additive bias m[:, None, None, :] * m[:, None, :, None]; "
                 "pred = _unpack_latents(output)")


def qwen_make(gen):
    # QwenImagePipeline passes the text encoder's mask (1 = token, 0 = padding) unless it is all ones (then None).
    return {"encoder_hidden_states": randn(gen, B, L, JOINT),
            "encoder_hidden_states_mask": text_mask()}


def qwen_run(model, t):
    out = model(hidden_states=flux_pack(t["latents"]), encoder_hidden_states=t["encoder_hidden_states"],
                encoder_hidden_states_mask=t["encoder_hidden_states_mask"], timestep=t["sigma"],
                img_shapes=[[(1, H // 2, W // 2)]] * B, return_dict=False)[0]
    return flux_unpack(out, H, W)


QWEN_PASSED = ("hidden_states = QwenImagePipeline._pack_latents(latents) (B, H/2*W/2, 4C); timestep = sigma (the "
               "pipeline passes t / 1000; time_proj has scale=1000); encoder_hidden_states_mask as stored (the model "
               "makes it bool: keys of padding tokens are masked, image keys never); img_shapes = [[(1, H/2, W/2)]] * B; "
               "guidance = None; pred = _unpack_latents(output) (its frame axis of 1 dropped)")

def flux2_make(gen):
    # Flux2Pipeline._prepare_text_ids: (t, h, w, l) = (0, 0, 0, k); _prepare_latent_ids: (0, row, col, 0), row-major.
    img = torch.zeros(H // 2, W // 2, 4, dtype=torch.float64)
    img[..., 1] += torch.arange(H // 2)[:, None]
    img[..., 2] += torch.arange(W // 2)[None, :]
    txt = torch.zeros(L, 4, dtype=torch.float64)
    txt[:, 3] = torch.arange(L)
    return {"encoder_hidden_states": randn(gen, B, L, JOINT),
            "guidance": torch.tensor(GUIDANCE[:B], dtype=torch.float64), "txt_ids": txt, "img_ids": img.reshape(-1, 4)}


def flux2_run(model, t):
    # Flux2Pipeline._patchify_latents then _pack_latents is Flux.1's _pack_latents permutation (channels (c, di, dj),
    # tokens row-major), and _unpack_latents_with_ids then _unpatchify_latents its inverse (row-major ids).
    out = model(hidden_states=flux_pack(t["latents"]), encoder_hidden_states=t["encoder_hidden_states"],
                timestep=t["sigma"], guidance=t["guidance"], img_ids=t["img_ids"], txt_ids=t["txt_ids"],
                return_dict=False)[0]
    return flux_unpack(out, H, W)


FLUX2_PASSED = ("hidden_states = _pack_latents(_patchify_latents(latents)) (B, H/2*W/2, 4C), i.e. Flux.1's packing; "
                "timestep = sigma and guidance = guidance (the model multiplies both by 1000); img_ids (T, 4) = "
                "(0, row, col, 0); txt_ids (L, 4) = (0, 0, 0, k); pred = _unpatchify_latents(_unpack_latents_with_ids("
                "output, img_ids))")

def flux3_make(gen):
    # Flux.2's ids (t, h, w, l), as Flux2Pipeline makes them: diffusers 0.42.1 has no Flux.3 pipeline
    t = flux2_make(gen)
    return {k: t[k] for k in ("encoder_hidden_states", "txt_ids", "img_ids")}


def flux3_run(model, t):
    # As the class documents it and Flux2Pipeline calls Flux.2: Flux.1's packing, timestep = sigma (the class scales
    # it by 1000 itself), no reference image; the prediction the output unpacked.
    out = model(hidden_states=flux_pack(t["latents"]), encoder_hidden_states=t["encoder_hidden_states"],
                timestep=t["sigma"], img_ids=t["img_ids"], txt_ids=t["txt_ids"], return_dict=False)[0]
    return flux_unpack(out, H, W)


FLUX3_PASSED = ("hidden_states = Flux.1's packing of latents (B, H/2*W/2, 4C); encoder_hidden_states (B, L, 24) "
                "N(0, 1); timestep = sigma (the class multiplies by 1000); img_ids (T, 4) = (0, row, col, 0), txt_ids "
                "(L, 4) = (0, 0, 0, k), Flux2Pipeline's; no image_cond_hidden_states; pred = the output unpacked")
FLUX3_ZERO = {r"(mode_blocks\.image_cond|(early|single)_stream_modulations\.image_cond|x_embedders\.image_cond)\..*":
              "the reference image's mode (image to image): text to image has no reference image"}


@exact
def qwen21_exact(model):
    """QwenImage21TemporalTimesteps computes its sinusoid of 1000 t in float32, and QwenImage21Rope its angles in
    float32 (at construction): here both in float64, as segtrain takes them."""
    import diffusers.models.transformers.transformer_qwenimage21 as tq

    def sinusoid(self, timestep):
        half = self.timestep_dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float64) / half)
        args = (self.time_factor * timestep.to(torch.float64))[:, None] * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def rope_params(self, index, dim, theta=10000):
        inv = 1.0 / torch.pow(theta, torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        freqs = torch.outer(index.to(torch.float64), inv)
        return torch.polar(torch.ones_like(freqs), freqs)
    tq.QwenImage21TemporalTimesteps.forward = sinusoid
    tq.QwenImage21Rope.rope_params = rope_params
    pe = model.pos_embed
    pos, neg = torch.arange(8192), torch.arange(1024).flip(0) * -1 - 1
    pe.freqs = [torch.cat([pe.rope_params(pos, dim, pe.theta), pe.rope_params(neg, dim, pe.theta)])
                for dim in pe.axes_dim]


def qwen21_run(model, t):
    # As SimpleTuner calls Qwen-Image (its time t = sigma, Flux's 2 x 2 packing, the text with its mask) in the class's
    # text-to-image layout: img_shapes [(1, H/2, W/2)], img_mask the target's T/4 slots after the L text slots;
    # causal_condition (the class default); the prediction the image rows of the output, unpacked.
    qwen21_exact(model)
    lat = t["latents"]
    b, _, h, w = lat.shape
    n = t["encoder_hidden_states"].shape[1]
    slots = (h // 2) * (w // 2) // 4
    img_mask = torch.cat([torch.zeros(b, n, dtype=torch.bool), torch.ones(b, slots, dtype=torch.bool)], dim=1)
    out = model(hidden_states=flux_pack(lat), encoder_hidden_states=t["encoder_hidden_states"], timestep=t["sigma"],
                img_shapes=[[(1, h // 2, w // 2)]] * b, img_mask=img_mask,
                encoder_hidden_states_mask=t["encoder_attention_mask"].bool(), return_dict=False)[0]
    return flux_unpack(out[:, n:], h, w)


QWEN21_PASSED = ("hidden_states = Flux.1's packing of latents (B, H/2*W/2, 4C); encoder_hidden_states (B, L, 24) "
                 "N(0, 1), encoder_hidden_states_mask = bool([1 1 1 1 1 1], [1 1 1 1 0 0]); timestep = sigma; img_shapes = "
                 "[[(1, H/2, W/2)]] * B; img_mask = L text slots then (H/2 W/2) / 4 image slots; pred = the output's "
                 "image rows, unpacked")


def minimax_layout(n_text, frames, h, w):
    """SimpleTuner's packing.build_packed_sequence for [text | target video] (its video target mode: no keyframe,
    no audio rows): (t, h, w) positions in float64, modality tags (text 1, video 0), video and text row indices."""
    rows = (h // 2) * (w // 2)
    seq = n_text + frames * rows
    pos = torch.zeros(seq, 3, dtype=torch.float64)
    pos[:n_text, 0] = torch.arange(n_text, dtype=torch.float64)
    sqrt_area = numpy.sqrt(h * w)

    def grid(dim):
        ratio = dim / sqrt_area
        left = (1.0 - ratio) / 2.0
        return torch.from_numpy(numpy.linspace(left, left + ratio, dim // 2, endpoint=False) * 32)
    plane = torch.stack([g.reshape(-1) for g in torch.meshgrid(grid(h), grid(w), indexing="ij")], -1)
    spans = torch.tensor([5.0 / 3.0 * (1, 4, 4, 4, 4)[i % 5] for i in range(frames)], dtype=torch.float64)
    times = float(n_text) + torch.cat([torch.zeros(1, dtype=torch.float64), spans[:-1].cumsum(0)])
    video = torch.empty(frames, rows, 3, dtype=torch.float64)
    video[:, :, 0], video[:, :, 1:] = times[:, None], plane[None]
    pos[n_text:] = video.reshape(-1, 3)
    tags = torch.cat([torch.ones(n_text, dtype=torch.long), torch.zeros(frames * rows, dtype=torch.long)])
    return pos, tags, torch.arange(n_text, seq), torch.arange(n_text)


@exact
def minimax_exact(model):
    """MiniMaxH3RotaryPosEmbed takes its angles in float32: here in float64 from the float32 positions, as segtrain
    takes them."""
    import diffusers.models.transformers.transformer_minimax_h3 as tm
    theta = model.config.rope_theta

    def rope(self, position_ids):
        f = self.rope_freq_dim
        inv = 1.0 / theta ** (torch.arange(0, 2 * f, 2, dtype=torch.float64) / (2 * f))
        freqs = position_ids.to(torch.float32).to(torch.float64).unsqueeze(-1) * inv.view(1, 1, -1)
        freqs = torch.cat(freqs.unbind(dim=1), dim=-1)
        freqs = torch.cat((freqs, freqs), dim=-1)
        return freqs.cos(), freqs.sin()
    tm.MiniMaxH3RotaryPosEmbed.forward = rope


def minimax_run(model, t):
    # SimpleTuner's MiniMaxH3._model_predict_for_prepared_batch in its video target mode, a sample at a time (the class
    # shares one layout and one timestep across its batch): the caption cut to its tokens (SimpleTuner trims the
    # padding and keeps what remains from the live rows), timestep 1 - sigma (segtrain's float 1 - (1000 sigma) /
    # 1000), packing.py's [text | video] layout; pred = -(the video rows unpatchified): SimpleTuner's target is
    # x0 - noise.
    minimax_exact(model)
    lat = t["latents"]
    b, c, f, h, w = lat.shape
    preds = []
    for i in range(b):
        n = int(t["encoder_attention_mask"][i].sum().item())
        pos, tags, vid, txt = minimax_layout(n, f, h, w)
        rows = lat[i:i + 1].reshape(1, c, f, h // 2, 2, w // 2, 2).permute(0, 2, 3, 5, 1, 4, 6).reshape(1, -1, 4 * c)
        ts = t["sigma"][i:i + 1].float() * 1000
        out = model(hidden_states=rows, audio_hidden_states=rows.new_zeros(1, 0, model.config.audio_in_channels),
                    encoder_hidden_states=t["encoder_hidden_states"][i:i + 1, :n], timestep=(1 - ts / 1000).double(),
                    timestep_indices=torch.zeros(len(tags), dtype=torch.long), token_tags=tags, position_ids=pos,
                    video_indices=vid, audio_indices=torch.zeros(0, dtype=torch.long), text_indices=txt,
                    return_dict=False)[0]
        out = out.reshape(1, f, h // 2, w // 2, c, 2, 2).permute(0, 4, 1, 2, 5, 3, 6).reshape(1, c, f, h, w)
        preds.append(-out)
    return torch.cat(preds)


MINIMAX_PASSED = ("per sample: hidden_states = the latents' (1, 2, 2) patches, channel-major (SimpleTuner's "
                  "patchify_video_latents); audio_hidden_states (1, 0, audio_in_channels); encoder_hidden_states "
                  "(B, L, 24) N(0, 1) cut to the mask's tokens ([1 1 1 1 1 1], [1 1 1 1 0 0]); timestep = "
                  "float32(1 - float32(1000 sigma) / 1000); packing.py's [text | video] layout (positions, tags, "
                  "indices); pred = -(the output unpatchified)")
MINIMAX_ZERO = {r"audio_proj_(in|out)\..*": "SimpleTuner's video target mode has no audio rows"}


@exact
def cosmos3_exact():
    """Cosmos3VLTextRotaryEmbedding takes its angles in float32: here in float64 from the positions, as segtrain takes
    them."""
    import diffusers.models.transformers.transformer_cosmos3 as tc

    def forward(self, position_ids, device, dtype):
        hd = 2 * self.inv_freq.shape[0]
        inv = 1.0 / COSMOS3_THETA ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        freqs = position_ids.to(torch.float32).to(torch.float64)[..., None] * inv   # [3, B, N, hd/2]
        freqs = self.apply_interleaved_mrope(freqs, self.rope_axes_dim)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)
    tc.Cosmos3VLTextRotaryEmbedding.forward = forward


def cosmos3_run(model, t):
    # Cosmos3OmniPipeline's text-to-image call, a sample at a time (the class takes one packed sequence): the prompt's
    # ids (cut to its mask's tokens) at the start, und_len their count; the latents as one noisy frame after them;
    # position_ids the pipeline's (text arange on the three axes, the vision at len + margin with its row and column,
    # spatial ids reset, float as enable_fps_modulation makes them); vision_timesteps 1000 sigma in float32 for every
    # patch; pred = the vision output as is (the velocity).
    cosmos3_exact()
    lat = t["latents"]
    b, c, h, w = lat.shape
    ph, pw = h // 2, w // 2
    preds = []
    for i in range(b):
        n = int(t["encoder_attention_mask"][i].sum().item())
        ids = t["encoder_hidden_states"][i, :n, 0].long()
        rows = torch.arange(ph, dtype=torch.float32).repeat_interleave(pw)
        cols = torch.arange(pw, dtype=torch.float32).repeat(ph)
        text = torch.arange(n, dtype=torch.float32).expand(3, -1)
        vision = torch.stack([torch.full((ph * pw,), n + 15000.0), rows, cols])
        ts = t["sigma"][i:i + 1].float() * 1000
        out = model(input_ids=ids, text_indexes=torch.arange(n), position_ids=torch.cat([text, vision], dim=1),
                    und_len=n, sequence_length=n + ph * pw, vision_tokens=[lat[i:i + 1, :, None]],
                    vision_token_shapes=[(1, ph, pw)], vision_sequence_indexes=torch.arange(n, n + ph * pw),
                    vision_mse_loss_indexes=torch.arange(n, n + ph * pw), vision_timesteps=ts.expand(ph * pw),
                    vision_noisy_frame_indexes=[torch.tensor([0])], return_dict=False)[0]
        preds.append(out[0][:, :, 0])
    return torch.cat(preds)


COSMOS3_THETA = 5000000.0
COSMOS3_PASSED = ("per sample: input_ids = encoder_hidden_states[..., 0] (token ids) cut to the mask's tokens "
                  "([1 1 1 1 1 1], [1 1 1 1 0 0]), und_len their count; vision_tokens [latents (1, C, 1, H, W)], one "
                  "noisy frame; position_ids (3, S) as Cosmos3OmniPipeline makes them; vision_timesteps = "
                  "float32(1000 sigma) per patch; pred = the vision output")
COSMOS3_ZERO = {r"lm_head\.weight": "text generation's head: the diffusion loss never reads it",
                r"norm\.weight": "the understanding stream's final norm: its rows never reach the vision output",
                r"layers\.1\.(mlp\..*|post_attention_layernorm\.weight|self_attn\.(to_out|to_q|norm_q)\.weight)":
                "the last layer's understanding-stream queries and output: no later layer reads them",
                r"audio_(proj_in|proj_out)\..*|audio_modality_embed": "the sound head: text to image has no sound"}


def sana_run(model, t):
    # SimpleTuner's Sana._model_predict_single: latents as is, timestep = the scheduler's (1000 sigma), the T5-like
    # Gemma states with their mask (1 = token, the model's -10000 bias); pred = the output (the flow velocity).
    timestep = (t["sigma"].float() * 1000).double()
    return model(t["latents"], encoder_hidden_states=t["encoder_hidden_states"], timestep=timestep,
                 encoder_attention_mask=t["encoder_attention_mask"], return_dict=False)[0]


SANA_PASSED = ("hidden_states = latents (B, C, H, W) as is (1 x 1 patches); timestep = float32(sigma * 1000); "
               "encoder_hidden_states (B, L, 24) and encoder_attention_mask (B, L) float, 1 = token (the model's "
               "additive (1 - m) * -10000 key bias); pred = the output")
SANA_ZERO = {r"transformer_blocks\.\d+\.attn2\.to_k\.bias":
             "the cross-attention has no qk norm: a key bias adds the same q . b to every logit of a query (softmax "
             "invariant, the -10000 mask bias included); autograd gives ~1e-17, stored as exact 0"}


def hunyuanvideo_make(gen):
    # HunyuanVideoPipeline's prompt mask: the text tokens first, then padding (the model assumes that order).
    return {"encoder_hidden_states": randn(gen, B, L, JOINT), "pooled_projections": randn(gen, B, POOLED),
            "encoder_attention_mask": text_mask(), "guidance": torch.tensor(GUIDANCE[:B], dtype=torch.float64)}


def hunyuanvideo_run(model, t):
    timestep = (t["sigma"].float() * 1000).double()       # the pipeline passes t (0..1000) as is
    guidance = (t["guidance"].float() * 1000).double()    # guidance_scale * 1000.0 in the transformer's dtype
    return model(hidden_states=t["latents"], timestep=timestep, encoder_hidden_states=t["encoder_hidden_states"],
                 encoder_attention_mask=t["encoder_attention_mask"], pooled_projections=t["pooled_projections"],
                 guidance=guidance, return_dict=False)[0]


# The token refiner's self-attention has no qk norm: a key bias adds q . b to every logit of a query alike, which
# the softmax cancels.
HV_REFINER_ZERO = {r"context_embedder\.token_refiner\.refiner_blocks\.\d+\.attn\.to_k\.bias":
                   "the refiner attention has no qk norm: a key bias shifts all logits of a query alike (softmax "
                   "invariant); autograd gives ~1e-19, stored as exact 0"}

HUNYUANVIDEO_PASSED = ("hidden_states = latents (B, C, F, H, W) as is (the model patchifies with its Conv3d); "
                       "timestep = float32(sigma * 1000); guidance = float32(guidance * 1000); encoder_hidden_states, "
                       "encoder_attention_mask (1 = token; tokens first), pooled_projections as stored; pred = output "
                       "as is (B, C, F, H, W)")

# HunyuanVideo 1.5, text-to-video as SimpleTuner trains it (t2v flavours). ByT5 width, SigLIP width and token counts.
HV15_T5, HV15_IMG, HV15_NIMG, HV15_L2 = 12, 8, 3, 4


def hunyuanvideo15_make(gen):
    # Masks 1 = token, tokens first: Qwen2.5-VL text (6 tokens, then 4 and 5) and ByT5 glyph text (4, then 2 and
    # 3); the padding positions hold random values, as encoders give (the model zeroes them). t2v: zero
    # condition latents and mask channels (SimpleTuner's _prepare_cond_latents) and zero SigLIP image_embeds.
    shape = (B, C, 2, H, W)
    return {"encoder_hidden_states": randn(gen, B, L, JOINT),
            "encoder_attention_mask": text_mask(),
            "encoder_hidden_states_2": randn(gen, B, HV15_L2, HV15_T5),
            "encoder_attention_mask_2": text_mask([4, 2, 3], HV15_L2),
            "image_embeds": torch.zeros(B, HV15_NIMG, HV15_IMG, dtype=torch.float64),
            "cond_latents": torch.zeros(shape, dtype=torch.float64),
            "cond_mask": torch.zeros((B, 1) + shape[2:], dtype=torch.float64)}


def hunyuanvideo15_run(model, t):
    # SimpleTuner's _model_predict_single: cat([noisy latents, cond latents, cond mask], 1), masks as bool,
    # timesteps (1000 sigma) in the latents' float32.
    hidden = torch.cat([t["latents"], t["cond_latents"], t["cond_mask"]], dim=1)
    timestep = (t["sigma"].float() * 1000).double()
    return model(hidden_states=hidden, timestep=timestep, encoder_hidden_states=t["encoder_hidden_states"],
                 encoder_attention_mask=t["encoder_attention_mask"].bool(),
                 encoder_hidden_states_2=t["encoder_hidden_states_2"],
                 encoder_attention_mask_2=t["encoder_attention_mask_2"].bool(), image_embeds=t["image_embeds"],
                 return_dict=False)[0]


HUNYUANVIDEO15_PASSED = ("hidden_states = cat([latents, cond_latents, cond_mask], 1) (B, 2C + 1, F, H, W), the last "
                         "C + 1 channels zero (t2v); timestep = float32(sigma * 1000); encoder_hidden_states, "
                         "encoder_hidden_states_2 (ByT5), image_embeds (zeros: t2v) as stored; encoder_attention_mask, "
                         "encoder_attention_mask_2 as stored, made bool (1 = token; tokens first); timestep_r = None; "
                         "pred = output as is (B, C, F, H, W)")

def longcat_make(gen):
    # LongCatImagePipeline's prepare_pos_ids: text (modality 0, k, k); image (modality 1, 512 + row, 512 + col), 512
    # being the pipeline's tokenizer_max_length (whatever the text length).
    txt = torch.zeros(L, 3, dtype=torch.float64)
    txt[:, 1] = txt[:, 2] = torch.arange(L)
    img = flux_img_ids(H // 2, W // 2)
    img[:, 0] = 1
    img[:, 1:] += 512
    return {"encoder_hidden_states": randn(gen, B, L, JOINT), "txt_ids": txt, "img_ids": img}


def longcat_run(model, t):
    out = model(hidden_states=flux_pack(t["latents"]), encoder_hidden_states=t["encoder_hidden_states"],
                timestep=t["sigma"], img_ids=t["img_ids"], txt_ids=t["txt_ids"], return_dict=False)[0]
    return flux_unpack(out, H, W)


LONGCAT_PASSED = ("hidden_states = _pack_latents(latents) (B, H/2*W/2, 4C) as Flux; timestep = sigma (the pipeline "
                  "passes t / 1000, the model multiplies by 1000); guidance = None (the pipeline's; the model has "
                  "no guidance input in use); txt_ids (L, 3) = (0, k, k); img_ids (T, 3) = (1, 512 + row, 512 + col); "
                  "pred = _unpack_latents(output)")

HD_LLAMA = 3   # Llama tokens per caption (each block reads its own Llama layer's)
HD_BLOCKS = 2  # one double and one single block


def hidream_make(gen):
    # each block's Llama states, stored per block (segtrain's conditioning): the stack the model indexes with
    # llama_layers [0, 1] is the same tensor, layers first
    return {"encoder_hidden_states": randn(gen, B, L, JOINT), "llama_hidden_states": randn(gen, B, HD_BLOCKS, HD_LLAMA, JOINT),
            "pooled_projections": randn(gen, B, POOLED)}


def hidream_run(model, t):
    # training mode: the output is (B, C, S, p p), S the patch grid row-major, p p the patch's (i, j); the image is
    # its (c, r p + i, q p + j), and the prediction is the negated output (HiDreamImagePipeline's noise_pred = -noise_pred).
    # Non-square latents are padded to max_seq tokens by the model's patchify: S is then max_seq, and the image is its
    # first H/2 W/2 tokens (as the eval-mode unpatchify takes them).
    # Training mode always (--verify's from_pretrained is in eval mode, whose unpatchify returns the image itself)
    model.train()
    out = model(hidden_states=t["latents"], timesteps=t["sigma"] * 1000,
                encoder_hidden_states_t5=t["encoder_hidden_states"],
                encoder_hidden_states_llama3=t["llama_hidden_states"].transpose(0, 1),
                pooled_embeds=t["pooled_projections"], return_dict=False)[0]
    out = out[:, :, :(H // 2) * (W // 2)]
    out = out.reshape(B, C, H // 2, W // 2, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(B, C, H, W)
    return -out


HIDREAM_PASSED = ("hidden_states = latents (B, C, H, W) as is (square: no mask, the model patchifies); timesteps = "
                  "sigma * 1000; encoder_hidden_states_t5 = encoder_hidden_states; encoder_hidden_states_llama3 = "
                  "llama_hidden_states.transpose(0, 1) (blocks, B, tokens, width), llama_layers [0, 1]; pooled_embeds "
                  "= pooled_projections; model.train() (MoE's training path; its aux loss is computed but not added); "
                  "pred = -(output (B, C, S, 4) as the (B, C, H, W) image)")
HIDREAM_HW = ("non-square: the model's patchify pads the H/2 W/2 tokens to max_seq = 16 (max_resolution 8 x 8 over "
              "the 2 x 2 patch) with zeros, img_ids (0, 0, 0) and hidden_states_masks 0 on the padding (their keys "
              "multiplied by 0: logit 0 in every softmax, their values kept); the training-mode output (B, C, 16, 4); "
              "pred = -(its first H/2 W/2 tokens as the image)")

# ------------------------------------------------------------------ cross-attention families (issue 18)
PIXART_HW = (12, 12)  # past sample_size 8: the sin-cos table scales positions to the base grid (segtrain is square)


def masked_text_make(gen):
    # T5 sequence with the tokenizer's mask; the padding positions hold what the encoder gives (random here).
    return {"encoder_hidden_states": randn(gen, B, L, JOINT),
            "encoder_attention_mask": text_mask()}


def pixart_run(model, t):
    # SimpleTuner's PixartSigma._model_predict_single: latents as is, timesteps (1000 sigma here), the mask as a float
    # (B, L), added_cond_kwargs from the latent size (ignored: use_additional_conditions is False), then the first
    # half of the 2C output channels (the learned-variance half is dropped).
    b, _, h, w = t["latents"].shape
    cond = {"resolution": torch.tensor([[h, w]], dtype=torch.float64).expand(b, -1),
            "aspect_ratio": torch.tensor([[h / w]], dtype=torch.float64).expand(b, -1)}
    timestep = (t["sigma"].float() * 1000).double()
    out = model(t["latents"], encoder_hidden_states=t["encoder_hidden_states"], timestep=timestep,
                encoder_attention_mask=t["encoder_attention_mask"], added_cond_kwargs=cond, return_dict=False)[0]
    return out.chunk(2, dim=1)[0]


PIXART_PASSED = ("hidden_states = latents (B, C, H, W) = (2, 4, 8, 12) as is (the model patchifies, 2x2); timestep = "
                 "float32(sigma * 1000); encoder_hidden_states (B, L, 24) and encoder_attention_mask (B, L) float, "
                 "1 = token (the model makes it the additive bias (1 - m) * -10000 on the cross-attention keys); "
                 "added_cond_kwargs = resolution (H, W), aspect_ratio H / W (ignored: use_additional_conditions "
                 "False); pred = output[:, :C] (out_channels 2C; the variance half is dropped, as SimpleTuner does)")


def wan_make(gen):
    # WanPipeline._get_t5_prompt_embeds cuts each prompt to its length and pads with zero vectors (no mask is kept):
    # sample 1 has 4 tokens and 2 zero rows (sample 2: 5 and 1).
    e = randn(gen, B, L, JOINT)
    e[text_mask() == 0] = 0
    return {"encoder_hidden_states": e}


def wan_run(model, t):
    timestep = (t["sigma"].float() * 1000).double()
    return model(hidden_states=t["latents"], timestep=timestep, encoder_hidden_states=t["encoder_hidden_states"],
                 return_dict=False)[0]


WAN_PASSED = ("hidden_states = latents (B, C, F, H, W) = (2, 4, 2, 8, 8) as is (Conv3d patch (1, 2, 2), tokens (frame, "
              "row, col)); timestep = float32(sigma * 1000) (B); encoder_hidden_states (B, L, 24) as stored, sample "
              "1's last 2 rows zero (the pipeline's zero padding; no mask: the padding rows are keys like any "
              "other); encoder_hidden_states_image = None (T2V); pred = output as is (B, C, F, H, W)")

VACE_IN = 8  # vace_in_channels (96 real: the inactive and reactive videos' latents and the mask)


def wan_vace_make(gen):
    # Wan's text (zero padded as WanPipeline pads it) and VACE's control latents, random so that every weight of the
    # control branch gets a gradient.
    t = wan_make(gen)
    t["control_hidden_states"] = randn(gen, B, VACE_IN, 2, H, W)
    return t


def wan_vace_run(model, t):
    timestep = (t["sigma"].float() * 1000).double()
    return model(hidden_states=t["latents"], timestep=timestep, encoder_hidden_states=t["encoder_hidden_states"],
                 control_hidden_states=t["control_hidden_states"], return_dict=False)[0]


WAN_VACE_PASSED = WAN_PASSED + ("; control_hidden_states (B, 8, F, H, W) N(0, 1), control_hidden_states_scale None "
                                "(ones)")

def lumina2_run(model, t):
    # SimpleTuner's Lumina2._model_predict_single: latents as is, timestep 1 - timesteps / 1000 (Lumina's flow runs
    # from noise at 0), the text with its mask as int32 (the caption's length per sample is the mask's ones), and the
    # prediction is minus the output.
    timestep = (1 - t["sigma"].float()).double()
    out = model(hidden_states=t["latents"], timestep=timestep, encoder_hidden_states=t["encoder_hidden_states"],
                encoder_attention_mask=t["encoder_attention_mask"].to(torch.int32), return_dict=False)[0]
    return -out


LUMINA2_PASSED = ("hidden_states = latents (B, C, H, W) as is; timestep = 1 - float32(sigma) (B); "
                  "encoder_hidden_states (B, L, 24) N(0, 1), padding rows too; encoder_attention_mask = "
                  "int32([1 1 1 1 1 1], [1 1 1 1 0 0]) (captions of 6 and 4 tokens); pred = -output (SimpleTuner's "
                  "lumina2 negates it)")


# SimpleTuner's own model classes (no diffusers class): imported from the checkout given by --simpletuner, at this
# commit; its packages' __init__ files (the trainer's imports) are not run, only the model's own modules.
SIMPLETUNER_COMMIT = "bc8e6ab77"
SIMPLETUNER = {"root": None}
# A module a class imports and never runs in training, which the reference venv cannot import: {module under
# helpers/models: (its names the class imports, why)}, each name a stub that raises when called.
SIMPLETUNER_STUBS = {
    "mageflow.vendor.models.modules.text_encoder": (
        ("TextEncoder", "qwen3_patch_forward"),
        "Mage-Flow's Qwen3-VL text encoder, which mage_flow.py imports for MageFlowModel (the inference wrapper; "
        "MageFlow, the transformer, never calls it), imports transformers' Qwen3VLCausalLMOutputWithPast, which "
        "transformers 5.24.0 (the reference venv's, inside SimpleTuner's >=5.5.1,<6) no longer has"),
}


def simpletuner_class(path):
    """The class at path ("boogu_image.transformer.BooguImageTransformer2DModel", under helpers/models) of the
    --simpletuner checkout; every package above it bare (its __init__ not run)."""
    import importlib
    import types
    root = SIMPLETUNER["root"]
    if not root:
        raise SystemExit("make_fixtures.py: a SimpleTuner class needs --simpletuner PATH (a checkout at %s)"
                         % SIMPLETUNER_COMMIT)
    module, _, cls = path.rpartition(".")
    parts = ("simpletuner.helpers.models." + module).split(".")
    packages = [".".join(parts[:i]) for i in range(1, len(parts))] + ["simpletuner.helpers.training"]
    for pkg in packages:
        if pkg not in sys.modules:
            mod = types.ModuleType(pkg)
            mod.__path__ = [os.path.join(root, *pkg.split("."))]
            sys.modules[pkg] = mod
    for name, (names, why) in SIMPLETUNER_STUBS.items():
        full = "simpletuner.helpers.models." + name
        if name.split(".")[0] == module.split(".")[0] and full not in sys.modules:
            stub = types.ModuleType(full)
            for n in names:
                def unused(*a, _n=n, **k):
                    raise RuntimeError("make_fixtures.py: %s.%s is a stub: %s" % (name, _n, why))
                setattr(stub, n, unused)
            sys.modules[full] = stub
    return getattr(importlib.import_module("simpletuner.helpers.models." + module), cls)


def boogu_run(model, t):
    # SimpleTuner's BooguImage._model_predict_single: latents as is, timestep 1 - sigma (sample_flow_sigmas) in the
    # weights' float32, the text with its mask as bool, freqs_cis from BooguImageRotaryPosEmbed.get_freqs_cis of the
    # config's axes (float64), no reference images (t2i). Its target is latents - noise
    # (flow_matching_target_direction -1): the same loss as -output against noise - latents, segtrain's.
    rope = simpletuner_class("boogu_image.rope.BooguImageRotaryPosEmbed")
    timestep = (1 - t["sigma"].float()).double()
    freqs = rope.get_freqs_cis(model.config.axes_dim_rope, model.config.axes_lens, theta=10000)
    out = model(t["latents"], timestep, t["encoder_hidden_states"], freqs, t["encoder_attention_mask"].bool())
    return -out


BOOGU_PASSED = ("hidden_states = latents (B, C, H, W) as is; timestep = 1 - float32(sigma) (B); "
                "instruction_hidden_states (B, L, 24) N(0, 1), padding rows too; instruction_attention_mask = "
                "bool([1 1 1 1 1 1], [1 1 1 1 0 0]); freqs_cis = BooguImageRotaryPosEmbed.get_freqs_cis(axes_dim_rope, "
                "axes_lens, 10000); ref_image_hidden_states None; pred = -output (SimpleTuner's target is latents - "
                "noise)")


@exact
def mageflow_exact(model):
    """Mage-Flow's vendored get_timestep_embedding takes its frequencies in float32, and MageFlowEmbedRope its
    angles in float32 (at construction) and turns q and k in complex64: here all in float64, as segtrain takes
    them."""
    import simpletuner.helpers.models.mageflow.vendor.models.modules.mage_layers as ml

    def rotate(x, freqs):
        pairs = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(pairs * freqs.unsqueeze(1)).flatten(-2).type_as(x)

    def rope_params(self, index, dim, theta=10000):
        inv = 1.0 / torch.pow(theta, torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        freqs = torch.outer(index.to(torch.float64), inv)
        return torch.polar(torch.ones_like(freqs), freqs)
    ml.get_timestep_embedding = exact_timestep_embedding
    ml.apply_rotary_emb_mageflow = rotate
    ml.MageFlowEmbedRope.rope_params = rope_params
    pe = model.pos_embed
    pos, neg = torch.arange(4096), torch.arange(4096).flip(0) * -1 - 1
    pe.pos_freqs = torch.cat([pe.rope_params(pos, d, pe.theta) for d in pe.axes_dim], dim=1)
    pe.neg_freqs = torch.cat([pe.rope_params(neg, d, pe.theta) for d in pe.axes_dim], dim=1)
    pe.video_freq_cache = {}


def mageflow_run(model, t):
    # SimpleTuner's MageFlow._model_predict_single (text to image): every sample's latent tokens "c h w -> (h w) c"
    # packed into one row (1, B H W, C) with img_cu_seqlens, img_shapes [[(1, H, W)] * B] (so sample i's tokens sit
    # at RoPE frame i), the captions' tokens where the mask is 1 packed (1, sum of lengths, 24) with txt_cu_seqlens,
    # timesteps float32(1000 sigma) / 1000 (B); the prediction each sample's rows "(h w) c -> c h w".
    mageflow_exact(model)
    lat = t["latents"]
    b, c, h, w = lat.shape
    mask = t["encoder_attention_mask"].bool()
    lens = mask.sum(1).tolist()
    img = lat.permute(0, 2, 3, 1).reshape(1, b * h * w, c)
    txt = torch.cat([t["encoder_hidden_states"][i][mask[i]] for i in range(b)]).unsqueeze(0)

    def cu(ls):
        return torch.tensor([0] + list(itertools.accumulate(ls)), dtype=torch.int32)
    timesteps = (t["sigma"].float() * 1000).double() / 1000
    out = model(img=img, txt=txt, timesteps=timesteps, img_shapes=[[(1, h, w)] * b], img_cu_seqlens=cu([h * w] * b),
                txt_cu_seqlens=cu(lens))
    return out.reshape(b, h, w, c).permute(0, 3, 1, 2)


MAGEFLOW_PASSED = ("img = latents (B, C, H, W) as (1, B H W, C), each sample's tokens row-major, img_cu_seqlens "
                   "their bounds; img_shapes = [[(1, H, W)] * B] (sample i at RoPE frame i); txt = the tokens of "
                   "encoder_hidden_states (B, L, 24) where encoder_attention_mask is 1, packed (captions of 6, 4 "
                   "and 5 tokens), txt_cu_seqlens their bounds; timesteps = float32(1000 sigma) / 1000 (B); the "
                   "sinusoid and RoPE in float64; pred = output as (B, C, H, W) (SimpleTuner's MageFlow "
                   "._model_predict_single)")


S2V_F, S2V_LAYERS, S2V_AUDIO = 8, 3, 8   # latent frames (the audio encoder's two halvings of 17 + 8 frames leave 7, the
# last 2 of them after the 5 it drops: 2 audio chunks of the video tokens); Wav2Vec2's hidden states a frame (25
# real) and their width (1024)


def wan_s2v_make(gen):
    # Wan's text (zero padded as WanPipeline pads it), the Wav2Vec2 hidden states per latent frame as SimpleTuner's
    # WanS2V.model_predict hands them over (after interpolate_audio_to_frames: (B, layers, audio_dim, F)), and the
    # reference image's latents (conditioning_latents, one frame).
    t = wan_make(gen)
    t["audio_embeds"] = randn(gen, B, S2V_LAYERS, S2V_AUDIO, S2V_F)
    t["image_latents"] = randn(gen, B, C, 1, H, W)
    return t


def wan_s2v_run(model, t):
    # SimpleTuner's WanS2V.model_predict: pose latents zeros (B, 16, F, H, W), motion latents none (B, C, 0, H, W),
    # motion_frames [17, 5], drop_motion_frames True, add_last_motion 0.
    # The rotary table as the class builds it: Module.to(dtype) casts its complex128 buffer to real, which drops the
    # sines (the frame packer's, whose tokens training drops, aside).
    rope = model.rope
    rope.freqs = type(rope)(rope.attention_head_dim, rope.patch_size, rope.max_seq_len,
                            rope.num_attention_heads).freqs.to(t["latents"].device)
    b, c, f, h, w = t["latents"].shape
    timestep = (t["sigma"].float() * 1000).double()
    return model(hidden_states=t["latents"], timestep=timestep, encoder_hidden_states=t["encoder_hidden_states"],
                 motion_latents=t["latents"].new_zeros(b, c, 0, h, w), audio_embeds=t["audio_embeds"],
                 image_latents=t["image_latents"], pose_latents=t["latents"].new_zeros(b, 16, f, h, w),
                 motion_frames=[17, 5], drop_motion_frames=True, add_last_motion=0, return_dict=False)[0]


WAN_S2V_PASSED = ("hidden_states = latents (B, C, F, H, W) = (2, 4, 8, 8, 8) as is; timestep = float32(sigma * 1000) "
                  "(B); encoder_hidden_states (B, L, 24) as wan's; audio_embeds (B, 3, 8, F) N(0, 1) (Wav2Vec2's "
                  "hidden states at the latent frames, as WanS2V.model_predict interpolates them); image_latents (B, "
                  "C, 1, H, W) N(0, 1) (the reference: conditioning_latents); pose_latents zeros (B, 16, F, H, W); "
                  "motion_latents (B, C, 0, H, W); motion_frames [17, 5], drop_motion_frames True, add_last_motion 0 "
                  "(SimpleTuner's WanS2V.model_predict); the rotary table complex128 as the class builds it (Module.to casts it to "
                  "real); pred = output as is (B, C, F, H, W)")
# A change to a SimpleTuner class that is not about float64 but about what it computes: {family: {change: why}},
# applied in every run (the bf16 yardstick's too) and recorded in the fixture's metadata.
SIMPLETUNER_PATCHES = {
    "longcat_video": {
        "attention_layout": "Attention._flash_or_sdp_attention hands q, k, v as (B, heads, tokens, head_dim) to "
                            "diffusers' dispatch_attention_fn, which takes (B, tokens, heads, head_dim): as shipped "
                            "(no BSA or Triton kernel, the published enable_bsa false) each token attends over the "
                            "heads, not the tokens. Patched to the layout dispatch_attention_fn takes, the attention "
                            "LongCat-Video's own code runs (flash_attn_func on (B, tokens, heads, head_dim))",
        "ffn_residual": "LongCatSingleStreamBlock.forward assigns x = modulate_fp32(mod_norm_ffn, x, ...) and then x = "
                        "x + gate_mlp * ffn(x), so the feed-forward's residual starts from the modulated stream and "
                        "a pretrained model loses its residual stream at every block. Patched to x = x + gate_mlp * "
                        "ffn(modulate_fp32(mod_norm_ffn, x, ...)), as LongCat-Video's own block has it",
        "prediction_sign": "the model outputs the data-ward velocity latents - noise (LongCat-Video's pipelines, "
                           "SimpleTuner's too, negate it before FlowMatchEulerDiscreteScheduler.step), but "
                           "LongCatVideo._model_predict_single returns it as is against noise - latents (direction "
                           "+1), so fine-tuning flips a pretrained model's sign. Patched to pred = -output, as "
                           "SimpleTuner's lumina2 negates its output",
    },
}
# ffn_residual as an edit of the block's forward: each (shipped, patched) text must occur once in its source
LONGCAT_VIDEO_FFN_RESIDUAL = (("x = modulate_fp32(self.mod_norm_ffn,", "x_m = modulate_fp32(self.mod_norm_ffn,"),
                              ("x = x + (gate_mlp * self.ffn(x.view(", "x = x + (gate_mlp * self.ffn(x_m.view("))


def longcat_video_ffn_residual(lt):
    """SIMPLETUNER_PATCHES' ffn_residual: LongCatSingleStreamBlock.forward recompiled from its own source with
    LONGCAT_VIDEO_FFN_RESIDUAL's two edits, in the module's globals (so the other changes here still reach it)."""
    import inspect
    import textwrap
    block = lt.LongCatSingleStreamBlock
    src = textwrap.dedent(inspect.getsource(block.forward))
    for shipped, patched in LONGCAT_VIDEO_FFN_RESIDUAL:
        if src.count(shipped) != 1:
            raise SystemExit("longcat_video: LongCatSingleStreamBlock.forward holds %r %d times (valid: once); the "
                             "ffn_residual patch no longer applies" % (shipped, src.count(shipped)))
        src = src.replace(shipped, patched)
    made = {}
    exec(compile(src, inspect.getsourcefile(block) + " (ffn_residual)", "exec"), vars(lt), made)
    block.forward = made["forward"]


def longcat_video_prediction_sign(lt):
    """SIMPLETUNER_PATCHES' prediction_sign patches SimpleTuner's training (longcat_video_run negates), so it checks
    that training as shipped, from model.py's source (importing it would import SimpleTuner's trainer): the class
    sets no flow-matching direction or output conversion, and _model_predict_single returns the output as is."""
    import ast
    path = os.path.join(os.path.dirname(lt.__file__), "model.py")
    with open(path) as f:
        src = f.read()
    cls = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef) and n.name == "LongCatVideo"]
    methods = {n.name: ast.get_source_segment(src, n) for n in (cls[0].body if len(cls) == 1 else [])
               if isinstance(n, ast.FunctionDef)}
    predict = methods.get("_model_predict_single", "")
    shipped = ("flow_matching_target_direction" not in methods and "raw_model_prediction_to_model_prediction" not in
               methods and predict.count("model_pred = self.model(") == 1 and predict.count("model_pred = ") == 2 and
               predict.count('"model_prediction": model_pred,') == 1)
    if not shipped:
        raise SystemExit("longcat_video: %s's LongCatVideo no longer trains the raw output against noise - latents "
                         "(its direction, output conversion or _model_predict_single changed); the prediction_sign "
                         "patch no longer applies" % path)


def longcat_video_patch():
    import simpletuner.helpers.models.longcat_video.transformer as lt
    if getattr(lt, "_segtrain_patched", False):
        return
    longcat_video_prediction_sign(lt)
    dispatch = lt.dispatch_attention_fn

    def by_tokens(q, k, v, attn_mask=None, backend=None):
        o = dispatch(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=attn_mask, backend=backend)
        return o.transpose(1, 2)
    lt.dispatch_attention_fn = by_tokens
    longcat_video_ffn_residual(lt)
    lt._segtrain_patched = True


@exact
def longcat_video_exact(model):
    """LongCat-Video's class computes in float32 whatever the weights' dtype (its *_FP32 norms, modulate_fp32 and the
    final layer assert float32, the sinusoid's and RoPE's frequencies are float32 and RoPE turns q and k in float32):
    here all in float64, as segtrain takes them."""
    import simpletuner.helpers.models.longcat_video.transformer as lt
    F = torch.nn.functional

    def sinusoid(t, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64) / half)
        args = t[:, None].double() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    time_forward = getattr(lt.TimestepEmbedder, "_segtrain_orig", lt.TimestepEmbedder.forward)
    lt.TimestepEmbedder._segtrain_orig = time_forward

    def timestep_forward(self, t, dtype, timestep_sign=None, r_timestep=None):
        return time_forward(self, t.double(), torch.float64, timestep_sign, r_timestep)
    lt.TimestepEmbedder.timestep_embedding = staticmethod(sinusoid)
    lt.TimestepEmbedder.forward = timestep_forward
    lt.modulate_fp32 = lambda norm, x, shift, scale: norm(x) * (scale + 1) + shift
    lt.LayerNorm_FP32.forward = lambda self, x: F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
    lt.RMSNorm_FP32.forward = lambda self, x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def freqs_3d(self, grid_size):
        f, h, w = grid_size
        hd = self.head_dim
        dims = (hd - 4 * (hd // 6), 2 * (hd // 6), 2 * (hd // 6))
        axes = []
        for n, d in zip((f, h, w), dims):
            inv = 1.0 / (self.base ** (torch.arange(0, d, 2, dtype=torch.float64)[: d // 2] / d))
            axes.append(torch.outer(torch.arange(n, dtype=torch.float64), inv).repeat_interleave(2, dim=-1))
        grid = [a.reshape(*([1] * i), -1, *([1] * (2 - i)), a.shape[-1]).expand(f, h, w, -1)
                for i, a in enumerate(axes)]
        return torch.cat(grid, dim=-1).reshape(f * h * w, -1)

    def rope_forward(self, q, k, grid_size):
        freqs = freqs_3d(self, grid_size)
        cos, sin = freqs.cos()[None, None], freqs.sin()[None, None]
        return q * cos + lt._rotate_half(q) * sin, k * cos + lt._rotate_half(k) * sin
    lt.RotaryPositionalEmbedding.forward = rope_forward

    def final_forward(self, x, t, latent_shape):
        b, n, c = x.shape
        shift, scale = lt._reshape_longcat_video_modulation(
            self.adaLN_modulation(t), batch_size=b, temporal_tokens=latent_shape[0],
            spatial_tokens=n // latent_shape[0], label="final").chunk(2, dim=-1)
        x = (self.norm_final(x.view(b, latent_shape[0], -1, c)) * (scale + 1) + shift).view(b, n, c)
        return self.linear(x)
    lt.FinalLayer_FP32.forward = final_forward


def longcat_video_float32_regions():
    """For bf16 runs (bf16_yardstick.py); a no-op on float64. The class's float32 regions (its time embedding, every
    modulation and gated residual, the feed-forward, the final layer) are torch.autocast(dtype=float32,
    enabled=device is cuda): on CUDA their linears run in float32 whatever their weights' dtype; CPU autocast takes
    bf16 and fp16 only, so on the CPU the regions are off and the float32 time meets bf16 weights (a dtype error).
    Here each region runs as CUDA runs it: autocast off, and every linear's half-precision operands in float32."""
    import contextlib
    import simpletuner.helpers.models.longcat_video.transformer as lt
    if getattr(lt, "_segtrain_float32_regions", False):
        return

    def up(a):
        return a.float() if isinstance(a, torch.Tensor) and a.dtype in (torch.bfloat16, torch.float16) else a

    class Float32Linears(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") == "linear":
                args, kwargs = tuple(up(a) for a in args), {k: up(v) for k, v in kwargs.items()}
            return func(*args, **kwargs)

    @contextlib.contextmanager
    def autocast(device_type, dtype=None, enabled=True, **kw):
        if device_type == "cpu" and dtype is torch.float32:
            with torch.autocast("cpu", enabled=False), Float32Linears():
                yield
        else:
            with torch.autocast(device_type, dtype=dtype, enabled=enabled, **kw):
                yield

    class Torch:
        def __getattr__(self, name):
            return getattr(torch, name)
    proxy = Torch()
    proxy.autocast = autocast
    lt.torch = proxy
    lt._segtrain_float32_regions = True


def longcat_video_run(model, t):
    # SimpleTuner's LongCatVideo._model_predict_single (text to video, no conditioning frames): noisy latents (B, C, F,
    # H, W) as they are, the caption states and their mask, timesteps float32(1000 sigma) (B), num_cond_latents 0;
    # its target noise - latents (flow_matching_target_direction +1), the prediction the negated output
    # (SIMPLETUNER_PATCHES' prediction_sign). The class returns float32; the reference's float64 is kept.
    longcat_video_patch()
    longcat_video_exact(model)
    longcat_video_float32_regions()
    timestep = (t["sigma"].float() * 1000).double()
    out = model(t["latents"], timestep, t["encoder_hidden_states"], encoder_attention_mask=t["encoder_attention_mask"],
                num_cond_latents=0, return_dict=False)
    return -out[0]


LONGCAT_VIDEO_PASSED = ("hidden_states = latents (B, C, F, H, W) = (2, 4, 2, 8, 8) as is (Conv3d patch (1, 2, 2), "
                        "tokens (frame, row, col)); timestep = float32(sigma * 1000) (B); encoder_hidden_states (B, L, "
                        "24) N(0, 1) and encoder_attention_mask (B, L) of 6 and 4 tokens (text_tokens_zero_pad: the "
                        "padding rows zeroed after y_embedder, then attended); num_cond_latents 0; pred = -output (B, "
                        "C, F, H, W); the self-attention over the tokens, the feed-forward's residual from the stream "
                        "and the prediction's sign (SIMPLETUNER_PATCHES)")


@exact
def zimage_exact():
    """ZImage's TimestepEmbedder computes its sinusoid in float32 (its own copy, not get_timestep_embedding): here
    in float64 as exact_timestep_embedding, of t * t_scale rounded to float32 as SimpleTuner's float32 model has
    it."""
    import diffusers.models.transformers.transformer_z_image as zi

    def embedding(t, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64) / half)
        args = t.float().double()[:, None] * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    zi.TimestepEmbedder.timestep_embedding = staticmethod(embedding)


def zimage_run(model, t):
    # SimpleTuner's ZImage._model_predict_single: each sample's latents as (C, 1, H, W), its caption's states where
    # the mask is 1, timestep (1000 - timesteps) / 1000 in float32 (timesteps = 1000 sigma), and the prediction is
    # minus the output.
    zimage_exact()
    mask = t["encoder_attention_mask"].bool()
    caps = [t["encoder_hidden_states"][i][mask[i]] for i in range(mask.shape[0])]
    timestep = ((1000 - t["sigma"].float() * 1000) / 1000).double()
    out = model([x.unsqueeze(1) for x in t["latents"]], timestep, caps, return_dict=False)[0]
    return -torch.stack(out).squeeze(2)


ZIMAGE_PASSED = ("x = [latents[i] as (C, 1, H, W)]; t = float32((1000 - 1000 sigma) / 1000) (B), the sinusoid of "
                 "float32(t * 1000) in float64; cap_feats = [encoder_hidden_states[i] "
                 "where encoder_attention_mask[i] is 1] (captions of 6 and 4 tokens, (L, 24) N(0, 1)); pred = "
                 "-stack(output) (SimpleTuner's z_image negates it)")


@exact
def ernie_exact():
    """ERNIE-Image's rope() computes its angles in float32 (its own, not get_timestep_embedding's): here in float64,
    as segtrain's rope_table takes them, cos and sin then rounded once to float."""
    import diffusers.models.transformers.transformer_ernie_image as te

    def rope(pos, dim, theta):
        omega = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        return torch.einsum("...n,d->...nd", pos.double(), omega)
    te.rope = rope


def ernie_run(model, t):
    # SimpleTuner's Ernie.model_predict: latents as they are, timesteps 1000 sigma (float32), each caption's rows where
    # the mask is 1 zero-padded to the batch's longest (text_bth) with their counts (text_lens); the prediction is
    # the output itself.
    ernie_exact()
    mask = t["encoder_attention_mask"].bool()
    lens = mask.sum(dim=1)
    text = torch.zeros(mask.shape[0], int(lens.max()), t["encoder_hidden_states"].shape[-1], dtype=torch.float64)
    for i in range(mask.shape[0]):
        text[i, :int(lens[i])] = t["encoder_hidden_states"][i][mask[i]]
    timestep = (t["sigma"].float() * 1000).double()
    return model(hidden_states=t["latents"], timestep=timestep, text_bth=text, text_lens=lens, return_dict=False)[0]


ERNIE_PASSED = ("hidden_states = latents (B, C, H, W) as is; timestep = float32(sigma * 1000); text_bth = each "
                "caption's rows where encoder_attention_mask is 1 (6 and 4 of (L, 24) N(0, 1)), zero-padded to the "
                "longest; text_lens = their counts; pred = output")


IDEOGRAM_THETA, IDEOGRAM_OFFSET = 5_000_000, 65536   # every published config's; SimpleTuner's IMAGE_POSITION_OFFSET


@exact
def ideogram_exact():
    """Ideogram 4 computes its MRoPE angles and its time sinusoid (of 10^4 t) in float32, its own copies of both: here
    in float64, as segtrain takes them (cos and sin, and the sinusoid, rounded once to float)."""
    import diffusers.models.transformers.transformer_ideogram4 as ti

    def mrope(self, position_ids):
        pos = position_ids.permute(2, 0, 1).to(torch.float64)
        inv = 1.0 / (IDEOGRAM_THETA ** (torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim))
        freqs = pos[..., None] * inv
        f = freqs[0].clone()
        for axis in (1, 2):
            idx = torch.arange(axis, self.mrope_section[axis] * 3, 3)
            f[..., idx] = freqs[axis][..., idx]
        emb = torch.cat((f, f), dim=-1)
        return emb.cos(), emb.sin()

    def embed_scalar(self, x):
        scaled = 1e4 * (x.to(torch.float64) - self.range_min) / (self.range_max - self.range_min)
        half = self.dim // 2
        freq = torch.exp(torch.arange(half, dtype=torch.float64) * -(math.log(1e4) / (half - 1)))
        arg = scaled.unsqueeze(-1) * freq
        emb = torch.cat([torch.sin(arg), torch.cos(arg)], dim=-1).to(self.mlp_in.weight.dtype)
        return self.mlp_out(torch.nn.functional.silu(self.mlp_in(emb)))
    ti.Ideogram4MRoPE.forward = mrope
    ti.Ideogram4EmbedScalar.forward = embed_scalar


def ideogram_run(model, t):
    # SimpleTuner's Ideogram._model_predict_single: per sample [the caption's L tokens, the packed latents' tokens];
    # position ids (j, j, j) for caption token j and (0, row, column) + 65536 for the image; segment ids the caption's
    # mask then ones; indicator 3 (text) then 2 (image); llm features the text then zeros; the input zeros then the
    # latents channels last; time 1 - timesteps / 1000 (float32); the prediction minus the image rows' output.
    ideogram_exact()
    lat = t["latents"]
    b, c, h, w = lat.shape
    mask = t["encoder_attention_mask"]
    n = mask.shape[1]
    text_pos = torch.arange(n).view(1, n, 1).expand(b, n, 3)
    rows = torch.arange(h).view(h, 1).expand(h, w).reshape(-1)
    cols = torch.arange(w).view(1, w).expand(h, w).reshape(-1)
    image_pos = torch.stack([torch.zeros_like(rows), rows, cols], dim=1) + IDEOGRAM_OFFSET
    image_pos = image_pos.unsqueeze(0).expand(b, -1, -1)
    position_ids = torch.cat([text_pos, image_pos], dim=1)
    segment_ids = torch.cat([mask.long(), torch.ones(b, h * w, dtype=torch.long)], dim=1)
    indicator = torch.cat([torch.full((b, n), 3), torch.full((b, h * w), 2)], dim=1)
    feats = t["encoder_hidden_states"]
    llm = torch.cat([feats, torch.zeros(b, h * w, feats.shape[-1], dtype=feats.dtype)], dim=1)
    x = torch.cat([torch.zeros(b, n, c, dtype=lat.dtype), lat.permute(0, 2, 3, 1).reshape(b, h * w, c)], dim=1)
    timestep = (1.0 - t["sigma"].float() * 1000 / 1000.0).double()
    out = model(hidden_states=x, timestep=timestep, encoder_hidden_states=llm, position_ids=position_ids,
                segment_ids=segment_ids, indicator=indicator, return_dict=False)[0]
    return -out[:, n:].reshape(b, h, w, c).permute(0, 3, 1, 2)


IDEOGRAM_PASSED = ("per sample [caption; image]: hidden_states = zeros (L, C) then latents channels last (H W, C); "
                   "encoder_hidden_states = the text (L, 24) N(0, 1) then zeros; position_ids (j, j, j) then (0, row, "
                   "col) + 65536; segment_ids = encoder_attention_mask ([1 1 1 1 1 1], [1 1 1 1 0 0]) then ones; "
                   "indicator 3 then 2; timestep = 1 - float32(1000 sigma) / 1000 (float32); pred = -output's image "
                   "rows as (B, C, H, W)")


# OmniGen's prompts are token ids: (B, L, 1) floats as segtrain's conditioning holds them, with the mask of the
# captions of 6 and 4 tokens (and 5: B = 3). Sample 0 holds pad_token_id 5, whose embedding row gets no gradient
# (padding_idx).
OMNIGEN_IDS = [[1, 17, 5, 40, 9, 33], [1, 22, 8, 63, 0, 0], [1, 30, 12, 7, 51, 0]]   # the first B
OMNIGEN_FACTORS = dict(short_factor=[1 + 0.125 * i for i in range(8)], long_factor=[1 + 0.5 * i for i in range(8)])


def omnigen_make(gen):
    return {"encoder_hidden_states": torch.tensor(OMNIGEN_IDS[:B], dtype=torch.float64)[..., None],
            "encoder_attention_mask": text_mask()}


@exact
def omnigen_exact():
    """OmniGen's su-scaled rotary embedding computes its angles, cos and sin in float32: here in float64, as segtrain's
    table takes them (cos and sin, times the scaling factor, rounded once to float)."""
    import diffusers.models.transformers.transformer_omnigen as to

    def forward(self, hidden_states, position_ids):
        long = int(torch.max(position_ids)) + 1 > self.original_max_position_embeddings
        ext = torch.tensor(self.long_factor if long else self.short_factor, dtype=torch.float64)
        inv = 1.0 / (ext * self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float64) / self.dim))
        freqs = position_ids[:, :, None].to(torch.float64) * inv
        emb = torch.cat((freqs, freqs), dim=-1)[0]
        scale = self.max_position_embeddings / self.original_max_position_embeddings
        f = 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(self.original_max_position_embeddings))
        return emb.cos() * f, emb.sin() * f
    to.OmniGenSuScaledRotaryEmbedding.forward = forward


def omnigen_run(model, t):
    # SimpleTuner's OmniGen._model_predict_single with its collator (diffusers' OmniGenCollator.process_mllm_input, as
    # OmniGenTrainingCollator calls it): each prompt's ids (its mask's ones) left-padded with id 2 to the longest, the
    # collator's position ids and mask (prompt and time token causal, the image bidirectional); timestep = SimpleTuner's
    # t = 1 - sigma (float32); no input images; the prediction is minus the output.
    from diffusers.pipelines.omnigen.processor_omnigen import OmniGenCollator
    omnigen_exact()
    lat = t["latents"]
    b, _, h, w = lat.shape
    ids = [[int(v) for v, m in zip(t["encoder_hidden_states"][i, :, 0], t["encoder_attention_mask"][i]) if m]
           for i in range(b)]
    collator = OmniGenCollator(pad_token_id=2, hidden_size=model.config.hidden_size)
    padded, position_ids, mask, _, _, _ = collator.process_mllm_input(
        [{"input_ids": x, "pixel_values": None, "image_sizes": None} for x in ids], [[h * 8, w * 8]] * b)
    timestep = (1 - t["sigma"].float()).double()
    out = model(hidden_states=lat, timestep=timestep, input_ids=padded, input_img_latents=[], input_image_sizes={},
                attention_mask=mask.to(torch.float64), position_ids=position_ids, return_dict=False)[0]
    return -out


OMNIGEN_PASSED = ("hidden_states = latents (B, C, H, W) as is; timestep = 1 - float32(sigma); input_ids, position_ids "
                  "and attention_mask from OmniGenCollator(pad_token_id=2).process_mllm_input of the prompts' ids "
                  "(encoder_hidden_states (B, L, 1) where encoder_attention_mask is 1: 6 and 4 tokens, left-padded) "
                  "and output images of H 8 x W 8 px; input_img_latents [] and input_image_sizes {}; pred = -output "
                  "(SimpleTuner's omnigen target is latents - noise)")
OMNIGEN_ZERO = {r"patch_embedding\.input_image_proj\.(weight|bias)":
                "it embeds an editing task's input images; text-to-image has none"}


KREA2_LAYERS, KREA2_WIDTH = 3, 8   # num_text_layers, text_hidden_dim: segtrain's text_dim is their product (JOINT)


@exact
def krea2_exact():
    """Krea2TimestepEmbedding computes its sinusoid of 1000 t in float32 (its own, not get_timestep_embedding's), and
    Krea2RMSNorm normalises in float32: here both in float64 (segtrain's sinusoid is float64's, rounded once)."""
    import diffusers.models.transformers.transformer_krea2 as tk

    def forward(self, timestep, dtype):
        half = self.embed_dim // 2
        freqs = torch.exp(-math.log(1e4) * torch.arange(half, dtype=torch.float64) / half)
        args = (timestep.to(torch.float64) * 1e3)[:, None, None] * freqs
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(dtype)
        return self.linear_2(torch.nn.functional.gelu(self.linear_1(emb), approximate="tanh"))

    def norm(self, hidden_states):   # the class upcasts to float32 only: the reference stays in float64
        return torch.nn.functional.rms_norm(hidden_states, (self.dim,), weight=self.weight + 1.0, eps=self.eps)
    tk.Krea2TimestepEmbedding.forward = forward
    tk.Krea2RMSNorm.forward = norm


def krea2_run(model, t):
    # SimpleTuner's Krea2._model_predict_single: the latents packed in 2 x 2 patches (_pack_latents: features
    # (channel, row, column)), encoder_hidden_states = each token's stacked layers (B, L, layers, width), its mask,
    # timestep = timesteps / 1000 (float32), position ids from _position_ids_for_grids (the text at 0, the image at
    # (0, row, column)); the prediction is the output unpacked.
    krea2_exact()
    lat = t["latents"]
    b, c, h, w = lat.shape
    packed = flux_pack(lat)   # Flux's packing, as SimpleTuner's _pack_latents
    text = t["encoder_hidden_states"]
    ehs = text.view(b, text.shape[1], KREA2_LAYERS, KREA2_WIDTH)
    ids = torch.zeros(text.shape[1] + (h // 2) * (w // 2), 3, dtype=torch.float64)
    grid = ids[text.shape[1]:].view(h // 2, w // 2, 3)
    grid[..., 1] = torch.arange(h // 2, dtype=torch.float64)[:, None]
    grid[..., 2] = torch.arange(w // 2, dtype=torch.float64)[None, :]
    timestep = ((t["sigma"].float() * 1000) / 1000.0).double()
    out = model(hidden_states=packed, encoder_hidden_states=ehs, timestep=timestep, position_ids=ids,
                encoder_attention_mask=t["encoder_attention_mask"].bool(), return_dict=False)[0]
    return flux_unpack(out, h, w)


KREA2_PASSED = ("hidden_states = latents packed 2 x 2 (B, H/2 W/2, 4C), features (channel, row, column); "
                "encoder_hidden_states (B, L, 24) N(0, 1) viewed as (B, L, 3 layers, 8); encoder_attention_mask = "
                "bool([1 1 1 1 1 1], [1 1 1 1 0 0]); timestep = float32(1000 sigma) / 1000; position_ids (L + H/2 "
                "W/2, 3): zeros for the text, (0, row, column) for the image; pred = output unpacked (B, C, H, W)")


ANIMATE_F, ANIMATE_TEXT, ANIMATE_IMAGE, ANIMATE_FACE = 3, 512, (5, 16), 16  # latent frames (the reference and 2);
# the class's 512 text tokens (its attention takes the context's last 512 as the text); CLIP tokens (257 x 1280 real);
# the face frames' edge (512 real)
ANIMATE_LENS = [512, 300, 400]   # the first B: each prompt's tokens before the zero padding


def wan_animate_make(gen):
    # The text zero padded after 300 tokens in sample 1 and 400 in sample 2 (WanPipeline's padding), the reference
    # image's CLIP tokens, the condition latents (4 mask + C latent channels), the pose latents of the frames after
    # the reference, and 4 F - 7 face frames, which the face encoder's two halvings bring to F - 1.
    e = randn(gen, B, ANIMATE_TEXT, JOINT)
    for i, n in enumerate(ANIMATE_LENS[:B]):
        e[i, n:] = 0
    return {"encoder_hidden_states": e, "encoder_hidden_states_image": randn(gen, B, *ANIMATE_IMAGE),
            "condition_latents": randn(gen, B, C + 4, ANIMATE_F, H, W),
            "pose_hidden_states": randn(gen, B, C, ANIMATE_F - 1, H, W),
            "face_pixel_values": randn(gen, B, 3, 4 * ANIMATE_F - 7, ANIMATE_FACE, ANIMATE_FACE)}


def wan_animate_run(model, t):
    timestep = (t["sigma"].float() * 1000).double()
    return model(hidden_states=torch.cat([t["latents"], t["condition_latents"]], dim=1), timestep=timestep,
                 encoder_hidden_states=t["encoder_hidden_states"],
                 encoder_hidden_states_image=t["encoder_hidden_states_image"],
                 pose_hidden_states=t["pose_hidden_states"], face_pixel_values=t["face_pixel_values"],
                 return_dict=False)[0]


WAN_ANIMATE_PASSED = ("hidden_states = cat(latents (B, C, F, H, W) = (2, 4, 3, 8, 8), condition_latents (B, C + 4, F, H, "
                      "W)) on channels; timestep = float32(sigma * 1000) (B); encoder_hidden_states (B, 512, 24), "
                      "sample 1's rows from 300 zero; encoder_hidden_states_image (B, 5, 16); pose_hidden_states (B, "
                      "C, F - 1, H, W); face_pixel_values (B, 3, 4 F - 7, 16, 16), all N(0, 1); "
                      "motion_encode_batch_size None (the config's 8); pred = output as is (B, C, F, H, W)")


def anyflow_run(model, t):
    # AnyFlowTransformer3DModel takes (B, F, C, H, W) and per-frame timesteps (B, F); segtrain's layout is (B, C, F, H,
    # W) with one timestep a sample: every frame at 1000 sigma, and r = t (AnyFlow's diffusion intervals).
    x = t["latents"].permute(0, 2, 1, 3, 4)
    timestep = (t["sigma"].float() * 1000).double()[:, None].expand(B, x.shape[1])
    out = model(hidden_states=x, timestep=timestep, r_timestep=timestep,
                encoder_hidden_states=t["encoder_hidden_states"], return_dict=False)[0]
    return out.permute(0, 2, 1, 3, 4)


ANYFLOW_PASSED = ("hidden_states = latents permuted to (B, F, C, H, W) = (2, 2, 4, 8, 8) as the class takes them; "
                  "timestep = r_timestep = float32(sigma * 1000) for every frame (B, F) (r = t: AnyFlow's diffusion "
                  "intervals); encoder_hidden_states (B, L, 24) as wan's; pred = output permuted back to (B, C, F, H, "
                  "W)")

LTX_FRAMERATE = 25   # SimpleTuner's default --framerate for LTX-Video


def ltx_pack(x):
    # LTXPipeline._pack_latents / SimpleTuner's pack_ltx_latents with patch 1: (B, C, F, H, W) -> (B, F*H*W, C)
    b, c, f, h, w = x.shape
    return x.permute(0, 2, 3, 4, 1).reshape(b, f * h * w, c)


def ltx_run(model, t):
    # SimpleTuner's LTXVideo.model_predict: packed latents, timesteps (1000 sigma), the mask as stored,
    # rope_interpolation_scale [1 / (framerate / 8), 32, 32], then unpack_ltx_latents.
    b, c, f, h, w = t["latents"].shape
    timestep = (t["sigma"].float() * 1000).double()
    out = model(ltx_pack(t["latents"]), encoder_hidden_states=t["encoder_hidden_states"], timestep=timestep,
                encoder_attention_mask=t["encoder_attention_mask"], num_frames=f, height=h, width=w,
                rope_interpolation_scale=[1 / (LTX_FRAMERATE / 8), 32, 32], return_dict=False)[0]
    return out.reshape(b, f, h, w, c).permute(0, 4, 1, 2, 3)


LTX_PASSED = ("hidden_states = pack_ltx_latents(latents) (B, F*H*W, C) = (2, 128, 4), tokens (frame, row, col); "
              "timestep = float32(sigma * 1000); encoder_hidden_states (B, L, 24), encoder_attention_mask (B, L) float "
              "1 = token (the model makes it the additive bias (1 - m) * -10000 on the cross-attention keys); "
              "num_frames = F, height = H, width = W; rope_interpolation_scale = [1 / (25 / 8), 32, 32] = [0.32, 32, "
              "32] (SimpleTuner, framerate 25); video_coords = None; pred = unpack_ltx_latents(output) (B, C, F, H, W)")

LTX2_F = 2                      # latent frames
LTX2_TA = (LTX2_F - 1) * 8 + 1  # audio latents: one per video frame at 25 fps (SimpleTuner's expected length)


def ltx2_nv():   # video latents per sample
    return C * LTX2_F * H * W


def ltx2_make(gen):
    # The Gemma connectors' states for each stream (the transformer's encoder_hidden_states and
    # audio_encoder_hidden_states) and their shared mask.
    return {"encoder_hidden_states": randn(gen, B, L, JOINT), "audio_encoder_hidden_states": randn(gen, B, L, JOINT),
            "encoder_attention_mask": text_mask()}


def ltx2_run(model, t):
    # SimpleTuner's LTXVideo2.model_predict without IC-LoRA or intrinsic conditions: pack_ltx2_latents (patch 1),
    # the audio latents packed (B, frames, channels), timestep 1000 sigma for both streams, the connectors' mask for
    # both, fps 25; the sample is segtrain's layout, each sample's video latents then its audio latents.
    nv = ltx2_nv()
    v, a = t["latents"][:, :nv].reshape(B, C, LTX2_F, H, W), t["latents"][:, nv:].reshape(B, LTX2_TA, C)
    timestep = (t["sigma"].float() * 1000).double()
    out_v, out_a = model(ltx_pack(v), audio_hidden_states=a, encoder_hidden_states=t["encoder_hidden_states"],
                         audio_encoder_hidden_states=t["audio_encoder_hidden_states"], timestep=timestep,
                         encoder_attention_mask=t["encoder_attention_mask"],
                         audio_encoder_attention_mask=t["encoder_attention_mask"], num_frames=LTX2_F, height=H, width=W,
                         fps=25, audio_num_frames=LTX2_TA, return_dict=False)
    out_v = out_v.reshape(B, LTX2_F, H, W, C).permute(0, 4, 1, 2, 3)
    return torch.cat([out_v.reshape(B, -1), out_a.reshape(B, -1)], dim=1)


LTX2_PASSED = ("latents (B, C F H W + TA C) = (2, 512 + 9 x 4): each sample's video latents (C, F, H, W) = "
               "(4, 2, 8, 8), then its audio latents (TA, C) = (9, 4), channels last; hidden_states = "
               "pack_ltx2_latents(video) (B, "
               "F*H*W, C), audio_hidden_states = the audio latents; timestep = float32(sigma * 1000) for both streams; "
               "encoder_hidden_states and audio_encoder_hidden_states (B, L, 24) each, encoder_attention_mask = "
               "audio_encoder_attention_mask (B, L) float 1 = token (the model makes it the additive bias (1 - m) * "
               "-10000); num_frames = F, height = H, width = W, fps = 25, audio_num_frames = TA; pred = the video "
               "output unpacked to (B, C, F, H, W), then the audio output, per sample as latents")

class _NearestResize:
    """transformers_cosmos resizes padding_mask with torchvision, which the reference venv lacks: a NEAREST resize to
    the size it already has is the identity, and that is the only case used (the mask is made at the latent size)."""
    class InterpolationMode:
        NEAREST = "nearest"

    class functional:
        @staticmethod
        def resize(x, size, interpolation=None):
            if list(x.shape[-2:]) != list(size):
                raise SystemExit("padding_mask %s would need a real resize to %s" % (tuple(x.shape), size))
            return x


def cosmos_make(gen):
    # SimpleTuner's Cosmos 2 _encode_prompts zeroes the T5 rows after each prompt's length; no mask is passed.
    e = randn(gen, B, L, JOINT)
    e[text_mask() == 0] = 0
    return {"encoder_hidden_states": e, "padding_mask": torch.zeros(1, 1, H, W, dtype=torch.float64)}


def cosmos_run(model, t):
    import diffusers.models.transformers.transformer_cosmos as tc
    tc.transforms = _NearestResize
    s = t["sigma"].float()
    timestep = (s / (s + 1)).double()   # SimpleTuner: sigma / (sigma + 1) in float32
    return model(hidden_states=t["latents"], timestep=timestep, encoder_hidden_states=t["encoder_hidden_states"],
                 padding_mask=t["padding_mask"], return_dict=False)[0]


COSMOS_PASSED = ("hidden_states = latents (B, C, 1, H, W) as is (one frame; SimpleTuner scales x_t by 1 / (sigma + 1) "
                 "before and maps the output to x0 after, both outside the model); timestep = float32(sigma / (sigma + "
                 "1)) (B) = [0.2, 0.40740741] (the model does not rescale); encoder_hidden_states (B, L, 24) as stored, "
                 "sample 1's last 2 rows zero (no mask); padding_mask = zeros (1, 1, H, W) (the pipeline's; batch 1: "
                 "the model repeats it by B); fps = None; attention_mask = None; pred = output as is (B, C, 1, H, W)")

class _TorchNoBf16:
    """`torch` as Kandinsky5AttnProcessor.__call__ sees it during a fixture run: the same module except that
    `torch.bfloat16` is float64, so apply_rotary's final `.to(torch.bfloat16)` is a no-op on the float64 reference's
    tensors instead of rounding the rotated q and k to 8 bits (its `.to(torch.float32)` of x stays: ~1e-7)."""
    bfloat16 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


@exact
def kandinsky5_exact():
    """Two changes to transformer_kandinsky for the float64 reference, both no-ops on what is computed: the
    processor's bfloat16 cast of the rotated q and k (above), and Kandinsky5TimeEmbeddings' sinusoid, which the model
    computes in float32 from a float32 `freqs` attribute (and would then feed a float32 vector to the float64
    in_layer): here cos then sin of t * 10000^(-k / (D/2)), k < D/2, in float64, as exact_timestep_embedding."""
    import types
    import warnings
    import diffusers.models.transformers.transformer_kandinsky as tk
    # the qk RMSNorm gets the float32 `query.float()` and its float64 weight: torch says it cannot fuse that
    warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")
    proc = tk.Kandinsky5AttnProcessor
    if not getattr(proc, "_segtrain_exact", False):
        g = dict(vars(tk), torch=_TorchNoBf16())
        call = proc.__call__
        proc.__call__ = types.FunctionType(call.__code__, g, call.__name__, call.__defaults__, call.__closure__)
        proc._segtrain_exact = True

        def time_forward(self, time):
            half = self.model_dim // 2
            freqs = torch.exp(-math.log(self.max_period) * torch.arange(half, dtype=torch.float64) / half)
            args = torch.outer(time.to(torch.float64), freqs)
            emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(self.in_layer.weight.dtype)
            return self.out_layer(self.activation(self.in_layer(emb)))
        tk.Kandinsky5TimeEmbeddings.forward = time_forward


def kandinsky5_make(gen):
    # Qwen2.5-VL hidden states (L tokens, no mask: SimpleTuner passes none) and the pooled CLIP vector.
    return {"encoder_hidden_states": randn(gen, B, L, JOINT), "pooled_projections": randn(gen, B, POOLED)}


def kandinsky5_run(model, t):
    # SimpleTuner's Kandinsky5Image._model_predict_single: channels-last latents with a frame axis of 1, rope positions
    # per axis in patches (frame 0, rows, cols) and per text token, float32 timesteps (1000 sigma), scale_factor
    # (1, 2, 2), no sparse attention; the output back to (B, C, H, W).
    kandinsky5_exact()
    b, c, h, w = t["latents"].shape
    x = t["latents"].permute(0, 2, 3, 1).unsqueeze(1)
    timestep = (t["sigma"].float() * 1000).double()
    out = model(hidden_states=x, encoder_hidden_states=t["encoder_hidden_states"], timestep=timestep,
                pooled_projections=t["pooled_projections"],
                visual_rope_pos=[torch.arange(1), torch.arange(h // 2), torch.arange(w // 2)],
                text_rope_pos=torch.arange(t["encoder_hidden_states"].shape[1]), scale_factor=(1, 2, 2),
                sparse_params=None, return_dict=False)   # the tensor itself, not a tuple
    return out.squeeze(1).permute(0, 3, 1, 2)


KANDINSKY5_PASSED = ("hidden_states = latents.permute(0, 2, 3, 1).unsqueeze(1) (B, 1, H, W, C), channels last; "
                     "encoder_hidden_states (B, L, 24) as stored (no mask); pooled_projections (B, 20); timestep = "
                     "float32(sigma * 1000); visual_rope_pos = [arange(1), arange(H/2), arange(W/2)]; text_rope_pos = "
                     "arange(L); scale_factor = (1, 2, 2); sparse_params = None; pred = output.squeeze(1).permute(0, "
                     "3, 1, 2) (B, C, H, W). The processor's bfloat16 cast of the rotated q, k is a no-op and the "
                     "time sinusoid is float64 (docs/FIXTURES.md)")

def kandinsky5_video_run(model, t):
    # SimpleTuner's Kandinsky5Video.model_predict (text to video): channels-last latents (B, F, H, W, C), then
    # visual_cond's zero reference latents and zero mask (no conditioning_latents), rope positions per axis in patches
    # and per text token, float32 timesteps (1000 sigma), scale_factor (1, 2, 2), no sparse attention; the output
    # back to (B, C, F, H, W).
    kandinsky5_exact()
    b, c, f, h, w = t["latents"].shape
    x = t["latents"].permute(0, 2, 3, 4, 1)
    x = torch.cat([x, torch.zeros_like(x), torch.zeros(b, f, h, w, 1, dtype=x.dtype)], dim=-1)
    timestep = (t["sigma"].float() * 1000).double()
    out = model(hidden_states=x, encoder_hidden_states=t["encoder_hidden_states"], timestep=timestep,
                pooled_projections=t["pooled_projections"],
                visual_rope_pos=[torch.arange(f), torch.arange(h // 2), torch.arange(w // 2)],
                text_rope_pos=torch.arange(t["encoder_hidden_states"].shape[1]), scale_factor=(1, 2, 2),
                sparse_params=None, return_dict=False)
    return out.permute(0, 4, 1, 2, 3)


KANDINSKY5_VIDEO_PASSED = ("hidden_states = cat([latents.permute(0, 2, 3, 4, 1), zeros, zeros (B, F, H, W, 1)], -1) "
                           "(B, F, H, W, 2C + 1): visual_cond's reference latents and mask, zero in text to video; "
                           "encoder_hidden_states (B, L, 24) as stored (no mask); pooled_projections (B, 20); timestep "
                           "= float32(sigma * 1000); visual_rope_pos = [arange(F), arange(H/2), arange(W/2)]; "
                           "text_rope_pos = arange(L); scale_factor = (1, 2, 2); sparse_params = None; pred = "
                           "output.permute(0, 4, 1, 2, 3) (B, C, F, H, W). As kandinsky5: no bfloat16 cast of q, k, a "
                           "float64 time sinusoid")

ACE_T = 32        # audio latent frames (16 tokens after the patch of 2)
ACE_WINDOW = 3    # sliding window: |i - j| <= 3 of the 16 tokens (128 in the real model)


def ace_step_make(gen):
    # context_latents = cat([source latents, chunk mask], -1), as ACE-Step 1.5 builds them (text-to-music: the source
    # is the silence latent, random here; the chunk mask is all ones); encoder_hidden_states stands for the condition
    # encoder's packed output (text + lyrics + timbre), 24 wide.
    src = randn(gen, B, ACE_T, C)
    return {"context_latents": torch.cat([src, torch.ones(B, ACE_T, C, dtype=torch.float64)], -1),
            "encoder_hidden_states": randn(gen, B, L, JOINT)}


def ace_step_run(model, t):
    # SimpleTuner's ACE-Step 1.5 path: the decoder gets the noisy latents (B, T, C), timestep = timestep_r = the
    # flow-matching t in 0..1 (its noisy latents are t * noise + (1 - t) * x: t is sigma), context_latents; the
    # output is the flow prediction as is.
    return model(hidden_states=t["latents"], timestep=t["sigma"], timestep_r=t["sigma"],
                 encoder_hidden_states=t["encoder_hidden_states"], context_latents=t["context_latents"],
                 return_dict=False)[0]


ACE_STEP_PASSED = ("hidden_states = latents (B, T, C) = (2, 32, 4), channels last; context_latents (B, T, 2C) as stored "
                   "(concatenated BEFORE the latents: conv input channels (context 0..7, latents 8..11)); timestep = "
                   "timestep_r = sigma (the model multiplies by 1000; t - r = 0 feeds time_embed_r); "
                   "encoder_hidden_states (B, L, 24), no mask (the class takes none); sliding_window 3, layer 0 "
                   "sliding (|i - j| <= 3), layer 1 full; pred = output as is (B, T, C)")

ANIMA_QWEN = 5      # Qwen3 tokens (the adapter's keys and values); the T5 ids are the L = 6 queries
ANIMA_VOCAB = 32    # T5 vocabulary of the tiny adapter (32128 real)
ANIMA_MIN_LEN = 8   # the adapter pads its output with zero tokens to this length (512 real)


def anima_make(gen):
    # SimpleTuner's prepare_condition_inputs: Qwen3 hidden states (padding positions hold the encoder's output,
    # random here; no mask is kept), T5 ids padded with 0, and per-token T5 weights (B, L, 1): 1.0 for the tokens,
    # 0 for the padding. Sample 1: 4 T5 tokens of 6 (sample 2: 5). The ids are stored as float32 (exact small integers).
    ids = torch.randint(1, ANIMA_VOCAB, (B, L), generator=gen).to(torch.float64)
    ids[text_mask() == 0] = 0
    w = text_mask()[:, :, None]
    return {"qwen_hidden_states": randn(gen, B, ANIMA_QWEN, JOINT), "t5xxl_ids": ids, "t5xxl_weights": w,
            "padding_mask": torch.zeros(1, 1, H, W, dtype=torch.float64)}


def anima_run(model, t):
    # SimpleTuner's AnimaTransformerModel.forward: text_conditioner(qwen states, t5 ids) with no masks, times the T5
    # weights, padded with zero tokens (the class pads to min_sequence_length itself; the weights apply to the first
    # L rows), then the Cosmos transformer with timestep = sigma (flow matching: SimpleTuner's timesteps / 1000, in
    # float32; the model does not rescale) and the zero padding mask.
    import diffusers.models.transformers.transformer_cosmos as tc
    tc.transforms = _NearestResize
    cond = model.text_conditioner(t["qwen_hidden_states"], t["t5xxl_ids"].long())
    w = t["t5xxl_weights"]
    cond = cond * torch.cat([w, torch.ones(B, cond.shape[1] - w.shape[1], 1, dtype=w.dtype)], 1)
    return model(hidden_states=t["latents"], timestep=t["sigma"].float().double(), encoder_hidden_states=cond,
                 padding_mask=t["padding_mask"], return_dict=False)[0]


ANIMA_PASSED = ("text_conditioner(source_hidden_states = qwen_hidden_states (B, 5, 24), target_input_ids = t5xxl_ids "
                "(B, L) as int64; no masks) (B, 8, 24), padded with zero tokens from L = 6 to min_sequence_length 8, "
                "times t5xxl_weights (B, L, 1) on its first L rows = encoder_hidden_states of the transformer; "
                "hidden_states = latents (B, C, 1, H, W) as is; timestep = float32(sigma) (flow matching, not "
                "rescaled); padding_mask = zeros (1, 1, H, W); pred = output as is (B, C, 1, H, W). Transformer at the "
                "folder root, text_conditioner in its subfolder; its gradients are grad.text_conditioner.<name>")

FLUX_KW = dict(patch_size=1, in_channels=4 * C, num_layers=2, num_single_layers=2, attention_head_dim=16,
               num_attention_heads=2, joint_attention_dim=JOINT, pooled_projection_dim=POOLED,
               axes_dims_rope=[4, 6, 6])
SD3_KW = dict(sample_size=H, patch_size=2, in_channels=C, num_layers=2, attention_head_dim=16, num_attention_heads=2,
              joint_attention_dim=JOINT, caption_projection_dim=32, pooled_projection_dim=POOLED, out_channels=C,
              pos_embed_max_size=8)

# Parameters whose gradient is zero by construction, with the reason: the check wants them exactly zero and every
# other gradient non-zero.
SD3_ZERO = {r"transformer_blocks\.1\.attn\.(add_q_proj\.(weight|bias)|norm_added_q\.weight)":
            "the last block is context_pre_only: its text queries only produce text outputs, which it drops"}

FIXTURES = {}


def fixture(name, cls, kw, make, run, passed, save=None, zero=None, frames=None, shape=None, size=(H, W),
            size_hw=HW_SIZE, hw_note=None, bf16=None, factored=None, parts=None):
    """save: extra save_pretrained arguments; zero: {name regex: why its gradient is zero by construction};
    frames: a video's latent frames (latents and target (B, C, F, H, W); else (B, C, H, W)); shape: a function
    giving the latents' shape from the current B, H, W where it is neither; size: parity.safetensors' (H, W);
    size_hw: parity_hw.safetensors' (H, W), None for a class without a spatial latent; hw_note: what differs in
    the call at that size; bf16: regex of parameters rounded to bfloat16 and saved BF16; factored: regex of Linear
    weights whose gradient is stored as its two factors; parts: {subfolder: (class, kwargs)} of further models
    trained with it, each saved in <fixture>/<subfolder> and attached to the transformer as the submodule of that
    name while the reference runs (docs/FIXTURES.md)."""
    FIXTURES[name] = dict(cls=cls, kw=kw, make=make, run=run, passed=passed, save=save or {}, zero=zero or {},
                          frames=frames, shape=shape, size=size, size_hw=size_hw, hw_note=hw_note, bf16=bf16,
                          factored=factored, parts=parts or {})


def latent_shape(fx):
    if fx["shape"]:
        return fx["shape"]()
    return (B, C, H, W) if fx["frames"] is None else (B, C, fx["frames"], H, W)


fixture("flux-dev", "FluxTransformer2DModel", dict(FLUX_KW, guidance_embeds=True), flux_make(True), flux_run,
        FLUX_PASSED)
fixture("flux-schnell", "FluxTransformer2DModel", dict(FLUX_KW, guidance_embeds=False), flux_make(False), flux_run,
        FLUX_PASSED, save={"max_shard_size": "200KB"})
fixture("sd3", "SD3Transformer2DModel", dict(SD3_KW), sd3_make, sd3_run, SD3_PASSED, zero=SD3_ZERO)
fixture("sd35-large", "SD3Transformer2DModel", dict(SD3_KW, qk_norm="rms_norm"), sd3_make, sd3_run, SD3_PASSED,
        zero=SD3_ZERO)
fixture("sd35-medium", "SD3Transformer2DModel", dict(SD3_KW, qk_norm="rms_norm", dual_attention_layers=[0]),
        sd3_make, sd3_run, SD3_PASSED, zero=SD3_ZERO)

# 1 joint + 1 single block (not 2 + 2): AuraFlow's feed-forward is 256 wide at any hidden size (find_multiple(.., 256)),
# and 2 + 2 would take the folder over 1 MB.
fixture("auraflow", "AuraFlowTransformer2DModel",
        dict(sample_size=H, patch_size=2, in_channels=C, num_mmdit_layers=1, num_single_dit_layers=1,
             attention_head_dim=16, num_attention_heads=2, joint_attention_dim=JOINT, caption_projection_dim=32,
             out_channels=C, pos_embed_max_size=64),
        auraflow_make, auraflow_run, AURAFLOW_PASSED)


# Chroma: one double and one single block, a 1-layer approximator 32 wide (approximator_num_channels 32: 8 time,
# 8 guidance, 16 modulation-index sinusoid channels).
fixture("chroma", "ChromaTransformer2DModel",
        dict(patch_size=1, in_channels=4 * C, num_layers=1, num_single_layers=1, attention_head_dim=16,
             num_attention_heads=2, joint_attention_dim=JOINT, axes_dims_rope=[4, 6, 6], approximator_num_channels=32,
             approximator_hidden_dim=32, approximator_layers=1),
        chroma_make, chroma_run, CHROMA_PASSED)

# Qwen Image has one kind of block; two of them, because with one the text stream after the attention
# (to_add_out, txt_mlp, the text queries) would reach nothing and have zero gradients.
fixture("qwen-image", "QwenImageTransformer2DModel",
        dict(patch_size=2, in_channels=4 * C, out_channels=C, num_layers=2, attention_head_dim=16,
             num_attention_heads=2, joint_attention_dim=JOINT, axes_dims_rope=[4, 6, 6]),
        qwen_make, qwen_run, QWEN_PASSED,
        zero={r"transformer_blocks\.1\.(attn\.(to_add_out\.(weight|bias)|add_q_proj\.(weight|bias)|norm_added_q\.weight)"
              r"|txt_mlp\..*)":
              "the last block's text stream after the attention (and its text queries) reaches no output: the model "
              "returns the image tokens only"})

# Flux.2 (dev: guidance embedding): one double and one single block; 4 rope axes of 4 at theta 2000 (the default).
fixture("flux2", "Flux2Transformer2DModel",
        dict(patch_size=1, in_channels=4 * C, num_layers=1, num_single_layers=1, attention_head_dim=16,
             num_attention_heads=2, joint_attention_dim=JOINT, timestep_guidance_channels=32,
             axes_dims_rope=[4, 4, 4, 4], guidance_embeds=True),
        flux2_make, flux2_run, FLUX2_PASSED)

# HunyuanVideo 1.0 (guidance-distilled, text-to-video): one refiner, one double and one single block.
fixture("hunyuanvideo", "HunyuanVideoTransformer3DModel",
        dict(in_channels=C, out_channels=C, num_attention_heads=2, attention_head_dim=16, num_layers=1,
             num_single_layers=1, num_refiner_layers=1, patch_size=2, patch_size_t=1, guidance_embeds=True,
             text_embed_dim=JOINT, pooled_projection_dim=POOLED, rope_axes_dim=[4, 6, 6]),
        hunyuanvideo_make, hunyuanvideo_run, HUNYUANVIDEO_PASSED, frames=2,
        zero=HV_REFINER_ZERO)

# HunyuanVideo 1.5 (t2v): one refiner layer, two double-stream blocks (with one, the text stream after the attention
# would reach nothing), patch 1 x 1 x 1 as the real model. context_embedder_2 (ByT5) is 2048 wide whatever the
# kwargs (linear_2 is 2048 x 2048): its three linear weights are stored BF16 (8.6 MB instead of 17) and their
# gradients as two factors each (the dense linear_2 gradient alone would be another 16.8 MB).
fixture("hunyuanvideo15", "HunyuanVideo15Transformer3DModel",
        dict(in_channels=2 * C + 1, out_channels=C, num_attention_heads=2, attention_head_dim=16, num_layers=2,
             num_refiner_layers=1, patch_size=1, patch_size_t=1, text_embed_dim=JOINT, text_embed_2_dim=HV15_T5,
             image_embed_dim=HV15_IMG, rope_axes_dim=[4, 6, 6], task_type="t2v"),
        hunyuanvideo15_make, hunyuanvideo15_run, HUNYUANVIDEO15_PASSED, frames=2,
        bf16=r"context_embedder_2\.linear_[123]\.weight", factored=r"context_embedder_2\.linear_[123]\.weight",
        zero=dict(HV_REFINER_ZERO, **{
            r"image_embedder\..*": "t2v: image_embeds are all zero, so the model multiplies the image projection by "
                                   "0.0 and masks its tokens",
            r"transformer_blocks\.1\.(attn\.(to_add_out\.(weight|bias)|add_q_proj\.(weight|bias)|norm_added_q\.weight)"
            r"|ff_context\..*)":
            "the last block's text stream after the attention (and its text queries) reaches no output: the model "
            "returns the image tokens only"}))

# LongCat Image: one double and one single block (pooled_projection_dim is stored in the config but unused).
fixture("longcat-image", "LongCatImageTransformer2DModel",
        dict(patch_size=1, in_channels=4 * C, num_layers=1, num_single_layers=1, attention_head_dim=16,
             num_attention_heads=2, joint_attention_dim=JOINT, pooled_projection_dim=POOLED, axes_dims_rope=[4, 6, 6]),
        longcat_make, longcat_run, LONGCAT_PASSED)

# HiDream: one double and one single block, 3 routed experts with 2 active; 16 wide (2 heads of 8) since every
# SwiGLU is at least 256 wide (multiple_of 256), and there are 9 of them.
fixture("hidream", "HiDreamImageTransformer2DModel",
        dict(patch_size=2, in_channels=C, out_channels=C, num_layers=1, num_single_layers=1, attention_head_dim=8,
             num_attention_heads=2, caption_channels=[JOINT, JOINT], text_emb_dim=POOLED, num_routed_experts=3,
             num_activated_experts=2, axes_dims_rope=[4, 2, 2], max_resolution=[H, W], llama_layers=[0, 1]),
        hidream_make, hidream_run, HIDREAM_PASSED, size_hw=(6, 8), hw_note=HIDREAM_HW)

# PixArt Sigma: two blocks; out_channels 2C (learned variance, as the real 8); cross_attention_dim = hidden (as 1152);
# interpolation_scale 2 and no micro-conditions, as PixArt-Sigma-XL-2-1024-MS.
fixture("pixart-sigma", "PixArtTransformer2DModel",
        dict(num_attention_heads=2, attention_head_dim=16, in_channels=C, out_channels=2 * C, num_layers=2,
             cross_attention_dim=32, caption_channels=JOINT, sample_size=H, patch_size=2, interpolation_scale=2,
             use_additional_conditions=False),
        masked_text_make, pixart_run, PIXART_PASSED, size=PIXART_HW, size_hw=(12, 16),
        zero={r"transformer_blocks\.\d+\.attn[12]\.to_k\.bias":
              "no qk norm in either attention: a key bias adds the same q . b to every logit of a query (softmax "
              "invariant, the -10000 mask bias included); autograd gives ~1e-17, stored as exact 0"})

# Sana 1.0: two blocks, linear self-attention of 4 heads x 8 (70 x 32), the cross-attention of 2 heads x 16 (20 x 112),
# GLUMBConv 80 wide (int(2.5 D)), the text 24 wide (2304), 1 x 1 patches of an 8 x 8 latent (DC-AE's 32 channels: 4).
fixture("sana", "SanaTransformer2DModel",
        dict(in_channels=C, out_channels=C, num_attention_heads=4, attention_head_dim=8, num_layers=2,
             num_cross_attention_heads=2, cross_attention_head_dim=16, cross_attention_dim=32, caption_channels=JOINT,
             mlp_ratio=2.5, sample_size=H, patch_size=1),
        masked_text_make, sana_run, SANA_PASSED, zero=SANA_ZERO)
# ... and Sana 1.5's q and k RMSNorm-ed across the heads (its keys' biases then reach the loss)
fixture("sana-1.5", "SanaTransformer2DModel", dict(FIXTURES["sana"]["kw"], qk_norm="rms_norm_across_heads"),
        masked_text_make, sana_run, SANA_PASSED)

# Sana-Video: two blocks of 2 heads x 16 (20 x 112), the cross-attention the same, GLUMBTempConv 96 wide (mlp_ratio 3,
# 2B's), q/k RMSNorms; (1, 2, 2) patches of 3 latent frames of 8 x 8 (Wan's VAE's 16 channels: 4), so that the
# temporal convolution takes every tap and both ends.
SANAVIDEO_PASSED = ("hidden_states = latents (B, C, F, H, W) = (2, 4, 3, 8, 8) as is (Conv3d patch (1, 2, 2), tokens "
                    "(frame, row, col)); timestep = float32(sigma * 1000) (B); encoder_hidden_states (B, L, 24) and "
                    "encoder_attention_mask (B, L) float, 1 = token (the model's additive (1 - m) * -10000 key bias); "
                    "pred = the output (B, C, F, H, W)")
fixture("sanavideo", "SanaVideoTransformer3DModel",
        dict(in_channels=C, out_channels=C, num_attention_heads=2, attention_head_dim=16, num_layers=2,
             num_cross_attention_heads=2, cross_attention_head_dim=16, cross_attention_dim=32, caption_channels=JOINT,
             mlp_ratio=3.0, sample_size=H, patch_size=[1, 2, 2], qk_norm="rms_norm_across_heads", rope_max_seq_len=32),
        masked_text_make, sana_run, SANAVIDEO_PASSED, frames=3)

# Wan 2.1 text-to-video: two blocks, ffn 64 wide (1.3B: 8960 for 1536).
fixture("wan", "WanTransformer3DModel",
        dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=C, out_channels=C,
             text_dim=JOINT, freq_dim=256, ffn_dim=64, num_layers=2, cross_attn_norm=True,
             qk_norm="rms_norm_across_heads", eps=1e-6),
        wan_make, wan_run, WAN_PASSED, frames=2)

# Wan 2.1 VACE: the wan fixture's backbone with two VACE blocks (vace_layers [0, 1]: a hint after each main block; the
# real 1.3B has 15, every 2nd of 30, the 14B 8, every 5th of 40) and 8 control channels (96 real).
fixture("wan-vace", "WanVACETransformer3DModel",
        dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=C, out_channels=C,
             text_dim=JOINT, freq_dim=256, ffn_dim=64, num_layers=2, cross_attn_norm=True,
             qk_norm="rms_norm_across_heads", eps=1e-6, vace_layers=[0, 1], vace_in_channels=VACE_IN),
        wan_vace_make, wan_vace_run, WAN_VACE_PASSED, frames=2)

# AnyFlow (bidirectional T2V, NVIDIA's AnyFlow-Wan2.1-T2V): the wan fixture's backbone with the delta embedder,
# gate_value 0.25 and deltatime_type "r" (its defaults).
fixture("anyflow", "AnyFlowTransformer3DModel",
        dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=C, out_channels=C,
             text_dim=JOINT, freq_dim=256, ffn_dim=64, num_layers=2, cross_attn_norm=True, eps=1e-6),
        wan_make, anyflow_run, ANYFLOW_PASSED, frames=2)
# ... with deltatime_type "t-r" (the delta embedder reads t - r = 0 here) and gate_value 0.5.
fixture("anyflow-interval", "AnyFlowTransformer3DModel",
        dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=C, out_channels=C,
             text_dim=JOINT, freq_dim=256, ffn_dim=64, num_layers=2, cross_attn_norm=True, eps=1e-6, gate_value=0.5,
             deltatime_type="t-r"),
        wan_make, anyflow_run, ANYFLOW_PASSED, frames=2)

# Wan 2.2 Animate: the wan fixture's backbone with the image-to-video inputs (in_channels 2 C + 4, CLIP tokens 16 wide
# through added keys and values of the hidden width), a face adapter after each block (5th real), the motion encoder
# at 16 px (512 real: 7 halvings, here 2) with channels 4, 6, 8 at edges 16, 8, 4 (32 ... 512 real), style 16 (512),
# motion_dim 4 (20), motion vectors 12 wide (512), the face encoder 8 wide (1024) with 2 heads (4).
fixture("wan-animate", "WanAnimateTransformer3DModel",
        dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=2 * C + 4,
             latent_channels=C, out_channels=C, text_dim=JOINT, freq_dim=256, ffn_dim=64, num_layers=2,
             cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=ANIMATE_IMAGE[1],
             added_kv_proj_dim=32, motion_encoder_channel_sizes={"4": 8, "8": 6, "16": 4},
             motion_encoder_size=ANIMATE_FACE, motion_style_dim=16, motion_dim=4, motion_encoder_dim=12,
             face_encoder_hidden_dim=8, face_encoder_num_heads=2, inject_face_latents_blocks=1),
        wan_animate_make, wan_animate_run, WAN_ANIMATE_PASSED, frames=ANIMATE_F)

# Lumina-Image 2.0: one context and one noise refiner, two joint blocks, 2 heads x 24 with 1 kv head (24 x 96 and 8 kv
# heads real), rotary axes (8, 8, 8) ((32, 32, 32)), the feed-forward 4 hidden (multiple_of 16: 192; 9216 real).
fixture("lumina2", "Lumina2Transformer2DModel",
        dict(sample_size=H, patch_size=2, in_channels=C, hidden_size=48, num_layers=2, num_refiner_layers=1,
             num_attention_heads=2, num_kv_heads=1, multiple_of=16, norm_eps=1e-5, axes_dim_rope=(8, 8, 8),
             axes_lens=(300, 512, 512), cap_feat_dim=JOINT),
        masked_text_make, lumina2_run, LUMINA2_PASSED)

# Boogu Image (SimpleTuner's boogu_image, no diffusers class): one context, noise and reference-image refiner, two
# double-stream and one single-stream layer, 2 heads x 16 with 1 kv head (24 x 96 with 8 real), rotary axes (4, 6, 6)
# ((32, 32, 32)), the feed-forward 4 hidden (multiple_of 16: 128), the instruction 24 wide (one layer, "mean").
# Text to image passes no reference images: the reference-image path runs on no rows.
fixture("boogu-image", "simpletuner:boogu_image.transformer.BooguImageTransformer2DModel",
        dict(patch_size=2, in_channels=C, hidden_size=32, num_layers=3, num_double_stream_layers=2,
             num_refiner_layers=1, num_attention_heads=2, num_kv_heads=1, multiple_of=16, norm_eps=1e-5,
             axes_dim_rope=(4, 6, 6), axes_lens=(64, 32, 32),
             instruction_feature_configs=dict(instruction_feat_dim=JOINT, reduce_type="mean",
                                              num_instruction_feat_layers=1)),
        masked_text_make, boogu_run, BOOGU_PASSED,
        zero={r"ref_image_refiner\..*|ref_image_patch_embedder\..*|image_index_embedding":
              "text to image: no reference images, so the reference-image embedder, index embedding and refiner "
              "run on no rows"})

# Mage-Flow (SimpleTuner's mageflow, no diffusers class): two of its one kind of block (with one, the text stream
# after the attention would reach nothing), 2 heads x 16 (24 x 128 real), rotary axes (4, 6, 6) ((16, 56, 56)), the
# latent's channels as they are (patch 1; 128 real), the text 24 wide (Qwen3-VL's 2560).
fixture("mageflow", "simpletuner:mageflow.transformer.MageFlowTransformer2DModel",
        dict(in_channels=C, out_channels=C, context_in_dim=JOINT, hidden_size=32, num_heads=2, depth=2,
             axes_dim=[4, 6, 6], patch_size=1),
        masked_text_make, mageflow_run, MAGEFLOW_PASSED,
        zero={r"transformer_blocks\.1\.(attn\.(to_add_out\.(weight|bias)|add_q_proj\.(weight|bias)|norm_added_q\.weight)"
              r"|txt_mlp\..*)":
              "the last block's text stream after the attention (and its text queries) reaches no output: the model "
              "returns the image tokens only"})

# Wan 2.2 S2V (SimpleTuner's wan_s2v, its own WanS2VTransformer3DModel): three blocks with an audio injector after
# blocks 0 and 2 (12 of 40 real), 2 heads x 16 (40 x 128 real), ffn 64 (13824), the audio 8 wide (1024) over 3 layers
# (25), pose_dim 16 as SimpleTuner's zero pose latents have it; 8 latent frames, so that the audio makes 2 chunks.
fixture("wan-s2v", "simpletuner:wan_s2v.transformer.WanS2VTransformer3DModel",
        dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=C, out_channels=C,
             text_dim=JOINT, freq_dim=256, audio_dim=S2V_AUDIO, audio_inject_layers=[0, 2], enable_adain=True,
             adain_mode="attn_norm", pose_dim=16, ffn_dim=64, num_layers=3, num_weighted_avg_layers=S2V_LAYERS,
             cross_attn_norm=True, eps=1e-6, rope_max_seq_len=1024, enable_framepack=True,
             framepack_drop_mode="padd", add_last_motion=True, zero_timestep=True),
        wan_s2v_make, wan_s2v_run, WAN_S2V_PASSED, frames=S2V_F,
        zero={r"frame_packer\..*": "training drops the motion frames (drop_motion_frames True): the frame packer's "
                                   "output is cut to no tokens",
              r"condition_embedder\.pose_embedder\.weight": "SimpleTuner trains on zero pose latents: only the "
                                                            "bias reaches the tokens"})
# LongCat-Video (SimpleTuner's longcat_video, no diffusers class): two blocks of 2 heads x 16 (32 x 128 real), the
# adaLN time width 16 (512), the sinusoid 32 (256), the feed-forward's SwiGLU int(2 * 128 / 3) rounded up to 256
# (multiple_of: 11008 real), the text 24 wide (4096), text_tokens_zero_pad as the published config (true), (1, 2, 2)
# patches of 2 latent frames.
fixture("longcat-video", "simpletuner:longcat_video.transformer.LongCatVideoTransformer3DModel",
        dict(in_channels=C, out_channels=C, hidden_size=32, depth=2, num_heads=2, caption_channels=JOINT, mlp_ratio=4,
             adaln_tembed_dim=16, frequency_embedding_size=32, patch_size=(1, 2, 2), text_tokens_zero_pad=True),
        masked_text_make, longcat_video_run, LONGCAT_VIDEO_PASSED, frames=2)

# Z-Image: as lumina2's, 2 heads x 24 (30 x 128 real), the feed-forward int(48 / 3 * 8) = 128 (10240 real); 16 image
# tokens, so 16 of the 32 image rows are x_pad_token, and each caption is padded to 32 rows with cap_pad_token.
fixture("z-image", "ZImageTransformer2DModel",
        dict(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=C, dim=48, n_layers=2, n_refiner_layers=1,
             n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True, cap_feat_dim=JOINT, rope_theta=256.0,
             t_scale=1000.0, axes_dims=[8, 8, 8], axes_lens=[64, 32, 32]),
        masked_text_make, zimage_run, ZIMAGE_PASSED)

# ERNIE-Image: two blocks of 2 heads x 16 (32 x 128 real), the feed-forward 64 (12288), patch 1 as the real
# 128-channel model (64 image tokens), rotary axes (4, 6, 6) ((32, 48, 48)), text_proj from 24 (3072).
fixture("ernie", "ErnieImageTransformer2DModel",
        dict(hidden_size=32, num_attention_heads=2, num_layers=2, ffn_hidden_size=64, in_channels=C, out_channels=C,
             patch_size=1, text_in_dim=JOINT, rope_theta=256, rope_axes_dim=(4, 6, 6), eps=1e-6, qk_layernorm=True),
        masked_text_make, ernie_run, ERNIE_PASSED)

# Ideogram 4: two blocks of 2 heads x 16 (18 x 256 real), the feed-forward 64 (12288), adaln_dim 16 (512),
# mrope_section (2, 2, 2) of 8 frequencies ((24, 20, 20) of 128), text 24 wide (53248), patch 1 (64 image tokens).
fixture("ideogram", "Ideogram4Transformer2DModel",
        dict(in_channels=C, num_layers=2, attention_head_dim=16, num_attention_heads=2, intermediate_size=64,
             adaln_dim=16, llm_features_dim=JOINT, rope_theta=IDEOGRAM_THETA, mrope_section=(2, 2, 2), norm_eps=1e-5),
        masked_text_make, ideogram_run, IDEOGRAM_PASSED)

# OmniGen: two Phi-3 blocks of 2 heads x 16 (32 x 96 real) with 1 key-value head (32), the feed-forward 64 (8192),
# 64 token ids (32064), the sine-cosine table 16 wide (192); original_max_position_embeddings 20 (4096), so the
# 23-position sequence takes the long factors; max_position_embeddings 160 (131072).
fixture("omnigen", "OmniGenTransformer2DModel",
        dict(in_channels=C, patch_size=2, hidden_size=32, rms_norm_eps=1e-5, num_attention_heads=2,
             num_key_value_heads=1, intermediate_size=64, num_layers=2, pad_token_id=5, vocab_size=64,
             max_position_embeddings=160, original_max_position_embeddings=20, rope_base=10000,
             rope_scaling=OMNIGEN_FACTORS, pos_embed_max_size=16),
        omnigen_make, omnigen_run, OMNIGEN_PASSED, zero=OMNIGEN_ZERO)
# ... and within its original context (original_max_position_embeddings 64): the short factors
fixture("omnigen-short", "OmniGenTransformer2DModel",
        dict(FIXTURES["omnigen"]["kw"], original_max_position_embeddings=64),
        omnigen_make, omnigen_run, OMNIGEN_PASSED, zero=OMNIGEN_ZERO)

# Krea 2: two blocks of 2 heads x 16 (48 x 128 real) with 1 key-value head (12), the feed-forward 64 (16384); the text
# fusion on 3 tapped layers of 8 (12 of 2560), 2 heads with 1 key-value head (20, 20), feed-forward 48 (6912), 2
# layerwise and 1 refiner block (2 and 2); rotary axes (4, 6, 6) ((32, 48, 48)).
fixture("krea2", "Krea2Transformer2DModel",
        dict(in_channels=4 * C, num_layers=2, attention_head_dim=16, num_attention_heads=2, num_key_value_heads=1,
             intermediate_size=64, timestep_embed_dim=256, text_hidden_dim=KREA2_WIDTH, num_text_layers=KREA2_LAYERS,
             text_num_attention_heads=2, text_num_key_value_heads=1, text_intermediate_size=48,
             num_layerwise_text_blocks=2, num_refiner_text_blocks=1, axes_dims_rope=(4, 6, 6), rope_theta=1000.0,
             norm_eps=1e-5),
        masked_text_make, krea2_run, KREA2_PASSED)

# Flux.3: two mode blocks a mode and two single blocks of 2 heads x 16 (24 x 128 real), rotary axes (4, 4, 4, 4)
# ((32, 32, 32, 32)), the text 24 wide (20480), 4 C = 16 packed channels (128).
fixture("flux3", "Flux3Transformer2DModel",
        dict(in_channels=4 * C, cond_in_channels=4 * C, num_layers=2, num_single_layers=2, attention_head_dim=16,
             num_attention_heads=2, joint_attention_dim=JOINT, timestep_channels=256, mlp_ratio=3.0,
             axes_dims_rope=(4, 4, 4, 4), rope_theta=10000, eps=1e-6),
        flux3_make, flux3_run, FLUX3_PASSED, zero=FLUX3_ZERO)

# Qwen-Image 2.1: two blocks of 2 heads x 16 (32 x 128 real), rotary axes (4, 6, 6) ((16, 56, 56)), the text 24 wide
# (4096), 4 C = 16 packed channels (64), 16 image tokens (4 encoder slots).
fixture("qwen-image-2.1", "QwenImage21Transformer2DModel",
        dict(patch_size=1, in_channels=4 * C, out_channels=4 * C, num_layers=2, attention_head_dim=16,
             num_attention_heads=2, context_in_dim=JOINT, mlp_ratio=3, axes_dims_rope=(4, 6, 6), eps=1e-6,
             causal_condition=True),
        masked_text_make, qwen21_run, QWEN21_PASSED)

# MiniMax-H3: two blocks and one refiner block of 2 heads x 24 over a 32-wide stream (56 x 128 over 5376 real: heads x
# head wider than the stream), the feed-forward 64 (14336), rope_freq_dim 2 (16; 12 of 24 channels turn, 96 of 128),
# freq_dim 32 (256), the time MLP 48 -> 16 (5376 -> 2688), the text 24 wide (5120), 2 latent frames (5 n + 2).
fixture("minimaxh3", "MiniMaxH3Transformer3DModel",
        dict(num_attention_heads=2, attention_head_dim=24, hidden_size=32, num_layers=2, num_refiner_layers=1,
             ffn_dim=64, in_channels=C, audio_in_channels=8, patch_size=(1, 2, 2), text_dim=JOINT, freq_dim=32,
             time_embed_hidden_dim=48, time_embed_dim=16, rope_freq_dim=2, rope_theta=10000.0),
        masked_text_make, minimax_run, MINIMAX_PASSED, zero=MINIMAX_ZERO, frames=2)

# Cosmos 3: two mixture-of-transformers layers of 2 heads x 16 with 1 key-value head over a 32-wide stream (32 x 128
# with 8 over 4096: Cosmos3-Nano's), the SwiGLU 64 (12288), 64 token ids (151936), rope_axes_dim (2, 2, 2) of 8
# frequencies ((24, 20, 20) of 64), 4 latent channels patched 2 x 2 (48), a sound head of 8 (loaded, untrained).
fixture("cosmos3", "Cosmos3OmniTransformer",
        dict(head_dim=16, hidden_size=32, intermediate_size=64, latent_channel=C, latent_patch_size=2,
             num_attention_heads=2, num_hidden_layers=2, num_key_value_heads=1, patch_latent_dim=4 * C,
             rms_norm_eps=1e-6, rope_theta=COSMOS3_THETA, vocab_size=64, rope_axes_dim=[2, 2, 2], sound_gen=True,
             sound_dim=8),
        omnigen_make, cosmos3_run, COSMOS3_PASSED, zero=COSMOS3_ZERO)

# LTX-Video 0.9: two blocks, patch 1 x 1 x 1 (as the real 128-channel latents), cross_attention_dim = hidden.
fixture("ltxvideo", "LTXVideoTransformer3DModel",
        dict(in_channels=C, out_channels=C, patch_size=1, patch_size_t=1, num_attention_heads=2, attention_head_dim=16,
             cross_attention_dim=32, num_layers=2, caption_channels=JOINT),
        masked_text_make, ltx_run, LTX_PASSED, frames=2)

# LTX-2.0 (Lightricks/LTX-2's layout, diffusers' 2.0 conversion): two blocks, video 2 heads x 16, audio 2 x 8, 4 latent
# channels in each stream (128 real), rope_type "split"; the connectors' width 24 (3840).
fixture("ltxvideo2", "LTX2VideoTransformer3DModel",
        dict(in_channels=C, out_channels=C, patch_size=1, patch_size_t=1, num_attention_heads=2, attention_head_dim=16,
             cross_attention_dim=32, audio_in_channels=C, audio_out_channels=C, audio_num_attention_heads=2,
             audio_attention_head_dim=8, audio_cross_attention_dim=16, num_layers=2, caption_channels=JOINT,
             rope_type="split"),
        ltx2_make, ltx2_run, LTX2_PASSED, frames=LTX2_F,
        shape=lambda: (B, ltx2_nv() + LTX2_TA * C))

# Cosmos 2 text-to-image (Cosmos-Predict2-2B-Text2Image's shape): two blocks, AdaLN-LoRA 16 wide (256 for 2048),
# rope_scale (1, 4, 4), the padding-mask channel, no learnable positions; one latent frame.
fixture("cosmos", "CosmosTransformer3DModel",
        dict(in_channels=C, out_channels=C, num_attention_heads=2, attention_head_dim=16, num_layers=2, mlp_ratio=4.0,
             text_embed_dim=JOINT, adaln_lora_dim=16, max_size=[128, 240, 240], patch_size=[1, 2, 2],
             rope_scale=[1.0, 4.0, 4.0], concat_padding_mask=True, extra_pos_embed_type=None),
        cosmos_make, cosmos_run, COSMOS_PASSED, frames=1)

# Kandinsky 5 image (T2I Lite's shape): two text blocks and two visual blocks (32 in Lite), head 16 = axes (4, 6, 6)
# (64 = (16, 24, 24) there), time_dim 32 (512), ff 64; Qwen2.5-VL width 24 (3584), CLIP pooled 20 (768).
fixture("kandinsky5", "Kandinsky5Transformer3DModel",
        dict(in_visual_dim=C, in_text_dim=JOINT, in_text_dim2=POOLED, time_dim=32, out_visual_dim=C,
             patch_size=[1, 2, 2], model_dim=32, ff_dim=64, num_text_blocks=2, num_visual_blocks=2, axes_dims=[4, 6, 6],
             visual_cond=False),
        kandinsky5_make, kandinsky5_run, KANDINSKY5_PASSED)

# Kandinsky 5 video (T2V Lite's shape, as the image fixture but with visual_cond): 2 latent frames; visual_cond's
# reference channels are zero in text to video, so their input weights' gradients are exactly zero.
fixture("kandinsky5-video", "Kandinsky5Transformer3DModel",
        dict(in_visual_dim=C, in_text_dim=JOINT, in_text_dim2=POOLED, time_dim=32, out_visual_dim=C,
             patch_size=[1, 2, 2], model_dim=32, ff_dim=64, num_text_blocks=2, num_visual_blocks=2, axes_dims=[4, 6, 6],
             visual_cond=True, attention_type="regular"),
        kandinsky5_make, kandinsky5_video_run, KANDINSKY5_VIDEO_PASSED, frames=2)

# ACE-Step 1.5: two layers (sliding then full, as the real 24 alternate), GQA 4 query heads on 2 key-value heads of 8
# (16 on 8 of 128), SwiGLU 64 wide, conv patch 2; the condition encoder's width 24 (encoder_hidden_size, as the XL
# turbo's 2048 into 2560), the window 3 so that it cuts at 16 tokens.
fixture("ace-step", "AceStepTransformer1DModel",
        dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, in_channels=3 * C, audio_acoustic_hidden_dim=C, patch_size=2, sliding_window=ACE_WINDOW,
             encoder_hidden_size=JOINT),
        ace_step_make, ace_step_run, ACE_STEP_PASSED, shape=lambda: (B, ACE_T, C), size_hw=None)

# Anima: Cosmos 2's transformer (as the cosmos fixture, text 24 wide) plus its AnimaTextConditioner (2 blocks, 6
# real), 24 wide throughout (source = target = model width, so in_proj is the identity, as 1024 real), 2 heads.
fixture("anima", "CosmosTransformer3DModel",
        dict(in_channels=C, out_channels=C, num_attention_heads=2, attention_head_dim=16, num_layers=2, mlp_ratio=4.0,
             text_embed_dim=JOINT, adaln_lora_dim=16, max_size=[128, 240, 240], patch_size=[1, 2, 2],
             rope_scale=[1.0, 4.0, 4.0], concat_padding_mask=True, extra_pos_embed_type=None),
        anima_make, anima_run, ANIMA_PASSED, frames=1,
        parts={"text_conditioner": ("AnimaTextConditioner",
                                    dict(source_dim=JOINT, target_dim=JOINT, model_dim=JOINT, num_layers=2,
                                         num_attention_heads=2, mlp_ratio=4.0, target_vocab_size=ANIMA_VOCAB,
                                         min_sequence_length=ANIMA_MIN_LEN))})

# ------------------------------------------------------------------ U-Nets (issue 21)
def unet_make(gen):
    # CLIP's last hidden states, every token a key (SD's UNet takes no text mask)
    return {"encoder_hidden_states": randn(gen, B, L, JOINT)}


def unet_run(model, t):
    timestep = (t["sigma"].float() * 1000).double()
    return model(t["latents"], timestep, encoder_hidden_states=t["encoder_hidden_states"], return_dict=False)[0]


UNET_PASSED = ("sample = latents (B, C, H, W) = (2, 4, 8, 8) as is; timestep = float32(sigma * 1000) (B); "
               "encoder_hidden_states (B, L, 24) as stored (no mask); pred = output as is")

# Stable Diffusion 1.5's shape, three levels (four real): CrossAttnDownBlock2D x 2 then DownBlock2D, 1 ResnetBlock2D a
# down block (2 real), 2 heads (8 real), channels 8, 16, 24 (320, 640, 1280, 1280) in 4 groups (32), proj_in and
# proj_out as 1 x 1 convolutions (use_linear_projection False), CLIP-L's width 24 (768).
fixture("sd1x", "UNet2DConditionModel",
        dict(sample_size=H, in_channels=C, out_channels=C, block_out_channels=[8, 16, 24],
             down_block_types=["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
             up_block_types=["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"], layers_per_block=1,
             norm_num_groups=4, attention_head_dim=2, cross_attention_dim=JOINT),
        unet_make, unet_run, UNET_PASSED)

SDXL_TIME = 8   # addition_time_embed_dim (256 real)


def sdxl_make(gen):
    # CLIP-L's and OpenCLIP-G's states side by side, OpenCLIP-G's pooled vector, and the six size ids SimpleTuner
    # gives (original height and width, crop top and left, target height and width, in pixels): the target is the
    # latent's size times the VAE's 8; sample 0 uncropped, sample 1 cropped from another size, sample 2 downscaled.
    t = unet_make(gen)
    t["text_embeds"] = randn(gen, B, POOLED)
    th, tw = 8.0 * H, 8.0 * W
    rows = [[th, tw, 0.0, 0.0], [th + 16, tw - 16, 8.0, 0.0], [2 * th, 2 * tw, 0.0, 0.0]][:B]
    t["time_ids"] = torch.tensor([r + [th, tw] for r in rows], dtype=torch.float64)
    return t


def sdxl_run(model, t):
    timestep = (t["sigma"].float() * 1000).double()
    cond = {"text_embeds": t["text_embeds"], "time_ids": t["time_ids"]}
    return model(t["latents"], timestep, encoder_hidden_states=t["encoder_hidden_states"], added_cond_kwargs=cond,
                 return_dict=False)[0]


SDXL_PASSED = UNET_PASSED + ("; added_cond_kwargs = text_embeds (B, 20), the pooled text, and time_ids (B, 6): "
                             "original size, crop top-left, target size in pixels")

# Stable Diffusion XL's shape, three levels as the real one: DownBlock2D then CrossAttnDownBlock2D x 2 with 1 and 2
# transformer blocks (2 and 10 real), 1 ResnetBlock2D a down block (2), 2 heads (5, 10, 20), channels 8, 16, 24 (320,
# 640, 1280) in 4 groups (32), proj_in and proj_out as Linear (use_linear_projection), the text 24 wide (2048), the
# pooled text 20 (1280) and the size ids' sinusoids 8 (256).
fixture("sdxl", "UNet2DConditionModel",
        dict(sample_size=H, in_channels=C, out_channels=C, block_out_channels=[8, 16, 24],
             down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
             up_block_types=["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"], layers_per_block=1,
             transformer_layers_per_block=[1, 1, 2], norm_num_groups=4, attention_head_dim=[2, 2, 2],
             cross_attention_dim=JOINT, use_linear_projection=True, addition_embed_type="text_time",
             addition_time_embed_dim=SDXL_TIME, projection_class_embeddings_input_dim=POOLED + 6 * SDXL_TIME),
        sdxl_make, sdxl_run, SDXL_PASSED)

# Kolors: the sdxl fixture's U-Net reading ChatGLM3's states (24 wide here, 4096 real) through encoder_hid_proj to
# cross_attention_dim 16 (2048), its pooled vector 20 (4096) and the size ids.
fixture("kolors", "UNet2DConditionModel",
        dict(FIXTURES["sdxl"]["kw"], cross_attention_dim=16, encoder_hid_dim=JOINT, encoder_hid_dim_type="text_proj"),
        sdxl_make, sdxl_run, SDXL_PASSED)

# Stable Cascade's stage C: two levels of 16 and 24 channels (2048 real), 1 and 2 [ResBlock, TimestepBlock, AttnBlock]
# layers (8 and 24), 2 heads (32), conditioning 16 wide (2048) from the text 24 (1280), the pooled vector 20 (1280)
# and the image embedding 8 (768), 2 tokens each (4), time sinusoids 8 (64), switch_level [False] (one resolution, 1 x 1
# mappings) as stage C has it; dropout 0 (the checkpoint's 0.1: segtrain trains without it).
CASCADE_IMG = 8


def cascade_make(gen):
    # CLIP-G's sequence and pooled vector; the image embedding is zero, as SimpleTuner passes it without one
    return {"encoder_hidden_states": randn(gen, B, L, JOINT), "pooled_projections": randn(gen, B, POOLED)}


@exact
def cascade_exact():
    """StableCascadeUNet.get_timestep_ratio_embedding in float64 (the class takes its frequencies in float32)."""
    cls = diffusers.StableCascadeUNet

    def embedding(self, timestep_ratio, max_positions=10000):
        r = timestep_ratio.to(torch.float64) * max_positions
        half = self.config.timestep_ratio_embedding_dim // 2
        f = torch.exp(-torch.arange(half, dtype=torch.float64) * (math.log(max_positions) / (half - 1)))
        e = r[:, None] * f[None, :]
        return torch.cat([e.sin(), e.cos()], dim=1)

    cls.get_timestep_ratio_embedding = embedding


def cascade_run(model, t):
    # SimpleTuner's StableCascade._model_predict_single: timestep_ratio = the noise level (its timesteps / 999 there,
    # sigma here), the pooled vector as one token, the image embedding zero (B, 1, 768)
    cascade_exact()
    b = t["latents"].shape[0]
    return model(t["latents"], timestep_ratio=t["sigma"], clip_text_pooled=t["pooled_projections"][:, None],
                 clip_text=t["encoder_hidden_states"], clip_img=torch.zeros(b, 1, CASCADE_IMG, dtype=torch.float64),
                 return_dict=False)[0]


CASCADE_PASSED = ("sample = latents (B, C, H, W) = (2, 4, 8, 8) as is; timestep_ratio = sigma (B); clip_text = "
                  "encoder_hidden_states (B, L, 24); clip_text_pooled = pooled_projections[:, None] (B, 1, 20); "
                  "clip_img = zeros (B, 1, 8); sca, crp = None (zero); pred = output as is")

fixture("stable-cascade", "StableCascadeUNet",
        dict(in_channels=C, out_channels=C, timestep_ratio_embedding_dim=8, patch_size=1, conditioning_dim=16,
             block_out_channels=[16, 24], num_attention_heads=[2, 2], down_num_layers_per_block=[1, 2],
             up_num_layers_per_block=[2, 1], down_blocks_repeat_mappers=[1, 1], up_blocks_repeat_mappers=[1, 1],
             block_types_per_layer=[["SDCascadeResBlock", "SDCascadeTimestepBlock", "SDCascadeAttnBlock"]] * 2,
             clip_text_in_channels=JOINT, clip_text_pooled_in_channels=POOLED, clip_image_in_channels=CASCADE_IMG,
             clip_seq=2, kernel_size=3, dropout=[0.0, 0.0], self_attn=True, timestep_conditioning_type=["sca", "crp"],
             switch_level=[False]),
        cascade_make, cascade_run, CASCADE_PASSED,
        zero={r"clip_img_mapper\.weight": "its input, the CLIP image embedding, is zero (text to image)",
              r".*attention\.to_k\.bias": "the softmax cancels a key bias (every query sees every key)"})

# ------------------------------------------------------------------ exact timestep embedding
def exact_timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos=False, downscale_freq_shift=1, scale=1,
                             max_period=10000):
    """diffusers' get_timestep_embedding in float64. diffusers computes the sinusoid in float32 whatever the model's
    dtype (an error of up to ~1e-4 at t = 1000 * sigma, and 7e-5 in flux-dev's gradients); segtrain computes it
    in double, as this does."""
    half = embedding_dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64) / (half - downscale_freq_shift))
    arg = scale * timesteps.to(torch.float64)[:, None] * freqs[None, :]
    emb = torch.cat([torch.sin(arg), torch.cos(arg)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    if embedding_dim % 2:
        emb = torch.nn.functional.pad(emb, (0, 1))
    return emb


def model_class(name):
    """The fixture's diffusers class, with every loaded diffusers module's get_timestep_embedding made exact (while
    EXACT)."""
    src = FIXTURES[name]["cls"]
    cls = simpletuner_class(src.split(":", 1)[1]) if src.startswith("simpletuner:") else getattr(diffusers, src)
    if not EXACT:
        return cls
    import diffusers.models.embeddings as emb
    orig = getattr(emb, "_segtrain_orig", emb.get_timestep_embedding)
    emb._segtrain_orig = orig
    for mod in list(sys.modules.values()):
        if mod and mod.__name__.startswith("diffusers") and getattr(mod, "get_timestep_embedding", None) is orig:
            mod.get_timestep_embedding = exact_timestep_embedding
    return cls


# ------------------------------------------------------------------ weights
def seed_of(name):
    return 20251130 + sum(ord(c) * (i + 1) for i, c in enumerate(name))   # stable across runs (no hash())


def randomize(model, gen):
    """Every parameter random, scaled so activations stay O(1): linears and convs N(0, 1/fan_in), biases
    N(0, 0.1^2), 1-D weights (norm scales) 1 + N(0, 0.1^2) (a zero-centred norm's, whose scale is 1 + weight,
    N(0, 0.1^2)), transposed convs N(0, 1/in_channels), embeddings
    N(0, 1), other tensors N(0, 0.5^2).
    Rounded to float32: the stored weights are exactly the ones the float64 reference uses."""
    owner = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owner[(mname + "." if mname else "") + pname] = mod
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            mod = owner[name]
            if leaf == "bias":
                v = randn(gen, *p.shape, std=0.1)
            elif p.ndim == 1 and leaf == "weight" and type(mod).__name__ == "Krea2RMSNorm":
                v = randn(gen, *p.shape, std=0.1)   # zero-centred: its scale is 1 + weight
            elif p.ndim == 1 and leaf == "weight":
                v = 1 + randn(gen, *p.shape, std=0.1)
            elif isinstance(mod, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
                v = randn(gen, *p.shape, std=1 / math.sqrt(p[0].numel()))
            elif isinstance(mod, torch.nn.ConvTranspose1d):   # (in, out, k): each output sums in_channels taps
                v = randn(gen, *p.shape, std=1 / math.sqrt(p.shape[0]))                  # when stride = kernel
            elif isinstance(mod, torch.nn.Embedding):
                v = randn(gen, *p.shape)
            else:
                v = randn(gen, *p.shape, std=0.5)
            p.copy_(v.to(p.dtype))


# ------------------------------------------------------------------ one fixture
def versions():
    return {"torch": torch.__version__, "diffusers": diffusers.__version__, "numpy": numpy.__version__,
            "python": platform.python_version()}


def rounded(t):
    return t.to(torch.float32).to(torch.float64)


def inputs_of(name, make, gen):
    shape = latent_shape(FIXTURES[name])
    t = {"latents": randn(gen, *shape), "sigma": torch.tensor(SIGMA[:B], dtype=torch.float64)}
    t.update(make(gen))
    t["target"] = randn(gen, *shape)
    return {k: rounded(v) for k, v in t.items()}


def build(name):
    fx = FIXTURES[name]
    torch.manual_seed(0)   # the constructor's own init is overwritten, but keep it deterministic anyway
    model = model_class(name)(**fx["kw"]).to(torch.float32)
    for sub, (cls, kw) in fx["parts"].items():   # after the transformer's own: randomised after them, in order
        model.add_module(sub, getattr(diffusers, cls)(**kw).to(torch.float32))
    gen = torch.Generator().manual_seed(seed_of(name))
    randomize(model, gen)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if fx["bf16"] and re.fullmatch(fx["bf16"], n):
                p.copy_(p.to(torch.bfloat16))   # the reference uses exactly the stored BF16 values
    return model, inputs_of(name, fx["make"], gen)


def reference(model, run, t, zero=None, factored=None):
    """pred, loss and every gradient, in float64 from the given (float32-rounded) weights and inputs. A parameter
    that autograd never reaches gets a zero gradient if it is listed in zero (known to be unused by construction).
    factored: regex of Linear weights whose factors (dy, x) are returned too, dW = dy^T x over all tokens."""
    model = model.to(torch.float64).train()
    model.zero_grad(set_to_none=True)
    factors, hooks = {}, []
    for mname, mod in model.named_modules():
        if factored and isinstance(mod, torch.nn.Linear) and re.fullmatch(factored, mname + ".weight"):
            def hook(mod, args, out, n=mname + ".weight"):
                factors[n] = [None, args[0].detach().reshape(-1, args[0].shape[-1])]
                out.register_hook(lambda g: factors[n].__setitem__(0, g.detach().reshape(-1, g.shape[-1])))
            hooks.append(mod.register_forward_hook(hook))
    pred = run(model, t)
    for h in hooks:
        h.remove()
    if pred.shape != t["target"].shape:
        raise SystemExit("pred %s does not match target %s" % (tuple(pred.shape), tuple(t["target"].shape)))
    loss = ((pred - t["target"]) ** 2).mean()
    loss.backward()
    grads = {}
    for n, p in model.named_parameters():
        if p.grad is None and any(re.fullmatch(r, n) for r in zero or {}):
            p.grad = torch.zeros_like(p)
        if p.grad is None:
            raise SystemExit("%s: parameter %s gets no gradient (unused by the forward)" % (model.__class__.__name__, n))
        grads[n] = p.grad.detach().clone()
        if any(re.fullmatch(r, n) for r in zero or {}) and grads[n].abs().max().item() <= 1e-12:
            grads[n].zero_()   # mathematically zero, rounding noise (~1e-19) in autograd: stored as exact 0
    return pred.detach(), loss.detach(), grads, factors


def check(name, loss, grads):
    zero = FIXTURES[name]["zero"]
    if not (0.1 <= loss.item() <= 10):
        raise SystemExit("%s: loss %.6g is not O(1) (valid: 0.1..10); rescale the random weights" % (name, loss))
    for n, g in grads.items():
        if not torch.isfinite(g).all():
            raise SystemExit("%s: gradient of %s is not finite" % (name, n))
        why = [w for r, w in zero.items() if re.fullmatch(r, n)]
        if why and g.abs().max().item() != 0:
            raise SystemExit("%s: gradient of %s is not zero, but should be: %s" % (name, n, why[0]))
        if not why and g.abs().max().item() <= 1e-12:   # exact 0, or autograd's rounding noise of a true 0
            raise SystemExit("%s: gradient of %s is all zeros (a gate left at zero, or a key bias the softmax "
                             "cancels?)" % (name, n))


def save_sorted(tensors, path, metadata):
    """A float32 safetensors file with its header's keys in a fixed order: safetensors' save_file writes the
    metadata in hash order, so two runs would differ in bytes."""
    header, offset = {"__metadata__": dict(sorted(metadata.items()))}, 0
    for k, v in tensors.items():
        n = v.numel() * 4
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for v in tensors.values():
            f.write(v.to(torch.float32).contiguous().numpy().astype("<f4").tobytes())


def write(name, out):
    fx = FIXTURES[name]
    use_size(SQUARE_B, *fx["size"])
    model, t = build(name)
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):   # a re-run may change the sharding: no stale files (parts' folders: below)
        if os.path.isfile(os.path.join(folder, f)):
            os.remove(os.path.join(folder, f))
    big = [p for n, p in model.named_parameters() if fx["bf16"] and re.fullmatch(fx["bf16"], n)]
    for p in big:
        p.data = p.data.to(torch.bfloat16)   # saved BF16; from_pretrained reads it back into the float32 model
    parts = {sub: model._modules.pop(sub) for sub in fx["parts"]}   # not in the transformer's own state_dict
    model.save_pretrained(folder, safe_serialization=True, **fx["save"])
    for sub, part in parts.items():
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
        for f in os.listdir(os.path.join(folder, sub)):
            os.remove(os.path.join(folder, sub, f))
        part.save_pretrained(os.path.join(folder, sub), safe_serialization=True)
        model.add_module(sub, part)
    for p in big:
        p.data = p.data.to(torch.float32)
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = write_reference(name, model, t, os.path.join(folder, "parity.safetensors"), {})
    nbytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    nparams = sum(p.numel() for p in model.parameters())
    print("%-14s %-32s params %7d  loss %.6f  bytes %8d" % (name, fx["cls"], nparams, loss, nbytes))
    if fx["size_hw"]:
        # the same seed draws the same weights (before any input), then the inputs at this size
        use_size(HW_B, *fx["size_hw"])
        model, t = build(name)
        if any(not torch.equal(p, weights[n]) for n, p in model.named_parameters()):
            raise SystemExit("%s: the parity_hw build's weights differ from the folder's" % name)
        path = os.path.join(folder, "parity_hw.safetensors")
        loss = write_reference(name, model, t, path, size_meta(fx))
        print("%-14s %-32s latents %-19s loss %.6f  bytes %8d" % (name, "parity_hw.safetensors",
              tuple(t["latents"].shape), loss, os.path.getsize(path)))
    use_size(SQUARE_B, H_SQUARE, W_SQUARE)


def size_meta(fx):
    """parity_hw.safetensors' own metadata: its B, H, W (F: a video's frames), and what differs in the call."""
    meta = {"B": str(B), "H": str(H), "W": str(W)}
    if fx["frames"] is not None:
        meta["F"] = str(fx["frames"])
    note = ("at this file's B, H, W (metadata); sample 2: sigma %g (guidance %g where given), a caption of %d of "
            "%d tokens where captions vary" % (SIGMA[2], GUIDANCE[2], TEXT_LENS[2], L))
    meta["passed"] = fx["passed"] + ". parity_hw.safetensors: " + note + ("; " + fx["hw_note"] if fx["hw_note"] else "")
    return meta


def write_reference(name, model, t, path, extra_meta):
    """pred, loss and every gradient of model on the inputs t, checked and saved to path; returns the loss."""
    fx = FIXTURES[name]
    pred, loss, grads, factors = reference(model, fx["run"], t, fx["zero"], fx["factored"])
    check(name, loss, grads)
    tensors = {k: v.to(torch.float32).contiguous() for k, v in t.items()}
    tensors["pred"] = pred.to(torch.float32).contiguous()
    tensors["loss"] = loss.reshape(1).to(torch.float32)
    for n, g in grads.items():
        if n in factors:
            dy, x = (rounded(f) for f in factors[n])
            err = ((dy.T @ x - g).norm() / g.norm()).item()
            if not g.norm() > 0 or err > 1e-6:
                raise SystemExit("%s: factors of %s give its gradient to %.3g (valid: <= 1e-6)" % (name, n, err))
            tensors["grad_dy." + n], tensors["grad_x." + n] = dy.to(torch.float32), x.to(torch.float32)
            continue
        tensors["grad." + n] = g.to(torch.float32).contiguous()
    if fx["parts"]:
        meta_parts = {"parts": json.dumps({s: [c, k] for s, (c, k) in fx["parts"].items()}, sort_keys=True)}
    else:
        meta_parts = {}
    meta = dict(versions(), **meta_parts, fixture=name, class_name=fx["cls"], kwargs=json.dumps(fx["kw"], sort_keys=True),
                seed=str(seed_of(name)), loss_f64=repr(loss.item()), passed=fx["passed"],
                zero_grads=json.dumps(fx["zero"], sort_keys=True))
    if fx["cls"].startswith("simpletuner:"):
        meta["simpletuner_commit"] = SIMPLETUNER_COMMIT
        family = fx["cls"].split(":", 1)[1].split(".")[0]
        stubs = {m: why for m, (_, why) in SIMPLETUNER_STUBS.items() if m.split(".")[0] == family}
        if stubs:
            meta["simpletuner_stubs"] = json.dumps(stubs, sort_keys=True)
        if family in SIMPLETUNER_PATCHES:
            meta["simpletuner_patches"] = json.dumps(SIMPLETUNER_PATCHES[family], sort_keys=True)
    if fx["bf16"]:
        meta["bf16_weights"] = fx["bf16"]
    if fx["factored"]:
        meta["factored_grads"] = fx["factored"]
    meta.update(extra_meta)
    save_sorted(tensors, path, meta)
    return loss.item()


def float32_args(module, args, kwargs):
    """A forward pre-hook: what the fixture's run makes in float64 (positions, a time) reaches the model in float32, as
    SimpleTuner's batch does (autocast casts float32, never float64, to bf16); bf16_yardstick.py and
    bench/vs_diffusers.py run the classes so."""
    def cast(x):
        if torch.is_tensor(x) and x.dtype == torch.float64:
            return x.to(torch.float32)
        if isinstance(x, (list, tuple)):
            return type(x)(cast(v) for v in x)
        return x
    return cast(args), {k: cast(v) for k, v in kwargs.items()}


def load_folder(name, out):
    """The fixture's folder as from_pretrained loads it, in float32, its parts attached as while it was written."""
    fx = FIXTURES[name]
    folder = os.path.join(out, name)
    cls = model_class(name)
    # _keep_in_fp32_modules (wan) makes from_pretrained want accelerate's low_cpu_mem_usage; everything loads as
    # float32 here anyway, so the list changes nothing: cleared while loading.
    keep, cls._keep_in_fp32_modules = cls._keep_in_fp32_modules, None
    try:
        model = cls.from_pretrained(folder, torch_dtype=torch.float32)
    finally:
        cls._keep_in_fp32_modules = keep
    for sub, (pcls, _) in fx["parts"].items():
        model.add_module(sub, getattr(diffusers, pcls).from_pretrained(os.path.join(folder, sub),
                                                                       torch_dtype=torch.float32))
    return model


def parity_files(fx):
    """The fixture's parity files, each with the (B, H, W) use_size takes for it."""
    files = [("parity.safetensors", (SQUARE_B,) + fx["size"])]
    if fx["size_hw"]:
        files.append(("parity_hw.safetensors", (HW_B,) + fx["size_hw"]))
    return files


def verify(name, out):
    model = load_folder(name, out).to(torch.float64)
    for fname, size in parity_files(FIXTURES[name]):
        use_size(*size)
        err = verify_file(name, model, os.path.join(out, name, fname), fname != "parity.safetensors")
        print("%-14s verified %-21s: reloaded pred relative L2 error %.2g" % (name, fname, err))
    use_size(SQUARE_B, H_SQUARE, W_SQUARE)


def stored_inputs(stored):
    """A parity file's inputs (its tensors but pred, loss and the gradients), in float64."""
    return {k: v.to(torch.float64) for k, v in stored.items() if k not in ("pred", "loss") and not k.startswith("grad")}


def verify_file(name, model, path, hw):
    """The relative L2 error of model's pred on the inputs stored in path, after checking its metadata."""
    fx = FIXTURES[name]
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    stored = load_file(path)
    if meta.get("kwargs") != json.dumps(fx["kw"], sort_keys=True):
        raise SystemExit("%s: stored kwargs %s differ from the script's %s" % (name, meta.get("kwargs"), fx["kw"]))
    expect = size_meta(fx) if hw else {}
    if expect != {k: meta.get(k) for k in expect}:
        raise SystemExit("%s: %s's metadata B, H, W, F, passed differ from the script's" % (name, path))
    if tuple(stored["latents"].shape) != latent_shape(fx):
        raise SystemExit("%s: %s's latents %s, the script's %s" % (name, path, tuple(stored["latents"].shape),
                                                                  latent_shape(fx)))
    t = stored_inputs(stored)
    with torch.no_grad():
        pred = fx["run"](model, t)
    ref = stored["pred"].to(torch.float64)
    err = ((pred - ref).norm() / ref.norm()).item()
    if err > 1e-6:
        raise SystemExit("%s: reloaded weights give pred with relative L2 error %.3g (valid: <= 1e-6)" % (name, err))
    return err


# ------------------------------------------------------------------ AnyFlow's MeanFlow objective
# SimpleTuner's distillation_method "anyflow" (forward stage) at its defaults, written here from its description
# (docs/OBJECTIVES.md) in float64 on the anyflow fixture's model, for 4 samples: by index 2 diffusion intervals (r =
# t), 1 consistency (r = 0), 1 arbitrary. Stored in <out>/anyflow/meanflow.safetensors: the inputs (latents, noise,
# the two uniforms of each sample, the text and the empty prompt's), t and r, the target, the loss and every gradient.
MEANFLOW = dict(shift=3.0, diffusion_ratio=0.5, consistency_ratio=0.25, epsilon=0.005, guidance=3.0)
MEANFLOW_B = 4


def meanflow_reference(model, t):
    mf = MEANFLOW
    B = t["latents"].shape[0]
    shift = lambda u: mf["shift"] * u / (1 + (mf["shift"] - 1) * u)
    d, c = round(mf["diffusion_ratio"] * B), round(mf["consistency_ratio"] * B)   # Python's: ties to even
    kind = ["diffusion" if i < d else "consistency" if i < d + c else "arbitrary" for i in range(B)]
    tb, rb = torch.maximum(t["u1"], t["u2"]), torch.minimum(t["u1"], t["u2"])
    rb = torch.stack([tb[i] if k == "diffusion" else rb[i] * 0 if k == "consistency" else rb[i]
                      for i, k in enumerate(kind)])
    ts, rs = rounded(shift(tb)), rounded(shift(rb))   # segtrain's times are float
    col = lambda v: v[:, None, None, None, None]
    x0, e = t["latents"], t["noise"]

    def predict(sig, text):
        x = ((1 - col(sig)) * x0 + col(sig) * e).permute(0, 2, 1, 3, 4)   # the class's (B, F, C, H, W)
        tt, rr = (sig * 1000)[:, None].expand(B, x.shape[1]), (rs * 1000)[:, None].expand(B, x.shape[1])
        return model(hidden_states=x, timestep=tt, r_timestep=rr, encoder_hidden_states=text,
                     return_dict=False)[0].permute(0, 2, 1, 3, 4)

    g = mf["guidance"]
    with torch.no_grad():
        plus, minus = ts + mf["epsilon"], ts - mf["epsilon"]
        derivative = (predict(plus, t["encoder_hidden_states"]) - predict(minus, t["encoder_hidden_states"])) / \
            col((plus - minus) * g)
        target = (e - x0) - col(ts - rs) * derivative
        unconditional = predict(ts, t["null_encoder_hidden_states"])
    model.zero_grad(set_to_none=True)
    fused = (predict(ts, t["encoder_hidden_states"]) - (1 - g) * unconditional) / g
    per = ((fused - target) ** 2).flatten(1).mean(dim=1)
    grid = shift(torch.linspace(1, 0, 1001, dtype=torch.float64)[:-1])
    weight = ts * torch.sqrt((1 - ts).clamp_min(0)) * (1000 / (grid * torch.sqrt((1 - grid).clamp_min(0))).sum())
    per = per * weight
    diffusion = torch.tensor([k == "diffusion" for k in kind])
    scale = torch.where(diffusion, torch.ones_like(per), per[diffusion].mean().detach() / (per.detach() + 1e-5))
    loss = (per * scale).mean()
    loss.backward()
    return ts, rs, target, loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def write_meanflow(out):
    folder = os.path.join(out, "anyflow")
    cls = model_class("anyflow")
    keep, cls._keep_in_fp32_modules = cls._keep_in_fp32_modules, None   # as verify() loads
    try:
        model = cls.from_pretrained(folder, torch_dtype=torch.float32).to(torch.float64).train()
    finally:
        cls._keep_in_fp32_modules = keep
    gen = torch.Generator().manual_seed(seed_of("anyflow-meanflow"))
    B, shape = MEANFLOW_B, (MEANFLOW_B, C, 2, H, W)
    text = randn(gen, B, L, JOINT)
    text[1, 4:] = 0
    t = {"latents": randn(gen, *shape), "noise": randn(gen, *shape),
         "u1": torch.rand(B, generator=gen, dtype=torch.float64), "u2": torch.rand(B, generator=gen, dtype=torch.float64),
         "encoder_hidden_states": text, "null_encoder_hidden_states": torch.zeros(B, L, JOINT, dtype=torch.float64)}
    t = {k: rounded(v) for k, v in t.items()}
    ts, rs, target, loss, grads = meanflow_reference(model, t)
    if not 0.01 <= loss.item() <= 100:
        raise SystemExit("anyflow-meanflow: loss %.6g is not O(1)" % loss.item())
    tensors = dict(t, t=ts, r=rs, target=target, loss=loss.reshape(1))
    tensors.update({"grad." + n: g for n, g in grads.items()})
    tensors = {k: v.to(torch.float32).contiguous() for k, v in tensors.items()}
    meta = dict(versions(), fixture="anyflow-meanflow", config=json.dumps(MEANFLOW, sort_keys=True),
                seed=str(seed_of("anyflow-meanflow")), loss_f64=repr(loss.item()),
                passed="distillation_config defaults of SimpleTuner's AnyFlow (forward stage, beta08, adaptive "
                       "weighting, extrapolate) but for the ones in config; the empty prompt is zeros")
    save_sorted(tensors, os.path.join(folder, "meanflow.safetensors"), meta)
    print("%-14s AnyFlow's MeanFlow objective on anyflow's model: loss %.6f" % ("anyflow-meanflow", loss.item()))


# ------------------------------------------------------------------ HeartMuLa (SimpleTuner's heartmula)
# SimpleTuner's own HeartMuLaModel (modeling_heartmula.py: a Llama backbone over each frame's summed codebook and text
# embeddings, codebook 0's head on it, a small Llama decoder over [the frame's state, codebooks 0 .. K-2 of the next
# frame] for codebooks 1 .. K-1), trained by HeartMuLa._autoregressive_token_loss (model.py): cross-entropy of each
# next frame's K codebooks under the audio frame mask, codebook 0's over the frames, the rest's over frames x (K - 1).
# The class takes its Llama sizes from its _LLAMA_FLAVORS table by name: the fixture adds two tiny flavours to it
# (recorded in the metadata), SimpleTuner's own table otherwise. model.py imports SimpleTuner's trainer (accelerate,
# the data backends), so its loss and its collate_audio_tokens layout are written here from their code.
HEARTMULA_FLAVORS = {
    # backbone: head_dim 8, max_seq_len 512 (llama3's rotary smoothing band, wavelengths 128 .. 512, holds one of
    # its 4 frequencies); decoder: 24 wide, head_dim 12, max_seq_len 128 (one of 6 in its band)
    "llama-tiny-backbone": dict(num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, max_seq_len=512,
                                intermediate_dim=48),
    "llama-tiny-decoder": dict(num_layers=2, num_heads=2, num_kv_heads=1, embed_dim=24, max_seq_len=128,
                               intermediate_dim=40),
}
HEARTMULA_KW = dict(backbone_flavor="llama-tiny-backbone", decoder_flavor="llama-tiny-decoder", text_vocab_size=50,
                    audio_vocab_size=24, audio_num_codebooks=4, muq_dim=8)
# per sample: tag ids, lyric ids and audio frames (collate_audio_tokens: tags, an empty row, lyrics, then the audio;
# the batch right-padded to its longest with empty rows that no mask holds)
HEARTMULA_SAMPLES = [(3, 2, 5), (2, 2, 3)]
HEARTMULA_EMPTY = 0   # HeartMuLaGenConfig.empty_id
HEARTMULA_UNUSED = {r"(backbone|decoder)\.embed_tokens\.weight": "LlamaModel's token table: the class passes "
                    "inputs_embeds, and HeartMuLa's checkpoint has none (segtrain holds none)",
                    r"unconditional_text_embedding\.weight|muq_linear\.(weight|bias)":
                    "the unconditional text row and the MuQ projection: generation's, not the training forward's"}


def heartmula_tokens(gen, kw):
    K, V, TV = kw["audio_num_codebooks"], kw["audio_vocab_size"], kw["text_vocab_size"]
    lens = [a + 1 + b + f for a, b, f in HEARTMULA_SAMPLES]
    S = max(lens)
    tokens = torch.full((len(lens), S, K + 1), HEARTMULA_EMPTY, dtype=torch.long)
    mask = torch.zeros(len(lens), S, K + 1, dtype=torch.bool)
    frames = torch.zeros(len(lens), S, dtype=torch.bool)
    for i, (a, b, f) in enumerate(HEARTMULA_SAMPLES):
        prompt = a + 1 + b
        tokens[i, :a, K] = torch.randint(1, TV, (a,), generator=gen)
        tokens[i, a + 1:prompt, K] = torch.randint(1, TV, (b,), generator=gen)
        tokens[i, prompt:prompt + f, :K] = torch.randint(0, V, (f, K), generator=gen)
        mask[i, :prompt, K] = True
        mask[i, prompt:prompt + f, :K] = True
        frames[i, prompt:prompt + f] = True
    return tokens, mask, frames


def heartmula_loss(tokens, frames, c0, rest):
    """HeartMuLa._autoregressive_token_loss"""
    F = torch.nn.functional
    target, fm = tokens[:, 1:, :-1], frames[:, 1:].to(c0.dtype)
    V = c0.shape[-1]
    l0 = F.cross_entropy(c0.reshape(-1, V), target[:, :, 0].reshape(-1), reduction="none").view(fm.shape) * fm
    denom = fm.sum().clamp_min(1)
    lr = F.cross_entropy(rest.reshape(-1, V), target[:, :, 1:].reshape(-1), reduction="none").view(*fm.shape, -1)
    lr = lr * fm.unsqueeze(-1)
    return l0.sum() / denom + lr.sum() / (denom * (target.shape[-1] - 1))


def write_heartmula(out):
    cls = simpletuner_class("heartmula.modeling_heartmula.HeartMuLaModel")
    mod = sys.modules[cls.__module__]
    mod._LLAMA_FLAVORS.update(HEARTMULA_FLAVORS)
    from simpletuner.helpers.models.heartmula.configuration_heartmula import HeartMuLaConfig
    torch.manual_seed(0)
    model = cls(HeartMuLaConfig(**HEARTMULA_KW)).to(torch.float32)
    gen = torch.Generator().manual_seed(seed_of("heartmula"))
    randomize(model, gen)
    tokens, mask, frames = heartmula_tokens(gen, HEARTMULA_KW)
    folder = os.path.join(out, "heartmula")
    os.makedirs(folder, exist_ok=True)
    unused = lambda n: any(re.fullmatch(r, n) for r in HEARTMULA_UNUSED)
    weights = {n: p.detach().clone() for n, p in model.named_parameters() if not re.match(r"(backbone|decoder)\."
                                                                                          r"embed_tokens", n)}
    config = dict(HEARTMULA_KW, model_type="heartmula", architectures=["HeartMuLaModel"],
                  flavors={k: HEARTMULA_FLAVORS[v] for k, v in (("backbone", HEARTMULA_KW["backbone_flavor"]),
                                                                ("decoder", HEARTMULA_KW["decoder_flavor"]))})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    model = model.to(torch.float64).train()
    model.zero_grad(set_to_none=True)
    o = model(tokens=tokens, tokens_mask=mask, attention_mask=mask.any(dim=-1).to(torch.long))
    loss = heartmula_loss(tokens, frames, o["codebook0_logits"], o["codebook_logits"])
    loss.backward()
    if not 0.1 <= loss.item() <= 10:
        raise SystemExit("heartmula: loss %.6g is not O(1)" % loss.item())
    grads = {}
    for n, p in model.named_parameters():
        if p.grad is None and not unused(n):
            raise SystemExit("heartmula: parameter %s gets no gradient" % n)
        if p.grad is not None and unused(n):
            raise SystemExit("heartmula: parameter %s, listed unused, gets a gradient" % n)
        if p.grad is not None:
            if not torch.isfinite(p.grad).all() or p.grad.abs().max().item() <= 1e-12:
                raise SystemExit("heartmula: gradient of %s is zero or not finite" % n)
            grads[n] = p.grad
    save_sorted(weights, os.path.join(folder, "diffusion_pytorch_model.safetensors"),
                {"format": "pt", "class_name": "simpletuner:heartmula.modeling_heartmula.HeartMuLaModel"})
    tensors = {"tokens": tokens, "tokens_mask": mask, "audio_frame_mask": frames,
               "codebook0_logits": o["codebook0_logits"].detach(), "codebook_logits": o["codebook_logits"].detach(),
               "loss": loss.detach().reshape(1)}
    tensors.update({"grad." + n: g for n, g in grads.items()})
    tensors = {k: v.to(torch.float32).contiguous() for k, v in tensors.items()}
    meta = dict(versions(), fixture="heartmula", class_name="simpletuner:heartmula.modeling_heartmula.HeartMuLaModel",
                kwargs=json.dumps(HEARTMULA_KW, sort_keys=True), flavors=json.dumps(HEARTMULA_FLAVORS, sort_keys=True),
                simpletuner_commit=SIMPLETUNER_COMMIT, seed=str(seed_of("heartmula")), loss_f64=repr(loss.item()),
                zero_grads=json.dumps(HEARTMULA_UNUSED, sort_keys=True),
                passed="tokens (B, S, K + 1) (codebooks, then the text) as collate_audio_tokens lays out samples of "
                       "(tags, lyrics, frames) %s with empty_id %d, tokens_mask, attention_mask = tokens_mask.any(-1); "
                       "the loss HeartMuLa._autoregressive_token_loss's on audio_frame_mask; weights float32-rounded, "
                       "the reference in float64 (its rotary angles float32, as LlamaRotaryEmbedding takes them)"
                       % (HEARTMULA_SAMPLES, HEARTMULA_EMPTY))
    save_sorted(tensors, os.path.join(folder, "parity.safetensors"), meta)
    print("%-14s %-32s params %7d  loss %.6f" % ("heartmula", "HeartMuLaModel", sum(v.numel() for v in
                                                                                    weights.values()), loss.item()))


# written outside the diffusers fixtures' frame (anyflow-meanflow from an existing fixture's folder; heartmula a token
# model: tokens in, logits and a cross-entropy out); no --verify of their own
EXTRA = {"anyflow-meanflow": write_meanflow, "heartmula": write_heartmula}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "fixtures"))
    ap.add_argument("--verify", action="store_true", help="reload each folder and check its pred; write nothing")
    ap.add_argument("--simpletuner", metavar="PATH", help="a SimpleTuner checkout at commit %s (the fixtures of "
                    "its own classes: boogu-image, mageflow, wan-s2v, longcat-video)" % SIMPLETUNER_COMMIT)
    ap.add_argument("names", nargs="*", help="fixtures (default all): " + ", ".join(FIXTURES))
    a = ap.parse_args()
    SIMPLETUNER["root"] = a.simpletuner and os.path.abspath(a.simpletuner)
    for n in a.names:
        if n not in FIXTURES and n not in EXTRA:
            sys.exit("make_fixtures.py: unknown fixture '%s' (valid: %s)" % (n, ", ".join(list(FIXTURES) + list(EXTRA))))
    diffusers.utils.logging.set_verbosity_error()   # not the float32-modules warning of every .to(float64)
    torch.set_num_threads(1)   # one summation order: the same bytes on every run
    torch.use_deterministic_algorithms(True)
    for n in a.names or list(FIXTURES) + list(EXTRA):
        if n in EXTRA:
            if not a.verify:
                EXTRA[n](a.out)
            continue
        (verify if a.verify else write)(n, a.out)


if __name__ == "__main__":
    main()
