#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine (docs/CUDA.md), in one run of a few minutes:
#
#   scripts/gpu-check.sh --bundle [FILE]              here: build segtrain-cuda and test_cuda_ops in build-gpu and
#                                                     pack them with their libraries (default gpu-bundle/gpu.tar.xz)
#   scripts/gpu-check.sh LOG_DIR [BUILD_DIR|FILE]     on the GPU machine, from the repository root
#
# A GPU machine without OpenBLAS, cJSON and libpng runs the bundle (about 6 MiB: what travels to it is limited, and
# the repository is most of that), unpacked into a temporary folder whose lib/ goes on LD_LIBRARY_PATH. Given a
# folder (default build-gpu) without segtrain-cuda, the script builds there. Each check writes LOG_DIR/<check>.log;
# LOG_DIR/summary.txt has one PASS or FAIL line a check, and the exit status is 1 when any failed.
#
# The checks: the backend is a GPU; every ported op against the CPU (test_cuda_ops); for dit-s2 and flux-tiny,
# gradients bitwise equal across checkpointing schedules, against the CPU backend at 1e-4, and the measured peak
# equal to the predicted one; the same for a LoRA with its frozen base in bf16; a sweep of both; a timed dit-xl2
# step (256 px, batch 32) with its TFLOP/s.
set -uo pipefail

if [ "${1:-}" = "--bundle" ]; then
  bundle=${2:-gpu-bundle/gpu.tar.xz} build=build-gpu
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSEGTRAIN_MPI=OFF -DSEGTRAIN_NATIVE=OFF >/dev/null || exit 1
  cmake --build "$build" -j "$(nproc)" --target segtrain-cuda test_cuda_ops || exit 1
  mkdir -p "$build/lib"
  # the libraries a bare CUDA machine lacks: everything but the C runtime and CUDA's own
  ldd "$build/segtrain-cuda" | awk '$3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda[^/]*|libcublas[^/]*)\.so' |
    xargs -r cp -L -t "$build/lib"
  mkdir -p "$(dirname "$bundle")"
  tar -C "$build" -cJf "$bundle" segtrain-cuda test_cuda_ops lib || exit 1
  du -h "$bundle"
  exit 0
fi

logs=${1:?usage: scripts/gpu-check.sh LOG_DIR [BUILD_DIR|BUNDLE.tar.xz]}
build=${2:-build-gpu}
if [ -f "$build" ]; then # a bundle: tar's xz where it has one, else Python's
  dir=$(mktemp -d)
  tar -C "$dir" -xJf "$build" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$build" "$dir" || exit 1
  build=$dir
fi
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
summary=$logs/summary.txt
: >"$summary"
failed=0
pass() { echo "PASS $*" | tee -a "$summary"; }
fail() { echo "FAIL $*" | tee -a "$summary"; failed=1; }

nvidia-smi >"$logs/nvidia-smi.log" 2>&1 || true
if [ ! -x "$build/segtrain-cuda" ]; then
  { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSEGTRAIN_MPI=OFF &&
    cmake --build "$build" -j "$(nproc)" --target segtrain-cuda test_cuda_ops; } >"$logs/build.log" 2>&1 ||
    { fail "build (build.log)"; cat "$summary"; exit 1; }
fi
[ -d "$build/lib" ] && export LD_LIBRARY_PATH=$(cd "$build/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=$(cd "$build" && pwd)/segtrain-cuda
export OMP_WAIT_POLICY=passive

# 1. the backend is the GPU, not the CPU fallback
"$bin" selfcheck >"$logs/selfcheck.log" 2>&1
if grep -q '^backend  cuda (' "$logs/selfcheck.log"; then pass "selfcheck: $(grep '^backend' "$logs/selfcheck.log")"
else fail "selfcheck: $(grep '^backend' "$logs/selfcheck.log" || echo 'no backend line') (selfcheck.log)"; fi

# 2. every ported op against its CPU definition, and each twice for the same bits
if timeout 300 "$build/test_cuda_ops" >"$logs/ops.log" 2>&1; then pass "ops: $(tail -1 "$logs/ops.log")"
else fail "ops: $(tail -1 "$logs/ops.log") (ops.log)"; fi

# 3. schedules: the same bits on the GPU, the CPU's gradients within 1e-4, the predicted peak measured
compare() { # A B: relative L2 error of every tensor of two safetensors files, the largest printed; 1 above 1e-4
  python3 - "$1" "$2" <<'EOF'
import sys
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert a.keys() == b.keys(), "different tensors"
def rel(x, y):
    x, y = x.astype('f8'), y.astype('f8')
    return float(((x - y) ** 2).sum() ** 0.5 / max((y ** 2).sum() ** 0.5, 1e-30))
worst = max((rel(a[k], b[k]), k) for k in a)
print("largest relative L2 error %.3g (%s) over %d tensors" % (worst[0], worst[1], len(a)))
sys.exit(worst[0] > 1e-4)
EOF
}
schedules=(
  "none:gradient_checkpointing=false"
  "layer:gradient_checkpointing=true"
  "interval2:gradient_checkpointing=true,gradient_checkpointing_interval=2"
  "seg2-stride4:gradient_checkpointing=true,gradient_checkpointing_interval=2,gradient_checkpointing_segment_stride=4"
  "torch-ffn:gradient_checkpointing=true,gradient_checkpointing_backend=torch-ffn"
  "unsloth:gradient_checkpointing=true,gradient_checkpointing_backend=unsloth"
  "offload-attention:gradient_checkpointing=true,gradient_checkpointing_offload_attention=true"
)
for model in dit-s2:4 flux-tiny:2; do
  preset=${model%:*} batch=${model#*:}
  dir=$logs/$preset
  mkdir -p "$dir"
  common=(--set "model_preset=$preset" --set "train_batch_size=$batch" --set device_memory=8GiB
          --set host_memory=4GiB)
  "$bin" init "${common[@]}" --random --out "$dir/w.safetensors" >"$dir/init.log" 2>&1 &&
    "$bin" batch "${common[@]}" --out "$dir/b.safetensors" >>"$dir/init.log" 2>&1 ||
    { fail "$preset: init or batch ($preset/init.log)"; continue; }
  for s in "${schedules[@]}"; do
    name=${s%%:*} sets=()
    IFS=, read -ra kv <<<"${s#*:}"
    for x in "${kv[@]}"; do sets+=(--set "$x"); done
    log=$dir/grad-$name.log
    if ! "$bin" grad "${common[@]}" "${sets[@]}" --weights "$dir/w.safetensors" --batch "$dir/b.safetensors" \
        --out "$dir/g-$name.safetensors" >"$log" 2>&1; then
      fail "$preset $name: grad ($preset/grad-$name.log)"; continue
    fi
    measured=$(sed -n 's/^peak device memory, measured  *//p' "$log")
    predicted=$(sed -n 's/^peak device memory, predicted  *//p' "$log")
    if [ -n "$measured" ] && [ "$measured" = "$predicted" ]; then pass "$preset $name: peak $measured as predicted"
    else fail "$preset $name: peak measured '$measured', predicted '$predicted'"; fi
    grep -q '^device memory in use' "$log" || fail "$preset $name: no cudaMemGetInfo line ($preset/grad-$name.log)"
    if [ "$name" != none ]; then
      if cmp -s "$dir/g-none.safetensors" "$dir/g-$name.safetensors"; then
        pass "$preset $name: gradients bitwise = none"
      else fail "$preset $name: gradients differ from none's"; fi
    fi
  done
  SEGTRAIN_BACKEND=cpu "$bin" grad "${common[@]}" --weights "$dir/w.safetensors" --batch "$dir/b.safetensors" \
    --out "$dir/g-cpu.safetensors" >"$dir/grad-cpu.log" 2>&1
  if r=$(compare "$dir/g-none.safetensors" "$dir/g-cpu.safetensors" 2>&1); then pass "$preset: GPU vs CPU $r"
  else fail "$preset: GPU vs CPU $r"; fi
done

# 4. LoRA with the frozen base in bf16 (mixed_precision bf16): the peak as predicted, the CPU's gradients
dir=$logs/flux-tiny-bf16
mkdir -p "$dir"
lora=(--set model_preset=flux-tiny --set train_batch_size=2 --set model_type=lora --set lora_target=all
      --set mixed_precision=bf16 --set device_memory=8GiB --set host_memory=4GiB)
if "$bin" init "${lora[@]}" --random --out "$dir/w.safetensors" >"$dir/init.log" 2>&1 &&
   "$bin" batch "${lora[@]}" --out "$dir/b.safetensors" >>"$dir/init.log" 2>&1 &&
   "$bin" grad "${lora[@]}" --weights "$dir/w.safetensors" --batch "$dir/b.safetensors" --out "$dir/g.safetensors" \
     >"$dir/grad.log" 2>&1 &&
   SEGTRAIN_BACKEND=cpu "$bin" grad "${lora[@]}" --weights "$dir/w.safetensors" --batch "$dir/b.safetensors" \
     --out "$dir/g-cpu.safetensors" >"$dir/grad-cpu.log" 2>&1; then
  measured=$(sed -n 's/^peak device memory, measured  *//p' "$dir/grad.log")
  predicted=$(sed -n 's/^peak device memory, predicted  *//p' "$dir/grad.log")
  what="flux-tiny LoRA bf16 base"
  if [ -n "$measured" ] && [ "$measured" = "$predicted" ]; then pass "$what: peak $measured as predicted"
  else fail "$what: peak measured '$measured', predicted '$predicted'"; fi
  if r=$(compare "$dir/g.safetensors" "$dir/g-cpu.safetensors" 2>&1); then pass "$what: GPU vs CPU $r"
  else fail "$what: GPU vs CPU $r"; fi
else fail "flux-tiny LoRA bf16 base: a run failed (flux-tiny-bf16/*.log)"; fi

# 5. the sweep users read, of both
for preset in dit-s2 flux-tiny; do
  if timeout 240 "$bin" sweep --set "model_preset=$preset" --set host_memory=4GiB --device-memory 16GiB \
      --warmup 1 --steps 2 --timeout 60 --out "$logs/sweep-$preset" >"$logs/sweep-$preset.log" 2>&1; then
    pass "sweep $preset (sweep-$preset/sweep.md)"
  else fail "sweep $preset (sweep-$preset.log)"; fi
done

# 6. a timed dit-xl2 step: 256 px (a 32 x 32 latent), batch 32; fp32 until bf16 is built (docs/CUDA.md)
if timeout 240 "$bin" profile --set model_preset=dit-xl2 --set train_batch_size=32 --set device_memory=100GiB \
    --warmup 1 --steps 3 >"$logs/dit-xl2.log" 2>&1; then
  pass "dit-xl2 batch 32 step: $(grep -iE 'step|TFLOP|GFLOP' "$logs/dit-xl2.log" | head -3 | tr '\n' ' ')"
else fail "dit-xl2 step (dit-xl2.log)"; fi

echo "H200 dense peaks for the figures above: bf16 989 TFLOP/s, fp32 67 TFLOP/s (NVIDIA's H200 SXM sheet)" \
  | tee -a "$summary"
exit $failed
