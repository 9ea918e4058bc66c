#!/usr/bin/env bash
# Every command example of README.md runs as written from the repository's root: the ```sh blocks, each as one
# script, and the `$ ` lines of the transcripts, each expected to exit 0 unless the transcript shows the command's
# error line ("segtrain CMD: ..."), then expected to fail with that line (up to its first "..."). `make` lines are the front door itself (make test runs
# this) and are skipped; mpirun lines are skipped where mpirun is absent. Sizes are the only change: build/segtrain
# is a wrapper that gives train, sample, sweep and advise fewer steps (and sweep and advise a batch of 1), so that
# the 4000-step runs take seconds. Usage: readme_examples_test.sh path/to/segtrain path/to/source
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# a fresh clone's root: the checkout's files, and build/segtrain
for e in "$src"/*; do [ "$(basename "$e")" = build ] || ln -s "$e" "$tmp/"; done
mkdir "$tmp/build" "$tmp/examples"
cat >"$tmp/build/segtrain" <<EOF
#!/usr/bin/env bash
args=("\$@") i=0
while [ "\${args[i]:-}" = --threads ]; do i=\$((i + 2)); done
case "\${args[i]:-}" in
  train) extra=(--set max_train_steps=2 --set checkpoint_step_interval=0 --set validation_steps=0) ;;
  sample) extra=(--steps 2) ;;
  sweep) extra=(--warmup 0 --steps 1 --set train_batch_size=1) ;;
  advise) extra=(--steps 1 --set train_batch_size=1) ;;
  *) extra=() ;;
esac
exec "$bin" "\$@" "\${extra[@]}"
EOF
chmod +x "$tmp/build/segtrain"

# Writes each example into examples/NNN.sh (with NNN.expect holding "fail PATTERN" for a transcript's refusal) and
# prints the count.
awk -v dir="$tmp/examples" '
  function put(text, expect) { n++; f = sprintf("%s/%03d.sh", dir, n); printf "%s", text > f; close(f)
                               if (expect != "") { printf "%s\n", expect > (f ".expect"); close(f ".expect") } }
  function flush_cmd() { if (cmd != "") { put(cmd, expect); cmd = ""; expect = "" } }
  /^```sh$/ { sh = 1; block = ""; next }
  /^```/ && sh { sh = 0; if (block != "") put(block, ""); next }
  sh { if ($0 !~ /^make /) block = block $0 "\n"; next }
  /^```/ { flush_cmd(); plain = !plain; cont = 0; next }
  plain && cont { cmd = cmd $0 "\n"; cont = /\\$/; next }
  plain && /^\$ / { flush_cmd(); if ($0 ~ /^\$ make /) next; cmd = substr($0, 3) "\n"; cont = /\\$/; first = 1; next }
  plain && cmd != "" && first { first = 0; cut = index($0, "...")
                                 if ($0 ~ /^segtrain [a-z-]+: /) expect = "fail " (cut ? substr($0, 1, cut - 1) : $0) }
  END { flush_cmd(); print n + 0 }
' "$src/README.md" >"$tmp/count"

cd "$tmp"
# as root, OpenMPI needs to be told (README says so next to its examples)
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
passed=0 failed=0 skipped=0
for f in examples/*.sh; do
  first=$(grep -m1 'segtrain \|mpirun ' "$f")
  if grep -q '^mpirun ' "$f" && ! command -v mpirun >/dev/null; then
    skipped=$((skipped + 1)); echo "skip $first (no mpirun)"; continue
  fi
  t0=$SECONDS
  out=$(bash -euo pipefail "$f" 2>&1); rc=$?
  first="$first [$((SECONDS - t0)) s]"
  if [ -f "$f.expect" ]; then
    pattern=$(sed 's/^fail //' "$f.expect")
    if [ $rc -ne 0 ] && grep -qF -- "$pattern" <<<"$out"; then passed=$((passed + 1)); echo "ok   $first (refused, as README shows)"
    else failed=$((failed + 1)); echo "FAIL $first: README shows '$pattern', got exit $rc: $(tail -n 3 <<<"$out")"; fi
  elif [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "ok   $first"
  else failed=$((failed + 1)); echo "FAIL $first (exit $rc): $(tail -n 5 <<<"$out")"; fi
done
echo "$passed passed, $failed failed, $skipped skipped of $(cat count) README examples"
[ "$failed" -eq 0 ] && [ "$(cat count)" -ge 10 ]
