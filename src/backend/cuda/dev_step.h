/* The device-resident composed step: one forward step of a model SHAPE run
 * entirely in device memory as the sequence of tide's CUDA kernels the
 * model's step needs, for the benchmark (tide bench decode|prefill
 * --backend cuda). What it is and what it is not:
 *
 *   - IS: every weight of the shape at its stored dtype (FP8 with 32x32
 *     E8M0 scales, FP4 routed experts, BF16, F32 head) generated on the
 *     device (tide_cuda_fill: no checkpoint, no host copy), KV pools of the
 *     requested context filled with synthetic contents, all buffers
 *     planned once (no allocation in the step), and per layer the kernels
 *     of the model's block in the model's order with the model's shapes:
 *     hyper-connection mixes (Sinkhorn), RMSNorms, the q / kv projections
 *     (activation FP8 quantisation + block-scaled GEMMs), RoPE, the window
 *     KV write, the compressor (KV sources) and index keys, the indexer
 *     (index sources: scores over the visible keys, or over the candidate
 *     positions for layers that use candidates, then top-k), sparse
 *     attention over window + top-k latents with sinks, inverse RoPE,
 *     grouped wo_a, wo_b, the gate, routing, the shared expert, the routed
 *     experts (grouped FP4), engram's wkv GEMM and mix, the head and argmax.
 *     A decode step can be captured as a CUDA graph and replayed.
 *   - IS NOT the model's forward: the values are random, routing and top-k
 *     follow from random values (about uniform), the engram gather is a
 *     copy of as many bytes, the candidate mask is not built (layers that
 *     use candidates score a contiguous slice of that many keys), prefill
 *     scores all keys for every row (no causal mask), the compressor pools
 *     B/ratio groups of a decode step's rows every step (the average), and
 *     the caches are f32 (the kernels' current layout, 4 B per value where
 *     the packed roofline counts 1-1/32 B for the window and ~0.56 B for
 *     latents and keys). The checked forward on the GPU is the CUDA ops
 *     table (cuda_ops.h, bit-identical to the CPU); this measures what the
 *     same kernels cost device-resident.
 *
 * Sequences of a decode batch map onto n_pools distinct KV pools (sequence
 * b uses pool b % n_pools): as many pools as fit in the memory budget, so a
 * large batch at a long context shares pools when B separate pools would
 * not fit (reported; reads are still per row and mostly miss L2 once the
 * pools are far larger than it). */
#ifndef TIDE_BACKEND_CUDA_DEV_STEP_H
#define TIDE_BACKEND_CUDA_DEV_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "base/status.h"
#include "model/config.h"

typedef struct tide_dstep tide_dstep;

typedef struct tide_dstep_opts {
    int prefill;       /* 0: decode steps of `batch` rows at `context`; 1: prefill of `context` tokens */
    int64_t batch;     /* decode: sequences (rows per step); prefill: ignored (1) */
    int64_t context;   /* decode: cached positions per sequence; prefill: prompt length */
    int64_t n_pools;   /* distinct KV pools for decode (0 = as many as fit, at most batch) */
    size_t mem_budget; /* device bytes it may take in all (0 = 90% of the free memory) */
    uint64_t seed;
} tide_dstep_opts;

typedef struct tide_dstep_info {
    size_t weight_bytes, pool_bytes, work_bytes;
    int64_t n_pools;
    int64_t rows;      /* rows per step */
    int64_t launches;  /* kernel launches per step */
} tide_dstep_info;

/* Plans and allocates everything for the shape (cfg: a checked config of
 * backbone layers, e.g. from tide_config_preset) and fills it on the
 * device. Fails cleanly (TIDE_ERR_NOMEM) when the weights and one pool do
 * not fit the budget, or TIDE_ERR_UNSUPPORTED for shapes the kernels do not
 * take. */
int tide_dstep_create(const tide_config *cfg, const tide_dstep_opts *o, tide_dstep **out, tide_status *st);
void tide_dstep_destroy(tide_dstep *s); /* NULL is fine */
void tide_dstep_get_info(const tide_dstep *s, tide_dstep_info *out);
tide_cuda_stream tide_dstep_stream(const tide_dstep *s);

/* Enqueues one step on the step's stream (asynchronous). */
int tide_dstep_enqueue(tide_dstep *s, tide_status *st);
/* Captures one step as a graph (decode); later tide_dstep_replay launches
 * it. Fails (and the step stays usable eagerly) when capture fails. */
int tide_dstep_capture(tide_dstep *s, tide_status *st);
int tide_dstep_replay(tide_dstep *s, tide_status *st);
/* Per-phase profile: one eager step with an event at every phase start;
 * ms[p] is the time spent in phase p (launch gaps included: eager). */
enum {
    TIDE_DSTEP_PH_EMBED = 0,
    TIDE_DSTEP_PH_HC,
    TIDE_DSTEP_PH_Q,
    TIDE_DSTEP_PH_KV,
    TIDE_DSTEP_PH_COMPRESS,
    TIDE_DSTEP_PH_INDEX_Q,
    TIDE_DSTEP_PH_INDEX_SCORES,
    TIDE_DSTEP_PH_ATTN,
    TIDE_DSTEP_PH_WO_A,
    TIDE_DSTEP_PH_WO_B,
    TIDE_DSTEP_PH_GATE,
    TIDE_DSTEP_PH_SHARED,
    TIDE_DSTEP_PH_EXPERTS,
    TIDE_DSTEP_PH_HEAD,
    TIDE_DSTEP_PHASES
};
int tide_dstep_profile(tide_dstep *s, double ms[TIDE_DSTEP_PHASES], tide_status *st);
const char *tide_dstep_phase_name(int phase);

/* Puts the KV pools and step buffers back to their contents after create
 * (same seed), so that two runs from the same state can be compared. */
int tide_dstep_reset(tide_dstep *s, tide_status *st);
/* Copies the last step's logits (n = rows x vocab, or vocab for prefill). */
int tide_dstep_logits(tide_dstep *s, float *host, int64_t n, tide_status *st);
/* After a step: of the logits the step wrote (rows x vocab, or the last row
 * for prefill), how many are finite, and the first row's argmax. */
int tide_dstep_check_output(tide_dstep *s, int64_t *finite, int64_t *total, int32_t *argmax0, tide_status *st);

#endif
