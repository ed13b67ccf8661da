#!/usr/bin/python3
"""Self-test of the baseline model (tools/torch_ref/), run with /usr/bin/python3.

    /usr/bin/python3 tools/torch_ref/selftest.py                 # numpy only (any machine)
    /usr/bin/python3 tools/torch_ref/selftest.py --smoke         # ~15 s subset, for a ctest
    python3 tools/torch_ref/selftest.py --device cuda --quick    # + the torch path on the GPU

Checks, each printed as PASS/FAIL with its numbers:
  presets     shapes.py's tiny and small equal the config.json `tide synth` writes
  numpy-sim   the baseline on numpy with the model's quantisation simulations
              equals the numpy oracle (tools/ref/model.py) on `tide synth`
              tiny and small checkpoints: B=2 sequences in lockstep, prefill
              then greedy decode, every logits row (tolerance 1e-6 relative,
              greedy ids equal); this validates the model structure
  numpy-bf16  the same without the simulations (what the bench runs): the
              model then differs from the oracle by the fp8/fp4 quantisation
              noise, which the random model amplifies (about 0.9 of the row's
              max |logit| on tiny, 1.54 seen on the GPU host); a sanity check
              only: finite, and errors within 3 x the row's max |logit|
  synth       weights.synth() + a batched forward on numpy (the bench's path)
With --device cuda (or cpu) and torch importable, also:
  torch-ops   every number-format helper of xp.TorchXP equals the numpy one
              bit for bit on fresh random inputs; GEMM and RoPE within float32
  torch-sim   the torch path (stable top-k) vs the numpy path, tiny, sim on:
              the first 4 rows within 2e-2 relative (bf16 GEMM rounding,
              amplified by the random model) and >= 60% of the rows' greedy
              ids equal (decode rows fed the numpy path's ids)
  torch-bf16  the same with the simulations off (the bench's numerics)
  torch-synth synth() in device memory + a forward: finite logits
Exit status 0 when every check passed, 1 otherwise.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "ref"))
import baseline  # noqa: E402
import shapes  # noqa: E402
import weights  # noqa: E402
import xp as X  # noqa: E402
import ckpt  # noqa: E402  (tools/ref)
import model as ref  # noqa: E402  (tools/ref)

F32 = np.float32
RESULTS = []


def report(name, ok, detail):
    RESULTS.append((name, ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def check(name, fn):
    if BUDGET and time.time() - T0 > BUDGET:
        print(f"SKIP {name}: over the --budget-s of {BUDGET:.0f} s", flush=True)
        return
    t = time.time()
    try:
        ok, detail = fn()
    except Exception as e:  # a crash is a failure with its traceback, the other checks still run
        traceback.print_exc()
        ok, detail = False, f"{type(e).__name__}: {e}"
    report(name, ok, f"{detail} ({time.time() - t:.1f} s)")


def make_checkpoint(tmp, shape, tide):
    d = os.path.join(tmp, shape)
    if tide and os.access(tide, os.X_OK):
        try:
            subprocess.run([tide, "synth", "--shape", shape, "-o", d, "-q", "--seed", str(SEED)], check=True,
                           timeout=120)
            return d, True
        except (OSError, subprocess.SubprocessError) as e:  # e.g. a binary built for another image
            print(f"[tide synth failed ({e}); using tools/ref/synth_tiny.py instead]", flush=True)
    import synth_tiny  # tools/ref: the oracle's own writer (toy tokenizer), when no tide binary
    synth_tiny.write_tiny(d, seed=SEED)
    return d, False


def prompts(vocab, B, n, seed):
    rng = np.random.default_rng(seed)
    return [[0] + rng.integers(3, vocab, n - 1).tolist() for _ in range(B)]


# ---------------------------------------------------------------- running the two models


def oracle_rows(path, ids, steps):
    """Oracle logits of one sequence: prefill rows, then `steps` greedy decode rows."""
    m = ref.Model(path)
    st = m.new_state()
    rows = [m.forward(st, ids)["logits"]]
    nxt = int(np.argmax(rows[-1][-1]))
    for _ in range(steps):
        rows.append(m.forward(st, [nxt])["logits"])
        nxt = int(np.argmax(rows[-1][-1]))
    return np.concatenate(rows)


def baseline_rows(model, hasher, ids_list, steps, forced=None):
    """Baseline logits of B sequences in lockstep -> [B, n + steps, vocab] (host).
    Decode feeds each sequence its own greedy id, or forced[b][s] when given (so
    that one flipped id does not derail the comparison of later rows)."""
    xp = model.xp
    B, n = len(ids_list), len(ids_list[0])
    st = baseline.State(model, B, n + steps + 1)
    hist = [hasher.compress(np.array(i)) for i in ids_list] if hasher else None

    def hashes(sp, k):
        if hasher is None:
            return None
        return xp.from_np(np.stack([hasher.hashes(h, sp, k) for h in hist]), "i64")

    out = [xp.to_np(model.forward(st, xp.from_np(np.array(ids_list), "i64"), hashes(0, n)))]
    for s in range(steps):
        nxt = [int(np.argmax(out[-1][b, -1])) if forced is None else forced[b][s] for b in range(B)]
        if hasher:
            hist = [np.concatenate([h, hasher.compress(np.array([t]))]) for h, t in zip(hist, nxt)]
        out.append(xp.to_np(model.forward(st, xp.from_np(np.array([[t] for t in nxt]), "i64"), hashes(st.pos, 1))))
    return np.concatenate(out, 1)


def rel_rows(a, b):
    return np.abs(a - b).max(-1) / (np.abs(b).max(-1) + 1e-30)


def hasher_of(path, a):
    import engram as eg  # tools/ref
    if not a.engram_layer_ids:
        return None
    return eg.EngramHasher(a, os.path.join(path, "tokenizer.json"))


def compare_to_oracle(path, sim, tol, B=2, n=20, steps=4, work_bytes=1 << 30):
    xp = X.get("numpy")
    a, P = weights.from_checkpoint(path, xp)
    m = baseline.Model(a, P, xp, sim=sim, work_bytes=work_bytes)
    ids = prompts(a.vocab_size, B, n, SEED)
    refs = [oracle_rows(path, i, steps) for i in ids]
    forced = [[int(np.argmax(r[n - 1 + s])) for s in range(steps)] for r in refs]
    got = baseline_rows(m, hasher_of(path, a), ids, steps, forced)
    worst = max(float(rel_rows(got[b], refs[b]).max()) for b in range(B))
    same = np.mean([np.array_equal(got[b].argmax(-1), refs[b].argmax(-1)) for b in range(B)])
    finite = bool(np.isfinite(got).all())
    chunked = f", chunks of {work_bytes} B" if work_bytes < 1 << 30 else ""
    return finite and worst <= tol, f"B={B} prefill {n} + {steps} steps{chunked}: max row rel {worst:.2e} (tol {tol}), " \
                                    f"greedy rows equal in {same * 100:.0f}% of sequences"


# ---------------------------------------------------------------- checks


def check_presets(tmp, tide):
    bad = []
    for name in ("tiny", "small"):
        path, by_tide = make_checkpoint(tmp, name, tide)
        if not by_tide:
            return True, "skipped (no tide binary)"
        with open(os.path.join(path, "config.json")) as f:
            import json
            want = vars(ckpt.parse_config(json.load(f)))
        got = vars(shapes.args(name))
        bad += [f"{name}.{k}" for k in want if got.get(k) != want[k]]
    return not bad, "fields differ: " + ", ".join(bad) if bad else "tiny and small match tide synth"


def check_synth(xpb, shape="tiny"):
    a = shapes.args(shape)
    P = weights.synth(a, xpb, seed=3)
    m = baseline.Model(a, P, xpb, sim=False)
    B, n = 3, 10
    st = baseline.State(m, B, n + 4)
    rng = np.random.default_rng(SEED)
    cols = (a.engram_max_ngram_size - 1) * a.engram_n_heads

    def hashes(k):
        h = rng.integers(0, min(a.engram_num_embeddings), (B, k, len(a.engram_layer_ids), cols))
        return xpb.from_np(h, "i64")

    lg = m.forward(st, xpb.from_np(rng.integers(0, a.vocab_size, (B, n)), "i64"), hashes(n), all_logits=False)
    for _ in range(3):
        lg = m.forward(st, xpb.from_np(rng.integers(0, a.vocab_size, (B, 1)), "i64"), hashes(1))
    v = xpb.to_np(lg)
    est = weights.nbytes(a)
    return bool(np.isfinite(v).all()) and v.shape == (B, 1, a.vocab_size), \
        f"{shape} B={B}: logits {v.shape}, finite {np.isfinite(v).all()}, |max| {np.abs(v).max():.3g}, " \
        f"nbytes estimate {est / 2**20:.1f} MiB"


def check_torch_ops(tx):
    """TorchXP number formats vs NumpyXP on fresh random inputs: exact."""
    nxp = X.get("numpy")
    rng = np.random.default_rng(SEED)
    t = tx.t
    x = (rng.standard_normal((64, 256)) * np.exp(rng.uniform(-6, 6, (64, 1)))).astype(F32)
    x[0, :40] = 0  # an all-zero block
    x[1, 5] = -0.0
    xb = nx_bf16 = X.nx.bf16(x)
    bad = []

    def same(name, a, b, tol=0.0):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            bad.append(f"{name} shape {a.shape} vs {b.shape}")
            return
        err = np.nanmax(np.abs(a - b)) / (np.nanmax(np.abs(b)) + 1e-30) if a.size else 0.0
        if err > tol or not np.array_equal(np.isnan(a), np.isnan(b)):
            bad.append(f"{name} rel {err:.2e}")

    T = tx.from_np(nx_bf16, "bf16")
    same("fp8_sim", tx.to_np(tx.fp8_sim(T)), nxp.fp8_sim(xb))
    same("fp4_sim_e8m0", tx.to_np(tx.fp4_sim_e8m0(T)), nxp.fp4_sim_e8m0(xb))
    same("fp4_sim_e4m3", tx.to_np(tx.fp4_sim_e4m3(T)), nxp.fp4_sim_e4m3(xb))
    q1, s1 = tx.quant_fp4(tx.from_np(x, "f32"))
    q2, s2 = nxp.quant_fp4(x)
    same("quant_fp4 codes", tx.to_np(q1), q2)
    same("quant_fp4 scales", tx.to_np(s1), s2)
    same("fp4_dequant", tx.to_np(tx.fp4_dequant(q1, s1)), nxp.fp4_dequant(q2, s2))
    q1, s1 = tx.quant_fp8_rows(tx.from_np(x, "f32"))
    q2, s2 = nxp.quant_fp8_rows(x)
    same("quant_fp8_rows codes", tx.to_np(q1), q2)
    same("quant_fp8_rows scales", tx.to_np(s1), s2)
    codes = np.arange(256, dtype=np.uint8)
    same("e4m3_decode", tx.to_np(tx.e4m3_decode(tx.from_np(codes, "u8"))), nxp.e4m3_decode(codes))
    same("e8m0_decode", tx.to_np(tx.e8m0_decode(tx.from_np(codes[:255], "u8"))), nxp.e8m0_decode(codes[:255]))
    sc = X.nx.bf16(rng.integers(-3, 4, (5, 300)).astype(F32))  # many ties
    same("topk_idx stable", tx.to_np(tx.topk_idx(tx.from_np(sc, "f32"), 40)), nxp.topk_idx(sc, 40))
    same("sum_bf", tx.to_np(tx.sum_bf(tx.from_np(xb[:8].reshape(2, 4, 256), "bf16"), 1)),
         nxp.sum_bf(xb[:8].reshape(2, 4, 256), 1), 2 ** -8)
    w = X.nx.bf16(rng.standard_normal((96, 256)).astype(F32) * 0.05)
    a = X.nx.bf16(rng.standard_normal((7, 256)).astype(F32))
    same("linear", tx.to_np(tx.linear(tx.from_np(a, "bf16"), tx.from_np(w, "bf16"))), nxp.linear(a, w), 2 ** -7)
    same("linear_f32", tx.to_np(tx.linear_f32(tx.from_np(a, "f32"), tx.from_np(w, "f32"))),
         nxp.linear_f32(a, w), 1e-4)
    inv = ref.rope_inv_freq(64, 160000.0, (16.0, 32, 1, 65536))
    pos = np.array([0, 1, 7, 4095, 131071])
    for k, (c1, c2) in enumerate(zip(tx.rope_cs(inv, pos), nxp.rope_cs(inv, pos))):
        d = np.abs(tx.to_np(c1) - c2).max()
        if d > 1e-5:
            bad.append(f"rope_cs[{k}] abs {d:.2e}")
    del t
    return not bad, "; ".join(bad) if bad else "fp8/fp4 sims, quantisers, decoders, stable top-k equal numpy; " \
                                                "GEMMs and RoPE within float32"


def compare_torch_numpy(path, tx, sim, B=2, n=8, steps=4):
    nxp = X.get("numpy")
    a, Pn = weights.from_checkpoint(path, nxp)
    _, Pt = weights.from_checkpoint(path, tx)
    ids = prompts(a.vocab_size, B, n, SEED + 1)
    h = hasher_of(path, a)
    want = baseline_rows(baseline.Model(a, Pn, nxp, sim=sim), h, ids, steps)
    forced = [[int(np.argmax(want[b, n - 1 + s])) for s in range(steps)] for b in range(B)]
    got = baseline_rows(baseline.Model(a, Pt, tx, sim=sim), h, ids, steps, forced)
    r = np.stack([rel_rows(got[b], want[b]) for b in range(B)])
    agree = float(np.mean(got.argmax(-1) == want.argmax(-1)))
    first = float(r[:, :4].max())
    ok = bool(np.isfinite(got).all()) and first <= 2e-2 and agree >= 0.6
    return ok, f"B={B} prefill {n} + {steps} steps: first 4 rows rel {first:.2e}, worst row {r.max():.2e}, " \
               f"median {np.median(r):.2e}, greedy agreement {agree * 100:.0f}%"


def check_torch(device, tiny):
    try:
        tx = X.get("torch", device, stable_topk=True)
    except Exception as e:
        traceback.print_exc()
        report("torch import", False, f"{type(e).__name__}: {e}")
        return
    import torch
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"[torch {torch.__version__}, device {device} {name}]", flush=True)
    with torch.inference_mode():
        check("torch-ops", lambda: check_torch_ops(tx))
        check("torch-sim tiny", lambda: compare_torch_numpy(tiny, tx, True))
        check("torch-bf16 tiny", lambda: compare_torch_numpy(tiny, tx, False))
        tx.stable_topk = False
        check("torch-synth tiny", lambda: check_synth(tx))


def main(argv=None):
    global SEED
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", help="also test the torch path on this device (cuda, cpu)")
    ap.add_argument("--tide", default=os.path.join(ROOT, "build", "tide"), help="tide binary (for tide synth)")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("TIDE_SEED", "0")) or None)
    ap.add_argument("--quick", action="store_true", help="tiny only (skip the small checkpoint)")
    ap.add_argument("--smoke", action="store_true", help="one short numpy-vs-oracle run and the synth path only "
                    "(for a ctest)")
    ap.add_argument("--budget-s", type=float, default=0, help="skip the checks that would start after this "
                    "many seconds (0: no limit)")
    ns = ap.parse_args(argv)
    global T0, BUDGET
    T0, BUDGET = time.time(), ns.budget_s
    SEED = ns.seed or int.from_bytes(os.urandom(3), "little")
    print(f"[selftest seed {SEED}]", flush=True)
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="tide-torchref-")
    try:
        tiny, _ = make_checkpoint(tmp, "tiny", ns.tide)
        if ns.device:  # the torch checks first: they are what a GPU session is for
            check_torch(ns.device, tiny)
        if ns.smoke:
            check("numpy-sim tiny", lambda: compare_to_oracle(tiny, True, 1e-6, B=2, n=10, steps=2, work_bytes=4000))
            check("synth numpy", lambda: check_synth(X.get("numpy")))
            return finish(t0, tmp)
        check("numpy-sim tiny", lambda: compare_to_oracle(tiny, True, 1e-6))
        check("numpy-sim tiny chunked", lambda: compare_to_oracle(tiny, True, 1e-6, B=3, n=16, steps=2,
                                                                  work_bytes=4000))
        check("numpy-bf16 tiny", lambda: compare_to_oracle(tiny, False, 3.0))
        check("synth numpy", lambda: check_synth(X.get("numpy")))
        check("presets", lambda: check_presets(tmp, ns.tide))
        if not ns.quick:
            small, _ = make_checkpoint(tmp, "small", ns.tide)
            check("numpy-sim small", lambda: compare_to_oracle(small, True, 1e-6, n=28))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish(t0, tmp)


def finish(t0, tmp):
    shutil.rmtree(tmp, ignore_errors=True)
    failed = [n for n, ok in RESULTS if not ok]
    print(f"{len(RESULTS) - len(failed)}/{len(RESULTS)} checks passed in {time.time() - t0:.1f} s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed or not RESULTS else 0


SEED = 0
T0, BUDGET = time.time(), 0
if __name__ == "__main__":
    sys.exit(main())
