/* Fuzz target for the KV store's on-disk format (cache/kvstore_fmt.h) and
 * its erasure code (cache/kvstore_ec.h).
 *   - The input as a shard file image: the parser either refuses it with a
 *     message or accepts a header whose fields are in range, and writing
 *     that header back gives the same 128 bytes (nothing is read that is
 *     not checked); the data checksum is checked over exactly shard_bytes.
 *   - The input as a counters record (kvstore_fmt.h): refused with a
 *     message, or accepted with counters that are not negative and that
 *     write back to the same bytes.
 *   - The input as a coding job: its first bytes pick k, m and which shards
 *     are lost; the rest is the page. Encoding, losing up to m shards and
 *     decoding gives the page back; losing more is refused.
 * A violation aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvstore_ec.h"
#include "cache/kvstore_fmt.h"

#define CHECK(c)                                                   \
    do {                                                           \
        if (!(c)) {                                                \
            fprintf(stderr, "fuzz_kvstore: %s (line %d)\n", #c, __LINE__); \
            abort();                                               \
        }                                                          \
    } while (0)

static void parse(const uint8_t *d, size_t n) {
    tide_kvs_hdr h;
    const uint8_t *data = NULL;
    tide_status st = {0};
    if (tide_kvs_hdr_parse(d, n, &h, &st) != 0) {
        CHECK(st.msg[0] != 0);
        return;
    }
    CHECK(h.k >= 1 && h.k + h.m <= TIDE_KVS_MAX_SHARDS && h.index < h.k + h.m);
    CHECK(h.page_bytes <= h.shard_bytes * (uint64_t)h.k);
    CHECK(h.shard_bytes == tide_kvs_shard_bytes(h.page_bytes, h.k));
    int whole = tide_kvs_shard_parse(d, n, &h, &data, &st) == 0;
    CHECK(!whole || (data == d + TIDE_KVS_HDR && n - TIDE_KVS_HDR >= h.shard_bytes));
    if (!whole) return;
    uint8_t again[TIDE_KVS_HDR];
    tide_kvs_hdr_write(&h, data, again);
    CHECK(memcmp(again, d, TIDE_KVS_HDR) == 0);
}

static void counters(const uint8_t *d, size_t n) {
    tide_kvs_counters c;
    tide_status st = {0};
    if (tide_kvs_counters_parse(d, n, &c, &st) != 0) {
        CHECK(st.msg[0] != 0);
        return;
    }
    CHECK(n == TIDE_KVS_COUNTERS_BYTES && c.updated >= 0);
    for (int i = 0; i < TIDE_KVS_NCOUNTERS; i++) CHECK(c.v[i] >= 0);
    uint8_t again[TIDE_KVS_COUNTERS_BYTES];
    tide_kvs_counters_write(&c, again);
    CHECK(memcmp(again, d, n) == 0);
}

static void code(const uint8_t *d, size_t n) {
    if (n < 7) return;
    int k = 1 + d[0] % 12, m = d[1] % 5;
    uint32_t lost = ((uint32_t)d[2] | (uint32_t)d[3] << 8 | (uint32_t)d[4] << 16) & ((1u << (k + m)) - 1);
    d += 5;
    n -= 5;
    if (n > 4096) n = 4096;
    tide_kvs_ec ec;
    tide_status st = {0};
    CHECK(tide_kvs_ec_init(&ec, k, m, &st) == 0);
    uint64_t len = tide_kvs_shard_bytes(n, k);
    uint8_t *buf = calloc((size_t)(k + m), (size_t)len), *sh[32], have[32];
    CHECK(buf);
    memcpy(buf, d, n);
    for (int i = 0; i < k + m; i++) sh[i] = buf + (size_t)i * len;
    tide_kvs_ec_encode(&ec, len, sh);
    int n_lost = 0;
    for (int i = 0; i < k + m; i++) {
        have[i] = !(lost >> i & 1);
        if (!have[i]) {
            memset(sh[i], 0xa5, len);
            n_lost++;
        }
    }
    int rc = tide_kvs_ec_decode(&ec, len, sh, have, &st);
    CHECK((rc == 0) == (n_lost <= m));
    if (rc == 0) CHECK(memcmp(buf, d, n) == 0);
    free(buf);
    tide_kvs_ec_free(&ec);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    parse(d, n);
    counters(d, n);
    code(d, n);
    return 0;
}
