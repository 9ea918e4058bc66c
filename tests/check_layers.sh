#!/usr/bin/env bash
# Lower layers never include higher ones (docs/ARCHITECTURE.md). Each public header and each source folder has a
# layer number; a file may include only headers of its own layer or below. A header missing from the table fails
# too, so a new header has to be placed in the stack on purpose. Inside src/models, a topology folder includes only
# models/core and itself.
set -u
cd "$(dirname "$0")/.."

header_layer() {
  case "$1" in
    status.h|checked.h|pool.h|fileio.h|safetensors.h|config.h|rng.h|copy.h) echo 0 ;;
    ops.h|quant.h) echo 1 ;;
    block.h|params.h|lin.h|lycoris.h) echo 2 ;;
    executor.h|plan.h) echo 3 ;;
    model.h|model_run.h) echo 4 ;;
    objective.h|optim.h|data.h|buckets.h|sample.h|train.h|dist.h) echo 5 ;;
    sweep.h|advise.h) echo 6 ;;
    *) echo "" ;;
  esac
}
folder_layer() {
  case "$1" in
    src/core/*|src/io/*|src/config/*) echo 0 ;;
    src/ops/*) echo 1 ;;
    src/blocks/*) echo 2 ;;
    src/ckpt/*) echo 3 ;;
    src/models/*) echo 4 ;;
    src/train/*) echo 5 ;;
    src/sweep/*) echo 6 ;;
    src/cli/*) echo 7 ;;
    include/segtrain/*) header_layer "$(basename "$1")" ;;
    *) echo "" ;;
  esac
}

bad=0 checked=0
while IFS= read -r f; do
  own=$(folder_layer "$f")
  if [ -z "$own" ]; then echo "FAIL $f: not in any layer of tests/check_layers.sh"; bad=$((bad + 1)); continue; fi
  while IFS= read -r inc; do
    h=${inc#segtrain/}
    l=$(header_layer "$h")
    checked=$((checked + 1))
    if [ -z "$l" ]; then echo "FAIL $f includes $inc, which has no layer in tests/check_layers.sh"; bad=$((bad + 1))
    elif [ "$l" -gt "$own" ]; then echo "FAIL $f (layer $own) includes $inc (layer $l)"; bad=$((bad + 1)); fi
  done < <(sed -n 's/^#include "\(segtrain\/[^"]*\)".*/\1/p' "$f")
  if grep -q '^#include "\.\./' "$f"; then echo "FAIL $f includes across folders by relative path"; bad=$((bad + 1)); fi
  # Inside the models layer: a family's topology folder sees the model core and its own folder; the core sees no
  # topology, so that a topology (and a family in it) can be added or removed without touching the others.
  case "$f" in src/models/*/*)
    own_dir=$(basename "$(dirname "$f")")
    while IFS= read -r dir; do
      checked=$((checked + 1))
      if [ "$dir" != core ] && [ "$dir" != "$own_dir" ]; then
        echo "FAIL $f (models/$own_dir) includes a header of models/$dir"; bad=$((bad + 1))
      fi
    done < <(sed -n 's/^#include "models\/\([^/"]*\)\/.*/\1/p' "$f")
    # The glue between ops is ops: a family never asks whether a buffer is dry (the ops do, and host_loop for a
    # family's own loops), so that the dry step runs a family's code as it is.
    checked=$((checked + 1))
    if grep -n 'pool_is_dry_ptr\|op_dry' "$f"; then echo "FAIL $f asks whether a buffer is dry"; bad=$((bad + 1)); fi
  esac
done < <(find src include -name '*.[ch]' -o -name '*.cu' | sort)

echo "$((checked - bad)) passed, $bad failed"
[ "$bad" -eq 0 ]
