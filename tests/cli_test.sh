#!/usr/bin/env bash
# The command-line tool as a user meets it: commands that work, and bad input that gets one clear line and a
# non-zero exit. Usage: cli_test.sh path/to/segtrain path/to/source
bin=$1 src=$2
. "$src/tests/clikit.sh"
# trains_one_step DESCRIPTION OUT -- SETTINGS...: one synthetic step trains and writes its weights to OUT-out
trains_one_step() {
  local what=$1 out=$2; shift 3
  expect 0 "$what" "trained 1 steps; weights in $out-out/model.safetensors" -- "$bin" train --config empty.json "$@" \
    --set synthetic_data=true --set max_train_steps=1 --set output_dir="$out-out"
}

fix=$src/tests/fixtures
echo '{"--model_preset": "dit-tiny", "train_batch_size": 3, "seed": 5,}' > tiny.json

expect 0 "help lists the commands" "grad" -- "$bin" --help
for c in init batch grad selfcheck version; do expect 0 "$c --help" "usage: segtrain" -- "$bin" "$c" --help; done
# selfcheck names kernels that suit the CPU better than the ones OpenBLAS was told to load, and only then
avx512=yes
for f in avx512f avx512cd avx512bw avx512dq avx512vl; do grep -qw "$f" /proc/cpuinfo || avx512=no; done
note=$(OPENBLAS_CORETYPE=Haswell "$bin" selfcheck 2>&1 | grep '^note')
if { [ $avx512 = yes ] && grep -q "holds OpenBLAS to older kernels than this CPU takes (SkylakeX" <<<"$note"; } ||
  { [ $avx512 = no ] && [ -z "$note" ]; }; then ok "selfcheck: AVX-512 $avx512, Haswell kernels: '$note'"
else bad "selfcheck: AVX-512 $avx512, Haswell kernels, but: '$note'"; fi
if [ $avx512 = yes ]; then
  note=$(OPENBLAS_CORETYPE=SkylakeX "$bin" selfcheck 2>&1 | grep '^note')
  [ -z "$note" ] && ok "selfcheck: no note with the SkylakeX kernels" || bad "selfcheck, SkylakeX kernels: '$note'"
fi
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
expect 0 "unused keys are one warning line" "ignoring keys.*lerning_rte \(did you mean learning_rate\?\)" -- \
  "$bin" batch --config <(echo '{"lerning_rte": 1}') --out b3.safetensors

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
# training: a crash while writing a checkpoint leaves the previous one whole, and the run resumes from it. The
# thread count is fixed: a GEMM's bits follow it (docs/ARCHITECTURE.md), and with none given each process takes its
# own from the load, so a resumed run and its straight twin could differ under a busy ctest -j
tr="--set num_threads=2 --set model_preset=dit-tiny --set in_channels=3 --set vae_scale_factor=1 --set resolution=8 --set num_classes=8 --set train_batch_size=4
    --set max_train_steps=4 --set checkpoint_step_interval=2 --set validation_steps=0 --set output_dir=run"
expect 0 "train runs and writes its weights" "trained 4 steps; weights in run/model.safetensors" -- "$bin" train $tr
expect 0 "validation_resolution samples a grid at each size, SimpleTuner's WxH list or an edge" \
  "sampled val/validation/step-000002-\\{12x8,16x16\\}.png" -- "$bin" train $tr --set max_train_steps=2 \
  --set output_dir=val --set validation_steps=2 --set validation_num_inference_steps=1 \
  --set validation_samples_per_class=1 --set validation_resolution=12x8,16
[ -f val/validation/step-000002-12x8.png ] && [ -f val/validation/step-000002-16x16.png ] &&
  [ "$(od -An -tu1 -j16 -N8 val/validation/step-000002-12x8.png | tr -s ' ')" = " 0 0 0 12 0 0 0 78" ] &&
  ok "... each grid at its size (12 wide, 8 rows of 8 high)" || bad "validation grids: $(ls -R val/validation)"
expect 1 "a validation_resolution that is not a size is refused by name" "validation_resolution: \"12by8\" is not a shape" \
  -- "$bin" train $tr --set output_dir=valbad --set validation_steps=2 --set validation_resolution=12by8
[ ! -e valbad ] && ok "... before the first step: no output folder" || bad "a bad validation_resolution trained: $(ls valbad)"
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
# an interrupt lets the step under way finish and writes its checkpoint, whatever the interval (0: none); the run
# resumed from it ends on a straight run's bytes (a constant learning rate: the totals differ)
long="$tr --set lr_scheduler=constant --set checkpoint_step_interval=0"
for sig in INT TERM; do
  rm -rf intr
  "$bin" train $long --set max_train_steps=1000000 --set output_dir=intr >intr.out 2>&1 & pid=$!
  for i in $(seq 600); do [ -s intr/train_log.jsonl ] && break; sleep 0.05; done
  kill -$sig $pid; wait $pid; rc=$?
  n=$(wc -l <intr/train_log.jsonl)
  ck=$(printf 'intr/checkpoint-%06d.safetensors' "$n")
  [ $rc -eq $((128 + $(kill -l $sig))) ] && [ -f "$ck" ] && [ "$(ls intr | wc -l)" -eq 2 ] &&
    grep -q "stopped by SIG$sig after step $n of 1000000: $ck holds it" intr.out &&
    ok "SIG$sig: step $n finishes, its checkpoint is written, exit $rc" ||
    bad "SIG$sig (exit $rc): $(tail -n 2 intr.out)"
done
long="$long --set max_train_steps=$((n + 2))"
"$bin" train $long --set output_dir=intr --set resume_from_checkpoint=latest >/dev/null 2>&1
"$bin" train $long --set output_dir=straight >/dev/null 2>&1
cmp -s intr/model.safetensors straight/model.safetensors &&
  ok "the interrupted run resumed ends on the straight run's bytes" ||
  bad "the interrupted run resumed differs from the straight run"
# a checkpoint records its run's thread count, and a resume given none takes it back, so that the run goes on at
# the bits it started with: here an affinity of one core, which segtrain would otherwise take, resumes at two
if [ "$(nproc)" -ge 2 ]; then
  thr="${tr/--set num_threads=2 /}"
  "$bin" --threads 2 train $thr --set output_dir=thr-straight >/dev/null 2>&1
  "$bin" --threads 2 train $thr --set max_train_steps=2 --set output_dir=thr >/dev/null 2>&1
  expect 0 "a resume given no thread count takes its checkpoint's" "it goes on at 2 threads, as the run that wrote it" \
    -- taskset -c 0 "$bin" train $thr --set output_dir=thr --set resume_from_checkpoint=latest
  cmp -s thr/model.safetensors thr-straight/model.safetensors &&
    ok "... and ends on the straight run's bytes" || bad "the resume at the checkpoint's threads differs from the straight run"
  "$bin" --threads 2 train $thr --set max_train_steps=2 --set output_dir=thr1 >/dev/null 2>&1
  expect 0 "a resume given another thread count says its numbers leave the unbroken run's" \
    "was written at 2 threads; num_threads is 1: the run goes on at 1, and its numbers are no longer bitwise" \
    -- "$bin" train $thr --set num_threads=1 --set output_dir=thr1 --set resume_from_checkpoint=latest
fi
# use_ema with LoRA: the average of the adapters goes to ema/ under PEFT's names; at ema_decay 0 it is the last ones
expect 0 "use_ema with LoRA trains" "trained 3 steps" -- "$bin" train $tr --set model_type=lora --set use_ema=true \
  --set ema_decay=0 --set max_train_steps=3 --set output_dir=emal
cmp -s emal/pytorch_lora_weights.safetensors emal/ema/pytorch_lora_weights.safetensors &&
  ok "ema/pytorch_lora_weights.safetensors at ema_decay 0 is the final adapters' file" ||
  bad "ema/: $(ls emal emal/ema 2>&1 | tr '\n' ' ')"
# num_train_epochs when max_train_steps is 0 or not given, as SimpleTuner counts it: 30 samples in global batches of
# 4 are 8 batches an epoch, 4 steps with 2 accumulated; both given, both 0, or epochs without a dataset are refused
ep="$tr --set builtin_dataset_size=30 --set checkpoint_step_interval=0 --set output_dir=ep"
expect 0 "2 epochs of 30 samples in batches of 4 are 16 steps" \
  "num_train_epochs 2: 16 steps, 8 an epoch \(30 samples, a global batch of 4, 1 accumulated\)" -- \
  "$bin" train $ep --set max_train_steps=0 --set num_train_epochs=2
[ "$(grep -c . ep/train_log.jsonl)" -eq 16 ] && ok "... and the log has 16 steps" ||
  bad "epochs: $(grep -c . ep/train_log.jsonl) steps logged"
expect 0 "1.5 epochs with 2 accumulated: 6 steps" "num_train_epochs 1.5: 6 steps, 4 an epoch" -- \
  "$bin" train $ep --set max_train_steps=0 --set num_train_epochs=1.5 --set gradient_accumulation_steps=2
expect 1 "steps and epochs both given are refused" "max_train_steps 4 and num_train_epochs 2 are both set" -- \
  "$bin" train $ep --set num_train_epochs=2
expect 1 "steps and epochs both 0 are refused" "max_train_steps and num_train_epochs are both 0" -- \
  "$bin" train $ep --set max_train_steps=0
expect 1 "epochs of synthetic data are refused" "synthetic_data has no dataset to pass over" -- \
  "$bin" train $ep --set max_train_steps=0 --set num_train_epochs=1 --set synthetic_data=true
expect 1 "the built-in data needs 3 channels" "in_channels" -- "$bin" train --set max_train_steps=1 --set output_dir=run2
expect 0 "train --help teaches" "resume_from_checkpoint" -- "$bin" train --help

# data backends: a SimpleTuner multidatabackend.json of local PNG folders (the images: sample's grid, copied)
mkdir -p pets/cats photos
cp s.png pets/red_fox.png; cp s.png pets/cats/blue_cat.png; cp s.png photos/one.png; echo "a photo" > photos/one.txt
cat > backends.json <<'EOF'
[{"id": "pets", "type": "local", "instance_data_dir": "pets", "caption_strategy": "filename", "crop": true,
  "crop_style": "random", "resolution": 16, "resolution_type": "pixel", "repeats": 1, "minimum_image_size": 8},
 {"id": "photos", "instance_data_dir": "photos", "caption_strategy": "textfile", "resolution": 0.001,
  "resolution_type": "area"},
 {"id": "hub", "type": "huggingface", "dataset_name": "someone/images", "disabled": true},
 {"id": "text-cache", "type": "local", "dataset_type": "text_embeds", "default": true, "cache_dir": "cache/text"}]
EOF
db="--set model_preset=dit-tiny --set in_channels=3 --set vae_scale_factor=1 --set resolution=8 --set train_batch_size=2
    --set max_train_steps=2 --set validation_steps=0 --set output_dir=runb --set aspect_bucket_alignment=8"
out=$("$bin" train $db --set data_backend_config=backends.json 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "trained 2 steps" <<<"$out" &&
  grep -q "backend 'pets': 2 images in $tmp/pets in 1 aspect bucket (resolution 16 pixel, .*), 2 samples each" <<<"$out" &&
  grep -q "backend 'pets': bucket 1.0 (16x16): 2 images" <<<"$out" &&
  grep -q "backend 'photos': 1 images.*resolution 0.001 area.*captions by textfile" <<<"$out" &&
  grep -q "backend 'hub': disabled" <<<"$out" && grep -q "backend 'text-cache': text_embeds cache, not needed" <<<"$out" &&
  ! grep -q "ignoring keys" <<<"$out" && grep -q "^bucket 16x16 .*predicted peak" <<<"$out" &&
  ok "train reads a multidatabackend.json in its aspect buckets" || bad "train on backends (exit $rc): $out"
grep -q "built-in" <<<"$out" && bad "train on backends mentions the built-in data" || ok "train on backends: no built-in data"
first=$("$bin" train $db --set output_dir=runc 2>&1 | head -n 1)
grep -q "^segtrain: training on the built-in dataset.*data_backend_config" <<<"$first" &&
  ok "without data, the first line says the built-in dataset" || bad "first line without data: $first"
sed 's/"disabled": true/"disabled": false/' backends.json > hub.json
expect 1 "a hub backend is refused in one line" "hub.json: backend 'hub': type huggingface; segtrain reads local image folders" -- \
  "$bin" train $db --set data_backend_config=hub.json
expect 1 "a missing folder names the working directory" "instance_data_dir $tmp/gone: No such file.*working directory" -- \
  "$bin" train $db --set data_backend_config=<(echo '[{"id": "g", "instance_data_dir": "gone"}]')
expect 1 "data_dir and data_backend_config together" "both set" -- "$bin" train $db --set data_dir=pets \
  --set data_backend_config=backends.json
expect 1 "images need vae_scale_factor 1" "in_channels 3, vae_scale_factor 8: segtrain has no VAE" -- "$bin" train $db \
  --set vae_scale_factor=8 --set data_backend_config=backends.json

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
verified=$(grep -c "sec/step measured" <<<"$out")
[ "$verified" -ge 1 ] && [ "$(grep -c "peak measured .*(+0.00%)" <<<"$out")" = "$verified" ] &&
  ok "advise --verify: each measured peak is the predicted one" || bad "advise --verify: $out"
grep -q "^  -> " <<<"$out" && ok "advise walks the decision rule" || bad "advise rule: $out"
# the per-block planner's answer: a plan that fits, which `plan` reads back as printed and `train` runs
grep -q "^  per-block plan .* fits " <<<"$out" && ok "advise: the per-block planner finds a plan" || bad "planner: $out"
bp=$(sed -n 's/^  gradient_checkpointing_plan: //p' <<<"$out")
got=$("$bin" plan --config tiny.json --set gradient_checkpointing=true --set "gradient_checkpointing_plan=$bp" 2>&1)
grep -qF "plan ${bp/: /: }" <<<"$got" && ok "plan reads the planner's plan back as printed" || bad "plan of [$bp]: $got"
expect 0 "train runs a per-block plan" "trained 2 steps" -- "$bin" train --set model_preset=dit-tiny \
  --set in_channels=3 --set vae_scale_factor=1 --set resolution=8 --set num_classes=8 --set max_train_steps=2 \
  --set validation_steps=0 --set output_dir=plan-run --set gradient_checkpointing=true \
  --set "gradient_checkpointing_plan=$bp"
# seconds on a named GPU (issue 46): a profile whose memory-bound rates are out of the way prices the step at its
# GEMM and attention FLOPs over fp32_flops; its memory says whether the peak fits
gp='"fp32_flops": 1e12, "tf32_flops": 1e12, "bf16_flops": 1e12, "memory_bytes_per_second": 1e15, "link_bytes_per_second": 1e15, "efficiency": {"gemm": 1, "attention": 1, "normalization": 1, "elementwise": 1}'
echo "{\"name\": \"small\", \"memory_bytes\": 1, $gp}" >gpu-small.json
echo "{\"name\": \"large\", \"memory_bytes\": 1e12, $gp}" >gpu-large.json
gj=$("$bin" plan --config tiny.json --json --gpu gpu-small.json,gpu-large.json 2>/dev/null)
jnum() { sed -n "s/^[[:space:]]*\"$1\":[[:space:]]*\([-0-9.e+]*\),*$/\1/p" <<<"$gj"; }
flops=$(awk -v a="$(jnum gemm_flops_per_step)" -v b="$(jnum attention_flops_per_step)" 'BEGIN { print a + b }')
awk -v f="$flops" -v s="$(jnum sec_per_step | tr '\n' ' ')" 'BEGIN { n = split(s, x, " ");
      exit !(f > 0 && n == 2 && x[1] == x[2] && x[1] > 0.999 * f / 1e12 && x[1] < 1.001 * f / 1e12) }' &&
  [ "$(sed -n 's/^[[:space:]]*"fits":[[:space:]]*\([a-z]*\),*$/\1/p' <<<"$gj" | tr '\n' ' ')" = "false true " ] &&
  ok "plan --gpu prices the step at the profile's rates, and says where its peak fits" || bad "plan --gpu: $gj"
got=$("$bin" plan --config tiny.json --gpu all 2>&1)
grep -q "^predicted on a GPU (.*assumed to reach, unless measured" <<<"$got" &&
  grep -qE "^  NVIDIA H100 SXM5 80GB +[0-9.e+-]+ s/step; the peak fits its 79.65 GiB$" <<<"$got" &&
  [ "$(grep -c "^  NVIDIA .* s/step; the peak fits its" <<<"$got")" -eq 5 ] &&
  ok "plan --gpu all predicts the five built-in GPUs, and says they are predictions" || bad "plan --gpu all: $got"
expect 1 "an unknown GPU is refused with the list" 'GPU profile "v100": not one of h100, h200, l40s, a100, rtx4090' -- \
  "$bin" plan --config tiny.json --gpu v100
echo '{"name": "half", "memory_bytes": 1}' >gpu-half.json
expect 1 "a profile missing its figures is refused by name" 'gpu-half.json: a GPU profile is an object with a "name" and an "efficiency" object' -- \
  "$bin" plan --config tiny.json --gpu gpu-half.json
# block swap's link traffic and the placement (issue 43): the swapped weights of 2 of dit-tiny's blocks (583.5 KiB)
# brought in 3 times a step under interval 1 (forward, recompute, backward)
lo=(--config tiny.json --set model_type=lora --set lora_rank=4)
expect 0 "plan says what crosses the link under block swap, at a given bandwidth, and what it waits for" \
  "^host-device link per step: 1.71 MiB of swapped weights in, 0 B of offload out and 0 B back; at 25.00 GB/s \(--link-bandwidth\) 7.17e-05 s waited" \
  -- "$bin" plan "${lo[@]}" --set musubi_blocks_to_swap=2 --set gradient_checkpointing=true --link-bandwidth 25GB/s
expect 0 "plan measures the link where blocks swap and none is given" "at [0-9.]+ GB/s \(measured here\)" -- \
  "$bin" plan "${lo[@]}" --set musubi_blocks_to_swap=1
got=$("$bin" plan "${lo[@]}" --set gradient_checkpointing=true 2>&1)
grep -q "host-device link" <<<"$got" && bad "plan without swap or offload says a link: $got" ||
  ok "plan without swap or offload says nothing of the link"
expect 2 "--link-bandwidth takes a rate" "segtrain plan: --link-bandwidth takes a rate in bytes a second \(e.g. 25GB/s, 12GiB/s\), got 'fast'" -- \
  "$bin" plan "${lo[@]}" --link-bandwidth fast
out=$("$bin" advise "${lo[@]}" --device-memory 1.5MiB --link-bandwidth 25GB/s --verify --steps 1 2>&1)
grep -q "^  swap   0: none fits" <<<"$out" && grep -q "^  -> swap [1-3] blocks" <<<"$out" &&
  grep -qE "^advice: .* \+ swap [1-3] blocks, " <<<"$out" && grep -qE "^  as options: .* --set musubi_blocks_to_swap=[1-3]$" <<<"$out" &&
  ok "advise swaps blocks where nothing fits without, and says so as an option" || bad "advise placement: $out"
verified=$(grep -c "sec/step measured" <<<"$out")
[ "$verified" -ge 1 ] && [ "$(grep -c "peak measured .*(+0.00%)" <<<"$out")" = "$verified" ] &&
  ok "advise --verify with swapped blocks: each measured peak is the predicted one" || bad "advise --verify, swap: $out"
# group offload in the placement: below what any swap count fits (1.04 MiB at swap 3), every frozen weight in
# groups of blocks fits; advise says the settings as options, and --verify measures the predicted peak
out=$("$bin" advise "${lo[@]}" --device-memory 1MiB --link-bandwidth 25GB/s --verify --steps 1 2>&1)
grep -q "^  swap   3: none fits" <<<"$out" && grep -qE "^   1 block  a group: .* peak +[0-9.]+ MiB" <<<"$out" &&
  grep -q "^  -> group offload, 1 block a group$" <<<"$out" && grep -qE "^advice: .* \+ group offload 1 block a group, " <<<"$out" &&
  grep -qE "^  as options: .* --set enable_group_offload=true --set group_offload_type=block_level --set group_offload_blocks_per_group=1 --set group_offload_use_stream=false$" <<<"$out" &&
  ok "advise places the weights in offloaded groups where no swap count fits, and says so as options" ||
  bad "advise, group offload: $out"
verified=$(grep -c "group offload 1 block a group *sec/step measured" <<<"$out")
[ "$verified" -ge 1 ] && [ "$(grep -c "peak measured .*(+0.00%)" <<<"$out")" = "$verified" ] &&
  ok "advise --verify with offloaded groups: each measured peak is the predicted one" || bad "advise --verify, groups: $out"
# a streamed group is tried where one block a group fits without checkpointing (streams take none), and loses: its
# copies are priced as waited for, and it holds the next group too
out=$("$bin" advise "${lo[@]}" --device-memory 1.5MiB --link-bandwidth 25GB/s 2>&1)
grep -qE "^   1 block  a group, streamed: none \+ group offload 1 block a group, streamed +peak" <<<"$out" &&
  grep -q "^  -> swap 3 blocks$" <<<"$out" && ok "advise tries a streamed group without checkpointing" ||
  bad "advise, streamed group: $out"
# SimpleTuner refuses group offload for U-Nets and under full fine-tuning: advise tries none there
for refused in "--set model_preset=sd1x-tiny --set model_type=lora --set lora_rank=4" "--set model_type=full"; do
  out=$("$bin" advise --config tiny.json $refused --device-memory 64KiB --link-bandwidth 25GB/s 2>&1)
  grep -q "^decision rule" <<<"$out" && ! grep -q "group offload" <<<"$out" &&
    ok "advise tries no group offload where it is refused ($refused)" || bad "advise, refused groups ($refused): $out"
done
out=$("$bin" sweep "${lo[@]}" --modes layer,layer+swap2,unsloth+swap3+int8-quanto --steps 1 --warmup 0 --out swap-sweep 2>&1)
grep -qE "^\| layer\+swap2 +\| [0-9.]+ s / " <<<"$out" && grep -qE "^\| unsloth\+swap3\+int8-quanto +\| [0-9.]+ s / " <<<"$out" &&
  ! grep -q "same plan" <<<"$out" && ok "sweep rows with swapped blocks and a quantized base, each its own" ||
  bad "sweep, swap rows: $out"
echo '{"model_preset": "dit-tiny", "train_batch_size": 2, "gradient_checkpointing": true,
  "gradient_checkpointing_plan": "0-1 ckpt | 2 ffn | 3 keep + attention-offload"}' > planned.json
expect 0 "sweep runs the config's own plan as a row of its own" "^\| plan +\| [0-9.]+ s / " -- "$bin" sweep \
  --config planned.json --modes none,plan --steps 1 --warmup 0 --out plan-sweep
expect 1 "sweep --modes plan needs a plan in the config" "tiny.json has none" -- "$bin" sweep --config tiny.json \
  --modes plan --out never-sweep

# precision: advise and the sweeps plan in the config's mixed_precision, or the example's (SimpleTuner's default bf16
# where it sets none), and say which; --mixed_precision overrides it
none_peak() { sed -n 's/^  none  *peak  *\([0-9.]*\) MiB.*/\1/p' <<<"$1"; }
bf=$("$bin" advise --config tiny.json --set mixed_precision=bf16 --device-memory 1GiB --steps 1 2>&1)
fp=$("$bin" advise --config tiny.json --set mixed_precision=bf16 --mixed_precision no --device-memory 1GiB --steps 1 2>&1)
df=$("$bin" advise --config tiny.json --device-memory 1GiB --steps 1 2>&1)
grep -q "^precision: bf16 (mixed_precision bf16" <<<"$bf" && grep -q "^advice: .*(predicted in bf16" <<<"$bf" &&
  ok "advise plans in the config's bf16 and says so" || bad "advise, bf16 config: $bf"
grep -q "^precision: float32 (mixed_precision no); --mixed_precision bf16 plans in bf16" <<<"$fp" &&
  grep -q "^advice: .*(predicted in float32" <<<"$fp" && ok "advise --mixed_precision no overrides the config's bf16" ||
  bad "advise --mixed_precision no: $fp"
grep -q "^precision: float32 (the config sets no mixed_precision: segtrain's default" <<<"$df" &&
  ok "advise of a config without mixed_precision plans float32, as train runs it, and says so" || bad "advise: $df"
awk -v b="$(none_peak "$bf")" -v f="$(none_peak "$fp")" -v d="$(none_peak "$df")" \
  'BEGIN { exit !(b > 0 && b < f && f == d) }' && ok "advise: bf16's peak is below float32's, and no is float32" ||
  bad "advise peaks of none: bf16 $(none_peak "$bf"), no $(none_peak "$fp"), unset $(none_peak "$df")"
expect 0 "the config sweep's report says its precision" "^# segtrain sweep: dit-tiny in bf16 \(config: tiny.json\)" -- \
  "$bin" sweep --config tiny.json --mixed_precision bf16 --modes none --steps 1 --warmup 0 --out prec-sweep
fam=(sweep --families sd1x,lumina2 --modes none --device-memory 80GiB --steps 1 --warmup 0 --examples "$fix/simpletuner")
"$bin" "${fam[@]}" --out fam-bf16 >/dev/null 2>&1 && "$bin" "${fam[@]}" --mixed_precision no --out fam-f32 >/dev/null 2>&1 &&
  ok "the family sweep runs in the examples' precision and with --mixed_precision no" || bad "family sweeps: see fam-*"
md=$(cat fam-bf16/families.md 2>&1)
grep -qF "| sd1x (sd15, 512 px images, batch 1, bf16) |" <<<"$md" && grep -qF "**Measured** on sd1x-tiny in bf16" <<<"$md" &&
  ok "the family sweep plans sd1x in its example's bf16, both halves" || bad "family sweep, sd1x: $md"
grep -qF "| lumina2 (lumina2, 1024 px images, batch 2, bf16) |" <<<"$md" &&
  grep -qF "in SimpleTuner's default mixed_precision bf16 (the example sets none)" <<<"$md" &&
  ok "an example without mixed_precision is planned in SimpleTuner's default bf16, and the note says so" ||
  bad "family sweep, lumina2: $md"
grep -q "^| sd1x | none [0-9.]* s | none [0-9.]* s | none [0-9.]* s | none [0-9.]* s | none [0-9.]* s |$" <<<"$md" &&
  grep -qF "**predictions, not measurements**" <<<"$md" &&
  ok "the family sweep predicts each family's fastest fitting mode on the five GPUs, as predictions" ||
  bad "family sweep GPU table: $(grep -A8 '^## Predicted on a GPU' <<<"$md")"
md32=$(cat fam-f32/families.md 2>&1)
grep -qF "| sd1x (sd15, 512 px images, batch 1, float32) |" <<<"$md32" &&
  grep -qF "| lumina2 (lumina2, 1024 px images, batch 2, float32) |" <<<"$md32" &&
  grep -qF "**Measured** on sd1x-tiny in float32" <<<"$md32" && ! grep -q "SimpleTuner's default mixed_precision" <<<"$md32" &&
  ok "--mixed_precision no plans every family in float32" || bad "family sweep --mixed_precision no: $md32"
# the weights' placement: where no mode fits a budget, block swap on an int8-quanto base may (MiniMax H3's example
# needs 64 GiB at the least); the sweep names the swap count and its peak, inside the budget
"$bin" --threads 2 sweep --families minimaxh3 --modes none,unsloth --planner --device-memory 24GiB --steps 1 --warmup 0 \
  --examples "$fix/simpletuner" --out fam-place >/dev/null 2>&1
placed=$(grep -o "nothing fits (the smallest need: [0-9.]* GiB, unsloth); no per-block plan fits; with the weights placed: int8-quanto base, [a-z ]* + swap [0-9]* blocks ([0-9.]* s / [0-9.]* GiB)" fam-place/families.md | head -1)
awk -v g="$(sed -n 's|.* s / \([0-9.]*\) GiB)$|\1|p' <<<"$placed")" 'BEGIN { exit !(g > 0 && g <= 24) }' &&
  grep -q '"musubi_blocks_to_swap":[1-9]' <(tr -d ' \n\t' <fam-place/families.json) &&
  ok "the family sweep places the weights where no mode fits: $placed" ||
  bad "family sweep placement: $(grep -m1 '^| minimaxh3' fam-place/families.md)"
# group offload in that placement: at 3.2 GiB no count of Flux's swapped blocks fits its example (56 under unsloth
# need 3.38 GiB), every frozen weight in offloaded groups does (3.06 GiB: a group stays in through its recompute and
# backward, so fewer bytes cross the link too)
"$bin" --threads 2 sweep --families flux --modes none,unsloth --planner --device-memory 3.2GiB --steps 1 --warmup 0 \
  --examples "$fix/simpletuner" --out fam-group >/dev/null 2>&1
placed=$(grep -o "with the weights placed: [a-z0-9 ,-]*+ group offload [0-9]* blocks* a group ([0-9.]* s / [0-9.]* GiB)" fam-group/families.md | head -1)
awk -v g="$(sed -n 's|.* s / \([0-9.]*\) GiB)$|\1|p' <<<"$placed")" 'BEGIN { exit !(g > 0 && g <= 3.2) }' &&
  grep -qE '"musubi_blocks_to_swap":0,"enable_group_offload":true,"group_offload_blocks_per_group":[1-9][0-9]*,"group_offload_use_stream":false' \
    <(tr -d ' \n\t' <fam-group/families.json) &&
  ok "the family sweep places the weights in offloaded groups where no swap count fits: $placed" ||
  bad "family sweep, group offload: $(grep -m1 '^| flux' fam-group/families.md)"
# attention offload under bf16: the DiT block's qkv and attention output go to the host in bf16, its state in float
to_host() { "$bin" plan --json --set model_preset=dit-tiny --set gradient_checkpointing_offload_attention=true \
  --set mixed_precision="$1" 2>/dev/null | sed -n 's/.*"bytes_to_host_per_step":[[:space:]]*\([0-9]*\).*/\1/p'; }
awk -v b="$(to_host bf16)" -v f="$(to_host no)" 'BEGIN { exit !(b > 0 && b < f && 2 * b > f) }' &&
  ok "attention offload moves bf16 to the host under mixed_precision bf16" ||
  bad "attention offload's bytes to the host: bf16 $(to_host bf16), float $(to_host no)"
sd_peak() { sed -n 's/^| sd1x .* | none ([0-9.]* s \/ \([0-9.]*\) GiB) |$/\1/p' <<<"$1"; }
awk -v b="$(sd_peak "$md")" -v f="$(sd_peak "$md32")" 'BEGIN { exit !(b > 0 && b < f) }' &&
  ok "sd1x's predicted peak in bf16 is below float32's" || bad "sd1x none peaks: bf16 $(sd_peak "$md"), float32 $(sd_peak "$md32")"
expect 1 "a plan beside an interval is refused" "gradient_checkpointing_interval: 2 would mean nothing" -- \
  "$bin" plan --config tiny.json --set gradient_checkpointing=true --set gradient_checkpointing_interval=2 \
  --set "gradient_checkpointing_plan=$bp"

# ---- issue 15, bad input: sizes that overflow, outputs, exit codes, empty folders ----
# a size whose products overflow is one line naming the key, in every command, given by --set or in the file
echo '{"model_preset": "dit-tiny"}' > base.json
echo '{"model_preset": "dit-tiny", "num_classes": 72057594037927935}' > huge.json
for c in init plan train; do
  o=(); [ $c = init ] && o=(--out huge.safetensors); [ $c = train ] && o=(--set output_dir=huge-run)
  expect 1 "$c: a huge num_classes by --set is refused naming it" "num_classes" -- "$bin" $c --config base.json \
    --set num_classes=72057594037927935 "${o[@]}"
  expect 1 "$c: a huge num_classes in the file is refused naming it" "num_classes" -- "$bin" $c --config huge.json "${o[@]}"
  expect 1 "$c: 2^32 tokens are refused naming the sizes" "resolution.*more than 2\^57" -- "$bin" $c --config base.json \
    --set resolution=65536 --set vae_scale_factor=1 --set patch_size=1 "${o[@]}"
done
[ ! -e huge.safetensors ] && [ ! -e huge-run ] && ok "refused sizes write nothing" || bad "refused sizes wrote: $(ls)"
big="--set resolution=1024 --set vae_scale_factor=1 --set patch_size=1 --set train_batch_size=65536"
expect 1 "plan: a batch whose step overflows names train_batch_size" "train_batch_size: 65536 samples" -- "$bin" plan \
  --config base.json $big
expect 1 "batch: the same" "train_batch_size: 65536 samples" -- "$bin" batch --config base.json $big --out never.safetensors
# a batch file whose x0 claims 2^53 samples of zero bytes each: refused by shape, before anything is sized by it
hdr='{"x0":{"dtype":"F32","shape":[9007199254740992,4,8,0],"data_offsets":[0,0]}}'
printf "\\x$(printf %02x ${#hdr})\\x00\\x00\\x00\\x00\\x00\\x00\\x00%s" "$hdr" > claims.safetensors
expect 1 "grad: a batch file's claimed shape is checked first" "tensor 'x0' has shape \(9007199254740992, 4, 8, 0\)" -- \
  "$bin" grad --config base.json --weights w.safetensors --batch claims.safetensors --out never.safetensors
# a non-finite loss is an error, and no gradients are written (x0's first value made NaN)
cp b.safetensors nan.safetensors
hlen=$(od -An -tu8 -N8 nan.safetensors | tr -d ' ')
printf '\x00\x00\xc0\x7f' | dd of=nan.safetensors bs=1 seek=$((8 + hlen)) conv=notrunc 2>/dev/null
expect 1 "grad: a NaN loss exits 1 with a message" "the loss is -?nan.*nothing was written" -- "$bin" grad --config tiny.json \
  --weights w.safetensors --batch nan.safetensors --out nan-g.safetensors
[ ! -e nan-g.safetensors ] && ok "grad: no gradients of a NaN loss" || bad "grad wrote gradients of a NaN loss"
# a command that fails before writing anything leaves no empty folder: a new output_dir goes, one made before stays
expect 1 "train: weights that are not there fail the run" 'pretrained_model_name_or_path: "nope.safetensors": No such file' -- "$bin" train --config base.json \
  --set in_channels=3 --set vae_scale_factor=1 --set output_dir=made/run --set pretrained_model_name_or_path=nope.safetensors
[ ! -e made ] && ok "train: the failed run's new output folders are gone" || bad "train left $(find made)"
mkdir mine
"$bin" train --config base.json --set in_channels=3 --set vae_scale_factor=1 --set output_dir=mine/run \
  --set pretrained_model_name_or_path=nope.safetensors 2>/dev/null
[ -d mine ] && [ ! -e mine/run ] && ok "train: a folder it did not make stays" || bad "train: mine: $(find mine)"
# sizes read as sizes: a 1 KiB budget is not "0.00 MiB"
expect 1 "train: a tiny budget reads as it was given" "budget is 1.0 KiB" -- "$bin" train --config base.json \
  --set device_memory=1KiB --set output_dir=kib-run
expect 1 "grad: so does the pool's capacity" "with 0 B live of 1.0 KiB capacity" -- "$bin" grad --config base.json \
  --set device_memory=1KiB --weights w.safetensors --batch b.safetensors --out never.safetensors

# a SimpleTuner user's own config.json: the family by SimpleTuner's name, its values, its command-line habits
cat > st.json <<'JSON'
{"model_family": "flux", "model_flavour": "dev", "optimizer": "adamw_bf16", "lr_scheduler": "constant_with_warmup",
 "grad_clip_method": "value", "resolution": 512, "resolution_type": "pixel_area", "mixed_precision": "bf16",
 "hub_model_id": "x", "vae_batch_size": 1, "gradient_checkpointing": true, "train_batch_size": 1,}
JSON
expect 0 "a SimpleTuner flux config plans Flux dev at its real size" \
  "model flux-dev \\(flux\\): 19 double-stream \\+ 38 single-stream blocks, width 3072, 24 heads, 1024 image \\+ 512 text tokens" -- \
  "$bin" plan --config st.json
out=$("$bin" plan --config st.json --set model_family=infinitetalk --set model_flavour=single-14b-480p 2>&1); rc=$?
[ $rc -ne 0 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "model_family infinitetalk (.*flavour single-14b-480p): needs the cross-attention DiT" <<<"$out" &&
  ok "a SimpleTuner family not built yet: one line naming it and its topology" || bad "infinitetalk refusal (exit $rc): $out"
expect 0 "--set comes before validation: the same file plans on mmdit" "1024 image \\+ 8 text tokens" -- \
  "$bin" plan --config st.json --set model_family=mmdit
expect 0 "unknown keys split by what ignoring them costs" "ignoring keys that only report or publish: hub_model_id" -- \
  "$bin" plan --config st.json --set model_family=mmdit
expect 0 "SimpleTuner's values are read, with a note where they differ" 'optimizer "adamw_bf16" runs as adamw' -- \
  "$bin" plan --config st.json --set model_family=mmdit
expect 0 "SimpleTuner's --config=FILE and --key value" "checkpointing torch, interval 2, stride 2" -- \
  "$bin" plan --config=st.json --model_family mmdit --gradient_checkpointing_interval=2
expect 0 "a bare SimpleTuner bool flag is true" "checkpointing torch, interval 1" -- \
  "$bin" plan --config=st.json --model_family=mmdit --gradient_checkpointing
expect 2 "an unknown option names --set" "unknown option '--frobnicate': neither an option .* or --set key=value" -- \
  "$bin" plan --config st.json --frobnicate 3
out=$("$bin" plan --config <(echo '{"train_batch_size": 0, "optimizer": "sgd", "seed": -1}') 2>&1)
grep -q "3 errors in the config" <<<"$out" && grep -q "train_batch_size: 0" <<<"$out" && grep -q 'optimizer: "sgd"' <<<"$out" &&
  grep -q "seed: -1" <<<"$out" && ok "every error of a config in one run" || bad "all errors: $out"
out=$("$bin" plan --config st.json --set model_family=infinitetalk --set model_flavour=single-14b-480p --set attention_mechanism=metal-flash-attention-int8 --set train_batch_size=0 2>&1)
grep -q "3 errors in the config:" <<<"$out" && [ "$(sed -n 2p <<<"$out" | grep -c "model_family infinitetalk (")" -eq 1 ] &&
  grep -q 'train_batch_size: "0"' <<<"$out" && ok "a family not built leads the report of a config's other errors" ||
  bad "family with other errors: $out"
expect 1 "a quantized attention is refused with the nearest" 'is refused: quantized attention.*nearest it takes is flash' -- \
  "$bin" plan --config st.json --set model_family=mmdit --set attention_mechanism=metal-flash-attention-int8
expect 1 "plan: a hub name for the weights is refused, naming the file to give" \
  '^segtrain plan: pretrained_model_name_or_path: "black-forest-labs/FLUX.1-dev" is a Hugging Face hub name.*a diffusers model or pipeline folder' -- \
  "$bin" plan --config st.json --set model_family=mmdit --set pretrained_model_name_or_path=black-forest-labs/FLUX.1-dev
expect 1 "train: a hub name for the weights is refused" 'pretrained_model_name_or_path: "black-forest-labs/FLUX.1-dev" is a Hugging Face hub name' -- \
  "$bin" train --config st.json --set model_family=mmdit --set in_channels=3 --set vae_scale_factor=1 --set resolution=8 \
  --set output_dir=hub --set pretrained_model_name_or_path=black-forest-labs/FLUX.1-dev
expect 1 "train: a folder without diffusers weights says what it looked for" \
  "\\.: a folder without diffusers weights: looked for diffusion_pytorch_model.safetensors.index.json and diffusion_pytorch_model.safetensors in it and in its transformer/ subfolder" -- \
  "$bin" train --config st.json --set model_family=mmdit --set in_channels=3 --set vae_scale_factor=1 --set resolution=8 \
  --set output_dir=hub --set pretrained_model_name_or_path=.
expect 0 "a video family trains on synthetic video: hunyuanvideo 1.0 tiny, num_frames 5 (2 latent frames)" \
  "trained 2 steps" -- \
  "$bin" train --config empty.json --set model_family=hunyuanvideo --set model_flavour=1.0 \
  --set model_preset=hunyuanvideo-tiny --set synthetic_data=true --set num_frames=5 --set max_train_steps=2 \
  --set output_dir=hv-synthetic --set gradient_checkpointing=true
expect 0 "ltxvideo trains on synthetic video with attention offload: num_frames 9 (2 latent frames, its VAE 8x in time)" \
  "trained 2 steps" -- \
  "$bin" train --config empty.json --set model_family=ltxvideo --set model_preset=ltxvideo-tiny \
  --set synthetic_data=true --set num_frames=9 --set max_train_steps=2 --set output_dir=ltx-synthetic \
  --set gradient_checkpointing=true --set gradient_checkpointing_offload_attention=true
expect 0 "ltxvideo2 trains on synthetic video with attention offload; its audio stream runs on zero latents, masked" \
  "trained 2 steps" -- \
  "$bin" train --config empty.json --set model_family=ltxvideo2 --set model_preset=ltxvideo2-tiny \
  --set synthetic_data=true --set num_frames=9 --set max_train_steps=2 --set output_dir=ltx2-synthetic \
  --set gradient_checkpointing=true --set gradient_checkpointing_offload_attention=true
expect 0 "wan's vace flavour trains on synthetic video with attention offload: its control branch, then the blocks" \
  "trained 2 steps" -- \
  "$bin" train --config empty.json --set model_family=wan --set model_preset=wan-vace-tiny \
  --set synthetic_data=true --set num_frames=5 --set max_train_steps=2 --set output_dir=vace-synthetic \
  --set gradient_checkpointing=true --set gradient_checkpointing_offload_attention=true
expect 0 "wan's vace-14b-2.1 plans both sequences: 8 VACE control blocks, then 40 main blocks" \
  "40 cross-attention blocks \\+ 8 VACE control blocks.*plan vace_blocks: 0-7 ckpt in segments of 1.*plan blocks" -- \
  sh -c "'$bin' plan --config empty.json --set model_family=wan --set model_flavour=vace-14b-2.1 \
         --set num_frames=81 --set gradient_checkpointing=true | tr '\\n' ' '"
expect 0 "wan with AnyFlow's transformer (the fixture's folder) trains its diffusion intervals on synthetic video" \
  "trained 2 steps" -- \
  "$bin" train --config empty.json --set model_family=wan --set model_preset=wan-anyflow-tiny \
  --set pretrained_model_name_or_path="$src/tests/fixtures/anyflow" --set synthetic_data=true --set num_frames=5 \
  --set resolution=64 --set max_train_steps=2 --set output_dir=anyflow-synthetic --set gradient_checkpointing=true
lt2="--set model_family=ltxvideo2 --set model_preset=ltxvideo2-tiny --set num_frames=9"
expect 0 "batch and grad of ltxvideo2: x0 is (B, S), each sample's video latents then its audio latents" \
  "wrote loss and 108872 gradients" -- \
  sh -c "'$bin' init --config empty.json $lt2 --out l2w.safetensors >/dev/null &&
         '$bin' batch --config empty.json $lt2 --out l2b.safetensors >/dev/null &&
         '$bin' grad --config empty.json $lt2 --weights l2w.safetensors --batch l2b.safetensors --out l2g.safetensors"
expect 1 "ltxvideo2's 2.3 flavour is refused by name" "model_flavour 2.3-dev of ltxvideo2 .*gated attention" -- \
  "$bin" plan --config empty.json --set model_family=ltxvideo2 --set model_flavour=2.3-dev
expect 0 "kandinsky5-image tiny trains on synthetic data: text blocks then visual blocks, attention offload" \
  "trained 2 steps" -- \
  "$bin" train --config empty.json --set model_family=kandinsky5_image --set model_preset=kandinsky5-image-tiny \
  --set synthetic_data=true --set max_train_steps=2 --set output_dir=k5-synthetic --set gradient_checkpointing=true \
  --set gradient_checkpointing_interval=2 --set gradient_checkpointing_offload_attention=true
expect 1 "kandinsky5-image's i2i flavours are refused by name: they take a reference image" \
  "model_flavour i2i-lite-sft of kandinsky5-image .*reference image" -- \
  "$bin" plan --config empty.json --set model_family=kandinsky5_image --set model_flavour=i2i-lite-sft
expect 1 "video from image data is refused in one line" \
  "num_frames 5: the model takes 2 latent frames, but segtrain's image datasets hold images" -- \
  "$bin" train --config empty.json --set model_family=hunyuanvideo --set model_preset=hunyuanvideo15-tiny \
  --set num_frames=5 --set max_train_steps=1 --set output_dir=hv-images
hv="--set model_family=hunyuanvideo --set model_flavour=1.0 --set model_preset=hunyuanvideo-tiny"
expect 0 "batch and grad of a video model: x0 is (B, C, F, H, W)" "wrote loss and 625744 gradients" -- \
  sh -c "'$bin' init --config empty.json $hv --set num_frames=5 --out hvw.safetensors >/dev/null &&
         '$bin' batch --config empty.json $hv --set num_frames=5 --out hvb.safetensors >/dev/null &&
         '$bin' grad --config empty.json $hv --set num_frames=5 --weights hvw.safetensors --batch hvb.safetensors --out hvg.safetensors"
expect 1 "a video batch for an image-sized model names the dimensions" \
  "tensor 'x0' has 5 dimensions; the model takes \\(B,C,H,W\\) \\(num_frames 1: images\\)" -- \
  "$bin" grad --config empty.json $hv --weights hvw.safetensors --batch hvb.safetensors --out hvg.safetensors
expect 0 "cosmos2image trains with SimpleTuner's EDM objective (the flow at t = sigma / (sigma + 1), weighted)" \
  "trained 2 steps; weights in cosmos-out/model.safetensors" -- \
  "$bin" train --config empty.json --set model_family=cosmos2image --set model_preset=cosmos2-tiny \
  --set synthetic_data=true --set max_train_steps=2 --set output_dir=cosmos-out
trains_one_step "anima trains with flow matching, as SimpleTuner does: its transformer and text conditioner" anima -- \
  --set model_family=anima --set model_preset=anima-tiny
# SimpleTuner's own example configs, without the hub weights some name (refused): a built family plans, one not
# built is refused in one line
for example in "$src"/tests/fixtures/simpletuner/*.json; do
  name=$(basename "$example" .json) family=$(sed -n 's/.*"model_family": *"\([^"]*\)".*/\1/p' "$example")
  shown=$family; case $family in kandinsky5*) shown=kandinsky5 ;; esac # segtrain's name for both of SimpleTuner's
  # from the examples' folder: a lycoris_config is a path relative to the working directory (committed there)
  out=$(cd "$src/tests/fixtures/simpletuner" && "$bin" plan --config "$example" --set pretrained_model_name_or_path= 2>&1); rc=$?
  if grep -q "base_model_precision: .* is refused" <<<"$out"; then # a quantized base not built: then unquantized
    [ $rc -eq 1 ] && [ "$(grep -vc '^segtrain: warning' <<<"$out")" -eq 1 ] && grep -q "nearest built is" <<<"$out" &&
      ok "SimpleTuner's $name example: base_model_precision refused, the nearest named" || bad "$name example: $out"
    out=$(cd "$src/tests/fixtures/simpletuner" && "$bin" plan --config "$example" --set base_model_precision=no_change \
          --set lora_type=standard --set pretrained_model_name_or_path= 2>&1); rc=$?
  fi
  if grep -q "ramtorch: true is refused" <<<"$out"; then # RamTorch not built (docs/WEIGHTS.md): then without it
    [ $rc -eq 1 ] && [ "$(grep -vc '^segtrain: warning' <<<"$out")" -eq 1 ] && grep -q "nearest built is" <<<"$out" &&
      ok "SimpleTuner's $name example: ramtorch refused, the nearest named" || bad "$name example: $out"
    out=$(cd "$src/tests/fixtures/simpletuner" && "$bin" plan --config "$example" --set ramtorch=false \
          --set base_model_precision=no_change --set lora_type=standard --set pretrained_model_name_or_path= 2>&1); rc=$?
  fi
  if [ $rc -eq 0 ]; then
    grep -q "^model [^ ]* ($shown[^)]*)" <<<"$out" && grep -q "^predicted peak device memory" <<<"$out" &&
      ok "SimpleTuner's $name example plans unchanged" || bad "$name example: $out"
  else
    [ $rc -eq 1 ] && [ "$(grep -vc '^segtrain: warning' <<<"$out")" -eq 1 ] && grep -q "model_family $family (.*planned, not built yet" <<<"$out" &&
      ok "SimpleTuner's $name example: not built yet, one line" || bad "$name example (exit $rc): $out"
  fi
done
# SimpleTuner's LoKr examples train as written (from their folder, where their lycoris_config is) at the tiny preset:
# no word about lycoris_config, each step's peak the plan's, the adapters under the package's keys; and with a LyCORIS
# fixture's config instead (tests/fixtures/lycoris/<name>: LoHa on pixart, LoCon on sana, full on sdxl)
for ex in pixart:pixart-sigma-tiny: sana:sana-1.5-tiny: sdxl:sdxl-tiny: cosmos2image:cosmos2-tiny: \
  cosmos3-image:cosmos3-tiny: kandinsky5-image-6b-t2i:kandinsky5-image-tiny: omnigen:omnigen-tiny: \
  cascade-stage-c:stable-cascade-tiny: pixart:pixart-sigma-tiny:loha sana:sana-1.5-tiny:locon sdxl:sdxl-tiny:full; do
  IFS=: read -r name preset fixture <<<"$ex"
  what="LoKr example" extra=()
  if [ -n "$fixture" ]; then
    what="example with the $fixture LyCORIS fixture's config"
    extra=(--set lycoris_config=../lycoris/$fixture/lycoris_config.json)
  fi
  [ "$name" = omnigen ] && extra+=(--set validation_resolution=64) # its 1024x1024 is past the tiny's position table
  case $fixture in
    loha) keys="hada_w1_a hada_w2_b" ;;
    locon) keys="lora_down.weight lora_up.weight" ;;
    full) keys="diff diff_b" ;;
    *) keys=lokr_w1 ;;
  esac
  sets=(--set model_preset=$preset --set resolution=64 --set synthetic_data=true --set data_backend_config=
        --set pretrained_model_name_or_path= --set max_train_steps=2 --set output_dir="$PWD/lokr-$name$fixture"
        --set checkpoint_step_interval=0 "${extra[@]}")
  predicted=$(cd "$src/tests/fixtures/simpletuner" && "$bin" plan --config $name.lycoris-lokr.json "${sets[@]}" --json 2>/dev/null |
    sed -n 's/.*"total":[[:space:]]*\([0-9]*\).*/\1/p' | head -1)
  out=$(cd "$src/tests/fixtures/simpletuner" && "$bin" train --config $name.lycoris-lokr.json "${sets[@]}" 2>&1)
  peaks=$(grep -o '"peak_device_bytes": [0-9]*' "lokr-$name$fixture/train_log.jsonl" 2>/dev/null | sed 's/.*: //' | sort -u)
  saved=$(head -c 65536 "lokr-$name$fixture/pytorch_lora_weights.safetensors" 2>/dev/null | tr -d '\0')
  missing=$(for k in $keys; do grep -q "\"lycoris_[^\"]*\\.$k\"" <<<"$saved" || echo "$k"; done)
  grep -q "^trained 2 steps" <<<"$out" && ! grep -q "lycoris_config" <<<"$out" && [ -n "$predicted" ] &&
    [ "$peaks" = "$predicted" ] && [ -z "$missing" ] &&
    ok "SimpleTuner's $name $what trains 2 steps at $preset, each peak the predicted $predicted bytes" ||
    bad "$name $what (peaks $peaks, predicted $predicted, keys missing: $missing): $out"
done
# LyCORIS's classes on the families mapped since pixart, sana and sdxl: segtrain trains on the family's parity fixture
# with the example's lycoris_config (or one targeting every class mapped there; sd1x and sdxl: LoCon on every U-Net
# class, their convolutions at conv_dim, conv_in and conv_out by name; sd1x with LoHa, full and LoCon there, and with
# LoKr; Stable Cascade's depthwise convolutions by name with LoKr and LoCon) and saves exactly the keys and shapes
# lycoris-lora 4.1.3 gives the diffusers class (tests/fixtures/lycoris/families/*.keys, from
# scripts/make_lycoris_fixtures.py --family-keys)
lyco_examples=$src/tests/fixtures/simpletuner/config/examples lyco_families=$src/tests/fixtures/lycoris/families
for c in cosmos2image:cosmos:cosmos2image.lycoris-lokr cosmos2image:cosmos:cosmos2image-every-class \
  cosmos3:cosmos3:cosmos3-image.lycoris-lokr cosmos3:cosmos3:cosmos3-every-class \
  kandinsky5_image:kandinsky5:kandinsky5-image-6b-t2i.lycoris-lokr omnigen:omnigen:omnigen.lycoris-lokr \
  omnigen:omnigen:omnigen-every-class stable_cascade:stable-cascade:cascade-stage-c.lycoris-lokr \
  sd1x:sd1x:sd1x-conv sdxl:sdxl:sdxl-conv sd1x:sd1x:sd1x-conv-algos sd1x:sd1x:sd1x-conv-lokr \
  stable_cascade:stable-cascade:cascade-depthwise stable_cascade:stable-cascade:cascade-depthwise-locon; do
  IFS=: read -r family folder config <<<"$c"
  lyco_config=$lyco_families/$config.json keys=$lyco_families/$family.keys
  if [[ $config == *.lycoris-lokr ]]; then lyco_config=$lyco_examples/$config/lycoris_config.json
  else keys=$lyco_families/$config.keys; fi
  out=$("$bin" train --config empty.json --set model_family=$family --set pretrained_model_name_or_path="$src/tests/fixtures/$folder" \
        --set model_type=lora --set lora_type=lycoris --set lycoris_config="$lyco_config" --set synthetic_data=true \
        --set max_train_steps=1 --set resolution=64 --set output_dir="$PWD/lyco-$family-$config" 2>&1)
  file=lyco-$family-$config/pytorch_lora_weights.safetensors # its header whole: 8 bytes of length, then the JSON
  saved=$(head -c $((8 + $(od -An -tu8 -N8 "$file" 2>/dev/null || echo 0))) "$file" 2>/dev/null | tr -d '\0' |
    grep -ao '"lycoris_[^"]*":{"dtype":"[A-Z0-9]*","shape":\[[0-9,]*\]' | sed 's/":{"dtype":"[A-Z0-9]*","shape":\[/ [/; s/^"//' | sort)
  [ -n "$saved" ] && [ "$saved" = "$(cat "$keys")" ] &&
    ok "LyCORIS ($config) on $family's parity fixture: the package's $(wc -l <"$keys") keys and shapes" ||
    bad "LyCORIS ($config) on $family: $(diff <(echo "$saved") "$keys" | head -5) $out"
done
# base_model_precision: a LoRA on an int4-quanto base trains, each step's peak the plan's; full training is refused
qsets=(--set model_preset=dit-tiny --set model_type=lora --set lora_rank=4 --set base_model_precision=int4-quanto
       --set mixed_precision=bf16 --set gradient_checkpointing=true --set synthetic_data=true)
predicted=$("$bin" plan "${qsets[@]}" --json 2>/dev/null | sed -n 's/.*"total":[[:space:]]*\([0-9]*\).*/\1/p' | head -1)
out=$("$bin" train "${qsets[@]}" --set max_train_steps=2 --set output_dir="$PWD/quant-int4" 2>&1)
peaks=$(grep -o '"peak_device_bytes": [0-9]*' quant-int4/train_log.jsonl 2>/dev/null | sed 's/.*: //' | sort -u)
grep -q "^trained 2 steps" <<<"$out" && [ -n "$predicted" ] && [ "$peaks" = "$predicted" ] &&
  ok "a LoRA on an int4-quanto base trains 2 steps, each peak the predicted $predicted bytes" ||
  bad "int4-quanto base (peaks $peaks, predicted $predicted): $out"
expect 1 "a quantized base under full training is refused" "base_model_precision fp8-quanto quantizes a frozen base" -- \
  "$bin" plan --set base_model_precision=fp8-quanto
expect 0 "plan --parts shows how each part is held" "blocks.\\*.attn.qkv .*int8-quanto \\+ float32" -- \
  "$bin" plan --parts --set model_type=lora --set lora_rank=4 --set base_model_precision=int8-quanto
expect 0 "SimpleTuner's kandinsky5-video example plans T2V Lite (2 + 32 blocks) at 121 frames: 31 latent frames" \
  "model kandinsky5-t2v-lite \\(kandinsky5\\): 32 cross-attention blocks, width 1792, 28 heads, 27900 image \\+ 256 text tokens of 121-frame 480 px video" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/kandinsky5-video-2b-t2v.peft-lora.json" --set base_model_precision=no_change --set num_frames=121
expect 0 "SimpleTuner's auraflow example plans AuraFlow v0.3 at its real size" \
  "model auraflow \\(auraflow\\): 4 double-stream \\+ 32 single-stream blocks, width 3072, 12 heads, 4096 image \\+ 120 text tokens" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/auraflow.peft-lora.json"
expect 0 "SimpleTuner's hunyuanvideo example plans HunyuanVideo 1.5 (its t2v-480p) at its real size" \
  "model hunyuanvideo15-480p \\(hunyuanvideo15\\): 54 joint blocks, width 2048, 16 heads, 900 image \\+ 1256 text tokens of 1-frame 480 px video" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/hunyuanvideo-1.5-t2v.peft-lora.json" --set base_model_precision=no_change --set pretrained_model_name_or_path=
expect 0 "num_frames: 33 frames of HunyuanVideo 1.5 are 9 latent frames, 8100 image tokens" \
  "8100 image \\+ 1256 text tokens of 33-frame 480 px video \\(9 x 30 x 30 latent, VAE /16, /4 in time\\)" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/hunyuanvideo-1.5-t2v.peft-lora.json" --set base_model_precision=no_change --set pretrained_model_name_or_path= --set num_frames=33
expect 0 "SimpleTuner's ltxvideo example plans LTX-Video 0.9.5 at its real size" \
  "model ltxvideo-0.9.5 \\(ltxvideo\\): 28 cross-attention blocks, width 2048, 32 heads, 225 image \\+ 226 text tokens of 1-frame 480 px video" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/ltxvideo-0.9.5-t2v.peft-lora.json" --set base_model_precision=no_change --set pretrained_model_name_or_path=
expect 0 "num_frames: 49 frames of LTX-Video are 7 latent frames (its VAE is 8x in time), 1575 image tokens" \
  "1575 image \\+ 226 text tokens of 49-frame 480 px video \\(7 x 15 x 15 latent, VAE /32, /8 in time\\)" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/ltxvideo-0.9.5-t2v.peft-lora.json" --set base_model_precision=no_change --set pretrained_model_name_or_path= --set num_frames=49
# the run holds one set of weights and each bucket's position table (256 and 64 rows more than a lone 512x512's)
expect 0 "plan with bucket_shapes predicts every bucket's peak and names the largest as the run's" \
  "bucket 512x512 +1024 image tokens  predicted peak 702.95 MiB  \\(the run's peak\\)" -- \
  "$bin" plan --set model_preset=dit-s2 --set bucket_shapes=256x256,512x512,128x128
expect 0 "... and the plan after the buckets is the largest's" "1024 tokens of 512 px images \\(64 x 64 latent" -- \
  "$bin" plan --set model_preset=dit-s2 --set bucket_shapes=256x256,512x512,128x128
expect 0 "plan prints the plan of each bucket: its own from gradient_checkpointing_bucket_plans" \
  "its plan: blocks: 0-5 ckpt \\| 6-11 keep$" -- \
  "$bin" plan --set model_preset=dit-s2 --set bucket_shapes=256x256,512x512,128x128 --set gradient_checkpointing=true \
  --set 'gradient_checkpointing_bucket_plans=512x512: 0-5 ckpt | 6-11 keep, 128x128: none'
expect 0 "... none keeps every block" "its plan: blocks: 0-11 keep$" -- \
  "$bin" plan --set model_preset=dit-s2 --set bucket_shapes=256x256,512x512,128x128 --set gradient_checkpointing=true \
  --set 'gradient_checkpointing_bucket_plans=512x512: 0-5 ckpt | 6-11 keep, 128x128: none'
expect 0 "... and a bucket not named takes the run's schedule" "its plan: blocks: 0-11 ckpt in segments of 1$" -- \
  "$bin" plan --set model_preset=dit-s2 --set bucket_shapes=256x256,512x512,128x128 --set gradient_checkpointing=true \
  --set 'gradient_checkpointing_bucket_plans=512x512: 0-5 ckpt | 6-11 keep, 128x128: none'
expect 1 "gradient_checkpointing_bucket_plans refuses a bucket the run does not have, naming its buckets" \
  "gradient_checkpointing_bucket_plans: \"640x480\" is not one of the run's buckets \\(valid: 256x256, 512x512, 128x128\\)" -- \
  "$bin" plan --set model_preset=dit-s2 --set bucket_shapes=256x256,512x512,128x128 --set gradient_checkpointing=true \
  --set 'gradient_checkpointing_bucket_plans=640x480: none'
expect 0 "SimpleTuner's Wan example plans at its users' 832x480 bucket, 81 frames" \
  "32760 image \\+ 512 text tokens of 81-frame 832x480 px video \\(21 x 60 x 104 latent, VAE /8, /4 in time\\)" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/wan-1.3b.peft-lora+TREAD.json" --set base_model_precision=no_change --set pretrained_model_name_or_path= --set bucket_shapes=832x480@81
expect 1 "advise --bucket-steps gives one count per bucket" "--bucket-steps: \"1,1\" is not 3 step counts" -- \
  "$bin" advise --set model_preset=dit-tiny --set bucket_shapes=64x64,32x96,128x128 --device-memory 1GiB --bucket-steps 1,1
expect 0 "advise with bucket_shapes advises for the largest bucket" "3 buckets: advising for the largest, 128x128" -- \
  "$bin" advise --set model_preset=dit-tiny --set bucket_shapes=64x64,32x96,128x128 --device-memory 1GiB
expect 0 "... and gives each bucket's time and peak under its advice" \
  "bucket 32x96 +12 image tokens  predicted peak [0-9.]+ MiB, [0-9.]+ s/step" -- \
  "$bin" advise --set model_preset=dit-tiny --set bucket_shapes=64x64,32x96,128x128 --device-memory 1GiB
expect 0 "... then advises each other bucket alone; where none beats the run's advice, one schedule serves them all" \
  "every bucket's own advice is within 3 % of the run's: one schedule serves them all" -- \
  "$bin" advise --set model_preset=dit-tiny --set bucket_shapes=64x64,32x96,128x128 --device-memory 1GiB
expect 0 "a one-bucket plan at 512x512 is resolution 512's" "predicted peak device memory of a training step 702.48 MiB" -- \
  "$bin" plan --set model_preset=dit-s2 --set resolution=512
expect 1 "a bucket edge that is not whole patches is refused with the nearest" \
  "bucket_shapes: 830x480; flux takes edges of whole patches, multiples of 16 pixels .* 832x480 is the nearest" -- \
  "$bin" plan --set model_preset=flux-dev --set bucket_shapes=830x480
expect 1 "a bucket that is not WxH is refused by name" "bucket_shapes: \"832by480\" is not a shape" -- \
  "$bin" plan --set model_preset=flux-dev --set bucket_shapes=832by480
expect 1 "num_frames of LTX-Video not 8 k + 1 is refused with the rule" "num_frames: 21; this video family takes 8 k \\+ 1 frames" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/ltxvideo-0.9.5-t2v.peft-lora.json" --set base_model_precision=no_change --set pretrained_model_name_or_path= --set num_frames=21
expect 0 "SimpleTuner's ltxvideo2 example plans LTX-2.0 19B at 121 frames: 16 latent frames, one audio latent a frame" \
  "model ltxvideo2-19b \\(ltxvideo2\\): 48 cross-attention blocks, width 4096, 32 heads, 3600 video \\+ 121 audio" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/ltxvideo2-19b-t2v.peft-lora.json" --set base_model_precision=no_change --set num_frames=121
expect 0 "SimpleTuner's lumina2 example plans Lumina-Image 2.0 at its real size, all three sequences" \
  "plan noise_refiner: 0-1 ckpt in segments of 1" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/lumina2.peft-lora.json"
trains_one_step "lumina2 trains with SimpleTuner's objective (the model's time 1 - t, its output negated)" lumina -- \
  --set model_family=lumina2 --set model_preset=lumina2-tiny
expect 0 "SimpleTuner's boogu_image example plans Boogu-Image 0.1 at 1024 px: refiners, double- then single-stream" \
  "model boogu-image \\(boogu_image\\): 2 \\+ 2 refiner blocks, 8 double-stream and 40 single-stream layers, width 3072" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/boogu-image-v0.1.peft-lora.json"
trains_one_step "boogu_image trains with SimpleTuner's objective (the model's time 1 - t, its target latents - noise)" boogu -- \
  --set model_family=boogu_image --set model_preset=boogu-image-tiny
expect 0 "SimpleTuner's z-image example plans Z-Image's 6B transformer at 1024 px area" \
  "model z-image \\(z_image\\): 2 \\+ 2 refiner blocks, 30 joint blocks, width 3840, 30 heads, 4096 image \\+ 512" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/z-image.peft-lora.json" --set base_model_precision=no_change
expect 0 "plan says which of Flux's blocks live on the host, counting its two block lists as one (docs/WEIGHTS.md)" \
  "the frozen weights of transformer_blocks 1 and single_transformer_blocks 0-1 in host memory" -- \
  "$bin" plan --set model_preset=flux-tiny --set model_type=lora --set lora_rank=4 --set musubi_blocks_to_swap=3
expect 0 "plan --parts marks the parts Flux holds on the host" \
  "single_transformer_blocks\\.\\*\\.proj_out .* 4 on the host \\(swapped blocks\\)" -- \
  "$bin" plan --parts --set model_preset=flux-tiny --set model_type=lora --set lora_rank=4 --set musubi_blocks_to_swap=3
expect 1 "musubi_blocks_to_swap is refused past Flux's blocks less one, naming both lists" \
  "transformer_blocks 2 \\+ single_transformer_blocks 2\\): at most 3 swap" -- \
  "$bin" plan --set model_preset=flux-tiny --set model_type=lora --set lora_rank=4 --set musubi_blocks_to_swap=4
expect 0 "SimpleTuner's ernie example plans ERNIE-Image's 8B transformer at 512 px" \
  "model ernie-image \\(ernie\\): 36 joint blocks, width 4096, 32 heads, 1024 image \\+ 256 text tokens" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/ernie.peft-lora.json" --set base_model_precision=no_change \
  --set ramtorch=false
expect 0 "SimpleTuner's ideogram example plans Ideogram 4 at 1024 px area" \
  "model ideogram-4 \\(ideogram\\): 34 joint blocks, width 4608, 18 heads, 4096 image \\+ 256 text tokens" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/ideogram-fp8.peft-lora.json"
expect 0 "SimpleTuner's omnigen example plans OmniGen v1 (Phi-3's 32 blocks) at 1024 px" \
  "model omnigen-v1 \\(omnigen\\): 32 joint blocks, width 3072, 32 heads, 4096 image \\+ 128 text tokens" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/omnigen.lycoris-lokr.json" --set lora_type=standard
expect 1 "a run whose plan needs more memory than this machine has is refused before it allocates, not killed" \
  "the plan's peak is .* but this machine has .* available: the system would kill the run mid-step" -- \
  "$bin" train --config empty.json --set model_preset=dit-xl2 --set resolution=4096 --set train_batch_size=16 \
  --set output_dir=huge-out
trains_one_step "omnigen trains with SimpleTuner's objective on the stand-in's token ids" omnigen -- \
  --set model_family=omnigen --set model_preset=omnigen-tiny
expect 0 "SimpleTuner's krea2 example plans Krea 2 Raw at 1024 px: two text fusion sequences, then the joint one" \
  "model krea2 \\(krea2\\): 2 \\+ 2 text fusion blocks, 28 joint blocks, width 6144, 48 heads, 4096 image" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/krea2.peft-lora.json" --set base_model_precision=no_change --set pretrained_model_name_or_path=
trains_one_step "krea2 trains with SimpleTuner's objective" krea2 -- \
  --set model_family=krea2 --set model_preset=krea2-tiny
trains_one_step "flux3_image trains with the rectified-flow objective" flux3 -- \
  --set model_family=flux3_image --set model_preset=flux3-tiny
expect 0 "SimpleTuner's zlab_i1 example plans i1-3B at 1024 px as written: dual-stream blocks with long skips" \
  "model zlab-i1-3b \\(zlab_i1\\): 14 \\+ 1 \\+ 14 dual-stream blocks with long skips, 2 adapter layers, width 2016" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/zlab-i1.peft-lora.json"
trains_one_step "zlab_i1 trains with SimpleTuner's objective" zlab -- \
  --set model_family=zlab_i1 --set model_preset=zlab-i1-tiny
expect 0 "SimpleTuner's mageflow example plans Mage-Flow at 1024 px (its fp8wo-torchao base unquantized), 11 blocks swapped" \
  "model mageflow \\(mageflow\\): 12 joint blocks, width 3072, 24 heads, 4096 image \\+ 2048 text tokens of 1024 px" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/mageflow-image-24g.peft-lora.json" --set base_model_precision=no_change
expect 0 "SimpleTuner's heartmula example plans HeartMuLa oss 3B under the token objective" \
  "model heartmula-3b \\(heartmula\\): 28 backbone layers, width 3072, 24 heads \\(8 key-value\\); 3 decoder layers" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/heartmula.peft-lora.json"
expect 1 "heartmula trains on a token cache or synthetic_data: what segtrain does not read said by name" \
  "model_family heartmula trains on audio codec tokens: give a token cache .* segtrain reads no audio backend" -- \
  "$bin" train --set model_family=heartmula --set model_preset=heartmula-tiny --set max_train_steps=1 \
  --set output_dir=heartmula-out
expect 0 "heartmula trains on the committed token cache (make_cache.py --family heartmula), padded to 16 rows" \
  "segtrain: training on the token cache .*: 4 samples, each padded to 16 rows of 4 codebooks" -- \
  "$bin" train --set model_family=heartmula --set model_preset=heartmula-tiny --set max_train_steps=2 \
  --set num_frames=16 --set train_batch_size=2 --set data_cache_dir="$fix/cache-heartmula-tiny" \
  --set output_dir=heartmula-cache-out
trains_one_step "heartmula trains on synthetic tokens with SimpleTuner's token objective" heartmula -- \
  --set model_family=heartmula --set model_preset=heartmula-tiny --set train_batch_size=2
expect 0 "SimpleTuner's longcat_video example plans LongCat-Video (its ramtorch streaming every block)" \
  "model longcat-video \\(longcat_video\\): 48 cross-attention blocks" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/longcat-video.peft-lora+ramtorch.json"
trains_one_step "longcat_video trains with SimpleTuner's flow objective (SwiGLU, fused q k v, zero-padded caption)" \
  longcat_video -- --set model_family=longcat_video --set model_preset=longcat-video-tiny
trains_one_step "mageflow trains with SimpleTuner's flow objective (a batch of 3: a rotary frame per sample)" mageflow -- \
  --set model_family=mageflow --set model_preset=mageflow-tiny --set train_batch_size=3
expect 0 "SimpleTuner's wan_s2v example plans Wan2.2-S2V-14B at 832x480, 81 frames: the reference tokens, 12 audio injectors, ramtorch" \
  "model wan-s2v-14b \\(wan_s2v\\): 40 cross-attention blocks \\(\\+ 1560 reference tokens\\), 12 audio injectors, width 5120" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/wan-s2v-14b-480p.peft-lora+ramtorch.json" --set pretrained_model_name_or_path= --set bucket_shapes=832x480@81
trains_one_step "wan_s2v trains with SimpleTuner's objective (the stand-in's zero audio and reference)" wans2v -- \
  --set model_family=wan_s2v --set model_preset=wan-s2v-tiny
trains_one_step "qwen_image's v2.1 (segtrain's flavour) trains Qwen-Image 2.1 with SimpleTuner's objective" qwen21 -- \
  --set model_family=qwen_image --set model_flavour=v2.1 --set model_preset=qwen-image-2.1-tiny
trains_one_step "sana trains: linear self-attention, the cross-attention, GLUMBConv" sana -- \
  --set model_family=sana --set model_flavour=sana1.0-600m-1024 --set model_preset=sana-tiny
expect 0 "SimpleTuner's sana example plans its default flavour, Sana 1.5 4.8B, at 1024 px" \
  "model sana-1.5-4.8b-1024 \\(sana\\): 60 cross-attention blocks, width 2240, 70 heads, 1024 image \\+ 300 text" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/sana.lycoris-lokr.json" --set lora_type=standard --set pretrained_model_name_or_path=
expect 0 "sd1x trains: the U-Net's micro-blocks, skips from the down path to the up path" \
  "trained 1 steps; weights in sd1x-out/model.safetensors" -- \
  "$bin" train --config empty.json --set model_family=sd1x --set model_preset=sd1x-tiny --set synthetic_data=true \
  --set max_train_steps=1 --set output_dir=sd1x-out
expect 0 "sd1x LoRA trains: its adapters saved under unet., as diffusers' U-Net pipelines load them" \
  "trained 1 steps; weights in sd1x-lora/pytorch_lora_weights.safetensors" -- \
  "$bin" train --config empty.json --set model_family=sd1x --set model_preset=sd1x-tiny --set synthetic_data=true \
  --set max_train_steps=1 --set model_type=lora --set lora_rank=4 --set output_dir=sd1x-lora
expect 0 "the sd1x LoRA file names its adapters and metadata under unet." \
  "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight" -- \
  grep -a -o -m1 "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight" \
  sd1x-lora/pytorch_lora_weights.safetensors
# fine-tuning an epsilon-prediction family's checkpoint says that segtrain's objective is the rectified flow
"$bin" init --config empty.json --set model_family=sd1x --set model_preset=sd1x-tiny --out sd1x-w.safetensors >/dev/null
expect 0 "training sd1x from a checkpoint warns that SimpleTuner's objective for it is epsilon-prediction" \
  "SimpleTuner trains sd1x as DDPM epsilon-prediction.*retrains what sd1x-w.safetensors predicts" -- \
  "$bin" train --config empty.json --set model_family=sd1x --set model_preset=sd1x-tiny --set synthetic_data=true \
  --set max_train_steps=1 --set output_dir=sd1x-ft --set pretrained_model_name_or_path=sd1x-w.safetensors
out=$("$bin" train --config empty.json --set model_family=sd1x --set model_preset=sd1x-tiny --set synthetic_data=true \
  --set max_train_steps=1 --set output_dir=sd1x-fresh 2>&1)
grep -q "epsilon" <<<"$out" && bad "a freshly initialised sd1x warns of epsilon-prediction" ||
  ok "a freshly initialised sd1x has no prediction to retrain: no warning"
expect 1 "advise refuses to calibrate with a step bigger than the machine's memory, in one line" \
  "needs [0-9.]+ GiB; this machine has [0-9.]+ GiB of memory" -- \
  "$bin" advise --config empty.json --set model_family=wan --set train_batch_size=4096 --device-memory 80GiB
expect 1 "advise names what a U-Net refuses (boundary offload: skips) instead of a peak; nothing fits 1 MiB" \
  "unsloth interval 1 +unsupported: this family refuses it" -- \
  "$bin" advise --config empty.json --set model_family=sd1x --set model_preset=sd1x-tiny --set synthetic_data=true \
  --device-memory 1MiB --steps 1
expect 0 "SimpleTuner's sd1x example plans Dreamshaper 8 (SD 1.5's U-Net) at 512 px" \
  "model sd15 \\(sd1x\\): U-Net of 45 micro-blocks, levels of 320, 640, 1280, 1280 \\(no attention\\) channels" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/sd1x-dreamshaper.peft-lora.json" --set pretrained_model_name_or_path=
expect 0 "sdxl trains: SDXL's U-Net, its pooled text and size ids" \
  "trained 1 steps; weights in sdxl-out/model.safetensors" -- \
  "$bin" train --config empty.json --set model_family=sdxl --set model_preset=sdxl-tiny --set synthetic_data=true \
  --set max_train_steps=1 --set output_dir=sdxl-out
expect 0 "SimpleTuner's sdxl example plans SDXL base 1.0 at 1024 px" \
  "model sdxl \\(sdxl\\): U-Net of 33 micro-blocks, levels of 320 \\(no attention\\), 640, 1280 channels" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/sdxl.lycoris-lokr.json" --set lora_type=standard
expect 0 "SimpleTuner's kolors example plans Kolors 1.0 at 1024 px: ChatGLM3's text projected to 2048" \
  "model kolors \\(kolors\\): U-Net of 33 micro-blocks, levels of 320 \\(no attention\\), 640, 1280 channels" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/kolors.peft-lora.json"
trains_one_step "stable_cascade trains: stage C's ResBlocks, timestep and attention blocks" cascade -- \
  --set model_family=stable_cascade --set model_preset=stable-cascade-tiny
expect 0 "SimpleTuner's stable_cascade example plans stage C at 1024 px: 195 micro-blocks" \
  "model stable-cascade-c \\(stable_cascade\\): 195 micro-blocks, levels of \\[ResBlock, TimestepBlock" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/cascade-stage-c.lycoris-lokr.json" --set lora_type=standard
trains_one_step "sanavideo trains: Sana's blocks over video frames, the temporal convolution" sanavideo -- \
  --set model_family=sanavideo --set model_preset=sanavideo-tiny --set num_frames=9
expect 0 "SimpleTuner's sanavideo example plans SANA-Video 2B at 480 px" \
  "model sanavideo-2b-480p \\(sanavideo\\): 20 cross-attention blocks, width 2240, 20 heads, 900 image \\+ 300" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/sanavideo-2b-480p.peft-lora.json" --set base_model_precision=no_change --set pretrained_model_name_or_path=
trains_one_step "cosmos3 trains: the prompt's ids and the latents through their own weights, one attention" cosmos3 -- \
  --set model_family=cosmos3 --set model_preset=cosmos3-tiny
expect 0 "SimpleTuner's cosmos3 image example plans Cosmos3-Nano at 1024 px: 1024 latent + 512 prompt rows" \
  "model cosmos3-nano \\(cosmos3\\): 36 mixture-of-transformers layers, heads 128 wide, 8 kv heads, width 4096" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/cosmos3-image.lycoris-lokr.json" --set lora_type=standard
trains_one_step "minimaxh3 trains with SimpleTuner's objective (its time 1 - sigma, its output negated)" minimax -- \
  --set model_family=minimaxh3 --set model_preset=minimaxh3-tiny
expect 1 "minimaxh3 takes num_frames of its VAE's chunks, 17 k + 5" \
  "num_frames: 41; MiniMax-H3 takes 1 or 17 k \\+ 5" -- \
  "$bin" plan --config empty.json --set model_family=minimaxh3 --set num_frames=41
expect 0 "minimaxh3 plans MiniMax-H3 at 39 frames of 480 px: 12 latent frames" \
  "2700 image \\+ 512 text tokens of 39-frame 480 px video \\(12 x 30 x 30 latent" -- \
  "$bin" plan --config empty.json --set model_family=minimaxh3 --set num_frames=39 --set resolution=480 \
  --set model_type=lora --set lora_rank=16
trains_one_step "ideogram trains with SimpleTuner's objective" ideogram -- \
  --set model_family=ideogram --set model_preset=ideogram-tiny
expect 0 "planning ernie says its caption length is segtrain's choice, and which key sets it" \
  "warning: SimpleTuner pads each ernie batch's captions to its longest, .* at 256 tokens \\(tokenizer_max_length" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/ernie.peft-lora.json" --set base_model_precision=no_change \
  --set ramtorch=false
trains_one_step "ernie trains with SimpleTuner's objective" ernie -- \
  --set model_family=ernie --set model_preset=ernie-tiny
trains_one_step "z_image trains (its base flavour) with SimpleTuner's objective" zimage -- \
  --set model_family=z_image --set model_flavour=base --set model_preset=z-image-tiny
expect 0 "plan --parts lists HiDream's expert weights as one line per kind" \
  "double_stream_blocks\\.\\*\\.block\\.ff_i\\.experts\\.\\*\\.w1 " -- \
  "$bin" plan --config empty.json --set model_preset=hidream-tiny --parts
expect 0 "plan --parts lists what is live at the peak: without checkpointing, every block's routing state" \
  "hidream\\.moe\\.route  *activations  *2 x" -- \
  "$bin" plan --config empty.json --set model_preset=hidream-tiny --parts
expect 0 "SimpleTuner's qwen_image example plans Qwen-Image at its real size" \
  "model qwen-image \\(qwen_image\\): 60 joint blocks, width 3072, 24 heads, 4096 image \\+ 1024 text tokens" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/qwen_image.peft-lora.json" --set base_model_precision=no_change
expect 0 "SimpleTuner's sd3 example plans SD3.5 medium, its default flavour, at its real size" \
  "model sd35-medium \\(sd3\\): 24 joint blocks, width 1536, 24 heads, 4096 image \\+ 231 text tokens" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/sd3.peft-lora.json"
expect 0 "SD3's flavour large is SD3.5 large" "model sd35-large \\(sd3\\): 38 joint blocks, width 2432, 38 heads" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/sd3.peft-lora.json" --set model_flavour=large
expect 0 "an SD3 diffusers folder brings its architecture (its config.json: 2 blocks, attn2 in block 0)" \
  "model sd35-medium \\(sd3\\): 2 joint blocks, width 32, 2 heads, 16 image \\+ 231 text tokens" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/sd3.peft-lora.json" \
  --set pretrained_model_name_or_path="$src/tests/fixtures/sd35-medium" --set resolution=64
expect 1 "SD3's positions: a grid past pos_embed_max_size is refused by name" \
  "pos_embed_max_size: 8; sd3's table must cover the 64 x 64 patch grid" -- \
  "$bin" plan --config "$src/tests/fixtures/simpletuner/sd3.peft-lora.json" \
  --set pretrained_model_name_or_path="$src/tests/fixtures/sd35-medium"
expect 0 "a diffusers folder of weights brings its architecture (its own config.json)" \
  "model flux-dev \\(flux\\): 2 double-stream \\+ 2 single-stream blocks, width 32, 2 heads, 16 image \\+ 512 text tokens" -- \
  "$bin" plan --config st.json --set pretrained_model_name_or_path="$src/tests/fixtures/flux-schnell" --set resolution=64
expect 0 "resolution is in image pixels: 1024 on dit-s2 is 4096 tokens" "4096 tokens" -- \
  "$bin" plan --config empty.json --set model_preset=dit-s2 --set resolution=1024

# numbers on the command line: each flag by name, the whole string, in range; a bad one is one line naming the flag
# and what is valid, exit 2, before anything is read or made (missing.json is never opened)
num() { # num COMMAND FLAG VALUE VALID [more arguments]
  local c=$1 f=$2 v=$3 valid=$4; shift 4
  local out; out=$("$bin" "$c" --config missing.json "$@" "$f" "$v" 2>&1); local rc=$?
  [ $rc -eq 2 ] && [ "$out" = "segtrain $c: $f takes $valid, got '$v'" ] && ok "$c $f '$v': one line, exit 2" ||
    bad "$c $f '$v' (exit $rc): $out"
}
num sweep --steps 2x "a whole number from 1 to 1000000" --out never-sweep
num sweep --timeout "" "a whole number from 1 to 2147483647" --out never-sweep
num sweep --warmup 1e3 "a whole number from 0 to 1000000" --out never-sweep
[ ! -e never-sweep ] && ok "a sweep refused for its flags makes no folder" || bad "a refused sweep made never-sweep"
num profile --warmup 1.5 "a whole number from 0 to 1000000"
num profile --steps " 2" "a whole number from 1 to 1000000"
num advise --steps 3steps "a whole number from 1 to 1000000" --device-memory 1GiB
num sample --guidance nan "a number >= 0" --weights w.safetensors --out never.png
num sample --seed -1 "a whole number >= 0" --weights w.safetensors --out never.png
expect 2 "a number given as --flag=value is read the same way" "^segtrain profile: --steps takes a whole number from 1 to 1000000, got '0'$" -- \
  "$bin" profile --config missing.json --steps=0
expect 2 "sample: --classes against the model's classes" "^segtrain sample: --classes takes a whole number from 1 to 10, got '11'$" -- \
  "$bin" sample --config tiny.json --weights w.safetensors --out never.png --classes 11

# buckets: every image of data_backend_config in the bucket segtrain's one assignment gives it
sed "s#\"tests/fixtures/#\"$fix/#" "$fix/cache-buckets-source/multidatabackend.json" > backends.json
bk=(--config "$fix/cache-buckets-source/config.json" --set data_backend_config=backends.json)
expect 0 "buckets --help" "make_cache.py --buckets" -- "$bin" buckets --help
expect 0 "buckets: a line per bucket" "^1 +aspects +2.0 +32x16 +1 +1$" -- "$bin" buckets "${bk[@]}"
expect 0 "buckets: a line per image" "^40x24 +26x16 +\(0, 1\) +3 +.*/bucket-images/wide_owl.png$" -- "$bin" buckets "${bk[@]}"
expect 0 "buckets --json" '"crop":[[:space:]]+\[4, 0\]' -- "$bin" buckets "${bk[@]}" --json
expect 0 "advise plans the data's buckets, as plan and train read them" "^4 buckets: advising for the largest, 32x16" -- \
  "$bin" advise "${bk[@]}" --device-memory 1GiB --steps 1
expect 1 "... and --bucket-steps gives a count for each of the data's buckets" "--bucket-steps: \"1,1\" is not 4 step counts" -- \
  "$bin" advise "${bk[@]}" --device-memory 1GiB --steps 1 --bucket-steps 1,1
expect 1 "buckets without data_backend_config" "^segtrain buckets: data_backend_config is empty" -- "$bin" buckets \
  --config tiny.json
expect 1 "buckets: an alignment the model cannot take" "aspect_bucket_alignment 5 is not a multiple of 2" -- \
  "$bin" buckets "${bk[@]}" --set aspect_bucket_alignment=5
# a video backend: its clips (folders of PNG frames) in buckets of width, height and frames, to be cached
sed "s#\"tests/fixtures/#\"$fix/#" "$fix/bucket-clips.json" > clips.json
vk=(--set model_family=wan --set model_preset=wan-tiny --set aspect_bucket_alignment=16 --set resolution=32
    --set data_backend_config=clips.json)
expect 0 "buckets: a video backend's clips in WxH@F buckets" "^1 +clips +32x32@9 +32x32@9 +2 +2$" -- "$bin" buckets "${vk[@]}"
expect 0 "buckets: each clip with its own frames" "^32x32@10 +32x32 +\(0, 0\) +1 +.*/bucket-clips/green_square$" -- \
  "$bin" buckets "${vk[@]}"
expect 0 "buckets --json: a clip's frames and its bucket's" '"clip_frames":[[:space:]]+10,' -- "$bin" buckets "${vk[@]}" --json
expect 1 "train on a video backend (in pixel space) is refused, naming the cache's way" "is a video dataset.*make_cache.py --buckets" -- \
  "$bin" train "${vk[@]}" --set in_channels=3 --set vae_scale_factor=1 --set output_dir=never-clips
expect 0 "plan of a cache of clips of two lengths lists its buckets as WxH@F" "^  bucket 32x32@17 .*\(the run's peak\)$" -- \
  "$bin" plan --set model_family=wan --set model_preset=wan-tiny --set data_cache_dir="$fix/cache-wan-frames-tiny"

finish
