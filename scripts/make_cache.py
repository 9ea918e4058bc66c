#!/usr/bin/env python3
"""Writes a segtrain cache (docs/CACHE.md): VAE latents and text-encoder embeddings of an image folder, made with
the user's local diffusers pipeline the way its pipeline makes them, for `segtrain train` with data_cache_dir.

  make_cache.py --images DIR --pipeline DIR --out DIR
                [--family flux|sd3|sd1x|sdxl|chroma|pixart_sigma|auraflow|wan|omnigen|sana|sanavideo|cosmos2image|
                          ltxvideo|lumina2|z_image|cosmos3|ernie|qwen_image|krea2|flux2]
                [--flavour NAME] [--resolution 1024] [--num_frames 1] [--caption_strategy filename|textfile]
                [--max_sequence_length N] [--motion_score N] [--text_encoder_layers L,L,...]
                [--dtype float32|bfloat16] [--seed 0] [--device cpu] [--check] [--buckets FILE]
  make_cache.py --tiny-random [--family F] --images DIR --out DIR [--pipeline DIR] [--check]   (tests)
  make_cache.py --family heartmula --audio DIR --tokenizer DIR --out DIR [--num_codebooks 8]
                [--audio_vocab_size 8197] [--text_vocab_size 128256]   (precomputed HeartCodec tokens: a token cache,
                scripts/heartmula_cache.py; --tiny-random makes tests/fixtures/cache-heartmula-tiny)

--buckets FILE takes `segtrain buckets --json`'s output: each image it lists (under --images) is cached at its aspect
bucket's size, resized and cropped as segtrain's assignment says (cache.json version 2, a shape per sample); a video
backend's clip (a folder of PNG frames) at its bucket's size and frames, its first F PNG frames in name order, F its
bucket's (SimpleTuner's rule for the clip's length: the model's 8 k + 1, then video.frame_interval).

--pipeline is a local pipeline folder as diffusers' save_pretrained writes it (FLUX.1-dev's: vae/, text_encoder/
(CLIP-L), text_encoder_2/ (T5-XXL), tokenizer/, tokenizer_2/; SD3's adds text_encoder_3/ and tokenizer_3/; Chroma's,
PixArt Sigma's, AuraFlow's, Wan's, Sana's, SanaVideo's, Cosmos 2's, LTX-Video's, Lumina 2's, Z-Image's,
ERNIE-Image's, Qwen-Image's, Krea 2's and FLUX.2 Klein's: vae/, text_encoder/, tokenizer/; OmniGen's: vae/,
tokenizer/, its prompt being token ids the transformer embeds itself; Cosmos 3's: vae/, text_tokenizer/, likewise);
nothing is downloaded. For the video families (wan, sanavideo, ltxvideo) with --num_frames N above 1, each sample is
a folder of N or more frames (image files, sorted by name; the first N taken) instead of an image, its caption the
folder's name or, with textfile, <folder>.txt beside it; the latents are (C, 1 + (N - 1) / 4, H, W) (LTX-Video's: /
8). The text is encoded as each family's diffusers 0.42.1 pipeline encodes it. --tiny-random builds such a folder
from small configs and seeded random weights (into --pipeline when given, else a temporary folder) at the family's
-tiny preset's shapes and then runs exactly the path a real pipeline takes: it tests the tool end to end and makes
the committed fixture tests/fixtures/cache-flux-tiny (flux-tiny's shapes: 4 latent channels, text_len 8, text_dim 32,
pooled 16).

Needs torch, diffusers and transformers (scripts/reference-venv.sh); `make test` never runs this.
"""
import argparse
import json
import os
import sys
import tempfile

FORMAT, VERSION, BUCKETED_VERSION = "segtrain-cache", 1, 2  # 2: a latent shape per sample (--buckets)
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
NULL_FILE = "null.safetensors"


def fail(msg):
    print(f"make_cache.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ------------------------------------------------------------------ images and captions

def fold(text):
    return " ".join(text.split())  # whitespace runs to one space, as segtrain's folder reader folds captions


def caption_of(path, strategy):
    """SimpleTuner's caption_strategy: filename (the stem, '_' -> ' ') or textfile (the .txt beside the image, or
    beside a clip's folder)."""
    stem = path if os.path.isdir(path) else os.path.splitext(path)[0]  # a clip's folder: its whole name
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


def list_sequences(root, n):
    """Relative paths of the frame folders under root (recursive, sorted, hidden skipped) holding n or more images:
    the video samples of --num_frames n; a folder of fewer is refused by name."""
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        frames = [f for f in files if not f.startswith(".") and f.lower().endswith(IMAGE_EXTS)]
        if not frames:
            continue
        if d == root:
            fail(f"--images {root}: with --num_frames {n} each sample is a folder of frames; images at the top")
        if len(frames) < n:
            fail(f"{os.path.relpath(d, root)}: {len(frames)} frames, --num_frames {n} takes {n}")
        found.append(os.path.relpath(d, root))
    return sorted(found)


def frame_names(folder, n):
    """The first n frames of a folder, sorted by name."""
    return sorted(f for f in os.listdir(folder) if not f.startswith(".") and f.lower().endswith(IMAGE_EXTS))[:n]


def load_frames(folder, n, load):
    """The first n frames of a folder, each as load(path) makes it (load_square, load_bucketed): (3, n, H, W), and
    the first frame's size."""
    return stack_frames([load(os.path.join(folder, f)) for f in frame_names(folder, n)])


def stack_frames(images):
    """Frames as load_square or load_bucketed give them, [(image, size)], as one clip (3, F, H, W), and the first
    frame's size."""
    import torch

    return torch.stack([im for im, _ in images], 1), images[0][1]


def sample_name(rel):
    """The sample's file: the image's relative path with .safetensors for its extension (SimpleTuner's VAE cache
    names its .pt files the same way)."""
    return os.path.splitext(rel)[0].replace(os.sep, "/") + ".safetensors"


def chw(im):
    """An RGB PIL image as FluxPipeline's VaeImageProcessor gives it to the VAE: [-1, 1] CHW float32."""
    import numpy
    import torch

    a = numpy.asarray(im, dtype=numpy.float32) / 127.5 - 1.0
    return torch.from_numpy(a).permute(2, 0, 1).contiguous()


def load_square(path, edge):
    """The image on a square: RGB, the center square of the shorter side, resized to edge (Lanczos, as SimpleTuner
    resizes), as chw gives it; and its own size."""
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        s = min(w, h)
        left, top = (w - s) // 2, (h - s) // 2
        im = im.crop((left, top, left + s, top + s))
        if s != edge:
            im = im.resize((edge, edge), Image.LANCZOS)
        return chw(im), (w, h)


def load_bucketed(path, place):
    """The image as SimpleTuner's VAE cache makes it for its aspect bucket, placed by segtrain's assignment (place:
    an image of `segtrain buckets --json`): RGB, resized to place's resize size with Lanczos (SimpleTuner's
    resampling, not segtrain's own area average, since the cache stands in for SimpleTuner's VAE cache), then the
    bucket's window cut at place's crop (top, left), as chw gives it; and its own size."""
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB")
        if list(im.size) != place["image_size"]:
            fail(f"{path} is {im.size[0]}x{im.size[1]}, but --buckets places a {place['image_size'][0]}x"
                 f"{place['image_size'][1]} image there (run segtrain buckets again if it changed; a clip's frames "
                 "are placed as its first)")
        (rw, rh), (top, left), (tw, th) = place["resize"], place["crop"], place["size"]
        if im.size != (rw, rh):
            im = im.resize((rw, rh), Image.LANCZOS)
        return chw(im.crop((left, top, left + tw, top + th))), tuple(place["image_size"])


def clip_frames(folder, n):
    """The first n PNG frames of a clip folder, sorted by name, as segtrain counts a clip's frames (PNGs only)."""
    names = sorted(f for f in os.listdir(folder) if not f.startswith(".") and f.lower().endswith(".png"))
    if len(names) < n:
        fail(f"{folder}: {len(names)} PNG frames, its bucket takes {n} (run segtrain buckets again if it changed)")
    return names[:n]


def read_buckets(path, root, n_frames):
    """--buckets: the images of `segtrain buckets --json` (path) as [(path relative to root, place)], in its order
    (backends in file order, each one's images in walk order), a video backend's clips among them (a place with
    "frames", its bucket's); with n_frames above 1, the frame folders under root, each placed as its first frame (a
    clip's frames share one size). And the settings it was made with."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        images = doc["images"]
        settings = {k: doc[k] for k in ("data_backend_config", "resolution", "resolution_type",
                                        "aspect_bucket_alignment", "aspect_bucket_rounding", "seed")}
        places = {}
        real_root = os.path.realpath(root)
        for p in images:
            rel = os.path.relpath(os.path.realpath(p["path"]), real_root)
            if rel.startswith(".." + os.sep):
                fail(f"--buckets {path}: {p['path']} is not under --images {root}, which names the samples")
            places[rel] = {k: p[k] for k in ("name", "image_size", "resize", "crop", "size", "frames") if k in p}
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"--buckets {path}: not what `segtrain buckets --json` writes ({type(e).__name__}: {e})")
    clips = [rel for rel, p in places.items() if "frames" in p]
    if clips and n_frames != 1:
        fail(f"--num_frames {n_frames}: --buckets {path} places clips ({clips[0]}, ...), each cached at its bucket's "
             "frames; leave --num_frames out")
    if n_frames == 1:
        return list(places.items()), settings
    placed = []
    for rel in list_sequences(root, n_frames):
        first = os.path.normpath(os.path.join(rel, frame_names(os.path.join(root, rel), n_frames)[0]))
        if first not in places:
            fail(f"{rel}: its first frame {first} is not in --buckets {path} (a clip is placed as its first frame)")
        placed.append((rel, places[first]))
    return placed, settings


# ------------------------------------------------------------------ encoders (each pipeline's encode_prompt)

def load_tok(pipe, sub):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(os.path.join(pipe, sub))


def load_model(cls_name, pipe, sub, device):
    import transformers
    return getattr(transformers, cls_name).from_pretrained(os.path.join(pipe, sub)).to(device).eval()


def pipeline_stub(cls_name, **parts):
    """A diffusers pipeline object holding only the given parts (no __init__, no other models loaded): enough to call
    its prompt-encoding methods, which --check compares each family's encoder against."""
    import diffusers

    p = getattr(diffusers, cls_name).__new__(getattr(diffusers, cls_name))
    for k, v in parts.items():
        object.__setattr__(p, k, v)
    return p


def tokens(tok, caption, n):
    """The pipelines' tokenizer call: padded to max_length n and truncated."""
    return tok([caption], padding="max_length", max_length=n, truncation=True, return_tensors="pt")


class FluxEncoders:
    """CLIP-L's pooled output and T5's last hidden state, as diffusers' FluxPipeline._get_clip_prompt_embeds and
    _get_t5_prompt_embeds compute them: both tokenizers pad to max_length and truncate; CLIP at its
    model_max_length (77), T5 at max_sequence_length; T5 is run without an attention mask (the pipeline passes
    none), so the padded positions hold T5's own outputs, and the mask is stored beside them for reference."""

    def __init__(self, pipe, label, device, max_seq):
        self.device, self.max_seq = device, max_seq
        self.tok, self.tok2 = load_tok(pipe, "tokenizer"), load_tok(pipe, "tokenizer_2")
        self.clip = load_model("CLIPTextModel", pipe, "text_encoder", device)
        self.t5 = load_model("T5EncoderModel", pipe, "text_encoder_2", device)
        self.names = [f"{label}/text_encoder ({type(self.clip).__name__})",
                      f"{label}/text_encoder_2 ({type(self.t5).__name__})"]

    def encode(self, caption):
        import torch

        with torch.no_grad():
            ids = tokens(self.tok, caption, self.tok.model_max_length).input_ids
            pooled = self.clip(ids.to(self.device), output_hidden_states=False).pooler_output[0]
            t = tokens(self.tok2, caption, self.max_seq)
            seq = self.t5(t.input_ids.to(self.device), output_hidden_states=False)[0][0]
        return {"prompt_embeds": seq, "pooled_prompt_embeds": pooled, "attention_mask": t.attention_mask[0]}


class Sd3Encoders:
    """StableDiffusion3Pipeline.encode_prompt: CLIP-L's and CLIP-G's penultimate hidden states (both tokenized at
    CLIP-L's tokenizer's model_max_length, 77), concatenated along the width and zero-padded to T5's, then T5's last
    hidden state at max_sequence_length (run without a mask); the pooled vector is the two CLIPs' projected
    outputs concatenated (768 + 1280). The mask, stored for reference (the pipeline passes none), is CLIP-L's
    tokens' then T5's."""

    def __init__(self, pipe, label, device, max_seq):
        self.device, self.max_seq = device, max_seq
        self.toks = [load_tok(pipe, s) for s in ("tokenizer", "tokenizer_2", "tokenizer_3")]
        self.clips = [load_model("CLIPTextModelWithProjection", pipe, s, device)
                      for s in ("text_encoder", "text_encoder_2")]
        self.t5 = load_model("T5EncoderModel", pipe, "text_encoder_3", device)
        self.names = [f"{label}/{s} ({type(m).__name__})"
                      for s, m in zip(("text_encoder", "text_encoder_2", "text_encoder_3"), self.clips + [self.t5])]

    def encode(self, caption):
        import torch

        n = self.toks[0].model_max_length  # the pipeline's tokenizer_max_length, for both CLIPs
        with torch.no_grad():
            hidden, pooled = [], []
            for tok, clip in zip(self.toks, self.clips):
                t = tokens(tok, caption, n)
                out = clip(t.input_ids.to(self.device), output_hidden_states=True)
                hidden.append(out.hidden_states[-2][0])
                pooled.append(out[0][0])
                if tok is self.toks[0]:
                    clip_mask = t.attention_mask[0]
            t = tokens(self.toks[2], caption, self.max_seq)
            t5 = self.t5(t.input_ids.to(self.device))[0][0]
            clip_seq = torch.nn.functional.pad(torch.cat(hidden, -1), (0, t5.shape[-1] - sum(h.shape[-1] for h in hidden)))
        return {"prompt_embeds": torch.cat([clip_seq, t5], 0), "pooled_prompt_embeds": torch.cat(pooled, -1),
                "attention_mask": torch.cat([clip_mask, t.attention_mask[0]], 0)}


class SdxlEncoders:
    """StableDiffusionXLPipeline.encode_prompt: CLIP-L's (text_encoder/, CLIPTextModel) and OpenCLIP-G's
    (text_encoder_2/, CLIPTextModelWithProjection) penultimate hidden states, each tokenized at its tokenizer's
    model_max_length (77), side by side (768 + 1280 = 2048); the pooled vector OpenCLIP-G's projected output (1280).
    The U-Net attends to every token; CLIP-L's mask is stored for reference. The six size ids are the image's
    (main)."""

    def __init__(self, pipe, label, device, max_seq):
        self.device = device
        self.toks = [load_tok(pipe, s) for s in ("tokenizer", "tokenizer_2")]
        self.clips = [load_model("CLIPTextModel", pipe, "text_encoder", device),
                      load_model("CLIPTextModelWithProjection", pipe, "text_encoder_2", device)]
        self.names = [f"{label}/{s} ({type(m).__name__})" for s, m in zip(("text_encoder", "text_encoder_2"),
                                                                          self.clips)]

    def encode(self, caption):
        import torch

        with torch.no_grad():
            hidden = []
            for tok, clip in zip(self.toks, self.clips):
                t = tokens(tok, caption, tok.model_max_length)
                out = clip(t.input_ids.to(self.device), output_hidden_states=True)
                hidden.append(out.hidden_states[-2][0])
                if tok is self.toks[0]:
                    mask = t.attention_mask[0]
            pooled = out[0][0]  # OpenCLIP-G's text_embeds
        return {"prompt_embeds": torch.cat(hidden, -1), "pooled_prompt_embeds": pooled, "attention_mask": mask}

    def reference(self, caption):
        from diffusers.configuration_utils import FrozenDict

        p = pipeline_stub("StableDiffusionXLPipeline", tokenizer=self.toks[0], tokenizer_2=self.toks[1],
                          text_encoder=self.clips[0], text_encoder_2=self.clips[1],
                          _internal_dict=FrozenDict(force_zeros_for_empty_prompt=True))
        seq = p.encode_prompt(caption, device=self.device, num_images_per_prompt=1,
                              do_classifier_free_guidance=False)[0]
        return seq[0], None


class Sd1xEncoders(SdxlEncoders):
    """StableDiffusionPipeline.encode_prompt (clip_skip None): CLIP-L's (text_encoder/, CLIPTextModel) last hidden
    state at its tokenizer's model_max_length (77), 768 wide, no pooled vector; the mask stored for reference (the
    U-Net attends to every token)."""

    def __init__(self, pipe, label, device, max_seq):
        self.device = device
        self.toks = [load_tok(pipe, "tokenizer")]
        self.clips = [load_model("CLIPTextModel", pipe, "text_encoder", device)]
        self.names = [f"{label}/text_encoder ({type(self.clips[0]).__name__})"]

    def encode(self, caption):
        import torch

        with torch.no_grad():
            t = tokens(self.toks[0], caption, self.toks[0].model_max_length)
            seq = self.clips[0](t.input_ids.to(self.device))[0][0]
        return {"prompt_embeds": seq, "attention_mask": t.attention_mask[0]}

    def reference(self, caption):
        p = pipeline_stub("StableDiffusionPipeline", tokenizer=self.toks[0], text_encoder=self.clips[0])
        seq = p.encode_prompt(caption, device=self.device, num_images_per_prompt=1,
                              do_classifier_free_guidance=False)[0]
        return seq[0], None


def size_ids(w, h, edge, place=None):
    """SDXL's add_time_ids as SimpleTuner gives them: the original size (height, width), the crop's top-left corner
    and the target size (height, width). A square crop's corner is in the frame resized so that its shorter side is
    the edge; a bucket's (place) is its crop in the resized image, its target the bucket's size."""
    if place:
        (top, left), (tw, th) = place["crop"], place["size"]
        return [float(h), float(w), float(top), float(left), float(th), float(tw)]
    s = min(w, h)
    top, left = round((h - s) // 2 * edge / s), round((w - s) // 2 * edge / s)
    return [float(h), float(w), float(top), float(left), float(edge), float(edge)]


class TextEncoder:
    """What most families' encoders share: the pipeline's tokenizer/ and its one text_encoder/ (a transformers class
    named by MODEL), on the device, its name for the cache's index."""
    MODEL = "AutoModel"

    def __init__(self, pipe, label, device, max_seq):
        self.device, self.max_seq = device, max_seq
        self.tok = load_tok(pipe, "tokenizer")
        self.enc = load_model(self.MODEL, pipe, "text_encoder", device)
        self.names = [f"{label}/text_encoder ({type(self.enc).__name__})"]


class ChromaEncoders(TextEncoder):
    """ChromaPipeline._get_t5_prompt_embeds: T5 at max_sequence_length, run with the tokenizer's mask; the mask
    returned (and stored, since chroma reads it) keeps the first padding token (index <= the real length), as
    Chroma's pipeline lets the model attend to one </s>-like padding position. No pooled vector."""
    MODEL = "T5EncoderModel"

    def encode(self, caption):
        import torch

        with torch.no_grad():
            t = tokens(self.tok, caption, self.max_seq)
            seq = self.enc(t.input_ids.to(self.device), attention_mask=t.attention_mask.to(self.device))[0][0]
        n = int(t.attention_mask[0].sum())
        return {"prompt_embeds": seq, "attention_mask": (torch.arange(seq.shape[0]) <= n).to(torch.int64)}


class PixArtEncoders(ChromaEncoders):
    """PixArtSigmaPipeline.encode_prompt: T5 at max_sequence_length (SimpleTuner's 300), run with the tokenizer's
    mask, which is stored as it is (its tokens, then padding). No pooled vector. The caption is encoded as given:
    SimpleTuner asks for clean_caption, which diffusers applies only where bs4 and ftfy are installed."""

    def encode(self, caption):
        import torch

        with torch.no_grad():
            t = tokens(self.tok, caption, self.max_seq)
            seq = self.enc(t.input_ids.to(self.device), attention_mask=t.attention_mask.to(self.device))[0][0]
        return {"prompt_embeds": seq, "attention_mask": t.attention_mask[0].to(torch.int64)}


class AuraFlowEncoders(TextEncoder):
    """AuraFlowPipeline.encode_prompt: its UMT5 (Pile-T5) at max_sequence_length, run with the tokenizer's mask,
    the outputs multiplied by the mask (padding rows zero). No pooled vector."""
    MODEL = "UMT5EncoderModel"

    def encode(self, caption):
        import torch

        with torch.no_grad():
            t = tokens(self.tok, caption, self.max_seq)
            mask = t.attention_mask.to(self.device)
            seq = self.enc(input_ids=t.input_ids.to(self.device), attention_mask=mask)[0][0] * mask[0, :, None]
        return {"prompt_embeds": seq, "attention_mask": t.attention_mask[0]}


class Lumina2Encoders(TextEncoder):
    """Lumina2Pipeline._get_gemma_prompt_embeds as SimpleTuner's Lumina 2 calls it: its system prompt,
    " <Prompt Start> " and the caption, padded and truncated to tokenizer_max_length (256 by default), Gemma 2 run
    with the mask, the second-to-last layer's states and the mask stored (a tokenizer that pads on the left makes
    masks segtrain refuses: its captions' tokens must come first). No pooled vector."""
    SYSTEM_PROMPT = ("You are an assistant designed to generate superior images with the superior degree of image-text "
                     "alignment based on textual prompts or user prompts.")
    MODEL = "Gemma2Model"

    def encode(self, caption):
        import torch

        t = tokens(self.tok, self.SYSTEM_PROMPT + " <Prompt Start> " + caption, self.max_seq)
        with torch.no_grad():
            out = self.enc(t.input_ids.to(self.device), attention_mask=t.attention_mask.to(self.device),
                           output_hidden_states=True)
        return {"prompt_embeds": out.hidden_states[-2][0], "attention_mask": t.attention_mask[0].to(torch.int64)}

    def reference(self, caption):
        p = pipeline_stub("Lumina2Pipeline", tokenizer=self.tok, text_encoder=self.enc, transformer=None)
        seq, mask = p._get_gemma_prompt_embeds(self.SYSTEM_PROMPT + " <Prompt Start> " + caption,
                                               device=self.enc.device, max_sequence_length=self.max_seq)
        return seq[0], mask[0]


class ZImageEncoders(TextEncoder):
    """SimpleTuner's Z-Image _encode_prompts (ZImagePipeline._encode_prompt's path): the caption as one user turn
    through the tokenizer's chat template (add_generation_prompt, enable_thinking), padded and truncated to
    tokenizer_max_length (512 by default), Qwen3 run with the mask, the second-to-last layer's states and the mask
    stored. No pooled vector. FLUX.2 Klein's encoder is the same with thinking off and several layers."""
    thinking, layers = True, (-2,)

    def encode(self, caption):
        import torch

        text = self.tok.apply_chat_template([{"role": "user", "content": caption}], tokenize=False,
                                            add_generation_prompt=True, enable_thinking=self.thinking)
        t = tokens(self.tok, text, self.max_seq)
        with torch.no_grad():
            out = self.enc(input_ids=t.input_ids.to(self.device), attention_mask=t.attention_mask.to(self.device),
                           output_hidden_states=True, use_cache=False)
        states = torch.stack([out.hidden_states[k][0] for k in self.layers], 1)  # each token's layers side by side
        return {"prompt_embeds": states.reshape(states.shape[0], -1), "attention_mask": t.attention_mask[0].long()}

    def reference(self, caption):
        p = pipeline_stub("ZImagePipeline", tokenizer=self.tok, text_encoder=self.enc)
        return p._encode_prompt(caption, device=self.enc.device, max_sequence_length=self.max_seq)[0], None


class Cosmos3Tokens:
    """Cosmos3OmniPipeline's text-to-image prompt, as its tokenize_prompt makes it for one image: the system prompt
    (default_use_system_prompt), the caption with the resolution template after it ("This image is of HxW
    resolution.", joined as the pipeline joins them), through the text tokenizer's chat template with the
    generation prompt, then its eos and <|vision_start|> (the start of generation). The ids, as floats (L, 1), are
    prompt_embeds, padded with 0 after them, and the mask marks them; a prompt of more ids than
    --max_sequence_length is refused rather than cut. No model runs."""
    SYSTEM = "You are a helpful assistant who will generate images from a give prompt."
    TEMPLATE = "This image is of {height}x{width} resolution."
    resolution = 1024

    def __init__(self, pipe, label, device, max_seq):
        self.max_seq = max_seq
        self.tok = load_tok(pipe, "text_tokenizer")
        self.names = [f"{label}/text_tokenizer ({type(self.tok).__name__}; Cosmos 3 embeds the ids itself)"]

    def encode(self, caption):
        base = caption.rstrip(".")
        addition = self.TEMPLATE.format(height=self.resolution, width=self.resolution)
        turns = [{"role": "system", "content": self.SYSTEM},
                 {"role": "user", "content": f"{base}. {addition}" if base else addition}]
        ids = self.tok.apply_chat_template(turns, tokenize=True, add_generation_prompt=True, add_vision_id=False,
                                           return_dict=True)["input_ids"]
        ids = list(ids) + [self.tok.eos_token_id, self.tok.convert_tokens_to_ids("<|vision_start|>")]
        return token_ids(ids, self.max_seq, caption, "Cosmos 3")

    def reference(self, caption):
        from diffusers.configuration_utils import FrozenDict

        p = pipeline_stub("Cosmos3OmniPipeline", text_tokenizer=self.tok,
                          _internal_dict=FrozenDict(default_use_system_prompt=True),
                          llm_special_tokens={"eos_token_id": self.tok.eos_token_id, "start_of_generation":
                                              self.tok.convert_tokens_to_ids("<|vision_start|>")},
                          image_resolution_template=self.TEMPLATE,
                          inverse_image_resolution_template="This image is not of {height}x{width} resolution.")
        ids, _ = p.tokenize_prompt(caption, num_frames=1, height=self.resolution, width=self.resolution)
        return token_ids(ids, self.max_seq, caption, "Cosmos 3")["prompt_embeds"], None


class ErnieEncoders(TextEncoder):
    """SimpleTuner's ERNIE-Image _encode_prompts: the caption alone, unpadded, with the tokenizer's special tokens and
    truncated at tokenizer_max_length, through the text encoder (AutoModel; a vision-language one's language model
    on its input embeddings), the second-to-last layer's states; SimpleTuner pads a batch's captions with zeros to
    the longest, so the cache pads them to --max_sequence_length with zeros and a mask. No pooled vector."""

    def encode(self, caption):
        import torch

        t = self.tok([caption], add_special_tokens=True, padding=False, truncation=True, max_length=self.max_seq,
                     return_tensors="pt")
        ids, mask = t.input_ids.to(self.device), t.attention_mask.to(self.device).bool()
        with torch.no_grad():
            if hasattr(self.enc, "language_model") and hasattr(self.enc, "get_input_embeddings"):
                out = self.enc.language_model(inputs_embeds=self.enc.get_input_embeddings()(ids), attention_mask=mask,
                                              output_hidden_states=True, return_dict=True)
            else:
                out = self.enc(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        states = out.hidden_states[-2][0]
        seq = torch.zeros(self.max_seq, states.shape[1], dtype=states.dtype)
        seq[:states.shape[0]] = states
        m = torch.zeros(self.max_seq, dtype=torch.int64)
        m[:states.shape[0]] = 1
        return {"prompt_embeds": seq, "attention_mask": m}


class QwenImageEncoders(TextEncoder):
    """QwenImagePipeline._get_qwen_prompt_embeds and encode_prompt (SimpleTuner's Qwen-Image pipeline inherits them):
    the caption in the pipeline's chat template, tokenized to max_sequence_length + 34 and truncated, Qwen2.5-VL
    run with the mask, the last layer's states of the caption's tokens after the template's 34-token system prefix,
    cut to max_sequence_length (1024 by default) and zero-padded with a mask. No pooled vector."""
    TEMPLATE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
                "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
                "<|im_start|>assistant\n")
    DROP = 34

    MODEL = "Qwen2_5_VLForConditionalGeneration"

    def encode(self, caption):
        import torch

        t = self.tok([self.TEMPLATE.format(caption)], max_length=self.max_seq + self.DROP, padding=True,
                     truncation=True, return_tensors="pt")
        mask = t.attention_mask.to(self.device)
        with torch.no_grad():
            states = self.enc(input_ids=t.input_ids.to(self.device), attention_mask=mask,
                              output_hidden_states=True).hidden_states[-1][0]
        rows = states[mask[0].bool()][self.DROP:][:self.max_seq]
        seq = torch.zeros(self.max_seq, rows.shape[1], dtype=rows.dtype)
        seq[:rows.shape[0]] = rows
        m = torch.zeros(self.max_seq, dtype=torch.int64)
        m[:rows.shape[0]] = 1
        return {"prompt_embeds": seq, "attention_mask": m}

    def reference(self, caption):
        p = pipeline_stub("QwenImagePipeline", tokenizer=self.tok, text_encoder=self.enc,
                          prompt_template_encode=self.TEMPLATE, prompt_template_encode_start_idx=self.DROP,
                          tokenizer_max_length=self.max_seq)
        seq, _ = p.encode_prompt(caption, device=self.enc.device, max_sequence_length=self.max_seq)
        return seq[0], None


class Krea2Encoders(TextEncoder):
    """Krea2Pipeline.get_text_hidden_states, as SimpleTuner's Krea 2 calls encode_prompt for text to image: Qwen-Image's
    chat template split around the caption, the prefix and caption padded and truncated to max_sequence_length + 34
    - 5 tokens and the 5 suffix tokens after the padding ([prefix | caption | PAD | suffix]); Qwen3-VL run with the
    mask and positions that count only real tokens; each token's tapped layers side by side (text_dim = layers x
    width), the 34 prefix rows dropped. The mask keeps its hole between the caption and the suffix, which krea2 reads
    as a key mask. The tapped layers are the pipeline's text_encoder_select_layers (its model_index.json), Krea 2's
    (2, 5, ..., 35) when the folder names none. No pooled vector."""
    PREFIX = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
              "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n")
    SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
    DROP, SUFFIX_TOKENS = 34, 5

    MODEL = "Qwen3VLModel"

    def __init__(self, pipe, label, device, max_seq):
        super().__init__(pipe, label, device, max_seq)
        index = os.path.join(pipe, "model_index.json")
        layers = json.load(open(index)).get("text_encoder_select_layers") if os.path.exists(index) else None
        self.layers = tuple(layers or range(2, 36, 3))
        self.names = [f"{label}/text_encoder ({type(self.enc).__name__}, layers {list(self.layers)})"]

    def encode(self, caption):
        import torch

        t = self.tok([self.PREFIX + caption], truncation=True, padding="max_length",
                     max_length=self.max_seq + self.DROP - self.SUFFIX_TOKENS, return_tensors="pt")
        u = self.tok([self.SUFFIX], return_tensors="pt")
        ids = torch.cat([t.input_ids, u.input_ids], 1).to(self.device)
        mask = torch.cat([t.attention_mask, u.attention_mask], 1).bool().to(self.device)
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0).unsqueeze(0).expand(3, -1, -1)
        with torch.no_grad():
            out = self.enc(input_ids=ids, attention_mask=mask, position_ids=pos, output_hidden_states=True)
        states = torch.stack([out.hidden_states[i][0] for i in self.layers], 1)[self.DROP:]
        return {"prompt_embeds": states.reshape(states.shape[0], -1), "attention_mask": mask[0, self.DROP:].long()}

    def reference(self, caption):
        p = pipeline_stub("Krea2Pipeline", tokenizer=self.tok, text_encoder=self.enc,
                          text_encoder_select_layers=self.layers, prompt_template_encode_prefix=self.PREFIX,
                          prompt_template_encode_suffix=self.SUFFIX, prompt_template_encode_start_idx=self.DROP,
                          prompt_template_encode_num_suffix_tokens=self.SUFFIX_TOKENS)
        seq, mask = p.get_text_hidden_states(caption, self.max_seq, self.enc.device)
        return seq[0].reshape(seq.shape[1], -1), mask[0]


class Flux2KleinEncoders(ZImageEncoders):
    """FLUX.2 Klein's Qwen3 encoder as SimpleTuner's Flux 2 runs it (_encode_prompts_qwen3, the same as diffusers'
    Flux2KleinPipeline._get_qwen3_prompt_embeds): Z-Image's path with thinking off, padded and truncated to 512, the
    tapped layers' states side by side per token (Klein's (9, 18, 27), or --text_encoder_layers as SimpleTuner's
    custom_text_encoder_intermediary_layers) and the mask. No pooled vector."""
    thinking, layers = False, (9, 18, 27)

    def reference(self, caption):
        import diffusers

        seq = diffusers.Flux2KleinPipeline._get_qwen3_prompt_embeds(self.enc, self.tok, caption,
                                                                    max_sequence_length=self.max_seq,
                                                                    hidden_states_layers=self.layers)
        return seq[0], None


class CosmosEncoders(AuraFlowEncoders):
    """SimpleTuner's Cosmos 2 _encode_prompts (its own, not the pipeline's): T5 at tokenizer_max_length (512 by
    default) run with the tokenizer's mask, the rows past each caption's length set to zero; the mask stored for
    reference (the model reads none). No pooled vector."""
    MODEL = "T5EncoderModel"

    def encode(self, caption):
        import torch

        with torch.no_grad():
            t = tokens(self.tok, caption, self.max_seq)
            seq = self.enc(t.input_ids.to(self.device), attention_mask=t.attention_mask.to(self.device))[0][0]
        seq[int(t.attention_mask[0].sum()):] = 0
        return {"prompt_embeds": seq, "attention_mask": t.attention_mask[0].to(torch.int64)}


def token_ids(ids, max_seq, caption, family):
    """A prompt that is token ids (OmniGen's, Cosmos 3's): the ids as floats (max_seq, 1), 0 after them, and the mask
    that marks them; more ids than max_seq are refused rather than cut (that would drop the template's end)."""
    import torch

    if len(ids) > max_seq:
        fail(f"the prompt \"{caption}\" is {len(ids)} tokens in {family}'s template; --max_sequence_length is "
             f"{max_seq}")
    seq = torch.zeros(max_seq, 1)
    seq[:len(ids), 0] = torch.tensor(ids, dtype=torch.float32)
    mask = torch.zeros(max_seq, dtype=torch.int64)
    mask[:len(ids)] = 1
    return {"prompt_embeds": seq, "attention_mask": mask}


class OmniGenTokens:
    """OmniGen reads token ids, not a text encoder's states: OmniGenMultiModalProcessor.process_multi_modal_prompt
    (no input images) wraps the prompt in its instruction template (add_prefix_instruction) and tokenizes it; the
    ids, as floats (L, 1), are prompt_embeds, padded with 0 after them, and the mask marks them. A prompt whose ids
    pass --max_sequence_length is refused (cutting it would drop the template's end). No model runs."""
    TEMPLATE = ("<|user|>\nGenerate an image according to the following instructions\n{}<|end|>\n<|assistant|>\n"
                "<|diffusion|>")

    def __init__(self, pipe, label, device, max_seq):
        self.max_seq = max_seq
        self.tok = load_tok(pipe, "tokenizer")
        self.names = [f"{label}/tokenizer ({type(self.tok).__name__}; OmniGen embeds the ids itself)"]

    def encode(self, caption):
        return token_ids(self.tok(self.TEMPLATE.format(caption)).input_ids, self.max_seq, caption, "OmniGen")


class SanaEncoders(TextEncoder):
    """SanaPipeline.encode_prompt as SimpleTuner's Sana calls it (max_sequence_length 300, its default complex human
    instruction: the field's lines stripped and joined by newlines): the caption lowercased and stripped, the
    instruction before it, Gemma 2 run with the tokenizer's mask (right padding) over the instruction's tokens plus
    max_sequence_length - 2, then the first position (BOS) and the last max_sequence_length - 1 kept, states and
    mask alike. No pooled vector."""
    INSTRUCTION = [
        "Given a user prompt, generate an 'Enhanced prompt' that provides detailed visual descriptions suitable for "
        "image generation. Evaluate the level of detail in the user prompt:",
        "- If the prompt is simple, focus on adding specifics about colors, shapes, sizes, textures, and spatial "
        "relationships to create vivid and concrete scenes.",
        "- Do not add detail that is not in the original prompt! Do not mention colors if the User Prompt does not!",
        "- If the prompt is already detailed, refine and enhance the existing details slightly without "
        "overcomplicating.",
        "- If the prompt contains explicit material, do not remove this information from the output, which would "
        "damage the performance of downstream classifiers.",
        "Here are examples of how to transform or refine prompts:",
        "- User Prompt: A cat sleeping -> Enhanced: A cat sleeping peacefully, showcasing the joy of pet ownership. "
        "Cute floof kitty cat gatto.",
        "- User Prompt: A busy city street -> Enhanced: A bustling city street scene featuring a crowd of people.",
        "Please generate only the enhanced description for the prompt below and avoid including any additional "
        "commentary or evaluations:",
        "User Prompt:",
    ]

    MODEL = "Gemma2Model"

    def __init__(self, pipe, label, device, max_seq):
        super().__init__(pipe, label, device, max_seq)
        self.tok.padding_side = "right"

    def encode(self, caption):
        import torch

        chi = "\n".join(self.INSTRUCTION)
        caption = self.prompt(caption)
        n = len(self.tok.encode(chi)) + self.max_seq - 2
        t = self.tok([chi + caption.lower().strip()], padding="max_length", max_length=n, truncation=True,
                     add_special_tokens=True, return_tensors="pt")
        with torch.no_grad():
            seq = self.enc(t.input_ids.to(self.device), attention_mask=t.attention_mask.to(self.device))[0][0]
        keep = [0] + list(range(-self.max_seq + 1, 0))
        return {"prompt_embeds": seq[keep], "attention_mask": t.attention_mask[0, keep].to(torch.int64)}

    def prompt(self, caption):
        return caption

    PIPELINE = "SanaPipeline"

    def reference(self, caption):
        p = pipeline_stub(self.PIPELINE, tokenizer=self.tok, text_encoder=self.enc, transformer=None)
        seq, mask, _, _ = p.encode_prompt(self.prompt(caption), do_classifier_free_guidance=False,
                                          device=self.enc.device, max_sequence_length=self.max_seq,
                                          complex_human_instruction=self.INSTRUCTION)
        return seq[0], mask[0]


class SanaVideoEncoders(SanaEncoders):
    """SanaVideoPipeline.encode_prompt (the same path as Sana's) as SimpleTuner's SanaVideo calls it: its own video
    instruction (COMPLEX_HUMAN_INSTRUCTION, used as written), and with --motion_score (SimpleTuner's
    sana_motion_score, unset by default) " motion score: N." after every caption, the empty one included."""
    INSTRUCTION = [
        "Given a user prompt, generate an 'Enhanced prompt' that provides detailed visual descriptions suitable for "
        "video generation. Evaluate the level of detail in the user prompt:",
        "- If the prompt is simple, focus on adding specifics about colors, shapes, sizes, textures, motion, and "
        "temporal relationships to create vivid and dynamic scenes.",
        "- If the prompt is already detailed, refine and enhance the existing details slightly without "
        "overcomplicating.",
        "Here are examples of how to transform or refine prompts:",
        "- User Prompt: A cat sleeping -> Enhanced: A small, fluffy white cat slowly settling into a curled position, "
        "peacefully falling asleep on a warm sunny windowsill, with gentle sunlight filtering through surrounding pots "
        "of blooming red flowers.",
        "- User Prompt: A busy city street -> Enhanced: A bustling city street scene at dusk, featuring glowing street "
        "lamps gradually lighting up, a diverse crowd of people in colorful clothing walking past, and a double-decker "
        "bus smoothly passing by towering glass skyscrapers.",
        "Please generate only the enhanced description for the prompt below and avoid including any additional "
        "commentary or evaluations:",
        "User Prompt: ",
    ]
    motion_score = None
    PIPELINE = "SanaVideoPipeline"

    def prompt(self, caption):
        return caption if self.motion_score is None else f"{caption} motion score: {self.motion_score}."


class VaeBase:
    """What the VAE wrappers share: the pipeline's vae/ as the diffusers class CLASS, on the device, and
    scale_factor, its image pixels per latent pixel along an edge (AutoencoderKL's: a halving a level after the
    first)."""
    CLASS = "AutoencoderKL"

    def __init__(self, pipe, label, device):
        import diffusers

        self.device = device
        self.vae = getattr(diffusers, self.CLASS).from_pretrained(os.path.join(pipe, "vae")).to(device).eval()
        self.scale_factor = self.spatial_scale()
        self.name = f"{label}/vae ({self.CLASS})"

    def spatial_scale(self):
        return 2 ** (len(self.vae.config.block_out_channels) - 1)


class DcVae(VaeBase):
    """AutoencoderDC (Sana's DC-AE, 32x): encode(x).latent times scaling_factor (0.41407), as SimpleTuner's VAE cache
    stores it, then times SimpleTuner's LATENT_RESCALE (0.5), which its Sana prepare_batch applies to every training
    batch: the cache holds the latents as the model trains on them."""
    CLASS, LATENT_RESCALE = "AutoencoderDC", 0.5

    def spatial_scale(self):
        return 2 ** (len(self.vae.config.encoder_block_out_channels) - 1)

    def encode(self, image, generator):
        import torch

        with torch.no_grad():
            z = self.vae.encode(image[None].to(self.device)).latent[0]
        return z * self.vae.config.scaling_factor * self.LATENT_RESCALE


class Vae(VaeBase):
    """AutoencoderKL's latent_dist.sample(), then (x - shift_factor) * scaling_factor, as the pipelines prepare
    image latents and SimpleTuner's VAE cache stores them (Flux's and Chroma's VAE: shift 0.1159, scale 0.3611;
    SD3's: 0.0609, 1.5305; AuraFlow's SDXL VAE: no shift, 0.13025)."""

    def encode(self, image, generator):
        import torch

        with torch.no_grad():
            dist = self.vae.encode(image[None].to(self.device)).latent_dist
            z = dist.sample(generator=generator)[0]
        cfg = self.vae.config
        shift = cfg.shift_factor if getattr(cfg, "shift_factor", None) is not None else 0.0
        return (z - shift) * cfg.scaling_factor


class WanEncoders(TextEncoder):
    """WanPipeline._get_t5_prompt_embeds: UMT5 at max_sequence_length with the tokenizer's mask (the prompt
    whitespace-cleaned), each sequence cut to its tokens and zero-padded back: wan reads the zeros unmasked; the mask
    is stored for reference. No pooled vector."""
    MODEL = "UMT5EncoderModel"

    def encode(self, caption):
        import re
        import torch

        caption = re.sub(r"\s+", " ", caption).strip()
        with torch.no_grad():
            t = tokens(self.tok, caption, self.max_seq)
            mask = t.attention_mask.to(self.device)
            seq = self.enc(t.input_ids.to(self.device), mask).last_hidden_state[0]
        n = int(t.attention_mask[0].sum())
        seq = torch.cat([seq[:n], seq.new_zeros(seq.shape[0] - n, seq.shape[1])])
        return {"prompt_embeds": seq, "attention_mask": t.attention_mask[0]}


class LtxEncoders(ChromaEncoders):
    """LTXPipeline._get_t5_prompt_embeds, as SimpleTuner's LTX-Video calls encode_prompt (its default
    max_sequence_length, 128): T5 run without a mask; the tokenizer's mask stored beside it, which the model reads."""

    def encode(self, caption):
        import torch

        with torch.no_grad():
            t = tokens(self.tok, caption, self.max_seq)
            seq = self.enc(t.input_ids.to(self.device))[0][0]
        return {"prompt_embeds": seq, "attention_mask": t.attention_mask[0].to(torch.int64)}

    def reference(self, caption):
        p = pipeline_stub("LTXPipeline", tokenizer=self.tok, text_encoder=self.enc)
        seq, mask = p._get_t5_prompt_embeds(caption, max_sequence_length=self.max_seq, device=self.enc.device,
                                            dtype=self.enc.dtype)
        return seq[0], mask[0]


class LtxVae(VaeBase):
    """AutoencoderKLLTXVideo's latent_dist.sample() of the frames (3, F, H, W) in [-1, 1], then per channel
    (z - latents_mean) / latents_std with the VAE's own buffers, as SimpleTuner's normalize_ltx_latents stores them
    (its scaling_factor left at 1); (C, 1 + (F - 1) / 8, H / 32, W / 32) for the real VAE, (C, H, W) for one frame."""
    CLASS = "AutoencoderKLLTXVideo"

    def spatial_scale(self):
        return self.vae.spatial_compression_ratio

    def encode(self, frames, generator):
        import torch

        with torch.no_grad():
            z = self.vae.encode(frames[None].to(self.device)).latent_dist.sample(generator=generator)[0]
        z = (z - self.vae.latents_mean.view(-1, 1, 1, 1)) / self.vae.latents_std.view(-1, 1, 1, 1)
        return z[:, 0] if z.shape[1] == 1 else z


class Flux2Vae(VaeBase):
    """ERNIE-Image's use of Flux.2's VAE (AutoencoderKLFlux2), as SimpleTuner's post_vae_encode_transform_sample does:
    latent_dist.mode(), 2 x 2 patches folded into channels (c, 2, 2), then normalised by the VAE's batch norm running
    statistics, (z - mean) / sqrt(var + batch_norm_eps): (4 C, H / 2, W / 2)."""
    CLASS = "AutoencoderKLFlux2"

    def spatial_scale(self):  # the VAE's 2^(levels - 1), then the 2 x 2 patch
        return 2 ** len(self.vae.config.block_out_channels)

    def encode(self, image, generator):
        import torch

        with torch.no_grad():
            z = self.vae.encode(image[None].to(self.device)).latent_dist.mode()[0]
        c, h, w = z.shape
        z = z.view(c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3).reshape(c * 4, h // 2, w // 2)
        bn = self.vae.bn
        return (z - bn.running_mean.view(-1, 1, 1)) / torch.sqrt(bn.running_var.view(-1, 1, 1) +
                                                                 self.vae.config.batch_norm_eps)


class WanVae(VaeBase):
    """AutoencoderKLWan's latent_dist.sample() of the frames (3, F, H, W) in [-1, 1], then per channel
    (z - latents_mean) / latents_std, as WanPipeline normalises latents; (C, F', H, W) with F' = 1 + (F - 1) / 4, and
    (C, H, W) for one frame."""
    CLASS = "AutoencoderKLWan"

    def spatial_scale(self):
        return 2 ** sum(1 for _ in self.vae.config.dim_mult[1:])

    def encode(self, frames, generator):
        import torch

        with torch.no_grad():
            z = self.vae.encode(frames[None].to(self.device)).latent_dist.sample(generator=generator)[0]
        c = self.vae.config
        mean = torch.tensor(c.latents_mean, dtype=z.dtype).view(-1, 1, 1, 1)
        std = torch.tensor(c.latents_std, dtype=z.dtype).view(-1, 1, 1, 1)
        z = self.normalise(z, mean, std)
        return z[:, 0] if z.shape[1] == 1 else z

    def normalise(self, z, mean, std):
        return (z - mean) / std


class WanVaeRaw(WanVae):
    """Cosmos 2's use of Wan's VAE: the image a one-frame clip, its latent sample stored as it is, (C, H, W)
    (SimpleTuner's VAE cache normalises Wan's latents only for its Wan-style families, and Cosmos 2 is not one)."""

    def normalise(self, z, mean, std):
        return z


class Cosmos3Vae(WanVae):
    """Cosmos 3's use of Wan 2.2's VAE, as Cosmos3OmniPipeline normalises latents: the image a one-frame clip,
    (z - latents_mean) times 1 / latents_std, (C, H, W)."""

    def normalise(self, z, mean, std):
        return (z - mean) * (1.0 / std)


class QwenImageVae(Cosmos3Vae):
    """Qwen-Image's AutoencoderKLQwenImage as SimpleTuner's post_vae_encode_transform_sample uses it: normalised as
    Cosmos 3's (the image a one-frame clip, latent_dist.sample(), (z - latents_mean) times 1 / latents_std)."""
    CLASS = "AutoencoderKLQwenImage"


# ------------------------------------------------------------------ the families

# what each family's pipeline folder holds, its tokens (SimpleTuner's lengths: Flux 512 for dev, 256 for schnell;
# SD3 77 CLIP + 154 T5; Chroma 512; AuraFlow 120), and its tiny random stand-in's sizes (the -tiny preset's)
FAMILIES = {
    "flux": dict(enc=FluxEncoders, subs=("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"),
                 seq={"dev": 512, "schnell": 256}, tiny_seq=8, vae=(0.1159, 0.3611)),
    "sd3": dict(enc=Sd3Encoders, subs=("text_encoder", "text_encoder_2", "text_encoder_3", "tokenizer",
                                       "tokenizer_2", "tokenizer_3"),
                seq={"medium": 154, "large": 154}, tiny_seq=4, vae=(0.0609, 1.5305)),
    "sd1x": dict(enc=Sd1xEncoders, subs=("text_encoder", "tokenizer"), seq={"1.5": 77}, tiny_seq=6,
                 vae=(None, 0.18215)),
    "sdxl": dict(enc=SdxlEncoders, subs=("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"),
                 seq={"base-1.0": 77}, tiny_seq=6, vae=(None, 0.13025), size_ids=True),
    "chroma": dict(enc=ChromaEncoders, subs=("text_encoder", "tokenizer"), seq={"base": 512}, tiny_seq=8,
                   vae=(0.1159, 0.3611)),
    "pixart_sigma": dict(enc=PixArtEncoders, subs=("text_encoder", "tokenizer"), seq={"900M-1024-v0.6": 300},
                         tiny_seq=8, vae=(None, 0.13025)),
    "auraflow": dict(enc=AuraFlowEncoders, subs=("text_encoder", "tokenizer"), seq={"v0.3": 120}, tiny_seq=8,
                     vae=(None, 0.13025)),
    "wan": dict(enc=WanEncoders, subs=("text_encoder", "tokenizer"), seq={"t2v-480p-1.3b-2.1": 512}, tiny_seq=8,
                vae=None, video=True),
    "omnigen": dict(enc=OmniGenTokens, subs=("tokenizer",), seq={"v1": 128}, tiny_seq=40, vae=(None, 0.13025)),
    "sana": dict(enc=SanaEncoders, subs=("text_encoder", "tokenizer"), seq={"sana1.5-4.8b-1024": 300}, tiny_seq=6,
                 vae=(None, 0.41407), dc_ae=True),
    "sanavideo": dict(enc=SanaVideoEncoders, subs=("text_encoder", "tokenizer"), seq={"2b-480p": 300}, tiny_seq=6,
                      vae=None, video=True),
    "lumina2": dict(enc=Lumina2Encoders, subs=("text_encoder", "tokenizer"), seq={"2.0": 256}, tiny_seq=48,
                    vae=(0.1159, 0.3611)),
    "z_image": dict(enc=ZImageEncoders, subs=("text_encoder", "tokenizer"), seq={"base": 512}, tiny_seq=16,
                    vae=(0.1159, 0.3611)),
    "cosmos3": dict(enc=Cosmos3Tokens, subs=("text_tokenizer",), seq={"nano": 512}, tiny_seq=48, vae=None,
                    wan_vae=True, cosmos3=True),
    "ernie": dict(enc=ErnieEncoders, subs=("text_encoder", "tokenizer"), seq={"base": 256}, tiny_seq=6, vae=None,
                  flux2_vae=True),
    "qwen_image": dict(enc=QwenImageEncoders, subs=("text_encoder", "tokenizer"), seq={"v2.0": 1024, "v1.0": 1024},
                       tiny_seq=8, vae=None, wan_vae=True, qwen_vae=True),
    "krea2": dict(enc=Krea2Encoders, subs=("text_encoder", "tokenizer"), seq={"raw": 512, "turbo": 512}, tiny_seq=16,
                  vae=None, wan_vae=True, qwen_vae=True),
    "flux2": dict(enc=Flux2KleinEncoders, subs=("text_encoder", "tokenizer"), seq={"klein-9b": 512, "klein-4b": 512},
                  tiny_seq=8, vae=None, flux2_vae=True),
    "ltxvideo": dict(enc=LtxEncoders, subs=("text_encoder", "tokenizer"), seq={"0.9.5": 128}, tiny_seq=6,
                     vae=None, video=True, frames_per_latent=8, ltx_vae=True),
    "cosmos2image": dict(enc=CosmosEncoders, subs=("text_encoder", "tokenizer"), seq={"2b": 512, "14b": 512},
                         tiny_seq=6, vae=None, wan_vae=True),
}


def build_tiny_pipeline(folder, family, seed):
    """A pipeline folder of the family's layout at its -tiny preset's sizes, seeded random weights: a 2-level
    AutoencoderKL (16 px -> 4 x 8 x 8, with the family's shift and scale) and small text encoders with word-level
    tokenizers over a small vocabulary (real ones need downloads). CLIP's tokenizers add their start and end
    tokens and pad with the end token, T5's add </s> and pad with <pad>. Sizes: flux CLIP 16 wide (the pooled
    vector), T5 32 wide, 8 tokens; sd3 CLIP-L 8 and CLIP-G 16 wide (projections 8 + 8: pooled 16) at 4 tokens,
    T5 32 wide at 4 (8 in all); chroma T5 32 wide, auraflow UMT5 24 wide, 8 tokens."""
    import torch
    from diffusers import AutoencoderKL
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    import transformers as tf

    words = ("a an the on of in red green blue yellow magenta cyan orange white black gray navy brown dark "
             "maroon circle square triangle diamond background with and small large bright").split()

    def tokenizer(sub, kind, max_len):
        specials, template, pad = {
            "clip": (["<unk>", "<|startoftext|>", "<|endoftext|>"], "<|startoftext|> $A <|endoftext|>",
                     "<|endoftext|>"),
            "t5": (["<pad>", "</s>", "<unk>"], "$A </s>", "<pad>"),
            "gemma": (["<pad>", "<eos>", "<bos>", "<unk>"], "<bos> $A", "<pad>"),
            "qwen": (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"], "$A", "<|endoftext|>"),
            "qwenvl": (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>", "\n"], "$A", "<|endoftext|>")}[kind]
        vocab = {w: i for i, w in enumerate(specials + words)}
        t = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        t.pre_tokenizer = pre_tokenizers.Whitespace()
        if kind == "qwenvl":  # newlines are tokens, as in Qwen's: Qwen-Image's system prefix is then its 34
            t.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r" "), behavior="removed"),
                pre_tokenizers.Split(Regex(r"\n|\w+|[^\w\s]+"), behavior="isolated")])
        t.post_processor = processors.TemplateProcessing(
            single=template, special_tokens=[(s, vocab[s]) for s in specials if s in template])
        fast = tf.PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", pad_token=pad,
                                          model_max_length=max_len)
        if kind == "qwenvl":
            fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
        if kind == "qwen":  # Qwen3's chat markers, matched whole, and its chat template
            extra = ["<|vision_start|>"] if sub == "text_tokenizer" else []  # Cosmos 3's start of generation
            fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"] + extra,
                                     **({"eos_token": "<|im_end|>"} if extra else {})})
            fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                                  "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                                  "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
                                  "{% endif %}{% endif %}")
        fast.save_pretrained(os.path.join(folder, sub))
        return vocab

    def clip(sub, tok_sub, width, proj, max_len, seed_off):
        v = tokenizer(tok_sub, "clip", max_len)
        torch.manual_seed(seed + seed_off)
        cls = tf.CLIPTextModelWithProjection if proj else tf.CLIPTextModel
        cls(tf.CLIPTextConfig(vocab_size=len(v), hidden_size=width, intermediate_size=2 * width,
                              num_hidden_layers=2 if proj else 1, num_attention_heads=2,
                              max_position_embeddings=max(max_len, 16), projection_dim=proj or width,
                              bos_token_id=v["<|startoftext|>"], eos_token_id=v["<|endoftext|>"],
                              pad_token_id=v["<|endoftext|>"])).save_pretrained(os.path.join(folder, sub))

    def t5(sub, tok_sub, width, seed_off, umt5=False):
        v = tokenizer(tok_sub, "t5", 512)
        torch.manual_seed(seed + seed_off)
        cfg, cls = (tf.UMT5Config, tf.UMT5EncoderModel) if umt5 else (tf.T5Config, tf.T5EncoderModel)
        cls(cfg(vocab_size=len(v), d_model=width, d_kv=8, d_ff=2 * width, num_layers=1, num_heads=width // 8,
                pad_token_id=v["<pad>"], eos_token_id=v["</s>"], decoder_start_token_id=0,
                feed_forward_proj="gated-gelu")).save_pretrained(os.path.join(folder, sub))

    shift, scale = FAMILIES[family]["vae"] or (None, 1.0)
    torch.manual_seed(seed)
    def gemma2():  # one layer, 24 wide, as sana-tiny and sanavideo-tiny read it
        v = tokenizer("tokenizer", "gemma", 4096)
        torch.manual_seed(seed + 1)
        tf.Gemma2Model(tf.Gemma2Config(vocab_size=len(v), hidden_size=24, intermediate_size=48, num_hidden_layers=1,
                                       num_attention_heads=2, num_key_value_heads=1, head_dim=12,
                                       max_position_embeddings=512, pad_token_id=v["<pad>"], bos_token_id=v["<bos>"],
                                       eos_token_id=v["<eos>"])).save_pretrained(os.path.join(folder, "text_encoder"))

    def qwen3(v, pad, width=24):  # two layers, 24 wide as z-image-tiny and ernie-tiny read it (flux2-tiny: 16)
        torch.manual_seed(seed + 1)
        tf.Qwen3Model(tf.Qwen3Config(vocab_size=len(v), hidden_size=width, intermediate_size=2 * width,
                                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                     head_dim=width // 2, max_position_embeddings=512,
                                     pad_token_id=v[pad])).save_pretrained(os.path.join(folder, "text_encoder"))

    if family == "sana":  # a 2-level DC-AE: 16 px -> 4 x 8 x 8
        from diffusers import AutoencoderDC

        AutoencoderDC(latent_channels=4, attention_head_dim=4, encoder_block_types=("ResBlock", "EfficientViTBlock"),
                      decoder_block_types=("ResBlock", "EfficientViTBlock"), encoder_block_out_channels=(8, 8),
                      decoder_block_out_channels=(8, 8), encoder_layers_per_block=(1, 1),
                      decoder_layers_per_block=(1, 1), encoder_qkv_multiscales=((), (5,)),
                      decoder_qkv_multiscales=((), (5,)), scaling_factor=scale).save_pretrained(
                          os.path.join(folder, "vae"))
        gemma2()
        return
    if family in ("ernie", "flux2"):  # Flux.2's VAE, one latent channel (4 after the 2 x 2 patches), and a Qwen3
        from diffusers import AutoencoderKLFlux2

        vae = AutoencoderKLFlux2(block_out_channels=(8, 8), down_block_types=("DownEncoderBlock2D",) * 2,
                                 up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1, latent_channels=1,
                                 norm_num_groups=4, sample_size=32, use_quant_conv=False, use_post_quant_conv=False)
        vae.bn.running_mean.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
        vae.bn.running_var.copy_(torch.tensor([2.25, 0.25, 4.0, 1.0]))
        vae.save_pretrained(os.path.join(folder, "vae"))
        if family == "flux2":  # two layers 16 wide, both tapped: flux2-tiny's text_dim 32
            qwen3(tokenizer("tokenizer", "qwen", 4096), "<|endoftext|>", 16)
        else:
            qwen3(tokenizer("tokenizer", "gemma", 4096), "<pad>")  # a start token, so that "" has one
        return
    if family == "ltxvideo":  # 4 latent channels, 8x in space and in time (the real one: 32x and 8x), 8 wide
        from diffusers import AutoencoderKLLTXVideo

        vae = AutoencoderKLLTXVideo(latent_channels=4, block_out_channels=(8, 8, 8, 8),
                                    decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
                                    decoder_layers_per_block=(1, 1, 1, 1, 1), patch_size=1)
        vae.latents_mean.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
        vae.latents_std.copy_(torch.tensor([1.5, 0.5, 2.0, 1.0]))
        vae.save_pretrained(os.path.join(folder, "vae"))
        t5("text_encoder", "tokenizer", 24, 1)
        return
    if family in ("qwen_image", "krea2"):  # Qwen-Image's VAE (Wan's form), 8x, 4 channels, and a Qwen-VL
        from diffusers import AutoencoderKLQwenImage

        AutoencoderKLQwenImage(base_dim=8, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                               latents_mean=[0.1, -0.2, 0.3, 0.0], latents_std=[1.5, 0.5, 2.0, 1.0]).save_pretrained(
                                   os.path.join(folder, "vae"))
        v = tokenizer("tokenizer", "qwenvl", 4096)
        torch.manual_seed(seed + 1)
        if family == "krea2":  # Qwen3-VL 24 wide, three layers, all tapped (krea2-tiny's text_dim 72 = 3 x 24)
            tf.Qwen3VLModel(tf.Qwen3VLConfig(
                text_config=dict(vocab_size=len(v), hidden_size=24, intermediate_size=48, num_hidden_layers=3,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=12, max_position_embeddings=512,
                                 rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                                  "mrope_section": [2, 2, 2], "mrope_interleaved": True}),
                vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=24,
                                   deepstack_visual_indexes=[0], num_position_embeddings=16))).save_pretrained(
                                       os.path.join(folder, "text_encoder"))
            with open(os.path.join(folder, "model_index.json"), "w") as f:
                json.dump({"_class_name": "Krea2Pipeline", "text_encoder_select_layers": [1, 2, 3]}, f)
            return
        pad = v["<|endoftext|>"]
        tf.Qwen2_5_VLForConditionalGeneration(tf.Qwen2_5_VLConfig(
            text_config=dict(vocab_size=len(v), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                             rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}, bos_token_id=pad,
                             eos_token_id=pad, pad_token_id=pad),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                               fullatt_block_indexes=[0]),
            bos_token_id=pad, eos_token_id=pad)).save_pretrained(os.path.join(folder, "text_encoder"))
        return
    if family in ("wan", "sanavideo", "cosmos2image", "cosmos3"):  # 4 latent channels, 8x and 4x as the real one
        from diffusers import AutoencoderKLWan

        AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                         temperal_downsample=[False, True, True], latents_mean=[0.1, -0.2, 0.3, 0.0],
                         latents_std=[1.5, 0.5, 2.0, 1.0]).save_pretrained(os.path.join(folder, "vae"))
        if family == "wan":
            t5("text_encoder", "tokenizer", 32, 1, umt5=True)
        elif family == "cosmos3":  # a tokenizer alone: Cosmos 3 embeds the ids itself
            tokenizer("text_tokenizer", "qwen", 4096)
        elif family == "cosmos2image":
            t5("text_encoder", "tokenizer", 24, 1)
        else:
            gemma2()
        return
    AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                  up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 8), layers_per_block=1,
                  latent_channels=4, norm_num_groups=4, sample_size=16, scaling_factor=scale, shift_factor=shift,
                  use_quant_conv=False, use_post_quant_conv=False).save_pretrained(os.path.join(folder, "vae"))
    if family == "flux":
        clip("text_encoder", "tokenizer", 16, 0, 16, 1)
        t5("text_encoder_2", "tokenizer_2", 32, 2)
    elif family == "sd3":
        clip("text_encoder", "tokenizer", 8, 8, 4, 1)
        clip("text_encoder_2", "tokenizer_2", 16, 8, 4, 2)
        t5("text_encoder_3", "tokenizer_3", 32, 3)
    elif family == "sd1x":  # CLIP-L 24 wide (text_dim 24), 6 tokens
        clip("text_encoder", "tokenizer", 24, 0, 6, 1)
    elif family == "sdxl":  # CLIP-L 8 and OpenCLIP-G 16 wide (text_dim 24), the projection 20 (pooled), 6 tokens
        clip("text_encoder", "tokenizer", 8, 0, 6, 1)
        clip("text_encoder_2", "tokenizer_2", 16, 20, 6, 2)
    elif family == "omnigen":  # a tokenizer alone: OmniGen embeds the ids itself
        tokenizer("tokenizer", "t5", 512)
    elif family == "lumina2":
        gemma2()
    elif family == "z_image":
        qwen3(tokenizer("tokenizer", "qwen", 4096), "<|endoftext|>")
    else:
        t5("text_encoder", "tokenizer", 24 if family == "auraflow" else 32, 1, umt5=family == "auraflow")


def check_encoding(enc, caption, got):
    """--check: the caption encoded again through the diffusers pipeline method the family's encoder follows; stops
    unless its rows (and mask, where the method returns one) are bit-equal to what the cache gets."""
    import torch

    with torch.no_grad():
        seq, mask = enc.reference(caption)
    n = seq.shape[0]
    same = torch.equal(got["prompt_embeds"][:n].to(seq.dtype), seq)
    if mask is not None:
        same = same and torch.equal(got["attention_mask"][:n].to(torch.int64), mask.to(torch.int64))
    if not same:
        diff = (got["prompt_embeds"][:n].to(seq.dtype) - seq).abs().max().item()
        fail(f"--check: \"{caption}\" differs from the pipeline's encoding (max |diff| {diff:.3g} over {n} rows)")
    print(f"  check: \"{caption}\": {n} rows bit-equal to the pipeline's")


# ------------------------------------------------------------------ writing

def write_sample(path, tensors, meta, dtype):
    from safetensors.torch import save_file

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    out = {k: v.detach().to("cpu", dtype).contiguous() for k, v in tensors.items()}
    tmp = path + ".tmp"
    save_file(out, tmp, metadata={k: str(v) for k, v in meta.items()})
    os.replace(tmp, path)


# SimpleTuner's families segtrain trains whose conditioning the cache format does not hold yet: refused by name.
NOT_CACHED = {
    "wan_s2v": "Wan S2V also conditions on Wav2Vec2's hidden states of each latent frame (SimpleTuner encodes the "
               "clip's audio with facebook/wav2vec2-large-xlsr-53: 25 layers of 1024, interpolated to the latent "
               "frames) and on the reference image's latents (conditioning_latents); a segtrain cache holds latents "
               "and a text encoder's output only, so neither is written yet (segtrain trains wan_s2v on synthetic "
               "data, or the stand-in's zero audio and reference)",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", help="image folder (recursive), captions per --caption_strategy")
    ap.add_argument("--out", required=True, help="the cache folder to write (cache.json and one file per image)")
    ap.add_argument("--pipeline", help="local diffusers pipeline folder (with --tiny-random: where to build one)")
    ap.add_argument("--family", default="flux", choices=sorted(set(FAMILIES) | set(NOT_CACHED) | {"heartmula"}),
                    help="SimpleTuner's model_family")
    ap.add_argument("--flavour", help="SimpleTuner's model_flavour (flux: dev or schnell; recorded for the others)")
    ap.add_argument("--resolution", type=int,
                    help="square image edge in pixels (default 1024; tiny: 16, the video families' 64)")
    ap.add_argument("--buckets", help="`segtrain buckets --json` output: cache its images (under --images), each at "
                    "its aspect bucket's size, resized and cropped as it says, instead of squares")
    ap.add_argument("--num_frames", type=int, default=1,
                    help="wan, sanavideo: frames per sample, 4 k + 1; ltxvideo: 8 k + 1 (above 1, each sample is a "
                         "folder of frames)")
    ap.add_argument("--caption_strategy", default="filename", choices=["filename", "textfile"])
    ap.add_argument("--max_sequence_length", type=int,
                    help="the text encoder's tokens (default SimpleTuner's: flux dev 512, schnell 256, sd3 154 "
                         "after CLIP's 77, chroma 512, pixart_sigma 300, auraflow 120, omnigen 128 with its template, "
                         "sana and sanavideo 300, cosmos2image 512, ltxvideo 128, lumina2 256, z_image 512, cosmos3 "
                         "512, ernie 256, qwen_image 1024, krea2 and flux2 512; tiny: 8, sd3 4 after CLIP's 4, omnigen "
                         "40, lumina2 and cosmos3 48, z_image and krea2 16, 6 for sana, sanavideo, cosmos2image, "
                         "ltxvideo and ernie)")
    ap.add_argument("--text_encoder_layers",
                    help="flux2: the tapped layers, comma-separated (SimpleTuner's "
                         "custom_text_encoder_intermediary_layers; default Klein's 9,18,27; tiny: 1,2)")
    ap.add_argument("--motion_score", type=int, help="sanavideo: SimpleTuner's sana_motion_score, appended to each "
                    "caption as ' motion score: N.' (default: none)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--seed", type=int, default=0, help="seeds the VAE's latent sample (and --tiny-random)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tiny-random", action="store_true", help="build a tiny random pipeline first (tests)")
    ap.add_argument("--check", action="store_true",
                    help="encode every caption again through the diffusers pipeline method the family's encoder "
                         "follows and stop unless they are bit-equal (sana, sanavideo, ltxvideo, lumina2, z_image, "
                         "cosmos3, qwen_image, krea2, flux2)")
    ap.add_argument("--audio", help="heartmula: the folder of NAME.tokens.npy (HeartCodec's codes), NAME.txt (tags) "
                    "and NAME.lyrics, as SimpleTuner's audio backend gives them (scripts/heartmula_cache.py)")
    ap.add_argument("--tokenizer", help="heartmula: HeartMuLaGen's folder (tokenizer.json and gen_config.json)")
    ap.add_argument("--num_codebooks", type=int, help="heartmula: audio_num_codebooks (default 8)")
    ap.add_argument("--audio_vocab_size", type=int, help="heartmula: audio_vocab_size (default 8197)")
    ap.add_argument("--text_vocab_size", type=int, help="heartmula: text_vocab_size (default 128256)")
    a = ap.parse_args()
    if a.family == "heartmula":  # a token cache: no images, no pipeline (docs/CACHE.md, "Token caches")
        import heartmula_cache

        return heartmula_cache.main(a)
    if a.audio or a.tokenizer:
        fail(f"--audio, --tokenizer: heartmula options; {a.family} caches images")
    if not a.images:
        fail("--images: required (the image folder)")
    if a.family in NOT_CACHED:
        fail(f"--family {a.family}: not cached yet: {NOT_CACHED[a.family]}")

    try:
        import torch
        import diffusers
        import transformers
    except ImportError as e:  # one line that says how to get them, not a traceback
        fail(f"{e.msg}: this script needs torch, diffusers and transformers; make the reference venv with "
             f"scripts/reference-venv.sh ../segtrain-venv and run it as ../segtrain-venv/bin/python {sys.argv[0]} ...")

    if not os.path.isdir(a.images):
        fail(f"--images {a.images}: not a folder")
    fam = FAMILIES[a.family]
    if a.motion_score is not None and a.family != "sanavideo":
        fail(f"--motion_score: a sanavideo option; {a.family} takes none")
    if a.text_encoder_layers is not None and a.family != "flux2":
        fail(f"--text_encoder_layers: a flux2 option; {a.family} takes none")
    if a.buckets and a.resolution:
        fail("--resolution: with --buckets each sample's size is its bucket's")
    if a.buckets and fam.get("cosmos3"):
        fail("--buckets: cosmos3's prompt names the image's resolution, so its empty prompt would differ per bucket; "
             "not written yet")
    if a.family == "flux2" and a.flavour == "dev":
        fail("--flavour dev: FLUX.2 dev's Mistral 3 encoder is not written yet; klein-4b and klein-9b (Qwen3) are")
    a.flavour = a.flavour or next(iter(fam["seq"]))
    if a.flavour not in fam["seq"] and a.family == "flux":
        fail(f"--flavour {a.flavour}: flux's are {', '.join(fam['seq'])}")
    tmp = None
    if a.tiny_random:
        if not a.pipeline:
            tmp = tempfile.TemporaryDirectory()
            a.pipeline = tmp.name
        build_tiny_pipeline(a.pipeline, a.family, a.seed)
        if not a.buckets:
            a.resolution = a.resolution or (64 if fam.get("video") or fam.get("wan_vae") else
                                            32 if fam.get("flux2_vae") else 16)  # 8 x 8 latents
        a.max_sequence_length = a.max_sequence_length or fam["tiny_seq"]
    subs = ("vae",) + fam["subs"]
    if not a.pipeline:
        fail(f"--pipeline: give the local diffusers pipeline folder ({'/, '.join(subs)}/); nothing is downloaded")
    for sub in subs:
        if not os.path.isdir(os.path.join(a.pipeline, sub)):
            fail(f"--pipeline {a.pipeline}: no {sub}/ folder (a {a.family} pipeline has {'/, '.join(subs)}/)")
    edge = a.resolution or 1024
    max_seq = a.max_sequence_length or fam["seq"].get(a.flavour, next(iter(fam["seq"].values())))
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[a.dtype]
    if a.family in ("omnigen", "cosmos3") and dtype != torch.float32:
        fail(f"--dtype bfloat16: {a.family}'s prompt_embeds are token ids, which bfloat16 does not hold exactly past "
             "256; use float32")

    video = bool(fam.get("video"))
    k = fam.get("frames_per_latent", 4)
    if a.num_frames < 1 or (a.num_frames - 1) % k or (a.num_frames > 1 and not video):
        fail(f"--num_frames {a.num_frames}: {f'{k} k + 1' if video else 'the ' + a.family + ' family takes images: 1'}")
    placed, bucketed_by = read_buckets(a.buckets, a.images, a.num_frames) if a.buckets else (None, None)
    if not video and any("frames" in p for _, p in placed or []):
        fail(f"--buckets {a.buckets} places clips, but the {a.family} family takes images")
    rels = ([r for r, _ in placed] if placed is not None else
            list_sequences(a.images, a.num_frames) if a.num_frames > 1 else list_images(a.images))
    if not rels:
        fail(f"--images {a.images}: no {'frame folder' if a.num_frames > 1 else 'image'} ({', '.join(IMAGE_EXTS)})")
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
    vae = (LtxVae if fam.get("ltx_vae") else Flux2Vae if fam.get("flux2_vae") else WanVae if video else
           Cosmos3Vae if fam.get("cosmos3") else QwenImageVae if fam.get("qwen_vae") else
           WanVaeRaw if fam.get("wan_vae") else DcVae if fam.get("dc_ae") else Vae)(a.pipeline, label, a.device)
    enc = fam["enc"](a.pipeline, label, a.device, max_seq)
    if a.motion_score is not None:
        enc.motion_score = a.motion_score
    layers = a.text_encoder_layers or ("1,2" if a.tiny_random and a.family == "flux2" else None)
    if layers:
        try:
            enc.layers = tuple(int(x) for x in layers.split(","))
        except ValueError:
            fail(f"--text_encoder_layers {layers}: whole numbers separated by commas")
    enc.resolution = edge  # Cosmos 3's prompt names it
    if a.check and not hasattr(enc, "reference"):
        fail(f"--check: {a.family}'s encoder follows no single diffusers pipeline method to compare against")
    for rel, place in placed or []:
        if place["size"][0] % vae.scale_factor or place["size"][1] % vae.scale_factor:
            fail(f"{rel}: its bucket {place['size'][0]}x{place['size'][1]} is not a multiple of the VAE's scale factor "
                 f"{vae.scale_factor} (segtrain buckets: --set aspect_bucket_alignment to a multiple of it)")
    if not placed and edge % vae.scale_factor:
        fail(f"--resolution {edge}: not a multiple of the VAE's scale factor {vae.scale_factor}")
    common = {"format": f"{FORMAT}-{BUCKETED_VERSION if placed else VERSION}", "family": a.family,
              "flavour": a.flavour, "vae": vae.name, "text_encoders": ", ".join(enc.names), "num_frames": a.num_frames}
    if not placed:
        common["resolution"] = edge

    shape, entries = None, []
    os.makedirs(a.out, exist_ok=True)
    for i, (rel, name) in enumerate(zip(rels, names)):
        caption = caption_of(os.path.join(a.images, rel), a.caption_strategy)
        place = placed[i][1] if placed else None
        load = (lambda path: load_bucketed(path, place)) if place else (lambda path: load_square(path, edge))
        frames = place["frames"] if place and "frames" in place else a.num_frames
        if place and "frames" in place:  # a video backend's clip, at its bucket's frames
            folder = os.path.join(a.images, rel)
            image, (w, h) = stack_frames([load(os.path.join(folder, f)) for f in clip_frames(folder, frames)])
        elif a.num_frames > 1:
            image, (w, h) = load_frames(os.path.join(a.images, rel), a.num_frames, load)
        else:
            image, (w, h) = load(os.path.join(a.images, rel))
            image = image[:, None] if video or fam.get("wan_vae") else image  # a one-frame video
        gen = torch.Generator(device="cpu").manual_seed(a.seed * 1000003 + i)
        latents = vae.encode(image, gen)
        shape = list(latents.shape)
        t = enc.encode(caption)
        if a.check:
            check_encoding(enc, caption, t)
        t["latents"] = latents
        if fam.get("size_ids"):
            t["add_time_ids"] = torch.tensor(size_ids(w, h, edge, place))
        meta = dict(common, caption=caption, image=rel, image_size=f"{w}x{h}", num_frames=frames)
        if place:  # where segtrain's bucket put it: the bucket, its size, the resize and the crop (top, left)
            meta.update(bucket=place["name"], size="x".join(map(str, place["size"])),
                        resize="x".join(map(str, place["resize"])), crop=",".join(map(str, place["crop"])))
            entries.append(dict(file=name, latent_shape=shape, bucket=place["name"], image=rel, image_size=[w, h],
                                size=place["size"], resize=place["resize"], crop=place["crop"]))
            if "frames" in place:
                entries[-1]["frames"] = frames
        write_sample(os.path.join(a.out, name), t, meta, dtype)
        print(f"{rel} -> {name}: latents {tuple(latents.shape)}, \"{caption}\"")
    # the empty prompt's embeddings: what caption_dropout_probability trains with
    null = enc.encode("")
    if a.check:
        check_encoding(enc, "", null)
    write_sample(os.path.join(a.out, NULL_FILE), null, dict(common, caption=""), dtype)

    seq, pooled = null["prompt_embeds"], null.get("pooled_prompt_embeds")
    index = {
        "format": FORMAT, "version": BUCKETED_VERSION if placed else VERSION, "family": a.family,
        "flavour": a.flavour, "latent_shape": shape, "text_len": int(seq.shape[0]), "text_dim": int(seq.shape[1]),
        "pooled_dim": 0 if pooled is None else int(pooled.shape[0]), "dtype": {"float32": "F32", "bfloat16": "BF16"}[a.dtype],
        "resolution": edge, "vae_scale_factor": vae.scale_factor, "vae": vae.name, "text_encoders": enc.names,
        "made_with": {"torch": torch.__version__, "diffusers": diffusers.__version__,
                      "transformers": transformers.__version__, "tiny_random": bool(a.tiny_random), "seed": a.seed},
        "count": len(names), "samples": names,
    }
    if placed:  # each sample's shape, its bucket and where it was cut, in place of one shape and one edge
        del index["latent_shape"], index["resolution"]
        index.update(bucketed_by=bucketed_by, samples=entries)
    with open(os.path.join(a.out, "cache.json.tmp"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    os.replace(os.path.join(a.out, "cache.json.tmp"), os.path.join(a.out, "cache.json"))
    shapes = f"{len({tuple(e['latent_shape']) for e in entries})} latent shapes" if placed else f"latents {shape}"
    print(f"wrote {len(names)} samples and {NULL_FILE} to {a.out}/ (cache.json: {shapes}, text "
          f"{index['text_len']} x {index['text_dim']}, pooled {index['pooled_dim']})")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
