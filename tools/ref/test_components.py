"""Every op of components.py on fresh random inputs: it runs, the outputs have
the documented names and shapes, and a few agree with direct computations."""
import os
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import components as C  # noqa: E402
import engram as eg  # noqa: E402
import numerics as nx  # noqa: E402

F32 = np.float32
SEED = int(os.environ.get("TIDE_SEED", "0")) or int.from_bytes(os.urandom(4), "little")


def inputs(rng):
    r = lambda *s: rng.standard_normal(s).astype(F32)  # noqa: E731
    w8, s8 = nx.quant_fp8_weight(r(40, 64) / 8)
    w4, s4 = nx.quant_fp4_weight(r(40, 64) / 8)
    e1, e1s = nx.quant_fp4_weight(r(32, 64) / 8)
    e2, e2s = nx.quant_fp4_weight(r(64, 32) / 8)
    e3, e3s = nx.quant_fp4_weight(r(32, 64) / 8)
    tab = nx.e4m3_encode(nx.e4m3(r(20, 32)))
    score = nx.bf16(r(3, 12))
    return {
        "bf16": dict(x=r(5, 7)),
        "fp8_act_sim": dict(x=r(3, 64)),
        "fp8_act_quant": dict(x=r(3, 64)),
        "fp4_sim_e8m0": dict(x=r(3, 64)),
        "fp4_sim_e4m3": dict(x=r(3, 64), block=np.array(16)),
        "rmsnorm": dict(x=r(3, 64), w=r(64), eps=np.array(1e-6)),
        "rope_freqs": dict(rd=np.array(16), pos=np.arange(5), theta=np.array(160000.0),
                           yarn=np.array([16, 32, 1, 64], F32)),
        "rope": dict(x=r(5, 2, 16), pos=np.arange(5) * 7, theta=np.array(10000.0), inverse=np.array(1)),
        "hc_split_sinkhorn": dict(mixes=r(3, 24), scale=r(3), base=r(24)),
        "hc_mixes": dict(x=r(3, 4, 16), fn=r(24, 64) / 8, scale=r(3), base=r(24)),
        "hc_pre": dict(x=r(3, 4, 16), pre=np.abs(r(3, 4))),
        "hc_post": dict(y=r(3, 16), residual=r(3, 4, 16), post=r(3, 4), comb=np.abs(r(3, 4, 4))),
        "sparse_attn": dict(q=r(3, 2, 32), kv=r(70, 32), sink=r(2), idx=rng.integers(-1, 70, (3, 80)).astype(np.int32)),
        "indexer_score": dict(q=nx.fp4_sim_e8m0(r(3, 2, 32)), k=nx.fp4_sim_e8m0(r(12, 32)), w=r(3, 2),
                              compress_lens=np.array([4, 8, 12])),
        "topk": dict(score=score, k=np.array(4), compress_lens=np.array([2, 8, 12]), offset=np.array(10)),
        "candidate_blocks": dict(score=score, compress_lens=np.array([2, 8, 12]), topk_blocks=np.array(2),
                                 block_size=np.array(4)),
        "indexer_topk": dict(q=nx.fp4_sim_e8m0(r(3, 2, 32)), k=nx.fp4_sim_e8m0(r(12, 32)), w=r(3, 2),
                             compress_lens=np.array([4, 8, 12]), topk=np.array(3),
                             candidates=np.ones((3, 12), np.uint8)),
        "compressor": dict(x=r(5, 64), wkv=r(32, 64) / 8, wgate=r(32, 64) / 8, norm_w=r(32), ratio=np.array(2),
                           start_pos=np.array(3)),
        "moe_route": dict(x=r(4, 64), gate_w=r(8, 64) / 8, bias=r(8) / 10, topk=np.array(2),
                          route_scale=np.array(1.5)),
        "swiglu": dict(gate=r(3, 32) * 8, up=r(3, 32) * 8, limit=np.array(10.0), weight=r(3)),
        "expert": dict(x=r(3, 64), w1=e1, w1_scale=e1s, w2=e2, w2_scale=e2s, w3=e3, w3_scale=e3s, fmt=np.array(4),
                       limit=np.array(10.0)),
        "fp8_gemm": dict(x=r(3, 64), w=w8, w_scale=s8),
        "fp4_gemm": dict(x=r(3, 64), w=w4, w_scale=s4),
        "linear_bf16": dict(x=r(3, 64), w=r(40, 64)),
        "engram_multipliers": dict(layer_ids=np.array([1, 14]), max_ngram=np.array(4),
                                   compressed_vocab=np.array(99092)),
        "engram_primes": dict(layer_ids=np.array([1, 14]), max_ngram=np.array(3), n_heads=np.array(2),
                              vocab_size=np.array(50)),
        "engram_hash": dict(ids=np.array([4, 9, -1, 3, 3, 7]), multipliers=eg.hash_multipliers([1], 3, 20),
                            primes=eg.engram_primes([1], 3, 2, 50), pad=np.array(2)),
        "engram_apply": dict(h=r(3, 4, 64), hash_ids=rng.integers(0, 20, (3, 2)), table=tab,
                             table_scale=np.full((20, 1), 127, np.uint8), wkv=nx.quant_fp8_weight(r(64 * 5, 64) / 8)[0],
                             wkv_scale=nx.quant_fp8_weight(r(64 * 5, 64) / 8)[1], q_weight=r(4, 64), k_weight=r(4, 64),
                             eps=np.array(1e-20)),
    }


class Components(unittest.TestCase):
    def setUp(self):
        print(f"[seed {SEED}]", file=sys.stderr)
        self.rng = np.random.default_rng(SEED)
        self.ins = inputs(self.rng)

    def run_op(self, op, d):
        return C.OPS[op][0](C.Inputs(d))

    def test_every_op_runs(self):
        for op in C.OPS:
            with self.subTest(op=op):
                out = self.run_op(op, self.ins[op])
                self.assertTrue(out)
                for v in out.values():
                    self.assertFalse(np.isnan(np.asarray(v, dtype=np.float64)).any(), op)

    def test_indexer_topk(self):
        q = nx.fp4_sim_e8m0(self.rng.standard_normal((3, 2, 32)).astype(F32))
        k = nx.fp4_sim_e8m0(self.rng.standard_normal((12, 32)).astype(F32))
        w = nx.bf16(self.rng.standard_normal((3, 2)).astype(F32))
        cl = np.array([4, 8, 12])
        out = self.run_op("indexer_score", dict(q=q, k=k, w=w, compress_lens=cl))
        idx = self.run_op("topk", dict(score=out["score"], k=np.array(3), compress_lens=cl))["idx"]
        self.assertEqual(idx.shape, (3, 3))
        self.assertTrue(np.all(np.diff(idx, axis=1) > 0))

    def test_compressor_carry_matches_one_shot(self):
        d = dict(self.ins["compressor"])
        d["start_pos"] = np.array(0)
        one = self.run_op("compressor", dict(d, x=d["x"][:4]))
        a = self.run_op("compressor", dict(d, x=d["x"][:1]))
        b = self.run_op("compressor", dict(d, x=d["x"][1:4], start_pos=np.array(1), state_kv=a["state_kv"],
                                           state_score=a["state_score"]))
        self.assertEqual(a["latent"].shape[0], 0)
        self.assertTrue(np.array_equal(b["latent"], one["latent"]))
        self.assertEqual(int(b["first_group"]), 0)

    def test_moe_route_weights(self):
        out = self.run_op("moe_route", self.ins["moe_route"])
        self.assertTrue(np.allclose(out["weights"].sum(-1), 1.5, atol=1e-5))

    def test_engram_hash_equals_hasher(self):
        out = self.run_op("engram_hash", self.ins["engram_hash"])["hashes"]
        self.assertEqual(out.shape, (6, 1, 4))

    def test_rope_inverse_roundtrip(self):
        d = self.ins["rope"]
        y = self.run_op("rope", dict(d, inverse=np.array(0)))["y"]
        z = self.run_op("rope", dict(d, x=y, inverse=np.array(1)))["y"]
        self.assertLess(np.abs(z - nx.bf16(d["x"])).max(), 0.05)


if __name__ == "__main__":
    unittest.main()
