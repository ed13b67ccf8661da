#!/usr/bin/env python3
"""First differences between the official graph's per-layer dump and tide's.

  compare_dump.py OFFICIAL.npz TIDE.trace CASE [STEPS]

OFFICIAL.npz from dump_official.py; TIDE.trace from
TIDE_GOLDEN_TRACE=FILE build/test_golden_official (records: a line
"CASE STEP NAME LAYER ROWS WIDTH", then ROWS*WIDTH float32). For each step
(default 0, the prefill) and layer, prints the block-level tensors that are
not bit-equal (h_in, attn_out, ffn_out, h_out): how many elements differ and
in which rows. numpy only.
"""
import collections
import sys

import numpy as np


def load_official(path):
    z = np.load(path)
    out = collections.defaultdict(list)
    for k in sorted(z.files):
        parts = k.split("__")
        step, layer, tag = int(parts[1][1:]), int(parts[2][1:]), parts[3]
        a = z[k]
        if len(parts) > 4 and parts[4] == "bf16":
            a = (a.astype(np.uint16).astype(np.uint32) << 16).view(np.float32)
        out[(step, tag, layer)].append(a)
    return out


def load_tide(path, case):
    out = collections.defaultdict(list)
    with open(path, "rb") as f:
        while True:
            line = f.readline()
            if not line:
                break
            c, step, name, layer, rows, width = line.split()
            n = int(rows) * int(width)
            a = np.frombuffer(f.read(4 * n), dtype=np.float32).reshape(int(rows), int(width))
            if c.decode() == case:
                out[(int(step), name.decode(), int(layer))].append(a)
    return out


def main():
    off = load_official(sys.argv[1])
    td = load_tide(sys.argv[2], sys.argv[3])
    steps = [int(x) for x in sys.argv[4].split(",")] if len(sys.argv) > 4 else [0]
    layers = sorted({k[2] for k in td})
    for step in steps:
        for L in layers:
            for name in ("h_in", "attn_out", "ffn_out", "h_out"):
                if (step, name, L) not in td or (step, name, L) not in off:
                    continue
                t = td[(step, name, L)][0]
                o = off[(step, name, L)][0].reshape(t.shape)
                d = t != o
                if d.any():
                    rows = np.where(d.any(1))[0]
                    print(f"step {step} layer {L} {name}: {int(d.sum())} elements differ, rows {rows[:12].tolist()}")


if __name__ == "__main__":
    main()
