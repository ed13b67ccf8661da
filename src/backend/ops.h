/* The ops table: every numeric kernel the forward pass calls, as one struct of
 * function pointers. The CPU backend (backend/cpu) fills it with the reference
 * semantics; the CUDA backend (backend/cuda/cuda_ops.h) fills the same
 * table. The model layer never does arithmetic on big tensors itself: it
 * arranges data and calls these.
 *
 * Conventions
 *   - Activations are f32 arrays, row-major. Where the reference keeps a
 *     tensor in BF16, our f32 array holds BF16-exact values: an op whose
 *     reference output is BF16 rounds its output (documented per op).
 *   - "rows" is the number of token rows in the step (all sequences of a
 *     ragged batch concatenated); ops are row-independent, so a row's result
 *     never depends on which other rows share the step.
 *   - Weights are read-only views (usually into the mmapped checkpoint) in
 *     their stored format; the GEMM decodes them per tile.
 *   - pool may be NULL (run on the calling thread).
 *   - Every op takes the table it was called through as its first argument,
 *     self: ops->linear(ops, pool, ...). A backend with state (the CUDA
 *     table's device buffers, weight map, error) finds it in self->ctx, so a
 *     process may hold several tables at once (one per device) and no
 *     backend needs a global. The CPU ops ignore self. Call an op only
 *     through its own table (never pass another table as self).
 *
 * GEMM semantics (the reference's fp8_gemm / fp4_gemm with act_quant):
 *   the activation row is quantised to FP8 e4m3 per 32 values with a UE8M0
 *   scale; for each 32-wide block b of the reduction dimension a partial dot
 *   product p_b of the e4m3 values (f32, sequential) is formed and the output
 *   accumulates (p_b * s_act[b]) * s_w[b] in f32 in block order; the result
 *   is rounded to BF16. Both scales are powers of two, so we fold them into
 *   the decoded operands (exact) and accumulate p'_b block by block. */
#ifndef TIDE_BACKEND_OPS_H
#define TIDE_BACKEND_OPS_H

#include <stdint.h>

#include "base/status.h"
#include "base/threadpool.h"

struct tide_st;

typedef enum tide_wtype {
    TIDE_W_F32 = 0, /* f32 [out][in] */
    TIDE_W_BF16,    /* bf16 [out][in], used as f32 (exact) */
    TIDE_W_FP8,     /* e4m3 [out][in], e8m0 scale [ceil(out/32)][ceil(in/32)] */
    TIDE_W_FP4,     /* e2m1 packed [out][in/2], e8m0 scale [out][in/32] */
} tide_wtype;

typedef struct tide_weight {
    tide_wtype type;
    int64_t out, in;
    const void *data;
    const uint8_t *scale; /* FP8 / FP4 only */
} tide_weight;

/* linear() flags */
enum {
    TIDE_LIN_BF16_OUT = 1, /* F32/BF16 weights: round the f32 result to BF16 */
};

/* Per-query description for sparse attention: n_idx key/value vectors (each
 * head_dim floats, BF16-exact), NULL entries are empty slots (the reference's
 * -1). The ORDER matters numerically: entries are processed in chunks of 64
 * as the reference's online softmax does. */
typedef struct tide_attn_row {
    const float *const *kv; /* n_idx pointers */
    int n_idx;
} tide_attn_row;

typedef struct tide_ops tide_ops;

struct tide_ops {
    const char *name;
    void *ctx; /* the backend's state for this table (NULL for the CPU) */

    /* y[r][o] = sum_i x[r][i] * W[o][i].
     * FP8/FP4 weights: the quantised GEMM above, y BF16-exact.
     * F32/BF16 weights: f32 dot products (sequential over i); y rounded to
     * BF16 when flags & TIDE_LIN_BF16_OUT (the reference's bf16 F.linear). */
    void (*linear)(const tide_ops *self, tide_pool *pool, const tide_weight *w, const float *x, int64_t rows, float *y,
                   int flags);

    /* y[r] = bf16(w * (x[r] * rsqrt(mean(x[r]^2) + eps))), f32 inside; y may alias x. */
    void (*rmsnorm)(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int64_t dim, const float *w,
                    double eps, float *y);

    /* Interleaved RoPE in place on n_vec vectors of 2*n_freq floats located at
     * x + v*stride (adjacent pairs are complex numbers), rotated by angle
     * cs[f] = (cos, sin) pairs: cs points at 2*n_freq floats for this
     * position. inverse conjugates. Output rounded to BF16 (the reference
     * copies the f32 rotation back into a BF16 tensor). */
    void (*rope)(const tide_ops *self, float *x, int64_t n_vec, int64_t stride, int64_t n_freq, const float *cs,
                 int inverse);

    /* Hyper-connection coefficients for each row: x is [rows][hc*dim]
     * (BF16-exact), fn [(2+hc)*hc][hc*dim] f32, scale[3], base[(2+hc)*hc].
     * Writes pre [rows][hc], post [rows][hc], comb [rows][hc][hc] (comb[k][j]:
     * weight of residual copy k in output copy j), exactly as the reference's
     * hc_mixes + hc_split_sinkhorn. */
    void (*hc_mixes)(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int hc, int64_t dim,
                     const float *fn, const float *scale, const float *base, double norm_eps,
                     int iters, double hc_eps, float *pre, float *post, float *comb);
    /* y[r] = bf16(sum_c pre[r][c] * x[r][c]) : [rows][hc][dim] -> [rows][dim]. */
    void (*hc_pre)(const tide_ops *self, const float *x, int64_t rows, int hc, int64_t dim, const float *pre, float *y);
    /* out[r][j] = bf16(post[r][j]*y[r] + sum_k comb[r][k][j]*res[r][k]); out may not alias res. */
    void (*hc_post)(const tide_ops *self, const float *y, const float *res, int64_t rows, int hc, int64_t dim,
                    const float *post, const float *comb, float *out);

    /* Sparse attention with sinks (the reference's sparse_attn): q [rows][heads][dim]
     * BF16-exact; out [rows][heads][dim] BF16. Per row, per head: online
     * softmax over the row's entries in chunks of 64, un-normalised
     * probabilities rounded to BF16 before the value product, the sink adding
     * exp(sink[h] - max) to the denominator. */
    void (*sparse_attn)(const tide_ops *self, tide_pool *pool, const float *q, int64_t rows, int heads, int64_t dim,
                        const tide_attn_row *idx, const float *sink, float scale, float *out);

    /* Indexer scores of one query row against n keys (index_k [n][d], FP4-simulated):
     * score[j] = bf16(sum_h bf16(relu(bf16(q[h]·k[j])) * w[h])), w BF16-exact. */
    void (*index_scores)(const tide_ops *self, const float *q, int heads, int64_t d, const float *w, const float *keys,
                         int64_t n, float *score);

    /* The top-k of score[0..n) (ties toward the LOWER position); writes the k
     * chosen positions sorted ascending. Returns k (= min(k, n)). */
    int (*topk_sorted)(const tide_ops *self, const float *score, int64_t n, int k, int32_t *out, int32_t *scratch);

    /* SwiGLU of the reference's Expert: h = silu(min(g, lim)) * clamp(u, -lim, lim)
     * (no clamps when lim <= 0) times weight (when weight != NULL, per row),
     * rounded to BF16. g, u are [rows][n]; h may alias g. */
    void (*swiglu)(const tide_ops *self, const float *g, const float *u, int64_t rows, int64_t n, double limit,
                   const float *weight, float *h);

    /* The engram layer's gate and update (after the wkv GEMM): kv [rows][(hc+1)*dim]
     * BF16 (keys of copies 0..hc-1, then the value), w [hc][dim] = q_weight * k_weight,
     * x [rows][hc][dim] updated in place: per copy c,
     * rstd = rsqrt(mean(x_c^2) + eps) * rsqrt(mean(key_c^2) + eps),
     * dot = sum(x_c * w_c * key_c) * rstd * dim^-0.5,
     * gate = sigmoid(sign(dot) * sqrt(max(|dot|, 1e-6))), x_c = bf16(x_c + gate * value). */
    void (*engram_mix)(const tide_ops *self, const float *kv, const float *w, int64_t rows, int hc,
                       int64_t dim, double eps, float *x);

    /* MoE routing per row (the reference's Gate after its f32 matmul):
     * scores = f(logits) with f = sqrt(softplus) (func 0), sigmoid (1) or
     * softmax (2); experts = top-k of scores + bias (ties toward the lower
     * expert id; bias may be NULL); weights = the raw scores of those,
     * divided by (sum + 1e-20) when norm && k > 1, times route_scale.
     * idx / w: [rows][k], in selection order. */
    void (*moe_route)(const tide_ops *self, const float *logits, int64_t rows, int n_experts, int k, int func,
                      const float *bias, int norm, float route_scale, int32_t *idx, float *w);

    /* One compressor group: out[d] = bf16(sum_i kv[i][d] * softmax_i(score[.][d]))
     * over the group's r tokens, f32 (kv, score: [r][dim]). */
    void (*compress_pool)(const tide_ops *self, const float *kv, const float *score, int r, int64_t dim, float *out);

    /* ---- Memory: where the forward pass keeps its activations ----
     * The forward allocates its step buffers with alloc (the CPU: host
     * memory; CUDA: device memory), hands them to the ops above, and moves
     * data between them and the host only through upload / download (the
     * step's metadata in, the logits and the few control arrays the host
     * must read out). It never dereferences them itself. Every op above
     * accepts either kind of pointer for its activations (a backend stages
     * host arrays as needed); weights are always the model's own.
     * alloc returns NULL on failure (error() says why); release(NULL) is a
     * no-op; copy is within the backend's memory (no overlap); zero fills
     * with zero bytes. */
    void *(*alloc)(const tide_ops *self, size_t bytes);
    void (*release)(const tide_ops *self, void *p);
    void (*upload)(const tide_ops *self, void *dst, const void *host_src, size_t bytes);
    void (*download)(const tide_ops *self, void *host_dst, const void *src, size_t bytes);
    void (*copy)(const tide_ops *self, void *dst, const void *src, size_t bytes);
    void (*zero)(const tide_ops *self, void *p, size_t bytes);

    /* ---- The forward's data movement, as ops (index arrays on the host) ---- */
    /* h[r][c][:] = row ids[r] of the table (F32 or BF16 [n][dim], as f32),
     * for every copy c < hc. */
    void (*embed)(const tide_ops *self, const tide_weight *table, const int32_t *ids, int64_t rows, int hc, float *h);
    /* dst row i = src row idx[i], rows of `width` bytes; dst and src do not overlap. */
    void (*gather_rows)(const tide_ops *self, const void *src, size_t width, const int64_t *idx, int64_t n, void *dst);
    /* acc[idx[i]][:] += y[i][:] in f32, for i = 0..n-1 in that order. */
    void (*scatter_add)(const tide_ops *self, const float *y, int64_t n, int64_t dim, const int64_t *idx, float *acc);
    /* out[i] = bf16(a[i] + b[i]); out may alias a or b. */
    void (*add_bf16)(const tide_ops *self, const float *a, const float *b, int64_t n, float *out);
    /* x[i] /= s. */
    void (*div_scalar)(const tide_ops *self, float *x, int64_t n, float s);
    /* out[r][d] = bf16((sum over c = 0..hc-1 in order of h[r][c][d]) / hc), f32 sum. */
    void (*hc_mean)(const tide_ops *self, const float *h, int64_t rows, int hc, int64_t dim, float *out);

    /* Optional (NULL for the CPU, which reads the mapped checkpoint where it
     * lies): place every tensor of the checkpoint in the backend's memory
     * once, before the first step, so that no step copies weights. The
     * engine calls it right after loading the model. It refuses, before
     * allocating anything, a model that does not fit, saying by how much. */
    int (*bind_weights)(const tide_ops *self, const struct tide_st *ck, tide_status *st);
    /* The ops return void: a backend that can fail (the CUDA table) records
     * its first error (sticky) and reports it here: 0, or -1 with it. The
     * engine asks after every forward pass and fails the pass's requests
     * (engine.c run_forward). NULL: the backend cannot fail (the CPU). */
    int (*error)(const tide_ops *self, tide_status *st);
};

/* Row `row` of an embedding-like table (F32 or BF16 [rows][in]) as floats,
 * from host memory (backend/cpu/cpu_mem.c). */
void tide_weight_row(const tide_weight *w, int64_t row, float *dst);

/* The CPU backend (reference semantics, threaded over the pool). */
const tide_ops *tide_cpu_ops(void);

#endif
