#!/usr/bin/env bash
# segtrain vs the PyTorch reference (bench/pytorch_dit.py), dit-s2, batch 8, fp32, AdamW, side by side in one run.
#
# Builds nothing: needs build/segtrain (make build) and /usr/bin/python3 with torch (apt-get install python3-torch),
# or the Python given by --python (PyPI's torch in the reference venv: scripts/reference-venv.sh) for PyTorch's side.
# --batch B and --grid G (the latent grid's side: 32 is dit-s2's 256 tokens, 64 is 1024, 128 is 4096) set both
# sides' shape; --attention sdpa gives PyTorch F.scaled_dot_product_attention (torch 2) instead of the math form.
# --variant NAME:ROW:key=value,key=value adds a row NAME (no ':' or ',' in it) where segtrain runs the schedule the
# keys give (a custom sweep row) and PyTorch runs its standard ROW: a segtrain-only option against what PyTorch has,
# in the same run as the rest.
# For every row, segtrain's cell (`segtrain sweep --modes ROW` on {"model_preset": "dit-s2", "train_batch_size": 8},
# a fresh process) and PyTorch's (`bench/pytorch_dit.py --modes ROW --json`, a fresh process, OMP_WAIT_POLICY=passive
# as in issue 9's reference numbers) run one after the other; which one goes first alternates from row to row, so
# that drift of this shared machine hits both. segtrain runs with the environment as it is.
#
# With --lockstep, each row instead starts both sides once (build/bench_step and pytorch_dit.py --lockstep, each a
# step server) and alternates them step by step, which side goes first alternating from pair to pair: both sides'
# steps are then taken in the same seconds, and a change of the machine's speed between cells cannot favour either.
# Every measured pair is one sample; the table gives each side's median over them and the range of the per-pair
# speed-ups. --rounds R repeats that R times with fresh processes and pools the pairs.
#
# Besides the table it prints: the sgemm ceiling of `segtrain selfcheck`; the dit-s2 forward FLOPs counted from the
# spec's shapes (2*M*N*K for every linear, the patch-embed convolution and the two attention matmuls; issue 9 says
# 96.9 GFLOP at batch 8) and segtrain's `none` rate, a step counted as 3x the forward; and what each side keeps for
# backward at `none`: PyTorch's bytes saved by autograd (saved_tensors_hooks, by storage, parameters excluded) next
# to segtrain's plan (predicted_peak_device_bytes.activations, and the kept bytes of the blocks plus the sequence's
# state). segtrain's attention is whatever the config says (its default is flash, which keeps no T x T
# probabilities); PyTorch's is the math form, which keeps them. `--set attention_mechanism=math` compares like with like.
set -euo pipefail

usage() {
    echo "usage: bench/compare.sh [--modes LIST] [--rounds R] [--lockstep] [--warmup W] [--steps N] [--threads T] [--set key=value]..." >&2
    echo "  defaults: all nine standard rows, --rounds 1 --warmup 1 --steps 3 --threads 2; --set goes to segtrain's config" >&2
    echo "  --rounds R runs every row R times, round after round, and reports each side's median over the rounds" >&2
    echo "  --lockstep alternates the two sides step by step within each row (needs build/bench_step)" >&2
    echo "  --batch B (default 8), --grid G (latent side, default 32)," >&2
    echo "  --attention math|sdpa (PyTorch's, default math)," >&2
    echo "  --python PATH (PyTorch's interpreter, default /usr/bin/python3)" >&2
    echo "  --variant NAME:ROW:key=value,... a row NAME: segtrain with those keys against PyTorch's ROW" >&2
    echo "    (repeatable)" >&2
}

MODES="none,layer,interval2,seg2-stride4,torch-ffn,unsloth,unsloth-ffn,activation-offload,seg2-stride4-offload"
ROUNDS=1
WARMUP=1
STEPS=3
THREADS=2
SETS=()
LOCKSTEP=0
BATCH=8
GRID=32
ATTN=math
TORCHPY=/usr/bin/python3
VARIANTS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --modes) MODES="${2:?}"; shift 2 ;;
        --rounds) ROUNDS="${2:?}"; shift 2 ;;
        --warmup) WARMUP="${2:?}"; shift 2 ;;
        --steps) STEPS="${2:?}"; shift 2 ;;
        --threads) THREADS="${2:?}"; shift 2 ;;
        --set) SETS+=(--set "${2:?}"); shift 2 ;;
        --lockstep) LOCKSTEP=1; shift ;;
        --batch) BATCH="${2:?}"; shift 2 ;;
        --grid) GRID="${2:?}"; shift 2 ;;
        --attention) ATTN="${2:?}"; shift 2 ;;
        --python) TORCHPY="${2:?}"; shift 2 ;;
        --variant) VARIANTS+=("${2:?}"); shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "compare.sh: unknown argument '$1'" >&2; usage; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
SEG=build/segtrain
PY=/usr/bin/python3
[ -x "$SEG" ] || { echo "compare.sh: $SEG not found: build segtrain first (make build)" >&2; exit 1; }
"$TORCHPY" -c 'import torch' 2>/dev/null ||
    { echo "compare.sh: $TORCHPY cannot import torch (apt-get install python3-torch, or --python a venv's)" >&2; exit 1; }
case "$BATCH$GRID" in *[!0-9]*) echo "compare.sh: --batch and --grid take whole numbers" >&2; exit 2 ;; esac
[ "$ATTN" = math ] || [ "$ATTN" = sdpa ] || { echo "compare.sh: --attention math or sdpa" >&2; exit 2; }

TMP=$(mktemp -d /tmp/segtrain-compare.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
cp "$SEG" "$TMP/segtrain"    # one binary for the whole run, even if build/ is rebuilt meanwhile
SEG=$TMP/segtrain
if [ "$LOCKSTEP" = 1 ]; then
    [ -x build/bench_step ] || { echo "compare.sh: build/bench_step not found: build it first (make build)" >&2; exit 1; }
    cp build/bench_step "$TMP/bench_step"
fi
CFG=$TMP/s2b.json
echo "{\"model_preset\": \"dit-s2\", \"train_batch_size\": $BATCH, \"resolution\": $((GRID * 8))}" > "$CFG"

fail() { echo "compare.sh: $1 failed; its output:" >&2; cat "$2" >&2; exit 1; }

# ---- sgemm ceiling and segtrain's plan at none
"$SEG" --threads "$THREADS" selfcheck > "$TMP/selfcheck.txt" 2>&1 || fail "segtrain selfcheck" "$TMP/selfcheck.txt"
GEMM=$(grep -m1 '^gemm' "$TMP/selfcheck.txt" || true)
"$SEG" plan --config "$CFG" ${SETS[@]+"${SETS[@]}"} --json > "$TMP/plan.json" 2> "$TMP/plan.err" || fail "segtrain plan" "$TMP/plan.err"

# ---- the rows, alternating which side runs first
run_seg() {  # row segtrain-mode -> seconds
    local row=$1 out=$TMP/seg-$1
    "$SEG" --threads "$THREADS" sweep --config "$CFG" ${SETS[@]+"${SETS[@]}"} --modes "$2" \
        --warmup "$WARMUP" --steps "$STEPS" --out "$out" > "$TMP/seg-$row.log" 2>&1 || fail "segtrain sweep $row" "$TMP/seg-$row.log"
    "$PY" - "$out/sweep.json" "$row" <<'EOF' || fail "reading segtrain's sweep.json for $row" "$TMP/seg-$row.log"
import json, sys
cells = [c for c in json.load(open(sys.argv[1]))["cells"] if c["mode"] == sys.argv[2]]
if len(cells) != 1 or cells[0]["status"] != "ok" or cells[0]["sec_per_step_median"] is None:
    sys.exit("segtrain cell not ok: %s" % (cells[0] if cells else "missing"))
print(repr(cells[0]["sec_per_step_median"]))
EOF
}
run_torch() {  # row pytorch-row -> JSON line
    local row=$1
    OMP_WAIT_POLICY=passive "$TORCHPY" bench/pytorch_dit.py --modes "$2" --warmup "$WARMUP" --steps "$STEPS" \
        --threads "$THREADS" --batch "$BATCH" --input-size "$GRID" --attention "$ATTN" --json \
        > "$TMP/torch-$row.log" 2>&1 || fail "pytorch_dit.py $row" "$TMP/torch-$row.log"
    grep '^{' "$TMP/torch-$row.log" | tail -n 1 | grep . || fail "pytorch_dit.py $row (no JSON line)" "$TMP/torch-$row.log"
}

# lockstep: both sides as step servers, alternated step by step; one line in rows.tsv per measured pair
run_lockstep() {  # row round segtrain-mode pytorch-row
    "$PY" - "$1" "$2" "$WARMUP" "$STEPS" "$TMP/bench_step" "$CFG" "$THREADS" "$TMP/rows.tsv" "$TORCHPY" "$BATCH" \
        "$GRID" "$ATTN" "$3" "$4" ${SETS[@]+"${SETS[@]}"} \
        <<'EOF' || { echo "compare.sh: lockstep $1 failed (its errors above)" >&2; exit 1; }
import json, os, subprocess, sys
row, rnd, warmup, steps, step_bin, cfg, threads, tsv, torchpy, batch, grid, attn, seg_mode, torch_row = sys.argv[1:15]
rnd, warmup, steps = int(rnd), int(warmup), int(steps)
seg = subprocess.Popen([step_bin, "--mode", seg_mode, "--config", cfg, "--threads", threads] + sys.argv[15:],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
torch = subprocess.Popen([torchpy, "bench/pytorch_dit.py", "--modes", torch_row, "--warmup", str(warmup),
                          "--steps", str(steps), "--threads", threads, "--batch", batch, "--input-size", grid,
                          "--attention", attn, "--json", "--lockstep"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, OMP_WAIT_POLICY="passive"))

def until(p, word):  # the rest of the first line that starts with word
    for line in p.stdout:
        if line.startswith(word):
            return line[len(word):].strip()
    sys.exit("%s ended before '%s' (%s)" % ("bench_step" if p is seg else "pytorch_dit.py", word.strip(), row))

def step(p):
    p.stdin.write("\n")
    p.stdin.flush()
    return float(until(p, "step "))

until(seg, "ready ")
until(torch, "ready ")
pairs = []
for i in range(warmup + steps):
    if (i + rnd) % 2 == 0:
        s = step(seg); t = step(torch)
    else:
        t = step(torch); s = step(seg)
    print("  round %d, %s, %s %d: segtrain %.3f s, PyTorch %.3f s, %.2fx"
          % (rnd + 1, row, "warm-up" if i < warmup else "pair", i + 1 - (0 if i < warmup else warmup), s, t, t / s),
          file=sys.stderr, flush=True)
    if i >= warmup:
        pairs.append((s, t))
for p in (seg, torch):
    p.stdin.close()
info = json.loads([l for l in torch.stdout if l.startswith("{")][-1])
if seg.wait() or torch.wait():
    sys.exit("a step server failed (%s)" % row)
with open(tsv, "a") as f:
    for s, t in pairs:
        f.write("%s\t%r\t%s\n" % (row, s, json.dumps(dict(info, sec_per_step_median=t))))
EOF
}

IFS=, read -r -a ROWS <<< "$MODES"
SEGMODES=("${ROWS[@]}")
TORCHROWS=("${ROWS[@]}")
for v in ${VARIANTS[@]+"${VARIANTS[@]}"}; do  # NAME:ROW:key=value,...
    name=${v%%:*} rest=${v#*:}
    [ "$name" != "$v" ] && [ "${rest%%:*}" != "$rest" ] && [ -n "$name" ] && [ "${name//,/}" = "$name" ] ||
        { echo "compare.sh: --variant '$v': want NAME:ROW:key=value,key=value" >&2; exit 2; }
    ROWS+=("$name") SEGMODES+=("$name:${rest#*:}") TORCHROWS+=("${rest%%:*}")
done
: > "$TMP/rows.tsv"
n=0
for round in $(seq "$ROUNDS"); do
    for r in "${!ROWS[@]}"; do
        row=${ROWS[$r]}
        if [ "$LOCKSTEP" = 1 ]; then
            run_lockstep "$row" $((round - 1)) "${SEGMODES[$r]}" "${TORCHROWS[$r]}"
            continue
        fi
        if [ $((n % 2)) -eq 0 ]; then
            s=$(run_seg "$row" "${SEGMODES[$r]}"); t=$(run_torch "$row" "${TORCHROWS[$r]}")
        else
            t=$(run_torch "$row" "${TORCHROWS[$r]}"); s=$(run_seg "$row" "${SEGMODES[$r]}")
        fi
        printf '%s\t%s\t%s\n' "$row" "$s" "$t" >> "$TMP/rows.tsv"
        echo "  round $round, $row: segtrain $("$PY" -c "print(\"%.3f\" % $s)") s/step, PyTorch $(echo "$t" | "$PY" -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["sec_per_step_median"])') s/step" >&2
        n=$((n + 1))
    done
    [ $((${#ROWS[@]} % 2)) -eq 0 ] && n=$((n + 1))   # each round starts with the other side
done

# ---- report
"$PY" - "$TMP/rows.tsv" "$TMP/plan.json" "$GEMM" "$WARMUP" "$STEPS" "$THREADS" "${SETS[*]+${SETS[*]}}" "$LOCKSTEP" \
    "$ROUNDS" "$BATCH" "$GRID" "$ATTN" <<'EOF'
import json, sys
rows_path, plan_path, gemm, warmup, steps, threads, sets, lockstep, n_rounds, batch, grid, attn = sys.argv[1:13]
lockstep = lockstep == "1"

# dit-s2 forward FLOPs, from the spec's shapes (2*M*N*K per matmul)
B, L, D, C, P, S, FREQ = int(batch), 12, 384, 4, 2, int(grid), 256
T = (S // P) ** 2
lin = lambda m, n, k: 2 * m * n * k
per_block = (lin(B * T, 3 * D, D)              # attn.qkv
             + 2 * lin(B * T, T, D)            # q k^T and p v, all heads (B*NH*T*T*hd each)
             + lin(B * T, D, D)                # attn.proj
             + lin(B * T, 4 * D, D) + lin(B * T, D, 4 * D)   # mlp.fc1, mlp.fc2
             + lin(B, 6 * D, D))               # adaLN_modulation (per sample, not per token)
embed = lin(B * T, D, C * P * P) + lin(B, D, FREQ) + lin(B, D, D)   # patch conv, t_embedder
final = lin(B, 2 * D, D) + lin(B * T, P * P * C, D)
fwd = L * per_block + embed + final
blocks_only = L * (per_block - lin(B, 6 * D, D))

import statistics
cells = {}
for l in open(rows_path):
    if l.strip():
        mode, s, t = l.rstrip("\n").split("\t")
        cells.setdefault(mode, []).append((float(s), json.loads(t)))
rounds = len(next(iter(cells.values())))
med = lambda v: statistics.median(v)
rows = []  # (mode, segtrain median, PyTorch median, a PyTorch JSON line, per-round ratios)
for mode, cs in cells.items():
    ratios = [t["sec_per_step_median"] / s for s, t in cs]
    rows.append((mode, med([s for s, _ in cs]), med([t["sec_per_step_median"] for _, t in cs]), cs[0][1], ratios))
plan = json.load(open(plan_path))
print("# segtrain vs PyTorch: dit-s2, batch %d, %d tokens, fp32, AdamW" % (B, T))
print()
if lockstep:
    print("Lockstep: per row both sides started once (%s round%s, fresh processes each), %s warm-up + %s measured steps"
          " each, alternated step by step, %s threads; segtrain's environment as is%s,"
          % (n_rounds, "" if n_rounds == "1" else "s", warmup, steps, threads, (", segtrain " + sets) if sets else ""))
    print("PyTorch %s with OMP_WAIT_POLICY=passive and %s attention. Cells: each side's median seconds per optimizer"
          " step over the %d measured pairs, and the range of the per-pair speed-ups." % (rows[0][3]["torch"], attn,
                                                                                          rounds))
else:
    print("%s warm-up + %s measured steps per cell, each cell a fresh process, %s threads; segtrain's environment as"
          " is%s," % (warmup, steps, threads, (", segtrain " + sets) if sets else ""))
    print("PyTorch %s with OMP_WAIT_POLICY=passive and %s attention. Cells: median seconds per optimizer step%s."
          % (rows[0][3]["torch"], attn, "" if rounds == 1 else
             "; %d rounds, each side's median over them, and the range of the per-round speed-ups" % rounds))
print()
if rounds == 1:
    print("| mode | segtrain s/step | PyTorch s/step | speed-up (PyTorch/segtrain) |")
    print("|---|---|---|---|")
else:
    print("| mode | segtrain s/step | PyTorch s/step | speed-up (PyTorch/segtrain) | per %s |"
          % ("pair" if lockstep else "round"))
    print("|---|---|---|---|---|")
none = None
for mode, s, ts, tj, ratios in rows:
    spread = "" if rounds == 1 else " %.2f-%.2fx |" % (min(ratios), max(ratios))
    print("| %s | %.3f | %.3f | %.2fx |%s" % (mode, s, ts, ts / s, spread))
    if mode == "none":
        none = (s, dict(tj, sec_per_step_median=ts))
print()
print("rows at 1.4x or more (medians): %d of %d" % (sum(ts / s >= 1.4 for _, s, ts, _, _ in rows), len(rows)))
print()
print("sgemm ceiling (segtrain selfcheck): %s" % (gemm or "no gemm line in selfcheck's output"))
print("dit-s2 forward at batch %d, %d tokens: %.2f GFLOP counted from the spec's shapes (%.2f in the blocks' qkv,"
      " attention, proj and MLP alone; issue 9 says 96.9 GFLOP at batch 8, 256 tokens)"
      % (B, T, fwd * 1e-9, blocks_only * 1e-9))
if none:
    s, tj = none
    print("none, a step counted as 3 x forward = %.1f GFLOP: segtrain %.1f GFLOP/s, PyTorch %.1f GFLOP/s"
          % (3 * fwd * 1e-9, 3 * fwd / s * 1e-9, 3 * fwd / tj["sec_per_step_median"] * 1e-9))
    act = plan["predicted_peak_device_bytes"]["activations"]
    kept = sum(sum(q["kept_bytes"]) + q["state_bytes"] for q in plan["sequences"])
    print("kept for backward at none: PyTorch %.1f MiB (autograd's saved tensors of one forward + loss, by storage,"
          " parameters excluded; + %.1f MiB of parameters); segtrain %.1f MiB (plan: predicted_peak_device_bytes."
          "activations, everything the step holds for backward; of which %.1f MiB = the blocks' kept_bytes + state_bytes)"
          % (tj["saved_bytes"] / 2**20, tj["saved_param_bytes"] / 2**20, act / 2**20, kept / 2**20))
EOF
