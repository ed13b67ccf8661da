#!/usr/bin/env bash
# The PyTorch baseline's model code, run through its numpy backend against the
# numpy reference on a tiny checkpoint (tools/torch_ref/selftest.py --smoke).
# Torch itself is exercised only on the GPU machine (scripts/gpu/session.sh).
set -euo pipefail
tide=$1 src=$2
exec "${TIDE_PYTHON:-/usr/bin/python3}" "$src/tools/torch_ref/selftest.py" --smoke --tide "$tide"
