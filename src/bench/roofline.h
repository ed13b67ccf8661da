/* The roofline of one forward step: the bytes a step must move and the
 * FLOPs it must do, computed from the model config alone (no weights, no
 * machine), for the two step kinds that matter:
 *
 *   decode   B sequences at context C each feed one token (logits for each);
 *   prefill  one sequence feeds L prompt tokens from position 0 (logits for
 *            the last row only, as the engine asks).
 *
 * The roofline time of a step is max(bytes / bandwidth, flops / rate): no
 * implementation can beat it on a machine with those ceilings. What is
 * counted and what is not (docs/perf.md has the formulas):
 *   - weights at their stored dtype, each read ONCE per step whatever the
 *     batch (FP8 1 B + 1/1024 for the 32x32 E8M0 scale, FP4 0.5 B + 1/32,
 *     BF16 2 B, F32 4 B): attention, compressor, indexer, gate, shared
 *     expert, hc_*_fn, engram wkv, the head; routed experts only for the
 *     EXPECTED number of distinct experts the step's tokens route to
 *     (uniform routing); embedding and engram table rows only for the rows
 *     gathered. Norm weights, biases, sinks and hc bases/scales are not
 *     counted (< 0.1% of the bytes). DSpark stages are not run by a plain
 *     step and are not counted;
 *   - KV: decode reads, per sequence and layer, the cached window entries,
 *     the top-k compressed latents, and (index sources) the index keys
 *     scored; it writes one window entry per layer and, per KV source, a
 *     1/ratio share of a latent and its index key. Prefill writes the cache
 *     it builds and reads each compressed latent / key once more; reads of
 *     rows produced inside the step are assumed to stay on chip.
 *     Activations are not counted;
 *   - FLOPs: 2 per weight element a row touches (GEMMs; the head only for
 *     rows with logits), 4 * heads * head_dim per attention entry (QK and
 *     PV), 2 * index_heads * index_head_dim per index key scored. Norms,
 *     RoPE, softmax, routing and Sinkhorn are not counted.
 * Index sources that mask to candidate blocks are charged only for the
 * candidate positions (topk_blocks * block_size), the cost of an
 * implementation that scores only those (the CPU backend scores all). */
#ifndef TIDE_BENCH_ROOFLINE_H
#define TIDE_BENCH_ROOFLINE_H

#include <stdint.h>

#include "base/status.h"
#include "model/config.h"

/* Bytes per stored value, scales included. */
#define TIDE_ROOF_FP8 (1.0 + 1.0 / 1024.0) /* e4m3 + one E8M0 per 32x32 block */
#define TIDE_ROOF_FP4 (0.5 + 1.0 / 32.0)   /* e2m1 + one E8M0 per 32 values */
#define TIDE_ROOF_BF16 2.0
#define TIDE_ROOF_F32 4.0

/* Bytes per value of each kind of cache entry. */
typedef struct tide_roof_kv {
    double window; /* window ring entry */
    double latent; /* compressed latent */
    double key;    /* index key */
} tide_roof_kv;

/* The packed layout of the caches (cache/kv_pack.h, on the CPU and the GPU): window FP8 with an E8M0 scale per
 * 32 (1 + 1/32), latents FP4 with an E4M3 scale per 16 (0.5 + 1/16: 288 B
 * per 512-wide latent), keys FP4 with an E8M0 scale per 32 (68 B per 128). */
tide_roof_kv tide_roof_kv_packed(void);
/* The CPU reference's f32 cache (4 B per value everywhere). */
tide_roof_kv tide_roof_kv_f32(void);

/* KV bytes per token of context: what the paged pool holds for each token
 * a sequence has cached, over every KV source of the backbone, one latent
 * and one index key per `ratio` tokens (every KV source owns its keys: the
 * config check guarantees it). The window rings are per sequence, not per
 * token: tide_roof_kv_ring_bytes. With tide_roof_kv_packed this is the
 * figure `tide bench offline` reports as "KV bytes per token" and the CPU
 * pools measure (tests/test_kv_pack.c). */
double tide_roof_kv_token_bytes(const tide_config *cfg, const tide_roof_kv *kv);
/* Bytes of one sequence's window rings: window entries per backbone layer. */
double tide_roof_kv_ring_bytes(const tide_config *cfg, const tide_roof_kv *kv);

typedef struct tide_roof {
    /* bytes */
    double w_dense;   /* weights read whole once per step (not experts, head) */
    double w_experts; /* routed experts touched, all MoE layers */
    double w_head;    /* the output head (read once) */
    double w_gather;  /* embedding rows + engram table rows gathered */
    double kv_window, kv_latent, kv_index; /* cache reads */
    double kv_write;
    double bytes;     /* the sum of the above */
    /* FLOPs */
    double f_gemm, f_attn, f_index;
    double flops;
    /* context */
    int64_t rows;             /* tokens fed */
    int64_t logit_rows;
    double experts_touched;   /* expected distinct routed experts per backbone layer */
    int64_t n_experts;        /* routed experts per backbone layer */
} tide_roof;

/* B sequences at context C (C tokens already cached) each feed one token. */
int tide_roof_decode(const tide_config *cfg, const tide_roof_kv *kv, int64_t batch, int64_t context,
                     tide_roof *out, tide_status *st);
/* One sequence feeds L tokens from position 0 (logits for the last row). */
int tide_roof_prefill(const tide_config *cfg, const tide_roof_kv *kv, int64_t len, tide_roof *out,
                      tide_status *st);

/* Expected number of distinct experts hit when n_tokens tokens each pick k
 * distinct experts of E uniformly: E * (1 - (1 - k/E)^n_tokens). */
double tide_roof_expected_experts(int64_t n_experts, int64_t k, int64_t n_tokens);

/* max(bytes / bytes_per_s, flops / flops_per_s) in seconds; *memory_bound
 * (may be NULL) says which term won. */
double tide_roof_time(const tide_roof *r, double bytes_per_s, double flops_per_s, int *memory_bound);

#endif
