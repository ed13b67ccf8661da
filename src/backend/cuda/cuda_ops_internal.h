/* Private to the CUDA ops table (cuda_ops.c, cuda_ops_mem.c,
 * cuda_ops_attn.c): the context and its memory helpers.
 *
 * Memory model. One device scratch ARENA serves every op: an op first sums
 * the (256-byte aligned) sizes of all its device buffers, calls arena_begin
 * (which resets the arena and grows it geometrically when too small; device
 * memory is never freed per call), then takes its slices in the same order.
 * Host staging buffers (for downloads that need conversion, and the sparse
 * attention gather) grow the same way. Weights live in a map from host
 * pointer + size to a device copy made on first use. Everything is freed by
 * tide_cuda_ops_destroy. All of it is used under the context's mutex. */
#ifndef TIDE_BACKEND_CUDA_CUDA_OPS_INTERNAL_H
#define TIDE_BACKEND_CUDA_CUDA_OPS_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"

#define CXO_ALIGN 256
/* Size standing for "does not fit": small enough that a handful of them
 * added up cannot wrap size_t, larger than any arena we would allocate. */
#define CXO_TOO_BIG ((size_t)1 << 56)

typedef struct {
    void *p;
    size_t cap;
} cxo_hbuf;

/* host staging buffers, by purpose */
enum {
    HB_STAGE = 0, /* downloads that are converted or scattered */
    HB_ROWS,      /* sparse attention: rows sorted by entry count */
    HB_MAP,       /* sparse attention: pointer -> kv index hash table */
    HB_UNIQ,      /* sparse attention: distinct kv pointers, in id order */
    HB_IDX,       /* sparse attention: packed int32 index rows */
    HB_KV,        /* sparse attention: gathered kv vectors */
    HB_Q,         /* sparse attention: q rows in sorted order */
    HB_COUNT
};

typedef struct {
    const void *host;
    size_t bytes;
    void *dev;
} cxo_wslot;

/* One checkpoint tensor's bytes on the device. */
typedef struct cxo_region {
    const char *host;
    size_t bytes;
    char *dev;
} cxo_region;

struct tide_cuda_ops_ctx {
    char *arena;
    size_t arena_cap, arena_used;
    cxo_wslot *wmap; /* open addressing, wcap a power of two (or 0) */
    size_t wcap, wcount;
    cxo_hbuf hb[HB_COUNT];
    int kernels;       /* TIDE_CUDA_KERNELS_EXACT (default) or _FAST */
    int failed;        /* sticky: the first CUDA error */
    tide_status err;
    tide_cuda_ops_stats stats;
    /* Weights bound at load (cxo_bind_weights): one device buffer holding
     * every checkpoint tensor, and the host ranges it mirrors, sorted by
     * host address; cxo_weight looks a view up here first. */
    char *bound;
    cxo_region *regions;
    size_t n_regions;
    size_t reserve;               /* device bytes kept free at bind time */
    tide_cuda_progress_fn progress;
    void *progress_user;
    tide_ops table;     /* this context's table: cuda_ops.c's, ctx = this */
    pthread_mutex_t mu; /* serialises the ops and the calls of cuda_ops.h */
};

/* a * b * el bytes, or CXO_TOO_BIG when negative or too large */
size_t cxo_bytes(int64_t a, int64_t b, size_t el);
/* n rounded up to CXO_ALIGN (n <= CXO_TOO_BIG) */
size_t cxo_al(size_t n);

int cxo_arena_begin(tide_cuda_ops_ctx *cx, size_t need, tide_status *st);
/* The next slice of the arena (bytes as given to the plan); NULL only when
 * the op's plan and its takes disagree (a bug, reported as such). */
void *cxo_take(tide_cuda_ops_ctx *cx, size_t bytes, tide_status *st);

/* Host staging buffer `which`, at least `bytes` long (contents not kept). */
void *cxo_host(tide_cuda_ops_ctx *cx, int which, size_t bytes, tide_status *st);

/* Counted copies (0 bytes: nothing). */
int cxo_up(tide_cuda_ops_ctx *cx, void *dev, const void *host, size_t bytes, tide_status *st);
int cxo_down(tide_cuda_ops_ctx *cx, void *host, const void *dev, size_t bytes, tide_status *st);
/* Counts a kernel call that returned rc; returns rc. */
int cxo_launched(tide_cuda_ops_ctx *cx, int rc);

/* The device copy of weight bytes at host (uploaded on first use). */
int cxo_weight(tide_cuda_ops_ctx *cx, const void *host, size_t bytes, const void **dev, tide_status *st);
void cxo_weights_free(tide_cuda_ops_ctx *cx);
/* ops.h bind_weights: every tensor of ck to the device (cuda_ops_mem.c). */
int cxo_bind_weights(const tide_ops *self, const struct tide_st *ck, tide_status *st);

/* Records st as the context's first error (prefixed with the op's name). */
void cxo_fail(tide_cuda_ops_ctx *cx, const char *op, const tide_status *st);

/* The sparse attention op on the GPU (cuda_ops_attn.c): whether the shape
 * has a kernel, and the run. */
int cxo_attn_supported(int64_t rows, int heads, int64_t dim, const tide_attn_row *idx);
int cxo_attn_run(tide_cuda_ops_ctx *cx, const float *q, int64_t rows, int heads, int64_t dim,
                 const tide_attn_row *idx, const float *sink, float scale, float *out, tide_status *st);

void cxo_release_all(tide_cuda_ops_ctx *cx);

#endif
