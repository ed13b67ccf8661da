/* The 8-bit formats of the checkpoint: e4m3fn values and ue8m0 scales.
 *
 * e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities;
 * 0x7f and 0xff are NaN; largest finite 448 = 1.75 * 2^8; denormals step 2^-9.
 * Conversion from f32 follows torch's float8_e4m3fn cast, which is plain RNE
 * on an extended grid: 464 (halfway from 448 to 480) rounds down to 448, but
 * anything above it rounds to the bit pattern 0x7f, which is NaN; so does any
 * |x| >= 480 and infinity. The quantisers never see that range: they clamp to
 * +-448 first, as the reference does.
 *
 * ue8m0: a bare biased exponent, 2^(code-127); code 0 is 2^-127 (an f32
 * denormal) and 0xff is NaN. Scales are picked by rounding UP to a power of
 * two (tide_e8m0_ceil), so that x / scale never exceeds the target range. */
#include "num/num.h"
#include "num/num_inline.h"

uint8_t tide_f32_to_e4m3(float x) { return tide_e4m3_enc(x); }

float tide_e4m3_to_f32(uint8_t code) { return tide_e4m3_dec(code); }

float tide_e8m0_to_f32(uint8_t code) { return tide_e8m0_dec(code); }

uint8_t tide_e8m0_ceil(float ratio) { return tide_e8m0_ceil_inl(ratio); }
