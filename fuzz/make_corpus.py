#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/ (run from anywhere; Python 3 standard library only). Each seed is
tiny: a few valid inputs of each kind the target reads and a few broken ones, for libFuzzer to start from and for
`make test` to replay. The names say what each one is."""
import json
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, meta=None, header=None):
    """tensors: [(name, dtype, shape, bytes)], laid out in order."""
    h, off, buf = {}, 0, b""
    if meta is not None:
        h["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        buf += data
    text = (header if header is not None else json.dumps(h, separators=(",", ":"))).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + buf


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def i64(*v):
    return struct.pack("<%dq" % len(v), *v)


# ---- safetensors: the reader itself
put("safetensors", "empty-header", safetensors([]))
put("safetensors", "one-f32", safetensors([("w", "F32", [2], f32(1, -2))], {"format": "pt"}))
put("safetensors", "all-dtypes", safetensors([("a", "F16", [2], b"\x00\x3c\x00\xc0"), ("b", "BF16", [1, 1], b"\x80\x3f"),
                                              ("c", "I64", [1], i64(-7)), ("d", "F32", [0, 3], b"")]))
put("safetensors", "fp8-and-bytes", safetensors([("w", "F8_E4M3", [2, 2], b"\x38\x7e\x01\xff"),
                                                 ("w_scale", "F32", [2], f32(0.5, 2)), ("e", "F8_E5M2", [2], b"\x3c\x7c"),
                                                 ("q", "U8", [3], b"\x00\x0f\xf0"), ("i", "I8", [1], b"\x80")]))
put("safetensors", "zero-byte-first", safetensors([("z", "F32", [0], b""), ("w", "F32", [1], f32(3))]))
put("safetensors", "zero-byte-after", safetensors([], header='{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                                        '"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}') + f32(3))
put("safetensors", "overlap", safetensors([], header='{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                              '"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}') + f32(1))
put("safetensors", "hole", safetensors([], header='{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}') + f32(1, 2))
put("safetensors", "truncated", safetensors([("w", "F32", [4], f32(1, 2, 3, 4))])[:-3])
put("safetensors", "huge-header-length", struct.pack("<Q", 1 << 62) + b"{}")
put("safetensors", "bad-json", safetensors([], header='{"a":{"dtype":"F32",'))
put("safetensors", "huge-shape", safetensors([], header='{"a":{"dtype":"F32","shape":[4294967296,4294967296],'
                                                   '"data_offsets":[0,0]}}'))

# ---- batch: what `segtrain grad` reads for dit-tiny (x0, noise (B,4,8,8) F32, t (B) F32, y (B) I64)
img = f32(*[((i * 37) % 17 - 8) / 8.0 for i in range(4 * 8 * 8)])
put("batch", "valid-b1", safetensors([("x0", "F32", [1, 4, 8, 8], img), ("noise", "F32", [1, 4, 8, 8], img[::-1]),
                                      ("t", "F32", [1], f32(0.5)), ("y", "I64", [1], i64(3))]))
put("batch", "null-label-t1", safetensors([("x0", "F32", [1, 4, 8, 8], img), ("noise", "F32", [1, 4, 8, 8], img),
                                           ("t", "F32", [1], f32(1.0)), ("y", "I64", [1], i64(10))]))
put("batch", "label-out-of-range", safetensors([("x0", "F32", [1, 4, 8, 8], img), ("noise", "F32", [1, 4, 8, 8], img),
                                                ("t", "F32", [1], f32(0.5)), ("y", "I64", [1], i64(11))]))
put("batch", "t-outside", safetensors([("x0", "F32", [1, 4, 8, 8], img), ("noise", "F32", [1, 4, 8, 8], img),
                                       ("t", "F32", [1], f32(1.5)), ("y", "I64", [1], i64(0))]))
put("batch", "wrong-shape", safetensors([("x0", "F32", [1, 4, 4, 16], img), ("noise", "F32", [1, 4, 8, 8], img),
                                         ("t", "F32", [1], f32(0.5)), ("y", "I64", [1], i64(0))]))
put("batch", "no-y", safetensors([("x0", "F32", [1, 4, 8, 8], img), ("noise", "F32", [1, 4, 8, 8], img),
                                  ("t", "F32", [1], f32(0.5))]))
put("batch", "empty-batch-huge", safetensors([("x0", "F32", [1 << 40, 0, 8, 8], b""), ("t", "F32", [0], b"")]))
put("batch", "x0-3d", safetensors([("x0", "F32", [4, 8, 8], img)]))

# ---- config: JSON, then optionally a line "--" and key=value lines applied as --set
put("config", "empty", "{}")
put("config", "dit-tiny", '{"model_preset": "dit-tiny", "train_batch_size": 2}')
put("config", "mmdit-tiny", '{"model_preset": "mmdit-tiny"}\n--\ngradient_checkpointing=true\n'
                            'gradient_checkpointing_interval=2\n')
put("config", "skipdit-tiny-sets", '{"--model_family": "skipdit", "seed": "7",}\n--\nhidden_size=32\n'
                                   'num_attention_heads=2\n')
put("config", "dit-s2-oom", '{"model_preset": "dit-s2"}')
put("config", "lora", '{"model_preset": "dit-tiny", "model_type": "lora", "lora_rank": 4}')
put("config", "bad-json", '{"model_preset": "dit-tiny",,}')
put("config", "unknown-key", '{"model_preset": "dit-tiny", "lerning_rate": 1}\n--\nnope=1\n')


# ---- png: one image file each
def png(w, h, depth, ctype, rows, extra=b"", interlace=0, plte=None):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace))
    if plte:
        out += chunk(b"PLTE", plte)
    out += extra and chunk(*extra)
    raw = b"".join(b"\x00" + r for r in rows)
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


put("png", "gray-1x1", png(1, 1, 8, 0, [b"\x80"]))
put("png", "rgb-3x2", png(3, 2, 8, 2, [bytes(range(9)), bytes(range(9, 18))]))
put("png", "rgba-2x2", png(2, 2, 8, 6, [b"\xff\x00\x00\x80\x00\xff\x00\x00", b"\x00\x00\xff\xff\x10\x20\x30\x40"]))
put("png", "palette-trns-2x1", png(2, 1, 8, 3, [b"\x00\x01"], extra=(b"tRNS", b"\x00"), plte=b"\xff\x00\x00\x00\x00\xff"))
put("png", "gray16-gama-1x2", png(1, 2, 16, 0, [b"\x12\x34", b"\xff\xff"], extra=(b"gAMA", struct.pack(">I", 45455))))
put("png", "interlaced-4x4", png(4, 4, 8, 0, [b"\x00\x40\x80\xc0"] * 4, interlace=1))
put("png", "text-chunk", png(1, 1, 8, 0, [b"\x00"], extra=(b"tEXt", b"Comment\x00hello")))
put("png", "truncated", png(3, 2, 8, 2, [bytes(range(9)), bytes(range(9, 18))])[:-20])
put("png", "not-png", "this is text pretending to be a png\n")
