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
 * tide_cuda_ops_destroy. All of it is used under the context's mutex.
 *
 * Device-resident arrays. ops.h alloc hands out device memory (the
 * forward's activation buffers), recorded in a registry sorted by address.
 * Every op that takes activations describes them as cxo_args; cxo_dev
 * passes resident ones to the kernels as they are, finds weights in the
 * weight map, and stages host arrays through the arena (uploading inputs);
 * cxo_dev_done downloads the staged outputs. So an op works on host arrays
 * (the attention sub-layer, tests) and on device buffers (the forward's
 * dense path) alike, and copies only what is not already on the device. */
#ifndef TIDE_BACKEND_CUDA_CUDA_OPS_INTERNAL_H
#define TIDE_BACKEND_CUDA_CUDA_OPS_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
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

/* One ops.h alloc: [p, p + bytes) on the device. */
typedef tide_cuda_span cxo_res;

/* An op's array argument: the caller's pointer (host or resident), its size
 * in bytes, how the op uses it, and (after cxo_dev) the device pointer. */
typedef struct {
    const void *p;
    size_t bytes;
    int io;
    void *d;
} cxo_arg;
enum {
    CXO_IN = 1,    /* read */
    CXO_OUT = 2,   /* written */
    CXO_INOUT = 3, /* both */
    CXO_W = 4,     /* model data that lives as long as the model: the weight map */
};

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
    cxo_res *res;       /* device allocations of ops.h alloc, by address */
    size_t n_res, res_cap;
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

/* 1 when [p, p + bytes) lies in one resident allocation, 0 when p is not in
 * any (a host array), -1 when it starts in one and runs past its end. */
int cxo_resident(const tide_cuda_ops_ctx *cx, const void *p, size_t bytes);
/* Device pointers for a[0..n) (see the memory model above), plus `extra`
 * bytes of arena scratch in *scratch (when scratch is not NULL). Resets
 * the arena. */
int cxo_dev(tide_cuda_ops_ctx *cx, cxo_arg *a, int n, size_t extra, void **scratch, tide_status *st);
/* Downloads the outputs that were staged. */
int cxo_dev_done(tide_cuda_ops_ctx *cx, const cxo_arg *a, int n, tide_status *st);
/* Whether any of a[0..n) is resident (an op that has no kernel for a case
 * cannot hand such an array to the CPU op). */
int cxo_any_resident(const tide_cuda_ops_ctx *cx, const cxo_arg *a, int n);
/* Fills bytes at p with zeros, on the device when p is resident (outputs
 * left defined after an error). */
void cxo_zero(tide_cuda_ops_ctx *cx, void *p, size_t bytes);

/* ops.h's memory functions (cuda_ops_mem.c). */
void *cxo_op_alloc(const tide_ops *self, size_t bytes);
void cxo_op_release(const tide_ops *self, void *p);
void cxo_op_upload(const tide_ops *self, void *dst, const void *src, size_t bytes);
void cxo_op_download(const tide_ops *self, void *dst, const void *src, size_t bytes);
void cxo_op_copy(const tide_ops *self, void *dst, const void *src, size_t bytes);
void cxo_op_zero(const tide_ops *self, void *p, size_t bytes);


#endif
