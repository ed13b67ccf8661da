/* Device-side number formats for the CUDA kernels: the same conversions as
 * src/num (num.h, num_inline.h), written for the GPU and bit-identical to the
 * CPU versions, so that kernels can be tested for exact equality.
 *
 * Every arithmetic step that decides a rounding uses an explicit _rn
 * intrinsic: nvcc contracts a*b+c into one FMA by default, which would round
 * differently from the C17 build (where contraction is off). Denormals are
 * kept (no -ftz / fast-math anywhere in the CUDA build).
 *
 * Private to src/backend/cuda (C++ only; the C ABI is cuda_kernels.h). */
#ifndef TIDE_BACKEND_CUDA_NUM_DEV_CUH
#define TIDE_BACKEND_CUDA_NUM_DEV_CUH

#include <stdint.h>

#define TIDE_DEV_F32_ABS 0x7fffffffu
#define TIDE_DEV_F32_INF 0x7f800000u
#define TIDE_DEV_F32_QNAN 0x7fc00000u
#define TIDE_DEV_BITS_448 0x43e00000u
#define TIDE_DEV_BITS_6 0x40c00000u

/* bf16 bits of x, round-to-nearest-even; NaN stays NaN (sign and top
 * payload kept, made quiet), as tide_bf16_enc. */
__device__ __forceinline__ uint16_t tide_dev_bf16_enc(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & TIDE_DEV_F32_ABS) > TIDE_DEV_F32_INF) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float tide_dev_bf16_dec(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* 2^(c-127); code 0 is the f32 denormal 2^-127; 0xff is NaN. */
__device__ __forceinline__ float tide_dev_e8m0_dec(uint32_t c) {
    if (c == 0xffu) return __uint_as_float(TIDE_DEV_F32_QNAN);
    return __uint_as_float(c == 0 ? 0x00400000u : c << 23);
}

/* 1 / tide_dev_e8m0_dec(c), exact (both powers of two inside f32's range). */
__device__ __forceinline__ float tide_dev_e8m0_inv(uint32_t c) {
    if (c == 0xffu) return __uint_as_float(TIDE_DEV_F32_QNAN);
    return __uint_as_float(c == 254u ? 0x00400000u : (254u - c) << 23);
}

/* The reference's scale rounding: biased exponent of ratio, +1 when any
 * mantissa bit is set; infinity / NaN give 0xff. Sign ignored. */
__device__ __forceinline__ uint32_t tide_dev_e8m0_ceil(float ratio) {
    uint32_t u = __float_as_uint(ratio);
    uint32_t code = ((u >> 23) & 0xffu) + ((u & 0x7fffffu) != 0);
    return code > 0xffu ? 0xffu : code;
}

/* Clamp to [-lim, lim] (lim: bits of a positive finite f32); NaN kept,
 * infinities clamp (torch.clamp). */
__device__ __forceinline__ float tide_dev_clamp_nan(float x, uint32_t lim) {
    uint32_t u = __float_as_uint(x), a = u & TIDE_DEV_F32_ABS;
    if (a > lim && a <= TIDE_DEV_F32_INF) a = lim;
    return __uint_as_float(a | (u & 0x80000000u));
}

/* e4m3fn code of x with torch's cast semantics (RNE, denormals kept, |x| >=
 * 480 (after rounding past 448), inf and NaN give 0x7f with x's sign). */
__device__ __forceinline__ uint32_t tide_dev_e4m3_enc(float x) {
    uint32_t u = __float_as_uint(x), a = u & TIDE_DEV_F32_ABS;
    uint32_t sign = (u >> 24) & 0x80u, code;
    if (a > 0x43efffffu) {
        code = 0x7fu; /* >= 480, inf, NaN */
    } else if (a < 0x3c800000u) {
        /* below 2^-6 the step is 2^-9, the ulp of floats in [2^14, 2^15):
         * adding 2^14 lets the FPU round to it (ties to even) */
        code = __float_as_uint(__fadd_rn(__uint_as_float(a), 16384.0f)) - 0x46800000u;
    } else {
        code = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
    }
    return code | sign;
}

/* tide_e4m3_dec: the value of an e4m3fn code (0x7f / 0xff are NaN). */
__device__ __forceinline__ float tide_dev_e4m3_dec(uint32_t c) {
    uint32_t sign = (c & 0x80u) << 24, e = (c >> 3) & 15u, m = c & 7u;
    uint32_t mag = e == 0 ? __float_as_uint(__fmul_rn((float)m, 0x1p-9f)) : (((e + 120u) << 23) | (m << 20));
    if ((c & 0x7fu) == 0x7fu) mag = TIDE_DEV_F32_QNAN;
    return __uint_as_float(mag | sign);
}

/* tide_e2m1_dec: the value of an e2m1 code (bit 3 the sign). */
__device__ __forceinline__ float tide_dev_e2m1_dec(uint32_t c) {
    uint32_t sign = (c & 8u) << 28, e = (c >> 1) & 3u, m = c & 1u;
    uint32_t mag = e == 0 ? m * 0x3f000000u : (((e + 126u) << 23) | (m << 22));
    return __uint_as_float(mag | sign);
}

/* tide_e2m1_round_clamped: |x| <= 6 (or NaN, which becomes 6 with its sign)
 * rounded onto the e2m1 grid, ties to even. */
__device__ __forceinline__ float tide_dev_e2m1_round_clamped(float x) {
    uint32_t u = __float_as_uint(x), sign = u & 0x80000000u, a = u & TIDE_DEV_F32_ABS, r;
    if (a > TIDE_DEV_F32_INF) r = 0x40c00000u;
    else if (a < 0x3f800000u) r = __float_as_uint(__fsub_rn(__fadd_rn(__uint_as_float(a), 4194304.0f), 4194304.0f));
    else r = (a + 0x1fffffu + ((a >> 22) & 1u)) & 0xffc00000u;
    return __uint_as_float(r | sign);
}

/* tide_e2m1_enc_rounded: the e2m1 code of tide_dev_e2m1_round_clamped(x). */
__device__ __forceinline__ uint32_t tide_dev_e2m1_enc(float x) {
    uint32_t u = __float_as_uint(tide_dev_e2m1_round_clamped(x)), r = u & TIDE_DEV_F32_ABS;
    uint32_t code = r > 0x3f7fffffu ? (r >> 22) - 252u : (uint32_t)(r == 0x3f000000u);
    return code | ((u >> 28) & 8u);
}

/* Stores an mma accumulator pair (columns col, col + 1 of one output row yr
 * of width n) as bf16: one 4-byte store when n is even (pairs) and both
 * columns exist, else each column that exists. Shared by the GEMM
 * epilogues that write mma / wgmma fragments as bf16. */
__device__ __forceinline__ void tide_store_bf16_pair(uint16_t *yr, int64_t col, int64_t n, int pairs, float a,
                                                     float b) {
    uint32_t lo = tide_dev_bf16_enc(a), hi = tide_dev_bf16_enc(b);
    if (pairs && col + 1 < n) {
        *(uint32_t *)(yr + col) = lo | (hi << 16);
    } else {
        if (col < n) yr[col] = (uint16_t)lo;
        if (col + 1 < n) yr[col + 1] = (uint16_t)hi;
    }
}

#endif
