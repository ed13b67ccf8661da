"""Self-checks of tools/ref/engram.py: multipliers straight from numpy's
default_rng, primes, normalisation rules (and agreement with the engram
engineer's independent engram_norm.py), hashing, and the gate."""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engram as eg  # noqa: E402
import numerics as nx  # noqa: E402
import synth_tiny  # noqa: E402

F32 = np.float32


class Engram(unittest.TestCase):
    def test_multipliers_are_default_rng(self):
        for lid, n, cv in ((1, 4, 99092), (14, 4, 99092), (3, 3, 246)):
            m = eg.hash_multipliers([lid], n, cv)[0]
            bound = max(1, (np.iinfo(np.int64).max // cv) // 2)
            raw = np.random.default_rng(10007 * lid).integers(0, bound, size=(n,), dtype=np.int64)
            self.assertTrue(np.array_equal(m, raw * 2 + 1))
            self.assertTrue(np.all(m % 2 == 1) and np.all(m > 0))
        # released shape: the multipliers stay below 2^53 (about 9.3e13) but the
        # products token * multiplier reach ~9.2e18, so hashing needs int64
        m = eg.hash_multipliers([1], 4, 99092)
        self.assertTrue(np.all(m < 2 ** 53) and np.any(m * 99091 > 2 ** 53))

    def test_primes_in_order_never_reused(self):
        p = eg.engram_primes([1, 14], 4, 8, 1000)
        flat = p.reshape(-1)
        self.assertEqual(len(set(flat.tolist())), flat.size)
        self.assertTrue(all(eg.is_prime(int(v)) for v in flat))
        self.assertTrue(np.all(np.diff(flat) > 0))
        self.assertEqual(int(flat[0]), 1009)  # the first prime >= 1000
        self.assertTrue(eg.is_prime(16000057) == all(16000057 % k for k in range(2, 4001)))

    def test_normalize_rules(self):
        cases = {" The": "the", "  ": " ", " ": " ", "\n": " ", "Café": "cafe", "ﬁ": "fi",
                 " Σ": "σ", "A\t\tB": "a b", "": "", "\u3000x": "x", "İ": "i"}
        for s, want in cases.items():
            self.assertEqual(eg.normalize(s), want, repr(s))

    def test_token_map_against_engram_norm(self):
        try:
            import engram_norm
        except ImportError:
            self.skipTest("engram_norm.py not present")
        tok = synth_tiny.tokenizer_json()
        mine, n = eg.build_token_map(tok)
        tokens, _ = eg.vocab_from_tokenizer_json(tok)
        theirs, n2 = engram_norm.token_map(tokens)
        self.assertEqual(n, n2)
        self.assertEqual(mine.tolist(), list(theirs))
        self.assertLess(n, len(mine))  # some entries collapse (" the" / "the" / "THE")

    def test_token_map_cache(self):
        import json
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="tide-tokmap-")
        old = (os.environ.get("TMPDIR"), os.environ.get("TIDE_REF_NO_CACHE"), tempfile.tempdir)
        try:
            os.environ["TMPDIR"] = d
            os.environ.pop("TIDE_REF_NO_CACHE", None)
            tempfile.tempdir = None
            p = os.path.join(d, "tokenizer.json")
            with open(p, "w", encoding="utf-8") as f:
                json.dump(synth_tiny.tokenizer_json(), f)
            a, n = eg.cached_token_map(p)
            self.assertEqual(len(os.listdir(os.path.join(d, "tide-ref-tokmap"))), 1)
            b, n2 = eg.cached_token_map(p)
            self.assertTrue(np.array_equal(a, b) and n == n2)
            c, n3 = eg.build_token_map(synth_tiny.tokenizer_json())
            self.assertTrue(np.array_equal(a, c) and n == n3)
        finally:
            for k, v in zip(("TMPDIR", "TIDE_REF_NO_CACHE"), old[:2]):
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            tempfile.tempdir = old[2]
            shutil.rmtree(d, ignore_errors=True)

    def test_hash_dead_and_start(self):
        mult = eg.hash_multipliers([1], 3, 100)
        primes = eg.engram_primes([1], 3, 2, 50)
        off = np.array([[0, 53, 53 + 59, 53 + 59 + 61]])
        hist = np.array([5, 6, -1, 7, 8], dtype=np.int64)
        h = eg.ngram_hashes(hist, 0, 5, mult, primes, off, pad=2)
        self.assertEqual(h.shape, (5, 1, 4))
        m = mult[0]
        # position 1: 2-gram (6, 5), 3-gram (6, 5, pad)
        r2 = (6 * m[0]) ^ (5 * m[1])
        self.assertEqual(int(h[1, 0, 0]), r2 % 53)
        self.assertEqual(int(h[1, 0, 2]), (r2 ^ (2 * m[2])) % 61 + 53 + 59)
        # position 3 looks back across the dead token: pads from there on
        r2 = (7 * m[0]) ^ (2 * m[1])
        self.assertEqual(int(h[3, 0, 1]), r2 % 59 + 53)
        # decode-style call for one position equals the prefill row
        self.assertTrue(np.array_equal(eg.ngram_hashes(hist, 4, 1, mult, primes, off, 2)[0], h[4]))

    def test_gate_by_hand(self):
        rng = np.random.default_rng(7)
        t, hc, dim, hd = 3, 2, 32, 32
        h = nx.bf16(rng.standard_normal((t, hc, dim)).astype(F32))
        table = rng.standard_normal((10, hd)).astype(F32)
        q, s = nx.quant_fp8_weight(table)
        # per-row scales: reuse one block scale per row for the check
        tq = nx.e4m3_encode(nx.e4m3(table / 2.0 ** -6))
        ts = np.full((10, 1), 121, np.uint8)
        w = rng.standard_normal((dim * (hc + 1), 2 * hd)).astype(F32) / 8
        wq, ws = nx.quant_fp8_weight(w)
        W = nx.Weight("fp8", wq, ws)
        qw = nx.bf16(1 + rng.standard_normal((hc, dim)).astype(F32) / 5)
        kw = nx.bf16(1 + rng.standard_normal((hc, dim)).astype(F32) / 5)
        ids = rng.integers(0, 10, (t, 2))
        y = eg.engram_apply(h, ids, tq, ts, W, qw, kw, 1e-20)
        emb = nx.bf16(nx.e4m3_decode(tq[ids]) * 2.0 ** -6).reshape(t, -1)
        kv = nx.linear(emb, W).astype(np.float64)
        for a in range(t):
            v = kv[a, hc * dim:]
            for c in range(hc):
                k = kv[a, c * dim:(c + 1) * dim]
                x = h[a, c].astype(np.float64)
                dot = (x * qw[c] * kw[c] * k).sum() / np.sqrt((x * x).mean()) / np.sqrt((k * k).mean()) / np.sqrt(dim)
                g = 1 / (1 + np.exp(-np.sign(dot) * np.sqrt(max(abs(dot), 1e-6))))
                self.assertTrue(np.allclose(y[a, c], x + g * v, rtol=2e-2, atol=2e-2))
        del q, s


if __name__ == "__main__":
    unittest.main()
