/* 64-bit modular arithmetic and a deterministic primality test. Used for
 * the Engram hash bucket sizes (model/config_check.c computes the list that
 * both the config check and the Engram tables use). */
#ifndef TIDE_NUM_PRIME_H
#define TIDE_NUM_PRIME_H

#include <stdint.h>

/* (a * b) mod m and (b ^ e) mod m, exact for every 64-bit m > 0. */
uint64_t tide_mulmod_u64(uint64_t a, uint64_t b, uint64_t m);
uint64_t tide_powmod_u64(uint64_t b, uint64_t e, uint64_t m);

/* 1 when n is prime, else 0. Deterministic Miller-Rabin: the first twelve
 * primes as bases decide every n < 2^64 (n < 3.3e24 in fact). */
int tide_is_prime_u64(uint64_t n);

/* The smallest prime > n; 0 when there is none below 2^64. */
uint64_t tide_next_prime_u64(uint64_t n);

#endif
