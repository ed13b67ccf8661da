/* FP8 activation block quantisation, as the reference does before every FP8
 * or FP4 GEMM (blocks of 32) and on the window KV (blocks of 32 over the whole
 * post-RoPE vector):
 *
 *   amax  = max |x| over the block, at least 1e-4 (f32)
 *   scale = ue8m0 ceil of amax * (1/448)   (the reciprocal is an f32 constant
 *           and the product is rounded to f32 before the exponent is taken)
 *   q     = e4m3(clamp(x / scale, -448, 448))
 *
 * The scale is a power of two, so x / scale equals x times the exact inverse
 * power of two; the loops use the multiplication. A NaN anywhere in a block
 * makes amax NaN (the integer maximum puts NaN above infinity, like torch's
 * amax), hence a NaN scale and a NaN block: the reference would stop on its
 * assertion there instead. A trailing partial block (n not a multiple of
 * block) is quantised on its own; block 0 does nothing. */
#include "num/num.h"
#include "num/num_inline.h"
#include "num/quant_util.h"

static inline uint8_t scale_code(const float *x, size_t n) {
    uint32_t amax = tide_amax_bits(x, n);
    amax = tide_sel(amax < 0x38d1b717u, 0x38d1b717u, amax); /* 1e-4f; NaN stays */
    return tide_e8m0_ceil_inl(tide_bitsf(amax) * (1.0f / 448.0f));
}

static inline uint32_t code_of(float x, float inv) {
    return tide_e4m3_enc(tide_clamp_nan(x * inv, TIDE_BITS_448));
}

static inline float sim_of(float x, float inv, float s) {
    return tide_e4m3_round_clamped(tide_clamp_nan(x * inv, TIDE_BITS_448)) * s;
}

/* Every block's scale code first, then the values: the scale of a block is
 * a long chain of dependent scalar steps, and computing a run of them
 * back to back lets the processor overlap the chains (about a quarter faster
 * on blocks of 32 than one block at a time). */
static void scale_codes(const float *x, size_t n, size_t block, uint8_t *codes) {
    for (size_t b = 0, i0 = 0; i0 < n; b++, i0 += block)
        codes[b] = scale_code(x + i0, TIDE_BLOCK_LEN(n, i0, block));
}

static void quant_block(const float *x, size_t len, uint8_t code, uint8_t *q) {
    float inv = tide_e8m0_inv(code);
    uint32_t t[TIDE_CHUNK];
    size_t i = 0;
    for (; i + TIDE_CHUNK <= len; i += TIDE_CHUNK) {
        for (size_t k = 0; k < TIDE_CHUNK; k++) t[k] = code_of(x[i + k], inv);
        for (size_t k = 0; k < TIDE_CHUNK; k++) q[i + k] = (uint8_t)t[k];
    }
    for (; i < len; i++) q[i] = (uint8_t)code_of(x[i], inv);
}

static void sim_block(float *x, size_t len, uint8_t code) {
    float inv = tide_e8m0_inv(code), s = tide_e8m0_dec(code);
    size_t i = 0;
    for (; i + TIDE_CHUNK <= len; i += TIDE_CHUNK)
        for (size_t k = 0; k < TIDE_CHUNK; k++) x[i + k] = sim_of(x[i + k], inv, s);
    for (; i < len; i++) x[i] = sim_of(x[i], inv, s);
}

static void dequant_block(const uint8_t *q, uint8_t scale, size_t len, float *dst) {
    float s = tide_e8m0_dec(scale);
    uint32_t t[TIDE_CHUNK];
    size_t i = 0;
    for (; i + TIDE_CHUNK <= len; i += TIDE_CHUNK) {
        for (size_t k = 0; k < TIDE_CHUNK; k++) t[k] = q[i + k];
        for (size_t k = 0; k < TIDE_CHUNK; k++) dst[i + k] = tide_e4m3_dec((uint8_t)t[k]) * s;
    }
    for (; i < len; i++) dst[i] = tide_e4m3_dec(q[i]) * s;
}

void tide_quant_fp8_act(const float *x, size_t n, size_t block, uint8_t *q, uint8_t *scale) {
    if (block == 0) return;
    scale_codes(x, n, block, scale);
    for (size_t i0 = 0; i0 < n; i0 += block)
        quant_block(x + i0, TIDE_BLOCK_LEN(n, i0, block), scale[i0 / block], q + i0);
}

void tide_sim_fp8_act(float *x, size_t n, size_t block) {
    if (block == 0) return;
    uint8_t codes[TIDE_GROUP];
    size_t span = tide_group_span(n, block);
    for (size_t g0 = 0; g0 < n; g0 += span) {
        size_t gn = n - g0 < span ? n - g0 : span;
        scale_codes(x + g0, gn, block, codes);
        for (size_t i0 = 0; i0 < gn; i0 += block)
            sim_block(x + g0 + i0, TIDE_BLOCK_LEN(gn, i0, block), codes[i0 / block]);
    }
}

void tide_dequant_fp8_act(const uint8_t *q, const uint8_t *scale, size_t n, size_t block, float *dst) {
    if (block == 0) return;
    for (size_t i0 = 0; i0 < n; i0 += block)
        dequant_block(q + i0, scale[i0 / block], TIDE_BLOCK_LEN(n, i0, block), dst + i0);
}
