#!/usr/bin/env bash
# Installs the Debian packages segtrain builds and tests with, only those missing. Needs root (or sudo) the first
# time. Every package a header of the code comes from must be named here: tests/check_deps.sh fails otherwise.
#   install-deps.sh [fuzz]           install what is missing (fuzz: also clang and its fuzzer runtime, for make fuzz)
#   install-deps.sh [fuzz] --list    print the packages named, one a line; install nothing
# The tests need nothing more than these and Debian's essential packages (bash, coreutils, grep, sed, diffutils,
# findutils, dpkg): no python3, no valgrind.
set -euo pipefail

packages=(
  build-essential            # gcc, make, libc's headers
  cmake                      # the build
  ninja-build                # its generator (the Makefile's): a build with nothing to do takes 0.2 s
  libopenblas-openmp-dev     # GEMMs; the OpenMP build shares our OpenMP thread pool
  libcjson-dev               # configs, safetensors headers
  libpng-dev                 # image folders, sample grids (brings zlib1g-dev, which CMake's FindPNG needs)
  libopenmpi-dev             # data-parallel training (mpi.h); without it segtrain builds single-process
  openmpi-bin                # mpirun, for `mpirun -np N segtrain train` and the 2-rank tests
)
fuzz_packages=(
  clang                      # libFuzzer targets are built with clang
  libclang-rt-14-dev         # libFuzzer and clang's ASan/UBSan runtimes, which clang does not pull in
  libomp-14-dev              # OpenMP for clang (CMake's find_package(OpenMP) fails without it)
)

list=0
for a in "$@"; do
  case "$a" in
    fuzz) packages+=("${fuzz_packages[@]}") ;;
    --list) list=1 ;;
    *) echo "install-deps.sh: unknown argument '$a' (valid: fuzz, --list)" >&2; exit 2 ;;
  esac
done
if [ $list -eq 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

# one dpkg-query for all of them: `make build` calls this every time, and it must cost nothing when all is there
installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null | sed -n 's/ install ok installed$//p' || true)
missing=()
for p in "${packages[@]}"; do
  [[ $'\n'$installed$'\n' == *$'\n'$p$'\n'* ]] || missing+=("$p")
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
