/* The persistent KV store's on-disk format: one file per shard of a page.
 *
 * A page (one prefix-cache page's global KV, docs/kvstore.md) is cut into k
 * data shards and m parity shards; shard i lives in node directory i as
 * `<key hex>.<i>`. Each file is a 128-byte header and the shard's bytes,
 * zero-padded to a multiple of 4096 (O_DIRECT). All integers little endian:
 *
 *   0  magic "TIDEKVS1"        72 created, unix seconds
 *   8  version (2), u32        80 expires, unix seconds (0 = never)
 *  12  header bytes (128), u32 88 xxh3-64 of the shard's bytes
 *  16  key, 16 bytes           96 xxh3-64 of the whole page (after decode)
 *  32  chain hash (prefix.h)  104 reserved, zero (16 bytes)
 *  40  model fingerprint      120 xxh3-64 of header bytes [0, 120)
 *  48  page bytes, u64
 *  56  shard bytes, u64
 *  64  k, m, shard index, traffic class (u8 each); 68 reserved u32 zero
 *
 * Version 2: a page's bytes are the pool's packed blocks (kv_tier.h: FP4
 * latents with E4M3 scales, FP4 index keys with UE8M0 scales). Version 1
 * pages held f32 values; they are refused (read as missing shards).
 *
 * The index of a store is these headers: it is rebuilt on open by reading
 * them, so there is no second file to keep consistent. A shard is trusted
 * only when both checksums hold and its header names the key its file name
 * does; anything else reads as a missing shard. */
#ifndef TIDE_CACHE_KVSTORE_FMT_H
#define TIDE_CACHE_KVSTORE_FMT_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define TIDE_KVS_VERSION 2
#define TIDE_KVS_HDR 128
#define TIDE_KVS_ALIGN 4096
#define TIDE_KVS_MAX_SHARDS 32
#define TIDE_KVS_MAX_SHARD_BYTES (1ull << 30)

typedef struct tide_kvs_key {
    uint64_t hi, lo;
} tide_kvs_key;

typedef struct tide_kvs_hdr {
    tide_kvs_key key;
    uint64_t chain, fingerprint;
    uint64_t page_bytes, shard_bytes;
    int k, m, index, klass;
    int64_t created, expires;
    uint64_t shard_sum, page_sum;
} tide_kvs_hdr;

/* Bytes of each of k shards of a page of page_bytes: ceil(page_bytes / k)
 * rounded up to 64 (ISA-L's vector width). */
uint64_t tide_kvs_shard_bytes(uint64_t page_bytes, int k);

/* Bytes of a shard file holding shard_bytes (header + data, padded). */
uint64_t tide_kvs_file_bytes(uint64_t shard_bytes);

/* Writes the 128 header bytes for h, computing the shard checksum from
 * data[0, h->shard_bytes) (h->shard_sum is set). */
void tide_kvs_hdr_write(tide_kvs_hdr *h, const uint8_t *data, uint8_t out[TIDE_KVS_HDR]);

/* Parses and checks the header at buf[0, n) (magic, version, header
 * checksum, k/m/index/sizes in range). The data is not checked. */
int tide_kvs_hdr_parse(const uint8_t *buf, size_t n, tide_kvs_hdr *h, tide_status *st);

/* Parses a whole shard file image: the header, then the data's length and
 * checksum. On success *data points at the shard's bytes inside buf. */
int tide_kvs_shard_parse(const uint8_t *buf, size_t n, tide_kvs_hdr *h, const uint8_t **data, tide_status *st);

uint64_t tide_kvs_sum(const void *p, size_t n);

/* A store's persisted counters (docs/kvstore.md section 6): one record
 * per process that used the store, the file `.stats.<id as 16 hex digits>`
 * in the first node directory that takes it, rewritten whole (temporary
 * file, rename) as its counts grow; record id 0 holds the counts of
 * processes folded in by gc. TIDE_KVS_COUNTERS_BYTES bytes, little endian:
 *
 *   0  magic "TIDEKVC1"            24 updated (the store's clock, seconds)
 *   8  version (1), u32            32 the counters, TIDE_KVS_NCOUNTERS x u64
 *  12  counter count, u32         176 xxh3-64 of bytes [0, 176)
 *  16  record id, u64 */
enum {
    TIDE_KVC_HITS, TIDE_KVC_MISSES, TIDE_KVC_EXPIRED_MISSES, TIDE_KVC_LOST, TIDE_KVC_PUTS, TIDE_KVC_PUT_ERRORS,
    TIDE_KVC_BYTES_WRITTEN, TIDE_KVC_BYTES_READ, TIDE_KVC_CORRUPT, TIDE_KVC_REPAIRS, TIDE_KVC_EVICTIONS,
    TIDE_KVC_EXPIRED, TIDE_KVC_ENCODE_NS, TIDE_KVC_DECODE_NS, TIDE_KVC_ENCODE_BYTES, TIDE_KVC_DECODE_BYTES,
    TIDE_KVC_HOST_HITS, TIDE_KVC_PROCESSES,
    TIDE_KVS_NCOUNTERS
};
#define TIDE_KVS_COUNTERS_BYTES (32 + 8 * TIDE_KVS_NCOUNTERS + 8)

typedef struct tide_kvs_counters {
    uint64_t id;
    int64_t updated;
    int64_t v[TIDE_KVS_NCOUNTERS]; /* each >= 0 */
} tide_kvs_counters;

void tide_kvs_counters_write(const tide_kvs_counters *c, uint8_t out[TIDE_KVS_COUNTERS_BYTES]);
/* Refuses (with a message) anything but a whole, checksummed record of this
 * version whose counters are not negative. */
int tide_kvs_counters_parse(const uint8_t *buf, size_t n, tide_kvs_counters *c, tide_status *st);

/* "<32 hex digits>" (33 bytes with the NUL) and back. */
void tide_kvs_key_hex(tide_kvs_key k, char out[33]);
int tide_kvs_key_parse(const char *s, tide_kvs_key *k);

#endif
