/* The 16-bit floats: bf16 (the reference's activation and storage type) and
 * IEEE binary16 (f16, for the few tensors and tools that use it).
 *
 * bf16 is the top half of an f32, so conversion is rounding away 16 mantissa
 * bits (RNE, see num_inline.h). f16 has its own exponent range: values below
 * 2^-14 become f16 denormals (steps of 2^-24), values from 65520 up become
 * infinity (65520 is the tie between 65504 and the next power, 65536, and
 * goes to the even side, which is infinity). */
#include "num/num.h"
#include "num/num_inline.h"

uint16_t tide_f32_to_bf16(float x) { return tide_bf16_enc(x); }

float tide_bf16_to_f32(uint16_t h) { return tide_bf16_dec(h); }


/* The row forms run in chunks with a constant trip count, and split the
 * f32 <-> u16 width change into its own loop, so that gcc -O2 vectorises
 * them (see quant_util.h). */
#define CHUNK 16

void tide_round_bf16_row(float *x, size_t n) {
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK)
        for (size_t k = 0; k < CHUNK; k++) x[i + k] = tide_bf16_dec(tide_bf16_enc(x[i + k]));
    for (; i < n; i++) x[i] = tide_bf16_dec(tide_bf16_enc(x[i]));
}

void tide_f32_to_bf16_row(const float *x, uint16_t *h, size_t n) {
    uint32_t t[CHUNK];
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        for (size_t k = 0; k < CHUNK; k++) t[k] = tide_bf16_enc(x[i + k]);
        for (size_t k = 0; k < CHUNK; k++) h[i + k] = (uint16_t)t[k];
    }
    for (; i < n; i++) h[i] = tide_bf16_enc(x[i]);
}

void tide_bf16_to_f32_row(const uint16_t *h, float *x, size_t n) {
    uint32_t t[CHUNK];
    size_t i = 0;
    for (; i + CHUNK <= n; i += CHUNK) {
        for (size_t k = 0; k < CHUNK; k++) t[k] = h[i + k];
        for (size_t k = 0; k < CHUNK; k++) x[i + k] = tide_bitsf(t[k] << 16);
    }
    for (; i < n; i++) x[i] = tide_bf16_dec(h[i]);
}

uint16_t tide_f32_to_f16(float x) {
    uint32_t u = tide_fbits(x), a = u & TIDE_F32_ABS;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > TIDE_F32_INF) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520: rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: denormal, steps of 2^-24 = ulp of [0.5, 1) */
        uint32_t steps = tide_fbits(tide_bitsf(a) + 0.5f) - 0x3f000000u;
        return (uint16_t)(sign | steps); /* 0x400 (2^-14) carries into the exponent */
    }
    /* normal: rebias the exponent from 127 to 15, keep 10 mantissa bits */
    uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
    return (uint16_t)(sign | (r - (112u << 10)));
}

float tide_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
    uint32_t mag;
    if (e == 0) mag = tide_fbits((float)m * 0x1p-24f);
    else if (e == 31) mag = TIDE_F32_INF | (m << 13);
    else mag = ((e + 112u) << 23) | (m << 13);
    return tide_bitsf(sign | mag);
}
