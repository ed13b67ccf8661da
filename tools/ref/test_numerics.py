"""Self-checks of tools/ref/numerics.py: exact format rules on hand-picked and
exhaustive values, and agreement with the num engineer's independent
tools/ref/quant.py on fresh random inputs."""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics as nx  # noqa: E402

F32 = np.float32


def seed():
    s = int(os.environ.get("TIDE_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
    print(f"[seed {s}]", file=sys.stderr)
    return s


class Formats(unittest.TestCase):
    def test_bf16_rne(self):
        one = F32(1.0)
        ulp = F32(2.0 ** -7)
        x = np.array([one + ulp / 2, one + ulp * 1.5, one + ulp / 2 + F32(2.0 ** -20), -(one + ulp / 2)], F32)
        self.assertEqual(list(nx.bf16(x)), [1.0, 1 + 2 * 2.0 ** -7, 1 + 2.0 ** -7, -1.0])
        self.assertTrue(np.isnan(nx.bf16(np.array([np.nan], F32)))[0])
        self.assertEqual(nx.bf16(np.array([3.4e38], F32))[0], np.inf)

    def test_e4m3_exhaustive(self):
        vals = nx.e4m3_decode(np.arange(256))
        finite = ~np.isnan(vals)
        self.assertEqual(int(finite.sum()), 254)
        self.assertEqual(vals[0x7E], 448.0)
        self.assertEqual(vals[1], 2.0 ** -9)
        # every value is a fixed point; codes round-trip
        self.assertTrue(np.array_equal(nx.e4m3(vals[finite]), vals[finite]))
        self.assertTrue(np.array_equal(nx.e4m3_encode(vals[finite]), np.arange(256)[finite]))
        # midpoints between neighbours go to the even code
        pos = np.sort(vals[(vals > 0) & finite])
        mids = (pos[:-1].astype(np.float64) + pos[1:]) / 2
        r = nx.e4m3(mids.astype(F32))
        codes = nx.e4m3_encode(r)
        self.assertTrue(np.all(codes % 2 == 0))
        self.assertTrue(np.isnan(nx.e4m3(np.array([470.0], F32)))[0])
        self.assertEqual(nx.e4m3(np.array([449.0], F32))[0], 448.0)

    def test_e8m0_ceil(self):
        r = np.array([1.0, 1.0000001, 0.75, 2.0 ** -20, 3.0], F32)
        self.assertEqual(list(nx.e8m0_ceil_code(r)), [127, 128, 127, 107, 129])

    def test_fp4_ties_even(self):
        x = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, 5.01, 0.26], F32)
        v = nx.fp4_decode(nx.fp4_codes(x))
        self.assertEqual(list(v), [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, 6.0, 0.5])

    def test_sims_are_idempotent(self):
        rng = np.random.default_rng(seed())
        x = nx.bf16(rng.standard_normal((7, 64)).astype(F32) * 3)
        for f, b in ((nx.fp8_act_sim, 32), (nx.fp4_sim_e8m0, 32), (nx.fp4_sim_e4m3, 16)):
            y = f(x, b)
            self.assertTrue(np.array_equal(nx.bf16(y), y), f.__name__)
            self.assertTrue(np.array_equal(f(y, b), y) or f is nx.fp4_sim_e4m3, f.__name__)

    def test_gemm_matches_dequantised_product(self):
        rng = np.random.default_rng(seed())
        x = nx.bf16(rng.standard_normal((5, 96)).astype(F32))
        w = rng.standard_normal((40, 96)).astype(F32) / 10
        for fmt in ("fp8", "fp4"):
            q, s = nx.quant_fp8_weight(w) if fmt == "fp8" else nx.quant_fp4_weight(w)
            W = nx.Weight(fmt, q, s)
            y = nx.quant_gemm(x, W)
            ref = nx.fp8_act_sim(x, 32).astype(np.float64) @ W.dequant().T.astype(np.float64)
            self.assertTrue(np.allclose(y, ref, rtol=1e-2, atol=1e-2), fmt)
            self.assertTrue(np.array_equal(nx.bf16(y), y))


class AgainstQuantPy(unittest.TestCase):
    """The num engineer's quant.py is a second, independent model of the formats."""

    def setUp(self):
        try:
            import quant
        except ImportError:
            self.skipTest("tools/ref/quant.py not present")
        need = ("bf16_encode", "e4m3_encode", "e4m3_decode", "fp8_act", "fp4_e8m0", "fp4_e4m3",
                "fp8_weight", "fp4_weight")
        missing = [n for n in need if not hasattr(quant, n)]
        if missing:
            self.skipTest(f"quant.py API changed (missing {missing}): update this cross-check")
        self.q = quant

    def test_casts_and_quantisers(self):
        rng = np.random.default_rng(seed())
        x = (rng.standard_normal(4096) * np.exp2(rng.integers(-12, 10, 4096))).astype(F32)
        q = self.q
        self.assertTrue(np.array_equal(nx.bf16(x), (q.bf16_encode(x).astype(np.uint32) << 16).view(F32)))
        xs = np.clip(x, -440, 440)
        self.assertTrue(np.array_equal(nx.e4m3(xs), q.e4m3_decode(q.e4m3_encode(xs))))
        self.assertTrue(np.array_equal(nx.fp8_act_sim(x, 32), q.fp8_act(x, 32)[2].reshape(x.shape)))
        self.assertTrue(np.array_equal(nx.fp4_sim_e8m0(x, 32), q.fp4_e8m0(x, 32)[2].reshape(x.shape)))
        self.assertTrue(np.array_equal(nx.fp4_sim_e4m3(x, 16), q.fp4_e4m3(x, 16)[2].reshape(x.shape)))

    def test_weights(self):
        rng = np.random.default_rng(seed())
        w = (rng.standard_normal((70, 96)) * 0.05).astype(F32)
        qa, sa = nx.quant_fp8_weight(w)
        qb, sb, _ = self.q.fp8_weight(w)
        self.assertTrue(np.array_equal(qa.reshape(-1), qb) and np.array_equal(sa.reshape(-1), sb))
        qa, sa = nx.quant_fp4_weight(w)
        qb, sb, _ = self.q.fp4_weight(w)
        self.assertTrue(np.array_equal(qa.reshape(-1), qb) and np.array_equal(sa.reshape(-1), sb))


if __name__ == "__main__":
    unittest.main()
