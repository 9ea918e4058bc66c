#!/usr/bin/env bash
# No function in src is longer than 120 lines (issue 40): a longer one is split into named steps. A function's body
# is the lines from its opening '{' at column 0 to its closing '}' at column 0, as the code is laid out.
set -u
cd "$(dirname "$0")/.."
limit=120
files=$(git ls-files 'src/*.c' 2>/dev/null || find src -name '*.c')
out=$(awk -v limit="$limit" '
  FNR == 1 { start = 0 }
  /^\{/ { start = FNR; sig = prev }
  /^\}/ && start { if (FNR - start + 1 > limit) printf "FAIL %s:%d: %d lines: %s\n", FILENAME, start, FNR - start + 1, sig; start = 0 }
  { prev = $0 }' $files)
n=$(printf '%s' "$out" | grep -c FAIL)
[ -n "$out" ] && echo "$out"
echo "$(echo $files | wc -w) files, $n functions over $limit lines"
[ "$n" -eq 0 ]
