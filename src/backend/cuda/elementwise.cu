/* The small ops of backend/ops.h on the GPU, each bit-identical to the CPU
 * backend (semantics: cuda_kernels.h):
 *   swiglu        one thread per 4 elements (16-byte loads when n % 4 == 0
 *                 and the arrays are aligned), or per element;
 *   compress_pool one thread per (group, feature): max over the r scores,
 *                 the exps summed in order, then the weighted sum in order
 *                 (each exp computed twice rather than kept in a
 *                 run-time-indexed array, which would live in local memory);
 *   engram_mix    one block per (row, copy): the three f32 reductions in
 *                 numpy's pairwise order (below), then the gate, then the
 *                 in-place update;
 *   argmax        one block per row: strided scan with a strict >, then a
 *                 (value, index) reduction that prefers the lower index;
 *   copy          16-byte grid-stride copy (the benchmark's ceiling).
 *
 * Pairwise sums (engram_mix): the CPU's tide_cpu_sum_np splits n > 128 at
 * n/2 rounded down to a multiple of 8 until the pieces are at most 128
 * long, sums each leaf with eight running sums, and adds the halves left +
 * right. The tree depends only on n: thread 0 lists the leaves (start,
 * length) by the same recursion, the threads sum the leaves in parallel
 * (the products x*x etc. formed on the fly, rounded as on the CPU), and
 * threads 0-2 add the three trees up by the recursion again. Every rounding
 * step is an explicit _rn intrinsic (nvcc would contract a*b+c). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"
#include "backend/cuda/ops_dev.cuh"
#include "backend/cuda/swiglu_dev.cuh"

namespace {

constexpr int EW_THREADS = 256;

int64_t grid_for(int64_t work, int threads) {
    int64_t g = (work + threads - 1) / threads;
    return g < 1 ? 1 : (g > 65535 * 16 ? 65535 * 16 : g); /* grid-stride loops cover the rest */
}

/* ---- swiglu ---- */

__global__ void __launch_bounds__(EW_THREADS)
    swiglu_kernel(const float *g, const float *__restrict__ u, int64_t rows, int64_t n, float lim,
                  const float *__restrict__ weight, float *h, int vec) {
    const int64_t stride = (int64_t)gridDim.x * EW_THREADS, total = rows * n;
    int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (vec) { /* n % 4 == 0: a quad never straddles two rows */
        for (; i < total / 4; i += stride) {
            float4 a = ((const float4 *)g)[i], b = ((const float4 *)u)[i];
            int64_t r = i * 4 / n;
            int hw = weight != NULL;
            float wt = hw ? weight[r] : 0.0f;
            float4 o = make_float4(tide_dev_swiglu(a.x, b.x, lim, hw, wt), tide_dev_swiglu(a.y, b.y, lim, hw, wt),
                                   tide_dev_swiglu(a.z, b.z, lim, hw, wt), tide_dev_swiglu(a.w, b.w, lim, hw, wt));
            ((float4 *)h)[i] = o;
        }
    } else {
        for (; i < total; i += stride) {
            int hw = weight != NULL;
            h[i] = tide_dev_swiglu(g[i], u[i], lim, hw, hw ? weight[i / n] : 0.0f);
        }
    }
}

/* ---- compress_pool ---- */

__global__ void __launch_bounds__(EW_THREADS)
    compress_pool_kernel(const float *__restrict__ kv, const float *__restrict__ score, int64_t groups, int r,
                         int64_t dim, float *__restrict__ out) {
    const int64_t stride = (int64_t)gridDim.x * EW_THREADS;
    for (int64_t q = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; q < groups * dim; q += stride) {
        const int64_t grp = q / dim, d = q % dim;
        const float *sc = score + grp * r * dim + d, *kp = kv + grp * r * dim + d;
        float m = sc[0];
        for (int i = 1; i < r; i++) m = sc[i * dim] > m ? sc[i * dim] : m;
        float sum = 0.0f;
        for (int i = 0; i < r; i++) sum = __fadd_rn(sum, tide_dev_expf(__fsub_rn(sc[i * dim], m)));
        float acc = 0.0f;
        for (int i = 0; i < r; i++) {
            float e = tide_dev_expf(__fsub_rn(sc[i * dim], m));
            acc = __fadd_rn(acc, __fmul_rn(kp[i * dim], __fdiv_rn(e, sum)));
        }
        out[q] = tide_dev_bf16_dec(tide_dev_bf16_enc(acc));
    }
}

/* ---- engram_mix ---- */

constexpr int ENG_THREADS = 256;
constexpr int LEAF_MAX = 128;
/* a row of at most TIDE_CUDA_ENGRAM_MAX_DIM = 16384 values has at most 129
 * leaves (counted for every length by the same recursion) */
constexpr int ENG_LEAVES = 160;

__device__ void list_leaves(int start, int n, int *count, int *ls, int *ll) {
    if (n <= LEAF_MAX) {
        ls[*count] = start;
        ll[*count] = n;
        (*count)++;
        return;
    }
    int n2 = n / 2;
    n2 -= n2 % 8;
    list_leaves(start, n2, count, ls, ll);
    list_leaves(start + n2, n - n2, count, ls, ll);
}

__device__ float add_tree(int n, const float *leaf, int *li) {
    if (n <= LEAF_MAX) return leaf[(*li)++];
    int n2 = n / 2;
    n2 -= n2 % 8;
    float a = add_tree(n2, leaf, li);
    float b = add_tree(n - n2, leaf, li);
    return __fadd_rn(a, b);
}

/* tide_cpu_sum_np of v(start..start+n-1) for a leaf (n <= 128). */
template <class V> __device__ float leaf_sum(V v, int start, int n) {
    if (n < 8) {
        float r = 0.0f;
        for (int i = 0; i < n; i++) r = __fadd_rn(r, v(start + i));
        return r;
    }
    float r[8];
#pragma unroll
    for (int j = 0; j < 8; j++) r[j] = v(start + j);
    int i = 8;
    for (; i < n - (n % 8); i += 8)
#pragma unroll
        for (int j = 0; j < 8; j++) r[j] = __fadd_rn(r[j], v(start + i + j));
    float res = __fadd_rn(__fadd_rn(__fadd_rn(r[0], r[1]), __fadd_rn(r[2], r[3])),
                          __fadd_rn(__fadd_rn(r[4], r[5]), __fadd_rn(r[6], r[7])));
    for (; i < n; i++) res = __fadd_rn(res, v(start + i));
    return res;
}

__global__ void __launch_bounds__(ENG_THREADS)
    engram_mix_kernel(const float *__restrict__ kv, const float *__restrict__ w, int hc, int dim, float eps,
                      float scale, float *__restrict__ x) {
    __shared__ int ls[ENG_LEAVES], ll[ENG_LEAVES];
    __shared__ float lsum[3][ENG_LEAVES];
    __shared__ int n_leaves;
    __shared__ float s_gate, s_tot[3];
    const int64_t r = blockIdx.x / hc;
    const int c = (int)(blockIdx.x % hc);
    float *h = x + ((int64_t)r * hc + c) * dim;
    const float *kr = kv + r * (int64_t)(hc + 1) * dim, *key = kr + (int64_t)c * dim, *value = kr + (int64_t)hc * dim;
    const float *wc = w + (int64_t)c * dim;
    if (threadIdx.x == 0) {
        int cnt = 0;
        list_leaves(0, dim, &cnt, ls, ll);
        n_leaves = cnt;
    }
    __syncthreads();
    const int L = n_leaves;
    for (int q = threadIdx.x; q < 3 * L; q += ENG_THREADS) {
        int which = q / L, lf = q % L;
        float s;
        if (which == 0) s = leaf_sum([&](int i) { return __fmul_rn(h[i], h[i]); }, ls[lf], ll[lf]);
        else if (which == 1) s = leaf_sum([&](int i) { return __fmul_rn(key[i], key[i]); }, ls[lf], ll[lf]);
        else s = leaf_sum([&](int i) { return __fmul_rn(__fmul_rn(h[i], wc[i]), key[i]); }, ls[lf], ll[lf]);
        lsum[which][lf] = s;
    }
    __syncthreads();
    if (threadIdx.x < 3) {
        int li = 0;
        s_tot[threadIdx.x] = add_tree(dim, lsum[threadIdx.x], &li);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float fd = (float)dim;
        float rh = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(s_tot[0], fd), eps)));
        float rk = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(s_tot[1], fd), eps)));
        float rstd = __fmul_rn(rh, rk);
        float dot = __fmul_rn(__fmul_rn(s_tot[2], rstd), scale);
        float ad = fabsf(dot);
        float mag = __fsqrt_rn(ad > 1e-6f ? ad : 1e-6f);
        s_gate = tide_dev_sigmoid(copysignf(mag, dot));
    }
    __syncthreads();
    const float gate = s_gate;
    for (int i = threadIdx.x; i < dim; i += ENG_THREADS)
        h[i] = tide_dev_bf16_dec(tide_dev_bf16_enc(__fadd_rn(h[i], __fmul_rn(gate, value[i]))));
}

/* ---- argmax ---- */

constexpr int AM_THREADS = 512;

/* Whether (v2, i2) beats (v1, i1): i < 0 means "nothing yet". */
__device__ __forceinline__ bool am_better(float v1, int64_t i1, float v2, int64_t i2) {
    return i2 >= 0 && (i1 < 0 || v2 > v1 || (v2 == v1 && i2 < i1));
}

__global__ void __launch_bounds__(AM_THREADS)
    argmax_kernel(const float *__restrict__ logits, int64_t vocab, int vec, int32_t *__restrict__ out) {
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int64_t si[AM_THREADS / 32];
    const float *l = logits + (int64_t)blockIdx.x * vocab;
    float bv = -INFINITY;
    int64_t bi = -1;
    /* each thread sees its indices in increasing order: a strict > keeps
     * the first of equal values; NaN and -inf never pass v > bv */
    if (vec) {
        for (int64_t q = threadIdx.x; q < vocab / 4; q += AM_THREADS) {
            float4 t = ((const float4 *)l)[q];
            if (t.x > bv) bv = t.x, bi = q * 4;
            if (t.y > bv) bv = t.y, bi = q * 4 + 1;
            if (t.z > bv) bv = t.z, bi = q * 4 + 2;
            if (t.w > bv) bv = t.w, bi = q * 4 + 3;
        }
    } else {
        for (int64_t i = threadIdx.x; i < vocab; i += AM_THREADS)
            if (l[i] > bv) bv = l[i], bi = i;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, bv, o);
        int64_t i2 = __shfl_xor_sync(0xffffffffu, bi, o);
        if (am_better(bv, bi, v2, i2)) bv = v2, bi = i2;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int wi = 1; wi < AM_THREADS / 32; wi++)
            if (am_better(bv, bi, sv[wi], si[wi])) bv = sv[wi], bi = si[wi];
        out[blockIdx.x] = (int32_t)bi;
    }
}

/* ---- copy ---- */

__global__ void __launch_bounds__(EW_THREADS) copy_kernel(uint4 *__restrict__ dst, const uint4 *__restrict__ src,
                                                         int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * EW_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

int aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

} /* namespace */

extern "C" int tide_cuda_swiglu(const float *g, const float *u, int64_t rows, int64_t n, double limit,
                                const float *weight, float *h, tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || n < 0 || (n > 0 && rows > INT64_MAX / n))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda swiglu: rows %lld, n %lld", (long long)rows, (long long)n);
    if (rows == 0 || n == 0) return 0;
    if (!g || !u || !h) return tide_fail(st, TIDE_ERR_INVALID, "cuda swiglu: NULL pointer");
    int vec = n % 4 == 0 && aligned16(g) && aligned16(u) && aligned16(h);
    int64_t work = vec ? rows * n / 4 : rows * n;
    swiglu_kernel<<<(unsigned)grid_for(work, EW_THREADS), EW_THREADS, 0, (cudaStream_t)stream>>>(
        g, u, rows, n, (float)limit, weight, h, vec);
    return tide_cuda_launched("swiglu_kernel", st);
}

extern "C" int tide_cuda_compress_pool(const float *kv, const float *score, int64_t groups, int r, int64_t dim,
                                       float *out, tide_cuda_stream stream, tide_status *st) {
    if (groups < 0 || dim < 0 || r < 1 || r > 64 || (dim > 0 && groups > INT64_MAX / 64 / dim))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda compress_pool: groups %lld, r %d (1..64), dim %lld",
                         (long long)groups, r, (long long)dim);
    if (groups == 0 || dim == 0) return 0;
    if (!kv || !score || !out) return tide_fail(st, TIDE_ERR_INVALID, "cuda compress_pool: NULL pointer");
    compress_pool_kernel<<<(unsigned)grid_for(groups * dim, EW_THREADS), EW_THREADS, 0, (cudaStream_t)stream>>>(
        kv, score, groups, r, dim, out);
    return tide_cuda_launched("compress_pool_kernel", st);
}

extern "C" int tide_cuda_engram_mix(const float *kv, const float *w, int64_t rows, int hc, int64_t dim, double eps,
                                    float *x, tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || hc < 1 || dim < 1 || dim > TIDE_CUDA_ENGRAM_MAX_DIM || rows * hc > 0x7fffffffLL)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda engram_mix: rows %lld, hc %d, dim %lld (1..%d)", (long long)rows,
                         hc, (long long)dim, TIDE_CUDA_ENGRAM_MAX_DIM);
    if (rows == 0) return 0;
    if (!kv || !w || !x) return tide_fail(st, TIDE_ERR_INVALID, "cuda engram_mix: NULL pointer");
    /* the same host expressions as tide_cpu_engram_mix */
    float e = (float)eps, scale = (float)pow((double)dim, -0.5);
    engram_mix_kernel<<<(unsigned)(rows * hc), ENG_THREADS, 0, (cudaStream_t)stream>>>(kv, w, hc, (int)dim, e, scale,
                                                                                       x);
    return tide_cuda_launched("engram_mix_kernel", st);
}

extern "C" int tide_cuda_argmax(const float *logits, int64_t rows, int64_t vocab, int32_t *out, tide_cuda_stream stream,
                                tide_status *st) {
    if (rows < 0 || rows > 0x7fffffffLL || vocab < 1 || vocab > 0x7fffffffLL)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda argmax: rows %lld, vocab %lld", (long long)rows, (long long)vocab);
    if (rows == 0) return 0;
    if (!logits || !out) return tide_fail(st, TIDE_ERR_INVALID, "cuda argmax: NULL pointer");
    int vec = vocab % 4 == 0 && aligned16(logits);
    argmax_kernel<<<(unsigned)rows, AM_THREADS, 0, (cudaStream_t)stream>>>(logits, vocab, vec, out);
    return tide_cuda_launched("argmax_kernel", st);
}

extern "C" int tide_cuda_copy(void *dst, const void *src, size_t bytes, tide_cuda_stream stream, tide_status *st) {
    if (bytes % 16 != 0 || (bytes && (!dst || !src || !aligned16(dst) || !aligned16(src))))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda copy: %zu bytes (a multiple of 16), 16-byte aligned pointers",
                         bytes);
    if (bytes == 0) return 0;
    int64_t n = (int64_t)(bytes / 16);
    copy_kernel<<<(unsigned)grid_for(n, EW_THREADS), EW_THREADS, 0, (cudaStream_t)stream>>>((uint4 *)dst,
                                                                                        (const uint4 *)src, n);
    return tide_cuda_launched("copy_kernel", st);
}
