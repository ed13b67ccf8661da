#!/usr/bin/env bash
# The README's first command: install what is missing, build, write the tiny
# synthetic model, show it, and generate from it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/oracle-deps.sh   # npm packages and the stand-in V4.1 tokenizer
bash scripts/build.sh build
./build/tide synth --shape tiny -o models/tiny --seed 1
./build/tide inspect models/tiny
./build/tide run --model models/tiny --prompt "Hello, tide" --max-tokens 16   # text through the engine
