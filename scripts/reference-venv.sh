#!/usr/bin/env bash
# Creates the Python venv that scripts/make_fixtures.py (and make_lycoris_fixtures.py) runs in: PyPI's torch and diffusers at the exact versions
# the committed parity fixtures (tests/fixtures/*/parity.safetensors, docs/FIXTURES.md) were made with.
#   reference-venv.sh [VENV]      default ../segtrain-venv, outside the checkout (never commit a venv)
# Needs python3.11 (or python3 of 3.11) and network access to PyPI; a few minutes, ~5 GB (torch brings CUDA
# wheels; the fixtures are computed on the CPU). `make test` never needs this venv.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/../segtrain-venv}
python=${PYTHON:-$(command -v python3.11 || command -v python3)}

"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
  { echo "reference-venv.sh: $python is Python $("$python" -V 2>&1), the fixtures were made with 3.11 (set PYTHON=)" >&2; exit 2; }

# The packages that decide the fixtures' bytes, and everything diffusers imports, pinned as `pip freeze` gave them.
pins=(
  torch==2.15.0
  diffusers==0.42.1
  safetensors==0.8.0
  numpy==2.4.6
  huggingface_hub==2.4.0
  filelock==4.3.1
  importlib_metadata==10.2.0
  pillow==13.0.0
  regex==2026.11.19
  requests==2.34.2
  # scripts/make_lycoris_fixtures.py's adapters (tests/fixtures/lycoris, docs/LYCORIS.md) and what lycoris-lora imports
  lycoris-lora==4.1.3
  einops==0.8.2
  toml==0.10.2
  tqdm==4.70.1
  # scripts/make_quant_fixtures.py's quantized weights (tests/fixtures/quant, docs/QUANTIZATION.md) and what it imports
  optimum-quanto==0.2.7
  ninja==1.13.2
  # scripts/make_cache.py's text encoders and tokenizers (the parity fixtures do not import them)
  transformers==5.24.0
  tokenizers==0.23.3
  # what SimpleTuner's own classes import (make_fixtures.py --simpletuner: mageflow's vendored modules)
  loguru==0.8.0
  pydantic==2.14.4
)

"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet "${pins[@]}"
"$venv/bin/python" -c 'import torch, diffusers, safetensors, numpy; print("reference venv:", "torch", torch.__version__, "diffusers", diffusers.__version__, "safetensors", safetensors.__version__, "numpy", numpy.__version__)'
echo "now: $venv/bin/python scripts/make_fixtures.py [--verify]"
