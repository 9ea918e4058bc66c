#!/usr/bin/env python3
"""Quantized-base fixtures: optimum-quanto's own packed weights, and a LoRA step on them (docs/QUANTIZATION.md).

  make_quant_fixtures.py [--out tests/fixtures/quant]

SimpleTuner's base_model_precision int8-quanto, fp8-quanto and int4-quanto quantize the model as
simpletuner/helpers/training/quantisation/__init__.py's _quanto_model does: the model moved to bf16
(base_model_default_dtype, trainer.py's init_precision), then optimum.quanto's quantize(model, weights=qint8 /
qfloat8 / qint4) and freeze(model) (_quanto_type_map's qtypes; weights only). This script does exactly that to a
torch Linear of each shape below, with random weights and outliers, and writes:

<out>/quanto.safetensors: for each case "<format>/<out>x<in>/" + weight (the bf16 weight quanto is given), data
  (its packed bytes as U8: int8 and float8_e4m3fn bytes, or int4's PackedTensor of the grouped values; tinygemm's
  int4 weights as weight_qbits_tensor() converts them back, as quanto serializes them), scale and, for int4, shift
  (bf16, one a row or a group) and dequantized (bf16: the weight's dequantize()).
<out>/conv.safetensors: the same for torch Conv2d weights (out, in / groups, k, k), which quanto's QConv2d quantizes
  as QLinear does the (out, in k k) matrix (axis 0: a scale per output channel; int4 groups over in k k) but never in
  tinygemm's layout (that needs a 2-d weight): "<format>/<out>x<in>x<k>x<k>/" + weight, data, scale, shift,
  dequantized.
<out>/lora_step.safetensors: for each format "<format>/" + a two-layer model of quantized Linear layers (d -> f -> d,
  bias) with a LoRA adapter (rank 4, alpha 8, random A and B) on each: the float weights before quantization
  (layer0.weight, ...), the adapters, x, dy (the loss is sum(y * dy)), and y, dx and every adapter's gradient
  computed in float64 by PyTorch on the library's dequantized weights.

Needs the reference venv (scripts/reference-venv.sh, optimum-quanto pinned there); `make test` never runs this.
"""
import argparse
import os
from importlib.metadata import version

import torch
import torch.nn as nn
from optimum.quanto import freeze, qfloat8, qint4, qint8, quantize
from safetensors.torch import save_file

FORMATS = {"int8-quanto": qint8, "fp8-quanto": qfloat8, "int4-quanto": qint4}
# (out, in): rows of one (quanto quantizes per tensor, or for int4 per column), inputs no group size divides, each
# int4 group size (128 with tinygemm's scale_shift: 16 rows or more, as its CPU packing needs), per channel
SHAPES = {
    "int8-quanto": [(16, 64), (7, 200), (1, 33), (48, 130)],
    "fp8-quanto": [(16, 64), (7, 200), (1, 33), (48, 130)],
    "int4-quanto": [(16, 256), (32, 384), (4, 192), (3, 160), (2, 320), (6, 150), (5, 96), (1, 64), (1, 300)],
}
# (out, in / groups, k, k): 3 x 3 and 1 x 1 kernels, a row of one, int4 groups of 96 and 128 (no tinygemm for a
# conv), per output channel (in k k <= 128), a depthwise conv's (in / groups = 1)
CONV_SHAPES = {
    "int8-quanto": [(16, 8, 3, 3), (7, 20, 1, 1), (1, 12, 3, 3), (24, 1, 3, 3)],
    "fp8-quanto": [(16, 8, 3, 3), (7, 20, 1, 1), (1, 12, 3, 3), (24, 1, 3, 3)],
    "int4-quanto": [(16, 32, 3, 3), (32, 64, 2, 2), (20, 256, 1, 1), (8, 12, 3, 3), (24, 1, 3, 3)],
}
WIDTH, FFN, RANK, ALPHA, TOKENS = 64, 96, 4, 8.0, 6


def random_weight(out_features, in_features, gen):
    w = torch.randn(out_features, in_features, generator=gen) * 0.05
    outliers = torch.rand(out_features, in_features, generator=gen) < 0.01
    w[outliers] *= 40.0
    return w


def quantized_linear(w):
    """A Linear holding w (float), quantized as SimpleTuner quantizes its bf16 model; returns the frozen module."""
    m = nn.Sequential(nn.Linear(w.shape[1], w.shape[0], bias=False))
    with torch.no_grad():
        m[0].weight.copy_(w)
    return m.to(torch.bfloat16)


def library_tensors(qweight):
    """The packed data, scale and shift as quanto serializes them."""
    if hasattr(qweight, "weight_qbits_tensor") and type(qweight).__name__.startswith("TinyGemm"):
        qweight = qweight.weight_qbits_tensor()
    data = qweight._data
    data = data._data if hasattr(data, "_data") else data
    out = {"data": data.contiguous().view(torch.uint8).flatten(), "scale": qweight._scale.flatten()}
    if hasattr(qweight, "_shift"):
        out["shift"] = qweight._shift.flatten()
    return out


def weights_fixture(gen):
    tensors = {}
    for name, qtype in FORMATS.items():
        for out_features, in_features in SHAPES[name]:
            key = f"{name}/{out_features}x{in_features}/"
            m = quantized_linear(random_weight(out_features, in_features, gen))
            tensors[key + "weight"] = m[0].weight.detach().clone()
            quantize(m, weights=qtype)
            freeze(m)
            w = m[0].weight
            for k, v in library_tensors(w).items():
                tensors[key + k] = v.contiguous()
            tensors[key + "dequantized"] = w.dequantize().detach().to(torch.bfloat16).contiguous()
    return tensors


def conv_fixture(gen):
    """Each CONV_SHAPES weight in a torch Conv2d (groups = channels where in / groups is 1), quantized as SimpleTuner
    quantizes its bf16 model."""
    tensors = {}
    for name, qtype in FORMATS.items():
        for o, i, kh, kw in CONV_SHAPES[name]:
            key = f"{name}/{o}x{i}x{kh}x{kw}/"
            w = random_weight(o, i * kh * kw, gen).reshape(o, i, kh, kw)
            groups = o if i == 1 else 1
            m = nn.Sequential(nn.Conv2d(i * groups, o, (kh, kw), groups=groups, bias=False))
            with torch.no_grad():
                m[0].weight.copy_(w)
            m = m.to(torch.bfloat16)
            tensors[key + "weight"] = m[0].weight.detach().clone()
            quantize(m, weights=qtype)
            freeze(m)
            qw = m[0].weight
            assert not type(qw).__name__.startswith("TinyGemm"), "a conv weight in tinygemm's layout"
            for k, v in library_tensors(qw).items():
                tensors[key + k] = v.contiguous()
            tensors[key + "dequantized"] = qw.dequantize().detach().to(torch.bfloat16).contiguous()
    return tensors


def lora_step(name, qtype, gen):
    shapes = [(FFN, WIDTH), (WIDTH, FFN)]
    t = {}
    deq, bias, a, b = [], [], [], []
    for i, (o, n) in enumerate(shapes):
        w = random_weight(o, n, gen)
        m = quantized_linear(w)
        t[f"layer{i}.weight"] = w.clone()  # float: segtrain rounds it to bf16 and quantizes it, as SimpleTuner
        quantize(m, weights=qtype)
        freeze(m)
        deq.append(m[0].weight.dequantize().detach().to(torch.float64))
        bias.append(torch.randn(o, generator=gen) * 0.1)
        a.append(torch.randn(RANK, n, generator=gen) * 0.1)
        b.append(torch.randn(o, RANK, generator=gen) * 0.1)
        t[f"layer{i}.bias"], t[f"layer{i}.lora_A.weight"], t[f"layer{i}.lora_B.weight"] = bias[i], a[i], b[i]
    x = torch.randn(TOKENS, WIDTH, generator=gen)
    dy = torch.randn(TOKENS, WIDTH, generator=gen)
    x64 = x.to(torch.float64).requires_grad_(True)
    params = [(p.to(torch.float64).requires_grad_(True), q.to(torch.float64).requires_grad_(True)) for p, q in zip(a, b)]
    h = x64
    for i in range(2):
        h = h @ deq[i].T + bias[i].to(torch.float64) + (ALPHA / RANK) * (h @ params[i][0].T) @ params[i][1].T
    (h * dy.to(torch.float64)).sum().backward()
    t.update({"x": x, "dy": dy, "y": h.detach().float(), "dx": x64.grad.float()})
    for i in range(2):
        t[f"grad.layer{i}.lora_A.weight"] = params[i][0].grad.float()
        t[f"grad.layer{i}.lora_B.weight"] = params[i][1].grad.float()
    return {f"{name}/{k}": v.contiguous() for k, v in t.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "quant"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(43)
    save_file(weights_fixture(gen), os.path.join(args.out, "quanto.safetensors"),
              metadata={"optimum-quanto": version("optimum-quanto"), "torch": torch.__version__})
    step = {}
    for name, qtype in FORMATS.items():
        step.update(lora_step(name, qtype, gen))
    save_file(step, os.path.join(args.out, "lora_step.safetensors"),
              metadata={"width": str(WIDTH), "ffn": str(FFN), "rank": str(RANK), "alpha": str(ALPHA),
                        "tokens": str(TOKENS)})
    save_file(conv_fixture(torch.Generator().manual_seed(2043)), os.path.join(args.out, "conv.safetensors"),
              metadata={"optimum-quanto": version("optimum-quanto"), "torch": torch.__version__})
    print("wrote", args.out)


if __name__ == "__main__":
    main()
