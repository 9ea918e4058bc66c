#!/usr/bin/env bash
# The command-line tool as a user meets it: commands that work, and bad input that gets one clear line and a
# non-zero exit. Usage: cli_test.sh path/to/segtrain path/to/source
set -u
bin=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
# expect RC DESCRIPTION PATTERN -- COMMAND...: exit code RC and PATTERN somewhere in stdout+stderr
expect() {
  local rc=$1 what=$2 pattern=$3; shift 4
  local out; out=$("$@" 2>&1); local got=$?
  if [ "$got" -eq "$rc" ] && grep -qE -- "$pattern" <<<"$out"; then ok "$what"; else bad "$what (exit $got): $out"; fi
}

fix=$src/tests/fixtures
echo '{"--model_preset": "dit-tiny", "train_batch_size": 3, "seed": 5,}' > tiny.json

expect 0 "help lists the commands" "grad" -- "$bin" --help
for c in init batch grad selfcheck version; do expect 0 "$c --help" "usage: segtrain" -- "$bin" "$c" --help; done
expect 0 "version prints the version" "^segtrain [0-9]+\.[0-9]+\.[0-9]+$" -- "$bin" version
expect 2 "version takes no argument" "unexpected argument 'now'" -- "$bin" version now
expect 2 "unknown command" "unknown command" -- "$bin" frobnicate
expect 0 "init writes weights" "wrote" -- "$bin" init --config tiny.json --out w.safetensors
"$bin" init --config tiny.json --out w_again.safetensors >/dev/null
cmp -s w.safetensors w_again.safetensors && ok "the same seed writes the same bytes" || bad "init is not reproducible"
expect 0 "batch writes a batch" "wrote a batch of 3" -- "$bin" batch --config tiny.json --out b.safetensors
expect 0 "grad on fresh weights" "peak device memory" -- "$bin" grad --config tiny.json --weights w.safetensors --batch b.safetensors --out g.safetensors
expect 0 "grad on the PyTorch fixture gives its loss" "^loss 3.390576" -- "$bin" grad --config tiny.json \
  --weights "$fix/dit_tiny_weights.safetensors" --batch "$fix/dit_tiny_batch.safetensors" --out g2.safetensors
expect 0 "--set overrides a key" "wrote a batch of 2" -- "$bin" batch --config tiny.json --set train_batch_size=2 --out b2.safetensors
expect 0 "unused keys are one warning line" "ignoring keys.*lerning_rate \(did you mean learning_rate\?\)" -- \
  "$bin" batch --config <(echo '{"lerning_rate": 1}') --out b3.safetensors

head -c 100000 "$fix/dit_tiny_weights.safetensors" > cut.safetensors
expect 1 "truncated weights: one line naming the file" "cut.safetensors.*truncated" -- "$bin" grad --config tiny.json \
  --weights cut.safetensors --batch b.safetensors --out g3.safetensors
expect 1 "weights of another size" "has shape" -- "$bin" grad --config tiny.json --set hidden_size=32 --set num_heads=2 \
  --weights w.safetensors --batch b.safetensors --out g3.safetensors
expect 1 "missing file" "nope.safetensors.*No such file" -- "$bin" grad --config tiny.json --weights nope.safetensors \
  --batch b.safetensors --out g3.safetensors
[ ! -e g3.safetensors ] && ok "a failed grad writes nothing" || bad "a failed grad wrote g3.safetensors"
expect 1 "unknown checkpointing key is an error" "gradient_checkpointing_intervall" -- "$bin" grad \
  --config <(echo '{"gradient_checkpointing_intervall": 2}') --weights w.safetensors --batch b.safetensors --out g3.safetensors
expect 1 "malformed config: file, line and column" "1:10: malformed JSON" -- "$bin" init --config <(echo '{"seed": }') --out w2.safetensors
expect 1 "sizes that do not fit" "num_heads" -- "$bin" init --config tiny.json --set num_heads=5 --out w2.safetensors
expect 2 "a required flag" "--out is required" -- "$bin" init --config tiny.json
expect 1 "a budget too small is a status" "out of device memory" -- "$bin" grad --config tiny.json --set device_memory=3MiB \
  --weights w.safetensors --batch b.safetensors --out g3.safetensors

# checkpointing: the plan before anything runs, and grad's measured peak next to the predicted one
ck="--set gradient_checkpointing=true --set gradient_checkpointing_interval=2 --set gradient_checkpointing_segment_stride=4"
expect 0 "plan prints segments and kept blocks" "plan blocks: 0-1 ckpt \| 2-3 keep" -- "$bin" plan --config tiny.json $ck
expect 0 "plan prints the predicted peak by tag" "predicted peak device memory.*optimizer.*boundaries" -- "$bin" plan --config tiny.json $ck
expect 0 "plan --json" '"predicted_peak_device_bytes"' -- "$bin" plan --config tiny.json $ck --json
expect 0 "plan says when it fell back" "fell back to single-block segments" -- "$bin" plan --config tiny.json $ck \
  --set capture_hidden_states=1
out=$("$bin" grad --config tiny.json $ck --weights w.safetensors --batch b.safetensors --out g4.safetensors 2>&1)
m=$(sed -n 's/^peak device memory, measured  //p' <<<"$out"); p=$(sed -n 's/^peak device memory, predicted //p' <<<"$out")
[ -n "$m" ] && [ "$m" = "$p" ] && ok "grad: measured peak = predicted ($m)" || bad "grad peaks: $out"
cmp -s g.safetensors g4.safetensors && ok "grad: checkpointed gradients are the same bytes" || bad "checkpointed gradients differ"
expect 1 "stride < interval is refused" "segments would overlap" -- "$bin" plan --config tiny.json \
  --set gradient_checkpointing=true --set gradient_checkpointing_interval=3 --set gradient_checkpointing_segment_stride=2
expect 0 "keys that do nothing get a warning" "do nothing while gradient_checkpointing is false" -- "$bin" plan \
  --config tiny.json --set gradient_checkpointing_interval=2 --set gradient_checkpointing_backend=torch-ffn

# offload: unsloth and attention offload through the tool
un="--set gradient_checkpointing=true --set gradient_checkpointing_backend=unsloth --set gradient_checkpointing_offload_attention=true"
expect 0 "plan shows what goes to the host" "to host memory:.*each way per step" -- "$bin" plan --config tiny.json $un
out=$("$bin" grad --config tiny.json $un --weights w.safetensors --batch b.safetensors --out g5.safetensors 2>&1)
m=$(sed -n 's/^peak host memory,   measured  //p' <<<"$out"); p=$(sed -n 's/^peak host memory,   predicted //p' <<<"$out")
[ -n "$m" ] && [ "$m" = "$p" ] && ok "grad: host peak measured = predicted ($m)" || bad "host peaks: $out"
cmp -s g.safetensors g5.safetensors && ok "grad: offloaded gradients are the same bytes" || bad "offloaded gradients differ"
expect 1 "a host budget too small is its own status" "out of host memory" -- "$bin" grad --config tiny.json $un \
  --set host_memory=1KiB --weights w.safetensors --batch b.safetensors --out g6.safetensors

"$bin" init --config tiny.json --set in_channels=3 --out w3.safetensors >/dev/null; expect 0 "sample writes a grid" "wrote 8 samples to s.png" -- "$bin" sample --config tiny.json --set in_channels=3 --weights w3.safetensors --out s.png --steps 2 --per-class 1
# training: a crash while writing a checkpoint leaves the previous one whole, and the run resumes from it
tr="--set model_preset=dit-tiny --set in_channels=3 --set vae_scale_factor=1 --set resolution=8 --set num_classes=8 --set train_batch_size=4
    --set max_train_steps=4 --set checkpoint_step_interval=2 --set validation_steps=0 --set output_dir=run"
expect 0 "train runs and writes its weights" "trained 4 steps; weights in run/model.safetensors" -- "$bin" train $tr
cp run/model.safetensors straight.safetensors
rm -rf run
"$bin" train $tr --set max_train_steps=2 >/dev/null 2>&1
SEGTRAIN_FAULT=crash-before-rename "$bin" train $tr --set resume_from_checkpoint=latest >/dev/null 2>&1
[ $? -eq 137 ] && ok "a crash in the checkpoint write kills the run" || bad "the fault did not fire"
[ -f run/checkpoint-000002.safetensors ] && [ ! -f run/checkpoint-000004.safetensors ] &&
  ok "the previous checkpoint is intact, the new one absent" || bad "checkpoints after the crash: $(ls run)"
expect 0 "resume after the crash" "resumed from run/checkpoint-000002.safetensors at step 2" -- "$bin" train $tr \
  --set resume_from_checkpoint=latest
cmp -s run/model.safetensors straight.safetensors && ok "the resumed run ends on the straight run's bytes" ||
  bad "resumed weights differ from the straight run"
ls run | grep -q tmp && bad "a temporary file was left behind" || ok "no temporary file is left behind"
expect 1 "the built-in data needs 3 channels" "in_channels" -- "$bin" train --set max_train_steps=1 --set output_dir=run2
expect 0 "train --help teaches" "resume_from_checkpoint" -- "$bin" train --help

# the other families: each sequence's plan and boundaries, captions, refusals
echo "{}" > empty.json
mm="--set model_family=mmdit --set train_batch_size=2 --set gradient_checkpointing=true"
expect 0 "mmdit: the plan of both sequences" "plan transformer_blocks: 0-1 ckpt in segments of 1" -- "$bin" plan --config empty.json $mm
expect 0 "mmdit: a double-stream boundary is both streams" "boundaries of the 2 segments from block 0 to 1: image stream 8.0 KiB \\+ text stream 4.0 KiB each" -- \
  "$bin" plan --config empty.json $mm
expect 0 "mmdit: the single-stream sequence too" "plan single_transformer_blocks: 0-1 ckpt" -- "$bin" plan --config empty.json $mm
expect 1 "a preset of another family" "mmdit-tiny belongs to the mmdit family, but model_family is dit" -- "$bin" plan \
  --config empty.json --set model_family=dit --set model_preset=mmdit-tiny
"$bin" init --config empty.json $mm --set in_channels=3 --out wm.safetensors >/dev/null
expect 0 "mmdit: sample one row per caption" 'row 1: "a blue triangle"' -- "$bin" sample --config empty.json $mm \
  --set in_channels=3 --weights wm.safetensors --out sm.png --steps 1 --per-class 1 --prompt "a red circle|a blue triangle"
expect 2 "sample: --prompt on a labelled family" "conditioned on class labels \\(use --classes\\)" -- "$bin" sample \
  --config empty.json --weights w3.safetensors --out never.png --prompt "a red circle"
sk="--set model_family=skipdit --set train_batch_size=2 --set gradient_checkpointing=true --set gradient_checkpointing_interval=2"
expect 0 "skipdit: a boundary holds the live skips once" "boundary of blocks 2-3: stream .*also block 1's skip.* \\+ skip of block 0" -- \
  "$bin" plan --config empty.json $sk
expect 1 "skipdit refuses unsloth" "share skip tensors" -- "$bin" plan --config empty.json $sk \
  --set gradient_checkpointing_backend=unsloth

# the advisor: a budget between layer's and none's peaks on a small model
out=$("$bin" advise --config tiny.json --set train_batch_size=8 --device-memory 6.5MiB --verify 2>&1)
grep -q "fastest that fits:.*fits" <<<"$out" && ok "advise finds a schedule that fits" || bad "advise: $out"
grep -q "peak      measured .*(+0.00%)" <<<"$out" && ok "advise --verify: the measured peak is the predicted one" ||
  bad "advise --verify: $out"
grep -q "^  -> " <<<"$out" && ok "advise walks the decision rule" || bad "advise rule: $out"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
