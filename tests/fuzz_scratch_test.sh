#!/usr/bin/env bash
# The fuzz targets' scratch files go where fuzz/run.sh says (SEGTRAIN_FUZZ_DIR), so that run.sh can remove them
# after a target that libFuzzer stopped without its atexit handlers; they once went to /dev/shm and stayed there.
# A replay is stopped with SIGKILL while it waits on a FIFO, its scratch folder made by the input before it.
# Usage: fuzz_scratch_test.sh path/to/fuzz_png path/to/source
set -u
target=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/scratch" && mkfifo "$tmp/wait"
SEGTRAIN_FUZZ_DIR=$tmp/scratch OMP_NUM_THREADS=1 "$target" "$src/fuzz/corpus/png/$(ls "$src/fuzz/corpus/png" | head -n 1)" \
  "$tmp/wait" >"$tmp/out" 2>&1 &
pid=$!
for i in $(seq 200); do [ -n "$(ls "$tmp/scratch")" ] && break; sleep 0.05; done
kill -KILL $pid; wait $pid 2>/dev/null
left=$(ls "$tmp/scratch")
if [ -n "$left" ] && [ -d "$tmp/scratch/$left" ]; then
  echo "ok   the killed target's scratch folder is $left, in SEGTRAIN_FUZZ_DIR"
else
  echo "FAIL no scratch folder in SEGTRAIN_FUZZ_DIR after the first input: $(cat "$tmp/out")"
  exit 1
fi
