#!/usr/bin/python3
"""Independent oracle for tide's engram key normalisation and token map.

Written from the rules in docs/engram.md with Python's unicodedata (it does
not share code with tide or with any other reference): the reference runs a
HF `tokenizers` normalizer sequence (Rust); this file states the same rules
in Python terms.

  norm      stdin: one string per line, "x" and its UTF-8 bytes in hex;
            stdout: the normalised strings, the same way.
  map       stdin: one token per line: "-" for an id with no token, else "x"
            and the hex-encoded raw vocabulary string; stdout: the number of
            compressed ids, then one compressed id per line.
  tokjson F print the map of tokenizer.json F the same way ("map" output).
"""
import json
import re
import sys
import unicodedata

# Rust's char::is_whitespace: the White_Space property (not str.isspace,
# which also counts U+001C..U+001F).
WHITE_SPACE = "".join(
    chr(c)
    for c in list(range(0x09, 0x0E)) + [0x20, 0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)
SENTINEL = "\ue000"


def normalize(s: str) -> str:
    s = unicodedata.normalize("NFKC", s)
    s = unicodedata.normalize("NFD", s)
    s = "".join(c for c in s if not unicodedata.category(c).startswith("M"))
    s = "".join(c.lower() for c in s)  # per character: no final-sigma context
    s = re.sub(r"[ \t\r\n]+", " ", s)
    if s == " ":
        s = SENTINEL
    s = s.strip(WHITE_SPACE)
    return s.replace(SENTINEL, " ")


def byte_alphabet():
    """GPT-2 bytes_to_unicode, as a char -> byte dict."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


CHAR_BYTE = byte_alphabet()


def decode(tok):
    if tok is None:
        return ""
    if all(c in CHAR_BYTE for c in tok):
        raw = bytes(CHAR_BYTE[c] for c in tok)
    else:
        raw = tok.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace")


def token_map(tokens):
    keys, out = {}, []
    for tok in tokens:
        text = decode(tok)
        if "\ufffd" in text:
            key = tok
        else:
            key = normalize(text) or text
        out.append(keys.setdefault(key, len(keys)))
    return out, len(keys)


def read_tokenizer_json(path):
    with open(path, encoding="utf-8") as f:
        tj = json.load(f)
    vocab = tj["model"]["vocab"]
    added = tj.get("added_tokens") or []
    strings = set(vocab) | {a["content"] for a in added}
    n = len(strings)
    ids = {}
    for s, i in vocab.items():
        ids[i] = s
    for a in added:  # added tokens win
        ids[a["id"]] = a["content"]
    return [ids.get(i) for i in range(n)]


def print_map(m, n):
    out = [str(n)] + [str(x) for x in m]
    sys.stdout.write("\n".join(out) + "\n")


def main():
    cmd = sys.argv[1]
    if cmd == "norm":
        for line in sys.stdin.read().split("\n"):
            line = line.strip()
            if not line:
                continue
            s = bytes.fromhex(line[1:]).decode("utf-8")
            sys.stdout.write("x" + normalize(s).encode("utf-8").hex() + "\n")
    elif cmd == "map":
        toks = []
        for line in sys.stdin.read().split("\n"):
            line = line.strip()
            if not line:
                continue
            toks.append(None if line == "-" else bytes.fromhex(line[1:]).decode("utf-8"))
        print_map(*token_map(toks))
    elif cmd == "tokjson":
        print_map(*token_map(read_tokenizer_json(sys.argv[2])))
    else:
        raise SystemExit("usage: engram_norm.py norm|map|tokjson FILE")


if __name__ == "__main__":
    main()
