/* The forward pass's data movement as kernels (ops.h embed, gather_rows,
 * scatter_add, add_bf16, div_scalar, hc_mean), each bit-identical to the
 * CPU op of the same name (backend/cpu/cpu_mem.c): the same f32 operations
 * in the same order, with explicit _rn intrinsics so nvcc contracts nothing.
 * Index arrays are device copies of the host's. */
#include <stdint.h>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

namespace {

constexpr int GL_THREADS = 256;

unsigned blocks_for(int64_t work) {
    int64_t b = (work + GL_THREADS - 1) / GL_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

__global__ void embed_kernel(const void *table, int bf16, int64_t dim, const int32_t *ids, int64_t rows, int hc,
                             float *h) {
    const int64_t total = rows * dim, stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < total; i += stride) {
        int64_t r = i / dim, d = i % dim, src = (int64_t)ids[r] * dim + d;
        float v = bf16 ? tide_dev_bf16_dec(((const uint16_t *)table)[src]) : ((const float *)table)[src];
        for (int c = 0; c < hc; c++) h[(r * hc + c) * dim + d] = v;
    }
}

__global__ void gather_kernel(const uint8_t *src, int64_t width, const int64_t *idx, int64_t n, uint8_t *dst) {
    const int64_t total = n * width, stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < total; i += stride) {
        int64_t r = i / width, b = i % width;
        dst[i] = src[idx[r] * width + b];
    }
}

/* 4-byte units when every row is (the forward's rows always are). */
__global__ void gather4_kernel(const uint32_t *src, int64_t width, const int64_t *idx, int64_t n, uint32_t *dst) {
    const int64_t total = n * width, stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < total; i += stride) {
        int64_t r = i / width, b = i % width;
        dst[i] = src[idx[r] * width + b];
    }
}

/* One thread per column d walks the rows in order: the CPU's order even
 * when idx repeats a row. */
__global__ void scatter_add_kernel(const float *y, int64_t n, int64_t dim, const int64_t *idx, float *acc) {
    const int64_t stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t d = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; d < dim; d += stride)
        for (int64_t i = 0; i < n; i++) acc[idx[i] * dim + d] = __fadd_rn(acc[idx[i] * dim + d], y[i * dim + d]);
}

__global__ void add_bf16_kernel(const float *a, const float *b, int64_t n, float *out) {
    const int64_t stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < n; i += stride)
        out[i] = tide_dev_bf16_dec(tide_dev_bf16_enc(__fadd_rn(a[i], b[i])));
}

__global__ void div_scalar_kernel(float *x, int64_t n, float s) {
    const int64_t stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < n; i += stride) x[i] = __fdiv_rn(x[i], s);
}

__global__ void hc_mean_kernel(const float *h, int64_t rows, int hc, int64_t dim, float *out) {
    const int64_t total = rows * dim, stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < total; i += stride) {
        int64_t r = i / dim, d = i % dim;
        float sum = 0.0f;
        for (int k = 0; k < hc; k++) sum = __fadd_rn(sum, h[(r * hc + k) * dim + d]);
        out[i] = tide_dev_bf16_dec(tide_dev_bf16_enc(__fdiv_rn(sum, (float)hc)));
    }
}

} // namespace

extern "C" int tide_cuda_embed(const void *table, int bf16, int64_t dim, const int32_t *ids, int64_t rows, int hc,
                               float *h, tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || dim < 1 || hc < 1 || (rows > 0 && dim > INT64_MAX / rows / hc))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda embed: rows %lld, dim %lld, hc %d", (long long)rows,
                         (long long)dim, hc);
    if (rows == 0) return 0;
    if (!table || !ids || !h) return tide_fail(st, TIDE_ERR_INVALID, "cuda embed: NULL pointer");
    embed_kernel<<<blocks_for(rows * dim), GL_THREADS, 0, (cudaStream_t)stream>>>(table, bf16, dim, ids, rows, hc, h);
    return tide_cuda_launched("embed_kernel", st);
}

extern "C" int tide_cuda_gather_rows(const void *src, size_t width, const int64_t *idx, int64_t n, void *dst,
                                     tide_cuda_stream stream, tide_status *st) {
    if (n < 0 || width > ((size_t)1 << 40) || (n > 0 && (int64_t)width > INT64_MAX / n))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda gather_rows: n %lld, width %zu", (long long)n, width);
    if (n == 0 || width == 0) return 0;
    if (!src || !idx || !dst) return tide_fail(st, TIDE_ERR_INVALID, "cuda gather_rows: NULL pointer");
    int w4 = width % 4 == 0 && (uintptr_t)src % 4 == 0 && (uintptr_t)dst % 4 == 0;
    int64_t w = w4 ? (int64_t)width / 4 : (int64_t)width;
    if (w4)
        gather4_kernel<<<blocks_for(n * w), GL_THREADS, 0, (cudaStream_t)stream>>>(
            (const uint32_t *)src, w, idx, n, (uint32_t *)dst);
    else
        gather_kernel<<<blocks_for(n * w), GL_THREADS, 0, (cudaStream_t)stream>>>((const uint8_t *)src, w, idx, n,
                                                                                 (uint8_t *)dst);
    return tide_cuda_launched("gather_kernel", st);
}

extern "C" int tide_cuda_scatter_add(const float *y, int64_t n, int64_t dim, const int64_t *idx, float *acc,
                                     tide_cuda_stream stream, tide_status *st) {
    if (n < 0 || dim < 0) return tide_fail(st, TIDE_ERR_INVALID, "cuda scatter_add: n %lld, dim %lld", (long long)n,
                                           (long long)dim);
    if (n == 0 || dim == 0) return 0;
    if (!y || !idx || !acc) return tide_fail(st, TIDE_ERR_INVALID, "cuda scatter_add: NULL pointer");
    scatter_add_kernel<<<blocks_for(dim), GL_THREADS, 0, (cudaStream_t)stream>>>(y, n, dim, idx, acc);
    return tide_cuda_launched("scatter_add_kernel", st);
}

extern "C" int tide_cuda_add_bf16(const float *a, const float *b, int64_t n, float *out, tide_cuda_stream stream,
                                  tide_status *st) {
    if (n < 0) return tide_fail(st, TIDE_ERR_INVALID, "cuda add_bf16: n %lld", (long long)n);
    if (n == 0) return 0;
    if (!a || !b || !out) return tide_fail(st, TIDE_ERR_INVALID, "cuda add_bf16: NULL pointer");
    add_bf16_kernel<<<blocks_for(n), GL_THREADS, 0, (cudaStream_t)stream>>>(a, b, n, out);
    return tide_cuda_launched("add_bf16_kernel", st);
}

extern "C" int tide_cuda_div_scalar(float *x, int64_t n, float s, tide_cuda_stream stream, tide_status *st) {
    if (n < 0) return tide_fail(st, TIDE_ERR_INVALID, "cuda div_scalar: n %lld", (long long)n);
    if (n == 0) return 0;
    if (!x) return tide_fail(st, TIDE_ERR_INVALID, "cuda div_scalar: NULL pointer");
    div_scalar_kernel<<<blocks_for(n), GL_THREADS, 0, (cudaStream_t)stream>>>(x, n, s);
    return tide_cuda_launched("div_scalar_kernel", st);
}

extern "C" int tide_cuda_hc_mean(const float *h, int64_t rows, int hc, int64_t dim, float *out,
                                 tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || hc < 1 || dim < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_mean: rows %lld, hc %d, dim %lld", (long long)rows, hc,
                         (long long)dim);
    if (rows == 0 || dim == 0) return 0;
    if (!h || !out) return tide_fail(st, TIDE_ERR_INVALID, "cuda hc_mean: NULL pointer");
    hc_mean_kernel<<<blocks_for(rows * dim), GL_THREADS, 0, (cudaStream_t)stream>>>(h, rows, hc, dim, out);
    return tide_cuda_launched("hc_mean_kernel", st);
}

extern "C" int tide_cuda_memcpy_any(void *dst, const void *src, size_t bytes, tide_status *st) {
    if (bytes == 0) return 0;
    return tide_cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy", st);
}

extern "C" void tide_cuda_host_guard(const tide_cuda_span *spans, size_t n, int open) {
    (void)spans;
    (void)n;
    (void)open;
}
