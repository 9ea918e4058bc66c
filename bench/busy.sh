#!/usr/bin/env bash
# A training step on a busy machine (issue 39): README's dit example (q.json, dit-tiny at batch 32) trained with 0, 1
# and 2 busy processes beside it (each a shell loop spinning on one core, started and killed here), side by side in
# one run, four ways: before issue 39 (SEGTRAIN_OMP_DEFAULTS=1 SEGTRAIN_BLAS_DEFAULTS=1 OMP_NUM_THREADS=cores:
# libgomp's spinning waits, OpenBLAS's own kernels, a thread per core), spinning (the same with the kernels as now:
# what the short spin and taking only the free cores change), the default, and --threads 1.
#
#   bench/busy.sh [--bin build/segtrain] [--rounds R] [--warmup W] [--steps N] [--busy LIST] [--spincount S]
#
# Each cell is one fresh `segtrain train` of W + N steps (default 1 + 4) with OMP_WAIT_POLICY and GOMP_SPINCOUNT
# unset; its figure is the median sec_per_step of the last N steps in train_log.jsonl. The variants run one after
# another under the same busy processes, the order rotating from round to round, and each cell is the median over R
# rounds (default 3). Ratios: default / --threads 1 (the goal: at most 1.3 with one busy process), default /
# spinning (what the short spin and the free cores cost or gain) and default / before (the goal: no loss on a quiet
# machine, 0 busy).
# --spincount S adds a variant, the default threads with GOMP_SPINCOUNT=S (a short spin before sleeping), and its
# ratio to the default. Builds nothing: needs build/segtrain.
set -euo pipefail

BIN=build/segtrain
ROUNDS=3
WARMUP=1
STEPS=4
BUSY="0,1,2"
SPINCOUNT=
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) BIN="${2:?}"; shift 2 ;;
        --rounds) ROUNDS="${2:?}"; shift 2 ;;
        --warmup) WARMUP="${2:?}"; shift 2 ;;
        --steps) STEPS="${2:?}"; shift 2 ;;
        --busy) BUSY="${2:?}"; shift 2 ;;
        --spincount) SPINCOUNT="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; # the header comment
        *) echo "bench/busy.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -x "$BIN" ] || { echo "bench/busy.sh: $BIN is not an executable (make build first, or --bin PATH)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/segtrain-busy-XXXXXX)
SPINNERS=()
stop_busy() {
    for p in "${SPINNERS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${SPINNERS[@]}"; do wait "$p" 2>/dev/null || true; done
    SPINNERS=()
}
trap 'stop_busy; rm -rf "$WORK"' EXIT
cat > "$WORK/q.json" <<'JSON'
{"model_preset": "dit-tiny", "in_channels": 3, "vae_scale_factor": 1, "resolution": 32, "patch_size": 4, "num_classes": 8,
 "hidden_size": 128, "depth": 6, "num_heads": 4,
 "train_batch_size": 32, "max_train_steps": 4000, "learning_rate": 1e-3, "lr_scheduler": "cosine",
 "lr_warmup_steps": 50, "output_dir": "q", "checkpoint_step_interval": 2000, "validation_steps": 2000}
JSON

VARIANTS=(before spinning default threads1)
[ -n "$SPINCOUNT" ] && VARIANTS+=(spin)
# one cell: prints the median sec_per_step of the measured steps
cell() {
    local out="$WORK/out" pre=() glob=()
    rm -rf "$out"
    case "$1" in
        before) pre=(SEGTRAIN_OMP_DEFAULTS=1 SEGTRAIN_BLAS_DEFAULTS=1 OMP_NUM_THREADS=$(nproc)) ;;
        spinning) pre=(SEGTRAIN_OMP_DEFAULTS=1 OMP_NUM_THREADS=$(nproc)) ;;
        threads1) glob=(--threads 1) ;;
        spin) pre=(GOMP_SPINCOUNT="$SPINCOUNT") ;;
    esac
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u SEGTRAIN_OMP_DEFAULTS -u SEGTRAIN_BLAS_DEFAULTS -u OMP_NUM_THREADS \
        "${pre[@]}" "$BIN" "${glob[@]}" train \
        --config "$WORK/q.json" --set max_train_steps=$((WARMUP + STEPS)) --set output_dir="$out" \
        --set checkpoint_step_interval=0 --set validation_steps=0 >"$WORK/log" 2>&1 ||
        { echo "bench/busy.sh: the $1 run failed:" >&2; tail -3 "$WORK/log" >&2; exit 1; }
    python3 - "$out/train_log.jsonl" "$WARMUP" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("%.4f" % statistics.median(r["sec_per_step"] for r in rows[int(sys.argv[2]):]))
PY
}

echo "segtrain busy-machine bench: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
echo "$("$BIN" --version), default threads: $(nproc); README's dit q.json, warmup $WARMUP, $STEPS measured steps, $ROUNDS rounds"
env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT SEGTRAIN_BLAS_DEFAULTS=1 "$BIN" selfcheck 2>&1 | grep -E '^(blas|note) ' | sed 's/^/before: /' || true
env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$BIN" selfcheck 2>&1 | grep -E '^(blas|note|load) ' || true
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A SEC
for n in ${BUSY//,/ }; do
    for ((k = 0; k < n; k++)); do
        sh -c 'while :; do :; done' &
        SPINNERS+=($!)
    done
    for ((r = 0; r < ROUNDS; r++)); do
        for ((v = 0; v < ${#VARIANTS[@]}; v++)); do
            name=${VARIANTS[$(((v + r) % ${#VARIANTS[@]}))]}
            SEC[$n,$name]="${SEC[$n,$name]:-} $(cell "$name")"
        done
    done
    stop_busy
done

python3 - "$BUSY" "$SPINCOUNT" <<PY
import statistics, sys
spin = sys.argv[2]
sec = {}
$(for k in "${!SEC[@]}"; do echo "sec['$k'] = [float(x) for x in '${SEC[$k]}'.split()]"; done)
med = lambda k: statistics.median(sec[k])
print()
extra = " GOMP_SPINCOUNT=%s, s/step | it / default |" % spin if spin else ""
print("| busy processes | before, s/step | spinning waits, s/step | default, s/step | --threads 1, s/step | default / --threads 1 | default / spinning | default / before |" + extra)
print("|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if spin else ""))
for n in sys.argv[1].split(","):
    b, w, d, t = med(n + ",before"), med(n + ",spinning"), med(n + ",default"), med(n + ",threads1")
    row = "| %s | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %.2f |" % (n, b, w, d, t, d / t, d / w, d / b)
    if spin:
        row += " %.3f | %.2f |" % (med(n + ",spin"), med(n + ",spin") / d)
    print(row)
print()
print("each cell: the median over rounds of each run's median s/step; the rounds' figures:")
for n in sys.argv[1].split(","):
    print("  %s busy: " % n + "; ".join("%s %s" % (v, " ".join("%.3f" % x for x in sec[n + "," + v]))
                                       for v in ("before", "spinning", "default", "threads1") + (("spin",) if spin else ())))
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
