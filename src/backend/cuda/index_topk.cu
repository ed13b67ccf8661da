/* The indexer on the GPU: scores of query rows against the index keys, and
 * the per-row top-k, with the semantics of tide_cpu_ops()'s index_scores and
 * topk_sorted, bit for bit.
 *
 * index_scores: score[r][j] = bf16(sum_h bf16(relu(bf16(q[r][h]·k[j])) * w[r][h]))
 * (q and keys already FP4-simulated by the caller, w BF16-exact; the head sum
 * is sequential f32 in head order, as the CPU). Tiling: one 256-thread block
 * per (key, query row); 64 groups of 4 lanes each take one head at a time
 * (more heads: further rounds), lane l summing the products at positions = l
 * mod 4 in double, combined (s0+s1)+(s2+s3) as tide_cpu_dot; thread 0 adds
 * the heads in order. The key is read once per row and head group (from L1
 * after the first head); batching several keys per block would cut the q
 * re-reads (next version: a tensor-core [heads x d] x [d x keys] product,
 * which needs the exact-dot question settled first).
 *
 * topk_sorted: the k best of score[r][0..n), ties toward the lower position,
 * written as positions sorted ascending. One 512-thread block per row:
 *   1. radix select of the k-th best 32-bit order key (f32 bits mapped so
 *      that unsigned order is score order; -0 counted as +0, since the CPU's
 *      comparison treats them as equal): four passes of a 256-bin histogram
 *      in shared memory, each narrowing to one byte of the key;
 *   2. one pass in position order selecting keys > T and the first `need`
 *      keys == T, placed by two block-wide prefix sums: the output comes out
 *      sorted without a sort.
 * NaN scores are outside the contract (the CPU's comparison is not an order
 * with NaN either). */
#include <cuda_runtime.h>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"
#include "backend/cuda/ops_dev.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define IDX_THREADS 256
#define TOPK_THREADS 512

__device__ __forceinline__ float bf16_round(float x) { return tide_dev_bf16_dec(tide_dev_bf16_enc(x)); }

__global__ void __launch_bounds__(IDX_THREADS) index_scores_kernel(const float *__restrict__ q, int heads, int64_t d,
                                                                   const float *__restrict__ w,
                                                                   const float *__restrict__ keys, int64_t n,
                                                                   float *__restrict__ score) {
    extern __shared__ float qk[]; /* heads */
    const int64_t j = blockIdx.x, r = blockIdx.y;
    const float *qr = q + r * heads * d, *k = keys + j * d, *wr = w + r * heads;
    const int g = threadIdx.x >> 2, l = threadIdx.x & 3;
    for (int h0 = 0; h0 < heads; h0 += IDX_THREADS / 4) {
        int h = h0 + g;
        double s = h < heads ? tide_dev_dot_lane(qr + h * d, k, d, l) : 0.0;
        float dot = tide_dev_dot_combine4(s);
        if (l == 0 && h < heads) qk[h] = dot;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int h = 0; h < heads; h++) {
            float v = bf16_round(qk[h]);
            if (v < 0) v = 0;
            s = __fadd_rn(s, bf16_round(__fmul_rn(v, wr[h])));
        }
        score[r * n + j] = bf16_round(s);
    }
}

extern "C" int tide_cuda_index_scores(const float *q, int64_t rows, int heads, int64_t d, const float *w,
                                      const float *keys, int64_t n, float *score, tide_cuda_stream stream,
                                      tide_status *st) {
    if (rows < 0 || rows > 65535 || heads < 1 || heads > 4096 || d < 1 || n < 0 || n > 0x7fffffffLL)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda index_scores: bad shape rows=%lld (<= 65535) heads=%d d=%lld n=%lld",
                         (long long)rows, heads, (long long)d, (long long)n);
    if (rows == 0 || n == 0) return 0;
    if (!q || !w || !keys || !score) return tide_fail(st, TIDE_ERR_INVALID, "cuda index_scores: NULL pointer");
    dim3 grid((unsigned)n, (unsigned)rows);
    index_scores_kernel<<<grid, IDX_THREADS, (size_t)heads * sizeof(float), (cudaStream_t)stream>>>(q, heads, d, w,
                                                                                                    keys, n, score);
    return tide_cuda_launched("index_scores_kernel", st);
}

/* Unsigned order key: larger key = larger score; -0 maps as +0. */
__device__ __forceinline__ uint32_t order_key(float s) {
    uint32_t u = __float_as_uint(s);
    if ((u & 0x7fffffffu) == 0) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Exclusive prefix sum over the block of v (blockDim.x = TOPK_THREADS);
 * *total gets the block's sum. Uses warp_tot[32]; ends with a barrier. */
__device__ static int block_scan(int v, int *warp_tot, int *total) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = TOPK_THREADS / 32;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_tot[wid] = x;
    __syncthreads();
    if (wid == 0) {
        int t = lane < nw ? warp_tot[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o) t += y;
        }
        if (lane < nw) warp_tot[lane] = t; /* inclusive */
    }
    __syncthreads();
    int before = wid > 0 ? warp_tot[wid - 1] : 0;
    *total = warp_tot[nw - 1];
    __syncthreads(); /* warp_tot may be reused by the next call */
    return before + x - v;
}

__global__ void __launch_bounds__(TOPK_THREADS) topk_kernel(const float *__restrict__ score, int64_t n, int k,
                                                            int32_t *__restrict__ out) {
    __shared__ int hist[256];
    __shared__ int warp_tot[32];
    __shared__ uint32_t s_prefix, s_mask;
    __shared__ int s_remaining;
    const int64_t r = blockIdx.x;
    const float *s = score + r * n;
    int32_t *o = out + r * (int64_t)k;
    const int tid = threadIdx.x;
    if (tid == 0) {
        s_prefix = 0;
        s_mask = 0;
        s_remaining = k;
    }
    /* 1. radix select, most significant byte first */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += TOPK_THREADS) hist[i] = 0;
        __syncthreads();
        const uint32_t prefix = s_prefix, mask = s_mask;
        for (int64_t i = tid; i < n; i += TOPK_THREADS) {
            uint32_t key = order_key(s[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xffu], 1);
        }
        __syncthreads();
        if (tid == 0) {
            int rem = s_remaining, dd = 255;
            for (; dd > 0; dd--) {
                if (hist[dd] >= rem) break;
                rem -= hist[dd];
            }
            s_remaining = rem;
            s_prefix = prefix | ((uint32_t)dd << shift);
            s_mask = mask | (0xffu << shift);
        }
        __syncthreads();
    }
    const uint32_t T = s_prefix;
    const int need = s_remaining; /* how many keys equal to T to take, lowest positions first */
    /* 2. ordered compaction */
    int out_base = 0, eq_base = 0;
    for (int64_t i0 = 0; i0 < n; i0 += TOPK_THREADS) {
        int64_t i = i0 + tid;
        uint32_t key = i < n ? order_key(s[i]) : 0;
        int gt = i < n && key > T, eq = i < n && key == T;
        int eq_tot, sel_tot;
        int eq_rank = eq_base + block_scan(eq, warp_tot, &eq_tot);
        int sel = gt || (eq && eq_rank < need);
        int pos = out_base + block_scan(sel, warp_tot, &sel_tot);
        if (sel) o[pos] = (int32_t)i;
        eq_base += eq_tot;
        out_base += sel_tot;
    }
}

extern "C" int tide_cuda_topk_sorted(const float *score, int64_t rows, int64_t n, int k, int32_t *out,
                                     tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || rows > 0x7fffffffLL || n < 0 || n > 0x7fffffffLL || k < 0 || (int64_t)k > n)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda topk: bad shape rows=%lld n=%lld k=%d (need 0 <= k <= n)",
                         (long long)rows, (long long)n, k);
    if (rows == 0 || k == 0) return 0;
    if (!score || !out) return tide_fail(st, TIDE_ERR_INVALID, "cuda topk: NULL pointer");
    topk_kernel<<<(unsigned)rows, TOPK_THREADS, 0, (cudaStream_t)stream>>>(score, n, k, out);
    return tide_cuda_launched("topk_kernel", st);
}
