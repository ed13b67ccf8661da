/* The prefix cache index: which full pages of which token prefixes already
 * have their global KV computed, so that a new request sharing a prefix (a
 * system prompt, a conversation's earlier turns) skips their prefill.
 *
 * A page is `page_tokens` tokens. The key of page i of a sequence is a chain
 * hash: h_0 = H(root(salt), tokens of page 0), h_i = H(h_{i-1}, tokens of page
 * i), so the same tokens after a different prefix, or under another tenant's
 * salt, are different entries. The hash only finds candidates: every entry
 * stores its page's token ids, its salt and the unique serial number of its
 * parent entry, and a hit must match all three, so a 64-bit collision can
 * never hand out KV computed for other tokens (by induction over the chain,
 * the whole prefix matches).
 *
 * Pages and their references live in a tide_page_alloc; the index keeps at
 * most one entry per page. A cached page nobody references sits in the
 * allocator's free queue, in LRU order, and is evicted (its entry dropped)
 * only when an allocation reuses it. Only the global KV is shared this way;
 * the window rings are per sequence and rebuilt by recomputing the last
 * window of tokens (docs/engine.md).
 *
 * Not thread-safe: one owner (the scheduler thread) calls it.
 *
 * Typical use by the scheduler, per request:
 *     n_hit = lookup(prompt, n_prompt - 1, salt, pages)  -- takes references
 *     alloc the remaining pages; prefill from token n_hit * page_tokens
 *     insert(tokens, n, salt, pages, n_pages)   -- after prefill (and as decode fills pages)
 *     release(pages, n_pages)                   -- when the request ends or is preempted */
#ifndef TIDE_CACHE_PREFIX_H
#define TIDE_CACHE_PREFIX_H

#include <stdint.h>

#include "base/status.h"
#include "cache/page_alloc.h"

typedef struct tide_prefix_stats {
    int64_t lookups;       /* lookup calls */
    int64_t lookup_pages;  /* full pages asked for */
    int64_t hit_pages;     /* full pages found (hit rate = hit_pages / lookup_pages) */
    int64_t inserted;      /* entries created */
    int64_t evicted;       /* entries dropped to reuse their page */
    int32_t n_pages;       /* capacity */
    int32_t n_cached;      /* pages with an entry */
    int32_t n_in_use;      /* pages referenced by at least one sequence */
    int32_t n_free;        /* pages no sequence references (cached or empty) */
    int32_t n_idle;        /* cached pages no sequence references (evictable) */
} tide_prefix_stats;

/* Called when an entry is evicted (its page reused by tide_prefix_alloc, or
 * dropped by tide_prefix_evict), so that the owner can free what it keeps for
 * the page (the scheduler: its KV blocks). Not called when an insert merely
 * re-links an entry (the page stays cached). */
typedef void (*tide_prefix_evict_fn)(void *ctx, int32_t page);

typedef struct tide_prefix_cache {
    int32_t page_tokens;
    tide_page_alloc pages;
    /* entries, indexed by page id */
    uint8_t *cached;          /* [n_pages] 1 = the page has an entry */
    uint64_t *hash;           /* [n_pages] chain hash */
    uint64_t *salt;           /* [n_pages] */
    uint64_t *serial;         /* [n_pages] unique, never reused (0 = none) */
    uint64_t *parent;         /* [n_pages] serial of the previous page's entry, 0 for page 0 */
    int32_t *tokens;          /* [n_pages][page_tokens] */
    int32_t *chain;           /* [n_pages] next entry in the same bucket, -1 ends */
    int32_t *buckets;         /* [n_buckets] first entry, -1 empty */
    uint64_t bucket_mask;     /* n_buckets - 1 */
    uint64_t hash_mask;       /* all ones; fewer bits only in tests, to force collisions */
    uint64_t next_serial;
    int32_t n_idle;           /* cached pages with no reference */
    tide_prefix_evict_fn on_evict; /* optional; set after init */
    void *evict_ctx;
    tide_prefix_stats stats;
} tide_prefix_cache;

/* hash_bits: 64 in production; tests pass fewer to make collisions common. */
int tide_prefix_init(tide_prefix_cache *pc, int32_t page_tokens, int32_t n_pages, int hash_bits,
                     tide_status *st);
void tide_prefix_free(tide_prefix_cache *pc);

/* The chain hash (exposed for the persistent KV store, which keys pages the
 * same way): the root of a salt, and one page on top of its parent's hash. */
uint64_t tide_prefix_root(uint64_t salt);
uint64_t tide_prefix_page_hash(uint64_t parent, const int32_t *tokens, int32_t n);

/* The longest cached run of full pages at the start of tokens[0..n) under
 * `salt`: writes up to max_pages page ids to pages[] (taking one reference on
 * each) and their count to *n_hit. Pass n = prompt length - 1 to leave at
 * least one token to compute. */
int tide_prefix_lookup(tide_prefix_cache *pc, const int32_t *tokens, int64_t n, uint64_t salt,
                       int32_t *pages, int32_t max_pages, int32_t *n_hit, tide_status *st);

/* A page with one reference for a sequence: an empty free page if there is
 * one, else the least recently used unreferenced cached page, whose entry is
 * evicted. TIDE_ERR_NOMEM when every page is referenced. */
int tide_prefix_alloc(tide_prefix_cache *pc, int32_t *page, tide_status *st);

/* Registers the full pages of tokens[0..n) held in pages[0..n_pages) (the
 * sequence's pages in order; n_pages may exceed the full pages, the extra
 * are ignored). Pages already cached for this prefix are skipped; if another
 * page already holds an identical entry (two requests prefilled the same
 * prefix at once), that one stays and this page remains private. A page of
 * the caller's already cached with these tokens under an ancestor entry that
 * was evicted since is re-linked under the live chain. Fails on a page the
 * caller does not reference or one cached for other tokens; entries made
 * before the failing page stay (they are correct). */
int tide_prefix_insert(tide_prefix_cache *pc, const int32_t *tokens, int64_t n, uint64_t salt,
                       const int32_t *pages, int64_t n_pages, tide_status *st);

/* One more reference on each page (a fork sharing its parent's pages). */
int tide_prefix_share(tide_prefix_cache *pc, const int32_t *pages, int64_t n, tide_status *st);

/* Drops one reference on each page, last page first, so that a sequence's
 * deeper pages are evicted before the pages they extend. */
int tide_prefix_release(tide_prefix_cache *pc, const int32_t *pages, int64_t n, tide_status *st);

/* Evicts up to max_pages unreferenced cached pages, least recently used
 * first (e.g. to empty the cache); returns how many. */
int32_t tide_prefix_evict(tide_prefix_cache *pc, int32_t max_pages);

tide_prefix_stats tide_prefix_get_stats(const tide_prefix_cache *pc);

#endif
