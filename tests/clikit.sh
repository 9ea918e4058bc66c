# What every tests/cli_*_test.sh shares, sourced after it has set bin and src: a scratch folder it runs in (gone at
# exit), ok/bad counters, expect and finish. EXPECT_TIMEOUT (seconds, default 600) makes a hang a failure.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
# expect RC DESCRIPTION PATTERN -- COMMAND...: exit code RC and PATTERN somewhere in stdout+stderr
expect() {
  local rc=$1 what=$2 pattern=$3; shift 4
  local out; out=$(timeout "${EXPECT_TIMEOUT:-600}" "$@" 2>&1); local got=$?
  if [ "$got" -eq "$rc" ] && grep -qE -- "$pattern" <<<"$out"; then ok "$what"; else bad "$what (exit $got): $out"; fi
}
# the last line of every script: the counts, and the exit status
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
