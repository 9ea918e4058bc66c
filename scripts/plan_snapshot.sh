#!/usr/bin/env bash
# The dry-run plan of every preset under a handful of schedules, as `plan` prints it (text and JSON), one file.
# A refactor of the models layer must leave this byte-for-byte the same: run it before and after, then diff.
#   scripts/plan_snapshot.sh [SEGTRAIN] > before.txt
set -euo pipefail
bin=${1:-build/segtrain}
presets=$("$bin" plan --set model_preset=? 2>&1 | sed -n 's/.*(all: \(.*\))$/\1/p' | tr -d ',' || true)
[ -n "$presets" ] || { echo "plan_snapshot: could not list the presets from $bin" >&2; exit 1; }
schedules=(
    ""
    "gradient_checkpointing=true"
    "model_type=lora lora_rank=16 gradient_checkpointing=true gradient_checkpointing_interval=2"
    "model_type=lora lora_rank=16 mixed_precision=bf16 gradient_checkpointing=true gradient_checkpointing_backend=torch-ffn"
    "gradient_checkpointing=true gradient_checkpointing_backend=unsloth gradient_checkpointing_offload_attention=true"
    "gradient_checkpointing=true gradient_checkpointing_interval=2 gradient_checkpointing_segment_stride=3 train_batch_size=2"
)
for p in $presets; do
    for s in "${schedules[@]}"; do
        args=(--set "model_preset=$p")
        for kv in $s; do args+=(--set "$kv"); done
        echo "=== $p $s"
        "$bin" plan "${args[@]}" 2>&1 || echo "(exit $?)"
        "$bin" plan --json --parts "${args[@]}" 2>&1 || echo "(exit $?)"
    done
    echo "=== $p ranks 2 zero 1"
    "$bin" plan --ranks 2 --set "model_preset=$p" --set zero_stage=1 2>&1 || echo "(exit $?)"
done
