#!/usr/bin/python3
"""The KV quantisation loss: how much the release's KV-cache formats cost in
perplexity. The numpy reference (tools/ref/model.py) scores a text twice,
in windows as `tide eval` does (BOS + ctx tokens, every token scored once):

  quantised   as the release computes: window KV FP8 e4m3 (UE8M0 / 32),
              compressed latents FP4 (E4M3 / 16), indexer keys and queries
              FP4 (UE8M0 / 32)
  exact       the same forward with those simulations removed (the values
              kept in f32), everything else unchanged (weights, activation
              quantisation in the GEMMs, BF16 roundings)

and prints both mean NLLs, perplexities and the difference, plus the top-1
agreement of the two. `--kv-only` keeps the indexer's FP4 and removes only
the KV formats.

    /usr/bin/python3 tools/train/data/kv_quant_loss.py --model DIR --text FILE \\
        [--ctx 512] [--max-tokens N] [--kv-only]

The text is tokenized by `tide tokenize` (--tide, default build/tide), or
given as ids (whitespace-separated) with --ids.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "ref"))
import model as mdl  # noqa: E402
import numerics as real_nx  # noqa: E402


class ExactKV:
    """numerics with the KV (and, unless kv_only, the indexer) formats removed."""

    def __init__(self, kv_only):
        self.kv_only = kv_only

    def __getattr__(self, name):
        return getattr(real_nx, name)

    @staticmethod
    def fp8_act_sim(x, block):  # window KV (model.py's only use of it)
        return x

    @staticmethod
    def fp4_sim_e4m3(x, block):  # compressed latents
        return x

    def fp4_sim_e8m0(self, x, block):  # indexer keys and queries
        return real_nx.fp4_sim_e8m0(x, block) if self.kv_only else x


def score(m, ids, bos, ctx):
    """-> (nll per scored token [n], argmax per token [n]) over windows of ctx tokens."""
    nll, top = [], []
    for s in range(0, len(ids), ctx):
        win = [bos] + ids[s:s + ctx]
        lg = m.forward(m.new_state(), win)["logits"].astype(np.float64)
        for r in range(len(win) - 1):
            row = lg[r]
            mx = row.max()
            nll.append(math.log(np.exp(row - mx).sum()) - (row[win[r + 1]] - mx))
            top.append(int(np.argmax(row)))
        print(f"  window at {s}: {len(win) - 1} tokens", file=sys.stderr)
    return np.array(nll), np.array(top)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", help="UTF-8 text, tokenized whole by tide")
    ap.add_argument("--ids", help="or: a file of token ids")
    ap.add_argument("--tide", default=os.path.join(HERE, "..", "..", "..", "build", "tide"))
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=0)
    ap.add_argument("--kv-only", action="store_true", help="keep the indexer's FP4; remove only the KV formats")
    ns = ap.parse_args()
    if ns.ids:
        ids = [int(x) for x in open(ns.ids).read().split()]
    else:
        text = open(ns.text, encoding="utf-8").read()
        out = subprocess.run([ns.tide, "tokenize", "--tokenizer", os.path.join(ns.model, "tokenizer.json"),
                              "--jsonl"], input=json.dumps(text) + "\n", capture_output=True, text=True, check=True)
        ids = [int(x) for x in out.stdout.split()]
    if ns.max_tokens:
        ids = ids[:ns.max_tokens]
    tok = json.load(open(os.path.join(ns.model, "tokenizer.json"), encoding="utf-8"))
    bos = next(a["id"] for a in tok["added_tokens"] if a["content"] == "<\uff5cbegin\u2581of\u2581sentence\uff5c>")
    m = mdl.Model(ns.model)
    print("quantised KV:", file=sys.stderr)
    q_nll, q_top = score(m, ids, bos, ns.ctx)
    mdl.nx = ExactKV(ns.kv_only)
    try:
        print("exact KV:", file=sys.stderr)
        e_nll, e_top = score(m, ids, bos, ns.ctx)
    finally:
        mdl.nx = real_nx
    res = {"tokens": len(q_nll), "ctx": ns.ctx, "kv_only": ns.kv_only,
           "nll_quantised": round(float(q_nll.mean()), 6), "nll_exact": round(float(e_nll.mean()), 6),
           "ppl_quantised": round(math.exp(q_nll.mean()), 4), "ppl_exact": round(math.exp(e_nll.mean()), 4),
           "nll_loss": round(float(q_nll.mean() - e_nll.mean()), 6),
           "top1_quantised": round(float(np.mean(q_top == np.array(ids))), 4),
           "top1_exact": round(float(np.mean(e_top == np.array(ids))), 4),
           "argmax_agreement": round(float(np.mean(q_top == e_top)), 4)}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
