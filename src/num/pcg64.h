/* numpy's default random generator, reproduced bit for bit:
 * numpy.random.default_rng(seed) = Generator(PCG64(SeedSequence(seed))).
 *
 * Engram's hash multipliers are drawn from it (docs/engram.md), and they
 * exceed 2^53, so everything here is integer arithmetic: the 128-bit LCG
 * state is kept as two 64-bit halves and multiplied limb by limb (no
 * __int128, no floating point).
 *
 *   SeedSequence   numpy's entropy pool (4 x uint32) and generate_state().
 *   PCG64          XSL-RR 128/64: state = state * M + inc; output
 *                  rotr64(hi ^ lo, hi >> 58). next32 hands out the low then
 *                  the high half of one 64-bit draw, as numpy buffers it.
 *   integers()     Generator.integers(low, high, dtype=int64/uint64):
 *                  Lemire's multiply-and-reject on next64 (or next32 when the
 *                  range fits in 32 bits), exactly numpy's
 *                  random_bounded_uint64_fill with use_masked = False. */
#ifndef TIDE_NUM_PCG64_H
#define TIDE_NUM_PCG64_H

#include <stddef.h>
#include <stdint.h>

typedef struct tide_pcg64 {
    uint64_t state_hi, state_lo;
    uint64_t inc_hi, inc_lo;
    int has_uint32;    /* a buffered upper half from the last next32 */
    uint32_t uinteger;
} tide_pcg64;

/* SeedSequence(entropy).generate_state(n_words, uint32) for an entropy given
 * as little-endian 32-bit words (numpy's conversion of a Python int: 0 is
 * one zero word, otherwise as many words as needed), no spawn key. */
void tide_seedseq_generate_u32(const uint32_t *entropy, size_t n_entropy, uint32_t *out,
                               size_t n_words);

/* PCG64 seeded like numpy.random.default_rng(seed) / PCG64(seed). */
void tide_pcg64_seed(tide_pcg64 *g, uint64_t seed);
/* PCG64 from explicit 128-bit state seed and stream (pcg64_set_seed). */
void tide_pcg64_set_seed(tide_pcg64 *g, uint64_t seed_hi, uint64_t seed_lo, uint64_t inc_hi,
                         uint64_t inc_lo);

uint64_t tide_pcg64_next64(tide_pcg64 *g); /* bit_generator.random_raw() */
uint32_t tide_pcg64_next32(tide_pcg64 *g);

/* Generator.integers(low, high, size=n, dtype=np.int64), high exclusive,
 * low < high required (returns -1 otherwise, 0 on success). */
int tide_pcg64_integers_i64(tide_pcg64 *g, int64_t low, int64_t high, size_t n, int64_t *out);

/* numpy's bounded draw in [0, rng] inclusive, 64-bit Lemire (rng < 2^64-1). */
uint64_t tide_pcg64_bounded_u64(tide_pcg64 *g, uint64_t rng);
/* Same with 32-bit draws (rng < 2^32-1). */
uint32_t tide_pcg64_bounded_u32(tide_pcg64 *g, uint32_t rng);

#endif
