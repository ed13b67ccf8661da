#!/usr/bin/env bash
# Self-checks of the numpy reference (tools/ref/): number formats (and agreement
# with tools/ref/quant.py), engram pieces, kernels, prefill/decode/chunked
# equivalence, the index-key quirk, DSpark, the CLI, components.py, and golden
# outputs of the official graph (tools/ref/golden_official.npz).
# Invoked as: bash sh_ref_selftest.sh TIDE_EXE SRC_DIR BIN_DIR
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
export TIDE_REF_NO_CACHE=1  # no token-map cache files left behind by tests
src=${2:-$(cd "$(dirname "$0")/.." && pwd)}
py=${TIDE_PYTHON:-/usr/bin/python3}
cd "$src/tools/ref"
exec "$py" -m unittest -q test_numerics test_engram test_components test_model test_golden
