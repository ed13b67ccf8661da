/* Counter-based random numbers for sampling: Philox-4x32-10 (Salmon et al.,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 *
 * A counter-based generator has no state: the value for (key, counter) is a
 * pure function of both. The sampler keys it by the request's seed and counts
 * by (position, stream, vocab index), so the Exp(1) variate that token id i
 * gets at position p of a request is the same whatever else shares the batch,
 * in whatever order, on whatever thread, and whether or not the position is
 * sampled again later (preemption, speculative verification). The GPU can
 * compute the very same bits: cuRAND and PyTorch use the same Philox.
 *
 * Layout of one call: key = seed (low word, high word); counter = (index / 2,
 * stream, position low word, position high word). The four 32-bit outputs
 * make two 64-bit words; index i uses word (i & 1). */
#ifndef TIDE_ENGINE_RNG_H
#define TIDE_ENGINE_RNG_H

#include <stdint.h>

/* Streams: distinct uses of the same (seed, position) draw independent bits. */
enum {
    TIDE_RNG_STREAM_SAMPLE = 0, /* the sampler's Exp(1) race */
    TIDE_RNG_STREAM_DRAFT = 1,  /* reserved: draft-side randomness of speculative decoding */
    TIDE_RNG_STREAM_SEED = 2,   /* tide_rng_derive_seed */
};

/* One Philox-4x32-10 block: out = philox(ctr, key). */
void tide_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Two 64-bit random words for (seed, position, stream, pair = index / 2). */
void tide_rng_words(uint64_t seed, uint64_t position, uint32_t stream, uint32_t pair,
                    uint64_t out[2]);

/* 64 random bits -> a double uniform in the open interval (0, 1): the top 52
 * bits plus one half, times 2^-52, so u in [2^-53, 1 - 2^-53], every value
 * exact (53 bits would round the top one up to 1.0). Never 0 and never 1, so
 * -log(u) is finite and positive. */
static inline double tide_rng_u01(uint64_t w) {
    return ((double)(w >> 12) + 0.5) * (1.0 / 4503599627370496.0);
}

/* The uniform / Exp(1) variate of vocab entry `index` at (seed, position,
 * stream). Exp(1) = -log(u): finite, in [1.1e-16, 36.8]. */
double tide_rng_uniform(uint64_t seed, uint64_t position, uint32_t stream, uint32_t index);
double tide_rng_exp(uint64_t seed, uint64_t position, uint32_t stream, uint32_t index);

/* A request seed for requests that bring none: a pure function of the
 * engine's seed and the request's admission number, so a whole run replays
 * from one number (and the seed can be reported back to the client). */
uint64_t tide_rng_derive_seed(uint64_t engine_seed, uint64_t request_no);

#endif
