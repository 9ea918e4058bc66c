"""make_cache.py --family heartmula: a token cache (docs/CACHE.md, "Token caches") of precomputed HeartCodec tokens and
their tags and lyrics, tokenized as SimpleTuner's HeartMuLa.collate_audio_tokens tokenizes them (helpers/models/
heartmula/model.py at bc8e6ab77), for `segtrain train` with data_cache_dir.

SimpleTuner makes no tokens in training: each sample of its `dataset_type: audio` backend gives `audio_tokens` or
`audio_tokens_path` (HeartCodec's codes, [frames, codebooks] or [codebooks, frames], .npy / .npz / torch), its tags
and its lyrics. The folder --audio is such a local backend as SimpleTuner's HeartMuLa quickstart lays one out:
NAME.tokens.npy (or .npz, .pt), NAME.txt (the tags) and NAME.lyrics (an empty file for an instrumental). An audio file
without its token file is refused: making tokens would run HeartCodec, which this script does not. The tags and
lyrics are tokenized with HeartMuLaGen's tokenizer.json and gen_config.json (--tokenizer: the folder holding both, or
tokenizer.json with gen_config.json beside it), as the class does. Needs numpy and tokenizers (torch
only for .pt token files).
"""
import json
import os
import sys

FORMAT, VERSION = "segtrain-token-cache", 1
TOKEN_EXTS = (".tokens.npy", ".tokens.npz", ".tokens.pt")
AUDIO_EXTS = (".wav", ".flac", ".aiff", ".alac", ".mp3", ".ogg", ".m4a", ".aac", ".wma", ".opus")
# HeartMuLaConfig's defaults (HeartMuLa-oss-3B) and HeartMuLaGenConfig's
CLASS_DEFAULTS = {"num_codebooks": 8, "audio_vocab_size": 8197, "text_vocab_size": 128256}
GEN_DEFAULTS = {"text_bos_id": 128000, "text_eos_id": 128001, "audio_eos_id": 8193, "empty_id": 0}


def fail(msg):
    print(f"make_cache.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load_tokens(path):
    """A token file as HeartMuLa._load_audio_tokens loads one: .npy, .npz ("tokens" or its first array), else torch."""
    import numpy as np

    if path.endswith((".npy", ".npz")):
        payload = np.load(path, allow_pickle=False)
        if hasattr(payload, "files"):
            if not payload.files:
                fail(f"{path}: the archive is empty")
            return np.asarray(payload["tokens"] if "tokens" in payload.files else payload[payload.files[0]])
        return np.asarray(payload)
    try:
        import torch
    except ImportError:
        fail(f"{path}: a torch file; install torch (scripts/reference-venv.sh) or save the tokens as .npy")
    t = torch.load(path, map_location="cpu")
    return (t.detach().cpu() if isinstance(t, torch.Tensor) else torch.as_tensor(t)).numpy()


def frames_by_codebooks(tokens, k, path):
    """[frames, codebooks], transposed from [codebooks, frames] by the class's rule (both equal to K: ambiguous)."""
    import numpy as np

    if tokens.ndim != 2:
        fail(f"{path}: audio tokens must be [codebooks, frames] or [frames, codebooks], got shape {tokens.shape}")
    if tokens.shape[0] == k and tokens.shape[1] == k:
        fail(f"{path}: shape {tokens.shape} is ambiguous, both dimensions are the {k} codebooks (as SimpleTuner "
             "refuses it)")
    if tokens.shape[0] == k:
        tokens = tokens.T
    elif tokens.shape[1] != k:
        fail(f"{path}: audio tokens are {tokens.shape}, not [frames, {k}] (--num_codebooks {k})")
    if not np.issubdtype(tokens.dtype, np.integer):
        fail(f"{path}: audio tokens are {tokens.dtype}, not integers")
    return np.ascontiguousarray(tokens.astype(np.int64))


class TextIds:
    """HeartMuLa's _normalize_tags and _encode_text over tokenizer.json and gen_config.json."""

    def __init__(self, path):
        from tokenizers import Tokenizer

        folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
        tok = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        gen = os.path.join(folder, "gen_config.json")
        for f, what in ((tok, "tokenizer.json"), (gen, "gen_config.json")):
            if not os.path.isfile(f):
                fail(f"--tokenizer {path}: no {what} at {f} (SimpleTuner loads HeartMuLaGen's tokenizer.json and "
                     "gen_config.json from one folder)")
        self.tokenizer = Tokenizer.from_file(tok)
        with open(gen, encoding="utf-8") as fp:
            self.gen = dict(GEN_DEFAULTS, **json.load(fp))
        self.name = os.path.basename(os.path.abspath(folder)) + "/tokenizer.json"

    def encode(self, text):
        ids = self.tokenizer.encode(text).ids
        bos, eos = self.gen["text_bos_id"], self.gen["text_eos_id"]
        if not ids:
            return [bos, eos]
        if ids[0] != bos:
            ids = [bos] + ids
        if ids[-1] != eos:
            ids = ids + [eos]
        return ids

    @staticmethod
    def tags(text):
        text = text.strip().lower()
        text = text if text.startswith("<tag>") else "<tag>" + text
        return text if text.endswith("</tag>") else text + "</tag>"


def read_text(path, what):
    if not os.path.isfile(path):
        fail(f"{path}: missing; HeartMuLa requires {what} for every sample (an empty file for none)")
    with open(path, encoding="utf-8") as fp:
        return fp.read()


def list_samples(root):
    """(name, token file) of every NAME.tokens.* under root; an audio file without one is refused."""
    found, audio = {}, []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            ext = next((e for e in TOKEN_EXTS if f.endswith(e)), None)
            if ext and not f.startswith("."):
                name = rel[: -len(ext)]
                if name in found:
                    fail(f"{rel} and {found[name]}: two token files for one sample")
                found[name] = rel
            elif f.lower().endswith(AUDIO_EXTS):
                audio.append(rel)
    for rel in audio:
        if os.path.splitext(rel)[0] not in found:
            fail(f"{rel}: no {os.path.splitext(rel)[0]}.tokens.npy beside it. SimpleTuner trains HeartMuLa on "
                 "precomputed HeartCodec tokens (audio_tokens or audio_tokens_path) and so does segtrain; making them "
                 "runs HeartCodec's encoder (HeartMuLa/HeartCodec-oss; SimpleTuner's copy of the codec only decodes), "
                 "which make_cache.py does not: encode the audio with it and save each clip's [frames, codebooks] "
                 "codes as NAME.tokens.npy")
    return sorted(found.items())


def write(path, tensors, meta):
    """A safetensors file of I64 tensors, its header's keys in order so that the same input gives the same bytes
    (the safetensors package writes its metadata in a hash map's order)."""
    header, data = {"__metadata__": {k: str(v) for k, v in meta.items()}}, b""
    for name, t in tensors.items():
        raw = t.astype("<i8").tobytes()
        header[name] = {"dtype": "I64", "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-aligned, as the safetensors package pads it
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)
    os.replace(path + ".tmp", path)


def tiny_inputs(folder, seed):
    """heartmula-tiny's inputs (tests/fixtures/cache-heartmula-tiny): a word-level tokenizer.json of 50 ids with
    <tag> and </tag> as added tokens, a gen_config.json, and four samples of 1 to 6 frames of 4 codebooks below 24
    (two stored [codebooks, frames], as the class transposes them), one an instrumental."""
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<pad>", "<bos>", "<eos>", "<unk>", "pop", "rock", "jazz", "piano", "slow", "bright", "la", "oh", "night",
             "sky", "sing", "again"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<tag>", "</tag>"])  # ids 16 and 17
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "gen_config.json"), "w") as fp:
        json.dump({"text_bos_id": 1, "text_eos_id": 2, "audio_eos_id": 23, "empty_id": 0}, fp)
    rng = np.random.default_rng(seed)
    samples = [("a-pop", "Pop", "la la", 3, False), ("b-jazz", "jazz, piano", "", 6, True),
               ("c-rock", "rock", "oh night sky", 1, False), ("sub/d-slow", "slow bright", "sing again", 2, True)]
    for name, tags, lyrics, frames, transposed in samples:
        codes = rng.integers(0, 23, size=(frames, 4), dtype=np.int64)
        os.makedirs(os.path.dirname(os.path.join(folder, "audio", name)), exist_ok=True)
        np.save(os.path.join(folder, "audio", name + ".tokens.npy"), codes.T if transposed else codes)
        for ext, text in ((".txt", tags), (".lyrics", lyrics)):
            with open(os.path.join(folder, "audio", name + ext), "w") as fp:
                fp.write(text + "\n")
    return os.path.join(folder, "audio"), folder


def main(a):
    """--family heartmula: --audio DIR --tokenizer PATH --out DIR [--num_codebooks K] [--audio_vocab_size V]
    [--text_vocab_size T] (or --tiny-random)."""
    try:
        import numpy  # noqa: F401
        import tokenizers
    except ImportError as e:
        fail(f"{e.msg}: --family heartmula needs numpy and tokenizers (scripts/reference-venv.sh)")
    tmp = None
    if a.tiny_random:
        import tempfile

        tmp = tempfile.TemporaryDirectory()
        a.audio, a.tokenizer = tiny_inputs(tmp.name, a.seed)
        a.num_codebooks, a.audio_vocab_size, a.text_vocab_size = 4, 24, 50
    if not a.audio or not os.path.isdir(a.audio):
        fail(f"--audio {a.audio}: give the folder of NAME.tokens.npy, NAME.txt (tags) and NAME.lyrics (a SimpleTuner "
             "audio backend's instance_data_dir)")
    if not a.tokenizer:
        fail("--tokenizer: give HeartMuLaGen's folder (tokenizer.json and gen_config.json): HeartMuLa tokenizes each "
             "sample's tags and lyrics with it; nothing is downloaded")
    sizes = {k: getattr(a, k) or v for k, v in CLASS_DEFAULTS.items()}
    k, vocab, text_vocab = sizes["num_codebooks"], sizes["audio_vocab_size"], sizes["text_vocab_size"]
    text = TextIds(a.tokenizer)
    samples = list_samples(a.audio)
    if not samples:
        fail(f"--audio {a.audio}: no NAME.tokens.npy (.npz, .pt) there")
    empty = text.gen["empty_id"]
    if not (0 <= empty < min(vocab, text_vocab)):
        fail(f"gen_config.json: empty_id {empty} is outside the audio and text vocabularies")
    names, rows = [], []
    os.makedirs(a.out, exist_ok=True)
    for name, rel in samples:
        path = os.path.join(a.audio, rel)
        codes = frames_by_codebooks(load_tokens(path), k, path)
        if codes.shape[0] < 1 or codes.min() < 0 or codes.max() >= vocab:
            fail(f"{path}: {'no frames' if codes.shape[0] < 1 else f'ids {codes.min()} to {codes.max()}'}; the "
                 f"codebooks take 0 to {vocab - 1} (--audio_vocab_size {vocab})")
        tags = read_text(os.path.join(a.audio, name + ".txt"), "tags (NAME.txt)")
        lyrics = read_text(os.path.join(a.audio, name + ".lyrics"), "lyrics (NAME.lyrics)")
        tag_ids, lyric_ids = text.encode(TextIds.tags(tags)), text.encode(lyrics.strip().lower())
        bad = [i for i in tag_ids + lyric_ids if not 0 <= i < text_vocab]
        if bad:
            fail(f"{name}: text id {bad[0]} is outside the text vocabulary 0 to {text_vocab - 1} (--text_vocab_size)")
        import numpy as np

        file = name + ".safetensors"
        write(os.path.join(a.out, file), {"audio_tokens": codes, "tag_ids": np.array(tag_ids, dtype=np.int64),
                                          "lyric_ids": np.array(lyric_ids, dtype=np.int64)},
              {"format": f"{FORMAT}-{VERSION}", "family": "heartmula", "tags": tags.strip(), "lyrics": lyrics.strip(),
               "tokens": rel})
        names.append(file)
        rows.append(len(tag_ids) + 1 + len(lyric_ids) + codes.shape[0])
        print(f"{rel} -> {file}: {codes.shape[0]} frames, {len(tag_ids)} tag and {len(lyric_ids)} lyric ids, "
              f"{rows[-1]} rows")
    index = {"format": FORMAT, "version": VERSION, "family": "heartmula", "flavour": a.flavour or "3b",
             "num_codebooks": k, "audio_vocab_size": vocab, "text_vocab_size": text_vocab, "empty_id": empty,
             "text_bos_id": text.gen["text_bos_id"], "text_eos_id": text.gen["text_eos_id"],
             "tokenizer": "tiny-random" if tmp else text.name, "max_rows": max(rows),
             "made_with": {"tokenizers": tokenizers.__version__, "tiny_random": bool(a.tiny_random), "seed": a.seed},
             "count": len(names), "samples": names}
    with open(os.path.join(a.out, "cache.json.tmp"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    os.replace(os.path.join(a.out, "cache.json.tmp"), os.path.join(a.out, "cache.json"))
    print(f"wrote {len(names)} samples to {a.out}/ ({k} codebooks, at most {max(rows)} rows a sample)")
    if tmp:
        tmp.cleanup()
