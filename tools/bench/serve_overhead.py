#!/usr/bin/python3
"""What `tide serve` adds to the time to first token, per request.

Inputs: the server's stderr run with TIDE_LOG=debug (its lines "serve:
timing ID arrive A engine E first F sse S out O") and the files of `tide bench
serve --ttft-out FILE` (lines "index ttft start first") against it, client
and server on one machine (the times are both CLOCK_MONOTONIC seconds).
Requests are matched by time: the server's request is the one that arrived
between the client's send and its first chunk.

For each request the engine's own TTFT is F - E (from the engine getting the
request to its first token event: what `tide bench offline` measures); the
client's is first - start; the difference is what the server added, split
into: HTTP in (start -> A: the request sent, received and routed), to the
engine (A -> E: parse, render, tokenize, queue, engine-thread wakeup), token
to SSE event (F -> S: detokenize, parse, the chunk's JSON), SSE to
libmicrohttpd (S -> O: the connection resumed and its reader called), and
HTTP out (O -> first: the socket and the client).
Usage: serve_overhead.py SERVE_STDERR TTFT_FILE [TTFT_FILE ...]"""
import sys

import numpy as np

from ttft_pair import median_ci


def main(log, files):
    srv = []
    with open(log) as f:
        for line in f:
            if "serve: timing " not in line:
                continue
            w = line.split("serve: timing ", 1)[1].split()
            srv.append({w[i]: float(w[i + 1]) for i in range(1, len(w) - 1, 2)})
    srv.sort(key=lambda r: r["arrive"])
    cli = []
    for p in files:
        with open(p) as f:
            for line in f:
                w = line.split()
                if len(w) >= 4:
                    cli.append((float(w[2]), float(w[3])))
    rows = []
    for start, first in cli:
        m = [r for r in srv if start <= r["arrive"] <= first]
        if len(m) != 1:
            continue
        r = m[0]
        rows.append((first - start, r["first"] - r["engine"], r["arrive"] - start, r["engine"] - r["arrive"],
                     r["sse"] - r["first"], r["out"] - r["sse"], first - r["out"]))
    if not rows:
        sys.exit("serve_overhead: no request matched")
    a = np.array(rows) * 1e3
    added = a[:, 0] - a[:, 1]
    med, lo, hi = median_ci(added)
    print(f"{added.size} requests matched (of {len(cli)} sent, {len(srv)} logged)")
    print(f"TTFT median: client {np.median(a[:, 0]):.3f} ms, engine's own {np.median(a[:, 1]):.3f} ms")
    print(f"added by the server: median {med:.3f} ms, 95% CI [{lo:.3f}, {hi:.3f}] ms (bootstrap, "
          f"10000 resamples); mean {added.mean():.3f} ms, p90 {np.percentile(added, 90):.3f} ms")
    for i, name in ((2, "HTTP in"), (3, "to the engine"), (4, "token to SSE event"), (5, "SSE to libmicrohttpd"),
                    (6, "HTTP out")):
        print(f"  {name:18s} median {np.median(a[:, i]):.3f} ms, p90 {np.percentile(a[:, i], 90):.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
