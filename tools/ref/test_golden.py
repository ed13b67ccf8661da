"""The numpy reference against outputs of the official graph.

golden_official.npz holds logits computed by the official inference/model.py
(revision dba1be0a, its CPU kernel semantics, torch 2.11 on CPU) on two
checkpoints written by synth_tiny.py (seed 11, default shape; seed 12, WIDE),
with torch.topk replaced by a stable top-k (ties to the lower index, tide's
rule). See docs/reference.md, "Validation against the official graph".
  wide   prefill 40 tokens, then 20 teacher-forced decode steps, index-key quirk
         on (it fires on every even position): 60 rows.
  tiny   prefill 6, then 8 greedy decode steps, each followed by one DSpark
         draft (greedy drafts): 14 rows, 8 drafts (ids, logits, confidence).
Also the sha256 of the engram token map the official code (HF tokenizers)
builds from the project's stand-in tokenizer."""
import hashlib
import json
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engram as eg  # noqa: E402
import model as mdl  # noqa: E402
import synth_tiny  # noqa: E402

G = np.load(os.path.join(HERE, "golden_official.npz"))


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def shards_sha(d):
    h = hashlib.sha256()
    for f in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        with open(os.path.join(d, f), "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


class Golden(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tide-golden-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ckpt(self, name, seed, over):
        d = synth_tiny.write_tiny(os.path.join(self.tmp, name), seed=seed, **over)
        self.assertEqual(shards_sha(d), str(G[f"{name}_sha"]),
                         "synth_tiny.py no longer writes the golden checkpoint: regenerate golden_official.npz")
        return d

    def test_wide_prefill_decode_quirk(self):
        m = mdl.Model(self.ckpt("wide", 12, synth_tiny.WIDE))
        ids, n0 = G["wide_ids"].tolist(), int(G["wide_prefill"])
        st = m.new_state()
        rows = [m.forward(st, ids[:n0])["logits"]]
        rows += [m.forward(st, [t])["logits"] for t in ids[n0:]]
        got = np.concatenate(rows)
        want = G["wide_logits"]
        for r in range(len(want)):
            self.assertLess(rel(got[r], want[r]), 1e-5, f"row {r}")

    def test_tiny_decode_and_dspark(self):
        m = mdl.Model(self.ckpt("tiny", 11, {}))
        ids, n0, steps = G["tiny_ids"].tolist(), int(G["tiny_prefill"]), int(G["tiny_decode"])
        st = m.new_state()
        out = m.forward(st, ids[:n0])
        rows = [out["logits"]]
        m.dspark_seed(st, out["main_hidden"])
        prev = int(np.argmax(out["logits"][-1]))
        for k in range(steps):
            pos = st.pos
            o = m.forward(st, [prev])
            rows.append(o["logits"])
            prev = int(np.argmax(o["logits"][-1]))
            r = m.dspark_step(st, pos, o["main_hidden"], prev)
            self.assertEqual(r["draft_ids"].tolist(), G["tiny_draft_ids"][k].tolist(), f"draft {k}")
            self.assertLess(rel(r["logits"], G["tiny_draft_logits"][k]), 1e-5, f"draft {k}")
            self.assertLess(rel(r["confidence"], G["tiny_draft_conf"][k]), 1e-5, f"draft {k}")
        got = np.concatenate(rows)
        for r in range(len(got)):
            self.assertLess(rel(got[r], G["tiny_logits"][r]), 1e-5, f"row {r}")

    def test_standin_token_map(self):
        path = os.path.join(HERE, "..", "..", ".deps", "tokenizer", "deepseek-v41-standin.json")
        if not os.path.exists(path):
            self.skipTest("stand-in tokenizer not generated (scripts/oracle-deps.sh)")
        with open(path, encoding="utf-8") as f:
            lookup, n = eg.build_token_map(json.load(f))
        self.assertEqual(n, int(G["standin_compressed"]))
        self.assertEqual(hashlib.sha256(lookup.astype("<i8").tobytes()).hexdigest(), str(G["standin_tokmap_sha"]))


if __name__ == "__main__":
    unittest.main()
