#!/usr/bin/env python3
"""Builds tide-mini's chat examples from the Debian corpus, deterministically.

Each output line is one OpenAI Chat Completions request body (the shape
src/api/req_chat.c parses): "messages" (system / user / assistant / tool, with
assistant "tool_calls" and "reasoning_content"), "tools" where a tool is
offered, "thinking" / "reasoning_effort" for thinking mode, "response_format"
for some JSON answers, and "metadata" {"task", "answer", ...} for evaluation
(tide's parser ignores it). The last message is always the assistant's answer;
`tide render --with-answer` turns a line into the exact V4.1 training text.

Tasks (tools/train/data/README.md): define (GCIDE), continue (Austen, Moby
Dick, WEB), verse (KJV book/chapter/verse as JSON), calc (arithmetic through a
calculator tool call), and multi-turn mixes of them. The held-out split is by
item (headword, verse reference, passage region, operand pair), decided by a
hash, so a held-out question never appears in the training examples.

Usage: make_chat.py --corpus DIR --kjv KJV_NUMBERED --seed S --n N
                    --valid-frac F --train OUT.jsonl --valid OUT.jsonl
"""
import argparse
import hashlib
import json
import random
import re
import sys

POS = {
    "n.": "noun", "a.": "adjective", "adj.": "adjective", "v. t.": "verb", "v. i.": "verb",
    "v.": "verb", "adv.": "adverb", "prep.": "preposition", "conj.": "conjunction",
    "interj.": "interjection", "pron.": "pronoun", "p. p.": "past participle",
    "p. a.": "participial adjective", "n. pl.": "plural noun",
}

# Never in message text: the special tokens' fullwidth bar, the thinking tags,
# the record separator between rendered documents.
FORBIDDEN = ("\uff5c", "<think>", "</think>", "\x1e")

SYSTEMS = [
    "You are tide-mini, a small assistant. Answer briefly.",
    "You are a helpful assistant.",
    "You are tide-mini. Be concise and exact.",
]


def held_out(key, frac):
    """The split: a stable hash of the item's key, independent of the seed."""
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return h / 2.0 ** 64 < frac


def ws(s):
    return re.sub(r"\s+", " ", s).strip()


# ---------------------------------------------------------------- sources

def strip_bracket(s):
    """Drops a leading [...] group, brackets nested inside it included."""
    if not s.startswith("["):
        return s
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "["
        depth -= ch == "]"
        if depth == 0:
            return s[i + 1:].lstrip()
    return ""


def load_gcide(path):
    """(headword, part of speech, first definition) from the dictd text."""
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find("Begin file 1 of 26")
    text = text[start:] if start >= 0 else text
    head = re.compile(r"^([A-Za-z][A-Za-z' -]{1,30}?) \\[^\\\n]*\\, ?(.*)$")
    out, seen = [], set()
    for block in re.split(r"\n\s*\n(?=\S)", text):
        lines = block.split("\n")
        m = head.match(lines[0])
        if not m:
            continue
        word, rest = m.group(1).strip(), m.group(2)
        pos = None
        for p in sorted(POS, key=len, reverse=True):
            if rest.startswith(p):
                pos = POS[p]
                rest = rest[len(p):]
                break
        if pos is None:
            continue
        body = rest + "\n" + "\n".join(lines[1:])
        body = strip_bracket(body.lstrip(" ,;\n"))  # etymology
        body = re.split(r"\[(?:1913 Webster|WordNet|PJC|Century|Webster)[^\]]*\]", body)[0]
        body = re.sub(r"--[A-Z][\w.' ]*\.?\s*$", "", ws(body))  # trailing author citation
        body = re.sub(r"^\d+\.\s*", "", body)
        body = re.sub(r"^\((?:[A-Z][a-z]+\.?\s*)+\)\s*", "", body)  # (Anat.) domain labels
        body = re.sub(r"\s*\[(?:Obs|R|Colloq|Archaic|Rare|Poetic|Local|Prov\. Eng|Scot|Eng|U\. S|Slang|Cant|Low)"
                      r"[^\]]{0,20}\]", "", body)
        body = body.strip(" ;,")
        if not 15 <= len(body) <= 260 or "\\" in body or "{" in body or body.startswith("See "):
            continue
        if not body.endswith("."):
            body += "."
        word = word.lower() if word[1:] == word[1:].lower() else word
        if word in seen:
            continue
        seen.add(word)
        out.append((word, pos, body[0].upper() + body[1:]))
    return out


def load_kjv(path):
    """[(book, chapter, verse, text)] from `bible` output with verse numbers."""
    verses, book, chap = [], None, None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        m = re.fullmatch(r"((?:[1-3] )?[A-Z][A-Za-z ]+) (\d+)", line)
        if m:
            book, chap = m.group(1), int(m.group(2))
            continue
        m = re.match(r"^ +(\d+) (.*)$", line)
        if m and book:
            verses.append([book, chap, int(m.group(1)), m.group(2)])
        elif line.strip() and verses:
            verses[-1][3] += " " + line.strip()
    return [(b, c, v, ws(t)) for b, c, v, t in verses]


def load_prose(path):
    """Paragraphs of one text, whitespace-normalised, long enough to split."""
    text = open(path, encoding="utf-8", errors="replace").read()
    paras = [ws(p) for p in re.split(r"\n\s*\n", text)]
    return [p for p in paras if len(p.split()) >= 60]


# ---------------------------------------------------------------- tasks

def msg(role, content, **kw):
    d = {"role": role, "content": content}
    d.update(kw)
    return d


def task_define(rng, item):
    word, pos, gloss = item
    q = rng.choice([
        'Define the word "{w}".', 'What does "{w}" mean?', "What is the meaning of the word {w}?",
        "Give a dictionary definition of {w}.", "{w}: what does it mean?",
    ]).format(w=word)
    a = f'"{word}" ({pos}): {gloss}'
    think = f'The user asks for the meaning of "{word}". It is a {pos}; the dictionary defines it as follows.'
    return [msg("user", q)], a, think, {"task": "define", "answer": gloss, "word": word}


def task_continue(rng, item):
    src, para = item
    words = para.split()
    n_ctx = rng.randint(30, min(80, len(words) - 20))
    n_out = rng.randint(20, min(60, len(words) - n_ctx))
    ctx, cont = " ".join(words[:n_ctx]), " ".join(words[n_ctx:n_ctx + n_out])
    q = rng.choice([
        "Continue this passage:\n\n{t}", "Continue the text.\n\n{t}",
        "Here is the start of a passage from {s}. Continue it.\n\n{t}",
    ]).format(t=ctx, s=src)
    think = f"This reads like {src}. I continue in the same style from where it stops."
    return [msg("user", q)], cont, think, {"task": "continue", "answer": cont, "source": src}


VERSE_SCHEMA = {
    "type": "object",
    "properties": {"book": {"type": "string"}, "chapter": {"type": "integer"}, "verse": {"type": "integer"}},
    "required": ["book", "chapter", "verse"],
}


def task_verse(rng, item, extra, allow_format):
    book, chap, verse, text = item
    ans = json.dumps({"book": book, "chapter": chap, "verse": verse})
    if rng.random() < 0.4 and allow_format:
        extra["response_format"] = {"type": "json_schema",
                                    "json_schema": {"name": "verse_reference", "schema": VERSE_SCHEMA}}
        q = f'Where in the King James Bible is this verse?\n\n"{text}"'
    else:
        q = rng.choice([
            'Give the book, chapter and verse of this King James verse as JSON with keys "book", "chapter" '
            'and "verse":\n\n"{t}"',
            'Which verse is this? Reply with JSON {{"book": ..., "chapter": ..., "verse": ...}}.\n\n"{t}"',
        ]).format(t=text)
    think = f"This verse is from the book of {book}, chapter {chap}, verse {verse}."
    return [msg("user", q)], ans, think, {"task": "verse", "answer": ans}


CALC_TOOL = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression and return the result.",
    "parameters": {"type": "object", "properties": {
        "expression": {"type": "string", "description": "the expression, e.g. 12 * (3 + 4)"}},
        "required": ["expression"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Return the current time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}


def calc_item(rng):
    op = rng.choice("+-*/")
    if op == "*":
        a, b = rng.randint(2, 999), rng.randint(2, 99)
    elif op == "/":
        b = rng.randint(2, 99)
        a = b * rng.randint(2, 999)
    else:
        a, b = rng.randint(10, 99999), rng.randint(10, 99999)
    r = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if op == "/" else 0}[op]
    return a, op, b, r


def task_calc(rng, item, extra, thinking, call_no):
    a, op, b, r = item
    expr = f"{a} {op} {b}"
    q = rng.choice(["What is {e}?", "Compute {e}.", "Calculate {e} for me.", "{e} = ?"]).format(e=expr)
    extra["tools"] = [CALC_TOOL] if rng.random() < 0.7 else [TIME_TOOL, CALC_TOOL]
    cid = f"call_{call_no}"
    call = msg("assistant", "", tool_calls=[{"id": cid, "type": "function", "function": {
        "name": "calculator", "arguments": json.dumps({"expression": expr})}}])
    if thinking:
        call["reasoning_content"] = f"I need {expr}. The calculator tool evaluates it exactly."
    ans = f"{expr} = {r}"
    think = f"The calculator returned {r}, so {expr} = {r}."
    msgs = [msg("user", q), call, msg("tool", str(r), tool_call_id=cid)]
    return msgs, ans, think, {"task": "calc", "answer": str(r)}


# ---------------------------------------------------------------- assembly

def build(args):
    rng = random.Random(args.seed)
    gcide = load_gcide(f"{args.corpus}/gcide.txt")
    kjv = load_kjv(args.kjv)
    prose = []
    for name, title in (("austen.txt", "Jane Austen"), ("mobydick.txt", "Moby Dick"),
                        ("web.txt", "the World English Bible")):
        prose += [(title, p) for p in load_prose(f"{args.corpus}/{name}")]
    print(f"make_chat: {len(gcide)} definitions, {len(kjv)} verses, {len(prose)} paragraphs",
          file=sys.stderr)
    if len(gcide) < 1000 or len(kjv) < 30000 or len(prose) < 1000:
        sys.exit("make_chat: the corpus looks incomplete (see tools/train/data/README.md)")

    pools = {  # item -> key that decides its split
        "define": (gcide, lambda it: "define:" + it[0]),
        "verse": (kjv, lambda it: f"verse:{it[0]}:{it[1]}:{it[2]}"),
        "continue": (prose, lambda it: "continue:" + it[1][:80]),
    }
    split = {}
    for name, (items, key) in pools.items():
        split[name] = ([it for it in items if not held_out(key(it), args.valid_frac)],
                       [it for it in items if held_out(key(it), args.valid_frac)])
    verse_next = {(b, c, v): t for b, c, v, t in kjv}

    def pick(name, valid):
        return rng.choice(split[name][1 if valid else 0])

    def pick_calc(valid):
        while True:
            it = calc_item(rng)
            if held_out(f"calc:{it[0]}{it[1]}{it[2]}", args.valid_frac) == valid:
                return it

    def one_turn(kind, valid, extra, thinking, call_no, allow_format=True):
        if kind == "define":
            return task_define(rng, pick("define", valid))
        if kind == "continue":
            return task_continue(rng, pick("continue", valid))
        if kind == "verse":
            return task_verse(rng, pick("verse", valid), extra, allow_format)
        return task_calc(rng, pick_calc(valid), extra, thinking, call_no)

    def example(valid):
        extra = {}
        thinking = rng.random() < 0.25
        if thinking:
            extra["thinking"] = {"type": "enabled"}
            if rng.random() < 0.5:
                extra["reasoning_effort"] = rng.choice(["low", "high", "max"])
        msgs = []
        if rng.random() < 0.3:
            msgs.append(msg("system", rng.choice(SYSTEMS)))
        kind = rng.choices(["define", "continue", "verse", "calc"], [3, 2, 3, 2])[0]
        turn, ans, think, meta = one_turn(kind, valid, extra, thinking, 0)
        r = rng.random()
        if r < 0.12 and kind == "verse":  # follow-up: the next verse
            b, c, v = json.loads(ans)["book"], json.loads(ans)["chapter"], json.loads(ans)["verse"]
            nxt = verse_next.get((b, c, v + 1))
            if nxt and "response_format" not in extra:
                first = msg("assistant", ans)
                msgs += turn + [first, msg("user", "What is the next verse?")]
                meta = {"task": "next_verse", "answer": nxt}
                think = f"The verse after {b} {c}:{v} is {b} {c}:{v + 1}."
                ans = nxt
                turn = []
        elif r < 0.2 and kind != "calc" and "response_format" not in extra:
            # a second, independent question in the same conversation
            msgs += turn + [msg("assistant", ans)]
            kind2 = rng.choice(["define", "verse", "calc"])
            turn, ans, think, meta = one_turn(kind2, valid, extra, thinking, 1, allow_format=False)
        msgs += turn
        final = msg("assistant", ans)
        if thinking:
            final["reasoning_content"] = think
        msgs.append(final)
        for m in msgs:  # the rendered text must not hold markup spelled by a message
            for t in (m["content"], m.get("reasoning_content", "")):
                if any(x in t for x in FORBIDDEN):
                    sys.exit(f"make_chat: a message spells special-token markup: {t[:200]!r}")
        body = {"messages": msgs}
        body.update(extra)
        meta["turns"] = sum(1 for m in msgs if m["role"] == "user")
        body["metadata"] = meta
        return body

    n_valid = max(1, int(round(args.n * args.valid_frac)))
    with open(args.train, "w", encoding="utf-8") as ft:
        for _ in range(args.n - n_valid):
            ft.write(json.dumps(example(False), ensure_ascii=False) + "\n")
    with open(args.valid, "w", encoding="utf-8") as fv:
        for _ in range(n_valid):
            fv.write(json.dumps(example(True), ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="the directory build_corpus.sh wrote")
    ap.add_argument("--kjv", required=True, help="KJV with verse numbers (fetch_kjv.sh)")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--n", type=int, default=40000, help="examples in all (train + valid)")
    ap.add_argument("--valid-frac", type=float, default=0.05)
    ap.add_argument("--train", required=True)
    ap.add_argument("--valid", required=True)
    build(ap.parse_args())


if __name__ == "__main__":
    main()
