#!/usr/bin/env python3
"""Writes the small synthetic traces tide bench route is tested and measured
on (tests/data/route/): one in the Mooncake format (JSONL: timestamp ms,
input_length, output_length, hash_ids of 512-token blocks) and one in the
Azure LLM inference format (CSV: TIMESTAMP,ContextTokens,GeneratedTokens).

The Mooncake trace is multi-turn conversations: each starts from one of a
few shared system prompts, and each next turn repeats the previous turn's
prompt and answer, then adds the new message, so its hash ids start with the
previous turn's. Prompt lengths span the four default buckets (most under
16K, a few over 256K). Deterministic (fixed seed).

Usage: synth_traces.py OUT_DIR [--conversations N] [--seconds S]"""
import argparse
import math
import random

BLOCK = 512


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--conversations", type=int, default=160)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=17)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    next_id = [0]

    def fresh(n):
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return ids

    systems = [fresh(rng.randint(2, 8)) for _ in range(6)]
    reqs = []
    for _ in range(a.conversations):
        t = rng.uniform(0, a.seconds * 0.8)
        ids = list(rng.choice(systems))
        # the first message: mostly short, a few documents of 16K..300K tokens
        u = rng.random()
        first = (rng.randint(1, 20) if u < 0.80 else rng.randint(32, 120) if u < 0.93
                 else rng.randint(130, 480) if u < 0.99 else rng.randint(520, 600))
        ids += fresh(first)
        for _turn in range(rng.randint(1, 6)):
            in_len = len(ids) * BLOCK - rng.randint(0, BLOCK - 1)
            out_len = int(min(2000, max(8, rng.lognormvariate(math.log(250), 0.8))))
            reqs.append((t, in_len, out_len, list(ids)))
            # the answer and the next message join the history
            ids += fresh(max(1, (out_len + BLOCK - 1) // BLOCK) + rng.randint(0, 3))
            t += rng.uniform(5, 40)
    reqs.sort(key=lambda r: r[0])
    t0 = reqs[0][0]
    with open(f"{a.out}/mooncake_synth.jsonl", "w") as f:
        for t, i, o, ids in reqs:
            f.write('{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}\n'
                    % (round((t - t0) * 1000), i, o, ", ".join(map(str, ids))))
    # Azure: the same arrival process and lengths, absolute timestamps, no hashes
    with open(f"{a.out}/azure_synth.csv", "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for t, i, o, _ in reqs:
            s = 1700158546.0 + (t - t0)  # 2023-11-16 18:15:46 UTC
            whole = int(s)
            frac = int(round((s - whole) * 1e7))
            if frac == 10**7:
                whole, frac = whole + 1, 0
            hh, mm, ss = (whole // 3600) % 24, (whole // 60) % 60, whole % 60
            day = 16 + (whole - 1700092800) // 86400
            f.write("2023-11-%02d %02d:%02d:%02d.%07d,%d,%d\n" % (day, hh, mm, ss, frac, i, o))


if __name__ == "__main__":
    main()
