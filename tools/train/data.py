"""tide-mini data: the Debian corpus (+ rendered chat examples), the byte-level
BPE tokenizer, the deterministic train/validation split, fixed-length training
sequences and their engram hashes.

Corpus: the text files of /work/shared/data/build_corpus.sh (one file per
source). Each file is capped at CAP_BYTES (the 40 MB GCIDE dictionary would
otherwise be half the data); its last VAL_FRAC (cut at a line start) is the
validation split. The held-out slice committed with the model (heldout.txt,
tide's perplexity test) is the first HELDOUT_CHARS characters of each
source's validation split, in file-name order.

Chat examples (h/minidata's builder, tools/train/data/build.sh): conversations
rendered in the V4.1 template by `tide render`, chat_train.txt for training and
chat_valid.txt (held-out items) for validation.
"""
import json
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "ref"))
sys.path.insert(0, os.path.join(_HERE, ".."))
import engram as eg  # noqa: E402

CAP_BYTES = 12_000_000
VAL_FRAC = 0.01
HELDOUT_CHARS = 2500
BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"


def read_corpus(d):
    """-> [(name, text)] in file-name order, each capped at CAP_BYTES (at a line start)."""
    out = []
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".txt"):
            continue
        with open(os.path.join(d, fn), "rb") as f:
            raw = f.read(CAP_BYTES + 1)
        if len(raw) > CAP_BYTES:
            raw = raw[:raw.rfind(b"\n", 0, CAP_BYTES) + 1]
        out.append((fn[:-4], raw.decode("utf-8", errors="replace")))
    if not out:
        raise SystemExit(f"data: no *.txt files in {d}")
    return out


def split(corpus):
    """-> (train [(name, text)], val [(name, text)]): the last VAL_FRAC of each source."""
    tr, va = [], []
    for name, t in corpus:
        cut = int(len(t) * (1 - VAL_FRAC))
        nl = t.rfind("\n", 0, cut)
        cut = nl + 1 if nl > 0 else cut
        tr.append((name, t[:cut]))
        va.append((name, t[cut:]))
    return tr, va


def heldout_text(val):
    parts = []
    for _, t in val:
        s = t[:HELDOUT_CHARS]
        nl = s.rfind("\n")
        parts.append(s[:nl + 1] if nl > 0 else s)
    return "".join(parts)


def read_chat(d):
    """-> (train [str], val [str]): the rendered conversations of d/chat_train.txt
    and d/chat_valid.txt (h/minidata's tools/train/data/build.sh: each followed
    by a line holding only U+001E; each starts with BOS). Missing files: []."""
    out = []
    for name in ("chat_train.txt", "chat_valid.txt"):
        p = os.path.join(d, name)
        ex = []
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                ex = f.read().split("\n\x1e\n")[:-1]
        out.append(ex)
    return out[0], out[1]


# ---------------------------------------------------------------- tokenizer

def added_tokens():
    """(content, special) of every added token: BOS/EOS/PAD first (ids 0..2),
    then V4.1's chat and control tokens (tools/make_standin_tokenizer.py)."""
    import make_standin_tokenizer as ms
    toks = [(c, False) for _, c in sorted(ms.TEXT_TOKENS.items())]
    toks += [(c, True) for _, c in sorted(ms.SPECIAL_TOKENS.items())]
    return toks


def train_tokenizer(texts, vocab_size, out_path, sample_bytes=30_000_000):
    """Byte-level BPE with HF tokenizers, vocab_size ids in all: BOS/EOS/PAD at
    0..2, the merges, then the V4.1 added tokens at the top ids. -> path."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    extra = added_tokens()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size - len(extra), special_tokens=[BOS, EOS, PAD],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
                             min_frequency=2)
    # a deterministic sample: the first sample_bytes/len(texts) characters of each text
    per = max(1, sample_bytes // max(1, len(texts)))
    tok.train_from_iterator([t[:per] for t in texts], trainer=tr)
    if tok.get_vocab_size() != vocab_size - len(extra):
        raise SystemExit(f"tokenizer: trained {tok.get_vocab_size()} ids, wanted {vocab_size - len(extra)}")
    tok.add_tokens([AddedToken(c, special=False, normalized=False) for c, s in extra if not s])
    tok.add_special_tokens([AddedToken(c, special=True, normalized=False) for c, s in extra if s])
    if tok.get_vocab_size() != vocab_size:
        raise SystemExit(f"tokenizer: {tok.get_vocab_size()} ids, wanted {vocab_size}")
    tok.save(out_path)
    return out_path


def special_ids(tok_json):
    """{content: id} of the added tokens of a tokenizer.json dict."""
    return {t["content"]: int(t["id"]) for t in tok_json.get("added_tokens", [])}


def cut_points(t, every=4000):
    """Chunks of t, cut only after a newline between two non-space characters:
    the ByteLevel pre-tokenizer splits there anyway, so encoding the chunks
    separately gives the ids of the whole text."""
    out, s = [], 0
    while s < len(t):
        e = t.find("\n", s + every)
        while e >= 0 and e + 1 < len(t) and (t[e + 1].isspace() or t[e - 1].isspace()):
            e = t.find("\n", e + 1)
        if e < 0 or e + 1 >= len(t):
            out.append(t[s:])
            break
        out.append(t[s:e + 1])
        s = e + 1
    return out


def encode_texts(tok_path, texts):
    """HF tokenizers batch encode (special tokens in the text are matched) -> [np.int32]."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    out = []
    for t in texts:
        enc = tok.encode_batch(cut_points(t), add_special_tokens=False)
        out.append(np.concatenate([np.asarray(e.ids, np.int32) for e in enc] or [np.zeros(0, np.int32)]))
    return out


def sequences(streams, T, bos, eos):
    """Non-overlapping training rows [N, T+1]: BOS then T tokens of the
    concatenated streams (EOS between sources)."""
    cat = np.concatenate([np.concatenate([s, [eos]]) for s in streams]).astype(np.int32)
    n = len(cat) // T
    rows = cat[:n * T].reshape(n, T)
    return np.concatenate([np.full((n, 1), bos, np.int32), rows], 1)


def chat_rows(examples_ids, T):
    """Chat examples (each starting with its own BOS) packed greedily into rows
    [N, T+1]; an example starts a new row when it would not fit; examples longer
    than a row are cut. Unused tails are -1 (no target)."""
    rows, cur = [], []
    for e in examples_ids:
        e = list(e[:T + 1])
        if len(cur) + len(e) > T + 1:
            rows.append(cur)
            cur = []
        cur += e
    if cur:
        rows.append(cur)
    out = np.full((len(rows), T + 1), -1, np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


class Hasher:
    """Engram hashes of rows that each start at position 0 (eg.EngramHasher)."""

    def __init__(self, args, tok_path):
        self.h = eg.EngramHasher(args, tok_path)

    def rows(self, ids):
        """ids [N, T] (>= 0; -1 tails are hashed as pad) -> int32 [N, T, n_layers, cols].
        Rows are flattened with a dead token (-1) before each, which blocks every
        n-gram at the row start exactly as the sequence start does."""
        ids = np.asarray(ids, np.int64)
        N, T = ids.shape
        comp = self.h.token_map[np.maximum(ids, 0)]
        comp = np.where(ids < 0, self.h.pad, comp)
        hist = np.concatenate([np.full((N, 1), -1, np.int64), comp], 1).reshape(-1)
        out = []
        step = max(1, 4_000_000 // (T + 1))
        for s in range(0, N, step):
            part = hist[s * (T + 1):(s + step) * (T + 1)]
            hh = eg.ngram_hashes(part, 0, len(part), self.h.multipliers, self.h.primes, self.h.offsets,
                                 self.h.pad)
            k = len(part) // (T + 1)
            out.append(hh.reshape(k, T + 1, hh.shape[1], hh.shape[2])[:, 1:].astype(np.int32))
        return np.concatenate(out, 0)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")
