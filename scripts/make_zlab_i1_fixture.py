#!/usr/bin/env python3
"""The zlab_i1 parity fixture: SimpleTuner's own ZlabI1Transformer2DModel (no diffusers class has it) at a tiny size.

  make_zlab_i1_fixture.py --simpletuner /tmp/st [--out tests/fixtures] [--verify | --yardstick]

--simpletuner is a SimpleTuner checkout (its root, holding simpletuner/). The class's module is imported from there
as it is; its package __init__ files are not run (they import SimpleTuner's trainer, which the class does not use):
empty package modules stand in for them, so the class's own imports (musubi_block_swap, the checkpointing helpers,
TREAD's router) are SimpleTuner's files. Everything else is make_fixtures.py's (docs/FIXTURES.md): the same random
weights, float64 reference, files and checks. The fixture's metadata records the checkout's commit. --yardstick
writes the fixture's bf16_yardstick.json instead, as bf16_yardstick.py does for make_fixtures.py's.

Needs the reference venv (scripts/reference-venv.sh).
"""
import argparse
import importlib
import os
import subprocess
import sys
import types

import diffusers
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

ST_COMMIT = "bc8e6ab77"   # the SimpleTuner snapshot the fixture was made from (checked against a git checkout)
NAME = "zlab_i1"
PACKAGES = ("simpletuner", "simpletuner.helpers", "simpletuner.helpers.training", "simpletuner.helpers.models",
            "simpletuner.helpers.models.zlab_i1")


def import_class(root):
    for pkg in PACKAGES:
        mod = types.ModuleType(pkg)
        mod.__path__ = [os.path.join(root, *pkg.split("."))]
        sys.modules[pkg] = mod
    module = importlib.import_module("simpletuner.helpers.models.zlab_i1.transformer")
    return module.ZlabI1Transformer2DModel


def checkout_commit(root):
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None   # an exported tree (git archive): the commit is the one it was exported from


def run(model, t):
    # SimpleTuner's ZLabI1._model_predict_single: latents as is, the timesteps (the class ignores them), the caption
    # and its mask as a bool (B, L); pred = -output: SimpleTuner's target is x0 - noise (flow_matching_target_direction
    # -1).
    out = model(t["latents"], t["sigma"] * 1000, t["encoder_hidden_states"], t["encoder_attention_mask"].bool())
    return -out


PASSED = ("x = latents (B, C, H, W) as is; t = 1000 sigma (unused by the class); caption = encoder_hidden_states "
          "(B, L, text_embed_dim), the padding holding what the encoder gives; mask = encoder_attention_mask.bool(); "
          "pred = -output")

# The class never reads its timestep (t_embedder is frozen and unused), nor its null caption (caption dropout is
# the trainer's); its rotary tables are buffers held as frozen parameters. The last out-block's text stream after
# its attention reaches nothing.
ZERO = {r"t_embedder\..*": "frozen, and unused: the class ignores its timestep",
        r"text_encoder_adapter\.learnable_null_caption": "unused by the forward (caption dropout is the trainer's)",
        r"rope_embedder\..*": "the rotary tables: frozen constants",
        r"out_blocks\.1\.(attn\.proj_text|mlp_text\.w12|mlp_text\.w3)\..*":
            "the last block's text output reaches nothing (the final layer reads the image stream)"}
ZERO_HW = dict(ZERO, **{r"pos_embed": "off the checkpoint's grid the class makes a sine-cosine table instead"})

# Five blocks (2 in, mid, 2 out: two skips, taken in reverse) of 2 heads x 16 (28 x 72 real), rotary axes (8, 4, 4)
# ((36, 18, 18)), the caption 24 wide (2304) with 6 tokens (256); an 8 x 8 latent (128 x 128) of 64 px (1024).
KW = dict(input_size=mf.H, image_resolution=8 * mf.H, patch_size=2, in_channels=mf.C, hidden_size=32, depth=5,
          num_heads=2, mlp_ratio=2.0, text_embed_dim=mf.JOINT, text_num_tokens=mf.L, rope_theta=10000.0)


def sized(b, h, w):
    """make_fixtures' use_size, which also picks the zero gradients of the size (pos_embed off the square grid)."""
    mf._use_size(b, h, w)
    mf.FIXTURES[NAME]["zero"] = ZERO if (h, w) == (mf.H_SQUARE, mf.W_SQUARE) else ZERO_HW


def keep_rope(randomize):
    """make_fixtures' randomize, but for the rotary tables: the class's own constants stay."""
    def apply(model, gen):
        tables = {n: p.detach().clone() for n, p in model.named_parameters() if n.startswith("rope_embedder.")}
        randomize(model, gen)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in tables:
                    p.copy_(tables[n])
    return apply


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--simpletuner", required=True, help="a SimpleTuner checkout's root")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "fixtures"))
    ap.add_argument("--verify", action="store_true", help="reload the folder and check its pred; write nothing")
    ap.add_argument("--yardstick", action="store_true", help="write the fixture's bf16_yardstick.json alone")
    a = ap.parse_args()
    commit = checkout_commit(a.simpletuner)
    if commit and not commit.startswith(ST_COMMIT):
        sys.exit("make_zlab_i1_fixture.py: %s is SimpleTuner %s, the fixture's is %s" % (a.simpletuner, commit,
                                                                                           ST_COMMIT))
    cls = import_class(a.simpletuner)
    setattr(diffusers, cls.__name__, cls)   # make_fixtures finds a fixture's class in diffusers' namespace
    mf.fixture(NAME, cls.__name__, KW, mf.masked_text_make, run, PASSED, zero=ZERO)
    mf._use_size, mf.use_size = mf.use_size, sized
    mf.randomize = keep_rope(mf.randomize)
    versions = mf.versions
    mf.versions = lambda: dict(versions(), simpletuner=ST_COMMIT)
    diffusers.utils.logging.set_verbosity_error()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if a.yardstick:
        import bf16_yardstick   # noqa: E402 (clears make_fixtures' EXACT, which this class does not read)
        bf16_yardstick.yardstick(NAME, a.out)
        return
    (mf.verify if a.verify else mf.write)(NAME, a.out)


if __name__ == "__main__":
    main()
