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

/* ---- the fast index scores (kernel mode "fast"): bf16 tensor cores ----
 *
 * q and the keys are FP4-simulated (e2m1 codes times power-of-two or e4m3
 * scales): every value is exact in bf16, and so is every product in f32. So
 * the dot products can run on mma.sync.m16n8k16 (bf16 in, f32 accumulate);
 * only the order and precision of the f32 accumulation differ from the
 * CPU's double lanes (bound in docs/gpu.md). The epilogue is the CPU's:
 * bf16(dot), relu, bf16(· w[h]), summed over the heads in order in f32,
 * rounded to bf16.
 *
 * Tiling: a block (8 warps) per (64-key tile, query row). Shared memory holds
 * the row's q for 64 heads and the tile's keys as bf16, d-chunks of 128
 * (rows padded by 8 halves: the 8 rows x 4 pairs of a fragment load hit 32
 * banks); warp w owns head tile w % 4 (16 heads) and the 4 n-tiles of 8 keys
 * from 4 (w / 4) (32 keys). Fragments are read
 * from shared memory as 32-bit bf16 pairs (no ldmatrix: a first version).
 * After the d loop the warps write bf16(relu(bf16(acc))) * w rounded to
 * bf16 into a [64 heads][64 keys] f32 tile (over the key buffer), and
 * threads 0..63 add their key's column over the heads in order. More than 64
 * heads: the head loop repeats and the running sums carry over. A row's
 * keys: keys + (r % groups) * group_stride (decode: each sequence its own
 * pool; groups 1 and stride 0: all rows share the keys). */
#define IXF_KT 64  /* keys per block */
#define IXF_HT 64  /* heads per pass */
#define IXF_DC 128 /* d per chunk */
#define IXF_LD (IXF_DC + 8)
#define IXF_PLD (IXF_KT + 1) /* product tile row: fewer bank conflicts */

__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__global__ void __launch_bounds__(256) index_scores_fast_kernel(const float *__restrict__ q, int heads, int d,
                                                                const float *__restrict__ w,
                                                                const float *__restrict__ keys, int64_t n,
                                                                int groups, int64_t group_stride,
                                                                float *__restrict__ score) {
    __shared__ __align__(16) uint16_t qs[IXF_HT][IXF_LD];
    __shared__ __align__(16) uint16_t ks[IXF_KT * IXF_LD > IXF_HT * IXF_PLD * 2 ? IXF_KT * IXF_LD : IXF_HT * IXF_PLD * 2];
    float *pt = (float *)ks; /* [IXF_HT][IXF_PLD] after the dot products */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t r = blockIdx.y, j0 = (int64_t)blockIdx.x * IXF_KT;
    const float *qr = q + r * heads * (int64_t)d, *wr = w + r * heads;
    const float *kb = keys + (r % groups) * group_stride;
    const int mt = warp & 3, nt0 = (warp >> 2) * 4; /* 16 heads x 4 n-tiles of 8 keys */
    const int fr = lane >> 2, fc = (lane & 3) * 2;
    float run = 0.0f; /* thread t < IXF_KT: key j0 + t's running head sum */
    for (int h0 = 0; h0 < heads; h0 += IXF_HT) {
        float acc[4][4];
#pragma unroll
        for (int t = 0; t < 4; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
        for (int d0 = 0; d0 < d; d0 += IXF_DC) {
            __syncthreads(); /* the previous chunk's (or epilogue's) reads are done */
            for (int i = tid; i < IXF_HT * IXF_DC; i += 256) {
                int h = i / IXF_DC, k = i % IXF_DC;
                float v = (h0 + h < heads && d0 + k < d) ? qr[(int64_t)(h0 + h) * d + d0 + k] : 0.0f;
                qs[h][k] = tide_dev_bf16_enc(v);
            }
            for (int i = tid; i < IXF_KT * IXF_DC; i += 256) {
                int jj = i / IXF_DC, k = i % IXF_DC;
                float v = (j0 + jj < n && d0 + k < d) ? kb[(j0 + jj) * d + d0 + k] : 0.0f;
                ks[jj * IXF_LD + k] = tide_dev_bf16_enc(v);
            }
            __syncthreads();
#pragma unroll 2
            for (int kk = 0; kk < IXF_DC; kk += 16) {
                uint32_t a[4];
                const uint16_t *q0 = &qs[mt * 16 + fr][kk + fc], *q8 = &qs[mt * 16 + fr + 8][kk + fc];
                a[0] = *(const uint32_t *)q0;
                a[1] = *(const uint32_t *)q8;
                a[2] = *(const uint32_t *)(q0 + 8);
                a[3] = *(const uint32_t *)(q8 + 8);
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    const uint16_t *kp = &ks[((nt0 + t) * 8 + fr) * IXF_LD + kk + fc];
                    uint32_t b[2] = {*(const uint32_t *)kp, *(const uint32_t *)(kp + 8)};
                    mma_bf16_16816(acc[t], a, b);
                }
            }
        }
        __syncthreads(); /* every warp is done with ks: it becomes the product tile */
#pragma unroll
        for (int t = 0; t < 4; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int h = mt * 16 + fr + (e >= 2 ? 8 : 0), jj = (nt0 + t) * 8 + fc + (e & 1);
                float v = bf16_round(acc[t][e]);
                if (v < 0) v = 0;
                float wh = h0 + h < heads ? wr[h0 + h] : 0.0f;
                pt[h * IXF_PLD + jj] = bf16_round(__fmul_rn(v, wh));
            }
        __syncthreads();
        if (tid < IXF_KT) {
            int hn = heads - h0 < IXF_HT ? heads - h0 : IXF_HT;
            for (int h = 0; h < hn; h++) run = __fadd_rn(run, pt[h * IXF_PLD + tid]);
        }
    }
    if (tid < IXF_KT && j0 + tid < n) score[r * n + j0 + tid] = bf16_round(run);
}

extern "C" int tide_cuda_index_scores_fast(const float *q, int64_t rows, int heads, int64_t d, const float *w,
                                           const float *keys, int64_t n, int groups, int64_t group_stride,
                                           float *score, tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || rows > 65535 || heads < 1 || heads > 4096 || d < 1 || d > 65536 || n < 0 ||
        n > 0x7fffffffLL || groups < 1 || group_stride < 0)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda index_scores_fast: bad shape rows=%lld (<= 65535) heads=%d d=%lld n=%lld groups=%d",
                         (long long)rows, heads, (long long)d, (long long)n, groups);
    if (rows == 0 || n == 0) return 0;
    if (!q || !w || !keys || !score) return tide_fail(st, TIDE_ERR_INVALID, "cuda index_scores_fast: NULL pointer");
    dim3 grid((unsigned)((n + IXF_KT - 1) / IXF_KT), (unsigned)rows);
    index_scores_fast_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(q, heads, (int)d, w, keys, n, groups,
                                                                     group_stride, score);
    return tide_cuda_launched("index_scores_fast_kernel", st);
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
