#!/usr/bin/env bash
# tide tokenize / detokenize on bad output and bad input, with a tiny
# tokenizer written here (no dependency):
#   - writing to a full device (/dev/full) is an error with a message, for
#     one short line (caught at close) and for many lines (caught mid-way);
#   - a NUL byte in a detokenize line is refused with its offset (it used to
#     end the line silently: "1\0 2" decoded only id 1);
#   - a normalizer that multiplies the text stops with the growth limit's
#     message instead of running for minutes;
#   - and the ordinary round trip and `--bench FILE` still work.
# Usage: sh_tokenize_io.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/tok-io.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

if [ ! -w /dev/full ]; then
  if [ "${CI:-}" = true ]; then echo "FAIL: /dev/full is missing"; exit 1; fi
  echo "SKIP: /dev/full is missing"; exit 0
fi

tok=$work/tok.json
cat > "$tok" <<'EOF'
{"model": {"type": "BPE", "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "he": 4, "ll": 5}, "merges": ["h e", "l l"]},
 "added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
 "decoder": {"type": "ByteFallback"}}
EOF

# Expects exit status 1 and the given text in stderr.
expect_error() {
  local what=$1 needle=$2 rc=$3
  [ "$rc" = 1 ] || fail "$what: exit status $rc, want 1"
  grep -qF -- "$needle" "$work/err" || fail "$what: stderr lacks '$needle': $(cat "$work/err")"
}

out=$(echo "hello" | "$tide" tokenize --tokenizer "$tok")
[ "$out" = "4 5 3" ] || fail "tokenize hello: '$out', want '4 5 3'"
out=$(echo "4 5 3" | "$tide" detokenize --tokenizer "$tok")
[ "$out" = "hello" ] || fail "detokenize: '$out', want 'hello'"

echo "hello" | "$tide" tokenize --tokenizer "$tok" > /dev/full 2> "$work/err"
expect_error "tokenize, one line, > /dev/full" "writing to standard output failed: No space left on device" $?
yes hello | head -n 20000 | "$tide" tokenize --tokenizer "$tok" > /dev/full 2> "$work/err"
expect_error "tokenize, 20000 lines, > /dev/full" "No space left on device" $?
echo "4 5 3" | "$tide" detokenize --tokenizer "$tok" > /dev/full 2> "$work/err"
expect_error "detokenize > /dev/full" "writing to standard output failed: No space left on device" $?
yes "4 5 3" | head -n 20000 | "$tide" detokenize --tokenizer "$tok" --jsonl > /dev/full 2> "$work/err"
expect_error "detokenize --jsonl, 20000 lines, > /dev/full" "No space left on device" $?

printf '0\0 1\n' | "$tide" detokenize --tokenizer "$tok" > "$work/out" 2> "$work/err"
expect_error "detokenize of '0\\0 1'" "line 1: NUL byte at offset 1" $?
printf '4\n0 1\0\n' | "$tide" detokenize --tokenizer "$tok" > "$work/out" 2> "$work/err"
expect_error "detokenize, NUL on line 2" "line 2: NUL byte at offset 3" $?

# Eight Replace steps, each turning "l" into "llllllll": 8^8 times the text.
grow=$work/grow.json
{
  printf '{"model": {"type": "BPE", "vocab": {"h": 0, "e": 1, "l": 2, "o": 3}, "merges": []}, "added_tokens": [],\n'
  printf ' "normalizer": {"type": "Sequence", "normalizers": ['
  for i in 1 2 3 4 5 6 7; do printf '{"type": "Replace", "pattern": {"String": "l"}, "content": "llllllll"}, '; done
  printf '{"type": "Replace", "pattern": {"String": "l"}, "content": "llllllll"}]},\n'
  printf ' "pre_tokenizer": null, "decoder": {"type": "ByteFallback"}}\n'
} > "$grow"
echo "hello" | "$tide" tokenize --tokenizer "$grow" > "$work/out" 2> "$work/err"
expect_error "tokenize with a growing normalizer" "(Replace) of a 5-byte text" $?
grep -qF "grows past the limit" "$work/err" || fail "growth message: $(cat "$work/err")"

# The benchmark on a file (the built-in corpus takes seconds: docs/perf.md).
yes "hello hello" | head -n 1000 > "$work/bench.txt"
out=$("$tide" tokenize --tokenizer "$tok" --bench "$work/bench.txt") || fail "--bench FILE failed"
case "$out" in "12000 bytes, 6000 tokens; wall "*" MB/s; cpu "*" tokens/s") ;; *) fail "--bench FILE printed '$out'" ;; esac
"$tide" tokenize --tokenizer "$tok" --bench "$work/bench.txt" > /dev/full 2> "$work/err"
expect_error "--bench > /dev/full" "No space left on device" $?

# A tokenizer.json that is a FIFO is refused at once (it used to block the reader).
mkfifo "$work/fifo.json"
echo "hi" | timeout 20 "$tide" tokenize --tokenizer "$work/fifo.json" > "$work/out" 2> "$work/err"
expect_error "tokenize --tokenizer FIFO" "is a FIFO, not a regular file" $?

[ "$fails" = 0 ] || exit 1
echo "PASS: tokenize/detokenize output and input errors"
