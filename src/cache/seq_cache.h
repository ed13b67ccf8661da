/* Per-sequence decode state: everything a sequence carries from one step to
 * the next besides the shared KV pool.
 *   - pos: tokens committed so far (the next token's position);
 *   - the token history (engram n-grams, DSpark);
 *   - one window ring per layer (DSpark stages included): slot = pos % window,
 *     one packed FP8 entry each (kv_pack.h: head_dim e4m3 codes + a UE8M0
 *     scale per 32, ring_bytes in all), RoPE'd;
 *   - per ratio>1 KV source, the compressor's partial group: the projected
 *     kv and gate scores of up to `ratio` tokens (slot = pos % ratio);
 *   - per KV source, the block table of its compressed latents / index keys
 *     and how many compressed positions exist;
 *   - which KV source's index keys are "published" (the reference's
 *     shared_attn.index_k, kept per sequence: see docs/model.md);
 *   - the bounds below which window entries do not exist (prefix-cache
 *     restore, the decoder variant: docs/replay.md).
 *
 * A checkpoint (tide_seq_checkpoint / tide_seq_rollback) saves what a
 * speculative step of up to max_ahead tokens can overwrite, so that the
 * sequence can be put back exactly as if only the accepted tokens had been
 * fed. */
#ifndef TIDE_CACHE_SEQ_CACHE_H
#define TIDE_CACHE_SEQ_CACHE_H

#include <stdint.h>

#include "cache/kv_pool.h"

/* What the cache needs to know about each KV source (filled by the forward
 * pass's tide_fwd_seq_init; ratio 1 / layer -1 / publishes 0 otherwise). */
typedef struct tide_seq_src {
    int layer;      /* the KV source layer */
    int ratio;      /* its compress ratio */
    int publishes;  /* its indexer owns (and so publishes) its index keys */
} tide_seq_src;

struct tide_seq_ckpt;

typedef struct tide_seq_cache {
    int64_t pos;
    int32_t *tokens;
    int64_t cap_tokens;
    int n_layers;           /* rings */
    int window;
    int64_t head_dim;
    size_t ring_bytes;      /* one packed window entry: tide_kv_entry_bytes(TIDE_KV_WINDOW, head_dim) */
    uint8_t *rings;         /* [n_layers][window][ring_bytes] */
    int n_src;              /* KV sources */
    int max_ratio;
    float *cmp_kv;          /* [n_src][max_ratio][head_dim] */
    float *cmp_score;       /* [n_src][max_ratio][head_dim] */
    tide_block_table *tables; /* [n_src] */
    int64_t *n_comp;        /* [n_src] compressed positions written */
    tide_seq_src *src;      /* [n_src] */
    int published;          /* layer whose index keys are published, -1 none */
    /* DSpark: has the draft head's ring been seeded up to pos? (stage rings
     * are the last n_dspark rings) */
    int64_t dspark_pos;
    /* Prefix-cache restore (SWA bounded replay, docs/replay.md). Both 0 for
     * an ordinary sequence.
     *   frozen_tokens: the global KV (compressed latents and index keys of
     *     every KV source) of tokens [0, frozen_tokens) is already in the
     *     pool, in blocks shared with other sequences: the forward pass reads
     *     it and never writes it (groups ending at or below it are skipped).
     *     A multiple of every compress ratio.
     *   ring_lo: window entries of positions below ring_lo do not exist
     *     (they were never computed for this sequence): attention treats them
     *     as empty slots. A restored sequence starts at pos = ring_lo =
     *     frozen_tokens - replay and feeds tokens [ring_lo, frozen_tokens)
     *     again as an ordinary chunk. */
    int64_t frozen_tokens;
    int64_t ring_lo;
    /* The decoder variant (opt-in, set by the caller; 0 = off): rows at
     * positions below tail_lo skip the layers above the last KV source (they
     * produce no global KV; only the prompt's tail needs them), and window
     * entries of those layers and of the DSpark stages at positions below
     * tail_lo do not exist. Logits can only be asked of rows >= tail_lo.
     * It is a cache field rather than a tide_step_seq field so that the
     * step struct's positional initialisers elsewhere stay valid. */
    int64_t tail_lo;
    /* The active checkpoint, if any: the forward pass logs the compressor
     * inputs of the positions it covers there (see tide_seq_checkpoint). */
    struct tide_seq_ckpt *ckpt;
} tide_seq_cache;

int tide_seq_cache_init(tide_seq_cache *c, int n_layers, int window, int64_t head_dim, int n_src,
                        int max_ratio, tide_status *st);
/* Releases the blocks to the pool and frees everything. */
void tide_seq_cache_free(tide_seq_cache *c, tide_kv_pool *pool);
/* Appends n tokens to the history (does not move pos). */
int tide_seq_cache_push_tokens(tide_seq_cache *c, const int32_t *tokens, int64_t n, tide_status *st);

/* The packed window entry of position pos in layer's ring. */
static inline uint8_t *tide_seq_ring(const tide_seq_cache *c, int layer, int64_t pos) {
    return c->rings + (size_t)((int64_t)layer * c->window + pos % c->window) * c->ring_bytes;
}
/* Its values (head_dim floats, FP8-simulated) / packing raw values into it. */
static inline void tide_seq_ring_get(const tide_seq_cache *c, int layer, int64_t pos, float *v) {
    tide_kv_unpack(TIDE_KV_WINDOW, tide_seq_ring(c, layer, pos), c->head_dim, v);
}
static inline void tide_seq_ring_put(const tide_seq_cache *c, int layer, int64_t pos, const float *v) {
    tide_kv_pack(TIDE_KV_WINDOW, v, c->head_dim, tide_seq_ring(c, layer, pos));
}

/* A checkpoint for speculative decoding. Zero-initialise it before the first
 * use; it may be reused for many rounds and is freed with tide_seq_ckpt_free.
 * What it holds: the scalar state at the checkpoint, the ring slots that
 * positions pos .. pos+max_ahead-1 will overwrite, the partial groups, and a
 * log (written by the forward pass) of the compressor inputs of those
 * positions: a draft that crosses a group boundary overwrites partial-group
 * slots of accepted positions with rejected ones, and the log restores them. */
typedef struct tide_seq_ckpt {
    int64_t pos, dspark_pos, tail_lo;
    int published;
    int max_ahead;
    /* Set by the caller after tide_seq_checkpoint (which clears it): the
     * rows fed under this checkpoint compute what one-token steps at their
     * positions would (the forward pass's decode numerics, docs/model.md
     * "Decode rows"), and rollback restores `published` by the one-token-step
     * rule. For verifying drafts in the reference's layout and quirk. */
    int decode_rows;
    uint8_t *ring;     /* [n_layers][max_ahead][ring_bytes] (packed entries) */
    float *part_kv;    /* [n_src][max_ratio][head_dim] */
    float *part_score;
    float *log_kv;     /* [n_src][max_ahead][head_dim] */
    float *log_score;
    float *buf;        /* the one allocation the arrays above point into */
    size_t cap;        /* its size in floats (kept across rounds) */
} tide_seq_ckpt;

/* Takes a checkpoint of c before feeding up to max_ahead tokens (1 ..
 * window), replacing any checkpoint active on c. The forward pass refuses to
 * feed c past ck->pos + max_ahead while it is active. */
int tide_seq_checkpoint(tide_seq_cache *c, tide_seq_ckpt *ck, int max_ahead, tide_status *st);
/* Puts c back exactly as if only `keep` of the tokens fed since the
 * checkpoint had been fed (as one chunk, or one token per step with
 * ck->decode_rows): pos, history length, ring slots,
 * partial groups, n_comp, published, dspark_pos. KV pool blocks beyond the
 * need are kept (their stale positions are never read before being
 * rewritten). 0 <= keep <= tokens fed. Detaches the checkpoint. */
int tide_seq_rollback(tide_seq_cache *c, tide_seq_ckpt *ck, int64_t keep, tide_status *st);
void tide_seq_ckpt_free(tide_seq_ckpt *ck);

/* The reference's index-key republish rule, one token per step: the layer
 * whose keys are published after positions [from, end) were decoded one at
 * a time from state `published` (at each position the highest publishing
 * source whose ratio-r group completes there; unchanged where none does). */
int tide_seq_published_after(const tide_seq_cache *c, int published, int64_t from, int64_t end);
/* In the one-token step of position t (from <= t), once the layers up to
 * `layer` ran: a publishing source at or below `layer` whose group completes
 * at t, else the state after t - 1. */
int tide_seq_published_at(const tide_seq_cache *c, int published, int64_t from, int64_t t, int layer);

/* The compressor input log of source `slot` at position p (NULL when no
 * checkpoint covers p): where the forward pass copies kv / score rows. */
float *tide_seq_ckpt_log(const tide_seq_cache *c, int slot, int64_t p, int score);

#endif
