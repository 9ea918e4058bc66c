#!/usr/bin/env bash
# A shared machine (issue 39): segtrain's OpenMP threads spin briefly, then sleep, unless the user chose otherwise, and
# selfcheck says whether the machine is loaded. Usage: cli_busy_test.sh path/to/segtrain path/to/source
bin=$1 src=$2
. "$src/tests/clikit.sh"
# what libgomp settled on, as it prints it (OMP_DISPLAY_ENV=verbose, at load): the last process's values
spin_of() { grep -o "GOMP_SPINCOUNT = '[0-9]*'" | tail -1 | tr -dc 0-9; }
plain() { env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u SEGTRAIN_OMP_DEFAULTS OMP_DISPLAY_ENV=verbose "$@"; }

# no policy set: segtrain starts itself again with GOMP_SPINCOUNT=1000 before any work
out=$(plain "$bin" version 2>&1); rc=$?
spins=$(spin_of <<<"$out")
[ "$rc" = 0 ] && [ "$spins" = 1000 ] && [ "$(grep -c '^segtrain ' <<<"$out")" = 1 ] &&
  ok "unset: 1000 spins, the command run once" || bad "unset: exit $rc, spin count '$spins': $out"
# the user's choice wins, and then nothing is started again (one display of the environment; OpenBLAS's own
# kernels kept, else a CPU newer than OpenBLAS would start it again for those)
for set in OMP_WAIT_POLICY=active:30000000000 OMP_WAIT_POLICY=passive:0 GOMP_SPINCOUNT=5000:5000 \
  SEGTRAIN_OMP_DEFAULTS=1:300000; do
  out=$(plain env SEGTRAIN_BLAS_DEFAULTS=1 "${set%:*}" "$bin" version 2>&1)
  spins=$(spin_of <<<"$out")
  [ "$spins" = "${set##*:}" ] && [ "$(grep -c 'GOMP_SPINCOUNT' <<<"$out")" = 1 ] &&
    ok "${set%:*}: spin count $spins, started once" || bad "${set%:*}: spin count '$spins', want ${set##*:}: $out"
done
# OpenBLAS's kernels: where it loads older ones than the CPU takes, segtrain starts with better ones (selfcheck's
# note is gone) unless OPENBLAS_CORETYPE or SEGTRAIN_BLAS_DEFAULTS=1 says otherwise; on a CPU OpenBLAS knows there is
# nothing to change and no note either way
own=$(plain env -u OPENBLAS_CORETYPE SEGTRAIN_BLAS_DEFAULTS=1 "$bin" selfcheck 2>&1)
out=$(plain env -u OPENBLAS_CORETYPE "$bin" selfcheck 2>&1)
if grep -q "^note .*gives faster GEMMs" <<<"$own"; then
  better=$(sed -n 's/^note .*OPENBLAS_CORETYPE=\([A-Za-z0-9]*\) gives faster GEMMs/\1/p' <<<"$own")
  ! grep -q "^note .*faster GEMMs" <<<"$out" && grep -q "^blas .* $better MAX_THREADS" <<<"$out" &&
    ok "older kernels than the CPU takes: started with $better" || bad "kernels not changed: $out"
else
  ! grep -q "^note .*faster GEMMs" <<<"$out" && ok "OpenBLAS knows this CPU: its kernels kept" || bad "kernels: $out"
fi
# with no --threads, the threads take the cores that other processes leave free: beside a spinning process there
# are fewer than all; --threads and OMP_NUM_THREADS still say how many
cores=$(nproc)
if [ "$cores" -gt 1 ]; then
  sh -c 'while :; do :; done' & spinner=$!
  sleep 0.3
  threads_of() { "$@" selfcheck 2>&1 | sed -n 's/^threads  \([0-9]*\) .*/\1/p'; }
  free=$(threads_of "$bin") given=$(threads_of "$bin" --threads "$cores") env_given=$(OMP_NUM_THREADS=$cores threads_of "$bin")
  # a plan is not a step: it keeps every core, so that its peak (attention's workspace is per thread) does not follow
  # the load (auraflow under unsloth offload printed 1023.59 MiB of workspace beside a busy process, 1.00 GiB alone)
  plan=(plan --json --set model_preset=auraflow --set gradient_checkpointing=true
    --set gradient_checkpointing_backend=unsloth --set gradient_checkpointing_offload_attention=true)
  busy_plan=$("$bin" "${plan[@]}" 2>&1) all_plan=$("$bin" --threads "$cores" "${plan[@]}" 2>&1)
  kill $spinner; wait $spinner 2>/dev/null
  [ -n "$busy_plan" ] && [ "$busy_plan" = "$all_plan" ] && ok "beside a busy process, plan predicts for all $cores cores" ||
    bad "plan beside a busy process differs from plan --threads $cores: $(diff <(echo "$busy_plan") <(echo "$all_plan"))"
  [ -n "$free" ] && [ "$free" -lt "$cores" ] && ok "beside a busy process: $free of $cores threads" ||
    bad "beside a busy process: '$free' threads of $cores"
  [ "$given" = "$cores" ] && [ "$env_given" = "$cores" ] && ok "--threads and OMP_NUM_THREADS win" ||
    bad "--threads $cores gave '$given', OMP_NUM_THREADS=$cores gave '$env_given'"
fi
# the free cores may differ from one run (or resume) to the next: the gradients do not depend on the thread count
# (grad at 1, 2 and 3 threads, the same bits), for shapes that split unevenly too
for preset in "dit-tiny:8:3" "mmdit-tiny:16:5" "flux-tiny:16:2" "wan-tiny:8:3"; do
  IFS=: read -r name res batch <<<"$preset"
  echo "{}" > empty.json
  cfg=(--config empty.json --set model_preset=$name --set resolution=$res --set train_batch_size=$batch)
  "$bin" init "${cfg[@]}" --out w-$name.safetensors >/dev/null 2>&1 &&
    "$bin" batch "${cfg[@]}" --out b-$name.safetensors >/dev/null 2>&1 || { bad "$name: init or batch failed"; continue; }
  for t in 1 2 3; do
    "$bin" --threads $t grad "${cfg[@]}" --weights w-$name.safetensors --batch b-$name.safetensors \
      --out g$t-$name.safetensors >/dev/null 2>&1 || bad "$name: grad at $t threads failed"
  done
  cmp -s g1-$name.safetensors g2-$name.safetensors && cmp -s g1-$name.safetensors g3-$name.safetensors &&
    ok "$name: the same gradient bits at 1, 2 and 3 threads" || bad "$name: gradients differ with the thread count"
done
# the second start keeps argv (global options, spaces), the environment and the exit code
out=$(plain "$bin" version "two words" 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q "unexpected argument 'two words'" <<<"$out" && [ "$(spin_of <<<"$out")" = 1000 ] &&
  ok "argv and exit code kept" || bad "argv and exit code: exit $rc: $out"
out=$(plain env OPENBLAS_CORETYPE=Haswell "$bin" --threads 1 selfcheck 2>&1); rc=$?
[ "$rc" = 0 ] && grep -q "^threads  1 (OpenMP, shared with BLAS; waits: GOMP_SPINCOUNT=1000)" <<<"$out" &&
  grep -q "OPENBLAS_CORETYPE=Haswell" <<<"$out" && ok "selfcheck: --threads and the environment kept" ||
  bad "selfcheck after the second start: exit $rc: $out"
# selfcheck says whether the machine is loaded (other processes running, two GEMM readings); what it says depends on the
# machine, its form does not (the rule itself: test_sweep_noise)
grep -qE "^load     (quiet \([0-9]+ other process(es)? running on [0-9]+ cores\)|the machine is busy \(.*\): .*)$" <<<"$out" &&
  ok "selfcheck: a load line" || bad "selfcheck: no load line: $out"
grep -q "the better of 2 readings" <<<"$out" && ok "selfcheck: two GEMM readings" || bad "selfcheck: $out"
out=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT SEGTRAIN_OMP_DEFAULTS=1 "$bin" selfcheck 2>&1)
grep -q "waits: libgomp's default, spinning" <<<"$out" && ok "selfcheck names spinning waits" || bad "selfcheck: $out"
# OpenBLAS's pre-AVX2 kernels (what 0.3.21 loads by itself on a CPU it does not know: Prescott, at about a fifth
# of the GEMM rate) get the note naming faster ones, as AVX2 kernels on an AVX-512 CPU do (cli_test.sh)
has() { for f in "$@"; do grep -qw "$f" /proc/cpuinfo || return 1; done; }
want=; has avx2 fma && want=Haswell; has avx512f avx512cd avx512bw avx512dq avx512vl && want=SkylakeX
note=$(OPENBLAS_CORETYPE=Prescott "$bin" selfcheck 2>&1 | grep '^note')
if { [ -n "$want" ] && grep -q "holds OpenBLAS to older kernels than this CPU takes ($want" <<<"$note"; } ||
  { [ -z "$want" ] && [ -z "$note" ]; }; then ok "selfcheck: Prescott kernels: '$note'"
else bad "selfcheck: Prescott kernels, want '$want': '$note'"; fi
# under mpirun the rank starts itself again too, with MPI's environment, and runs
if command -v mpirun >/dev/null; then
  root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
  out=$(plain mpirun "${root[@]}" --oversubscribe -np 1 "$bin" version 2>&1); rc=$?
  [ "$rc" = 0 ] && [ "$(spin_of <<<"$out")" = 1000 ] && ok "under mpirun: 1000 spins" || bad "mpirun: exit $rc: $out"
fi

finish
