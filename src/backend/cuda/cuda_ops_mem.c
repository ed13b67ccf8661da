/* Memory of the CUDA ops table: the device scratch arena, the host staging
 * buffers, the weight map (host pointer -> device copy, uploaded once) and
 * the counted copies. See cuda_ops_internal.h for the model. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_ops_internal.h"
#include "base/log.h"
#include "io/safetensors.h"

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

/* The bound region holding [host, host + bytes), or NULL. */
static const cxo_region *bound_region(const tide_cuda_ops_ctx *cx, const char *host, size_t bytes) {
    size_t lo = 0, hi = cx->n_regions; /* the last region starting at or below host */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cx->regions[mid].host <= host) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    const cxo_region *r = &cx->regions[lo - 1];
    size_t off = (size_t)(host - r->host);
    return off < r->bytes && bytes <= r->bytes - off ? r : NULL;
}

int cxo_weight(tide_cuda_ops_ctx *cx, const void *host, size_t bytes, const void **dev, tide_status *st) {
    *dev = NULL;
    if (!host || bytes == 0 || bytes >= CXO_TOO_BIG)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda ops: weight %p of %zu bytes", host, bytes);
    const cxo_region *r = bound_region(cx, host, bytes);
    if (r) {
        *dev = r->dev + ((const char *)host - r->host);
        return 0;
    }
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
    /* once the checkpoint is bound, what is not in it is an array the model
     * made at load (f32 norms, hc tables): uploaded once, here */
    if (cx->bound) cx->stats.derived_uploads++;
    else cx->stats.weight_uploads++;
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
    tide_cuda_free(cx->bound);
    cx->bound = NULL;
    free(cx->regions);
    cx->regions = NULL;
    cx->n_regions = 0;
    cx->stats.weights_cached = 0;
    cx->stats.weight_bytes = 0;
    cx->stats.weights_bound = 0;
}

/* ---- binding the checkpoint at load ---- */

static int by_host(const void *a, const void *b) {
    const char *x = ((const cxo_region *)a)->host, *y = ((const cxo_region *)b)->host;
    return x < y ? -1 : x > y;
}

static double gib(size_t n) { return (double)n / (double)((size_t)1 << 30); }

/* Streams in pieces of this size so the progress callback sees motion on a
 * large tensor (and a cancelled load would stop soon). */
#define BIND_PIECE ((size_t)64 << 20)

int cxo_bind_weights(const tide_ops *self, const struct tide_st *ck, tide_status *st) {
    tide_cuda_ops_ctx *cx = self->ctx;
    size_t n = tide_st_count(ck), total = 0, raw = 0;
    int rc = -1;
    pthread_mutex_lock(&cx->mu);
    if (cx->bound) {
        rc = tide_fail(st, TIDE_ERR_INVALID, "cuda ops: a checkpoint is already bound to this context");
        goto out;
    }
    cxo_region *rg = n ? calloc(n, sizeof *rg) : NULL;
    if (n && !rg) {
        rc = tide_fail(st, TIDE_ERR_NOMEM, "cuda ops: out of host memory (%zu tensors)", n);
        goto out;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const tide_tensor *t = tide_st_at(ck, i);
        if (!t || !t->data || t->nbytes == 0) continue;
        if (t->nbytes >= CXO_TOO_BIG || total > CXO_TOO_BIG - cxo_al(t->nbytes)) {
            free(rg);
            rc = tide_fail(st, TIDE_ERR_INVALID, "cuda ops: tensor %s of %llu bytes is too large", t->name,
                           (unsigned long long)t->nbytes);
            goto out;
        }
        rg[m].host = t->data;
        rg[m].bytes = (size_t)t->nbytes;
        total += cxo_al(t->nbytes);
        raw += (size_t)t->nbytes;
        m++;
    }
    qsort(rg, m, sizeof *rg, by_host);
    /* does it fit? asked before anything is allocated */
    size_t free_b = 0, total_b = 0;
    if (tide_cuda_mem_info(&free_b, &total_b, st) != 0) {
        free(rg);
        goto out;
    }
    size_t reserve = cx->reserve ? cx->reserve : (size_t)1 << 30;
    if (total > free_b || free_b - total < reserve) {
        free(rg);
        rc = tide_fail(st, TIDE_ERR_NOMEM,
                       "the model does not fit on this GPU: its weights need %.2f GiB, plus %.2f GiB kept for "
                       "the step, and the device has %.2f GiB free of %.2f GiB; run it expert-parallel across "
                       "several GPUs (--ep N, issue 16) or use a smaller checkpoint",
                       gib(total), gib(reserve), gib(free_b), gib(total_b));
        goto out;
    }
    void *dev = NULL;
    if (tide_cuda_malloc(&dev, total ? total : 1, st) != 0) {
        free(rg);
        goto out;
    }
    double t0 = tide_now_seconds(), last = t0;
    size_t off = 0, done = 0;
    for (size_t i = 0; i < m; i++) {
        rg[i].dev = (char *)dev + off;
        for (size_t p = 0; p < rg[i].bytes; p += BIND_PIECE) {
            size_t k = rg[i].bytes - p < BIND_PIECE ? rg[i].bytes - p : BIND_PIECE;
            if (cxo_up(cx, rg[i].dev + p, rg[i].host + p, k, st) != 0) {
                tide_cuda_free(dev);
                free(rg);
                tide_fail_ctx(st, "cuda ops: binding the weights");
                goto out;
            }
            done += k;
            double now = tide_now_seconds();
            if (cx->progress && now - last >= 0.25) {
                cx->progress(cx->progress_user, done, raw, now - t0);
                last = now;
            }
        }
        off += cxo_al(rg[i].bytes);
    }
    if (cx->progress) cx->progress(cx->progress_user, raw, raw, tide_now_seconds() - t0);
    cx->bound = dev;
    cx->regions = rg;
    cx->n_regions = m;
    cx->stats.weights_bound = total;
    cx->stats.weight_bytes += total;
    rc = 0;
out:
    pthread_mutex_unlock(&cx->mu);
    return rc;
}

void tide_cuda_ops_set_progress(tide_cuda_ops_ctx *cx, tide_cuda_progress_fn fn, void *user) {
    if (!cx) return;
    pthread_mutex_lock(&cx->mu);
    cx->progress = fn;
    cx->progress_user = user;
    pthread_mutex_unlock(&cx->mu);
}

void tide_cuda_ops_set_reserve(tide_cuda_ops_ctx *cx, size_t bytes) {
    if (!cx) return;
    pthread_mutex_lock(&cx->mu);
    cx->reserve = bytes;
    pthread_mutex_unlock(&cx->mu);
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
    for (size_t i = 0; i < cx->n_res; i++) tide_cuda_free(cx->res[i].p);
    free(cx->res);
    cx->res = NULL;
    cx->n_res = cx->res_cap = 0;
    tide_cuda_free(cx->arena);
    cx->arena = NULL;
    cx->arena_cap = cx->arena_used = 0;
    for (int i = 0; i < HB_COUNT; i++) {
        free(cx->hb[i].p);
        cx->hb[i].p = NULL;
        cx->hb[i].cap = 0;
    }
}

/* ---- device-resident arrays (ops.h alloc) ---- */

/* Index of the last allocation starting at or below p, or -1. */
static ptrdiff_t res_find(const tide_cuda_ops_ctx *cx, const char *p) {
    size_t lo = 0, hi = cx->n_res;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cx->res[mid].p <= p) lo = mid + 1;
        else hi = mid;
    }
    return (ptrdiff_t)lo - 1;
}

int cxo_resident(const tide_cuda_ops_ctx *cx, const void *p, size_t bytes) {
    if (!p || !cx->n_res) return 0;
    ptrdiff_t i = res_find(cx, p);
    if (i < 0) return 0;
    const cxo_res *r = &cx->res[i];
    size_t off = (size_t)((const char *)p - r->p);
    if (off >= r->bytes) return 0;
    return bytes <= r->bytes - off ? 1 : -1;
}

int cxo_any_resident(const tide_cuda_ops_ctx *cx, const cxo_arg *a, int n) {
    for (int i = 0; i < n; i++)
        if (a[i].p && a[i].io != CXO_W && cxo_resident(cx, a[i].p, a[i].bytes ? a[i].bytes : 1)) return 1;
    return 0;
}

int cxo_dev(tide_cuda_ops_ctx *cx, cxo_arg *a, int n, size_t extra, void **scratch, tide_status *st) {
    /* pass 1: which arrays are resident (d = p), and the arena the rest need */
    size_t need = cxo_al(extra);
    for (int i = 0; i < n; i++) {
        a[i].d = NULL;
        if (!a[i].p || a[i].io == CXO_W) continue;
        int r = cxo_resident(cx, a[i].p, a[i].bytes);
        if (r < 0)
            return tide_fail(st, TIDE_ERR_INTERNAL, "cuda ops: argument %d (%zu bytes) runs past its device buffer",
                             i, a[i].bytes);
        if (r) a[i].d = (void *)a[i].p;
        else need += cxo_al(a[i].bytes);
    }
    if (cxo_arena_begin(cx, need, st) != 0) return -1;
    for (int i = 0; i < n; i++) {
        if (!a[i].p || a[i].d) continue; /* absent, or resident */
        if (a[i].io == CXO_W) {
            const void *d;
            if (cxo_weight(cx, a[i].p, a[i].bytes, &d, st) != 0) return -1;
            a[i].d = (void *)d;
        } else {
            if (!(a[i].d = cxo_take(cx, a[i].bytes, st))) return -1;
            if ((a[i].io & CXO_IN) && cxo_up(cx, a[i].d, a[i].p, a[i].bytes, st) != 0) return -1;
        }
    }
    if (scratch && !(*scratch = cxo_take(cx, extra, st))) return -1;
    return 0;
}

int cxo_dev_done(tide_cuda_ops_ctx *cx, const cxo_arg *a, int n, tide_status *st) {
    for (int i = 0; i < n; i++)
        if (a[i].p && (a[i].io & CXO_OUT) && a[i].io != CXO_W && a[i].d != a[i].p &&
            cxo_down(cx, (void *)a[i].p, a[i].d, a[i].bytes, st) != 0)
            return -1;
    return 0;
}

void cxo_zero(tide_cuda_ops_ctx *cx, void *p, size_t bytes) {
    if (!p || !bytes) return;
    if (cxo_resident(cx, p, bytes)) {
        tide_status st = {0};
        (void)tide_cuda_memset(p, 0, bytes, &st); /* best effort: the context has failed already */
    } else {
        memset(p, 0, bytes);
    }
}

static tide_cuda_ops_ctx *mem_enter(const tide_ops *self) {
    tide_cuda_ops_ctx *cx = self->ctx;
    pthread_mutex_lock(&cx->mu);
    tide_cuda_host_guard(cx->res, cx->n_res, 1);
    return cx;
}

static void mem_leave(tide_cuda_ops_ctx *cx) {
    tide_cuda_host_guard(cx->res, cx->n_res, 0);
    pthread_mutex_unlock(&cx->mu);
}

void *cxo_op_alloc(const tide_ops *self, size_t bytes) {
    tide_cuda_ops_ctx *cx = mem_enter(self);
    void *p = NULL;
    tide_status st = {0};
    if (cx->failed) goto out;
    if (bytes == 0) bytes = 1;
    if (cx->n_res == cx->res_cap) {
        size_t cap = cx->res_cap ? cx->res_cap * 2 : 32;
        cxo_res *t = realloc(cx->res, cap * sizeof *t);
        if (!t) {
            tide_fail(&st, TIDE_ERR_NOMEM, "out of host memory");
            cxo_fail(cx, "alloc", &st);
            goto out;
        }
        cx->res = t;
        cx->res_cap = cap;
    }
    if (tide_cuda_malloc(&p, cxo_al(bytes), &st) != 0) {
        tide_fail_ctx(&st, "%zu bytes for the step's activations", bytes);
        cxo_fail(cx, "alloc", &st);
        p = NULL;
        goto out;
    }
    ptrdiff_t i = res_find(cx, p) + 1;
    memmove(cx->res + i + 1, cx->res + i, (cx->n_res - (size_t)i) * sizeof *cx->res);
    cx->res[i] = (cxo_res){p, bytes};
    cx->n_res++;
    cx->stats.resident_bytes += bytes;
out:
    mem_leave(cx);
    return p;
}

void cxo_op_release(const tide_ops *self, void *p) {
    if (!p) return;
    tide_cuda_ops_ctx *cx = mem_enter(self);
    ptrdiff_t i = res_find(cx, p);
    if (i >= 0 && cx->res[i].p == p) {
        cx->stats.resident_bytes -= cx->res[i].bytes;
        memmove(cx->res + i, cx->res + i + 1, (cx->n_res - (size_t)i - 1) * sizeof *cx->res);
        cx->n_res--;
        tide_cuda_free(p);
    }
    mem_leave(cx);
}

/* upload / download / copy: any pair of host and resident memory (the
 * counted copies when one side is the host). */
static void mem_move(const tide_ops *self, void *dst, const void *src, size_t bytes, const char *what) {
    if (!bytes) return;
    tide_cuda_ops_ctx *cx = mem_enter(self);
    if (!cx->failed) {
        int rd = cxo_resident(cx, dst, bytes), rs = cxo_resident(cx, src, bytes);
        tide_status st = {0};
        int rc = 0;
        if (rd < 0 || rs < 0) rc = tide_fail(&st, TIDE_ERR_INTERNAL, "%zu bytes run past a device buffer", bytes);
        else if (rd && !rs) rc = cxo_up(cx, dst, src, bytes, &st);
        else if (!rd && rs) rc = cxo_down(cx, dst, src, bytes, &st);
        else if (rd && rs) rc = tide_cuda_memcpy_any(dst, src, bytes, &st);
        else memcpy(dst, src, bytes);
        if (rc != 0) cxo_fail(cx, what, &st);
    }
    mem_leave(cx);
}

void cxo_op_upload(const tide_ops *self, void *dst, const void *src, size_t bytes) {
    mem_move(self, dst, src, bytes, "upload");
}
void cxo_op_download(const tide_ops *self, void *dst, const void *src, size_t bytes) {
    mem_move(self, dst, src, bytes, "download");
}
void cxo_op_copy(const tide_ops *self, void *dst, const void *src, size_t bytes) {
    mem_move(self, dst, src, bytes, "copy");
}

void cxo_op_zero(const tide_ops *self, void *p, size_t bytes) {
    if (!bytes) return;
    tide_cuda_ops_ctx *cx = mem_enter(self);
    if (!cx->failed) {
        tide_status st = {0};
        if (cxo_resident(cx, p, bytes)) {
            if (tide_cuda_memset(p, 0, bytes, &st) != 0) cxo_fail(cx, "zero", &st);
        } else {
            memset(p, 0, bytes);
        }
    }
    mem_leave(cx);
}
