/* The scheduler: which requests run in the next step, and how many tokens
 * each feeds (continuous batching with chunked prefill).
 *
 * Requests wait in a FIFO queue and run in admission order. Each step has a
 * token budget (max_step_tokens) and at most max_seqs sequences:
 *   1. running requests first, oldest first: each gets its next chunk (a
 *      prefill chunk, a recompute chunk or one decode token) if the budget
 *      allows; if the KV pool cannot hold the chunk's new blocks, the newest
 *      running requests are preempted (cache dropped, back to the FRONT of the
 *      queue, to be recomputed from position 0, or from what of it is still
 *      in the prefix cache) until it can, or the request itself is, if it is
 *      the newest; a request of the step in flight is never preempted (the
 *      chunk waits a step instead);
 *   2. then waiting requests, in order, while a sequence slot, budget and KV
 *      blocks for their first chunk remain (the head blocks the queue: no
 *      overtaking, so nobody starves).
 *
 * Chunk sizes. With a chunking-invariant forward pass (canonical layout and
 * no index-key quirk: docs/model.md) a chunk is cut to whatever budget is
 * left. Otherwise results depend on chunk boundaries, so a request's chunks
 * are a fixed function of the request alone: the prompt in chunks of
 * prefill_chunk tokens from position 0, then one token per step; a chunk that
 * does not fit the remaining budget waits for a later step. Recompute after
 * preemption follows the same plan, so it rebuilds the cache bit for bit.
 *
 * Prefix cache (when on). A page is page_tokens consecutive positions; its
 * global KV is a fixed set of pool blocks, page_tokens / ratio / block_len
 * per KV source. At admission the request's tokens (less the last) are looked
 * up; a hit of h pages shares those pages' blocks into the new sequence's
 * tables (only the missing blocks count against the pool) and restores the
 * sequence at start = max(0, h * page_tokens - replay): the tokens
 * [start, h * page_tokens) are fed again to rebuild the window rings (SWA
 * bounded replay) while the shared global KV is only read. After each step a
 * running request's newly completed pages are registered; the cache then
 * holds one reference on their blocks, so they outlive the request. Cached
 * pages nobody references count as free for admission and are evicted,
 * least recently used first, when their blocks are needed.
 *
 * Inexact pages. A hit restored with a bounded replay (start > 0) rebuilds
 * the window rings from `replay` tokens only, so every page the request
 * computes after the hit follows that approximation, and so do the pages of
 * a request that hit an inexact page. By default such pages stay private to
 * the request (never registered), so the approximation cannot spread to
 * later requests; with cache_inexact they are registered and marked, and a
 * hit on one makes the hitter's later pages inexact in turn.
 *
 * Decoder variant (decoder_tail > 0). A sequence started at admission
 * (fresh, restored from a hit, or recomputed after a preemption) gets
 * tail_lo = its length - decoder_tail: the rows before it skip the layers
 * above the last KV source. Those layers make no global KV, so the pages
 * it registers are the same either way. */
#ifndef TIDE_ENGINE_SCHED_H
#define TIDE_ENGINE_SCHED_H

#include <stdint.h>

#include "cache/prefix.h"
#include "engine/request.h"
#include "model/forward.h"

typedef struct tide_sched_cfg {
    int max_seqs;
    int64_t max_step_tokens;
    int64_t prefill_chunk;   /* <= max_step_tokens */
    int flexible;            /* chunks may be cut anywhere (chunking-invariant forward) */
    int prefix_cache;        /* 1 = on */
    int64_t page_tokens;     /* 0 = derived (see tide_sched_page_unit) */
    int64_t prefix_replay;   /* -1 = the whole prefix */
    int cache_inexact;       /* 1 = register pages computed after a bounded replay too (marked) */
    int64_t decoder_tail;    /* > 0: the decoder variant's tail (tide_seq_cache.tail_lo); 0 = off */
    /* Tiers behind the prefix cache (cache/kv_tier.h; NULL = none): pages
     * the cache registers are handed to tier->put, and a new request's
     * pages the cache lacks are asked of tier->get when it is queued. */
    const struct tide_kv_tier *tier;
} tide_sched_cfg;

/* The prefix cache's side of the scheduler: the page index and, per page, the
 * pool blocks of its global KV. The cache holds one reference on the blocks
 * of every page that has an entry (held[p] == pc.cached[p] at all times). */
typedef struct tide_sched_prefix {
    tide_prefix_cache pc;
    int64_t page_tokens;
    int64_t replay;
    int bpp;                         /* blocks per page, all sources */
    int src_off[TIDE_MAX_LAYERS + 1];/* source k's blocks: [src_off[k], src_off[k+1]) of a page */
    int32_t *blocks;                 /* [n_pages][bpp] */
    uint8_t *held;                   /* [n_pages] */
    uint8_t *inexact;                /* [n_pages] the page's KV follows a bounded replay (cache_inexact) */
    int64_t lookup_tokens, hit_tokens, replay_tokens, hits;
    int64_t inexact_admissions;      /* admissions whose new pages are inexact */
    int64_t withheld_pages;          /* inexact pages kept out of the cache (cache_inexact 0) */
    int64_t inexact_cached;          /* inexact pages registered (cache_inexact 1) */
    uint8_t *tier_buf;               /* one page's packed KV, for the tiers (cfg.tier) */
    int64_t tier_bytes;
    int64_t tier_fetched, tier_stored; /* pages brought in from / handed to the tiers */
    int64_t planned_blocks;          /* blocks the pending plan will reserve (tiers leave them) */
} tide_sched_prefix;

typedef struct tide_sched_item {
    tide_req *req;
    int64_t pos;             /* where the chunk starts (the cache's position once the pass in flight is done) */
    int64_t n_tokens;        /* tokens req->tokens[pos, pos + n) */
    int logits;              /* TIDE_LOGITS_LAST when the chunk reaches the end: sample after */
} tide_sched_item;

typedef struct tide_sched_plan {
    tide_sched_item *items;  /* [max_seqs] */
    int n_items;
    int64_t n_tokens;
    tide_req **failed;       /* [max_seqs] requests dropped while planning (error set) */
    int n_failed;
} tide_sched_plan;

typedef struct tide_sched {
    tide_sched_cfg cfg;
    tide_fwd_ctx *fx;
    int n_src;
    int ratio[TIDE_MAX_LAYERS]; /* compress ratio of each KV source */
    tide_req **wq;              /* waiting: ring buffer */
    int64_t wq_head, wq_n, wq_cap;
    tide_req **running;         /* [max_seqs], admission order */
    int n_running;
    int64_t preemptions;
    int64_t decoder_rows_skipped; /* rows fed below their tail_lo */
    tide_sched_plan plan;       /* the next step's */
    /* The step launched and not yet completed (tide_sched_launch ..
     * tide_sched_land): a copy of its plan. Planning the next step while it
     * is in flight reads only these copies for its requests (never their
     * caches' positions, which the pass advances), does not preempt them,
     * and plans a request whose row is being sampled one decode token ahead
     * (the token is appended before that step launches) unless that token
     * is its last (max_tokens). */
    tide_sched_plan flight;
    int prefix_on;
    tide_sched_prefix px;       /* valid when prefix_on */
} tide_sched;

/* Validates the prefix-cache settings against the model (page_tokens a
 * multiple of every ratio x block_len) and sizes the page index from the
 * pool (kv_max_blocks / blocks per page, capped at 2^16, + max_seqs). */
int tide_sched_init(tide_sched *s, const tide_sched_cfg *cfg, tide_fwd_ctx *fx, tide_status *st);
void tide_sched_free(tide_sched *s); /* frees the queues, not the requests */

/* The granule of page_tokens: the least common multiple of the KV sources'
 * compress ratios times the pool's block_len. */
int64_t tide_sched_page_unit(tide_fwd_ctx *fx);

/* KV blocks a sequence needs to hold positions [0, n_pos). */
int64_t tide_sched_blocks_for(const tide_sched *s, int64_t n_pos);
/* Blocks of the pool not held by any sequence. */
int64_t tide_sched_blocks_free(const tide_sched *s);

/* Queues a new WAITING request at the back. With tiers (cfg.tier), first
 * brings the pages of its prefix that the cache lacks and a tier holds into
 * the cache (as cached pages nobody uses yet), so that its admission hits
 * them: this runs between steps, never while a pass is in flight. */
int tide_sched_enqueue(tide_sched *s, tide_req *q, tide_status *st);
/* Takes q out of the queue or the running set and the plan, and drops its
 * cache (never called on a request in flight while its pass runs). */
void tide_sched_remove(tide_sched *s, tide_req *q);

/* A failed pass (engine.c): q, one of its batch, goes back to the front of
 * the queue without its cache (like a preemption: recomputed, with the same
 * tokens) and is admitted alone (q->solo), so that a request whose pass
 * fails by itself can be failed without failing the rest. Call for the
 * batch newest first, to keep their order. */
void tide_sched_retry_alone(tide_sched *s, tide_req *q);

/* Plans the next step into s->plan (admitting and preempting as needed).
 * With a step in flight (s->flight) it plans from where that step will
 * leave its requests (see tide_sched's flight), so it may run while the
 * pass does: it touches only the queues, the requests not in flight, the
 * pool's block bookkeeping and the prefix cache, none of which the pass in
 * flight uses once tide_sched_reserve has run.
 * Requests that cannot run at all (cache allocation failed) are removed and
 * listed in plan.failed. Evicts cached pages so that the pool's free blocks
 * cover what the plan's chunks will reserve. */
void tide_sched_make_plan(tide_sched *s);

/* Moves the plan to the flight (the plan is then empty). After
 * tide_sched_reserve. */
void tide_sched_launch(tide_sched *s);
/* The step in flight is complete (sampled and reported). */
void tide_sched_land(tide_sched *s);

/* The launch's host side: reserves in every planned sequence's tables the
 * KV blocks its chunk writes (what tide_forward would reserve itself), so
 * that the forward pass then never touches the pool's free list or grows
 * the pool. A GPU backend needs the block tables final before it copies
 * them to the device, and overlapped planning needs the pool left alone by
 * the pass in flight (docs/engine.md, "Overlapped scheduling"). Fails on an
 * exhausted pool (planning makes that impossible); blocks reserved before
 * the failure stay in their tables and go back when the caller drops the
 * failed requests. */
int tide_sched_reserve(tide_sched *s, tide_status *st);

/* After the forward pass in flight succeeded: registers the pages the
 * flight's requests completed (prefix cache on; never fails: a page that
 * cannot be registered just stays private). */
void tide_sched_after_step(tide_sched *s);

/* Evicts every cached page nobody references; returns how many. */
int64_t tide_sched_clear_prefix(tide_sched *s);

/* Checks the reference counts: every pool block's count equals the number of
 * sequence tables listing it plus the cached pages owning it, and every
 * page's count the number of running requests listing it. For tests. */
int tide_sched_check(const tide_sched *s, tide_status *st);

#endif
