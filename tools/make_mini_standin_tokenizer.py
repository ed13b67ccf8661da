#!/usr/bin/python3
"""A small-vocabulary stand-in tokenizer.json, for tests of checkpoints whose
tokenizer is not V4.1's 129280-id one (tide-mini's is about 16K ids).

Takes the V4.1 stand-in (make_standin_tokenizer.py's output) and keeps its
byte-level BPE truncated to the first merges: ids 0..255 are the 256 byte
symbols, then the results of the merges in rank order (a merge whose parts are
not both kept is skipped), up to VOCAB minus the added tokens. Every added
token of the V4.1 stand-in that has a name (BOS, EOS, pad, the chat and
control tokens; not the numbered place holders) is
appended in REVERSE order at the top ids, so that none of them sits at the id
the release gives it: BOS is VOCAB-1, EOS VOCAB-2, and so on. Code that
hard-codes an id instead of asking the tokenizer fails on it.

Usage: make_mini_standin_tokenizer.py V41_STANDIN_JSON VOCAB OUT_JSON
"""
import json
import sys


def bytes_to_unicode():
    """The byte-level alphabet: byte b -> the character that spells it."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, vocab_size, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(src, encoding="utf-8") as f:
        tok = json.load(f)
    added = [a for a in tok["added_tokens"]  # the named ones; V3's numbered place holders are left out
             if "place\u2581holder\u2581no" not in a["content"] and "place_holder_mm_span" not in a["content"]]
    n_bpe = vocab_size - len(added)
    if n_bpe < 512:
        sys.exit(f"VOCAB {vocab_size} leaves {n_bpe} ids for the BPE; want at least 512")
    vocab = {}
    for ch in bytes_to_unicode().values():
        vocab[ch] = len(vocab)
    merges = []
    for m in tok["model"]["merges"]:
        if len(vocab) >= n_bpe:
            break
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b not in vocab:
            vocab[a + b] = len(vocab)
            merges.append(f"{a} {b}")
    if len(vocab) != n_bpe:
        sys.exit(f"only {len(vocab)} BPE ids from the merges; wanted {n_bpe}")
    top = []
    for i, a in enumerate(reversed(added)):
        b = dict(a)
        b["id"] = vocab_size - len(added) + i
        top.append(b)
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = merges
    tok["added_tokens"] = top
    with open(out, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
