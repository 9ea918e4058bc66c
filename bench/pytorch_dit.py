#!/usr/bin/python3
"""PyTorch reference benchmark for segtrain's checkpointing sweep (dit-s2, float32, CPU).

The same DiT as docs spec dit.md (and tests/fixtures/make_dit_fixture.py, which is float64 and
functional; this one is an nn.Module in float32), trained with the spec's rectified-flow loss and
AdamW, so that one measured step is a full optimizer step, like a cell of `segtrain sweep`.
Each standard sweep row is written the way a PyTorch user writes it, with
torch.utils.checkpoint.checkpoint(..., use_reentrant=False) and torch.autograd.graph.save_on_cpu:

  none                  plain autograd
  layer                 every block checkpointed
  interval2             blocks {0,1} {2,3} ... each checkpointed as one unit
  seg2-stride4          blocks i with i mod 4 < 2 checkpointed as 2-block units, the others plain
  torch-ffn             inside every block, only the MLP sub-block is checkpointed
  unsloth               layer, inside save_on_cpu                     (see OFFLOAD below)
  unsloth-ffn           torch-ffn, the MLP checkpoint inside save_on_cpu  (see OFFLOAD below)
  activation-offload    layer, the attention sub-block inside save_on_cpu (see OFFLOAD below)
  seg2-stride4-offload  seg2-stride4, the attention sub-block of every block inside save_on_cpu

OFFLOAD on a CPU-only machine: save_on_cpu packs a saved tensor as `tensor.cpu()`, and for a tensor
that is already on the CPU that returns the tensor itself: no copy, no memory moved. So here the
offload rows measure only the hooks' overhead and the schedule's own effect:
  - unsloth / unsloth-ffn: torch 1.13's non-reentrant checkpoint keeps its inputs (the boundary) in
    a Python closure and packs everything saved inside it with its own hooks, which sit innermost;
    the enclosing save_on_cpu therefore never sees a tensor. These rows equal layer / torch-ffn.
  - activation-offload: save_on_cpu inside a checkpointed function is innermost for the attention
    ops, so the attention side's saved tensors are kept by the graph (on "the host" = the same RAM)
    instead of being dropped; the checkpoint still recomputes the whole block in backward (the
    function is opaque to it), so the attention is recomputed anyway, unlike segtrain's offload,
    which skips that recompute. Time ~ layer, memory ~ layer + the attention side.

Attention is the explicit math form softmax(q k^T / sqrt(hd)) v, which keeps the (B,NH,T,T)
probabilities for backward, as in the reference numbers of issue 9. (`--attention sdpa` would use
F.scaled_dot_product_attention; torch 1.13 has none, and the run is then skipped.)

Threads: torch.set_num_threads(--threads, default 2). OMP_WAIT_POLICY is taken from the environment
as it is (the reference numbers of issue 9 used OMP_WAIT_POLICY=passive; with the default active
policy idle OpenMP threads spin, which on a 2-vCPU machine steals time from OpenBLAS).

Output: a table and, with --json, one JSON line per mode:
  {"mode", "sec_per_step_median", "saved_bytes", ...}
sec_per_step_median: median wall seconds of the measured steps (forward, loss, backward, AdamW
step, zero_grad; batches are made before timing). saved_bytes (mode none only, null otherwise):
bytes of the tensors saved for backward by one forward + loss, captured with
torch.autograd.graph.saved_tensors_hooks, deduplicated by storage data_ptr, counting each storage's
full size, parameters excluded (their storages are reported separately as saved_param_bytes).

  /usr/bin/python3 bench/pytorch_dit.py                       # all rows, 1 warm-up + 3 measured steps
  OMP_WAIT_POLICY=passive /usr/bin/python3 bench/pytorch_dit.py --modes none,layer --json
  /usr/bin/python3 bench/pytorch_dit.py --check               # tiny model: every mode's grads == none's
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

MODES = ["none", "layer", "interval2", "seg2-stride4", "torch-ffn", "unsloth", "unsloth-ffn",
         "activation-offload", "seg2-stride4-offload"]

PRESETS = {
    "dit-tiny": dict(depth=4, hidden=64, heads=4, patch=2, input_size=8, num_classes=10),
    "dit-s2": dict(depth=12, hidden=384, heads=6, patch=2, input_size=32, num_classes=1000),
    "dit-b2": dict(depth=12, hidden=768, heads=12, patch=2, input_size=32, num_classes=1000),
}
IN_CH = 4
FREQ = 256
EPS = 1e-6

# mode -> (checkpointed unit: None | "block" | "ffn", interval, stride, save_on_cpu around: None | "unit" | "attn")
SCHEDULES = {
    "none": (None, 1, 1, None),
    "layer": ("block", 1, 1, None),
    "interval2": ("block", 2, 2, None),
    "seg2-stride4": ("block", 2, 4, None),
    "torch-ffn": ("ffn", 1, 1, None),
    "unsloth": ("block", 1, 1, "unit"),
    "unsloth-ffn": ("ffn", 1, 1, "unit"),
    "activation-offload": ("block", 1, 1, "attn"),
    "seg2-stride4-offload": ("block", 2, 4, "attn"),
}


class nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def offload_ctx(on):
    # On a CPU-only machine save_on_cpu's pack is tensor.cpu(), the identity for CPU tensors (no copy).
    return torch.autograd.graph.save_on_cpu(pin_memory=False) if on else nullctx()


# ---------------------------------------------------------------- model (spec dit.md)
def pos_embed_2d(G, D):
    """(1,T,D): token r*G+q; channels [0,D/2) embed column q, [D/2,D) embed row r."""
    E = D // 2

    def emb1d(pos):
        j = torch.arange(E // 2, dtype=torch.float64)
        w = 10000.0 ** (-j / (E / 2.0))
        a = pos[:, None] * w[None, :]
        return torch.cat([torch.sin(a), torch.cos(a)], dim=1)

    r = (torch.arange(G * G) // G).double()
    q = (torch.arange(G * G) % G).double()
    return torch.cat([emb1d(q), emb1d(r)], dim=1)[None].to(torch.get_default_dtype())


def timestep_embedding(ts):
    """256 frequencies f_j = exp(-ln(1e4) j/128), cosines first."""
    half = FREQ // 2
    dt = torch.get_default_dtype()
    f = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=dt) / half)
    a = ts[:, None].to(dt) * f[None, :]
    return torch.cat([torch.cos(a), torch.sin(a)], dim=1)


def ln(x):
    return F.layer_norm(x, (x.shape[-1],), eps=EPS)  # no affine


class Attention(nn.Module):
    def __init__(self, D, NH, impl):
        super().__init__()
        self.NH, self.HD, self.impl = NH, D // NH, impl
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, h):
        B, T, D = h.shape
        qkv = self.qkv(h).reshape(B, T, 3, self.NH, self.HD).permute(2, 0, 3, 1, 4)  # s,b,head,T,hd
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.impl == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v)
        else:
            a = torch.softmax((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.HD)), dim=-1)
            o = a @ v                                     # the probabilities a are kept for backward
        return self.proj(o.permute(0, 2, 1, 3).reshape(B, T, D))


class Mlp(nn.Module):
    def __init__(self, D):
        super().__init__()
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, h):
        return self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, D, NH, impl):
        super().__init__()
        self.attn = Attention(D, NH, impl)
        self.mlp = Mlp(D)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(D, 6 * D))
        self.ffn_ckpt = False      # torch-ffn: checkpoint the MLP sub-block
        self.ffn_offload = False   # unsloth-ffn: that checkpoint inside save_on_cpu
        self.attn_offload = False  # activation-offload: the attention sub-block inside save_on_cpu

    def attn_part(self, x, sh1, s1, g1):
        return x + g1 * self.attn(ln(x) * (1 + s1) + sh1)

    def mlp_part(self, x, sh2, s2, g2):
        return x + g2 * self.mlp(ln(x) * (1 + s2) + sh2)

    def forward(self, x, c):
        sh1, s1, g1, sh2, s2, g2 = [m[:, None, :] for m in self.adaLN_modulation(c).chunk(6, dim=1)]
        with offload_ctx(self.attn_offload):
            x = self.attn_part(x, sh1, s1, g1)
        if self.ffn_ckpt:
            with offload_ctx(self.ffn_offload):
                return checkpoint(self.mlp_part, x, sh2, s2, g2, use_reentrant=False)
        return self.mlp_part(x, sh2, s2, g2)


class DiT(nn.Module):
    def __init__(self, depth, hidden, heads, patch, input_size, num_classes, attention="math"):
        super().__init__()
        D = hidden
        self.p, self.G, self.D = patch, input_size // patch, D
        self.x_embedder = nn.Module()
        self.x_embedder.proj = nn.Conv2d(IN_CH, D, kernel_size=patch, stride=patch)
        self.t_embedder = nn.Module()
        self.t_embedder.mlp = nn.Sequential(nn.Linear(FREQ, D), nn.SiLU(), nn.Linear(D, D))
        self.y_embedder = nn.Module()
        self.y_embedder.embedding_table = nn.Embedding(num_classes + 1, D)
        self.register_buffer("pos_embed", pos_embed_2d(self.G, D), persistent=False)
        self.blocks = nn.ModuleList([Block(D, heads, attention) for _ in range(depth)])
        self.final_layer = nn.Module()
        self.final_layer.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(D, 2 * D))
        self.final_layer.linear = nn.Linear(D, patch * patch * IN_CH)
        self.units = [(False, [i], False) for i in range(depth)]
        self.set_mode("none")
        gen = torch.Generator().manual_seed(1234)
        with torch.no_grad():  # random non-zero weights (gates non-trivial); timing does not depend on them
            for name, w in self.named_parameters():
                z = torch.randn(w.shape, generator=gen)
                if w.dim() > 1:
                    z = z / math.sqrt(w[0].numel())
                    if "adaLN" in name:
                        z = z * 0.5
                else:
                    z = z * 0.1
                w.copy_(z)

    def set_mode(self, mode):
        unit, k, s, off = SCHEDULES[mode]
        n = len(self.blocks)
        for b in self.blocks:
            b.ffn_ckpt = unit == "ffn"
            b.ffn_offload = unit == "ffn" and off == "unit"
            b.attn_offload = off == "attn"
        # units: (checkpointed, block indices, save_on_cpu around it); block i is checkpointed iff i mod s < k
        self.units = []
        i = 0
        while i < n:
            if unit == "block" and i % s < k:
                j = min(i - i % s + k, n)
                self.units.append((True, list(range(i, j)), off == "unit"))
                i = j
            else:
                self.units.append((False, [i], False))
                i += 1

    def run_blocks(self, idx, x, c):
        for i in idx:
            x = self.blocks[i](x, c)
        return x

    def forward(self, x, timestep, y):
        B, p, G = x.shape[0], self.p, self.G
        tok = self.x_embedder.proj(x).flatten(2).transpose(1, 2) + self.pos_embed  # token r*G+q
        c = self.t_embedder.mlp(timestep_embedding(timestep)) + self.y_embedder.embedding_table(y)
        for ckpt, idx, off in self.units:
            if ckpt:
                with offload_ctx(off):
                    tok = checkpoint(self.run_blocks, idx, tok, c, use_reentrant=False)
            else:
                tok = self.run_blocks(idx, tok, c)
        shift, scale = [m[:, None, :] for m in self.final_layer.adaLN_modulation(c).chunk(2, dim=1)]
        o = self.final_layer.linear(ln(tok) * (1 + scale) + shift)          # (B,T,p*p*C)
        o = o.reshape(B, G, G, p, p, IN_CH).permute(0, 5, 1, 3, 2, 4)        # b,ch,r,a,q,bb
        return o.reshape(B, IN_CH, G * p, G * p)


def rf_loss(model, x0, noise, t, y):
    tb = t[:, None, None, None]
    xt = (1 - tb) * x0 + tb * noise
    v = model(xt, 1000.0 * t, y)
    return ((v - (noise - x0)) ** 2).mean()


def make_batches(n, B, cfg, seed):
    g = torch.Generator().manual_seed(seed)
    S = cfg["input_size"]
    out = []
    for _ in range(n):
        out.append((torch.randn(B, IN_CH, S, S, generator=g), torch.randn(B, IN_CH, S, S, generator=g),
                    torch.rand(B, generator=g) * 0.998 + 0.001,
                    torch.randint(0, cfg["num_classes"] + 1, (B,), generator=g)))
    return out


# ---------------------------------------------------------------- measurements
def saved_bytes(model, batch):
    """Bytes saved for backward by one forward + loss (mode none), by storage, parameters apart."""
    params = {p.data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.storage()
        seen[st.data_ptr()] = st.nbytes() if hasattr(st, "nbytes") else st.size() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = rf_loss(model, *batch)
    del loss
    act = sum(v for k, v in seen.items() if k not in params)
    par = sum(v for k, v in seen.items() if k in params)
    return act, par


def bench_mode(cfg, mode, args, batches):
    torch.manual_seed(0)
    model = DiT(attention=args.attention, **cfg)
    model.set_mode(mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    sb = sp = None
    if mode == "none":
        sb, sp = saved_bytes(model, batches[0])
    times, losses = [], []
    if args.lockstep:
        print("ready %s" % mode, flush=True)
    for i in range(args.warmup + args.steps):
        if args.lockstep and not sys.stdin.readline():
            break
        b = batches[i % len(batches)]
        t0 = time.perf_counter()
        loss = rf_loss(model, *b)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if args.lockstep:
            print("step %.6f" % dt, flush=True)
        if i >= args.warmup:
            times.append(dt)
    if args.lockstep:  # exit only when told, not while the other side takes its step
        sys.stdin.read()
    return dict(mode=mode, sec_per_step_median=statistics.median(times), saved_bytes=sb,
                saved_param_bytes=sp, sec_per_step=times, loss_first=losses[0],
                threads=torch.get_num_threads(), batch=args.batch, preset=args.preset, input_size=cfg["input_size"],
                attention=args.attention, warmup=args.warmup, steps=args.steps,
                omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"), torch=torch.__version__)


def check_modes(args):
    """Tiny model, float64: every mode's loss and gradients equal mode none's (to rounding)."""
    torch.set_default_dtype(torch.float64)
    cfg = PRESETS["dit-tiny"]
    b = [tuple(t.double() if t.is_floating_point() else t for t in bt) for bt in make_batches(1, 3, cfg, 7)][0]
    ref = None
    worst = 0.0
    for mode in MODES:
        model = DiT(attention=args.attention, **cfg)
        model.set_mode(mode)
        runs = {}
        for i, blk in enumerate(model.blocks):
            for m, key in ((blk, "b%d" % i), (blk.mlp, "m%d" % i), (blk.attn, "a%d" % i)):
                m.register_forward_hook(lambda mod, inp, out, key=key: runs.__setitem__(key, runs.get(key, 0) + 1))
        loss = rf_loss(model, *b)
        loss.backward()
        unit, k, s, _ = SCHEDULES[mode]
        for i in range(len(model.blocks)):  # forwards per block / MLP / attention in one step
            ck = unit == "block" and i % s < k
            want = (2 if ck else 1, 2 if ck or unit == "ffn" else 1, 2 if ck else 1)
            got = (runs["b%d" % i], runs["m%d" % i], runs["a%d" % i])
            assert got == want, "%s: block %d ran (block, mlp, attn) %s times, want %s" % (mode, i, got, want)
        g = {n: p.grad for n, p in model.named_parameters()}
        if ref is None:
            ref = (loss.item(), g)
        else:
            assert abs(loss.item() - ref[0]) <= 1e-12 * abs(ref[0]), mode
            for n in g:
                d = (g[n] - ref[1][n]).abs().max().item() / max(ref[1][n].abs().max().item(), 1e-30)
                worst = max(worst, d)
                assert d < 1e-10, "%s: %s differs by %g" % (mode, n, d)
        units = ["%s%s%s" % ("ckpt" if c else "keep", "+cpu" if o else "", idx) for c, idx, o in model.units]
        print("  %-21s loss %.15f  units %s" % (mode, loss.item(), " ".join(units)))
    print("check passed: recompute counts as scheduled; every mode's loss and gradients equal none's (worst relative %.1e)" % worst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default=",".join(MODES), help="comma list of: " + ", ".join(MODES))
    ap.add_argument("--steps", type=int, default=3, help="measured steps (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up steps (default 1)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--preset", default="dit-s2", choices=sorted(PRESETS))
    ap.add_argument("--input-size", type=int, default=0,
                    help="latent grid side (default: the preset's; dit-s2's 32 is 256 tokens, 64 is 1024)")
    ap.add_argument("--attention", default="math", choices=["math", "sdpa"])
    ap.add_argument("--json", action="store_true", help="also print one JSON line per mode")
    ap.add_argument("--check", action="store_true", help="check every mode's gradients on a tiny model and exit")
    ap.add_argument("--lockstep", action="store_true",
                    help="one mode; each of the warm-up and measured steps waits for a line on stdin and is answered"
                         " 'step SECONDS' (how bench/compare.sh --lockstep alternates the two sides step by step)")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in SCHEDULES]
    if args.lockstep and len(modes) != 1:
        ap.error("--lockstep takes exactly one mode")
    if bad or not modes or args.steps < 1 or args.warmup < 0 or args.batch < 1 or args.threads < 1 or \
            args.input_size < 0 or args.input_size % PRESETS[args.preset]["patch"]:
        ap.error("bad arguments (unknown modes: %s)" % ",".join(bad))
    if args.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        print("skipped: torch %s has no F.scaled_dot_product_attention (needs 2.0)" % torch.__version__,
              file=sys.stderr)
        return 0

    torch.set_num_threads(args.threads)
    print("\n".join(torch.__config__.parallel_info().splitlines()[:8]))
    print("torch %s, threads %d, OMP_WAIT_POLICY=%s" % (torch.__version__, torch.get_num_threads(),
                                                      os.environ.get("OMP_WAIT_POLICY", "(unset)")))
    if args.check:
        check_modes(args)
        return 0
    cfg = dict(PRESETS[args.preset])
    if args.input_size:
        cfg["input_size"] = args.input_size
    print("%s, batch %d, %d tokens, float32, %s attention, AdamW; %d warm-up + %d measured steps per mode"
          % (args.preset, args.batch, (cfg["input_size"] // cfg["patch"]) ** 2, args.attention, args.warmup,
             args.steps))
    batches = make_batches(args.warmup + args.steps, args.batch, cfg, 42)
    rows = []
    for mode in modes:
        r = bench_mode(cfg, mode, args, batches)
        rows.append(r)
        print("  %-21s %.3f s/step  (%s)" % (mode, r["sec_per_step_median"],
                                            " ".join("%.3f" % t for t in r["sec_per_step"])), flush=True)
    print()
    print("| mode | s/step (median) | saved for backward |")
    print("|---|---|---|")
    for r in rows:
        sb = "" if r["saved_bytes"] is None else "%.1f MiB activations (+ %.1f MiB parameters)" % (
            r["saved_bytes"] / 2**20, r["saved_param_bytes"] / 2**20)
        print("| %s | %.3f | %s |" % (r["mode"], r["sec_per_step_median"], sb))
    if args.json:
        for r in rows:
            print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
