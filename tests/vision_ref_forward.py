#!/usr/bin/python3
"""The text model with an image span, in the numpy reference (tools/ref/model.py),
for tests/test_vision_forward.c.

    vision_ref_forward.py DIR

DIR holds a synthetic checkpoint with a vision tower and, from the C test,
ids.npy (int32 [n] prompt), types.npy (int8 [n], -1 text), rows.npy
(float32 [n, dim], span rows) and dec.npy (int32 [k] decode tokens). Writes
ref.npy (float32 [n + k, vocab]: every prefill row, then each decode row) and
text_routing.npy, the same with the span rows routed by the text bias (to show
the comparison would see bias_vl left out)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "ref"))
import model as mdl  # noqa: E402


def run(d, m, ids, types, rows, dec):
    st = m.new_state()
    out = [m.forward(st, ids, image=(types, rows))["logits"]]
    for t in dec:
        out.append(m.forward(st, [int(t)])["logits"])
    return np.concatenate(out).astype(np.float32)


def main():
    d = sys.argv[1]
    ids = np.load(os.path.join(d, "ids.npy")).astype(np.int64)
    types = np.load(os.path.join(d, "types.npy")).astype(np.int64)
    rows = np.load(os.path.join(d, "rows.npy")).astype(np.float32)
    dec = np.load(os.path.join(d, "dec.npy")).astype(np.int64)
    m = mdl.Model(d)
    np.save(os.path.join(d, "ref.npy"), run(d, m, ids, types, rows, dec))
    for L in m.layers:
        L["gate_bias_vl"] = L.get("gate_bias")
    np.save(os.path.join(d, "text_routing.npy"), run(d, m, ids, types, rows, dec))


if __name__ == "__main__":
    main()
