/* Interleaved rotary embedding on the GPU: the semantics of
 * tide_cpu_ops()->rope, bit for bit, for many rows at once (each row its own
 * position, so its own cos/sin table row).
 *
 * For row r and vector v the rotated floats are x + r*row_stride +
 * v*vec_stride + [0, 2*n_freq) (the caller points x at the rotated tail,
 * e.g. the last 64 dims of each head); adjacent pairs are complex numbers
 * multiplied by (cos, sin) = cs[r][f] (the YaRN-corrected angles are the
 * caller's: cs [rows][2*n_freq]); inverse conjugates. The four products and
 * the two sums are separate roundings, as in the C build (no FMA), and the
 * result is rounded to BF16.
 *
 * Tiling: one thread per complex pair, flat over rows * n_vec * n_freq with a
 * grid-stride loop; consecutive threads take consecutive pairs of a vector
 * (8-byte loads, coalesced). */
#include <cuda_runtime.h>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

__device__ __forceinline__ float bf16_round(float x) { return tide_dev_bf16_dec(tide_dev_bf16_enc(x)); }

__global__ void rope_kernel(float *__restrict__ x, int64_t rows, int64_t n_vec, int64_t row_stride,
                            int64_t vec_stride, int64_t n_freq, const float *__restrict__ cs, int inverse) {
    const int64_t total = rows * n_vec * n_freq;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t f = t % n_freq, rv = t / n_freq, v = rv % n_vec, r = rv / n_vec;
        float *p = x + r * row_stride + v * vec_stride + 2 * f;
        const float *c2 = cs + r * 2 * n_freq + 2 * f;
        float c = c2[0], s = inverse ? -c2[1] : c2[1];
        float a = p[0], b = p[1];
        float ac = __fmul_rn(a, c), bs = __fmul_rn(b, s), as = __fmul_rn(a, s), bc = __fmul_rn(b, c);
        p[0] = bf16_round(__fsub_rn(ac, bs));
        p[1] = bf16_round(__fadd_rn(as, bc));
    }
}

extern "C" int tide_cuda_rope(float *x, int64_t rows, int64_t n_vec, int64_t row_stride, int64_t vec_stride,
                              int64_t n_freq, const float *cs, int inverse, tide_cuda_stream stream,
                              tide_status *st) {
    if (rows < 0 || n_vec < 0 || n_freq < 0 || row_stride < 0 || vec_stride < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda rope: bad shape rows=%lld n_vec=%lld n_freq=%lld",
                         (long long)rows, (long long)n_vec, (long long)n_freq);
    int64_t total = rows * n_vec * n_freq;
    if (total == 0) return 0;
    if (!x || !cs) return tide_fail(st, TIDE_ERR_INVALID, "cuda rope: NULL pointer");
    int64_t blocks = (total + 255) / 256;
    rope_kernel<<<(unsigned)(blocks > 65536 ? 65536 : blocks), 256, 0, (cudaStream_t)stream>>>(
        x, rows, n_vec, row_stride, vec_stride, n_freq, cs, inverse);
    return tide_cuda_launched("rope_kernel", st);
}
