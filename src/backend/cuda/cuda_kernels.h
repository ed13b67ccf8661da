/* The CUDA kernels' C ABI: plain C declarations, implemented in the .cu files
 * of this folder (which include this header inside extern "C"). Host code in
 * C calls these with DEVICE pointers; nothing here touches host arrays except
 * the copy helpers.
 *
 * Conventions (shared with backend/ops.h, whose semantics the kernels follow
 * and against whose CPU implementation tests/gpu checks them):
 *   - every function returns 0 or -1 and fills *st on failure (st may be
 *     NULL); argument errors are found before anything is launched;
 *   - launches are asynchronous on `stream` (NULL: the legacy default
 *     stream); a launch error is reported at once, an error during execution
 *     by the next tide_cuda_sync;
 *   - bf16 arrays are uint16_t bit patterns, fp8 arrays uint8_t e4m3 codes,
 *     scales uint8_t e8m0 codes.
 *
 * Linked from libtide_cuda (built only where nvcc exists); the library is not
 * part of libtide, so CPU-only builds never see these symbols. */
#ifndef TIDE_BACKEND_CUDA_CUDA_KERNELS_H
#define TIDE_BACKEND_CUDA_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* The same type as CUDA's cudaStream_t, without including CUDA headers. */
typedef struct CUstream_st *tide_cuda_stream;

/* ---- device and memory (cuda_rt.cu) ---- */

/* Number of visible CUDA devices; 0 (and success) when there is no driver or
 * no device, so callers can skip cleanly. */
int tide_cuda_device_count(int *n, tide_status *st);
/* One line describing device 0: name, compute capability, multiprocessors,
 * memory. */
int tide_cuda_describe(char *buf, size_t size, tide_status *st);
int tide_cuda_malloc(void **p, size_t bytes, tide_status *st);
void tide_cuda_free(void *p); /* NULL is fine */
int tide_cuda_upload(void *dev, const void *host, size_t bytes, tide_status *st);
int tide_cuda_download(void *host, const void *dev, size_t bytes, tide_status *st);
int tide_cuda_memset(void *dev, int byte, size_t bytes, tide_status *st);
/* Waits for all work on the device; reports any error raised while it ran. */
int tide_cuda_sync(tide_status *st);

/* ---- RMSNorm (rmsnorm.cu) ----
 * y[r] = bf16(w * (x[r] * rsqrt(mean(x[r]^2) + eps))), f32 inside, the mean
 * summed in numpy's pairwise order exactly as the CPU backend does: the
 * result is bit-identical to tide_cpu_ops()->rmsnorm. x [rows][dim] f32,
 * w [dim] f32, 1 <= dim <= TIDE_CUDA_RMSNORM_MAX_DIM.
 * _f32 writes f32 values that are BF16-exact (y may alias x);
 * _bf16 writes bf16 bit patterns. */
#define TIDE_CUDA_RMSNORM_MAX_DIM 16384
int tide_cuda_rmsnorm_f32(const float *x, int64_t rows, int64_t dim, const float *w, double eps,
                          float *y, tide_cuda_stream stream, tide_status *st);
int tide_cuda_rmsnorm_bf16(const float *x, int64_t rows, int64_t dim, const float *w, double eps,
                           uint16_t *y, tide_cuda_stream stream, tide_status *st);

/* ---- FP8 activation quantisation (quant_fp8_act.cu) ----
 * Per row of x [rows][n] f32, blocks of 32 along the row (a trailing partial
 * block on its own): q [rows][n] e4m3 codes and scale [rows][ceil(n/32)]
 * ue8m0 codes, bit-identical to tide_quant_fp8_act(x_row, n, 32, ...). */
int tide_cuda_quant_fp8_act(const float *x, int64_t rows, int64_t n, uint8_t *q, uint8_t *scale,
                            tide_cuda_stream stream, tide_status *st);

/* ---- FP8 block-scaled GEMM (gemm_fp8.cu; kernel in gemm_blockscaled.cuh) ----
 * y[m][n] = bf16( sum over 32-blocks b of k, in order, of
 *                 dot32(xq[m][b], w[n][b]) * s_x[m][b] * s_w[n/32][b] )
 * xq [M][K] e4m3 with scales xs [M][K/32] (tide_cuda_quant_fp8_act's output),
 * w [N][K] e4m3 with scales ws [ceil(N/32)][K/32] (the checkpoint's layout,
 * TIDE_W_FP8 in ops.h), y [M][N] bf16. The semantics of the CPU linear() for
 * FP8 weights; each 32-block's dot product comes from the tensor cores, so
 * results agree with the CPU to within one bf16 rounding (tests/gpu states
 * the bound). K must be a positive multiple of 32; M, N >= 1. */
int tide_cuda_gemm_fp8(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                       const uint8_t *ws, int64_t n, int64_t k, uint16_t *y, tide_cuda_stream stream,
                       tide_status *st);

/* The same GEMM (fp4 = 0: FP8 weights as tide_cuda_gemm_fp8; fp4 = 1: FP4
 * weights as tide_cuda_gemm_fp4) on CUDA cores with the CPU linear()'s
 * exact numerics, bit for bit: each 32-block's dot product exact in double
 * and rounded once to f32 (gemm_exact.cu). For the exact kernel mode; the
 * tensor-core GEMMs differ from it by one bf16 step on a few outputs in a
 * million. 1 <= m <= 65535, k a positive multiple of 32, w 16-byte aligned. */
int tide_cuda_gemm_exact(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                         const uint8_t *ws, int64_t n, int64_t k, int fp4, uint16_t *y, tide_cuda_stream stream,
                         tide_status *st);

/* EXPERIMENTAL (gemm_fp8_wgmma.cu): the same function on Hopper's native
 * fp8 warpgroup instruction (wgmma); same arguments and bound. The _probe
 * form is for tests/gpu only: swap != 0 swaps the two core-matrix offsets
 * of the shared-memory descriptors (a check of their meaning). */
int tide_cuda_gemm_fp8_wgmma(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                             const uint8_t *ws, int64_t n, int64_t k, uint16_t *y,
                             tide_cuda_stream stream, tide_status *st);
int tide_cuda_gemm_fp8_wgmma_probe(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                                   const uint8_t *ws, int64_t n, int64_t k, uint16_t *y, int swap,
                                   tide_cuda_stream stream, tide_status *st);

/* ---- FP4 dequantising GEMM (gemm_fp4.cu) ----
 * The same with e2m1 weights: w [N][K/2] packed (element 2i in the low
 * nibble), ws [N][K/32] e8m0 (TIDE_W_FP4 in ops.h): the block dot products
 * use w's e2m1 values and the scale s_w[n][b] of the output row. The
 * semantics of the CPU linear() for FP4 weights, to the same bound. */
int tide_cuda_gemm_fp4(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                       const uint8_t *ws, int64_t n, int64_t k, uint16_t *y, tide_cuda_stream stream,
                       tide_status *st);

/* ---- Sparse attention with sinks (sparse_attn.cu) ----
 * tide_cpu_ops()->sparse_attn, bit for bit, with entries given as indices:
 * q [rows][heads][dim] (BF16-exact), kv [n_kv][dim] (shared by all heads),
 * idx [rows][n_idx] int32 rows of kv, an entry < 0 (the reference's -1) or
 * >= n_kv an empty slot; the order of a row's entries is the order of the
 * online softmax's 64-entry chunks. sink [heads]; out [rows][heads][dim]
 * BF16-exact f32. 1 <= dim <= TIDE_CUDA_ATTN_MAX_DIM; n_idx >= 0. */
#define TIDE_CUDA_ATTN_MAX_DIM 4096
int tide_cuda_sparse_attn(const float *q, int64_t rows, int heads, int64_t dim, const float *kv, int64_t n_kv,
                          const int32_t *idx, int n_idx, const float *sink, float scale, float *out,
                          tide_cuda_stream stream, tide_status *st);

/* The fast sparse attention (kernel mode fast): the same function and
 * arguments with f32 arithmetic and kv rows shared by 16 heads (bound in
 * docs/gpu.md); q and kv BF16-exact (they are in the model), kv 16-byte
 * aligned, dim a multiple of 4 up to TIDE_CUDA_ATTN_FAST_MAX_DIM. */
#define TIDE_CUDA_ATTN_FAST_MAX_DIM 512
int tide_cuda_sparse_attn_fast(const float *q, int64_t rows, int heads, int64_t dim, const float *kv, int64_t n_kv,
                               const int32_t *idx, int n_idx, const float *sink, float scale, float *out,
                               tide_cuda_stream stream, tide_status *st);

/* ---- Hyper-connections (hc.cu) ----
 * tide_cpu_ops()'s hc_mixes (with Sinkhorn), hc_pre and hc_post, bit for
 * bit; same arguments and layouts as ops.h, all arrays on the device.
 * 1 <= hc <= TIDE_CUDA_HC_MAX, hc*dim <= TIDE_CUDA_HC_MAX_N for hc_mixes;
 * hc_post's out may not alias res. */
#define TIDE_CUDA_HC_MAX 16
#define TIDE_CUDA_HC_MAX_N 65536
int tide_cuda_hc_mixes(const float *x, int64_t rows, int hc, int64_t dim, const float *fn, const float *scale,
                       const float *base, double norm_eps, int iters, double hc_eps, float *pre, float *post,
                       float *comb, tide_cuda_stream stream, tide_status *st);
/* The fast hc_mixes (kernel mode "fast"): the same function with the
 * projection as a split-K f32 product (hc.cu explains the tiling; the bound
 * against the CPU is in docs/gpu.md). Batch-invariant: a row's result does
 * not depend on the other rows. ws: device scratch of
 * tide_cuda_hc_mixes_fast_workspace(rows, hc, dim) bytes (0 for a bad
 * shape); rows <= 524280. */
size_t tide_cuda_hc_mixes_fast_workspace(int64_t rows, int hc, int64_t dim);
int tide_cuda_hc_mixes_fast(const float *x, int64_t rows, int hc, int64_t dim, const float *fn, const float *scale,
                            const float *base, double norm_eps, int iters, double hc_eps, float *pre, float *post,
                            float *comb, void *ws, size_t ws_bytes, tide_cuda_stream stream, tide_status *st);
int tide_cuda_hc_pre(const float *x, int64_t rows, int hc, int64_t dim, const float *pre, float *y,
                     tide_cuda_stream stream, tide_status *st);
int tide_cuda_hc_post(const float *y, const float *res, int64_t rows, int hc, int64_t dim, const float *post,
                      const float *comb, float *out, tide_cuda_stream stream, tide_status *st);

/* ---- RoPE (rope.cu) ----
 * tide_cpu_ops()->rope, bit for bit, for many rows: row r's vectors are at
 * x + r*row_stride + v*vec_stride (v < n_vec), 2*n_freq floats each, rotated
 * by cs + r*2*n_freq (cos, sin pairs for that row's position, YaRN applied by
 * the caller); inverse conjugates; in place, BF16-rounded. */
int tide_cuda_rope(float *x, int64_t rows, int64_t n_vec, int64_t row_stride, int64_t vec_stride, int64_t n_freq,
                   const float *cs, int inverse, tide_cuda_stream stream, tide_status *st);

/* ---- FP4 activation simulation (fp4_sim.cu) ----
 * tide_sim_fp4_e8m0 / tide_sim_fp4_e4m3 (num.h) applied to each row of x
 * [rows][n] in place, bit for bit; 1 <= block <= 128. */
int tide_cuda_sim_fp4_e8m0(float *x, int64_t rows, int64_t n, int64_t block, tide_cuda_stream stream,
                           tide_status *st);
int tide_cuda_sim_fp4_e4m3(float *x, int64_t rows, int64_t n, int64_t block, tide_cuda_stream stream,
                           tide_status *st);

/* ---- Packed KV entries (kv_pack.cu) ----
 * The caches' packed layout (src/cache/kv_pack.h; fmt = tide_kv_fmt: 0
 * window FP8 + UE8M0/32, 1 latent FP4 + E4M3/16, 2 index key FP4 +
 * UE8M0/32), rows entries of dim values back to back at e (entry r at
 * e + r * tide_kv_entry_bytes(fmt, dim)). pack: from raw values x
 * [rows][dim], byte-identical to tide_kv_pack; unpack: y [rows][dim],
 * bit-identical to tide_kv_unpack (= the simulation of the packed values). */
int tide_cuda_kv_pack(int fmt, const float *x, int64_t rows, int64_t dim, uint8_t *e, tide_cuda_stream stream,
                      tide_status *st);
int tide_cuda_kv_unpack(int fmt, const uint8_t *e, int64_t rows, int64_t dim, float *y, tide_cuda_stream stream,
                        tide_status *st);

/* ---- Indexer (index_topk.cu) ----
 * index_scores: tide_cpu_ops()->index_scores for each query row r, bit for
 * bit: q [rows][heads][d], w [rows][heads], keys [n][d], score [rows][n];
 * rows <= 65535.
 * topk_sorted: tide_cpu_ops()->topk_sorted per row of score [rows][n]: the
 * k best positions (ties toward the lower position), ascending, in out
 * [rows][k]; 0 <= k <= n (the caller clamps k to n). No NaN scores. */
int tide_cuda_index_scores(const float *q, int64_t rows, int heads, int64_t d, const float *w, const float *keys,
                           int64_t n, float *score, tide_cuda_stream stream, tide_status *st);
/* The fast index scores (kernel mode fast): the same function with the
 * q·k dot products on bf16 tensor cores with f32 accumulation (q and keys
 * must be bf16-exact, as FP4-simulated values are); the epilogue is the
 * CPU's. Row r reads the keys at keys + (r % groups) * group_stride (groups
 * 1, stride 0: shared keys). Bound in docs/gpu.md. */
int tide_cuda_index_scores_fast(const float *q, int64_t rows, int heads, int64_t d, const float *w, const float *keys,
                                int64_t n, int groups, int64_t group_stride, float *score, tide_cuda_stream stream,
                                tide_status *st);
int tide_cuda_topk_sorted(const float *score, int64_t rows, int64_t n, int k, int32_t *out,
                          tide_cuda_stream stream, tide_status *st);

/* ---- MoE routing (moe_route.cu) ----
 * tide_cpu_ops()->moe_route; same arguments, device arrays (bias may be
 * NULL). Bit-identical for func 1 and 2; for func 0 (sqrt softplus) the
 * double exp/log1p of the device may, rarely, round to a different f32 than
 * glibc's (see moe_route.cu).
 * 1 <= k <= min(64, n_experts), n_experts <= TIDE_CUDA_MOE_MAX_EXPERTS. */
#define TIDE_CUDA_MOE_MAX_EXPERTS 4096
int tide_cuda_moe_route(const float *logits, int64_t rows, int n_experts, int k, int func, const float *bias,
                        int norm, float route_scale, int32_t *idx, float *w, tide_cuda_stream stream,
                        tide_status *st);

/* ---- Routed MoE experts as grouped FP4 GEMMs (experts.cu) ----
 * y[r] = sum over the row's experts in ascending expert id order (f32,
 * from 0) of ye_e[r], ye_e = bf16(w2_e hq), h = bf16(weight * swiglu(bf16(w1_e x),
 * bf16(w3_e x))) with the swiglu limit, every GEMM the block-scaled FP4 one
 * (activation quantised to e4m3 per 32 values, tide_cuda_quant_fp8_act):
 * the arithmetic of src/model/moe.c's routed part on the CPU ops. With
 * `shared` (the shared expert's bf16 output [rows][D], may be NULL) the
 * result is bf16(y + shared), moe.c's final line; without it y is the f32
 * sum (add the shared expert as bf16(y + shared) yourself to match moe.c).
 * Agreement with the CPU: each 32-block dot product comes from the tensor
 * cores (see tests/gpu/gpu_test_experts.c for the bound and the measured
 * error); all the rest is the CPU's f32 sequence of roundings.
 *
 * The expert table is made once (at load) from a HOST array of the experts'
 * DEVICE tensors: w1, w3 [I][D/2] packed e2m1 with e8m0 scales [I][D/32],
 * w2 [D][I/2] with [D][I/32] (TIDE_W_FP4 in ops.h); packed tensors 16-byte
 * aligned, scales 4-byte aligned; D, I multiples of 32 up to 2^20. Routing: idx / w
 * [rows][k] as from tide_cuda_moe_route, expert ids in [0, n_experts) (an
 * id outside is ignored, as moe.c's loop over experts ignores it; a repeated
 * id counts twice). Rows are bucketed by expert on the device: no host
 * round trip. The workspace (device, 256-byte aligned) holds the buckets
 * and the intermediates; its size depends on (rows, k) only, about
 * rows*k*(5*I + 2*D) + rows*D bytes, and grows with rows (a workspace sized
 * for the largest batch serves every smaller one). x, y: [rows][D] f32,
 * 16-byte aligned, x BF16-exact; y may alias x (x is read by the first
 * launches only, y written by the last). */
#define TIDE_CUDA_EXPERTS_MAX 1024
#define TIDE_CUDA_EXPERTS_MAX_K 64
typedef struct {
    const uint8_t *w1, *w1_scale, *w3, *w3_scale, *w2, *w2_scale; /* device pointers */
} tide_cuda_expert_weights;
typedef struct tide_cuda_experts tide_cuda_experts;
int tide_cuda_experts_create(const tide_cuda_expert_weights *experts, int n_experts, int64_t dim, int64_t inter,
                             tide_cuda_experts **out, tide_status *st);
void tide_cuda_experts_destroy(tide_cuda_experts *ex); /* NULL is fine */
/* Workspace bytes for one call of rows x k (0 for bad arguments). */
size_t tide_cuda_moe_experts_workspace(const tide_cuda_experts *ex, int64_t rows, int k);
int tide_cuda_moe_experts(const tide_cuda_experts *ex, const float *x, int64_t rows, const int32_t *idx, const float *w,
                          int k, double swiglu_limit, const uint16_t *shared, float *y, void *workspace,
                          size_t workspace_bytes, tide_cuda_stream stream, tide_status *st);

/* ---- Elementwise ops (elementwise.cu) ----
 * swiglu: tide_cpu_ops()->swiglu bit for bit (g, u, h [rows][n] f32,
 * weight [rows] or NULL, h may alias g).
 * compress_pool: tide_cpu_ops()->compress_pool bit for bit, for `groups`
 * groups in one launch: kv, score [groups][r][dim] -> out [groups][dim];
 * 1 <= r <= 64.
 * engram_mix: tide_cpu_ops()->engram_mix bit for bit (kv [rows][(hc+1)*dim],
 * w [hc][dim], x [rows][hc][dim] in place); 1 <= hc, 1 <= dim <=
 * TIDE_CUDA_ENGRAM_MAX_DIM.
 * argmax: per row of logits [rows][vocab], the first index of the maximum;
 * NaN and -inf never win; -1 when no value qualifies (src/engine/sampler.c's
 * greedy argmax). out [rows] int32.
 * copy: a plain 16-byte-vectorised device copy (bytes a multiple of 16,
 * both pointers 16-byte aligned); the benchmark's copy ceiling. */
#define TIDE_CUDA_ENGRAM_MAX_DIM 16384
int tide_cuda_swiglu(const float *g, const float *u, int64_t rows, int64_t n, double limit, const float *weight,
                     float *h, tide_cuda_stream stream, tide_status *st);
int tide_cuda_compress_pool(const float *kv, const float *score, int64_t groups, int r, int64_t dim, float *out,
                            tide_cuda_stream stream, tide_status *st);
int tide_cuda_engram_mix(const float *kv, const float *w, int64_t rows, int hc, int64_t dim, double eps, float *x,
                         tide_cuda_stream stream, tide_status *st);
int tide_cuda_argmax(const float *logits, int64_t rows, int64_t vocab, int32_t *out, tide_cuda_stream stream,
                     tide_status *st);
int tide_cuda_copy(void *dst, const void *src, size_t bytes, tide_cuda_stream stream, tide_status *st);

/* ---- F32 / BF16-weight linear (linear_f32.cu) ----
 * y[r][o] = sum_i x[r][i] * W[o][i], W [out][in] f32 (w_bf16 == 0) or bf16
 * bit patterns (w_bf16 == 1), x [rows][in] f32, y [rows][out] f32; with
 * TIDE_CUDA_LIN_BF16_OUT (= ops.h's TIDE_LIN_BF16_OUT) y is rounded to BF16.
 * Default: tide_cpu_ops()->linear bit for bit (the CPU's dot product: f32
 * products summed in double over 4 lanes i % 4 in order, (s0+s1)+(s2+s3),
 * rounded once; the GPU runs the same double additions, as FMAs, which is
 * exact here because a product of two floats is exact in double).
 * TIDE_CUDA_LIN_FAST: the same lanes accumulated in f32 by FMA instead;
 * |y - cpu| <= (in/4 + 3) * 2^-24 * sum_i |x_i W_i| + 2^-24 |cpu| (before
 * the optional bf16 rounding). Both are memory-bound up to about 16 rows
 * (the H200's double FMA rate is half its f32 rate; docs/gpu.md). */
#define TIDE_CUDA_LIN_BF16_OUT 1
#define TIDE_CUDA_LIN_FAST 2
int tide_cuda_linear_f32(const void *w, int w_bf16, int64_t out, int64_t in, const float *x, int64_t rows, float *y,
                         int flags, tide_cuda_stream stream, tide_status *st);
/* n_groups independent products in one launch: group g multiplies the
 * weight at w + g*w_stride (elements) with the rows at x + g*x_stride into
 * y + g*y_stride; the same numerics as tide_cuda_linear_f32 per group. */
int tide_cuda_linear_f32_grouped(const void *w, int w_bf16, int64_t out, int64_t in, const float *x, int64_t rows,
                                 float *y, int flags, int64_t n_groups, int64_t w_stride, int64_t x_stride,
                                 int64_t y_stride, tide_cuda_stream stream, tide_status *st);

/* ---- Device-resident step glue (dev_glue.cu) ----
 * Streams, graphs, timers: thin wrappers of the CUDA runtime. A graph is
 * captured from everything launched on a stream between graph_begin and
 * graph_end (relaxed capture mode) and replayed by graph_launch.
 * fill: synthetic contents generated on the device, element i a function of
 * (seed, i) only: F32 / BF16 / E4M3 normal(0,1) * scale; BYTES uniform bytes
 * (packed e2m1 pairs); CODE uniform bytes in lo..hi (e8m0 scales); I32
 * uniform in lo..hi. count is in elements.
 * bf16_to_f32: y[i] = x[i] (exact). scatter_rows: dst[dst_row[r]] =
 * src[r] for rows with dst_row >= 0 (rows of dim floats). transpose01:
 * x [a][b][c] -> y [b][a][c]. attn_idx: sparse attention index rows
 * [rows][win + k]: win_base[r] + j for j < win_len[r] (else -1), then
 * lat_base[r] + topk[r][j] (-1 stays -1). */
typedef struct CUgraphExec_st *tide_cuda_graph;
typedef struct {
    void *start, *stop;
} tide_cuda_timer;
enum {
    TIDE_CUDA_FILL_F32 = 0,
    TIDE_CUDA_FILL_BF16,
    TIDE_CUDA_FILL_E4M3,
    TIDE_CUDA_FILL_BYTES,
    TIDE_CUDA_FILL_CODE,
    TIDE_CUDA_FILL_I32
};
int tide_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, tide_status *st);
int tide_cuda_stream_create(tide_cuda_stream *s, tide_status *st);
void tide_cuda_stream_destroy(tide_cuda_stream s); /* NULL is fine */
int tide_cuda_stream_sync(tide_cuda_stream s, tide_status *st);
int tide_cuda_graph_begin(tide_cuda_stream s, tide_status *st);
int tide_cuda_graph_end(tide_cuda_stream s, tide_cuda_graph *out, tide_status *st);
int tide_cuda_graph_launch(tide_cuda_graph g, tide_cuda_stream s, tide_status *st);
void tide_cuda_graph_destroy(tide_cuda_graph g); /* NULL is fine */
int tide_cuda_timer_create(tide_cuda_timer *t, tide_status *st);
void tide_cuda_timer_destroy(tide_cuda_timer *t);
/* which 0: start, 1: stop, recorded on s */
int tide_cuda_timer_mark(tide_cuda_timer *t, int which, tide_cuda_stream s, tide_status *st);
/* waits for the stop mark; milliseconds between the marks */
int tide_cuda_timer_ms(tide_cuda_timer *t, double *ms, tide_status *st);
/* Single events, for per-phase timing: ms between two recorded events. */
int tide_cuda_event_create(void **ev, tide_status *st);
void tide_cuda_event_destroy(void *ev); /* NULL is fine */
int tide_cuda_event_record(void *ev, tide_cuda_stream s, tide_status *st);
int tide_cuda_event_ms(void *a, void *b, double *ms, tide_status *st);
int tide_cuda_fill(void *p, size_t count, int kind, float scale, int32_t lo, int32_t hi, uint64_t seed,
                   tide_cuda_stream stream, tide_status *st);
int tide_cuda_bf16_to_f32(const uint16_t *x, int64_t n, float *y, tide_cuda_stream stream, tide_status *st);
int tide_cuda_scatter_rows(const float *src, int64_t rows, int64_t dim, const int32_t *dst_row, float *dst,
                           tide_cuda_stream stream, tide_status *st);
int tide_cuda_transpose01(const float *x, int64_t a, int64_t b, int64_t c, float *y, tide_cuda_stream stream,
                          tide_status *st);
int tide_cuda_attn_idx(int64_t rows, int win, int k, const int32_t *win_base, const int32_t *win_len,
                       const int32_t *lat_base, const int32_t *topk, int32_t *idx, tide_cuda_stream stream,
                       tide_status *st);

/* ---- The forward's data movement (fwd_glue.cu) ----
 * Bit-identical to the CPU ops of the same names (ops.h); index arrays are
 * device arrays. embed: table [n][dim] f32 (bf16 != 0: bf16), h[r][c] = row
 * ids[r] for c < hc. gather_rows: dst row i = src row idx[i] (width bytes,
 * no overlap). scatter_add: acc[idx[i]] += y[i] in i order. add_bf16:
 * out = bf16(a + b). div_scalar: x /= s. hc_mean: out[r] = bf16(sum_c
 * h[r][c] / hc). memcpy_any: a synchronous copy between any two of host
 * and device memory (cudaMemcpyDefault). */
int tide_cuda_embed(const void *table, int bf16, int64_t dim, const int32_t *ids, int64_t rows, int hc, float *h,
                    tide_cuda_stream stream, tide_status *st);
int tide_cuda_gather_rows(const void *src, size_t width, const int64_t *idx, int64_t n, void *dst,
                          tide_cuda_stream stream, tide_status *st);
int tide_cuda_scatter_add(const float *y, int64_t n, int64_t dim, const int64_t *idx, float *acc,
                          tide_cuda_stream stream, tide_status *st);
int tide_cuda_add_bf16(const float *a, const float *b, int64_t n, float *out, tide_cuda_stream stream,
                       tide_status *st);
int tide_cuda_div_scalar(float *x, int64_t n, float s, tide_cuda_stream stream, tide_status *st);
int tide_cuda_hc_mean(const float *h, int64_t rows, int hc, int64_t dim, float *out, tide_cuda_stream stream,
                      tide_status *st);
int tide_cuda_memcpy_any(void *dst, const void *src, size_t bytes, tide_status *st);

/* The debugging guard of the host stand-in (tests/gpu/fake_cuda.c): there,
 * the spans (the forward's device-resident buffers) are readable by the
 * host only while open (the CUDA ops table opens them for the length of an
 * op), so a forward pass that touches a device buffer itself crashes in
 * CI. A no-op in the real library. */
typedef struct tide_cuda_span {
    char *p;
    size_t bytes;
} tide_cuda_span;
void tide_cuda_host_guard(const tide_cuda_span *spans, size_t n, int open);

#endif
