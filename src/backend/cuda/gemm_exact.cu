/* The block-scaled GEMM (FP8 and FP4 weights) with the CPU's exact
 * numerics, for the exact kernel mode: y = bf16(sum over 32-blocks b, in
 * order, of p_b) where p_b = f32(dot32 of the decoded operands), the dot
 * product summed in double in the CPU's order (tide_cpu_dot: four lanes
 * i % 4, then (s0 + s1) + (s2 + s3)) and rounded once to f32, and the f32
 * accumulator adds p_b block by block.
 *
 * Why a separate kernel: the tensor cores form a 32-block's dot product
 * with their own internal rounding, which differs from the exactly rounded
 * one on a few outputs in a million (seen on the H200: one bf16 step on 1
 * of 128 outputs of a 128x64 FP8 linear, which flipped a greedy token of
 * the small model 20 steps later, seed 117712416801206). The products of
 * two decoded values are exact in double and so, within a block, are their
 * sums (the codes' exponents span 41 bits at most), so the CPU's order and
 * this one agree bit for bit; the lane order is kept anyway, so that even
 * decoded values at the edge of f32's range round alike.
 *
 * Tiling: one thread per output column, 128 columns per block, one block
 * row per activation row (grid.y); each thread walks its weight row block
 * by block (32 e4m3 bytes or 16 packed e2m1 bytes, 16-byte loads), the
 * activation row's codes are read by all threads of the block (broadcast
 * from L1). CUDA cores only: this is the oracle-speed path, not the fast
 * one (tide_cuda_gemm_fp8 / _fp4). */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"

namespace {

template <bool FP4>
__global__ void gemm_exact_kernel(const uint8_t *__restrict__ xq, const uint8_t *__restrict__ xs, int64_t m,
                                  const uint8_t *__restrict__ w, const uint8_t *__restrict__ ws, int64_t n,
                                  int64_t k, uint16_t *__restrict__ y) {
    int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
    if (col >= n || row >= m) return;
    int64_t nb = k / 32;
    const uint8_t *xr = xq + row * k, *xsr = xs + row * nb;
    const uint8_t *wr = FP4 ? w + col * (k / 2) : w + col * k;
    const uint8_t *wsr = FP4 ? ws + col * nb : ws + (col / 32) * nb;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        float sx = tide_dev_e8m0_dec(xsr[b]), sw = tide_dev_e8m0_dec(wsr[b]);
        uint8_t wc[32];
        if (FP4) {
            uint4 v = *(const uint4 *)(wr + b * 16);
            const uint8_t *p = (const uint8_t *)&v;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                wc[2 * i] = p[i] & 15u;
                wc[2 * i + 1] = p[i] >> 4;
            }
        } else {
            uint4 v0 = *(const uint4 *)(wr + b * 32), v1 = *(const uint4 *)(wr + b * 32 + 16);
            const uint8_t *p0 = (const uint8_t *)&v0, *p1 = (const uint8_t *)&v1;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                wc[i] = p0[i];
                wc[16 + i] = p1[i];
            }
        }
        double s[4] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < 32; i++) {
            float a = __fmul_rn(tide_dev_e4m3_dec(xr[b * 32 + i]), sx);
            float c = __fmul_rn(FP4 ? tide_dev_e2m1_dec(wc[i]) : tide_dev_e4m3_dec(wc[i]), sw);
            s[i & 3] = __dadd_rn(s[i & 3], __dmul_rn((double)a, (double)c));
        }
        float p = __double2float_rn(__dadd_rn(__dadd_rn(s[0], s[1]), __dadd_rn(s[2], s[3])));
        acc = __fadd_rn(acc, p);
    }
    y[row * n + col] = tide_dev_bf16_enc(acc);
}

} // namespace

extern "C" int tide_cuda_gemm_exact(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                                    const uint8_t *ws, int64_t n, int64_t k, int fp4, uint16_t *y,
                                    tide_cuda_stream stream, tide_status *st) {
    if (m < 1 || n < 1 || k < 32 || k % 32 != 0 || m > 65535)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda gemm_exact: m %lld, n %lld, k %lld (k a positive multiple of 32, 1 <= m <= 65535)",
                         (long long)m, (long long)n, (long long)k);
    if (!xq || !xs || !w || !ws || !y) return tide_fail(st, TIDE_ERR_INVALID, "cuda gemm_exact: NULL pointer");
    if ((uintptr_t)w % 16 != 0)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda gemm_exact: weight not 16-byte aligned");
    dim3 grid((unsigned)((n + 127) / 128), (unsigned)m);
    cudaStream_t s = (cudaStream_t)stream;
    if (fp4) gemm_exact_kernel<true><<<grid, 128, 0, s>>>(xq, xs, m, w, ws, n, k, y);
    else gemm_exact_kernel<false><<<grid, 128, 0, s>>>(xq, xs, m, w, ws, n, k, y);
    return tide_cuda_launched("gemm_exact", st);
}
