/* numpy's SeedSequence + PCG64 + Generator.integers(), in 64-bit integer
 * arithmetic. See pcg64.h; constants are numpy's (bit_generator.pyx,
 * pcg64.h, distributions.c) and the tests compare against numpy itself. */
#include "num/pcg64.h"

/* ---- SeedSequence ---------------------------------------------------------- */

enum { POOL_SIZE = 4 };
#define INIT_A 0x43b0d7e5u
#define MULT_A 0x931e8875u
#define INIT_B 0x8b51f9ddu
#define MULT_B 0x58f38dedu
#define MIX_MULT_L 0xca01f9ddu
#define MIX_MULT_R 0x4973f715u
#define XSHIFT 16

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= MULT_A;
    value *= *hash_const;
    value ^= value >> XSHIFT;
    return value;
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = MIX_MULT_L * x - MIX_MULT_R * y;
    return r ^ (r >> XSHIFT);
}

/* SeedSequence.mix_entropy: fold the entropy words into a 4-word pool. */
static void mix_entropy(const uint32_t *entropy, size_t n, uint32_t pool[POOL_SIZE]) {
    uint32_t hc = INIT_A;
    for (size_t i = 0; i < POOL_SIZE; i++) pool[i] = hashmix(i < n ? entropy[i] : 0, &hc);
    for (size_t s = 0; s < POOL_SIZE; s++)
        for (size_t d = 0; d < POOL_SIZE; d++)
            if (s != d) pool[d] = mix(pool[d], hashmix(pool[s], &hc));
    for (size_t s = POOL_SIZE; s < n; s++)
        for (size_t d = 0; d < POOL_SIZE; d++) pool[d] = mix(pool[d], hashmix(entropy[s], &hc));
}

void tide_seedseq_generate_u32(const uint32_t *entropy, size_t n_entropy, uint32_t *out,
                               size_t n_words) {
    uint32_t pool[POOL_SIZE];
    uint32_t zero = 0;
    if (n_entropy == 0) { /* numpy turns an empty entropy into [0] too */
        entropy = &zero;
        n_entropy = 1;
    }
    mix_entropy(entropy, n_entropy, pool);
    uint32_t hc = INIT_B;
    for (size_t i = 0; i < n_words; i++) {
        uint32_t v = pool[i % POOL_SIZE];
        v ^= hc;
        hc *= MULT_B;
        v *= hc;
        v ^= v >> XSHIFT;
        out[i] = v;
    }
}

/* ---- 128-bit arithmetic on two 64-bit halves ------------------------------ */

/* High 64 bits of the 128-bit product a * b, from 32-bit limbs. */
static uint64_t mulhi64(uint64_t a, uint64_t b) {
    uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

#define MULT_HI 2549297995355413924ull
#define MULT_LO 4865540595714422341ull

/* state = state * MULT + inc (mod 2^128): pcg_setseq_128_step_r. */
static void step(tide_pcg64 *g) {
    uint64_t lo = g->state_lo * MULT_LO;
    uint64_t hi = mulhi64(g->state_lo, MULT_LO) + g->state_lo * MULT_HI + g->state_hi * MULT_LO;
    uint64_t nlo = lo + g->inc_lo;
    hi += g->inc_hi + (nlo < lo);
    g->state_lo = nlo;
    g->state_hi = hi;
}

void tide_pcg64_set_seed(tide_pcg64 *g, uint64_t seed_hi, uint64_t seed_lo, uint64_t inc_hi,
                         uint64_t inc_lo) {
    /* pcg_setseq_128_srandom_r: inc = (initseq << 1) | 1; step; state += initstate; step */
    g->state_hi = 0;
    g->state_lo = 0;
    g->inc_hi = (inc_hi << 1) | (inc_lo >> 63);
    g->inc_lo = (inc_lo << 1) | 1u;
    step(g);
    uint64_t lo = g->state_lo + seed_lo;
    g->state_hi += seed_hi + (lo < seed_lo);
    g->state_lo = lo;
    step(g);
    g->has_uint32 = 0;
    g->uinteger = 0;
}

void tide_pcg64_seed(tide_pcg64 *g, uint64_t seed) {
    /* A Python int becomes little-endian 32-bit words; 0 is one zero word. */
    uint32_t ent[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    size_t n_ent = (seed >> 32) ? 2 : 1;
    uint32_t w[8];
    tide_seedseq_generate_u32(ent, n_ent, w, 8);
    uint64_t v[4]; /* generate_state(4, uint64): pairs of words, little-endian */
    for (int i = 0; i < 4; i++) v[i] = (uint64_t)w[2 * i] | ((uint64_t)w[2 * i + 1] << 32);
    tide_pcg64_set_seed(g, v[0], v[1], v[2], v[3]);
}

uint64_t tide_pcg64_next64(tide_pcg64 *g) {
    step(g);
    unsigned rot = (unsigned)(g->state_hi >> 58);
    uint64_t x = g->state_hi ^ g->state_lo;
    return rot ? (x >> rot) | (x << (64u - rot)) : x;
}

uint32_t tide_pcg64_next32(tide_pcg64 *g) {
    if (g->has_uint32) {
        g->has_uint32 = 0;
        return g->uinteger;
    }
    uint64_t v = tide_pcg64_next64(g);
    g->has_uint32 = 1;
    g->uinteger = (uint32_t)(v >> 32);
    return (uint32_t)v;
}

/* ---- bounded integers (Lemire, numpy's unmasked path) --------------------- */

uint64_t tide_pcg64_bounded_u64(tide_pcg64 *g, uint64_t rng) {
    const uint64_t excl = rng + 1;
    uint64_t r = tide_pcg64_next64(g);
    uint64_t leftover = r * excl; /* low half of the 128-bit product */
    if (leftover < excl) {
        const uint64_t threshold = (UINT64_MAX - rng) % excl; /* 2^64 mod excl */
        while (leftover < threshold) {
            r = tide_pcg64_next64(g);
            leftover = r * excl;
        }
    }
    return mulhi64(r, excl);
}

uint32_t tide_pcg64_bounded_u32(tide_pcg64 *g, uint32_t rng) {
    const uint32_t excl = rng + 1;
    uint64_t m = (uint64_t)tide_pcg64_next32(g) * excl;
    uint32_t leftover = (uint32_t)m;
    if (leftover < excl) {
        const uint32_t threshold = (UINT32_MAX - rng) % excl;
        while (leftover < threshold) {
            m = (uint64_t)tide_pcg64_next32(g) * excl;
            leftover = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

int tide_pcg64_integers_i64(tide_pcg64 *g, int64_t low, int64_t high, size_t n, int64_t *out) {
    if (low >= high) return -1;
    /* numpy: inclusive range rng = (high - 1) - low, offset low, in uint64. */
    uint64_t rng = (uint64_t)high - 1u - (uint64_t)low;
    uint64_t off = (uint64_t)low;
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        if (rng == 0)
            v = 0;
        else if (rng <= 0xffffffffu)
            v = rng == 0xffffffffu ? tide_pcg64_next32(g) : tide_pcg64_bounded_u32(g, (uint32_t)rng);
        else if (rng == UINT64_MAX)
            v = tide_pcg64_next64(g);
        else
            v = tide_pcg64_bounded_u64(g, rng);
        out[i] = (int64_t)(off + v); /* wraps like numpy's uint64 -> int64 view */
    }
    return 0;
}
