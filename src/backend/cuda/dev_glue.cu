/* The device-resident step's glue (cuda_kernels.h, "device-resident step"):
 * streams, CUDA graphs and timing, free-memory queries, synthetic contents
 * generated on the device, and the small data-movement kernels between the
 * op kernels (bf16 -> f32, row scatter, group transpose, attention index
 * rows). */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/num_dev.cuh"

namespace {

constexpr int GL_THREADS = 256;

unsigned grid_of(int64_t work) {
    int64_t b = (work + GL_THREADS - 1) / GL_THREADS;
    if (b < 1) b = 1;
    if (b > 65535LL * 32) b = 65535LL * 32; /* grid-stride loops cover the rest */
    return (unsigned)b;
}

/* splitmix64: a counter-based generator, so every element is independent
 * of the launch shape. */
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A standard normal from two uniforms (Box-Muller). */
__device__ __forceinline__ float normal_of(uint64_t r) {
    float u1 = ((float)(uint32_t)(r >> 40) + 1.0f) * (1.0f / 16777217.0f);
    float u2 = (float)(uint32_t)(r & 0xffffff) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

__global__ void fill_kernel(uint8_t *p, int64_t n, int kind, float scale, int32_t lo, int32_t hi, uint64_t seed) {
    const int64_t stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < n; i += stride) {
        uint64_t r = mix64(seed ^ mix64((uint64_t)i));
        switch (kind) {
        case TIDE_CUDA_FILL_F32: ((float *)p)[i] = normal_of(r) * scale; break;
        case TIDE_CUDA_FILL_BF16: ((uint16_t *)p)[i] = tide_dev_bf16_enc(normal_of(r) * scale); break;
        case TIDE_CUDA_FILL_E4M3: p[i] = (uint8_t)tide_dev_e4m3_enc(normal_of(r) * scale); break;
        case TIDE_CUDA_FILL_BYTES: p[i] = (uint8_t)(r >> 24); break;
        case TIDE_CUDA_FILL_CODE: p[i] = (uint8_t)(lo + (int32_t)((r >> 33) % (uint64_t)(hi - lo + 1))); break;
        default: /* TIDE_CUDA_FILL_I32 */
            ((int32_t *)p)[i] = lo + (int32_t)((r >> 33) % (uint64_t)(hi - lo + 1));
            break;
        }
    }
}

__global__ void bf16_to_f32_kernel(const uint16_t *__restrict__ x, int64_t n, float *__restrict__ y) {
    const int64_t stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < n; i += stride) y[i] = tide_dev_bf16_dec(x[i]);
}

__global__ void scatter_rows_kernel(const float *__restrict__ src, int64_t rows, int64_t dim,
                                    const int32_t *__restrict__ dst_row, float *__restrict__ dst) {
    const int64_t n = rows * dim, stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < n; i += stride) {
        int64_t r = i / dim, d = i - r * dim;
        int32_t to = dst_row[r];
        if (to >= 0) dst[(int64_t)to * dim + d] = src[i];
    }
}

__global__ void transpose01_kernel(const float *__restrict__ x, int64_t a, int64_t b, int64_t c,
                                   float *__restrict__ y) {
    const int64_t n = a * b * c, stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < n; i += stride) {
        int64_t ia = i / (b * c), rem = i - ia * b * c, ib = rem / c, ic = rem - ib * c;
        y[(ib * a + ia) * c + ic] = x[i];
    }
}

__global__ void attn_idx_kernel(int64_t rows, int win, int k, const int32_t *__restrict__ win_base,
                                const int32_t *__restrict__ win_len, const int32_t *__restrict__ lat_base,
                                const int32_t *__restrict__ topk, int32_t *__restrict__ idx) {
    const int w = win + k;
    const int64_t n = rows * w, stride = (int64_t)gridDim.x * GL_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * GL_THREADS + threadIdx.x; i < n; i += stride) {
        int64_t r = i / w;
        int j = (int)(i - r * w);
        int32_t v;
        if (j < win) v = j < win_len[r] ? win_base[r] + j : -1;
        else {
            int32_t t = topk[r * k + (j - win)];
            v = t >= 0 ? lat_base[r] + t : -1;
        }
        idx[i] = v;
    }
}

} /* namespace */

extern "C" int tide_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, tide_status *st) {
    return tide_cuda_check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo", st);
}

extern "C" int tide_cuda_stream_create(tide_cuda_stream *s, tide_status *st) {
    cudaStream_t c = NULL;
    if (tide_cuda_check(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking), "cudaStreamCreate", st) != 0) return -1;
    *s = (tide_cuda_stream)c;
    return 0;
}

extern "C" void tide_cuda_stream_destroy(tide_cuda_stream s) {
    if (s) (void)cudaStreamDestroy((cudaStream_t)s);
}

extern "C" int tide_cuda_stream_sync(tide_cuda_stream s, tide_status *st) {
    return tide_cuda_check(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize", st);
}

extern "C" int tide_cuda_graph_begin(tide_cuda_stream s, tide_status *st) {
    return tide_cuda_check(cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeRelaxed),
                           "cudaStreamBeginCapture", st);
}

extern "C" int tide_cuda_graph_end(tide_cuda_stream s, tide_cuda_graph *out, tide_status *st) {
    *out = NULL;
    cudaGraph_t g = NULL;
    if (tide_cuda_check(cudaStreamEndCapture((cudaStream_t)s, &g), "cudaStreamEndCapture", st) != 0) {
        if (g) (void)cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return -1;
    }
    cudaGraphExec_t e = NULL;
    int rc = tide_cuda_check(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate", st);
    (void)cudaGraphDestroy(g);
    if (rc != 0) {
        (void)cudaGetLastError();
        return -1;
    }
    *out = (tide_cuda_graph)e;
    return 0;
}

extern "C" int tide_cuda_graph_launch(tide_cuda_graph g, tide_cuda_stream s, tide_status *st) {
    return tide_cuda_check(cudaGraphLaunch((cudaGraphExec_t)g, (cudaStream_t)s), "cudaGraphLaunch", st);
}

extern "C" void tide_cuda_graph_destroy(tide_cuda_graph g) {
    if (g) (void)cudaGraphExecDestroy((cudaGraphExec_t)g);
}

extern "C" int tide_cuda_timer_create(tide_cuda_timer *t, tide_status *st) {
    cudaEvent_t a = NULL, b = NULL;
    if (tide_cuda_check(cudaEventCreate(&a), "cudaEventCreate", st) != 0) return -1;
    if (tide_cuda_check(cudaEventCreate(&b), "cudaEventCreate", st) != 0) {
        (void)cudaEventDestroy(a);
        return -1;
    }
    t->start = a;
    t->stop = b;
    return 0;
}

extern "C" void tide_cuda_timer_destroy(tide_cuda_timer *t) {
    if (t->start) (void)cudaEventDestroy((cudaEvent_t)t->start);
    if (t->stop) (void)cudaEventDestroy((cudaEvent_t)t->stop);
    t->start = t->stop = NULL;
}

extern "C" int tide_cuda_timer_mark(tide_cuda_timer *t, int which, tide_cuda_stream s, tide_status *st) {
    return tide_cuda_check(cudaEventRecord((cudaEvent_t)(which ? t->stop : t->start), (cudaStream_t)s),
                           "cudaEventRecord", st);
}

extern "C" int tide_cuda_timer_ms(tide_cuda_timer *t, double *ms, tide_status *st) {
    float f = 0;
    if (tide_cuda_check(cudaEventSynchronize((cudaEvent_t)t->stop), "cudaEventSynchronize", st) != 0 ||
        tide_cuda_check(cudaEventElapsedTime(&f, (cudaEvent_t)t->start, (cudaEvent_t)t->stop), "cudaEventElapsedTime",
                        st) != 0)
        return -1;
    *ms = f;
    return 0;
}

extern "C" int tide_cuda_fill(void *p, size_t count, int kind, float scale, int32_t lo, int32_t hi, uint64_t seed,
                              tide_cuda_stream stream, tide_status *st) {
    if (kind < 0 || kind > TIDE_CUDA_FILL_I32 || count > ((size_t)1 << 40) || (count && !p) ||
        ((kind == TIDE_CUDA_FILL_I32 || kind == TIDE_CUDA_FILL_CODE) && hi < lo) ||
        (kind == TIDE_CUDA_FILL_CODE && (lo < 0 || hi > 255)))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda fill: kind %d, %zu elements, range %d..%d", kind, count, lo, hi);
    if (count == 0) return 0;
    fill_kernel<<<grid_of((int64_t)count), GL_THREADS, 0, (cudaStream_t)stream>>>((uint8_t *)p, (int64_t)count, kind,
                                                                                  scale, lo, hi, seed);
    return tide_cuda_launched("fill_kernel", st);
}

extern "C" int tide_cuda_bf16_to_f32(const uint16_t *x, int64_t n, float *y, tide_cuda_stream stream,
                                     tide_status *st) {
    if (n < 0) return tide_fail(st, TIDE_ERR_INVALID, "cuda bf16_to_f32: n %lld", (long long)n);
    if (n == 0) return 0;
    if (!x || !y) return tide_fail(st, TIDE_ERR_INVALID, "cuda bf16_to_f32: NULL pointer");
    bf16_to_f32_kernel<<<grid_of(n), GL_THREADS, 0, (cudaStream_t)stream>>>(x, n, y);
    return tide_cuda_launched("bf16_to_f32_kernel", st);
}

extern "C" int tide_cuda_scatter_rows(const float *src, int64_t rows, int64_t dim, const int32_t *dst_row, float *dst,
                                      tide_cuda_stream stream, tide_status *st) {
    if (rows < 0 || dim < 1 || (rows > 0 && dim > INT64_MAX / rows))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda scatter_rows: rows %lld, dim %lld", (long long)rows,
                         (long long)dim);
    if (rows == 0) return 0;
    if (!src || !dst_row || !dst) return tide_fail(st, TIDE_ERR_INVALID, "cuda scatter_rows: NULL pointer");
    scatter_rows_kernel<<<grid_of(rows * dim), GL_THREADS, 0, (cudaStream_t)stream>>>(src, rows, dim, dst_row, dst);
    return tide_cuda_launched("scatter_rows_kernel", st);
}

extern "C" int tide_cuda_transpose01(const float *x, int64_t a, int64_t b, int64_t c, float *y,
                                     tide_cuda_stream stream, tide_status *st) {
    if (a < 0 || b < 0 || c < 0 || (a && b && c && (b > INT64_MAX / a || c > INT64_MAX / (a * b))))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda transpose01: %lld x %lld x %lld", (long long)a, (long long)b,
                         (long long)c);
    if (a == 0 || b == 0 || c == 0) return 0;
    if (!x || !y || x == y) return tide_fail(st, TIDE_ERR_INVALID, "cuda transpose01: NULL or aliased pointers");
    transpose01_kernel<<<grid_of(a * b * c), GL_THREADS, 0, (cudaStream_t)stream>>>(x, a, b, c, y);
    return tide_cuda_launched("transpose01_kernel", st);
}

extern "C" int tide_cuda_attn_idx(int64_t rows, int win, int k, const int32_t *win_base, const int32_t *win_len,
                                  const int32_t *lat_base, const int32_t *topk, int32_t *idx, tide_cuda_stream stream,
                                  tide_status *st) {
    if (rows < 0 || win < 0 || k < 0 || win + k < 1)
        return tide_fail(st, TIDE_ERR_INVALID, "cuda attn_idx: rows %lld, window %d, k %d", (long long)rows, win, k);
    if (rows == 0) return 0;
    if (!win_base || !win_len || !idx || (k > 0 && (!lat_base || !topk)))
        return tide_fail(st, TIDE_ERR_INVALID, "cuda attn_idx: NULL pointer");
    attn_idx_kernel<<<grid_of(rows * (win + k)), GL_THREADS, 0, (cudaStream_t)stream>>>(rows, win, k, win_base,
                                                                                        win_len, lat_base, topk, idx);
    return tide_cuda_launched("attn_idx_kernel", st);
}

extern "C" int tide_cuda_event_create(void **ev, tide_status *st) {
    cudaEvent_t e = NULL;
    if (tide_cuda_check(cudaEventCreate(&e), "cudaEventCreate", st) != 0) return -1;
    *ev = e;
    return 0;
}

extern "C" void tide_cuda_event_destroy(void *ev) {
    if (ev) (void)cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" int tide_cuda_event_record(void *ev, tide_cuda_stream s, tide_status *st) {
    return tide_cuda_check(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)s), "cudaEventRecord", st);
}

extern "C" int tide_cuda_event_ms(void *a, void *b, double *ms, tide_status *st) {
    float f = 0;
    if (tide_cuda_check(cudaEventSynchronize((cudaEvent_t)b), "cudaEventSynchronize", st) != 0 ||
        tide_cuda_check(cudaEventElapsedTime(&f, (cudaEvent_t)a, (cudaEvent_t)b), "cudaEventElapsedTime", st) != 0)
        return -1;
    *ms = f;
    return 0;
}
