/* Weight formats of the checkpoint, and their quantisers for writing
 * synthetic checkpoints.
 *
 *  FP8 (dense linears, shared experts): e4m3 weight [out][in] with one ue8m0
 *  scale per 32x32 block, scale [ceil(out/32)][ceil(in/32)]; edge blocks are
 *  partial. The quantiser picks each block's scale the way the reference
 *  picks activation scales, the ue8m0 ceil of amax * (1/448) (f32), without
 *  the 1e-4 floor (an all-zero block gets code 0, 2^-127), so that every
 *  x / scale fits e4m3 and dequant(quant(w)) is w rounded to that grid.
 *
 *  FP4 (routed experts): e2m1 weight [out][in/2] bytes, even element in the
 *  low nibble, with one ue8m0 scale per 32 values of a row, scale
 *  [out][in/32]. The quantiser is the e8m0 FP4 activation quantiser applied
 *  row by row. `in` is a multiple of 32 in every checkpoint; for other values
 *  a row holds ceil(in/2) bytes and ceil(in/32) scales. */
#include "num/num.h"
#include "num/num_inline.h"

#define WBLOCK 32

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

void tide_dequant_fp8_weight(const uint8_t *w, const uint8_t *scale, size_t out, size_t in, float *dst) {
    size_t scols = ceil_div(in, WBLOCK);
    for (size_t r = 0; r < out; r++) {
        const uint8_t *srow = scale + (r / WBLOCK) * scols;
        for (size_t c0 = 0; c0 < in; c0 += WBLOCK) {
            size_t c1 = c0 + WBLOCK < in ? c0 + WBLOCK : in;
            float s = tide_e8m0_dec(srow[c0 / WBLOCK]);
            for (size_t c = c0; c < c1; c++) dst[r * in + c] = tide_e4m3_dec(w[r * in + c]) * s;
        }
    }
}

/* max |x| over rows [r0, r1) and columns [c0, c1), as f32 bits (see
 * quant_fp8.c for why integers). */
static uint32_t block_amax_bits(const float *src, size_t in, size_t r0, size_t r1, size_t c0, size_t c1) {
    uint32_t m = 0;
    for (size_t r = r0; r < r1; r++)
        for (size_t c = c0; c < c1; c++) {
            uint32_t a = tide_fbits(src[r * in + c]) & TIDE_F32_ABS;
            m = a > m ? a : m;
        }
    return m;
}

void tide_quant_fp8_weight(const float *src, size_t out, size_t in, uint8_t *w, uint8_t *scale) {
    size_t scols = ceil_div(in, WBLOCK);
    for (size_t r0 = 0; r0 < out; r0 += WBLOCK) {
        size_t r1 = r0 + WBLOCK < out ? r0 + WBLOCK : out;
        for (size_t c0 = 0; c0 < in; c0 += WBLOCK) {
            size_t c1 = c0 + WBLOCK < in ? c0 + WBLOCK : in;
            float amax = tide_bitsf(block_amax_bits(src, in, r0, r1, c0, c1));
            uint8_t code = tide_e8m0_ceil_inl(amax * (1.0f / 448.0f));
            float inv = tide_e8m0_inv(code);
            scale[(r0 / WBLOCK) * scols + c0 / WBLOCK] = code;
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++)
                    w[r * in + c] = tide_e4m3_enc(tide_clamp_nan(src[r * in + c] * inv, TIDE_BITS_448));
        }
    }
}

void tide_dequant_fp4_weight(const uint8_t *w, const uint8_t *scale, size_t out, size_t in, float *dst) {
    size_t rb = ceil_div(in, 2), rs = ceil_div(in, WBLOCK);
    for (size_t r = 0; r < out; r++) tide_dequant_fp4_e8m0(w + r * rb, scale + r * rs, in, WBLOCK, dst + r * in);
}

void tide_quant_fp4_weight(const float *src, size_t out, size_t in, uint8_t *w, uint8_t *scale) {
    size_t rb = ceil_div(in, 2), rs = ceil_div(in, WBLOCK);
    for (size_t r = 0; r < out; r++) tide_quant_fp4_e8m0(src + r * in, in, WBLOCK, w + r * rb, scale + r * rs);
}
