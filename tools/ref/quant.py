#!/usr/bin/python3
"""Independent numpy model of tide's number formats and block quantisers.

Written from the reference's semantics (torch's dtype casts and the release's
kernel module), not from tide's C: where the C works on bit patterns, this
works on values. Every rounding is "nearest representable value, ties to the
even code", found by enumerating the format's values or by exact float64
arithmetic on scaled values.

    /usr/bin/python3 tools/ref/quant.py INPUT.f32 OUTDIR ROWS COLS

reads ROWS*COLS little-endian f32 values and writes into OUTDIR, as raw
little-endian arrays:
    bf16.u16 f16.u16          the 16-bit casts of every value
    e4m3.u8                   the float8_e4m3fn cast of every value
    e2m1.u8                   the e2m1 code of every value clamped to +-6
    e8m0.u8                   the ue8m0 ceil code of every |value|
    dec_e4m3.f32 dec_e8m0.f32 dec_e2m1.f32   the value of every code
    fp8a32.{q,s,d} fp8a128.{q,s,d}   fp8 activation quantisation (codes,
                              scales, dequantised f32), blocks of 32 / 128
    fp4e8.{q,s,d}             fp4, blocks of 32, e8m0 scales (q packed)
    fp4e4.{q,s,d}             fp4, blocks of 16, e4m3 scales (q packed)
    w8.{q,s,d}                fp8 weight [ROWS][COLS], 32x32 e8m0 blocks
    w4.{q,s,d}                fp4 weight [ROWS][COLS/2], e8m0 per 32 of a row
The activation quantisers see the input as one row of ROWS*COLS values
(which must be a multiple of 128); the weight ones as a [ROWS][COLS] matrix
(COLS a multiple of 32). Inputs must be finite.
"""
import os
import sys

import numpy as np

F32 = np.float32


# ---------------------------------------------------------------- formats

def _e4m3_positive_grid():
    """(values, codes) of the non-negative e4m3fn values in increasing order,
    from the format's definition: bias 7, 3 mantissa bits, exponent field 0
    denormal, and 0x7f (exponent 15, mantissa 7) NaN. The grid is extended by
    the value 0x7f would have (480): torch's cast rounds onto that extended
    grid, so whatever lands on 480 comes out as the NaN pattern."""
    values, codes = [], []
    for e in range(16):
        for m in range(8):
            if e == 0:
                v = (m / 8.0) * 2.0 ** (1 - 7)
            else:
                v = (1.0 + m / 8.0) * 2.0 ** (e - 7)
            values.append(v)
            codes.append((e << 3) | m)
    return np.array(values), np.array(codes, dtype=np.int64)


_E4M3_VALUES, _E4M3_CODES = _e4m3_positive_grid()
_E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
_E2M1_CODES = np.arange(8, dtype=np.int64)


def _nearest_even(a, grid, codes):
    """Code of the grid value nearest to each a (float64, >= 0, within the
    grid's span); at an exact tie the even code wins."""
    hi_i = np.searchsorted(grid, a, side="left").clip(0, len(grid) - 1)
    lo_i = np.where(grid[hi_i] > a, hi_i - 1, hi_i).clip(0)
    lo, hi = grid[lo_i], grid[hi_i]
    d_lo, d_hi = a - lo, hi - a  # exact: operands are short binary fractions
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (codes[hi_i] % 2 == 0) & (hi_i != lo_i))
    return np.where(pick_hi, codes[hi_i], codes[lo_i])


def e4m3_encode(x):
    """float8_e4m3fn cast: nearest value with ties to even, NaN beyond the
    largest finite value's rounding range (no infinities, no saturation)."""
    x = np.asarray(x, dtype=F32)
    a = np.abs(x.astype(np.float64))
    finite = np.isfinite(a) & (a < 480.0)
    code = _nearest_even(np.where(finite, a, 0.0), _E4M3_VALUES, _E4M3_CODES)
    code = np.where(finite, code, 0x7F)
    return (code | (np.signbit(x).astype(np.int64) << 7)).astype(np.uint8)


def e4m3_decode(codes):
    table = np.empty(256, dtype=F32)
    for c in range(256):
        e, m = (c >> 3) & 15, c & 7
        if (c & 0x7F) == 0x7F:
            v = np.nan
        elif e == 0:
            v = (m / 8.0) * 2.0 ** -6
        else:
            v = (1.0 + m / 8.0) * 2.0 ** (e - 7)
        table[c] = -v if c & 0x80 else v
    return table[np.asarray(codes, dtype=np.int64)]


def e2m1_encode(x):
    """Code of x (already within [-6, 6]): nearest of 0 .5 1 1.5 2 3 4 6,
    ties to the even code, sign bit 3 taken from x's sign (so -0 -> 8)."""
    x = np.asarray(x, dtype=F32)
    a = np.abs(x.astype(np.float64))
    code = _nearest_even(np.minimum(a, 6.0), _E2M1_VALUES, _E2M1_CODES)
    return (code | (np.signbit(x).astype(np.int64) << 3)).astype(np.uint8)


def e2m1_decode(codes):
    c = np.asarray(codes, dtype=np.int64)
    v = _E2M1_VALUES[c & 7].astype(F32)
    return np.where((c & 8) != 0, -v, v).astype(F32)


def e8m0_decode(codes):
    c = np.asarray(codes, dtype=np.int64)
    v = np.ldexp(1.0, c - 127).astype(F32)  # 2^-127 is an f32 denormal: exact
    return np.where(c == 255, np.nan, v).astype(F32)


def e8m0_ceil(ratio):
    """Code of the reference's scale for a positive f32 ratio: the smallest
    power of two >= ratio for normal ratios; an f32-denormal ratio gets
    2^-126 (the reference looks at the f32 exponent field, which is 0 there,
    plus one for the non-zero mantissa); zero gets code 0."""
    r = np.abs(np.asarray(ratio, dtype=F32).astype(np.float64))
    m, e = np.frexp(r)  # r = m * 2^e, 0.5 <= m < 1
    k = np.where(m == 0.5, e - 1, e)  # exact power of two: itself
    code = k + 127
    code = np.where(r < 2.0 ** -126, 1, code)
    code = np.where(r == 0.0, 0, code)
    code = np.where(np.isfinite(r), np.minimum(code, 255), 255)
    return code.astype(np.uint8)


def bf16_encode(x):
    """Nearest bf16 (8 significant bits), ties to even, by exact float64
    arithmetic on the value scaled to integer steps; overflow to infinity
    past the halfway point above the largest bf16; NaN made quiet."""
    x = np.asarray(x, dtype=F32)
    a = np.abs(x.astype(np.float64))
    finite = np.isfinite(a)
    safe = np.where(finite & (a > 0), a, 1.0)
    _, e = np.frexp(safe)  # safe in [2^(e-1), 2^e)
    step = np.ldexp(1.0, np.maximum(e - 1, -126) - 7)
    q = np.where(finite, a, 0.0) / step  # exact: a power-of-two division
    lo = np.floor(q)
    frac = q - lo
    up = (frac > 0.5) | ((frac == 0.5) & (lo % 2 == 1))
    val = (lo + up) * step
    val = np.where(val >= 2.0 ** 128, np.inf, val)
    val = np.where(finite, val, a)
    bits = val.astype(F32).view(np.uint32) >> 16
    bits = bits | (np.signbit(x).astype(np.uint32) << 15)
    nan_bits = (x.view(np.uint32) >> 16) | 0x40
    return np.where(np.isnan(x), nan_bits, bits).astype(np.uint16)


def f16_encode(x):
    return np.asarray(x, dtype=F32).astype(np.float16).view(np.uint16)


# ---------------------------------------------------------------- quantisers

def fp8_act(x, block):
    b = np.asarray(x, dtype=F32).reshape(-1, block)
    amax = np.maximum(np.abs(b).max(axis=1), F32(1e-4))
    sc = e8m0_ceil(amax * F32(1.0 / 448.0))
    s = e8m0_decode(sc)[:, None]
    q = e4m3_encode(np.clip(b / s, F32(-448), F32(448)))
    d = e4m3_decode(q) * s
    return q.reshape(-1), sc, d.reshape(-1).astype(F32)


def _pack(codes):
    c = codes.reshape(-1)
    return (c[0::2] | (c[1::2] << 4)).astype(np.uint8)


def fp4_e8m0(x, block=32):
    b = np.asarray(x, dtype=F32).reshape(-1, block)
    amax = np.maximum(np.abs(b).max(axis=1), F32(6 * 2.0 ** -126))
    sc = e8m0_ceil(amax * F32(1.0 / 6.0))
    s = e8m0_decode(sc)[:, None]
    codes = e2m1_encode(np.clip(b / s, F32(-6), F32(6)))
    d = e2m1_decode(codes) * s
    return _pack(codes), sc, d.reshape(-1).astype(F32)


def fp4_e4m3(x, block=16):
    b = np.asarray(x, dtype=F32).reshape(-1, block)
    amax = np.maximum(np.abs(b).max(axis=1), F32(6 * 2.0 ** -9))
    sc = e4m3_encode(amax / F32(6))  # f32 division, then the cast
    s = e4m3_decode(sc)[:, None]
    codes = e2m1_encode(np.clip(b / s, F32(-6), F32(6)))  # true f32 division
    d = e2m1_decode(codes) * s
    return _pack(codes), sc, d.reshape(-1).astype(F32)


def fp8_weight(w):
    w = np.asarray(w, dtype=F32)
    rows, cols = w.shape
    br, bc = -(-rows // 32), -(-cols // 32)
    q = np.empty(w.shape, np.uint8)
    sc = np.empty((br, bc), np.uint8)
    d = np.empty(w.shape, F32)
    for i in range(br):
        for j in range(bc):
            blk = w[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32]
            code = e8m0_ceil(np.abs(blk).max() * F32(1.0 / 448.0))
            s = e8m0_decode(code)
            qb = e4m3_encode(np.clip(blk / s, F32(-448), F32(448)))
            q[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32] = qb
            d[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32] = e4m3_decode(qb) * s
            sc[i, j] = code
    return q.reshape(-1), sc.reshape(-1), d.reshape(-1)


def fp4_weight(w):
    w = np.asarray(w, dtype=F32)
    q, sc, d = fp4_e8m0(w.reshape(-1), 32)  # rows are whole 32-blocks
    return q, sc, d


# ---------------------------------------------------------------- driver

def main(argv):
    if len(argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    src, out, rows, cols = argv[1], argv[2], int(argv[3]), int(argv[4])
    x = np.fromfile(src, dtype="<f4")
    if x.size != rows * cols or x.size % 128 or cols % 32 or not np.isfinite(x).all():
        sys.stderr.write("quant.py: need ROWS*COLS finite values, a multiple of 128, COLS % 32 == 0\n")
        return 2
    os.makedirs(out, exist_ok=True)

    def put(name, arr, dtype):
        np.asarray(arr).astype(dtype).tofile(os.path.join(out, name))

    with np.errstate(over="ignore", invalid="ignore"):
        put("bf16.u16", bf16_encode(x), "<u2")
        put("f16.u16", f16_encode(x), "<u2")
        put("e4m3.u8", e4m3_encode(x), "u1")
        put("e2m1.u8", e2m1_encode(np.clip(x, F32(-6), F32(6))), "u1")
        put("e8m0.u8", e8m0_ceil(np.abs(x)), "u1")
        put("dec_e4m3.f32", e4m3_decode(np.arange(256)), "<f4")
        put("dec_e8m0.f32", e8m0_decode(np.arange(256)), "<f4")
        put("dec_e2m1.f32", e2m1_decode(np.arange(16)), "<f4")
        for name, (q, s, d) in (("fp8a32", fp8_act(x, 32)), ("fp8a128", fp8_act(x, 128)),
                                ("fp4e8", fp4_e8m0(x, 32)), ("fp4e4", fp4_e4m3(x, 16)),
                                ("w8", fp8_weight(x.reshape(rows, cols))),
                                ("w4", fp4_weight(x.reshape(rows, cols)))):
            put(name + ".q", q, "u1")
            put(name + ".s", s, "u1")
            put(name + ".d", d, "<f4")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
