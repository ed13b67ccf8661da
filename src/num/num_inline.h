/* Inline building blocks of the number formats, for loops that convert whole
 * rows (the quantisers here, and any backend loop that wants them inlined).
 * num.h has the same operations as plain functions; these are the branch-free
 * forms, written so that compilers can vectorise the loops that use them.
 *
 * Every rounding below is round-to-nearest-even, done one of two ways:
 *  - on the bits of the f32: add 0b0111..1 plus the lowest kept bit, then
 *    drop the low bits (a carry into the exponent is the right answer);
 *  - for denormal ranges, by adding a power of two whose ulp is the target
 *    format's smallest step, so the FPU itself rounds (ties to even), then
 *    subtracting it again (exact).
 * This relies on f32 arithmetic in round-to-nearest mode without excess
 * precision, which is what x86-64 and AArch64 give a C17 build; never
 * compile it with -ffast-math (it would fold (x + c) - c to x).
 *
 * Selections are integer masks (tide_sel) and clamps work on the bits: with
 * gcc's default -ftrapping-math a `?:` between float results becomes a
 * branch that the vectoriser gives up on; the masks keep the loops straight. */
#ifndef TIDE_NUM_NUM_INLINE_H
#define TIDE_NUM_NUM_INLINE_H

#include <stdint.h>
#include <string.h>

static inline uint32_t tide_fbits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static inline float tide_bitsf(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* cond ? a : b for cond in {0, 1}, without a branch. */
static inline uint32_t tide_sel(uint32_t cond, uint32_t a, uint32_t b) {
    uint32_t m = 0u - cond;
    return (a & m) | (b & ~m);
}

/* a > b for magnitudes (both <= 0x7fffffff), compared as signed integers:
 * SSE2 has a signed 32-bit compare but no unsigned one. */
static inline uint32_t tide_gt(uint32_t a, uint32_t b) { return (int32_t)a > (int32_t)b; }

#define TIDE_F32_SIGN 0x80000000u
#define TIDE_F32_ABS 0x7fffffffu
#define TIDE_F32_INF 0x7f800000u
#define TIDE_F32_QNAN 0x7fc00000u

/* ---- bf16 ---- */

/* bf16 bits of x, RNE; a NaN keeps its sign and top payload and is made quiet
 * (so it cannot round into an infinity). */
static inline uint16_t tide_bf16_enc(float x) {
    uint32_t u = tide_fbits(x);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)tide_sel(tide_gt(u & TIDE_F32_ABS, TIDE_F32_INF), nan, rounded);
}

static inline float tide_bf16_dec(uint16_t h) { return tide_bitsf((uint32_t)h << 16); }

/* ---- e4m3fn ---- */

/* x rounded onto the e4m3 grid and returned as f32, for |x| <= 448 (the
 * quantisers clamp first) or NaN (kept). Normal range: keep 3 mantissa bits.
 * Below 2^-6 the grid step is 2^-9, the ulp of floats in [2^14, 2^15). */
static inline float tide_e4m3_round_clamped(float x) {
    uint32_t u = tide_fbits(x), sign = u & TIDE_F32_SIGN, a = u & TIDE_F32_ABS;
    uint32_t normal = (a + 0x7ffffu + ((a >> 20) & 1u)) & 0xfff00000u;
    float fa = tide_bitsf(a);
    uint32_t denormal = tide_fbits((fa + 16384.0f) - 16384.0f);
    uint32_t r = tide_sel(tide_gt(0x3c800000u, a), denormal, normal); /* 0x3c800000 = 2^-6 */
    r = tide_sel(tide_gt(a, TIDE_F32_INF), a, r);
    return tide_bitsf(r | sign);
}

/* The e4m3 code of x, with torch's float8_e4m3fn cast semantics: RNE with
 * denormals; magnitudes that round past 448 (above 464), |x| >= 480,
 * infinities and NaN all give the NaN code 0x7f (with x's sign). */
static inline uint8_t tide_e4m3_enc(float x) {
    uint32_t u = tide_fbits(x), a = u & TIDE_F32_ABS;
    uint32_t sign = (u >> 24) & 0x80u;
    /* normal: exponent rebiased from 127 to 7, then 3 mantissa bits kept */
    uint32_t normal = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
    /* denormal: the count of 2^-9 steps lands in the low bits of 2^14 + |x| */
    uint32_t denormal = tide_fbits(tide_bitsf(a) + 16384.0f) - 0x46800000u;
    uint32_t code = tide_sel(tide_gt(0x3c800000u, a), denormal, normal);
    code = tide_sel(tide_gt(a, 0x43efffffu), 0x7fu, code); /* a >= 480 (0x43f00000) */
    return (uint8_t)(code | sign);
}

static inline float tide_e4m3_dec(uint8_t c) {
    uint32_t sign = (uint32_t)(c & 0x80u) << 24, e = (c >> 3) & 15u, m = c & 7u;
    float denormal = (float)(int32_t)m * 0x1p-9f;
    uint32_t normal = ((e + 120u) << 23) | (m << 20);
    uint32_t mag = tide_sel(e == 0, tide_fbits(denormal), normal);
    mag = tide_sel((c & 0x7fu) == 0x7fu, TIDE_F32_QNAN, mag);
    return tide_bitsf(mag | sign);
}

/* ---- e8m0 ---- */

/* 2^(c-127); code 0 is the f32 denormal 2^-127; 0xff is NaN. */
static inline float tide_e8m0_dec(uint8_t c) {
    uint32_t bits = tide_sel(c == 0, 0x00400000u, (uint32_t)c << 23);
    return tide_bitsf(tide_sel(c == 0xff, TIDE_F32_QNAN, bits));
}

/* The reference's scale rounding: the biased exponent of ratio, plus one when
 * any mantissa bit is set. A denormal ratio gives 1 (2^-126), zero gives 0; an
 * infinite or NaN ratio gives the NaN code 0xff. The sign is ignored. */
static inline uint8_t tide_e8m0_ceil_inl(float ratio) {
    uint32_t u = tide_fbits(ratio);
    uint32_t code = ((u >> 23) & 0xffu) + ((u & 0x7fffffu) != 0);
    return (uint8_t)tide_sel(code > 0xffu, 0xffu, code);
}

/* 1 / tide_e8m0_dec(c), exact: both are powers of two inside f32's range
 * (code 254 = 2^127 inverts to the denormal 2^-127). Multiplying by it is
 * bit-identical to dividing by the scale. */
static inline float tide_e8m0_inv(uint8_t c) {
    uint32_t bits = tide_sel(c == 254, 0x00400000u, (uint32_t)(254 - c) << 23);
    return tide_bitsf(tide_sel(c == 0xff, TIDE_F32_QNAN, bits));
}

/* ---- e2m1 ---- */

/* Magnitude code (0..7) of a = |x| <= 6 on the grid 0 .5 1 1.5 2 3 4 6. At a
 * midpoint the even code wins, as the reference's bucketize + tie fix does:
 * .25->0, .75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4. Written as negated
 * comparisons so that a NaN counts as above every midpoint (code 7), like
 * bucketize. */
static inline uint32_t tide_e2m1_mag(float a) {
    return (uint32_t)!(a <= 0.25f) + (uint32_t)!(a < 0.75f) + (uint32_t)!(a <= 1.25f) +
           (uint32_t)!(a < 1.75f) + (uint32_t)!(a <= 2.5f) + (uint32_t)!(a < 3.5f) +
           (uint32_t)!(a <= 5.0f);
}

static inline uint8_t tide_e2m1_enc(float x) {
    uint32_t sign = (tide_fbits(x) >> 28) & 8u;
    float a = tide_bitsf(tide_fbits(x) & TIDE_F32_ABS);
    return (uint8_t)(sign | tide_e2m1_mag(a));
}

/* x (|x| <= 6, or NaN) rounded onto the e2m1 grid, as f32: e2m1 is a float
 * with one mantissa bit and minimum normal 1, so [1, 6] keeps one mantissa bit
 * and [0, 1) rounds to steps of .5 (the ulp of floats in [2^22, 2^23)). Equal
 * to the code path above; the tests hold them to each other. NaN becomes 6
 * with its sign, as the code path does. */
static inline float tide_e2m1_round_clamped(float x) {
    uint32_t u = tide_fbits(x), sign = u & TIDE_F32_SIGN, a = u & TIDE_F32_ABS;
    uint32_t normal = (a + 0x1fffffu + ((a >> 22) & 1u)) & 0xffc00000u;
    uint32_t denormal = tide_fbits((tide_bitsf(a) + 4194304.0f) - 4194304.0f);
    uint32_t r = tide_sel(tide_gt(0x3f800000u, a), denormal, normal);
    r = tide_sel(tide_gt(a, TIDE_F32_INF), 0x40c00000u, r); /* 6.0 */
    return tide_bitsf(r | sign);
}

/* Value of an e2m1 code: exponent field e = code bits 2..1, mantissa bit m;
 * e = 0 is the denormal m * 0.5, else (1 + m/2) * 2^(e-1). */
/* The code of x (|x| <= 6, or NaN) by way of tide_e2m1_round_clamped: the
 * rounded magnitude's bits name the code directly (1.0 = 0x3f800000 has
 * bits >> 22 = 254 and code 2, up to 6.0 with 259 and code 7; below 1 only
 * 0.5 is non-zero). Branch-free, for the block loops; the comparison form
 * above serves tide_f32_to_e2m1, and the tests hold the two to each other. */
static inline uint32_t tide_e2m1_enc_rounded(float x) {
    uint32_t u = tide_fbits(tide_e2m1_round_clamped(x)), r = u & TIDE_F32_ABS;
    uint32_t code = tide_sel(tide_gt(r, 0x3f7fffffu), (r >> 22) - 252u, r == 0x3f000000u);
    return code | ((u >> 28) & 8u);
}

static inline float tide_e2m1_dec(uint8_t c) {
    uint32_t sign = (uint32_t)(c & 8u) << 28, e = (c >> 1) & 3u, m = c & 1u;
    uint32_t normal = ((e + 126u) << 23) | (m << 22);
    uint32_t mag = tide_sel(e == 0, m * 0x3f000000u, normal); /* 0x3f000000 = 0.5 */
    return tide_bitsf(mag | sign);
}

/* ---- clamps ---- */

/* Clamp to [-lim, lim] (lim given as the bits of a positive finite f32),
 * keeping NaN as torch.clamp does (fminf would drop it); infinities clamp. */
static inline float tide_clamp_nan(float x, uint32_t lim) {
    uint32_t u = tide_fbits(x), a = u & TIDE_F32_ABS;
    a = tide_sel(tide_gt(a, lim) & !tide_gt(a, TIDE_F32_INF), lim, a);
    return tide_bitsf(a | (u & TIDE_F32_SIGN));
}

#define TIDE_BITS_448 0x43e00000u
#define TIDE_BITS_6 0x40c00000u

#endif
