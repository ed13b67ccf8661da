/* The sparse attention op of the CUDA ops table: from ops.h's per-row
 * pointer lists to tide_cuda_sparse_attn's index form.
 *
 *   1. rows are ordered by entry count (stable): the kernel takes one n_idx
 *      for all its rows, and padding a row with empty entries would change
 *      the CPU's pairwise sum of the last chunk's probabilities, so each
 *      group of equal count gets its own launch instead;
 *   2. every distinct non-NULL pointer of the step gets a kv index (a hash
 *      map on the pointer, ids in first-seen order), so a latent or window
 *      slot shared by many rows is gathered and uploaded once; NULL entries
 *      become -1 (the kernel's empty slot), order kept;
 *   3. q rows are gathered in the sorted order, one upload each of q, kv, the
 *      packed index rows and the sinks, one launch per group, one download,
 *      and the rows are scattered back to their places in out. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_ops_internal.h"

typedef struct {
    int32_t n;   /* entry count */
    int32_t row;
} row_key;

typedef struct {
    const float *p;
    int32_t id;
} map_slot;

static int cmp_row_key(const void *a, const void *b) {
    const row_key *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

static int64_t entries_of(const tide_attn_row *r) { return r->n_idx > 0 ? r->n_idx : 0; }

int cxo_attn_supported(int64_t rows, int heads, int64_t dim, const tide_attn_row *idx) {
    if (rows < 1 || rows > INT32_MAX || heads < 1 || dim < 1 || dim > TIDE_CUDA_ATTN_MAX_DIM ||
        rows * heads > INT32_MAX)
        return 0;
    int64_t total = 0;
    for (int64_t r = 0; r < rows; r++) {
        total += entries_of(&idx[r]);
        if (entries_of(&idx[r]) > 0 && !idx[r].kv) return 0;
    }
    return total <= INT32_MAX / 4; /* ids and the map's size stay in int32 */
}

static size_t hash_ptr(const float *p, size_t mask) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 29;
    return (size_t)x & mask;
}

/* Steps 1 and 2: fills keys (sorted rows), idx (packed index rows in sorted
 * order), uniq (kv pointers by id); returns the number of distinct kv
 * vectors, or -1 on failure. */
static int64_t build_index(tide_cuda_ops_ctx *cx, int64_t rows, const tide_attn_row *rw, int64_t total,
                           row_key **keys_out, int32_t **idx_out, const float ***uniq_out, tide_status *st) {
    row_key *keys = cxo_host(cx, HB_ROWS, (size_t)rows * sizeof *keys, st);
    int32_t *idx = cxo_host(cx, HB_IDX, (size_t)total * sizeof *idx, st);
    const float **uniq = cxo_host(cx, HB_UNIQ, (size_t)total * sizeof *uniq, st);
    size_t cap = 16;
    while (cap < (size_t)total * 2) cap *= 2;
    map_slot *map = cxo_host(cx, HB_MAP, cap * sizeof *map, st);
    if (!keys || !idx || !uniq || !map) return -1;
    memset(map, 0, cap * sizeof *map);
    for (int64_t r = 0; r < rows; r++) keys[r] = (row_key){(int32_t)entries_of(&rw[r]), (int32_t)r};
    qsort(keys, (size_t)rows, sizeof *keys, cmp_row_key);
    int64_t n_kv = 0, k = 0;
    for (int64_t i = 0; i < rows; i++) {
        const tide_attn_row *row = &rw[keys[i].row];
        for (int32_t e = 0; e < keys[i].n; e++) {
            const float *p = row->kv[e];
            if (!p) {
                idx[k++] = -1;
                continue;
            }
            size_t h = hash_ptr(p, cap - 1);
            while (map[h].p && map[h].p != p) h = (h + 1) & (cap - 1);
            if (!map[h].p) {
                map[h] = (map_slot){p, (int32_t)n_kv};
                uniq[n_kv++] = p;
            }
            idx[k++] = map[h].id;
        }
    }
    *keys_out = keys;
    *idx_out = idx;
    *uniq_out = uniq;
    return n_kv;
}

int cxo_attn_run(tide_cuda_ops_ctx *cx, const float *q, int64_t rows, int heads, int64_t dim,
                 const tide_attn_row *rw, const float *sink, float scale, float *out, tide_status *st) {
    int64_t total = 0;
    for (int64_t r = 0; r < rows; r++) total += entries_of(&rw[r]);
    row_key *keys;
    int32_t *idx;
    const float **uniq;
    int64_t n_kv = build_index(cx, rows, rw, total, &keys, &idx, &uniq, st);
    if (n_kv < 0) return -1;

    int64_t qrow = (int64_t)heads * dim; /* floats per row of q and out */
    size_t kvb = cxo_bytes(n_kv, dim, sizeof(float)), qb = cxo_bytes(rows, qrow, sizeof(float));
    size_t ib = cxo_bytes(total, 1, sizeof(int32_t)), sb = cxo_bytes(heads, 1, sizeof(float));
    float *kvh = cxo_host(cx, HB_KV, kvb, st);
    float *qh = cxo_host(cx, HB_Q, qb, st);
    if (!kvh || !qh) return -1;
    for (int64_t i = 0; i < n_kv; i++) memcpy(kvh + i * dim, uniq[i], (size_t)dim * sizeof(float));
    for (int64_t i = 0; i < rows; i++)
        memcpy(qh + i * qrow, q + (int64_t)keys[i].row * qrow, (size_t)qrow * sizeof(float));

    if (cxo_arena_begin(cx, cxo_al(qb) + cxo_al(kvb) + cxo_al(ib) + cxo_al(sb) + cxo_al(qb), st) != 0) return -1;
    float *dq = cxo_take(cx, qb, st), *dkv = cxo_take(cx, kvb, st);
    int32_t *didx = cxo_take(cx, ib, st);
    float *dsink = cxo_take(cx, sb, st), *dout = cxo_take(cx, qb, st);
    if (!dq || !dkv || !didx || !dsink || !dout) return -1;
    if (cxo_up(cx, dq, qh, qb, st) != 0 || cxo_up(cx, dkv, kvh, kvb, st) != 0 || cxo_up(cx, didx, idx, ib, st) != 0 ||
        cxo_up(cx, dsink, sink, sb, st) != 0)
        return -1;

    /* one launch per run of rows with the same entry count; the fast
     * kernel (fast mode) where its shape limits allow */
    int fast = cx->kernels == TIDE_CUDA_KERNELS_FAST && dim % 4 == 0 && dim <= TIDE_CUDA_ATTN_FAST_MAX_DIM;
    int64_t off = 0;
    for (int64_t g0 = 0, g1; g0 < rows; g0 = g1) {
        int32_t n = keys[g0].n;
        g1 = g0 + 1;
        while (g1 < rows && keys[g1].n == n) g1++;
        int rc = fast ? tide_cuda_sparse_attn_fast(dq + g0 * qrow, g1 - g0, heads, dim, dkv, n_kv, didx + off, n,
                                                   dsink, scale, dout + g0 * qrow, NULL, st)
                      : tide_cuda_sparse_attn(dq + g0 * qrow, g1 - g0, heads, dim, dkv, n_kv, didx + off, n, dsink,
                                              scale, dout + g0 * qrow, NULL, st);
        if (cxo_launched(cx, rc) != 0) return -1;
        off += (g1 - g0) * n;
    }

    /* the q staging buffer is free again: download into it, then scatter */
    if (cxo_down(cx, qh, dout, qb, st) != 0) return -1;
    for (int64_t i = 0; i < rows; i++)
        memcpy(out + (int64_t)keys[i].row * qrow, qh + i * qrow, (size_t)qrow * sizeof(float));
    return 0;
}
