#!/usr/bin/env python3
"""Goldens from the official DeepSeek-V4.1 inference code on a checkpoint.

Runs the release's own inference/model.py (text path; revision dba1be0a) with
the CPU rendering of its kernels, on the CPU, default dtype bf16, temperature
0, as docs/reference.md ("Validation against the official graph") describes.
The official files are NOT part of this repository: give the directory that
holds them with --official (it must contain inference/model.py, engram.py
and kernel_cpu.py, byte for byte as published). This harness only supplies
what the text path needs around them:
  - a package `inference` over that directory, and two empty stand-ins for
    its vision imports (image_processor's span constants, vision's classes),
    which the text path never calls;
  - torch's topk replaced by a stable one (ties to the lower index: tide's
    rule; torch's own order among exact ties is unspecified);
  - the checkpoint loaded from its safetensors into the official modules, in
    the dtypes the modules declare (fp8/fp4 weights and their scales as
    stored; bf16 values widened where a module holds fp32);
  - the engram token map's tokenizer: HF `tokenizers` over tokenizer.json
    (the official build_compressed_token_map runs on it);
  - all logit rows of a prefill (the official head returns the last row by
    default; the harness asks for full_logits, which changes nothing else).

For each case of --prompts (make_prompts.py), on a fresh model:
  prefill the prompt in one forward (start_pos 0): argmax of every row;
  then greedy: --greedy tokens (the first from the prefill's last row, the
  rest from one-token decode steps feeding the argmax);
and on another fresh model: prefill the prompt, then one-token decode steps
feeding the case's continuation tokens (teacher forced): argmax of every step.
Each argmax row carries the top-1 minus top-2 logit margin, so a test can
tell a near-tie from a real disagreement.

Writes the golden file (format: tools/golden/README.md).

Usage (torch >= 2.8 for the fp4/e8m0 dtypes; numpy, sympy, tokenizers):
  run_official.py --official DIR --model CKPT --prompts prompts.json -o out.golden
"""
import argparse
import collections
import concurrent.futures
import hashlib
import importlib
import json
import multiprocessing
import os
import struct
import sys
import time
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import ckpt  # noqa: E402  (config.json -> the reference's ModelArgs field names)

OFFICIAL_FILES = ("model.py", "engram.py", "kernel_cpu.py")
TopK = collections.namedtuple("TopK", ["values", "indices"])


def stable_topk(self, k, dim=-1, largest=True, sorted=True):
    """torch.Tensor.topk with ties to the lower index (a stable sort)."""
    v, i = torch.sort(self, dim=dim, descending=largest, stable=True)
    return TopK(v.narrow(dim, 0, k), i.narrow(dim, 0, k))


def import_official(root):
    """The official inference package from root/inference, with stand-ins for
    the vision modules the text path imports but never calls."""
    pkg_dir = os.path.join(root, "inference")
    for f in OFFICIAL_FILES:
        if not os.path.isfile(os.path.join(pkg_dir, f)):
            sys.exit(f"run_official: {pkg_dir}/{f} missing (the official files are fetched, not committed)")
    pkg = types.ModuleType("inference")
    pkg.__path__ = [pkg_dir]
    sys.modules["inference"] = pkg
    ip = types.ModuleType("inference.image_processor")
    ip.IMAGE, ip.IMAGE_END, ip.IMAGE_NEW_LINE, ip.IMAGE_START = 0, 1, 2, 3  # unused on the text path
    sys.modules["inference.image_processor"] = ip
    vi = types.ModuleType("inference.vision")

    class _NoVision:
        def __init__(self, *a, **k):
            raise RuntimeError("vision is not part of the text path")

    vi.Aligner = vi.ViT = _NoVision
    sys.modules["inference.vision"] = vi
    return importlib.import_module("inference.model")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ------------------------------------------------------------------ weights

VISION_PREFIXES = ("vision", "aligner", "image_start", "image_end", "image_newline")
_DT = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64,
       "I32": torch.int32, "U8": torch.uint8, "I8": torch.int8}
_BYTE_VIEW = {"F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu", "F4": "float4_e2m1fn_x2"}


def read_safetensors(path):
    """-> {name: torch tensor} in the stored dtype (F4: [.., n/2] float4_e2m1fn_x2)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape = info["dtype"], list(info["shape"])
        lo, hi = info["data_offsets"]
        raw = bytearray(data[base + lo:base + hi])
        if dt in _DT:
            t = torch.frombuffer(raw, dtype=_DT[dt]) if raw else torch.empty(0, dtype=_DT[dt])
            t = t.reshape(shape)
        elif dt in _BYTE_VIEW:
            t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
            if dt == "F4":
                shape[-1] //= 2
            t = t.reshape(shape).view(getattr(torch, _BYTE_VIEW[dt]))
        else:
            sys.exit(f"run_official: {path}: tensor {name}: dtype {dt} not handled")
        out[name] = t
    return out


def read_checkpoint(d, names_only=False):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(x for x in os.listdir(d) if x.endswith(".safetensors"))
    if names_only:
        return files
    tensors = {}
    for fn in files:
        tensors.update(read_safetensors(os.path.join(d, fn)))
    return tensors, files


def load_weights(model, tensors):
    """Every parameter of the official modules from the checkpoint, in the
    module's declared dtype (quantized ones must match as stored)."""
    quant = {torch.float8_e4m3fn, torch.float8_e8m0fnu, torch.float4_e2m1fn_x2}
    used = set()
    for name, p in model.named_parameters():  # shared modules (mtp embed/head) appear once
        if name not in tensors:
            sys.exit(f"run_official: parameter {name} {tuple(p.shape)} is not in the checkpoint")
        t = tensors[name]
        if tuple(t.shape) != tuple(p.shape):
            sys.exit(f"run_official: {name}: checkpoint shape {tuple(t.shape)}, module {tuple(p.shape)}")
        if p.dtype in quant or t.dtype in quant:
            if t.dtype != p.dtype:
                sys.exit(f"run_official: {name}: checkpoint {t.dtype}, module {p.dtype}")
            p.data = t
        else:
            p.data = t.to(p.dtype)
        used.add(name)
    extra = sorted(set(tensors) - used)
    vision = [n for n in extra if n.endswith(".bias_vl") or n.split(".")[0] in VISION_PREFIXES]
    if vision:
        print(f"run_official: {len(vision)} vision tensors not loaded (text path)", flush=True)
    extra = sorted(set(extra) - set(vision))
    if extra:
        sys.exit(f"run_official: {len(extra)} checkpoint tensors have no module parameter, e.g. {extra[:5]}")


# ------------------------------------------------------------------ model

class HFTok:
    """What build_compressed_token_map reads of a transformers tokenizer."""

    def __init__(self, path):
        from tokenizers import Tokenizer
        self.backend_tokenizer = Tokenizer.from_file(path)

    def __len__(self):
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)


def model_args(M, cfg, max_seq_len):
    a = ckpt.parse_config(cfg)
    q = cfg.get("quantization_config") or {}
    fields = {f: getattr(a, f) for f in M.ModelArgs.__dataclass_fields__ if hasattr(a, f)}
    fields.update(max_batch_size=1, max_seq_len=max_seq_len, temperature=0.0,
                  dtype="fp8" if q.get("quant_method") == "fp8" else "bf16",
                  expert_dtype="fp4" if q.get("expert_dtype") == "fp4" else None)
    return M.ModelArgs(**fields)


class Official:
    def __init__(self, M, ckpt_dir, max_seq_len):
        with open(os.path.join(ckpt_dir, "config.json")) as f:
            cfg = json.load(f)
        self.M = M
        self.args = model_args(M, cfg, max_seq_len)
        self.tok = HFTok(os.path.join(ckpt_dir, "tokenizer.json"))
        self.tensors, self.files = read_checkpoint(ckpt_dir)

    def fresh(self):
        """A new Transformer with the checkpoint's weights and empty caches."""
        torch.set_default_dtype(torch.bfloat16)
        model = self.M.Transformer(self.args, self.tok)
        load_weights(model, self.tensors)
        model.eval()
        head = model.head
        full = head.forward
        head.forward = lambda x, full_logits=False: full(x, True)  # every row's logits
        return model


def top2(logits):
    """[rows, V] fp32 -> (argmax ids, top-1 minus top-2 margins), ties to the lower index."""
    v, i = stable_topk(logits.float(), 2, dim=-1)
    return i[:, 0].tolist(), (v[:, 0] - v[:, 1]).tolist()


_W = {}  # the worker process's model source (set by _init)


def _init(official, model, max_seq_len, threads):
    torch.set_num_threads(threads)
    torch.Tensor.topk = stable_topk
    _W["off"] = Official(import_official(official), model, max_seq_len)


def run_job(job):
    """One case's greedy run (prefill rows + greedy tokens) or teacher-forced
    run (continuation rows), each on a fresh model, in a worker process."""
    kind, case, n_greedy = job
    off, prompt, t0 = _W["off"], case["prompt"], time.time()
    m = off.fresh()
    _, lg, _ = m(torch.tensor([prompt]), 0)
    pos = len(prompt)
    if kind == "greedy":
        pre_ids, pre_m = top2(lg[0])
        ids, margins = [pre_ids[-1]], [pre_m[-1]]
        while len(ids) < n_greedy:
            _, lg, _ = m(torch.tensor([[ids[-1]]]), pos)
            pos += 1
            a, mg = top2(lg[0])
            ids.append(a[-1])
            margins.append(mg[-1])
        out = dict(prefill=pre_ids, prefill_margin=pre_m, greedy=ids, greedy_margin=margins)
    else:
        ids, margins = [], []
        for t in case["cont"]:
            _, lg, _ = m(torch.tensor([[t]]), pos)
            pos += 1
            a, mg = top2(lg[0])
            ids.append(a[-1])
            margins.append(mg[-1])
        out = dict(cont_argmax=ids, cont_margin=margins)
    print(f"{case['name']} {kind}: prompt {len(prompt)}, {len(ids)} rows after it, {time.time() - t0:.1f} s, "
          f"min margin {min(margins):.3g}", flush=True)
    return case["name"], out


def ids_line(key, xs):
    return key + " " + " ".join(str(int(x)) for x in xs) + "\n"


def margins_line(key, xs):
    return key + " " + " ".join(f"{x:.4g}" for x in xs) + "\n"


def write_golden(path, meta, results):
    with open(path, "w") as f:
        f.write("tide-golden 1\n")
        for k, v in meta.items():
            f.write(f"# {k}: {v}\n")
        for r in results:
            f.write(f"case {r['name']} {len(r['prompt'])} {len(r['greedy'])} {len(r['cont'])}\n")
            f.write(ids_line("prompt", r["prompt"]))
            f.write(ids_line("prefill", r["prefill"]))
            f.write(margins_line("prefill_margin", r["prefill_margin"]))
            f.write(ids_line("greedy", r["greedy"]))
            f.write(margins_line("greedy_margin", r["greedy_margin"]))
            f.write(ids_line("cont", r["cont"]))
            f.write(ids_line("cont_argmax", r["cont_argmax"]))
            f.write(margins_line("cont_margin", r["cont_margin"]))
        f.write("end\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--official", required=True, help="dir holding inference/{model,engram,kernel_cpu}.py")
    ap.add_argument("--model", required=True, help="checkpoint dir (config.json, safetensors, tokenizer.json)")
    ap.add_argument("--prompts", required=True, help="cases from make_prompts.py")
    ap.add_argument("--greedy", type=int, default=64, help="greedy tokens per case (64)")
    ap.add_argument("--cases", default="", help="comma-separated case names to run (default: all)")
    ap.add_argument("--jobs", type=int, default=0, help="worker processes (default: the CPUs, at most 2 a case)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads a worker (default: CPUs / workers)")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    with open(a.prompts) as f:
        P = json.load(f)
    cases = P["cases"]
    if a.cases:
        want = a.cases.split(",")
        cases = [c for c in cases if c["name"] in want]
    need = max(len(c["prompt"]) + max(a.greedy, len(c["cont"])) for c in cases)
    max_seq_len = -(-(need + 1) // 256) * 256
    files = read_checkpoint(a.model, names_only=True)
    meta = {
        "made by": "tools/golden/run_official.py (official inference/model.py, text path, CPU kernels, bf16)",
        "torch": torch.__version__,
        "official sha256": " ".join(f"{f}={sha256_file(os.path.join(a.official, 'inference', f))}"
                                    for f in OFFICIAL_FILES),
        "model": os.path.normpath(a.model),
        "model sha256": " ".join(f"{fn}={sha256_file(os.path.join(a.model, fn))}" for fn in files),
        "config sha256": sha256_file(os.path.join(a.model, "config.json")),
        "tokenizer sha256": sha256_file(os.path.join(a.model, "tokenizer.json")),
        "prompts": f"{P.get('text')} sha256 {P.get('text_sha256')}",
        "max_seq_len": max_seq_len,
        "topk": "stable (ties to the lower index)",
    }
    jobs = [(k, c, a.greedy) for c in sorted(cases, key=lambda c: -len(c["prompt"])) for k in ("greedy", "tf")]
    n_proc = max(1, min(len(jobs), a.jobs or os.cpu_count()))
    threads = a.threads or max(1, (os.cpu_count() or 1) // n_proc)
    t0 = time.time()
    done = {c["name"]: dict(name=c["name"], prompt=c["prompt"], cont=c["cont"]) for c in cases}
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(n_proc, mp_context=ctx, initializer=_init,
                                                initargs=(a.official, a.model, max_seq_len, threads)) as ex:
        futs = [ex.submit(run_job, j) for j in jobs]
        for f in concurrent.futures.as_completed(futs):
            name, out = f.result()
            done[name].update(out)
            # rewritten as cases complete, so a run cut short still leaves the finished ones
            write_golden(a.out, meta, [done[c["name"]] for c in cases if "greedy" in done[c["name"]]
                                       and "cont_argmax" in done[c["name"]]])
    results = [done[c["name"]] for c in cases]
    write_golden(a.out, meta, results)
    print(f"{a.out}: {len(results)} cases in {time.time() - t0:.1f} s ({n_proc} processes x {threads} threads)",
          flush=True)


if __name__ == "__main__":
    main()
