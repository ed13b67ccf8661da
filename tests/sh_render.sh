#!/usr/bin/env bash
# tide render against the independent renderer tools/v41_render.py, on fresh
# random Chat Completions requests (the seed is printed; RENDER_SEED=N
# replays one): system / user / assistant / tool turns, reasoning, tool
# calls with ids and typed arguments, tools, response formats, thinking
# mode with an effort. Each request is rendered twice by tide
#   --with-answer   the final assistant message closed: must equal the oracle's
#                   rendering of the whole conversation;
#   (without)       the prompt: the oracle's rendering without that message,
#                   which prompt_bytes must also mark as the answer's start;
# and --format raw must give the same texts, each followed by "\n\x1e\n".
# Then the errors: a bad line names its line number and field and leaves -o
# untouched; --with-answer refuses a conversation that does not end in the
# assistant's answer.
# Usage: sh_render.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
py=${TIDE_PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/render.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
seed=${RENDER_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "sh_render: seed $seed"

# Requests, and the oracle's expected texts (full and prompt) as JSONL.
"$py" - "$src/tools" "$seed" "$work" <<'PY' || { echo "FAIL: generating requests"; exit 1; }
import json, random, sys
sys.path.insert(0, sys.argv[1])
import v41_render as V
rng = random.Random(int(sys.argv[2])); work = sys.argv[3]
words = ["alpha", "beta", "gamma", "délta", "ε", "line\nbreak", "\"quoted\"", "tab\there", "x" * 40, "日本"]
def text(k=3): return " ".join(rng.choice(words) for _ in range(rng.randint(1, k)))
def value():
    return rng.choice([lambda: text(2), lambda: rng.randint(-999, 999), lambda: [rng.randint(0, 9), text(1)],
                       lambda: {"k": text(1), "n": None}, lambda: rng.random() < 0.5])()
reqs, exp = [], []
for n in range(40):
    thinking = rng.random() < 0.5
    effort = rng.randint(1, 100)
    tools = []
    for t in range(rng.choice([0, 0, 1, 2])):
        f = {"name": f"tool_{t}"}
        if rng.random() < 0.7: f["description"] = text(4)
        f["parameters"] = {"type": "object", "properties": {"a": {"type": "string"}}}
        tools.append(f)
    fmt = rng.choice([None, None, {"type": "json_object"},
                      {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}}])
    api, conv, call_no = [], [], 0
    if rng.random() < 0.4:
        c = text(); api.append({"role": "system", "content": c}); conv.append({"role": "system", "content": c})
    for turn in range(rng.randint(1, 3)):
        c = text(); api.append({"role": "user", "content": c}); conv.append({"role": "user", "content": c})
        if tools and rng.random() < 0.6:  # a tool-call round before the answer
            calls = []
            for _ in range(rng.randint(1, 2)):
                args = {k: value() for k in rng.sample(["a", "b", "c"], rng.randint(1, 3))}
                calls.append({"id": f"call_{call_no}", "name": rng.choice(tools)["name"], "arguments": json.dumps(args)})
                call_no += 1
            a = {"role": "assistant", "content": rng.choice(["", text(1)]), "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls]}
            o = {"role": "assistant", "content": a["content"], "calls": calls}
            if thinking:
                r = text(); a["reasoning_content"] = r; o["reasoning"] = r
            api.append(a); conv.append(o)
            for c in rng.sample(calls, len(calls)):  # results in any order
                res = text(2)
                api.append({"role": "tool", "tool_call_id": c["id"], "content": res})
                conv.append({"role": "tool", "id": c["id"], "content": res})
        c = text(); a = {"role": "assistant", "content": c}; o = {"role": "assistant", "content": c}
        if thinking:
            r = text(); a["reasoning_content"] = r; o["reasoning"] = r
        api.append(a); conv.append(o)
    body = {"messages": api}
    form = {"messages": conv, "thinking": thinking, "effort": effort}
    if thinking: body["thinking"] = {"type": "enabled"}; body["reasoning_effort"] = effort
    if tools:
        body["tools"] = [{"type": "function", "function": f} for f in tools]; form["tools"] = tools
    if fmt: body["response_format"] = fmt; form["response_format"] = fmt
    reqs.append(body)
    full = V.render(form)
    form["messages"] = conv[:-1]
    prompt = V.render(form)
    exp.append({"text": full, "prompt_bytes": len(prompt.encode()), "prompt": prompt})
open(f"{work}/req.jsonl", "w").write("".join(json.dumps(b) + "\n" for b in reqs))
open(f"{work}/exp.jsonl", "w").write("".join(json.dumps(e) + "\n" for e in exp))
PY

"$tide" render --with-answer "$work/req.jsonl" -o "$work/full.jsonl" 2>"$work/err" || fail "render --with-answer: $(cat "$work/err")"
"$tide" render < "$work/req.jsonl" > "$work/prompt.jsonl" 2>"$work/err" || fail "render: $(cat "$work/err")"
"$tide" render --with-answer --format raw "$work/req.jsonl" -o "$work/full.raw" 2>"$work/err" || fail "render raw: $(cat "$work/err")"
grep -q "40 conversations rendered" "$work/err" || fail "render raw: no count in '$(cat "$work/err")'"
"$py" - "$work" <<'PY' || fail "tide render differs from tools/v41_render.py (seed $seed)"
import json, sys
w = sys.argv[1]
exp = [json.loads(l) for l in open(f"{w}/exp.jsonl")]
full = [json.loads(l) for l in open(f"{w}/full.jsonl")]
prompt = [json.loads(l) for l in open(f"{w}/prompt.jsonl")]
raw = open(f"{w}/full.raw", "rb").read().split(b"\n\x1e\n")
bad = 0
assert len(full) == len(prompt) == len(exp) == len(raw) - 1 and raw[-1] == b"", "line counts"
for i, (e, f, p, r) in enumerate(zip(exp, full, prompt, raw)):
    for what, got, want in (("full text", f["text"], e["text"]), ("answer start", f["prompt_bytes"], e["prompt_bytes"]),
                            ("prompt", p["text"], e["prompt"]), ("prompt bytes", p["prompt_bytes"], e["prompt_bytes"]),
                            ("raw", r.decode(), e["text"])):
        if got != want:
            bad += 1
            print(f"request {i + 1}: {what}:\n  tide   {got!r}\n  oracle {want!r}")
sys.exit(1 if bad else 0)
PY

# Forcing the mode: --thinking on --effort max puts the effort line in front.
out=$(echo '{"messages": [{"role": "user", "content": "hi"}]}' | "$tide" render --thinking on --effort max --format raw)
grep -qF "Reasoning Effort: 100 (range" <<<"$out" || fail "--thinking on --effort max: no effort line in '$out'"

# Errors: line number and field; the -o file is left as it was.
echo "keep" > "$work/out"
printf '%s\n\n%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}' \
  '{"messages": [{"role": "robot", "content": "a"}]}' > "$work/bad.jsonl"
"$tide" render --with-answer "$work/bad.jsonl" -o "$work/out" 2>"$work/err"
rc=$?
[ "$rc" = 1 ] || fail "bad role: exit $rc, want 1"
grep -qF "line 3: messages[0].role: unknown role" "$work/err" || fail "bad role: '$(cat "$work/err")'"
[ "$(cat "$work/out")" = keep ] || fail "bad role: -o was replaced"
echo '{"messages": [{"role": "user", "content": "a"}]}' | "$tide" render --with-answer 2>"$work/err" >/dev/null
rc=$?
[ "$rc" = 1 ] && grep -qF "line 1: --with-answer: the last message is not the assistant's" "$work/err" \
  || fail "--with-answer without an answer: exit $rc, '$(cat "$work/err")'"
echo 'not json' | "$tide" render 2>"$work/err" >/dev/null
[ $? = 1 ] && grep -qF "line 1:" "$work/err" || fail "not json: '$(cat "$work/err")'"
echo '{"messages": [{"role": "user", "content": "a\u001eb"}]}' | "$tide" render --format raw 2>"$work/err" >/dev/null
[ $? = 1 ] && grep -qF "line 1: the text holds the record separator" "$work/err" || fail "U+001E raw: '$(cat "$work/err")'"
"$tide" render --format xml </dev/null 2>"$work/err"
[ $? = 2 ] && grep -qF "jsonl or raw" "$work/err" || fail "--format xml: '$(cat "$work/err")'"

[ "$fails" = 0 ] && echo "sh_render: all passed" || echo "sh_render: $fails failure(s)"
[ "$fails" = 0 ]
