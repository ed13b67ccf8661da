/* Philox-4x32-10 and the sampler's (seed, position, stream, index) mapping.
 * See rng.h for why a counter-based generator. */
#include "engine/rng.h"

#include <math.h>

/* Multipliers and Weyl key increments from the Philox paper. */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void tide_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo32(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo32(PHILOX_M1, c2, &hi1, &lo1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0; /* the key schedule: bumped between rounds (the last bump is unused) */
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void tide_rng_words(uint64_t seed, uint64_t position, uint32_t stream, uint32_t pair,
                    uint64_t out[2]) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {pair, stream, (uint32_t)position, (uint32_t)(position >> 32)};
    uint32_t o[4];
    tide_philox4x32_10(ctr, key, o);
    out[0] = (uint64_t)o[0] | ((uint64_t)o[1] << 32);
    out[1] = (uint64_t)o[2] | ((uint64_t)o[3] << 32);
}

double tide_rng_uniform(uint64_t seed, uint64_t position, uint32_t stream, uint32_t index) {
    uint64_t w[2];
    tide_rng_words(seed, position, stream, index >> 1, w);
    return tide_rng_u01(w[index & 1]);
}

uint64_t tide_rng_derive_seed(uint64_t engine_seed, uint64_t request_no) {
    uint64_t w[2];
    tide_rng_words(engine_seed, request_no, TIDE_RNG_STREAM_SEED, 0, w);
    return w[0];
}

double tide_rng_exp(uint64_t seed, uint64_t position, uint32_t stream, uint32_t index) {
    return -log(tide_rng_uniform(seed, position, stream, index));
}
