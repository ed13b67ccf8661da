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
  # Only the command, CPU only, in its own build folder (build-cpu): the tests
  # and the CUDA kernels are scripts/test.sh's, in build/.
  cmake -S . -B build-cpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIDE_CUDA=OFF >/dev/null
  cmake --build build-cpu -j"$(nproc)" --target tide_cli
  ./build-cpu/tide run --model models/tide-mini --threads "$(nproc)" --max-tokens 80 --temperature 0.7 --seed 1 \
    --prompt $'Continue this passage:\n\nIt is a truth universally acknowledged, that a single man in possession of a good fortune'
else
  bash scripts/oracle-deps.sh   # npm packages and the stand-in V4.1 tokenizer
  bash scripts/build.sh build
  ./build/tide synth --shape tiny -o models/tiny --seed 1
  ./build/tide inspect models/tiny
  ./build/tide run --model models/tiny --prompt "Hello, tide" --max-tokens 16   # text through the engine
fi
