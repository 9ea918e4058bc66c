#!/usr/bin/env bash
# `make build` configures at every call: a configure that rewrites a generated header (the CUDA build's
# cuda_cpu_names.h, included by every CPU fallback object) recompiles those objects each time. Configures a scratch
# build tree twice and fails if the second configure changed any file the compilers read; where nvcc is absent
# there are no generated headers, and the check still covers whatever configure writes.
# Usage: build_noop_test.sh path/to/source [cmake]
set -u
src=$1 cmake=${2:-cmake}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
configure() { "$cmake" -S "$src" -B "$tmp/b" -DCMAKE_BUILD_TYPE=Release >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }; }
# every file configure writes except CMake's own bookkeeping, which it rewrites by design and no compiler reads
stamps() { (cd "$tmp/b" && find . -type f ! -path './CMakeFiles/*' ! -name CMakeCache.txt ! -name Makefile \
  ! -name '*.cmake' ! -name '*.ninja' ! -name .ninja_log -printf '%p %T@\n' | sort); }
configure
first=$(stamps)
sleep 1.1 # a rewrite within the same second could keep a coarse mtime
configure
second=$(stamps)
if [ "$first" != "$second" ]; then
  echo "FAIL a second configure rewrote files the build reads:"
  diff <(echo "$first") <(echo "$second")
  exit 1
fi
echo "ok   a second configure leaves every generated file alone ($(wc -l <<<"$first") files)"
# and `make build` on a generated folder does not configure it again (cmake --build does when something changed)
if command -v make >/dev/null; then
  recipe=$(make -n -C "$src" build BUILD="$tmp/b" 2>&1)
  if grep -q "cmake -S" <<<"$recipe" || ! grep -q "cmake --build $tmp/b" <<<"$recipe"; then
    echo "FAIL make build configures a generated folder again: $recipe"
    exit 1
  fi
  echo "ok   make build on a generated folder only builds it"
fi
