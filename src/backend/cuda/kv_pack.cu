/* Packed KV entries on the GPU: the layout of src/cache/kv_pack.h (codes,
 * then scales), byte for byte what tide_kv_pack writes and bit for bit what
 * tide_kv_unpack reads, so that pool blocks, ring slots, prefix-cache pages
 * and KV-store shards are one format on the host and the device
 * (docs/gpu.md, "Packed KV caches").
 *
 *   window (fmt 0): e4m3 codes [dim], UE8M0 scales per 32: amax >= 1e-4,
 *                   code = ceil(amax * f32(1/448)), q = e4m3(clamp(x * 2^-s, 448))
 *   latent (fmt 1): e2m1 pairs [ceil(dim/2)], E4M3 scales per 16:
 *                   amax >= 6*2^-9, s = e4m3(amax / 6), q = e2m1(clamp(x / s, 6))
 *   key    (fmt 2): e2m1 pairs, UE8M0 scales per 32: amax >= 6*2^-126,
 *                   s = 2^ceil(log2(amax * f32(1/6)))
 *
 * Tiling: pack runs one thread per scale block (its amax pass and code pass
 * walk the block; blocks start on even elements, so the nibble pairs of two
 * blocks never share a byte); unpack one thread per value. Entries of row r
 * start at e + r * entry_bytes (tide_kv_entry_bytes). */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"

namespace {

__device__ __forceinline__ int64_t code_bytes(int fmt, int64_t dim) { return fmt == 0 ? dim : (dim + 1) / 2; }

__device__ __forceinline__ int64_t fmt_block(int fmt) { return fmt == 1 ? 16 : 32; }

__global__ void kv_pack_kernel(int fmt, const float *__restrict__ x, int64_t rows, int64_t dim, int64_t eb,
                               uint8_t *__restrict__ e) {
    const int64_t blk = fmt_block(fmt), per_row = (dim + blk - 1) / blk, total = rows * per_row;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / per_row, b = t % per_row, i0 = b * blk, len = dim - i0 < blk ? dim - i0 : blk;
        const float *p = x + r * dim + i0;
        uint8_t *er = e + r * eb, *codes = er, *scales = er + code_bytes(fmt, dim);
        uint32_t amax = 0; /* magnitude bits: NaN wins, as tide_amax_bits */
        for (int64_t i = 0; i < len; i++) amax = max(amax, __float_as_uint(p[i]) & TIDE_DEV_F32_ABS);
        if (fmt == 0) {
            amax = max(amax, 0x38d1b717u); /* 1e-4f */
            uint32_t sc = tide_dev_e8m0_ceil(__fmul_rn(__uint_as_float(amax), 1.0f / 448.0f));
            float inv = tide_dev_e8m0_inv(sc);
            for (int64_t i = 0; i < len; i++)
                codes[i0 + i] = (uint8_t)tide_dev_e4m3_enc(tide_dev_clamp_nan(__fmul_rn(p[i], inv), TIDE_DEV_BITS_448));
            scales[b] = (uint8_t)sc;
            continue;
        }
        uint32_t sc;
        float s;
        if (fmt == 1) {
            amax = max(amax, 0x3c400000u); /* 6 * 2^-9 */
            sc = tide_dev_e4m3_enc(__fdiv_rn(__uint_as_float(amax), 6.0f));
            s = tide_dev_e4m3_dec(sc);
        } else {
            amax = max(amax, 0x01c00000u); /* 6 * 2^-126 */
            sc = tide_dev_e8m0_ceil(__fmul_rn(__uint_as_float(amax), 1.0f / 6.0f));
            s = tide_dev_e8m0_dec(sc);
        }
        for (int64_t i = 0; i < len; i += 2) {
            uint32_t lo = tide_dev_e2m1_enc(tide_dev_clamp_nan(__fdiv_rn(p[i], s), TIDE_DEV_BITS_6));
            uint32_t hi = i + 1 < len ? tide_dev_e2m1_enc(tide_dev_clamp_nan(__fdiv_rn(p[i + 1], s), TIDE_DEV_BITS_6)) : 0u;
            codes[(i0 + i) / 2] = (uint8_t)(lo | (hi << 4));
        }
        scales[b] = (uint8_t)sc;
    }
}

__global__ void kv_unpack_kernel(int fmt, const uint8_t *__restrict__ e, int64_t rows, int64_t dim, int64_t eb,
                                 float *__restrict__ y) {
    const int64_t blk = fmt_block(fmt), total = rows * dim;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / dim, i = t % dim;
        const uint8_t *er = e + r * eb, *scales = er + code_bytes(fmt, dim);
        uint32_t sc = scales[i / blk];
        if (fmt == 0) {
            y[t] = __fmul_rn(tide_dev_e4m3_dec(er[i]), tide_dev_e8m0_dec(sc));
        } else {
            uint32_t c = (er[i / 2] >> ((i & 1) * 4)) & 15u;
            y[t] = __fmul_rn(tide_dev_e2m1_dec(c), fmt == 1 ? tide_dev_e4m3_dec(sc) : tide_dev_e8m0_dec(sc));
        }
    }
}

int64_t entry_bytes(int fmt, int64_t dim) {
    int64_t blk = fmt == 1 ? 16 : 32;
    return (fmt == 0 ? dim : (dim + 1) / 2) + (dim + blk - 1) / blk;
}

int check(const char *what, int fmt, int64_t rows, int64_t dim, const void *a, const void *b, tide_status *st) {
    if (fmt < 0 || fmt > 2 || rows < 0 || dim < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda %s: bad format %d or shape rows=%lld dim=%lld", what, fmt,
                         (long long)rows, (long long)dim);
    if (rows > 0 && dim > 0 && (!a || !b)) return tide_fail(st, TIDE_ERR_INVALID, "cuda %s: NULL pointer", what);
    return 0;
}

unsigned grid_of(int64_t threads) {
    int64_t g = (threads + 127) / 128;
    return (unsigned)(g > 65536 ? 65536 : g < 1 ? 1 : g);
}

} // namespace

extern "C" int tide_cuda_kv_pack(int fmt, const float *x, int64_t rows, int64_t dim, uint8_t *e,
                                 tide_cuda_stream stream, tide_status *st) {
    if (check("kv_pack", fmt, rows, dim, x, e, st) != 0) return -1;
    if (rows == 0 || dim == 0) return 0;
    int64_t blk = fmt == 1 ? 16 : 32;
    kv_pack_kernel<<<grid_of(rows * ((dim + blk - 1) / blk)), 128, 0, (cudaStream_t)stream>>>(
        fmt, x, rows, dim, entry_bytes(fmt, dim), e);
    return tide_cuda_launched("kv_pack_kernel", st);
}

extern "C" int tide_cuda_kv_unpack(int fmt, const uint8_t *e, int64_t rows, int64_t dim, float *y,
                                   tide_cuda_stream stream, tide_status *st) {
    if (check("kv_unpack", fmt, rows, dim, e, y, st) != 0) return -1;
    if (rows == 0 || dim == 0) return 0;
    kv_unpack_kernel<<<grid_of(rows * dim), 128, 0, (cudaStream_t)stream>>>(fmt, e, rows, dim, entry_bytes(fmt, dim),
                                                                            y);
    return tide_cuda_launched("kv_unpack_kernel", st);
}
