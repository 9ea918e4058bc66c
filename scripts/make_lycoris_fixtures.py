#!/usr/bin/env python3
"""LyCORIS parity fixtures: the lycoris-lora package's own adapters on a tiny model of torch Linear layers
(docs/LYCORIS.md), one forward and backward in float64.

  make_lycoris_fixtures.py [--out tests/fixtures/lycoris] [cases...]      write the fixtures (default: every case)
  make_lycoris_fixtures.py --check FILE CASE                               load a segtrain-saved adapter file
  make_lycoris_fixtures.py --family FOLDER CONFIG FILE                     a family's mapping onto the classes
  make_lycoris_fixtures.py --family-keys FOLDER CONFIG OUT                 the package's keys there, for cli_test

Each case is a lycoris_config (SimpleTuner's JSON, read as SimpleTuner's trainer hands it to create_lycoris) and a
model of module classes named as the package's presets name diffusers' (Attention, FeedForward) around Linear layers:
blocks.0.attn1.to_q, blocks.0.attn1.to_out.0, blocks.0.ff.net.0, blocks.0.ff.net.2, blocks.0.proj, applied in that
order to x. <out>/<case>/lycoris_config.json is the config; <out>/<case>/fixture.safetensors holds x, dy (the loss
is sum(y * dy)), y, dx, the base weights under the modules' paths, every adapter tensor under the package's key
(lycoris_blocks_0_attn1_to_q.lokr_w1, ... and .alpha) with its gradient as grad.<key>, all float32 (computed in
float64 from the float32 values stored). The conv cases' model is ConvModel instead (Conv2d layers in classes
named ResnetBlock2D and Downsample2D, x and y (batch, channels, height, width)), conv_grouped's GroupedModel
(depthwise convolutions, groups = channels). The adapters' weights are random (the package's zero w2 would leave w1's
gradient zero).

--check loads FILE (what segtrain's test_lycoris saves: build/lycoris_saved_<case>.safetensors) with
create_lycoris_from_weights onto CASE's model, and checks that every module the case's config adapts is there, and
that every tensor equals the fixture's, bit for bit. Exit 1 on any difference.

--family loads the diffusers model in FOLDER (a parity fixture's: tests/fixtures/sdxl), wraps it with the package
from CONFIG (a lycoris_config), and checks that FILE (segtrain's adapters of a run on that folder's weights with that
config) holds exactly the package's keys at the package's shapes, every alpha the package's network's, and that the
network loads it (strict), every tensor as saved but a full module's (diff plus this base, less it, in float32): that segtrain maps the package's module classes onto the family's layers as
diffusers' classes are (docs/LYCORIS.md).

--family-keys writes the package's keys and shapes for FOLDER and CONFIG to OUT, "key [shape]" a line, sorted
(tests/fixtures/lycoris/families/<family>[-<config>].keys): tests/cli_test.sh trains segtrain on FOLDER with CONFIG
and compares its saved file's keys and shapes with it, without the venv.

Needs the reference venv (scripts/reference-venv.sh, lycoris-lora pinned there); `make test` never runs this.
"""
import argparse
import copy
import json
import os
import sys

import torch
import torch.nn as nn
import lycoris
from lycoris import LycorisNetwork, create_lycoris, create_lycoris_from_weights
from safetensors.torch import load_file, save_file

BATCH, TOKENS = 2, 3

CASES = {
    # pixart's and sana's example: full matrices, scale 1, module_algo_map's factors
    "lokr_full": ((24, 48), {
        "bypass_mode": True, "algo": "lokr", "multiplier": 1.0, "full_matrix": True, "linear_dim": 10000,
        "linear_alpha": 1, "factor": 4,
        "apply_preset": {"target_module": ["Attention", "FeedForward"],
                         "module_algo_map": {"FeedForward": {"factor": 4}, "Attention": {"factor": 2}}}}),
    # both halves low-rank (decompose_both), the balanced default factor, alpha / dim
    "lokr_split": ((64, 96), {
        "algo": "lokr", "linear_dim": 2, "linear_alpha": 3, "factor": -1, "decompose_both": True,
        "apply_preset": {"target_module": ["Attention", "FeedForward"]}}),
    # sdxl's example's form (no full_matrix), a module_algo_map dim, unbalanced factors, and a target_name
    "lokr_name": ((64, 96), {
        "bypass_mode": True, "algo": "lokr", "linear_dim": 3, "linear_alpha": 2, "factor": 8,
        "unbalanced_factorization": True,
        "apply_preset": {"target_module": ["Attention"], "target_name": ["blocks\\.0\\.pr"],
                         "module_algo_map": {"Attention": {"factor": 4, "dim": 5}}}}),
    # LoHa: the root's dimension and alpha, a module_algo_map's own (FeedForward), a target_name on the root's
    "loha": ((24, 48), {
        "bypass_mode": True, "algo": "loha", "linear_dim": 4, "linear_alpha": 2,
        "apply_preset": {"target_module": ["Attention", "FeedForward"], "target_name": ["blocks\\.0\\.pr"],
                         "module_algo_map": {"FeedForward": {"dim": 3, "alpha": 6}}}}),
    # LoCon on linear layers under the package's default algo name (lora), alpha 0 (the dimension) in a map entry
    "locon": ((24, 48), {
        "algo": "lora", "linear_dim": 4, "linear_alpha": 8,
        "apply_preset": {"target_module": ["Attention", "FeedForward"], "target_name": ["blocks\\.0\\.pr"],
                         "module_algo_map": {"Attention": {"dim": 2, "alpha": 0}}}}),
    # full: every targeted layer's weight and bias difference
    "full": ((24, 48), {
        "algo": "full", "apply_preset": {"target_module": ["Attention", "FeedForward"]}}),
    # one algorithm per module: full at the root (the target_name), module_algo_map's loha and locon
    "mixed": ((24, 48), {
        "algo": "full", "linear_dim": 4, "linear_alpha": 1,
        "apply_preset": {"target_module": ["Attention", "FeedForward"], "target_name": ["blocks\\.0\\.pr"],
                         "module_algo_map": {"Attention": {"algo": "loha", "dim": 2, "alpha": 3},
                                            "FeedForward": {"algo": "locon", "dim": 3}}}}),
    # LoCon on convolutions (ConvModel): 3 x 3 kernels at conv_dim and conv_alpha, a 1 x 1 at linear_dim and
    # linear_alpha, a module_algo_map dim over a stride-2 3 x 3 (its alpha conv_alpha), a target_name's 1 x 1 conv
    "locon_conv": (("conv", 4, 6, 5, 6), {
        "algo": "lora", "linear_dim": 2, "linear_alpha": 3, "conv_dim": 3, "conv_alpha": 6,
        "apply_preset": {"target_module": ["ResnetBlock2D", "Downsample2D"], "target_name": ["proj"],
                         "module_algo_map": {"Downsample2D": {"dim": 4}}}}),
    # LoHa and full on convolutions beside LoCon (module_algo_map algos): LoHa on a 3 x 3 at conv_dim and on a 1 x 1
    # at linear_dim, full on the stride-2 3 x 3 (weight and bias), LoCon on the target_name's 1 x 1
    "conv_algos": (("conv", 4, 6, 5, 6), {
        "algo": "lora", "linear_dim": 2, "linear_alpha": 3, "conv_dim": 3, "conv_alpha": 6,
        "apply_preset": {"target_module": ["ResnetBlock2D", "Downsample2D"], "target_name": ["proj"],
                         "module_algo_map": {"ResnetBlock2D": {"algo": "loha"}, "Downsample2D": {"algo": "full"}}}}),
    # LoKr on convolutions: the channels factored, the kernel in lokr_w2 (full_matrix: (b, d, k, k)) or lokr_w2_b
    # (r, d k k); decompose_both splits w1 where the dimension allows; a 3 x 3 at conv_dim, 1 x 1s at linear_dim
    "lokr_conv": (("conv", 8, 12, 5, 6), {
        "algo": "lokr", "linear_dim": 1, "linear_alpha": 3, "conv_dim": 1, "conv_alpha": 5, "decompose_both": True,
        "apply_preset": {"target_module": ["ResnetBlock2D", "Downsample2D"], "target_name": ["proj"],
                         "module_algo_map": {"Downsample2D": {"full_matrix": True}}}}),
    # depthwise convolutions (groups = channels, Stable Cascade's SDCascadeResBlock.depthwise), one algorithm each
    # (GroupedModel): LoKr with both halves split, LoHa, full, and LoCon (the package rebuilds a grouped conv's)
    "conv_grouped": (("grouped", 12, 5, 6), {
        "algo": "lora", "linear_dim": 2, "linear_alpha": 3, "conv_dim": 2, "conv_alpha": 5,
        "apply_preset": {"target_module": ["SDCascadeResBlock", "ResnetBlock2D", "Downsample2D"],
                         "target_name": ["proj"],
                         "module_algo_map": {"SDCascadeResBlock": {"algo": "lokr", "dim": 1, "decompose_both": True},
                                             "ResnetBlock2D": {"algo": "loha"}, "Downsample2D": {"algo": "full"}}}}),
}
# the order the cases were added in: a case's seed, which never changes
ORDER = ["lokr_full", "lokr_name", "lokr_split", "loha", "locon", "full", "mixed", "locon_conv", "conv_algos",
         "lokr_conv", "conv_grouped"]


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.to_q = nn.Linear(d, d)
        self.to_out = nn.ModuleList([nn.Linear(d, d)])


class FeedForward(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.net = nn.ModuleList([nn.Linear(d, f), nn.Identity(), nn.Linear(f, d)])


class Block(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.attn1 = Attention(d)
        self.ff = FeedForward(d, f)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        x = self.attn1.to_out[0](self.attn1.to_q(x))
        return self.proj(self.ff.net[2](self.ff.net[0](x)))


class Model(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d, f)])

    def forward(self, x):
        return self.blocks[0](x)


class ResnetBlock2D(nn.Module):
    def __init__(self, c, m):
        super().__init__()
        self.conv1 = nn.Conv2d(c, m, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(m, c, 1)


class Downsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=1)


class ConvModel(nn.Module):
    """Convolutions in classes named as diffusers' U-Net's: blocks.0.conv1 (3 x 3, c to m), blocks.0.conv_shortcut
    (1 x 1, m to c), down.0.conv (3 x 3, stride 2, padding 1), proj (1 x 1), applied in that order to x."""
    def __init__(self, c, m):
        super().__init__()
        self.blocks = nn.ModuleList([ResnetBlock2D(c, m)])
        self.down = nn.ModuleList([Downsample2D(c)])
        self.proj = nn.Conv2d(c, c, 1)

    def forward(self, x):
        b = self.blocks[0]
        return self.proj(self.down[0].conv(b.conv_shortcut(b.conv1(x))))


def depthwise(c):
    return nn.Conv2d(c, c, 3, padding=1, groups=c)


class SDCascadeResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.depthwise = depthwise(c)


class GroupedModel(nn.Module):
    """Depthwise 3 x 3 convolutions (groups = channels, padding 1), as Stable Cascade's SDCascadeResBlock.depthwise:
    res.0.depthwise (an SDCascadeResBlock), blocks.0.depthwise (in a class named ResnetBlock2D), down.0.depthwise (in
    a Downsample2D) and proj, applied in that order to x; the classes only give each its own algorithm."""
    def __init__(self, c):
        super().__init__()
        self.res = nn.ModuleList([SDCascadeResBlock(c)])
        self.blocks = nn.ModuleList([ResnetBlock2D(c, c)])
        self.blocks[0].depthwise = depthwise(c)
        del self.blocks[0].conv1, self.blocks[0].conv_shortcut
        self.down = nn.ModuleList([Downsample2D(c)])
        self.down[0].depthwise = depthwise(c)
        del self.down[0].conv
        self.proj = depthwise(c)

    def forward(self, x):
        return self.proj(self.down[0].depthwise(self.blocks[0].depthwise(self.res[0].depthwise(x))))


def model_of(dims):
    if dims[0] == "grouped":
        return GroupedModel(dims[1])
    return ConvModel(dims[1], dims[2]) if dims[0] == "conv" else Model(*dims)


def inputs_of(dims):
    """x, and the shape of y: (batch, tokens, width), or a conv case's (batch, c, h, w) and its stride-2 output"""
    if dims[0] == "grouped":
        _, c, h, w = dims
        return (BATCH, c, h, w), (BATCH, c, h, w)
    if dims[0] == "conv":
        _, c, _, h, w = dims
        return (BATCH, c, h, w), (BATCH, c, (h - 1) // 2 + 1, (w - 1) // 2 + 1)
    return (BATCH, TOKENS, dims[0]), (BATCH, TOKENS, dims[0])


def meta_of(dims):
    if dims[0] == "grouped":
        return {"batch": str(BATCH), "channels": str(dims[1]), "height": str(dims[2]), "width": str(dims[3])}
    if dims[0] == "conv":
        return {"batch": str(BATCH), "channels": str(dims[1]), "mid": str(dims[2]), "height": str(dims[3]),
                "width": str(dims[4])}
    return {"batch": str(BATCH), "tokens": str(TOKENS), "width": str(dims[0]), "ffn": str(dims[1])}


def f32(t):
    """A float32 value, held in float64."""
    return t.float().double()


def on_grid(t):
    """A multiple of 2^-10: where a full module's difference and its base weight are both such values (and under 4),
    their float32 sum and its difference are exact, so the package's load (diff + the base, in float32) gives the
    file's difference back bit for bit."""
    return torch.round(t * 1024) / 1024


def full_keys(net):
    """A FullModule trains the layer's weight itself and saves its difference: its parameter's key, as saved."""
    full = {l.lora_name for l in net.loras if isinstance(l, lycoris.modules.full.FullModule)}
    return lambda key: key.replace(".weight", ".diff").replace(".bias", ".diff_b") if key.split(".")[0] in full \
        else key


def describe(l):
    shapes = {k: tuple(v.shape) for k, v in l.state_dict().items() if k != "alpha"}
    return f"{l.lora_name} {type(l).__name__} " + " ".join(f"{k}{list(v)}" for k, v in shapes.items())


PRESET_DEFAULTS = {k: copy.deepcopy(getattr(LycorisNetwork, k)) for k in (
    "ENABLE_CONV", "TARGET_REPLACE_MODULE", "TARGET_REPLACE_NAME", "LORA_PREFIX", "MODULE_ALGO_MAP", "NAME_ALGO_MAP",
    "USE_FNMATCH", "TARGET_EXCLUDE_NAME")}


def wrap(model, cfg):
    """create_lycoris as SimpleTuner's trainer calls it (trainer.py: int() of the positional keys, apply_preset).
    apply_preset sets class attributes, so each case starts from the package's defaults (one SimpleTuner run
    applies one preset)."""
    for k, v in PRESET_DEFAULTS.items():
        setattr(LycorisNetwork, k, copy.deepcopy(v))
    cfg = copy.deepcopy(cfg)
    multiplier = int(cfg.pop("multiplier", 1))
    linear_dim = int(cfg.pop("linear_dim", 4))
    linear_alpha = int(cfg.pop("linear_alpha", 1))
    if cfg.get("apply_preset"):
        LycorisNetwork.apply_preset(cfg["apply_preset"])
    net = create_lycoris(model, multiplier, linear_dim, linear_alpha, **cfg)
    net.apply_to()
    return net


def make(case, out):
    dims, cfg = CASES[case]
    torch.manual_seed(ORDER.index(case) + 1)
    grid = on_grid if case in ("full", "mixed", "conv_algos", "conv_grouped") else (lambda t: t)
    model = model_of(dims)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(grid(f32(torch.randn_like(p) * 0.2)))
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}  # full's apply_to takes the weights off
    net = wrap(model, cfg)
    model.double(), net.double()
    adapters = dict(net.named_parameters())
    saved_key = full_keys(net)
    with torch.no_grad():
        for key, p in adapters.items():
            r = grid(f32(torch.randn_like(p) * 0.3))
            p.add_(r) if saved_key(key) != key else p.copy_(r)  # a full module's weight: the base plus r
    x_shape, y_shape = inputs_of(dims)
    x = f32(torch.randn(*x_shape, dtype=torch.float64)).requires_grad_(True)
    dy = f32(torch.randn(*y_shape, dtype=torch.float64))
    y = model(x)
    (y * dy).sum().backward()
    tensors = {"x": x.detach(), "dy": dy, "y": y.detach(), "dx": x.grad}
    tensors.update(base)
    for key, v in net.state_dict().items():
        tensors[key] = v.detach()
    for key, p in adapters.items():
        tensors["grad." + saved_key(key)] = p.grad
    tensors = {k: v.float().contiguous() for k, v in tensors.items()}
    meta = {"case": case, "torch": torch.__version__, "lycoris_lora": lycoris_version(), **meta_of(dims)}
    os.makedirs(os.path.join(out, case), exist_ok=True)
    save_file(tensors, os.path.join(out, case, "fixture.safetensors"), meta)
    with open(os.path.join(out, case, "lycoris_config.json"), "w") as fh:
        json.dump(cfg, fh, indent=4)
        fh.write("\n")
    print(f"{case}: {len(adapters)} adapter tensors in {len(net.loras)} modules:",
          "; ".join(describe(l) for l in net.loras))


def lycoris_version():
    from importlib.metadata import version
    return version("lycoris-lora")


def check(path, case, out):
    """segtrain's saved file, loaded by the package: into the network the case's config makes on the fixture's base
    weights (load_state_dict, strict: the same keys and shapes), and by create_lycoris_from_weights, which rebuilds
    each module from the file alone (not for unbalanced_factorization, whose shapes that loader cannot tell from the
    file). Each adapter tensor must be the fixture's, bit for bit; each alpha too (in the file: the loader resets a
    full-matrix module's). A module the loader rebuilds as full holds the file's difference as its weight until
    applied (its state_dict would subtract the base again), so that weight is what is compared."""
    dims, cfg = CASES[case]
    fixture = load_file(os.path.join(out, case, "fixture.safetensors"))
    want = {k: v for k, v in fixture.items() if k.startswith("lycoris_")}
    got = load_file(path)
    bad = [f"{k}: differs" for k in want if k in got and not torch.equal(got[k], want[k])]
    if set(got) != set(want):
        bad.append(f"keys {sorted(set(got) ^ set(want))} in one file only")

    def model():
        m = model_of(dims)
        m.load_state_dict({k: v for k, v in fixture.items() if k in m.state_dict()})
        return m

    net = wrap(model(), cfg)
    missing, unexpected = net.load_state_dict(got, strict=False)
    if missing or unexpected:
        bad.append(f"load_state_dict: missing {missing}, unexpected {unexpected}")
    loaded = {k: v for k, v in net.state_dict().items()}
    bad += [f"{k}: loaded differs" for k, v in want.items() if k in loaded and not torch.equal(loaded[k].float(), v)]
    rebuilt = "not tried (unbalanced_factorization)"
    if not cfg.get("unbalanced_factorization"):
        net2, _ = create_lycoris_from_weights(1.0, path, model())
        names = sorted(l.lora_name for l in net2.loras)
        if names != sorted(l.lora_name for l in net.loras):
            bad.append(f"create_lycoris_from_weights: modules {names}")
        for l in net2.loras:
            sd = l.state_dict()
            if isinstance(l, lycoris.modules.full.FullModule):
                sd = {"diff": l.weight, **({"diff_b": l.bias} if l.bias is not None else {})}
            for k, v in sd.items():
                if k != "alpha" and not torch.equal(v.float(), want[f"{l.lora_name}.{k}"]):
                    bad.append(f"create_lycoris_from_weights: {l.lora_name}.{k} differs")
        rebuilt = f"{len(net2.loras)} modules rebuilt by create_lycoris_from_weights"
    print(f"{path}: {len(net.loras)} modules loaded by lycoris-lora {lycoris_version()}, {rebuilt}; "
          + ("every tensor the fixture's" if not bad else "; ".join(bad)))
    return not bad


def package_keys(folder, config):
    """The package's adapters of the diffusers model in folder wrapped from config: the class, {key: shape} and the
    network. The class is built
    from its config alone: the keys and shapes are the config's (from_pretrained refuses a class with fp32-kept
    modules where accelerate is not installed)."""
    import diffusers
    with open(os.path.join(folder, "config.json")) as fh:
        cls = getattr(diffusers, json.load(fh)["_class_name"])
    with open(config) as fh:
        cfg = json.load(fh)
    net = wrap(cls.from_config(cls.load_config(folder)), cfg)
    return cls, {k: tuple(v.shape) for k, v in net.state_dict().items()}, net


def family_keys(folder, config, out):
    """What tests/cli_test.sh compares a family's saved adapters with: a line per key, "key [shape]", sorted."""
    _, want, _ = package_keys(folder, config)
    with open(out, "w") as fh:
        fh.writelines(f"{k} [{','.join(map(str, want[k]))}]\n" for k in sorted(want))
    print(f"{out}: {len(want)} keys of lycoris-lora {lycoris_version()} from {config} on {folder}")
    return True


def family(folder, config, path):
    """segtrain's adapters of a family's run against the package's on the diffusers model: keys and shapes."""
    cls, want, net = package_keys(folder, config)
    saved = load_file(path)
    got = {k: tuple(v.shape) for k, v in saved.items()}
    bad = [f"{k}: only the package's" for k in sorted(set(want) - set(got))]
    if set(got) == set(want):  # every alpha the package's network has, and the package loads the file (strict)
        bad += [f"{k}: alpha {saved[k].item()}, the package's {v.item()}" for k, v in net.state_dict().items()
                if k.endswith(".alpha") and v.float() != saved[k]]
        net.load_state_dict({k: v.to(net.state_dict()[k].dtype) for k, v in saved.items()}, strict=True)
        # a full module holds diff plus the base (this model's own, from its config) and gives back their float32
        # difference, not diff bit for bit: its keys and shapes are what is compared
        full = {l.lora_name for l in net.loras if isinstance(l, lycoris.modules.full.FullModule)}
        bad += [f"{k}: loaded differs" for k, v in net.state_dict().items()
                if k.split(".")[0] not in full and not torch.equal(v.float(), saved[k])]
    bad += [f"{k}: only segtrain's" for k in sorted(set(got) - set(want))]
    bad += [f"{k}: {got[k]}, the package's {want[k]}" for k in sorted(set(got) & set(want)) if got[k] != want[k]]
    print(f"{path}: {len(got)} tensors; {cls.__name__} in {folder} wrapped by lycoris-lora {lycoris_version()} from "
          f"{config}: {len(want)} tensors; " + ("the same keys and shapes" if not bad else "; ".join(bad[:8])))
    return not bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "lycoris"))
    ap.add_argument("--check", nargs=2, metavar=("FILE", "CASE"))
    ap.add_argument("--family", nargs=3, metavar=("FOLDER", "CONFIG", "FILE"))
    ap.add_argument("--family-keys", nargs=3, metavar=("FOLDER", "CONFIG", "OUT"))
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    if a.family:
        sys.exit(0 if family(*a.family) else 1)
    if a.family_keys:
        sys.exit(0 if family_keys(*a.family_keys) else 1)
    if a.check:
        sys.exit(0 if check(a.check[0], a.check[1], a.out) else 1)
    for case in a.cases or sorted(CASES):
        make(case, a.out)


if __name__ == "__main__":
    main()
