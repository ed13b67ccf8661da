/* The tiers behind the prefix cache: host memory (an LRU of pages, sized
 * in bytes), then any number of persistent stores in lookup order (the
 * local SSD tier, then the shared store: kvstore.h). Implements the
 * scheduler's tide_kv_tier (kv_tier.h):
 *   - put copies the page into a write queue and returns; a writer thread
 *     (the page's traffic class is its request's, tide_request.kv_class,
 *     else the tiers' klass);
 *     writes it to every store (a store that fails, a full disk or a node
 *     gone, is skipped: the others still get the page; serving goes on),
 *     then keeps it in the host LRU. A full queue drops the page (counted):
 *     the request is never made to wait;
 *   - get looks in the host LRU, then each store in order; a store hit is
 *     kept in the host LRU;
 *   - prefetch hands a request's missing pages to a reader thread, which
 *     reads them (host LRU, then the stores) ahead of its admission into
 *     a staging list that get looks in first, so the engine thread never
 *     waits for the disk (ready says when a ticket's reads are done);
 *   - the writer thread also runs the stores' expiry sweep (gc) every
 *     sweep_s seconds and repairs pages reads found degraded.
 * A page's key: XXH3-128 of the prefix's token ids, seeded by the tenant's
 * salt and the model fingerprint (tide_kv_fingerprint), so one store can
 * serve many models and tenants without ever mixing them up. */
#ifndef TIDE_CACHE_KVSTORE_TIERS_H
#define TIDE_CACHE_KVSTORE_TIERS_H

#include "cache/kv_tier.h"
#include "cache/kvstore.h"

typedef struct tide_kvtiers_cfg {
    uint64_t host_bytes;       /* host LRU capacity; 0 = no host tier */
    uint64_t queue_bytes;      /* write queue bound; 0 = 256 MiB */
    tide_kvstore *stores[4];   /* borrowed, in lookup order */
    int n_stores;
    uint64_t fingerprint;      /* tide_kv_fingerprint */
    int klass;                 /* traffic class of the pages written (TIDE_KV_CHAT ...) */
    int64_t ttl_s;             /* 0 = the class's */
    int64_t sweep_s;           /* 0 = 600 */
} tide_kvtiers_cfg;

typedef struct tide_kvtiers_stats {
    int64_t host_hits, store_hits[4], misses;
    int64_t prefetches, prefetched, staged_hits; /* tickets, pages read ahead, gets served from them */
    int64_t queued, written, write_errors, dropped;
    int64_t host_pages, host_bytes, host_evictions;
    int64_t sweeps;
} tide_kvtiers_stats;

typedef struct tide_kvtiers tide_kvtiers;

int tide_kvtiers_create(const tide_kvtiers_cfg *cfg, tide_kvtiers **out, tide_status *st);
/* Writes what is queued, stops the writer thread, frees. */
void tide_kvtiers_destroy(tide_kvtiers *t);
/* Waits until every page queued so far is written. */
void tide_kvtiers_flush(tide_kvtiers *t);
/* The hooks for tide_engine_config.kv_tier (valid while t lives). */
const tide_kv_tier *tide_kvtiers_hooks(tide_kvtiers *t);
void tide_kvtiers_get_stats(tide_kvtiers *t, tide_kvtiers_stats *out);
/* Store i of the lookup order (NULL beyond), for its own statistics. */
tide_kvstore *tide_kvtiers_store(const tide_kvtiers *t, int i);

/* The store key of a page (see above). */
tide_kvs_key tide_kv_page_key(uint64_t fingerprint, uint64_t salt, const int32_t *tokens, int64_t n_tokens);

/* A model's fingerprint: config.json and, per *.safetensors file (in name
 * order), its size and the XXH3 of its first and last MiB, mixed with the
 * n layout parameters that change what a page holds (kv_block, page_tokens,
 * floats per page, the forward pass's modes). */
int tide_kv_fingerprint(const char *model_dir, const int64_t *params, int n, uint64_t *out, tide_status *st);

#endif
