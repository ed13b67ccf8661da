/* FP8 activation quantisation on the GPU, per row in blocks of 32 with a
 * ue8m0 scale, bit-identical to tide_quant_fp8_act(row, n, 32, q, scale):
 *   amax  = max |x| over the block (integer maximum of the magnitude bits, so
 *           a NaN wins like torch's amax), at least 1e-4;
 *   scale = ue8m0 ceil of amax * f32(1/448);
 *   q     = e4m3(clamp(x * (1/scale), +-448))   (1/scale is an exact power
 *           of two, so the product equals the reference's division).
 *
 * Tiling: a thread owns 4 consecutive values of one block, so 8 neighbouring
 * lanes hold one 32-block and a warp holds 4 blocks; the block's amax is an
 * xor-shuffle maximum over those 8 lanes (offsets 4, 2, 1). When n is a
 * multiple of 4 every quad is 16-byte aligned and read with one float4 load
 * and written with one 32-bit store (the row of codes is then 4-byte
 * aligned too); otherwise the quad is read and written element by element.
 * Threads are numbered over (row, block, quad) so a trailing partial block
 * of a row never shares lanes with the next row; lanes past the end of a
 * row, or past the last row, take part in the shuffles with zeros. */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"

#define QUANT_THREADS 256
#define QUADS_PER_BLOCK 8 /* 32 values / 4 */

__global__ void __launch_bounds__(QUANT_THREADS)
    quant_fp8_act_kernel(const float *__restrict__ x, int64_t rows, int64_t n, int64_t n_blocks, int vec,
                         uint8_t *__restrict__ q, uint8_t *__restrict__ scale) {
    int64_t tid = (int64_t)blockIdx.x * QUANT_THREADS + threadIdx.x;
    int64_t quad = tid % QUADS_PER_BLOCK, blk = tid / QUADS_PER_BLOCK;
    int64_t row = blk / n_blocks, b = blk % n_blocks;
    int64_t col = b * 32 + quad * 4;
    int live = row < rows;
    const float *xr = x + row * n;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live && col < n) {
        if (vec) {
            float4 t = *(const float4 *)(xr + col);
            v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
        } else {
            for (int k = 0; k < 4 && col + k < n; k++) v[k] = xr[col + k];
        }
    }
    uint32_t amax = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) amax = max(amax, __float_as_uint(v[k]) & TIDE_DEV_F32_ABS);
    /* the magnitude bits order like the floats, NaN above infinity */
    amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
    amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    if (!live || col >= n) return;
    amax = max(amax, 0x38d1b717u); /* 1e-4f */
    uint32_t code = tide_dev_e8m0_ceil(__fmul_rn(__uint_as_float(amax), 1.0f / 448.0f));
    float inv = tide_dev_e8m0_inv(code);
    uint32_t c[4];
#pragma unroll
    for (int k = 0; k < 4; k++) c[k] = tide_dev_e4m3_enc(tide_dev_clamp_nan(__fmul_rn(v[k], inv), TIDE_DEV_BITS_448));
    uint8_t *qr = q + row * n;
    if (vec) {
        *(uint32_t *)(qr + col) = c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24);
    } else {
        for (int k = 0; k < 4 && col + k < n; k++) qr[col + k] = (uint8_t)c[k];
    }
    if (quad == 0) scale[row * n_blocks + b] = (uint8_t)code;
}

extern "C" int tide_cuda_quant_fp8_act(const float *x, int64_t rows, int64_t n, uint8_t *q, uint8_t *scale,
                                       tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || n < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda quant_fp8_act: rows %lld, n %lld", (long long)rows, (long long)n);
    if (rows == 0 || n == 0) return 0;
    if (!x || !q || !scale) return tide_fail(st, TIDE_ERR_INVALID, "cuda quant_fp8_act: NULL pointer");
    int64_t n_blocks = (n + 31) / 32;
    int64_t threads = rows * n_blocks * QUADS_PER_BLOCK;
    int64_t grid = (threads + QUANT_THREADS - 1) / QUANT_THREADS;
    if (n_blocks > INT64_MAX / 8 / rows || grid > 0x7fffffff)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda quant_fp8_act: %lld x %lld is too large for one launch",
                         (long long)rows, (long long)n);
    /* float4 loads need every quad 16-byte aligned: n % 4 == 0 and x itself aligned */
    int vec = n % 4 == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)q % 4) == 0;
    quant_fp8_act_kernel<<<(unsigned)grid, QUANT_THREADS, 0, stream>>>(x, rows, n, n_blocks, vec, q, scale);
    return tide_cuda_launched("cuda quant_fp8_act: launch", st);
}
