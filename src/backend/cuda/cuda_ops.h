/* The CUDA ops table: backend/ops.h filled from the kernels of
 * cuda_kernels.h. Arrays the table allocated (ops.h alloc: the forward's
 * activation buffers) go to the kernels as they are; host arrays are
 * uploaded to a device scratch arena and their outputs downloaded, so the
 * forward pass runs the same graph as on the CPU, op for op
 * (cuda_ops_internal.h has the memory model; tests/gpu/gpu_test_model.c
 * checks it on the whole model).
 *
 *     tide_cuda_ops_ctx *cx;
 *     if (tide_cuda_ops_create(&cx, &st) != 0) ...
 *     tide_fwd_ctx_create(model, tide_cuda_ops_table(cx), ...);
 *     tide_forward(...);
 *     if (tide_cuda_ops_error(cx, &st) != 0) ...   // after every step
 *     tide_cuda_ops_destroy(cx);
 *
 * Weights (tide_weight.data / .scale, views into the mmapped checkpoint that
 * never change while the model is loaded) are uploaded once and kept in a
 * map from host pointer (and size) to device copy, until destroy. Ops with no
 * kernel for a shape or type run the CPU op instead and are counted as CPU
 * fallbacks in the stats.
 *
 * Errors: ops.h functions return void. The first CUDA error is recorded in
 * the context (sticky); from then on every op is a no-op that leaves its
 * outputs defined (zeros; in-place ops leave their data unchanged; top-k
 * returns 0; routing picks experts 0..k-1 with weight 0), so the forward
 * cannot read uninitialised memory or index out of range. Check
 * tide_cuda_ops_error after each step.
 *
 * Contexts are independent: each owns its table (ops.h passes the table to
 * every op as self, and self->ctx is the context), its device buffers,
 * weight map, stats and error, so several may exist at once (on one device
 * for now: the kernels run on the current device's default stream). The
 * ops of one context may be called from several threads (the indexer
 * does); a mutex in the context serialises them. */
#ifndef TIDE_BACKEND_CUDA_CUDA_OPS_H
#define TIDE_BACKEND_CUDA_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/ops.h"
#include "base/status.h"

typedef struct tide_cuda_ops_ctx tide_cuda_ops_ctx;

/* Per-op counters: calls that ran on the GPU and calls that ran the CPU op. */
typedef enum tide_cuda_op {
    TIDE_CUDA_OP_LINEAR_FP8 = 0,
    TIDE_CUDA_OP_LINEAR_FP4,
    TIDE_CUDA_OP_LINEAR_F32,
    TIDE_CUDA_OP_LINEAR_BF16,
    TIDE_CUDA_OP_RMSNORM,
    TIDE_CUDA_OP_ROPE,
    TIDE_CUDA_OP_HC_MIXES,
    TIDE_CUDA_OP_HC_PRE,
    TIDE_CUDA_OP_HC_POST,
    TIDE_CUDA_OP_SPARSE_ATTN,
    TIDE_CUDA_OP_INDEX_SCORES,
    TIDE_CUDA_OP_TOPK,
    TIDE_CUDA_OP_SWIGLU,
    TIDE_CUDA_OP_ENGRAM_MIX,
    TIDE_CUDA_OP_MOE_ROUTE,
    TIDE_CUDA_OP_COMPRESS_POOL,
    TIDE_CUDA_OP_EMBED,
    TIDE_CUDA_OP_GATHER,
    TIDE_CUDA_OP_SCATTER_ADD,
    TIDE_CUDA_OP_ELEMENTWISE, /* add_bf16, div_scalar, hc_mean */
    TIDE_CUDA_OP_COUNT
} tide_cuda_op;

typedef struct tide_cuda_ops_stats {
    uint64_t gpu_calls[TIDE_CUDA_OP_COUNT];
    uint64_t cpu_fallbacks[TIDE_CUDA_OP_COUNT];
    uint64_t kernel_launches;
    uint64_t bytes_uploaded;   /* all host -> device copies, weights included */
    uint64_t bytes_downloaded;
    uint64_t weight_bytes;     /* device bytes held by the weight map */
    uint64_t weights_cached;   /* entries in the weight map */
    uint64_t weights_bound;    /* bytes bound at load (in weight_bytes too) */
    uint64_t weight_uploads;   /* checkpoint weight uploads after load (0 once bound) */
    uint64_t derived_uploads;  /* model arrays made at load (f32 norms, hc tables), uploaded once on first use */
    uint64_t arena_bytes;      /* current size of the scratch arena */
    uint64_t resident_bytes;   /* device bytes handed out by ops.h alloc (the forward's buffers) */
} tide_cuda_ops_stats;

/* Creates a context (fails with TIDE_ERR_UNSUPPORTED when there is no CUDA
 * device). Other contexts may exist; they do not interfere. */
int tide_cuda_ops_create(tide_cuda_ops_ctx **out, tide_status *st);
/* Kernel mode. EXACT (the default): every op bit-identical to the CPU's
 * (the block-scaled GEMMs on CUDA cores with exactly rounded block sums,
 * tide_cuda_gemm_exact). FAST: the GEMMs on the tensor cores, which differ
 * from the CPU by one bf16 step on a few outputs in a million. Set it before
 * the first op. */
enum { TIDE_CUDA_KERNELS_EXACT = 0, TIDE_CUDA_KERNELS_FAST = 1 };
void tide_cuda_ops_set_kernels(tide_cuda_ops_ctx *cx, int mode);
/* The context's own ops table (self->ctx == cx); it lives inside the
 * context, so it is valid until destroy and must not be used after. NULL
 * for a NULL context. */
const tide_ops *tide_cuda_ops_table(tide_cuda_ops_ctx *cx);
/* Frees every device buffer, the table and the context; NULL is fine. */
void tide_cuda_ops_destroy(tide_cuda_ops_ctx *cx);
/* 0 while no CUDA error has happened; else -1 with the first error in *st. */
int tide_cuda_ops_error(tide_cuda_ops_ctx *cx, tide_status *st);
/* Binding the weights at load (ops.h bind_weights, called by the engine):
 * every tensor of the checkpoint goes to the device in one allocation,
 * streamed tensor by tensor, after a check that the weights plus the
 * reserve (default 1 GiB: the scratch arena and what the step needs) fit in
 * the device's free memory; a model that does not fit is refused before
 * anything is allocated. progress, when set, is called as the bytes go up
 * (done, total, seconds since the start) and once at the end (done ==
 * total). Both setters may be called any time before the engine is made. */
typedef void (*tide_cuda_progress_fn)(void *user, uint64_t done, uint64_t total, double seconds);
void tide_cuda_ops_set_progress(tide_cuda_ops_ctx *cx, tide_cuda_progress_fn fn, void *user);
void tide_cuda_ops_set_reserve(tide_cuda_ops_ctx *cx, size_t bytes);

/* Frees the weight map's device copies. Call it before freeing a model whose
 * weights the table has seen if the context is reused for another model: the
 * map is keyed by host address, and a new mapping may reuse an old one. */
void tide_cuda_ops_drop_weights(tide_cuda_ops_ctx *cx);
void tide_cuda_ops_get_stats(tide_cuda_ops_ctx *cx, tide_cuda_ops_stats *out);
/* "linear_fp8", "rmsnorm", ... for TIDE_CUDA_OP_*; "?" otherwise. */
const char *tide_cuda_op_name(int op);

#endif
