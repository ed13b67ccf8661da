"""Engram: the n-gram hash memory of V4.1, in numpy.

Pieces, in the order the reference builds them:
  token map   every vocabulary entry of tokenizer.json is decoded (byte-level
              BPE) and normalised (NFKC, NFD, strip marks, lowercase, collapse
              [ \\t\\r\\n]+ to one space, strip; a text that is exactly one space
              stays one space); ids whose keys agree share a compressed id,
              numbered in order of first appearance. Partial UTF-8 tokens (the
              decode holds U+FFFD) are keyed by their raw token string.
  primes      per engram layer, per n-gram size 2..N, per head: the next prime
              above engram_vocab_size - 1 that was not handed out before
              (one running "seen" set over all layers).
  multipliers numpy.random.default_rng(10007 * layer).integers(0, bound, N) * 2 + 1
              with bound = max(1, (int64 max // compressed_vocab) // 2).
  hash        for each position, the compressed ids of it and the N-1 tokens
              before it (pad id before the start or across a dead token),
              each times its multiplier, XOR-ed cumulatively; the k-gram value
              modulo each head's prime, plus that head's row offset.
  layer       rows gathered from the fp8 table and dequantised (bf16), wkv
              (fp8 GEMM) into hc keys and one value, per-copy gate
              sigmoid(signed sqrt(normalised dot)), added to every copy.
"""
import hashlib
import json
import os
import re
import tempfile
import unicodedata

import numpy as np

import numerics as nx

F32 = np.float32

# ---------------------------------------------------------------- tokenizer decode


def _bytes_to_unicode():
    """GPT-2's byte <-> printable character table used by ByteLevel."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_CHAR_BYTES = _bytes_to_unicode()


def vocab_from_tokenizer_json(tok):
    """-> (list id -> token string or None, size as len(tokenizer))."""
    model = tok.get("model", {})
    vocab = dict(model.get("vocab", {}))
    if isinstance(model.get("vocab"), list):  # unigram form, not expected here
        raise ValueError("tokenizer.json: only BPE vocabularies are supported")
    id_to_tok = {}
    for s, i in vocab.items():
        id_to_tok[int(i)] = s
    strings = set(vocab)
    for at in tok.get("added_tokens", []):
        id_to_tok[int(at["id"])] = at["content"]  # the added vocabulary wins in id_to_token
        strings.add(at["content"])
    size = len(strings)  # len(tokenizer) = distinct strings of vocab + added tokens
    return [id_to_tok.get(i) for i in range(size)], size


def decode_token(token):
    """backend.decode([id]) of a byte-level BPE tokenizer: each character maps back
    to its byte; a token with a character outside the table is taken as its UTF-8
    bytes; the bytes are decoded lossily (invalid -> U+FFFD)."""
    if token is None:
        return ""
    try:
        raw = bytes(_CHAR_BYTES[c] for c in token)
    except KeyError:
        raw = token.encode("utf-8")
    return raw.decode("utf-8", errors="replace")


# White_Space property characters (Rust char::is_whitespace, used by Strip)
_WS = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | \
    {chr(c) for c in range(0x2000, 0x200B)}
_COLLAPSE = re.compile(r"[ \t\r\n]+")


def normalize(text):
    """The reference's normaliser sequence, with Python's unicodedata."""
    s = unicodedata.normalize("NFKC", text)
    s = unicodedata.normalize("NFD", s)
    s = "".join(c for c in s if not unicodedata.category(c).startswith("M"))
    s = "".join(c.lower() for c in s)  # per character: no final-sigma context rule
    s = _COLLAPSE.sub(" ", s)
    if s == " ":
        return " "  # the sentinel dance: a lone space survives Strip
    i, j = 0, len(s)
    while i < j and s[i] in _WS:
        i += 1
    while j > i and s[j - 1] in _WS:
        j -= 1
    return s[i:j]


def build_token_map(tok):
    """tokenizer.json dict -> (np.int64 lookup [len(tokenizer)], compressed size)."""
    dec = tok.get("decoder") or {}
    kinds = [dec.get("type")] + [d.get("type") for d in dec.get("decoders", [])]
    if "ByteLevel" not in kinds:
        raise ValueError(f"tokenizer.json: decoder {dec.get('type')!r} is not byte-level")
    tokens, size = vocab_from_tokenizer_json(tok)
    key_to_new = {}
    lookup = np.zeros(size, dtype=np.int64)
    for i in range(size):
        text = decode_token(tokens[i])
        if "\ufffd" in text:
            key = tokens[i]
        else:
            n = normalize(text)
            key = n if n else text
        new = key_to_new.get(key)
        if new is None:
            new = len(key_to_new)
            key_to_new[key] = new
        lookup[i] = new
    return lookup, len(key_to_new)


# ---------------------------------------------------------------- primes and multipliers


def is_prime(n):
    """Deterministic Miller-Rabin for 64-bit n."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def engram_primes(layer_ids, max_ngram, n_heads, vocab_size):
    """[layer][ngram-1][head] prime bucket sizes, handed out in order, never reused."""
    seen = set()
    out = []
    for _ in layer_ids:
        per = []
        for _ in range(max_ngram - 1):
            cur, sizes = vocab_size - 1, []
            for _ in range(n_heads):
                c = cur + 1
                while not is_prime(c) or c in seen:
                    c += 1
                cur = c
                seen.add(c)
                sizes.append(c)
            per.append(sizes)
        out.append(per)
    return np.array(out, dtype=np.int64).reshape(len(layer_ids), max(max_ngram - 1, 0), n_heads)


def hash_multipliers(layer_ids, max_ngram, compressed_vocab):
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab) // 2)
    rows = []
    for lid in layer_ids:
        g = np.random.default_rng(10007 * lid)
        v = g.integers(low=0, high=bound, size=(max_ngram,), dtype=np.int64)
        rows.append(v * 2 + 1)
    return np.array(rows, dtype=np.int64).reshape(len(layer_ids), max_ngram)


def ngram_hashes(history, start, n, multipliers, primes, offsets, pad):
    """Hash ids of positions start..start+n-1.
    history: compressed ids of positions 0..start+n-1 (-1 = dead token).
    -> int64 [n, n_layers, (max_ngram-1)*heads]."""
    max_ngram = multipliers.shape[1]
    pos = np.arange(start, start + n)
    blocked = np.zeros(n, dtype=bool)
    toks = []
    for shift in range(max_ngram):
        src = history[np.maximum(pos - shift, 0)]
        blocked = blocked | (pos < shift) | (src == -1)
        toks.append(np.where(blocked, pad, src))
    toks = np.stack(toks, -1).astype(np.int64)  # [n, max_ngram]
    prod = toks[:, None, :] * multipliers[None]  # [n, L, max_ngram]; bounded, no overflow
    rolling = prod[..., 0]
    cols = []
    for i in range(1, max_ngram):
        rolling = np.bitwise_xor(rolling, prod[..., i])
        cols.append(rolling[..., None] % primes[None, :, i - 1, :])
    return np.concatenate(cols, -1) + offsets[None]


# Bump when build_token_map's rules change: cached maps carry it in their name.
TOKMAP_VERSION = 1


def cached_token_map(path):
    """build_token_map of a tokenizer.json file, cached under
    $TMPDIR/tide-ref-tokmap/ by the file's sha256 (building the map of a 129280
    entry vocabulary takes seconds); TIDE_REF_NO_CACHE=1 turns the cache off."""
    with open(path, "rb") as f:
        raw = f.read()
    key = hashlib.sha256(raw).hexdigest()
    cdir = os.path.join(tempfile.gettempdir(), "tide-ref-tokmap")
    cfile = os.path.join(cdir, f"v{TOKMAP_VERSION}-{key}.npy")
    use = os.environ.get("TIDE_REF_NO_CACHE") != "1"
    if use and os.path.exists(cfile):
        try:
            arr = np.load(cfile)
            return arr[1:], int(arr[0])
        except (OSError, ValueError):
            pass
    lookup, n = build_token_map(json.loads(raw.decode("utf-8")))
    if use:
        try:
            os.makedirs(cdir, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cdir, suffix=".npy")
            with os.fdopen(fd, "wb") as f:
                np.save(f, np.concatenate([[n], lookup]).astype(np.int64))
            os.replace(tmp, cfile)
        except OSError:
            pass
    return lookup, n


class EngramHasher:
    """Token map, primes, offsets and multipliers of a model; per-sequence history
    lives in the model State."""

    def __init__(self, args, tokenizer_json, check_size=True):
        self.layer_ids = tuple(args.engram_layer_ids)
        self.max_ngram = args.engram_max_ngram_size
        self.n_heads = args.engram_n_heads
        if isinstance(tokenizer_json, str):
            self.token_map, self.compressed_vocab = cached_token_map(tokenizer_json)
        else:
            self.token_map, self.compressed_vocab = build_token_map(tokenizer_json)
        if check_size and self.compressed_vocab != args.engram_compressed_vocab_size:
            raise ValueError(f"engram: tokenizer gives {self.compressed_vocab} compressed ids, "
                             f"config says {args.engram_compressed_vocab_size}")
        self.pad = int(self.token_map[args.engram_pad_id])
        self.primes = engram_primes(self.layer_ids, self.max_ngram, self.n_heads, args.engram_vocab_size)
        flat = self.primes.reshape(len(self.layer_ids), -1)
        self.offsets = np.concatenate([np.zeros((flat.shape[0], 1), np.int64),
                                       np.cumsum(flat, 1)[:, :-1]], 1)
        self.multipliers = hash_multipliers(self.layer_ids, self.max_ngram, self.compressed_vocab)

    def compress(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        if np.any(ids < 0) or np.any(ids >= len(self.token_map)):
            bad = ids[(ids < 0) | (ids >= len(self.token_map))][0]
            raise ValueError(f"engram: token id {bad} has no token-map entry "
                             f"(tokenizer has {len(self.token_map)} ids)")
        return self.token_map[ids]

    def hashes(self, history, start, n):
        return ngram_hashes(history, start, n, self.multipliers, self.primes, self.offsets, self.pad)


def engram_apply(h, hash_ids, table, table_scale, wkv, q_weight, k_weight, eps):
    """One engram layer. h: [t, hc, dim] bf16 stream; hash_ids: [t, cols] rows;
    table: e4m3 codes [rows, hd]; table_scale: e8m0 codes [rows, hd/32];
    wkv: numerics.Weight; q_weight/k_weight: [hc, dim] (bf16 params). -> bf16 [t, hc, dim]."""
    t, hc, dim = h.shape
    rows = np.asarray(hash_ids, dtype=np.int64)
    if np.any(rows < 0) or np.any(rows >= table.shape[0]):
        raise ValueError("engram: hash row outside the table")
    vals = nx.e4m3_decode(table[rows])  # [t, cols, hd]
    sc = nx.e8m0_value(table_scale[rows])  # [t, cols, hd/32]
    hd = vals.shape[-1]
    emb = nx.bf16((vals.reshape(t, -1, hd // 32, 32) * sc[..., None]).reshape(t, -1, hd))
    kv = nx.linear(emb.reshape(t, -1), wkv)  # bf16 [t, dim*(hc+1)]
    key = kv[:, :hc * dim].reshape(t, hc, dim).astype(F32)
    value = kv[:, hc * dim:].astype(F32)
    weight = (q_weight.astype(F32) * k_weight.astype(F32)).astype(F32)
    hf = h.astype(F32)
    rstd = (F32(1) / np.sqrt(np.mean(hf * hf, -1, dtype=F32) + F32(eps))) * \
        (F32(1) / np.sqrt(np.mean(key * key, -1, dtype=F32) + F32(eps)))
    dot = np.sum(hf * weight * key, -1, dtype=F32) * rstd * F32(dim ** -0.5)
    mag = np.sqrt(np.maximum(np.abs(dot), F32(1e-6)))
    gate = nx.sigmoid(np.copysign(mag, dot).astype(F32))
    return nx.bf16(hf + gate[..., None] * value[:, None, :])
