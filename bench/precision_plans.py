#!/usr/bin/env python3
"""Every SimpleTuner example config's predicted peak in float32 and in bf16 (issue 42), as a Markdown table.

For each tests/fixtures/simpletuner/*.json, `segtrain plan --json` (the dry run: exact for this engine, nothing
allocated) with mixed_precision no and bf16, under three of the sweep's rows: none, layer (every block checkpointed,
its boundary kept on the device) and unsloth (the same with the boundaries in host memory: the least device memory
of the standard rows). Each cell is float32 / bf16 GiB and the ratio bf16 / float32; the last two columns split the
`none` peak into its weights and its activations (activations + boundaries), since under LoRA bf16 halves the frozen
base as well. As the CLI test plans the examples: from the examples' folder (a lycoris_config is a path relative to
the working directory), without the hub weights some name (pretrained_model_name_or_path= : the flavour's sizes), and
where LyCORIS is not mapped onto the family yet, as a standard LoRA of its rank (marked so, as the family sweep does).
An example that still does not plan is listed with plan's reason.

    bench/precision_plans.py [--bin build/segtrain] [--examples tests/fixtures/simpletuner] [--threads 2]

Deterministic: dry runs only, at a fixed thread count (a step's workspace is per thread, so it is part of the peak).
Run from the repository root. Uses only the standard library.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

MODES = {
    "none": "gradient_checkpointing=false",
    "layer": "gradient_checkpointing=true",
    "unsloth": "gradient_checkpointing=true;gradient_checkpointing_backend=unsloth",
}
# what every row sets besides its own keys: the sweep's standard rows, whatever the example asks for, on an
# unquantized base held wholly on the device (mixed_precision alone; base_model_precision is docs/QUANTIZATION.md's,
# and the examples' block swapping, musubi_blocks_to_swap and ramtorch, moves weights off the device)
COMMON = ("gradient_checkpointing_backend=torch;gradient_checkpointing_interval=1;gradient_checkpointing_segment_stride=1;"
          "gradient_checkpointing_offload_attention=false;gradient_checkpointing_keep_attention_output=false;"
          "gradient_checkpointing_plan=;gradient_checkpointing_bucket_plans=;base_model_precision=no_change;"
          "musubi_blocks_to_swap=0;ramtorch=false")
PRECISIONS = ("no", "bf16")
GIB = 1024.0 ** 3


def plan(args, example, precision, mode, extra=()):
    """plan --json's object, or the last line plan wrote to stderr when it refused."""
    cmd = [os.path.abspath(args.bin), "--threads", str(args.threads), "plan", "--json", "--config",
           os.path.abspath(example), "--set", "pretrained_model_name_or_path=", "--set", "mixed_precision=" + precision]
    for kv in (COMMON + ";" + MODES[mode]).split(";") + list(extra):
        cmd += ["--set", kv]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=args.examples)
    if run.returncode != 0:
        lines = [l for l in run.stderr.splitlines() if l.strip()]
        return lines[-1] if lines else "exit %d" % run.returncode
    return json.loads(run.stdout)


def gib(b):
    return "%.2f" % (b / GIB)


def cell(f32, bf16):
    if isinstance(f32, str) or isinstance(bf16, str):
        return "refused"
    a, b = f32["predicted_peak_device_bytes"]["total"], bf16["predicted_peak_device_bytes"]["total"]
    return "%s / %s (%.2f)" % (gib(a), gib(b), b / a)


def part(f32, bf16, keys):
    a = sum(f32["predicted_peak_device_bytes"].get(k, 0) for k in keys)
    b = sum(bf16["predicted_peak_device_bytes"].get(k, 0) for k in keys)
    return "%s / %s (%.2f)" % (gib(a), gib(b), b / a if a else float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/segtrain")
    ap.add_argument("--examples", default="tests/fixtures/simpletuner")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    examples = sorted(glob.glob(os.path.join(args.examples, "*.json")))
    if not examples:
        sys.exit("precision_plans: no example configs in %s" % args.examples)
    rows, refused, ratios = [], [], {m: [] for m in MODES}
    for ex in examples:
        got = {(p, m): plan(args, ex, p, m) for p in PRECISIONS for m in MODES}
        as_lora = isinstance(got[("no", "none")], str) and "not mapped onto LyCORIS" in got[("no", "none")]
        if as_lora:
            got = {(p, m): plan(args, ex, p, m, ["lora_type=standard"]) for p in PRECISIONS for m in MODES}
        none32, none16 = got[("no", "none")], got[("bf16", "none")]
        if isinstance(none32, str) or isinstance(none16, str):
            refused.append((os.path.basename(ex), none32 if isinstance(none32, str) else none16))
            continue
        model = none32["model"]
        cells = []
        for m in MODES:
            a, b = got[("no", m)], got[("bf16", m)]
            cells.append(cell(a, b))
            if not isinstance(a, str) and not isinstance(b, str):
                ratios[m].append(b["predicted_peak_device_bytes"]["total"] / a["predicted_peak_device_bytes"]["total"])
        cells.append(part(none32, none16, ("weights",)))
        cells.append(part(none32, none16, ("activations", "boundaries")))
        rows.append("| %s%s | %s (%s), batch %d | %s |" % (os.path.basename(ex)[:-5], " (as a standard LoRA)" if as_lora
                                                           else "", model["preset"], model["family"], model["batch"],
                                                           " | ".join(cells)))
    print("Peak device memory predicted by `segtrain plan` (GiB), float32 (`mixed_precision: no`) / bf16 "
          "(`mixed_precision: bf16`), and (the ratio bf16 / float32); %d threads.\n" % args.threads)
    print("| example | preset (family), batch | none | layer | unsloth | none: weights | none: activations + boundaries |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("Median ratio bf16 / float32 over the %d examples that plan: %s." % (len(rows), ", ".join(
        "%s %.2f (%.2f to %.2f)" % (m, statistics.median(r), min(r), max(r)) for m, r in ratios.items() if r)))
    if refused:
        print("\nNot planned (plan's reason):\n")
        for name, why in refused:
            print("- %s: %s" % (name, why))


if __name__ == "__main__":
    main()
