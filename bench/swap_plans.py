#!/usr/bin/env python3
"""Flux-sized and Wan-14B-sized plans under every precision x block swap x schedule, and the planner's choice at
24, 48 and 80 GiB (issue 43), as Markdown tables.

For each config (default bench/wan-14b-lora16.json and bench/flux-dev-lora16.json), `segtrain plan --json` (the dry
run: exact for this engine, nothing allocated) under each precision (mixed_precision no; bf16; bf16 with the built
quantized bases int8-, fp8- and int4-quanto), each count of swapped blocks (musubi_blocks_to_swap 0, half the
blocks, all but one; where the family has no block swap, its refusal is said and the row left out) and each of the
sweep's standard rows: the predicted peak device memory in GiB. Then `segtrain advise --quick --rates-from dit-s2`
(the placement of the weights and the per-block planner, priced at this machine's rates measured on a dit-s2 step,
and the link at --link-bandwidth) at each budget and precision: the count of swapped blocks and the schedule it
chooses, with its peak (its predicted seconds are left out: each advise calibrates again, and on a busy machine the
rates differ from run to run by more than the choices do).

    bench/swap_plans.py [--bin build/segtrain] [--configs A.json,B.json] [--link-bandwidth 25GB/s] [--threads 2]
                        [--memory-only]

Without --link-bandwidth, the link is `segtrain selfcheck`'s measure, once, given to every advise. Peaks are
deterministic at a fixed thread count (a step's workspace is per thread); the choices follow this machine's rates.
Run from the repository root. Uses only the standard library.
"""
import argparse
import json
import os
import re
import subprocess
import sys

MODES = {  # the sweep's standard rows (src/sweep/sweep.c)
    "none": "gradient_checkpointing=false",
    "layer": "gradient_checkpointing=true",
    "interval2": "gradient_checkpointing=true;gradient_checkpointing_interval=2;gradient_checkpointing_segment_stride=2",
    "seg2-stride4": "gradient_checkpointing=true;gradient_checkpointing_interval=2;gradient_checkpointing_segment_stride=4",
    "torch-ffn": "gradient_checkpointing=true;gradient_checkpointing_backend=torch-ffn",
    "unsloth": "gradient_checkpointing=true;gradient_checkpointing_backend=unsloth",
    "unsloth-ffn": "gradient_checkpointing=true;gradient_checkpointing_backend=unsloth-ffn",
    "activation-offload": "gradient_checkpointing=true;gradient_checkpointing_offload_attention=true",
    "seg2-stride4-offload": "gradient_checkpointing=true;gradient_checkpointing_interval=2;"
                            "gradient_checkpointing_segment_stride=4;gradient_checkpointing_offload_attention=true",
}
PRECISIONS = [("no", "no_change"), ("bf16", "no_change"), ("bf16", "int8-quanto"), ("bf16", "fp8-quanto"),
              ("bf16", "int4-quanto")]
BUDGETS = ["24GiB", "48GiB", "80GiB"]
GIB = 1024.0 ** 3


def run(args, cmd):
    return subprocess.run([os.path.abspath(args.bin), "--threads", str(args.threads)] + cmd, capture_output=True,
                          text=True)


def sets(precision, swap, extra=""):
    out = ["mixed_precision=" + precision[0], "base_model_precision=" + precision[1], "musubi_blocks_to_swap=%d" % swap]
    return out + [kv for kv in extra.split(";") if kv]


def plan(args, config, precision, swap, mode):
    """plan --json's object, or plan's last line on stderr where it refused."""
    cmd = ["plan", "--json", "--config", config, "--link-bandwidth", args.link_bandwidth]
    for kv in sets(precision, swap, MODES[mode]):
        cmd += ["--set", kv]
    got = run(args, cmd)
    if got.returncode:
        lines = [l for l in got.stderr.splitlines() if l.strip()]
        return lines[-1] if lines else "exit %d" % got.returncode
    return json.loads(got.stdout)


def advise(args, config, precision, budget):
    """advise's choice as a cell: the swapped blocks, the schedule, its peak and seconds."""
    cmd = ["advise", "--quick", "--rates-from", "dit-s2", "--link-bandwidth", args.link_bandwidth, "--config", config,
           "--device-memory", budget]
    for kv in sets(precision, 0)[:2]:
        cmd += ["--set", kv]
    got = run(args, cmd)
    m = re.search(r"^advice: (.*), ([0-9.]+) s/step, peak ([0-9.]+) MiB", got.stdout, re.M)
    if not m:
        return "nothing fits" if "nothing fits" in got.stdout else "failed: " + (got.stderr.strip().splitlines() or
                                                                                 ["exit %d" % got.returncode])[-1]
    name, peak = m.group(1), float(m.group(3)) / 1024
    swap = re.search(r" \+ swap (\d+) blocks$", name)
    name = name[:swap.start()] if swap else name
    return "swap %s, %s: %.2f GiB" % (swap.group(1) if swap else "0", name, peak)


def measured_link(args):
    got = run(args, ["selfcheck"])
    m = re.search(r"^link +([0-9.]+) GB/s", got.stdout, re.M)
    if not m:
        sys.exit("swap_plans: selfcheck printed no link bandwidth: " + got.stdout + got.stderr)
    return m.group(1) + "GB/s"


def table(args, config):
    base = plan(args, config, PRECISIONS[0], 0, "none")
    if isinstance(base, str):
        sys.exit("swap_plans: %s: %s" % (config, base))
    model = base["model"]
    blocks = sum(len(s["modes"]) for s in base["sequences"])  # the swap manager counts every list (Flux: 19 + 38)
    counts = [0, blocks // 2, blocks - 1]
    print("### %s: %s (%s), %d blocks, batch %d\n" % (os.path.basename(config), model["preset"], model["family"],
                                                      blocks, model["batch"]))
    print("Predicted peak device memory (GiB) by `segtrain plan`; each row a precision (mixed_precision, "
          "base_model_precision) and a count of swapped blocks (musubi_blocks_to_swap).\n")
    print("| precision | swap | " + " | ".join(MODES) + " |")
    print("|---|---|" + "---|" * len(MODES))
    refusals = set()
    for p in PRECISIONS:
        for n in counts:
            got = {m: plan(args, config, p, n, m) for m in MODES}
            if all(isinstance(g, str) for g in got.values()):
                refusals.add(next(iter(got.values())))
                continue
            cells = [g if isinstance(g, str) else "%.2f" % (g["predicted_peak_device_bytes"]["total"] / GIB)
                     for g in got.values()]
            print("| %s, %s | %d | %s |" % (p[0], p[1], n, " | ".join(cells)))
    for why in sorted(refusals):
        print("\nNot planned: %s" % why)
    if args.memory_only:
        return
    print("\nThe planner's choice (`advise --quick --rates-from dit-s2 --link-bandwidth %s`): swapped blocks, "
          "schedule and peak, the least predicted time at this machine's rates (each advise measures them again).\n"
          % args.link_bandwidth)
    print("| precision | " + " | ".join(BUDGETS) + " |")
    print("|---|" + "---|" * len(BUDGETS))
    for p in PRECISIONS:
        print("| %s, %s | %s |" % (p[0], p[1], " | ".join(advise(args, config, p, b) for b in BUDGETS)))
        sys.stdout.flush()
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/segtrain")
    ap.add_argument("--configs", default="bench/wan-14b-lora16.json,bench/flux-dev-lora16.json")
    ap.add_argument("--link-bandwidth", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--memory-only", action="store_true", help="the peaks' tables alone, without advise")
    args = ap.parse_args()
    if not args.link_bandwidth:
        args.link_bandwidth = measured_link(args)
    print("Link: %s host to device%s; %d threads.\n" % (args.link_bandwidth, "" if "--link-bandwidth" in sys.argv
                                                          else " (selfcheck's measure here)", args.threads))
    for config in args.configs.split(","):
        table(args, config)


if __name__ == "__main__":
    main()
