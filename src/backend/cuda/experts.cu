/* The routed MoE experts on the GPU as grouped GEMMs (issue #5): for every
 * token row, y = sum over the row's experts, in ascending expert id order,
 * of w2_e(bf16(weight * swiglu(w1_e x, w3_e x))), exactly the arithmetic of
 * src/model/moe.c on the CPU ops (semantics: cuda_kernels.h).
 *
 * Pipeline, six launches on one stream, no host round trip:
 *   1. bucket_kernel (one block): counts the (row, slot) pairs per expert,
 *      prefix-sums them into buckets (one contiguous range of "positions"
 *      per expert), cuts each bucket into m-tiles of BM positions (the tile
 *      table the GEMMs walk), scatters each pair to a position (pos_row,
 *      pos_w) and writes, per row, the positions of its slots sorted by
 *      (expert id, slot): the order of the final sum. Positions inside a
 *      bucket come from shared-memory atomics, so their order varies from
 *      run to run; nothing numeric depends on it (every output element of
 *      the GEMMs depends on its own row only, and the sum follows `order`).
 *   2. tide_cuda_quant_fp8_act on x (each row once, whatever its experts).
 *   3. grouped_kernel<GATE_UP>: one launch over all experts. A block takes
 *      one m-tile (one expert, BM positions) and NCOL output columns; its B
 *      tile is NCOL rows of w1 followed by the same NCOL rows of w3, so one
 *      accumulator set yields g and u side by side; A rows are gathered
 *      through pos_row. Epilogue: g and u rounded to bf16 (the CPU's
 *      linear with TIDE_LIN_BF16_OUT) meet in shared memory, and
 *      h = bf16(weight * swiglu(g, u)) is written as f32 [P][I].
 *   4. tide_cuda_quant_fp8_act on h (the CPU's linear(w2) quantises its
 *      input per 32 values the same way).
 *   5. grouped_kernel<DOWN>: ye = bf16(hq w2_e^T) [P][D], A rows contiguous
 *      per bucket.
 *   6. combine_kernel: y[r] = sum of ye over the row's positions in `order`
 *      (f32, from 0, as moe.c's acc), optionally bf16(acc + shared).
 *
 * GEMM tiling: the block-scaled FP4 scheme of gemm_blockscaled.cuh (one
 * mma.sync.m16n8k32 per 32-block of k from a zero accumulator, folded into
 * f32 accumulators with the two power-of-two scales in k order; e2m1 widened
 * to e4m3 in registers; cp.async stages with padded rows), reusing its
 * helpers and tile shapes: "skinny" 16 x 64 (4 warps, 6 stages) when the
 * average bucket is small (decode: the expert weights are read once per
 * 16 positions), "wide" 128 x 128 (8 warps, 3 stages) for prefill. Both
 * stages use the same BM, chosen on the host from P = rows * k and E.
 *
 * Grid: x = an upper bound of the m-tile count, ceil(P / BM) + min(E, P)
 * (every non-empty bucket wastes less than one tile); blocks past the real
 * count (written by kernel 1) exit at once. y = output column tiles.
 *
 * Bound against the CPU: each 32-block dot product comes from the tensor
 * cores instead of an exact double sum rounded once; the rest of the
 * arithmetic is the CPU's sequence of f32 roundings. See
 * tests/gpu/gpu_test_experts.c. */
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/gemm_blockscaled.cuh"
#include "backend/cuda/num_dev.cuh"
#include "backend/cuda/swiglu_dev.cuh"

struct tide_cuda_experts {
    int n_experts;
    int64_t dim, inter;
    const uint8_t **table; /* device: [n_experts][PTR_N] */
};

namespace {

using namespace tide_gemm;

enum { PTR_W1 = 0, PTR_W1S, PTR_W3, PTR_W3S, PTR_W2, PTR_W2S, PTR_N };
enum { MODE_GATE_UP = 0, MODE_DOWN = 1 };

constexpr int BUCKET_THREADS = 1024;

/* The device arrays of one call, carved out of the caller's workspace. */
struct sched {
    int32_t *bucket_start; /* [E + 1] */
    int32_t *tile_expert;  /* [max_tiles] */
    int32_t *tile_first;   /* [max_tiles]: first position of the tile */
    int32_t *n_tiles;      /* [1] */
    int32_t *pos_row;      /* [P]: position -> row of x */
    float *pos_w;          /* [P]: position -> routing weight */
    int32_t *order;        /* [rows][k]: the row's positions by (expert, slot); -1 after the last */
    int32_t *slot_pos;     /* [P]: (row, slot) -> position, -1 for an expert id out of range */
};

/* ---- 1. buckets ---- */

/* Exclusive prefix sum over the block (BUCKET_THREADS threads, one value
 * each); *total gets the sum. Contains barriers: every thread calls it. */
__device__ int block_excl_scan(int v, int *warp_tot, int *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
    }
    if (lane == 31) warp_tot[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int w = warp_tot[lane]; /* BUCKET_THREADS / 32 == 32 warps */
        int wi = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int t = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += t;
        }
        warp_tot[lane] = wi - w; /* exclusive prefix of the warp totals */
        if (lane == 31) warp_tot[32] = wi;
    }
    __syncthreads();
    int r = warp_tot[warp] + incl - v;
    *total = warp_tot[32];
    __syncthreads(); /* warp_tot may be reused by the next call */
    return r;
}

__global__ void __launch_bounds__(BUCKET_THREADS)
    bucket_kernel(const int32_t *__restrict__ idx, const float *__restrict__ w, int64_t rows, int k, int n_experts,
                  int bm, sched s) {
    extern __shared__ int bsm[];
    int *cnt = bsm, *start = bsm + n_experts, *tstart = bsm + 2 * n_experts + 1; /* [E], [E+1], [E+1] */
    __shared__ int warp_tot[33];
    const int tid = threadIdx.x;
    const int64_t P = rows * k;
    for (int e = tid; e < n_experts; e += BUCKET_THREADS) cnt[e] = 0;
    __syncthreads();
    for (int64_t q = tid; q < P; q += BUCKET_THREADS) {
        int e = idx[q];
        if (e >= 0 && e < n_experts) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    int c = tid < n_experts ? cnt[tid] : 0, total, ttotal;
    int ex = block_excl_scan(c, warp_tot, &total);
    int tex = block_excl_scan((c + bm - 1) / bm, warp_tot, &ttotal);
    if (tid < n_experts) {
        start[tid] = ex;
        tstart[tid] = tex;
        cnt[tid] = 0; /* reused as the fill counter below */
    }
    if (tid == 0) {
        start[n_experts] = total;
        tstart[n_experts] = ttotal;
        s.n_tiles[0] = ttotal;
    }
    __syncthreads();
    for (int e = tid; e <= n_experts; e += BUCKET_THREADS) s.bucket_start[e] = start[e];
    for (int e = tid; e < n_experts; e += BUCKET_THREADS)
        for (int t = tstart[e]; t < tstart[e + 1]; t++) {
            s.tile_expert[t] = e;
            s.tile_first[t] = start[e] + (t - tstart[e]) * bm;
        }
    /* one thread per row: its slots to positions, then their order */
    for (int64_t r = tid; r < rows; r += BUCKET_THREADS) {
        const int32_t *ir = idx + r * k;
        for (int j = 0; j < k; j++) {
            int e = ir[j], pos = -1;
            if (e >= 0 && e < n_experts) {
                pos = start[e] + atomicAdd(&cnt[e], 1);
                s.pos_row[pos] = (int32_t)r;
                s.pos_w[pos] = w[r * k + j];
            }
            s.slot_pos[r * k + j] = pos;
        }
        /* selection by the key (expert, slot): the order moe.c adds in */
        int pe = -1, pj = -1;
        for (int i = 0; i < k; i++) {
            int be = INT_MAX, bj = -1;
            for (int j = 0; j < k; j++) {
                int e = ir[j];
                if (e < 0 || e >= n_experts) continue;
                int after = e > pe || (e == pe && j > pj);
                if (after && (e < be || (e == be && j < bj))) be = e, bj = j;
            }
            s.order[r * k + i] = bj < 0 ? -1 : s.slot_pos[r * k + bj];
            if (bj >= 0) pe = be, pj = bj;
        }
    }
}

/* ---- 3 and 5. the grouped GEMM ---- */

template <int MODE, class C> struct grp {
    static constexpr int NCOL = MODE == MODE_GATE_UP ? C::BN / 2 : C::BN; /* output columns per block */
    static constexpr int LDC = C::BN + 8;                                 /* epilogue tile row, floats */
    static constexpr int SMEM = MODE == MODE_GATE_UP && C::BM * LDC * 4 > C::SMEM_BYTES ? C::BM * LDC * 4
                                                                                         : C::SMEM_BYTES;
    static constexpr int CA = BK / 16, CB = wfmt<W_FP4>::row_bytes / 16; /* 16-byte chunks per row */
    static constexpr int NA = C::BM * CA / C::THREADS, NB = C::BN * CB / C::THREADS;
    static_assert(NA * C::THREADS == C::BM * CA && NB * C::THREADS == C::BN * CB, "copies per thread");
    static_assert(NCOL % C::WTN == 0, "a warp's columns lie in one half (w1 or w3)");
};

template <int MODE, class C>
__global__ void __launch_bounds__(C::THREADS, C::MIN_BLOCKS)
    grouped_kernel(const uint8_t *__restrict__ a, const uint8_t *__restrict__ as, const uint8_t *const *__restrict__ table,
                   const int32_t *__restrict__ bucket_start, const int32_t *__restrict__ tile_expert,
                   const int32_t *__restrict__ tile_first, const int32_t *__restrict__ n_tiles,
                   const int32_t *__restrict__ pos_row, const float *__restrict__ pos_w, int64_t n, int64_t k,
                   float limit, float *__restrict__ h, uint16_t *__restrict__ y) {
    using G = grp<MODE, C>;
    extern __shared__ __align__(128) uint8_t smem[];
    constexpr int MT = C::MT, NT = C::NT, LDS_B = C::LDS_B, STAGES = C::STAGES, NCOL = G::NCOL;
    const int t_idx = blockIdx.x;
    if (t_idx >= *n_tiles) return; /* the whole block leaves: no barrier is skipped */
    const int e = tile_expert[t_idx];
    const int64_t p0 = tile_first[t_idx], pend = min((int64_t)bucket_start[e + 1], p0 + C::BM);
    const int64_t n0 = (int64_t)blockIdx.y * NCOL;
    const uint8_t *const *tab = table + (int64_t)e * PTR_N;
    const uint8_t *b0 = tab[MODE == MODE_GATE_UP ? PTR_W1 : PTR_W2], *b0s = tab[MODE == MODE_GATE_UP ? PTR_W1S : PTR_W2S];
    const uint8_t *b1 = MODE == MODE_GATE_UP ? tab[PTR_W3] : b0, *b1s = MODE == MODE_GATE_UP ? tab[PTR_W3S] : b0s;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
    const int g = lane >> 2, t = lane & 3;
    const int64_t nbk = k / 32, steps = (k + BK - 1) / BK, krow = k / 2; /* bytes per packed W row */
    const int wrow = wm * C::WTM, wcol = wn * C::WTN;
    const int half = MODE == MODE_GATE_UP ? wcol / NCOL : 0; /* this warp's columns: g (0) or u (1) */
    const uint8_t *ws_warp = half ? b1s : b0s;
    const int a_aligned = nbk % 4 == 0 && ((uintptr_t)as % 4) == 0;
    const int w_aligned = nbk % 4 == 0 && ((uintptr_t)ws_warp % 4) == 0;

    /* this thread's copy sources (the k offset is added per step) */
    const uint8_t *a_src[G::NA];
    int a_ok[G::NA];
#pragma unroll
    for (int i = 0; i < G::NA; i++) {
        int c = threadIdx.x + i * C::THREADS, row = c / G::CA, ch = c % G::CA;
        int64_t p = p0 + row;
        a_ok[i] = p < pend;
        int64_t src = a_ok[i] ? (MODE == MODE_GATE_UP ? (int64_t)pos_row[p] : p) : 0;
        a_src[i] = a + src * k + ch * 16;
    }
    const uint8_t *b_src[G::NB];
    int b_ok[G::NB];
#pragma unroll
    for (int i = 0; i < G::NB; i++) {
        int c = threadIdx.x + i * C::THREADS, row = c / G::CB, ch = c % G::CB;
        int hf = MODE == MODE_GATE_UP ? row / NCOL : 0;
        int64_t col = n0 + (MODE == MODE_GATE_UP ? row % NCOL : row);
        b_ok[i] = col < n;
        b_src[i] = (hf ? b1 : b0) + (b_ok[i] ? col : 0) * krow + ch * 16;
    }
    /* the activation rows whose scales this thread needs (-1: past the tile) */
    int32_t a_row[MT][2]; /* positions and rows are < 2^31 (checked on the host) */
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int64_t p = p0 + wrow + i * 16 + g + hh * 8;
            a_row[i][hh] = p < pend ? (MODE == MODE_GATE_UP ? pos_row[p] : (int32_t)p) : -1;
        }

    auto load = [&](int64_t step) {
        uint8_t *stage = smem + (step % STAGES) * C::STAGE_BYTES;
        const int64_t k0 = step * BK, kb0 = k0 / 2;
#pragma unroll
        for (int i = 0; i < G::NA; i++) {
            int c = threadIdx.x + i * C::THREADS, row = c / G::CA, ch = c % G::CA;
            int ok = a_ok[i] && k0 + ch * 16 < k;
            cp_async16(smem_addr(stage + row * LDS_A + ch * 16), ok ? a_src[i] + k0 : a, ok ? 16 : 0);
        }
        uint8_t *sb = stage + C::BM * LDS_A;
#pragma unroll
        for (int i = 0; i < G::NB; i++) {
            int c = threadIdx.x + i * C::THREADS, row = c / G::CB, ch = c % G::CB;
            int ok = b_ok[i] && kb0 + ch * 16 < krow;
            cp_async16(smem_addr(sb + row * LDS_B + ch * 16), ok ? b_src[i] + kb0 : b0, ok ? 16 : 0);
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < steps) load(s);
        cp_async_commit();
    }

    for (int64_t step = 0; step < steps; step++) {
        const int64_t kb0 = step * KB_PER_STEP;
        uint32_t sa[MT][2];
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
                sa[i][hh] = a_row[i][hh] >= 0 ? scale4(as, a_row[i][hh], (int64_t)a_row[i][hh] + 1, nbk, kb0, a_aligned)
                                              : 0x7f7f7f7fu;
        uint32_t sw[NT][2];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                int colt = wcol + j * 8 + t * 2 + c - half * NCOL;
                sw[j][c] = scale4(ws_warp, n0 + colt, n, nbk, kb0, w_aligned);
            }

        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* this step's tiles are in; everyone is done with the previous step */
        if (step + STAGES - 1 < steps) load(step + STAGES - 1);
        cp_async_commit();

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
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const uint8_t *p = sB + (wcol + j * 8 + g) * LDS_B + kb * 16 + t * 2;
                bf[j][0] = e2m1x4_to_e4m3x4(*(const uint16_t *)p);
                bf[j][1] = e2m1x4_to_e4m3x4(*(const uint16_t *)(p + 8));
            }
#pragma unroll
            for (int i = 0; i < MT; i++) {
                float a0 = scale_at(sa[i][0], kb), a1 = scale_at(sa[i][1], kb);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    float w0 = scale_at(sw[j][0], kb), w1 = scale_at(sw[j][1], kb);
                    float f[4] = {__fmul_rn(a0, w0), __fmul_rn(a0, w1), __fmul_rn(a1, w0), __fmul_rn(a1, w1)};
                    float d[4];
                    mma_e4m3(af[i], bf[j][0], bf[j][1], d);
#pragma unroll
                    for (int c = 0; c < 4; c++) acc[i][j][c] = __fadd_rn(acc[i][j][c], __fmul_rn(d[c], f[c]));
                }
            }
        }
    }
    cp_async_wait<0>();

    if constexpr (MODE == MODE_DOWN) {
        const int pairs = (n % 2) == 0;
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int64_t p = p0 + wrow + i * 16 + g + hh * 8;
                if (p >= pend) continue;
                uint16_t *yr = y + p * n;
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    int64_t col = n0 + wcol + j * 8 + t * 2;
                    tide_store_bf16_pair(yr, col, n, pairs, acc[i][j][2 * hh], acc[i][j][2 * hh + 1]);
                }
            }
    } else {
        /* g (columns 0..NCOL-1 of the tile) and u (NCOL..BN-1), rounded to
         * bf16 as the CPU's linear does, meet in shared memory */
        __syncthreads(); /* every warp is done reading the stages */
        float *ct = (float *)smem;
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int rl = wrow + i * 16 + g + hh * 8;
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    int cl = wcol + j * 8 + t * 2;
                    ct[rl * G::LDC + cl] = tide_dev_bf16_dec(tide_dev_bf16_enc(acc[i][j][2 * hh]));
                    ct[rl * G::LDC + cl + 1] = tide_dev_bf16_dec(tide_dev_bf16_enc(acc[i][j][2 * hh + 1]));
                }
            }
        __syncthreads();
        for (int q = threadIdx.x; q < C::BM * NCOL; q += C::THREADS) {
            int rl = q / NCOL, cl = q % NCOL;
            int64_t p = p0 + rl, col = n0 + cl;
            if (p >= pend || col >= n) continue;
            h[p * n + col] = tide_dev_swiglu(ct[rl * G::LDC + cl], ct[rl * G::LDC + NCOL + cl], limit, 1, pos_w[p]);
        }
    }
}

/* ---- 6. the combination ---- */

constexpr int COMBINE_THREADS = 256;

__global__ void __launch_bounds__(COMBINE_THREADS)
    combine_kernel(const int32_t *__restrict__ order, int k, const uint16_t *__restrict__ ye,
                   const uint16_t *__restrict__ shared, int64_t rows, int64_t dim, float *__restrict__ y) {
    const int64_t nq = dim / 4, q = (int64_t)blockIdx.x * COMBINE_THREADS + threadIdx.x;
    if (q >= rows * nq) return;
    const int64_t r = q / nq, d = (q % nq) * 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < k; i++) {
        int p = order[r * k + i];
        if (p < 0) continue;
        uint2 v = *(const uint2 *)(ye + (int64_t)p * dim + d);
        acc[0] = __fadd_rn(acc[0], tide_dev_bf16_dec((uint16_t)(v.x & 0xffffu)));
        acc[1] = __fadd_rn(acc[1], tide_dev_bf16_dec((uint16_t)(v.x >> 16)));
        acc[2] = __fadd_rn(acc[2], tide_dev_bf16_dec((uint16_t)(v.y & 0xffffu)));
        acc[3] = __fadd_rn(acc[3], tide_dev_bf16_dec((uint16_t)(v.y >> 16)));
    }
    if (shared) {
        uint2 v = *(const uint2 *)(shared + r * dim + d);
        uint32_t sv[4] = {v.x & 0xffffu, v.x >> 16, v.y & 0xffffu, v.y >> 16};
#pragma unroll
        for (int c = 0; c < 4; c++)
            acc[c] = tide_dev_bf16_dec(tide_dev_bf16_enc(__fadd_rn(acc[c], tide_dev_bf16_dec((uint16_t)sv[c]))));
    }
    *(float4 *)(y + r * dim + d) = make_float4(acc[0], acc[1], acc[2], acc[3]);
}

/* ---- host ---- */

using Skinny = cfg<W_FP4, 16, 64, 1, 4, 6, 3>;
using Wide = cfg<W_FP4, 128, 128, 2, 4, 3, 1>;

/* The workspace layout of one call: byte offsets, 256-aligned. */
struct layout {
    int wide, bm;
    int64_t P, max_tiles;
    size_t bucket_start, tile_expert, tile_first, n_tiles, pos_row, pos_w, order, slot_pos, xq, xs, h, hq, hs, ye,
        total;
};

size_t take(size_t *at, size_t bytes) {
    size_t o = *at;
    *at += (bytes + 255) & ~(size_t)255;
    return o;
}

layout plan(int n_experts, int64_t dim, int64_t inter, int64_t rows, int k) {
    layout L;
    L.P = rows * k;
    /* the wide tile once the average bucket fills a good part of 128 rows */
    L.wide = L.P >= 32 * (int64_t)n_experts;
    L.bm = L.wide ? Wide::BM : Skinny::BM;
    L.max_tiles = (L.P + L.bm - 1) / L.bm + (L.P < n_experts ? L.P : n_experts);
    size_t at = 0, P = (size_t)L.P;
    L.bucket_start = take(&at, (size_t)(n_experts + 1) * 4);
    L.tile_expert = take(&at, (size_t)L.max_tiles * 4);
    L.tile_first = take(&at, (size_t)L.max_tiles * 4);
    L.n_tiles = take(&at, 4);
    L.pos_row = take(&at, P * 4);
    L.pos_w = take(&at, P * 4);
    L.order = take(&at, P * 4);
    L.slot_pos = take(&at, P * 4);
    L.xq = take(&at, (size_t)(rows * dim));
    L.xs = take(&at, (size_t)(rows * (dim / 32)));
    L.h = take(&at, P * (size_t)inter * 4);
    L.hq = take(&at, P * (size_t)inter);
    L.hs = take(&at, P * (size_t)(inter / 32));
    L.ye = take(&at, P * (size_t)dim * 2);
    L.total = at;
    return L;
}

template <int MODE, class C>
int grouped_run(const char *name, const layout &L, const uint8_t *a, const uint8_t *as, const tide_cuda_experts *ex,
                const sched &s, int64_t n, int64_t k, float limit, float *h, uint16_t *y, cudaStream_t stream,
                tide_status *st) {
    using G = grp<MODE, C>;
    int64_t gy = (n + G::NCOL - 1) / G::NCOL;
    if (L.max_tiles > 0x7fffffff || gy > 65535)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda moe_experts: %s grid %lld x %lld is too large", name,
                         (long long)L.max_tiles, (long long)gy);
    if (tide_cuda_check(cudaFuncSetAttribute(grouped_kernel<MODE, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             G::SMEM),
                        "raising the grouped GEMM's shared-memory limit", st) != 0)
        return -1;
    grouped_kernel<MODE, C><<<dim3((unsigned)L.max_tiles, (unsigned)gy), C::THREADS, G::SMEM, stream>>>(
        a, as, ex->table, s.bucket_start, s.tile_expert, s.tile_first, s.n_tiles, s.pos_row, s.pos_w, n, k, limit, h,
        y);
    return tide_cuda_launched(name, st);
}

template <class C>
int run_gemms(const layout &L, uint8_t *base, const tide_cuda_experts *ex, const sched &s, float limit,
              cudaStream_t stream, tide_status *st) {
    int64_t D = ex->dim, I = ex->inter;
    if (grouped_run<MODE_GATE_UP, C>("moe_experts gate/up", L, base + L.xq, base + L.xs, ex, s, I, D, limit,
                                     (float *)(base + L.h), NULL, stream, st) != 0)
        return -1;
    if (tide_cuda_quant_fp8_act((const float *)(base + L.h), L.P, I, base + L.hq, base + L.hs,
                                (tide_cuda_stream)stream, st) != 0)
        return -1;
    return grouped_run<MODE_DOWN, C>("moe_experts down", L, base + L.hq, base + L.hs, ex, s, D, I, limit, NULL,
                                     (uint16_t *)(base + L.ye), stream, st);
}

int dims_ok(int n_experts, int64_t dim, int64_t inter) {
    return n_experts >= 1 && n_experts <= TIDE_CUDA_EXPERTS_MAX && dim >= 32 && dim % 32 == 0 && inter >= 32 &&
           inter % 32 == 0 && dim <= (1LL << 20) && inter <= (1LL << 20); /* grid y = n / 32 <= 65535 */
}

} /* namespace */

extern "C" int tide_cuda_experts_create(const tide_cuda_expert_weights *experts, int n_experts, int64_t dim,
                                        int64_t inter, tide_cuda_experts **out, tide_status *st) {
    if (!out) return tide_fail(st, TIDE_ERR_INVALID, "cuda experts_create: NULL out");
    *out = NULL;
    if (!experts || !dims_ok(n_experts, dim, inter))
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda experts_create: %d experts (1..%d), dim %lld, inter %lld (multiples of 32, 32..2^20)",
                         n_experts, TIDE_CUDA_EXPERTS_MAX, (long long)dim, (long long)inter);
    const uint8_t **host = (const uint8_t **)malloc((size_t)n_experts * PTR_N * sizeof *host);
    if (!host) return tide_fail(st, TIDE_ERR_NOMEM, "cuda experts_create: out of memory");
    for (int e = 0; e < n_experts; e++) {
        const tide_cuda_expert_weights *w = &experts[e];
        const uint8_t *p[PTR_N] = {w->w1, w->w1_scale, w->w3, w->w3_scale, w->w2, w->w2_scale};
        for (int j = 0; j < PTR_N; j++) {
            int need = j % 2 == 0 ? 16 : 4; /* packed weights: 16-byte copies; scales: 4-byte loads */
            if (!p[j] || (uintptr_t)p[j] % (uintptr_t)need != 0) {
                free(host);
                return tide_fail(st, TIDE_ERR_INVALID,
                                 "cuda experts_create: expert %d: tensor %d is NULL or not %d-byte aligned", e, j, need);
            }
            host[(size_t)e * PTR_N + j] = p[j];
        }
    }
    tide_cuda_experts *ex = (tide_cuda_experts *)calloc(1, sizeof *ex);
    if (!ex) {
        free(host);
        return tide_fail(st, TIDE_ERR_NOMEM, "cuda experts_create: out of memory");
    }
    ex->n_experts = n_experts;
    ex->dim = dim;
    ex->inter = inter;
    size_t bytes = (size_t)n_experts * PTR_N * sizeof *host;
    void *dev = NULL;
    if (tide_cuda_check(cudaMalloc(&dev, bytes), "allocating the expert table", st) != 0 ||
        tide_cuda_check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "uploading the expert table", st) != 0) {
        cudaFree(dev);
        free(host);
        free(ex);
        return -1;
    }
    free(host);
    ex->table = (const uint8_t **)dev;
    *out = ex;
    return 0;
}

extern "C" void tide_cuda_experts_destroy(tide_cuda_experts *ex) {
    if (!ex) return;
    cudaFree((void *)ex->table);
    free(ex);
}

extern "C" size_t tide_cuda_moe_experts_workspace(const tide_cuda_experts *ex, int64_t rows, int k) {
    if (!ex || rows < 0 || k < 1 || k > TIDE_CUDA_EXPERTS_MAX_K) return 0;
    return plan(ex->n_experts, ex->dim, ex->inter, rows, k).total;
}

extern "C" int tide_cuda_moe_experts(const tide_cuda_experts *ex, const float *x, int64_t rows, const int32_t *idx,
                                     const float *w, int k, double swiglu_limit, const uint16_t *shared, float *y,
                                     void *workspace, size_t workspace_bytes, tide_cuda_stream stream,
                                     tide_status *st) {
    if (!ex) return tide_fail(st, TIDE_ERR_INVALID, "cuda moe_experts: NULL experts");
    if (rows < 0 || k < 1 || k > TIDE_CUDA_EXPERTS_MAX_K || rows * k > 0x7fffffffLL / 2)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda moe_experts: rows %lld, k %d (1..%d)", (long long)rows, k,
                         TIDE_CUDA_EXPERTS_MAX_K);
    if (rows == 0) return 0;
    if (!x || !idx || !w || !y || !workspace) return tide_fail(st, TIDE_ERR_INVALID, "cuda moe_experts: NULL pointer");
    if ((uintptr_t)x % 16 || (uintptr_t)y % 16 || (uintptr_t)shared % 8 || (uintptr_t)workspace % 256)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "cuda moe_experts: x and y must be 16-byte aligned, shared 8-byte, the workspace 256-byte");
    layout L = plan(ex->n_experts, ex->dim, ex->inter, rows, k);
    if (workspace_bytes < L.total)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda moe_experts: workspace of %zu bytes, %zu needed", workspace_bytes,
                         L.total);
    cudaStream_t s = (cudaStream_t)stream;
    uint8_t *base = (uint8_t *)workspace;
    sched sc = {(int32_t *)(base + L.bucket_start), (int32_t *)(base + L.tile_expert), (int32_t *)(base + L.tile_first),
                (int32_t *)(base + L.n_tiles),      (int32_t *)(base + L.pos_row),     (float *)(base + L.pos_w),
                (int32_t *)(base + L.order),        (int32_t *)(base + L.slot_pos)};
    size_t bsmem = (size_t)(3 * ex->n_experts + 2) * sizeof(int);
    bucket_kernel<<<1, BUCKET_THREADS, bsmem, s>>>(idx, w, rows, k, ex->n_experts, L.bm, sc);
    if (tide_cuda_launched("moe_experts bucket_kernel", st) != 0) return -1;
    if (tide_cuda_quant_fp8_act(x, rows, ex->dim, base + L.xq, base + L.xs, stream, st) != 0) return -1;
    float limit = (float)swiglu_limit;
    int rc = L.wide ? run_gemms<Wide>(L, base, ex, sc, limit, s, st) : run_gemms<Skinny>(L, base, ex, sc, limit, s, st);
    if (rc != 0) return -1;
    int64_t quads = rows * (ex->dim / 4);
    combine_kernel<<<(unsigned)((quads + COMBINE_THREADS - 1) / COMBINE_THREADS), COMBINE_THREADS, 0, s>>>(
        sc.order, k, (const uint16_t *)(base + L.ye), shared, rows, ex->dim, y);
    return tide_cuda_launched("moe_experts combine_kernel", st);
}
