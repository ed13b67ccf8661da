/* Random test rows for the numerics tests: every block of 32 values gets one
 * of several shapes that stress the formats (magnitudes from denormal to
 * near FLT_MAX, constant blocks, outliers, signed zeros, exact rounding ties
 * of e4m3 / e2m1 / bf16, format boundaries). All values are finite. */
#ifndef TIDE_TESTS_NUM_TESTDATA_H
#define TIDE_TESTS_NUM_TESTDATA_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "testutil.h"

/* Bit-identical floats, any NaN equal to any NaN. */
static inline int nt_same_f32(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    uint32_t ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    return ua == ub;
}

static inline float nt_sign(tu_rng *r, float x) { return (tu_next(r) & 1) ? -x : x; }

/* A random e4m3 midpoint (between codes c and c+1, c < 0x7e), as a value. */
static inline double nt_e4m3_mid(tu_rng *r) {
    int c = (int)(tu_next(r) % 0x7e), e0 = c >> 3, m0 = c & 7, e1 = (c + 1) >> 3, m1 = (c + 1) & 7;
    double lo = e0 == 0 ? ldexp(m0, -9) : ldexp(8 + m0, e0 - 10);
    double hi = e1 == 0 ? ldexp(m1, -9) : ldexp(8 + m1, e1 - 10);
    return (lo + hi) / 2;
}

static inline void nt_block(tu_rng *r, float *x, size_t n) {
    static const float special[] = {448.0f, 449.0f, 464.0f, 464.00003f, 479.9f, 480.0f, 65504.0f, 65519.0f,
                                    65520.0f, 1e30f, 3.4e38f, FLT_MAX, 0x1p-9f, 0x1p-10f, 0x3p-10f, 0x1p-24f,
                                    0x1p-25f, 1e-45f, 0x1p-126f, 0x1p-127f, 6.0f, 0.25f, 5.0f, 2688.0f, 2784.0f,
                                    2785.0f, 1e-4f, 0x1.8p-124f, 0x1.8p-7f};
    static const float e2m1_mid[] = {.25f, .75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    int kind = (int)(tu_next(r) % 12);
    int k = (int)(tu_next(r) % 41) - 20;
    switch (kind) {
    case 0: case 1: { /* normal values, one magnitude per block, 1e-8 .. 1e8 */
        double mag = pow(10.0, -8.0 + 16.0 * tu_uniform(r));
        for (size_t i = 0; i < n; i++) x[i] = (float)(tu_normal(r) * mag);
        break;
    }
    case 2: /* tiny, down into f32 denormals */
        for (size_t i = 0; i < n; i++) x[i] = (float)(tu_normal(r) * pow(10.0, -45.0 + 15.0 * tu_uniform(r)));
        break;
    case 3: { /* constant */
        float c = (tu_next(r) & 1) ? (float)(tu_normal(r) * pow(10.0, -6 + 10 * tu_uniform(r)))
                                   : nt_sign(r, ldexpf((tu_next(r) & 1) ? 448.0f : 6.0f, k));
        for (size_t i = 0; i < n; i++) x[i] = c;
        break;
    }
    case 4: /* small values and one outlier */
        for (size_t i = 0; i < n; i++) x[i] = (float)(tu_normal(r) * 1e-3);
        x[tu_next(r) % n] = (float)(tu_normal(r) * 1e4);
        break;
    case 5: /* signed zeros and tiny negatives */
        for (size_t i = 0; i < n; i++) {
            uint64_t t = tu_next(r) % 4;
            x[i] = t == 0 ? 0.0f : t == 1 ? -0.0f : t == 2 ? -1e-30f : (float)(-tu_uniform(r) * 1e-9);
        }
        break;
    case 6: /* e4m3 ties at the block's scale 2^k (448 * 2^k sets it exactly) */
        for (size_t i = 0; i < n; i++) x[i] = nt_sign(r, (float)ldexp(nt_e4m3_mid(r), k));
        x[tu_next(r) % n] = ldexpf(448.0f, k);
        break;
    case 7: /* e2m1 ties at scale 2^k */
        for (size_t i = 0; i < n; i++) x[i] = nt_sign(r, ldexpf(e2m1_mid[tu_next(r) % 7], k));
        x[tu_next(r) % n] = nt_sign(r, ldexpf(6.0f, k));
        break;
    case 8: /* bf16 ties: low 16 bits exactly 0x8000 */
        for (size_t i = 0; i < n; i++) {
            uint32_t u = ((uint32_t)tu_next(r) & 0x80ffffffu) | ((uint32_t)(100 + tu_next(r) % 50) << 23);
            u = (u & 0xffff0000u) | 0x8000u;
            memcpy(&x[i], &u, 4);
        }
        break;
    case 9: /* format boundaries */
        for (size_t i = 0; i < n; i++) x[i] = nt_sign(r, special[tu_next(r) % (sizeof special / sizeof *special)]);
        break;
    case 10: /* any finite f32 */
        for (size_t i = 0; i < n; i++) {
            uint32_t u = ((uint32_t)tu_next(r) & 0x807fffffu) | ((uint32_t)(tu_next(r) % 255) << 23);
            memcpy(&x[i], &u, 4);
        }
        break;
    default: { /* e2m1 ties under an e4m3 scale s (6 s sets it exactly) */
        int c = 1 + (int)(tu_next(r) % 0x7d), e = c >> 3, m = c & 7;
        float s = (float)(e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10));
        for (size_t i = 0; i < n; i++) x[i] = nt_sign(r, e2m1_mid[tu_next(r) % 7] * s);
        for (size_t i = 0; i < n; i += 16) x[i + tu_next(r) % (n - i < 16 ? n - i : 16)] = 6.0f * s;
        break;
    }
    }
}

/* n values, block shapes chosen per 32 (n a multiple of 32). */
static inline void nt_fill(tu_rng *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i += 32) nt_block(r, x + i, n - i < 32 ? n - i : 32);
}

#endif
