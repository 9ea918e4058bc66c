#!/usr/bin/env bash
# What segtrain reads and writes on disk, as an attacker or an unlucky user meets it: FIFOs in place of files, a
# log that cannot be written, two runs on one output_dir, checkpoint metadata out of range, outputs that cannot be
# written. Each case is one clear line and a non-zero exit, under `timeout` so that a hang fails instead of
# blocking the suite. Usage: cli_io_test.sh path/to/segtrain path/to/source
bin=$1 src=$2
EXPECT_TIMEOUT=20
. "$src/tests/clikit.sh"

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
# a config and data_backend_config may be pipes (<(...), /dev/stdin): a FIFO nobody writes to reads as empty
mkfifo backends.json config.json
expect 1 "data_backend_config FIFO without a writer" "data_backend_config backends.json:1:1: malformed JSON" -- \
  "$bin" train $tr --set output_dir=run-db --set data_backend_config=backends.json
expect 1 "--config FIFO without a writer" "config.json:1:1: malformed JSON" -- "$bin" train --config config.json
expect 0 "--config from a pipe" "wrote" -- "$bin" init --config <(cat tiny.json) --out w-pipe.safetensors

# checkpoint metadata: every integer is checked for its form and its range before a resume uses it
set_meta() { # set_meta IN KEY VALUE OUT: IN with its metadata KEY set to VALUE (the safetensors header rewritten)
  local n h m
  n=$(od -An -t u8 -N8 "$1" | tr -d ' ')
  h=$(head -c $((8 + n)) "$1" | tail -c "$n" | LC_ALL=C sed -E "s/\"$2\":\"[^\"]*\"/\"$2\":\"$3\"/")
  while [ $((${#h} % 8)) -ne 0 ]; do h="$h "; done
  m=${#h}
  { printf "$(printf '\\x%02x' $((m & 255)) $((m >> 8 & 255)) $((m >> 16 & 255)) $((m >> 24 & 255)) 0 0 0 0)"
    printf '%s' "$h"; tail -c +$((9 + n)) "$1"; } >"$4"
}
"$bin" train $tr --set max_train_steps=4 --set output_dir=meta >/dev/null 2>&1
ck=meta/checkpoint-000002.safetensors
set_meta $ck segtrain.step 3 edited.safetensors
expect 0 "an edited checkpoint in range resumes at its step" "resumed from edited.safetensors at step 3" -- \
  "$bin" train $tr --set max_train_steps=4 --set output_dir=meta-ok --set resume_from_checkpoint=edited.safetensors
for v in "" "99999999999999999999999" "-9223372036854775809" " 2" "+2" "2x" "0x2" "2.0"; do
  set_meta $ck segtrain.step "$v" edited.safetensors
  expect 1 "segtrain.step \"$v\" is refused" "edited.safetensors: metadata 'segtrain.step' is \"${v//+/\\+}\", not an integer in \[0, 4\]" -- \
    "$bin" train $tr --set max_train_steps=4 --set output_dir=meta-bad --set resume_from_checkpoint=edited.safetensors
done
for v in 5 9223372036854775807 -1; do
  set_meta $ck segtrain.step "$v" edited.safetensors
  expect 1 "segtrain.step $v is out of range" "metadata 'segtrain.step' is $v, outside \[0, 4\].*max_train_steps" -- \
    "$bin" train $tr --set max_train_steps=4 --set output_dir=meta-bad --set resume_from_checkpoint=edited.safetensors
done
for v in 9223372036854775807 2147483648 -1; do
  set_meta $ck segtrain.data_epoch "$v" edited.safetensors
  expect 1 "segtrain.data_epoch $v is out of range" "metadata 'segtrain.data_epoch' is $v, outside \[0, 2147483647\]" -- \
    "$bin" train $tr --set max_train_steps=4 --set output_dir=meta-bad --set resume_from_checkpoint=edited.safetensors
done
set_meta $ck segtrain.data_index 1001 edited.safetensors
expect 1 "segtrain.data_index past the dataset is refused" "metadata 'segtrain.data_index' is 1001, outside \[0, 1000\]" -- \
  "$bin" train $tr --set max_train_steps=4 --set builtin_dataset_size=1000 --set output_dir=meta-bad \
  --set resume_from_checkpoint=edited.safetensors
set_meta $ck segtrain.data_index "" edited.safetensors
expect 1 "an empty segtrain.data_index is refused" "metadata 'segtrain.data_index' is \"\", not an integer" -- \
  "$bin" train $tr --set max_train_steps=4 --set output_dir=meta-bad --set resume_from_checkpoint=edited.safetensors

# train_log.jsonl: a line that cannot be written stops the run like a checkpoint that cannot, and leaves whole
# lines only; a resume repairs a log left torn or spliced
steps() { grep -o '"step": [0-9]*' "$1" | tr -d '"step: ' | tr '\n' ' '; }
whole() { ! grep -qv '^{"step": [0-9]*, "loss": .*"allreduce_seconds": [0-9.]*}$' "$1"; }
for s in 1 3 4; do
  rm -rf log
  expect 1 "a log line that cannot be written at step $s stops the run" \
    "log/train_log.jsonl: cannot write the line of step $s: No space left on device; stopping \(the part written was cut off again" -- \
    env SEGTRAIN_FAULT=log-full-step-$s "$bin" train $tr --set max_train_steps=6 --set checkpoint_step_interval=2 --set output_dir=log
  [ "$(steps log/train_log.jsonl)" = "$(seq 1 $((s - 1)) | tr '\n' ' ')" ] && whole log/train_log.jsonl &&
    ok "... and the log holds the steps before it, whole" || bad "log after a failed write at step $s: $(cat log/train_log.jsonl)"
  expect 0 "... and a resume does step $s again" "trained 6 steps" -- \
    "$bin" train $tr --set max_train_steps=6 --set checkpoint_step_interval=2 --set output_dir=log --set resume_from_checkpoint=latest
  [ "$(steps log/train_log.jsonl)" = "1 2 3 4 5 6 " ] && whole log/train_log.jsonl &&
    ok "... which logs each step once" || bad "log after the resume: $(cat log/train_log.jsonl)"
done
mkdir -p full && ln -s /dev/full full/train_log.jsonl
expect 1 "a log on a full device stops the run at step 1" "full/train_log.jsonl: cannot write the line of step 1: No space left on device" -- \
  "$bin" train $tr --set output_dir=full
# a log torn in its last line and one with a line spliced from two (as an older segtrain left on a disk that filled)
rm -rf log && "$bin" train $tr --set max_train_steps=4 --set checkpoint_step_interval=2 --set output_dir=log >/dev/null 2>&1
rm log/checkpoint-000004.safetensors
head -c -20 log/train_log.jsonl > torn && cp torn log/train_log.jsonl
expect 0 "a torn last line is dropped at the resume" "dropped 1 torn or spliced line" -- \
  "$bin" train $tr --set max_train_steps=4 --set output_dir=log --set resume_from_checkpoint=latest
[ "$(steps log/train_log.jsonl)" = "1 2 3 4 " ] && whole log/train_log.jsonl && ok "... and the log is whole" ||
  bad "log after repairing a torn line: $(cat log/train_log.jsonl)"
{ sed -n 1p log/train_log.jsonl | head -c 30; sed -n 2p log/train_log.jsonl; sed -n '3,4p' log/train_log.jsonl; } > spliced
cp spliced log/train_log.jsonl && rm log/checkpoint-000004.safetensors
expect 0 "a spliced line is dropped at the resume" "dropped 1 torn or spliced line" -- \
  "$bin" train $tr --set max_train_steps=4 --set output_dir=log --set resume_from_checkpoint=latest
[ "$(steps log/train_log.jsonl)" = "3 4 " ] && whole log/train_log.jsonl && ok "... and the log is whole" ||
  bad "log after repairing a spliced line: $(cat log/train_log.jsonl)"

# two runs on one output_dir: the second is refused, naming the first's pid; a killed run's lock does not block
"$bin" train $tr --set max_train_steps=1000000 --set checkpoint_step_interval=0 --set output_dir=busy >busy.out 2>&1 &
first=$!
for i in $(seq 600); do [ -s busy/train_log.jsonl ] && break; sleep 0.05; done
expect 1 "a second run on a live run's output_dir is refused" \
  "output_dir busy is in use by another run \(pid $first, which holds busy/.segtrain.lock\)" -- \
  "$bin" train $tr --set output_dir=busy --set resume_from_checkpoint=latest
expect 1 "... also with another seed and no resume" "output_dir busy is in use by another run \(pid $first" -- \
  "$bin" train $tr --set output_dir=busy --set seed=7
kill -0 $first 2>/dev/null && ok "... and the first run goes on" || bad "the first run died: $(tail -n 2 busy.out)"
kill -KILL $first; wait $first 2>/dev/null
[ -f busy/.segtrain.lock ] || bad "the killed run left no lock file (the stale case is not tested)"
sleep 0 & wait $!; dead=$!
touch "busy/checkpoint-000009.safetensors.tmp.$$" "busy/checkpoint-000009.safetensors.tmp.$dead"
expect 0 "a killed run's lock does not block the next" "trained 2 steps" -- \
  "$bin" train $tr --set output_dir=busy --set resume_from_checkpoint=latest
[ -f "busy/checkpoint-000009.safetensors.tmp.$$" ] && [ ! -f "busy/checkpoint-000009.safetensors.tmp.$dead" ] &&
  ok "the tidy-up removes a dead pid's temporary file and keeps a live one's" || bad "tidy-up: $(ls busy)"
expect 0 "runs one after another share an output_dir" "trained 2 steps" -- "$bin" train $tr --set output_dir=busy

# an output that cannot be written is found before the work, and the error names the user's path
mkdir -p outdir
for out in nodir/g.safetensors outdir /dev/null; do
  o=$(timeout 20 "$bin" grad --config tiny.json --weights w.safetensors --batch b.safetensors --out "$out" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "segtrain grad: $out: " <<<"$o" && ! grep -q "tmp\.\|^loss\|peak device" <<<"$o" &&
    ok "grad --out $out: refused before the step, naming it" || bad "grad --out $out (exit $rc): $o"
  png=${out/g.safetensors/s.png}
  o=$(timeout 20 "$bin" sample --config tiny.json --set in_channels=3 --weights w3.safetensors --out "$png" \
    --steps 1 --per-class 1 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "segtrain sample: $png: " <<<"$o" && ! grep -q "tmp\.\|^wrote" <<<"$o" &&
    ok "sample --out $png: refused, naming it" || bad "sample --out $png (exit $rc): $o"
done
# the output is checked before anything is loaded or computed: its error comes before a missing input's
expect 1 "sample checks --out before it loads the weights" "segtrain sample: outdir: is a folder" -- \
  "$bin" sample --config tiny.json --set in_channels=3 --weights missing.safetensors --out outdir --steps 1 --per-class 1
expect 1 "grad checks --out before it loads the weights" "segtrain grad: outdir: is a folder" -- \
  "$bin" grad --config tiny.json --weights missing.safetensors --batch b.safetensors --out outdir
expect 1 "grad --out in a missing folder names the folder's error" "nodir/g.safetensors: cannot write there: No such file" -- \
  "$bin" grad --config tiny.json --weights w.safetensors --batch b.safetensors --out nodir/g.safetensors
if [ "$(id -u)" != 0 ]; then
  mkdir -p ro && chmod 555 ro
  expect 1 "sample --out in a read-only folder" "ro/s.png: cannot write there: Permission denied" -- \
    "$bin" sample --config tiny.json --set in_channels=3 --weights w3.safetensors --out ro/s.png --steps 1 --per-class 1
  chmod 755 ro
fi
ls | grep -q '\.tmp\.' && bad "a temporary file was left: $(ls | grep '\.tmp\.')" || ok "the checks leave no temporary file"

finish
