#!/usr/bin/env python3
"""Per-layer dumps of the official graph on a golden's cases (docs/tide-mini-fidelity.md).

The official modules are instrumented by wrapping their functions (the
official files are not edited; the loader is run_official.py's). Jobs run in
spawned worker processes, one torch thread each, as the goldens were made:
  NAME:KIND:DETAIL_STEPS
KIND pf = prefill only; tf = prefill, then the case's continuation fed one
decode step at a time; tfd = as tf, recording the decode steps only.
DETAIL_STEPS: the steps (prefill = 0, decode step i = i) recorded in full
detail (every linear's input and output, norms, rotations, FP8/FP4
simulations, top-k inputs, hc_split_sinkhorn and sparse_attn inputs and
outputs); other steps record block-level tensors only (block input and
output, attention and MoE outputs, router choices, indexer picks, engram
outputs). Writes OUT/NAME_KIND.npz: keys eNNNNN__sSTEP__LLAYER__TAG, bf16
tensors as their 16 bits (key suffix __bf16), others as float32 / int64.
Prints each job's prefill argmax and margins (compare with the golden).

Usage (where torch >= 2.8 is; e.g. the GPU machine's CPU):
  dump_official.py OFFICIAL_DIR MODEL_DIR GOLDEN OUT_DIR p16:tf:0,1,2,3 p200:tf: ...
tide's side: TIDE_GOLDEN_TRACE=FILE build/test_golden_official; compare with
compare_dump.py.
"""
import multiprocessing
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_official as RO  # noqa: E402

REC = dict(on=False, detail=False, step=0, layer=-1, events=[], n=0)


def rec(tag, t, detail=True):
    if not REC["on"] or (detail and not REC["detail"]):
        return
    if isinstance(t, (tuple, list)):
        for i, x in enumerate(t):
            rec(f"{tag}.{i}", x, detail)
        return
    if not isinstance(t, torch.Tensor):
        return
    t = t.detach()
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e8m0fnu, torch.float4_e2m1fn_x2):
        return
    sfx = ""
    if t.dtype == torch.bfloat16:  # stored as its 16 bits (exact, half the size)
        a, sfx = t.contiguous().view(torch.int16).numpy().copy(), "__bf16"
    else:
        a = t.float().numpy().copy() if t.is_floating_point() else t.long().numpy().copy()
    key = f"e{REC['n']:05d}__s{REC['step']}__L{REC['layer']}__{tag}{sfx}"
    REC["n"] += 1
    REC["events"].append((key, a))


def instrument(M):
    def wrap(cls, name, tag, detail=True, pre=None):
        orig = getattr(cls, name)

        def f(self, *a, **k):
            if pre:
                pre(self, a, k)
            out = orig(self, *a, **k)
            rec(tag, out, detail)
            return out
        setattr(cls, name, f)

    def set_layer(self, a, k):
        REC["layer"] = self.layer_id

    # Block: input h, pre_mix in; output (h, pre_mix)
    orig_block = M.Block.forward

    def block_fwd(self, x, start_pos, pre_mix, image_mask, *attn_args):
        REC["layer"] = self.layer_id
        rec("h_in", x, False)
        rec("pre_mix_in", pre_mix, False)
        out = orig_block(self, x, start_pos, pre_mix, image_mask, *attn_args)
        REC["layer"] = self.layer_id
        rec("h_out", out[0], False)
        rec("pre_mix_out", out[1], False)
        return out
    M.Block.forward = block_fwd
    wrap(M.Block, "hc_mixes", "hc_mixes", True)
    wrap(M.Block, "hc_pre", "hc_pre", True)
    wrap(M.Block, "hc_post", "hc_post", True)
    wrap(M.Attention, "forward", "attn_out", False)
    wrap(M.MoE, "forward", "ffn_out", False)
    wrap(M.Gate, "forward", "gate", False)
    wrap(M.Engram, "forward", "engram_out", False, pre=set_layer)
    wrap(M.Compressor, "forward", "compressor", True)
    wrap(M.Indexer, "forward", "indexer", False)
    wrap(M.RMSNorm, "forward", "norm", True)

    def head_pre(self, a, k):
        REC["layer"] = 99
    wrap(M.ParallelHead, "forward", "logits", True, pre=head_pre)

    def wrapf(name, tag, rec_in=False):
        orig = getattr(M, name)

        def f(*a, **k):
            if rec_in:
                for i, x in enumerate(a):
                    if isinstance(x, torch.Tensor):
                        rec(f"{tag}_in{i}", x, True)
            out = orig(*a, **k)
            rec(tag, out, True)
            return out
        setattr(M, name, f)
    wrapf("linear", "linear", rec_in=True)
    wrapf("apply_rotary_emb", "rope")
    wrapf("sparse_attn", "sparse_attn", rec_in=True)
    wrapf("hc_split_sinkhorn", "sinkhorn", rec_in=True)

    def wrapq(name, tag):
        orig = getattr(M, name)

        def f(*a, **k):
            out = orig(*a, **k)
            if isinstance(out, torch.Tensor):  # the in-place simulation only
                rec(tag, out, True)
            return out
        setattr(M, name, f)
    wrapq("act_quant", "act_quant_sim")
    wrapq("fp4_act_quant", "fp4_quant_sim")

    def topk(self, k, dim=-1, largest=True, sorted=True):
        rec("topk_in", self, True)
        return RO.stable_topk(self, k, dim, largest, sorted)
    torch.Tensor.topk = topk


W = {}


def init(official, model, max_seq_len):
    torch.set_num_threads(1)
    M = RO.import_official(official)
    W["off"] = RO.Official(M, model, max_seq_len)
    instrument(M)


def run(job):
    name, kind, detail_steps, case, out_dir = job
    t0 = time.time()
    off = W["off"]
    m = off.fresh()
    REC.update(on=kind != "tfd", events=[], n=0)
    prompt = case["prompt"]
    REC.update(step=0, detail=0 in detail_steps)
    _, lg, _ = m(torch.tensor([prompt]), 0)
    ids, mg = RO.top2(lg[0])
    summary = [f"{name} {kind} prefill argmax {' '.join(map(str, ids))}",
               f"{name} {kind} prefill margin {' '.join(f'{x:.4g}' for x in mg)}"]
    pos = len(prompt)
    if kind in ("tf", "tfd"):
        REC["on"] = True
        a_ids, a_m = [], []
        for i, t in enumerate(case["cont"]):
            REC.update(step=i + 1, detail=(i + 1) in detail_steps)
            _, lg, _ = m(torch.tensor([[t]]), pos)
            pos += 1
            a, g = RO.top2(lg[0])
            a_ids.append(a[-1])
            a_m.append(g[-1])
        summary += [f"{name} {kind} cont_argmax {' '.join(map(str, a_ids))}",
                    f"{name} {kind} cont_margin {' '.join(f'{x:.4g}' for x in a_m)}"]
    REC["on"] = False
    path = os.path.join(out_dir, f"{name}_{kind}.npz")
    np.savez_compressed(path, **dict(REC["events"]))
    summary.append(f"{name} {kind}: {len(REC['events'])} arrays, {os.path.getsize(path) / 1e6:.1f} MB, "
                   f"{time.time() - t0:.1f} s")
    return "\n".join(summary)


def read_golden(path):
    cases, cur = {}, None
    for line in open(path):
        w = line.split()
        if not w or w[0].startswith("#"):
            continue
        if w[0] == "case":
            cur = cases[w[1]] = dict(name=w[1])
        elif cur is not None and w[0] in ("prompt", "cont"):
            cur[w[0]] = [int(x) for x in w[1:]]
    return cases


def main():
    official, model, golden, out_dir = sys.argv[1:5]
    jobs_spec = sys.argv[5:]
    cases = read_golden(golden)
    max_seq_len = 2304  # the golden's
    jobs = []
    for js in jobs_spec:
        name, kind, det = js.split(":")
        det = set(int(x) for x in det.split(",") if x != "")
        jobs.append((name, kind, det, cases[name], out_dir))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(len(jobs), initializer=init, initargs=(official, model, max_seq_len)) as pool:
        for s in pool.imap_unordered(run, jobs):
            print(s, flush=True)


if __name__ == "__main__":
    main()
