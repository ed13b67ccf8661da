/* Reed-Solomon erasure coding of a page into k data + m parity shards, by
 * ISA-L (Cauchy matrix over GF(2^8): any k of the k + m shards rebuild the
 * page). k + m <= 32; m may be 0 (a local tier: one shard, no parity). */
#ifndef TIDE_CACHE_KVSTORE_EC_H
#define TIDE_CACHE_KVSTORE_EC_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct tide_kvs_ec {
    int k, m;
    unsigned char *matrix; /* [(k + m) x k], the first k rows the identity */
    unsigned char *tables; /* ISA-L's expanded tables for the m parity rows */
} tide_kvs_ec;

int tide_kvs_ec_init(tide_kvs_ec *ec, int k, int m, tide_status *st);
void tide_kvs_ec_free(tide_kvs_ec *ec);

/* shards[0..k) hold the page (zero-padded to k x len); fills shards[k..k+m). */
void tide_kvs_ec_encode(const tide_kvs_ec *ec, uint64_t len, uint8_t **shards);

/* Rebuilds the shards marked missing (have[i] == 0) from any k present
 * ones, in place. Fails when fewer than k are present. */
int tide_kvs_ec_decode(const tide_kvs_ec *ec, uint64_t len, uint8_t **shards, const uint8_t *have, tide_status *st);

#endif
