#!/usr/bin/env python3
"""The straightforward PyTorch baseline of tide (issue #5): decode and prefill
timings of baseline.py on synthetic weights drawn in device memory, plus the
device's copy and GEMM ceilings. See docs/torch-baseline.md.

    python3 tools/torch_ref/bench.py --shape flash-ep8 --mode decode --batch 32 --context 4096
    python3 tools/torch_ref/bench.py --shape flash-ep8 --mode prefill --len 8192
    python3 tools/torch_ref/bench.py --mode ceilings
    python3 tools/torch_ref/bench.py --all --out DIR [--budget-s 140]

--all runs ceilings, decode B=1,32,256 x C=4096,131072, prefill L=8192 and
one decode run with the quantisation simulations on (B=32, C=4096) within
--budget-s seconds (what does not fit is skipped and listed), writing
DIR/torch-baseline.json and DIR/torch-baseline.md after every run, so a
crash or a timeout keeps what was measured. Nothing is written to disk but
those two files: weights are drawn on the device, the KV state is filled with
random contents of the requested context (no 128K-token prefill).

--backend numpy --shape tiny runs the same code on the CPU (a dry run of the
bench's logic on machines without torch; timings meaningless).
"""
import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import baseline  # noqa: E402
import shapes  # noqa: E402
import weights  # noqa: E402
import xp as X  # noqa: E402

GiB = float(1 << 30)
ALL_DECODE = [(1, 4096), (32, 4096), (256, 4096), (1, 131072), (32, 131072), (256, 131072)]
ALL_PREFILL = [8192]


class Clock:
    """Per-step timing: CUDA events on torch (device time between the two
    records, after a synchronize), perf_counter on numpy."""

    def __init__(self, xp):
        self.xp = xp
        self.cuda = xp.name == "torch" and xp.dev.type == "cuda"

    def sync(self):
        if self.cuda:
            self.xp.t.cuda.synchronize()

    def time(self, fn):
        """-> (result, milliseconds) of fn()."""
        if self.cuda:
            t = self.xp.t
            a, b = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            a.record()
            r = fn()
            b.record()
            b.synchronize()
            return r, a.elapsed_time(b)
        t0 = time.perf_counter()
        r = fn()
        return r, (time.perf_counter() - t0) * 1e3


class Bench:
    def __init__(self, ns):
        self.ns = ns
        self.t0 = time.time()
        self.xp = X.get(ns.backend, ns.device, stable_topk=False)
        self.clock = Clock(self.xp)
        self.args = shapes.args(ns.shape)
        self.model = None
        self.runs, self.skipped = [], []
        self.rng = np.random.default_rng(ns.seed)

    # ---- bookkeeping

    def left(self):
        return self.ns.budget_s - (time.time() - self.t0)

    def free_bytes(self):
        if self.xp.name == "torch" and self.clock.cuda:
            c = self.xp.t.cuda  # the device's free memory plus what torch's allocator caches unused
            return c.mem_get_info()[0] + c.memory_reserved() - c.memory_allocated()
        return 64 << 30  # numpy dry run: pretend

    def release(self):
        if self.xp.name == "torch" and self.clock.cuda:
            self.xp.t.cuda.empty_cache()
            self.xp.t.cuda.reset_peak_memory_stats()

    def peak_gib(self):
        if self.xp.name == "torch" and self.clock.cuda:
            return round(self.xp.t.cuda.max_memory_allocated() / GiB, 1)
        return None

    def device_name(self):
        if self.xp.name == "torch" and self.clock.cuda:
            t = self.xp.t
            return f"{t.cuda.get_device_name()} (torch {t.__version__}, CUDA {t.version.cuda})"
        return f"{platform.processor() or 'cpu'} ({self.xp.name})"

    def log(self, msg):
        print(f"[bench {time.time() - self.t0:6.1f}s] {msg}", flush=True)

    # ---- the model

    def load(self):
        if self.model is not None:
            return
        a = self.args
        need = weights.nbytes(a)
        self.log(f"drawing {self.ns.shape} weights in device memory: {need / GiB:.1f} GiB "
                 f"(dense bf16, routed experts packed FP4, engram tables e4m3)")
        free = self.free_bytes()
        if need > free:
            raise MemoryError(f"weights need {need / GiB:.1f} GiB, {free / GiB:.1f} GiB free")
        t = time.time()
        P = weights.synth(a, self.xp, seed=self.ns.seed,
                          progress=lambda i: self.log(f"  layer {i}") if i % 10 == 0 else None)
        self.clock.sync()
        self.release()
        self.weights_s = time.time() - t
        self.model = baseline.Model(a, P, self.xp, sim=self.ns.numerics == "sim",
                                    work_bytes=int(self.ns.work_gib * GiB))
        self.log(f"weights ready in {self.weights_s:.1f} s, {self.free_bytes() / GiB:.1f} GiB free")

    def random_ids(self, B, n):
        return self.xp.from_np(self.rng.integers(3, self.args.vocab_size, (B, n)), "i64")

    def random_hashes(self, B, n):
        a = self.args
        if not a.engram_layer_ids:
            return None
        cols = (a.engram_max_ngram_size - 1) * a.engram_n_heads
        h = self.rng.integers(0, min(a.engram_num_embeddings), (B, n, len(a.engram_layer_ids), cols))
        return self.xp.from_np(h, "i64")

    def workspace(self, B, n):
        """Bytes of temporaries a forward of B x n tokens needs beyond the state (a plan, not a bound)."""
        a = self.args
        E, k = a.n_routed_experts, a.n_activated_experts
        used = min(E, B * n * k)
        moe = used * 4 * a.moe_inter_dim * a.dim * 2  # three dequantised matrices + one int32 index temp
        act = B * n * a.hc_mult * a.dim * 4 * 8  # a few f32 copies of the hc stream
        act += B * n * (a.n_routed_experts + a.vocab_size) * 4 * 2
        return int(moe + act + 6 * self.ns.work_gib * GiB + 2 * GiB)

    def fill_state(self, st, C):
        """Random KV of a context of C tokens, state positioned at C."""
        xp = self.xp
        if xp.name == "torch":
            t = xp.t
            g = t.Generator(device=xp.dev)
            g.manual_seed(self.ns.seed + C)
            for arr in list(st.rings.values()) + list(st.comp_kv.values()) + list(st.index_k.values()):
                arr.normal_(generator=g)
        else:
            for d in (st.rings, st.comp_kv, st.index_k):
                for k in d:
                    d[k][...] = xp.bf(self.rng.standard_normal(d[k].shape).astype(np.float32))
        st.pos = C
        owners = [i for i in self.model.kv_sources if i in self.model.index_sources]
        st.published = max(owners) if owners else None

    # ---- runs

    def record(self, run):
        self.runs.append(run)
        self.log("result: " + json.dumps(run))
        self.write()

    def skip(self, what, why):
        self.skipped.append({"run": what, "why": why})
        self.log(f"SKIP {what}: {why}")
        self.write()

    def decode(self, B, C, min_left=15.0, b_cap=None):
        what = f"decode B={B} C={C}"
        if self.left() < min_left:
            return self.skip(what, f"budget: {self.left():.0f} s left")
        self.load()
        a, ns = self.args, self.ns
        steps = ns.warmup + ns.steps
        max_len = C + steps + 2
        per_seq = baseline.State.nbytes(a, 1, max_len)
        room = self.free_bytes() - self.workspace(B, 1)
        B_run = min(B, int(room // per_seq)) if room > 0 else 0
        note = ""
        if B_run < 1:
            return self.skip(what, f"memory: one sequence's KV is {per_seq / GiB:.2f} GiB, "
                                   f"{self.free_bytes() / GiB:.1f} GiB free before workspace")
        if B_run < B:
            B_run = max(1, B_run // 8 * 8) if B_run >= 8 else B_run
            note = (f"shrunk from B={B}: bf16 KV of B={B} needs {B * per_seq / GiB:.1f} GiB, "
                    f"{self.free_bytes() / GiB:.1f} GiB free next to the weights")
        if b_cap is not None and B_run > b_cap:
            B_run = b_cap
            note = f"B={b_cap} after running out of memory at B={2 * b_cap}"
        if note:
            self.log(note)
        self.last_b_run = B_run
        st = baseline.State(self.model, B_run, max_len)
        self.fill_state(st, C)
        ids = self.random_ids(B_run, 1)
        ms = []
        for s in range(steps):
            if ms and self.left() < 1.5 * max(ms) / 1e3 + 2.0:
                note += (" " if note else "") + f"stopped after {len(ms)} timed steps (budget)"
                break
            hashes = self.random_hashes(B_run, 1)
            logits, t = self.clock.time(lambda: self.model.forward(st, ids, hashes))
            ids = logits[:, -1].argmax(-1).reshape(B_run, 1) if self.xp.name == "torch" else \
                self.xp.from_np(np.asarray(logits)[:, -1].argmax(-1).reshape(B_run, 1), "i64")
            if s >= ns.warmup:
                ms.append(t)
            elif s == 0:
                self.log(f"{what}: first step {t:.1f} ms")
        med = statistics.median(ms)
        finite = bool(np.isfinite(self.xp.to_np(logits)).all())
        if not finite:
            note += (" " if note else "") + "NON-FINITE LOGITS"
        run = {"mode": "decode", "batch": B_run, "batch_asked": B, "context": C, "steps_timed": len(ms),
               "step_ms_median": round(med, 2), "step_ms_min": round(min(ms), 2),
               "tokens_per_s": round(B_run / med * 1e3, 1), "kv_gib": round(B_run * per_seq / GiB, 2),
               "peak_gib": self.peak_gib(), "numerics": "sim" if self.model.sim else "bf16", "finite": finite,
               "note": note}
        st = logits = None
        self.release()
        self.record(run)

    def decode_sim(self, B, C):
        """One decode run with the quantisation simulations on: what they cost."""
        self.load()
        self.model.sim = True
        try:
            self.decode(B, C)
        finally:
            self.model.sim = self.ns.numerics == "sim"

    def prefill(self, L, min_left=20.0):
        what = f"prefill L={L}"
        if self.left() < min_left:
            return self.skip(what, f"budget: {self.left():.0f} s left")
        self.load()
        a, ns = self.args, self.ns
        need = baseline.State.nbytes(a, 1, L + 1) + self.workspace(1, L)
        if need > self.free_bytes():
            return self.skip(what, f"memory: needs ~{need / GiB:.1f} GiB, {self.free_bytes() / GiB:.1f} GiB free")
        warm = min(L, 512)
        st = baseline.State(self.model, 1, warm + 1)
        _, t = self.clock.time(lambda: self.model.forward(st, self.random_ids(1, warm),
                                                          self.random_hashes(1, warm), all_logits=False))
        self.log(f"{what}: warm-up prefill of {warm} tokens {t:.0f} ms")
        ms, note = [], ""
        for r in range(ns.prefill_reps):
            if r and self.left() < 2.5 * max(ms) / 1e3 + 3:
                note = f"{len(ms)} of {ns.prefill_reps} repetitions (budget)"
                break
            st = baseline.State(self.model, 1, L + 1)
            ids, hashes = self.random_ids(1, L), self.random_hashes(1, L)
            _, t = self.clock.time(lambda: self.model.forward(st, ids, hashes, all_logits=False))
            ms.append(t)
            self.log(f"{what}: {t:.0f} ms")
        med = statistics.median(ms)
        run = {"mode": "prefill", "len": L, "reps": len(ms), "ms_median": round(med, 1), "ms_min": round(min(ms), 1),
               "tokens_per_s": round(L / med * 1e3, 1), "peak_gib": self.peak_gib(), "numerics": ns.numerics,
               "note": note}
        st = None
        self.release()
        self.record(run)

    def ceilings(self):
        """Device copy bandwidth and GEMM throughput at the model's widths."""
        if self.xp.name != "torch":
            return self.skip("ceilings", "needs the torch backend")
        t, dev = self.xp.t, self.xp.dev
        a = self.args
        out = {"mode": "ceilings"}
        n = 4 << 30
        if self.free_bytes() < 3 * n:
            n = max(1 << 28, int(self.free_bytes() // 4))
        x = t.empty(n, dtype=t.uint8, device=dev)
        y = t.empty_like(x)
        ms = [self.clock.time(lambda: y.copy_(x))[1] for _ in range(6)][1:]
        med = statistics.median(ms)
        out["copy"] = {"bytes": n, "ms_median": round(med, 3), "GBps_read_plus_write": round(2 * n / med / 1e6, 1)}
        x = y = None
        shapes_mnk = []
        for M in (1, 32, 256, 8192):
            shapes_mnk += [(M, a.dim, a.moe_inter_dim), (M, a.o_groups * a.o_lora_rank, a.dim),
                           (M, a.q_lora_rank, a.n_heads * a.head_dim)]
        shapes_mnk.append((8192, 8192, 8192))

        def gemm_rate(M, K, N, fn):
            for _ in range(2):
                fn()
            reps = 10 if M * K * N < 1 << 33 else 5
            ms = [self.clock.time(fn)[1] for _ in range(reps)]
            med = statistics.median(ms)
            return {"M": M, "K": K, "N": N, "ms_median": round(med, 4), "TFLOPs": round(2 * M * K * N / med / 1e9, 1)}

        bf = []
        for M, K, N in shapes_mnk:
            A = t.randn(M, K, device=dev, dtype=t.bfloat16)
            W = t.randn(N, K, device=dev, dtype=t.bfloat16)
            bf.append(gemm_rate(M, K, N, lambda: t.nn.functional.linear(A, W)))
        out["bf16_gemm"] = bf
        fp8 = []
        if not hasattr(t, "_scaled_mm"):
            out["fp8_gemm_note"] = "torch._scaled_mm is not available in this torch"
        else:
            one = t.ones(1, device=dev, dtype=t.float32)
            for M, K, N in shapes_mnk:
                Mp = max(16, M)  # cuBLASLt fp8 wants dimensions that are multiples of 16
                A = t.randn(Mp, K, device=dev).to(t.float8_e4m3fn)
                W = t.randn(N, K, device=dev).to(t.float8_e4m3fn)
                try:
                    r = gemm_rate(Mp, K, N, lambda: t._scaled_mm(A, W.t(), scale_a=one, scale_b=one,
                                                                   out_dtype=t.bfloat16))
                    r["M_asked"] = M
                    fp8.append(r)
                except Exception as e:  # report, keep going
                    fp8.append({"M": Mp, "K": K, "N": N, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            out["fp8_gemm"] = fp8
            out["fp8_gemm_note"] = "torch._scaled_mm, e4m3 x e4m3, per-tensor scales, bf16 out"
        A = W = None
        self.release()
        self.record(out)

    # ---- output

    def write(self):
        if not self.ns.out:
            return
        os.makedirs(self.ns.out, exist_ok=True)
        doc = {"tool": "tools/torch_ref/bench.py", "shape": self.ns.shape, "device": self.device_name(),
               "numerics": self.ns.numerics, "budget_s": self.ns.budget_s,
               "elapsed_s": round(time.time() - self.t0, 1), "weights_s": round(getattr(self, "weights_s", 0), 1),
               "argv": sys.argv[1:], "runs": self.runs, "skipped": self.skipped}
        tmp = os.path.join(self.ns.out, ".torch-baseline.json.tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, os.path.join(self.ns.out, "torch-baseline.json"))
        with open(os.path.join(self.ns.out, "torch-baseline.md"), "w") as f:
            f.write(markdown(doc))


def markdown(doc):
    L = [f"# PyTorch baseline: {doc['shape']} on {doc['device']}", "",
         f"`python3 tools/torch_ref/bench.py {' '.join(doc['argv'])}`; numerics `{doc['numerics']}`; "
         f"{doc['elapsed_s']} s of a {doc['budget_s']} s budget (weights drawn in {doc['weights_s']} s).", ""]
    dec = [r for r in doc["runs"] if r["mode"] == "decode"]
    if dec:
        L += ["| decode B | batch run | context | numerics | step ms (median) | step ms (min) | tokens/s | KV GiB "
              "| peak GiB | note |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in dec:
            L.append(f"| {r['batch_asked']} | {r['batch']} | {r['context']} | {r['numerics']} | {r['step_ms_median']} | "
                     f"{r['step_ms_min']} | {r['tokens_per_s']} | {r['kv_gib']} | {r['peak_gib']} | {r['note']} |")
        L.append("")
    pre = [r for r in doc["runs"] if r["mode"] == "prefill"]
    if pre:
        L += ["| prefill tokens | ms (median) | ms (min) | tokens/s | reps | peak GiB | note |", "|---|---|---|---|---|---|---|"]
        for r in pre:
            L.append(f"| {r['len']} | {r['ms_median']} | {r['ms_min']} | {r['tokens_per_s']} | {r['reps']} | "
                     f"{r['peak_gib']} | {r['note']} |")
        L.append("")
    for r in doc["runs"]:
        if r["mode"] != "ceilings":
            continue
        c = r["copy"]
        L += [f"Device copy: {c['GBps_read_plus_write']} GB/s (read + write, {c['bytes'] / GiB:.1f} GiB D2D copy).", "",
              "| GEMM M x K x N | bf16 TFLOP/s | fp8 TFLOP/s |", "|---|---|---|"]
        fp8 = {(g.get("M_asked", g["M"]), g["K"], g["N"]): g for g in r.get("fp8_gemm", [])}
        for g in r["bf16_gemm"]:
            f8 = fp8.get((g["M"], g["K"], g["N"]), {})
            f8s = f8.get("TFLOPs", f8.get("error", "n/a"))
            if "M_asked" in f8 and f8["M"] != f8["M_asked"]:
                f8s = f"{f8s} (M padded to {f8['M']})"
            L.append(f"| {g['M']} x {g['K']} x {g['N']} | {g['TFLOPs']} | {f8s} |")
        L += ["", r.get("fp8_gemm_note", ""), ""]
    if doc["skipped"]:
        L += ["Skipped:", ""] + [f"- {s['run']}: {s['why']}" for s in doc["skipped"]] + [""]
    return "\n".join(L)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="flash-ep8", choices=shapes.NAMES)
    ap.add_argument("--mode", choices=("decode", "prefill", "ceilings"))
    ap.add_argument("--all", action="store_true", help="ceilings, decode B=1,32,256 x C=4096,131072, prefill 8192")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--len", type=int, default=8192, help="prefill length")
    ap.add_argument("--steps", type=int, default=5, help="timed decode steps (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed decode steps first")
    ap.add_argument("--prefill-reps", type=int, default=2)
    ap.add_argument("--numerics", choices=("bf16", "sim"), default="bf16",
                    help="bf16: plain bf16 (default); sim: also the model's fp8/fp4 quantisation simulations")
    ap.add_argument("--budget-s", type=float, default=120.0, help="total wall-time budget (runs that do not fit "
                    "are skipped)")
    ap.add_argument("--work-gib", type=float, default=0.5, help="temporaries per attention/indexer chunk")
    ap.add_argument("--out", help="directory for torch-baseline.json and torch-baseline.md")
    ap.add_argument("--backend", default="torch", choices=("torch", "numpy"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=1)
    ns = ap.parse_args(argv)
    if not ns.all and not ns.mode:
        ap.error("give --mode or --all")
    # large tensors of changing sizes: let the allocator grow segments instead of fragmenting
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    b = Bench(ns)
    ctx = b.xp.t.inference_mode() if ns.backend == "torch" else _Null()
    failed = []
    with ctx:
        plan = []
        if ns.all:
            plan += [("ceilings", b.ceilings, ())]
            plan += [(f"decode B={B} C={C}", b.decode, (B, C)) for B, C in ALL_DECODE if C == 4096]
            plan += [(f"prefill L={L}", b.prefill, (L,)) for L in ALL_PREFILL]
            plan += [(f"decode B={B} C={C}", b.decode, (B, C)) for B, C in ALL_DECODE if C != 4096]
            if ns.numerics == "bf16":
                plan += [("decode B=32 C=4096 numerics sim", b.decode_sim, (32, 4096))]
        elif ns.mode == "decode":
            plan = [(f"decode B={ns.batch} C={ns.context}", b.decode, (ns.batch, ns.context, 0))]
        elif ns.mode == "prefill":
            plan = [(f"prefill L={ns.len}", b.prefill, (ns.len, 0))]
        else:
            plan = [("ceilings", b.ceilings, ())]
        for what, fn, args in plan:
            retry = None
            try:
                fn(*args)
            except Exception as e:  # loud, recorded, and the next run still goes
                traceback.print_exc()
                oom = "out of memory" in str(e).lower()
                if oom and fn == b.decode and getattr(b, "last_b_run", 1) > 1:
                    retry = (args[0], args[1], 15.0, b.last_b_run // 2)
                    b.log(f"{what}: out of memory at B={b.last_b_run}; retrying with B={retry[3]}")
                else:
                    failed.append(what)
                    b.skip(what, f"FAILED: {type(e).__name__}: {str(e)[:300]}")
            gc.collect()
            b.release()
            if retry:
                try:
                    b.decode(*retry)
                except Exception as e:
                    traceback.print_exc()
                    failed.append(what)
                    b.skip(what, f"FAILED after an out-of-memory retry: {type(e).__name__}: {str(e)[:300]}")
                gc.collect()
                b.release()
    b.write()
    print(markdown({"shape": ns.shape, "device": b.device_name(), "numerics": ns.numerics, "budget_s": ns.budget_s,
                    "elapsed_s": round(time.time() - b.t0, 1), "weights_s": round(getattr(b, "weights_s", 0), 1),
                    "argv": sys.argv[1:], "runs": b.runs, "skipped": b.skipped}))
    if failed:
        print(f"bench: FAILED runs: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    sys.exit(main())
