#!/usr/bin/env bash
# Installs the Debian packages segtrain builds with, only those missing. Needs root (or sudo) the first time.
set -euo pipefail

packages=(
  build-essential            # gcc, make
  cmake                      # the build
  libopenblas-openmp-dev     # GEMMs; the OpenMP build shares our OpenMP thread pool
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "segtrain: installing Debian packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  echo "segtrain: run as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
