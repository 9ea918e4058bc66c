#!/usr/bin/env bash
# The front door as a newcomer meets it: help however it is asked for, advice that pastes, README's caption form,
# and messages that say what the run itself can change. Usage: cli_front_test.sh path/to/segtrain path/to/source
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$(cd "$2" && pwd)
. "$src/tests/clikit.sh"

# ---- help, however it is asked for
expect 0 "segtrain help lists the commands" "^  train " -- "$bin" help
for c in train plan sample sweep advise grad version; do
  a=$("$bin" help "$c" 2>&1) b=$("$bin" "$c" --help 2>&1)
  grep -q "^usage: segtrain" <<<"$a" && [ "$a" = "$b" ] && ok "help $c is $c --help" || bad "help $c: '$a' against '$b'"
done
expect 2 "help of an unknown command" "unknown command 'frobnicate'" -- "$bin" help frobnicate
expect 2 "help takes one command" "takes one command, not 'plan' too" -- "$bin" help train plan
out=$("$bin" train --help)
grep -q "usage: segtrain train \[--config C\]" <<<"$out" && ok "train --help: --config is optional" ||
  bad "train --help says --config is required: $(head -n 1 <<<"$out")"
for k in data_backend_config data_cache_dir data_dir; do
  grep -q "$k" <<<"$out" && ok "train --help names $k" || bad "train --help does not name $k"
done
awk 'length > 120 { exit 1 }' <<<"$out" && ok "train --help fits 120 columns" || bad "train --help has a line over 120"

# ---- advise's answer pastes after any command: the same schedule, no warning
echo '{"model_preset": "dit-tiny", "train_batch_size": 8, "depth": 8, "synthetic_data": true}' > a.json
for budget in 12MiB 11MiB 10.5MiB; do
  out=$("$bin" --threads 1 advise --config a.json --device-memory $budget --steps 1 2>&1)
  opts=$(sed -n 's/^  as options: //p' <<<"$out")
  peak=$(sed -n 's/^advice: .*, peak \([0-9.]* MiB\) (predicted[^)]*)$/\1/p' <<<"$out") # a busy machine adds why the times are suspect
  if [ -z "$opts" ] || [ -z "$peak" ]; then bad "advise $budget: no options or peak line: $out"; continue; fi
  planned=$(eval "\"\$bin\" plan --config a.json $opts" 2>&1)
  if grep -q "predicted peak device memory of a training step $peak" <<<"$planned" && ! grep -q warning <<<"$planned"
  then ok "advise $budget: '$opts' pastes into plan (peak $peak)"
  else bad "advise $budget: plan $opts: $planned"; fi
done

# ---- README's caption list: spaces and quotes around a caption are not part of it
echo '{"model_preset": "mmdit-tiny", "in_channels": 3, "vae_scale_factor": 1, "resolution": 16, "patch_size": 4}' > m.json
"$bin" init --config m.json --out m.safetensors >/dev/null
s=("$bin" --threads 1 sample --config m.json --weights m.safetensors --steps 1 --per-class 1)
"${s[@]}" --out plain.png --prompt 'a red circle|a green square' >/dev/null 2>&1
out=$("${s[@]}" --out quoted.png --prompt ' "a red circle" | "a green square"' 2>&1)
if cmp -s plain.png quoted.png && grep -q '^row 1: "a green square"$' <<<"$out"; then ok "quoted captions caption the same rows"
else bad "quoted captions differ from plain ones: $out"; fi

# ---- a refused peak names only what the config does not already do
echo '{"model_preset": "dit-tiny", "train_batch_size": 2, "output_dir": "o"}' > t.json
expect 1 "the peak hint names checkpointing and LoRA to a run without them" \
  "what lowers it: gradient_checkpointing, gradient_checkpointing_offload_attention, LoRA \(model_type lora\), a smaller train_batch_size or resolution" \
  -- "$bin" train --config t.json --set device_memory=1MiB
expect 1 "the peak hint names only what is left to a run with checkpointing, offload and LoRA" \
  "what lowers it: a smaller resolution; segtrain advise" \
  -- "$bin" train --config t.json --set device_memory=1MiB --set gradient_checkpointing=true \
  --set gradient_checkpointing_offload_attention=true --set model_type=lora --set train_batch_size=1

# ---- LoRA on a freshly initialised model says why grad_norm stays 0
expect 0 "LoRA without base weights says grad_norm stays 0" "grad_norm stays 0 and the adapters learn nothing" \
  -- "$bin" --threads 1 train --config m.json --set model_type=lora --set max_train_steps=1 --set output_dir=l

# ---- make_cache.py without torch: one line that says where the venv comes from
if command -v python3 >/dev/null && ! python3 -c 'import torch' 2>/dev/null; then
  mkdir img
  out=$(python3 "$src/scripts/make_cache.py" --images img --out c 2>&1); rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "scripts/reference-venv.sh" <<<"$out"; then
    ok "make_cache.py without torch: $out"
  else bad "make_cache.py without torch (exit $rc): $out"; fi
fi

finish
