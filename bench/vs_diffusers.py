#!/usr/bin/env python3
"""segtrain against diffusers, family by family: one float32 training step of each family's diffusers class under
PyTorch and of segtrain's model on the same weights, side by side (issue 45).

  /work/segtrain-venv/bin/python bench/vs_diffusers.py [--quick] [--pairs N] [--warmup W] [families...]

Per family (segtrain's model_family names; default all), the diffusers class of its parity fixture
(scripts/make_fixtures.py: the class, its constructor kwargs, its inputs and its call are that script's) at a bench
shape, BENCH below: the real model's head width and kinds of blocks, fewer blocks and a narrower stream, 1024 image
tokens (a video family: a few latent frames, about 1024 tokens in all; the output lists each shape). make_fixtures.py's build() draws its random
weights; save_pretrained writes them to a scratch folder, and both sides load that folder: PyTorch with
from_pretrained, segtrain as `pretrained_model_name_or_path` (its architecture from the folder's config.json).

One step is forward, the flow loss (mean squared error), backward and AdamW (lr 1e-4, weight decay 0.01, no
gradient clipping: segtrain's max_grad_norm 0) in float32, full training (every parameter trained on both sides),
batch 1. Two modes: `none` (no checkpointing) and every block checkpointed: diffusers' enable_gradient_checkpointing()
(torch.utils.checkpoint, use_reentrant False, around each block the class wraps) against segtrain's sweep row
`layer`. Inputs: PyTorch gets the fixture's make() at the bench shape (random latents, text states of `text`
tokens, every text token valid); segtrain draws its own synthetic batch of the same shape (synthetic_data), so the
values differ and the shapes, hence the work, are the same (the script checks segtrain's token counts from its plan).

Lockstep: per family and mode, both sides start once as step servers (build/bench_step, and a
child forked from this script, which has imported torch and diffusers once), warm up, then alternate one step each,
which side goes first alternating from pair to pair; the ratio is PyTorch's step over segtrain's, per pair, and the
table gives each side's median and the median ratio.
Both run 2 threads (torch.set_num_threads, bench_step --threads); PyTorch with OMP_WAIT_POLICY=passive (its idle
OpenMP threads would spin while segtrain steps), segtrain with GOMP_SPINCOUNT=1000 as the `segtrain` command sets it
for itself (src/cli/main.c: a waiting thread spins briefly, then sleeps; without it, a loaded machine runs segtrain's
step up to 3x slower), unless the environment sets OMP_WAIT_POLICY, GOMP_SPINCOUNT or SEGTRAIN_OMP_DEFAULTS.

Peaks: segtrain's pools' peak over its steps (bench_step's `peak` line, device plus host: weights, gradients,
AdamW state, activations, workspace; the host pool is 0 without offloading). PyTorch's: RSS, the forked child's peak
resident set (VmHWM) over its steps (reset before the first: /proc/self/clear_refs 5), less its resident set when
it was forked, before it loaded the model (the driver, whose heap never held a model: each folder is
written by a child of its own): weights, gradients, AdamW state, activations, and whatever the allocator holds.

Output: a progress line per family on stderr, then the markdown table on stdout; --json FILE also writes every pair.
Needs build/bench_step (make build) and the reference venv (scripts/reference-venv.sh).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

SEGTRAIN_ENV = dict(os.environ)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")   # before torch loads its OpenMP: PyTorch's waits (see above)
import torch   # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = (("none", "none"), ("layer", "ckpt"))   # (segtrain's sweep row, PyTorch's)
THREADS = 2
TEXT = 64   # text tokens where the family takes a text sequence


def F(fixture, preset, kw, latent, px, text=TEXT, frames=None, num_frames=None, tokens=None, note=None, setup=None):
    """fixture: make_fixtures.py's; preset: segtrain's tiny preset of that family (it names the family; the folder's
    config.json sets the sizes); kw: the fixture's constructor kwargs changed; latent: (H, W) of the latents;
    px: segtrain's resolution (latent edge x the VAE factor; a preset's other factor is taken from its plan); frames / num_frames: latent frames and segtrain's
    pixel frames; tokens: the image (or video) tokens segtrain's plan must report; setup(mf): more changes of the
    fixture script's globals; note: said in the table."""
    return dict(fixture=fixture, preset=preset, kw=kw, latent=latent, px=px, text=text, frames=frames,
                num_frames=num_frames, tokens=tokens or 1024, note=note, setup=setup)


def _ace(mf):
    mf.ACE_T = 2048


def _hidream(mf):
    mf.HD_LLAMA = TEXT


def _ltx2(mf):
    mf.LTX2_F = 4
    mf.LTX2_TA = (mf.LTX2_F - 1) * 8 + 1


ROPE128 = [16, 56, 56]
OMNIGEN_FACTORS = dict(short_factor=[1.0] * 48, long_factor=[1.0 + 0.05 * i for i in range(48)])   # a head of 96
# The real model's head width and its kinds of blocks (one or two of each); about 256 wide: 2 heads of 128 where the
# model's are 128 wide.
BENCH = {
    "ace_step": F("ace-step", "ace-step-tiny",
                  dict(hidden_size=256, intermediate_size=768, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=128, sliding_window=128), None, 0, num_frames=2048, setup=_ace,
                  note="2048 latent frames of audio, 1024 tokens after the patch of 2"),
    "anima": F("anima", "anima-tiny",
               dict(num_attention_heads=2, attention_head_dim=128, adaln_lora_dim=256), (64, 64), 512, frames=1),
    "auraflow": F("auraflow", "auraflow-tiny",
                  dict(num_mmdit_layers=2, num_single_dit_layers=2, attention_head_dim=256, num_attention_heads=1,
                       caption_projection_dim=256, sample_size=64, pos_embed_max_size=1024), (64, 64), 512),
    "boogu_image": None,
    "chroma": F("chroma", "chroma-tiny",
                dict(num_layers=2, num_single_layers=2, attention_head_dim=128, num_attention_heads=2,
                     axes_dims_rope=ROPE128), (64, 64), 512),
    "cosmos2image": F("cosmos", "cosmos2-tiny",
                      dict(num_attention_heads=2, attention_head_dim=128, adaln_lora_dim=256), (64, 64), 512,
                      frames=1),
    "cosmos3": F("cosmos3", "cosmos3-tiny",
                 dict(head_dim=128, hidden_size=256, intermediate_size=768, num_attention_heads=2,
                      num_key_value_heads=1, rope_axes_dim=[24, 20, 20]), (64, 64), 1024, text=6),
    "ernie": F("ernie", "ernie-tiny",
               dict(hidden_size=256, num_attention_heads=2, ffn_hidden_size=768, rope_axes_dim=(32, 48, 48)),
               (32, 32), 512),
    "flux": F("flux-dev", "flux-tiny",
              dict(attention_head_dim=128, num_attention_heads=2, axes_dims_rope=ROPE128), (64, 64), 512),
    "flux2": F("flux2", "flux2-tiny",
               dict(num_layers=2, num_single_layers=2, attention_head_dim=128, num_attention_heads=2,
                    axes_dims_rope=[32, 32, 32, 32]), (64, 64), 512),
    "flux3_image": F("flux3", "flux3-tiny",
                     dict(attention_head_dim=128, num_attention_heads=2, axes_dims_rope=(32, 32, 32, 32)),
                     (64, 64), 512),
    "hidream": F("hidream", "hidream-tiny",
                 dict(attention_head_dim=128, num_attention_heads=2, num_routed_experts=4, num_activated_experts=2,
                      axes_dims_rope=[64, 32, 32], max_resolution=[128, 128]), (64, 64), 512, setup=_hidream),
    "hunyuanvideo": F("hunyuanvideo15", "hunyuanvideo15-tiny",
                      dict(num_attention_heads=2, attention_head_dim=128, rope_axes_dim=ROPE128), (24, 24), 384,
                      frames=2, num_frames=5, tokens=1152,
                      note="2 latent frames (the fixture script's condition latents are of 2)"),
    "ideogram": F("ideogram", "ideogram-tiny",
                  dict(attention_head_dim=256, num_attention_heads=1, intermediate_size=768, adaln_dim=512,
                       mrope_section=(24, 20, 20)), (32, 32), 512),
    "kandinsky5-image": F("kandinsky5", "kandinsky5-image-tiny",
                          dict(model_dim=256, ff_dim=1024, time_dim=256, axes_dims=[32, 48, 48]), (64, 64), 512),
    "kandinsky5-video": F("kandinsky5-video", "kandinsky5-video-tiny",
                          dict(model_dim=256, ff_dim=1024, time_dim=256, axes_dims=[16, 24, 24]), (32, 32), 256,
                          frames=4, num_frames=13),
    "kolors": F("kolors", "kolors-tiny",
                dict(block_out_channels=[64, 128, 256], attention_head_dim=[1, 2, 4], norm_num_groups=32),
                (64, 64), 512, note="heads of 64 as SDXL's; 1024 tokens at the middle level"),
    "krea2": F("krea2", "krea2-tiny",
               dict(attention_head_dim=128, num_attention_heads=2, num_key_value_heads=1, intermediate_size=768,
                    axes_dims_rope=(32, 48, 48)), (64, 64), 512),
    "longcat_image": F("longcat-image", "longcat-image-tiny",
                       dict(num_layers=2, num_single_layers=2, attention_head_dim=128, num_attention_heads=2,
                            axes_dims_rope=ROPE128), (64, 64), 512),
    "ltxvideo": F("ltxvideo", "ltxvideo-tiny",
                  dict(num_attention_heads=4, attention_head_dim=64, cross_attention_dim=256), (16, 16), 512,
                  frames=4, num_frames=25),
    "ltxvideo2": F("ltxvideo2", "ltxvideo2-tiny",
                   dict(num_attention_heads=2, attention_head_dim=128, cross_attention_dim=256,
                        audio_num_attention_heads=2, audio_attention_head_dim=64, audio_cross_attention_dim=128),
                   (16, 16), 512, frames=4, num_frames=25, setup=_ltx2),
    "lumina2": F("lumina2", "lumina2-tiny",
                 dict(hidden_size=288, num_attention_heads=3, num_kv_heads=1, multiple_of=256,
                      axes_dim_rope=(32, 32, 32), sample_size=64), (64, 64), 512),
    "minimaxh3": F("minimaxh3", "minimaxh3-tiny",
                   dict(num_attention_heads=2, attention_head_dim=128, hidden_size=192, ffn_dim=512,
                        rope_freq_dim=16, freq_dim=256, time_embed_hidden_dim=256, time_embed_dim=96),
                   (32, 32), 512, frames=2, num_frames=5, tokens=512,
                   note="2 latent frames (17 k + 5 pixel frames: 5), 512 tokens"),
    "omnigen": F("omnigen", "omnigen-tiny",
                 dict(hidden_size=288, num_attention_heads=3, num_key_value_heads=3, intermediate_size=768,
                      max_position_embeddings=131072, original_max_position_embeddings=4096,
                      pos_embed_max_size=64, rope_scaling=OMNIGEN_FACTORS), (64, 64), 512, text=6),
    "pixart_sigma": F("pixart-sigma", "pixart-sigma-tiny",
                      dict(num_attention_heads=4, attention_head_dim=72, cross_attention_dim=288, sample_size=64),
                      (64, 64), 512),
    "qwen_image": F("qwen-image", "qwen-image-tiny",
                    dict(attention_head_dim=128, num_attention_heads=2, axes_dims_rope=ROPE128), (64, 64), 512),
    "sana": F("sana-1.5", "sana-1.5-tiny",
              dict(num_attention_heads=7, attention_head_dim=32, num_cross_attention_heads=2,
                   cross_attention_head_dim=112, cross_attention_dim=224, sample_size=32), (32, 32), 1024),
    "sanavideo": F("sanavideo", "sanavideo-tiny",
                   dict(num_attention_heads=2, attention_head_dim=112, num_cross_attention_heads=2,
                        cross_attention_head_dim=112, cross_attention_dim=224, sample_size=32, rope_max_seq_len=1024),
                   (32, 32), 256, frames=4, num_frames=13),
    "sd1x": F("sd1x", "sd1x-tiny",
              dict(block_out_channels=[80, 160, 320], attention_head_dim=2, norm_num_groups=16), (32, 32), 256,
              note="heads of 40, 80 as SD 1.5's; 1024 tokens at the first level"),
    "sd3": F("sd35-medium", "sd3-tiny",
             dict(attention_head_dim=64, num_attention_heads=4, caption_projection_dim=256, sample_size=64,
                  pos_embed_max_size=64), (64, 64), 512),
    "sdxl": F("sdxl", "sdxl-tiny",
              dict(block_out_channels=[64, 128, 256], attention_head_dim=[1, 2, 4], norm_num_groups=32), (64, 64),
              512, note="heads of 64 as SDXL's; 1024 tokens at the middle level"),
    "stable_cascade": F("stable-cascade", "stable-cascade-tiny",
                        dict(block_out_channels=[256, 256], num_attention_heads=[4, 4], conditioning_dim=256),
                        (32, 32), 1344),
    "wan": F("wan", "wan-tiny", dict(num_attention_heads=2, attention_head_dim=128, ffn_dim=1024), (32, 32), 256,
             frames=4, num_frames=13),
    "z_image": F("z-image", "z-image-tiny",
                 dict(dim=256, n_heads=2, n_kv_heads=2, axes_dims=[32, 48, 48], axes_lens=[1024, 64, 64]),
                 (64, 64), 512),
    "zlab_i1": None,
}
NO_DIFFUSERS = {"boogu_image": "no diffusers class (SimpleTuner's own BooguImageTransformer2DModel): not timed",
                "zlab_i1": "no diffusers class (SimpleTuner's own ZlabI1Transformer2DModel): not timed"}


# ------------------------------------------------------------------ the fixture script, at a bench shape
def fixtures():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import make_fixtures as mf
    mf.EXACT = False   # each class as diffusers ships it (no float64 changes)
    return mf


def bench_shape(mf, family):
    """The fixture script's globals and the fixture's entry set to the family's bench shape: batch 1, its latent
    size and frames, `text` tokens."""
    b = BENCH[family]
    fx = mf.FIXTURES[b["fixture"]]
    fx["kw"] = dict(fx["kw"], **b["kw"])
    if b["frames"] is not None:
        fx["frames"] = b["frames"]
    mf.L = b["text"]
    mf.text_mask.__defaults__ = ([b["text"]] * 3, b["text"])   # every caption `text` tokens, none padded
    if b["setup"]:
        b["setup"](mf)
    h, w = b["latent"] or (8, 8)
    mf.use_size(1, h, w)
    return fx


def write_folder(mf, family, out):
    """Builds the family's model at its bench shape (make_fixtures.build: its random weights) and saves it as the
    fixture script saves a fixture: out/<fixture>/. Returns the parameter count."""
    fx = bench_shape(mf, family)
    name = BENCH[family]["fixture"]
    model, _ = mf.build(name)
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    parts = {sub: model._modules.pop(sub) for sub in fx["parts"]}
    model.save_pretrained(folder, safe_serialization=True)
    for sub, part in parts.items():
        part.save_pretrained(os.path.join(folder, sub), safe_serialization=True)
        model.add_module(sub, part)
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------ PyTorch's step server
def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def torch_server(mf, family, mode, out, requests, replies):
    """One step per line of requests, answered "step SECONDS" on replies; at the end of input "peak BYTES" (module
    docstring). Runs in a child forked from the driver, which has imported torch and diffusers (and run no
    parallel region: its torch ran 1 thread)."""
    torch.set_num_threads(THREADS)
    base = rss_kib("VmRSS")
    fx = bench_shape(mf, family)
    name = BENCH[family]["fixture"]
    model = mf.load_folder(name, out).to(torch.float32).train()
    if mode == "ckpt":
        model.enable_gradient_checkpointing()
    gen = torch.Generator().manual_seed(mf.seed_of(name))
    t = {k: v.to(torch.float32) for k, v in mf.inputs_of(name, fx["make"], gen).items()}
    model.register_forward_pre_hook(mf.float32_args, with_kwargs=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    with open("/proc/self/clear_refs", "w") as f:   # the peak from here, over the steps
        f.write("5")
    print("ready %s" % mode, file=replies, flush=True)
    for _ in requests:
        t0 = time.perf_counter()
        pred = fx["run"](model, t)
        loss = torch.nn.functional.mse_loss(pred.float(), t["target"])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print("step %.6f" % (time.perf_counter() - t0), file=replies, flush=True)
    print("peak %d" % ((rss_kib("VmHWM") - base) * 1024), file=replies, flush=True)


# ------------------------------------------------------------------ the driver
def segtrain_config(family, folder, path, px):
    b = BENCH[family]
    cfg = {"model_preset": b["preset"], "pretrained_model_name_or_path": folder, "resolution": px,
           "train_batch_size": 1, "model_type": "full", "optimizer": "adamw", "learning_rate": 1e-4,
           "adam_weight_decay": 0.01, "max_grad_norm": 0, "mixed_precision": "no", "tokenizer_max_length": b["text"],
           "synthetic_data": True}
    if b["num_frames"]:
        cfg["num_frames"] = b["num_frames"]
    if not px:
        del cfg["resolution"]
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    return cfg


def segtrain_plan(cfg_path):
    """segtrain's own line of the model (its blocks, tokens and shape), from `segtrain plan`."""
    r = subprocess.run([os.path.join(ROOT, "build", "segtrain"), "--threads", str(THREADS), "plan", "--config",
                        cfg_path], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("segtrain plan: " + (r.stderr.strip().splitlines() or ["failed"])[-1])
    return next(line for line in r.stdout.splitlines() if line.startswith("model "))


class Server:
    """A step server: "ready", then "step SECONDS" for each line sent, "peak BYTES..." at the end of input; a line
    "error WHY" (or its exit) is its failure."""

    def __init__(self, stdin, stdout, pid):
        self.stdin, self.stdout, self.pid = stdin, stdout, pid
        self.expect("ready")

    @classmethod
    def command(cls, argv, env):
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=env, cwd=ROOT)
        return cls(p.stdin, p.stdout, p.pid)

    @classmethod
    def fork(cls, serve):
        """serve(requests, replies) in a forked child (imports and the fixtures' state shared, nothing reloaded)."""
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in map(int, os.listdir("/proc/self/fd")):   # no other server's pipe stays open in here
                if fd > 2 and fd not in (req_r, rep_w):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            replies = os.fdopen(rep_w, "w")
            try:
                serve(os.fdopen(req_r), replies)
                code = 0
            except BaseException as e:   # the driver reads why
                print("error %s: %s" % (type(e).__name__, str(e).replace("\n", " ")), file=replies, flush=True)
                code = 1
            os._exit(code)
        os.close(req_r), os.close(rep_w)
        return cls(os.fdopen(req_w, "w"), os.fdopen(rep_r), pid)

    def expect(self, word):
        last = "exited"
        while True:
            line = self.stdout.readline()
            if not line:
                raise RuntimeError(last[:300])
            if line.startswith(word):
                return line.split()
            if line.strip():
                last = line.strip()
                if line.startswith("error "):
                    raise RuntimeError(last[6:306])

    def step(self):
        self.stdin.write("\n")
        self.stdin.flush()
        return float(self.expect("step")[1])

    def peak(self):
        self.stdin.close()
        words = self.expect("peak")
        os.waitpid(self.pid, 0)
        self.pid = None
        return sum(int(w) for w in words[1:])

    def kill(self):
        if self.pid:
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = None


def lockstep(mf, family, seg_row, torch_mode, cfg_path, out, warmup, pairs):
    env = dict(SEGTRAIN_ENV)
    if not any(k in env for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "SEGTRAIN_OMP_DEFAULTS")):
        env["GOMP_SPINCOUNT"] = "1000"   # what `segtrain` sets for itself (src/cli/main.c); bench_step does not
    tor = Server.fork(lambda requests, replies: torch_server(mf, family, torch_mode, out, requests, replies))
    try:
        seg = Server.command([os.path.join(ROOT, "build", "bench_step"), "--mode", seg_row, "--config", cfg_path,
                              "--threads", str(THREADS)], env)
    except Exception:
        tor.kill()
        raise
    try:
        times = []
        for i in range(warmup + pairs):
            order = (seg, tor) if i % 2 == 0 else (tor, seg)
            got = {id(s): s.step() for s in order}
            if i >= warmup:
                times.append((got[id(seg)], got[id(tor)]))
        return times, seg.peak(), tor.peak()
    finally:
        seg.kill()
        tor.kill()


def check_plan(family, plan):
    """segtrain's plan line must name the bench's latent (a video's frames too) and, where it counts them, its tokens."""
    b = BENCH[family]
    if b["latent"]:
        frames = "%d x " % b["frames"] if b["num_frames"] else "(?:1 x )?"   # an image family of 1-frame video
        want = frames + "%d x %d" % b["latent"]
        if not re.search(r"\(%s latent" % want, plan):
            raise RuntimeError("segtrain's plan is not of a %s latent: %s" % (want, plan))
    m = re.search(r"(\d+) (?:image|video|audio) (?:\+|tokens)", plan)
    if m and int(m.group(1)) != b["tokens"]:
        raise RuntimeError("segtrain plans %s tokens, the bench wants %d: %s" % (m.group(1), b["tokens"], plan))


def in_child(fn):
    """fn()'s value (JSON), computed in a forked child: the driver's heap never holds a model, so the PyTorch sides
    forked from it later start from the same small resident set (their peak is measured from it)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = {"value": fn()}
        except BaseException as e:
            out = {"error": "%s: %s" % (type(e).__name__, e)}
        with os.fdopen(w, "w") as f:
            json.dump(out, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    out = json.loads(text or '{"error": "the child died"}')
    if "error" in out:
        raise RuntimeError(out["error"])
    return out["value"]


def bench_family(mf, family, work, warmup, pairs):
    """{mode: (segtrain times, torch times, ratios, segtrain peak, torch peak)} or raises with the reason."""
    out = os.path.join(work, family)
    params = in_child(lambda: write_folder(mf, family, out))
    folder = os.path.join(out, BENCH[family]["fixture"])
    cfg_path = os.path.join(out, "segtrain.json")
    px = BENCH[family]["px"]
    segtrain_config(family, folder, cfg_path, px)
    plan = segtrain_plan(cfg_path)
    vae = re.search(r"VAE /(\d+)", plan)
    if px and vae and px != BENCH[family]["latent"][0] * int(vae.group(1)):   # the preset's VAE factor, not the real
        px = BENCH[family]["latent"][0] * int(vae.group(1))                    # model's: the same latent
        segtrain_config(family, folder, cfg_path, px)
        plan = segtrain_plan(cfg_path)
    check_plan(family, plan)
    res = {"params": params, "plan": plan}
    for seg_row, torch_mode in MODES:
        times, sp, tp = lockstep(mf, family, seg_row, torch_mode, cfg_path, out, warmup, pairs)
        res[seg_row] = dict(segtrain=[a for a, _ in times], torch=[b for _, b in times],
                            ratio=[b / a for a, b in times], segtrain_peak=sp, torch_peak=tp)
    return res


GOAL_NONE, GOAL_LAYER = 1.2, 1.35   # issue 45's goals: PyTorch's step over segtrain's


def short_of_goals(results):
    """The timed families whose median ratio misses a goal, with the ratios."""
    out = []
    for family, r in results.items():
        if isinstance(r, str):
            continue
        n, c = statistics.median(r["none"]["ratio"]), statistics.median(r["layer"]["ratio"])
        if n < GOAL_NONE or c < GOAL_LAYER:
            out.append("%s (%.2fx / %.2fx)" % (family, n, c))
    return out


def mib(n):
    return "%.0f MiB" % (n / 2**20)


def row(family, r):
    if isinstance(r, str):
        return "| %s | %s | | | | | | | |" % (family, r)
    n, c = r["none"], r["layer"]
    med = statistics.median
    return "| %s | %.3f | %.3f | %.2fx | %.3f | %.3f | %.2fx | %s / %s | %s / %s |" % (
        family, med(n["segtrain"]), med(n["torch"]), med(n["ratio"]), med(c["segtrain"]), med(c["torch"]),
        med(c["ratio"]), mib(n["segtrain_peak"]), mib(n["torch_peak"]), mib(c["segtrain_peak"]),
        mib(c["torch_peak"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("families", nargs="*", help="segtrain's family names (default all): " + ", ".join(BENCH))
    ap.add_argument("--quick", action="store_true", help="no warm-up pair and 1 measured pair a mode")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up pairs a mode (default 1)")
    ap.add_argument("--pairs", type=int, default=3, help="measured pairs a mode (default 3)")
    ap.add_argument("--json", metavar="FILE", help="also write every pair's seconds and the peaks")
    ap.add_argument("--keep", metavar="DIR", help="write each family's weights folder and segtrain config to "
                    "DIR/FAMILY/ and keep them (default: a scratch folder, removed), e.g. for `segtrain profile "
                    "--config DIR/FAMILY/segtrain.json`")
    a = ap.parse_args()
    for f in a.families:
        if f not in BENCH:
            sys.exit("vs_diffusers.py: unknown family '%s' (valid: %s)" % (f, ", ".join(BENCH)))
    if not os.access(os.path.join(ROOT, "build", "bench_step"), os.X_OK):
        sys.exit("vs_diffusers.py: build/bench_step not found: build first (make build)")
    warmup, pairs = (0, 1) if a.quick else (a.warmup, a.pairs)
    mf = fixtures()
    import diffusers
    diffusers.utils.logging.set_verbosity_error()
    torch.set_num_threads(1)   # no OpenMP team in the driver: each PyTorch side is a child forked from it
    results = {}
    with tempfile.TemporaryDirectory(prefix="vs_diffusers.") as scratch:
        work = os.path.abspath(a.keep) if a.keep else scratch
        for family in a.families or list(BENCH):
            t0 = time.time()
            if BENCH[family] is None:
                results[family] = NO_DIFFUSERS[family]
            else:
                try:
                    load = os.getloadavg()[0]
                    results[family] = dict(bench_family(mf, family, work, warmup, pairs), load=load)
                except Exception as e:   # the row says why; the other families still run
                    results[family] = "not run: %s" % str(e).replace("|", "/")[:200]
            r = results[family]
            print("%-18s %s (%.0f s, load %.1f)" % (family, row(family, r).split("| ", 2)[2][:-2]
                                                    if not isinstance(r, str) else r, time.time() - t0,
                                                    os.getloadavg()[0]), file=sys.stderr, flush=True)
    print("| family | segtrain none s/step | torch none s/step | ratio | segtrain layer s/step | torch ckpt s/step "
          "| ratio | peak none: segtrain / torch | peak layer / ckpt: segtrain / torch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for family, r in results.items():
        print(row(family, r))
    loads = [r["load"] for r in results.values() if not isinstance(r, str)]
    if loads:
        print()
        print("Load average (1 minute) at each family's start: %.1f to %.1f, on %d CPUs; %d threads a side." % (
            min(loads), max(loads), os.cpu_count(), THREADS))
    print()
    print("Short of the goals (`none` at least %.2fx PyTorch's step, `layer` at least %.2fx): %s." % (
        GOAL_NONE, GOAL_LAYER, ", ".join(short_of_goals(results)) or "none"))
    print()
    print("Shapes, as segtrain's plan states them (PyTorch's class at the same kwargs, config.json of the folder):")
    print()
    for family, r in results.items():
        if not isinstance(r, str):
            note = BENCH[family]["note"]
            print("- %s: %s, %.2fM parameters%s" % (family, re.sub(r"; batch 1$", "", r["plan"].split(": ", 1)[1]),
                                                  r["params"] / 1e6, "; " + note if note else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)

if __name__ == "__main__":
    main()
