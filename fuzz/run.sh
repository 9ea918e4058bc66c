#!/usr/bin/env bash
# Runs every libFuzzer target built in BUILD (make fuzz) for SECONDS each, one at a time, on a working copy of its
# committed corpus and reproducers (BUILD/fuzz-work/NAME; the committed corpus is never grown in place). Findings go
# to BUILD/fuzz-findings/NAME/, each target's output to BUILD/fuzz-findings/NAME.log. Exits 1 if any target found
# something: move the reproducer into fuzz/repro/NAME/ once it is fixed.
#   usage: fuzz/run.sh BUILD SECONDS [NAME ...]
set -euo pipefail
build=${1:?usage: fuzz/run.sh BUILD SECONDS [NAME ...]}
seconds=${2:?usage: fuzz/run.sh BUILD SECONDS [NAME ...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for t in "$build"/fuzz_*; do [ -x "$t" ] && names+=("${t##*/fuzz_}"); done
fi
[ ${#names[@]} -gt 0 ] || { echo "fuzz: no fuzz targets in $build (make fuzz builds them)" >&2; exit 1; }

# Inputs larger than the committed seeds need are only slower; -malloc_limit_mb makes one allocation of more than
# 256 MiB a finding (the 64 MiB budgets the targets force are far below it), -rss_limit_mb 1 GiB resident (each
# target peaked at 200-430 MB in 30 s runs under ASan, whose quarantine alone may hold 256 MB).
declare -A max_len=([safetensors]=4096 [batch]=8192 [config]=1024 [png]=2048 [diffusers_config]=4096)
failed=()
scratch=
trap 'rm -rf "$scratch"' EXIT
for name in "${names[@]}"; do
  work=$build/fuzz-work/$name findings=$build/fuzz-findings/$name
  mkdir -p "$work" "$findings"
  cp "$here/corpus/$name"/* "$work"/
  find "$here/repro/$name" -maxdepth 1 -type f ! -name '.*' -exec cp {} "$work"/ \;
  dict=()
  [ -f "$here/$name.dict" ] && dict=(-dict="$here/$name.dict")
  echo "fuzz: $name for ${seconds}s ($(ls "$work" | wc -l) inputs in $work)"
  scratch=$(mktemp -d "$([ -d /dev/shm ] && echo /dev/shm || echo /tmp)/segtrain-fuzz-$name.XXXXXX")
  SEGTRAIN_FUZZ_DIR=$scratch ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_NUM_THREADS=1 \
    "$build/fuzz_$name" -max_total_time="$seconds" -max_len="${max_len[$name]:-4096}" -timeout=60 \
      -rss_limit_mb=1024 -malloc_limit_mb=256 -artifact_prefix="$findings/" "${dict[@]}" "$work" \
      >"$findings.log" 2>&1 &
  pid=$!
  if wait $pid; then
    grep -E "^Done|^#[0-9]+.*DONE" "$findings.log" | tail -1 || true
  else
    echo "fuzz: $name FOUND something: $(ls "$findings" | tr '\n' ' ')(log: $findings.log)"
    grep -E "ERROR|SUMMARY|^fuzz_|runtime error" "$findings.log" | head -5 || true
    failed+=("$name")
  fi
  # A target stopped by libFuzzer (a finding, -rss_limit_mb) exits without its atexit handlers: its scratch files
  # are removed here, and anything else it left in /dev/shm under its pid (clang's OpenMP runtime did) is a finding.
  rm -rf "$scratch"
  left=$(ls /dev/shm 2>/dev/null | grep -E "(^|[^0-9])$pid([^0-9]|$)" || true)
  if [ -n "$left" ]; then
    echo "fuzz: $name left files in /dev/shm: $(echo "$left" | tr '\n' ' ')"
    failed+=("$name")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: findings in: ${failed[*]}" >&2; exit 1; }
