#!/usr/bin/env python3
"""Writes a segtrain cache (docs/CACHE.md): VAE latents and text-encoder embeddings of an image folder, made with
the user's local diffusers pipeline the way its pipeline makes them, for `segtrain train` with data_cache_dir.

  make_cache.py --images DIR --pipeline DIR --out DIR [--family flux] [--flavour dev|schnell] [--resolution 1024]
                [--caption_strategy filename|textfile] [--max_sequence_length N] [--dtype float32|bfloat16]
                [--seed 0] [--device cpu]
  make_cache.py --tiny-random --images DIR --out DIR [--pipeline DIR]   (tiny random VAE, CLIP and T5: tests)

--pipeline is a local pipeline folder as diffusers' save_pretrained writes it (FLUX.1-dev's: vae/, text_encoder/
(CLIP-L), text_encoder_2/ (T5-XXL), tokenizer/, tokenizer_2/); nothing is downloaded. --tiny-random builds such a
folder from small configs and seeded random weights (into --pipeline when given, else a temporary folder) and then
runs exactly the path a real pipeline takes: it tests the tool end to end and makes the committed fixture
tests/fixtures/cache-flux-tiny (flux-tiny's shapes: 4 latent channels, text_len 8, text_dim 32, pooled 16).

Needs torch, diffusers and transformers (scripts/reference-venv.sh); `make test` never runs this.
"""
import argparse
import json
import os
import sys
import tempfile

FORMAT, VERSION = "segtrain-cache", 1
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
NULL_FILE = "null.safetensors"
# FluxPipeline's max_sequence_length per flavour (SimpleTuner: 512 for dev, 256 for schnell)
FLUX_SEQ = {"dev": 512, "schnell": 256}


def fail(msg):
    print(f"make_cache.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ------------------------------------------------------------------ images and captions

def fold(text):
    return " ".join(text.split())  # whitespace runs to one space, as segtrain's folder reader folds captions


def caption_of(path, strategy):
    """SimpleTuner's caption_strategy: filename (the stem, '_' -> ' ') or textfile (the .txt beside the image)."""
    stem = os.path.splitext(path)[0]
    if strategy == "filename":
        return fold(os.path.basename(stem).replace("_", " "))
    txt = stem + ".txt"
    if not os.path.isfile(txt):
        fail(f"{path}: caption_strategy textfile, but {txt} does not exist")
    with open(txt, encoding="utf-8") as f:
        return fold(f.read())


def list_images(root):
    """Relative paths of the images under root (recursive, sorted; hidden entries skipped)."""
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and name.lower().endswith(IMAGE_EXTS):
                found.append(os.path.relpath(os.path.join(d, name), root))
    return sorted(found)


def sample_name(rel):
    """The sample's file: the image's relative path with .safetensors for its extension (SimpleTuner's VAE cache
    names its .pt files the same way)."""
    return os.path.splitext(rel)[0].replace(os.sep, "/") + ".safetensors"


def load_square(path, edge):
    """The image as FluxPipeline's VaeImageProcessor gives it to the VAE, on a square: RGB, the center square of
    the shorter side, resized to edge (Lanczos, as SimpleTuner resizes), then [-1, 1] CHW float32."""
    import numpy
    import torch
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        s = min(w, h)
        left, top = (w - s) // 2, (h - s) // 2
        im = im.crop((left, top, left + s, top + s))
        if s != edge:
            im = im.resize((edge, edge), Image.LANCZOS)
        a = numpy.asarray(im, dtype=numpy.float32) / 127.5 - 1.0
    return torch.from_numpy(a).permute(2, 0, 1).contiguous(), (w, h)


# ------------------------------------------------------------------ encoders (FluxPipeline.encode_prompt)

class FluxEncoders:
    """CLIP-L's pooled output and T5's last hidden state, as diffusers' FluxPipeline._get_clip_prompt_embeds and
    _get_t5_prompt_embeds compute them: both tokenizers pad to max_length and truncate; CLIP at its
    model_max_length (77), T5 at max_sequence_length; T5 is run without an attention mask (the pipeline passes
    none), so the padded positions hold T5's own outputs, and the mask is stored beside them for reference."""

    def __init__(self, pipe, label, device, max_seq):
        from transformers import AutoTokenizer, CLIPTextModel, T5EncoderModel

        self.device, self.max_seq = device, max_seq
        self.tok = AutoTokenizer.from_pretrained(os.path.join(pipe, "tokenizer"))
        self.tok2 = AutoTokenizer.from_pretrained(os.path.join(pipe, "tokenizer_2"))
        self.clip = CLIPTextModel.from_pretrained(os.path.join(pipe, "text_encoder")).to(device).eval()
        self.t5 = T5EncoderModel.from_pretrained(os.path.join(pipe, "text_encoder_2")).to(device).eval()
        self.names = [f"{label}/text_encoder ({type(self.clip).__name__})",
                      f"{label}/text_encoder_2 ({type(self.t5).__name__})"]

    def encode(self, caption):
        import torch

        with torch.no_grad():
            ids = self.tok([caption], padding="max_length", max_length=self.tok.model_max_length, truncation=True,
                           return_tensors="pt").input_ids
            pooled = self.clip(ids.to(self.device), output_hidden_states=False).pooler_output[0]
            t = self.tok2([caption], padding="max_length", max_length=self.max_seq, truncation=True,
                          return_tensors="pt")
            seq = self.t5(t.input_ids.to(self.device), output_hidden_states=False)[0][0]
        return {"prompt_embeds": seq, "pooled_prompt_embeds": pooled, "attention_mask": t.attention_mask[0]}


class FluxVae:
    """AutoencoderKL's latent_dist.sample(), then (x - shift_factor) * scaling_factor, as FluxPipeline prepares
    image latents and SimpleTuner's VAE cache stores them (Flux's VAE: shift 0.1159, scale 0.3611)."""

    def __init__(self, pipe, label, device):
        from diffusers import AutoencoderKL

        self.device = device
        self.vae = AutoencoderKL.from_pretrained(os.path.join(pipe, "vae")).to(device).eval()
        self.scale_factor = 2 ** (len(self.vae.config.block_out_channels) - 1)
        self.name = f"{label}/vae (AutoencoderKL)"

    def encode(self, image, generator):
        import torch

        with torch.no_grad():
            dist = self.vae.encode(image[None].to(self.device)).latent_dist
            z = dist.sample(generator=generator)[0]
        cfg = self.vae.config
        shift = cfg.shift_factor if getattr(cfg, "shift_factor", None) is not None else 0.0
        return (z - shift) * cfg.scaling_factor


# ------------------------------------------------------------------ --tiny-random

def build_tiny_pipeline(folder, seed):
    """A pipeline folder of FLUX.1-dev's layout at flux-tiny's sizes: a 2-level AutoencoderKL (16 px -> 8 x 8 x 4,
    with Flux's shift and scale), CLIP (width 16: the pooled vector) and T5 (d_model 32: the sequence), each with
    seeded random weights, and word-level tokenizers over a small vocabulary (real ones need downloads). CLIP's
    tokenizer adds its start and end tokens and pads with the end token, T5's adds </s> and pads with <pad>."""
    import torch
    from diffusers import AutoencoderKL
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import CLIPTextConfig, CLIPTextModel, PreTrainedTokenizerFast, T5Config, T5EncoderModel

    words = ("a an the on of in red green blue yellow magenta cyan orange white black gray navy brown dark "
             "maroon circle square triangle diamond background with and small large bright").split()

    def tokenizer(specials, template, pad, max_len, sub):
        vocab = {w: i for i, w in enumerate(specials + words)}
        t = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        t.pre_tokenizer = pre_tokenizers.Whitespace()
        t.post_processor = processors.TemplateProcessing(
            single=template, special_tokens=[(s, vocab[s]) for s in specials if s in template])
        fast = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", pad_token=pad,
                                       model_max_length=max_len)
        fast.save_pretrained(os.path.join(folder, sub))
        return vocab

    cv = tokenizer(["<unk>", "<|startoftext|>", "<|endoftext|>"], "<|startoftext|> $A <|endoftext|>",
                   "<|endoftext|>", 16, "tokenizer")
    tv = tokenizer(["<pad>", "</s>", "<unk>"], "$A </s>", "<pad>", 512, "tokenizer_2")

    torch.manual_seed(seed)
    AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                  up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 8), layers_per_block=1,
                  latent_channels=4, norm_num_groups=4, sample_size=16, scaling_factor=0.3611, shift_factor=0.1159,
                  use_quant_conv=False, use_post_quant_conv=False).save_pretrained(os.path.join(folder, "vae"))
    torch.manual_seed(seed + 1)
    CLIPTextModel(CLIPTextConfig(vocab_size=len(cv), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, max_position_embeddings=16, projection_dim=16,
                                 bos_token_id=cv["<|startoftext|>"], eos_token_id=cv["<|endoftext|>"],
                                 pad_token_id=cv["<|endoftext|>"])).save_pretrained(
        os.path.join(folder, "text_encoder"))
    torch.manual_seed(seed + 2)
    T5EncoderModel(T5Config(vocab_size=len(tv), d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                            pad_token_id=tv["<pad>"], eos_token_id=tv["</s>"], decoder_start_token_id=0,
                            feed_forward_proj="gated-gelu")).save_pretrained(os.path.join(folder, "text_encoder_2"))


# ------------------------------------------------------------------ writing

def write_sample(path, tensors, meta, dtype):
    from safetensors.torch import save_file

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    out = {k: v.detach().to("cpu", dtype).contiguous() for k, v in tensors.items()}
    tmp = path + ".tmp"
    save_file(out, tmp, metadata={k: str(v) for k, v in meta.items()})
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", required=True, help="image folder (recursive), captions per --caption_strategy")
    ap.add_argument("--out", required=True, help="the cache folder to write (cache.json and one file per image)")
    ap.add_argument("--pipeline", help="local diffusers pipeline folder (with --tiny-random: where to build one)")
    ap.add_argument("--family", default="flux", choices=["flux"], help="SimpleTuner's model_family")
    ap.add_argument("--flavour", default="dev", choices=sorted(FLUX_SEQ), help="SimpleTuner's model_flavour")
    ap.add_argument("--resolution", type=int, help="square image edge in pixels (default 1024; tiny: 16)")
    ap.add_argument("--caption_strategy", default="filename", choices=["filename", "textfile"])
    ap.add_argument("--max_sequence_length", type=int,
                    help="T5 tokens (default the flavour's: dev 512, schnell 256; tiny: 8)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--seed", type=int, default=0, help="seeds the VAE's latent sample (and --tiny-random)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tiny-random", action="store_true", help="build a tiny random pipeline first (tests)")
    a = ap.parse_args()

    import torch
    import diffusers
    import transformers

    if not os.path.isdir(a.images):
        fail(f"--images {a.images}: not a folder")
    tmp = None
    if a.tiny_random:
        if not a.pipeline:
            tmp = tempfile.TemporaryDirectory()
            a.pipeline = tmp.name
        build_tiny_pipeline(a.pipeline, a.seed)
        a.resolution = a.resolution or 16
        a.max_sequence_length = a.max_sequence_length or 8
    if not a.pipeline:
        fail("--pipeline: give the local diffusers pipeline folder (vae/, text_encoder/, text_encoder_2/, "
             "tokenizer/, tokenizer_2/); nothing is downloaded")
    for sub in ("vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"):
        if not os.path.isdir(os.path.join(a.pipeline, sub)):
            fail(f"--pipeline {a.pipeline}: no {sub}/ folder (a Flux pipeline has vae/, text_encoder/, "
                 "text_encoder_2/, tokenizer/ and tokenizer_2/)")
    edge = a.resolution or 1024
    max_seq = a.max_sequence_length or FLUX_SEQ[a.flavour]
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[a.dtype]

    rels = list_images(a.images)
    if not rels:
        fail(f"--images {a.images}: no image ({', '.join(IMAGE_EXTS)})")
    names = [sample_name(r) for r in rels]
    seen = {}
    for r, n in zip(rels, names):
        if n == NULL_FILE:
            fail(f"{r}: its cache file would be {NULL_FILE}, the empty prompt's: rename the image")
        if n in seen:
            fail(f"{r} and {seen[n]} would both be cached as {n}: rename one")
        seen[n] = r

    # how the files name the models: the pipeline folder's name (a temporary tiny one is "tiny-random")
    label = "tiny-random" if tmp else os.path.basename(os.path.abspath(a.pipeline))
    vae = FluxVae(a.pipeline, label, a.device)
    enc = FluxEncoders(a.pipeline, label, a.device, max_seq)
    if edge % vae.scale_factor:
        fail(f"--resolution {edge}: not a multiple of the VAE's scale factor {vae.scale_factor}")
    common = {"format": f"{FORMAT}-{VERSION}", "family": a.family, "flavour": a.flavour, "vae": vae.name,
              "text_encoders": ", ".join(enc.names), "resolution": edge}

    shape = None
    os.makedirs(a.out, exist_ok=True)
    for i, (rel, name) in enumerate(zip(rels, names)):
        caption = caption_of(os.path.join(a.images, rel), a.caption_strategy)
        image, (w, h) = load_square(os.path.join(a.images, rel), edge)
        gen = torch.Generator(device="cpu").manual_seed(a.seed * 1000003 + i)
        latents = vae.encode(image, gen)
        shape = list(latents.shape)
        t = enc.encode(caption)
        t["latents"] = latents
        write_sample(os.path.join(a.out, name), t, dict(common, caption=caption, image=rel,
                                                        image_size=f"{w}x{h}"), dtype)
        print(f"{rel} -> {name}: latents {tuple(latents.shape)}, \"{caption}\"")
    # the empty prompt's embeddings: what caption_dropout_probability trains with
    write_sample(os.path.join(a.out, NULL_FILE), enc.encode(""), dict(common, caption=""), dtype)

    seq = enc.encode("")["prompt_embeds"]
    index = {
        "format": FORMAT, "version": VERSION, "family": a.family, "flavour": a.flavour,
        "latent_shape": shape, "text_len": max_seq, "text_dim": int(seq.shape[1]),
        "pooled_dim": int(enc.clip.config.hidden_size), "dtype": {"float32": "F32", "bfloat16": "BF16"}[a.dtype],
        "resolution": edge, "vae_scale_factor": vae.scale_factor, "vae": vae.name, "text_encoders": enc.names,
        "made_with": {"torch": torch.__version__, "diffusers": diffusers.__version__,
                      "transformers": transformers.__version__, "tiny_random": bool(a.tiny_random), "seed": a.seed},
        "count": len(names), "samples": names,
    }
    with open(os.path.join(a.out, "cache.json.tmp"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    os.replace(os.path.join(a.out, "cache.json.tmp"), os.path.join(a.out, "cache.json"))
    print(f"wrote {len(names)} samples and {NULL_FILE} to {a.out}/ (cache.json: latents {shape}, text "
          f"{max_seq} x {index['text_dim']}, pooled {index['pooled_dim']})")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
