#!/usr/bin/env python3
"""Build the golden prompts: token ids of held-out text, tokenized by tide.

Tokenizes TEXT with `tide tokenize --jsonl` and the model's tokenizer.json
(the whole file as one string, newlines included; no BOS added), then cuts
one case per prompt length: the model's BOS id (config.json bos_token_id,
when there is one) followed by the next n-1 text tokens, and the CONT text
tokens after them as the teacher-forced continuation. Cases take disjoint
stretches of the text, in order; a text too short for all of them is an
error (it would repeat a stretch). Writes JSON:
  {"text": name, "text_sha256": .., "tokenizer_sha256": .., "bos": id|null,
   "cases": [{"name": "p16", "prompt": [...], "cont": [...]}, ...]}

Usage: make_prompts.py --tide TIDE --model DIR --text FILE [--lengths 16,64,..]
                       [--cont N] -o prompts.json
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

LENGTHS = "16,64,200,600,1100,2048"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def bos_id(model):
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    for d in (cfg, cfg.get("text_config") or {}):
        if isinstance(d.get("bos_token_id"), int):
            return d["bos_token_id"]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tide", required=True, help="the tide executable")
    ap.add_argument("--model", required=True, help="checkpoint dir (config.json, tokenizer.json)")
    ap.add_argument("--text", required=True, help="held-out text file (UTF-8)")
    ap.add_argument("--lengths", default=LENGTHS, help=f"prompt lengths in tokens, BOS included ({LENGTHS})")
    ap.add_argument("--cont", type=int, default=64, help="teacher-forced continuation tokens per case (64)")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    tok = os.path.join(a.model, "tokenizer.json")
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    r = subprocess.run([a.tide, "tokenize", "--jsonl", "--tokenizer", tok], input=json.dumps(text) + "\n",
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"make_prompts: tide tokenize failed: {r.stderr.strip()}")
    ids = [int(x) for x in r.stdout.split()]
    bos = bos_id(a.model)
    lengths = [int(x) for x in a.lengths.split(",")]
    cases, off = [], 0
    for n in lengths:
        body = n - (1 if bos is not None else 0)
        need = body + a.cont
        if off + need > len(ids):
            sys.exit(f"make_prompts: {a.text} has {len(ids)} tokens; the cases need at least "
                     f"{sum(x + a.cont for x in lengths)}")
        prompt = ([bos] if bos is not None else []) + ids[off:off + body]
        cases.append({"name": f"p{n}", "prompt": prompt, "cont": ids[off + body:off + need]})
        off += need
    out = {"text": os.path.basename(a.text), "text_sha256": sha256(a.text),
           "tokenizer_sha256": sha256(tok), "bos": bos, "cases": cases}
    with open(a.out, "w") as f:
        json.dump(out, f)
    print(f"{a.out}: {len(cases)} cases, {off} of {len(ids)} text tokens used")


if __name__ == "__main__":
    main()
