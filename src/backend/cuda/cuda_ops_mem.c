/* Memory of the CUDA ops table: the device scratch arena, the host staging
 * buffers, the weight map (host pointer -> device copy, uploaded once) and
 * the counted copies. See cuda_ops_internal.h for the model. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_ops_internal.h"

size_t cxo_bytes(int64_t a, int64_t b, size_t el) {
    if (a < 0 || b < 0) return CXO_TOO_BIG;
    if (a == 0 || b == 0) return 0;
    uint64_t lim = (uint64_t)CXO_TOO_BIG;
    if ((uint64_t)a > lim / (uint64_t)b) return CXO_TOO_BIG;
    uint64_t n = (uint64_t)a * (uint64_t)b;
    if (n > lim / el) return CXO_TOO_BIG;
    return (size_t)(n * el);
}

size_t cxo_al(size_t n) { return (n + CXO_ALIGN - 1) / CXO_ALIGN * CXO_ALIGN; }

/* Largest arena or staging buffer we try to allocate (the whole device is
 * 141 GB; anything near this is a wrong size, not a real request). */
#define CXO_MAX_ALLOC ((size_t)1 << 40)

int cxo_arena_begin(tide_cuda_ops_ctx *cx, size_t need, tide_status *st) {
    cx->arena_used = 0;
    if (need < CXO_ALIGN) need = CXO_ALIGN; /* the base pointer is never NULL */
    if (need <= cx->arena_cap) return 0;
    if (need > CXO_MAX_ALLOC)
        return tide_fail(st, TIDE_ERR_NOMEM, "cuda ops: scratch of %zu bytes requested (limit %zu)", need,
                         CXO_MAX_ALLOC);
    size_t cap = cx->arena_cap ? cx->arena_cap : ((size_t)1 << 20);
    while (cap < need) cap *= 2;
    /* nothing lives in the arena between ops: free first, then allocate */
    tide_cuda_free(cx->arena);
    cx->arena = NULL;
    cx->arena_cap = 0;
    cx->stats.arena_bytes = 0;
    void *p = NULL;
    if (tide_cuda_malloc(&p, cap, st) != 0) {
        cap = need; /* the doubling may overshoot what is free */
        if (tide_cuda_malloc(&p, cap, st) != 0) return -1;
    }
    cx->arena = p;
    cx->arena_cap = cap;
    cx->stats.arena_bytes = cap;
    return 0;
}

void *cxo_take(tide_cuda_ops_ctx *cx, size_t bytes, tide_status *st) {
    size_t a = cxo_al(bytes);
    if (bytes > CXO_TOO_BIG || a > cx->arena_cap - cx->arena_used) {
        tide_fail(st, TIDE_ERR_INTERNAL, "cuda ops: arena slice of %zu bytes exceeds the op's plan (%zu of %zu used)",
                  bytes, cx->arena_used, cx->arena_cap);
        return NULL;
    }
    void *p = cx->arena + cx->arena_used;
    cx->arena_used += a;
    return p;
}

void *cxo_host(tide_cuda_ops_ctx *cx, int which, size_t bytes, tide_status *st) {
    cxo_hbuf *b = &cx->hb[which];
    if (bytes == 0) bytes = 1;
    if (bytes <= b->cap) return b->p;
    if (bytes > CXO_MAX_ALLOC) {
        tide_fail(st, TIDE_ERR_NOMEM, "cuda ops: host staging of %zu bytes requested", bytes);
        return NULL;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < bytes) cap *= 2;
    free(b->p); /* contents are not kept */
    b->p = malloc(cap);
    b->cap = b->p ? cap : 0;
    if (!b->p) tide_fail(st, TIDE_ERR_NOMEM, "cuda ops: out of host memory (%zu bytes of staging)", cap);
    return b->p;
}

int cxo_up(tide_cuda_ops_ctx *cx, void *dev, const void *host, size_t bytes, tide_status *st) {
    if (bytes == 0) return 0;
    if (tide_cuda_upload(dev, host, bytes, st) != 0) return -1;
    cx->stats.bytes_uploaded += bytes;
    return 0;
}

int cxo_down(tide_cuda_ops_ctx *cx, void *host, const void *dev, size_t bytes, tide_status *st) {
    if (bytes == 0) return 0;
    if (tide_cuda_download(host, dev, bytes, st) != 0) return -1;
    cx->stats.bytes_downloaded += bytes;
    return 0;
}

int cxo_launched(tide_cuda_ops_ctx *cx, int rc) {
    if (rc == 0) cx->stats.kernel_launches++;
    return rc;
}

/* ---- weight map ---- */

static size_t slot_of(const void *p, size_t mask) {
    uint64_t x = (uint64_t)(uintptr_t)p; /* splitmix-style finaliser: pointers share low bits */
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & mask;
}

static int wmap_grow(tide_cuda_ops_ctx *cx, tide_status *st) {
    size_t cap = cx->wcap ? cx->wcap * 2 : 64;
    cxo_wslot *t = calloc(cap, sizeof *t);
    if (!t) return tide_fail(st, TIDE_ERR_NOMEM, "cuda ops: out of host memory (weight map of %zu)", cap);
    for (size_t i = 0; i < cx->wcap; i++) {
        if (!cx->wmap[i].host) continue;
        size_t j = slot_of(cx->wmap[i].host, cap - 1);
        while (t[j].host) j = (j + 1) & (cap - 1);
        t[j] = cx->wmap[i];
    }
    free(cx->wmap);
    cx->wmap = t;
    cx->wcap = cap;
    return 0;
}

int cxo_weight(tide_cuda_ops_ctx *cx, const void *host, size_t bytes, const void **dev, tide_status *st) {
    *dev = NULL;
    if (!host || bytes == 0 || bytes >= CXO_TOO_BIG)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda ops: weight %p of %zu bytes", host, bytes);
    /* the same pointer may be a view of another size (a slice of a larger
     * weight starting at the same byte): the key is pointer AND size */
    size_t i = 0;
    if (cx->wcap) {
        for (i = slot_of(host, cx->wcap - 1); cx->wmap[i].host; i = (i + 1) & (cx->wcap - 1))
            if (cx->wmap[i].host == host && cx->wmap[i].bytes == bytes) {
                *dev = cx->wmap[i].dev;
                return 0;
            }
    }
    if ((cx->wcount + 1) * 2 > cx->wcap) {
        if (wmap_grow(cx, st) != 0) return -1;
        i = slot_of(host, cx->wcap - 1);
        while (cx->wmap[i].host) i = (i + 1) & (cx->wcap - 1);
    }
    void *d = NULL;
    if (tide_cuda_malloc(&d, bytes, st) != 0) return -1;
    if (cxo_up(cx, d, host, bytes, st) != 0) {
        tide_cuda_free(d);
        return -1;
    }
    cx->wmap[i] = (cxo_wslot){host, bytes, d};
    cx->wcount++;
    cx->stats.weights_cached = cx->wcount;
    cx->stats.weight_bytes += bytes;
    *dev = d;
    return 0;
}

void cxo_weights_free(tide_cuda_ops_ctx *cx) {
    for (size_t i = 0; i < cx->wcap; i++) tide_cuda_free(cx->wmap[i].dev);
    free(cx->wmap);
    cx->wmap = NULL;
    cx->wcap = cx->wcount = 0;
    cx->stats.weights_cached = 0;
    cx->stats.weight_bytes = 0;
}

void cxo_fail(tide_cuda_ops_ctx *cx, const char *op, const tide_status *st) {
    if (cx->failed) return;
    cx->failed = 1;
    cx->err = *st;
    if (cx->err.code == TIDE_OK) cx->err.code = TIDE_ERR_INTERNAL;
    tide_fail_ctx(&cx->err, "cuda ops %s", op);
}

void cxo_release_all(tide_cuda_ops_ctx *cx) {
    cxo_weights_free(cx);
    tide_cuda_free(cx->arena);
    cx->arena = NULL;
    cx->arena_cap = cx->arena_used = 0;
    for (int i = 0; i < HB_COUNT; i++) {
        free(cx->hb[i].p);
        cx->hb[i].p = NULL;
        cx->hb[i].cap = 0;
    }
}
