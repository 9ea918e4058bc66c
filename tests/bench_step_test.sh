#!/usr/bin/env bash
# bench_step's protocol, which bench/compare.sh --lockstep depends on (its timings are benchmarks, not tested):
# "ready MODE", then one "step SECONDS" per line read, "peak DEVICE HOST" and exit 0 at end of input; a bad mode is
# one line and exit 1.
# Usage: bench_step_test.sh path/to/bench_step
set -u
bin=$1
out=$(printf '\n\n\n' | "$bin" --mode seg2-stride4 --set model_preset=dit-tiny --set train_batch_size=2 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ "$(head -n 1 <<<"$out")" != "ready seg2-stride4" ] || [ "$(grep -cE '^step [0-9.]+$' <<<"$out")" != 3 ] || ! tail -n 1 <<<"$out" | grep -qE '^peak [1-9][0-9]* [0-9]+$'; then
    echo "FAIL three lines, three steps, then the peaks (exit $rc): $out"
    exit 1
fi
out=$("$bin" --mode nonsense </dev/null 2>&1)
rc=$?
if [ $rc -ne 1 ] || ! grep -q "'nonsense' is neither a standard row" <<<"$out"; then
    echo "FAIL a bad mode (exit $rc): $out"
    exit 1
fi
echo "ok   bench_step answers one step per line and refuses a bad mode"
