#!/usr/bin/python3
"""Checks tools/ref/quant.py against PyTorch, where PyTorch is installed.

quant.py models torch's casts and the reference's block quantisers from their
documented semantics; this script asks torch itself (CPU) on many inputs:

  - f32 -> bf16, f16 and float8_e4m3fn casts: random bit patterns, every bf16
    value, every e4m3 midpoint and its neighbours, format boundaries;
  - float8_e4m3fn and float8_e8m0fnu -> f32 for every code;
  - the block quantisers, computed here with torch tensors the way the
    reference's kernel module describes them (f32 amax, clamp_min, scalar
    reciprocal multiply or division, the exponent-plus-mantissa ceil,
    clamp, dtype cast, bucketize with ties to even) on random rows.

    python3 tools/ref/check_quant.py      (exit 0: all agree; 3: no torch)

Not part of the test suite (the CI machines have no torch); run it where
torch exists, e.g. on the accelerator machine, after changing quant.py.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant  # noqa: E402

F32 = np.float32


def inputs(rng):
    parts = [rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32).view(F32),
             (np.arange(65536, dtype=np.uint32) << 16).view(F32)]
    grid = np.sort(np.concatenate([quant._E4M3_VALUES, [0.0]]))
    mids = ((grid[1:] + grid[:-1]) / 2).astype(F32)
    near = np.concatenate([np.nextafter(mids, F32(0)), mids, np.nextafter(mids, F32(1e9))])
    scale = np.ldexp(F32(1), rng.integers(-30, 30, near.size)).astype(F32)
    parts += [near, -near, (near * scale).astype(F32)]
    special = np.array([448, 449, 464, 465, 479.99, 480, 65504, 65519, 65520, 3.4e38, 2**-9, 2**-10,
                        2**-24, 2**-25, 1e-45, 0.0, np.inf], dtype=F32)
    parts += [special, -special, np.array([np.nan], F32)]
    normal = (rng.standard_normal(1_000_000) * 10.0 ** rng.uniform(-10, 10, 1_000_000)).astype(F32)
    parts.append(normal)
    return np.concatenate(parts)


def same(a, b):
    """Equal arrays; floats bit for bit (signed zeros count), any NaN equal
    to any NaN (payloads differ between implementations)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        a32, b32 = a.astype(F32), b.astype(F32)
        nan = np.isnan(a32) & np.isnan(b32)
        return bool(((a32.view(np.uint32) == b32.view(np.uint32)) | nan).all())
    return np.array_equal(a.astype(np.int64), b.astype(np.int64))


def report(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else "  " + detail))
    return ok


def first_diff(x, a, b):
    idx = np.nonzero(np.asarray(a) != np.asarray(b))[0]
    if idx.size == 0:
        return ""
    i = idx[0]
    return "first at input %r (0x%08x): quant.py %r, torch %r (%d differ)" % (
        float(x[i]), int(x.view(np.uint32)[i]), a[i], b[i], idx.size)


# --- the reference's block quantisers, in torch ---------------------------------------------

def t_ceil_code(ratio):
    """Exponent field of the f32 ratio, plus one when the mantissa is not zero."""
    import torch
    bits = ratio.contiguous().view(torch.int32)
    return ((bits >> 23) & 255) + ((bits & 0x7FFFFF) != 0).int()


def t_e8m0_value(code):
    import torch
    return code.to(torch.uint8).view(torch.float8_e8m0fnu).float()


def t_fp8_act(x, block):
    import torch
    b = x.unflatten(-1, (-1, block))
    amax = b.abs().amax(-1).clamp_min(1e-4)
    code = t_ceil_code(amax * (1 / 448))
    s = t_e8m0_value(code)[..., None]
    q = (b / s).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.view(torch.uint8).flatten(), code.to(torch.uint8), (q.float() * s).flatten()


def t_e2m1_codes(v):
    import torch
    a = v.abs().clamp_max(6)
    mids = torch.tensor([.25, .75, 1.25, 1.75, 2.5, 3.5, 5.0])
    idx = torch.bucketize(a, mids)  # number of midpoints strictly below a
    at_mid = (idx < 7) & (a == mids[idx.clamp_max(6)])
    idx = idx + (at_mid & (idx % 2 == 1)).long()  # an odd index is an odd code: go up to even
    return idx | (torch.signbit(v).long() << 3)


def t_fp4(x, block, e4m3_scale):
    import torch
    b = x.unflatten(-1, (-1, block))
    if e4m3_scale:
        sc = (b.abs().amax(-1).clamp_min(6 * 2**-9) / 6).to(torch.float8_e4m3fn)
        s = sc.float()[..., None]
        code = sc.view(torch.uint8)
    else:
        c = t_ceil_code(b.abs().amax(-1).clamp_min(6 * 2**-126) * (1 / 6))
        s = t_e8m0_value(c)[..., None]
        code = c.to(torch.uint8)
    codes = t_e2m1_codes((b / s).clamp(-6, 6))
    values = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])[codes]
    flat = codes.flatten()
    packed = (flat[0::2] | (flat[1::2] << 4)).to(torch.uint8)
    return packed, code, (values * s).flatten()


def main():
    try:
        import torch
    except ImportError:
        print("check_quant.py: torch is not installed here")
        return 3
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
    x = inputs(rng)
    t = torch.from_numpy(x.copy())
    ok = True
    with np.errstate(all="ignore"):
        finite_or_inf = ~np.isnan(x)
        mine = quant.bf16_encode(x)[finite_or_inf]
        ref = t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)[finite_or_inf]
        ok &= report("bf16 cast", np.array_equal(mine, ref), first_diff(x[finite_or_inf], mine, ref))
        mine = quant.f16_encode(x)[finite_or_inf]
        ref = t.to(torch.float16).view(torch.int16).numpy().view(np.uint16)[finite_or_inf]
        ok &= report("f16 cast", np.array_equal(mine, ref), first_diff(x[finite_or_inf], mine, ref))
        mine = quant.e4m3_encode(x)
        ref = t.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
        ok &= report("e4m3 cast (NaN and inf included)", np.array_equal(mine, ref), first_diff(x, mine, ref))
        codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
        ok &= report("e4m3 decode", same(quant.e4m3_decode(np.arange(256)),
                                         codes.view(torch.float8_e4m3fn).float().numpy()))
        ok &= report("e8m0 decode", same(quant.e8m0_decode(np.arange(256)),
                                         codes.view(torch.float8_e8m0fnu).float().numpy()))
        pos = np.abs(x[np.isfinite(x)])
        mine = quant.e8m0_ceil(pos)
        ref = t_ceil_code(torch.from_numpy(pos.copy())).clamp_max(255).numpy().astype(np.uint8)
        ok &= report("e8m0 ceil", np.array_equal(mine, ref), first_diff(pos, mine, ref))
        clipped = np.clip(x[~np.isnan(x)], F32(-6), F32(6))
        mine = quant.e2m1_encode(clipped)
        ref = t_e2m1_codes(torch.from_numpy(clipped.copy())).numpy().astype(np.uint8)
        ok &= report("e2m1 encode", np.array_equal(mine, ref), first_diff(clipped, mine, ref))
        # torch's scalar arithmetic: f32 tensor * python float rounds the scalar to f32 first
        a = np.abs(normal_row(rng, 1 << 16))
        ok &= report("f32 * (1/448) as in torch", same(a * F32(1 / 448), (torch.from_numpy(a) * (1 / 448)).numpy()))
        ok &= report("f32 / 6 as in torch", same(a / F32(6), (torch.from_numpy(a) / 6).numpy()))

        for trial in range(4):
            row = mixed_row(rng, 1 << 16)
            tr = torch.from_numpy(row.copy())
            for name, mine, ref in (
                    ("fp8 act 32", quant.fp8_act(row, 32), t_fp8_act(tr, 32)),
                    ("fp8 act 128", quant.fp8_act(row, 128), t_fp8_act(tr, 128)),
                    ("fp4 e8m0 32", quant.fp4_e8m0(row, 32), t_fp4(tr, 32, False)),
                    ("fp4 e4m3 16", quant.fp4_e4m3(row, 16), t_fp4(tr, 16, True))):
                good = True
                for part, m, r in zip(("codes", "scales", "values"), mine, ref):
                    if not same(m, r.numpy()):
                        print("   %s: %s differ" % (name, part))
                        good = False
                ok &= report("%s (row %d)" % (name, trial), good)
    print("all agree" if ok else "DIFFERENCES")
    return 0 if ok else 1


def normal_row(rng, n):
    return (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)).astype(F32)


def mixed_row(rng, n):
    """Blocks of 32 with one magnitude each, some constant, some with exact
    e4m3 / e2m1 ties at a power-of-two scale, some tiny, some with outliers."""
    row = np.empty(n, F32)
    mids4 = ((quant._E4M3_VALUES[1:-1] + quant._E4M3_VALUES[:-2]) / 2)
    mids2 = np.array([.25, .75, 1.25, 1.75, 2.5, 3.5, 5.0])
    for i in range(0, n, 32):
        kind = rng.integers(0, 6)
        k = int(rng.integers(-20, 20))
        sign = np.where(rng.random(32) < 0.5, -1.0, 1.0)
        if kind == 0:
            blk = rng.standard_normal(32) * 10.0 ** rng.uniform(-8, 6)
        elif kind == 1:
            blk = np.full(32, rng.standard_normal() * 10.0 ** rng.uniform(-6, 4))
        elif kind == 2:
            blk = sign * np.ldexp(rng.choice(mids4, 32), k)
            blk[rng.integers(0, 32)] = np.ldexp(448.0, k)
        elif kind == 3:
            blk = sign * np.ldexp(rng.choice(mids2, 32), k)
            blk[rng.integers(0, 16)] = np.ldexp(6.0, k)
            blk[16 + rng.integers(0, 16)] = np.ldexp(6.0, k)
        elif kind == 4:
            blk = rng.standard_normal(32) * 10.0 ** rng.uniform(-44, -30)
        else:
            blk = rng.standard_normal(32) * 1e-3
            blk[rng.integers(0, 32)] = rng.standard_normal() * 1e4
        row[i:i + 32] = blk.astype(F32)
    return row


if __name__ == "__main__":
    sys.exit(main())
