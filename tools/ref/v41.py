#!/usr/bin/python3
"""Command line of the numpy reference: logits of a prompt, greedy decode steps,
chunked prefill, DSpark drafts and per-layer dumps. See docs/reference.md.

    /usr/bin/python3 tools/ref/v41.py --model DIR --prompt-ids 0,5,7 \\
        [--decode N] [--chunk K] [--all-rows] [--out FILE.npy] [--json] \\
        [--dump FILE.npz] [--teacher FILE.npz] [--dspark] [--intended-index-keys] [--no-engram-check]
(--prompt-file FILE instead of --prompt-ids reads the ids from a file.)
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as mdl  # noqa: E402


def parse_ids(s):
    try:
        ids = [int(x) for x in s.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise ValueError(f"--prompt-ids: not a comma-separated list of integers: {s!r}")
    if not ids:
        raise ValueError("--prompt-ids: empty")
    return ids


def sub(teacher, prefix):
    """The teacher arrays of one forward, keys without their prefix."""
    if teacher is None:
        return None
    return {k[len(prefix):]: v for k, v in teacher.items() if k.startswith(prefix) and "." in k[len(prefix):]}


def run(ns):
    m = mdl.Model(ns.model, intended_index_keys=ns.intended_index_keys, check_engram=not ns.no_engram_check)
    if ns.prompt_file:
        with open(ns.prompt_file) as f:
            ids = parse_ids(",".join(f.read().replace(",", " ").split()))
    else:
        ids = parse_ids(ns.prompt_ids)
    teacher = None
    if ns.teacher and os.path.isdir(ns.teacher):
        teacher = {f[:-4]: np.load(os.path.join(ns.teacher, f)) for f in os.listdir(ns.teacher) if f.endswith(".npy")}
    elif ns.teacher:
        with np.load(ns.teacher) as z:
            teacher = {k: z[k] for k in z.files}
    st = m.new_state()
    dump = {} if ns.dump else None
    chunk = ns.chunk if ns.chunk and ns.chunk > 0 else len(ids)
    rows, hidden = [], []
    for s in range(0, len(ids), chunk):
        d = {} if dump is not None else None
        pre = f"prefill{s}." if chunk < len(ids) else ""
        out = m.forward(st, ids[s:s + chunk], dump=d, teacher=sub(teacher, pre))
        if dump is not None:
            dump.update({(f"prefill{s}." if chunk < len(ids) else "") + k: v for k, v in d.items()})
        rows.append(out["logits"])
        if out["main_hidden"] is not None:
            hidden.append(out["main_hidden"])
    prefill = np.concatenate(rows)
    logits = [prefill] if ns.all_rows else [prefill[-1:]]
    greedy = [int(np.argmax(prefill[-1]))]
    drafts = []
    if ns.dspark and m.has_dspark:
        m.dspark_seed(st, np.concatenate(hidden))
    for step in range(ns.decode):
        pos = st.pos
        d = {} if dump is not None else None
        out = m.forward(st, [greedy[-1]], dump=d, teacher=sub(teacher, f"step{step}."))
        if dump is not None:
            dump.update({f"step{step}.{k}": v for k, v in d.items()})
        logits.append(out["logits"])
        greedy.append(int(np.argmax(out["logits"][-1])))
        if ns.dspark and m.has_dspark:
            r = m.dspark_step(st, pos, out["main_hidden"], greedy[-1])
            drafts.append({"pos": pos, "draft_ids": r["draft_ids"].tolist(),
                           "confidence": r["confidence"].tolist(), "logits": r["logits"]})
    logits = np.concatenate(logits).astype(np.float32)
    if ns.out:
        np.save(ns.out, logits)
    if dump is not None:
        np.savez(ns.dump, **{k: np.asarray(v) for k, v in dump.items()})
    if ns.json:
        res = {"ids": greedy, "rows": int(logits.shape[0]), "vocab": int(logits.shape[1]),
               "logits": logits.tolist()}
        if ns.dspark:
            res["dspark"] = [{**d, "logits": d["logits"].tolist()} for d in drafts]
        json.dump(res, sys.stdout)
        sys.stdout.write("\n")
    else:
        for r, row in enumerate(logits):
            top = np.argsort(-row.astype(np.float64), kind="stable")[:5]
            print(f"row {r}: argmax {top[0]}  top5 " + " ".join(f"{t}:{row[t]:.4f}" for t in top))
        print("greedy ids: " + ",".join(str(x) for x in greedy))
        for d in drafts:
            print(f"dspark at {d['pos']}: drafts {d['draft_ids']} confidence "
                  + " ".join(f"{c:.3f}" for c in d["confidence"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description="numpy reference of DeepSeek-V4.1-Flash (text)")
    ap.add_argument("--model", required=True, help="checkpoint directory")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--prompt-ids", help="comma-separated token ids")
    g.add_argument("--prompt-file", help="file of token ids (comma or whitespace separated)")
    ap.add_argument("--decode", type=int, default=0, help="greedy decode steps after the prefill")
    ap.add_argument("--chunk", type=int, default=0, help="prefill in chunks of this many tokens")
    ap.add_argument("--all-rows", action="store_true", help="output every prefill row, not just the last")
    ap.add_argument("--out", help="write the logits rows to this .npy file")
    ap.add_argument("--json", action="store_true", help="print ids and logits as JSON")
    ap.add_argument("--dump", help="write per-layer intermediates to this .npz file")
    ap.add_argument("--dspark", action="store_true", help="run the DSpark draft after each decode step")
    ap.add_argument("--teacher", help=".npz (or directory of NAME.npy) of layer inputs, dump key names "
                    "(L3.h_in, step0.L3.h_in), that replace the oracle's own")
    ap.add_argument("--intended-index-keys", action="store_true",
                    help="index sources read their own KV source's index keys (turns the quirk off)")
    ap.add_argument("--no-engram-check", action="store_true",
                    help="do not require engram_compressed_vocab_size to match the tokenizer")
    ns = ap.parse_args(argv)
    if ns.decode < 0:
        print("v41.py: --decode must be >= 0", file=sys.stderr)
        return 2
    try:
        run(ns)
    except (ValueError, KeyError, OSError) as e:
        print(f"v41.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
