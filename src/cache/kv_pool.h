/* The paged pool of compressed KV: fixed-size blocks, each holding
 * `block_len` consecutive compressed positions of ONE KV source layer: for
 * every position its latent (head_dim values, FP4-simulated, RoPE'd) and its
 * index key (index_head_dim values, FP4-simulated). A sequence addresses its
 * positions through one block table per KV source (tide_block_table):
 * position j lives in block table[j / block_len], slot j % block_len. Blocks
 * come from a free list; nothing moves once written.
 *
 * Entries are stored packed in the release's formats (kv_pack.h): a latent
 * is FP4 e2m1 with an E4M3 scale per 16 (288 bytes at head_dim 512), an
 * index key FP4 e2m1 with a UE8M0 scale per 32 (68 bytes at 128). A block is
 * block_len positions of lat_bytes + key_bytes each, latent first. Every
 * position has a key slot, also for KV sources whose indexer does not own
 * keys (unused there).
 *
 * Blocks are reference counted so that the prefix cache can share full
 * blocks of global KV between sequences (read-only: a shared block is never
 * written again). Every holder owns one reference: a block table that lists
 * the block, or the prefix cache for a cached page. A block returns to the
 * free list when its last reference is dropped. A block reserved by
 * tide_kv_reserve starts with one reference (its table's): private blocks
 * behave exactly as before counts existed.
 */
#ifndef TIDE_CACHE_KV_POOL_H
#define TIDE_CACHE_KV_POOL_H

#include <stdint.h>

#include "base/status.h"
#include "cache/kv_pack.h"

typedef struct tide_kv_pool {
    int block_len;          /* compressed positions per block */
    int64_t latent_dim;     /* head_dim */
    int64_t key_dim;        /* index_head_dim */
    size_t lat_bytes;       /* packed latent: tide_kv_entry_bytes(TIDE_KV_LATENT, latent_dim) */
    size_t key_bytes;       /* packed key: tide_kv_entry_bytes(TIDE_KV_KEY, key_dim) */
    int64_t n_blocks;       /* capacity; grows on demand up to max_blocks */
    int64_t max_blocks;
    uint8_t **blocks;       /* [n_blocks] each block_len * (lat_bytes + key_bytes) bytes */
    int32_t *ref;           /* [n_blocks] references; 0 = on the free list */
    int32_t *free_list;
    int64_t n_free;
} tide_kv_pool;

typedef struct tide_block_table {
    int32_t *blocks;
    int64_t n, cap;
} tide_block_table;

/* max_blocks bounds the memory: an allocation beyond it fails with
 * TIDE_ERR_NOMEM ("KV pool exhausted"). */
int tide_kv_pool_init(tide_kv_pool *p, int block_len, int64_t latent_dim, int64_t key_dim,
                      int64_t max_blocks, tide_status *st);
void tide_kv_pool_free(tide_kv_pool *p);

/* Makes sure positions [0, n_pos) of table t have blocks (allocating the
 * missing ones from the pool, one reference each, held by t). */
int tide_kv_reserve(tide_kv_pool *p, tide_block_table *t, int64_t n_pos, tide_status *st);
/* Drops t's reference on each of its blocks (a block returns to the free list
 * when its count reaches 0) and empties t. */
void tide_kv_release(tide_kv_pool *p, tide_block_table *t);

/* Appends n referenced blocks to table t, taking one more reference on each
 * (t becomes a holder). All-or-nothing: a block id outside the pool or one
 * with no reference (free) fails the call with TIDE_ERR_INVALID and nothing
 * changes. The caller appends only full blocks at the table's end (t->n must
 * be the block index the first shared block is meant to have). */
int tide_kv_share(tide_kv_pool *p, tide_block_table *t, const int32_t *blocks, int64_t n,
                  tide_status *st);
/* One more reference on each of n blocks, for a holder that is not a table
 * (the prefix cache). Same checks as tide_kv_share, all-or-nothing. */
int tide_kv_ref(tide_kv_pool *p, const int32_t *blocks, int64_t n, tide_status *st);
/* One reference less on each of n blocks (returned to the free list at 0).
 * All-or-nothing: a block listed more often than it is referenced fails the
 * call (TIDE_ERR_INVALID) before any count changes. */
int tide_kv_unref(tide_kv_pool *p, const int32_t *blocks, int64_t n, tide_status *st);

/* The reference count of block b (0 = free); -1 for an id outside the pool. */
int32_t tide_kv_block_refs(const tide_kv_pool *p, int32_t b);
/* Blocks with at least one reference. */
static inline int64_t tide_kv_used(const tide_kv_pool *p) { return p->n_blocks - p->n_free; }
/* Blocks that can still be handed out (free ones plus those not yet grown). */
static inline int64_t tide_kv_available(const tide_kv_pool *p) {
    return p->max_blocks - p->n_blocks + p->n_free;
}

/* Bytes of one position (packed latent + packed key) and of one block. */
static inline size_t tide_kv_pos_bytes(const tide_kv_pool *p) { return p->lat_bytes + p->key_bytes; }
static inline size_t tide_kv_block_bytes(const tide_kv_pool *p) {
    return (size_t)p->block_len * tide_kv_pos_bytes(p);
}

/* Addresses of position j's packed latent / index key (j must be reserved). */
uint8_t *tide_kv_latent(const tide_kv_pool *p, const tide_block_table *t, int64_t j);
uint8_t *tide_kv_key(const tide_kv_pool *p, const tide_block_table *t, int64_t j);
/* Position j's latent (latent_dim floats) / index key (key_dim floats):
 * put packs raw (unsimulated) values, get decodes the simulated ones. */
void tide_kv_put_latent(const tide_kv_pool *p, const tide_block_table *t, int64_t j, const float *v);
void tide_kv_put_key(const tide_kv_pool *p, const tide_block_table *t, int64_t j, const float *v);
void tide_kv_get_latent(const tide_kv_pool *p, const tide_block_table *t, int64_t j, float *v);
void tide_kv_get_key(const tide_kv_pool *p, const tide_block_table *t, int64_t j, float *v);

#endif
