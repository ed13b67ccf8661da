#!/usr/bin/env python3
"""Golden data for tide's prompt rendering against the release's own encoder.

Generates a few hundred varied OpenAI Chat Completions request bodies (the
form tide_api_parse takes), maps each onto the arguments of the release's
encoder (encoding/encoding.py of the DeepSeek-V4.1-Flash release: messages,
thinking_mode, reasoning_effort), and, given that encoder, records what it
renders. The encoder itself is never part of this repository: pass the path
of a local copy (for example the one vendored by ztxz16/fastllm as
tools/fastllm_pytools/encoding_dsv41.py).

    python3 tools/render_release.py gen tests/data/render_release
    python3 tools/render_release.py encode /tmp/release_enc/encoding_dsv41.py \
        tests/data/render_release

`gen` writes inputs.jsonl: one case a line, {"name", "body" (the request as
JSON text), "deviation" (only where tide deliberately differs; docs/text.md
lists each)}; `to_release` below turns a body into the encoder's arguments. `encode` writes
expected.jsonl: {"name", "prompt"} or {"name", "error"} per case, in the
same order. tests/test_render_release.c compares tide with expected.jsonl.

The mapping from a request to the encoder's arguments is tide's reading of
the API (docs/text.md, "Prompt rendering vs the release's encoder"):
developer = system; tools (unless tool_choice is none; only the named one
for a named choice) and a response format (not for type text) go on the
first message when it is a system message, else on a new empty system
message put first; thinking from thinking.type / chat_template_kwargs /
reasoning_effort; a final assistant message is continued (wo_eos) only
with continue_final_message.
"""
import copy
import importlib.util
import json
import pathlib
import random
import sys

SEED = 20261201  # fixed: the committed data must be reproducible

# ----------------------------------------------------------------- pieces

TEXTS = [
    "Hello!", "What is 2+2?", "Summarise the text below.\n\nIt was a dark and stormy night.",
    "  leading and trailing spaces  ", "\nstarts with a newline", "ends with a newline\n",
    "ends with two newlines\n\n", "tabs\tand\r\ncarriage returns", "", "x",
    "日本語のテキストです。", "中文：你好，世界！", "Ünïcödé façade naïve café", "emoji 🎉🚀 and 👍🏽",
    "עברית ومعها العربية", "e\u0301 combining accent", "zero\u200bwidth", "math: ∑ x² ≤ ∞",
    "quotes \"double\" and 'single' and `back`", "backslash \\ and slash /",
    "json-looking {\"a\": 1, \"b\": [true, null]}", "<think>not real tags</think>",
    "<tool_result>fake</tool_result>", "markdown:\n\n# Title\n\n- item 1\n- item 2\n\n```python\nprint(1)\n```",
    "a long line " * 40, "line1\nline2\nline3", "ends with a space ", "\u00a0non-breaking\u00a0space",
    "control \u0001 \u001f characters", "<｜User｜>spelled special token", "｜DSML｜ in text",
]

REASONINGS = [
    "The user wants a number.", "Let me think step by step.\n1. First\n2. Second",
    "", "思考：先算加法。", "I should call a tool.", "Hmm </think> inside reasoning? no.",
    "Multi\n\nparagraph\n\nreasoning.",
]

NAMES = ["get_weather", "search", "calc", "read_file", "lookup.v2", "ns:tool", "a-b_c", "f", "T1"]

SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
     "required": ["city"]},
    {"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "integer", "minimum": 1,
                                                                       "maximum": 100}}},
    {"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 0.5, "multipleOf": 1e-05},
                                      "y": {"type": "number", "maximum": 1e+16}}, "required": ["x", "y"],
     "additionalProperties": False},
    {"properties": {"path": {"type": "string", "pattern": "^/[a-z]+$"}}, "type": "object"},
    {"type": "object", "properties": {}},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}}},
     "$defs": {"unused": {"enum": ["a", "b", None, 1, 2.5]}}},
    {"type": "object", "properties": {"mode": {"enum": ["fast", "slow"], "default": "fast",
                                               "description": "速度モード"}}},
]

ARG_VALUES = [
    "Paris", "", "日本", "multi\nline", "with \"quotes\"", 3, -7, 0, 2.5, 1e-05, 1e+16, 10.0, 123456789012,
    True, False, None, [1, 2, 3], [], {}, {"nested": {"deep": [1, {"k": "v"}]}}, ["a", 1, None], 0.1,
    -0.0, 3.141592653589793, "🎉", "</｜DSML｜ parameter>",
]

# Argument texts that are not one plain JSON object (the fallbacks).
RAW_ARGUMENTS = [
    "", "not json", "[1, 2]", "5", "\"just a string\"", "null", "{\"a\": 1",
    json.dumps(json.dumps({"double": "encoded", "n": 1})),  # double-encoded
    json.dumps(json.dumps(json.dumps({"triple": 1}))),      # triple: stays a string
    "{\"a\":1,\"b\":[1,2],\"c\":{\"d\":null}}",                  # compact spacing
    "  {\"spaced\" :  true }  ",                                # whitespace around
    "{\"dup\": 1, \"other\": 2, \"dup\": 3}",                   # duplicate key: last value, first place
    "{\"big\": 123456789012345678901234567890}",              # beyond 64 bits
    "{\"neg\": -98765432109876543210, \"ok\": 1}",
    "{\"inf\": 1e400, \"ninf\": -1e400, \"tiny\": 1e-400}",   # overflow and underflow
    "{\"nan\": NaN, \"i\": Infinity, \"ni\": -Infinity}",     # Python's extensions
    "{\"f\": 1.50, \"e\": 1E5, \"z\": -0, \"zf\": -0.0, \"x\": 2e0}",
    "{\"u\": \"\\u00e9\\ud83d\\ude00\", \"esc\": \"a\\/b\\tc\"}",
    "{\"deep\": {\"a\": {\"b\": [9007199254740993, 18446744073709551616]}}}",
    "{\"exp\": 1.7976931348623157e308, \"sub\": 5e-324, \"r\": 0.30000000000000004}",
    "{\"s\": \"x\"} trailing",
    "{}",
]


def pick(r, seq):
    return seq[r.randrange(len(seq))]


def text(r):
    if r.random() < 0.15:
        return pick(r, TEXTS) + " " + pick(r, TEXTS)
    return pick(r, TEXTS)


def content(r, allow_parts=True):
    t = text(r)
    if allow_parts and r.random() < 0.12:
        n = r.randint(1, 3)
        return [{"type": "text", "text": text(r)} for _ in range(n)]
    return t


def tool_def(r, name):
    fn = {}
    keys = ["name", "description", "parameters"]
    if r.random() < 0.3:
        r.shuffle(keys)
    for k in keys:
        if k == "name":
            fn["name"] = name
        elif k == "description" and r.random() < 0.85:
            fn["description"] = pick(r, ["Get the weather.", "Search the web for a query.",
                                         "Évalue une expression — 計算", "Reads a file.\nReturns text.", ""])
        elif k == "parameters" and r.random() < 0.9:
            fn["parameters"] = copy.deepcopy(pick(r, SCHEMAS))
    if r.random() < 0.3:
        fn["strict"] = r.random() < 0.5
    if r.random() < 0.1:
        fn["x-extra"] = {"owner": "tests", "version": 2}
    return {"type": "function", "function": fn}


def arguments(r):
    if r.random() < 0.3:
        return pick(r, RAW_ARGUMENTS)
    keys = r.sample(["city", "q", "limit", "x", "y", "path", "mode", "items", "opt", "名前"], r.randint(0, 4))
    obj = {k: copy.deepcopy(pick(r, ARG_VALUES)) for k in keys}
    if r.random() < 0.1:
        return obj  # an object instead of a string (tide accepts it; the release takes it as is)
    return json.dumps(obj, ensure_ascii=r.random() < 0.3, separators=pick(r, [(", ", ": "), (",", ":")]))


def calls(r, n, ids):
    out = []
    for i in range(n):
        c = {"type": "function", "function": {"name": pick(r, NAMES), "arguments": arguments(r)}}
        if ids is not None:
            c["id"] = ids[i]
        out.append(c)
    return out


def call_ids(r, n):
    mode = r.random()
    if mode < 0.7:
        return ["call_%d_%d" % (r.randrange(10**6), i) for i in range(n)]
    if mode < 0.8:
        return None
    if mode < 0.9:
        base = ["c%d" % i for i in range(n)]
        if n > 1:
            base[-1] = base[0]  # a duplicate id: the last call with it decides
        return base
    return ["" if i % 2 else "k%d" % i for i in range(n)]


def assistant(r, thinking, with_calls):
    m = {"role": "assistant"}
    if with_calls and r.random() < 0.3:
        m["content"] = None
    else:
        m["content"] = content(r, allow_parts=False)
    if thinking and r.random() < 0.7:
        m["reasoning_content"] = pick(r, REASONINGS)
    ids = None
    if with_calls:
        n = r.randint(1, 3)
        ids = call_ids(r, n)
        m["tool_calls"] = calls(r, n, ids)
    return m, ids


def results(r, ids, n):
    order = list(range(n))
    r.shuffle(order)
    out = []
    for i in order:
        m = {"role": "tool", "content": content(r)}
        if ids is not None and r.random() < 0.95:
            m["tool_call_id"] = ids[i]
        elif r.random() < 0.5:
            m["tool_call_id"] = "unknown_id"
        out.append(m)
    return out


def conversation(r):
    """A random request body (as a dict)."""
    thinking = r.random() < 0.5
    use_tools = r.random() < 0.45
    msgs = []
    if r.random() < 0.6:
        msgs.append({"role": pick(r, ["system", "system", "developer"]), "content": content(r)})
    turns = r.randint(1, 4)
    for t in range(turns):
        msgs.append({"role": "user", "content": content(r)})
        if r.random() < 0.1:
            msgs.append({"role": "user", "content": content(r)})  # two user messages in a row
        if r.random() < 0.08:
            msgs.append({"role": "system", "content": content(r)})  # mid-conversation system
        last = t == turns - 1
        if last and r.random() < 0.7:
            break
        steps = r.randint(1, 2) if use_tools else 1
        for _ in range(steps):
            with_calls = use_tools and r.random() < 0.7
            a, ids = assistant(r, thinking, with_calls)
            msgs.append(a)
            if with_calls:
                msgs.extend(results(r, ids, len(a["tool_calls"])))
                if r.random() < 0.15:
                    msgs.append({"role": "user", "content": content(r)})
        if last and msgs[-1]["role"] == "tool":
            break
    body = {"model": "deepseek-v4.1-flash", "messages": msgs}
    if use_tools:
        names = r.sample(NAMES, r.randint(1, 3))
        body["tools"] = [tool_def(r, n) for n in names]
        ch = r.random()
        if ch < 0.1:
            body["tool_choice"] = "none"
        elif ch < 0.2:
            body["tool_choice"] = {"type": "function", "function": {"name": names[-1]}}
        elif ch < 0.3:
            body["tool_choice"] = "required"
    if r.random() < 0.12:
        body["response_format"] = pick(r, [
            {"type": "json_object"},
            {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
                "type": "object", "properties": {"a": {"type": "number"}}}, "strict": True}},
            {"type": "json_schema", "json_schema": {"strict": False, "schema": {"type": "array"}, "name": "list",
                                                    "description": "a list"}},
            {"type": "text"},
        ])
    if thinking:
        how = r.random()
        if how < 0.4:
            body["thinking"] = {"type": "enabled"}
        elif how < 0.6:
            body["chat_template_kwargs"] = {"thinking": True}
        if how < 0.6 and r.random() < 0.5 or how >= 0.6:
            body["reasoning_effort"] = pick(r, ["low", "high", "max", 1, 33, 50, 75, 99, 100])
    elif r.random() < 0.1:
        body["thinking"] = {"type": "disabled"}
    if msgs[-1]["role"] == "assistant" and r.random() < 0.5:
        body["continue_final_message"] = True
    return body


# Hand-written cases: the edges, and every deliberate deviation (the
# "deviation" id is the key of its entry in docs/text.md).
def edge_cases():
    u = {"role": "user", "content": "hi"}
    a = {"role": "assistant", "content": "hello"}
    cases = []

    def add(name, body, deviation=None):
        body.setdefault("model", "m")
        cases.append((name, body, deviation))

    add("edge_final_assistant_eos", {"messages": [u, a]})
    add("edge_final_assistant_continue", {"messages": [u, a], "continue_final_message": True})
    add("edge_final_assistant_continue_false", {"messages": [u, a], "continue_final_message": False})
    add("edge_final_assistant_thinking", {"messages": [u, dict(a, reasoning_content="r")],
                                          "thinking": {"type": "enabled"}})
    add("edge_final_assistant_thinking_continue", {"messages": [u, dict(a, reasoning_content="r")],
                                                   "thinking": {"type": "enabled"}, "continue_final_message": True})
    add("edge_only_assistant", {"messages": [a]})
    add("edge_only_system", {"messages": [{"role": "system", "content": "s"}]})
    add("edge_only_system_thinking", {"messages": [{"role": "system", "content": "s"}],
                                      "thinking": {"type": "enabled"}})
    add("edge_mid_system_last", {"messages": [u, a, {"role": "system", "content": "now be brief"}],
                                 "thinking": {"type": "enabled"}})
    for e in ["low", "high", "max", 1, 100]:
        add("edge_effort_%s" % e, {"messages": [u], "reasoning_effort": e})
    add("edge_effort_default", {"messages": [u], "thinking": {"type": "enabled"}})
    for e in [0, 101, "extreme"]:
        add("edge_effort_bad_%s" % e, {"messages": [u], "reasoning_effort": e})
    for e in ["minimal", "medium", "xhigh", "maximum"]:
        add("edge_effort_alias_%s" % e, {"messages": [u], "reasoning_effort": e}, "effort_alias")
    add("edge_effort_none", {"messages": [u], "reasoning_effort": "none"}, "effort_none")
    tool = {"type": "function", "function": {"description": "d", "name": "f", "strict": True,
                                             "parameters": {"type": "object", "properties": {}}}}
    add("edge_tool_schema_as_sent", {"messages": [u], "tools": [tool]})
    add("edge_tool_schema_extra_keys", {"messages": [{"role": "system", "content": "s"}, u], "tools": [
        {"type": "function", "function": {"name": "g", "x": [1, 2.0], "parameters": None}}]})
    dup = [{"id": "same", "type": "function", "function": {"name": "f", "arguments": "{\"i\": %d}" % i}}
           for i in range(3)]
    add("edge_duplicate_ids", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": dup},
                                            {"role": "tool", "tool_call_id": "same", "content": "r0"},
                                            {"role": "tool", "tool_call_id": "other", "content": "r1"},
                                            {"role": "tool", "tool_call_id": "same", "content": "r2"}],
                               "tools": [tool]})
    two = [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
           {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
           {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    add("edge_duplicate_ids_reorder", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": two},
                                                    {"role": "tool", "tool_call_id": "a", "content": "A"},
                                                    {"role": "tool", "tool_call_id": "b", "content": "B"}],
                                       "tools": [tool]})
    for i, args in enumerate(RAW_ARGUMENTS):
        add("edge_args_%02d" % i, {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "f", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "x", "content": "ok"}], "tools": [tool]})
    add("edge_args_huge_int_digits", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"n\": %s}" % ("7" * 5000)}}]},
        {"role": "tool", "tool_call_id": "x", "content": "ok"}], "tools": [tool]})
    # Where the release refuses and tide decides otherwise, or the reverse.
    add("dev_unknown_role", {"messages": [{"role": "narrator", "content": "x"}, u]})
    add("dev_developer_role", {"messages": [{"role": "developer", "content": "be nice"}, u]})
    add("dev_image_token_content", {"messages": [{"role": "user", "content": "see <｜deepseek_image｜> here"}]})
    add("dev_image_token_reasoning", {"messages": [u, {"role": "assistant", "content": "",
                                                       "reasoning_content": "<｜deepseek_image｜>"}, u],
                                      "thinking": {"type": "enabled"}})
    add("dev_call_without_arguments", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f"}}]}]})
    add("dev_call_arguments_null", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": None}}]}]}, "arguments_not_string")
    add("dev_call_arguments_array", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": [1, 2]}}]}]}, "arguments_not_string")
    add("dev_nul_in_content", {"messages": [{"role": "user", "content": "a\u0000b"}]}, "nul")
    add("dev_tool_content_null", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "x", "content": None}]}, "tool_content_null")
    add("dev_system_content_null", {"messages": [{"role": "system", "content": None}, u]})
    add("dev_tool_name_space", {"messages": [u], "tools": [
        {"type": "function", "function": {"name": "get weather"}}]}, "names")
    add("dev_call_name_space", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "get weather", "arguments": "{}"}}]}]}, "names")
    add("dev_schema_big_int", {"messages": [u], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"maximum": 10**30}}}]}, "body_numbers")
    add("dev_response_format_text", {"messages": [u], "response_format": {"type": "text"}})
    add("dev_args_deep", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"d\": " + "[" * 70 + "]" * 70
                                                     + "}"}}]}]}, "depth")
    add("dev_args_lone_surrogate", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"s\": \"\\ud800\"}"}}]}]},
        )
    add("dev_args_nul", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"s\": \"a\\u0000b\"}"}}]}]},
        "nul")
    add("dev_args_lone_surrogate_outer", {"messages": [u, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "\"\\ud800\""}}]}]})
    return cases


# ----------------------------------------------------------------- mapping

def to_release(body):
    """The encoder's arguments for a request body, as tide reads the API."""
    msgs = copy.deepcopy(body["messages"])
    for m in msgs:
        if m.get("role") == "developer":
            m["role"] = "system"
        if "reasoning" in m and "reasoning_content" not in m:
            m["reasoning_content"] = m.pop("reasoning")
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if choice == "none":
        tools = None
    elif isinstance(choice, dict) and tools:
        tools = [t for t in tools if t["function"].get("name") == choice["function"]["name"]]
    fmt = body.get("response_format")
    if fmt is not None and fmt.get("type") == "text":
        fmt = None
    if tools or fmt:
        if not msgs or msgs[0].get("role") != "system":
            msgs.insert(0, {"role": "system", "content": ""})
        if tools:
            msgs[0]["tools"] = tools
        if fmt:
            msgs[0]["response_format"] = fmt
    if body.get("continue_final_message") and msgs and msgs[-1].get("role") == "assistant":
        msgs[-1]["wo_eos"] = True
    thinking = None
    if isinstance(body.get("thinking"), dict):
        thinking = body["thinking"].get("type") == "enabled"
    elif isinstance(body.get("chat_template_kwargs"), dict) and "thinking" in body["chat_template_kwargs"]:
        thinking = bool(body["chat_template_kwargs"]["thinking"])
    effort = body.get("reasoning_effort")
    if thinking is None:
        thinking = effort is not None and effort != "none"
    return {"messages": msgs, "thinking_mode": "thinking" if thinking else "chat", "reasoning_effort": effort}


# ----------------------------------------------------------------- commands

def gen(outdir):
    r = random.Random(SEED)
    cases = [(n, b, d) for n, b, d in edge_cases()]
    for i in range(300):
        cases.append(("gen_%03d" % i, conversation(r), None))
    out = pathlib.Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "inputs.jsonl", "w", encoding="utf-8") as f:
        for name, body, dev in cases:
            rec = {"name": name, "body": json.dumps(body, ensure_ascii=False)}
            if dev:
                rec["deviation"] = dev
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print("wrote %d cases to %s" % (len(cases), out / "inputs.jsonl"))


def encode(encoder_path, outdir):
    spec = importlib.util.spec_from_file_location("release_encoding", encoder_path)
    enc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(enc)
    out = pathlib.Path(outdir)
    n_ok = n_err = 0
    with open(out / "inputs.jsonl", encoding="utf-8") as f, \
            open(out / "expected.jsonl", "w", encoding="utf-8") as g:
        for line in f:
            rec = json.loads(line)
            rel = to_release(json.loads(rec["body"]))
            res = {"name": rec["name"]}
            try:
                res["prompt"] = enc.encode_messages(rel["messages"], thinking_mode=rel["thinking_mode"],
                                                    reasoning_effort=rel["reasoning_effort"])
                res["prompt"].encode("utf-8")  # a lone surrogate cannot become a prompt
                n_ok += 1
            except Exception as e:  # the release refuses this conversation
                res.pop("prompt", None)
                res["error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
                n_err += 1
            g.write(json.dumps(res, ensure_ascii=False) + "\n")
    print("rendered %d, refused %d" % (n_ok, n_err))


def main(argv):
    if len(argv) == 3 and argv[1] == "gen":
        gen(argv[2])
    elif len(argv) == 4 and argv[1] == "encode":
        encode(argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
