/* Paged compressed-KV pool: see kv_pool.h. */
#include "cache/kv_pool.h"

#include <stdlib.h>

int tide_kv_pool_init(tide_kv_pool *p, int block_len, int64_t latent_dim, int64_t key_dim,
                      int64_t max_blocks, tide_status *st) {
    p->block_len = block_len;
    p->latent_dim = latent_dim;
    p->key_dim = key_dim;
    p->n_blocks = 0;
    p->max_blocks = max_blocks;
    p->blocks = NULL;
    p->free_list = NULL;
    p->n_free = 0;
    if (block_len < 1 || latent_dim < 1 || key_dim < 0 || max_blocks < 1 || max_blocks > INT32_MAX)
        return tide_fail(st, TIDE_ERR_INVALID, "KV pool: bad geometry (block %d, dims %lld/%lld)",
                         block_len, (long long)latent_dim, (long long)key_dim);
    return 0;
}

void tide_kv_pool_free(tide_kv_pool *p) {
    for (int64_t i = 0; i < p->n_blocks; i++) free(p->blocks[i]);
    free(p->blocks);
    free(p->free_list);
    p->blocks = NULL;
    p->free_list = NULL;
    p->n_blocks = p->n_free = 0;
}

static int grow(tide_kv_pool *p, tide_status *st) {
    if (p->n_blocks >= p->max_blocks)
        return tide_fail(st, TIDE_ERR_NOMEM, "KV pool exhausted (%lld blocks of %d positions)",
                         (long long)p->max_blocks, p->block_len);
    int64_t cap = p->n_blocks ? 2 * p->n_blocks : 16;
    if (cap > p->max_blocks) cap = p->max_blocks;
    float **b = realloc(p->blocks, (size_t)cap * sizeof *b);
    if (!b) return tide_fail(st, TIDE_ERR_NOMEM, "KV pool: out of memory");
    p->blocks = b;
    int32_t *f = realloc(p->free_list, (size_t)cap * sizeof *f);
    if (!f) return tide_fail(st, TIDE_ERR_NOMEM, "KV pool: out of memory");
    p->free_list = f;
    size_t per = (size_t)p->block_len * (size_t)(p->latent_dim + p->key_dim);
    for (int64_t i = p->n_blocks; i < cap; i++) {
        p->blocks[i] = calloc(per, sizeof(float));
        if (!p->blocks[i]) {
            p->n_blocks = i; /* keep what we have; report */
            return tide_fail(st, TIDE_ERR_NOMEM, "KV pool: out of memory");
        }
        p->free_list[p->n_free++] = (int32_t)i;
    }
    p->n_blocks = cap;
    return 0;
}

int tide_kv_reserve(tide_kv_pool *p, tide_block_table *t, int64_t n_pos, tide_status *st) {
    int64_t need = (n_pos + p->block_len - 1) / p->block_len;
    while (t->n < need) {
        if (t->n == t->cap) {
            int64_t cap = t->cap ? 2 * t->cap : 8;
            int32_t *b = realloc(t->blocks, (size_t)cap * sizeof *b);
            if (!b) return tide_fail(st, TIDE_ERR_NOMEM, "block table: out of memory");
            t->blocks = b;
            t->cap = cap;
        }
        if (p->n_free == 0 && grow(p, st) != 0) return -1;
        t->blocks[t->n++] = p->free_list[--p->n_free];
    }
    return 0;
}

void tide_kv_release(tide_kv_pool *p, tide_block_table *t) {
    for (int64_t i = 0; i < t->n; i++) p->free_list[p->n_free++] = t->blocks[i];
    free(t->blocks);
    t->blocks = NULL;
    t->n = t->cap = 0;
}

float *tide_kv_latent(const tide_kv_pool *p, const tide_block_table *t, int64_t j) {
    float *b = p->blocks[t->blocks[j / p->block_len]];
    return b + (j % p->block_len) * (p->latent_dim + p->key_dim);
}

float *tide_kv_key(const tide_kv_pool *p, const tide_block_table *t, int64_t j) {
    return tide_kv_latent(p, t, j) + p->latent_dim;
}
