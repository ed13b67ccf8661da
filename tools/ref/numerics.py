"""Number formats and the reference's in-graph quantisation, in numpy.

Everything here works on float32 arrays (float32 holding bf16 / fp8 / fp4
values after rounding) and mirrors the official kernel semantics:

  bf16      round-to-nearest-even from float32 (bit arithmetic on uint32).
  e4m3fn    fp8, bias 7, max 448, subnormals down to 2^-9, RNE; a value that
            rounds above 448 becomes NaN (no saturation in torch's cast).
  e8m0      a bare exponent: 2^(code-127).
  e2m1      fp4 grid 0, .5, 1, 1.5, 2, 3, 4, 6 with sign; RNE at midpoints.

Activation quantisation (all along the last axis):
  fp8_act     blocks of 32, amax >= 1e-4, scale = ue8m0 "ceil" of amax*(1/448)
  fp4 e8m0    blocks of 32, amax >= 6*2^-126, scale = ue8m0 ceil of amax*(1/6)
  fp4 e4m3    blocks of 16, scale = e4m3(max(amax, 6*2^-9) / 6)

GEMMs: fp8 and fp4 weights take an fp8-quantised activation; the product is
accumulated in float32 one 32-wide K block at a time, each block's partial sum
scaled by the activation's and the weight's scales, and the result rounded to
bf16 (torch's default dtype in the reference). bf16 weights are a plain matmul
rounded to bf16; float32 weights a float32 matmul.

Independent of tools/ref/quant.py and of the C num layer on purpose.
"""
import math

import numpy as np

F32 = np.float32

# ---------------------------------------------------------------- bf16


def bf16(x):
    """Round float32 values to bf16 (RNE), returned as float32."""
    a = np.ascontiguousarray(np.asarray(x, dtype=F32))
    u = a.view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    out = np.where(np.isnan(a), a, rounded.view(F32))
    return out.astype(F32, copy=False)


def bf16_from_bits(bits):
    """uint16 bf16 codes -> float32."""
    return (np.asarray(bits, dtype=np.uint32) << np.uint32(16)).view(F32)


def bf16_to_bits(x):
    return (bf16(x).view(np.uint32) >> np.uint32(16)).astype(np.uint16)


# ---------------------------------------------------------------- e8m0


def e8m0_value(codes):
    """e8m0 codes -> float32 powers of two (0xff -> NaN)."""
    c = np.asarray(codes).astype(np.int64)
    v = np.ldexp(np.float64(1.0), c - 127).astype(F32)
    return np.where(c == 255, np.float32(np.nan), v).astype(F32)


def e8m0_ceil_code(ratio):
    """The reference's scale rounding: exponent bits of the float32 ratio, plus
    one when its mantissa is not zero (the smallest power of two >= ratio)."""
    r = np.ascontiguousarray(np.asarray(ratio, dtype=F32))
    bits = r.view(np.uint32)
    code = ((bits >> np.uint32(23)) & np.uint32(255)).astype(np.int64)
    code += ((bits & np.uint32(0x7FFFFF)) != 0).astype(np.int64)
    return code


def ue8m0_scale(amax, inverse):
    """Power-of-two scale for a block: ceil2(amax * float32(inverse))."""
    ratio = np.asarray(amax, dtype=F32) * F32(inverse)
    code = e8m0_ceil_code(ratio)
    if np.any(code >= 255) or np.any(code < 0):
        raise ValueError("ue8m0 scale out of range")
    return e8m0_value(code), code


# ---------------------------------------------------------------- e4m3fn


def e4m3(x):
    """Round float32 to float8_e4m3fn (RNE), returned as float32; NaN above 448."""
    x = np.asarray(x, dtype=F32)
    ax = np.abs(x).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, ex = np.frexp(ax)  # ax = m * 2^ex, m in [0.5, 1)
    e = np.maximum(ex.astype(np.int64) - 1, -6)  # subnormals share the 2^-6 binade quantum
    quantum = np.ldexp(1.0, e - 3)
    q = np.round(ax / quantum) * quantum  # exact scaling, np.round is half-to-even
    q = np.where(ax == 0, 0.0, q)
    q = np.where(q > 448.0, np.nan, q)
    q = np.where(np.isnan(ax), np.nan, q)
    return np.copysign(q, x).astype(F32)


def e4m3_decode(codes):
    """uint8 e4m3fn codes -> float32."""
    c = np.asarray(codes).astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    exp = (c >> 3) & 15
    man = c & 7
    val = np.where(exp == 0, np.ldexp(man / 8.0, -6), np.ldexp(1.0 + man / 8.0, exp - 7))
    val = np.where((c & 0x7F) == 0x7F, np.nan, val)
    return (sign * val).astype(F32)


def e4m3_encode(x):
    """float32 -> uint8 e4m3fn codes (rounding first); NaN -> 0x7f."""
    v = e4m3(x)
    positive = e4m3_decode(np.arange(127))  # codes 0..126 increase with their value
    code = np.searchsorted(positive, np.abs(v)).clip(0, 126).astype(np.uint8)
    code = np.where(np.signbit(v), code | np.uint8(0x80), code).astype(np.uint8)
    return np.where(np.isnan(v), np.uint8(0x7F), code).astype(np.uint8)


# ---------------------------------------------------------------- e2m1

FP4_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=F32)
_FP4_MID = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=F32)
FP4_VALUES = np.concatenate([FP4_GRID, -FP4_GRID]).astype(F32)  # code bit 3 = sign


def fp4_codes(x):
    """float32 in [-6, 6] -> e2m1 codes (0..15), round half to even."""
    x = np.asarray(x, dtype=F32)
    v = np.minimum(np.abs(x), F32(6))
    idx = np.searchsorted(_FP4_MID, v, side="left")  # mid[i-1] < v <= mid[i]
    tie = (idx < 7) & (v == _FP4_MID[np.minimum(idx, 6)])
    idx = idx + (tie & ((idx & 1) != 0))  # a tie picks the even code
    return (idx | (np.signbit(x).astype(np.int64) << 3)).astype(np.uint8)


def fp4_decode(codes):
    return FP4_VALUES[np.asarray(codes).astype(np.int64)]


def unpack_fp4(packed, n):
    """[.., n/2] bytes (low nibble = even element) -> [.., n] codes."""
    p = np.asarray(packed, dtype=np.uint8)
    out = np.stack([p & 15, p >> 4], axis=-1).reshape(p.shape[:-1] + (p.shape[-1] * 2,))
    return out[..., :n]


def pack_fp4(codes):
    c = np.asarray(codes, dtype=np.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


# ---------------------------------------------------------------- activation simulations


def _blocks(x, block):
    x = np.asarray(x, dtype=F32)
    if x.shape[-1] % block:
        raise ValueError(f"last axis {x.shape[-1]} is not a multiple of block {block}")
    return x.reshape(x.shape[:-1] + (x.shape[-1] // block, block))


def fp8_act_quant(x, block=32):
    """-> (q values as float32 e4m3 numbers, scales float32 [.., n/block])."""
    b = _blocks(x, block)
    amax = np.maximum(np.abs(b).max(-1), F32(1e-4))
    scale, _ = ue8m0_scale(amax, 1.0 / 448.0)
    q = e4m3(np.clip(b / scale[..., None], -448, 448))
    return q.reshape(np.shape(x)), scale


def fp8_act_sim(x, block=32):
    """Quantise-dequantise (values stay float32; exact in bf16)."""
    q, s = fp8_act_quant(x, block)
    qb = q.reshape(q.shape[:-1] + (q.shape[-1] // block, block))
    return (qb * s[..., None]).reshape(q.shape).astype(F32)


def fp4_sim_e8m0(x, block=32):
    b = _blocks(x, block)
    amax = np.maximum(np.abs(b).max(-1), F32(6 * 2.0 ** -126))
    scale, _ = ue8m0_scale(amax, 1.0 / 6.0)
    codes = fp4_codes(np.clip(b / scale[..., None], -6, 6))
    return (fp4_decode(codes) * scale[..., None]).reshape(np.shape(x)).astype(F32)


def fp4_sim_e4m3(x, block=16):
    b = _blocks(x, block)
    amax = np.maximum(np.abs(b).max(-1), F32(6 * 2.0 ** -9))
    scale = e4m3(amax / F32(6))
    codes = fp4_codes(np.clip(b / scale[..., None], -6, 6))
    return (fp4_decode(codes) * scale[..., None]).reshape(np.shape(x)).astype(F32)


# ---------------------------------------------------------------- weights and GEMMs


class Weight:
    """A linear weight in its stored form. fmt: 'fp8' (codes [out,in] + e8m0 scale
    [ceil(out/32), ceil(in/32)]), 'fp4' (packed [out,in/2] + scale [out,in/32]),
    'bf16' or 'f32' (values float32)."""

    def __init__(self, fmt, data, scale=None, shape=None):
        self.fmt = fmt
        self.data = data
        self.scale = scale
        if fmt == "fp8":
            self.shape = data.shape
        elif fmt == "fp4":
            self.shape = (data.shape[0], data.shape[1] * 2) if shape is None else tuple(shape)
        else:
            self.shape = data.shape
        self._deq = None
        self._raw64 = None
        self._bs = None

    def dequant(self):
        """Weight values as float32 [out, in] (scales applied)."""
        if self._deq is None:
            out, inn = self.shape
            if self.fmt == "fp8":
                v = e4m3_decode(self.data)
                s = e8m0_value(self.scale)
                s = np.repeat(np.repeat(s, 32, 0), 32, 1)[:out, :inn]
                self._deq = (v * s).astype(F32)
            elif self.fmt == "fp4":
                v = fp4_decode(unpack_fp4(self.data, inn))
                s = np.repeat(e8m0_value(self.scale), 32, 1)[:, :inn]
                self._deq = (v * s).astype(F32)
            else:
                self._deq = np.asarray(self.data, dtype=F32)
        return self._deq

    def raw64(self):
        """raw_values() as float64, cached (the GEMM's hot input)."""
        if self._raw64 is None:
            self._raw64 = self.raw_values().astype(np.float64)
        return self._raw64

    def raw_values(self):
        """Unscaled element values (e4m3 / e2m1 numbers) as float32 [out, in]."""
        out, inn = self.shape
        if self.fmt == "fp8":
            return e4m3_decode(self.data)
        if self.fmt == "fp4":
            return fp4_decode(unpack_fp4(self.data, inn))
        raise ValueError("raw_values on an unquantised weight")

    def block_scales(self):
        """Per-(row, K block of 32) weight scale, float32 [out, in/32], cached."""
        if self._bs is None:
            out, inn = self.shape
            s = e8m0_value(self.scale)
            self._bs = np.repeat(s, 32, 0)[:out, : (inn + 31) // 32] if self.fmt == "fp8" else s
        return self._bs


def quant_gemm(x, w):
    """The reference's fp8_gemm / fp4_gemm on an fp8-quantised activation.
    x: [.., k] float32 (bf16 values); w: Weight fmt fp8 or fp4. -> bf16 values."""
    shape = np.shape(x)
    k = shape[-1]
    out_n = w.shape[0]
    a = np.asarray(x, dtype=F32).reshape(-1, k)
    q, sa = fp8_act_quant(a, 32)
    vals = w.raw64()
    sb = w.block_scales()
    acc = np.zeros((a.shape[0], out_n), dtype=F32)
    q64 = q.astype(np.float64)
    for blk in range(k // 32):
        lo = blk * 32
        partial = (q64[:, lo:lo + 32] @ vals[:, lo:lo + 32].T).astype(F32)
        acc += (partial * sa[:, blk, None]) * sb[None, :, blk]
    return bf16(acc).reshape(shape[:-1] + (out_n,))


def linear(x, w):
    """The reference's linear(): picks the GEMM from the weight's format.
    bf16 weights: bf16 x bf16 with float32 accumulation, rounded to bf16.
    f32 weights: float32 matmul (the caller passes float32 x)."""
    if w.fmt in ("fp8", "fp4"):
        return quant_gemm(x, w)
    x = np.asarray(x, dtype=F32)
    y = (x.reshape(-1, x.shape[-1]).astype(np.float64) @ w.dequant().T.astype(np.float64)).astype(F32)
    y = y.reshape(x.shape[:-1] + (w.shape[0],))
    return bf16(y) if w.fmt == "bf16" else y


# ---------------------------------------------------------------- weight quantisation (for writers)


def quant_fp8_weight(w):
    """float [out, in] -> (e4m3 codes, e8m0 codes [ceil(out/32), ceil(in/32)])."""
    w = np.asarray(w, dtype=F32)
    out, inn = w.shape
    po, pi = -out % 32, -inn % 32
    wp = np.pad(w, ((0, po), (0, pi)))
    b = wp.reshape((out + po) // 32, 32, (inn + pi) // 32, 32)
    amax = np.maximum(np.abs(b).max(axis=(1, 3)), F32(1e-4))
    scale, code = ue8m0_scale(amax, 1.0 / 448.0)
    s = np.repeat(np.repeat(scale, 32, 0), 32, 1)
    q = e4m3(np.clip(wp / s, -448, 448))[:out, :inn]
    return e4m3_encode(q), code.astype(np.uint8)


def quant_fp4_weight(w):
    """float [out, in] -> (packed [out, in/2], e8m0 codes [out, in/32])."""
    w = np.asarray(w, dtype=F32)
    out, inn = w.shape
    b = w.reshape(out, inn // 32, 32)
    amax = np.maximum(np.abs(b).max(-1), F32(6 * 2.0 ** -126))
    scale, code = ue8m0_scale(amax, 1.0 / 6.0)
    codes = fp4_codes(np.clip(b / scale[..., None], -6, 6)).reshape(out, inn)
    return pack_fp4(codes), code.astype(np.uint8)


# ---------------------------------------------------------------- small float32 helpers


def rmsnorm(x, w, eps):
    """RMSNorm as the reference: float32 statistics, times the (bf16) weight,
    cast back to the input's dtype -- here always bf16."""
    x = np.asarray(x, dtype=F32)
    var = np.mean(np.square(x), axis=-1, keepdims=True, dtype=F32)
    y = x * (F32(1) / np.sqrt(var + F32(eps)))
    return bf16(np.asarray(w, dtype=F32) * y)


def sigmoid(x):
    x = np.asarray(x, dtype=F32)
    return (F32(1) / (F32(1) + np.exp(-x))).astype(F32)


_softplus64 = np.frompyfunc(lambda v: math.log1p(math.exp(v)), 1, 1)


def softplus(x):
    """torch.nn.functional.softplus with beta 1, threshold 20 (x > 20 -> x).

    Below the threshold tide's rule: log1p(exp(x)) evaluated in float64 by
    the C library (math.exp, math.log1p; the engine's CPU backend calls the
    same exp/log1p) and rounded once to float32. numpy's float32 log1p goes
    through SVML on AVX512 machines and differs from glibc's log1pf on a few
    percent of inputs, so a float32 rule could not be matched bit for bit."""
    x = np.asarray(x, dtype=F32)
    lo = np.minimum(x, F32(20)).astype(np.float64)  # exp(20) is finite; those lanes are replaced
    y = np.asarray(_softplus64(lo), dtype=np.float64).astype(F32) if x.size else np.zeros_like(x)
    return np.where(x > 20, x, y).astype(F32)


def topk_lowest_ties(score, k):
    """Indices of the k largest values along the last axis; equal values are
    ordered by LOWER index first (tide's tie rule). Sorted by score desc."""
    s = np.asarray(score)
    n = s.shape[-1]
    order = np.argsort(-s.astype(np.float64), axis=-1, kind="stable")
    return order[..., :min(k, n)]
