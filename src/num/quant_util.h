/* Small pieces shared by the block quantisers (private to src/num).
 *
 * Loops over a block run in chunks of TIDE_CHUNK elements with a constant
 * trip count, then a scalar tail: gcc's -O2 cost model vectorises only loops
 * that need no scalar epilogue, and a loop that reads floats and writes bytes
 * only when the two widths are split into separate loops (hence the uint32
 * staging rows in the quantisers). clang vectorises either way. */
#ifndef TIDE_NUM_QUANT_UTIL_H
#define TIDE_NUM_QUANT_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "num/num_inline.h"

#define TIDE_CHUNK 16
/* The sim functions find the scales of up to this many blocks at a time. */
#define TIDE_GROUP 64

/* Elements in one group of TIDE_GROUP blocks, without overflowing when
 * block is huge (then the whole row is one group). */
static inline size_t tide_group_span(size_t n, size_t block) {
    return block <= n / TIDE_GROUP ? TIDE_GROUP * block : n;
}

/* Length of the block starting at i0: block, or what is left of n. */
#define TIDE_BLOCK_LEN(n, i0, block) ((n) - (i0) < (block) ? (n) - (i0) : (block))

static inline int32_t tide_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }

/* max |x| over n values as the bits of a non-negative f32. The magnitude
 * bits compare as signed integers in the same order as the floats (NaN above
 * infinity, so a NaN wins like in torch's amax), and an integer maximum
 * vectorises where a float one with NaN rules does not. */
static inline uint32_t tide_amax_bits(const float *x, size_t n) {
    int32_t lane[TIDE_CHUNK] = {0}, m = 0;
    size_t i = 0;
    for (; i + TIDE_CHUNK <= n; i += TIDE_CHUNK)
        for (size_t k = 0; k < TIDE_CHUNK; k++)
            lane[k] = tide_max_i32(lane[k], (int32_t)(tide_fbits(x[i + k]) & TIDE_F32_ABS));
    for (; i < n; i++) m = tide_max_i32(m, (int32_t)(tide_fbits(x[i]) & TIDE_F32_ABS));
    for (size_t k = 0; k < TIDE_CHUNK; k++) m = tide_max_i32(m, lane[k]);
    return (uint32_t)m;
}

#endif
