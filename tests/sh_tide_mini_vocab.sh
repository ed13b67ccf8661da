#!/usr/bin/env bash
# A checkpoint with its own 16K vocabulary and its own special ids runs: the
# shape tide-mini has (docs/tide-mini.md). The tokenizer is the stand-in of
# tools/make_mini_standin_tokenizer.py, whose special tokens sit at ids the
# release never uses (BOS 16383, EOS 16382, ...), so anything still tied to
# the release's ids (BOS 0, EOS 1, the image token 129264, the DSpark noise
# token 128799, a 129280-wide table) fails here:
#   - tide synth --vocab 16384 takes BOS/EOS (generation_config.json), the
#     image token and the noise token (config.json) from the tokenizer;
#   - the rendered prompt's special tokens get the tokenizer's ids;
#   - tide run --prompt prints text; a chat request stops at the tokenizer's
#     EOS (forced by a logit bias) and not at id 1; the image token is never
#     sampled even when biased up.
# Usage: sh_tide_mini_vocab.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
py=${TIDE_PYTHON:-/usr/bin/python3}
standin=$src/.deps/tokenizer/deepseek-v41-standin.json
if [ ! -f "$standin" ]; then
  if [ "${CI:-}" = true ]; then echo "FAIL: no $standin (required under CI)"; exit 1; fi
  echo "SKIP: no $standin (scripts/oracle-deps.sh makes it)"; exit 0
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/mini-vocab.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
seed=${MINI_SEED:-$(( $(od -An -N4 -tu4 /dev/urandom | tr -d ' ') % 1000000 + 1 ))}
echo "sh_tide_mini_vocab: seed $seed"
"$py" "$src/tools/make_mini_standin_tokenizer.py" "$standin" 16384 "$work/tok.json" || { echo "FAIL: tokenizer"; exit 1; }
m=$work/m
"$tide" synth --shape tiny --vocab 16384 --tokenizer "$work/tok.json" --seed "$seed" -o "$m" -q >/dev/null \
  || { echo "FAIL: synth"; exit 1; }

# The ids the checkpoint records are the tokenizer's.
eval "$("$py" - "$m" <<'PY'
import json, sys
m = sys.argv[1]
tok = {a["content"]: a["id"] for a in json.load(open(f"{m}/tokenizer.json"))["added_tokens"]}
cfg = json.load(open(f"{m}/config.json")); gen = json.load(open(f"{m}/generation_config.json"))
t = cfg.get("text_config", cfg)
B, E = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"
want = {"vocab_size": (t["vocab_size"], 16384), "bos_token_id": (gen["bos_token_id"], tok[B]),
        "eos_token_id": (gen["eos_token_id"], tok[E]),
        "image_token_id": (cfg["image_token_id"], tok["<\uff5cdeepseek_image\uff5c>"]),
        "dspark_noise_token_id": (t["dspark_noise_token_id"], tok["<\uff5cSystem\uff5c>"])}
for k, (got, w) in want.items():
    if got != w: print(f'fail "{k}: {got}, want {w} (the tokenizer\'s)"')
print(f"BOS={tok[B]} EOS={tok[E]} IMG={tok['<｜deepseek_image｜>']} USER={tok['<｜User｜>']} "
      f"ASSIST={tok['<｜Assistant｜>']} ENDTHINK={tok['</think>']}")
PY
)"
[ "$EOS" = 16382 ] && [ "$BOS" = 16383 ] || fail "the stand-in's BOS/EOS moved: $BOS/$EOS"

# The rendered prompt's special tokens, through the checkpoint's tokenizer.
ids=$(echo '{"messages": [{"role": "user", "content": "hi"}]}' | "$tide" render --format raw \
  | "$py" -c 'import json,sys; print(json.dumps(sys.stdin.read().split("\n\x1e\n")[0]))' \
  | "$tide" tokenize --tokenizer "$m/tokenizer.json" --jsonl)
set -- $ids
[ "$1 $2" = "$BOS $USER" ] && [ "${*: -2}" = "$ASSIST $ENDTHINK" ] || fail "prompt ids '$ids'"

out=$("$tide" run --model "$m" --prompt "Hello there" --max-tokens 6 --ignore-eos 2>"$work/err")
[ -n "$out" ] && grep -q "6 generated tokens" "$work/err" || fail "tide run --prompt: '$out' / $(cat "$work/err")"

cat > "$work/req.jsonl" <<EOF
{"id": "eos", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "logit_bias": {"$EOS": 100}}
{"id": "one", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "logit_bias": {"1": 100}}
{"id": "img", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "logit_bias": {"$IMG": 100}}
EOF
"$tide" run --model "$m" --input "$work/req.jsonl" --text --output "$work/res.jsonl" 2>"$work/err" \
  || fail "tide run --input: $(cat "$work/err")"
"$py" - "$work/res.jsonl" "$EOS" "$IMG" <<'PY' || fail "chat requests: $(cat "$work/res.jsonl")"
import json, sys
r = {d["id"]: d for d in map(json.loads, open(sys.argv[1]))}
eos, img = int(sys.argv[2]), int(sys.argv[3])
ok = r["eos"]["finish_reason"] == "stop" and r["eos"]["output_ids"] == [eos]
ok &= r["one"]["finish_reason"] == "length" and r["one"]["output_ids"] == [1] * 5
ok &= len(r["img"]["output_ids"]) == 5 and img not in r["img"]["output_ids"]
ok &= all(d["prompt_tokens"] == 5 for d in r.values())
sys.exit(0 if ok else 1)
PY

[ "$fails" = 0 ] && echo "sh_tide_mini_vocab: all passed" || echo "sh_tide_mini_vocab: $fails failure(s)"
[ "$fails" = 0 ]
