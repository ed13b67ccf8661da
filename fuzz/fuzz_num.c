/* Fuzz target for the number formats and quantisers of num/num.h: the
 * input's bytes (after a 2-byte header choosing the block size and the
 * weight shape) are read as f32 values, NaN, infinities and denormals
 * included. Every quantiser must run without a fault, and:
 *   - sim(x) equals dequant(quant(x)) bit for bit, for each activation
 *     quantiser (the header promises it), NaNs aside: sim passes an input
 *     NaN's payload through, dequant gives the default NaN, and either is
 *     only "NaN" to every consumer;
 *   - the scalar codes survive a decode / encode round trip (bf16, f16,
 *     e4m3, e2m1), NaN codes aside;
 *   - the weight quantisers' output dequantises without a fault.
 * A violation aborts. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "num/num.h"

#define MAX_N 2048

/* Aborts with the failed condition, so a crash names the broken invariant. */
#define CHECK(c)                                                                        \
    do {                                                                                \
        if (!(c)) {                                                                     \
            fprintf(stderr, "fuzz_num: %s:%d: %s\n", __FILE__, __LINE__, #c);         \
            abort();                                                                    \
        }                                                                               \
    } while (0)

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Bit equality, where any NaN equals any NaN (see the top). */
static void same_bits(const char *what, const float *x, const float *a, const float *b, size_t n, size_t block) {
    for (size_t i = 0; i < n; i++)
        if (bits(a[i]) != bits(b[i]) && !(isnan(a[i]) && isnan(b[i]))) {
            fprintf(stderr, "fuzz_num: %s, n %zu, block %zu: x[%zu] = %08x: sim %08x, dequant(quant) %08x\n", what, n,
                    block, i, bits(x[i]), bits(a[i]), bits(b[i]));
            abort();
        }
}

typedef void (*quant_fn)(const float *x, size_t n, size_t block, uint8_t *q, uint8_t *scale);
typedef void (*sim_fn)(float *x, size_t n, size_t block);
typedef void (*dequant_fn)(const uint8_t *q, const uint8_t *scale, size_t n, size_t block, float *dst);

/* quant -> dequant against sim, on one row. `packed`: two codes per byte. */
static void check_act(const char *what, const float *x, size_t n, size_t block, int packed, quant_fn q, sim_fn s,
                      dequant_fn d) {
    static const uint8_t fill = 0xa5; /* codes the quantiser forgot to write would show */
    size_t nq = packed ? (n + 1) / 2 : n, ns = (n + block - 1) / block;
    uint8_t *codes = malloc(nq + 1), *scale = malloc(ns + 1);
    float *sim = malloc((n + 1) * sizeof *sim), *deq = malloc((n + 1) * sizeof *deq);
    if (!codes || !scale || !sim || !deq) abort();
    memset(codes, fill, nq + 1);
    memset(scale, fill, ns + 1);
    memcpy(sim, x, n * sizeof *x);
    q(x, n, block, codes, scale);
    s(sim, n, block);
    d(codes, scale, n, block, deq);
    same_bits(what, x, sim, deq, n, block);
    CHECK(codes[nq] == fill && scale[ns] == fill); /* nothing written past the outputs */
    free(codes);
    free(scale);
    free(sim);
    free(deq);
}

static void check_scalars(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h = tide_f32_to_bf16(x[i]);
        CHECK(bits(tide_round_bf16(x[i])) == bits(tide_bf16_to_f32(h)));
        CHECK(isnan(x[i]) || tide_f32_to_bf16(tide_bf16_to_f32(h)) == h);
        uint16_t f = tide_f32_to_f16(x[i]);
        CHECK(isnan(tide_f16_to_f32(f)) || tide_f32_to_f16(tide_f16_to_f32(f)) == f);
        uint8_t e = tide_f32_to_e4m3(x[i]);
        CHECK((e & 0x7f) == 0x7f || tide_f32_to_e4m3(tide_e4m3_to_f32(e)) == e);
        uint8_t c = tide_f32_to_e2m1(x[i]);
        CHECK(c <= 15 && tide_f32_to_e2m1(tide_e2m1_to_f32(c)) == c);
        float r = fabsf(x[i]);
        /* The scale rounding: the smallest power of two >= ratio, for normal
         * ratios (a denormal one gets 2^-126, as the reference's exponent
         * bit arithmetic gives). */
        if (isnormal(r)) {
            uint8_t code = tide_e8m0_ceil(r);
            float p = tide_e8m0_to_f32(code); /* NaN (code 0xff) past 2^127 */
            CHECK(isnan(p) || (p >= r && (code == 0 || p / 2 < r)));
        }
    }
}

/* Weights: rows of `in` values (a multiple of 32), as many as fit. */
static void check_weights(const float *x, size_t n, size_t in) {
    size_t out = n / in;
    if (out == 0) return;
    size_t sr = (out + 31) / 32, sc = in / 32;
    uint8_t *w8 = malloc(out * in), *s8 = malloc(sr * sc), *w4 = malloc(out * in / 2), *s4 = malloc(out * sc);
    float *dst = malloc(out * in * sizeof *dst);
    if (!w8 || !s8 || !w4 || !s4 || !dst) abort();
    tide_quant_fp8_weight(x, out, in, w8, s8);
    tide_dequant_fp8_weight(w8, s8, out, in, dst);
    tide_quant_fp4_weight(x, out, in, w4, s4);
    tide_dequant_fp4_weight(w4, s4, out, in, dst);
    free(w8);
    free(s8);
    free(w4);
    free(s4);
    free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    /* Block sizes: the reference's 16, 32 and 128 most of the time, else any
     * 1..64 (partial and odd blocks: nibbles straddle bytes). */
    static const size_t common[] = {16, 32, 128};
    size_t block = data[0] < 192 ? common[data[0] % 3] : (size_t)(data[0] % 64) + 1;
    size_t in = 32 * (size_t)(1 + data[1] % 4);
    size_t n = (size - 2) / sizeof(float);
    if (n > MAX_N) n = MAX_N;
    float *x = malloc((n + 1) * sizeof *x);
    if (!x) abort();
    memcpy(x, data + 2, n * sizeof *x);
    check_act("fp8 act", x, n, block, 0, tide_quant_fp8_act, tide_sim_fp8_act, tide_dequant_fp8_act);
    check_act("fp4 e8m0", x, n, block, 1, tide_quant_fp4_e8m0, tide_sim_fp4_e8m0, tide_dequant_fp4_e8m0);
    check_act("fp4 e4m3", x, n, block, 1, tide_quant_fp4_e4m3, tide_sim_fp4_e4m3, tide_dequant_fp4_e4m3);
    check_scalars(x, n);
    check_weights(x, n, in);
    free(x);
    return 0;
}
