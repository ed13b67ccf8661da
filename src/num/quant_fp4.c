/* FP4 activation block quantisation, the two flavours the reference uses:
 *
 *  e8m0 scales, blocks of 32 (index keys and index queries):
 *    amax  = max |x|, at least 6 * 2^-126
 *    scale = ue8m0 ceil of amax * (1/6)    (f32 reciprocal, f32 product)
 *  e4m3 scales, blocks of 16 (compressed KV latents):
 *    amax  = max |x|, at least 6 * 2^-9
 *    scale = e4m3(amax / 6)                (an f32 division, then the cast)
 *  then for both
 *    q     = e2m1(clamp(x / scale, -6, 6)), round-half-even, sign bit kept.
 *
 * An e4m3 scale is not a power of two, so x / scale is a true f32 division
 * here (a multiplication by a rounded reciprocal would differ in the last bit
 * now and then, and that can move a value across a midpoint).
 * An e4m3 scale can itself be NaN: amax / 6 above 464 (amax > 2784) casts to
 * NaN, as in the reference, and the block becomes NaN.
 *
 * Packing: two codes per byte, the even element in the low nibble; an odd
 * trailing element gets a byte of its own with a zero high nibble. Blocks of
 * odd length are allowed (their codes straddle bytes), but the fast path is
 * for even ones. A trailing partial block is quantised on its own; block 0
 * does nothing.
 */
#include "num/num.h"
#include "num/num_inline.h"
#include "num/quant_util.h"

static inline uint8_t e8m0_scale_code(const float *x, size_t n) {
    uint32_t amax = tide_amax_bits(x, n);
    amax = tide_sel(amax < 0x01c00000u, 0x01c00000u, amax); /* 6 * 2^-126; NaN stays */
    return tide_e8m0_ceil_inl(tide_bitsf(amax) * (1.0f / 6.0f));
}

static inline uint8_t e4m3_scale_code(const float *x, size_t n) {
    uint32_t amax = tide_amax_bits(x, n);
    amax = tide_sel(amax < 0x3c400000u, 0x3c400000u, amax); /* 6 * 2^-9; NaN stays */
    return tide_e4m3_enc(tide_bitsf(amax) / 6.0f);
}

/* x / scale, clamped. The reference divides; for an e8m0 scale (a power of
 * two) the quotient is exact, for an e4m3 one it is the f32 division whose
 * rounding the reference has, so both flavours simply divide. */
static inline float scaled(float x, float s) { return tide_clamp_nan(x / s, TIDE_BITS_6); }

/* Stores code c of element i into the packed row. */
static inline void put_nibble(uint8_t *packed, size_t i, uint8_t c) {
    if (i & 1) packed[i / 2] = (uint8_t)((packed[i / 2] & 0x0f) | (c << 4));
    else packed[i / 2] = c; /* also clears the high nibble of a trailing byte */
}

/* Codes of elements [i0, i0+len) of x: whole bytes through a staging row
 * when the block starts and ends on a byte boundary, nibble by nibble
 * otherwise. */
static inline void codes_block(const float *x, size_t i0, size_t len, float s, uint8_t *packed) {
    size_t i = i0, end = i0 + len;
    if (((i0 | len) & 1) == 0) {
        uint32_t t[TIDE_CHUNK];
        for (; i + TIDE_CHUNK <= end; i += TIDE_CHUNK) {
            for (size_t k = 0; k < TIDE_CHUNK; k++) t[k] = tide_e2m1_enc_rounded(scaled(x[i + k], s));
            for (size_t k = 0; k < TIDE_CHUNK; k += 2) packed[(i + k) / 2] = (uint8_t)(t[k] | (t[k + 1] << 4));
        }
    }
    for (; i < end; i++) put_nibble(packed, i, tide_e2m1_enc(scaled(x[i], s)));
}

/* Every block's scale code first, then the values (see quant_fp8.c). */
static void e8m0_codes(const float *x, size_t n, size_t block, uint8_t *codes) {
    for (size_t b = 0, i0 = 0; i0 < n; b++, i0 += block)
        codes[b] = e8m0_scale_code(x + i0, TIDE_BLOCK_LEN(n, i0, block));
}

static void e4m3_codes(const float *x, size_t n, size_t block, uint8_t *codes) {
    for (size_t b = 0, i0 = 0; i0 < n; b++, i0 += block)
        codes[b] = e4m3_scale_code(x + i0, TIDE_BLOCK_LEN(n, i0, block));
}

void tide_quant_fp4_e8m0(const float *x, size_t n, size_t block, uint8_t *packed, uint8_t *scale) {
    if (block == 0) return;
    e8m0_codes(x, n, block, scale);
    for (size_t i0 = 0; i0 < n; i0 += block)
        codes_block(x, i0, TIDE_BLOCK_LEN(n, i0, block), tide_e8m0_dec(scale[i0 / block]), packed);
}

void tide_quant_fp4_e4m3(const float *x, size_t n, size_t block, uint8_t *packed, uint8_t *scale) {
    if (block == 0) return;
    e4m3_codes(x, n, block, scale);
    for (size_t i0 = 0; i0 < n; i0 += block)
        codes_block(x, i0, TIDE_BLOCK_LEN(n, i0, block), tide_e4m3_dec(scale[i0 / block]), packed);
}

static void sim_block(float *x, size_t len, float s) {
    size_t i = 0;
    for (; i + TIDE_CHUNK <= len; i += TIDE_CHUNK)
        for (size_t k = 0; k < TIDE_CHUNK; k++) x[i + k] = tide_e2m1_round_clamped(scaled(x[i + k], s)) * s;
    for (; i < len; i++) x[i] = tide_e2m1_round_clamped(scaled(x[i], s)) * s;
}

void tide_sim_fp4_e8m0(float *x, size_t n, size_t block) {
    if (block == 0) return;
    uint8_t codes[TIDE_GROUP];
    size_t span = tide_group_span(n, block);
    for (size_t g0 = 0; g0 < n; g0 += span) {
        size_t gn = n - g0 < span ? n - g0 : span;
        e8m0_codes(x + g0, gn, block, codes);
        for (size_t i0 = 0; i0 < gn; i0 += block)
            sim_block(x + g0 + i0, TIDE_BLOCK_LEN(gn, i0, block), tide_e8m0_dec(codes[i0 / block]));
    }
}

void tide_sim_fp4_e4m3(float *x, size_t n, size_t block) {
    if (block == 0) return;
    uint8_t codes[TIDE_GROUP];
    size_t span = tide_group_span(n, block);
    for (size_t g0 = 0; g0 < n; g0 += span) {
        size_t gn = n - g0 < span ? n - g0 : span;
        e4m3_codes(x + g0, gn, block, codes);
        for (size_t i0 = 0; i0 < gn; i0 += block)
            sim_block(x + g0 + i0, TIDE_BLOCK_LEN(gn, i0, block), tide_e4m3_dec(codes[i0 / block]));
    }
}

static inline uint8_t nibble(const uint8_t *packed, size_t i) {
    return (uint8_t)((packed[i / 2] >> ((i & 1) * 4)) & 15u);
}

/* Dequantisation is not on a hot path (the GEMMs read codes directly), so it
 * stays a plain loop. */
void tide_dequant_fp4_e8m0(const uint8_t *packed, const uint8_t *scale, size_t n, size_t block, float *dst) {
    if (block == 0) return;
    for (size_t i = 0; i < n; i++) dst[i] = tide_e2m1_dec(nibble(packed, i)) * tide_e8m0_dec(scale[i / block]);
}

void tide_dequant_fp4_e4m3(const uint8_t *packed, const uint8_t *scale, size_t n, size_t block, float *dst) {
    if (block == 0) return;
    for (size_t i = 0; i < n; i++) dst[i] = tide_e2m1_dec(nibble(packed, i)) * tide_e4m3_dec(scale[i / block]);
}
