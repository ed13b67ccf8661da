#!/bin/bash
# tide-mini's chat data, end to end (tools/train/data/README.md):
#   build.sh CORPUS_DIR OUT_DIR [TIDE_BINARY]
# CORPUS_DIR is what /work/shared/data/build_corpus.sh (scripts: ../shared/data)
# wrote; the numbered KJV is fetched into it when missing. OUT_DIR receives
#   chat_train.jsonl, chat_valid.jsonl   request bodies (Chat Completions), one a line
#                                        (in $JSONL_DIR instead when set: the trainer
#                                        needs only the .txt files)
#   chat_train.txt,   chat_valid.txt     their V4.1 rendering by `tide render --with-answer
#                                        --format raw`: each conversation followed by "\n\x1e\n"
# Deterministic: the same corpus, seed and tide give byte-identical files.
set -euo pipefail
CORPUS=$1; OUT=$2; HERE=$(cd "$(dirname "$0")" && pwd)
TIDE=${3:-$HERE/../../../build/tide}
SEED=${SEED:-12}; N=${N:-40000}; VALID_FRAC=${VALID_FRAC:-0.05}
J=${JSONL_DIR:-$OUT}
mkdir -p "$OUT" "$J"
[ -s "$CORPUS/kjv_verses.txt" ] || bash "$HERE/fetch_kjv.sh" "$CORPUS/kjv_verses.txt"
python3 "$HERE/make_chat.py" --corpus "$CORPUS" --kjv "$CORPUS/kjv_verses.txt" --seed "$SEED" --n "$N" \
  --valid-frac "$VALID_FRAC" --train "$J/chat_train.jsonl" --valid "$J/chat_valid.jsonl"
for s in train valid; do
  "$TIDE" render --with-answer --format raw "$J/chat_$s.jsonl" -o "$OUT/chat_$s.txt"
done
( cd "$J" && sha256sum chat_train.jsonl chat_valid.jsonl ); ( cd "$OUT" && sha256sum chat_train.txt chat_valid.txt )
