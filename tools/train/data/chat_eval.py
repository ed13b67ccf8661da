#!/usr/bin/env python3
"""Accuracy of a model on the held-out chat tasks (chat_valid.jsonl), through
tide: each example's conversation without its final answer goes to
`tide run --input --text` (greedy), and the reply is compared with the answer
make_chat.py recorded in the example's metadata.

    chat_eval.py --tide build/tide --model models/tide-mini \\
                 --data chat_valid.jsonl [--per-task 50] [--out results.json]

Scores (first --per-task examples of each task, in file order):
  verse       the reply parses as JSON and equals {"book", "chapter", "verse"}
              (exact); also the book alone
  define      the reply equals '"word" (pos): definition' exactly; also its
              first five words
  calc_call   (the conversation cut before the assistant's tool call) the
              model calls `calculator` with the expression exactly
  calc        (after the tool result) the reply equals "a op b = r"
  continue    the first five words of the continuation
  next_verse  the next verse's text, exactly
Thinking-mode examples are scored on the final content (the reasoning is
separate in tide's output).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MAX_TOKENS = {"verse": 40, "define": 120, "calc": 40, "calc_call": 60, "continue": 24, "next_verse": 120}


def first_words(s, n=5):
    return " ".join(s.split()[:n])


def requests(data, per_task, every=1):
    """-> [(request body with id, task, expected)] of lines 0, every, 2*every, ..."""
    out, seen = [], {}
    for i, line in enumerate(open(data, encoding="utf-8")):
        if i % every:
            continue
        ex = json.loads(line)
        task = ex["metadata"]["task"]
        msgs = ex["messages"]
        final = msgs[-1]
        jobs = [(task, msgs[:-1], final)]
        if task == "calc":  # also the tool-call stage: cut before the last assistant's call
            k = max(j for j, m in enumerate(msgs) if m["role"] == "assistant" and m.get("tool_calls"))
            jobs.append(("calc_call", msgs[:k], msgs[k]))
        for t, prefix, want in jobs:
            if seen.get(t, 0) >= per_task:
                continue
            seen[t] = seen.get(t, 0) + 1
            body = {k: v for k, v in ex.items() if k not in ("messages", "metadata")}
            body.update({"id": f"{t}:{i}", "messages": prefix, "max_tokens": MAX_TOKENS[t], "temperature": 0})
            out.append((body, t, want))
    return out


def score(task, res, want):
    """-> {metric: 0/1} for one reply."""
    text = (res.get("text") or "").strip()
    if task == "verse":
        try:
            got = json.loads(text)
        except ValueError:
            got = None
        exp = json.loads(want["content"])
        return {"exact": got == exp, "book": isinstance(got, dict) and got.get("book") == exp["book"]}
    if task == "calc_call":
        calls = res.get("tool_calls") or []
        exp = want["tool_calls"][0]["function"]
        ok = False
        if calls:
            c = calls[0].get("function", calls[0])
            try:
                args = json.loads(c.get("arguments", "{}"))
            except ValueError:
                args = None
            ok = c.get("name") == exp["name"] and args == json.loads(exp["arguments"])
        return {"exact": ok, "called": bool(calls)}
    exp = want["content"].strip()
    if task in ("define", "continue"):
        return {"exact": text == exp, "first5": first_words(text) == first_words(exp)}
    return {"exact": text == exp}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tide", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True, help="chat_valid.jsonl (make_chat.py)")
    ap.add_argument("--per-task", type=int, default=50)
    ap.add_argument("--every", type=int, default=1,
                    help="only lines 0, K, 2K, ... (a trainer that split chat_train + chat_valid "
                         "by index modulo 20 held out exactly the lines of chat_valid with index %% 20 == 0)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--out", help="write the per-example results here (JSON)")
    ap.add_argument("--extra", default="", help="more tide run options, e.g. '--backend cuda'")
    ns = ap.parse_args()
    jobs = requests(ns.data, ns.per_task, ns.every)
    with tempfile.TemporaryDirectory() as tmp:
        req, res = os.path.join(tmp, "req.jsonl"), os.path.join(tmp, "res.jsonl")
        with open(req, "w", encoding="utf-8") as f:
            for body, _, _ in jobs:
                f.write(json.dumps(body, ensure_ascii=False) + "\n")
        cmd = [ns.tide, "run", "--model", ns.model, "--input", req, "--text", "--output", res,
               "--threads", str(ns.threads)] + ns.extra.split()
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        got = {d["id"]: d for d in map(json.loads, open(res, encoding="utf-8"))}
    table, rows = {}, []
    for body, task, want in jobs:
        r = got.get(body["id"], {})
        s = score(task, r, want)
        rows.append({"id": body["id"], "task": task, "reply": r.get("text"), "tool_calls": r.get("tool_calls"),
                     "error": r.get("error"), "score": s})
        t = table.setdefault(task, {"n": 0})
        t["n"] += 1
        for k, v in s.items():
            t[k] = t.get(k, 0) + int(bool(v))
    summary = {task: {"n": t["n"], **{k: round(v / t["n"], 4) for k, v in t.items() if k != "n"}}
               for task, t in sorted(table.items())}
    if ns.out:
        with open(ns.out, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "examples": rows}, f, indent=1, ensure_ascii=False)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    sys.exit(main())
