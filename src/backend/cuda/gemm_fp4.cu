/* FP4 (e2m1) dequantising GEMM on the tensor cores, as used by the MoE
 * experts: packed e2m1 weights [N][K/2] (element 2i in the low nibble) with
 * one e8m0 scale per output row and 32 values of k ([N][K/32], TIDE_W_FP4 in
 * ops.h), e4m3 activations with one scale per row and 32 values of k (the
 * output of tide_cuda_quant_fp8_act), f32 accumulation per 32-block, bf16
 * output; the CPU linear() for FP4 weights computes the same function.
 *
 * The kernel and its tiling are in gemm_blockscaled.cuh (shared with the
 * FP8 GEMM). Specific to this format: the B tile is 128 rows x 64 bytes per
 * k step (half the bytes of e4m3, which is the point of FP4 for the
 * bandwidth-bound expert GEMMs); each thread reads its B fragment 2 bytes
 * at a time and widens the four e2m1 values to e4m3 codes in registers
 * (exact: every e2m1 value is an e4m3 value), so the same e4m3 mma runs;
 * the weight scale differs per output column, so each of a thread's 8
 * columns has its own scale per k-block. */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/gemm_blockscaled.cuh"

extern "C" int tide_cuda_gemm_fp4(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w, const uint8_t *ws,
                                  int64_t n, int64_t k, uint16_t *y, tide_cuda_stream stream, tide_status *st) {
    return tide_gemm::gemm_launch<tide_gemm::W_FP4>("gemm_fp4", xq, xs, m, w, ws, n, k, y, stream, st);
}
