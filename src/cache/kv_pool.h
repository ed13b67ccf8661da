/* The paged pool of compressed KV: fixed-size blocks, each holding
 * `block_len` consecutive compressed positions of ONE KV source layer of ONE
 * sequence: for every position its latent (head_dim values, FP4-simulated,
 * RoPE'd) and its index key (index_head_dim values, FP4-simulated). A
 * sequence addresses its positions through one block table per KV source
 * (tide_block_table): position j lives in block table[j / block_len], slot
 * j % block_len. Blocks come from a free list; nothing moves once written.
 *
 * Values are stored as f32 holding the simulated (exactly representable)
 * numbers: the CPU reference trades memory for simplicity. A packed FP4 pool
 * (288 + 68 bytes per position in the released shape) is the CUDA backend's
 * job; the addressing stays the same. */
#ifndef TIDE_CACHE_KV_POOL_H
#define TIDE_CACHE_KV_POOL_H

#include <stdint.h>

#include "base/status.h"

typedef struct tide_kv_pool {
    int block_len;          /* compressed positions per block */
    int64_t latent_dim;     /* head_dim */
    int64_t key_dim;        /* index_head_dim */
    int64_t n_blocks;       /* capacity; grows on demand up to max_blocks */
    int64_t max_blocks;
    float **blocks;         /* [n_blocks] each block_len * (latent_dim + key_dim) floats */
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
 * missing ones from the pool). */
int tide_kv_reserve(tide_kv_pool *p, tide_block_table *t, int64_t n_pos, tide_status *st);
/* Returns all of t's blocks to the pool and empties t. */
void tide_kv_release(tide_kv_pool *p, tide_block_table *t);

/* Addresses of position j's latent / index key (j must be reserved). */
float *tide_kv_latent(const tide_kv_pool *p, const tide_block_table *t, int64_t j);
float *tide_kv_key(const tide_kv_pool *p, const tide_block_table *t, int64_t j);

#endif
