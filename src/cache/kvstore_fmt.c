/* The shard file format: see kvstore_fmt.h. */
#include "cache/kvstore_fmt.h"

#include <string.h>
#include <xxhash.h>

static const char MAGIC[8] = {'T', 'I', 'D', 'E', 'K', 'V', 'S', '1'};

uint64_t tide_kvs_sum(const void *p, size_t n) { return XXH3_64bits(p, n); }

uint64_t tide_kvs_shard_bytes(uint64_t page_bytes, int k) {
    uint64_t s = (page_bytes + (uint64_t)k - 1) / (uint64_t)k;
    return (s + 63) / 64 * 64;
}

uint64_t tide_kvs_file_bytes(uint64_t shard_bytes) {
    return (TIDE_KVS_HDR + shard_bytes + TIDE_KVS_ALIGN - 1) / TIDE_KVS_ALIGN * TIDE_KVS_ALIGN;
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

void tide_kvs_hdr_write(tide_kvs_hdr *h, const uint8_t *data, uint8_t out[TIDE_KVS_HDR]) {
    memset(out, 0, TIDE_KVS_HDR);
    memcpy(out, MAGIC, 8);
    put32(out + 8, TIDE_KVS_VERSION);
    put32(out + 12, TIDE_KVS_HDR);
    put64(out + 16, h->key.hi);
    put64(out + 24, h->key.lo);
    put64(out + 32, h->chain);
    put64(out + 40, h->fingerprint);
    put64(out + 48, h->page_bytes);
    put64(out + 56, h->shard_bytes);
    out[64] = (uint8_t)h->k;
    out[65] = (uint8_t)h->m;
    out[66] = (uint8_t)h->index;
    out[67] = (uint8_t)h->klass;
    put64(out + 72, (uint64_t)h->created);
    put64(out + 80, (uint64_t)h->expires);
    h->shard_sum = tide_kvs_sum(data, h->shard_bytes);
    put64(out + 88, h->shard_sum);
    put64(out + 96, h->page_sum);
    put64(out + 120, tide_kvs_sum(out, 120));
}

int tide_kvs_hdr_parse(const uint8_t *b, size_t n, tide_kvs_hdr *h, tide_status *st) {
    if (n < TIDE_KVS_HDR)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: %zu bytes, shorter than its %d-byte header", n, TIDE_KVS_HDR);
    if (memcmp(b, MAGIC, 8) != 0) return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: bad magic (not a tide KV shard)");
    if (get32(b + 8) == 1)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         "kv shard: version 1 (pages of f32 KV, before the packed FP4 pool); this build reads "
                         "version %d only: the page reads as missing and is recomputed", TIDE_KVS_VERSION);
    if (get32(b + 8) != TIDE_KVS_VERSION)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "kv shard: version %u (this build reads %d)", get32(b + 8),
                         TIDE_KVS_VERSION);
    if (get32(b + 12) != TIDE_KVS_HDR)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: header size %u (expected %d)", get32(b + 12), TIDE_KVS_HDR);
    if (get64(b + 120) != tide_kvs_sum(b, 120)) return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: header checksum mismatch");
    if (get32(b + 68) != 0 || get64(b + 104) != 0 || get64(b + 112) != 0)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: reserved header bytes are not zero");
    h->key.hi = get64(b + 16);
    h->key.lo = get64(b + 24);
    h->chain = get64(b + 32);
    h->fingerprint = get64(b + 40);
    h->page_bytes = get64(b + 48);
    h->shard_bytes = get64(b + 56);
    h->k = b[64];
    h->m = b[65];
    h->index = b[66];
    h->klass = b[67];
    h->created = (int64_t)get64(b + 72);
    h->expires = (int64_t)get64(b + 80);
    h->shard_sum = get64(b + 88);
    h->page_sum = get64(b + 96);
    if (h->k < 1 || h->k + h->m > TIDE_KVS_MAX_SHARDS)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: k %d + m %d outside 1..%d shards", h->k, h->m, TIDE_KVS_MAX_SHARDS);
    if (h->index >= h->k + h->m)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: index %d of %d shards", h->index, h->k + h->m);
    if (h->shard_bytes == 0 || h->shard_bytes > TIDE_KVS_MAX_SHARD_BYTES)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: shard bytes %llu outside 1..2^30",
                         (unsigned long long)h->shard_bytes);
    if (h->page_bytes == 0 || h->page_bytes > h->shard_bytes * (uint64_t)h->k ||
        tide_kvs_shard_bytes(h->page_bytes, h->k) != h->shard_bytes)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: page bytes %llu do not fit %d shards of %llu",
                         (unsigned long long)h->page_bytes, h->k, (unsigned long long)h->shard_bytes);
    if (h->created < 0 || h->expires < 0)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: negative time");
    return 0;
}

int tide_kvs_shard_parse(const uint8_t *buf, size_t n, tide_kvs_hdr *h, const uint8_t **data, tide_status *st) {
    if (tide_kvs_hdr_parse(buf, n, h, st) != 0) return -1;
    if (n - TIDE_KVS_HDR < h->shard_bytes)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: truncated: %zu data bytes of %llu", n - TIDE_KVS_HDR,
                         (unsigned long long)h->shard_bytes);
    if (tide_kvs_sum(buf + TIDE_KVS_HDR, h->shard_bytes) != h->shard_sum)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv shard: data checksum mismatch");
    *data = buf + TIDE_KVS_HDR;
    return 0;
}

static const char CMAGIC[8] = {'T', 'I', 'D', 'E', 'K', 'V', 'C', '1'};

void tide_kvs_counters_write(const tide_kvs_counters *c, uint8_t out[TIDE_KVS_COUNTERS_BYTES]) {
    memset(out, 0, TIDE_KVS_COUNTERS_BYTES);
    memcpy(out, CMAGIC, 8);
    put32(out + 8, 1);
    put32(out + 12, TIDE_KVS_NCOUNTERS);
    put64(out + 16, c->id);
    put64(out + 24, (uint64_t)c->updated);
    for (int i = 0; i < TIDE_KVS_NCOUNTERS; i++) put64(out + 32 + 8 * i, (uint64_t)c->v[i]);
    put64(out + TIDE_KVS_COUNTERS_BYTES - 8, tide_kvs_sum(out, TIDE_KVS_COUNTERS_BYTES - 8));
}

int tide_kvs_counters_parse(const uint8_t *b, size_t n, tide_kvs_counters *c, tide_status *st) {
    if (n != TIDE_KVS_COUNTERS_BYTES)
        return tide_fail(st, TIDE_ERR_FORMAT, "kv counters: %zu bytes (a record has %d)", n, TIDE_KVS_COUNTERS_BYTES);
    if (memcmp(b, CMAGIC, 8) != 0) return tide_fail(st, TIDE_ERR_FORMAT, "kv counters: bad magic");
    if (get32(b + 8) != 1 || get32(b + 12) != TIDE_KVS_NCOUNTERS)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "kv counters: version %u with %u counters (this build reads 1 with %d)",
                         get32(b + 8), get32(b + 12), TIDE_KVS_NCOUNTERS);
    if (get64(b + TIDE_KVS_COUNTERS_BYTES - 8) != tide_kvs_sum(b, TIDE_KVS_COUNTERS_BYTES - 8))
        return tide_fail(st, TIDE_ERR_FORMAT, "kv counters: checksum mismatch");
    c->id = get64(b + 16);
    c->updated = (int64_t)get64(b + 24);
    for (int i = 0; i < TIDE_KVS_NCOUNTERS; i++) {
        c->v[i] = (int64_t)get64(b + 32 + 8 * i);
        if (c->v[i] < 0) return tide_fail(st, TIDE_ERR_FORMAT, "kv counters: counter %d is negative", i);
    }
    if (c->updated < 0) return tide_fail(st, TIDE_ERR_FORMAT, "kv counters: negative time");
    return 0;
}

void tide_kvs_key_hex(tide_kvs_key k, char out[33]) {
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) out[i] = hx[(k.hi >> (60 - 4 * i)) & 15];
    for (int i = 0; i < 16; i++) out[16 + i] = hx[(k.lo >> (60 - 4 * i)) & 15];
    out[32] = 0;
}

int tide_kvs_key_parse(const char *s, tide_kvs_key *k) {
    uint64_t w[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return -1;
        w[i / 16] = w[i / 16] << 4 | (uint64_t)v;
    }
    k->hi = w[0];
    k->lo = w[1];
    return 0;
}
