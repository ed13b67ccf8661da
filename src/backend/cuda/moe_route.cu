/* MoE routing on the GPU: the semantics of tide_cpu_ops()->moe_route (the
 * reference's Gate after its f32 matmul), for every row of a step.
 *
 *   scores  = sqrt(softplus(logits)) (func 0; softplus with torch's threshold
 *             20), sigmoid (1) or softmax (2, numpy-order sum);
 *   experts = top-k of scores + bias, ties toward the lower expert id;
 *   weights = the raw scores of those, / (sum + 1e-20) when norm && k > 1,
 *             times route_scale.
 *
 * Exactness: everything is the CPU's f32 sequence of roundings except the
 * softplus below the threshold, log1p(exp(x)) in double rounded once to f32
 * (tide's rule): CUDA's and glibc's double exp/log1p each err by an ulp or
 * so of a double, so the f32 result agrees unless the double lands within
 * ~2^-29 relative of an f32 rounding midpoint: func 0 scores are equal but
 * for the rare value an ulp off (weights then within a few ulp; a choice
 * between two experts within that distance could flip); funcs 1 and 2 are
 * bit-identical. tests/gpu/gpu_test_moe.c states the bound.
 *
 * Tiling: one 128-thread block per row; the threads compute the n_experts
 * scores into shared memory, thread 0 does the selection (k rounds over the
 * experts, k <= 16: the routing of one row is a few thousand comparisons)
 * and the normalisation. */
#include <cuda_runtime.h>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/ops_dev.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define MOE_THREADS 128

__global__ void __launch_bounds__(MOE_THREADS) moe_route_kernel(const float *__restrict__ logits, int n_experts,
                                                                int k, int func, const float *__restrict__ bias,
                                                                int norm, float route_scale, int32_t *__restrict__ idx,
                                                                float *__restrict__ w) {
    extern __shared__ float sm[];
    float *sc = sm, *sel = sm + n_experts;
    __shared__ float s_max, s_sum;
    const int64_t r = blockIdx.x;
    const float *l = logits + r * n_experts;
    const int tid = threadIdx.x;
    if (func == 2) {
        if (tid == 0) {
            float m = l[0];
            for (int e = 1; e < n_experts; e++) m = l[e] > m ? l[e] : m;
            s_max = m;
        }
        __syncthreads();
        for (int e = tid; e < n_experts; e += MOE_THREADS) sc[e] = tide_dev_expf(__fsub_rn(l[e], s_max));
        __syncthreads();
        if (tid == 0) s_sum = tide_dev_sum_np(sc, n_experts);
        __syncthreads();
        for (int e = tid; e < n_experts; e += MOE_THREADS) sc[e] = __fdiv_rn(sc[e], s_sum);
    } else if (func == 1) {
        for (int e = tid; e < n_experts; e += MOE_THREADS) sc[e] = tide_dev_sigmoid(l[e]);
    } else {
        for (int e = tid; e < n_experts; e += MOE_THREADS) {
            float v = l[e];
            sc[e] = __fsqrt_rn(v > 20.0f ? v : __double2float_rn(log1p(exp((double)v))));
        }
    }
    __syncthreads();
    for (int e = tid; e < n_experts; e += MOE_THREADS) sel[e] = bias ? __fadd_rn(sc[e], bias[e]) : sc[e];
    __syncthreads();
    if (tid != 0) return;
    int32_t *ix = idx + r * k;
    float *wr = w + r * k;
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < n_experts; e++) {
            int taken = 0;
            for (int t = 0; t < i; t++) taken |= ix[t] == e;
            if (!taken && (best < 0 || sel[e] > sel[best])) best = e;
        }
        ix[i] = best;
        wr[i] = sc[best];
    }
    if (norm && k > 1) {
        float sum = tide_dev_sum_np(wr, k);
        for (int i = 0; i < k; i++) wr[i] = __fdiv_rn(wr[i], __fadd_rn(sum, 1e-20f));
    }
    for (int i = 0; i < k; i++) wr[i] = __fmul_rn(wr[i], route_scale);
}

extern "C" int tide_cuda_moe_route(const float *logits, int64_t rows, int n_experts, int k, int func,
                                   const float *bias, int norm, float route_scale, int32_t *idx, float *w,
                                   tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || rows > 0x7fffffffLL || n_experts < 1 || n_experts > TIDE_CUDA_MOE_MAX_EXPERTS || k < 1 ||
        k > n_experts || k > 64 || func < 0 || func > 2)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda moe_route: bad arguments rows=%lld n_experts=%d (1..%d) k=%d (1..min(64, n)) func=%d",
                         (long long)rows, n_experts, TIDE_CUDA_MOE_MAX_EXPERTS, k, func);
    if (rows == 0) return 0;
    if (!logits || !idx || !w) return tide_fail(st, TIDE_ERR_INVALID, "cuda moe_route: NULL pointer");
    moe_route_kernel<<<(unsigned)rows, MOE_THREADS, (size_t)n_experts * 2 * sizeof(float), (cudaStream_t)stream>>>(
        logits, n_experts, k, func, bias, norm, route_scale, idx, w);
    return tide_cuda_launched("moe_route_kernel", st);
}
