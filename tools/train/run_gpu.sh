#!/usr/bin/env bash
# tide-mini, the whole recipe in one command on the GPU machine (1x H200, no
# network; torch 2.x, tokenizers, numpy):
#   tokenizer + backbone + indexer + DSpark drafter, export, evaluation.
#
#   OUT=dir bash tools/train/run_gpu.sh [more train.py options]
#
# CORPUS: a tar(.xz) of the *.txt files of /work/shared/data/build_corpus.sh
# (default ./corpus.tar.xz; or CORPUS_DIR, a folder). CHAT: a tar(.xz) of
# chat_train.txt and chat_valid.txt of tools/train/data/build.sh (default
# ./chat.tar.xz; or CHAT_DIR; none: the corpus alone).
# $OUT receives (at most 8 files, each < 16 MiB, flat names):
#   model-0000K-of-0000N.safetensors   the checkpoint's shards
#   meta.tar       config.json, inference/config.json, generation_config.json,
#                  tokenizer.json, model.safetensors.index.json, heldout.txt
#   train.log      the training log; summary.json: figures of the run
set -euo pipefail
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 TOKENIZERS_PARALLELISM=true
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:?set OUT to the output folder}
mkdir -p "$OUT"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
if [ -n "${CORPUS_DIR:-}" ]; then
  corpus=$CORPUS_DIR
else
  corpus=$W/corpus
  mkdir -p "$corpus"
  tar xJf "${CORPUS:-corpus.tar.xz}" -C "$corpus"
fi
if [ -n "${CHAT_DIR:-}" ]; then
  chat=$CHAT_DIR
else
  chat=$W/chat
  mkdir -p "$chat"
  if [ -f "${CHAT:-chat.tar.xz}" ]; then tar xJf "${CHAT:-chat.tar.xz}" -C "$chat"; fi
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 -c 'import torch, tokenizers, numpy; print("torch", torch.__version__, "tokenizers", tokenizers.__version__, "numpy", numpy.__version__)'
# The recipe: 700 backbone steps of 32 x 512 tokens (~5 min on one H200), 200
# DSpark steps; the time budgets only guard the 10-minute call (a run they
# stop says so in its log and is not deterministic).
python3 tools/train/train.py --corpus "$corpus" --chat "$chat" --out "$W/run" --seed 1 \
  --steps 700 --batch 32 --seq 512 --dspark-steps 200 --time-budget 320 --dspark-time-budget 80 "$@"
cp "$W"/run/model/*.safetensors "$OUT"/
cp "$W/run/heldout.txt" "$W/run/model/"
tar cf "$OUT/meta.tar" -C "$W/run/model" --exclude='*.safetensors' .
cp "$W/run/train.log" "$W/run/summary.json" "$OUT"/
ls -l "$OUT"
