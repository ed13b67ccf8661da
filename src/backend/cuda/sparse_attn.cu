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
 *   1. scores: one lane of each group of 4 per entry sums q.k in order,
 *      each step an exact product plus the running f32 sum in double,
 *      rounded to f32: the CPU's dot_seq (cpu_attn.c, torch's order in the
 *      official graph), so the f32 score is identical (the other 3 lanes
 *      idle: this is the exact mode's correctness kernel);
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
            if (l == 0 && i < n) { /* the CPU's dot_seq: f32 sum in order, each step in double, rounded */
                float dot = 0.0f;
                const float *k = e >= 0 ? kv + e * dim : nullptr;
                for (int d = 0; k && d < dim; d++)
                    dot = __double2float_rn(__dadd_rn(__dmul_rn((double)qs[d], (double)k[d]), (double)dot));
                sc[i] = e >= 0 ? __fmul_rn(dot, scale) : -INFINITY;
            }
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

/* ---- the fast sparse attention (kernel mode "fast") ----
 *
 * The same function (chunks of 64 entries in order, online softmax, bf16
 * probabilities, sinks) with f32 arithmetic and the key/value rows shared
 * by a group of heads. q and every kv row are BF16-exact (the model rounds
 * them so), so they are staged as bf16 without loss.
 *
 * Tiling: one 256-thread block per (row, group of 16 heads). Per chunk the
 * 64 entries' rows are gathered into shared memory as bf16 (16-byte loads;
 * rows padded by 2 halves so that 16 lanes reading 16 rows hit 16 banks);
 * the group's q rows sit there too. Thread t = 32 w + l: head 2w + l/16,
 * entries l%16 + 16k (k < 4): its four scores (f32 FMA chains over bf16
 * pairs), the head's chunk max and sum by shuffles among its 16 lanes, the
 * bf16 probabilities and the correction into shared memory; then the value
 * product with thread t owning dimension pair t for all 16 heads (32
 * accumulators): num = num * corr + sum_i p_i v_i. The running max
 * and denominator stay in the score lanes' registers. Numerics: f32 dots
 * and sums where the exact kernel uses double lanes and numpy's order; the
 * bound is in docs/gpu.md. dim <= 512, dim % 4 == 0, kv 16-byte aligned. */
#define FA_HG 16
#define FA_THREADS 256

__global__ void __launch_bounds__(FA_THREADS, 2) sparse_attn_fast_kernel(const float *__restrict__ q, int heads, int dim,
                                                                      const float *__restrict__ kv, int64_t n_kv,
                                                                      const int32_t *__restrict__ idx, int n_idx,
                                                                      const float *__restrict__ sink, float scale,
                                                                      float *__restrict__ out) {
    extern __shared__ __align__(16) uint16_t fsm[];
    const int ld = dim + 2; /* halves per staged row */
    uint16_t *qs = fsm, *vs = fsm + FA_HG * ld;
    float *pb = (float *)(vs + ATTN_CHUNK * ld); /* [FA_HG][ATTN_CHUNK] */
    float *corr_s = pb + FA_HG * ATTN_CHUNK;     /* [FA_HG] */
    float *fin = corr_s + FA_HG;                 /* [FA_HG][2]: max, den */
    __shared__ int64_t ent[ATTN_CHUNK];
    const int groups = (heads + FA_HG - 1) / FA_HG;
    const int64_t r = blockIdx.x / groups;
    const int h0 = (int)(blockIdx.x % groups) * FA_HG, hn = heads - h0 < FA_HG ? heads - h0 : FA_HG;
    const int tid = threadIdx.x;
    const int sh = tid >> 4, sl = tid & 15; /* score role: head sh of the group, entries sl + 16k */
    for (int i = tid; i < FA_HG * (dim / 2); i += FA_THREADS) {
        int h = i / (dim / 2), d = 2 * (i % (dim / 2));
        float a = 0.0f, b = 0.0f;
        if (h < hn) {
            const float *qr = q + (r * heads + h0 + h) * (int64_t)dim + d;
            a = qr[0];
            b = qr[1];
        }
        *(uint32_t *)(qs + h * ld + d) = (uint32_t)tide_dev_bf16_enc(a) | ((uint32_t)tide_dev_bf16_enc(b) << 16);
    }
    const int d2 = tid; /* this thread's dimension pair in the value product */
    float acc[FA_HG][2];
#pragma unroll
    for (int h = 0; h < FA_HG; h++) acc[h][0] = acc[h][1] = 0.0f;
    float run_max = -1e30f, run_den = 0.0f;
    const int32_t *row = idx + r * (int64_t)n_idx;
    for (int b = 0; b < n_idx; b += ATTN_CHUNK) {
        const int n = n_idx - b < ATTN_CHUNK ? n_idx - b : ATTN_CHUNK;
        __syncthreads(); /* the previous chunk's vs / pb are consumed */
        if (tid < ATTN_CHUNK) {
            int32_t e = tid < n ? row[b + tid] : -1;
            ent[tid] = (e >= 0 && (int64_t)e < n_kv) ? (int64_t)e : -1;
        }
        __syncthreads();
        for (int i = tid; i < ATTN_CHUNK * (dim / 4); i += FA_THREADS) {
            int j = i / (dim / 4), d = 4 * (i % (dim / 4));
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (ent[j] >= 0) v = *(const float4 *)(kv + ent[j] * (int64_t)dim + d);
            uint32_t *dst = (uint32_t *)(vs + j * ld + d);
            dst[0] = (uint32_t)tide_dev_bf16_enc(v.x) | ((uint32_t)tide_dev_bf16_enc(v.y) << 16);
            dst[1] = (uint32_t)tide_dev_bf16_enc(v.z) | ((uint32_t)tide_dev_bf16_enc(v.w) << 16);
        }
        __syncthreads();
        /* scores: 4 entries per lane for head sh */
        float sc[4];
        const uint32_t *qp = (const uint32_t *)(qs + sh * ld);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int j = sl + 16 * k;
            const uint32_t *kp = (const uint32_t *)(vs + j * ld);
            float a0 = 0.0f, a1 = 0.0f;
            for (int d2 = 0; d2 < dim / 2; d2++) {
                uint32_t qa = qp[d2], ka = kp[d2];
                a0 = fmaf(__uint_as_float(qa << 16), __uint_as_float(ka << 16), a0);
                a1 = fmaf(__uint_as_float(qa & 0xffff0000u), __uint_as_float(ka & 0xffff0000u), a1);
            }
            sc[k] = (j < n && ent[j] >= 0) ? (a0 + a1) * scale : -INFINITY;
        }
        float cmax = fmaxf(fmaxf(sc[0], sc[1]), fmaxf(sc[2], sc[3]));
#pragma unroll
        for (int o = 8; o >= 1; o >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
        const float next = run_max > cmax ? run_max : cmax;
        const float corr = __expf(run_max - next);
        float psum = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float p = sc[k] == -INFINITY ? 0.0f : __expf(sc[k] - next);
            psum += p;
            pb[sh * ATTN_CHUNK + sl + 16 * k] = bf16_round(p);
        }
#pragma unroll
        for (int o = 8; o >= 1; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
        run_den = run_den * corr + psum;
        run_max = next;
        if (sl == 0) corr_s[sh] = corr;
        __syncthreads();
        /* values: thread t's dimension pairs, all heads of the group */
        if (d2 < dim / 2) {
#pragma unroll
            for (int h = 0; h < FA_HG; h++) {
                acc[h][0] *= corr_s[h];
                acc[h][1] *= corr_s[h];
            }
            for (int j = 0; j < n; j++) {
                uint32_t va = ((const uint32_t *)(vs + j * ld))[d2];
                float v0 = __uint_as_float(va << 16), v1 = __uint_as_float(va & 0xffff0000u);
#pragma unroll
                for (int h = 0; h < FA_HG; h++) {
                    float pj = pb[h * ATTN_CHUNK + j];
                    acc[h][0] = fmaf(pj, v0, acc[h][0]);
                    acc[h][1] = fmaf(pj, v1, acc[h][1]);
                }
            }
        }
    }
    if (sl == 0) {
        fin[2 * sh] = run_max;
        fin[2 * sh + 1] = run_den;
    }
    __syncthreads();
    if (d2 < dim / 2) {
#pragma unroll
        for (int h = 0; h < FA_HG; h++) {
            if (h >= hn) continue;
            float den = fin[2 * h + 1] + __expf(sink[h0 + h] - fin[2 * h]);
            float *o = out + (r * heads + h0 + h) * (int64_t)dim + 2 * d2;
            o[0] = bf16_round(acc[h][0] / den);
            o[1] = bf16_round(acc[h][1] / den);
        }
    }
}

extern "C" int tide_cuda_sparse_attn_fast(const float *q, int64_t rows, int heads, int64_t dim, const float *kv,
                                          int64_t n_kv, const int32_t *idx, int n_idx, const float *sink,
                                          float scale, float *out, tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || heads < 1 || dim < 4 || dim > TIDE_CUDA_ATTN_FAST_MAX_DIM || dim % 4 || n_idx < 0 || n_kv < 0)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda sparse_attn_fast: bad shape rows=%lld heads=%d dim=%lld (4..%d, a multiple of 4) "
                         "n_idx=%d n_kv=%lld",
                         (long long)rows, heads, (long long)dim, TIDE_CUDA_ATTN_FAST_MAX_DIM, n_idx, (long long)n_kv);
    if (rows == 0) return 0;
    if (!q || !sink || !out || (n_idx > 0 && (!idx || (n_kv > 0 && !kv))))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda sparse_attn_fast: NULL pointer");
    if (((uintptr_t)kv & 15) != 0)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda sparse_attn_fast: kv is not 16-byte aligned");
    int64_t groups = (heads + FA_HG - 1) / FA_HG;
    if (rows * groups > 0x7fffffffLL)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda sparse_attn_fast: rows x head groups exceeds the grid");
    size_t shm = (size_t)(FA_HG + ATTN_CHUNK) * (size_t)(dim + 2) * 2 + (size_t)(FA_HG * ATTN_CHUNK + 3 * FA_HG) * 4;
    shm = (shm + 15) & ~(size_t)15;
    if (shm > 48 * 1024 &&
        tide_cuda_check(cudaFuncSetAttribute(sparse_attn_fast_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)shm),
                        "sparse_attn_fast: shared memory", st) != 0)
        return -1;
    sparse_attn_fast_kernel<<<(unsigned)(rows * groups), FA_THREADS, shm, (cudaStream_t)stream>>>(
        q, heads, (int)dim, kv, n_kv, idx, n_idx, sink, scale, out);
    return tide_cuda_launched("sparse_attn_fast_kernel", st);
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
