/* y = x W^T for F32 and BF16 weights (the output head, 129280 x 5120 f32,
 * and the small f32/bf16 projections), with the CPU backend's dot product:
 * per output, four lanes s_l = sum over i = l (mod 4) of x_i * W_i in order,
 * in double; the last in % 4 values added to s_0; then (s0 + s1) + (s2 + s3)
 * rounded once to f32 (tide_cpu_dot). A product of two floats is exact in
 * double, so fma(x, w, s) in double rounds exactly like s + x*w: the GPU
 * result is bit-identical to tide_cpu_ops()->linear. With TIDE_CUDA_LIN_FAST
 * the lanes accumulate in f32 instead (bound in cuda_kernels.h).
 *
 * Tiling: a block of 128 threads owns 32 outputs (rows of W) and RB rows
 * of x; thread (o, l) = (tid / 4, tid % 4) runs lane l of output o for all
 * RB rows (RB accumulators), so the lanes of one output are neighbours and
 * combine with two xor-shuffles at the end. k advances KC = 64 values per
 * step; the W tile (32 x 64, f32 or raw bf16) and the x tile (RB x 64) are
 * copied to shared memory with cp.async, STAGES deep, when rows are 16-byte
 * aligned (in % 4 == 0 for f32, in % 8 == 0 for bf16), else with plain
 * loads; both zero-fill past the matrix (zero terms leave a double sum that
 * started at +0 unchanged). W rows are padded (68 floats / 72 halves) so
 * that the 32 threads of a warp, reading (o, 4j + l), hit 32 distinct banks;
 * x reads are broadcasts. Memory-bound at small batch: W is read once per
 * RB rows (RB = 1, 4 or 16 by the batch; more rows: more row blocks, which
 * run next to each other on the same W tile, so W comes from L2 again).
 * Grid: x = row blocks, y = ceil(out / 32) (<= 65535), z = groups (the
 * grouped form: one launch for G independent products, e.g. wo_a's groups,
 * which alone would fill only 32 blocks each at decode). */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/gemm_blockscaled.cuh"
#include "backend/cuda/num_dev.cuh"

namespace {

using tide_gemm::cp_async16;
using tide_gemm::cp_async_commit;
using tide_gemm::cp_async_wait;
using tide_gemm::smem_addr;

constexpr int LT = 128, OUTS = 32, KC = 64, STAGES = 4;

template <bool BF16W> struct wtile {
    static constexpr int ELEM = BF16W ? 2 : 4;
    static constexpr int LDW = BF16W ? KC + 8 : KC + 4; /* elements per padded row */
    static constexpr int BYTES = OUTS * LDW * ELEM;
};

template <int RB, bool BF16W> struct ltile {
    static constexpr int W_BYTES = wtile<BF16W>::BYTES;
    static constexpr int STAGE = W_BYTES + RB * KC * 4;
    static constexpr int SMEM = STAGES * STAGE;
};

template <class ACC> __device__ __forceinline__ ACC fma_acc(float a, float b, ACC s);
template <> __device__ __forceinline__ double fma_acc<double>(float a, float b, double s) {
    return __fma_rn((double)a, (double)b, s);
}
template <> __device__ __forceinline__ float fma_acc<float>(float a, float b, float s) { return __fmaf_rn(a, b, s); }
__device__ __forceinline__ double add_acc(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float add_acc(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float to_f32(double v) { return __double2float_rn(v); }
__device__ __forceinline__ float to_f32(float v) { return v; }

template <class ACC, int RB, bool BF16W>
__global__ void __launch_bounds__(LT)
    linear_kernel(const void *__restrict__ wv, const float *__restrict__ x, int64_t rows, int64_t out, int64_t in,
                  int vec, int bf16_out, float *__restrict__ y, int64_t wgs, int64_t xgs, int64_t ygs) {
    using WT = wtile<BF16W>;
    using T = ltile<RB, BF16W>;
    extern __shared__ __align__(16) uint8_t smem[];
    /* group blockIdx.z (grouped launches: one weight, input and output per group) */
    wv = (const uint8_t *)wv + (int64_t)blockIdx.z * wgs * WT::ELEM;
    x += (int64_t)blockIdx.z * xgs;
    y += (int64_t)blockIdx.z * ygs;
    const int tid = threadIdx.x, ol = tid >> 2, l = tid & 3;
    const int64_t r0 = (int64_t)blockIdx.x * RB, o0 = (int64_t)blockIdx.y * OUTS;
    const int64_t whole = in - in % 4; /* the lanes' part; the rest goes to lane 0 */
    const int64_t steps = (whole + KC - 1) / KC;
    const uint8_t *wb = (const uint8_t *)wv;

    auto load = [&](int64_t step) {
        uint8_t *stage = smem + (step % STAGES) * T::STAGE;
        float *sx = (float *)(stage + T::W_BYTES);
        const int64_t k0 = step * KC;
        if (vec) {
            constexpr int WCH = KC * WT::ELEM / 16; /* 16-byte chunks per W row */
#pragma unroll
            for (int i = 0; i < OUTS * WCH / LT; i++) {
                int c = tid + i * LT, row = c / WCH, ch = c % WCH;
                int64_t o = o0 + row, k = k0 + ch * (16 / WT::ELEM);
                int ok = o < out && k < whole; /* vec: whole == in, a multiple of the chunk */
                cp_async16(smem_addr(stage + (row * WT::LDW) * WT::ELEM + ch * 16),
                           ok ? wb + (o * in + k) * WT::ELEM : wb, ok ? 16 : 0);
            }
            constexpr int XCH = KC / 4;
            static_assert((RB * XCH) % LT == 0 || RB * XCH < LT, "x copies");
            for (int c = tid; c < RB * XCH; c += LT) {
                int row = c / XCH, ch = c % XCH;
                int64_t r = r0 + row, k = k0 + ch * 4;
                int ok = r < rows && k < whole;
                cp_async16(smem_addr(sx + row * KC + ch * 4), ok ? x + r * in + k : x, ok ? 16 : 0);
            }
        } else {
            for (int c = tid; c < OUTS * KC; c += LT) {
                int row = c / KC, col = c % KC;
                int64_t o = o0 + row, k = k0 + col;
                int ok = o < out && k < whole;
                if (BF16W) {
                    uint16_t v = ok ? ((const uint16_t *)wv)[o * in + k] : (uint16_t)0;
                    ((uint16_t *)stage)[row * WT::LDW + col] = v;
                } else {
                    ((float *)stage)[row * WT::LDW + col] = ok ? ((const float *)wv)[o * in + k] : 0.0f;
                }
            }
            for (int c = tid; c < RB * KC; c += LT) {
                int row = c / KC, col = c % KC;
                int64_t r = r0 + row, k = k0 + col;
                sx[row * KC + col] = r < rows && k < whole ? x[r * in + k] : 0.0f;
            }
        }
    };

    ACC acc[RB];
#pragma unroll
    for (int r = 0; r < RB; r++) acc[r] = (ACC)0;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < steps) load(s);
        cp_async_commit();
    }
    for (int64_t step = 0; step < steps; step++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* this step's tiles are in; everyone is done with the previous step */
        if (step + STAGES - 1 < steps) load(step + STAGES - 1);
        cp_async_commit();
        const uint8_t *stage = smem + (step % STAGES) * T::STAGE;
        const float *sx = (const float *)(stage + T::W_BYTES);
#pragma unroll 4
        for (int j = 0; j < KC / 4; j++) {
            const int kk = 4 * j + l;
            float wval;
            if (BF16W) wval = tide_dev_bf16_dec(((const uint16_t *)stage)[ol * WT::LDW + kk]);
            else wval = ((const float *)stage)[ol * WT::LDW + kk];
#pragma unroll
            for (int r = 0; r < RB; r++) acc[r] = fma_acc<ACC>(sx[r * KC + kk], wval, acc[r]);
        }
    }
    cp_async_wait<0>();

    /* the tail (in % 4 values) into lane 0, in order, as the CPU does */
    const int64_t o = o0 + ol;
    if (l == 0 && o < out)
        for (int64_t k = whole; k < in; k++) {
            float wval = BF16W ? tide_dev_bf16_dec(((const uint16_t *)wv)[o * in + k]) : ((const float *)wv)[o * in + k];
#pragma unroll
            for (int r = 0; r < RB; r++)
                if (r0 + r < rows) acc[r] = fma_acc<ACC>(x[(r0 + r) * in + k], wval, acc[r]);
        }
    /* (s0 + s1) + (s2 + s3) across the four lanes of the output */
#pragma unroll
    for (int r = 0; r < RB; r++) {
        ACC s = acc[r];
        ACC o1 = __shfl_xor_sync(0xffffffffu, s, 1);
        ACC pair = (l & 1) ? add_acc(o1, s) : add_acc(s, o1);
        ACC o2 = __shfl_xor_sync(0xffffffffu, pair, 2);
        ACC tot = (l & 2) ? add_acc(o2, pair) : add_acc(pair, o2);
        float v = to_f32(tot);
        if (bf16_out) v = tide_dev_bf16_dec(tide_dev_bf16_enc(v));
        if ((r & 3) == l && o < out && r0 + r < rows) y[(r0 + r) * out + o] = v;
    }
}

struct groups {
    int64_t n, w, x, y; /* count and element strides */
};

template <class ACC, int RB, bool BF16W>
int launch(const void *w, int64_t out, int64_t in, const float *x, int64_t rows, float *y, int vec, int bf16_out,
           groups g, cudaStream_t stream, tide_status *st) {
    using T = ltile<RB, BF16W>;
    int64_t gx = (rows + RB - 1) / RB, gy = (out + OUTS - 1) / OUTS;
    if (gx > 0x7fffffffLL || gy > 65535 || g.n > 65535)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda linear_f32: %lld x %lld output is too large for one launch",
                         (long long)rows, (long long)out);
    if (tide_cuda_check(cudaFuncSetAttribute(linear_kernel<ACC, RB, BF16W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             T::SMEM),
                        "raising the linear kernel's shared-memory limit", st) != 0)
        return -1;
    linear_kernel<ACC, RB, BF16W><<<dim3((unsigned)gx, (unsigned)gy, (unsigned)g.n), LT, T::SMEM, stream>>>(
        w, x, rows, out, in, vec, bf16_out, y, g.w, g.x, g.y);
    return tide_cuda_launched("linear_f32 kernel", st);
}

template <class ACC, bool BF16W>
int pick_rb(const void *w, int64_t out, int64_t in, const float *x, int64_t rows, float *y, int vec, int bf16_out,
            groups g, cudaStream_t stream, tide_status *st) {
    if (rows <= 1) return launch<ACC, 1, BF16W>(w, out, in, x, rows, y, vec, bf16_out, g, stream, st);
    if (rows <= 4) return launch<ACC, 4, BF16W>(w, out, in, x, rows, y, vec, bf16_out, g, stream, st);
    return launch<ACC, 16, BF16W>(w, out, in, x, rows, y, vec, bf16_out, g, stream, st);
}

int linear_any(const void *w, int w_bf16, int64_t out, int64_t in, const float *x, int64_t rows, float *y, int flags,
               groups g, cudaStream_t s, tide_status *st) {
    if (rows < 0 || out < 1 || in < 1 || (w_bf16 != 0 && w_bf16 != 1) || g.n < 1 || g.w < 0 || g.x < 0 || g.y < 0 ||
        (flags & ~(TIDE_CUDA_LIN_BF16_OUT | TIDE_CUDA_LIN_FAST)) != 0)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda linear_f32: rows %lld, out %lld, in %lld, w_bf16 %d, flags %#x, groups %lld",
                         (long long)rows, (long long)out, (long long)in, w_bf16, (unsigned)flags, (long long)g.n);
    if (rows == 0) return 0;
    if (!w || !x || !y) return tide_fail(st, TIDE_ERR_INVALID, "cuda linear_f32: NULL pointer");
    const int el = w_bf16 ? 2 : 4;
    if ((uintptr_t)w % (uintptr_t)el || (uintptr_t)x % 4 || (uintptr_t)y % 4)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda linear_f32: misaligned weight, input or output");
    /* 16-byte copies when every group's weight and input rows start 16-byte aligned */
    int vec = ((uintptr_t)w | (uintptr_t)x) % 16 == 0 && in % (w_bf16 ? 8 : 4) == 0 && (g.w * el) % 16 == 0 &&
              (g.x * 4) % 16 == 0;
    int bo = (flags & TIDE_CUDA_LIN_BF16_OUT) != 0;
    if (flags & TIDE_CUDA_LIN_FAST)
        return w_bf16 ? pick_rb<float, true>(w, out, in, x, rows, y, vec, bo, g, s, st)
                      : pick_rb<float, false>(w, out, in, x, rows, y, vec, bo, g, s, st);
    return w_bf16 ? pick_rb<double, true>(w, out, in, x, rows, y, vec, bo, g, s, st)
                  : pick_rb<double, false>(w, out, in, x, rows, y, vec, bo, g, s, st);
}

} /* namespace */

extern "C" int tide_cuda_linear_f32(const void *w, int w_bf16, int64_t out, int64_t in, const float *x, int64_t rows,
                                    float *y, int flags, tide_cuda_stream stream, tide_status *st) {
    return linear_any(w, w_bf16, out, in, x, rows, y, flags, groups{1, 0, 0, 0}, (cudaStream_t)stream, st);
}

extern "C" int tide_cuda_linear_f32_grouped(const void *w, int w_bf16, int64_t out, int64_t in, const float *x,
                                            int64_t rows, float *y, int flags, int64_t n_groups, int64_t w_stride,
                                            int64_t x_stride, int64_t y_stride, tide_cuda_stream stream,
                                            tide_status *st) {
    return linear_any(w, w_bf16, out, in, x, rows, y, flags, groups{n_groups, w_stride, x_stride, y_stride},
                      (cudaStream_t)stream, st);
}
