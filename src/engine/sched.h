/* The scheduler: which requests run in the next step, and how many tokens
 * each feeds (continuous batching with chunked prefill).
 *
 * Requests wait in a FIFO queue and run in admission order. Each step has a
 * token budget (max_step_tokens) and at most max_seqs sequences:
 *   1. running requests first, oldest first: each gets its next chunk (a
 *      prefill chunk, a recompute chunk or one decode token) if the budget
 *      allows; if the KV pool cannot hold the chunk's new blocks, the newest
 *      running requests are preempted (cache dropped, back to the FRONT of the
 *      queue, to be recomputed from position 0) until it can, or the request
 *      itself is, if it is the newest;
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
 * preemption follows the same plan, so it rebuilds the cache bit for bit. */
#ifndef TIDE_ENGINE_SCHED_H
#define TIDE_ENGINE_SCHED_H

#include <stdint.h>

#include "engine/request.h"
#include "model/forward.h"

typedef struct tide_sched_cfg {
    int max_seqs;
    int64_t max_step_tokens;
    int64_t prefill_chunk;   /* <= max_step_tokens */
    int flexible;            /* chunks may be cut anywhere (chunking-invariant forward) */
} tide_sched_cfg;

typedef struct tide_sched_item {
    tide_req *req;
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
    tide_sched_plan plan;
} tide_sched;

int tide_sched_init(tide_sched *s, const tide_sched_cfg *cfg, tide_fwd_ctx *fx, tide_status *st);
void tide_sched_free(tide_sched *s); /* frees the queues, not the requests */

/* KV blocks a sequence needs to hold positions [0, n_pos). */
int64_t tide_sched_blocks_for(const tide_sched *s, int64_t n_pos);
/* Blocks of the pool not held by any sequence. */
int64_t tide_sched_blocks_free(const tide_sched *s);

/* Queues a new WAITING request at the back. */
int tide_sched_enqueue(tide_sched *s, tide_req *q, tide_status *st);
/* Takes q out of the queue or the running set and drops its cache. */
void tide_sched_remove(tide_sched *s, tide_req *q);

/* Plans the next step into s->plan (admitting and preempting as needed).
 * Requests that cannot run at all (cache allocation failed) are removed and
 * listed in plan.failed. */
void tide_sched_make_plan(tide_sched *s);

#endif
