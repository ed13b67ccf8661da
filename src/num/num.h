/* Number formats and block quantisation, bit-exact with the official
 * reference's kernel semantics (torch dtypes and the release's kernel module).
 *
 * Formats
 *   bf16      round-to-nearest-even from f32, NaN kept quiet.
 *   e4m3fn    fp8: bias 7, no infinities, 0x7f/0xff are NaN, max 448. Conversion
 *             from f32 follows torch's float8_e4m3fn cast (RNE; denormals kept;
 *             448 < |x| <= 464 rounds to 448, 464 < |x| rounds to the bit
 *             pattern 0x7f, which is NaN, as does |x| >= 480, inf and NaN).
 *   e8m0      ue8m0 scale: a bare exponent, value 2^(code-127); 0xff is NaN.
 *   e2m1      fp4: 0, .5, 1, 1.5, 2, 3, 4, 6 with a sign bit (code bit 3); two
 *             per byte, the LOW nibble holds the even element.
 *
 * Block quantisation (all along the last, contiguous dimension)
 *   fp8 act     blocks of 32 (or 128): amax clamped to >= 1e-4, scale = ue8m0
 *               ceil of amax/448 (exponent, +1 when the mantissa is non-zero),
 *               q = e4m3(clamp(x/scale, +-448)).
 *   fp4 e8m0    blocks of 32: amax clamped to >= 6*2^-126, scale = ue8m0 ceil of
 *               amax/6, q = e2m1(clamp(x/scale, +-6)) with round-half-even.
 *   fp4 e4m3    blocks of 16: scale = e4m3(max(amax, 6*2^-9) / 6), q as above.
 *   fp8 weight  [out, in] with e8m0 scales [ceil(out/32), ceil(in/32)].
 *   fp4 weight  [out, in/2] bytes with e8m0 scales [out, in/32].
 *
 * "sim" functions quantise and dequantise in place, as the reference does
 * inside its graph; the caller rounds to bf16 where the reference stores bf16. */
#ifndef TIDE_NUM_NUM_H
#define TIDE_NUM_NUM_H

#include <stddef.h>
#include <stdint.h>

#include "num/num_inline.h"

/* ---- scalars ---- */
uint16_t tide_f32_to_bf16(float x);
float tide_bf16_to_f32(uint16_t h);
/* f32 -> bf16 -> f32, inline: the CPU forward calls it per element in its
 * hottest loops (the indexer's scores, attention's probabilities). */
static inline float tide_round_bf16(float x) { return tide_bf16_dec(tide_bf16_enc(x)); }
uint16_t tide_f32_to_f16(float x);
float tide_f16_to_f32(uint16_t h);

uint8_t tide_f32_to_e4m3(float x);
float tide_e4m3_to_f32(uint8_t code);

float tide_e8m0_to_f32(uint8_t code);
/* The reference's scale rounding: the e8m0 code of the smallest power of two
 * >= ratio (ratio positive and finite). */
uint8_t tide_e8m0_ceil(float ratio);

uint8_t tide_f32_to_e2m1(float x); /* clamped to [-6, 6] first; RNE at midpoints */
float tide_e2m1_to_f32(uint8_t code);

/* ---- activation block quantisation (n a multiple of block) ----
 * q and scale (or packed, ceil(n/2) bytes) are written; scale has
 * ceil(n/block) entries. A trailing partial block is quantised on its own;
 * block 0 does nothing. No allocation, safe to call on any row. */
void tide_quant_fp8_act(const float *x, size_t n, size_t block, uint8_t *q, uint8_t *scale);
void tide_sim_fp8_act(float *x, size_t n, size_t block);

void tide_quant_fp4_e8m0(const float *x, size_t n, size_t block, uint8_t *packed, uint8_t *scale);
void tide_sim_fp4_e8m0(float *x, size_t n, size_t block);

void tide_quant_fp4_e4m3(const float *x, size_t n, size_t block, uint8_t *packed, uint8_t *scale);
void tide_sim_fp4_e4m3(float *x, size_t n, size_t block);

/* ---- added by num: rows and dequantisers ---- */
/* In-place f32 -> bf16 -> f32 of a row, and the row conversions. */
void tide_round_bf16_row(float *x, size_t n);
void tide_f32_to_bf16_row(const float *x, uint16_t *h, size_t n);
void tide_bf16_to_f32_row(const uint16_t *h, float *x, size_t n);
/* Inverses of the activation quantisers above (same layouts):
 * dequant(quant(x)) equals sim(x) bit for bit, except that a NaN input keeps
 * its payload through sim but dequantises to the default NaN (checked by
 * fuzz/fuzz_num.c). */
void tide_dequant_fp8_act(const uint8_t *q, const uint8_t *scale, size_t n, size_t block, float *dst);
void tide_dequant_fp4_e8m0(const uint8_t *packed, const uint8_t *scale, size_t n, size_t block, float *dst);
void tide_dequant_fp4_e4m3(const uint8_t *packed, const uint8_t *scale, size_t n, size_t block, float *dst);

/* ---- weights ---- */
/* w: [out][in] e4m3 codes; scale: [ceil(out/32)][ceil(in/32)] e8m0. */
void tide_dequant_fp8_weight(const uint8_t *w, const uint8_t *scale, size_t out, size_t in, float *dst);
void tide_quant_fp8_weight(const float *src, size_t out, size_t in, uint8_t *w, uint8_t *scale);
/* w: [out][in/2] packed e2m1; scale: [out][in/32] e8m0. */
void tide_dequant_fp4_weight(const uint8_t *w, const uint8_t *scale, size_t out, size_t in, float *dst);
void tide_quant_fp4_weight(const float *src, size_t out, size_t in, uint8_t *w, uint8_t *scale);

#endif
