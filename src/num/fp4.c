/* fp4 e2m1: sign (bit 3), 2 exponent bits, 1 mantissa bit: magnitudes 0, .5,
 * 1, 1.5, 2, 3, 4, 6. Two values per byte, the low nibble holding the element
 * with the even index. The reference rounds to nearest with ties to the even
 * code (its bucketize over the midpoints .25 .75 1.25 1.75 2.5 3.5 5 plus a
 * tie fix), after clamping to +-6; a negative input that rounds to zero keeps
 * its sign bit (code 8, value -0). */
#include "num/num.h"
#include "num/num_inline.h"

uint8_t tide_f32_to_e2m1(float x) { return tide_e2m1_enc(tide_clamp_nan(x, TIDE_BITS_6)); }

float tide_e2m1_to_f32(uint8_t code) { return tide_e2m1_dec(code); }
