/* Per-sequence decode state: everything a sequence carries from one step to
 * the next besides the shared KV pool.
 *   - pos: tokens committed so far (the next token's position);
 *   - the token history (engram n-grams, DSpark);
 *   - one window ring per layer (DSpark stages included): slot = pos % window,
 *     head_dim values each, FP8-simulated, RoPE'd;
 *   - per ratio>1 KV source, the compressor's partial group: the projected
 *     kv and gate scores of up to `ratio` tokens (slot = pos % ratio);
 *   - per KV source, the block table of its compressed latents / index keys
 *     and how many compressed positions exist;
 *   - which KV source's index keys are "published" (the reference's
 *     shared_attn.index_k, kept per sequence: see docs/model.md). */
#ifndef TIDE_CACHE_SEQ_CACHE_H
#define TIDE_CACHE_SEQ_CACHE_H

#include <stdint.h>

#include "cache/kv_pool.h"

typedef struct tide_seq_cache {
    int64_t pos;
    int32_t *tokens;
    int64_t cap_tokens;
    int n_layers;           /* rings */
    int window;
    int64_t head_dim;
    float *rings;           /* [n_layers][window][head_dim] */
    int n_src;              /* KV sources */
    int max_ratio;
    float *cmp_kv;          /* [n_src][max_ratio][head_dim] */
    float *cmp_score;       /* [n_src][max_ratio][head_dim] */
    tide_block_table *tables; /* [n_src] */
    int64_t *n_comp;        /* [n_src] compressed positions written */
    int published;          /* layer whose index keys are published, -1 none */
    /* DSpark: has the draft head's ring been seeded up to pos? (stage rings
     * are the last n_dspark rings) */
    int64_t dspark_pos;
} tide_seq_cache;

int tide_seq_cache_init(tide_seq_cache *c, int n_layers, int window, int64_t head_dim, int n_src,
                        int max_ratio, tide_status *st);
/* Releases the blocks to the pool and frees everything. */
void tide_seq_cache_free(tide_seq_cache *c, tide_kv_pool *pool);
/* Appends n tokens to the history (does not move pos). */
int tide_seq_cache_push_tokens(tide_seq_cache *c, const int32_t *tokens, int64_t n, tide_status *st);

static inline float *tide_seq_ring(const tide_seq_cache *c, int layer, int64_t pos) {
    return c->rings + ((int64_t)layer * c->window + pos % c->window) * c->head_dim;
}

#endif
