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
#     sampled even when biased up;
#   - tide eval against the numpy reference (tools/ref/model.py) on a fresh
#     random text: for sliding windows with BOS (ctx 48, stride 32) and
#     non-overlapping windows without BOS (ctx 40), the reference scores the
#     same windows, coded here from the documented protocol: every token's
#     NLL (tide eval --dump) must match the reference's within the forward
#     pass's logit tolerance, the mean NLL to 1e-3, and the predicted
#     (arg-max) token must agree except on near-ties.
# The weights' seed is printed (MINI_SEED=N replays it; it also seeds the text).
# Usage: sh_tide_mini_vocab.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
py=${TIDE_PYTHON:-/usr/bin/python3}
standin=$src/.deps/tokenizer/deepseek-v41-standin.json
need() {
  if [ "${CI:-}" = true ]; then echo "FAIL: $1 (required under CI)"; exit 1; fi
  echo "SKIP: $1"; exit 0
}
[ -f "$standin" ] || need "no $standin (scripts/oracle-deps.sh makes it)"
"$py" -c "import numpy" 2>/dev/null || need "$py has no numpy"
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

# tide eval against the numpy reference.
"$py" - "$seed" > "$work/text.txt" <<'PY'
import random, sys
rng = random.Random(int(sys.argv[1]))
words = ("the of and to in that it was he for with as his on be at by had not but from this they which "
         "or all were her she there would their we him been has when who will more no if out so said what "
         "up its about into than them can only other new some could time these two may then do first any "
         "my now such like our over man me even most made after also did many before must through back "
         "years where much your way well down should because each just those people how too little state "
         "good very make world still own see men work long get here between both life being under never").split()
out = []
for i in range(150):
    w = rng.choice(words)
    out.append(w.capitalize() if rng.random() < 0.1 else w)
    r = rng.random()
    out.append(". " if r < 0.08 else ",\n" if r < 0.12 else " ")
sys.stdout.write("".join(out))
PY

run_case() { # name ctx stride bos(1/0)
  local name=$1 ctx=$2 stride=$3 bos=$4 flag=""
  [ "$bos" = 1 ] || flag=--no-bos
  "$tide" eval --model "$m" --text "$work/text.txt" --ctx "$ctx" --stride "$stride" $flag --json -q \
    --dump "$work/$name.dump" > "$work/$name.json" 2>"$work/err" || { fail "$name: tide eval: $(cat "$work/err")"; return; }
  # The ids: the whole text through the checkpoint's tokenizer (tide's; the
  # tokenizer has its own oracle tests).
  "$py" -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$work/text.txt" \
    | "$tide" tokenize --tokenizer "$m/tokenizer.json" --jsonl > "$work/ids.txt"
  "$py" - "$src/tools/ref" "$work" "$name" "$ctx" "$stride" "$bos" <<'PY' || fail "$name: differs from the reference (seed $seed)"
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import model as mdl
w, name, ctx, stride, bos = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
ids = [int(x) for x in open(f"{w}/ids.txt").read().split()]
tok = json.load(open(f"{w}/m/tokenizer.json"))
bos_id = next(a["id"] for a in tok["added_tokens"] if a["content"] == "<\uff5cbegin\u2581of\u2581sentence\uff5c>")
m = mdl.Model(f"{w}/m")
ref = {}  # token index -> (nll, argmax)
done, start = 0, 0
while done < len(ids):
    end = min(start + ctx, len(ids))
    win = ([bos_id] if bos else []) + ids[start:end]
    lg = m.forward(m.new_state(), win)["logits"].astype(np.float64)
    for t in range(max(done, start), end):
        r = t - start + (1 if bos else 0) - 1  # the row that predicts token t
        if r < 0:
            continue
        row = lg[r]
        mx = row.max()
        ref[t] = (np.log(np.exp(row - mx).sum()) - (row[ids[t]] - mx), int(np.argmax(row)))
    done, start = end, start + stride
got = {}
for line in open(f"{w}/{name}.dump"):
    t, i, nll, best = line.split()
    assert int(i) == ids[int(t)], f"token {t}: id {i}, want {ids[int(t)]}"
    got[int(t)] = (float(nll), int(best))
res = json.load(open(f"{w}/{name}.json"))
bad = []
if sorted(got) != sorted(ref):
    bad.append(f"scored tokens differ: tide {len(got)}, reference {len(ref)}")
else:
    d = np.array([abs(got[t][0] - ref[t][0]) for t in ref])
    agree = np.mean([got[t][1] == ref[t][1] for t in ref])
    mean_ref = np.mean([ref[t][0] for t in ref])
    print(f"{name}: {len(ref)} tokens, nll tide {res['nll']:.6f} ref {mean_ref:.6f}, "
          f"max |dnll| {d.max():.2e}, arg-max agreement {agree:.3f}")
    if res["tokens"] != len(ref): bad.append(f"tokens {res['tokens']}, want {len(ref)}")
    if d.max() > 0.08: bad.append(f"a token's NLL differs by {d.max():.3f}")
    if abs(res["nll"] - mean_ref) > 1e-3: bad.append(f"mean NLL {res['nll']} vs {mean_ref}")
    if abs(res["ppl"] - np.exp(res["nll"])) > 1e-6 * res["ppl"]: bad.append("ppl != exp(nll)")
    if agree < 0.9: bad.append(f"arg-max agreement {agree:.3f}")
    top1 = np.mean([got[t][1] == ids[t] for t in got])
    if abs(res["top1"] - top1) > 1e-6: bad.append(f"top1 {res['top1']} vs its dump's {top1}")
for b in bad: print("  " + b)
sys.exit(1 if bad else 0)
PY
}
run_case slide 48 32 1
run_case plain 40 40 0

# tide bench replay --text: prompts from the text through the 16K tokenizer;
# a full replay is exact.
"$tide" bench replay --model "$m" --text "$work/text.txt" --prompts 2 --len 24 --gen 2 --replay 8,full \
  --decoder none --layout canonical > "$work/replay.txt" 2>"$work/err" || fail "bench replay --text: $(cat "$work/err")"
grep -q "^# prompts: consecutive slices of $work/text.txt" "$work/replay.txt" \
  && grep -qE "^canonical +replay +full +0 +0 +0 +0 +1\.00 +2\.00/2$" "$work/replay.txt" \
  || fail "bench replay --text: $(cat "$work/replay.txt")"

# tide eval's errors: a clear message, no crash (the ASan build runs this too).
"$tide" eval --model "$m" --text "$work/none.txt" 2>"$work/err" >/dev/null
[ $? = 1 ] && grep -qF "none.txt" "$work/err" || fail "eval of a missing file: $(cat "$work/err")"
: > "$work/empty.txt"
"$tide" eval --model "$m" --text "$work/empty.txt" 2>"$work/err" >/dev/null
[ $? = 1 ] && grep -qF "nothing to score" "$work/err" || fail "eval of an empty file: $(cat "$work/err")"
"$tide" eval --model "$m" --text "$work/text.txt" --ctx 8 --stride 9 2>"$work/err" >/dev/null
[ $? = 2 ] && grep -qF "larger than --ctx" "$work/err" || fail "eval --stride > --ctx: $(cat "$work/err")"
"$tide" eval --model "$work/none" --text "$work/text.txt" 2>"$work/err" >/dev/null
[ $? = 1 ] && grep -qF "tokenizer.json" "$work/err" || fail "eval of a missing model: $(cat "$work/err")"

[ "$fails" = 0 ] && echo "sh_tide_mini_vocab: all passed" || echo "sh_tide_mini_vocab: $fails failure(s)"
[ "$fails" = 0 ]
