"""The array namespace the baseline model is written against: numpy or torch.

The model in tools/torch_ref/model.py calls only the functions below (plus
operators, slicing, .reshape and .shape, which numpy arrays and torch tensors
share), so one model source runs on numpy (testable on any machine, compared
with the numpy oracle tools/ref/) and on torch (the GPU baseline).

Value conventions, the same on both backends:
  "bf16" activations: numpy holds float32 arrays of bf16 values (rounded with
         tools/ref/numerics.bf16); torch holds torch.bfloat16 tensors.
  f32:   float32 on both.
  GEMMs: linear() takes bf16 x and bf16 w and returns bf16 (fp32 accumulation);
         linear_f32() is a float32 product. numpy multiplies in float64 and
         rounds once (as the oracle); torch uses cuBLAS (fp32 accumulation), so
         the two agree to a float32 rounding before the bf16 one.
  top-k: topk_idx() breaks ties toward the lower index on numpy (the oracle's
         rule); torch does the same when stable_topk is set (a stable sort,
         used by the self-test) and otherwise calls torch.topk (the bench).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import numerics as nx  # noqa: E402

F32 = np.float32
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


class NumpyXP:
    """numpy backend: float32 arrays, bf16 rounding by the oracle's function."""

    name = "numpy"

    def __init__(self):
        self.stable_topk = True

    # ---- conversion and creation
    def bf(self, x):
        return nx.bf16(x)

    def f32(self, x):
        return np.asarray(x, dtype=F32)

    def from_np(self, a, kind):
        """Host numpy array -> backend array of kind bf16 | f32 | u8 | i64 | bool."""
        a = np.asarray(a)
        if kind == "bf16":
            return nx.bf16(a.astype(F32))
        return a.astype({"f32": F32, "u8": np.uint8, "i64": np.int64, "bool": bool}[kind])

    def to_np(self, x):
        return np.asarray(x)

    def tolist(self, x):
        return np.asarray(x).tolist()

    def zeros(self, shape, kind="f32"):
        return np.zeros(shape, dtype={"f32": F32, "bf16": F32, "bool": bool, "i64": np.int64}[kind])

    def full(self, shape, value, kind="f32"):
        return np.full(shape, value, dtype={"f32": F32, "bf16": F32, "i64": np.int64}[kind])

    def arange(self, n):
        return np.arange(n, dtype=np.int64)

    # ---- products
    def linear(self, x, w):
        """bf16 x [.., k] @ bf16 w [n, k]^T -> bf16 [.., n]."""
        y = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T
        return nx.bf16(y.astype(F32))

    def qlinear(self, x, w):
        """linear() for a weight stored as FP8/FP4: the oracle's GEMM order (float64
        product per 32-wide K block, rounded to float32, blocks summed in float32),
        which equals its fp8/fp4 GEMM when x holds fp8-simulated values."""
        x = np.asarray(x, F32)
        k = x.shape[-1]
        x64 = x.reshape(-1, k).astype(np.float64)
        w64 = np.asarray(w, np.float64)
        acc = np.zeros((x64.shape[0], w64.shape[0]), F32)
        for lo in range(0, k, 32):
            acc += (x64[:, lo:lo + 32] @ w64[:, lo:lo + 32].T).astype(F32)
        return nx.bf16(acc).reshape(x.shape[:-1] + (w64.shape[0],))

    def linear_f32(self, x, w):
        y = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T
        return y.astype(F32)

    def matmul(self, a, b):
        """Batched product; result float32 (caller rounds with bf() where the model does)."""
        return np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)).astype(F32)

    def einsum(self, eq, a, b):
        return np.einsum(eq, np.asarray(a, np.float64), np.asarray(b, np.float64)).astype(F32)

    # ---- elementwise (float32)
    def exp(self, x):
        return np.exp(x)

    def sqrt(self, x):
        return np.sqrt(x)

    def rsqrt(self, x):
        return F32(1) / np.sqrt(x)

    def sigmoid(self, x):
        return nx.sigmoid(x)

    def softplus(self, x):
        return nx.softplus(x)

    def silu(self, x):
        with np.errstate(over="ignore"):
            return (x / (F32(1) + np.exp(-x))).astype(F32)

    def copysign(self, a, b):
        return np.copysign(a, b).astype(F32)

    def where(self, c, a, b):
        return np.where(c, a, b)

    def maximum(self, a, b):
        return np.maximum(a, b)

    def minimum(self, a, b):
        return np.minimum(a, b)

    def clip(self, x, lo, hi):
        return np.clip(x, lo, hi).astype(x.dtype)

    # ---- reductions
    def amax(self, x, axis, keepdims=False):
        return np.max(x, axis=axis, keepdims=keepdims)

    def sum(self, x, axis, keepdims=False):
        return np.sum(x, axis=axis, keepdims=keepdims, dtype=F32)

    def sum_wide(self, x, axis):
        """float32 values summed in float64, rounded once to float32 (the oracle's
        softmax denominator): the result does not depend on where zeros sit."""
        return np.sum(x, axis=axis, dtype=np.float64).astype(F32)

    def mean(self, x, axis, keepdims=False):
        return np.mean(x, axis=axis, keepdims=keepdims, dtype=F32)

    def sum_bf(self, x, axis):
        """bf16 sum over a (short) axis, accumulated in float32 in index order."""
        x = np.moveaxis(np.asarray(x, F32), axis, 0)
        acc = x[0].copy()
        for k in range(1, x.shape[0]):
            acc = acc + x[k]
        return nx.bf16(acc)

    # ---- shape and indexing
    def cat(self, xs, axis):
        return np.concatenate(xs, axis)

    def stack(self, xs, axis):
        return np.stack(xs, axis)

    def repeat(self, x, n, axis):
        return np.repeat(x, n, axis)

    def swap_last(self, x):
        return np.swapaxes(x, -1, -2)

    def take_along(self, x, idx, axis):
        return np.take_along_axis(x, idx, axis)

    def scatter_last(self, base, idx, vals):
        out = base.copy()
        np.put_along_axis(out, idx, vals, -1)
        return out

    def index_add(self, y, rows, v):
        y[rows] += v  # rows are unique within one call
        return y

    def topk_idx(self, x, k):
        return nx.topk_lowest_ties(x, k)

    def sort(self, x):
        return np.sort(x, -1)

    def argsort_stable(self, x):
        return np.argsort(x, kind="stable")

    def bincount(self, x, n):
        return np.bincount(np.asarray(x).reshape(-1), minlength=n).tolist()

    # ---- number formats
    def fp8_sim(self, x, block=32):
        return nx.fp8_act_sim(x, block)

    def fp4_sim_e8m0(self, x, block=32):
        return nx.fp4_sim_e8m0(x, block)

    def fp4_sim_e4m3(self, x, block=16):
        return nx.fp4_sim_e4m3(x, block)

    def e4m3_decode(self, codes):
        return nx.e4m3_decode(codes)

    def e8m0_decode(self, codes):
        return nx.e8m0_value(codes)

    def fp4_dequant(self, packed, scale):
        """packed [.., out, in/2] u8 (low nibble even) and e8m0 scale codes [.., out, in/32]
        -> bf16 values [.., out, in]."""
        v = nx.fp4_decode(nx.unpack_fp4(packed, packed.shape[-1] * 2))
        s = nx.e8m0_value(scale)
        sh = v.shape
        return (v.reshape(sh[:-1] + (sh[-1] // 32, 32)) * s[..., None]).reshape(sh).astype(F32)

    def quant_fp4(self, w):
        """f32 [.., out, in] -> (packed FP4 u8 [.., out, in/2], e8m0 codes u8 [.., out, in/32])."""
        sh = w.shape
        q, s = nx.quant_fp4_weight(np.asarray(w, F32).reshape(-1, sh[-1]))
        return q.reshape(sh[:-1] + (sh[-1] // 2,)), s.reshape(sh[:-1] + (sh[-1] // 32,))

    def quant_fp8_rows(self, x):
        """f32 [rows, n] -> (e4m3 codes u8, e8m0 codes u8 [rows, n/32]) per 32 values."""
        q, s = nx.fp8_act_quant(x, 32)
        return nx.e4m3_encode(q), nx.e8m0_ceil_code(s).astype(np.uint8)

    def rope_cs(self, inv_freq, pos):
        """cos, sin [len(pos), rd/2] of float32 angles pos * inv_freq (oracle's rule)."""
        import model as refmodel  # tools/ref/model.py
        return refmodel.rope_cos_sin(inv_freq, np.asarray(pos, np.int64))


class TorchXP:
    """torch backend on one device; bf16 activations as torch.bfloat16."""

    name = "torch"

    def __init__(self, device="cuda", stable_topk=False):
        import torch
        self.t = torch
        self.dev = torch.device(device)
        self.stable_topk = stable_topk
        torch.set_float32_matmul_precision("highest")  # float32 GEMMs stay float32 (no TF32)
        self._dt = {"bf16": torch.bfloat16, "f32": torch.float32, "u8": torch.uint8, "i64": torch.int64,
                    "bool": torch.bool}
        grid = torch.tensor(_E2M1, dtype=torch.float32)
        b = torch.arange(256)
        # one packed byte -> its two values (low nibble first)
        self._lut2 = torch.stack([grid[b & 15], grid[b >> 4]], -1).to(self.dev, torch.bfloat16)
        self._mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=self.dev)
        self._grid = grid[:8].to(self.dev)

    # ---- conversion and creation
    def bf(self, x):
        return x.to(self.t.bfloat16)

    def f32(self, x):
        return x.to(self.t.float32)

    def from_np(self, a, kind):
        a = np.ascontiguousarray(a)
        if kind == "bf16":
            return self.t.from_numpy(a.astype(F32)).to(self.dev).to(self.t.bfloat16)
        conv = {"f32": F32, "u8": np.uint8, "i64": np.int64, "bool": bool}[kind]
        return self.t.from_numpy(a.astype(conv)).to(self.dev)

    def to_np(self, x):
        if x.dtype == self.t.bfloat16:
            x = x.float()
        return x.cpu().numpy()

    def tolist(self, x):
        return x.tolist()

    def zeros(self, shape, kind="f32"):
        return self.t.zeros(shape, dtype=self._dt[kind], device=self.dev)

    def full(self, shape, value, kind="f32"):
        return self.t.full(shape, value, dtype=self._dt[kind], device=self.dev)

    def arange(self, n):
        return self.t.arange(n, device=self.dev)

    # ---- products
    def linear(self, x, w):
        return self.t.nn.functional.linear(x, w)

    def qlinear(self, x, w):
        return self.t.nn.functional.linear(x, w)

    def linear_f32(self, x, w):
        return self.t.nn.functional.linear(x.float(), w.float())

    def matmul(self, a, b):
        return self.t.matmul(a, b)

    def einsum(self, eq, a, b):
        return self.t.einsum(eq, a, b)

    # ---- elementwise
    def exp(self, x):
        return self.t.exp(x)

    def sqrt(self, x):
        return self.t.sqrt(x)

    def rsqrt(self, x):
        return self.t.rsqrt(x)

    def sigmoid(self, x):
        return self.t.sigmoid(x)

    def softplus(self, x):
        return self.t.nn.functional.softplus(x)

    def silu(self, x):
        return self.t.nn.functional.silu(x)

    def copysign(self, a, b):
        return self.t.copysign(a, b)

    def where(self, c, a, b):
        return self.t.where(c, a, b)

    def maximum(self, a, b):
        if not isinstance(b, self.t.Tensor):
            return self.t.clamp(a, min=b)
        return self.t.maximum(a, b)

    def minimum(self, a, b):
        if not isinstance(b, self.t.Tensor):
            return self.t.clamp(a, max=b)
        return self.t.minimum(a, b)

    def clip(self, x, lo, hi):
        return self.t.clamp(x, lo, hi)

    # ---- reductions
    def amax(self, x, axis, keepdims=False):
        return self.t.amax(x, dim=axis, keepdim=keepdims)

    def sum(self, x, axis, keepdims=False):
        return self.t.sum(x.float(), dim=axis, keepdim=keepdims)

    def sum_wide(self, x, axis):
        return self.t.sum(x.double(), dim=axis).float()

    def mean(self, x, axis, keepdims=False):
        return self.t.mean(x.float(), dim=axis, keepdim=keepdims)

    def sum_bf(self, x, axis):
        return self.t.sum(x, dim=axis)  # bf16 in: fp32 accumulation, one rounding

    # ---- shape and indexing
    def cat(self, xs, axis):
        return self.t.cat(xs, axis)

    def stack(self, xs, axis):
        return self.t.stack(xs, axis)

    def repeat(self, x, n, axis):
        return self.t.repeat_interleave(x, n, dim=axis)

    def swap_last(self, x):
        return x.transpose(-1, -2)

    def take_along(self, x, idx, axis):
        return self.t.take_along_dim(x, idx, dim=axis)

    def scatter_last(self, base, idx, vals):
        return base.scatter(-1, idx, vals)

    def index_add(self, y, rows, v):
        return y.index_add_(0, rows, v)

    def topk_idx(self, x, k):
        if self.stable_topk:
            return self.t.sort(x, dim=-1, descending=True, stable=True).indices[..., :k]
        return self.t.topk(x, k, dim=-1).indices

    def sort(self, x):
        return self.t.sort(x, dim=-1).values

    def argsort_stable(self, x):
        return self.t.argsort(x, stable=True)

    def bincount(self, x, n):
        return self.t.bincount(x.reshape(-1), minlength=n).tolist()

    # ---- number formats
    def _code(self, r):
        """int32 e8m0 code of the smallest power of two >= r (float32, r >= 2^-126)."""
        m, e = self.t.frexp(r)  # r = m * 2^e, 0.5 <= m < 1
        return self.t.where(m == 0.5, e - 1, e).to(self.t.int32) + 127

    def _pow2(self, code):
        """2^(code-127) as float32, built from its bits (exact; codes 1..254)."""
        return (code.to(self.t.int32) << 23).view(self.t.float32)

    def _pow2_ceil(self, r):
        return self._pow2(self._code(r))

    def _blocks(self, x, block):
        x = x.float()
        return x.reshape(x.shape[:-1] + (x.shape[-1] // block, block))

    def fp8_sim(self, x, block=32):
        b = self._blocks(x, block)
        amax = b.abs().amax(-1, keepdim=True).clamp_min(1e-4)
        s = self._pow2_ceil(amax * (1.0 / 448.0))
        q = (b / s).clamp(-448, 448).to(self.t.float8_e4m3fn).float()
        return (q * s).reshape(x.shape).to(self.t.bfloat16)

    def _e2m1_round(self, v):
        """Nearest e2m1 value of v in [-6, 6], ties to the even code."""
        a = v.abs()
        i = self.t.bucketize(a, self._mids)  # mids[i-1] < a <= mids[i]
        tie = (i < 7) & (a == self._mids[i.clamp(max=6)])
        i = i + (tie & (i % 2 == 1)).long()
        return self.t.copysign(self._grid[i], v)

    def fp4_sim_e8m0(self, x, block=32):
        b = self._blocks(x, block)
        amax = b.abs().amax(-1, keepdim=True).clamp_min(6 * 2.0 ** -126)
        s = self._pow2_ceil(amax * (1.0 / 6.0))
        return (self._e2m1_round((b / s).clamp(-6, 6)) * s).reshape(x.shape).to(self.t.bfloat16)

    def fp4_sim_e4m3(self, x, block=16):
        b = self._blocks(x, block)
        amax = b.abs().amax(-1, keepdim=True).clamp_min(6 * 2.0 ** -9)
        s = (amax / 6).to(self.t.float8_e4m3fn).float()
        return (self._e2m1_round((b / s).clamp(-6, 6)) * s).reshape(x.shape).to(self.t.bfloat16)

    def quant_fp4(self, w):
        b = self._blocks(w, 32)
        amax = b.abs().amax(-1, keepdim=True).clamp_min(6 * 2.0 ** -126)
        code = self._code(amax * (1.0 / 6.0))
        v = (b / self._pow2(code)).clamp(-6, 6)
        a = v.abs()
        i = self.t.bucketize(a, self._mids)
        tie = (i < 7) & (a == self._mids[i.clamp(max=6)])
        i = i + (tie & (i % 2 == 1)).long()
        c = (i | (self.t.signbit(v).long() << 3)).to(self.t.uint8).reshape(w.shape)
        return c[..., 0::2] | (c[..., 1::2] << 4), code.squeeze(-1).to(self.t.uint8)

    def quant_fp8_rows(self, x):
        b = self._blocks(x, 32)
        amax = b.abs().amax(-1, keepdim=True).clamp_min(1e-4)
        code = self._code(amax * (1.0 / 448.0))
        q = (b / self._pow2(code)).clamp(-448, 448).to(self.t.float8_e4m3fn)
        return q.view(self.t.uint8).reshape(x.shape), code.squeeze(-1).to(self.t.uint8)

    def e4m3_decode(self, codes):
        return codes.view(self.t.float8_e4m3fn).float()

    def e8m0_decode(self, codes):
        c = codes.to(self.t.int32)
        v = self._pow2(c.clamp(1, 254))
        v = self.t.where(c == 0, 2.0 ** -127, v)
        return self.t.where(c == 255, float("nan"), v)

    def fp4_dequant(self, packed, scale):
        v = self._lut2[packed.int()]  # [.., out, in/2, 2]
        sh = packed.shape[:-1] + (packed.shape[-1] * 2,)
        v = v.reshape(sh[:-1] + (sh[-1] // 32, 32))
        v.mul_(self.e8m0_decode(scale).to(self.t.bfloat16).unsqueeze(-1))  # exact: powers of two
        return v.reshape(sh)

    def rope_cs(self, inv_freq, pos):
        f = self.t.from_numpy(np.asarray(inv_freq, F32)).to(self.dev)
        p = self.t.from_numpy(np.asarray(pos, np.int64)).to(self.dev).float()
        ang = p[:, None] * f[None, :]
        return self.t.cos(ang), self.t.sin(ang)


def get(backend, device="cuda", stable_topk=False):
    if backend == "numpy":
        return NumpyXP()
    if backend == "torch":
        return TorchXP(device, stable_topk)
    raise ValueError(f"unknown backend {backend!r} (numpy | torch)")
