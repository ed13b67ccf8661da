#!/usr/bin/python3
"""Builds the stand-in DeepSeek-V4.1 tokenizer.json from DeepSeek-V3's.

The real V4.1 tokenizer.json is not obtainable offline. V4.1 keeps V3's
byte-level BPE (the first 128000 ids, the merges, the pre-tokenizer) and
re-labels the added-token block 128000..129279. This script copies V3's file
and rewrites only `added_tokens`, so the result has the released vocabulary
size (129280) and V4.1's special tokens at their published ids.

Sources for the ids (see docs/tokenizer.md):
  - the V4.1 config: noise_token_id 128799, image_token_id 129264;
  - the task brief: <think> 128821, </think> 128822, ｜DSML｜ 128825,
    <｜latest_reminder｜> 128828, <｜deepseek_image｜> 129264;
  - a public third-party re-implementation listing the whole block
    (<｜System｜> 128799, task tokens 128829.., image tokens 129262..).
Ids not named by any source become `<｜place▁holder▁no▁N｜>` as in V3.

Usage: make_standin_tokenizer.py V3_TOKENIZER_JSON OUT_JSON
"""
import json
import sys

VOCAB_SIZE = 129280
FIRST_ADDED = 128000

# Tokens that carry meaning in rendered prompts or parsed output: not
# "special" (they survive skip_special_tokens, as V3's <｜User｜> does) and
# "normalized" like V3's chat tokens.
TEXT_TOKENS = {
    128799: "<｜System｜>",
    128800: "<｜fim▁hole｜>",
    128801: "<｜fim▁begin｜>",
    128802: "<｜fim▁end｜>",
    128803: "<｜User｜>",
    128804: "<｜Assistant｜>",
    128806: "<｜tool▁calls▁begin｜>",
    128807: "<｜tool▁calls▁end｜>",
    128808: "<｜tool▁call▁begin｜>",
    128809: "<｜tool▁call▁end｜>",
    128810: "<｜tool▁outputs▁begin｜>",
    128811: "<｜tool▁outputs▁end｜>",
    128812: "<｜tool▁output▁begin｜>",
    128813: "<｜tool▁output▁end｜>",
    128814: "<｜tool▁sep｜>",
    128821: "<think>",
    128822: "</think>",
    128825: "｜DSML｜",
    128828: "<｜latest_reminder｜>",
    128829: "<｜action｜>",
    128830: "<｜query｜>",
    128831: "<｜authority｜>",
    128832: "<｜domain｜>",
    128833: "<｜task｜>",
    128834: "<｜political｜>",
    128835: "<｜entity｜>",
    128836: "<｜title｜>",
    128837: "<｜safety｜>",
    128838: "<｜answer｜>",
    128839: "<｜search｜>",
    128842: "<｜search▁begin｜>",
    128843: "<｜search▁end｜>",
    128844: "<｜extracted_url｜>",
    128845: "<｜read_url｜>",
    128846: "<｜end_of_query｜>",
}

# Control tokens: special, matched on the raw text.
SPECIAL_TOKENS = {
    128805: "<|EOT|>",
    128815: "<｜begin▁of▁repo▁name｜>",
    128816: "<｜end▁of▁repo▁name｜>",
    128817: "<｜begin▁of▁file▁name｜>",
    128818: "<｜end▁of▁file▁name｜>",
    128819: "<｜begin▁of▁file｜>",
    128820: "<｜end▁of▁file｜>",
    128823: "<｜place▁holder▁for▁copy｜>",
    128824: "<｜place▁holder▁for▁pointer▁replace｜>",
    128826: "<｜begin▁sys｜>",
    128827: "<｜end▁sys｜>",
    128840: "<dsml:",
    128841: "</dsml:",
    129262: "<｜rl_image_pad｜>",
    129263: "<｜rl_image_start｜>",
    129264: "<｜deepseek_image｜>",
    129271: "<｜/polygon｜>",
    129272: "<｜polygon｜>",
    129273: "<｜/point｜>",
    129274: "<｜point｜>",
    129275: "<｜/box｜>",
    129276: "<｜box｜>",
    129277: "<｜/ref｜>",
    129278: "<｜ref｜>",
}


def mm_span(n):
    return "<|place_holder_mm_span_%04d|>" % n


def block_contents():
    """Id -> (content, special) for 128000..129279."""
    out = {}
    for i in range(FIRST_ADDED, VOCAB_SIZE):
        if i <= 128798:
            out[i] = ("<｜place▁holder▁no▁%d｜>" % (i - FIRST_ADDED), True)
        elif 128847 <= i <= 129261:
            out[i] = (mm_span(i - 128826), True)
        elif 129265 <= i <= 129270:
            out[i] = (mm_span(i - 128829), True)
        elif i == 129279:
            out[i] = (mm_span(442), True)
    for i, c in TEXT_TOKENS.items():
        out[i] = (c, False)
    for i, c in SPECIAL_TOKENS.items():
        out[i] = (c, True)
    missing = [i for i in range(FIRST_ADDED, VOCAB_SIZE) if i not in out]
    assert not missing, missing
    contents = [c for c, _ in out.values()]
    assert len(set(contents)) == len(contents), "duplicate added-token content"
    return out


def added(i, content, special):
    return {"id": i, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": not special, "special": special}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_standin_tokenizer.py V3_TOKENIZER_JSON OUT_JSON")
    with open(sys.argv[1], encoding="utf-8") as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    if len(vocab) != FIRST_ADDED:
        sys.exit("expected DeepSeek-V3's 128000-entry BPE vocabulary, got %d" % len(vocab))
    head = [a for a in tok["added_tokens"] if a["id"] < FIRST_ADDED]
    block = block_contents()
    tail = [added(i, c, s) for i, (c, s) in sorted(block.items())]
    tok["added_tokens"] = head + tail
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
