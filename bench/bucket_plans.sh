#!/usr/bin/env bash
# One checkpointing plan for every bucket against a plan per bucket (gradient_checkpointing_bucket_plans, issue 41):
# the same mixed-shape run on synthetic data trained both ways, one after the other, for R rounds; per bucket, the
# median measured sec_per_step of its steps (the run's first step, a cold start, left out) under each, and its
# measured device peak beside `plan`'s prediction for that run (they must be equal: each step that differs is
# listed after the table, and the script then exits 1).
#
#   bench/bucket_plans.sh --one 'k=v;k=v' --own 'k=v;k=v' [--bin build/segtrain] [--rounds R] [--steps N]
#                         [--threads T] [--set key=value ...]
#
# --one: the run's schedule (e.g. advise's "as options", as key=value;key=value); --own: what the per-bucket run
# adds to it (advise's gradient_checkpointing_bucket_plans=...); the --set options are both runs' config
# (model_preset, bucket_shapes, seed: the seed picks the bucket order, u64(seed, "train.bucket", step) mod n).
# Each run trains N steps (default 8). Every command runs at --threads T (default: every core), since a step's
# workspace is per thread: a plan and a train that took different thread counts from the load at their start would
# differ by it. Builds nothing: needs build/segtrain.
set -euo pipefail

BIN=build/segtrain
ROUNDS=2
STEPS=8
THREADS=$(nproc)
ONE=
OWN=
SETS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) BIN="${2:?}"; shift 2 ;;
        --rounds) ROUNDS="${2:?}"; shift 2 ;;
        --steps) STEPS="${2:?}"; shift 2 ;;
        --threads) THREADS="${2:?}"; shift 2 ;;
        --one) ONE="${2:?}"; shift 2 ;;
        --own) OWN="${2:?}"; shift 2 ;;
        --set) SETS+=(--set "${2:?}"); shift 2 ;;
        -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; # the header comment
        *) echo "bench/bucket_plans.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -x "$BIN" ] || { echo "bench/bucket_plans.sh: $BIN is not an executable (--bin PATH)" >&2; exit 2; }
[ -n "$ONE" ] && [ -n "$OWN" ] || { echo "bench/bucket_plans.sh: --one and --own are needed (see --help)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/segtrain-bucket-plans-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
as_sets() { local IFS=';'; for kv in $1; do printf -- '--set\n%s\n' "$kv"; done; }
mapfile -t ONE_SETS < <(as_sets "$ONE")
mapfile -t OWN_SETS < <(as_sets "$ONE;$OWN")

# plan's predicted device peak of each bucket, as JSON {"256x256": bytes, ...}
predict() {
    "$BIN" --threads "$THREADS" plan --json "${SETS[@]}" "$@" 2>/dev/null |
        python3 -c 'import json,sys; print(json.dumps({b["shape"]: b["predicted_peak_device_bytes"] for b in json.load(sys.stdin)["buckets"]}))'
}
predict "${ONE_SETS[@]}" >"$WORK/one.predicted"
predict "${OWN_SETS[@]}" >"$WORK/own.predicted"

run() { # $1: one or own; $2: round
    local out="$WORK/$1-$2" sets=()
    if [ "$1" = one ]; then sets=("${ONE_SETS[@]}"); else sets=("${OWN_SETS[@]}"); fi
    "$BIN" --threads "$THREADS" train "${SETS[@]}" "${sets[@]}" --set synthetic_data=true --set max_train_steps="$STEPS" \
        --set output_dir="$out" --set checkpoint_step_interval=0 --set validation_steps=0 >"$WORK/log" 2>&1 ||
        { echo "bench/bucket_plans.sh: the $1 run failed:" >&2; tail -3 "$WORK/log" >&2; exit 1; }
}
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then run one "$r"; run own "$r"; else run own "$r"; run one "$r"; fi
done

echo "segtrain bucket-plans bench: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores, $(date -u +%Y-%m-%d)"
echo "config: ${SETS[*]}; $STEPS steps a run, $ROUNDS rounds each, $THREADS threads"
python3 - "$WORK" "$ROUNDS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
sec, peak, order, differ, steps = {}, {}, [], [], 0
for way in ("one", "own"):
    predicted = json.load(open(f"{work}/{way}.predicted"))
    for r in range(1, rounds + 1):
        rows = [json.loads(l) for l in open(f"{work}/{way}-{r}/train_log.jsonl") if l.strip()]
        for i, row in enumerate(rows):
            b = row["bucket"]
            if b not in order: order.append(b)
            steps += 1
            if row["peak_device_bytes"] != predicted[b]:
                differ.append(f"{way} round {r} step {row['step']} at {b}: measured peak {row['peak_device_bytes']}, "
                              f"predicted {predicted[b]} ({row['peak_device_bytes'] - predicted[b]:+d} bytes)")
            peak[way, b] = predicted[b]
            if i: sec.setdefault((way, b), []).append(row["sec_per_step"])
print("| bucket | steps timed (one / own) | s/step, one plan | s/step, per-bucket plans | change | peak, one plan (MiB) | peak, per-bucket (MiB) |")
print("|---|---|---|---|---|---|---|")
for b in sorted(order, key=lambda s: [int(x) for x in s.replace("@", "x").split("x")]):
    one, own = sec.get(("one", b), []), sec.get(("own", b), [])
    m1 = statistics.median(one) if one else float("nan")
    m2 = statistics.median(own) if own else float("nan")
    print(f"| {b} | {len(one)} / {len(own)} | {m1:.3f} | {m2:.3f} | {100 * (m2 - m1) / m1:+.1f}% | "
          f"{peak['one', b] / 2**20:.2f} | {peak['own', b] / 2**20:.2f} |")
print(f"{steps - len(differ)} of {steps} steps' measured device peaks are plan's prediction for their bucket, to the byte")
for line in differ: print("  " + line)
sys.exit(1 if differ else 0)
PY
