#!/usr/bin/env python3
"""Independent oracle for tide's V4.1 prompt rendering (src/text/render.c).

Reads the golden inputs tests/data/render/*.json (tide's own small
conversation form, not an API request) and writes the expected renderings
next to them as *.txt. Written per message, the way the release's encoder
reasons (merge tool results into user turns, sort them into call order,
drop old reasoning, render each message, then the transition into the
assistant turn), so that it shares structure with neither the C code nor
any other implementation. Python's own json.dumps is the authority for the
JSON embedded in the prompt.

    /usr/bin/python3 tools/v41_render.py tests/data/render     # (re)write goldens
    /usr/bin/python3 tools/v41_render.py --check tests/data/render
"""
import json
import pathlib
import sys

BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"
SYSTEM = "<\uff5cSystem\uff5c>"
USER = "<\uff5cUser\uff5c>"
ASSISTANT = "<\uff5cAssistant\uff5c>"
D = "\uff5cDSML\uff5c"

TOOLS = (
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. "
    "You can invoke tools by writing a \"<D calls>\" block like the following:\n\n"
    "<D calls>\n<D invoke name=\"$TOOL_NAME\">\n"
    "<D parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</D parameter>\n"
    "...\n</D invoke>\n<D invoke name=\"$TOOL_NAME2\">\n...\n</D invoke>\n</D calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\nSCHEMAS\n\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
).replace("<D ", "<" + D + " ").replace("</D ", "</" + D + " ")


def dumps(v):
    return json.dumps(v, ensure_ascii=False)


def tools_block(tools):
    schemas = []
    for t in tools:
        f = {"name": t["name"]}
        if "description" in t:
            f["description"] = t["description"]
        if "parameters" in t:
            f["parameters"] = t["parameters"]
        schemas.append(dumps(f))
    return TOOLS.replace("SCHEMAS", "\n".join(schemas))


def params(arguments):
    try:
        v = json.loads(arguments)
        if isinstance(v, str):
            v = json.loads(v)
    except ValueError:
        v = None
    if not isinstance(v, dict):
        v = {"arguments": arguments}
    out = []
    for k, x in v.items():
        s = "true" if isinstance(x, str) else "false"
        out.append(f'<{D} parameter name="{k}" string="{s}">{x if isinstance(x, str) else dumps(x)}</{D} parameter>')
    return "\n".join(out)


def calls_block(calls):
    inv = [f'<{D} invoke name="{c["name"]}">\n{params(c.get("arguments", "{}"))}\n</{D} invoke>' for c in calls]
    return f"\n\n<{D} calls>\n" + "\n".join(inv) + f"\n</{D} calls>"


def render(conv):
    thinking = conv.get("thinking", False)
    effort = conv.get("effort", 75)
    tools = conv.get("tools", [])
    fmt = conv.get("response_format")
    msgs = [dict(m) for m in conv["messages"]]
    if tools or fmt is not None:
        if not msgs or msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": ""})
        msgs[0]["opening"] = True
    # merge user / tool runs into one user message with blocks
    merged = []
    for m in msgs:
        if m["role"] in ("user", "tool"):
            block = ("tool", m) if m["role"] == "tool" else ("text", m)
            if merged and merged[-1]["role"] == "user":
                merged[-1]["blocks"].append(block)
            else:
                merged.append({"role": "user", "blocks": [block]})
        else:
            merged.append(m)
    # sort tool results into call order
    order = {}
    for m in merged:
        if m["role"] == "assistant" and m.get("calls"):
            order = {c["id"]: i for i, c in enumerate(m["calls"]) if c.get("id")}
        elif m["role"] == "user":
            tb = [b for b in m["blocks"] if b[0] == "tool"]
            if len(tb) > 1 and order:
                tb.sort(key=lambda b: order.get(b[1].get("id", ""), 0))
                it = iter(tb)
                m["blocks"] = [next(it) if b[0] == "tool" else b for b in m["blocks"]]
    drop = not tools
    last_user = max([i for i, m in enumerate(merged)
                     if m["role"] == "user" or (m["role"] == "system" and i > 0)], default=-1)
    out = BOS
    for i, m in enumerate(merged):
        last = i == len(merged) - 1
        if i == 0 and thinking:
            out += SYSTEM + f"Reasoning Effort: {effort} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
        elif i == 0 and m["role"] == "system":
            out += SYSTEM
        role = m["role"]
        if role == "system":
            if i > 0:
                out += SYSTEM
            out += m.get("content", "")
            if m.get("opening") and tools:
                out += "\n\n" + tools_block(tools)
            if m.get("opening") and fmt is not None:
                out += "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" + dumps(fmt)
        elif role == "user":
            parts = []
            for kind, b in m["blocks"]:
                parts.append(f"<tool_result>{b['content']}</tool_result>" if kind == "tool" else b["content"])
            out += USER + "\n\n".join(parts)
        else:
            if thinking and (not drop or i > last_user):
                out += m.get("reasoning", "") + "</think>"
            out += m.get("content", "")
            if m.get("calls"):
                out += calls_block(m["calls"])
            if not (last and conv.get("continue")):
                out += EOS
        if not last and merged[i + 1]["role"] != "assistant":
            continue
        if role == "user" or (role == "system" and i > 0):
            out += ASSISTANT + ("<think>" if thinking and (not drop or i >= last_user) else "</think>")
    return out


def main(argv):
    check = "--check" in argv
    folder = pathlib.Path([a for a in argv[1:] if a != "--check"][0])
    bad = 0
    for src in sorted(folder.glob("*.json")):
        text = render(json.loads(src.read_text(encoding="utf-8")))
        dst = src.with_suffix(".txt")
        if check:
            if dst.read_text(encoding="utf-8") != text:
                print("MISMATCH", dst)
                bad += 1
        else:
            dst.write_text(text, encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
