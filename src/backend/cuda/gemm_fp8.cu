/* FP8 block-scaled GEMM on the tensor cores: e4m3 weights [N][K] with one
 * e8m0 scale per 32x32 block ([ceil(N/32)][K/32], the checkpoint's layout),
 * e4m3 activations with one scale per row and 32 values of k (the output of
 * tide_cuda_quant_fp8_act), f32 accumulation per 32-block, bf16 output.
 *
 * The kernel and its tiling are in gemm_blockscaled.cuh (shared with the
 * FP4 GEMM). Specific to this format: the B tile is 128 rows x 128 bytes of
 * e4m3 per k step, read into fragments with ldmatrix.x4 like A; a warp's 32
 * output columns sit in one 32-row block of W, so one weight scale per warp
 * and k-block folds each mma result together with the row's activation
 * scale. */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/gemm_blockscaled.cuh"

extern "C" int tide_cuda_gemm_fp8(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w, const uint8_t *ws,
                                  int64_t n, int64_t k, uint16_t *y, tide_cuda_stream stream, tide_status *st) {
    return tide_gemm::gemm_launch<tide_gemm::W_FP8>("gemm_fp8", xq, xs, m, w, ws, n, k, y, stream, st);
}
