/* FP4 activation simulation on the GPU (quantise and dequantise in place):
 * tide_sim_fp4_e8m0 (blocks of 32 in the model: index keys and queries) and
 * tide_sim_fp4_e4m3 (blocks of 16: compressed KV latents) of src/num, bit for
 * bit, applied to each row of x [rows][n] (blocks restart at every row; a
 * trailing partial block is quantised on its own, as on the CPU).
 *
 *   e8m0: amax >= 6*2^-126, scale = 2^ceil(log2(amax * (1/6)))
 *   e4m3: amax >= 6*2^-9,   scale = e4m3(amax / 6)   (may be NaN: the block
 *                                                     becomes NaN, as on the CPU)
 *   x    = e2m1(clamp(x / scale, +-6)) * scale, round-half-even
 *
 * Tiling: one thread per block (<= 128 values: the amax pass and the value
 * pass both walk the block from global memory; the second hits L1). Blocks
 * of neighbouring threads are adjacent in memory. */
#include <cuda_runtime.h>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

__global__ void fp4_sim_kernel(float *__restrict__ x, int64_t rows, int64_t n, int64_t block, int e4m3) {
    const int64_t per_row = (n + block - 1) / block, total = rows * per_row;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / per_row, i0 = (t % per_row) * block;
        int64_t len = n - i0 < block ? n - i0 : block;
        float *p = x + r * n + i0;
        int32_t amax = 0; /* NaN bits win, as tide_amax_bits */
        for (int64_t i = 0; i < len; i++) {
            int32_t a = (int32_t)(__float_as_uint(p[i]) & TIDE_DEV_F32_ABS);
            amax = a > amax ? a : amax;
        }
        float s;
        if (e4m3) {
            uint32_t am = (uint32_t)amax < 0x3c400000u ? 0x3c400000u : (uint32_t)amax;
            s = tide_dev_e4m3_dec(tide_dev_e4m3_enc(__fdiv_rn(__uint_as_float(am), 6.0f)));
        } else {
            uint32_t am = (uint32_t)amax < 0x01c00000u ? 0x01c00000u : (uint32_t)amax;
            s = tide_dev_e8m0_dec(tide_dev_e8m0_ceil(__fmul_rn(__uint_as_float(am), 1.0f / 6.0f)));
        }
        for (int64_t i = 0; i < len; i++)
            p[i] = __fmul_rn(tide_dev_e2m1_round_clamped(tide_dev_clamp_nan(__fdiv_rn(p[i], s), TIDE_DEV_BITS_6)), s);
    }
}

static int launch(float *x, int64_t rows, int64_t n, int64_t block, int e4m3, tide_cuda_stream stream,
                  tide_status *st) {
    if (rows < 0 || n < 0 || block < 1 || block > 128)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda fp4 sim: bad shape rows=%lld n=%lld block=%lld (1..128)",
                         (long long)rows, (long long)n, (long long)block);
    if (rows == 0 || n == 0) return 0;
    if (!x) return tide_fail(st, TIDE_ERR_INVALID, "cuda fp4 sim: NULL pointer");
    int64_t total = rows * ((n + block - 1) / block), blocks = (total + 127) / 128;
    fp4_sim_kernel<<<(unsigned)(blocks > 65536 ? 65536 : blocks), 128, 0, (cudaStream_t)stream>>>(x, rows, n, block,
                                                                                                  e4m3);
    return tide_cuda_launched("fp4_sim_kernel", st);
}

extern "C" int tide_cuda_sim_fp4_e8m0(float *x, int64_t rows, int64_t n, int64_t block, tide_cuda_stream stream,
                                      tide_status *st) {
    return launch(x, rows, n, block, 0, stream, st);
}

extern "C" int tide_cuda_sim_fp4_e4m3(float *x, int64_t rows, int64_t n, int64_t block, tide_cuda_stream stream,
                                      tide_status *st) {
    return launch(x, rows, n, block, 1, stream, st);
}
