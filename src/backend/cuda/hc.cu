/* Hyper-connections on the GPU: the per-row mixing coefficients (hc_mixes:
 * RMS-normalised projection of the flattened copies, sigmoid gates and the
 * Sinkhorn-normalised combination matrix) and the collapse / expand steps
 * (hc_pre, hc_post), with the semantics of tide_cpu_ops()'s hc_* ops, bit
 * for bit.
 *
 * hc_mixes tiling. One 256-thread block per row (x row: n = hc*dim floats):
 *   1. mean of squares in numpy's pairwise order: the split tree depends on
 *      n only; thread 0 lists its leaves (64..128 values each, so at most
 *      n/64 of them), each thread sums whole leaves (8 running sums, as
 *      numpy), thread 0 adds the leaves back up the tree;
 *   2. the (2+hc)*hc projections: 64 groups of 4 lanes, one projection per
 *      group at a time, each lane one of tide_cpu_dot's four double sums
 *      (positions = lane mod 4), combined (s0+s1)+(s2+s3): identical f32;
 *   3. thread 0: gates, combination logits and Sinkhorn (at most 16x16).
 * Step 2 reads fn once per row; for many rows a GEMM over rows would share
 * it (next version: the projection is a [rows x n] x [n x (2+hc)hc] product).
 *
 * hc_pre / hc_post: elementwise over the output with the CPU's sequential f32
 * sums over the copies (grid-stride loops, coalesced along dim). */
#include <cuda_runtime.h>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"
#include "backend/cuda/ops_dev.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define HC_THREADS 256
#define HC_MAX_LEAVES (TIDE_CUDA_HC_MAX_N / 64 + 2)

__device__ __forceinline__ float bf16_round(float x) { return tide_dev_bf16_dec(tide_dev_bf16_enc(x)); }

/* Leaves of numpy's pairwise split of [off, off+n), left to right. */
__device__ static void list_leaves(int32_t off, int32_t n, int32_t *lo, int32_t *ln, int *k) {
    if (n <= 128) {
        lo[*k] = off;
        ln[*k] = n;
        (*k)++;
        return;
    }
    int32_t n2 = n / 2;
    n2 -= n2 % 8;
    list_leaves(off, n2, lo, ln, k);
    list_leaves(off + n2, n - n2, lo, ln, k);
}

/* The leaves' sums added back in the tree's order. */
__device__ static float add_leaves(int32_t n, const float *leaf, int *k) {
    if (n <= 128) return leaf[(*k)++];
    int32_t n2 = n / 2;
    n2 -= n2 % 8;
    float a = add_leaves(n2, leaf, k);
    float b = add_leaves(n - n2, leaf, k);
    return __fadd_rn(a, b);
}

/* numpy's sum of x[i]^2 over one leaf (n <= 128). */
__device__ static float leaf_sum_sq(const float *x, int32_t n) {
    if (n < 8) {
        float r = 0.0f;
        for (int32_t i = 0; i < n; i++) r = __fadd_rn(r, __fmul_rn(x[i], x[i]));
        return r;
    }
    float r[8];
#pragma unroll
    for (int j = 0; j < 8; j++) r[j] = __fmul_rn(x[j], x[j]);
    int32_t i = 8;
    for (; i < n - (n % 8); i += 8)
#pragma unroll
        for (int j = 0; j < 8; j++) r[j] = __fadd_rn(r[j], __fmul_rn(x[i + j], x[i + j]));
    float res = __fadd_rn(__fadd_rn(__fadd_rn(r[0], r[1]), __fadd_rn(r[2], r[3])),
                          __fadd_rn(__fadd_rn(r[4], r[5]), __fadd_rn(r[6], r[7])));
    for (; i < n; i++) res = __fadd_rn(res, __fmul_rn(x[i], x[i]));
    return res;
}

__device__ static void sinkhorn(float *c, int h, int iters, float eps) {
    for (int k = 0; k < h; k++) { /* softmax along each row, plus eps */
        float *row = c + k * h, m = row[0], s = 0.0f;
        for (int j = 1; j < h; j++) m = row[j] > m ? row[j] : m;
        for (int j = 0; j < h; j++) {
            row[j] = tide_dev_expf(__fsub_rn(row[j], m));
            s = __fadd_rn(s, row[j]);
        }
        for (int j = 0; j < h; j++) row[j] = __fadd_rn(__fdiv_rn(row[j], s), eps);
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) /* the first pass only normalises columns */
            for (int k = 0; k < h; k++) {
                float s = 0.0f;
                for (int j = 0; j < h; j++) s = __fadd_rn(s, c[k * h + j]);
                for (int j = 0; j < h; j++) c[k * h + j] = __fdiv_rn(c[k * h + j], __fadd_rn(s, eps));
            }
        for (int j = 0; j < h; j++) {
            float s = 0.0f;
            for (int k = 0; k < h; k++) s = __fadd_rn(s, c[k * h + j]);
            for (int k = 0; k < h; k++) c[k * h + j] = __fdiv_rn(c[k * h + j], __fadd_rn(s, eps));
        }
    }
}

/* Gates and Sinkhorn from the scaled projections m[0..nm) of one row
 * (one thread): pre, post, comb of that row; cm is h*h scratch. */
__device__ static void hc_finish(const float *m, int h, const float *scale, const float *base, int iters,
                                 float hc_eps, float *pr, float *po, float *co, float *cm) {
    for (int c = 0; c < h; c++) {
        pr[c] = __fadd_rn(tide_dev_sigmoid(__fadd_rn(__fmul_rn(m[c], scale[0]), base[c])), hc_eps);
        po[c] = __fmul_rn(2.0f, tide_dev_sigmoid(__fadd_rn(__fmul_rn(m[h + c], scale[1]), base[h + c])));
    }
    for (int i = 0; i < h * h; i++) cm[i] = __fadd_rn(__fmul_rn(m[2 * h + i], scale[2]), base[2 * h + i]);
    sinkhorn(cm, h, iters, hc_eps);
    for (int i = 0; i < h * h; i++) co[i] = cm[i];
}

__global__ void __launch_bounds__(HC_THREADS) hc_mixes_kernel(const float *__restrict__ x, int hc, int64_t dim,
                                                              const float *__restrict__ fn,
                                                              const float *__restrict__ scale,
                                                              const float *__restrict__ base, float norm_eps,
                                                              int iters, float hc_eps, float *__restrict__ pre,
                                                              float *__restrict__ post, float *__restrict__ comb) {
    __shared__ int32_t leaf_off[HC_MAX_LEAVES], leaf_len[HC_MAX_LEAVES];
    __shared__ float leaf_sum[HC_MAX_LEAVES];
    __shared__ float m[(2 + TIDE_CUDA_HC_MAX) * TIDE_CUDA_HC_MAX];
    __shared__ float cm[TIDE_CUDA_HC_MAX * TIDE_CUDA_HC_MAX];
    __shared__ int n_leaves;
    __shared__ float rs;
    const int64_t r = blockIdx.x;
    const int h = hc, nm = (2 + hc) * hc, tid = threadIdx.x;
    const int32_t n = (int32_t)(hc * dim);
    const float *xr = x + r * n;

    /* 1. rs = 1 / sqrt(mean(x^2) + eps), numpy order */
    if (tid == 0) {
        int k = 0;
        list_leaves(0, n, leaf_off, leaf_len, &k);
        n_leaves = k;
    }
    __syncthreads();
    for (int i = tid; i < n_leaves; i += HC_THREADS) leaf_sum[i] = leaf_sum_sq(xr + leaf_off[i], leaf_len[i]);
    __syncthreads();
    if (tid == 0) {
        int k = 0;
        float mean = __fdiv_rn(add_leaves(n, leaf_sum, &k), (float)n);
        rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, norm_eps)));
    }
    __syncthreads();

    /* 2. projections */
    const int g = tid >> 2, l = tid & 3;
    for (int i0 = 0; i0 < nm; i0 += HC_THREADS / 4) {
        int i = i0 + g;
        double s = i < nm ? tide_dev_dot_lane(xr, fn + (int64_t)i * n, n, l) : 0.0;
        float dot = tide_dev_dot_combine4(s);
        if (l == 0 && i < nm) m[i] = __fmul_rn(dot, rs);
    }
    __syncthreads();

    /* 3. gates and Sinkhorn */
    if (tid == 0) hc_finish(m, h, scale, base, iters, hc_eps, pre + r * h, post + r * h, comb + r * h * h, cm);
}

/* ---- the fast hc_mixes (kernel mode "fast"): split-K over the row ----
 *
 * The projection is a [rows x n] x [n x nm] product with nm = (2+hc)*hc tiny
 * (24 for hc 4) and n = hc*dim large (20480 at the released widths): one
 * block per row reads the 2 MB weight serially and waits on memory. Here:
 *   A. grid (n / KS slices, rows / RB): a block stages its k-slice of RB
 *      rows of x and, OC outputs at a time, the slice of those weight rows
 *      (rows padded to KS+1 floats: the 32 outputs of a warp hit 32 banks)
 *      in shared memory with coalesced loads; thread (r, o) forms the f32
 *      dot product of the slice (four interleaved accumulators), threads
 *      r < RB the row's sum of squares; partials go to ws[slice][row][nm+1].
 *   B. one block per row adds the slices' partials in slice order (a row's
 *      result never depends on the other rows: batch-invariant), scales by
 *      rsqrt(mean + eps), and thread 0 applies gates and Sinkhorn exactly
 *      as the exact kernel does (hc_finish).
 * The weight is read once per RB rows (from L2 after the first block row).
 * Numerics: f32 sums of at most KS terms per partial plus n/KS partials
 * instead of tide_cpu_dot's double lanes; docs/gpu.md states the bound. */
#define HCF_KS 256
#define HCF_RB 8
#define HCF_OC 32
#define HCF_THREADS (HCF_RB * HCF_OC)

static int64_t hcf_slices(int64_t n) { return (n + HCF_KS - 1) / HCF_KS; }

__global__ void __launch_bounds__(HCF_THREADS) hc_mixes_fast_part(const float *__restrict__ x, int64_t rows,
                                                                  int32_t n, int nm, const float *__restrict__ fn,
                                                                  float *__restrict__ part) {
    __shared__ float xs[HCF_RB][HCF_KS];
    __shared__ float wsm[HCF_OC][HCF_KS + 1];
    const int tid = threadIdx.x, sl = blockIdx.x;
    const int64_t r0 = (int64_t)blockIdx.y * HCF_RB;
    const int32_t k0 = sl * HCF_KS, kl = n - k0 < HCF_KS ? n - k0 : HCF_KS;
    for (int i = tid; i < HCF_RB * HCF_KS; i += HCF_THREADS) {
        int r = i / HCF_KS, k = i % HCF_KS;
        xs[r][k] = (r0 + r < rows && k < kl) ? x[(r0 + r) * n + k0 + k] : 0.0f;
    }
    __syncthreads();
    const int64_t stride = nm + 1;
    if (tid < HCF_RB && r0 + tid < rows) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        for (int k = 0; k < HCF_KS; k += 4) {
            a0 = fmaf(xs[tid][k], xs[tid][k], a0);
            a1 = fmaf(xs[tid][k + 1], xs[tid][k + 1], a1);
            a2 = fmaf(xs[tid][k + 2], xs[tid][k + 2], a2);
            a3 = fmaf(xs[tid][k + 3], xs[tid][k + 3], a3);
        }
        part[((int64_t)sl * rows + r0 + tid) * stride + nm] = (a0 + a1) + (a2 + a3);
    }
    const int r = tid / HCF_OC, o = tid % HCF_OC;
    for (int oc0 = 0; oc0 < nm; oc0 += HCF_OC) {
        for (int i = tid; i < HCF_OC * HCF_KS; i += HCF_THREADS) {
            int oo = i / HCF_KS, k = i % HCF_KS;
            wsm[oo][k] = (oc0 + oo < nm && k < kl) ? fn[(int64_t)(oc0 + oo) * n + k0 + k] : 0.0f;
        }
        __syncthreads();
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        for (int k = 0; k < HCF_KS; k += 4) {
            a0 = fmaf(xs[r][k], wsm[o][k], a0);
            a1 = fmaf(xs[r][k + 1], wsm[o][k + 1], a1);
            a2 = fmaf(xs[r][k + 2], wsm[o][k + 2], a2);
            a3 = fmaf(xs[r][k + 3], wsm[o][k + 3], a3);
        }
        if (r0 + r < rows && oc0 + o < nm) part[((int64_t)sl * rows + r0 + r) * stride + oc0 + o] = (a0 + a1) + (a2 + a3);
        __syncthreads();
    }
}

__global__ void __launch_bounds__(HC_THREADS) hc_mixes_fast_finish(const float *__restrict__ part, int64_t rows,
                                                                   int32_t n, int hc, int n_slices,
                                                                   const float *__restrict__ scale,
                                                                   const float *__restrict__ base, float norm_eps,
                                                                   int iters, float hc_eps, float *__restrict__ pre,
                                                                   float *__restrict__ post,
                                                                   float *__restrict__ comb) {
    __shared__ float m[(2 + TIDE_CUDA_HC_MAX) * TIDE_CUDA_HC_MAX + 1];
    __shared__ float cm[TIDE_CUDA_HC_MAX * TIDE_CUDA_HC_MAX];
    const int64_t r = blockIdx.x;
    const int h = hc, nm = (2 + hc) * hc, tid = threadIdx.x;
    for (int j = tid; j <= nm; j += HC_THREADS) {
        float s = 0.0f;
        for (int sl = 0; sl < n_slices; sl++) s += part[((int64_t)sl * rows + r) * (nm + 1) + j];
        m[j] = s;
    }
    __syncthreads();
    const float rs = rsqrtf(m[nm] / (float)n + norm_eps);
    for (int j = tid; j < nm; j += HC_THREADS) m[j] *= rs;
    __syncthreads();
    if (tid == 0) hc_finish(m, h, scale, base, iters, hc_eps, pre + r * h, post + r * h, comb + r * h * h, cm);
}

__global__ void hc_pre_kernel(const float *__restrict__ x, int64_t rows, int hc, int64_t dim,
                              const float *__restrict__ pre, float *__restrict__ y) {
    const int64_t total = rows * dim;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / dim, i = t % dim;
        const float *xr = x + r * hc * dim, *p = pre + r * hc;
        float s = 0.0f;
        for (int c = 0; c < hc; c++) s = __fadd_rn(s, __fmul_rn(p[c], xr[c * dim + i]));
        y[t] = bf16_round(s);
    }
}

__global__ void hc_post_kernel(const float *__restrict__ y, const float *__restrict__ res, int64_t rows, int hc,
                               int64_t dim, const float *__restrict__ post, const float *__restrict__ comb,
                               float *__restrict__ out) {
    const int64_t total = rows * hc * dim;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / (hc * dim), rem = t % (hc * dim), i = rem % dim;
        int jc = (int)(rem / dim);
        const float *rr = res + r * hc * dim, *cm = comb + r * hc * hc;
        float s = 0.0f;
        for (int k = 0; k < hc; k++) s = __fadd_rn(s, __fmul_rn(cm[k * hc + jc], rr[k * dim + i]));
        out[t] = bf16_round(__fadd_rn(__fmul_rn(post[r * hc + jc], y[r * dim + i]), s));
    }
}

static int grid_for(int64_t total) {
    int64_t b = (total + 255) / 256;
    return (int)(b > 65536 ? 65536 : (b < 1 ? 1 : b));
}

extern "C" int tide_cuda_hc_mixes(const float *x, int64_t rows, int hc, int64_t dim, const float *fn,
                                  const float *scale, const float *base, double norm_eps, int iters, double hc_eps,
                                  float *pre, float *post, float *comb, tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || hc < 1 || hc > TIDE_CUDA_HC_MAX || dim < 1 || (int64_t)hc * dim > TIDE_CUDA_HC_MAX_N ||
        iters < 0 || rows > 0x7fffffffLL)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda hc_mixes: bad shape rows=%lld hc=%d (1..%d) dim=%lld (hc*dim <= %d) iters=%d",
                         (long long)rows, hc, TIDE_CUDA_HC_MAX, (long long)dim, TIDE_CUDA_HC_MAX_N, iters);
    if (rows == 0) return 0;
    if (!x || !fn || !scale || !base || !pre || !post || !comb)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_mixes: NULL pointer");
    hc_mixes_kernel<<<(unsigned)rows, HC_THREADS, 0, (cudaStream_t)stream>>>(
        x, hc, dim, fn, scale, base, (float)norm_eps, iters, (float)hc_eps, pre, post, comb);
    return tide_cuda_launched("hc_mixes_kernel", st);
}

extern "C" size_t tide_cuda_hc_mixes_fast_workspace(int64_t rows, int hc, int64_t dim) {
    if (rows <= 0 || hc < 1 || hc > TIDE_CUDA_HC_MAX || dim < 1) return 0;
    return (size_t)hcf_slices((int64_t)hc * dim) * (size_t)rows * (size_t)((2 + hc) * hc + 1) * sizeof(float);
}

extern "C" int tide_cuda_hc_mixes_fast(const float *x, int64_t rows, int hc, int64_t dim, const float *fn,
                                       const float *scale, const float *base, double norm_eps, int iters,
                                       double hc_eps, float *pre, float *post, float *comb, void *ws,
                                       size_t ws_bytes, tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || hc < 1 || hc > TIDE_CUDA_HC_MAX || dim < 1 || (int64_t)hc * dim > TIDE_CUDA_HC_MAX_N ||
        iters < 0 || rows > (int64_t)65535 * HCF_RB)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda hc_mixes_fast: bad shape rows=%lld (<= %d) hc=%d (1..%d) dim=%lld (hc*dim <= %d) "
                         "iters=%d",
                         (long long)rows, 65535 * HCF_RB, hc, TIDE_CUDA_HC_MAX, (long long)dim, TIDE_CUDA_HC_MAX_N,
                         iters);
    if (rows == 0) return 0;
    if (!x || !fn || !scale || !base || !pre || !post || !comb || !ws)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_mixes_fast: NULL pointer");
    size_t need = tide_cuda_hc_mixes_fast_workspace(rows, hc, dim);
    if (ws_bytes < need)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_mixes_fast: workspace of %zu bytes, %zu needed", ws_bytes,
                         need);
    const int32_t n = (int32_t)(hc * dim);
    const int nm = (2 + hc) * hc;
    const int64_t ns = hcf_slices(n);
    dim3 grid((unsigned)ns, (unsigned)((rows + HCF_RB - 1) / HCF_RB));
    hc_mixes_fast_part<<<grid, HCF_THREADS, 0, (cudaStream_t)stream>>>(x, rows, n, nm, fn, (float *)ws);
    if (tide_cuda_launched("hc_mixes_fast_part", st) != 0) return -1;
    hc_mixes_fast_finish<<<(unsigned)rows, HC_THREADS, 0, (cudaStream_t)stream>>>(
        (const float *)ws, rows, n, hc, (int)ns, scale, base, (float)norm_eps, iters, (float)hc_eps, pre, post, comb);
    return tide_cuda_launched("hc_mixes_fast_finish", st);
}

extern "C" int tide_cuda_hc_pre(const float *x, int64_t rows, int hc, int64_t dim, const float *pre, float *y,
                                tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || hc < 1 || hc > TIDE_CUDA_HC_MAX || dim < 1)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_pre: bad shape rows=%lld hc=%d dim=%lld", (long long)rows,
                         hc, (long long)dim);
    if (rows == 0) return 0;
    if (!x || !pre || !y) return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_pre: NULL pointer");
    hc_pre_kernel<<<grid_for(rows * dim), 256, 0, (cudaStream_t)stream>>>(x, rows, hc, dim, pre, y);
    return tide_cuda_launched("hc_pre_kernel", st);
}

extern "C" int tide_cuda_hc_post(const float *y, const float *res, int64_t rows, int hc, int64_t dim,
                                 const float *post, const float *comb, float *out, tide_cuda_stream stream,
                                 tide_status *st) {
    if (rows < 0 || hc < 1 || hc > TIDE_CUDA_HC_MAX || dim < 1)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_post: bad shape rows=%lld hc=%d dim=%lld",
                         (long long)rows, hc, (long long)dim);
    if (rows == 0) return 0;
    if (!y || !res || !post || !comb || !out) return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_post: NULL pointer");
    if (out == res) return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_post: out may not alias res");
    hc_post_kernel<<<grid_for(rows * hc * dim), 256, 0, (cudaStream_t)stream>>>(y, res, rows, hc, dim, post, comb,
                                                                                  out);
    return tide_cuda_launched("hc_post_kernel", st);
}
