#!/usr/bin/env bash
# Every header the code includes comes from libc, the compiler, or a Debian package that scripts/install-deps.sh
# names: a library installed by hand passes the tests on that machine and fails configure on a fresh one.
# Each <header> in src, include, tests, bench and fuzz is resolved by gcc's own include search (plus the
# INCLUDE_DIRs the build adds: cblas.h's), and its owner found with dpkg -S; fuzz/'s headers may also come from
# the install script's 'fuzz' group. A header that cannot be found fails too. Then the check checks itself: with a
# copy of the install script lacking a package it found, and with a header no package has, it must fail.
# Usage: check_deps.sh [INCLUDE_DIR...]
#   SEGTRAIN_INSTALL_DEPS=FILE  check against another install script; SEGTRAIN_DEPS_TREE=DIR  scan another tree
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
tree=${SEGTRAIN_DEPS_TREE:-$src}
script=${SEGTRAIN_INSTALL_DEPS:-$src/scripts/install-deps.sh}
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }

if ! base=$(bash "$script" --list) || ! all=$(bash "$script" fuzz --list) || [ -z "$base" ]; then
  echo "FAIL $script --list did not list the packages it installs"
  exit 1
fi
incs=(-I"$tree/include")
for d in "$@"; do incs+=(-I"$d"); done

# The <...> headers that the C and C++ files under the given folders include, one a line (fuzz/'s corpora are
# data, whatever they hold). The CUDA backend's (src/ops/cuda) come from the CUDA toolkit, which the build uses
# only where it finds nvcc (docs/CUDA.md): no Debian package is expected for them.
headers() {
  (cd "$tree" && for d in "$@"; do [ -d "$d" ] && grep -rhoE --exclude-dir=cuda \
    --include='*.[ch]' --include='*.[ch]pp' --include='*.cc' \
    '^[[:space:]]*#[[:space:]]*include[[:space:]]*<[^>]+>' "$d"; done) |
    sed -E 's/.*<([^>]+)>.*/\1/' | sort -u
}
build_headers=$(headers src include tests bench)
fuzz_headers=$(headers fuzz)

# The file gcc opens for each header, then every owner in one dpkg -S (a call costs 0.1 s); a path dpkg does not
# know may be a symlink to one it does (cblas.h through /etc/alternatives), so the resolved path is asked too.
declare -A file
paths=()
for h in $(printf '%s\n%s\n' "$build_headers" "$fuzz_headers" | sort -u); do
  if ! deps=$(printf '#include <%s>\n' "$h" | gcc -fopenmp "${incs[@]}" -M -MT x -x c - 2>&1); then
    bad "<$h> cannot be found: $(grep -m1 error <<<"$deps")"
    continue
  fi
  file[$h]=$(tr ' \\' '\n\n' <<<"$deps" | grep -m1 -F "/$h")
  if [ -z "${file[$h]}" ]; then bad "<$h>: no file of gcc's dependencies ends in /$h"; unset "file[$h]"; continue; fi
  paths+=("${file[$h]}" "$(readlink -f "${file[$h]}")")
done
declare -A owner
while IFS= read -r line; do
  case "$line" in diversion*) continue ;; esac
  owner[${line#*: }]=$(sed -E 's/:[a-z0-9]+(,|$)/\1/g' <<<"${line%%: *}")
done < <([ ${#paths[@]} -gt 0 ] && dpkg -S "${paths[@]}" 2>/dev/null)

found=()
for h in $(printf '%s\n' "${!file[@]}" | sort); do
  f=${file[$h]}
  case "$f" in "$tree"/*) ok "<$h> is the project's own"; continue ;; esac
  pkgs=${owner[$f]:-${owner[$(readlink -f "$f")]:-}}
  if [ -z "$pkgs" ]; then bad "<$h> ($f) belongs to no Debian package: installed by hand?"; continue; fi
  named=$base
  grep -qxF "$h" <<<"$build_headers" || named=$all
  for pkg in ${pkgs//,/ }; do
    case "$pkg" in
      libc6-dev | linux-libc-dev | libgcc-*-dev | gcc-*) ok "<$h>: $pkg (libc or the compiler)" ;;
      *) if grep -qxF "$pkg" <<<"$named"; then
           ok "<$h>: $pkg, named by $(basename "$script")"
           found+=("$pkg")
         else
           bad "<$h> comes from the Debian package $pkg, which $script does not name"
         fi ;;
    esac
  done
done

# The check must be able to fail: only on the real script and tree, so that the inner runs do not recurse.
if [ -z "${SEGTRAIN_INSTALL_DEPS:-}${SEGTRAIN_DEPS_TREE:-}" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if [ ${#found[@]} -eq 0 ]; then
    bad "self-check: no header came from a package of install-deps.sh, so there is none to remove"
  else
    pkg=$(printf '%s\n' "${found[@]}" | sort | tail -n 1)
    while IFS= read -r line; do  # all but its line in the package list, matched by first word (no regex)
      read -r word _ <<<"$line"
      [ "$word" = "$pkg" ] || printf '%s\n' "$line"
    done < "$script" > "$tmp/install-deps.sh"
    out=$(SEGTRAIN_INSTALL_DEPS=$tmp/install-deps.sh bash "$0" "$@" 2>&1)
    rc=$?
    if [ $rc -eq 1 ] && grep -q "comes from the Debian package $pkg, which" <<<"$out"; then
      ok "self-check: an install script without $pkg fails"
    else
      bad "self-check: an install script without $pkg did not fail (exit $rc): $out"
    fi
  fi
  mkdir -p "$tmp/tree/src"
  printf '#include <stdio.h>\n#include <segtrain_no_such_header.h>\n' > "$tmp/tree/src/a.c"
  out=$(SEGTRAIN_DEPS_TREE=$tmp/tree bash "$0" "$@" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && grep -q "<segtrain_no_such_header.h> cannot be found" <<<"$out"; then
    ok "self-check: a header that cannot be found fails"
  else
    bad "self-check: a header that cannot be found did not fail (exit $rc): $out"
  fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
