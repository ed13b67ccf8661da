/* The interface through which the scheduler hands pages of global KV to
 * the tiers behind the prefix cache (host memory, local SSD, a shared
 * store: kvstore_tiers.h) and asks for them back. The scheduler knows
 * nothing of the tiers; the tiers nothing of the scheduler.
 *
 * A page is identified by what the prefix cache keys it by: the tenant's
 * salt and the tokens of the whole prefix up to the page's end (the tier
 * derives its own key from them and the model's fingerprint). Its data is
 * the page's global KV as the pool holds it: for each KV source in order,
 * its blocks of the page in order, each block_len positions of a packed
 * latent and a packed index key (kv_pool.h, kv_pack.h: tide_kv_block_bytes
 * bytes per block). A page boundary is a multiple of every compress ratio, so no
 * compressor partial group ever straddles one, and the window rings are
 * never stored (a restore rebuilds them by bounded replay). */
#ifndef TIDE_CACHE_KV_TIER_H
#define TIDE_CACHE_KV_TIER_H

#include <stdint.h>

typedef struct tide_kv_page {
    uint64_t salt;
    const int32_t *tokens; /* the prefix [0, n_tokens); the page is its last page_tokens */
    int64_t n_tokens;
    int64_t page_tokens;
    uint64_t chain;        /* the prefix cache's chain hash of the page (prefix.h) */
    uint8_t *data;         /* [n_bytes]: put reads it, get fills it */
    int64_t n_bytes;
    int klass;             /* put: the store class (TIDE_KV_CHAT / TIDE_KV_AGENT, kvstore.h) of the
                            * request's pages, or -1: the tier's default */
} tide_kv_page;

typedef struct tide_kv_tier {
    void *ctx;
    /* A page just registered in the prefix cache: keep it. Must copy what
     * it needs and return at once (the write happens behind the request). */
    void (*put)(void *ctx, const tide_kv_page *pg);
    /* A page the prefix cache does not have: fill pg->data and return 1 if
     * a tier holds it, 0 if not. Called in page order at admission. */
    int (*get)(void *ctx, tide_kv_page *pg);
    /* Optional (NULL: none): returns once every page put so far is
     * written, so that another process can read it (tide route's
     * disaggregated prefill). Not called by the scheduler. */
    void (*flush)(void *ctx);
    /* Optional (NULL: get reads at once, and may wait for the disk). Starts
     * reading, in the background, up to n_pages consecutive pages of a
     * prefix, the first being pg's (pg->n_tokens = its end; pg->tokens must
     * hold n_pages more pages of tokens, copied), stopping at the first
     * miss; the pages found wait for get, which then does no I/O. Returns
     * a ticket (> 0), 0 when nothing was started. Must return at once. */
    uint64_t (*prefetch)(void *ctx, const tide_kv_page *pg, int64_t n_pages);
    /* Whether the ticket's reads are done, waiting up to wait_s seconds. */
    int (*ready)(void *ctx, uint64_t ticket, double wait_s);
    /* Forgets a ticket (done or not); pages get did not take are dropped. */
    void (*forget)(void *ctx, uint64_t ticket);
} tide_kv_tier;

#endif
