/* FP8 block-scaled GEMM on Hopper's warpgroup tensor-core instruction
 * (wgmma, sm_90a): the same function as tide_cuda_gemm_fp8 (e4m3 weights
 * with 32x32 e8m0 block scales, activations scaled per row and 32 values of
 * k, f32 accumulation per 32-block in k order, bf16 output), EXPERIMENTAL:
 * tide_cuda_gemm_fp8 (mma.sync, gemm_blockscaled.cuh) stays the default
 * until this path has more testing. Hopper runs an e4m3 mma.sync on its f16
 * tensor-core path; wgmma's e4m3 form is the native one.
 *
 * Tiling:
 *   - a thread block of 2 warpgroups (256 threads) computes a 128 x 128 tile
 *     of y; warpgroup wg owns rows 64 wg .. 64 wg + 63 and all 128 columns
 *     (wgmma m64n128k32: 64 f32 results per thread);
 *   - k advances 128 bytes (4 scale blocks) per step; A and B tiles (128 x
 *     128 bytes each) are copied with cp.async, 4 stages deep, into the
 *     layout wgmma reads without swizzling: "core matrices" of 8 rows x 16
 *     bytes stored as 128 contiguous bytes, the 8 core matrices along k of
 *     one 8-row group next to each other (leading byte offset 128 between
 *     neighbours in k), 8-row groups 1024 bytes apart (stride byte offset);
 *     each copying thread writes one 16-byte row of a core matrix, 8
 *     neighbouring threads one whole core matrix (no bank conflicts);
 *   - per 32-block of k: one wgmma with a zero accumulator gives the block's
 *     raw dot products; after it completes they are folded into the f32
 *     accumulators with the scales: a thread's 64 results lie in 2 rows (one
 *     activation scale each) and 16 column pairs spanning 4 blocks of 32
 *     columns (one weight scale each);
 *   - the copies for step s + 3 are in flight while step s is multiplied;
 *     smem written by cp.async is handed to the tensor cores (the async
 *     proxy) with fence.proxy.async before the barrier.
 * Not yet done (so this is far from the chip's fp8 rate): overlapping one
 * block's wgmma with the previous block's fold (two result sets), a
 * producer warp with the bulk-copy engine, swizzled layouts.
 * Requirements: K % 32 == 0; operands 16-byte aligned. */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/gemm_blockscaled.cuh"
#include "backend/cuda/num_dev.cuh"

namespace tide_wgmma {

using tide_gemm::cp_async16;
using tide_gemm::cp_async_commit;
using tide_gemm::cp_async_wait;
using tide_gemm::scale4;
using tide_gemm::scale_at;
using tide_gemm::smem_addr;

constexpr int BM = 128, BN = 128, BK = 128, STAGES = 4, THREADS = 256;
constexpr int TILE = BM * BK; /* bytes of one operand tile per stage, unpadded */
constexpr int STAGE_BYTES = 2 * TILE;
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
constexpr int LBO = 128, SBO = 1024; /* core-matrix offsets in k and in rows */

/* Byte offset of 16-byte chunk c (of 8 along k) of row r in a tile. */
__device__ __forceinline__ int tile_off(int r, int c) { return (r >> 3) * SBO + c * LBO + (r & 7) * 16; }

/* wgmma shared-memory matrix descriptor, no swizzle. */
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3ffffu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* Keeps the compiler from moving reads of r across the waits above. */
__device__ __forceinline__ void fence_reg(float &r) { asm volatile("" : "+f"(r)::"memory"); }

/* d = A(64x32 e4m3, smem) * B(32x128 e4m3, smem), zero accumulator. */
__device__ __forceinline__ void wgmma_m64n128k32(float d[64], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]),
          "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]),
          "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]),
          "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]),
          "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]),
          "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]),
          "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]),
          "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63])
                 : "l"(da), "l"(db), "r"(0));
}

__device__ __forceinline__ void load_step(uint8_t *stage, const uint8_t *__restrict__ a, const uint8_t *__restrict__ b,
                                          int64_t m, int64_t n, int64_t k, int64_t m0, int64_t n0, int64_t k0) {
#pragma unroll
    for (int i = 0; i < BM * (BK / 16) / THREADS; i++) {
        /* thread -> (row within 8, chunk, 8-row group): 8 neighbours fill one core matrix */
        int q = threadIdx.x + i * THREADS, r = (q & 7) + ((q >> 6) << 3), c = (q >> 3) & 7;
        int64_t gk = k0 + c * 16;
        int64_t ga = m0 + r, gb = n0 + r;
        int oka = ga < m && gk < k, okb = gb < n && gk < k;
        cp_async16(smem_addr(stage + tile_off(r, c)), oka ? a + ga * k + gk : a, oka ? 16 : 0);
        cp_async16(smem_addr(stage + TILE + tile_off(r, c)), okb ? b + gb * k + gk : b, okb ? 16 : 0);
    }
}

__global__ void __launch_bounds__(THREADS, 1)
    gemm_fp8_wgmma_kernel(const uint8_t *__restrict__ xq, const uint8_t *__restrict__ xs, int64_t m,
                          const uint8_t *__restrict__ w, const uint8_t *__restrict__ ws, int64_t n, int64_t k,
                          uint16_t *__restrict__ y, uint32_t lbo, uint32_t sbo) {
    extern __shared__ __align__(1024) uint8_t smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2, wq = warp & 3;
    const int g = lane >> 2, t = lane & 3;
    const int64_t m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BN;
    const int64_t nbk = k / 32, steps = (k + BK - 1) / BK;
    const int aligned = (nbk % 4) == 0;
    const int64_t row0 = m0 + wg * 64 + wq * 16 + g; /* this thread's rows: row0, row0 + 8 */

    float acc[64], d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < steps) load_step(smem + s * STAGE_BYTES, xq, w, m, n, k, m0, n0, (int64_t)s * BK);
        cp_async_commit();
    }
    for (int64_t step = 0; step < steps; step++) {
        const int64_t kb0 = step * 4;
        uint32_t sa0 = scale4(xs, row0, m, nbk, kb0, aligned), sa1 = scale4(xs, row0 + 8, m, nbk, kb0, aligned);
        uint32_t sw[4];
#pragma unroll
        for (int q = 0; q < 4; q++) sw[q] = scale4(ws, n0 / 32 + q, (n + 31) / 32, nbk, kb0, aligned);

        cp_async_wait<STAGES - 2>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* cp.async writes -> tensor-core reads */
        __syncthreads();
        {
            int64_t next = step + STAGES - 1;
            if (next < steps) load_step(smem + (next % STAGES) * STAGE_BYTES, xq, w, m, n, k, m0, n0, next * BK);
            cp_async_commit();
        }
        const uint32_t sA = smem_addr(smem + (step % STAGES) * STAGE_BYTES) + wg * 8 * SBO; /* 64 rows = 8 groups */
        const uint32_t sB = smem_addr(smem + (step % STAGES) * STAGE_BYTES + TILE);
        const int kb_here = (int)(nbk - kb0 < 4 ? nbk - kb0 : 4);
#pragma unroll
        for (int kb = 0; kb < 4; kb++) {
            if (kb >= kb_here) break;
            /* k-block kb is chunks 2kb, 2kb+1 of every row */
            uint64_t da = make_desc(sA + 2 * kb * LBO, lbo, sbo), db = make_desc(sB + 2 * kb * LBO, lbo, sbo);
            wgmma_fence();
            wgmma_m64n128k32(d, da, db);
            wgmma_commit();
            wgmma_wait0();
#pragma unroll
            for (int i = 0; i < 64; i++) fence_reg(d[i]);
            float a0 = scale_at(sa0, kb), a1 = scale_at(sa1, kb);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float fw = scale_at(sw[q], kb), f0 = __fmul_rn(a0, fw), f1 = __fmul_rn(a1, fw);
#pragma unroll
                for (int j = 4 * q; j < 4 * q + 4; j++) { /* column pairs 8j + 2t, in block q */
                    acc[4 * j + 0] = __fadd_rn(acc[4 * j + 0], __fmul_rn(d[4 * j + 0], f0));
                    acc[4 * j + 1] = __fadd_rn(acc[4 * j + 1], __fmul_rn(d[4 * j + 1], f0));
                    acc[4 * j + 2] = __fadd_rn(acc[4 * j + 2], __fmul_rn(d[4 * j + 2], f1));
                    acc[4 * j + 3] = __fadd_rn(acc[4 * j + 3], __fmul_rn(d[4 * j + 3], f1));
                }
            }
        }
    }
    cp_async_wait<0>();

    const int pairs = (n % 2) == 0;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t row = row0 + 8 * h;
        if (row >= m) continue;
        uint16_t *yr = y + row * n;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int64_t col = n0 + 8 * j + 2 * t;
            tide_store_bf16_pair(yr, col, n, pairs, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
    }
}

} /* namespace tide_wgmma */

/* lbo / sbo: the descriptor's two core-matrix offsets, named by the layout
 * (k neighbours 128 bytes apart, 8-row groups 1024 apart); the probe entry
 * point below lets the GPU test try them swapped, in case the hardware's
 * reading of the two fields is the other one. */
static int wgmma_launch(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w, const uint8_t *ws, int64_t n,
                        int64_t k, uint16_t *y, uint32_t lbo, uint32_t sbo, cudaStream_t stream, tide_status *st) {
    using namespace tide_wgmma;
    if (m < 1 || n < 1 || k < 32 || k % 32 != 0)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda gemm_fp8_wgmma: m %lld, n %lld, k %lld (k must be a positive multiple of 32)",
                         (long long)m, (long long)n, (long long)k);
    if (!xq || !xs || !w || !ws || !y) return tide_fail(st, TIDE_ERR_INVALID, "cuda gemm_fp8_wgmma: NULL pointer");
    if (((uintptr_t)xq | (uintptr_t)w) % 16 != 0 || ((uintptr_t)xs | (uintptr_t)ws | (uintptr_t)y) % 4 != 0)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda gemm_fp8_wgmma: operands must be 16-byte aligned, scales and output 4-byte aligned");
    int64_t gx = (n + BN - 1) / BN, gy = (m + BM - 1) / BM;
    if (gx > 0x7fffffff || gy > 65535)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda gemm_fp8_wgmma: %lld x %lld output is too large for one launch",
                         (long long)m, (long long)n);
    if (tide_cuda_check(cudaFuncSetAttribute(gemm_fp8_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             SMEM_BYTES),
                        "cuda gemm_fp8_wgmma: raising the shared-memory limit", st) != 0)
        return -1;
    gemm_fp8_wgmma_kernel<<<dim3((unsigned)gx, (unsigned)gy), THREADS, SMEM_BYTES, stream>>>(xq, xs, m, w, ws, n, k, y,
                                                                                         lbo, sbo);
    return tide_cuda_launched("cuda gemm_fp8_wgmma: launch", st);
}

extern "C" int tide_cuda_gemm_fp8_wgmma(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                                        const uint8_t *ws, int64_t n, int64_t k, uint16_t *y, tide_cuda_stream stream,
                                        tide_status *st) {
    return wgmma_launch(xq, xs, m, w, ws, n, k, y, tide_wgmma::LBO, tide_wgmma::SBO, stream, st);
}

extern "C" int tide_cuda_gemm_fp8_wgmma_probe(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                                              const uint8_t *ws, int64_t n, int64_t k, uint16_t *y, int swap,
                                              tide_cuda_stream stream, tide_status *st) {
    uint32_t lbo = swap ? tide_wgmma::SBO : tide_wgmma::LBO, sbo = swap ? tide_wgmma::LBO : tide_wgmma::SBO;
    return wgmma_launch(xq, xs, m, w, ws, n, k, y, lbo, sbo, stream, st);
}
