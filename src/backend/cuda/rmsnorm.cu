/* RMSNorm on the GPU, bit-identical to the CPU backend (tide_cpu_rmsnorm):
 * y = bf16(w * (x * (1 / sqrt(mean(x^2) + eps)))), all in f32.
 *
 * The only order-sensitive step is the f32 sum of squares, which the CPU
 * does in numpy's pairwise order (tide_cpu_sum_np): a row of n > 128 splits
 * at n/2 rounded down to a multiple of 8, recursively, down to leaves of at
 * most 128 values; a leaf is summed with eight running sums (r[j] over
 * elements j, j+8, ...), combined ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then
 * its last n % 8 values added in order; the halves are added left + right.
 *
 * That tree depends only on dim, so the host lays it out once per call as a
 * plan passed by value (rms_plan, about 2 KiB): the leaves (start, length),
 * and the internal nodes grouped by height, each naming its two children,
 * so that the nodes of one height can be added in parallel.
 *
 * Tiling: one warp per row, 8 rows per 256-thread block.
 *   1. the lanes take the leaves round-robin (a 4096-wide row has 32 leaves,
 *      7168 has 56) and sum the squares of each, reading the row straight
 *      from global memory with 16-byte loads (a leaf starts on a multiple of
 *      8 values, so two float4 loads feed the eight running sums exactly);
 *   2. the leaf sums go to shared memory and the tree is added up height by
 *      height (__syncwarp between heights);
 *   3. every lane computes the same 1/sqrt(mean + eps) from the root and
 *      writes its share of the output with 16-byte loads of x and w.
 * Memory traffic: the row is read twice (the second time mostly from L1/L2)
 * and written once. y may alias x: every read of step 1 is done before the
 * warp's first write, and in step 3 each element is read and then written by
 * the same lane. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"

#define ROWS_PER_BLOCK 8
#define LEAF_MAX 128     /* numpy's pairwise block */
#define PLAN_LEAVES 160  /* dim <= 16384 needs at most 129 (checked for every dim) */
#define PLAN_HEIGHTS 16

/* The summation tree of one row length. Value indices: leaves 0..L-1, then
 * internal node i at L + i; nodes are ordered by height, so children always
 * come before their parent and the root is the last node. */
typedef struct {
    int n_leaves, n_heights;
    uint16_t leaf_start[PLAN_LEAVES];
    uint8_t leaf_len[PLAN_LEAVES]; /* 1..128 */
    uint16_t height_end[PLAN_HEIGHTS]; /* nodes [height_end[h-1], height_end[h]) have height h+1 */
    uint16_t child[PLAN_LEAVES][2];
} rms_plan;

/* ---- host: building the plan ---- */

typedef struct {
    int left, right, height; /* children as provisional value indices */
} tmp_node;

typedef struct {
    rms_plan *p;
    tmp_node nodes[PLAN_LEAVES];
    int n_nodes;
    int overflow; /* more leaves than PLAN_LEAVES (cannot happen for dim <= 16384) */
} plan_builder;

/* Adds the subtree of values [off, off + n); returns its provisional value
 * index (leaves first, internal nodes at PLAN_LEAVES + creation order) and
 * its height. */
static int plan_add(plan_builder *b, int off, int n, int *height) {
    if (n <= LEAF_MAX) {
        if (b->p->n_leaves >= PLAN_LEAVES) {
            b->overflow = 1;
            *height = 0;
            return 0;
        }
        int l = b->p->n_leaves++;
        b->p->leaf_start[l] = (uint16_t)off;
        b->p->leaf_len[l] = (uint8_t)n;
        *height = 0;
        return l;
    }
    int h = n / 2;
    h -= h % 8;
    int hl, hr;
    int left = plan_add(b, off, h, &hl);
    int right = plan_add(b, off + h, n - h, &hr);
    tmp_node *t = &b->nodes[b->n_nodes];
    t->left = left;
    t->right = right;
    t->height = (hl > hr ? hl : hr) + 1;
    *height = t->height;
    return PLAN_LEAVES + b->n_nodes++;
}

static int plan_build(int dim, rms_plan *p) {
    plan_builder b;
    memset(p, 0, sizeof *p);
    b.p = p;
    b.n_nodes = 0;
    b.overflow = 0;
    int root_height;
    (void)plan_add(&b, 0, dim, &root_height);
    if (b.overflow || root_height > PLAN_HEIGHTS) return -1;
    /* final index of each provisional node: stable order by height */
    int final_of[PLAN_LEAVES], next = 0;
    for (int h = 1; h <= root_height; h++) {
        for (int i = 0; i < b.n_nodes; i++)
            if (b.nodes[i].height == h) final_of[i] = next++;
        p->height_end[h - 1] = (uint16_t)next;
    }
    p->n_heights = root_height;
    for (int i = 0; i < b.n_nodes; i++) {
        int c[2] = {b.nodes[i].left, b.nodes[i].right};
        for (int k = 0; k < 2; k++)
            p->child[final_of[i]][k] =
                (uint16_t)(c[k] < PLAN_LEAVES ? c[k] : p->n_leaves + final_of[c[k] - PLAN_LEAVES]);
    }
    return 0;
}

/* ---- device ---- */

__device__ __forceinline__ float sq(float v) { return __fmul_rn(v, v); }

/* Sum of squares of one leaf (n <= 128) in tide_cpu_sum_np's order. */
__device__ float leaf_sum_sq(const float *x, int n, int vec) {
    if (n < 8) {
        float r = 0.0f;
        for (int i = 0; i < n; i++) r = __fadd_rn(r, sq(x[i]));
        return r;
    }
    float r[8];
    int i = 0;
    if (vec) { /* x + start is 32-byte aligned: starts are multiples of 8 */
        float4 a = *(const float4 *)x, b = *(const float4 *)(x + 4);
        r[0] = sq(a.x), r[1] = sq(a.y), r[2] = sq(a.z), r[3] = sq(a.w);
        r[4] = sq(b.x), r[5] = sq(b.y), r[6] = sq(b.z), r[7] = sq(b.w);
        for (i = 8; i + 8 <= n; i += 8) {
            a = *(const float4 *)(x + i), b = *(const float4 *)(x + i + 4);
            r[0] = __fadd_rn(r[0], sq(a.x)), r[1] = __fadd_rn(r[1], sq(a.y));
            r[2] = __fadd_rn(r[2], sq(a.z)), r[3] = __fadd_rn(r[3], sq(a.w));
            r[4] = __fadd_rn(r[4], sq(b.x)), r[5] = __fadd_rn(r[5], sq(b.y));
            r[6] = __fadd_rn(r[6], sq(b.z)), r[7] = __fadd_rn(r[7], sq(b.w));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) r[j] = sq(x[j]);
        for (i = 8; i + 8 <= n; i += 8) {
#pragma unroll
            for (int j = 0; j < 8; j++) r[j] = __fadd_rn(r[j], sq(x[i + j]));
        }
    }
    float res = __fadd_rn(__fadd_rn(__fadd_rn(r[0], r[1]), __fadd_rn(r[2], r[3])),
                          __fadd_rn(__fadd_rn(r[4], r[5]), __fadd_rn(r[6], r[7])));
    for (; i < n; i++) res = __fadd_rn(res, sq(x[i]));
    return res;
}

template <typename OutT> __device__ __forceinline__ void store1(OutT *y, int i, float v);
template <> __device__ __forceinline__ void store1<float>(float *y, int i, float v) {
    y[i] = tide_dev_bf16_dec(tide_dev_bf16_enc(v));
}
template <> __device__ __forceinline__ void store1<uint16_t>(uint16_t *y, int i, float v) { y[i] = tide_dev_bf16_enc(v); }

template <typename OutT> __device__ __forceinline__ void store4(OutT *y, int i, float4 v);
template <> __device__ __forceinline__ void store4<float>(float *y, int i, float4 v) {
    float4 o;
    o.x = tide_dev_bf16_dec(tide_dev_bf16_enc(v.x)), o.y = tide_dev_bf16_dec(tide_dev_bf16_enc(v.y));
    o.z = tide_dev_bf16_dec(tide_dev_bf16_enc(v.z)), o.w = tide_dev_bf16_dec(tide_dev_bf16_enc(v.w));
    *(float4 *)(y + i) = o;
}
template <> __device__ __forceinline__ void store4<uint16_t>(uint16_t *y, int i, float4 v) {
    uint2 o;
    o.x = (uint32_t)tide_dev_bf16_enc(v.x) | ((uint32_t)tide_dev_bf16_enc(v.y) << 16);
    o.y = (uint32_t)tide_dev_bf16_enc(v.z) | ((uint32_t)tide_dev_bf16_enc(v.w) << 16);
    *(uint2 *)(y + i) = o;
}

/* No __restrict__ on x / y: they may alias. vec: dim % 4 == 0 and x, w, y
 * aligned for 16-byte (y: 8-byte for bf16) accesses. */
template <typename OutT>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    rmsnorm_kernel(const float *x, int64_t rows, int dim, const float *__restrict__ w, float eps, OutT *y, int vec,
                   const __grid_constant__ rms_plan plan) {
    __shared__ float vals[ROWS_PER_BLOCK][2 * PLAN_LEAVES];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + warp;
    if (row >= rows) return; /* whole warps only; no block-wide barrier below */
    const float *xr = x + row * dim;
    OutT *yr = y + row * dim;
    float *v = vals[warp];
    const int nl = plan.n_leaves;

    for (int l = lane; l < nl; l += 32) v[l] = leaf_sum_sq(xr + plan.leaf_start[l], plan.leaf_len[l], vec);
    __syncwarp();
    int node = 0;
    for (int h = 0; h < plan.n_heights; h++) {
        int end = plan.height_end[h];
        for (int i = node + lane; i < end; i += 32) v[nl + i] = __fadd_rn(v[plan.child[i][0]], v[plan.child[i][1]]);
        node = end;
        __syncwarp();
    }
    float total = v[nl + node - 1 >= nl ? nl + node - 1 : 0]; /* the root: last node, or the only leaf */
    float mean = __fdiv_rn(total, (float)dim);
    float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));

    if (vec) {
        for (int i = lane * 4; i < dim; i += 128) {
            float4 a = *(const float4 *)(xr + i), b = *(const float4 *)(w + i), o;
            o.x = __fmul_rn(b.x, __fmul_rn(a.x, rs)), o.y = __fmul_rn(b.y, __fmul_rn(a.y, rs));
            o.z = __fmul_rn(b.z, __fmul_rn(a.z, rs)), o.w = __fmul_rn(b.w, __fmul_rn(a.w, rs));
            store4<OutT>(yr, i, o);
        }
    } else {
        for (int i = lane; i < dim; i += 32) store1<OutT>(yr, i, __fmul_rn(w[i], __fmul_rn(xr[i], rs)));
    }
}

template <typename OutT>
static int rmsnorm_launch(const float *x, int64_t rows, int64_t dim, const float *w, double eps, OutT *y,
                          tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || dim < 1 || dim > TIDE_CUDA_RMSNORM_MAX_DIM)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda rmsnorm: rows %lld, dim %lld (dim must be 1..%d)",
                         (long long)rows, (long long)dim, TIDE_CUDA_RMSNORM_MAX_DIM);
    if (rows == 0) return 0;
    if (!x || !w || !y) return tide_fail(st, TIDE_ERR_INVALID, "cuda rmsnorm: NULL pointer");
    int64_t grid = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (grid > 0x7fffffff)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda rmsnorm: %lld rows is too many for one launch", (long long)rows);
    rms_plan plan;
    if (plan_build((int)dim, &plan) != 0)
        return tide_fail(st, TIDE_ERR_INTERNAL, "cuda rmsnorm: summation plan for dim %lld does not fit", (long long)dim);
    uintptr_t yalign = sizeof(OutT) == 4 ? 16 : 8;
    int vec = dim % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0 && (uintptr_t)y % yalign == 0;
    rmsnorm_kernel<OutT><<<(unsigned)grid, 32 * ROWS_PER_BLOCK, 0, stream>>>(x, rows, (int)dim, w, (float)eps, y, vec,
                                                                             plan);
    return tide_cuda_launched("cuda rmsnorm: launch", st);
}

extern "C" int tide_cuda_rmsnorm_f32(const float *x, int64_t rows, int64_t dim, const float *w, double eps, float *y,
                                     tide_cuda_stream stream, tide_status *st) {
    return rmsnorm_launch<float>(x, rows, dim, w, eps, y, stream, st);
}

extern "C" int tide_cuda_rmsnorm_bf16(const float *x, int64_t rows, int64_t dim, const float *w, double eps,
                                      uint16_t *y, tide_cuda_stream stream, tide_status *st) {
    return rmsnorm_launch<uint16_t>(x, rows, dim, w, eps, y, stream, st);
}
