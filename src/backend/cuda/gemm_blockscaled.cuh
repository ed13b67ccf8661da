/* The block-scaled GEMM kernel shared by gemm_fp8.cu (e4m3 weights, one
 * e8m0 scale per 32x32 block) and gemm_fp4.cu (e2m1 weights, one e8m0 scale
 * per output row and 32 values of k): y = x W^T with the activation x in
 * e4m3 scaled per (row, 32 values of k), f32 accumulation block by block,
 * bf16 output (semantics: cuda_kernels.h, backend/ops.h).
 *
 * Why per-32 blocks shape the kernel: the scales change every 32 values of
 * k, and one mma.sync.m16n8k32 consumes exactly 32 values of k. So each mma
 * runs with a zero accumulator, giving the raw dot product of one block,
 * and its four results are folded into the f32 accumulators with the
 * block's scales (powers of two, so the scaling is exact): acc += p_b * s.
 * Blocks are folded in k order, as the CPU does.
 *
 * Tiling (first version: correctness first, plain mma.sync, no wgmma; on
 * Hopper the e4m3 mma.sync is carried out on the f16 tensor-core path).
 * Two tile shapes (template parameters of one kernel):
 *   "wide"   128 x 128 tile of y per thread block, 8 warps of 64 x 32,
 *            3 stages: for many rows (prefill, batched experts);
 *   "skinny" 16 x 64 tile, 4 warps of 16 x 16, 6 stages: for at most 16
 *            rows (decode), where the weight read is the whole cost and
 *            the wide tile would leave most multiprocessors idle (N / 128
 *            blocks) and waste 7/8 of every mma on empty rows.
 * In the wide shape:
 *   - a thread block (256 threads, 8 warps) computes a 128 x 128 tile of y;
 *   - k advances 128 values (4 scale blocks) per step; the A tile (128 rows
 *     x 128 bytes) and the B tile (128 rows of W x 128 bytes for e4m3, 64
 *     bytes for packed e2m1) are copied to shared memory with cp.async (16
 *     bytes per copy, zero-filled past M, N or K), 3 stages deep, so two
 *     copies are in flight while one step is multiplied;
 *   - shared rows are padded by 16 bytes (144 / 80 bytes): the 8 rows one
 *     fragment load touches then fall on distinct banks;
 *   - warps are 2 (m) x 4 (n); a warp owns 64 x 32 of the tile: 4 x 4 mma
 *     tiles of 16 x 8, i.e. 64 f32 accumulators per thread. A fragments
 *     come from ldmatrix.x4 (the e4m3 A fragment of m16n8k32 is, byte for
 *     byte, four 8x8 b16 matrices); e4m3 B fragments likewise, two n-tiles
 *     per ldmatrix.x4; e2m1 B fragments are read 2 bytes (4 values) at a
 *     time and widened to e4m3 in registers (every e2m1 value is exact in
 *     e4m3) with one byte permute and the sign bits moved up;
 *   - scale codes are read straight from global memory (L1/L2 hits) at the
 *     top of each k step, before the wait for the tile, to hide latency: per
 *     thread one activation scale for each of its 8 rows, and one weight
 *     scale for its warp (fp8: the warp's 32 columns lie in one 32-row block
 *     of W) or for each of its 8 columns (fp4);
 *   - output: each thread rounds its accumulators to bf16 and stores pairs
 *     (4-byte stores) when N is even.
 * Requirements: K % 32 == 0 (every 16-byte copy then lies wholly inside or
 * outside the matrix); operands 16-byte aligned. Private to this folder. */
#ifndef TIDE_BACKEND_CUDA_GEMM_BLOCKSCALED_CUH
#define TIDE_BACKEND_CUDA_GEMM_BLOCKSCALED_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"

namespace tide_gemm {

enum { W_FP8 = 0, W_FP4 = 1 };

constexpr int BK = 128; /* values of k per step = 4 scale blocks */
constexpr int KB_PER_STEP = BK / 32;
constexpr int LDS_A = BK + 16;
template <int WF> struct wfmt;
template <> struct wfmt<W_FP8> {
    static constexpr int row_bytes = BK; /* bytes of one W row per step */
    static constexpr int lds = row_bytes + 16;
};
template <> struct wfmt<W_FP4> {
    static constexpr int row_bytes = BK / 2;
    static constexpr int lds = row_bytes + 16;
};

/* A tile shape: BM x BN per thread block, WARPS_M x WARPS_N warps, STAGES
 * deep. A warp owns (BM / WARPS_M) x (BN / WARPS_N): MT m-tiles of 16 and NT
 * n-tiles of 8 (NT even: B fragments come two n-tiles per ldmatrix.x4).
 * MIN_BLOCKS caps the registers so that many blocks fit on one SM. */
template <int WF, int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, int MIN_BLOCKS_> struct cfg {
    static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
    static constexpr int MIN_BLOCKS = MIN_BLOCKS_; /* resident blocks per SM the registers must allow */
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N; /* warp tile */
    static constexpr int MT = WTM / 16, NT = WTN / 8;
    static constexpr int LDS_B = wfmt<WF>::lds;
    static constexpr int STAGE_BYTES = BM * LDS_A + BN * LDS_B;
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
    static_assert(MT >= 1 && NT >= 2 && NT % 2 == 0 && WTM % 16 == 0 && WTN % 8 == 0, "warp tile");
    static_assert(32 % WTN == 0 || WTN % 32 == 0, "fp8: a warp's columns must share one 32-row weight block");
    static_assert(WTN <= 32, "fp8: one weight scale per warp");
};
constexpr int SKINNY_MAX_ROWS = 16;

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t r[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

/* d = A(16x32 e4m3) * B(32x8 e4m3), f32, zero accumulator. */
__device__ __forceinline__ void mma_e4m3(const uint32_t a[4], uint32_t b0, uint32_t b1, float d[4]) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

/* Four packed e2m1 values (16 bits, element 0 in the low nibble) as four
 * e4m3 codes (element 0 in the low byte). Magnitudes 0 .5 1 1.5 2 3 4 6 are
 * the e4m3 codes 00 30 38 3c 40 44 48 4c; byte-permute selects them by the
 * 3-bit magnitude, and each sign bit moves from bit 4i+3 to bit 8i+7. */
__device__ __forceinline__ uint32_t e2m1x4_to_e4m3x4(uint32_t v) {
    uint32_t mag = __byte_perm(0x3c383000u, 0x4c484440u, v & 0x7777u);
    uint32_t s = v & 0x8888u;
    return mag | ((s & 0x8u) << 4) | ((s & 0x80u) << 8) | ((s & 0x800u) << 12) | ((s & 0x8000u) << 16);
}

/* Copies one k step of the A and B tiles into a stage. */
template <int WF, class C>
__device__ __forceinline__ void load_step(uint8_t *stage, const uint8_t *__restrict__ a, const uint8_t *__restrict__ b,
                                          int64_t m, int64_t n, int64_t k, int64_t m0, int64_t n0, int64_t k0) {
    constexpr int CA = BK / 16, CB = wfmt<WF>::row_bytes / 16; /* 16-byte chunks per row */
    static_assert((C::BM * CA) % C::THREADS == 0 && (C::BN * CB) % C::THREADS == 0, "copies per thread");
    const int64_t kb_row = WF == W_FP8 ? k : k / 2;            /* bytes per W row */
    const int64_t kb0 = WF == W_FP8 ? k0 : k0 / 2;
#pragma unroll
    for (int i = 0; i < C::BM * CA / C::THREADS; i++) {
        int c = threadIdx.x + i * C::THREADS, row = c / CA, ch = c % CA;
        int64_t gk = k0 + ch * 16, gr = m0 + row;
        int ok = gr < m && gk < k;
        cp_async16(smem_addr(stage + row * LDS_A + ch * 16), ok ? a + gr * k + gk : a, ok ? 16 : 0);
    }
    uint8_t *sb = stage + C::BM * LDS_A;
#pragma unroll
    for (int i = 0; i < C::BN * CB / C::THREADS; i++) {
        int c = threadIdx.x + i * C::THREADS, row = c / CB, ch = c % CB;
        int64_t gk = kb0 + ch * 16, gr = n0 + row;
        int ok = gr < n && gk < kb_row;
        cp_async16(smem_addr(sb + row * C::LDS_B + ch * 16), ok ? b + gr * kb_row + gk : b, ok ? 16 : 0);
    }
}

/* Four consecutive scale codes (k-blocks kb..kb+3 of one row), 127 (= 1.0)
 * where the row or the block is outside the matrix. */
__device__ __forceinline__ uint32_t scale4(const uint8_t *__restrict__ s, int64_t row, int64_t rows, int64_t nbk,
                                           int64_t kb, int aligned) {
    if (row >= rows) return 0x7f7f7f7fu;
    const uint8_t *p = s + row * nbk + kb;
    if (aligned) return __ldg((const unsigned int *)p);
    uint32_t v = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) v |= (kb + j < nbk ? (uint32_t)__ldg(p + j) : 0x7fu) << (8 * j);
    return v;
}

__device__ __forceinline__ float scale_at(uint32_t codes, int kb) { return tide_dev_e8m0_dec((codes >> (8 * kb)) & 0xffu); }

template <int WF, class C>
__global__ void __launch_bounds__(C::THREADS, C::MIN_BLOCKS)
    gemm_kernel(const uint8_t *__restrict__ xq, const uint8_t *__restrict__ xs, int64_t m, const uint8_t *__restrict__ w,
                const uint8_t *__restrict__ ws, int64_t n, int64_t k, uint16_t *__restrict__ y) {
    extern __shared__ __align__(128) uint8_t smem[];
    constexpr int MT = C::MT, NT = C::NT, LDS_B = C::LDS_B, STAGES = C::STAGES;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
    const int g = lane >> 2, t = lane & 3; /* mma fragment coordinates */
    const int64_t m0 = (int64_t)blockIdx.y * C::BM, n0 = (int64_t)blockIdx.x * C::BN;
    const int64_t nbk = k / 32, steps = (k + BK - 1) / BK;
    const int aligned = (nbk % 4) == 0; /* 4-byte scale loads stay aligned */
    const int wrow = wm * C::WTM, wcol = wn * C::WTN; /* the warp's tile inside the block's */

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < steps) load_step<WF, C>(smem + s * C::STAGE_BYTES, xq, w, m, n, k, m0, n0, (int64_t)s * BK);
        cp_async_commit();
    }

    for (int64_t step = 0; step < steps; step++) {
        const int64_t kb0 = step * KB_PER_STEP;
        /* scale codes of this step: rows g and g+8 of each m tile */
        uint32_t sa[MT][2];
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) sa[i][h] = scale4(xs, m0 + wrow + i * 16 + g + h * 8, m, nbk, kb0, aligned);
        uint32_t sw[NT][2]; /* fp8: sw[0][0] for the whole warp; fp4: one per column */
        if constexpr (WF == W_FP8) {
            sw[0][0] = scale4(ws, (n0 + wcol) / 32, (n + 31) / 32, nbk, kb0, aligned);
        } else {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int c = 0; c < 2; c++) sw[j][c] = scale4(ws, n0 + wcol + j * 8 + t * 2 + c, n, nbk, kb0, aligned);
        }

        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* this step's tiles are in; everyone is done with the previous step */
        {
            int64_t next = step + STAGES - 1;
            if (next < steps)
                load_step<WF, C>(smem + (next % STAGES) * C::STAGE_BYTES, xq, w, m, n, k, m0, n0, next * BK);
            cp_async_commit();
        }
        const uint8_t *sA = smem + (step % STAGES) * C::STAGE_BYTES, *sB = sA + C::BM * LDS_A;
        const int kb_here = (int)(nbk - kb0 < KB_PER_STEP ? nbk - kb0 : KB_PER_STEP);
#pragma unroll
        for (int kb = 0; kb < KB_PER_STEP; kb++) {
            if (kb >= kb_here) break;
            uint32_t af[MT][4], bf[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                int row = wrow + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldmatrix_x4(smem_addr(sA + row * LDS_A + kb * 32 + (lane >> 4) * 16), af[i]);
            }
            if constexpr (WF == W_FP8) {
#pragma unroll
                for (int p = 0; p < NT / 2; p++) {
                    uint32_t r[4];
                    int row = wcol + p * 16 + (lane >> 4) * 8 + (lane & 7);
                    ldmatrix_x4(smem_addr(sB + row * LDS_B + kb * 32 + ((lane >> 3) & 1) * 16), r);
                    bf[2 * p][0] = r[0], bf[2 * p][1] = r[1], bf[2 * p + 1][0] = r[2], bf[2 * p + 1][1] = r[3];
                }
            } else {
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const uint8_t *p = sB + (wcol + j * 8 + g) * LDS_B + kb * 16 + t * 2;
                    bf[j][0] = e2m1x4_to_e4m3x4(*(const uint16_t *)p);
                    bf[j][1] = e2m1x4_to_e4m3x4(*(const uint16_t *)(p + 8));
                }
            }
#pragma unroll
            for (int i = 0; i < MT; i++) {
                float a0 = scale_at(sa[i][0], kb), a1 = scale_at(sa[i][1], kb);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    float f[4];
                    if constexpr (WF == W_FP8) {
                        float fw = scale_at(sw[0][0], kb);
                        f[0] = f[1] = __fmul_rn(a0, fw);
                        f[2] = f[3] = __fmul_rn(a1, fw);
                    } else {
                        float w0 = scale_at(sw[j][0], kb), w1 = scale_at(sw[j][1], kb);
                        f[0] = __fmul_rn(a0, w0), f[1] = __fmul_rn(a0, w1);
                        f[2] = __fmul_rn(a1, w0), f[3] = __fmul_rn(a1, w1);
                    }
                    float d[4];
                    mma_e4m3(af[i], bf[j][0], bf[j][1], d);
#pragma unroll
                    for (int c = 0; c < 4; c++) acc[i][j][c] = __fadd_rn(acc[i][j][c], __fmul_rn(d[c], f[c]));
                }
            }
        }
    }
    cp_async_wait<0>();

    const int pairs = (n % 2) == 0;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t row = m0 + wrow + i * 16 + g + h * 8;
            if (row >= m) continue;
            uint16_t *yr = y + row * n;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                int64_t col = n0 + wcol + j * 8 + t * 2;
                tide_store_bf16_pair(yr, col, n, pairs, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
}

template <int WF, class C>
static int gemm_run(const char *name, const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                    const uint8_t *ws, int64_t n, int64_t k, uint16_t *y, cudaStream_t stream, tide_status *st) {
    int64_t gx = (n + C::BN - 1) / C::BN, gy = (m + C::BM - 1) / C::BM;
    if (gx > 0x7fffffff || gy > 65535)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda %s: %lld x %lld output is too large for one launch", name,
                         (long long)m, (long long)n);
    if (tide_cuda_check(cudaFuncSetAttribute(gemm_kernel<WF, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             C::SMEM_BYTES),
                        "raising the GEMM's shared-memory limit", st) != 0)
        return -1;
    gemm_kernel<WF, C><<<dim3((unsigned)gx, (unsigned)gy), C::THREADS, C::SMEM_BYTES, stream>>>(xq, xs, m, w, ws, n, k, y);
    return tide_cuda_launched(name, st);
}

/* Checks the arguments, picks the tile shape and launches. */
template <int WF>
static int gemm_launch(const char *name, const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w,
                       const uint8_t *ws, int64_t n, int64_t k, uint16_t *y, cudaStream_t stream, tide_status *st) {
    if (m < 1 || n < 1 || k < 32 || k % 32 != 0)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda %s: m %lld, n %lld, k %lld (k must be a positive multiple of 32)",
                         name, (long long)m, (long long)n, (long long)k);
    if (!xq || !xs || !w || !ws || !y) return tide_fail(st, TIDE_ERR_INVALID, "cuda %s: NULL pointer", name);
    if (((uintptr_t)xq | (uintptr_t)w) % 16 != 0 || ((uintptr_t)xs | (uintptr_t)ws | (uintptr_t)y) % 4 != 0)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda %s: operands must be 16-byte aligned, scales and output 4-byte aligned", name);
    if (m <= SKINNY_MAX_ROWS) {
        using C = cfg<WF, 16, 64, 1, 4, 6, 3>; /* 3 x 69 KiB of stages per SM */
        return gemm_run<WF, C>(name, xq, xs, m, w, ws, n, k, y, stream, st);
    }
    using C = cfg<WF, 128, 128, 2, 4, 3, 1>;
    return gemm_run<WF, C>(name, xq, xs, m, w, ws, n, k, y, stream, st);
}

} /* namespace tide_gemm */

#endif
