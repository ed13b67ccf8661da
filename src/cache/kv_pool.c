/* Paged compressed-KV pool with reference-counted blocks: see kv_pool.h. */
#include "cache/kv_pool.h"

#include <stdlib.h>

int tide_kv_pool_init(tide_kv_pool *p, int block_len, int64_t latent_dim, int64_t key_dim,
                      int64_t max_blocks, tide_status *st) {
    p->block_len = block_len;
    p->latent_dim = latent_dim;
    p->key_dim = key_dim;
    p->lat_bytes = tide_kv_entry_bytes(TIDE_KV_LATENT, latent_dim);
    p->key_bytes = tide_kv_entry_bytes(TIDE_KV_KEY, key_dim);
    p->n_blocks = 0;
    p->max_blocks = max_blocks;
    p->blocks = NULL;
    p->ref = NULL;
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
    free(p->ref);
    free(p->free_list);
    p->blocks = NULL;
    p->ref = NULL;
    p->free_list = NULL;
    p->n_blocks = p->n_free = 0;
}

static int grow(tide_kv_pool *p, tide_status *st) {
    if (p->n_blocks >= p->max_blocks)
        return tide_fail(st, TIDE_ERR_NOMEM, "KV pool exhausted (%lld blocks of %d positions)",
                         (long long)p->max_blocks, p->block_len);
    int64_t cap = p->n_blocks ? 2 * p->n_blocks : 16;
    if (cap > p->max_blocks) cap = p->max_blocks;
    uint8_t **b = realloc(p->blocks, (size_t)cap * sizeof *b);
    if (!b) return tide_fail(st, TIDE_ERR_NOMEM, "KV pool: out of memory");
    p->blocks = b;
    int32_t *f = realloc(p->free_list, (size_t)cap * sizeof *f);
    if (!f) return tide_fail(st, TIDE_ERR_NOMEM, "KV pool: out of memory");
    p->free_list = f;
    int32_t *r = realloc(p->ref, (size_t)cap * sizeof *r);
    if (!r) return tide_fail(st, TIDE_ERR_NOMEM, "KV pool: out of memory");
    p->ref = r;
    size_t per = tide_kv_block_bytes(p);
    for (int64_t i = p->n_blocks; i < cap; i++) {
        p->blocks[i] = calloc(per, 1);
        if (!p->blocks[i]) {
            p->n_blocks = i; /* keep what we have; report */
            return tide_fail(st, TIDE_ERR_NOMEM, "KV pool: out of memory");
        }
        p->ref[i] = 0;
        p->free_list[p->n_free++] = (int32_t)i;
        p->n_blocks = i + 1;
    }
    return 0;
}

static int table_room(tide_block_table *t, int64_t n, tide_status *st) {
    if (t->n + n <= t->cap) return 0;
    int64_t cap = t->cap ? 2 * t->cap : 8;
    while (cap < t->n + n) cap *= 2;
    int32_t *b = realloc(t->blocks, (size_t)cap * sizeof *b);
    if (!b) return tide_fail(st, TIDE_ERR_NOMEM, "block table: out of memory");
    t->blocks = b;
    t->cap = cap;
    return 0;
}

int tide_kv_reserve(tide_kv_pool *p, tide_block_table *t, int64_t n_pos, tide_status *st) {
    int64_t need = (n_pos + p->block_len - 1) / p->block_len;
    if (need > t->n && table_room(t, need - t->n, st) != 0) return -1;
    while (t->n < need) {
        if (p->n_free == 0 && grow(p, st) != 0) return -1;
        int32_t b = p->free_list[--p->n_free];
        p->ref[b] = 1;
        t->blocks[t->n++] = b;
    }
    return 0;
}

/* Drops one reference on each listed block, assuming the counts allow it
 * (callers check first). A block listed twice that reaches 0 is freed once:
 * it is marked -1 while the list is walked, then reset to 0. */
static void drop_refs(tide_kv_pool *p, const int32_t *blocks, int64_t n) {
    for (int64_t i = 0; i < n; i++) p->ref[blocks[i]]--;
    for (int64_t i = 0; i < n; i++)
        if (p->ref[blocks[i]] == 0) {
            p->ref[blocks[i]] = -1;
            p->free_list[p->n_free++] = blocks[i];
        }
    for (int64_t i = 0; i < n; i++)
        if (p->ref[blocks[i]] == -1) p->ref[blocks[i]] = 0;
}

void tide_kv_release(tide_kv_pool *p, tide_block_table *t) {
    drop_refs(p, t->blocks, t->n);
    free(t->blocks);
    t->blocks = NULL;
    t->n = t->cap = 0;
}

static int check_live(const tide_kv_pool *p, const int32_t *blocks, int64_t n, tide_status *st) {
    if (n < 0 || (n > 0 && !blocks))
        return tide_fail(st, TIDE_ERR_INVALID, "KV pool: bad block list (%lld blocks)", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        int32_t b = blocks[i];
        if (b < 0 || b >= p->n_blocks)
            return tide_fail(st, TIDE_ERR_INVALID, "KV pool: block %d (index %lld) is outside the pool (%lld blocks)",
                             (int)b, (long long)i, (long long)p->n_blocks);
        if (p->ref[b] <= 0)
            return tide_fail(st, TIDE_ERR_INVALID, "KV pool: block %d (index %lld) is free and cannot be shared",
                             (int)b, (long long)i);
        if (p->ref[b] == INT32_MAX)
            return tide_fail(st, TIDE_ERR_INVALID, "KV pool: block %d has too many references", (int)b);
    }
    return 0;
}

int tide_kv_ref(tide_kv_pool *p, const int32_t *blocks, int64_t n, tide_status *st) {
    if (check_live(p, blocks, n, st) != 0) return -1;
    for (int64_t i = 0; i < n; i++) p->ref[blocks[i]]++;
    return 0;
}

int tide_kv_share(tide_kv_pool *p, tide_block_table *t, const int32_t *blocks, int64_t n,
                  tide_status *st) {
    if (check_live(p, blocks, n, st) != 0) return -1;
    if (table_room(t, n, st) != 0) return -1;
    for (int64_t i = 0; i < n; i++) {
        p->ref[blocks[i]]++;
        t->blocks[t->n++] = blocks[i];
    }
    return 0;
}

int tide_kv_unref(tide_kv_pool *p, const int32_t *blocks, int64_t n, tide_status *st) {
    if (check_live(p, blocks, n, st) != 0) return -1;
    /* a block listed k times needs k references: count down tentatively */
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (--p->ref[blocks[i]] < 0) bad = i;
    int64_t done = bad < 0 ? n : bad + 1;
    for (int64_t i = 0; i < done; i++) p->ref[blocks[i]]++;
    if (bad >= 0)
        return tide_fail(st, TIDE_ERR_INVALID, "KV pool: block %d is listed more often than it is referenced",
                         (int)blocks[bad]);
    drop_refs(p, blocks, n);
    return 0;
}

int32_t tide_kv_block_refs(const tide_kv_pool *p, int32_t b) {
    if (b < 0 || b >= p->n_blocks) return -1;
    return p->ref[b];
}

uint8_t *tide_kv_latent(const tide_kv_pool *p, const tide_block_table *t, int64_t j) {
    uint8_t *b = p->blocks[t->blocks[j / p->block_len]];
    return b + (size_t)(j % p->block_len) * tide_kv_pos_bytes(p);
}

uint8_t *tide_kv_key(const tide_kv_pool *p, const tide_block_table *t, int64_t j) {
    return tide_kv_latent(p, t, j) + p->lat_bytes;
}

void tide_kv_put_latent(const tide_kv_pool *p, const tide_block_table *t, int64_t j, const float *v) {
    tide_kv_pack(TIDE_KV_LATENT, v, p->latent_dim, tide_kv_latent(p, t, j));
}

void tide_kv_put_key(const tide_kv_pool *p, const tide_block_table *t, int64_t j, const float *v) {
    tide_kv_pack(TIDE_KV_KEY, v, p->key_dim, tide_kv_key(p, t, j));
}

void tide_kv_get_latent(const tide_kv_pool *p, const tide_block_table *t, int64_t j, float *v) {
    tide_kv_unpack(TIDE_KV_LATENT, tide_kv_latent(p, t, j), p->latent_dim, v);
}

void tide_kv_get_key(const tide_kv_pool *p, const tide_block_table *t, int64_t j, float *v) {
    tide_kv_unpack(TIDE_KV_KEY, tide_kv_key(p, t, j), p->key_dim, v);
}
