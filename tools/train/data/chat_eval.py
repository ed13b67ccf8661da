#!/usr/bin/env python3
"""Accuracy of a model on the held-out chat tasks (chat_valid.jsonl), through
tide: each example's conversation without its final answer goes to
`tide run --input --text` (greedy), and the reply is compared with the answer
make_chat.py recorded in the example's metadata.

    chat_eval.py [--tide build/tide] [--model models/tide-mini] \\
                 --data chat_valid.jsonl [--per-task 50] [--out results.json]

Scores (first --per-task examples of each task, in file order), "exact"
for each and what shows the format was learned:
  verse       the reply parses as JSON and equals {"book", "chapter", "verse"};
              json: an object with exactly those keys; book: the book right
  define      the reply equals '"word" (pos): definition'; headword: it starts
              with '"word" (pos): '; first5: its first five words
  calc_call   (the conversation cut before the assistant's tool call) the
              model calls `calculator` with the expression exactly; called:
              it calls a tool at all
  calc        (after the tool result) the reply equals "a op b = r"; form:
              it has that form; operands: "a op b" right
  continue    the continuation; first1 / first5: its first word / five words
  next_verse  the next verse's text, exactly
Thinking-mode examples are scored on the final content (the reasoning is
separate in tide's output).
"""
import argparse
import json
import os
import re
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


CALC_FORM = re.compile(r"^(-?\d+ [-+*/] -?\d+) = (-?\d+)$")


def score(task, res, want):
    """-> {metric: 0/1} for one reply: "exact", and what shows the format."""
    text = (res.get("text") or "").strip()
    if task == "verse":
        try:
            got = json.loads(text)
        except ValueError:
            got = None
        exp = json.loads(want["content"])
        keys = isinstance(got, dict) and sorted(got) == ["book", "chapter", "verse"]
        return {"exact": got == exp, "json": keys, "book": keys and got["book"] == exp["book"]}
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
    if task == "define":  # '"word" (pos): definition'
        head = exp[:exp.index("): ") + 3]
        return {"exact": text == exp, "headword": text.startswith(head), "first5": first_words(text) == first_words(exp)}
    if task == "calc":
        m, e = CALC_FORM.match(text), CALC_FORM.match(exp)
        return {"exact": text == exp, "form": bool(m), "operands": bool(m) and m.group(1) == e.group(1)}
    if task == "continue":
        return {"exact": text == exp, "first1": first_words(text, 1) == first_words(exp, 1),
                "first5": first_words(text) == first_words(exp)}
    return {"exact": text == exp}


def run_tide(ns, jobs):
    """-> {id: tide run's result line} for every job."""
    with tempfile.TemporaryDirectory() as tmp:
        req, res = os.path.join(tmp, "req.jsonl"), os.path.join(tmp, "res.jsonl")
        with open(req, "w", encoding="utf-8") as f:
            for body, _, _ in jobs:
                f.write(json.dumps(body, ensure_ascii=False) + "\n")
        cmd = [ns.tide, "run", "--model", ns.model, "--input", req, "--text", "--output", res,
               "--threads", str(ns.threads)] + ns.extra.split()
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        return {d["id"]: d for d in map(json.loads, open(res, encoding="utf-8"))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tide", default="build/tide")
    ap.add_argument("--model", default="models/tide-mini")
    ap.add_argument("--data", required=True, help="chat_valid.jsonl (make_chat.py)")
    ap.add_argument("--per-task", type=int, default=50)
    ap.add_argument("--every", type=int, default=1,
                    help="only lines 0, K, 2K, ... (a trainer that split chat_train + chat_valid "
                         "by index modulo 20 held out exactly the lines of chat_valid with index %% 20 == 0)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--out", help="write the per-example results here (JSON)")
    ap.add_argument("--extra", default="", help="more tide run options, e.g. '--backend cuda'")
    ap.add_argument("--replies", help="score the replies of an earlier --out instead of running tide")
    ns = ap.parse_args()
    jobs = requests(ns.data, ns.per_task, ns.every)
    if ns.replies:
        got = {r["id"]: {"text": r["reply"], "tool_calls": r["tool_calls"], "error": r["error"]}
               for r in json.load(open(ns.replies, encoding="utf-8"))["examples"]}
    else:
        got = run_tide(ns, jobs)
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
