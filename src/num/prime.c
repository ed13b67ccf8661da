/* 64-bit primality: modular multiply and power through a 128-bit product,
 * and Miller-Rabin with the bases that make it exact for 64-bit n. */
#include "num/prime.h"

uint64_t tide_mulmod_u64(uint64_t a, uint64_t b, uint64_t m) {
    return (uint64_t)((unsigned __int128)a * b % m);
}

uint64_t tide_powmod_u64(uint64_t b, uint64_t e, uint64_t m) {
    uint64_t r = 1 % m;
    for (b %= m; e; e >>= 1, b = tide_mulmod_u64(b, b, m))
        if (e & 1) r = tide_mulmod_u64(r, b, m);
    return r;
}

int tide_is_prime_u64(uint64_t n) {
    static const uint64_t bases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
    const int nb = (int)(sizeof bases / sizeof bases[0]);
    if (n < 2) return 0;
    /* Small factors first: they reject most candidates, and n > 37 after
     * this, so every base below is a valid witness candidate (1 < a < n). */
    for (int i = 0; i < nb; i++)
        if (n % bases[i] == 0) return n == bases[i];
    uint64_t d = n - 1;
    int s = 0;
    while (!(d & 1)) d >>= 1, s++;
    for (int i = 0; i < nb; i++) {
        uint64_t x = tide_powmod_u64(bases[i], d, n);
        if (x == 1 || x == n - 1) continue;
        int composite = 1;
        for (int r = 1; r < s && composite; r++) {
            x = tide_mulmod_u64(x, x, n);
            if (x == n - 1) composite = 0;
        }
        if (composite) return 0;
    }
    return 1;
}

uint64_t tide_next_prime_u64(uint64_t n) {
    while (n < UINT64_MAX)
        if (tide_is_prime_u64(++n)) return n;
    return 0;
}
