/* Sparse attention with per-head sinks on the GPU: the semantics of
 * tide_cpu_ops()->sparse_attn (the reference's sparse_attn), bit for bit.
 *
 * Layout. The CPU op takes one pointer per entry; here every row's entries
 * are indices into one key/value array kv [n_kv][dim] (the window slots and
 * the compressed positions of a step, concatenated by the caller): idx
 * [rows][n_idx], an entry < 0 (the reference's -1) or >= n_kv is an empty
 * slot. The entry ORDER matters, as on the CPU: chunks of 64, in order.
 *
 * Tiling. One 128-thread block per (row, head); q and the running numerator
 * (dim floats each) live in shared memory. Per chunk of 64 entries:
 *   1. scores: 32 groups of 4 lanes, each group one entry at a time (two
 *      passes); lane l of a group sums the products of positions = l mod 4
 *      in double and the group combines (s0+s1)+(s2+s3): exactly the CPU's
 *      tide_cpu_dot, so the f32 score is identical;
 *   2. thread 0 runs the online-softmax bookkeeping of the CPU code
 *      (chunk max, correction, numpy-order exp and pairwise sum, BF16
 *      rounding of the un-normalised probabilities), on 64 values;
 *   3. the value product: one thread per output dimension, summing the 64
 *      bf16(p) * v[d] in double in entry order (as the CPU), then num[d] =
 *      num[d] * corr + f32(sum). Loads of v are coalesced across threads.
 * The score step reads each key with 4-lane groups (16 bytes per group per
 * step): correct first; a tensor-core QK^T over all heads of a row at once
 * is the obvious next version. */
#include <cuda_runtime.h>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"
#include "backend/cuda/ops_dev.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define ATTN_THREADS 128
#define ATTN_CHUNK 64

__device__ __forceinline__ float bf16_round(float x) { return tide_dev_bf16_dec(tide_dev_bf16_enc(x)); }

__global__ void __launch_bounds__(ATTN_THREADS) sparse_attn_kernel(const float *__restrict__ q, int heads,
                                                                   int64_t dim, const float *__restrict__ kv,
                                                                   int64_t n_kv, const int32_t *__restrict__ idx,
                                                                   int n_idx, const float *__restrict__ sink,
                                                                   float scale, float *__restrict__ out) {
    extern __shared__ float smem[];
    float *qs = smem, *num = smem + dim;
    __shared__ float sc[ATTN_CHUNK], pr[ATTN_CHUNK], pb[ATTN_CHUNK];
    __shared__ int64_t ent[ATTN_CHUNK];
    __shared__ float s_max, s_den, s_corr;
    const int64_t r = blockIdx.x / heads;
    const int h = (int)(blockIdx.x % heads);
    const int tid = threadIdx.x;
    const float *qr = q + (r * heads + h) * dim;
    for (int64_t d = tid; d < dim; d += ATTN_THREADS) {
        qs[d] = qr[d];
        num[d] = 0.0f;
    }
    if (tid == 0) {
        s_max = -1e30f;
        s_den = 0.0f;
    }
    const int32_t *row = idx + r * (int64_t)n_idx;
    for (int b = 0; b < n_idx; b += ATTN_CHUNK) {
        const int n = n_idx - b < ATTN_CHUNK ? n_idx - b : ATTN_CHUNK;
        __syncthreads(); /* qs/num written, previous chunk's shared values consumed */
        if (tid < n) {
            int32_t e = row[b + tid];
            ent[tid] = (e >= 0 && (int64_t)e < n_kv) ? (int64_t)e : -1;
        }
        __syncthreads();
        /* 1. scores */
        const int g = tid >> 2, l = tid & 3;
        for (int i0 = 0; i0 < n; i0 += ATTN_THREADS / 4) {
            int i = i0 + g;
            int64_t e = i < n ? ent[i] : -1;
            double s = e >= 0 ? tide_dev_dot_lane(qs, kv + e * dim, dim, l) : 0.0;
            float dot = tide_dev_dot_combine4(s);
            if (l == 0 && i < n) sc[i] = e >= 0 ? __fmul_rn(dot, scale) : -INFINITY;
        }
        __syncthreads();
        /* 2. online-softmax bookkeeping, as the CPU */
        if (tid == 0) {
            float cmax = -INFINITY;
            for (int i = 0; i < n; i++)
                if (sc[i] > cmax) cmax = sc[i];
            float maximum = s_max;
            float next = maximum > cmax ? maximum : cmax;
            float corr = tide_dev_expf(__fsub_rn(maximum, next));
            for (int i = 0; i < n; i++) pr[i] = ent[i] >= 0 ? tide_dev_expf(__fsub_rn(sc[i], next)) : 0.0f;
            s_den = __fadd_rn(__fmul_rn(s_den, corr), __double2float_rn(tide_dev_sum_np_f64(pr, n)));
            for (int i = 0; i < n; i++) pb[i] = bf16_round(pr[i]);
            s_corr = corr;
            s_max = next;
        }
        __syncthreads();
        /* 3. probability-weighted values, one rounding of the chunk's sum */
        const float corr = s_corr;
        for (int64_t d = tid; d < dim; d += ATTN_THREADS) {
            double pv = 0.0;
            for (int i = 0; i < n; i++) {
                int64_t e = ent[i];
                if (e < 0) continue;
                pv = __dadd_rn(pv, __dmul_rn((double)pb[i], (double)kv[e * dim + d]));
            }
            num[d] = __fadd_rn(__fmul_rn(num[d], corr), __double2float_rn(pv));
        }
    }
    __syncthreads();
    const float den = __fadd_rn(s_den, tide_dev_expf(__fsub_rn(sink[h], s_max)));
    float *o = out + (r * heads + h) * dim;
    for (int64_t d = tid; d < dim; d += ATTN_THREADS) o[d] = bf16_round(__fdiv_rn(num[d], den));
}

extern "C" int tide_cuda_sparse_attn(const float *q, int64_t rows, int heads, int64_t dim, const float *kv,
                                     int64_t n_kv, const int32_t *idx, int n_idx, const float *sink, float scale,
                                     float *out, tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || heads < 1 || dim < 1 || dim > TIDE_CUDA_ATTN_MAX_DIM || n_idx < 0 || n_kv < 0)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda sparse_attn: bad shape rows=%lld heads=%d dim=%lld (max %d) n_idx=%d n_kv=%lld",
                         (long long)rows, heads, (long long)dim, TIDE_CUDA_ATTN_MAX_DIM, n_idx, (long long)n_kv);
    if (rows == 0) return 0;
    if (!q || !sink || !out || (n_idx > 0 && (!idx || (n_kv > 0 && !kv))))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda sparse_attn: NULL pointer");
    if (rows * heads > 0x7fffffffLL)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda sparse_attn: rows*heads = %lld exceeds the grid",
                         (long long)rows * heads);
    size_t shm = (size_t)dim * 2 * sizeof(float);
    if (shm > 48 * 1024 &&
        tide_cuda_check(cudaFuncSetAttribute(sparse_attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm),
                        "sparse_attn: shared memory", st) != 0)
        return -1;
    sparse_attn_kernel<<<(unsigned)(rows * heads), ATTN_THREADS, shm, (cudaStream_t)stream>>>(
        q, heads, dim, kv, n_kv, idx, n_idx, sink, scale, out);
    return tide_cuda_launched("sparse_attn_kernel", st);
}
