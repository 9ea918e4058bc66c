#!/usr/bin/env bash
# What segtrain reads and writes on disk, as an attacker or an unlucky user meets it: FIFOs in place of files, a
# log that cannot be written, two runs on one output_dir, checkpoint metadata out of range, outputs that cannot be
# written. Each case is one clear line and a non-zero exit, under `timeout` so that a hang fails instead of
# blocking the suite. Usage: cli_io_test.sh path/to/segtrain path/to/source
set -u
bin=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
# expect RC DESCRIPTION PATTERN -- COMMAND...: exit code RC and PATTERN somewhere in stdout+stderr, within 20 s
expect() {
  local rc=$1 what=$2 pattern=$3; shift 4
  local out; out=$(timeout 20 "$@" 2>&1); local got=$?
  if [ "$got" -eq "$rc" ] && grep -qE -- "$pattern" <<<"$out"; then ok "$what"; else bad "$what (exit $got): $out"; fi
}

echo '{"model_preset": "dit-tiny", "train_batch_size": 3, "seed": 5}' > tiny.json
"$bin" init --config tiny.json --out w.safetensors >/dev/null
"$bin" batch --config tiny.json --out b.safetensors >/dev/null
tr="--set model_preset=dit-tiny --set in_channels=3 --set vae_scale_factor=1 --set resolution=8 --set num_classes=8
    --set train_batch_size=2 --set max_train_steps=2 --set checkpoint_step_interval=1 --set validation_steps=0"

# FIFOs: open() of one blocks until a writer comes; each reader refuses it at once, naming it
mkfifo fifo.safetensors
expect 1 "grad --weights FIFO" "fifo.safetensors: is a FIFO, not a regular file" -- \
  "$bin" grad --config tiny.json --weights fifo.safetensors --batch b.safetensors --out g.safetensors
expect 1 "grad --batch FIFO" "fifo.safetensors: is a FIFO, not a regular file" -- \
  "$bin" grad --config tiny.json --weights w.safetensors --batch fifo.safetensors --out g.safetensors
expect 1 "sample --weights FIFO" "fifo.safetensors: is a FIFO, not a regular file" -- \
  "$bin" sample --config tiny.json --set in_channels=3 --weights fifo.safetensors --out s.png --steps 1 --per-class 1
mkdir fifo-weights && mkfifo fifo-weights/diffusion_pytorch_model.safetensors
expect 1 "a weights folder whose file is a FIFO" "fifo-weights: a folder without diffusers weights" -- \
  "$bin" grad --config tiny.json --weights fifo-weights --batch b.safetensors --out g.safetensors
expect 1 "resume_from_checkpoint FIFO" "fifo.safetensors: is a FIFO, not a regular file" -- \
  "$bin" train $tr --set output_dir=run-fifo --set resume_from_checkpoint=fifo.safetensors
"$bin" init --config tiny.json --set in_channels=3 --out w3.safetensors >/dev/null
"$bin" sample --config tiny.json --set in_channels=3 --weights w3.safetensors --out s.png --steps 1 --per-class 1 >/dev/null
mkdir -p img && cp s.png img/a.png && mkfifo img/b.png
expect 0 "a .png FIFO in data_dir is skipped, naming it" "data: skipped .*img/b.png: is a FIFO" -- \
  "$bin" train $tr --set output_dir=run-png --set data_dir=img
mkdir -p cap && cp s.png cap/a.png && mkfifo cap/a.txt
expect 1 "a caption FIFO in data_dir is refused" "cap/a.txt: is a FIFO, not a regular file" -- \
  "$bin" train $tr --set output_dir=run-cap --set data_dir=cap
mkfifo backends.json
expect 1 "data_backend_config FIFO" "data_backend_config .*backends.json: is a FIFO" -- \
  "$bin" train $tr --set output_dir=run-db --set data_backend_config=backends.json

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
