#!/usr/bin/python3
"""Paired TTFT comparison of `tide bench serve --ttft-out F --offline`
against the same workload through `tide bench offline` (F.offline).

Each F holds "index seconds" lines; request i of F and of F.offline had the
same prompt (same workload seed). Prints the median of each side, the
median of the per-request differences (serve - offline) and its bootstrap
95% confidence interval.  Usage: ttft_pair.py F1 [F2 ...]"""
import sys

import numpy as np


def load(path):
    d = {}
    with open(path) as f:
        for line in f:
            w = line.split()  # index ttft [start first]
            d[int(w[0])] = float(w[1])
    return d


def median_ci(x):
    """The median of x and its bootstrap 95% confidence interval (10000 resamples, fixed seed)."""
    rng = np.random.default_rng(12345)
    boot = np.median(rng.choice(x, size=(10000, x.size), replace=True), axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return np.median(x), lo, hi


def main(paths):
    serve, off, diff = [], [], []
    for p in paths:
        a, b = load(p), load(p + ".offline")
        for i in sorted(set(a) & set(b)):
            serve.append(a[i])
            off.append(b[i])
            diff.append(a[i] - b[i])
    if not diff:
        sys.exit("ttft_pair: no paired samples")
    serve, off, diff = (np.array(x) * 1e3 for x in (serve, off, diff))
    med, lo, hi = median_ci(diff)
    print(f"{diff.size} paired requests from {len(paths)} runs")
    print(f"TTFT median: serve {np.median(serve):.2f} ms, offline {np.median(off):.2f} ms")
    print(f"serve - offline, per request: median {med:+.2f} ms, 95% CI [{lo:+.2f}, {hi:+.2f}] ms "
          f"(bootstrap, 10000 resamples); mean {diff.mean():+.2f} ms; p10 {np.percentile(diff, 10):+.2f}, "
          f"p90 {np.percentile(diff, 90):+.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
