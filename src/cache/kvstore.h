/* The persistent KV store: pages of global KV (docs/kvstore.md) on disk,
 * erasure coded over node directories, kept for days.
 *
 * A store is n = k + m node directories (separate disks, or mounts of a
 * shared file system on several hosts); every page is cut into k data and m
 * parity shards (Reed-Solomon, kvstore_ec.h), shard i in node i, each file
 * checksummed and named by the page's 128-bit key (kvstore_fmt.h). The local
 * SSD tier is the same store with one node and k = 1, m = 0.
 *
 *   - put: encode, write every shard crash-safely in one io_uring batch
 *     (kvstore_io.h); fails cleanly (nothing left behind) when fewer than
 *     min_write_shards land: a full disk or a node gone;
 *   - get: read the shards in one batch, drop any that fail their checksums,
 *     rebuild from parity when up to m are missing or corrupt (the shards
 *     found bad are queued for repair: tide_kvstore_repair), verify the whole
 *     page's checksum; fewer than k good shards is a miss, never wrong data;
 *   - retention: every page expires ttl seconds after it was written (per
 *     traffic class, or per put); capacity_bytes bounds the shard bytes, the
 *     least recently used pages going first; gc deletes what expired and
 *     what no longer reads, and temporary files a crash left;
 *   - the index (key -> sizes, shards present, times) lives in memory and is
 *     rebuilt on open from the shard headers.
 *
 * Thread-safe (one mutex): the engine reads while a writer thread writes. */
#ifndef TIDE_CACHE_KVSTORE_H
#define TIDE_CACHE_KVSTORE_H

#include <stdint.h>

#include "base/status.h"
#include "cache/kvstore_fmt.h"

enum { TIDE_KV_CHAT = 0, TIDE_KV_AGENT = 1, TIDE_KV_CLASSES = 2 };

/* Seconds since the epoch; tests pass a fake one. */
typedef int64_t (*tide_kv_clock_fn)(void *ctx);

typedef struct tide_kvstore_cfg {
    const char *const *nodes; /* n_nodes directories (created when missing) */
    int n_nodes;
    int k, m;                 /* k + m == n_nodes; defaults 10 + 2 for 12 nodes */
    int min_write_shards;     /* a put needs this many shards written; 0 = all */
    /* The model's: shards of another model are ignored. 0 = every model's
     * (maintenance: tide kv); pages are then written with fingerprint 0. */
    uint64_t fingerprint;
    uint64_t capacity_bytes;  /* shard file bytes; 0 = unlimited */
    int64_t ttl[TIDE_KV_CLASSES]; /* seconds; 0 = the default (chat 7 days, agent 3 days) */
    /* 1 = buffered I/O (no O_DIRECT) and no fsync: a killed process still
     * never leaves a torn page (the rename is atomic and the page cache
     * outlives the process), but a power loss may. For tests and scratch
     * stores. */
    int no_sync;
    tide_kv_clock_fn clock;   /* NULL = the system clock */
    void *clock_ctx;
    /* 1 = a get of a page the index lacks (or holds too few shards of)
     * reads those shards' headers from disk: pages another process wrote
     * since this one opened the store (tide serve and tide run set it:
     * tide route's decode replicas read what its prefill replicas wrote). */
    int scan_misses;
} tide_kvstore_cfg;

typedef struct tide_kvstore_stats {
    int64_t pages, bytes;          /* in the index: pages, shard file bytes */
    int64_t pages_class[TIDE_KV_CLASSES];
    int64_t degraded;              /* pages with shards missing (readable while >= k) */
    int64_t foreign;               /* shards of other models or unreadable headers, seen at open */
    int64_t hits, misses, expired_misses, lost; /* lost: found but < k good shards */
    int64_t puts, put_errors, bytes_written, bytes_read;
    int64_t corrupt_shards, repairs, evictions, expired;
    double encode_seconds, decode_seconds; /* with the bytes they coded */
    int64_t encode_bytes, decode_bytes;
    int64_t host_hits;             /* the host tier's hits (tide_kvstore_set_host_hits) */
    int64_t processes;             /* tide_kvstore_load_counters: process records summed */
} tide_kvstore_stats;

typedef struct tide_kvstore tide_kvstore;

/* nodes[i] holds shard i. k = m = 0 in cfg picks 10 + 2 for 12 nodes, and
 * n + 0 otherwise. Rebuilds the index from the shard headers. */
int tide_kvstore_open(const tide_kvstore_cfg *cfg, tide_kvstore **out, tide_status *st);
void tide_kvstore_close(tide_kvstore *s);

/* Stores a page (klass picks the ttl, unless ttl_s > 0). A page already
 * stored is only refreshed (not rewritten). */
int tide_kvstore_put(tide_kvstore *s, tide_kvs_key key, uint64_t chain, const void *page, uint64_t bytes, int klass,
                     int64_t ttl_s, tide_status *st);

/* Reads a page into out[0, cap): *found = 1 and *bytes on a hit; *found = 0
 * on a miss (absent, expired, or fewer than k good shards). Fails only on a
 * page larger than cap or out of memory. */
int tide_kvstore_get(tide_kvstore *s, tide_kvs_key key, void *out, uint64_t cap, uint64_t *bytes, int *found,
                     tide_status *st);
/* Whether the index has the page (not expired): no I/O. */
int tide_kvstore_has(tide_kvstore *s, tide_kvs_key key);

typedef struct tide_kvstore_report {
    int64_t pages, ok, repaired, lost, deleted, tmp_removed;
} tide_kvstore_report;

/* Reads every page, rewriting shards that are missing or corrupt (at most
 * m per page); pages with fewer than k good shards count as lost. */
int tide_kvstore_verify(tide_kvstore *s, tide_kvstore_report *r, tide_status *st);
/* Repairs the pages reads found degraded since the last call. */
int tide_kvstore_repair(tide_kvstore *s, tide_kvstore_report *r, tide_status *st);
/* Deletes expired pages, pages that cannot be read (fewer than k shards in
 * the index), temporary files older than an hour, then least recently used
 * pages down to the capacity. */
int tide_kvstore_gc(tide_kvstore *s, tide_kvstore_report *r, tide_status *st);

typedef struct tide_kvstore_entry {
    tide_kvs_key key;
    uint64_t chain, page_bytes, fingerprint;
    int klass, shards;             /* shards present on disk */
    int64_t created, expires, used;
} tide_kvstore_entry;

/* Calls fn for every page in the index (under the store's lock: fn must not
 * call the store). */
void tide_kvstore_each(tide_kvstore *s, void (*fn)(void *ctx, const tide_kvstore_entry *e), void *ctx);

/* This process's counts (since open) and the index's figures. */
void tide_kvstore_get_stats(tide_kvstore *s, tide_kvstore_stats *out);

/* Persisted counters (the counters record of kvstore_fmt.h): every process
 * that counted something keeps one record in the store, rewritten by
 * tide_kvstore_save_counters (the tiers' upkeep calls it, and close), so
 * that `tide kv stat` shows what the store did across processes and
 * restarts. load_counters is get_stats with the counters summed over every
 * record on disk and this process's own (out->processes says how many). gc
 * folds the records not updated for a day (their processes are gone) into
 * one. Monitoring figures: a crash between a fold's deletes and its rename,
 * or two folds at once on two hosts, may lose counts; a process silent for a
 * day that then saves again is counted twice. */
int tide_kvstore_save_counters(tide_kvstore *s, tide_status *st);
int tide_kvstore_load_counters(tide_kvstore *s, tide_kvstore_stats *out, tide_status *st);
/* The host tier's hits in this process, kept with the store's counters
 * (the tiers set it: host hits are a tier's, not a store's). */
void tide_kvstore_set_host_hits(tide_kvstore *s, int64_t hits);
int64_t tide_kvstore_now(const tide_kvstore *s);
int tide_kvstore_k(const tide_kvstore *s);
int tide_kvstore_m(const tide_kvstore *s);

#endif
